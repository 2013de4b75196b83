/*
 * tests/engine/test_table_threads: a shard's compute over a pool of threads
 * (engine/ps/table_work.c, common/workers.c) gives the same bits as over
 * one.
 *
 * Each case runs one job of random lookups (duplicate rows, empty bags,
 * evaluation lookups between them) and their gradients through
 * ember_table_* with pools of 1, 2, 3, 4 and 8 threads, EMBER_PS_GRAIN 1 so
 * that even these small requests are split, and compares every reply, the
 * rows and the optimizer's state arrays (through a snapshot) byte for byte
 * with the one-thread run.  The cases cover sum, weighted sum and max
 * pooling, fp32 and fp16 rows, every optimizer (SGD with momentum and
 * dampening, Adagrad with lr_decay, row-wise Adagrad, Adam with per-row and
 * per-table steps), sync with 2 and 3 trainers (the gradients in varying
 * arrival order, sum and mean) and async.  Case lookups_tables: a LOOKUPS
 * of four small tables, one a task (engine/ps/ps_multi.c), gives every
 * pool the same reply, and one that a table refuses gives the same error
 * and leaves no context on any table.  Case pool: the pool itself runs
 * every task once, for any task count, and refuses 0 or too many threads.
 */
#include "common/workers.h"
#include "engine/ops/optimizer.h"
#include "engine/ps/ps_multi.h"
#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include <ember/config.h>

#include "test_util.h"

#include <stdatomic.h>
#include <stdlib.h>

enum {
    ROWS = 300,
    BAGS = 40,
    MAX_BAG = 12,
    STEPS = 5,
    MAX_TRAINERS = 3
};

typedef struct {
    ember_opt_kind_t opt;
    int adam_table_steps;
    ember_dtype_t dtype;
    int max_mode, weighted;
    uint32_t trainers, dim;
    ember_consistency_t consistency;
    ember_sparse_reduce_t reduce;
    uint32_t table_id;
} scenario_t;

/* Everything a run produced, back to back: replies, then the state. */
typedef struct {
    uint8_t *bytes;
    size_t length, capacity;
} blob_t;

static int blob_add(blob_t *blob, const void *data, size_t length)
{
    if (blob->length + length > blob->capacity) {
        size_t want = (blob->length + length) * 2;
        uint8_t *grown = realloc(blob->bytes, want);
        if (!grown)
            return 0;
        blob->bytes = grown;
        blob->capacity = want;
    }
    memcpy(blob->bytes + blob->length, data, length);
    blob->length += length;
    return 1;
}

static ember_shard_t *make_table(const scenario_t *sc, char *err, size_t err_length)
{
    ember_msg_table_create_t spec;
    memset(&spec, 0, sizeof(spec));
    spec.table_id = sc->table_id;
    spec.num_shards = 1;
    spec.trainers = sc->trainers;
    spec.rows = ROWS;
    spec.dim = sc->dim;
    spec.consistency = sc->consistency;
    spec.sparse_reduce = sc->reduce;
    spec.init = EMBER_INIT_NORMAL;
    spec.seed = 11;
    spec.dtype = sc->dtype;
    ember_opt_config_default(sc->opt, 0.05f, &spec.optimizer);
    if (sc->opt == EMBER_OPT_SGD) {
        spec.optimizer.momentum = 0.9f;
        spec.optimizer.dampening = 0.1f;
    }
    if (sc->opt == EMBER_OPT_ADAGRAD)
        spec.optimizer.lr_decay = 0.01f;
    if (sc->opt == EMBER_OPT_ADAM)
        spec.optimizer.adam_row_step = !sc->adam_table_steps;
    snprintf(spec.name, sizeof(spec.name), "threads");
    ember_shard_t *table = NULL;
    if (ember_shard_create(&spec, NULL, &table, err, err_length) != EMBER_OK)
        return NULL;
    return table;
}

/* A random batch: bags of 0..MAX_BAG indices, half from 20 hot rows (so
 * rows repeat within and across bags), deduplicated as a trainer does. */
typedef struct {
    uint32_t counts[BAGS];
    int64_t indices[BAGS * MAX_BAG], rows[BAGS * MAX_BAG], inverse[BAGS * MAX_BAG];
    float weights[BAGS * MAX_BAG];
    uint32_t places[BAGS * MAX_BAG];
    size_t n, unique;
} batch_t;

