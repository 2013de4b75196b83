/* engine/train/sparse: a table's lookups and pushes over its shards (see
 * sparse.h). */
#include "engine/train/sparse.h"

#include "common/clock.h"
#include "common/reserve.h"
#include "engine/train/parts.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int rank;
    /* This step's entries of the batch on this shard, in batch order. */
    int64_t *rows;
    float *weights;
    uint32_t *places; /* max mode: each entry's place in its bag */
    size_t entries, entries_capacity;
    uint32_t *counts; /* [bags] entries of each bag here (in sparse->counts) */
    /* Each row travels once; the PS expands it back per entry. */
    int64_t *unique, *inverse;
    size_t unique_capacity, inverse_capacity, nunique;
    uint8_t *request; /* the LOOKUP built for this step */
    size_t request_capacity, request_bytes;
    ember_future_t *lookup, *push; /* push: the last step's, a call */
    int pushing;                   /* a one-way push still leaving */
    ember_status_t push_status;
    ember_msg_grad_t grad_head; /* the push's header: lives until it left */
} shard_t;

struct ember_sparse {
    ember_sparse_config_t config;
    ember_tp_t *tp;
    const int *aborted;
    shard_t *shards;
    uint32_t *counts; /* [num_ps][bags] */
    uint32_t *bag_counts;
    size_t counts_capacity, bag_capacity;
    size_t bags;
    uint32_t flags; /* this step's lookup flags */
    ember_parts_t parts;
};

/* One line saying what failed (the trainer names itself and the step). */
static ember_status_t fail(char *err, size_t err_length, ember_status_t status, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));
static ember_status_t fail(char *err, size_t err_length, ember_status_t status, const char *fmt,
                           ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return ember_status_text(err, err_length, status, "%s", what);
}

/* A failed future: its peer's text. */
static ember_status_t fail_future(char *err, size_t err_length, ember_status_t status,
                                  ember_future_t *future, const char *what)
{
    size_t length = 0;
    const char *text = ember_future_data(future, &length);
    return fail(err, err_length, status, "%s failed: %.*s", what,
                (int)(length > 300 ? 300 : length), text ? text : "");
}

/* Wait for a future, but give up when the master aborts the job. */
static ember_status_t sparse_wait(const ember_sparse_t *sparse, ember_future_t *future)
{
    ember_status_t status;
    while ((status = ember_future_test(future)) == EMBER_INPROGRESS) {
        if (*sparse->aborted)
            return EMBER_ERR_CANCELED;
        ember_tp_wait(sparse->tp, 0.2);
    }
    return status;
}

ember_status_t ember_sparse_create(const ember_sparse_config_t *config, ember_tp_t *tp,
                                   const ember_trainer_dev_t *td, int rdma, const int *aborted,
                                   ember_sparse_t **sparse_p)
{
    ember_sparse_t *sparse = calloc(1, sizeof(*sparse));
    if (!sparse || !(sparse->shards = calloc(config->num_ps, sizeof(*sparse->shards)))) {
        free(sparse);
        return EMBER_ERR_NO_MEMORY;
    }
    sparse->config = *config;
    sparse->tp = tp;
    sparse->aborted = aborted;
    for (uint32_t p = 0; p < config->num_ps; p++)
        sparse->shards[p].rank = config->first_ps_rank + (int)p;
    ember_parts_init(&sparse->parts, td, rdma, config->num_ps, config->dim, config->mode,
                     config->half_replies);
    *sparse_p = sparse;
    return EMBER_OK;
}

