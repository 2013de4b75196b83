/* models/common/buf: device buffers and copies (see buf.h). */
#include "models/common/buf.h"

#include <ember/log.h>
#include <stdint.h>
#include <string.h>

ember_status_t model_buf_reserve(ember_device_t *device, model_buf_t *buf, size_t bytes)
{
    if (bytes <= buf->bytes && buf->data)
        return EMBER_OK;
    size_t want = bytes > SIZE_MAX / 2 ? bytes : 2 * bytes;
    if (want < 64)
        want = 64;
    model_buf_free(device, buf);
    const ember_device_ops_t *ops = ember_device_ops(device);
    ember_status_t status = buf->pinned ? ops->host_alloc(device, want, &buf->data)
                                        : ops->mem_alloc(device, want, &buf->data);
    if (status != EMBER_OK) {
        buf->data = NULL;
        return status;
    }
    buf->bytes = want;
    return EMBER_OK;
}

void model_buf_free(ember_device_t *device, model_buf_t *buf)
{
    if (buf->data) {
        const ember_device_ops_t *ops = ember_device_ops(device);
        if (buf->pinned)
            ops->host_free(device, buf->data);
        else
            ops->mem_free(device, buf->data);
    }
    buf->data = NULL;
    buf->bytes = 0;
}

int model_on_host(const ember_device_t *device)
{
    return ember_device_mem_type(device) == EMBER_MEM_HOST;
}

ember_status_t model_to_device(ember_device_t *device, void *dst, const void *src, size_t bytes)
{
    if (model_on_host(device)) {
        if (dst != src && bytes)
            memcpy(dst, src, bytes);
        return EMBER_OK;
    }
    return ember_device_ops(device)->mem_copy(device, dst, src, bytes, EMBER_COPY_HOST_TO_DEVICE);
}

ember_status_t model_to_host(ember_device_t *device, void *dst, const void *src, size_t bytes)
{
    if (model_on_host(device)) {
        if (dst != src && bytes)
            memcpy(dst, src, bytes);
        return EMBER_OK;
    }
    return ember_device_ops(device)->mem_copy(device, dst, src, bytes, EMBER_COPY_DEVICE_TO_HOST);
}
