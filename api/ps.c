/*
 * api/ps: a rank serving as a parameter server (include/ember/ps.h), the
 * engine's PS (engine/ps/ps.c) run inside the job: no barrier of its own,
 * the coordinator watched, and ended when every client has left the job,
 * on an abort, or on the coordinator's loss.
 */
#include "api/api.h"

#include "common/ckpt_signal.h"
#include "common/workers.h"
#include "engine/ps/ps.h"
#include "engine/wire/protocol.h"

#include <ember/log.h>
#include <ember/ps.h>

#include <string.h>

_Static_assert(EMBER_PS_THREADS_MAX == EMBER_WORKERS_MAX,
               "a PS's threads are its worker pool's (common/workers.h)");

void ember_ps_options_init(ember_ps_options_t *options)
{
    *options = (ember_ps_options_t){.threads = 0, .local_rank = -1};
}

static ember_status_t ps_poll(void *arg)
{
    return api_job_ps_poll(arg);
}

static void ps_serving(void *arg)
{
    api_job_serving(arg, 1);
}

ember_status_t ember_ps_serve(ember_job_t *job, const ember_ps_options_t *options)
{
    ember_ps_options_t defaults;
    if (!options) {
        ember_ps_options_init(&defaults);
        options = &defaults;
    }
    if (ember_job_role(job, job->rank, NULL) != EMBER_ROLE_PS || job->served) {
        ember_error("ps", "%s: ember_ps_serve %s", ember_tp_peer_name(job->tp, job->rank),
                    job->served ? "was called before: a PS serves once"
                                : "on a rank that is not a PS");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (options->signals)
        ember_ckpt_signal_install();
    const ember_ps_hooks_t hooks = {
            .coordinator = job->coordinator, .poll = ps_poll, .serving = ps_serving, .arg = job};
    const ember_ps_run_options_t run = {.local_rank = options->local_rank >= 0 ? options->local_rank
                                                                               : job->local_rank,
                                        .threads = options->threads,
                                        .hooks = &hooks};
    /* Clients that asked whether it serves are answered once its handlers
     * are in (ps_serving). */
    ember_status_t status = ember_ps_run(job->tp, &run);
    api_job_serving(job, 0);
    if (status == EMBER_ERR_CANCELED && job->aborted)
        ember_error("ps", "%s: stopped: the job was aborted by %s",
                    ember_tp_peer_name(job->tp, job->rank), job->abort_cause);
    return status;
}

ember_status_t ember_ps_stats(ember_job_t *job, int p, ember_ps_stats_t *stats_p)
{
    ember_msg_ps_stats_t msg;
    size_t length = 0;
    char err[400];
    if (p < 0 || p >= job->num_ps || !api_is_client(job, job->rank)) {
        ember_error("ps", "%s: stats of ps %d of %d%s", ember_tp_peer_name(job->tp, job->rank), p,
                    job->num_ps, api_is_client(job, job->rank) ? "" : ", asked by a PS");
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(api_ps_ready(job, p));
    ember_status_t status = api_call(job, ember_job_ps_rank(job, p), EMBER_OP_PS_STATS, NULL, 0,
                                     &msg, sizeof(msg), &length, 0, "stats", err, sizeof(err));
    if (status == EMBER_OK && length != sizeof(msg))
        status = ember_status_text(err, sizeof(err), EMBER_ERR_BAD_MESSAGE,
                                   "stats of ps%d: %zu bytes, not %zu", p, length, sizeof(msg));
    if (status != EMBER_OK) {
        ember_error("ps", "%s: %s", ember_tp_peer_name(job->tp, job->rank), err);
        return status;
    }
    *stats_p = (ember_ps_stats_t){.table_bytes = msg.table_bytes,
                                  .optimizer_bytes = msg.optimizer_bytes,
                                  .other_bytes = msg.other_bytes,
                                  .rss_bytes = msg.rss_bytes,
                                  .lookups = msg.lookups,
                                  .grads = msg.grads,
                                  .steps_applied = msg.steps_applied,
                                  .lookup_seconds = msg.lookup_seconds,
                                  .grad_seconds = msg.grad_seconds,
                                  .lookup_compute_seconds = msg.lookup_compute_seconds,
                                  .threads = msg.threads};
    return EMBER_OK;
}
