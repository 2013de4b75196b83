/*
 * Optimizers against straightforward double-precision references written
 * here from the PyTorch / FBGEMM formulas, over several steps; sparse steps
 * touch changing row sets so laziness (untouched rows and their state frozen)
 * is exercised.
 *
 *   state_resume: for each kind and layout (SGD plain, momentum, dampening;
 *   Adagrad with lr_decay; row-wise Adagrad; dense Adam; sparse Adam with
 *   per-row and per-table steps) the state arrays are named as PyTorch
 *   names them; N steps, the arrays and step count copied into a fresh
 *   optimizer, M more steps on both: the same bits, parameters and state.
 */
#include "engine/io/safetensors.h"
#include "engine/ops/half.h"
#include "engine/ops/optimizer.h"

#include "test_util.h"

#include <stdlib.h>

#define ROWS  6
#define DIM   3
#define STEPS 5

/* Reference state, per element (and per row where the algorithm has it). */
typedef struct {
    ember_opt_config_t c;
    double p[ROWS * DIM];
    double s0[ROWS * DIM], s1[ROWS * DIM]; /* momentum | sum | m, v */
    double racc[ROWS];                     /* row-wise accumulator */
    int started[ROWS];                     /* momentum buffer exists */
    long row_t[ROWS];                      /* Adam per-row step */
    long t;                                /* steps taken */
} ref_t;

static void ref_init(ref_t *r, const ember_opt_config_t *c, const float *p)
{
    memset(r, 0, sizeof(*r));
    r->c = *c;
    for (size_t i = 0; i < ROWS * DIM; i++) {
        r->p[i] = p[i];
        if (c->kind == EMBER_OPT_ADAGRAD)
            r->s0[i] = c->initial_accumulator;
    }
    for (size_t i = 0; i < ROWS; i++)
        r->racc[i] = c->initial_accumulator;
}

/* Update row @row with gradient @g[DIM]; @t is the step count to use for the
 * bias correction (Adam); @sparse selects SparseAdam's form. */
static void ref_row(ref_t *r, size_t row, const float *g, long t, int sparse)
{
    const ember_opt_config_t *c = &r->c;
    double lr = c->lr;

    switch (c->kind) {
    case EMBER_OPT_SGD:
        for (size_t d = 0; d < DIM; d++) {
            size_t i = row * DIM + d;
            double step = g[d];
            if (c->momentum != 0) {
                /* torch: buf = grad on first use, else m buf + (1-damp) g */
                r->s0[i] =
                        r->started[row] ? c->momentum * r->s0[i] + (1 - c->dampening) * g[d] : g[d];
                step = c->nesterov ? g[d] + c->momentum * r->s0[i] : r->s0[i];
            }
            r->p[i] -= lr * step;
        }
        r->started[row] = 1;
        break;
    case EMBER_OPT_ADAGRAD: {
        double clr = lr / (1 + (double)(t - 1) * c->lr_decay);
        for (size_t d = 0; d < DIM; d++) {
            size_t i = row * DIM + d;
            r->s0[i] += (double)g[d] * g[d];
            r->p[i] -= clr * g[d] / (sqrt(r->s0[i]) + c->eps);
        }
        break;
    }
    case EMBER_OPT_ROWWISE_ADAGRAD: {
        double sq = 0;
        for (size_t d = 0; d < DIM; d++)
            sq += (double)g[d] * g[d];
        r->racc[row] += sq / DIM;
        double mult = lr / (sqrt(r->racc[row]) + c->eps);
        for (size_t d = 0; d < DIM; d++)
            r->p[row * DIM + d] -= mult * g[d];
        break;
    }
    case EMBER_OPT_ADAM: {
        double b1 = c->beta1, b2 = c->beta2;
        double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
        for (size_t d = 0; d < DIM; d++) {
            size_t i = row * DIM + d;
            r->s0[i] = b1 * r->s0[i] + (1 - b1) * g[d];
            r->s1[i] = b2 * r->s1[i] + (1 - b2) * (double)g[d] * g[d];
            if (sparse) /* SparseAdam */
                r->p[i] -= lr * sqrt(bc2) / bc1 * r->s0[i] / (sqrt(r->s1[i]) + c->eps);
            else /* Adam */
                r->p[i] -= lr / bc1 * r->s0[i] / (sqrt(r->s1[i]) / sqrt(bc2) + c->eps);
        }
        break;
    }
    }
}

