/*
 * engine/ps/keymap: the dynamic tables' key -> slot map.  Every uint64 is a
 * key and every uint32 but NONE a value; a million random operations agree
 * with a reference (an array indexed by the key's place in a pool); the
 * array grows at 3/4 and a refused growth leaves the map as it was; keys
 * built to share one home bucket make the map rehash under a new seed and
 * probe lengths stay within EMBER_KEYMAP_PROBE_BOUND; iteration gives each
 * entry once; clear empties and shrinks.  find_rate prints the lookup rate
 * (no bound on it: the machine may be shared).
 */
#include "engine/ps/keymap.h"
#include "tests/engine/test_util.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define NONE EMBER_KEYMAP_NONE

/* ASan's and TSan's shadow memory: an address-space limit is theirs too. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZER_SHADOW 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZER_SHADOW 1
#endif

/* splitmix64: a bijection of the counter, so distinct counters give
 * distinct keys. */
static uint64_t key_at(uint64_t i)
{
    uint64_t z = i * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t next_random(uint64_t *state)
{
    return key_at((*state)++);
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ember_keymap_stats_t stats_of(const ember_keymap_t *map)
{
    ember_keymap_stats_t stats;
    ember_keymap_stats(map, &stats);
    return stats;
}

static int case_basic(void)
{
    ember_keymap_t *map;
    CHECK(ember_keymap_create(0, 42, &map) == EMBER_OK, "create");
    CHECK(ember_keymap_size(map) == 0 && ember_keymap_find(map, 7) == NONE, "empty");
    for (uint32_t i = 0; i < 100; i++)
        CHECK(ember_keymap_insert(map, 1000 + i, i * 3) == EMBER_OK, "insert %u", i);
    CHECK(ember_keymap_size(map) == 100, "size %zu", ember_keymap_size(map));
    for (uint32_t i = 0; i < 100; i++)
        CHECK(ember_keymap_find(map, 1000 + i) == i * 3, "find %u", i);
    CHECK(ember_keymap_find(map, 999) == NONE && ember_keymap_find(map, 1100) == NONE, "absent");

    CHECK(ember_keymap_insert(map, 1005, 1) == EMBER_ERR_INVALID_PARAM, "a present key");
    CHECK(ember_keymap_find(map, 1005) == 15, "a refused insert keeps the value");
    CHECK(ember_keymap_insert(map, 5, NONE) == EMBER_ERR_INVALID_PARAM, "value NONE");
    CHECK(ember_keymap_find(map, 5) == NONE && ember_keymap_size(map) == 100, "nothing added");

    CHECK(ember_keymap_set(map, 1005, 77) == 1 && ember_keymap_find(map, 1005) == 77, "set");
    CHECK(ember_keymap_set(map, 5, 77) == 0 && ember_keymap_find(map, 5) == NONE, "set absent");
    CHECK(ember_keymap_set(map, 1005, NONE) == 0 && ember_keymap_find(map, 1005) == 77,
          "set to NONE is refused");

    CHECK(ember_keymap_remove(map, 1005) == 77, "remove");
    CHECK(ember_keymap_remove(map, 1005) == NONE, "remove again");
    CHECK(ember_keymap_find(map, 1005) == NONE && ember_keymap_size(map) == 99, "removed");
    for (uint32_t i = 0; i < 100; i += 2)
        ember_keymap_remove(map, 1000 + i);
    for (uint32_t i = 1; i < 100; i += 2)
        CHECK(ember_keymap_find(map, 1000 + i) == (i == 5 ? NONE : i * 3), "odd %u kept", i);
    CHECK(ember_keymap_size(map) == 49, "size %zu", ember_keymap_size(map));
    CHECK(ember_keymap_insert(map, 1005, 8) == EMBER_OK && ember_keymap_find(map, 1005) == 8,
          "a removed key inserted again");

    /* A run sharing one home bucket: removing from its middle shifts the
     * rest back, and each is still found. */
    ember_keymap_t *run;
    CHECK(ember_keymap_create(100, 7, &run) == EMBER_OK, "create");
    uint64_t base = ember_keymap_hash(run, 0) & ~(uint64_t)0xffff;
    uint64_t keys[20];
    for (uint32_t i = 0; i < 20; i++) {
        keys[i] = ember_keymap_key_for_hash(run, base | i);
        CHECK(ember_keymap_hash(run, keys[i]) == (base | i), "the inverse of the hash");
        CHECK(ember_keymap_home(run, keys[i]) == ember_keymap_home(run, 0), "one home");
        CHECK(ember_keymap_insert(run, keys[i], i) == EMBER_OK, "insert %u", i);
    }
    CHECK(stats_of(run).max_probe == 20, "a run of 20: probe %u", stats_of(run).max_probe);
    for (uint32_t i = 5; i < 20; i += 3)
        CHECK(ember_keymap_remove(run, keys[i]) == i, "remove %u", i);
    for (uint32_t i = 0; i < 20; i++)
        CHECK(ember_keymap_find(run, keys[i]) == ((i >= 5 && (i - 5) % 3 == 0) ? NONE : i),
              "after the removals, key %u", i);
    CHECK(stats_of(run).max_probe == 15, "the run closed up: probe %u", stats_of(run).max_probe);
    ember_keymap_destroy(run);
    ember_keymap_destroy(map);
    ember_keymap_destroy(NULL);
    return 0;
}

static int case_extremes(void)
{
    static const uint64_t keys[] = {
            0, 1, UINT64_MAX, (uint64_t)1 << 63, UINT64_MAX - 1, ((uint64_t)1 << 63) - 1,
            42 /* the seed: hash 0 */};
    static const uint32_t values[] = {0, UINT32_MAX - 1, 1, 0, UINT32_MAX - 1, 7, 0};
    enum {
        N = sizeof(keys) / sizeof(keys[0])
    };
    ember_keymap_t *map;
    CHECK(ember_keymap_create(0, 42, &map) == EMBER_OK, "create");
    CHECK(ember_keymap_hash(map, 42) == 0, "key ^ seed = 0 hashes to 0");
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++)
            CHECK(ember_keymap_insert(map, keys[i], values[i]) == EMBER_OK, "insert key %d", i);
        for (int i = 0; i < N; i++)
            CHECK(ember_keymap_find(map, keys[i]) == values[i], "find key %d", i);
        CHECK(ember_keymap_find(map, 2) == NONE && ember_keymap_find(map, UINT64_MAX - 2) == NONE,
              "neighbours absent");
        CHECK(ember_keymap_set(map, 0, UINT32_MAX - 1) && ember_keymap_set(map, UINT64_MAX, 0),
              "set extremes");
        CHECK(ember_keymap_find(map, 0) == UINT32_MAX - 1 &&
                      ember_keymap_find(map, UINT64_MAX) == 0,
              "set values read back");
        CHECK(ember_keymap_set(map, 0, values[0]) && ember_keymap_set(map, UINT64_MAX, values[2]),
              "set back");
        /* Remove in an order unlike the inserts'. */
        for (int i = N - 1; i >= 0; i -= 2)
            CHECK(ember_keymap_remove(map, keys[i]) == values[i], "remove key %d", i);
        for (int i = N % 2 == 0 ? 0 : 1; i < N; i += 2)
            CHECK(ember_keymap_find(map, keys[i]) == values[i], "key %d kept", i);
        for (int i = N % 2 == 0 ? 0 : 1; i < N; i += 2)
            CHECK(ember_keymap_remove(map, keys[i]) == values[i], "remove key %d", i);
        CHECK(ember_keymap_size(map) == 0, "empty again");
        for (int i = 0; i < N; i++)
            CHECK(ember_keymap_find(map, keys[i]) == NONE, "key %d gone", i);
    }
    /* Hashes at the very top and bottom: runs at the last bucket wrap to
     * the first. */
    uint64_t last[30], first[5];
    for (uint32_t i = 0; i < 30; i++) {
        last[i] = ember_keymap_key_for_hash(map, UINT64_MAX - i);
        CHECK(ember_keymap_insert(map, last[i], i) == EMBER_OK, "insert at the end %u", i);
    }
    for (uint32_t i = 0; i < 5; i++) {
        first[i] = ember_keymap_key_for_hash(map, i);
        CHECK(ember_keymap_insert(map, first[i], 100 + i) == EMBER_OK, "insert at 0: %u", i);
    }
    ember_keymap_stats_t stats = stats_of(map);
    CHECK(ember_keymap_home(map, last[0]) == stats.capacity - 1 &&
                  ember_keymap_home(map, first[0]) == 0,
          "homes at the ends (capacity %zu)", stats.capacity);
    for (uint32_t i = 0; i < 30; i += 2)
        CHECK(ember_keymap_remove(map, last[i]) == i, "remove across the wrap %u", i);
    for (uint32_t i = 1; i < 30; i += 2)
        CHECK(ember_keymap_find(map, last[i]) == i, "wrapped key %u", i);
    for (uint32_t i = 0; i < 5; i++)
        CHECK(ember_keymap_find(map, first[i]) == 100 + i, "the first buckets' keys %u", i);
    ember_keymap_destroy(map);
    return 0;
}

