/*
 * ember engine: losses with mean reduction (as PyTorch's defaults).
 *
 * Each returns the scalar loss and, optionally, the gradient of that loss
 * w.r.t. the logits (already divided by the batch, so it feeds the layer
 * below as is).  Computations run in double internally and are stable for
 * any finite logits.
 */
#ifndef EMBER_ENGINE_LOSS_H
#define EMBER_ENGINE_LOSS_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Cross entropy of @logits [batch, classes] against class ids @targets
 * [batch], mean over the batch (torch.nn.functional.cross_entropy).
 * @loss_p: the loss; @grad_p: [batch, classes] or NULL, = (softmax - onehot)
 * / batch.  All borrowed; @grad_p may equal @logits.
 * Errors: ERR_INVALID_PARAM (batch or classes 0, NULL buffers),
 * ERR_OUT_OF_RANGE (a target outside [0, classes); the log names its
 * position), ERR_NUMERIC (non-finite loss, e.g. NaN/inf logits).  Outputs are
 * written only on success.
 */
ember_status_t ember_cross_entropy(const float *logits, size_t batch, size_t classes,
                                   const int64_t *targets, float *loss_p, float *grad_p);

/**
 * Binary cross entropy with logits, mean over @n elements
 * (torch.nn.functional.binary_cross_entropy_with_logits): targets in [0, 1].
 * @grad_p: [n] or NULL, = (sigmoid(x) - t) / n; may equal @logits.
 * Errors: ERR_INVALID_PARAM (n 0, NULL buffers), ERR_NUMERIC (non-finite
 * loss).  Outputs are written only on success.
 */
ember_status_t ember_bce_with_logits(const float *logits, const float *targets, size_t n,
                                     float *loss_p, float *grad_p);

#ifdef __cplusplus
}
#endif
#endif
