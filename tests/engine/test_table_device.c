/*
 * tests/engine/test_table_device: a PS shard kept on a device
 * (ember_shard_create on a device, what --ps-device cuda runs) against the same shard
 * in host memory.  Run with the CPU backend, whose ops are the host's, the
 * two must agree bit for bit: every lookup's pools and every row after
 * every step.  With "cuda" as argv[2] (a GPU machine) the device shard is on
 * the GPU and they agree within float rounding (1e-5 relative).
 *
 *   steps_sgd / steps_adagrad / steps_adam / steps_rowwise: 6 steps of
 *   random lookups (sum, weighted sum, max in turn; repeated rows, empty
 *   bags) and gradients; sync with 2 trainers on 3 shards, then async.
 *   load_read: a shard created for loading takes a range of rows (this
 *   shard's only) and reads them back; a 0-row read.
 *   fp16_refused: fp16 rows on a device are refused, naming the table.
 *   init_uniform: EMBER_INIT_UNIFORM rows made for a device shard (in
 *   blocks, copied over) are the host shard's, bit for bit on any device
 *   (they are drawn on the host); 3 shards of a table larger than a block.
 *   snapshot_restore: a device shard's snapshot (rows copied out by the
 *   device) is the host shard's; written, it restores into fresh device
 *   shards of 1 and 3 (every global row and state value copied), and the
 *   restored one trains on as the host shard does.
 */
#include <ember/device.h>
#include <ember/log.h>

#include "engine/ops/optimizer.h"
#include "engine/ps/table.h"
#include "engine/wire/protocol.h"

#include "test_util.h"
#include "wire_views.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

enum {
    ROWS = 301,
    DIM = 24,
    BAGS = 37,
    MAX_LEN = 6,
    TRAINERS = 2,
    STEPS = 6
};

static const char *device_kind = "cpu";
static ember_device_t *device;
static uint64_t rng_state = 99;

static ember_msg_table_create_t table_spec(ember_opt_kind_t opt, ember_consistency_t c,
                                           uint32_t shard, uint32_t shards)
{
    ember_msg_table_create_t spec;
    memset(&spec, 0, sizeof(spec));
    spec.table_id = 1;
    spec.shard = shard;
    spec.num_shards = shards;
    spec.trainers = TRAINERS;
    spec.rows = ROWS;
    spec.dim = DIM;
    spec.consistency = c;
    spec.sparse_reduce = EMBER_REDUCE_SUM;
    spec.init = EMBER_INIT_NORMAL;
    spec.seed = 17;
    spec.dtype = EMBER_DTYPE_F32;
    ember_opt_config_default(opt, 0.05f, &spec.optimizer);
    if (opt == EMBER_OPT_SGD)
        spec.optimizer.momentum = 0.9f;
    snprintf(spec.name, sizeof(spec.name), "clicks");
    return spec;
}

/* A random lookup of this shard's rows: message, arrays, their length. */
typedef struct {
    ember_msg_lookup_t msg;
    uint8_t arrays[4 * BAGS + 8 * BAGS * MAX_LEN + 8 * BAGS * MAX_LEN];
    size_t length;
} lookup_t;

