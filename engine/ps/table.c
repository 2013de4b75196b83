/* engine/ps/table: a parameter-server shard, its optimizer and contexts. */
#include "engine/ps/table.h"
#include "engine/ps/table_cow.h"
#include "engine/ps/table_dyn.h"
#include "engine/ps/table_private.h"
#include "engine/ps/table_work.h"

#include "common/hugepage.h"
#include "common/rng.h"
#include "common/search.h"
#include "engine/ops/bag_slots.h"
#include "engine/ops/half.h"

#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Global row @row's initial values (N(0,1) or uniform), from (seed, global
 * element): the same values whatever the number of shards. */
void table_init_values(const ember_msg_table_create_t *spec, uint64_t row, float *values)
{
    if (spec->init == EMBER_INIT_UNIFORM)
        ember_uniform_fill(spec->seed, row * spec->dim, (float)sqrt(1.0 / (double)spec->rows),
                           values, spec->dim);
    else
        ember_normal_fill(spec->seed, row * spec->dim, values, spec->dim);
}

/* Fill a device shard: its drawn rows made on the host a block at a time. */
static ember_status_t device_init_rows(ember_shard_t *table)
{
    const ember_msg_table_create_t *spec = &table->spec;
    const int64_t block = 16384;
    if (table->local_rows == 0)
        return EMBER_OK; /* a shard that owns no row: nothing allocated */
    if (spec->init == EMBER_INIT_LOAD)
        return table->dev->mem_zero(table->device, table->data,
                                    (size_t)table->local_rows * table->row_bytes);
    float *values = malloc((size_t)block * spec->dim * sizeof(float));
    if (!values)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = EMBER_OK;
    for (int64_t first = 0; status == EMBER_OK && first < table->local_rows; first += block) {
        int64_t count = table->local_rows - first < block ? table->local_rows - first : block;
        for (int64_t i = 0; i < count; i++) {
            uint64_t row = (uint64_t)(first + i) * spec->num_shards + spec->shard;
            table_init_values(spec, row, values + (size_t)i * spec->dim);
        }
        status = table->dev->mem_copy(table->device, table_row(table, first), values,
                                      (size_t)count * table->row_bytes, EMBER_COPY_HOST_TO_DEVICE);
    }
    free(values);
    return status;
}

/* N(0,1) as nn.EmbeddingBag, or uniform as TorchRec, in host memory. */
static ember_status_t host_init_rows(ember_shard_t *table)
{
    const ember_msg_table_create_t *spec = &table->spec;
    float *values = spec->dtype == EMBER_DTYPE_F16 ? malloc(spec->dim * sizeof(float)) : NULL;
    if (spec->dtype == EMBER_DTYPE_F16 && !values)
        return EMBER_ERR_NO_MEMORY;
    for (int64_t local = 0; local < table->local_rows; local++) {
        uint64_t row = (uint64_t)local * spec->num_shards + spec->shard;
        void *stored = table_row(table, local);
        /* fp16: the fp32 values rounded, as emb.half() would. */
        table_init_values(spec, row, values ? values : stored);
        if (values)
            ember_float_to_half_n(values, stored, spec->dim);
    }
    free(values);
    return EMBER_OK;
}

static ember_status_t cannot_allocate(const ember_msg_table_create_t *spec, const char *name,
                                      char *err, size_t err_length)
{
    return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                             "table %s: cannot allocate %lld rows x %u", name,
                             (long long)spec->rows, spec->dim);
}

static ember_status_t check_spec(const ember_msg_table_create_t *spec, ember_device_t *device,
                                 const char *name, char *err, size_t err_length)
{
    if (spec->rows <= 0 || spec->dim == 0 || spec->dim > 65536 || spec->num_shards == 0 ||
        spec->shard >= spec->num_shards || spec->trainers == 0 || spec->trainers > 65536 ||
        spec->consistency > EMBER_ASYNC || spec->sparse_reduce > EMBER_REDUCE_MEAN ||
        spec->init > EMBER_INIT_UNIFORM)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: invalid spec (rows %lld, dim %u, shard %u of %u, "
                                 "trainers %u)",
                                 name, (long long)spec->rows, spec->dim, spec->shard,
                                 spec->num_shards, spec->trainers);
    if (spec->staleness > EMBER_STALENESS_MAX || spec->reserved != 0 ||
        (spec->staleness > 0 && spec->consistency != EMBER_SYNC))
        return ember_status_text(
                err, err_length, EMBER_ERR_INVALID_PARAM,
                "table %s: staleness %u (%s): a sync table's may be 0 .. %d", name, spec->staleness,
                spec->consistency == EMBER_SYNC ? "sync" : "async", EMBER_STALENESS_MAX);
    if (spec->kind > EMBER_TABLE_KIND_DYNAMIC ||
        (spec->kind == EMBER_TABLE_KIND_FIXED &&
         (spec->budget_rows != 0 || spec->admit_count != 0 || spec->evict_policy != 0 ||
          spec->evict_after != 0 || spec->lfu_decay != 0.0f || spec->reserved2 != 0)))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: kind %u (fixed 0, dynamic 1; a fixed table's "
                                 "dynamic settings are 0)",
                                 name, spec->kind);
    if (spec->dtype != EMBER_DTYPE_F32 && spec->dtype != EMBER_DTYPE_F16)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: rows of dtype %u are not supported (F32 %d, F16 %d)",
                                 name, spec->dtype, (int)EMBER_DTYPE_F32, (int)EMBER_DTYPE_F16);
    if (device && spec->dtype != EMBER_DTYPE_F32)
        return ember_status_text(err, err_length, EMBER_ERR_UNSUPPORTED,
                                 "table %s: fp16 rows on a %s parameter server are not supported "
                                 "(fp32 rows there, or fp16 in host memory)",
                                 name, ember_device_name(device));
    return EMBER_OK;
}

/* The table's description: its spec (the name cut to fit) and its shape. */
static ember_shard_t *table_new(const ember_msg_table_create_t *spec, ember_device_t *device,
                                const char *name)
{
    ember_shard_t *table = calloc(1, sizeof(*table));
    if (!table)
        return NULL;
    table->device = device;
    table->dev = device ? ember_device_ops(device) : NULL;
    /* Staging the GPU copies by DMA from: pinned host memory. */
    table->h_batch.pinned = table->h_out.pinned = table->h_values.pinned = 1;
    table->spec = *spec;
    memcpy(table->spec.name, name, EMBER_TABLE_NAME_MAX);
    table->spec.name[EMBER_TABLE_NAME_MAX - 1] = '\0';
    table->local_rows = (spec->rows - spec->shard + spec->num_shards - 1) / spec->num_shards;
    table->ring = spec->staleness + 1;
    table->row_bytes =
            (size_t)spec->dim * (spec->dtype == EMBER_DTYPE_F16 ? sizeof(uint16_t) : sizeof(float));
    return table;
}

/* The trainers' contexts and pending gradients, and one task's scratch
 * (ember_shard_set_workers gives more): a fixed table's and a dynamic
 * one's alike. */