static int compare(const char *what, int step, const float *got, const double *want,
                   const float *before, const int *touched)
{
    for (size_t i = 0; i < ROWS * DIM; i++) {
        size_t row = i / DIM;
        if (touched && !touched[row]) {
            /* Lazy: bit-for-bit unchanged. */
            CHECK(got[i] == before[i],
                  "%s step %d: untouched row %zu changed "
                  "(%.9g -> %.9g)",
                  what, step, row, before[i], got[i]);
        }
        double tol = 2e-6 * (1 + fabs(want[i]));
        CHECK(fabs(got[i] - want[i]) <= tol,
              "%s step %d: param[%zu] = %.9g, "
              "reference %.9g",
              what, step, i, got[i], want[i]);
    }
    return 0;
}

static int run_dense(const char *what, const ember_opt_config_t *cfg)
{
    ember_opt_t *opt;
    ref_t ref;
    float p[ROWS * DIM], g[ROWS * DIM];
    uint64_t rng = 1000 + (uint64_t)cfg->kind;

    for (size_t i = 0; i < ROWS * DIM; i++)
        p[i] = (float)test_uniform(&rng, -1, 1);
    ref_init(&ref, cfg, p);
    /* Rows x dim layout, so row-wise Adagrad has real rows. */
    CHECK(ember_opt_create(cfg, ROWS, DIM, EMBER_OPT_DENSE, &opt) == EMBER_OK, "create");
    for (int s = 1; s <= STEPS; s++) {
        for (size_t i = 0; i < ROWS * DIM; i++)
            g[i] = (float)test_uniform(&rng, -1, 1);
        CHECK(ember_opt_step_dense(opt, p, g, ROWS * DIM) == EMBER_OK, "step");
        ref.t++;
        for (size_t r = 0; r < ROWS; r++)
            ref_row(&ref, r, g + r * DIM, ref.t, 0);
        if (compare(what, s, p, ref.p, NULL, NULL)) {
            ember_opt_destroy(opt);
            return 1;
        }
    }
    fprintf(stderr, "%s dense: %d steps match, state %zu bytes\n", what, STEPS,
            ember_opt_state_bytes(opt));
    ember_opt_destroy(opt);
    return 0;
}

/* Rows touched at each step (sorted); row 1 and row 4 are never touched. */
static const int64_t touch[STEPS][ROWS] = {
        {0, 2, 5, -1}, {2, 3, -1}, {0, 2, -1}, {5, -1}, {0, 3, 5, -1}};

/* A sparse step on a table of @dim-wide rows of @dtype, in place. */
static ember_status_t step_table(ember_opt_t *opt, void *table, ember_dtype_t dtype, size_t dim,
                                 const int64_t *rows, const float *g, size_t n)
{
    const ember_opt_values_t values = {.data = table, .dtype = dtype, .dim = dim};
    return ember_opt_step_sparse(opt, &values, rows, g, n);
}

/* The same step on the rows copied out of @table and back, as a PS does
 * with rows kept on a device. */
static ember_status_t step_gathered(ember_opt_t *opt, float *table, const int64_t *rows,
                                    const float *g, size_t n)
{
    float values[ROWS * DIM];
    for (size_t u = 0; u < n; u++)
        memcpy(values + u * DIM, table + rows[u] * DIM, DIM * sizeof(float));
    const ember_opt_values_t gathered = {
            .data = values, .dtype = EMBER_DTYPE_F32, .dim = DIM, .placement = EMBER_OPT_GATHERED};
    ember_status_t status = ember_opt_step_sparse(opt, &gathered, rows, g, n);
    for (size_t u = 0; status == EMBER_OK && u < n; u++)
        memcpy(table + rows[u] * DIM, values + u * DIM, DIM * sizeof(float));
    return status;
}

