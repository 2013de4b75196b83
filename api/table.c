/*
 * api/table: embedding tables on the job's PS (include/ember/table.h).
 *
 * A creation claims the name at the coordinator (api/names.c: the table id
 * comes with it), creates every shard with TABLE_CREATE (loading the
 * initial rows with TABLE_LOAD), then publishes the table's description,
 * which ember_table_open waits for.  Reads and writes go to every shard at
 * once, in chunks of a few MiB.
 */
#include "api/api.h"

#include "engine/wire/protocol.h"

#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (8u << 20) /* of rows a TABLE_LOAD or TABLE_READ carries */
#define DIM_MAX     65536
#define SHARDS_MAX  64 /* a table's PS */

void ember_table_config_init(ember_table_config_t *config)
{
    *config = (ember_table_config_t){.dtype = EMBER_DTYPE_F32,
                                     .init = EMBER_TABLE_INIT_NORMAL,
                                     .sharding = EMBER_SHARD_ROW_WISE,
                                     .consistency = EMBER_SYNC,
                                     .reduce = EMBER_REDUCE_SUM};
    ember_opt_config_default(EMBER_OPT_SGD, 0.01f, &config->optimizer);
}

void ember_table_dynamic_init(ember_table_dynamic_t *dynamic)
{
    *dynamic =
            (ember_table_dynamic_t){.admit_count = 1, .evict = EMBER_EVICT_LRU, .lfu_decay = 1.0f};
}

/* ---- checking a config ---------------------------------------------------- */

/* A dynamic table's settings, into @desc (NULL @dyn: a fixed table). */
static ember_status_t check_dynamic(const ember_table_config_t *c, const ember_table_dynamic_t *dyn,
                                    api_table_desc_t *desc, char *err, size_t err_length)
{
    if (!dyn)
        return EMBER_OK;
    const char *name = c->name;
    if (dyn->admit_count == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: admit_count 0 (a key is seen at least once)", name);
    if (dyn->budget_rows < 0 || dyn->budget_rows > 0x7ffffffe)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: budget_rows %lld (0 to 2147483646)", name,
                                 (long long)dyn->budget_rows);
    if ((unsigned)dyn->evict > EMBER_EVICT_LFU)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: evict %d is neither LRU nor LFU", name,
                                 (int)dyn->evict);
    if (!(dyn->lfu_decay > 0.0f && dyn->lfu_decay <= 1.0f))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: lfu_decay %g (0 < decay <= 1)", name,
                                 (double)dyn->lfu_decay);
    if (c->init == EMBER_TABLE_INIT_ROWS)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: a dynamic table has no initial_rows (write its keys "
                                 "after creating it)",
                                 name);
    if (c->device && strcmp(c->device, "cpu") != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: a dynamic table's rows live in host memory (device "
                                 "'%s')",
                                 name, c->device);
    desc->kind = EMBER_TABLE_DYNAMIC;
    desc->admit_count = dyn->admit_count;
    desc->budget_rows = dyn->budget_rows;
    desc->evict = (uint32_t)dyn->evict;
    desc->evict_after = dyn->evict_after;
    desc->lfu_decay = dyn->lfu_decay;
    return EMBER_OK;
}

static int name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= EMBER_TABLE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* The placement: resolved into @desc, or what is wrong with it. */
static ember_status_t check_placement(const ember_job_t *job, const ember_table_config_t *c,
                                      api_table_desc_t *desc, char *err, size_t err_length)
{
    const char *name = c->name;
    if (job->num_ps == 0) /* a job of stated roles may have none */
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: the job has no PS to hold it", name);
    if ((unsigned)c->sharding > EMBER_SHARD_TABLE_WISE)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: sharding %d is neither row-wise nor table-wise", name,
                                 (int)c->sharding);
    if (c->first_ps >= (uint32_t)job->num_ps)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: first_ps %u, but the job has %d PS", name, c->first_ps,
                                 job->num_ps);
    uint32_t shards = c->num_shards;
    if (c->sharding == EMBER_SHARD_TABLE_WISE) {
        if (shards > 1)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table %s: table-wise, but num_shards %u", name, shards);
        shards = 1;
    } else if (shards == 0) {
        shards = (uint32_t)job->num_ps - c->first_ps;
    }
    if ((uint64_t)c->first_ps + shards > (uint64_t)job->num_ps)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: %u shards from ps%u, but the job has %d PS", name,
                                 shards, c->first_ps, job->num_ps);
    if (shards > SHARDS_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: %u shards, at most %d", name, shards, SHARDS_MAX);
    desc->sharding = (uint32_t)c->sharding;
    desc->first_ps = c->first_ps;
    desc->num_shards = shards;
    return EMBER_OK;
}