/* One round of random operations on keys from @pool (@pool_size of them,
 * distinct), checked against @ref (the value of pool[i], or NONE); @grow
 * in 0..100: how much likelier an insert is than a remove. */
static int random_ops(ember_keymap_t *map, const uint64_t *pool, uint32_t *ref, size_t pool_size,
                      size_t *present_p, uint64_t *rng, int ops, int grow)
{
    for (int op = 0; op < ops; op++) {
        uint64_t r = next_random(rng);
        size_t j = (size_t)((r >> 16) % pool_size);
        uint32_t value = (uint32_t)r & 0x7fffffff;
        switch (r & 7) {
        case 0:
        case 1:
        case 2: {
            if ((int)((r >> 8) % 100) >= grow)
                break;
            ember_status_t status = ember_keymap_insert(map, pool[j], value);
            CHECK(status == (ref[j] == NONE ? EMBER_OK : EMBER_ERR_INVALID_PARAM),
                  "op %d: insert %zu gave %d", op, j, status);
            if (ref[j] == NONE) {
                ref[j] = value;
                ++*present_p;
            }
            break;
        }
        case 3:
        case 4: {
            if ((int)((r >> 8) % 100) < grow)
                break;
            uint32_t removed = ember_keymap_remove(map, pool[j]);
            CHECK(removed == ref[j], "op %d: remove %zu gave %u, not %u", op, j, removed, ref[j]);
            if (ref[j] != NONE)
                --*present_p;
            ref[j] = NONE;
            break;
        }
        case 5: {
            int set = ember_keymap_set(map, pool[j], value);
            CHECK(set == (ref[j] != NONE), "op %d: set %zu gave %d", op, j, set);
            if (set)
                ref[j] = value;
            break;
        }
        default: {
            uint32_t found = ember_keymap_find(map, pool[j]);
            CHECK(found == ref[j], "op %d: find %zu gave %u, not %u", op, j, found, ref[j]);
            break;
        }
        }
        CHECK(ember_keymap_size(map) == *present_p, "op %d: size", op);
    }
    return 0;
}