static int run_sparse(const char *what, const ember_opt_config_t *cfg)
{
    ember_opt_t *opt, *opt_gathered;
    ref_t ref;
    float p[ROWS * DIM], before[ROWS * DIM], g[ROWS * DIM], q[ROWS * DIM];
    uint64_t rng = 2000 + (uint64_t)cfg->kind;

    for (size_t i = 0; i < ROWS * DIM; i++)
        p[i] = (float)test_uniform(&rng, -1, 1);
    ref_init(&ref, cfg, p);
    memcpy(q, p, sizeof(p));
    CHECK(ember_opt_create(cfg, ROWS, DIM, EMBER_OPT_SPARSE, &opt) == EMBER_OK &&
                  ember_opt_create(cfg, ROWS, DIM, EMBER_OPT_SPARSE, &opt_gathered) == EMBER_OK,
          "create");
    for (int s = 0; s < STEPS; s++) {
        size_t n = 0;
        int touched[ROWS] = {0};
        while (n < ROWS && touch[s][n] >= 0)
            touched[touch[s][n++]] = 1;
        for (size_t i = 0; i < n * DIM; i++)
            g[i] = (float)test_uniform(&rng, -1, 1);
        memcpy(before, p, sizeof(p));
        CHECK(step_table(opt, p, EMBER_DTYPE_F32, DIM, touch[s], g, n) == EMBER_OK, "step");
        CHECK(step_gathered(opt_gathered, q, touch[s], g, n) == EMBER_OK, "gathered step");
        CHECK(memcmp(p, q, sizeof(p)) == 0, "%s step %d: gathered rows differ", what, s + 1);
        ref.t++;
        for (size_t u = 0; u < n; u++) {
            size_t row = (size_t)touch[s][u];
            ref.row_t[row]++;
            long t = (cfg->kind == EMBER_OPT_ADAM && cfg->adam_row_step) ? ref.row_t[row] : ref.t;
            ref_row(&ref, row, g + u * DIM, t, 1);
        }
        if (compare(what, s + 1, p, ref.p, before, touched)) {
            ember_opt_destroy(opt);
            ember_opt_destroy(opt_gathered);
            return 1;
        }
    }
    fprintf(stderr,
            "%s sparse: %d steps match, untouched rows frozen, state "
            "%zu bytes\n",
            what, STEPS, ember_opt_state_bytes(opt));
    ember_opt_destroy(opt);
    ember_opt_destroy(opt_gathered);
    return 0;
}

static int run_both(const char *what, const ember_opt_config_t *cfg)
{
    return run_dense(what, cfg) || run_sparse(what, cfg);
}

static int case_sgd(void)
{
    ember_opt_config_t c;
    ember_opt_config_default(EMBER_OPT_SGD, 0.05f, &c);
    return run_both("sgd", &c);
}

static int case_sgd_momentum(void)
{
    ember_opt_config_t c;
    ember_opt_config_default(EMBER_OPT_SGD, 0.05f, &c);
    c.momentum = 0.9f;
    if (run_both("sgd momentum", &c))
        return 1;
    c.dampening = 0.3f; /* the sparse path then keeps per-row start bits */
    return run_both("sgd momentum dampening", &c);
}

static int case_sgd_nesterov(void)
{
    ember_opt_config_t c;
    ember_opt_config_default(EMBER_OPT_SGD, 0.05f, &c);
    c.momentum = 0.8f;
    c.nesterov = 1;
    return run_both("sgd nesterov", &c);
}

static int case_adagrad(void)
{
    ember_opt_config_t c;
    ember_opt_config_default(EMBER_OPT_ADAGRAD, 0.1f, &c);
    CHECK(c.eps == 1e-10f && c.lr_decay == 0 && c.initial_accumulator == 0, "PyTorch defaults");
    if (run_both("adagrad", &c))
        return 1;
    c.lr_decay = 0.05f;
    c.initial_accumulator = 0.1f;
    return run_both("adagrad lr_decay", &c);
}

