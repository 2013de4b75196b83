/*
 * Parameter-server tests across processes: real PS ranks running
 * ember_ps_run(), clients that send the engine's messages themselves (packed
 * by engine/wire/codec, then forged where a case needs it), forked with
 * mp_spawn.  CTest runs every case over tcp and over shared memory.
 * Usage: test_ps CASE
 *
 *   bad_lookup                 every malformed LOOKUP / GRAD is refused with
 *                              the right status and a text naming the table,
 *                              trainer, step and offending value; the table
 *                              stays byte-identical; the PS keeps serving and
 *                              a valid sync step then updates exactly as SGD
 *   sync_order                 a step-1 lookup is held until every trainer's
 *                              step-0 gradient is applied
 *   shards_match_local_pP      P = 1, 2, 3 shards: pooled outputs (sum, mean,
 *                              max, weighted sum) and SGD updates equal the
 *                              single-process EmbeddingBag on the full table
 *   ps_survives_client_death   a trainer dies with a lookup open; the PS
 *                              keeps serving the other trainer
 *   lookup_huge_counts         counts far beyond the payload: BAD_MESSAGE,
 *                              nothing sized by them (the PS's own count
 *                              of its memory and its resident set alike)
 *   oneway_grad_refused        a refused one-way gradient is reported at the
 *                              trainer's next lookup
 *   replies_pooled             64 trainers, 8 large lookups in flight: every
 *                              reply right although reply buffers are reused,
 *                              and the PS holds memory for the replies in
 *                              flight, not one buffer per trainer (by its
 *                              own count and by its resident set)
 *   after_shutdown             a lookup reaching a process whose PS has
 *                              returned is refused ("no handler"), not
 *                              served from a freed PS
 *   lookups_atomic             a LOOKUPS of two tables one of which refuses
 *                              its lookup (a row out of range, an unknown
 *                              table, one table twice) is refused naming it
 *                              and leaves no context (the same request is
 *                              then taken, each reply where it belongs); a
 *                              GRADS with one bad gradient (non-finite, of
 *                              other bags) changes neither table, the good
 *                              one then steps both by SGD
 *   grads_oneway_refused       a refused one-way GRADS is reported at the
 *                              trainer's next LOOKUPS, naming the table
 *   lookups_held               sync: a LOOKUPS of step 1 and an evaluation
 *                              of step 1 wait until every trainer's step-0
 *                              GRADS is in, then pool the updated tables
 *                              alike; an evaluation of step 0 is refused
 *
 * Coordination between client ranks goes through the rendezvous store (the
 * PS only meets the others at "roles-ready" and at shutdown).
 */
#include "common/rng.h"
#include "engine/ops/optimizer.h"
#include "engine/ps/ps.h"
#include "engine/wire/codec.h"
#include "tests/common/mp_spawn.h"

#include <ember/embedding_bag.h>
#include <ember/transport.h>

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The PS serves with a pool (common/workers.h), more threads than this
 * machine may have cores: its results are the same bits for any count. */
#define PS_TEST_THREADS 3

#define LR 0.05f

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- joining, the store, calls ------------------------------------------- */

static ember_tp_t *join(const char *name)
{
    ember_tp_params_t params;
    ember_tp_t *tp;
    ember_tp_params_init(&params);
    params.name = name;
    ember_status_t status = ember_tp_create(&params, &tp);
    MP_CHECK(status == EMBER_OK, "ember_tp_create(%s): %s", name, ember_status_string(status));
    return tp;
}

/* A PS rank: serve until the master's PS_SHUTDOWN. */
static int run_ps(const char *name)
{
    ember_tp_t *tp = join(name);
    ember_status_t status = ember_ps_run(tp, &(ember_ps_run_options_t){.threads = PS_TEST_THREADS});
    MP_CHECK(status == EMBER_OK, "%s: ember_ps_run returned %s", name, ember_status_string(status));
    ember_tp_destroy(tp);
    return 0;
}

/* A client rank: meet the PS ranks at their "roles-ready" barrier. */
static ember_tp_t *join_client(const char *name)
{
    ember_tp_t *tp = join(name);
    MP_CHECK(ember_tp_barrier(tp, "roles-ready") == EMBER_OK, "roles-ready");
    return tp;
}

static void signal_key(ember_tp_t *tp, const char *key)
{
    MP_CHECK(ember_tp_store_set(tp, key, "1", 1) == EMBER_OK, "store_set %s", key);
}

static void await_key(ember_tp_t *tp, const char *key)
{
    void *value = NULL;
    size_t length = 0;
    MP_CHECK(ember_tp_store_get(tp, key, &value, &length) == EMBER_OK, "store_get %s", key);
    free(value);
}

typedef struct {
    ember_status_t status;
    size_t length;
    char *data; /* payload or error text, NUL-terminated copy */
} reply_t;

static void reply_free(reply_t *reply)
{
    free(reply->data);
    reply->data = NULL;
}

static reply_t call_iov(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov,
                        size_t iovcnt)
{
    ember_future_t *future;
    reply_t reply = {0};
    ember_status_t status = ember_rpc_call_async(tp, peer, op, iov, iovcnt, NULL, 0,
                                                 &(ember_rpc_param_t){.timeout_s = 20.0}, &future);
    MP_CHECK(status == EMBER_OK, "call_async op %u: %s", op, ember_status_string(status));
    reply.status = ember_future_wait(future);
    const void *data = ember_future_data(future, &reply.length);
    reply.data = malloc(reply.length + 1);
    MP_CHECK(reply.data, "out of memory");
    if (reply.length)
        memcpy(reply.data, data, reply.length);
    reply.data[reply.length] = '\0';
    ember_future_release(future);
    return reply;
}

static reply_t call(ember_tp_t *tp, int peer, uint16_t op, const void *message, size_t length)
{
    ember_iov_t iov = {.buffer = message, .length = length};
    return call_iov(tp, peer, op, &iov, length ? 1 : 0);
}

/* @reply must be a success of @out_length bytes, copied to @out; freed. */
static void reply_ok(reply_t reply, int peer, uint16_t op, void *out, size_t out_length)
{
    MP_CHECK(reply.status == EMBER_OK, "op %u on rank %d: %s: %s", op, peer,
             ember_status_string(reply.status), reply.data);
    MP_CHECK(reply.length == out_length, "op %u: reply of %zu bytes, expected %zu", op,
             reply.length, out_length);
    if (out_length)
        memcpy(out, reply.data, out_length);
    reply_free(&reply);
}

static void call_ok(ember_tp_t *tp, int peer, uint16_t op, const void *message, size_t length,
                    void *out, size_t out_length)
{
    reply_ok(call(tp, peer, op, message, length), peer, op, out, out_length);
}

/* A GRAD as trainers send it (engine/wire/codec): the header, then the
 * @floats where they lie. */
static ember_msg_grad_t grad_head(uint32_t table_id, uint32_t trainer, uint64_t step, uint32_t bags)
{
    return (ember_msg_grad_t){.table_id = table_id,
                              .trainer = trainer,
                              .step = step,
                              .flags = EMBER_GRAD_APPLY,
                              .bags = bags};
}

static reply_t grad_call(ember_tp_t *tp, int peer, const ember_msg_grad_t *head, const float *grad,
                         size_t floats)
{
    ember_iov_t iov[2];
    size_t iovcnt = ember_wire_pack_iov(head, sizeof(*head), grad, floats * sizeof(float), iov);
    return call_iov(tp, peer, EMBER_OP_GRAD, iov, iovcnt);
}

/* ---- tables --------------------------------------------------------------- */

typedef struct {
    int first_ps; /* rank of ps0; shard p is rank first_ps + p */
    uint32_t P;
    uint32_t table_id;
    int64_t rows;
    uint32_t dim;
} table_ref_t;

static void table_create(ember_tp_t *tp, const table_ref_t *t, const char *name, uint32_t trainers,
                         ember_consistency_t consistency, uint64_t seed)
{
    for (uint32_t p = 0; p < t->P; p++) {
        ember_msg_table_create_t spec;
        memset(&spec, 0, sizeof(spec));
        spec.table_id = t->table_id;
        spec.shard = p;
        spec.num_shards = t->P;
        spec.trainers = trainers;
        spec.rows = t->rows;
        spec.dim = t->dim;
        spec.consistency = consistency;
        spec.sparse_reduce = EMBER_REDUCE_SUM;
        spec.init = EMBER_INIT_NORMAL;
        spec.seed = seed;
        ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
        snprintf(spec.name, sizeof(spec.name), "%s", name);
        call_ok(tp, t->first_ps + (int)p, EMBER_OP_TABLE_CREATE, &spec, sizeof(spec), NULL, 0);
    }
}

/* The whole table, read from every shard: global row = local * P + p. */
static float *table_read_full(ember_tp_t *tp, const table_ref_t *t)
{
    float *full = malloc((size_t)t->rows * t->dim * sizeof(float));
    MP_CHECK(full, "out of memory");
    for (uint32_t p = 0; p < t->P; p++) {
        int64_t local = (t->rows - p + t->P - 1) / t->P;
        ember_msg_table_read_t msg = {.table_id = t->table_id, .first = 0, .count = local};
        float *part = malloc((size_t)local * t->dim * sizeof(float) + 4);
        MP_CHECK(part, "out of memory");
        call_ok(tp, t->first_ps + (int)p, EMBER_OP_TABLE_READ, &msg, sizeof(msg), part,
                (size_t)local * t->dim * sizeof(float));
        for (int64_t l = 0; l < local; l++)
            memcpy(full + (size_t)(l * t->P + p) * t->dim, part + (size_t)l * t->dim,
                   t->dim * sizeof(float));
        free(part);
    }
    return full;
}

/* ---- batches and the distributed lookup (as engine/train/trainer.c does it) ----- */

typedef struct {
    size_t bags, n;
    int64_t *indices;
    int64_t *offsets;
    float *weights; /* NULL: unweighted */
} batch_t;

static void batch_free(batch_t *b)
{
    free(b->indices);
    free(b->offsets);
    free(b->weights);
}

/* Random bags of 0..max_bag rows out of @rows (duplicates likely); bag 1 is
 * always empty and bag 0 always holds a duplicate. */
static batch_t make_batch(uint64_t seed, size_t bags, int max_bag, int64_t rows, int weighted)
{
    ember_rng_t rng;
    batch_t b = {.bags = bags};
    ember_rng_seed(&rng, seed, 17);
    b.offsets = malloc(bags * sizeof(int64_t));
    b.indices = malloc(bags * (size_t)(max_bag + 2) * sizeof(int64_t));
    b.weights = weighted ? malloc(bags * (size_t)(max_bag + 2) * sizeof(float)) : NULL;
    MP_CHECK(b.offsets && b.indices && (!weighted || b.weights), "out of memory");
    for (size_t bag = 0; bag < bags; bag++) {
        b.offsets[bag] = (int64_t)b.n;
        int size = bag == 1 ? 0 : (int)ember_rng_int(&rng, 0, max_bag);
        for (int i = 0; i < size; i++)
            b.indices[b.n++] = ember_rng_int(&rng, 0, rows - 1);
        if (bag == 0) {
            int64_t row = ember_rng_int(&rng, 0, rows - 1);
            b.indices[b.n++] = row;
            b.indices[b.n++] = row;
        }
    }
    for (size_t i = 0; weighted && i < b.n; i++)
        b.weights[i] = (float)(0.5 + ember_rng_uniform(&rng));
    return b;
}

static float *make_grad(uint64_t seed, size_t count)
{
    ember_rng_t rng;
    float *g = malloc(count * sizeof(float) + 4);
    MP_CHECK(g, "out of memory");
    ember_rng_seed(&rng, seed, 29);
    for (size_t i = 0; i < count; i++)
        g[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0);
    return g;
}

static ember_bag_batch_t bag_view(const batch_t *b)
{
    ember_bag_batch_t v = {.indices = b->indices,
                           .n = b->n,
                           .offsets = b->offsets,
                           .bags = b->bags,
                           .weights = b->weights,
                           .n_weights = b->weights ? b->n : 0};
    return v;
}

/* Shard @p's entries of every bag, in order: their rows, weights and
 * places in their bags; @counts: how many each bag has. */
typedef struct {
    size_t n;
    int64_t *rows;
    float *weights;
    uint32_t *places;
} shard_entries_t;