static ember_status_t table_alloc_rings(ember_shard_t *table)
{
    const ember_msg_table_create_t *spec = &table->spec;
    table->contexts = calloc((size_t)spec->trainers * table->ring, sizeof(*table->contexts));
    table->pending = calloc((size_t)spec->trainers * table->ring, sizeof(*table->pending));
    if (!table->contexts || !table->pending)
        return EMBER_ERR_NO_MEMORY;
    return table_work_init(table, NULL);
}

/* The rows (host or device memory), then the rings. */
static ember_status_t table_alloc(ember_shard_t *table)
{
    if (table->device) {
        if (table->dev->mem_alloc(table->device, (size_t)table->local_rows * table->row_bytes,
                                  &table->data) != EMBER_OK)
            table->data = NULL;
    } else {
        table->data = ember_huge_alloc((size_t)table->local_rows * table->row_bytes + 1, 0);
    }
    /* A shard may own no row (fewer rows than servers): then a device
     * allocation of 0 bytes is NULL, as it should be. */
    if (!table->data && table->local_rows > 0)
        return EMBER_ERR_NO_MEMORY;
    return table_alloc_rings(table);
}

/* The initial rows: drawn (N(0,1), uniform), or zeros awaiting TABLE_LOAD. */
static ember_status_t table_init_rows(ember_shard_t *table, const char *name, char *err,
                                      size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    if (table->device) {
        ember_status_t status = device_init_rows(table);
        if (status != EMBER_OK)
            return ember_status_text(err, err_length, status,
                                     "table %s: cannot "
                                     "initialise its rows on %s: %s",
                                     name, ember_device_name(table->device),
                                     ember_status_string(status));
    } else if (spec->init != EMBER_INIT_LOAD) {
        if (host_init_rows(table) != EMBER_OK)
            return cannot_allocate(spec, name, err, err_length);
    } else {
        memset(table->data, 0, (size_t)table->local_rows * table->row_bytes);
    }
    return EMBER_OK;
}

/* A dynamic table: its rings as a fixed one's, its slots, rows and
 * optimizer from engine/ps/table_dyn.c. */
static ember_status_t dyn_create(ember_shard_t *table, char *err, size_t err_length)
{
    if (table_alloc_rings(table) != EMBER_OK)
        return cannot_allocate(&table->spec, table->spec.name, err, err_length);
    return table_dyn_create(table, err, err_length);
}

ember_status_t ember_shard_create(const ember_msg_table_create_t *spec, ember_device_t *device,
                                  ember_shard_t **table_p, char *err, size_t err_length)
{
    ember_shard_t *table;
    ember_status_t status;
    char name[EMBER_TABLE_NAME_MAX + 1];

    memcpy(name, spec->name, EMBER_TABLE_NAME_MAX);
    name[EMBER_TABLE_NAME_MAX] = '\0';
    EMBER_CHECK(check_spec(spec, device, name, err, err_length));
    table = table_new(spec, device, name);
    if (!table)
        return EMBER_ERR_NO_MEMORY;
    if (spec->kind == EMBER_TABLE_KIND_DYNAMIC) {
        status = dyn_create(table, err, err_length);
        if (status != EMBER_OK)
            goto err_destroy;
        *table_p = table;
        return EMBER_OK;
    }
    if (table_alloc(table) != EMBER_OK) {
        status = cannot_allocate(spec, name, err, err_length);
        goto err_destroy;
    }
    if (ember_opt_create(&spec->optimizer, (size_t)table->local_rows, spec->dim, EMBER_OPT_SPARSE,
                         &table->optimizer) != EMBER_OK) {
        status = ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                   "table %s: invalid optimizer settings", table->spec.name);
        goto err_destroy;
    }
    status = table_init_rows(table, name, err, err_length);
    if (status != EMBER_OK)
        goto err_destroy;
    *table_p = table;
    return EMBER_OK;

err_destroy:
    ember_shard_destroy(table);
    return status;
}

int ember_shard_optimizer_is(const ember_shard_t *table, const ember_opt_config_t *cfg)
{
    /* Every field is 4 bytes: no padding, so bytes compare as fields do. */
    return memcmp(&table->spec.optimizer, cfg, sizeof(*cfg)) == 0;
}

ember_status_t ember_shard_set_optimizer(ember_shard_t *table, const ember_opt_config_t *cfg,
                                         int *changed_p, char *err, size_t err_length)
{
    ember_opt_t *fresh = NULL;
    *changed_p = 0;
    if (ember_shard_optimizer_is(table, cfg))
        return EMBER_OK;
    ember_status_t status = table->dyn
                                    ? ember_opt_create_reserved(cfg, (size_t)table->local_rows,
                                                                table->spec.dim, &fresh)
                                    : ember_opt_create(cfg, (size_t)table->local_rows,
                                                       table->spec.dim, EMBER_OPT_SPARSE, &fresh);
    if (status == EMBER_OK && table->dyn)
        table_dyn_reset_state(table, fresh);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status,
                                 "table %s: cannot make a %s optimizer of %lld rows: %s",
                                 table->spec.name, ember_opt_kind_name(cfg->kind),
                                 (long long)table->local_rows, ember_status_string(status));
    ember_opt_destroy(table->optimizer);
    table->optimizer = fresh;
    table->spec.optimizer = *cfg;
    *changed_p = 1;
    return EMBER_OK;
}

static void context_free(context_t *ctx)
{
    ember_buffer_t *all[] = {&ctx->offsets, &ctx->weights, &ctx->argmax, &ctx->unique,
                             &ctx->inverse, &ctx->first,   &ctx->keys,   &ctx->hits,
                             &ctx->key_of,  &ctx->wire_ids};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        ember_buffer_free(all[i]);
}

static size_t context_bytes(const context_t *c)
{
    return c->offsets.capacity + c->weights.capacity + c->argmax.capacity + c->unique.capacity +
           c->inverse.capacity + c->first.capacity + c->keys.capacity + c->hits.capacity +
           c->key_of.capacity + c->wire_ids.capacity;
}

static void pending_free(pending_t *p)
{
    ember_buffer_t *all[] = {&p->rows,      &p->grad,      &p->keys,
                             &p->seen_keys, &p->seen_hits, &p->seen_ids};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        ember_buffer_free(all[i]);
}

/* A pending gradient's buffers (a dynamic table's keys too). */
static size_t pending_bytes(const pending_t *p)
{
    return p->rows.capacity + p->grad.capacity + p->keys.capacity + p->seen_keys.capacity +
           p->seen_hits.capacity + p->seen_ids.capacity;
}

