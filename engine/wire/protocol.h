/*
 * engine/wire/protocol: the engine's RPC op ids and wire messages.
 *
 * Every message is a fixed header struct followed by arrays whose lengths
 * the header gives; engine/wire/codec packs them and checks each length
 * against the payload size before anything is touched.  Processes of one job run the same build (the
 * transport header carries the protocol version), so headers are plain
 * fixed-width C structs.
 */
#ifndef EMBER_ENGINE_PROTOCOL_H
#define EMBER_ENGINE_PROTOCOL_H

#include "engine/ops/optimizer.h"

#include <ember/table.h>
#include <ember/transport.h>

#include <stdint.h>

enum {
    /* master -> ps */
    EMBER_OP_TABLE_CREATE = EMBER_RPC_OP_USER_BASE + 36, /* 100 */
    EMBER_OP_TABLE_LOAD,
    EMBER_OP_TABLE_READ,
    EMBER_OP_PS_STATS,
    EMBER_OP_PS_SHUTDOWN,
    /* trainer -> ps */
    EMBER_OP_LOOKUP,
    EMBER_OP_GRAD,
    /* master -> everyone */
    EMBER_OP_ABORT,
    /* 108, 109 and 112 were ember-train's TRAIN_START, EPOCH_REPORT and
     * EVAL_REPORT: its own messages now (tools/ember-train/messages.h, op
     * ids from EMBER_OP_APP_BASE), no model in the engine's. */
    /* trainer -> ps: every table of a step on one PS, in one request */
    EMBER_OP_LOOKUPS = EMBER_RPC_OP_USER_BASE + 46, /* 110 */
    EMBER_OP_GRADS,
    /* checkpoints (ARCHITECTURE.md, Checkpoints) */
    EMBER_OP_CKPT_PLAN = EMBER_RPC_OP_USER_BASE + 49, /* 113: master -> ps */
    EMBER_OP_CKPT_AT,                                 /* trainer0 -> everyone */
    EMBER_OP_CKPT_REQUEST,                            /* anyone -> trainer0 */
    EMBER_OP_CKPT_DONE,                               /* trainer, ps -> master */
    EMBER_OP_TABLE_RESTORE,                           /* master -> ps */
    /* trainers among themselves (the dense allreduce uses 4 ids) */
    EMBER_OP_ALLREDUCE_BASE = EMBER_RPC_OP_USER_BASE + 56, /* 120 */
    /* the public API's job (api/, include/ember/job.h): */
    EMBER_OP_TABLE_DESTROY = EMBER_RPC_OP_USER_BASE + 64, /* 128: a table's creator -> ps */
    EMBER_OP_GRADS_FENCE,      /* 129: a trainer -> ps: its one-way pushes were taken */
    EMBER_OP_TABLE_OPTIMIZER,  /* 130: a client -> ps: a table's optimizer replaced */
    EMBER_OP_TABLE_READ_KEYS,  /* 131: a client -> ps: a dynamic table's rows by key */
    EMBER_OP_TABLE_WRITE_KEYS, /* 132: a client -> ps: ... set by key */
    EMBER_OP_TABLE_STATS,      /* 133: a client -> ps: a dynamic shard's counters */
};

/* ember_consistency_t (EMBER_SYNC, EMBER_ASYNC), ember_sparse_reduce_t
 * (EMBER_REDUCE_SUM, _MEAN), EMBER_TABLE_NAME_MAX, EMBER_STALENESS_MAX:
 * <ember/table.h>, whose values the wire carries. */
/* A shard's initial rows.  Each value is drawn from (seed, global row,
 * column), so a table holds the same values whatever its number of shards. */
typedef enum {
    EMBER_INIT_NORMAL = 0, /* N(0,1), as nn.EmbeddingBag */
    EMBER_INIT_LOAD = 1,   /* zeros, awaiting TABLE_LOAD */
    /* uniform(-sqrt(1/rows), sqrt(1/rows)) with rows the whole table's, as
     * TorchRec's EmbeddingBagConfig default */
    EMBER_INIT_UNIFORM = 2
} ember_wire_init_t;
/* A PS's shard in its host memory, or on its GPU (--ps-device cuda). */
typedef enum {
    EMBER_TABLE_HOST = 0,
    EMBER_TABLE_CUDA = 1
} ember_table_device_t;

