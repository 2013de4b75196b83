/*
 * tests/engine/test_table_state: a shard's state in checkpoint files
 * (engine/ps/table_state.c): snapshots written with ember_st_write, read back
 * with ember_st_open, restored by global row into other layouts.
 *
 *   sgd_momentum, sgd_dampening, adagrad, rowwise_adagrad, adam,
 *   adam_table_steps, fp16_sgd: tables of 1 and 3 shards trained a few sync
 *   steps through their lookups and gradients (every shard each step, each
 *   row's gradient a function of the step and the global row, so every
 *   layout computes the same bits), snapshotted, one file per shard (and one
 *   of another table, ignored), restored into fresh tables (other initial
 *   rows) of 1, 2 and 3 shards: every global row and state value and both
 *   step counts as the original's; then both trained on: bit-identical.
 *   refusals: a missing shard, a duplicated one, rows / dim / optimizer /
 *   settings that differ, a tensor's shape or dtype, metadata that is not a
 *   number or out of range, shards at different steps, no file with the
 *   table: each refused with its message, the target table unchanged.
 */
#include "engine/io/safetensors.h"
#include "engine/ops/optimizer.h"
#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include "test_util.h"
#include "wire_views.h"

#include <stdlib.h>
#include <unistd.h>

enum {
    ROWS = 23, /* a multiple of none of the layouts */
    DIM = 5,
    TRAIN = 4, /* steps before the snapshot */
    MORE = 3,  /* steps after the restore */
    MAX_SHARDS = 3,
    MAX_FILES = MAX_SHARDS + 2
};

typedef struct {
    ember_opt_config_t opt;
    ember_dtype_t dtype;
    int64_t rows;
    uint32_t dim;
} setup_t;

static char dir[64];

static ember_shard_t *make_shard(const setup_t *s, const char *name, uint32_t shard,
                                 uint32_t shards, uint64_t seed)
{
    ember_msg_table_create_t spec;
    ember_shard_t *table = NULL;
    char err[256];

    memset(&spec, 0, sizeof(spec));
    spec.table_id = 1;
    spec.shard = shard;
    spec.num_shards = shards;
    spec.trainers = 1;
    spec.rows = s->rows;
    spec.dim = s->dim;
    spec.consistency = EMBER_SYNC;
    spec.sparse_reduce = EMBER_REDUCE_SUM;
    spec.init = EMBER_INIT_NORMAL;
    spec.seed = seed;
    spec.dtype = s->dtype;
    spec.optimizer = s->opt;
    snprintf(spec.name, sizeof(spec.name), "%s", name);
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK) {
        fprintf(stderr, "ember_shard_create: %s\n", err);
        return NULL;
    }
    return table;
}

static int make_layout(const setup_t *s, uint32_t shards, uint64_t seed, ember_shard_t **tables)
{
    for (uint32_t k = 0; k < shards; k++)
        CHECK((tables[k] = make_shard(s, "t", k, shards, seed)) != NULL, "shard %u of %u", k,
              shards);
    return 0;
}

static void destroy_layout(ember_shard_t **tables, uint32_t shards)
{
    for (uint32_t k = 0; k < shards; k++)
        ember_shard_destroy(tables[k]);
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t state = a * 1000003u + b;
    return (uint64_t)(test_uniform(&state, 0, 1) * 1e9);
}

/* Step @step touches rows 0, 1, 2 (one on each shard of every layout) and
 * about half of the others. */
static int touched(uint64_t step, int64_t row)
{
    return row < 3 || mix(step, (uint64_t)row) % 2 == 0;
}

/* One sync step of shard @table: a bag for each of its touched rows, each
 * row's gradient drawn from (step, global row). */
