/*
 * engine/ps/ps: parameter-server request handlers.
 *
 * In sync mode a lookup for a step whose predecessor is not applied yet is
 * held (a deferred reply) and answered the moment the last trainer's
 * gradient for that predecessor arrives: all trainers' step-s gradients are
 * applied before any step-s+1 lookup is answered.  With a table's staleness
 * K, a lookup of step s waits only for step s-K-1 (s-K steps applied).  A
 * LOOKUPS (every table of a trainer's step on this PS) is held until all
 * its tables are that far, and served or refused whole (engine/ps/ps_multi.c), as a GRADS is
 * applied whole.  A single LOOKUP goes the same way, as a LOOKUPS of one.
 */
#include "engine/ps/ps.h"

#include "common/ckpt_signal.h"
#include "common/clock.h"
#include "common/pool.h"
#include "common/reserve.h"
#include "common/topology.h"
#include "common/workers.h"
#include "engine/ps/ps_ckpt.h"
#include "engine/ps/ps_msg.h"
#include "engine/ps/ps_multi.h"
#include "engine/ps/table.h"
#include "engine/wire/protocol.h"

#include <ember/device.h>
#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PS_REPLY_GRACE_S 2.0 /* at exit, for replies still leaving */
/* Replies this large go rendezvous: a same-host trainer reads them with
 * process_vm_readv, which pins every page of the source, so they live on
 * huge pages: far fewer pages to pin than with 4 KiB ones. */
#define PS_REPLY_HUGE_MIN (64u << 10)
#define PS_CKPT_REPORTS   4 /* checkpoint reports to the master in flight */

typedef struct {
    ember_shard_t *table;
    int *trainer_rank; /* who speaks for each trainer index, -1 unknown */
    char **grad_error; /* a one-way gradient refused: told at the next lookup */
    uint32_t trainers;
} ps_table_t;

/* Sync: a LOOKUP or LOOKUPS for a step not yet open on all its tables.
 * It keeps what the codec made of it (its view points into the request's
 * bytes, held with it) and its tables, so a step applied only asks whether
 * it is ready now: nothing is taken again. */
typedef struct {
    ember_rpc_req_t *req;
    ember_wire_lookups_view_t view;
    ps_table_t *entries[EMBER_WIRE_MAX_TABLES];
} held_t;

typedef struct {
    ember_tp_t *tp;
    ps_table_t tables[PS_MAX_TABLES];
    held_t **held; /* each its own allocation: a view is kilobytes */
    size_t held_count, held_capacity;
    int stop;
    ember_status_t exit_status;
    ember_msg_ps_stats_t stats;
    ember_busy_clock_t clock; /* lookup/grad service time, cheaply */
    uint64_t lookup_ticks, grad_ticks, lookup_compute_ticks;
    /* Pooled lookup replies, lent to the transport until their send
     * completes: the buffer a finished send gave back (still in cache) is
     * the next one pooled into, and memory follows the replies in flight,
     * not the number of trainers. */
    ember_pool_t replies;
    size_t replies_in_flight;
    /* The GPU of tables created with device EMBER_TABLE_CUDA, opened by the
     * first of them (GPU local_rank % count). */
    int local_rank;
    ember_device_t *device;
    /* The compute threads every table's work is split over (this one is
     * one of them: ember_ps_run says why not a UCX worker each). */
    ember_workers_t *workers;
    /* checkpoints: the snapshots and their writer, the reports to the
     * master still in flight */
    int master;
    ember_ps_ckpt_t *ckpt;
    ember_msg_ckpt_done_t reports[PS_CKPT_REPORTS];
    ember_future_t *report_futures[PS_CKPT_REPORTS];
    const ember_ps_hooks_t *hooks; /* NULL: ember-train's PS */
} ps_t;

/* A reply in flight: the buffer and the PS it goes back to (apart from
 * the buffer, so a power-of-two reply fills its size class exactly). */
typedef struct {
    ps_t *ps;
    float *buffer;
} reply_ticket_t;

static ps_table_t *ps_table(ps_t *ps, uint32_t table_id)
{
    return table_id < PS_MAX_TABLES && ps->tables[table_id].table ? &ps->tables[table_id] : NULL;
}

static ps_table_t *ps_find(ps_t *ps, uint32_t table_id, ember_rpc_req_t *req)
{
    if (ps_table(ps, table_id))
        return &ps->tables[table_id];
    ember_rpc_reply_error(req, EMBER_ERR_NOT_FOUND, "no table with id %u on %s", table_id,
                          ember_tp_peer_name(ps->tp, ember_tp_rank(ps->tp)));
    return NULL;
}

/* Read a fixed header at the front of a request, or answer with an error. */
static int ps_header(ember_rpc_req_t *req, void *header, size_t size, ember_wire_rest_t *rest_p)
{
    size_t length;
    const uint8_t *data = ember_rpc_req_data(req, &length);
    char err[128];
    ember_status_t status = ember_wire_head(data, length, header, size, rest_p, err, sizeof(err));
    if (status != EMBER_OK)
        ember_rpc_reply_error(req, status, "%s", err);
    return status == EMBER_OK;
}

/* The spec as ps_msg checks it (its name NUL-terminated), and its id free
 * here. */
static ember_status_t ps_table_id_check(const ps_t *ps, ember_msg_table_create_t *spec, char *err,
                                        size_t err_length)
{
    ember_status_t status = ps_msg_table_create_check(spec, err, err_length);
    if (status == EMBER_OK && ps->tables[spec->table_id].table)
        status = ember_status_text(err, err_length, EMBER_ERR_EXISTS,
                                   "table id %u is taken or beyond %d", spec->table_id,
                                   PS_MAX_TABLES);
    return status;
}

/* The shard, on the PS's GPU (opened by the first table there) or in host
 * memory. */
