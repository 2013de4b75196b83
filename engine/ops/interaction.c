/* engine/ops/interaction: DLRM's pairwise dot products (see interaction.h). */
#include "engine/ops/interaction.h"

#include <string.h>

size_t ember_interaction_width(const ember_interaction_shape_t *shape)
{
    return shape->dim + shape->features * (shape->features - 1) / 2;
}

static int shape_valid(const ember_interaction_shape_t *shape, const void *a, const void *b)
{
    return shape && shape->features >= 1 && shape->dim >= 1 && shape->batch >= 1 && a && b;
}

static float dot(const float *x, const float *y, size_t dim)
{
    float sum = 0.0f;
    for (size_t d = 0; d < dim; d++)
        sum += x[d] * y[d];
    return sum;
}

ember_status_t ember_interaction_forward(const ember_interaction_shape_t *shape,
                                         const float *const *vectors, float *out)
{
    if (!shape_valid(shape, vectors, out))
        return EMBER_ERR_INVALID_PARAM;
    const size_t F = shape->features, D = shape->dim, width = ember_interaction_width(shape);
    for (size_t f = 0; f < F; f++)
        if (!vectors[f])
            return EMBER_ERR_INVALID_PARAM;
    for (size_t b = 0; b < shape->batch; b++) {
        float *row = out + b * width, *pair = row + D;
        memcpy(row, vectors[0] + b * D, D * sizeof(float));
        for (size_t i = 0; i < F; i++)
            for (size_t j = i + 1; j < F; j++)
                *pair++ = dot(vectors[i] + b * D, vectors[j] + b * D, D);
    }
    return EMBER_OK;
}

/* grad += g * x over @dim. */
static void axpy(float *grad, float g, const float *x, size_t dim)
{
    for (size_t d = 0; d < dim; d++)
        grad[d] += g * x[d];
}

ember_status_t ember_interaction_backward(const ember_interaction_shape_t *shape,
                                          const float *const *vectors, const float *grad_out,
                                          float *const *grads)
{
    if (!shape_valid(shape, vectors, grad_out) || !grads)
        return EMBER_ERR_INVALID_PARAM;
    const size_t F = shape->features, D = shape->dim, width = ember_interaction_width(shape);
    for (size_t f = 0; f < F; f++)
        if (!vectors[f] || !grads[f])
            return EMBER_ERR_INVALID_PARAM;
    for (size_t b = 0; b < shape->batch; b++) {
        const float *g_row = grad_out + b * width, *g_pair = g_row + D;
        memcpy(grads[0] + b * D, g_row, D * sizeof(float));
        for (size_t f = 1; f < F; f++)
            memset(grads[f] + b * D, 0, D * sizeof(float));
        for (size_t i = 0; i < F; i++)
            for (size_t j = i + 1; j < F; j++, g_pair++) {
                axpy(grads[i] + b * D, *g_pair, vectors[j] + b * D, D);
                axpy(grads[j] + b * D, *g_pair, vectors[i] + b * D, D);
            }
    }
    return EMBER_OK;
}
