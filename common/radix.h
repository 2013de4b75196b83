/*
 * common/radix: a least-significant-digit radix sort of (key, value) pairs
 * by key, as the deduplication of row ids needs it (engine/ops' dedup, the
 * trainer's split, engine/train/split.c): O(n) where a comparison sort was
 * a trainer's hot spot.
 */
#ifndef EMBER_COMMON_RADIX_H
#define EMBER_COMMON_RADIX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t key;
    uint64_t value;
} ember_radix_pair_t;

/*
 * Sort @pairs[m] by key, stably, between @pairs and @other (m each): only
 * as many 11-bit digits as the widest distance of a key from @min (the
 * smallest; @max the largest) has, so one pass for keys within 2048 of
 * each other.  Returns the array holding the result (@pairs or @other).
 */
static inline ember_radix_pair_t *ember_radix_sort(ember_radix_pair_t *pairs,
                                                   ember_radix_pair_t *other, size_t m,
                                                   uint64_t min, uint64_t max)
{
    enum {
        DIGIT_BITS = 11,
        BUCKETS = 1 << DIGIT_BITS
    };
    size_t counts[BUCKETS];
    const uint64_t range = m ? max - min : 0;
    for (unsigned shift = 0; shift < 64 && (range >> shift) != 0; shift += DIGIT_BITS) {
        memset(counts, 0, sizeof(counts));
        for (size_t i = 0; i < m; i++)
            counts[((pairs[i].key - min) >> shift) & (BUCKETS - 1)]++;
        for (size_t d = 0, total = 0; d < BUCKETS; d++) {
            size_t c = counts[d];
            counts[d] = total;
            total += c;
        }
        for (size_t i = 0; i < m; i++)
            other[counts[((pairs[i].key - min) >> shift) & (BUCKETS - 1)]++] = pairs[i];
        ember_radix_pair_t *swap = pairs;
        pairs = other;
        other = swap;
    }
    return pairs;
}

#endif
