/*
 * engine/ps/keymap: Robin Hood linear probing over one array of 16-byte
 * buckets.  What each function promises is in keymap.h; this file says how.
 *
 * Each bucket keeps its probe length (1 + distance from its key's home
 * bucket; 0 when empty), so neither a lookup nor a move rehashes a key.
 * Robin Hood placement keeps every run of buckets ordered so that a key is
 * found exactly at its own probe length and a lookup may stop at the first
 * bucket whose probe length is shorter than its own: an absent key costs
 * about what a present one does.  Deletion shifts the rest of the run back
 * one bucket, so there are no tombstones and the order holds.
 */
#include "engine/ps/keymap.h"

#include "common/prefetch.h"

#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

typedef struct {
    uint64_t key;
    uint32_t value;
    /* 1 + the distance from the key's home bucket; 0: empty.  While the
     * map rehashes in place, REHASH_OLD marks entries still placed by the
     * old seed. */
    uint32_t probe;
} keymap_bucket_t;

_Static_assert(sizeof(keymap_bucket_t) == 16, "four buckets to a cache line");

#define REHASH_OLD   0x80000000u
#define MIN_CAPACITY 16
/* Seeds a rehash tries before it doubles the array instead (only a broken
 * mixer or a map at its bound by chance would need a second). */
#define RESEED_TRIES 4
#define MURMUR_C1    0xff51afd7ed558ccdULL
#define MURMUR_C2    0xc4ceb9fe1a85ec53ULL

struct ember_keymap {
    keymap_bucket_t *buckets;
    size_t mask;        /* capacity - 1 */
    unsigned shift;     /* 64 - log2(capacity): the hash's top bits pick the bucket */
    size_t size, limit; /* entries; the most before the array doubles (3/4) */
    size_t initial;     /* the capacity create chose, which clear returns to */
    uint64_t seed, rehashes;
};

static const keymap_bucket_t empty_bucket = {.key = 0, .value = EMBER_KEYMAP_NONE, .probe = 0};

/* murmur3's fmix64: every input bit flips each output bit with probability
 * about 1/2, so keys that differ only in high or only in low bits spread
 * over the top bits too. */
static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= MURMUR_C1;
    x ^= x >> 33;
    x *= MURMUR_C2;
    x ^= x >> 33;
    return x;
}

/* The inverse of an odd multiplier mod 2^64: Newton's iteration doubles the
 * correct low bits each step (3 -> 6 -> ... -> 96). */
static uint64_t odd_inverse(uint64_t c)
{
    uint64_t inverse = c;
    for (int i = 0; i < 5; i++)
        inverse *= 2 - c * inverse;
    return inverse;
}

/* mix undone step by step; x ^= x >> 33 is its own inverse (33 >= 64 / 2). */
static uint64_t unmix(uint64_t x)
{
    x ^= x >> 33;
    x *= odd_inverse(MURMUR_C2);
    x ^= x >> 33;
    x *= odd_inverse(MURMUR_C1);
    x ^= x >> 33;
    return x;
}

static inline size_t home_of(const ember_keymap_t *map, uint64_t key)
{
    return (size_t)(mix(key ^ map->seed) >> map->shift);
}

/* A fresh seed.  getrandom without blocking: only before the kernel's pool
 * is ready (early boot) or where the call is missing does it fail, and then
 * the clock, an address and the old seed still give an adversary nothing
 * to aim at beforehand. */
static uint64_t draw_seed(uint64_t old_seed)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed))
        return seed;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t stir = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    return mix(stir ^ (uint64_t)(uintptr_t)&now) ^ mix(old_seed + 0x9e3779b97f4a7c15ULL);
}

/* The buckets for @entries at load at most 3/4, a power of two; 0 past
 * EMBER_KEYMAP_MAX_CAPACITY. */
static size_t capacity_for(size_t entries)
{
    size_t capacity = MIN_CAPACITY;
    while (capacity - capacity / 4 < entries) {
        if (capacity >= EMBER_KEYMAP_MAX_CAPACITY)
            return 0;
        capacity *= 2;
    }
    return capacity;
}

