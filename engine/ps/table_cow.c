/* engine/ps/table_cow: a snapshot's chunks copied aside before they change. */
#define _GNU_SOURCE /* MADV_FREE */
#include "engine/ps/table_cow.h"

#include "common/copy.h"

#include <ember/log.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The writer's copy out of the live rows races, by design, with updaters
 * that claimed a chunk after it was read (a seqlock: those bytes are
 * thrown away and taken from the shadow).  ThreadSanitizer is told to
 * leave that one copy's reads alone; every other access stays checked. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COW_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define COW_TSAN 1
#endif
#ifdef COW_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define SEQLOCK_READ_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define SEQLOCK_READ_END()   AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define SEQLOCK_READ_BEGIN() ((void)0)
#define SEQLOCK_READ_END()   ((void)0)
#endif

/* A chunk's state under a write; past the writer's `done` an owed chunk
 * is owed no more (the writer has it). */
enum {
    COW_OWED = 1,
    COW_COPYING = 2,
    COW_ASIDE = 3
};

typedef struct {
    char *data;   /* the live array */
    char *shadow; /* the chunks copied aside, at their offsets in data */
    size_t row_bytes, bytes;
    size_t chunk_bytes;     /* chunk_rows rows */
    _Atomic uint8_t *state; /* [nchunks] */
    atomic_size_t done;     /* the writer has taken the whole chunks below this byte */
} cow_array_t;

typedef struct table_cow table_cow_t;

struct table_cow {
    cow_array_t arrays[EMBER_TABLE_STATE_TENSORS];
    size_t narrays;
    int64_t rows;
    unsigned shift; /* chunk_rows = 1 << shift */
    size_t nchunks;
    atomic_int owing;
    atomic_uint_fast64_t chunks, bytes; /* copied aside since the begin */
};

static void cow_destroy(table_cow_t *cow)
{
    for (size_t i = 0; cow && i < cow->narrays; i++) {
        if (cow->arrays[i].shadow)
            munmap(cow->arrays[i].shadow, cow->arrays[i].bytes);
        free((void *)cow->arrays[i].state);
    }
    free(cow);
}

/* The guard was made for these very arrays (a new optimizer has others). */
static int cow_fits(const table_cow_t *cow, int64_t rows, const table_cow_array_t *arrays,
                    size_t narrays)
{
    if (cow->narrays != narrays || cow->rows != rows)
        return 0;
    for (size_t i = 0; i < narrays; i++)
        if (cow->arrays[i].data != arrays[i].data ||
            cow->arrays[i].row_bytes != arrays[i].row_bytes)
            return 0;
    return 1;
}

/* The chunk's rows: the widest array's row bytes into TABLE_COW_CHUNK_BYTES,
 * at least one, a power of two (a row's chunk is a shift). */
static unsigned chunk_shift(const table_cow_array_t *arrays, size_t narrays)
{
    size_t widest = 1;
    for (size_t i = 0; i < narrays; i++)
        widest = arrays[i].row_bytes > widest ? arrays[i].row_bytes : widest;
    unsigned shift = 0;
    while (((size_t)2 << shift) * widest <= TABLE_COW_CHUNK_BYTES)
        shift++;
    return shift;
}

static table_cow_t *cow_create(int64_t rows, const table_cow_array_t *arrays, size_t narrays)
{
    table_cow_t *cow = calloc(1, sizeof(*cow));
    if (!cow)
        return NULL;
    cow->narrays = narrays;
    cow->rows = rows;
    cow->shift = chunk_shift(arrays, narrays);
    cow->nchunks = ((size_t)rows + ((size_t)1 << cow->shift) - 1) >> cow->shift;
    for (size_t i = 0; i < narrays; i++) {
        cow_array_t *a = &cow->arrays[i];
        a->data = arrays[i].data;
        a->row_bytes = arrays[i].row_bytes;
        a->bytes = (size_t)rows * a->row_bytes;
        a->chunk_bytes = a->row_bytes << cow->shift;
        a->state = calloc(cow->nchunks + 1, sizeof(*a->state));
        if (!a->state) {
            cow_destroy(cow);
            return NULL;
        }
        if (a->bytes == 0)
            continue;
        /* Address space only: a page is used once a chunk in it is copied. */
        void *shadow = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (shadow == MAP_FAILED) {
            cow_destroy(cow);
            return NULL;
        }
        a->shadow = shadow;
    }
    return cow;
}

