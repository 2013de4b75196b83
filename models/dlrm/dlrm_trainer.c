/*
 * models/dlrm/dlrm_trainer: a trainer's side of DLRM: its share of the
 * examples (<ember/data.h> under the job's schema, read ahead by the
 * stream's thread; a step's batch stays in the stream's ring while the
 * lookups read it, never copied), and the dense half on its device:
 * DenseArch and OverArch (models/common/mlp, each MLP's gradients one
 * bucket of the allreduce), the interaction (InteractionArch's dots, or
 * DLRM_DCN's cross layers, their parameters models/common/params and one
 * bucket) and BCE through the device's slots (on "cpu" the engine's host
 * ops: the same bits as the host model).
 */
#include "models/dlrm/dlrm.h"

#include "models/common/buf.h"
#include "models/common/mlp.h"
#include "models/common/params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Held at most: a step's batch and the next step's (an epoch's end
 * between them holds nothing). */
#define HOLD 2

typedef struct {
    dlrm_config_t config;
    ember_device_t *device;
    const ember_device_ops_t *ops;
    int trainer, trainers;
    uint64_t seed; /* the job's: MLPerf's multi-hot draws */
    ember_data_t *data, *eval_data;
    int in_epoch; /* the epoch has given a batch */
    /* The batches held (a step's and the next one's), by the parity of
     * their taking: a slot is written again only once released. */
    ember_data_batch_t held[HOLD];
    uint64_t taken, released;
    ember_data_batch_t held_eval;
    model_mlp_t dense_arch, over_arch;
    model_params_t cross; /* DLRM_DCN's cross layers (count 0: none) */
    float *flat;          /* the dense parameters as one array */
    size_t batch;         /* the last forward's */
    const float *pooled, *dense_out, *logits;
    model_buf_t dense, labels, inter, grad_inter, grad_dense, grad_logits, grad_pooled, saved;
} dlrm_trainer_t;

static ember_status_t open_stream(dlrm_trainer_t *t, const char *source, int eval, uint32_t hold,
                                  ember_data_t **data_p, char *err, size_t err_length)
{
    ember_schema_t *schema = NULL;
    EMBER_CHECK(dlrm_schema(&t->config, &schema, err, err_length));
    const ember_data_config_t config = {
            .source = source,
            .schema = schema,
            .trainer = (uint32_t)t->trainer,
            .trainers = (uint32_t)t->trainers,
            .batch = t->config.batch_size,
            .eval = eval,
            .hold = hold,
            .multi_hot_sizes = t->config.multi_hots ? t->config.multi_hot : NULL,
            .multi_hot_dist = (ember_multi_hot_dist_t)t->config.multi_hot_dist,
            .multi_hot_seed = t->seed};
    ember_status_t status = ember_data_open(&config, data_p, err, err_length);
    ember_schema_free(schema);
    return status;
}

/* DenseArch (a ReLU after its last layer too, as TorchRec's) and OverArch
 * from the flat parameters. */
static ember_status_t archs_init(dlrm_trainer_t *t, const ember_model_trainer_args_t *args)
{
    size_t dense[DLRM_MLP_MAX + 1], over[DLRM_MLP_MAX + 1];
    dlrm_widths(&t->config, dense, over);
    const model_mlp_config_t d = {.widths = dense,
                                  .layers = t->config.dense_layers,
                                  .relu_last = 1,
                                  .optimizer = &args->settings->optimizer,
                                  .params = args->params};
    EMBER_CHECK(model_mlp_init(&t->dense_arch, args->device, args->allreduce, &d));
    const size_t cross = dlrm_cross_params(&t->config);
    if (cross)
        EMBER_CHECK(model_params_init(&t->cross, args->device, args->allreduce, cross,
                                      args->params + t->dense_arch.nparams,
                                      &args->settings->optimizer));
    const model_mlp_config_t o = {.widths = over,
                                  .layers = t->config.over_layers,
                                  .optimizer = &args->settings->optimizer,
                                  .params = args->params + t->dense_arch.nparams + cross};
    return model_mlp_init(&t->over_arch, args->device, args->allreduce, &o);
}

ember_status_t dlrm_trainer_create(const ember_model_trainer_args_t *args, void **trainer_p,
                                   char *err, size_t err_length)
{
    dlrm_trainer_t *t = calloc(1, sizeof(*t));
    if (!t)
        return EMBER_ERR_NO_MEMORY;
    *trainer_p = t;
    t->config = *(const dlrm_config_t *)args->config;
    t->device = args->device;
    t->ops = ember_device_ops(args->device);
    t->trainer = args->trainer;
    t->trainers = args->settings->trainers;
    t->seed = args->settings->seed;
    /* A step's batch held (its forward reads its dense inputs) while the
     * next step's is taken and its lookups built (HOLD). */
    EMBER_CHECK(open_stream(t, t->config.data, 0, HOLD, &t->data, err, err_length));
    if (t->config.eval[0])
        EMBER_CHECK(open_stream(t, t->config.eval, 1, 1, &t->eval_data, err, err_length));
    t->flat = malloc(dlrm_params(&t->config) * sizeof(float));
    if (!t->flat)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = archs_init(t, args);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "DLRM's dense half: %s",
                                 ember_status_string(status));
    return EMBER_OK;
}

void dlrm_trainer_destroy(void *trainer)
{
    dlrm_trainer_t *t = trainer;
    if (!t)
        return;
    model_mlp_cleanup(&t->dense_arch);
    model_params_cleanup(&t->cross);
    model_mlp_cleanup(&t->over_arch);
    model_buf_t *bufs[] = {&t->dense,      &t->labels,      &t->inter,       &t->grad_inter,
                           &t->grad_dense, &t->grad_logits, &t->grad_pooled, &t->saved};
    for (size_t i = 0; t->device && i < sizeof(bufs) / sizeof(bufs[0]); i++)
        model_buf_free(t->device, bufs[i]);
    ember_data_close(t->data);
    ember_data_close(t->eval_data);
    free(t->flat);
    free(t);
}

/* @from's features as the stream laid them out: a keyed jagged batch read
 * where the ring holds it. */
static void batch_of(const ember_data_batch_t *from, ember_model_batch_t *out)
{
    *out = (ember_model_batch_t){.kjt = from->kjt, .examples = from->n, .own = from};
}

ember_status_t dlrm_take(void *trainer, uint64_t step, int skip, ember_model_batch_t *batch,
                         const char **table_p, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    ember_data_batch_t got;
    (void)step;
    (void)skip; /* a stream is read in order: a step passed by is read too */
    (void)table_p;
    *batch = (ember_model_batch_t){.examples = 0};
    EMBER_CHECK(ember_data_take(t->data, &got, err, err_length));
    if (got.n == 0) { /* the epoch's end (held by nobody): the next take starts the next epoch */
        const int empty = !t->in_epoch;
        t->in_epoch = 0;
        if (empty)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "%s holds fewer examples than one step (%d trainers x batch "
                                     "%u)",
                                     t->config.data, t->trainers, t->config.batch_size);
        return EMBER_OK;
    }
    t->in_epoch = 1;
    ember_data_batch_t *slot = &t->held[t->taken++ % HOLD];
    *slot = got;
    batch_of(slot, batch);
    return EMBER_OK;
}

void dlrm_release(void *trainer)
{
    dlrm_trainer_t *t = trainer;
    if (t->released == t->taken)
        return;
    t->released++;
    ember_data_release(t->data); /* the oldest batch */
}

/* The step's buffers on the device for @batch examples. */
static ember_status_t reserve(dlrm_trainer_t *t, size_t batch)
{
    const dlrm_config_t *c = &t->config;
    const size_t f = sizeof(float), width = dlrm_interaction_width(c);
    const size_t pooled = (size_t)c->num_sparse * batch * c->dim * f;
    if (c->interaction == DLRM_INTERACTION_DCN)
        EMBER_CHECK(model_buf_reserve(
                t->device, &t->saved,
                EMBER_CROSSNET_SAVED(batch, width, (size_t)c->dcn_rank, (size_t)c->dcn_layers) *
                        f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->inter, batch * width * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_inter, batch * width * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_dense, batch * t->config.dim * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_logits, batch * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_pooled, pooled));
    if (model_on_host(t->device))
        return EMBER_OK;
    EMBER_CHECK(model_buf_reserve(t->device, &t->labels, batch * f));
    return model_buf_reserve(t->device, &t->dense, batch * c->num_dense * f);
}

/* @host [n] floats where the device reads them: themselves on "cpu", else
 * copied into @buf (reserved). */
static ember_status_t place(dlrm_trainer_t *t, model_buf_t *buf, const float *host, size_t n,
                            const float **where_p)
{
    if (model_on_host(t->device)) {
        *where_p = host;
        return EMBER_OK;
    }
    *where_p = buf->data;
    return model_to_device(t->device, buf->data, host, n * sizeof(float));
}

/* The interaction of DenseArch's output and the pooled features into
 * t->inter: the pairwise dots, or the cross layers. */
static ember_status_t interaction_forward(dlrm_trainer_t *t, const float *pooled, size_t batch)
{
    const dlrm_config_t *c = &t->config;
    if (c->interaction != DLRM_INTERACTION_DCN)
        return t->ops->interaction_forward(t->device, t->dense_out, pooled, c->num_sparse, batch,
                                           c->dim, t->inter.data);
    return t->ops->crossnet_forward(t->device, t->dense_out, pooled, c->num_sparse, batch, c->dim,
                                    c->dcn_layers, c->dcn_rank, t->cross.d_params, t->saved.data,
                                    t->inter.data);
}

/* Its backward from t->grad_inter: DenseArch's output's gradient and the
 * pooled features'; the cross layers' gradients to the allreduce. */
static ember_status_t interaction_backward(dlrm_trainer_t *t, char *err, size_t err_length)
{
    const dlrm_config_t *c = &t->config;
    if (c->interaction != DLRM_INTERACTION_DCN)
        return t->ops->interaction_backward(t->device, t->dense_out, t->pooled, c->num_sparse,
                                            t->batch, c->dim, t->grad_inter.data,
                                            t->grad_dense.data, t->grad_pooled.data);
    EMBER_CHECK(t->ops->crossnet_backward(
            t->device, t->dense_out, t->pooled, c->num_sparse, t->batch, c->dim, c->dcn_layers,
            c->dcn_rank, t->cross.d_params, t->saved.data, t->grad_inter.data, t->cross.d_grads,
            t->grad_dense.data, t->grad_pooled.data));
    return model_params_bucket(&t->cross, 0, t->cross.count, err, err_length);
}

/* DenseArch, the interaction and OverArch over @from's examples: the
 * logits in t->logits (device memory). */
static ember_status_t forward_logits(dlrm_trainer_t *t, const ember_data_batch_t *from,
                                     const float *pooled)
{
    const size_t batch = from->n;
    const float *x;
    EMBER_CHECK(reserve(t, batch));
    EMBER_CHECK(place(t, &t->dense, from->dense, batch * t->config.num_dense, &x));
    EMBER_CHECK(model_mlp_forward(&t->dense_arch, x, batch, &t->dense_out));
    EMBER_CHECK(interaction_forward(t, pooled, batch));
    EMBER_CHECK(model_mlp_forward(&t->over_arch, t->inter.data, batch, &t->logits));
    t->pooled = pooled;
    t->batch = batch;
    return EMBER_OK;
}

ember_status_t dlrm_forward(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                            float *loss_p, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    const ember_data_batch_t *from = batch->own;
    const float *targets;
    EMBER_CHECK(forward_logits(t, from, pooled));
    EMBER_CHECK(place(t, &t->labels, from->labels, from->n, &targets));
    float loss = 0.0f;
    ember_status_t status = t->ops->bce_with_logits(t->device, t->logits, targets, from->n, &loss,
                                                    t->grad_logits.data);
    if (status == EMBER_OK && !isfinite(loss))
        status = EMBER_ERR_NUMERIC;
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status,
                                 "the loss is not finite (%s); nothing of this step is applied",
                                 ember_status_string(status));
    *loss_p = loss;
    return EMBER_OK;
}

ember_status_t dlrm_backward(void *trainer, const float **grad_p, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    /* OverArch's bucket travels while the layers below are computed. */
    EMBER_CHECK(model_mlp_backward(&t->over_arch, t->grad_logits.data, t->grad_inter.data, err,
                                   err_length));
    EMBER_CHECK(interaction_backward(t, err, err_length));
    EMBER_CHECK(model_mlp_backward(&t->dense_arch, t->grad_dense.data, NULL, err, err_length));
    *grad_p = t->grad_pooled.data;
    return EMBER_OK;
}

ember_status_t dlrm_step(void *trainer, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    EMBER_CHECK(model_mlp_step(&t->dense_arch, err, err_length));
    if (t->cross.count)
        EMBER_CHECK(model_params_step(&t->cross, err, err_length));
    return model_mlp_step(&t->over_arch, err, err_length);
}

const float *dlrm_trainer_params(void *trainer)
{
    dlrm_trainer_t *t = trainer;
    float *at = t->flat;
    memcpy(at, t->dense_arch.p.params, t->dense_arch.nparams * sizeof(float));
    at += t->dense_arch.nparams;
    if (t->cross.count)
        memcpy(at, t->cross.params, t->cross.count * sizeof(float));
    at += t->cross.count;
    memcpy(at, t->over_arch.p.params, t->over_arch.nparams * sizeof(float));
    return t->flat;
}

uint64_t dlrm_epoch_steps(void *trainer)
{
    const dlrm_trainer_t *t = trainer;
    const uint64_t per_step = (uint64_t)t->config.batch_size * (uint64_t)t->trainers;
    return ember_data_epoch_examples(t->data) / per_step; /* 0 until the size is known */
}

size_t dlrm_optimizers(void *trainer, ember_opt_t **out)
{
    dlrm_trainer_t *t = trainer;
    size_t n = 0;
    out[n++] = t->dense_arch.p.optimizer;
    if (t->cross.count)
        out[n++] = t->cross.optimizer;
    out[n++] = t->over_arch.p.optimizer;
    return n;
}

/* ---- evaluations ------------------------------------------------------------------ */

ember_status_t dlrm_eval_take(void *trainer, ember_model_batch_t *batch, char *err,
                              size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    *batch = (ember_model_batch_t){.examples = 0};
    /* hold 1: the evaluation's previous batch is the ring's again */
    EMBER_CHECK(ember_data_next(t->eval_data, &t->held_eval, err, err_length));
    if (t->held_eval.n == 0)
        return EMBER_OK; /* the file's end: the next evaluation reads it again */
    batch_of(&t->held_eval, batch);
    batch->labels = t->held_eval.labels;
    return EMBER_OK;
}

ember_status_t dlrm_logits(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                           float *logits, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    const ember_data_batch_t *from = batch->own;
    (void)err;
    (void)err_length;
    EMBER_CHECK(forward_logits(t, from, pooled));
    return model_to_host(t->device, logits, t->logits, from->n * sizeof(float));
}
