/* common/pool: power-of-two size classes with bounded free lists. */
#include "common/pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Each buffer is preceded by its class; 16 bytes keep the payload aligned. */
typedef union {
    struct {
        unsigned size_class;
        void *next; /* while cached */
    } s;
    max_align_t align;
} pool_header_t;

/* Cache at most this many bytes, and entries, per class. */
#define POOL_MAX_CACHED_BYTES (64u << 20)
#define POOL_MAX_CACHED_COUNT 1024

static unsigned size_class(size_t size)
{
    unsigned c = 6; /* 64 bytes at least */
    while (c < EMBER_POOL_CLASSES - 1 && ((size_t)1 << c) < size)
        c++;
    return c;
}

void *ember_pool_get(ember_pool_t *pool, size_t size)
{
    unsigned c = size_class(size);
    pool_header_t *header;

    if (((size_t)1 << c) < size)
        return NULL; /* beyond the largest class */
    header = pool->free_list[c];
    if (header) {
        pool->free_list[c] = header->s.next;
        pool->free_count[c]--;
    } else {
        header = malloc(sizeof(*header) + ((size_t)1 << c));
        if (!header)
            return NULL;
        header->s.size_class = c;
        pool->bytes += (size_t)1 << c;
    }
    return header + 1;
}

void *ember_pool_zalloc(ember_pool_t *pool, size_t size)
{
    void *buffer = ember_pool_get(pool, size);
    if (buffer)
        memset(buffer, 0, size);
    return buffer;
}

void ember_pool_put(ember_pool_t *pool, void *buffer)
{
    pool_header_t *header;
    unsigned c;

    if (!buffer)
        return;
    header = (pool_header_t *)buffer - 1;
    c = header->s.size_class;
    if (pool->free_count[c] >= POOL_MAX_CACHED_COUNT ||
        (pool->free_count[c] + 1) * ((size_t)1 << c) > POOL_MAX_CACHED_BYTES) {
        pool->bytes -= (size_t)1 << c;
        free(header);
        return;
    }
    header->s.next = pool->free_list[c];
    pool->free_list[c] = header;
    pool->free_count[c]++;
}

void ember_pool_cleanup(ember_pool_t *pool)
{
    for (unsigned c = 0; c < EMBER_POOL_CLASSES; c++) {
        while (pool->free_list[c]) {
            pool_header_t *header = pool->free_list[c];
            pool->free_list[c] = header->s.next;
            pool->bytes -= (size_t)1 << c;
            free(header);
        }
        pool->free_count[c] = 0;
    }
}
