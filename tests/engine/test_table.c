/*
 * tests/engine/test_table: a PS shard's lookup and gradient (engine/ps/table.c)
 * in one process, against the single-process EmbeddingBag and plain SGD.
 *
 *   grad_sum / grad_weighted: bags that share rows, an empty bag, and a row
 *   sent in the lookup that no index refers to (it must stay unchanged);
 *   the gradient handed over aligned and at an odd address (copied out).
 *   grad_sync: two trainers' gradients of one step summed, then applied.
 *   init_normal: a shard's initial rows are N(0, 1) values of their global
 *   element (the same whatever the shard count), odd widths included.
 *   init_uniform: EMBER_INIT_UNIFORM rows are uniform in +-sqrt(1/rows) of
 *   the whole table, the same values on 1, 2 or 3 shards, fp16 rows their
 *   rounding.
 *   eval_lookup: an EMBER_LOOKUP_EVAL lookup pools as a training one, is
 *   taken while the trainer's context is open and leaves it as it was, and
 *   keeps no context of its own (a gradient for it is refused).
 *   grad_check: ember_shard_grad_check refuses what ember_shard_grad would
 *   (non-finite, wrong size, no lookup, one already waiting) and changes
 *   nothing, not even the context ember_shard_grad voids for a NaN.
 *   fp16_rows: a shard of fp16 rows: its initial rows are the N(0, 1)
 *   values rounded, loads round (and refuse, whole, a value fp16 cannot
 *   hold), reads widen, it holds half the bytes; its
 *   lookups (sum, weighted) give the bits of the fp32 pooling of the widened
 *   rows, and each SGD step is the fp32 step on them, rounded once.
 *   bad_dtype: a shard of any other dtype is refused, naming the table.
 *   empty_shard: a shard that owns no row (a 3-row table on 4 shards, each
 *   optimizer): created, its lookups pool to zeros, its sync step applies,
 *   a read of its 0 rows succeeds and one past them is refused.
 *   unused_rows: a lookup that sends more distinct rows than it has
 *   indices (rows no index refers to; sync and async): its gradient is
 *   applied to the one referenced row alone (the fuzzer's find: the
 *   gradient's buffers were sized by the indices).
 *   huge_alloc: the tables' and optimizer states' memory (engine/hugepage):
 *   zeroed when asked (and resident from 2 MiB up), 2 MiB-aligned from 2 MiB
 *   up, writable, given back.
 */
#include "common/hugepage.h"
#include "common/rng.h"
#include "engine/ops/half.h"
#include "engine/ops/optimizer.h"
#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include <ember/embedding_bag.h>

#include "test_util.h"
#include "wire_views.h"

#include <stdlib.h>
#include <sys/mman.h>

enum {
    ROWS = 40,
    DIM = 12,
    BAGS = 5
};
#define LR 0.05f

/* Bags {3, 7, 3}, {}, {7}, {11, 20, 3}, {20}; row 30 is sent, unreferenced.
 * A first step uses row 30 in the last bag (warm_indices), so the shared
 * gradient buffer holds a stale gradient where row 30's would go. */
static const int64_t step_indices[] = {3, 7, 3, 7, 11, 20, 3, 20};
static const int64_t warm_indices[] = {3, 7, 3, 7, 11, 20, 3, 30};
static const int64_t *bag_indices = step_indices;
static const int64_t bag_offsets[BAGS] = {0, 3, 3, 4, 7};
static const int64_t sent_rows[] = {3, 7, 11, 20, 30};
enum {
    N = 8,
    UNIQUE = 5
};
static const float bag_weights[N] = {0.5f, 2.0f, 1.5f, -1.0f, 0.25f, 3.0f, 1.0f, 0.75f};

/* The rows' dtype of the shards make_shard creates. */
static ember_dtype_t shard_dtype = EMBER_DTYPE_F32;

/* Shard @shard of @shards of a rows x dim table, N(0, 1) from @seed, SGD. */
static ember_shard_t *make_shard(ember_consistency_t consistency, uint32_t trainers, int64_t rows,
                                 uint32_t dim, uint32_t shard, uint32_t shards, uint64_t seed)
{
    ember_msg_table_create_t spec;
    ember_shard_t *table = NULL;
    char err[256];

    memset(&spec, 0, sizeof(spec));
    spec.table_id = 1;
    spec.shard = shard;
    spec.num_shards = shards;
    spec.trainers = trainers;
    spec.rows = rows;
    spec.dim = dim;
    spec.consistency = consistency;
    spec.sparse_reduce = EMBER_REDUCE_SUM;
    spec.init = EMBER_INIT_NORMAL;
    spec.seed = seed;
    spec.dtype = shard_dtype;
    ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
    snprintf(spec.name, sizeof(spec.name), "t");
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK) {
        fprintf(stderr, "ember_shard_create: %s\n", err);
        return NULL;
    }
    return table;
}

static ember_shard_t *make_table(ember_consistency_t consistency, uint32_t trainers)
{
    return make_shard(consistency, trainers, ROWS, DIM, 0, 1, 5);
}

/* @lookup packed by the codec into @message (room for it), and taken back
 * as the PS takes it. */
