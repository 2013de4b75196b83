/*
 * engine/train/trainer: a trainer process, from the master's TRAIN_START
 * to its answer.
 *
 * One step, phase by phase (trainer_step): take the batch and check it;
 * split it by shard and look the rows up (engine/train/sparse); combine the
 * shards' parts into the dense model's input; forward and loss, then the
 * backward, whose layer gradients go to the allreduce as they are made
 * (engine/train/replica); push each shard the gradient of its part (the
 * distributed autograd context is (trainer, step) on the PS); wait for the
 * allreduce and step the dense optimizer.  Each epoch is reported to the
 * master as it ends.
 */
#include "engine/train/trainer.h"

#include "common/clock.h"
#include "common/reserve.h"
#include "engine/train/data.h"
#include "engine/train/dlrm_trainer.h"
#include "engine/train/pipeline.h"
#include "engine/train/replica.h"
#include "engine/train/sparse.h"
#include "engine/train/trainer_ckpt.h"
#include "engine/wire/codec.h"

#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ember_tp_t *tp;
    int index, trainers;
    /* from the master */
    int started, aborted;
    char abort_text[256];
    ember_rpc_req_t *start_req; /* answered when training ends */
    ember_msg_train_start_t spec;
    float *start_params; /* the initial dense parameters it sent */
    /* where the step runs */
    ember_trainer_dev_t td;
    ember_device_comm_t *comm;
    ember_mem_type_t net_mem; /* the device's network path */
    ember_pipeline_t *pipe;   /* the table's lookups, two steps' (engine/train/pipeline) */
    /* What a split step keeps of its batch (the source reuses its arrays):
     * step s's in [s % 2]. */
    struct {
        ember_buffer_t targets; /* int64 [bags] */
        size_t bags;
    } batches[2];
    ember_buffer_t offsets; /* the batch's offsets and n: its segment's [bags + 1] */
    ember_replica_t *replica;
    ember_dlrm_trainer_t *dlrm; /* a DLRM job's tables, data and dense half */
    float *losses;
    size_t losses_capacity;
    ember_trainer_ckpt_t *ckpt;    /* NULL: no checkpoints */
    int stopped;                   /* at a SIGTERM's checkpoint */
    ember_ckpt_progress_t resumed; /* a resumed job's progress at its start */
    uint64_t steps;                /* this trainer's, in all */
    char step_err[400];
    const char *step_table; /* the table step_err is about, if one */
    char err[512];
} trainer_t;

static ember_status_t trainer_fail(trainer_t *trainer, ember_status_t status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static ember_status_t trainer_fail(trainer_t *trainer, ember_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(trainer->err, sizeof(trainer->err), fmt, ap);
    va_end(ap);
    ember_error("trainer", "%s", trainer->err);
    return status;
}

/* ---- the master's requests ---------------------------------------------- */

static void on_start(ember_rpc_req_t *req, void *arg)
{
    trainer_t *trainer = arg;
    size_t length;
    const uint8_t *data = ember_rpc_req_data(req, &length);
    ember_wire_train_start_view_t start;
    char err[200];

    if (trainer->started) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM,
                              "trainer%d: bad or repeated TRAIN_START", trainer->index);
        return;
    }
    ember_status_t status =
            ember_wire_train_start_unpack(data, length, trainer->index, &start, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    trainer->start_params = malloc(start.nparams * sizeof(float));
    if (!trainer->start_params) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    memcpy(trainer->start_params, start.params, start.nparams * sizeof(float));
    trainer->spec = start.spec;
    trainer->start_req = req;
    trainer->started = 1;
}

