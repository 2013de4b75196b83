/* engine/train/sparse: a trainer's lookups and pushes of every table, one
 * request per PS (see sparse.h). */
#include "engine/train/sparse.h"

#include "common/clock.h"
#include "common/reserve.h"
#include "engine/ops/bag_slots.h"
#include "engine/train/parts.h"
#include "engine/train/row_cache.h"
#include "engine/train/split.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ember_sparse_config_t config;
    size_t *slots; /* [num_ps]: each shard's PS, sparse->ranks[slot] */
    /* This step's split: each shard's LOOKUP built in place, and the
     * combine's counts (engine/train/split). */
    ember_split_t split;
    size_t bags;
    uint32_t flags; /* this step's lookup flags */
    /* One shard's part of its PS's reply this step, as the codec lays it
     * out: its values, places, and the version behind them. */
    ember_wire_reply_layout_t reply;
    uint64_t version; /* the last lookup's: the fewest steps any shard had applied */
    /* Where its shards' replies and gradients lie in their PS's blocks:
     * the same in each (ember_sparse_create checked the placement). */
    size_t reply_at, grad_at;
    ember_parts_t parts;
    /* A cached table's (config.cache): its room in each PS's reply block
     * this step (the largest part any of its shards may send), each
     * shard's rows this step ([unique][dim]: the copies that stood, the
     * rows that came) and version, and its shards' parts pooled here
     * (shard p's at local + p * local_stride), where its parts are bound. */
    size_t room;
    float **rows;
    size_t *rows_capacity; /* floats */
    uint64_t *versions;
    uint8_t *local;
    size_t local_capacity, local_stride;
    /* The pooling's scratch: weighted entries' slots and weights apart,
     * and the ids 0 .. unique - 1 of a shard's rows. */
    uint32_t *entry_slots;
    float *entry_weights;
    size_t entries_capacity, weights_capacity;
    int64_t *ids;
    size_t ids_capacity;
    /* Max pooling's: each value's row (a slot of the shard's), and each
     * slot's first place in the bag being placed (seen: all 0 between). */
    int64_t *argmax;
    size_t argmax_capacity;
    uint32_t *first;
    uint8_t *seen;
    size_t first_capacity, seen_capacity;
} table_t;

/* A (table, shard) a PS serves, in the order of its requests. */
typedef struct {
    table_t *table;
    uint32_t shard;
} part_ref_t;

/* A PS this trainer looks tables up on: one LOOKUPS and one GRADS a step. */
typedef struct {
    int rank;
    part_ref_t *parts; /* row-sharded tables first, then whole ones; each in table order */
    size_t nparts;
    ember_msg_lookups_t lookups;    /* the LOOKUPS envelope: lives until answered */
    const uint8_t **messages;       /* [nparts] each part's LOOKUP */
    ember_iov_t *iov;               /* [nparts + 1] */
    ember_msg_grad_t *grad_heads;   /* [nparts] */
    uint8_t *grads_head;            /* the GRADS head, host memory */
    size_t reply_bytes, grad_bytes; /* this step's */
    ember_future_t *lookup, *push;  /* push: the last step's, a call */
    int pushing;                    /* a one-way push still leaving */
    ember_status_t push_status;
} rank_t;