void ember_shard_destroy(ember_shard_t *table)
{
    if (!table)
        return;
    const size_t slots = (size_t)table->spec.trainers * table->ring;
    for (size_t t = 0; table->contexts && t < slots; t++)
        context_free(&table->contexts[t]);
    context_free(&table->eval);
    for (size_t t = 0; table->pending && t < slots; t++)
        pending_free(&table->pending[t]);
    pending_free(&table->applying);
    ember_buffer_free(&table->acc_rows);
    ember_buffer_free(&table->acc_grad);
    ember_buffer_free(&table->reduce_list);
    ember_buffer_free(&table->order);
    ember_buffer_free(&table->written);
    ember_buffer_free(&table->rows_pool);
    if (table->changed)
        munmap(table->changed,
               (size_t)(table->changed_rows > 0 ? table->changed_rows : 1) * sizeof(uint64_t));
    ember_opt_destroy(table->optimizer);
    table_cow_free(table);
    table_work_free(table);
    free(table->contexts);
    free(table->pending);
    if (table->device) {
        ember_scratch_t *scratch[] = {&table->d_batch, &table->d_out,    &table->d_argmax,
                                      &table->d_rows,  &table->d_values, &table->h_batch,
                                      &table->h_out,   &table->h_values};
        for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
            ember_scratch_free(table->device, scratch[i]);
        table->dev->mem_free(table->device, table->data);
    } else if (table->dyn) {
        table_dyn_destroy(table);
    } else {
        ember_huge_free(table->data);
    }
    free(table);
}

const char *ember_shard_name(const ember_shard_t *table)
{
    return table->spec.name;
}
uint32_t ember_shard_dim(const ember_shard_t *table)
{
    return table->spec.dim;
}
int64_t ember_shard_local_rows(const ember_shard_t *table)
{
    return table->local_rows;
}
uint64_t ember_shard_next_step(const ember_shard_t *table)
{
    return table->next_step;
}
int ember_shard_is_sync(const ember_shard_t *table)
{
    return table->spec.consistency == EMBER_SYNC;
}
uint32_t ember_shard_staleness(const ember_shard_t *table)
{
    return table->spec.staleness;
}

/* The end of rows [first, first + count) for a message, where the range was
 * refused: its sum may not fit (INT64_MAX rows from the wire). */
static long long range_end(int64_t first, int64_t count)
{
    if (first > 0 && count > INT64_MAX - first)
        return INT64_MAX;
    if (first < 0 && count < INT64_MIN - first)
        return INT64_MIN;
    return (long long)(first + count);
}

/* A load's range, and (fp16 rows) its values: a finite value fp16 cannot
 * hold would become infinite, so the whole load is refused before anything
 * is written. */
static ember_status_t check_load(const ember_shard_t *table, int64_t first, int64_t count,
                                 const float *data, char *err, size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    if (first < 0 || count < 0 || first > spec->rows || count > spec->rows - first)
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                 "table %s: load of rows [%lld, %lld) outside [0, %lld)",
                                 spec->name, (long long)first, range_end(first, count),
                                 (long long)spec->rows);
    for (int64_t row = first; table_half(table) && row < first + count; row++) {
        if ((uint64_t)row % spec->num_shards != spec->shard)
            continue;
        const float *values = data + (size_t)(row - first) * spec->dim;
        for (uint32_t d = 0; d < spec->dim; d++) {
            if (isfinite(values[d]) && !(fabsf(values[d]) < EMBER_HALF_OVERFLOW))
                return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                         "table %s: row %lld col %u: %g is beyond the range of its "
                                         "fp16 rows (+-65504); nothing loaded",
                                         spec->name, (long long)row, d, (double)values[d]);
        }
    }
    return EMBER_OK;
}

/* This shard's rows of the range are consecutive local rows: gathered in
 * pinned host memory, then one copy. */
static ember_status_t load_device(ember_shard_t *table, int64_t first, int64_t count,
                                  const float *data, char *err, size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    int64_t local_first = -1, n = 0;
    if (ember_scratch_reserve(table->device, &table->h_values,
                              (size_t)count * spec->dim * sizeof(float) + 4) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "table %s: out of memory",
                                 spec->name);
    for (int64_t row = first; row < first + count; row++) {
        if ((uint64_t)row % spec->num_shards != spec->shard)
            continue;
        if (local_first < 0)
            local_first = row / spec->num_shards;
        memcpy((float *)table->h_values.data + (size_t)n++ * spec->dim,
               data + (size_t)(row - first) * spec->dim, spec->dim * sizeof(float));
    }
    ember_status_t status =
            n == 0 ? EMBER_OK
                   : table->dev->mem_copy(table->device, table_row(table, local_first),
                                          table->h_values.data, (size_t)n * table->row_bytes,
                                          EMBER_COPY_HOST_TO_DEVICE);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "table %s: load onto %s: %s", spec->name,
                                 ember_device_name(table->device), ember_status_string(status));
    return EMBER_OK;
}

static void load_host(ember_shard_t *table, int64_t first, int64_t count, const float *data)
{
    const ember_msg_table_create_t *spec = &table->spec;
    /* Local rows first / S .. (first + count - 1) / S hold the range's. */
    table_cow_range(table, first / spec->num_shards,
                    (first + count - 1) / spec->num_shards - first / spec->num_shards + 1);
    for (int64_t row = first; row < first + count; row++) {
        if ((uint64_t)row % spec->num_shards != spec->shard)
            continue;
        void *stored = table_row(table, row / spec->num_shards);
        const float *values = data + (size_t)(row - first) * spec->dim;
        if (table_half(table))
            ember_float_to_half_n(values, stored, spec->dim);
        else
            memcpy(stored, values, spec->dim * sizeof(float));
    }
}

ember_status_t ember_shard_load(ember_shard_t *table, int64_t first, int64_t count,
                                const float *data, char *err, size_t err_length)
{
    if (table->dyn)
        return ember_status_text(err, err_length, EMBER_ERR_UNSUPPORTED,
                                 "table %s: a dynamic table is written by key", table->spec.name);
    EMBER_CHECK(check_load(table, first, count, data, err, err_length));
    table_rows_changed_all(table);
    if (table->device)
        return load_device(table, first, count, data, err, err_length);
    load_host(table, first, count, data);
    return EMBER_OK;
}

ember_status_t ember_shard_read(const ember_shard_t *table, int64_t first, int64_t count,
                                float *out, char *err, size_t err_length)
{
    if (table->dyn)
        return ember_status_text(err, err_length, EMBER_ERR_UNSUPPORTED,
                                 "table %s: a dynamic table is read by key", table->spec.name);
    if (first < 0 || count < 0 || first > table->local_rows || count > table->local_rows - first)
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                 "table %s: read of local rows [%lld, %lld) outside [0, %lld)",
                                 table->spec.name, (long long)first, range_end(first, count),
                                 (long long)table->local_rows);
    size_t values = (size_t)count * table->spec.dim;
    if (table->device) {
        ember_status_t status =
                values == 0
                        ? EMBER_OK
                        : table->dev->mem_copy(table->device, out, table_row(table, first),
                                               values * sizeof(float), EMBER_COPY_DEVICE_TO_HOST);
        if (status != EMBER_OK)
            return ember_status_text(err, err_length, status, "table %s: read from %s: %s",
                                     table->spec.name, ember_device_name(table->device),
                                     ember_status_string(status));
        return EMBER_OK;
    }
    if (table_half(table))
        ember_half_to_float_n(table_row(table, first), out, values);
    else
        memcpy(out, table_row(table, first), values * sizeof(float));
    return EMBER_OK;
}