static shard_entries_t shard_entries(const batch_t *b, const table_ref_t *t, uint32_t p,
                                     uint32_t *counts)
{
    shard_entries_t e = {.rows = malloc((b->n + 1) * sizeof(int64_t)),
                         .weights = malloc((b->n + 1) * sizeof(float)),
                         .places = malloc((b->n + 1) * sizeof(uint32_t))};
    MP_CHECK(e.rows && e.weights && e.places, "out of memory");
    for (size_t bag = 0; bag < b->bags; bag++) {
        size_t end = bag + 1 < b->bags ? (size_t)b->offsets[bag + 1] : b->n;
        counts[bag] = 0;
        for (size_t i = (size_t)b->offsets[bag]; i < end; i++) {
            if ((uint64_t)b->indices[i] % t->P != p)
                continue;
            e.rows[e.n] = b->indices[i];
            e.weights[e.n] = b->weights ? b->weights[i] : 1.0f;
            e.places[e.n] = (uint32_t)(i - (size_t)b->offsets[bag]);
            e.n++;
            counts[bag]++;
        }
    }
    return e;
}

static void shard_entries_free(shard_entries_t *e)
{
    free(e->rows);
    free(e->weights);
    free(e->places);
}

/* One shard's LOOKUP: that shard's entries of every bag, deduplicated, packed
 * by the codec as the trainer packs it. */
static uint8_t *lookup_message(const batch_t *b, const table_ref_t *t, uint32_t trainer,
                               uint64_t step, int max_mode, uint32_t p, uint32_t *counts,
                               size_t *length_p)
{
    shard_entries_t e = shard_entries(b, t, p, counts);
    int64_t *unique = malloc((e.n + 1) * sizeof(int64_t));
    int64_t *inverse = malloc((e.n + 1) * sizeof(int64_t));
    size_t nunique = 0;
    MP_CHECK(unique && inverse, "out of memory");
    MP_CHECK(ember_bag_dedup(e.rows, e.n, -1, unique, inverse, &nunique) == EMBER_OK, "dedup");
    ember_wire_lookup_t lookup = {.head = {.table_id = t->table_id,
                                           .trainer = trainer,
                                           .step = step,
                                           .flags = (b->weights ? EMBER_LOOKUP_WEIGHTS : 0) |
                                                    (max_mode ? EMBER_LOOKUP_MAX : 0),
                                           .bags = (uint32_t)b->bags,
                                           .unique = (uint32_t)nunique,
                                           .indices = (uint32_t)e.n},
                                  .counts = counts,
                                  .rows = unique,
                                  .inverse = inverse,
                                  .weights = e.weights,
                                  .places = e.places};
    size_t length = ember_wire_lookup_size(&lookup.head);
    uint8_t *message = malloc(length);
    MP_CHECK(message, "out of memory");
    ember_wire_lookup_pack(&lookup, message);
    shard_entries_free(&e);
    free(unique);
    free(inverse);
    *length_p = length;
    return message;
}

/* What one distributed lookup leaves for its backward. */
typedef struct {
    size_t bags;
    uint32_t *counts; /* [P][bags] */
    uint32_t *total;  /* [bags] */
    int *winner;      /* [bags * dim] (max mode) */
    uint32_t *place;  /* [bags * dim] (max mode): the winner's place in its bag */
} dist_ctx_t;

static void dist_ctx_free(dist_ctx_t *ctx)
{
    free(ctx->counts);
    free(ctx->total);
    free(ctx->winner);
    free(ctx->place);
}

/* Shard @p's partial pool @part (and max mode's @place of each maximum)
 * combined into @pooled as the trainer combines them. */
static void dist_combine(const table_ref_t *t, dist_ctx_t *ctx, ember_bag_mode_t mode, uint32_t p,
                         const float *part, const uint32_t *place, float *pooled)
{
    size_t dim = t->dim;
    const uint32_t *counts = ctx->counts + (size_t)p * ctx->bags;
    for (size_t bag = 0; bag < ctx->bags; bag++) {
        ctx->total[bag] += counts[bag];
        for (size_t d = 0; d < dim; d++) {
            size_t i = bag * dim + d;
            if (mode != EMBER_BAG_MAX) {
                pooled[i] += part[i];
            } else if (counts[bag] && (ctx->winner[i] < 0 || part[i] > pooled[i] ||
                                       (part[i] == pooled[i] && place[i] < ctx->place[i]))) {
                /* of equal maxima, the bag's first entry's (PyTorch) */
                pooled[i] = part[i];
                ctx->winner[i] = (int)p;
                ctx->place[i] = place[i];
            }
        }
    }
}

/* Shard @p's reply taken and combined into @pooled. */
static void dist_take(ember_future_t *future, const table_ref_t *t, dist_ctx_t *ctx,
                      ember_bag_mode_t mode, uint32_t p, float *pooled)
{
    size_t total = ctx->bags * t->dim;
    ember_status_t status = ember_future_wait(future);
    size_t length;
    const char *data = ember_future_data(future, &length);
    MP_CHECK(status == EMBER_OK, "lookup on shard %u: %s: %.*s", p, ember_status_string(status),
             (int)length, data ? data : "");
    /* Max mode: the values, then each maximum's place in its bag. */
    size_t want = total * sizeof(float) * (mode == EMBER_BAG_MAX ? 2 : 1);
    MP_CHECK(length == want, "lookup reply of %zu bytes, want %zu", length, want);
    float *part = malloc(length + 4);
    MP_CHECK(part, "out of memory");
    memcpy(part, data, length);
    dist_combine(t, ctx, mode, p, part, (const uint32_t *)(part + total), pooled);
    free(part);
}

/* One lookup per shard, all in flight together; combine the partial pools
 * into @pooled [bags * dim] as the trainer does. */
static void dist_lookup(ember_tp_t *tp, const table_ref_t *t, const batch_t *b,
                        ember_bag_mode_t mode, uint32_t trainer, uint64_t step, float *pooled,
                        dist_ctx_t *ctx)
{
    size_t dim = t->dim, total = b->bags * dim;
    ember_future_t *futures[8];
    uint8_t *messages[8];
    ember_iov_t iov[8];

    MP_CHECK(t->P <= 8, "P");
    ctx->bags = b->bags;
    ctx->counts = calloc((size_t)t->P * b->bags + 1, sizeof(uint32_t));
    ctx->total = calloc(b->bags + 1, sizeof(uint32_t));
    ctx->winner = calloc(total + 1, sizeof(int));
    ctx->place = calloc(total + 1, sizeof(uint32_t));
    MP_CHECK(ctx->counts && ctx->total && ctx->winner && ctx->place, "out of memory");
    for (uint32_t p = 0; p < t->P; p++) {
        size_t length;
        messages[p] = lookup_message(b, t, trainer, step, mode == EMBER_BAG_MAX, p,
                                     ctx->counts + (size_t)p * b->bags, &length);
        iov[p] = (ember_iov_t){.buffer = messages[p], .length = length};
        MP_CHECK(ember_rpc_call_async(tp, t->first_ps + (int)p, EMBER_OP_LOOKUP, &iov[p], 1, NULL,
                                      0, &(ember_rpc_param_t){.timeout_s = 20.0},
                                      &futures[p]) == EMBER_OK,
                 "lookup call");
    }
    for (size_t i = 0; i < total; i++) {
        pooled[i] = 0.0f;
        ctx->winner[i] = -1;
    }
    for (uint32_t p = 0; p < t->P; p++) {
        dist_take(futures[p], t, ctx, mode, p, pooled);
        ember_future_release(futures[p]);
        free(messages[p]);
    }
    if (mode == EMBER_BAG_MEAN) {
        for (size_t bag = 0; bag < b->bags; bag++) {
            for (size_t d = 0; ctx->total[bag] && d < dim; d++)
                pooled[bag * dim + d] /= (float)ctx->total[bag];
        }
    }
}

/* d(loss)/d(shard p's partial pool), as the PS's sum/max backward wants it. */
static float *shard_grad(const table_ref_t *t, const dist_ctx_t *ctx, ember_bag_mode_t mode,
                         const float *g, uint32_t p)
{
    size_t dim = t->dim;
    float *out = malloc(ctx->bags * dim * sizeof(float) + 4);
    MP_CHECK(out, "out of memory");
    for (size_t bag = 0; bag < ctx->bags; bag++) {
        for (size_t d = 0; d < dim; d++) {
            size_t i = bag * dim + d;
            if (mode == EMBER_BAG_MAX)
                out[i] = ctx->winner[i] == (int)p ? g[i] : 0.0f;
            else if (mode == EMBER_BAG_MEAN && ctx->total[bag])
                out[i] = g[i] / (float)ctx->total[bag];
            else
                out[i] = g[i];
        }
    }
    return out;
}

/* Each shard's share of the output gradient @g, with APPLY. */
static void dist_grad(ember_tp_t *tp, const table_ref_t *t, const dist_ctx_t *ctx,
                      ember_bag_mode_t mode, uint32_t trainer, uint64_t step, const float *g)
{
    for (uint32_t p = 0; p < t->P; p++) {
        int peer = t->first_ps + (int)p;
        float *share = shard_grad(t, ctx, mode, g, p);
        ember_msg_grad_t head = grad_head(t->table_id, trainer, step, (uint32_t)ctx->bags);
        reply_ok(grad_call(tp, peer, &head, share, ctx->bags * t->dim), peer, EMBER_OP_GRAD, NULL,
                 0);
        free(share);
    }
}

/* ---- single-process reference --------------------------------------------- */

static float *ref_forward(const float *table, const table_ref_t *t, const batch_t *b,
                          ember_bag_mode_t mode, int64_t *argmax)
{
    float *out = malloc(b->bags * t->dim * sizeof(float) + 4);
    int64_t *scratch = argmax ? NULL : malloc(b->bags * t->dim * sizeof(int64_t) + 8);
    ember_bag_batch_t view = bag_view(b);
    ember_bag_opts_t opts = {.mode = mode, .padding_idx = -1};
    const ember_bag_table_t rows = {
            .data = table, .dtype = EMBER_DTYPE_F32, .rows = t->rows, .dim = t->dim};
    MP_CHECK(out && (argmax || scratch), "out of memory");
    MP_CHECK(ember_bag_forward(&rows, &view, &opts, out, argmax ? argmax : scratch) == EMBER_OK,
             "ember_bag_forward");
    free(scratch);
    return out;
}

/* Add the batch's sparse row gradient for output gradient @g into @dense. */
static void ref_backward_add(const float *table, const table_ref_t *t, const batch_t *b,
                             ember_bag_mode_t mode, const float *g, float *dense)
{
    int64_t *argmax = malloc(b->bags * t->dim * sizeof(int64_t) + 8);
    int64_t *rows = malloc((b->n + 1) * sizeof(int64_t));
    float *grad = malloc((b->n + 1) * t->dim * sizeof(float));
    ember_bag_batch_t view = bag_view(b);
    ember_bag_opts_t opts = {.mode = mode, .padding_idx = -1};
    const ember_bag_table_t rows_table = {
            .data = table, .dtype = EMBER_DTYPE_F32, .rows = t->rows, .dim = t->dim};
    ember_bag_grad_t out = {.rows = rows, .grad = grad};
    MP_CHECK(argmax && rows && grad, "out of memory");
    free(ref_forward(table, t, b, mode, argmax));
    MP_CHECK(ember_bag_backward(&rows_table, &view, &opts, g, mode == EMBER_BAG_MAX ? argmax : NULL,
                                &out) == EMBER_OK,
             "ember_bag_backward");
    const size_t nrows = out.nrows;
    for (size_t u = 0; u < nrows; u++) {
        for (size_t d = 0; d < t->dim; d++)
            dense[(size_t)rows[u] * t->dim + d] += grad[u * t->dim + d];
    }
    free(argmax);
    free(rows);
    free(grad);
}

/* SGD on the rows of a summed gradient (untouched rows unchanged). */
static void ref_sgd(float *table, const table_ref_t *t, const float *dense)
{
    for (size_t i = 0; i < (size_t)t->rows * t->dim; i++)
        table[i] -= LR * dense[i];
}

