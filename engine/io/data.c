/* engine/io/data: a trainer's example stream for any schema, read ahead by
 * a thread into a ring of batch buffers (see <ember/data.h>). */
#include "engine/io/data_source.h"
#include "engine/io/schema_private.h"

#include <ember/data.h>
#include <ember/log.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define K_MAX EMBER_SCHEMA_SPARSE_MAX

/*
 * One batch buffer of the ring.  While the reader fills it, feature f's
 * values go to values[start[f] ..] (room for B bags of its bound) and
 * example i's bag size to offsets[f * B + i + 1]; published, it is a keyed
 * jagged batch: values feature-major back to back, offsets [K n + 1].
 */
typedef struct {
    int64_t *values;
    int64_t *offsets;
    float *dense;  /* [batch][N] */
    float *labels; /* [batch] */
    size_t n, num_values;
    uint64_t first_example;
} slot_t;

/*
 * The ring: slots next_give .. next_give + filled - 1 (mod nslots) are
 * ready, the reader fills the one after them, and the trainer holds the
 * `held` ones before next_give (the batches it was given and has not
 * released, at most hold).  nslots is read_ahead + hold and at most
 * read_ahead are ever ready, so the reader never writes a held one.  An
 * epoch's end (n == 0) is never held: taken, its slot moves behind the
 * held ones (their descriptors shift up one), free for the reader.
 */
