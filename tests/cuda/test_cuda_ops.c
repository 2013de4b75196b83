/*
 * tests/cuda: every CUDA op against the engine's CPU implementation on
 * random inputs, all pooling modes and edge cases, through the device
 * interface (include/ember/device.h), DLRM's and DLRM-DCN's interactions;
 * plus a single-rank NCCL allreduce.
 * GPU cases exit 77 (skip) when no GPU is visible; the device_* cases run
 * everywhere.
 */
#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>

#include "engine/ops/crossnet.h"
#include "engine/ops/dense.h"
#include "engine/ops/interaction.h"
#include "engine/ops/loss.h"
#include "tests/engine/test_util.h"

#ifdef EMBER_HAVE_TRANSPORT
#include "cuda/gpudirect.h"
#include <ucs/memory/memory_type.h>
#endif

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static ember_device_t *gpu;
static const ember_device_ops_t *G;

static uint64_t rng_state = 12345;
static double uni(double lo, double hi)
{
    return test_uniform(&rng_state, lo, hi);
}
static int64_t uint_below(int64_t n)
{
    int64_t v = (int64_t)uni(0.0, (double)n);
    return v >= n ? n - 1 : v;
}

/* Device copies of host arrays (freed by gfree_all). */
static void *allocs[64];
static int nallocs;
static void *up(const void *host, size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 1; /* a valid pointer even for empty arrays */
    if (G->mem_alloc(gpu, bytes, &p) != EMBER_OK)
        return NULL;
    if (host && G->mem_copy(gpu, p, host, bytes, EMBER_COPY_HOST_TO_DEVICE) != EMBER_OK)
        return NULL;
    allocs[nallocs++] = p;
    return p;
}
static void down(void *host, const void *dev, size_t bytes)
{
    if (bytes)
        G->mem_copy(gpu, host, dev, bytes, EMBER_COPY_DEVICE_TO_HOST);
}
static void gfree_all(void)
{
    for (int i = 0; i < nallocs; i++)
        G->mem_free(gpu, allocs[i]);
    nallocs = 0;
}

static int close_enough(const float *a, const float *b, size_t n, double rtol, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double tol = rtol * (1.0 + fabs((double)b[i]));
        if (!(fabs((double)a[i] - (double)b[i]) <= tol)) {
            fprintf(stderr, "FAIL %s[%zu]: gpu %.9g cpu %.9g\n", what, i, a[i], b[i]);
            return 0;
        }
    }
    return 1;
}

typedef struct {
    ember_bag_mode_t mode;
    size_t dim;
    int64_t rows;
    size_t bags;
    size_t max_len;
    int64_t pad; /* -1: none */
    int weights;
    double empty;    /* fraction of empty bags */
    double pad_frac; /* fraction of padding entries */
} bag_case_t;

/* One random batch of a bag case, on the host and on the device. */
typedef struct {
    const bag_case_t *c;
    size_t n, ob; /* entries; pooled outputs (bags x dim) */
    int64_t *offsets, *indices;
    float *weights, *table;
    ember_bag_batch_t hb, db; /* host, device */
    ember_bag_opts_t opts;
    float *d_table;
    int64_t *am_ref, *d_am; /* the forward's argmax, for the backward */
} bag_run_t;

/* The table and the bags: empty ones, padding, all-padding ones, as the
 * case asks. */
static void bag_draw(bag_run_t *r)
{
    const bag_case_t *c = r->c;
    size_t dim = c->dim, bags = c->bags;
    r->offsets = malloc((bags + 1) * sizeof(int64_t));
    r->indices = malloc((bags * c->max_len + 1) * sizeof(int64_t));
    r->weights = malloc((bags * c->max_len + 1) * sizeof(float));
    r->table = malloc((size_t)c->rows * dim * sizeof(float));
    for (int64_t i = 0; i < c->rows * (int64_t)dim; i++)
        r->table[i] = (float)uni(-1.0, 1.0);
    for (size_t b = 0; b < bags; b++) {
        r->offsets[b] = (int64_t)r->n;
        size_t len = uni(0, 1) < c->empty ? 0 : (size_t)uint_below((int64_t)c->max_len + 1);
        int all_pad = c->pad >= 0 && uni(0, 1) < 0.05;
        for (size_t k = 0; k < len; k++) {
            int64_t id = uint_below(c->rows);
            if (c->pad >= 0 && (all_pad || uni(0, 1) < c->pad_frac))
                id = c->pad;
            r->indices[r->n] = id;
            r->weights[r->n] = (float)uni(-2.0, 2.0);
            r->n++;
        }
    }
    r->hb = (ember_bag_batch_t){.indices = r->indices,
                                .n = r->n,
                                .offsets = r->offsets,
                                .bags = bags,
                                .weights = c->weights ? r->weights : NULL,
                                .n_weights = c->weights ? r->n : 0};
    r->opts = (ember_bag_opts_t){.mode = c->mode, .padding_idx = c->pad};
    r->ob = bags * dim;
}

