/* engine/train/parts: the shards' parts of a step, staged or on the device
 * path (see parts.h). */
#include "engine/train/parts.h"

#include "engine/ops/bag_parts.h"
#include "engine/ops/half.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

void ember_parts_init(ember_parts_t *parts, const ember_trainer_dev_t *td, int rdma,
                      uint32_t num_ps, uint32_t dim, ember_bag_mode_t mode, int half_replies)
{
    *parts = (ember_parts_t){.td = td,
                             .rdma = rdma,
                             .num_ps = num_ps,
                             .dim = dim,
                             .mode = mode,
                             .half_replies = half_replies};
    /* Host staging is pinned (the GPU copies it by DMA); the device path's
     * replies, gradients, counts and winners are device memory. */
    parts->replies.pinned = parts->grads.pinned = parts->winner.pinned = !rdma;
    parts->widened.pinned = parts->pooled.pinned = parts->grad_in.pinned = 1;
}

void ember_parts_destroy(ember_parts_t *parts)
{
    ember_scratch_t *all[] = {&parts->replies, &parts->widened, &parts->pooled, &parts->grad_in,
                              &parts->grads,   &parts->counts,  &parts->winner};
    if (!parts->td)
        return;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        ember_scratch_free(parts->td->device, all[i]);
}

ember_status_t ember_parts_reserve(ember_parts_t *parts, size_t bags, size_t reply_bytes)
{
    ember_device_t *device = parts->td->device;
    const size_t values = bags * parts->dim, P = parts->num_ps;
    parts->bags = bags;
    parts->reply_bytes = reply_bytes;
    parts->grad_stride = values;
    EMBER_CHECK(ember_scratch_reserve(device, &parts->replies, P * reply_bytes));
    EMBER_CHECK(ember_scratch_reserve(device, &parts->grads, P * values * sizeof(float)));
    if (parts->mode == EMBER_BAG_MAX)
        EMBER_CHECK(ember_scratch_reserve(device, &parts->winner, values * sizeof(int16_t)));
    if (parts->rdma)
        return ember_scratch_reserve(device, &parts->counts, (P + 1) * bags * sizeof(uint32_t));
    if (parts->half_replies)
        EMBER_CHECK(ember_scratch_reserve(device, &parts->widened, P * values * sizeof(float)));
    if (!parts->td->on_host) {
        EMBER_CHECK(ember_scratch_reserve(device, &parts->pooled, values * sizeof(float)));
        EMBER_CHECK(ember_scratch_reserve(device, &parts->grad_in, values * sizeof(float)));
    }
    return EMBER_OK;
}

void *ember_parts_reply(ember_parts_t *parts, uint32_t p)
{
    return (uint8_t *)parts->replies.data + (size_t)p * parts->reply_bytes;
}

ember_mem_type_t ember_parts_mem(const ember_parts_t *parts)
{
    return parts->rdma ? EMBER_MEM_CUDA : EMBER_MEM_HOST;
}

const float *ember_parts_grad(const ember_parts_t *parts, uint32_t p)
{
    return (const float *)parts->grads.data + (size_t)p * parts->grad_stride;
}

/* The maxima's places in each reply: after its values, as
 * ember_wire_lookup_reply_bytes lays a reply out (NULL: not max mode). */
static const uint32_t *reply_places(const ember_parts_t *parts)
{
    if (parts->mode != EMBER_BAG_MAX)
        return NULL;
    ember_msg_lookup_t reply = {.bags = (uint32_t)parts->bags,
                                .flags = EMBER_LOOKUP_MAX |
                                         (parts->half_replies ? EMBER_LOOKUP_HALF_REPLY : 0)};
    const uint8_t *replies = parts->replies.data;
    return (const uint32_t *)(replies + ember_wire_lookup_places_at(&reply, parts->dim));
}

/* The device path: the counts go over and the replies are combined where
 * they landed. */
static ember_status_t combine_on_device(ember_parts_t *parts, const uint32_t *counts,
                                        const uint32_t *bag_counts, float *x)
{
    const ember_trainer_dev_t *td = parts->td;
    const size_t bags = parts->bags, P = parts->num_ps, stride = parts->reply_bytes / 4;
    uint32_t *d_counts = parts->counts.data, *d_bag_counts = d_counts + P * bags;
    EMBER_CHECK(ember_trainer_to_device(td, d_counts, counts, P * bags * sizeof(uint32_t)));
    EMBER_CHECK(ember_trainer_to_device(td, d_bag_counts, bag_counts, bags * sizeof(uint32_t)));
    return td->ops->parts_combine(td->device, parts->replies.data, stride, parts->num_ps, bags,
                                  parts->dim, parts->mode, d_counts, d_bag_counts,
                                  reply_places(parts), stride, x, parts->winner.data);
}

/* Staged: fp16 values widened first (their places stay where they came),
 * combined on the host, the result copied to the device. */
static ember_status_t combine_staged(ember_parts_t *parts, const uint32_t *counts,
                                     const uint32_t *bag_counts, float *x)
{
    const ember_trainer_dev_t *td = parts->td;
    const size_t bags = parts->bags, values = bags * parts->dim;
    const size_t stride = parts->reply_bytes / 4;
    const float *part_values = parts->replies.data;
    size_t part_stride = stride;
    if (parts->half_replies) {
        float *widened = parts->widened.data;
        for (uint32_t p = 0; p < parts->num_ps; p++)
            ember_half_to_float_n((const uint16_t *)ember_parts_reply(parts, p),
                                  widened + p * values, values);
        part_values = widened;
        part_stride = values;
    }
    float *host = td->on_host ? x : parts->pooled.data;
    ember_bag_parts_combine(part_values, part_stride, parts->num_ps, bags, parts->dim, parts->mode,
                            counts, bag_counts, reply_places(parts), stride, host,
                            parts->winner.data);
    return ember_trainer_to_device(td, x, host, values * sizeof(float));
}

ember_status_t ember_parts_combine(ember_parts_t *parts, const uint32_t *counts,
                                   const uint32_t *bag_counts, float *x)
{
    return parts->rdma ? combine_on_device(parts, counts, bag_counts, x)
                       : combine_staged(parts, counts, bag_counts, x);
}

ember_status_t ember_parts_split(ember_parts_t *parts, const uint32_t *bag_counts,
                                 const float *grad_x)
{
    const ember_trainer_dev_t *td = parts->td;
    const size_t bags = parts->bags, values = bags * parts->dim;
    if (parts->rdma) {
        const uint32_t *d_bag_counts = (const uint32_t *)parts->counts.data + parts->num_ps * bags;
        EMBER_CHECK(td->ops->parts_split(td->device, grad_x, parts->num_ps, bags, parts->dim,
                                         parts->mode, d_bag_counts, parts->winner.data,
                                         parts->grads.data, parts->grad_stride));
        /* Complete before UCX reads the gradients. */
        return td->ops->synchronize(td->device);
    }
    /* d(loss)/d(each shard's part), as the PS's sum/max backward wants it. */
    const float *host = grad_x;
    if (!td->on_host) {
        EMBER_CHECK(ember_trainer_to_host(td, parts->grad_in.data, grad_x, values * sizeof(float)));
        host = parts->grad_in.data;
    }
    ember_bag_parts_split(host, parts->num_ps, bags, parts->dim, parts->mode, bag_counts,
                          parts->winner.data, parts->grads.data, parts->grad_stride);
    return EMBER_OK;
}
