/* ember engine: EmbeddingBag forward/backward/validation on the CPU. */
#include <ember/embedding_bag.h>

#include "common/copy.h"
#include "common/prefetch.h"
#include "common/radix.h"
#include "common/reserve.h"
#include "common/search.h"
#include "engine/ops/bag_slots.h"
#include "engine/ops/half.h"

#include <ember/log.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ember_bag_mode_name(ember_bag_mode_t mode)
{
    switch (mode) {
    case EMBER_BAG_SUM: return "sum";
    case EMBER_BAG_MEAN: return "mean";
    case EMBER_BAG_MAX: return "max";
    }
    return "unknown";
}

ember_status_t ember_bag_mode_parse(const char *text, ember_bag_mode_t *mode_p)
{
    if (!text)
        return EMBER_ERR_INVALID_PARAM;
    if (strcmp(text, "sum") == 0)
        *mode_p = EMBER_BAG_SUM;
    else if (strcmp(text, "mean") == 0)
        *mode_p = EMBER_BAG_MEAN;
    else if (strcmp(text, "max") == 0)
        *mode_p = EMBER_BAG_MAX;
    else
        return EMBER_ERR_INVALID_PARAM;
    return EMBER_OK;
}

/* End (exclusive) of bag b: the next offset, or n for the last bag. */
static inline size_t bag_end(const ember_bag_batch_t *batch, size_t b)
{
    return (b + 1 < batch->bags) ? (size_t)batch->offsets[b + 1] : batch->n;
}

/* The table's row count and the pooling options. */
static ember_status_t validate_opts(const ember_bag_opts_t *opts, int64_t rows, char *err,
                                    size_t err_length)
{
    if (rows < 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table has a negative row count %" PRId64, rows);
    if (opts->mode != EMBER_BAG_SUM && opts->mode != EMBER_BAG_MEAN && opts->mode != EMBER_BAG_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "unknown pooling mode %d", (int)opts->mode);
    if (opts->padding_idx < -1 || opts->padding_idx >= rows)
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                 "padding_idx %" PRId64 " is out of range [-1, %" PRId64 ")",
                                 opts->padding_idx, rows);
    return EMBER_OK;
}

/* Every array the counts promise is there. */
static ember_status_t validate_arrays(const ember_bag_batch_t *batch, char *err, size_t err_length)
{
    if (batch->n > 0 && !batch->indices)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "indices missing for %zu entries", batch->n);
    if (batch->bags > 0 && !batch->offsets)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "offsets missing for %zu bags", batch->bags);
    if (batch->bags == 0 && batch->n > 0) /* PyTorch rejects it too: nowhere to pool */
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%zu indices but no bags (offsets is empty)", batch->n);
    return EMBER_OK;
}

static ember_status_t validate_weights(const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                       char *err, size_t err_length)
{
    if (!batch->weights) {
        if (batch->n_weights != 0)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "per-sample weights length %zu given without weights",
                                     batch->n_weights);
        return EMBER_OK;
    }
    if (opts->mode != EMBER_BAG_SUM)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "per-sample weights are only supported with mode sum "
                                 "(mode is %s)",
                                 ember_bag_mode_name(opts->mode));
    if (batch->n_weights != batch->n)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "per-sample weights length %zu does not match indices "
                                 "length %zu",
                                 batch->n_weights, batch->n);
    return EMBER_OK;
}

static ember_status_t validate_offsets(const ember_bag_batch_t *batch, char *err, size_t err_length)
{
    if (batch->bags > 0 && batch->offsets[0] != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "offsets[0] is %" PRId64 ", must be 0", batch->offsets[0]);
    for (size_t b = 0; b < batch->bags; b++) {
        int64_t off = batch->offsets[b];
        if (b > 0 && off < batch->offsets[b - 1])
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "offsets decrease at bag %zu: %" PRId64 " after %" PRId64, b,
                                     off, batch->offsets[b - 1]);
        if (off < 0 || (uint64_t)off > (uint64_t)batch->n)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "offset %" PRId64 " of bag %zu is past the end of indices "
                                     "(n = %zu)",
                                     off, b, batch->n);
    }
    return EMBER_OK;
}

