/*
 * tools/ember-train/trainer: a trainer process, from the master's
 * TRAIN_START to its answer (see trainer.h).
 *
 * The one training loop, for every model: each step takes its batch from
 * the model (the next one is taken too, so the step knows whether it is
 * the epoch's or the job's last), looks it up (the next step's lookup is
 * made while this one flies, unless an evaluation comes first: with
 * --staleness K >= 1 it leaves as soon as this step's replies are in,
 * else once its gradients are pushed), runs the model's dense forward,
 * loss and backward on the pooled features, pushes their gradients, and
 * steps the dense optimizers.  Between steps: checkpoints (the library
 * says which steps), evaluations (the model's data, every N steps and at
 * the end), an epoch report to the master at each epoch's end.  A resumed
 * job passes the batches before its start by.  A failed phase ends the
 * step with one line naming the trainer and the step (and the table, for
 * a batch the table refuses), which is also the master's answer.
 */
#include "tools/ember-train/trainer.h"

#include "tools/ember-train/settings.h"

#include <ember/log.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ember_status_t trainer_fail(trainer_t *t, ember_status_t status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static ember_status_t trainer_fail(trainer_t *t, ember_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof(t->err), fmt, ap);
    va_end(ap);
    ember_error("trainer", "%s", t->err);
    return status;
}

/* The master is gone: the job is over, whatever else failed because of it
 * (a PS that stopped with it). */
static ember_status_t master_lost(trainer_t *t, uint64_t step)
{
    return trainer_fail(t, EMBER_ERR_PEER_LOST,
                        "trainer %d step %llu: the master (rank %d) was lost: %s", t->index,
                        (unsigned long long)step, t->master,
                        ember_job_peer_reason(t->job, t->master));
}

/* A phase of @step failed with @status, @why its cause (@table: the table
 * a bad batch is wrong for; @line: @why names the trainer and the step
 * already, as the library's lines do), unless the master's end or the
 * job's abort is the cause. */
static ember_status_t step_failed(trainer_t *t, ember_status_t status, uint64_t step,
                                  const char *why, const char *table, int line)
{
    const unsigned long long s = (unsigned long long)step;
    if (ember_job_peer_lost(t->job, t->master))
        return master_lost(t, step);
    if (*ember_job_aborted(t->job))
        return trainer_fail(t, status < 0 ? status : EMBER_ERR_CANCELED,
                            "trainer %d step %llu: job aborted: %s", t->index, s,
                            ember_job_aborted(t->job));
    if (!why || !*why)
        return trainer_fail(t, status, "trainer %d step %llu: %s", t->index, s,
                            ember_status_string(status));
    if (line) /* logged by the library already */
        return snprintf(t->err, sizeof(t->err), "%s", why), status;
    if (table)
        return trainer_fail(t, status, "table %s: trainer %d step %llu: %s", table, t->index, s,
                            why);
    return trainer_fail(t, status, "trainer %d step %llu: %s", t->index, s, why);
}

/* The time since the last mark goes to @phase. */
static void phase_end(trainer_t *t, int phase)
{
    const double now = now_s();
    t->phase_s[phase] += now - t->phase_mark;
    t->phase_mark = now;
}

/* Run one phase of @step that writes its cause into @why (a model's hook);
 * a failure ends the step. */
#define MODEL_PHASE(t, step, why, call)                                     \
    do {                                                                    \
        (why)[0] = '\0';                                                    \
        ember_status_t phase_status_ = (call);                              \
        if (phase_status_ != EMBER_OK)                                      \
            return step_failed((t), phase_status_, (step), (why), NULL, 0); \
    } while (0)

/* Run one call of the ebc; its failure is the line it logged. */
#define LOOKUP_PHASE(t, step, call)                                                             \
    do {                                                                                        \
        ember_status_t phase_status_ = (call);                                                  \
        if (phase_status_ != EMBER_OK)                                                          \
            return step_failed((t), phase_status_, (step), ember_ebc_error((t)->ebc), NULL, 1); \
    } while (0)

/* ---- the master's TRAIN_START ---------------------------------------------------- */

static void on_start(ember_rpc_req_t *req, void *arg)
{
    trainer_t *t = arg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[300];
    if (t->started) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM, "trainer%d: a repeated TRAIN_START",
                              t->index);
        return;
    }
    ember_status_t status =
            train_start_unpack(data, length, (uint32_t)t->index, (uint32_t)t->trainers,
                               (uint32_t)ember_job_num_ps(t->job), &t->start, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    t->start_req = req;
    t->started = 1;
    t->report_next = t->start.head.report_at[0];
    t->report_after = t->start.head.report_at[1];
}

