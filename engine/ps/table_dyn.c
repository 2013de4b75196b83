/* engine/ps/table_dyn: a dynamic table's keys, slots, admission and eviction. */
#include "engine/ps/table_dyn.h"
#include "engine/ps/keymap.h"

#include "common/radix.h"
#include "common/workers.h"
#include "engine/ops/half.h"
#include "engine/ops/optimizer.h"

#include <ember/device.h>
#include <ember/log.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CAND_BIT   0x80000000u /* a map value: a candidate's index, not a slot */
#define NIL        UINT32_MAX
#define SLOTS_MAX  ((int64_t)0x7ffffffe)
#define TEMP_ROWS  ((int64_t)1 << 18)  /* scratch rows: one lookup's keys without a row, */
#define TEMP_BYTES ((size_t)256 << 20) /* ... and at most this many bytes of them */
#define SLOT_AHEAD 16                  /* slots prefetched ahead of a pass's key */
#define ROOM_BYTES ((size_t)4 << 30)   /* an unbudgeted shard's slots: at most 4 GiB of rows */

/* A key counted that holds no row. */
typedef struct {
    uint64_t key, count, seen;
    uint32_t prev, next; /* the candidates' list, least recently seen first */
    uint32_t queued;     /* in this boundary's admissions */
    uint32_t live;
} cand_t;

/* A slot's key and counters, side by side: a row's first use touches one
 * small page of these, not one page in each of eight arrays. */
typedef struct {
    uint64_t key, count, seen;
    double freq, score;
    uint32_t prev, next, heap_at; /* the LRU list's links; the LFU heap's place */
    uint32_t used;                /* it holds a row */
} slot_t;

struct table_dyn {
    ember_keymap_t *map; /* key -> slot, or CAND_BIT | candidate */
    /* Scratch rows drawn for keys without a row, kept until the step's
     * boundary (or the scratch is full): a key seen by several trainers,
     * and then admitted, is drawn once (the values are a function of the
     * key alone). */
    ember_keymap_t *drawn; /* key -> scratch row */
    int64_t ndrawn;
    int64_t capacity;  /* slots mapped (== table->local_rows) */
    int64_t temp_rows; /* scratch rows after them */
    size_t data_bytes;
    /* Per slot, mapped for capacity and faulted in as used. */
    slot_t *slot;
    uint32_t head, tail; /* every row, least recently seen first */
    uint32_t *heap;      /* LFU: rows by (score, seen, key), the least first */
    size_t nheap;
    uint32_t *free_slots; /* slots given back, taken last-in first */
    size_t nfree;
    uint32_t high; /* slots ever used: 0 .. high - 1 */
    size_t held;
    size_t budget; /* rows this shard may hold */
    /* Rows can be evicted (a budget, or evict_after): only then are the
     * LRU list and the LFU heap kept (a table that never evicts needs no
     * order, and keeping it was a cache miss a key a step). */
    int ordered;
    /* Candidates: grow-only, their free entries chained through next. */
    cand_t *cand;
    size_t cand_room, cand_high, ncand, cand_max;
    uint32_t cand_free, cand_head, cand_tail;
    /* Counters. */
    uint64_t admitted, evicted, dropped_grads, dropped_cands;
    uint64_t applies; /* async: gradients applied */
    double ln_decay;
    /* Boundary and lookup scratch. */
    ember_buffer_t admit, pairs, other, renumber, stash, grad_tmp, rows_tmp, found;
    ember_buffer_t draws; /* a lookup's keys to draw: (scratch row, key) pairs */
    size_t nadmit;        /* candidates in admit (uint32) */
};

/* ---- mapping --------------------------------------------------------------- */

/* Anonymous memory not faulted in until written, not counted against the
 * commit limit (most of it is never touched), in small pages: the slots'
 * records, of which a table of few rows keeps a few pages (huge pages
 * would fault in 2 MiB at each first use). */
