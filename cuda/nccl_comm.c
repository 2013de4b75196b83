/*
 * cuda/nccl_comm: non-blocking NCCL communicator, bootstrapped through the
 * rendezvous store, watched by the waiting thread (see nccl_comm.h).
 */
#include "cuda/nccl_comm.h"

#include <ember/config.h>
#include <ember/log.h>

#include <nccl.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NCCL_MAX_REQS 16
#define NCCL_ID_MAGIC 0x4c43434eu /* "NCCL" */

struct ember_nccl_req {
    ember_nccl_comm_t *comm;
    cudaEvent_t done;
    double deadline;
    unsigned long long seq;
    int in_use;
    ember_status_t status; /* INPROGRESS until final */
};

struct ember_nccl_comm {
    ncclComm_t nccl; /* NULL once aborted or destroyed */
    const ember_nccl_bootstrap_t *boot;
    int *ranks;
    int nranks, rank;
    int cuda_device;
    cudaStream_t stream;
    double op_timeout;
    unsigned long long seq;
    ember_status_t broken; /* OK while healthy */
    char error[256];
    ember_nccl_req_t reqs[NCCL_MAX_REQS];
};

/* What the first member publishes. */
typedef struct {
    uint32_t magic;
    uint32_t nranks;
    ncclUniqueId id;
} nccl_id_msg_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 50000}; /* 50 us: never spin a shared core */
    nanosleep(&ts, NULL);
}

/* Translate an NCCL result at the boundary. */
static ember_status_t nccl_status(ncclResult_t res)
{
    switch (res) {
    case ncclSuccess: return EMBER_OK;
    case ncclInProgress: return EMBER_INPROGRESS;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return EMBER_ERR_INVALID_PARAM;
    case ncclRemoteError: return EMBER_ERR_PEER_LOST;
    default: return EMBER_ERR_TRANSPORT;
    }
}

/* Break the communicator once: record why, log it once, abort NCCL. */
static ember_status_t comm_break(ember_nccl_comm_t *comm, ember_status_t status, const char *fmt,
                                 ...) __attribute__((format(printf, 3, 4)));
static ember_status_t comm_break(ember_nccl_comm_t *comm, ember_status_t status, const char *fmt,
                                 ...)
{
    va_list ap;

    if (comm->broken != EMBER_OK)
        return comm->broken;
    va_start(ap, fmt);
    vsnprintf(comm->error, sizeof(comm->error), fmt, ap);
    va_end(ap);
    comm->broken = status;
    ember_error("nccl", "%s; aborting the NCCL communicator", comm->error);
    if (comm->nccl) {
        /* Abort never waits for the peers: it is how a hang is cut. */
        ncclCommAbort(comm->nccl);
        comm->nccl = NULL;
    }
    return status;
}

static const char *peer_name(const ember_nccl_comm_t *comm, int rank)
{
    const char *name = NULL;
    if (comm->boot && comm->boot->peer_name)
        name = comm->boot->peer_name(comm->boot->arg, rank);
    return name ? name : "?";
}

