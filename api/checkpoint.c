/*
 * api/checkpoint: the job's checkpoints (include/ember/checkpoint.h), over
 * the engine's: the PS's snapshots and files (engine/ps/ps_ckpt.c, told the
 * plan by CKPT_PLAN), the directories, manifests and schedule
 * (engine/io/checkpoint.h), the CKPT_AT / CKPT_REQUEST / CKPT_DONE messages
 * ember-train's ranks exchange (engine/wire), with the trainers' files the
 * caller's tensors.
 *
 * Roles: trainer 0 (rank 0) names the requested steps and takes the
 * others' signals; every trainer writes its file and reports it to the
 * coordinator; the coordinator collects the reports of each checkpoint and
 * writes its manifest last, then prunes.  The coordinator may be trainer 0
 * itself: its own report then goes straight in.
 */
#include "api/api.h"

#include "common/ckpt_signal.h"
#include "common/clock.h"
#include "engine/io/checkpoint.h"
#include "engine/ops/half.h"
#include "engine/wire/codec.h"
#include "engine/wire/protocol.h"

#include <ember/checkpoint.h>
#include <ember/log.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT      "ember-trainer-checkpoint-2"
#define FORMAT_1    "ember-trainer-checkpoint-1"
#define REPORTS_MAX 4
#define PENDING_MAX 8
#define EVENTS_MAX  16
#define LINES_MAX   64

/* One checkpoint whose reports are coming in (the coordinator's). */
typedef struct {
    uint64_t step; /* 0: a free slot */
    ember_ckpt_manifest_t manifest;
    uint32_t reports;
    uint8_t *reported; /* [world] */
    int failed;
    uint64_t bytes;
    double copy_s, wait_s, write_s, first_at;
    char failure[300];
} pending_t;

struct ember_checkpoint {
    ember_job_t *job;
    char root[EMBER_CHECKPOINT_PATH_MAX];
    uint64_t every, start_step;
    uint32_t keep;
    int writes, signals;
    int trainer; /* this rank's trainer index, or -1 */
    int leader;  /* trainer 0: names the steps */
    int coordinator;
    ember_ckpt_schedule_t schedule;
    int requested, request_stop; /* the leader: a signal's, here or elsewhere */
    uint64_t stop_step;
    uint64_t checked; /* a trainer: the most steps it asked due() of */
    /* a trainer's reports in flight */
    ember_msg_ckpt_done_t reports[REPORTS_MAX];
    ember_future_t *futures[REPORTS_MAX];
    /* the coordinator's */
    char (*keys)[EMBER_CKPT_KEY_MAX];
    char (*values)[EMBER_CKPT_VALUE_MAX];
    size_t nlines;
    uint8_t *holding; /* [num_ps]: owes a file to each checkpoint */
    uint32_t expected;
    pending_t pending[PENDING_MAX];
    uint64_t last_complete, last_failed;
    char last_failure[300];
    ember_checkpoint_event_t events[EVENTS_MAX];
    size_t event_first, nevents;
};

void ember_checkpoint_config_init(ember_checkpoint_config_t *config)
{
    *config = (ember_checkpoint_config_t){.keep = 1};
}

static const char *me(const ember_checkpoint_t *ckpt)
{
    return ember_tp_peer_name(ckpt->job->tp, ckpt->job->rank);
}

/* ---- the coordinator: reports, manifests ------------------------------------ */

/* A rank that owes a file to each checkpoint: a trainer, or a PS holding tables. */
static int owes_report(const ember_checkpoint_t *ckpt, int rank)
{
    int index;
    ember_role_t role = ember_job_role(ckpt->job, rank, &index);
    return role == EMBER_ROLE_TRAINER || (role == EMBER_ROLE_PS && ckpt->holding[index]);
}

/* The checkpoint of @step while it collects reports, or NULL. */
static const pending_t *pending_find(const ember_checkpoint_t *ckpt, uint64_t step)
{
    for (size_t i = 0; step && i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step == step)
            return &ckpt->pending[i];
    }
    return NULL;
}

/* The step of the oldest checkpoint collecting reports; 0 when none. */
static uint64_t oldest_pending(const ember_checkpoint_t *ckpt)
{
    uint64_t oldest = 0;
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step && (!oldest || ckpt->pending[i].step < oldest))
            oldest = ckpt->pending[i].step;
    }
    return oldest;
}

/* The checkpoint of @step, a free slot taken for it when it has none. */
static pending_t *pending_of(ember_checkpoint_t *ckpt, uint64_t step)
{
    pending_t *free_slot = NULL;
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step == step)
            return &ckpt->pending[i];
        if (!ckpt->pending[i].step && !free_slot)
            free_slot = &ckpt->pending[i];
    }
    if (free_slot) {
        uint8_t *reported = calloc((size_t)ckpt->job->world, 1);
        if (!reported)
            return NULL;
        *free_slot = (pending_t){.step = step, .first_at = ember_time_now(), .reported = reported};
        ember_ckpt_manifest_init(&free_slot->manifest, step);
    }
    return free_slot;
}

static void pending_release(pending_t *p)
{
    ember_ckpt_manifest_free(&p->manifest);
    free(p->reported);
    *p = (pending_t){0};
}

static void event_push(ember_checkpoint_t *ckpt, const pending_t *p, const char *dir, int failed)
{
    if (ckpt->nevents == EVENTS_MAX) { /* nobody polls: the oldest goes */
        ckpt->event_first = (ckpt->event_first + 1) % EVENTS_MAX;
        ckpt->nevents--;
    }
    ember_checkpoint_event_t *e = &ckpt->events[(ckpt->event_first + ckpt->nevents++) % EVENTS_MAX];
    *e = (ember_checkpoint_event_t){.step = p->step,
                                    .failed = failed,
                                    .bytes = p->bytes,
                                    .files = p->manifest.nfiles,
                                    .copy_seconds = p->copy_s,
                                    .wait_seconds = p->wait_s,
                                    .write_seconds = p->write_s,
                                    .complete_seconds = ember_time_now() - p->first_at};
    snprintf(e->dir, sizeof(e->dir), "%s", dir);
    snprintf(e->text, sizeof(e->text), "%s", failed ? p->failure : "");
}

