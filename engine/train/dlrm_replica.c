/* engine/train/dlrm_replica: DLRM's dense half on a trainer's device (see
 * dlrm_replica.h). */
#include "engine/train/dlrm_replica.h"

#include "engine/device/scratch.h"
#include "engine/ops/dlrm.h"
#include "engine/ops/interaction.h"
#include "engine/ops/optimizer.h"
#include "engine/train/dlrm_arch.h"
#include "engine/train/dlrm_io.h"
#include "engine/train/replica.h"

#include <ember/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MLPS 2 /* DenseArch, OverArch */

struct ember_dlrm_replica {
    const ember_trainer_dev_t *td;
    ember_device_comm_t *comm;
    ember_tp_t *tp;
    ember_dlrm_t *model; /* the host parameters and their initialisation */
    ember_dlrm_arch_t arch[MLPS];
    ember_opt_t *optimizer[MLPS];
    ember_device_req_t *bucket[MLPS];
    float *flat; /* the parameters as one array, for the master */
    size_t nparams, tables, dim, dense_features, width;
    /* The last forward's (device memory): its pooled block (borrowed), the
     * dense arch's output, the logits; and the device's copies of the
     * dense features and labels (unused on "cpu", which reads the host's). */
    size_t batch;
    const float *pooled, *dense_out, *logits;
    ember_scratch_t dense, labels, inter, grad_inter, grad_dense, grad_logits;
};

/* The widths of DenseArch (13 inputs, then its sizes) and OverArch (the
 * interaction's width, then its sizes). */
static void arch_widths(const ember_dlrm_config_t *shape, size_t width, size_t dense[],
                        size_t over[])
{
    dense[0] = shape->dense_features;
    memcpy(dense + 1, shape->dense_sizes, shape->dense_layers * sizeof(size_t));
    over[0] = width;
    memcpy(over + 1, shape->over_sizes, shape->over_layers * sizeof(size_t));
}

/* The host model from @params, its two MLPs on the device. */
static ember_status_t replica_model(ember_dlrm_replica_t *replica,
                                    const ember_train_config_t *config, const float *params)
{
    ember_dlrm_config_t shape;
    size_t dense[EMBER_DLRM_LAYERS_MAX + 1], over[EMBER_DLRM_LAYERS_MAX + 1];
    ember_dlrm_shape(config, &shape);
    EMBER_CHECK(ember_dlrm_create(&shape, config->seed, &replica->model));
    const ember_interaction_shape_t inter = {
            .features = shape.tables + 1, .dim = shape.dim, .batch = 1};
    replica->tables = shape.tables;
    replica->dim = shape.dim;
    replica->dense_features = shape.dense_features;
    replica->width = ember_interaction_width(&inter);
    arch_widths(&shape, replica->width, dense, over);
    ember_mlp_t *mlp[MLPS] = {ember_dlrm_dense_arch(replica->model),
                              ember_dlrm_over_arch(replica->model)};
    size_t at = 0;
    for (int m = 0; m < MLPS; m++) {
        size_t n = ember_mlp_num_params(mlp[m]);
        memcpy(ember_mlp_params(mlp[m]), params + at, n * sizeof(float));
        at += n;
    }
    replica->nparams = at;
    EMBER_CHECK(ember_dlrm_arch_init(&replica->arch[0], replica->td, mlp[0], dense,
                                     shape.dense_layers, 1));
    return ember_dlrm_arch_init(&replica->arch[1], replica->td, mlp[1], over, shape.over_layers, 0);
}