/* How the table syncs: consistency, staleness, reduce, trainers. */
static ember_status_t check_sync(const ember_job_t *job, const ember_table_config_t *c,
                                 api_table_desc_t *desc, char *err, size_t err_length)
{
    const char *name = c->name;
    if ((unsigned)c->consistency > EMBER_ASYNC)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: consistency %d is neither sync nor async", name,
                                 (int)c->consistency);
    if (c->staleness > EMBER_STALENESS_MAX || (c->consistency == EMBER_ASYNC && c->staleness))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: staleness %u (sync: 0 to %d; async: 0)", name,
                                 c->staleness, EMBER_STALENESS_MAX);
    if ((unsigned)c->reduce > EMBER_REDUCE_MEAN)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: reduce %d is neither sum nor mean", name,
                                 (int)c->reduce);
    if (job->trainers == 0) /* a job of stated roles may have none */
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: the job has no trainer to push its gradients", name);
    if (c->trainers > (uint32_t)job->trainers)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: trainers %u, but the job has %d", name, c->trainers,
                                 job->trainers);
    desc->consistency = (uint32_t)c->consistency;
    desc->staleness = c->staleness;
    desc->reduce = (uint32_t)c->reduce;
    desc->trainers = c->trainers ? c->trainers : (uint32_t)job->trainers;
    return EMBER_OK;
}

/* The rows: shape, dtype, initial values, device. */
static ember_status_t check_rows(const ember_table_config_t *c, api_table_desc_t *desc, char *err,
                                 size_t err_length)
{
    const char *name = c->name;
    if (c->num_embeddings < 1 || c->embedding_dim < 1 || c->embedding_dim > DIM_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: %lld rows of dim %u (rows >= 1, dim 1 to %d)", name,
                                 (long long)c->num_embeddings, c->embedding_dim, DIM_MAX);
    if (c->dtype != EMBER_DTYPE_F32 && c->dtype != EMBER_DTYPE_F16)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: dtype %s (rows are F32 or F16)", name,
                                 ember_dtype_name(c->dtype));
    if ((unsigned)c->init > EMBER_TABLE_INIT_ROWS)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: init %d is not one of normal, uniform, zeros, rows",
                                 name, (int)c->init);
    if ((c->init == EMBER_TABLE_INIT_ROWS) != (c->initial_rows != NULL))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: initial_rows %s with init %s", name,
                                 c->initial_rows ? "given" : "missing",
                                 c->init == EMBER_TABLE_INIT_ROWS ? "rows" : "other than rows");
    if (c->device && strcmp(c->device, "cpu") != 0 && strcmp(c->device, "cuda") != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: device '%s' (cpu or cuda)", name, c->device);
    desc->rows = c->num_embeddings;
    desc->dim = c->embedding_dim;
    desc->dtype = (uint32_t)c->dtype;
    desc->init = (uint32_t)c->init;
    desc->seed = c->seed;
    desc->device = c->device && strcmp(c->device, "cuda") == 0;
    return EMBER_OK;
}

static ember_status_t config_check(const ember_job_t *job, const ember_table_config_t *c,
                                   const ember_table_dynamic_t *dyn, api_table_desc_t *desc,
                                   char *err, size_t err_length)
{
    if (!name_valid(c->name))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a table name '%.40s' (1 to %d bytes of A-Z a-z 0-9 _ . -)",
                                 c->name ? c->name : "(null)", EMBER_TABLE_NAME_MAX - 1);
    *desc = (api_table_desc_t){.creator = job->rank};
    snprintf(desc->name, sizeof(desc->name), "%s", c->name);
    EMBER_CHECK(check_rows(c, desc, err, err_length));
    EMBER_CHECK(check_placement(job, c, desc, err, err_length));
    EMBER_CHECK(check_sync(job, c, desc, err, err_length));
    EMBER_CHECK(check_dynamic(c, dyn, desc, err, err_length));
    char why[200];
    if (ember_opt_config_check(&c->optimizer, why, sizeof(why)) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "table %s: optimizer %s",
                                 c->name, why);
    desc->optimizer = c->optimizer;
    return EMBER_OK;
}