/* The manifest's lines: the library's, then the caller's. */
static void describe(const ember_checkpoint_t *ckpt, ember_ckpt_manifest_t *m)
{
    char text[32];
    snprintf(text, sizeof(text), "%d", ckpt->job->trainers);
    ember_ckpt_manifest_set(m, "trainers", text);
    snprintf(text, sizeof(text), "%d", ckpt->job->num_ps);
    ember_ckpt_manifest_set(m, "ps", text);
    for (size_t i = 0; i < ckpt->nlines; i++)
        ember_ckpt_manifest_set(m, ckpt->keys[i], ckpt->values[i]);
}

/* Every report is in: the manifest (last), then the older ones pruned. */
static void complete(ember_checkpoint_t *ckpt, pending_t *p)
{
    char dir[EMBER_CHECKPOINT_PATH_MAX + 32], err[400];
    ember_status_t status = ember_ckpt_dir_name(ckpt->root, p->step, dir, sizeof(dir));
    if (status == EMBER_OK && !p->failed) {
        describe(ckpt, &p->manifest);
        status = ember_ckpt_manifest_write(dir, &p->manifest, err, sizeof(err));
        if (status != EMBER_OK)
            snprintf(p->failure, sizeof(p->failure), "%.290s", err);
    }
    if (p->failed || status != EMBER_OK) {
        ember_error("checkpoint", "the checkpoint after step %llu failed (no manifest written): %s",
                    (unsigned long long)p->step, p->failure);
        if (p->step > ckpt->last_failed)
            ckpt->last_failed = p->step;
        snprintf(ckpt->last_failure, sizeof(ckpt->last_failure), "%s", p->failure);
        event_push(ckpt, p, dir, 1);
    } else {
        /* The coordinator's event (ember_checkpoint_poll) says it, in the
         * application's words: ember-train prints its own line. */
        ember_debug("checkpoint", "the checkpoint after step %llu: %s, %.1f MiB in %zu files",
                    (unsigned long long)p->step, dir, p->bytes / 1048576.0, p->manifest.nfiles);
        if (p->step > ckpt->last_complete) /* one may end before an older one */
            ckpt->last_complete = p->step;
        event_push(ckpt, p, dir, 0);
        /* Pruning removes unfinished directories older than the newest
         * complete one: not while an older checkpoint still collects. */
        const uint64_t oldest = oldest_pending(ckpt); /* p's own at least */
        if (oldest == p->step &&
            ember_ckpt_prune(ckpt->root, ckpt->keep, err, sizeof(err)) != EMBER_OK)
            ember_warn("checkpoint", "pruning old checkpoints: %s", err);
    }
    pending_release(p);
}

static void take_report(ember_checkpoint_t *ckpt, pending_t *p, const ember_msg_ckpt_done_t *d,
                        int rank)
{
    if (d->status != EMBER_OK && !p->failed) {
        p->failed = 1;
        snprintf(p->failure, sizeof(p->failure), "%s: %s", ember_tp_peer_name(ckpt->job->tp, rank),
                 d->text);
    } else if (d->status == EMBER_OK &&
               ember_ckpt_manifest_add_file(&p->manifest, d->name, d->bytes, d->crc32c) !=
                       EMBER_OK &&
               !p->failed) {
        p->failed = 1;
        snprintf(p->failure, sizeof(p->failure), "%s reported %s twice",
                 ember_tp_peer_name(ckpt->job->tp, rank), d->name);
    }
    p->bytes += d->bytes;
    p->copy_s = d->copy_seconds > p->copy_s ? d->copy_seconds : p->copy_s;
    p->wait_s = d->wait_seconds > p->wait_s ? d->wait_seconds : p->wait_s;
    p->write_s = d->write_seconds > p->write_s ? d->write_seconds : p->write_s;
    p->reported[rank] = 1;
    if (++p->reports == ckpt->expected)
        complete(ckpt, p);
}

/* A report from @rank checked and taken; the refusal's text in @err. */
static ember_status_t report_take(ember_checkpoint_t *ckpt, int rank,
                                  const ember_msg_ckpt_done_t *done, char *err, size_t err_length)
{
    pending_t *p = NULL;
    /* A checkpoint older than the last complete one may still collect. */
    if (!pending_find(ckpt, done->step) && done->step <= ckpt->last_complete)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a report of step %llu, not after the last complete one",
                                 (unsigned long long)done->step);
    if (!owes_report(ckpt, rank))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a report from a rank that writes no checkpoint file");
    if (!(p = pending_of(ckpt, done->step)))
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                 "too many checkpoints in progress");
    if (p->reported[rank])
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a second report of step %llu", (unsigned long long)done->step);
    take_report(ckpt, p, done, rank);
    return EMBER_OK;
}

static void on_ckpt_done(ember_rpc_req_t *req, void *arg)
{
    ember_checkpoint_t *ckpt = arg;
    ember_msg_ckpt_done_t done;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    const int peer = ember_rpc_req_peer(req);
    char err[200];
    ember_status_t status = ember_wire_ckpt_done_unpack(data, length, &done, err, sizeof(err));
    if (status == EMBER_OK) {
        /* Answered first: the manifest's write must not hold the writer. */
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
        status = report_take(ckpt, peer, &done, err, sizeof(err));
        if (status != EMBER_OK)
            ember_warn("checkpoint", "a checkpoint report from %s refused: %s",
                       ember_tp_peer_name(ckpt->job->tp, peer), err);
        return;
    }
    ember_warn("checkpoint", "a checkpoint report from %s refused: %s",
               ember_tp_peer_name(ckpt->job->tp, peer), err);
    ember_rpc_reply_error(req, status, "%s", err);
}

/* ---- trainer 0 and everyone: which steps ----------------------------------- */