/* The pooled outputs (and max's argmax) of both backends agree. */
static int bag_forward_same(bag_run_t *r)
{
    const bag_case_t *c = r->c;
    size_t dim = c->dim, ob = r->ob, n = r->n;
    char msg[256];
    CHECK(ember_bag_validate(&r->hb, &r->opts, c->rows, msg, sizeof(msg)) == EMBER_OK, "%s", msg);
    float *out_ref = calloc(ob + 1, sizeof(float)), *out = calloc(ob + 1, sizeof(float));
    int64_t *am = calloc(ob + 1, sizeof(int64_t));
    r->am_ref = calloc(ob + 1, sizeof(int64_t));
    const ember_bag_table_t cpu_table = {
            .data = r->table, .dtype = EMBER_DTYPE_F32, .rows = c->rows, .dim = dim};
    CHECK(ember_bag_forward(&cpu_table, &r->hb, &r->opts, out_ref, r->am_ref) == EMBER_OK,
          "cpu forward");

    r->d_table = up(r->table, (size_t)c->rows * dim * 4);
    r->db = r->hb;
    r->db.indices = up(r->indices, n * 8);
    r->db.offsets = up(r->offsets, c->bags * 8);
    r->db.weights = c->weights ? up(r->weights, n * 4) : NULL;
    float *d_out = up(NULL, ob * 4);
    r->d_am = c->mode == EMBER_BAG_MAX ? up(NULL, ob * 8) : NULL;
    CHECK(G->bag_forward(gpu, r->d_table, c->rows, dim, &r->db, &r->opts, d_out, r->d_am) ==
                  EMBER_OK,
          "gpu forward");
    down(out, d_out, ob * 4);
    int rc = !close_enough(out, out_ref, ob, 1e-5, "bag forward");
    if (rc == 0 && c->mode == EMBER_BAG_MAX) {
        down(am, r->d_am, ob * 8);
        for (size_t i = 0; i < ob; i++)
            CHECK(am[i] == r->am_ref[i], "argmax[%zu]: gpu %" PRId64 " cpu %" PRId64, i, am[i],
                  r->am_ref[i]);
    }
    free(out_ref);
    free(out);
    free(am);
    return rc;
}

/* The distinct rows, their gradients and the weights' gradients of both
 * backends agree. */
static int bag_backward_same(const bag_run_t *r)
{
    const bag_case_t *c = r->c;
    size_t dim = c->dim, ob = r->ob, n = r->n;
    float *go = malloc((ob + 1) * sizeof(float));
    for (size_t i = 0; i < ob; i++)
        go[i] = (float)uni(-1.0, 1.0);
    int64_t *rows_ref = malloc((n + 1) * 8), *rows = malloc((n + 1) * 8);
    float *g_ref = malloc((n * dim + 1) * 4), *g = malloc((n * dim + 1) * 4);
    float *gw_ref = calloc(n + 1, 4), *gw = calloc(n + 1, 4);
    const ember_bag_table_t cpu_table = {
            .data = r->table, .dtype = EMBER_DTYPE_F32, .rows = c->rows, .dim = dim};
    ember_bag_grad_t ref = {
            .rows = rows_ref, .grad = g_ref, .grad_weights = c->weights ? gw_ref : NULL};
    size_t nr = 0;
    CHECK(ember_bag_backward(&cpu_table, &r->hb, &r->opts, go, r->am_ref, &ref) == EMBER_OK,
          "cpu backward");
    const size_t nr_ref = ref.nrows;
    float *d_go = up(go, ob * 4);
    int64_t *d_rows = up(NULL, n * 8);
    float *d_g = up(NULL, n * dim * 4);
    float *d_gw = c->weights ? up(NULL, n * 4) : NULL;
    CHECK(G->bag_backward(gpu, r->d_table, c->rows, dim, &r->db, &r->opts, d_go, r->d_am, d_rows,
                          d_g, &nr, d_gw) == EMBER_OK,
          "gpu backward");
    CHECK(nr == nr_ref, "unique rows: gpu %zu cpu %zu", nr, nr_ref);
    down(rows, d_rows, nr * 8);
    for (size_t i = 0; i < nr; i++)
        CHECK(rows[i] == rows_ref[i], "row %zu: gpu %" PRId64 " cpu %" PRId64, i, rows[i],
              rows_ref[i]);
    down(g, d_g, nr * dim * 4);
    int rc = !close_enough(g, g_ref, nr * dim, 1e-5, "bag backward");
    if (rc == 0 && c->weights) {
        down(gw, d_gw, n * 4);
        rc = !close_enough(gw, gw_ref, n, 1e-4, "weight grad");
    }
    free(go);
    free(rows_ref);
    free(rows);
    free(g_ref);
    free(g);
    free(gw_ref);
    free(gw);
    return rc;
}

/* Forward and backward of one random batch on both backends. */
static int run_bag(const bag_case_t *c)
{
    bag_run_t r = {.c = c};
    bag_draw(&r);
    int rc = bag_forward_same(&r) || bag_backward_same(&r);
    gfree_all();
    free(r.am_ref);
    free(r.offsets);
    free(r.indices);
    free(r.weights);
    free(r.table);
    return rc;
}

static const size_t dims[] = {1, 3, 4, 16, 64, 100, 128, 257};

static int bag_modes(ember_bag_mode_t mode, int weights, int64_t pad)
{
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
        bag_case_t c = {.mode = mode,
                        .dim = dims[i],
                        .rows = 200,
                        .bags = 67,
                        .max_len = 12,
                        .pad = pad,
                        .weights = weights,
                        .empty = 0.1,
                        .pad_frac = 0.2};
        if (run_bag(&c)) {
            fprintf(stderr, "  (dim %zu)\n", dims[i]);
            return 1;
        }
    }
    return 0;
}

static int t_bag_sum(void)
{
    return bag_modes(EMBER_BAG_SUM, 0, -1);
}
static int t_bag_mean(void)
{
    return bag_modes(EMBER_BAG_MEAN, 0, -1);
}
static int t_bag_max(void)
{
    return bag_modes(EMBER_BAG_MAX, 0, -1);
}
static int t_bag_weights(void)
{
    return bag_modes(EMBER_BAG_SUM, 1, -1);
}
static int t_bag_padding(void)
{
    return bag_modes(EMBER_BAG_SUM, 0, 7) || bag_modes(EMBER_BAG_MEAN, 0, 0) ||
           bag_modes(EMBER_BAG_MAX, 0, 199) || bag_modes(EMBER_BAG_SUM, 1, 3);
}

