/*
 * Ops: EmbeddingBag, Linear, ReLU, MLP, cross entropy, BCE.
 * Forwards are compared with naive double-precision references written here;
 * backwards with central finite differences of a scalar loss.
 */
#include "engine/ops/bag_parts.h"
#include "engine/ops/dense.h"
#include "engine/ops/half.h"
#include "engine/ops/loss.h"
#include "engine/wire/protocol.h"

#include <ember/embedding_bag.h>

#include "test_util.h"

#include <stdlib.h>
#include <unistd.h>

/* ------------------------------------------------------ finite differences */

typedef double (*loss_fn_t)(void *ctx);

/*
 * Compare @analytic[n] with central differences of @f w.r.t. @param[n].
 * The step actually taken is measured in float (p+h and p-h round), so the
 * quotient uses the true denominator.
 */
static int fd_check(const char *what, float *param, size_t n, const float *analytic, loss_fn_t f,
                    void *ctx, float h, double atol, double rtol)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        float saved = param[i];
        float up = saved + h, down = saved - h;
        param[i] = up;
        double lp = f(ctx);
        param[i] = down;
        double lm = f(ctx);
        param[i] = saved;
        double num = (lp - lm) / ((double)up - (double)down);
        double err = fabs(num - (double)analytic[i]);
        if (!(err <= atol + rtol * fabs(num))) {
            fprintf(stderr,
                    "FAIL %s: d/dparam[%zu] analytic %.6g, finite "
                    "difference %.6g\n",
                    what, i, analytic[i], num);
            return 1;
        }
        worst = err > worst ? err : worst;
    }
    fprintf(stderr, "%s: %zu partials agree (max abs err %.2g)\n", what, n, worst);
    return 0;
}

/* ----------------------------------------------------------- EmbeddingBag */

#define ROWS 12
#define DIM  5

typedef struct {
    float table[ROWS * DIM];
    ember_bag_batch_t batch;
    ember_bag_opts_t opts;
    const float *r; /* [bags, DIM] loss weights: L = sum r * out */
    float *weights; /* mutable copy for FD on weights */
} bag_ctx_t;

/* @data as the ops take a table of ROWS rows. */
static ember_bag_table_t bag_rows(const void *data, ember_dtype_t dtype, size_t dim)
{
    return (ember_bag_table_t){.data = data, .dtype = dtype, .rows = ROWS, .dim = dim};
}

static double bag_loss(void *arg)
{
    bag_ctx_t *c = arg;
    size_t bags = c->batch.bags;
    float *out = malloc((bags * DIM + 1) * sizeof(float));
    int64_t *am = malloc((bags * DIM + 1) * sizeof(int64_t));
    double l = 0.0;

    const ember_bag_table_t t = bag_rows(c->table, EMBER_DTYPE_F32, DIM);
    if (ember_bag_forward(&t, &c->batch, &c->opts, out, am) != EMBER_OK)
        l = NAN;
    for (size_t i = 0; i < bags * DIM; i++)
        l += (double)c->r[i] * out[i];
    free(out);
    free(am);
    return l;
}

/* Table values all distinct and >= 0.01 apart (so max mode's argmax does not
 * flip under a 1e-3 perturbation), in a shuffled order. */
static void fill_table(float *t, uint64_t seed)
{
    size_t n = ROWS * DIM;
    for (size_t k = 0; k < n; k++)
        t[k] = (float)((double)((k * 37 + seed) % n) * 0.01 - 0.3);
}

/*
 * Batch used by the backward checks: 6 bags, one empty (bag 3), repeated
 * rows across and within bags, row 7 as a candidate padding row appearing in
 * bags 0 and 4 (and bag 5 holding only it).
 */
static const int64_t bag_idx[] = {1, 7, 4, 1, /* bag 0 */
                                  2,          /* bag 1 */
                                  9, 3, 9,    /* bag 2 */
                                              /* bag 3: empty */
                                  11, 0, 7,   /* bag 4 */
                                  7};         /* bag 5 */
static const int64_t bag_off[] = {0, 4, 5, 8, 8, 11};
#define BAG_N (sizeof(bag_idx) / sizeof(bag_idx[0]))
#define BAG_B (sizeof(bag_off) / sizeof(bag_off[0]))

static int bag_fd(ember_bag_mode_t mode, int use_weights, int64_t padding)
{
    bag_ctx_t c;
    float r[BAG_B * DIM], w[BAG_N];
    float out[BAG_B * DIM];
    int64_t am[BAG_B * DIM];
    int64_t rows[BAG_N];
    float grad[BAG_N * DIM], gw[BAG_N], dense[ROWS * DIM];
    size_t nrows;
    uint64_t rng = 42 + (uint64_t)mode;
    char what[96];

    memset(&c, 0, sizeof(c));
    fill_table(c.table, 5 + (uint64_t)mode);
    for (size_t i = 0; i < BAG_B * DIM; i++)
        r[i] = (float)test_uniform(&rng, -1.0, 1.0);
    for (size_t i = 0; i < BAG_N; i++)
        w[i] = (float)test_uniform(&rng, -2.0, 2.0);
    c.batch = (ember_bag_batch_t){.indices = bag_idx,
                                  .n = BAG_N,
                                  .offsets = bag_off,
                                  .bags = BAG_B,
                                  .weights = use_weights ? w : NULL,
                                  .n_weights = use_weights ? BAG_N : 0};
    c.opts = (ember_bag_opts_t){.mode = mode, .padding_idx = padding};
    c.r = r;
    c.weights = w;

    char msg[256];
    CHECK(ember_bag_validate(&c.batch, &c.opts, ROWS, msg, sizeof(msg)) == EMBER_OK,
          "valid batch rejected: %s", msg);
    const ember_bag_table_t t = bag_rows(c.table, EMBER_DTYPE_F32, DIM);
    ember_bag_grad_t out_grad = {
            .rows = rows, .grad = grad, .grad_weights = use_weights ? gw : NULL};
    CHECK(ember_bag_forward(&t, &c.batch, &c.opts, out, am) == EMBER_OK, "forward");
    CHECK(ember_bag_backward(&t, &c.batch, &c.opts, r, mode == EMBER_BAG_MAX ? am : NULL,
                             &out_grad) == EMBER_OK,
          "backward");
    nrows = out_grad.nrows;

    /* The sparse gradient: sorted unique, no padding row, only batch rows. */
    memset(dense, 0, sizeof(dense));
    for (size_t u = 0; u < nrows; u++) {
        CHECK(rows[u] >= 0 && rows[u] < ROWS, "row %lld", (long long)rows[u]);
        CHECK(u == 0 || rows[u] > rows[u - 1], "rows not sorted unique at %zu", u);
        CHECK(rows[u] != padding, "padding row %lld in the gradient", (long long)padding);
        int in_batch = 0;
        for (size_t i = 0; i < BAG_N; i++)
            in_batch |= bag_idx[i] == rows[u];
        CHECK(in_batch, "row %lld not in the batch", (long long)rows[u]);
        memcpy(dense + rows[u] * DIM, grad + u * DIM, DIM * sizeof(float));
    }
    /* Every non-padding row of the batch is reported (even with 0 grad). */
    size_t expect_rows = 0;
    for (int64_t row = 0; row < ROWS; row++) {
        int present = 0;
        for (size_t i = 0; i < BAG_N; i++)
            present |= bag_idx[i] == row;
        expect_rows += present && row != padding;
    }
    CHECK(nrows == expect_rows, "%zu gradient rows, expected %zu", nrows, expect_rows);

    snprintf(what, sizeof(what), "embedding_bag %s%s%s table", ember_bag_mode_name(mode),
             use_weights ? " weighted" : "", padding >= 0 ? " padding" : "");
    if (fd_check(what, c.table, ROWS * DIM, dense, bag_loss, &c, 1e-3f, 1e-3, 1e-3))
        return 1;
    if (use_weights) {
        /* Padding entries must get exactly 0. */
        for (size_t i = 0; i < BAG_N; i++)
            CHECK(bag_idx[i] != padding || gw[i] == 0.0f, "padding entry %zu has weight grad %g", i,
                  gw[i]);
        snprintf(what, sizeof(what), "embedding_bag sum weights%s", padding >= 0 ? " padding" : "");
        if (fd_check(what, w, BAG_N, gw, bag_loss, &c, 1e-3f, 1e-3, 1e-3))
            return 1;
    }
    return 0;
}