/* Every key of the pool agrees with @ref, by find and find_many, and the
 * probe figures respect the bound. */
static int check_all(const ember_keymap_t *map, const uint64_t *pool, const uint32_t *ref,
                     size_t pool_size, uint32_t *scratch)
{
    ember_keymap_find_many(map, pool, pool_size, scratch);
    for (size_t j = 0; j < pool_size; j++) {
        CHECK(ember_keymap_find(map, pool[j]) == ref[j], "find %zu", j);
        CHECK(scratch[j] == ref[j], "find_many %zu: %u, not %u", j, scratch[j], ref[j]);
    }
    ember_keymap_stats_t stats = stats_of(map);
    CHECK(stats.load_factor <= 0.75 && stats.bytes == 16 * stats.capacity, "load %.3f",
          stats.load_factor);
    CHECK(stats.max_probe <= EMBER_KEYMAP_PROBE_BOUND && stats.rehashes == 0,
          "random keys: max probe %u, %llu rehashes", stats.max_probe,
          (unsigned long long)stats.rehashes);
    return 0;
}

static int case_against_reference(void)
{
    enum {
        POOL = 60000,
        ROUNDS = 10,
        OPS = 100000
    };
    uint64_t *pool = malloc(POOL * sizeof(*pool));
    uint32_t *ref = malloc(POOL * sizeof(*ref)), *scratch = malloc(POOL * sizeof(*scratch));
    CHECK(pool && ref && scratch, "memory");
    static const uint64_t extremes[] = {0, 1, UINT64_MAX, (uint64_t)1 << 63};
    for (size_t j = 0; j < POOL; j++) {
        pool[j] = j < 4 ? extremes[j] : key_at(1000 + j);
        ref[j] = NONE;
    }
    for (size_t j = 4; j < POOL; j++)
        CHECK(pool[j] > 1 && pool[j] != UINT64_MAX && pool[j] != (uint64_t)1 << 63,
              "pool keys distinct");
    ember_keymap_t *map;
    CHECK(ember_keymap_create(0, 0, &map) == EMBER_OK, "create");
    size_t present = 0;
    uint64_t rng = 99;
    /* Rounds that fill (growths), hover, and drain (long backward shifts). */
    static const int grow[ROUNDS] = {90, 90, 50, 60, 40, 10, 5, 50, 95, 50};
    for (int round = 0; round < ROUNDS; round++) {
        if (random_ops(map, pool, ref, POOL, &present, &rng, OPS, grow[round]))
            return 1;
        if (check_all(map, pool, ref, POOL, scratch))
            return 1;
        ember_keymap_stats_t stats = stats_of(map);
        fprintf(stderr, "round %d: %zu entries in %zu buckets, probe max %u mean %.2f\n", round,
                stats.size, stats.capacity, stats.max_probe, stats.mean_probe);
    }
    ember_keymap_destroy(map);
    free(pool);
    free(ref);
    free(scratch);
    return 0;
}