static void make_lookup(lookup_t *l, uint32_t trainer, uint64_t step, int kind, uint32_t shard,
                        uint32_t shards)
{
    uint32_t offsets[BAGS], inverse[BAGS * MAX_LEN], places[BAGS * MAX_LEN];
    int64_t entries[BAGS * MAX_LEN], unique[BAGS * MAX_LEN];
    float weights[BAGS * MAX_LEN];
    size_t n = 0, nunique = 0;
    const int64_t local_rows = (ROWS - shard + shards - 1) / shards;

    for (size_t b = 0; b < BAGS; b++) {
        offsets[b] = (uint32_t)n;
        size_t len = (size_t)(test_uniform(&rng_state, 0, MAX_LEN + 1));
        if (len > MAX_LEN || b % 9 == 4)
            len = 0; /* some empty bags */
        for (size_t k = 0; k < len; k++) {
            /* Few distinct rows: repeats within and across bags. */
            int64_t local = (int64_t)test_uniform(&rng_state, 0, 40) % local_rows;
            entries[n] = local * shards + shard;
            weights[n] = (float)test_uniform(&rng_state, -2, 2);
            places[n] = (uint32_t)(2 * k + 1); /* the trainer's bag has others */
            n++;
        }
    }
    for (size_t i = 0; i < n; i++) { /* sorted distinct rows */
        size_t j = 0;
        while (j < nunique && unique[j] < entries[i])
            j++;
        if (j == nunique || unique[j] != entries[i]) {
            memmove(unique + j + 1, unique + j, (nunique - j) * sizeof(int64_t));
            unique[j] = entries[i];
            nunique++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t slot = 0;
        while (unique[slot] != entries[i])
            slot++;
        inverse[i] = slot;
    }
    l->msg = (ember_msg_lookup_t){.table_id = 1,
                                  .trainer = trainer,
                                  .step = step,
                                  .flags = kind == 1   ? EMBER_LOOKUP_WEIGHTS
                                           : kind == 2 ? EMBER_LOOKUP_MAX
                                                       : 0,
                                  .bags = BAGS,
                                  .unique = (uint32_t)nunique,
                                  .indices = (uint32_t)n};
    uint8_t *p = l->arrays;
    memcpy(p, offsets, 4 * BAGS);
    p += 4 * BAGS;
    memcpy(p, unique, 8 * nunique);
    p += 8 * nunique;
    memcpy(p, inverse, 4 * n);
    p += 4 * n;
    if (kind == 1) {
        memcpy(p, weights, 4 * n);
        p += 4 * n;
    }
    if (kind == 2) {
        memcpy(p, places, 4 * n);
        p += 4 * n;
    }
    l->length = (size_t)(p - l->arrays);
}

static int same(const float *a, const float *b, size_t n, const char *what)
{
    int exact = strcmp(device_kind, "cpu") == 0;
    for (size_t i = 0; i < n; i++) {
        if (exact ? memcmp(&a[i], &b[i], sizeof(float)) != 0
                  : !(fabs((double)a[i] - (double)b[i]) <= 1e-5 * (1.0 + fabs((double)b[i])))) {
            fprintf(stderr, "FAIL %s[%zu]: device %.9g host %.9g\n", what, i, (double)a[i],
                    (double)b[i]);
            return 1;
        }
    }
    return 0;
}

static int rows_same(ember_shard_t *on_device, ember_shard_t *on_host, const char *when)
{
    int64_t rows = ember_shard_local_rows(on_host);
    float *a = malloc((size_t)rows * DIM * sizeof(float));
    float *b = malloc((size_t)rows * DIM * sizeof(float));
    char err[256];
    int rc = 1;
    if (ember_shard_read(on_device, 0, rows, a, err, sizeof(err)) != EMBER_OK ||
        ember_shard_read(on_host, 0, rows, b, err, sizeof(err)) != EMBER_OK)
        fprintf(stderr, "FAIL read: %s\n", err);
    else
        rc = same(a, b, (size_t)rows * DIM, when);
    free(a);
    free(b);
    return rc;
}

/* Step @step of every trainer's lookup and gradient on both shards. */
static int step_both(ember_shard_t *on_device, ember_shard_t *on_host, uint32_t shard,
                     uint32_t shards, uint64_t step)
{
    char err[256];
    for (uint32_t t = 0; t < TRAINERS; t++) {
        lookup_t l;
        /* With max mode the maxima's places follow the values. */
        float out_d[2 * BAGS * DIM], out_h[2 * BAGS * DIM], g[BAGS * DIM];
        int applied_d = 0, applied_h = 0;
        make_lookup(&l, t, step, (int)((step + t) % 3), shard, shards);
        uint8_t message[sizeof(l.msg) + sizeof(l.arrays)];
        ember_wire_lookup_view_t view;
        CHECK(test_lookup_view(&l.msg, l.arrays, l.length, message, &view, err, sizeof(err)) ==
                      EMBER_OK,
              "lookup message: %s", err);
        CHECK(ember_shard_lookup(on_host, &view, out_h, err, sizeof(err)) == EMBER_OK,
              "host lookup: %s", err);
        CHECK(ember_shard_lookup(on_device, &view, out_d, err, sizeof(err)) == EMBER_OK,
              "device lookup: %s", err);
        if (same(out_d, out_h, BAGS * DIM, "pooled"))
            return 1;
        CHECK(l.msg.flags != EMBER_LOOKUP_MAX ||
                      memcmp(out_d + BAGS * DIM, out_h + BAGS * DIM, BAGS * DIM * 4) == 0,
              "step %llu trainer %u: the maxima's places differ", (unsigned long long)step, t);
        for (size_t i = 0; i < BAGS * DIM; i++)
            g[i] = (float)test_uniform(&rng_state, -1, 1);
        ember_msg_grad_t msg = {
                .table_id = 1, .trainer = t, .step = step, .flags = EMBER_GRAD_APPLY, .bags = BAGS};
        ember_wire_grad_view_t grad = test_grad_view(&msg, g, sizeof(g));
        CHECK(ember_shard_grad(on_host, &grad, &applied_h, err, sizeof(err)) == EMBER_OK,
              "host grad: %s", err);
        CHECK(ember_shard_grad(on_device, &grad, &applied_d, err, sizeof(err)) == EMBER_OK,
              "device grad: %s", err);
        CHECK(applied_d == applied_h, "step %llu trainer %u: applied %d vs %d",
              (unsigned long long)step, t, applied_d, applied_h);
    }
    char when[64];
    snprintf(when, sizeof(when), "rows after step %llu", (unsigned long long)step);
    return rows_same(on_device, on_host, when);
}

/* STEPS steps of every trainer's lookup and gradient on both shards. */
static int run_steps(ember_opt_kind_t opt, ember_consistency_t c, uint32_t shard, uint32_t shards)
{
    ember_msg_table_create_t spec = table_spec(opt, c, shard, shards);
    ember_shard_t *on_host = NULL, *on_device = NULL;
    char err[256];
    CHECK(ember_shard_create(&spec, NULL, &on_host, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_shard_create(&spec, device, &on_device, err, sizeof(err)) == EMBER_OK, "%s", err);
    if (rows_same(on_device, on_host, "initial rows"))
        return 1;
    for (uint64_t step = 0; step < STEPS; step++)
        if (step_both(on_device, on_host, shard, shards, step))
            return 1;
    CHECK(ember_shard_bytes(on_device) == ember_shard_bytes(on_host), "bytes");
    ember_shard_destroy(on_device);
    ember_shard_destroy(on_host);
    return 0;
}

static int steps_of(ember_opt_kind_t opt)
{
    for (uint32_t shard = 0; shard < 3; shard++)
        if (run_steps(opt, EMBER_SYNC, shard, 3))
            return 1;
    return run_steps(opt, EMBER_ASYNC, 0, 1);
}

static int case_steps_sgd(void)
{
    return steps_of(EMBER_OPT_SGD);
}
static int case_steps_adagrad(void)
{
    return steps_of(EMBER_OPT_ADAGRAD);
}
static int case_steps_adam(void)
{
    return steps_of(EMBER_OPT_ADAM);
}
static int case_steps_rowwise(void)
{
    return steps_of(EMBER_OPT_ROWWISE_ADAGRAD);
}

static int case_load_read(void)
{
    ember_msg_table_create_t spec = table_spec(EMBER_OPT_SGD, EMBER_SYNC, 1, 3);
    ember_shard_t *t = NULL;
    char err[256];
    spec.init = EMBER_INIT_LOAD;
    CHECK(ember_shard_create(&spec, device, &t, err, sizeof(err)) == EMBER_OK, "%s", err);
    /* Rows [50, 90): this shard (row % 3 == 1) owns 52, 55, ..., 88. */
    float *values = malloc(40 * DIM * sizeof(float));
    for (size_t i = 0; i < 40 * DIM; i++)
        values[i] = (float)i * 0.5f - 7.0f;
    CHECK(ember_shard_load(t, 50, 40, values, err, sizeof(err)) == EMBER_OK, "load: %s", err);
    float got[13 * DIM], zero[DIM];
    CHECK(ember_shard_read(t, 17, 13, got, err, sizeof(err)) == EMBER_OK, "read: %s", err);
    for (int k = 0; k < 13; k++) {
        int64_t row = (17 + k) * 3 + 1;
        CHECK(memcmp(got + k * DIM, values + (row - 50) * DIM, DIM * sizeof(float)) == 0,
              "local row %d (row %lld) not as loaded", 17 + k, (long long)row);
    }
    CHECK(ember_shard_read(t, 16, 1, zero, err, sizeof(err)) == EMBER_OK, "read: %s", err);
    for (int d = 0; d < DIM; d++)
        CHECK(zero[d] == 0.0f, "row 49 was never loaded, yet holds %g", (double)zero[d]);
    CHECK(ember_shard_read(t, 0, 0, got, err, sizeof(err)) == EMBER_OK, "0-row read");
    CHECK(ember_shard_read(t, 100, 2, got, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE &&
                  strstr(err, "clicks"),
          "read past the end: %s", err);
    free(values);
    ember_shard_destroy(t);
    return 0;
}

static int case_fp16_refused(void)
{
    ember_msg_table_create_t spec = table_spec(EMBER_OPT_SGD, EMBER_SYNC, 0, 1);
    ember_shard_t *t = NULL;
    char err[256] = "";
    spec.dtype = EMBER_DTYPE_F16;
    CHECK(ember_shard_create(&spec, device, &t, err, sizeof(err)) == EMBER_ERR_UNSUPPORTED && !t &&
                  strstr(err, "table clicks: fp16 rows"),
          "fp16 on a device: %s", err);
    return 0;
}

static int case_init_uniform(void)
{
    for (uint32_t shard = 0; shard < 3; shard++) {
        ember_msg_table_create_t spec = table_spec(EMBER_OPT_SGD, EMBER_ASYNC, shard, 3);
        ember_shard_t *on_device = NULL, *on_host = NULL;
        char err[256];
        spec.init = EMBER_INIT_UNIFORM;
        spec.rows = 3 * 16384 + 100; /* more than a block of rows a shard */
        spec.dim = 5;
        CHECK(ember_shard_create(&spec, device, &on_device, err, sizeof(err)) == EMBER_OK, "%s",
              err);
        CHECK(ember_shard_create(&spec, NULL, &on_host, err, sizeof(err)) == EMBER_OK, "%s", err);
        const int64_t rows = ember_shard_local_rows(on_host);
        float *a = malloc((size_t)rows * 5 * sizeof(float)), *b = malloc((size_t)rows * 5 * 4);
        CHECK(a && b, "out of memory");
        CHECK(ember_shard_read(on_device, 0, rows, a, err, sizeof(err)) == EMBER_OK &&
                      ember_shard_read(on_host, 0, rows, b, err, sizeof(err)) == EMBER_OK,
              "%s", err);
        CHECK(memcmp(a, b, (size_t)rows * 5 * sizeof(float)) == 0,
              "shard %u: the device's uniform rows are not the host's", shard);
        float bound = (float)sqrt(1.0 / (double)spec.rows);
        for (size_t i = 0; i < (size_t)rows * 5; i++)
            CHECK(fabsf(a[i]) <= bound, "value %zu: %g beyond %g", i, (double)a[i], (double)bound);
        free(a);
        free(b);
        ember_shard_destroy(on_device);
        ember_shard_destroy(on_host);
    }
    return 0;
}

/* @table's snapshot tensors into @t (@snap_p kept by the caller). */
static int snapshot_of(ember_shard_t *table, ember_shard_snapshot_t **snap_p, ember_st_tensor_t *t,
                       size_t *nt_p, ember_st_meta_t *meta, size_t *nm_p)
{
    char err[256];
    *nt_p = *nm_p = 0;
    CHECK(ember_shard_snapshot_take(table, snap_p, err, sizeof(err)) == EMBER_OK, "take: %s", err);
    CHECK(ember_shard_snapshot_tensors(*snap_p, t, nt_p, EMBER_TABLE_STATE_TENSORS, meta, nm_p,
                                       EMBER_TABLE_STATE_META) == EMBER_OK,
          "tensors");
    return 0;
}

/* A restored shard's arrays, row by global row, as the snapshot's @want
 * (one shard) has them: copies, so the same bits on any device. */
static int restored_same(ember_shard_t *table, uint32_t shard, uint32_t shards,
                         const ember_st_tensor_t *want, size_t nwant)
{
    ember_shard_snapshot_t *snap = NULL;
    ember_st_tensor_t t[EMBER_TABLE_STATE_TENSORS];
    ember_st_meta_t meta[EMBER_TABLE_STATE_META];
    size_t nt, nm;
    int rc = snapshot_of(table, &snap, t, &nt, meta, &nm);
    CHECK(rc || nt == nwant, "%zu arrays, want %zu", nt, nwant);
    for (size_t a = 0; !rc && a < nt; a++) {
        size_t row_bytes = t[a].nbytes / (t[a].shape[0] ? (size_t)t[a].shape[0] : 1);
        for (int64_t l = 0; l < t[a].shape[0]; l++) {
            const uint8_t *got = (const uint8_t *)t[a].data + (size_t)l * row_bytes;
            const uint8_t *w =
                    (const uint8_t *)want[a].data + (size_t)(l * shards + shard) * row_bytes;
            if (memcmp(got, w, row_bytes) != 0) {
                fprintf(stderr, "FAIL %s: global row %lld differs (shard %u of %u)\n", t[a].name,
                        (long long)(l * shards + shard), shard, shards);
                rc = 1;
                break;
            }
        }
    }
    ember_shard_snapshot_free(snap);
    return rc;
}

/* A device shard's snapshot (rows copied out by the device) written,
 * restored into fresh device shards of 1 and 3 (rows staged, one copy
 * each), and the restored whole table trained on beside the host's. */
static int case_snapshot_restore(void)
{
    ember_msg_table_create_t spec = table_spec(EMBER_OPT_ADAM, EMBER_SYNC, 0, 1);
    ember_shard_t *on_host = NULL, *on_device = NULL, *fresh[3] = {NULL, NULL, NULL};
    ember_shard_snapshot_t *snap_d = NULL, *snap_h = NULL;
    ember_st_tensor_t td[EMBER_TABLE_STATE_TENSORS], th[EMBER_TABLE_STATE_TENSORS];
    ember_st_meta_t md[EMBER_TABLE_STATE_META], mh[EMBER_TABLE_STATE_META];
    ember_st_file_t *file = NULL;
    size_t ntd, nth, nmd, nmh;
    char err[256], path[] = "/tmp/ember_shard_device_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    CHECK(ember_shard_create(&spec, NULL, &on_host, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_shard_create(&spec, device, &on_device, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (uint64_t step = 0; step < STEPS; step++)
        if (step_both(on_device, on_host, 0, 1, step))
            return 1;
    if (snapshot_of(on_device, &snap_d, td, &ntd, md, &nmd) ||
        snapshot_of(on_host, &snap_h, th, &nth, mh, &nmh))
        return 1;
    CHECK(ntd == nth && ntd == 4, "%zu and %zu arrays", ntd, nth);
    if (same(td[0].data, th[0].data, ROWS * DIM, "snapshot rows"))
        return 1;
    CHECK(ember_st_write(path, td, ntd, md, nmd) == EMBER_OK, "write %s", path);
    CHECK(ember_st_open(path, &file, err, sizeof(err)) == EMBER_OK, "%s", err);
    const ember_st_file_t *files[] = {file};
    const char *names[] = {path};
    for (uint32_t q = 1; q <= 3; q += 2) {
        for (uint32_t k = 0; k < q; k++) {
            ember_msg_table_create_t s = table_spec(EMBER_OPT_ADAM, EMBER_SYNC, k, q);
            s.seed = 4; /* other initial rows */
            CHECK(ember_shard_create(&s, device, &fresh[k], err, sizeof(err)) == EMBER_OK, "%s",
                  err);
            CHECK(ember_shard_restore(fresh[k], files, names, 1, err, sizeof(err)) == EMBER_OK,
                  "restore %u of %u: %s", k, q, err);
            if (restored_same(fresh[k], k, q, td, ntd))
                return 1;
        }
        for (uint64_t step = STEPS; q == 1 && step < STEPS + 2; step++)
            if (step_both(fresh[0], on_host, 0, 1, step))
                return 1;
        for (uint32_t k = 0; k < q; k++)
            ember_shard_destroy(fresh[k]);
    }
    ember_st_close(file);
    unlink(path);
    ember_shard_snapshot_free(snap_d);
    ember_shard_snapshot_free(snap_h);
    ember_shard_destroy(on_device);
    ember_shard_destroy(on_host);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"steps_sgd", case_steps_sgd},       {"steps_adagrad", case_steps_adagrad},
            {"steps_adam", case_steps_adam},     {"steps_rowwise", case_steps_rowwise},
            {"load_read", case_load_read},       {"fp16_refused", case_fp16_refused},
            {"init_uniform", case_init_uniform}, {"snapshot_restore", case_snapshot_restore},
    };
    int rc;

    ember_log_init();
    if (argc >= 3)
        device_kind = argv[2];
    if (strcmp(device_kind, "cuda") == 0 && ember_device_cuda_count() <= 0) {
        fprintf(stderr, "SKIP: no CUDA GPU visible\n");
        return 77;
    }
    if (ember_device_open(device_kind, 0, &device) != EMBER_OK)
        return 1;
    rc = test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
    ember_device_close(device);
    return rc;
}