static int case_bag_fd_sum(void)
{
    return bag_fd(EMBER_BAG_SUM, 0, -1);
}
static int case_bag_fd_mean(void)
{
    return bag_fd(EMBER_BAG_MEAN, 0, -1);
}
static int case_bag_fd_max(void)
{
    return bag_fd(EMBER_BAG_MAX, 0, -1);
}
static int case_bag_fd_weights(void)
{
    return bag_fd(EMBER_BAG_SUM, 1, -1);
}

static int case_bag_fd_padding(void)
{
    return bag_fd(EMBER_BAG_SUM, 0, 7) || bag_fd(EMBER_BAG_MEAN, 0, 7) ||
           bag_fd(EMBER_BAG_MAX, 0, 7) || bag_fd(EMBER_BAG_SUM, 1, 7);
}

/* Naive double reference of the forward, written from the PyTorch docs. */
static void bag_reference(const float *table, const ember_bag_batch_t *b, const ember_bag_opts_t *o,
                          double *out, int64_t *argmax)
{
    for (size_t bag = 0; bag < b->bags; bag++) {
        size_t begin = (size_t)b->offsets[bag];
        size_t end = bag + 1 < b->bags ? (size_t)b->offsets[bag + 1] : b->n;
        for (size_t d = 0; d < DIM; d++) {
            double acc = 0.0;
            int64_t best = -1;
            size_t count = 0;
            for (size_t i = begin; i < end; i++) {
                int64_t idx = b->indices[i];
                if (idx == o->padding_idx)
                    continue;
                double v = table[idx * DIM + d];
                if (o->mode == EMBER_BAG_MAX) {
                    if (count == 0 || v > acc) {
                        acc = v;
                        best = idx;
                    }
                } else {
                    acc += v * (b->weights ? b->weights[i] : 1.0);
                }
                count++;
            }
            if (o->mode == EMBER_BAG_MEAN && count > 0)
                acc /= (double)count;
            out[bag * DIM + d] = count ? acc : 0.0;
            if (argmax)
                argmax[bag * DIM + d] = best;
        }
    }
}

static int case_bag_forward_ref(void)
{
    float table[ROWS * DIM], w[BAG_N], out[BAG_B * DIM];
    double ref[BAG_B * DIM];
    int64_t am[BAG_B * DIM], ref_am[BAG_B * DIM];
    uint64_t rng = 7;

    for (size_t i = 0; i < ROWS * DIM; i++)
        table[i] = (float)test_uniform(&rng, -1.0, 1.0);
    for (size_t i = 0; i < BAG_N; i++)
        w[i] = (float)test_uniform(&rng, -2.0, 2.0);
    for (int mode = EMBER_BAG_SUM; mode <= EMBER_BAG_MAX; mode++) {
        for (int64_t pad = -1; pad <= 7; pad += 8) {
            for (int weighted = 0; weighted <= (mode == EMBER_BAG_SUM); weighted++) {
                ember_bag_batch_t b = {.indices = bag_idx,
                                       .n = BAG_N,
                                       .offsets = bag_off,
                                       .bags = BAG_B,
                                       .weights = weighted ? w : NULL,
                                       .n_weights = weighted ? BAG_N : 0};
                ember_bag_opts_t o = {.mode = (ember_bag_mode_t)mode, .padding_idx = pad};
                /* Poison the outputs: the forward must overwrite all. */
                memset(out, 0x7f, sizeof(out));
                memset(am, 0x7f, sizeof(am));
                const ember_bag_table_t t = bag_rows(table, EMBER_DTYPE_F32, DIM);
                CHECK(ember_bag_forward(&t, &b, &o, out, am) == EMBER_OK, "forward");
                bag_reference(table, &b, &o, ref, ref_am);
                for (size_t i = 0; i < BAG_B * DIM; i++) {
                    CHECK(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])),
                          "mode %s pad %lld weighted %d: out[%zu] %g vs ref %g",
                          ember_bag_mode_name(o.mode), (long long)pad, weighted, i, out[i], ref[i]);
                    if (mode == EMBER_BAG_MAX)
                        CHECK(am[i] == ref_am[i], "argmax[%zu] %lld vs %lld", i, (long long)am[i],
                              (long long)ref_am[i]);
                }
            }
        }
    }
    return 0;
}

/* Empty bags and padding-only bags pool to zeros (argmax -1) in every mode
 * and send no gradient anywhere. */