static int t_bag_empty(void)
{
    /* Mostly empty bags, bags of only padding, and a batch with no entries. */
    for (int m = 0; m < 3; m++) {
        bag_case_t c = {.mode = (ember_bag_mode_t)m,
                        .dim = 32,
                        .rows = 10,
                        .bags = 40,
                        .max_len = 3,
                        .pad = 2,
                        .empty = 0.7,
                        .pad_frac = 0.6};
        if (run_bag(&c))
            return 1;
        bag_case_t z = {.mode = (ember_bag_mode_t)m,
                        .dim = 8,
                        .rows = 10,
                        .bags = 5,
                        .max_len = 0,
                        .pad = -1};
        if (run_bag(&z))
            return 1;
    }
    return 0;
}

static int t_bag_large(void)
{
    /* Many duplicates (few rows) and many rows (few duplicates). */
    for (int m = 0; m < 3; m++) {
        bag_case_t a = {.mode = (ember_bag_mode_t)m,
                        .dim = 64,
                        .rows = 50,
                        .bags = 4096,
                        .max_len = 40,
                        .pad = 1,
                        .pad_frac = 0.05};
        bag_case_t b = {.mode = (ember_bag_mode_t)m,
                        .dim = 128,
                        .rows = 1 << 20,
                        .bags = 2048,
                        .max_len = 30,
                        .pad = -1};
        if (run_bag(&a) || run_bag(&b))
            return 1;
    }
    return 0;
}

static void fill(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uni(lo, hi);
}

static int t_linear(void)
{
    const size_t shapes[][3] = {{1, 1, 1}, {7, 16, 8}, {64, 100, 33}, {256, 512, 128}};
    for (size_t s = 0; s < 4; s++) {
        size_t B = shapes[s][0], I = shapes[s][1], O = shapes[s][2];
        float *x = malloc(B * I * 4), *w = malloc(O * I * 4), *b = malloc(O * 4);
        float *y = malloc(B * O * 4), *yr = malloc(B * O * 4), *gy = malloc(B * O * 4);
        float *gx = malloc(B * I * 4), *gxr = malloc(B * I * 4);
        float *gw = malloc(O * I * 4), *gwr = malloc(O * I * 4);
        float *gb = malloc(O * 4), *gbr = malloc(O * 4);
        fill(x, B * I, -1, 1);
        fill(w, O * I, -1, 1);
        fill(b, O, -1, 1);
        fill(gy, B * O, -1, 1);
        float *dx = up(x, B * I * 4), *dw = up(w, O * I * 4), *db = up(b, O * 4);
        float *dy = up(NULL, B * O * 4), *dgy = up(gy, B * O * 4);
        float *dgx = up(NULL, B * I * 4), *dgw = up(NULL, O * I * 4), *dgb = up(NULL, O * 4);
        for (int bias = 0; bias < 2; bias++) {
            CHECK(ember_linear_forward(x, B, I, O, w, bias ? b : NULL, yr) == EMBER_OK, "cpu");
            CHECK(G->linear_forward(gpu, dx, B, I, O, dw, bias ? db : NULL, dy) == EMBER_OK, "gpu");
            down(y, dy, B * O * 4);
            if (!close_enough(y, yr, B * O, 1e-4, "linear forward"))
                return 1;
        }
        for (int acc = 0; acc < 2; acc++) {
            /* accumulate: both start from the same non-zero gradients */
            fill(gwr, O * I, -1, 1);
            fill(gbr, O, -1, 1);
            G->mem_copy(gpu, dgw, gwr, O * I * 4, EMBER_COPY_HOST_TO_DEVICE);
            G->mem_copy(gpu, dgb, gbr, O * 4, EMBER_COPY_HOST_TO_DEVICE);
            CHECK(ember_linear_backward(x, B, I, O, w, gy, acc, gxr, gwr, gbr) == EMBER_OK, "cpu");
            CHECK(G->linear_backward(gpu, dx, B, I, O, dw, dgy, acc, dgx, dgw, dgb) == EMBER_OK,
                  "gpu");
            down(gx, dgx, B * I * 4);
            down(gw, dgw, O * I * 4);
            down(gb, dgb, O * 4);
            if (!close_enough(gx, gxr, B * I, 1e-4, "grad x") ||
                !close_enough(gw, gwr, O * I, 1e-4, "grad weight") ||
                !close_enough(gb, gbr, O, 1e-4, "grad bias"))
                return 1;
        }
        gfree_all();
        free(x);
        free(w);
        free(b);
        free(y);
        free(yr);
        free(gy);
        free(gx);
        free(gxr);
        free(gw);
        free(gwr);
        free(gb);
        free(gbr);
    }
    return 0;
}

static int t_relu(void)
{
    size_t n = 100003;
    float *x = malloc(n * 4), *gy = malloc(n * 4), *y = malloc(n * 4), *yr = malloc(n * 4);
    fill(x, n, -1, 1);
    fill(gy, n, -1, 1);
    for (size_t i = 0; i < n; i += 97)
        x[i] = 0.0f; /* the gradient at exactly 0 is 0 */
    float *dx = up(x, n * 4), *dgy = up(gy, n * 4), *dy = up(NULL, n * 4);
    CHECK(G->relu_forward(gpu, dx, n, dy) == EMBER_OK, "fwd");
    ember_relu_forward(x, n, yr);
    down(y, dy, n * 4);
    CHECK(memcmp(y, yr, n * 4) == 0, "relu forward differs");
    CHECK(G->relu_backward(gpu, dx, dgy, n, dy) == EMBER_OK, "bwd");
    ember_relu_backward(x, gy, n, yr);
    down(y, dy, n * 4);
    CHECK(memcmp(y, yr, n * 4) == 0, "relu backward differs");
    /* in place */
    CHECK(G->relu_forward(gpu, dx, n, dx) == EMBER_OK, "in place");
    down(y, dx, n * 4);
    ember_relu_forward(x, n, yr);
    CHECK(memcmp(y, yr, n * 4) == 0, "relu in place differs");
    gfree_all();
    free(x);
    free(gy);
    free(y);
    free(yr);
    return 0;
}