static void *map_small(size_t bytes)
{
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The same with huge pages advised: the rows, read at random. */
static void *map_room(size_t bytes)
{
    void *p = map_small(bytes);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static void unmap_room(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes ? bytes : 1);
}

static size_t per_slot_bytes(void)
{
    return sizeof(slot_t) + 2 * sizeof(uint32_t); /* the slot, its heap and free entries */
}

/* ---- the lists --------------------------------------------------------------- */

static void lru_unlink(struct table_dyn *d, uint32_t s)
{
    if (d->slot[s].prev != NIL)
        d->slot[d->slot[s].prev].next = d->slot[s].next;
    else
        d->head = d->slot[s].next;
    if (d->slot[s].next != NIL)
        d->slot[d->slot[s].next].prev = d->slot[s].prev;
    else
        d->tail = d->slot[s].prev;
}

static void lru_append(struct table_dyn *d, uint32_t s)
{
    d->slot[s].prev = d->tail;
    d->slot[s].next = NIL;
    if (d->tail != NIL)
        d->slot[d->tail].next = s;
    else
        d->head = s;
    d->tail = s;
}

static void cand_unlink(struct table_dyn *d, uint32_t c)
{
    cand_t *e = &d->cand[c];
    if (e->prev != NIL)
        d->cand[e->prev].next = e->next;
    else
        d->cand_head = e->next;
    if (e->next != NIL)
        d->cand[e->next].prev = e->prev;
    else
        d->cand_tail = e->prev;
}

static void cand_append(struct table_dyn *d, uint32_t c)
{
    cand_t *e = &d->cand[c];
    e->prev = d->cand_tail;
    e->next = NIL;
    if (d->cand_tail != NIL)
        d->cand[d->cand_tail].next = c;
    else
        d->cand_head = c;
    d->cand_tail = c;
}

/* ---- the LFU heap ------------------------------------------------------------ */

/* Whether row a goes before row b: the lower score, then the less recent,
 * then the smaller key (a total order: the same victims for any layout). */
static int heap_before(const struct table_dyn *d, uint32_t a, uint32_t b)
{
    if (d->slot[a].score != d->slot[b].score)
        return d->slot[a].score < d->slot[b].score;
    if (d->slot[a].seen != d->slot[b].seen)
        return d->slot[a].seen < d->slot[b].seen;
    return d->slot[a].key < d->slot[b].key;
}

static void heap_put(struct table_dyn *d, size_t at, uint32_t s)
{
    d->heap[at] = s;
    d->slot[s].heap_at = (uint32_t)at;
}

static void heap_up(struct table_dyn *d, size_t at)
{
    uint32_t s = d->heap[at];
    while (at > 0 && heap_before(d, s, d->heap[(at - 1) / 2])) {
        heap_put(d, at, d->heap[(at - 1) / 2]);
        at = (at - 1) / 2;
    }
    heap_put(d, at, s);
}

static void heap_down(struct table_dyn *d, size_t at)
{
    uint32_t s = d->heap[at];
    for (;;) {
        size_t c = 2 * at + 1;
        if (c >= d->nheap)
            break;
        if (c + 1 < d->nheap && heap_before(d, d->heap[c + 1], d->heap[c]))
            c++;
        if (!heap_before(d, d->heap[c], s))
            break;
        heap_put(d, at, d->heap[c]);
        at = c;
    }
    heap_put(d, at, s);
}

static void heap_push(struct table_dyn *d, uint32_t s)
{
    d->heap[d->nheap] = s;
    heap_up(d, d->nheap++);
}

static void heap_remove(struct table_dyn *d, uint32_t s)
{
    size_t at = d->slot[s].heap_at;
    uint32_t last = d->heap[--d->nheap];
    if (at == d->nheap)
        return;
    heap_put(d, at, last);
    heap_up(d, at);
    heap_down(d, d->slot[last].heap_at);
}

/* ---- create ---------------------------------------------------------------- */

static ember_status_t dyn_refuse(char *err, size_t err_length, ember_status_t status,
                                 const char *table, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static ember_status_t dyn_refuse(char *err, size_t err_length, ember_status_t status,
                                 const char *table, const char *fmt, ...)
{
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return ember_status_text(err, err_length, status, "table %s: %s", table, what);
}

static ember_status_t check_dyn_spec(const ember_shard_t *table, char *err, size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    if (table->device)
        return dyn_refuse(err, err_length, EMBER_ERR_UNSUPPORTED, spec->name,
                          "a dynamic table's rows live in host memory (not on %s)",
                          ember_device_name(table->device));
    if (spec->admit_count == 0 || spec->evict_policy > 1 || spec->budget_rows < 0 ||
        spec->budget_rows > SLOTS_MAX || !(spec->lfu_decay > 0.0f && spec->lfu_decay <= 1.0f) ||
        spec->reserved2 != 0)
        return dyn_refuse(err, err_length, EMBER_ERR_INVALID_PARAM, spec->name,
                          "invalid dynamic settings (admit count %u, budget %lld rows, eviction "
                          "%u, LFU decay %g): admit >= 1, budget 0 .. %lld, LRU 0 or LFU 1, "
                          "decay in (0, 1]",
                          spec->admit_count, (long long)spec->budget_rows, spec->evict_policy,
                          (double)spec->lfu_decay, (long long)SLOTS_MAX);
    return EMBER_OK;
}

static int map_slots(struct table_dyn *d, int64_t capacity)
{
    const size_t n = (size_t)capacity;
    d->slot = map_small(n * sizeof(slot_t));
    d->heap = map_small(n * 4);
    d->free_slots = map_small(n * 4);
    return d->slot && d->heap && d->free_slots;
}

ember_status_t table_dyn_create(ember_shard_t *table, char *err, size_t err_length)
{
    ember_msg_table_create_t *spec = &table->spec;
    EMBER_CHECK(check_dyn_spec(table, err, err_length));
    struct table_dyn *d = calloc(1, sizeof(*d));
    if (!d)
        return EMBER_ERR_NO_MEMORY;
    table->dyn = d;
    int64_t room = (int64_t)(ROOM_BYTES / table->row_bytes);
    d->capacity = spec->budget_rows > 0 ? spec->budget_rows : (room < SLOTS_MAX ? room : SLOTS_MAX);
    if (d->capacity < 1)
        d->capacity = 1;
    d->budget = (size_t)d->capacity;
    d->ordered = spec->budget_rows > 0 || spec->evict_after > 0;
    d->cand_max = spec->budget_rows > 0 ? (size_t)spec->budget_rows : SIZE_MAX;
    d->head = d->tail = d->cand_head = d->cand_tail = d->cand_free = NIL;
    d->ln_decay = log((double)spec->lfu_decay);
    table->local_rows = d->capacity;
    d->temp_rows = (int64_t)(TEMP_BYTES / table->row_bytes);
    d->temp_rows = d->temp_rows < 1 ? 1 : d->temp_rows > TEMP_ROWS ? TEMP_ROWS : d->temp_rows;
    d->data_bytes = (size_t)(d->capacity + d->temp_rows) * table->row_bytes;
    table->data = map_room(d->data_bytes);
    if (!table->data || !map_slots(d, d->capacity) ||
        ember_keymap_create(0, 0, &d->map) != EMBER_OK ||
        ember_keymap_create(0, 0, &d->drawn) != EMBER_OK)
        return dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, spec->name,
                          "cannot map %lld slots of %zu bytes", (long long)d->capacity,
                          table->row_bytes);
    if (ember_opt_create_reserved(&spec->optimizer, (size_t)d->capacity, spec->dim,
                                  &table->optimizer) != EMBER_OK)
        return dyn_refuse(err, err_length, EMBER_ERR_INVALID_PARAM, spec->name,
                          "invalid optimizer settings");
    return EMBER_OK;
}

void table_dyn_destroy(ember_shard_t *table)
{
    struct table_dyn *d = table->dyn;
    if (!d)
        return;
    const size_t n = (size_t)d->capacity;
    unmap_room(table->data, d->data_bytes);
    table->data = NULL;
    unmap_room(d->slot, n * sizeof(slot_t));
    unmap_room(d->heap, n * 4);
    unmap_room(d->free_slots, n * 4);
    ember_keymap_destroy(d->map);
    ember_keymap_destroy(d->drawn);
    free(d->cand);
    ember_buffer_t *bufs[] = {&d->admit,    &d->pairs,    &d->other, &d->renumber, &d->stash,
                              &d->grad_tmp, &d->rows_tmp, &d->found, &d->draws};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        ember_buffer_free(bufs[i]);
    free(d);
    table->dyn = NULL;
}

/* ---- rows ------------------------------------------------------------------- */

/* Row @at (a slot or a scratch row) set to @key's initial values (zeros
 * for a table awaiting its loads), as stored. */
static void row_init(ember_shard_t *table, int64_t at, uint64_t key)
{
    const ember_msg_table_create_t *spec = &table->spec;
    void *stored = table_row(table, at);
    if (spec->init == EMBER_INIT_LOAD) {
        memset(stored, 0, table->row_bytes);
        return;
    }
    if (!table_half(table)) {
        table_init_values(spec, key, stored);
        return;
    }
    float values[256];
    float *v = spec->dim <= 256 ? values : malloc(spec->dim * sizeof(float));
    if (!v) { /* out of memory: zeros rather than garbage */
        memset(stored, 0, table->row_bytes);
        return;
    }
    table_init_values(spec, key, v);
    ember_float_to_half_n(v, stored, spec->dim);
    if (v != values)
        free(v);
}

/* Row @at as fp32 into @out. */
static void row_read(const ember_shard_t *table, int64_t at, float *out)
{
    const void *stored = table_row(table, at);
    if (table_half(table))
        ember_half_to_float_n(stored, out, table->spec.dim);
    else
        memcpy(out, stored, table->spec.dim * sizeof(float));
}

static void row_write(ember_shard_t *table, int64_t at, const float *values)
{
    void *stored = table_row(table, at);
    if (table_half(table))
        ember_float_to_half_n(values, stored, table->spec.dim);
    else
        memcpy(stored, values, table->spec.dim * sizeof(float));
}

/* Whether row @id (a lookup-time row: a slot, or a scratch row) is the
 * slot that holds @key now: then no find is needed (a slot evicted since,
 * or given to another key, fails). */
static inline int slot_holds(const struct table_dyn *d, int64_t id, uint64_t key)
{
    if (!d->ordered) /* nothing is ever evicted: a slot keeps its key */
        return id < d->capacity;
    return id < d->capacity && d->slot[id].used && d->slot[id].key == key;
}

/* The slot of lookup-time row @id brought into cache ahead of its use
 * (its struct is a random access into the table's slots). */
static inline void slot_prefetch(const struct table_dyn *d, int64_t id)
{
    if (id < d->capacity)
        __builtin_prefetch(&d->slot[id], 1, 3);
}

/* A free slot, or NIL when the budget is held. */
static uint32_t slot_take(struct table_dyn *d)
{
    if (d->held >= d->budget)
        return NIL;
    if (d->nfree > 0)
        return d->free_slots[--d->nfree];
    return d->high < (uint64_t)d->capacity ? d->high++ : NIL;
}

static double lfu_score(const struct table_dyn *d, double freq, uint64_t step)
{
    return d->ln_decay == 0.0 ? freq : log(freq) - (double)step * d->ln_decay;
}

/* @key into slot @s with its counters, its row at its initial values and
 * fresh optimizer state; the map's entry made or turned from a candidate. */
static ember_status_t row_admit(ember_shard_t *table, uint32_t s, uint64_t key, uint64_t count,
                                uint64_t seen, double freq)
{
    struct table_dyn *d = table->dyn;
    if (!ember_keymap_set(d->map, key, s))
        EMBER_CHECK(ember_keymap_insert(d->map, key, s));
    /* A table that never evicts keeps no slot record (the map is its only
     * per-key memory: its keys are listed from the map). */
    if (d->ordered) {
        d->slot[s].key = key;
        d->slot[s].count = count;
        d->slot[s].seen = seen;
        d->slot[s].freq = freq;
        d->slot[s].score = lfu_score(d, freq, seen);
        d->slot[s].used = 1;
        lru_append(d, s);
        if (table->spec.evict_policy == 1)
            heap_push(d, s);
    }
    const uint32_t drawn = ember_keymap_find(d->drawn, key);
    if (drawn != NIL)
        memcpy(table_row(table, s), table_row(table, d->capacity + drawn), table->row_bytes);
    else
        row_init(table, s, key);
    const int64_t slot = s;
    ember_opt_reset_rows(table->optimizer, &slot, 1);
    table_rows_changed(table, &slot, 1); /* a key given a slot: no copy of it stands */
    d->held++;
    return EMBER_OK;
}

static void row_evict(ember_shard_t *table, uint32_t s)
{
    struct table_dyn *d = table->dyn;
    ember_keymap_remove(d->map, d->slot[s].key);
    lru_unlink(d, s);
    if (table->spec.evict_policy == 1)
        heap_remove(d, s);
    d->slot[s].used = 0;
    d->free_slots[d->nfree++] = s;
    d->held--;
    d->evicted++;
}

/* A row's counters after @hits more occurrences in step @step.  Counts and
 * recency only order evictions: a table that never evicts keeps none (a
 * random access a key a step saved). */
static void row_touch(ember_shard_t *table, uint32_t s, uint64_t hits, uint64_t step)
{
    struct table_dyn *d = table->dyn;
    if (!d->ordered)
        return;
    slot_t *r = &d->slot[s];
    r->count += hits;
    const int lfu = table->spec.evict_policy == 1;
    if (lfu) {
        const double decay = d->ln_decay == 0.0 ? 1.0 : exp((double)(step - r->seen) * d->ln_decay);
        r->freq = r->freq * decay + (double)hits;
        r->score = lfu_score(d, r->freq, step);
    }
    r->seen = step;
    if (lfu) { /* its score rose and it is the most recent: it sinks */
        heap_down(d, r->heap_at);
        heap_up(d, r->heap_at);
    }
    lru_unlink(d, s);
    lru_append(d, s);
}

/* ---- candidates -------------------------------------------------------------- */

/* Candidate @c's entry freed (its key's map entry left to the caller). */
static void cand_release(struct table_dyn *d, uint32_t c)
{
    cand_t *e = &d->cand[c];
    cand_unlink(d, c);
    e->live = 0;
    e->next = d->cand_free;
    d->cand_free = c;
    d->ncand--;
}

/* Candidate @c forgotten, key and all. */
static void cand_drop(struct table_dyn *d, uint32_t c)
{
    ember_keymap_remove(d->map, d->cand[c].key);
    cand_release(d, c);
}

/* A new candidate for @key, dropping the least recently seen one (not
 * seen in @step) when they are at their bound; NIL when none can be. */
static uint32_t cand_new(struct table_dyn *d, uint64_t key, uint64_t step)
{
    if (d->ncand >= d->cand_max) {
        if (d->cand_head == NIL || d->cand[d->cand_head].seen == step)
            return NIL;
        cand_drop(d, d->cand_head);
        d->dropped_cands++;
    }
    uint32_t c = d->cand_free;
    if (c != NIL) {
        d->cand_free = d->cand[c].next;
    } else {
        if (d->cand_high == d->cand_room) {
            size_t room = d->cand_room ? 2 * d->cand_room : 1024;
            cand_t *grown = room < CAND_BIT ? realloc(d->cand, room * sizeof(cand_t)) : NULL;
            if (!grown)
                return NIL;
            d->cand = grown;
            d->cand_room = room;
        }
        c = (uint32_t)d->cand_high++;
    }
    if (ember_keymap_insert(d->map, key, CAND_BIT | c) != EMBER_OK) {
        d->cand[c].next = d->cand_free;
        d->cand_free = c;
        return NIL;
    }
    d->cand[c] = (cand_t){.key = key, .seen = step, .live = 1};
    cand_append(d, c);
    d->ncand++;
    return c;
}

/* ---- lookups --------------------------------------------------------------- */

/* Drawing new keys' initial values (N(0,1) is a log and a sine a pair of
 * values: most of a lookup of new keys) split over the PS's threads. */
typedef struct {
    ember_shard_t *table;
    const ember_radix_pair_t *draws; /* key: the scratch row; value: the key */
    size_t n;
    unsigned tasks;
} draw_job_t;

static void draw_task(void *arg, unsigned k)
{
    const draw_job_t *job = arg;
    size_t begin, end;
    ember_split_range(job->n, job->tasks, k, &begin, &end);
    for (size_t i = begin; i < end; i++)
        row_init(job->table, (int64_t)job->draws[i].key, job->draws[i].value);
}

/* A lookup's finds split over the PS's threads (each a batch of its own:
 * the map is only read). */
typedef struct {
    const ember_keymap_t *map;
    const uint64_t *keys;
    uint32_t *found;
    size_t n;
    unsigned tasks;
} find_job_t;

static void find_task(void *arg, unsigned k)
{
    const find_job_t *job = arg;
    size_t begin, end;
    ember_split_range(job->n, job->tasks, k, &begin, &end);
    ember_keymap_find_many(job->map, job->keys + begin, end - begin, job->found + begin);
}

static void find_keys(ember_shard_t *table, const uint64_t *keys, size_t n, uint32_t *found)
{
    find_job_t job = {.map = table->dyn->map, .keys = keys, .found = found, .n = n};
    job.tasks = ember_workers_tasks(table->workers, n, 1024);
    ember_workers_run(table->workers, job.tasks, find_task, &job);
}

static void draw_rows(ember_shard_t *table, const ember_radix_pair_t *draws, size_t n)
{
    draw_job_t job = {.table = table, .draws = draws, .n = n};
    job.tasks = ember_workers_tasks(table->workers, n, 64);
    ember_workers_run(table->workers, job.tasks, draw_task, &job);
}

ember_status_t table_dyn_take_keys(ember_shard_t *table, context_t *ctx,
                                   const ember_wire_lookup_view_t *lookup, char *err,
                                   size_t err_length)
{
    struct table_dyn *d = table->dyn;
    const ember_msg_table_create_t *spec = &table->spec;
    const size_t unique = lookup->head.unique;
    if (!ember_buffer_reserve(&ctx->keys, unique * 8 + 8) ||
        !ember_buffer_reserve(&ctx->hits, unique * 4 + 4) ||
        !ember_buffer_reserve(&ctx->key_of, unique * 8 + 8) ||
        !ember_buffer_reserve(&ctx->wire_ids, unique * 4 + 4))
        return dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, spec->name, "out of memory");
    uint64_t *keys = ctx->keys.data;
    int64_t *rows = ctx->unique.data;
    for (size_t u = 0; u < unique; u++) {
        const uint64_t key = (uint64_t)ember_wire_load_i64(lookup->rows, u);
        if (u > 0 && key <= keys[u - 1])
            return dyn_refuse(err, err_length, EMBER_ERR_INVALID_PARAM, spec->name,
                              "trainer %u step %llu: the keys of a lookup must be sorted and "
                              "distinct (key %llu after %llu)",
                              lookup->head.trainer, (unsigned long long)lookup->head.step,
                              (unsigned long long)key, (unsigned long long)keys[u - 1]);
        const uint32_t shard = ember_wire_key_shard(key, spec->num_shards);
        if (shard != spec->shard)
            return dyn_refuse(err, err_length, EMBER_ERR_INVALID_PARAM, spec->name,
                              "trainer %u step %llu: key %llu belongs to shard %u, not %u",
                              lookup->head.trainer, (unsigned long long)lookup->head.step,
                              (unsigned long long)key, shard, spec->shard);
        keys[u] = key;
    }
    /* The finds batched: each bucket prefetched a few keys ahead. */
    if (!ember_buffer_reserve(&d->found, unique * 4 + 4))
        return dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, spec->name, "out of memory");
    const uint32_t *found = d->found.data;
    find_keys(table, keys, unique, d->found.data);
    size_t without = 0;
    for (size_t u = 0; u < unique; u++)
        without += found[u] == NIL || (found[u] & CAND_BIT);
    if ((int64_t)without > d->temp_rows)
        return dyn_refuse(err, err_length, EMBER_ERR_INVALID_PARAM, spec->name,
                          "trainer %u step %llu: %zu keys without a row in one lookup, at most "
                          "%lld",
                          lookup->head.trainer, (unsigned long long)lookup->head.step, without,
                          (long long)d->temp_rows);
    if (d->ndrawn + (int64_t)without > d->temp_rows) { /* the scratch starts over */
        ember_keymap_clear(d->drawn);
        d->ndrawn = 0;
    }
    if (!ember_buffer_reserve(&d->draws, without * sizeof(ember_radix_pair_t) + 16))
        return dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, spec->name, "out of memory");
    ember_radix_pair_t *draws = d->draws.data;
    size_t ndraws = 0;
    for (size_t u = 0; u < unique; u++) {
        const uint32_t v = found[u];
        if (v != NIL && !(v & CAND_BIT)) {
            rows[u] = v;
            continue;
        }
        uint32_t drawn = ember_keymap_find(d->drawn, keys[u]);
        if (drawn == NIL) {
            drawn = (uint32_t)d->ndrawn;
            if (ember_keymap_insert(d->drawn, keys[u], drawn) != EMBER_OK)
                return dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, spec->name,
                                  "out of memory");
            d->ndrawn++;
            draws[ndraws++] =
                    (ember_radix_pair_t){.key = (uint64_t)(d->capacity + drawn), .value = keys[u]};
        }
        rows[u] = d->capacity + drawn;
    }
    draw_rows(table, draws, ndraws);
    return EMBER_OK;
}