static int case_bag_empty(void)
{
    float table[ROWS * DIM], out[4 * DIM], grad_out[4 * DIM], g[4 * DIM];
    int64_t am[4 * DIM], rows[4];
    size_t nrows;
    /* bags: [] [7 7] [] [3]  (bag 3 is the only real one) */
    const int64_t idx[] = {7, 7, 3}, off[] = {0, 0, 2, 2};
    ember_bag_batch_t b = {.indices = idx, .n = 3, .offsets = off, .bags = 4};
    const ember_bag_table_t t = bag_rows(table, EMBER_DTYPE_F32, DIM);
    ember_bag_grad_t out_grad = {.rows = rows, .grad = g};

    fill_table(table, 1);
    for (size_t i = 0; i < 4 * DIM; i++)
        grad_out[i] = 1.0f + (float)i;
    for (int mode = EMBER_BAG_SUM; mode <= EMBER_BAG_MAX; mode++) {
        ember_bag_opts_t o = {.mode = (ember_bag_mode_t)mode, .padding_idx = 7};
        memset(out, 0x7f, sizeof(out));
        CHECK(ember_bag_forward(&t, &b, &o, out, am) == EMBER_OK, "forward");
        for (size_t bag = 0; bag < 3; bag++) {
            for (size_t d = 0; d < DIM; d++) {
                CHECK(out[bag * DIM + d] == 0.0f, "%s: bag %zu not zero (%g)",
                      ember_bag_mode_name(o.mode), bag, out[bag * DIM + d]);
                if (mode == EMBER_BAG_MAX)
                    CHECK(am[bag * DIM + d] == -1,
                          "argmax of empty bag %zu is "
                          "%lld",
                          bag, (long long)am[bag * DIM + d]);
            }
        }
        for (size_t d = 0; d < DIM; d++)
            CHECK(out[3 * DIM + d] == table[3 * DIM + d], "single-row bag");
        CHECK(ember_bag_backward(&t, &b, &o, grad_out, mode == EMBER_BAG_MAX ? am : NULL,
                                 &out_grad) == EMBER_OK,
              "backward");
        nrows = out_grad.nrows;
        CHECK(nrows == 1 && rows[0] == 3,
              "%s: expected only row 3, got %zu "
              "rows",
              ember_bag_mode_name(o.mode), nrows);
        for (size_t d = 0; d < DIM; d++)
            CHECK(g[d] == grad_out[3 * DIM + d], "row 3 grad");
    }
    /* All bags empty: no rows at all. */
    const int64_t off0[] = {0, 0};
    ember_bag_batch_t e = {.indices = NULL, .n = 0, .offsets = off0, .bags = 2};
    ember_bag_opts_t o = {.mode = EMBER_BAG_MEAN, .padding_idx = -1};
    char msg[128];
    CHECK(ember_bag_validate(&e, &o, ROWS, msg, sizeof(msg)) == EMBER_OK, "%s", msg);
    CHECK(ember_bag_forward(&t, &e, &o, out, NULL) == EMBER_OK, "forward of empty batch");
    CHECK(out[0] == 0.0f && out[2 * DIM - 1] == 0.0f, "zeros");
    out_grad.nrows = 1;
    CHECK(ember_bag_backward(&t, &e, &o, grad_out, NULL, &out_grad) == EMBER_OK &&
                  out_grad.nrows == 0,
          "backward of empty batch");
    return 0;
}

/* fp16 rows (engine/ops/half.h): every pooling mode, with padding and weights,
 * over a table of fp16 values gives the same bits as the fp32 kernels over
 * the widened table, argmax and weight gradients included; widths that use
 * the 8-wide path, its tail, and several 256-value chunks. */
/* The fp16 table, its widened twin, and both sides' outputs at one width. */
typedef struct {
    size_t dim;
    uint16_t *half;
    float *wide, *out, *ref, *go, *g, *g_ref;
    int64_t *am, *am_ref;
    float w[BAG_N], gw[BAG_N], gw_ref[BAG_N];
    int64_t rows[BAG_N], rows_ref[BAG_N];
} fp16_case_t;

static int fp16_alloc(fp16_case_t *c, size_t dim, uint64_t *rng)
{
    c->dim = dim;
    c->half = malloc(ROWS * dim * sizeof(*c->half));
    c->wide = malloc(ROWS * dim * sizeof(*c->wide));
    c->out = malloc(BAG_B * dim * sizeof(*c->out));
    c->ref = malloc(BAG_B * dim * sizeof(*c->ref));
    c->go = malloc(BAG_B * dim * sizeof(*c->go));
    c->g = malloc(BAG_N * dim * sizeof(*c->g));
    c->g_ref = malloc(BAG_N * dim * sizeof(*c->g_ref));
    c->am = malloc(BAG_B * dim * sizeof(*c->am));
    c->am_ref = malloc(BAG_B * dim * sizeof(*c->am_ref));
    CHECK(c->half && c->wide && c->out && c->ref && c->go && c->g && c->g_ref && c->am && c->am_ref,
          "memory");
    for (size_t i = 0; i < ROWS * dim; i++) {
        c->half[i] = ember_float_to_half((float)test_uniform(rng, -3.0, 3.0));
        c->wide[i] = ember_half_to_float(c->half[i]);
    }
    c->half[2 * dim + 1] = c->half[1 * dim + 1]; /* a tie for max: the first wins */
    c->wide[2 * dim + 1] = c->wide[1 * dim + 1];
    for (size_t i = 0; i < BAG_N; i++)
        c->w[i] = (float)test_uniform(rng, -2.0, 2.0);
    for (size_t i = 0; i < BAG_B * dim; i++)
        c->go[i] = (float)test_uniform(rng, -1.0, 1.0);
    return 0;
}

static void fp16_free(fp16_case_t *c)
{
    void *buffers[] = {c->half, c->wide, c->out, c->ref, c->go, c->g, c->g_ref, c->am, c->am_ref};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        free(buffers[i]);
}