ember_status_t ember_dlrm_replica_create(const ember_train_config_t *config, const float *params,
                                         const ember_trainer_dev_t *td, ember_device_comm_t *comm,
                                         ember_tp_t *tp, ember_dlrm_replica_t **replica_p)
{
    ember_dlrm_replica_t *replica = calloc(1, sizeof(*replica));
    if (!replica)
        return EMBER_ERR_NO_MEMORY;
    *replica = (ember_dlrm_replica_t){.td = td, .comm = comm, .tp = tp};
    *replica_p = replica;
    EMBER_CHECK(replica_model(replica, config, params));
    ember_opt_config_t dense = config->optimizer;
    if (dense.kind == EMBER_OPT_ROWWISE_ADAGRAD)
        ember_opt_config_default(EMBER_OPT_ADAGRAD, dense.lr, &dense);
    for (int m = 0; m < MLPS; m++)
        EMBER_CHECK(ember_opt_create(&dense, 1, replica->arch[m].nparams, EMBER_OPT_DENSE,
                                     &replica->optimizer[m]));
    replica->flat = malloc(replica->nparams * sizeof(float));
    return replica->flat ? EMBER_OK : EMBER_ERR_NO_MEMORY;
}

void ember_dlrm_replica_destroy(ember_dlrm_replica_t *replica)
{
    if (!replica)
        return;
    const ember_trainer_dev_t *td = replica->td;
    for (int m = 0; m < MLPS; m++) {
        if (replica->bucket[m])
            td->ops->allreduce_wait(replica->bucket[m]);
        ember_opt_destroy(replica->optimizer[m]);
        ember_dlrm_arch_cleanup(&replica->arch[m]);
    }
    ember_scratch_t *all[] = {&replica->dense,      &replica->labels,     &replica->inter,
                              &replica->grad_inter, &replica->grad_dense, &replica->grad_logits};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        ember_scratch_free(td->device, all[i]);
    ember_dlrm_destroy(replica->model);
    free(replica->flat);
    free(replica);
}

/* The step's buffers on the device for @batch examples. */
static ember_status_t replica_reserve(ember_dlrm_replica_t *replica, size_t batch)
{
    const ember_trainer_dev_t *td = replica->td;
    const size_t f = sizeof(float), wide = batch * replica->width * f;
    EMBER_CHECK(ember_scratch_reserve(td->device, &replica->inter, wide));
    EMBER_CHECK(ember_scratch_reserve(td->device, &replica->grad_inter, wide));
    EMBER_CHECK(ember_scratch_reserve(td->device, &replica->grad_dense, batch * replica->dim * f));
    EMBER_CHECK(ember_scratch_reserve(td->device, &replica->grad_logits, batch * f));
    if (td->on_host)
        return EMBER_OK;
    EMBER_CHECK(ember_scratch_reserve(td->device, &replica->labels, batch * f));
    return ember_scratch_reserve(td->device, &replica->dense, batch * replica->dense_features * f);
}

/* @host [n] floats where the device reads them: themselves on "cpu", else
 * copied into @scratch (reserved). */
static ember_status_t place(const ember_trainer_dev_t *td, ember_scratch_t *scratch,
                            const float *host, size_t n, const float **where_p)
{
    if (td->on_host) {
        *where_p = host;
        return EMBER_OK;
    }
    *where_p = scratch->data;
    return ember_trainer_to_device(td, scratch->data, host, n * sizeof(float));
}

/* DenseArch, InteractionArch and OverArch over @batch examples: the
 * logits in replica->logits (device memory). */
static ember_status_t replica_logits(ember_dlrm_replica_t *replica, const float *dense,
                                     const float *pooled, size_t batch)
{
    const ember_trainer_dev_t *td = replica->td;
    const float *x;
    if (!dense || (!pooled && replica->tables) || batch == 0)
        return EMBER_ERR_INVALID_PARAM;
    EMBER_CHECK(replica_reserve(replica, batch));
    EMBER_CHECK(place(td, &replica->dense, dense, batch * replica->dense_features, &x));
    EMBER_CHECK(ember_dlrm_arch_forward(&replica->arch[0], x, batch, &replica->dense_out));
    EMBER_CHECK(td->ops->interaction_forward(td->device, replica->dense_out, pooled,
                                             replica->tables, batch, replica->dim,
                                             replica->inter.data));
    EMBER_CHECK(ember_dlrm_arch_forward(&replica->arch[1], replica->inter.data, batch,
                                        &replica->logits));
    replica->pooled = pooled;
    replica->batch = batch;
    return EMBER_OK;
}