static int train_step(ember_shard_t *table, uint32_t shard, uint32_t shards, uint64_t step)
{
    int64_t rows[ROWS], inverse[ROWS];
    uint32_t counts[ROWS];
    float out[ROWS * 8], grad[ROWS * 8];
    static _Alignas(8) uint8_t message[4096];
    const uint32_t dim = ember_shard_dim(table);
    char err[256];
    uint32_t n = 0;

    for (int64_t row = shard; row < ROWS; row += shards)
        if (touched(step, row)) {
            rows[n] = row;
            inverse[n] = n;
            counts[n] = 1;
            uint64_t state = mix(step, (uint64_t)row);
            for (uint32_t d = 0; d < dim; d++)
                grad[n * dim + d] = (float)test_uniform(&state, -1, 1);
            n++;
        }
    ember_wire_lookup_t lookup = {
            .head = {.table_id = 1, .step = step, .bags = n, .unique = n, .indices = n},
            .counts = counts,
            .rows = rows,
            .inverse = inverse};
    ember_wire_lookup_view_t view;
    ember_wire_lookup_pack(&lookup, message);
    CHECK(ember_wire_lookup_unpack(message, ember_wire_lookup_size(&lookup.head), &view, err,
                                   sizeof(err)) == EMBER_OK,
          "unpack: %s", err);
    CHECK(ember_shard_lookup(table, &view, out, err, sizeof(err)) == EMBER_OK, "lookup: %s", err);
    ember_msg_grad_t msg = {.table_id = 1, .step = step, .flags = EMBER_GRAD_APPLY, .bags = n};
    ember_wire_grad_view_t g = test_grad_view(&msg, grad, (size_t)n * dim * sizeof(float));
    int applied = 0;
    CHECK(ember_shard_grad(table, &g, &applied, err, sizeof(err)) == EMBER_OK, "grad: %s", err);
    CHECK(applied, "shard %u step %llu not applied", shard, (unsigned long long)step);
    return 0;
}

static int train(ember_shard_t **tables, uint32_t shards, uint64_t from, uint64_t to)
{
    for (uint64_t step = from; step < to; step++)
        for (uint32_t k = 0; k < shards; k++)
            if (train_step(tables[k], k, shards, step))
                return 1;
    return 0;
}

/* A layout's whole state by global row: each array's rows, the steps. */
typedef struct {
    size_t narrays;
    int64_t rows;
    char names[EMBER_TABLE_STATE_TENSORS][64];
    size_t row_bytes[EMBER_TABLE_STATE_TENSORS];
    uint8_t data[EMBER_TABLE_STATE_TENSORS][(ROWS + 1) * (DIM + 1) * 4];
    char opt_steps[32], step[32];
} global_t;

static const char *meta_value(const ember_st_meta_t *meta, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(meta[i].key, key) == 0)
            return meta[i].value;
    return "(missing)";
}

/* Shard @k's snapshot (in @snaps[k], taken now) into @g. */
static int gather_shard(ember_shard_t *table, uint32_t k, uint32_t shards,
                        ember_shard_snapshot_t **snap, global_t *g)
{
    ember_st_tensor_t t[EMBER_TABLE_STATE_TENSORS];
    ember_st_meta_t meta[EMBER_TABLE_STATE_META];
    size_t nt = 0, nm = 0;
    char err[256];
    CHECK(ember_shard_snapshot_take(table, snap, err, sizeof(err)) == EMBER_OK, "take: %s", err);
    CHECK(ember_shard_snapshot_step(*snap) == ember_shard_next_step(table), "snapshot step");
    CHECK(ember_shard_snapshot_tensors(*snap, t, &nt, EMBER_TABLE_STATE_TENSORS, meta, &nm,
                                       EMBER_TABLE_STATE_META) == EMBER_OK,
          "tensors");
    CHECK(k == 0 || nt == g->narrays, "shard %u: %zu arrays, shard 0 %zu", k, nt, g->narrays);
    g->narrays = nt;
    g->rows += ember_shard_local_rows(table);
    snprintf(g->opt_steps, sizeof(g->opt_steps), "%s", meta_value(meta, nm, "t.opt_steps"));
    snprintf(g->step, sizeof(g->step), "%s", meta_value(meta, nm, "t.step"));
    for (size_t a = 0; a < nt; a++) {
        size_t row_bytes =
                (t[a].ndim == 2 ? (size_t)t[a].shape[1] : 1) * ember_dtype_size(t[a].dtype);
        snprintf(g->names[a], sizeof(g->names[a]), "%s", t[a].name);
        g->row_bytes[a] = row_bytes;
        CHECK(t[a].shape[0] == ember_shard_local_rows(table), "%s: %lld rows", t[a].name,
              (long long)t[a].shape[0]);
        for (int64_t l = 0; l < t[a].shape[0]; l++)
            memcpy(g->data[a] + (size_t)(l * shards + k) * row_bytes,
                   (const uint8_t *)t[a].data + (size_t)l * row_bytes, row_bytes);
    }
    return 0;
}