/* Bags and entries walked together, so the message can name the bag. */
static ember_status_t validate_indices(const ember_bag_batch_t *batch, int64_t rows, char *err,
                                       size_t err_length)
{
    for (size_t b = 0; b < batch->bags; b++) {
        size_t end = bag_end(batch, b);
        for (size_t i = (size_t)batch->offsets[b]; i < end; i++) {
            int64_t idx = batch->indices[i];
            if (idx < 0 || idx >= rows)
                return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                         "index %" PRId64 " at position %zu (bag %zu) is out "
                                         "of range [0, %" PRId64 ")",
                                         idx, i, b, rows);
        }
    }
    return EMBER_OK;
}

/* The phases run in order, each only when the ones before passed, so the
 * message names the first thing wrong; nothing is logged (see the header). */
ember_status_t ember_bag_validate(const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                  int64_t rows, char *err, size_t err_length)
{
    (void)ember_status_text(err, err_length, EMBER_OK, "%s", "");
    if (!batch || !opts)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "batch or options missing");
    ember_status_t status = validate_opts(opts, rows, err, err_length);
    if (status == EMBER_OK)
        status = validate_arrays(batch, err, err_length);
    if (status == EMBER_OK)
        status = validate_weights(batch, opts, err, err_length);
    if (status == EMBER_OK)
        status = validate_offsets(batch, err, err_length);
    if (status == EMBER_OK)
        status = validate_indices(batch, rows, err, err_length);
    return status;
}