static void on_abort(ember_rpc_req_t *req, void *arg)
{
    trainer_t *trainer = arg;
    size_t length;
    const char *text = ember_rpc_req_data(req, &length);
    snprintf(trainer->abort_text, sizeof(trainer->abort_text), "%.*s",
             (int)(length > 200 ? 200 : length), text);
    trainer->aborted = 1;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* The master is gone: the job is over, whatever else failed because of it
 * (a PS that stopped with it). */
static ember_status_t master_lost(trainer_t *trainer, uint64_t step)
{
    int master = (int)trainer->spec.master_rank;
    return trainer_fail(trainer, EMBER_ERR_PEER_LOST,
                        "trainer %d step %llu: the master (rank %d) was lost: %s", trainer->index,
                        (unsigned long long)step, master,
                        ember_tp_peer_reason(trainer->tp, master));
}

/* A phase of @step failed with @status, its cause in step_err: reported
 * naming the trainer and the step, unless the master's end is the cause. */
static ember_status_t step_failed(trainer_t *trainer, ember_status_t status, uint64_t step)
{
    const unsigned long long s = (unsigned long long)step;
    if (ember_tp_peer_lost(trainer->tp, (int)trainer->spec.master_rank))
        return master_lost(trainer, step);
    if (trainer->aborted)
        return trainer_fail(trainer, status < 0 ? status : EMBER_ERR_CANCELED,
                            "trainer %d step %llu: job aborted: %s", trainer->index, s,
                            trainer->abort_text);
    if (!trainer->step_err[0])
        return trainer_fail(trainer, status, "trainer %d step %llu: %s", trainer->index, s,
                            ember_status_string(status));
    if (trainer->step_table)
        return trainer_fail(trainer, status, "table %s: trainer %d step %llu: %s",
                            trainer->step_table, trainer->index, s, trainer->step_err);
    return trainer_fail(trainer, status, "trainer %d step %llu: %s", trainer->index, s,
                        trainer->step_err);
}

/* Run one phase of @step; a failure ends the step, reported. */
#define STEP_PHASE(trainer, step, call)                           \
    do {                                                          \
        (trainer)->step_err[0] = '\0';                            \
        (trainer)->step_table = NULL;                             \
        ember_status_t phase_status_ = (call);                    \
        if (phase_status_ != EMBER_OK)                            \
            return step_failed((trainer), phase_status_, (step)); \
    } while (0)

/* ---- one step ----------------------------------------------------------- */

/* Targets of the classes the model has, and at least one bag. */
static ember_status_t batch_check_targets(trainer_t *trainer, const ember_batch_t *batch, char *err,
                                          size_t err_length)
{
    const size_t classes = trainer->spec.config.classes;
    for (size_t b = 0; b < batch->bags; b++) {
        if (batch->targets[b] < 0 || (uint64_t)batch->targets[b] >= classes)
            return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                     "target %lld of bag %zu is out of range [0, %zu)",
                                     (long long)batch->targets[b], b, classes);
    }
    if (batch->bags == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "batch has no bags");
    return EMBER_OK;
}

/* What the split does not check of the source's batch (one-dimensional
 * input with offsets, as PyTorch's EmbeddingBag takes it): its offsets
 * start at 0, its weights are one a value. */
static ember_status_t batch_check_shape(const ember_batch_t *batch, char *err, size_t err_length)
{
    if (batch->bags > 0 && batch->offsets[0] != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "offsets[0] is %lld, must be 0", (long long)batch->offsets[0]);
    if (!batch->weights && batch->n_weights != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "per-sample weights length %zu given without weights",
                                 batch->n_weights);
    if (batch->weights && batch->n_weights != batch->n)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "per-sample weights length %zu does not match indices length %zu",
                                 batch->n_weights, batch->n);
    return EMBER_OK;
}

/* The step's batch, its shape and targets checked (its ids and offsets are
 * checked as the split reads them, as PyTorch's EmbeddingBag would). */
static ember_status_t batch_take(trainer_t *trainer, ember_data_t *data, uint64_t step,
                                 ember_batch_t *batch, char *err, size_t err_length)
{
    char why[320];
    ember_status_t status = ember_data_next(data, step, batch, why, sizeof(why));
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "no batch: %s", why);
    status = batch_check_shape(batch, err, err_length);
    if (status != EMBER_OK) {
        trainer->step_table = EMBER_TRAIN_TABLE_NAME; /* the batch is wrong for it */
        return status;
    }
    return batch_check_targets(trainer, batch, err, err_length);
}

/* The batch as the table's one segment: its offsets followed by n (the
 * split takes [bags + 1] offsets). */
static ember_status_t batch_segment(trainer_t *trainer, const ember_batch_t *batch,
                                    ember_sparse_segment_t *segment)
{
    if (!ember_buffer_reserve(&trainer->offsets, (batch->bags + 1) * sizeof(int64_t)))
        return EMBER_ERR_NO_MEMORY;
    int64_t *offsets = trainer->offsets.data;
    if (batch->bags)
        memcpy(offsets, batch->offsets, batch->bags * sizeof(int64_t));
    offsets[batch->bags] = (int64_t)batch->n;
    *segment = (ember_sparse_segment_t){.values = batch->indices,
                                        .offsets = offsets,
                                        .weights = batch->weights,
                                        .bags = batch->bags,
                                        .name = EMBER_TRAIN_TABLE_NAME};
    return EMBER_OK;
}

/* Step @step's batch taken, checked and split into its slot of the
 * pipeline; its targets kept. */