ember_status_t table_dyn_order(ember_shard_t *table, context_t *ctx)
{
    struct table_dyn *d = table->dyn;
    const size_t unique = ctx->nunique, n = ctx->n;
    uint32_t *hits = ctx->hits.data, *inverse = ctx->inverse.data;
    memset(hits, 0, unique * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++)
        hits[inverse[i]]++;
    if (!ember_buffer_reserve(&d->pairs, unique * sizeof(ember_radix_pair_t) + 16) ||
        !ember_buffer_reserve(&d->other, unique * sizeof(ember_radix_pair_t) + 16) ||
        !ember_buffer_reserve(&d->renumber, unique * 4 + 4))
        return EMBER_ERR_NO_MEMORY;
    int64_t *rows = ctx->unique.data;
    const uint64_t *keys = ctx->keys.data;
    uint64_t *key_of = ctx->key_of.data;
    uint32_t *wire_ids = ctx->wire_ids.data;
    /* Rows already in the keys' order (slots given in key order, as a
     * table written by key has them): nothing to renumber. */
    size_t rising = 1;
    while (rising < unique && rows[rising - 1] < rows[rising])
        rising++;
    if (rising >= unique) {
        for (size_t u = 0; u < unique; u++)
            wire_ids[u] = (uint32_t)rows[u];
        memcpy(key_of, keys, unique * sizeof(uint64_t));
        return EMBER_OK;
    }
    ember_radix_pair_t *pairs = d->pairs.data;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t u = 0; u < unique; u++) {
        wire_ids[u] = (uint32_t)rows[u];
        pairs[u] = (ember_radix_pair_t){.key = (uint64_t)rows[u], .value = u};
        lo = pairs[u].key < lo ? pairs[u].key : lo;
        hi = pairs[u].key > hi ? pairs[u].key : hi;
    }
    const ember_radix_pair_t *sorted = ember_radix_sort(pairs, d->other.data, unique, lo, hi);
    uint32_t *renumber = d->renumber.data;
    for (size_t j = 0; j < unique; j++) {
        rows[j] = (int64_t)sorted[j].key;
        key_of[j] = keys[sorted[j].value];
        renumber[sorted[j].value] = (uint32_t)j;
    }
    for (size_t i = 0; i < n; i++)
        inverse[i] = renumber[inverse[i]];
    return EMBER_OK;
}