ember_status_t table_cow_begin(ember_shard_t *table, const table_cow_array_t *arrays,
                               size_t narrays, char *err, size_t err_length)
{
    if (narrays > EMBER_TABLE_STATE_TENSORS)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: %zu arrays to keep, at most %d", table->spec.name,
                                 narrays, EMBER_TABLE_STATE_TENSORS);
    if (table->cow && !cow_fits(table->cow, table->local_rows, arrays, narrays)) {
        cow_destroy(table->cow);
        table->cow = NULL;
    }
    if (!table->cow && !(table->cow = cow_create(table->local_rows, arrays, narrays)))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory for the checkpoint's copy-on-write "
                                 "state of its %lld rows",
                                 table->spec.name, (long long)table->local_rows);
    table_cow_t *cow = table->cow;
    /* No other thread looks at the states now (the boundary): a plain
     * fill; the PS's pool hands its next tasks over with a barrier. */
    for (size_t i = 0; i < narrays; i++) {
        memset((void *)cow->arrays[i].state, COW_OWED, cow->nchunks);
        atomic_store_explicit(&cow->arrays[i].done, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&cow->chunks, 0, memory_order_relaxed);
    atomic_store_explicit(&cow->bytes, 0, memory_order_relaxed);
    atomic_store_explicit(&cow->owing, 1, memory_order_release);
    return EMBER_OK;
}

int table_cow_owing(const ember_shard_t *table)
{
    return table->cow && atomic_load_explicit(&table->cow->owing, memory_order_acquire);
}

/* Chunk @c's bytes in @a: [*begin_p, *begin_p + length). */
static size_t chunk_span(const cow_array_t *a, size_t c, size_t *begin_p)
{
    const size_t begin = c * a->chunk_bytes;
    *begin_p = begin;
    return a->bytes - begin < a->chunk_bytes ? a->bytes - begin : a->chunk_bytes;
}

/* What one updater's call copied aside, added to the guard's counts once
 * (not per chunk: the PS's threads would fight over their cache line). */
typedef struct {
    uint64_t chunks, bytes;
} claimed_t;

static void claimed_add(table_cow_t *cow, const claimed_t *claimed)
{
    if (claimed->chunks == 0)
        return;
    atomic_fetch_add_explicit(&cow->chunks, claimed->chunks, memory_order_relaxed);
    atomic_fetch_add_explicit(&cow->bytes, claimed->bytes, memory_order_relaxed);
}

/* Chunk @c of @a copied aside if it is still owed: neither copied yet nor
 * taken by the writer.  Two updaters may meet on one chunk (the edges of
 * their row ranges): the second waits for the first's copy, a few hundred
 * bytes on a running thread. */
static void chunk_claim(cow_array_t *a, size_t c, claimed_t *claimed)
{
    _Atomic uint8_t *state = &a->state[c];
    size_t begin;
    const size_t length = chunk_span(a, c, &begin);
    uint8_t seen = atomic_load_explicit(state, memory_order_acquire);
    for (;;) {
        if (seen == COW_ASIDE)
            return;
        if (seen == COW_COPYING) {
            sched_yield();
            seen = atomic_load_explicit(state, memory_order_acquire);
            continue;
        }
        if (begin + length <= atomic_load_explicit(&a->done, memory_order_acquire))
            return; /* written already */
        if (atomic_compare_exchange_weak_explicit(state, &seen, COW_COPYING, memory_order_acq_rel,
                                                  memory_order_acquire))
            break;
    }
    ember_copy(a->shadow + begin, a->data + begin, length);
    atomic_store_explicit(state, COW_ASIDE, memory_order_release);
    claimed->chunks++;
    claimed->bytes += length;
}

static void claim_all_arrays(table_cow_t *cow, size_t c, claimed_t *claimed)
{
    for (size_t i = 0; i < cow->narrays; i++)
        if (cow->arrays[i].bytes > 0)
            chunk_claim(&cow->arrays[i], c, claimed);
}

void table_cow_rows(ember_shard_t *table, const int64_t *rows, size_t n)
{
    if (n == 0 || !table_cow_owing(table))
        return;
    table_cow_t *cow = table->cow;
    claimed_t claimed = {0};
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= cow->rows)
            continue; /* refused by the step's own check */
        const size_t c = (size_t)rows[i] >> cow->shift;
        if (c != last)
            claim_all_arrays(cow, c, &claimed);
        last = c;
    }
    claimed_add(cow, &claimed);
    /* The caller's writes come after the states it saw or set, for a
     * writer that read the rows before it checks their states. */
    atomic_thread_fence(memory_order_release);
}

void table_cow_range(ember_shard_t *table, int64_t first, int64_t count)
{
    if (count <= 0 || !table_cow_owing(table))
        return;
    table_cow_t *cow = table->cow;
    claimed_t claimed = {0};
    const int64_t lo = first < 0 ? 0 : first;
    const int64_t hi = count > cow->rows - lo ? cow->rows : lo + count;
    for (int64_t r = lo; r < hi; r += (int64_t)1 << cow->shift)
        claim_all_arrays(cow, (size_t)r >> cow->shift, &claimed);
    if (hi > lo)
        claim_all_arrays(cow, (size_t)(hi - 1) >> cow->shift, &claimed);
    claimed_add(cow, &claimed);
    atomic_thread_fence(memory_order_release);
}