/* Until the master's TRAIN_START (or an abort).  The master is watched from
 * here on, so its death is noticed between its words. */
static ember_status_t wait_start(trainer_t *t)
{
    ember_status_t status = ember_tp_watch(ember_job_transport(t->job), t->master);
    while (status == EMBER_OK && !t->started) {
        if (ember_job_wait(t->job, 0.5) == EMBER_ERR_CANCELED) {
            ember_error("trainer", "trainer %d: job aborted before training: %s", t->index,
                        ember_job_aborted(t->job));
            return EMBER_ERR_CANCELED;
        }
        if (ember_job_peer_lost(t->job, t->master)) {
            ember_error("trainer",
                        "trainer %d: the master (rank %d) was lost before training started: %s",
                        t->index, t->master, ember_job_peer_reason(t->job, t->master));
            status = EMBER_ERR_PEER_LOST;
        }
    }
    return status;
}

/* ---- set-up -------------------------------------------------------------------------- */

/* What TRAIN_START says: the driver's settings (this rank's devices its
 * own), the model and its configuration, checked. */
static ember_status_t take_spec(trainer_t *t)
{
    char err[400];
    t->settings = t->tj->settings;
    ember_status_t status =
            train_settings_parse(t->start.settings, &t->model, &t->settings, err, sizeof(err));
    if (status == EMBER_OK && !(t->config = calloc(1, t->model->config_size)))
        status = ember_status_text(err, sizeof(err), EMBER_ERR_NO_MEMORY, "out of memory");
    if (status == EMBER_OK)
        status = t->model->parse(t->config, t->start.config, err, sizeof(err));
    if (status == EMBER_OK && t->model->params(t->config) != t->start.head.nparams)
        status = ember_status_text(
                err, sizeof(err), EMBER_ERR_BAD_MESSAGE, "%llu dense parameters, the model has %zu",
                (unsigned long long)t->start.head.nparams, t->model->params(t->config));
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: TRAIN_START: %s", t->index, err);
    return EMBER_OK;
}

/* The checkpoints (all clients meet in it: the master opened it too). */
static ember_status_t open_checkpoints(trainer_t *t)
{
    char err[400];
    ember_checkpoint_config_t config;
    ember_checkpoint_config_init(&config);
    config.root = t->start.root[0] ? t->start.root : NULL;
    config.every = t->start.head.every;
    config.start_step = t->start.head.start_step;
    config.signals = config.root != NULL;
    ember_status_t status = ember_checkpoint_open(t->job, &config, &t->ckpt, err, sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: checkpoints: %s", t->index, err);
    return EMBER_OK;
}

/* The device of the dense half (the GPU by the local rank) and the
 * trainers' allreduce on it (NCCL on GPUs, the ring over the transport on
 * the CPU). */
static ember_status_t open_device(trainer_t *t)
{
    const char *kind = t->settings.device;
    ember_status_t status = ember_device_open(kind, ember_job_local_rank(t->job), &t->device);
    if (status == EMBER_OK)
        status = ember_allreduce_create(t->job, t->device, &t->allreduce);
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: no %s device or communicator: %s", t->index,
                            kind, ember_status_string(status));
    return EMBER_OK;
}

/* The model's tables, opened, and its features through one ebc. */
static ember_status_t open_lookups(trainer_t *t)
{
    ember_model_table_t tables[EMBER_MODEL_TABLES_MAX];
    ember_model_feature_t features[EMBER_MODEL_TABLES_MAX];
    ember_feature_t ebc_features[EMBER_MODEL_TABLES_MAX];
    t->ntables = t->model->tables(t->config, &t->settings, tables);
    for (size_t k = 0; k < t->ntables; k++) {
        ember_status_t status = ember_table_open(t->job, tables[k].name, &t->tables[k]);
        if (status != EMBER_OK)
            return trainer_fail(t, status, "trainer %d: table %s: %s", t->index, tables[k].name,
                                ember_status_string(status));
    }
    const size_t n = t->model->features(t->config, features);
    for (size_t f = 0; f < n; f++)
        ebc_features[f] = (ember_feature_t){.name = features[f].name,
                                            .table = t->tables[features[f].table],
                                            .pooling = features[f].pooling,
                                            .padding_idx = features[f].padding_idx};
    ember_ebc_options_t options;
    ember_ebc_options_init(&options);
    options.device = t->device;
    options.half_replies = t->settings.half_replies;
    options.start_step = t->start.head.start_step;
    ember_status_t status = ember_ebc_create(t->job, ebc_features, n, &options, &t->ebc);
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: its lookups: %s", t->index,
                            ember_status_string(status));
    if (t->settings.cache_rows > 0 &&
        (status = ember_ebc_set_cache_rows(t->ebc, (size_t)t->settings.cache_rows)) != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: --cache-rows %llu: %s", t->index,
                            (unsigned long long)t->settings.cache_rows, ember_ebc_error(t->ebc));
    return EMBER_OK;
}

