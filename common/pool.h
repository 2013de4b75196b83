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
 *
 * Classes of huge_min bytes and up (0: none), up to 1 MiB, are carved out of
 * 2 MiB-aligned chunks on transparent huge pages.  A same-host peer reads
 * such a buffer with one process_vm_readv that pins a huge page per 2 MiB
 * instead of a page per 4 KiB.  Those buffers are never returned to malloc
 * one by one: the chunks are freed by ember_pool_cleanup, so every buffer of
 * a huge class must be back in the pool by then.
 */
#ifndef EMBER_COMMON_POOL_H
#define EMBER_COMMON_POOL_H

#include <stddef.h>

#define EMBER_POOL_CLASSES 48

typedef struct {
    void *free_list[EMBER_POOL_CLASSES];
    size_t free_count[EMBER_POOL_CLASSES];
    size_t bytes;                    /* from malloc and not freed: in use + cached + chunks */
    size_t huge_min;                 /* classes from this size up on huge pages; 0: none */
    void *chunks;                    /* huge-page chunks, linked through their first word */
    char *carve[EMBER_POOL_CLASSES]; /* the next buffer of a chunk in use */
    size_t carve_left[EMBER_POOL_CLASSES];
} ember_pool_t;

/** A buffer of at least @size bytes (NULL when out of memory). */
void *ember_pool_get(ember_pool_t *pool, size_t size);
/** As ember_pool_get, zeroed (for structs). */
void *ember_pool_zalloc(ember_pool_t *pool, size_t size);
/** Give back a buffer from ember_pool_get; NULL is a no-op. */
void ember_pool_put(ember_pool_t *pool, void *buffer);
/** Free everything cached, and the huge-page chunks. */
void ember_pool_cleanup(ember_pool_t *pool);

#endif