struct ember_data {
    ember_schema_t *schema;
    data_source_t *source; /* the reader thread's alone once it runs */
    uint32_t trainer, trainers, batch, K, N;
    int eval;
    size_t read_ahead, hold, nslots;
    size_t held; /* the trainer's alone */
    slot_t *slots;
    void *memory;              /* every slot's arrays */
    size_t start[K_MAX + 1];   /* feature f's room in a slot's values */
    uint32_t multi_hot[K_MAX]; /* bag size a one-id feature becomes; 0: none */
    ember_multi_hot_dist_t multi_hot_dist;
    uint64_t multi_hot_seed;
    pthread_mutex_t lock;
    pthread_cond_t ready_cond; /* a slot was filled, or the reader failed */
    pthread_cond_t free_cond;  /* a slot was given, or close asked to stop */
    size_t next_give, filled;  /* under lock */
    int failed;                /* under lock: the reader ended with status/error */
    ember_status_t status;
    char error[1024];
    atomic_int stop;
    atomic_uint_least64_t epoch_examples;
    int thread_started;
    pthread_t thread;
    /* the reader's: the global index of the next example, the values the
     * slot it fills holds per feature, where the next example goes */
    uint64_t position;
    size_t used[K_MAX];
    int64_t *ids[K_MAX];
    int64_t lengths[K_MAX];
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Value @j of the bag whose key is mix(mix(mix(seed) ^ feature) ^ row). */
static int64_t multi_hot_value(uint64_t key, uint32_t j, int64_t rows, ember_multi_hot_dist_t dist)
{
    uint64_t h = mix(key ^ j);
    if (dist == EMBER_MULTI_HOT_UNIFORM)
        return (int64_t)(h % (uint64_t)rows);
    double t = 1.0 - (double)(h >> 11) * 0x1p-53; /* (0, 1] */
    double v = 1.0 / ((t * t) * (t * t)) - 1.0;   /* numpy's pareto(0.25): t^-4 - 1 */
    uint64_t k = v >= 0x1p63 ? (uint64_t)INT64_MAX : (uint64_t)v;
    return (int64_t)(k % (uint64_t)rows);
}

int64_t ember_data_multi_hot_row(uint64_t seed, uint32_t feature, int64_t row, uint32_t j,
                                 int64_t rows, ember_multi_hot_dist_t dist)
{
    return multi_hot_value(mix(mix(mix(seed) ^ feature) ^ (uint64_t)row), j, rows, dist);
}

/* A free slot to fill, or NULL once close asked to stop. */
static slot_t *acquire_slot(ember_data_t *d)
{
    slot_t *slot = NULL;
    pthread_mutex_lock(&d->lock);
    while (d->filled >= d->read_ahead && !atomic_load(&d->stop))
        pthread_cond_wait(&d->free_cond, &d->lock);
    if (!atomic_load(&d->stop))
        slot = &d->slots[(d->next_give + d->filled) % d->nslots];
    pthread_mutex_unlock(&d->lock);
    return slot;
}

/* The slot acquire_slot gave is ready (it stays the one after the ready
 * ones while the trainer takes them). */
static void publish_slot(ember_data_t *d)
{
    pthread_mutex_lock(&d->lock);
    d->filled++;
    pthread_cond_signal(&d->ready_cond);
    pthread_mutex_unlock(&d->lock);
}

static void begin_slot(ember_data_t *d, slot_t *slot)
{
    slot->n = 0;
    slot->first_example = d->position;
    memset(d->used, 0, d->K * sizeof(d->used[0]));
}

/* MLPerf's synthetic multi-hot: a one-id bag of row r becomes r and the
 * rows its generator draws. */
static void expand_multi_hot(const ember_data_t *d, uint32_t f, int64_t *ids, int64_t *length)
{
    if (!d->multi_hot[f] || *length != 1)
        return;
    /* the bag's key once, a value a draw */
    const uint64_t key = mix(mix(mix(d->multi_hot_seed) ^ f) ^ (uint64_t)ids[0]);
    for (uint32_t j = 1; j < d->multi_hot[f]; j++)
        ids[j] = multi_hot_value(key, j, d->schema->sparse[f].rows, d->multi_hot_dist);
    *length = d->multi_hot[f];
}

/* The source's next example into @slot as its example slot->n. */
static ember_status_t take_example(ember_data_t *d, slot_t *slot, int *got_p, char *err,
                                   size_t err_length)
{
    size_t i = slot->n;
    for (uint32_t f = 0; f < d->K; f++)
        d->ids[f] = slot->values + d->start[f] + d->used[f];
    data_example_t ex = {.label = &slot->labels[i],
                         .dense = slot->dense + i * d->N,
                         .ids = d->ids,
                         .lengths = d->lengths};
    EMBER_CHECK(d->source->ops->take(d->source, &ex, got_p, err, err_length));
    if (!*got_p)
        return EMBER_OK;
    for (uint32_t f = 0; f < d->K; f++) {
        expand_multi_hot(d, f, d->ids[f], &d->lengths[f]);
        slot->offsets[(size_t)f * d->batch + i + 1] = d->lengths[f];
        d->used[f] += (size_t)d->lengths[f];
    }
    slot->n++;
    return EMBER_OK;
}

/* The slot as a keyed jagged batch of its n examples: each feature's
 * values moved down behind the one before's, the bag sizes summed into
 * offsets (in order, each moved onto nothing not yet read). */
static void compact_slot(const ember_data_t *d, slot_t *slot)
{
    size_t n = slot->n, B = d->batch, total = 0;
    int64_t sum = 0;
    for (uint32_t f = 0; f < d->K; f++) {
        memmove(slot->values + total, slot->values + d->start[f], d->used[f] * sizeof(int64_t));
        total += d->used[f];
        for (size_t i = 0; i < n; i++) {
            sum += slot->offsets[f * B + i + 1];
            slot->offsets[f * n + i + 1] = sum;
        }
    }
    slot->offsets[0] = 0;
    slot->num_values = total;
}

/* Pass over up to @count examples; *end_p = 1 if the data ran out first. */
static ember_status_t pass_over(ember_data_t *d, uint64_t count, int *end_p, char *err,
                                size_t err_length)
{
    uint64_t passed;
    EMBER_CHECK(d->source->ops->skip(d->source, count, &passed, err, err_length));
    d->position += passed;
    *end_p = passed < count;
    return EMBER_OK;
}

/*
 * This trainer's next batch into @slot, from the example at d->position:
 * its own examples (i % T == t) until the batch is full or the data ends
 * (*end_p = 1).  Training: then past the round's other examples too, up to
 * index (s+1)*B*T - 1, the last that must exist for the batch to be given.
 */
static ember_status_t fill_batch(ember_data_t *d, slot_t *slot, int *end_p, char *err,
                                 size_t err_length)
{
    int got;
    uint64_t T = d->trainers;
    begin_slot(d, slot);
    *end_p = 0;
    while (slot->n < d->batch) {
        if (atomic_load(&d->stop))
            return EMBER_ERR_CANCELED;
        EMBER_CHECK(pass_over(d, (d->trainer + T - d->position % T) % T, end_p, err, err_length));
        if (*end_p)
            return EMBER_OK;
        if (slot->n == 0)
            slot->first_example = d->position;
        EMBER_CHECK(take_example(d, slot, &got, err, err_length));
        if (!got) {
            *end_p = 1;
            return EMBER_OK;
        }
        d->position++;
    }
    return d->eval ? EMBER_OK : pass_over(d, T - 1 - d->trainer, end_p, err, err_length);
}

/* One epoch's batches, then its end (a batch of none). */
static ember_status_t stream_epoch(ember_data_t *d, char *err, size_t err_length)
{
    int end = 0;
    EMBER_CHECK(d->source->ops->rewind(d->source, err, err_length));
    d->position = 0;
    for (;;) {
        slot_t *slot = acquire_slot(d);
        if (!slot)
            return EMBER_ERR_CANCELED;
        EMBER_CHECK(fill_batch(d, slot, &end, err, err_length));
        /* a full batch of a round that ran out is dropped (training) */
        int give = slot->n == d->batch ? !end : d->eval && slot->n > 0;
        if (give) {
            compact_slot(d, slot);
            publish_slot(d);
            if (!end)
                continue;
            if (!(slot = acquire_slot(d)))
                return EMBER_ERR_CANCELED;
        }
        atomic_store(&d->epoch_examples, d->position);
        begin_slot(d, slot);
        compact_slot(d, slot);
        publish_slot(d);
        return EMBER_OK;
    }
}

static void *reader_main(void *arg)
{
    ember_data_t *d = arg;
    char err[sizeof(d->error)] = "";
    ember_status_t status = EMBER_OK;
    while (status == EMBER_OK)
        status = stream_epoch(d, err, sizeof(err));
    pthread_mutex_lock(&d->lock);
    if (!atomic_load(&d->stop)) { /* a real error, not close's stop */
        d->failed = 1;
        d->status = status;
        memcpy(d->error, err, sizeof(d->error));
        pthread_cond_broadcast(&d->ready_cond);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

static ember_status_t check_config(const ember_data_config_t *c, char *err, size_t err_length)
{
    if (!c->source || !c->schema)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "data: no %s",
                                 c->source ? "schema" : "source");
    if (c->trainers == 0 || c->trainer >= c->trainers)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data: trainer %" PRIu32 " of %" PRIu32, c->trainer, c->trainers);
    if (c->batch == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data: a batch of 0 examples");
    if (c->hold > EMBER_DATA_HOLD_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data: hold %" PRIu32 " (at most %d batches)", c->hold,
                                 EMBER_DATA_HOLD_MAX);
    if (c->read_ahead > EMBER_DATA_READ_AHEAD_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data: read_ahead %" PRIu32 " (at most %d batches)", c->read_ahead,
                                 EMBER_DATA_READ_AHEAD_MAX);
    if (c->multi_hot_sizes && c->multi_hot_dist != EMBER_MULTI_HOT_UNIFORM &&
        c->multi_hot_dist != EMBER_MULTI_HOT_PARETO)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data: multi_hot_dist %d is neither uniform nor pareto",
                                 (int)c->multi_hot_dist);
    return EMBER_OK;
}

/* Each feature's multi-hot size (one-id features only) and its room in
 * a slot's values: its bag bound, or its multi-hot size. */
static ember_status_t set_bags(ember_data_t *d, const ember_data_config_t *c, char *err,
                               size_t err_length)
{
    d->start[0] = 0;
    for (uint32_t f = 0; f < d->K; f++) {
        const schema_sparse_t *s = &d->schema->sparse[f];
        const char *name = d->schema->columns[s->column].name;
        uint32_t bag = s->bag_max, size = c->multi_hot_sizes ? c->multi_hot_sizes[f] : 0;
        if (c->multi_hot_sizes && (size < 1 || size > EMBER_SCHEMA_BAG_MAX))
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "data: feature '%s': multi-hot size %" PRIu32 " (1 to %d)",
                                     name, size, EMBER_SCHEMA_BAG_MAX);
        if (size && s->list)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "data: feature '%s' is a list (list=%c bag=%" PRIu32
                                     "): multi-hot sizes are for one-id features",
                                     name, s->list, s->bag_max);
        d->multi_hot[f] = size;
        bag = size ? size : bag;
        d->start[f + 1] = d->start[f] + (size_t)d->batch * bag; /* < 2^32 * 2^22: no overflow */
    }
    d->multi_hot_dist = c->multi_hot_dist;
    d->multi_hot_seed = c->multi_hot_seed;
    return EMBER_OK;
}

