/*
 * bench/peers/row_gather: what one core can gather, with nothing else.
 *
 *     row_gather [--rows R] [--dim D] [--bags LIST] [-n ITERS] [--window W]
 *                [--beside-copy CPU] [--threads T]
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
 * --threads T: T threads gather at once, each its own gathers of the same
 * size (its own output buffers, other rows of the same table), started
 * together: the parallel gather limit of T cores, the reference of a PS
 * with --ps-threads T.  GB/s is all threads' output over the time from
 * their start to the last one's end; us_per_gather one thread's.
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
                    "[--window W (16)] [--beside-copy CPU] [--threads T (1)]\n");
}

typedef struct {
    size_t rows, dim, iters, window, threads;
    int copy_cpu; /* --beside-copy; -1: none */
    size_t bags[MAX_LIST], nbags;
} opts_t;

static void parse_bags(const char *value, opts_t *opts)
{
    char *list = strdup(value), *save = NULL;
    opts->nbags = 0;
    for (char *tok = strtok_r(list, ",", &save); tok && opts->nbags < MAX_LIST;
         tok = strtok_r(NULL, ",", &save))
        opts->bags[opts->nbags++] = strtoull(tok, NULL, 10);
    free(list);
}

/* @flag's @value into @opts: 1, or 0 for a flag it does not know. */
static int parse_flag(const char *flag, const char *value, opts_t *opts)
{
    const struct {
        const char *name;
        size_t *field;
    } sizes[] = {{"--rows", &opts->rows},
                 {"--dim", &opts->dim},
                 {"-n", &opts->iters},
                 {"--window", &opts->window},
                 {"--threads", &opts->threads}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (strcmp(flag, sizes[i].name) == 0) {
            *sizes[i].field = strtoull(value, NULL, 10);
            return 1;
        }
    }
    if (strcmp(flag, "--beside-copy") == 0)
        opts->copy_cpu = atoi(value);
    else if (strcmp(flag, "--bags") == 0)
        parse_bags(value, opts);
    else
        return 0;
    return 1;
}

/* 1, or 0 on anything it does not take (every flag has a value). */
static int parse(int argc, char **argv, opts_t *opts)
{
    for (int i = 1; i < argc; i += 2) { /* a flag and its value */
        if (i + 1 >= argc || !parse_flag(argv[i], argv[i + 1], opts))
            return 0;
    }
    if (!opts->rows || !opts->dim || !opts->iters || !opts->window || !opts->nbags ||
        !opts->threads || opts->threads > 1024)
        return 0;
    for (size_t b = 0; b < opts->nbags; b++) {
        if (!opts->bags[b])
            return 0;
    }
    return 1;
}

/* The table, the output buffers (the replies in flight) and the keys. */
typedef struct {
    const opts_t *opts;
    size_t row_bytes, max_bags, nkeys, pos;
    size_t thread; /* --threads: which one's output buffers */
    float *table, *out;
    uint32_t *keys; /* nkeys + AHEAD rows, uniform */
} gather_t;

static int gather_alloc(gather_t *g)
{
    const opts_t *opts = g->opts;
    for (size_t b = 0; b < opts->nbags; b++) {
        if (opts->bags[b] > g->max_bags)
            g->max_bags = opts->bags[b];
    }
    g->row_bytes = opts->dim * sizeof(float);
    /* Enough keys that no gather repeats another's rows in cache. */
    g->nkeys = (size_t)4 << 20;
    g->table = huge_touched(opts->rows * g->row_bytes);
    g->out = huge_touched(opts->threads * opts->window * g->max_bags * g->row_bytes);
    g->keys = malloc((g->nkeys + AHEAD) * sizeof(*g->keys));
    if (!g->table || !g->out || !g->keys)
        return 0;
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; k < g->nkeys + AHEAD; k++)
        g->keys[k] = (uint32_t)(next_random(&state) % opts->rows);
    return 1;
}

/* One gather of @n rows into output buffer @it % window, prefetching
 * AHEAD rows ahead. */
static void gather_once(gather_t *g, size_t n, size_t it)
{
    const size_t row_bytes = g->row_bytes;
    char *dst = (char *)g->out +
                (g->thread * g->opts->window + it % g->opts->window) * g->max_bags * row_bytes;
    if (g->pos + n > g->nkeys)
        g->pos = 0;
    const uint32_t *key = g->keys + g->pos;
    for (size_t r = 0; r < n; r++) {
        const char *ahead = (const char *)g->table + (size_t)key[r + AHEAD] * row_bytes;
        for (size_t off = 0; off < row_bytes; off += 64)
            __builtin_prefetch(ahead + off, 0, 3);
        memcpy(dst + r * row_bytes, (const char *)g->table + (size_t)key[r] * row_bytes, row_bytes);
    }
    g->pos += n;
    /* Keep the copies: the compiler must not drop a write nobody reads. */
    __asm__ volatile("" : : "r"(dst) : "memory");
}

