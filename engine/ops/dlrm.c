/* engine/ops/dlrm: DLRM's dense half (see dlrm.h). */
#include "engine/ops/dlrm.h"

#include "common/reserve.h"
#include "engine/ops/interaction.h"

#include <ember/log.h>

#include <stdlib.h>
#include <string.h>

struct ember_dlrm {
    ember_dlrm_config_t config;
    ember_mlp_t *dense_arch, *over_arch;
    size_t batch;          /* of the last forward; 0 before one */
    const float **vectors; /* [1 + tables]: the dense output, the pooled */
    float **grads;         /* [1 + tables]: their gradients */
    /* the activations of the last forward and the backward's (grow-only) */
    ember_buffer_t dense_out, inter, grad_inter, grad_dense;
};

static int sizes_valid(const size_t *sizes, size_t layers, size_t last)
{
    if (layers == 0 || layers > EMBER_DLRM_LAYERS_MAX || sizes[layers - 1] != last)
        return 0;
    for (size_t l = 0; l < layers; l++)
        if (sizes[l] == 0)
            return 0;
    return 1;
}

/* An MLP of @in inputs then @sizes. */
static ember_status_t mlp_of(size_t in, const size_t *sizes, size_t layers, uint64_t seed,
                             ember_mlp_t **mlp_p)
{
    size_t widths[EMBER_DLRM_LAYERS_MAX + 1] = {in};
    memcpy(widths + 1, sizes, layers * sizeof(size_t));
    return ember_mlp_create(widths, layers + 1, seed, mlp_p);
}

ember_status_t ember_dlrm_create(const ember_dlrm_config_t *config, uint64_t seed,
                                 ember_dlrm_t **model_p)
{
    if (!config || config->dense_features == 0 || config->dim == 0 ||
        !sizes_valid(config->dense_sizes, config->dense_layers, config->dim) ||
        !sizes_valid(config->over_sizes, config->over_layers, 1))
        return EMBER_ERR_INVALID_PARAM;
    ember_dlrm_t *model = calloc(1, sizeof(*model));
    size_t vectors = 1 + config->tables;
    if (!model)
        return EMBER_ERR_NO_MEMORY;
    model->config = *config;
    model->vectors = calloc(vectors, sizeof(*model->vectors));
    model->grads = calloc(vectors, sizeof(*model->grads));
    ember_status_t status = model->vectors && model->grads ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK)
        status = mlp_of(config->dense_features, config->dense_sizes, config->dense_layers, seed,
                        &model->dense_arch);
    ember_interaction_shape_t shape = {.features = vectors, .dim = config->dim, .batch = 1};
    if (status == EMBER_OK)
        status = mlp_of(ember_interaction_width(&shape), config->over_sizes, config->over_layers,
                        seed + 1, &model->over_arch);
    if (status != EMBER_OK) {
        ember_dlrm_destroy(model);
        return status;
    }
    *model_p = model;
    return EMBER_OK;
}

void ember_dlrm_destroy(ember_dlrm_t *model)
{
    if (!model)
        return;
    ember_mlp_destroy(model->dense_arch);
    ember_mlp_destroy(model->over_arch);
    free(model->vectors);
    free(model->grads);
    ember_buffer_free(&model->dense_out);
    ember_buffer_free(&model->inter);
    ember_buffer_free(&model->grad_inter);
    ember_buffer_free(&model->grad_dense);
    free(model);
}

ember_mlp_t *ember_dlrm_dense_arch(ember_dlrm_t *model)
{
    return model->dense_arch;
}

ember_mlp_t *ember_dlrm_over_arch(ember_dlrm_t *model)
{
    return model->over_arch;
}

static ember_interaction_shape_t shape_of(const ember_dlrm_t *model, size_t batch)
{
    return (ember_interaction_shape_t){
            .features = 1 + model->config.tables, .dim = model->config.dim, .batch = batch};
}

/* The activations' buffers for @batch examples. */
static ember_status_t dlrm_reserve(ember_dlrm_t *model, size_t batch)
{
    ember_interaction_shape_t shape = shape_of(model, 1);
    const size_t dim = batch * model->config.dim * sizeof(float);
    const size_t width = batch * ember_interaction_width(&shape) * sizeof(float);
    if (!ember_buffer_reserve(&model->dense_out, dim) ||
        !ember_buffer_reserve(&model->inter, width) ||
        !ember_buffer_reserve(&model->grad_inter, width) ||
        !ember_buffer_reserve(&model->grad_dense, dim))
        return EMBER_ERR_NO_MEMORY;
    return EMBER_OK;
}

ember_status_t ember_dlrm_forward(ember_dlrm_t *model, const float *dense,
                                  const float *const *pooled, size_t batch, float *logits)
{
    if (!model || !dense || (!pooled && model->config.tables) || !logits || batch == 0)
        return EMBER_ERR_INVALID_PARAM;
    EMBER_CHECK(dlrm_reserve(model, batch));
    const ember_interaction_shape_t shape = shape_of(model, batch);
    float *dense_out = model->dense_out.data, *inter = model->inter.data;
    EMBER_CHECK(ember_mlp_forward(model->dense_arch, dense, batch, dense_out));
    /* DenseArch's last layer has its ReLU too (TorchRec's MLP). */
    ember_relu_forward(dense_out, batch * model->config.dim, dense_out);
    model->vectors[0] = dense_out;
    for (size_t t = 0; t < model->config.tables; t++)
        model->vectors[1 + t] = pooled[t];
    EMBER_CHECK(ember_interaction_forward(&shape, model->vectors, inter));
    EMBER_CHECK(ember_mlp_forward(model->over_arch, inter, batch, logits));
    model->batch = batch;
    return EMBER_OK;
}

ember_status_t ember_dlrm_backward(ember_dlrm_t *model, const float *grad_logits,
                                   float *const *grad_pooled)
{
    if (!model || model->batch == 0 || !grad_logits || (!grad_pooled && model->config.tables))
        return EMBER_ERR_INVALID_PARAM;
    const size_t batch = model->batch;
    const ember_interaction_shape_t shape = shape_of(model, batch);
    float *grad_inter = model->grad_inter.data, *grad_dense = model->grad_dense.data;
    EMBER_CHECK(ember_mlp_backward(model->over_arch, grad_logits, grad_inter));
    model->grads[0] = grad_dense;
    for (size_t t = 0; t < model->config.tables; t++)
        model->grads[1 + t] = grad_pooled[t];
    EMBER_CHECK(ember_interaction_backward(&shape, model->vectors, grad_inter, model->grads));
    ember_relu_backward(model->dense_out.data, grad_dense, batch * model->config.dim, grad_dense);
    return ember_mlp_backward(model->dense_arch, grad_dense, NULL);
}