static void make_batch(batch_t *b, uint64_t seed)
{
    b->n = 0;
    for (size_t bag = 0; bag < BAGS; bag++) {
        b->counts[bag] = (uint32_t)(test_uniform(&seed, 0.0, MAX_BAG + 1) * (bag % 7 != 3));
        for (uint32_t i = 0; i < b->counts[bag]; i++, b->n++) {
            int hot = test_uniform(&seed, 0.0, 1.0) < 0.5;
            b->indices[b->n] = (int64_t)test_uniform(&seed, 0.0, hot ? 20.0 : ROWS);
            b->weights[b->n] = (float)test_uniform(&seed, -2.0, 2.0);
            b->places[b->n] = 2 * i + 1; /* rising within the bag */
        }
    }
    b->unique = 0;
    for (int64_t row = 0; row < ROWS; row++) {
        for (size_t i = 0; i < b->n; i++) {
            if (b->indices[i] == row) {
                b->rows[b->unique++] = row;
                break;
            }
        }
    }
    for (size_t i = 0; i < b->n; i++)
        for (b->inverse[i] = 0; b->rows[b->inverse[i]] != b->indices[i]; b->inverse[i]++)
            ;
}

/* Trainer @trainer's lookup of @step (an evaluation with @eval) on @table,
 * its reply appended to @blob. */
static int run_lookup(ember_shard_t *table, const scenario_t *sc, uint32_t trainer, uint64_t step,
                      int eval, blob_t *blob)
{
    batch_t b;
    make_batch(&b, 1000003ull * step + 7919ull * trainer + (uint64_t)eval * 17);
    uint32_t flags = (sc->max_mode ? EMBER_LOOKUP_MAX : 0) |
                     (sc->weighted ? EMBER_LOOKUP_WEIGHTS : 0) | (eval ? EMBER_LOOKUP_EVAL : 0);
    ember_wire_lookup_t lookup = {.head = {.table_id = 1,
                                           .trainer = trainer,
                                           .step = step,
                                           .flags = flags,
                                           .bags = BAGS,
                                           .unique = (uint32_t)b.unique,
                                           .indices = (uint32_t)b.n},
                                  .counts = b.counts,
                                  .rows = b.rows,
                                  .inverse = b.inverse,
                                  .weights = sc->weighted ? b.weights : NULL,
                                  .places = sc->max_mode ? b.places : NULL};
    static uint8_t message[1 << 16];
    static float out[2 * BAGS * 64];
    char err[256];
    ember_wire_lookup_view_t view;
    ember_wire_lookup_pack(&lookup, message);
    CHECK(ember_wire_lookup_unpack(message, ember_wire_lookup_size(&lookup.head), &view, err,
                                   sizeof(err)) == EMBER_OK,
          "unpack: %s", err);
    CHECK(ember_shard_lookup(table, &view, out, err, sizeof(err)) == EMBER_OK, "lookup: %s", err);
    CHECK(blob_add(blob, out, (sc->max_mode ? 2 : 1) * BAGS * sc->dim * sizeof(float)), "memory");
    return 0;
}

static int run_grad(ember_shard_t *table, const scenario_t *sc, uint32_t trainer, uint64_t step)
{
    static float grad[BAGS * 64];
    uint64_t seed = 31ull * step + trainer + 5;
    for (size_t i = 0; i < BAGS * sc->dim; i++)
        grad[i] = (float)test_uniform(&seed, -1.0, 1.0);
    ember_wire_grad_view_t view = {.head = {.table_id = 1,
                                            .trainer = trainer,
                                            .step = step,
                                            .bags = BAGS,
                                            .flags = EMBER_GRAD_APPLY},
                                   .grad = (const uint8_t *)grad,
                                   .grad_bytes = BAGS * sc->dim * sizeof(float)};
    char err[256];
    int applied = 0;
    CHECK(ember_shard_grad(table, &view, &applied, err, sizeof(err)) == EMBER_OK, "grad: %s", err);
    return 0;
}

/* One step: sync, every trainer's lookup then their gradients, arriving
 * in an order that changes with the step; async, each lookup and its
 * gradient in turn.  An evaluation lookup between. */