static void on_ckpt_at(ember_rpc_req_t *req, void *arg)
{
    ember_checkpoint_t *ckpt = arg;
    ember_msg_ckpt_at_t at;
    char err[128];
    ember_status_t status = ember_wire_ckpt_at_take(req, &at, err, sizeof(err));
    /* A trainer that asked whether K is due has passed it: too late (the
     * trainers did not meet that step, as an allreduce makes them). */
    if (status == EMBER_OK && at.step <= ckpt->checked &&
        !ember_ckpt_schedule_due(&ckpt->schedule, at.step))
        status = ember_status_text(err, sizeof(err), EMBER_ERR_INVALID_PARAM,
                                   "%s is past the checkpoint after step %llu (after %llu steps): "
                                   "the trainers must meet every step for one on request",
                                   me(ckpt), (unsigned long long)at.step,
                                   (unsigned long long)ckpt->checked);
    if (status == EMBER_OK &&
        ember_ckpt_schedule_ask(&ckpt->schedule, at.step, (int)at.stop) != EMBER_OK)
        status = ember_status_text(err, sizeof(err), EMBER_ERR_OUT_OF_RANGE,
                                   "too many checkpoints asked for");
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    if (at.stop && (!ckpt->stop_step || at.step < ckpt->stop_step))
        ckpt->stop_step = at.step;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_ckpt_request(ember_rpc_req_t *req, void *arg)
{
    ember_checkpoint_t *ckpt = arg;
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

static void ckpt_register(ember_checkpoint_t *ckpt, int on)
{
    ember_tp_t *tp = ckpt->job->tp;
    if (!ckpt->writes)
        return;
    if (ckpt->leader)
        ember_rpc_register(tp, EMBER_OP_CKPT_REQUEST, on ? on_ckpt_request : NULL,
                           on ? ckpt : NULL);
    else
        ember_rpc_register(tp, EMBER_OP_CKPT_AT, on ? on_ckpt_at : NULL, on ? ckpt : NULL);
    if (ckpt->coordinator)
        ember_rpc_register(tp, EMBER_OP_CKPT_DONE, on ? on_ckpt_done : NULL, on ? ckpt : NULL);
}

/* A signal here: trainer 0's own request, or sent to it. */
static void take_signal(ember_checkpoint_t *ckpt)
{
    int what = ckpt->signals ? ember_ckpt_signal_take() : EMBER_CKPT_SIGNAL_NONE;
    if (what == EMBER_CKPT_SIGNAL_NONE)
        return;
    if (ckpt->leader) {
        ckpt->requested = 1;
        ckpt->request_stop |= what == EMBER_CKPT_SIGNAL_STOP;
        return;
    }
    ember_wire_ckpt_request_send(ckpt->job->tp, what == EMBER_CKPT_SIGNAL_STOP);
}

/* Trainer 0: every other rank hears of step @step (and answers) before
 * any goes on. */
static ember_status_t announce(ember_checkpoint_t *ckpt, uint64_t step, uint32_t stop, char *err,
                               size_t err_length)
{
    ember_job_t *job = ckpt->job;
    ember_msg_ckpt_at_t at = {.step = step, .stop = stop};
    ember_iov_t iov = {&at, sizeof(at)};
    ember_future_t **futures = calloc((size_t)job->world, sizeof(*futures));
    ember_status_t status = futures ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    for (int rank = 1; status == EMBER_OK && rank < job->world; rank++)
        status = ember_rpc_call_async(job->tp, rank, EMBER_OP_CKPT_AT, &iov, 1, NULL, 0, NULL,
                                      &futures[rank]);
    for (int rank = 1; futures && rank < job->world; rank++) {
        if (!futures[rank])
            continue;
        char why[300];
        ember_status_t got =
                api_wait(job, futures[rank], rank, "the checkpoint's step", why, sizeof(why));
        if (got != EMBER_OK && status == EMBER_OK)
            status = ember_status_text(
                    err, err_length, got, "the checkpoint after step %llu: %s did not take it: %s",
                    (unsigned long long)step, ember_tp_peer_name(job->tp, rank), why);
        ember_future_release(futures[rank]);
    }
    free(futures);
    if (status == EMBER_OK)
        status = ember_ckpt_schedule_ask(&ckpt->schedule, step, (int)stop);
    if (status == EMBER_OK && stop && (!ckpt->stop_step || step < ckpt->stop_step))
        ckpt->stop_step = step;
    return status;
}

ember_status_t ember_checkpoint_step_begin(ember_checkpoint_t *ckpt, uint64_t step, int last,
                                           char *err, size_t err_length)
{
    if (!ckpt || !ckpt->writes)
        return EMBER_OK;
    take_signal(ckpt);
    const uint64_t k = step + 1;
    const int last_wanted = last && !ember_ckpt_schedule_due(&ckpt->schedule, k);
    /* The last step's every trainer knows itself: it needs no word from
     * trainer 0, which may come after a trainer that is ahead asked. */
    if (last_wanted && ckpt->trainer >= 0 &&
        ember_ckpt_schedule_ask(&ckpt->schedule, k, 0) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                 "too many checkpoints asked for");
    if (!ckpt->leader)
        return EMBER_OK;
    if (!ckpt->requested && !last_wanted)
        return EMBER_OK;
    const uint32_t stop = (uint32_t)ckpt->request_stop;
    ckpt->requested = ckpt->request_stop = 0;
    if (stop || !last)
        ember_info("checkpoint", "trainer 0: a signal asked for a checkpoint%s: after step %llu",
                   stop ? " and a stop" : "", (unsigned long long)k);
    return announce(ckpt, k, stop, err, err_length);
}

int ember_checkpoint_due(ember_checkpoint_t *ckpt, uint64_t steps)
{
    if (!ckpt || !ckpt->writes)
        return 0;
    if (steps > ckpt->checked)
        ckpt->checked = steps;
    return ember_ckpt_schedule_due(&ckpt->schedule, steps);
}

int ember_checkpoint_stops(const ember_checkpoint_t *ckpt, uint64_t steps)
{
    return ckpt && ckpt->writes && ember_ckpt_schedule_stops(&ckpt->schedule, steps);
}

uint64_t ember_checkpoint_stop_step(const ember_checkpoint_t *ckpt)
{
    return ckpt ? ckpt->stop_step : 0;
}

/* ---- opening ------------------------------------------------------------------- */

static int key_ok(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n >= EMBER_CKPT_KEY_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= '0' && key[i] <= '9') ||
              key[i] == '_' || key[i] == '.'))
            return 0;
    }
    return 1;
}

