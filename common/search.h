/*
 * common/search: the lower bound of a value in a sorted array of row ids,
 * as the ops (a max bag's row among its distinct rows) and the PS (a row's
 * slot among a lookup's distinct rows) both need it.
 */
#ifndef EMBER_COMMON_SEARCH_H
#define EMBER_COMMON_SEARCH_H

#include <stddef.h>
#include <stdint.h>

/* The first position of @keys[n] (increasing) whose key is not below
 * @value; n when every key is below it. */
static inline size_t ember_lower_bound_i64(const int64_t *keys, size_t n, int64_t value)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The same over increasing uint32 values (a lookup's offsets). */
static inline size_t ember_lower_bound_u32(const uint32_t *keys, size_t n, uint64_t value)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

#endif
