/*
 * tests/engine/test_table_cow: a checkpoint's copy-on-write snapshot
 * (engine/ps/table_cow.c, ember_shard_snapshot_mark) writes exactly the
 * state at its step, whatever changes during the write.
 *
 * Every case trains a shard a few sync steps, writes the reference file
 * of that state (a full copy, ember_shard_snapshot_take), then marks a
 * snapshot and writes it (ember_st_write_filled over
 * ember_shard_snapshot_read, as the PS's writer does) while the table
 * changes, and compares the two files byte for byte; it also checks that
 * the changes did happen under the write (chunks copied aside > 0) and
 * that the live table ends exactly as a twin changed the same way with
 * no snapshot (the copies aside disturb nothing).
 *
 *   sgd, sgd_momentum (momentum, dampening: its U8 "started"), adagrad,
 *   rowwise_adagrad, adam (per-row U32 steps), adam_table_steps, fp16_sgd:
 *   the write reads in pieces of odd sizes (chunks cut anywhere) and
 *   between pieces the table takes a training step (about a third of its
 *   rows, the first and last ones always) and a row write (ember_shard_load)
 *   across a chunk's edge, and of the last row; a 64-wide table (a row a
 *   chunk) and a 5-wide one (several rows a chunk).
 *   shard_of_3: the same on shard 1 of 3 (row writes by global row).
 *   threads: the steps run on a thread of their own, each split over a
 *   pool of 3 workers (EMBER_PS_GRAIN 1), while the main thread writes.
 *   restore: during the write the table is restored from another file
 *   (every row and state changes); afterwards it equals that file.
 *   give_up: a write that fails part-way leaves nothing owed; the next
 *   snapshot, written under changes, is again exact.
 */
#define _GNU_SOURCE
#include "common/workers.h"
#include "engine/io/safetensors.h"
#include "engine/ops/optimizer.h"
#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include <ember/config.h>
#include <ember/log.h>

#include "test_util.h"
#include "wire_views.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

enum {
    ROWS = 1000, /* global rows */
    TRAIN = 3,   /* steps before the snapshot */
    MAX_DIM = 64
};

typedef struct {
    ember_opt_kind_t kind;
    ember_dtype_t dtype;
    uint32_t dim, shard, shards;
    int sgd_momentum, adam_table_steps;
} setup_t;

static char dir[64];

static ember_shard_t *make_shard(const setup_t *s)
{
    ember_msg_table_create_t spec;
    ember_shard_t *table = NULL;
    char err[256];

    memset(&spec, 0, sizeof(spec));
    spec.table_id = 1;
    spec.shard = s->shard;
    spec.num_shards = s->shards;
    spec.trainers = 1;
    spec.rows = ROWS;
    spec.dim = s->dim;
    spec.consistency = EMBER_SYNC;
    spec.sparse_reduce = EMBER_REDUCE_SUM;
    spec.init = EMBER_INIT_NORMAL;
    spec.seed = 5;
    spec.dtype = s->dtype;
    ember_opt_config_default(s->kind, 0.05f, &spec.optimizer);
    if (s->sgd_momentum) {
        spec.optimizer.momentum = 0.9f;
        spec.optimizer.dampening = 0.1f;
    }
    if (s->kind == EMBER_OPT_ADAGRAD)
        spec.optimizer.lr_decay = 0.01f;
    if (s->kind == EMBER_OPT_ADAM)
        spec.optimizer.adam_row_step = !s->adam_table_steps;
    snprintf(spec.name, sizeof(spec.name), "cow");
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK) {
        fprintf(stderr, "ember_shard_create: %s\n", err);
        return NULL;
    }
    return table;
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t state = a * 1000003u + b;
    return (uint64_t)(test_uniform(&state, 0, 1) * 1e9);
}

/* Step @step touches the shard's first and last rows and about a third
 * of the others. */
static int touched(const setup_t *s, uint64_t step, int64_t row)
{
    return row < 3 * (int64_t)s->shards || row >= ROWS - 3 * (int64_t)s->shards ||
           mix(step, (uint64_t)row) % 3 == 0;
}

/* One sync step of the shard: a bag of each touched row, its gradient
 * drawn from (step, row). */
