/* engine/train/dlrm_arch: one of DLRM's MLPs on the trainer's device (see
 * dlrm_arch.h). */
#include "engine/train/dlrm_arch.h"

#include <ember/log.h>

/* The layers' places in the host MLP's flat parameters. */
static void arch_shape(ember_dlrm_arch_t *arch, const size_t *widths, size_t layers)
{
    ember_mlp_t *mlp = arch->mlp;
    float *base = ember_mlp_params(mlp), *w;
    arch->layers = layers;
    arch->nparams = ember_mlp_num_params(mlp);
    for (size_t l = 0; l <= layers; l++) {
        arch->sizes[l] = widths[l];
        if (widths[l] > arch->widest)
            arch->widest = widths[l];
    }
    for (size_t l = 0; l < layers; l++) {
        ember_mlp_layer(mlp, l, &w, NULL, NULL, NULL);
        arch->offset[l] = (size_t)(w - base);
    }
}

ember_status_t ember_dlrm_arch_init(ember_dlrm_arch_t *arch, const ember_trainer_dev_t *td,
                                    ember_mlp_t *mlp, const size_t *widths, size_t layers,
                                    int relu_last)
{
    *arch = (ember_dlrm_arch_t){.td = td, .mlp = mlp, .relu_last = relu_last};
    if (layers == 0 || layers > EMBER_DLRM_LAYERS_MAX || ember_mlp_num_layers(mlp) != layers)
        return EMBER_ERR_INVALID_PARAM;
    arch_shape(arch, widths, layers);
    if (td->on_host) {
        arch->params = ember_mlp_params(mlp);
        arch->grads = ember_mlp_grads(mlp);
        return EMBER_OK;
    }
    const size_t bytes = arch->nparams * sizeof(float);
    EMBER_CHECK(td->ops->mem_alloc(td->device, bytes, (void **)&arch->params));
    EMBER_CHECK(td->ops->mem_alloc(td->device, bytes, (void **)&arch->grads));
    return ember_trainer_to_device(td, arch->params, ember_mlp_params(mlp), bytes);
}

void ember_dlrm_arch_cleanup(ember_dlrm_arch_t *arch)
{
    const ember_trainer_dev_t *td = arch->td;
    if (!td)
        return;
    for (size_t l = 0; l < EMBER_DLRM_LAYERS_MAX; l++)
        ember_scratch_free(td->device, &arch->act[l]);
    ember_scratch_free(td->device, &arch->g[0]);
    ember_scratch_free(td->device, &arch->g[1]);
    if (!td->on_host) {
        td->ops->mem_free(td->device, arch->params);
        td->ops->mem_free(td->device, arch->grads);
    }
    arch->td = NULL;
}

static ember_status_t arch_reserve(ember_dlrm_arch_t *arch, size_t batch)
{
    ember_device_t *device = arch->td->device;
    for (size_t l = 0; l < arch->layers; l++)
        EMBER_CHECK(ember_scratch_reserve(device, &arch->act[l],
                                          batch * arch->sizes[l + 1] * sizeof(float)));
    for (int k = 0; k < 2; k++)
        EMBER_CHECK(
                ember_scratch_reserve(device, &arch->g[k], batch * arch->widest * sizeof(float)));
    return EMBER_OK;
}

static int has_relu(const ember_dlrm_arch_t *arch, size_t l)
{
    return l + 1 < arch->layers || arch->relu_last;
}

static const float *layer_input(const ember_dlrm_arch_t *arch, size_t l)
{
    return l == 0 ? arch->input : arch->act[l - 1].data;
}

ember_status_t ember_dlrm_arch_forward(ember_dlrm_arch_t *arch, const float *x, size_t batch,
                                       const float **y_p)
{
    const ember_trainer_dev_t *td = arch->td;
    EMBER_CHECK(arch_reserve(arch, batch));
    arch->input = x;
    arch->batch = batch;
    for (size_t l = 0; l < arch->layers; l++) {
        const size_t in = arch->sizes[l], out = arch->sizes[l + 1];
        const float *w = arch->params + arch->offset[l], *bias = w + out * in;
        float *y = arch->act[l].data;
        EMBER_CHECK(td->ops->linear_forward(td->device, layer_input(arch, l), batch, in, out, w,
                                            bias, y));
        if (has_relu(arch, l)) /* in place, as engine/ops/dense.c's MLP */
            EMBER_CHECK(td->ops->relu_forward(td->device, y, batch * out, y));
    }
    *y_p = arch->act[arch->layers - 1].data;
    return EMBER_OK;
}

ember_status_t ember_dlrm_arch_backward(ember_dlrm_arch_t *arch, float *grad_y, float *grad_x)
{
    const ember_trainer_dev_t *td = arch->td;
    const size_t batch = arch->batch, L = arch->layers;
    if (!arch->input)
        return EMBER_ERR_INVALID_PARAM;
    /* The outputs are post-ReLU: positive exactly where the ReLU passed. */
    if (arch->relu_last)
        EMBER_CHECK(td->ops->relu_backward(td->device, arch->act[L - 1].data, grad_y,
                                           batch * arch->sizes[L], grad_y));
    const float *g = grad_y;
    int ping = 0;
    for (size_t l = L; l-- > 0;) {
        const size_t in = arch->sizes[l], out = arch->sizes[l + 1];
        const float *w = arch->params + arch->offset[l];
        float *gw = arch->grads + arch->offset[l], *gb = gw + out * in;
        float *gx = l > 0 ? arch->g[ping].data : grad_x;
        EMBER_CHECK(td->ops->linear_backward(td->device, layer_input(arch, l), batch, in, out, w, g,
                                             0, gx, gw, gb));
        if (l > 0) {
            EMBER_CHECK(
                    td->ops->relu_backward(td->device, arch->act[l - 1].data, gx, batch * in, gx));
            g = gx;
            ping ^= 1;
        }
    }
    return EMBER_OK;
}

ember_status_t ember_dlrm_arch_step(ember_dlrm_arch_t *arch, ember_opt_t *opt)
{
    const ember_trainer_dev_t *td = arch->td;
    const size_t bytes = arch->nparams * sizeof(float);
    float *params = ember_mlp_params(arch->mlp), *grads = ember_mlp_grads(arch->mlp);
    EMBER_CHECK(ember_trainer_to_host(td, grads, arch->grads, bytes));
    EMBER_CHECK(ember_opt_step_dense(opt, params, grads, arch->nparams));
    return ember_trainer_to_device(td, arch->params, params, bytes);
}
