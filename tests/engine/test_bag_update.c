/*
 * tests/engine: the fused EmbeddingBag backward + optimizer step.  The CPU
 * twin of the CUDA kernel (engine/ops/bag_update.h's per-row loop over
 * sorted segments) and the CPU device slot against the reference
 * (ember_bag_backward, then ember_opt_step_sparse), every pooling mode and
 * optimizer, dims 1..256, UPD_STEPS steps in a row (so started flags and
 * per-row steps carry over).
 *
 * Bit-identical where the twin sums in the reference's order: segments of
 * at most `sub` entries, or sub = SIZE_MAX.  With sub = BAG_UPDATE_SUB on
 * a Zipf batch, hot rows' segments are split and their partials added in
 * order: a different association of the same float sums, so within float
 * rounding rather than bit for bit.  The bound is 1e-4 (1 + |reference|):
 * a hot row sums ~1000 contributions of magnitude <= 1 that mostly cancel,
 * so reassociating moves the result by ~sqrt(n) eps |partial sums|, about
 * 2e-5 absolute on values of 0.1 (seen: 1.8e-5 on a momentum of 0.17).
 */
#include <ember/device.h>

#include "engine/ops/bag_update.h"
#include "tests/engine/bag_update_cases.h"

#include <inttypes.h>
#include <stdlib.h>

/* The stand-in for the GPU's radix sort: positions ordered by (row,
 * position), padding left out. */
