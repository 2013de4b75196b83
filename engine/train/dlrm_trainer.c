/* engine/train/dlrm_trainer: a DLRM job's trainer (see dlrm_trainer.h). */
#include "engine/train/dlrm_trainer.h"

#include "common/reserve.h"
#include "engine/device/scratch.h"
#include "engine/io/criteo_data.h"
#include "engine/train/dlrm_replica.h"
#include "engine/train/job.h"
#include "engine/train/pipeline.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

#include <stdlib.h>
#include <string.h>

#define T_MAX EMBER_DLRM_TABLES

/* A step's examples, copied out of the stream (which holds the next). */
typedef struct {
    size_t n;
    ember_buffer_t labels, dense, sparse; /* [n], [n][13], [tables][n] */
} held_t;

struct ember_dlrm_trainer {
    ember_dlrm_trainer_args_t args;
    const ember_train_config_t *config;
    size_t tables, dim, batch;
    ember_criteo_data_t *data, *eval_data;
    ember_criteo_batch_t ahead; /* the stream's next batch (n 0: the epoch's end) */
    int ahead_valid;
    /* The step's examples in held[cur]; the next step's, taken ahead while
     * this one runs (prefetched), in held[cur ^ 1]. */
    held_t held[2];
    int cur, prefetched, prefetched_more;
    ember_pipeline_t *pipe;
    ember_dlrm_replica_t *replica;
    ember_buffer_t offsets;        /* int64 0, 1, 2, ...: one value a bag */
    size_t offsets_filled;         /* of them written */
    ember_scratch_t pooled, grads; /* [tables][batch][dim], device memory */
    /* Staged (a GPU without the device path): the tables' lookups run on a
     * host device, so every table combines into, and pushes from, the
     * pinned blocks here, and each step copies the pooled block over once
     * and its gradient back once (not once a table). */
    ember_device_t *host_device;
    ember_trainer_dev_t host_td;
    ember_scratch_t pooled_host, grads_host;
    ember_buffer_t logits, labels; /* an evaluation's, this trainer's share */
    size_t evaluated;
    char names[T_MAX][EMBER_TABLE_NAME_MAX]; /* the tables', for errors */
};

static ember_status_t open_stream(ember_dlrm_trainer_t *trainer, const char *source, int eval,
                                  ember_criteo_data_t **data_p, char *err, size_t err_length)
{
    const ember_msg_train_start_t *spec = trainer->args.spec;
    ember_criteo_data_config_t config = {.source = source,
                                         .trainer = spec->trainer,
                                         .trainers = spec->trainers,
                                         .batch = (uint32_t)trainer->batch,
                                         .rows = trainer->config->dlrm.rows,
                                         .eval = eval};
    return ember_criteo_data_open(&config, data_p, err, err_length);
}

/* Where the lookups' parts live: the host device when staged. */
static const ember_trainer_dev_t *sparse_td(const ember_dlrm_trainer_t *trainer)
{
    return trainer->host_device ? &trainer->host_td : trainer->args.td;
}

/* Staged on a GPU: a host device for the lookups. */
static ember_status_t staging_open(ember_dlrm_trainer_t *trainer)
{
    const ember_trainer_dev_t *td = trainer->args.td;
    if (td->on_host || trainer->args.rdma)
        return EMBER_OK;
    EMBER_CHECK(ember_device_open("cpu", 0, &trainer->host_device));
    trainer->host_td = (ember_trainer_dev_t){.device = trainer->host_device,
                                             .ops = ember_device_ops(trainer->host_device),
                                             .on_host = 1};
    trainer->pooled_host.pinned = trainer->grads_host.pinned = 1; /* the GPU's, for DMA */
    return EMBER_OK;
}