/* ---- handles -------------------------------------------------------------- */

static ember_status_t table_new(ember_job_t *job, const api_table_desc_t *desc, int creator,
                                ember_table_t **table_p)
{
    ember_table_t *table = calloc(1, sizeof(*table));
    if (!table)
        return EMBER_ERR_NO_MEMORY;
    table->job = job;
    table->desc = *desc;
    table->creator = creator;
    ember_table_config_t *c = &table->config;
    *c = (ember_table_config_t){.name = table->desc.name,
                                .num_embeddings = desc->rows,
                                .embedding_dim = desc->dim,
                                .dtype = (ember_dtype_t)desc->dtype,
                                .init = (ember_table_init_t)desc->init,
                                .seed = desc->seed,
                                .sharding = (ember_sharding_t)desc->sharding,
                                .first_ps = desc->first_ps,
                                .num_shards = desc->num_shards,
                                .optimizer = desc->optimizer,
                                .consistency = (ember_consistency_t)desc->consistency,
                                .staleness = desc->staleness,
                                .reduce = (ember_sparse_reduce_t)desc->reduce,
                                .trainers = desc->trainers,
                                .device = desc->device ? "cuda" : "cpu"};
    table->dynamic = (ember_table_dynamic_t){.admit_count = desc->admit_count,
                                             .evict_after = desc->evict_after,
                                             .budget_rows = desc->budget_rows,
                                             .evict = (ember_evict_t)desc->evict,
                                             .lfu_decay = desc->lfu_decay};
    *table_p = table;
    return EMBER_OK;
}

const ember_table_config_t *ember_table_config(const ember_table_t *table)
{
    return &table->config;
}

const ember_table_dynamic_t *ember_table_dynamic(const ember_table_t *table)
{
    return table->desc.kind == EMBER_TABLE_DYNAMIC ? &table->dynamic : NULL;
}

void ember_table_close(ember_table_t *table)
{
    free(table);
}

/* PS rank of shard @s of @desc. */
static int shard_rank(const ember_job_t *job, const api_table_desc_t *desc, uint32_t s)
{
    return ember_job_ps_rank(job, (int)(desc->first_ps + s));
}

/* ---- every shard at once ---------------------------------------------------- */

/* One request to each shard of @desc (@iov_of fills shard s's), all in
 * flight together, then every answer; the first failure in @err. */
ember_status_t api_table_to_shards(ember_job_t *job, const api_table_desc_t *desc, uint16_t op,
                                   shard_iov_cb iov_of, void *arg, void *out, size_t out_stride,
                                   size_t *out_bytes, const char *what, char *err,
                                   size_t err_length)
{
    ember_future_t *futures[SHARDS_MAX] = {NULL};
    ember_status_t status = EMBER_OK;
    const uint32_t S = desc->num_shards;
    ember_iov_t iov[4 * SHARDS_MAX];
    for (uint32_t s = 0; s < S && status == EMBER_OK; s++) {
        size_t iovcnt = iov_of(arg, s, &iov[s * 4]);
        uint8_t *dst = out ? (uint8_t *)out + s * out_stride : NULL;
        status = ember_rpc_call_async(job->tp, shard_rank(job, desc, s), op, &iov[s * 4], iovcnt,
                                      dst, dst ? out_bytes[s] : 0, NULL, &futures[s]);
        if (status != EMBER_OK)
            ember_status_text(err, err_length, status, "table %s: %s on %s: %s", desc->name, what,
                              ember_tp_peer_name(job->tp, shard_rank(job, desc, s)),
                              ember_status_string(status));
    }
    for (uint32_t s = 0; s < S; s++) {
        if (!futures[s])
            continue;
        char why[400];
        ember_status_t got =
                api_wait(job, futures[s], shard_rank(job, desc, s), what, why, sizeof(why));
        size_t length = 0;
        if (got == EMBER_OK && out) {
            ember_future_data(futures[s], &length);
            if (length != out_bytes[s])
                got = ember_status_text(why, sizeof(why), EMBER_ERR_BAD_MESSAGE,
                                        "%s on %s: %zu bytes, not %zu", what,
                                        ember_tp_peer_name(job->tp, shard_rank(job, desc, s)),
                                        length, out_bytes[s]);
        }
        if (got != EMBER_OK && status == EMBER_OK)
            status = ember_status_text(err, err_length, got, "table %s: %s", desc->name, why);
        ember_future_release(futures[s]); /* one still pending (an abort) is dropped */
    }
    return status;
}