ember_status_t table_dyn_pending(ember_shard_t *table, const context_t *ctx, pending_t *pending)
{
    (void)table;
    const size_t unique = ctx->nunique, nrows = pending->nrows;
    if (!ember_buffer_reserve(&pending->keys, nrows * 8 + 8) ||
        !ember_buffer_reserve(&pending->seen_keys, unique * 8 + 8) ||
        !ember_buffer_reserve(&pending->seen_hits, unique * 4 + 4) ||
        !ember_buffer_reserve(&pending->seen_ids, unique * 4 + 4))
        return EMBER_ERR_NO_MEMORY;
    const int64_t *rows = pending->rows.data, *ids = ctx->unique.data;
    const uint64_t *key_of = ctx->key_of.data;
    uint64_t *keys = pending->keys.data;
    /* Both sorted by lookup-time row: one walk. */
    for (size_t i = 0, j = 0; i < nrows; i++) {
        while (j < unique && ids[j] < rows[i])
            j++;
        keys[i] = j < unique ? key_of[j] : 0;
    }
    memcpy(pending->seen_keys.data, ctx->keys.data, unique * 8);
    memcpy(pending->seen_hits.data, ctx->hits.data, unique * 4);
    memcpy(pending->seen_ids.data, ctx->wire_ids.data, unique * 4);
    pending->nseen = unique;
    return EMBER_OK;
}