static int train_step(ember_shard_t *table, const setup_t *s, uint64_t step)
{
    static int64_t rows[ROWS], inverse[ROWS];
    static uint32_t counts[ROWS];
    static float out[ROWS * MAX_DIM], grad[ROWS * MAX_DIM];
    static _Alignas(8) uint8_t message[ROWS * 64 + 4096];
    char err[256];
    uint32_t n = 0;

    for (int64_t row = s->shard; row < ROWS; row += s->shards)
        if (touched(s, step, row)) {
            rows[n] = row;
            inverse[n] = n;
            counts[n] = 1;
            uint64_t state = mix(step, (uint64_t)row);
            for (uint32_t d = 0; d < s->dim; d++)
                grad[n * s->dim + d] = (float)test_uniform(&state, -1, 1);
            n++;
        }
    ember_wire_lookup_t lookup = {
            .head = {.table_id = 1, .step = step, .bags = n, .unique = n, .indices = n},
            .counts = counts,
            .rows = rows,
            .inverse = inverse};
    ember_wire_lookup_view_t view;
    CHECK(ember_wire_lookup_size(&lookup.head) <= sizeof(message), "lookup too big");
    ember_wire_lookup_pack(&lookup, message);
    CHECK(ember_wire_lookup_unpack(message, ember_wire_lookup_size(&lookup.head), &view, err,
                                   sizeof(err)) == EMBER_OK,
          "unpack: %s", err);
    CHECK(ember_shard_lookup(table, &view, out, err, sizeof(err)) == EMBER_OK, "lookup: %s", err);
    ember_msg_grad_t msg = {.table_id = 1, .step = step, .flags = EMBER_GRAD_APPLY, .bags = n};
    ember_wire_grad_view_t g = test_grad_view(&msg, grad, (size_t)n * s->dim * sizeof(float));
    int applied = 0;
    CHECK(ember_shard_grad(table, &g, &applied, err, sizeof(err)) == EMBER_OK, "grad: %s", err);
    CHECK(applied, "step %llu not applied", (unsigned long long)step);
    return 0;
}

/* Change number @k: a step, then a write of 3 global rows across a chunk's
 * edge (where depends on k) and every 4th time of the last row. */
static int change(ember_shard_t *table, const setup_t *s, unsigned k)
{
    float values[3 * MAX_DIM];
    char err[256];
    CHECK(train_step(table, s, ember_shard_next_step(table)) == 0, "change %u", k);
    uint64_t state = k;
    for (size_t i = 0; i < 3 * (size_t)s->dim; i++)
        values[i] = (float)test_uniform(&state, -2, 2);
    const int64_t first = (int64_t)((k * 37u) % 120u) * 8 + 7;
    CHECK(ember_shard_load(table, first, 3, values, err, sizeof(err)) == EMBER_OK, "load: %s", err);
    if (k % 4 == 3)
        CHECK(ember_shard_load(table, ROWS - 1, 1, values, err, sizeof(err)) == EMBER_OK,
              "load: %s", err);
    return 0;
}

/* The shard's state now as a file, through a full copy (the reference). */
static int write_copy(ember_shard_t *table, const char *path)
{
    ember_shard_snapshot_t *snap = NULL;
    ember_st_tensor_t t[EMBER_TABLE_STATE_TENSORS];
    ember_st_meta_t meta[EMBER_TABLE_STATE_META];
    size_t nt = 0, nm = 0;
    char err[256];
    CHECK(ember_shard_snapshot_take(table, &snap, err, sizeof(err)) == EMBER_OK, "take: %s", err);
    CHECK(ember_shard_snapshot_tensors(snap, t, &nt, EMBER_TABLE_STATE_TENSORS, meta, &nm,
                                       EMBER_TABLE_STATE_META) == EMBER_OK,
          "tensors");
    ember_status_t status = ember_st_write_durable(path, t, nt, meta, nm, NULL);
    ember_shard_snapshot_free(snap);
    CHECK(status == EMBER_OK, "write %s", path);
    return 0;
}

/* What the marked write's fill does between its pieces. */
typedef struct writer writer_t;
typedef int (*between_fn)(writer_t *w);