static int case_rowwise_adagrad(void)
{
    ember_opt_config_t c;
    ember_opt_config_default(EMBER_OPT_ROWWISE_ADAGRAD, 0.1f, &c);
    if (run_both("rowwise adagrad", &c))
        return 1;
    c.initial_accumulator = 0.5f;
    return run_both("rowwise adagrad init", &c);
}

static int case_adam(void)
{
    ember_opt_config_t c;
    ember_opt_config_default(EMBER_OPT_ADAM, 0.01f, &c);
    CHECK(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f, "defaults");
    if (run_both("adam", &c))
        return 1;
    c.adam_row_step = 0; /* SparseAdam's single step count */
    return run_sparse("adam table-step", &c);
}

static int case_state_bytes(void)
{
    const struct {
        ember_opt_kind_t kind;
        float momentum, dampening;
        int row_step;
        ember_opt_layout_t layout;
        size_t bytes;
    } want[] = {
            {EMBER_OPT_SGD, 0, 0, 0, EMBER_OPT_SPARSE, 0},
            {EMBER_OPT_SGD, 0.9f, 0, 0, EMBER_OPT_DENSE, 4 * 100 * 8},
            {EMBER_OPT_SGD, 0.9f, 0, 0, EMBER_OPT_SPARSE, 4 * 100 * 8},
            {EMBER_OPT_SGD, 0.9f, 0.1f, 0, EMBER_OPT_SPARSE, 4 * 100 * 8 + 100},
            {EMBER_OPT_ADAGRAD, 0, 0, 0, EMBER_OPT_SPARSE, 4 * 100 * 8},
            {EMBER_OPT_ROWWISE_ADAGRAD, 0, 0, 0, EMBER_OPT_SPARSE, 4 * 100},
            {EMBER_OPT_ADAM, 0, 0, 0, EMBER_OPT_DENSE, 2 * 4 * 100 * 8},
            {EMBER_OPT_ADAM, 0, 0, 1, EMBER_OPT_DENSE, 2 * 4 * 100 * 8},
            {EMBER_OPT_ADAM, 0, 0, 0, EMBER_OPT_SPARSE, 2 * 4 * 100 * 8},
            {EMBER_OPT_ADAM, 0, 0, 1, EMBER_OPT_SPARSE, 2 * 4 * 100 * 8 + 4 * 100},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        ember_opt_config_t c;
        ember_opt_t *opt;
        ember_opt_config_default(want[i].kind, 0.1f, &c);
        c.momentum = want[i].momentum;
        c.dampening = want[i].dampening;
        c.adam_row_step = want[i].row_step;
        CHECK(ember_opt_create(&c, 100, 8, want[i].layout, &opt) == EMBER_OK, "create %zu", i);
        size_t got = ember_opt_state_bytes(opt);
        ember_opt_destroy(opt);
        CHECK(got == want[i].bytes,
              "case %zu (%s): %zu state bytes, expected "
              "%zu",
              i, ember_opt_kind_name(want[i].kind), got, want[i].bytes);
    }
    return 0;
}