/* The ring's slots, all their arrays in one allocation. */
static ember_status_t alloc_ring(ember_data_t *d, char *err, size_t err_length)
{
    size_t B = d->batch, offsets = (size_t)d->K * B + 1, floats = B * (d->N + 1);
    size_t slot_bytes = (d->start[d->K] + offsets) * sizeof(int64_t) + floats * sizeof(float);
    slot_bytes = (slot_bytes + 7) & ~(size_t)7; /* the next slot's int64s aligned */
    if (d->nslots > SIZE_MAX / slot_bytes || !(d->slots = calloc(d->nslots, sizeof(*d->slots))) ||
        !(d->memory = malloc(d->nslots * slot_bytes)))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "data: %zu batch buffers of %" PRIu32
                                 " examples (%zu bytes each): out of memory",
                                 d->nslots, d->batch, slot_bytes);
    for (size_t i = 0; i < d->nslots; i++) {
        uint8_t *base = (uint8_t *)d->memory + i * slot_bytes;
        d->slots[i].values = (int64_t *)base;
        d->slots[i].offsets = d->slots[i].values + d->start[d->K];
        d->slots[i].dense = (float *)(d->slots[i].offsets + offsets);
        d->slots[i].labels = d->slots[i].dense + B * d->N;
    }
    return EMBER_OK;
}