/* Every table's lookups, row-wise or whole as the job places them. */
static ember_status_t sparse_setup(ember_dlrm_trainer_t *trainer)
{
    const ember_msg_train_start_t *spec = trainer->args.spec;
    ember_train_job_table_t tables[EMBER_JOB_TABLES_MAX];
    ember_sparse_config_t configs[EMBER_JOB_TABLES_MAX];
    size_t count = ember_train_job_tables(trainer->config, spec->num_ps, tables);
    for (size_t t = 0; t < count; t++) {
        memcpy(trainer->names[t], tables[t].name, sizeof(trainer->names[t]));
        configs[t] = (ember_sparse_config_t){
                .table_id = tables[t].id,
                .table_name = trainer->names[t],
                .num_ps = tables[t].shards,
                .first_ps_rank = (int)(spec->first_ps_rank + tables[t].first_ps),
                .dim = tables[t].dim,
                .mode = EMBER_BAG_SUM,
                .padding_idx = -1,
                .half_replies = (int)trainer->config->half_replies,
                .trainer = (int)spec->trainer,
                .async = trainer->config->consistency == EMBER_ASYNC,
                .staleness = trainer->config->staleness};
    }
    trainer->tables = count;
    return ember_pipeline_create(configs, count, trainer->args.tp, sparse_td(trainer),
                                 trainer->args.rdma, trainer->args.aborted, &trainer->pipe);
}

/* Buffers of a batch of @n: the bags' offsets, the pooled and their grads. */
static ember_status_t reserve_batch(ember_dlrm_trainer_t *trainer, size_t n)
{
    const size_t values = trainer->tables * n * trainer->dim;
    ember_device_t *device = trainer->args.td->device;
    if (!ember_buffer_reserve(&trainer->offsets, n * sizeof(int64_t) + 8))
        return EMBER_ERR_NO_MEMORY;
    EMBER_CHECK(ember_scratch_reserve(device, &trainer->pooled, values * sizeof(float) + 4));
    EMBER_CHECK(ember_scratch_reserve(device, &trainer->grads, values * sizeof(float) + 4));
    if (trainer->host_device) {
        EMBER_CHECK(
                ember_scratch_reserve(device, &trainer->pooled_host, values * sizeof(float) + 4));
        EMBER_CHECK(
                ember_scratch_reserve(device, &trainer->grads_host, values * sizeof(float) + 4));
    }
    int64_t *offsets = trainer->offsets.data;
    for (size_t i = trainer->offsets_filled; i < n; i++)
        offsets[i] = (int64_t)i; /* they never change: written once */
    if (n > trainer->offsets_filled)
        trainer->offsets_filled = n;
    return EMBER_OK;
}

ember_status_t ember_dlrm_trainer_create(const ember_dlrm_trainer_args_t *args,
                                         ember_dlrm_trainer_t **trainer_p, char *err,
                                         size_t err_length)
{
    ember_dlrm_trainer_t *trainer = calloc(1, sizeof(*trainer));
    if (!trainer)
        return EMBER_ERR_NO_MEMORY;
    *trainer_p = trainer;
    trainer->args = *args;
    trainer->config = &args->spec->config;
    trainer->dim = trainer->config->dim;
    trainer->batch = trainer->config->dlrm.batch_size;
    EMBER_CHECK(
            open_stream(trainer, trainer->config->dlrm.data, 0, &trainer->data, err, err_length));
    if (trainer->config->dlrm.eval[0])
        EMBER_CHECK(open_stream(trainer, trainer->config->dlrm.eval, 1, &trainer->eval_data, err,
                                err_length));
    EMBER_CHECK(staging_open(trainer));
    EMBER_CHECK(sparse_setup(trainer));
    EMBER_CHECK(reserve_batch(trainer, trainer->batch));
    return ember_dlrm_replica_create(trainer->config, args->params, args->td, args->comm, args->tp,
                                     &trainer->replica);
}

void ember_dlrm_trainer_destroy(ember_dlrm_trainer_t *trainer)
{
    if (!trainer)
        return;
    ember_pipeline_destroy(trainer->pipe);
    ember_dlrm_replica_destroy(trainer->replica);
    ember_criteo_data_close(trainer->data);
    ember_criteo_data_close(trainer->eval_data);
    ember_scratch_t *scratch[] = {&trainer->pooled, &trainer->grads, &trainer->pooled_host,
                                  &trainer->grads_host};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
        ember_scratch_free(trainer->args.td->device, scratch[i]);
    ember_device_close(trainer->host_device); /* after the pipeline, its user */
    ember_buffer_t *buffers[] = {
            &trainer->held[0].labels, &trainer->held[0].dense, &trainer->held[0].sparse,
            &trainer->held[1].labels, &trainer->held[1].dense, &trainer->held[1].sparse,
            &trainer->offsets,        &trainer->logits,        &trainer->labels};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        ember_buffer_free(buffers[i]);
    free(trainer);
}