static ember_status_t ps_table_make(ps_t *ps, const ember_msg_table_create_t *spec,
                                    ember_shard_t **table_p, char *err, size_t err_length)
{
    if (spec->device == EMBER_TABLE_CUDA && !ps->device) {
        ember_status_t status = ember_device_open("cuda", ps->local_rank, &ps->device);
        if (status != EMBER_OK) {
            snprintf(err, err_length,
                     "table %s: --ps-device cuda, but %s has no "
                     "usable GPU: %s",
                     spec->name, ember_tp_peer_name(ps->tp, ember_tp_rank(ps->tp)),
                     ember_status_string(status));
            return status;
        }
    }
    ember_status_t status = ember_shard_create(
            spec, spec->device == EMBER_TABLE_CUDA ? ps->device : NULL, table_p, err, err_length);
    if (status == EMBER_OK &&
        (status = ember_shard_set_workers(*table_p, ps->workers)) != EMBER_OK) {
        snprintf(err, err_length, "table %s: no memory for its %u threads' scratch", spec->name,
                 ember_workers_threads(ps->workers));
        ember_shard_destroy(*table_p);
        *table_p = NULL;
    }
    return status;
}

/* Who speaks for each trainer (nobody yet) and its refused gradients; on
 * failure the table is destroyed too, so the id stays free. */
static ember_status_t ps_entry_init(ps_table_t *entry, uint32_t trainers)
{
    entry->trainers = trainers;
    entry->trainer_rank = malloc(trainers * sizeof(*entry->trainer_rank));
    entry->grad_error = calloc(trainers, sizeof(*entry->grad_error));
    for (uint32_t t = 0; entry->trainer_rank && t < trainers; t++)
        entry->trainer_rank[t] = -1;
    if (entry->trainer_rank && entry->grad_error)
        return EMBER_OK;
    free(entry->trainer_rank);
    free(entry->grad_error);
    ember_shard_destroy(entry->table);
    *entry = (ps_table_t){0};
    return EMBER_ERR_NO_MEMORY;
}

static void ps_log_table(const ps_table_t *entry, const ember_msg_table_create_t *spec,
                         double create_s)
{
    ember_info("ps",
               "table %s: shard %u of %u, %lld of %lld rows x %u %s (%.1f MiB %s), "
               "%s, %s in %.2f s",
               ember_shard_name(entry->table), spec->shard, spec->num_shards,
               (long long)ember_shard_local_rows(entry->table), (long long)spec->rows, spec->dim,
               spec->dtype == EMBER_DTYPE_F16 ? "fp16" : "fp32",
               ember_shard_bytes(entry->table) / 1048576.0,
               spec->device == EMBER_TABLE_CUDA ? "on the GPU" : "in host memory",
               spec->consistency == EMBER_SYNC ? "sync" : "async",
               spec->init == EMBER_INIT_NORMAL    ? "N(0,1) rows"
               : spec->init == EMBER_INIT_UNIFORM ? "uniform rows"
                                                  : "zeroed for loading",
               create_s);
}

