/*
 * cuda/cuda_device: the "cuda" device backend (include/ember/device.h):
 * device selection by local rank, memory, one stream per device, cuBLAS for
 * Linear, the kernels of cuda_bag.cu / cuda_ops.cu, and NCCL behind the
 * allreduce slots.
 */
#include "common/reserve.h"
#include "cuda/cuda_internal.h"
#ifdef EMBER_HAVE_NCCL
#include "cuda/nccl_comm.h"
#endif
#ifdef EMBER_HAVE_TRANSPORT
#include "cuda/gpudirect.h"
#endif

#include <cublas_v2.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {

/* Number of visible CUDA devices; 0 when there is no driver or no GPU. */
int ember_cuda_device_count(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        ember_debug("cuda", "no CUDA device: %s", cudaGetErrorString(err));
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

ember_status_t cuda_status(cudaError_t err, const char *what, const char *file, int line)
{
    ember_status_t status;

    switch (err) {
    case cudaSuccess: return EMBER_OK;
    case cudaErrorMemoryAllocation: status = EMBER_ERR_NO_MEMORY; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: status = EMBER_ERR_NO_DEVICE; break;
    case cudaErrorInvalidValue: status = EMBER_ERR_INVALID_PARAM; break;
    default: status = EMBER_ERR_IO; break;
    }
    ember_error("cuda", "%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorName(err),
                cudaGetErrorString(err));
    (void)cudaGetLastError();
    return status;
}

static ember_status_t cublas_status(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return EMBER_OK;
    ember_error("cuda", "%s: %s", what, cublasGetStatusString(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED    ? EMBER_ERR_NO_MEMORY
           : st == CUBLAS_STATUS_INVALID_VALUE ? EMBER_ERR_INVALID_PARAM
                                               : EMBER_ERR_IO;
}

#define CUBLAS_CALL(call) EMBER_CHECK(cublas_status((call), #call))

static cuda_dev_t *impl(ember_device_t *dev)
{
    return (cuda_dev_t *)ember_device_impl(dev);
}

ember_status_t cuda_scratch_reserve(cuda_dev_t *dev, size_t bytes)
{
    if (bytes <= dev->scratch_bytes)
        return EMBER_OK;
    /* Grow as every grow-only buffer does (common/reserve.h): a
     * steady-state step never allocates.  The old buffer may still be read
     * by queued kernels. */
    size_t want = ember_grow_capacity(dev->scratch_bytes, bytes, 1);
    if (!want)
        return EMBER_ERR_NO_MEMORY;
    CUDA_CALL(cudaStreamSynchronize(dev->stream));
    CUDA_CALL(cudaFree(dev->scratch));
    dev->scratch = NULL;
    dev->scratch_bytes = 0;
    CUDA_CALL(cudaMalloc(&dev->scratch, want));
    dev->scratch_bytes = want;
    return EMBER_OK;
}

static void cuda_close(void *p)
{
    cuda_dev_t *dev = (cuda_dev_t *)p;
    if (!dev)
        return;
    cudaSetDevice(dev->ordinal);
    if (dev->stream)
        cudaStreamSynchronize(dev->stream);
    if (dev->cublas)
        cublasDestroy((cublasHandle_t)dev->cublas);
    cudaFree(dev->scratch);
    cudaFreeHost(dev->pinned);
    if (dev->stream)
        cudaStreamDestroy(dev->stream);
    free(dev);
}

static ember_status_t cuda_open(int local_rank, void **impl_p)
{
    cudaDeviceProp prop;
    cuda_dev_t *dev;
    ember_status_t status;
    int count = ember_cuda_device_count();

    if (count <= 0) {
        ember_error("cuda", "device 'cuda' requested, but no CUDA GPU is visible "
                            "(driver missing or CUDA_VISIBLE_DEVICES empty)");
        return EMBER_ERR_NO_DEVICE;
    }
    dev = (cuda_dev_t *)calloc(1, sizeof(*dev));
    if (!dev)
        return EMBER_ERR_NO_MEMORY;
    dev->magic = CUDA_DEV_MAGIC;
    dev->ordinal = (local_rank < 0 ? 0 : local_rank) % count;

#define OPEN_CALL(call)                                          \
    do {                                                         \
        cudaError_t e_ = (call);                                 \
        if (e_ != cudaSuccess) {                                 \
            status = cuda_status(e_, #call, __FILE__, __LINE__); \
            goto err_close;                                      \
        }                                                        \
    } while (0)
    OPEN_CALL(cudaSetDevice(dev->ordinal));
    OPEN_CALL(cudaGetDeviceProperties(&prop, dev->ordinal));
    OPEN_CALL(cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking));
    OPEN_CALL(cudaMallocHost(&dev->pinned, 4096));
    dev->pinned_bytes = 4096;
#undef OPEN_CALL
    {
        cublasHandle_t handle;
        status = cublas_status(cublasCreate(&handle), "cublasCreate");
        if (status != EMBER_OK)
            goto err_close;
        dev->cublas = handle;
        /* Plain FP32 (no TF32): results must match the CPU within 1e-4. */
        status =
                cublas_status(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
        if (status == EMBER_OK)
            status = cublas_status(cublasSetStream(handle, dev->stream), "cublasSetStream");
        if (status != EMBER_OK)
            goto err_close;
    }
    ember_info("cuda",
               "device cuda:%d %s (sm_%d%d, %.1f GiB, %d SMs) for local "
               "rank %d",
               dev->ordinal, prop.name, prop.major, prop.minor,
               (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.multiProcessorCount,
               local_rank);
    *impl_p = dev;
    return EMBER_OK;

err_close:
    cuda_close(dev);
    return status;
}

static ember_status_t cuda_mem_alloc(ember_device_t *dev, size_t bytes, void **ptr_p)
{
    void *ptr = NULL;
    if (bytes > 0)
        CUDA_CALL(cudaMalloc(&ptr, bytes));
    *ptr_p = ptr;
    return EMBER_OK;
}

static void cuda_mem_free(ember_device_t *dev, void *ptr)
{
    if (ptr) {
        /* Queued kernels may still read it. */
        cudaStreamSynchronize(impl(dev)->stream);
        cudaFree(ptr);
    }
}

static ember_status_t cuda_mem_copy(ember_device_t *dev, void *dst, const void *src, size_t bytes,
                                    ember_copy_kind_t kind)
{
    cuda_dev_t *d = impl(dev);
    cudaMemcpyKind k = kind == EMBER_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                       : kind == EMBER_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                           : cudaMemcpyDeviceToDevice;
    if (bytes == 0)
        return EMBER_OK;
    if (!dst || !src)
        return EMBER_ERR_INVALID_PARAM;
    CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, k, d->stream));
    /* A host buffer on either side is the caller's again when we return. */
    if (kind != EMBER_COPY_DEVICE_TO_DEVICE)
        CUDA_CALL(cudaStreamSynchronize(d->stream));
    return EMBER_OK;
}

static ember_status_t cuda_mem_zero(ember_device_t *dev, void *ptr, size_t bytes)
{
    if (bytes == 0)
        return EMBER_OK;
    if (!ptr)
        return EMBER_ERR_INVALID_PARAM;
    CUDA_CALL(cudaMemsetAsync(ptr, 0, bytes, impl(dev)->stream));
    return EMBER_OK;
}

static ember_status_t cuda_synchronize(ember_device_t *dev)
{
    CUDA_CALL(cudaStreamSynchronize(impl(dev)->stream));
    return EMBER_OK;
}

static ember_status_t cuda_dev_bag_forward(ember_device_t *dev, const float *table, int64_t rows,
                                           size_t dim, const ember_bag_batch_t *batch,
                                           const ember_bag_opts_t *opts, float *out_p,
                                           int64_t *argmax_p)
{
    return cuda_bag_forward(impl(dev), table, rows, dim, batch, opts, out_p, argmax_p);
}

static ember_status_t cuda_dev_bag_backward(ember_device_t *dev, const float *table, int64_t rows,
                                            size_t dim, const ember_bag_batch_t *batch,
                                            const ember_bag_opts_t *opts, const float *grad_out,
                                            const int64_t *argmax, int64_t *grad_rows_p,
                                            float *grad_p, size_t *nrows_p, float *grad_weights_p)
{
    return cuda_bag_backward(impl(dev), table, rows, dim, batch, opts, grad_out, argmax,
                             grad_rows_p, grad_p, nrows_p, grad_weights_p);
}

static ember_status_t cuda_dev_bag_backward_update(ember_device_t *dev, float *table, int64_t rows,
                                                   size_t dim, const ember_bag_batch_t *batch,
                                                   const ember_bag_opts_t *opts,
                                                   const float *grad_out, const int64_t *argmax,
                                                   const ember_device_opt_t *opt)
{
    return cuda_bag_backward_update(impl(dev), table, rows, dim, batch, opts, grad_out, argmax,
                                    opt);
}

static int dims_ok(size_t a, size_t b, size_t c)
{
    return a <= INT_MAX && b <= INT_MAX && c <= INT_MAX;
}

/* Row-major y[batch,out] = x[batch,in] A[out,in]^T + b, as column-major
 * y^T = A x^T: gemm(T, N, out, batch, in). */
static ember_status_t cuda_linear_forward(ember_device_t *dev, const float *x, size_t batch,
                                          size_t in, size_t out, const float *weight,
                                          const float *bias, float *y_p)
{
    cuda_dev_t *d = impl(dev);
    const float one = 1.0f, zero = 0.0f;

    if (!dims_ok(batch, in, out) || in == 0 || out == 0 || (batch > 0 && (!x || !weight || !y_p))) {
        ember_error("cuda",
                    "linear forward: invalid arguments (batch %zu, in %zu, "
                    "out %zu)",
                    batch, in, out);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch == 0)
        return EMBER_OK;
    if (bias)
        EMBER_CHECK(cuda_bias_fill(d, bias, batch, out, y_p));
    CUBLAS_CALL(cublasSgemm((cublasHandle_t)d->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out,
                            (int)batch, (int)in, &one, weight, (int)in, x, (int)in,
                            bias ? &one : &zero, y_p, (int)out));
    return EMBER_OK;
}

/* grad_x[batch,in] = grad_y A: column-major gemm(N, N, in, batch, out);
 * grad_A[out,in] = grad_y^T x: column-major grad_A^T = x^T grad_y,
 * gemm(N, T, in, out, batch); grad_b = column sums of grad_y. */
static ember_status_t cuda_linear_backward(ember_device_t *dev, const float *x, size_t batch,
                                           size_t in, size_t out, const float *weight,
                                           const float *grad_y, int accumulate, float *grad_x_p,
                                           float *grad_weight_p, float *grad_bias_p)
{
    cuda_dev_t *d = impl(dev);
    cublasHandle_t h = (cublasHandle_t)d->cublas;
    const float one = 1.0f, zero = 0.0f;
    const float *beta = accumulate ? &one : &zero;

    if (!dims_ok(batch, in, out) || in == 0 || out == 0 || (batch > 0 && !grad_y) ||
        (grad_x_p && !weight) || (grad_weight_p && batch > 0 && !x)) {
        ember_error("cuda",
                    "linear backward: invalid arguments (batch %zu, in %zu, "
                    "out %zu)",
                    batch, in, out);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch == 0) {
        /* Nothing flows back: the parameter gradients are 0 (or unchanged). */
        if (!accumulate && grad_weight_p)
            CUDA_CALL(cudaMemsetAsync(grad_weight_p, 0, out * in * sizeof(float), d->stream));
        if (!accumulate && grad_bias_p)
            CUDA_CALL(cudaMemsetAsync(grad_bias_p, 0, out * sizeof(float), d->stream));
        return EMBER_OK;
    }
    if (grad_x_p)
        CUBLAS_CALL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)batch, (int)out, &one,
                                weight, (int)in, grad_y, (int)out, &zero, grad_x_p, (int)in));
    if (grad_weight_p)
        CUBLAS_CALL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)batch, &one, x,
                                (int)in, grad_y, (int)out, beta, grad_weight_p, (int)in));
    if (grad_bias_p)
        EMBER_CHECK(cuda_column_sum(d, grad_y, batch, out, accumulate, grad_bias_p));
    return EMBER_OK;
}

