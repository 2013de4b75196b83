/*
 * cuda/cuda_ops: ReLU, cross entropy (mean) and the small helpers of the
 * cuBLAS Linear (bias broadcast, bias gradient), with engine/ops/dense.c and
 * engine/ops/loss.c semantics.
 */
#include "cuda/cuda_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

namespace
{

constexpr int kBlock = 256;

__global__ void k_relu_fwd(const float *__restrict__ x, size_t n, float *y)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

__global__ void k_relu_bwd(const float *__restrict__ x, const float *grad_y, size_t n,
                           float *grad_x)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        grad_x[i] = x[i] > 0.0f ? grad_y[i] : 0.0f;
}

static unsigned grid_for(size_t n)
{
    size_t g = (n + kBlock - 1) / kBlock;
    return (unsigned)(g > 65536 ? 65536 : (g ? g : 1));
}

/* Block-wide reductions over kBlock threads. */
__device__ double block_max(double v, double *shared)
{
    for (int off = 16; off > 0; off /= 2)
        v = fmax(v, __shfl_down_sync(0xffffffffu, v, off));
    if (threadIdx.x % 32 == 0)
        shared[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double m = shared[0];
        for (int w = 1; w < kBlock / 32; w++)
            m = fmax(m, shared[w]);
        shared[kBlock / 32] = m;
    }
    __syncthreads();
    double r = shared[kBlock / 32];
    __syncthreads();
    return r;
}

__device__ double block_sum(double v, double *shared)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0)
        shared[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int w = 0; w < kBlock / 32; w++)
            s += shared[w];
        shared[kBlock / 32] = s;
    }
    __syncthreads();
    double r = shared[kBlock / 32];
    __syncthreads();
    return r;
}

/* Pass 1, a block per row: the row's max and log-sum-exp (double, as the
 * CPU), its loss term, and the first bad target. */
__global__ void k_ce_rows(const float *__restrict__ logits, size_t classes,
                          const int64_t *__restrict__ targets, double *row_max, double *row_sum,
                          double *row_loss, unsigned long long *bad_pos)
{
    __shared__ double shared[kBlock / 32 + 1];
    size_t r = blockIdx.x;
    const float *z = logits + r * classes;
    int64_t t = targets[r];
    if (t < 0 || (uint64_t)t >= classes) {
        if (threadIdx.x == 0)
            atomicMin(bad_pos, (unsigned long long)r);
        return; /* uniform across the block: t is per row */
    }
    double m = -INFINITY;
    for (size_t c = threadIdx.x; c < classes; c += blockDim.x)
        m = fmax(m, (double)z[c]);
    m = block_max(m, shared);
    double s = 0.0;
    for (size_t c = threadIdx.x; c < classes; c += blockDim.x)
        s += exp((double)z[c] - m);
    s = block_sum(s, shared);
    if (threadIdx.x == 0) {
        row_max[r] = m;
        row_sum[r] = s;
        row_loss[r] = m + log(s) - (double)z[t];
    }
}

/* One block sums the row losses in a fixed order (deterministic). */
__global__ void k_ce_total(const double *row_loss, size_t batch, double *total)
{
    __shared__ double shared[kBlock / 32 + 1];
    double s = 0.0;
    for (size_t r = threadIdx.x; r < batch; r += blockDim.x)
        s += row_loss[r];
    s = block_sum(s, shared);
    if (threadIdx.x == 0)
        *total = s / (double)batch;
}

/* Pass 2, only after the checks passed: (softmax - onehot) / batch. */
__global__ void k_ce_grad(const float *logits, size_t classes, const int64_t *__restrict__ targets,
                          const double *__restrict__ row_max, const double *__restrict__ row_sum,
                          double inv, float *grad)
{
    size_t r = blockIdx.x;
    const float *z = logits + r * classes;
    float *g = grad + r * classes;
    double m = row_max[r], s = row_sum[r];
    int64_t t = targets[r];
    for (size_t c = threadIdx.x; c < classes; c += blockDim.x) {
        double p = exp((double)z[c] - m) / s;
        double onehot = (int64_t)c == t ? 1.0 : 0.0;
        g[c] = (float)((p - onehot) * inv);
    }
}