static int t_ce(void)
{
    const size_t shapes[][2] = {{1, 1}, {3, 8}, {64, 10}, {512, 1000}, {7, 3000}};
    for (size_t s = 0; s < 5; s++) {
        size_t B = shapes[s][0], C = shapes[s][1];
        float *z = malloc(B * C * 4), *g = malloc(B * C * 4), *gr = malloc(B * C * 4);
        int64_t *t = malloc(B * 8);
        fill(z, B * C, -20, 20);
        for (size_t r = 0; r < B; r++)
            t[r] = uint_below((int64_t)C);
        float loss = 0, loss_ref = 0;
        CHECK(ember_cross_entropy(z, B, C, t, &loss_ref, gr) == EMBER_OK, "cpu");
        float *dz = up(z, B * C * 4), *dg = up(NULL, B * C * 4);
        int64_t *dt = up(t, B * 8);
        CHECK(G->cross_entropy(gpu, dz, B, C, dt, &loss, dg) == EMBER_OK, "gpu");
        CHECK(fabs(loss - loss_ref) <= 1e-5 * (1 + fabs(loss_ref)), "loss gpu %.9g cpu %.9g", loss,
              loss_ref);
        down(g, dg, B * C * 4);
        if (!close_enough(g, gr, B * C, 1e-6, "ce grad"))
            return 1;
        /* in place (grad over logits) */
        CHECK(G->cross_entropy(gpu, dz, B, C, dt, &loss, dz) == EMBER_OK, "in place");
        down(g, dz, B * C * 4);
        if (!close_enough(g, gr, B * C, 1e-6, "ce grad in place"))
            return 1;
        gfree_all();
        free(z);
        free(g);
        free(gr);
        free(t);
    }
    return 0;
}

/* DLRM's interaction, forward and backward, against the host's over
 * [tables][batch][dim] blocks: DLRM's own shapes (27 vectors of 64) and
 * small odd ones. */
static int dlrm_inter_one(size_t T, size_t B, size_t D)
{
    const size_t F = T + 1, V = B * D, W = D + F * (F - 1) / 2;
    float *x = malloc(F * V * 4), *go = malloc(B * W * 4), *out = malloc(B * W * 4);
    float *ref = malloc(B * W * 4), *g = malloc(F * V * 4), *gref = malloc(F * V * 4);
    const float *vectors[64];
    float *grads[64];
    fill(x, F * V, -1, 1);
    fill(go, B * W, -1, 1);
    for (size_t f = 0; f < F; f++) {
        vectors[f] = x + f * V;
        grads[f] = gref + f * V;
    }
    const ember_interaction_shape_t shape = {.features = F, .dim = D, .batch = B};
    CHECK(ember_interaction_forward(&shape, vectors, ref) == EMBER_OK, "cpu forward");
    CHECK(ember_interaction_backward(&shape, vectors, go, grads) == EMBER_OK, "cpu backward");
    float *dx = up(x, F * V * 4), *dgo = up(go, B * W * 4), *dout = up(NULL, B * W * 4);
    float *dg = up(NULL, F * V * 4);
    CHECK(G->interaction_forward(gpu, dx, dx + V, T, B, D, dout) == EMBER_OK, "gpu forward");
    down(out, dout, B * W * 4);
    if (!close_enough(out, ref, B * W, 1e-5, "interaction out"))
        return 1;
    CHECK(G->interaction_backward(gpu, dx, dx + V, T, B, D, dgo, dg, dg + V) == EMBER_OK,
          "gpu backward");
    down(g, dg, F * V * 4);
    if (!close_enough(g, gref, F * V, 1e-5, "interaction grad"))
        return 1;
    gfree_all();
    free(x), free(go), free(out), free(ref), free(g), free(gref);
    return 0;
}