static ember_status_t cuda_dev_relu_forward(ember_device_t *dev, const float *x, size_t n,
                                            float *y_p)
{
    return cuda_relu_forward(impl(dev), x, n, y_p);
}

static ember_status_t cuda_dev_relu_backward(ember_device_t *dev, const float *x,
                                             const float *grad_y, size_t n, float *grad_x_p)
{
    return cuda_relu_backward(impl(dev), x, grad_y, n, grad_x_p);
}

static ember_status_t cuda_dev_cross_entropy(ember_device_t *dev, const float *logits, size_t batch,
                                             size_t classes, const int64_t *targets, float *loss_p,
                                             float *grad_p)
{
    return cuda_cross_entropy(impl(dev), logits, batch, classes, targets, loss_p, grad_p);
}

static ember_status_t cuda_dev_interaction_forward(ember_device_t *dev, const float *dense,
                                                   const float *pooled, size_t tables, size_t batch,
                                                   size_t dim, float *out)
{
    return cuda_interaction_forward(impl(dev), dense, pooled, tables, batch, dim, out);
}

static ember_status_t cuda_dev_interaction_backward(ember_device_t *dev, const float *dense,
                                                    const float *pooled, size_t tables,
                                                    size_t batch, size_t dim, const float *grad_out,
                                                    float *grad_dense, float *grad_pooled)
{
    return cuda_interaction_backward(impl(dev), dense, pooled, tables, batch, dim, grad_out,
                                     grad_dense, grad_pooled);
}