void ember_sparse_destroy(ember_sparse_t *sparse)
{
    if (!sparse)
        return;
    /* A one-way push still leaving reads its buffers: let it go (bounded). */
    double until = ember_time_now() + 2.0;
    for (uint32_t p = 0; p < sparse->config.num_ps; p++) {
        while (sparse->shards[p].pushing && ember_time_now() < until)
            ember_tp_wait(sparse->tp, 0.05);
    }
    for (uint32_t p = 0; p < sparse->config.num_ps; p++) {
        shard_t *shard = &sparse->shards[p];
        ember_future_release(shard->lookup);
        ember_future_release(shard->push);
        free(shard->request);
        free(shard->rows);
        free(shard->weights);
        free(shard->places);
        free(shard->unique);
        free(shard->inverse);
    }
    ember_parts_destroy(&sparse->parts);
    free(sparse->shards);
    free(sparse->counts);
    free(sparse->bag_counts);
    free(sparse);
}

/* ---- split -------------------------------------------------------------- */

/* Room for one more of a shard's entries; an array that cannot grow stays
 * as it was. */
static int shard_entries_grow(shard_t *shard)
{
    size_t count = shard->entries_capacity + 1;
    size_t rows = shard->entries_capacity, weights = rows, places = rows;
    if (!EMBER_RESERVE(shard->rows, rows, count) ||
        !EMBER_RESERVE(shard->weights, weights, count) ||
        !EMBER_RESERVE(shard->places, places, count))
        return 0;
    shard->entries_capacity = rows; /* all three grew alike */
    return 1;
}

/* Each entry to the shard of its row, in batch order, with its weight and
 * its place in its bag; the padding row's entries go nowhere. */
static ember_status_t split_entries(ember_sparse_t *sparse, const ember_batch_t *batch)
{
    const uint32_t P = sparse->config.num_ps;
    const size_t bags = batch->bags;
    if (!EMBER_RESERVE(sparse->bag_counts, sparse->bag_capacity, bags) ||
        !EMBER_RESERVE(sparse->counts, sparse->counts_capacity, P * bags))
        return EMBER_ERR_NO_MEMORY;
    memset(sparse->bag_counts, 0, bags * sizeof(uint32_t));
    memset(sparse->counts, 0, P * bags * sizeof(uint32_t));
    for (uint32_t p = 0; p < P; p++) {
        sparse->shards[p].counts = sparse->counts + (size_t)p * bags;
        sparse->shards[p].entries = 0;
    }
    for (size_t b = 0; b < bags; b++) {
        size_t end = b + 1 < bags ? (size_t)batch->offsets[b + 1] : batch->n;
        for (size_t i = (size_t)batch->offsets[b]; i < end; i++) {
            int64_t row = batch->indices[i];
            if (row == sparse->config.padding_idx)
                continue; /* contributes nothing, is not counted */
            shard_t *shard = &sparse->shards[(uint64_t)row % P];
            if (shard->entries == shard->entries_capacity && !shard_entries_grow(shard))
                return EMBER_ERR_NO_MEMORY;
            shard->rows[shard->entries] = row;
            shard->weights[shard->entries] = batch->weights ? batch->weights[i] : 1.0f;
            shard->places[shard->entries] = (uint32_t)(i - (size_t)batch->offsets[b]);
            shard->entries++;
            shard->counts[b]++;
            sparse->bag_counts[b]++;
        }
    }
    return EMBER_OK;
}

/* A shard's rows deduplicated and its LOOKUP packed (engine/wire/codec). */
static ember_status_t shard_request(ember_sparse_t *sparse, shard_t *shard, uint64_t step)
{
    const size_t n = shard->entries;
    if (!EMBER_RESERVE(shard->unique, shard->unique_capacity, n + 1) ||
        !EMBER_RESERVE(shard->inverse, shard->inverse_capacity, n + 1))
        return EMBER_ERR_NO_MEMORY;
    EMBER_CHECK(
            ember_bag_dedup(shard->rows, n, -1, shard->unique, shard->inverse, &shard->nunique));
    ember_wire_lookup_t lookup = {.head = {.table_id = sparse->config.table_id,
                                           .trainer = (uint32_t)sparse->config.trainer,
                                           .step = step,
                                           .flags = sparse->flags,
                                           .bags = (uint32_t)sparse->bags,
                                           .unique = (uint32_t)shard->nunique,
                                           .indices = (uint32_t)n},
                                  .counts = shard->counts,
                                  .rows = shard->unique,
                                  .inverse = shard->inverse,
                                  .weights = shard->weights,
                                  .places = shard->places};
    shard->request_bytes = ember_wire_lookup_size(&lookup.head);
    if (!EMBER_RESERVE(shard->request, shard->request_capacity, shard->request_bytes))
        return EMBER_ERR_NO_MEMORY;
    ember_wire_lookup_pack(&lookup, shard->request);
    return EMBER_OK;
}

