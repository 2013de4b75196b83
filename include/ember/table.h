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

/* A table's kind.  A fixed table holds rows 0 .. num_embeddings - 1 and
 * refuses any other id.  A dynamic table takes any 64-bit id as a key (an
 * int64 read as its 64 bits: -1 is key 2^64 - 1), with no modulo and no
 * collision: keys are placed on the PS by a hash of the key, each PS keeps
 * a hash map of its keys to rows, and rows come and go:
 *   - admission: a key gets a row once it has been seen admit_count times
 *     (occurrences in training lookups, counted when each step is
 *     applied); until then a lookup returns its initial values (drawn from
 *     (seed, key) as row `key` of a fixed table would be), nothing is
 *     stored, and its gradients are dropped and counted;
 *   - eviction: at most budget_rows rows on each PS (0: no bound but the
 *     PS's room, 4 GiB of rows); when a step's new keys do not fit, rows
 *     not seen in that step go, least recently seen first (LRU) or the
 *     lowest count first (LFU; counts decayed by lfu_decay a step); and
 *     rows unseen for evict_after steps go (0: never);
 *   - keys counted but holding no row are candidates, at most budget_rows
 *     of them: a new key replaces the least recently seen one not seen in
 *     the same step (dropped_candidates), or is not counted this time;
 *   - all of it at step boundaries, in trainer order, so that a sync run
 *     with staleness 0 is deterministic.
 * num_embeddings is then only the uniform init's size (sqrt(1/n) bound).
 * Made with ember_table_create_dynamic.
 * Rows are read and written by key (ember_table_read_keys /
 * _write_keys); checkpoints hold the keys, rows, optimizer state and
 * counters, and resume on any number of PS. */
typedef enum {
    EMBER_TABLE_FIXED = 0,
    EMBER_TABLE_DYNAMIC = 1
} ember_table_kind_t;

typedef enum {
    EMBER_EVICT_LRU = 0, /* least recently seen first */
    EMBER_EVICT_LFU = 1  /* lowest (decayed) count first, then least recent, then smaller key */
} ember_evict_t;

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

/* A dynamic table's settings (ABI 1.3; see ember_table_kind_t). */
typedef struct {
    uint32_t admit_count; /* >= 1: seen this many times before a row */
    uint32_t evict_after; /* steps unseen before a row goes, 0: never */
    int64_t budget_rows;  /* rows per PS, 0: no bound but the PS's room */
    ember_evict_t evict;  /* which rows go first when the budget is full */
    float lfu_decay;      /* LFU: each step's factor on the counts, (0, 1] */
} ember_table_dynamic_t;

/** Defaults: admit_count 1, no budget, LRU, evict_after 0, lfu_decay 1.
 * Any thread; never blocks. */
void ember_table_dynamic_init(ember_table_dynamic_t *dynamic);

/**
 * ember_table_create for a dynamic table with @dynamic's settings
 * (borrowed for the call).  @config as there, but: row-wise placement
 * puts key k on shard ember's hash of k (not k % S); init NORMAL,
 * UNIFORM or ZEROS (no initial_rows: write keys after); "cpu" only.
 * Errors: as ember_table_create, and ERR_INVALID_PARAM naming a dynamic
 * setting (admit_count 0, a negative budget, an unknown eviction, a
 * decay outside (0, 1], init ROWS, a device).
 */
ember_status_t ember_table_create_dynamic(ember_job_t *job, const ember_table_config_t *config,
                                          const ember_table_dynamic_t *dynamic,
                                          ember_table_t **table_p);

/** A table's dynamic settings (borrowed from @table), or NULL for a fixed
 * table.  Never blocks, cannot fail. */
const ember_table_dynamic_t *ember_table_dynamic(const ember_table_t *table);

/* A dynamic table's counters on one PS (ember_table_shard_stats). */
typedef struct {
    uint64_t rows;               /* held now */
    uint64_t candidates;         /* keys being counted that hold no row */
    uint64_t admitted, evicted;  /* rows given and taken, since creation */
    uint64_t dropped_grads;      /* gradient rows of keys without a row */
    uint64_t dropped_candidates; /* keys forgotten before their admission */
    uint64_t capacity;           /* rows the PS has room for */
    uint64_t bytes;              /* host bytes: rows, state, keys, counters, map */
    uint64_t map_bytes;          /* the hash map's share */
    double load_factor;          /* the map's entries / buckets */
    double mean_probe;           /* buckets a find reads, on average */
    uint32_t max_probe;          /* ... at most */
    uint32_t reserved;
} ember_table_stats_t;

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

/**
 * A dynamic table's rows of @n keys (@keys host, borrowed for the call)
 * into @out ([n][dim] floats, the caller's): a key's row as held, or the
 * initial values a lookup of it returns now; @found (may be NULL; [n]
 * bytes, the caller's) 1 where the key holds a row.  Reads as
 * ember_table_read_rows does (between steps).  Blocks (a call to each
 * PS).  Any handle.  Errors: ERR_INVALID_PARAM (a fixed table; @keys or
 * @out NULL with n > 0), ERR_NO_MEMORY, a PS's (named), ERR_PEER_LOST,
 * ERR_CANCELED.
 */
ember_status_t ember_table_read_keys(ember_table_t *table, const int64_t *keys, size_t n,
                                     float *out, uint8_t *found);

/**
 * A dynamic table's rows of @n keys set from @rows ([n][dim], host,
 * borrowed): a key without a row gets one (admitted outright, its
 * optimizer state fresh).  Keys must be distinct.  Between steps, as
 * ember_table_write_rows.  Blocks.  Errors: ERR_INVALID_PARAM (a fixed
 * table, NULL arrays, a key twice), ERR_OUT_OF_RANGE (a PS's budget
 * cannot hold its new keys: that PS writes nothing; named), a PS's,
 * ERR_PEER_LOST, ERR_CANCELED.
 */
ember_status_t ember_table_write_keys(ember_table_t *table, const int64_t *keys, size_t n,
                                      const float *rows);

/**
 * A dynamic table's counters on its shard @shard (0 .. num_shards - 1)
 * into *@stats (the caller's).  Blocks (one call).  Any handle.  Errors:
 * ERR_INVALID_PARAM (a fixed table, a shard out of range), a PS's,
 * ERR_PEER_LOST, ERR_CANCELED.
 */
ember_status_t ember_table_shard_stats(ember_table_t *table, uint32_t shard,
                                       ember_table_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif
