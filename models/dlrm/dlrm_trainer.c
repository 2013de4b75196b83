/*
 * models/dlrm/dlrm_trainer: a trainer's side of DLRM: its share of the
 * examples (<ember/criteo.h>, read ahead by the stream's thread; a step's
 * batch stays in the stream's ring while the lookups read it, never
 * copied), and the dense half on its device: DenseArch and OverArch
 * (models/common/mlp, each MLP's gradients one bucket of the allreduce),
 * InteractionArch and BCE through the device's slots (on "cpu" the
 * engine's host ops: the same bits as the host model).
 */
#include "models/dlrm/dlrm.h"

#include "models/common/buf.h"
#include "models/common/mlp.h"

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
    ember_criteo_data_t *data, *eval_data;
    int in_epoch; /* the epoch has given a batch */
    /* The batches held (a step's and the next one's), by the parity of
     * their taking: a slot is written again only once released. */
    ember_criteo_batch_t held[HOLD];
    uint64_t taken, released;
    ember_criteo_batch_t held_eval;
    model_mlp_t dense_arch, over_arch;
    int64_t *offsets; /* 0, 1, 2, ...: one value a bag, for any batch */
    float *flat;      /* the dense parameters as one array */
    size_t batch;     /* the last forward's */
    const float *pooled, *dense_out, *logits;
    model_buf_t dense, labels, inter, grad_inter, grad_dense, grad_logits, grad_pooled;
} dlrm_trainer_t;

static ember_status_t open_stream(dlrm_trainer_t *t, const char *source, int eval, uint32_t hold,
                                  ember_criteo_data_t **data_p, char *err, size_t err_length)
{
    const ember_criteo_data_config_t config = {.source = source,
                                               .trainer = (uint32_t)t->trainer,
                                               .trainers = (uint32_t)t->trainers,
                                               .batch = t->config.batch_size,
                                               .rows = t->config.rows,
                                               .eval = eval,
                                               .hold = hold};
    return ember_criteo_data_open(&config, data_p, err, err_length);
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
    const model_mlp_config_t o = {.widths = over,
                                  .layers = t->config.over_layers,
                                  .optimizer = &args->settings->optimizer,
                                  .params = args->params + t->dense_arch.nparams};
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
    /* A step's batch held (its forward reads its dense inputs) while the
     * next step's is taken and its lookups built (HOLD). */
    EMBER_CHECK(open_stream(t, t->config.data, 0, HOLD, &t->data, err, err_length));
    if (t->config.eval[0])
        EMBER_CHECK(open_stream(t, t->config.eval, 1, 1, &t->eval_data, err, err_length));
    const size_t values = (size_t)EMBER_CRITEO_SPARSE * t->config.batch_size;
    t->offsets = malloc((values + 1) * sizeof(int64_t));
    t->flat = malloc(dlrm_params(&t->config) * sizeof(float));
    if (!t->offsets || !t->flat)
        return EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i <= values; i++)
        t->offsets[i] = (int64_t)i;
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
    model_mlp_cleanup(&t->over_arch);
    model_buf_t *bufs[] = {&t->dense,      &t->labels,      &t->inter,      &t->grad_inter,
                           &t->grad_dense, &t->grad_logits, &t->grad_pooled};
    for (size_t i = 0; t->device && i < sizeof(bufs) / sizeof(bufs[0]); i++)
        model_buf_free(t->device, bufs[i]);
    ember_criteo_data_close(t->data);
    ember_criteo_data_close(t->eval_data);
    free(t->offsets);
    free(t->flat);
    free(t);
}

/* @from's 26 features as a keyed jagged batch: one id a bag, read where
 * the stream's ring holds them (feature-major, back to back, a short
 * batch's too). */
static void batch_of(dlrm_trainer_t *t, const ember_criteo_batch_t *from, ember_model_batch_t *out)
{
    const size_t n = from->n;
    *out = (ember_model_batch_t){.kjt = {.num_features = EMBER_CRITEO_SPARSE,
                                         .batch_size = n,
                                         .values = from->sparse[0],
                                         .offsets = t->offsets,
                                         .num_values = EMBER_CRITEO_SPARSE * n},
                                 .examples = n,
                                 .own = from};
}

ember_status_t dlrm_take(void *trainer, uint64_t step, int skip, ember_model_batch_t *batch,
                         const char **table_p, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    ember_criteo_batch_t got;
    (void)step;
    (void)skip; /* a stream is read in order: a step passed by is read too */
    (void)table_p;
    *batch = (ember_model_batch_t){.examples = 0};
    EMBER_CHECK(ember_criteo_data_take(t->data, &got, err, err_length));
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
    ember_criteo_batch_t *slot = &t->held[t->taken++ % HOLD];
    *slot = got;
    batch_of(t, slot, batch);
    return EMBER_OK;
}

void dlrm_release(void *trainer)
{
    dlrm_trainer_t *t = trainer;
    if (t->released == t->taken)
        return;
    t->released++;
    ember_criteo_data_release(t->data); /* the oldest batch */
}

/* The step's buffers on the device for @batch examples. */
static ember_status_t reserve(dlrm_trainer_t *t, size_t batch)
{
    const size_t f = sizeof(float), width = dlrm_interaction_width(&t->config);
    const size_t pooled = (size_t)EMBER_CRITEO_SPARSE * batch * t->config.dim * f;
    EMBER_CHECK(model_buf_reserve(t->device, &t->inter, batch * width * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_inter, batch * width * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_dense, batch * t->config.dim * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_logits, batch * f));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_pooled, pooled));
    if (model_on_host(t->device))
        return EMBER_OK;
    EMBER_CHECK(model_buf_reserve(t->device, &t->labels, batch * f));
    return model_buf_reserve(t->device, &t->dense, batch * EMBER_CRITEO_DENSE * f);
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

/* DenseArch, InteractionArch and OverArch over @from's examples: the
 * logits in t->logits (device memory). */
static ember_status_t forward_logits(dlrm_trainer_t *t, const ember_criteo_batch_t *from,
                                     const float *pooled)
{
    const size_t batch = from->n;
    const float *x;
    EMBER_CHECK(reserve(t, batch));
    EMBER_CHECK(place(t, &t->dense, from->dense, batch * EMBER_CRITEO_DENSE, &x));
    EMBER_CHECK(model_mlp_forward(&t->dense_arch, x, batch, &t->dense_out));
    EMBER_CHECK(t->ops->interaction_forward(t->device, t->dense_out, pooled, EMBER_CRITEO_SPARSE,
                                            batch, t->config.dim, t->inter.data));
    EMBER_CHECK(model_mlp_forward(&t->over_arch, t->inter.data, batch, &t->logits));
    t->pooled = pooled;
    t->batch = batch;
    return EMBER_OK;
}

ember_status_t dlrm_forward(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                            float *loss_p, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    const ember_criteo_batch_t *from = batch->own;
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
    EMBER_CHECK(t->ops->interaction_backward(
            t->device, t->dense_out, t->pooled, EMBER_CRITEO_SPARSE, t->batch, t->config.dim,
            t->grad_inter.data, t->grad_dense.data, t->grad_pooled.data));
    EMBER_CHECK(model_mlp_backward(&t->dense_arch, t->grad_dense.data, NULL, err, err_length));
    *grad_p = t->grad_pooled.data;
    return EMBER_OK;
}

ember_status_t dlrm_step(void *trainer, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    EMBER_CHECK(model_mlp_step(&t->dense_arch, err, err_length));
    return model_mlp_step(&t->over_arch, err, err_length);
}

const float *dlrm_trainer_params(void *trainer)
{
    dlrm_trainer_t *t = trainer;
    memcpy(t->flat, t->dense_arch.params, t->dense_arch.nparams * sizeof(float));
    memcpy(t->flat + t->dense_arch.nparams, t->over_arch.params,
           t->over_arch.nparams * sizeof(float));
    return t->flat;
}

size_t dlrm_optimizers(void *trainer, ember_opt_t **out)
{
    dlrm_trainer_t *t = trainer;
    out[0] = t->dense_arch.optimizer;
    out[1] = t->over_arch.optimizer;
    return 2;
}

/* ---- evaluations ------------------------------------------------------------------ */

ember_status_t dlrm_eval_take(void *trainer, ember_model_batch_t *batch, char *err,
                              size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    *batch = (ember_model_batch_t){.examples = 0};
    /* hold 1: the evaluation's previous batch is the ring's again */
    EMBER_CHECK(ember_criteo_data_next(t->eval_data, &t->held_eval, err, err_length));
    if (t->held_eval.n == 0)
        return EMBER_OK; /* the file's end: the next evaluation reads it again */
    batch_of(t, &t->held_eval, batch);
    batch->labels = t->held_eval.labels;
    return EMBER_OK;
}

ember_status_t dlrm_logits(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                           float *logits, char *err, size_t err_length)
{
    dlrm_trainer_t *t = trainer;
    const ember_criteo_batch_t *from = batch->own;
    (void)err;
    (void)err_length;
    EMBER_CHECK(forward_logits(t, from, pooled));
    return model_to_host(t->device, logits, t->logits, from->n * sizeof(float));
}
