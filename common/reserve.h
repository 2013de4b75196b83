/*
 * common/reserve: grow-only arrays, so a steady-state step allocates nothing.
 *
 *     if (!EMBER_RESERVE(buf, buf_capacity, count))
 *         return EMBER_ERR_NO_MEMORY;   // buf and buf_capacity as they were
 *
 * After a true result @ptr holds at least @count elements (its old contents
 * kept) and @cap says how many; when the memory or the size's arithmetic
 * runs out the result is false and both are left exactly as they were, so
 * the caller still owns (and frees) the old array.
 */
#ifndef EMBER_COMMON_RESERVE_H
#define EMBER_COMMON_RESERVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* @ptr grown to hold @count elements of @elem bytes (about twice that, so
 * growth is rare), *capacity_p updated; NULL when it cannot grow, with @ptr
 * still valid and *capacity_p unchanged. */
static inline void *ember_grow(void *ptr, size_t *capacity_p, size_t count, size_t elem)
{
    /* No object may exceed PTRDIFF_MAX bytes. */
    size_t limit = (size_t)PTRDIFF_MAX / (elem ? elem : 1);
    if (count > limit)
        return NULL;
    size_t want = count <= (limit - 16) / 2 ? count * 2 + 16 : count;
    void *grown = realloc(ptr, want * elem);
    if (grown)
        *capacity_p = want;
    return grown;
}

#define EMBER_RESERVE(ptr, cap, count)                                                           \
    __extension__({                                                                              \
        size_t ember_count_ = (count);                                                           \
        __typeof__(ptr) ember_grown_ =                                                           \
                ember_count_ <= (cap) ? (ptr)                                                    \
                                      : ember_grow((ptr), &(cap), ember_count_, sizeof(*(ptr))); \
        ember_grown_ ? ((ptr) = ember_grown_, 1) : ember_count_ <= (cap);                        \
    })

#endif
