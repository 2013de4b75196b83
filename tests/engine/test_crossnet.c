/*
 * tests/engine/test_crossnet: DLRM-DCN's interaction (engine/ops/crossnet),
 * TorchRec's LowRankCrossNet over the concatenated features.
 *
 *   torch       PyTorch's own (tests/engine/crossnet_ref.py, argv: its raw
 *               output): out, the parameters' gradients, grad_dense and
 *               grad_pooled within 1e-5 (relative + absolute) over several
 *               shapes (rank 1, layers 1 and 3, tables 1, 5 and 26, batch 1,
 *               a rank above n)
 *   fd          the backward against central finite differences of
 *               sum(out * g), the op in float: every parameter and input
 *   device_cpu  the "cpu" device's slots, bit for bit the host calls; the
 *               public size macros equal the op's counts
 *   refused     a zero size, a NULL buffer, a shape BLAS cannot take
 */
#include "engine/ops/crossnet.h"

#include "test_util.h"

#include <ember/device.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The buffers of one case, host memory. */
typedef struct {
    ember_crossnet_shape_t shape;
    size_t n, values, params_n, saved_n; /* values: [batch][dim] */
    float *dense, *pooled, *params, *grad_out, *saved, *out;
    float *grad_params, *grad_dense, *grad_pooled;
} bufs_t;

static void bufs_free(bufs_t *c)
{
    float *all[] = {c->dense, c->pooled,      c->params,     c->grad_out,   c->saved,
                    c->out,   c->grad_params, c->grad_dense, c->grad_pooled};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
    memset(c, 0, sizeof(*c));
}

/* One spare float each, so a table count of 0 still gives a pointer. */
static int bufs_alloc(bufs_t *c, ember_crossnet_shape_t shape)
{
    memset(c, 0, sizeof(*c));
    c->shape = shape;
    c->n = ember_crossnet_width(&shape);
    c->values = shape.batch * shape.dim;
    c->params_n = ember_crossnet_param_floats(&shape);
    c->saved_n = ember_crossnet_saved_floats(&shape);
    const size_t Bn = shape.batch * c->n, pooled_n = shape.tables * c->values + 1;
    c->dense = malloc(c->values * sizeof(float));
    c->pooled = malloc(pooled_n * sizeof(float));
    c->params = malloc(c->params_n * sizeof(float));
    c->grad_out = malloc(Bn * sizeof(float));
    c->saved = malloc(c->saved_n * sizeof(float));
    c->out = malloc(Bn * sizeof(float));
    c->grad_params = malloc(c->params_n * sizeof(float));
    c->grad_dense = malloc(c->values * sizeof(float));
    c->grad_pooled = malloc(pooled_n * sizeof(float));
    return c->dense && c->pooled && c->params && c->grad_out && c->saved && c->out &&
           c->grad_params && c->grad_dense && c->grad_pooled;
}

static void fill(float *p, size_t count, uint64_t *rng, double scale)
{
    for (size_t i = 0; i < count; i++)
        p[i] = (float)test_uniform(rng, -scale, scale);
}

static void bufs_random(bufs_t *c, uint64_t seed)
{
    uint64_t rng = seed;
    fill(c->dense, c->values, &rng, 1);
    fill(c->pooled, c->shape.tables * c->values, &rng, 1);
    fill(c->params, c->params_n, &rng, 0.5);
    fill(c->grad_out, c->shape.batch * c->n, &rng, 1);
}

static ember_status_t forward(bufs_t *c)
{
    return ember_crossnet_forward(&c->shape, c->dense, c->pooled, c->params, c->saved, c->out);
}

static ember_status_t backward(bufs_t *c)
{
    return ember_crossnet_backward(&c->shape, c->dense, c->pooled, c->params, c->saved, c->grad_out,
                                   c->grad_params, c->grad_dense, c->grad_pooled);
}

/* ---- torch ---- */

static int read_floats(FILE *file, float *into, size_t count)
{
    CHECK(fread(into, sizeof(float), count, file) == count, "the reference is short");
    return 0;
}

static int near(const float *got, const float *want, size_t count, const char *what,
                const ember_crossnet_shape_t *s)
{
    for (size_t i = 0; i < count; i++)
        CHECK(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])),
              "%s[%zu] %.9g, PyTorch %.9g (tables %zu batch %zu dim %zu layers %zu rank %zu)", what,
              i, (double)got[i], (double)want[i], s->tables, s->batch, s->dim, s->layers, s->rank);
    return 0;
}

/* PyTorch's results of one case, read after its inputs. */
typedef struct {
    float *out, *grad_params, *grad_dense, *grad_pooled;
} want_t;

