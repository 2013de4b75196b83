/*
 * engine/train/sparse: the embedding tables' part of a trainer's step, over
 * the parameter servers that hold their shards.
 *
 * One ember_sparse_t holds every table of a trainer.  A step splits each
 * table's batch by shard (row % shards) and deduplicates each shard's rows
 * (engine/wire/codec packs one LOOKUP per (table, shard)), then sends each
 * PS one LOOKUPS carrying every table's LOOKUP for it, all PS at once; each
 * PS's reply lands in one buffer, laid out so that every table's parts
 * (engine/train/parts) find their shards' replies where they landed, at one
 * stride, without a copy.  The replies are combined into each table's input
 * of the dense model; after the backward each PS gets one GRADS with the
 * gradients of all its tables' parts: one-way, but the last step's as a
 * call whose answer says everything went in.  A PS refuses a bad push at
 * the next lookup.
 *
 * Placement: a table row-sharded over P servers has num_ps = P shards on
 * ranks first_ps_rank .. + P - 1; a table placed whole on one PS
 * (--sharding table) has num_ps = 1 on that PS's rank.  Tables may mix both,
 * but two row-sharded tables must either use the same servers, or ranges one
 * of which holds the other, or not overlap: every PS's buffer then lays the
 * tables out alike (ember_sparse_create refuses the rest).
 */
#ifndef EMBER_ENGINE_TRAIN_SPARSE_H
#define EMBER_ENGINE_TRAIN_SPARSE_H

#include "engine/train/trainer_dev.h"

#include <ember/embedding_bag.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

/* One table's bags of a step, already checked. */
typedef struct {
    const int64_t *indices;
    size_t n;
    const int64_t *offsets; /* [bags]: bag b starts at indices[offsets[b]] */
    size_t bags;
    const int64_t *targets; /* unused by the split */
    const float *weights;   /* [n_weights] or NULL */
    size_t n_weights;
} ember_batch_t;

/* One table, as its trainer sees it. */
typedef struct {
    uint32_t table_id;
    const char *table_name;
    uint32_t num_ps; /* its shards: on ranks first_ps_rank .. + num_ps - 1 */
    int first_ps_rank;
    int64_t rows; /* of the whole table: every id is checked against it */
    int dynamic;  /* a dynamic table: ids are 64-bit keys, unchecked, placed by
                   * ember_wire_key_shard (engine/wire/protocol.h) */
    uint32_t dim;
    ember_bag_mode_t mode;
    int64_t padding_idx; /* entries of this row are not sent (-1: none) */
    int half_replies;    /* ask for fp16 replies */
    int trainer;         /* this trainer's index, as the PS knows it (every table's the same) */
    /* A sync table (async 0): each reply's version (the steps its shard had
     * applied) is checked: step - staleness <= version <= step. */
    int async;
    uint32_t staleness;
    /* Its rows cached here (engine/train/row_cache; borrowed, shared by
     * every cached table and both slots of a pipeline, outlives them):
     * its lookups are EMBER_LOOKUP_ROWS (engine/wire/protocol.h), each
     * shard's part pooled here from the copies that stood and the rows
     * that came, as its PS would have pooled it; NULL: not cached.  Not
     * with fp16 replies or the device path. */
    struct ember_row_cache *cache;
} ember_sparse_config_t;

typedef struct ember_sparse ember_sparse_t;

/* One feature's bags of a table, in the caller's memory (borrowed for the
 * call only: the split reads each id once, straight into the wire's
 * buffers). */
typedef struct {
    const int64_t *values;  /* the ids */
    const int64_t *offsets; /* [bags + 1]: bag b is values[offsets[b] .. offsets[b+1]),
                             * absolute positions in values (offsets[0] may be > 0); or NULL */
    const int32_t
            *lengths;     /* [bags]: bag b's count, the bags back to back from values[0]; or NULL */
    const float *weights; /* indexed as values, or NULL (no per-value weights) */
    size_t bags;
    const char *name; /* the feature's name, for errors */
} ember_sparse_segment_t;

/* A table's bags of a step: its segments' bags concatenated in order. */
typedef struct {
    const ember_sparse_segment_t *segments;
    size_t count; /* >= 1 */
} ember_sparse_input_t;

/**
 * The lookups of @ntables tables (@tables[k]: table k, the index every call
 * below uses) for the trainer they name, over @tp, their parts on @td
 * (@rdma: the device path, engine/train/parts.h).  The calls wait for
 * their futures but give up when *@aborted becomes set (the master's
 * ABORT).  Borrowed: the names in @tables, @td, @aborted.  Errors:
 * ERR_INVALID_PARAM (a table's shape or placement: no rows, a padding_idx
 * outside [-1, rows), ranks outside the job, two tables of one id,
 * trainers that differ, row-sharded tables over partly overlapping
 * servers; logged, naming them), ERR_NO_MEMORY.
 */
ember_status_t ember_sparse_create(const ember_sparse_config_t *tables, size_t ntables,
                                   ember_tp_t *tp, const ember_trainer_dev_t *td, int rdma,
                                   const int *aborted, ember_sparse_t **sparse_p);

/** Free it, after at most ~2 s for a one-way push still leaving. */
void ember_sparse_destroy(ember_sparse_t *sparse);

/** How many tables it holds. */
size_t ember_sparse_tables(const ember_sparse_t *sparse);

