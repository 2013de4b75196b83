/*
 * tests/cuda: the fused EmbeddingBag backward + optimizer step
 * (bag_backward_update) of the CUDA backend against the CPU's reference
 * (ember_bag_backward then ember_opt_step_sparse: the CPU slot's
 * composition), every pooling mode, optimizer and dim of
 * tests/engine/bag_update_cases.h, UPD_STEPS steps in a row; and two
 * runs of the same steps bit for bit the same.
 *
 * Uniform batches (segments short, one sub-segment: the CPU's summation
 * order, only nvcc's fused multiply-adds differ): within 1e-5 relative.
 * Zipf batches (hot rows' segments split into BAG_UPDATE_SUB partials):
 * within 1e-4 (1 + |reference|), the bound the CPU twin's test
 * (tests/engine/test_bag_update.c) explains.  Exits 77 without a GPU.
 */
#include <ember/device.h>
#include <ember/log.h>

#include "tests/engine/bag_update_cases.h"

#include <stdlib.h>
#include <string.h>

static ember_device_t *gpu;
static const ember_device_ops_t *G;

/* Device copies (freed by gfree_all). */
static void *allocs[32];
static int nallocs;
static void *up(const void *host, size_t bytes)
{
    void *p = NULL;
    if (nallocs == 32 || G->mem_alloc(gpu, bytes ? bytes : 1, &p) != EMBER_OK)
        return NULL;
    allocs[nallocs++] = p;
    if (host && bytes && G->mem_copy(gpu, p, host, bytes, EMBER_COPY_HOST_TO_DEVICE) != EMBER_OK)
        return NULL;
    return p;
}
static void gfree_all(void)
{
    for (int i = 0; i < nallocs; i++)
        G->mem_free(gpu, allocs[i]);
    nallocs = 0;
}

static size_t state_bytes(const ember_opt_state_t *s)
{
    return s->rows * s->per_row * (s->dtype == EMBER_DTYPE_U8 ? 1 : 4);
}

/* @o's state pointers moved to device copies of @opt's arrays. */
static int state_up(ember_opt_t *opt, ember_device_opt_t *o, void **dev_p, size_t *ns_p)
{
    ember_opt_state_t st[EMBER_OPT_STATE_MAX];
    size_t ns = ember_opt_state_arrays(opt, st);
    for (size_t i = 0; i < ns; i++) {
        if (!(dev_p[i] = up(st[i].data, state_bytes(&st[i]))))
            return 0;
        if (o->state0 == st[i].data)
            o->state0 = dev_p[i];
        else if (o->state1 == st[i].data)
            o->state1 = dev_p[i];
        else if ((void *)o->started == st[i].data)
            o->started = dev_p[i];
        else if ((void *)o->row_step == st[i].data)
            o->row_step = dev_p[i];
    }
    *ns_p = ns;
    return 1;
}

static int state_down(ember_opt_t *opt, void *const *dev_p)
{
    ember_opt_state_t st[EMBER_OPT_STATE_MAX];
    size_t ns = ember_opt_state_arrays(opt, st);
    for (size_t i = 0; i < ns; i++)
        if (G->mem_copy(gpu, st[i].data, dev_p[i], state_bytes(&st[i]),
                        EMBER_COPY_DEVICE_TO_HOST) != EMBER_OK)
            return 0;
    return 1;
}

/* One step of @b on the GPU's table @dtable and state. */
static int gpu_step(float *dtable, const ember_device_opt_t *o, const upd_batch_t *b)
{
    const size_t n = b->n, bags = b->bags, dim = b->dim;
    ember_bag_batch_t batch = b->batch;
    batch.indices = up(b->indices, n * sizeof(int64_t));
    batch.offsets = up(b->offsets, bags * sizeof(int64_t));
    batch.weights = b->batch.weights ? up(b->weights, n * sizeof(float)) : NULL;
    const float *go = up(b->grad_out, bags * dim * sizeof(float));
    const int64_t *am = b->opts.mode == EMBER_BAG_MAX ? up(b->argmax, bags * dim * 8) : NULL;
    if (!batch.indices || !batch.offsets || !go)
        return 0;
    ember_status_t st =
            G->bag_backward_update(gpu, dtable, UPD_ROWS, dim, &batch, &b->opts, go, am, o);
    /* The batch's copies are freed after the step completed. */
    return st == EMBER_OK && G->synchronize(gpu) == EMBER_OK;
}

/* UPD_STEPS steps by the reference and by the GPU (@runs times from the
 * same start); the GPU's result against the reference, and its runs
 * against each other bit for bit. */
