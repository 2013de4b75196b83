/* engine/train/parts: the shards' parts of a step, staged or on the device
 * path (see parts.h). */
#include "engine/train/parts.h"

#include "engine/ops/bag_parts.h"
#include "engine/ops/half.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

#include <stdint.h>
#include <string.h>

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
     * counts and winners are device memory. */
    parts->winner.pinned = !rdma;
    parts->widened.pinned = parts->pooled.pinned = parts->grad_in.pinned = 1;
}

void ember_parts_destroy(ember_parts_t *parts)
{
    ember_scratch_t *all[] = {&parts->widened, &parts->pooled, &parts->grad_in, &parts->counts,
                              &parts->winner};
    if (!parts->td)
        return;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        ember_scratch_free(parts->td->device, all[i]);
}

/* The maxima's places in shard 0's reply, where the codec's layout has
 * them (NULL: not max mode). */
static const uint32_t *reply_places(const ember_parts_t *parts)
{
    if (parts->mode != EMBER_BAG_MAX)
        return NULL;
    return (const uint32_t *)(parts->replies + parts->reply.places);
}

ember_status_t ember_parts_bind(ember_parts_t *parts, size_t bags,
                                const ember_wire_reply_layout_t *reply, const void *replies,
                                size_t reply_stride, float *grads, size_t grad_stride)
{
    ember_device_t *device = parts->td->device;
    const size_t values = bags * parts->dim, P = parts->num_ps;
    /* The combine reads values and places as 4-byte words at a word stride. */
    if (reply_stride % 4 != 0 || (uintptr_t)replies % 4 != 0 || (uintptr_t)grads % 4 != 0 ||
        reply->places % 4 != 0 || reply->count != values ||
        (reply->value_bytes == 2) != (parts->half_replies != 0) ||
        (P > 1 && reply_stride < reply->bytes) || (P > 1 && grad_stride < values))
        return EMBER_ERR_INVALID_PARAM;
    parts->bags = bags;
    parts->reply = *reply;
    parts->replies = replies;
    parts->reply_stride = reply_stride;
    parts->grads = grads;
    parts->grad_stride = grad_stride;
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

ember_mem_type_t ember_parts_mem(const ember_parts_t *parts)
{
    return parts->rdma ? EMBER_MEM_CUDA : EMBER_MEM_HOST;
}

/* The device path: the counts its mode reads go over (max: each shard's;
 * mean: each bag's, which the split reads too) and the replies are
 * combined where they landed. */
static ember_status_t combine_on_device(ember_parts_t *parts, const uint32_t *counts,
                                        const uint32_t *bag_counts, float *x)
{
    const ember_trainer_dev_t *td = parts->td;
    const size_t bags = parts->bags, P = parts->num_ps, stride = parts->reply_stride / 4;
    uint32_t *d_counts = parts->counts.data, *d_bag_counts = d_counts + P * bags;
    if (parts->mode == EMBER_BAG_MAX)
        EMBER_CHECK(ember_trainer_to_device(td, d_counts, counts, P * bags * sizeof(uint32_t)));
    if (parts->mode == EMBER_BAG_MEAN)
        EMBER_CHECK(ember_trainer_to_device(td, d_bag_counts, bag_counts, bags * sizeof(uint32_t)));
    return td->ops->parts_combine(td->device, (const float *)(parts->replies + parts->reply.values),
                                  stride, parts->num_ps, bags, parts->dim, parts->mode, d_counts,
                                  d_bag_counts, reply_places(parts), stride, x, parts->winner.data);
}

/* Staged: fp16 values widened first (their places stay where they came),
 * combined on the host, the result copied to the device. */
static ember_status_t combine_staged(ember_parts_t *parts, const uint32_t *counts,
                                     const uint32_t *bag_counts, float *x)
{
    const ember_trainer_dev_t *td = parts->td;
    const size_t bags = parts->bags, values = bags * parts->dim;
    const size_t stride = parts->reply_stride / 4;
    const float *part_values = (const float *)(parts->replies + parts->reply.values);
    size_t part_stride = stride;
    if (parts->half_replies) {
        float *widened = parts->widened.data;
        for (uint32_t p = 0; p < parts->num_ps; p++)
            ember_half_to_float_n((const uint16_t *)(parts->replies + p * parts->reply_stride +
                                                     parts->reply.values),
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
                                         parts->grads, parts->grad_stride));
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
                          parts->winner.data, parts->grads, parts->grad_stride);
    return EMBER_OK;
}

/* ---- the buffers parts are bound into ------------------------------------ */

void ember_parts_buffer_init(ember_parts_buffer_t *buffer, const ember_trainer_dev_t *td, int rdma,
                             ember_tp_t *tp)
{
    *buffer = (ember_parts_buffer_t){.td = td, .rdma = rdma, .tp = tp};
    buffer->scratch.pinned = !rdma; /* the device path: device memory */
}

static void buffer_unregister(ember_parts_buffer_t *buffer)
{
    if (buffer->reg)
        ember_mem_deregister(buffer->tp, buffer->reg);
    buffer->reg = NULL;
}

ember_status_t ember_parts_buffer_reserve(ember_parts_buffer_t *buffer, size_t bytes)
{
    void *before = buffer->scratch.data;
    /* The registration goes before the memory it names does. */
    if (buffer->reg && (bytes > buffer->scratch.bytes || !before))
        buffer_unregister(buffer);
    EMBER_CHECK(ember_scratch_reserve(buffer->td->device, &buffer->scratch, bytes));
    if (!buffer->tp || buffer->reg)
        return EMBER_OK;
    ember_status_t status =
            ember_mem_register(buffer->tp, buffer->scratch.data, buffer->scratch.bytes,
                               buffer->rdma ? EMBER_MEM_CUDA : EMBER_MEM_HOST, &buffer->reg);
    if (status == EMBER_OK)
        ember_debug("train", "registered %zu bytes of %s memory for replies or pushes",
                    buffer->scratch.bytes, buffer->rdma ? "device" : "pinned host");
    return status;
}

void ember_parts_buffer_free(ember_parts_buffer_t *buffer)
{
    buffer_unregister(buffer);
    if (buffer->td)
        ember_scratch_free(buffer->td->device, &buffer->scratch);
}

ember_status_t ember_parts_buffer_put(ember_parts_buffer_t *buffer, size_t offset, const void *src,
                                      size_t bytes)
{
    uint8_t *dst = (uint8_t *)buffer->scratch.data + offset;
    const ember_trainer_dev_t *td = buffer->td;
    if (!buffer->rdma) {
        memcpy(dst, src, bytes);
        return EMBER_OK;
    }
    return td->ops->mem_copy(td->device, dst, src, bytes, EMBER_COPY_HOST_TO_DEVICE);
}

ember_status_t ember_parts_buffer_get(const ember_parts_buffer_t *buffer, size_t offset, void *dst,
                                      size_t bytes)
{
    const uint8_t *src = (const uint8_t *)buffer->scratch.data + offset;
    const ember_trainer_dev_t *td = buffer->td;
    if (!buffer->rdma) {
        memcpy(dst, src, bytes);
        return EMBER_OK;
    }
    return td->ops->mem_copy(td->device, dst, src, bytes, EMBER_COPY_DEVICE_TO_HOST);
}