static int torch_one(FILE *file)
{
    uint32_t dims[5];
    CHECK(fread(dims, sizeof(uint32_t), 5, file) == 5, "the reference is short");
    const ember_crossnet_shape_t shape = {.tables = dims[0],
                                          .batch = dims[1],
                                          .dim = dims[2],
                                          .layers = dims[3],
                                          .rank = dims[4]};
    bufs_t c, w;
    CHECK(bufs_alloc(&c, shape) && bufs_alloc(&w, shape), "out of memory");
    const size_t Bn = shape.batch * c.n, pooled_n = shape.tables * c.values;
    int rc = read_floats(file, c.dense, c.values) || read_floats(file, c.pooled, pooled_n) ||
             read_floats(file, c.params, c.params_n) || read_floats(file, c.grad_out, Bn) ||
             read_floats(file, w.out, Bn) || read_floats(file, w.grad_params, c.params_n) ||
             read_floats(file, w.grad_dense, c.values) ||
             read_floats(file, w.grad_pooled, pooled_n);
    if (!rc) {
        CHECK(forward(&c) == EMBER_OK, "forward");
        CHECK(backward(&c) == EMBER_OK, "backward");
        rc = near(c.out, w.out, Bn, "out", &shape) ||
             near(c.grad_params, w.grad_params, c.params_n, "grad_params", &shape) ||
             near(c.grad_dense, w.grad_dense, c.values, "grad_dense", &shape) ||
             near(c.grad_pooled, w.grad_pooled, pooled_n, "grad_pooled", &shape);
    }
    bufs_free(&c);
    bufs_free(&w);
    return rc;
}

static int case_torch(void)
{
    CHECK(test_argc >= 1, "usage: test_crossnet torch REFERENCE");
    FILE *file = fopen(test_argv[0], "rb");
    CHECK(file, "cannot read %s", test_argv[0]);
    uint32_t cases = 0;
    CHECK(fread(&cases, sizeof(cases), 1, file) == 1 && cases >= 5, "%u cases", cases);
    for (uint32_t k = 0; k < cases; k++)
        if (torch_one(file)) {
            fclose(file);
            return 1;
        }
    char extra;
    CHECK(fread(&extra, 1, 1, file) == 0, "the reference is longer than its cases");
    fclose(file);
    return 0;
}

/* ---- fd ---- */

/* sum(out * grad_out), the objective whose gradient the backward gives;
 * the op runs in float, only this sum is taken in double. */
static double objective(bufs_t *c)
{
    if (forward(c) != EMBER_OK)
        return NAN;
    double sum = 0;
    for (size_t i = 0; i < c->shape.batch * c->n; i++)
        sum += (double)c->out[i] * c->grad_out[i];
    return sum;
}

/* Central differences of every element of @x (@count floats) against
 * @grad, the backward's (which the forwards here leave alone). */
static int fd_check(bufs_t *c, float *x, const float *grad, size_t count, const char *what)
{
    const float h = 1e-2f;
    for (size_t i = 0; i < count; i++) {
        const float keep = x[i];
        x[i] = keep + h;
        const double up = objective(c);
        x[i] = keep - h;
        const double down = objective(c);
        x[i] = keep;
        const double fd = (up - down) / (2.0 * (double)h);
        CHECK(fabs(fd - grad[i]) <= 5e-4 * (1 + fabs(fd)), "%s[%zu]: %.7g, finite difference %.7g",
              what, i, (double)grad[i], fd);
    }
    return 0;
}

static int case_fd(void)
{
    const ember_crossnet_shape_t shapes[] = {
            {.tables = 2, .batch = 3, .dim = 2, .layers = 2, .rank = 2},
            {.tables = 1, .batch = 2, .dim = 3, .layers = 3, .rank = 1},
    };
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        bufs_t c;
        CHECK(bufs_alloc(&c, shapes[k]), "out of memory");
        bufs_random(&c, 100 + k);
        CHECK(forward(&c) == EMBER_OK && backward(&c) == EMBER_OK, "forward, backward");
        int rc = fd_check(&c, c.params, c.grad_params, c.params_n, "grad_params") ||
                 fd_check(&c, c.dense, c.grad_dense, c.values, "grad_dense") ||
                 fd_check(&c, c.pooled, c.grad_pooled, c.shape.tables * c.values, "grad_pooled");
        bufs_free(&c);
        if (rc)
            return 1;
    }
    return 0;
}

/* ---- device_cpu ---- */

