/*
 * ember: a trainer's lookups of its features and the gradients it pushes
 * back.
 *
 * An ember_ebc_t is TorchRec's EmbeddingBagCollection on a trainer: a list
 * of features, each pooled from one table (several features may share a
 * table).  Each step the trainer hands it the step's sparse input as a
 * keyed jagged batch (TorchRec's KeyedJaggedTensor: per feature, B bags of
 * ids given by lengths or offsets, optional per-value weights) and gets
 * every feature's pooled [B][dim] back; then it pushes those outputs'
 * gradients (the distributed autograd context of the step is the lookup:
 * the PS keep what the backward needs under (trainer, step)), and the PS
 * apply each table's optimizer: in sync mode once every trainer's gradients
 * of the step are in, summed in trainer order, so a step's update does not
 * depend on the order they arrive in or on the PS's threads.
 *
 * On another number of PS: the initial rows are the same bits
 * (<ember/table.h>), and so is every bag pooled from one PS's rows (a
 * one-hot bag, a table-wise table's) or by max.  A bag whose rows sit on
 * several PS (multi-hot, row-wise; sum or mean, with or without weights)
 * is pooled by each of them and the trainer adds their parts in PS order,
 * which rounds otherwise than one PS adding the whole bag: the same to
 * rounding (an ulp or so a step, drifting as training goes on), not the
 * same bits.
 *
 * One request per PS per step carries every table's lookups there; the
 * replies land where the pooled outputs are combined (zero-copy), on the
 * ebc's device (GPU memory when GPUDirect is possible, else through pinned
 * host memory, one copy a step each way).
 *
 * The steps of one ebc, training lookups numbered from options.start_step:
 *
 *     lookup(s) -> wait(s) -> backward(s) -> release(s)
 *
 * and lookup(s + 1) may be called at any time after lookup(s): it is split
 * at once (the batch's arrays may be reused when the call returns) and sent
 * as soon as the tables may answer it (staleness 0: once backward(s) pushed
 * step s's gradients; staleness K >= 1: once wait(s) has step s's replies),
 * so its flight overlaps the trainer's compute.  At most two lookups are
 * open (made and not yet released) at a time.  A training lookup must be
 * pushed back (backward) before it is released: in sync mode the other
 * trainers' step waits for it; an ebc whose lookup was released without
 * its backward refuses further training lookups.
 *
 * Threading: as the job's (one thread at a time, the job's); every call
 * that waits progresses the job and fails with ERR_CANCELED when it is
 * aborted.  Errors: each failing call logs one line naming the trainer, the
 * step and the feature, table or PS at fault (ember_ebc_error keeps it).
 */
#ifndef EMBER_LOOKUP_H
#define EMBER_LOOKUP_H

#include <ember/device.h>
#include <ember/embedding_bag.h> /* ember_bag_mode_t: EMBER_BAG_SUM, _MEAN, _MAX */
#include <ember/job.h>
#include <ember/status.h>
#include <ember/table.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_ebc ember_ebc_t;
typedef struct ember_lookup ember_lookup_t;

/* One sparse feature. */
typedef struct {
    const char *name;         /* for errors (copied; NULL: "feature<f>") */
    ember_table_t *table;     /* borrowed: must outlive the ebc */
    ember_bag_mode_t pooling; /* sum, mean or max */
    int64_t padding_idx;      /* ids equal to it pool nothing; -1: none */
} ember_feature_t;

typedef struct {
    ember_device_t *device; /* where pooled outputs and their gradients live
                             * (borrowed, outlives the ebc); NULL: host memory */
    int half_replies;       /* the PS answer in fp16 (half the bytes; gradients stay fp32) */
    uint64_t start_step;    /* the first training lookup's step (a resumed job's) */
} ember_ebc_options_t;

/** Defaults: host memory, fp32 replies, step 0.  Any thread; never
 * blocks. */
void ember_ebc_options_init(ember_ebc_options_t *options);

/**
 * A collection of @nfeatures features (copied; their tables borrowed).
 * Features of one table must be given one after another and pool alike;
 * the output holds each feature's [B][dim] in the order given.  Every
 * sync table of one ebc has the same staleness (the ebc's pipelining is
 * one).  Only a trainer.  @options borrowed for the call (NULL: the
 * defaults); *@ebc_p the caller's (ember_ebc_destroy, before the job is
 * left).  Does not call the PS; blocks only to open a host device and
 * register the request and reply buffers.  Errors: ERR_INVALID_PARAM
 * (naming the feature: a shared
 * table's features apart, pooling or padding differently, a padding index
 * outside the table; more than 64 tables on one PS; tables row-sharded over
 * partly overlapping PS ranges; tables of different staleness; a table
 * whose trainers leave this one out; not a trainer), ERR_NO_MEMORY, the
 * device's.
 */
ember_status_t ember_ebc_create(ember_job_t *job, const ember_feature_t *features, size_t nfeatures,
                                const ember_ebc_options_t *options, ember_ebc_t **ebc_p);

