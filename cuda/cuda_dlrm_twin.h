/*
 * cuda/cuda_dlrm_twin: the CPU twins of cuda/cuda_dlrm.cu's kernels.  Each
 * runs its kernel's work as the kernel partitions it (a block per example,
 * the example's vectors staged as in shared memory; the loss summed in the
 * kernel's order over EMBER_DLRM_TWIN_THREADS threads and 32-wide warps),
 * calling the same per-element helpers (engine/ops/dlrm_math.h).  Host
 * memory throughout; for tests (tests/engine/test_dlrm_twin.c), which run
 * them against the host ops where no GPU is.  Plain C: built without nvcc.
 */
#ifndef EMBER_CUDA_DLRM_TWIN_H
#define EMBER_CUDA_DLRM_TWIN_H

#include <ember/status.h>

#include <stddef.h>

/* The threads of the loss's one block (the kernel's launch and the twin's
 * emulation of it). */
#define EMBER_DLRM_TWIN_THREADS 256

#ifdef __cplusplus
extern "C" {
#endif

/** k_inter_fwd's work: shapes as the device's interaction_forward. */
ember_status_t ember_dlrm_twin_inter_forward(const float *dense, const float *pooled, size_t tables,
                                             size_t batch, size_t dim, float *out);

/** k_inter_bwd's work: shapes as the device's interaction_backward. */
ember_status_t ember_dlrm_twin_inter_backward(const float *dense, const float *pooled,
                                              size_t tables, size_t batch, size_t dim,
                                              const float *grad_out, float *grad_dense,
                                              float *grad_pooled);

/** k_bce_total's and k_bce_grad's work: the mean loss (double, as the
 * kernel leaves it before the host's finiteness check) and @grad (or NULL). */
double ember_dlrm_twin_bce(const float *logits, const float *targets, size_t n, float *grad);

#ifdef __cplusplus
}
#endif
#endif