ember_status_t ember_sparse_split(ember_sparse_t *sparse, const ember_batch_t *batch, uint64_t step,
                                  char *err, size_t err_length)
{
    const ember_sparse_config_t *config = &sparse->config;
    ember_status_t status = split_entries(sparse, batch);
    sparse->bags = batch->bags;
    sparse->flags = (batch->weights ? EMBER_LOOKUP_WEIGHTS : 0) |
                    (config->mode == EMBER_BAG_MAX ? EMBER_LOOKUP_MAX : 0) |
                    (config->half_replies ? EMBER_LOOKUP_HALF_REPLY : 0);
    for (uint32_t p = 0; status == EMBER_OK && p < config->num_ps; p++)
        status = shard_request(sparse, &sparse->shards[p], step);
    if (status != EMBER_OK)
        return fail(err, err_length, status, "table %s: the lookups: %s", config->table_name,
                    ember_status_string(status));
    return EMBER_OK;
}

/* ---- lookups ------------------------------------------------------------ */

ember_status_t ember_sparse_pushes_wait(ember_sparse_t *sparse, uint64_t step, char *err,
                                        size_t err_length)
{
    for (uint32_t p = 0; p < sparse->config.num_ps; p++) {
        shard_t *shard = &sparse->shards[p];
        while (shard->pushing && !*sparse->aborted)
            ember_tp_wait(sparse->tp, 0.2);
        if (shard->push_status != EMBER_OK)
            return fail(err, err_length, shard->push_status,
                        "the gradient push of step %llu to ps%u was lost: %s",
                        (unsigned long long)step - 1, p, ember_status_string(shard->push_status));
        if (!shard->push)
            continue;
        ember_status_t status = sparse_wait(sparse, shard->push);
        if (status != EMBER_OK)
            return fail_future(err, err_length, status, shard->push,
                               step ? "the last step's gradient push" : "gradient push");
        ember_future_release(shard->push);
        shard->push = NULL;
    }
    return EMBER_OK;
}

/* Every shard's lookup in flight, each reply landing in its part. */
static ember_status_t lookups_send(ember_sparse_t *sparse, char *err, size_t err_length)
{
    ember_parts_t *parts = &sparse->parts;
    const ember_rpc_param_t to_device = {.payload_mem = EMBER_MEM_HOST,
                                         .reply_mem = ember_parts_mem(parts)};
    for (uint32_t p = 0; p < sparse->config.num_ps; p++) {
        shard_t *shard = &sparse->shards[p];
        ember_iov_t iov = {.buffer = shard->request, .length = shard->request_bytes};
        ember_status_t status = ember_rpc_call_async(
                sparse->tp, shard->rank, EMBER_OP_LOOKUP, &iov, 1, ember_parts_reply(parts, p),
                parts->reply_bytes, &to_device, &shard->lookup);
        if (status != EMBER_OK)
            return fail(err, err_length, status, "lookup on ps%u: %s", p,
                        ember_status_string(status));
    }
    return EMBER_OK;
}