static int run_step(ember_shard_t *table, const scenario_t *sc, uint64_t step, blob_t *blob)
{
    const int sync = sc->consistency == EMBER_SYNC;
    for (uint32_t t = 0; t < sc->trainers; t++) {
        CHECK(run_lookup(table, sc, t, step, 0, blob) == 0, "trainer %u", t);
        if (!sync)
            CHECK(run_grad(table, sc, t, step) == 0, "trainer %u", t);
    }
    CHECK(run_lookup(table, sc, 0, step, 1, blob) == 0, "evaluation");
    for (uint32_t k = 0; sync && k < sc->trainers; k++) {
        uint32_t t = (uint32_t)((k + step) % sc->trainers);
        CHECK(run_grad(table, sc, step % 2 ? sc->trainers - 1 - t : t, step) == 0, "grad");
    }
    return 0;
}

/* The rows and every optimizer state array, as a snapshot has them. */
static int add_state(ember_shard_t *table, blob_t *blob)
{
    ember_shard_snapshot_t *snap = NULL;
    ember_st_tensor_t tensors[EMBER_TABLE_STATE_TENSORS];
    ember_st_meta_t meta[EMBER_TABLE_STATE_META];
    size_t ntensors = 0, nmeta = 0;
    char err[256];
    CHECK(ember_shard_snapshot_take(table, &snap, err, sizeof(err)) == EMBER_OK, "snapshot: %s",
          err);
    CHECK(ember_shard_snapshot_tensors(snap, tensors, &ntensors, EMBER_TABLE_STATE_TENSORS, meta,
                                       &nmeta, EMBER_TABLE_STATE_META) == EMBER_OK,
          "tensors");
    for (size_t i = 0; i < ntensors; i++)
        CHECK(blob_add(blob, tensors[i].data, tensors[i].nbytes), "memory");
    for (size_t i = 0; i < nmeta; i++)
        CHECK(blob_add(blob, meta[i].value, strlen(meta[i].value)), "memory");
    ember_shard_snapshot_free(snap);
    return 0;
}

static int run_job(const scenario_t *sc, unsigned threads, blob_t *blob)
{
    char err[256];
    ember_workers_t *pool = NULL;
    CHECK(ember_workers_create(threads, "test", &pool, err, sizeof(err)) == EMBER_OK, "pool: %s",
          err);
    ember_shard_t *table = make_table(sc, err, sizeof(err));
    CHECK(table, "create: %s", err);
    CHECK(ember_shard_set_workers(table, pool) == EMBER_OK, "set_workers");
    for (uint64_t step = 0; step < STEPS; step++)
        CHECK(run_step(table, sc, step, blob) == 0, "%u threads, step %llu", threads,
              (unsigned long long)step);
    CHECK(add_state(table, blob) == 0, "state");
    ember_shard_destroy(table);
    ember_workers_destroy(pool);
    return 0;
}

/* The job on 1 thread, then on each other count: the same bytes. */
static int same_bits(const scenario_t *given)
{
    static const unsigned counts[] = {1, 2, 3, 4, 8};
    scenario_t scenario = *given;
    const scenario_t *sc = &scenario;
    if (!scenario.dim)
        scenario.dim = 9;
    blob_t first = {0};
    CHECK(run_job(sc, 1, &first) == 0, "1 thread");
    for (size_t c = 1; c < sizeof(counts) / sizeof(counts[0]); c++) {
        blob_t other = {0};
        CHECK(run_job(sc, counts[c], &other) == 0, "%u threads", counts[c]);
        CHECK(other.length == first.length, "%u threads: %zu bytes, 1 thread %zu", counts[c],
              other.length, first.length);
        for (size_t i = 0; i < first.length; i++)
            CHECK(first.bytes[i] == other.bytes[i], "%u threads: byte %zu of %zu differs",
                  counts[c], i, first.length);
        free(other.bytes);
    }
    free(first.bytes);
    return 0;
}

/* A scenario; dim 9 unless it says. */
#define SCENARIO(...) same_bits(&(scenario_t){__VA_ARGS__})