/* The source its prefix names; a Criteo one only under Criteo's preset. */
static ember_status_t open_source(ember_data_t *d, const char *spec, char *err, size_t err_length)
{
    if (strncmp(spec, "text:", 5) == 0)
        return data_source_text(spec, d->schema, &d->source, err, err_length);
    if (strncmp(spec, "criteo:", 7) != 0 && strncmp(spec, "criteo-npy:", 11) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data source '%s' is neither criteo:PATH[,PATH...], "
                                 "criteo-npy:PREFIX[,PREFIX...] nor text:PATH[,PATH...]",
                                 spec);
    char why[256];
    if (schema_criteo_differs(d->schema, why, sizeof(why)))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data source '%.64s' reads Criteo's layout, and the schema is "
                                 "not Criteo's preset (%s; text: reads any schema)",
                                 spec, why);
    return data_source_criteo(spec, d->schema, &d->source, err, err_length);
}

static ember_status_t start_reader(ember_data_t *d, char *err, size_t err_length)
{
    int e = pthread_create(&d->thread, NULL, reader_main, d);
    if (e != 0)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "data: cannot start the reader thread: %s", strerror(e));
    d->thread_started = 1;
    return EMBER_OK;
}

ember_status_t ember_data_open(const ember_data_config_t *config, ember_data_t **data_p, char *err,
                               size_t err_length)
{
    ember_status_t status;
    EMBER_CHECK(check_config(config, err, err_length));
    ember_data_t *d = calloc(1, sizeof(*d));
    if (!d)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    d->trainer = config->trainer;
    d->trainers = config->trainers;
    d->batch = config->batch;
    d->eval = config->eval;
    d->read_ahead = config->read_ahead ? config->read_ahead : EMBER_DATA_READ_AHEAD;
    d->hold = config->hold ? config->hold : 1;
    d->nslots = d->read_ahead + d->hold;
    atomic_init(&d->stop, 0);
    atomic_init(&d->epoch_examples, 0);
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->ready_cond, NULL);
    pthread_cond_init(&d->free_cond, NULL);
    if (!(d->schema = schema_copy(config->schema))) {
        status = ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
        goto err_close;
    }
    d->K = d->schema->num_sparse;
    d->N = d->schema->num_dense;
    EMBER_CHECK_GOTO(set_bags(d, config, err, err_length), status, err_close);
    EMBER_CHECK_GOTO(alloc_ring(d, err, err_length), status, err_close);
    EMBER_CHECK_GOTO(open_source(d, config->source, err, err_length), status, err_close);
    atomic_store(&d->epoch_examples, d->source->examples);
    EMBER_CHECK_GOTO(start_reader(d, err, err_length), status, err_close);
    *data_p = d;
    return EMBER_OK;