/* The stream's batch @from copied into @held. */
static ember_status_t hold(held_t *held, const ember_criteo_batch_t *from, size_t tables)
{
    const size_t n = from->n;
    if (!ember_buffer_reserve(&held->labels, n * sizeof(float) + 4) ||
        !ember_buffer_reserve(&held->dense, n * EMBER_DLRM_DENSE * sizeof(float) + 4) ||
        !ember_buffer_reserve(&held->sparse, tables * n * sizeof(int64_t) + 8))
        return EMBER_ERR_NO_MEMORY;
    memcpy(held->labels.data, from->labels, n * sizeof(float));
    memcpy(held->dense.data, from->dense, n * EMBER_DLRM_DENSE * sizeof(float));
    for (size_t t = 0; t < tables; t++)
        memcpy((int64_t *)held->sparse.data + t * n, from->sparse[t], n * sizeof(int64_t));
    held->n = n;
    return EMBER_OK;
}

/* The stream's next batch held in held[cur ^ 1] and the one after read,
 * as the next take would (which then finds it taken). */
static ember_status_t take_ahead(ember_dlrm_trainer_t *trainer, char *err, size_t err_length)
{
    EMBER_CHECK(hold(&trainer->held[trainer->cur ^ 1], &trainer->ahead, trainer->tables));
    EMBER_CHECK(ember_criteo_data_next(trainer->data, &trainer->ahead, err, err_length));
    trainer->prefetched = 1;
    trainer->prefetched_more = trainer->ahead.n > 0;
    if (!trainer->prefetched_more)
        trainer->ahead_valid = 0;
    return EMBER_OK;
}

ember_status_t ember_dlrm_trainer_take(ember_dlrm_trainer_t *trainer, int *have_p, int *more_p,
                                       char *err, size_t err_length)
{
    if (trainer->prefetched) { /* the last step took it already */
        trainer->cur ^= 1;
        trainer->prefetched = 0;
        *have_p = 1;
        *more_p = trainer->prefetched_more;
        return EMBER_OK;
    }
    if (!trainer->ahead_valid) { /* an epoch's start */
        EMBER_CHECK(ember_criteo_data_next(trainer->data, &trainer->ahead, err, err_length));
        trainer->ahead_valid = 1;
    }
    *have_p = trainer->ahead.n > 0;
    *more_p = 0;
    if (!*have_p) {
        trainer->ahead_valid = 0; /* the next take starts the next epoch */
        return EMBER_OK;
    }
    trainer->cur ^= 1;
    EMBER_CHECK(hold(&trainer->held[trainer->cur], &trainer->ahead, trainer->tables));
    EMBER_CHECK(ember_criteo_data_next(trainer->data, &trainer->ahead, err, err_length));
    *more_p = trainer->ahead.n > 0;
    if (!*more_p)
        trainer->ahead_valid = 0;
    return EMBER_OK;
}

/* Each table's bags of @n examples: one value a bag. */
static void table_batches(ember_dlrm_trainer_t *trainer, const int64_t *const *values, size_t n,
                          ember_batch_t *batches)
{
    for (size_t t = 0; t < trainer->tables; t++)
        batches[t] = (ember_batch_t){
                .indices = values[t], .n = n, .offsets = trainer->offsets.data, .bags = n};
}

/* Every table's replies of @sparse combined into trainer->pooled (on the
 * device), [tables][n][dim]: in place, or staged and copied over once. */
static ember_status_t combine_all(ember_dlrm_trainer_t *trainer, ember_sparse_t *sparse, size_t n)
{
    const size_t values = n * trainer->dim;
    float *x = trainer->host_device ? trainer->pooled_host.data : trainer->pooled.data;
    for (size_t t = 0; t < trainer->tables; t++)
        EMBER_CHECK(ember_sparse_combine(sparse, t, x + t * values));
    if (!trainer->host_device)
        return EMBER_OK;
    return ember_trainer_to_device(trainer->args.td, trainer->pooled.data, x,
                                   trainer->tables * values * sizeof(float));
}

/* The pooled gradients (device memory) where the pushes read them: in
 * place, or copied back once; @grads_p: each table's [n][dim]. */