#ifndef TEST_SANITIZER_SHADOW
/* The bytes the process's address space holds now (/proc/self/statm). */
static size_t address_space_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}
#endif

/* Inserts under an address-space limit a few MiB above what the process
 * holds, until a growth is refused: the insert says ERR_NO_MEMORY and the
 * map is as it was. */
static int refused_growth(void)
{
#ifdef TEST_SANITIZER_SHADOW
    fprintf(stderr, "refused growth: skipped under a sanitizer (its shadow memory)\n");
    return 0;
#else
    ember_keymap_t *map;
    CHECK(ember_keymap_create(0, 5, &map) == EMBER_OK, "create");
    struct rlimit old, limited;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0, "getrlimit");
    size_t have = address_space_bytes();
    CHECK(have > 0, "/proc/self/statm");
    limited = (struct rlimit){.rlim_cur = have + (16u << 20), .rlim_max = old.rlim_max};
    CHECK(setrlimit(RLIMIT_AS, &limited) == 0, "setrlimit");
    ember_status_t status = EMBER_OK;
    uint32_t n = 0;
    while (n < (8u << 20) && (status = ember_keymap_insert(map, key_at(n), n)) == EMBER_OK)
        n++;
    ember_keymap_stats_t before = stats_of(map);
    int refused_again = ember_keymap_reserve(map, before.capacity) == EMBER_ERR_NO_MEMORY;
    setrlimit(RLIMIT_AS, &old);
    CHECK(status == EMBER_ERR_NO_MEMORY, "no refusal within %u inserts (status %d)", n, status);
    CHECK(refused_again, "reserve past the limit refused too");
    fprintf(stderr, "refused growth at %u entries, %zu buckets\n", n, before.capacity);
    CHECK(ember_keymap_size(map) == n && before.size == n && before.load_factor == 0.75,
          "the map as it was: %zu entries, load %.3f", before.size, before.load_factor);
    CHECK(ember_keymap_find(map, key_at(n)) == NONE, "the refused key is absent");
    for (uint32_t i = 0; i < n; i++)
        CHECK(ember_keymap_find(map, key_at(i)) == i, "key %u kept", i);
    CHECK(ember_keymap_insert(map, key_at(n), n) == EMBER_OK, "with memory back, it grows");
    CHECK(stats_of(map).capacity == 2 * before.capacity, "doubled");
    ember_keymap_destroy(map);
    return 0;