/* EMBER_OP_TABLE_CREATE: one shard of a table on one PS. */
typedef struct {
    uint32_t table_id;
    uint32_t shard;      /* this PS's shard index */
    uint32_t num_shards; /* rows are split by row % num_shards */
    uint32_t trainers;   /* sync mode waits for this many gradients a step */
    int64_t rows;        /* of the whole table */
    uint32_t dim;
    uint32_t consistency;   /* ember_consistency_t */
    uint32_t sparse_reduce; /* ember_sparse_reduce_t */
    uint32_t init;          /* ember_wire_init_t */
    uint32_t dtype;         /* ember_dtype_t of the stored rows: F32 (0) or F16;
                             * lookups, gradients, loads and reads stay fp32 */
    uint32_t device;        /* ember_table_device_t: where the rows live */
    /* Sync: a lookup of step s is served once the table has applied at
     * least s - staleness steps (0: exactly s, every step's updates seen);
     * at most EMBER_STALENESS_MAX.  Async tables: 0. */
    uint32_t staleness;
    uint32_t reserved; /* 0 */
    uint64_t seed;
    ember_opt_config_t optimizer;
    char name[EMBER_TABLE_NAME_MAX];
    /* A dynamic table (kind EMBER_TABLE_KIND_DYNAMIC, engine/ps/table_dyn.h):
     * its ids are raw 64-bit keys, placed by ember_wire_key_shard, each
     * given a row once seen admit_count times, at most budget_rows rows
     * on this shard (0: no bound), evicted by evict_policy when full and
     * after evict_after steps unseen (0: never).  A fixed table: all 0. */
    int64_t budget_rows;
    uint32_t kind;         /* EMBER_TABLE_KIND_FIXED 0, _DYNAMIC 1 */
    uint32_t admit_count;  /* dynamic: >= 1 */
    uint32_t evict_policy; /* dynamic: EMBER_EVICT_LRU 0, EMBER_EVICT_LFU 1 */
    uint32_t evict_after;  /* dynamic: steps */
    float lfu_decay;       /* dynamic, LFU: (0, 1]; 1: plain counts */
    uint32_t reserved2;    /* 0 */
} ember_msg_table_create_t;

enum {
    EMBER_TABLE_KIND_FIXED = 0,
    EMBER_TABLE_KIND_DYNAMIC = 1
};

/* The shard (of @shards) that holds key @key of a dynamic table: a fixed
 * mix of the key (splitmix64's finaliser), so that trainers and PS agree
 * and consecutive ids spread over the PS. */
static inline uint32_t ember_wire_key_shard(uint64_t key, uint32_t shards)
{
    if (shards <= 1)
        return 0;
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return (uint32_t)(key % shards);
}

/* EMBER_OP_TABLE_LOAD: rows [first, first + count) of the whole table; the
 * shard keeps those it owns.  Followed by float[count * dim]. */
typedef struct {
    uint32_t table_id;
    uint32_t reserved;
    int64_t first;
    int64_t count;
} ember_msg_table_load_t;

/* EMBER_OP_TABLE_READ: local rows [first, first + count) of the shard; the
 * reply is float[count * dim]. */
typedef struct {
    uint32_t table_id;
    uint32_t reserved;
    int64_t first;
    int64_t count;
} ember_msg_table_read_t;

/* EMBER_OP_TABLE_DESTROY: the shard of @table_id here freed (the id free
 * again); refused while the job writes checkpoints. */
typedef struct {
    uint32_t table_id;
    uint32_t reserved;
} ember_msg_table_destroy_t;

/* EMBER_OP_TABLE_OPTIMIZER: the shard of @table_id here steps with
 * @optimizer from now on.  Equal to its optimizer (field for field, bit
 * for bit): nothing changes, its state kept.  Else a new optimizer
 * replaces it, its state restarting (zeros, accumulators at
 * initial_accumulator, step 0); refused while the job writes checkpoints.
 * The reply: a uint32, 1 when the shard's optimizer changed. */
typedef struct {
    uint32_t table_id;
    uint32_t reserved; /* 0 */
    ember_opt_config_t optimizer;
} ember_msg_table_optimizer_t;

/* EMBER_OP_TABLE_READ_KEYS / _WRITE_KEYS: @count keys (int64, the key's 64
 * bits) follow, then for a write float[count * dim] rows.  A read's reply:
 * float[count * dim], then count bytes (1: the key holds a row), padded
 * to 8.  Keys of other shards: read as their initial values, not written. */
typedef struct {
    uint32_t table_id;
    uint32_t reserved; /* 0 */
    uint64_t count;    /* at most EMBER_WIRE_KEYS_MAX, and count rows (a write's,
                        * or a read's reply) at most EMBER_WIRE_KEYS_BYTES */
} ember_msg_table_keys_t;
#define EMBER_WIRE_KEYS_MAX   (1u << 20)
#define EMBER_WIRE_KEYS_BYTES ((uint64_t)64 << 20)

