/*
 * engine/train/trainer_dev: the device a trainer's step runs on, as its
 * phases share it: the dense model's memory (host memory on "cpu", so no
 * copies there) and the copies to and from it.
 */
#ifndef EMBER_ENGINE_TRAINER_DEV_H
#define EMBER_ENGINE_TRAINER_DEV_H

#include <ember/device.h>

#include <string.h>

typedef struct {
    ember_device_t *device;
    const ember_device_ops_t *ops;
    int on_host; /* device memory is host memory: nothing to copy */
} ember_trainer_dev_t;

/* Host -> device; nothing to do when the device is the host. */
static inline ember_status_t ember_trainer_to_device(const ember_trainer_dev_t *td, void *dst,
                                                     const void *src, size_t bytes)
{
    if (td->on_host) {
        if (dst != src)
            memcpy(dst, src, bytes);
        return EMBER_OK;
    }
    return td->ops->mem_copy(td->device, dst, src, bytes, EMBER_COPY_HOST_TO_DEVICE);
}

/* Device -> host. */
static inline ember_status_t ember_trainer_to_host(const ember_trainer_dev_t *td, void *dst,
                                                   const void *src, size_t bytes)
{
    if (td->on_host) {
        if (dst != src)
            memcpy(dst, src, bytes);
        return EMBER_OK;
    }
    return td->ops->mem_copy(td->device, dst, src, bytes, EMBER_COPY_DEVICE_TO_HOST);
}

#endif