static int value_ok(const char *value)
{
    size_t n = value ? strlen(value) : EMBER_CKPT_VALUE_MAX;
    for (size_t i = 0; i < n && n < EMBER_CKPT_VALUE_MAX; i++) {
        if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f)
            return 0;
    }
    return n < EMBER_CKPT_VALUE_MAX;
}

static ember_status_t config_check(const ember_job_t *job, const ember_checkpoint_config_t *c,
                                   char *err, size_t err_length)
{
    if (!api_is_client(job, job->rank))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a PS opens no checkpoints (it writes its shards as told)");
    if (c->root && (!*c->root || strlen(c->root) >= EMBER_CHECKPOINT_PATH_MAX))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a checkpoint root of 1 to %d bytes",
                                 EMBER_CHECKPOINT_PATH_MAX - 1);
    if (c->root && c->keep < 1)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "keep %u: at least one complete checkpoint is kept", c->keep);
    if (c->ndescribe > LINES_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%zu description lines, at most %d", c->ndescribe, LINES_MAX);
    for (size_t i = 0; i < c->ndescribe; i++) {
        const ember_st_meta_t *line = &c->describe[i];
        if (!key_ok(line->key) || !value_ok(line->value) || !strcmp(line->key, "trainers") ||
            !strcmp(line->key, "ps"))
            return ember_status_text(
                    err, err_length, EMBER_ERR_INVALID_PARAM,
                    "description line %zu, key '%.40s': keys of [a-z0-9_.]{1,31} other than "
                    "trainers and ps (the library's), values below %d bytes without control "
                    "characters",
                    i, line->key ? line->key : "(null)", EMBER_CKPT_VALUE_MAX);
    }
    return EMBER_OK;
}

/* The coordinator's: its description lines kept, who owes files, the plan
 * to every PS (those that hold no table then take CKPT_AT too). */
static ember_status_t coordinator_setup(ember_checkpoint_t *ckpt,
                                        const ember_checkpoint_config_t *c, char *err,
                                        size_t err_length)
{
    ember_job_t *job = ckpt->job;
    EMBER_CHECK(ember_ckpt_clear_after(ckpt->root, ckpt->start_step, err, err_length));
    ckpt->keys = calloc(c->ndescribe + 1, sizeof(*ckpt->keys));
    ckpt->values = calloc(c->ndescribe + 1, sizeof(*ckpt->values));
    ckpt->holding = calloc((size_t)job->num_ps + 1, 1); /* + 1: a job may have no PS */
    if (!ckpt->keys || !ckpt->values || !ckpt->holding)
        return EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i < c->ndescribe; i++) {
        snprintf(ckpt->keys[i], sizeof(ckpt->keys[i]), "%s", c->describe[i].key);
        snprintf(ckpt->values[i], sizeof(ckpt->values[i]), "%s", c->describe[i].value);
    }
    ckpt->nlines = c->ndescribe;
    api_names_holding(job, ckpt->holding);
    ckpt->expected = (uint32_t)job->trainers;
    for (int p = 0; p < job->num_ps; p++)
        ckpt->expected += ckpt->holding[p];
    ckpt->last_complete = ckpt->start_step;
    for (int p = 0; p < job->num_ps; p++) {
        ember_msg_ckpt_plan_t plan = {.every = ckpt->every, .index = (uint32_t)p};
        snprintf(plan.root, sizeof(plan.root), "%s", ckpt->root);
        ember_iov_t iov = {&plan, sizeof(plan)};
        EMBER_CHECK(api_ps_ready(job, p));
        EMBER_CHECK(api_call(job, ember_job_ps_rank(job, p), EMBER_OP_CKPT_PLAN, &iov, 1, NULL, 0,
                             NULL, 0, "the checkpoint plan", err, err_length));
    }
    return EMBER_OK;
}

static void ckpt_free(ember_checkpoint_t *ckpt)
{
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step)
            pending_release(&ckpt->pending[i]);
    }
    free(ckpt->keys);
    free(ckpt->values);
    free(ckpt->holding);
    free(ckpt);
}

ember_status_t ember_checkpoint_open(ember_job_t *job, const ember_checkpoint_config_t *config,
                                     ember_checkpoint_t **ckpt_p, char *err, size_t err_length)
{
    EMBER_CHECK(config_check(job, config, err, err_length));
    ember_checkpoint_t *ckpt = calloc(1, sizeof(*ckpt));
    if (!ckpt)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    int t;
    *ckpt = (ember_checkpoint_t){.job = job,
                                 .every = config->every,
                                 .start_step = config->start_step,
                                 .keep = config->keep,
                                 .writes = config->root != NULL,
                                 .signals = config->signals && config->root,
                                 .coordinator = job->rank == job->coordinator};
    ckpt->trainer = ember_job_role(job, job->rank, &t) == EMBER_ROLE_TRAINER ? t : -1;
    ckpt->leader = ckpt->trainer == 0;
    if (config->root)
        snprintf(ckpt->root, sizeof(ckpt->root), "%s", config->root);
    ember_ckpt_schedule_init(&ckpt->schedule, config->every);
    ember_status_t status = EMBER_OK;
    if (ckpt->writes && ckpt->coordinator)
        status = coordinator_setup(ckpt, config, err, err_length);
    if (status == EMBER_OK) {
        if (ckpt->signals)
            ember_ckpt_signal_install();
        ckpt_register(ckpt, 1);
        /* Nobody announces a step before every client can take it. */
        status = ember_job_barrier(job, "ember-checkpoint");
        if (status != EMBER_OK)
            ember_status_text(err, err_length, status, "the clients did not meet to open it");
    }
    if (status != EMBER_OK) {
        ckpt_register(ckpt, 0);
        ckpt_free(ckpt);
        return status;
    }
    *ckpt_p = ckpt;
    return EMBER_OK;
}

/* A trainer: until report @i's call has ended (or the job cannot take it). */
static void report_wait(ember_checkpoint_t *ckpt, size_t i)
{
    ember_job_t *job = ckpt->job;
    if (!ckpt->futures[i])
        return;
    while (ember_future_test(ckpt->futures[i]) == EMBER_INPROGRESS && !job->aborted &&
           !ember_tp_peer_lost(job->tp, job->coordinator))
        ember_tp_wait(job->tp, 0.05);
    ember_future_release(ckpt->futures[i]);
    ckpt->futures[i] = NULL;
}

