/* ember engine: EmbeddingBag forward/backward/validation on the CPU. */
#include <ember/embedding_bag.h>

#include "common/copy.h"
#include "common/prefetch.h"
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

ember_status_t ember_bag_validate(const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                  int64_t rows, char *err, size_t err_length)
{
    (void)ember_status_text(err, err_length, EMBER_OK, "%s", "");
    if (!batch || !opts) {
        (void)ember_status_text(err, err_length, EMBER_OK, "batch or options missing");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (rows < 0) {
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "table has a negative row count %" PRId64, rows);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (opts->mode != EMBER_BAG_SUM && opts->mode != EMBER_BAG_MEAN &&
        opts->mode != EMBER_BAG_MAX) {
        (void)ember_status_text(err, err_length, EMBER_OK, "unknown pooling mode %d",
                                (int)opts->mode);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (opts->padding_idx < -1 || opts->padding_idx >= rows) {
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "padding_idx %" PRId64 " is out of range [-1, %" PRId64 ")",
                                opts->padding_idx, rows);
        return EMBER_ERR_OUT_OF_RANGE;
    }
    if (batch->n > 0 && !batch->indices) {
        (void)ember_status_text(err, err_length, EMBER_OK, "indices missing for %zu entries",
                                batch->n);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->bags > 0 && !batch->offsets) {
        (void)ember_status_text(err, err_length, EMBER_OK, "offsets missing for %zu bags",
                                batch->bags);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->bags == 0 && batch->n > 0) {
        /* PyTorch would reject this too: n entries but nowhere to pool them. */
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "%zu indices but no bags (offsets is empty)", batch->n);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->weights) {
        if (opts->mode != EMBER_BAG_SUM) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "per-sample weights are only supported with mode sum "
                                    "(mode is %s)",
                                    ember_bag_mode_name(opts->mode));
            return EMBER_ERR_INVALID_PARAM;
        }
        if (batch->n_weights != batch->n) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "per-sample weights length %zu does not match indices "
                                    "length %zu",
                                    batch->n_weights, batch->n);
            return EMBER_ERR_INVALID_PARAM;
        }
    } else if (batch->n_weights != 0) {
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "per-sample weights length %zu given without weights",
                                batch->n_weights);
        return EMBER_ERR_INVALID_PARAM;
    }

    if (batch->bags > 0 && batch->offsets[0] != 0) {
        (void)ember_status_text(err, err_length, EMBER_OK, "offsets[0] is %" PRId64 ", must be 0",
                                batch->offsets[0]);
        return EMBER_ERR_INVALID_PARAM;
    }
    for (size_t b = 0; b < batch->bags; b++) {
        int64_t off = batch->offsets[b];
        if (b > 0 && off < batch->offsets[b - 1]) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "offsets decrease at bag %zu: %" PRId64 " after %" PRId64, b,
                                    off, batch->offsets[b - 1]);
            return EMBER_ERR_INVALID_PARAM;
        }
        if (off < 0 || (uint64_t)off > (uint64_t)batch->n) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "offset %" PRId64 " of bag %zu is past the end of indices "
                                    "(n = %zu)",
                                    off, b, batch->n);
            return EMBER_ERR_INVALID_PARAM;
        }
    }

    /* Walk bags and entries together so the message can name the bag. */
    for (size_t b = 0; b < batch->bags; b++) {
        size_t end = bag_end(batch, b);
        for (size_t i = (size_t)batch->offsets[b]; i < end; i++) {
            int64_t idx = batch->indices[i];
            if (idx < 0 || idx >= rows) {
                (void)ember_status_text(err, err_length, EMBER_OK,
                                        "index %" PRId64 " at position %zu (bag %zu) is out "
                                        "of range [0, %" PRId64 ")",
                                        idx, i, b, rows);
                return EMBER_ERR_OUT_OF_RANGE;
            }
        }
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

ember_status_t ember_bag_forward(const float *table, int64_t rows, size_t dim,
                                 const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                 float *out_p, int64_t *argmax_p)
{
    return ember_bag_forward_typed(table, EMBER_DTYPE_F32, rows, dim, batch, opts, out_p, argmax_p);
}

/* The pooling of ember_bag_forward_typed, inlined into one copy per row type
 * (@half a constant), so the fp32 loops carry no test of it. */
static inline __attribute__((always_inline)) void
bag_pool_rows(const void *table, const int half, size_t dim, const ember_bag_batch_t *batch,
              const ember_bag_opts_t *opts, float *out_p, int64_t *argmax_p)
{
    const int64_t pad = opts->padding_idx;
    const float *w = batch->weights;
    const size_t row_bytes = dim * (half ? sizeof(uint16_t) : sizeof(float));
    const size_t chunk = half ? BAG_HALF_CHUNK : dim;
    const char *base = table;
    float tmp[BAG_HALF_CHUNK];
#define BAG_ROW(idx) ((const void *)(base + (size_t)(idx)*row_bytes))

    /* Rows EMBER_PREFETCH_AHEAD positions ahead are requested while this one
     * is pooled (indices run on across bags). */
#define BAG_PREFETCH(i)                                                         \
    do {                                                                        \
        size_t ahead_ = (i) + EMBER_PREFETCH_AHEAD;                             \
        if (ahead_ < batch->n && batch->indices[ahead_] != pad)                 \
            ember_prefetch_span(BAG_ROW(batch->indices[ahead_]), row_bytes, 0); \
    } while (0)
    for (size_t i = 0; i < EMBER_PREFETCH_AHEAD && i < batch->n; i++)
        if (batch->indices[i] != pad)
            ember_prefetch_span(BAG_ROW(batch->indices[i]), row_bytes, 0);

    for (size_t b = 0; b < batch->bags; b++) {
        float *restrict out = out_p + b * dim;
        size_t begin = (size_t)batch->offsets[b], end = bag_end(batch, b);
        size_t count = 0;

        if (end - begin == 1 && opts->mode != EMBER_BAG_MAX && !w && batch->indices[begin] != pad) {
            /* A one-index bag is its row: a copy, not zero-then-add. */
            BAG_PREFETCH(begin);
            const void *row = BAG_ROW(batch->indices[begin]);
            if (half)
                ember_half_to_float_n(row, out, dim);
            else
                ember_copy(out, row, row_bytes);
            continue;
        }
        memset(out, 0, dim * sizeof(*out));
        switch (opts->mode) {
        case EMBER_BAG_SUM:
        case EMBER_BAG_MEAN:
            for (size_t i = begin; i < end; i++) {
                int64_t idx = batch->indices[i];
                BAG_PREFETCH(i);
                if (idx == pad)
                    continue;
                const void *row = BAG_ROW(idx);
                if (half && w)
                    ember_half_axpy(out, row, w[i], dim);
                else if (half)
                    ember_half_add(out, row, dim);
                else if (w)
                    row_axpy(out, row, w[i], dim);
                else
                    row_add(out, row, dim);
                count++;
            }
            if (opts->mode == EMBER_BAG_MEAN && count > 1) {
                /* count == 0 leaves the zeros an empty bag must pool to. */
                float c = (float)count;
                for (size_t d = 0; d < dim; d++)
                    out[d] /= c;
            }
            break;
        case EMBER_BAG_MAX: {
            int64_t *restrict am = argmax_p + b * dim;
            for (size_t d = 0; d < dim; d++)
                am[d] = -1;
            for (size_t i = begin; i < end; i++) {
                int64_t idx = batch->indices[i];
                BAG_PREFETCH(i);
                if (idx == pad)
                    continue;
                for (size_t c = 0; c < dim; c += chunk) {
                    size_t len = dim - c < chunk ? dim - c : chunk;
                    const float *restrict row = bag_row_span(BAG_ROW(idx), half, c, len, tmp);
                    float *restrict o = out + c;
                    int64_t *restrict a = am + c;
                    if (count == 0) {
                        ember_copy(o, row, len * sizeof(*o));
                        for (size_t d = 0; d < len; d++)
                            a[d] = idx;
                    } else {
                        /* Strict '>' keeps the first maximum (PyTorch CPU). */
                        for (size_t d = 0; d < len; d++) {
                            int take = row[d] > o[d];
                            o[d] = take ? row[d] : o[d];
                            a[d] = take ? idx : a[d];
                        }
                    }
                }
                count++;
            }
            break;
        }
        }
    }
#undef BAG_PREFETCH
#undef BAG_ROW
}

ember_status_t ember_bag_forward_typed(const void *table, ember_dtype_t dtype, int64_t rows,
                                       size_t dim, const ember_bag_batch_t *batch,
                                       const ember_bag_opts_t *opts, float *out_p,
                                       int64_t *argmax_p)
{
    if (dtype != EMBER_DTYPE_F32 && dtype != EMBER_DTYPE_F16) {
        ember_error("embedding", "bag: rows of dtype %d are not supported", (int)dtype);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(bag_check_args(table, dim, batch, opts));
    if (batch->bags > 0 && !out_p)
        return EMBER_ERR_INVALID_PARAM;
    if (opts->mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax_p) {
        ember_error("embedding", "max mode needs an argmax buffer");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->n > 0 && !table)
        return EMBER_ERR_INVALID_PARAM;
    (void)rows; /* indices were validated against rows by the caller */
    if (dtype == EMBER_DTYPE_F16)
        bag_pool_rows(table, 1, dim, batch, opts, out_p, argmax_p);
    else
        bag_pool_rows(table, 0, dim, batch, opts, out_p, argmax_p);
    return EMBER_OK;
}

/* Position of @value in the sorted array @keys[n], or -1. */
static inline int64_t find_sorted(const int64_t *keys, size_t n, int64_t value)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < n && keys[lo] == value) ? (int64_t)lo : -1;
}