/* Pool on the device: the checked lookup goes over in one copy as the
 * device's batch (each index's local row and the bags' int64 offsets,
 * written straight into pinned staging from the distinct rows and the
 * slots; the weights), the pools (and the argmax a max backward needs)
 * come back into the host's buffers. */
static ember_status_t device_forward(ember_shard_t *table, const ember_bag_slots_t *batch,
                                     ember_bag_mode_t mode, float *out, int64_t *argmax)
{
    ember_device_t *device = table->device;
    const ember_device_ops_t *dev = table->dev;
    const size_t dim = table->spec.dim, n = batch->n, bags = batch->bags;
    const size_t out_bytes = bags * dim * sizeof(float);
    /* [indices: n int64][offsets: bags int64][weights: n float] */
    const size_t batch_bytes = n * 8 + bags * 8 + (batch->weights ? n * 4 : 0);

    if (bags == 0)
        return EMBER_OK;
    EMBER_CHECK(ember_scratch_reserve(device, &table->h_batch, batch_bytes));
    EMBER_CHECK(ember_scratch_reserve(device, &table->d_batch, batch_bytes));
    EMBER_CHECK(ember_scratch_reserve(device, &table->h_out, out_bytes));
    EMBER_CHECK(ember_scratch_reserve(device, &table->d_out, out_bytes));
    if (argmax)
        EMBER_CHECK(ember_scratch_reserve(device, &table->d_argmax, bags * dim * 8));
    char *h = table->h_batch.data, *d = table->d_batch.data;
    int64_t *indices = (int64_t *)h, *offsets = (int64_t *)(h + n * 8);
    for (size_t i = 0; i < n; i++)
        indices[i] = batch->rows[batch->slots[i]];
    for (size_t b = 0; b < bags; b++)
        offsets[b] = batch->offsets[b];
    if (batch->weights)
        memcpy(h + n * 8 + bags * 8, batch->weights, n * 4);
    const ember_bag_batch_t on_device = {
            .indices = (const int64_t *)d,
            .n = n,
            .offsets = (const int64_t *)(d + n * 8),
            .bags = bags,
            .weights = batch->weights ? (const float *)(d + n * 8 + bags * 8) : NULL,
            .n_weights = batch->weights ? n : 0};
    const ember_bag_opts_t opts = {.mode = mode, .padding_idx = -1};
    EMBER_CHECK(dev->mem_copy(device, d, h, batch_bytes, EMBER_COPY_HOST_TO_DEVICE));
    EMBER_CHECK(dev->bag_forward(device, table->data, table->local_rows, dim, &on_device, &opts,
                                 table->d_out.data, argmax ? table->d_argmax.data : NULL));
    EMBER_CHECK(dev->mem_copy(device, table->h_out.data, table->d_out.data, out_bytes,
                              EMBER_COPY_DEVICE_TO_HOST));
    memcpy(out, table->h_out.data, out_bytes);
    if (argmax)
        EMBER_CHECK(dev->mem_copy(device, argmax, table->d_argmax.data, bags * dim * 8,
                                  EMBER_COPY_DEVICE_TO_HOST));
    return EMBER_OK;
}

/* The optimizer step on @rows (sorted, distinct, local).  On a device the
 * rows are copied out, stepped by the host optimizer and copied back; a
 * refused step copies nothing back. */
static ember_status_t table_step(ember_shard_t *table, const int64_t *rows, const float *grad,
                                 size_t nrows)
{
    const ember_msg_table_create_t *spec = &table->spec;
    if (!table->device)
        return table_work_step(table, rows, grad, nrows);
    ember_device_t *device = table->device;
    const ember_device_ops_t *dev = table->dev;
    const size_t bytes = nrows * spec->dim * sizeof(float);
    for (size_t u = 0; u < nrows; u++) {
        if (rows[u] < 0 || rows[u] >= table->local_rows)
            return EMBER_ERR_OUT_OF_RANGE; /* checked before: never here */
    }
    /* The rows' ids ride in front of their values in one staging buffer. */
    EMBER_CHECK(ember_scratch_reserve(device, &table->h_values, nrows * 8 + bytes + 8));
    int64_t *h_rows = table->h_values.data;
    float *values = (float *)(h_rows + nrows);
    if (nrows > 0) {
        EMBER_CHECK(ember_scratch_reserve(device, &table->d_rows, nrows * 8));
        EMBER_CHECK(ember_scratch_reserve(device, &table->d_values, bytes));
        memcpy(h_rows, rows, nrows * 8);
        EMBER_CHECK(dev->mem_copy(device, table->d_rows.data, h_rows, nrows * 8,
                                  EMBER_COPY_HOST_TO_DEVICE));
        EMBER_CHECK(dev->rows_gather(device, table->data, spec->dim, table->d_rows.data, nrows,
                                     table->d_values.data));
        EMBER_CHECK(dev->mem_copy(device, values, table->d_values.data, bytes,
                                  EMBER_COPY_DEVICE_TO_HOST));
    }
    const ember_opt_values_t gathered = {.data = values,
                                         .dtype = EMBER_DTYPE_F32,
                                         .dim = spec->dim,
                                         .placement = EMBER_OPT_GATHERED};
    EMBER_CHECK(ember_opt_step_sparse(table->optimizer, &gathered, rows, grad, nrows));
    if (nrows == 0)
        return EMBER_OK;
    EMBER_CHECK(
            dev->mem_copy(device, table->d_values.data, values, bytes, EMBER_COPY_HOST_TO_DEVICE));
    return dev->rows_scatter(device, table->data, spec->dim, table->d_rows.data, nrows,
                             table->d_values.data);
}

/* Max mode: the places a trainer gave its indices rise within each bag (so
 * the first maximal entry of this shard's is the first in the bag too). */
static int places_increase(const ember_wire_lookup_view_t *lookup, const uint32_t *offsets)
{
    const size_t bags = lookup->head.bags, n = lookup->head.indices;
    for (size_t b = 0; b < bags; b++) {
        size_t end = b + 1 < bags ? offsets[b + 1] : n;
        for (size_t i = (size_t)offsets[b] + 1; i < end; i++) {
            if (ember_wire_lookup_place(lookup, i) <= ember_wire_lookup_place(lookup, i - 1))
                return 0;
        }
    }
    return 1;
}

/* Who a lookup or a gradient is from, as every refusal of it says. */
typedef struct {
    const char *table;
    unsigned trainer;
    unsigned long long step;
} who_t;

static who_t who_of(const ember_shard_t *table, uint32_t trainer, uint64_t step)
{
    return (who_t){.table = table->spec.name, .trainer = trainer, .step = step};
}