ember_status_t ember_dlrm_replica_forward(ember_dlrm_replica_t *replica, const float *dense,
                                          const float *pooled, size_t batch, const float *labels,
                                          float *loss_p, char *err, size_t err_length)
{
    const ember_trainer_dev_t *td = replica->td;
    const float *targets;
    EMBER_CHECK(replica_logits(replica, dense, pooled, batch));
    EMBER_CHECK(place(td, &replica->labels, labels, batch, &targets));
    float loss = 0.0f;
    ember_status_t status = td->ops->bce_with_logits(td->device, replica->logits, targets, batch,
                                                     &loss, replica->grad_logits.data);
    if (status == EMBER_OK && !isfinite(loss))
        status = EMBER_ERR_NUMERIC;
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status,
                                 "the loss is not finite (%s); nothing of this step is applied",
                                 ember_status_string(status));
    *loss_p = loss;
    return EMBER_OK;
}

/* MLP @m's gradients to the allreduce, averaged over the trainers. */
static ember_status_t bucket_start(ember_dlrm_replica_t *replica, int m, char *err,
                                   size_t err_length)
{
    const ember_trainer_dev_t *td = replica->td;
    ember_dlrm_arch_t *arch = &replica->arch[m];
    ember_status_t status = td->ops->allreduce_start(replica->comm, arch->grads, arch->nparams, 1,
                                                     &replica->bucket[m]);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "allreduce: %s",
                                 td->ops->comm_error(replica->comm));
    return EMBER_OK;
}

ember_status_t ember_dlrm_replica_backward(ember_dlrm_replica_t *replica, float *grad_pooled,
                                           char *err, size_t err_length)
{
    const ember_trainer_dev_t *td = replica->td;
    if (replica->batch == 0 || (!grad_pooled && replica->tables))
        return EMBER_ERR_INVALID_PARAM;
    EMBER_CHECK(ember_dlrm_arch_backward(&replica->arch[1], replica->grad_logits.data,
                                         replica->grad_inter.data));
    /* OverArch's bucket travels while the layers below are computed. */
    EMBER_CHECK(bucket_start(replica, 1, err, err_length));
    EMBER_CHECK(td->ops->interaction_backward(
            td->device, replica->dense_out, replica->pooled, replica->tables, replica->batch,
            replica->dim, replica->grad_inter.data, replica->grad_dense.data, grad_pooled));
    EMBER_CHECK(ember_dlrm_arch_backward(&replica->arch[0], replica->grad_dense.data, NULL));
    return bucket_start(replica, 0, err, err_length);
}

ember_status_t ember_dlrm_replica_step(ember_dlrm_replica_t *replica, const int *aborted, char *err,
                                       size_t err_length)
{
    EMBER_CHECK(ember_replica_buckets_wait(replica->td, replica->comm, replica->tp, replica->bucket,
                                           MLPS, aborted, err, err_length));
    for (int m = 0; m < MLPS; m++)
        EMBER_CHECK(ember_dlrm_arch_step(&replica->arch[m], replica->optimizer[m]));
    return EMBER_OK;
}

ember_status_t ember_dlrm_replica_logits(ember_dlrm_replica_t *replica, const float *dense,
                                         const float *pooled, size_t batch, float *logits)
{
    EMBER_CHECK(replica_logits(replica, dense, pooled, batch));
    replica->batch = 0; /* no backward follows */
    return ember_trainer_to_host(replica->td, logits, replica->logits, batch * sizeof(float));
}

size_t ember_dlrm_replica_optimizers(ember_dlrm_replica_t *replica, ember_opt_t **out)
{
    for (int m = 0; m < MLPS; m++)
        out[m] = replica->optimizer[m];
    return MLPS;
}

const float *ember_dlrm_replica_params(ember_dlrm_replica_t *replica, size_t *nparams_p)
{
    size_t at = 0;
    for (int m = 0; m < MLPS; m++) {
        size_t n = replica->arch[m].nparams;
        memcpy(replica->flat + at, ember_mlp_params(replica->arch[m].mlp), n * sizeof(float));
        at += n;
    }
    *nparams_p = replica->nparams;
    return replica->flat;
}
