/* models/common/mlp: an MLP on a trainer's device (see mlp.h). */
#include "models/common/mlp.h"

#include <ember/log.h>
#include <stdlib.h>
#include <string.h>

size_t model_mlp_params(const size_t *widths, size_t layers)
{
    size_t count = 0;
    if (layers == 0 || layers > MODEL_MLP_LAYERS_MAX)
        return 0;
    for (size_t l = 0; l <= layers; l++) {
        if (widths[l] == 0 || widths[l] > 65536)
            return 0;
    }
    for (size_t l = 0; l < layers; l++)
        count += widths[l + 1] * widths[l] + widths[l + 1];
    return count;
}

/* Its shape: the layers' widths and where each layer's weight starts. */
static void mlp_shape(model_mlp_t *mlp, const model_mlp_config_t *config)
{
    mlp->layers = config->layers;
    mlp->relu_last = config->relu_last;
    mlp->bucket_each_layer = config->bucket_each_layer;
    for (size_t l = 0; l <= config->layers; l++) {
        mlp->sizes[l] = config->widths[l];
        if (config->widths[l] > mlp->widest)
            mlp->widest = config->widths[l];
    }
    for (size_t l = 0; l < config->layers; l++) {
        mlp->offset[l] = mlp->nparams;
        mlp->nparams += mlp->sizes[l + 1] * mlp->sizes[l] + mlp->sizes[l + 1];
    }
}

ember_status_t model_mlp_init(model_mlp_t *mlp, ember_device_t *device,
                              ember_allreduce_t *allreduce, const model_mlp_config_t *config)
{
    *mlp = (model_mlp_t){.device = device, .ops = ember_device_ops(device)};
    if (!model_mlp_params(config->widths, config->layers))
        return EMBER_ERR_INVALID_PARAM;
    mlp_shape(mlp, config);
    return model_params_init(&mlp->p, device, allreduce, mlp->nparams, config->params,
                             config->optimizer);
}

void model_mlp_cleanup(model_mlp_t *mlp)
{
    if (!mlp->device)
        return;
    for (size_t l = 0; l < MODEL_MLP_LAYERS_MAX; l++)
        model_buf_free(mlp->device, &mlp->act[l]);
    model_buf_free(mlp->device, &mlp->g[0]);
    model_buf_free(mlp->device, &mlp->g[1]);
    model_params_cleanup(&mlp->p);
    *mlp = (model_mlp_t){.device = NULL};
}

static ember_status_t mlp_reserve(model_mlp_t *mlp, size_t batch)
{
    for (size_t l = 0; l < mlp->layers; l++)
        EMBER_CHECK(model_buf_reserve(mlp->device, &mlp->act[l],
                                      batch * mlp->sizes[l + 1] * sizeof(float)));
    for (int k = 0; k < 2; k++)
        EMBER_CHECK(
                model_buf_reserve(mlp->device, &mlp->g[k], batch * mlp->widest * sizeof(float)));
    return EMBER_OK;
}

static int has_relu(const model_mlp_t *mlp, size_t l)
{
    return l + 1 < mlp->layers || mlp->relu_last;
}

static const float *layer_input(const model_mlp_t *mlp, size_t l)
{
    return l == 0 ? mlp->input : mlp->act[l - 1].data;
}

ember_status_t model_mlp_forward(model_mlp_t *mlp, const float *x, size_t batch, const float **y_p)
{
    EMBER_CHECK(mlp_reserve(mlp, batch));
    mlp->input = x;
    mlp->batch = batch;
    for (size_t l = 0; l < mlp->layers; l++) {
        const size_t in = mlp->sizes[l], out = mlp->sizes[l + 1];
        const float *w = mlp->p.d_params + mlp->offset[l], *bias = w + out * in;
        float *y = mlp->act[l].data;
        EMBER_CHECK(mlp->ops->linear_forward(mlp->device, layer_input(mlp, l), batch, in, out, w,
                                             bias, y));
        if (has_relu(mlp, l)) /* in place: elementwise, the same values */
            EMBER_CHECK(mlp->ops->relu_forward(mlp->device, y, batch * out, y));
    }
    *y_p = mlp->act[mlp->layers - 1].data;
    return EMBER_OK;
}

ember_status_t model_mlp_backward(model_mlp_t *mlp, float *grad_y, float *grad_x, char *err,
                                  size_t err_length)
{
    const size_t batch = mlp->batch, L = mlp->layers;
    if (!mlp->input || model_params_pending(&mlp->p))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "MLP backward without its forward, or before its step");
    /* The outputs are post-ReLU: positive exactly where the ReLU passed. */
    if (mlp->relu_last)
        EMBER_CHECK(mlp->ops->relu_backward(mlp->device, mlp->act[L - 1].data, grad_y,
                                            batch * mlp->sizes[L], grad_y));
    const float *g = grad_y;
    int ping = 0;
    for (size_t l = L; l-- > 0;) {
        const size_t in = mlp->sizes[l], out = mlp->sizes[l + 1];
        const float *w = mlp->p.d_params + mlp->offset[l];
        float *gw = mlp->p.d_grads + mlp->offset[l], *gb = gw + out * in;
        float *gx = l > 0 ? mlp->g[ping].data : grad_x;
        EMBER_CHECK(mlp->ops->linear_backward(mlp->device, layer_input(mlp, l), batch, in, out, w,
                                              g, 0, gx, gw, gb));
        /* A layer's bucket travels while the layers below are computed. */
        if (mlp->bucket_each_layer)
            EMBER_CHECK(
                    model_params_bucket(&mlp->p, mlp->offset[l], out * in + out, err, err_length));
        if (l > 0) {
            EMBER_CHECK(
                    mlp->ops->relu_backward(mlp->device, mlp->act[l - 1].data, gx, batch * in, gx));
            g = gx;
            ping ^= 1;
        }
    }
    mlp->input = NULL;
    if (!mlp->bucket_each_layer)
        return model_params_bucket(&mlp->p, 0, mlp->nparams, err, err_length);
    return EMBER_OK;
}

ember_status_t model_mlp_step(model_mlp_t *mlp, char *err, size_t err_length)
{
    return model_params_step(&mlp->p, err, err_length);
}