#endif
}

static int case_growth(void)
{
    ember_keymap_t *map;
    CHECK(ember_keymap_create(0, 3, &map) == EMBER_OK, "create");
    ember_keymap_stats_t stats = stats_of(map);
    CHECK(stats.capacity == 16 && stats.bytes == 256 && stats.size == 0, "small: %zu buckets",
          stats.capacity);
    size_t capacity = stats.capacity;
    for (uint32_t i = 0; i < 100000; i++) {
        CHECK(ember_keymap_insert(map, key_at(i), i) == EMBER_OK, "insert %u", i);
        if (i >= 4096 && i % 997)
            continue; /* stats is O(capacity) */
        stats = stats_of(map);
        CHECK(stats.load_factor <= 0.75, "load %.3f at %u", stats.load_factor, i);
        CHECK(stats.capacity == capacity || stats.capacity == 2 * capacity, "doubles");
        CHECK(stats.capacity == 16 || (i + 1) * 4 > stats.capacity * 3 / 2, "grew only when full");
        capacity = stats.capacity;
    }
    for (uint32_t i = 0; i < 100000; i++)
        CHECK(ember_keymap_find(map, key_at(i)) == i, "after growth %u", i);
    stats = stats_of(map);
    CHECK(stats.capacity == 262144 && stats.bytes == 262144 * 16, "100000 in %zu buckets",
          stats.capacity);

    /* reserve: room for a million without another growth. */
    CHECK(ember_keymap_reserve(map, 1000000) == EMBER_OK, "reserve");
    stats = stats_of(map);
    CHECK(stats.capacity == 2097152, "a million at 3/4: %zu buckets", stats.capacity);
    CHECK(ember_keymap_reserve(map, 10) == EMBER_OK && stats_of(map).capacity == 2097152,
          "reserve never shrinks");
    for (uint32_t i = 100000; i < 1000000; i++)
        CHECK(ember_keymap_insert(map, key_at(i), i) == EMBER_OK, "insert %u", i);
    CHECK(stats_of(map).capacity == 2097152, "no growth within the reserve");
    for (uint32_t i = 0; i < 1000000; i += 7)
        CHECK(ember_keymap_find(map, key_at(i)) == i, "after reserve %u", i);
    for (uint32_t i = 0; i < 1000000; i += 2)
        CHECK(ember_keymap_remove(map, key_at(i)) == i, "remove %u", i);
    CHECK(stats_of(map).capacity == 2097152 && ember_keymap_size(map) == 500000,
          "removal never shrinks");

    /* Sizes past the largest array are refused, the map as it was. */
    CHECK(ember_keymap_reserve(map, SIZE_MAX) == EMBER_ERR_NO_MEMORY, "reserve SIZE_MAX");
    CHECK(ember_keymap_reserve(map, EMBER_KEYMAP_MAX_CAPACITY) == EMBER_ERR_NO_MEMORY,
          "reserve past 3/4 of the largest array");
    CHECK(ember_keymap_size(map) == 500000 && stats_of(map).capacity == 2097152 &&
                  ember_keymap_find(map, key_at(1)) == 1,
          "a refused reserve changes nothing");
    ember_keymap_destroy(map);

    ember_keymap_t *none = (ember_keymap_t *)&none;
    CHECK(ember_keymap_create(SIZE_MAX, 1, &none) == EMBER_ERR_NO_MEMORY &&
                  none == (ember_keymap_t *)&none,
          "create for SIZE_MAX refused, *map_p untouched");
    CHECK(ember_keymap_create(1000, 1, &map) == EMBER_OK && stats_of(map).capacity == 2048,
          "create sizes for 1000: %zu buckets", stats_of(map).capacity);
    ember_keymap_destroy(map);
    return refused_growth();
}

/* @n keys whose hashes share their top 32 bits under the map's current
 * seed: one home bucket at any capacity up to 2^32. */