/* EMBER_OP_TABLE_STATS: ember_msg_table_destroy_t's layout (the table);
 * the reply is <ember/table.h>'s ember_table_stats_t. */

/* EMBER_OP_GRADS_FENCE: sent once a trainer's one-way GRADS to this PS
 * have left (their sends completed), so they reached the PS before it and
 * its transport ran their handlers first.  Answered OK, or with the
 * refusal of one of them that the PS kept for @trainer's next lookup (it is
 * told here instead).  @step: the trainer's last pushed, for its errors. */
typedef struct {
    uint32_t trainer;
    uint32_t reserved;
    uint64_t step;
} ember_msg_grads_fence_t;

/* EMBER_OP_PS_STATS reply. */
typedef struct {
    uint64_t table_bytes;     /* rows x dim floats of every shard here */
    uint64_t optimizer_bytes; /* optimizer state */
    uint64_t other_bytes;     /* contexts, accumulators, scratch */
    uint64_t rss_bytes;       /* the process's resident set */
    uint64_t lookups, grads, steps_applied;
    /* Time spent serving them (validation, pooling or update, reply handed
     * to the transport; not time waiting): the PS's own cost per request, so
     * a benchmark can tell a PS-bound rate from a network-bound one.  A small
     * reply held for a batch (transport/batch.c) is sent after this. */
    double lookup_seconds, grad_seconds;
    /* Of lookup_seconds, the tables' own work (checks, pooling: what the
     * PS's compute threads share); the rest is unpacking and the reply's
     * hand-off to UCX. */
    double lookup_compute_seconds;
    uint32_t threads; /* the PS's compute threads (--ps-threads) */
    uint32_t reserved;
} ember_msg_ps_stats_t;

enum {
    EMBER_LOOKUP_WEIGHTS = 1u << 0,
    EMBER_LOOKUP_MAX = 1u << 1,
    /* The reply in fp16: the pooled fp32 values rounded (half the bytes on
     * the wire, as TorchRec's fp16 forward comms); gradients stay fp32. */
    EMBER_LOOKUP_HALF_REPLY = 1u << 2,
    /* Forward only (evaluation): the tables as they are after `step` steps
     * pooled, no context kept and no gradient to follow.  Sync: answered
     * once the table's next step is `step` (held before, refused after),
     * like a training lookup of that step. */
    EMBER_LOOKUP_EVAL = 1u << 3,
    /* A cached table's lookup (the trainer's row cache, --cache-rows):
     * the request as above plus, after rows[], uint64 held[unique], the
     * version (the shard's row clock, below) of the copy of each row the
     * trainer holds, or EMBER_ROW_NONE.  The PS checks and keeps the lookup
     * as any other (its context, backward and optimizer step are the
     * same), but does not pool: it answers each row, see
     * ember_msg_rows_reply_t (with EMBER_LOOKUP_MAX it still pools, for
     * the argmax its backward keeps, but sends no pools nor places).  Only
     * in a LOOKUPS; not with EMBER_LOOKUP_HALF_REPLY. */
    EMBER_LOOKUP_ROWS = 1u << 4,
};

#define EMBER_ROW_NONE UINT64_MAX /* held[]: no copy */

/*
 * The reply part of an EMBER_LOOKUP_ROWS lookup in a LOOKUPS reply (in
 * place of the pooled values and version): this head, then uint8
 * state[unique] (one per row of the request, in its order) padded to
 * EMBER_WIRE_ALIGN, then float[fresh * dim]: the values of the rows
 * whose state is EMBER_ROW_FRESH, in the request's order; the part is
 * padded to EMBER_WIRE_ALIGN (engine/wire/codec: ember_wire_rows_reply_*).
 * Its size depends on @fresh: a LOOKUPS reply's parts follow each other
 * as each is long, so a reply with cached parts is shorter than the room
 * the trainer gives it.
 *
 * The row clock of a shard: a sync table's steps applied (its version);
 * an async one's gradients applied.  A row's copy at clock h stands at
 * clock c when the row did not change since h (the PS keeps each row's
 * last change, made only once a cached lookup comes; a dynamic table's
 * per slot, a key given a slot counting as a change; every row of a
 * step's lookups changes in its update), or, sync training (not an
 * evaluation), when h is at most the table's staleness behind the
 * lookup's step.  A write of rows outside training (a load, a write by
 * key, a restore) voids every copy made before it.  A held version ahead
 * of the shard's clock is refused (ERR_BAD_MESSAGE, naming the row).
 */