/* The model's data and dense half, from the master's initial parameters. */
static ember_status_t open_model(trainer_t *t)
{
    const size_t n = t->model->params(t->config);
    float *params = malloc(n * sizeof(float) + 4);
    char err[400];
    if (!params)
        return trainer_fail(t, EMBER_ERR_NO_MEMORY, "trainer %d: out of memory", t->index);
    memcpy(params, t->start.params, n * sizeof(float));
    const ember_model_trainer_args_t args = {.config = t->config,
                                             .settings = &t->settings,
                                             .trainer = t->index,
                                             .device = t->device,
                                             .allreduce = t->allreduce,
                                             .params = params};
    ember_status_t status = t->model->trainer_create(&args, &t->model_trainer, err, sizeof(err));
    free(params);
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: %s", t->index, err);
    return EMBER_OK;
}

static ember_status_t trainer_setup(trainer_t *t)
{
    EMBER_CHECK(take_spec(t));
    EMBER_CHECK(open_checkpoints(t));
    EMBER_CHECK(open_device(t));
    EMBER_CHECK(open_lookups(t));
    return open_model(t);
}

/* ---- epochs -------------------------------------------------------------------------- */

/* One epoch's totals, sent to the master while the next epoch runs. */
typedef struct {
    train_msg_epoch_t msg; /* owned by the call in flight */
    ember_future_t *future;
    uint64_t steps, bags;
    double loss_sum, started;
} epoch_t;

static void epoch_report_wait(trainer_t *t, epoch_t *epoch)
{
    if (!epoch->future)
        return;
    ember_status_t status;
    while ((status = ember_future_test(epoch->future)) == EMBER_INPROGRESS &&
           !*ember_job_aborted(t->job))
        ember_job_wait(t->job, 0.2);
    if (status != EMBER_OK)
        ember_warn("trainer", "trainer %d: an epoch report was lost", t->index);
    ember_future_release(epoch->future);
    epoch->future = NULL;
}

static void epoch_report(trainer_t *t, epoch_t *epoch, uint32_t number)
{
    const double now = now_s();
    epoch_report_wait(t, epoch); /* one report in flight at a time */
    epoch->msg = (train_msg_epoch_t){.trainer = (uint32_t)t->index,
                                     .epoch = number,
                                     .steps = epoch->steps,
                                     .bags = epoch->bags,
                                     .loss_sum = epoch->loss_sum,
                                     .seconds = now - epoch->started,
                                     .staleness = ember_ebc_staleness_seen(t->ebc)};
    ember_iov_t iov = {&epoch->msg, sizeof(epoch->msg)};
    ember_rpc_call_async(ember_job_transport(t->job), t->master, TRAIN_OP_EPOCH, &iov, 1, NULL, 0,
                         NULL, &epoch->future);
    epoch->started = now;
    epoch->steps = epoch->bags = 0;
    epoch->loss_sum = 0.0;
}

/* ---- progress reports ---------------------------------------------------------------- */

/* The answer to the report in flight, waited for (the master answers once
 * every trainer has reported its step): the step after report_next to
 * report at (0: none), into report_after.  A report the master refused
 * (the lines stopped; it said why) ends the reports; a job aborted too. */
static ember_status_t report_answer(trainer_t *t)
{
    ember_future_t *future = t->report_future;
    if (!future)
        return EMBER_OK;
    ember_status_t status;
    while ((status = ember_future_test(future)) == EMBER_INPROGRESS && !*ember_job_aborted(t->job))
        ember_job_wait(t->job, 0.2);
    size_t length = 0;
    const void *data = ember_future_data(future, &length);
    char err[200];
    ember_status_t taken = EMBER_OK;
    t->report_after = 0;
    if (status == EMBER_OK)
        taken = train_progress_next(data, length, t->index, t->report_next, &t->report_after, err,
                                    sizeof(err));
    else if (status == EMBER_ERR_BAD_MESSAGE) /* refused (else: the loop finds out why) */
        ember_warn("trainer", "trainer %d: its progress report was refused: %.*s", t->index,
                   (int)(data ? length : 0), data ? (const char *)data : "");
    ember_future_release(future);
    t->report_future = NULL;
    if (taken != EMBER_OK)
        return trainer_fail(t, taken, "%s", err);
    return EMBER_OK;
}

