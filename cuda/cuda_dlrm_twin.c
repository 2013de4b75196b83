/* cuda/cuda_dlrm_twin: CPU twins of cuda/cuda_dlrm.cu (see cuda_dlrm_twin.h). */
#include "cuda/cuda_dlrm_twin.h"

#include "engine/ops/dlrm_math.h"

#include <stdlib.h>
#include <string.h>

/* One block's load_vectors: example @b's F vectors into @x [F][D]. */
static void load_vectors(const float *dense, const float *pooled, size_t F, size_t D, size_t batch,
                         size_t b, float *x)
{
    for (size_t k = 0; k < F * D; k++) {
        size_t f = k / D, d = k % D;
        x[k] = f == 0 ? dense[b * D + d] : pooled[((f - 1) * batch + b) * D + d];
    }
}

ember_status_t ember_dlrm_twin_inter_forward(const float *dense, const float *pooled, size_t tables,
                                             size_t batch, size_t dim, float *out)
{
    const size_t F = tables + 1, D = dim, width = D + F * (F - 1) / 2;
    float *x = malloc(F * D * sizeof(float));
    if (!x)
        return EMBER_ERR_NO_MEMORY;
    for (size_t b = 0; b < batch; b++) {
        load_vectors(dense, pooled, F, D, batch, b, x);
        for (size_t c = 0; c < width; c++) {
            size_t i, j;
            if (c < D) {
                out[b * width + c] = x[c];
                continue;
            }
            ember_dlrm_pair_of(F, c - D, &i, &j);
            out[b * width + c] = ember_dlrm_dot(x + i * D, x + j * D, D);
        }
    }
    free(x);
    return EMBER_OK;
}

ember_status_t ember_dlrm_twin_inter_backward(const float *dense, const float *pooled,
                                              size_t tables, size_t batch, size_t dim,
                                              const float *grad_out, float *grad_dense,
                                              float *grad_pooled)
{
    const size_t F = tables + 1, D = dim, pairs = F * (F - 1) / 2, width = D + pairs;
    float *x = malloc((F * D + pairs + 1) * sizeof(float)), *g;
    if (!x)
        return EMBER_ERR_NO_MEMORY;
    g = x + F * D;
    for (size_t b = 0; b < batch; b++) {
        const float *go = grad_out + b * width;
        load_vectors(dense, pooled, F, D, batch, b, x);
        memcpy(g, go + D, pairs * sizeof(float));
        for (size_t k = 0; k < F * D; k++) {
            size_t f = k / D, d = k % D;
            float v = ember_dlrm_inter_grad(x, g, F, D, f, d, go[d]);
            if (f == 0)
                grad_dense[b * D + d] = v;
            else
                grad_pooled[((f - 1) * batch + b) * D + d] = v;
        }
    }
    free(x);
    return EMBER_OK;
}

/* __shfl_down_sync's sum over a warp's 32 lanes, as lane 0 ends with it:
 * each round adds lane l + off to lane l, all lanes at once (ascending l
 * reads l + off before it changes).  Lanes whose l + off is past 31 differ
 * from the GPU's (which adds their own value), but lane 0 never reads them. */
static double warp_sum(double *lane)
{
    for (int off = 16; off > 0; off /= 2)
        for (int l = 0; l < 32; l++) /* lanes past 31 - off keep theirs */
            if (l + off < 32)
                lane[l] += lane[l + off];
    return lane[0];
}

double ember_dlrm_twin_bce(const float *logits, const float *targets, size_t n, float *grad)
{
    double s[EMBER_DLRM_TWIN_THREADS] = {0}, sum = 0.0;
    for (size_t t = 0; t < EMBER_DLRM_TWIN_THREADS; t++)
        for (size_t i = t; i < n; i += EMBER_DLRM_TWIN_THREADS)
            s[t] += ember_dlrm_bce_term(logits[i], targets[i]);
    for (int w = 0; w < EMBER_DLRM_TWIN_THREADS / 32; w++)
        sum += warp_sum(s + w * 32);
    for (size_t i = 0; grad && i < n; i++)
        grad[i] = ember_dlrm_bce_grad(logits[i], targets[i], (double)n);
    return sum / (double)n;
}
