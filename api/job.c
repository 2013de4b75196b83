/*
 * api/job: joining the job, its roles, barriers and leaving (include/ember/job.h).
 *
 * The roles are a pure function of (rank, T, P, world), so every rank
 * knows every other's without asking once it knows T and P.  What the ranks
 * do tell each other: T and P (checked at the join through the store), or
 * with EMBER_JOB_FROM_ROLES each rank's role (through the store, T and P
 * counted from them), an abort (EMBER_OP_ABORT
 * to every rank), a barrier of the ranks that are not PS (to the
 * coordinator, which answers all at once), a PS serving (API_OP_READY,
 * answered once ember_ps_serve runs) and a client leaving (API_OP_LEAVE to
 * each PS, whose serving ends once every client has left).
 */
#include "api/api.h"

#include "common/clock.h"
#include "common/reserve.h"
#include "common/slurm.h"
#include "common/topology.h"
#include "engine/wire/protocol.h"

#include <ember/config.h>
#include <ember/log.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The coordinator's barrier: who arrived at the one being gathered, their
 * held requests (answered when all came), and the name each came with. */
struct api_barrier {
    uint64_t gather; /* the barrier being gathered: every client's n-th */
    /* A barrier that failed while the coordinator was not in it yet: its
     * number, status and why, for the coordinator's own call. */
    uint64_t failed_seq;
    ember_status_t failed_status;
    char failed_why[300];
    uint64_t *arrived;
    ember_rpc_req_t **held;
    char (*names)[EMBER_JOB_NAME_MAX];
};

/* A program built against ABI 1.1 or later passes params with a role; an
 * older one's struct ends before it (its bytes there are not its). */
static int params_have_role(unsigned abi)
{
    return EMBER_ABI_MAJOR(abi) == EMBER_ABI_VERSION_MAJOR && EMBER_ABI_MINOR(abi) >= 1;
}

void ember_job_params_init_abi(ember_job_params_t *params, unsigned abi)
{
    const ember_job_params_t init = {.abi = abi, .rank = -1, .world_size = -1, .role = -1};
    memcpy(params, &init,
           params_have_role(abi) ? sizeof(init) : offsetof(ember_job_params_t, role));
}

/* @params' role: -1 for a program that passes none. */
static int params_role(const ember_job_params_t *params)
{
    return params_have_role(params->abi) ? params->role : -1;
}

double api_connect_timeout(void)
{
    return ember_config_double("EMBER_CONNECT_TIMEOUT");
}

/* How long a barrier waits for the coordinator's verdict after this rank
 * heard of an abort: as long as shutdown waits for calls in flight. */
static double api_abort_grace(void)
{
    return ember_config_double("EMBER_SHUTDOWN_TIMEOUT");
}

int api_clients(const ember_job_t *job)
{
    return job->world - job->num_ps;
}

int api_is_client(const ember_job_t *job, int rank)
{
    return rank >= 0 && rank < job->world - job->num_ps;
}

/* ---- roles ---------------------------------------------------------------- */

ember_role_t ember_job_role(const ember_job_t *job, int rank, int *index_p)
{
    ember_role_t role = EMBER_ROLE_OTHER;
    int index = -1;
    if (rank >= 0 && rank < job->trainers) {
        role = EMBER_ROLE_TRAINER;
        index = rank;
    } else if (rank >= job->world - job->num_ps && rank < job->world) {
        role = EMBER_ROLE_PS;
        index = rank - (job->world - job->num_ps);
    } else if (rank >= job->trainers && rank < job->world) {
        index = rank - job->trainers;
    }
    if (index_p)
        *index_p = index;
    return role;
}

/* The name of @rank's role: "trainer1", "ps0", "master" or "other2". */
static void role_name(int rank, int trainers, int num_ps, int world, char *name, size_t length)
{
    const int others = world - trainers - num_ps;
    if (rank < trainers)
        snprintf(name, length, "trainer%d", rank);
    else if (rank >= world - num_ps)
        snprintf(name, length, "ps%d", rank - (world - num_ps));
    else if (others == 1)
        snprintf(name, length, "master");
    else
        snprintf(name, length, "other%d", rank - trainers);
}

int ember_job_rank(const ember_job_t *job)
{
    return job->rank;
}

int ember_job_world_size(const ember_job_t *job)
{
    return job->world;
}

int ember_job_trainers(const ember_job_t *job)
{
    return job->trainers;
}

int ember_job_num_ps(const ember_job_t *job)
{
    return job->num_ps;
}

int ember_job_trainer_rank(const ember_job_t *job, int t)
{
    return t >= 0 && t < job->trainers ? t : -1;
}

int ember_job_ps_rank(const ember_job_t *job, int p)
{
    return p >= 0 && p < job->num_ps ? job->world - job->num_ps + p : -1;
}

int ember_job_coordinator(const ember_job_t *job)
{
    return job->coordinator;
}

const char *ember_job_name(const ember_job_t *job, int rank)
{
    return rank >= 0 && rank < job->world ? ember_tp_peer_name(job->tp, rank) : "?";
}

int ember_job_local_rank(const ember_job_t *job)
{
    return job->local_rank;
}

int ember_job_local_size(const ember_job_t *job)
{
    return job->local_size;
}

int ember_job_peer_lost(const ember_job_t *job, int rank)
{
    return rank >= 0 && rank < job->world && ember_tp_peer_lost(job->tp, rank);
}

