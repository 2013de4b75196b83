/*
 * engine/device/device_comm: which allreduce a device's dense gradients take.
 *
 * Every device's communicator slots go through here (engine/device/device.c puts
 * these wrappers over the backend's).  A communicator is either
 *   - the backend's own (NCCL on GPUs, the host ring on the CPU), or
 *   - STAGED: the host ring over the transport on host buffers, the device
 *     data copied out before and back after.  Taken where the backend cannot
 *     form the group (it answers ERR_UNSUPPORTED: trainers that share a GPU,
 *     which NCCL refuses, or a build without NCCL), or always with
 *     EMBER_DENSE_ALLREDUCE=staged.  Every member reaches the same answer
 *     (the CUDA backend decides from what all members published), so they
 *     all meet in the same ring.
 * The staging buffers (the device's host_alloc: pinned on a GPU) belong to
 * the request slots and only grow: a steady step allocates nothing.  The
 * path is logged once per communicator.
 */
#include "engine/device/device_comm.h"

#include "engine/comm/allreduce.h"

#include <ember/config.h>
#include <ember/log.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEVICE_COMM_MAX_REQS 16

typedef struct device_comm device_comm_t;

struct ember_device_req {
    device_comm_t *comm;
    int in_use;
    ember_device_req_t *inner;        /* the backend's request */
    ember_comm_allreduce_req_t *ring; /* staged: the host ring's */
    float *data;                      /* staged: the device buffer */
    size_t count;
    float *host;           /* staged: grow-only copy of data (host_alloc) */
    size_t host_capacity;  /* floats */
    ember_status_t status; /* staged: INPROGRESS until final */
};

struct device_comm {
    ember_device_t *dev;
    const ember_device_ops_t *backend; /* the backend's own slots */
    ember_device_comm_t *inner;        /* the backend's communicator, or NULL */
    ember_comm_allreduce_t *ring;      /* staged: the host ring */
    ember_device_req_t reqs[DEVICE_COMM_MAX_REQS];
};

static ember_status_t comm_create(ember_device_t *dev, const ember_device_ops_t *backend,
                                  ember_tp_t *tp, const int *ranks, int nranks, uint16_t op_base,
                                  ember_device_comm_t **comm_p)
{
    const char *mode = ember_config_str("EMBER_DENSE_ALLREDUCE");
    device_comm_t *comm;
    ember_status_t status;
    int staged_only;

    if (!mode || strcasecmp(mode, "auto") == 0) {
        staged_only = 0;
    } else if (strcasecmp(mode, "staged") == 0) {
        staged_only = 1;
    } else {
        ember_error("device", "EMBER_DENSE_ALLREDUCE=%s: expected auto or staged", mode);
        return EMBER_ERR_INVALID_PARAM;
    }
    comm = calloc(1, sizeof(*comm));
    if (!comm)
        return EMBER_ERR_NO_MEMORY;
    comm->dev = dev;
    comm->backend = backend;
    for (int i = 0; i < DEVICE_COMM_MAX_REQS; i++)
        comm->reqs[i].comm = comm;

    if (!staged_only) {
        status = backend->comm_create(dev, tp, ranks, nranks, op_base, &comm->inner);
        if (status == EMBER_OK) {
            ember_info("device", "dense allreduce: the %s device's own (%d members%s)",
                       backend->name, nranks,
                       backend->mem_type == EMBER_MEM_HOST ? ", the host ring" : ", NCCL");
            *comm_p = (ember_device_comm_t *)comm;
            return EMBER_OK;
        }
        if (status != EMBER_ERR_UNSUPPORTED || !tp) {
            free(comm);
            return status; /* the backend logged why */
        }
    }
    status = ember_comm_allreduce_create(tp, ranks, nranks, op_base, &comm->ring);
    if (status != EMBER_OK) {
        free(comm);
        return status;
    }
    ember_info("device",
               "dense allreduce: the host ring over the transport, %s "
               "(%d members, %s)",
               backend->mem_type == EMBER_MEM_HOST ? "on a copy of the gradients"
                                                   : "staged through host memory",
               nranks,
               staged_only ? "EMBER_DENSE_ALLREDUCE=staged"
                           : "the device's own cannot form this group");
    *comm_p = (ember_device_comm_t *)comm;
    return EMBER_OK;
}

static void comm_destroy(ember_device_comm_t *c)
{
    device_comm_t *comm = (device_comm_t *)c;
    if (!comm)
        return;
    if (comm->inner)
        comm->backend->comm_destroy(comm->inner);
    ember_comm_allreduce_destroy(comm->ring); /* cancels what is still in flight */
    for (int i = 0; i < DEVICE_COMM_MAX_REQS; i++)
        comm->backend->host_free(comm->dev, comm->reqs[i].host);
    free(comm);
}

