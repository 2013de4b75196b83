/* engine/ops/crossnet: TorchRec's LowRankCrossNet on the CPU (see crossnet.h).
 *
 * Each layer is two GEMMs through CBLAS (the low-rank V then W) and one
 * elementwise gate; the backward runs the layers in reverse, four GEMMs
 * a layer.  The gate adds the bias after the W product, as TorchRec's
 * linear-then-add does, so the rounding follows PyTorch's order. */
#include "engine/ops/crossnet.h"

#include <ember/log.h>

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

static ember_status_t refuse(const char *what, const ember_crossnet_shape_t *shape)
{
    if (shape)
        ember_error("crossnet",
                    "%s: invalid arguments (tables %zu, batch %zu, dim %zu, layers %zu, "
                    "rank %zu)",
                    what, shape->tables, shape->batch, shape->dim, shape->layers, shape->rank);
    else
        ember_error("crossnet", "%s: no shape", what);
    return EMBER_ERR_INVALID_PARAM;
}

/* The parameter block's pieces of layer @l (crossnet.h's order). */
typedef struct {
    const float *w, *v, *b;
} layer_params_t;

static layer_params_t layer_params(const ember_crossnet_shape_t *shape, const float *params,
                                   size_t l)
{
    const size_t n = ember_crossnet_width(shape), L = shape->layers, r = shape->rank;
    return (layer_params_t){.w = params + l * n * r,
                            .v = params + L * n * r + l * r * n,
                            .b = params + 2 * L * n * r + l * n};
}

/* The saved block's pieces of layer @l: its input x_l, its gate, V_l x_l. */
typedef struct {
    float *x, *gate, *v;
} layer_saved_t;

static layer_saved_t layer_saved(const ember_crossnet_shape_t *shape, const float *saved, size_t l)
{
    const size_t n = ember_crossnet_width(shape), L = shape->layers, B = shape->batch;
    float *s = (float *)saved;
    return (layer_saved_t){.x = s + l * B * n,
                           .gate = s + L * B * n + l * B * n,
                           .v = s + 2 * L * B * n + l * B * shape->rank};
}

/* x0[b] = dense[b], then each table's pooled[t][b]. */
static void concat(const ember_crossnet_shape_t *shape, const float *dense, const float *pooled,
                   float *x0)
{
    const size_t D = shape->dim, B = shape->batch, n = ember_crossnet_width(shape);
    for (size_t b = 0; b < B; b++) {
        memcpy(x0 + b * n, dense + b * D, D * sizeof(float));
        for (size_t t = 0; t < shape->tables; t++)
            memcpy(x0 + b * n + (t + 1) * D, pooled + (t * B + b) * D, D * sizeof(float));
    }
}

/* The split's inverse: a gradient of x0 back into dense's and pooled's. */
/* @n floats of @a + @b into @out (vectorized: one pass). */
static void add_into(const float *a, const float *b, size_t n, float *out)
{
    for (size_t k = 0; k < n; k++)
        out[k] = a[k] + b[k];
}

/* The split's inverse of gx0 + g, x0's whole gradient, back into dense's
 * and pooled's, summed as it is split. */
static void split_sum(const ember_crossnet_shape_t *shape, const float *gx0, const float *g,
                      float *grad_dense, float *grad_pooled)
{
    const size_t D = shape->dim, B = shape->batch, n = ember_crossnet_width(shape);
    for (size_t b = 0; b < B; b++) {
        add_into(gx0 + b * n, g + b * n, D, grad_dense + b * D);
        for (size_t t = 0; t < shape->tables; t++)
            add_into(gx0 + b * n + (t + 1) * D, g + b * n + (t + 1) * D, D,
                     grad_pooled + (t * B + b) * D);
    }
}

/* One layer: v = x V^T, gate = v W^T + b, next = x0 * gate + x. */
static void layer_forward(const ember_crossnet_shape_t *shape, layer_params_t p, layer_saved_t s,
                          const float *x0, float *next)
{
    const int B = (int)shape->batch, n = (int)ember_crossnet_width(shape), r = (int)shape->rank;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, r, n, 1.0f, s.x, n, p.v, n, 0.0f, s.v,
                r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, n, r, 1.0f, s.v, r, p.w, r, 0.0f,
                s.gate, n);
    for (size_t b = 0; b < (size_t)B; b++)
        for (size_t k = 0; k < (size_t)n; k++) {
            const size_t i = b * (size_t)n + k;
            s.gate[i] += p.b[k];
            next[i] = x0[i] * s.gate[i] + s.x[i];
        }
}

static int buffers_valid(const ember_crossnet_shape_t *shape, const float *dense,
                         const float *pooled, const float *params)
{
    return dense && params && (shape->tables == 0 || pooled);
}

