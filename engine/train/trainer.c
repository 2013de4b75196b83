/*
 * engine/train/trainer: the training loop of one trainer.
 *
 * One step: validate the batch, split it by shard (row % P), deduplicate
 * each shard's rows, send one lookup per shard, combine the partial pools
 * (sum, mean = sum / count, max across shards), Linear + cross entropy,
 * backward, then the dense gradients go to the allreduce while the pooled
 * output's gradient goes to each shard (the distributed autograd context is
 * (trainer, step) on the PS), and the dense optimizer steps locally.
 */
#include "engine/train/trainer.h"

#include "common/clock.h"
#include "common/copy.h"
#include "common/reserve.h"
#include "engine/ops/bag_parts.h"
#include "engine/ops/half.h"
#include "engine/ops/optimizer.h"
#include "engine/train/data.h"
#include "engine/wire/protocol.h"

#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Grow-only buffers (common/reserve.h): a steady-state step allocates nothing. */
#define RESERVE EMBER_RESERVE

typedef struct trainer trainer_t;

typedef struct {
    int rank;
    /* request under construction */
    uint8_t *request;
    size_t request_capacity;
    uint32_t *counts; /* [bags] entries of each bag on this shard (in
                        * trainer->counts) */
    int64_t *rows;    /* entries in batch order (global ids) */
    float *weights;
    uint32_t *places; /* max mode: each entry's place in its bag */
    size_t entries_capacity;
    size_t entries;
    size_t request_bytes; /* the LOOKUP message built for this step */
    int64_t *unique;
    int64_t *inverse;
    size_t unique_capacity;
    size_t nunique;
    ember_future_t *lookup, *push; /* push: the last step's, a call */
    int pushing;                   /* a one-way push still leaving */
    ember_status_t push_status;
    ember_msg_grad_t grad_msg; /* the push's header: lives until it left */
} shard_t;

struct trainer {
    ember_tp_t *tp;
    int index, trainers;
    /* from TRAIN_START */
    int started, aborted;
    char abort_text[256];
    ember_rpc_req_t *start_req;
    ember_msg_train_start_t spec;
    float *params; /* the dense MLP, flat (ember_dense_offset) */
    size_t nparams;
    /* working state */
    shard_t *shards;
    /* The dense part runs on the device ("cpu" or "cuda"): same code. */
    ember_device_t *device;
    const ember_device_ops_t *dev;
    int on_host; /* device memory is host memory: no copies */
    ember_device_comm_t *comm;
    ember_opt_t *optimizer;
    /* host; pooled and grad_pooled from host_reserve (pinned on a GPU) */
    float *pooled, *grad_pooled, *grads;
    size_t pooled_capacity, grad_pooled_capacity;
    /* The shards' parts of a step, packed (engine/ops/bag_parts.h): shard p's
     * counts at p * bags, its reply and its gradient at p * bags * dim.  The
     * replies and pushes from host_reserve; with the device path they are
     * d_parts and d_shard_grads instead. */
    uint32_t *counts;
    size_t counts_capacity;
    float *parts, *shard_grads;
    uint16_t *parts_half; /* the replies as they came, with fp16 replies */
    size_t parts_capacity, parts_half_capacity, shard_grads_capacity;
    /* A shard's reply: the values (and max mode's places), and where the
     * combine finds them: part p's values at part_values + p * part_stride,
     * its places at places + p * places_stride (host or, on the device path,
     * device memory). */
    size_t reply_bytes, part_stride, places_stride;
    const float *part_values;
    const uint32_t *places;
    /* device buffers (aliases of the host ones on the CPU) */
    float *d_params, *d_grads, *d_pooled, *d_grad_pooled;
    /* The device path (EMBER_MEM_CUDA from network_path): replies land in
     * d_parts (shard p's at p * d_part_stride), combined on the device;
     * pushes leave from d_shard_grads.  Else staged through host buffers. */
    ember_mem_type_t net_mem;
    int rdma;
    float *d_parts, *d_shard_grads;
    size_t d_part_stride;
    uint32_t *d_counts, *d_bag_counts;
    int16_t *d_winner;
    int64_t *d_targets;
    size_t d_bags_capacity;
    /* the dense MLP: sizes[0] = dim .. sizes[layers] = classes */
    size_t layers, sizes[EMBER_MAX_HIDDEN + 2], widest;
    float *d_z[EMBER_MAX_HIDDEN + 1];   /* pre-activation of each layer */
    float *d_act[EMBER_MAX_HIDDEN + 1]; /* ReLU outputs (inputs of layer l) */
    float *d_g[2];                      /* gradient scratch, ping-pong */
    ember_device_req_t *buckets[EMBER_MAX_HIDDEN + 1];
    uint32_t *bag_counts;
    int16_t *winner;
    size_t bag_capacity, winner_capacity;
    float *losses;
    uint64_t steps; /* this trainer's, in all */
    char err[512];
};

/* The buffers that meet the network (lookup replies, gradient pushes) and
 * the pooled vectors the device copies: the device's fastest host memory
 * (pinned on a GPU, so copies go by DMA), grown rarely and reused every
 * step.  Contents are not kept when a buffer grows. */
static int host_reserve(trainer_t *trainer, void **ptr, size_t *capacity, size_t count, size_t elem)
{
    if (count <= *capacity)
        return 1;
    trainer->dev->host_free(trainer->device, *ptr);
    *ptr = NULL;
    *capacity = 0;
    size_t want = count * 2 + 16;
    if (trainer->dev->host_alloc(trainer->device, want * elem, ptr) != EMBER_OK)
        return 0;
    *capacity = want;
    return 1;
}
#define HOST_RESERVE(trainer, ptr, capacity, count) \
    host_reserve((trainer), (void **)&(ptr), &(capacity), (count), sizeof(*(ptr)))

static ember_status_t trainer_fail(trainer_t *trainer, ember_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* An argument may be trainer->err itself (a cause wrapped in context). */
    ember_status_vtext(trainer->err, sizeof(trainer->err), status, fmt, ap);
    va_end(ap);
    ember_error("trainer", "%s", trainer->err);
    return status;
}