void ember_checkpoint_close(ember_checkpoint_t *ckpt)
{
    if (!ckpt)
        return;
    for (size_t i = 0; i < REPORTS_MAX; i++)
        report_wait(ckpt, i);
    ckpt_register(ckpt, 0);
    ckpt_free(ckpt);
}

/* ---- a trainer's file ---------------------------------------------------------- */

static ember_status_t save_check(const ember_checkpoint_t *ckpt, uint64_t steps,
                                 const ember_st_meta_t *meta, size_t nmeta, char *err,
                                 size_t err_length)
{
    static const char *const reserved[] = {"format", "step", "trainer", "trainers"};
    if (ckpt->trainer < 0 || !ckpt->writes)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s: %s", me(ckpt),
                                 ckpt->writes ? "only trainers save checkpoint files"
                                              : "this job writes no checkpoints (no root)");
    if (!ember_ckpt_schedule_due(&ckpt->schedule, steps))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: no checkpoint is due after step %llu", me(ckpt),
                                 (unsigned long long)steps);
    for (size_t i = 0; i < nmeta; i++) {
        for (size_t r = 0; r < sizeof(reserved) / sizeof(reserved[0]); r++) {
            if (!meta[i].key || strcmp(meta[i].key, reserved[r]) == 0)
                return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                         "%s: metadata key '%s' is the library's", me(ckpt),
                                         meta[i].key ? meta[i].key : "(null)");
        }
    }
    return EMBER_OK;
}

/* The file written durably; @done says what (or why not). */
static ember_status_t save_file(ember_checkpoint_t *ckpt, const char *dir, uint64_t steps,
                                const ember_st_tensor_t *tensors, size_t ntensors,
                                const ember_st_meta_t *meta, size_t nmeta,
                                ember_msg_ckpt_done_t *done)
{
    char path[EMBER_CHECKPOINT_PATH_MAX + 128], step[24], trainer[16], trainers[16];
    ember_st_meta_t *all = calloc(nmeta + 4, sizeof(*all));
    ember_st_written_t written = {0};
    const double started = ember_time_now();
    snprintf(done->name, sizeof(done->name), "trainer%d.safetensors", ckpt->trainer);
    if (!all)
        return done->status = EMBER_ERR_NO_MEMORY;
    snprintf(step, sizeof(step), "%" PRIu64, steps);
    snprintf(trainer, sizeof(trainer), "%d", ckpt->trainer);
    snprintf(trainers, sizeof(trainers), "%d", ckpt->job->trainers);
    all[0] = (ember_st_meta_t){"format", FORMAT};
    all[1] = (ember_st_meta_t){"step", step};
    all[2] = (ember_st_meta_t){"trainer", trainer};
    all[3] = (ember_st_meta_t){"trainers", trainers};
    if (nmeta)
        memcpy(all + 4, meta, nmeta * sizeof(*meta));
    snprintf(path, sizeof(path), "%s/%s", dir, done->name);
    ember_status_t status =
            ember_st_write_durable(path, tensors, ntensors, all, nmeta + 4, &written);
    free(all);
    if (status != EMBER_OK)
        snprintf(done->text, sizeof(done->text), "%.200s: %s", path, ember_status_string(status));
    done->status = status;
    done->bytes = written.bytes;
    done->crc32c = written.crc32c;
    done->write_seconds = ember_time_now() - started;
    return status;
}

/* The report to the coordinator, in a free slot (its own: straight in). */
static ember_status_t report(ember_checkpoint_t *ckpt, const ember_msg_ckpt_done_t *done, char *err,
                             size_t err_length)
{
    if (ckpt->coordinator)
        return report_take(ckpt, ckpt->job->rank, done, err, err_length);
    size_t i = 0;
    while (i < REPORTS_MAX && ckpt->futures[i] &&
           ember_future_test(ckpt->futures[i]) == EMBER_INPROGRESS)
        i++;
    if (i == REPORTS_MAX)
        i = 0; /* all in flight: wait for the oldest slot */
    report_wait(ckpt, i);
    ckpt->reports[i] = *done;
    ember_iov_t iov = {&ckpt->reports[i], sizeof(*done)};
    ember_status_t status =
            ember_rpc_call_async(ckpt->job->tp, ckpt->job->coordinator, EMBER_OP_CKPT_DONE, &iov, 1,
                                 NULL, 0, NULL, &ckpt->futures[i]);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "the checkpoint's report: %s",
                                 ember_status_string(status));
    return EMBER_OK;
}

ember_status_t ember_checkpoint_save(ember_checkpoint_t *ckpt, uint64_t steps,
                                     const ember_st_tensor_t *tensors, size_t ntensors,
                                     const ember_st_meta_t *meta, size_t nmeta, char *err,
                                     size_t err_length)
{
    char dir[EMBER_CHECKPOINT_PATH_MAX + 32], text[700]; /* @err may be NULL */
    ember_msg_ckpt_done_t done = {.step = steps};
    ember_status_t status = save_check(ckpt, steps, meta, nmeta, text, sizeof(text));
    if (status == EMBER_OK)
        status = ember_ckpt_step_dir(ckpt->root, steps, dir, sizeof(dir), text, sizeof(text));
    if (status != EMBER_OK) {
        ember_error("checkpoint", "%s", text);
        return ember_status_text(err, err_length, status, "%s", text);
    }
    status = save_file(ckpt, dir, steps, tensors, ntensors, meta, nmeta, &done);
    ember_ckpt_schedule_taken(&ckpt->schedule, steps);
    if (status != EMBER_OK) {
        ember_status_text(text, sizeof(text), status, "%s: the checkpoint after step %llu: %s",
                          me(ckpt), (unsigned long long)steps, done.text);
        ember_error("checkpoint", "%s", text);
        ember_status_text(err, err_length, status, "%s", text);
    }
    /* A failed file is reported too: the coordinator fails the checkpoint. */
    char why[300];
    ember_status_t sent = report(ckpt, &done, why, sizeof(why));
    if (status == EMBER_OK && sent != EMBER_OK) {
        ember_status_text(text, sizeof(text), sent, "%s: %s", me(ckpt), why);
        ember_error("checkpoint", "%s", text);
        status = ember_status_text(err, err_length, sent, "%s", text);
    }
    return status;
}

