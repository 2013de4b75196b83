/*
 * tests/engine/test_sparse: a trainer's tables through engine/train/sparse
 * against real PS processes (ember_ps_run), forked with mp_spawn: two
 * trainers, each with one ember_sparse_t over three tables of other rows,
 * dims and bags (t0: sum with per-sample weights; t1: max on rows with
 * ties; t2: mean with a padding_idx and fp16 replies), one LOOKUPS and one
 * GRADS per PS a step.  Every step each trainer checks the combined pooled
 * outputs against ember_bag_forward on its own copy of the tables (loaded
 * onto the PS with TABLE_LOAD), pushes seeded gradients, and steps its
 * copy by SGD on both trainers' row gradients (ember_bag_backward, summed
 * in trainer order), so the next step's lookups check the PS's update;
 * after the last step an evaluation (EMBER_LOOKUP_EVAL) does, and every row
 * read back is checked at the end.
 * Usage: test_sparse CASE
 *
 *   rows_pP     P = 1, 2, 3: every table row-sharded over all P servers
 *   tables_pP   P = 2, 3: each table whole on one server (--sharding table)
 *   mixed_p3    t0 over ps0-ps2, t1 whole on ps1, t2 over ps1-ps2
 *   refused     placements ember_sparse_create refuses, naming the tables:
 *               partly overlapping row-sharded ranges, one id twice, ranks
 *               beyond the job
 * The placement cases also check that a lookup while the last push (a call) is
 * open, and a push after an evaluation, are refused.
 */
#include "common/rng.h"
#include "engine/ps/ps.h"
#include "engine/train/sparse.h"
#include "engine/wire/codec.h"
#include "tests/common/mp_spawn.h"

#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/transport.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The PS serves with a pool (common/workers.h), more threads than this
 * machine may have cores: its results are the same bits for any count. */
#define PS_TEST_THREADS 3

#define LR 0.1f
enum {
    NT = 3, /* tables */
    TRAINERS = 2,
    FIRST_PS = 2, /* rank of ps0: the trainers are ranks 0 and 1 */
    STEPS = 3,
    MAXB = 8, /* bags */
    MAXN = 64 /* entries of a batch */
};

typedef struct {
    const char *name;
    int64_t rows;
    uint32_t dim;
    size_t bags;
    ember_bag_mode_t mode;
    int weighted, half;
    int64_t padding_idx;
    double tolerance; /* of the pooled values (fp16 replies: their rounding) */
} table_spec_t;

static const table_spec_t specs[NT] = {
        {"t0", 57, 4, 6, EMBER_BAG_SUM, 1, 0, -1, 1e-5},
        {"t1", 23, 3, 4, EMBER_BAG_MAX, 0, 0, -1, 0.0},
        {"t2", 101, 8, 5, EMBER_BAG_MEAN, 0, 1, 5, 2e-3},
};

typedef enum {
    PLACE_ROWS,
    PLACE_TABLES,
    PLACE_MIXED
} placement_t;

typedef struct {
    uint32_t P;
    placement_t placement;
} layout_t;

/* Table @k's shards and its first server's index. */
static void place(const layout_t *layout, size_t k, uint32_t *num_ps, uint32_t *first)
{
    static const uint32_t mixed[NT][2] = {{3, 0}, {1, 1}, {2, 1}};
    if (layout->placement == PLACE_ROWS) {
        *num_ps = layout->P, *first = 0;
    } else if (layout->placement == PLACE_TABLES) {
        *num_ps = 1, *first = (uint32_t)k % layout->P;
    } else {
        *num_ps = mixed[k][0], *first = mixed[k][1];
    }
}

/* ---- processes, calls ------------------------------------------------------ */

static ember_tp_t *join(const char *name)
{
    ember_tp_params_t params;
    ember_tp_t *tp;
    ember_tp_params_init(&params);
    params.name = name;
    ember_status_t status = ember_tp_create(&params, &tp);
    MP_CHECK(status == EMBER_OK, "ember_tp_create(%s): %s", name, ember_status_string(status));
    return tp;
}