/* One mode, padding and weighting: forward and backward, fp16 against fp32. */
static int fp16_same(fp16_case_t *c, int mode, int64_t pad, int weighted)
{
    const size_t dim = c->dim;
    ember_bag_batch_t b = {.indices = bag_idx,
                           .n = BAG_N,
                           .offsets = bag_off,
                           .bags = BAG_B,
                           .weights = weighted ? c->w : NULL,
                           .n_weights = weighted ? BAG_N : 0};
    ember_bag_opts_t o = {.mode = (ember_bag_mode_t)mode, .padding_idx = pad};
    int max = mode == EMBER_BAG_MAX;
    const ember_bag_table_t th = bag_rows(c->half, EMBER_DTYPE_F16, dim);
    const ember_bag_table_t tw = bag_rows(c->wide, EMBER_DTYPE_F32, dim);
    ember_bag_grad_t gh = {.rows = c->rows, .grad = c->g, .grad_weights = weighted ? c->gw : NULL};
    ember_bag_grad_t gref = {
            .rows = c->rows_ref, .grad = c->g_ref, .grad_weights = weighted ? c->gw_ref : NULL};
    CHECK(ember_bag_forward(&th, &b, &o, c->out, c->am) == EMBER_OK, "forward fp16");
    CHECK(ember_bag_forward(&tw, &b, &o, c->ref, c->am_ref) == EMBER_OK, "forward fp32");
    for (size_t i = 0; i < BAG_B * dim; i++) {
        CHECK(memcmp(&c->out[i], &c->ref[i], 4) == 0,
              "dim %zu mode %s pad %lld weighted %d: out[%zu] %a, fp32 %a", dim,
              ember_bag_mode_name(o.mode), (long long)pad, weighted, i, (double)c->out[i],
              (double)c->ref[i]);
        CHECK(!max || c->am[i] == c->am_ref[i], "dim %zu argmax[%zu] %lld, fp32 %lld", dim, i,
              (long long)c->am[i], (long long)c->am_ref[i]);
    }
    CHECK(ember_bag_backward(&th, &b, &o, c->go, max ? c->am : NULL, &gh) == EMBER_OK,
          "backward fp16");
    CHECK(ember_bag_backward(&tw, &b, &o, c->go, max ? c->am_ref : NULL, &gref) == EMBER_OK,
          "backward fp32");
    size_t nrows = gh.nrows;
    CHECK(nrows == gref.nrows && memcmp(c->rows, c->rows_ref, nrows * sizeof(*c->rows)) == 0 &&
                  memcmp(c->g, c->g_ref, nrows * dim * sizeof(*c->g)) == 0,
          "dim %zu mode %s: row gradients differ", dim, ember_bag_mode_name(o.mode));
    CHECK(!weighted || memcmp(c->gw, c->gw_ref, sizeof(c->gw)) == 0,
          "dim %zu: weight gradients differ", dim);
    return 0;
}