struct writer {
    ember_shard_snapshot_t *snap;
    const setup_t *s;
    ember_shard_t *table, *twin; /* twin: changed alike, no snapshot */
    size_t piece;                /* bytes read at a time */
    between_fn between;          /* NULL: nothing */
    unsigned changes;
    unsigned fail_after; /* pieces before the fill fails (0: never) */
    unsigned pieces;
    const ember_st_file_t *restore_from;
};

static ember_status_t fill(void *arg, size_t tensor, uint64_t offset, void *buf, size_t length,
                           char *err, size_t err_length)
{
    writer_t *w = arg;
    for (size_t at = 0; at < length; at += w->piece) {
        const size_t n = length - at < w->piece ? length - at : w->piece;
        if (w->fail_after && ++w->pieces >= w->fail_after)
            return ember_status_text(err, err_length, EMBER_ERR_CANCELED, "given up (the test)");
        EMBER_CHECK(ember_shard_snapshot_read(w->snap, tensor, offset + at, (char *)buf + at, n,
                                              err, err_length));
        if (w->between && w->between(w) != 0)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "a change under the write failed");
    }
    return EMBER_OK;
}

static int change_both(writer_t *w)
{
    unsigned k = w->changes++;
    if (change(w->table, w->s, k) != 0)
        return 1;
    return w->twin ? change(w->twin, w->s, k) : 0;
}

/* Mark, then write the snapshot through @w; *kept_p: what it cost. */
static int write_marked(writer_t *w, const char *path, ember_status_t expect,
                        ember_shard_snapshot_kept_t *kept_p)
{
    ember_st_tensor_t t[EMBER_TABLE_STATE_TENSORS];
    ember_st_meta_t meta[EMBER_TABLE_STATE_META];
    size_t nt = 0, nm = 0;
    char err[256];
    CHECK(ember_shard_snapshot_mark(w->table, &w->snap, err, sizeof(err)) == EMBER_OK, "mark: %s",
          err);
    CHECK(ember_shard_snapshot_marked(w->snap), "not marked");
    CHECK(ember_shard_snapshot_tensors(w->snap, t, &nt, EMBER_TABLE_STATE_TENSORS, meta, &nm,
                                       EMBER_TABLE_STATE_META) == EMBER_OK,
          "tensors");
    for (size_t i = 0; i < nt; i++)
        CHECK(t[i].data == NULL, "tensor %s has data: a marked snapshot holds no copy", t[i].name);
    ember_status_t status = ember_st_write_filled(path, t, nt, meta, nm, fill, w, NULL);
    ember_shard_snapshot_end(w->snap, kept_p);
    CHECK(!ember_shard_snapshot_marked(w->snap), "still marked after its end");
    CHECK(status == expect, "write %s: %s, expected %s", path, ember_status_string(status),
          ember_status_string(expect));
    return 0;
}

static int same_files(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    CHECK(fa && fb, "open %s / %s", a, b);
    size_t at = 0;
    int ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        if (ca != cb)
            break;
        at++;
    } while (ca != EOF);
    fclose(fa);
    fclose(fb);
    CHECK(ca == cb, "%s and %s differ at byte %zu", a, b, at);
    return 0;
}

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s.safetensors", dir, name);
}

/* The marked write under changes equals the copy; the table its twin. */
static int run_changed(const setup_t *s, size_t piece)
{
    char ref[128], cow[128], live[128], twin_file[128];
    path_of(ref, sizeof(ref), "ref");
    path_of(cow, sizeof(cow), "cow");
    path_of(live, sizeof(live), "live");
    path_of(twin_file, sizeof(twin_file), "twin");
    ember_shard_t *table = make_shard(s), *twin = make_shard(s);
    CHECK(table && twin, "tables");
    for (uint64_t step = 0; step < TRAIN; step++)
        CHECK(train_step(table, s, step) == 0 && train_step(twin, s, step) == 0, "train");
    CHECK(write_copy(table, ref) == 0, "reference");
    writer_t w = {.s = s, .table = table, .twin = twin, .piece = piece, .between = change_both};
    ember_shard_snapshot_kept_t kept;
    CHECK(write_marked(&w, cow, EMBER_OK, &kept) == 0, "marked write");
    CHECK(w.changes > 3, "only %u changes under the write", w.changes);
    CHECK(kept.chunks > 0 && kept.bytes > 0, "nothing copied aside under %u changes", w.changes);
    CHECK(same_files(ref, cow) == 0, "the marked write is not the state at its step");
    CHECK(write_copy(table, live) == 0 && write_copy(twin, twin_file) == 0, "live");
    CHECK(same_files(live, twin_file) == 0, "the table's changes differ from its twin's");
    fprintf(stderr, "%u changes under the write, %llu chunks (%llu bytes) copied aside\n",
            w.changes, (unsigned long long)kept.chunks, (unsigned long long)kept.bytes);
    ember_shard_snapshot_free(w.snap);
    ember_shard_destroy(table);
    ember_shard_destroy(twin);
    unlink(ref), unlink(cow), unlink(live), unlink(twin_file);
    return 0;
}

