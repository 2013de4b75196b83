/*
 * ember: embedding tables sharded over the job's parameter servers.
 *
 * A table is [num_embeddings, embedding_dim] rows kept by the PS, row-wise
 * (row r on shard r % S of S PS) or table-wise (whole on one PS), each shard
 * with the rows' optimizer state.  One rank creates it (ember_table_create:
 * any rank but a PS; ember-train's master creates its models' tables); any
 * rank that looks it up or reads it opens it by name (ember_table_open,
 * which waits until it exists).  Tables are named uniquely in the job (the
 * coordinator keeps the names): the name is the PS's, the checkpoints'
 * ("NAME.weight") and every error's.  At most 64 tables live in a job at a
 * time (a PS serves table ids 0..63).
 *
 * Every initial value is drawn from (seed, global row, column)
 * (<ember/rng.h>), so a table holds the same values whatever its number of
 * shards.
 *
 * Threading and errors: as the job's (<ember/job.h>).  A table handle
 * borrows its job and must be closed (or destroyed) before the job is left.
 */
#ifndef EMBER_TABLE_H
#define EMBER_TABLE_H

#include <ember/dtype.h>
#include <ember/job.h>
#include <ember/optimizer.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_table ember_table_t;

#define EMBER_TABLE_NAME_MAX 32 /* bytes of a name, its NUL included */
#define EMBER_STALENESS_MAX  16 /* the most steps a lookup may be served behind */

typedef enum {
    EMBER_TABLE_INIT_NORMAL = 0,  /* N(0, 1), as nn.EmbeddingBag */
    EMBER_TABLE_INIT_UNIFORM = 1, /* U(-sqrt(1/rows), sqrt(1/rows)), TorchRec's default */
    EMBER_TABLE_INIT_ZEROS = 2,
    EMBER_TABLE_INIT_ROWS = 3 /* from initial_rows */
} ember_table_init_t;

typedef enum {
    EMBER_SHARD_ROW_WISE = 0,  /* row r on shard r % num_shards */
    EMBER_SHARD_TABLE_WISE = 1 /* whole on PS first_ps */
} ember_sharding_t;

typedef enum {
    EMBER_SYNC = 0, /* a step's update waits for every trainer's gradients */
    EMBER_ASYNC = 1 /* each gradient applied as it comes (Hogwild) */
} ember_consistency_t;

typedef enum {
    EMBER_REDUCE_SUM = 0, /* sync: the trainers' row gradients summed */
    EMBER_REDUCE_MEAN = 1 /* ... averaged */
} ember_sparse_reduce_t;

typedef struct {
    const char *name; /* 1..31 bytes of [A-Za-z0-9_.-] */
    int64_t num_embeddings;
    uint32_t embedding_dim; /* 1 .. 65536 */
    ember_dtype_t dtype;    /* the stored rows: EMBER_DTYPE_F32 or F16
                                * (lookups, gradients, reads stay fp32) */
    ember_table_init_t init;
    uint64_t seed;             /* NORMAL, UNIFORM */
    const float *initial_rows; /* INIT_ROWS: [num_embeddings][embedding_dim], host,
                                * borrowed for the call */
    ember_sharding_t sharding;
    uint32_t first_ps;            /* the first PS (row-wise) or the PS (table-wise) */
    uint32_t num_shards;          /* row-wise: PS first_ps .. + num_shards - 1 (at most
                          * 64); 0: every PS from first_ps on */
    ember_opt_config_t optimizer; /* applied by the PS to the rows a step
                                   * touched; ember_table_config_init: SGD lr
                                   * 0.01; another: ember_opt_config_default(
                                   * kind, lr, &config.optimizer) after init */
    ember_consistency_t consistency;
    uint32_t staleness; /* sync: a lookup of step s may see s - staleness
                         * steps applied (0: exactly s; at most
                         * EMBER_STALENESS_MAX); async: 0 */
    ember_sparse_reduce_t reduce;
    uint32_t trainers;  /* sync: the trainers whose gradients a step waits for,
                         * trainers 0 .. trainers - 1 (only they may look it
                         * up); 0: every trainer of the job */
    const char *device; /* where the PS keeps the rows: "cpu" (NULL) or "cuda" */
} ember_table_config_t;

/** Defaults: fp32, N(0,1) seed 0, row-wise over every PS, SGD lr 0.01
 * (ember_opt_config_default(EMBER_OPT_SGD, 0.01f, ...)), sync, staleness
 * 0, sum, every trainer, "cpu".  The name and the size are left for the
 * caller (NULL, 0).  Any thread; never blocks. */
void ember_table_config_init(ember_table_config_t *config);

/**
 * Create @config's table on its PS (every shard created, and loaded from
 * initial_rows with INIT_ROWS), then publish it so others can open it.
 * Blocks until every shard answered (each PS serving first).  Not on a PS.
 * @config borrowed for the call; *@table_p the caller's (close or destroy
 * it).  Errors: ERR_INVALID_PARAM (naming the setting: a name, sizes,
 * dtype, init, placement outside the job, optimizer hyper-parameters,
 * consistency, staleness, reduce, trainers, device), ERR_EXISTS (the name
 * is the job's already), ERR_OUT_OF_RANGE (64 tables live in the job),
 * ERR_NO_MEMORY (a PS could not hold it: named), a PS's error (its text
 * logged), ERR_TIMED_OUT (a PS not serving), ERR_PEER_LOST (a PS or the
 * coordinator), ERR_CANCELED.  A failed create leaves nothing on any PS
 * and frees the name.
 */
