/* ember engine: SGD / Adagrad / row-wise Adagrad / Adam, dense and lazy. */
#include "engine/ops/optimizer.h"
#include "common/hugepage.h"
#include "common/prefetch.h"
#include "engine/ops/half.h"

#include <ember/log.h>

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct ember_opt {
    ember_opt_config_t cfg;
    ember_opt_layout_t layout;
    size_t rows, dim;
    uint64_t step;      /* steps taken (dense, or per table for sparse) */
    float *buf0;        /* momentum / sum of squares / exp_avg / row acc */
    float *buf1;        /* exp_avg_sq (Adam) */
    uint8_t *started;   /* sparse SGD with dampening: row buffer started (0/1) */
    uint32_t *row_step; /* sparse Adam with per-row steps */
    float *row;         /* sparse: one fp16 row widened for its update */
    size_t state_bytes;
    int reserved; /* ember_opt_create_reserved: arrays mapped, faulted in as used */
};

static const char *const opt_names[] = {"sgd", "adagrad", "rowwise_adagrad", "adam"};

const char *ember_opt_kind_name(ember_opt_kind_t kind)
{
    if ((unsigned)kind < sizeof(opt_names) / sizeof(opt_names[0]))
        return opt_names[kind];
    return "unknown";
}

ember_status_t ember_opt_kind_parse(const char *text, ember_opt_kind_t *kind_p)
{
    for (unsigned i = 0; text && i < sizeof(opt_names) / sizeof(opt_names[0]); i++) {
        if (strcmp(text, opt_names[i]) == 0) {
            *kind_p = (ember_opt_kind_t)i;
            return EMBER_OK;
        }
    }
    return EMBER_ERR_INVALID_PARAM;
}

void ember_opt_config_default(ember_opt_kind_t kind, float lr, ember_opt_config_t *cfg_p)
{
    memset(cfg_p, 0, sizeof(*cfg_p));
    cfg_p->kind = kind;
    cfg_p->lr = lr;
    cfg_p->beta1 = 0.9f;
    cfg_p->beta2 = 0.999f;
    cfg_p->adam_row_step = 1;
    switch (kind) {
    case EMBER_OPT_ADAGRAD: cfg_p->eps = 1e-10f; break;
    case EMBER_OPT_ROWWISE_ADAGRAD: /* FBGEMM's default */
    case EMBER_OPT_ADAM: cfg_p->eps = 1e-8f; break;
    case EMBER_OPT_SGD: break;
    }
}