/* ---- the step boundary ----------------------------------------------------------- */

/* Count one key seen @hits times in @step (@v: what the map holds for it);
 * queue it for a row once it has been seen admit_count times. */
static ember_status_t count_key(ember_shard_t *table, uint64_t key, uint32_t hits, uint64_t step,
                                uint32_t v)
{
    struct table_dyn *d = table->dyn;
    if (v != NIL && !(v & CAND_BIT)) {
        row_touch(table, v, hits, step);
        return EMBER_OK;
    }
    uint32_t c = v != NIL ? v & ~CAND_BIT : cand_new(d, key, step);
    if (c == NIL)
        return EMBER_OK; /* no room to count it: it is not seen */
    cand_t *e = &d->cand[c];
    e->count += hits;
    e->seen = step;
    cand_unlink(d, c);
    cand_append(d, c);
    if (e->count >= table->spec.admit_count && !e->queued) {
        if (!ember_buffer_reserve(&d->admit, (d->nadmit + 1) * 4 + 4))
            return EMBER_ERR_NO_MEMORY;
        ((uint32_t *)d->admit.data)[d->nadmit++] = c;
        e->queued = 1;
    }
    return EMBER_OK;
}

/* Room for @need more rows: rows not seen in @step evicted, the least
 * first by the table's policy; returns the rows that fit. */
static size_t make_room(ember_shard_t *table, size_t need, uint64_t step)
{
    struct table_dyn *d = table->dyn;
    size_t free_rows = d->budget - d->held;
    if (need <= free_rows || !d->ordered)
        return need <= free_rows ? need : free_rows;
    if (table->spec.evict_policy == 0) {
        while (free_rows < need && d->head != NIL && d->slot[d->head].seen != step) {
            row_evict(table, d->head);
            free_rows++;
        }
        return free_rows < need ? free_rows : need;
    }
    /* LFU: rows seen in this step are set aside and put back. */
    size_t stashed = 0;
    if (!ember_buffer_reserve(&d->stash, (d->nheap + 1) * 4))
        return free_rows;
    uint32_t *stash = d->stash.data;
    while (free_rows < need && d->nheap > 0) {
        uint32_t s = d->heap[0];
        if (d->slot[s].seen == step) {
            heap_remove(d, s);
            stash[stashed++] = s;
            continue;
        }
        row_evict(table, s);
        free_rows++;
    }
    for (size_t i = 0; i < stashed; i++)
        heap_push(d, stash[i]);
    return free_rows < need ? free_rows : need;
}