static ember_status_t cuda_dev_crossnet_forward(ember_device_t *dev, const float *dense,
                                                const float *pooled, size_t tables, size_t batch,
                                                size_t dim, size_t layers, size_t rank,
                                                const float *params, float *saved, float *out)
{
    return cuda_crossnet_forward(impl(dev), dense, pooled, tables, batch, dim, layers, rank, params,
                                 saved, out);
}

static ember_status_t cuda_dev_crossnet_backward(ember_device_t *dev, const float *dense,
                                                 const float *pooled, size_t tables, size_t batch,
                                                 size_t dim, size_t layers, size_t rank,
                                                 const float *params, const float *saved,
                                                 const float *grad_out, float *grad_params,
                                                 float *grad_dense, float *grad_pooled)
{
    return cuda_crossnet_backward(impl(dev), dense, pooled, tables, batch, dim, layers, rank,
                                  params, saved, grad_out, grad_params, grad_dense, grad_pooled);
}

static ember_status_t cuda_dev_bce_with_logits(ember_device_t *dev, const float *logits,
                                               const float *targets, size_t n, float *loss_p,
                                               float *grad_p)
{
    return cuda_bce_with_logits(impl(dev), logits, targets, n, loss_p, grad_p);
}

#ifdef EMBER_HAVE_NCCL
/* The device communicator is the NCCL communicator plus its bootstrap. */
typedef struct {
    ember_nccl_comm_t *nccl;
    ember_nccl_bootstrap_t boot;
} cuda_comm_t;