/* ---- creating and destroying ------------------------------------------------ */

typedef struct {
    const api_table_desc_t *desc;
    ember_msg_table_create_t create[SHARDS_MAX];
} create_args_t;

static size_t create_iov(void *arg, uint32_t s, ember_iov_t *iov)
{
    create_args_t *a = arg;
    const api_table_desc_t *d = a->desc;
    ember_msg_table_create_t *m = &a->create[s];
    const int normal = d->init == EMBER_TABLE_INIT_NORMAL,
              uniform = d->init == EMBER_TABLE_INIT_UNIFORM;
    *m = (ember_msg_table_create_t){.table_id = d->table_id,
                                    .shard = s,
                                    .num_shards = d->num_shards,
                                    .trainers = d->trainers,
                                    .rows = d->rows,
                                    .dim = d->dim,
                                    .consistency = d->consistency,
                                    .sparse_reduce = d->reduce,
                                    .init = normal    ? EMBER_INIT_NORMAL
                                            : uniform ? EMBER_INIT_UNIFORM
                                                      : EMBER_INIT_LOAD,
                                    .dtype = d->dtype,
                                    .device = d->device ? EMBER_TABLE_CUDA : EMBER_TABLE_HOST,
                                    .staleness = d->staleness,
                                    .seed = d->seed,
                                    .optimizer = d->optimizer,
                                    .budget_rows = d->budget_rows,
                                    .kind = d->kind,
                                    .admit_count = d->admit_count,
                                    .evict_policy = d->evict,
                                    .evict_after = d->evict_after,
                                    .lfu_decay = d->lfu_decay};
    memcpy(m->name, d->name, sizeof(m->name));
    iov[0] = (ember_iov_t){m, sizeof(*m)};
    return 1;
}

/* One fixed message, the same to every shard (a destroy, an optimizer). */
typedef struct {
    const void *msg;
    size_t length;
} message_args_t;

static size_t message_iov(void *arg, uint32_t s, ember_iov_t *iov)
{
    message_args_t *a = arg;
    iov[0] = (ember_iov_t){a->msg, a->length};
    return 1;
}

/* Every shard of @desc freed (a failed creation's, or a destroy). */
static ember_status_t shards_destroy(ember_job_t *job, const api_table_desc_t *desc, char *err,
                                     size_t err_length)
{
    ember_msg_table_destroy_t msg = {.table_id = desc->table_id};
    message_args_t args = {&msg, sizeof(msg)};
    return api_table_to_shards(job, desc, EMBER_OP_TABLE_DESTROY, message_iov, &args, NULL, 0, NULL,
                               "freeing its shard", err, err_length);
}

/* Rows [first, first + count) of the whole table, the same to every shard
 * (each keeps those it owns). */
typedef struct {
    ember_msg_table_load_t msg;
    const float *rows;
    size_t bytes;
} load_args_t;

static size_t load_iov(void *arg, uint32_t s, ember_iov_t *iov)
{
    load_args_t *a = arg;
    iov[0] = (ember_iov_t){&a->msg, sizeof(a->msg)};
    iov[1] = (ember_iov_t){a->rows, a->bytes};
    return 2;
}