static void colliding_keys(const ember_keymap_t *map, uint64_t top, uint64_t *keys, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        keys[i] = ember_keymap_key_for_hash(map, top << 32 | i);
}

/* Keys of a simple shape (a stride of bits) spread by the mixer alone:
 * no rehash, short probes. */
static int spread(int shift, const char *what)
{
    ember_keymap_t *map;
    CHECK(ember_keymap_create(0, 0x1234, &map) == EMBER_OK, "create");
    for (uint64_t i = 0; i < 65536; i++)
        CHECK(ember_keymap_insert(map, i << shift | (shift ? 0 : 0xabc0000000000000ULL),
                                  (uint32_t)i) == EMBER_OK,
              "%s: insert %llu", what, (unsigned long long)i);
    for (uint64_t i = 0; i < 65536; i++)
        CHECK(ember_keymap_find(map, i << shift | (shift ? 0 : 0xabc0000000000000ULL)) == i,
              "%s: find %llu", what, (unsigned long long)i);
    ember_keymap_stats_t stats = stats_of(map);
    fprintf(stderr, "%s: probe max %u mean %.2f, %llu rehashes\n", what, stats.max_probe,
            stats.mean_probe, (unsigned long long)stats.rehashes);
    CHECK(stats.max_probe <= 32 && stats.mean_probe < 2.5 && stats.rehashes == 0, "%s spread out",
          what);
    ember_keymap_destroy(map);
    return 0;
}

/* A load of 3/4 of random keys in a large array: the probe figures that
 * justify the bound (the longest grows by about one per doubling: 18 at
 * 2^16 buckets, 24 at 2^22, 28 at 2^26, so about 33 at the largest). */
static int random_at_full_load(void)
{
    enum {
        LOG2 = 21
    };
    size_t entries = ((size_t)3 << LOG2) / 4;
    ember_keymap_t *map;
    CHECK(ember_keymap_create(entries, 0x5eed, &map) == EMBER_OK, "create");
    for (size_t i = 0; i < entries; i++)
        CHECK(ember_keymap_insert(map, key_at(7777777 + i), 1) == EMBER_OK, "insert %zu", i);
    ember_keymap_stats_t stats = stats_of(map);
    fprintf(stderr, "random keys, load %.2f, %zu buckets: probe max %u mean %.2f\n",
            stats.load_factor, stats.capacity, stats.max_probe, stats.mean_probe);
    CHECK(stats.capacity == (size_t)1 << LOG2 && stats.rehashes == 0, "no rehash");
    CHECK(stats.max_probe <= EMBER_KEYMAP_PROBE_BOUND * 3 / 4, "max probe %u", stats.max_probe);
    ember_keymap_destroy(map);
    return 0;
}