/* The watchdog: one poll of everything that may break the communicator. */
static ember_status_t comm_poll(ember_nccl_comm_t *comm, double deadline, const char *what)
{
    ncclResult_t async = ncclSuccess;

    if (comm->broken != EMBER_OK)
        return comm->broken;
    if (comm->boot) {
        if (comm->boot->progress)
            comm->boot->progress(comm->boot->arg);
        for (int i = 0; i < comm->nranks; i++) {
            if (i != comm->rank && comm->boot->peer_lost(comm->boot->arg, comm->ranks[i]))
                return comm_break(comm, EMBER_ERR_PEER_LOST,
                                  "%s: peer %s (rank %d, NCCL rank %d) lost", what,
                                  peer_name(comm, comm->ranks[i]), comm->ranks[i], i);
        }
    }
    if (comm->nccl && ncclCommGetAsyncError(comm->nccl, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress)
        return comm_break(comm, nccl_status(async), "%s: NCCL error: %s (%s)", what,
                          ncclGetErrorString(async), ncclGetLastError(comm->nccl));
    if (deadline > 0 && now_s() > deadline)
        return comm_break(comm, EMBER_ERR_TIMED_OUT,
                          "%s: no completion within the timeout (members: %d; "
                          "a peer is hung or slow)",
                          what, comm->nranks);
    return async == ncclInProgress ? EMBER_INPROGRESS : EMBER_OK;
}

/* Wait for a non-blocking NCCL call to settle (async state leaves
 * InProgress), watching peers and the deadline meanwhile. */
static ember_status_t comm_settle(ember_nccl_comm_t *comm, double deadline, const char *what)
{
    ember_status_t status;
    while ((status = comm_poll(comm, deadline, what)) == EMBER_INPROGRESS)
        nap();
    return status;
}

static ember_status_t exchange_id(ember_nccl_comm_t *comm, const char *tag, ncclUniqueId *id_p)
{
    static unsigned long long generation; /* same order on every member */
    char key[128];
    nccl_id_msg_t msg;
    ncclResult_t res;

    snprintf(key, sizeof(key), "ember.nccl.%s.%llu", tag ? tag : "comm", generation++);
    if (comm->rank == 0) {
        res = ncclGetUniqueId(&msg.id);
        if (res != ncclSuccess) {
            ember_error("nccl", "ncclGetUniqueId: %s", ncclGetErrorString(res));
            return nccl_status(res);
        }
        msg.magic = NCCL_ID_MAGIC;
        msg.nranks = (uint32_t)comm->nranks;
        if (comm->nranks > 1)
            EMBER_CHECK(comm->boot->store_set(comm->boot->arg, key, &msg, sizeof(msg)));
    } else {
        void *value = NULL;
        size_t length = 0;
        EMBER_CHECK(comm->boot->store_get(comm->boot->arg, key, &value, &length));
        if (length != sizeof(msg)) {
            ember_error("nccl", "store key %s: %zu bytes, expected %zu", key, length, sizeof(msg));
            free(value);
            return EMBER_ERR_BAD_MESSAGE;
        }
        memcpy(&msg, value, sizeof(msg));
        free(value);
        if (msg.magic != NCCL_ID_MAGIC || msg.nranks != (uint32_t)comm->nranks) {
            ember_error("nccl",
                        "store key %s: member %s published %u ranks, "
                        "this member expects %d",
                        key, peer_name(comm, comm->ranks[0]), msg.nranks, comm->nranks);
            return EMBER_ERR_BAD_MESSAGE;
        }
    }
    *id_p = msg.id;
    return EMBER_OK;
}

/* @rank's place in @ranks, or -1. */
static int member_index(const int *ranks, int nranks, int rank)
{
    int index = -1;
    for (int i = 0; i < nranks; i++) {
        if (ranks[i] == rank)
            index = i;
    }
    return index;
}

/* "host/PCI bus id" of @cuda_device (its ordinal where the bus id is unknown). */
static void gpu_identity(int cuda_device, char *id, size_t size)
{
    char bus[64], host[96];

    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(bus, sizeof(bus), "ordinal-%d", cuda_device);
    }
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    snprintf(id, size, "%s/%s", host, bus);
}

typedef char gpu_id_t[160];

