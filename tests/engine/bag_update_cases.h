/*
 * The cases of the fused EmbeddingBag backward + optimizer step (device
 * slot bag_backward_update, engine/ops/bag_update.h), shared by its CPU
 * twin's test (tests/engine/test_bag_update.c) and the CUDA one
 * (tests/cuda/test_cuda_bag_update.c): random batches (uniform, or
 * Zipf-skewed so that hot rows have long segments), every pooling mode,
 * every optimizer and its variants, and the reference: ember_bag_backward
 * then ember_opt_step_sparse on an ember_opt_t.
 */
#ifndef EMBER_TESTS_ENGINE_BAG_UPDATE_CASES_H
#define EMBER_TESTS_ENGINE_BAG_UPDATE_CASES_H

#include <ember/device.h>
#include <ember/embedding_bag.h>

#include "engine/ops/optimizer.h"
#include "tests/engine/test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* How one case pools. */
typedef struct {
    ember_bag_mode_t mode;
    int weights;
    int padding;
    const char *name;
} upd_pool_t;

static const upd_pool_t upd_pools[] = {
        {EMBER_BAG_SUM, 0, 0, "sum"},     {EMBER_BAG_SUM, 1, 0, "sum+weights"},
        {EMBER_BAG_MEAN, 0, 0, "mean"},   {EMBER_BAG_MAX, 0, 0, "max"},
        {EMBER_BAG_SUM, 0, 1, "sum+pad"}, {EMBER_BAG_MEAN, 0, 1, "mean+pad"},
        {EMBER_BAG_MAX, 0, 1, "max+pad"},
};
#define UPD_NPOOLS (sizeof(upd_pools) / sizeof(upd_pools[0]))

/* The optimizers and the variants whose state differs. */
typedef struct {
    ember_opt_kind_t kind;
    float momentum, dampening;
    int nesterov;
    float lr_decay;
    int adam_row_step;
    const char *name;
} upd_optim_t;

static const upd_optim_t upd_optims[] = {
        {EMBER_OPT_SGD, 0.0f, 0.0f, 0, 0.0f, 0, "sgd"},
        {EMBER_OPT_SGD, 0.9f, 0.0f, 0, 0.0f, 0, "sgd+momentum"},
        {EMBER_OPT_SGD, 0.9f, 0.1f, 0, 0.0f, 0, "sgd+dampening"},
        {EMBER_OPT_SGD, 0.9f, 0.0f, 1, 0.0f, 0, "sgd+nesterov"},
        {EMBER_OPT_ADAGRAD, 0.0f, 0.0f, 0, 0.01f, 0, "adagrad"},
        {EMBER_OPT_ROWWISE_ADAGRAD, 0.0f, 0.0f, 0, 0.0f, 0, "rowwise_adagrad"},
        {EMBER_OPT_ADAM, 0.0f, 0.0f, 0, 0.0f, 1, "adam"},
        {EMBER_OPT_ADAM, 0.0f, 0.0f, 0, 0.0f, 0, "adam+table_step"},
};
#define UPD_NOPTIMS (sizeof(upd_optims) / sizeof(upd_optims[0]))

static const size_t upd_dims[] = {1, 3, 64, 128, 256};
#define UPD_NDIMS (sizeof(upd_dims) / sizeof(upd_dims[0]))

#define UPD_ROWS  500
#define UPD_STEPS 3

static void upd_config(const upd_optim_t *o, ember_opt_config_t *cfg)
{
    ember_opt_config_default(o->kind, o->kind == EMBER_OPT_ADAM ? 0.01f : 0.1f, cfg);
    cfg->momentum = o->momentum;
    cfg->dampening = o->dampening;
    cfg->nesterov = o->nesterov;
    cfg->lr_decay = o->lr_decay;
    cfg->adam_row_step = o->adam_row_step;
    cfg->initial_accumulator = o->kind == EMBER_OPT_ADAGRAD ? 0.1f : 0.0f;
}

/* One batch and the values it is pooled from (host memory). */
typedef struct {
    size_t dim, n, bags;
    int64_t *indices, *offsets, *argmax;
    float *weights, *grad_out;
    ember_bag_batch_t batch;
    ember_bag_opts_t opts;
} upd_batch_t;