/* After step @steps - 1 when the master asked for it: where this trainer
 * stands (@epoch's counts so far, its size as the model knows it), once
 * the report before is answered. */
static ember_status_t report_progress(trainer_t *t, uint64_t steps, uint32_t number,
                                      const epoch_t *epoch, uint64_t examples)
{
    if (!t->report_next || steps != t->report_next)
        return EMBER_OK;
    EMBER_CHECK(report_answer(t));
    const ember_model_ops_t *model = t->model;
    t->report = (train_msg_progress_t){.trainer = (uint32_t)t->index,
                                       .epoch = number,
                                       .steps = steps,
                                       .epoch_steps = epoch->steps,
                                       .epoch_size = EMBER_MODEL_HAS(model, epoch_steps)
                                                             ? model->epoch_steps(t->model_trainer)
                                                             : 0,
                                       .examples = examples,
                                       .loss_sum = epoch->loss_sum};
    ember_iov_t iov = {&t->report, sizeof(t->report)};
    /* Held by the master until every trainer reported: no deadline but its loss. */
    ember_status_t status = ember_rpc_call_async(
            ember_job_transport(t->job), t->master, TRAIN_OP_PROGRESS, &iov, 1, NULL, 0,
            &(ember_rpc_param_t){.timeout_s = 1e9}, &t->report_future);
    if (status != EMBER_OK) /* the master out of reach: the job cannot go on */
        return trainer_fail(t, status, "trainer %d step %llu: its progress report: %s", t->index,
                            (unsigned long long)(steps - 1), ember_status_string(status));
    t->report_next = t->report_after;
    return EMBER_OK;
}

/* ---- evaluations --------------------------------------------------------------------- */

/* Whether the job evaluates after @steps steps (@at_end: the job's end). */
static int eval_due(const trainer_t *t, uint64_t steps, int at_end)
{
    if (!t->model->eval_take || !t->model->evaluates(t->config))
        return 0;
    const uint64_t every = t->model->eval_every(t->config);
    return at_end || (every && steps && steps % every == 0);
}

/* This trainer's share of an evaluation to the master (a call: it has
 * taken it when this returns). */
static ember_status_t eval_send(trainer_t *t, uint64_t steps, const float *logits,
                                const float *labels, size_t count, char *err, size_t err_length)
{
    train_msg_eval_t head = {.trainer = (uint32_t)t->index, .step = steps, .count = count};
    ember_iov_t iov[3] = {{&head, sizeof(head)},
                          {logits, count * sizeof(float)},
                          {labels, count * sizeof(float)}};
    ember_future_t *future = NULL;
    ember_status_t status = ember_rpc_call_async(ember_job_transport(t->job), t->master,
                                                 TRAIN_OP_EVAL, iov, 3, NULL, 0, NULL, &future);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "the evaluation's report: %s",
                                 ember_status_string(status));
    while ((status = ember_future_test(future)) == EMBER_INPROGRESS && !*ember_job_aborted(t->job))
        ember_job_wait(t->job, 0.2);
    if (status != EMBER_OK) {
        size_t length = 0;
        const char *text = status == EMBER_INPROGRESS ? NULL : ember_future_data(future, &length);
        ember_status_text(err, err_length, status == EMBER_INPROGRESS ? EMBER_ERR_CANCELED : status,
                          "the evaluation's report: %.*s", (int)(length > 200 ? 200 : length),
                          text ? text : "aborted");
    }
    ember_future_release(future);
    return status == EMBER_INPROGRESS ? EMBER_ERR_CANCELED : status;
}

/* Room for @n more of an evaluation's logits and labels. */
static int eval_reserve(float **logits, float **labels, size_t *capacity, size_t n)
{
    if (n <= *capacity)
        return 1;
    const size_t want = n > 2 * *capacity ? n : 2 * *capacity;
    float *a = realloc(*logits, want * sizeof(float) + 4);
    if (a)
        *logits = a;
    float *b = realloc(*labels, want * sizeof(float) + 4);
    if (b)
        *labels = b;
    if (!a || !b)
        return 0;
    *capacity = want;
    return 1;
}

/* One evaluation batch: forward-only lookups of the tables as the steps
 * so far left them, the model's logits appended at @at. */