/* A refusal naming the table, the trainer and the step. */
static ember_status_t refuse(char *err, size_t err_length, ember_status_t status, const who_t *who,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static ember_status_t refuse(char *err, size_t err_length, ember_status_t status, const who_t *who,
                             const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return ember_status_text(err, err_length, status, "table %s: trainer %u step %llu: %s",
                             who->table, who->trainer, who->step, what);
}

/* A trainer of the job, whose lookup in this step's slot of its ring (the
 * same step's, or staleness + 1 steps before) has had its gradient (an
 * evaluation keeps no context: it may come between a lookup
 * and its gradient). */
static ember_status_t lookup_check_trainer(const ember_shard_t *table,
                                           const ember_msg_lookup_t *head, const who_t *who,
                                           char *err, size_t err_length)
{
    if (head->trainer >= table->spec.trainers)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                      "lookup from trainer %u, but the job has %u trainers", head->trainer,
                      table->spec.trainers);
    const context_t *ctx = table_context(table, head->trainer, head->step);
    if (ctx->valid && !(head->flags & EMBER_LOOKUP_EVAL))
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                      "its lookup of step %llu has not been given a gradient yet",
                      (unsigned long long)ctx->step);
    return EMBER_OK;
}

/* The context's buffers, scratch until ctx->valid is set, for @head's counts. */
static ember_status_t context_reserve(const ember_shard_t *table, context_t *ctx,
                                      const ember_msg_lookup_t *head, char *err, size_t err_length)
{
    const size_t bags = head->bags, unique = head->unique, n = head->indices;
    const int weighted = (head->flags & EMBER_LOOKUP_WEIGHTS) != 0;
    const int max_mode = (head->flags & EMBER_LOOKUP_MAX) != 0;
    if (!ember_buffer_reserve(&ctx->offsets, bags * 4 + 4) ||
        !ember_buffer_reserve(&ctx->unique, unique * 8 + 8) ||
        !ember_buffer_reserve(&ctx->inverse, n * 4 + 4) ||
        (weighted && !ember_buffer_reserve(&ctx->weights, n * 4 + 4)) ||
        (max_mode && (!ember_buffer_reserve(&ctx->argmax, bags * table->spec.dim * 8 + 8) ||
                      !ember_buffer_reserve(&ctx->first, unique * 4 + 4))))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "table %s: out of memory",
                                 table->spec.name);
    return EMBER_OK;
}

/* Offsets that start at 0 and rise within the indices, kept as they came. */
static ember_status_t take_offsets(context_t *ctx, const ember_wire_lookup_view_t *lookup,
                                   const who_t *who, char *err, size_t err_length)
{
    const size_t bags = lookup->head.bags, n = lookup->head.indices;
    uint32_t *offsets = ctx->offsets.data;
    uint32_t previous = 0;
    for (size_t b = 0; b < bags; b++) {
        uint32_t offset = ember_wire_load_u32(lookup->offsets, b);
        if ((b == 0 && offset != 0) || offset < previous || offset > n)
            return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                          "offset %u of bag %zu is invalid (previous %u, %zu indices)", offset, b,
                          previous, n);
        offsets[b] = offset;
        previous = offset;
    }
    if (bags == 0 && n != 0)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who, "%zu indices but no bags", n);
    return EMBER_OK;
}

/* The distinct rows: in the table, sorted, all of this shard, made local. */
static ember_status_t take_rows(const ember_shard_t *table, context_t *ctx,
                                const ember_wire_lookup_view_t *lookup, const who_t *who, char *err,
                                size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    const size_t unique = lookup->head.unique;
    const int64_t table_rows = spec->rows; /* kept in a register */
    int64_t *local = ctx->unique.data, previous = -1;
    for (size_t u = 0; u < unique; u++) {
        int64_t row = ember_wire_load_i64(lookup->rows, u);
        if (row < 0 || row >= table_rows)
            return refuse(err, err_length, EMBER_ERR_OUT_OF_RANGE, who,
                          "index %lld is out of range [0, %lld)", (long long)row,
                          (long long)spec->rows);
        if (row <= previous)
            return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                          "the rows of a lookup must be sorted and distinct (row %lld after %lld)",
                          (long long)row, (long long)previous);
        previous = row;
        local[u] = row;
    }
    /* Global row -> local row: one division per distinct row, and none with
     * one shard (a 64-bit divide per index was a large share of a lookup;
     * in one loop with the checks the compiler divided by 1 as well). */
    const uint64_t shards = spec->num_shards;
    for (size_t u = 0; shards > 1 && u < unique; u++) {
        uint64_t q = (uint64_t)local[u] / shards;
        uint64_t shard = (uint64_t)local[u] - q * shards;
        if (shard != spec->shard)
            return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                          "row %lld belongs to shard %llu, not %u", (long long)local[u],
                          (unsigned long long)shard, spec->shard);
        local[u] = (int64_t)q;
    }
    return EMBER_OK;
}

/* Each index's slot among the distinct rows (and its weight: one pass over
 * the entries), kept as they came; max's places checked to rise within
 * each bag. */
static ember_status_t take_entries(context_t *ctx, const ember_wire_lookup_view_t *lookup,
                                   const who_t *who, char *err, size_t err_length)
{
    const size_t unique = lookup->head.unique, n = lookup->head.indices;
    uint32_t *inverse = ctx->inverse.data;
    float *weights = ctx->weights.data;
    size_t i = 0;
    if (lookup->weights) { /* 8-byte entries: the slot, then the weight */
        for (; i < n; i++) {
            uint32_t slot;
            memcpy(&slot, lookup->slots + 8 * i, sizeof(slot));
            if (slot >= unique)
                break;
            inverse[i] = slot;
            memcpy(&weights[i], lookup->slots + 8 * i + 4, sizeof(float));
        }
    } else {
        for (; i < n; i++) {
            const uint32_t slot = ember_wire_lookup_slot(lookup, i);
            if (slot >= unique)
                break;
            inverse[i] = slot;
        }
    }
    if (i < n)
        return refuse(err, err_length, EMBER_ERR_BAD_MESSAGE, who,
                      "index %zu refers to row slot %u of %zu", i,
                      ember_wire_lookup_slot(lookup, i), unique);
    ctx->nunique = unique;
    if (lookup->places && !places_increase(lookup, ctx->offsets.data))
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                      "the places of a bag's indices must increase");
    return EMBER_OK;
}

/* Pool the checked lookup into @out, on the shard's device or here, from
 * its distinct rows and each index's slot; max mode's places follow the
 * values. */
static ember_status_t lookup_pool(ember_shard_t *table, context_t *ctx,
                                  const ember_wire_lookup_view_t *lookup, float *out,
                                  const who_t *who, char *err, size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    const int max_mode = lookup->places != NULL;
    const ember_bag_slots_t batch = {.rows = ctx->unique.data,
                                     .slots = ctx->inverse.data,
                                     .n = lookup->head.indices,
                                     .offsets = ctx->offsets.data,
                                     .bags = lookup->head.bags,
                                     .weights = lookup->weights ? ctx->weights.data : NULL};
    const ember_bag_mode_t mode = max_mode ? EMBER_BAG_MAX : EMBER_BAG_SUM;
    int64_t *argmax = max_mode ? ctx->argmax.data : NULL;
    const ember_bag_table_t rows = {.data = table->data,
                                    .dtype = spec->dtype,
                                    .rows = table->dyn ? table_dyn_rows_mapped(table)
                                                       : table->local_rows,
                                    .dim = spec->dim};
    ember_status_t status = EMBER_OK;
    if (table->device)
        status = device_forward(table, &batch, mode, out, argmax);
    /* On a device the values are pooled already: the places only. */
    if (status == EMBER_OK && (!table->device || max_mode))
        status = table_work_pool(table, ctx, table->device ? NULL : &rows, &batch, mode, out,
                                 argmax, lookup);
    if (status != EMBER_OK)
        return refuse(err, err_length, status, who, "pooling failed: %s",
                      ember_status_string(status));
    return EMBER_OK;
}