static int case_bag_fp16(void)
{
    static const size_t dims[] = {5, 16, 300};
    uint64_t rng = 77;
    for (size_t k = 0; k < sizeof(dims) / sizeof(dims[0]); k++) {
        fp16_case_t c;
        if (fp16_alloc(&c, dims[k], &rng))
            return 1;
        for (int mode = EMBER_BAG_SUM; mode <= EMBER_BAG_MAX; mode++)
            for (int64_t pad = -1; pad <= 7; pad += 8)
                for (int weighted = 0; weighted <= (mode == EMBER_BAG_SUM); weighted++)
                    if (fp16_same(&c, mode, pad, weighted))
                        return 1;
        ember_bag_batch_t b = {.indices = bag_idx, .n = BAG_N, .offsets = bag_off, .bags = BAG_B};
        ember_bag_opts_t o = {.mode = EMBER_BAG_SUM, .padding_idx = -1};
        const ember_bag_table_t tb = bag_rows(c.half, EMBER_DTYPE_BF16, c.dim);
        CHECK(ember_bag_forward(&tb, &b, &o, c.out, c.am) == EMBER_ERR_INVALID_PARAM,
              "bf16 rows accepted");
        fp16_free(&c);
    }
    return 0;
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* ember_bag_dedup over 5000 ids in [base, base + span) against qsort. */
static int dedup_against_sort(int64_t base, double span, uint64_t seed)
{
    enum {
        N = 5000
    };
    int64_t *ids = malloc(N * sizeof(int64_t)), *sorted = malloc(N * sizeof(int64_t));
    int64_t *unique = malloc(N * sizeof(int64_t)), *inverse = malloc(N * sizeof(int64_t));
    size_t nu, distinct = 0;
    CHECK(ids && sorted && unique && inverse, "memory");
    for (size_t i = 0; i < N; i++)
        sorted[i] = ids[i] = base + (int64_t)test_uniform(&seed, 0, span);
    qsort(sorted, N, sizeof(int64_t), compare_i64);
    for (size_t i = 0; i < N; i++)
        if (i == 0 || sorted[i] != sorted[i - 1])
            sorted[distinct++] = sorted[i];
    CHECK(ember_bag_dedup(ids, N, -1, unique, inverse, &nu) == EMBER_OK, "dedup big");
    CHECK(nu == distinct, "base %lld span %g: %zu unique, expected %zu", (long long)base, span, nu,
          distinct);
    for (size_t i = 0; i < nu; i++)
        CHECK(unique[i] == sorted[i], "base %lld span %g: unique[%zu] %lld, want %lld",
              (long long)base, span, i, (long long)unique[i], (long long)sorted[i]);
    for (size_t i = 0; i < N; i++)
        CHECK(unique[inverse[i]] == ids[i], "base %lld: inverse[%zu]", (long long)base, i);
    free(ids);
    free(sorted);
    free(unique);
    free(inverse);
    return 0;
}

static int case_bag_dedup(void)
{
    const int64_t idx[] = {5, 3, 5, 9, 0, 3, 3, 7, 9};
    const size_t n = sizeof(idx) / sizeof(idx[0]);
    int64_t uniq[9], inv[9];
    size_t nu;

    CHECK(ember_bag_dedup(idx, n, -1, uniq, inv, &nu) == EMBER_OK, "dedup");
    const int64_t expect[] = {0, 3, 5, 7, 9};
    CHECK(nu == 5, "unique count %zu", nu);
    for (size_t i = 0; i < nu; i++)
        CHECK(uniq[i] == expect[i], "unique[%zu] = %lld", i, (long long)uniq[i]);
    for (size_t i = 0; i < n; i++)
        CHECK(inv[i] >= 0 && uniq[inv[i]] == idx[i], "inverse[%zu]", i);

    /* With a skip value: it leaves unique and maps to -1. */
    CHECK(ember_bag_dedup(idx, n, 3, uniq, inv, &nu) == EMBER_OK, "dedup");
    CHECK(nu == 4 && uniq[0] == 0 && uniq[1] == 5, "skip 3: %zu unique", nu);
    for (size_t i = 0; i < n; i++)
        CHECK(idx[i] == 3 ? inv[i] == -1 : uniq[inv[i]] == idx[i], "skip inverse[%zu]", i);

    /* Larger random input against a sorting reference: ids over a narrow
     * range far from 0 (the sort's one pass) and over wide ones (several). */
    static const double spans[][2] = {{0, 700}, {1e12, 700}, {0, 1e15}, {5e17, 3e6}};
    for (size_t k = 0; k < sizeof(spans) / sizeof(spans[0]); k++)
        if (dedup_against_sort((int64_t)spans[k][0], spans[k][1], 3 + k))
            return 1;
    return 0;
}

/* ------------------------------------------------------------- validation */

static int expect_invalid(const ember_bag_batch_t *b, ember_bag_mode_t mode, int64_t padding,
                          ember_status_t expect, const char *const *words)
{
    char msg[256];
    ember_bag_opts_t o = {.mode = mode, .padding_idx = padding};
    ember_status_t s = ember_bag_validate(b, &o, 100, msg, sizeof(msg));

    CHECK(s == expect, "status %s, expected %s (message '%s')", ember_status_string(s),
          ember_status_string(expect), msg);
    for (; *words; words++)
        CHECK(strstr(msg, *words), "message '%s' lacks '%s'", msg, *words);
    fprintf(stderr, "message: %s\n", msg);
    return 0;
}

static const int64_t v_idx[] = {1, 2, 3, 4, 5, 6, 7, 130, 9};
static const int64_t v_off[] = {0, 3, 6};

static int case_validate_ok(void)
{
    const int64_t ok_idx[] = {0, 99, 50};
    const int64_t off[] = {0, 1, 1, 3};
    const float w[3] = {1, 2, 3};
    ember_bag_batch_t b = {
            .indices = ok_idx, .n = 3, .offsets = off, .bags = 4, .weights = w, .n_weights = 3};
    char msg[64] = "junk";
    ember_bag_opts_t o = {.mode = EMBER_BAG_SUM, .padding_idx = 99};
    CHECK(ember_bag_validate(&b, &o, 100, msg, sizeof(msg)) == EMBER_OK, "valid batch rejected: %s",
          msg);
    CHECK(msg[0] == '\0', "message not cleared: %s", msg);
    return 0;
}

static int case_validate_index_high(void)
{
    ember_bag_batch_t b = {.indices = v_idx, .n = 9, .offsets = v_off, .bags = 3};
    const char *words[] = {"index 130 at position 7 (bag 2) is out of range "
                           "[0, 100)",
                           NULL};
    return expect_invalid(&b, EMBER_BAG_SUM, -1, EMBER_ERR_OUT_OF_RANGE, words);
}

static int case_validate_index_negative(void)
{
    const int64_t idx[] = {1, -4, 3};
    const int64_t off[] = {0, 1};
    ember_bag_batch_t b = {.indices = idx, .n = 3, .offsets = off, .bags = 2};
    const char *words[] = {"index -4", "position 1", "bag 1", "out of range", NULL};
    return expect_invalid(&b, EMBER_BAG_MEAN, -1, EMBER_ERR_OUT_OF_RANGE, words);
}

static int case_validate_offsets_start(void)
{
    const int64_t off[] = {2, 3, 6};
    ember_bag_batch_t b = {.indices = v_idx, .n = 9, .offsets = off, .bags = 3};
    const char *words[] = {"offsets[0] is 2", "must be 0", NULL};
    return expect_invalid(&b, EMBER_BAG_SUM, -1, EMBER_ERR_INVALID_PARAM, words);
}

static int case_validate_offsets_decrease(void)
{
    const int64_t off[] = {0, 5, 4};
    ember_bag_batch_t b = {.indices = v_idx, .n = 9, .offsets = off, .bags = 3};
    const char *words[] = {"offsets decrease at bag 2", "4 after 5", NULL};
    return expect_invalid(&b, EMBER_BAG_SUM, -1, EMBER_ERR_INVALID_PARAM, words);
}

static int case_validate_offsets_past_end(void)
{
    const int64_t off[] = {0, 3, 10};
    ember_bag_batch_t b = {.indices = v_idx, .n = 9, .offsets = off, .bags = 3};
    const char *words[] = {"offset 10 of bag 2", "past the end", "n = 9", NULL};
    return expect_invalid(&b, EMBER_BAG_SUM, -1, EMBER_ERR_INVALID_PARAM, words);
}

static int case_validate_weights_length(void)
{
    const float w[8] = {0};
    const int64_t idx[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    ember_bag_batch_t b = {
            .indices = idx, .n = 9, .offsets = v_off, .bags = 3, .weights = w, .n_weights = 8};
    const char *words[] = {"weights length 8", "indices length 9", NULL};
    return expect_invalid(&b, EMBER_BAG_SUM, -1, EMBER_ERR_INVALID_PARAM, words);
}

static int case_validate_weights_mode(void)
{
    const float w[9] = {0};
    const int64_t idx[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    ember_bag_batch_t b = {
            .indices = idx, .n = 9, .offsets = v_off, .bags = 3, .weights = w, .n_weights = 9};
    const char *words[] = {"only supported with mode sum", "mode is max", NULL};
    if (expect_invalid(&b, EMBER_BAG_MAX, -1, EMBER_ERR_INVALID_PARAM, words))
        return 1;
    const char *words_mean[] = {"mode is mean", NULL};
    return expect_invalid(&b, EMBER_BAG_MEAN, -1, EMBER_ERR_INVALID_PARAM, words_mean);
}

static int case_validate_padding_range(void)
{
    const int64_t idx[] = {1, 2, 3};
    const int64_t off[] = {0};
    ember_bag_batch_t b = {.indices = idx, .n = 3, .offsets = off, .bags = 1};
    const char *words[] = {"padding_idx 100", NULL};
    if (expect_invalid(&b, EMBER_BAG_SUM, 100, EMBER_ERR_OUT_OF_RANGE, words))
        return 1;
    const char *words_neg[] = {"padding_idx -2", NULL};
    return expect_invalid(&b, EMBER_BAG_SUM, -2, EMBER_ERR_OUT_OF_RANGE, words_neg);
}

static int case_validate_no_bags(void)
{
    const int64_t idx[] = {1, 2};
    ember_bag_batch_t b = {.indices = idx, .n = 2, .offsets = NULL, .bags = 0};
    const char *words[] = {"no bags", NULL};
    return expect_invalid(&b, EMBER_BAG_SUM, -1, EMBER_ERR_INVALID_PARAM, words);
}

/* ----------------------------------------------------------------- Linear */

typedef struct {
    size_t batch, in, out;
    float *x, *w, *b;
    const float *r;
} lin_ctx_t;

static double lin_loss(void *arg)
{
    lin_ctx_t *c = arg;
    float *y = malloc(c->batch * c->out * sizeof(float));
    double l = 0.0;
    if (ember_linear_forward(c->x, c->batch, c->in, c->out, c->w, c->b, y) != EMBER_OK)
        l = NAN;
    for (size_t i = 0; i < c->batch * c->out; i++)
        l += (double)c->r[i] * y[i];
    free(y);
    return l;
}

static int case_linear_fd(void)
{
    enum {
        B = 3,
        IN = 4,
        OUT = 5
    };
    float x[B * IN], w[OUT * IN], b[OUT], r[B * OUT], y[B * OUT];
    float gx[B * IN], gw[OUT * IN], gb[OUT];
    uint64_t rng = 11;
    lin_ctx_t c = {B, IN, OUT, x, w, b, r};

    for (size_t i = 0; i < B * IN; i++)
        x[i] = (float)test_uniform(&rng, -1, 1);
    for (size_t i = 0; i < OUT * IN; i++)
        w[i] = (float)test_uniform(&rng, -1, 1);
    for (size_t i = 0; i < OUT; i++)
        b[i] = (float)test_uniform(&rng, -1, 1);
    for (size_t i = 0; i < B * OUT; i++)
        r[i] = (float)test_uniform(&rng, -1, 1);

    /* Forward against y = x A^T + b in double. */
    CHECK(ember_linear_forward(x, B, IN, OUT, w, b, y) == EMBER_OK, "forward");
    for (size_t i = 0; i < B; i++) {
        for (size_t o = 0; o < OUT; o++) {
            double ref = b[o];
            for (size_t k = 0; k < IN; k++)
                ref += (double)x[i * IN + k] * w[o * IN + k];
            CHECK(fabs(y[i * OUT + o] - ref) < 1e-5, "y[%zu,%zu] %g vs %g", i, o, y[i * OUT + o],
                  ref);
        }
    }
    CHECK(ember_linear_backward(x, B, IN, OUT, w, r, 0, gx, gw, gb) == EMBER_OK, "backward");
    if (fd_check("linear x", x, B * IN, gx, lin_loss, &c, 1e-2f, 1e-3, 1e-3) ||
        fd_check("linear weight", w, OUT * IN, gw, lin_loss, &c, 1e-2f, 1e-3, 1e-3) ||
        fd_check("linear bias", b, OUT, gb, lin_loss, &c, 1e-2f, 1e-3, 1e-3))
        return 1;

    /* accumulate = 1 adds a second backward onto the first. */
    float gw2[OUT * IN], gb2[OUT];
    memcpy(gw2, gw, sizeof(gw));
    memcpy(gb2, gb, sizeof(gb));
    CHECK(ember_linear_backward(x, B, IN, OUT, w, r, 1, NULL, gw2, gb2) == EMBER_OK,
          "backward accumulate");
    for (size_t i = 0; i < OUT * IN; i++)
        CHECK(fabs(gw2[i] - 2 * gw[i]) < 1e-5, "accumulated weight grad %zu", i);
    for (size_t i = 0; i < OUT; i++)
        CHECK(fabs(gb2[i] - 2 * gb[i]) < 1e-5, "accumulated bias grad %zu", i);
    return 0;
}

/* ------------------------------------------------------------------- ReLU */

typedef struct {
    float *x;
    const float *r;
    size_t n;
} relu_ctx_t;

static double relu_loss(void *arg)
{
    relu_ctx_t *c = arg;
    double l = 0.0;
    float y[64];
    ember_relu_forward(c->x, c->n, y);
    for (size_t i = 0; i < c->n; i++)
        l += (double)c->r[i] * y[i];
    return l;
}

static int case_relu_fd(void)
{
    enum {
        N = 40
    };
    float x[N], r[N], y[N], g[N];
    uint64_t rng = 5;
    relu_ctx_t c = {x, r, N};

    for (size_t i = 0; i < N; i++) {
        /* Keep clear of the kink at 0, where no derivative exists. */
        double v = test_uniform(&rng, 0.05, 1.0);
        x[i] = (float)(i % 2 ? v : -v);
        r[i] = (float)test_uniform(&rng, -1, 1);
    }
    ember_relu_forward(x, N, y);
    for (size_t i = 0; i < N; i++)
        CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f), "relu y[%zu]", i);
    ember_relu_backward(x, r, N, g);
    if (fd_check("relu", x, N, g, relu_loss, &c, 1e-2f, 1e-4, 1e-4))
        return 1;
    /* At exactly 0 the gradient is 0 (PyTorch's choice). */
    float zero = 0.0f, one = 1.0f, gz;
    ember_relu_backward(&zero, &one, 1, &gz);
    CHECK(gz == 0.0f, "relu'(0) = %g", gz);
    return 0;
}

/* -------------------------------------------------------------------- MLP */

typedef struct {
    ember_mlp_t *mlp;
    float *x;
    size_t batch, nout;
    const float *r;
} mlp_ctx_t;

static double mlp_loss(void *arg)
{
    mlp_ctx_t *c = arg;
    float y[64];
    double l = 0.0;
    if (ember_mlp_forward(c->mlp, c->x, c->batch, y) != EMBER_OK)
        return NAN;
    for (size_t i = 0; i < c->batch * c->nout; i++)
        l += (double)c->r[i] * y[i];
    return l;
}

static int case_mlp_fd(void)
{
    const size_t sizes[] = {4, 6, 5, 3};
    enum {
        B = 3
    };
    ember_mlp_t *mlp;
    float x[B * 4], r[B * 3], y[B * 3], gx[B * 4];
    uint64_t rng = 99;

    CHECK(ember_mlp_create(sizes, 4, 1234, &mlp) == EMBER_OK, "create");
    CHECK(ember_mlp_num_layers(mlp) == 3, "layers");
    CHECK(ember_mlp_num_params(mlp) == 6 * 4 + 6 + 5 * 6 + 5 + 3 * 5 + 3, "num_params %zu",
          ember_mlp_num_params(mlp));
    for (size_t i = 0; i < B * 4; i++)
        x[i] = (float)test_uniform(&rng, -1, 1);
    for (size_t i = 0; i < B * 3; i++)
        r[i] = (float)test_uniform(&rng, -1, 1);

    /* Forward against a double reference built from the layer pointers. */
    CHECK(ember_mlp_forward(mlp, x, B, y) == EMBER_OK, "forward");
    double act[B * 6], next[B * 6];
    for (size_t i = 0; i < B * 4; i++)
        act[i] = x[i];
    for (size_t l = 0; l < 3; l++) {
        float *w, *b;
        CHECK(ember_mlp_layer(mlp, l, &w, &b, NULL, NULL) == EMBER_OK, "layer");
        for (size_t i = 0; i < B; i++) {
            for (size_t o = 0; o < sizes[l + 1]; o++) {
                double v = b[o];
                for (size_t k = 0; k < sizes[l]; k++)
                    v += act[i * sizes[l] + k] * w[o * sizes[l] + k];
                next[i * sizes[l + 1] + o] = (l < 2 && v < 0) ? 0 : v;
            }
        }
        memcpy(act, next, sizeof(next));
    }
    for (size_t i = 0; i < B * 3; i++)
        CHECK(fabs(y[i] - act[i]) < 1e-5, "mlp y[%zu] %g vs %g", i, y[i], act[i]);
    CHECK(ember_mlp_layer(mlp, 3, NULL, NULL, NULL, NULL) == EMBER_ERR_OUT_OF_RANGE,
          "layer 3 of 3 accepted");

    CHECK(ember_mlp_backward(mlp, r, gx) == EMBER_OK, "backward");
    size_t np = ember_mlp_num_params(mlp);
    float *grads = malloc(np * sizeof(float));
    memcpy(grads, ember_mlp_grads(mlp), np * sizeof(float));
    mlp_ctx_t c = {mlp, x, B, 3, r};
    int rc = fd_check("mlp params", ember_mlp_params(mlp), np, grads, mlp_loss, &c, 1e-3f, 2e-3,
                      1e-2) ||
             fd_check("mlp input", x, B * 4, gx, mlp_loss, &c, 1e-3f, 2e-3, 1e-2);
    free(grads);
    ember_mlp_destroy(mlp);
    return rc;
}

/* ------------------------------------------------------------------ losses */

typedef struct {
    float *z;
    const int64_t *t;
    const float *tf;
    size_t batch, classes;
} loss_ctx_t;

static double ce_loss(void *arg)
{
    loss_ctx_t *c = arg;
    float l;
    if (ember_cross_entropy(c->z, c->batch, c->classes, c->t, &l, NULL) != EMBER_OK)
        return NAN;
    return l;
}

static int case_ce_fd(void)
{
    enum {
        B = 4,
        C = 5
    };
    float z[B * C], g[B * C], loss;
    const int64_t t[B] = {0, 4, 2, 2};
    uint64_t rng = 17;
    loss_ctx_t c = {z, t, NULL, B, C};

    for (size_t i = 0; i < B * C; i++)
        z[i] = (float)test_uniform(&rng, -3, 3);
    CHECK(ember_cross_entropy(z, B, C, t, &loss, g) == EMBER_OK, "ce");
    double ref = 0.0;
    for (size_t i = 0; i < B; i++) {
        double s = 0.0;
        for (size_t k = 0; k < C; k++)
            s += exp((double)z[i * C + k]);
        ref += log(s) - z[i * C + t[i]];
    }
    ref /= B;
    CHECK(fabs(loss - ref) < 1e-6, "loss %.7g vs %.7g", loss, ref);
    if (fd_check("cross entropy", z, B * C, g, ce_loss, &c, 1e-2f, 1e-4, 1e-3))
        return 1;

    /* Stable for huge logits: softmax of (1000, 0) is (1, e^-1000). */
    float big[2] = {1000.0f, 0.0f};
    int64_t tb = 1;
    CHECK(ember_cross_entropy(big, 1, 2, &tb, &loss, g) == EMBER_OK, "huge logits");
    CHECK(fabs(loss - 1000.0f) < 1e-3 && fabs(g[0] - 1.0f) < 1e-6 && fabs(g[1] + 1.0f) < 1e-6,
          "huge logits: loss %g grad %g %g", loss, g[0], g[1]);

    /* In place: grad written over the logits. */
    for (size_t i = 0; i < B * C; i++)
        z[i] = (float)test_uniform(&rng, -3, 3);
    float z2[B * C], g2[B * C], l2;
    memcpy(z2, z, sizeof(z));
    CHECK(ember_cross_entropy(z, B, C, t, &loss, g) == EMBER_OK, "ce");
    CHECK(ember_cross_entropy(z2, B, C, t, &l2, z2) == EMBER_OK, "ce in place");
    memcpy(g2, z2, sizeof(g2));
    for (size_t i = 0; i < B * C; i++)
        CHECK(g[i] == g2[i], "in-place grad differs at %zu", i);
    return 0;
}

/* Run @fn with stderr captured into @buf, so a test can read the log. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t len)
{
    char path[] = "/tmp/ember_log_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

typedef struct {
    const int64_t *t;
    ember_status_t status;
    float loss;
} ce_run_t;

static void ce_run(void *arg)
{
    ce_run_t *r = arg;
    const float z[4 * 3] = {0};
    r->loss = -7.0f;
    r->status = ember_cross_entropy(z, 4, 3, r->t, &r->loss, NULL);
}

static int case_ce_target_range(void)
{
    const int64_t high[4] = {0, 1, 3, 2}, neg[4] = {0, -1, 1, 2};
    char log[1024];
    ce_run_t r = {high, EMBER_OK, 0};

    capture_stderr(ce_run, &r, log, sizeof(log));
    CHECK(r.status == EMBER_ERR_OUT_OF_RANGE, "status %s", ember_status_string(r.status));
    CHECK(strstr(log, "target 3 at position 2") && strstr(log, "[0, 3)"),
          "log '%s' does not name the target and position", log);
    CHECK(r.loss == -7.0f, "loss written on error");
    r.t = neg;
    capture_stderr(ce_run, &r, log, sizeof(log));
    CHECK(r.status == EMBER_ERR_OUT_OF_RANGE && strstr(log, "position 1"),
          "negative target: %s / %s", ember_status_string(r.status), log);
    return 0;
}

static int case_loss_nonfinite(void)
{
    float z[2 * 3] = {0.1f, NAN, 0.3f, 0, 0, 0}, loss = -7.0f;
    const int64_t t[2] = {0, 1};
    CHECK(ember_cross_entropy(z, 2, 3, t, &loss, NULL) == EMBER_ERR_NUMERIC, "NaN logit");
    z[1] = INFINITY;
    CHECK(ember_cross_entropy(z, 2, 3, t, &loss, NULL) == EMBER_ERR_NUMERIC, "inf logit");
    CHECK(loss == -7.0f, "loss written on error");
    float x[2] = {0.5f, NAN}, y[2] = {1, 0};
    CHECK(ember_bce_with_logits(x, y, 2, &loss, NULL) == EMBER_ERR_NUMERIC, "bce NaN");
    x[1] = -INFINITY; /* max(x,0) - x*t + ... = inf for t = 1 */
    y[1] = 1.0f;
    CHECK(ember_bce_with_logits(x, y, 2, &loss, NULL) == EMBER_ERR_NUMERIC, "bce inf");
    CHECK(ember_cross_entropy(z, 0, 3, t, &loss, NULL) == EMBER_ERR_INVALID_PARAM, "empty batch");
    return 0;
}

