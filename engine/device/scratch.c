/* engine/device/scratch: grow-only device and pinned buffers (see scratch.h). */
#include "engine/device/scratch.h"

#include "common/reserve.h"

ember_status_t ember_scratch_reserve(ember_device_t *device, ember_scratch_t *scratch, size_t bytes)
{
    if (bytes <= scratch->bytes && scratch->data)
        return EMBER_OK;
    size_t want = ember_grow_capacity(scratch->bytes, bytes, 1);
    if (!want)
        return EMBER_ERR_NO_MEMORY;
    ember_scratch_free(device, scratch);
    const ember_device_ops_t *dev = ember_device_ops(device);
    ember_status_t status = scratch->pinned ? dev->host_alloc(device, want, &scratch->data)
                                            : dev->mem_alloc(device, want, &scratch->data);
    if (status != EMBER_OK) {
        scratch->data = NULL;
        return status;
    }
    scratch->bytes = want;
    return EMBER_OK;
}

void ember_scratch_free(ember_device_t *device, ember_scratch_t *scratch)
{
    if (scratch->data) {
        const ember_device_ops_t *dev = ember_device_ops(device);
        if (scratch->pinned)
            dev->host_free(device, scratch->data);
        else
            dev->mem_free(device, scratch->data);
    }
    scratch->data = NULL;
    scratch->bytes = 0;
}