static int t_dlrm_interaction(void)
{
    const size_t shapes[][3] = {{26, 2048, 64}, {26, 7, 128}, {0, 5, 3}, {1, 33, 1}, {4, 9, 16}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        if (dlrm_inter_one(shapes[s][0], shapes[s][1], shapes[s][2]) != 0)
            return 1;
    return 0;
}

/* DLRM-DCN's cross net on one shape: the GPU's forward (out and saved)
 * and backward within float rounding of the host op's. */
static int crossnet_one(ember_crossnet_shape_t sh)
{
    const size_t n = ember_crossnet_width(&sh), V = sh.batch * sh.dim, Bn = sh.batch * n;
    const size_t P = ember_crossnet_param_floats(&sh), S = ember_crossnet_saved_floats(&sh);
    const size_t T = sh.tables * V + 1; /* a pointer even without tables */
    float *x = malloc((V + T) * 4), *p = malloc(P * 4), *go = malloc(Bn * 4);
    float *ref = malloc((S + Bn + P + V + T) * 4), *got = malloc((S + Bn + P + V + T) * 4);
    fill(x, V + T, -1, 1);
    fill(p, P, -0.5, 0.5);
    fill(go, Bn, -1, 1);
    /* ref and got: saved, out, grad_params, grad_dense, grad_pooled */
    float *rs = ref, *ro = rs + S, *rp = ro + Bn, *rd = rp + P, *rq = rd + V;
    CHECK(ember_crossnet_forward(&sh, x, x + V, p, rs, ro) == EMBER_OK, "cpu forward");
    CHECK(ember_crossnet_backward(&sh, x, x + V, p, rs, go, rp, rd, rq) == EMBER_OK,
          "cpu backward");
    float *dx = up(x, (V + T) * 4), *dp = up(p, P * 4), *dgo = up(go, Bn * 4);
    float *dall = up(NULL, (S + Bn + P + V + T) * 4);
    float *ds = dall, *dout = ds + S, *dgp = dout + Bn, *dgd = dgp + P, *dgq = dgd + V;
    CHECK(dx && dp && dgo && dall, "gpu alloc");
    CHECK(G->crossnet_forward(gpu, dx, dx + V, sh.tables, sh.batch, sh.dim, sh.layers, sh.rank, dp,
                              ds, dout) == EMBER_OK,
          "gpu forward");
    CHECK(G->crossnet_backward(gpu, dx, dx + V, sh.tables, sh.batch, sh.dim, sh.layers, sh.rank, dp,
                               ds, dgo, dgp, dgd, dgq) == EMBER_OK,
          "gpu backward");
    down(got, dall, (S + Bn + P + V + sh.tables * V) * 4);
    int ok = close_enough(got, ref, S, 1e-4, "crossnet saved") &&
             close_enough(got + S, ro, Bn, 1e-4, "crossnet out") &&
             close_enough(got + S + Bn, rp, P, 1e-4, "crossnet grad_params") &&
             close_enough(got + S + Bn + P, rd, V, 1e-4, "crossnet grad_dense") &&
             close_enough(got + S + Bn + P + V, rq, sh.tables * V, 1e-4, "crossnet grad_pooled");
    CHECK(G->crossnet_forward(gpu, dx, dx + V, sh.tables, sh.batch, sh.dim, sh.layers, 0, dp, ds,
                              dout) == EMBER_ERR_INVALID_PARAM,
          "rank 0 accepted");
    gfree_all();
    free(x), free(p), free(go), free(ref), free(got);
    return ok ? 0 : 1;
}

static int t_crossnet(void)
{
    const ember_crossnet_shape_t shapes[] = {
            {.tables = 26, .batch = 256, .dim = 16, .layers = 3, .rank = 64},
            {.tables = 0, .batch = 5, .dim = 3, .layers = 1, .rank = 1},
            {.tables = 1, .batch = 1, .dim = 2, .layers = 3, .rank = 4},
            {.tables = 5, .batch = 33, .dim = 8, .layers = 2, .rank = 7},
    };
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        if (crossnet_one(shapes[k]) != 0)
            return 1;
    return 0;
}

/* BCE with logits: the loss within 1e-6, the gradient within float
 * rounding of the host's; a logit that is not finite refused, the
 * gradient then untouched. */
static int t_dlrm_bce(void)
{
    const size_t sizes[] = {1, 255, 2048, 70001};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        float *z = malloc(n * 4), *t = malloc(n * 4), *g = malloc(n * 4), *gr = malloc(n * 4);
        fill(z, n, -30, 30);
        for (size_t i = 0; i < n; i++)
            t[i] = uni(0, 1) < 0.5 ? 0.0f : 1.0f;
        float loss = 0, loss_ref = 0;
        CHECK(ember_bce_with_logits(z, t, n, &loss_ref, gr) == EMBER_OK, "cpu");
        float *dz = up(z, n * 4), *dt = up(t, n * 4), *dg = up(NULL, n * 4);
        CHECK(G->bce_with_logits(gpu, dz, dt, n, &loss, dg) == EMBER_OK, "gpu");
        CHECK(fabs(loss - loss_ref) <= 1e-6 * (1 + fabs(loss_ref)), "loss gpu %.9g cpu %.9g", loss,
              loss_ref);
        down(g, dg, n * 4);
        if (!close_enough(g, gr, n, 1e-6, "bce grad"))
            return 1;
        z[n / 2] = NAN;
        CHECK(G->mem_copy(gpu, dz, z, n * 4, EMBER_COPY_HOST_TO_DEVICE) == EMBER_OK, "copy");
        CHECK(G->mem_zero(gpu, dg, n * 4) == EMBER_OK, "zero");
        CHECK(G->bce_with_logits(gpu, dz, dt, n, &loss, dg) == EMBER_ERR_NUMERIC, "NaN accepted");
        down(g, dg, n * 4);
        for (size_t i = 0; i < n; i++)
            CHECK(g[i] == 0.0f, "a refused loss wrote its gradient at %zu", i);
        gfree_all();
        free(z), free(t), free(g), free(gr);
    }
    return 0;
}