static int case_bad_input(void)
{
    ember_opt_config_t c;
    ember_opt_t *opt;
    float table[ROWS * DIM], copy[ROWS * DIM], g[3 * DIM] = {1, 1, 1, 1, 1, 1, 1, 1, 1};

    ember_opt_config_default(EMBER_OPT_ADAM, 0.1f, &c);
    for (size_t i = 0; i < ROWS * DIM; i++)
        table[i] = (float)i;
    memcpy(copy, table, sizeof(table));
    CHECK(ember_opt_create(&c, ROWS, DIM, EMBER_OPT_SPARSE, &opt) == EMBER_OK, "create");
    const int64_t oob[3] = {0, 2, ROWS}, unsorted[3] = {3, 1, 4}, dup[3] = {1, 1, 2}, neg[1] = {-1};
    CHECK(step_table(opt, table, EMBER_DTYPE_F32, DIM, oob, g, 3) == EMBER_ERR_OUT_OF_RANGE,
          "row past the table accepted");
    CHECK(step_table(opt, table, EMBER_DTYPE_F32, DIM, neg, g, 1) == EMBER_ERR_OUT_OF_RANGE,
          "negative row accepted");
    CHECK(step_table(opt, table, EMBER_DTYPE_F32, DIM, unsorted, g, 3) == EMBER_ERR_INVALID_PARAM,
          "unsorted rows accepted");
    CHECK(step_table(opt, table, EMBER_DTYPE_F32, DIM, dup, g, 3) == EMBER_ERR_INVALID_PARAM,
          "duplicate rows accepted");
    CHECK(memcmp(table, copy, sizeof(table)) == 0, "a rejected step changed "
                                                   "the table");
    CHECK(step_table(opt, table, EMBER_DTYPE_F32, DIM + 1, oob, g, 1) == EMBER_ERR_INVALID_PARAM,
          "dim mismatch accepted");
    CHECK(ember_opt_step_dense(opt, table, g, ROWS * DIM) == EMBER_ERR_INVALID_PARAM,
          "dense step on a sparse optimizer");
    ember_opt_destroy(opt);

    CHECK(ember_opt_create(&c, ROWS, DIM, EMBER_OPT_DENSE, &opt) == EMBER_OK, "create");
    CHECK(ember_opt_step_dense(opt, table, g, ROWS * DIM - 1) == EMBER_ERR_INVALID_PARAM,
          "wrong n accepted");
    CHECK(step_table(opt, table, EMBER_DTYPE_F32, DIM, oob, g, 1) == EMBER_ERR_INVALID_PARAM,
          "sparse step on a dense optimizer");
    ember_opt_destroy(opt);

    /* Hyper-parameters PyTorch refuses. */
    c.beta1 = 1.0f;
    CHECK(ember_opt_create(&c, ROWS, DIM, EMBER_OPT_DENSE, &opt) == EMBER_ERR_INVALID_PARAM,
          "beta1 = 1 accepted");
    ember_opt_config_default(EMBER_OPT_SGD, 0.1f, &c);
    c.nesterov = 1;
    CHECK(ember_opt_create(&c, ROWS, DIM, EMBER_OPT_DENSE, &opt) == EMBER_ERR_INVALID_PARAM,
          "nesterov without momentum accepted");
    ember_opt_config_default(EMBER_OPT_SGD, -0.1f, &c);
    CHECK(ember_opt_create(&c, ROWS, DIM, EMBER_OPT_DENSE, &opt) == EMBER_ERR_INVALID_PARAM,
          "negative lr accepted");
    ember_opt_config_default(EMBER_OPT_SGD, 0.1f, &c);
    CHECK(ember_opt_create(&c, 0, DIM, EMBER_OPT_DENSE, &opt) == EMBER_ERR_INVALID_PARAM,
          "zero rows accepted");

    ember_opt_kind_t k;
    CHECK(ember_opt_kind_parse("rowwise_adagrad", &k) == EMBER_OK && k == EMBER_OPT_ROWWISE_ADAGRAD,
          "parse");
    CHECK(ember_opt_kind_parse("adamw", &k) == EMBER_ERR_INVALID_PARAM, "unknown name parsed");
    return 0;
}

/* fp16 rows: every optimizer updates each touched row in fp32 (with fp32
 * state) and rounds it once: the same bits as the fp32 step on the widened
 * rows followed by that rounding, step after step; untouched rows keep their
 * bits.  A width of 19 takes the 8-wide conversions and their tail. */
