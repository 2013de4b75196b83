/*
 * engine/train/dlrm_arch: one of DLRM's MLPs (DenseArch or OverArch) on the
 * trainer's device: Linear layers through the device's linear slots (cuBLAS
 * on "cuda"), a ReLU after every layer but the last (and after the last
 * too for DenseArch, as TorchRec's MLP has it), the activations kept for
 * the backward.  The parameters' host copy is the engine/ops MLP's (the
 * optimizer steps it, the master reads it); on "cpu" the device's
 * parameters are that copy itself, so the ops and their order are
 * engine/ops/dlrm.c's, bit for bit.
 */
#ifndef EMBER_ENGINE_TRAIN_DLRM_ARCH_H
#define EMBER_ENGINE_TRAIN_DLRM_ARCH_H

#include "engine/device/scratch.h"
#include "engine/ops/dlrm.h"
#include "engine/ops/optimizer.h"
#include "engine/train/trainer_dev.h"

#include <stddef.h>

typedef struct {
    const ember_trainer_dev_t *td;
    ember_mlp_t *mlp; /* borrowed: the host parameters and gradients */
    size_t layers, sizes[EMBER_DLRM_LAYERS_MAX + 1]; /* sizes[0]: the input */
    size_t offset[EMBER_DLRM_LAYERS_MAX];            /* layer l's weight, then bias */
    size_t nparams, widest, batch;
    int relu_last;
    float *params, *grads;                      /* device memory (the mlp's on "cpu") */
    const float *input;                         /* the last forward's (borrowed) */
    ember_scratch_t act[EMBER_DLRM_LAYERS_MAX]; /* layer l's output, after its ReLU */
    ember_scratch_t g[2];                       /* the backward's, ping-pong */
} ember_dlrm_arch_t;

/**
 * @arch over @mlp (borrowed: @layers layers of @widths[0] inputs, then
 * @widths[1..layers] wide) on @td; @relu_last: a ReLU after the last layer
 * too.  The parameters are copied to the device.  Errors: the device's,
 * ERR_INVALID_PARAM (@mlp not of @layers layers).
 */
ember_status_t ember_dlrm_arch_init(ember_dlrm_arch_t *arch, const ember_trainer_dev_t *td,
                                    ember_mlp_t *mlp, const size_t *widths, size_t layers,
                                    int relu_last);
void ember_dlrm_arch_cleanup(ember_dlrm_arch_t *arch);

/** The forward of @x [batch][sizes[0]] (device memory, borrowed until the
 * backward); *y_p: the output [batch][sizes[layers]] on the device. */
ember_status_t ember_dlrm_arch_forward(ember_dlrm_arch_t *arch, const float *x, size_t batch,
                                       const float **y_p);

/** The backward of the last forward from @grad_y (device memory; changed
 * in place when the last layer has a ReLU): the gradients into
 * arch->grads, the input's into @grad_x (NULL: not wanted). */
ember_status_t ember_dlrm_arch_backward(ember_dlrm_arch_t *arch, float *grad_y, float *grad_x);

/** @opt's step on the host copy from the (allreduced) device gradients,
 * and the parameters back to the device. */
ember_status_t ember_dlrm_arch_step(ember_dlrm_arch_t *arch, ember_opt_t *opt);

#endif