static ember_status_t grads_out(ember_dlrm_trainer_t *trainer, size_t n, float **grads_p)
{
    const size_t values = n * trainer->dim;
    float *g = trainer->grads.data;
    if (trainer->host_device) {
        g = trainer->grads_host.data;
        EMBER_CHECK(ember_trainer_to_host(trainer->args.td, g, trainer->grads.data,
                                          trainer->tables * values * sizeof(float)));
    }
    for (size_t t = 0; t < trainer->tables; t++)
        grads_p[t] = g + t * values;
    return EMBER_OK;
}

/* Look up every table for @n examples in @sparse (an evaluation's) and pool
 * them into trainer->pooled. */
static ember_status_t lookup_all(ember_dlrm_trainer_t *trainer, ember_sparse_t *sparse,
                                 const int64_t *const *values, size_t n, uint64_t step, int eval,
                                 char *err, size_t err_length)
{
    ember_batch_t batches[T_MAX];
    EMBER_CHECK(reserve_batch(trainer, n));
    table_batches(trainer, values, n, batches);
    EMBER_CHECK(ember_sparse_split_batches(sparse, batches, step, eval, err, err_length));
    EMBER_CHECK(ember_sparse_pushes_wait(sparse, step, err, err_length));
    EMBER_CHECK(ember_sparse_lookup(sparse, err, err_length));
    return combine_all(trainer, sparse, n);
}

/* Step @step's examples (@held) split into its slot of the pipeline. */
static ember_status_t split_step(ember_dlrm_trainer_t *trainer, const held_t *held, uint64_t step,
                                 char *err, size_t err_length)
{
    const int64_t *values[T_MAX];
    ember_batch_t batches[T_MAX];
    for (size_t t = 0; t < trainer->tables; t++)
        values[t] = (const int64_t *)held->sparse.data + t * held->n;
    EMBER_CHECK(reserve_batch(trainer, held->n));
    table_batches(trainer, values, held->n, batches);
    return ember_pipeline_split(trainer->pipe, batches, step, err, err_length);
}

/* The lookups of @step: built unless the step before built them, sent
 * unless they left already, their replies in.  With @ahead the next step's
 * batch is taken and its lookups built meanwhile; with staleness they
 * leave once these replies are in, and fly while this step computes. */
static ember_status_t step_lookups(ember_dlrm_trainer_t *trainer, uint64_t step, int ahead,
                                   char *err, size_t err_length)
{
    ember_pipeline_t *pipe = trainer->pipe;
    const int stale = ember_pipeline_staleness(pipe) > 0;
    if (!ember_pipeline_is_split(pipe, step))
        EMBER_CHECK(split_step(trainer, &trainer->held[trainer->cur], step, err, err_length));
    EMBER_CHECK(ember_pipeline_send(pipe, step, err, err_length));
    if (ahead) {
        EMBER_CHECK(take_ahead(trainer, err, err_length));
        EMBER_CHECK(
                split_step(trainer, &trainer->held[trainer->cur ^ 1], step + 1, err, err_length));
    }
    if (!stale || !ahead)
        return ember_pipeline_wait(pipe, step, err, err_length);
    EMBER_CHECK(ember_pipeline_wait(pipe, step, err, err_length));
    return ember_pipeline_send(pipe, step + 1, err, err_length);
}

ember_status_t ember_dlrm_trainer_step(ember_dlrm_trainer_t *trainer, uint64_t step, int last,
                                       int ahead, float *loss_p, size_t *examples_p, char *err,
                                       size_t err_length)
{
    const held_t *held = &trainer->held[trainer->cur];
    const size_t n = held->n;
    float *grads[T_MAX];
    ember_sparse_t *sparse = ember_pipeline_sparse(trainer->pipe, step);
    EMBER_CHECK(step_lookups(trainer, step, ahead && !last, err, err_length));
    EMBER_CHECK(combine_all(trainer, sparse, n));
    EMBER_CHECK(ember_dlrm_replica_forward(trainer->replica, held->dense.data, trainer->pooled.data,
                                           n, held->labels.data, loss_p, err, err_length));
    EMBER_CHECK(
            ember_dlrm_replica_backward(trainer->replica, trainer->grads.data, err, err_length));
    EMBER_CHECK(grads_out(trainer, n, grads));
    EMBER_CHECK(
            ember_sparse_push(sparse, (const float *const *)grads, step, last, err, err_length));
    EMBER_CHECK(ember_dlrm_replica_step(trainer->replica, trainer->args.aborted, err, err_length));
    *examples_p = n;
    return EMBER_OK;
}