/* Publish @self_id as member @self's, then read every member's into @ids. */
static ember_status_t gather_gpu_ids(const ember_nccl_bootstrap_t *boot, const char *tag,
                                     unsigned long long gen, int self, int nranks,
                                     const char *self_id, gpu_id_t *ids)
{
    char key[128];

    snprintf(key, sizeof(key), "ember.nccl.%s.gpu.%llu.%d", tag ? tag : "comm", gen, self);
    EMBER_CHECK(boot->store_set(boot->arg, key, self_id, strlen(self_id) + 1));
    for (int i = 0; i < nranks; i++) {
        void *value = NULL;
        size_t length = 0;
        snprintf(key, sizeof(key), "ember.nccl.%s.gpu.%llu.%d", tag ? tag : "comm", gen, i);
        EMBER_CHECK(boot->store_get(boot->arg, key, &value, &length));
        if (length == 0 || length > sizeof(ids[i]) || ((char *)value)[length - 1] != '\0') {
            ember_error("nccl", "store key %s: not a GPU identity", key);
            free(value);
            return EMBER_ERR_BAD_MESSAGE;
        }
        memcpy(ids[i], value, length);
        free(value);
    }
    return EMBER_OK;
}

/* 1 when no two of @ids are the same GPU (the first pair found is logged,
 * once in the job: by member 0). */
static int gpu_ids_distinct(const gpu_id_t *ids, const int *ranks, int nranks, int self)
{
    for (int i = 0; i < nranks; i++) {
        for (int j = i + 1; j < nranks; j++) {
            if (strcmp(ids[i], ids[j]) != 0)
                continue;
            if (self == 0)
                ember_info("nccl",
                           "members %d and %d (ranks %d and %d) share "
                           "GPU %s: NCCL needs a GPU of its own per "
                           "member",
                           i, j, ranks[i], ranks[j], ids[i]);
            return 0;
        }
    }
    return 1;
}

ember_status_t ember_nccl_gpus_distinct(const ember_nccl_bootstrap_t *boot, const int *ranks,
                                        int nranks, const char *tag, int cuda_device,
                                        int *distinct_p)
{
    static unsigned long long generation; /* same order on every member */
    char self_id[sizeof(gpu_id_t)];
    gpu_id_t *ids;
    int self;

    *distinct_p = 1;
    if (nranks < 2)
        return EMBER_OK;
    if (!boot || !ranks || boot->size < sizeof(*boot) || !boot->store_set || !boot->store_get)
        return EMBER_ERR_INVALID_PARAM;
    self = member_index(ranks, nranks, boot->self);
    if (self < 0)
        return EMBER_ERR_INVALID_PARAM;
    gpu_identity(cuda_device, self_id, sizeof(self_id));
    ids = calloc((size_t)nranks, sizeof(*ids));
    if (!ids)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = gather_gpu_ids(boot, tag, generation++, self, nranks, self_id, ids);
    if (status == EMBER_OK)
        *distinct_p = gpu_ids_distinct((const gpu_id_t *)ids, ranks, nranks, self);
    free(ids);
    return status;
}

static int bootstrap_usable(const ember_nccl_bootstrap_t *boot, const int *ranks, int nranks,
                            ember_nccl_comm_t **comm_p)
{
    if (!ranks || nranks < 1 || !comm_p || (!boot && nranks != 1))
        return 0;
    return !boot ||
           (boot->size >= sizeof(*boot) && boot->store_set && boot->store_get && boot->peer_lost);
}

static void comm_free(ember_nccl_comm_t *comm)
{
    free(comm->ranks);
    free(comm);
}

/* A communicator over @ranks with this process (transport rank @self) its
 * member comm->rank; nothing of CUDA or NCCL yet. */
static ember_status_t comm_new(const int *ranks, int nranks, int self, ember_nccl_comm_t **comm_p)
{
    ember_nccl_comm_t *comm = calloc(1, sizeof(*comm));

    if (!comm || !(comm->ranks = malloc((size_t)nranks * sizeof(int)))) {
        free(comm);
        ember_error("nccl", "communicator: out of memory");
        return EMBER_ERR_NO_MEMORY;
    }
    memcpy(comm->ranks, ranks, (size_t)nranks * sizeof(int));
    comm->nranks = nranks;
    comm->rank = member_index(ranks, nranks, self);
    if (comm->rank < 0) {
        ember_error("nccl", "communicator: rank %d is not among its %d members", self, nranks);
        comm_free(comm);
        return EMBER_ERR_INVALID_PARAM;
    }
    *comm_p = comm;
    return EMBER_OK;
}