/* Both widths: a row a chunk (64 floats) and several (5). */
static int run_widths(setup_t s)
{
    const uint32_t dims[] = {64, 5};
    for (size_t i = 0; i < 2; i++) {
        s.dim = dims[i];
        CHECK(run_changed(&s, 4000 + 13 * i) == 0, "dim %u", s.dim);
        CHECK(run_changed(&s, 333) == 0, "dim %u, small pieces", s.dim);
    }
    return 0;
}

static int case_sgd(void)
{
    return run_widths((setup_t){.kind = EMBER_OPT_SGD, .dtype = EMBER_DTYPE_F32, .shards = 1});
}

static int case_sgd_momentum(void)
{
    return run_widths((setup_t){
            .kind = EMBER_OPT_SGD, .dtype = EMBER_DTYPE_F32, .shards = 1, .sgd_momentum = 1});
}

static int case_adagrad(void)
{
    return run_widths((setup_t){.kind = EMBER_OPT_ADAGRAD, .dtype = EMBER_DTYPE_F32, .shards = 1});
}

static int case_rowwise_adagrad(void)
{
    return run_widths(
            (setup_t){.kind = EMBER_OPT_ROWWISE_ADAGRAD, .dtype = EMBER_DTYPE_F32, .shards = 1});
}

static int case_adam(void)
{
    return run_widths((setup_t){.kind = EMBER_OPT_ADAM, .dtype = EMBER_DTYPE_F32, .shards = 1});
}

static int case_adam_table_steps(void)
{
    return run_widths((setup_t){
            .kind = EMBER_OPT_ADAM, .dtype = EMBER_DTYPE_F32, .shards = 1, .adam_table_steps = 1});
}

static int case_fp16_sgd(void)
{
    return run_widths((setup_t){
            .kind = EMBER_OPT_SGD, .dtype = EMBER_DTYPE_F16, .shards = 1, .sgd_momentum = 1});
}

static int case_shard_of_3(void)
{
    return run_widths((setup_t){
            .kind = EMBER_OPT_ADAGRAD, .dtype = EMBER_DTYPE_F32, .shard = 1, .shards = 3});
}

/* --- threads: the changes on a thread of their own ------------------------ */

typedef struct {
    ember_shard_t *table;
    const setup_t *s;
    atomic_int stop;
    atomic_uint steps; /* taken since the mark */
    int failed;
} trainer_t;

static void *trainer_main(void *arg)
{
    trainer_t *t = arg;
    while (!atomic_load(&t->stop) && !t->failed) {
        t->failed = train_step(t->table, t->s, ember_shard_next_step(t->table)) != 0;
        atomic_fetch_add(&t->steps, 1);
    }
    return NULL;
}

/* The writer lets the trainer run between its pieces. */
static int yield_to_trainer(writer_t *w)
{
    (void)w;
    usleep(200);
    return 0;
}