const char *ember_job_peer_reason(const ember_job_t *job, int rank)
{
    return ember_job_peer_lost(job, rank) ? ember_tp_peer_reason(job->tp, rank) : "";
}

const char *ember_job_aborted(const ember_job_t *job)
{
    return job->abort_cause;
}

ember_tp_t *ember_job_transport(ember_job_t *job)
{
    return job->tp;
}

ember_status_t ember_job_wait(ember_job_t *job, double timeout_s)
{
    if (!job->aborted)
        ember_tp_wait(job->tp, timeout_s);
    return job->aborted ? EMBER_ERR_CANCELED : EMBER_OK;
}

/* ---- waiting -------------------------------------------------------------- */

/* @future's wait; after an abort, up to @grace_s more for its answer. */
static ember_status_t wait_answer(ember_job_t *job, ember_future_t *future, int peer,
                                  const char *what, double grace_s, char *err, size_t err_length)
{
    ember_status_t status;
    double give_up = 0.0;
    while ((status = ember_future_test(future)) == EMBER_INPROGRESS) {
        if (job->aborted && give_up == 0.0)
            give_up = ember_time_now() + grace_s;
        if (job->aborted && ember_time_now() >= give_up)
            return ember_status_text(err, err_length, EMBER_ERR_CANCELED,
                                     "%s: the job was aborted: %s", what, job->abort_cause);
        ember_tp_wait(job->tp, job->aborted ? 0.01 : 0.2);
    }
    /* A failure that came after the abort: the abort is the cause. */
    if (status != EMBER_OK && grace_s > 0.0 && job->aborted)
        return ember_status_text(err, err_length, EMBER_ERR_CANCELED, "%s: the job was aborted: %s",
                                 what, job->abort_cause);
    if (status != EMBER_OK) {
        size_t length = 0;
        const char *text = ember_future_data(future, &length);
        if (status == EMBER_ERR_PEER_LOST || !text || !length)
            ember_status_text(
                    err, err_length, status, "%s on %s failed: %s%s%s", what,
                    ember_tp_peer_name(job->tp, peer), ember_status_string(status),
                    ember_tp_peer_lost(job->tp, peer) ? ": " : "",
                    ember_tp_peer_lost(job->tp, peer) ? ember_tp_peer_reason(job->tp, peer) : "");
        else
            ember_status_text(err, err_length, status, "%s on %s failed: %.*s", what,
                              ember_tp_peer_name(job->tp, peer), (int)(length > 400 ? 400 : length),
                              text);
    }
    return status;
}

ember_status_t api_wait(ember_job_t *job, ember_future_t *future, int peer, const char *what,
                        char *err, size_t err_length)
{
    return wait_answer(job, future, peer, what, 0.0, err, err_length);
}

ember_status_t api_call(ember_job_t *job, int peer, uint16_t op, const ember_iov_t *iov,
                        size_t iovcnt, void *out, size_t capacity, size_t *length_p,
                        double timeout_s, const char *what, char *err, size_t err_length)
{
    ember_future_t *future = NULL;
    const ember_rpc_param_t param = {.timeout_s = timeout_s};
    ember_status_t status =
            ember_rpc_call_async(job->tp, peer, op, iov, iovcnt, out, capacity, &param, &future);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "%s on %s: %s", what,
                                 ember_tp_peer_name(job->tp, peer), ember_status_string(status));
    status = api_wait(job, future, peer, what, err, err_length);
    if (status == EMBER_OK && length_p)
        ember_future_data(future, length_p);
    ember_future_release(future);
    return status;
}

/* ---- the handlers every rank or role has ---------------------------------- */

static void barrier_abort(ember_job_t *job);