static ember_status_t pack_view(const ember_wire_lookup_t *lookup, uint8_t *message,
                                ember_wire_lookup_view_t *view, char *err, size_t err_length)
{
    ember_wire_lookup_pack(lookup, message);
    return ember_wire_lookup_unpack(message, ember_wire_lookup_size(&lookup->head), view, err,
                                    err_length);
}

/* The test's LOOKUP (sorted rows sent_rows, row 30 among them) into
 * @message, and its view. */
static ember_status_t lookup_view(uint8_t *message, int weighted, uint32_t trainer,
                                  ember_wire_lookup_view_t *view, char *err, size_t err_length)
{
    uint32_t counts[BAGS];
    int64_t inverse[N];
    for (size_t b = 0; b < BAGS; b++)
        counts[b] = (uint32_t)((b + 1 < BAGS ? bag_offsets[b + 1] : N) - bag_offsets[b]);
    for (size_t i = 0; i < N; i++) {
        inverse[i] = 0;
        while (sent_rows[inverse[i]] != bag_indices[i])
            inverse[i]++;
    }
    ember_wire_lookup_t lookup = {.head = {.table_id = 1,
                                           .trainer = trainer,
                                           .step = 0,
                                           .flags = weighted ? EMBER_LOOKUP_WEIGHTS : 0,
                                           .bags = BAGS,
                                           .unique = UNIQUE,
                                           .indices = N},
                                  .counts = counts,
                                  .rows = sent_rows,
                                  .inverse = inverse,
                                  .weights = bag_weights};
    return pack_view(&lookup, message, view, err, err_length);
}

static void make_grad(float *g, uint64_t seed)
{
    for (size_t i = 0; i < BAGS * DIM; i++)
        g[i] = (float)test_uniform(&seed, -1.0, 1.0);
}

/* reference -= LR x (the batch's row gradient for @g). */
static int reference_step(float *reference, int weighted, const float *g)
{
    const float *weights = weighted ? bag_weights : NULL;
    ember_bag_batch_t batch = {.indices = bag_indices,
                               .n = N,
                               .offsets = bag_offsets,
                               .bags = BAGS,
                               .weights = weights,
                               .n_weights = weighted ? N : 0};
    ember_bag_opts_t opts = {.mode = EMBER_BAG_SUM, .padding_idx = -1};
    int64_t rows[N];
    float grad[N * DIM];
    const ember_bag_table_t t = {
            .data = reference, .dtype = EMBER_DTYPE_F32, .rows = ROWS, .dim = DIM};
    ember_bag_grad_t out = {.rows = rows, .grad = grad};
    CHECK(ember_bag_backward(&t, &batch, &opts, g, NULL, &out) == EMBER_OK, "ember_bag_backward");
    for (size_t u = 0; u < out.nrows; u++)
        for (size_t d = 0; d < DIM; d++)
            reference[rows[u] * DIM + d] -= LR * grad[u * DIM + d];
    return 0;
}

static int lookup(ember_shard_t *table, int weighted, uint32_t trainer, const float *before)
{
    uint8_t message[512];
    float out[BAGS * DIM], expect[BAGS * DIM];
    char err[256];
    ember_wire_lookup_view_t view;
    CHECK(lookup_view(message, weighted, trainer, &view, err, sizeof(err)) == EMBER_OK,
          "lookup message: %s", err);
    CHECK(ember_shard_lookup(table, &view, out, err, sizeof(err)) == EMBER_OK, "lookup: %s", err);
    ember_bag_batch_t batch = {.indices = bag_indices,
                               .n = N,
                               .offsets = bag_offsets,
                               .bags = BAGS,
                               .weights = weighted ? bag_weights : NULL,
                               .n_weights = weighted ? N : 0};
    ember_bag_opts_t opts = {.mode = EMBER_BAG_SUM, .padding_idx = -1};
    const ember_bag_table_t t = {
            .data = before, .dtype = EMBER_DTYPE_F32, .rows = ROWS, .dim = DIM};
    CHECK(ember_bag_forward(&t, &batch, &opts, expect, NULL) == EMBER_OK, "ember_bag_forward");
    /* The same kernel over the same values (fp16 rows widened exactly):
     * the same bits. */
    for (size_t i = 0; i < BAGS * DIM; i++)
        CHECK(memcmp(&out[i], &expect[i], sizeof(float)) == 0, "output %zu: %g, want %g", i,
              (double)out[i], (double)expect[i]);
    return 0;
}

/* Push @g for (trainer, step 0), from an address @misalign bytes past an
 * aligned one. */
static int push(ember_shard_t *table, uint32_t trainer, const float *g, size_t misalign,
                int *applied_p)
{
    static _Alignas(64) uint8_t raw[BAGS * DIM * sizeof(float) + 64];
    ember_msg_grad_t msg = {
            .table_id = 1, .trainer = trainer, .step = 0, .flags = EMBER_GRAD_APPLY, .bags = BAGS};
    char err[256];
    memcpy(raw + misalign, g, BAGS * DIM * sizeof(float));
    ember_wire_grad_view_t view = test_grad_view(&msg, raw + misalign, BAGS * DIM * sizeof(float));
    CHECK(ember_shard_grad(table, &view, applied_p, err, sizeof(err)) == EMBER_OK, "grad: %s", err);
    return 0;
}

