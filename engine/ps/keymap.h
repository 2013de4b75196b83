/*
 * engine/ps/keymap: a hash map from raw 64-bit keys to 32-bit values, for
 * the parameter server's dynamic embedding tables (a row's key -> its slot).
 *
 * Every uint64 is a key (0 and 2^64-1 included: no key value is reserved);
 * every uint32 but EMBER_KEYMAP_NONE is a value.  Open addressing over one
 * array of 16-byte buckets {key, value, probe}, power-of-two many, linear
 * probing with Robin Hood placement and backward-shift deletion (no
 * tombstones); an empty bucket has value NONE (and probe 0).  The load
 * stays at most 3/4 (the array doubles past it) and the array never shrinks
 * but by ember_keymap_clear.
 *
 * The hash is keyed: a 64-bit mixer (murmur3's finaliser) of key ^ seed,
 * the bucket its top bits.  Keys chosen to collide under one seed scatter
 * under another, so when an insert leaves a probe sequence longer than
 * EMBER_KEYMAP_PROBE_BOUND the map rehashes in place under a new seed from
 * getrandom (stats.rehashes counts them); every entry's probe length, and so
 * every find's, stays within the bound (lookups, const, never rehash: the
 * inserts keep the bound for them).  Should a few new seeds in a row not
 * do (random keys never need a second), the array doubles instead; if even
 * that is refused the map stays correct, only slower.
 *
 * The seed, and with it the order of ember_keymap_next, differs from run to
 * run: nothing the engine computes may depend on either (deterministic
 * results come from the keys and values, never from the map's layout).
 *
 * Ownership: the map owns its bucket array; keys and values are copied in
 * and out; pointer arguments are borrowed for the call.
 *
 * Threads: one writer.  Any number of threads may call the const functions
 * (find, find_many, size, stats, next, hash, key_for_hash, home) at once, but only while
 * no thread is changing the map; the caller provides that exclusion.
 *
 * Errors: ERR_NO_MEMORY (create, insert, reserve: the map as it was),
 * ERR_INVALID_PARAM (insert of value NONE or of a key already present).
 * Nothing here logs; nothing blocks.
 */
#ifndef EMBER_ENGINE_PS_KEYMAP_H
#define EMBER_ENGINE_PS_KEYMAP_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

/** The one value no key maps to: find's and remove's "absent". */
#define EMBER_KEYMAP_NONE UINT32_MAX

/** The longest probe sequence (1 + distance from the home bucket) an
 * insert may leave before the map rehashes under a new seed.  Random keys
 * at load 3/4 stay far below it (their longest grows by about one per
 * doubling of the array: 24 at 2^22 buckets, about 33 at 2^31), so only
 * keys that collide on purpose reach it. */
#define EMBER_KEYMAP_PROBE_BOUND 64

/** The most buckets a map may have (2^31: 32 GiB); past it, ERR_NO_MEMORY. */
#define EMBER_KEYMAP_MAX_CAPACITY ((size_t)1 << 31)

typedef struct ember_keymap ember_keymap_t;

typedef struct {
    size_t size;        /* entries */
    size_t capacity;    /* buckets */
    size_t bytes;       /* the bucket array's bytes */
    double load_factor; /* size / capacity */
    uint32_t max_probe; /* longest probe length over the entries (0: empty) */
    double mean_probe;  /* their mean (0: empty) */
    uint64_t rehashes;  /* rehashes under a new seed since create */
} ember_keymap_stats_t;

/**
 * A map sized for @expected entries before its first growth (0: a small
 * one), hashing under @seed (0: a seed drawn from getrandom).  *map_p is
 * the caller's, for ember_keymap_destroy.  Errors: ERR_NO_MEMORY (also for
 * an @expected past EMBER_KEYMAP_MAX_CAPACITY's 3/4).
 */
ember_status_t ember_keymap_create(size_t expected, uint64_t seed, ember_keymap_t **map_p);
/** Free the map and its array; NULL is a no-op. */
void ember_keymap_destroy(ember_keymap_t *map);

/** @key's value, or EMBER_KEYMAP_NONE when absent. */
uint32_t ember_keymap_find(const ember_keymap_t *map, uint64_t key);
/**
 * find for each of @keys[0..n) into @values_out[0..n) (NONE for the
 * absent), fetching buckets a few keys ahead so their memory latencies
 * overlap: the call for a batch of keys, many times find's rate once the
 * array outgrows the caches.  Both arrays are borrowed; they may not overlap.
 */
void ember_keymap_find_many(const ember_keymap_t *map, const uint64_t *keys, size_t n,
                            uint32_t *values_out);

/**
 * Insert @key, which must be absent, with @value (not NONE); grows as
 * needed, and may rehash under a new seed (above).  Errors: ERR_NO_MEMORY
 * (a growth refused: the map as it was), ERR_INVALID_PARAM (@value NONE or
 * @key present: nothing changed).
 */
ember_status_t ember_keymap_insert(ember_keymap_t *map, uint64_t key, uint32_t value);
/** Replace the value of @key, if present, with @value (not NONE); returns 1
 * when it did, 0 when @key is absent or @value is NONE (nothing changed). */
int ember_keymap_set(ember_keymap_t *map, uint64_t key, uint32_t value);
/** Remove @key; returns its value, or NONE when it was absent. */
uint32_t ember_keymap_remove(ember_keymap_t *map, uint64_t key);
/** The entries. */
size_t ember_keymap_size(const ember_keymap_t *map);

/** Room for @entries in all without growing (the array grows now, if need
 * be).  Errors: ERR_NO_MEMORY (the map as it was). */
ember_status_t ember_keymap_reserve(ember_keymap_t *map, size_t entries);
/** Remove every entry, and give the array back down to the size create
 * chose (kept as is if that allocation fails); the seed stays. */
void ember_keymap_clear(ember_keymap_t *map);

/** The map's figures; the probe ones are over every entry, a probe length
 * being 1 + the entry's distance from its home bucket.  O(capacity). */
void ember_keymap_stats(const ember_keymap_t *map, ember_keymap_stats_t *stats);

/**
 * Iterate: with *@cursor 0 at first, each call gives the next entry in
 * *@key and *@value and returns 1, or returns 0 at the end.  The order is
 * the table's, not meaningful, and changes with the seed; no insert,
 * remove, reserve or clear between the calls (set is fine).
 */
int ember_keymap_next(const ember_keymap_t *map, size_t *cursor, uint64_t *key, uint32_t *value);

/** The keyed hash of @key under the map's current seed (it changes when
 * the map rehashes); tests build colliding keys from it. */
uint64_t ember_keymap_hash(const ember_keymap_t *map, uint64_t key);
/** The key whose ember_keymap_hash is @hash under the current seed (the
 * mixer is a bijection): what tests invert to make keys collide. */
uint64_t ember_keymap_key_for_hash(const ember_keymap_t *map, uint64_t hash);
/** The home bucket of @key at the current seed and capacity: the top
 * log2(capacity) bits of its hash. */
size_t ember_keymap_home(const ember_keymap_t *map, uint64_t key);

#endif