static int t_ce_errors(void)
{
    size_t B = 4, C = 5;
    float z[20], g[20], loss = 42.0f;
    int64_t t[4] = {0, 4, 5, 1}; /* position 2 out of range */
    fill(z, 20, -1, 1);
    float *dz = up(z, sizeof(z)), *dg = up(NULL, sizeof(g));
    int64_t *dt = up(t, sizeof(t));
    G->mem_zero(gpu, dg, sizeof(g));
    CHECK(G->cross_entropy(gpu, dz, B, C, dt, &loss, dg) == EMBER_ERR_OUT_OF_RANGE, "range");
    CHECK(loss == 42.0f, "loss written on error");
    down(g, dg, sizeof(g));
    for (int i = 0; i < 20; i++)
        CHECK(g[i] == 0.0f, "grad written on error");
    t[2] = 2;
    z[7] = NAN;
    G->mem_copy(gpu, dt, t, sizeof(t), EMBER_COPY_HOST_TO_DEVICE);
    G->mem_copy(gpu, dz, z, sizeof(z), EMBER_COPY_HOST_TO_DEVICE);
    CHECK(G->cross_entropy(gpu, dz, B, C, dt, &loss, dg) == EMBER_ERR_NUMERIC, "nan");
    z[7] = INFINITY;
    G->mem_copy(gpu, dz, z, sizeof(z), EMBER_COPY_HOST_TO_DEVICE);
    CHECK(G->cross_entropy(gpu, dz, B, C, dt, &loss, dg) == EMBER_ERR_NUMERIC, "inf");
    gfree_all();
    return 0;
}

static int t_nccl_single(void)
{
    ember_device_comm_t *comm;
    ember_device_req_t *req[3];
    int ranks[1] = {0};
    size_t n = (1u << 20) + 3;
    float *x = malloc(n * 4), *y = malloc(n * 4);

    fill(x, n, -1, 1);
    ember_status_t st = G->comm_create(gpu, NULL, ranks, 1, 0, &comm);
    if (st == EMBER_ERR_UNSUPPORTED) {
        fprintf(stderr, "SKIP: built without NCCL\n");
        exit(77);
    }
    CHECK(st == EMBER_OK, "comm_create: %s", ember_status_string(st));
    float *d[3];
    for (int i = 0; i < 3; i++)
        d[i] = up(x, n * 4);
    for (int i = 0; i < 3; i++)
        CHECK(G->allreduce_start(comm, d[i], n, i == 1, &req[i]) == EMBER_OK, "start %d", i);
    for (int i = 0; i < 3; i++) {
        ember_status_t s;
        while ((s = G->allreduce_test(req[i])) == EMBER_INPROGRESS)
            ;
        CHECK(s == EMBER_OK, "test %d: %s", i, ember_status_string(s));
        CHECK(G->allreduce_wait(req[i]) == EMBER_OK, "wait %d", i);
        down(y, d[i], n * 4);
        CHECK(memcmp(x, y, n * 4) == 0, "one rank: sum/avg must be the identity");
    }
    CHECK(strcmp(G->comm_error(comm), "") == 0, "healthy comm reports an error");
    G->comm_destroy(comm);
    gfree_all();
    free(x);
    free(y);
    return 0;
}

/* A trainer's pools from its shards' partial pools on the GPU (the device
 * data path): parts_combine and parts_split against the CPU backend's (the
 * host trainer's loops), bit for bit, every mode, 1-3 shards, bags empty on
 * some shards or all, ties between shards (max takes the lowest place). */
static int t_parts_combine(void)
{
    ember_device_t *cpu;
    CHECK(ember_device_open("cpu", 0, &cpu) == EMBER_OK, "open cpu");
    const ember_device_ops_t *C = ember_device_ops(cpu);
    const size_t bags = 97, dim = 19, stride = bags * dim + 5;
    for (uint32_t nparts = 1; nparts <= 3; nparts++) {
        for (int m = 0; m < 3; m++) {
            ember_bag_mode_t mode = (ember_bag_mode_t)m;
            float *parts = calloc(nparts * stride, 4), *g = malloc(bags * dim * 4);
            uint32_t *counts = calloc(nparts * bags, 4), *bag_counts = calloc(bags, 4);
            uint32_t *places = calloc(nparts * stride, 4);
            float *out_c = malloc(bags * dim * 4), *out_g = malloc(bags * dim * 4);
            int16_t *w_c = malloc(bags * dim * 2), *w_g = malloc(bags * dim * 2);
            float *gr_c = calloc(nparts * stride, 4), *gr_g = calloc(nparts * stride, 4);
            for (uint32_t p = 0; p < nparts; p++) {
                for (size_t b = 0; b < bags; b++) {
                    uint32_t c = b % 7 == 3 ? 0 : (uint32_t)uint_below(4);
                    counts[p * bags + b] = c;
                    bag_counts[b] += c;
                    for (size_t d = 0; d < dim; d++) { /* ties: few distinct values */
                        parts[p * stride + b * dim + d] =
                                c ? (float)(uint_below(5) - 2) * 0.5f : 0.0f;
                        /* distinct over the parts, in no shard order */
                        places[p * stride + b * dim + d] =
                                c ? (uint32_t)uint_below(1000) * 4 + p : UINT32_MAX;
                    }
                }
            }
            for (size_t i = 0; i < bags * dim; i++)
                g[i] = (float)uni(-1, 1);
            CHECK(C->parts_combine(cpu, parts, stride, nparts, bags, dim, mode, counts, bag_counts,
                                   places, stride, out_c, w_c) == EMBER_OK,
                  "cpu combine");
            CHECK(C->parts_split(cpu, g, nparts, bags, dim, mode, bag_counts, w_c, gr_c, stride) ==
                          EMBER_OK,
                  "cpu split");
            float *d_parts = up(parts, nparts * stride * 4), *d_out = up(NULL, bags * dim * 4);
            float *d_g = up(g, bags * dim * 4), *d_gr = up(NULL, nparts * stride * 4);
            uint32_t *d_counts = up(counts, nparts * bags * 4);
            uint32_t *d_bc = up(bag_counts, bags * 4);
            uint32_t *d_places = up(places, nparts * stride * 4);
            int16_t *d_w = up(NULL, bags * dim * 2);
            CHECK(G->parts_combine(gpu, d_parts, stride, nparts, bags, dim, mode, d_counts, d_bc,
                                   d_places, stride, d_out, d_w) == EMBER_OK,
                  "gpu combine");
            CHECK(G->parts_split(gpu, d_g, nparts, bags, dim, mode, d_bc, d_w, d_gr, stride) ==
                          EMBER_OK,
                  "gpu split");
            down(out_g, d_out, bags * dim * 4);
            CHECK(memcmp(out_g, out_c, bags * dim * 4) == 0,
                  "combine differs (%u parts, "
                  "mode %d)",
                  nparts, m);
            if (mode == EMBER_BAG_MAX) {
                down(w_g, d_w, bags * dim * 2);
                CHECK(memcmp(w_g, w_c, bags * dim * 2) == 0, "winners differ (%u parts)", nparts);
            }
            down(gr_g, d_gr, nparts * stride * 4);
            for (uint32_t p = 0; p < nparts; p++)
                CHECK(memcmp(gr_g + p * stride, gr_c + p * stride, bags * dim * 4) == 0,
                      "split differs (part %u of %u, mode %d)", p, nparts, m);
            gfree_all();
            free(parts);
            free(g);
            free(counts);
            free(bag_counts);
            free(out_c);
            free(out_g);
            free(w_c);
            free(w_g);
            free(gr_c);
            free(gr_g);
            free(places);
        }
    }
    ember_device_close(cpu);
    return 0;
}

