/* ember engine: Linear / ReLU / MLP on the CPU through CBLAS. */
#include "engine/ops/dense.h"

#include <ember/log.h>

#include <cblas.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* CBLAS takes int sizes; anything larger must be refused, not truncated. */
static int blas_dims_ok(size_t a, size_t b, size_t c)
{
    return a <= INT_MAX && b <= INT_MAX && c <= INT_MAX && (a == 0 || b <= INT_MAX / a) &&
           (b == 0 || c <= INT_MAX / b) && (a == 0 || c <= INT_MAX / a);
}

ember_status_t ember_linear_forward(const float *x, size_t batch, size_t in, size_t out,
                                    const float *weight, const float *bias, float *y_p)
{
    if (!blas_dims_ok(batch, in, out) || in == 0 || out == 0 ||
        (batch > 0 && (!x || !weight || !y_p))) {
        ember_error("dense",
                    "linear forward: invalid arguments (batch %zu, "
                    "in %zu, out %zu)",
                    batch, in, out);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch == 0)
        return EMBER_OK;
    /* Seed y with the bias so one GEMM with beta = 1 adds x A^T onto it. */
    if (bias) {
        for (size_t r = 0; r < batch; r++)
            memcpy(y_p + r * out, bias, out * sizeof(*y_p));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)batch, (int)out, (int)in, 1.0f, x,
                (int)in, weight, (int)in, bias ? 1.0f : 0.0f, y_p, (int)out);
    return EMBER_OK;
}