static void on_abort(ember_rpc_req_t *req, void *arg)
{
    ember_job_t *job = arg;
    size_t length;
    const char *text = ember_rpc_req_data(req, &length);
    const int peer = ember_rpc_req_peer(req);
    if (!job->aborted) {
        snprintf(job->abort_cause, sizeof(job->abort_cause), "%s: %.*s",
                 ember_tp_peer_name(job->tp, peer), (int)(length > 250 ? 250 : length),
                 text ? text : "");
        ember_error("job", "%s: the job was aborted by %s", ember_tp_peer_name(job->tp, job->rank),
                    job->abort_cause);
    }
    job->aborted = 1;
    barrier_abort(job);
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* A PS: the coordinator leaves an aborted job and says why (the cause as
 * it heard it), so this PS stops on the abort, not on the coordinator's
 * loss, whichever word reached it first. */
static void on_aborted(ember_rpc_req_t *req, void *arg)
{
    ember_job_t *job = arg;
    size_t length;
    const char *text = ember_rpc_req_data(req, &length);
    if (!job->aborted) {
        snprintf(job->abort_cause, sizeof(job->abort_cause), "%.*s",
                 (int)(length > sizeof(job->abort_cause) - 1 ? sizeof(job->abort_cause) - 1
                                                             : length),
                 text ? text : "");
        ember_error("job", "%s: the job was aborted by %s", ember_tp_peer_name(job->tp, job->rank),
                    job->abort_cause);
    }
    job->aborted = 1;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* A PS: a client is done with the job. */
static void on_leave(ember_rpc_req_t *req, void *arg)
{
    ember_job_t *job = arg;
    const int peer = ember_rpc_req_peer(req);
    if (!api_is_client(job, peer)) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM, "%s is a PS: it does not leave a PS",
                              ember_tp_peer_name(job->tp, peer));
        return;
    }
    if (!job->left_by[peer]) {
        job->left_by[peer] = 1;
        job->left++;
    }
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* A PS: a client asks whether it serves; held until it does. */
static void on_ready(ember_rpc_req_t *req, void *arg)
{
    ember_job_t *job = arg;
    if (job->serving) {
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
        return;
    }
    if (job->served) {
        ember_rpc_reply_error(req, EMBER_ERR_SHUTDOWN, "%s has stopped serving",
                              ember_tp_peer_name(job->tp, job->rank));
        return;
    }
    if (!EMBER_RESERVE(job->ready_held, job->ready_capacity, job->ready_count + 1)) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    job->ready_held[job->ready_count++] = req;
}

void api_job_serving(ember_job_t *job, int serving)
{
    job->serving = serving;
    if (!serving)
        job->served = 1;
    for (size_t i = 0; i < job->ready_count; i++) {
        if (serving)
            ember_rpc_reply(job->ready_held[i], EMBER_OK, NULL, 0);
        else
            ember_rpc_reply_error(job->ready_held[i], EMBER_ERR_SHUTDOWN, "%s has stopped serving",
                                  ember_tp_peer_name(job->tp, job->rank));
    }
    job->ready_count = 0;
}

ember_status_t api_job_ps_poll(ember_job_t *job)
{
    if (job->aborted)
        return EMBER_ERR_CANCELED;
    /* First the coordinator: without it nobody stops this PS, and its loss
     * is the cause whatever the clients did after it. */
    if (ember_tp_peer_lost(job->tp, job->coordinator)) {
        ember_error("ps", "%s: the %s (rank %d) was lost: %s; stopping",
                    ember_tp_peer_name(job->tp, job->rank),
                    ember_tp_peer_name(job->tp, job->coordinator), job->coordinator,
                    ember_tp_peer_reason(job->tp, job->coordinator));
        return EMBER_ERR_PEER_LOST;
    }
    int gone = 0, lost = -1;
    for (int rank = 0; rank < api_clients(job); rank++) {
        if (job->left_by[rank])
            gone++;
        else if (ember_tp_peer_lost(job->tp, rank) && ++gone)
            lost = rank;
    }
    if (gone < api_clients(job))
        return EMBER_INPROGRESS;
    if (lost < 0)
        return EMBER_OK;
    ember_error("ps", "%s: every client is gone, %s (rank %d) without leaving: %s",
                ember_tp_peer_name(job->tp, job->rank), ember_tp_peer_name(job->tp, lost), lost,
                ember_tp_peer_reason(job->tp, lost));
    return EMBER_ERR_PEER_LOST;
}

ember_status_t api_ps_ready(ember_job_t *job, int p)
{
    char err[400];
    if (job->ps_ready[p])
        return EMBER_OK;
    const int rank = ember_job_ps_rank(job, p);
    ember_status_t status =
            api_call(job, rank, API_OP_READY, NULL, 0, NULL, 0, NULL, api_connect_timeout(),
                     "waiting for it to serve", err, sizeof(err));
    if (status == EMBER_ERR_TIMED_OUT)
        ember_error("job",
                    "%s: ps%d (rank %d) is not serving after %.0f s (EMBER_CONNECT_TIMEOUT): it "
                    "did not call ember_ps_serve",
                    ember_tp_peer_name(job->tp, job->rank), p, rank, api_connect_timeout());
    else if (status != EMBER_OK)
        ember_error("job", "%s: %s", ember_tp_peer_name(job->tp, job->rank), err);
    job->ps_ready[p] = status == EMBER_OK;
    return status;
}

/* ---- barriers of the clients ---------------------------------------------- */

/* The coordinator: barrier @b->gather ends: every client that arrived goes
 * on (OK), or is told why it failed; a failure is kept for the clients
 * still to come (the coordinator among them). */
static void barrier_release(ember_job_t *job, ember_status_t status, const char *why)
{
    api_barrier_t *b = job->barrier;
    if (status != EMBER_OK) {
        b->failed_seq = b->gather;
        b->failed_status = status;
        snprintf(b->failed_why, sizeof(b->failed_why), "%.*s", (int)sizeof(b->failed_why) - 1, why);
    }
    for (int rank = 0; rank < api_clients(job); rank++) {
        if (!b->held[rank])
            continue;
        if (status == EMBER_OK)
            ember_rpc_reply(b->held[rank], EMBER_OK, NULL, 0);
        else
            ember_rpc_reply_error(b->held[rank], status, "%s", why);
        b->held[rank] = NULL;
    }
}

/* The coordinator: @rank arrived at barrier @seq named @name.  OK when it
 * may wait for the others; an error (the text in @why) ends the barrier. */
static ember_status_t barrier_arrive(ember_job_t *job, int rank, uint64_t seq, const char *name,
                                     char *why, size_t why_length)
{
    api_barrier_t *b = job->barrier;
    if (seq != b->gather)
        return ember_status_text(why, why_length, EMBER_ERR_INVALID_PARAM,
                                 "barrier '%s': %s came to its barrier %llu while the others "
                                 "meet at their %llu",
                                 name, ember_tp_peer_name(job->tp, rank), (unsigned long long)seq,
                                 (unsigned long long)b->gather);
    for (int other = 0; other < api_clients(job); other++) {
        if (b->arrived[other] == seq && strcmp(b->names[other], name) != 0)
            return ember_status_text(why, why_length, EMBER_ERR_INVALID_PARAM,
                                     "barrier %llu: %s meets at '%s', %s at '%s'",
                                     (unsigned long long)seq, ember_tp_peer_name(job->tp, rank),
                                     name, ember_tp_peer_name(job->tp, other), b->names[other]);
    }
    b->arrived[rank] = seq;
    snprintf(b->names[rank], sizeof(b->names[rank]), "%s", name);
    return EMBER_OK;
}

/* The coordinator: the clients missing from barrier @seq, "trainer1 (rank 1), ...". */
static int barrier_missing(const ember_job_t *job, char *text, size_t length)
{
    const api_barrier_t *b = job->barrier;
    size_t used = 0;
    int count = 0;
    text[0] = '\0';
    for (int rank = 0; rank < api_clients(job); rank++) {
        if (b->arrived[rank] == b->gather)
            continue;
        if (used < length)
            used += (size_t)snprintf(text + used, length - used, "%s%s (rank %d)",
                                     count ? ", " : "", ember_tp_peer_name(job->tp, rank), rank);
        count++;
    }
    return count;
}

/* The coordinator: a client waits at the barrier being gathered. */
static int barrier_held(const ember_job_t *job)
{
    for (int rank = 0; rank < api_clients(job); rank++) {
        if (job->barrier->held[rank])
            return 1;
    }
    return 0;
}

/* The coordinator heard of an abort: the barrier being gathered fails for
 * the clients waiting at it (they wait for this verdict: ember_job_barrier)
 * and for those still to come. */
static void barrier_abort(ember_job_t *job)
{
    char why[400];
    if (job->rank != job->coordinator || !job->barrier || !barrier_held(job))
        return;
    snprintf(why, sizeof(why), "barrier %llu: the job was aborted: %s",
             (unsigned long long)job->barrier->gather, job->abort_cause);
    barrier_release(job, EMBER_ERR_CANCELED, why);
}

static void on_barrier(ember_rpc_req_t *req, void *arg)
{
    ember_job_t *job = arg;
    api_msg_barrier_t msg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    const int peer = ember_rpc_req_peer(req);
    char why[300], missing[200];
    if (length != sizeof(msg) || !api_is_client(job, peer)) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE, "a barrier of %zu bytes from %s", length,
                              ember_tp_peer_name(job->tp, peer));
        return;
    }
    memcpy(&msg, data, sizeof(msg));
    msg.name[sizeof(msg.name) - 1] = '\0';
    if (msg.seq == job->barrier->failed_seq) {
        ember_rpc_reply_error(req, job->barrier->failed_status, "%s", job->barrier->failed_why);
        return;
    }
    if (job->aborted) {
        ember_rpc_reply_error(req, EMBER_ERR_CANCELED, "barrier '%s': the job was aborted: %s",
                              msg.name, job->abort_cause);
        return;
    }
    if (job->leaving) {
        ember_rpc_reply_error(req, EMBER_ERR_SHUTDOWN, "barrier '%s': the coordinator left the job",
                              msg.name);
        return;
    }
    ember_status_t status = barrier_arrive(job, peer, msg.seq, msg.name, why, sizeof(why));
    if (status != EMBER_OK) {
        ember_error("job", "%s", why);
        ember_rpc_reply_error(req, status, "%s", why);
        barrier_release(job, status, why);
        return;
    }
    job->barrier->held[peer] = req;
    if (barrier_missing(job, missing, sizeof(missing)) == 0) {
        barrier_release(job, EMBER_OK, NULL);
        job->barrier->gather++;
    }
}

