/* engine/io/criteo_data: a trainer's Criteo stream, read ahead by a thread
 * into a ring of batch buffers (see criteo_data.h). */
#include "engine/io/criteo_data.h"

#include "engine/io/criteo_source.h"

#include <ember/log.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One batch buffer of the ring. */
typedef struct {
    int64_t *sparse; /* [26][batch], feature-major; a given batch's at f * n */
    float *dense;    /* [batch][13] */
    float *labels;   /* [batch] */
    size_t n;
    uint64_t first_example;
} slot_t;

#define EXAMPLE_BYTES \
    (EMBER_CRITEO_SPARSE * sizeof(int64_t) + (EMBER_CRITEO_DENSE + 1) * sizeof(float))

/*
 * The ring: slots next_give .. next_give + filled - 1 (mod nslots) are
 * ready, the reader fills the one after them, and the trainer holds the
 * `held` ones before next_give (the batches it was given and has not
 * released, at most hold).  nslots is read_ahead + hold and at most
 * read_ahead are ever ready, so the reader never writes a held one.  An
 * epoch's end (n == 0) is never held: taken, its slot moves behind the
 * held ones (their descriptors shift up one), free for the reader.
 */
struct ember_criteo_data {
    criteo_source_t *source; /* the reader thread's alone once it runs */
    uint32_t trainer, trainers, batch;
    int eval;
    size_t read_ahead, hold, nslots;
    size_t held; /* the trainer's alone */
    slot_t *slots;
    void *memory; /* every slot's arrays */
    pthread_mutex_t lock;
    pthread_cond_t ready_cond; /* a slot was filled, or the reader failed */
    pthread_cond_t free_cond;  /* a slot was given, or close asked to stop */
    size_t next_give, filled;  /* under lock */
    int failed;                /* under lock: the reader ended with status/error */
    ember_status_t status;
    char error[1024];
    atomic_int stop;
    int thread_started;
    pthread_t thread;
    uint64_t position; /* the reader's: the global index of the next example */
};

/* A free slot to fill, or NULL once close asked to stop. */
static slot_t *acquire_slot(ember_criteo_data_t *d)
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
static void publish_slot(ember_criteo_data_t *d)
{
    pthread_mutex_lock(&d->lock);
    d->filled++;
    pthread_cond_signal(&d->ready_cond);
    pthread_mutex_unlock(&d->lock);
}

static void put_example(const ember_criteo_data_t *d, slot_t *slot,
                        const ember_criteo_example_t *ex)
{
    size_t i = slot->n++;
    slot->labels[i] = ex->label;
    memcpy(slot->dense + i * EMBER_CRITEO_DENSE, ex->dense, sizeof(ex->dense));
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++)
        slot->sparse[f * d->batch + i] = ex->sparse[f];
}

/* A short batch (an evaluation's last) laid out as a full one is: feature
 * f's ids at f * n, back to back (features in order: each moves down, onto
 * nothing not yet moved). */
static void compact_slot(const ember_criteo_data_t *d, slot_t *slot)
{
    for (size_t f = 1; slot->n < d->batch && f < EMBER_CRITEO_SPARSE; f++)
        memmove(slot->sparse + f * slot->n, slot->sparse + f * d->batch, slot->n * sizeof(int64_t));
}

/* Pass over up to @count examples; *end_p = 1 if the data ran out first. */
static ember_status_t pass_over(ember_criteo_data_t *d, uint64_t count, int *end_p, char *err,
                                size_t err_length)
{
    uint64_t passed;
    EMBER_CHECK(criteo_source_skip(d->source, count, &passed, err, err_length));
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
static ember_status_t fill_batch(ember_criteo_data_t *d, slot_t *slot, int *end_p, char *err,
                                 size_t err_length)
{
    ember_criteo_example_t ex;
    int got;
    uint64_t T = d->trainers;
    slot->n = 0;
    slot->first_example = d->position;
    *end_p = 0;
    while (slot->n < d->batch) {
        if (atomic_load(&d->stop))
            return EMBER_ERR_CANCELED;
        EMBER_CHECK(pass_over(d, (d->trainer + T - d->position % T) % T, end_p, err, err_length));
        if (*end_p)
            return EMBER_OK;
        EMBER_CHECK(criteo_source_take(d->source, &ex, &got, err, err_length));
        if (!got) {
            *end_p = 1;
            return EMBER_OK;
        }
        if (slot->n == 0)
            slot->first_example = d->position;
        put_example(d, slot, &ex);
        d->position++;
    }
    return d->eval ? EMBER_OK : pass_over(d, T - 1 - d->trainer, end_p, err, err_length);
}

/* One epoch's batches, then its end (a batch of none). */
static ember_status_t stream_epoch(ember_criteo_data_t *d, char *err, size_t err_length)
{
    int end = 0;
    EMBER_CHECK(criteo_source_rewind(d->source, err, err_length));
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
        slot->n = 0;
        slot->first_example = d->position;
        publish_slot(d);
        return EMBER_OK;
    }
}