static unsigned log2_of(size_t power_of_two)
{
    return (unsigned)__builtin_ctzll((unsigned long long)power_of_two);
}

/* An array of @capacity empty buckets, cache-line aligned so a bucket
 * never straddles two lines; NULL when refused. */
static keymap_bucket_t *buckets_alloc(size_t capacity)
{
    keymap_bucket_t *buckets = aligned_alloc(64, capacity * sizeof(*buckets));
    if (!buckets)
        return NULL;
    for (size_t i = 0; i < capacity; i++)
        buckets[i] = empty_bucket;
    return buckets;
}

static void set_array(ember_keymap_t *map, keymap_bucket_t *buckets, size_t capacity)
{
    map->buckets = buckets;
    map->mask = capacity - 1;
    map->shift = 64 - log2_of(capacity);
    map->limit = capacity - capacity / 4;
}

/* The bucket holding @key, looked for from its home bucket @i, or NULL.
 * Robin Hood order: the key sits exactly at its own probe length, and a
 * bucket with a shorter one (an empty one's is 0) ends the search. */
static inline const keymap_bucket_t *locate_from(const ember_keymap_t *map, size_t i, uint64_t key)
{
    const keymap_bucket_t *buckets = map->buckets;
    for (uint32_t probe = 1;; probe++) {
        const keymap_bucket_t *b = &buckets[i];
        if (b->key == key && b->probe == probe)
            return b;
        if (b->probe < probe)
            return NULL;
        i = (i + 1) & map->mask;
    }
}

static inline keymap_bucket_t *locate(ember_keymap_t *map, uint64_t key)
{
    return (keymap_bucket_t *)locate_from(map, home_of(map, key), key);
}

/* Robin Hood placement of @carry (absent, with room for it) from its home
 * bucket @i: it takes the first bucket whose entry is nearer its own home,
 * and that entry moves on in its place.  Returns the longest probe length
 * written. */
static uint32_t place(keymap_bucket_t *buckets, size_t mask, size_t i, keymap_bucket_t carry)
{
    uint32_t longest = 0;
    for (carry.probe = 1;; i = (i + 1) & mask, carry.probe++) {
        keymap_bucket_t *b = &buckets[i];
        if (b->probe >= carry.probe)
            continue;
        keymap_bucket_t displaced = *b;
        *b = carry;
        if (carry.probe > longest)
            longest = carry.probe;
        if (displaced.probe == 0)
            return longest;
        carry = displaced;
    }
}

/* place under the new seed while some buckets still hold entries placed by
 * the old one: those count as free.  Returns the old entry @carry evicted
 * (to be placed next), or an empty bucket once nothing is left to carry. */
static keymap_bucket_t place_among_old(ember_keymap_t *map, keymap_bucket_t carry,
                                       uint32_t *longest_p)
{
    size_t i = home_of(map, carry.key);
    for (carry.probe = 1;; i = (i + 1) & map->mask, carry.probe++) {
        keymap_bucket_t *b = &map->buckets[i];
        if (!(b->probe & REHASH_OLD) && b->probe >= carry.probe)
            continue;
        keymap_bucket_t displaced = *b;
        *b = carry;
        if (carry.probe > *longest_p)
            *longest_p = carry.probe;
        if (displaced.probe == 0 || (displaced.probe & REHASH_OLD))
            return displaced;
        carry = displaced;
    }
}

/* Every entry placed again under map->seed, in the same array (a rehash
 * that needed memory could fail, and then colliding keys would stay put).
 * Old entries are marked, then each is lifted out in turn and placed
 * treating the marked ones as free; one it lands on is carried on next.
 * Returns the longest probe length written. */
static uint32_t rehash_in_place(ember_keymap_t *map)
{
    keymap_bucket_t *buckets = map->buckets;
    uint32_t longest = 0;
    for (size_t i = 0; i <= map->mask; i++)
        if (buckets[i].probe)
            buckets[i].probe |= REHASH_OLD;
    for (size_t i = 0; i <= map->mask; i++) {
        if (!(buckets[i].probe & REHASH_OLD))
            continue;
        keymap_bucket_t carry = buckets[i];
        buckets[i] = empty_bucket;
        while (carry.probe)
            carry = place_among_old(map, carry, &longest);
    }
    return longest;
}