static void destroy_events(ember_nccl_comm_t *comm)
{
    for (int i = 0; i < NCCL_MAX_REQS; i++) {
        if (comm->reqs[i].done)
            cudaEventDestroy(comm->reqs[i].done);
    }
}

/* Each request slot's completion event. */
static ember_status_t create_events(ember_nccl_comm_t *comm)
{
    for (int i = 0; i < NCCL_MAX_REQS; i++) {
        if (cudaEventCreateWithFlags(&comm->reqs[i].done, cudaEventDisableTiming) != cudaSuccess) {
            ember_error("nccl", "cudaEventCreate failed");
            (void)cudaGetLastError();
            return EMBER_ERR_NO_MEMORY;
        }
        comm->reqs[i].comm = comm;
    }
    return EMBER_OK;
}

/* NCCL's communicator, non-blocking: the first member's unique id, then
 * every member's init, settled (watched) until @deadline. */
static ember_status_t nccl_init(ember_nccl_comm_t *comm, const char *tag, double deadline)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId id;
    ember_status_t status;
    ncclResult_t res;

    status = exchange_id(comm, tag, &id);
    if (status != EMBER_OK)
        return status;
    config.blocking = 0;
    res = ncclCommInitRankConfig(&comm->nccl, comm->nranks, id, comm->rank, &config);
    if (res != ncclSuccess && res != ncclInProgress) {
        ember_error("nccl", "ncclCommInitRankConfig (rank %d of %d): %s (%s)", comm->rank,
                    comm->nranks, ncclGetErrorString(res), ncclGetLastError(NULL));
        return nccl_status(res);
    }
    status = comm_settle(comm, deadline, "NCCL communicator creation");
    if (status != EMBER_OK && comm->nccl)
        ncclCommAbort(comm->nccl);
    return status;
}