static double max_diff(const float *a, const float *b, size_t count, size_t *where)
{
    double worst = 0.0;
    *where = 0;
    for (size_t i = 0; i < count; i++) {
        double scale = fabs((double)b[i]) > 1.0 ? fabs((double)b[i]) : 1.0;
        double diff = fabs((double)a[i] - (double)b[i]) / scale;
        if (!(diff <= worst)) { /* NaN counts as the worst */
            worst = isnan(diff) ? INFINITY : diff;
            *where = i;
        }
    }
    return worst;
}

#define EXPECT_CLOSE(a, b, count, tol, what)                                                       \
    do {                                                                                           \
        size_t where_;                                                                             \
        double diff_ = max_diff((a), (b), (count), &where_);                                       \
        MP_CHECK(diff_ <= (tol), "%s: differs by %g at %zu (%.9g vs %.9g)", (what), diff_, where_, \
                 (double)(a)[where_], (double)(b)[where_]);                                        \
    } while (0)

/* The bad-input cases' table, on one PS. */
enum {
    BL_ROWS = 100,
    BL_DIM = 4,
    BL_TABLE = 3,
    BL_PS = 0 /* its rank */
};
static const table_ref_t bl_table = {
        .first_ps = 0, .P = 1, .table_id = BL_TABLE, .rows = BL_ROWS, .dim = BL_DIM};

/* ---- forged LOOKUP messages for the bad-input cases ----------------------- */

/* A LOOKUP's content as its sender has it (engine/wire/codec's
 * ember_wire_lookup_t), up to 8 of each, for a test to spoil before the
 * codec packs it. */
typedef struct {
    ember_msg_lookup_t head;
    uint32_t counts[8];
    int64_t rows[8];
    int64_t inverse[8];
    float weights[8];
    uint32_t places[8];
} raw_lookup_t;

/* Packed by the codec, with 8 zero bytes past its end for a test that sends
 * more than the message. */
static uint8_t *raw_message(const raw_lookup_t *raw, size_t *length_p)
{
    const ember_msg_lookup_t *h = &raw->head;
    MP_CHECK(h->bags <= 8 && h->unique <= 8 && h->indices <= 8, "raw lookup of more than 8");
    ember_wire_lookup_t lookup = {.head = *h,
                                  .counts = raw->counts,
                                  .rows = raw->rows,
                                  .inverse = raw->inverse,
                                  .weights = raw->weights,
                                  .places = raw->places};
    size_t length = ember_wire_lookup_size(h);
    uint8_t *message = calloc(length + 8, 1);
    MP_CHECK(message, "out of memory");
    ember_wire_lookup_pack(&lookup, message);
    *length_p = length;
    return message;
}

/* A valid lookup of 2 bags: {3, 50, 50} | {} ... as trainer 0 step 0. */
static raw_lookup_t raw_valid(uint32_t table_id)
{
    raw_lookup_t raw;
    memset(&raw, 0, sizeof(raw));
    raw.head = (ember_msg_lookup_t){.table_id = table_id,
                                    .trainer = 0,
                                    .step = 0,
                                    .flags = 0,
                                    .bags = 2,
                                    .unique = 2,
                                    .indices = 3};
    raw.counts[0] = 3;
    raw.counts[1] = 0;
    raw.rows[0] = 3;
    raw.rows[1] = 50;
    raw.inverse[0] = 0;
    raw.inverse[1] = 1;
    raw.inverse[2] = 1;
    raw.weights[0] = raw.weights[1] = raw.weights[2] = 1.0f;
    return raw;
}

/* The valid lookup packed, then its header's counts replaced: its arrays
 * stay the valid one's, far fewer than the counts say. */
static uint8_t *forged_counts(uint32_t bags, uint32_t unique, uint32_t indices, size_t *length_p)
{
    raw_lookup_t raw = raw_valid(BL_TABLE);
    uint8_t *message = raw_message(&raw, length_p);
    raw.head.bags = bags;
    raw.head.unique = unique;
    raw.head.indices = indices;
    memcpy(message, &raw.head, sizeof(raw.head));
    return message;
}

/* @reply must be a failure with @status and a text holding every string of
 * @needles (NULL-terminated); freed. */
static void expect_status(reply_t reply, ember_status_t status, const char *what,
                          const char *const *needles)
{
    MP_CHECK(reply.status == status, "%s: got %s, want %s (text: %s)", what,
             ember_status_string(reply.status), ember_status_string(status), reply.data);
    for (size_t i = 0; needles[i]; i++)
        MP_CHECK(strstr(reply.data, needles[i]), "%s: error text \"%s\" lacks \"%s\"", what,
                 reply.data, needles[i]);
    fprintf(stderr, "  refused as expected (%s): %s\n", what, reply.data);
    reply_free(&reply);
}

static void expect_refused(ember_tp_t *tp, int peer, uint16_t op, const void *message,
                           size_t length, ember_status_t status, const char *what,
                           const char *const *needles)
{
    expect_status(call(tp, peer, op, message, length), status, what, needles);
}

static void expect_lookup_refused(ember_tp_t *tp, int peer, const raw_lookup_t *raw,
                                  ember_status_t status, const char *what,
                                  const char *const *needles)
{
    size_t length;
    uint8_t *message = raw_message(raw, &length);
    expect_refused(tp, peer, EMBER_OP_LOOKUP, message, length, status, what, needles);
    free(message);
}

/* @raw packed with bag @bag's offset then set to @offset: the codec derives
 * the offsets from the counts, so only a forger's go wrong. */
static void expect_offset_refused(ember_tp_t *tp, int peer, const raw_lookup_t *raw, uint32_t bag,
                                  uint32_t offset, const char *what, const char *const *needles)
{
    size_t length;
    ember_wire_lookup_layout_t at;
    uint8_t *message = raw_message(raw, &length);
    ember_wire_lookup_layout(&raw->head, &at);
    memcpy(message + at.offsets + 4 * (size_t)bag, &offset, 4);
    expect_refused(tp, peer, EMBER_OP_LOOKUP, message, length, EMBER_ERR_INVALID_PARAM, what,
                   needles);
    free(message);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define WHO          "table emb", "trainer 0", "step 0"

/* ---- case 1: bad_lookup ---------------------------------------------------- */

/* Table @t holds exactly @snapshot; @what: the failure's text. */
static void check_table_is(ember_tp_t *tp, const table_ref_t *t, const float *snapshot,
                           const char *what)
{
    float *now = table_read_full(tp, t);
    MP_CHECK(memcmp(now, snapshot, (size_t)t->rows * t->dim * sizeof(float)) == 0, "%s", what);
    free(now);
}

static void check_unchanged(ember_tp_t *tp, const float *snapshot, const char *after)
{
    char what[128];
    snprintf(what, sizeof(what), "the table changed after %s", after);
    check_table_is(tp, &bl_table, snapshot, what);
}

/* Rows out of the table's range. */
static void bad_lookup_rows(ember_tp_t *tp, int ps)
{
    raw_lookup_t raw;

    raw = raw_valid(BL_TABLE);
    raw.rows[1] = 130;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_OUT_OF_RANGE, "index 130",
                          NEEDLES(WHO, "130", "[0, 100)"));
    raw = raw_valid(BL_TABLE);
    raw.rows[0] = -1;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_OUT_OF_RANGE, "index -1", NEEDLES(WHO, "-1"));
    raw = raw_valid(BL_TABLE);
    raw.rows[0] = INT64_MIN;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_OUT_OF_RANGE, "index INT64_MIN",
                          NEEDLES(WHO, "-9223372036854775808"));
}

/* Offsets that do not cut the indices into bags. */
static void bad_lookup_offsets(ember_tp_t *tp, int ps)
{
    raw_lookup_t raw;

    raw = raw_valid(BL_TABLE);
    expect_offset_refused(tp, ps, &raw, 0, 1, "offsets start at 1",
                          NEEDLES(WHO, "offset 1 of bag 0"));
    raw = raw_valid(BL_TABLE);
    raw.head.bags = 3; /* offsets 0, 2, then 1 */
    raw.counts[0] = 2;
    raw.counts[1] = 1;
    expect_offset_refused(tp, ps, &raw, 2, 1, "decreasing offsets",
                          NEEDLES(WHO, "offset 1 of bag 2", "previous 2"));
    raw = raw_valid(BL_TABLE);
    expect_offset_refused(tp, ps, &raw, 1, 4, "offset past indices",
                          NEEDLES(WHO, "offset 4 of bag 1", "3 indices"));
    raw = raw_valid(BL_TABLE);
    raw.head.bags = 0;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_INVALID_PARAM, "indices, no bags",
                          NEEDLES(WHO, "3 indices but no bags"));
}

/* Slots past the distinct rows; flags the protocol does not know or allow. */
static void bad_lookup_slots_flags(ember_tp_t *tp, int ps)
{
    raw_lookup_t raw;

    raw = raw_valid(BL_TABLE);
    raw.inverse[2] = 2;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_BAD_MESSAGE, "inverse slot 2 of 2",
                          NEEDLES(WHO, "slot 2 of 2"));
    raw = raw_valid(BL_TABLE);
    raw.inverse[0] = UINT32_MAX;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_BAD_MESSAGE, "inverse slot 2^32-1",
                          NEEDLES(WHO, "slot 4294967295"));
    raw = raw_valid(BL_TABLE);
    raw.head.flags = EMBER_LOOKUP_WEIGHTS | EMBER_LOOKUP_MAX;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_INVALID_PARAM, "weights with max",
                          NEEDLES(WHO, "weights", "0x3"));
    raw = raw_valid(BL_TABLE);
    raw.head.flags = EMBER_LOOKUP_MAX; /* bag 0's places 0, 2, 1: not increasing */
    raw.places[0] = 0;
    raw.places[1] = 2;
    raw.places[2] = 1;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_INVALID_PARAM, "max places decrease",
                          NEEDLES(WHO, "places", "must increase"));
    raw = raw_valid(BL_TABLE);
    raw.head.flags = 1u << 7;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_INVALID_PARAM, "unknown flag",
                          NEEDLES(WHO, "0x80"));
}

/* The payload's length against the header's counts. */
static void bad_lookup_lengths(ember_tp_t *tp, int ps)
{
    raw_lookup_t raw = raw_valid(BL_TABLE);
    size_t length;
    uint8_t *message = raw_message(&raw, &length);

    /* 36 bytes of arrays expected. */
    expect_refused(tp, ps, EMBER_OP_LOOKUP, message, length - 4, EMBER_ERR_BAD_MESSAGE,
                   "truncated arrays", NEEDLES(WHO, "needs 36 bytes, got 32"));
    expect_refused(tp, ps, EMBER_OP_LOOKUP, message, length + 8, EMBER_ERR_BAD_MESSAGE,
                   "payload too long", NEEDLES(WHO, "needs 36 bytes, got 44"));
    expect_refused(tp, ps, EMBER_OP_LOOKUP, message, sizeof(ember_msg_lookup_t) - 1,
                   EMBER_ERR_BAD_MESSAGE, "truncated header", NEEDLES("shorter than its"));
    free(message);

    /* Counts far beyond the payload: refused, and the PS lives on (the exact
     * status and the memory it may reserve: case lookup_huge_counts). */
    message = forged_counts(UINT32_MAX, UINT32_MAX, UINT32_MAX, &length);
    reply_t reply = call(tp, ps, EMBER_OP_LOOKUP, message, length);
    MP_CHECK(reply.status < 0, "huge counts: %s", ember_status_string(reply.status));
    reply_free(&reply);
    free(message);
}

/* A table or a trainer the PS does not have. */
static void bad_lookup_ids(ember_tp_t *tp, int ps)
{
    raw_lookup_t raw;

    raw = raw_valid(7);
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_NOT_FOUND, "unknown table id",
                          NEEDLES("table", "id 7", "ps0"));
    raw = raw_valid(BL_TABLE);
    raw.head.trainer = 2;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_INVALID_PARAM, "trainer 2 of 2",
                          NEEDLES("table emb", "trainer 2", "2 trainers"));
}

static void bad_lookups(ember_tp_t *tp, int ps)
{
    bad_lookup_rows(tp, ps);
    bad_lookup_offsets(tp, ps);
    bad_lookup_slots_flags(tp, ps);
    bad_lookup_lengths(tp, ps);
    bad_lookup_ids(tp, ps);
}