__global__ void k_bias_fill(const float *__restrict__ bias, size_t batch, size_t out, float *y)
{
    size_t total = batch * out;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = bias[i % out];
}

/* sum over rows of m [rows, cols]: a thread per column, coalesced. */
__global__ void k_column_sum(const float *__restrict__ m, size_t rows, size_t cols, int accumulate,
                             float *sum)
{
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float acc = 0.0f;
    for (size_t r = 0; r < rows; r++)
        acc += m[r * cols + c];
    sum[c] = accumulate ? sum[c] + acc : acc;
}

/* Whole rows between a table and a packed [n, dim] buffer: a block row per
 * row, lanes across dim (coalesced on both sides). */
__global__ void k_rows_gather(const float *__restrict__ table, size_t dim,
                              const int64_t *__restrict__ rows, size_t n, float *__restrict__ out)
{
    size_t i = (size_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (i >= n)
        return;
    const float *src = table + (size_t)rows[i] * dim;
    for (size_t d = threadIdx.x; d < dim; d += blockDim.x)
        out[i * dim + d] = src[d];
}

__global__ void k_rows_scatter(float *__restrict__ table, size_t dim,
                               const int64_t *__restrict__ rows, size_t n,
                               const float *__restrict__ in)
{
    size_t i = (size_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (i >= n)
        return;
    float *dst = table + (size_t)rows[i] * dim;
    for (size_t d = threadIdx.x; d < dim; d += blockDim.x)
        dst[d] = in[i * dim + d];
}

/* engine/device.h's parts_combine, an element per thread (the order of the
 * adds per element is the host's: bit for bit). */
__global__ void k_parts_combine(const float *__restrict__ parts, size_t stride, uint32_t nparts,
                                size_t bags, size_t dim, int mode,
                                const uint32_t *__restrict__ counts,
                                const uint32_t *__restrict__ bag_counts,
                                const uint32_t *__restrict__ places, size_t places_stride,
                                float *__restrict__ out, int16_t *__restrict__ winner)
{
    size_t total = bags * dim;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / dim;
        if (mode == EMBER_BAG_MAX) {
            /* Of equal maxima the bag's first entry's (the lowest place). */
            float best = 0.0f;
            uint32_t best_place = 0;
            int16_t w = -1;
            for (uint32_t p = 0; p < nparts; p++) {
                if (!counts[(size_t)p * bags + b])
                    continue;
                float v = parts[p * stride + i];
                uint32_t place = places[p * places_stride + i];
                if (w < 0 || v > best || (v == best && place < best_place)) {
                    best = v;
                    best_place = place;
                    w = (int16_t)p;
                }
            }
            out[i] = best;
            winner[i] = w;
            continue;
        }
        float acc = parts[i];
        for (uint32_t p = 1; p < nparts; p++)
            acc = __fadd_rn(acc, parts[p * stride + i]);
        if (mode == EMBER_BAG_MEAN && bag_counts[b])
            acc = __fmul_rn(acc, __fdiv_rn(1.0f, (float)bag_counts[b]));
        out[i] = acc;
    }
}

__global__ void k_parts_split(const float *__restrict__ grad, uint32_t nparts, size_t bags,
                              size_t dim, int mode, const uint32_t *__restrict__ bag_counts,
                              const int16_t *__restrict__ winner, float *__restrict__ grads,
                              size_t stride)
{
    size_t total = bags * dim;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / dim;
        float g = grad[i];
        for (uint32_t p = 0; p < nparts; p++) {
            float v = g;
            if (mode == EMBER_BAG_MAX)
                v = winner[i] == (int16_t)p ? g : 0.0f;
            else if (mode == EMBER_BAG_MEAN && bag_counts[b])
                v = __fmul_rn(g, __fdiv_rn(1.0f, (float)bag_counts[b]));
            grads[p * stride + i] = v;
        }
    }
}