static int run_ps(int index)
{
    char name[16];
    snprintf(name, sizeof(name), "ps%d", index);
    ember_tp_t *tp = join(name);
    ember_status_t status = ember_ps_run(tp, &(ember_ps_run_options_t){.threads = PS_TEST_THREADS});
    MP_CHECK(status == EMBER_OK, "%s: ember_ps_run: %s", name, ember_status_string(status));
    ember_tp_destroy(tp);
    return 0;
}

static void call_ok(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov, size_t iovcnt,
                    void *out, size_t out_length)
{
    ember_future_t *future;
    size_t length = 0;
    MP_CHECK(ember_rpc_call_async(tp, peer, op, iov, iovcnt, NULL, 0,
                                  &(ember_rpc_param_t){.timeout_s = 30.0}, &future) == EMBER_OK,
             "call op %u", op);
    ember_status_t status = ember_future_wait(future);
    const char *data = ember_future_data(future, &length);
    MP_CHECK(status == EMBER_OK && length == out_length, "op %u on rank %d: %s (%zu bytes): %.*s",
             op, peer, ember_status_string(status), length, (int)length, data ? data : "");
    if (out_length)
        memcpy(out, data, out_length);
    ember_future_release(future);
}

static void signal_key(ember_tp_t *tp, const char *key)
{
    MP_CHECK(ember_tp_store_set(tp, key, "1", 1) == EMBER_OK, "store_set %s", key);
}

static void await_key(ember_tp_t *tp, const char *key)
{
    void *value = NULL;
    size_t length = 0;
    MP_CHECK(ember_tp_store_get(tp, key, &value, &length) == EMBER_OK, "store_get %s", key);
    free(value);
}

/* ---- the tables: the reference copy and the PS's ----------------------------- */

/* Table @k's initial values: max mode's on a grid of quarters (ties). */
static float *initial_table(size_t k)
{
    const table_spec_t *s = &specs[k];
    const size_t cells = (size_t)s->rows * s->dim;
    float *table = malloc(cells * sizeof(float));
    ember_rng_t rng;
    MP_CHECK(table, "out of memory");
    ember_rng_seed(&rng, 91, k);
    for (size_t i = 0; i < cells; i++) {
        float v = (float)(2.0 * ember_rng_uniform(&rng) - 1.0);
        table[i] = s->mode == EMBER_BAG_MAX ? roundf(v * 2.0f) / 4.0f : v;
    }
    return table;
}

/* Trainer 0: every shard created (sync, two trainers, SGD) and loaded. */
static void tables_create(ember_tp_t *tp, const layout_t *layout, float *const *tables)
{
    for (size_t k = 0; k < NT; k++) {
        const table_spec_t *s = &specs[k];
        uint32_t num_ps, first;
        place(layout, k, &num_ps, &first);
        for (uint32_t p = 0; p < num_ps; p++) {
            ember_msg_table_create_t spec = {.table_id = (uint32_t)k,
                                             .shard = p,
                                             .num_shards = num_ps,
                                             .trainers = TRAINERS,
                                             .rows = s->rows,
                                             .dim = s->dim,
                                             .consistency = EMBER_SYNC,
                                             .sparse_reduce = EMBER_REDUCE_SUM,
                                             .init = EMBER_INIT_LOAD};
            ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
            snprintf(spec.name, sizeof(spec.name), "%s", s->name);
            ember_msg_table_load_t load = {.table_id = (uint32_t)k, .first = 0, .count = s->rows};
            ember_iov_t create = {&spec, sizeof(spec)};
            ember_iov_t rows[2] = {{&load, sizeof(load)},
                                   {tables[k], (size_t)s->rows * s->dim * sizeof(float)}};
            int rank = FIRST_PS + (int)(first + p);
            call_ok(tp, rank, EMBER_OP_TABLE_CREATE, &create, 1, NULL, 0);
            call_ok(tp, rank, EMBER_OP_TABLE_LOAD, rows, 2, NULL, 0);
        }
    }
}