static int gather(ember_shard_t **tables, uint32_t shards, global_t *g)
{
    memset(g, 0, sizeof(*g));
    for (uint32_t k = 0; k < shards; k++) {
        ember_shard_snapshot_t *snap = NULL;
        int rc = gather_shard(tables[k], k, shards, &snap, g);
        ember_shard_snapshot_free(snap);
        if (rc)
            return 1;
    }
    return 0;
}

/* Every array of every global row, and the steps: the same bits. */
static int same_state(const char *what, const global_t *a, const global_t *b)
{
    CHECK(a->narrays == b->narrays && a->rows == b->rows,
          "%s: %zu arrays of %lld rows, want %zu of %lld", what, b->narrays, (long long)b->rows,
          a->narrays, (long long)a->rows);
    CHECK(strcmp(a->opt_steps, b->opt_steps) == 0 && strcmp(a->step, b->step) == 0,
          "%s: steps %s/%s, want %s/%s", what, b->opt_steps, b->step, a->opt_steps, a->step);
    for (size_t k = 0; k < a->narrays; k++) {
        CHECK(strcmp(a->names[k], b->names[k]) == 0, "%s: %s, want %s", what, b->names[k],
              a->names[k]);
        for (int64_t row = 0; row < a->rows; row++)
            CHECK(memcmp(a->data[k] + row * a->row_bytes[k], b->data[k] + row * a->row_bytes[k],
                         a->row_bytes[k]) == 0,
                  "%s: %s of global row %lld differs", what, a->names[k], (long long)row);
    }
    return 0;
}

/* Shard @k's snapshot written to @path (tensors and metadata as
 * ember_shard_snapshot_tensors gives them, then @edit's change). */
typedef void (*edit_fn)(ember_st_tensor_t *t, size_t nt, ember_st_meta_t *meta, size_t nm);

static int write_shard(ember_shard_t *table, const char *path, edit_fn edit)
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
    CHECK(nm == 7 && nt >= 1 && ember_shard_snapshot_bytes(snap) >= (size_t)t[0].shape[0] * DIM,
          "%zu metadata, %zu tensors", nm, nt);
    if (edit)
        edit(t, nt, meta, nm);
    ember_status_t status = ember_st_write(path, t, nt, meta, nm);
    ember_shard_snapshot_free(snap);
    CHECK(status == EMBER_OK, "write %s", path);
    return 0;
}

/* Layout @shards of @s trained TRAIN steps, one file per shard and one of
 * another table ("u"); opened into @files, their paths in @paths. */
static int write_layout(const setup_t *s, ember_shard_t **tables, uint32_t shards,
                        ember_st_file_t **files, char paths[][128])
{
    char err[256];
    for (uint32_t k = 0; k <= shards; k++) {
        snprintf(paths[k], 128, "%s/shard%u.safetensors", dir, k);
        if (k < shards) {
            if (write_shard(tables[k], paths[k], NULL))
                return 1;
        } else {
            ember_shard_t *other = make_shard(s, "u", 0, 1, 3);
            CHECK(other, "table u");
            int rc = write_shard(other, paths[k], NULL);
            ember_shard_destroy(other);
            if (rc)
                return 1;
        }
        CHECK(ember_st_open(paths[k], &files[k], err, sizeof(err)) == EMBER_OK, "open: %s", err);
    }
    return 0;
}

