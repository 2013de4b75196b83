/*
 * api/table_keys: a dynamic table's rows by key and its counters
 * (include/ember/table.h: ember_table_read_keys, _write_keys,
 * _shard_stats).  The keys of a call are dealt to their shards
 * (ember_wire_key_shard), every shard asked at once, a round at a time.
 */
#include "api/api.h"

#include "engine/wire/codec.h"
#include "engine/wire/protocol.h"

#include <ember/log.h>

#include <stdlib.h>
#include <string.h>

#define SHARDS_MAX  64
#define ROUND_KEYS  16384      /* keys a round sends at most, */
#define ROUND_BYTES (8u << 20) /* ... and rows a round moves at most */

/* One round's keys of every shard, each shard's back to back. */
typedef struct {
    const ember_table_t *table;
    ember_msg_table_keys_t msg[SHARDS_MAX];
    int64_t *keys; /* [n]: by shard */
    float *rows;   /* write: [n][dim], by shard */
    size_t *at;    /* [n]: each key's place in the caller's arrays */
    size_t first[SHARDS_MAX + 1];
    int write;
} keys_round_t;

static size_t keys_iov(void *arg, uint32_t s, ember_iov_t *iov)
{
    keys_round_t *r = arg;
    const size_t n = r->first[s + 1] - r->first[s], dim = r->table->desc.dim;
    iov[0] = (ember_iov_t){&r->msg[s], sizeof(r->msg[s])};
    iov[1] = (ember_iov_t){r->keys + r->first[s], n * 8};
    if (!r->write)
        return 2;
    iov[2] = (ember_iov_t){r->rows + r->first[s] * dim, n * dim * sizeof(float)};
    return 3;
}

/* Deal keys [from, from + n) to their shards in @r (rows too for a write). */
static void keys_deal(keys_round_t *r, const int64_t *keys, const float *rows, size_t from,
                      size_t n)
{
    const api_table_desc_t *d = &r->table->desc;
    const uint32_t S = d->num_shards;
    size_t count[SHARDS_MAX] = {0};
    for (size_t i = 0; i < n; i++)
        count[ember_wire_key_shard((uint64_t)keys[from + i], S)]++;
    r->first[0] = 0;
    for (uint32_t s = 0; s < S; s++) {
        r->first[s + 1] = r->first[s] + count[s];
        r->msg[s] = (ember_msg_table_keys_t){.table_id = d->table_id, .count = count[s]};
        count[s] = r->first[s];
    }
    for (size_t i = 0; i < n; i++) {
        const size_t k = count[ember_wire_key_shard((uint64_t)keys[from + i], S)]++;
        r->keys[k] = keys[from + i];
        r->at[k] = from + i;
        if (rows)
            memcpy(r->rows + k * d->dim, rows + (from + i) * d->dim, d->dim * sizeof(float));
    }
}