static void on_table_create(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_create_t spec;
    char err[256];

    if (!ps_header(req, &spec, sizeof(spec), NULL))
        return;
    ember_status_t status = ps_table_id_check(ps, &spec, err, sizeof(err));
    if (status == EMBER_ERR_EXISTS) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    /* Its id is ours; an unknown device (status) is logged and answered below. */
    ps_table_t *entry = &ps->tables[spec.table_id];
    double started = ember_time_now();
    if (status == EMBER_OK)
        status = ps_table_make(ps, &spec, &entry->table, err, sizeof(err));
    double create_s = ember_time_now() - started;
    if (status != EMBER_OK) {
        ember_error("ps", "%s", err);
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    if (ps_entry_init(entry, spec.trainers) != EMBER_OK) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    ps_log_table(entry, &spec, create_s);
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_table_load(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_load_t msg;
    ember_wire_rest_t rows_in;
    char err[256];
    ps_table_t *entry;

    if (!ps_header(req, &msg, sizeof(msg), &rows_in) || !(entry = ps_find(ps, msg.table_id, req)))
        return;
    size_t rest = rows_in.body_bytes;
    ember_status_t status = ps_msg_table_load_check(&msg, rest, entry->table, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    float *rows = malloc(rest + 4); /* aligned copy */
    if (!rows) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    memcpy(rows, rows_in.body, rest);
    status = ember_shard_load(entry->table, msg.first, msg.count, rows, err, sizeof(err));
    free(rows);
    if (status != EMBER_OK)
        ember_rpc_reply_error(req, status, "%s", err);
    else
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_table_read(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_read_t msg;
    char err[256];
    ps_table_t *entry;
    size_t bytes;

    if (!ps_header(req, &msg, sizeof(msg), NULL) || !(entry = ps_find(ps, msg.table_id, req)))
        return;
    ember_status_t status = ps_msg_table_read_check(&msg, entry->table, &bytes, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    float *out = malloc(bytes + 4);
    if (!out) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    status = ember_shard_read(entry->table, msg.first, msg.count, out, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
    } else {
        ember_iov_t iov = {.buffer = out, .length = bytes};
        ember_rpc_reply(req, EMBER_OK, &iov, 1);
    }
    free(out);
}

/* ---- a dynamic table's rows by key ---------------------------------------------- */

/* The keys message's head, its count checked at full width against what
 * follows (@row_bytes per key after the keys: a write's rows). */
static ps_table_t *keys_request(ps_t *ps, ember_rpc_req_t *req, ember_msg_table_keys_t *msg,
                                ember_wire_rest_t *rest, int write)
{
    ps_table_t *entry;
    if (!ps_header(req, msg, sizeof(*msg), rest) || !(entry = ps_find(ps, msg->table_id, req)))
        return NULL;
    /* A row is dim floats: a write carries them after the keys, a read's
     * reply holds them (the count checked first, then what it sizes). */
    const uint64_t row_bytes = (uint64_t)ember_shard_dim(entry->table) * sizeof(float);
    if (msg->reserved != 0 || msg->count > EMBER_WIRE_KEYS_MAX ||
        msg->count * row_bytes > EMBER_WIRE_KEYS_BYTES ||
        rest->body_bytes != msg->count * (8 + (write ? row_bytes : 0))) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE,
                              "table %s: %llu keys (at most %u, and %llu bytes of rows) in %zu "
                              "bytes",
                              ember_shard_name(entry->table), (unsigned long long)msg->count,
                              EMBER_WIRE_KEYS_MAX, (unsigned long long)EMBER_WIRE_KEYS_BYTES,
                              rest->body_bytes);
        return NULL;
    }
    return entry;
}

static void on_table_read_keys(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_keys_t msg;
    ember_wire_rest_t rest;
    char err[256];
    ps_table_t *entry = keys_request(ps, req, &msg, &rest, 0);
    if (!entry)
        return;
    const size_t n = (size_t)msg.count, values = n * ember_shard_dim(entry->table) * 4;
    uint8_t *out = malloc(values + ember_wire_pad(n) + 8);
    if (!out) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    memset(out + values, 0, ember_wire_pad(n));
    ember_status_t status = ember_shard_read_keys(entry->table, rest.body, n, (float *)out,
                                                  out + values, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
    } else {
        ember_iov_t iov = {.buffer = out, .length = values + ember_wire_pad(n)};
        ember_rpc_reply(req, EMBER_OK, &iov, 1);
    }
    free(out);
}

static void on_table_write_keys(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_keys_t msg;
    ember_wire_rest_t rest;
    char err[256];
    ps_table_t *entry = keys_request(ps, req, &msg, &rest, 1);
    if (!entry)
        return;
    ember_status_t status = ember_shard_write_keys(entry->table, rest.body, (size_t)msg.count,
                                                   rest.body + msg.count * 8, err, sizeof(err));
    if (status != EMBER_OK)
        ember_rpc_reply_error(req, status, "%s", err);
    else
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_table_stats(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_destroy_t msg;
    ps_table_t *entry;
    char err[256];
    if (!ps_header(req, &msg, sizeof(msg), NULL) || !(entry = ps_find(ps, msg.table_id, req)))
        return;
    ember_table_stats_t stats;
    ember_status_t status = ember_shard_stats(entry->table, &stats, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    ember_iov_t iov = {.buffer = &stats, .length = sizeof(stats)};
    ember_rpc_reply(req, EMBER_OK, &iov, 1);
}

/* A table's shard freed (its creator's ember_table_destroy); its id free
 * again.  Lookups of it held here are answered once a step is applied,
 * then finding no table. */
static void ps_entry_free(ps_table_t *entry)
{
    free(entry->trainer_rank);
    for (uint32_t t = 0; entry->grad_error && t < entry->trainers; t++)
        free(entry->grad_error[t]);
    free(entry->grad_error);
    ember_shard_destroy(entry->table);
    *entry = (ps_table_t){0};
}

static void on_table_destroy(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_destroy_t msg;
    ps_table_t *entry;

    if (!ps_header(req, &msg, sizeof(msg), NULL) || !(entry = ps_find(ps, msg.table_id, req)))
        return;
    if (ps->ckpt && ember_ps_ckpt_planned(ps->ckpt)) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM,
                              "table %s: a job that writes checkpoints keeps its tables",
                              ember_shard_name(entry->table));
        return;
    }
    ember_info("ps", "table %s: shard freed", ember_shard_name(entry->table));
    if (ps->ckpt) /* a write still in progress reads the live table */
        ember_ps_ckpt_wait(ps->ckpt);
    ps_entry_free(entry);
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* A table's optimizer replaced (ember_table_set_optimizer); the same one
 * again changes nothing, so every trainer may send it.  A job that writes
 * checkpoints keeps its optimizers: a checkpoint's state is the one it
 * started with. */
static void on_table_optimizer(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_table_optimizer_t msg;
    ps_table_t *entry;
    char err[256];
    uint32_t changed = 0;

    size_t length;
    const uint8_t *data = ember_rpc_req_data(req, &length);
    ember_status_t status =
            ember_wire_exact(data, length, &msg, sizeof(msg), "table optimizer", err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    if (!(entry = ps_find(ps, msg.table_id, req)))
        return;
    const char *name = ember_shard_name(entry->table);
    status = ps_msg_table_optimizer_check(&msg, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "table %s: %s", name, err);
        return;
    }
    if (!ember_shard_optimizer_is(entry->table, &msg.optimizer) && ps->ckpt &&
        ember_ps_ckpt_planned(ps->ckpt)) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM,
                              "table %s: a job that writes checkpoints keeps its tables' "
                              "optimizers",
                              name);
        return;
    }
    int changed_now = 0;
    if (ps->ckpt) /* a write still in progress reads the optimizer's state */
        ember_ps_ckpt_wait(ps->ckpt);
    status =
            ember_shard_set_optimizer(entry->table, &msg.optimizer, &changed_now, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_error("ps", "%s", err);
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    if (changed_now)
        ember_info("ps", "table %s: optimizer now %s lr %g, its state restarted", name,
                   ember_opt_kind_name(msg.optimizer.kind), (double)msg.optimizer.lr);
    changed = (uint32_t)changed_now;
    ember_iov_t iov = {&changed, sizeof(changed)};
    ember_rpc_reply(req, EMBER_OK, &iov, 1);
}

static size_t rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *file = fopen("/proc/self/statm", "r");
    if (file) {
        if (fscanf(file, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(file);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static void on_stats(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_ps_stats_t stats = ps->stats;
    stats.lookup_seconds = ember_busy_clock_seconds(&ps->clock, ps->lookup_ticks);
    stats.grad_seconds = ember_busy_clock_seconds(&ps->clock, ps->grad_ticks);
    stats.lookup_compute_seconds = ember_busy_clock_seconds(&ps->clock, ps->lookup_compute_ticks);
    stats.threads = ember_workers_threads(ps->workers);
    stats.table_bytes = stats.optimizer_bytes = stats.other_bytes = 0;
    for (size_t i = 0; i < PS_MAX_TABLES; i++) {
        if (ps->tables[i].table)
            ps_msg_stats_add(&stats, ps->tables[i].table);
    }
    stats.other_bytes += ps->replies.bytes;
    stats.rss_bytes = rss_bytes();
    ember_iov_t iov = {.buffer = &stats, .length = sizeof(stats)};
    ember_rpc_reply(req, EMBER_OK, &iov, 1);
}

static void on_shutdown(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ps->stop = 1;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_abort(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    size_t length;
    const char *text = ember_rpc_req_data(req, &length);
    ember_error("ps", "job aborted by %s: %.*s",
                ember_tp_peer_name(ps->tp, ember_rpc_req_peer(req)),
                (int)(length > 400 ? 400 : length), text);
    ps->stop = 1;
    ps->exit_status = EMBER_ERR_CANCELED;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* The transport is done with a reply (sent, or lost with its peer). */
static void ps_reply_done(void *arg, ember_status_t status)
{
    reply_ticket_t *ticket = arg;
    ps_t *ps = ticket->ps;
    (void)status;
    ps->replies_in_flight--;
    ember_pool_put(&ps->replies, ticket->buffer);
    ember_pool_put(&ps->replies, ticket);
}

/* "table emb" for one table, "3 tables from t_cat_0" for more: who a
 * failure of the whole request is about. */
static void tables_named(const ember_wire_lookups_view_t *view, ember_shard_t *const *tables,
                         char *out, size_t out_length)
{
    if (view->head.count == 1)
        snprintf(out, out_length, "table %s", ember_shard_name(tables[0]));
    else
        snprintf(out, out_length, "%u tables from %s", view->head.count,
                 ember_shard_name(tables[0]));
}

/* Pool and answer a request's lookups into one pooled buffer, sent without
 * a copy: a LOOKUPS's replies each padded, a LOOKUP's exactly its own. */
static void ps_serve_lookups(ps_t *ps, ember_rpc_req_t *req, const ember_wire_lookups_view_t *view,
                             ps_table_t *const *entries)
{
    uint64_t start = ember_busy_clock_ticks(&ps->clock);
    ember_shard_t *tables[EMBER_WIRE_MAX_TABLES];
    char err[320];
    size_t reply_bytes;
    for (size_t k = 0; k < view->head.count; k++)
        tables[k] = entries[k]->table;
    /* The codec took the message, so its counts match its size and a
     * forged count cannot make us allocate. */
    /* A single LOOKUP's reply is its values alone (no version). */
    const int versions = ember_rpc_req_op(req) != EMBER_OP_LOOKUP;
    size_t bytes = ps_multi_lookups_out_bytes(tables, view, versions, &reply_bytes);
    reply_ticket_t *ticket = ember_pool_get(&ps->replies, sizeof(*ticket));
    float *out = ticket ? ember_pool_get(&ps->replies, bytes ? bytes : 1) : NULL;

    if (!out) {
        ember_pool_put(&ps->replies, ticket);
        tables_named(view, tables, err, sizeof(err));
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY,
                              "%s: trainer %u step %llu: out of memory for a reply of %zu bytes",
                              err, view->head.trainer, (unsigned long long)view->head.step, bytes);
        return;
    }
    uint64_t compute = ember_busy_clock_ticks(&ps->clock);
    ember_status_t status =
            ps_multi_lookups(tables, view, versions, out, &reply_bytes, err, sizeof(err));
    ps->lookup_compute_ticks += ember_busy_clock_ticks(&ps->clock) - compute;
    if (status != EMBER_OK) {
        ember_pool_put(&ps->replies, out);
        ember_pool_put(&ps->replies, ticket);
        ember_warn("ps", "lookup refused: %s", err);
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    ps->stats.lookups += view->head.count;
    for (size_t k = 0; k < view->head.count; k++)
        entries[k]->trainer_rank[view->head.trainer] = ember_rpc_req_peer(req);
    if (ember_rpc_req_op(req) == EMBER_OP_LOOKUP)
        reply_bytes = (size_t)ember_wire_lookup_reply_bytes(&view->lookups[0].head,
                                                            ember_shard_dim(tables[0]));
    ember_iov_t iov = {.buffer = out, .length = reply_bytes};
    *ticket = (reply_ticket_t){.ps = ps, .buffer = out};
    ps->replies_in_flight++;
    ember_rpc_reply_zcopy(req, EMBER_OK, &iov, 1, ps_reply_done, ticket);
    ps->lookup_ticks += ember_busy_clock_ticks(&ps->clock) - start;
}

/* A LOOKUP as a LOOKUPS of one: its table found and the codec's check,
 * refused naming the table, trainer and step. */
static int ps_take_lookup(ps_t *ps, ember_rpc_req_t *req, ember_wire_lookups_view_t *view,
                          ps_table_t **entries)
{
    size_t length;
    const uint8_t *data = ember_rpc_req_data(req, &length);
    ember_wire_lookup_view_t *lookup = &view->lookups[0];
    char err[256];

    if (!ps_header(req, &lookup->head, sizeof(lookup->head), NULL) ||
        !(entries[0] = ps_find(ps, lookup->head.table_id, req)))
        return 0;
    ember_status_t status = ember_wire_lookup_unpack(data, length, lookup, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "table %s: trainer %u step %llu: %s",
                              ember_shard_name(entries[0]->table), lookup->head.trainer,
                              (unsigned long long)lookup->head.step, err);
        return 0;
    }
    view->head = (ember_msg_lookups_t){
            .trainer = lookup->head.trainer, .count = 1, .step = lookup->head.step};
    return 1;
}

/* A request's lookups (a LOOKUPS, or a LOOKUP as a LOOKUPS of one) and the
 * table each is for; answered with the error otherwise. */
static int ps_take_lookups(ps_t *ps, ember_rpc_req_t *req, ember_wire_lookups_view_t *view,
                           ps_table_t **entries)
{
    size_t length;
    const uint8_t *data = ember_rpc_req_data(req, &length);
    char err[320];

    if (ember_rpc_req_op(req) == EMBER_OP_LOOKUP)
        return ps_take_lookup(ps, req, view, entries);
    ember_status_t status = ember_wire_lookups_unpack(data, length, view, err, sizeof(err));
    if (status != EMBER_OK && length < sizeof(view->head)) {
        ember_rpc_reply_error(req, status, "lookups: %s", err);
        return 0;
    }
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "lookups of trainer %u step %llu: %s",
                              view->head.trainer, (unsigned long long)view->head.step, err);
        return 0;
    }
    for (size_t k = 0; k < view->head.count; k++) {
        if ((entries[k] = ps_table(ps, view->lookups[k].head.table_id)))
            continue;
        ember_rpc_reply_error(req, EMBER_ERR_NOT_FOUND,
                              "lookups of trainer %u step %llu: no table with id %u on %s",
                              view->head.trainer, (unsigned long long)view->head.step,
                              view->lookups[k].head.table_id,
                              ember_tp_peer_name(ps->tp, ember_tp_rank(ps->tp)));
        return 0;
    }
    return 1;
}

/* The trainer's last push, sent one-way, was refused: say so now, before a
 * sync lookup could wait for a step that will never complete.  The refusal
 * is told once, whichever of this PS's tables it was kept on. */
static int ps_tell_grad_error(ps_t *ps, ember_rpc_req_t *req, uint32_t trainer)
{
    char *told = NULL;
    for (size_t i = 0; i < PS_MAX_TABLES; i++) {
        ps_table_t *entry = &ps->tables[i];
        if (!entry->table || trainer >= entry->trainers || !entry->grad_error[trainer])
            continue;
        if (told)
            free(entry->grad_error[trainer]);
        else
            told = entry->grad_error[trainer];
        entry->grad_error[trainer] = NULL;
    }
    if (!told)
        return 0;
    ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM, "%s", told);
    free(told);
    return 1;
}

/* Sync: a request for a later step than the one open waits for it, with
 * its view and tables (the view's first view->head.count lookups). */
static void ps_hold(ps_t *ps, ember_rpc_req_t *req, const ember_wire_lookups_view_t *view,
                    ps_table_t *const *entries)
{
    held_t **list = ps->held;
    held_t *held = NULL;
    if (!EMBER_RESERVE(list, ps->held_capacity, ps->held_count + 1) ||
        !(held = malloc(sizeof(*held)))) {
        if (list)
            ps->held = list;
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "out of memory");
        return;
    }
    ps->held = list;
    held->req = req;
    held->view.head = view->head;
    memcpy(held->view.lookups, view->lookups, view->head.count * sizeof(view->lookups[0]));
    memcpy(held->entries, entries, view->head.count * sizeof(entries[0]));
    ps->held[ps->held_count++] = held;
}

/* Served, or refused (a step already applied), as its tables say; 1 when
 * it must wait (not answered). */
static int ps_route_lookups(ps_t *ps, ember_rpc_req_t *req, const ember_wire_lookups_view_t *view,
                            ps_table_t *const *entries)
{
    ember_shard_t *tables[EMBER_WIRE_MAX_TABLES];
    char err[320];
    int ready = 0;
    for (size_t k = 0; k < view->head.count; k++)
        tables[k] = entries[k]->table;
    ember_status_t status = ps_multi_lookups_ready(tables, view, &ready, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return 0;
    }
    if (!ready)
        return 1;
    ps_serve_lookups(ps, req, view, entries);
    return 0;
}

static void on_lookups(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_wire_lookups_view_t view;
    ps_table_t *entries[EMBER_WIRE_MAX_TABLES];

    if (!ps_take_lookups(ps, req, &view, entries) || ps_tell_grad_error(ps, req, view.head.trainer))
        return;
    if (ps_route_lookups(ps, req, &view, entries))
        ps_hold(ps, req, &view, entries);
}

/* A step was applied: the held requests whose step is now open on all
 * their tables are served (as the codec took them when they came).  A
 * one-way push was refused: its trainer's held lookups (sent before the
 * refusal came, and waiting for a step that cannot complete now) are
 * answered with it. */
static void ps_release_held(ps_t *ps)
{
    size_t kept = 0;
    for (size_t i = 0; i < ps->held_count; i++) {
        held_t *held = ps->held[i];
        if (!ps_tell_grad_error(ps, held->req, held->view.head.trainer) &&
            ps_route_lookups(ps, held->req, &held->view, held->entries)) {
            ps->held[kept++] = held;
            continue;
        }
        free(held);
    }
    ps->held_count = kept;
}

/* ---- checkpoints (engine/ps/ps_ckpt) ------------------------------------- */

/* This PS's tables, in id order. */
static size_t ps_tables(ps_t *ps, ember_shard_t **tables)
{
    size_t count = 0;
    for (size_t i = 0; i < PS_MAX_TABLES; i++) {
        if (ps->tables[i].table)
            tables[count++] = ps->tables[i].table;
    }
    return count;
}

/* Reports whose calls ended are released; 1 when slot @i is free. */
static int ps_report_slot_free(ps_t *ps, size_t i)
{
    if (ps->report_futures[i] && ember_future_test(ps->report_futures[i]) != EMBER_INPROGRESS) {
        ember_future_release(ps->report_futures[i]);
        ps->report_futures[i] = NULL;
    }
    return ps->report_futures[i] == NULL;
}

/* A write that ended goes to the master (a free slot waited for). */
static void ps_ckpt_report(ps_t *ps)
{
    ember_msg_ckpt_done_t done;
    if (!ps->ckpt || !ember_ps_ckpt_poll(ps->ckpt, &done))
        return;
    if (done.status != EMBER_OK)
        ember_error("ps", "checkpoint after step %llu: %s", (unsigned long long)done.step,
                    done.text);
    for (;;) {
        for (size_t i = 0; i < PS_CKPT_REPORTS; i++) {
            if (!ps_report_slot_free(ps, i))
                continue;
            ps->reports[i] = done;
            ember_iov_t iov = {&ps->reports[i], sizeof(done)};
            if (ember_rpc_call_async(ps->tp, ps->master, EMBER_OP_CKPT_DONE, &iov, 1, NULL, 0, NULL,
                                     &ps->report_futures[i]) != EMBER_OK)
                ember_warn("ps", "the checkpoint report of step %llu could not be sent",
                           (unsigned long long)done.step);
            return;
        }
        if (ember_tp_peer_lost(ps->tp, ps->master))
            return;
        ember_tp_wait(ps->tp, 0.01);
    }
}

/* A step was applied: when a checkpoint is due, copy the tables now,
 * before any lookup of the next step is answered. */
static void ps_ckpt_after_step(ps_t *ps)
{
    ember_shard_t *tables[PS_MAX_TABLES];
    if (!ps->ckpt || !ember_ps_ckpt_planned(ps->ckpt))
        return; /* every step: nothing more when the job writes none */
    size_t count = ps_tables(ps, tables);
    if (!count)
        return;
    uint64_t step = ember_shard_next_step(tables[0]);
    for (size_t i = 1; i < count; i++) {
        if (ember_shard_next_step(tables[i]) != step)
            return; /* not at a boundary of all of them yet */
    }
    if (!ember_ps_ckpt_due(ps->ckpt, step))
        return;
    char err[256];
    /* The write before ends and its report leaves first: the next write's
     * report would replace it (the checkpoint would then wait forever). */
    ember_ps_ckpt_wait(ps->ckpt);
    ps_ckpt_report(ps);
    if (ember_ps_ckpt_take(ps->ckpt, tables, count, step, err, sizeof(err)) != EMBER_OK)
        ember_error("ps", "checkpoint after step %llu: %s", (unsigned long long)step, err);
}

static void on_ckpt_plan(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_ckpt_plan_t plan;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[256];
    ember_status_t status = ember_wire_ckpt_plan_unpack(data, length, &plan, err, sizeof(err));
    if (status == EMBER_OK && !ps->ckpt)
        status = ember_ps_ckpt_create(&ps->ckpt);
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", status == EMBER_ERR_NO_MEMORY ? "no memory" : err);
        return;
    }
    ember_ps_ckpt_plan(ps->ckpt, &plan);
    ps->master = ember_rpc_req_peer(req); /* its reports go back there */
    ember_shard_t *tables[PS_MAX_TABLES];
    size_t count = ps_tables(ps, tables);
    if (ember_ps_ckpt_planned(ps->ckpt) &&
        ember_ps_ckpt_prepare(ps->ckpt, tables, count, err, sizeof(err)) != EMBER_OK) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "%s", err);
        return;
    }
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_ckpt_at(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_ckpt_at_t at;
    char err[128];
    ember_status_t status = ember_wire_ckpt_at_take(req, &at, err, sizeof(err));
    if (status == EMBER_OK && !(ps->ckpt && ember_ps_ckpt_planned(ps->ckpt)))
        status = ember_status_text(err, sizeof(err), EMBER_ERR_INVALID_PARAM,
                                   "this job writes no checkpoints");
    if (status == EMBER_OK && ember_ps_ckpt_at(ps->ckpt, at.step) != EMBER_OK)
        status = ember_status_text(err, sizeof(err), EMBER_ERR_OUT_OF_RANGE,
                                   "too many checkpoints asked for");
    if (status != EMBER_OK)
        ember_rpc_reply_error(req, status, "%s", err);
    else
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_table_restore(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_wire_table_restore_view_t view;
    ember_shard_t *tables[PS_MAX_TABLES];
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[400];
    ember_status_t status = ember_wire_table_restore_unpack(data, length, &view, err, sizeof(err));
    double started = ember_time_now();
    size_t count = ps_tables(ps, tables);
    if (status == EMBER_OK)
        status = ember_ps_ckpt_restore(tables, count, view.head.dir, view.names, view.head.count,
                                       err, sizeof(err));
    if (status != EMBER_OK) {
        ember_error("ps", "restoring from %s: %s", view.head.dir, err);
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    ember_info("ps", "%s: %zu tables restored from %s in %.2f s",
               ember_tp_peer_name(ps->tp, ember_tp_rank(ps->tp)), count, view.head.dir,
               ember_time_now() - started);
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* The writer ended (a write in progress finishes first, or stops when
 * the PS stops on a failure or an abort), its reports taken or given up. */
static void ps_ckpt_end(ps_t *ps)
{
    if (ps->exit_status != EMBER_OK)
        ember_ps_ckpt_give_up(ps->ckpt);
    ember_ps_ckpt_destroy(ps->ckpt);
    ps->ckpt = NULL;
    for (size_t i = 0; i < PS_CKPT_REPORTS; i++) {
        if (ps->report_futures[i])
            ember_future_release(ps->report_futures[i]);
        ps->report_futures[i] = NULL;
    }
}

/* SIGUSR1/SIGTERM here: trainer0 (rank 0) picks the step. */
static void ps_ckpt_signal(ps_t *ps)
{
    int what = ember_ckpt_signal_take();
    if (what == EMBER_CKPT_SIGNAL_NONE || !ps->ckpt || !ember_ps_ckpt_planned(ps->ckpt))
        return;
    ember_wire_ckpt_request_send(ps->tp, what == EMBER_CKPT_SIGNAL_STOP);
}

static void on_grad(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_wire_grad_view_t grad;
    const ember_msg_grad_t *msg = &grad.head;
    char err[320];
    int applied = 0;
    ps_table_t *entry;
    uint64_t start = ember_busy_clock_ticks(&ps->clock);
    size_t length;
    const uint8_t *data = ember_rpc_req_data(req, &length);
    ember_status_t status = ember_wire_grad_unpack(data, length, &grad, err, sizeof(err));

    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    if (!(entry = ps_find(ps, msg->table_id, req)))
        return;
    status = ember_shard_grad(entry->table, &grad, &applied, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_warn("ps", "gradient refused: %s", err);
        int kept = ember_rpc_req_oneway(req) && msg->trainer < entry->trainers;
        if (kept) {
            free(entry->grad_error[msg->trainer]);
            entry->grad_error[msg->trainer] = strdup(err);
        }
        ember_rpc_reply_error(req, status, "%s", err);
        if (kept && ps->held_count)
            ps_release_held(ps);
        return;
    }
    ps->stats.grads++;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
    ps->grad_ticks += ember_busy_clock_ticks(&ps->clock) - start;
    if (applied) {
        ps->stats.steps_applied += (uint64_t)applied;
        ps_ckpt_after_step(ps);
        if (ps->held_count)
            ps_release_held(ps);
    }
}

/* A GRADS refused whole: @entries[@found] are the tables it named that are
 * here (none known: every table), where a one-way push's refusal is kept
 * for the trainer's next lookup. */
static void ps_grads_refused(ps_t *ps, ember_rpc_req_t *req, ps_table_t *const *entries,
                             size_t found, uint32_t trainer, ember_status_t status, const char *err)
{
    ember_warn("ps", "gradient refused: %s", err);
    for (size_t i = 0; ember_rpc_req_oneway(req) && i < (found ? found : PS_MAX_TABLES); i++) {
        ps_table_t *entry = found ? entries[i] : &ps->tables[i];
        if (entry->table && trainer < entry->trainers) {
            free(entry->grad_error[trainer]);
            entry->grad_error[trainer] = strdup(err);
        }
    }
    const int kept = ember_rpc_req_oneway(req);
    ember_rpc_reply_error(req, status, "%s", err);
    if (kept && ps->held_count)
        ps_release_held(ps);
}

/* A GRADS's tables, here, and each one's gradient (its dim's size); *found_p
 * how many were found before one was not (refused then). */
static ember_status_t ps_grads_take(ps_t *ps, const ember_wire_grads_view_t *view,
                                    ps_table_t **entries, ember_wire_grad_view_t *grads,
                                    size_t *found_p, char *err, size_t err_length)
{
    uint32_t dims[EMBER_WIRE_MAX_TABLES];
    for (*found_p = 0; *found_p < view->head.count; ++*found_p) {
        const uint32_t id = view->grads[*found_p].table_id;
        if (!(entries[*found_p] = ps_table(ps, id)))
            return ember_status_text(err, err_length, EMBER_ERR_NOT_FOUND,
                                     "gradients of trainer %u step %llu: no table with id %u on %s",
                                     view->head.trainer, (unsigned long long)view->head.step, id,
                                     ember_tp_peer_name(ps->tp, ember_tp_rank(ps->tp)));
        dims[*found_p] = ember_shard_dim(entries[*found_p]->table);
    }
    char why[240];
    ember_status_t status = ember_wire_grads_split(view, dims, grads, why, sizeof(why));
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "gradients of trainer %u step %llu: %s",
                                 view->head.trainer, (unsigned long long)view->head.step, why);
    return EMBER_OK;
}

static void on_grads(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    uint64_t start = ember_busy_clock_ticks(&ps->clock);
    ember_wire_grads_view_t view;
    ember_wire_grad_view_t grads[EMBER_WIRE_MAX_TABLES];
    ps_table_t *entries[EMBER_WIRE_MAX_TABLES];
    ember_shard_t *tables[EMBER_WIRE_MAX_TABLES];
    int applied[EMBER_WIRE_MAX_TABLES];
    char err[400], why[320];
    size_t length, found = 0, steps = 0;
    const uint8_t *data = ember_rpc_req_data(req, &length);

    memset(&view.head, 0, sizeof(view.head));
    ember_status_t status = ember_wire_grads_unpack(data, length, &view, why, sizeof(why));
    if (status != EMBER_OK) {
        if (length < sizeof(view.head)) /* no trainer to tell */
            snprintf(err, sizeof(err), "gradients: %s", why);
        else
            snprintf(err, sizeof(err), "gradients of trainer %u step %llu: %s", view.head.trainer,
                     (unsigned long long)view.head.step, why);
        ps_grads_refused(ps, req, NULL, 0,
                         length < sizeof(view.head) ? UINT32_MAX : view.head.trainer, status, err);
        return;
    }
    status = ps_grads_take(ps, &view, entries, grads, &found, err, sizeof(err));
    for (size_t k = 0; status == EMBER_OK && k < view.head.count; k++)
        tables[k] = entries[k]->table;
    if (status == EMBER_OK)
        status = ps_multi_grads(tables, grads, view.head.count, applied, err, sizeof(err));
    if (status != EMBER_OK) {
        ps_grads_refused(ps, req, entries, found, view.head.trainer, status, err);
        return;
    }
    ps->stats.grads += view.head.count;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
    ps->grad_ticks += ember_busy_clock_ticks(&ps->clock) - start;
    for (size_t k = 0; k < view.head.count; k++)
        steps += (size_t)applied[k];
    ps->stats.steps_applied += steps;
    if (steps)
        ps_ckpt_after_step(ps);
    if (steps && ps->held_count)
        ps_release_held(ps);
}

/* A trainer's pushes before this were taken (EMBER_OP_GRADS_FENCE): a
 * refusal kept for its next lookup is told now. */
static void on_grads_fence(ember_rpc_req_t *req, void *arg)
{
    ps_t *ps = arg;
    ember_msg_grads_fence_t msg;
    if (!ps_header(req, &msg, sizeof(msg), NULL))
        return;
    if (!ps_tell_grad_error(ps, req, msg.trainer))
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

/* A lost trainer's distributed-autograd context will never get its
 * gradient: free it (the master ends a sync job that lost a trainer). */
static void ps_drop_lost_trainers(ps_t *ps)
{
    for (size_t i = 0; i < PS_MAX_TABLES; i++) {
        ps_table_t *entry = &ps->tables[i];
        for (uint32_t t = 0; entry->table && t < entry->trainers; t++) {
            int rank = entry->trainer_rank[t];
            if (rank < 0 || !ember_tp_peer_lost(ps->tp, rank))
                continue;
            ember_warn("ps", "table %s: trainer %u (%s) lost: its context is freed",
                       ember_shard_name(entry->table), t, ember_tp_peer_name(ps->tp, rank));
            ember_shard_drop_trainer(entry->table, t);
            entry->trainer_rank[t] = -1;
        }
    }
}

/* The ops a PS serves, and their handlers (registered for its lifetime). */
static const uint16_t ps_ops[] = {
        EMBER_OP_TABLE_CREATE,    EMBER_OP_TABLE_LOAD,
        EMBER_OP_TABLE_READ,      EMBER_OP_PS_STATS,
        EMBER_OP_PS_SHUTDOWN,     EMBER_OP_ABORT,
        EMBER_OP_LOOKUP,          EMBER_OP_GRAD,
        EMBER_OP_LOOKUPS,         EMBER_OP_GRADS,
        EMBER_OP_CKPT_PLAN,       EMBER_OP_CKPT_AT,
        EMBER_OP_TABLE_RESTORE,   EMBER_OP_TABLE_DESTROY,
        EMBER_OP_GRADS_FENCE,     EMBER_OP_TABLE_OPTIMIZER,
        EMBER_OP_TABLE_READ_KEYS, EMBER_OP_TABLE_WRITE_KEYS,
        EMBER_OP_TABLE_STATS,
};
static const ember_rpc_handler_cb ps_handlers[] = {
        on_table_create,    on_table_load,
        on_table_read,      on_stats,
        on_shutdown,        on_abort,
        on_lookups,         on_grad,
        on_lookups,         on_grads,
        on_ckpt_plan,       on_ckpt_at,
        on_table_restore,   on_table_destroy,
        on_grads_fence,     on_table_optimizer,
        on_table_read_keys, on_table_write_keys,
        on_table_stats,
};
_Static_assert(sizeof(ps_ops) / sizeof(ps_ops[0]) == sizeof(ps_handlers) / sizeof(ps_handlers[0]),
               "an op without its handler");

static void ps_register(ps_t *ps, int serve)
{
    for (size_t i = 0; i < sizeof(ps_ops) / sizeof(ps_ops[0]); i++) {
        if (ps->hooks && ps_ops[i] == EMBER_OP_ABORT)
            continue; /* the job's own handler takes it */
        ember_rpc_register(ps->tp, ps_ops[i], serve ? ps_handlers[i] : NULL, serve ? ps : NULL);
    }
}

/* The compute threads: as asked, or the cores of the binding; the PS's
 * first line says how many and why. */
static ember_status_t ps_start_workers(ps_t *ps, unsigned threads)
{
    char why[256] = "--ps-threads", err[256];
    const char *name = ember_tp_peer_name(ps->tp, ember_tp_rank(ps->tp));
    if (threads == 0)
        threads = ember_topo_default_threads(why, sizeof(why));
    if (threads > EMBER_WORKERS_MAX) {
        ember_error("ps", "%s: %u threads asked (by %s), at most %d", name, threads, why,
                    EMBER_WORKERS_MAX);
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_status_t status = ember_workers_create(threads, name, &ps->workers, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_error("ps", "%s", err);
        return status;
    }
    ember_info("ps", "%s: serving with %u compute threads (%s)", name, threads, why);
    return EMBER_OK;
}

static ps_t *ps_new(ember_tp_t *tp, int local_rank)
{
    ps_t *ps = calloc(1, sizeof(*ps));
    if (!ps)
        return NULL;
    ps->tp = tp;
    ps->local_rank = local_rank;
    ps->replies.huge_min = PS_REPLY_HUGE_MIN;
    ember_busy_clock_init(&ps->clock);
    return ps;
}

/* A failed barrier ends the job (it said who did not come).  The master is
 * watched from here on: a PS only answers, and without an endpoint of its
 * own to the master would never learn that it died. */
static void ps_join(ps_t *ps, int master)
{
    ps->exit_status = ps->hooks ? EMBER_OK : ember_tp_barrier(ps->tp, "roles-ready");
    if (ps->exit_status == EMBER_OK && master >= 0)
        ps->exit_status = ember_tp_watch(ps->tp, master);
    ps->stop = ps->exit_status != EMBER_OK;
}

/* Serve until told to stop, or until the master is lost: a PS without its
 * master has nobody to stop it. */
static void ps_serve(ps_t *ps, int master)
{
    ember_tp_t *tp = ps->tp;
    const uint64_t check_every = ember_busy_clock_ticks_for(&ps->clock, 0.2);
    uint64_t next_check = 0;
    while (!ps->stop) {
        ember_tp_wait(tp, 0.5);
        ps_ckpt_report(ps);
        ember_status_t polled = ps->hooks ? ps->hooks->poll(ps->hooks->arg) : EMBER_INPROGRESS;
        if (polled != EMBER_INPROGRESS) {
            ps->exit_status = polled;
            break;
        }
        /* Peer losses are rare: look a few times a second, not per
         * request, and on the busy clock: a clock_gettime per request is a
         * cost a small lookup notices. */
        uint64_t now = ember_busy_clock_ticks(&ps->clock);
        if (now < next_check)
            continue;
        next_check = now + check_every;
        ps_ckpt_signal(ps);
        ps_drop_lost_trainers(ps);
        if (master >= 0 && ember_tp_peer_lost(tp, master)) {
            ember_error("ps", "%s: the master (rank %d) was lost: %s; stopping",
                        ember_tp_peer_name(tp, ember_tp_rank(tp)), master,
                        ember_tp_peer_reason(tp, master));
            ps->exit_status = EMBER_ERR_PEER_LOST;
            break;
        }
    }
}

/* Held lookups are told the PS is stopping; the tables, then their GPU,
 * are freed. */
static void ps_free_tables(ps_t *ps)
{
    for (size_t h = 0; h < ps->held_count; h++) {
        ember_rpc_reply_error(ps->held[h]->req, EMBER_ERR_CANCELED,
                              "%s: the parameter server is stopping (a lookup was waiting)",
                              ember_tp_peer_name(ps->tp, ember_tp_rank(ps->tp)));
        free(ps->held[h]);
    }
    free(ps->held);
    ps->held = NULL;
    ps->held_count = ps->held_capacity = 0;
    for (size_t i = 0; i < PS_MAX_TABLES; i++)
        ps_entry_free(&ps->tables[i]);
    ember_device_close(ps->device); /* after its tables */
    ps->device = NULL;
}

/* Replies still leaving hold pooled buffers: wait for the transport to give
 * them back (a lost peer fails them), and if one is held past the grace
 * period, leave the PS allocated rather than free under it. */
static void ps_free(ps_t *ps)
{
    ember_workers_destroy(ps->workers); /* its tables are gone */
    ps->workers = NULL;
    double give_up = ember_time_coarse() + PS_REPLY_GRACE_S;
    while (ps->replies_in_flight && ember_time_coarse() < give_up)
        ember_tp_wait(ps->tp, 0.01);
    if (ps->replies_in_flight) {
        ember_warn("ps",
                   "%zu replies still in flight at exit; their buffers stay "
                   "allocated",
                   ps->replies_in_flight);
        return;
    }
    ember_pool_cleanup(&ps->replies);
    free(ps);
}

ember_status_t ember_ps_run(ember_tp_t *tp, const ember_ps_run_options_t *options)
{
    ps_t *ps = ps_new(tp, options->local_rank);
    ember_status_t status;

    if (!ps)
        return EMBER_ERR_NO_MEMORY;
    if ((status = ps_start_workers(ps, options->threads)) != EMBER_OK) {
        free(ps);
        return status;
    }
    ps->hooks = options->hooks;
    ps_register(ps, 1);
    if (ps->hooks && ps->hooks->serving)
        ps->hooks->serving(ps->hooks->arg);
    int master = ps->hooks ? ps->hooks->coordinator : ember_tp_peer_by_name(tp, "master");
    ps->master = master;
    ps_join(ps, master);
    ps_serve(ps, master);
    status = ps->exit_status;
    /* From here on a request gets "no handler", not a PS being freed. */
    ps_register(ps, 0);
    ps_ckpt_end(ps);
    ps_free_tables(ps);
    ps_free(ps);
    return status;
}
