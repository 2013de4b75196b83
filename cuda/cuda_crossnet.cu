/*
 * cuda/cuda_crossnet: DLRM-DCN's interaction, TorchRec's LowRankCrossNet,
 * on the GPU with engine/ops/crossnet.c's semantics and @saved layout.
 *
 * The products are cuBLAS's (pedantic math, as the device's handle is set:
 * no TF32), the rest small elementwise kernels: the concat of the dense and
 * pooled features into x0, each layer's gate (the bias added after the W
 * product, as PyTorch adds it), its backward, and the split of x0's
 * gradient back into the dense and pooled ones.  The backward's running
 * gradients live in the device's grow-only scratch.
 */
#include "cuda/cuda_internal.h"
#include "engine/ops/crossnet.h"

#include <cublas_v2.h>

namespace
{

constexpr int kBlock = 256;

unsigned grid_for(size_t n)
{
    size_t blocks = (n + kBlock - 1) / kBlock;
    return (unsigned)(blocks > 65535 ? 65535 : blocks);
}

__device__ size_t first_index()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ size_t stride()
{
    return (size_t)gridDim.x * blockDim.x;
}

/* x0[b][f * D + d]: the dense vector for f = 0, else table f - 1's pooled. */
__global__ void k_concat(const float *__restrict__ dense, const float *__restrict__ pooled,
                         size_t batch, size_t D, size_t n, float *__restrict__ x0)
{
    for (size_t i = first_index(); i < batch * n; i += stride()) {
        const size_t b = i / n, f = (i % n) / D, d = i % D;
        x0[i] = f == 0 ? dense[b * D + d] : pooled[((f - 1) * batch + b) * D + d];
    }
}

/* The concat's inverse, of x0's gradient: the gates' part plus the residual's. */
__global__ void k_split(const float *__restrict__ gx0, const float *__restrict__ g, size_t batch,
                        size_t D, size_t n, float *__restrict__ grad_dense,
                        float *__restrict__ grad_pooled)
{
    for (size_t i = first_index(); i < batch * n; i += stride()) {
        const size_t b = i / n, f = (i % n) / D, d = i % D;
        const float v = gx0[i] + g[i];
        if (f == 0)
            grad_dense[b * D + d] = v;
        else
            grad_pooled[((f - 1) * batch + b) * D + d] = v;
    }
}

/* gate += b; next = x0 * gate + x. */
__global__ void k_gate_fwd(const float *__restrict__ x0, const float *__restrict__ x,
                           const float *__restrict__ bias, size_t n, size_t total,
                           float *__restrict__ gate, float *__restrict__ next)
{
    for (size_t i = first_index(); i < total; i += stride()) {
        const float u = gate[i] + bias[i % n];
        gate[i] = u;
        next[i] = x0[i] * u + x[i];
    }
}

/* The gate's gradient g * x0, and x0's from the gates (the last layer's
 * first, the others added). */
__global__ void k_gate_bwd(const float *__restrict__ g, const float *__restrict__ x0,
                           const float *__restrict__ gate, size_t total, int first,
                           float *__restrict__ du, float *__restrict__ gx0)
{
    for (size_t i = first_index(); i < total; i += stride()) {
        du[i] = g[i] * x0[i];
        gx0[i] = first ? g[i] * gate[i] : gx0[i] + g[i] * gate[i];
    }
}

ember_status_t cublas_status(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return EMBER_OK;
    ember_error("cuda", "crossnet: %s: %s", what, cublasGetStatusString(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED    ? EMBER_ERR_NO_MEMORY
           : st == CUBLAS_STATUS_INVALID_VALUE ? EMBER_ERR_INVALID_PARAM
                                               : EMBER_ERR_IO;
}

/* Row-major C[M][N] = op(A) op(B) + beta C, as cuBLAS's column-major
 * C^T = op(B)^T op(A)^T; lda, ldb, ldc: the row lengths as stored. */
ember_status_t rm_gemm(cuda_dev_t *dev, bool ta, bool tb, size_t M, size_t N, size_t K,
                       const float *A, size_t lda, const float *B, size_t ldb, float beta, float *C,
                       size_t ldc)
{
    const float one = 1.0f;
    return cublas_status(cublasSgemm((cublasHandle_t)dev->cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &one,
                                     B, (int)ldb, A, (int)lda, &beta, C, (int)ldc),
                         "cublasSgemm");
}

/* Layer @l's parameters and saved pieces, engine/ops/crossnet.c's layout. */
struct layer_t {
    const float *w, *v, *b;
    float *x, *gate, *xv;
};

layer_t layer_at(const ember_crossnet_shape_t &s, const float *params, const float *saved, size_t l)
{
    const size_t n = ember_crossnet_width(&s), L = s.layers, r = s.rank, B = s.batch;
    float *sv = (float *)saved;
    return layer_t{
            params + l * n * r, params + L * n * r + l * r * n, params + 2 * L * n * r + l * n,
            sv + l * B * n,     sv + L * B * n + l * B * n,     sv + 2 * L * B * n + l * B * r};
}

ember_status_t refuse(const char *what, const ember_crossnet_shape_t &s)
{
    ember_error("cuda",
                "crossnet %s: invalid arguments (tables %zu, batch %zu, dim %zu, layers %zu, "
                "rank %zu)",
                what, s.tables, s.batch, s.dim, s.layers, s.rank);
    return EMBER_ERR_INVALID_PARAM;
}

/* One layer forward: xv = x V^T, gate = xv W^T, then the gate kernel. */
ember_status_t layer_forward(cuda_dev_t *dev, const ember_crossnet_shape_t &s, const layer_t &p,
                             const float *x0, float *next)
{
    const size_t n = ember_crossnet_width(&s), r = s.rank, B = s.batch;
    EMBER_CHECK(rm_gemm(dev, false, true, B, r, n, p.x, n, p.v, n, 0.0f, p.xv, r));
    EMBER_CHECK(rm_gemm(dev, false, true, B, n, r, p.xv, r, p.w, r, 0.0f, p.gate, n));
    k_gate_fwd<<<grid_for(B * n), kBlock, 0, dev->stream>>>(x0, p.x, p.b, n, B * n, p.gate, next);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

/* The backward's scratch: g (x_{l+1}'s gradient), gx0, du [batch][n], dv [batch][rank]. */
struct scratch_t {
    float *g, *gx0, *du, *dv;
};

/* Layer @l backward: its parameters' gradients into @gp, and @s.g turned
 * from its output's gradient into its input's. */
ember_status_t layer_backward(cuda_dev_t *dev, const ember_crossnet_shape_t &sh, const layer_t &p,
                              const layer_t &gp, const float *x0, int last, const scratch_t &s)
{
    const size_t n = ember_crossnet_width(&sh), r = sh.rank, B = sh.batch;
    k_gate_bwd<<<grid_for(B * n), kBlock, 0, dev->stream>>>(s.g, x0, p.gate, B * n, last, s.du,
                                                            s.gx0);
    CUDA_CALL(cudaGetLastError());
    EMBER_CHECK(cuda_column_sum(dev, s.du, B, n, 0, (float *)gp.b));
    EMBER_CHECK(rm_gemm(dev, true, false, n, r, B, s.du, n, p.xv, r, 0.0f, (float *)gp.w, r));
    EMBER_CHECK(rm_gemm(dev, false, false, B, r, n, s.du, n, p.w, r, 0.0f, s.dv, r));
    EMBER_CHECK(rm_gemm(dev, true, false, r, n, B, s.dv, r, p.x, n, 0.0f, (float *)gp.v, n));
    return rm_gemm(dev, false, false, B, n, r, s.dv, r, p.v, n, 1.0f, s.g, n);
}

} /* namespace */

extern "C" ember_status_t cuda_crossnet_forward(cuda_dev_t *dev, const float *dense,
                                                const float *pooled, size_t tables, size_t batch,
                                                size_t dim, size_t layers, size_t rank,
                                                const float *params, float *saved, float *out)
{
    const ember_crossnet_shape_t s{tables, batch, dim, layers, rank}, *shape = &s;
    if (!ember_crossnet_shape_ok(shape) || !dense || (s.tables > 0 && !pooled) || !params ||
        !saved || !out)
        return refuse("forward", s);
    const size_t n = ember_crossnet_width(shape), B = s.batch;
    float *x0 = layer_at(s, params, saved, 0).x;
    k_concat<<<grid_for(B * n), kBlock, 0, dev->stream>>>(dense, pooled, B, s.dim, n, x0);
    CUDA_CALL(cudaGetLastError());
    for (size_t l = 0; l < s.layers; l++) {
        float *next = l + 1 < s.layers ? layer_at(s, params, saved, l + 1).x : out;
        EMBER_CHECK(layer_forward(dev, s, layer_at(s, params, saved, l), x0, next));
    }
    return EMBER_OK;
}

extern "C" ember_status_t cuda_crossnet_backward(cuda_dev_t *dev, const float *dense,
                                                 const float *pooled, size_t tables, size_t batch,
                                                 size_t dim, size_t layers, size_t rank,
                                                 const float *params, const float *saved,
                                                 const float *grad_out, float *grad_params,
                                                 float *grad_dense, float *grad_pooled)
{
    const ember_crossnet_shape_t s{tables, batch, dim, layers, rank}, *shape = &s;
    if (!ember_crossnet_shape_ok(shape) || !dense || (s.tables > 0 && (!pooled || !grad_pooled)) ||
        !params || !saved || !grad_out || !grad_params || !grad_dense)
        return refuse("backward", s);
    const size_t n = ember_crossnet_width(shape), B = s.batch, Bn = B * n;
    EMBER_CHECK(cuda_scratch_reserve(dev, (3 * Bn + B * s.rank) * sizeof(float)));
    float *base = (float *)dev->scratch;
    const scratch_t scr{base, base + Bn, base + 2 * Bn, base + 3 * Bn};
    const float *x0 = layer_at(s, params, saved, 0).x;
    CUDA_CALL(cudaMemcpyAsync(scr.g, grad_out, Bn * sizeof(float), cudaMemcpyDeviceToDevice,
                              dev->stream));
    for (size_t l = s.layers; l-- > 0;)
        EMBER_CHECK(layer_backward(dev, s, layer_at(s, params, saved, l),
                                   layer_at(s, grad_params, saved, l), x0, l + 1 == s.layers, scr));
    k_split<<<grid_for(Bn), kBlock, 0, dev->stream>>>(scr.gx0, scr.g, B, s.dim, n, grad_dense,
                                                      grad_pooled);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}
