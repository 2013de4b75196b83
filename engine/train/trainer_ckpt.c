/* engine/train/trainer_ckpt: when a trainer checkpoints (trainer_ckpt.h). */
#include "engine/train/trainer_ckpt.h"

#include "common/ckpt_signal.h"
#include "engine/io/checkpoint.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPORTS_MAX 4

struct ember_trainer_ckpt {
    ember_tp_t *tp;
    const ember_msg_train_start_t *spec;
    const int *aborted;
    int leader;                     /* trainer0 */
    ember_ckpt_schedule_t schedule; /* the plan's steps and CKPT_AT's */
    int requested, request_stop;    /* trainer0: a signal's, here or elsewhere */
    ember_msg_ckpt_done_t reports[REPORTS_MAX];
    ember_future_t *futures[REPORTS_MAX];
};

static void on_ckpt_at(ember_rpc_req_t *req, void *arg)
{
    ember_trainer_ckpt_t *ckpt = arg;
    ember_msg_ckpt_at_t at;
    char err[128];
    ember_status_t status = ember_wire_ckpt_at_take(req, &at, err, sizeof(err));
    if (status == EMBER_OK &&
        ember_ckpt_schedule_ask(&ckpt->schedule, at.step, (int)at.stop) != EMBER_OK)
        status = ember_status_text(err, sizeof(err), EMBER_ERR_OUT_OF_RANGE,
                                   "too many checkpoints asked for");
    if (status != EMBER_OK)
        ember_rpc_reply_error(req, status, "%s", err);
    else
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_ckpt_request(ember_rpc_req_t *req, void *arg)
{
    ember_trainer_ckpt_t *ckpt = arg;
    ember_msg_ckpt_request_t request;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[128];
    if (ember_wire_ckpt_request_unpack(data, length, &request, err, sizeof(err)) != EMBER_OK) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM, "%s", err);
        return;
    }
    ckpt->requested = 1;
    ckpt->request_stop |= (int)request.stop;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void ckpt_register(ember_trainer_ckpt_t *ckpt, int on)
{
    ember_rpc_register(ckpt->tp, EMBER_OP_CKPT_AT, on ? on_ckpt_at : NULL, on ? ckpt : NULL);
    if (ckpt->leader)
        ember_rpc_register(ckpt->tp, EMBER_OP_CKPT_REQUEST, on ? on_ckpt_request : NULL,
                           on ? ckpt : NULL);
}

ember_status_t ember_trainer_ckpt_create(ember_tp_t *tp, const ember_msg_train_start_t *spec,
                                         const int *aborted, ember_trainer_ckpt_t **ckpt_p)
{
    *ckpt_p = NULL;
    if (!spec->checkpoints.root[0])
        return EMBER_OK;
    ember_trainer_ckpt_t *ckpt = calloc(1, sizeof(*ckpt));
    if (!ckpt)
        return EMBER_ERR_NO_MEMORY;
    *ckpt = (ember_trainer_ckpt_t){
            .tp = tp, .spec = spec, .aborted = aborted, .leader = spec->trainer == 0};
    ember_ckpt_schedule_init(&ckpt->schedule, spec->checkpoints.every);
    ckpt_register(ckpt, 1);
    *ckpt_p = ckpt;
    return EMBER_OK;
}

/* Until report @i's call has ended (or the job is aborted). */
static void report_wait(ember_trainer_ckpt_t *ckpt, size_t i)
{
    if (!ckpt->futures[i])
        return;
    while (ember_future_test(ckpt->futures[i]) == EMBER_INPROGRESS && !*ckpt->aborted)
        ember_tp_wait(ckpt->tp, 0.05);
    ember_future_release(ckpt->futures[i]);
    ckpt->futures[i] = NULL;
}

void ember_trainer_ckpt_destroy(ember_trainer_ckpt_t *ckpt)
{
    if (!ckpt)
        return;
    for (size_t i = 0; i < REPORTS_MAX; i++)
        report_wait(ckpt, i);
    ckpt_register(ckpt, 0);
    free(ckpt);
}

/* trainer0: everyone else hears of step @step (and answers) before any
 * goes on. */
static ember_status_t announce(ember_trainer_ckpt_t *ckpt, uint64_t step, uint32_t stop, char *err,
                               size_t err_length)
{
    const int world = ember_tp_world_size(ckpt->tp);
    ember_msg_ckpt_at_t at = {.step = step, .stop = stop};
    ember_iov_t iov = {&at, sizeof(at)};
    ember_future_t **futures = calloc((size_t)world, sizeof(*futures));
    ember_status_t status = futures ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    for (int rank = 1; status == EMBER_OK && rank < world; rank++)
        status = ember_rpc_call_async(ckpt->tp, rank, EMBER_OP_CKPT_AT, &iov, 1, NULL, 0, NULL,
                                      &futures[rank]);
    for (int rank = 1; futures && rank < world; rank++) {
        if (!futures[rank])
            continue;
        ember_status_t got = ember_future_wait(futures[rank]);
        if (got != EMBER_OK && status == EMBER_OK)
            status = ember_status_text(err, err_length, got,
                                       "the checkpoint after step %llu: %s did not take it: %s",
                                       (unsigned long long)step, ember_tp_peer_name(ckpt->tp, rank),
                                       ember_status_string(got));
        ember_future_release(futures[rank]);
    }
    free(futures);
    if (status == EMBER_OK)
        status = ember_ckpt_schedule_ask(&ckpt->schedule, step, (int)stop);
    return status;
}