static int restore_layout(ember_shard_t **tables, uint32_t shards, ember_st_file_t **files,
                          char paths[][128], size_t nfiles)
{
    const char *names[MAX_FILES];
    char err[512];
    for (size_t i = 0; i < nfiles; i++)
        names[i] = paths[i];
    for (uint32_t k = 0; k < shards; k++)
        CHECK(ember_shard_restore(tables[k], (const ember_st_file_t *const *)files, names, nfiles,
                                  err, sizeof(err)) == EMBER_OK,
              "restore shard %u of %u: %s", k, shards, err);
    return 0;
}

static void close_files(ember_st_file_t **files, char paths[][128], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ember_st_close(files[i]);
        files[i] = NULL;
        unlink(paths[i]);
    }
}

/* Restored into 1, 2, 3 shards: the state at the snapshot, then the state
 * after MORE steps, as the original's. */
static int resume_into(const setup_t *s, ember_st_file_t **files, char paths[][128], size_t nfiles,
                       const global_t *at, const global_t *after, uint32_t from)
{
    for (uint32_t q = 1; q <= MAX_SHARDS; q++) {
        ember_shard_t *tables[MAX_SHARDS];
        global_t *g = malloc(sizeof(*g));
        char what[64];
        int rc = 1;
        snprintf(what, sizeof(what), "%u -> %u shards", from, q);
        if (!g || make_layout(s, q, 77, tables))
            return 1;
        if (!restore_layout(tables, q, files, paths, nfiles) && !gather(tables, q, g) &&
            !same_state(what, at, g) && !train(tables, q, TRAIN, TRAIN + MORE) &&
            !gather(tables, q, g))
            rc = same_state(what, after, g);
        destroy_layout(tables, q);
        free(g);
        if (rc)
            return 1;
        fprintf(stderr, "%s: restored and resumed, the same bits\n", what);
    }
    return 0;
}

static int run_setup(const setup_t *s)
{
    global_t *at = malloc(sizeof(*at)), *after = malloc(sizeof(*after));
    int rc = !at || !after;
    for (uint32_t p = 1; !rc && p <= MAX_SHARDS; p += 2) {
        ember_shard_t *tables[MAX_SHARDS];
        ember_st_file_t *files[MAX_FILES] = {0};
        char paths[MAX_FILES][128];
        if (make_layout(s, p, 5, tables))
            return 1;
        rc = train(tables, p, 0, TRAIN) || gather(tables, p, at) ||
             write_layout(s, tables, p, files, paths) || train(tables, p, TRAIN, TRAIN + MORE) ||
             gather(tables, p, after) || resume_into(s, files, paths, p + 1, at, after, p);
        close_files(files, paths, p + 1);
        destroy_layout(tables, p);
    }
    free(at);
    free(after);
    return rc;
}

static setup_t setup_of(ember_opt_kind_t kind, float lr)
{
    setup_t s = {.dtype = EMBER_DTYPE_F32, .rows = ROWS, .dim = DIM};
    ember_opt_config_default(kind, lr, &s.opt);
    return s;
}

static int case_sgd_momentum(void)
{
    setup_t s = setup_of(EMBER_OPT_SGD, 0.1f);
    s.opt.momentum = 0.9f;
    return run_setup(&s);
}

static int case_sgd_dampening(void)
{
    setup_t s = setup_of(EMBER_OPT_SGD, 0.1f);
    s.opt.momentum = 0.9f;
    s.opt.dampening = 0.25f; /* the per-row started flags */
    return run_setup(&s);
}

static int case_adagrad(void)
{
    setup_t s = setup_of(EMBER_OPT_ADAGRAD, 0.1f);
    s.opt.lr_decay = 0.05f; /* the step count matters */
    s.opt.initial_accumulator = 0.1f;
    return run_setup(&s);
}

static int case_rowwise_adagrad(void)
{
    setup_t s = setup_of(EMBER_OPT_ROWWISE_ADAGRAD, 0.1f);
    return run_setup(&s);
}

static int case_adam(void)
{
    setup_t s = setup_of(EMBER_OPT_ADAM, 0.01f);
    return run_setup(&s);
}

static int case_adam_table_steps(void)
{
    setup_t s = setup_of(EMBER_OPT_ADAM, 0.01f);
    s.opt.adam_row_step = 0;
    return run_setup(&s);
}