static int case_sparse_fp16(void)
{
    enum {
        FDIM = 19,
        FSTEPS = 6
    };
    ember_opt_config_t configs[7];
    const char *names[7] = {"sgd",  "sgd momentum",   "sgd nesterov", "adagrad", "rowwise adagrad",
                            "adam", "adam table-step"};
    ember_opt_config_default(EMBER_OPT_SGD, 0.05f, &configs[0]);
    ember_opt_config_default(EMBER_OPT_SGD, 0.05f, &configs[1]);
    configs[1].momentum = 0.9f;
    configs[1].dampening = 0.3f;
    ember_opt_config_default(EMBER_OPT_SGD, 0.05f, &configs[2]);
    configs[2].momentum = 0.8f;
    configs[2].nesterov = 1;
    ember_opt_config_default(EMBER_OPT_ADAGRAD, 0.1f, &configs[3]);
    configs[3].lr_decay = 0.05f;
    ember_opt_config_default(EMBER_OPT_ROWWISE_ADAGRAD, 0.1f, &configs[4]);
    ember_opt_config_default(EMBER_OPT_ADAM, 0.01f, &configs[5]);
    configs[6] = configs[5];
    configs[6].adam_row_step = 0;
    for (size_t k = 0; k < 7; k++) {
        ember_opt_t *opt_half, *opt_wide;
        uint16_t half[ROWS * FDIM], untouched[ROWS * FDIM];
        float wide[ROWS * FDIM], g[ROWS * FDIM];
        uint64_t rng = 500 + k;
        for (size_t i = 0; i < ROWS * FDIM; i++) {
            half[i] = ember_float_to_half((float)test_uniform(&rng, -1, 1));
            wide[i] = ember_half_to_float(half[i]);
        }
        CHECK(ember_opt_create(&configs[k], ROWS, FDIM, EMBER_OPT_SPARSE, &opt_half) == EMBER_OK &&
                      ember_opt_create(&configs[k], ROWS, FDIM, EMBER_OPT_SPARSE, &opt_wide) ==
                              EMBER_OK,
              "create");
        for (int s = 0; s < FSTEPS; s++) {
            size_t n = 0;
            while (n < ROWS && touch[s % STEPS][n] >= 0)
                n++;
            for (size_t i = 0; i < n * FDIM; i++)
                g[i] = (float)test_uniform(&rng, -1, 1);
            memcpy(untouched, half, sizeof(half));
            CHECK(step_table(opt_half, half, EMBER_DTYPE_F16, FDIM, touch[s % STEPS], g, n) ==
                          EMBER_OK,
                  "step");
            CHECK(step_table(opt_wide, wide, EMBER_DTYPE_F32, FDIM, touch[s % STEPS], g, n) ==
                          EMBER_OK,
                  "fp32 step");
            for (size_t i = 0; i < ROWS * FDIM; i++)
                wide[i] = ember_half_to_float(ember_float_to_half(wide[i]));
            for (size_t r = 0; r < ROWS; r++) {
                int touched = 0;
                for (size_t u = 0; u < n; u++)
                    touched |= touch[s % STEPS][u] == (int64_t)r;
                for (size_t d = 0; d < FDIM; d++) {
                    size_t i = r * FDIM + d;
                    CHECK(half[i] == ember_float_to_half(wide[i]),
                          "%s step %d row %zu col "
                          "%zu: %a, fp32-then-rounded %a",
                          names[k], s, r, d, (double)ember_half_to_float(half[i]), (double)wide[i]);
                    CHECK(touched || half[i] == untouched[i],
                          "%s step %d: untouched row %zu "
                          "changed",
                          names[k], s, r);
                }
            }
        }
        CHECK(step_table(opt_half, half, EMBER_DTYPE_BF16, FDIM, touch[0], g, 1) ==
                      EMBER_ERR_INVALID_PARAM,
              "bf16 accepted");
        ember_opt_destroy(opt_half);
        ember_opt_destroy(opt_wide);
    }
    return 0;
}

/* --- state_resume: an optimizer's state copied out and into a fresh one -- */

enum {
    RESUME_BEFORE = 3, /* steps before the copy */
    RESUME_AFTER = 4   /* steps on both after it */
};

