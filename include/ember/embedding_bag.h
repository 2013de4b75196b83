/*
 * ember: EmbeddingBag (PyTorch nn.EmbeddingBag semantics, CPU; rows
 * stored as fp32, or as fp16 with every sum and product in fp32).
 *
 * A batch is a flat list of row ids `indices[n]` cut into `bags` bags by
 * `offsets[bags]` (offsets[0] == 0, non-decreasing, <= n; the last bag runs to
 * n).  Each bag pools its rows into one vector of `dim` floats:
 *   sum  : sum of rows (each scaled by its per-sample weight when given)
 *   mean : sum / number of non-padding entries
 *   max  : element-wise max; argmax records the row id chosen per element
 * Entries equal to `padding_idx` contribute nothing (and are not counted by
 * mean).  An empty bag (or one holding only padding) pools to zeros in every
 * mode, with argmax -1.
 *
 * The backward produces a *sparse* row gradient: the sorted unique rows the
 * batch touched (padding excluded) and one gradient row per unique row.  That
 * is what the parameter server applies; nothing of size rows x dim is built.
 *
 * None of these functions keeps a pointer after it returns; all pointer
 * parameters are borrowed for the duration of the call.  They keep no
 * state: any thread, concurrently on distinct outputs; none blocks (but
 * for its work) and none logs.  Forward and backward
 * assume a batch that passed ember_bag_validate() (they still reject obvious
 * misuse such as NULL buffers, but do not re-check every index on the hot path).
 */
#ifndef EMBER_EMBEDDING_BAG_H
#define EMBER_EMBEDDING_BAG_H

#include <ember/dtype.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EMBER_BAG_SUM,
    EMBER_BAG_MEAN,
    EMBER_BAG_MAX
} ember_bag_mode_t;

/* One batch of bags.  All arrays are borrowed. */
typedef struct {
    const int64_t *indices; /* [n] row ids */
    size_t n;
    const int64_t *offsets; /* [bags] start of each bag in indices */
    size_t bags;
    const float *weights; /* [n_weights] per-sample weights, or NULL */
    size_t n_weights;     /* must equal n when weights != NULL */
} ember_bag_batch_t;

/* How a table pools. */
typedef struct {
    ember_bag_mode_t mode;
    int64_t padding_idx; /* -1: none; else a row id in [0, rows) */
} ember_bag_opts_t;

/** Name of a pooling mode ("sum", "mean", "max"); never NULL. */
const char *ember_bag_mode_name(ember_bag_mode_t mode);

/**
 * Parse "sum" / "mean" / "max" into @mode_p.
 * Errors: ERR_INVALID_PARAM for any other text (mode_p untouched).
 */
ember_status_t ember_bag_mode_parse(const char *text, ember_bag_mode_t *mode_p);

/**
 * Check a batch against a table of @rows rows before it is used.
 *
 * Detects: NULL arrays with non-zero counts, an index < 0 or >= rows (names
 * the index, its position and its bag), offsets[0] != 0, a decreasing offset,
 * an offset > n, weights whose length differs from n, weights given with a
 * mode other than sum, a padding_idx outside [-1, rows).
 *
 * @err/@err_length: caller buffer (may be NULL/0) that receives one line naming
 * exactly what is wrong, e.g. "index 130 at position 7 (bag 2) is out of
 * range [0, 100)"; on success it receives "".  Nothing is logged: the caller
 * decides (a PS answers the trainer with the message instead).
 *
 * Errors: ERR_OUT_OF_RANGE (index or padding_idx out of range),
 * ERR_INVALID_PARAM (everything else).  O(n + bags).
 */
ember_status_t ember_bag_validate(const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                  int64_t rows, char *err, size_t err_length);

/* A table's rows as the ops read them.  The rows are borrowed. */
typedef struct {
    const void *data;    /* [rows, dim] row-major; see each call for when NULL is allowed */
    ember_dtype_t dtype; /* EMBER_DTYPE_F32, or EMBER_DTYPE_F16 (uint16_t, IEEE binary16) */
    int64_t rows;        /* the row count the batch was validated against */
    size_t dim;          /* floats per row, > 0 */
} ember_bag_table_t;

/**
 * Pool a batch.
 *
 * @table: the rows; an fp16 row is widened to fp32 and pooled exactly as its
 *   fp32 value would be (the same bits as over the widened table).
 * @out_p: [bags, dim], fully overwritten.
 * @argmax_p: [bags, dim]; required in max mode (row id chosen per element,
 *   -1 for an empty bag), ignored (may be NULL) otherwise.
 * Ties in max mode keep the first entry, as PyTorch's CPU kernel does.
 * No allocation.  Errors: ERR_INVALID_PARAM on NULL buffers, dim == 0 or a
 * dtype other than F32 and F16.
 */
ember_status_t ember_bag_forward(const ember_bag_table_t *table, const ember_bag_batch_t *batch,
                                 const ember_bag_opts_t *opts, float *out_p, int64_t *argmax_p);

/* Where ember_bag_backward writes the sparse row gradient.  The buffers are
 * the caller's; @nrows is set by the call. */
typedef struct {
    int64_t *rows;       /* capacity n: the sorted unique rows touched (padding row excluded) */
    float *grad;         /* capacity n * dim: one accumulated gradient row per entry of rows */
    size_t nrows;        /* out: number of rows written */
    float *grad_weights; /* [n] or NULL: gradient w.r.t. the per-sample weights (requires
                            batch->weights, sum mode, table->data); 0 for padding entries */
} ember_bag_grad_t;

/**
 * Sparse backward of ember_bag_forward.
 *
 * @table: the rows (of either dtype); table->data is only read for
 *   @grad_p->grad_weights (may be NULL otherwise).
 * @grad_out: [bags, dim], gradient of the loss w.r.t. the pooled output.
 * @argmax: the forward's argmax (max mode only; NULL otherwise).
 * @grad_p: the outputs, as ember_bag_grad_t describes.
 *
 * Allocates O(n) scratch for the deduplication (one malloc per call).
 * Outputs are undefined on error.  Errors: ERR_INVALID_PARAM (NULL buffers,
 * weight gradient requested without weights, a dtype other than F32 and
 * F16), ERR_NO_MEMORY.
 */
ember_status_t ember_bag_backward(const ember_bag_table_t *table, const ember_bag_batch_t *batch,
                                  const ember_bag_opts_t *opts, const float *grad_out,
                                  const int64_t *argmax, ember_bag_grad_t *grad_p);

/**
 * Deduplicate row ids: the sorted unique values of @indices (entries equal to
 * @skip left out; pass -1 for none) and the inverse map, so that
 * unique_p[inverse_p[i]] == indices[i] (inverse_p[i] == -1 for skipped
 * entries).  The distributed lookup uses it to send each row once.
 *
 * @unique_p: capacity n; @inverse_p: [n]; @nunique_p: count written.
 * Deterministic (stable sort).  Allocates O(n) scratch.
 * Errors: ERR_INVALID_PARAM (NULL buffers with n > 0), ERR_NO_MEMORY.
 */
ember_status_t ember_bag_dedup(const int64_t *indices, size_t n, int64_t skip, int64_t *unique_p,
                               int64_t *inverse_p, size_t *nunique_p);

#ifdef __cplusplus
}
#endif
#endif