static ember_status_t grow(ember_keymap_t *map, size_t capacity);

/* An insert or a growth left a probe sequence past the bound: the keys
 * collide under this seed (chosen so, or by a rare chance), so place them
 * under new seeds.  Should a few seeds all fail, the load, not the seed, is
 * to blame: double the array (if refused, the map stays correct, only
 * slower, until a later insert tries again). */
static void settle(ember_keymap_t *map, uint32_t longest)
{
    for (int tries = 0; longest > EMBER_KEYMAP_PROBE_BOUND && tries < RESEED_TRIES; tries++) {
        map->seed = draw_seed(map->seed);
        map->rehashes++;
        longest = rehash_in_place(map);
    }
    if (longest > EMBER_KEYMAP_PROBE_BOUND && map->mask + 1 < EMBER_KEYMAP_MAX_CAPACITY)
        (void)grow(map, 2 * (map->mask + 1));
}

/* The entries moved into a new array of @capacity buckets (same seed);
 * ERR_NO_MEMORY leaves the map as it was. */
static ember_status_t grow(ember_keymap_t *map, size_t capacity)
{
    keymap_bucket_t *buckets = buckets_alloc(capacity), *old = map->buckets;
    size_t old_capacity = map->mask + 1;
    uint32_t longest = 0;
    if (!buckets)
        return EMBER_ERR_NO_MEMORY;
    set_array(map, buckets, capacity);
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].probe) {
            uint32_t probe = place(buckets, map->mask, home_of(map, old[i].key), old[i]);
            longest = probe > longest ? probe : longest;
        }
    }
    free(old);
    if (longest > EMBER_KEYMAP_PROBE_BOUND)
        settle(map, longest);
    return EMBER_OK;
}

ember_status_t ember_keymap_create(size_t expected, uint64_t seed, ember_keymap_t **map_p)
{
    size_t capacity = capacity_for(expected);
    ember_keymap_t *map = capacity ? calloc(1, sizeof(*map)) : NULL;
    keymap_bucket_t *buckets = map ? buckets_alloc(capacity) : NULL;
    if (!buckets) {
        free(map);
        return EMBER_ERR_NO_MEMORY;
    }
    set_array(map, buckets, capacity);
    map->initial = capacity;
    map->seed = seed ? seed : draw_seed(0);
    *map_p = map;
    return EMBER_OK;
}

void ember_keymap_destroy(ember_keymap_t *map)
{
    if (!map)
        return;
    free(map->buckets);
    free(map);
}

uint32_t ember_keymap_find(const ember_keymap_t *map, uint64_t key)
{
    const keymap_bucket_t *b = locate_from(map, home_of(map, key), key);
    return b ? b->value : EMBER_KEYMAP_NONE;
}

void ember_keymap_find_many(const ember_keymap_t *map, const uint64_t *keys, size_t n,
                            uint32_t *values_out)
{
    enum {
        AHEAD = EMBER_PREFETCH_AHEAD
    };
    _Static_assert((AHEAD & (AHEAD - 1)) == 0, "a ring indexed by a mask");
    size_t homes[AHEAD]; /* the home buckets of keys[i .. i + AHEAD), by i % AHEAD */

    for (size_t i = 0; i < n && i < AHEAD; i++) {
        homes[i] = home_of(map, keys[i]);
        __builtin_prefetch(&map->buckets[homes[i]], 0, 3);
    }
    for (size_t i = 0; i < n; i++) {
        size_t home = homes[i & (AHEAD - 1)];
        if (i + AHEAD < n) {
            size_t ahead = home_of(map, keys[i + AHEAD]);
            homes[i & (AHEAD - 1)] = ahead;
            __builtin_prefetch(&map->buckets[ahead], 0, 3);
        }
        const keymap_bucket_t *b = locate_from(map, home, keys[i]);
        values_out[i] = b ? b->value : EMBER_KEYMAP_NONE;
    }
}