/* One evaluation batch's logits and labels appended to this trainer's. */
static ember_status_t eval_batch(ember_dlrm_trainer_t *trainer, const ember_criteo_batch_t *batch,
                                 uint64_t steps, char *err, size_t err_length)
{
    const size_t n = batch->n, at = trainer->evaluated;
    if (!ember_buffer_reserve(&trainer->logits, (at + n) * sizeof(float) + 4) ||
        !ember_buffer_reserve(&trainer->labels, (at + n) * sizeof(float) + 4))
        return EMBER_ERR_NO_MEMORY;
    ember_sparse_t *sparse;
    EMBER_CHECK(ember_pipeline_borrow(trainer->pipe, steps, &sparse, err, err_length));
    EMBER_CHECK(lookup_all(trainer, sparse, batch->sparse, n, steps, 1, err, err_length));
    float *logits = (float *)trainer->logits.data + at;
    EMBER_CHECK(ember_dlrm_replica_logits(trainer->replica, batch->dense, trainer->pooled.data, n,
                                          logits));
    memcpy((float *)trainer->labels.data + at, batch->labels, n * sizeof(float));
    trainer->evaluated = at + n;
    return EMBER_OK;
}

/* This trainer's share of an evaluation, to the master (a call: it has
 * taken them when this returns). */
static ember_status_t eval_send(ember_dlrm_trainer_t *trainer, uint64_t steps, char *err,
                                size_t err_length)
{
    const ember_msg_train_start_t *spec = trainer->args.spec;
    ember_msg_eval_report_t head = {
            .trainer = spec->trainer, .step = steps, .count = trainer->evaluated};
    ember_iov_t iov[3] = {{&head, sizeof(head)},
                          {trainer->logits.data, trainer->evaluated * sizeof(float)},
                          {trainer->labels.data, trainer->evaluated * sizeof(float)}};
    ember_future_t *future = NULL;
    ember_status_t status =
            ember_rpc_call_async(trainer->args.tp, (int)spec->master_rank, EMBER_OP_EVAL_REPORT,
                                 iov, 3, NULL, 0, NULL, &future);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "the evaluation's report: %s",
                                 ember_status_string(status));
    while ((status = ember_future_test(future)) == EMBER_INPROGRESS && !*trainer->args.aborted)
        ember_tp_wait(trainer->args.tp, 0.2);
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

ember_status_t ember_dlrm_trainer_eval(ember_dlrm_trainer_t *trainer, uint64_t steps, char *err,
                                       size_t err_length)
{
    ember_criteo_batch_t batch;
    trainer->evaluated = 0;
    EMBER_CHECK(ember_pipeline_pushes_wait(trainer->pipe, steps, err, err_length));
    for (;;) {
        EMBER_CHECK(ember_criteo_data_next(trainer->eval_data, &batch, err, err_length));
        if (batch.n == 0)
            break; /* the file's end: the next evaluation reads it again */
        EMBER_CHECK(eval_batch(trainer, &batch, steps, err, err_length));
    }
    return eval_send(trainer, steps, err, err_length);
}

int ember_dlrm_trainer_evaluates(const ember_dlrm_trainer_t *trainer)
{
    return trainer->eval_data != NULL;
}

ember_status_t ember_dlrm_trainer_pushes_wait(ember_dlrm_trainer_t *trainer, uint64_t step,
                                              char *err, size_t err_length)
{
    return ember_pipeline_pushes_wait(trainer->pipe, step, err, err_length);
}

uint64_t ember_dlrm_trainer_staleness_seen(const ember_dlrm_trainer_t *trainer)
{
    return ember_pipeline_staleness_seen(trainer->pipe);
}

const float *ember_dlrm_trainer_params(ember_dlrm_trainer_t *trainer, size_t *nparams_p)
{
    return ember_dlrm_replica_params(trainer->replica, nparams_p);
}

size_t ember_dlrm_trainer_optimizers(ember_dlrm_trainer_t *trainer, ember_opt_t **out)
{
    return ember_dlrm_replica_optimizers(trainer->replica, out);
}
