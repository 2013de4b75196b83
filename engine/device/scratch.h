/*
 * engine/device/scratch: grow-only buffers in a device's memory, or in its
 * pinned host memory (the fastest the device copies from, by DMA on a GPU).
 *
 * Neither can be realloc'd, so a buffer grows by a new allocation of about
 * twice the need (common/reserve.h's policy) and its contents are not kept:
 * a steady-state step allocates nothing.  Used by the PS's device shards and
 * by the trainer's buffers.
 */
#ifndef EMBER_ENGINE_DEVICE_SCRATCH_H
#define EMBER_ENGINE_DEVICE_SCRATCH_H

#include <ember/device.h>

#include <stddef.h>

typedef struct {
    void *data;
    size_t bytes;
    int pinned; /* set once: pinned host memory (host_alloc), else device memory */
} ember_scratch_t;

/** At least @bytes in @scratch (its contents lost when it grows).
 * Errors: the device's (ERR_NO_MEMORY), with @scratch then empty. */
ember_status_t ember_scratch_reserve(ember_device_t *device, ember_scratch_t *scratch,
                                     size_t bytes);

/** Free @scratch's memory; it stays usable (empty). */
void ember_scratch_free(ember_device_t *device, ember_scratch_t *scratch);

#endif