static void *reader_main(void *arg)
{
    ember_criteo_data_t *d = arg;
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

static ember_status_t check_config(const ember_criteo_data_config_t *c, char *err,
                                   size_t err_length)
{
    if (!c->source || !c->rows)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "Criteo data: no %s",
                                 c->source ? "table rows" : "source");
    if (c->trainers == 0 || c->trainer >= c->trainers)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: trainer %" PRIu32 " of %" PRIu32, c->trainer,
                                 c->trainers);
    if (c->batch == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: a batch of 0 examples");
    if (c->hold > EMBER_CRITEO_HOLD_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: hold %" PRIu32 " (at most %d batches)", c->hold,
                                 EMBER_CRITEO_HOLD_MAX);
    if (c->read_ahead > EMBER_CRITEO_READ_AHEAD_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: read_ahead %" PRIu32 " (at most %d batches)",
                                 c->read_ahead, EMBER_CRITEO_READ_AHEAD_MAX);
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++)
        if (c->rows[f] < 1)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "Criteo data: feature C%zu's table has %lld rows", f + 1,
                                     (long long)c->rows[f]);
    return EMBER_OK;
}

/* The ring's slots, all their arrays in one allocation. */
static ember_status_t alloc_ring(ember_criteo_data_t *d, char *err, size_t err_length)
{
    size_t slot_bytes = d->batch * EXAMPLE_BYTES; /* batch < 2^32: no overflow */
    if (d->nslots > SIZE_MAX / slot_bytes || !(d->slots = calloc(d->nslots, sizeof(*d->slots))) ||
        !(d->memory = malloc(d->nslots * slot_bytes)))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "Criteo data: %zu batch buffers of %" PRIu32
                                 " examples (%zu bytes each): out of memory",
                                 d->nslots, d->batch, slot_bytes);
    for (size_t i = 0; i < d->nslots; i++) {
        uint8_t *base = (uint8_t *)d->memory + i * slot_bytes;
        d->slots[i].sparse = (int64_t *)base;
        d->slots[i].dense = (float *)(d->slots[i].sparse + EMBER_CRITEO_SPARSE * d->batch);
        d->slots[i].labels = d->slots[i].dense + EMBER_CRITEO_DENSE * d->batch;
    }
    return EMBER_OK;
}

ember_status_t ember_criteo_data_open(const ember_criteo_data_config_t *config,
                                      ember_criteo_data_t **data_p, char *err, size_t err_length)
{
    ember_status_t status;
    EMBER_CHECK(check_config(config, err, err_length));
    ember_criteo_data_t *d = calloc(1, sizeof(*d));
    if (!d)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    d->trainer = config->trainer;
    d->trainers = config->trainers;
    d->batch = config->batch;
    d->eval = config->eval;
    d->read_ahead = config->read_ahead ? config->read_ahead : EMBER_CRITEO_READ_AHEAD;
    d->hold = config->hold ? config->hold : 1;
    d->nslots = d->read_ahead + d->hold;
    atomic_init(&d->stop, 0);
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->ready_cond, NULL);
    pthread_cond_init(&d->free_cond, NULL);
    EMBER_CHECK_GOTO(alloc_ring(d, err, err_length), status, err_close);
    EMBER_CHECK_GOTO(criteo_source_open(config->source, config->rows, &d->source, err, err_length),
                     status, err_close);
    int e = pthread_create(&d->thread, NULL, reader_main, d);
    if (e != 0) {
        status = ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                   "Criteo data: cannot start the reader thread: %s", strerror(e));
        goto err_close;
    }
    d->thread_started = 1;
    *data_p = d;
    return EMBER_OK;

err_close:
    ember_criteo_data_close(d);
    return status;
}

/* Under the lock: the epoch's end just given from ring position @at takes
 * no hold: its descriptor goes behind the `held` ones before it, which
 * shift up one, so they stay the ones before next_give (the reader's
 * slot, after the ready ones, is never among these positions). */
static void unhold_end(ember_criteo_data_t *d, size_t at)
{
    const slot_t end = d->slots[at];
    for (size_t k = 0; k < d->held; k++)
        d->slots[(at + d->nslots - k) % d->nslots] = d->slots[(at + d->nslots - k - 1) % d->nslots];
    d->slots[(at + d->nslots - d->held) % d->nslots] = end;
}

ember_status_t ember_criteo_data_take(ember_criteo_data_t *d, ember_criteo_batch_t *batch_p,
                                      char *err, size_t err_length)
{
    if (d->held >= d->hold)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: %zu batches held, at most %zu (release one first)",
                                 d->held, d->hold);
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
    batch_p->n = slot.n;
    batch_p->labels = slot.labels;
    batch_p->dense = slot.dense;
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++)
        batch_p->sparse[f] = slot.sparse + f * slot.n;
    batch_p->first_example = slot.first_example;
    return EMBER_OK;
}

ember_status_t ember_criteo_data_release(ember_criteo_data_t *d)
{
    if (d->held == 0)
        return EMBER_ERR_INVALID_PARAM;
    d->held--; /* the slots are free for the reader by count, not by name */
    return EMBER_OK;
}

ember_status_t ember_criteo_data_next(ember_criteo_data_t *d, ember_criteo_batch_t *batch_p,
                                      char *err, size_t err_length)
{
    if (d->held >= d->hold)
        ember_criteo_data_release(d);
    return ember_criteo_data_take(d, batch_p, err, err_length);
}

void ember_criteo_data_close(ember_criteo_data_t *d)
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
    criteo_source_close(d->source);
    pthread_cond_destroy(&d->free_cond);
    pthread_cond_destroy(&d->ready_cond);
    pthread_mutex_destroy(&d->lock);
    free(d->memory);
    free(d->slots);
    free(d);
}
