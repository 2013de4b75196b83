/* engine/train/replica: the dense model on the trainer's device (see
 * replica.h). */
#include "engine/train/replica.h"

#include "engine/device/scratch.h"

#include <ember/log.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS (EMBER_MAX_HIDDEN + 1)

struct ember_replica {
    const ember_trainer_dev_t *td;
    ember_device_comm_t *comm;
    ember_tp_t *tp;
    /* sizes[0] = the input's width .. sizes[layers] = classes */
    size_t layers, sizes[EMBER_MAX_HIDDEN + 2], widest, classes;
    float *params, *grads; /* host: the flat parameters (ember_dense_offset) */
    size_t nparams;
    float *d_params, *d_grads; /* on the device (the host ones on "cpu") */
    ember_opt_t *optimizer;
    /* This step's: its bags, and buffers grown rarely, never per step. */
    size_t bags;
    const int64_t *targets;          /* on the device (the batch's on "cpu") */
    ember_scratch_t d_targets;       /* their copy on a GPU */
    ember_scratch_t x, grad_x;       /* the input and its gradient */
    ember_scratch_t z[MAX_LAYERS];   /* each layer's pre-activation */
    ember_scratch_t act[MAX_LAYERS]; /* ReLU outputs: layer l's input (act[0]: x) */
    ember_scratch_t g[2];            /* gradient scratch, ping-pong */
    const float *grad_x_ready;
    ember_device_req_t *buckets[MAX_LAYERS];
};

static float *scratch_floats(const ember_scratch_t *scratch)
{
    return scratch->data;
}

/* The parameters on the device: the host copy itself on "cpu". */
static ember_status_t replica_place_params(ember_replica_t *replica)
{
    const ember_trainer_dev_t *td = replica->td;
    size_t bytes = replica->nparams * sizeof(float);
    if (td->on_host) {
        replica->d_params = replica->params;
        replica->d_grads = replica->grads;
        return EMBER_OK;
    }
    EMBER_CHECK(td->ops->mem_alloc(td->device, bytes, (void **)&replica->d_params));
    EMBER_CHECK(td->ops->mem_alloc(td->device, bytes, (void **)&replica->d_grads));
    return ember_trainer_to_device(td, replica->d_params, replica->params, bytes);
}

ember_status_t ember_replica_create(const ember_trainer_dev_t *td, ember_device_comm_t *comm,
                                    ember_tp_t *tp, const ember_msg_train_start_t *spec,
                                    const float *params, ember_replica_t **replica_p)
{
    ember_replica_t *replica = calloc(1, sizeof(*replica));
    if (!replica)
        return EMBER_ERR_NO_MEMORY;
    *replica = (ember_replica_t){.td = td, .comm = comm, .tp = tp, .classes = spec->config.classes};
    *replica_p = replica;
    replica->layers = ember_dense_sizes(spec, replica->sizes);
    replica->nparams = ember_dense_offset(replica->sizes, replica->layers);
    for (size_t l = 0; l <= replica->layers; l++) {
        if (replica->sizes[l] > replica->widest)
            replica->widest = replica->sizes[l];
    }
    replica->params = malloc(replica->nparams * sizeof(float));
    replica->grads = calloc(replica->nparams, sizeof(float));
    if (!replica->params || !replica->grads)
        return EMBER_ERR_NO_MEMORY;
    memcpy(replica->params, params, replica->nparams * sizeof(float));
    ember_opt_config_t dense = spec->config.optimizer;
    if (dense.kind == EMBER_OPT_ROWWISE_ADAGRAD)
        ember_opt_config_default(EMBER_OPT_ADAGRAD, dense.lr, &dense);
    EMBER_CHECK(
            ember_opt_create(&dense, 1, replica->nparams, EMBER_OPT_DENSE, &replica->optimizer));
    replica->d_targets.pinned = 0;
    return replica_place_params(replica);
}

