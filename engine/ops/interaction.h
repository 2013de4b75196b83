/*
 * engine/ops/interaction: DLRM's InteractionArch (torchrec.models.dlrm).
 *
 * Per example, F vectors of D floats: the dense arch's output first, then
 * one pooled embedding per table.  The output is the dense vector followed
 * by every pairwise dot product i < j of the F vectors, in the order of
 * torch.triu_indices(F, F, offset=1): (0,1), (0,2), ..., (0,F-1), (1,2), ...
 * so [batch][D + F(F-1)/2].
 */
#ifndef EMBER_ENGINE_INTERACTION_H
#define EMBER_ENGINE_INTERACTION_H

#include <ember/status.h>

#include <stddef.h>

/* F vectors of @dim per example, over @batch examples: vectors[f] is
 * [batch][dim] (borrowed; vectors[0] the dense arch's output). */
typedef struct {
    size_t features; /* F >= 1 */
    size_t dim;      /* D >= 1 */
    size_t batch;
} ember_interaction_shape_t;

/** Width of an output row: D + F(F-1)/2. */
size_t ember_interaction_width(const ember_interaction_shape_t *shape);

/**
 * The forward: out[batch][width] from vectors[F][batch][dim].
 * Errors: ERR_INVALID_PARAM (a zero size, a NULL buffer), ERR_NO_MEMORY.
 */
ember_status_t ember_interaction_forward(const ember_interaction_shape_t *shape,
                                         const float *const *vectors, float *out);

/**
 * The backward: grads[f][batch][dim] (each fully written) from
 * grad_out[batch][width] and the forward's vectors.  The dense vector's
 * gradient is its slice of grad_out plus its pairs' terms; each dot's
 * gradient reaches both of its vectors.  Errors: as the forward.
 */
ember_status_t ember_interaction_backward(const ember_interaction_shape_t *shape,
                                          const float *const *vectors, const float *grad_out,
                                          float *const *grads);

#endif