ember_status_t ember_nccl_comm_create(const ember_nccl_bootstrap_t *boot, const int *ranks,
                                      int nranks, const char *tag, int cuda_device,
                                      cudaStream_t stream, double timeout_s,
                                      ember_nccl_comm_t **comm_p)
{
    ember_nccl_comm_t *comm;
    ember_status_t status;

    if (!bootstrap_usable(boot, ranks, nranks, comm_p)) {
        ember_error("nccl",
                    "communicator: invalid arguments (%d ranks, %s "
                    "bootstrap)",
                    nranks, boot ? "a" : "no");
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(comm_new(ranks, nranks, boot ? boot->self : ranks[0], &comm));
    comm->boot = boot;
    comm->cuda_device = cuda_device;
    comm->stream = stream;
    comm->op_timeout = timeout_s > 0 ? timeout_s : ember_config_double("EMBER_RPC_TIMEOUT");
    double deadline =
            now_s() + (timeout_s > 0 ? timeout_s : ember_config_double("EMBER_CONNECT_TIMEOUT"));

    if (cudaSetDevice(cuda_device) != cudaSuccess) {
        ember_error("nccl", "cudaSetDevice(%d) failed", cuda_device);
        (void)cudaGetLastError();
        comm_free(comm);
        return EMBER_ERR_NO_DEVICE;
    }
    status = create_events(comm);
    if (status == EMBER_OK)
        status = nccl_init(comm, tag, deadline);
    if (status != EMBER_OK) {
        destroy_events(comm);
        comm_free(comm);
        return status;
    }
    ember_info("nccl",
               "communicator '%s': NCCL rank %d of %d on GPU %d "
               "(non-blocking)",
               tag ? tag : "comm", comm->rank, nranks, cuda_device);
    *comm_p = comm;
    return EMBER_OK;
}

void ember_nccl_comm_destroy(ember_nccl_comm_t *comm)
{
    if (!comm)
        return;
    if (comm->nccl && comm->broken == EMBER_OK) {
        double deadline = now_s() + 10.0;
        ncclResult_t res = ncclCommFinalize(comm->nccl);
        if ((res == ncclSuccess || res == ncclInProgress) &&
            comm_settle(comm, deadline, "NCCL finalize") == EMBER_OK) {
            ncclCommDestroy(comm->nccl);
            comm->nccl = NULL;
        }
    }
    if (comm->nccl) /* broken while finalizing, or finalize refused */
        ncclCommAbort(comm->nccl);
    destroy_events(comm);
    comm_free(comm);
}

ember_status_t ember_nccl_allreduce_start(ember_nccl_comm_t *comm, float *data, size_t count,
                                          int average, ember_nccl_req_t **req_p)
{
    ember_nccl_req_t *req = NULL;
    ember_status_t status;
    ncclResult_t res;
    char what[64];

    if (!comm || !req_p || (count > 0 && !data))
        return EMBER_ERR_INVALID_PARAM;
    if (comm->broken != EMBER_OK)
        return comm->broken;
    for (int i = 0; i < NCCL_MAX_REQS && !req; i++) {
        if (!comm->reqs[i].in_use)
            req = &comm->reqs[i];
    }
    if (!req) {
        ember_error("nccl", "more than %d allreduces in flight", NCCL_MAX_REQS);
        return EMBER_ERR_NO_MEMORY;
    }
    req->seq = comm->seq++;
    req->deadline = now_s() + comm->op_timeout;
    snprintf(what, sizeof(what), "allreduce #%llu", req->seq);
    res = ncclAllReduce(data, data, count, ncclFloat32, average ? ncclAvg : ncclSum, comm->nccl,
                        comm->stream);
    if (res != ncclSuccess && res != ncclInProgress)
        return comm_break(comm, nccl_status(res), "%s: ncclAllReduce: %s (%s)", what,
                          ncclGetErrorString(res), ncclGetLastError(comm->nccl));
    /* Enqueueing a non-blocking collective may itself be in progress. */
    status = comm_settle(comm, req->deadline, what);
    if (status != EMBER_OK)
        return status;
    if (cudaEventRecord(req->done, comm->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return comm_break(comm, EMBER_ERR_TRANSPORT, "%s: cudaEventRecord failed", what);
    }
    req->in_use = 1;
    req->status = EMBER_INPROGRESS;
    *req_p = req;
    return EMBER_OK;
}

ember_status_t ember_nccl_allreduce_test(ember_nccl_req_t *req)
{
    ember_nccl_comm_t *comm = req->comm;
    ember_status_t status;
    cudaError_t err;
    char what[64];

    if (req->status != EMBER_INPROGRESS)
        return req->status;
    snprintf(what, sizeof(what), "allreduce #%llu", req->seq);
    err = cudaEventQuery(req->done);
    if (err == cudaSuccess) {
        req->status = EMBER_OK;
        return EMBER_OK;
    }
    if (err != cudaErrorNotReady) {
        (void)cudaGetLastError();
        req->status = comm_break(comm, EMBER_ERR_TRANSPORT, "%s: CUDA error %s", what,
                                 cudaGetErrorString(err));
        return req->status;
    }
    status = comm_poll(comm, req->deadline, what);
    if (status < 0)
        req->status = status;
    return req->status;
}

ember_status_t ember_nccl_allreduce_wait(ember_nccl_req_t *req)
{
    ember_status_t status;

    while ((status = ember_nccl_allreduce_test(req)) == EMBER_INPROGRESS)
        nap();
    req->in_use = 0;
    return status;
}

const char *ember_nccl_comm_error(const ember_nccl_comm_t *comm)
{
    return comm->broken != EMBER_OK ? comm->error : "";
}

int ember_nccl_comm_size(const ember_nccl_comm_t *comm)
{
    return comm->nranks;
}

int ember_nccl_comm_rank(const ember_nccl_comm_t *comm)
{
    return comm->rank;
}