static int case_threads(void)
{
    const setup_t s = {.kind = EMBER_OPT_ADAM, .dtype = EMBER_DTYPE_F32, .dim = 64, .shards = 1};
    char ref[128], cow[128], live[128], twin_file[128], err[256];
    path_of(ref, sizeof(ref), "ref");
    path_of(cow, sizeof(cow), "cow");
    path_of(live, sizeof(live), "live");
    path_of(twin_file, sizeof(twin_file), "twin");
    CHECK(ember_config_set("EMBER_PS_GRAIN", "1") == EMBER_OK, "EMBER_PS_GRAIN");
    ember_workers_t *pool = NULL;
    CHECK(ember_workers_create(3, "cow", &pool, err, sizeof(err)) == EMBER_OK, "pool: %s", err);
    ember_shard_t *table = make_shard(&s), *twin = make_shard(&s);
    CHECK(table && twin, "tables");
    CHECK(ember_shard_set_workers(table, pool) == EMBER_OK, "set_workers");
    for (uint64_t step = 0; step < TRAIN; step++)
        CHECK(train_step(table, &s, step) == 0 && train_step(twin, &s, step) == 0, "train");
    CHECK(write_copy(table, ref) == 0, "reference");

    trainer_t t = {.table = table, .s = &s};
    writer_t w = {.s = &s, .table = table, .piece = 1000, .between = yield_to_trainer};
    ember_shard_snapshot_kept_t kept;
    ember_st_tensor_t tensors[EMBER_TABLE_STATE_TENSORS];
    ember_st_meta_t meta[EMBER_TABLE_STATE_META];
    size_t nt = 0, nm = 0;
    pthread_t thread;
    /* Marked before the trainer starts, as the PS marks at a boundary. */
    CHECK(ember_shard_snapshot_mark(table, &w.snap, err, sizeof(err)) == EMBER_OK, "mark: %s", err);
    CHECK(ember_shard_snapshot_tensors(w.snap, tensors, &nt, EMBER_TABLE_STATE_TENSORS, meta, &nm,
                                       EMBER_TABLE_STATE_META) == EMBER_OK,
          "tensors");
    CHECK(pthread_create(&thread, NULL, trainer_main, &t) == 0, "thread");
    ember_status_t status = ember_st_write_filled(cow, tensors, nt, meta, nm, fill, &w, NULL);
    atomic_store(&t.stop, 1);
    pthread_join(thread, NULL);
    ember_shard_snapshot_end(w.snap, &kept);
    const unsigned steps = atomic_load(&t.steps);
    CHECK(status == EMBER_OK && !t.failed, "the write under a training thread: %s, trainer %s",
          ember_status_string(status), t.failed ? "failed" : "ok");
    CHECK(steps > 0 && kept.chunks > 0, "%u steps and %llu chunks copied aside under the write",
          steps, (unsigned long long)kept.chunks);
    CHECK(same_files(ref, cow) == 0, "the marked write is not the state at its step");
    for (unsigned k = 0; k < steps; k++)
        CHECK(train_step(twin, &s, ember_shard_next_step(twin)) == 0, "twin");
    CHECK(write_copy(table, live) == 0 && write_copy(twin, twin_file) == 0, "live");
    CHECK(same_files(live, twin_file) == 0, "the table's steps differ from its twin's");
    fprintf(stderr, "%u steps under the write, %llu chunks copied aside\n", steps,
            (unsigned long long)kept.chunks);
    ember_shard_snapshot_free(w.snap);
    ember_shard_destroy(table);
    ember_shard_destroy(twin);
    ember_workers_destroy(pool);
    unlink(ref), unlink(cow), unlink(live), unlink(twin_file);
    return 0;
}

/* --- restore and give_up -------------------------------------------------- */

static int restore_once(writer_t *w)
{
    char err[512];
    if (!w->restore_from)
        return 0;
    const ember_st_file_t *files[1] = {w->restore_from};
    const char *names[1] = {"other"};
    CHECK(ember_shard_restore(w->table, files, names, 1, err, sizeof(err)) == EMBER_OK,
          "restore: %s", err);
    w->restore_from = NULL;
    w->changes++;
    return 0;
}

