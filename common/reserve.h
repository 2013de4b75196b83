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

/* The capacity, in elements of @elem bytes, a grow-only buffer of
 * @capacity takes to hold @count: at least twice what it had, so growth is
 * rare, but no slack on a first size (a buffer sized once per step stays at
 * what the step needs); 0 when @count such elements would exceed an
 * object's largest size (PTRDIFF_MAX bytes). */
static inline size_t ember_grow_capacity(size_t capacity, size_t count, size_t elem)
{
    size_t limit = (size_t)PTRDIFF_MAX / (elem ? elem : 1);
    if (count > limit)
        return 0;
    size_t doubled = capacity <= limit / 2 ? 2 * capacity : limit;
    size_t want = count > doubled ? count : doubled;
    return want < 8 && limit >= 8 ? 8 : want; /* no run of tiny growths */
}

/* @ptr grown to hold @count elements of @elem bytes, *capacity_p updated;
 * NULL when it cannot grow, with @ptr still valid and *capacity_p unchanged. */
static inline void *ember_grow(void *ptr, size_t *capacity_p, size_t count, size_t elem)
{
    size_t want = ember_grow_capacity(*capacity_p, count, elem);
    void *grown = want ? realloc(ptr, want * elem) : NULL;
    if (grown)
        *capacity_p = want;
    return grown;
}

#define EMBER_RESERVE(ptr, cap, count)                                                           \
    __extension__({                                                                              \
        size_t ember_count_ = (count);                                                           \
        __typeof__(ptr) ember_grown_ =                                                           \
                ember_count_ <= (cap) ? (ptr)                                                    \
                                      : (__typeof__(ptr))ember_grow((ptr), &(cap), ember_count_, \
                                                                    sizeof(*(ptr)));             \
        ember_grown_ ? ((ptr) = ember_grown_, 1) : ember_count_ <= (cap);                        \
    })

/* A grow-only byte buffer, for scratch of no one type: its contents are kept
 * as it grows; @capacity is in bytes. */
typedef struct {
    void *data;
    size_t capacity;
} ember_buffer_t;

/* 1 when @buffer holds at least @bytes; 0 (and @buffer as it was) when it
 * cannot grow. */
static inline int ember_buffer_reserve(ember_buffer_t *buffer, size_t bytes)
{
    unsigned char *data = (unsigned char *)buffer->data;
    if (!EMBER_RESERVE(data, buffer->capacity, bytes))
        return 0;
    buffer->data = data;
    return 1;
}

static inline void ember_buffer_free(ember_buffer_t *buffer)
{
    free(buffer->data);
    buffer->data = NULL;
    buffer->capacity = 0;
}

#endif