/* Two trainers' step-0 bags and output gradients, and room for a pooled
 * output. */
typedef struct {
    batch_t b0, b1;
    float *g0, *g1, *pooled;
    dist_ctx_t ctx;
} pair_t;

/* A case of ps0 (rank 0), the master doubling as trainer 0 (rank 1) and
 * trainer 1 (rank 2), over a pair of batches of @t drawn from seeds. */
typedef struct {
    const table_ref_t *t;
    size_t bags[2]; /* trainer 0's, trainer 1's */
    int max_bag;
    uint64_t seeds[4]; /* the two batches', then the two gradients' */
    void (*master)(pair_t *s);
    void (*trainer1)(pair_t *s);
} pair_case_t;

static int pair_run(int rank, const pair_case_t *pc)
{
    if (rank == 0)
        return run_ps("ps0");
    const table_ref_t *t = pc->t;
    pair_t s = {.b0 = make_batch(pc->seeds[0], pc->bags[0], pc->max_bag, t->rows, 0),
                .b1 = make_batch(pc->seeds[1], pc->bags[1], pc->max_bag, t->rows, 0)};
    s.g0 = make_grad(pc->seeds[2], s.b0.bags * t->dim);
    s.g1 = make_grad(pc->seeds[3], s.b1.bags * t->dim);
    s.pooled = malloc(8 * t->dim * sizeof(float));
    MP_CHECK(s.pooled, "out of memory");
    if (rank == 2)
        pc->trainer1(&s);
    else
        pc->master(&s);
    free(s.pooled);
    free(s.g0);
    free(s.g1);
    batch_free(&s.b0);
    batch_free(&s.b1);
    return 0;
}

/* Trainer 1: its step-0 lookup once the bad ones are done, its gradient
 * once trainer 0's is in. */
static void bl_trainer1(pair_t *s)
{
    const table_ref_t *t = &bl_table;
    ember_tp_t *tp = join_client("trainer1");
    await_key(tp, "bad-done");
    float *snapshot = table_read_full(tp, t);
    dist_lookup(tp, t, &s->b1, EMBER_BAG_SUM, 1, 0, s->pooled, &s->ctx);
    float *expect = ref_forward(snapshot, t, &s->b1, EMBER_BAG_SUM, NULL);
    EXPECT_CLOSE(s->pooled, expect, s->b1.bags * BL_DIM, 1e-6, "trainer 1 step 0 lookup");
    signal_key(tp, "t1-looked");
    await_key(tp, "t0-grad");
    dist_grad(tp, t, &s->ctx, EMBER_BAG_SUM, 1, 0, s->g1);
    signal_key(tp, "t1-grad");
    dist_ctx_free(&s->ctx);
    free(expect);
    free(snapshot);
    ember_tp_destroy(tp);
}

/* Creating the same id again is refused and changes nothing; so is a read
 * past the end. */
static void bl_bad_table_calls(ember_tp_t *tp)
{
    ember_msg_table_create_t spec;
    memset(&spec, 0, sizeof(spec));
    spec.table_id = BL_TABLE;
    spec.num_shards = 1;
    spec.trainers = 2;
    spec.rows = 10;
    spec.dim = 2;
    ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
    snprintf(spec.name, sizeof(spec.name), "again");
    expect_refused(tp, BL_PS, EMBER_OP_TABLE_CREATE, &spec, sizeof(spec), EMBER_ERR_EXISTS,
                   "table id taken", NEEDLES("3"));
    ember_msg_table_read_t read = {.table_id = BL_TABLE, .first = 90, .count = 20};
    expect_refused(tp, BL_PS, EMBER_OP_TABLE_READ, &read, sizeof(read), EMBER_ERR_OUT_OF_RANGE,
                   "read past the end", NEEDLES("table emb", "[90, 110)"));
}

/* Trainer 0's valid lookup (bad ones left no context behind), then a second
 * one before the gradient, refused; returns the expected output. */
static float *bl_first_lookup(ember_tp_t *tp, pair_t *s, const float *snapshot)
{
    dist_lookup(tp, &bl_table, &s->b0, EMBER_BAG_SUM, 0, 0, s->pooled, &s->ctx);
    float *expect = ref_forward(snapshot, &bl_table, &s->b0, EMBER_BAG_SUM, NULL);
    EXPECT_CLOSE(s->pooled, expect, s->b0.bags * BL_DIM, 1e-6, "trainer 0 step 0 lookup");
    raw_lookup_t raw = raw_valid(BL_TABLE);
    expect_lookup_refused(tp, BL_PS, &raw, EMBER_ERR_INVALID_PARAM, "second lookup",
                          NEEDLES(WHO, "not been given a gradient"));
    return expect;
}

/* Gradients of trainer 0's open lookup that must be refused; a NaN one
 * voids the step. */
static void bl_bad_grads(ember_tp_t *tp, const pair_t *s, const float *snapshot)
{
    const size_t floats = s->b0.bags * BL_DIM;
    const uint32_t bags = (uint32_t)s->b0.bags;
    float *bad = malloc(floats * sizeof(float));
    MP_CHECK(bad, "out of memory");
    memcpy(bad, s->g0, floats * sizeof(float));
    ember_msg_grad_t head = grad_head(BL_TABLE, 0, 0, bags);
    expect_status(grad_call(tp, BL_PS, &head, bad, floats - 1), EMBER_ERR_BAD_MESSAGE,
                  "short gradient", NEEDLES(WHO, "92 bytes"));
    head = grad_head(BL_TABLE, 0, 0, bags + 1);
    expect_status(grad_call(tp, BL_PS, &head, bad, floats), EMBER_ERR_BAD_MESSAGE,
                  "gradient bag count", NEEDLES(WHO, "7 bags"));
    head = grad_head(BL_TABLE, 0, 1, bags);
    expect_status(grad_call(tp, BL_PS, &head, bad, floats), EMBER_ERR_INVALID_PARAM,
                  "gradient for another step",
                  NEEDLES("table emb", "trainer 0", "step 1", "without a lookup"));
    head = grad_head(9, 0, 0, bags);
    expect_status(grad_call(tp, BL_PS, &head, bad, floats), EMBER_ERR_NOT_FOUND,
                  "gradient for unknown table", NEEDLES("id 9"));
    bad[2 * BL_DIM + 1] = NAN; /* bag 2 */
    head = grad_head(BL_TABLE, 0, 0, bags);
    expect_status(grad_call(tp, BL_PS, &head, bad, floats), EMBER_ERR_NUMERIC, "NaN gradient",
                  NEEDLES(WHO, "non-finite", "bag 2"));
    check_unchanged(tp, snapshot, "a NaN gradient");
    /* The NaN voided trainer 0's step: the same gradient again has no lookup. */
    memcpy(bad, s->g0, floats * sizeof(float));
    expect_status(grad_call(tp, BL_PS, &head, bad, floats), EMBER_ERR_INVALID_PARAM,
                  "gradient without a lookup", NEEDLES(WHO, "without a lookup"));
    free(bad);
    check_unchanged(tp, snapshot, "refused gradients");
}

/* Trainer 0 looks up again and gives its gradient: sync holds it until
 * trainer 1's arrives; a second gradient for the step has no lookup left. */
static void bl_step0(ember_tp_t *tp, pair_t *s, const float *snapshot, const float *expect)
{
    dist_lookup(tp, &bl_table, &s->b0, EMBER_BAG_SUM, 0, 0, s->pooled, &s->ctx);
    EXPECT_CLOSE(s->pooled, expect, s->b0.bags * BL_DIM, 1e-6, "trainer 0 step 0 lookup again");
    dist_grad(tp, &bl_table, &s->ctx, EMBER_BAG_SUM, 0, 0, s->g0);
    check_unchanged(tp, snapshot, "one of two sync gradients");
    ember_msg_grad_t head = grad_head(BL_TABLE, 0, 0, (uint32_t)s->b0.bags);
    expect_status(grad_call(tp, BL_PS, &head, s->g0, s->b0.bags * BL_DIM), EMBER_ERR_INVALID_PARAM,
                  "repeated gradient", NEEDLES(WHO, "without a lookup"));
    signal_key(tp, "t0-grad");
    await_key(tp, "t1-grad");
}

/* Both in: the table moved by SGD on the summed gradient, exactly; returns
 * the table the reference expects. */
static float *bl_check_update(ember_tp_t *tp, const pair_t *s, const float *snapshot)
{
    const table_ref_t *t = &bl_table;
    const size_t cells = (size_t)BL_ROWS * BL_DIM;
    float *dense = calloc(cells, sizeof(float)), *updated = malloc(cells * sizeof(float));
    MP_CHECK(dense && updated, "out of memory");
    ref_backward_add(snapshot, t, &s->b0, EMBER_BAG_SUM, s->g0, dense);
    ref_backward_add(snapshot, t, &s->b1, EMBER_BAG_SUM, s->g1, dense);
    memcpy(updated, snapshot, cells * sizeof(float));
    ref_sgd(updated, t, dense);
    float *now = table_read_full(tp, t);
    MP_CHECK(memcmp(now, snapshot, cells * sizeof(float)) != 0, "the step changed nothing");
    EXPECT_CLOSE(now, updated, cells, 1e-6, "table after the step-0 update");
    size_t touched = 0;
    for (size_t i = 0; i < cells; i++)
        touched += dense[i] != 0.0f;
    MP_CHECK(touched > 0, "no row was touched");
    free(now);
    free(dense);
    return updated;
}

/* Step 1 is open now; step 0 is closed. */
static void bl_step1(ember_tp_t *tp, pair_t *s, const float *updated)
{
    dist_ctx_free(&s->ctx);
    dist_lookup(tp, &bl_table, &s->b1, EMBER_BAG_SUM, 0, 1, s->pooled, &s->ctx);
    float *expect = ref_forward(updated, &bl_table, &s->b1, EMBER_BAG_SUM, NULL);
    EXPECT_CLOSE(s->pooled, expect, s->b1.bags * BL_DIM, 1e-6, "trainer 0 step 1 lookup");
    raw_lookup_t raw = raw_valid(BL_TABLE);
    raw.head.trainer = 1;
    expect_lookup_refused(tp, BL_PS, &raw, EMBER_ERR_INVALID_PARAM, "stale step",
                          NEEDLES("table emb", "trainer 1", "step 0", "already applied"));
    ember_msg_ps_stats_t stats;
    call_ok(tp, BL_PS, EMBER_OP_PS_STATS, NULL, 0, &stats, sizeof(stats));
    MP_CHECK(stats.lookups == 4 && stats.grads == 2 && stats.steps_applied == 1,
             "stats: %llu lookups, %llu grads, %llu steps", (unsigned long long)stats.lookups,
             (unsigned long long)stats.grads, (unsigned long long)stats.steps_applied);
    dist_ctx_free(&s->ctx);
    free(expect);
}