static int case_sum_sgd(void)
{
    return SCENARIO(.opt = EMBER_OPT_SGD, .consistency = EMBER_SYNC, .trainers = 2);
}
static int case_weighted_adagrad(void)
{
    return SCENARIO(.opt = EMBER_OPT_ADAGRAD, .weighted = 1, .consistency = EMBER_SYNC,
                    .trainers = 3, .reduce = EMBER_REDUCE_MEAN, .dim = 16);
}
static int case_max_adam(void)
{
    return SCENARIO(.opt = EMBER_OPT_ADAM, .max_mode = 1, .consistency = EMBER_SYNC, .trainers = 2);
}
static int case_max_adam_table_steps(void)
{
    return SCENARIO(.opt = EMBER_OPT_ADAM, .adam_table_steps = 1, .max_mode = 1,
                    .consistency = EMBER_SYNC, .trainers = 3, .dim = 5);
}
static int case_fp16_rowwise(void)
{
    return SCENARIO(.opt = EMBER_OPT_ROWWISE_ADAGRAD, .dtype = EMBER_DTYPE_F16,
                    .consistency = EMBER_SYNC, .trainers = 3);
}
static int case_fp16_max_sgd(void)
{
    return SCENARIO(.opt = EMBER_OPT_SGD, .dtype = EMBER_DTYPE_F16, .max_mode = 1,
                    .consistency = EMBER_SYNC, .trainers = 2, .dim = 33);
}
static int case_async_weighted_adam(void)
{
    return SCENARIO(.opt = EMBER_OPT_ADAM, .weighted = 1, .consistency = EMBER_ASYNC,
                    .trainers = 3);
}
static int case_async_fp16_adagrad(void)
{
    return SCENARIO(.opt = EMBER_OPT_ADAGRAD, .dtype = EMBER_DTYPE_F16, .consistency = EMBER_ASYNC,
                    .trainers = 2);
}

/* Four tables' lookups (sum, weighted, max, sum on fp16 rows) in one
 * LOOKUPS of trainer 0; @bad_row: table 2's rows end with one past the
 * table (it refuses). */
typedef struct {
    batch_t batch[4];
    ember_wire_lookup_t lookup[4];
    ember_wire_lookups_view_t view; /* into packed */
    uint8_t packed[1 << 18];
} multi_t;

static int multi_build(multi_t *m, int bad_row, char *err, size_t err_length)
{
    static const uint32_t flags[4] = {0, EMBER_LOOKUP_WEIGHTS, EMBER_LOOKUP_MAX, 0};
    uint8_t *packed = m->packed;
    size_t at = sizeof(ember_msg_lookups_t);
    for (size_t k = 0; k < 4; k++) {
        batch_t *b = &m->batch[k];
        make_batch(b, 77 + k);
        if (bad_row && k == 2)
            b->rows[b->unique - 1] = ROWS; /* still sorted: out of range */
        m->lookup[k] = (ember_wire_lookup_t){.head = {.table_id = (uint32_t)k,
                                                      .trainer = 0,
                                                      .step = 0,
                                                      .flags = flags[k],
                                                      .bags = BAGS,
                                                      .unique = (uint32_t)b->unique,
                                                      .indices = (uint32_t)b->n},
                                             .counts = b->counts,
                                             .rows = b->rows,
                                             .inverse = b->inverse,
                                             .weights = k == 1 ? b->weights : NULL,
                                             .places = k == 2 ? b->places : NULL};
        ember_wire_lookup_pack_padded(&m->lookup[k], packed + at);
        at += ember_wire_lookup_padded_size(&m->lookup[k].head);
    }
    ember_msg_lookups_t head = {.trainer = 0, .count = 4, .step = 0};
    memcpy(packed, &head, sizeof(head));
    return ember_wire_lookups_unpack(packed, at, &m->view, err, err_length) == EMBER_OK ? 0 : 1;
}

/* The LOOKUPS on four tables over @threads threads: the reply and then
 * the refusal's text into @blob; after the refusal no context is left (the
 * good request is taken again). */