static ember_status_t eval_batch(trainer_t *t, uint64_t steps, const ember_model_batch_t *batch,
                                 float *logits, float *labels, char *why, size_t why_length)
{
    ember_lookup_t *lookup;
    const float *pooled;
    LOOKUP_PHASE(t, steps,
                 ember_ebc_lookup(t->ebc, &batch->kjt, EMBER_LOOKUP_FORWARD_ONLY, &lookup));
    ember_status_t status = ember_lookup_wait(lookup, NULL, &pooled);
    if (status != EMBER_OK) {
        ember_lookup_release(lookup);
        return step_failed(t, status, steps, ember_ebc_error(t->ebc), NULL, 1);
    }
    why[0] = '\0';
    status = t->model->logits(t->model_trainer, batch, pooled, logits, why, why_length);
    ember_lookup_release(lookup);
    if (status != EMBER_OK)
        return step_failed(t, status, steps, why, NULL, 0);
    memcpy(labels, batch->labels, batch->examples * sizeof(float));
    return EMBER_OK;
}

/* The evaluation after @steps steps, its logits sent to the master. */
static ember_status_t evaluate(trainer_t *t, uint64_t steps)
{
    float *logits = NULL, *labels = NULL;
    size_t count = 0, capacity = 0;
    char why[400];
    ember_status_t status = EMBER_OK;
    for (;;) {
        ember_model_batch_t batch;
        why[0] = '\0';
        status = t->model->eval_take(t->model_trainer, &batch, why, sizeof(why));
        if (status != EMBER_OK) {
            status = step_failed(t, status, steps, why, NULL, 0);
            break;
        }
        if (batch.examples == 0)
            break; /* the data's end: the next evaluation reads it again */
        if (!eval_reserve(&logits, &labels, &capacity, count + batch.examples)) {
            status = step_failed(t, EMBER_ERR_NO_MEMORY, steps, "out of memory", NULL, 0);
            break;
        }
        status = eval_batch(t, steps, &batch, logits + count, labels + count, why, sizeof(why));
        if (status != EMBER_OK)
            break;
        count += batch.examples;
    }
    if (status == EMBER_OK) {
        status = eval_send(t, steps, logits, labels, count, why, sizeof(why));
        if (status != EMBER_OK)
            status = step_failed(t, status, steps, why, NULL, 0);
    }
    free(logits);
    free(labels);
    return status;
}

/* ---- a step ------------------------------------------------------------------------- */

/* A step's batch as the loop holds it: the model's, its epoch, and its
 * lookup once made (during the step before, when it looked ahead). */
typedef struct {
    ember_model_batch_t batch;
    int have;   /* a batch (else: the job's end) */
    int capped; /* none: the model's step count was reached */
    uint32_t epoch;
    ember_lookup_t *lookup;
} step_batch_t;

/* A step's loss kept for the master. */
static ember_status_t keep_loss(trainer_t *t, uint64_t step, float loss)
{
    if (step + 1 > t->losses_capacity) {
        const size_t want = step + 1 > 2 * t->losses_capacity ? step + 1 : 2 * t->losses_capacity;
        float *grown = realloc(t->losses, want * sizeof(float));
        if (!grown)
            return trainer_fail(t, EMBER_ERR_NO_MEMORY, "trainer %d: out of memory", t->index);
        t->losses = grown;
        t->losses_capacity = want;
    }
    t->losses[step] = loss;
    return EMBER_OK;
}

/* Step @step of @cur: its lookup (made unless the step before made it),
 * the next step's (@next, with @ahead) meanwhile, the model's forward,
 * loss and backward, the push (@last: a call), the dense step. */
static ember_status_t run_step(trainer_t *t, uint64_t step, step_batch_t *cur, step_batch_t *next,
                               int last, int ahead, float *loss_p)
{
    const ember_model_ops_t *model = t->model;
    void *mt = t->model_trainer;
    const float *pooled, *grad;
    char why[400];
    phase_end(t, TRAIN_PHASE_OTHER);
    if (!cur->lookup)
        LOOKUP_PHASE(t, step, ember_ebc_lookup(t->ebc, &cur->batch.kjt, 0, &cur->lookup));
    if (ahead)
        LOOKUP_PHASE(t, step + 1, ember_ebc_lookup(t->ebc, &next->batch.kjt, 0, &next->lookup));
    phase_end(t, TRAIN_PHASE_LOOKUP);
    LOOKUP_PHASE(t, step, ember_lookup_wait(cur->lookup, NULL, &pooled));
    phase_end(t, TRAIN_PHASE_WAIT);
    MODEL_PHASE(t, step, why, model->forward(mt, &cur->batch, pooled, loss_p, why, sizeof(why)));
    phase_end(t, TRAIN_PHASE_FORWARD);
    MODEL_PHASE(t, step, why, model->backward(mt, &grad, why, sizeof(why)));
    phase_end(t, TRAIN_PHASE_BACKWARD);
    LOOKUP_PHASE(t, step, ember_lookup_backward(cur->lookup, grad, last ? EMBER_BACKWARD_WAIT : 0));
    phase_end(t, TRAIN_PHASE_PUSH);
    MODEL_PHASE(t, step, why, model->step(mt, why, sizeof(why)));
    ember_lookup_release(cur->lookup);
    cur->lookup = NULL;
    phase_end(t, TRAIN_PHASE_DENSE);
    return EMBER_OK;
}