static dim3 rows_block(size_t dim)
{
    unsigned tx = 32;
    while (tx < dim && tx < kBlock)
        tx <<= 1;
    return dim3(tx, kBlock / tx);
}

size_t align_up(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

} /* namespace */

extern "C" ember_status_t cuda_relu_forward(cuda_dev_t *dev, const float *x, size_t n, float *y_p)
{
    if (n == 0)
        return EMBER_OK;
    if (!x || !y_p)
        return EMBER_ERR_INVALID_PARAM;
    k_relu_fwd<<<grid_for(n), kBlock, 0, dev->stream>>>(x, n, y_p);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_relu_backward(cuda_dev_t *dev, const float *x, const float *grad_y,
                                             size_t n, float *grad_x_p)
{
    if (n == 0)
        return EMBER_OK;
    if (!x || !grad_y || !grad_x_p)
        return EMBER_ERR_INVALID_PARAM;
    k_relu_bwd<<<grid_for(n), kBlock, 0, dev->stream>>>(x, grad_y, n, grad_x_p);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_cross_entropy(cuda_dev_t *dev, const float *logits, size_t batch,
                                             size_t classes, const int64_t *targets, float *loss_p,
                                             float *grad_p)
{
    if (!logits || !targets || !loss_p || batch == 0 || classes == 0 || batch > 0x7fffffffu) {
        ember_error("cuda",
                    "cross entropy: invalid arguments (batch %zu, "
                    "classes %zu)",
                    batch, classes);
        return EMBER_ERR_INVALID_PARAM;
    }
    size_t o_max = 0, o_sum = align_up(batch * 8), o_loss = o_sum + align_up(batch * 8);
    size_t o_total = o_loss + align_up(batch * 8);
    size_t o_bad = o_total + 256;
    EMBER_CHECK(cuda_scratch_reserve(dev, o_bad + 256));
    char *s = (char *)dev->scratch;
    double *row_max = (double *)(s + o_max), *row_sum = (double *)(s + o_sum);
    double *row_loss = (double *)(s + o_loss), *total = (double *)(s + o_total);
    auto *bad = (unsigned long long *)(s + o_bad);

    CUDA_CALL(cudaMemsetAsync(bad, 0xff, sizeof(*bad), dev->stream));
    k_ce_rows<<<(unsigned)batch, kBlock, 0, dev->stream>>>(logits, classes, targets, row_max,
                                                           row_sum, row_loss, bad);
    CUDA_CALL(cudaGetLastError());
    k_ce_total<<<1, kBlock, 0, dev->stream>>>(row_loss, batch, total);
    CUDA_CALL(cudaGetLastError());

    /* Host results: [0] = loss (double bits), [1] = first bad position. */
    unsigned long long *host = (unsigned long long *)dev->pinned;
    CUDA_CALL(cudaMemcpyAsync(&host[0], total, 8, cudaMemcpyDeviceToHost, dev->stream));
    CUDA_CALL(cudaMemcpyAsync(&host[1], bad, 8, cudaMemcpyDeviceToHost, dev->stream));
    CUDA_CALL(cudaStreamSynchronize(dev->stream));
    if (host[1] != ~0ull) {
        int64_t t = 0;
        size_t r = (size_t)host[1];
        CUDA_CALL(cudaMemcpy(&t, targets + r, sizeof(t), cudaMemcpyDeviceToHost));
        ember_error("loss",
                    "cross entropy: target %" PRId64 " at position %zu "
                    "is out of range [0, %zu)",
                    t, r, classes);
        return EMBER_ERR_OUT_OF_RANGE;
    }
    double loss;
    memcpy(&loss, &host[0], sizeof(loss));
    if (!isfinite(loss)) {
        ember_error("loss", "cross entropy is not finite (%g)", loss);
        return EMBER_ERR_NUMERIC;
    }
    if (grad_p) {
        k_ce_grad<<<(unsigned)batch, kBlock, 0, dev->stream>>>(
                logits, classes, targets, row_max, row_sum, 1.0 / (double)batch, grad_p);
        CUDA_CALL(cudaGetLastError());
    }
    *loss_p = (float)loss;
    return EMBER_OK;
}

extern "C" ember_status_t cuda_bias_fill(cuda_dev_t *dev, const float *bias, size_t batch,
                                         size_t out, float *y_p)
{
    k_bias_fill<<<grid_for(batch * out), kBlock, 0, dev->stream>>>(bias, batch, out, y_p);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_column_sum(cuda_dev_t *dev, const float *m, size_t rows, size_t cols,
                                          int accumulate, float *sum_p)
{
    k_column_sum<<<(unsigned)((cols + kBlock - 1) / kBlock), kBlock, 0, dev->stream>>>(
            m, rows, cols, accumulate, sum_p);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_rows_gather(cuda_dev_t *dev, const float *table, size_t dim,
                                           const int64_t *rows, size_t n, float *out)
{
    if (n == 0)
        return EMBER_OK;
    if (!table || !rows || !out || dim == 0)
        return EMBER_ERR_INVALID_PARAM;
    dim3 block = rows_block(dim);
    k_rows_gather<<<(unsigned)((n + block.y - 1) / block.y), block, 0, dev->stream>>>(table, dim,
                                                                                      rows, n, out);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_rows_scatter(cuda_dev_t *dev, float *table, size_t dim,
                                            const int64_t *rows, size_t n, const float *in)
{
    if (n == 0)
        return EMBER_OK;
    if (!table || !rows || !in || dim == 0)
        return EMBER_ERR_INVALID_PARAM;
    dim3 block = rows_block(dim);
    k_rows_scatter<<<(unsigned)((n + block.y - 1) / block.y), block, 0, dev->stream>>>(table, dim,
                                                                                       rows, n, in);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_parts_combine(cuda_dev_t *dev, const float *parts, size_t stride,
                                             uint32_t nparts, size_t bags, size_t dim,
                                             ember_bag_mode_t mode, const uint32_t *counts,
                                             const uint32_t *bag_counts, const uint32_t *places,
                                             size_t places_stride, float *out, int16_t *winner)
{
    if (bags == 0 || dim == 0)
        return EMBER_OK;
    if (!parts || !out || nparts == 0 || nparts > 32767 ||
        (mode == EMBER_BAG_MAX && (!counts || !winner || !places)) ||
        (mode == EMBER_BAG_MEAN && !bag_counts))
        return EMBER_ERR_INVALID_PARAM;
    k_parts_combine<<<grid_for(bags * dim), kBlock, 0, dev->stream>>>(
            parts, stride, nparts, bags, dim, (int)mode, counts, bag_counts, places, places_stride,
            out, winner);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_parts_split(cuda_dev_t *dev, const float *grad, uint32_t nparts,
                                           size_t bags, size_t dim, ember_bag_mode_t mode,
                                           const uint32_t *bag_counts, const int16_t *winner,
                                           float *grads, size_t stride)
{
    if (bags == 0 || dim == 0 || nparts == 0)
        return EMBER_OK;
    if (!grad || !grads || (mode == EMBER_BAG_MAX && !winner) ||
        (mode == EMBER_BAG_MEAN && !bag_counts))
        return EMBER_ERR_INVALID_PARAM;
    k_parts_split<<<grid_for(bags * dim), kBlock, 0, dev->stream>>>(
            grad, nparts, bags, dim, (int)mode, bag_counts, winner, grads, stride);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}
