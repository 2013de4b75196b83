/*
 * models/common/mlp: an MLP on a trainer's device, the dense layers of
 * every model ember-train ships: Linear layers through the device's linear
 * slots (cuBLAS on "cuda"), a ReLU after every layer but the last (and
 * after the last too when asked, as TorchRec's DenseArch has it), the
 * activations kept for the backward.
 *
 * Data parallel: the backward hands the parameters' gradients to the
 * trainers' allreduce (averaged) as soon as they exist, a bucket per layer
 * or one for the whole MLP (a bucket's size decides how the ring splits
 * it, so a model keeps the one its results were made with); the step waits
 * for them and runs the MLP's dense optimizer on the host copy of its
 * parameters (small), then copies them back.  Every trainer applies the
 * same averaged gradients, so the replicas stay equal.  On "cpu" the
 * device's parameters are the host copy itself and the slots are the
 * engine's host ops: the same bits as a host model.
 *
 * The flat parameters: each layer's weight [out][in] then its bias [out],
 * layer after layer.
 */
#ifndef MODELS_COMMON_MLP_H
#define MODELS_COMMON_MLP_H

#include "models/common/buf.h"
#include "models/common/params.h"

#include <ember/allreduce.h>
#include <ember/device.h>
#include <ember/optimizer.h>

#include <stddef.h>

#define MODEL_MLP_LAYERS_MAX 16

typedef struct {
    const size_t *widths;  /* [layers + 1]: the input's, then each layer's output */
    size_t layers;         /* 1 .. MODEL_MLP_LAYERS_MAX */
    int relu_last;         /* a ReLU after the last layer too */
    int bucket_each_layer; /* the allreduce: a bucket per layer, else one */
    /* the optimizer (row-wise Adagrad, a table optimizer, is Adagrad here) */
    const ember_opt_config_t *optimizer;
    const float *params; /* the initial parameters (host, copied) */
} model_mlp_config_t;

typedef struct {
    ember_device_t *device;
    const ember_device_ops_t *ops;
    size_t layers, sizes[MODEL_MLP_LAYERS_MAX + 1], offset[MODEL_MLP_LAYERS_MAX];
    size_t nparams, widest, batch;
    int relu_last, bucket_each_layer;
    model_params_t p;                      /* its parameters, gradients, optimizer and buckets */
    const float *input;                    /* the last forward's (borrowed) */
    model_buf_t act[MODEL_MLP_LAYERS_MAX]; /* layer l's output, after its ReLU */
    model_buf_t g[2];                      /* the backward's, ping-pong */
} model_mlp_t;

/** The parameters of an MLP of @layers layers of @widths (0: a width out of
 * 1 .. 65536 or no layer). */
size_t model_mlp_params(const size_t *widths, size_t layers);

/** @mlp on @device (borrowed), its gradients averaged over @allreduce
 * (borrowed; NULL: a lone replica).  Errors: ERR_INVALID_PARAM (the
 * shape), the optimizer's, the device's. */
ember_status_t model_mlp_init(model_mlp_t *mlp, ember_device_t *device,
                              ember_allreduce_t *allreduce, const model_mlp_config_t *config);
/** Waits for a bucket still in flight, frees everything.  An MLP never
 * initialised (zeroed) is fine. */
void model_mlp_cleanup(model_mlp_t *mlp);

/** The forward of @x [batch][widths[0]] (device memory, borrowed until the
 * backward); *@y_p the output [batch][widths[layers]] on the device. */
ember_status_t model_mlp_forward(model_mlp_t *mlp, const float *x, size_t batch, const float **y_p);

/** The backward of the last forward from @grad_y (device memory; changed in
 * place when the last layer has a ReLU): the parameters' gradients to the
 * allreduce, the input's into @grad_x (NULL: not wanted). */
ember_status_t model_mlp_backward(model_mlp_t *mlp, float *grad_y, float *grad_x, char *err,
                                  size_t err_length);

/** The allreduce waited for, the optimizer stepped on the host copy, the
 * parameters back on the device. */
ember_status_t model_mlp_step(model_mlp_t *mlp, char *err, size_t err_length);

#endif