/* Pinned host buffers (host_alloc): a round trip through the GPU, and the
 * network path line the trainers log. */
static int t_pinned(void)
{
    const size_t n = (size_t)3 << 20; /* 12 MiB */
    float *a = NULL, *b = NULL, *d = NULL;
    const char *path = NULL;
    CHECK(G->host_alloc(gpu, n * 4, (void **)&a) == EMBER_OK && a, "host_alloc a");
    CHECK(G->host_alloc(gpu, n * 4, (void **)&b) == EMBER_OK && b, "host_alloc b");
    for (size_t i = 0; i < n; i++)
        a[i] = (float)i * 0.25f;
    CHECK(G->mem_alloc(gpu, n * 4, (void **)&d) == EMBER_OK, "mem_alloc");
    CHECK(G->mem_copy(gpu, d, a, n * 4, EMBER_COPY_HOST_TO_DEVICE) == EMBER_OK, "h2d");
    CHECK(G->mem_copy(gpu, b, d, n * 4, EMBER_COPY_DEVICE_TO_HOST) == EMBER_OK, "d2h");
    CHECK(memcmp(a, b, n * 4) == 0, "round trip through pinned buffers differs");
    ember_mem_type_t net_mem;
    CHECK(G->network_path(gpu, &net_mem, &path) == EMBER_OK && path && *path, "network path");
    fprintf(stderr, "network path: %s\n", path);
    G->mem_free(gpu, d);
    G->host_free(gpu, a);
    G->host_free(gpu, b);
    return 0;
}

#ifdef EMBER_HAVE_TRANSPORT
/* The GPU data path decision (pure; no GPU needed). */
static int t_device_gpudirect(void)
{
    ember_gpudirect_path_t path = EMBER_GPUDIRECT_RDMA;
    char why[320];
    uint64_t cuda = UCS_BIT(UCS_MEMORY_TYPE_CUDA), host = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    CHECK(ember_gpudirect_decide(host, NULL, NULL, &path, why, sizeof(why)) == EMBER_OK &&
                  path == EMBER_GPUDIRECT_STAGED && strstr(why, "no CUDA memory support"),
          "auto without CUDA: %s", why);
    path = EMBER_GPUDIRECT_STAGED;
    CHECK(ember_gpudirect_decide(host | cuda, NULL, "auto", &path, why, sizeof(why)) == EMBER_OK &&
                  path == EMBER_GPUDIRECT_RDMA && strstr(why, "EMBER_GPUDIRECT=auto"),
          "auto with CUDA: %s", why);
    path = EMBER_GPUDIRECT_STAGED;
    CHECK(ember_gpudirect_decide(host | cuda, "cuda,sm,tcp", NULL, &path, why, sizeof(why)) ==
                          EMBER_OK &&
                  path == EMBER_GPUDIRECT_RDMA,
          "auto, UCX_TLS naming cuda: %s", why);
    CHECK(ember_gpudirect_decide(host | cuda, "tcp,sm", "auto", &path, why, sizeof(why)) ==
                          EMBER_OK &&
                  path == EMBER_GPUDIRECT_STAGED && strstr(why, "leave out cuda_copy"),
          "auto, UCX_TLS without cuda_copy: %s", why);
    CHECK(ember_gpudirect_decide(host | cuda, NULL, "staged", &path, why, sizeof(why)) ==
                          EMBER_OK &&
                  path == EMBER_GPUDIRECT_STAGED && strstr(why, "EMBER_GPUDIRECT=staged"),
          "staged with CUDA: %s", why);
    CHECK(ember_gpudirect_decide(host, NULL, "staged", &path, NULL, 0) == EMBER_OK &&
                  path == EMBER_GPUDIRECT_STAGED,
          "staged");
    CHECK(ember_gpudirect_decide(host | cuda, "tcp,cuda_copy", "rdma", &path, why, sizeof(why)) ==
                          EMBER_OK &&
                  path == EMBER_GPUDIRECT_RDMA && strstr(why, "GPU memory"),
          "rdma with CUDA: %s", why);
    path = EMBER_GPUDIRECT_STAGED;
    CHECK(ember_gpudirect_decide(host, NULL, "rdma", &path, why, sizeof(why)) ==
                          EMBER_ERR_UNSUPPORTED &&
                  strstr(why, "EMBER_GPUDIRECT=rdma") && strstr(why, "no CUDA memory") &&
                  path == EMBER_GPUDIRECT_STAGED,
          "rdma without CUDA: %s", why);
    CHECK(ember_gpudirect_decide(host | cuda, "^cuda_copy", "rdma", &path, why, sizeof(why)) ==
                          EMBER_ERR_UNSUPPORTED &&
                  strstr(why, "cuda_copy") && path == EMBER_GPUDIRECT_STAGED,
          "rdma, UCX_TLS excluding cuda_copy: %s", why);
    CHECK(ember_gpudirect_decide(host, NULL, "fast", &path, why, sizeof(why)) ==
                          EMBER_ERR_INVALID_PARAM &&
                  strstr(why, "EMBER_GPUDIRECT=fast"),
          "unknown: %s", why);
    /* UCX_TLS: unset/empty is all; a list must name it; ^ excludes. */
    static const struct {
        const char *tls;
        int allows;
    } tls[] = {{NULL, 1},           {"", 1},      {"all", 1},           {"cuda_copy", 1},
               {"tcp,cuda", 1},     {"^tcp", 1},  {"^ib,cuda_ipc", 1},  {"tcp", 0},
               {"tcp,cuda_ipc", 0}, {"^cuda", 0}, {"^tcp,cuda_copy", 0}};
    for (size_t i = 0; i < sizeof(tls) / sizeof(tls[0]); i++)
        CHECK(ember_gpudirect_tls_allows_cuda_copy(tls[i].tls) == tls[i].allows,
              "UCX_TLS=%s: allows cuda_copy %d", tls[i].tls ? tls[i].tls : "(unset)",
              tls[i].allows);
    CHECK(strcmp(ember_gpudirect_path_name(EMBER_GPUDIRECT_STAGED), "staged") == 0 &&
                  strcmp(ember_gpudirect_path_name(EMBER_GPUDIRECT_RDMA), "rdma") == 0,
          "names");
    return 0;
}
#endif