static ember_status_t cuda_comm_create(ember_device_t *dev, ember_tp_t *tp, const int *ranks,
                                       int nranks, uint16_t op_base, ember_device_comm_t **comm_p)
{
    cuda_dev_t *d = impl(dev);
    cuda_comm_t *comm;
    const ember_nccl_bootstrap_t *boot = NULL;
    ember_status_t status;
    char tag[32];

    comm = (cuda_comm_t *)calloc(1, sizeof(*comm));
    if (!comm)
        return EMBER_ERR_NO_MEMORY;
    if (tp) {
#ifdef EMBER_HAVE_TRANSPORT
        ember_nccl_bootstrap_tp(tp, &comm->boot);
        boot = &comm->boot;
#else
        ember_error("cuda", "allreduce: this GPU-only build has no transport");
        free(comm);
        return EMBER_ERR_UNSUPPORTED;
#endif
    }
    snprintf(tag, sizeof(tag), "dense%u", (unsigned)op_base);
    if (boot) {
        int distinct = 1;
        status = ember_nccl_gpus_distinct(boot, ranks, nranks, tag, d->ordinal, &distinct);
        if (status == EMBER_OK && !distinct)
            status = EMBER_ERR_UNSUPPORTED; /* the caller stages (device_comm) */
        if (status != EMBER_OK) {
            free(comm);
            return status;
        }
    }
    status = ember_nccl_comm_create(boot, ranks, nranks, tag, d->ordinal, d->stream, 0.0,
                                    &comm->nccl);
    if (status != EMBER_OK) {
        free(comm);
        return status;
    }
    *comm_p = (ember_device_comm_t *)comm;
    return EMBER_OK;
}

