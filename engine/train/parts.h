/*
 * engine/train/parts: a table's shards' parts of a step on this trainer, and
 * the one place that knows which memory they live in.
 *
 * Each shard answers a lookup with its partial pools (and max mode's
 * places); the trainer combines them into the dense model's input, and
 * splits that input's gradient back into one gradient per shard
 * (engine/ops/bag_parts.h).  On the device path (the device's network_path
 * says EMBER_MEM_CUDA: GPUDirect) replies land in device memory, are
 * combined and split there, and pushes leave from there.  Otherwise they
 * are staged in the device's pinned host memory, combined and split on the
 * host, and copied to and from the device.  Every fork between the two is
 * in parts.c.
 */
#ifndef EMBER_ENGINE_TRAIN_PARTS_H
#define EMBER_ENGINE_TRAIN_PARTS_H

#include "engine/device/scratch.h"
#include "engine/train/trainer_dev.h"

#include <ember/embedding_bag.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const ember_trainer_dev_t *td;
    int rdma; /* the device path */
    uint32_t num_ps, dim;
    ember_bag_mode_t mode;
    int half_replies; /* replies in fp16, widened on the host */
    /* This step's: its bags and one shard's reply (values, then places). */
    size_t bags, reply_bytes;
    /* Replies as they came: shard p's at p * reply_bytes (pinned host
     * memory, or device memory on the device path). */
    ember_scratch_t replies;
    ember_scratch_t widened; /* fp16 replies widened: p's at p * bags * dim */
    ember_scratch_t pooled;  /* the combined input on the host (staged) */
    ember_scratch_t grad_in; /* its gradient on the host (staged) */
    ember_scratch_t grads;   /* each shard's gradient: p's at p * grad_stride */
    ember_scratch_t counts;  /* device path: the counts, on the device */
    ember_scratch_t winner;  /* max mode: the shard of each maximum */
    size_t grad_stride;      /* floats between shards' gradients */
} ember_parts_t;

/**
 * Set up @parts for a table of @dim with @mode over @num_ps shards on @td;
 * @rdma: the device path.  Nothing is allocated until a step reserves.
 */
void ember_parts_init(ember_parts_t *parts, const ember_trainer_dev_t *td, int rdma,
                      uint32_t num_ps, uint32_t dim, ember_bag_mode_t mode, int half_replies);

/** Release every buffer. */
void ember_parts_destroy(ember_parts_t *parts);

/** Room for a step of @bags whose shards each reply @reply_bytes
 * (ember_wire_lookup_reply_bytes). */
ember_status_t ember_parts_reserve(ember_parts_t *parts, size_t bags, size_t reply_bytes);

/** Where shard @p's reply lands, and the memory it is in. */
void *ember_parts_reply(ember_parts_t *parts, uint32_t p);
ember_mem_type_t ember_parts_mem(const ember_parts_t *parts);

/**
 * Combine the replies into the dense model's input @x ([bags, dim], device
 * memory): @counts [num_ps * bags] entries of each bag on each shard,
 * @bag_counts [bags] in all (host memory, as the split made them).
 */
ember_status_t ember_parts_combine(ember_parts_t *parts, const uint32_t *counts,
                                   const uint32_t *bag_counts, float *x);

/**
 * Each shard's gradient of its part from @grad_x, the gradient of the input
 * ([bags, dim], device memory), complete before this returns (the
 * transport reads it next).
 */
ember_status_t ember_parts_split(ember_parts_t *parts, const uint32_t *bag_counts,
                                 const float *grad_x);

/** Shard @p's gradient, bags * dim floats in ember_parts_mem() memory. */
const float *ember_parts_grad(const ember_parts_t *parts, uint32_t p);

#endif
