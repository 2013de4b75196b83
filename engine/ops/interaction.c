/* engine/ops/interaction: DLRM's pairwise dot products (see interaction.h).
 *
 * Examples go through in blocks of BLOCK: their F vectors transposed into
 * one [F][D][BLOCK] tile, so each pair's dot is D multiply-adds of BLOCK
 * examples side by side (what the compiler makes vector instructions of),
 * with no per-example horizontal sum.  Each example's sums still run over
 * d in increasing order, so the result does not depend on the block or the
 * machine's vector width. */
#include "engine/ops/interaction.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 8

size_t ember_interaction_width(const ember_interaction_shape_t *shape)
{
    return shape->dim + shape->features * (shape->features - 1) / 2;
}

static int shape_valid(const ember_interaction_shape_t *shape, const void *a, const void *b)
{
    return shape && shape->features >= 1 && shape->dim >= 1 && shape->batch >= 1 && a && b;
}

/* tile[f][d][k] = vectors[f][(b0 + k) * D + d] for the block's @n examples
 * (zeros past them). */
static void tile_in(const ember_interaction_shape_t *shape, const float *const *vectors, size_t b0,
                    size_t n, float *restrict tile)
{
    const size_t F = shape->features, D = shape->dim;
    if (n < BLOCK)
        memset(tile, 0, F * D * BLOCK * sizeof(float));
    for (size_t f = 0; f < F; f++) {
        float *t = tile + f * D * BLOCK;
        for (size_t k = 0; k < n; k++) {
            const float *x = vectors[f] + (b0 + k) * D;
            for (size_t d = 0; d < D; d++)
                t[d * BLOCK + k] = x[d];
        }
    }
}

/* The dot of two tiled vectors for each example of the block. */
static void tile_dot(const float *restrict a, const float *restrict b, size_t dim, float acc[BLOCK])
{
    for (size_t k = 0; k < BLOCK; k++)
        acc[k] = 0.0f;
    for (size_t d = 0; d < dim; d++)
        for (size_t k = 0; k < BLOCK; k++)
            acc[k] += a[d * BLOCK + k] * b[d * BLOCK + k];
}

static float *tile_alloc(const ember_interaction_shape_t *shape)
{
    return malloc(shape->features * shape->dim * BLOCK * sizeof(float));
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
    float *tile = tile_alloc(shape), acc[BLOCK];
    if (!tile)
        return EMBER_ERR_NO_MEMORY;
    for (size_t b0 = 0; b0 < shape->batch; b0 += BLOCK) {
        const size_t n = shape->batch - b0 < BLOCK ? shape->batch - b0 : BLOCK;
        tile_in(shape, vectors, b0, n, tile);
        for (size_t k = 0; k < n; k++)
            memcpy(out + (b0 + k) * width, vectors[0] + (b0 + k) * D, D * sizeof(float));
        size_t pair = D;
        for (size_t i = 0; i < F; i++)
            for (size_t j = i + 1; j < F; j++, pair++) {
                tile_dot(tile + i * D * BLOCK, tile + j * D * BLOCK, D, acc);
                for (size_t k = 0; k < n; k++)
                    out[(b0 + k) * width + pair] = acc[k];
            }
    }
    free(tile);
    return EMBER_OK;
}

/* pair_of[i * F + j]: the place of the dot of i and j among the pairs
 * (triu_indices order), for i != j. */
static void pair_index(size_t F, uint32_t *pair_of)
{
    uint32_t k = 0;
    for (size_t i = 0; i < F; i++)
        for (size_t j = i + 1; j < F; j++, k++)
            pair_of[i * F + j] = pair_of[j * F + i] = k;
}

/* The block's pair gradients tiled: gtile[p][k] = grad_out's pair p of
 * example b0 + k (zeros past the block's @n). */
static void grad_tile_in(const float *grad_out, size_t width, size_t D, size_t pairs, size_t b0,
                         size_t n, float *restrict gtile)
{
    if (n < BLOCK)
        memset(gtile, 0, pairs * BLOCK * sizeof(float));
    for (size_t k = 0; k < n; k++) {
        const float *g = grad_out + (b0 + k) * width + D;
        for (size_t p = 0; p < pairs; p++)
            gtile[p * BLOCK + k] = g[p];
    }
}

/* Feature @f's gradient over the block, tiled into @acc [D][BLOCK]: the sum
 * over every other j, in increasing j, of its pair's gradient times x_j
 * (the dense part is added by the caller). */
static void feature_grad(const float *restrict tile, const float *restrict gtile,
                         const uint32_t *pair_of, size_t F, size_t D, size_t f, float *restrict acc)
{
    memset(acc, 0, D * BLOCK * sizeof(float));
    for (size_t j = 0; j < F; j++) {
        if (j == f)
            continue;
        const float *g = gtile + (size_t)pair_of[f * F + j] * BLOCK, *x = tile + j * D * BLOCK;
        for (size_t d = 0; d < D; d++)
            for (size_t k = 0; k < BLOCK; k++)
                acc[d * BLOCK + k] += g[k] * x[d * BLOCK + k];
    }
}

/* The scratch of a backward: the tiles, a feature's sums, the pair map. */
typedef struct {
    float *tile, *gtile, *acc;
    uint32_t *pair_of;
} backward_scratch_t;

static int scratch_alloc(const ember_interaction_shape_t *shape, backward_scratch_t *s)
{
    const size_t F = shape->features, D = shape->dim;
    s->tile = tile_alloc(shape);
    s->gtile = malloc((F * (F - 1) / 2 + 1) * BLOCK * sizeof(float));
    s->acc = malloc(D * BLOCK * sizeof(float));
    s->pair_of = malloc(F * F * sizeof(uint32_t));
    return s->tile && s->gtile && s->acc && s->pair_of;
}

static void scratch_free(backward_scratch_t *s)
{
    free(s->tile);
    free(s->gtile);
    free(s->acc);
    free(s->pair_of);
}

/* One block's gradients of every feature, written out untiled. */
static void backward_block(const ember_interaction_shape_t *shape, const float *grad_out,
                           float *const *grads, const backward_scratch_t *s, size_t b0, size_t n)
{
    const size_t F = shape->features, D = shape->dim, width = ember_interaction_width(shape);
    for (size_t f = 0; f < F; f++) {
        feature_grad(s->tile, s->gtile, s->pair_of, F, D, f, s->acc);
        for (size_t k = 0; k < n; k++) {
            float *out = grads[f] + (b0 + k) * D;
            const float *dense = grad_out + (b0 + k) * width;
            for (size_t d = 0; d < D; d++)
                out[d] = f == 0 ? dense[d] + s->acc[d * BLOCK + k] : s->acc[d * BLOCK + k];
        }
    }
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
    backward_scratch_t s;
    if (!scratch_alloc(shape, &s)) {
        scratch_free(&s);
        return EMBER_ERR_NO_MEMORY;
    }
    pair_index(F, s.pair_of);
    for (size_t b0 = 0; b0 < shape->batch; b0 += BLOCK) {
        const size_t n = shape->batch - b0 < BLOCK ? shape->batch - b0 : BLOCK;
        tile_in(shape, vectors, b0, n, s.tile);
        grad_tile_in(grad_out, width, D, F * (F - 1) / 2, b0, n, s.gtile);
        backward_block(shape, grad_out, grads, &s, b0, n);
    }
    scratch_free(&s);
    return EMBER_OK;
}
