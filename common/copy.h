/*
 * common/copy: memcpy for the data path, minus one trap.
 *
 * glibc 2.36 (Debian 12) copies more than about 2 KiB with `rep movsb`.  On
 * the AMD EPYC machine we measured, that instruction runs 20-35 times
 * slower when the destination lies a few bytes (under 32) past the source
 * modulo the 4 KiB page: 8 KiB took 4.3 us instead of 0.1, 256 KiB 90-150 us
 * instead of 6-7 (build/bench/memcpy_distance prints both for a machine).
 * Whether a copy hits it depends only on where two buffers happen to sit:
 * one build of ember was 2.4x slower than another at an 8 KiB allreduce
 * with identical code on that path.  Those copies run backwards, 64 bytes a
 * pass (a forward loop stalls on the same 4 KiB aliasing); every other copy
 * is memcpy.
 */
#ifndef EMBER_COMMON_COPY_H
#define EMBER_COMMON_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EMBER_COPY_MOVSB_MIN 2048u /* glibc's rep movsb starts above this */
#define EMBER_COPY_NEAR 64u        /* "a few bytes past", with a margin */

static inline void *ember_copy(void *dst, const void *src, size_t n)
{
    typedef unsigned char v16 __attribute__((vector_size(16)));
    uintptr_t distance = ((uintptr_t)dst - (uintptr_t)src) & 4095u;

    if (n <= EMBER_COPY_MOVSB_MIN || distance == 0 || distance >= EMBER_COPY_NEAR)
        return memcpy(dst, src, n);
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t i = n;
    while (i >= 64) {
        v16 x0, x1, x2, x3;
        i -= 64;
        memcpy(&x0, s + i, 16);
        memcpy(&x1, s + i + 16, 16);
        memcpy(&x2, s + i + 32, 16);
        memcpy(&x3, s + i + 48, 16);
        memcpy(d + i, &x0, 16);
        memcpy(d + i + 16, &x1, 16);
        memcpy(d + i + 32, &x2, 16);
        memcpy(d + i + 48, &x3, 16);
    }
    memcpy(d, s, i); /* under 64 bytes: no rep movsb */
    return dst;
}

#endif