static ember_status_t shards_load(ember_job_t *job, const api_table_desc_t *desc, int64_t first,
                                  int64_t count, const float *rows, char *err, size_t err_length)
{
    const int64_t per_chunk = (int64_t)(CHUNK_BYTES / ((size_t)desc->dim * sizeof(float))) + 1;
    for (int64_t at = 0; at < count; at += per_chunk) {
        const int64_t n = count - at < per_chunk ? count - at : per_chunk;
        load_args_t args = {.msg = {.table_id = desc->table_id, .first = first + at, .count = n},
                            .rows = rows + (size_t)at * desc->dim,
                            .bytes = (size_t)n * desc->dim * sizeof(float)};
        EMBER_CHECK(api_table_to_shards(job, desc, EMBER_OP_TABLE_LOAD, load_iov, &args, NULL, 0,
                                        NULL, "loading rows", err, err_length));
    }
    return EMBER_OK;
}

/* The shards made (and loaded); on failure none is left. */
static ember_status_t shards_create(ember_job_t *job, const api_table_desc_t *desc,
                                    const float *initial, char *err, size_t err_length)
{
    for (uint32_t s = 0; s < desc->num_shards; s++) {
        ember_status_t status = api_ps_ready(job, (int)(desc->first_ps + s));
        if (status != EMBER_OK)
            return ember_status_text(err, err_length, status, "table %s: ps%u is not serving",
                                     desc->name, desc->first_ps + s);
    }
    create_args_t *args = calloc(1, sizeof(*args));
    if (!args)
        return EMBER_ERR_NO_MEMORY;
    args->desc = desc;
    ember_status_t status =
            api_table_to_shards(job, desc, EMBER_OP_TABLE_CREATE, create_iov, args, NULL, 0, NULL,
                                "creating its shard", err, err_length);
    free(args);
    if (status == EMBER_OK && initial)
        status = shards_load(job, desc, 0, desc->rows, initial, err, err_length);
    if (status != EMBER_OK && status != EMBER_ERR_CANCELED) {
        char ignored[200];
        shards_destroy(job, desc, ignored,
                       sizeof(ignored)); /* those made; the others say "no table" */
    }
    return status;
}