/* ---- the coordinator's waits ---------------------------------------------------- */

int ember_checkpoint_poll(ember_checkpoint_t *ckpt, ember_checkpoint_event_t *event_p)
{
    if (!ckpt || !ckpt->coordinator || !ckpt->writes)
        return 0;
    ember_tp_progress(ckpt->job->tp);
    take_signal(ckpt);
    if (!ckpt->nevents)
        return 0;
    *event_p = ckpt->events[ckpt->event_first];
    ckpt->event_first = (ckpt->event_first + 1) % EVENTS_MAX;
    ckpt->nevents--;
    return 1;
}

/* Whether a checkpoint up to @steps is still collecting reports. */
static int collecting(const ember_checkpoint_t *ckpt, uint64_t steps)
{
    const uint64_t oldest = oldest_pending(ckpt);
    if (oldest && oldest <= steps)
        return 1;
    return ckpt->last_complete < steps && ckpt->last_failed < steps;
}

/* The checkpoint a finish up to @steps waits for: the oldest collecting. */
static uint64_t awaited_step(const ember_checkpoint_t *ckpt, uint64_t steps)
{
    const uint64_t oldest = oldest_pending(ckpt);
    return oldest && oldest < steps ? oldest : steps;
}

/* A rank lost whose report of @step has not come: it never will. */
static int rank_lost(const ember_checkpoint_t *ckpt, uint64_t step)
{
    for (int r = 0; r < ckpt->job->world; r++) {
        if (!owes_report(ckpt, r) || !ember_tp_peer_lost(ckpt->job->tp, r))
            continue;
        const pending_t *p = pending_find(ckpt, step);
        if (!p || !p->reported[r])
            return r;
    }
    return -1;
}

/* How often a finish that waits asks the PS it waits for whether they
 * still answer. */
#define FINISH_PROBE_S 10.0

/* Each PS whose file checkpoint @step still lacks is asked for its stats
 * (an alive PS answers while its writer writes; a hung one would hold the
 * finish forever): the first that does not answer, its failure in @why;
 * else -1. */
static int silent_ps(ember_checkpoint_t *ckpt, uint64_t step, char *why, size_t why_length)
{
    ember_job_t *job = ckpt->job;
    const pending_t *p = pending_find(ckpt, step);
    for (int r = 0; r < job->world; r++) {
        if (ember_job_role(job, r, NULL) != EMBER_ROLE_PS || !owes_report(ckpt, r) ||
            (p && p->reported[r]))
            continue;
        ember_msg_ps_stats_t stats;
        if (api_call(job, r, EMBER_OP_PS_STATS, NULL, 0, &stats, sizeof(stats), NULL, 0,
                     "a liveness probe", why, why_length) != EMBER_OK)
            return r;
        ember_warn("checkpoint", "the checkpoint after step %llu still waits for %s's file",
                   (unsigned long long)step, ember_tp_peer_name(job->tp, r));
    }
    return -1;
}

ember_status_t ember_checkpoint_finish(ember_checkpoint_t *ckpt, uint64_t steps, char *err,
                                       size_t err_length)
{
    if (!ckpt || !ckpt->coordinator || !ckpt->writes)
        return EMBER_OK;
    ember_job_t *job = ckpt->job;
    double probe_at = ember_time_now() + FINISH_PROBE_S;
    while (collecting(ckpt, steps)) {
        const uint64_t awaited = awaited_step(ckpt, steps);
        const int lost = rank_lost(ckpt, awaited);
        if (lost >= 0)
            return ember_status_text(err, err_length, EMBER_ERR_PEER_LOST,
                                     "the checkpoint after step %llu: %s was lost before it "
                                     "reported its file",
                                     (unsigned long long)awaited,
                                     ember_tp_peer_name(job->tp, lost));
        if (job->aborted)
            return ember_status_text(err, err_length, EMBER_ERR_CANCELED,
                                     "the checkpoint after step %llu: the job was aborted: %s",
                                     (unsigned long long)steps, job->abort_cause);
        if (ember_time_now() >= probe_at && !job->aborted) {
            char why[400];
            const int silent = silent_ps(ckpt, awaited, why, sizeof(why));
            if (silent >= 0)
                return ember_status_text(err, err_length, EMBER_ERR_TIMED_OUT,
                                         "the checkpoint after step %llu: %s, whose file it "
                                         "awaits, does not answer: %s",
                                         (unsigned long long)awaited,
                                         ember_tp_peer_name(job->tp, silent), why);
            probe_at = ember_time_now() + FINISH_PROBE_S;
        }
        take_signal(ckpt);
        ember_tp_wait(job->tp, 0.1);
    }
    if (ckpt->last_complete < steps)
        return ember_status_text(err, err_length, EMBER_ERR_IO,
                                 "the checkpoint after step %llu failed: %s",
                                 (unsigned long long)steps, ckpt->last_failure);
    return EMBER_OK;
}

/* ---- resuming -------------------------------------------------------------------- */

static uint32_t manifest_u32(const ember_ckpt_manifest_t *m, const char *key)
{
    const char *text = ember_ckpt_manifest_get(m, key);
    char *end;
    errno = 0;
    unsigned long v = text && *text >= '0' && *text <= '9' ? strtoul(text, &end, 10) : 0;
    return text && !errno && *end == '\0' && v <= UINT32_MAX ? (uint32_t)v : 0;
}

ember_status_t ember_checkpoint_find(const char *path, ember_checkpoint_info_t *info, char *err,
                                     size_t err_length)
{
    memset(info, 0, sizeof(*info));
    ember_ckpt_manifest_t *m = calloc(1, sizeof(*m));
    if (!m)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    ember_status_t status =
            path ? ember_ckpt_find(path, info->dir, sizeof(info->dir), m, err, err_length)
                 : ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "no checkpoint path");
    if (status != EMBER_OK) {
        free(m);
        return status;
    }
    info->manifest = m;
    info->step = m->step;
    info->trainers = manifest_u32(m, "trainers");
    info->num_ps = manifest_u32(m, "ps");
    return EMBER_OK;
}