ember_status_t ember_keymap_insert(ember_keymap_t *map, uint64_t key, uint32_t value)
{
    if (value == EMBER_KEYMAP_NONE || locate(map, key))
        return EMBER_ERR_INVALID_PARAM;
    if (map->size == map->limit) {
        if (map->mask + 1 >= EMBER_KEYMAP_MAX_CAPACITY)
            return EMBER_ERR_NO_MEMORY;
        ember_status_t status = grow(map, 2 * (map->mask + 1));
        if (status != EMBER_OK)
            return status;
    }
    keymap_bucket_t entry = {.key = key, .value = value};
    uint32_t longest = place(map->buckets, map->mask, home_of(map, key), entry);
    map->size++;
    if (longest > EMBER_KEYMAP_PROBE_BOUND)
        settle(map, longest);
    return EMBER_OK;
}

int ember_keymap_set(ember_keymap_t *map, uint64_t key, uint32_t value)
{
    keymap_bucket_t *b = value == EMBER_KEYMAP_NONE ? NULL : locate(map, key);
    if (!b)
        return 0;
    b->value = value;
    return 1;
}

uint32_t ember_keymap_remove(ember_keymap_t *map, uint64_t key)
{
    keymap_bucket_t *b = locate(map, key);
    if (!b)
        return EMBER_KEYMAP_NONE;
    uint32_t value = b->value;
    size_t i = (size_t)(b - map->buckets);
    /* Backward shift: the run after it steps one bucket nearer home, up to
     * an empty bucket or an entry already at its home (probe 1). */
    for (;;) {
        size_t next = (i + 1) & map->mask;
        keymap_bucket_t moved = map->buckets[next];
        if (moved.probe <= 1) {
            map->buckets[i] = empty_bucket;
            break;
        }
        moved.probe--;
        map->buckets[i] = moved;
        i = next;
    }
    map->size--;
    return value;
}

size_t ember_keymap_size(const ember_keymap_t *map)
{
    return map->size;
}

ember_status_t ember_keymap_reserve(ember_keymap_t *map, size_t entries)
{
    if (entries <= map->limit)
        return EMBER_OK;
    size_t capacity = capacity_for(entries);
    return capacity ? grow(map, capacity) : EMBER_ERR_NO_MEMORY;
}

void ember_keymap_clear(ember_keymap_t *map)
{
    size_t capacity = map->mask + 1;
    keymap_bucket_t *smaller = capacity > map->initial ? buckets_alloc(map->initial) : NULL;
    if (smaller) {
        free(map->buckets);
        set_array(map, smaller, map->initial);
    } else {
        for (size_t i = 0; i < capacity; i++)
            map->buckets[i] = empty_bucket;
    }
    map->size = 0;
}

void ember_keymap_stats(const ember_keymap_t *map, ember_keymap_stats_t *stats)
{
    size_t capacity = map->mask + 1;
    uint64_t probe_sum = 0;
    uint32_t longest = 0;
    for (size_t i = 0; i < capacity; i++) {
        uint32_t probe = map->buckets[i].probe;
        probe_sum += probe;
        longest = probe > longest ? probe : longest;
    }
    *stats = (ember_keymap_stats_t){
            .size = map->size,
            .capacity = capacity,
            .bytes = capacity * sizeof(keymap_bucket_t),
            .load_factor = (double)map->size / (double)capacity,
            .max_probe = longest,
            .mean_probe = map->size ? (double)probe_sum / (double)map->size : 0.0,
            .rehashes = map->rehashes,
    };
}

int ember_keymap_next(const ember_keymap_t *map, size_t *cursor, uint64_t *key, uint32_t *value)
{
    for (size_t i = *cursor; i <= map->mask; i++) {
        if (map->buckets[i].probe) {
            *key = map->buckets[i].key;
            *value = map->buckets[i].value;
            *cursor = i + 1;
            return 1;
        }
    }
    *cursor = map->mask + 1;
    return 0;
}

uint64_t ember_keymap_hash(const ember_keymap_t *map, uint64_t key)
{
    return mix(key ^ map->seed);
}

uint64_t ember_keymap_key_for_hash(const ember_keymap_t *map, uint64_t hash)
{
    return unmix(hash) ^ map->seed;
}

size_t ember_keymap_home(const ember_keymap_t *map, uint64_t key)
{
    return home_of(map, key);
}