/* The queued candidates given rows, in the order they were queued, as
 * many as fit. */
static ember_status_t admit_queued(ember_shard_t *table, uint64_t step)
{
    struct table_dyn *d = table->dyn;
    const uint32_t *queue = d->admit.data;
    const size_t fit = make_room(table, d->nadmit, step);
    ember_status_t status = EMBER_OK;
    for (size_t i = 0; i < d->nadmit; i++) {
        cand_t *e = &d->cand[queue[i]];
        e->queued = 0;
        if (i >= fit || status != EMBER_OK)
            continue;
        const uint32_t s = slot_take(d);
        if (s == NIL)
            continue;
        const uint64_t key = e->key, count = e->count, seen = e->seen;
        cand_release(d, queue[i]); /* its map entry becomes the row's */
        status = row_admit(table, s, key, count, seen, (double)count);
        if (status == EMBER_OK)
            d->admitted++;
    }
    d->nadmit = 0;
    return status;
}

/* @p's rows made the slots their keys hold now, sorted; the rows of keys
 * without one dropped (and counted). */
static ember_status_t rows_to_slots(ember_shard_t *table, pending_t *p)
{
    struct table_dyn *d = table->dyn;
    const size_t nrows = p->nrows, dim = table->spec.dim;
    const uint64_t *keys = p->keys.data;
    const int64_t *ids = p->rows.data;
    /* Every row still its key's slot (the usual step): nothing moves. */
    size_t same = 0;
    for (size_t i = 0; i < nrows && i < SLOT_AHEAD && d->ordered; i++)
        slot_prefetch(d, ids[i]);
    while (same < nrows && slot_holds(d, ids[same], keys[same])) {
        if (same + SLOT_AHEAD < nrows && d->ordered)
            slot_prefetch(d, ids[same + SLOT_AHEAD]);
        same++;
    }
    if (same == nrows)
        return EMBER_OK;
    if (!ember_buffer_reserve(&d->pairs, nrows * sizeof(ember_radix_pair_t) + 16) ||
        !ember_buffer_reserve(&d->other, nrows * sizeof(ember_radix_pair_t) + 16) ||
        !ember_buffer_reserve(&d->rows_tmp, nrows * 8 + 8) ||
        !ember_buffer_reserve(&d->grad_tmp, nrows * dim * sizeof(float) + 4))
        return EMBER_ERR_NO_MEMORY;
    ember_radix_pair_t *pairs = d->pairs.data;
    size_t m = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < nrows; i++) {
        const uint32_t v = slot_holds(d, ids[i], keys[i]) ? (uint32_t)ids[i]
                                                          : ember_keymap_find(d->map, keys[i]);
        if (v == NIL || (v & CAND_BIT)) {
            d->dropped_grads++;
            continue;
        }
        pairs[m++] = (ember_radix_pair_t){.key = v, .value = i};
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    const ember_radix_pair_t *sorted = ember_radix_sort(pairs, d->other.data, m, lo, hi);
    int64_t *rows = d->rows_tmp.data;
    float *grad = d->grad_tmp.data;
    const float *from = p->grad.data;
    for (size_t j = 0; j < m; j++) {
        rows[j] = (int64_t)sorted[j].key;
        memcpy(grad + j * dim, from + sorted[j].value * dim, dim * sizeof(float));
    }
    ember_buffer_t swap = p->rows;
    p->rows = d->rows_tmp;
    d->rows_tmp = swap;
    swap = p->grad;
    p->grad = d->grad_tmp;
    d->grad_tmp = swap;
    p->nrows = m;
    return EMBER_OK;
}

ember_status_t table_dyn_boundary(ember_shard_t *table, pending_t *const *grads, uint32_t count,
                                  uint64_t step)
{
    struct table_dyn *d = table->dyn;
    d->nadmit = 0;
    for (uint32_t t = 0; t < count; t++) {
        const pending_t *p = grads[t];
        const uint64_t *keys = p->seen_keys.data;
        const uint32_t *hits = p->seen_hits.data, *ids = p->seen_ids.data;
        for (size_t u = 0; u < p->nseen && u < SLOT_AHEAD && d->ordered; u++)
            slot_prefetch(d, ids[u]);
        for (size_t u = 0; u < p->nseen; u++) {
            if (u + SLOT_AHEAD < p->nseen && d->ordered)
                slot_prefetch(d, ids[u + SLOT_AHEAD]);
            if (slot_holds(d, ids[u], keys[u])) /* its row at lookup time still */
                row_touch(table, (uint32_t)ids[u], hits[u], step);
            else
                EMBER_CHECK(count_key(table, keys[u], hits[u], step,
                                      ember_keymap_find(d->map, keys[u])));
        }
    }
    EMBER_CHECK(admit_queued(table, step));
    for (uint32_t t = 0; t < count; t++)
        EMBER_CHECK(rows_to_slots(table, grads[t]));
    /* The step's draws have served its lookups and admissions: the scratch
     * starts over, so that it holds at most a step's new keys (memory
     * flat however many keys stream past). */
    if (d->ndrawn > 0) {
        ember_keymap_clear(d->drawn);
        d->ndrawn = 0;
    }
    return EMBER_OK;
}

int64_t table_dyn_rows_mapped(const ember_shard_t *table)
{
    return table->dyn->capacity + table->dyn->temp_rows;
}

void table_dyn_reset_state(ember_shard_t *table, ember_opt_t *opt)
{
    for (int64_t s = 0; s < (int64_t)table->dyn->high; s++)
        ember_opt_reset_rows(opt, &s, 1);
}

size_t table_dyn_scratch_bytes(const ember_shard_t *table)
{
    const struct table_dyn *d = table->dyn;
    return d->admit.capacity + d->pairs.capacity + d->other.capacity + d->renumber.capacity +
           d->stash.capacity + d->grad_tmp.capacity + d->rows_tmp.capacity + d->found.capacity +
           d->draws.capacity;
}

size_t table_dyn_optimizer_bytes(const ember_shard_t *table)
{
    return (size_t)table->dyn->high * ember_opt_row_state_bytes(table->optimizer);
}

uint64_t table_dyn_next_apply(ember_shard_t *table)
{
    return ++table->dyn->applies;
}