static int device_one(const ember_device_ops_t *ops, ember_device_t *dev,
                      ember_crossnet_shape_t shape)
{
    bufs_t host, d;
    CHECK(bufs_alloc(&host, shape) && bufs_alloc(&d, shape), "out of memory");
    bufs_random(&host, 7 + shape.tables);
    bufs_random(&d, 7 + shape.tables);
    const size_t Bn = shape.batch * host.n;
    CHECK(EMBER_CROSSNET_SAVED(shape.batch, host.n, shape.rank, shape.layers) == host.saved_n,
          "EMBER_CROSSNET_SAVED %zu, the op's %zu",
          (size_t)EMBER_CROSSNET_SAVED(shape.batch, host.n, shape.rank, shape.layers),
          host.saved_n);
    CHECK(EMBER_CROSSNET_PARAMS(host.n, shape.rank, shape.layers) == host.params_n,
          "EMBER_CROSSNET_PARAMS %zu, the op's %zu",
          (size_t)EMBER_CROSSNET_PARAMS(host.n, shape.rank, shape.layers), host.params_n);
    CHECK(forward(&host) == EMBER_OK && backward(&host) == EMBER_OK, "host");
    CHECK(ops->crossnet_forward(dev, d.dense, shape.tables ? d.pooled : NULL, shape.tables,
                                shape.batch, shape.dim, shape.layers, shape.rank, d.params, d.saved,
                                d.out) == EMBER_OK,
          "device forward");
    CHECK(ops->crossnet_backward(dev, d.dense, shape.tables ? d.pooled : NULL, shape.tables,
                                 shape.batch, shape.dim, shape.layers, shape.rank, d.params,
                                 d.saved, d.grad_out, d.grad_params, d.grad_dense,
                                 shape.tables ? d.grad_pooled : NULL) == EMBER_OK,
          "device backward");
    CHECK(memcmp(host.out, d.out, Bn * sizeof(float)) == 0, "out differs");
    CHECK(memcmp(host.saved, d.saved, host.saved_n * sizeof(float)) == 0, "saved differs");
    CHECK(memcmp(host.grad_params, d.grad_params, host.params_n * sizeof(float)) == 0,
          "grad_params differ");
    CHECK(memcmp(host.grad_dense, d.grad_dense, host.values * sizeof(float)) == 0,
          "grad_dense differs");
    CHECK(memcmp(host.grad_pooled, d.grad_pooled, shape.tables * host.values * sizeof(float)) == 0,
          "grad_pooled differs");
    bufs_free(&host);
    bufs_free(&d);
    return 0;
}

static int case_device_cpu(void)
{
    const ember_crossnet_shape_t shapes[] = {
            {.tables = 0, .batch = 4, .dim = 3, .layers = 1, .rank = 2},
            {.tables = 5, .batch = 9, .dim = 4, .layers = 3, .rank = 3},
            {.tables = 26, .batch = 32, .dim = 16, .layers = 3, .rank = 64},
    };
    ember_device_t *dev;
    CHECK(ember_device_open("cpu", 0, &dev) == EMBER_OK, "open cpu");
    const ember_device_ops_t *ops = ember_device_ops(dev);
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        if (device_one(ops, dev, shapes[k]) != 0)
            return 1;
    ember_device_close(dev);
    return 0;
}

/* ---- refused ---- */

static int case_refused(void)
{
    const ember_crossnet_shape_t ok = {.tables = 1, .batch = 2, .dim = 2, .layers = 1, .rank = 1};
    bufs_t c;
    CHECK(bufs_alloc(&c, ok), "out of memory");
    bufs_random(&c, 3);
    CHECK(forward(&c) == EMBER_OK && backward(&c) == EMBER_OK, "a valid shape");
    size_t *sizes[] = {&c.shape.batch, &c.shape.dim, &c.shape.layers, &c.shape.rank};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        *sizes[k] = 0;
        CHECK(forward(&c) == EMBER_ERR_INVALID_PARAM, "size %zu zero: forward", k);
        CHECK(backward(&c) == EMBER_ERR_INVALID_PARAM, "size %zu zero: backward", k);
        c.shape = ok;
    }
    c.shape.batch = (size_t)1 << 40; /* [batch][n] beyond BLAS's int */
    CHECK(forward(&c) == EMBER_ERR_INVALID_PARAM, "a batch beyond BLAS");
    c.shape = ok;
    CHECK(ember_crossnet_forward(&ok, c.dense, NULL, c.params, c.saved, c.out) ==
                  EMBER_ERR_INVALID_PARAM,
          "NULL pooled with a table");
    CHECK(ember_crossnet_forward(&ok, c.dense, c.pooled, NULL, c.saved, c.out) ==
                  EMBER_ERR_INVALID_PARAM,
          "NULL params");
    CHECK(ember_crossnet_forward(&ok, c.dense, c.pooled, c.params, NULL, c.out) ==
                  EMBER_ERR_INVALID_PARAM,
          "NULL saved");
    CHECK(ember_crossnet_backward(&ok, c.dense, c.pooled, c.params, c.saved, c.grad_out,
                                  c.grad_params, c.grad_dense, NULL) == EMBER_ERR_INVALID_PARAM,
          "NULL grad_pooled with a table");
    CHECK(ember_crossnet_backward(&ok, c.dense, c.pooled, c.params, c.saved, c.grad_out, NULL,
                                  c.grad_dense, c.grad_pooled) == EMBER_ERR_INVALID_PARAM,
          "NULL grad_params");
    CHECK(ember_crossnet_forward(NULL, c.dense, c.pooled, c.params, c.saved, c.out) ==
                  EMBER_ERR_INVALID_PARAM,
          "no shape");
    bufs_free(&c);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"torch", case_torch},
            {"fd", case_fd},
            {"device_cpu", case_device_cpu},
            {"refused", case_refused},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
