/*
 * common/copy: memcpy for the data path, minus one trap.
 *
 * glibc 2.36 (Debian 12) copies more than about 2 KiB with `rep movsb`.  On
 * some AMD EPYC machines that instruction runs many times slower when the
 * destination lies a few bytes (under 32) past the source modulo the 4 KiB
 * page (build/bench/memcpy_distance measures both cases on a machine).
 * Whether a copy hits it depends only on where two buffers happen to sit,
 * so two builds with identical code on that path can differ widely in
 * speed.  Those copies run backwards, 64 bytes a pass (a forward loop
 * stalls on the same 4 KiB aliasing); every other copy is memcpy.
 */
#ifndef EMBER_COMMON_COPY_H
#define EMBER_COMMON_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EMBER_COPY_MOVSB_MIN 2048u /* glibc's rep movsb starts above this */
#define EMBER_COPY_NEAR      64u   /* "a few bytes past", with a margin */

/* The backward copy, out of line: the check below stays small wherever it
 * is inlined. */
void *ember_copy_backward(void *dst, const void *src, size_t n);

static inline void *ember_copy(void *dst, const void *src, size_t n)
{
    uintptr_t distance = ((uintptr_t)dst - (uintptr_t)src) & 4095u;

    if (__builtin_expect(n <= EMBER_COPY_MOVSB_MIN || distance == 0 || distance >= EMBER_COPY_NEAR,
                         1))
        return memcpy(dst, src, n);
    return ember_copy_backward(dst, src, n);
}

#endif
