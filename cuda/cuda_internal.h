/*
 * cuda/: internals shared by the CUDA backend's files (not installed).
 */
#ifndef EMBER_CUDA_INTERNAL_H
#define EMBER_CUDA_INTERNAL_H

#include <ember/device.h>
#include <ember/log.h>
#include <ember/status.h>

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The backend's ops table and GPU count (cuda_device.cu), which
 * engine/device/device.c finds linked in (weak references) or in the plugin
 * (dlsym); no public header declares them. */
extern const ember_device_ops_t ember_device_cuda_ops;
int ember_cuda_device_count(void);

/* Translate a CUDA runtime error at the boundary: log where and why once,
 * return the ember status (NO_MEMORY for allocation failures, NO_DEVICE for
 * a missing/broken driver, ERR_IO otherwise).  Clears the sticky-free error
 * state so the next call starts clean. */
ember_status_t cuda_status(cudaError_t err, const char *what, const char *file, int line);

#define CUDA_CALL(call)                                               \
    do {                                                              \
        cudaError_t cuda_err_ = (call);                               \
        if (cuda_err_ != cudaSuccess)                                 \
            return cuda_status(cuda_err_, #call, __FILE__, __LINE__); \
    } while (0)

/* Per-device state of the CUDA backend. */
#define CUDA_DEV_MAGIC 0x43554441u /* "CUDA": tells a cuda device's state */
typedef struct cuda_dev {
    uint32_t magic;
    int ordinal;
    cudaStream_t stream;
    void *cublas; /* cublasHandle_t */
    /* grow-only scratch for the backward and the loss (one allocation per
     * high-water mark, never per step) */
    void *scratch;
    size_t scratch_bytes;
    void *pinned; /* small pinned host buffer for results */
    size_t pinned_bytes;
} cuda_dev_t;

/* Make sure dev->scratch holds @bytes; may synchronize the stream. */
ember_status_t cuda_scratch_reserve(cuda_dev_t *dev, size_t bytes);

/* Kernels (cuda_bag.cu, cuda_ops.cu, cuda_dlrm.cu, cuda_crossnet.cu), all enqueued on dev->stream. */
ember_status_t cuda_bag_forward(cuda_dev_t *dev, const float *table, int64_t rows, size_t dim,
                                const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                float *out_p, int64_t *argmax_p);
ember_status_t cuda_bag_backward(cuda_dev_t *dev, const float *table, int64_t rows, size_t dim,
                                 const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                 const float *grad_out, const int64_t *argmax, int64_t *grad_rows_p,
                                 float *grad_p, size_t *nrows_p, float *grad_weights_p);
ember_status_t cuda_bag_backward_update(cuda_dev_t *dev, float *table, int64_t rows, size_t dim,
                                        const ember_bag_batch_t *batch,
                                        const ember_bag_opts_t *opts, const float *grad_out,
                                        const int64_t *argmax, const ember_device_opt_t *opt);
ember_status_t cuda_relu_forward(cuda_dev_t *dev, const float *x, size_t n, float *y_p);
ember_status_t cuda_relu_backward(cuda_dev_t *dev, const float *x, const float *grad_y, size_t n,
                                  float *grad_x_p);
ember_status_t cuda_cross_entropy(cuda_dev_t *dev, const float *logits, size_t batch,
                                  size_t classes, const int64_t *targets, float *loss_p,
                                  float *grad_p);
ember_status_t cuda_rows_gather(cuda_dev_t *dev, const float *table, size_t dim,
                                const int64_t *rows, size_t n, float *out);
ember_status_t cuda_rows_scatter(cuda_dev_t *dev, float *table, size_t dim, const int64_t *rows,
                                 size_t n, const float *in);
ember_status_t cuda_parts_combine(cuda_dev_t *dev, const float *parts, size_t stride,
                                  uint32_t nparts, size_t bags, size_t dim, ember_bag_mode_t mode,
                                  const uint32_t *counts, const uint32_t *bag_counts,
                                  const uint32_t *places, size_t places_stride, float *out,
                                  int16_t *winner);
ember_status_t cuda_parts_split(cuda_dev_t *dev, const float *grad, uint32_t nparts, size_t bags,
                                size_t dim, ember_bag_mode_t mode, const uint32_t *bag_counts,
                                const int16_t *winner, float *grads, size_t stride);
ember_status_t cuda_interaction_forward(cuda_dev_t *dev, const float *dense, const float *pooled,
                                        size_t tables, size_t batch, size_t dim, float *out);
ember_status_t cuda_interaction_backward(cuda_dev_t *dev, const float *dense, const float *pooled,
                                         size_t tables, size_t batch, size_t dim,
                                         const float *grad_out, float *grad_dense,
                                         float *grad_pooled);
ember_status_t cuda_bce_with_logits(cuda_dev_t *dev, const float *logits, const float *targets,
                                    size_t n, float *loss_p, float *grad_p);
ember_status_t cuda_crossnet_forward(cuda_dev_t *dev, const float *dense, const float *pooled,
                                     size_t tables, size_t batch, size_t dim, size_t layers,
                                     size_t rank, const float *params, float *saved, float *out);
ember_status_t cuda_crossnet_backward(cuda_dev_t *dev, const float *dense, const float *pooled,
                                      size_t tables, size_t batch, size_t dim, size_t layers,
                                      size_t rank, const float *params, const float *saved,
                                      const float *grad_out, float *grad_params, float *grad_dense,
                                      float *grad_pooled);
ember_status_t cuda_bias_fill(cuda_dev_t *dev, const float *bias, size_t batch, size_t out,
                              float *y_p);
ember_status_t cuda_column_sum(cuda_dev_t *dev, const float *m, size_t rows, size_t cols,
                               int accumulate, float *sum_p);

#ifdef __cplusplus
}
#endif
#endif