/* Each phase below returns its status with one line in @err saying what
 * failed, naming the table or the PS (the caller names the trainer and the
 * step). */

/**
 * Split each table's bags (@tables[k] for table k: its segments; tables
 * may have different bags) by shard and build each shard's LOOKUP of
 * @step, in one pass that reads each id once and writes what the wire
 * needs straight into the LOOKUPs (each index's slot among its shard's
 * distinct rows, its weight only when the segments have weights, its place
 * in its bag only for max pooling), the distinct rows last.  @eval != 0:
 * EMBER_LOOKUP_EVAL lookups (the tables as they are after @step steps,
 * nothing kept on the PS); no push may follow them.
 *
 * What it reads is checked as it is read, with ember_bag_validate's
 * messages naming the feature ("feature F: index 130 at position 7 (bag 2)
 * is out of range [0, 100)"): each segment has exactly one of offsets and
 * lengths, and values for its entries; offsets start at 0 or later and do
 * not decrease, lengths are not negative; every id is in [0, rows) (the
 * padding_idx's entries are not sent); a table's segments have weights all
 * or none, and only with sum pooling; a table's bags and entries fit the
 * LOOKUP's 32-bit counts.  @err does not name the table:
 * ember_sparse_split_table does.  Errors: ERR_OUT_OF_RANGE (an id),
 * ERR_INVALID_PARAM (the rest of the input), ERR_NO_MEMORY.  A refused
 * split leaves no lookup to send.
 */
ember_status_t ember_sparse_split(ember_sparse_t *sparse, const ember_sparse_input_t *tables,
                                  uint64_t step, int eval, char *err, size_t err_length);

/** The name of the table the last ember_sparse_split refused; NULL when it
 * took every table (or failed before any). */
const char *ember_sparse_split_table(const ember_sparse_t *sparse);

/** The previous step's pushes have left (one-way: sent; the last step's
 * calls: answered, so taken), their buffers free to reuse; a push lost
 * with its PS, or a call refused, fails here. */
ember_status_t ember_sparse_pushes_wait(ember_sparse_t *sparse, uint64_t step, char *err,
                                        size_t err_length);

/** After ember_sparse_pushes_wait: every PS of these tables has taken
 * every push sent before (applied, or a step's share kept): one
 * EMBER_OP_GRADS_FENCE call each, answered after them.  A one-way push a
 * PS refused fails here (else the next lookup would tell it).  @step: the
 * pushes are of the steps before it (for the texts).  Blocks. */
ember_status_t ember_sparse_pushes_taken(ember_sparse_t *sparse, uint64_t step, char *err,
                                         size_t err_length);

/** Send every PS its LOOKUPS (one per PS rank) and wait for all the
 * replies: ember_sparse_lookup_send then ember_sparse_lookup_wait. */
ember_status_t ember_sparse_lookup(ember_sparse_t *sparse, char *err, size_t err_length);

/** Send every PS its LOOKUPS of the split step (a cached table's told,
 * row by row, which copies the cache holds now, and those copies taken
 * for the step); the replies land in this
 * ember_sparse_t's buffers (a trainer that overlaps steps keeps one
 * ember_sparse_t per step in flight).  After ember_sparse_pushes_wait (the
 * step's buffers are reused): ERR_INVALID_PARAM while a push is still
 * leaving. */
ember_status_t ember_sparse_lookup_send(ember_sparse_t *sparse, char *err, size_t err_length);

/** Wait for every reply of the lookups sent, and check each table's
 * version: ERR_BAD_MESSAGE (naming the PS, the table, the step and the
 * version) when a sync table's was served more than its staleness behind
 * the step (an evaluation: not exactly at it), or ahead of it.  A cached
 * table's parts (config.cache) are taken where they came (a PS's reply is
 * then shorter than its room; the others are moved to their places), its
 * rows put in the cache, and each shard's part pooled from them;
 * ERR_BAD_MESSAGE also for a cached part the codec refuses or one that
 * says a copy stands that was not held, or stands beyond the bound. */
ember_status_t ember_sparse_lookup_wait(ember_sparse_t *sparse, char *err, size_t err_length);

/** Table @table's version in the last lookup's replies: the fewest steps
 * any of its shards had applied when it served it (0 for an async table,
 * or no such table).  What a cache of rows needs to know how old they are. */
uint64_t ember_sparse_version(const ember_sparse_t *sparse, size_t table);

/** The largest step - version of any sync table's shard in any lookup so
 * far (evaluations' are 0). */
uint64_t ember_sparse_staleness_seen(const ember_sparse_t *sparse);

/** Table @table's replies combined into its input of the dense model @x
 * ([bags, dim] of its batch, in the device's memory).  Errors:
 * ERR_INVALID_PARAM (no such table). */
ember_status_t ember_sparse_combine(ember_sparse_t *sparse, size_t table, float *x);

/**
 * Each shard's gradient from @grad_x[k], table k's input gradient ([bags,
 * dim], device memory), pushed: one GRADS per PS rank; @last: the job's
 * last step (its pushes are calls, awaited by ember_sparse_pushes_wait).
 * Errors: ERR_INVALID_PARAM after an evaluation split.
 */
ember_status_t ember_sparse_push(ember_sparse_t *sparse, const float *const *grad_x, uint64_t step,
                                 int last, char *err, size_t err_length);

#endif