/* The coordinator's own barrier: wait for every client, then release them. */
static ember_status_t barrier_gather(ember_job_t *job, uint64_t seq, const char *name)
{
    char why[400], missing[300];
    api_barrier_t *b = job->barrier;
    if (b->failed_seq == seq) { /* the others' failed before it came */
        b->gather = seq + 1;
        ember_error("job", "%s", b->failed_why);
        return b->failed_status;
    }
    ember_status_t status = barrier_arrive(job, job->rank, seq, name, why, sizeof(why));
    if (status != EMBER_OK) {
        ember_error("job", "%s", why);
        barrier_release(job, status, why);
        return status;
    }
    const double deadline = ember_time_now() + api_connect_timeout();
    while (barrier_missing(job, missing, sizeof(missing)) > 0) {
        /* Completed by an arrival's handler: released, whatever came after
         * in the same wait (an abort fails the next barrier, not this). */
        if (b->gather != seq)
            return EMBER_OK;
        int lost = -1;
        for (int rank = 0; rank < api_clients(job) && lost < 0; rank++)
            lost = ember_tp_peer_lost(job->tp, rank) ? rank : -1;
        if (job->aborted)
            status = ember_status_text(why, sizeof(why), EMBER_ERR_CANCELED,
                                       "barrier '%s': the job was aborted: %s", name,
                                       job->abort_cause);
        else if (lost >= 0)
            status = ember_status_text(why, sizeof(why), EMBER_ERR_PEER_LOST,
                                       "barrier '%s': %s (rank %d) was lost: %s", name,
                                       ember_tp_peer_name(job->tp, lost), lost,
                                       ember_tp_peer_reason(job->tp, lost));
        else if (ember_time_now() > deadline)
            status = ember_status_text(why, sizeof(why), EMBER_ERR_TIMED_OUT,
                                       "barrier '%s': %s did not arrive within %.0f s "
                                       "(EMBER_CONNECT_TIMEOUT)",
                                       name, missing, api_connect_timeout());
        if (b->failed_seq == seq) /* an arrival's handler failed it */
            status = ember_status_text(why, sizeof(why), b->failed_status, "%s", b->failed_why);
        if (status != EMBER_OK) {
            ember_error("job", "%s", why);
            barrier_release(job, status, why);
            b->gather = seq + 1;
            return status;
        }
        ember_tp_wait(job->tp, 0.1);
    }
    barrier_release(job, EMBER_OK, NULL);
    b->gather++;
    ember_tp_progress(job->tp); /* the answers leave now, not at its next wait */
    return EMBER_OK;
}