static const int64_t *sort_rows;
static int by_row_pos(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (sort_rows[x] != sort_rows[y])
        return sort_rows[x] < sort_rows[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* Each position's bag (-1 before the first), and the mean's scales. */
static void twin_bags(const upd_batch_t *b, int *bag_of, float *scale)
{
    for (size_t g = 0, i = 0; i < b->n; i++) {
        while (g < b->bags && (size_t)b->offsets[g] <= i)
            g++;
        bag_of[i] = (int)g - 1;
    }
    for (size_t g = 0; g < b->bags; g++) {
        size_t end = g + 1 < b->bags ? (size_t)b->offsets[g + 1] : b->n, count = 0;
        for (size_t i = (size_t)b->offsets[g]; i < end; i++)
            count += b->indices[i] != b->opts.padding_idx;
        scale[g] = count ? 1.0f / (float)count : 0.0f;
    }
}

/* A batch's entries as the GPU's sort leaves them, and what the per-row
 * step reads. */
typedef struct {
    int *pos, *bag_of;
    float *scale;
    size_t m; /* non-padding entries */
    bag_update_src_t src;
} twin_t;

static void twin_free(twin_t *t)
{
    free(t->pos);
    free(t->bag_of);
    free(t->scale);
}

static int twin_build(twin_t *t, const upd_batch_t *b, size_t sub)
{
    const size_t n = b->n;
    t->pos = malloc((n + 1) * sizeof(int));
    t->bag_of = malloc((n + 1) * sizeof(int));
    t->scale = malloc((b->bags + 1) * sizeof(float));
    if (!t->pos || !t->bag_of || !t->scale)
        return 0;
    t->m = 0;
    for (size_t i = 0; i < n; i++)
        if (b->indices[i] != b->opts.padding_idx)
            t->pos[t->m++] = (int)i;
    sort_rows = b->indices;
    qsort(t->pos, t->m, sizeof(int), by_row_pos);
    twin_bags(b, t->bag_of, t->scale);
    t->src = (bag_update_src_t){.pos = t->pos,
                                .bag_of = t->bag_of,
                                .grad_out = b->grad_out,
                                .weights = b->batch.weights,
                                .mean_scale = t->scale,
                                .argmax = b->argmax,
                                .mode = (int)b->opts.mode,
                                .dim = b->dim,
                                .sub = sub};
    return 1;
}

/* The end of the segment that starts at @begin. */
static size_t twin_segment_end(const twin_t *t, const int64_t *indices, size_t begin)
{
    size_t end = begin + 1;
    while (end < t->m && indices[t->pos[end]] == indices[t->pos[begin]])
        end++;
    return end;
}

/* The kernels' algorithm on the host: one call of the twin per segment.
 * *@longest_p: the longest segment seen. */
static int twin_step(float *table, const ember_device_opt_t *o, const upd_batch_t *b, size_t sub,
                     size_t *longest_p)
{
    twin_t t;
    float *g = malloc(b->dim * sizeof(float));
    int ok = g && twin_build(&t, b, sub);
    const float clr = o->kind == BAG_OPT_ADAGRAD ? bag_update_adagrad_clr(o) : 0.0f;
    for (size_t begin = 0, end; ok && begin < t.m; begin = end) {
        end = twin_segment_end(&t, b->indices, begin);
        if (end - begin > *longest_p)
            *longest_p = end - begin;
        bag_update_row_host(&t.src, o, clr, table, b->indices[t.pos[begin]], begin, end, g);
    }
    if (ok)
        twin_free(&t);
    free(g);
    return ok;
}

/* How a case applies one step to the table under test. */
typedef struct {
    int twin; /* 1: the twin with @sub; 0: the CPU device slot */
    size_t sub;
    int zipf;
    double rtol; /* 0: bit for bit */
    size_t longest;
    ember_device_t *dev;
} runner_t;

static int apply_step(runner_t *r, float *table, const ember_device_opt_t *o, const upd_batch_t *b)
{
    if (r->twin)
        return twin_step(table, o, b, r->sub, &r->longest);
    const ember_device_ops_t *ops = ember_device_ops(r->dev);
    return ops->bag_backward_update(r->dev, table, UPD_ROWS, b->dim, &b->batch, &b->opts,
                                    b->grad_out, b->argmax, o) == EMBER_OK;
}

/* UPD_STEPS steps of one case by the reference and by @r; compared. */
static int run_case(runner_t *r, const upd_pool_t *pool, const upd_optim_t *optim, size_t dim)
{
    ember_opt_config_t cfg;
    ember_opt_t *ref = NULL, *got = NULL;
    upd_config(optim, &cfg);
    float *t_ref = upd_table(dim), *t_got = malloc((size_t)UPD_ROWS * dim * sizeof(float));
    int ok = t_ref && t_got && ember_opt_create(&cfg, UPD_ROWS, dim, EMBER_OPT_SPARSE, &ref) == 0 &&
             ember_opt_create(&cfg, UPD_ROWS, dim, EMBER_OPT_SPARSE, &got) == 0;
    if (ok)
        memcpy(t_got, t_ref, (size_t)UPD_ROWS * dim * sizeof(float));
    for (uint64_t step = 1; ok && step <= UPD_STEPS; step++) {
        upd_batch_t b;
        ok = upd_batch_draw(&b, pool, dim, r->zipf, t_ref) && upd_reference_step(ref, t_ref, &b);
        ember_device_opt_t o = upd_device_opt(&cfg, got, step);
        ok = ok && apply_step(r, t_got, &o, &b);
        upd_batch_free(&b);
    }
    char what[96];
    snprintf(what, sizeof(what), "%s %s dim %zu", pool->name, optim->name, dim);
    ok = ok && upd_compare(t_got, t_ref, got, ref, dim, r->rtol, what);
    ember_opt_destroy(ref);
    ember_opt_destroy(got);
    free(t_ref);
    free(t_got);
    return ok;
}

static int run_all(runner_t *r)
{
    for (size_t p = 0; p < UPD_NPOOLS; p++)
        for (size_t o = 0; o < UPD_NOPTIMS; o++)
            for (size_t d = 0; d < UPD_NDIMS; d++)
                CHECK(run_case(r, &upd_pools[p], &upd_optims[o], upd_dims[d]), "%s %s dim %zu",
                      upd_pools[p].name, upd_optims[o].name, upd_dims[d]);
    return 0;
}

/* Uniform rows: segments short; even with sub-segments the sums are the
 * reference's wherever a segment fits one; SIZE_MAX makes all of them. */
static int case_twin_exact(void)
{
    runner_t r = {.twin = 1, .sub = SIZE_MAX, .rtol = 0.0};
    return run_all(&r);
}

/* Zipf rows, sub-segments unsplit: still the reference's bits. */
static int case_twin_zipf_exact(void)
{
    runner_t r = {.twin = 1, .sub = SIZE_MAX, .zipf = 1, .rtol = 0.0};
    CHECK(run_all(&r) == 0, "zipf, one sub-segment per row");
    CHECK(r.longest > 8 * BAG_UPDATE_SUB, "the Zipf batch's longest segment is only %zu",
          r.longest);
    return 0;
}

/* Zipf rows split into BAG_UPDATE_SUB sub-segments, as on the GPU. */
static int case_twin_zipf_split(void)
{
    runner_t r = {.twin = 1, .sub = BAG_UPDATE_SUB, .zipf = 1, .rtol = 1e-4};
    CHECK(run_all(&r) == 0, "zipf, split");
    CHECK(r.longest > 8 * BAG_UPDATE_SUB, "no segment was split (longest %zu)", r.longest);
    return 0;
}

/* Uniform rows with BAG_UPDATE_SUB: no segment is split, the same bits. */
static int case_twin_sub_exact(void)
{
    runner_t r = {.twin = 1, .sub = BAG_UPDATE_SUB, .rtol = 0.0};
    CHECK(run_all(&r) == 0, "uniform, sub %d", BAG_UPDATE_SUB);
    CHECK(r.longest <= BAG_UPDATE_SUB, "a uniform segment of %zu was split", r.longest);
    return 0;
}

/* A long segment's partials added in order (the GPU's split over warps)
 * give bag_acc_t's bits (one warp's sum by sub-segments): every mode, Zipf
 * batches, sub-segments of 1, 7 and BAG_UPDATE_SUB entries. */
static int case_twin_paths_same(void)
{
    static const size_t subs[] = {1, 7, BAG_UPDATE_SUB};
    float *table = upd_table(64);
    CHECK(table, "no memory");
    for (size_t p = 0; p < UPD_NPOOLS; p++) {
        for (size_t k = 0; k < sizeof(subs) / sizeof(subs[0]); k++) {
            upd_batch_t b;
            twin_t t;
            CHECK(upd_batch_draw(&b, &upd_pools[p], 64, 1, table) && twin_build(&t, &b, subs[k]),
                  "draw");
            size_t split = 0;
            for (size_t begin = 0, end; begin < t.m; begin = end) {
                end = twin_segment_end(&t, b.indices, begin);
                int64_t row = b.indices[t.pos[begin]];
                split += end - begin > subs[k];
                for (size_t e = 0; e < 64; e++) {
                    float x = bag_update_grad_host(&t.src, row, begin, end, e, 0);
                    float y = bag_update_grad_host(&t.src, row, begin, end, e, 1);
                    CHECK(memcmp(&x, &y, sizeof(x)) == 0,
                          "%s sub %zu row %" PRId64 "[%zu]: %.9g != %.9g", upd_pools[p].name,
                          subs[k], row, e, x, y);
                }
            }
            CHECK(split > 0, "no segment longer than %zu", subs[k]);
            twin_free(&t);
            upd_batch_free(&b);
        }
    }
    free(table);
    return 0;
}

/* The CPU device slot: the reference composed, so the same bits. */
static int case_cpu_slot(void)
{
    runner_t r = {.twin = 0, .zipf = 1, .rtol = 0.0};
    CHECK(ember_device_open("cpu", 0, &r.dev) == EMBER_OK, "open cpu");
    int rc = run_all(&r);
    ember_device_close(r.dev);
    return rc;
}

/* Missing state and unknown kinds are refused before anything changes. */
static int case_cpu_slot_errors(void)
{
    ember_device_t *dev;
    CHECK(ember_device_open("cpu", 0, &dev) == EMBER_OK, "open cpu");
    const ember_device_ops_t *ops = ember_device_ops(dev);
    float table[4] = {1, 2, 3, 4}, go[2] = {1, 1};
    int64_t idx[1] = {1}, off[1] = {0};
    const ember_bag_batch_t batch = {.indices = idx, .n = 1, .offsets = off, .bags = 1};
    const ember_bag_opts_t opts = {.mode = EMBER_BAG_SUM, .padding_idx = -1};
    ember_device_opt_t o = {
            .kind = BAG_OPT_ADAM, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .step = 1};
    CHECK(ops->bag_backward_update(dev, table, 2, 2, &batch, &opts, go, NULL, &o) ==
                  EMBER_ERR_INVALID_PARAM,
          "Adam without state");
    o.kind = 9;
    CHECK(ops->bag_backward_update(dev, table, 2, 2, &batch, &opts, go, NULL, &o) ==
                  EMBER_ERR_INVALID_PARAM,
          "unknown kind");
    CHECK(table[2] == 3.0f && table[3] == 4.0f, "the table changed on error");
    o = (ember_device_opt_t){.kind = BAG_OPT_SGD, .lr = 0.5f, .step = 1};
    CHECK(ops->bag_backward_update(dev, table, 2, 2, &batch, &opts, go, NULL, &o) == EMBER_OK,
          "plain SGD");
    CHECK(table[2] == 2.5f && table[3] == 3.5f && table[0] == 1.0f, "SGD step on row 1");
    ember_device_close(dev);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"twin_exact", case_twin_exact},           {"twin_sub_exact", case_twin_sub_exact},
            {"twin_zipf_exact", case_twin_zipf_exact}, {"twin_zipf_split", case_twin_zipf_split},
            {"twin_paths_same", case_twin_paths_same}, {"cpu_slot", case_cpu_slot},
            {"cpu_slot_errors", case_cpu_slot_errors},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