struct ember_sparse {
    table_t *tables;
    size_t ntables;
    rank_t *ranks; /* every PS of any table, by increasing rank */
    size_t nranks;
    ember_tp_t *tp;
    const int *aborted;
    uint32_t trainer;
    /* Every table's replies and gradients: PS slot s's block at s *
     * reply_stride (s * grad_stride); a GRADS head sits in the
     * grad_head_room bytes before its gradients. */
    ember_parts_buffer_t replies, grads;
    size_t reply_stride, grad_stride, grad_head_room;
    uint64_t step;
    int eval;                /* this step's lookups are EMBER_LOOKUP_EVAL */
    uint64_t staleness_seen; /* the largest step - version of any lookup */
    uint64_t pushed_step;    /* the step of the last push */
    const char *split_table; /* the table the last split refused, or NULL */
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

static const char *ps_name(const ember_sparse_t *sparse, const rank_t *rank)
{
    return ember_tp_peer_name(sparse->tp, rank->rank);
}

/* ---- set-up --------------------------------------------------------------- */

/* A table's shape and ranks, within the job, of the trainer the first one
 * names, its id no other's. */
static ember_status_t check_table(const ember_sparse_config_t *tables, size_t k, int world)
{
    const ember_sparse_config_t *c = &tables[k];
    const char *name = c->table_name ? c->table_name : "?";
    if (c->num_ps == 0 || c->dim == 0 || c->first_ps_rank < 0 ||
        (int64_t)c->first_ps_rank + c->num_ps > world || c->trainer != tables[0].trainer ||
        c->trainer < 0) {
        ember_error("trainer",
                    "table %s: %u shards from rank %d of a job of %d, dim %u, trainer %d (table "
                    "%s's trainer %d): not a placement this trainer can look up",
                    name, c->num_ps, c->first_ps_rank, world, c->dim, c->trainer,
                    tables[0].table_name ? tables[0].table_name : "?", tables[0].trainer);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (c->rows < 1 || c->padding_idx < -1 || c->padding_idx >= c->rows ||
        (c->mode != EMBER_BAG_SUM && c->mode != EMBER_BAG_MEAN && c->mode != EMBER_BAG_MAX)) {
        ember_error("trainer",
                    "table %s: %lld rows, padding_idx %lld, pooling mode %d: not a table this "
                    "trainer can look up (padding_idx in [-1, rows))",
                    name, (long long)c->rows, (long long)c->padding_idx, (int)c->mode);
        return EMBER_ERR_INVALID_PARAM;
    }
    const char *why = !c->cache                                ? NULL
                      : c->half_replies                        ? "fp16 replies"
                      : c->dim > ember_row_cache_dim(c->cache) ? "rows wider than the cache's"
                                                               : NULL;
    if (why) {
        ember_error("trainer",
                    "table %s: its rows cannot be cached (--cache-rows) with %s (cached tables "
                    "have fp32 replies)",
                    name, why);
        return EMBER_ERR_INVALID_PARAM;
    }
    for (size_t j = 0; j < k; j++) {
        if (tables[j].table_id == c->table_id) {
            ember_error("trainer", "tables %s and %s have the same id %u",
                        tables[j].table_name ? tables[j].table_name : "?", name, c->table_id);
            return EMBER_ERR_INVALID_PARAM;
        }
    }
    return EMBER_OK;
}

/* Two row-sharded tables' servers: the same, one range inside the other, or
 * apart.  Otherwise the tables before one of them would differ from one of
 * its servers to the next, and so would its place in their blocks. */
static ember_status_t check_ranges(const ember_sparse_config_t *a, const ember_sparse_config_t *b)
{
    const int64_t a0 = a->first_ps_rank, a1 = a0 + a->num_ps;
    const int64_t b0 = b->first_ps_rank, b1 = b0 + b->num_ps;
    if (a->num_ps == 1 || b->num_ps == 1 || a1 <= b0 || b1 <= a0 || (a0 <= b0 && b1 <= a1) ||
        (b0 <= a0 && a1 <= b1))
        return EMBER_OK;
    ember_error("trainer",
                "tables %s (ranks %lld to %lld) and %s (ranks %lld to %lld) are row-sharded "
                "over partly overlapping servers: not supported (shard them over the same "
                "servers, or over apart ones)",
                a->table_name, (long long)a0, (long long)a1 - 1, b->table_name, (long long)b0,
                (long long)b1 - 1);
    return EMBER_ERR_INVALID_PARAM;
}

static ember_status_t check_tables(const ember_sparse_config_t *tables, size_t ntables, int world)
{
    if (ntables == 0) {
        ember_error("trainer", "a trainer of no tables");
        return EMBER_ERR_INVALID_PARAM;
    }
    for (size_t k = 0; k < ntables; k++) {
        EMBER_CHECK(check_table(tables, k, world));
        for (size_t j = 0; j < k; j++)
            EMBER_CHECK(check_ranges(&tables[j], &tables[k]));
    }
    return EMBER_OK;
}

/* The table's shards, each on its PS's slot (the ranks are sorted and
 * every rank of a row-sharded table is among them, so its shards' slots
 * follow each other). */
static ember_status_t table_init(ember_sparse_t *sparse, table_t *table,
                                 const ember_sparse_config_t *config, const ember_trainer_dev_t *td,
                                 int rdma)
{
    table->config = *config;
    if (!(table->slots = calloc(config->num_ps, sizeof(*table->slots))))
        return EMBER_ERR_NO_MEMORY;
    EMBER_CHECK(ember_split_init(&table->split, config));
    size_t first = 0;
    while (sparse->ranks[first].rank != config->first_ps_rank)
        first++;
    for (uint32_t p = 0; p < config->num_ps; p++)
        table->slots[p] = first + p;
    ember_parts_init(&table->parts, td, rdma, config->num_ps, config->dim, config->mode,
                     config->half_replies);
    if (!config->cache)
        return EMBER_OK;
    if (rdma) {
        ember_error("trainer",
                    "table %s: its rows cannot be cached (--cache-rows) on the device path "
                    "(GPUDirect replies land in GPU memory): cache with EMBER_GPUDIRECT=staged",
                    config->table_name);
        return EMBER_ERR_INVALID_PARAM;
    }
    table->rows = calloc(config->num_ps, sizeof(*table->rows));
    table->rows_capacity = calloc(config->num_ps, sizeof(*table->rows_capacity));
    table->versions = calloc(config->num_ps, sizeof(*table->versions));
    if (!table->rows || !table->rows_capacity || !table->versions)
        return EMBER_ERR_NO_MEMORY;
    return EMBER_OK;
}

static int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The PS ranks of every table, sorted and distinct. */
static ember_status_t ranks_collect(ember_sparse_t *sparse, const ember_sparse_config_t *tables,
                                    size_t ntables)
{
    size_t all = 0;
    for (size_t k = 0; k < ntables; k++)
        all += tables[k].num_ps;
    int *ranks = malloc(all * sizeof(int));
    if (!ranks || !(sparse->ranks = calloc(all, sizeof(*sparse->ranks)))) {
        free(ranks);
        return EMBER_ERR_NO_MEMORY;
    }
    all = 0;
    for (size_t k = 0; k < ntables; k++) {
        for (uint32_t p = 0; p < tables[k].num_ps; p++)
            ranks[all++] = tables[k].first_ps_rank + (int)p;
    }
    qsort(ranks, all, sizeof(int), compare_ints);
    for (size_t i = 0; i < all; i++) {
        if (i == 0 || ranks[i] != ranks[i - 1])
            sparse->ranks[sparse->nranks++].rank = ranks[i];
    }
    free(ranks);
    return EMBER_OK;
}

/* Each PS's (table, shard) parts in request order: row-sharded tables
 * first, then whole ones, each in table order, so a row-sharded table has
 * the same tables before it on each of its servers. */
static ember_status_t ranks_assign(ember_sparse_t *sparse)
{
    for (int whole = 0; whole < 2; whole++) {
        for (size_t k = 0; k < sparse->ntables; k++) {
            table_t *table = &sparse->tables[k];
            if ((table->config.num_ps == 1) != whole)
                continue;
            for (uint32_t p = 0; p < table->config.num_ps; p++) {
                rank_t *rank = &sparse->ranks[table->slots[p]];
                rank->parts[rank->nparts++] = (part_ref_t){.table = table, .shard = p};
            }
        }
    }
    size_t most = 0;
    for (size_t i = 0; i < sparse->nranks; i++) {
        if (sparse->ranks[i].nparts > EMBER_WIRE_MAX_TABLES) {
            ember_error("trainer", "%zu tables on %s: at most %d a parameter server",
                        sparse->ranks[i].nparts, ps_name(sparse, &sparse->ranks[i]),
                        EMBER_WIRE_MAX_TABLES);
            return EMBER_ERR_INVALID_PARAM;
        }
        most = sparse->ranks[i].nparts > most ? sparse->ranks[i].nparts : most;
    }
    sparse->grad_head_room = ember_wire_grads_head_size((uint32_t)most);
    return EMBER_OK;
}

/* Each PS's request arrays, sized for its parts. */
static ember_status_t ranks_alloc(ember_sparse_t *sparse)
{
    size_t total = 0;
    for (size_t k = 0; k < sparse->ntables; k++)
        total += sparse->tables[k].config.num_ps;
    for (size_t i = 0; i < sparse->nranks; i++) {
        rank_t *rank = &sparse->ranks[i];
        rank->parts = calloc(total, sizeof(*rank->parts));
        rank->messages = calloc(total, sizeof(*rank->messages));
        rank->iov = calloc(total + 1, sizeof(*rank->iov));
        rank->grad_heads = calloc(total, sizeof(*rank->grad_heads));
        rank->grads_head = calloc(1, ember_wire_grads_head_size((uint32_t)total));
        if (!rank->parts || !rank->messages || !rank->iov || !rank->grad_heads || !rank->grads_head)
            return EMBER_ERR_NO_MEMORY;
    }
    return EMBER_OK;
}

static ember_status_t sparse_build(ember_sparse_t *sparse, const ember_sparse_config_t *tables,
                                   size_t ntables, const ember_trainer_dev_t *td, int rdma)
{
    EMBER_CHECK(ranks_collect(sparse, tables, ntables));
    if (!(sparse->tables = calloc(ntables, sizeof(*sparse->tables))))
        return EMBER_ERR_NO_MEMORY;
    sparse->ntables = ntables;
    for (size_t k = 0; k < ntables; k++)
        EMBER_CHECK(table_init(sparse, &sparse->tables[k], &tables[k], td, rdma));
    EMBER_CHECK(ranks_alloc(sparse));
    return ranks_assign(sparse);
}

ember_status_t ember_sparse_create(const ember_sparse_config_t *tables, size_t ntables,
                                   ember_tp_t *tp, const ember_trainer_dev_t *td, int rdma,
                                   const int *aborted, ember_sparse_t **sparse_p)
{
    EMBER_CHECK(check_tables(tables, ntables, ember_tp_world_size(tp)));
    ember_sparse_t *sparse = calloc(1, sizeof(*sparse));
    if (!sparse)
        return EMBER_ERR_NO_MEMORY;
    sparse->tp = tp;
    sparse->aborted = aborted;
    sparse->trainer = (uint32_t)tables[0].trainer;
    ember_parts_buffer_init(&sparse->replies, td, rdma, tp);
    ember_parts_buffer_init(&sparse->grads, td, rdma, tp);
    ember_status_t status = sparse_build(sparse, tables, ntables, td, rdma);
    if (status != EMBER_OK) {
        ember_sparse_destroy(sparse);
        return status;
    }
    *sparse_p = sparse;
    return EMBER_OK;
}

static void rank_free(rank_t *rank)
{
    ember_future_release(rank->lookup);
    ember_future_release(rank->push);
    free(rank->parts);
    free(rank->messages);
    free(rank->iov);
    free(rank->grad_heads);
    free(rank->grads_head);
}

void ember_sparse_destroy(ember_sparse_t *sparse)
{
    if (!sparse)
        return;
    /* A one-way push still leaving reads its buffers: let it go (bounded). */
    double until = ember_time_now() + 2.0;
    for (size_t i = 0; i < sparse->nranks; i++) {
        while (sparse->ranks[i].pushing && ember_time_now() < until)
            ember_tp_wait(sparse->tp, 0.05);
    }
    for (size_t i = 0; sparse->ranks && i < sparse->nranks; i++)
        rank_free(&sparse->ranks[i]);
    for (size_t k = 0; sparse->tables && k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        ember_split_free(&table->split);
        ember_parts_destroy(&table->parts);
        for (uint32_t p = 0; table->rows && p < table->config.num_ps; p++)
            free(table->rows[p]);
        free(table->rows);
        free(table->rows_capacity);
        free(table->versions);
        free(table->local);
        free(table->entry_slots);
        free(table->entry_weights);
        free(table->ids);
        free(table->argmax);
        free(table->first);
        free(table->seen);
        free(table->slots);
    }
    ember_parts_buffer_free(&sparse->grads);
    ember_parts_buffer_free(&sparse->replies);
    free(sparse->tables);
    free(sparse->ranks);
    free(sparse);
}

size_t ember_sparse_tables(const ember_sparse_t *sparse)
{
    return sparse->ntables;
}

/* ---- split -------------------------------------------------------------- */

ember_status_t ember_sparse_split(ember_sparse_t *sparse, const ember_sparse_input_t *tables,
                                  uint64_t step, int eval, char *err, size_t err_length)
{
    sparse->step = step;
    sparse->eval = eval != 0;
    sparse->split_table = NULL;
    for (size_t k = 0; k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        ember_status_t status =
                ember_split_table(&table->split, &tables[k], step, eval, err, err_length);
        if (status != EMBER_OK) {
            sparse->split_table = table->config.table_name;
            return status;
        }
        table->bags = table->split.bags;
        table->flags = table->split.flags;
    }
    return EMBER_OK;
}

const char *ember_sparse_split_table(const ember_sparse_t *sparse)
{
    return sparse->split_table;
}

/* ---- lookups ------------------------------------------------------------ */

ember_status_t ember_sparse_pushes_wait(ember_sparse_t *sparse, uint64_t step, char *err,
                                        size_t err_length)
{
    for (size_t i = 0; i < sparse->nranks; i++) {
        rank_t *rank = &sparse->ranks[i];
        while (rank->pushing && !*sparse->aborted)
            ember_tp_wait(sparse->tp, 0.2);
        if (rank->push_status != EMBER_OK)
            return fail(err, err_length, rank->push_status,
                        "the gradient push of step %llu to %s was lost: %s",
                        (unsigned long long)sparse->pushed_step, ps_name(sparse, rank),
                        ember_status_string(rank->push_status));
        if (!rank->push)
            continue;
        char what[96];
        snprintf(what, sizeof(what), "%s to %s",
                 step ? "the last step's gradient push" : "gradient push", ps_name(sparse, rank));
        ember_status_t status = sparse_wait(sparse, rank->push);
        if (status != EMBER_OK)
            return fail_future(err, err_length, status, rank->push, what);
        ember_future_release(rank->push);
        rank->push = NULL;
    }
    return EMBER_OK;
}

ember_status_t ember_sparse_pushes_taken(ember_sparse_t *sparse, uint64_t step, char *err,
                                         size_t err_length)
{
    const ember_msg_grads_fence_t msg = {.trainer = sparse->trainer, .step = step};
    const ember_iov_t iov = {&msg, sizeof(msg)};
    ember_future_t **fences = calloc(sparse->nranks ? sparse->nranks : 1, sizeof(*fences));
    ember_status_t status = fences ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    if (status != EMBER_OK)
        return fail(err, err_length, status, "the pushes' fences: out of memory");
    /* Every PS at once; each answers once it ran the pushes before. */
    for (size_t i = 0; status == EMBER_OK && i < sparse->nranks; i++) {
        status = ember_rpc_call_async(sparse->tp, sparse->ranks[i].rank, EMBER_OP_GRADS_FENCE, &iov,
                                      1, NULL, 0, NULL, &fences[i]);
        if (status != EMBER_OK)
            fail(err, err_length, status, "the pushes' fence to %s: %s",
                 ps_name(sparse, &sparse->ranks[i]), ember_status_string(status));
    }
    for (size_t i = 0; i < sparse->nranks && fences[i]; i++) {
        ember_status_t got = status == EMBER_OK ? sparse_wait(sparse, fences[i]) : EMBER_OK;
        if (got != EMBER_OK && status == EMBER_OK) {
            char what[96];
            snprintf(what, sizeof(what), "the gradient pushes before step %llu to %s",
                     (unsigned long long)step, ps_name(sparse, &sparse->ranks[i]));
            status = fail_future(err, err_length, got, fences[i], what);
        }
        ember_future_release(fences[i]);
    }
    free(fences);
    return status;
}

/* Where part @ref lies in its PS's blocks this step: after the parts
 * before it, each reply padded, the gradients back to back after the GRADS
 * head's room.  A table's place is the one its first shard found; its
 * other shards' must be the same (the placement check made it so). */
static ember_status_t layout_part(table_t *table, size_t reply_at, size_t grad_at, int first)
{
    if (first) {
        table->reply_at = reply_at;
        table->grad_at = grad_at;
        return EMBER_OK;
    }
    if (table->reply_at != reply_at || table->grad_at != grad_at) {
        ember_error("trainer", "table %s: its shards' replies would not lie at one stride",
                    table->config.table_name);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/* Each PS's reply and gradient block this step, and the strides between
 * them: the largest block's. */
static ember_status_t layout_step(ember_sparse_t *sparse)
{
    sparse->reply_stride = sparse->grad_stride = EMBER_WIRE_ALIGN;
    for (size_t k = 0; k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        /* A cached table's parts see the replies its PS would have sent,
         * pooled here. */
        ember_wire_reply_layout(table->flags & ~(uint32_t)EMBER_LOOKUP_ROWS, (uint32_t)table->bags,
                                table->config.dim, &table->reply);
        table->room = 0;
        for (uint32_t p = 0; table->config.cache && p < table->config.num_ps; p++) {
            const uint32_t unique = table->split.shards[p].head.unique;
            const size_t most =
                    (size_t)ember_wire_rows_reply_bytes(unique, table->config.dim, unique);
            table->room = most > table->room ? most : table->room;
        }
    }
    for (size_t i = 0; i < sparse->nranks; i++) {
        rank_t *rank = &sparse->ranks[i];
        size_t reply_at = 0, grad_at = sparse->grad_head_room;
        for (size_t j = 0; j < rank->nparts; j++) {
            table_t *table = rank->parts[j].table;
            int first = rank->parts[j].shard == 0;
            EMBER_CHECK(layout_part(table, reply_at, grad_at, first));
            reply_at += table->config.cache ? table->room : (size_t)table->reply.part_bytes;
            grad_at += table->bags * table->config.dim * sizeof(float);
        }
        rank->reply_bytes = reply_at;
        rank->grad_bytes = grad_at - sparse->grad_head_room;
        if (reply_at > sparse->reply_stride)
            sparse->reply_stride = reply_at;
        if (ember_wire_pad(grad_at) > sparse->grad_stride)
            sparse->grad_stride = (size_t)ember_wire_pad(grad_at);
    }
    return EMBER_OK;
}

/* ---- cached tables (config.cache) -------------------------------------------- */

/* A cached table's parts bound to its own block, where its shards' parts
 * are pooled (the replies its PS would have sent); its gradients where
 * any table's go. */
static ember_status_t cached_bind(table_t *table, uint8_t *grads, size_t grad_stride)
{
    const size_t stride = (size_t)ember_wire_pad(table->reply.bytes ? table->reply.bytes : 1);
    const size_t bytes = stride * table->config.num_ps;
    if (!EMBER_RESERVE(table->local, table->local_capacity, bytes))
        return EMBER_ERR_NO_MEMORY;
    table->local_stride = stride;
    return ember_parts_bind(&table->parts, table->bags, &table->reply, table->local, stride,
                            (float *)grads, grad_stride);
}

/* Shard @p's LOOKUP of a cached table: its rows and held versions. */
static void cached_arrays(const table_t *table, uint32_t p, const int64_t **rows_p,
                          uint64_t **held_p)
{
    const ember_split_shard_t *shard = &table->split.shards[p];
    ember_wire_lookup_layout_t at;
    ember_wire_lookup_layout(&shard->head, &at);
    *rows_p = (const int64_t *)(shard->request + at.rows);
    *held_p = (uint64_t *)(shard->request + at.held);
}

/* Each cached table's LOOKUPs told which rows the cache holds (at which
 * version), and those copies taken into the step's rows now: the cache
 * may replace them before the replies come. */
static ember_status_t cached_hold(ember_sparse_t *sparse)
{
    for (size_t k = 0; k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        ember_row_cache_t *cache = table->config.cache;
        const size_t dim = table->config.dim;
        for (uint32_t p = 0; cache && p < table->config.num_ps; p++) {
            const size_t unique = table->split.shards[p].head.unique;
            const int64_t *rows;
            uint64_t *held;
            if (!EMBER_RESERVE(table->rows[p], table->rows_capacity[p], unique * dim + 1))
                return EMBER_ERR_NO_MEMORY;
            cached_arrays(table, p, &rows, &held);
            for (size_t u = 0; u < unique; u++) {
                const int64_t slot =
                        ember_row_cache_find(cache, table->config.table_id, (uint64_t)rows[u]);
                held[u] = slot < 0 ? EMBER_ROW_NONE : ember_row_cache_version(cache, slot);
                if (slot >= 0)
                    memcpy(table->rows[p] + u * dim, ember_row_cache_values(cache, slot),
                           dim * sizeof(float));
            }
        }
    }
    return EMBER_OK;
}

/* Shard @p's part of a cached table's reply (@head checked by the codec):
 * each row's copy that stood, or its values that came, into the step's
 * rows, and the cache told.  A copy said to stand must have been held,
 * and one standing by the staleness bound within it. */
static ember_status_t cached_take(ember_sparse_t *sparse, table_t *table, uint32_t p,
                                  const uint8_t *part, const ember_msg_rows_reply_t *head,
                                  const char *ps, char *err, size_t err_length)
{
    ember_row_cache_t *cache = table->config.cache;
    const size_t dim = table->config.dim, unique = table->split.shards[p].head.unique;
    const uint8_t *states = part + ember_wire_rows_reply_states_at();
    const float *values = (const float *)(part + ember_wire_rows_reply_values_at(unique));
    const int64_t *rows;
    uint64_t *held;
    uint64_t hits = 0, stale = 0, behind = 0;
    const uint64_t bound = sparse->eval || table->config.async ? 0 : table->config.staleness;
    cached_arrays(table, p, &rows, &held);
    table->versions[p] = head->version;
    for (size_t u = 0, fresh = 0; u < unique; u++) {
        float *row = table->rows[p] + u * dim;
        if (states[u] == EMBER_ROW_FRESH) {
            memcpy(row, values + fresh++ * dim, dim * sizeof(float));
            ember_row_cache_put(cache, table->config.table_id, (uint64_t)rows[u], row,
                                (uint32_t)dim, head->clock);
            continue;
        }
        const int stands_stale = states[u] == EMBER_ROW_STALE;
        if (held[u] == EMBER_ROW_NONE || held[u] > head->clock ||
            (stands_stale &&
             (bound == 0 || held[u] > sparse->step || sparse->step - held[u] > bound)))
            return fail(err, err_length, EMBER_ERR_BAD_MESSAGE,
                        "table %s: %s said the copy of row %lld (version %llu held) stands at "
                        "step %llu, clock %llu, staleness bound %llu: it does not",
                        table->config.table_name, ps, (long long)rows[u],
                        held[u] == EMBER_ROW_NONE ? 0ull : (unsigned long long)held[u],
                        (unsigned long long)sparse->step, (unsigned long long)head->clock,
                        (unsigned long long)bound);
        hits++;
        if (stands_stale) {
            stale++;
            behind = sparse->step - held[u] > behind ? sparse->step - held[u] : behind;
        } else { /* unchanged since: the copy is the row at the clock */
            ember_row_cache_put(cache, table->config.table_id, (uint64_t)rows[u], row,
                                (uint32_t)dim, head->clock);
        }
    }
    ember_row_cache_count(cache, unique, hits, stale, behind);
    return EMBER_OK;
}

/* Shard @p of a cached table pooled here from the step's rows, as its PS
 * pools a lookup (engine/ops/bag_slots.h: each bag in its entries'
 * order, the same bits), into where its reply would have landed. */
static ember_status_t cached_pool(table_t *table, uint32_t p)
{
    const ember_split_shard_t *shard = &table->split.shards[p];
    const ember_msg_lookup_t *head = &shard->head;
    ember_wire_lookup_layout_t at;
    ember_wire_lookup_layout(head, &at);
    const size_t n = head->indices, unique = head->unique;
    const uint32_t *slots = (const uint32_t *)(shard->request + at.entries);
    const float *weights = NULL;
    const int max = (head->flags & EMBER_LOOKUP_MAX) != 0;
    if (at.entry_bytes == 8) { /* entries (slot, weight or place): apart */
        if (!EMBER_RESERVE(table->entry_slots, table->entries_capacity, n + 1) ||
            !EMBER_RESERVE(table->entry_weights, table->weights_capacity, n + 1))
            return EMBER_ERR_NO_MEMORY;
        for (size_t i = 0; i < n; i++) {
            memcpy(&table->entry_slots[i], shard->request + at.entries + 8 * i, 4);
            memcpy(&table->entry_weights[i], shard->request + at.entries + 8 * i + 4, 4);
        }
        slots = table->entry_slots;
        weights = max ? NULL : table->entry_weights; /* max: the places */
    }
    if (!EMBER_RESERVE(table->ids, table->ids_capacity, unique + 1))
        return EMBER_ERR_NO_MEMORY;
    for (size_t u = 0; u < unique; u++)
        table->ids[u] = (int64_t)u;
    const ember_bag_table_t rows = {.data = table->rows[p],
                                    .dtype = EMBER_DTYPE_F32,
                                    .rows = (int64_t)unique,
                                    .dim = table->config.dim};
    const ember_bag_slots_t batch = {.rows = table->ids,
                                     .slots = slots,
                                     .n = n,
                                     .offsets = (const uint32_t *)(shard->request + at.offsets),
                                     .bags = head->bags,
                                     .weights = weights};
    uint8_t *out = table->local + p * table->local_stride;
    const size_t dim = table->config.dim, bags = head->bags;
    if (!max)
        return ember_bag_forward_slots(&rows, &batch, EMBER_BAG_SUM, (float *)out, NULL);
    if (!EMBER_RESERVE(table->argmax, table->argmax_capacity, bags * dim + 1) ||
        !EMBER_RESERVE(table->first, table->first_capacity, unique + 1) ||
        !EMBER_RESERVE(table->seen, table->seen_capacity, unique + 1))
        return EMBER_ERR_NO_MEMORY;
    EMBER_CHECK(ember_bag_forward_slots(&rows, &batch, EMBER_BAG_MAX, (float *)out, table->argmax));
    /* Each maximum's place, as the PS gives it (engine/ps/table_work.c):
     * the first maximal entry's row occurs nowhere earlier in its bag, so
     * its place is that row's first in the bag. */
    const float *places = table->entry_weights; /* each entry's place's bits */
    const uint32_t *offsets = batch.offsets;
    uint32_t *places_out = (uint32_t *)(out + table->reply.places);
    memset(table->seen, 0, unique);
    for (size_t b = 0; b < bags; b++) {
        const size_t begin = offsets[b], end = b + 1 < bags ? offsets[b + 1] : n;
        for (size_t i = begin; i < end; i++) {
            if (!table->seen[slots[i]]) {
                table->seen[slots[i]] = 1;
                memcpy(&table->first[slots[i]], &places[i], sizeof(uint32_t));
            }
        }
        for (size_t d = 0; d < dim; d++) {
            const int64_t row = table->argmax[b * dim + d];
            places_out[b * dim + d] = row < 0 ? EMBER_PLACE_NONE : table->first[row];
        }
        for (size_t i = begin; i < end; i++)
            table->seen[slots[i]] = 0;
    }
    return EMBER_OK;
}

/* Every cached table's shards pooled. */
static ember_status_t cached_pool_all(ember_sparse_t *sparse, char *err, size_t err_length)
{
    for (size_t k = 0; k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        for (uint32_t p = 0; table->config.cache && p < table->config.num_ps; p++) {
            ember_status_t status = cached_pool(table, p);
            if (status != EMBER_OK)
                return fail(err, err_length, status, "table %s: pooling its cached rows: %s",
                            table->config.table_name, ember_status_string(status));
        }
    }
    return EMBER_OK;
}

/* PS slot @i's reply of @got bytes, its parts back to back (a cached
 * part as long as its rows that came): the cached parts taken, then every
 * other part moved up to where the step's layout has it (the last
 * first: none lands on a part not yet moved). */
static ember_status_t cached_unpack(ember_sparse_t *sparse, size_t i, size_t got, char *err,
                                    size_t err_length)
{
    rank_t *rank = &sparse->ranks[i];
    uint8_t *block = (uint8_t *)sparse->replies.scratch.data + i * sparse->reply_stride;
    const char *ps = ps_name(sparse, rank);
    size_t at[EMBER_WIRE_MAX_TABLES], packed = 0;
    for (size_t j = 0; j < rank->nparts; j++) {
        table_t *table = rank->parts[j].table;
        const uint32_t p = rank->parts[j].shard;
        at[j] = packed;
        if (!table->config.cache) {
            if (table->reply.part_bytes > got - packed)
                return fail(err, err_length, EMBER_ERR_BAD_MESSAGE,
                            "lookup on %s failed: its reply of %zu bytes ends in table %s's part",
                            ps, got, table->config.table_name);
            packed += (size_t)table->reply.part_bytes;
            continue;
        }
        ember_msg_rows_reply_t head;
        size_t bytes = 0;
        char why[200];
        ember_status_t status = ember_wire_rows_reply_check(
                block + packed, got - packed, table->split.shards[p].head.unique, table->config.dim,
                &head, &bytes, why, sizeof(why));
        if (status != EMBER_OK)
            return fail(err, err_length, status, "lookup on %s failed: table %s: %s", ps,
                        table->config.table_name, why);
        EMBER_CHECK(cached_take(sparse, table, p, block + packed, &head, ps, err, err_length));
        packed += bytes;
    }
    if (packed != got)
        return fail(err, err_length, EMBER_ERR_BAD_MESSAGE,
                    "lookup on %s failed: its reply has %zu bytes, its parts %zu", ps, got, packed);
    for (size_t j = rank->nparts; j-- > 0;) {
        const table_t *table = rank->parts[j].table;
        if (!table->config.cache && at[j] != table->reply_at)
            memmove(block + table->reply_at, block + at[j], (size_t)table->reply.part_bytes);
    }
    return EMBER_OK;
}

/* Whether PS slot @i's reply has a cached part (its size not known ahead). */
static int rank_cached(const rank_t *rank)
{
    for (size_t j = 0; j < rank->nparts; j++) {
        if (rank->parts[j].table->config.cache)
            return 1;
    }
    return 0;
}

/* The step's blocks reserved and each table's parts bound into them. */
static ember_status_t bind_step(ember_sparse_t *sparse)
{
    EMBER_CHECK(layout_step(sparse));
    EMBER_CHECK(
            ember_parts_buffer_reserve(&sparse->replies, sparse->nranks * sparse->reply_stride));
    EMBER_CHECK(ember_parts_buffer_reserve(&sparse->grads, sparse->nranks * sparse->grad_stride));
    uint8_t *replies = sparse->replies.scratch.data, *grads = sparse->grads.scratch.data;
    for (size_t k = 0; k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        const size_t slot = table->slots[0];
        if (table->config.cache) {
            EMBER_CHECK(cached_bind(table, grads + slot * sparse->grad_stride + table->grad_at,
                                    sparse->grad_stride / sizeof(float)));
            continue;
        }
        EMBER_CHECK(ember_parts_bind(&table->parts, table->bags, &table->reply,
                                     replies + slot * sparse->reply_stride + table->reply_at,
                                     sparse->reply_stride,
                                     (float *)(grads + slot * sparse->grad_stride + table->grad_at),
                                     sparse->grad_stride / sizeof(float)));
    }
    return EMBER_OK;
}

/* Every PS's LOOKUPS in flight, each reply landing in its block. */
static ember_status_t lookups_send(ember_sparse_t *sparse, char *err, size_t err_length)
{
    const ember_rpc_param_t to_device = {.payload_mem = EMBER_MEM_HOST,
                                         .reply_mem = ember_parts_mem(&sparse->tables[0].parts),
                                         .reply_reg = sparse->replies.reg};
    uint8_t *replies = sparse->replies.scratch.data;
    for (size_t i = 0; i < sparse->nranks; i++) {
        rank_t *rank = &sparse->ranks[i];
        rank->lookups = (ember_msg_lookups_t){
                .trainer = sparse->trainer, .count = (uint32_t)rank->nparts, .step = sparse->step};
        for (size_t j = 0; j < rank->nparts; j++)
            rank->messages[j] = rank->parts[j].table->split.shards[rank->parts[j].shard].request;
        size_t iovcnt = ember_wire_lookups_pack_iov(&rank->lookups, rank->messages, rank->nparts,
                                                    rank->iov);
        ember_status_t status = ember_rpc_call_async(
                sparse->tp, rank->rank, EMBER_OP_LOOKUPS, rank->iov, iovcnt,
                replies + i * sparse->reply_stride, rank->reply_bytes, &to_device, &rank->lookup);
        if (status != EMBER_OK)
            return fail(err, err_length, status, "lookup on %s: %s", ps_name(sparse, rank),
                        ember_status_string(status));
    }
    return EMBER_OK;
}

static void lookups_release(ember_sparse_t *sparse, size_t from)
{
    for (size_t i = from; i < sparse->nranks; i++) {
        ember_future_release(sparse->ranks[i].lookup);
        sparse->ranks[i].lookup = NULL;
    }
}

/* Every reply in, each of the size its LOOKUPS asked for. */
static ember_status_t lookups_wait(ember_sparse_t *sparse, char *err, size_t err_length)
{
    for (size_t i = 0; i < sparse->nranks; i++) {
        rank_t *rank = &sparse->ranks[i];
        char what[96];
        ember_status_t status = sparse_wait(sparse, rank->lookup);
        size_t got = 0;
        if (status == EMBER_OK)
            ember_future_data(rank->lookup, &got);
        snprintf(what, sizeof(what), "lookup on %s", ps_name(sparse, rank));
        const int cached = rank_cached(rank), came = status == EMBER_OK;
        if (came && cached && got <= rank->reply_bytes)
            status = cached_unpack(sparse, i, got, err, err_length);
        else if (came && got != rank->reply_bytes)
            status = fail(err, err_length, EMBER_ERR_BAD_MESSAGE,
                          "%s failed: its reply has %zu bytes, not %zu", what, got,
                          rank->reply_bytes);
        else if (!came)
            fail_future(err, err_length, status, rank->lookup, what);
        if (status != EMBER_OK) {
            lookups_release(sparse, i);
            return status;
        }
        ember_future_release(rank->lookup);
        rank->lookup = NULL;
    }
    return EMBER_OK;
}

/* The version of shard @p of @table, read from where its reply landed
 * (device memory on the device path: copied out). */
static ember_status_t shard_version(ember_sparse_t *sparse, const table_t *table, uint32_t p,
                                    uint64_t *version_p)
{
    if (table->config.cache) { /* taken from its part as it came */
        *version_p = table->versions[p];
        return EMBER_OK;
    }
    const size_t at =
            table->slots[p] * sparse->reply_stride + table->reply_at + (size_t)table->reply.version;
    return ember_parts_buffer_get(&sparse->replies, at, version_p, sizeof(*version_p));
}

/* Each table's shards' versions: a sync table's lookup of step s was
 * served at most its staleness behind (an evaluation: exactly at s), never
 * ahead; the table's version is its shards' fewest. */
static ember_status_t versions_check(ember_sparse_t *sparse, char *err, size_t err_length)
{
    for (size_t k = 0; k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        const uint64_t bound = sparse->eval ? 0 : table->config.staleness;
        table->version = UINT64_MAX;
        for (uint32_t p = 0; p < table->config.num_ps; p++) {
            uint64_t v;
            EMBER_CHECK(shard_version(sparse, table, p, &v));
            if (v < table->version)
                table->version = v;
            if (table->config.async)
                continue;
            if (v > sparse->step || sparse->step - v > bound)
                return fail(err, err_length, EMBER_ERR_BAD_MESSAGE,
                            "table %s: %s served the lookup of step %llu at version %llu (steps "
                            "applied), beyond the staleness bound %llu",
                            table->config.table_name,
                            ember_tp_peer_name(sparse->tp, sparse->ranks[table->slots[p]].rank),
                            (unsigned long long)sparse->step, (unsigned long long)v,
                            (unsigned long long)bound);
            if (sparse->step - v > sparse->staleness_seen)
                sparse->staleness_seen = sparse->step - v;
        }
    }
    return EMBER_OK;
}

ember_status_t ember_sparse_lookup_send(ember_sparse_t *sparse, char *err, size_t err_length)
{
    /* The step's buffers may move: no push may still be reading them. */
    for (size_t i = 0; i < sparse->nranks; i++) {
        if (sparse->ranks[i].pushing || sparse->ranks[i].push)
            return fail(err, err_length, EMBER_ERR_INVALID_PARAM,
                        "lookups of step %llu while a push to %s is still leaving "
                        "(ember_sparse_pushes_wait first)",
                        (unsigned long long)sparse->step, ps_name(sparse, &sparse->ranks[i]));
    }
    ember_status_t status = bind_step(sparse);
    if (status == EMBER_OK)
        status = cached_hold(sparse);
    if (status != EMBER_OK)
        return fail(err, err_length, status, "the step's reply buffers: %s",
                    ember_status_string(status));
    return lookups_send(sparse, err, err_length);
}

ember_status_t ember_sparse_lookup_wait(ember_sparse_t *sparse, char *err, size_t err_length)
{
    EMBER_CHECK(lookups_wait(sparse, err, err_length));
    EMBER_CHECK(versions_check(sparse, err, err_length));
    return cached_pool_all(sparse, err, err_length);
}

ember_status_t ember_sparse_lookup(ember_sparse_t *sparse, char *err, size_t err_length)
{
    EMBER_CHECK(ember_sparse_lookup_send(sparse, err, err_length));
    return ember_sparse_lookup_wait(sparse, err, err_length);
}

uint64_t ember_sparse_version(const ember_sparse_t *sparse, size_t table)
{
    return table < sparse->ntables ? sparse->tables[table].version : 0;
}

uint64_t ember_sparse_staleness_seen(const ember_sparse_t *sparse)
{
    return sparse->staleness_seen;
}

ember_status_t ember_sparse_combine(ember_sparse_t *sparse, size_t table, float *x)
{
    if (table >= sparse->ntables)
        return EMBER_ERR_INVALID_PARAM;
    table_t *t = &sparse->tables[table];
    return ember_parts_combine(&t->parts, t->split.counts, t->split.bag_counts, x);
}

/* ---- pushes ------------------------------------------------------------- */

/* A one-way gradient push has left (or was lost with its peer). */
static void push_done(void *arg, ember_status_t status)
{
    rank_t *rank = arg;
    rank->pushing = 0;
    rank->push_status = status;
}

/* PS slot @i's GRADS: its head written in front of its gradients, so the
 * whole message is one buffer (the device path's payload layout). */
static ember_status_t push_rank(ember_sparse_t *sparse, size_t i, int last)
{
    rank_t *rank = &sparse->ranks[i];
    const ember_msg_grads_t head = {.trainer = sparse->trainer,
                                    .count = (uint32_t)rank->nparts,
                                    .step = sparse->step,
                                    .flags = EMBER_GRAD_APPLY};
    for (size_t j = 0; j < rank->nparts; j++) {
        const table_t *table = rank->parts[j].table;
        rank->grad_heads[j] = (ember_msg_grad_t){.table_id = table->config.table_id,
                                                 .trainer = sparse->trainer,
                                                 .step = sparse->step,
                                                 .flags = EMBER_GRAD_APPLY,
                                                 .bags = (uint32_t)table->bags};
    }
    const size_t head_bytes = ember_wire_grads_head_size(head.count);
    const size_t at = i * sparse->grad_stride + sparse->grad_head_room - head_bytes;
    ember_wire_grads_pack_head(&head, rank->grad_heads, rank->grads_head);
    EMBER_CHECK(ember_parts_buffer_put(&sparse->grads, at, rank->grads_head, head_bytes));
    const ember_rpc_param_t from = {.payload_mem = ember_parts_mem(&sparse->tables[0].parts),
                                    .reply_mem = EMBER_MEM_HOST,
                                    .payload_reg = sparse->grads.reg};
    ember_iov_t iov = {.buffer = (const uint8_t *)sparse->grads.scratch.data + at,
                       .length = head_bytes + rank->grad_bytes};
    if (last)
        return ember_rpc_call_async(sparse->tp, rank->rank, EMBER_OP_GRADS, &iov, 1, NULL, 0, &from,
                                    &rank->push);
    rank->pushing = 1;
    ember_status_t status =
            ember_rpc_send(sparse->tp, rank->rank, EMBER_OP_GRADS, &iov, 1, &from, push_done, rank);
    if (status != EMBER_OK)
        rank->pushing = 0;
    return status;
}

ember_status_t ember_sparse_push(ember_sparse_t *sparse, const float *const *grad_x, uint64_t step,
                                 int last, char *err, size_t err_length)
{
    if (sparse->eval)
        return fail(err, err_length, EMBER_ERR_INVALID_PARAM,
                    "step %llu's lookups were for evaluation: there is nothing to push",
                    (unsigned long long)sparse->step);
    if (step != sparse->step)
        return fail(err, err_length, EMBER_ERR_INVALID_PARAM,
                    "a push of step %llu after the lookups of step %llu", (unsigned long long)step,
                    (unsigned long long)sparse->step);
    for (size_t k = 0; k < sparse->ntables; k++) {
        table_t *table = &sparse->tables[k];
        ember_status_t status =
                ember_parts_split(&table->parts, table->split.bag_counts, grad_x[k]);
        if (status != EMBER_OK)
            return fail(err, err_length, status, "table %s: its gradients: %s",
                        table->config.table_name, ember_status_string(status));
    }
    sparse->pushed_step = step;
    for (size_t i = 0; i < sparse->nranks; i++) {
        ember_status_t status = push_rank(sparse, i, last);
        if (status != EMBER_OK)
            return fail(err, err_length, status, "gradient push to %s: %s",
                        ps_name(sparse, &sparse->ranks[i]), ember_status_string(status));
    }
    return EMBER_OK;
}