typedef struct {
    uint64_t version; /* as a LOOKUPS part's: the table's steps applied */
    uint64_t clock;   /* the row clock the reply was made at */
    uint64_t fresh;   /* rows whose values follow */
} ember_msg_rows_reply_t;

enum {
    EMBER_ROW_UNCHANGED = 0, /* the copy stands: unchanged since it was made, so
                              * it is the row at @clock */
    EMBER_ROW_STALE = 1,     /* the copy stands within the staleness bound, at
                              * the version it holds */
    EMBER_ROW_FRESH = 2      /* the row's values at @clock follow */
};

/*
 * EMBER_OP_LOOKUP: one table's shard of a (trainer, step); trainers send
 * them inside an EMBER_OP_LOOKUPS, one per PS (the single form stays for
 * the benchmarks and tests, and a PS serves it as a LOOKUPS of one).
 * Followed by
 *   uint32 offsets[bags]      each bag's first index (the last bag runs to
 *                             indices): the PS pools and keeps them as sent
 *   entries[indices]          each index's, 4 or 8 bytes:
 *     uint32 slot             its row's position in rows[]
 *     float  weight           only with EMBER_LOOKUP_WEIGHTS
 *     uint32 place            only with EMBER_LOOKUP_MAX: its place in its
 *                             bag of the trainer's whole batch (increasing
 *                             within a bag)
 *   zero padding to EMBER_WIRE_ALIGN bytes
 *   int64  rows[unique]       the distinct global row ids, sorted, all of
 *                             this shard; last, so a sender writes the
 *                             offsets and entries while it reads its batch
 *                             and the rows once they are deduplicated
 * A LOOKUP is a multiple of EMBER_WIRE_ALIGN bytes.  The PS pools each bag
 * from rows[slot] where they lie: nothing is expanded per index.
 * The reply is float[bags * dim]: each bag's sum (weighted) or, with
 * EMBER_LOOKUP_MAX, element-wise max over this shard's rows; with
 * EMBER_LOOKUP_HALF_REPLY those values rounded to fp16, uint16[bags * dim].
 * With EMBER_LOOKUP_MAX the values are followed (4-byte aligned) by
 * uint32[bags * dim]: the place of the entry each maximum came from (the
 * first maximal one of this shard's; EMBER_PLACE_NONE for a bag without
 * entries here), so the trainer gives a maximum held on several shards to
 * the bag's first maximal entry, as PyTorch does, whatever the number of
 * shards.  engine/wire/codec lays out, checks and sizes both
 * (ember_wire_lookup_*, ember_wire_reply_*).
 */
typedef struct {
    uint32_t table_id;
    uint32_t trainer;
    uint64_t step;
    uint32_t flags;
    uint32_t bags;
    uint32_t unique;
    uint32_t indices;
} ember_msg_lookup_t;

#define EMBER_PLACE_NONE UINT32_MAX

enum {
    EMBER_GRAD_APPLY = 1u << 0
};

/* EMBER_OP_GRAD: gradient of the step's pooled output, float[bags * dim],
 * for the lookup of (trainer, step); with EMBER_GRAD_APPLY it also takes
 * part in the optimizer step of that context (the distributed optimizer).
 * Trainers send these heads inside an EMBER_OP_GRADS. */
typedef struct {
    uint32_t table_id;
    uint32_t trainer;
    uint64_t step;
    uint32_t flags;
    uint32_t bags;
} ember_msg_grad_t;

/* Tables in one LOOKUPS or GRADS: at most a PS's table ids
 * (engine/ps/ps_msg.h). */
#define EMBER_WIRE_MAX_TABLES 64
/* Each table's part of a LOOKUPS and of its reply starts at a multiple of
 * this, so values read in place are aligned. */
#define EMBER_WIRE_ALIGN 8

/*
 * EMBER_OP_LOOKUPS: one request per (trainer, step, PS) for every table of
 * the step on that PS.  Followed by @count complete LOOKUP messages
 * (ember_msg_lookup_t and its arrays, as EMBER_OP_LOOKUP; each a multiple
 * of EMBER_WIRE_ALIGN bytes); each has the envelope's trainer and step, their
 * table ids are distinct, and all or none are EMBER_LOOKUP_EVAL.  The PS
 * serves all of them or none (a refused one leaves no context of the
 * others); in sync mode the whole request waits until every table in it has
 * applied at least @step - its staleness steps (an evaluation: exactly
 * @step).  The reply is, for each table in the request's order, its LOOKUP
 * reply (ember_wire_lookup_reply_bytes) padded to EMBER_WIRE_ALIGN bytes,
 * then its version: a uint64 (at ember_wire_lookup_version_at, aligned), the
 * steps the table had applied when it was served (a sync table's next step;
 * 0 for an async one); ember_wire_lookups_part_bytes each, all multiples of
 * EMBER_WIRE_ALIGN.  A single LOOKUP's reply has no version (it stays
 * exactly the pooled values, as the benchmarks compare it with the
 * network's rate).
 */