/** Waits (bounded, ~2 s) for a push still leaving, then frees it and every
 * lookup still open (their pooled buffers with them); a push not yet taken
 * may be lost: ember_ebc_flush first.  The tables and device stay.  NULL:
 * nothing. */
void ember_ebc_destroy(ember_ebc_t *ebc);

/* The layout, from the features (never blocks, cannot fail): */
/** Number of features. */
size_t ember_ebc_features(const ember_ebc_t *ebc);
/** Feature @f's dim (its table's); 0 when out of range. */
uint32_t ember_ebc_feature_dim(const ember_ebc_t *ebc, size_t f);
/** Floats of a step's output for @batch_size bags a feature (sum of B * dim). */
size_t ember_ebc_output_size(const ember_ebc_t *ebc, size_t batch_size);
/** Where feature @f's [B][dim] starts in the output, in floats (f >= the
 * feature count: the output's size). */
size_t ember_ebc_output_offset(const ember_ebc_t *ebc, size_t f, size_t batch_size);

/* A keyed jagged batch: the ebc's features in its order, B bags each, the
 * values of feature f before those of feature f + 1 (as TorchRec's). */
typedef struct {
    size_t num_features;    /* the ebc's */
    size_t batch_size;      /* B: bags per feature */
    const int64_t *values;  /* [num_values] every feature's ids */
    const int32_t *lengths; /* [num_features * B] bag sizes (>= 0), or NULL */
    const int64_t *offsets; /* [num_features * B + 1] bag starts in values, offsets[0]
                             * 0 and the last num_values; or NULL (exactly one of
                             * lengths, offsets) */
    const float *weights;   /* [num_values] per-value weights (every feature sum
                             * pooled), or NULL */
    size_t num_values;      /* elements of values (and weights) */
} ember_kjt_t;

enum {
    /* An evaluation: the tables as the steps pushed so far left them (a
     * sync table once every trainer pushed them), no context kept on the
     * PS, no backward.  The ebc's pushes are flushed first; no training
     * lookup may be open. */
    EMBER_LOOKUP_FORWARD_ONLY = 1u << 0,
};

/**
 * Look the batch up (the next training step, or @flags' evaluation).  @kjt
 * and its arrays are borrowed for the call only: each id is read, checked
 * (errors name the feature, the bag, the value and the table) and written
 * into the request.  Never waits for a PS's answer (sends what may
 * leave); it may wait for an earlier push to have left (the slot's, two
 * steps before; an evaluation: every push).  *@lookup_p is the ebc's until
 * ember_lookup_release.  Errors: ERR_INVALID_PARAM (a batch the tables
 * refuse, a third open lookup, an evaluation while a training lookup is
 * open, the wrong number of features, a released step's missing backward,
 * unknown flags), ERR_OUT_OF_RANGE (an id outside its table),
 * ERR_NO_MEMORY, a push lost with its PS (naming it), ERR_CANCELED.
 */
ember_status_t ember_ebc_lookup(ember_ebc_t *ebc, const ember_kjt_t *kjt, unsigned flags,
                                ember_lookup_t **lookup_p);

/** Its step: a training lookup's, or the steps an evaluation sees.  Never
 * blocks. */
uint64_t ember_lookup_step(const ember_lookup_t *lookup);
/** Non-zero for an evaluation (EMBER_LOOKUP_FORWARD_ONLY).  Never blocks. */
int ember_lookup_forward_only(const ember_lookup_t *lookup);

/**
 * Wait for the replies (sending them first if they had to wait), check how
 * old they are (a sync table's version within its staleness, else
 * ERR_BAD_MESSAGE naming PS, table and step), and pool every feature into
 * @out (ember_ebc_output_size floats of the ebc's device memory, the
 * caller's, written whole) or, @out NULL, into the lookup's own buffer,
 * *@pooled_p (device memory, valid until release; @pooled_p may be NULL
 * when @out is given).  Blocks.  Once only.  Errors: a PS's refusal (a
 * one-way push of this trainer's it refused comes back here) or loss
 * (named), ERR_BAD_MESSAGE, ERR_TIMED_OUT, ERR_CANCELED, ERR_NO_MEMORY (the
 * lookup's own buffer), the device's, ERR_INVALID_PARAM (waited twice, a
 * released lookup, both @out and @pooled_p NULL, step s + 1 before step
 * s's backward (staleness 0) or replies (staleness >= 1): it could never
 * come).
 */
ember_status_t ember_lookup_wait(ember_lookup_t *lookup, float *out, const float **pooled_p);

/** The version of feature @feature's table in the replies (the fewest steps
 * its shards had applied; 0 for an async table), after wait (before it, or
 * @feature out of range: 0).  Never blocks. */
uint64_t ember_lookup_version(const ember_lookup_t *lookup, size_t feature);