static ember_status_t trainer_prepare(trainer_t *trainer, ember_data_t *data, uint64_t step,
                                      char *err, size_t err_length)
{
    ember_batch_t batch;
    ember_sparse_segment_t segment;
    EMBER_CHECK(batch_take(trainer, data, step, &batch, err, err_length));
    if (batch_segment(trainer, &batch, &segment) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    const ember_sparse_input_t input = {.segments = &segment, .count = 1};
    ember_status_t status = ember_pipeline_split(trainer->pipe, &input, step, err, err_length);
    if (status != EMBER_OK) {
        /* A batch the table refuses: the table named around it. */
        trainer->step_table = ember_sparse_split_table(ember_pipeline_sparse(trainer->pipe, step));
        return status;
    }
    ember_buffer_t *targets = &trainer->batches[step % 2].targets;
    if (!ember_buffer_reserve(targets, batch.bags * sizeof(int64_t) + 8))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    memcpy(targets->data, batch.targets, batch.bags * sizeof(int64_t));
    trainer->batches[step % 2].bags = batch.bags;
    return EMBER_OK;
}

/* The lookups of @step: built (unless the step before built them), sent
 * (unless they left already) and their replies in.  The next step's are
 * built meanwhile; with staleness they leave once these replies are in,
 * and fly while this step computes. */
static ember_status_t trainer_lookups(trainer_t *trainer, ember_data_t *data, uint64_t step)
{
    char *err = trainer->step_err;
    const size_t n = sizeof(trainer->step_err);
    const int ahead = step + 1 < trainer->steps;
    const int stale = ember_pipeline_staleness(trainer->pipe) > 0;
    if (!ember_pipeline_is_split(trainer->pipe, step))
        STEP_PHASE(trainer, step, trainer_prepare(trainer, data, step, err, n));
    /* A refusal of the last push by the PS comes back with this lookup. */
    STEP_PHASE(trainer, step, ember_pipeline_send(trainer->pipe, step, err, n));
    if (ahead && !stale)
        STEP_PHASE(trainer, step + 1, trainer_prepare(trainer, data, step + 1, err, n));
    STEP_PHASE(trainer, step, ember_pipeline_wait(trainer->pipe, step, err, n));
    if (ahead && stale) {
        STEP_PHASE(trainer, step + 1, trainer_prepare(trainer, data, step + 1, err, n));
        STEP_PHASE(trainer, step + 1, ember_pipeline_send(trainer->pipe, step + 1, err, n));
    }
    return EMBER_OK;
}

static ember_status_t trainer_step(trainer_t *trainer, ember_data_t *data, uint64_t step,
                                   float *loss_p, size_t *bags_p)
{
    char *err = trainer->step_err;
    const size_t n = sizeof(trainer->step_err);
    const int last = step + 1 == trainer->steps;
    ember_sparse_t *sparse = ember_pipeline_sparse(trainer->pipe, step);
    float *x;
    const float *grad_x;

    EMBER_CHECK(trainer_lookups(trainer, data, step));
    const size_t bags = trainer->batches[step % 2].bags;
    const int64_t *targets = trainer->batches[step % 2].targets.data;
    STEP_PHASE(trainer, step, ember_replica_reserve(trainer->replica, bags, &x));
    STEP_PHASE(trainer, step, ember_sparse_combine(sparse, 0, x));
    STEP_PHASE(trainer, step, ember_replica_forward(trainer->replica, targets, loss_p, err, n));
    STEP_PHASE(trainer, step, ember_replica_backward(trainer->replica, &grad_x, err, n));
    STEP_PHASE(trainer, step, ember_sparse_push(sparse, &grad_x, step, last, err, n));
    STEP_PHASE(trainer, step, ember_replica_step(trainer->replica, &trainer->aborted, err, n));
    *bags_p = bags;
    return EMBER_OK;
}

/* ---- the training loop -------------------------------------------------- */

/* The lookups and the dense replica, on the device, for the master's spec. */
static ember_status_t trainer_setup(trainer_t *trainer)
{
    const ember_msg_train_start_t *spec = &trainer->spec;
    /* The device path, unless the replies are fp16 (widened on the host). */
    int rdma = !trainer->td.on_host && trainer->net_mem == EMBER_MEM_CUDA;
    if (rdma && spec->config.half_replies) {
        rdma = 0;
        ember_info("trainer",
                   "trainer %d: fp16 replies are widened on the host: this "
                   "job's replies and pushes go through pinned host buffers",
                   trainer->index);
    }
    ember_sparse_config_t table = {.table_id = spec->table_id,
                                   .table_name = EMBER_TRAIN_TABLE_NAME,
                                   .num_ps = spec->num_ps,
                                   .first_ps_rank = (int)spec->first_ps_rank,
                                   .rows = spec->config.rows,
                                   .dim = spec->config.dim,
                                   .mode = (ember_bag_mode_t)spec->config.mode,
                                   .padding_idx = spec->config.padding_idx,
                                   .half_replies = (int)spec->config.half_replies,
                                   .trainer = trainer->index,
                                   .async = spec->config.consistency == EMBER_ASYNC,
                                   .staleness = spec->config.staleness};
    EMBER_CHECK(ember_pipeline_create(&table, 1, trainer->tp, &trainer->td, rdma, &trainer->aborted,
                                      &trainer->pipe));
    return ember_replica_create(&trainer->td, trainer->comm, trainer->tp, spec,
                                trainer->start_params, &trainer->replica);
}

/* Before each step: the job still runs. */
static ember_status_t trainer_may_go_on(trainer_t *trainer, uint64_t step)
{
    if (trainer->aborted)
        return trainer_fail(trainer, EMBER_ERR_CANCELED, "trainer %d: job aborted: %s",
                            trainer->index, trainer->abort_text);
    if (ember_tp_peer_lost(trainer->tp, (int)trainer->spec.master_rank))
        return master_lost(trainer, step);
    return EMBER_OK;
}

/* Whatever failed, a lost master is the cause (its death ended the others,
 * which the step then found gone): its loss gets a moment to be noticed
 * before the error stands. */
static ember_status_t trainer_blame_master(trainer_t *trainer, ember_status_t status, uint64_t step)
{
    const int master = (int)trainer->spec.master_rank;
    double until = ember_time_now() + 0.25;
    while (!ember_tp_peer_lost(trainer->tp, master) && !trainer->aborted &&
           ember_time_now() < until)
        ember_tp_wait(trainer->tp, 0.01);
    return ember_tp_peer_lost(trainer->tp, master) ? master_lost(trainer, step) : status;
}

/* One epoch's totals, sent to the master while the next epoch runs. */
typedef struct {
    ember_msg_epoch_report_t msg; /* owned by the call in flight */
    ember_future_t *future;
    uint64_t steps, bags;
    double loss_sum, started;
} epoch_t;

static void epoch_report_wait(trainer_t *trainer, epoch_t *epoch)
{
    if (!epoch->future)
        return;
    ember_status_t status;
    while ((status = ember_future_test(epoch->future)) == EMBER_INPROGRESS && !trainer->aborted)
        ember_tp_wait(trainer->tp, 0.2);
    if (status != EMBER_OK)
        ember_warn("trainer", "trainer %d: an epoch report was lost", trainer->index);
    ember_future_release(epoch->future);
    epoch->future = NULL;
}

/* The largest step - version of this trainer's lookups so far. */
static uint64_t trainer_staleness_seen(const trainer_t *trainer)
{
    if (trainer->dlrm)
        return ember_dlrm_trainer_staleness_seen(trainer->dlrm);
    return trainer->pipe ? ember_pipeline_staleness_seen(trainer->pipe) : 0;
}

static void epoch_report(trainer_t *trainer, epoch_t *epoch, uint32_t number)
{
    double now = ember_time_now();
    epoch_report_wait(trainer, epoch); /* one report in flight at a time */
    epoch->msg = (ember_msg_epoch_report_t){.trainer = (uint32_t)trainer->index,
                                            .epoch = number,
                                            .steps = epoch->steps,
                                            .bags = epoch->bags,
                                            .loss_sum = epoch->loss_sum,
                                            .seconds = now - epoch->started,
                                            .staleness = trainer_staleness_seen(trainer)};
    ember_iov_t iov[2];
    size_t iovcnt = ember_wire_pack_iov(&epoch->msg, sizeof(epoch->msg), NULL, 0, iov);
    ember_rpc_call_async(trainer->tp, (int)trainer->spec.master_rank, EMBER_OP_EPOCH_REPORT, iov,
                         iovcnt, NULL, 0, 0, &epoch->future);
    epoch->started = now;
    epoch->steps = epoch->bags = 0;
    epoch->loss_sum = 0.0;
}

/* ---- checkpoints (engine/train/trainer_ckpt) ---------------------------- */

/* The dense optimizers of either model. */
static size_t trainer_optimizers(trainer_t *trainer, ember_opt_t **opts)
{
    if (trainer->dlrm)
        return ember_dlrm_trainer_optimizers(trainer->dlrm, opts);
    opts[0] = ember_replica_optimizer(trainer->replica);
    return 1;
}

/* A resumed job: the optimizers, the losses so far and the epoch in
 * progress as the checkpoint has them. */
static ember_status_t trainer_resume(trainer_t *trainer, epoch_t *epoch)
{
    const ember_msg_train_start_t *spec = &trainer->spec;
    ember_opt_t *opts[EMBER_CKPT_OPTS_MAX];
    size_t nopts = trainer_optimizers(trainer, opts);
    const uint64_t k = spec->start_step;
    if (!spec->resume_dir[0])
        return EMBER_OK;
    if (!EMBER_RESERVE(trainer->losses, trainer->losses_capacity, k + 1))
        return trainer_fail(trainer, EMBER_ERR_NO_MEMORY, "trainer %d: out of memory",
                            trainer->index);
    char err[400];
    ember_status_t status = ember_trainer_ckpt_resume(
            spec, opts, nopts, &trainer->resumed,
            spec->resume_from == (uint32_t)trainer->index ? trainer->losses : NULL, err,
            sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(trainer, status, "trainer %d: resuming: %s", trainer->index, err);
    const ember_ckpt_progress_t *p = &trainer->resumed;
    epoch->steps = p->epoch_steps;
    epoch->bags = p->epoch_bags;
    epoch->loss_sum = p->epoch_loss_sum;
    epoch->started = ember_time_now() - p->epoch_seconds;
    return EMBER_OK;
}

/* After @steps steps, when one is due: this trainer's file of it. */
static ember_status_t trainer_ckpt_after(trainer_t *trainer, uint64_t steps, const epoch_t *epoch,
                                         uint32_t epoch_number, uint64_t bags)
{
    if (!ember_trainer_ckpt_due(trainer->ckpt, steps))
        return EMBER_OK;
    ember_opt_t *opts[EMBER_CKPT_OPTS_MAX];
    ember_ckpt_trainer_state_t state = {
            .nopts = trainer_optimizers(trainer, opts), .opts = opts, .losses = trainer->losses};
    state.params = trainer->dlrm ? ember_dlrm_trainer_params(trainer->dlrm, &state.nparams)
                                 : ember_replica_params(trainer->replica, &state.nparams);
    state.progress = (ember_ckpt_progress_t){.steps = steps,
                                             .bags = bags,
                                             .epoch = epoch_number,
                                             .epoch_steps = epoch->steps,
                                             .epoch_bags = epoch->bags,
                                             .epoch_loss_sum = epoch->loss_sum,
                                             .epoch_seconds = ember_time_now() - epoch->started};
    char err[400];
    ember_status_t status = ember_trainer_ckpt_write(trainer->ckpt, &state, err, sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(trainer, status, "trainer %d: %s", trainer->index, err);
    return EMBER_OK;
}

/* Before step @step: a checkpoint to announce (trainer0) or ask for. */
static ember_status_t trainer_ckpt_before(trainer_t *trainer, uint64_t step, int last)
{
    char err[400];
    ember_status_t status = ember_trainer_ckpt_before(trainer->ckpt, step, last, err, sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(trainer, status, "trainer %d step %llu: %s", trainer->index,
                            (unsigned long long)step, err);
    return EMBER_OK;
}

static ember_status_t trainer_train(trainer_t *trainer, ember_data_t *data,
                                    ember_msg_train_done_t *done_p)
{
    const uint64_t steps = ember_data_steps(data);
    const uint32_t per_epoch = trainer->spec.config.data == EMBER_DATA_REPLAY
                                       ? (uint32_t)steps
                                       : trainer->spec.config.batches;
    const double start = ember_time_now();
    epoch_t epoch = {.started = start};
    ember_status_t status = EMBER_OK;

    trainer->steps = steps;
    if (!EMBER_RESERVE(trainer->losses, trainer->losses_capacity, steps + 1))
        return EMBER_ERR_NO_MEMORY;
    EMBER_CHECK(trainer_resume(trainer, &epoch));
    done_p->bags = trainer->resumed.bags;
    uint64_t step = trainer->spec.start_step;
    for (; step < steps; step++) {
        float loss = 0.0f;
        size_t bags = 0;
        EMBER_CHECK(trainer_may_go_on(trainer, step));
        EMBER_CHECK(trainer_ckpt_before(trainer, step, step + 1 == steps));
        status = trainer_step(trainer, data, step, &loss, &bags);
        if (status != EMBER_OK) {
            status = trainer_blame_master(trainer, status, step);
            break;
        }
        trainer->losses[step] = loss;
        done_p->bags += bags;
        epoch.loss_sum += loss;
        epoch.bags += bags;
        if (++epoch.steps == per_epoch || step + 1 == steps)
            epoch_report(trainer, &epoch, (uint32_t)(step / per_epoch));
        EMBER_CHECK(trainer_ckpt_after(trainer, step + 1, &epoch,
                                       (uint32_t)((step + 1) / per_epoch), done_p->bags));
        if (ember_trainer_ckpt_stops(trainer->ckpt, step + 1)) {
            step++;
            break;
        }
    }
    const uint64_t ran = step < steps ? step : steps;
    epoch_report_wait(trainer, &epoch);
    /* The last step's pushes: the PS must have taken them. */
    if (status == EMBER_OK) {
        trainer->step_err[0] = '\0';
        ember_status_t pushed = ember_pipeline_pushes_wait(trainer->pipe, ran, trainer->step_err,
                                                           sizeof(trainer->step_err));
        if (pushed != EMBER_OK)
            status = step_failed(trainer, pushed, ran - 1);
    }
    done_p->steps = ran;
    done_p->seconds = ember_time_now() - start;
    return status;
}

/* ---- the process -------------------------------------------------------- */

/* The device, how its data meets the network, and the dense group's
 * communicator (NCCL on GPUs, the ring over the transport on the CPU). */
static ember_status_t trainer_open_device(trainer_t *trainer, const char *device, int local_rank)
{
    const char *path;
    int *ranks = malloc((size_t)trainer->trainers * sizeof(int));
    if (!ranks)
        return EMBER_ERR_NO_MEMORY;
    for (int t = 0; t < trainer->trainers; t++)
        ranks[t] = t;
    ember_status_t status = ember_device_open(device, local_rank, &trainer->td.device);
    if (status == EMBER_OK) {
        trainer->td.ops = ember_device_ops(trainer->td.device);
        trainer->td.on_host = ember_device_mem_type(trainer->td.device) == EMBER_MEM_HOST;
        /* Decided and logged once. */
        status = trainer->td.ops->network_path(trainer->td.device, &trainer->net_mem, &path);
    }
    if (status == EMBER_OK)
        status = trainer->td.ops->comm_create(trainer->td.device, trainer->tp, ranks,
                                              trainer->trainers, EMBER_OP_ALLREDUCE_BASE,
                                              &trainer->comm);
    free(ranks);
    if (status != EMBER_OK) {
        ember_error("trainer", "trainer %d: no %s device or communicator: %s", trainer->index,
                    device, ember_status_string(status));
        ember_device_close(trainer->td.device);
        trainer->td.device = NULL;
    }
    return status;
}

/* The handlers take this frame's state: unregistered on every way out. */
static void trainer_register(trainer_t *trainer, int on)
{
    ember_rpc_register(trainer->tp, EMBER_OP_TRAIN_START, on ? on_start : NULL,
                       on ? trainer : NULL);
    ember_rpc_register(trainer->tp, EMBER_OP_ABORT, on ? on_abort : NULL, on ? trainer : NULL);
}

/* Until the master's TRAIN_START (or ABORT).  A failed barrier ends the job
 * (it said who did not come); the master is watched from here on, so its
 * death is noticed between its words. */
static ember_status_t trainer_wait_start(trainer_t *trainer)
{
    ember_tp_t *tp = trainer->tp;
    int master = ember_tp_peer_by_name(tp, "master");
    ember_status_t status = ember_tp_barrier(tp, "roles-ready");
    if (status == EMBER_OK && master >= 0)
        status = ember_tp_watch(tp, master);
    while (status == EMBER_OK && !trainer->started && !trainer->aborted) {
        ember_tp_wait(tp, 0.5);
        if (master >= 0 && ember_tp_peer_lost(tp, master)) {
            ember_error("trainer",
                        "trainer %d: the master (rank %d) was lost before training started: %s",
                        trainer->index, master, ember_tp_peer_reason(tp, master));
            status = EMBER_ERR_PEER_LOST;
        }
    }
    if (status == EMBER_OK && !trainer->started) {
        ember_error("trainer", "trainer %d: job aborted before training: %s", trainer->index,
                    trainer->abort_text);
        status = EMBER_ERR_CANCELED;
    }
    return status;
}

/* ---- a DLRM job --------------------------------------------------------- */

/* Whether the job has an evaluation after @steps steps. */
static int dlrm_eval_due(const trainer_t *trainer, uint64_t steps, int at_end)
{
    const uint64_t every = trainer->spec.config.dlrm.eval_every;
    return ember_dlrm_trainer_evaluates(trainer->dlrm) &&
           (at_end || (every && steps && steps % every == 0));
}

/* The evaluation after @steps steps, when the job has one due. */
static ember_status_t dlrm_eval_if_due(trainer_t *trainer, uint64_t steps, int at_end)
{
    if (!dlrm_eval_due(trainer, steps, at_end))
        return EMBER_OK;
    STEP_PHASE(trainer, steps,
               ember_dlrm_trainer_eval(trainer->dlrm, steps, trainer->step_err,
                                       sizeof(trainer->step_err)));
    return EMBER_OK;
}

/* A step's loss kept for the master (a DLRM job's count is the data's). */
static ember_status_t dlrm_keep_loss(trainer_t *trainer, uint64_t step, float loss)
{
    if (!EMBER_RESERVE(trainer->losses, trainer->losses_capacity, step + 1))
        return trainer_fail(trainer, EMBER_ERR_NO_MEMORY, "trainer %d: out of memory",
                            trainer->index);
    trainer->losses[step] = loss;
    return EMBER_OK;
}

/* One step of epoch @e (its batch taken; @more: the epoch has another):
 * evaluation first when due, a checkpoint after it when due.  A resumed
 * job's steps before its start only pass their batches by. */
static ember_status_t dlrm_step(trainer_t *trainer, uint64_t step, int last, int more, uint32_t e,
                                epoch_t *epoch, ember_msg_train_done_t *done)
{
    char *err = trainer->step_err;
    const size_t n = sizeof(trainer->step_err);
    float loss = 0.0f;
    size_t examples = 0;
    if (step < trainer->spec.start_step)
        return EMBER_OK;
    EMBER_CHECK(trainer_may_go_on(trainer, step));
    EMBER_CHECK(trainer_ckpt_before(trainer, step, last));
    EMBER_CHECK(dlrm_eval_if_due(trainer, step, 0));
    /* The next step's batch may be taken and looked up ahead, unless an
     * evaluation comes first (its lookups would meet them). */
    const int ahead = more && !last && !dlrm_eval_due(trainer, step + 1, 0);
    STEP_PHASE(trainer, step,
               ember_dlrm_trainer_step(trainer->dlrm, step, last, ahead, &loss, &examples, err, n));
    EMBER_CHECK(dlrm_keep_loss(trainer, step, loss));
    done->bags += examples;
    epoch->loss_sum += loss;
    epoch->bags += examples;
    epoch->steps++;
    return trainer_ckpt_after(trainer, step + 1, epoch, e, done->bags);
}

/* Epoch @e: its steps until its data or the job's --steps end; *@stop_p
 * when the job is over. */
static ember_status_t dlrm_epoch(trainer_t *trainer, uint32_t e, uint64_t *step_p, epoch_t *epoch,
                                 ember_msg_train_done_t *done, int *stop_p)
{
    const ember_train_config_t *config = &trainer->spec.config;
    char *err = trainer->step_err;
    const size_t n = sizeof(trainer->step_err);
    int have, more;
    STEP_PHASE(trainer, *step_p, ember_dlrm_trainer_take(trainer->dlrm, &have, &more, err, n));
    if (!have)
        return trainer_fail(trainer, EMBER_ERR_INVALID_PARAM,
                            "trainer %d: %s holds fewer examples than one step (%u trainers x "
                            "batch %u)",
                            trainer->index, config->dlrm.data, trainer->trainers,
                            config->dlrm.batch_size);
    while (have) {
        const uint64_t step = *step_p;
        const int last = (config->dlrm.steps && step + 1 == config->dlrm.steps) ||
                         (e + 1 == config->epochs && !more);
        EMBER_CHECK(dlrm_step(trainer, step, last, more, e, epoch, done));
        *step_p = step + 1;
        trainer->stopped = ember_trainer_ckpt_stops(trainer->ckpt, step + 1);
        *stop_p = last || trainer->stopped;
        if (*stop_p || !more)
            break;
        STEP_PHASE(trainer, *step_p, ember_dlrm_trainer_take(trainer->dlrm, &have, &more, err, n));
    }
    if (*step_p >= trainer->spec.start_step) /* a resumed job's earlier epochs were reported */
        epoch_report(trainer, epoch, e);
    return EMBER_OK;
}

/* Every epoch (or --steps), then the last pushes taken and the final
 * evaluation. */
static ember_status_t dlrm_train(trainer_t *trainer, ember_msg_train_done_t *done)
{
    const double start = ember_time_now();
    epoch_t epoch = {.started = start};
    uint64_t steps = 0;
    int stop = 0;
    ember_status_t status = trainer_resume(trainer, &epoch);
    done->bags = trainer->resumed.bags;
    for (uint32_t e = 0; status == EMBER_OK && !stop && e < trainer->spec.config.epochs; e++)
        status = dlrm_epoch(trainer, e, &steps, &epoch, done, &stop);
    epoch_report_wait(trainer, &epoch);
    if (status == EMBER_OK) {
        trainer->step_err[0] = '\0';
        status = ember_dlrm_trainer_pushes_wait(trainer->dlrm, steps, trainer->step_err,
                                                sizeof(trainer->step_err));
        if (status != EMBER_OK)
            status = step_failed(trainer, status, steps - 1);
    }
    if (status == EMBER_OK && !trainer->stopped)
        status = dlrm_eval_if_due(trainer, steps, 1);
    if (status != EMBER_OK)
        return trainer_blame_master(trainer, status, steps);
    trainer->steps = done->steps = steps;
    done->seconds = ember_time_now() - start;
    return EMBER_OK;
}

static ember_status_t trainer_run_dlrm(trainer_t *trainer, ember_msg_train_done_t *done)
{
    ember_dlrm_trainer_args_t args = {.spec = &trainer->spec,
                                      .params = trainer->start_params,
                                      .tp = trainer->tp,
                                      .td = &trainer->td,
                                      .comm = trainer->comm,
                                      .aborted = &trainer->aborted,
                                      /* fp16 replies are widened on the host */
                                      .rdma = !trainer->td.on_host &&
                                              trainer->net_mem == EMBER_MEM_CUDA &&
                                              !trainer->spec.config.half_replies};
    char err[400];
    ember_status_t status = ember_dlrm_trainer_create(&args, &trainer->dlrm, err, sizeof(err));
    if (status != EMBER_OK)
        return trainer_fail(trainer, status, "trainer %d: %s", trainer->index, err);
    return dlrm_train(trainer, done);
}

/* The tutorial's job: its table's lookups, the dense replica, the data. */
static ember_status_t trainer_run_tutorial(trainer_t *trainer, ember_msg_train_done_t *done)
{
    ember_data_t *data = NULL;
    ember_status_t status = trainer_setup(trainer);
    if (status == EMBER_OK) {
        status = ember_data_create(&trainer->spec, &data, trainer->err, sizeof(trainer->err));
        if (status != EMBER_OK)
            trainer_fail(trainer, status, "trainer %d: %s", trainer->index, trainer->err);
    }
    if (status == EMBER_OK)
        status = trainer_train(trainer, data, done);
    ember_data_destroy(data);
    return status;
}

/* Train, then answer TRAIN_START: the totals, the losses and the final
 * dense parameters, or the error. */
static ember_status_t trainer_run_job(trainer_t *trainer)
{
    ember_msg_train_done_t done = {0};
    const int dlrm = trainer->spec.config.model == EMBER_MODEL_DLRM;
    ember_status_t status = ember_trainer_ckpt_create(trainer->tp, &trainer->spec,
                                                      &trainer->aborted, &trainer->ckpt);
    if (status == EMBER_OK)
        status = dlrm ? trainer_run_dlrm(trainer, &done) : trainer_run_tutorial(trainer, &done);
    if (status != EMBER_OK) {
        if (!trainer->err[0])
            snprintf(trainer->err, sizeof(trainer->err), "trainer %d: %s", trainer->index,
                     ember_status_string(status));
        ember_rpc_reply_error(trainer->start_req, status, "%s", trainer->err);
        return status;
    }
    size_t nparams;
    const float *params = dlrm ? ember_dlrm_trainer_params(trainer->dlrm, &nparams)
                               : ember_replica_params(trainer->replica, &nparams);
    ember_iov_t iov[3] = {{&done, sizeof(done)},
                          {trainer->losses, done.steps * sizeof(float)},
                          {params, nparams * sizeof(float)}};
    ember_rpc_reply(trainer->start_req, EMBER_OK, iov, 3);
    return EMBER_OK;
}

static void trainer_cleanup(trainer_t *trainer)
{
    ember_trainer_ckpt_destroy(trainer->ckpt);
    ember_dlrm_trainer_destroy(trainer->dlrm);
    ember_pipeline_destroy(trainer->pipe);
    for (int i = 0; i < 2; i++)
        ember_buffer_free(&trainer->batches[i].targets);
    ember_buffer_free(&trainer->offsets);
    ember_replica_destroy(trainer->replica);
    free(trainer->start_params);
    free(trainer->losses);
    if (trainer->td.device) {
        trainer->td.ops->comm_destroy(trainer->comm);
        ember_device_close(trainer->td.device);
    }
}

ember_status_t ember_trainer_run(ember_tp_t *tp, int index, int trainers, const char *device,
                                 int local_rank)
{
    trainer_t trainer = {.tp = tp, .index = index, .trainers = trainers};
    ember_status_t status = trainer_open_device(&trainer, device, local_rank);
    if (status != EMBER_OK)
        return status;
    trainer_register(&trainer, 1);
    status = trainer_wait_start(&trainer);
    if (status == EMBER_OK)
        status = trainer_run_job(&trainer);
    /* A late start or abort must find no handler, not a returned frame. */
    trainer_register(&trainer, 0);
    trainer_cleanup(&trainer);
    return status;
}
