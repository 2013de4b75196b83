/*
 * cuda/gpudirect: how GPU data meets the network.
 *
 * Lookup responses (pooled rows) land in, and gradient pushes leave from, GPU
 * memory.  Two paths, chosen once per process at start and logged once:
 *   - RDMA:   UCX was built with CUDA support (its context lists
 *             UCS_MEMORY_TYPE_CUDA among its memory types): the device buffer
 *             itself is registered with EMBER_MEM_CUDA and handed to the
 *             transport (GPUDirect RDMA where the NIC and driver allow it;
 *             UCX's own CUDA copy otherwise).
 *   - STAGED: a pinned host buffer (cudaHostAlloc), registered with
 *             EMBER_MEM_HOST, is the network buffer; copies to/from the
 *             device buffer run on the device stream.  Allocated once per
 *             buffer and reused every step, never per step.
 *
 * Built only with the transport (not in EMBER_GPU_ONLY builds).
 */
#ifndef EMBER_CUDA_GPUDIRECT_H
#define EMBER_CUDA_GPUDIRECT_H

#include <ember/status.h>
#include <ember/transport.h>

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EMBER_GPUDIRECT_RDMA = 1,
    EMBER_GPUDIRECT_STAGED = 2
} ember_gpudirect_path_t;

/** "rdma" / "staged". */
const char *ember_gpudirect_path_name(ember_gpudirect_path_t path);

/**
 * Pure decision: @ucx_memory_types is ucp_context_attr_t.memory_types (a
 * bit per ucs_memory_type_t); @mode "auto" (RDMA when UCX has CUDA), "rdma"
 * (required: ERR_UNSUPPORTED when UCX lacks it) or "staged".
 * Errors: ERR_INVALID_PARAM (unknown mode), ERR_UNSUPPORTED.
 */
ember_status_t ember_gpudirect_decide(uint64_t ucx_memory_types, const char *mode,
                                      ember_gpudirect_path_t *path_p);

/**
 * Ask UCX (a short-lived context with the transport's features, read from
 * the same UCX_* environment) which memory types it supports, decide with
 * @mode (NULL: "auto"), and log the chosen path and why, once per process.
 * Later calls return the first answer.  Blocking (UCX init), start-up only.
 * Errors: as ember_gpudirect_decide, ERR_TRANSPORT (UCX init failed).
 */
ember_status_t ember_gpudirect_probe(const char *mode, ember_gpudirect_path_t *path_p);

typedef struct ember_gpudirect_buf ember_gpudirect_buf_t;

/**
 * The CUDA stream of a "cuda" device (include/ember/device.h), to pass as
 * @stream below so staging copies are ordered with the device's kernels.
 * NULL for any other device.  (Defined in cuda/cuda_device.cu.)
 */
struct ember_device;
cudaStream_t ember_cuda_device_stream(const struct ember_device *dev);

/**
 * A reusable network buffer for @bytes of the device buffer @device_ptr
 * (borrowed; must outlive the buffer).  RDMA: registers @device_ptr with
 * EMBER_MEM_CUDA.  STAGED: allocates a pinned host mirror (cudaHostAlloc)
 * and registers it with EMBER_MEM_HOST.  @tp (borrowed) may be NULL: then
 * nothing is registered (send/receive through RPC payloads only).
 * @stream: the stream the staging copies are ordered on (borrowed).
 * Errors: ERR_INVALID_PARAM, ERR_NO_MEMORY, the transport's.
 */
ember_status_t ember_gpudirect_buf_create(ember_tp_t *tp, ember_gpudirect_path_t path,
                                          void *device_ptr, size_t bytes,
                                          cudaStream_t stream,
                                          ember_gpudirect_buf_t **buf_p);

/** Deregister and free the staging memory.  NULL: no-op. */
void ember_gpudirect_buf_destroy(ember_gpudirect_buf_t *buf);

/**
 * The buffer to hand to the transport (an RPC response buffer, an iov of a
 * push, an RMA target) and its memory type: the device pointer (RDMA) or the
 * pinned host mirror (STAGED).  Borrowed from @buf.
 */
void *ember_gpudirect_buf_net(const ember_gpudirect_buf_t *buf,
                              ember_mem_type_t *type_p);

/** The registration (for ember_mem_pack), or NULL when tp was NULL. */
ember_mem_t *ember_gpudirect_buf_mem(const ember_gpudirect_buf_t *buf);

/**
 * After a receive into the network buffer: make the first @bytes visible in
 * device memory (STAGED: an async host-to-device copy on the stream; RDMA:
 * nothing).  Kernels enqueued on the stream afterwards see the data.
 */
ember_status_t ember_gpudirect_buf_to_device(ember_gpudirect_buf_t *buf, size_t bytes);

/**
 * Before a send from the network buffer: wait until the first @bytes of
 * device data are complete and in the network buffer (STAGED: device-to-host
 * copy + stream sync; RDMA: stream sync).  Blocking.
 */
ember_status_t ember_gpudirect_buf_from_device(ember_gpudirect_buf_t *buf,
                                               size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
