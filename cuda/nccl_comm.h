/*
 * cuda/nccl_comm: NCCL allreduce for the dense gradients of GPU trainers,
 * with the start/test/wait shape of engine/comm/allreduce.h.
 *
 * Bootstrap: the first member (ranks[0]) makes the NCCL unique id and puts it
 * in the job's rendezvous store under "ember.nccl.<tag>.<n>" (n counts the
 * communicators this process created, the same on every member because they
 * create them in the same order); the others get it from there.  The store
 * is reached through a small bootstrap table, so this file does not link the
 * transport: ember_nccl_bootstrap_tp() (cuda/nccl_tp.c) fills it from an
 * ember_tp_t, and a single-rank communicator needs none (GPU-only builds).
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): creation and
 * every collective return at once, and the caller's test/wait loop is the
 * watchdog.  Each poll reads ncclCommGetAsyncError, progresses the transport
 * and asks it whether a member was lost, and checks the request's deadline.
 * Any of these aborts the communicator (ncclCommAbort) with an error text
 * that names the peer (or the NCCL error), and fails the request and every
 * later one, as engine/comm/allreduce.h does.  Why no watchdog thread: the
 * transport is single-threaded, and only the waiting thread may progress it
 * and read its peer state; a hung collective is only noticed by someone
 * waiting for it anyway.
 *
 * Threading: one thread at a time per communicator.
 */
#ifndef EMBER_CUDA_NCCL_COMM_H
#define EMBER_CUDA_NCCL_COMM_H

#include <ember/status.h>

#include <cuda_runtime.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_nccl_comm ember_nccl_comm_t;
typedef struct ember_nccl_req ember_nccl_req_t;

/* How a communicator reaches the job (all callbacks run on the caller's
 * thread; none may be NULL except progress). */
typedef struct ember_nccl_bootstrap {
    size_t size; /* sizeof(ember_nccl_bootstrap_t) */
    int self;    /* this process's transport rank */
    ember_status_t (*store_set)(void *arg, const char *key, const void *value, size_t length);
    /* blocks until the key exists (bounded); *value_p malloc'd */
    ember_status_t (*store_get)(void *arg, const char *key, void **value_p, size_t *length_p);
    int (*peer_lost)(void *arg, int rank);
    const char *(*peer_name)(void *arg, int rank);
    void (*progress)(void *arg); /* drive the transport once, non-blocking */
    void *arg;
} ember_nccl_bootstrap_t;

/**
 * Create a communicator over transport ranks @ranks[@nranks] (copied; NCCL
 * rank i = ranks[i]); every member passes the same list and @tag.
 * @boot: borrowed until destroy; may be NULL only when nranks == 1 (then
 * ranks[0] is this process).  @cuda_device: the GPU (made current).
 * @stream: the stream collectives are enqueued on (borrowed; the device
 * backend's stream, so the reduction follows the backward).
 * @timeout_s: bound on creation and on each collective (<= 0: 
 * EMBER_CONNECT_TIMEOUT for creation, EMBER_RPC_TIMEOUT per collective).
 * Blocks until every member joined, polling the watchdog.
 * Errors: ERR_INVALID_PARAM, ERR_NO_MEMORY, ERR_PEER_LOST (names the peer),
 * ERR_TIMED_OUT, ERR_TRANSPORT (NCCL error), or the store's status.
 */
ember_status_t ember_nccl_comm_create(const ember_nccl_bootstrap_t *boot, const int *ranks,
                                      int nranks, const char *tag, int cuda_device,
                                      cudaStream_t stream, double timeout_s,
                                      ember_nccl_comm_t **comm_p);

/**
 * Whether the members have a GPU each: every member publishes "host/PCI bus
 * id" of @cuda_device under ember.nccl.<tag>.gpu.<n>.<member> and reads the
 * others', so all of them reach the same answer.  NCCL refuses two members
 * on one GPU (trainers sharing a GPU on one machine); then *distinct_p = 0
 * and the caller reduces some other way.  Blocks until all published.
 * Errors: ERR_INVALID_PARAM, ERR_NO_MEMORY, ERR_BAD_MESSAGE, the store's.
 */
ember_status_t ember_nccl_gpus_distinct(const ember_nccl_bootstrap_t *boot, const int *ranks,
                                        int nranks, const char *tag, int cuda_device,
                                        int *distinct_p);

/** Finalize (bounded) and free; aborts instead when broken.  NULL: no-op. */
void ember_nccl_comm_destroy(ember_nccl_comm_t *comm);

/**
 * Start an in-place sum (@average: ncclAvg) of @count floats of device memory
 * at @data on the communicator's stream.  @data is borrowed until wait.
 * Errors: ERR_INVALID_PARAM, ERR_NO_MEMORY (more than 16 requests in
 * flight), or the error that broke the communicator (*req_p untouched).
 */
ember_status_t ember_nccl_allreduce_start(ember_nccl_comm_t *comm, float *data, size_t count,
                                          int average, ember_nccl_req_t **req_p);

/** Poll once (the watchdog); INPROGRESS, or the final status. */
ember_status_t ember_nccl_allreduce_test(ember_nccl_req_t *req);

/** Poll until done (sleeping briefly between polls), then free @req. */
ember_status_t ember_nccl_allreduce_wait(ember_nccl_req_t *req);

/** Error text that broke the communicator (names the peer), or "". */
const char *ember_nccl_comm_error(const ember_nccl_comm_t *comm);

/** Number of members, and this process's NCCL rank. */
int ember_nccl_comm_size(const ember_nccl_comm_t *comm);
int ember_nccl_comm_rank(const ember_nccl_comm_t *comm);

#ifdef EMBER_HAVE_TRANSPORT
#include <ember/transport.h>
/** Fill @boot_p from the transport @tp (borrowed; must outlive its users). */
void ember_nccl_bootstrap_tp(ember_tp_t *tp, ember_nccl_bootstrap_t *boot_p);
#endif

#ifdef __cplusplus
}
#endif
#endif
