/*
 * bench/memcpy_distance: glibc's memcpy against ember_copy (common/copy.h)
 * by the destination's distance past the source modulo 4 KiB, on one core.
 *
 *     build/bench/memcpy_distance [BYTES...]     (8192 262144)
 *
 * Both buffers are page-aligned and resident; each figure is the median
 * of 9 passes over enough copies for about 2 ms, in ns per copy.  Prints
 * the ratio memcpy / ember_copy per row: about 1 where memcpy is fine,
 * large where its `rep movsb` hits the page-distance slow case.
 */
#include "common/copy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void *(*copy_fn)(void *, const void *, size_t);

static double time_copy(copy_fn copy, void *dst, const void *src, size_t bytes)
{
    double passes[9];
    size_t reps = 1 + (size_t)(2e6 / (bytes / 8.0 + 50)); /* ~2 ms at 8 B/ns */
    for (int p = 0; p < 9; p++) {
        double start = now_ns();
        for (size_t r = 0; r < reps; r++) {
            copy(dst, src, bytes);
            __asm__ volatile("" ::: "memory");
        }
        passes[p] = (now_ns() - start) / (double)reps;
    }
    qsort(passes, 9, sizeof(double), by_value);
    return passes[4];
}

static void *ember_copy_fn(void *dst, const void *src, size_t n)
{
    return ember_copy(dst, src, n);
}

int main(int argc, char **argv)
{
    static const size_t distances[] = {0, 8, 16, 32, 48, 64, 128, 2048, 4032};
    size_t sizes[16] = {8192, 262144}, nsizes = 2;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 16; i++)
            sizes[nsizes++] = strtoull(argv[i], NULL, 0);
    }
    size_t max = 0;
    for (size_t i = 0; i < nsizes; i++)
        max = sizes[i] > max ? sizes[i] : max;
    unsigned char *src = NULL, *dst = NULL;
    if (posix_memalign((void **)&src, 4096, max + 4096) ||
        posix_memalign((void **)&dst, 4096, max + 8192)) {
        fprintf(stderr, "memcpy_distance: out of memory\n");
        return 1;
    }
    memset(src, 1, max + 4096);
    memset(dst, 2, max + 8192);
    printf("# ns per copy, median of 9 passes; distance = (dst - src) mod 4096\n");
    printf("%10s %8s %12s %12s %8s\n", "bytes", "distance", "memcpy_ns", "ember_ns", "ratio");
    for (size_t i = 0; i < nsizes; i++) {
        for (size_t d = 0; d < sizeof(distances) / sizeof(distances[0]); d++) {
            double m = time_copy(memcpy, dst + distances[d], src, sizes[i]);
            double e = time_copy(ember_copy_fn, dst + distances[d], src, sizes[i]);
            printf("%10zu %8zu %12.1f %12.1f %8.2f\n", sizes[i], distances[d], m, e, m / e);
        }
    }
    free(src);
    free(dst);
    return 0;
}