enum {
    /* The push is a call: this returns once every PS took it (applied it,
     * or kept it for the step's other gradients; the job's last step; a
     * refusal is this call's error).  Otherwise one-way: a refusal fails
     * the next lookup or ember_ebc_flush. */
    EMBER_BACKWARD_WAIT = 1u << 0,
};

/**
 * Push the pooled outputs' gradients @grad (the output's layout,
 * ember_ebc_output_size floats of the ebc's device memory, borrowed for
 * the call) for the PS to apply.  Then sends a next lookup that was waiting
 * for it.  Never waits for the network but with EMBER_BACKWARD_WAIT (then
 * blocks for every PS's answer).  Errors: ERR_INVALID_PARAM (an
 * evaluation, twice, before wait, a released lookup, NULL @grad, unknown
 * flags), ERR_NO_MEMORY, the device's (staging the gradient), the
 * transport's, a PS's refusal or loss (EMBER_BACKWARD_WAIT), ERR_CANCELED.
 */
ember_status_t ember_lookup_backward(ember_lookup_t *lookup, const float *grad, unsigned flags);

/** Done with it (its buffers go back to the ebc: *pooled_p of its wait is
 * no longer valid).  A training lookup released before its backward breaks
 * the ebc (logged; see above).  Never blocks.  NULL: nothing. */
void ember_lookup_release(ember_lookup_t *lookup);

/**
 * Every push made has left and every PS of the ebc's tables took it: a
 * call to each, which it answers after those pushes.  After it on each
 * trainer and then a barrier, ember_table_read_rows sees the steps pushed
 * (<ember/table.h>).  Blocks (a round trip to each PS).  Errors: a push
 * lost with its PS, or refused by it (a one-way push's refusal, kept for
 * the next lookup, is told here), named; ERR_NO_MEMORY; ERR_CANCELED.
 */
ember_status_t ember_ebc_flush(ember_ebc_t *ebc);

/** The largest step - version any lookup saw (0 without staleness).
 * Never blocks. */
uint64_t ember_ebc_staleness_seen(const ember_ebc_t *ebc);

/* ---- the row cache (ABI 1.4) ---------------------------------------------- */

/**
 * Keep up to @rows embedding rows of the ebc's tables on this trainer
 * (0: no cache, as created), so that a row whose copy here still stands
 * is not sent again: each lookup tells the PS which rows it holds and at
 * which version, the PS answers each row with "your copy stands" or its
 * values (it keeps the lookup for the backward as always, and applies the
 * gradients exactly as without a cache), and the trainer pools each bag
 * itself from those rows, in the PS's order and with its code.  A copy
 * stands when its row did not change since it was made (a dynamic table's
 * key given a row anew counts as a change) or, sync with staleness K >= 1,
 * when it is at most K steps behind the lookup's step; so with staleness
 * 0 every output and every row is the same bits as without the cache.
 * Memory: @rows x the widest table's dim x 4 bytes, plus an index (about
 * 32 bytes a row).  Replacement: CLOCK.  Every table of the ebc is cached
 * (sum, mean and max pooling, weights, fixed and dynamic tables); not with
 * fp16 replies (options.half_replies) or the device path (GPUDirect: EMBER_GPUDIRECT=staged), nor on a PS's GPU
 * (--ps-device cuda; the PS refuses the lookup).  Before the ebc's first
 * lookup only.  Not thread-safe (the job's thread); never blocks.
 * Errors (the ebc as it was): ERR_INVALID_PARAM (after a lookup; a table
 * that cannot be cached, named; @rows over 2^30), ERR_NO_MEMORY.
 */
ember_status_t ember_ebc_set_cache_rows(ember_ebc_t *ebc, size_t rows);

/* What an ebc's row cache did (ember_ebc_cache_stats). */
typedef struct {
    uint64_t capacity;   /* rows it may hold (0: no cache) */
    uint64_t rows;       /* rows it holds */
    uint64_t lookups;    /* distinct rows of its lookups (each shard's its own) */
    uint64_t hits;       /* of them, copies that stood (their rows not sent) */
    uint64_t stale_hits; /* of the hits, copies that stood by the staleness bound */
    uint64_t oldest;     /* the most steps behind its lookup's step a copy used was */
    uint64_t inserted;   /* rows put in */
    uint64_t evicted;    /* rows replaced by others */
} ember_ebc_cache_stats_t;

/** Its row cache's counters so far into *@stats (all 0 without a
 * cache).  Any time; never blocks; cannot fail. */
void ember_ebc_cache_stats(const ember_ebc_t *ebc, ember_ebc_cache_stats_t *stats);

/** The line the last failing call of @ebc logged ("trainer T step S: ...",
 * naming the feature, table or PS at fault), "" while none failed: for a
 * program that reports its failure elsewhere too (to its coordinator).
 * Borrowed from @ebc, valid until its next call. */
const char *ember_ebc_error(const ember_ebc_t *ebc);

#ifdef __cplusplus
}
#endif
#endif
