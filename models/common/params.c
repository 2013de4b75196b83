/* models/common/params: replicated dense parameters (see params.h). */
#include "models/common/params.h"

#include <ember/log.h>

#include <stdlib.h>
#include <string.h>

/* The parameters on the device: the host copy itself on a host device. */
static ember_status_t params_place(model_params_t *p)
{
    const size_t bytes = p->count * sizeof(float);
    if (model_on_host(p->device)) {
        p->d_params = p->params;
        p->d_grads = p->grads;
        return EMBER_OK;
    }
    EMBER_CHECK(p->ops->mem_alloc(p->device, bytes, (void **)&p->d_params));
    EMBER_CHECK(p->ops->mem_alloc(p->device, bytes, (void **)&p->d_grads));
    return model_to_device(p->device, p->d_params, p->params, bytes);
}

ember_status_t model_params_init(model_params_t *p, ember_device_t *device,
                                 ember_allreduce_t *allreduce, size_t count, const float *initial,
                                 const ember_opt_config_t *optimizer)
{
    *p = (model_params_t){.device = device,
                          .ops = ember_device_ops(device),
                          .allreduce = allreduce,
                          .count = count};
    p->params = malloc(count * sizeof(float));
    p->grads = calloc(count, sizeof(float));
    if (!p->params || !p->grads)
        return EMBER_ERR_NO_MEMORY;
    memcpy(p->params, initial, count * sizeof(float));
    /* Row-wise Adagrad keeps one accumulator a table row: dense parameters
     * have none to speak of, and take Adagrad. */
    ember_opt_config_t opt = *optimizer;
    if (opt.kind == EMBER_OPT_ROWWISE_ADAGRAD)
        ember_opt_config_default(EMBER_OPT_ADAGRAD, opt.lr, &opt);
    EMBER_CHECK(ember_opt_create(&opt, 1, count, EMBER_OPT_DENSE, &p->optimizer));
    return params_place(p);
}

/* Why the allreduce failed: its communicator's word (the trainer at fault). */
static const char *allreduce_why(const model_params_t *p, ember_status_t status)
{
    const char *why = p->allreduce ? ember_allreduce_error(p->allreduce) : "";
    return *why ? why : ember_status_string(status);
}

/* After a failure: the buckets started are waited for (their requests freed). */
static void buckets_drop(model_params_t *p)
{
    for (size_t b = 0; b < p->nbuckets; b++) {
        if (p->buckets[b])
            ember_allreduce_wait(p->buckets[b]);
        p->buckets[b] = NULL;
    }
    p->nbuckets = 0;
}

void model_params_cleanup(model_params_t *p)
{
    if (!p->device)
        return;
    buckets_drop(p);
    if (p->d_params != p->params)
        p->ops->mem_free(p->device, p->d_params);
    if (p->d_grads != p->grads)
        p->ops->mem_free(p->device, p->d_grads);
    ember_opt_destroy(p->optimizer);
    free(p->params);
    free(p->grads);
    *p = (model_params_t){.device = NULL};
}

ember_status_t model_params_bucket(model_params_t *p, size_t first, size_t count, char *err,
                                   size_t err_length)
{
    if (!p->allreduce)
        return EMBER_OK;
    if (p->nbuckets == MODEL_PARAMS_BUCKETS_MAX) {
        buckets_drop(p);
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "allreduce: more than %d buckets a step",
                                 MODEL_PARAMS_BUCKETS_MAX);
    }
    ember_allreduce_req_t *req = NULL;
    ember_status_t status = ember_allreduce_start(p->allreduce, p->d_grads + first, count,
                                                  EMBER_ALLREDUCE_AVG, &req);
    if (status != EMBER_OK) {
        buckets_drop(p);
        return ember_status_text(err, err_length, status, "allreduce: %s",
                                 allreduce_why(p, status));
    }
    p->buckets[p->nbuckets++] = req;
    return EMBER_OK;
}

int model_params_pending(const model_params_t *p)
{
    return p->nbuckets > 0;
}

ember_status_t model_params_step(model_params_t *p, char *err, size_t err_length)
{
    const size_t bytes = p->count * sizeof(float);
    ember_status_t status = EMBER_OK;
    for (size_t b = 0; b < p->nbuckets; b++) {
        ember_status_t bucket = ember_allreduce_wait(p->buckets[b]);
        p->buckets[b] = NULL;
        if (status == EMBER_OK && bucket != EMBER_OK)
            status = bucket;
    }
    p->nbuckets = 0;
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "dense allreduce failed: %s",
                                 allreduce_why(p, status));
    EMBER_CHECK(model_to_host(p->device, p->grads, p->d_grads, bytes));
    EMBER_CHECK(ember_opt_step_dense(p->optimizer, p->params, p->grads, p->count));
    return model_to_device(p->device, p->d_params, p->params, bytes);
}