/* One step (dense: every row; sparse: step @s's rows of touch) with
 * gradients drawn from @rng. */
static ember_status_t resume_step(ember_opt_t *opt, ember_opt_layout_t layout, float *p, int s,
                                  uint64_t *rng)
{
    float g[ROWS * DIM];
    size_t n = 0;
    if (layout == EMBER_OPT_DENSE)
        n = ROWS;
    else
        while (n < ROWS && touch[s % STEPS][n] >= 0)
            n++;
    for (size_t i = 0; i < n * DIM; i++)
        g[i] = (float)test_uniform(rng, -1, 1);
    if (layout == EMBER_OPT_DENSE)
        return ember_opt_step_dense(opt, p, g, ROWS * DIM);
    return step_table(opt, p, EMBER_DTYPE_F32, DIM, touch[s % STEPS], g, n);
}

/* @b's arrays copied into (@restore) or compared with @a's: the same
 * names, shapes, dtypes; their bits. */
static int resume_arrays(ember_opt_t *a, ember_opt_t *b, int restore, const char *what)
{
    ember_opt_state_t sa[EMBER_OPT_STATE_MAX], sb[EMBER_OPT_STATE_MAX];
    size_t na = ember_opt_state_arrays(a, sa), nb = ember_opt_state_arrays(b, sb);
    CHECK(na == nb, "%s: %zu arrays and %zu", what, na, nb);
    for (size_t i = 0; i < na; i++) {
        CHECK(strcmp(sa[i].name, sb[i].name) == 0 && sa[i].dtype == sb[i].dtype &&
                      sa[i].rows == sb[i].rows && sa[i].per_row == sb[i].per_row,
              "%s: array %zu is %s and %s", what, i, sa[i].name, sb[i].name);
        size_t bytes = sa[i].rows * sa[i].per_row * ember_dtype_size(sa[i].dtype);
        if (restore)
            memcpy(sb[i].data, sa[i].data, bytes);
        else
            CHECK(memcmp(sa[i].data, sb[i].data, bytes) == 0, "%s: %s differs", what, sa[i].name);
    }
    CHECK(restore || ember_opt_steps(a) == ember_opt_steps(b), "%s: steps %llu and %llu", what,
          (unsigned long long)ember_opt_steps(a), (unsigned long long)ember_opt_steps(b));
    if (restore)
        ember_opt_set_steps(b, ember_opt_steps(a));
    return 0;
}

/* Run RESUME_BEFORE steps, copy the state into a fresh optimizer (and the
 * parameter), run RESUME_AFTER more on both with the same gradients: the
 * same bits as the optimizer that ran on. */
static int resume_one(const char *what, const ember_opt_config_t *cfg, ember_opt_layout_t layout,
                      const char *const *names, size_t nnames)
{
    ember_opt_t *a = NULL, *b = NULL;
    float pa[ROWS * DIM], pb[ROWS * DIM];
    uint64_t rng = 3000 + (uint64_t)cfg->kind, rng_b;
    ember_opt_state_t st[EMBER_OPT_STATE_MAX];
    int rc = 1;

    for (size_t i = 0; i < ROWS * DIM; i++)
        pa[i] = (float)test_uniform(&rng, -1, 1);
    CHECK(ember_opt_create(cfg, ROWS, DIM, layout, &a) == EMBER_OK &&
                  ember_opt_create(cfg, ROWS, DIM, layout, &b) == EMBER_OK,
          "%s: create", what);
    size_t n = ember_opt_state_arrays(a, st);
    CHECK(n == nnames, "%s: %zu state arrays, want %zu", what, n, nnames);
    for (size_t i = 0; i < n; i++)
        CHECK(strcmp(st[i].name, names[i]) == 0 && st[i].rows == ROWS &&
                      (st[i].per_row == DIM || st[i].per_row == 1),
              "%s: array %zu is %s [%zu x %zu], want %s", what, i, st[i].name, st[i].rows,
              st[i].per_row, names[i]);
    for (int s = 0; s < RESUME_BEFORE; s++)
        if (resume_step(a, layout, pa, s, &rng) != EMBER_OK)
            goto out;
    memcpy(pb, pa, sizeof(pa));
    if (resume_arrays(a, b, 1, what))
        goto out;
    rng_b = rng;
    for (int s = RESUME_BEFORE; s < RESUME_BEFORE + RESUME_AFTER; s++) {
        if (resume_step(a, layout, pa, s, &rng) != EMBER_OK ||
            resume_step(b, layout, pb, s, &rng_b) != EMBER_OK)
            goto out;
    }
    if (memcmp(pa, pb, sizeof(pa)) != 0) {
        fprintf(stderr, "%s: resumed parameters differ\n", what);
        goto out;
    }
    rc = resume_arrays(a, b, 0, what);
    CHECK(rc || ember_opt_steps(b) == RESUME_BEFORE + RESUME_AFTER, "%s: %llu steps", what,
          (unsigned long long)ember_opt_steps(b));
out:
    ember_opt_destroy(a);
    ember_opt_destroy(b);
    return rc;
}

