/*
 * fuzz_keymap: the dynamic tables' key map (engine/ps/keymap.c) under a
 * sequence of inserts, finds, removes, sets, floods of keys sharing one
 * home bucket, clears and reserves, each checked against a reference (a
 * chained hash table of its own).
 *
 * Input: [u64 seed (0: drawn)][u16 expected] then ops, each a byte
 * (bits 0-2 the op, 3-5 how its key is chosen, 6 a flag) and its operands:
 *   0 insert KEY u32-value    1 find KEY    2 remove KEY    3 set KEY u32-value
 *   4 flood KEY u8-count: count + 1 keys whose hashes share the top 32 bits
 *     of KEY's (one home bucket at any capacity), each inserted; flag: the
 *     keys made up front (the seed the map had then), else each under the
 *     map's current seed (an adversary who learns every new seed)
 *   5 clear    6 reserve u16 (size + it % 4096; 0xffff: SIZE_MAX, refused)
 *   7 check every entry (find_many, iteration, stats)
 * Floods, stats and op 7 have a budget per input (FULL_CHECKS and below);
 * every entry is checked once more at the end.
 * KEY by bits 3-5: 0 a u64, 1 a u8, 2 an extreme (0, 1, 2^64-1, 2^64-2,
 * 2^63, 2^63-1 by u8), 3 a present key (u16 index), 4 a key sharing the
 * home bucket of a present one (u16 index, u16 low hash bits), 5 a key
 * whose home is the first or last bucket (u8), 6 a present key plus an
 * i8, 7 a u16 in the top 16 bits.
 *
 * Invariants: every result is the reference's (statuses, values, sizes);
 * find_many is find; iteration gives each entry exactly once; the load
 * stays at most 3/4, the bytes are 16 per bucket, and no probe sequence
 * outgrows EMBER_KEYMAP_PROBE_BOUND, however the keys collide.
 */
#include "engine/ps/keymap.h"
#include "fuzz/fuzz_input.h"

/* The reference's size: inserts past it are skipped (4096 entries reach
 * arrays of 8192 buckets, reserves 16384). */
#define MAX_ENTRIES 4096
#define REF_HEADS   8192
#define HIGH32      0xffffffff00000000ULL
/* What one input may spend, so that a run of costly ops (a flood, the
 * O(capacity) checks) does not take the fuzzer's time: */
#define FULL_CHECKS  8    /* op 7's, besides the one at the end */
#define STATS_CHECKS 16   /* stats after a flood, clear or reserve */
#define FLOOD_KEYS   4096 /* keys in all floods */

/* The reference: its entries dense in ref[], chained by a multiplicative
 * hash (another function than the map's, so keys built to collide there
 * do not here): every op O(1) but for a chain's walk. */
typedef struct {
    uint64_t key;
    uint32_t value;
    uint32_t next; /* the chain's next entry's index + 1; 0: the end */
} ref_entry_t;

static ref_entry_t ref[MAX_ENTRIES];
static uint32_t ref_heads[REF_HEADS]; /* each chain's first index + 1 */
static size_t ref_count;
static unsigned full_checks_left, stats_checks_left, flood_keys_left;

static uint32_t *ref_head(uint64_t key)
{
    return &ref_heads[(key * 0x9e3779b97f4a7c15ULL) >> 51];
}

/* The link that points at @key's entry (or the chain's final 0). */
static uint32_t *ref_link(uint64_t key)
{
    uint32_t *link = ref_head(key);
    while (*link && ref[*link - 1].key != key)
        link = &ref[*link - 1].next;
    return link;
}

static ref_entry_t *ref_entry(uint64_t key)
{
    uint32_t link = *ref_link(key);
    return link ? &ref[link - 1] : NULL;
}

static uint32_t ref_find(uint64_t key)
{
    ref_entry_t *e = ref_entry(key);
    return e ? e->value : EMBER_KEYMAP_NONE;
}

static void ref_clear(void)
{
    memset(ref_heads, 0, sizeof(ref_heads));
    ref_count = 0;
}

static void ref_insert(uint64_t key, uint32_t value)
{
    uint32_t *head = ref_head(key);
    ref[ref_count] = (ref_entry_t){.key = key, .value = value, .next = *head};
    *head = (uint32_t)++ref_count;
}

/* Unlink @key's entry and move the last entry into its place. */
static void ref_remove(uint64_t key)
{
    uint32_t *link = ref_link(key);
    uint32_t index = *link - 1, last = (uint32_t)ref_count - 1;
    *link = ref[index].next;
    if (index != last) {
        *ref_link(ref[last].key) = index + 1;
        ref[index] = ref[last];
    }
    ref_count--;
}

