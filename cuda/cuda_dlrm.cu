/*
 * cuda/cuda_dlrm: DLRM's InteractionArch (forward and backward) and its
 * loss (BCE with logits, mean) on the GPU, with engine/ops/interaction.c's
 * and engine/ops/loss.c's semantics.  The per-element math is
 * engine/ops/dlrm_math.h's, shared with the host loss and with the CPU
 * twins of these kernels (cuda/cuda_dlrm_twin.c), which a unit test checks
 * against the host ops on machines without a GPU.
 *
 * The interaction runs a block per example: its F vectors (and, backward,
 * its pair gradients) are loaded into shared memory once, then each thread
 * computes outputs from there.  The loss is summed by one block in a fixed
 * order, so it is the same from run to run.
 */
#include "cuda/cuda_dlrm_twin.h"
#include "cuda/cuda_internal.h"
#include "engine/ops/dlrm_math.h"

#include <math.h>
#include <string.h>

namespace
{

constexpr int kInterBlock = 128;

/* The example @b's F vectors into @x [F][D]: the dense one, then each
 * table's from the pooled block [tables][batch][D]. */
__device__ void load_vectors(const float *dense, const float *pooled, size_t F, size_t D,
                             size_t batch, size_t b, float *x)
{
    for (size_t k = threadIdx.x; k < F * D; k += blockDim.x) {
        size_t f = k / D, d = k % D;
        x[k] = f == 0 ? dense[b * D + d] : pooled[((f - 1) * batch + b) * D + d];
    }
}

__global__ void k_inter_fwd(const float *__restrict__ dense, const float *__restrict__ pooled,
                            size_t F, size_t D, size_t batch, float *__restrict__ out)
{
    extern __shared__ float x[];
    const size_t b = blockIdx.x, width = D + F * (F - 1) / 2;
    load_vectors(dense, pooled, F, D, batch, b, x);
    __syncthreads();
    for (size_t c = threadIdx.x; c < width; c += blockDim.x) {
        size_t i, j;
        if (c < D) {
            out[b * width + c] = x[c];
            continue;
        }
        ember_dlrm_pair_of(F, c - D, &i, &j);
        out[b * width + c] = ember_dlrm_dot(x + i * D, x + j * D, D);
    }
}

__global__ void k_inter_bwd(const float *__restrict__ dense, const float *__restrict__ pooled,
                            size_t F, size_t D, size_t batch, const float *__restrict__ grad_out,
                            float *__restrict__ grad_dense, float *__restrict__ grad_pooled)
{
    extern __shared__ float x[]; /* [F][D] vectors, then [pairs] gradients */
    const size_t b = blockIdx.x, pairs = F * (F - 1) / 2, width = D + pairs;
    float *g = x + F * D;
    const float *go = grad_out + b * width;
    load_vectors(dense, pooled, F, D, batch, b, x);
    for (size_t p = threadIdx.x; p < pairs; p += blockDim.x)
        g[p] = go[D + p];
    __syncthreads();
    for (size_t k = threadIdx.x; k < F * D; k += blockDim.x) {
        size_t f = k / D, d = k % D;
        float v = ember_dlrm_inter_grad(x, g, F, D, f, d, go[d]);
        if (f == 0)
            grad_dense[b * D + d] = v;
        else
            grad_pooled[((f - 1) * batch + b) * D + d] = v;
    }
}

/* One block of EMBER_DLRM_TWIN_THREADS: thread t's terms (t, t + threads,
 * ...), then each warp's by shuffles, then the warps' in order, as the
 * twin sums them. */
__global__ void k_bce_total(const float *__restrict__ logits, const float *__restrict__ targets,
                            size_t n, double *total)
{
    __shared__ double warps[EMBER_DLRM_TWIN_THREADS / 32];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s += ember_dlrm_bce_term(logits[i], targets[i]);
    for (int off = 16; off > 0; off /= 2)
        s += __shfl_down_sync(0xffffffffu, s, off);
    if (threadIdx.x % 32 == 0)
        warps[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int w = 0; w < EMBER_DLRM_TWIN_THREADS / 32; w++)
            sum += warps[w];
        *total = sum / (double)n;
    }
}