/* Row 30 as it was before the steps that do not refer to it. */
static int compare(ember_shard_t *table, const float *reference, const float *before)
{
    float now[ROWS * DIM];
    char err[256];
    CHECK(ember_shard_read(table, 0, ROWS, now, err, sizeof(err)) == EMBER_OK, "read: %s", err);
    for (size_t i = 0; i < ROWS * DIM; i++)
        CHECK(fabsf(now[i] - reference[i]) <= 1e-5f, "row %zu col %zu: %g, want %g", i / DIM,
              i % DIM, (double)now[i], (double)reference[i]);
    CHECK(memcmp(now + 30 * DIM, before + 30 * DIM, DIM * sizeof(float)) == 0,
          "row 30 (sent, no index refers to it) changed");
    return 0;
}

static int async_steps(int weighted)
{
    ember_shard_t *table = make_table(EMBER_ASYNC, 1);
    float before[ROWS * DIM], reference[ROWS * DIM], g[BAGS * DIM];
    char err[256];
    CHECK(table, "table");
    CHECK(ember_shard_read(table, 0, ROWS, before, err, sizeof(err)) == EMBER_OK, "%s", err);
    memcpy(reference, before, sizeof(before));
    bag_indices = warm_indices;
    int applied = 0;
    if (lookup(table, weighted, 0, before))
        return 1;
    make_grad(g, 99);
    if (push(table, 0, g, 0, &applied) || reference_step(reference, weighted, g))
        return 1;
    CHECK(ember_shard_read(table, 0, ROWS, before, err, sizeof(err)) == EMBER_OK, "%s", err);
    bag_indices = step_indices;
    /* Aligned (read in place), then at odd addresses (copied out first). */
    for (size_t misalign = 0; misalign < 4; misalign++) {
        float current[ROWS * DIM];
        CHECK(ember_shard_read(table, 0, ROWS, current, err, sizeof(err)) == EMBER_OK, "%s", err);
        if (lookup(table, weighted, 0, current))
            return 1;
        make_grad(g, 100 + misalign);
        applied = 0;
        if (push(table, 0, g, misalign, &applied) || reference_step(reference, weighted, g))
            return 1;
        CHECK(applied, "async gradient %zu not applied", misalign);
        if (compare(table, reference, before))
            return 1;
    }
    ember_shard_destroy(table);
    return 0;
}

static int case_grad_sum(void)
{
    return async_steps(0);
}
static int case_grad_weighted(void)
{
    return async_steps(1);
}

static int case_grad_sync(void)
{
    ember_shard_t *table = make_table(EMBER_SYNC, 2);
    float before[ROWS * DIM], reference[ROWS * DIM], g0[BAGS * DIM], g1[BAGS * DIM];
    float sum[BAGS * DIM];
    char err[256];
    int applied = -1;
    CHECK(table, "table");
    CHECK(ember_shard_read(table, 0, ROWS, before, err, sizeof(err)) == EMBER_OK, "%s", err);
    memcpy(reference, before, sizeof(before));
    if (lookup(table, 0, 0, before) || lookup(table, 0, 1, before))
        return 1;
    make_grad(g0, 7);
    make_grad(g1, 8);
    if (push(table, 1, g1, 2, &applied))
        return 1;
    CHECK(applied == 0, "sync step applied with one trainer of two");
    if (compare(table, before, before))
        return 1;
    if (push(table, 0, g0, 0, &applied))
        return 1;
    CHECK(applied == 1, "sync step not applied after both trainers");
    /* Same rows in both lookups: the summed step is one step on g0 + g1. */
    for (size_t i = 0; i < BAGS * DIM; i++)
        sum[i] = g0[i] + g1[i];
    if (reference_step(reference, 0, sum) || compare(table, reference, before))
        return 1;
    ember_shard_destroy(table);
    return 0;
}

static int case_init_normal(void)
{
    enum {
        IROWS = 3001,
        IDIM = 33,
        SHARDS = 3
    };
    const uint64_t seed = 11;
    double sum = 0.0, sum2 = 0.0;
    size_t count = 0, tail = 0;
    float *local = malloc(IROWS * IDIM * sizeof(float));
    char err[256];
    CHECK(local, "out of memory");
    for (uint32_t shard = 0; shard < SHARDS; shard++) {
        ember_shard_t *table = make_shard(EMBER_ASYNC, 1, IROWS, IDIM, shard, SHARDS, seed);
        CHECK(table, "shard %u", shard);
        int64_t rows = ember_shard_local_rows(table);
        CHECK(ember_shard_read(table, 0, rows, local, err, sizeof(err)) == EMBER_OK, "%s", err);
        for (int64_t l = 0; l < rows; l++) {
            uint64_t row = (uint64_t)l * SHARDS + shard;
            for (uint32_t d = 0; d < IDIM; d++) {
                float v = local[l * IDIM + d];
                CHECK(v == ember_normal_at(seed, row * IDIM + d),
                      "shard %u row %llu col %u: %g, want %g", shard, (unsigned long long)row, d,
                      (double)v, (double)ember_normal_at(seed, row * IDIM + d));
                sum += v;
                sum2 += (double)v * v;
                tail += fabsf(v) > 3.0f;
                count++;
            }
        }
        ember_shard_destroy(table);
    }
    double mean = sum / (double)count, var = sum2 / (double)count - mean * mean;
    /* 99033 values: the mean's standard error is 0.003, the variance's 0.0045. */
    CHECK(count == (size_t)IROWS * IDIM, "%zu values", count);
    CHECK(fabs(mean) < 0.015 && fabs(var - 1.0) < 0.025, "mean %g, variance %g", mean, var);
    CHECK(tail > 150 && tail < 400, "%zu values beyond 3 sigma (expect ~267)", tail);
    free(local);
    return 0;
}