ember_status_t ember_trainer_start_check(const void *data, size_t length, int index,
                                         ember_msg_train_start_t *spec_p, size_t *nparams_p,
                                         char *err, size_t err_length)
{
    ember_msg_train_start_t spec;

    if (length < sizeof(spec))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "trainer%d: bad or repeated TRAIN_START", index);
    memcpy(&spec, data, sizeof(spec));
    spec.replay_path[EMBER_PATH_MAX - 1] = '\0';
    size_t sizes[EMBER_MAX_HIDDEN + 2], nparams = 0, layers = 0;
    int widths_ok = spec.nhidden <= EMBER_MAX_HIDDEN;
    for (uint32_t h = 0; widths_ok && h < spec.nhidden; h++)
        widths_ok = spec.hidden[h] > 0 && spec.hidden[h] <= 65536;
    if (widths_ok) {
        layers = ember_dense_sizes(&spec, sizes);
        nparams = ember_dense_offset(sizes, layers);
    }
    if (spec.trainer != (uint32_t)index || spec.dim == 0 || spec.classes == 0 || spec.num_ps == 0 ||
        spec.dim > 65536 || spec.classes > 65536 || !widths_ok ||
        length != sizeof(spec) + nparams * sizeof(float))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "trainer%d: TRAIN_START does not fit (trainer %u, dim "
                                 "%u, classes %u, %zu bytes)",
                                 index, spec.trainer, spec.dim, spec.classes, length);
    /* What the batches are drawn and checked by, within a job's limits
     * (engine/train/job.c): no rows, or a range of indices upside down, would
     * have the draw divide by zero or allocate 2^64 indices. */
    if (spec.rows < 1 || spec.min_indices > spec.max_indices || spec.padding_idx < -1 ||
        spec.padding_idx >= spec.rows || spec.mode > EMBER_BAG_MAX || spec.data > EMBER_DATA_REPLAY)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "trainer%d: TRAIN_START is not a job's (rows %lld, "
                                 "indices %u to %u, padding_idx %lld, mode %u, data %u)",
                                 index, (long long)spec.rows, spec.min_indices, spec.max_indices,
                                 (long long)spec.padding_idx, spec.mode, spec.data);
    *spec_p = spec;
    *nparams_p = nparams;
    return EMBER_OK;
}

static void on_start(ember_rpc_req_t *req, void *arg)
{
    trainer_t *trainer = arg;
    size_t length, nparams;
    const uint8_t *data = ember_rpc_req_data(req, &length);
    ember_msg_train_start_t spec;
    char err[200];

    if (trainer->started) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM,
                              "trainer%d: bad or repeated TRAIN_START", trainer->index);
        return;
    }
    ember_status_t status = ember_trainer_start_check(data, length, trainer->index, &spec, &nparams,
                                                      err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    trainer->params = malloc(nparams * sizeof(float));
    if (!trainer->params) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    memcpy(trainer->params, data + sizeof(spec), nparams * sizeof(float));
    trainer->nparams = nparams;
    trainer->spec = spec;
    trainer->start_req = req; /* answered when training ends */
    trainer->started = 1;
}