/* Row @u of a checked lookup, in the request's order: its local row (a
 * dynamic table's slot, or a scratch row past local_rows for a key
 * without one). */
static inline int64_t rows_reply_row(const ember_shard_t *table, const context_t *ctx, size_t u)
{
    if (table->dyn)
        return (int64_t)((const uint32_t *)ctx->wire_ids.data)[u];
    return ((const int64_t *)ctx->unique.data)[u];
}

/* The record of each row's last change, made at the first cached lookup:
 * every row changed "now", so no copy made before it stands. */
static ember_status_t rows_record(ember_shard_t *table)
{
    if (table->changed)
        return EMBER_OK;
    const size_t bytes = (size_t)(table->local_rows > 0 ? table->local_rows : 1) * 8;
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return EMBER_ERR_NO_MEMORY;
    table->changed = map;
    table->changed_rows = table->local_rows;
    table->changed_floor = table_row_clock(table);
    return EMBER_OK;
}

/* A cached lookup's reply (EMBER_LOOKUP_ROWS) into @out, room for
 * ember_wire_rows_reply_bytes(unique, dim, unique): each row's copy the
 * trainer holds stands (unchanged since; or, training in sync, at most
 * the staleness behind the step) or the row's values go.  Every held
 * version is checked before anything is written. */
static ember_status_t rows_reply(ember_shard_t *table, const context_t *ctx,
                                 const ember_wire_lookup_view_t *lookup, uint8_t *out,
                                 const who_t *who, char *err, size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    const size_t unique = lookup->head.unique, dim = spec->dim;
    if (table->device)
        return refuse(err, err_length, EMBER_ERR_UNSUPPORTED, who,
                      "a cached lookup (--cache-rows) of a shard on a device is not supported");
    if (rows_record(table) != EMBER_OK)
        return refuse(err, err_length, EMBER_ERR_NO_MEMORY, who, "out of memory");
    const uint64_t clock = table_row_clock(table);
    for (size_t u = 0; u < unique; u++) {
        const uint64_t held = (uint64_t)ember_wire_load_i64(lookup->held, u);
        if (held != EMBER_ROW_NONE && held > clock)
            return refuse(err, err_length, EMBER_ERR_BAD_MESSAGE, who,
                          "its copy of row %lld is of version %llu, ahead of the table's %llu",
                          (long long)ember_wire_load_i64(lookup->rows, u), (unsigned long long)held,
                          (unsigned long long)clock);
    }
    /* Sync training: a copy at most the staleness behind the step stands
     * (an evaluation sees the table as it is: unchanged copies only). */
    const uint64_t step = lookup->head.step;
    const int stale_ok = ember_shard_is_sync(table) && !(lookup->head.flags & EMBER_LOOKUP_EVAL);
    const uint64_t oldest = step > spec->staleness ? step - spec->staleness : 0;
    uint8_t *states = out + ember_wire_rows_reply_states_at();
    float *values = (float *)(out + ember_wire_rows_reply_values_at(unique));
    uint64_t fresh = 0;
    for (size_t u = 0; u < unique; u++) {
        const uint64_t held = (uint64_t)ember_wire_load_i64(lookup->held, u);
        const int64_t r = rows_reply_row(table, ctx, u);
        uint8_t state = EMBER_ROW_FRESH;
        if (held != EMBER_ROW_NONE && r < table->changed_rows) {
            if (table_row_changed(table, r) <= held)
                state = EMBER_ROW_UNCHANGED;
            else if (stale_ok && held >= oldest && held >= table->changed_floor)
                state = EMBER_ROW_STALE; /* never a copy from before a write of all rows */
        }
        states[u] = state;
        if (state != EMBER_ROW_FRESH)
            continue;
        float *to = values + fresh++ * dim;
        if (table_half(table))
            ember_half_to_float_n(table_row(table, r), to, dim);
        else
            memcpy(to, table_row(table, r), dim * sizeof(float));
    }
    const size_t values_at = (size_t)ember_wire_rows_reply_values_at(unique);
    memset(states + unique, 0, values_at - ember_wire_rows_reply_states_at() - unique);
    const size_t end = values_at + fresh * dim * sizeof(float);
    memset(out + end, 0, (size_t)ember_wire_rows_reply_bytes(unique, spec->dim, fresh) - end);
    const ember_msg_rows_reply_t head = {
            .version = table->next_step, .clock = clock, .fresh = fresh};
    memcpy(out, &head, sizeof(head));
    return EMBER_OK;
}

ember_status_t ember_shard_lookup(ember_shard_t *table, const ember_wire_lookup_view_t *lookup,
                                  float *out, char *err, size_t err_length)
{
    const ember_msg_lookup_t *head = &lookup->head;
    const who_t who = who_of(table, head->trainer, head->step);

    EMBER_CHECK(lookup_check_trainer(table, head, &who, err, err_length));
    /* An evaluation pools through the table's scratch context and keeps
     * nothing: the trainer's own context (open or not) is untouched. */
    const int eval = (head->flags & EMBER_LOOKUP_EVAL) != 0;
    context_t *ctx = eval ? &table->eval : table_context(table, head->trainer, head->step);
    /* Every array is checked in one pass while the context's buffers are
     * filled: nothing else is written before the last check passed, so a
     * refused lookup leaves nothing. */
    EMBER_CHECK(context_reserve(table, ctx, head, err, err_length));
    EMBER_CHECK(take_offsets(ctx, lookup, &who, err, err_length));
    if (table->dyn)
        EMBER_CHECK(table_dyn_take_keys(table, ctx, lookup, err, err_length));
    else
        EMBER_CHECK(take_rows(table, ctx, lookup, &who, err, err_length));
    EMBER_CHECK(take_entries(ctx, lookup, &who, err, err_length));
    if (table->dyn) {
        ctx->n = head->indices;
        if (table_dyn_order(table, ctx) != EMBER_OK)
            return refuse(err, err_length, EMBER_ERR_NO_MEMORY, &who, "out of memory");
    }
    if (lookup->held && lookup->places) { /* max: pooled for the argmax its backward needs */
        const size_t pools = (size_t)head->bags * table->spec.dim * 8;
        if (!ember_buffer_reserve(&table->rows_pool, pools + 8))
            return refuse(err, err_length, EMBER_ERR_NO_MEMORY, &who, "out of memory");
        EMBER_CHECK(lookup_pool(table, ctx, lookup, table->rows_pool.data, &who, err, err_length));
    }
    if (lookup->held)
        EMBER_CHECK(rows_reply(table, ctx, lookup, (uint8_t *)out, &who, err, err_length));
    else
        EMBER_CHECK(lookup_pool(table, ctx, lookup, out, &who, err, err_length));
    if (eval)
        return EMBER_OK;
    ctx->valid = 1;
    ctx->step = head->step;
    ctx->n = head->indices;
    ctx->bags = head->bags;
    ctx->max_mode = lookup->places != NULL;
    ctx->weighted = lookup->weights != NULL;
    return EMBER_OK;
}