static int case_adversarial(void)
{
    enum {
        N = 20000
    };
    uint64_t *keys = malloc(2 * N * sizeof(*keys));
    CHECK(keys, "memory");
    ember_keymap_t *map;
    CHECK(ember_keymap_create(0, 0xfeedface, &map) == EMBER_OK, "create");
    colliding_keys(map, 0x5eed5eed, keys, N);
    size_t home = ember_keymap_home(map, keys[0]);
    for (uint32_t i = 0; i < N; i++)
        CHECK(ember_keymap_home(map, keys[i]) == home, "key %u shares the home bucket", i);
    for (uint32_t i = 0; i < N; i++) {
        CHECK(ember_keymap_insert(map, keys[i], i) == EMBER_OK, "insert %u", i);
        if (i % 1000 == 0)
            CHECK(stats_of(map).max_probe <= EMBER_KEYMAP_PROBE_BOUND, "probe %u after %u",
                  stats_of(map).max_probe, i);
    }
    for (uint32_t i = 0; i < N; i++)
        CHECK(ember_keymap_find(map, keys[i]) == i, "find %u", i);
    ember_keymap_stats_t stats = stats_of(map);
    fprintf(stderr, "%d colliding keys: probe max %u mean %.2f, %llu rehashes\n", N,
            stats.max_probe, stats.mean_probe, (unsigned long long)stats.rehashes);
    CHECK(stats.rehashes > 0 && stats.rehashes <= 4, "rehashed: %llu",
          (unsigned long long)stats.rehashes);
    CHECK(stats.max_probe <= EMBER_KEYMAP_PROBE_BOUND, "max probe %u", stats.max_probe);
    CHECK(stats.mean_probe < 3, "mean probe %.2f", stats.mean_probe);

    /* Once more under the new seed (as if it leaked): a second rehash. */
    uint64_t rehashes = stats.rehashes;
    colliding_keys(map, 0xbad, keys + N, N);
    for (uint32_t i = 0; i < N; i++)
        CHECK(ember_keymap_find(map, keys[N + i]) == NONE, "absent colliding key %u", i);
    for (uint32_t i = 0; i < N; i++)
        CHECK(ember_keymap_insert(map, keys[N + i], N + i) == EMBER_OK, "insert %u", N + i);
    for (uint32_t i = 0; i < 2 * N; i++)
        CHECK(ember_keymap_find(map, keys[i]) == i, "find %u", i);
    stats = stats_of(map);
    fprintf(stderr, "%d more: probe max %u mean %.2f, %llu rehashes\n", N, stats.max_probe,
            stats.mean_probe, (unsigned long long)stats.rehashes);
    CHECK(stats.rehashes > rehashes && stats.max_probe <= EMBER_KEYMAP_PROBE_BOUND,
          "rehashed again: %llu, probe %u", (unsigned long long)stats.rehashes, stats.max_probe);
    for (uint32_t i = 0; i < 2 * N; i += 2)
        CHECK(ember_keymap_remove(map, keys[i]) == i, "remove %u", i);
    for (uint32_t i = 0; i < 2 * N; i++)
        CHECK(ember_keymap_find(map, keys[i]) == (i % 2 ? i : NONE), "after removal %u", i);
    ember_keymap_destroy(map);
    free(keys);

    if (spread(0, "low bits") || spread(48, "high bits") || spread(20, "middle bits"))
        return 1;
    return random_at_full_load();
}

static int case_iterate(void)
{
    enum {
        N = 10000
    };
    ember_keymap_t *map;
    uint64_t key;
    uint32_t value;
    size_t cursor = 0;
    CHECK(ember_keymap_create(0, 0, &map) == EMBER_OK, "create");
    CHECK(ember_keymap_next(map, &cursor, &key, &value) == 0, "an empty map: nothing");
    unsigned char *seen = calloc(N, 1);
    CHECK(seen, "memory");
    for (uint32_t i = 0; i < N; i++)
        CHECK(ember_keymap_insert(map,
                                  i == 0   ? 0
                                  : i == 1 ? UINT64_MAX
                                           : key_at(i),
                                  i) == EMBER_OK,
              "insert %u", i);
    for (int pass = 0; pass < 2; pass++) {
        size_t count = 0;
        memset(seen, 0, N);
        for (cursor = 0; ember_keymap_next(map, &cursor, &key, &value);) {
            CHECK(value < N && !seen[value], "value %u given once", value);
            CHECK(key == (value == 0   ? 0
                          : value == 1 ? UINT64_MAX
                                       : key_at(value)),
                  "the key of %u", value);
            CHECK(pass == 0 || value % 2, "removed entry %u not given", value);
            seen[value] = 1;
            count++;
            CHECK(ember_keymap_set(map, key, value), "set while iterating");
        }
        CHECK(count == ember_keymap_size(map), "%zu entries given, size %zu", count,
              ember_keymap_size(map));
        CHECK(ember_keymap_next(map, &cursor, &key, &value) == 0, "the end stays the end");
        for (uint32_t i = 0; i < N && pass == 0; i += 2)
            ember_keymap_remove(map, i == 0 ? 0 : key_at(i));
    }
    free(seen);
    ember_keymap_destroy(map);
    return 0;
}

