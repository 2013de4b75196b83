/*
 * tests/engine/test_heap: the bytes the heap holds, for the streams'
 * bounded-memory cases: glibc's count over one arena (test_heap_one_arena
 * first, so every thread allocates from the main one), or a sanitizer's
 * own count (its allocator replaces glibc's).
 */
#ifndef EMBER_TESTS_ENGINE_TEST_HEAP_H
#define EMBER_TESTS_ENGINE_TEST_HEAP_H

#include <malloc.h>
#include <stddef.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZER_HEAP 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZER_HEAP 1
#endif
#ifdef TEST_SANITIZER_HEAP
#include <sanitizer/allocator_interface.h>
#endif

/* 1 when set (always under a sanitizer: nothing to set). */
static inline int test_heap_one_arena(void)
{
#ifdef TEST_SANITIZER_HEAP
    return 1;
#else
    return mallopt(M_ARENA_MAX, 1) == 1;
#endif
}

static inline size_t test_heap_bytes(void)
{
#ifdef TEST_SANITIZER_HEAP
    return __sanitizer_get_current_allocated_bytes();
#else
    return mallinfo2().uordblks;
#endif
}

#endif