/* Every reply in, each of the size the lookup asked for. */
static ember_status_t lookups_wait(ember_sparse_t *sparse, char *err, size_t err_length)
{
    for (uint32_t p = 0; p < sparse->config.num_ps; p++) {
        shard_t *shard = &sparse->shards[p];
        ember_status_t status = sparse_wait(sparse, shard->lookup);
        size_t got = 0;
        if (status == EMBER_OK)
            ember_future_data(shard->lookup, &got);
        if (status == EMBER_OK && got != sparse->parts.reply_bytes)
            status = fail(err, err_length, EMBER_ERR_BAD_MESSAGE,
                          "lookup failed: ps%u's reply has %zu bytes, not %zu", p, got,
                          sparse->parts.reply_bytes);
        else if (status != EMBER_OK)
            fail_future(err, err_length, status, shard->lookup, "lookup");
        if (status != EMBER_OK) {
            for (uint32_t q = p; q < sparse->config.num_ps; q++) {
                ember_future_release(sparse->shards[q].lookup);
                sparse->shards[q].lookup = NULL;
            }
            return status;
        }
        ember_future_release(shard->lookup);
        shard->lookup = NULL;
    }
    return EMBER_OK;
}

ember_status_t ember_sparse_lookup(ember_sparse_t *sparse, char *err, size_t err_length)
{
    ember_msg_lookup_t reply = {.bags = (uint32_t)sparse->bags, .flags = sparse->flags};
    size_t reply_bytes = (size_t)ember_wire_lookup_reply_bytes(&reply, sparse->config.dim);
    ember_status_t status = ember_parts_reserve(&sparse->parts, sparse->bags, reply_bytes);
    if (status != EMBER_OK)
        return fail(err, err_length, status, "table %s: reply buffers: %s",
                    sparse->config.table_name, ember_status_string(status));
    EMBER_CHECK(lookups_send(sparse, err, err_length));
    return lookups_wait(sparse, err, err_length);
}

ember_status_t ember_sparse_combine(ember_sparse_t *sparse, float *x)
{
    return ember_parts_combine(&sparse->parts, sparse->counts, sparse->bag_counts, x);
}

/* ---- pushes ------------------------------------------------------------- */

/* A one-way gradient push has left (or was lost with its peer). */
static void push_done(void *arg, ember_status_t status)
{
    shard_t *shard = arg;
    shard->pushing = 0;
    shard->push_status = status;
}

ember_status_t ember_sparse_push(ember_sparse_t *sparse, const float *grad_x, uint64_t step,
                                 int last, char *err, size_t err_length)
{
    ember_parts_t *parts = &sparse->parts;
    const ember_mem_type_t mem = ember_parts_mem(parts);
    const ember_rpc_param_t from = {.payload_mem = mem, .reply_mem = EMBER_MEM_HOST};
    const size_t bytes = sparse->bags * sparse->config.dim * sizeof(float);

    EMBER_CHECK(ember_parts_split(parts, sparse->bag_counts, grad_x));
    for (uint32_t p = 0; p < sparse->config.num_ps; p++) {
        shard_t *shard = &sparse->shards[p];
        shard->grad_head = (ember_msg_grad_t){.table_id = sparse->config.table_id,
                                              .trainer = (uint32_t)sparse->config.trainer,
                                              .step = step,
                                              .flags = EMBER_GRAD_APPLY,
                                              .bags = (uint32_t)sparse->bags};
        ember_iov_t iov[2];
        size_t iovcnt = ember_wire_pack_iov(&shard->grad_head, sizeof(shard->grad_head),
                                            ember_parts_grad(parts, p), bytes, iov);
        ember_status_t status;
        if (!last) {
            shard->pushing = 1;
            status = ember_rpc_send(sparse->tp, shard->rank, EMBER_OP_GRAD, iov, iovcnt, &from,
                                    push_done, shard);
        } else {
            status = ember_rpc_call_async(sparse->tp, shard->rank, EMBER_OP_GRAD, iov, iovcnt, NULL,
                                          0, &from, &shard->push);
        }
        if (status != EMBER_OK)
            return fail(err, err_length, status, "gradient push to ps%u: %s", p,
                        ember_status_string(status));
    }
    return EMBER_OK;
}
