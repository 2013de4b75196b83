/*
 * engine/train/row_cache: a trainer's cache of embedding rows
 * (--cache-rows, <ember/lookup.h>'s ember_ebc_set_cache_rows), so that a
 * row the trainer holds a good copy of need not come over the network
 * again (engine/wire/protocol.h, EMBER_LOOKUP_ROWS).
 *
 * At most @capacity rows of every cached table of the trainer, each
 * (table id, row or dynamic key) with its values (fp32, the widest cached
 * table's dim) and the version (the PS's row clock) they are of: memory
 * capacity x dim x 4 bytes plus an open-addressing index of 2 x capacity
 * (rounded up to a power of two) int32 entries and 24 bytes a row.
 * Replacement: CLOCK (a reference bit a row, set by each find; the hand
 * clears bits until it finds a row without one).  Single-threaded: the
 * trainer's thread only (both slots of its pipeline share one).
 */
#ifndef EMBER_ENGINE_TRAIN_ROW_CACHE_H
#define EMBER_ENGINE_TRAIN_ROW_CACHE_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ember_row_cache ember_row_cache_t;

/* What a cache did (<ember/lookup.h>'s ember_cache_stats_t is made from
 * it). */
typedef struct {
    uint64_t lookups;  /* distinct rows of cached lookups */
    uint64_t hits;     /* of them, a copy that stood */
    uint64_t stale;    /* of the hits, copies that stood by the staleness bound */
    uint64_t oldest;   /* the most steps a stale copy was behind its step */
    uint64_t inserted; /* rows put in */
    uint64_t evicted;  /* rows replaced */
    uint64_t rows;     /* held now */
} ember_row_cache_stats_t;

/** A cache of @capacity (>= 1) rows of at most @dim floats.  Errors:
 * ERR_INVALID_PARAM (0, or a size that overflows), ERR_NO_MEMORY. */
ember_status_t ember_row_cache_create(size_t capacity, uint32_t dim, ember_row_cache_t **cache_p);
void ember_row_cache_destroy(ember_row_cache_t *cache);

/** The widest row it holds. */
uint32_t ember_row_cache_dim(const ember_row_cache_t *cache);

/** The slot of (@table, @row), its reference bit set; -1: not held. */
int64_t ember_row_cache_find(ember_row_cache_t *cache, uint32_t table, uint64_t row);
/** Slot @slot's values (the table's dim of them) and version. */
const float *ember_row_cache_values(const ember_row_cache_t *cache, int64_t slot);
uint64_t ember_row_cache_version(const ember_row_cache_t *cache, int64_t slot);

/** (@table, @row)'s @dim values (copied) at @version: a held copy of an
 * older version is replaced, a newer one kept; a new row takes a free
 * slot or CLOCK's victim. */
void ember_row_cache_put(ember_row_cache_t *cache, uint32_t table, uint64_t row,
                         const float *values, uint32_t dim, uint64_t version);

/** Count a cached lookup's rows: @lookups, @hits of them stood, @stale of
 * those by the staleness bound, the oldest @behind steps behind. */
void ember_row_cache_count(ember_row_cache_t *cache, uint64_t lookups, uint64_t hits,
                           uint64_t stale, uint64_t behind);

void ember_row_cache_stats(const ember_row_cache_t *cache, ember_row_cache_stats_t *stats);

#endif