/* The table descriptor itself; @what names the call in the message. */
static ember_status_t bag_check_table(const ember_bag_table_t *table, const char *what)
{
    if (!table) {
        ember_error("embedding", "%s: no table", what);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (table->dtype != EMBER_DTYPE_F32 && table->dtype != EMBER_DTYPE_F16) {
        ember_error("embedding", "%s: rows of dtype %d are not supported", what, (int)table->dtype);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

static ember_status_t bag_check_args(const void *table, size_t dim, const ember_bag_batch_t *batch,
                                     const ember_bag_opts_t *opts)
{
    if (!batch || !opts || dim == 0 || (batch->n > 0 && !batch->indices) ||
        (batch->bags > 0 && !batch->offsets) ||
        (batch->n > 0 && !table && opts->mode != EMBER_BAG_SUM)) {
        ember_error("embedding", "bag: invalid arguments (dim %zu)", dim);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/* y += a * x over one row; restrict lets the compiler vectorize it. */
static inline void row_axpy(float *restrict y, const float *restrict x, float a, size_t dim)
{
    for (size_t d = 0; d < dim; d++)
        y[d] += a * x[d];
}

static inline void row_add(float *restrict y, const float *restrict x, size_t dim)
{
    for (size_t d = 0; d < dim; d++)
        y[d] += x[d];
}

/* An fp16 row is widened this many values at a time where a kernel needs
 * fp32 values in memory (max pooling, the weight gradient). */
#define BAG_HALF_CHUNK 256

/* Values [c, c + len) of row @row as fp32: in place for fp32 rows, widened
 * into @tmp for fp16 ones. */
static inline const float *bag_row_span(const void *row, int half, size_t c, size_t len, float *tmp)
{
    if (!half)
        return (const float *)row + c;
    ember_half_to_float_n((const uint16_t *)row + c, tmp, len);
    return tmp;
}

/* The forward's phases are inlined into one copy per row type (@half a
 * constant there), so the fp32 loops carry no test of it; the backward's
 * into the one loop over bags, as one function would be. */
#define BAG_INLINE static inline __attribute__((always_inline))

/* The rows a pooling reads, and the batch's entries: values, not pointers
 * to the caller's structs, so the loops keep them in registers whatever
 * they store. */
typedef struct {
    const char *base;
    size_t row_bytes;
    size_t dim;
    int half; /* rows are fp16 */
    int64_t pad;
    const int64_t *indices; /* [n] each entry's row; or, with slots, the distinct rows */
    const uint32_t *slots;  /* [n] each entry's row is indices[slots[i]] (NULL: none) */
    size_t n;
    const float *weights;
} bag_rows_t;

/* Entry @i's row id: its index, or the distinct row its slot names (@slotted
 * is a constant where this is inlined: no test of it in the loops). */
BAG_INLINE int64_t bag_entry(const bag_rows_t *t, const int slotted, size_t i)
{
    return slotted ? t->indices[t->slots[i]] : t->indices[i];
}

BAG_INLINE const void *bag_row(const bag_rows_t *t, int64_t idx)
{
    return t->base + (size_t)idx * t->row_bytes;
}

/* Rows EMBER_PREFETCH_AHEAD positions ahead are requested while entry @i is
 * pooled (indices run on across bags). */
BAG_INLINE void bag_prefetch(const bag_rows_t *t, const int slotted, size_t i)
{
    size_t ahead = i + EMBER_PREFETCH_AHEAD;
    /* Slotted: the row id of the entry twice as far ahead is asked for
     * first, so the row's address is at hand when its turn comes (a large
     * lookup's distinct rows do not fit the cache). */
    if (slotted && ahead + EMBER_PREFETCH_AHEAD < t->n)
        __builtin_prefetch(&t->indices[t->slots[ahead + EMBER_PREFETCH_AHEAD]], 0, 3);
    if (ahead >= t->n)
        return;
    const int64_t row = bag_entry(t, slotted, ahead);
    if (row != t->pad)
        ember_prefetch_span(bag_row(t, row), t->row_bytes, 0);
}

/* From the batch's first entry: a range of a larger batch's bags starts
 * past 0 (engine/ps/table_work.c). */
BAG_INLINE void bag_prefetch_start(const bag_rows_t *t, const int slotted, size_t begin)
{
    for (size_t i = begin + EMBER_PREFETCH_AHEAD;
         slotted && i < begin + 2 * EMBER_PREFETCH_AHEAD && i < t->n; i++)
        __builtin_prefetch(&t->indices[t->slots[i]], 0, 3);
    for (size_t i = begin; i < begin + EMBER_PREFETCH_AHEAD && i < t->n; i++) {
        const int64_t row = bag_entry(t, slotted, i);
        if (row != t->pad)
            ember_prefetch_span(bag_row(t, row), t->row_bytes, 0);
    }
}

/* A one-index bag is its row: a copy, not zero-then-add. */
BAG_INLINE void bag_copy_row(const bag_rows_t *t, const int slotted, size_t i, float *restrict out)
{
    bag_prefetch(t, slotted, i);
    const void *row = bag_row(t, bag_entry(t, slotted, i));
    if (t->half)
        ember_half_to_float_n(row, out, t->dim);
    else
        ember_copy(out, row, t->row_bytes);
}

/* Sum (or mean) of bag [begin, end) into the zeroed @out. */
BAG_INLINE void bag_pool_sum(const bag_rows_t *t, const int slotted, size_t begin, size_t end,
                             int mean, float *restrict out)
{
    const float *w = t->weights;
    const size_t dim = t->dim;
    size_t count = 0;

    for (size_t i = begin; i < end; i++) {
        int64_t idx = bag_entry(t, slotted, i);
        bag_prefetch(t, slotted, i);
        if (idx == t->pad)
            continue;
        const void *row = bag_row(t, idx);
        if (t->half && w)
            ember_half_axpy(out, row, w[i], dim);
        else if (t->half)
            ember_half_add(out, row, dim);
        else if (w)
            row_axpy(out, row, w[i], dim);
        else
            row_add(out, row, dim);
        count++;
    }
    if (mean && count > 1) {
        /* count == 0 leaves the zeros an empty bag must pool to. */
        float c = (float)count;
        for (size_t d = 0; d < dim; d++)
            out[d] /= c;
    }
}

/* One span of a row into a bag's running max; @first: the bag's first row. */
BAG_INLINE void bag_max_span(const float *restrict row, int64_t idx, int first, float *restrict o,
                             int64_t *restrict a, size_t len)
{
    if (first) {
        ember_copy(o, row, len * sizeof(*o));
        for (size_t d = 0; d < len; d++)
            a[d] = idx;
        return;
    }
    /* Strict '>' keeps the first maximum (PyTorch CPU). */
    for (size_t d = 0; d < len; d++) {
        int take = row[d] > o[d];
        o[d] = take ? row[d] : o[d];
        a[d] = take ? idx : a[d];
    }
}

/* Element-wise max of bag [begin, end) into @out, the chosen rows into @am. */
BAG_INLINE void bag_pool_max(const bag_rows_t *t, const int slotted, size_t begin, size_t end,
                             float *restrict out, int64_t *restrict am)
{
    const size_t dim = t->dim, chunk = t->half ? BAG_HALF_CHUNK : dim;
    float tmp[BAG_HALF_CHUNK];
    size_t count = 0;

    for (size_t d = 0; d < dim; d++)
        am[d] = -1;
    for (size_t i = begin; i < end; i++) {
        int64_t idx = bag_entry(t, slotted, i);
        bag_prefetch(t, slotted, i);
        if (idx == t->pad)
            continue;
        for (size_t c = 0; c < dim; c += chunk) {
            size_t len = dim - c < chunk ? dim - c : chunk;
            const float *restrict row = bag_row_span(bag_row(t, idx), t->half, c, len, tmp);
            bag_max_span(row, idx, count == 0, out + c, am + c, len);
        }
        count++;
    }
}

/* A batch's cuts into bags: int64 offsets (a batch), or uint32 ones (a
 * PS's deduplicated lookup); the last bag runs to n. */
typedef struct {
    const int64_t *offsets;
    const uint32_t *offsets32;
    size_t bags, n;
} bag_cuts_t;

BAG_INLINE size_t bag_cut(const bag_cuts_t *c, const int slotted, size_t b)
{
    return slotted ? (size_t)c->offsets32[b] : (size_t)c->offsets[b];
}

BAG_INLINE size_t bag_cut_end(const bag_cuts_t *c, const int slotted, size_t b)
{
    return b + 1 < c->bags ? bag_cut(c, slotted, b + 1) : c->n;
}

/* What a pooling reads: the rows, the entries (as bag_rows_t has them), the
 * cuts, the mode. */
typedef struct {
    const void *table;
    size_t dim;
    int64_t pad;
    const int64_t *indices;
    const uint32_t *slots;
    size_t n;
    const float *weights;
    bag_cuts_t cuts;
    ember_bag_mode_t mode;
} bag_pool_args_t;

/* The bags in order, each pooled as its mode says (@half and @slotted are
 * constants in each copy below, so its loops carry no test of them). */
BAG_INLINE void bag_pool_rows(const bag_pool_args_t *a, const int half, const int slotted,
                              float *out_p, int64_t *argmax_p)
{
    const size_t dim = a->dim;
    const bag_cuts_t *cuts = &a->cuts;
    const bag_rows_t t = {.base = a->table,
                          .row_bytes = dim * (half ? sizeof(uint16_t) : sizeof(float)),
                          .dim = dim,
                          .half = half,
                          .pad = a->pad,
                          .indices = a->indices,
                          .slots = a->slots,
                          .n = a->n,
                          .weights = a->weights};

    bag_prefetch_start(&t, slotted, cuts->bags ? bag_cut(cuts, slotted, 0) : 0);
    for (size_t b = 0; b < cuts->bags; b++) {
        float *restrict out = out_p + b * dim;
        size_t begin = bag_cut(cuts, slotted, b), end = bag_cut_end(cuts, slotted, b);

        if (end - begin == 1 && a->mode != EMBER_BAG_MAX && !t.weights &&
            bag_entry(&t, slotted, begin) != t.pad) {
            bag_copy_row(&t, slotted, begin, out);
            continue;
        }
        memset(out, 0, dim * sizeof(*out));
        switch (a->mode) {
        case EMBER_BAG_SUM:
        case EMBER_BAG_MEAN:
            bag_pool_sum(&t, slotted, begin, end, a->mode == EMBER_BAG_MEAN, out);
            break;
        case EMBER_BAG_MAX: bag_pool_max(&t, slotted, begin, end, out, argmax_p + b * dim); break;
        }
    }
}

/* One copy per row type and indexing. */
static void bag_pool(const bag_pool_args_t *a, int half, float *out_p, int64_t *argmax_p)
{
    if (half && a->slots)
        bag_pool_rows(a, 1, 1, out_p, argmax_p);
    else if (half)
        bag_pool_rows(a, 1, 0, out_p, argmax_p);
    else if (a->slots)
        bag_pool_rows(a, 0, 1, out_p, argmax_p);
    else
        bag_pool_rows(a, 0, 0, out_p, argmax_p);
}

ember_status_t ember_bag_forward(const ember_bag_table_t *table, const ember_bag_batch_t *batch,
                                 const ember_bag_opts_t *opts, float *out_p, int64_t *argmax_p)
{
    EMBER_CHECK(bag_check_table(table, "bag"));
    EMBER_CHECK(bag_check_args(table->data, table->dim, batch, opts));
    if (batch->bags > 0 && !out_p)
        return EMBER_ERR_INVALID_PARAM;
    if (opts->mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax_p) {
        ember_error("embedding", "max mode needs an argmax buffer");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->n > 0 && !table->data)
        return EMBER_ERR_INVALID_PARAM;
    /* table->rows is not read: the caller validated the indices against it. */
    const bag_pool_args_t args = {
            .table = table->data,
            .dim = table->dim,
            .pad = opts->padding_idx,
            .indices = batch->indices,
            .n = batch->n,
            .weights = batch->weights,
            .cuts = {.offsets = batch->offsets, .bags = batch->bags, .n = batch->n},
            .mode = opts->mode};
    bag_pool(&args, table->dtype == EMBER_DTYPE_F16, out_p, argmax_p);
    return EMBER_OK;
}

ember_status_t ember_bag_forward_slots(const ember_bag_table_t *table,
                                       const ember_bag_slots_t *batch, ember_bag_mode_t mode,
                                       float *out_p, int64_t *argmax_p)
{
    EMBER_CHECK(bag_check_table(table, "bag"));
    if (!batch || table->dim == 0 || (batch->n > 0 && (!batch->rows || !batch->slots)) ||
        (batch->bags > 0 && (!batch->offsets || !out_p)) || (batch->n > 0 && !table->data) ||
        (mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax_p)) {
        ember_error("embedding", "bag over slots: invalid arguments (dim %zu)", table->dim);
        return EMBER_ERR_INVALID_PARAM;
    }
    const bag_pool_args_t args = {
            .table = table->data,
            .dim = table->dim,
            .pad = -1,
            .indices = batch->rows,
            .slots = batch->slots,
            .n = batch->n,
            .weights = batch->weights,
            .cuts = {.offsets32 = batch->offsets, .bags = batch->bags, .n = batch->n},
            .mode = mode};
    bag_pool(&args, table->dtype == EMBER_DTYPE_F16, out_p, argmax_p);
    return EMBER_OK;
}

/* Position of @value in the sorted array @keys[n], or -1. */
static inline int64_t find_sorted(const int64_t *keys, size_t n, int64_t value)
{
    size_t lo = ember_lower_bound_i64(keys, n, value);
    return (lo < n && keys[lo] == value) ? (int64_t)lo : -1;
}

/* Scratch kept between calls (grow-only): a step allocates nothing. */
static __thread ember_radix_pair_t *dedup_scratch;
static __thread size_t dedup_capacity;

/* The entries other than @skip as (row, position) pairs; returns their
 * count, the smallest and largest key in @min_p and @max_p.  Every inverse
 * starts at -1 (skipped). */
static size_t dedup_keys(const int64_t *indices, size_t n, int64_t skip, ember_radix_pair_t *pairs,
                         int64_t *inverse_p, uint64_t *min_p, uint64_t *max_p)
{
    size_t m = 0;
    uint64_t min = UINT64_MAX, max = 0;
    for (size_t i = 0; i < n; i++) {
        inverse_p[i] = -1;
        if (indices[i] == skip)
            continue;
        /* Row ids are validated non-negative; the cast keeps any other
         * value distinct and ordered among the non-negative ones. */
        uint64_t value = (uint64_t)indices[i] ^ (1ull << 63);
        pairs[m++] = (ember_radix_pair_t){.key = value, .value = i};
        if (value > max)
            max = value;
        if (value < min)
            min = value;
    }
    *min_p = min;
    *max_p = max;
    return m;
}

ember_status_t ember_bag_dedup(const int64_t *indices, size_t n, int64_t skip, int64_t *unique_p,
                               int64_t *inverse_p, size_t *nunique_p)
{
    size_t u = 0;
    uint64_t min, max;

    if (n > 0 && (!indices || !unique_p || !inverse_p))
        return EMBER_ERR_INVALID_PARAM;
    if (!nunique_p)
        return EMBER_ERR_INVALID_PARAM;
    if (n > SIZE_MAX / 2 || !EMBER_RESERVE(dedup_scratch, dedup_capacity, 2 * n))
        return EMBER_ERR_NO_MEMORY;
    size_t m = dedup_keys(indices, n, skip, dedup_scratch, inverse_p, &min, &max);
    const ember_radix_pair_t *pairs =
            ember_radix_sort(dedup_scratch, dedup_scratch + n, m, min, max);
    for (size_t i = 0; i < m; i++) {
        int64_t value = (int64_t)(pairs[i].key ^ (1ull << 63));
        if (u == 0 || unique_p[u - 1] != value)
            unique_p[u++] = value;
        inverse_p[pairs[i].value] = (int64_t)u - 1;
    }
    *nunique_p = u;
    return EMBER_OK;
}

/* What a backward's per-bag phases read and write (values, as bag_rows_t). */
typedef struct {
    const void *table;
    int half; /* rows are fp16 */
    size_t dim;
    const int64_t *indices;
    const float *weights;
    const int64_t *inverse; /* [n]: each entry's place in rows, -1 for padding */
    const int64_t *rows;    /* the sorted unique rows */
    size_t nu;
    float *grad;
    float *grad_weights;
} bag_backward_t;

static ember_status_t backward_check_args(const ember_bag_table_t *table,
                                          const ember_bag_batch_t *batch,
                                          const ember_bag_opts_t *opts, const float *grad_out,
                                          const int64_t *argmax, const ember_bag_grad_t *out)
{
    EMBER_CHECK(bag_check_table(table, "bag backward"));
    if (!batch || !opts || table->dim == 0 || !out ||
        (batch->bags > 0 && (!grad_out || !batch->offsets)) ||
        (batch->n > 0 && (!batch->indices || !out->rows || !out->grad))) {
        ember_error("embedding", "bag backward: invalid arguments");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (opts->mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax) {
        ember_error("embedding", "bag backward: max mode needs the argmax");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (out->grad_weights && (!batch->weights || !table->data || opts->mode != EMBER_BAG_SUM)) {
        ember_error("embedding", "bag backward: weight gradient needs weights, "
                                 "the table and mode sum");
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

BAG_INLINE void backward_sum(const bag_backward_t *k, size_t begin, size_t end, const float *go)
{
    for (size_t i = begin; i < end; i++) {
        if (k->inverse[i] < 0)
            continue;
        float *g = k->grad + (size_t)k->inverse[i] * k->dim;
        if (k->weights)
            row_axpy(g, go, k->weights[i], k->dim);
        else
            row_add(g, go, k->dim);
    }
}

BAG_INLINE void backward_mean(const bag_backward_t *k, size_t begin, size_t end, const float *go)
{
    size_t count = 0;
    for (size_t i = begin; i < end; i++)
        count += k->inverse[i] >= 0;
    if (count == 0)
        return;
    /* The forward divides by count; its gradient scales by 1/count. */
    float scale = 1.0f / (float)count;
    for (size_t i = begin; i < end; i++) {
        if (k->inverse[i] >= 0)
            row_axpy(k->grad + (size_t)k->inverse[i] * k->dim, go, scale, k->dim);
    }
}

/* Each element's gradient goes to the row the forward's max chose. */
BAG_INLINE ember_status_t backward_max(const bag_backward_t *k, size_t b, const int64_t *am,
                                       const float *go)
{
    for (size_t d = 0; d < k->dim; d++) {
        if (am[d] < 0)
            continue;
        int64_t u = find_sorted(k->rows, k->nu, am[d]);
        if (u < 0) {
            ember_error("embedding",
                        "bag backward: argmax row %" PRId64 " of bag %zu is not in the batch",
                        am[d], b);
            return EMBER_ERR_INVALID_PARAM;
        }
        k->grad[(size_t)u * k->dim + d] += go[d];
    }
    return EMBER_OK;
}

/* d out[b] / d w_i = table[idx_i]; padding entries get 0. */
BAG_INLINE void backward_weights(const bag_backward_t *k, size_t begin, size_t end, const float *go)
{
    const size_t dim = k->dim, chunk = k->half ? BAG_HALF_CHUNK : dim;
    const size_t row_bytes = dim * (k->half ? sizeof(uint16_t) : sizeof(float));
    float tmp[BAG_HALF_CHUNK];
    for (size_t i = begin; i < end; i++) {
        float acc = 0.0f;
        const void *at = (const char *)k->table + (size_t)k->indices[i] * row_bytes;
        for (size_t c = 0; k->inverse[i] >= 0 && c < dim; c += chunk) {
            size_t len = dim - c < chunk ? dim - c : chunk;
            const float *row = bag_row_span(at, k->half, c, len, tmp);
            for (size_t d = 0; d < len; d++)
                acc += row[d] * go[c + d];
        }
        k->grad_weights[i] = acc;
    }
}

/* Every bag's gradient into the rows it touched, in bag order. */
BAG_INLINE ember_status_t backward_bags(const bag_backward_t *k, const ember_bag_batch_t *batch,
                                        const ember_bag_opts_t *opts, const float *grad_out,
                                        const int64_t *argmax)
{
    memset(k->grad, 0, k->nu * k->dim * sizeof(*k->grad));
    for (size_t b = 0; b < batch->bags; b++) {
        const float *go = grad_out + b * k->dim;
        size_t begin = (size_t)batch->offsets[b], end = bag_end(batch, b);

        switch (opts->mode) {
        case EMBER_BAG_SUM: backward_sum(k, begin, end, go); break;
        case EMBER_BAG_MEAN: backward_mean(k, begin, end, go); break;
        case EMBER_BAG_MAX: EMBER_CHECK(backward_max(k, b, argmax + b * k->dim, go)); break;
        }
        if (k->grad_weights)
            backward_weights(k, begin, end, go);
    }
    return EMBER_OK;
}

ember_status_t ember_bag_backward(const ember_bag_table_t *table, const ember_bag_batch_t *batch,
                                  const ember_bag_opts_t *opts, const float *grad_out,
                                  const int64_t *argmax, ember_bag_grad_t *grad_p)
{
    EMBER_CHECK(backward_check_args(table, batch, opts, grad_out, argmax, grad_p));
    if (batch->n == 0) {
        grad_p->nrows = 0;
        return EMBER_OK;
    }
    int64_t *inverse = malloc(batch->n * sizeof(*inverse));
    if (!inverse) {
        ember_error("embedding", "bag backward: no memory for %zu entries", batch->n);
        return EMBER_ERR_NO_MEMORY;
    }
    size_t nu = 0;
    ember_status_t status = ember_bag_dedup(batch->indices, batch->n, opts->padding_idx,
                                            grad_p->rows, inverse, &nu);
    const bag_backward_t k = {.table = table->data,
                              .half = table->dtype == EMBER_DTYPE_F16,
                              .dim = table->dim,
                              .indices = batch->indices,
                              .weights = batch->weights,
                              .inverse = inverse,
                              .rows = grad_p->rows,
                              .nu = nu,
                              .grad = grad_p->grad,
                              .grad_weights = grad_p->grad_weights};
    if (status == EMBER_OK)
        status = backward_bags(&k, batch, opts, grad_out, argmax);
    if (status == EMBER_OK)
        grad_p->nrows = nu;
    free(inverse);
    return status;
}