__global__ void k_bce_grad(const float *__restrict__ logits, const float *__restrict__ targets,
                           size_t n, float *__restrict__ grad)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        grad[i] = ember_dlrm_bce_grad(logits[i], targets[i], (double)n);
}

/* Shared memory of a block, or 0 when the shape does not fit (48 KiB: the
 * default without opting in to more). */
size_t inter_shared(size_t F, size_t D, int backward)
{
    size_t floats = F * D + (backward ? F * (F - 1) / 2 : 0);
    return floats * sizeof(float) <= 48 * 1024 ? floats * sizeof(float) : 0;
}

ember_status_t inter_check(size_t tables, size_t batch, size_t dim, const void *a, const void *b,
                           int backward)
{
    if (dim == 0 || batch == 0 || batch > 0x7fffffffu || !a || !b) {
        ember_error("cuda", "interaction: invalid arguments (batch %zu, dim %zu)", batch, dim);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (!inter_shared(tables + 1, dim, backward)) {
        ember_error("cuda", "interaction: %zu vectors of %zu do not fit a block's 48 KiB",
                    tables + 1, dim);
        return EMBER_ERR_UNSUPPORTED;
    }
    return EMBER_OK;
}

} /* namespace */

extern "C" ember_status_t cuda_interaction_forward(cuda_dev_t *dev, const float *dense,
                                                   const float *pooled, size_t tables, size_t batch,
                                                   size_t dim, float *out)
{
    EMBER_CHECK(inter_check(tables, batch, dim, dense, out, 0));
    if (tables > 0 && !pooled)
        return EMBER_ERR_INVALID_PARAM;
    const size_t F = tables + 1;
    k_inter_fwd<<<(unsigned)batch, kInterBlock, inter_shared(F, dim, 0), dev->stream>>>(
            dense, pooled, F, dim, batch, out);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_interaction_backward(cuda_dev_t *dev, const float *dense,
                                                    const float *pooled, size_t tables,
                                                    size_t batch, size_t dim, const float *grad_out,
                                                    float *grad_dense, float *grad_pooled)
{
    EMBER_CHECK(inter_check(tables, batch, dim, dense, grad_out, 1));
    if (!grad_dense || (tables > 0 && (!pooled || !grad_pooled)))
        return EMBER_ERR_INVALID_PARAM;
    const size_t F = tables + 1;
    k_inter_bwd<<<(unsigned)batch, kInterBlock, inter_shared(F, dim, 1), dev->stream>>>(
            dense, pooled, F, dim, batch, grad_out, grad_dense, grad_pooled);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_bce_with_logits(cuda_dev_t *dev, const float *logits,
                                               const float *targets, size_t n, float *loss_p,
                                               float *grad_p)
{
    if (!logits || !targets || !loss_p || n == 0) {
        ember_error("loss", "bce: invalid arguments (n %zu)", n);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(cuda_scratch_reserve(dev, sizeof(double)));
    double *total = (double *)dev->scratch, loss;
    k_bce_total<<<1, EMBER_DLRM_TWIN_THREADS, 0, dev->stream>>>(logits, targets, n, total);
    CUDA_CALL(cudaGetLastError());
    CUDA_CALL(cudaMemcpyAsync(dev->pinned, total, sizeof(double), cudaMemcpyDeviceToHost,
                              dev->stream));
    CUDA_CALL(cudaStreamSynchronize(dev->stream));
    memcpy(&loss, dev->pinned, sizeof(loss));
    if (!isfinite(loss)) {
        ember_error("loss", "bce with logits is not finite (%g)", loss);
        return EMBER_ERR_NUMERIC;
    }
    if (grad_p) {
        size_t blocks = (n + 255) / 256;
        k_bce_grad<<<(unsigned)(blocks > 65536 ? 65536 : blocks), 256, 0, dev->stream>>>(
                logits, targets, n, grad_p);
        CUDA_CALL(cudaGetLastError());
    }
    *loss_p = (float)loss;
    return EMBER_OK;
}
