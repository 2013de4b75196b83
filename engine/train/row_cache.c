/* engine/train/row_cache: a trainer's cache of embedding rows (see
 * row_cache.h). */
#include "engine/train/row_cache.h"

#include <stdlib.h>
#include <string.h>

#define EMPTY (-1)

struct ember_row_cache {
    size_t capacity, used, hand;
    uint32_t dim;
    float *values;      /* [capacity][dim] */
    uint64_t *rows;     /* [capacity] each slot's row or key */
    uint64_t *versions; /* [capacity] */
    uint32_t *tables;   /* [capacity] */
    uint8_t *ref;       /* [capacity] CLOCK's reference bits */
    int32_t *index;     /* [mask + 1] slots, EMPTY: free */
    size_t mask;
    ember_row_cache_stats_t stats;
};

ember_status_t ember_row_cache_create(size_t capacity, uint32_t dim, ember_row_cache_t **cache_p)
{
    if (capacity == 0 || dim == 0 || capacity > INT32_MAX / 2 ||
        capacity > SIZE_MAX / sizeof(float) / dim)
        return EMBER_ERR_INVALID_PARAM;
    ember_row_cache_t *cache = calloc(1, sizeof(*cache));
    if (!cache)
        return EMBER_ERR_NO_MEMORY;
    size_t buckets = 2;
    while (buckets < 2 * capacity)
        buckets *= 2;
    cache->capacity = capacity;
    cache->dim = dim;
    cache->mask = buckets - 1;
    cache->values = malloc(capacity * dim * sizeof(float));
    cache->rows = malloc(capacity * sizeof(uint64_t));
    cache->versions = malloc(capacity * sizeof(uint64_t));
    cache->tables = malloc(capacity * sizeof(uint32_t));
    cache->ref = calloc(capacity, 1);
    cache->index = malloc(buckets * sizeof(int32_t));
    if (!cache->values || !cache->rows || !cache->versions || !cache->tables || !cache->ref ||
        !cache->index) {
        ember_row_cache_destroy(cache);
        return EMBER_ERR_NO_MEMORY;
    }
    for (size_t b = 0; b < buckets; b++)
        cache->index[b] = EMPTY;
    *cache_p = cache;
    return EMBER_OK;
}

void ember_row_cache_destroy(ember_row_cache_t *cache)
{
    if (!cache)
        return;
    free(cache->values);
    free(cache->rows);
    free(cache->versions);
    free(cache->tables);
    free(cache->ref);
    free(cache->index);
    free(cache);
}

uint32_t ember_row_cache_dim(const ember_row_cache_t *cache)
{
    return cache->dim;
}

/* splitmix64's finaliser over the table and row. */
static size_t bucket_of(const ember_row_cache_t *cache, uint32_t table, uint64_t row)
{
    uint64_t x = row ^ ((uint64_t)table * 0x9e3779b97f4a7c15ull);
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (size_t)x & cache->mask;
}

/* The bucket holding (@table, @row), or the free one that ends its probe. */
static size_t probe(const ember_row_cache_t *cache, uint32_t table, uint64_t row)
{
    size_t b = bucket_of(cache, table, row);
    for (;;) {
        const int32_t s = cache->index[b];
        if (s == EMPTY || (cache->rows[s] == row && cache->tables[s] == table))
            return b;
        b = (b + 1) & cache->mask;
    }
}

int64_t ember_row_cache_find(ember_row_cache_t *cache, uint32_t table, uint64_t row)
{
    const int32_t s = cache->index[probe(cache, table, row)];
    if (s == EMPTY)
        return -1;
    cache->ref[s] = 1;
    return s;
}

const float *ember_row_cache_values(const ember_row_cache_t *cache, int64_t slot)
{
    return cache->values + (size_t)slot * cache->dim;
}

uint64_t ember_row_cache_version(const ember_row_cache_t *cache, int64_t slot)
{
    return cache->versions[slot];
}

/* Slot @s's entry out of the index: linear probing's backward shift, so
 * no probe that passed it stops short. */
static void index_remove(ember_row_cache_t *cache, int32_t s)
{
    size_t hole = probe(cache, cache->tables[s], cache->rows[s]);
    size_t b = hole;
    for (;;) {
        b = (b + 1) & cache->mask;
        const int32_t t = cache->index[b];
        if (t == EMPTY)
            break;
        const size_t home = bucket_of(cache, cache->tables[t], cache->rows[t]);
        /* t may fill the hole when its home is not cyclically in (hole, b]. */
        const int between = hole <= b ? (hole < home && home <= b) : (hole < home || home <= b);
        if (!between) {
            cache->index[hole] = t;
            hole = b;
        }
    }
    cache->index[hole] = EMPTY;
}

/* A slot for a new row: a free one, else CLOCK's victim (out of the index). */
static int32_t slot_take(ember_row_cache_t *cache)
{
    if (cache->used < cache->capacity)
        return (int32_t)cache->used++;
    while (cache->ref[cache->hand]) {
        cache->ref[cache->hand] = 0;
        cache->hand = (cache->hand + 1) % cache->capacity;
    }
    const int32_t s = (int32_t)cache->hand;
    cache->hand = (cache->hand + 1) % cache->capacity;
    index_remove(cache, s);
    cache->stats.evicted++;
    return s;
}

void ember_row_cache_put(ember_row_cache_t *cache, uint32_t table, uint64_t row,
                         const float *values, uint32_t dim, uint64_t version)
{
    if (dim > cache->dim)
        return; /* ember_sparse_create refused such a table */
    size_t b = probe(cache, table, row);
    int32_t s = cache->index[b];
    if (s != EMPTY) {
        if (cache->versions[s] > version)
            return;
    } else {
        s = slot_take(cache);
        cache->tables[s] = table;
        cache->rows[s] = row;
        cache->index[probe(cache, table, row)] = s; /* the victim's removal may move b */
        cache->ref[s] = 0;
        cache->stats.inserted++;
    }
    cache->versions[s] = version;
    memcpy(cache->values + (size_t)s * cache->dim, values, dim * sizeof(float));
}

void ember_row_cache_count(ember_row_cache_t *cache, uint64_t lookups, uint64_t hits,
                           uint64_t stale, uint64_t behind)
{
    cache->stats.lookups += lookups;
    cache->stats.hits += hits;
    cache->stats.stale += stale;
    if (behind > cache->stats.oldest)
        cache->stats.oldest = behind;
}

void ember_row_cache_stats(const ember_row_cache_t *cache, ember_row_cache_stats_t *stats)
{
    *stats = cache->stats;
    stats->rows = cache->used;
}