static ember_device_req_t *req_take(device_comm_t *comm)
{
    for (int i = 0; i < DEVICE_COMM_MAX_REQS; i++) {
        if (!comm->reqs[i].in_use)
            return &comm->reqs[i];
    }
    ember_error("device", "more than %d allreduces in flight", DEVICE_COMM_MAX_REQS);
    return NULL;
}

static ember_status_t allreduce_start(ember_device_comm_t *c, float *data, size_t count,
                                      int average, ember_device_req_t **req_p)
{
    device_comm_t *comm = (device_comm_t *)c;
    ember_device_req_t *req = req_take(comm);

    if (!req)
        return EMBER_ERR_NO_MEMORY;
    if (comm->inner) {
        EMBER_CHECK(comm->backend->allreduce_start(comm->inner, data, count, average, &req->inner));
        req->in_use = 1;
        *req_p = req;
        return EMBER_OK;
    }
    if (count > req->host_capacity) { /* pinned on a GPU: copied by DMA */
        void *host = NULL;
        comm->backend->host_free(comm->dev, req->host);
        req->host = NULL;
        req->host_capacity = 0;
        EMBER_CHECK(comm->backend->host_alloc(comm->dev, count * sizeof(float), &host));
        req->host = host;
        req->host_capacity = count;
    }
    /* Ordered after everything enqueued on the device; returns once the
     * gradients are on the host. */
    EMBER_CHECK(comm->backend->mem_copy(comm->dev, req->host, data, count * sizeof(float),
                                        EMBER_COPY_DEVICE_TO_HOST));
    const ember_comm_allreduce_args_t args = {
            .recv = req->host, .count = count, .average = average};
    EMBER_CHECK(ember_comm_allreduce_start(comm->ring, &args, &req->ring));
    req->data = data;
    req->count = count;
    req->status = EMBER_INPROGRESS;
    req->in_use = 1;
    *req_p = req;
    return EMBER_OK;
}

/* The ring is done (@status, from its wait, which freed it): put the sum
 * back on the device. */
static ember_status_t staged_finish(ember_device_req_t *req, ember_status_t status)
{
    device_comm_t *comm = req->comm;

    req->ring = NULL;
    if (status == EMBER_OK)
        status = comm->backend->mem_copy(comm->dev, req->data, req->host,
                                         req->count * sizeof(float), EMBER_COPY_HOST_TO_DEVICE);
    req->status = status;
    return status;
}

static ember_status_t allreduce_test(ember_device_req_t *req)
{
    if (req->inner)
        return req->comm->backend->allreduce_test(req->inner);
    if (req->status != EMBER_INPROGRESS)
        return req->status;
    if (ember_comm_allreduce_test(req->ring) == EMBER_INPROGRESS)
        return EMBER_INPROGRESS;
    return staged_finish(req, ember_comm_allreduce_wait(req->ring)); /* at once */
}

static ember_status_t allreduce_wait(ember_device_req_t *req)
{
    ember_status_t status;

    if (req->inner) {
        status = req->comm->backend->allreduce_wait(req->inner);
        req->inner = NULL;
    } else if (req->status == EMBER_INPROGRESS) {
        status = staged_finish(req, ember_comm_allreduce_wait(req->ring));
    } else {
        status = req->status;
    }
    req->in_use = 0;
    return status;
}

static const char *comm_error(const ember_device_comm_t *c)
{
    const device_comm_t *comm = (const device_comm_t *)c;
    if (comm->inner)
        return comm->backend->comm_error(comm->inner);
    return ember_comm_allreduce_error(comm->ring);
}

/* The backend's table each device keeps (engine/device/device.c), found from the
 * device: the wrappers below are the slots of every device's table. */
static ember_status_t wrap_comm_create(ember_device_t *dev, ember_tp_t *tp, const int *ranks,
                                       int nranks, uint16_t op_base, ember_device_comm_t **comm_p)
{
    return comm_create(dev, ember_device_backend_ops(dev), tp, ranks, nranks, op_base, comm_p);
}

void ember_device_comm_wrap(ember_device_ops_t *ops)
{
    ops->comm_create = wrap_comm_create;
    ops->comm_destroy = comm_destroy;
    ops->allreduce_start = allreduce_start;
    ops->allreduce_test = allreduce_test;
    ops->allreduce_wait = allreduce_wait;
    ops->comm_error = comm_error;
}
