/*
 * bench/peers/row_gather: what one core can gather, with nothing else.
 *
 *     row_gather [--rows R] [--dim D] [--bags LIST] [-n ITERS] [--window W]
 *                [--beside-copy CPU]
 *
 * The reference for ember-bench lookup's PS ceiling (`ps_GB/s`): the same
 * table (R x D floats from the PS's allocator, engine/hugepage), the same
 * uniform random rows, one index per bag, copied into W output buffers in
 * turn (the replies in flight), with the same software prefetch 16 rows
 * ahead; and nothing the PS also does: no message, no checks, no autograd
 * context, no transport.
 * Run it pinned to the core the PS gets (bench/compare.sh does).
 *
 * --beside-copy CPU: meanwhile a thread on CPU reads the W output buffers in
 * turn into W buffers of its own, over and over, as a same-host client
 * reading every reply into its window of reply buffers does on its core:
 * what that costs the gather is the price of sharing the machine's caches
 * and memory with it.  (A copy between two buffers that stay in cache
 * costs it nothing measurable; the client's does not stay there.)
 *
 * Prints one line per bag count:  bags resp_B GB/s us_per_gather
 * (GB = 10^9 B of output).  Exit 0, or 2 on bad usage / no memory.
 */
#define _GNU_SOURCE
#include "common/hugepage.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AHEAD    16 /* rows, as common/prefetch.h */
#define MAX_LIST 16

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* @bytes from the PS tables' own allocator (huge pages from 2 MiB up),
 * touched; give back with ember_huge_free. */
static void *huge_touched(size_t bytes)
{
    void *p = ember_huge_alloc(bytes, 0);
    if (p)
        memset(p, 0x3c, bytes);
    return p;
}

static uint64_t next_random(uint64_t *state)
{
    /* xorshift64*: uniform enough for row picks, and cheap. */
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 2685821657736338717ull;
}

/* --beside-copy: copy @bytes out of each of @window buffers @stride apart
 * at @src into its own at @dst, in turn, until told to stop. */
typedef struct {
    int cpu;
    size_t bytes, stride, window;
    const char *src;
    char *dst;
    atomic_int stop;
} copier_t;

/* Unsynchronised with the gather on purpose: it stands for the memory
 * traffic of a client's reads, not for their values. */
static void *copier_main(void *arg)
{
    copier_t *copier = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(copier->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
        fprintf(stderr, "row_gather: cannot pin the copier to CPU %d\n", copier->cpu);
    for (size_t k = 0; !atomic_load_explicit(&copier->stop, memory_order_relaxed);
         k = (k + 1) % copier->window) {
        char *dst = copier->dst + k * copier->bytes;
        memcpy(dst, copier->src + k * copier->stride, copier->bytes);
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: row_gather [--rows R (100000)] [--dim D (64)] "
                    "[--bags LIST (1,16,256,1024,4096)] [-n ITERS (2000)] "
                    "[--window W (16)] [--beside-copy CPU]\n");
}

int main(int argc, char **argv)
{
    size_t rows = 100000, dim = 64, iters = 2000, window = 16;
    int copy_cpu = -1;
    size_t bags[MAX_LIST] = {1, 16, 256, 1024, 4096}, nbags = 5;

    for (int i = 1; i < argc; i += 2) { /* a flag and its value */
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value) {
            usage();
            return 2;
        }
        if (strcmp(argv[i], "--rows") == 0)
            rows = strtoull(value, NULL, 10);
        else if (strcmp(argv[i], "--dim") == 0)
            dim = strtoull(value, NULL, 10);
        else if (strcmp(argv[i], "-n") == 0)
            iters = strtoull(value, NULL, 10);
        else if (strcmp(argv[i], "--window") == 0)
            window = strtoull(value, NULL, 10);
        else if (strcmp(argv[i], "--beside-copy") == 0)
            copy_cpu = atoi(value);
        else if (strcmp(argv[i], "--bags") == 0) {
            char *list = strdup(value), *save = NULL;
            nbags = 0;
            for (char *tok = strtok_r(list, ",", &save); tok && nbags < MAX_LIST;
                 tok = strtok_r(NULL, ",", &save))
                bags[nbags++] = strtoull(tok, NULL, 10);
            free(list);
        } else {
            usage();
            return 2;
        }
    }
    if (!rows || !dim || !iters || !window || !nbags) {
        usage();
        return 2;
    }
    size_t max_bags = 0;
    for (size_t b = 0; b < nbags; b++) {
        if (!bags[b]) {
            usage();
            return 2;
        }
        if (bags[b] > max_bags)
            max_bags = bags[b];
    }
    const size_t row_bytes = dim * sizeof(float);
    /* Enough keys that no gather repeats another's rows in cache. */
    size_t nkeys = (size_t)4 << 20;
    float *table = huge_touched(rows * row_bytes);
    float *out = huge_touched(window * max_bags * row_bytes);
    uint32_t *keys = malloc((nkeys + AHEAD) * sizeof(*keys));
    if (!table || !out || !keys) {
        fprintf(stderr, "row_gather: out of memory\n");
        return 2;
    }
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; k < nkeys + AHEAD; k++)
        keys[k] = (uint32_t)(next_random(&state) % rows);

    printf("# row_gather: %zu rows x %zu floats, uniform rows, %zu output buffers, "
           "prefetch %d rows ahead%s\n",
           rows, dim, window, AHEAD,
           copy_cpu >= 0 ? ", the output buffers read into as many others beside it" : "");
    printf("# %8s %10s %10s %14s\n", "bags", "resp_B", "GB/s", "us_per_gather");
    size_t pos = 0;
    for (size_t b = 0; b < nbags; b++) {
        size_t n = bags[b], warmup = iters / 10 + 1;
        double start = 0.0;
        copier_t copier = {.cpu = copy_cpu,
                           .bytes = n * row_bytes,
                           .stride = max_bags * row_bytes,
                           .window = window,
                           .src = (const char *)out};
        pthread_t thread;
        if (copy_cpu >= 0) {
            copier.dst = huge_touched(window * copier.bytes);
            if (!copier.dst || pthread_create(&thread, NULL, copier_main, &copier) != 0) {
                fprintf(stderr, "row_gather: cannot start the copier\n");
                return 2;
            }
        }
        for (size_t it = 0; it < warmup + iters; it++) {
            if (it == warmup)
                start = now();
            char *dst = (char *)out + (it % window) * max_bags * row_bytes;
            if (pos + n > nkeys)
                pos = 0;
            const uint32_t *key = keys + pos;
            for (size_t r = 0; r < n; r++) {
                const char *ahead = (const char *)table + (size_t)key[r + AHEAD] * row_bytes;
                for (size_t off = 0; off < row_bytes; off += 64)
                    __builtin_prefetch(ahead + off, 0, 3);
                memcpy(dst + r * row_bytes, (const char *)table + (size_t)key[r] * row_bytes,
                       row_bytes);
            }
            pos += n;
            /* Keep the copies: the compiler must not drop a write nobody reads. */
            __asm__ volatile("" : : "r"(dst) : "memory");
        }
        double seconds = now() - start;
        if (copy_cpu >= 0) {
            atomic_store(&copier.stop, 1);
            pthread_join(thread, NULL);
            ember_huge_free(copier.dst);
        }
        double resp = (double)(n * row_bytes);
        printf("  %8zu %10.0f %10.3f %14.2f\n", n, resp, resp * (double)iters / seconds / 1e9,
               seconds / (double)iters * 1e6);
    }
    free(keys);
    ember_huge_free(out);
    ember_huge_free(table);
    return 0;
}