/* Shard @shard of @shards of a uniform-initialised table of @rows x @dim. */
static ember_shard_t *make_uniform(int64_t rows, uint32_t dim, uint32_t shard, uint32_t shards,
                                   ember_dtype_t dtype)
{
    ember_msg_table_create_t spec = {.shard = shard,
                                     .num_shards = shards,
                                     .trainers = 1,
                                     .rows = rows,
                                     .dim = dim,
                                     .consistency = EMBER_ASYNC,
                                     .init = EMBER_INIT_UNIFORM,
                                     .dtype = dtype,
                                     .seed = 23};
    ember_shard_t *table = NULL;
    char err[256];
    ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
    snprintf(spec.name, sizeof(spec.name), "u");
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK)
        fprintf(stderr, "ember_shard_create: %s\n", err);
    return table;
}

/* The whole table as @shards shards hold it, global row = local * shards + shard. */
static int read_sharded(int64_t rows, uint32_t dim, uint32_t shards, ember_dtype_t dtype,
                        float *out)
{
    float *local = malloc((size_t)rows * dim * sizeof(float));
    char err[256];
    CHECK(local, "out of memory");
    for (uint32_t shard = 0; shard < shards; shard++) {
        ember_shard_t *table = make_uniform(rows, dim, shard, shards, dtype);
        CHECK(table, "shard %u of %u", shard, shards);
        int64_t n = ember_shard_local_rows(table);
        CHECK(ember_shard_read(table, 0, n, local, err, sizeof(err)) == EMBER_OK, "%s", err);
        for (int64_t l = 0; l < n; l++)
            memcpy(out + (size_t)(l * shards + shard) * dim, local + (size_t)l * dim,
                   dim * sizeof(float));
        ember_shard_destroy(table);
    }
    free(local);
    return 0;
}

static int case_init_uniform(void)
{
    enum {
        UROWS = 2003,
        UDIM = 19
    };
    const size_t count = (size_t)UROWS * UDIM;
    const float bound = (float)sqrt(1.0 / UROWS);
    float *one = malloc(count * sizeof(float)), *many = malloc(count * sizeof(float));
    double sum = 0.0, sum2 = 0.0, low = 0.0, high = 0.0;
    CHECK(one && many, "out of memory");
    if (read_sharded(UROWS, UDIM, 1, EMBER_DTYPE_F32, one))
        return 1;
    for (size_t i = 0; i < count; i++) {
        CHECK(one[i] >= -bound && one[i] < bound, "value %zu: %g outside +-%g", i, (double)one[i],
              (double)bound);
        sum += one[i];
        sum2 += (double)one[i] * one[i];
        low = one[i] < low ? one[i] : low;
        high = one[i] > high ? one[i] : high;
    }
    /* 38057 values: the mean's standard error is bound * 0.003. */
    double mean = sum / (double)count, var = sum2 / (double)count - mean * mean;
    CHECK(fabs(mean) < 0.015 * bound && fabs(var / (bound * bound / 3.0) - 1.0) < 0.03 &&
                  low < -0.999 * bound && high > 0.999 * bound,
          "mean %g, variance %g (want %g), range [%g, %g] of +-%g", mean, var, bound * bound / 3.0,
          low, high, (double)bound);
    for (uint32_t shards = 2; shards <= 3; shards++) {
        if (read_sharded(UROWS, UDIM, shards, EMBER_DTYPE_F32, many))
            return 1;
        CHECK(memcmp(one, many, count * sizeof(float)) == 0, "%u shards hold other values", shards);
    }
    if (read_sharded(UROWS, UDIM, 2, EMBER_DTYPE_F16, many))
        return 1;
    for (size_t i = 0; i < count; i++)
        CHECK(many[i] == ember_half_to_float(ember_float_to_half(one[i])),
              "fp16 value %zu: %g, want %g rounded", i, (double)many[i], (double)one[i]);
    free(one);
    free(many);
    return 0;
}

/* The test's lookup of trainer @trainer, step 0, as an evaluation with @eval. */
static int lookup_flags(ember_shard_t *table, uint32_t trainer, uint32_t flags, float *out,
                        char *err, size_t err_length)
{
    uint8_t message[512];
    ember_wire_lookup_view_t view;
    CHECK(lookup_view(message, 0, trainer, &view, err, err_length) == EMBER_OK, "%s", err);
    view.head.flags |= flags;
    return ember_shard_lookup(table, &view, out, err, err_length) == EMBER_OK ? 0 : -1;
}