ember_status_t ember_job_barrier(ember_job_t *job, const char *name)
{
    char err[400];
    if (!api_is_client(job, job->rank) || !name || strlen(name) >= EMBER_JOB_NAME_MAX) {
        ember_error("job", "%s: barrier '%s': %s", ember_tp_peer_name(job->tp, job->rank),
                    name ? name : "(null)",
                    api_is_client(job, job->rank) ? "a name of 1 to 31 bytes"
                                                  : "the PS do not meet at barriers");
        return EMBER_ERR_INVALID_PARAM;
    }
    const uint64_t seq = ++job->barriers;
    if (job->rank == job->coordinator)
        return barrier_gather(job, seq, name);
    api_msg_barrier_t msg = {.seq = seq};
    snprintf(msg.name, sizeof(msg.name), "%s", name);
    ember_iov_t iov = {&msg, sizeof(msg)};
    char what[64];
    snprintf(what, sizeof(what), "barrier '%s'", name);
    /* The coordinator names who is missing at its own deadline: a little
     * later here, so its answer says it. */
    ember_future_t *future = NULL;
    const ember_rpc_param_t param = {.timeout_s = api_connect_timeout() + 5.0};
    ember_status_t status = ember_rpc_call_async(job->tp, job->coordinator, API_OP_BARRIER, &iov, 1,
                                                 NULL, 0, &param, &future);
    if (status != EMBER_OK)
        ember_status_text(err, sizeof(err), status, "%s on %s: %s", what,
                          ember_tp_peer_name(job->tp, job->coordinator),
                          ember_status_string(status));
    /* The coordinator's verdict decides, even when this rank hears of an
     * abort first: a barrier it released before it heard of the abort
     * returns OK on every client (its answer may still be on its way when
     * the abort, from another rank, comes here). */
    if (status == EMBER_OK)
        status = wait_answer(job, future, job->coordinator, what, api_abort_grace(), err,
                             sizeof(err));
    ember_future_release(future);
    if (status != EMBER_OK)
        ember_error("job", "%s: %s", ember_tp_peer_name(job->tp, job->rank), err);
    return status;
}

/* ---- joining -------------------------------------------------------------- */

/* The launcher's rank and world, as the transport would take them. */
static void resolve_identity(const ember_job_params_t *params, int *rank_p, int *world_p)
{
    *rank_p = params->rank;
    *world_p = params->world_size;
    if (*rank_p < 0)
        *rank_p = ember_config_str("EMBER_RANK") ? (int)ember_config_int("EMBER_RANK")
                                                 : ember_slurm_int("SLURM_PROCID", -1);
    if (*world_p < 0)
        *world_p = ember_config_str("EMBER_WORLD_SIZE") ? (int)ember_config_int("EMBER_WORLD_SIZE")
                                                        : ember_slurm_int("SLURM_NTASKS", -1);
}

void ember_job_launch_rank(int *rank_p, int *world_size_p)
{
    ember_job_params_t params;
    ember_job_params_init(&params);
    resolve_identity(&params, rank_p, world_size_p);
}

/* What is wrong with the role @params states, or NULL. */
static const char *role_fault(const ember_job_params_t *params)
{
    const int role = params_role(params);
    if (params->trainers != EMBER_JOB_FROM_ROLES)
        return role == -1 ? NULL
                          : "a role is stated only with trainers = EMBER_JOB_FROM_ROLES (-1)";
    if (!params_have_role(params->abi))
        return "trainers EMBER_JOB_FROM_ROLES needs a program built against ABI 1.1 or later "
               "(its params carry no role)";
    if (params->num_ps != EMBER_JOB_FROM_ROLES)
        return "with trainers EMBER_JOB_FROM_ROLES, num_ps must be EMBER_JOB_FROM_ROLES (-1) too";
    if (role != EMBER_ROLE_TRAINER && role != EMBER_ROLE_PS && role != EMBER_ROLE_OTHER)
        return "the role is not an ember_role_t (trainer 0, ps 1, other 2)";
    return NULL;
}

static ember_status_t params_check(const ember_job_params_t *params, int rank, int world)
{
    const char *why = NULL;
    const int from_roles = params->trainers == EMBER_JOB_FROM_ROLES;
    if (!EMBER_ABI_COMPATIBLE(EMBER_ABI_VERSION, params->abi))
        why = "the program was built against an ember ABI this library does not provide "
              "(another major, or a newer minor): rebuild it against this ember";
    else if (role_fault(params))
        why = role_fault(params);
    else if (!from_roles && (params->trainers < 1 || params->num_ps < 0))
        why = "a job needs at least one trainer and one PS";
    else if (world <= 0 || rank < 0 || rank >= world)
        why = "no valid rank and world size: set EMBER_RANK and EMBER_WORLD_SIZE, run under "
              "ember-run or srun, or give them";
    else if (!from_roles && params->num_ps == EMBER_JOB_PS_REST && params->trainers >= world)
        why = "no rank is left for a PS (num_ps 0: every rank that is not a trainer)";
    else if (!from_roles && (int64_t)params->trainers + params->num_ps > world)
        why = "more trainers and PS than ranks";
    else if (params->name && (!*params->name || strlen(params->name) >= EMBER_JOB_NAME_MAX))
        why = "a name of 1 to 31 bytes";
    if (!why)
        return EMBER_OK;
    char stated[80];
    if (from_roles)
        snprintf(stated, sizeof(stated), "its role stated (%d) and num_ps %d", params_role(params),
                 params->num_ps);
    else
        snprintf(stated, sizeof(stated), "%d trainers and %d PS%s", params->trainers,
                 params->num_ps, params->num_ps == EMBER_JOB_PS_REST ? " (the rest)" : "");
    ember_error("job", "joining as rank %d of %d with %s (ABI %u.%u, the library's %u.%u): %s",
                rank, world, stated, (unsigned)EMBER_ABI_MAJOR(params->abi),
                (unsigned)EMBER_ABI_MINOR(params->abi), (unsigned)EMBER_ABI_VERSION_MAJOR,
                (unsigned)EMBER_ABI_VERSION_MINOR, why);
    return EMBER_ERR_INVALID_PARAM;
}

