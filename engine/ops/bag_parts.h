/*
 * engine/ops/bag_parts: a trainer's pooled vectors from its shards' partial
 * pools, and each shard's gradient of its part, on the host.  The layout and
 * semantics are the device ops parts_combine and parts_split
 * (include/ember/device.h): the CPU backend's ops are these, and the CUDA
 * kernels are checked against them bit for bit.
 */
#ifndef EMBER_ENGINE_POOL_PARTS_H
#define EMBER_ENGINE_POOL_PARTS_H

#include <ember/embedding_bag.h>

#include <stddef.h>
#include <stdint.h>

/** @parts: @nparts parts [bags, dim], part p at parts + p * @stride;
 * @counts [nparts][bags]; @bag_counts [bags] (mean); @places (max: part p's
 * [bags, dim] at places + p * @places_stride, each value's place in its bag,
 * engine/wire/protocol.h) and @winner [bags, dim] (max).  Sum: parts added in
 * shard order; mean: that times 1.0f / bag_counts[b]; max: the largest over
 * the shards where the bag has entries, of equal ones the one of the lowest
 * place (the bag's first maximal entry, as PyTorch), @winner that shard (-1
 * and 0 for an empty bag). */
void ember_bag_parts_combine(const float *parts, size_t stride, uint32_t nparts, size_t bags,
                             size_t dim, ember_bag_mode_t mode, const uint32_t *counts,
                             const uint32_t *bag_counts, const uint32_t *places,
                             size_t places_stride, float *out, int16_t *winner);

/** Shard p's gradient at grads + p * @stride from the pooled gradient @grad:
 * sum: a copy; mean: times 1.0f / bag_counts[b] (a copy for an empty bag);
 * max: @grad where @winner is p, else 0. */
void ember_bag_parts_split(const float *grad, uint32_t nparts, size_t bags, size_t dim,
                           ember_bag_mode_t mode, const uint32_t *bag_counts, const int16_t *winner,
                           float *grads, size_t stride);

#endif