void table_dyn_expire(ember_shard_t *table, uint64_t step)
{
    struct table_dyn *d = table->dyn;
    const uint64_t after = table->spec.evict_after;
    if (after == 0)
        return;
    while (d->head != NIL && step >= d->slot[d->head].seen && step - d->slot[d->head].seen >= after)
        row_evict(table, d->head);
    while (d->cand_head != NIL && step >= d->cand[d->cand_head].seen &&
           step - d->cand[d->cand_head].seen >= after) {
        cand_drop(d, d->cand_head);
        d->dropped_cands++;
    }
}

/* ---- counters and reads ------------------------------------------------------- */

size_t table_dyn_bytes(const ember_shard_t *table)
{
    const struct table_dyn *d = table->dyn;
    ember_keymap_stats_t ms;
    ember_keymap_stats(d->map, &ms);
    const size_t per_row = table->row_bytes + ember_opt_row_state_bytes(table->optimizer) +
                           (d->ordered ? per_slot_bytes() : 0);
    return (size_t)d->high * per_row + ms.bytes + d->cand_room * sizeof(cand_t);
}

void table_dyn_stats(const ember_shard_t *table, table_dyn_stats_t *stats)
{
    const struct table_dyn *d = table->dyn;
    ember_keymap_stats_t ms;
    ember_keymap_stats(d->map, &ms);
    *stats = (table_dyn_stats_t){.rows = d->held,
                                 .candidates = d->ncand,
                                 .admitted = d->admitted,
                                 .evicted = d->evicted,
                                 .dropped_grads = d->dropped_grads,
                                 .dropped_candidates = d->dropped_cands,
                                 .capacity = (uint64_t)d->capacity,
                                 .bytes = table_dyn_bytes(table),
                                 .map_bytes = ms.bytes,
                                 .load_factor = ms.load_factor,
                                 .mean_probe = ms.mean_probe,
                                 .max_probe = ms.max_probe};
}

void table_dyn_read_keys(const ember_shard_t *table, const uint64_t *keys, size_t n, float *out,
                         uint8_t *found)
{
    const struct table_dyn *d = table->dyn;
    const ember_msg_table_create_t *spec = &table->spec;
    for (size_t i = 0; i < n; i++) {
        const uint32_t v = ember_keymap_find(d->map, keys[i]);
        const int held = v != NIL && !(v & CAND_BIT);
        float *row = out + i * spec->dim;
        if (held)
            row_read(table, v, row);
        else if (spec->init == EMBER_INIT_LOAD)
            memset(row, 0, spec->dim * sizeof(float));
        else if (table_half(table)) { /* the values a row would be stored with */
            table_init_values(spec, keys[i], row);
            for (size_t c = 0; c < spec->dim; c++)
                row[c] = ember_half_to_float(ember_float_to_half(row[c]));
        } else
            table_init_values(spec, keys[i], row);
        if (found)
            found[i] = (uint8_t)held;
    }
}

ember_status_t table_dyn_write_keys(ember_shard_t *table, const uint64_t *keys, size_t n,
                                    const float *rows, char *err, size_t err_length)
{
    struct table_dyn *d = table->dyn;
    const ember_msg_table_create_t *spec = &table->spec;
    size_t fresh = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t v = ember_keymap_find(d->map, keys[i]);
        fresh += ember_wire_key_shard(keys[i], spec->num_shards) == spec->shard &&
                 (v == NIL || (v & CAND_BIT));
    }
    if (fresh > d->budget - d->held)
        return dyn_refuse(err, err_length, EMBER_ERR_OUT_OF_RANGE, spec->name,
                          "%zu new keys do not fit: %zu of %zu rows held", fresh, d->held,
                          d->budget);
    for (size_t i = 0; i < n; i++) {
        if (ember_wire_key_shard(keys[i], spec->num_shards) != spec->shard)
            continue;
        uint32_t v = ember_keymap_find(d->map, keys[i]);
        if (v == NIL || (v & CAND_BIT)) {
            uint64_t count = 0;
            if (v != NIL) {
                count = d->cand[v & ~CAND_BIT].count;
                cand_drop(d, v & ~CAND_BIT);
            }
            const uint32_t s = slot_take(d);
            if (s == NIL)
                return EMBER_ERR_OUT_OF_RANGE; /* counted above: never here */
            const uint64_t now =
                    ember_shard_is_sync(table) ? ember_shard_next_step(table) : d->applies;
            EMBER_CHECK(row_admit(table, s, keys[i], count, now, (double)count));
            v = s;
        }
        row_write(table, v, rows + i * spec->dim);
    }
    return EMBER_OK;
}

/* ---- checkpoints ----------------------------------------------------------------- */

size_t table_dyn_rows_held(const ember_shard_t *table)
{
    return table->dyn->held;
}

size_t table_dyn_candidates_held(const ember_shard_t *table)
{
    return table->dyn->ncand;
}

static int entry_key_cmp(const void *a, const void *b)
{
    const uint64_t x = ((const table_dyn_entry_t *)a)->key, y = ((const table_dyn_entry_t *)b)->key;
    return (x > y) - (x < y);
}

void table_dyn_entries(const ember_shard_t *table, table_dyn_entry_t *out)
{
    const struct table_dyn *d = table->dyn;
    size_t k = 0;
    if (!d->ordered) { /* nothing is ever evicted: the map's rows by key */
        size_t cursor = 0;
        uint64_t key;
        uint32_t v;
        while (ember_keymap_next(d->map, &cursor, &key, &v))
            if (!(v & CAND_BIT))
                out[k++] = (table_dyn_entry_t){.key = key, .slot = v};
        qsort(out, k, sizeof(*out), entry_key_cmp);
    }
    for (uint32_t s = d->ordered ? d->head : NIL; s != NIL; s = d->slot[s].next)
        out[k++] = (table_dyn_entry_t){.key = d->slot[s].key,
                                       .count = d->slot[s].count,
                                       .seen = d->slot[s].seen,
                                       .freq = d->slot[s].freq,
                                       .slot = s};
    for (uint32_t c = d->cand_head; c != NIL; c = d->cand[c].next)
        out[k++] = (table_dyn_entry_t){.key = d->cand[c].key,
                                       .count = d->cand[c].count,
                                       .seen = d->cand[c].seen,
                                       .freq = 0.0,
                                       .slot = -1};
}