static double bce_loss(void *arg)
{
    loss_ctx_t *c = arg;
    float l;
    if (ember_bce_with_logits(c->z, c->tf, c->batch, &l, NULL) != EMBER_OK)
        return NAN;
    return l;
}

static int case_bce_fd(void)
{
    enum {
        N = 7
    };
    float x[N] = {-2.5f, -0.3f, 0.0f, 0.4f, 1.7f, 3.0f, -1.1f};
    const float t[N] = {0.0f, 1.0f, 0.5f, 1.0f, 0.0f, 0.25f, 1.0f};
    float g[N], loss;
    loss_ctx_t c = {x, NULL, t, N, 0};

    CHECK(ember_bce_with_logits(x, t, N, &loss, g) == EMBER_OK, "bce");
    double ref = 0.0;
    for (size_t i = 0; i < N; i++) {
        double s = 1.0 / (1.0 + exp(-(double)x[i]));
        ref += -(t[i] * log(s) + (1 - t[i]) * log(1 - s));
    }
    ref /= N;
    CHECK(fabs(loss - ref) < 1e-6, "loss %.7g vs %.7g", loss, ref);
    if (fd_check("bce with logits", x, N, g, bce_loss, &c, 1e-2f, 1e-4, 1e-3))
        return 1;
    /* Large logits stay finite and exact-ish. */
    float big[2] = {100.0f, -100.0f}, tb[2] = {0.0f, 1.0f};
    CHECK(ember_bce_with_logits(big, tb, 2, &loss, g) == EMBER_OK, "big");
    CHECK(fabs(loss - 100.0f) < 1e-3 && fabs(g[0] - 0.5f) < 1e-6 && fabs(g[1] + 0.5f) < 1e-6,
          "big logits: loss %g grad %g %g", loss, g[0], g[1]);
    return 0;
}