void ember_replica_destroy(ember_replica_t *replica)
{
    if (!replica)
        return;
    const ember_trainer_dev_t *td = replica->td;
    ember_scratch_free(td->device, &replica->d_targets);
    ember_scratch_free(td->device, &replica->x);
    ember_scratch_free(td->device, &replica->grad_x);
    for (size_t l = 0; l < MAX_LAYERS; l++) {
        ember_scratch_free(td->device, &replica->z[l]);
        ember_scratch_free(td->device, &replica->act[l]);
    }
    ember_scratch_free(td->device, &replica->g[0]);
    ember_scratch_free(td->device, &replica->g[1]);
    if (!td->on_host) {
        td->ops->mem_free(td->device, replica->d_params);
        td->ops->mem_free(td->device, replica->d_grads);
    }
    ember_opt_destroy(replica->optimizer);
    free(replica->params);
    free(replica->grads);
    free(replica);
}

ember_status_t ember_replica_reserve(ember_replica_t *replica, size_t bags, float **x_p)
{
    ember_device_t *device = replica->td->device;
    const size_t *sizes = replica->sizes;
    replica->bags = bags;
    EMBER_CHECK(ember_scratch_reserve(device, &replica->x, bags * sizes[0] * sizeof(float)));
    EMBER_CHECK(ember_scratch_reserve(device, &replica->grad_x, bags * sizes[0] * sizeof(float)));
    if (!replica->td->on_host)
        EMBER_CHECK(ember_scratch_reserve(device, &replica->d_targets, bags * sizeof(int64_t)));
    for (size_t l = 0; l < replica->layers; l++) {
        size_t out = sizes[l + 1] * bags * sizeof(float);
        EMBER_CHECK(ember_scratch_reserve(device, &replica->z[l], out));
        if (l + 1 < replica->layers)
            EMBER_CHECK(ember_scratch_reserve(device, &replica->act[l + 1], out));
    }
    for (int k = 0; k < 2; k++)
        EMBER_CHECK(ember_scratch_reserve(device, &replica->g[k],
                                          replica->widest * bags * sizeof(float)));
    *x_p = replica->x.data;
    return EMBER_OK;
}

/* Layer @l's input: the model's input, or the ReLU of the layer below. */
static const float *layer_input(const ember_replica_t *replica, size_t l)
{
    return l == 0 ? scratch_floats(&replica->x) : scratch_floats(&replica->act[l]);
}

/* The targets where the loss reads them: the batch's own on "cpu". */
static ember_status_t place_targets(ember_replica_t *replica, const int64_t *targets)
{
    const size_t bytes = replica->bags * sizeof(int64_t);
    if (replica->td->on_host) {
        replica->targets = targets; /* read only */
        return EMBER_OK;
    }
    replica->targets = replica->d_targets.data;
    return ember_trainer_to_device(replica->td, replica->d_targets.data, targets, bytes);
}

ember_status_t ember_replica_forward(ember_replica_t *replica, const int64_t *targets,
                                     float *loss_p, char *err, size_t err_length)
{
    const ember_trainer_dev_t *td = replica->td;
    const size_t L = replica->layers, bags = replica->bags, *sizes = replica->sizes;
    EMBER_CHECK(place_targets(replica, targets));
    for (size_t l = 0; l < L; l++) {
        const float *w = replica->d_params + ember_dense_offset(sizes, l);
        const float *bias = w + sizes[l + 1] * sizes[l];
        EMBER_CHECK(td->ops->linear_forward(td->device, layer_input(replica, l), bags, sizes[l],
                                            sizes[l + 1], w, bias, replica->z[l].data));
        if (l + 1 < L)
            EMBER_CHECK(td->ops->relu_forward(td->device, replica->z[l].data, bags * sizes[l + 1],
                                              replica->act[l + 1].data));
    }
    float loss = 0.0f;
    ember_status_t status =
            td->ops->cross_entropy(td->device, replica->z[L - 1].data, bags, replica->classes,
                                   replica->targets, &loss, replica->g[0].data);
    if (status == EMBER_OK && !isfinite(loss))
        status = EMBER_ERR_NUMERIC;
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status,
                                 "the loss is not finite (%s); nothing of this step is applied",
                                 ember_status_string(status));
    *loss_p = loss;
    return EMBER_OK;
}