static void cuda_comm_destroy(ember_device_comm_t *c)
{
    cuda_comm_t *comm = (cuda_comm_t *)c;
    if (!comm)
        return;
    ember_nccl_comm_destroy(comm->nccl);
    free(comm);
}

static ember_status_t cuda_allreduce_start(ember_device_comm_t *c, float *data, size_t count,
                                           int average, ember_device_req_t **req_p)
{
    return ember_nccl_allreduce_start(((cuda_comm_t *)c)->nccl, data, count, average,
                                      (ember_nccl_req_t **)req_p);
}

static ember_status_t cuda_allreduce_test(ember_device_req_t *req)
{
    return ember_nccl_allreduce_test((ember_nccl_req_t *)req);
}

static ember_status_t cuda_allreduce_wait(ember_device_req_t *req)
{
    return ember_nccl_allreduce_wait((ember_nccl_req_t *)req);
}

static const char *cuda_comm_error(const ember_device_comm_t *c)
{
    return ember_nccl_comm_error(((const cuda_comm_t *)c)->nccl);
}
#else
/* Without NCCL the engine reduces on the host (engine/device/device_comm.c). */
static ember_status_t cuda_comm_create(ember_device_t *dev, ember_tp_t *tp, const int *ranks,
                                       int nranks, uint16_t op_base, ember_device_comm_t **comm_p)
{
    ember_info("cuda", "this ember was built without NCCL");
    return EMBER_ERR_UNSUPPORTED;
}
#endif /* EMBER_HAVE_NCCL */

static ember_status_t cuda_dev_rows_gather(ember_device_t *dev, const float *table, size_t dim,
                                           const int64_t *rows, size_t n, float *out)
{
    return cuda_rows_gather(impl(dev), table, dim, rows, n, out);
}

static ember_status_t cuda_dev_rows_scatter(ember_device_t *dev, float *table, size_t dim,
                                            const int64_t *rows, size_t n, const float *in)
{
    return cuda_rows_scatter(impl(dev), table, dim, rows, n, in);
}

static ember_status_t cuda_dev_parts_combine(ember_device_t *dev, const float *parts, size_t stride,
                                             uint32_t nparts, size_t bags, size_t dim,
                                             ember_bag_mode_t mode, const uint32_t *counts,
                                             const uint32_t *bag_counts, const uint32_t *places,
                                             size_t places_stride, float *out, int16_t *winner)
{
    return cuda_parts_combine(impl(dev), parts, stride, nparts, bags, dim, mode, counts, bag_counts,
                              places, places_stride, out, winner);
}