err_close:
    ember_data_close(d);
    return status;
}

/* Under the lock: the epoch's end just given from ring position @at takes
 * no hold: its descriptor goes behind the `held` ones before it, which
 * shift up one, so they stay the ones before next_give (the reader's
 * slot, after the ready ones, is never among these positions). */
static void unhold_end(ember_data_t *d, size_t at)
{
    const slot_t end = d->slots[at];
    for (size_t k = 0; k < d->held; k++)
        d->slots[(at + d->nslots - k) % d->nslots] = d->slots[(at + d->nslots - k - 1) % d->nslots];
    d->slots[(at + d->nslots - d->held) % d->nslots] = end;
}

ember_status_t ember_data_take(ember_data_t *d, ember_data_batch_t *batch_p, char *err,
                               size_t err_length)
{
    if (d->held >= d->hold)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data: %zu batches held, at most %zu (release one first)", d->held,
                                 d->hold);
    pthread_mutex_lock(&d->lock);
    while (d->filled == 0 && !d->failed)
        pthread_cond_wait(&d->ready_cond, &d->lock);
    if (d->filled == 0) {
        ember_status_t status = ember_status_text(err, err_length, d->status, "%s", d->error);
        pthread_mutex_unlock(&d->lock);
        return status;
    }
    /* given, held until released: the reader fills only the slots after
     * the ready ones, read_ahead at most, so never this one meanwhile */
    const size_t at = d->next_give;
    const slot_t slot = d->slots[at];
    d->next_give = (at + 1) % d->nslots;
    d->filled--;
    if (slot.n > 0)
        d->held++;
    else
        unhold_end(d, at);
    pthread_cond_signal(&d->free_cond);
    pthread_mutex_unlock(&d->lock);
    *batch_p = (ember_data_batch_t){.n = slot.n,
                                    .labels = slot.labels,
                                    .dense = slot.dense,
                                    .kjt = {.num_features = d->K,
                                            .batch_size = slot.n,
                                            .values = slot.values,
                                            .offsets = slot.offsets,
                                            .num_values = slot.num_values},
                                    .first_example = slot.first_example};
    return EMBER_OK;
}

ember_status_t ember_data_release(ember_data_t *d)
{
    if (d->held == 0)
        return EMBER_ERR_INVALID_PARAM;
    d->held--; /* the slots are free for the reader by count, not by name */
    return EMBER_OK;
}

ember_status_t ember_data_next(ember_data_t *d, ember_data_batch_t *batch_p, char *err,
                               size_t err_length)
{
    if (d->held >= d->hold)
        ember_data_release(d);
    return ember_data_take(d, batch_p, err, err_length);
}

uint64_t ember_data_epoch_examples(const ember_data_t *d)
{
    return atomic_load(&((ember_data_t *)d)->epoch_examples);
}

void ember_data_close(ember_data_t *d)
{
    if (!d)
        return;
    if (d->thread_started) {
        pthread_mutex_lock(&d->lock);
        atomic_store(&d->stop, 1);
        pthread_cond_broadcast(&d->free_cond);
        pthread_mutex_unlock(&d->lock);
        pthread_join(d->thread, NULL);
    }
    if (d->source)
        d->source->ops->close(d->source);
    ember_schema_free(d->schema);
    pthread_cond_destroy(&d->free_cond);
    pthread_cond_destroy(&d->ready_cond);
    pthread_mutex_destroy(&d->lock);
    free(d->memory);
    free(d->slots);
    free(d);
}
