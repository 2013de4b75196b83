/*
 * cuda/gpudirect: how GPU data meets the network.
 *
 * Lookup replies land in, and gradient pushes leave from, host buffers that
 * the GPU copies to and from by DMA: pinned memory (cudaHostAlloc), one per
 * buffer, grown rarely and reused every step (the trainer's; see
 * engine/trainer.c).  That is the STAGED path, the one ember has.
 * The RDMA path (replies received straight into GPU memory, registered with
 * UCX as CUDA memory) needs a UCX built with CUDA and RPC receives that know
 * a buffer's memory type; ember's transport copies eager messages with
 * memcpy, so it is not offered: EMBER_GPUDIRECT=rdma is refused, naming why.
 * What UCX supports is still probed and logged once, so a cluster's log says
 * which of the two a job could have had.
 * Built only with the transport (not in EMBER_GPU_ONLY builds).
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
 * Pure decision: @ucx_memory_types is ucp_context_attr_t.memory_types (a bit
 * per ucs_memory_type_t); @mode "auto" or NULL (the best ember has: staged),
 * "staged", or "rdma" (refused: ERR_UNSUPPORTED, and @why says whether UCX
 * could have done it).  @why (may be NULL) gets one line for the log.
 * Errors: ERR_INVALID_PARAM (unknown mode), ERR_UNSUPPORTED.
 */
ember_status_t ember_gpudirect_decide(uint64_t ucx_memory_types, const char *mode,
                                      ember_gpudirect_path_t *path_p, char *why,
                                      size_t why_length);

/**
 * Ask UCX (a short-lived context read from the same UCX_* environment) which
 * memory types it supports and decide with EMBER_GPUDIRECT, once per
 * process; later calls return the first answer and line.  Blocking (UCX
 * init): start-up only.  *text_p is the line (static storage).
 * Errors: as ember_gpudirect_decide, ERR_TRANSPORT (UCX init failed).
 */
ember_status_t ember_gpudirect_probe(ember_gpudirect_path_t *path_p,
                                     const char **text_p);

#ifdef __cplusplus
}
#endif
#endif