/* (value, position) pairs for the radix sort of ember_bag_dedup. */
typedef struct {
    uint64_t value;
    uint64_t position;
} dedup_pair_t;

/* Scratch kept between calls (grow-only): a step allocates nothing. */
static __thread dedup_pair_t *dedup_scratch;
static __thread size_t dedup_capacity;

ember_status_t ember_bag_dedup(const int64_t *indices, size_t n, int64_t skip, int64_t *unique_p,
                               int64_t *inverse_p, size_t *nunique_p)
{
    enum {
        DIGIT_BITS = 11,
        BUCKETS = 1 << DIGIT_BITS
    };
    size_t m = 0, u = 0;
    uint64_t max = 0;

    if (n > 0 && (!indices || !unique_p || !inverse_p))
        return EMBER_ERR_INVALID_PARAM;
    if (!nunique_p)
        return EMBER_ERR_INVALID_PARAM;
    if (2 * n > dedup_capacity) {
        dedup_pair_t *grown = realloc(dedup_scratch, 2 * n * sizeof(*grown));
        if (!grown)
            return EMBER_ERR_NO_MEMORY;
        dedup_scratch = grown;
        dedup_capacity = 2 * n;
    }
    dedup_pair_t *pairs = dedup_scratch, *other = dedup_scratch + n;
    for (size_t i = 0; i < n; i++) {
        inverse_p[i] = -1;
        if (indices[i] == skip)
            continue;
        /* Row ids are validated non-negative; the cast keeps any other
         * value distinct and ordered among the non-negative ones. */
        uint64_t value = (uint64_t)indices[i] ^ (1ull << 63);
        pairs[m++] = (dedup_pair_t){.value = value, .position = i};
        if (value > max)
            max = value;
    }
    /* LSD radix sort, stable, only as many digits as the largest id has:
     * O(n) where a comparison sort was the hot spot of the trainer. */
    size_t counts[BUCKETS];
    for (unsigned shift = 0; shift < 64 && (max >> shift) != 0; shift += DIGIT_BITS) {
        memset(counts, 0, sizeof(counts));
        for (size_t i = 0; i < m; i++)
            counts[(pairs[i].value >> shift) & (BUCKETS - 1)]++;
        for (size_t d = 0, total = 0; d < BUCKETS; d++) {
            size_t c = counts[d];
            counts[d] = total;
            total += c;
        }
        for (size_t i = 0; i < m; i++)
            other[counts[(pairs[i].value >> shift) & (BUCKETS - 1)]++] = pairs[i];
        dedup_pair_t *swap = pairs;
        pairs = other;
        other = swap;
    }
    for (size_t i = 0; i < m; i++) {
        int64_t value = (int64_t)(pairs[i].value ^ (1ull << 63));
        if (u == 0 || unique_p[u - 1] != value)
            unique_p[u++] = value;
        inverse_p[pairs[i].position] = (int64_t)u - 1;
    }
    *nunique_p = u;
    return EMBER_OK;
}