/* A signal here goes to trainer0 (or is trainer0's own request). */
static void take_signal(ember_trainer_ckpt_t *ckpt)
{
    int what = ember_ckpt_signal_take();
    if (what == EMBER_CKPT_SIGNAL_NONE)
        return;
    if (ckpt->leader) {
        ckpt->requested = 1;
        ckpt->request_stop |= what == EMBER_CKPT_SIGNAL_STOP;
        return;
    }
    ember_wire_ckpt_request_send(ckpt->tp, what == EMBER_CKPT_SIGNAL_STOP);
}

ember_status_t ember_trainer_ckpt_before(ember_trainer_ckpt_t *ckpt, uint64_t step, int last,
                                         char *err, size_t err_length)
{
    if (!ckpt)
        return EMBER_OK;
    take_signal(ckpt);
    if (!ckpt->leader)
        return EMBER_OK;
    const uint64_t k = step + 1;
    const int wanted = ckpt->requested || (last && !ember_trainer_ckpt_due(ckpt, k));
    if (!wanted)
        return EMBER_OK;
    const uint32_t stop = (uint32_t)ckpt->request_stop;
    ckpt->requested = ckpt->request_stop = 0;
    if (stop || !last)
        ember_info("trainer", "trainer 0: a signal asked for a checkpoint%s: after step %llu",
                   stop ? " and a stop" : "", (unsigned long long)k);
    return announce(ckpt, k, stop, err, err_length);
}

int ember_trainer_ckpt_due(const ember_trainer_ckpt_t *ckpt, uint64_t steps)
{
    return ckpt && ember_ckpt_schedule_due(&ckpt->schedule, steps);
}

int ember_trainer_ckpt_stops(const ember_trainer_ckpt_t *ckpt, uint64_t steps)
{
    return ckpt && ember_ckpt_schedule_stops(&ckpt->schedule, steps);
}

/* The report to the master, in a free slot. */
static ember_status_t report(ember_trainer_ckpt_t *ckpt, const ember_msg_ckpt_done_t *done)
{
    size_t i = 0;
    while (i < REPORTS_MAX && ckpt->futures[i] &&
           ember_future_test(ckpt->futures[i]) == EMBER_INPROGRESS)
        i++;
    if (i == REPORTS_MAX)
        i = 0; /* all in flight: wait for the oldest slot */
    report_wait(ckpt, i);
    ckpt->reports[i] = *done;
    ember_iov_t iov = {&ckpt->reports[i], sizeof(*done)};
    return ember_rpc_call_async(ckpt->tp, (int)ckpt->spec->master_rank, EMBER_OP_CKPT_DONE, &iov, 1,
                                NULL, 0, NULL, &ckpt->futures[i]);
}

ember_status_t ember_trainer_ckpt_write(ember_trainer_ckpt_t *ckpt,
                                        const ember_ckpt_trainer_state_t *state, char *err,
                                        size_t err_length)
{
    char dir[EMBER_PATH_MAX + 32];
    ember_msg_ckpt_done_t done;
    const uint64_t steps = state->progress.steps;
    EMBER_CHECK(ember_ckpt_step_dir(ckpt->spec->checkpoints.root, steps, dir, sizeof(dir), err,
                                    err_length));
    ember_status_t status = ember_ckpt_trainer_write(dir, ckpt->spec, state, &done);
    ember_ckpt_schedule_taken(&ckpt->schedule, steps);
    if (status != EMBER_OK)
        ember_error("trainer", "trainer %u: checkpoint after step %llu: %s", ckpt->spec->trainer,
                    (unsigned long long)steps, done.text);
    ember_status_t sent = report(ckpt, &done);
    if (status == EMBER_OK && sent != EMBER_OK)
        status = ember_status_text(err, err_length, sent, "the checkpoint's report: %s",
                                   ember_status_string(sent));
    else if (status != EMBER_OK)
        ember_status_text(err, err_length, status, "checkpoint after step %llu: %s",
                          (unsigned long long)steps, done.text);
    return status;
}

ember_status_t ember_trainer_ckpt_resume(const ember_msg_train_start_t *spec,
                                         ember_opt_t *const *opts, size_t nopts,
                                         ember_ckpt_progress_t *progress, float *losses, char *err,
                                         size_t err_length)
{
    ember_ckpt_trainer_file_t file;
    EMBER_CHECK(
            ember_ckpt_trainer_open(spec->resume_dir, spec->resume_from, &file, err, err_length));
    ember_status_t status = EMBER_OK;
    if (file.progress.steps != spec->start_step)
        status = ember_status_text(
                err, err_length, EMBER_ERR_FORMAT, "%s: taken after step %llu, not %llu", file.path,
                (unsigned long long)file.progress.steps, (unsigned long long)spec->start_step);
    if (status == EMBER_OK)
        status = ember_ckpt_trainer_optimizers(&file, opts, nopts, err, err_length);
    if (status == EMBER_OK && losses)
        status = ember_ckpt_trainer_losses(&file, losses, err, err_length);
    *progress = file.progress;
    ember_ckpt_trainer_close(&file);
    return status;
}