void ember_checkpoint_info_free(ember_checkpoint_info_t *info)
{
    if (!info || !info->manifest)
        return;
    ember_ckpt_manifest_free(info->manifest);
    free(info->manifest);
    info->manifest = NULL;
}

const char *ember_checkpoint_describe(const ember_checkpoint_info_t *info, const char *key)
{
    const char *value =
            info && info->manifest && key ? ember_ckpt_manifest_get(info->manifest, key) : NULL;
    return value ? value : "";
}

/* The PS files the manifest names, [count][EMBER_CKPT_FILE_NAME_MAX]. */
static char *ps_files_of(const ember_ckpt_manifest_t *m, uint32_t *count_p)
{
    char *names = calloc(m->nfiles ? m->nfiles : 1, EMBER_CKPT_FILE_NAME_MAX);
    *count_p = 0;
    for (size_t i = 0; names && i < m->nfiles; i++) {
        if (strncmp(m->files[i].name, "ps", 2) == 0)
            snprintf(names + (size_t)(*count_p)++ * EMBER_CKPT_FILE_NAME_MAX,
                     EMBER_CKPT_FILE_NAME_MAX, "%s", m->files[i].name);
    }
    return names;
}

ember_status_t ember_checkpoint_restore_tables(ember_job_t *job,
                                               const ember_checkpoint_info_t *info, char *err,
                                               size_t err_length)
{
    if (!api_is_client(job, job->rank) || !info || !info->manifest)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: restoring tables: %s", ember_tp_peer_name(job->tp, job->rank),
                                 info && info->manifest ? "a PS restores only as told"
                                                        : "no checkpoint found");
    ember_msg_table_restore_t head = {.count = 0};
    if (strlen(info->dir) >= sizeof(head.dir))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: a path of more than %zu bytes", info->dir,
                                 sizeof(head.dir) - 1);
    char *names = ps_files_of(info->manifest, &head.count);
    if (!names)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    memcpy(head.dir, info->dir, strlen(info->dir) + 1);
    ember_iov_t iov[2] = {{&head, sizeof(head)},
                          {names, (size_t)head.count * EMBER_CKPT_FILE_NAME_MAX}};
    ember_future_t **futures = calloc((size_t)job->num_ps, sizeof(*futures));
    ember_status_t status = futures ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    /* Every PS reads its files at once; a large table takes a while: no
     * deadline but the PS's loss. */
    for (int p = 0; status == EMBER_OK && p < job->num_ps; p++) {
        if ((status = api_ps_ready(job, p)) == EMBER_OK)
            status = ember_rpc_call_async(job->tp, ember_job_ps_rank(job, p),
                                          EMBER_OP_TABLE_RESTORE, iov, 2, NULL, 0,
                                          &(ember_rpc_param_t){.timeout_s = 1e9}, &futures[p]);
    }
    if (status != EMBER_OK)
        ember_status_text(err, err_length, status, "restoring the tables: %s",
                          ember_status_string(status));
    for (int p = 0; futures && p < job->num_ps; p++) {
        if (!futures[p])
            continue;
        char why[400];
        ember_status_t got = api_wait(job, futures[p], ember_job_ps_rank(job, p),
                                      "restoring its tables", why, sizeof(why));
        if (got != EMBER_OK && status == EMBER_OK)
            status = ember_status_text(err, err_length, got, "from %s: %s", info->dir, why);
        ember_future_release(futures[p]);
    }
    free(futures);
    free(names);
    return status;
}

/* A metadata number of the trainer file @path, checked at full width. */
static ember_status_t meta_u64(const ember_st_file_t *file, const char *path, const char *key,
                               uint64_t max, uint64_t *out, char *err, size_t err_length)
{
    const char *text = ember_st_metadata(file, key);
    char *end;
    errno = 0;
    unsigned long long v = text && *text >= '0' && *text <= '9' ? strtoull(text, &end, 10) : 0;
    if (!text || *text < '0' || *text > '9' || errno || *end || v > max)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: metadata '%s' is %s%s%s, not a number up to %llu", path, key,
                                 text ? "'" : "missing", text ? text : "", text ? "'" : "",
                                 (unsigned long long)max);
    *out = v;
    return EMBER_OK;
}

/* The library's metadata of trainer @t's file after @step of a checkpoint
 * whose manifest says @trainers (0: it does not say). */
static ember_status_t trainer_file_check(const ember_st_file_t *file, const char *path,
                                         uint64_t want_step, uint32_t t, uint32_t want_trainers,
                                         char *err, size_t err_length)
{
    const char *format = ember_st_metadata(file, "format");
    uint64_t step, trainer, trainers;
    if (format && strcmp(format, FORMAT_1) == 0)
        return ember_status_text(
                err, err_length, EMBER_ERR_FORMAT,
                "%s: written by ember-train before the library API (format %s, whose model "
                "settings are a raw struct): resume it with that ember-train, or start afresh",
                path, FORMAT_1);
    if (!format || strcmp(format, FORMAT) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: not a trainer's checkpoint file (format '%s', want '%s')",
                                 path, format ? format : "missing", FORMAT);
    EMBER_CHECK(meta_u64(file, path, "step", UINT64_MAX, &step, err, err_length));
    EMBER_CHECK(meta_u64(file, path, "trainer", UINT32_MAX, &trainer, err, err_length));
    EMBER_CHECK(meta_u64(file, path, "trainers", UINT32_MAX, &trainers, err, err_length));
    if (step == want_step && trainer == t && trainer < trainers &&
        (!want_trainers || trainers == want_trainers))
        return EMBER_OK;
    char of[24] = "";
    if (want_trainers)
        snprintf(of, sizeof(of), " of %u", want_trainers);
    return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                             "%s: trainer %llu of %llu after step %llu, not trainer %u%s after "
                             "step %llu as its manifest says",
                             path, (unsigned long long)trainer, (unsigned long long)trainers,
                             (unsigned long long)step, t, of, (unsigned long long)want_step);
}

/* Trainer @t's file of the checkpoint in @dir whose manifest is @m, mapped
 * and checked; @verify: its size and CRC first (find did not). */