/* Every row of table @k as its shards hold it, against @reference. */
static void tables_check(ember_tp_t *tp, const layout_t *layout, size_t k, const float *reference)
{
    const table_spec_t *s = &specs[k];
    uint32_t num_ps, first;
    place(layout, k, &num_ps, &first);
    float *part = malloc((size_t)s->rows * s->dim * sizeof(float) + 4);
    MP_CHECK(part, "out of memory");
    for (uint32_t p = 0; p < num_ps; p++) {
        int64_t local = (s->rows - p + num_ps - 1) / num_ps;
        ember_msg_table_read_t msg = {.table_id = (uint32_t)k, .first = 0, .count = local};
        ember_iov_t iov = {&msg, sizeof(msg)};
        call_ok(tp, FIRST_PS + (int)(first + p), EMBER_OP_TABLE_READ, &iov, 1, part,
                (size_t)local * s->dim * sizeof(float));
        for (int64_t l = 0; l < local; l++) {
            for (uint32_t d = 0; d < s->dim; d++) {
                float want = reference[(size_t)(l * num_ps + p) * s->dim + d];
                float got = part[l * s->dim + d];
                MP_CHECK(fabsf(got - want) <= 1e-5f * (1.0f + fabsf(want)),
                         "table %s row %lld col %u: %.9g on the PS, the reference %.9g", s->name,
                         (long long)(l * num_ps + p), d, (double)got, (double)want);
            }
        }
    }
    free(part);
}

/* ---- batches, gradients, the reference step ------------------------------------ */

typedef struct {
    size_t bags, n;
    int64_t indices[MAXN], offsets[MAXB];
    float weights[MAXN];
} batch_t;

/* Trainer @t's bags of table @k at @step: 0 to 5 rows each (bag 1 empty,
 * bag 0 a duplicate, t2's padding row now and then). */
static void make_batch(size_t k, uint32_t t, uint64_t step, batch_t *b)
{
    const table_spec_t *s = &specs[k];
    ember_rng_t rng;
    ember_rng_seed(&rng, 1000 * t + 10 * step + k, 5);
    b->bags = s->bags;
    b->n = 0;
    for (size_t bag = 0; bag < s->bags; bag++) {
        b->offsets[bag] = (int64_t)b->n;
        int size = bag == 1 ? 0 : (int)ember_rng_int(&rng, 0, 5);
        for (int i = 0; i < size; i++) {
            int64_t row = ember_rng_int(&rng, 0, s->rows - 1);
            b->indices[b->n++] =
                    s->padding_idx >= 0 && ember_rng_int(&rng, 0, 4) == 0 ? s->padding_idx : row;
        }
        if (bag == 0) {
            b->indices[b->n] = b->indices[b->n + 1] = ember_rng_int(&rng, 0, s->rows - 1);
            b->n += 2;
        }
    }
    for (size_t i = 0; i < b->n; i++)
        b->weights[i] = (float)(0.5 + ember_rng_uniform(&rng));
}

static ember_batch_t batch_view(size_t k, const batch_t *b)
{
    return (ember_batch_t){.indices = b->indices,
                           .n = b->n,
                           .offsets = b->offsets,
                           .bags = b->bags,
                           .weights = specs[k].weighted ? b->weights : NULL,
                           .n_weights = specs[k].weighted ? b->n : 0};
}

static void make_grad(size_t k, uint32_t t, uint64_t step, float *g)
{
    ember_rng_t rng;
    ember_rng_seed(&rng, 2000 * t + 10 * step + k, 9);
    for (size_t i = 0; i < specs[k].bags * specs[k].dim; i++)
        g[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0);
}

/* ember_bag_forward of @b on the reference copy of table @k. */
static void ref_forward(size_t k, const float *table, const batch_t *b, float *out, int64_t *argmax)
{
    const table_spec_t *s = &specs[k];
    const ember_bag_table_t rows = {
            .data = table, .dtype = EMBER_DTYPE_F32, .rows = s->rows, .dim = s->dim};
    const ember_batch_t v = batch_view(k, b);
    const ember_bag_batch_t batch = {.indices = v.indices,
                                     .n = v.n,
                                     .offsets = v.offsets,
                                     .bags = v.bags,
                                     .weights = v.weights,
                                     .n_weights = v.n_weights};
    const ember_bag_opts_t opts = {.mode = s->mode, .padding_idx = s->padding_idx};
    MP_CHECK(ember_bag_forward(&rows, &batch, &opts, out, argmax) == EMBER_OK, "forward");
}

/* Table @k stepped by SGD on both trainers' row gradients of @step, summed
 * in trainer order (as the sync PS sums them). */
