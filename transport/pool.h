/*
 * transport/pool: size-class free lists for the transport's hot path.
 *
 * Requests, sends, futures and rendezvous payload buffers are recycled
 * instead of returning to malloc each time: a steady stream of messages then
 * allocates nothing, and large buffers keep their pages (a fresh malloc of a
 * big buffer costs page faults on every message).
 */
#ifndef EMBER_TP_POOL_H
#define EMBER_TP_POOL_H

#include <stddef.h>

#define TP_POOL_CLASSES 48

typedef struct {
    void *free_list[TP_POOL_CLASSES];
    size_t free_count[TP_POOL_CLASSES];
} tp_pool_t;

/** A buffer of at least @size bytes (NULL when out of memory). */
void *tp_pool_get(tp_pool_t *pool, size_t size);
/** As tp_pool_get, zeroed (for structs). */
void *tp_pool_zalloc(tp_pool_t *pool, size_t size);
/** Give back a buffer from tp_pool_get; NULL is a no-op. */
void tp_pool_put(tp_pool_t *pool, void *buffer);
/** Free everything cached. */
void tp_pool_cleanup(tp_pool_t *pool);

#endif