/* Sync: reduce every trainer's gradient for the step (trainer order) and
 * apply it once (engine/ps/table_work.c: by row ranges on a host shard). */
static ember_status_t table_apply_reduced(ember_shard_t *table, char *err, size_t err_length)
{
    const uint32_t trainers = table->spec.trainers;
    if (!ember_buffer_reserve(&table->reduce_list, trainers * sizeof(pending_t *)))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    pending_t **grads = table->reduce_list.data;
    for (uint32_t t = 0; t < trainers; t++)
        grads[t] = table_pending(table, t, table->next_step);
    ember_status_t status = EMBER_OK;
    if (table->dyn &&
        (status = table_dyn_boundary(table, grads, trainers, table->next_step)) != EMBER_OK)
        return ember_status_text(err, err_length, status, "table %s: step %llu: %s",
                                 table->spec.name, (unsigned long long)table->next_step,
                                 ember_status_string(status));
    for (uint32_t t = 0; t < trainers; t++)
        table_rows_changed(table, grads[t]->rows.data, grads[t]->nrows);
    status = table_work_reduce(table, (const pending_t *const *)grads, trainers);
    if (status == EMBER_OK)
        status = table->device ? table_step(table, table->acc_rows.data, table->acc_grad.data,
                                            table_work_reduced_compact(table))
                               : table_work_step_reduced(table);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "table %s: optimizer step failed: %s",
                                 table->spec.name, ember_status_string(status));
    for (uint32_t t = 0; t < trainers; t++)
        table_pending(table, t, table->next_step)->valid = 0;
    if (table->dyn)
        table_dyn_expire(table, table->next_step);
    table->next_step++;
    return EMBER_OK;
}

/* Index of the first NaN or infinity of the @n floats at @v (any
 * alignment), or n.  Blocks of 64 are tested with an exponent mask the
 * compiler vectorizes (isfinite() one value at a time was most of a
 * gradient push's time); the block that has one is searched again. */
static size_t first_nonfinite(const uint8_t *v, size_t n)
{
    for (size_t start = 0; start < n; start += 64) {
        size_t end = start + 64 < n ? start + 64 : n;
        uint32_t any = 0;
        for (size_t i = start; i < end; i++) {
            uint32_t bits;
            memcpy(&bits, v + 4 * i, sizeof(bits));
            any |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
        }
        for (size_t i = start; any && i < end; i++) {
            if (!isfinite(ember_wire_load_f32(v, i)))
                return i;
        }
    }
    return n;
}

/* A trainer of the job, for the step its open context looked up, of the
 * size that lookup pooled. */
static ember_status_t grad_check_head(const ember_shard_t *table,
                                      const ember_wire_grad_view_t *grad, const who_t *who,
                                      char *err, size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    const ember_msg_grad_t *head = &grad->head;
    if (head->trainer >= spec->trainers)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: gradient from trainer %u, but the job has %u trainers",
                                 spec->name, head->trainer, spec->trainers);
    const context_t *ctx = table_context(table, head->trainer, head->step);
    if (!ctx->valid || ctx->step != head->step)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                      "gradient without a lookup of that step");
    if (head->bags != ctx->bags || grad->grad_bytes != (size_t)ctx->bags * spec->dim * 4)
        return refuse(err, err_length, EMBER_ERR_BAD_MESSAGE, who,
                      "gradient of %u bags (%zu bytes) for a lookup of %zu bags", head->bags,
                      grad->grad_bytes, ctx->bags);
    return EMBER_OK;
}

/* Everything a gradient is refused for, in the order ember_shard_grad
 * says it: its head, a value not finite, one already waiting. */
static ember_status_t grad_check(const ember_shard_t *table, const ember_wire_grad_view_t *grad,
                                 const who_t *who, char *err, size_t err_length)
{
    EMBER_CHECK(grad_check_head(table, grad, who, err, err_length));
    const size_t count = grad->grad_bytes / 4;
    const size_t bad = first_nonfinite(grad->grad, count);
    if (bad < count)
        return refuse(err, err_length, EMBER_ERR_NUMERIC, who,
                      "non-finite gradient (bag %zu); nothing applied", bad / table->spec.dim);
    if (ember_shard_is_sync(table) &&
        table_pending(table, grad->head.trainer, grad->head.step)->valid)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, who,
                      "a gradient of this trainer is already waiting");
    return EMBER_OK;
}

ember_status_t ember_shard_grad_check(const ember_shard_t *table,
                                      const ember_wire_grad_view_t *grad, char *err,
                                      size_t err_length)
{
    const who_t who = who_of(table, grad->head.trainer, grad->head.step);
    return grad_check(table, grad, &who, err, err_length);
}

/* Where a trainer's gradient is reduced into: an async one is applied
 * before ember_shard_grad returns, so all trainers share one buffer for it;
 * a sync one waits for the others in its own. */
static pending_t *grad_pending(ember_shard_t *table, uint32_t trainer, uint64_t step)
{
    return ember_shard_is_sync(table) ? table_pending(table, trainer, step) : &table->applying;
}

/* Sync: the rows of every gradient waiting (any trainer, any step of the
 * ring) but @self: a bound on what one step's reduction adds to it. */
static size_t pending_rows(const ember_shard_t *table, const pending_t *self)
{
    size_t rows = 0;
    const size_t slots = (size_t)table->spec.trainers * table->ring;
    for (size_t i = 0; ember_shard_is_sync(table) && i < slots; i++) {
        if (&table->pending[i] != self && table->pending[i].valid)
            rows += table->pending[i].nrows;
    }
    return rows;
}

ember_status_t ember_shard_grad_reserve(ember_shard_t *table, const ember_wire_grad_view_t *grad,
                                        char *err, size_t err_length)
{
    const context_t *ctx = table_context(table, grad->head.trainer, grad->head.step);
    pending_t *pending = grad_pending(table, grad->head.trainer, grad->head.step);
    const size_t dim = table->spec.dim;
    /* A row for every distinct row of the lookup (sum: a row no index
     * refers to gets zeros) or every index (max), whichever is more; an
     * unaligned gradient is copied out. */
    const size_t rows = ctx->nunique > ctx->n ? ctx->nunique : ctx->n;
    const int unaligned = (uintptr_t)grad->grad % _Alignof(float) != 0;
    /* Sync: the reduction of any step this gradient completes, over at
     * most every waiting gradient's rows and these. */
    const size_t reduced = rows + pending_rows(table, pending);
    if (!ember_buffer_reserve(&pending->rows, rows * 8 + 8) ||
        !ember_buffer_reserve(&pending->grad, rows * dim * sizeof(float) + 4) ||
        !ember_buffer_reserve(&table->written, ctx->nunique + 1) ||
        (unaligned && !ember_buffer_reserve(&table->order, grad->grad_bytes + 4)) ||
        (ember_shard_is_sync(table) &&
         (!ember_buffer_reserve(&table->acc_rows, reduced * 8 + 8) ||
          !ember_buffer_reserve(&table->acc_grad, reduced * dim * sizeof(float) + 4))))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "table %s: out of memory",
                                 table->spec.name);
    return EMBER_OK;
}