static uint64_t upd_rng = 20261202;
static double upd_uni(double lo, double hi)
{
    return test_uniform(&upd_rng, lo, hi);
}

/* A row id: uniform, or Zipf(1.1) by inversion of a precomputed CDF. */
static int64_t upd_row(int zipf)
{
    static double cdf[UPD_ROWS];
    static int ready;
    if (!zipf) {
        int64_t r = (int64_t)upd_uni(0.0, UPD_ROWS);
        return r >= UPD_ROWS ? UPD_ROWS - 1 : r;
    }
    if (!ready) {
        double total = 0.0;
        for (int r = 0; r < UPD_ROWS; r++)
            cdf[r] = (total += 1.0 / pow(r + 1.0, 1.1));
        for (int r = 0; r < UPD_ROWS; r++)
            cdf[r] /= total;
        ready = 1;
    }
    double x = upd_uni(0.0, 1.0);
    int64_t lo = 0, hi = UPD_ROWS - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (cdf[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void upd_batch_free(upd_batch_t *b)
{
    free(b->indices);
    free(b->offsets);
    free(b->argmax);
    free(b->weights);
    free(b->grad_out);
    memset(b, 0, sizeof(*b));
}

/* Bags of 0..16 entries (some empty, some all padding where padding is
 * on), the gradient of the pooled output, and max mode's argmax from the
 * forward over @table.  0 when out of memory. */
static int upd_batch_draw(upd_batch_t *b, const upd_pool_t *pool, size_t dim, int zipf,
                          const float *table)
{
    const size_t bags = 256, cap = bags * 16;
    memset(b, 0, sizeof(*b));
    b->dim = dim;
    b->bags = bags;
    b->indices = malloc(cap * sizeof(int64_t));
    b->offsets = malloc(bags * sizeof(int64_t));
    b->weights = malloc(cap * sizeof(float));
    b->grad_out = malloc(bags * dim * sizeof(float));
    b->argmax = malloc(bags * dim * sizeof(int64_t));
    if (!b->indices || !b->offsets || !b->weights || !b->grad_out || !b->argmax)
        return 0;
    const int64_t pad = pool->padding ? 7 : -1;
    size_t n = 0;
    for (size_t g = 0; g < bags; g++) {
        b->offsets[g] = (int64_t)n;
        size_t len = (size_t)upd_uni(0.0, 17.0);
        int all_pad = pool->padding && g % 17 == 3;
        for (size_t i = 0; i < len && n < cap; i++) {
            b->indices[n] = all_pad || (pool->padding && upd_uni(0, 1) < 0.1) ? pad : upd_row(zipf);
            b->weights[n] = (float)upd_uni(-1.0, 1.0);
            n++;
        }
    }
    b->n = n;
    for (size_t i = 0; i < bags * dim; i++)
        b->grad_out[i] = (float)upd_uni(-1.0, 1.0);
    b->opts = (ember_bag_opts_t){.mode = pool->mode, .padding_idx = pad};
    b->batch = (ember_bag_batch_t){.indices = b->indices,
                                   .n = n,
                                   .offsets = b->offsets,
                                   .bags = bags,
                                   .weights = pool->weights ? b->weights : NULL,
                                   .n_weights = pool->weights ? n : 0};
    if (pool->mode == EMBER_BAG_MAX) {
        float *out = malloc(bags * dim * sizeof(float));
        const ember_bag_table_t t = {
                .data = table, .dtype = EMBER_DTYPE_F32, .rows = UPD_ROWS, .dim = dim};
        int ok = out && ember_bag_forward(&t, &b->batch, &b->opts, out, b->argmax) == EMBER_OK;
        free(out);
        return ok;
    }
    return 1;
}

/* The reference step: the CPU backward, then the engine's sparse step. */
static int upd_reference_step(ember_opt_t *opt, float *table, const upd_batch_t *b)
{
    int64_t *rows = malloc((b->n + 1) * sizeof(int64_t));
    float *grad = malloc((b->n + 1) * b->dim * sizeof(float));
    int ok = rows && grad;
    const ember_bag_table_t t = {
            .data = table, .dtype = EMBER_DTYPE_F32, .rows = UPD_ROWS, .dim = b->dim};
    ember_bag_grad_t out = {.rows = rows, .grad = grad};
    ok = ok &&
         ember_bag_backward(&t, &b->batch, &b->opts, b->grad_out, b->argmax, &out) == EMBER_OK;
    const ember_opt_values_t values = {.data = table,
                                       .dtype = EMBER_DTYPE_F32,
                                       .dim = b->dim,
                                       .placement = EMBER_OPT_IN_TABLE};
    ok = ok && ember_opt_step_sparse(opt, &values, rows, grad, out.nrows) == EMBER_OK;
    free(rows);
    free(grad);
    return ok;
}

/* @opt's state as the device slot takes it (@step: this step's count). */
static ember_device_opt_t upd_device_opt(const ember_opt_config_t *cfg, ember_opt_t *opt,
                                         uint64_t step)
{
    ember_device_opt_t d = {.kind = (int)cfg->kind,
                            .lr = cfg->lr,
                            .momentum = cfg->momentum,
                            .dampening = cfg->dampening,
                            .nesterov = cfg->nesterov,
                            .lr_decay = cfg->lr_decay,
                            .eps = cfg->eps,
                            .beta1 = cfg->beta1,
                            .beta2 = cfg->beta2,
                            .step = step};
    ember_opt_state_t st[EMBER_OPT_STATE_MAX];
    size_t ns = ember_opt_state_arrays(opt, st);
    for (size_t i = 0; i < ns; i++) {
        if (!strcmp(st[i].name, "exp_avg_sq"))
            d.state1 = st[i].data;
        else if (!strcmp(st[i].name, "started"))
            d.started = st[i].data;
        else if (!strcmp(st[i].name, "step"))
            d.row_step = st[i].data;
        else
            d.state0 = st[i].data;
    }
    return d;
}

/* |a - b| <= rtol (1 + |b|) everywhere; rtol 0: the same bits. */
static int upd_same(const void *a, const void *b, size_t n, ember_dtype_t dtype, double rtol,
                    const char *what)
{
    if (dtype != EMBER_DTYPE_F32 || rtol == 0.0) {
        size_t bytes = n * (dtype == EMBER_DTYPE_U8 ? 1 : 4);
        if (memcmp(a, b, bytes) == 0)
            return 1;
        for (size_t i = 0; i < n; i++) {
            if (dtype == EMBER_DTYPE_F32 && memcmp((const float *)a + i, (const float *)b + i, 4)) {
                fprintf(stderr, "%s[%zu]: %.9g != %.9g\n", what, i, ((const float *)a)[i],
                        ((const float *)b)[i]);
                break;
            }
        }
        fprintf(stderr, "%s differs\n", what);
        return 0;
    }
    const float *x = a, *y = b;
    for (size_t i = 0; i < n; i++) {
        if (!(fabs((double)x[i] - (double)y[i]) <= rtol * (1.0 + fabs((double)y[i])))) {
            fprintf(stderr, "%s[%zu]: %.9g vs reference %.9g\n", what, i, x[i], y[i]);
            return 0;
        }
    }
    return 1;
}

/* Table and every state array of @got against @want's. */
static int upd_compare(const float *table, const float *table_ref, ember_opt_t *got,
                       ember_opt_t *want, size_t dim, double rtol, const char *what)
{
    ember_opt_state_t g[EMBER_OPT_STATE_MAX], w[EMBER_OPT_STATE_MAX];
    size_t ng = ember_opt_state_arrays(got, g), nw = ember_opt_state_arrays(want, w);
    if (ng != nw)
        return 0;
    if (!upd_same(table, table_ref, (size_t)UPD_ROWS * dim, EMBER_DTYPE_F32, rtol, "table")) {
        fprintf(stderr, "case %s\n", what);
        return 0;
    }
    for (size_t i = 0; i < ng; i++) {
        if (!upd_same(g[i].data, w[i].data, g[i].rows * g[i].per_row, g[i].dtype, rtol,
                      g[i].name)) {
            fprintf(stderr, "case %s\n", what);
            return 0;
        }
    }
    return 1;
}

/* A table of UPD_ROWS x @dim random values. */
static float *upd_table(size_t dim)
{
    float *t = malloc((size_t)UPD_ROWS * dim * sizeof(float));
    for (size_t i = 0; t && i < (size_t)UPD_ROWS * dim; i++)
        t[i] = (float)upd_uni(-0.5, 0.5);
    return t;
}

#endif
