/* engine/ops/bag_parts: combining shards' partial pools (see bag_parts.h). */
#include "engine/ops/bag_parts.h"

#include "common/copy.h"

#include <string.h>

/* Max: per element the largest part, of equal ones the one whose maximal
 * entry comes first in the bag (the lowest place). */
static void combine_max(const float *parts, size_t stride, uint32_t nparts, size_t bags, size_t dim,
                        const uint32_t *counts, const uint32_t *places, size_t places_stride,
                        float *out, int16_t *winner)
{
    for (size_t b = 0; b < bags; b++) {
        float *o = out + b * dim;
        int16_t *w = winner + b * dim;
        for (size_t d = 0; d < dim; d++) {
            o[d] = 0.0f; /* an empty bag pools to zeros */
            w[d] = -1;
        }
        for (uint32_t p = 0; p < nparts; p++) {
            if (!counts[(size_t)p * bags + b])
                continue;
            const float *part = parts + p * stride + b * dim;
            const uint32_t *place = places + p * places_stride + b * dim;
            for (size_t d = 0; d < dim; d++) {
                int wins =
                        w[d] < 0 || part[d] > o[d] ||
                        (part[d] == o[d] && place[d] < places[w[d] * places_stride + b * dim + d]);
                if (wins) {
                    o[d] = part[d];
                    w[d] = (int16_t)p;
                }
            }
        }
    }
}

void ember_bag_parts_combine(const float *parts, size_t stride, uint32_t nparts, size_t bags,
                             size_t dim, ember_bag_mode_t mode, const uint32_t *counts,
                             const uint32_t *bag_counts, const uint32_t *places,
                             size_t places_stride, float *out, int16_t *winner)
{
    const size_t total = bags * dim;

    if (mode == EMBER_BAG_MAX) {
        combine_max(parts, stride, nparts, bags, dim, counts, places, places_stride, out, winner);
        return;
    }
    ember_copy(out, parts, total * sizeof(float));
    for (uint32_t p = 1; p < nparts; p++) {
        const float *part = parts + p * stride;
        for (size_t i = 0; i < total; i++)
            out[i] += part[i];
    }
    for (size_t b = 0; mode == EMBER_BAG_MEAN && b < bags; b++) {
        if (!bag_counts[b])
            continue;
        float inv = 1.0f / (float)bag_counts[b];
        for (size_t d = 0; d < dim; d++)
            out[b * dim + d] *= inv;
    }
}

void ember_bag_parts_split(const float *grad, uint32_t nparts, size_t bags, size_t dim,
                           ember_bag_mode_t mode, const uint32_t *bag_counts, const int16_t *winner,
                           float *grads, size_t stride)
{
    for (uint32_t p = 0; p < nparts; p++) {
        for (size_t b = 0; b < bags; b++) {
            const float *g = grad + b * dim;
            float *out = grads + p * stride + b * dim;
            if (mode == EMBER_BAG_MAX) {
                const int16_t *w = winner + b * dim;
                for (size_t d = 0; d < dim; d++)
                    out[d] = w[d] == (int16_t)p ? g[d] : 0.0f;
            } else if (mode == EMBER_BAG_MEAN && bag_counts[b]) {
                float inv = 1.0f / (float)bag_counts[b];
                for (size_t d = 0; d < dim; d++)
                    out[d] = g[d] * inv;
            } else {
                memcpy(out, g, dim * sizeof(float));
            }
        }
    }
}
