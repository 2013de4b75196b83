/* common/pool: power-of-two size classes with bounded free lists. */
#include "common/pool.h"
#include "common/hugepage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Each buffer is preceded by its class; 16 bytes keep the payload aligned. */
typedef union {
    struct {
        unsigned size_class;
        unsigned carved; /* from a huge-page chunk: never freed alone */
        void *next;      /* while cached */
    } s;
    max_align_t align;
} pool_header_t;

/* Cache at most this many bytes, and entries, per class (malloc'd ones). */
#define POOL_MAX_CACHED_BYTES (64u << 20)
#define POOL_MAX_CACHED_COUNT 1024

#define POOL_HUGE_MAX_CLASS 20 /* 1 MiB: larger buffers are malloc'd */
#define POOL_SLOT_PAD       64 /* before each carved payload: its header */
#define POOL_CHUNK_SLOTS    4  /* a chunk holds at least this many */

static unsigned size_class(size_t size)
{
    unsigned c = 6; /* 64 bytes at least */
    while (c < EMBER_POOL_CLASSES - 1 && ((size_t)1 << c) < size)
        c++;
    return c;
}

static int class_is_huge(const ember_pool_t *pool, unsigned c)
{
    return pool->huge_min && c <= POOL_HUGE_MAX_CLASS && ((size_t)1 << c) >= pool->huge_min;
}

/* The next buffer of class @c out of a huge-page chunk (a new chunk when
 * the current one is used up); NULL when out of memory. */
static pool_header_t *carve(ember_pool_t *pool, unsigned c)
{
    size_t stride = POOL_SLOT_PAD + ((size_t)1 << c);

    if (!pool->carve_left[c]) {
        /* The first cache line links the chunks and holds this one's size;
         * payloads stay 64-aligned. */
        size_t bytes = POOL_SLOT_PAD + POOL_CHUNK_SLOTS * stride;
        bytes = (bytes + EMBER_HUGE_PAGE - 1) / EMBER_HUGE_PAGE * EMBER_HUGE_PAGE;
        void *chunk = ember_huge_map(bytes, 0);
        if (!chunk)
            return NULL;
        ((void **)chunk)[0] = pool->chunks;
        ((size_t *)chunk)[1] = bytes;
        pool->chunks = chunk;
        pool->bytes += bytes;
        pool->carve[c] = (char *)chunk + POOL_SLOT_PAD;
        pool->carve_left[c] = (bytes - POOL_SLOT_PAD) / stride;
    }
    pool_header_t *header = (pool_header_t *)(pool->carve[c] + POOL_SLOT_PAD) - 1;
    pool->carve[c] += stride;
    pool->carve_left[c]--;
    header->s.size_class = c;
    header->s.carved = 1;
    return header;
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
    } else if (class_is_huge(pool, c)) {
        if (!(header = carve(pool, c)))
            return NULL;
    } else {
        header = malloc(sizeof(*header) + ((size_t)1 << c));
        if (!header)
            return NULL;
        header->s.size_class = c;
        header->s.carved = 0;
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
    if (!header->s.carved &&
        (pool->free_count[c] >= POOL_MAX_CACHED_COUNT ||
         (pool->free_count[c] + 1) * ((size_t)1 << c) > POOL_MAX_CACHED_BYTES)) {
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
            if (!header->s.carved) {
                pool->bytes -= (size_t)1 << c;
                free(header);
            }
        }
        pool->free_count[c] = 0;
        pool->carve[c] = NULL;
        pool->carve_left[c] = 0;
    }
    while (pool->chunks) {
        void *chunk = pool->chunks;
        pool->chunks = ((void **)chunk)[0];
        size_t bytes = ((size_t *)chunk)[1];
        pool->bytes -= bytes;
        munmap(chunk, bytes);
    }
}
