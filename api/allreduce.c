/*
 * api/allreduce: the trainers' dense allreduce (include/ember/allreduce.h),
 * the device's communicator slots over the job's trainers: the ring over
 * the transport on "cpu" (engine/comm), NCCL on "cuda".  Each allreduce a
 * job makes takes its own four op ids, in creation order, the same on
 * every trainer.
 */
#include "api/api.h"

#include <ember/allreduce.h>
#include <ember/log.h>

#include <stdlib.h>

struct ember_allreduce {
    ember_job_t *job;
    ember_device_t *device;
    ember_device_t *own_device; /* the host's, when none was given */
    const ember_device_ops_t *ops;
    ember_device_comm_t *comm;
};

struct ember_allreduce_req {
    ember_allreduce_t *ar;
    ember_device_req_t *req;
};

static ember_status_t ar_fail(const ember_allreduce_t *ar, ember_status_t status, const char *what)
{
    const char *why = ar->comm ? ar->ops->comm_error(ar->comm) : "";
    ember_error("allreduce", "trainer %d: %s: %s%s%s", ar->job->rank, what,
                ember_status_string(status), why && *why ? ": " : "", why ? why : "");
    return status;
}

ember_status_t ember_allreduce_create(ember_job_t *job, ember_device_t *device,
                                      ember_allreduce_t **ar_p)
{
    if (ember_job_role(job, job->rank, NULL) != EMBER_ROLE_TRAINER) {
        ember_error("allreduce", "%s: the allreduce is the trainers'",
                    ember_tp_peer_name(job->tp, job->rank));
        return EMBER_ERR_INVALID_PARAM;
    }
    if (job->allreduces >= EMBER_ALLREDUCE_MAX) {
        ember_error("allreduce", "trainer %d: %d allreduces made already, at most %d", job->rank,
                    job->allreduces, EMBER_ALLREDUCE_MAX);
        return EMBER_ERR_OUT_OF_RANGE;
    }
    ember_allreduce_t *ar = calloc(1, sizeof(*ar));
    int *ranks = malloc((size_t)job->trainers * sizeof(int));
    ember_status_t status = ar && ranks ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK) {
        ar->job = job;
        ar->device = device;
        if (!device && (status = ember_device_open("cpu", 0, &ar->own_device)) == EMBER_OK)
            ar->device = ar->own_device;
    }
    if (status == EMBER_OK) {
        for (int t = 0; t < job->trainers; t++)
            ranks[t] = ember_job_trainer_rank(job, t);
        ar->ops = ember_device_ops(ar->device);
        const uint16_t base = (uint16_t)(API_OP_ALLREDUCE_BASE + 4 * job->allreduces);
        job->allreduces++; /* taken even when this one fails: every trainer counts alike */
        status = ar->ops->comm_create(ar->device, job->tp, ranks, job->trainers, base, &ar->comm);
        if (status != EMBER_OK)
            ar_fail(ar, status, "joining the allreduce");
    }
    free(ranks);
    if (status != EMBER_OK) {
        ember_allreduce_destroy(ar);
        return status;
    }
    *ar_p = ar;
    return EMBER_OK;
}

void ember_allreduce_destroy(ember_allreduce_t *ar)
{
    if (!ar)
        return;
    if (ar->comm)
        ar->ops->comm_destroy(ar->comm);
    ember_device_close(ar->own_device);
    free(ar);
}

ember_status_t ember_allreduce_start(ember_allreduce_t *ar, float *data, size_t count,
                                     ember_allreduce_op_t op, ember_allreduce_req_t **req_p)
{
    if ((!data && count) || (op != EMBER_ALLREDUCE_SUM && op != EMBER_ALLREDUCE_AVG)) {
        ember_error("allreduce", "trainer %d: %zu floats at %p, op %d", ar->job->rank, count,
                    (void *)data, (int)op);
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_allreduce_req_t *req = calloc(1, sizeof(*req));
    if (!req)
        return EMBER_ERR_NO_MEMORY;
    req->ar = ar;
    ember_status_t status =
            ar->ops->allreduce_start(ar->comm, data, count, op == EMBER_ALLREDUCE_AVG, &req->req);
    if (status != EMBER_OK) {
        free(req);
        return ar_fail(ar, status, "starting");
    }
    *req_p = req;
    return EMBER_OK;
}

ember_status_t ember_allreduce_test(ember_allreduce_req_t *req)
{
    return req->ar->ops->allreduce_test(req->req);
}

ember_status_t ember_allreduce_wait(ember_allreduce_req_t *req)
{
    ember_allreduce_t *ar = req->ar;
    ember_status_t status;
    /* The ring (host memory) moves with the transport: waited for here, so
     * an abort ends the wait; then the device's bounded wait frees the
     * request (the aborted peers leave).  NCCL's own wait blocks on the
     * GPU, bounded by its watchdog. */
    if (ember_device_mem_type(ar->device) == EMBER_MEM_HOST) {
        while (ar->ops->allreduce_test(req->req) == EMBER_INPROGRESS && !ar->job->aborted)
            ember_tp_wait(ar->job->tp, 0.05);
    }
    status = ar->ops->allreduce_wait(req->req);
    free(req);
    if (ar->job->aborted) {
        ember_error("allreduce", "trainer %d: the job was aborted: %s", ar->job->rank,
                    ar->job->abort_cause);
        return EMBER_ERR_CANCELED;
    }
    return status == EMBER_OK ? EMBER_OK : ar_fail(ar, status, "reducing");
}

const char *ember_allreduce_error(const ember_allreduce_t *ar)
{
    const char *why = ar && ar->comm ? ar->ops->comm_error(ar->comm) : NULL;
    return why ? why : "";
}

ember_status_t ember_allreduce(ember_allreduce_t *ar, float *data, size_t count,
                               ember_allreduce_op_t op)
{
    ember_allreduce_req_t *req = NULL;
    EMBER_CHECK(ember_allreduce_start(ar, data, count, op, &req));
    return ember_allreduce_wait(req);
}