/* Every rank states the same T and P, or every rank its role: rank 0's
 * word, through the store (a rank that states T and P among ranks that
 * state roles is told so, not left waiting for a layout nobody sets). */
static ember_status_t layout_check(ember_job_t *job, int from_roles)
{
    char mine[64], *theirs = NULL;
    size_t length = 0;
    if (from_roles)
        snprintf(mine, sizeof(mine), "each rank's role");
    else
        snprintf(mine, sizeof(mine), "%d trainers %d ps", job->trainers, job->num_ps);
    if (job->rank == 0)
        return ember_tp_store_set(job->tp, "ember-job/layout", mine, strlen(mine));
    EMBER_CHECK(ember_tp_store_get(job->tp, "ember-job/layout", (void **)&theirs, &length));
    const int same = length == strlen(mine) && memcmp(theirs, mine, length) == 0;
    if (!same)
        ember_error("job", "%s joins with %s, %s with %.*s: every rank must state the same",
                    ember_tp_peer_name(job->tp, job->rank), mine, ember_tp_peer_name(job->tp, 0),
                    (int)(length > 60 ? 60 : length), theirs);
    free(theirs);
    return same ? EMBER_OK : EMBER_ERR_INVALID_PARAM;
}

static const char *role_word(int role)
{
    return role == EMBER_ROLE_TRAINER ? "trainer" : role == EMBER_ROLE_PS ? "ps" : "other";
}

/* T, P and what follows from them: the others, the coordinator. */
static void layout_set(ember_job_t *job, int trainers, int num_ps)
{
    job->trainers = trainers;
    job->num_ps = num_ps;
    job->others = job->world - trainers - num_ps;
    job->coordinator = job->others > 0 ? job->trainers : 0;
}

/* Rank 0: every rank's role ("0", "1" or "2" under ember-job/role/RANK)
 * into @roles ([world], the caller's), each checked. */
static ember_status_t roles_collect(ember_job_t *job, char *roles)
{
    for (int rank = 0; rank < job->world; rank++) {
        char key[48], *value = NULL;
        size_t length = 0;
        snprintf(key, sizeof(key), "ember-job/role/%d", rank);
        EMBER_CHECK(ember_tp_store_get(job->tp, key, (void **)&value, &length));
        const int valid = length == 1 && value[0] >= '0' && value[0] <= '2';
        if (valid)
            roles[rank] = value[0];
        else
            ember_error("job", "%s: %s (rank %d) put a role of %zu bytes that is no ember_role_t",
                        key, ember_tp_peer_name(job->tp, rank), rank, length);
        free(value);
        if (!valid)
            return EMBER_ERR_BAD_MESSAGE;
    }
    return EMBER_OK;
}

/* T and P from every rank's @roles ([world] digits), which must lie as
 * the layout does: trainers, others, PS. */