static void on_abort(ember_rpc_req_t *req, void *arg)
{
    trainer_t *trainer = arg;
    size_t length;
    const char *text = ember_rpc_req_data(req, &length);
    snprintf(trainer->abort_text, sizeof(trainer->abort_text), "%.*s",
             (int)(length > 200 ? 200 : length), text);
    trainer->aborted = 1;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* Wait for a future, but give up when the master aborts the job. */
static ember_status_t trainer_wait(trainer_t *trainer, ember_future_t *future)
{
    ember_status_t status;
    while ((status = ember_future_test(future)) == EMBER_INPROGRESS) {
        if (trainer->aborted)
            return EMBER_ERR_CANCELED;
        ember_tp_wait(trainer->tp, 0.2);
    }
    return status;
}

/* The master is gone: the job is over, whatever else failed because of it
 * (a PS that stopped with it). */
static ember_status_t master_lost(trainer_t *trainer, uint64_t step)
{
    int master = (int)trainer->spec.master_rank;
    return trainer_fail(trainer, EMBER_ERR_PEER_LOST,
                        "trainer %d step %llu: the master "
                        "(rank %d) was lost: %s",
                        trainer->index, (unsigned long long)step, master,
                        ember_tp_peer_reason(trainer->tp, master));
}

static ember_status_t future_error(trainer_t *trainer, ember_future_t *future,
                                   ember_status_t status, const char *what, uint64_t step)
{
    size_t length = 0;
    const char *text = ember_future_data(future, &length);
    if (ember_tp_peer_lost(trainer->tp, (int)trainer->spec.master_rank))
        return master_lost(trainer, step);
    if (status == EMBER_ERR_CANCELED && trainer->aborted)
        return trainer_fail(trainer, status, "trainer %d step %llu: job aborted: %s",
                            trainer->index, (unsigned long long)step, trainer->abort_text);
    return trainer_fail(trainer, status, "trainer %d step %llu: %s failed: %.*s", trainer->index,
                        (unsigned long long)step, what, (int)(length > 300 ? 300 : length),
                        text ? text : "");
}

/* Room for more of a shard's entries (rows, weights, places); an array that
 * cannot grow stays as it was. */
static int shard_entries_grow(shard_t *shard)
{
    size_t count = shard->entries_capacity + 1;
    size_t rows = shard->entries_capacity, weights = rows, places = rows;
    if (!RESERVE(shard->rows, rows, count) || !RESERVE(shard->weights, weights, count) ||
        !RESERVE(shard->places, places, count))
        return 0;
    shard->entries_capacity = rows; /* all three grew alike */
    return 1;
}

/* Split the batch by shard and build each shard's LOOKUP message. */
static ember_status_t build_requests(trainer_t *trainer, const ember_batch_t *batch, uint64_t step)
{
    const ember_msg_train_start_t *spec = &trainer->spec;
    uint32_t P = spec->num_ps;
    int weighted = batch->weights != NULL;

    if (!RESERVE(trainer->bag_counts, trainer->bag_capacity, batch->bags) ||
        !RESERVE(trainer->counts, trainer->counts_capacity, P * batch->bags))
        return EMBER_ERR_NO_MEMORY;
    memset(trainer->bag_counts, 0, batch->bags * sizeof(uint32_t));
    memset(trainer->counts, 0, P * batch->bags * sizeof(uint32_t));
    for (uint32_t p = 0; p < P; p++) {
        shard_t *shard = &trainer->shards[p];
        shard->counts = trainer->counts + (size_t)p * batch->bags;
        shard->entries = 0;
    }
    for (size_t b = 0; b < batch->bags; b++) {
        size_t end = b + 1 < batch->bags ? (size_t)batch->offsets[b + 1] : batch->n;
        for (size_t i = (size_t)batch->offsets[b]; i < end; i++) {
            int64_t row = batch->indices[i];
            if (row == spec->padding_idx)
                continue; /* contributes nothing, is not counted */
            shard_t *shard = &trainer->shards[(uint64_t)row % P];
            if (shard->entries == shard->entries_capacity && !shard_entries_grow(shard))
                return EMBER_ERR_NO_MEMORY;
            shard->rows[shard->entries] = row;
            shard->weights[shard->entries] = weighted ? batch->weights[i] : 1.0f;
            shard->places[shard->entries] = (uint32_t)(i - (size_t)batch->offsets[b]);
            shard->entries++;
            shard->counts[b]++;
            trainer->bag_counts[b]++;
        }
    }
    for (uint32_t p = 0; p < P; p++) {
        shard_t *shard = &trainer->shards[p];
        size_t n = shard->entries, bags = batch->bags;
        if (n + 1 > shard->unique_capacity) {
            size_t capacity = 2 * n + 64;
            int64_t *unique = realloc(shard->unique, capacity * sizeof(*unique));
            int64_t *inverse = unique ? realloc(shard->inverse, capacity * sizeof(*inverse)) : NULL;
            if (unique)
                shard->unique = unique;
            if (!inverse)
                return EMBER_ERR_NO_MEMORY;
            shard->inverse = inverse;
            shard->unique_capacity = capacity;
        }
        /* Each row travels once; the PS expands it back per index. */
        EMBER_CHECK(ember_bag_dedup(shard->rows, n, -1, shard->unique, shard->inverse,
                                    &shard->nunique));
        ember_msg_lookup_t msg = {
                .table_id = spec->table_id,
                .trainer = (uint32_t)trainer->index,
                .step = step,
                .flags = (weighted ? EMBER_LOOKUP_WEIGHTS : 0) |
                         (spec->mode == EMBER_BAG_MAX ? EMBER_LOOKUP_MAX : 0) |
                         (spec->half_replies ? EMBER_LOOKUP_HALF_REPLY : 0),
                .bags = (uint32_t)bags,
                .unique = (uint32_t)shard->nunique,
                .indices = (uint32_t)n,
        };
        shard->request_bytes = sizeof(msg) + ember_msg_lookup_bytes(&msg);
        if (!RESERVE(shard->request, shard->request_capacity, shard->request_bytes))
            return EMBER_ERR_NO_MEMORY;
        uint8_t *out = shard->request;
        memcpy(out, &msg, sizeof(msg));
        out += sizeof(msg);
        uint32_t offset = 0;
        for (size_t b = 0; b < bags; b++) {
            memcpy(out, &offset, 4);
            out += 4;
            offset += shard->counts[b];
        }
        memcpy(out, shard->unique, 8 * shard->nunique);
        out += 8 * shard->nunique;
        for (size_t i = 0; i < n; i++) {
            uint32_t slot = (uint32_t)shard->inverse[i];
            memcpy(out, &slot, 4);
            out += 4;
        }
        if (weighted) {
            memcpy(out, shard->weights, 4 * n);
            out += 4 * n;
        }
        if (spec->mode == EMBER_BAG_MAX) {
            memcpy(out, shard->places, 4 * n);
            out += 4 * n;
        }
        trainer->reply_bytes = (size_t)ember_msg_lookup_reply_bytes(&msg, spec->dim);
    }
    /* Replies land here (on the device path, in d_parts): shard p's at
     * p * reply_bytes, fp32 in parts or fp16 in parts_half (then widened
     * into parts, p's at p * bags * dim). */
    size_t values = P * batch->bags * spec->dim, replies = P * trainer->reply_bytes;
    if (!trainer->rdma && (!HOST_RESERVE(trainer, trainer->parts, trainer->parts_capacity,
                                         spec->half_replies ? values : replies / sizeof(float)) ||
                           (spec->half_replies && !HOST_RESERVE(trainer, trainer->parts_half,
                                                                trainer->parts_half_capacity,
                                                                replies / sizeof(uint16_t)))))
        return EMBER_ERR_NO_MEMORY;
    return EMBER_OK;
}

/* A one-way gradient push has left (or was lost with its peer). */
static void push_done(void *arg, ember_status_t status)
{
    shard_t *shard = arg;
    shard->pushing = 0;
    shard->push_status = status;
}

/* Host <-> device copies; nothing to do when the device is the host. */
static ember_status_t to_device(trainer_t *trainer, void *dst, const void *src, size_t bytes)
{
    if (trainer->on_host)
        return dst == src ? EMBER_OK : (memcpy(dst, src, bytes), EMBER_OK);
    return trainer->dev->mem_copy(trainer->device, dst, src, bytes, EMBER_COPY_HOST_TO_DEVICE);
}

static ember_status_t to_host(trainer_t *trainer, void *dst, const void *src, size_t bytes)
{
    if (trainer->on_host)
        return dst == src ? EMBER_OK : (memcpy(dst, src, bytes), EMBER_OK);
    return trainer->dev->mem_copy(trainer->device, dst, src, bytes, EMBER_COPY_DEVICE_TO_HOST);
}

static void device_free_step_buffers(trainer_t *trainer)
{
    const ember_device_ops_t *dev = trainer->dev;
    if (!trainer->on_host) {
        dev->mem_free(trainer->device, trainer->d_pooled);
        dev->mem_free(trainer->device, trainer->d_grad_pooled);
        dev->mem_free(trainer->device, trainer->d_targets);
    }
    for (size_t l = 0; l < trainer->layers; l++) {
        dev->mem_free(trainer->device, trainer->d_z[l]);
        if (l > 0)
            dev->mem_free(trainer->device, trainer->d_act[l]);
        trainer->d_z[l] = trainer->d_act[l] = NULL;
    }
    for (int k = 0; k < 2; k++) {
        dev->mem_free(trainer->device, trainer->d_g[k]);
        trainer->d_g[k] = NULL;
    }
    trainer->d_pooled = trainer->d_grad_pooled = NULL;
    trainer->d_targets = NULL;
    if (trainer->rdma) {
        dev->mem_free(trainer->device, trainer->d_parts);
        dev->mem_free(trainer->device, trainer->d_shard_grads);
        dev->mem_free(trainer->device, trainer->d_counts);
        dev->mem_free(trainer->device, trainer->d_bag_counts);
        dev->mem_free(trainer->device, trainer->d_winner);
        trainer->d_parts = trainer->d_shard_grads = NULL;
        trainer->d_counts = trainer->d_bag_counts = NULL;
        trainer->d_winner = NULL;
    }
}

/* Device buffers for @bags bags: grown rarely (doubling), never per step. */
static ember_status_t device_reserve(trainer_t *trainer, size_t bags)
{
    const ember_device_ops_t *dev = trainer->dev;
    ember_device_t *device = trainer->device;
    size_t dim = trainer->spec.dim;

    if (bags <= trainer->d_bags_capacity && trainer->d_g[0]) {
        if (trainer->on_host) { /* the host buffers may have moved */
            trainer->d_pooled = trainer->pooled;
            trainer->d_grad_pooled = trainer->grad_pooled;
        }
        trainer->d_act[0] = trainer->d_pooled;
        return EMBER_OK;
    }
    device_free_step_buffers(trainer);
    trainer->d_bags_capacity = 2 * bags;
    size_t cap = trainer->d_bags_capacity;
    if (trainer->on_host) {
        trainer->d_pooled = trainer->pooled;
        trainer->d_grad_pooled = trainer->grad_pooled;
    } else {
        EMBER_CHECK(dev->mem_alloc(device, cap * dim * sizeof(float), (void **)&trainer->d_pooled));
        EMBER_CHECK(dev->mem_alloc(device, cap * dim * sizeof(float),
                                   (void **)&trainer->d_grad_pooled));
        EMBER_CHECK(dev->mem_alloc(device, cap * sizeof(int64_t), (void **)&trainer->d_targets));
    }
    if (trainer->rdma) {
        size_t P = trainer->spec.num_ps;
        /* A whole reply: the values, and max mode's places after them. */
        trainer->d_part_stride = cap * dim * (trainer->spec.mode == EMBER_BAG_MAX ? 2 : 1);
        EMBER_CHECK(dev->mem_alloc(device, P * trainer->d_part_stride * sizeof(float),
                                   (void **)&trainer->d_parts));
        EMBER_CHECK(dev->mem_alloc(device, P * trainer->d_part_stride * sizeof(float),
                                   (void **)&trainer->d_shard_grads));
        EMBER_CHECK(
                dev->mem_alloc(device, P * cap * sizeof(uint32_t), (void **)&trainer->d_counts));
        EMBER_CHECK(
                dev->mem_alloc(device, cap * sizeof(uint32_t), (void **)&trainer->d_bag_counts));
        EMBER_CHECK(
                dev->mem_alloc(device, cap * dim * sizeof(int16_t), (void **)&trainer->d_winner));
    }
    trainer->d_act[0] = trainer->d_pooled;
    for (size_t l = 0; l < trainer->layers; l++) {
        size_t out = trainer->sizes[l + 1] * cap * sizeof(float);
        EMBER_CHECK(dev->mem_alloc(device, out, (void **)&trainer->d_z[l]));
        if (l + 1 < trainer->layers)
            EMBER_CHECK(dev->mem_alloc(device, out, (void **)&trainer->d_act[l + 1]));
    }
    for (int k = 0; k < 2; k++)
        EMBER_CHECK(dev->mem_alloc(device, trainer->widest * cap * sizeof(float),
                                   (void **)&trainer->d_g[k]));
    return EMBER_OK;
}

/* Where the combine finds the shards' replies, which arrived as
 * ember_msg_lookup_reply_bytes() says: values, then max mode's places.
 * fp16 values are widened into parts first (their places stay where they
 * came). */
static void locate_parts(trainer_t *trainer, size_t bags)
{
    const ember_msg_train_start_t *spec = &trainer->spec;
    const size_t values = bags * spec->dim, stride = trainer->reply_bytes / 4;
    const uint8_t *replies = trainer->rdma        ? (const uint8_t *)trainer->d_parts
                             : spec->half_replies ? (const uint8_t *)trainer->parts_half
                                                  : (const uint8_t *)trainer->parts;
    trainer->part_values = (const float *)replies;
    trainer->part_stride = trainer->rdma ? trainer->d_part_stride : stride;
    trainer->places_stride = trainer->part_stride;
    if (spec->half_replies) { /* staged: fp16 replies never go to the device */
        for (uint32_t p = 0; p < spec->num_ps; p++)
            ember_half_to_float_n((const uint16_t *)(replies + p * trainer->reply_bytes),
                                  trainer->parts + p * values, values);
        trainer->part_values = trainer->parts;
        trainer->part_stride = values;
    }
    trainer->places = NULL;
    if (spec->mode == EMBER_BAG_MAX) {
        ember_msg_lookup_t reply = {.bags = (uint32_t)bags,
                                    .flags = EMBER_LOOKUP_MAX |
                                             (spec->half_replies ? EMBER_LOOKUP_HALF_REPLY : 0)};
        trainer->places =
                (const uint32_t *)(replies + ember_msg_lookup_places_at(&reply, spec->dim));
    }
}

static ember_status_t trainer_step(trainer_t *trainer, ember_data_t *data, uint64_t step,
                                   float *loss_p, size_t *bags_p)
{
    const ember_msg_train_start_t *spec = &trainer->spec;
    ember_tp_t *tp = trainer->tp;
    uint32_t P = spec->num_ps;
    size_t dim = spec->dim, classes = spec->classes;
    ember_batch_t batch;
    char msg[320];
    ember_status_t status;
    const char *table = "emb";

    status = ember_data_next(data, step, &batch, msg, sizeof(msg));
    if (status != EMBER_OK)
        return trainer_fail(trainer, status, "trainer %d step %llu: no batch: %s", trainer->index,
                            (unsigned long long)step, msg);
    ember_bag_batch_t check = {.indices = batch.indices,
                               .n = batch.n,
                               .offsets = batch.offsets,
                               .bags = batch.bags,
                               .weights = batch.weights,
                               .n_weights = batch.n_weights};
    ember_bag_opts_t opts = {.mode = (ember_bag_mode_t)spec->mode,
                             .padding_idx = spec->padding_idx};
    status = ember_bag_validate(&check, &opts, spec->rows, msg, sizeof(msg));
    if (status != EMBER_OK)
        return trainer_fail(trainer, status, "table %s: trainer %d step %llu: %s", table,
                            trainer->index, (unsigned long long)step, msg);
    for (size_t b = 0; b < batch.bags; b++) {
        if (batch.targets[b] < 0 || (uint64_t)batch.targets[b] >= classes)
            return trainer_fail(trainer, EMBER_ERR_OUT_OF_RANGE,
                                "trainer %d step %llu: target %lld of bag %zu is out "
                                "of range [0, %zu)",
                                trainer->index, (unsigned long long)step,
                                (long long)batch.targets[b], b, classes);
    }
    size_t bags = batch.bags;
    if (bags == 0)
        return trainer_fail(trainer, EMBER_ERR_INVALID_PARAM,
                            "trainer %d step %llu: batch has no bags", trainer->index,
                            (unsigned long long)step);
    EMBER_CHECK(build_requests(trainer, &batch, step));

    /* The previous step's one-way pushes must have left (their buffers are
     * reused now); a refusal by the PS comes back with this step's lookup. */
    for (uint32_t p = 0; p < P; p++) {
        shard_t *shard = &trainer->shards[p];
        while (shard->pushing && !trainer->aborted)
            ember_tp_wait(tp, 0.2);
        if (shard->push_status != EMBER_OK)
            return trainer_fail(trainer, shard->push_status,
                                "trainer %d step %llu: the gradient push to ps%u was "
                                "lost: %s",
                                trainer->index, (unsigned long long)step - 1, p,
                                ember_status_string(shard->push_status));
        if (!shard->push)
            continue;
        status = trainer_wait(trainer, shard->push);
        if (status != EMBER_OK) {
            status = future_error(trainer, shard->push, status, "gradient push", step - 1);
            return status;
        }
        ember_future_release(shard->push);
        shard->push = NULL;
    }

    /* Forward: one lookup per shard, all in flight together.  On the device
     * path each reply lands in its part of d_parts. */
    const size_t reply_bytes = trainer->reply_bytes;
    if (trainer->rdma)
        EMBER_CHECK(device_reserve(trainer, bags));
    const ember_rpc_param_t to_gpu = {.payload_mem = EMBER_MEM_HOST, .reply_mem = EMBER_MEM_CUDA};
    for (uint32_t p = 0; p < P; p++) {
        shard_t *shard = &trainer->shards[p];
        ember_iov_t iov = {.buffer = shard->request, .length = shard->request_bytes};
        void *reply = trainer->rdma ? (void *)(trainer->d_parts + p * trainer->d_part_stride)
                      : trainer->spec.half_replies
                              ? (void *)((uint8_t *)trainer->parts_half + p * reply_bytes)
                              : (void *)((uint8_t *)trainer->parts + p * reply_bytes);
        status = ember_rpc_call_async(tp, shard->rank, EMBER_OP_LOOKUP, &iov, 1, reply, reply_bytes,
                                      trainer->rdma ? &to_gpu : NULL, &shard->lookup);
        if (status != EMBER_OK)
            return trainer_fail(trainer, status,
                                "trainer %d step %llu: lookup on "
                                "ps%u: %s",
                                trainer->index, (unsigned long long)step, p,
                                ember_status_string(status));
    }
    for (uint32_t p = 0; p < P; p++) {
        shard_t *shard = &trainer->shards[p];
        status = trainer_wait(trainer, shard->lookup);
        if (status == EMBER_OK) {
            size_t got;
            ember_future_data(shard->lookup, &got);
            if (got != reply_bytes)
                status = EMBER_ERR_BAD_MESSAGE;
        }
        if (status != EMBER_OK) {
            future_error(trainer, shard->lookup, status, "lookup", step);
            for (uint32_t q = p; q < P; q++) {
                ember_future_release(trainer->shards[q].lookup);
                trainer->shards[q].lookup = NULL;
            }
            return status;
        }
        ember_future_release(shard->lookup);
        shard->lookup = NULL;
    }
    locate_parts(trainer, bags);

    const ember_device_ops_t *dev = trainer->dev;
    ember_device_t *device = trainer->device;
    if (trainer->rdma) {
        /* The partial pools are on the device: combine them there. */
        EMBER_CHECK(to_device(trainer, trainer->d_counts, trainer->counts,
                              P * bags * sizeof(uint32_t)));
        EMBER_CHECK(to_device(trainer, trainer->d_bag_counts, trainer->bag_counts,
                              bags * sizeof(uint32_t)));
        EMBER_CHECK(dev->parts_combine(
                device, trainer->part_values, trainer->part_stride, P, bags, dim,
                (ember_bag_mode_t)spec->mode, trainer->d_counts, trainer->d_bag_counts,
                trainer->places, trainer->places_stride, trainer->d_pooled, trainer->d_winner));
    } else {
        if (!HOST_RESERVE(trainer, trainer->pooled, trainer->pooled_capacity, bags * dim) ||
            !HOST_RESERVE(trainer, trainer->grad_pooled, trainer->grad_pooled_capacity, bags * dim))
            return EMBER_ERR_NO_MEMORY;
        if (spec->mode == EMBER_BAG_MAX &&
            !RESERVE(trainer->winner, trainer->winner_capacity, bags * dim))
            return EMBER_ERR_NO_MEMORY;
        EMBER_CHECK(device_reserve(trainer, bags));
        ember_bag_parts_combine(trainer->part_values, trainer->part_stride, P, bags, dim,
                                (ember_bag_mode_t)spec->mode, trainer->counts, trainer->bag_counts,
                                trainer->places, trainer->places_stride, trainer->pooled,
                                trainer->winner);
        EMBER_CHECK(
                to_device(trainer, trainer->d_pooled, trainer->pooled, bags * dim * sizeof(float)));
    }

    /* Dense part, loss, backward: on the device. */
    size_t L = trainer->layers;
    const size_t *sizes = trainer->sizes;
    if (trainer->on_host)
        trainer->d_targets = (int64_t *)batch.targets; /* read only */
    EMBER_CHECK(to_device(trainer, trainer->d_targets, batch.targets, bags * sizeof(int64_t)));
    for (size_t l = 0; l < L; l++) {
        const float *w = trainer->d_params + ember_dense_offset(sizes, l);
        const float *bias = w + sizes[l + 1] * sizes[l];
        EMBER_CHECK(dev->linear_forward(device, trainer->d_act[l], bags, sizes[l], sizes[l + 1], w,
                                        bias, trainer->d_z[l]));
        if (l + 1 < L)
            EMBER_CHECK(dev->relu_forward(device, trainer->d_z[l], bags * sizes[l + 1],
                                          trainer->d_act[l + 1]));
    }
    float loss = 0.0f;
    float *g = trainer->d_g[0];
    status = dev->cross_entropy(device, trainer->d_z[L - 1], bags, classes, trainer->d_targets,
                                &loss, g);
    if (status != EMBER_OK || !isfinite(loss))
        return trainer_fail(trainer, status == EMBER_OK ? EMBER_ERR_NUMERIC : status,
                            "trainer %d step %llu: the loss is not finite (%s); "
                            "nothing of this step is applied",
                            trainer->index, (unsigned long long)step,
                            ember_status_string(status == EMBER_OK ? EMBER_ERR_NUMERIC : status));

    /* Backward, last layer first; each layer's gradients go to the
     * allreduce as a bucket as soon as they exist, while backward goes on. */
    for (size_t l = L; l-- > 0;) {
        size_t offset = ember_dense_offset(sizes, l);
        size_t count = ember_dense_offset(sizes, l + 1) - offset;
        const float *w = trainer->d_params + offset;
        float *gw = trainer->d_grads + offset, *gb = gw + sizes[l + 1] * sizes[l];
        float *gx = l == 0 ? trainer->d_grad_pooled : trainer->d_g[g == trainer->d_g[0] ? 1 : 0];
        EMBER_CHECK(dev->linear_backward(device, trainer->d_act[l], bags, sizes[l], sizes[l + 1], w,
                                         g, 0, gx, gw, gb));
        status = dev->allreduce_start(trainer->comm, gw, count, 1, &trainer->buckets[l]);
        if (status != EMBER_OK) {
            for (size_t k = l + 1; k < L; k++)
                dev->allreduce_wait(trainer->buckets[k]);
            return trainer_fail(trainer, status, "trainer %d step %llu: allreduce: %s",
                                trainer->index, (unsigned long long)step,
                                dev->comm_error(trainer->comm));
        }
        if (l > 0)
            EMBER_CHECK(dev->relu_backward(device, trainer->d_z[l - 1], gx, bags * sizes[l], gx));
        g = gx;
    }
    if (trainer->rdma) {
        /* Each shard's gradient, on the device; complete before UCX reads it. */
        EMBER_CHECK(dev->parts_split(device, trainer->d_grad_pooled, P, bags, dim,
                                     (ember_bag_mode_t)spec->mode, trainer->d_bag_counts,
                                     trainer->d_winner, trainer->d_shard_grads,
                                     trainer->d_part_stride));
        EMBER_CHECK(dev->synchronize(device));
    } else {
        /* d(loss)/d(each shard's part), as the PS's sum/max backward wants it. */
        EMBER_CHECK(to_host(trainer, trainer->grad_pooled, trainer->d_grad_pooled,
                            bags * dim * sizeof(float)));
        if (!HOST_RESERVE(trainer, trainer->shard_grads, trainer->shard_grads_capacity,
                          P * bags * dim))
            return EMBER_ERR_NO_MEMORY;
        ember_bag_parts_split(trainer->grad_pooled, P, bags, dim, (ember_bag_mode_t)spec->mode,
                              trainer->bag_counts, trainer->winner, trainer->shard_grads,
                              bags * dim);
    }
    const ember_mem_type_t grad_mem = trainer->rdma ? EMBER_MEM_CUDA : EMBER_MEM_HOST;
    for (uint32_t p = 0; p < P; p++) {
        shard_t *shard = &trainer->shards[p];
        float *grad = trainer->rdma ? trainer->d_shard_grads + p * trainer->d_part_stride
                                    : trainer->shard_grads + p * bags * dim;
        shard->grad_msg = (ember_msg_grad_t){.table_id = spec->table_id,
                                             .trainer = (uint32_t)trainer->index,
                                             .step = step,
                                             .flags = EMBER_GRAD_APPLY,
                                             .bags = (uint32_t)bags};
        ember_iov_t iov[2] = {{&shard->grad_msg, sizeof(shard->grad_msg)},
                              {grad, bags * dim * sizeof(float)}};
        const ember_rpc_param_t from = {.payload_mem = grad_mem, .reply_mem = EMBER_MEM_HOST};
        /* One-way (the PS reports a refused gradient at our next lookup),
         * but the last step's is a call: its answer says all went in. */
        if (step + 1 < trainer->steps) {
            shard->pushing = 1;
            status =
                    ember_rpc_send(tp, shard->rank, EMBER_OP_GRAD, iov, 2, &from, push_done, shard);
        } else {
            status = ember_rpc_call_async(tp, shard->rank, EMBER_OP_GRAD, iov, 2, NULL, 0, &from,
                                          &shard->push);
        }
        if (status != EMBER_OK)
            return trainer_fail(trainer, status,
                                "trainer %d step %llu: gradient "
                                "push to ps%u: %s",
                                trainer->index, (unsigned long long)step, p,
                                ember_status_string(status));
    }
    status = EMBER_OK;
    for (size_t l = L; l-- > 0;) {
        ember_status_t bucket;
        while ((bucket = dev->allreduce_test(trainer->buckets[l])) == EMBER_INPROGRESS &&
               !trainer->aborted)
            ember_tp_wait(tp, 0.2);
        dev->allreduce_wait(trainer->buckets[l]);
        trainer->buckets[l] = NULL;
        if (status == EMBER_OK && bucket != EMBER_OK)
            status = bucket;
    }
    if (status != EMBER_OK)
        return trainer_fail(trainer, status,
                            "trainer %d step %llu: dense allreduce "
                            "failed: %s",
                            trainer->index, (unsigned long long)step,
                            trainer->aborted ? trainer->abort_text
                                             : dev->comm_error(trainer->comm));
    /* The dense optimizer steps on the host copy (the dense part is small). */
    EMBER_CHECK(
            to_host(trainer, trainer->grads, trainer->d_grads, trainer->nparams * sizeof(float)));
    EMBER_CHECK(ember_opt_step_dense(trainer->optimizer, trainer->params, trainer->grads,
                                     trainer->nparams));
    EMBER_CHECK(to_device(trainer, trainer->d_params, trainer->params,
                          trainer->nparams * sizeof(float)));
    *loss_p = loss;
    *bags_p = bags;
    return EMBER_OK;
}

static ember_status_t trainer_setup(trainer_t *trainer)
{
    const ember_msg_train_start_t *spec = &trainer->spec;
    ember_opt_config_t dense = spec->optimizer;

    trainer->layers = ember_dense_sizes(spec, trainer->sizes);
    for (size_t l = 0; l <= trainer->layers; l++) {
        if (trainer->sizes[l] > trainer->widest)
            trainer->widest = trainer->sizes[l];
    }
    /* The device path, unless the replies are fp16 (widened on the host). */
    trainer->rdma = !trainer->on_host && trainer->net_mem == EMBER_MEM_CUDA;
    if (trainer->rdma && spec->half_replies) {
        trainer->rdma = 0;
        ember_info("trainer",
                   "trainer %d: fp16 replies are widened on the host: this "
                   "job's replies and pushes go through pinned host buffers",
                   trainer->index);
    }
    trainer->shards = calloc(spec->num_ps, sizeof(*trainer->shards));
    trainer->grads = calloc(trainer->nparams, sizeof(float));
    if (!trainer->shards || !trainer->grads)
        return EMBER_ERR_NO_MEMORY;
    for (uint32_t p = 0; p < spec->num_ps; p++)
        trainer->shards[p].rank = (int)(spec->first_ps_rank + p);
    /* Row-wise Adagrad is a table optimizer; the dense layer uses Adagrad. */
    if (dense.kind == EMBER_OPT_ROWWISE_ADAGRAD) {
        ember_opt_config_default(EMBER_OPT_ADAGRAD, dense.lr, &dense);
    }
    EMBER_CHECK(
            ember_opt_create(&dense, 1, trainer->nparams, EMBER_OPT_DENSE, &trainer->optimizer));
    if (trainer->on_host) {
        trainer->d_params = trainer->params;
        trainer->d_grads = trainer->grads;
        return EMBER_OK;
    }
    size_t bytes = trainer->nparams * sizeof(float);
    EMBER_CHECK(trainer->dev->mem_alloc(trainer->device, bytes, (void **)&trainer->d_params));
    EMBER_CHECK(trainer->dev->mem_alloc(trainer->device, bytes, (void **)&trainer->d_grads));
    return to_device(trainer, trainer->d_params, trainer->params, bytes);
}

static void trainer_cleanup(trainer_t *trainer)
{
    /* A one-way push still leaving reads its buffers: let it go (bounded). */
    double until = ember_time_now() + 2.0;
    for (uint32_t p = 0; trainer->shards && p < trainer->spec.num_ps; p++) {
        while (trainer->shards[p].pushing && ember_time_now() < until)
            ember_tp_wait(trainer->tp, 0.05);
    }
    for (uint32_t p = 0; trainer->shards && p < trainer->spec.num_ps; p++) {
        shard_t *shard = &trainer->shards[p];
        ember_future_release(shard->lookup);
        ember_future_release(shard->push);
        free(shard->request);
        free(shard->rows);
        free(shard->weights);
        free(shard->places);
        free(shard->unique);
        free(shard->inverse);
    }
    free(trainer->shards);
    if (trainer->device) {
        device_free_step_buffers(trainer);
        if (!trainer->on_host) {
            trainer->dev->mem_free(trainer->device, trainer->d_params);
            trainer->dev->mem_free(trainer->device, trainer->d_grads);
        }
        trainer->dev->host_free(trainer->device, trainer->pooled);
        trainer->dev->host_free(trainer->device, trainer->grad_pooled);
        trainer->dev->host_free(trainer->device, trainer->parts);
        trainer->dev->host_free(trainer->device, trainer->parts_half);
        trainer->dev->host_free(trainer->device, trainer->shard_grads);
    }
    ember_opt_destroy(trainer->optimizer);
    free(trainer->params);
    free(trainer->counts);
    free(trainer->grads);
    free(trainer->bag_counts);
    free(trainer->winner);
    free(trainer->losses);
}

static ember_status_t trainer_train(trainer_t *trainer, ember_data_t *data,
                                    ember_msg_train_done_t *done_p)
{
    const ember_msg_train_start_t *spec = &trainer->spec;
    uint64_t steps = ember_data_steps(data);
    uint32_t per_epoch = spec->data == EMBER_DATA_REPLAY ? (uint32_t)steps : spec->batches;
    double start = ember_time_now(), epoch_start = start, loss_sum = 0.0;
    uint64_t bags_total = 0, epoch_bags = 0, epoch_steps = 0;
    ember_future_t *report = NULL;
    ember_msg_epoch_report_t msg;
    ember_status_t status = EMBER_OK;

    trainer->steps = steps;
    trainer->losses = calloc(steps ? steps : 1, sizeof(float));
    if (!trainer->losses)
        return EMBER_ERR_NO_MEMORY;
    for (uint64_t step = 0; step < steps; step++) {
        float loss = 0.0f;
        size_t bags = 0;
        if (trainer->aborted)
            return trainer_fail(trainer, EMBER_ERR_CANCELED,
                                "trainer %d: job aborted: "
                                "%s",
                                trainer->index, trainer->abort_text);
        if (ember_tp_peer_lost(trainer->tp, (int)spec->master_rank))
            return master_lost(trainer, step);
        status = trainer_step(trainer, data, step, &loss, &bags);
        if (status != EMBER_OK) {
            /* Whatever failed, a lost master is the cause (its death ended
             * the others, which this step then found gone): its loss gets a
             * moment to be noticed here too before the error is reported. */
            double until = ember_time_now() + 0.25;
            while (!ember_tp_peer_lost(trainer->tp, (int)spec->master_rank) && !trainer->aborted &&
                   ember_time_now() < until)
                ember_tp_wait(trainer->tp, 0.01);
            if (ember_tp_peer_lost(trainer->tp, (int)spec->master_rank))
                status = master_lost(trainer, step);
            break;
        }
        trainer->losses[step] = loss;
        loss_sum += loss;
        bags_total += bags;
        epoch_bags += bags;
        epoch_steps++;
        if (epoch_steps == per_epoch || step + 1 == steps) {
            double now = ember_time_now();
            if (report) { /* one report in flight at a time; it owns `msg` */
                if (trainer_wait(trainer, report) != EMBER_OK)
                    ember_warn("trainer", "trainer %d: an epoch report was lost", trainer->index);
                ember_future_release(report);
                report = NULL;
            }
            msg = (ember_msg_epoch_report_t){.trainer = (uint32_t)trainer->index,
                                             .epoch = (uint32_t)(step / per_epoch),
                                             .steps = epoch_steps,
                                             .bags = epoch_bags,
                                             .loss_sum = loss_sum,
                                             .seconds = now - epoch_start};
            ember_iov_t iov = {.buffer = &msg, .length = sizeof(msg)};
            ember_rpc_call_async(trainer->tp, (int)spec->master_rank, EMBER_OP_EPOCH_REPORT, &iov,
                                 1, NULL, 0, NULL, &report);
            epoch_start = now;
            epoch_bags = epoch_steps = 0;
            loss_sum = 0.0;
        }
    }
    if (report) {
        trainer_wait(trainer, report);
        ember_future_release(report);
    }
    /* The last step's pushes: the PS must have taken them. */
    for (uint32_t p = 0; status == EMBER_OK && p < spec->num_ps; p++) {
        shard_t *shard = &trainer->shards[p];
        if (!shard->push)
            continue;
        ember_status_t push = trainer_wait(trainer, shard->push);
        if (push != EMBER_OK)
            status = future_error(trainer, shard->push, push, "gradient push", steps - 1);
    }
    done_p->steps = steps;
    done_p->bags = bags_total;
    done_p->seconds = ember_time_now() - start;
    return status;
}

/* A late start or abort must find no handler, not a returned frame. */
static void trainer_unregister(ember_tp_t *tp)
{
    ember_rpc_register(tp, EMBER_OP_TRAIN_START, NULL, NULL);
    ember_rpc_register(tp, EMBER_OP_ABORT, NULL, NULL);
}

ember_status_t ember_trainer_run(ember_tp_t *tp, int index, int trainers, const char *device,
                                 int local_rank)
{
    trainer_t trainer = {.tp = tp, .index = index, .trainers = trainers};
    int *ranks = malloc((size_t)trainers * sizeof(int));
    ember_data_t *data = NULL;
    ember_msg_train_done_t done = {0};
    ember_status_t status;

    if (!ranks)
        return EMBER_ERR_NO_MEMORY;
    for (int t = 0; t < trainers; t++)
        ranks[t] = t;
    status = ember_device_open(device, local_rank, &trainer.device);
    if (status == EMBER_OK) {
        const char *path;
        trainer.dev = ember_device_ops(trainer.device);
        trainer.on_host = ember_device_mem_type(trainer.device) == EMBER_MEM_HOST;
        /* How replies and pushes reach the device: decided and logged once. */
        status = trainer.dev->network_path(trainer.device, &trainer.net_mem, &path);
    }
    if (status == EMBER_OK) {
        /* NCCL on GPUs, the ring over the transport on the CPU. */
        status = trainer.dev->comm_create(trainer.device, tp, ranks, trainers,
                                          EMBER_OP_ALLREDUCE_BASE, &trainer.comm);
    }
    free(ranks);
    if (status != EMBER_OK) {
        ember_error("trainer", "trainer %d: no %s device or communicator: %s", index, device,
                    ember_status_string(status));
        ember_device_close(trainer.device);
        return status;
    }
    /* The handlers take this frame's state: unregistered on every way out. */
    ember_rpc_register(tp, EMBER_OP_TRAIN_START, on_start, &trainer);
    ember_rpc_register(tp, EMBER_OP_ABORT, on_abort, &trainer);
    /* A failed barrier ends the job (it said who did not come); the master
     * is watched from here on, so its death is noticed between its words. */
    int master = ember_tp_peer_by_name(tp, "master");
    status = ember_tp_barrier(tp, "roles-ready");
    if (status == EMBER_OK && master >= 0)
        status = ember_tp_watch(tp, master);
    while (status == EMBER_OK && !trainer.started && !trainer.aborted) {
        ember_tp_wait(tp, 0.5);
        if (master >= 0 && ember_tp_peer_lost(tp, master)) {
            ember_error("trainer",
                        "trainer %d: the master (rank %d) was lost before "
                        "training started: %s",
                        index, master, ember_tp_peer_reason(tp, master));
            status = EMBER_ERR_PEER_LOST;
        }
    }
    if (status != EMBER_OK) {
        trainer_unregister(tp);
        trainer.dev->comm_destroy(trainer.comm);
        ember_device_close(trainer.device);
        return status;
    }
    if (trainer.started) {
        status = trainer_setup(&trainer);
        if (status == EMBER_OK) {
            status = ember_data_create(&trainer.spec, &data, trainer.err, sizeof(trainer.err));
            if (status != EMBER_OK)
                trainer_fail(&trainer, status, "trainer %d: %s", index, trainer.err);
        }
        if (status == EMBER_OK)
            status = trainer_train(&trainer, data, &done);
        if (status == EMBER_OK) {
            ember_iov_t iov[3] = {{&done, sizeof(done)},
                                  {trainer.losses, done.steps * sizeof(float)},
                                  {trainer.params, trainer.nparams * sizeof(float)}};
            ember_rpc_reply(trainer.start_req, EMBER_OK, iov, 3);
        } else {
            if (!trainer.err[0])
                snprintf(trainer.err, sizeof(trainer.err), "trainer %d: %s", index,
                         ember_status_string(status));
            ember_rpc_reply_error(trainer.start_req, status, "%s", trainer.err);
        }
    } else {
        status = EMBER_ERR_CANCELED;
        ember_error("trainer", "trainer %d: job aborted before training: %s", index,
                    trainer.abort_text);
    }
    trainer_unregister(tp);
    ember_data_destroy(data);
    trainer_cleanup(&trainer);
    trainer.dev->comm_destroy(trainer.comm);
    ember_device_close(trainer.device);
    return status;
}