static void ref_step(size_t k, float *table, uint64_t step)
{
    const table_spec_t *s = &specs[k];
    const size_t cells = (size_t)s->rows * s->dim;
    float *dense = calloc(cells, sizeof(float)), pooled[MAXB * 8], g[MAXB * 8], grad[MAXN * 8];
    int64_t argmax[MAXB * 8], rows_out[MAXN];
    MP_CHECK(dense, "out of memory");
    for (uint32_t t = 0; t < TRAINERS; t++) {
        batch_t b;
        make_batch(k, t, step, &b);
        make_grad(k, t, step, g);
        ref_forward(k, table, &b, pooled, argmax);
        const ember_batch_t v = batch_view(k, &b);
        const ember_bag_batch_t batch = {.indices = v.indices,
                                         .n = v.n,
                                         .offsets = v.offsets,
                                         .bags = v.bags,
                                         .weights = v.weights,
                                         .n_weights = v.n_weights};
        const ember_bag_opts_t opts = {.mode = s->mode, .padding_idx = s->padding_idx};
        const ember_bag_table_t rows = {
                .data = table, .dtype = EMBER_DTYPE_F32, .rows = s->rows, .dim = s->dim};
        ember_bag_grad_t out = {.rows = rows_out, .grad = grad};
        MP_CHECK(ember_bag_backward(&rows, &batch, &opts, g,
                                    s->mode == EMBER_BAG_MAX ? argmax : NULL, &out) == EMBER_OK,
                 "backward");
        for (size_t u = 0; u < out.nrows; u++)
            for (uint32_t d = 0; d < s->dim; d++)
                dense[(size_t)rows_out[u] * s->dim + d] += grad[u * s->dim + d];
    }
    for (size_t i = 0; i < cells; i++)
        table[i] -= LR * dense[i];
    free(dense);
}

/* ---- a trainer --------------------------------------------------------------- */

typedef struct {
    ember_tp_t *tp;
    uint32_t trainer;
    ember_trainer_dev_t td;
    ember_sparse_t *sparse;
    int aborted;
    float *tables[NT]; /* the reference copies */
    batch_t batches[NT];
    float x[NT][MAXB * 8];
    char err[512];
} trainer_t;

static void trainer_open(trainer_t *tr, const layout_t *layout)
{
    ember_sparse_config_t configs[NT];
    MP_CHECK(ember_device_open("cpu", 0, &tr->td.device) == EMBER_OK, "cpu device");
    tr->td.ops = ember_device_ops(tr->td.device);
    tr->td.on_host = 1;
    for (size_t k = 0; k < NT; k++) {
        uint32_t num_ps, first;
        place(layout, k, &num_ps, &first);
        configs[k] = (ember_sparse_config_t){.table_id = (uint32_t)k,
                                             .table_name = specs[k].name,
                                             .num_ps = num_ps,
                                             .first_ps_rank = FIRST_PS + (int)first,
                                             .dim = specs[k].dim,
                                             .mode = specs[k].mode,
                                             .padding_idx = specs[k].padding_idx,
                                             .half_replies = specs[k].half,
                                             .trainer = (int)tr->trainer};
        tr->tables[k] = initial_table(k);
    }
    MP_CHECK(ember_sparse_create(configs, NT, tr->tp, &tr->td, 0, &tr->aborted, &tr->sparse) ==
                     EMBER_OK,
             "ember_sparse_create");
    MP_CHECK(ember_sparse_tables(tr->sparse) == NT, "%zu tables", ember_sparse_tables(tr->sparse));
}

/* This trainer's lookups of @step (@eval: an evaluation), combined and
 * checked against the reference copies. */