static int run_case(const upd_pool_t *pool, const upd_optim_t *optim, size_t dim, int zipf)
{
    const size_t tbytes = (size_t)UPD_ROWS * dim * sizeof(float);
    ember_opt_config_t cfg;
    ember_opt_t *ref = NULL, *got[2] = {NULL, NULL};
    upd_config(optim, &cfg);
    float *t0 = upd_table(dim), *t_ref = malloc(tbytes),
          *t_got[2] = {malloc(tbytes), malloc(tbytes)};
    upd_batch_t b[UPD_STEPS];
    int ok = t0 && t_ref && t_got[0] && t_got[1] &&
             ember_opt_create(&cfg, UPD_ROWS, dim, EMBER_OPT_SPARSE, &ref) == 0 &&
             ember_opt_create(&cfg, UPD_ROWS, dim, EMBER_OPT_SPARSE, &got[0]) == 0 &&
             ember_opt_create(&cfg, UPD_ROWS, dim, EMBER_OPT_SPARSE, &got[1]) == 0;
    if (ok)
        memcpy(t_ref, t0, tbytes);
    for (int s = 0; s < UPD_STEPS; s++)
        ok = ok && upd_batch_draw(&b[s], pool, dim, zipf, t_ref) &&
             upd_reference_step(ref, t_ref, &b[s]);
    for (int run = 0; ok && run < 2; run++) {
        void *dstate[EMBER_OPT_STATE_MAX];
        size_t ns = 0;
        float *dtable = up(t0, tbytes);
        ember_device_opt_t o = upd_device_opt(&cfg, got[run], 1);
        ok = dtable && state_up(got[run], &o, dstate, &ns);
        for (int s = 0; ok && s < UPD_STEPS; s++) {
            o.step = (uint64_t)s + 1;
            ok = gpu_step(dtable, &o, &b[s]);
        }
        ok = ok && G->mem_copy(gpu, t_got[run], dtable, tbytes, EMBER_COPY_DEVICE_TO_HOST) == 0 &&
             state_down(got[run], dstate);
        gfree_all();
    }
    char what[96];
    snprintf(what, sizeof(what), "%s %s dim %zu%s", pool->name, optim->name, dim,
             zipf ? " zipf" : "");
    ok = ok && upd_compare(t_got[0], t_ref, got[0], ref, dim, zipf ? 1e-4 : 1e-5, what) &&
         upd_compare(t_got[1], t_got[0], got[1], got[0], dim, 0.0, what);
    for (int s = 0; s < UPD_STEPS; s++)
        upd_batch_free(&b[s]);
    ember_opt_destroy(ref);
    ember_opt_destroy(got[0]);
    ember_opt_destroy(got[1]);
    free(t0);
    free(t_ref);
    free(t_got[0]);
    free(t_got[1]);
    return ok;
}

/* Every pooling of @mode's family, every optimizer, every dim. */
static int run_mode(ember_bag_mode_t mode, int zipf)
{
    for (size_t p = 0; p < UPD_NPOOLS; p++) {
        if (upd_pools[p].mode != mode)
            continue;
        for (size_t o = 0; o < UPD_NOPTIMS; o++)
            for (size_t d = 0; d < UPD_NDIMS; d++)
                CHECK(run_case(&upd_pools[p], &upd_optims[o], upd_dims[d], zipf), "%s %s dim %zu",
                      upd_pools[p].name, upd_optims[o].name, upd_dims[d]);
    }
    return 0;
}

static int t_sum(void)
{
    return run_mode(EMBER_BAG_SUM, 0);
}
static int t_mean(void)
{
    return run_mode(EMBER_BAG_MEAN, 0);
}
static int t_max(void)
{
    return run_mode(EMBER_BAG_MAX, 0);
}
static int t_zipf(void)
{
    return run_mode(EMBER_BAG_SUM, 1) || run_mode(EMBER_BAG_MEAN, 1) || run_mode(EMBER_BAG_MAX, 1);
}

/* Refusals: missing state names what is missing; nothing is touched. */
static int t_errors(void)
{
    float host[4] = {1, 2, 3, 4}, go[2] = {1, 1};
    int64_t idx[1] = {1}, off[1] = {0};
    float *table = up(host, sizeof(host)), *dgo = up(go, sizeof(go));
    ember_bag_batch_t batch = {.n = 1, .bags = 1};
    batch.indices = up(idx, sizeof(idx));
    batch.offsets = up(off, sizeof(off));
    const ember_bag_opts_t opts = {.mode = EMBER_BAG_SUM, .padding_idx = -1};
    ember_device_opt_t o = {.kind = 3, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .step = 1};
    CHECK(G->bag_backward_update(gpu, table, 2, 2, &batch, &opts, dgo, NULL, &o) ==
                  EMBER_ERR_INVALID_PARAM,
          "Adam without state");
    o.kind = 9;
    CHECK(G->bag_backward_update(gpu, table, 2, 2, &batch, &opts, dgo, NULL, &o) ==
                  EMBER_ERR_INVALID_PARAM,
          "unknown kind");
    o = (ember_device_opt_t){.kind = 0, .lr = 0.5f, .step = 1};
    CHECK(G->bag_backward_update(gpu, table, 2, 2, &batch, &opts, dgo, NULL, &o) == EMBER_OK,
          "plain SGD");
    CHECK(G->mem_copy(gpu, host, table, sizeof(host), EMBER_COPY_DEVICE_TO_HOST) == EMBER_OK,
          "copy back");
    CHECK(host[0] == 1.0f && host[2] == 2.5f && host[3] == 3.5f, "SGD on row 1 only");
    gfree_all();
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"sum", t_sum},   {"mean", t_mean},     {"max", t_max},
            {"zipf", t_zipf}, {"errors", t_errors},
    };
    ember_log_init();
    if (argc >= 2 && ember_device_cuda_count() <= 0) {
        fprintf(stderr, "SKIP %s: no CUDA GPU visible\n", argv[1]);
        return 77;
    }
    if (argc >= 2 && ember_device_open("cuda", 0, &gpu) != EMBER_OK)
        return 1;
    G = gpu ? ember_device_ops(gpu) : NULL;
    int rc = test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
    ember_device_close(gpu);
    return rc;
}