static ember_status_t cuda_dev_parts_split(ember_device_t *dev, const float *grad, uint32_t nparts,
                                           size_t bags, size_t dim, ember_bag_mode_t mode,
                                           const uint32_t *bag_counts, const int16_t *winner,
                                           float *grads, size_t stride)
{
    return cuda_parts_split(impl(dev), grad, nparts, bags, dim, mode, bag_counts, winner, grads,
                            stride);
}

/* Pinned (page-locked) host memory: the GPU copies it by DMA, without the
 * driver's own bounce buffer; portable so any context may use it. */
static ember_status_t cuda_host_alloc(ember_device_t *dev, size_t bytes, void **ptr_p)
{
    void *ptr = NULL;
    if (bytes > 0)
        CUDA_CALL(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable));
    *ptr_p = ptr;
    return EMBER_OK;
}

static void cuda_host_free(ember_device_t *dev, void *ptr)
{
    if (ptr) {
        /* Queued copies may still read it. */
        cudaStreamSynchronize(impl(dev)->stream);
        cudaFreeHost(ptr);
    }
}

static ember_status_t cuda_network_path(ember_device_t *dev, ember_mem_type_t *mem_p,
                                        const char **text_p)
{
    *mem_p = EMBER_MEM_HOST;
#ifdef EMBER_HAVE_TRANSPORT
    ember_gpudirect_path_t path = EMBER_GPUDIRECT_STAGED;
    ember_status_t status = ember_gpudirect_probe(&path, text_p);
    if (status == EMBER_OK && path == EMBER_GPUDIRECT_RDMA)
        *mem_p = EMBER_MEM_CUDA;
    return status;
#else
    *text_p = "no transport in this build";
    return EMBER_OK;
#endif
}

/* C++20 designated initialisers (declaration order, as C++ requires). */
const ember_device_ops_t ember_device_cuda_ops = {
        .size = sizeof(ember_device_ops_t),
        .name = "cuda",
        .mem_type = EMBER_MEM_CUDA,
        .open = cuda_open,
        .close = cuda_close,
        .mem_alloc = cuda_mem_alloc,
        .mem_free = cuda_mem_free,
        .mem_copy = cuda_mem_copy,
        .mem_zero = cuda_mem_zero,
        .synchronize = cuda_synchronize,
        .bag_forward = cuda_dev_bag_forward,
        .bag_backward = cuda_dev_bag_backward,
        .linear_forward = cuda_linear_forward,
        .linear_backward = cuda_linear_backward,
        .relu_forward = cuda_dev_relu_forward,
        .relu_backward = cuda_dev_relu_backward,
        .cross_entropy = cuda_dev_cross_entropy,
        .comm_create = cuda_comm_create,
#ifdef EMBER_HAVE_NCCL
        .comm_destroy = cuda_comm_destroy,
        .allreduce_start = cuda_allreduce_start,
        .allreduce_test = cuda_allreduce_test,
        .allreduce_wait = cuda_allreduce_wait,
        .comm_error = cuda_comm_error,
#endif
        .host_alloc = cuda_host_alloc,
        .host_free = cuda_host_free,
        .rows_gather = cuda_dev_rows_gather,
        .rows_scatter = cuda_dev_rows_scatter,
        .parts_combine = cuda_dev_parts_combine,
        .parts_split = cuda_dev_parts_split,
        .network_path = cuda_network_path,
        .bag_backward_update = cuda_dev_bag_backward_update,
        .interaction_forward = cuda_dev_interaction_forward,
        .interaction_backward = cuda_dev_interaction_backward,
        .bce_with_logits = cuda_dev_bce_with_logits,
        .crossnet_forward = cuda_dev_crossnet_forward,
        .crossnet_backward = cuda_dev_crossnet_backward,
};

} /* extern "C" */