static void trainer_lookup(trainer_t *tr, uint64_t step, int eval)
{
    ember_batch_t views[NT];
    for (size_t k = 0; k < NT; k++) {
        make_batch(k, tr->trainer, step, &tr->batches[k]);
        views[k] = batch_view(k, &tr->batches[k]);
    }
    MP_CHECK(ember_sparse_split_batches(tr->sparse, views, step, eval, tr->err, sizeof(tr->err)) ==
                     EMBER_OK,
             "split: %s", tr->err);
    MP_CHECK(ember_sparse_pushes_wait(tr->sparse, step, tr->err, sizeof(tr->err)) == EMBER_OK,
             "pushes_wait: %s", tr->err);
    MP_CHECK(ember_sparse_lookup(tr->sparse, tr->err, sizeof(tr->err)) == EMBER_OK, "lookup: %s",
             tr->err);
    for (size_t k = 0; k < NT; k++) {
        const table_spec_t *s = &specs[k];
        float want[MAXB * 8];
        int64_t argmax[MAXB * 8];
        MP_CHECK(ember_sparse_combine(tr->sparse, k, tr->x[k]) == EMBER_OK, "combine %zu", k);
        ref_forward(k, tr->tables[k], &tr->batches[k], want, argmax);
        for (size_t i = 0; i < s->bags * s->dim; i++) {
            double diff = fabs((double)tr->x[k][i] - want[i]);
            MP_CHECK(s->tolerance > 0.0 ? diff <= s->tolerance * (1.0 + fabs(want[i]))
                                        : memcmp(&tr->x[k][i], &want[i], 4) == 0,
                     "trainer %u step %llu%s table %s bag %zu col %zu: %.9g, the reference %.9g",
                     tr->trainer, (unsigned long long)step, eval ? " (eval)" : "", s->name,
                     i / s->dim, i % s->dim, (double)tr->x[k][i], (double)want[i]);
        }
    }
}

/* The seeded gradients pushed, and the reference stepped on both
 * trainers'. */
static void trainer_push(trainer_t *tr, uint64_t step)
{
    static float g[NT][MAXB * 8];
    const float *grads[NT];
    for (size_t k = 0; k < NT; k++) {
        make_grad(k, tr->trainer, step, g[k]);
        grads[k] = g[k];
    }
    MP_CHECK(ember_sparse_push(tr->sparse, grads, step, step + 1 == STEPS, tr->err,
                               sizeof(tr->err)) == EMBER_OK,
             "push: %s", tr->err);
    for (size_t k = 0; k < NT; k++)
        ref_step(k, tr->tables[k], step);
}

static void trainer_close(trainer_t *tr)
{
    ember_sparse_destroy(tr->sparse);
    ember_device_close(tr->td.device);
    for (size_t k = 0; k < NT; k++)
        free(tr->tables[k]);
}