static ember_status_t roles_layout(ember_job_t *job, const char *roles)
{
    int trainers = 0, num_ps = 0;
    for (int rank = 0; rank < job->world; rank++) {
        trainers += roles[rank] == '0' + EMBER_ROLE_TRAINER;
        num_ps += roles[rank] == '0' + EMBER_ROLE_PS;
    }
    layout_set(job, trainers, num_ps);
    if (num_ps == job->world) {
        ember_error("job",
                    "every one of the %d ranks states the role ps: a job needs a rank that "
                    "is not a PS (a trainer or another) to drive it",
                    job->world);
        return EMBER_ERR_INVALID_PARAM;
    }
    for (int rank = 0; rank < job->world; rank++) {
        const int want = (int)ember_job_role(job, rank, NULL), got = roles[rank] - '0';
        if (got == want)
            continue;
        ember_error("job",
                    "rank %d (%s) states the role %s where the layout needs a %s: the "
                    "trainers must be ranks 0 .. T-1, then the others, the PS last (here %d "
                    "trainers, %d others, %d PS)",
                    rank, ember_tp_peer_name(job->tp, rank), role_word(got), role_word(want),
                    trainers, job->others, num_ps);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/* EMBER_JOB_FROM_ROLES: this rank's @role in the store; rank 0 gathers
 * every rank's and puts them under one key (each rank reads one key, not
 * N), so every rank derives the same T and P, or fails alike. */
static ember_status_t roles_exchange(ember_job_t *job, int role)
{
    char key[48], digit = (char)('0' + role), *roles = NULL;
    size_t length = (size_t)job->world;
    ember_status_t status;
    snprintf(key, sizeof(key), "ember-job/role/%d", job->rank);
    EMBER_CHECK(ember_tp_store_set(job->tp, key, &digit, 1));
    if (job->rank == 0) {
        if (!(roles = malloc((size_t)job->world)))
            return EMBER_ERR_NO_MEMORY;
        status = roles_collect(job, roles);
        if (status == EMBER_OK)
            status = ember_tp_store_set(job->tp, "ember-job/roles", roles, length);
    } else {
        status = ember_tp_store_get(job->tp, "ember-job/roles", (void **)&roles, &length);
        if (status == EMBER_OK && length != (size_t)job->world) {
            ember_error("job", "ember-job/roles: %zu roles from %s for a world of %d", length,
                        ember_tp_peer_name(job->tp, 0), job->world);
            status = EMBER_ERR_BAD_MESSAGE;
        }
    }
    if (status == EMBER_OK)
        status = roles_layout(job, roles);
    free(roles);
    return status;
}

/* Each role's handlers, registered before the ranks meet (so nothing
 * reaches a rank before it can answer); @on 0: removed. */
static void job_register(ember_job_t *job, int on)
{
    ember_tp_t *tp = job->tp;
    ember_rpc_register(tp, EMBER_OP_ABORT, on ? on_abort : NULL, on ? job : NULL);
    if (ember_job_role(job, job->rank, NULL) == EMBER_ROLE_PS) {
        ember_rpc_register(tp, API_OP_LEAVE, on ? on_leave : NULL, on ? job : NULL);
        ember_rpc_register(tp, API_OP_READY, on ? on_ready : NULL, on ? job : NULL);
        ember_rpc_register(tp, API_OP_ABORTED, on ? on_aborted : NULL, on ? job : NULL);
    }
    if (job->rank == job->coordinator) {
        ember_rpc_register(tp, API_OP_BARRIER, on ? on_barrier : NULL, on ? job : NULL);
        api_names_register(job, on);
    }
}

static ember_status_t job_alloc(ember_job_t *job)
{
    job->left_by = calloc((size_t)job->world, 1);
    job->ps_ready = calloc((size_t)job->num_ps + 1, 1); /* + 1: a job may have no PS */
    if (!job->left_by || !job->ps_ready)
        return EMBER_ERR_NO_MEMORY;
    if (job->rank != job->coordinator)
        return EMBER_OK;
    const size_t clients = (size_t)api_clients(job);
    if (!(job->barrier = calloc(1, sizeof(*job->barrier))) ||
        !(job->barrier->arrived = calloc(clients, sizeof(uint64_t))) ||
        !(job->barrier->held = calloc(clients, sizeof(ember_rpc_req_t *))) ||
        !(job->barrier->names = calloc(clients, sizeof(*job->barrier->names))))
        return EMBER_ERR_NO_MEMORY;
    job->barrier->gather = 1;
    return api_names_create(job);
}

static void job_free(ember_job_t *job)
{
    if (job->barrier) {
        free(job->barrier->arrived);
        free(job->barrier->held);
        free(job->barrier->names);
        free(job->barrier);
    }
    api_names_destroy(job);
    free(job->ready_held);
    free(job->left_by);
    free(job->ps_ready);
    free(job);
}

/* The name of a rank that states @role before the layout is known: its
 * role's when the rank alone gives it (a trainer's index is its rank). */
static void stated_role_name(int rank, int role, char *name, size_t length)
{
    if (role == EMBER_ROLE_TRAINER)
        snprintf(name, length, "trainer%d", rank);
    else
        snprintf(name, length, "%s-rank%d", role_word(role), rank);
}

/* The transport joined under this rank's name, bound when asked. */
static ember_status_t job_connect(ember_job_t *job, const ember_job_params_t *params)
{
    char name[EMBER_JOB_NAME_MAX];
    if (params->trainers == EMBER_JOB_FROM_ROLES)
        stated_role_name(job->rank, params_role(params), name, sizeof(name));
    else
        role_name(job->rank, job->trainers, job->num_ps, job->world, name, sizeof(name));
    ember_tp_params_t tp_params;
    ember_tp_params_init(&tp_params);
    tp_params.rank = job->rank;
    tp_params.world_size = job->world;
    tp_params.name = params->name ? params->name : name;
    tp_params.init_url = params->init_url;
    tp_params.secret = params->secret;
    tp_params.secret_length = params->secret_length;
    EMBER_CHECK(ember_tp_create(&tp_params, &job->tp));
    if (params->bind)
        EMBER_CHECK(ember_topo_bind_self(job->rank, job->world, stderr));
    return EMBER_OK;
}

ember_status_t ember_job_join(const ember_job_params_t *params, ember_job_t **job_p)
{
    int rank, world;
    EMBER_CHECK(ember_config_init());
    resolve_identity(params, &rank, &world);
    EMBER_CHECK(params_check(params, rank, world));
    ember_job_t *job = calloc(1, sizeof(*job));
    if (!job)
        return EMBER_ERR_NO_MEMORY;
    const int from_roles = params->trainers == EMBER_JOB_FROM_ROLES;
    *job = (ember_job_t){.rank = rank, .world = world};
    if (!from_roles)
        layout_set(job, params->trainers,
                   params->num_ps == EMBER_JOB_PS_REST ? world - params->trainers : params->num_ps);
    ember_topo_local_rank(rank, world, &job->local_rank, &job->local_size);
    /* With roles, the layout (and so the coordinator, the clients, the PS)
     * is known only once connected: nothing that depends on it before. */
    ember_status_t status = job_connect(job, params);
    if (status == EMBER_OK)
        status = layout_check(job, from_roles);
    if (status == EMBER_OK && from_roles)
        status = roles_exchange(job, params_role(params));
    if (status == EMBER_OK)
        status = job_alloc(job);
    if (status == EMBER_OK) {
        job_register(job, 1);
        status = ember_tp_barrier(job->tp, "ember-job");
    }
    /* The PS watch the coordinator (ember_ps_serve); the clients learn of
     * its loss from their calls to it. */
    if (status != EMBER_OK) {
        if (job->tp) {
            job_register(job, 0);
            ember_tp_set_failed(job->tp);
            ember_tp_destroy(job->tp);
        }
        job_free(job);
        return status;
    }
    *job_p = job;
    return EMBER_OK;
}

/* ---- leaving -------------------------------------------------------------- */

/* A client's orderly end: every PS told, at once, and their answers
 * awaited (bounded by the RPC timeout; a lost PS is past caring). */
static void tell_ps_left(ember_job_t *job)
{
    ember_future_t **futures = calloc((size_t)job->num_ps, sizeof(*futures));
    for (int p = 0; futures && p < job->num_ps; p++) {
        const int rank = ember_job_ps_rank(job, p);
        if (!ember_tp_peer_lost(job->tp, rank))
            ember_rpc_call_async(job->tp, rank, API_OP_LEAVE, NULL, 0, NULL, 0, NULL, &futures[p]);
    }
    for (int p = 0; futures && p < job->num_ps; p++) {
        if (!futures[p])
            continue;
        char err[300];
        if (api_wait(job, futures[p], ember_job_ps_rank(job, p), "leaving", err, sizeof(err)) !=
            EMBER_OK)
            ember_warn("job", "%s: %s", ember_tp_peer_name(job->tp, job->rank), err);
        ember_future_release(futures[p]);
    }
    free(futures);
}

/* The coordinator leaves a job another rank aborted: each live PS told
 * first (its answer awaited, a second at most), since a PS watches only
 * the coordinator and would otherwise take its exit for a loss. */
static void tell_ps_aborted(ember_job_t *job)
{
    ember_iov_t iov = {.buffer = job->abort_cause, .length = strlen(job->abort_cause)};
    ember_future_t **futures = calloc((size_t)job->num_ps, sizeof(*futures));
    for (int p = 0; futures && p < job->num_ps; p++) {
        const int rank = ember_job_ps_rank(job, p);
        if (!ember_tp_peer_lost(job->tp, rank))
            ember_rpc_call_async(job->tp, rank, API_OP_ABORTED, &iov, 1, NULL, 0,
                                 &(ember_rpc_param_t){.timeout_s = 1.0}, &futures[p]);
    }
    for (int p = 0; futures && p < job->num_ps; p++) {
        if (!futures[p])
            continue;
        ember_future_wait(futures[p]);
        ember_future_release(futures[p]);
    }
    free(futures);
    job->abort_told = 1;
}

void ember_job_leave(ember_job_t *job, ember_status_t outcome)
{
    if (!job)
        return;
    if (outcome == EMBER_OK && job->aborted)
        outcome = EMBER_ERR_CANCELED;
    if (outcome == EMBER_OK && api_is_client(job, job->rank))
        tell_ps_left(job);
    if (job->aborted && !job->abort_told && job->rank == job->coordinator)
        tell_ps_aborted(job);
    /* The handlers stay through the transport's end (its final barrier
     * progresses it): a client's barrier or table request that comes late
     * is answered, not met by "no handler". */
    job->leaving = 1;
    if (job->barrier && barrier_held(job))
        barrier_release(job, EMBER_ERR_SHUTDOWN, "the coordinator left the job");
    api_job_serving(job, 0);
    api_names_close(job);
    if (outcome != EMBER_OK)
        ember_tp_set_failed(job->tp);
    ember_tp_destroy(job->tp);
    job_free(job);
}

void ember_job_abort(ember_job_t *job, const char *cause)
{
    if (!job)
        return;
    const char *text = cause ? cause : "(no cause given)";
    ember_iov_t iov = {.buffer = text, .length = strnlen(text, 250)};
    ember_future_t **futures = calloc((size_t)job->world, sizeof(*futures));
    ember_error("job", "%s aborts the job: %s", ember_tp_peer_name(job->tp, job->rank), text);
    if (!job->aborted) {
        snprintf(job->abort_cause, sizeof(job->abort_cause), "%s: %.250s",
                 ember_tp_peer_name(job->tp, job->rank), text);
        job->aborted = 1;
    }
    job->abort_told = 1; /* every rank is told here */
    barrier_abort(job);  /* a coordinator's clients at a barrier: told why */
    for (int rank = 0; futures && rank < job->world; rank++) {
        if (rank == job->rank || ember_tp_peer_lost(job->tp, rank))
            continue;
        /* A live rank answers at once; a hung one must not hold the end up. */
        ember_rpc_call_async(job->tp, rank, EMBER_OP_ABORT, &iov, 1, NULL, 0,
                             &(ember_rpc_param_t){.timeout_s = 1.0}, &futures[rank]);
    }
    for (int rank = 0; futures && rank < job->world; rank++) {
        if (!futures[rank])
            continue;
        ember_future_wait(futures[rank]);
        ember_future_release(futures[rank]);
    }
    free(futures);
    ember_job_leave(job, EMBER_ERR_CANCELED);
}
