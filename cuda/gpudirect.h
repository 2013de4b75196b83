/*
 * cuda/gpudirect: how GPU data meets the network, decided once per process.
 *
 *   - RDMA (where UCX was built with CUDA support: its context lists CUDA
 *     among its memory types).  A GPU trainer's lookup replies land in device
 *     buffers and its gradient pushes leave from them: the transport hands
 *     them to UCX as CUDA memory (ember_rpc_param_t's payload_mem and
 *     reply_mem), which moves them by GPUDirect RDMA where the NIC
 *     and driver allow it, else by its own CUDA copies.  The shards' partial
 *     pools are combined, and the pooled gradient split, on the GPU.
 *   - STAGED: pinned host buffers (cudaHostAlloc), one per buffer, grown
 *     rarely and reused every step, are what the transport sees; the
 *     combining happens on the host, and the GPU copies by DMA.
 *
 * EMBER_GPUDIRECT: auto (RDMA where UCX supports CUDA memory and the
 * transports it may use include cuda_copy, else STAGED), staged, or rdma
 * (refused, naming why, where auto would not pick it).  The device
 * buffers are registered with UCX once (engine/train/parts.c) and the
 * registration goes with every call (UCP_OP_ATTR_FIELD_MEMH), so UCX
 * neither registers them nor detects their memory type per message: the
 * suspects of the one crash on record (UCX 1.22 receiving a rendezvous
 * reply into GPU memory, built against 1.13's headers; docs/PERFORMANCE.md)
 * were that ABI mismatch, now refused (transport/worker.c), and that
 * detection; bench/gpudirect_repro.c isolates them.  Built only with the
 * transport.
 */
#ifndef EMBER_CUDA_GPUDIRECT_H
#define EMBER_CUDA_GPUDIRECT_H

#include <ember/status.h>

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
 * Whether a UCX_TLS value lets UCX use cuda_copy: unset or empty (all),
 * a list naming all, cuda or cuda_copy, or an exclusion list (^...) naming
 * neither cuda nor cuda_copy.
 */
int ember_gpudirect_tls_allows_cuda_copy(const char *tls);

/**
 * Pure decision: @ucx_memory_types is ucp_context_attr_t.memory_types (a bit
 * per ucs_memory_type_t); @tls the transports UCX may use (UCX_TLS, or
 * EMBER_TLS where set; NULL: all); @mode "auto" or NULL, "staged" or "rdma"
 * (see above).  @why (may be NULL) gets one line for the log, or the reason
 * of a refusal.  Errors: ERR_INVALID_PARAM (unknown mode), ERR_UNSUPPORTED
 * ("rdma" where UCX cannot take CUDA memory: @why says which input).
 */
ember_status_t ember_gpudirect_decide(uint64_t ucx_memory_types, const char *tls, const char *mode,
                                      ember_gpudirect_path_t *path_p, char *why, size_t why_length);

/**
 * Ask UCX (a short-lived context read from the same UCX_* environment) which
 * memory types it supports and decide with EMBER_GPUDIRECT, once per
 * process; later calls return the first answer and line.  Blocking (UCX
 * init): start-up only.  *text_p is the line (static storage).
 * Errors: as ember_gpudirect_decide, ERR_TRANSPORT (UCX init failed).
 */
ember_status_t ember_gpudirect_probe(ember_gpudirect_path_t *path_p, const char **text_p);

#ifdef __cplusplus
}
#endif
#endif