/* A trainer's max pools from three shards' parts: a maximum held on several
 * shards goes to the one whose entry comes first in the bag (its place), as
 * PyTorch gives it to the bag's first maximal entry, not to the lowest shard;
 * -0 and +0 tie; a part without entries never wins; parts_split sends each
 * gradient to the winner only. */
static int case_parts_combine_ties(void)
{
    enum {
        P = 3,
        B = 3,
        D = 3,
        S = B * D
    };
    const float parts[P][S] = {{1, 0.5f, -1, /**/ 0, 0, 0, /**/ 0, 0, 0},
                               {1, 2, -1, /**/ 4, -0.0f, 7, /**/ 0, 0, 0},
                               {1, 2, -3, /**/ 4, 0.0f, 8, /**/ 0, 0, 0}};
    const uint32_t N = EMBER_PLACE_NONE;
    const uint32_t places[P][S] = {{5, 0, 4, /**/ N, N, N, /**/ N, N, N},
                                   {2, 7, 1, /**/ 6, 1, 2, /**/ N, N, N},
                                   {9, 3, 0, /**/ 1, 4, 0, /**/ N, N, N}};
    const uint32_t counts[P][B] = {{3, 0, 0}, {2, 3, 0}, {4, 3, 0}};
    const uint32_t bag_counts[B] = {9, 6, 0};
    const float want[S] = {1, 2, -1, /**/ 4, -0.0f, 8, /**/ 0, 0, 0};
    const int16_t winners[S] = {1, 2, 1, /**/ 2, 1, 2, /**/ -1, -1, -1};
    float out[S], grad[S], grads[P][S];
    int16_t winner[S];

    ember_bag_parts_combine(&parts[0][0], S, P, B, D, EMBER_BAG_MAX, &counts[0][0], bag_counts,
                            &places[0][0], S, out, winner);
    for (size_t i = 0; i < S; i++) {
        CHECK(winner[i] == winners[i], "element %zu: shard %d won, want %d", i, winner[i],
              winners[i]);
        CHECK(memcmp(&out[i], &want[i], sizeof(float)) == 0, "element %zu: %g, want %g", i,
              (double)out[i], (double)want[i]);
    }
    for (size_t i = 0; i < S; i++)
        grad[i] = (float)(i + 1);
    ember_bag_parts_split(grad, P, B, D, EMBER_BAG_MAX, bag_counts, winner, &grads[0][0], S);
    for (int p = 0; p < P; p++) {
        for (size_t i = 0; i < S; i++)
            CHECK(grads[p][i] == (winners[i] == p ? grad[i] : 0.0f),
                  "shard %d element %zu: gradient %g", p, i, (double)grads[p][i]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"parts_combine_ties", case_parts_combine_ties},
            {"bag_forward_ref", case_bag_forward_ref},
            {"bag_fd_sum", case_bag_fd_sum},
            {"bag_fd_mean", case_bag_fd_mean},
            {"bag_fd_max", case_bag_fd_max},
            {"bag_fd_weights", case_bag_fd_weights},
            {"bag_fd_padding", case_bag_fd_padding},
            {"bag_empty", case_bag_empty},
            {"bag_dedup", case_bag_dedup},
            {"bag_fp16", case_bag_fp16},
            {"validate_ok", case_validate_ok},
            {"validate_index_high", case_validate_index_high},
            {"validate_index_negative", case_validate_index_negative},
            {"validate_offsets_start", case_validate_offsets_start},
            {"validate_offsets_decrease", case_validate_offsets_decrease},
            {"validate_offsets_past_end", case_validate_offsets_past_end},
            {"validate_weights_length", case_validate_weights_length},
            {"validate_weights_mode", case_validate_weights_mode},
            {"validate_padding_range", case_validate_padding_range},
            {"validate_no_bags", case_validate_no_bags},
            {"linear_fd", case_linear_fd},
            {"relu_fd", case_relu_fd},
            {"mlp_fd", case_mlp_fd},
            {"ce_fd", case_ce_fd},
            {"ce_target_range", case_ce_target_range},
            {"loss_nonfinite", case_loss_nonfinite},
            {"bce_fd", case_bce_fd},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