static ember_status_t table_create(ember_job_t *job, const ember_table_config_t *config,
                                   const ember_table_dynamic_t *dynamic, ember_table_t **table_p)
{
    api_table_desc_t desc;
    char err[600];
    const char *me = ember_tp_peer_name(job->tp, job->rank);
    if (!api_is_client(job, job->rank)) {
        ember_error("table", "%s: a PS creates no tables (it serves them)", me);
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_status_t status = config_check(job, config, dynamic, &desc, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_error("table", "%s: %s", me, err);
        return status;
    }
    EMBER_CHECK(api_name_claim(job, desc.name, &desc.table_id));
    status = shards_create(job, &desc, config->initial_rows, err, sizeof(err));
    if (status == EMBER_OK)
        status = api_name_publish(job, &desc);
    else
        ember_error("table", "%s: %s", me, err);
    if (status == EMBER_OK)
        status = table_new(job, &desc, 1, table_p);
    if (status != EMBER_OK)
        api_name_drop(job, desc.table_id, desc.name);
    return status;
}

ember_status_t ember_table_create(ember_job_t *job, const ember_table_config_t *config,
                                  ember_table_t **table_p)
{
    return table_create(job, config, NULL, table_p);
}

ember_status_t ember_table_create_dynamic(ember_job_t *job, const ember_table_config_t *config,
                                          const ember_table_dynamic_t *dynamic,
                                          ember_table_t **table_p)
{
    if (!dynamic) {
        ember_error("table", "%s: a dynamic table without its settings (NULL)",
                    ember_tp_peer_name(job->tp, job->rank));
        return EMBER_ERR_INVALID_PARAM;
    }
    return table_create(job, config, dynamic, table_p);
}

ember_status_t ember_table_open(ember_job_t *job, const char *name, ember_table_t **table_p)
{
    api_table_desc_t desc;
    if (!api_is_client(job, job->rank) || !name_valid(name)) {
        ember_error("table", "%s: opening table '%.40s': %s",
                    ember_tp_peer_name(job->tp, job->rank), name ? name : "(null)",
                    api_is_client(job, job->rank) ? "not a table name" : "a PS opens no tables");
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(api_name_find(job, name, &desc));
    return table_new(job, &desc, 0, table_p);
}

ember_status_t ember_table_destroy(ember_table_t *table)
{
    if (!table)
        return EMBER_OK;
    ember_job_t *job = table->job;
    char err[600];
    ember_status_t status = EMBER_OK;
    if (!table->creator) {
        ember_error("table",
                    "%s: table %s: destroyed through a handle that did not create it "
                    "(its creator is %s): only the handle is freed",
                    ember_tp_peer_name(job->tp, job->rank), table->desc.name,
                    ember_tp_peer_name(job->tp, table->desc.creator));
        status = EMBER_ERR_INVALID_PARAM;
    } else if ((status = shards_destroy(job, &table->desc, err, sizeof(err))) != EMBER_OK) {
        ember_error("table", "%s: %s", ember_tp_peer_name(job->tp, job->rank), err);
    } else {
        api_name_drop(job, table->desc.table_id, table->desc.name);
    }
    free(table);
    return status;
}

/* ---- the optimizer ------------------------------------------------------------ */

/* Why @table's optimizer cannot be set to @optimizer here, or OK. */
static ember_status_t optimizer_check(const ember_table_t *table,
                                      const ember_opt_config_t *optimizer, char *err,
                                      size_t err_length)
{
    if (!api_is_client(table->job, table->job->rank))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: a PS sets no optimizer (it applies them)",
                                 table->desc.name);
    if (!optimizer)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: no optimizer config", table->desc.name);
    char why[200];
    if (ember_opt_config_check(optimizer, why, sizeof(why)) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "table %s: optimizer %s",
                                 table->desc.name, why);
    return EMBER_OK;
}

ember_status_t ember_table_set_optimizer(ember_table_t *table, const ember_opt_config_t *optimizer,
                                         int *changed_p)
{
    char err[600];
    uint32_t changed[SHARDS_MAX] = {0};
    size_t bytes[SHARDS_MAX];
    if (!table) {
        ember_error("table", "setting the optimizer of no table (NULL)");
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_job_t *job = table->job;
    ember_status_t status = optimizer_check(table, optimizer, err, sizeof(err));
    if (status == EMBER_OK) {
        ember_msg_table_optimizer_t msg = {.table_id = table->desc.table_id,
                                           .optimizer = *optimizer};
        message_args_t args = {&msg, sizeof(msg)};
        for (uint32_t s = 0; s < table->desc.num_shards; s++)
            bytes[s] = sizeof(changed[s]);
        status = api_table_to_shards(job, &table->desc, EMBER_OP_TABLE_OPTIMIZER, message_iov,
                                     &args, changed, sizeof(changed[0]), bytes,
                                     "setting its optimizer", err, sizeof(err));
    }
    if (status != EMBER_OK) {
        ember_error("table", "%s: %s", ember_tp_peer_name(job->tp, job->rank), err);
        return status;
    }
    int any = 0;
    for (uint32_t s = 0; s < table->desc.num_shards; s++)
        any |= changed[s] != 0;
    table->desc.optimizer = *optimizer;
    table->config.optimizer = *optimizer;
    if (changed_p)
        *changed_p = any;
    return EMBER_OK;
}

/* ---- rows --------------------------------------------------------------------- */

static ember_status_t rows_check(const ember_table_t *table, int64_t first, int64_t count,
                                 const void *rows, const char *what)
{
    const api_table_desc_t *d = &table->desc;
    if (d->kind == EMBER_TABLE_DYNAMIC) {
        ember_error("table",
                    "%s: table %s: %s rows: a dynamic table's rows go by key "
                    "(ember_table_read_keys, _write_keys)",
                    ember_tp_peer_name(table->job->tp, table->job->rank), d->name, what);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (first >= 0 && count >= 0 && first <= d->rows && count <= d->rows - first &&
        (rows || count == 0))
        return EMBER_OK;
    ember_error("table", "%s: table %s: %s rows [%lld, +%lld) of [0, %lld)%s",
                ember_tp_peer_name(table->job->tp, table->job->rank), d->name, what,
                (long long)first, (long long)count, (long long)d->rows,
                rows ? "" : " into no buffer");
    return rows || count == 0 ? EMBER_ERR_OUT_OF_RANGE : EMBER_ERR_INVALID_PARAM;
}

/* Shard @s's local rows holding global rows [first, end): [lo, hi). */
static void local_range(uint32_t S, uint32_t s, int64_t first, int64_t end, int64_t *lo,
                        int64_t *hi)
{
    *lo = first <= s ? 0 : (first - s + S - 1) / S;
    *hi = end <= s ? 0 : (end - s + S - 1) / S;
    if (*hi < *lo)
        *hi = *lo;
}

typedef struct {
    ember_msg_table_read_t msg[SHARDS_MAX];
} read_args_t;

static size_t read_iov(void *arg, uint32_t s, ember_iov_t *iov)
{
    read_args_t *a = arg;
    iov[0] = (ember_iov_t){&a->msg[s], sizeof(a->msg[s])};
    return 1;
}

/* One round: up to @per_shard local rows of each shard read into @chunk,
 * then put at their global places in @out. */
static ember_status_t read_round(ember_table_t *table, int64_t first, int64_t end,
                                 int64_t round_first, int64_t per_shard, float *chunk, float *out,
                                 int *more_p, char *err, size_t err_length)
{
    const api_table_desc_t *d = &table->desc;
    const uint32_t S = d->num_shards;
    read_args_t args;
    size_t bytes[SHARDS_MAX];
    int64_t lo[SHARDS_MAX], n[SHARDS_MAX];
    *more_p = 0;
    for (uint32_t s = 0; s < S; s++) {
        int64_t hi;
        local_range(S, s, first, end, &lo[s], &hi);
        lo[s] += round_first;
        n[s] = hi - lo[s] < 0 ? 0 : hi - lo[s] > per_shard ? per_shard : hi - lo[s];
        *more_p |= hi - lo[s] > per_shard;
        args.msg[s] =
                (ember_msg_table_read_t){.table_id = d->table_id, .first = lo[s], .count = n[s]};
        bytes[s] = (size_t)n[s] * d->dim * sizeof(float);
    }
    EMBER_CHECK(api_table_to_shards(table->job, d, EMBER_OP_TABLE_READ, read_iov, &args, chunk,
                                    (size_t)per_shard * d->dim * sizeof(float), bytes,
                                    "reading rows", err, err_length));
    for (uint32_t s = 0; s < S; s++) {
        const float *from = chunk + (size_t)s * per_shard * d->dim;
        for (int64_t i = 0; i < n[s]; i++)
            memcpy(out + (size_t)((lo[s] + i) * S + s - first) * d->dim, from + (size_t)i * d->dim,
                   d->dim * sizeof(float));
    }
    return EMBER_OK;
}

ember_status_t ember_table_read_rows(ember_table_t *table, int64_t first, int64_t count, float *out)
{
    EMBER_CHECK(rows_check(table, first, count, out, "reading"));
    const api_table_desc_t *d = &table->desc;
    const int64_t per_shard = (int64_t)(CHUNK_BYTES / ((size_t)d->dim * sizeof(float))) + 1;
    float *chunk = malloc((size_t)per_shard * d->num_shards * d->dim * sizeof(float));
    char err[600];
    if (!chunk)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = EMBER_OK;
    int more = count > 0;
    for (int64_t round = 0; status == EMBER_OK && more; round += per_shard)
        status = read_round(table, first, first + count, round, per_shard, chunk, out, &more, err,
                            sizeof(err));
    free(chunk);
    if (status != EMBER_OK)
        ember_error("table", "%s: %s", ember_tp_peer_name(table->job->tp, table->job->rank), err);
    return status;
}

ember_status_t ember_table_write_rows(ember_table_t *table, int64_t first, int64_t count,
                                      const float *rows)
{
    char err[600];
    EMBER_CHECK(rows_check(table, first, count, rows, "writing"));
    ember_status_t status =
            shards_load(table->job, &table->desc, first, count, rows, err, sizeof(err));
    if (status != EMBER_OK)
        ember_error("table", "%s: %s", ember_tp_peer_name(table->job->tp, table->job->rank), err);
    return status;
}