ember_status_t ember_linear_backward(const float *x, size_t batch, size_t in, size_t out,
                                     const float *weight, const float *grad_y, int accumulate,
                                     float *grad_x_p, float *grad_weight_p, float *grad_bias_p)
{
    const float beta = accumulate ? 1.0f : 0.0f;

    if (!blas_dims_ok(batch, in, out) || in == 0 || out == 0 || (batch > 0 && !grad_y) ||
        (grad_weight_p && batch > 0 && !x) || (grad_x_p && !weight)) {
        ember_error("dense",
                    "linear backward: invalid arguments (batch %zu, "
                    "in %zu, out %zu)",
                    batch, in, out);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (grad_weight_p) {
        if (batch == 0) {
            if (!accumulate)
                memset(grad_weight_p, 0, out * in * sizeof(float));
        } else {
            /* dA [out, in] = grad_y^T [out, batch] x [batch, in] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)batch,
                        1.0f, grad_y, (int)out, x, (int)in, beta, grad_weight_p, (int)in);
        }
    }
    if (grad_bias_p) {
        if (!accumulate)
            memset(grad_bias_p, 0, out * sizeof(float));
        for (size_t r = 0; r < batch; r++) {
            const float *g = grad_y + r * out;
            for (size_t o = 0; o < out; o++)
                grad_bias_p[o] += g[o];
        }
    }
    if (grad_x_p && batch > 0) {
        /* dx [batch, in] = grad_y [batch, out] A [out, in] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)batch, (int)in, (int)out, 1.0f,
                    grad_y, (int)out, weight, (int)in, 0.0f, grad_x_p, (int)in);
    }
    return EMBER_OK;
}

void ember_relu_forward(const float *x, size_t n, float *y_p)
{
    for (size_t i = 0; i < n; i++)
        y_p[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void ember_relu_backward(const float *x, const float *grad_y, size_t n, float *grad_x_p)
{
    size_t i = 0;
#ifdef __SSE2__
    /* Four at a time, by a mask (the compiler leaves the branch scalar):
     * grad_y's bits where x > 0, else +0, as the scalar loop gives. */
    const __m128 zero = _mm_setzero_ps();
    for (; i + 4 <= n; i += 4) {
        const __m128 pass = _mm_cmpgt_ps(_mm_loadu_ps(x + i), zero);
        _mm_storeu_ps(grad_x_p + i, _mm_and_ps(pass, _mm_loadu_ps(grad_y + i)));
    }
#endif
    for (; i < n; i++)
        grad_x_p[i] = x[i] > 0.0f ? grad_y[i] : 0.0f;
}

struct ember_mlp {
    size_t nlayers;
    size_t *sizes;        /* [nlayers + 1] */
    size_t *param_offset; /* [nlayers] start of layer l's weight in params */
    size_t nparams;
    float *params;
    float *grads;
    size_t max_width;   /* widest layer, sizes scratch buffers */
    size_t batch_cap;   /* batch the activation buffers hold */
    size_t batch;       /* batch of the last forward; 0 = none */
    const float *input; /* borrowed from the last forward */
    float **acts;       /* [nlayers - 1] post-ReLU outputs of hidden layers */
    float *scratch[2];  /* gradient ping-pong buffers for backward */
};

/* splitmix64: tiny, seedable, good enough for weight initialisation. */
static uint64_t mlp_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static float mlp_uniform(uint64_t *state, float bound)
{
    double u = (double)(mlp_rand(state) >> 11) * (1.0 / 9007199254740992.0);
    return (float)((2.0 * u - 1.0) * bound);
}

ember_status_t ember_mlp_create(const size_t *sizes, size_t nsizes, uint64_t seed,
                                ember_mlp_t **mlp_p)
{
    ember_mlp_t *mlp;
    uint64_t rng = seed;

    if (!sizes || nsizes < 2 || !mlp_p) {
        ember_error("dense", "mlp: needs at least 2 layer sizes");
        return EMBER_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < nsizes; i++) {
        if (sizes[i] == 0 || sizes[i] > INT_MAX) {
            ember_error("dense", "mlp: layer width %zu (index %zu) invalid", sizes[i], i);
            return EMBER_ERR_INVALID_PARAM;
        }
    }
    mlp = calloc(1, sizeof(*mlp));
    if (!mlp)
        return EMBER_ERR_NO_MEMORY;
    mlp->nlayers = nsizes - 1;
    mlp->sizes = malloc(nsizes * sizeof(*mlp->sizes));
    mlp->param_offset = malloc(mlp->nlayers * sizeof(*mlp->param_offset));
    mlp->acts = calloc(mlp->nlayers, sizeof(*mlp->acts));
    if (!mlp->sizes || !mlp->param_offset || !mlp->acts)
        goto err_destroy;
    memcpy(mlp->sizes, sizes, nsizes * sizeof(*sizes));
    for (size_t l = 0; l < mlp->nlayers; l++) {
        mlp->param_offset[l] = mlp->nparams;
        mlp->nparams += sizes[l + 1] * sizes[l] + sizes[l + 1];
    }
    for (size_t i = 0; i < nsizes; i++)
        mlp->max_width = sizes[i] > mlp->max_width ? sizes[i] : mlp->max_width;
    mlp->params = malloc(mlp->nparams * sizeof(float));
    mlp->grads = calloc(mlp->nparams, sizeof(float));
    if (!mlp->params || !mlp->grads)
        goto err_destroy;
    for (size_t l = 0; l < mlp->nlayers; l++) {
        float bound = 1.0f / sqrtf((float)sizes[l]);
        size_t count = sizes[l + 1] * sizes[l] + sizes[l + 1];
        float *p = mlp->params + mlp->param_offset[l];
        for (size_t i = 0; i < count; i++)
            p[i] = mlp_uniform(&rng, bound);
    }
    *mlp_p = mlp;
    return EMBER_OK;

err_destroy:
    ember_mlp_destroy(mlp);
    ember_error("dense", "mlp: out of memory");
    return EMBER_ERR_NO_MEMORY;
}

void ember_mlp_destroy(ember_mlp_t *mlp)
{
    if (!mlp)
        return;
    if (mlp->acts) {
        for (size_t l = 0; l < mlp->nlayers; l++)
            free(mlp->acts[l]);
    }
    free(mlp->acts);
    free(mlp->scratch[0]);
    free(mlp->scratch[1]);
    free(mlp->params);
    free(mlp->grads);
    free(mlp->param_offset);
    free(mlp->sizes);
    free(mlp);
}

size_t ember_mlp_num_layers(const ember_mlp_t *mlp)
{
    return mlp->nlayers;
}

size_t ember_mlp_num_params(const ember_mlp_t *mlp)
{
    return mlp->nparams;
}

float *ember_mlp_params(ember_mlp_t *mlp)
{
    return mlp->params;
}

float *ember_mlp_grads(ember_mlp_t *mlp)
{
    return mlp->grads;
}

ember_status_t ember_mlp_layer(ember_mlp_t *mlp, size_t layer, float **weight_p, float **bias_p,
                               float **grad_weight_p, float **grad_bias_p)
{
    if (!mlp || layer >= mlp->nlayers)
        return EMBER_ERR_OUT_OF_RANGE;
    size_t off = mlp->param_offset[layer];
    size_t wcount = mlp->sizes[layer + 1] * mlp->sizes[layer];
    if (weight_p)
        *weight_p = mlp->params + off;
    if (bias_p)
        *bias_p = mlp->params + off + wcount;
    if (grad_weight_p)
        *grad_weight_p = mlp->grads + off;
    if (grad_bias_p)
        *grad_bias_p = mlp->grads + off + wcount;
    return EMBER_OK;
}

/* Grow the per-batch buffers; the only allocation on the training path, and
 * only when a batch is larger than any before it. */
static ember_status_t mlp_reserve(ember_mlp_t *mlp, size_t batch)
{
    if (batch <= mlp->batch_cap)
        return EMBER_OK;
    for (size_t l = 0; l + 1 < mlp->nlayers; l++) {
        float *p = realloc(mlp->acts[l], batch * mlp->sizes[l + 1] * sizeof(float));
        if (!p)
            return EMBER_ERR_NO_MEMORY;
        mlp->acts[l] = p;
    }
    for (int i = 0; i < 2; i++) {
        float *p = realloc(mlp->scratch[i], batch * mlp->max_width * sizeof(float));
        if (!p)
            return EMBER_ERR_NO_MEMORY;
        mlp->scratch[i] = p;
    }
    mlp->batch_cap = batch;
    return EMBER_OK;
}

ember_status_t ember_mlp_forward(ember_mlp_t *mlp, const float *x, size_t batch, float *y_p)
{
    if (!mlp || (batch > 0 && (!x || !y_p)))
        return EMBER_ERR_INVALID_PARAM;
    if (mlp_reserve(mlp, batch) != EMBER_OK) {
        ember_error("dense", "mlp: no memory for a batch of %zu", batch);
        return EMBER_ERR_NO_MEMORY;
    }
    const float *in = x;
    for (size_t l = 0; l < mlp->nlayers; l++) {
        float *w, *b;
        int last = (l + 1 == mlp->nlayers);
        float *y = last ? y_p : mlp->acts[l];
        size_t nout = mlp->sizes[l + 1];

        ember_mlp_layer(mlp, l, &w, &b, NULL, NULL);
        EMBER_CHECK(ember_linear_forward(in, batch, mlp->sizes[l], nout, w, b, y));
        if (!last)
            ember_relu_forward(y, batch * nout, y);
        in = y;
    }
    mlp->input = x;
    mlp->batch = batch;
    return EMBER_OK;
}

ember_status_t ember_mlp_backward(ember_mlp_t *mlp, const float *grad_y, float *grad_x_p)
{
    if (!mlp || !mlp->input || (mlp->batch > 0 && !grad_y)) {
        ember_error("dense", "mlp backward without a forward");
        return EMBER_ERR_INVALID_PARAM;
    }
    const size_t batch = mlp->batch;
    const float *g = grad_y;
    int ping = 0;

    for (size_t l = mlp->nlayers; l-- > 0;) {
        float *w = NULL, *gw = NULL, *gb = NULL;
        const float *x = l == 0 ? mlp->input : mlp->acts[l - 1];
        float *gx = NULL;

        if (l > 0)
            gx = mlp->scratch[ping];
        else
            gx = grad_x_p;
        ember_mlp_layer(mlp, l, &w, NULL, &gw, &gb);
        EMBER_CHECK(ember_linear_backward(x, batch, mlp->sizes[l], mlp->sizes[l + 1], w, g, 0, gx,
                                          gw, gb));
        if (l > 0) {
            /* acts[l-1] is post-ReLU: positive exactly where ReLU passed. */
            ember_relu_backward(mlp->acts[l - 1], gx, batch * mlp->sizes[l], gx);
            g = gx;
            ping ^= 1;
        }
    }
    return EMBER_OK;
}