/* The master, doubling as trainer 0. */
static void bl_master(pair_t *s)
{
    ember_tp_t *tp = join_client("master");
    table_create(tp, &bl_table, "emb", 2, EMBER_SYNC, 1234);
    float *snapshot = table_read_full(tp, &bl_table);
    bl_bad_table_calls(tp);
    bad_lookups(tp, BL_PS);
    check_unchanged(tp, snapshot, "bad lookups");
    signal_key(tp, "bad-done");
    await_key(tp, "t1-looked");

    float *expect = bl_first_lookup(tp, s, snapshot);
    bl_bad_grads(tp, s, snapshot);
    dist_ctx_free(&s->ctx);
    bl_step0(tp, s, snapshot, expect);
    float *updated = bl_check_update(tp, s, snapshot);
    bl_step1(tp, s, updated);
    call_ok(tp, BL_PS, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(updated);
    free(expect);
    free(snapshot);
    ember_tp_destroy(tp);
}

static int case_bad_lookup(int rank, int world, void *arg)
{
    const pair_case_t pc = {&bl_table, {6, 5}, 5, {101, 202, 303, 404}, bl_master, bl_trainer1};
    (void)world;
    (void)arg;
    return pair_run(rank, &pc);
}

/* The PS's resident set (rss_bytes of PS_STATS, /proc/self/statm) grew by
 * at most @limit between @before and @after: what the process really holds,
 * beside what its own bookkeeping (other_bytes) says it does.  Not under a
 * sanitizer, whose shadow memory and quarantine of freed blocks are not the
 * PS's. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZER_RSS 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZER_RSS 1
#endif

static void check_rss_growth(const ember_msg_ps_stats_t *before, const ember_msg_ps_stats_t *after,
                             uint64_t limit, const char *what)
{
    const double mib = 1048576.0;
    MP_CHECK(before->rss_bytes > 0 && after->rss_bytes > 0, "%s: PS_STATS carries no rss_bytes",
             what);
    const double grew = ((double)after->rss_bytes - (double)before->rss_bytes) / mib;
    printf("%s: the PS's resident set %.2f -> %.2f MiB (%+.2f; its own count of other "
           "memory %+.2f)\n",
           what, before->rss_bytes / mib, after->rss_bytes / mib, grew,
           ((double)after->other_bytes - (double)before->other_bytes) / mib);
#ifdef TEST_SANITIZER_RSS
    printf("%s: the bound of %.1f MiB is not checked under a sanitizer\n", what, limit / mib);
#else
    MP_CHECK(after->rss_bytes <= before->rss_bytes + limit,
             "%s: the PS's resident set grew by %.2f MiB, more than %.1f MiB", what, grew,
             limit / mib);
#endif
}

/* ---- case lookup_huge_counts ------------------------------------------------
 * A lookup whose header claims far more bags than its payload holds must be
 * refused as malformed (naming table, trainer, step) before the PS sizes
 * anything by those counts. */

static int case_huge_counts(int rank, int world, void *arg)
{
    const int ps = 0;
    (void)world;
    (void)arg;
    if (rank == 0)
        return run_ps("ps0");
    ember_tp_t *tp = join_client("master");
    size_t length;
    uint8_t *message;
    table_create(tp, &bl_table, "emb", 2, EMBER_SYNC, 1234);
    float *snapshot = table_read_full(tp, &bl_table);
    ember_msg_ps_stats_t before, after;
    call_ok(tp, ps, EMBER_OP_PS_STATS, NULL, 0, &before, sizeof(before));

    message = forged_counts(UINT32_MAX, UINT32_MAX, UINT32_MAX, &length);
    expect_refused(tp, ps, EMBER_OP_LOOKUP, message, length, EMBER_ERR_BAD_MESSAGE, "counts 2^32-1",
                   NEEDLES(WHO, "4294967295 bags"));
    free(message);
    /* 1 GiB of output for a 68-byte request */
    message = forged_counts(1u << 26, 2, 3, &length);
    expect_refused(tp, ps, EMBER_OP_LOOKUP, message, length, EMBER_ERR_BAD_MESSAGE, "2^26 bags",
                   NEEDLES(WHO, "67108864 bags"));
    free(message);
    call_ok(tp, ps, EMBER_OP_PS_STATS, NULL, 0, &after, sizeof(after));
    MP_CHECK(after.other_bytes < before.other_bytes + (1u << 20),
             "refused lookups left the PS holding %llu bytes (before: %llu)",
             (unsigned long long)after.other_bytes, (unsigned long long)before.other_bytes);
    /* 1 MiB: a buffer sized by a count and written (pooled into, zeroed)
     * would be hundreds. */
    check_rss_growth(&before, &after, 1u << 20, "huge counts");
    check_unchanged(tp, snapshot, "huge counts");
    call_ok(tp, ps, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(snapshot);
    ember_tp_destroy(tp);
    return 0;
}

/* A one-way gradient (as trainers send them) that the PS refuses: nothing
 * is applied, and the trainer's next lookup is answered with the reason at
 * once, even in sync mode where it would otherwise wait for the step. */
static void oneway_done(void *arg, ember_status_t status)
{
    *(ember_status_t *)arg = status;
}

static int case_oneway_grad_refused(int rank, int world, void *arg)
{
    const int ps = 0;
    (void)world;
    (void)arg;
    if (rank == 0)
        return run_ps("ps0");
    ember_tp_t *tp = join_client("master");
    size_t length;
    table_create(tp, &bl_table, "emb", 2, EMBER_SYNC, 1234);
    float *snapshot = table_read_full(tp, &bl_table);

    raw_lookup_t raw = raw_valid(BL_TABLE);
    uint8_t *message = raw_message(&raw, &length);
    float pooled[2 * BL_DIM];
    call_ok(tp, ps, EMBER_OP_LOOKUP, message, length, pooled, sizeof(pooled));
    free(message);

    float grad[2 * BL_DIM] = {0.5f, 0.25f, NAN, 1.0f};
    ember_msg_grad_t head = grad_head(BL_TABLE, 0, 0, 2);
    ember_status_t sent = EMBER_INPROGRESS;
    ember_iov_t iov[2];
    size_t iovcnt = ember_wire_pack_iov(&head, sizeof(head), grad, sizeof(grad), iov);
    MP_CHECK(ember_rpc_send(tp, ps, EMBER_OP_GRAD, iov, iovcnt, NULL, oneway_done, &sent) ==
                     EMBER_OK,
             "one-way send");
    while (sent == EMBER_INPROGRESS)
        ember_tp_wait(tp, 0.05);
    MP_CHECK(sent == EMBER_OK, "one-way send: %s", ember_status_string(sent));

    /* The next lookup (step 1: in sync mode it would wait for step 0, which
     * can never complete now) carries the refusal. */
    raw = raw_valid(BL_TABLE);
    raw.head.step = 1;
    expect_lookup_refused(tp, ps, &raw, EMBER_ERR_INVALID_PARAM, "after a refused push",
                          NEEDLES("table emb", "trainer 0", "step 0", "non-finite gradient"));
    check_unchanged(tp, snapshot, "a refused one-way gradient");
    call_ok(tp, ps, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(snapshot);
    ember_tp_destroy(tp);
    return 0;
}

/* ---- case 2: sync_order ----------------------------------------------------- */

static const table_ref_t so_table = {.first_ps = 0, .P = 1, .table_id = 0, .rows = 40, .dim = 6};

/* Trainer 1: its step-0 lookup, and its gradient once trainer 0's step-1
 * lookup is waiting. */
static void so_trainer1(pair_t *s)
{
    ember_tp_t *tp = join_client("trainer1");
    await_key(tp, "created");
    dist_lookup(tp, &so_table, &s->b1, EMBER_BAG_SUM, 1, 0, s->pooled, &s->ctx);
    await_key(tp, "t0-waiting");
    dist_grad(tp, &so_table, &s->ctx, EMBER_BAG_SUM, 1, 0, s->g1);
    dist_ctx_free(&s->ctx);
    ember_tp_destroy(tp);
}

/* Trainer 0's step 1 (trainer 1's step-0 bags, so trainer 1's update
 * shows): held unanswered, the table unchanged, until trainer 1's step-0
 * gradient is in; its reply lands in s->pooled. */
static void so_held_lookup(ember_tp_t *tp, pair_t *s, const float *snapshot)
{
    const table_ref_t *t = &so_table;
    size_t length;
    uint32_t counts[8];
    uint8_t *message = lookup_message(&s->b1, t, 0, 1, 0, 0, counts, &length);
    ember_iov_t iov = {.buffer = message, .length = length};
    ember_future_t *future;
    MP_CHECK(ember_rpc_call_async(tp, 0, EMBER_OP_LOOKUP, &iov, 1, NULL, 0,
                                  &(ember_rpc_param_t){.timeout_s = 20.0}, &future) == EMBER_OK,
             "step-1 lookup");
    double start = now_s();
    while (now_s() - start < 0.3) {
        ember_status_t status = ember_future_test(future);
        MP_CHECK(status == EMBER_INPROGRESS,
                 "the step-1 lookup was answered (%s) after %.3f s, before trainer 1's "
                 "step-0 gradient",
                 ember_status_string(status), now_s() - start);
        ember_tp_wait(tp, 0.02);
    }
    check_table_is(tp, t, snapshot, "the table changed before every step-0 gradient was in");
    signal_key(tp, "t0-waiting");
    ember_status_t status = ember_future_wait(future);
    size_t got;
    const void *data = ember_future_data(future, &got);
    MP_CHECK(status == EMBER_OK, "step-1 lookup: %s: %.*s", ember_status_string(status), (int)got,
             data ? (const char *)data : "");
    MP_CHECK(got == s->b1.bags * t->dim * sizeof(float), "reply of %zu bytes", got);
    memcpy(s->pooled, data, got);
    ember_future_release(future);
    free(message);
}

/* The step-1 output and the table are those after both step-0 updates, and
 * differ from those after trainer 0's alone. */
static void so_check(ember_tp_t *tp, const pair_t *s, const float *snapshot)
{
    const table_ref_t *t = &so_table;
    const size_t cells = (size_t)t->rows * t->dim;
    float *dense = calloc(cells, sizeof(float)), *only0 = malloc(cells * sizeof(float));
    float *both = malloc(cells * sizeof(float));
    MP_CHECK(dense && only0 && both, "out of memory");
    ref_backward_add(snapshot, t, &s->b0, EMBER_BAG_SUM, s->g0, dense);
    memcpy(only0, snapshot, cells * sizeof(float));
    ref_sgd(only0, t, dense);
    ref_backward_add(snapshot, t, &s->b1, EMBER_BAG_SUM, s->g1, dense);
    memcpy(both, snapshot, cells * sizeof(float));
    ref_sgd(both, t, dense);
    float *expect = ref_forward(both, t, &s->b1, EMBER_BAG_SUM, NULL);
    float *wrong = ref_forward(only0, t, &s->b1, EMBER_BAG_SUM, NULL);
    size_t where;
    MP_CHECK(max_diff(expect, wrong, s->b1.bags * t->dim, &where) > 1e-3,
             "test data: trainer 1's update does not show in the step-1 bags");
    EXPECT_CLOSE(s->pooled, expect, s->b1.bags * t->dim, 1e-6,
                 "step-1 lookup vs both step-0 updates");
    float *now = table_read_full(tp, t);
    EXPECT_CLOSE(now, both, cells, 1e-6, "table after step 0");
    free(now);
    free(expect);
    free(wrong);
    free(dense);
    free(only0);
    free(both);
}

static void so_master(pair_t *s)
{
    ember_tp_t *tp = join_client("master");
    table_create(tp, &so_table, "emb", 2, EMBER_SYNC, 77);
    float *snapshot = table_read_full(tp, &so_table);
    signal_key(tp, "created");
    dist_lookup(tp, &so_table, &s->b0, EMBER_BAG_SUM, 0, 0, s->pooled, &s->ctx);
    dist_grad(tp, &so_table, &s->ctx, EMBER_BAG_SUM, 0, 0, s->g0);
    dist_ctx_free(&s->ctx);
    so_held_lookup(tp, s, snapshot);
    so_check(tp, s, snapshot);
    call_ok(tp, 0, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(snapshot);
    ember_tp_destroy(tp);
}

static int case_sync_order(int rank, int world, void *arg)
{
    const pair_case_t pc = {&so_table, {5, 5}, 6, {11, 22, 33, 44}, so_master, so_trainer1};
    (void)world;
    (void)arg;
    return pair_run(rank, &pc);
}

/* ---- case 3: shards_match_local_pP ----------------------------------------- */

enum {
    SM_ROWS = 50,
    SM_DIM = 5,
    SM_BAGS = 12,
    SM_ROUNDS = 3
};

typedef struct {
    const char *label;
    ember_bag_mode_t mode;
    int weighted;
    ember_consistency_t consistency;
} sm_table_t;

static const sm_table_t sm_tables[] = {
        {"sum", EMBER_BAG_SUM, 0, EMBER_SYNC},
        {"mean", EMBER_BAG_MEAN, 0, EMBER_ASYNC},
        {"max", EMBER_BAG_MAX, 0, EMBER_SYNC},
        {"sum_w", EMBER_BAG_SUM, 1, EMBER_ASYNC},
};

static int shards_match_local(int rank, uint32_t P)
{
    char name[16];
    if (rank < (int)P) {
        snprintf(name, sizeof(name), "ps%d", rank);
        return run_ps(name);
    }
    ember_tp_t *tp = join_client("master");
    const size_t cells = (size_t)SM_ROWS * SM_DIM;
    float *pooled = malloc(SM_BAGS * SM_DIM * sizeof(float));
    MP_CHECK(pooled, "out of memory");

    for (size_t k = 0; k < sizeof(sm_tables) / sizeof(sm_tables[0]); k++) {
        const sm_table_t *spec = &sm_tables[k];
        table_ref_t t = {
                .first_ps = 0, .P = P, .table_id = (uint32_t)k, .rows = SM_ROWS, .dim = SM_DIM};
        table_create(tp, &t, spec->label, 1, spec->consistency, 42);
        float *ref = table_read_full(tp, &t);
        /* The initial rows do not depend on the shard count. */
        for (size_t i = 0; i < cells; i++)
            MP_CHECK(ref[i] == ember_normal_at(42, i), "%s: initial value %zu: %g vs %g",
                     spec->label, i, (double)ref[i], (double)ember_normal_at(42, i));
        for (uint64_t step = 0; step < SM_ROUNDS; step++) {
            char what[96];
            dist_ctx_t ctx = {0};
            batch_t b = make_batch(1000 * k + step, SM_BAGS, 7, SM_ROWS, spec->weighted);
            float *g = make_grad(5000 * k + step, SM_BAGS * SM_DIM);
            dist_lookup(tp, &t, &b, spec->mode, 0, step, pooled, &ctx);
            float *expect = ref_forward(ref, &t, &b, spec->mode, NULL);
            snprintf(what, sizeof(what), "P=%u %s step %llu pooled", P, spec->label,
                     (unsigned long long)step);
            EXPECT_CLOSE(pooled, expect, SM_BAGS * SM_DIM, 1e-6, what);
            for (size_t d = 0; d < SM_DIM; d++) /* bag 1 is empty */
                MP_CHECK(pooled[SM_DIM + d] == 0.0f, "%s: empty bag pooled to %g", what,
                         (double)pooled[SM_DIM + d]);
            dist_grad(tp, &t, &ctx, spec->mode, 0, step, g);
            float *dense = calloc(cells, sizeof(float));
            MP_CHECK(dense, "out of memory");
            ref_backward_add(ref, &t, &b, spec->mode, g, dense);
            ref_sgd(ref, &t, dense);
            float *now = table_read_full(tp, &t);
            snprintf(what, sizeof(what), "P=%u %s table after step %llu", P, spec->label,
                     (unsigned long long)step);
            EXPECT_CLOSE(now, ref, cells, 1e-6, what);
            free(now);
            free(dense);
            free(expect);
            free(g);
            dist_ctx_free(&ctx);
            batch_free(&b);
        }
        free(ref);
    }

    if (P > 1) {
        /* A row sent to the wrong shard is refused. */
        raw_lookup_t raw = raw_valid(0);
        raw.rows[0] = 1; /* shard 1's */
        raw.rows[1] = 2 * P;
        raw.head.step = SM_ROUNDS;
        expect_lookup_refused(tp, 0, &raw, EMBER_ERR_INVALID_PARAM, "row of shard 1",
                              NEEDLES("table sum", "trainer 0", "row 1", "shard 1"));
    }
    for (uint32_t p = 0; p < P; p++)
        call_ok(tp, (int)p, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(pooled);
    ember_tp_destroy(tp);
    return 0;
}

static int case_shards_p1(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    return shards_match_local(rank, 1);
}

static int case_shards_p2(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    return shards_match_local(rank, 2);
}

static int case_shards_p3(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    return shards_match_local(rank, 3);
}

/* ---- case 4: ps_survives_client_death -------------------------------------- */

static const table_ref_t cd_table = {.first_ps = 0, .P = 1, .table_id = 0, .rows = 60, .dim = 8};
static const table_ref_t cd_big = {.first_ps = 0, .P = 1, .table_id = 1, .rows = 5000, .dim = 64};
enum {
    CD_STEPS = 20
};

/* Trainer 1: a lookup, a large one whose reply will find nobody, then
 * death with its context open. */
static int cd_trainer1(float *pooled)
{
    ember_tp_t *tp = join_client("trainer1");
    dist_ctx_t ctx = {0};
    await_key(tp, "created");
    batch_t b = make_batch(9, 6, 5, cd_table.rows, 0);
    dist_lookup(tp, &cd_table, &b, EMBER_BAG_SUM, 1, 0, pooled, &ctx);
    batch_t big = make_batch(10, 2000, 20, cd_big.rows, 0);
    size_t length;
    uint32_t *counts = malloc(big.bags * sizeof(uint32_t));
    MP_CHECK(counts, "out of memory");
    uint8_t *message = lookup_message(&big, &cd_big, 1, 0, 0, 0, counts, &length);
    ember_iov_t iov = {.buffer = message, .length = length};
    ember_future_t *future;
    MP_CHECK(ember_rpc_call_async(tp, 0, EMBER_OP_LOOKUP, &iov, 1, NULL, 0,
                                  &(ember_rpc_param_t){.timeout_s = 20.0}, &future) == EMBER_OK,
             "big lookup");
    for (int i = 0; i < 20; i++)
        ember_tp_progress(tp);
    signal_key(tp, "t1-looked");
    raise(SIGKILL);
    return 1; /* not reached */
}

/* The survivor's steps, each checked against the reference @ref. */
static void cd_survivor_steps(ember_tp_t *tp, float *ref, float *pooled)
{
    const table_ref_t *t = &cd_table;
    const size_t cells = (size_t)t->rows * t->dim;
    for (uint64_t step = 0; step < CD_STEPS; step++) {
        dist_ctx_t ctx = {0};
        batch_t b = make_batch(100 + step, 6, 5, t->rows, 0);
        float *g = make_grad(200 + step, b.bags * t->dim);
        dist_lookup(tp, t, &b, EMBER_BAG_SUM, 0, step, pooled, &ctx);
        float *expect = ref_forward(ref, t, &b, EMBER_BAG_SUM, NULL);
        EXPECT_CLOSE(pooled, expect, b.bags * t->dim, 1e-6, "lookup after the death");
        dist_grad(tp, t, &ctx, EMBER_BAG_SUM, 0, step, g);
        float *dense = calloc(cells, sizeof(float));
        MP_CHECK(dense, "out of memory");
        ref_backward_add(ref, t, &b, EMBER_BAG_SUM, g, dense);
        ref_sgd(ref, t, dense);
        free(dense);
        free(expect);
        free(g);
        dist_ctx_free(&ctx);
        batch_free(&b);
    }
}

static void cd_master(float *pooled)
{
    ember_tp_t *tp = join_client("master");
    table_create(tp, &cd_table, "emb", 2, EMBER_ASYNC, 5);
    table_create(tp, &cd_big, "big", 2, EMBER_ASYNC, 6);
    float *ref = table_read_full(tp, &cd_table), *ref2 = table_read_full(tp, &cd_big);
    signal_key(tp, "created");
    await_key(tp, "t1-looked");
    for (int i = 0; i < 10; i++) /* let the death be noticed */
        ember_tp_wait(tp, 0.05);
    cd_survivor_steps(tp, ref, pooled);
    float *now = table_read_full(tp, &cd_table);
    EXPECT_CLOSE(now, ref, (size_t)cd_table.rows * cd_table.dim, 1e-6,
                 "table after the survivor's steps");
    check_table_is(tp, &cd_big, ref2, "the dead trainer's lookup changed table big");
    ember_msg_ps_stats_t stats;
    call_ok(tp, 0, EMBER_OP_PS_STATS, NULL, 0, &stats, sizeof(stats));
    MP_CHECK(stats.grads == CD_STEPS && stats.steps_applied == CD_STEPS &&
                     stats.lookups >= CD_STEPS + 1,
             "stats: %llu lookups, %llu grads, %llu steps", (unsigned long long)stats.lookups,
             (unsigned long long)stats.grads, (unsigned long long)stats.steps_applied);
    call_ok(tp, 0, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(now);
    free(ref);
    free(ref2);
    ember_tp_destroy(tp);
}

static int case_client_death(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    setenv("EMBER_SHUTDOWN_TIMEOUT", "2", 1); /* the dead rank never says goodbye */
    if (rank == 0)
        return run_ps("ps0");
    float *pooled = malloc(2000 * 64 * sizeof(float));
    MP_CHECK(pooled, "out of memory");
    if (rank == 2)
        return cd_trainer1(pooled);
    cd_master(pooled);
    free(pooled);
    return 0;
}

/* ---- case replies_pooled ----------------------------------------------------
 * The PS pools each lookup into a buffer lent to the transport until the
 * reply's send completes, then reuses it for the next lookup.  64 trainers
 * each send one 128 KiB lookup (rendezvous on every transport), 8 in flight:
 * a buffer reused before its send completed would corrupt a reply still
 * being read.  Then the PS's extra memory must be about 8 replies, well
 * under the 64 that one buffer per trainer would hold. */

enum {
    RP_TRAINERS = 64,
    RP_INFLIGHT = 8,
    RP_BAGS = 512,
    RP_TABLE = 5
};
static const table_ref_t rp_table = {
        .first_ps = 0, .P = 1, .table_id = RP_TABLE, .rows = 1000, .dim = 64};

static int case_replies_pooled(int rank, int world, void *arg)
{
    const int ps = 0;
    const size_t reply_bytes = (size_t)RP_BAGS * 64 * sizeof(float);
    (void)world;
    (void)arg;
    if (rank == 0)
        return run_ps("ps0");
    ember_tp_t *tp = join_client("master");
    table_create(tp, &rp_table, "pooled", RP_TRAINERS, EMBER_ASYNC, 99);
    float *table = table_read_full(tp, &rp_table);
    ember_msg_ps_stats_t before, after;
    call_ok(tp, ps, EMBER_OP_PS_STATS, NULL, 0, &before, sizeof(before));

    batch_t batches[RP_TRAINERS];
    uint8_t *messages[RP_TRAINERS];
    ember_iov_t iov[RP_TRAINERS];
    ember_future_t *futures[RP_TRAINERS];
    uint32_t counts[RP_BAGS];
    for (uint32_t t = 0; t < RP_TRAINERS; t++) {
        size_t length;
        batches[t] = make_batch(500 + t, RP_BAGS, 3, rp_table.rows, 0);
        messages[t] = lookup_message(&batches[t], &rp_table, t, 0, 0, 0, counts, &length);
        iov[t] = (ember_iov_t){.buffer = messages[t], .length = length};
    }
    size_t issued = 0;
    for (uint32_t done = 0; done < RP_TRAINERS; done++) {
        while (issued < RP_TRAINERS && issued < done + RP_INFLIGHT) {
            MP_CHECK(ember_rpc_call_async(tp, ps, EMBER_OP_LOOKUP, &iov[issued], 1, NULL, 0,
                                          &(ember_rpc_param_t){.timeout_s = 20.0},
                                          &futures[issued]) == EMBER_OK,
                     "lookup call of trainer %zu", issued);
            issued++;
        }
        ember_status_t status = ember_future_wait(futures[done]);
        size_t length;
        const float *got = ember_future_data(futures[done], &length);
        MP_CHECK(status == EMBER_OK && length == reply_bytes,
                 "trainer %u: %s, %zu bytes (want %zu)", done, ember_status_string(status), length,
                 reply_bytes);
        float *expect = ref_forward(table, &rp_table, &batches[done], EMBER_BAG_SUM, NULL);
        size_t where;
        double diff = max_diff(got, expect, RP_BAGS * 64, &where);
        MP_CHECK(diff <= 1e-5, "trainer %u: reply differs by %g at %zu", done, diff, where);
        free(expect);
        ember_future_release(futures[done]);
    }
    call_ok(tp, ps, EMBER_OP_PS_STATS, NULL, 0, &after, sizeof(after));
    /* Contexts grow too (a few KiB per trainer); one reply buffer per
     * trainer would add 64 x 128 KiB = 8 MiB on top. */
    MP_CHECK(after.other_bytes - before.other_bytes < 4 * (1u << 20),
             "the PS holds %llu more bytes after %d lookups of %zu bytes",
             (unsigned long long)(after.other_bytes - before.other_bytes), RP_TRAINERS,
             reply_bytes);
    /* The contexts (3 MiB here) and 8 replies' buffers (1 MiB) with room
     * for the transport's own; a buffer kept per trainer, counted or not,
     * would add 8 MiB. */
    check_rss_growth(&before, &after, 6u << 20, "replies pooled");
    MP_CHECK(after.lookups - before.lookups == RP_TRAINERS, "stats: %llu lookups",
             (unsigned long long)(after.lookups - before.lookups));
    call_ok(tp, ps, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    for (uint32_t t = 0; t < RP_TRAINERS; t++) {
        batch_free(&batches[t]);
        free(messages[t]);
    }
    free(table);
    ember_tp_destroy(tp);
    return 0;
}

/* ---- case async_grad_memory ------------------------------------------------
 * An async table applies each trainer's gradient as it arrives, so the PS
 * needs one gradient buffer, not one per trainer: 64 trainers each look up
 * and then push a gradient of ~1000 indices x 64 floats (~250 KiB); the
 * table must end as the reference's (each step's SGD in turn) and the PS
 * hold well under the 16 MiB a buffer per trainer would keep. */

static int case_async_grad_memory(int rank, int world, void *arg)
{
    const int ps = 0;
    const table_ref_t t = {.first_ps = 0, .P = 1, .table_id = 6, .rows = 1000, .dim = 64};
    (void)world;
    (void)arg;
    if (rank == 0)
        return run_ps("ps0");
    ember_tp_t *tp = join_client("master");
    table_create(tp, &t, "async_grads", RP_TRAINERS, EMBER_ASYNC, 31);
    float *expect = table_read_full(tp, &t);
    float *dense = calloc((size_t)t.rows * t.dim, sizeof(float));
    MP_CHECK(dense, "out of memory");
    batch_t batches[RP_TRAINERS];
    float *grads[RP_TRAINERS];
    for (uint32_t tr = 0; tr < RP_TRAINERS; tr++) {
        batches[tr] = make_batch(700 + tr, RP_BAGS, 3, t.rows, 0);
        grads[tr] = make_grad(900 + tr, RP_BAGS * t.dim);
        dist_ctx_t ctx;
        float *pooled = malloc(RP_BAGS * t.dim * sizeof(float));
        MP_CHECK(pooled, "out of memory");
        dist_lookup(tp, &t, &batches[tr], EMBER_BAG_SUM, tr, 0, pooled, &ctx);
        free(pooled);
        dist_ctx_free(&ctx);
    }
    ember_msg_ps_stats_t before, after;
    call_ok(tp, ps, EMBER_OP_PS_STATS, NULL, 0, &before, sizeof(before));
    for (uint32_t tr = 0; tr < RP_TRAINERS; tr++) {
        ember_msg_grad_t head = grad_head(t.table_id, tr, 0, RP_BAGS);
        reply_ok(grad_call(tp, ps, &head, grads[tr], RP_BAGS * t.dim), ps, EMBER_OP_GRAD, NULL, 0);
        /* SGD is linear: the async steps in turn sum to one step on the sum. */
        ref_backward_add(expect, &t, &batches[tr], EMBER_BAG_SUM, grads[tr], dense);
    }
    call_ok(tp, ps, EMBER_OP_PS_STATS, NULL, 0, &after, sizeof(after));
    MP_CHECK(after.grads - before.grads == RP_TRAINERS &&
                     after.steps_applied - before.steps_applied == RP_TRAINERS,
             "stats: %llu grads, %llu steps applied",
             (unsigned long long)(after.grads - before.grads),
             (unsigned long long)(after.steps_applied - before.steps_applied));
    MP_CHECK(after.other_bytes - before.other_bytes < (1u << 20),
             "the PS holds %llu more bytes after %d async gradients",
             (unsigned long long)(after.other_bytes - before.other_bytes), RP_TRAINERS);
    /* About 0.4 MiB here; a gradient buffer kept per trainer, 16 MiB. */
    check_rss_growth(&before, &after, 2u << 20, "async gradients");
    ref_sgd(expect, &t, dense);
    float *got = table_read_full(tp, &t);
    size_t where;
    double diff = max_diff(got, expect, (size_t)t.rows * t.dim, &where);
    MP_CHECK(diff <= 1e-4, "table after the async steps differs by %g at %zu", diff, where);
    call_ok(tp, ps, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    for (uint32_t tr = 0; tr < RP_TRAINERS; tr++) {
        batch_free(&batches[tr]);
        free(grads[tr]);
    }
    free(got);
    free(expect);
    free(dense);
    ember_tp_destroy(tp);
    return 0;
}

/* ---- case after_shutdown -----------------------------------------------------
 * ember_ps_run returns while its process keeps the transport (a job's PS
 * role then meets the others, or leaves): a late request must find no
 * handler, not the freed PS. */

static int case_after_shutdown(int rank, int world, void *arg)
{
    const int ps = 0;
    (void)world;
    (void)arg;
    if (rank == 0) {
        ember_tp_t *tp = join("ps0");
        ember_status_t status =
                ember_ps_run(tp, &(ember_ps_run_options_t){.threads = PS_TEST_THREADS});
        MP_CHECK(status == EMBER_OK, "ember_ps_run returned %s", ember_status_string(status));
        /* Still progressing: the client's late lookup arrives meanwhile. */
        MP_CHECK(ember_tp_barrier(tp, "ps-returned") == EMBER_OK, "ps-returned");
        MP_CHECK(ember_tp_barrier(tp, "late-done") == EMBER_OK, "late-done");
        ember_tp_destroy(tp);
        return 0;
    }
    ember_tp_t *tp = join_client("master");
    table_create(tp, &bl_table, "emb", 1, EMBER_ASYNC, 7);
    raw_lookup_t raw = raw_valid(BL_TABLE);
    size_t length;
    uint8_t *message = raw_message(&raw, &length);
    reply_t ok = call(tp, ps, EMBER_OP_LOOKUP, message, length);
    MP_CHECK(ok.status == EMBER_OK, "lookup before shutdown: %s", ember_status_string(ok.status));
    reply_free(&ok);
    call_ok(tp, ps, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    MP_CHECK(ember_tp_barrier(tp, "ps-returned") == EMBER_OK, "ps-returned");
    expect_refused(tp, ps, EMBER_OP_LOOKUP, message, length, EMBER_ERR_UNSUPPORTED,
                   "lookup after the PS returned", NEEDLES("no handler for op"));
    MP_CHECK(ember_tp_barrier(tp, "late-done") == EMBER_OK, "late-done");
    free(message);
    ember_tp_destroy(tp);
    return 0;
}

/* ---- main ------------------------------------------------------------------ */

/* ---- LOOKUPS and GRADS: every table of a step in one request ------------- */

/* A second table on ps0 beside bl_table ("emb", id 3). */
static const table_ref_t mt_table = {.first_ps = 0, .P = 1, .table_id = 4, .rows = 30, .dim = 2};
#define MT_WHO "table emb_b", "trainer 0", "step 0"

/* The valid lookup of table @id (emb: rows 3, 50; emb_b: rows 3, 20). */
static raw_lookup_t mt_raw(uint32_t id, uint32_t trainer, uint64_t step)
{
    raw_lookup_t raw = raw_valid(id);
    raw.head.trainer = trainer;
    raw.head.step = step;
    if (id == mt_table.table_id)
        raw.rows[1] = 20;
    return raw;
}

/* A LOOKUPS of @n lookups, as the codec packs it; malloc'd. */
static uint8_t *mt_lookups(const raw_lookup_t *raws, size_t n, size_t *length_p)
{
    ember_msg_lookups_t head = {
            .trainer = raws[0].head.trainer, .count = (uint32_t)n, .step = raws[0].head.step};
    uint8_t *message = calloc(1, 4096);
    size_t at = sizeof(head);
    MP_CHECK(message, "out of memory");
    memcpy(message, &head, sizeof(head));
    for (size_t k = 0; k < n; k++) {
        size_t length;
        uint8_t *one = raw_message(&raws[k], &length);
        memcpy(message + at, one, length);
        at += (size_t)ember_wire_pad(length);
        free(one);
    }
    *length_p = at;
    return message;
}

/* Trainer 0's LOOKUPS of emb and emb_b at step 0 taken: each table's reply
 * at its padded place, as ember_bag_forward pools the tables, each followed
 * by its version (0 steps applied). */
static void mt_lookups_ok(ember_tp_t *tp, uint32_t trainer, uint64_t step, uint32_t flags,
                          const float *emb, const float *emb_b)
{
    raw_lookup_t raws[2] = {mt_raw(bl_table.table_id, trainer, step),
                            mt_raw(mt_table.table_id, trainer, step)};
    raws[0].head.flags = raws[1].head.flags = flags;
    size_t length;
    uint8_t *message = mt_lookups(raws, 2, &length);
    float reply[2 * BL_DIM + 2 + 2 * 2 + 2]; /* emb's, its version, emb_b's, its version */
    call_ok(tp, 0, EMBER_OP_LOOKUPS, message, length, reply, sizeof(reply));
    uint64_t versions[2];
    memcpy(&versions[0], &reply[2 * BL_DIM], 8);
    memcpy(&versions[1], &reply[2 * BL_DIM + 2 + 2 * 2], 8);
    MP_CHECK(versions[0] == step && versions[1] == step, "versions %llu, %llu at step %llu",
             (unsigned long long)versions[0], (unsigned long long)versions[1],
             (unsigned long long)step);
    /* Bag 0 {3, 50, 50} or {3, 20, 20}, bag 1 empty. */
    for (size_t d = 0; d < BL_DIM; d++)
        MP_CHECK(reply[d] == emb[3 * BL_DIM + d] + emb[50 * BL_DIM + d] + emb[50 * BL_DIM + d] &&
                         reply[BL_DIM + d] == 0.0f,
                 "emb's reply, col %zu: %g", d, (double)reply[d]);
    for (size_t d = 0; d < 2; d++)
        MP_CHECK(reply[2 * BL_DIM + 2 + d] ==
                         emb_b[3 * 2 + d] + emb_b[20 * 2 + d] + emb_b[20 * 2 + d],
                 "emb_b's reply at byte 40, col %zu: %g", d, (double)reply[2 * BL_DIM + 2 + d]);
    free(message);
}

static void mt_lookups_refused(ember_tp_t *tp, const raw_lookup_t *raws, size_t n,
                               ember_status_t status, const char *what, const char *const *needles)
{
    size_t length;
    uint8_t *message = mt_lookups(raws, n, &length);
    expect_refused(tp, 0, EMBER_OP_LOOKUPS, message, length, status, what, needles);
    free(message);
}

/* A GRADS of trainer 0 step @step for emb (2 bags) and emb_b (@bags_b bags),
 * as trainers send it: the head, then both gradients back to back. */
typedef struct {
    uint8_t bytes[512];
    size_t length;
} mt_grads_t;

static mt_grads_t mt_grads(uint64_t step, const float *g, uint32_t bags_b)
{
    ember_msg_grads_t head = {.trainer = 0, .count = 2, .step = step, .flags = EMBER_GRAD_APPLY};
    ember_msg_grad_t heads[2] = {grad_head(bl_table.table_id, 0, step, 2),
                                 grad_head(mt_table.table_id, 0, step, bags_b)};
    mt_grads_t m;
    ember_wire_grads_pack_head(&head, heads, m.bytes);
    m.length = ember_wire_grads_head_size(2);
    size_t floats = 2 * BL_DIM + (size_t)bags_b * 2;
    memcpy(m.bytes + m.length, g, floats * sizeof(float));
    m.length += floats * sizeof(float);
    return m;
}

/* Each table moved by SGD on its gradient of the lookup of bags {3, r, r}, {}. */
static void mt_sgd(float *table, uint32_t dim, int64_t r, const float *g)
{
    for (uint32_t d = 0; d < dim; d++) {
        table[3 * dim + d] -= LR * g[d];
        table[(size_t)r * dim + d] -= LR * (g[d] + g[d]);
    }
}

static void mt_bad_lookups(ember_tp_t *tp)
{
    raw_lookup_t raws[2] = {mt_raw(bl_table.table_id, 0, 0), mt_raw(mt_table.table_id, 0, 0)};
    raws[1].rows[1] = 50; /* beyond emb_b's 30 rows */
    mt_lookups_refused(tp, raws, 2, EMBER_ERR_OUT_OF_RANGE, "a row beyond emb_b",
                       NEEDLES(MT_WHO, "index 50 is out of range [0, 30)"));
    raws[1] = mt_raw(9, 0, 0);
    mt_lookups_refused(tp, raws, 2, EMBER_ERR_NOT_FOUND, "an unknown table",
                       NEEDLES("trainer 0 step 0", "no table with id 9"));
    raws[1] = mt_raw(bl_table.table_id, 0, 0);
    mt_lookups_refused(tp, raws, 2, EMBER_ERR_INVALID_PARAM, "a table twice",
                       NEEDLES("trainer 0 step 0", "table 3 appears twice"));
    raws[1] = mt_raw(mt_table.table_id, 0, 1);
    mt_lookups_refused(tp, raws, 2, EMBER_ERR_INVALID_PARAM, "another step",
                       NEEDLES("table 4: its lookup of trainer 0 step 1"));
}

/* Gradients that must be refused whole: neither table changes. */
static void mt_bad_grads(ember_tp_t *tp, const float *g, const float *emb, const float *emb_b)
{
    float bad[2 * BL_DIM + 3 * 2];
    memcpy(bad, g, sizeof(bad));
    bad[2 * BL_DIM + 1] = NAN; /* emb_b's bag 0 */
    mt_grads_t m = mt_grads(0, bad, 2);
    expect_refused(tp, 0, EMBER_OP_GRADS, m.bytes, m.length, EMBER_ERR_NUMERIC,
                   "emb_b's gradient not finite", NEEDLES(MT_WHO, "non-finite", "bag 0"));
    m = mt_grads(0, g, 3);
    expect_refused(tp, 0, EMBER_OP_GRADS, m.bytes, m.length, EMBER_ERR_BAD_MESSAGE,
                   "emb_b's gradient of 3 bags", NEEDLES(MT_WHO, "gradient of 3 bags"));
    m = mt_grads(0, g, 2);
    expect_refused(tp, 0, EMBER_OP_GRADS, m.bytes, m.length - 4, EMBER_ERR_BAD_MESSAGE,
                   "a GRADS 4 bytes short",
                   NEEDLES("trainer 0 step 0", "carries 44 bytes", "need 48"));
    check_table_is(tp, &bl_table, emb, "emb changed after a refused GRADS");
    check_table_is(tp, &mt_table, emb_b, "emb_b changed after a refused GRADS");
}

static int case_lookups_atomic(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    if (rank == 0)
        return run_ps("ps0");
    ember_tp_t *tp = join_client("trainer0");
    table_create(tp, &bl_table, "emb", 1, EMBER_SYNC, 5);
    table_create(tp, &mt_table, "emb_b", 1, EMBER_SYNC, 6);
    float *emb = table_read_full(tp, &bl_table), *emb_b = table_read_full(tp, &mt_table);
    mt_bad_lookups(tp);
    /* Nothing was left behind: the request is taken now. */
    mt_lookups_ok(tp, 0, 0, 0, emb, emb_b);
    float *g = make_grad(3, 2 * BL_DIM + 3 * 2); /* room for emb_b's 3 bags */
    mt_bad_grads(tp, g, emb, emb_b);
    mt_grads_t m = mt_grads(0, g, 2);
    call_ok(tp, 0, EMBER_OP_GRADS, m.bytes, m.length, NULL, 0);
    mt_sgd(emb, BL_DIM, 50, g);
    mt_sgd(emb_b, 2, 20, g + 2 * BL_DIM);
    float *now = table_read_full(tp, &bl_table), *now_b = table_read_full(tp, &mt_table);
    EXPECT_CLOSE(now, emb, (size_t)BL_ROWS * BL_DIM, 1e-6, "emb after the GRADS");
    EXPECT_CLOSE(now_b, emb_b, (size_t)mt_table.rows * 2, 1e-6, "emb_b after the GRADS");
    mt_lookups_ok(tp, 0, 1, 0, now, now_b); /* step 1 is open */
    call_ok(tp, 0, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(now);
    free(now_b);
    free(g);
    free(emb);
    free(emb_b);
    ember_tp_destroy(tp);
    return 0;
}

static int case_grads_oneway_refused(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    if (rank == 0)
        return run_ps("ps0");
    ember_tp_t *tp = join_client("trainer0");
    table_create(tp, &bl_table, "emb", 1, EMBER_SYNC, 5);
    table_create(tp, &mt_table, "emb_b", 1, EMBER_SYNC, 6);
    float *emb = table_read_full(tp, &bl_table), *emb_b = table_read_full(tp, &mt_table);
    mt_lookups_ok(tp, 0, 0, 0, emb, emb_b);
    float *g = make_grad(3, 2 * BL_DIM + 2 * 2);
    g[2 * BL_DIM + 3] = INFINITY; /* emb_b's bag 1 */
    mt_grads_t m = mt_grads(0, g, 2);
    ember_iov_t iov = {.buffer = m.bytes, .length = m.length};
    ember_status_t sent = EMBER_INPROGRESS;
    MP_CHECK(ember_rpc_send(tp, 0, EMBER_OP_GRADS, &iov, 1, NULL, oneway_done, &sent) == EMBER_OK,
             "one-way GRADS");
    while (sent == EMBER_INPROGRESS)
        ember_tp_wait(tp, 0.05);
    MP_CHECK(sent == EMBER_OK, "one-way GRADS: %s", ember_status_string(sent));
    /* Step 1 would wait for a step 0 that cannot complete: refused at once. */
    raw_lookup_t raws[2] = {mt_raw(bl_table.table_id, 0, 1), mt_raw(mt_table.table_id, 0, 1)};
    mt_lookups_refused(tp, raws, 2, EMBER_ERR_INVALID_PARAM, "after a refused one-way GRADS",
                       NEEDLES(MT_WHO, "non-finite gradient (bag 1)"));
    check_table_is(tp, &bl_table, emb, "emb changed after a refused one-way GRADS");
    check_table_is(tp, &mt_table, emb_b, "emb_b changed after a refused one-way GRADS");
    call_ok(tp, 0, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(g);
    free(emb);
    free(emb_b);
    ember_tp_destroy(tp);
    return 0;
}

/* Trainer @trainer's step-0 LOOKUPS and its GRADS of @g. */
static void mt_step0(ember_tp_t *tp, uint32_t trainer, const float *emb, const float *emb_b,
                     const float *g)
{
    mt_lookups_ok(tp, trainer, 0, 0, emb, emb_b);
    mt_grads_t m = mt_grads(0, g, 2);
    ember_msg_grads_t head;
    memcpy(&head, m.bytes, sizeof(head));
    head.trainer = trainer;
    memcpy(m.bytes, &head, sizeof(head));
    for (size_t k = 0; k < 2; k++) {
        ember_msg_grad_t sub;
        uint8_t *at = m.bytes + sizeof(head) + k * sizeof(sub);
        memcpy(&sub, at, sizeof(sub));
        sub.trainer = trainer;
        memcpy(at, &sub, sizeof(sub));
    }
    call_ok(tp, 0, EMBER_OP_GRADS, m.bytes, m.length, NULL, 0);
}

/* A LOOKUPS of step 1 in flight (@flags: EMBER_LOOKUP_EVAL or not). */
static ember_future_t *mt_send_step1(ember_tp_t *tp, uint32_t flags, uint8_t **message_p)
{
    raw_lookup_t raws[2] = {mt_raw(bl_table.table_id, 0, 1), mt_raw(mt_table.table_id, 0, 1)};
    raws[0].head.flags = raws[1].head.flags = flags;
    size_t length;
    ember_future_t *future;
    *message_p = mt_lookups(raws, 2, &length);
    ember_iov_t iov = {.buffer = *message_p, .length = length};
    MP_CHECK(ember_rpc_call_async(tp, 0, EMBER_OP_LOOKUPS, &iov, 1, NULL, 0,
                                  &(ember_rpc_param_t){.timeout_s = 20.0}, &future) == EMBER_OK,
             "step-1 LOOKUPS");
    return future;
}

static void mt_held_master(void)
{
    ember_tp_t *tp = join_client("trainer0");
    table_create(tp, &bl_table, "emb", 2, EMBER_SYNC, 5);
    table_create(tp, &mt_table, "emb_b", 2, EMBER_SYNC, 6);
    float *emb = table_read_full(tp, &bl_table), *emb_b = table_read_full(tp, &mt_table);
    signal_key(tp, "created");
    float *g = make_grad(3, 2 * BL_DIM + 2 * 2);
    mt_step0(tp, 0, emb, emb_b, g);
    uint8_t *train_msg, *eval_msg;
    ember_future_t *train = mt_send_step1(tp, 0, &train_msg);
    ember_future_t *eval = mt_send_step1(tp, EMBER_LOOKUP_EVAL, &eval_msg);
    double start = now_s();
    while (now_s() - start < 0.3) {
        MP_CHECK(ember_future_test(train) == EMBER_INPROGRESS &&
                         ember_future_test(eval) == EMBER_INPROGRESS,
                 "a step-1 LOOKUPS answered before trainer 1's step-0 GRADS");
        ember_tp_wait(tp, 0.02);
    }
    signal_key(tp, "t0-waiting");
    size_t got_train, got_eval;
    MP_CHECK(ember_future_wait(train) == EMBER_OK && ember_future_wait(eval) == EMBER_OK,
             "the held LOOKUPS failed");
    const void *a = ember_future_data(train, &got_train), *b = ember_future_data(eval, &got_eval);
    MP_CHECK(got_train == 64 && got_eval == 64 && memcmp(a, b, 64) == 0,
             "the training and evaluation replies differ (%zu, %zu bytes)", got_train, got_eval);
    uint64_t version;
    memcpy(&version, (const uint8_t *)a + 2 * BL_DIM * 4, 8);
    MP_CHECK(version == 1, "the held LOOKUPS of step 1 served at version %llu",
             (unsigned long long)version);
    for (size_t d = 0; d < BL_DIM; d++)
        MP_CHECK(((const float *)a)[d] !=
                         emb[3 * BL_DIM + d] + emb[50 * BL_DIM + d] + emb[50 * BL_DIM + d],
                 "step 1 pooled the rows before the step-0 update (col %zu)", d);
    raw_lookup_t raws[2] = {mt_raw(bl_table.table_id, 0, 0), mt_raw(mt_table.table_id, 0, 0)};
    raws[0].head.flags = raws[1].head.flags = EMBER_LOOKUP_EVAL;
    mt_lookups_refused(tp, raws, 2, EMBER_ERR_INVALID_PARAM, "an evaluation of step 0",
                       NEEDLES("table emb", "step 0", "already applied (next is 1)"));
    ember_future_release(train);
    ember_future_release(eval);
    call_ok(tp, 0, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0);
    free(train_msg);
    free(eval_msg);
    free(g);
    free(emb);
    free(emb_b);
    ember_tp_destroy(tp);
}

static int case_lookups_held(int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    if (rank == 0)
        return run_ps("ps0");
    if (rank == 1) {
        mt_held_master();
        return 0;
    }
    ember_tp_t *tp = join_client("trainer1");
    await_key(tp, "created");
    float *emb = table_read_full(tp, &bl_table), *emb_b = table_read_full(tp, &mt_table);
    float *g = make_grad(4, 2 * BL_DIM + 2 * 2);
    await_key(tp, "t0-waiting");
    mt_step0(tp, 1, emb, emb_b, g);
    free(g);
    free(emb);
    free(emb_b);
    ember_tp_destroy(tp);
    return 0;
}

static const mp_case_t cases[] = {
        {"bad_lookup", case_bad_lookup, 3, 0},
        {"sync_order", case_sync_order, 3, 0},
        {"shards_match_local_p1", case_shards_p1, 2, 0},
        {"shards_match_local_p2", case_shards_p2, 3, 0},
        {"shards_match_local_p3", case_shards_p3, 4, 0},
        {"ps_survives_client_death", case_client_death, 3, 1u << 2},
        {"lookup_huge_counts", case_huge_counts, 2, 0},
        {"oneway_grad_refused", case_oneway_grad_refused, 2, 0},
        {"replies_pooled", case_replies_pooled, 2, 0},
        {"after_shutdown", case_after_shutdown, 2, 0},
        {"async_grad_memory", case_async_grad_memory, 2, 0},
        {"lookups_atomic", case_lookups_atomic, 2, 0},
        {"grads_oneway_refused", case_grads_oneway_refused, 2, 0},
        {"lookups_held", case_lookups_held, 3, 0},
};

int main(int argc, char **argv)
{
    return mp_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