static uint64_t fuzz_u64(fuzz_input_t *in)
{
    uint64_t lo = fuzz_u32(in);
    return lo | (uint64_t)fuzz_u32(in) << 32;
}

static uint64_t present_key(fuzz_input_t *in)
{
    uint16_t index = fuzz_u16(in);
    return ref_count ? ref[index % ref_count].key : index;
}

static uint64_t choose_key(fuzz_input_t *in, const ember_keymap_t *map, unsigned how)
{
    static const uint64_t extremes[] = {
            0, 1, UINT64_MAX, UINT64_MAX - 1, (uint64_t)1 << 63, ((uint64_t)1 << 63) - 1};
    switch (how) {
    case 0: return fuzz_u64(in);
    case 1: return fuzz_u8(in);
    case 2: return extremes[fuzz_u8(in) % 6];
    case 3: return present_key(in);
    case 4: {
        uint64_t top = ember_keymap_hash(map, present_key(in)) & HIGH32;
        return ember_keymap_key_for_hash(map, top | fuzz_u16(in));
    }
    case 5: {
        uint8_t b = fuzz_u8(in);
        return ember_keymap_key_for_hash(map, b & 1 ? UINT64_MAX - (b >> 1) : (uint64_t)(b >> 1));
    }
    case 6: return present_key(in) + (uint64_t)(int64_t)(int8_t)fuzz_u8(in);
    default: return (uint64_t)fuzz_u16(in) << 48;
    }
}

static void check_insert(ember_keymap_t *map, uint64_t key, uint32_t value)
{
    uint32_t had = ref_find(key);
    if (had == EMBER_KEYMAP_NONE && ref_count == MAX_ENTRIES)
        return;
    ember_status_t status = ember_keymap_insert(map, key, value);
    int refused = had != EMBER_KEYMAP_NONE || value == EMBER_KEYMAP_NONE;
    FUZZ_CHECK(status == (refused ? EMBER_ERR_INVALID_PARAM : EMBER_OK),
               "insert %llx: status %d, present %d", (unsigned long long)key, status,
               had != EMBER_KEYMAP_NONE);
    if (!refused)
        ref_insert(key, value);
    FUZZ_CHECK(ember_keymap_find(map, key) == (refused ? had : value), "find after insert");
}

/* count keys whose hashes share @base's top 32 bits: made all at first, or
 * each under the seed the map has when it is inserted. */
static void flood(ember_keymap_t *map, uint64_t base, unsigned count, int up_front)
{
    uint64_t keys[256];
    uint64_t top = ember_keymap_hash(map, base) & HIGH32;
    count = count < flood_keys_left ? count : flood_keys_left;
    flood_keys_left -= count;
    for (unsigned i = 0; i < count && up_front; i++)
        keys[i] = ember_keymap_key_for_hash(map, top | i);
    for (unsigned i = 0; i < count; i++) {
        if (!up_front)
            keys[i] = ember_keymap_key_for_hash(map, (ember_keymap_hash(map, base) & HIGH32) | i);
        check_insert(map, keys[i], i);
    }
    for (unsigned i = 0; i < count; i++)
        FUZZ_CHECK(ember_keymap_find(map, keys[i]) == ref_find(keys[i]), "flooded key %u", i);
}

static void check_stats(const ember_keymap_t *map)
{
    FUZZ_CHECK(ember_keymap_size(map) == ref_count, "size %zu, reference %zu",
               ember_keymap_size(map), ref_count);
    if (!stats_checks_left)
        return;
    stats_checks_left--;
    ember_keymap_stats_t stats;
    ember_keymap_stats(map, &stats);
    FUZZ_CHECK(stats.size == ref_count && ember_keymap_size(map) == ref_count,
               "size %zu, reference %zu", stats.size, ref_count);
    FUZZ_CHECK(stats.capacity >= 16 && (stats.capacity & (stats.capacity - 1)) == 0 &&
                       stats.bytes == 16 * stats.capacity,
               "capacity %zu, bytes %zu", stats.capacity, stats.bytes);
    FUZZ_CHECK(4 * stats.size <= 3 * stats.capacity, "load %zu / %zu", stats.size, stats.capacity);
    FUZZ_CHECK(stats.max_probe <= EMBER_KEYMAP_PROBE_BOUND, "max probe %u (%llu rehashes)",
               stats.max_probe, (unsigned long long)stats.rehashes);
    FUZZ_CHECK((stats.size == 0) == (stats.max_probe == 0) &&
                       stats.mean_probe >= (stats.size ? 1 : 0) &&
                       stats.mean_probe <= stats.max_probe,
               "probe figures: max %u mean %g", stats.max_probe, stats.mean_probe);
}