/* What is wrong with @c's hyper-parameters, or NULL. */
static const char *opt_config_fault(const ember_opt_config_t *c)
{
    if (!(c->lr >= 0.0f) || !isfinite(c->lr))
        return "lr must be finite and >= 0";
    if ((unsigned)c->kind > EMBER_OPT_ADAM)
        return "unknown optimizer kind";
    if (c->kind == EMBER_OPT_SGD && !(c->momentum >= 0.0f))
        return "momentum must be >= 0";
    if (c->kind == EMBER_OPT_SGD && c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
        return "nesterov needs momentum > 0 and dampening 0 (as PyTorch)";
    if (c->kind == EMBER_OPT_ADAGRAD && !(c->lr_decay >= 0.0f))
        return "lr_decay must be >= 0";
    if ((c->kind == EMBER_OPT_ADAGRAD || c->kind == EMBER_OPT_ROWWISE_ADAGRAD) &&
        !(c->initial_accumulator >= 0.0f))
        return "initial_accumulator must be >= 0";
    if (c->kind != EMBER_OPT_SGD && !(c->eps >= 0.0f))
        return "eps must be >= 0";
    if (c->kind == EMBER_OPT_ADAM &&
        !(c->beta1 >= 0.0f && c->beta1 < 1.0f && c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return "Adam betas must lie in [0, 1)";
    return NULL;
}

ember_status_t ember_opt_config_check(const ember_opt_config_t *cfg, char *err, size_t err_length)
{
    const char *why = cfg ? opt_config_fault(cfg) : "no optimizer config";
    if (!why)
        return ember_status_text(err, err_length, EMBER_OK, "%s", "");
    return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s: %s",
                             cfg ? ember_opt_kind_name(cfg->kind) : "optimizer", why);
}

static ember_status_t opt_check_config(const ember_opt_config_t *c)
{
    char err[160];
    ember_status_t status = ember_opt_config_check(c, err, sizeof(err));
    if (status != EMBER_OK)
        ember_error("optim", "%s", err);
    return status;
}

/* calloc that also counts what it hands out, so state_bytes is exact. */
static void *opt_alloc(ember_opt_t *opt, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    if (opt->reserved) { /* zero pages until a row is written */
        void *p = ember_huge_map(count * size > 0 ? count * size : 1, 0);
        if (p)
            opt->state_bytes += count * size;
        return p;
    }
    void *p = ember_huge_alloc(count * size, 1); /* random rows: see hugepage.h */
    if (p)
        opt->state_bytes += count * size;
    return p;
}

static ember_status_t opt_check_create(const ember_opt_config_t *cfg, size_t rows, size_t dim,
                                       ember_opt_layout_t layout, ember_opt_t **opt_p)
{
    /* A sparse parameter may have no rows: a parameter server's shard of a
     * table with fewer rows than servers owns none. */
    if (!cfg || !opt_p || (rows == 0 && layout != EMBER_OPT_SPARSE) || dim == 0 ||
        rows > SIZE_MAX / dim || (layout != EMBER_OPT_DENSE && layout != EMBER_OPT_SPARSE)) {
        ember_error("optim", "create: invalid arguments (rows %zu, dim %zu)", rows, dim);
        return EMBER_ERR_INVALID_PARAM;
    }
    return opt_check_config(cfg);
}

/* buf0 of @count accumulators at initial_accumulator (Adagrad's kinds). */
static int opt_alloc_accumulators(ember_opt_t *opt, size_t count)
{
    if (!(opt->buf0 = opt_alloc(opt, count, sizeof(float))))
        return 0;
    for (size_t i = 0; !opt->reserved && i < count; i++)
        opt->buf0[i] = opt->cfg.initial_accumulator;
    return 1;
}

/* The state the kind needs, as the header lists it; 0 when out of memory. */
static int opt_alloc_state(ember_opt_t *opt)
{
    const ember_opt_config_t *cfg = &opt->cfg;
    const size_t rows = opt->rows, n = rows * opt->dim;
    const int sparse = opt->layout == EMBER_OPT_SPARSE;

    switch (cfg->kind) {
    case EMBER_OPT_SGD:
        if (cfg->momentum == 0.0f)
            return 1;
        /* A zero buffer behaves as "not started" only when dampening is 0
         * (m*0 + 1*g == g); otherwise each row needs its own flag. */
        return (opt->buf0 = opt_alloc(opt, n, sizeof(float))) &&
               (!sparse || cfg->dampening == 0.0f || (opt->started = opt_alloc(opt, rows, 1)));
    case EMBER_OPT_ADAGRAD: return opt_alloc_accumulators(opt, n);
    case EMBER_OPT_ROWWISE_ADAGRAD: return opt_alloc_accumulators(opt, rows);
    case EMBER_OPT_ADAM:
        return (opt->buf0 = opt_alloc(opt, n, sizeof(float))) &&
               (opt->buf1 = opt_alloc(opt, n, sizeof(float))) &&
               (!sparse || !cfg->adam_row_step ||
                (opt->row_step = opt_alloc(opt, rows, sizeof(uint32_t))));
    }
    return 1;
}

/* An optimizer of @layout, its state made now or (@reserved) mapped and
 * faulted in as rows are used. */
static ember_status_t opt_new(const ember_opt_config_t *cfg, size_t rows, size_t dim,
                              ember_opt_layout_t layout, int reserved, ember_opt_t **opt_p)
{
    EMBER_CHECK(opt_check_create(cfg, rows, dim, layout, opt_p));
    ember_opt_t *opt = calloc(1, sizeof(*opt));
    if (!opt)
        return EMBER_ERR_NO_MEMORY;
    opt->cfg = *cfg;
    opt->layout = layout;
    opt->rows = rows;
    opt->dim = dim;
    opt->reserved = reserved;
    if (layout == EMBER_OPT_SPARSE && !(opt->row = malloc(dim * sizeof(float)))) {
        free(opt);
        return EMBER_ERR_NO_MEMORY;
    }
    if (!opt_alloc_state(opt)) {
        ember_error("optim", "create: no memory for %s state of %zu x %zu",
                    ember_opt_kind_name(cfg->kind), rows, dim);
        ember_opt_destroy(opt);
        return EMBER_ERR_NO_MEMORY;
    }
    *opt_p = opt;
    return EMBER_OK;
}

ember_status_t ember_opt_create(const ember_opt_config_t *cfg, size_t rows, size_t dim,
                                ember_opt_layout_t layout, ember_opt_t **opt_p)
{
    return opt_new(cfg, rows, dim, layout, 0, opt_p);
}

ember_status_t ember_opt_create_reserved(const ember_opt_config_t *cfg, size_t rows, size_t dim,
                                         ember_opt_t **opt_p)
{
    return opt_new(cfg, rows, dim, EMBER_OPT_SPARSE, 1, opt_p);
}

void ember_opt_reset_rows(ember_opt_t *opt, const int64_t *rows, size_t n)
{
    const size_t dim = opt->dim;
    const float acc = opt->cfg.initial_accumulator;
    for (size_t i = 0; i < n; i++) {
        const size_t r = (size_t)rows[i];
        if (opt->buf0) {
            const int per_row = opt->cfg.kind == EMBER_OPT_ROWWISE_ADAGRAD;
            const int adagrad = opt->cfg.kind == EMBER_OPT_ADAGRAD || per_row;
            float *b = opt->buf0 + (per_row ? r : r * dim);
            for (size_t d = 0; d < (per_row ? 1 : dim); d++)
                b[d] = adagrad ? acc : 0.0f;
        }
        if (opt->buf1)
            memset(opt->buf1 + r * dim, 0, dim * sizeof(float));
        if (opt->started)
            opt->started[r] = 0;
        if (opt->row_step)
            opt->row_step[r] = 0;
    }
}

size_t ember_opt_row_state_bytes(const ember_opt_t *opt)
{
    return opt && opt->rows ? opt->state_bytes / opt->rows : 0;
}

/* A state array of @count x @size, as opt_alloc made it. */
static void opt_free(const ember_opt_t *opt, void *p, size_t count, size_t size)
{
    if (opt->reserved && p)
        munmap(p, count * size > 0 ? count * size : 1);
    else
        ember_huge_free(p);
}

void ember_opt_destroy(ember_opt_t *opt)
{
    if (!opt)
        return;
    const size_t n = opt->rows * opt->dim, rows = opt->rows;
    const int per_row = opt->cfg.kind == EMBER_OPT_ROWWISE_ADAGRAD;
    opt_free(opt, opt->buf0, per_row ? rows : n, sizeof(float));
    opt_free(opt, opt->buf1, n, sizeof(float));
    opt_free(opt, opt->started, rows, 1);
    opt_free(opt, opt->row_step, rows, sizeof(uint32_t));
    free(opt->row);
    free(opt);
}

size_t ember_opt_state_bytes(const ember_opt_t *opt)
{
    return opt ? opt->state_bytes : 0;
}

/* One state array of @rows x @per_row of @dtype, named @name. */
static ember_opt_state_t state_array(const char *name, ember_dtype_t dtype, size_t rows,
                                     size_t per_row, void *data)
{
    return (ember_opt_state_t){
            .name = name, .dtype = dtype, .rows = rows, .per_row = per_row, .data = data};
}

size_t ember_opt_state_arrays(ember_opt_t *opt, ember_opt_state_t out[EMBER_OPT_STATE_MAX])
{
    const size_t rows = opt->rows, dim = opt->dim;
    size_t n = 0;

    switch (opt->cfg.kind) {
    case EMBER_OPT_SGD:
        if (opt->buf0)
            out[n++] = state_array("momentum_buffer", EMBER_DTYPE_F32, rows, dim, opt->buf0);
        if (opt->started)
            out[n++] = state_array("started", EMBER_DTYPE_U8, rows, 1, opt->started);
        break;
    case EMBER_OPT_ADAGRAD:
        out[n++] = state_array("sum", EMBER_DTYPE_F32, rows, dim, opt->buf0);
        break;
    case EMBER_OPT_ROWWISE_ADAGRAD:
        out[n++] = state_array("momentum1", EMBER_DTYPE_F32, rows, 1, opt->buf0);
        break;
    case EMBER_OPT_ADAM:
        out[n++] = state_array("exp_avg", EMBER_DTYPE_F32, rows, dim, opt->buf0);
        out[n++] = state_array("exp_avg_sq", EMBER_DTYPE_F32, rows, dim, opt->buf1);
        if (opt->row_step)
            out[n++] = state_array("step", EMBER_DTYPE_U32, rows, 1, opt->row_step);
        break;
    }
    return n;
}

uint64_t ember_opt_steps(const ember_opt_t *opt)
{
    return opt->step;
}

void ember_opt_set_steps(ember_opt_t *opt, uint64_t steps)
{
    opt->step = steps;
}

/* --- kernels over one contiguous span; state at the same offset ---------- */

static void sgd_span(const ember_opt_config_t *c, float *restrict w, const float *restrict g,
                     float *restrict buf, size_t len, int first)
{
    const float lr = c->lr, mom = c->momentum, damp1 = 1.0f - c->dampening;

    if (!buf) {
        for (size_t i = 0; i < len; i++)
            w[i] -= lr * g[i];
        return;
    }
    for (size_t i = 0; i < len; i++) {
        float b = first ? g[i] : mom * buf[i] + damp1 * g[i];
        buf[i] = b;
        float d = c->nesterov ? g[i] + mom * b : b;
        w[i] -= lr * d;
    }
}

static void adagrad_span(const ember_opt_config_t *c, float *restrict w, const float *restrict g,
                         float *restrict sum, size_t len, float clr)
{
    for (size_t i = 0; i < len; i++) {
        sum[i] += g[i] * g[i];
        w[i] -= clr * (g[i] / (sqrtf(sum[i]) + c->eps));
    }
}

static void rowwise_row(const ember_opt_config_t *c, float *restrict w, const float *restrict g,
                        float *acc, size_t dim)
{
    float sq = 0.0f;
    for (size_t d = 0; d < dim; d++)
        sq += g[d] * g[d];
    *acc += sq / (float)dim;
    float mult = c->lr / (sqrtf(*acc) + c->eps);
    for (size_t d = 0; d < dim; d++)
        w[d] -= mult * g[d];
}

/* torch.optim.Adam: eps is added to sqrt(v) / sqrt(1 - b2^t). */
static void adam_dense_span(const ember_opt_config_t *c, float *restrict w, const float *restrict g,
                            float *restrict m, float *restrict v, size_t len, uint64_t t)
{
    const double bc1 = 1.0 - pow(c->beta1, (double)t);
    const double bc2 = 1.0 - pow(c->beta2, (double)t);
    const float step_size = (float)(c->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float b1 = c->beta1, b2 = c->beta2;

    for (size_t i = 0; i < len; i++) {
        m[i] = m[i] * b1 + (1.0f - b1) * g[i];
        v[i] = v[i] * b2 + (1.0f - b2) * g[i] * g[i];
        float denom = sqrtf(v[i]) / bc2_sqrt + c->eps;
        w[i] -= step_size * (m[i] / denom);
    }
}

/* torch.optim.SparseAdam: eps on sqrt(v), step lr sqrt(1-b2^t) / (1-b1^t). */
static void adam_sparse_span(const ember_opt_config_t *c, float *restrict w,
                             const float *restrict g, float *restrict m, float *restrict v,
                             size_t len, uint64_t t)
{
    const double bc1 = 1.0 - pow(c->beta1, (double)t);
    const double bc2 = 1.0 - pow(c->beta2, (double)t);
    const float step_size = (float)(c->lr * sqrt(bc2) / bc1);
    const float b1 = c->beta1, b2 = c->beta2;

    for (size_t i = 0; i < len; i++) {
        m[i] += (g[i] - m[i]) * (1.0f - b1);
        v[i] += (g[i] * g[i] - v[i]) * (1.0f - b2);
        w[i] -= step_size * (m[i] / (sqrtf(v[i]) + c->eps));
    }
}

static float adagrad_clr(const ember_opt_t *opt)
{
    /* step was already incremented: clr = lr / (1 + (t - 1) lr_decay). */
    return (float)(opt->cfg.lr / (1.0 + (double)(opt->step - 1) * opt->cfg.lr_decay));
}

ember_status_t ember_opt_step_dense(ember_opt_t *opt, float *param, const float *grad, size_t n)
{
    if (!opt || opt->layout != EMBER_OPT_DENSE || n != opt->rows * opt->dim || !param || !grad) {
        ember_error("optim",
                    "dense step: invalid arguments (n %zu, expected "
                    "%zu, layout %s)",
                    n, opt ? opt->rows * opt->dim : 0,
                    opt && opt->layout == EMBER_OPT_SPARSE ? "sparse" : "dense");
        return EMBER_ERR_INVALID_PARAM;
    }
    opt->step++;
    switch (opt->cfg.kind) {
    case EMBER_OPT_SGD: sgd_span(&opt->cfg, param, grad, opt->buf0, n, opt->step == 1); break;
    case EMBER_OPT_ADAGRAD:
        adagrad_span(&opt->cfg, param, grad, opt->buf0, n, adagrad_clr(opt));
        break;
    case EMBER_OPT_ROWWISE_ADAGRAD:
        for (size_t r = 0; r < opt->rows; r++)
            rowwise_row(&opt->cfg, param + r * opt->dim, grad + r * opt->dim, &opt->buf0[r],
                        opt->dim);
        break;
    case EMBER_OPT_ADAM:
        adam_dense_span(&opt->cfg, param, grad, opt->buf0, opt->buf1, n, opt->step);
        break;
    }
    return EMBER_OK;
}

static ember_status_t step_check_args(const ember_opt_t *opt, const ember_opt_values_t *values,
                                      const int64_t *rows, const float *grad, size_t nrows)
{
    if (values && values->dtype != EMBER_DTYPE_F32 && values->dtype != EMBER_DTYPE_F16) {
        ember_error("optim",
                    "sparse step: rows of dtype %d are not supported (fp32, "
                    "fp16)",
                    (int)values->dtype);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (!opt || !values || opt->layout != EMBER_OPT_SPARSE || values->dim != opt->dim ||
        (values->placement != EMBER_OPT_IN_TABLE && values->placement != EMBER_OPT_GATHERED) ||
        (nrows > 0 && (!values->data || !rows || !grad))) {
        ember_error("optim",
                    "sparse step: invalid arguments (dim %zu, "
                    "expected %zu)",
                    values ? values->dim : 0, opt ? opt->dim : 0);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/* Every row checked before anything is touched, so an error leaves the
 * table and state exactly as they were. */
static ember_status_t step_check_rows(const ember_opt_t *opt, const int64_t *rows, size_t nrows)
{
    for (size_t u = 0; u < nrows; u++) {
        if (rows[u] < 0 || (uint64_t)rows[u] >= opt->rows) {
            ember_error("optim",
                        "sparse step: row %" PRId64 " at position %zu "
                        "is out of range [0, %zu)",
                        rows[u], u, opt->rows);
            return EMBER_ERR_OUT_OF_RANGE;
        }
        if (u > 0 && rows[u] <= rows[u - 1]) {
            ember_error("optim",
                        "sparse step: rows not strictly increasing at "
                        "position %zu (%" PRId64 " after %" PRId64 ")",
                        u, rows[u], rows[u - 1]);
            return EMBER_ERR_INVALID_PARAM;
        }
    }
    return EMBER_OK;
}

/* The values (when in the table) and the state of the row
 * EMBER_PREFETCH_AHEAD places on are requested now: random rows, see
 * prefetch.h.  always_inline: GCC takes a function doing nothing but
 * prefetch for a pure one and drops its calls before it would inline it. */
static inline __attribute__((always_inline)) void
step_prefetch(const ember_opt_t *opt, const char *base, size_t stored_bytes, int gathered,
              const int64_t *rows, size_t u, size_t nrows)
{
    if (u + EMBER_PREFETCH_AHEAD >= nrows)
        return;
    const size_t row_bytes = opt->dim * sizeof(float);
    size_t ahead = (size_t)rows[u + EMBER_PREFETCH_AHEAD] * opt->dim;
    if (!gathered)
        ember_prefetch_span(base + (size_t)rows[u + EMBER_PREFETCH_AHEAD] * stored_bytes,
                            stored_bytes, 1);
    if (opt->buf0 && opt->cfg.kind != EMBER_OPT_ROWWISE_ADAGRAD)
        ember_prefetch_span(opt->buf0 + ahead, row_bytes, 1);
    if (opt->buf1)
        ember_prefetch_span(opt->buf1 + ahead, row_bytes, 1);
}

/* The kind's update of table row @r, its fp32 values in @w. */
static inline void step_row(ember_opt_t *opt, float *w, const float *g, size_t r, float clr)
{
    const ember_opt_config_t *c = &opt->cfg;
    const size_t dim = opt->dim, off = r * dim;

    switch (c->kind) {
    case EMBER_OPT_SGD: {
        int first = 0;
        if (opt->started) {
            first = !opt->started[r];
            opt->started[r] = 1;
        }
        sgd_span(c, w, g, opt->buf0 ? opt->buf0 + off : NULL, dim, first);
        break;
    }
    case EMBER_OPT_ADAGRAD: adagrad_span(c, w, g, opt->buf0 + off, dim, clr); break;
    case EMBER_OPT_ROWWISE_ADAGRAD: rowwise_row(c, w, g, &opt->buf0[r], dim); break;
    case EMBER_OPT_ADAM: {
        uint64_t t = opt->step;
        if (opt->row_step) {
            /* Saturate: past 2^32 updates the bias terms are exactly 1. */
            if (opt->row_step[r] != UINT32_MAX)
                opt->row_step[r]++;
            t = opt->row_step[r];
        }
        adam_sparse_span(c, w, g, opt->buf0 + off, opt->buf1 + off, dim, t);
        break;
    }
    }
}

/* The checked rows updated in order; the step already counted.  @row:
 * an fp16 row's fp32 copy (dim floats, the caller's thread's own). */
static void step_rows(ember_opt_t *opt, const ember_opt_values_t *values, const int64_t *rows,
                      const float *grad, size_t nrows, float *row)
{
    const ember_opt_config_t *c = &opt->cfg;
    const size_t dim = opt->dim;
    const float clr = c->kind == EMBER_OPT_ADAGRAD ? adagrad_clr(opt) : 0.0f;
    const int half = values->dtype == EMBER_DTYPE_F16;
    const int gathered = values->placement == EMBER_OPT_GATHERED;
    const size_t stored_bytes = half ? dim * sizeof(uint16_t) : dim * sizeof(float);
    char *base = values->data;
    /* Plain SGD on fp16 rows needs no fp32 copy of the row: one pass. */
    const int half_sgd = half && c->kind == EMBER_OPT_SGD && !opt->buf0;

    for (size_t u = 0; u < nrows; u++) {
        size_t r = (size_t)rows[u];
        void *stored = base + (gathered ? u : r) * stored_bytes;
        /* An fp16 row is updated in fp32 and rounded back once. */
        float *w = half ? row : stored;
        const float *g = grad + u * dim;

        step_prefetch(opt, base, stored_bytes, gathered, rows, u, nrows);
        if (half_sgd) {
            ember_half_sgd(stored, g, c->lr, dim);
            continue;
        }
        if (half)
            ember_half_to_float_n(stored, w, dim);
        step_row(opt, w, g, r, clr);
        if (half)
            ember_float_to_half_n(w, stored, dim);
    }
}

ember_status_t ember_opt_step_sparse(ember_opt_t *opt, const ember_opt_values_t *values,
                                     const int64_t *rows, const float *grad, size_t nrows)
{
    EMBER_CHECK(step_check_args(opt, values, rows, grad, nrows));
    EMBER_CHECK(step_check_rows(opt, rows, nrows));
    opt->step++;
    step_rows(opt, values, rows, grad, nrows, opt->row);
    return EMBER_OK;
}

ember_status_t ember_opt_sparse_begin(ember_opt_t *opt, const ember_opt_values_t *values)
{
    EMBER_CHECK(step_check_args(opt, values, NULL, NULL, 0));
    opt->step++;
    return EMBER_OK;
}

ember_status_t ember_opt_sparse_check(const ember_opt_t *opt, const int64_t *rows, size_t nrows)
{
    return step_check_rows(opt, rows, nrows);
}

void ember_opt_sparse_rows(ember_opt_t *opt, const ember_opt_values_t *values, const int64_t *rows,
                           const float *grad, size_t nrows, float *row)
{
    step_rows(opt, values, rows, grad, nrows, row);
}

/* The state arrays @cfg's kind needs, present in @b. */
static int bufs_complete(const ember_opt_config_t *cfg, const ember_opt_bufs_t *b)
{
    switch (cfg->kind) {
    case EMBER_OPT_SGD:
        return cfg->momentum == 0.0f || (b->buf0 && (cfg->dampening == 0.0f || b->started));
    case EMBER_OPT_ADAGRAD:
    case EMBER_OPT_ROWWISE_ADAGRAD: return b->buf0 != NULL;
    case EMBER_OPT_ADAM: return b->buf0 && b->buf1;
    }
    return 0;
}

ember_status_t ember_opt_step_sparse_bufs(const ember_opt_config_t *cfg, uint64_t step,
                                          const ember_opt_bufs_t *bufs, float *table,
                                          size_t table_rows, size_t dim, const int64_t *rows,
                                          const float *grad, size_t nrows)
{
    if (!cfg || !bufs || dim == 0 || step == 0 || (nrows > 0 && (!table || !rows || !grad))) {
        ember_error("optim",
                    "sparse step on borrowed state: invalid arguments (dim %zu, "
                    "step %" PRIu64 ")",
                    dim, step);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(opt_check_config(cfg));
    if (!bufs_complete(cfg, bufs)) {
        ember_error("optim", "sparse step on borrowed state: %s lacks state it needs",
                    ember_opt_kind_name(cfg->kind));
        return EMBER_ERR_INVALID_PARAM;
    }
    /* An object over the borrowed arrays: the step is the owned one's. */
    ember_opt_t opt = {
            .cfg = *cfg,
            .layout = EMBER_OPT_SPARSE,
            .rows = table_rows,
            .dim = dim,
            .step = step,
            .buf0 = bufs->buf0,
            .buf1 = cfg->kind == EMBER_OPT_ADAM ? bufs->buf1 : NULL,
            .started = cfg->kind == EMBER_OPT_SGD && cfg->dampening != 0.0f ? bufs->started : NULL,
            .row_step = cfg->kind == EMBER_OPT_ADAM ? bufs->row_step : NULL};
    if (cfg->kind == EMBER_OPT_SGD && cfg->momentum == 0.0f)
        opt.buf0 = NULL;
    EMBER_CHECK(step_check_rows(&opt, rows, nrows));
    const ember_opt_values_t values = {
            .data = table, .dtype = EMBER_DTYPE_F32, .dim = dim, .placement = EMBER_OPT_IN_TABLE};
    step_rows(&opt, &values, rows, grad, nrows, NULL);
    return EMBER_OK;
}