ember_status_t ember_table_create(ember_job_t *job, const ember_table_config_t *config,
                                  ember_table_t **table_p);

/** The job's table @name (borrowed for the call), waiting up to
 * EMBER_CONNECT_TIMEOUT for its creation (blocks, asking the
 * coordinator).  Not on a PS.  *@table_p the caller's (close it).  Errors:
 * ERR_NOT_FOUND (not created in time), ERR_INVALID_PARAM (a name too long,
 * called on a PS), ERR_CANCELED, ERR_PEER_LOST (the coordinator). */
ember_status_t ember_table_open(ember_job_t *job, const char *name, ember_table_t **table_p);

/** Forget this handle (the table stays on the PS); its name and device
 * strings go with it.  Never blocks.  NULL: nothing. */
void ember_table_close(ember_table_t *table);

/**
 * Free the table on its PS, its name in the job, and this handle (freed
 * whatever the status).  Its creator's handle only; no lookup of it may be
 * open anywhere (every ebc over it destroyed), else the lookups that come
 * later fail naming it.  Blocks until every shard answered.  Errors:
 * ERR_INVALID_PARAM (not the creator's handle: nothing freed but the
 * handle; or a PS's refusal while the job writes checkpoints: their
 * tables stay), a PS's (named), ERR_PEER_LOST, ERR_CANCELED.
 */
ember_status_t ember_table_destroy(ember_table_t *table);

/** Its configuration as created: placement resolved (num_shards, trainers
 * as the PS have them), name and device borrowed from the handle,
 * initial_rows NULL.  Borrowed from @table (valid until it is closed or
 * destroyed).  Never blocks, cannot fail. */
const ember_table_config_t *ember_table_config(const ember_table_t *table);

/**
 * Rows [first, first + count) of the whole table into @out ([count][dim]
 * floats, host, the caller's), from every shard.  Blocks (calls to each
 * shard's PS).  Any handle (created or opened).
 *
 * What a read of a sync table sees (a PS serves a trainer's requests in
 * the order they reach it, and applies step s in the handler that takes
 * the last of step s's gradients):
 *   - before the first push of any of the table's trainers (say trainer
 *     0 before its first ember_lookup_backward): the initial rows, since
 *     no step is applied without every trainer's gradients;
 *   - step s applied, once every one of the table's trainers had its
 *     pushes of step s taken, each by its backward of step s with
 *     EMBER_BACKWARD_WAIT or by ember_ebc_flush after it, and the reader
 *     then met them (ember_job_barrier after those calls);
 *   - while a step is being applied (its gradients still arriving), some
 *     shards' rows of step s and others' of step s - 1: read between steps.
 * Async tables apply each push as it is taken: a read after every
 * trainer's flush and a barrier sees them all.
 * Errors: ERR_OUT_OF_RANGE (rows outside the table), ERR_INVALID_PARAM
 * (@out NULL with count > 0), ERR_NO_MEMORY, a PS's (named), ERR_CANCELED.
 */
ember_status_t ember_table_read_rows(ember_table_t *table, int64_t first, int64_t count,
                                     float *out);

/**
 * The table steps with @optimizer (borrowed for the call; copied) from now
 * on: PyTorch names a table's optimizer after the table exists
 * (DistributedOptimizer).  Any handle (created or opened); any rank but a
 * PS.  Each shard's PS compares it with the shard's optimizer: equal
 * (field for field, bit for bit): nothing changes, its state kept, so
 * every trainer may call it with the same config; else a new optimizer
 * replaces the old one and its state restarts (SGD momentum and Adam's
 * moments at zero, Adagrad's sums at initial_accumulator, step counts at
 * 0), as a table created with it.  *@changed_p (may be NULL; the
 * caller's) 1 when any shard changed, else 0.  This handle's
 * ember_table_config() gives @optimizer after (OK); other handles, and
 * ember_table_open later, keep the config the table was created with.
 * Blocks until every shard answered.  Call it between steps (as
 * ember_table_write_rows): a step being applied meanwhile may take either
 * optimizer.  Errors: ERR_INVALID_PARAM (@optimizer's settings, naming
 * the setting; called on a PS; NULL; a job that writes checkpoints keeps
 * its optimizers: another config refused, naming the table), a PS's
 * (named), ERR_PEER_LOST, ERR_TIMED_OUT, ERR_CANCELED.  A failure may
 * leave some shards changed and others not: set it again.
 */
ember_status_t ember_table_set_optimizer(ember_table_t *table, const ember_opt_config_t *optimizer,
                                         int *changed_p);

/** Rows [first, first + count) from @rows (host, borrowed for the call) onto
 * every shard that owns them (fp16 tables round them); a step being
 * applied meanwhile may be applied to the old rows or the new: write
 * between steps, as ember_table_read_rows reads.  The optimizer state of
 * the rows is left as it is.  Blocks.  Errors: as ember_table_read_rows. */
ember_status_t ember_table_write_rows(ember_table_t *table, int64_t first, int64_t count,
                                      const float *rows);

#ifdef __cplusplus
}
#endif
#endif