/* After a failure: the buckets already started are waited for. */
static void buckets_drop(ember_replica_t *replica, size_t from)
{
    for (size_t k = from; k < replica->layers; k++) {
        replica->td->ops->allreduce_wait(replica->buckets[k]);
        replica->buckets[k] = NULL;
    }
}

ember_status_t ember_replica_backward(ember_replica_t *replica, const float **grad_x_p, char *err,
                                      size_t err_length)
{
    const ember_trainer_dev_t *td = replica->td;
    const size_t L = replica->layers, bags = replica->bags, *sizes = replica->sizes;
    float *g = replica->g[0].data;
    for (size_t l = L; l-- > 0;) {
        size_t offset = ember_dense_offset(sizes, l);
        size_t count = ember_dense_offset(sizes, l + 1) - offset;
        const float *w = replica->d_params + offset;
        float *gw = replica->d_grads + offset, *gb = gw + sizes[l + 1] * sizes[l];
        float *gx =
                l == 0 ? replica->grad_x.data : replica->g[g == replica->g[0].data ? 1 : 0].data;
        EMBER_CHECK(td->ops->linear_backward(td->device, layer_input(replica, l), bags, sizes[l],
                                             sizes[l + 1], w, g, 0, gx, gw, gb));
        ember_status_t status =
                td->ops->allreduce_start(replica->comm, gw, count, 1, &replica->buckets[l]);
        if (status != EMBER_OK) {
            buckets_drop(replica, l + 1);
            return ember_status_text(err, err_length, status, "allreduce: %s",
                                     td->ops->comm_error(replica->comm));
        }
        if (l > 0)
            EMBER_CHECK(td->ops->relu_backward(td->device, replica->z[l - 1].data, gx,
                                               bags * sizes[l], gx));
        g = gx;
    }
    *grad_x_p = replica->grad_x.data;
    return EMBER_OK;
}

ember_status_t ember_replica_buckets_wait(const ember_trainer_dev_t *td, ember_device_comm_t *comm,
                                          ember_tp_t *tp, ember_device_req_t **buckets,
                                          size_t count, const int *aborted, char *err,
                                          size_t err_length)
{
    ember_status_t status = EMBER_OK;
    for (size_t b = count; b-- > 0;) {
        ember_status_t bucket;
        while ((bucket = td->ops->allreduce_test(buckets[b])) == EMBER_INPROGRESS && !*aborted)
            ember_tp_wait(tp, 0.2);
        td->ops->allreduce_wait(buckets[b]);
        buckets[b] = NULL;
        if (status == EMBER_OK && bucket != EMBER_OK)
            status = bucket;
    }
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "dense allreduce failed: %s",
                                 td->ops->comm_error(comm));
    return EMBER_OK;
}

ember_status_t ember_replica_step(ember_replica_t *replica, const int *aborted, char *err,
                                  size_t err_length)
{
    const ember_trainer_dev_t *td = replica->td;
    EMBER_CHECK(ember_replica_buckets_wait(td, replica->comm, replica->tp, replica->buckets,
                                           replica->layers, aborted, err, err_length));
    size_t bytes = replica->nparams * sizeof(float);
    EMBER_CHECK(ember_trainer_to_host(td, replica->grads, replica->d_grads, bytes));
    EMBER_CHECK(ember_opt_step_dense(replica->optimizer, replica->params, replica->grads,
                                     replica->nparams));
    return ember_trainer_to_device(td, replica->d_params, replica->params, bytes);
}

ember_opt_t *ember_replica_optimizer(ember_replica_t *replica)
{
    return replica->optimizer;
}

const float *ember_replica_params(const ember_replica_t *replica, size_t *nparams_p)
{
    *nparams_p = replica->nparams;
    return replica->params;
}
