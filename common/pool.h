/*
 * common/pool: size-class free lists for buffers that are reused at a high
 * rate.
 *
 * The transport recycles its requests, sends, futures and rendezvous
 * payloads here, and the parameter server its lookup replies: a steady
 * stream of messages then allocates nothing, large buffers keep their pages
 * (a fresh malloc of a big buffer costs page faults on every message), and
 * the most recently freed buffer of a class, the one still in cache, is the
 * next one handed out.
 */
#ifndef EMBER_COMMON_POOL_H
#define EMBER_COMMON_POOL_H

#include <stddef.h>

#define EMBER_POOL_CLASSES 48

typedef struct {
    void *free_list[EMBER_POOL_CLASSES];
    size_t free_count[EMBER_POOL_CLASSES];
    size_t bytes; /* allocated from malloc and not freed: in use + cached */
} ember_pool_t;

/** A buffer of at least @size bytes (NULL when out of memory). */
void *ember_pool_get(ember_pool_t *pool, size_t size);
/** As ember_pool_get, zeroed (for structs). */
void *ember_pool_zalloc(ember_pool_t *pool, size_t size);
/** Give back a buffer from ember_pool_get; NULL is a no-op. */
void ember_pool_put(ember_pool_t *pool, void *buffer);
/** Free everything cached. */
void ember_pool_cleanup(ember_pool_t *pool);

#endif
