/*
 * engine/train/parts: a table's shards' parts of a step on this trainer, and
 * the one place that knows which memory they live in.
 *
 * Each shard answers a lookup with its partial pools (and max mode's
 * places); the trainer combines them into the dense model's input, and
 * splits that input's gradient back into one gradient per shard
 * (engine/ops/bag_parts.h).  The replies and gradients themselves live in
 * buffers of the caller's (ember_parts_buffer_t: engine/train/sparse keeps
 * every table's in one block per PS, as each PS's LOOKUPS reply lands and
 * its GRADS leaves); a table's parts are bound to where its shards' lie,
 * at one stride, so nothing is copied between the network and the
 * combine.  On the device path (the device's network_path
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
#include "engine/wire/codec.h"

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
    /* This step's (ember_parts_bind): its bags, one shard's reply as the
     * codec lays it out (values, then places), and where the shards'
     * replies and gradients lie, in a buffer of the caller's
     * (engine/train/sparse: every table's in one block per PS, so a shard's
     * reply is where its PS's reply landed). */
    size_t bags;
    ember_wire_reply_layout_t reply;
    const uint8_t *replies;  /* shard p's reply at replies + p * reply_stride */
    size_t reply_stride;     /* bytes, a multiple of 4 */
    float *grads;            /* shard p's gradient at grads + p * grad_stride */
    size_t grad_stride;      /* floats */
    ember_scratch_t widened; /* fp16 replies widened: p's at p * bags * dim */
    ember_scratch_t pooled;  /* the combined input on the host (staged) */
    ember_scratch_t grad_in; /* its gradient on the host (staged) */
    ember_scratch_t counts;  /* device path: the counts, on the device */
    ember_scratch_t winner;  /* max mode: the shard of each maximum */
} ember_parts_t;

/**
 * Set up @parts for a table of @dim with @mode over @num_ps shards on @td;
 * @rdma: the device path.  Nothing is allocated until a step binds.
 */
void ember_parts_init(ember_parts_t *parts, const ember_trainer_dev_t *td, int rdma,
                      uint32_t num_ps, uint32_t dim, ember_bag_mode_t mode, int half_replies);

/** Release every buffer of its own. */
void ember_parts_destroy(ember_parts_t *parts);

/**
 * This step: @bags, each shard's reply laid out as @reply says (the codec's
 * ember_wire_reply_layout of this step's lookups) at @replies + p *
 * @reply_stride bytes,
 * each shard's gradient (bags * dim floats) to be written at @grads + p *
 * @grad_stride floats; both in ember_parts_mem() memory (an
 * ember_parts_buffer_t), borrowed until the next bind.  Makes room in the
 * table's own scratch.  Errors: ERR_INVALID_PARAM (a stride that is not
 * whole floats, or places that would not be aligned), the device's
 * (ERR_NO_MEMORY).
 */
ember_status_t ember_parts_bind(ember_parts_t *parts, size_t bags,
                                const ember_wire_reply_layout_t *reply, const void *replies,
                                size_t reply_stride, float *grads, size_t grad_stride);

/** Where the replies land and the gradients leave from. */
ember_mem_type_t ember_parts_mem(const ember_parts_t *parts);

/**
 * Combine the replies into the dense model's input @x ([bags, dim], device
 * memory): @counts [num_ps * bags] entries of each bag on each shard (read
 * in max mode only), @bag_counts [bags] in all (mean only; the split reads
 * them too); host memory, as the split made them.
 */
ember_status_t ember_parts_combine(ember_parts_t *parts, const uint32_t *counts,
                                   const uint32_t *bag_counts, float *x);

/**
 * Each shard's gradient of its part from @grad_x, the gradient of the input
 * ([bags, dim], device memory), written where the bind said, complete
 * before this returns (the transport reads it next).
 */
ember_status_t ember_parts_split(ember_parts_t *parts, const uint32_t *bag_counts,
                                 const float *grad_x);

/* A buffer in the memory replies land in and pushes leave from: the
 * device's on the device path, else pinned host memory.  The trainer's
 * replies and gradients of every table live in two of these, one block per
 * PS, which each table's parts are bound into.  Each is registered with
 * @tp's UCX whenever it is (re)allocated, and that registration (reg)
 * goes with every call that receives into or sends from it
 * (ember_rpc_param_t's reply_reg, payload_reg): UCX registers it and
 * detects its memory type once, not every step. */
typedef struct {
    const ember_trainer_dev_t *td;
    int rdma;
    ember_tp_t *tp;   /* NULL: not registered */
    ember_mem_t *reg; /* the whole of scratch, on tp */
    ember_scratch_t scratch;
} ember_parts_buffer_t;

void ember_parts_buffer_init(ember_parts_buffer_t *buffer, const ember_trainer_dev_t *td, int rdma,
                             ember_tp_t *tp);
/** At least @bytes (contents lost when it grows; registered anew). */
ember_status_t ember_parts_buffer_reserve(ember_parts_buffer_t *buffer, size_t bytes);
void ember_parts_buffer_free(ember_parts_buffer_t *buffer);
/** @bytes of host memory @src into the buffer at @offset (a push's head in
 * front of its gradients), complete when this returns. */
ember_status_t ember_parts_buffer_put(ember_parts_buffer_t *buffer, size_t offset, const void *src,
                                      size_t bytes);
/** @bytes of the buffer at @offset into host memory @dst (a reply's
 * version), complete when this returns. */
ember_status_t ember_parts_buffer_get(const ember_parts_buffer_t *buffer, size_t offset, void *dst,
                                      size_t bytes);

#endif