static int case_eval_lookup(void)
{
    ember_shard_t *table = make_table(EMBER_SYNC, 2);
    float before[ROWS * DIM], out[BAGS * DIM], eval[BAGS * DIM], g[BAGS * DIM];
    char err[256];
    int applied = -1;
    CHECK(table, "table");
    CHECK(ember_shard_read(table, 0, ROWS, before, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(lookup_flags(table, 0, 0, out, err, sizeof(err)) == 0, "training lookup: %s", err);
    /* Trainer 0's context is open: an evaluation is still taken ... */
    CHECK(lookup_flags(table, 0, EMBER_LOOKUP_EVAL, eval, err, sizeof(err)) == 0,
          "evaluation over an open context: %s", err);
    CHECK(memcmp(out, eval, sizeof(out)) == 0, "an evaluation pools other values");
    CHECK(lookup_flags(table, 1, EMBER_LOOKUP_EVAL, eval, err, sizeof(err)) == 0, "%s", err);
    CHECK(memcmp(out, eval, sizeof(out)) == 0, "trainer 1's evaluation pools other values");
    /* ... trainer 1's left no context ... */
    ember_msg_grad_t msg = {
            .table_id = 1, .trainer = 1, .step = 0, .flags = EMBER_GRAD_APPLY, .bags = BAGS};
    make_grad(g, 3);
    ember_wire_grad_view_t view = test_grad_view(&msg, g, sizeof(g));
    CHECK(ember_shard_grad(table, &view, &applied, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "without a lookup"),
          "a gradient for an evaluation: %s", err);
    /* ... and trainer 0's context is the training lookup's: its gradient is
     * taken, and a second training lookup is refused until then. */
    CHECK(lookup_flags(table, 0, 0, out, err, sizeof(err)) == -1 && strstr(err, "not been given"),
          "a training lookup over an open context: %s", err);
    msg.trainer = 0;
    view = test_grad_view(&msg, g, sizeof(g));
    CHECK(ember_shard_grad(table, &view, &applied, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(applied == 0, "applied with one trainer of two");
    if (compare(table, before, before))
        return 1;
    ember_shard_destroy(table);
    return 0;
}

/* ember_shard_grad_check on @g refuses with @status and @needle, and the
 * table's rows are still @before. */
static int check_refuses(ember_shard_t *table, const ember_msg_grad_t *msg, const float *g,
                         size_t bytes, ember_status_t status, const char *needle,
                         const float *before)
{
    char err[256] = "";
    ember_wire_grad_view_t view = test_grad_view(msg, g, bytes);
    CHECK(ember_shard_grad_check(table, &view, err, sizeof(err)) == status && strstr(err, needle),
          "check: want %s and '%s', got '%s'", ember_status_string(status), needle, err);
    return compare(table, before, before);
}

static int case_grad_check(void)
{
    ember_shard_t *table = make_table(EMBER_SYNC, 2);
    float before[ROWS * DIM], out[BAGS * DIM], g[BAGS * DIM + 1];
    char err[256];
    int applied = -1;
    CHECK(table, "table");
    CHECK(ember_shard_read(table, 0, ROWS, before, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(lookup_flags(table, 0, 0, out, err, sizeof(err)) == 0, "%s", err);
    make_grad(g, 5);
    ember_msg_grad_t msg = {
            .table_id = 1, .trainer = 0, .step = 0, .flags = EMBER_GRAD_APPLY, .bags = BAGS};
    g[7] = NAN;
    if (check_refuses(table, &msg, g, BAGS * DIM * 4, EMBER_ERR_NUMERIC, "non-finite", before))
        return 1;
    g[7] = 0.5f;
    if (check_refuses(table, &msg, g, BAGS * DIM * 4 + 4, EMBER_ERR_BAD_MESSAGE, "bags", before))
        return 1;
    msg.step = 1;
    if (check_refuses(table, &msg, g, BAGS * DIM * 4, EMBER_ERR_INVALID_PARAM, "without a lookup",
                      before))
        return 1;
    msg.step = 0;
    /* The NaN's check left the context open (ember_shard_grad would void
     * it): the gradient now passes, then is taken. */
    ember_wire_grad_view_t view = test_grad_view(&msg, g, BAGS * DIM * 4);
    CHECK(ember_shard_grad_check(table, &view, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_shard_grad(table, &view, &applied, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(applied == 0, "applied with one trainer of two");
    /* A second lookup of the step (the PS's step check is not the
     * table's): its gradient finds the first one waiting. */
    CHECK(lookup_flags(table, 0, 0, out, err, sizeof(err)) == 0, "%s", err);
    if (check_refuses(table, &msg, g, BAGS * DIM * 4, EMBER_ERR_INVALID_PARAM, "already waiting",
                      before))
        return 1;
    ember_shard_destroy(table);
    return 0;
}

/* @v rounded to fp16 and widened back, in place. */
static void round_half(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = ember_half_to_float(ember_float_to_half(v[i]));
}

/* The fp16 case's sharded table. */
enum {
    FP_ROWS = 301,
    FP_DIM = 21,
    FP_SHARDS = 2
};
static const uint64_t fp_seed = 11;

/* A shard's initial rows are the N(0, 1) values rounded, in half the bytes. */
static int fp16_initial(ember_shard_t *table, uint32_t shard)
{
    float *local = malloc(FP_ROWS * FP_DIM * sizeof(float));
    char err[256];
    CHECK(local, "out of memory");
    int64_t rows = ember_shard_local_rows(table);
    CHECK(ember_shard_bytes(table) == (size_t)rows * FP_DIM * 2, "%zu bytes for %lld rows",
          ember_shard_bytes(table), (long long)rows);
    CHECK(ember_shard_read(table, 0, rows, local, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (int64_t l = 0; l < rows; l++) {
        uint64_t row = (uint64_t)l * FP_SHARDS + shard;
        for (uint32_t d = 0; d < FP_DIM; d++) {
            float want = ember_half_to_float(
                    ember_float_to_half(ember_normal_at(fp_seed, row * FP_DIM + d)));
            CHECK(local[l * FP_DIM + d] == want, "shard %u row %llu col %u: %g, want %g", shard,
                  (unsigned long long)row, d, (double)local[l * FP_DIM + d], (double)want);
        }
    }
    free(local);
    return 0;
}

/* Loads round; the rows of the other shard are left alone. */
static int fp16_load_rounds(ember_shard_t *table, uint32_t shard)
{
    float values[4 * FP_DIM], back[FP_DIM];
    char err[256];
    for (size_t i = 0; i < 4 * FP_DIM; i++)
        values[i] = 1.0f + (float)i * 0x1p-13f; /* steps finer than fp16 near 1 */
    CHECK(ember_shard_load(table, 10, 4, values, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (int64_t row = 10; row < 14; row++) {
        if ((uint64_t)row % FP_SHARDS != shard)
            continue;
        CHECK(ember_shard_read(table, row / FP_SHARDS, 1, back, err, sizeof(err)) == EMBER_OK, "%s",
              err);
        for (uint32_t d = 0; d < FP_DIM; d++) {
            float want = values[(row - 10) * FP_DIM + d];
            round_half(&want, 1);
            CHECK(back[d] == want, "loaded row %lld col %u: %g, want %g", (long long)row, d,
                  (double)back[d], (double)want);
        }
    }
    return 0;
}

/* A value fp16 cannot hold refuses the whole load, naming it; 65519 still
 * rounds to 65504. */
static int fp16_load_refused(ember_shard_t *table, uint32_t shard)
{
    float values[4 * FP_DIM], back[FP_DIM];
    float before_load[4 * FP_DIM], after_load[4 * FP_DIM];
    int64_t local_first = 20 / FP_SHARDS;
    char err[256];
    CHECK(ember_shard_read(table, local_first, 4, before_load, err, sizeof(err)) == EMBER_OK, "%s",
          err);
    for (size_t i = 0; i < 4 * FP_DIM; i++)
        values[i] = 0.5f;
    values[3 * FP_DIM + 5] = 65520.0f; /* row 23 */
    values[0] = 65519.0f;
    ember_status_t st = ember_shard_load(table, 20, 4, values, err, sizeof(err));
    if (23 % FP_SHARDS == shard) {
        CHECK(st == EMBER_ERR_OUT_OF_RANGE && strstr(err, "table t: row 23 col 5: 65520"),
              "shard %u: load of 65520: %s", shard, err);
        CHECK(ember_shard_read(table, local_first, 4, after_load, err, sizeof(err)) == EMBER_OK &&
                      memcmp(before_load, after_load, sizeof(after_load)) == 0,
              "a refused load changed rows");
    } else {
        CHECK(st == EMBER_OK, "shard %u: a row it does not own was checked: %s", shard, err);
        CHECK(ember_shard_read(table, 10, 1, back, err, sizeof(err)) == EMBER_OK &&
                      back[0] == 65504.0f,
              "65519 loaded as %g", (double)back[0]);
    }
    return 0;
}

/* Lookups and SGD steps on the test's batch: each step the fp32 step on the
 * widened rows, rounded once. */
static int fp16_steps(int weighted)
{
    ember_shard_t *table = make_table(EMBER_ASYNC, 1);
    float before[ROWS * DIM], reference[ROWS * DIM], g[BAGS * DIM];
    char err[256];
    CHECK(table, "table");
    bag_indices = step_indices;
    for (int step = 0; step < 3; step++) {
        CHECK(ember_shard_read(table, 0, ROWS, before, err, sizeof(err)) == EMBER_OK, "%s", err);
        memcpy(reference, before, sizeof(before));
        if (lookup(table, weighted, 0, before))
            return 1;
        make_grad(g, 300 + (uint64_t)step);
        int applied = 0;
        if (push(table, 0, g, 0, &applied) || reference_step(reference, weighted, g))
            return 1;
        CHECK(applied, "not applied");
        round_half(reference, ROWS * DIM);
        float now[ROWS * DIM];
        CHECK(ember_shard_read(table, 0, ROWS, now, err, sizeof(err)) == EMBER_OK, "%s", err);
        for (size_t i = 0; i < ROWS * DIM; i++)
            CHECK(now[i] == reference[i], "weighted %d step %d row %zu col %zu: %a, want %a",
                  weighted, step, i / DIM, i % DIM, (double)now[i], (double)reference[i]);
    }
    ember_shard_destroy(table);
    return 0;
}

static int case_fp16_rows(void)
{
    shard_dtype = EMBER_DTYPE_F16;
    for (uint32_t shard = 0; shard < FP_SHARDS; shard++) {
        ember_shard_t *table =
                make_shard(EMBER_ASYNC, 1, FP_ROWS, FP_DIM, shard, FP_SHARDS, fp_seed);
        CHECK(table, "shard %u", shard);
        if (fp16_initial(table, shard) || fp16_load_rounds(table, shard) ||
            fp16_load_refused(table, shard))
            return 1;
        ember_shard_destroy(table);
    }
    for (int weighted = 0; weighted <= 1; weighted++) {
        if (fp16_steps(weighted))
            return 1;
    }
    shard_dtype = EMBER_DTYPE_F32;
    return 0;
}

static int case_bad_dtype(void)
{
    ember_msg_table_create_t spec;
    ember_shard_t *table = NULL;
    char err[256];
    memset(&spec, 0, sizeof(spec));
    spec.num_shards = 1;
    spec.trainers = 1;
    spec.rows = 10;
    spec.dim = 4;
    spec.dtype = EMBER_DTYPE_BF16;
    ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
    snprintf(spec.name, sizeof(spec.name), "clicks");
    CHECK(ember_shard_create(&spec, NULL, &table, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  !table,
          "a bf16 table was created");
    CHECK(strstr(err, "table clicks") && strstr(err, "dtype 3"), "message: %s", err);
    return 0;
}

static int case_empty_shard(void)
{
    static const ember_opt_kind_t kinds[] = {EMBER_OPT_SGD, EMBER_OPT_ADAGRAD,
                                             EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        ember_msg_table_create_t spec = {.table_id = 1,
                                         .shard = 3,
                                         .num_shards = 4,
                                         .trainers = 1,
                                         .rows = 3,
                                         .dim = 4,
                                         .consistency = EMBER_SYNC,
                                         .init = EMBER_INIT_NORMAL,
                                         .seed = 1};
        ember_shard_t *table = NULL;
        char err[256];
        ember_opt_config_default(kinds[k], LR, &spec.optimizer);
        snprintf(spec.name, sizeof(spec.name), "tiny");
        CHECK(ember_shard_create(&spec, NULL, &table, err, sizeof(err)) == EMBER_OK,
              "%s: create: %s", ember_opt_kind_name(kinds[k]), err);
        CHECK(ember_shard_local_rows(table) == 0, "%lld local rows",
              (long long)ember_shard_local_rows(table));
        /* Two bags, none of whose entries is on this shard. */
        static const uint32_t none[2] = {0, 0};
        ember_wire_lookup_t lookup = {.head = {.table_id = 1, .trainer = 0, .step = 0, .bags = 2},
                                      .counts = none};
        float out[8], grad[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        memset(out, 0xff, sizeof(out));
        uint8_t message[sizeof(ember_msg_lookup_t) + sizeof(none)];
        ember_wire_lookup_view_t view;
        CHECK(pack_view(&lookup, message, &view, err, sizeof(err)) == EMBER_OK,
              "lookup message: %s", err);
        CHECK(ember_shard_lookup(table, &view, out, err, sizeof(err)) == EMBER_OK, "lookup: %s",
              err);
        for (size_t i = 0; i < 8; i++)
            CHECK(out[i] == 0.0f, "out[%zu] = %g", i, (double)out[i]);
        ember_msg_grad_t g = {
                .table_id = 1, .trainer = 0, .step = 0, .flags = EMBER_GRAD_APPLY, .bags = 2};
        int applied = 0;
        ember_wire_grad_view_t grad_view = test_grad_view(&g, grad, sizeof(grad));
        CHECK(ember_shard_grad(table, &grad_view, &applied, err, sizeof(err)) == EMBER_OK,
              "grad: %s", err);
        CHECK(applied && ember_shard_next_step(table) == 1, "step not applied");
        CHECK(ember_shard_read(table, 0, 0, out, err, sizeof(err)) == EMBER_OK,
              "read of 0 rows: %s", err);
        CHECK(ember_shard_read(table, 0, 1, out, err, sizeof(err)) != EMBER_OK,
              "a read past the shard's 0 rows succeeded");
        ember_shard_destroy(table);
    }
    /* A dense parameter still needs rows. */
    ember_opt_config_t cfg;
    ember_opt_t *opt = NULL;
    ember_opt_config_default(EMBER_OPT_SGD, LR, &cfg);
    CHECK(ember_opt_create(&cfg, 0, 4, EMBER_OPT_DENSE, &opt) != EMBER_OK,
          "a dense optimizer of 0 rows was created");
    return 0;
}

static int unused_rows_once(ember_consistency_t consistency)
{
    ember_shard_t *table = make_table(consistency, 1);
    enum {
        SENT = 12
    };
    static const int64_t sent[SENT] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23};
    const uint32_t counts[1] = {1};
    const int64_t inverse[1] = {4}; /* row 9 */
    float before[ROWS * DIM], now[ROWS * DIM], out[DIM], grad[DIM];
    uint8_t message[512];
    char err[256];
    CHECK(table, "table");
    CHECK(ember_shard_read(table, 0, ROWS, before, err, sizeof(err)) == EMBER_OK, "%s", err);
    ember_wire_lookup_t lookup = {.head = {.table_id = 1,
                                           .trainer = 0,
                                           .step = 0,
                                           .bags = 1,
                                           .unique = SENT,
                                           .indices = 1},
                                  .counts = counts,
                                  .rows = sent,
                                  .inverse = inverse};
    ember_wire_lookup_view_t view;
    CHECK(pack_view(&lookup, message, &view, err, sizeof(err)) == EMBER_OK, "lookup: %s", err);
    CHECK(ember_shard_lookup(table, &view, out, err, sizeof(err)) == EMBER_OK, "lookup: %s", err);
    CHECK(memcmp(out, before + 9 * DIM, sizeof(out)) == 0, "the bag is not row 9");
    for (size_t d = 0; d < DIM; d++)
        grad[d] = (float)d + 1.0f;
    ember_msg_grad_t g = {
            .table_id = 1, .trainer = 0, .step = 0, .flags = EMBER_GRAD_APPLY, .bags = 1};
    ember_wire_grad_view_t grad_view = test_grad_view(&g, grad, sizeof(grad));
    int applied = 0;
    CHECK(ember_shard_grad(table, &grad_view, &applied, err, sizeof(err)) == EMBER_OK, "grad: %s",
          err);
    CHECK(applied, "not applied");
    CHECK(ember_shard_read(table, 0, ROWS, now, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (size_t r = 0; r < ROWS; r++)
        for (size_t d = 0; d < DIM; d++) {
            float want = before[r * DIM + d] - (r == 9 ? LR * grad[d] : 0.0f);
            CHECK(now[r * DIM + d] == want, "%s: row %zu col %zu: %g, want %g",
                  consistency == EMBER_SYNC ? "sync" : "async", r, d, (double)now[r * DIM + d],
                  (double)want);
        }
    ember_shard_destroy(table);
    return 0;
}

static int case_unused_rows(void)
{
    return unused_rows_once(EMBER_SYNC) || unused_rows_once(EMBER_ASYNC);
}

static int case_huge_alloc(void)
{
    static const size_t sizes[] = {0, 100, (2u << 20) - 1, 2u << 20, (5u << 20) + 3};
    for (int round = 0; round < 2; round++) {
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t bytes = sizes[k];
            unsigned char *p = ember_huge_alloc(bytes, 1);
            CHECK(p, "%zu bytes: no memory", bytes);
            CHECK((uintptr_t)p % 16 == 0, "%zu bytes at %p: not 16-byte aligned", bytes, (void *)p);
            if (bytes >= (2u << 20)) {
                CHECK((uintptr_t)p % (2u << 20) == 0,
                      "%zu bytes at %p: not on a 2 MiB "
                      "boundary",
                      bytes, (void *)p);
                /* Faulted in at allocation, not by the training steps. */
                size_t pages = (bytes + 4095) / 4096, resident = 0;
                unsigned char *in_core = malloc(pages);
                CHECK(in_core && mincore(p, bytes, in_core) == 0, "%zu bytes: mincore", bytes);
                for (size_t i = 0; i < pages; i++)
                    resident += in_core[i] & 1;
                free(in_core);
                CHECK(resident == pages,
                      "%zu bytes: %zu of %zu pages resident after a "
                      "zeroed allocation",
                      bytes, resident, pages);
            }
            for (size_t i = 0; i < bytes; i++)
                CHECK(p[i] == 0, "%zu bytes: byte %zu is %u, not zero", bytes, i, p[i]);
            memset(p, 0xa5, bytes);
            /* Not zeroed on request: still usable, whatever it holds. */
            unsigned char *q = ember_huge_alloc(bytes, 0);
            CHECK(q, "%zu bytes: no memory", bytes);
            memset(q, 0x5a, bytes);
            for (size_t i = 0; i < bytes; i += 4093)
                CHECK(p[i] == 0xa5, "%zu bytes: the second block overlaps the first", bytes);
            ember_huge_free(q);
            ember_huge_free(p);
        }
    }
    ember_huge_free(NULL);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"empty_shard", case_empty_shard},     {"grad_sum", case_grad_sum},
            {"grad_weighted", case_grad_weighted}, {"grad_sync", case_grad_sync},
            {"init_normal", case_init_normal},     {"fp16_rows", case_fp16_rows},
            {"bad_dtype", case_bad_dtype},         {"unused_rows", case_unused_rows},
            {"huge_alloc", case_huge_alloc},       {"init_uniform", case_init_uniform},
            {"eval_lookup", case_eval_lookup},     {"grad_check", case_grad_check},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
