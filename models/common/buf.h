/*
 * models/common/buf: a model's buffers in its device's memory (or
 * the device's pinned host memory) and the copies to and from it.
 *
 * A buffer grows by a new allocation of about twice the need (a device's
 * memory cannot be realloc'd; its contents are not kept), so a steady-state
 * step allocates nothing.  On a device whose memory is the host's ("cpu")
 * the copies are plain memcpy, or nothing when source and destination are
 * one.
 */
#ifndef MODELS_COMMON_BUF_H
#define MODELS_COMMON_BUF_H

#include <ember/device.h>

#include <stddef.h>

typedef struct {
    void *data;
    size_t bytes;
    int pinned; /* set before the first reserve: pinned host memory, else the device's */
} model_buf_t;

/** At least @bytes in @buf (its contents lost when it grows).  Errors: the
 * device's (ERR_NO_MEMORY), @buf then empty. */
ember_status_t model_buf_reserve(ember_device_t *device, model_buf_t *buf, size_t bytes);

/** Its memory freed; it stays usable (empty). */
void model_buf_free(ember_device_t *device, model_buf_t *buf);

/** Host -> device (memcpy on a host device). */
ember_status_t model_to_device(ember_device_t *device, void *dst, const void *src, size_t bytes);

/** Device -> host. */
ember_status_t model_to_host(ember_device_t *device, void *dst, const void *src, size_t bytes);

/** Whether @device's memory is the host's. */
int model_on_host(const ember_device_t *device);

#endif