/* The part of chunk @c within [@offset, @end) of @a taken again from the
 * shadow: an updater may have changed it after copying it aside. */
static ember_status_t read_aside(const table_cow_t *cow, size_t array, size_t c, uint64_t offset,
                                 uint64_t end, char *buf, char *err, size_t err_length)
{
    const cow_array_t *a = &cow->arrays[array];
    _Atomic uint8_t *state = &a->state[c];
    uint8_t seen;
    while ((seen = atomic_load_explicit(state, memory_order_acquire)) == COW_COPYING)
        sched_yield(); /* an updater's copy, at its priority: short */
    if (seen != COW_ASIDE)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "chunk %zu of array %zu was no longer owed to the checkpoint", c,
                                 array);
    size_t begin;
    const size_t length = chunk_span(a, c, &begin);
    const size_t lo = begin > offset ? begin : (size_t)offset;
    const size_t hi = begin + length < end ? begin + length : (size_t)end;
    ember_copy(buf + (lo - offset), a->shadow + lo, hi - lo);
    return EMBER_OK;
}

ember_status_t table_cow_read(ember_shard_t *table, size_t array, uint64_t offset, void *buf,
                              size_t length, char *err, size_t err_length)
{
    table_cow_t *cow = table->cow;
    if (!table_cow_owing(table) || array >= cow->narrays || offset > cow->arrays[array].bytes ||
        length > cow->arrays[array].bytes - offset)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: bytes %llu..+%zu of array %zu are not owed to a "
                                 "checkpoint",
                                 table->spec.name, (unsigned long long)offset, length, array);
    if (length == 0)
        return EMBER_OK;
    cow_array_t *a = &cow->arrays[array];
    const uint64_t end = offset + length;
    /* Every byte from the live rows first; a chunk still owed after that
     * was not changed meanwhile (an updater claims it, then fences, then
     * writes): a seqlock's read, with no write of the writer's own. */
    SEQLOCK_READ_BEGIN();
    ember_copy(buf, a->data + offset, length);
    SEQLOCK_READ_END();
    atomic_thread_fence(memory_order_acquire);
    for (size_t c = offset / a->chunk_bytes; (uint64_t)c * a->chunk_bytes < end; c++)
        if (atomic_load_explicit(&a->state[c], memory_order_relaxed) != COW_OWED)
            EMBER_CHECK(read_aside(cow, array, c, offset, end, (char *)buf, err, err_length));
    /* The whole chunks read are the writer's: updaters copy them no more
     * (a chunk the read stops in is owed until the read of its rest). */
    const size_t taken = end == a->bytes ? a->bytes : end / a->chunk_bytes * a->chunk_bytes;
    if (taken > atomic_load_explicit(&a->done, memory_order_relaxed))
        atomic_store_explicit(&a->done, taken, memory_order_release);
    return EMBER_OK;
}

void table_cow_end(ember_shard_t *table, table_cow_stats_t *stats)
{
    table_cow_t *cow = table->cow;
    if (stats)
        *stats = (table_cow_stats_t){0};
    if (!cow)
        return;
    /* Nothing is owed any more, a write that ended early included.  An
     * updater that looked before may still copy a chunk into a shadow:
     * nobody reads it (its pages given back again at the next end). */
    for (size_t i = 0; i < cow->narrays; i++)
        atomic_store_explicit(&cow->arrays[i].done, cow->arrays[i].bytes, memory_order_release);
    atomic_store_explicit(&cow->owing, 0, memory_order_release);
    if (stats)
        *stats = (table_cow_stats_t){
                .chunks = atomic_load_explicit(&cow->chunks, memory_order_relaxed),
                .bytes = atomic_load_explicit(&cow->bytes, memory_order_relaxed)};
    for (size_t i = 0; i < cow->narrays; i++) {
        cow_array_t *a = &cow->arrays[i];
        /* Lazily: the next checkpoint's copies reuse the pages the kernel
         * did not need meanwhile, without a fault. */
#ifdef MADV_FREE
        if (a->shadow && madvise(a->shadow, a->bytes, MADV_FREE) == 0)
            continue;
#endif
        if (a->shadow)
            (void)madvise(a->shadow, a->bytes, MADV_DONTNEED);
    }
}

void table_cow_free(ember_shard_t *table)
{
    cow_destroy(table->cow);
    table->cow = NULL;
}