static int case_clear(void)
{
    ember_keymap_t *map;
    CHECK(ember_keymap_create(100, 0, &map) == EMBER_OK, "create");
    size_t initial = stats_of(map).capacity;
    CHECK(initial == 256, "100 at 3/4: %zu buckets", initial);
    for (int round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < 100000; i++)
            CHECK(ember_keymap_insert(map, key_at(i), i + round) == EMBER_OK, "insert %u", i);
        CHECK(stats_of(map).capacity > initial, "grew");
        ember_keymap_clear(map);
        ember_keymap_stats_t stats = stats_of(map);
        CHECK(stats.size == 0 && ember_keymap_size(map) == 0 && stats.max_probe == 0 &&
                      stats.mean_probe == 0,
              "empty after clear");
        CHECK(stats.capacity == initial && stats.bytes == initial * 16,
              "back to create's size: %zu buckets", stats.capacity);
        for (uint32_t i = 0; i < 100000; i += 97)
            CHECK(ember_keymap_find(map, key_at(i)) == NONE, "cleared %u", i);
        size_t cursor = 0;
        uint64_t key;
        uint32_t value;
        CHECK(ember_keymap_next(map, &cursor, &key, &value) == 0, "nothing to iterate");
    }
    CHECK(ember_keymap_insert(map, 0, 0) == EMBER_OK && ember_keymap_find(map, 0) == 0,
          "usable after clear");
    ember_keymap_clear(map); /* at its first size: emptied in place */
    CHECK(ember_keymap_find(map, 0) == NONE && stats_of(map).capacity == initial, "cleared");
    ember_keymap_destroy(map);
    return 0;
}

/* Lookups a second into a map of @entries (at load 3/4), find one at a
 * time and find_many, hits and misses. */
static int find_rate(uint32_t entries, uint64_t *keys, uint32_t *values, uint32_t lookups)
{
    ember_keymap_t *map;
    CHECK(ember_keymap_create(entries, 0, &map) == EMBER_OK, "create");
    for (uint32_t i = 0; i < entries; i++)
        CHECK(ember_keymap_insert(map, key_at(i), i) == EMBER_OK, "insert %u", i);
    ember_keymap_stats_t stats = stats_of(map);
    for (int misses = 0; misses < 2; misses++) {
        uint64_t rng = 5;
        for (uint32_t i = 0; i < lookups; i++)
            keys[i] = key_at(next_random(&rng) % entries + (misses ? entries : 0));
        double start = seconds_now();
        uint64_t sum = 0;
        for (uint32_t i = 0; i < lookups; i++)
            sum += ember_keymap_find(map, keys[i]);
        double one = seconds_now() - start;
        start = seconds_now();
        ember_keymap_find_many(map, keys, lookups, values);
        double many = seconds_now() - start;
        uint64_t sum_many = 0;
        for (uint32_t i = 0; i < lookups; i++)
            sum_many += values[i];
        CHECK(sum == sum_many, "find and find_many agree");
        CHECK(!misses || sum == (uint64_t)lookups * NONE, "misses are NONE");
        fprintf(stderr,
                "%zu entries, %zu KiB, %s: find %.1f M/s (%.1f ns), find_many %.1f M/s "
                "(%.1f ns)\n",
                stats.size, stats.bytes >> 10, misses ? "misses" : "hits", lookups / one / 1e6,
                one / lookups * 1e9, lookups / many / 1e6, many / lookups * 1e9);
    }
    ember_keymap_destroy(map);
    return 0;
}

/* The rates in an array within the caches (2^16 buckets, 1 MiB) and one
 * past them (2^22, 64 MiB). */
static int case_find_rate(void)
{
    enum {
        LOOKUPS = 1 << 21
    };
    uint64_t *keys = malloc(LOOKUPS * sizeof(*keys));
    uint32_t *values = malloc(LOOKUPS * sizeof(*values));
    CHECK(keys && values, "memory");
    int failed =
            find_rate(3 << 14, keys, values, LOOKUPS) || find_rate(3 << 20, keys, values, LOOKUPS);
    free(keys);
    free(values);
    return failed;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"basic", case_basic},
            {"extremes", case_extremes},
            {"against_reference", case_against_reference},
            {"growth", case_growth},
            {"adversarial", case_adversarial},
            {"iterate", case_iterate},
            {"clear", case_clear},
            {"find_rate", case_find_rate},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