static int case_fp16_sgd(void)
{
    setup_t s = setup_of(EMBER_OPT_SGD, 0.1f);
    s.dtype = EMBER_DTYPE_F16;
    if (run_setup(&s))
        return 1;
    s.opt.momentum = 0.5f;
    return run_setup(&s);
}

/* --- refusals ------------------------------------------------------------ */

static void edit_shape(ember_st_tensor_t *t, size_t nt, ember_st_meta_t *m, size_t nm)
{
    t[0].shape[0]--; /* t.weight: a row short */
}
static void edit_dtype(ember_st_tensor_t *t, size_t nt, ember_st_meta_t *m, size_t nm)
{
    t[1].dtype = EMBER_DTYPE_F16; /* t.exp_avg */
}
static void edit_meta(ember_st_meta_t *m, size_t nm, const char *key, const char *value)
{
    for (size_t i = 0; i < nm; i++)
        if (strcmp(m[i].key, key) == 0)
            m[i].value = value;
}
static void edit_not_number(ember_st_tensor_t *t, size_t nt, ember_st_meta_t *m, size_t nm)
{
    edit_meta(m, nm, "t.shard", "1x");
}
static void edit_shard_range(ember_st_tensor_t *t, size_t nt, ember_st_meta_t *m, size_t nm)
{
    edit_meta(m, nm, "t.shard", "3");
}
static void edit_step(ember_st_tensor_t *t, size_t nt, ember_st_meta_t *m, size_t nm)
{
    edit_meta(m, nm, "t.step", "5");
}
static void edit_huge(ember_st_tensor_t *t, size_t nt, ember_st_meta_t *m, size_t nm)
{
    edit_meta(m, nm, "t.num_shards", "18446744073709551616"); /* 2^64 */
}

/* A restore of the 2-shard @target's shard 1 from @files[@pick] (-1 ends)
 * refused with @want in its message, and the target as it was. */
static int refused(ember_shard_t **target, ember_st_file_t **files, char paths[][128],
                   const int *pick, const char *want)
{
    const ember_st_file_t *chosen[MAX_FILES + 2];
    const char *names[MAX_FILES + 2];
    global_t *before = malloc(sizeof(*before)), *now = malloc(sizeof(*now));
    char err[512] = "";
    size_t n = 0;
    CHECK(before && now && !gather(target, 2, before), "state before");
    for (; pick[n] >= 0; n++) {
        chosen[n] = files[pick[n]];
        names[n] = paths[pick[n]];
    }
    ember_status_t status = ember_shard_restore(target[1], chosen, names, n, err, sizeof(err));
    CHECK(status != EMBER_OK, "restore accepted (want '%s')", want);
    CHECK(strstr(err, want) != NULL, "message '%s', want '%s'", err, want);
    CHECK(!gather(target, 2, now) && !same_state("after a refusal", before, now), "changed");
    fprintf(stderr, "refused: %s\n", err);
    free(before);
    free(now);
    return 0;
}

/* Layout 3 of Adam trained, its shards written (files 0-2), files 3-8 the
 * edited ones (shard 1 edited), file 9 another table's. */
static int refusal_files(ember_st_file_t **files, char paths[][128], size_t *n_p)
{
    static const edit_fn edits[] = {edit_shape,       edit_dtype, edit_not_number,
                                    edit_shard_range, edit_step,  edit_huge};
    setup_t s = setup_of(EMBER_OPT_ADAM, 0.01f);
    ember_shard_t *tables[MAX_SHARDS];
    char err[256];
    size_t n = 0;
    if (make_layout(&s, 3, 5, tables) || train(tables, 3, 0, TRAIN))
        return 1;
    for (size_t k = 0; k < 3 + sizeof(edits) / sizeof(edits[0]); k++) {
        snprintf(paths[n], 128, "%s/file%zu.safetensors", dir, n);
        if (write_shard(tables[k < 3 ? k : 1], paths[n], k < 3 ? NULL : edits[k - 3]))
            return 1;
        CHECK(ember_st_open(paths[n], &files[n], err, sizeof(err)) == EMBER_OK, "%s", err);
        n++;
    }
    destroy_layout(tables, 3);
    ember_shard_t *other = make_shard(&s, "u", 0, 1, 3);
    snprintf(paths[n], 128, "%s/file%zu.safetensors", dir, n);
    CHECK(other && !write_shard(other, paths[n], NULL), "table u");
    ember_shard_destroy(other);
    CHECK(ember_st_open(paths[n], &files[n], err, sizeof(err)) == EMBER_OK, "%s", err);
    *n_p = n + 1;
    return 0;
}