static int run_trainer(uint32_t t, const layout_t *layout)
{
    char name[16];
    trainer_t *tr = calloc(1, sizeof(*tr));
    MP_CHECK(tr, "out of memory");
    snprintf(name, sizeof(name), "trainer%u", t);
    tr->tp = join(name);
    tr->trainer = t;
    MP_CHECK(ember_tp_barrier(tr->tp, "roles-ready") == EMBER_OK, "roles-ready");
    trainer_open(tr, layout);
    if (t == 0) {
        tables_create(tr->tp, layout, tr->tables);
        signal_key(tr->tp, "tables-ready");
    }
    await_key(tr->tp, "tables-ready");
    for (uint64_t step = 0; step < STEPS; step++) {
        trainer_lookup(tr, step, 0);
        trainer_push(tr, step);
    }
    /* The last push is a call still open: no lookup may reuse its buffer. */
    MP_CHECK(ember_sparse_lookup(tr->sparse, tr->err, sizeof(tr->err)) == EMBER_ERR_INVALID_PARAM &&
                     strstr(tr->err, "still leaving"),
             "a lookup before the last push was waited for: %s", tr->err);
    MP_CHECK(ember_sparse_pushes_wait(tr->sparse, STEPS, tr->err, sizeof(tr->err)) == EMBER_OK,
             "the last push: %s", tr->err);
    /* After STEPS steps: the tables as both trainers' pushes left them. */
    trainer_lookup(tr, STEPS, 1);
    const float *grads[NT] = {tr->x[0], tr->x[1], tr->x[2]};
    MP_CHECK(ember_sparse_push(tr->sparse, grads, STEPS, 1, tr->err, sizeof(tr->err)) ==
                             EMBER_ERR_INVALID_PARAM &&
                     strstr(tr->err, "for evaluation"),
             "a push after an evaluation: %s", tr->err);
    if (t == 0) {
        for (size_t k = 0; k < NT; k++)
            tables_check(tr->tp, layout, k, tr->tables[k]);
        await_key(tr->tp, "trainer1-done");
        for (uint32_t p = 0; p < layout->P; p++)
            call_ok(tr->tp, FIRST_PS + (int)p, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    } else {
        signal_key(tr->tp, "trainer1-done");
    }
    trainer_close(tr);
    ember_tp_destroy(tr->tp);
    free(tr);
    return 0;
}

static int run_case(int rank, const layout_t *layout)
{
    if (rank < TRAINERS)
        return run_trainer((uint32_t)rank, layout);
    return run_ps(rank - FIRST_PS);
}

#define LAYOUT_CASE(fn, P, placement)                               \
    static int fn(int rank, int world, void *arg)                   \
    {                                                               \
        (void)world, (void)arg;                                     \
        return run_case(rank, &(const layout_t){(P), (placement)}); \
    }
LAYOUT_CASE(case_rows_p1, 1, PLACE_ROWS)
LAYOUT_CASE(case_rows_p2, 2, PLACE_ROWS)
LAYOUT_CASE(case_rows_p3, 3, PLACE_ROWS)
LAYOUT_CASE(case_tables_p2, 2, PLACE_TABLES)
LAYOUT_CASE(case_tables_p3, 3, PLACE_TABLES)
LAYOUT_CASE(case_mixed_p3, 3, PLACE_MIXED)

/* ---- placements refused ------------------------------------------------------ */

static void expect_refused(trainer_t *tr, const ember_sparse_config_t *configs, size_t n,
                           const char *what)
{
    ember_sparse_t *sparse = NULL;
    MP_CHECK(ember_sparse_create(configs, n, tr->tp, &tr->td, 0, &tr->aborted, &sparse) ==
                             EMBER_ERR_INVALID_PARAM &&
                     !sparse,
             "%s: taken", what);
    fprintf(stderr, "  refused as expected: %s\n", what);
}

static int case_refused(int rank, int world, void *arg)
{
    (void)arg;
    if (rank != 0)
        return run_ps(rank - 1); /* rank 0 is the only trainer here */
    trainer_t tr = {.tp = join("trainer0")};
    MP_CHECK(ember_tp_barrier(tr.tp, "roles-ready") == EMBER_OK, "roles-ready");
    MP_CHECK(ember_device_open("cpu", 0, &tr.td.device) == EMBER_OK, "cpu device");
    tr.td.ops = ember_device_ops(tr.td.device);
    tr.td.on_host = 1;
    ember_sparse_config_t c[2] = {{.table_id = 0,
                                   .table_name = "a",
                                   .num_ps = 2,
                                   .first_ps_rank = 1,
                                   .dim = 4,
                                   .padding_idx = -1},
                                  {.table_id = 1,
                                   .table_name = "b",
                                   .num_ps = 2,
                                   .first_ps_rank = 2,
                                   .dim = 4,
                                   .padding_idx = -1}};
    expect_refused(&tr, c, 2, "a over ranks 1-2, b over ranks 2-3");
    c[1].first_ps_rank = 1;
    c[1].table_id = 0;
    expect_refused(&tr, c, 2, "two tables of id 0");
    c[1].table_id = 1;
    c[1].first_ps_rank = world - 1;
    expect_refused(&tr, c, 2, "b's second shard beyond the job");
    c[1].trainer = 1;
    c[1].first_ps_rank = 1;
    expect_refused(&tr, c, 2, "tables of two trainers");
    expect_refused(&tr, c, 0, "no tables");
    for (int p = 1; p < world; p++)
        call_ok(tr.tp, p, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    ember_device_close(tr.td.device);
    ember_tp_destroy(tr.tp);
    return 0;
}

static const mp_case_t cases[] = {
        {"rows_p1", case_rows_p1, TRAINERS + 1, 0},
        {"rows_p2", case_rows_p2, TRAINERS + 2, 0},
        {"rows_p3", case_rows_p3, TRAINERS + 3, 0},
        {"tables_p2", case_tables_p2, TRAINERS + 2, 0},
        {"tables_p3", case_tables_p3, TRAINERS + 3, 0},
        {"mixed_p3", case_mixed_p3, TRAINERS + 3, 0},
        {"refused", case_refused, 4, 0},
};

int main(int argc, char **argv)
{
    return mp_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 120.0);
}