/* The gradient as floats: read in place when aligned (a rendezvous lands in
 * a pooled buffer, UCX's eager payloads mostly are), else copied out into
 * the room ember_shard_grad_reserve made. */
static const float *grad_values(ember_shard_t *table, const ember_wire_grad_view_t *grad)
{
    if ((uintptr_t)grad->grad % _Alignof(float) == 0)
        return (const float *)grad->grad;
    memcpy(table->order.data, grad->grad, grad->grad_bytes);
    return table->order.data;
}

/* The rows' gradients from the pooled output's, into @pending; the
 * context is closed whatever the outcome. */
static ember_status_t grad_backward(ember_shard_t *table, context_t *ctx, const float *grad_out,
                                    pending_t *pending, const who_t *who, char *err,
                                    size_t err_length)
{
    ember_status_t status = EMBER_OK;
    pending->nrows = 0;
    /* By row ranges over the PS's threads (engine/ps/table_work.c); a
     * device shard's context is in host memory too. */
    if (ctx->max_mode)
        status = table_work_max_backward(table, ctx, grad_out, pending);
    else
        table_work_sum_backward(table, ctx, grad_out, pending);
    ctx->valid = 0;
    if (status != EMBER_OK)
        return refuse(err, err_length, status, who, "backward failed: %s",
                      ember_status_string(status));
    return EMBER_OK;
}

/* Apply a trainer's gradient: async at once (*applied_p 1); sync once
 * every trainer's for the next step is in, then each following step whose
 * gradients are all in as well, in step order (*applied_p: how many). */
static ember_status_t grad_apply(ember_shard_t *table, pending_t *pending, uint64_t step,
                                 int *applied_p, char *err, size_t err_length)
{
    const ember_msg_table_create_t *spec = &table->spec;
    if (!ember_shard_is_sync(table)) {
        const uint64_t applied = table->dyn ? table_dyn_next_apply(table) : 0;
        ember_status_t status = EMBER_OK;
        if (table->dyn)
            status = table_dyn_boundary(table, &pending, 1, applied);
        if (status == EMBER_OK) {
            table_rows_changed(table, pending->rows.data, pending->nrows);
            status = table_step(table, pending->rows.data, pending->grad.data, pending->nrows);
            table->async_applied++;
        }
        if (status == EMBER_OK && table->dyn)
            table_dyn_expire(table, applied);
        if (status != EMBER_OK)
            return ember_status_text(err, err_length, status, "table %s: optimizer: %s", spec->name,
                                     ember_status_string(status));
        *applied_p = 1;
        return EMBER_OK;
    }
    pending->valid = 1;
    pending->step = step;
    for (;;) {
        for (uint32_t t = 0; t < spec->trainers; t++) {
            const pending_t *p = table_pending(table, t, table->next_step);
            if (!p->valid || p->step != table->next_step)
                return EMBER_OK; /* others still to come */
        }
        EMBER_CHECK(table_apply_reduced(table, err, err_length));
        ++*applied_p;
    }
}

ember_status_t ember_shard_grad_apply(ember_shard_t *table, const ember_wire_grad_view_t *grad,
                                      int *applied_p, char *err, size_t err_length)
{
    const ember_msg_grad_t *head = &grad->head;
    const who_t who = who_of(table, head->trainer, head->step);
    context_t *ctx = table_context(table, head->trainer, head->step);
    pending_t *pending = grad_pending(table, head->trainer, head->step);

    *applied_p = 0;
    EMBER_CHECK(
            grad_backward(table, ctx, grad_values(table, grad), pending, &who, err, err_length));
    if (table->dyn && table_dyn_pending(table, ctx, pending) != EMBER_OK)
        return refuse(err, err_length, EMBER_ERR_NO_MEMORY, &who, "out of memory");
    if (!(head->flags & EMBER_GRAD_APPLY))
        return EMBER_OK; /* accumulate-only: nothing to apply (not used yet) */
    return grad_apply(table, pending, head->step, applied_p, err, err_length);
}

ember_status_t ember_shard_grad(ember_shard_t *table, const ember_wire_grad_view_t *grad,
                                int *applied_p, char *err, size_t err_length)
{
    *applied_p = 0;
    ember_status_t status = ember_shard_grad_check(table, grad, err, err_length);
    if (status == EMBER_ERR_NUMERIC) /* the step is void: nothing of it is applied */
        ember_shard_drop_lookup(table, grad->head.trainer, grad->head.step);
    EMBER_CHECK(status);
    EMBER_CHECK(ember_shard_grad_reserve(table, grad, err, err_length));
    return ember_shard_grad_apply(table, grad, applied_p, err, err_length);
}

void ember_shard_drop_trainer(ember_shard_t *table, uint32_t trainer)
{
    for (uint32_t r = 0; trainer < table->spec.trainers && r < table->ring; r++)
        table->contexts[(size_t)trainer * table->ring + r].valid = 0;
}

void ember_shard_drop_lookup(ember_shard_t *table, uint32_t trainer, uint64_t step)
{
    if (trainer >= table->spec.trainers)
        return;
    context_t *ctx = table_context(table, trainer, step);
    if (ctx->valid && ctx->step == step)
        ctx->valid = 0;
}

size_t ember_shard_bytes(const ember_shard_t *table)
{
    if (table->dyn)
        return table_dyn_bytes(table) - table_dyn_optimizer_bytes(table);
    return (size_t)table->local_rows * table->row_bytes;
}

size_t ember_shard_optimizer_bytes(const ember_shard_t *table)
{
    if (table->dyn)
        return table_dyn_optimizer_bytes(table);
    return ember_opt_state_bytes(table->optimizer);
}

size_t ember_shard_other_bytes(const ember_shard_t *table)
{
    size_t bytes = table->acc_rows.capacity + table->acc_grad.capacity +
                   table->reduce_list.capacity + table->order.capacity + table->written.capacity +
                   pending_bytes(&table->applying) +
                   /* a GPU shard's pinned staging (its device scratch is not
                    * host memory) */
                   table->h_batch.bytes + table->h_out.bytes + table->h_values.bytes;
    bytes += context_bytes(&table->eval) + (table->dyn ? table_dyn_scratch_bytes(table) : 0);
    for (size_t t = 0; t < (size_t)table->spec.trainers * table->ring; t++) {
        const pending_t *p = &table->pending[t];
        bytes += context_bytes(&table->contexts[t]) + pending_bytes(p);
    }
    return bytes;
}