static ember_status_t keys_check(const ember_table_t *table, const void *keys, size_t n,
                                 const void *rows, const char *what)
{
    const char *me = ember_tp_peer_name(table->job->tp, table->job->rank);
    if (table->desc.kind != EMBER_TABLE_DYNAMIC) {
        ember_error("table", "%s: table %s: %s keys of a fixed table (its rows go by index)", me,
                    table->desc.name, what);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (n > 0 && (!keys || !rows)) {
        ember_error("table", "%s: table %s: %s %zu keys with %s NULL", me, table->desc.name, what,
                    n, keys ? "the rows" : "the keys");
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/* Keys a round of @table takes: ROUND_KEYS, fewer for wide rows. */
static size_t round_keys(const ember_table_t *table)
{
    const size_t by_bytes = ROUND_BYTES / (table->desc.dim * sizeof(float));
    return by_bytes < 1 ? 1 : by_bytes < ROUND_KEYS ? by_bytes : ROUND_KEYS;
}

static ember_status_t round_alloc(keys_round_t *r, const ember_table_t *table, int write)
{
    const size_t dim = table->desc.dim, keys = round_keys(table);
    *r = (keys_round_t){.table = table, .write = write};
    r->keys = malloc(keys * 8);
    r->at = malloc(keys * sizeof(size_t));
    r->rows = malloc(keys * dim * sizeof(float));
    return r->keys && r->at && r->rows ? EMBER_OK : EMBER_ERR_NO_MEMORY;
}

static void round_free(keys_round_t *r)
{
    free(r->keys);
    free(r->at);
    free(r->rows);
}

/* One read round: each shard's reply (values, then found bytes) in @reply. */
static ember_status_t read_round(keys_round_t *r, uint8_t *reply, float *out, uint8_t *found,
                                 char *err, size_t err_length)
{
    const api_table_desc_t *d = &r->table->desc;
    const size_t keys = round_keys(r->table);
    const size_t stride = keys * d->dim * sizeof(float) + keys + 8;
    size_t bytes[SHARDS_MAX];
    for (uint32_t s = 0; s < d->num_shards; s++) {
        const size_t n = r->first[s + 1] - r->first[s];
        bytes[s] = n * d->dim * sizeof(float) + ember_wire_pad(n);
    }
    EMBER_CHECK(api_table_to_shards(r->table->job, d, EMBER_OP_TABLE_READ_KEYS, keys_iov, r, reply,
                                    stride, bytes, "reading keys", err, err_length));
    for (uint32_t s = 0; s < d->num_shards; s++) {
        const size_t n = r->first[s + 1] - r->first[s];
        const uint8_t *from = reply + s * stride;
        for (size_t i = 0; i < n; i++) {
            const size_t at = r->at[r->first[s] + i];
            memcpy(out + at * d->dim, from + i * d->dim * sizeof(float), d->dim * sizeof(float));
            if (found)
                found[at] = from[n * d->dim * sizeof(float) + i];
        }
    }
    return EMBER_OK;
}

ember_status_t ember_table_read_keys(ember_table_t *table, const int64_t *keys, size_t n,
                                     float *out, uint8_t *found)
{
    EMBER_CHECK(keys_check(table, keys, n, out, "reading"));
    const api_table_desc_t *d = &table->desc;
    keys_round_t r;
    char err[600];
    const size_t per_round = round_keys(table);
    const size_t stride = per_round * d->dim * sizeof(float) + per_round + 8;
    uint8_t *reply = malloc(stride * d->num_shards);
    ember_status_t status = round_alloc(&r, table, 0);
    if (!reply)
        status = EMBER_ERR_NO_MEMORY;
    for (size_t from = 0; status == EMBER_OK && from < n; from += per_round) {
        keys_deal(&r, keys, NULL, from, n - from < per_round ? n - from : per_round);
        status = read_round(&r, reply, out, found, err, sizeof(err));
        if (status != EMBER_OK)
            ember_error("table", "%s: %s", ember_tp_peer_name(table->job->tp, table->job->rank),
                        err);
    }
    round_free(&r);
    free(reply);
    return status;
}

ember_status_t ember_table_write_keys(ember_table_t *table, const int64_t *keys, size_t n,
                                      const float *rows)
{
    EMBER_CHECK(keys_check(table, keys, n, rows, "writing"));
    keys_round_t r;
    char err[600];
    ember_status_t status = round_alloc(&r, table, 1);
    const size_t per_round = round_keys(table);
    for (size_t from = 0; status == EMBER_OK && from < n; from += per_round) {
        keys_deal(&r, keys, rows, from, n - from < per_round ? n - from : per_round);
        status = api_table_to_shards(table->job, &table->desc, EMBER_OP_TABLE_WRITE_KEYS, keys_iov,
                                     &r, NULL, 0, NULL, "writing keys", err, sizeof(err));
        if (status != EMBER_OK)
            ember_error("table", "%s: %s", ember_tp_peer_name(table->job->tp, table->job->rank),
                        err);
    }
    round_free(&r);
    return status;
}

/* The one shard's stats request. */
typedef struct {
    ember_msg_table_destroy_t msg;
    uint32_t shard;
} stats_args_t;

ember_status_t ember_table_shard_stats(ember_table_t *table, uint32_t shard,
                                       ember_table_stats_t *stats)
{
    const api_table_desc_t *d = &table->desc;
    if (table->desc.kind != EMBER_TABLE_DYNAMIC || shard >= d->num_shards || !stats) {
        ember_error("table", "%s: table %s: stats of shard %u (%s)",
                    ember_tp_peer_name(table->job->tp, table->job->rank), d->name, shard,
                    d->kind != EMBER_TABLE_DYNAMIC ? "a fixed table has none"
                    : !stats                       ? "into NULL"
                                                   : "no such shard");
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_msg_table_destroy_t msg = {.table_id = d->table_id};
    ember_iov_t iov = {&msg, sizeof(msg)};
    const int rank = ember_job_ps_rank(table->job, (int)(d->first_ps + shard));
    ember_future_t *future = NULL;
    char why[400];
    ember_status_t status = ember_rpc_call_async(table->job->tp, rank, EMBER_OP_TABLE_STATS, &iov,
                                                 1, stats, sizeof(*stats), NULL, &future);
    if (status == EMBER_OK)
        status = api_wait(table->job, future, rank, "table stats", why, sizeof(why));
    size_t length = 0;
    if (status == EMBER_OK && (ember_future_data(future, &length), length != sizeof(*stats)))
        status = EMBER_ERR_BAD_MESSAGE;
    ember_future_release(future);
    if (status != EMBER_OK)
        ember_error("table", "%s: table %s: stats of shard %u on %s: %s",
                    ember_tp_peer_name(table->job->tp, table->job->rank), d->name, shard,
                    ember_tp_peer_name(table->job->tp, rank), ember_status_string(status));
    return status;
}