ember_status_t ember_crossnet_forward(const ember_crossnet_shape_t *shape, const float *dense,
                                      const float *pooled, const float *params, float *saved,
                                      float *out)
{
    if (!ember_crossnet_shape_ok(shape) || !buffers_valid(shape, dense, pooled, params) || !saved ||
        !out)
        return refuse("forward", shape);
    const size_t L = shape->layers;
    float *x0 = layer_saved(shape, saved, 0).x;
    concat(shape, dense, pooled, x0);
    for (size_t l = 0; l < L; l++) {
        float *next = l + 1 < L ? layer_saved(shape, saved, l + 1).x : out;
        layer_forward(shape, layer_params(shape, params, l), layer_saved(shape, saved, l), x0,
                      next);
    }
    return EMBER_OK;
}

/* The backward's scratch: the running gradient of x_{l+1} (g), x0's
 * gradient from the gates (gx0), the gate's gradient (du), V x's (dv). */
typedef struct {
    float *g, *gx0, *du, *dv;
} scratch_t;

/* @scratch's pieces (ember_crossnet_scratch_floats of them). */
static scratch_t scratch_of(const ember_crossnet_shape_t *shape, float *scratch)
{
    const size_t Bn = shape->batch * ember_crossnet_width(shape);
    return (scratch_t){
            .g = scratch, .gx0 = scratch + Bn, .du = scratch + 2 * Bn, .dv = scratch + 3 * Bn};
}

/* Layer @l's parameter gradients (into @grad_params) and the gradient of
 * its input x_l, in place of @s->g's gradient of its output. */
static void layer_backward(const ember_crossnet_shape_t *shape, layer_params_t p, layer_saved_t sv,
                           const float *x0, size_t l, float *grad_params, scratch_t *s)
{
    const int B = (int)shape->batch, n = (int)ember_crossnet_width(shape), r = (int)shape->rank;
    const layer_params_t gp = layer_params(shape, grad_params, l);
    float *gw = (float *)gp.w, *gv = (float *)gp.v, *gb = (float *)gp.b;
    /* next = x0 * gate + x: the gate's gradient du = g * x0 (summed over
     * the batch: the bias's), x0's g * gate (the last layer's starts x0's
     * sum); one pass over each row, each loop branch-free so it vectorizes. */
    const int first = l + 1 == shape->layers;
    memset(gb, 0, (size_t)n * sizeof(float));
    for (size_t b = 0; b < (size_t)B; b++) {
        const size_t at = b * (size_t)n;
        const float *g = s->g + at, *x = x0 + at, *gate = sv.gate + at;
        float *du = s->du + at, *gx0 = s->gx0 + at;
        for (size_t k = 0; k < (size_t)n; k++) {
            du[k] = g[k] * x[k];
            gb[k] += du[k];
        }
        if (first) {
            for (size_t k = 0; k < (size_t)n; k++)
                gx0[k] = g[k] * gate[k];
        } else {
            for (size_t k = 0; k < (size_t)n; k++)
                gx0[k] = gx0[k] + g[k] * gate[k];
        }
    }
    /* gate = v W^T + b: dW = du^T v, dv = du W. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, r, B, 1.0f, s->du, n, sv.v, r, 0.0f, gw,
                r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, r, n, 1.0f, s->du, n, p.w, r, 0.0f,
                s->dv, r);
    /* v = x V^T: dV = dv^T x; x's gradient is the residual's g plus dv V. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, n, B, 1.0f, s->dv, r, sv.x, n, 0.0f, gv,
                n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, n, r, 1.0f, s->dv, r, p.v, n, 1.0f,
                s->g, n);
}

ember_status_t ember_crossnet_backward(const ember_crossnet_shape_t *shape, const float *dense,
                                       const float *pooled, const float *params, const float *saved,
                                       const float *grad_out, float *grad_params, float *grad_dense,
                                       float *grad_pooled)
{
    if (!ember_crossnet_shape_ok(shape))
        return refuse("backward", shape);
    float *scratch = malloc(ember_crossnet_scratch_floats(shape) * sizeof(float));
    if (!scratch)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status =
            ember_crossnet_backward_in(shape, dense, pooled, params, saved, grad_out, grad_params,
                                       grad_dense, grad_pooled, scratch);
    free(scratch);
    return status;
}

ember_status_t ember_crossnet_backward_in(const ember_crossnet_shape_t *shape, const float *dense,
                                          const float *pooled, const float *params,
                                          const float *saved, const float *grad_out,
                                          float *grad_params, float *grad_dense, float *grad_pooled,
                                          float *scratch)
{
    if (!ember_crossnet_shape_ok(shape) || !buffers_valid(shape, dense, pooled, params) || !saved ||
        !grad_out || !grad_params || !grad_dense || (shape->tables > 0 && !grad_pooled) || !scratch)
        return refuse("backward", shape);
    const size_t Bn = shape->batch * ember_crossnet_width(shape);
    scratch_t s = scratch_of(shape, scratch);
    const float *x0 = layer_saved(shape, saved, 0).x;
    memcpy(s.g, grad_out, Bn * sizeof(float));
    for (size_t l = shape->layers; l-- > 0;)
        layer_backward(shape, layer_params(shape, params, l), layer_saved(shape, saved, l), x0, l,
                       grad_params, &s);
    /* x0 is also layer 0's input: its gradient is the gates' plus g. */
    split_sum(shape, s.gx0, s.g, grad_dense, grad_pooled);
    return EMBER_OK;
}