static int case_restore(void)
{
    const setup_t s = {.kind = EMBER_OPT_ADAGRAD, .dtype = EMBER_DTYPE_F32, .dim = 64, .shards = 1};
    char ref[128], cow[128], live[128], other[128], err[256];
    path_of(ref, sizeof(ref), "ref");
    path_of(cow, sizeof(cow), "cow");
    path_of(live, sizeof(live), "live");
    path_of(other, sizeof(other), "other");
    ember_shard_t *table = make_shard(&s), *twin = make_shard(&s);
    CHECK(table && twin, "tables");
    for (uint64_t step = 0; step < TRAIN; step++)
        CHECK(train_step(table, &s, step) == 0 && train_step(twin, &s, step) == 0, "train");
    for (unsigned k = 0; k < 2; k++) /* the other state: two changes on */
        CHECK(change(twin, &s, k) == 0, "twin");
    CHECK(write_copy(table, ref) == 0 && write_copy(twin, other) == 0, "files");
    ember_st_file_t *file = NULL;
    CHECK(ember_st_open(other, &file, err, sizeof(err)) == EMBER_OK, "open: %s", err);
    writer_t w = {
            .s = &s, .table = table, .piece = 2000, .between = restore_once, .restore_from = file};
    ember_shard_snapshot_kept_t kept;
    CHECK(write_marked(&w, cow, EMBER_OK, &kept) == 0, "marked write");
    CHECK(w.changes == 1 && kept.chunks > 0, "restored %u times, %llu chunks copied aside",
          w.changes, (unsigned long long)kept.chunks);
    CHECK(same_files(ref, cow) == 0, "the marked write is not the state at its step");
    CHECK(write_copy(table, live) == 0, "live");
    CHECK(same_files(live, other) == 0, "the restored table is not the file it came from");
    ember_st_close(file);
    ember_shard_snapshot_free(w.snap);
    ember_shard_destroy(table);
    ember_shard_destroy(twin);
    unlink(ref), unlink(cow), unlink(live), unlink(other);
    return 0;
}

static int case_give_up(void)
{
    const setup_t s = {.kind = EMBER_OPT_ADAM, .dtype = EMBER_DTYPE_F32, .dim = 5, .shards = 1};
    char ref[128], cow[128];
    path_of(ref, sizeof(ref), "ref");
    path_of(cow, sizeof(cow), "cow");
    ember_shard_t *table = make_shard(&s);
    CHECK(table, "table");
    for (uint64_t step = 0; step < TRAIN; step++)
        CHECK(train_step(table, &s, step) == 0, "train");
    writer_t w = {.s = &s, .table = table, .piece = 100, .between = change_both, .fail_after = 9};
    ember_shard_snapshot_kept_t kept;
    CHECK(write_marked(&w, cow, EMBER_ERR_CANCELED, &kept) == 0, "the write given up");
    CHECK(access(cow, F_OK) != 0, "a given-up write left %s", cow);
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", cow);
    CHECK(access(tmp, F_OK) != 0, "a given-up write left %s", tmp);
    /* Nothing owed now: changes copy nothing aside, the next write is exact. */
    CHECK(change(table, &s, 100) == 0, "change after");
    CHECK(write_copy(table, ref) == 0, "reference");
    w.fail_after = 0;
    w.pieces = 0;
    w.changes = 0;
    CHECK(write_marked(&w, cow, EMBER_OK, &kept) == 0, "the next write");
    CHECK(w.changes > 3 && kept.chunks > 0, "%u changes, %llu chunks copied aside", w.changes,
          (unsigned long long)kept.chunks);
    CHECK(same_files(ref, cow) == 0, "the write after a given-up one is not exact");
    ember_shard_snapshot_free(w.snap);
    ember_shard_destroy(table);
    unlink(ref), unlink(cow);
    return 0;
}

static int with_dir(int (*fn)(void))
{
    snprintf(dir, sizeof(dir), "/tmp/ember_cow_XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    int rc = fn();
    rmdir(dir);
    return rc;
}

#define CASE(name)                    \
    static int name##_in_dir(void)    \
    {                                 \
        return with_dir(case_##name); \
    }
CASE(sgd)
CASE(sgd_momentum)
CASE(adagrad)
CASE(rowwise_adagrad)
CASE(adam)
CASE(adam_table_steps)
CASE(fp16_sgd)
CASE(shard_of_3)
CASE(threads)
CASE(restore)
CASE(give_up)

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"sgd", sgd_in_dir},           {"sgd_momentum", sgd_momentum_in_dir},
            {"adagrad", adagrad_in_dir},   {"rowwise_adagrad", rowwise_adagrad_in_dir},
            {"adam", adam_in_dir},         {"adam_table_steps", adam_table_steps_in_dir},
            {"fp16_sgd", fp16_sgd_in_dir}, {"shard_of_3", shard_of_3_in_dir},
            {"threads", threads_in_dir},   {"restore", restore_in_dir},
            {"give_up", give_up_in_dir},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
