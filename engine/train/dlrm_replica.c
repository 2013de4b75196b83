/* engine/train/dlrm_replica: DLRM's dense half on a trainer (see
 * dlrm_replica.h). */
#include "engine/train/dlrm_replica.h"

#include "common/reserve.h"
#include "engine/ops/dlrm.h"
#include "engine/ops/loss.h"
#include "engine/ops/optimizer.h"
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
    ember_dlrm_t *model;
    ember_mlp_t *mlp[MLPS];
    ember_opt_t *optimizer[MLPS];
    ember_device_req_t *bucket[MLPS];
    float *flat; /* the parameters as one array, for the master */
    size_t nparams;
    ember_buffer_t logits, grad; /* [batch] */
    size_t batch;
};

ember_status_t ember_dlrm_replica_create(const ember_train_config_t *config, const float *params,
                                         const ember_trainer_dev_t *td, ember_device_comm_t *comm,
                                         ember_tp_t *tp, ember_dlrm_replica_t **replica_p)
{
    ember_dlrm_config_t shape;
    ember_dlrm_replica_t *replica = calloc(1, sizeof(*replica));
    if (!replica)
        return EMBER_ERR_NO_MEMORY;
    *replica = (ember_dlrm_replica_t){.td = td, .comm = comm, .tp = tp};
    *replica_p = replica;
    ember_dlrm_shape(config, &shape);
    EMBER_CHECK(ember_dlrm_create(&shape, config->seed, &replica->model));
    replica->mlp[0] = ember_dlrm_dense_arch(replica->model);
    replica->mlp[1] = ember_dlrm_over_arch(replica->model);
    ember_opt_config_t dense = config->optimizer;
    if (dense.kind == EMBER_OPT_ROWWISE_ADAGRAD)
        ember_opt_config_default(EMBER_OPT_ADAGRAD, dense.lr, &dense);
    size_t at = 0;
    for (int m = 0; m < MLPS; m++) {
        size_t n = ember_mlp_num_params(replica->mlp[m]);
        memcpy(ember_mlp_params(replica->mlp[m]), params + at, n * sizeof(float));
        at += n;
        EMBER_CHECK(ember_opt_create(&dense, 1, n, EMBER_OPT_DENSE, &replica->optimizer[m]));
    }
    replica->nparams = at;
    replica->flat = malloc(at * sizeof(float));
    return replica->flat ? EMBER_OK : EMBER_ERR_NO_MEMORY;
}

void ember_dlrm_replica_destroy(ember_dlrm_replica_t *replica)
{
    if (!replica)
        return;
    for (int m = 0; m < MLPS; m++) {
        if (replica->bucket[m])
            replica->td->ops->allreduce_wait(replica->bucket[m]);
        ember_opt_destroy(replica->optimizer[m]);
    }
    ember_dlrm_destroy(replica->model);
    ember_buffer_free(&replica->logits);
    ember_buffer_free(&replica->grad);
    free(replica->flat);
    free(replica);
}

ember_status_t ember_dlrm_replica_forward(ember_dlrm_replica_t *replica, const float *dense,
                                          const float *const *pooled, size_t batch,
                                          const float *labels, float *loss_p, char *err,
                                          size_t err_length)
{
    if (!ember_buffer_reserve(&replica->logits, batch * sizeof(float) + 4) ||
        !ember_buffer_reserve(&replica->grad, batch * sizeof(float) + 4))
        return EMBER_ERR_NO_MEMORY;
    float *logits = replica->logits.data;
    replica->batch = batch;
    EMBER_CHECK(ember_dlrm_forward(replica->model, dense, pooled, batch, logits));
    float loss = 0.0f;
    ember_status_t status = ember_bce_with_logits(logits, labels, batch, &loss, replica->grad.data);
    if (status == EMBER_OK && !isfinite(loss))
        status = EMBER_ERR_NUMERIC;
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status,
                                 "the loss is not finite (%s); nothing of this step is applied",
                                 ember_status_string(status));
    *loss_p = loss;
    return EMBER_OK;
}

ember_status_t ember_dlrm_replica_backward(ember_dlrm_replica_t *replica, float *const *grad_pooled,
                                           char *err, size_t err_length)
{
    const ember_trainer_dev_t *td = replica->td;
    EMBER_CHECK(ember_dlrm_backward(replica->model, replica->grad.data, grad_pooled));
    for (int m = MLPS; m-- > 0;) {
        ember_mlp_t *mlp = replica->mlp[m];
        ember_status_t status =
                td->ops->allreduce_start(replica->comm, ember_mlp_grads(mlp),
                                         ember_mlp_num_params(mlp), 1, &replica->bucket[m]);
        if (status != EMBER_OK)
            return ember_status_text(err, err_length, status, "allreduce: %s",
                                     td->ops->comm_error(replica->comm));
    }
    return EMBER_OK;
}

ember_status_t ember_dlrm_replica_step(ember_dlrm_replica_t *replica, const int *aborted, char *err,
                                       size_t err_length)
{
    EMBER_CHECK(ember_replica_buckets_wait(replica->td, replica->comm, replica->tp, replica->bucket,
                                           MLPS, aborted, err, err_length));
    for (int m = 0; m < MLPS; m++) {
        ember_mlp_t *mlp = replica->mlp[m];
        EMBER_CHECK(ember_opt_step_dense(replica->optimizer[m], ember_mlp_params(mlp),
                                         ember_mlp_grads(mlp), ember_mlp_num_params(mlp)));
    }
    return EMBER_OK;
}

ember_status_t ember_dlrm_replica_logits(ember_dlrm_replica_t *replica, const float *dense,
                                         const float *const *pooled, size_t batch, float *logits)
{
    return ember_dlrm_forward(replica->model, dense, pooled, batch, logits);
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
        size_t n = ember_mlp_num_params(replica->mlp[m]);
        memcpy(replica->flat + at, ember_mlp_params(replica->mlp[m]), n * sizeof(float));
        at += n;
    }
    *nparams_p = replica->nparams;
    return replica->flat;
}
