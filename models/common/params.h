/*
 * models/common/params: a block of dense parameters replicated on every
 * trainer (an MLP's, DCN's cross layers'): the host copy and the device's,
 * their gradients, the dense optimizer, and the buckets of the trainers'
 * allreduce that average the gradients.  A backward starts buckets over
 * ranges of the gradients as soon as they exist; the step waits for them,
 * runs the optimizer on the host copy (small) and copies the parameters
 * back.  Every trainer applies the same averaged gradients, so the
 * replicas stay equal.  On "cpu" the device's arrays are the host ones.
 */
#ifndef MODELS_COMMON_PARAMS_H
#define MODELS_COMMON_PARAMS_H

#include "models/common/buf.h"

#include <ember/allreduce.h>
#include <ember/device.h>
#include <ember/optimizer.h>

#include <stddef.h>

#define MODEL_PARAMS_BUCKETS_MAX 16

typedef struct {
    ember_device_t *device;
    const ember_device_ops_t *ops;
    ember_allreduce_t *allreduce; /* NULL: a lone replica */
    size_t count;
    float *params, *grads;     /* host */
    float *d_params, *d_grads; /* device (the host ones on a host device) */
    ember_opt_t *optimizer;
    ember_allreduce_req_t *buckets[MODEL_PARAMS_BUCKETS_MAX];
    size_t nbuckets;
} model_params_t;

/** @count parameters from @initial (host, copied) on @device (borrowed),
 * stepped by @optimizer (row-wise Adagrad, a table optimizer, is Adagrad
 * here), averaged over @allreduce (borrowed; NULL: alone).  Errors: the
 * optimizer's, the device's, ERR_NO_MEMORY. */
ember_status_t model_params_init(model_params_t *p, ember_device_t *device,
                                 ember_allreduce_t *allreduce, size_t count, const float *initial,
                                 const ember_opt_config_t *optimizer);
/** Waits for a bucket in flight, frees everything; a zeroed block is fine. */
void model_params_cleanup(model_params_t *p);

/** Gradients [first, first + count) to the allreduce, averaged (at most
 * MODEL_PARAMS_BUCKETS_MAX buckets a step).  On failure every bucket is
 * dropped and @err names the trainer at fault. */
ember_status_t model_params_bucket(model_params_t *p, size_t first, size_t count, char *err,
                                   size_t err_length);
/** Whether buckets are in flight (a backward without its step). */
int model_params_pending(const model_params_t *p);

/** The buckets waited for, the optimizer stepped, the parameters back on
 * the device. */
ember_status_t model_params_step(model_params_t *p, char *err, size_t err_length);

#endif
