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

/* The elementwise loops in AVX2 where the CPU has it (a clone chosen once,
 * at load): 8 floats a step instead of SSE's 4.  AVX2 alone, without FMA,
 * so the compiler fuses no multiply-add: the same bits as the SSE clone. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WIDE __attribute__((target_clones("avx2", "default")))
#else
#define WIDE
#endif

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

/* x0's rows [b0, b0 + m): dense[b], then each table's pooled[t][b]. */
static void concat_rows(const ember_crossnet_shape_t *shape, const float *dense,
                        const float *pooled, size_t b0, size_t m, float *x0)
{
    const size_t D = shape->dim, B = shape->batch, n = ember_crossnet_width(shape);
    for (size_t b = b0; b < b0 + m; b++) {
        memcpy(x0 + b * n, dense + b * D, D * sizeof(float));
        for (size_t t = 0; t < shape->tables; t++)
            memcpy(x0 + b * n + (t + 1) * D, pooled + (t * B + b) * D, D * sizeof(float));
    }
}

/* @n floats of @a + @b into @out (vectorized: one pass). */
WIDE static void add_into(const float *a, const float *b, size_t n, float *out)
{
    for (size_t k = 0; k < n; k++)
        out[k] = a[k] + b[k];
}

/* The concat's inverse for rows [b0, b0 + m) of gx0 + g (@gx0 and @g the
 * chunk's, row 0 = b0), x0's whole gradient, into dense's and pooled's. */
static void split_sum_rows(const ember_crossnet_shape_t *shape, const float *gx0, const float *g,
                           size_t b0, size_t m, float *grad_dense, float *grad_pooled)
{
    const size_t D = shape->dim, B = shape->batch, n = ember_crossnet_width(shape);
    for (size_t i = 0; i < m; i++) {
        const size_t b = b0 + i;
        add_into(gx0 + i * n, g + i * n, D, grad_dense + b * D);
        for (size_t t = 0; t < shape->tables; t++)
            add_into(gx0 + i * n + (t + 1) * D, g + i * n + (t + 1) * D, D,
                     grad_pooled + (t * B + b) * D);
    }
}

/* A forward row: gate += b; next = x0 * gate + x. */
WIDE static void gate_forward_row(const float *b, const float *x0, const float *x, size_t n,
                                  float *gate, float *next)
{
    for (size_t k = 0; k < n; k++) {
        gate[k] += b[k];
        next[k] = x0[k] * gate[k] + x[k];
    }
}

/* A backward row: du = g * x0 (added into the bias's gradient gb), x0's
 * gradient g * gate (@first: the last layer's, which starts it). */
WIDE static void gate_backward_row(const float *g, const float *x0, const float *gate, size_t n,
                                   int first, float *du, float *gb, float *gx0)
{
    for (size_t k = 0; k < n; k++) {
        du[k] = g[k] * x0[k];
        gb[k] += du[k];
    }
    if (first) {
        for (size_t k = 0; k < n; k++)
            gx0[k] = g[k] * gate[k];
    } else {
        for (size_t k = 0; k < n; k++)
            gx0[k] = gx0[k] + g[k] * gate[k];
    }
}

/* Rows [b0, b0 + m) through every layer: v = x V^T, gate = v W^T + b,
 * next = x0 * gate + x.  A chunk of rows at a time keeps the elementwise
 * work on what the GEMMs just wrote, in cache. */
static void rows_forward(const ember_crossnet_shape_t *shape, const float *params, float *saved,
                         size_t b0, size_t m, float *out)
{
    const size_t L = shape->layers, n = ember_crossnet_width(shape), r = shape->rank;
    const float *x0 = layer_saved(shape, saved, 0).x + b0 * n;
    for (size_t l = 0; l < L; l++) {
        const layer_params_t p = layer_params(shape, params, l);
        const layer_saved_t s = layer_saved(shape, saved, l);
        const float *x = s.x + b0 * n;
        float *v = s.v + b0 * r, *gate = s.gate + b0 * n;
        float *next = (l + 1 < L ? layer_saved(shape, saved, l + 1).x : out) + b0 * n;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)r, (int)n, 1.0f, x,
                    (int)n, p.v, (int)n, 0.0f, v, (int)r);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)r, 1.0f, v,
                    (int)r, p.w, (int)r, 0.0f, gate, (int)n);
        for (size_t i = 0; i < m; i++)
            gate_forward_row(p.b, x0 + i * n, x + i * n, n, gate + i * n, next + i * n);
    }
}