/* Runs everywhere: the CPU backend through the table, and open("cuda")
 * failing cleanly without a GPU. */
static int t_device_cpu(void)
{
    ember_device_t *cpu;
    CHECK(ember_device_open("cpu", 0, &cpu) == EMBER_OK, "open cpu");
    const ember_device_ops_t *c = ember_device_ops(cpu);
    CHECK(c->size == sizeof(*c) && ember_device_mem_type(cpu) == EMBER_MEM_HOST, "table");
    float table[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, out[6];
    int64_t idx[4] = {0, 2, 3, 3}, off[3] = {0, 2, 4};
    ember_bag_batch_t b = {.indices = idx, .n = 4, .offsets = off, .bags = 3};
    ember_bag_opts_t o = {.mode = EMBER_BAG_MEAN, .padding_idx = 3};
    CHECK(c->bag_forward(cpu, table, 4, 2, &b, &o, out, NULL) == EMBER_OK, "bag");
    CHECK(out[0] == 3 && out[1] == 4 && out[2] == 0 && out[4] == 0, "mean/pad/empty");
    void *p = NULL;
    CHECK(c->mem_alloc(cpu, 100, &p) == EMBER_OK && p, "alloc");
    CHECK(c->mem_zero(cpu, p, 100) == EMBER_OK, "zero");
    c->mem_free(cpu, p);
    ember_device_close(cpu);
    ember_device_t *bad;
    CHECK(ember_device_open("tpu", 0, &bad) == EMBER_ERR_INVALID_PARAM, "unknown kind");
    return 0;
}

static int t_device_cuda_open(void)
{
    ember_device_t *dev = NULL;
    ember_status_t st = ember_device_open("cuda", 0, &dev);
    if (ember_device_cuda_count() == 0) {
        CHECK(st == EMBER_ERR_NO_DEVICE, "no GPU: got %s", ember_status_string(st));
        return 0;
    }
    CHECK(st == EMBER_OK, "open: %s", ember_status_string(st));
    CHECK(ember_device_mem_type(dev) == EMBER_MEM_CUDA, "mem type");
    ember_device_close(dev);
    return 0;
}

static const test_case_t cases[] = {
        {"bag_sum", t_bag_sum},
        {"bag_mean", t_bag_mean},
        {"bag_max", t_bag_max},
        {"bag_weights", t_bag_weights},
        {"bag_padding", t_bag_padding},
        {"bag_empty", t_bag_empty},
        {"bag_large", t_bag_large},
        {"linear", t_linear},
        {"relu", t_relu},
        {"ce", t_ce},
        {"ce_errors", t_ce_errors},
        {"nccl_single", t_nccl_single},
        {"pinned", t_pinned},
        {"parts_combine", t_parts_combine},
        {"dlrm_interaction", t_dlrm_interaction},
        {"dlrm_bce", t_dlrm_bce},
        {"crossnet", t_crossnet},
        {"device_cpu", t_device_cpu},
        {"device_cuda_open", t_device_cuda_open},
#ifdef EMBER_HAVE_TRANSPORT
        {"device_gpudirect", t_device_gpudirect},
#endif
};

int main(int argc, char **argv)
{
    int rc;
    int needs_gpu = argc >= 2 && strncmp(argv[1], "device_", 7) != 0;

    ember_log_init();
    if (needs_gpu) {
        if (ember_device_cuda_count() <= 0) {
            fprintf(stderr, "SKIP %s: no CUDA GPU visible\n", argv[1]);
            return 77;
        }
        if (ember_device_open("cuda", 0, &gpu) != EMBER_OK)
            return 1;
        G = ember_device_ops(gpu);
    }
    rc = test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
    ember_device_close(gpu);
    return rc;
}