typedef struct {
    uint32_t trainer;
    uint32_t count; /* tables: 1 .. EMBER_WIRE_MAX_TABLES */
    uint64_t step;
} ember_msg_lookups_t;

/*
 * EMBER_OP_GRADS: the gradients of a LOOKUPS.  Followed by @count GRAD heads
 * (ember_msg_grad_t: each of the envelope's trainer, step and flags, table
 * ids distinct), then every table's float[bags * dim] back to back in that
 * order: the head is small host memory and the gradients one bulk buffer,
 * which the device path sends from GPU memory (the transport's GPU payload
 * layout, include/ember/transport.h).  For more than
 * (EMBER_RPC_INLINE_MAX - 24) / 24 = 4 tables the head is longer than the
 * transport's inline part, so the device path writes it in front of the
 * gradients in GPU memory and sends the whole message as one buffer
 * (engine/train/sparse.c).  The PS checks every gradient before it applies
 * any: a refused one changes no table.
 */
typedef struct {
    uint32_t trainer;
    uint32_t count; /* tables: 1 .. EMBER_WIRE_MAX_TABLES */
    uint64_t step;
    uint32_t flags;    /* EMBER_GRAD_APPLY, as every GRAD head's */
    uint32_t reserved; /* 0 */
} ember_msg_grads_t;

/* EMBER_OP_ABORT: followed by a text naming the cause. */

#define EMBER_PATH_MAX 512 /* a checkpoint's directory, its NUL included */

/*
 * Checkpoints.  After K steps (K a multiple of `every`, or a step trainer0
 * named in a CKPT_AT) every trainer writes ROOT/step-K/trainerT.safetensors
 * and every PS, once it has applied step K-1, copies its tables and writes
 * psP.safetensors from the copy while training goes on; each tells the
 * master (CKPT_DONE), which writes the manifest last (engine/io/checkpoint).
 */

/* EMBER_OP_CKPT_PLAN: master -> each PS before training (and the same in
 * TRAIN_START): where and how often. */
typedef struct {
    uint64_t every; /* steps between checkpoints; 0: only those asked for */
    uint32_t index; /* the receiver's PS or trainer index (its file's name) */
    uint32_t reserved;
    char root[EMBER_PATH_MAX];
} ember_msg_ckpt_plan_t;

/* EMBER_OP_CKPT_AT: trainer0 -> every other rank, answered at once: also a
 * checkpoint after @step steps (the last step's, or a signal's), which no
 * rank has passed yet; @stop: the job ends there. */
typedef struct {
    uint64_t step;
    uint32_t stop;
    uint32_t reserved;
} ember_msg_ckpt_at_t;

/* EMBER_OP_CKPT_REQUEST: a rank that got SIGUSR1 (@stop 0) or SIGTERM
 * (@stop 1) -> trainer0, which picks the step. */
typedef struct {
    uint32_t stop;
    uint32_t reserved;
} ember_msg_ckpt_request_t;

/* EMBER_OP_CKPT_DONE: a trainer or PS -> master: its file of the checkpoint
 * after @step steps is durable (@status 0) or could not be written
 * (@status an ember_status_t, the cause in @text). */
typedef struct {
    uint64_t step;
    uint64_t bytes;
    uint32_t crc32c;
    int32_t status;
    double copy_seconds;  /* a PS: the copy training waited for */
    double wait_seconds;  /* a PS: waiting for its previous write first */
    double write_seconds; /* writing and syncing the file */
    char name[64];        /* the file, in the checkpoint's directory */
    char text[256];
} ember_msg_ckpt_done_t;

/* EMBER_OP_TABLE_RESTORE: master -> PS, after its tables are created:
 * restore every table here from the checkpoint in @dir, whose PS files are
 * the @count names (char[64] each) that follow. */
typedef struct {
    uint32_t count;
    uint32_t reserved;
    char dir[EMBER_PATH_MAX];
} ember_msg_table_restore_t;

#define EMBER_CKPT_FILE_NAME_MAX 64

#endif