/* Rows of the chunk from @b0. */
static size_t chunk_rows(const ember_crossnet_shape_t *shape, size_t b0)
{
    const size_t left = shape->batch - b0;
    return left < EMBER_CROSSNET_CHUNK ? left : EMBER_CROSSNET_CHUNK;
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
    float *x0 = layer_saved(shape, saved, 0).x;
    for (size_t b0 = 0; b0 < shape->batch; b0 += EMBER_CROSSNET_CHUNK) {
        const size_t m = chunk_rows(shape, b0);
        concat_rows(shape, dense, pooled, b0, m, x0);
        rows_forward(shape, params, saved, b0, m, out);
    }
    return EMBER_OK;
}

/* The backward's scratch, one chunk of rows: the running gradient of
 * x_{l+1} (g), x0's gradient from the gates (gx0), the gate's gradient
 * (du), V x's (dv). */
typedef struct {
    float *g, *gx0, *du, *dv;
} scratch_t;

static scratch_t scratch_of(const ember_crossnet_shape_t *shape, float *scratch)
{
    const size_t Cn = EMBER_CROSSNET_CHUNK * ember_crossnet_width(shape);
    return (scratch_t){
            .g = scratch, .gx0 = scratch + Cn, .du = scratch + 2 * Cn, .dv = scratch + 3 * Cn};
}

/* Layer @l's backward for the chunk's @m rows from b0: its parameters'
 * gradients (the first chunk's written, later ones' added: @first), and
 * the gradient of its input in place of @s->g's of its output. */
static void layer_backward_rows(const ember_crossnet_shape_t *shape, const float *params,
                                const float *saved, size_t l, size_t b0, size_t m, int first,
                                float *grad_params, scratch_t *s)
{
    const size_t n = ember_crossnet_width(shape), r = shape->rank;
    const layer_params_t p = layer_params(shape, params, l);
    const layer_saved_t sv = layer_saved(shape, saved, l);
    const layer_params_t gp = layer_params(shape, grad_params, l);
    float *gw = (float *)gp.w, *gv = (float *)gp.v, *gb = (float *)gp.b;
    const float *x0 = layer_saved(shape, saved, 0).x + b0 * n, *x = sv.x + b0 * n,
                *gate = sv.gate + b0 * n, *v = sv.v + b0 * r;
    const float beta = first ? 0.0f : 1.0f;
    /* next = x0 * gate + x: the gate's gradient du = g * x0 (summed over
     * the rows: the bias's, in row order), x0's g * gate (the last layer's
     * starts x0's sum); each loop branch-free, so it vectorizes. */
    if (first)
        memset(gb, 0, n * sizeof(float));
    for (size_t i = 0; i < m; i++)
        gate_backward_row(s->g + i * n, x0 + i * n, gate + i * n, n, l + 1 == shape->layers,
                          s->du + i * n, gb, s->gx0 + i * n);
    /* gate = v W^T + b: dW += du^T v, dv = du W. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)r, (int)m, 1.0f, s->du,
                (int)n, v, (int)r, beta, gw, (int)r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)r, (int)n, 1.0f, s->du,
                (int)n, p.w, (int)r, 0.0f, s->dv, (int)r);
    /* v = x V^T: dV += dv^T x; x's gradient is the residual's g plus dv V. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)r, (int)n, (int)m, 1.0f, s->dv,
                (int)r, x, (int)n, beta, gv, (int)n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)r, 1.0f, s->dv,
                (int)r, p.v, (int)n, 1.0f, s->g, (int)n);
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
    const size_t n = ember_crossnet_width(shape);
    scratch_t s = scratch_of(shape, scratch);
    /* A chunk of rows through every layer at a time: its running gradients
     * stay in cache; the parameters' gradients add up over the chunks. */
    for (size_t b0 = 0; b0 < shape->batch; b0 += EMBER_CROSSNET_CHUNK) {
        const size_t m = chunk_rows(shape, b0);
        memcpy(s.g, grad_out + b0 * n, m * n * sizeof(float));
        for (size_t l = shape->layers; l-- > 0;)
            layer_backward_rows(shape, params, saved, l, b0, m, b0 == 0, grad_params, &s);
        /* x0 is also layer 0's input: its gradient is the gates' plus g. */
        split_sum_rows(shape, s.gx0, s.g, b0, m, grad_dense, grad_pooled);
    }
    return EMBER_OK;
}