ember_status_t ember_bag_backward(const float *table, int64_t rows, size_t dim,
                                  const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                  const float *grad_out, const int64_t *argmax,
                                  int64_t *grad_rows_p, float *grad_p, size_t *nrows_p,
                                  float *grad_weights_p)
{
    return ember_bag_backward_typed(table, EMBER_DTYPE_F32, rows, dim, batch, opts, grad_out,
                                    argmax, grad_rows_p, grad_p, nrows_p, grad_weights_p);
}

ember_status_t ember_bag_backward_typed(const void *table, ember_dtype_t dtype, int64_t rows,
                                        size_t dim, const ember_bag_batch_t *batch,
                                        const ember_bag_opts_t *opts, const float *grad_out,
                                        const int64_t *argmax, int64_t *grad_rows_p, float *grad_p,
                                        size_t *nrows_p, float *grad_weights_p)
{
    ember_status_t status;
    int64_t *inverse;
    size_t nu = 0;
    const int64_t pad = opts ? opts->padding_idx : -1;

    (void)rows;
    if (dtype != EMBER_DTYPE_F32 && dtype != EMBER_DTYPE_F16) {
        ember_error("embedding", "bag backward: rows of dtype %d are not supported", (int)dtype);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (!batch || !opts || dim == 0 || !nrows_p ||
        (batch->bags > 0 && (!grad_out || !batch->offsets)) ||
        (batch->n > 0 && (!batch->indices || !grad_rows_p || !grad_p))) {
        ember_error("embedding", "bag backward: invalid arguments");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (opts->mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax) {
        ember_error("embedding", "bag backward: max mode needs the argmax");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (grad_weights_p && (!batch->weights || !table || opts->mode != EMBER_BAG_SUM)) {
        ember_error("embedding", "bag backward: weight gradient needs weights, "
                                 "the table and mode sum");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->n == 0) {
        *nrows_p = 0;
        return EMBER_OK;
    }

    inverse = malloc(batch->n * sizeof(*inverse));
    if (!inverse) {
        ember_error("embedding", "bag backward: no memory for %zu entries", batch->n);
        return EMBER_ERR_NO_MEMORY;
    }
    status = ember_bag_dedup(batch->indices, batch->n, pad, grad_rows_p, inverse, &nu);
    if (status != EMBER_OK)
        goto out_free_inverse;
    memset(grad_p, 0, nu * dim * sizeof(*grad_p));

    for (size_t b = 0; b < batch->bags; b++) {
        const float *go = grad_out + b * dim;
        size_t begin = (size_t)batch->offsets[b], end = bag_end(batch, b);

        switch (opts->mode) {
        case EMBER_BAG_SUM:
            for (size_t i = begin; i < end; i++) {
                if (inverse[i] < 0)
                    continue;
                float *g = grad_p + (size_t)inverse[i] * dim;
                if (batch->weights)
                    row_axpy(g, go, batch->weights[i], dim);
                else
                    row_add(g, go, dim);
            }
            break;
        case EMBER_BAG_MEAN: {
            size_t count = 0;
            for (size_t i = begin; i < end; i++)
                count += inverse[i] >= 0;
            if (count == 0)
                break;
            /* The forward divides by count; its gradient scales by 1/count. */
            float scale = 1.0f / (float)count;
            for (size_t i = begin; i < end; i++) {
                if (inverse[i] >= 0)
                    row_axpy(grad_p + (size_t)inverse[i] * dim, go, scale, dim);
            }
            break;
        }
        case EMBER_BAG_MAX: {
            const int64_t *am = argmax + b * dim;
            for (size_t d = 0; d < dim; d++) {
                if (am[d] < 0)
                    continue;
                int64_t u = find_sorted(grad_rows_p, nu, am[d]);
                if (u < 0) {
                    ember_error("embedding",
                                "bag backward: argmax row %" PRId64
                                " of bag %zu is not in the batch",
                                am[d], b);
                    status = EMBER_ERR_INVALID_PARAM;
                    goto out_free_inverse;
                }
                grad_p[(size_t)u * dim + d] += go[d];
            }
            break;
        }
        }

        if (grad_weights_p) {
            /* d out[b] / d w_i = table[idx_i]; padding entries get 0. */
            const int half = dtype == EMBER_DTYPE_F16;
            const size_t chunk = half ? BAG_HALF_CHUNK : dim;
            const size_t row_bytes = dim * (half ? sizeof(uint16_t) : sizeof(float));
            float tmp[BAG_HALF_CHUNK];
            for (size_t i = begin; i < end; i++) {
                float acc = 0.0f;
                const void *at = (const char *)table + (size_t)batch->indices[i] * row_bytes;
                for (size_t c = 0; inverse[i] >= 0 && c < dim; c += chunk) {
                    size_t len = dim - c < chunk ? dim - c : chunk;
                    const float *row = bag_row_span(at, half, c, len, tmp);
                    for (size_t d = 0; d < len; d++)
                        acc += row[d] * go[c + d];
                }
                grad_weights_p[i] = acc;
            }
        }
    }
    *nrows_p = nu;
    status = EMBER_OK;

out_free_inverse:
    free(inverse);
    return status;
}