/* Every entry: find_many over the reference's keys and their neighbours,
 * then an iteration that must give each exactly once. */
static void check_all(const ember_keymap_t *map)
{
    stats_checks_left++; /* its own stats always */
    static uint64_t keys[2 * MAX_ENTRIES];
    static uint32_t values[2 * MAX_ENTRIES];
    static unsigned char seen[MAX_ENTRIES];
    for (size_t i = 0; i < ref_count; i++) {
        keys[2 * i] = ref[i].key; /* and the key after it: mostly absent */
        keys[2 * i + 1] = ref[i].key + 1;
    }
    ember_keymap_find_many(map, keys, 2 * ref_count, values);
    for (size_t i = 0; i < ref_count; i++) {
        FUZZ_CHECK(values[2 * i] == ref[i].value, "find_many of entry %zu", i);
        FUZZ_CHECK(values[2 * i + 1] == ref_find(keys[2 * i + 1]), "find_many after entry %zu", i);
    }
    memset(seen, 0, ref_count);
    size_t cursor = 0, given = 0;
    uint64_t key;
    uint32_t value;
    while (ember_keymap_next(map, &cursor, &key, &value)) {
        ref_entry_t *e = ref_entry(key);
        size_t i = e ? (size_t)(e - ref) : 0;
        FUZZ_CHECK(e && e->value == value && !seen[i], "iteration gave %llx = %u",
                   (unsigned long long)key, value);
        seen[i] = 1;
        given++;
    }
    FUZZ_CHECK(given == ref_count, "iteration gave %zu of %zu", given, ref_count);
    check_stats(map);
}

static void run_op(fuzz_input_t *in, ember_keymap_t *map, uint8_t op)
{
    unsigned how = (op >> 3) & 7;
    switch (op & 7) {
    case 0: {
        uint64_t key = choose_key(in, map, how);
        check_insert(map, key, fuzz_u32(in));
        break;
    }
    case 1: {
        uint64_t key = choose_key(in, map, how);
        FUZZ_CHECK(ember_keymap_find(map, key) == ref_find(key), "find %llx",
                   (unsigned long long)key);
        break;
    }
    case 2: {
        uint64_t key = choose_key(in, map, how);
        uint32_t had = ref_find(key);
        FUZZ_CHECK(ember_keymap_remove(map, key) == had, "remove %llx", (unsigned long long)key);
        if (had != EMBER_KEYMAP_NONE)
            ref_remove(key);
        FUZZ_CHECK(ember_keymap_find(map, key) == EMBER_KEYMAP_NONE, "find after remove");
        break;
    }
    case 3: {
        uint64_t key = choose_key(in, map, how);
        uint32_t value = fuzz_u32(in), had = ref_find(key);
        int expect = had != EMBER_KEYMAP_NONE && value != EMBER_KEYMAP_NONE;
        FUZZ_CHECK(ember_keymap_set(map, key, value) == expect, "set %llx",
                   (unsigned long long)key);
        if (expect)
            ref_entry(key)->value = value;
        break;
    }
    case 4: {
        uint64_t base = choose_key(in, map, how);
        flood(map, base, fuzz_u8(in) + 1u, op & 0x40);
        check_stats(map);
        break;
    }
    case 5:
        ember_keymap_clear(map);
        ref_clear();
        check_stats(map);
        break;
    case 6: {
        uint16_t more = fuzz_u16(in);
        size_t entries = more == 0xffff ? SIZE_MAX : ref_count + more % 4096;
        ember_status_t status = ember_keymap_reserve(map, entries);
        FUZZ_CHECK(status == (more == 0xffff ? EMBER_ERR_NO_MEMORY : EMBER_OK), "reserve %zu: %d",
                   entries, status);
        check_stats(map);
        break;
    }
    default:
        if (full_checks_left) {
            full_checks_left--;
            check_all(map);
        }
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint64_t seed = fuzz_u64(&in);
    size_t expected = fuzz_u16(&in) % 1024;
    ember_keymap_t *map;

    FUZZ_CHECK(ember_keymap_create(expected, seed, &map) == EMBER_OK, "create for %zu", expected);
    ref_clear();
    full_checks_left = FULL_CHECKS;
    stats_checks_left = STATS_CHECKS;
    flood_keys_left = FLOOD_KEYS;
    while (fuzz_left(&in))
        run_op(&in, map, fuzz_u8(&in));
    check_all(map);
    ember_keymap_destroy(map);
    return 0;
}
