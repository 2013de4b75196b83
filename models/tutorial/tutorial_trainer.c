/*
 * models/tutorial/tutorial_trainer: a trainer's side of the tutorial model:
 * its batches (each checked as PyTorch's EmbeddingBag and cross entropy
 * would check it, naming the table), its dense model (models/common/mlp:
 * the Linear layers' gradients to the allreduce a bucket per layer), and the
 * cross entropy over the bags' targets on the device.
 */
#include "models/tutorial/tutorial.h"

#include "models/common/buf.h"
#include "models/common/mlp.h"
#include "models/tutorial/tutorial_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tutorial_config_t config;
    ember_device_t *device;
    tutorial_data_t *data;
    uint64_t per_epoch, in_epoch; /* steps an epoch, and served of this one */
    tutorial_batch_t batches[2];  /* by step parity */
    model_mlp_t mlp;
    model_buf_t targets; /* the step's targets on the device (unused on "cpu") */
    model_buf_t grad_logits, grad_x;
    size_t bags;
} tutorial_trainer_t;

ember_status_t tutorial_trainer_create(const ember_model_trainer_args_t *args, void **trainer_p,
                                       char *err, size_t err_length)
{
    tutorial_trainer_t *t = calloc(1, sizeof(*t));
    if (!t)
        return EMBER_ERR_NO_MEMORY;
    *trainer_p = t;
    t->config = *(const tutorial_config_t *)args->config;
    t->device = args->device;
    EMBER_CHECK(tutorial_data_open(&t->config, args->settings->seed, args->trainer, &t->data, err,
                                   err_length));
    t->per_epoch = tutorial_data_per_epoch(t->data);
    size_t widths[TUTORIAL_HIDDEN_MAX + 2];
    const model_mlp_config_t mlp = {.widths = widths,
                                    .layers = tutorial_widths(&t->config, widths),
                                    .bucket_each_layer = 1,
                                    .optimizer = &args->settings->optimizer,
                                    .params = args->params};
    ember_status_t status = model_mlp_init(&t->mlp, args->device, args->allreduce, &mlp);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "the dense model: %s",
                                 ember_status_string(status));
    return EMBER_OK;
}

void tutorial_trainer_destroy(void *trainer)
{
    tutorial_trainer_t *t = trainer;
    if (!t)
        return;
    model_mlp_cleanup(&t->mlp);
    if (t->device) {
        model_buf_free(t->device, &t->targets);
        model_buf_free(t->device, &t->grad_logits);
        model_buf_free(t->device, &t->grad_x);
    }
    tutorial_data_close(t->data);
    free(t);
}

/* Targets of the classes the model has, and at least one bag. */
static ember_status_t check_targets(const tutorial_trainer_t *t, const tutorial_batch_t *batch,
                                    char *err, size_t err_length)
{
    const size_t classes = t->config.classes;
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

/* The step's batch, checked as PyTorch's EmbeddingBag would check it: a
 * bad one is refused before any of it leaves, naming the table. */
static ember_status_t check_batch(const tutorial_trainer_t *t, const tutorial_batch_t *batch,
                                  const char **table_p, char *err, size_t err_length)
{
    const ember_bag_batch_t check = {.indices = batch->indices,
                                     .n = batch->n,
                                     .offsets = batch->offsets,
                                     .bags = batch->bags,
                                     .weights = batch->weights,
                                     .n_weights = batch->weights ? batch->n : 0};
    const ember_bag_opts_t opts = {.mode = (ember_bag_mode_t)t->config.mode,
                                   .padding_idx = t->config.padding_idx};
    ember_status_t status = ember_bag_validate(&check, &opts, t->config.rows, err, err_length);
    if (status != EMBER_OK) {
        *table_p = TUTORIAL_TABLE; /* the batch is wrong for it */
        return status;
    }
    return check_targets(t, batch, err, err_length);
}

ember_status_t tutorial_take(void *trainer, uint64_t step, int skip, ember_model_batch_t *batch,
                             const char **table_p, char *err, size_t err_length)
{
    tutorial_trainer_t *t = trainer;
    *batch = (ember_model_batch_t){.examples = 0};
    if (t->in_epoch == t->per_epoch) { /* the epoch's end; the next take starts another */
        t->in_epoch = 0;
        return EMBER_OK;
    }
    t->in_epoch++;
    tutorial_batch_t *b = &t->batches[step & 1];
    if (skip) { /* passed by: no draw */
        batch->examples = 1;
        return EMBER_OK;
    }
    char why[400];
    ember_status_t status =
            tutorial_data_get(t->data, step, (unsigned)(step & 1), b, why, sizeof(why));
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "no batch: %s", why);
    EMBER_CHECK(check_batch(t, b, table_p, err, err_length));
    batch->kjt = (ember_kjt_t){.num_features = 1,
                               .batch_size = b->bags,
                               .values = b->indices,
                               .offsets = b->offsets,
                               .weights = b->weights,
                               .num_values = b->n};
    batch->examples = b->bags;
    batch->own = b;
    return EMBER_OK;
}

void tutorial_release(void *trainer)
{
    (void)trainer; /* a slot is reused by the step after next */
}

ember_status_t tutorial_forward(void *trainer, const ember_model_batch_t *batch,
                                const float *pooled, float *loss_p, char *err, size_t err_length)
{
    tutorial_trainer_t *t = trainer;
    const tutorial_batch_t *b = batch->own;
    const size_t bags = b->bags, classes = t->config.classes;
    const ember_device_ops_t *ops = ember_device_ops(t->device);
    const float *logits;
    const int64_t *targets = b->targets; /* read in place on "cpu" */
    t->bags = bags;
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_logits, bags * classes * sizeof(float)));
    EMBER_CHECK(model_buf_reserve(t->device, &t->grad_x, bags * t->config.dim * sizeof(float)));
    if (!model_on_host(t->device)) {
        EMBER_CHECK(model_buf_reserve(t->device, &t->targets, bags * sizeof(int64_t)));
        EMBER_CHECK(
                model_to_device(t->device, t->targets.data, b->targets, bags * sizeof(int64_t)));
        targets = t->targets.data;
    }
    EMBER_CHECK(model_mlp_forward(&t->mlp, pooled, bags, &logits));
    float loss = 0.0f;
    ember_status_t status = ops->cross_entropy(t->device, logits, bags, classes, targets, &loss,
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

ember_status_t tutorial_backward(void *trainer, const float **grad_p, char *err, size_t err_length)
{
    tutorial_trainer_t *t = trainer;
    EMBER_CHECK(model_mlp_backward(&t->mlp, t->grad_logits.data, t->grad_x.data, err, err_length));
    *grad_p = t->grad_x.data;
    return EMBER_OK;
}

ember_status_t tutorial_step(void *trainer, char *err, size_t err_length)
{
    tutorial_trainer_t *t = trainer;
    return model_mlp_step(&t->mlp, err, err_length);
}

uint64_t tutorial_epoch_steps(void *trainer)
{
    return ((const tutorial_trainer_t *)trainer)->per_epoch;
}

const float *tutorial_trainer_params(void *trainer)
{
    return ((tutorial_trainer_t *)trainer)->mlp.p.params;
}

size_t tutorial_optimizers(void *trainer, ember_opt_t **out)
{
    out[0] = ((tutorial_trainer_t *)trainer)->mlp.p.optimizer;
    return 1;
}