/* ---- the loop ------------------------------------------------------------------------- */

/* Before each step: the job still runs. */
static ember_status_t may_go_on(trainer_t *t, uint64_t step)
{
    if (*ember_job_aborted(t->job))
        return trainer_fail(t, EMBER_ERR_CANCELED, "trainer %d: job aborted: %s", t->index,
                            ember_job_aborted(t->job));
    if (ember_job_peer_lost(t->job, t->master))
        return master_lost(t, step);
    return EMBER_OK;
}

/* Whatever failed, a lost master is the cause (its death ended the others,
 * which the step then found gone): its loss gets a moment to be noticed
 * before the error stands. */
static ember_status_t blame_master(trainer_t *t, ember_status_t status, uint64_t step)
{
    const double until = now_s() + 0.25;
    while (!ember_job_peer_lost(t->job, t->master) && !*ember_job_aborted(t->job) &&
           now_s() < until)
        ember_job_wait(t->job, 0.01);
    return ember_job_peer_lost(t->job, t->master) ? master_lost(t, step) : status;
}

/* The batch of step @step: the epoch's next, else (the epoch over and
 * another to go) the next epoch's first; none at the job's end. */
static ember_status_t take_batch(trainer_t *t, uint64_t step, uint32_t epoch, step_batch_t *out)
{
    const int skip = step < t->start.head.start_step;
    const char *table = NULL;
    char why[400] = "";
    *out = (step_batch_t){.epoch = epoch};
    for (int tries = 0; tries < 2; tries++) {
        ember_status_t status =
                t->model->take(t->model_trainer, step, skip, &out->batch, &table, why, sizeof(why));
        if (status != EMBER_OK)
            return step_failed(t, status, step, why, table, 0);
        if (out->batch.examples) {
            out->have = 1;
            return EMBER_OK;
        }
        if (out->epoch + 1 >= t->settings.epochs)
            return EMBER_OK; /* the last epoch's end */
        out->epoch++;
    }
    return EMBER_OK; /* an epoch without a step ends the job */
}