static int multi_run(unsigned threads, blob_t *blob)
{
    static multi_t good, bad;
    static float out[1 << 16];
    char err[256];
    ember_workers_t *pool = NULL;
    ember_shard_t *tables[4] = {NULL};
    CHECK(multi_build(&good, 0, err, sizeof(err)) == 0 &&
                  multi_build(&bad, 1, err, sizeof(err)) == 0,
          "LOOKUPS: %s", err);
    CHECK(ember_workers_create(threads, "test", &pool, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (uint32_t k = 0; k < 4; k++) {
        scenario_t sc = {.opt = EMBER_OPT_SGD,
                         .trainers = 1,
                         .dim = 9,
                         .table_id = k,
                         .dtype = k == 3 ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32};
        CHECK((tables[k] = make_table(&sc, err, sizeof(err))), "create: %s", err);
        CHECK(ember_shard_set_workers(tables[k], pool) == EMBER_OK, "set_workers");
    }
    size_t reply_bytes;
    CHECK(ps_multi_lookups_out_bytes(tables, &good.view, 1, &reply_bytes) <= sizeof(out), "room");
    CHECK(ps_multi_lookups(tables, &good.view, 1, out, &reply_bytes, err, sizeof(err)) == EMBER_OK,
          "%u threads: %s", threads, err);
    CHECK(blob_add(blob, out, reply_bytes), "memory");
    for (uint32_t k = 0; k < 4; k++)
        ember_shard_drop_trainer(tables[k], 0);
    CHECK(ps_multi_lookups(tables, &bad.view, 1, out, &reply_bytes, err, sizeof(err)) ==
                  EMBER_ERR_OUT_OF_RANGE,
          "%u threads: the bad row was taken", threads);
    CHECK(strstr(err, "table threads: trainer 0 step 0: index 300 is out of range"), "%s", err);
    CHECK(blob_add(blob, err, strlen(err)), "memory");
    CHECK(ps_multi_lookups(tables, &good.view, 1, out, &reply_bytes, err, sizeof(err)) == EMBER_OK,
          "%u threads: a context was left: %s", threads, err);
    for (uint32_t k = 0; k < 4; k++)
        ember_shard_destroy(tables[k]);
    ember_workers_destroy(pool);
    return 0;
}

static int case_lookups_tables(void)
{
    static const unsigned counts[] = {1, 2, 3, 4, 8};
    blob_t first = {0};
    /* The default grain: each table's lookup too small to split itself,
     * so the tables are the tasks. */
    CHECK(ember_config_set("EMBER_PS_GRAIN", "65536") == EMBER_OK, "EMBER_PS_GRAIN");
    CHECK(multi_run(1, &first) == 0, "1 thread");
    for (size_t c = 1; c < sizeof(counts) / sizeof(counts[0]); c++) {
        blob_t other = {0};
        CHECK(multi_run(counts[c], &other) == 0, "%u threads", counts[c]);
        CHECK(other.length == first.length && memcmp(other.bytes, first.bytes, first.length) == 0,
              "%u threads: another reply or refusal than 1 thread's", counts[c]);
        free(other.bytes);
    }
    free(first.bytes);
    return 0;
}

/* Each task adds its index + 1 to its own counter. */
static void count_task(void *arg, unsigned task)
{
    atomic_fetch_add((_Atomic unsigned *)arg + task, task + 1);
}

/* Every task of every job runs once, whatever the pool and the count. */
static int case_pool(void)
{
    static _Atomic unsigned hits[64];
    char err[256];
    ember_workers_t *pool = NULL;
    CHECK(ember_workers_create(0, "t", &pool, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM,
          "0 threads accepted");
    CHECK(strstr(err, "outside [1, 1024]"), "message: %s", err);
    CHECK(ember_workers_create(EMBER_WORKERS_MAX + 1, "t", &pool, err, sizeof(err)) ==
                  EMBER_ERR_INVALID_PARAM,
          "too many threads accepted");
    for (unsigned threads = 1; threads <= 5; threads += 2) {
        CHECK(ember_workers_create(threads, "t", &pool, err, sizeof(err)) == EMBER_OK, "%s", err);
        CHECK(ember_workers_threads(pool) == threads, "threads");
        for (unsigned job = 0; job < 2000; job++) {
            unsigned tasks = job % 64;
            for (unsigned k = 0; k < 64; k++)
                atomic_store(&hits[k], 0);
            ember_workers_run(pool, tasks, count_task, hits);
            for (unsigned k = 0; k < 64; k++)
                CHECK(atomic_load(&hits[k]) == (k < tasks ? k + 1 : 0),
                      "%u threads, job %u: task %u ran %u", threads, job, k, atomic_load(&hits[k]));
        }
        ember_workers_destroy(pool);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"sum_sgd", case_sum_sgd},
            {"weighted_adagrad", case_weighted_adagrad},
            {"max_adam", case_max_adam},
            {"max_adam_table_steps", case_max_adam_table_steps},
            {"fp16_rowwise", case_fp16_rowwise},
            {"fp16_max_sgd", case_fp16_max_sgd},
            {"async_weighted_adam", case_async_weighted_adam},
            {"async_fp16_adagrad", case_async_fp16_adagrad},
            {"lookups_tables", case_lookups_tables},
            {"pool", case_pool},
    };
    /* Split whatever can be: these requests are far below the default. */
    if (ember_config_set("EMBER_PS_GRAIN", "1") != EMBER_OK)
        return 1;
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