/* Each target of another shape or optimizer: refused, unchanged. */
static int refused_targets(ember_st_file_t **files, char paths[][128])
{
    static const int all[] = {0, 1, 2, -1};
    setup_t s = setup_of(EMBER_OPT_ADAM, 0.01f);
    setup_t other[4] = {s, s, setup_of(EMBER_OPT_ADAGRAD, 0.01f), s};
    const char *want[4] = {"of a 23 x 5 table, the table is 24 x 5",
                           "of a 23 x 5 table, the table is 23 x 6",
                           "optimizer 'adam', the table's is adagrad", "holds 't.step'"};
    other[0].rows = ROWS + 1;
    other[1].dim = DIM + 1;
    other[3].opt.adam_row_step = 0;
    for (size_t i = 0; i < 4; i++) {
        ember_shard_t *target[2];
        if (make_layout(&other[i], 2, 9, target))
            return 1;
        int rc = refused(target, files, paths, all, want[i]);
        destroy_layout(target, 2);
        if (rc)
            return 1;
    }
    return 0;
}

static int case_refusals(void)
{
    ember_st_file_t *files[16] = {0};
    char paths[16][128];
    size_t n = 0;
    setup_t s = setup_of(EMBER_OPT_ADAM, 0.01f);
    ember_shard_t *target[2] = {NULL, NULL};
    static const int missing[] = {0, 2, 9, -1}, twice[] = {0, 1, 1, 2, -1};
    static const int shape[] = {0, 3, 2, -1}, dtype[] = {0, 4, 2, -1};
    static const int number[] = {0, 5, 2, -1}, range[] = {0, 6, 2, -1};
    static const int step[] = {0, 7, 2, -1}, huge[] = {0, 8, 2, -1}, none[] = {9, -1};
    int rc = refusal_files(files, paths, &n) || make_layout(&s, 2, 9, target);
    rc = rc || refused(target, files, paths, missing, "table t: shard 1 of 3 is missing") ||
         refused(target, files, paths, twice, "shard 1 of 3 is in both") ||
         refused(target, files, paths, shape, "tensor 't.weight' has 2 dims [7, 5], want [8, 5]") ||
         refused(target, files, paths, dtype, "tensor 't.exp_avg' is F16, the table's is F32") ||
         refused(target, files, paths, number, "metadata 't.shard' is '1x', not a number") ||
         refused(target, files, paths, range, "table t: shard 3 of 3") ||
         refused(target, files, paths, step, "shard 1 is at step 5") ||
         refused(target, files, paths, huge, "'t.num_shards' is 18446744073709551616, more than") ||
         refused(target, files, paths, none, "none of the 1 files holds it") ||
         refused_targets(files, paths);
    destroy_layout(target, 2);
    close_files(files, paths, n);
    return rc;
}

static int with_dir(int (*fn)(void))
{
    snprintf(dir, sizeof(dir), "/tmp/ember_shard_state_XXXXXX");
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
CASE(sgd_momentum)
CASE(sgd_dampening)
CASE(adagrad)
CASE(rowwise_adagrad)
CASE(adam)
CASE(adam_table_steps)
CASE(fp16_sgd)
CASE(refusals)

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"sgd_momentum", sgd_momentum_in_dir},
            {"sgd_dampening", sgd_dampening_in_dir},
            {"adagrad", adagrad_in_dir},
            {"rowwise_adagrad", rowwise_adagrad_in_dir},
            {"adam", adam_in_dir},
            {"adam_table_steps", adam_table_steps_in_dir},
            {"fp16_sgd", fp16_sgd_in_dir},
            {"refusals", refusals_in_dir},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