/* After @steps steps, when one is due: this trainer's file of it. */
static ember_status_t ckpt_after(trainer_t *t, uint64_t steps, const epoch_t *epoch,
                                 uint32_t number, uint64_t bags)
{
    if (!ember_checkpoint_due(t->ckpt, steps))
        return EMBER_OK;
    const train_progress_t p = {.steps = steps,
                                .bags = bags,
                                .epoch = number,
                                .epoch_steps = epoch->steps,
                                .epoch_bags = epoch->bags,
                                .epoch_loss_sum = epoch->loss_sum,
                                .epoch_seconds = now_s() - epoch->started};
    char err[400];
    ember_status_t status = trainer_ckpt_save(t, &p, err, sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: %s", t->index, err);
    return EMBER_OK;
}

/* Before step @step: a checkpoint to announce (trainer0) or ask for, and
 * an evaluation when one is due. */
static ember_status_t before_step(trainer_t *t, uint64_t step, int last)
{
    char err[400];
    EMBER_CHECK(may_go_on(t, step));
    ember_status_t status = ember_checkpoint_step_begin(t->ckpt, step, last, err, sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d step %llu: %s", t->index,
                            (unsigned long long)step, err);
    return eval_due(t, step, 0) ? evaluate(t, step) : EMBER_OK;
}

/* Step @step trained (not a resumed job's step passed by): its loss
 * counted, the epoch reported when it ends, a checkpoint after it. */
static ember_status_t train_step(trainer_t *t, uint64_t step, step_batch_t *cur, step_batch_t *next,
                                 epoch_t *epoch, train_msg_done_t *done)
{
    const int last = !next->have;
    const int ends = last || next->epoch != cur->epoch;
    /* The next step's batch is looked up while this one flies, unless an
     * evaluation comes first (its lookups would meet them). */
    const int ahead = !last && !eval_due(t, step + 1, 0);
    float loss = 0.0f;
    EMBER_CHECK(before_step(t, step, last));
    ember_status_t status = run_step(t, step, cur, next, last, ahead, &loss);
    if (status != EMBER_OK)
        return blame_master(t, status, step);
    EMBER_CHECK(keep_loss(t, step, loss));
    done->bags += cur->batch.examples;
    epoch->loss_sum += loss;
    epoch->bags += cur->batch.examples;
    epoch->steps++;
    const epoch_t so_far = *epoch;
    EMBER_CHECK(report_progress(t, step + 1, cur->epoch, &so_far, done->bags - t->resumed.bags));
    if (ends)
        epoch_report(t, epoch, cur->epoch);
    /* A checkpoint after this step holds the epoch the next step trains:
     * the next one, from nothing, when this step ended it; this one and its
     * counts so far when it goes on or the step count (--steps) stopped it
     * part-way, as a resumed job with more steps goes on with it. */
    if (!ends || next->capped)
        return ckpt_after(t, step + 1, &so_far, cur->epoch, done->bags);
    return ckpt_after(t, step + 1, epoch, cur->epoch + 1, done->bags);
}

/* A resumed job's step @step passed by: when it is the last before the
 * start and ends the epoch the checkpoint holds part of (the step count
 * stopped the job there as the data's epoch ended), that epoch is
 * reported, as it would have been had the job not stopped. */
static void pass_step(trainer_t *t, uint64_t step, const step_batch_t *cur,
                      const step_batch_t *next, epoch_t *epoch)
{
    const int ends = !next->have || next->epoch != cur->epoch;
    if (step + 1 == t->start.head.start_step && ends && epoch->steps &&
        t->resumed.epoch == cur->epoch)
        epoch_report(t, epoch, cur->epoch);
}

/* A resumed job: the losses so far and the epoch in progress as the
 * checkpoint has them. */
static ember_status_t resume(trainer_t *t, epoch_t *epoch)
{
    char err[400];
    if (!t->start.resume[0])
        return EMBER_OK;
    ember_status_t status = trainer_ckpt_resume(t, err, sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(t, status, "trainer %d: resuming: %s", t->index, err);
    const train_progress_t *p = &t->resumed;
    epoch->steps = p->epoch_steps;
    epoch->bags = p->epoch_bags;
    epoch->loss_sum = p->epoch_loss_sum;
    epoch->started = now_s() - p->epoch_seconds;
    return EMBER_OK;
}

/* The end of the loop: what it holds given back, the last pushes taken,
 * the final evaluation. */
static ember_status_t finish(trainer_t *t, ember_status_t status, uint64_t ran, int stopped,
                             epoch_t *epoch)
{
    epoch_report_wait(t, epoch);
    if (status == EMBER_OK)
        status = report_answer(t);
    if (status == EMBER_OK && ember_ebc_flush(t->ebc) != EMBER_OK)
        status = step_failed(t, EMBER_ERR_TRANSPORT, ran ? ran - 1 : 0, ember_ebc_error(t->ebc),
                             NULL, 1);
    if (status == EMBER_OK && !stopped && eval_due(t, ran, 1))
        status = evaluate(t, ran);
    return status;
}

/* Every epoch (or the model's steps), then the last pushes taken and the
 * final evaluation. */
static ember_status_t train_loop(trainer_t *t, train_msg_done_t *done)
{
    const uint64_t cap = t->model->max_steps(t->config), start = t->start.head.start_step;
    const double started = now_s();
    epoch_t epoch = {.started = started};
    step_batch_t cur, next = {.have = 0};
    uint64_t step = 0;
    int stopped = 0;
    ember_status_t status = resume(t, &epoch);
    done->bags = t->resumed.bags;
    if (status == EMBER_OK)
        status = take_batch(t, 0, 0, &cur);
    t->phase_mark = now_s();
    while (status == EMBER_OK && cur.have) {
        next = (step_batch_t){.capped = cap && step + 1 == cap};
        phase_end(t, TRAIN_PHASE_OTHER);
        if (!next.capped)
            status = take_batch(t, step + 1, cur.epoch, &next);
        phase_end(t, TRAIN_PHASE_DATA);
        if (status == EMBER_OK && step >= start)
            status = train_step(t, step, &cur, &next, &epoch, done);
        else if (status == EMBER_OK)
            pass_step(t, step, &cur, &next, &epoch);
        t->model->release(t->model_trainer);
        step++;
        if (status != EMBER_OK || (stopped = ember_checkpoint_stops(t->ckpt, step)))
            break;
        cur = next;
        next.have = 0;
    }
    if (next.have) /* taken ahead of a stop (its lookup, if made, goes with the ebc) */
        t->model->release(t->model_trainer);
    status = finish(t, status, step, stopped, &epoch);
    phase_end(t, TRAIN_PHASE_OTHER);
    done->steps = step;
    done->seconds = now_s() - started;
    memcpy(done->phase_seconds, t->phase_s, sizeof(done->phase_seconds));
    ember_ebc_cache_stats_t cache;
    ember_ebc_cache_stats(t->ebc, &cache);
    done->cache_lookups = cache.lookups;
    done->cache_hits = cache.hits;
    done->cache_stale = cache.stale_hits;
    done->cache_oldest = cache.oldest;
    done->cache_inserted = cache.inserted;
    done->cache_evicted = cache.evicted;
    done->cache_rows = cache.rows;
    return status;
}

/* ---- the process -------------------------------------------------------------------- */

/* The longest a failed trainer waits for the master's verdict: the master
 * answers within a poll (half a second) when it is alive. */
#define TRAINER_VERDICT_S 2.0

/* After this trainer's own failure (bad input, a refusal; not a lost or
 * silent peer): the master reports it and then aborts the job; wait for
 * that abort (or the master's loss), TRAINER_VERDICT_S at most.  A
 * launcher stops every rank as soon as one exits failed, so an exit at
 * once could cut the master's report short.  A peer lost or timed out may
 * be a cut network, where the master is out of reach and waiting would
 * only hold this rank's own report back. */
static void await_verdict(trainer_t *t, ember_status_t status)
{
    if (status == EMBER_ERR_PEER_LOST || status == EMBER_ERR_TIMED_OUT)
        return;
    const double until = now_s() + TRAINER_VERDICT_S;
    while (!*ember_job_aborted(t->job) && !ember_job_peer_lost(t->job, t->master) &&
           now_s() < until)
        ember_job_wait(t->job, 0.1);
}

/* Train, then answer TRAIN_START: the totals, the losses and the final
 * dense parameters, or the error. */
static ember_status_t run_job(trainer_t *t)
{
    train_msg_done_t done = {0};
    ember_status_t status = trainer_setup(t);
    if (status == EMBER_OK)
        status = train_loop(t, &done);
    if (status != EMBER_OK) {
        if (!t->err[0])
            snprintf(t->err, sizeof(t->err), "trainer %d: %s", t->index,
                     ember_status_string(status));
        ember_rpc_reply_error(t->start_req, status, "%s", t->err);
        await_verdict(t, status);
        return status;
    }
    const size_t nparams = t->model->params(t->config);
    ember_iov_t iov[3] = {{&done, sizeof(done)},
                          {t->losses, done.steps * sizeof(float)},
                          {t->model->trainer_params(t->model_trainer), nparams * sizeof(float)}};
    ember_rpc_reply(t->start_req, EMBER_OK, iov, 3);
    return EMBER_OK;
}

static void trainer_cleanup(trainer_t *t)
{
    ember_future_release(t->report_future);
    if (t->model && t->model_trainer)
        t->model->trainer_destroy(t->model_trainer);
    ember_ebc_destroy(t->ebc);
    for (size_t k = 0; k < t->ntables; k++)
        ember_table_close(t->tables[k]);
    ember_checkpoint_close(t->ckpt);
    ember_allreduce_destroy(t->allreduce);
    ember_device_close(t->device);
    train_start_free(&t->start);
    free(t->config);
    free(t->losses);
}

ember_status_t train_trainer_run(ember_job_t *job, const train_job_t *tj)
{
    int index;
    ember_job_role(job, ember_job_rank(job), &index);
    trainer_t t = {.job = job,
                   .tj = tj,
                   .index = index,
                   .trainers = ember_job_trainers(job),
                   .master = ember_job_coordinator(job)};
    ember_tp_t *tp = ember_job_transport(job);
    ember_rpc_register(tp, TRAIN_OP_START, on_start, &t);
    ember_status_t status = wait_start(&t);
    if (status == EMBER_OK)
        status = run_job(&t);
    /* A late start must find no handler, not a returned frame. */
    ember_rpc_register(tp, TRAIN_OP_START, NULL, NULL);
    trainer_cleanup(&t);
    return status;
}