/* --threads: one thread's gathers, after the others are ready. */
typedef struct {
    gather_t g;
    size_t n;
    pthread_barrier_t *ready;
    double end;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    size_t warmup = w->g.opts->iters / 10 + 1;
    for (size_t it = 0; it < warmup; it++)
        gather_once(&w->g, w->n, it);
    pthread_barrier_wait(w->ready);
    for (size_t it = 0; it < w->g.opts->iters; it++)
        gather_once(&w->g, w->n, it);
    w->end = now();
    return NULL;
}

/* Gathers of @n rows on every thread at once (each warmed first); the
 * seconds from the common start to the last one's end; 0 on failure. */
static double gather_threads(gather_t *g, size_t n)
{
    const size_t threads = g->opts->threads;
    worker_t *w = calloc(threads, sizeof(*w));
    pthread_t *ids = calloc(threads, sizeof(*ids));
    pthread_barrier_t ready;
    double seconds = 0.0;
    size_t started = 0;
    if (w && ids && pthread_barrier_init(&ready, NULL, (unsigned)threads + 1) == 0) {
        for (; started < threads; started++) {
            w[started] = (worker_t){.g = *g, .n = n, .ready = &ready};
            w[started].g.thread = started;
            w[started].g.pos = started * (g->nkeys / threads); /* other rows */
            if (pthread_create(&ids[started], NULL, worker_main, &w[started]) != 0)
                break;
        }
        if (started == threads) {
            pthread_barrier_wait(&ready);
            double start = now();
            for (size_t t = 0; t < threads; t++) {
                pthread_join(ids[t], NULL);
                seconds = w[t].end - start > seconds ? w[t].end - start : seconds;
            }
        } else {
            fprintf(stderr, "row_gather: cannot start thread %zu of %zu\n", started + 1, threads);
            exit(2); /* the started ones wait at the barrier forever */
        }
        pthread_barrier_destroy(&ready);
    }
    free(w);
    free(ids);
    return seconds;
}

/* Gathers of @n rows, timed after a tenth as many untimed; the copier
 * beside them under --beside-copy.  Prints the line; 0: no copier. */
static int gather_point(gather_t *g, size_t n)
{
    const opts_t *opts = g->opts;
    size_t warmup = opts->iters / 10 + 1;
    double start = 0.0;
    copier_t copier = {.cpu = opts->copy_cpu,
                       .bytes = n * g->row_bytes,
                       .stride = g->max_bags * g->row_bytes,
                       .window = opts->window,
                       .src = (const char *)g->out};
    pthread_t thread;

    if (opts->copy_cpu >= 0) {
        copier.dst = huge_touched(opts->window * copier.bytes);
        if (!copier.dst || pthread_create(&thread, NULL, copier_main, &copier) != 0)
            return 0;
    }
    double seconds = 0.0;
    if (opts->threads > 1) {
        seconds = gather_threads(g, n);
    } else {
        for (size_t it = 0; it < warmup + opts->iters; it++) {
            if (it == warmup)
                start = now();
            gather_once(g, n, it);
        }
        seconds = now() - start;
    }
    if (opts->copy_cpu >= 0) {
        atomic_store(&copier.stop, 1);
        pthread_join(thread, NULL);
        ember_huge_free(copier.dst);
    }
    double resp = (double)(n * g->row_bytes);
    printf("  %8zu %10.0f %10.3f %14.2f\n", n, resp,
           resp * (double)opts->iters * (double)opts->threads / seconds / 1e9,
           seconds / (double)opts->iters * 1e6);
    return 1;
}

int main(int argc, char **argv)
{
    opts_t opts = {.rows = 100000,
                   .dim = 64,
                   .iters = 2000,
                   .window = 16,
                   .threads = 1,
                   .copy_cpu = -1,
                   .bags = {1, 16, 256, 1024, 4096},
                   .nbags = 5};
    gather_t g = {.opts = &opts};

    if (!parse(argc, argv, &opts)) {
        usage();
        return 2;
    }
    if (!gather_alloc(&g)) {
        fprintf(stderr, "row_gather: out of memory\n");
        return 2;
    }
    printf("# row_gather: %zu rows x %zu floats, uniform rows, %zu output buffers, "
           "prefetch %d rows ahead, %zu thread(s)%s\n",
           opts.rows, opts.dim, opts.window, AHEAD, opts.threads,
           opts.copy_cpu >= 0 ? ", the output buffers read into as many others beside it" : "");
    printf("# %8s %10s %10s %14s\n", "bags", "resp_B", "GB/s", "us_per_gather");
    for (size_t b = 0; b < opts.nbags; b++) {
        if (!gather_point(&g, opts.bags[b])) {
            fprintf(stderr, "row_gather: cannot start the copier\n");
            return 2;
        }
    }
    free(g.keys);
    ember_huge_free(g.out);
    ember_huge_free(g.table);
    return 0;
}