ember_status_t table_dyn_restore(ember_shard_t *table, const table_dyn_entry_t *entries, size_t n,
                                 const void *values, const void *const *state, char *err,
                                 size_t err_length)
{
    struct table_dyn *d = table->dyn;
    const ember_msg_table_create_t *spec = &table->spec;
    ember_opt_state_t arrays[EMBER_OPT_STATE_MAX];
    const size_t narrays = ember_opt_state_arrays(table->optimizer, arrays);
    size_t rows = 0;
    for (size_t i = 0; i < n; i++)
        rows += entries[i].slot >= 0 &&
                ember_wire_key_shard(entries[i].key, spec->num_shards) == spec->shard;
    if (rows > d->budget - d->held)
        return dyn_refuse(err, err_length, EMBER_ERR_OUT_OF_RANGE, spec->name,
                          "the checkpoint holds %zu rows of this shard, its budget is %zu", rows,
                          d->budget);
    for (size_t i = 0; i < n; i++) {
        const table_dyn_entry_t *e = &entries[i];
        if (ember_wire_key_shard(e->key, spec->num_shards) != spec->shard)
            continue;
        if (e->slot < 0) {
            const uint32_t c = cand_new(d, e->key, e->seen);
            if (c == NIL)
                return dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, spec->name,
                                  "no room for candidate key %llu", (unsigned long long)e->key);
            d->cand[c].count = e->count;
            continue;
        }
        const uint32_t s = slot_take(d);
        if (s == NIL)
            return EMBER_ERR_OUT_OF_RANGE; /* counted above */
        EMBER_CHECK(row_admit(table, s, e->key, e->count, e->seen, e->freq));
        memcpy(table_row(table, s), (const char *)values + i * table->row_bytes, table->row_bytes);
        for (size_t a = 0; a < narrays; a++) {
            const size_t bytes = arrays[a].per_row * ember_dtype_size(arrays[a].dtype);
            memcpy((char *)arrays[a].data + (size_t)s * bytes, (const char *)state[a] + i * bytes,
                   bytes);
        }
    }
    return EMBER_OK;
}

void table_dyn_set_counters(ember_shard_t *table, uint64_t admitted, uint64_t evicted,
                            uint64_t dropped)
{
    table->dyn->admitted = admitted;
    table->dyn->evicted = evicted;
    table->dyn->dropped_grads = dropped;
}

/* ---- the shard's calls (engine/ps/table.h) ------------------------------------ */

int ember_shard_is_dynamic(const ember_shard_t *table)
{
    return table->dyn != NULL;
}

static ember_status_t not_dynamic(const ember_shard_t *table, char *err, size_t err_length)
{
    return dyn_refuse(err, err_length, EMBER_ERR_UNSUPPORTED, table->spec.name,
                      "a fixed table has no keys (its rows are read by index)");
}

/* @n keys of the wire, any alignment, copied out. */
static uint64_t *keys_copy(const uint8_t *keys, size_t n)
{
    uint64_t *out = malloc(n * 8 + 8);
    if (out)
        memcpy(out, keys, n * 8);
    return out;
}

ember_status_t ember_shard_read_keys(const ember_shard_t *table, const uint8_t *keys, size_t n,
                                     float *out, uint8_t *found, char *err, size_t err_length)
{
    if (!table->dyn)
        return not_dynamic(table, err, err_length);
    uint64_t *k = keys_copy(keys, n);
    if (!k)
        return dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, table->spec.name, "out of memory");
    table_dyn_read_keys(table, k, n, out, found);
    free(k);
    return EMBER_OK;
}

static int key_cmp(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The first key given twice, or NULL. */
static const uint64_t *key_twice(const uint64_t *keys, size_t n, uint64_t *sorted)
{
    memcpy(sorted, keys, n * 8);
    qsort(sorted, n, 8, key_cmp);
    for (size_t i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1])
            return &sorted[i];
    return NULL;
}

ember_status_t ember_shard_write_keys(ember_shard_t *table, const uint8_t *keys, size_t n,
                                      const uint8_t *rows, char *err, size_t err_length)
{
    if (!table->dyn)
        return not_dynamic(table, err, err_length);
    const size_t dim = table->spec.dim;
    uint64_t *k = malloc(2 * n * 8 + 8); /* the keys, then their sorted copy */
    float *v = n && dim <= SIZE_MAX / 4 / n ? malloc(n * dim * 4) : NULL;
    ember_status_t status = EMBER_OK;
    if (!k || (n && !v)) {
        status =
                dyn_refuse(err, err_length, EMBER_ERR_NO_MEMORY, table->spec.name, "out of memory");
        goto out;
    }
    memcpy(k, keys, n * 8);
    if (n)
        memcpy(v, rows, n * dim * 4);
    const uint64_t *twice = key_twice(k, n, k + n);
    if (twice) {
        status = dyn_refuse(err, err_length, EMBER_ERR_INVALID_PARAM, table->spec.name,
                            "key %llu given twice", (unsigned long long)*twice);
        goto out;
    }
    for (size_t i = 0; i < n * dim; i++) {
        if (!isfinite(v[i])) {
            status = dyn_refuse(err, err_length, EMBER_ERR_INVALID_PARAM, table->spec.name,
                                "key %llu: value %zu is not finite", (unsigned long long)k[i / dim],
                                i % dim);
            goto out;
        }
    }
    status = table_dyn_write_keys(table, k, n, v, err, err_length);
    table_rows_changed_all(table);
out:
    free(k);
    free(v);
    return status;
}

ember_status_t ember_shard_stats(const ember_shard_t *table, ember_table_stats_t *stats, char *err,
                                 size_t err_length)
{
    if (!table->dyn)
        return not_dynamic(table, err, err_length);
    table_dyn_stats_t s;
    table_dyn_stats(table, &s);
    *stats = (ember_table_stats_t){.rows = s.rows,
                                   .candidates = s.candidates,
                                   .admitted = s.admitted,
                                   .evicted = s.evicted,
                                   .dropped_grads = s.dropped_grads,
                                   .dropped_candidates = s.dropped_candidates,
                                   .capacity = s.capacity,
                                   .bytes = s.bytes,
                                   .map_bytes = s.map_bytes,
                                   .load_factor = s.load_factor,
                                   .mean_probe = s.mean_probe,
                                   .max_probe = s.max_probe};
    return EMBER_OK;
}