static int case_state_resume(void)
{
    static const char *const momentum[] = {"momentum_buffer"};
    static const char *const damped[] = {"momentum_buffer", "started"};
    static const char *const sum[] = {"sum"};
    static const char *const rowwise[] = {"momentum1"};
    static const char *const adam[] = {"exp_avg", "exp_avg_sq"};
    static const char *const adam_rows[] = {"exp_avg", "exp_avg_sq", "step"};
    ember_opt_config_t c;
    int rc = 0;

    ember_opt_config_default(EMBER_OPT_SGD, 0.1f, &c);
    rc |= resume_one("plain sgd", &c, EMBER_OPT_SPARSE, NULL, 0);
    c.momentum = 0.9f;
    rc |= resume_one("sgd momentum dense", &c, EMBER_OPT_DENSE, momentum, 1);
    rc |= resume_one("sgd momentum sparse", &c, EMBER_OPT_SPARSE, momentum, 1);
    c.dampening = 0.3f;
    rc |= resume_one("sgd dampening dense", &c, EMBER_OPT_DENSE, momentum, 1);
    rc |= resume_one("sgd dampening sparse", &c, EMBER_OPT_SPARSE, damped, 2);
    ember_opt_config_default(EMBER_OPT_ADAGRAD, 0.1f, &c);
    c.lr_decay = 0.01f; /* the step count matters */
    c.initial_accumulator = 0.1f;
    rc |= resume_one("adagrad dense", &c, EMBER_OPT_DENSE, sum, 1);
    rc |= resume_one("adagrad sparse", &c, EMBER_OPT_SPARSE, sum, 1);
    ember_opt_config_default(EMBER_OPT_ROWWISE_ADAGRAD, 0.1f, &c);
    rc |= resume_one("rowwise adagrad dense", &c, EMBER_OPT_DENSE, rowwise, 1);
    rc |= resume_one("rowwise adagrad sparse", &c, EMBER_OPT_SPARSE, rowwise, 1);
    ember_opt_config_default(EMBER_OPT_ADAM, 0.01f, &c);
    rc |= resume_one("adam dense", &c, EMBER_OPT_DENSE, adam, 2);
    rc |= resume_one("sparse adam per-row steps", &c, EMBER_OPT_SPARSE, adam_rows, 3);
    c.adam_row_step = 0;
    rc |= resume_one("sparse adam per-table steps", &c, EMBER_OPT_SPARSE, adam, 2);
    return rc;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"sgd", case_sgd},
            {"sgd_momentum", case_sgd_momentum},
            {"sgd_nesterov", case_sgd_nesterov},
            {"adagrad", case_adagrad},
            {"rowwise_adagrad", case_rowwise_adagrad},
            {"adam", case_adam},
            {"state_bytes", case_state_bytes},
            {"bad_input", case_bad_input},
            {"sparse_fp16", case_sparse_fp16},
            {"state_resume", case_state_resume},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