static ember_status_t open_trainer_file(const char *dir, const ember_ckpt_manifest_t *m, uint32_t t,
                                        int verify, ember_st_file_t **file_p, char *err,
                                        size_t err_length)
{
    char path[700], name[EMBER_CKPT_NAME_MAX];
    const uint32_t trainers = manifest_u32(m, "trainers");
    snprintf(name, sizeof(name), "trainer%u.safetensors", t);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    const ember_ckpt_file_t *listed = ember_ckpt_manifest_file(m, name);
    if (!listed)
        return ember_status_text(err, err_length, EMBER_ERR_NOT_FOUND,
                                 "%s: its manifest names no %s (a checkpoint of %u trainers)", dir,
                                 name, trainers);
    if (verify)
        EMBER_CHECK(ember_ckpt_verify_one(dir, listed, err, err_length));
    ember_st_file_t *file;
    char why[400];
    ember_status_t status = ember_st_map(path, &file, why, sizeof(why));
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "%s: %s", path, why);
    status = trainer_file_check(file, path, m->step, t, trainers, err, err_length);
    if (status != EMBER_OK) {
        ember_st_close(file);
        return status;
    }
    *file_p = file;
    return EMBER_OK;
}

ember_status_t ember_checkpoint_open_trainer(const ember_checkpoint_info_t *info, uint32_t t,
                                             ember_st_file_t **file_p, char *err, size_t err_length)
{
    if (!info || !info->manifest || !file_p)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "no checkpoint found");
    return open_trainer_file(info->dir, info->manifest, t, 0, file_p, err, err_length);
}

ember_status_t ember_checkpoint_open_trainer_at(const char *dir, uint64_t step, uint32_t t,
                                                ember_st_file_t **file_p, char *err,
                                                size_t err_length)
{
    ember_ckpt_manifest_t m;
    if (!dir || !file_p)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a trainer's checkpoint file: no %s",
                                 dir ? "file_p" : "directory");
    EMBER_CHECK(ember_ckpt_manifest_read(dir, &m, err, err_length));
    ember_status_t status =
            m.step == step
                    ? open_trainer_file(dir, &m, t, 1, file_p, err, err_length)
                    : ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                        "%s: the checkpoint after step %llu, not %llu", dir,
                                        (unsigned long long)m.step, (unsigned long long)step);
    ember_ckpt_manifest_free(&m);
    return status;
}

/* A PS file's metadata number @table.@key, or -1. */
static int64_t shard_meta(const ember_st_file_t *file, const char *table, const char *key)
{
    char name[EMBER_TABLE_NAME_MAX + 16], *end;
    snprintf(name, sizeof(name), "%s.%s", table, key);
    const char *text = ember_st_metadata(file, name);
    errno = 0;
    long long v = text && *text >= '0' && *text <= '9' ? strtoll(text, &end, 10) : -1;
    return text && !errno && v >= 0 && *end == '\0' ? v : -1;
}

/* The rows of table @name that one PS file holds, put at their global ids. */
static ember_status_t take_shard(const ember_st_file_t *file, const char *path, const char *table,
                                 int64_t rows, uint32_t dim, float *out, int64_t *covered,
                                 char *err, size_t err_length)
{
    const int64_t shard = shard_meta(file, table, "shard");
    const int64_t count = shard_meta(file, table, "num_shards");
    char name[EMBER_TABLE_NAME_MAX + 16];
    snprintf(name, sizeof(name), "%s.weight", table);
    const ember_st_tensor_t *w = ember_st_find(file, name);
    if (shard < 0 && count < 0 && !w)
        return EMBER_OK; /* not a file of this table */
    const int64_t local = count > 0 ? (rows - shard + count - 1) / count : -1;
    if (shard < 0 || count <= 0 || shard >= count || shard_meta(file, table, "rows") != rows ||
        !w || w->ndim != 2 || w->shape[0] != local || w->shape[1] != (int64_t)dim ||
        (w->dtype != EMBER_DTYPE_F32 && w->dtype != EMBER_DTYPE_F16))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: table %s is not a shard of %lld x %u rows", path, table,
                                 (long long)rows, dim);
    const size_t bytes = ember_dtype_size(w->dtype);
    for (int64_t i = 0; i < local; i++) {
        const char *row = (const char *)w->data + (size_t)i * dim * bytes;
        float *dst = out + (size_t)(shard + i * count) * dim;
        if (w->dtype == EMBER_DTYPE_F32) {
            memcpy(dst, row, dim * sizeof(float));
            continue;
        }
        for (size_t d = 0; d < dim; d++) {
            uint16_t h;
            memcpy(&h, row + d * 2, 2);
            dst[d] = ember_half_to_float(h);
        }
    }
    *covered += local;
    return EMBER_OK;
}

ember_status_t ember_checkpoint_read_table(const ember_checkpoint_info_t *info, const char *name,
                                           int64_t rows, uint32_t dim, float *out, char *err,
                                           size_t err_length)
{
    if (!info || !info->manifest || !name || strlen(name) >= EMBER_TABLE_NAME_MAX || rows < 1 ||
        dim < 1 || !out)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "reading table '%.40s' of %lld x %u rows from %s",
                                 name ? name : "(null)", (long long)rows, dim,
                                 info && info->manifest ? info->dir : "no checkpoint");
    uint32_t n = 0;
    char *names = ps_files_of(info->manifest, &n);
    ember_st_file_t **files = calloc(n + 1, sizeof(*files));
    char **paths = calloc(n + 1, sizeof(*paths));
    ember_status_t status = names && files && paths ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    int64_t covered = 0;
    if (status == EMBER_OK)
        status = ember_ckpt_map_files(info->dir, names, EMBER_CKPT_FILE_NAME_MAX, n, files, paths,
                                      err, err_length);
    for (uint32_t i = 0; status == EMBER_OK && i < n; i++)
        status = take_shard(files[i], paths[i], name, rows, dim, out, &covered, err, err_length);
    if (status == EMBER_OK && covered != rows)
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                   "%s: its PS files hold %lld of table %s's %lld rows", info->dir,
                                   (long long)covered, name, (long long)rows);
    if (files)
        ember_ckpt_unmap_files(files, paths, n);
    free(files);
    free(paths);
    free(names);
    return status;
}
