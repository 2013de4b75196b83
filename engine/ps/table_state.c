/* engine/ps/table_state: a shard's snapshots and its restore by global row. */
#include "common/copy.h"
#include "common/reserve.h"
#include "engine/ps/table.h"
#include "engine/ps/table_cow.h"
#include "engine/ps/table_dyn.h"
#include "engine/ps/table_private.h"

#include <ember/device.h>
#include <ember/log.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "NAME." and the longest state name or metadata key after it. */
#define STATE_KEY_MAX   (EMBER_TABLE_NAME_MAX + 24)
#define STATE_VALUE_MAX 32

/* One array of the snapshot: the rows, or one of the optimizer's. */
typedef struct {
    const char *name; /* "weight" or the optimizer's name (static) */
    ember_dtype_t dtype;
    size_t per_row;
    size_t rows; /* the tensor's first dimension */
    ember_buffer_t data;
    char tensor[STATE_KEY_MAX];
} snap_array_t;

struct ember_shard_snapshot {
    int valid; /* the last take succeeded */
    char name[EMBER_TABLE_NAME_MAX];
    int64_t local_rows;
    snap_array_t arrays[EMBER_TABLE_STATE_TENSORS]; /* weight, then the state */
    size_t narrays;
    uint64_t next_step;
    char keys[EMBER_TABLE_STATE_META][STATE_KEY_MAX];
    char values[EMBER_TABLE_STATE_META][STATE_VALUE_MAX];
    size_t nmeta;
    /* Kept by copy-on-write (engine/ps/table_cow.c): the arrays are read
     * from this table, not copied; NULL: copied into the arrays' data. */
    ember_shard_t *cow;
    /* A dynamic shard's: its rows and candidates in eviction order. */
    int dynamic;
    ember_buffer_t entries; /* table_dyn_entry_t [rows + candidates] */
    size_t held, nentries;
};

/* Every state name an optimizer may keep (engine/ops/optimizer.h): a file's
 * state the table's optimizer does not keep means its settings differ. */
static const char *const all_state_names[] = {"momentum_buffer", "started",    "sum", "momentum1",
                                              "exp_avg",         "exp_avg_sq", "step"};

/* The arrays a shard's state is: its rows as stored, then its optimizer's. */
static size_t table_arrays(const ember_shard_t *table, ember_opt_state_t out[])
{
    out[0] = (ember_opt_state_t){.name = "weight",
                                 .dtype = (ember_dtype_t)table->spec.dtype,
                                 .rows = (size_t)table->local_rows,
                                 .per_row = table->spec.dim,
                                 .data = table->data};
    return 1 + ember_opt_state_arrays(table->optimizer, out + 1);
}

static size_t array_row_bytes(const ember_opt_state_t *a)
{
    return a->per_row * ember_dtype_size(a->dtype);
}

/* One array's description in the snapshot. */
static void snap_describe(const ember_shard_t *table, const ember_opt_state_t *a, snap_array_t *out)
{
    out->name = a->name;
    out->dtype = a->dtype;
    out->per_row = a->per_row;
    out->rows = a->rows;
    snprintf(out->tensor, sizeof(out->tensor), "%s.%s", table->spec.name, a->name);
}

/* One array's room in the snapshot, and its description. */
static ember_status_t snap_reserve(const ember_shard_t *table, const ember_opt_state_t *a,
                                   snap_array_t *out, char *err, size_t err_length)
{
    const size_t bytes = a->rows * array_row_bytes(a);
    if (!ember_buffer_reserve(&out->data, bytes + 1))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory for a snapshot of its %s (%zu bytes)",
                                 table->spec.name, a->name, bytes);
    snap_describe(table, a, out);
    return EMBER_OK;
}

/* Part @part of @parts of one array copied into the snapshot (a device
 * shard's rows whole, by the device, in part 0). */
static ember_status_t snap_copy(const ember_shard_t *table, const ember_opt_state_t *a, int rows,
                                snap_array_t *out, unsigned part, unsigned parts, char *err,
                                size_t err_length)
{
    const size_t bytes = a->rows * array_row_bytes(a);
    if (bytes == 0)
        return EMBER_OK;
    if (!rows || !table->device) {
        const size_t begin = bytes / parts * part;
        const size_t end = part + 1 == parts ? bytes : bytes / parts * (part + 1);
        ember_copy((char *)out->data.data + begin, (const char *)a->data + begin, end - begin);
        return EMBER_OK;
    }
    if (part != 0)
        return EMBER_OK;
    ember_status_t status = table->dev->mem_copy(table->device, out->data.data, a->data, bytes,
                                                 EMBER_COPY_DEVICE_TO_HOST);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "table %s: snapshot from %s: %s",
                                 table->spec.name, ember_device_name(table->device),
                                 ember_status_string(status));
    return EMBER_OK;
}

/* The metadata entries, as text kept in the snapshot. */
static void snap_meta(ember_shard_snapshot_t *snap, const ember_shard_t *table)
{
    const ember_msg_table_create_t *spec = &table->spec;
    const struct {
        const char *key;
        uint64_t value;
    } numbers[] = {{"shard", spec->shard},
                   {"num_shards", spec->num_shards},
                   {"rows", (uint64_t)spec->rows},
                   {"dim", spec->dim},
                   {"opt_steps", ember_opt_steps(table->optimizer)},
                   {"step", table->next_step}};
    size_t n = 0;
    for (; n < sizeof(numbers) / sizeof(numbers[0]); n++) {
        snprintf(snap->keys[n], STATE_KEY_MAX, "%s.%s", spec->name, numbers[n].key);
        snprintf(snap->values[n], STATE_VALUE_MAX, "%" PRIu64, numbers[n].value);
    }
    snprintf(snap->keys[n], STATE_KEY_MAX, "%s.optimizer", spec->name);
    snprintf(snap->values[n], STATE_VALUE_MAX, "%s", ember_opt_kind_name(spec->optimizer.kind));
    snap->nmeta = n + 1;
}

static ember_status_t snapshot_fill(const ember_shard_t *table, ember_shard_snapshot_t *snap,
                                    char *err, size_t err_length)
{
    ember_opt_state_t arrays[EMBER_TABLE_STATE_TENSORS];
    const size_t n = table_arrays(table, arrays);

    snap->valid = 0;
    snap->cow = NULL;
    for (size_t i = 0; i < n; i++)
        EMBER_CHECK(snap_reserve(table, &arrays[i], &snap->arrays[i], err, err_length));
    memcpy(snap->name, table->spec.name, sizeof(snap->name));
    snap->local_rows = table->local_rows;
    snap->dynamic = 0;
    snap->narrays = n;
    snap->next_step = table->next_step;
    snap_meta(snap, table);
    snap->valid = 1;
    return EMBER_OK;
}

/* --- a dynamic shard's snapshot ----------------------------------------------
 *
 * Its rows held and its candidates, compacted in eviction order: "NAME.weight"
 * and the optimizer's arrays [held, ...] (the rows), then "NAME.keys",
 * ".counts", ".seen" (I64) and ".freq" (F64) [held + candidates], a row's
 * entries first; metadata as a fixed shard's plus "NAME.kind" (dynamic),
 * ".held" and the counters ".admitted", ".evicted", ".dropped". */

static const char *const dyn_entry_names[] = {"keys", "counts", "seen", "freq"};
#define DYN_ENTRY_ARRAYS 4

static void snap_meta_dyn(ember_shard_snapshot_t *snap, const ember_shard_t *table)
{
    table_dyn_stats_t st;
    table_dyn_stats(table, &st);
    const struct {
        const char *key;
        uint64_t value;
    } numbers[] = {{"held", snap->held},
                   {"admitted", st.admitted},
                   {"evicted", st.evicted},
                   {"dropped", st.dropped_grads}};
    size_t n = snap->nmeta;
    snprintf(snap->keys[n], STATE_KEY_MAX, "%s.kind", table->spec.name);
    snprintf(snap->values[n++], STATE_VALUE_MAX, "dynamic");
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++, n++) {
        snprintf(snap->keys[n], STATE_KEY_MAX, "%s.%s", table->spec.name, numbers[i].key);
        snprintf(snap->values[n], STATE_VALUE_MAX, "%" PRIu64, numbers[i].value);
    }
    snap->nmeta = n;
}

static ember_status_t snapshot_fill_dyn(const ember_shard_t *table, ember_shard_snapshot_t *snap,
                                        char *err, size_t err_length)
{
    ember_opt_state_t arrays[EMBER_TABLE_STATE_TENSORS];
    size_t n = table_arrays(table, arrays);
    snap->valid = 0;
    snap->cow = NULL;
    snap->held = table_dyn_rows_held(table);
    snap->nentries = snap->held + table_dyn_candidates_held(table);
    for (size_t i = 0; i < n; i++)
        arrays[i].rows = snap->held;
    for (size_t e = 0; e < DYN_ENTRY_ARRAYS; e++)
        arrays[n++] = (ember_opt_state_t){.name = dyn_entry_names[e],
                                          .dtype = e == 3 ? EMBER_DTYPE_F64 : EMBER_DTYPE_I64,
                                          .rows = snap->nentries,
                                          .per_row = 1};
    for (size_t i = 0; i < n; i++)
        EMBER_CHECK(snap_reserve(table, &arrays[i], &snap->arrays[i], err, err_length));
    if (!ember_buffer_reserve(&snap->entries, snap->nentries * sizeof(table_dyn_entry_t) + 1))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory for a snapshot of its keys",
                                 table->spec.name);
    memcpy(snap->name, table->spec.name, sizeof(snap->name));
    snap->local_rows = (int64_t)snap->held;
    snap->narrays = n;
    snap->next_step = table->next_step;
    snap->dynamic = 1;
    snap_meta(snap, table);
    snap_meta_dyn(snap, table);
    snap->valid = 1;
    return EMBER_OK;
}

/* The rows gathered from their slots and the entries' columns, in the
 * entries' order. */
static ember_status_t snapshot_copy_dyn(const ember_shard_t *table, ember_shard_snapshot_t *snap)
{
    ember_opt_state_t arrays[EMBER_TABLE_STATE_TENSORS];
    const size_t n = table_arrays(table, arrays);
    table_dyn_entry_t *entries = snap->entries.data;
    table_dyn_entries(table, entries);
    for (size_t a = 0; a < n; a++) {
        const size_t bytes = array_row_bytes(&arrays[a]);
        for (size_t j = 0; j < snap->held; j++)
            memcpy((char *)snap->arrays[a].data.data + j * bytes,
                   (const char *)arrays[a].data + (size_t)entries[j].slot * bytes, bytes);
    }
    int64_t *keys = snap->arrays[n].data.data, *counts = snap->arrays[n + 1].data.data;
    int64_t *seen = snap->arrays[n + 2].data.data;
    double *freq = snap->arrays[n + 3].data.data;
    for (size_t j = 0; j < snap->nentries; j++) {
        keys[j] = (int64_t)entries[j].key;
        counts[j] = (int64_t)entries[j].count;
        seen[j] = (int64_t)entries[j].seen;
        freq[j] = entries[j].freq;
    }
    return EMBER_OK;
}

ember_status_t ember_shard_snapshot_copy(const ember_shard_t *table, ember_shard_snapshot_t *snap,
                                         unsigned part, unsigned parts, char *err,
                                         size_t err_length)
{
    if (table->dyn && snap->valid && snap->dynamic && parts > 0 && part < parts)
        return part == 0 ? snapshot_copy_dyn(table, snap) : EMBER_OK;
    ember_opt_state_t arrays[EMBER_TABLE_STATE_TENSORS];
    const size_t n = table_arrays(table, arrays);
    if (!snap->valid || snap->dynamic || snap->cow || n != snap->narrays || parts == 0 ||
        part >= parts)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: a snapshot copied before it was begun",
                                 table->spec.name);
    for (size_t i = 0; i < n; i++)
        EMBER_CHECK(snap_copy(table, &arrays[i], i == 0, &snap->arrays[i], part, parts, err,
                              err_length));
    return EMBER_OK;
}

ember_status_t ember_shard_snapshot_take(const ember_shard_t *table,
                                         ember_shard_snapshot_t **snap_p, char *err,
                                         size_t err_length)
{
    EMBER_CHECK(ember_shard_snapshot_begin(table, snap_p, err, err_length));
    ember_status_t status = ember_shard_snapshot_copy(table, *snap_p, 0, 1, err, err_length);
    if (status != EMBER_OK)
        (*snap_p)->valid = 0;
    return status;
}

ember_status_t ember_shard_snapshot_begin(const ember_shard_t *table,
                                          ember_shard_snapshot_t **snap_p, char *err,
                                          size_t err_length)
{
    ember_shard_snapshot_t *snap = *snap_p;
    const int created = snap == NULL;
    if (created && !(snap = calloc(1, sizeof(*snap))))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory for a snapshot", table->spec.name);
    ember_status_t status = table->dyn ? snapshot_fill_dyn(table, snap, err, err_length)
                                       : snapshot_fill(table, snap, err, err_length);
    if (status != EMBER_OK) {
        if (created)
            ember_shard_snapshot_free(snap);
        return status;
    }
    *snap_p = snap;
    return EMBER_OK;
}

int ember_shard_snapshot_cow_able(const ember_shard_t *table)
{
    return !table->dyn && !table->device;
}

ember_status_t ember_shard_snapshot_mark(ember_shard_t *table, ember_shard_snapshot_t **snap_p,
                                         char *err, size_t err_length)
{
    if (!ember_shard_snapshot_cow_able(table))
        return ember_status_text(err, err_length, EMBER_ERR_UNSUPPORTED,
                                 "table %s: a %s table's snapshot is a copy", table->spec.name,
                                 table->dyn ? "dynamic" : "device");
    ember_shard_snapshot_t *snap = *snap_p;
    if (!snap && !(snap = calloc(1, sizeof(*snap))))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory for a snapshot", table->spec.name);
    *snap_p = snap;
    ember_opt_state_t arrays[EMBER_TABLE_STATE_TENSORS];
    table_cow_array_t kept[EMBER_TABLE_STATE_TENSORS];
    const size_t n = table_arrays(table, arrays);
    snap->valid = 0;
    for (size_t i = 0; i < n; i++) {
        ember_buffer_free(&snap->arrays[i].data); /* an earlier copy's room */
        snap_describe(table, &arrays[i], &snap->arrays[i]);
        kept[i] = (table_cow_array_t){.data = arrays[i].data,
                                      .row_bytes = array_row_bytes(&arrays[i])};
    }
    EMBER_CHECK(table_cow_begin(table, kept, n, err, err_length));
    memcpy(snap->name, table->spec.name, sizeof(snap->name));
    snap->local_rows = table->local_rows;
    snap->dynamic = 0;
    snap->narrays = n;
    snap->next_step = table->next_step;
    snap_meta(snap, table);
    snap->cow = table;
    snap->valid = 1;
    return EMBER_OK;
}

int ember_shard_snapshot_marked(const ember_shard_snapshot_t *snap)
{
    return snap && snap->valid && snap->cow != NULL;
}

ember_status_t ember_shard_snapshot_read(const ember_shard_snapshot_t *snap, size_t array,
                                         uint64_t offset, void *buf, size_t length, char *err,
                                         size_t err_length)
{
    if (snap->valid && snap->cow)
        return table_cow_read(snap->cow, array, offset, buf, length, err, err_length);
    const size_t bytes = array < snap->narrays
                                 ? snap->arrays[array].rows * snap->arrays[array].per_row *
                                           ember_dtype_size(snap->arrays[array].dtype)
                                 : 0;
    if (!snap->valid || offset > bytes || length > bytes - offset)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: bytes %llu..+%zu of array %zu are not in its snapshot",
                                 snap->name, (unsigned long long)offset, length, array);
    memcpy(buf, (const char *)snap->arrays[array].data.data + offset, length);
    return EMBER_OK;
}

void ember_shard_snapshot_end(ember_shard_snapshot_t *snap, ember_shard_snapshot_kept_t *kept)
{
    table_cow_stats_t stats = {0};
    if (snap && snap->cow) {
        table_cow_end(snap->cow, &stats);
        snap->cow = NULL;
        snap->valid = 0; /* its arrays were the table's */
    }
    if (kept)
        *kept = (ember_shard_snapshot_kept_t){.chunks = stats.chunks, .bytes = stats.bytes};
}

void ember_shard_snapshot_free(ember_shard_snapshot_t *snap)
{
    if (!snap)
        return;
    for (size_t i = 0; i < EMBER_TABLE_STATE_TENSORS; i++)
        ember_buffer_free(&snap->arrays[i].data);
    ember_buffer_free(&snap->entries);
    free(snap);
}

size_t ember_shard_snapshot_bytes(const ember_shard_snapshot_t *snap)
{
    size_t bytes = 0;
    for (size_t i = 0; snap && i < EMBER_TABLE_STATE_TENSORS; i++)
        bytes += snap->arrays[i].data.capacity;
    return bytes;
}

uint64_t ember_shard_snapshot_step(const ember_shard_snapshot_t *snap)
{
    return snap->next_step;
}

ember_status_t ember_shard_snapshot_tensors(const ember_shard_snapshot_t *snap,
                                            ember_st_tensor_t *tensors, size_t *ntensors,
                                            size_t max_tensors, ember_st_meta_t *meta,
                                            size_t *nmeta, size_t max_meta)
{
    if (!snap->valid || *ntensors > max_tensors || max_tensors - *ntensors < snap->narrays ||
        *nmeta > max_meta || max_meta - *nmeta < snap->nmeta)
        return EMBER_ERR_INVALID_PARAM;
    for (size_t i = 0; i < snap->narrays; i++) {
        const snap_array_t *a = &snap->arrays[i];
        ember_st_tensor_t *t = &tensors[(*ntensors)++];
        memset(t, 0, sizeof(*t));
        t->name = a->tensor;
        t->dtype = a->dtype;
        t->ndim = a->per_row == 1 ? 1 : 2;
        t->shape[0] = (int64_t)a->rows;
        t->shape[1] = (int64_t)a->per_row;
        t->numel = a->rows * a->per_row;
        t->nbytes = t->numel * ember_dtype_size(a->dtype);
        t->data = snap->cow ? NULL : a->data.data; /* NULL: ember_shard_snapshot_read's */
    }
    for (size_t i = 0; i < snap->nmeta; i++) {
        meta[*nmeta].key = snap->keys[i];
        meta[(*nmeta)++].value = snap->values[i];
    }
    return EMBER_OK;
}

/* --- restore ------------------------------------------------------------ */

/* One old shard of the table, as a file holds it (checked). */
typedef struct {
    size_t file; /* index into the caller's files */
    uint32_t shard, num_shards;
    uint64_t opt_steps, step;
    int64_t local_rows;
    const ember_st_tensor_t *arrays[EMBER_TABLE_STATE_TENSORS]; /* as table_arrays */
} old_shard_t;

/* What a restore is checked against and writes: the table's arrays. */
typedef struct {
    ember_shard_t *table;
    const ember_st_file_t *const *files;
    const char *const *names;
    ember_opt_state_t arrays[EMBER_TABLE_STATE_TENSORS];
    size_t narrays;
    char *err;
    size_t err_length;
} restore_t;

static const char *file_name(const restore_t *r, size_t i, char *buf, size_t size)
{
    if (r->names && r->names[i])
        return r->names[i];
    snprintf(buf, size, "file %zu", i);
    return buf;
}

/* A refusal naming file @i and the table. */
static ember_status_t refuse_file(const restore_t *r, size_t i, ember_status_t status,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static ember_status_t refuse_file(const restore_t *r, size_t i, ember_status_t status,
                                  const char *fmt, ...)
{
    char why[256], buf[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return ember_status_text(r->err, r->err_length, status, "%s: table %s: %s",
                             file_name(r, i, buf, sizeof(buf)), r->table->spec.name, why);
}

/* The metadata entry "NAME.@key" of file @i as a number <= @max, at full
 * width: decimal digits only. */
static ember_status_t meta_number(const restore_t *r, size_t i, const char *key, uint64_t max,
                                  uint64_t *value_p)
{
    char full[STATE_KEY_MAX];
    snprintf(full, sizeof(full), "%s.%s", r->table->spec.name, key);
    const char *text = ember_st_metadata(r->files[i], full);
    if (!text)
        return refuse_file(r, i, EMBER_ERR_FORMAT, "metadata '%s' is missing", full);
    uint64_t value = 0;
    const char *c = text;
    for (; *c >= '0' && *c <= '9'; c++) {
        unsigned digit = (unsigned)(*c - '0');
        if (value > (max - digit) / 10)
            return refuse_file(r, i, EMBER_ERR_FORMAT, "metadata '%s' is %s, more than %" PRIu64,
                               full, text, max);
        value = value * 10 + digit;
    }
    if (c == text || *c != '\0')
        return refuse_file(r, i, EMBER_ERR_FORMAT, "metadata '%s' is '%s', not a number", full,
                           text);
    *value_p = value;
    return EMBER_OK;
}

/* File @i's metadata for the table: the table's shape and optimizer, one
 * shard of a layout. */
static ember_status_t restore_check_meta(const restore_t *r, size_t i, old_shard_t *old)
{
    const ember_msg_table_create_t *spec = &r->table->spec;
    uint64_t shard, num_shards, rows, dim;
    EMBER_CHECK(meta_number(r, i, "shard", UINT32_MAX, &shard));
    EMBER_CHECK(meta_number(r, i, "num_shards", UINT32_MAX, &num_shards));
    EMBER_CHECK(meta_number(r, i, "rows", INT64_MAX, &rows));
    EMBER_CHECK(meta_number(r, i, "dim", UINT32_MAX, &dim));
    EMBER_CHECK(meta_number(r, i, "opt_steps", UINT64_MAX, &old->opt_steps));
    EMBER_CHECK(meta_number(r, i, "step", UINT64_MAX, &old->step));
    if (rows != (uint64_t)spec->rows || dim != spec->dim)
        return refuse_file(r, i, EMBER_ERR_FORMAT,
                           "its shard is of a %" PRIu64 " x %" PRIu64
                           " table, the table is %lld x %u",
                           rows, dim, (long long)spec->rows, spec->dim);
    if (shard >= num_shards)
        return refuse_file(r, i, EMBER_ERR_FORMAT,
                           "shard %" PRIu64 " of %" PRIu64 ": past the last (shards count from 0)",
                           shard, num_shards);
    char key[STATE_KEY_MAX];
    snprintf(key, sizeof(key), "%s.optimizer", spec->name);
    const char *kind = ember_st_metadata(r->files[i], key);
    const char *want = ember_opt_kind_name(spec->optimizer.kind);
    if (!kind || strcmp(kind, want) != 0)
        return refuse_file(r, i, EMBER_ERR_FORMAT, "optimizer %s%s%s, the table's is %s",
                           kind ? "'" : "(metadata '", kind ? kind : key, kind ? "'" : "' missing)",
                           want);
    old->shard = (uint32_t)shard;
    old->num_shards = (uint32_t)num_shards;
    old->local_rows = (int64_t)((rows - shard + num_shards - 1) / num_shards);
    return EMBER_OK;
}

/* Tensor "NAME.@a->name" of file @i: there, of @a's dtype, [local_rows,
 * per_row] (or [local_rows] for per-row state). */
static ember_status_t restore_check_tensor(const restore_t *r, size_t i, const ember_opt_state_t *a,
                                           const old_shard_t *old,
                                           const ember_st_tensor_t **tensor_p)
{
    char name[STATE_KEY_MAX];
    snprintf(name, sizeof(name), "%s.%s", r->table->spec.name, a->name);
    const ember_st_tensor_t *t = ember_st_find(r->files[i], name);
    if (!t)
        return refuse_file(r, i, EMBER_ERR_FORMAT, "tensor '%s' is missing", name);
    if (t->dtype != a->dtype)
        return refuse_file(r, i, EMBER_ERR_FORMAT, "tensor '%s' is %s, the table's is %s", name,
                           ember_dtype_name(t->dtype), ember_dtype_name(a->dtype));
    const size_t ndim = a->per_row == 1 ? 1 : 2;
    if (t->ndim != ndim || t->shape[0] != old->local_rows ||
        (ndim == 2 && t->shape[1] != (int64_t)a->per_row))
        return refuse_file(r, i, EMBER_ERR_FORMAT,
                           "tensor '%s' has %zu dims [%lld, %lld], want [%lld%s%zu] (shard %u of "
                           "%u)",
                           name, t->ndim, (long long)t->shape[0],
                           (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)old->local_rows,
                           ndim == 2 ? ", " : "", ndim == 2 ? a->per_row : (size_t)0, old->shard,
                           old->num_shards);
    *tensor_p = t;
    return EMBER_OK;
}

/* Every array the table has, and no state it does not keep. */
static ember_status_t restore_check_tensors(const restore_t *r, size_t i, old_shard_t *old)
{
    for (size_t k = 0; k < r->narrays; k++)
        EMBER_CHECK(restore_check_tensor(r, i, &r->arrays[k], old, &old->arrays[k]));
    for (size_t s = 0; s < sizeof(all_state_names) / sizeof(all_state_names[0]); s++) {
        int kept = 0;
        for (size_t k = 1; k < r->narrays; k++)
            kept |= strcmp(r->arrays[k].name, all_state_names[s]) == 0;
        char name[STATE_KEY_MAX];
        snprintf(name, sizeof(name), "%s.%s", r->table->spec.name, all_state_names[s]);
        if (!kept && ember_st_find(r->files[i], name))
            return refuse_file(r, i, EMBER_ERR_FORMAT,
                               "holds '%s', state its %s optimizer does not keep here "
                               "(its settings differ)",
                               name, ember_opt_kind_name(r->table->spec.optimizer.kind));
    }
    return EMBER_OK;
}

/* The old shards together: one layout, each shard once, all there, all at
 * the same step. */
static ember_status_t restore_check_layout(const restore_t *r, const old_shard_t *old, size_t n)
{
    const char *table = r->table->spec.name;
    char a[32], b[32];
    for (size_t k = 1; k < n; k++) {
        if (old[k].num_shards != old[0].num_shards)
            return refuse_file(r, old[k].file, EMBER_ERR_FORMAT,
                               "shard %u of %u, but %s holds shard %u of %u", old[k].shard,
                               old[k].num_shards, file_name(r, old[0].file, a, sizeof(a)),
                               old[0].shard, old[0].num_shards);
        if (old[k].opt_steps != old[0].opt_steps || old[k].step != old[0].step)
            return refuse_file(r, old[k].file, EMBER_ERR_FORMAT,
                               "shard %u is at step %" PRIu64 " (optimizer %" PRIu64
                               "), shard %u in %s at %" PRIu64 " (%" PRIu64 ")",
                               old[k].shard, old[k].step, old[k].opt_steps, old[0].shard,
                               file_name(r, old[0].file, a, sizeof(a)), old[0].step,
                               old[0].opt_steps);
    }
    /* n files of distinct shards < num_shards, n == num_shards: all there. */
    for (size_t k = 0; k < n; k++)
        for (size_t j = 0; j < k; j++)
            if (old[j].shard == old[k].shard)
                return ember_status_text(r->err, r->err_length, EMBER_ERR_FORMAT,
                                         "table %s: shard %u of %u is in both %s and %s", table,
                                         old[k].shard, old[k].num_shards,
                                         file_name(r, old[j].file, a, sizeof(a)),
                                         file_name(r, old[k].file, b, sizeof(b)));
    for (uint32_t s = 0; n < old[0].num_shards; s++) {
        size_t k = 0;
        while (k < n && old[k].shard != s)
            k++;
        if (k == n)
            return ember_status_text(r->err, r->err_length, EMBER_ERR_FORMAT,
                                     "table %s: shard %u of %u is missing (%zu of its %u "
                                     "shards are in the files given)",
                                     table, s, old[0].num_shards, n, old[0].num_shards);
    }
    return EMBER_OK;
}

/* The files that hold the table, each checked, then their layout. */
static ember_status_t restore_check(const restore_t *r, size_t nfiles, old_shard_t *old,
                                    size_t *n_p)
{
    char key[STATE_KEY_MAX];
    size_t n = 0;
    snprintf(key, sizeof(key), "%s.shard", r->table->spec.name);
    for (size_t i = 0; i < nfiles; i++) {
        if (!ember_st_metadata(r->files[i], key))
            continue; /* another table's file */
        old[n].file = i;
        EMBER_CHECK(restore_check_meta(r, i, &old[n]));
        EMBER_CHECK(restore_check_tensors(r, i, &old[n]));
        n++;
    }
    if (n == 0)
        return ember_status_text(r->err, r->err_length, EMBER_ERR_NOT_FOUND,
                                 "table %s: none of the %zu files holds it (no '%s')",
                                 r->table->spec.name, nfiles, key);
    EMBER_CHECK(restore_check_layout(r, old, n));
    *n_p = n;
    return EMBER_OK;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The rows of @old this shard owns copied from @src (the file's array,
 * @row_bytes a row) to their local places in @dst, in the file's order.
 * Old local row l is global row l * O + o; this shard owns it when that is
 * s mod S, which holds for every S / gcd(O, S)-th l from the first. */
static void copy_owned_rows(const ember_msg_table_create_t *spec, const old_shard_t *old,
                            const void *src, void *dst, size_t row_bytes)
{
    const uint64_t S = spec->num_shards, s = spec->shard, O = old->num_shards, o = old->shard;
    const uint64_t L = (uint64_t)old->local_rows;
    if (O == S && o == s) {
        if (L > 0)
            memcpy(dst, src, L * row_bytes); /* the layout unchanged: one copy */
        return;
    }
    const uint64_t period = S / gcd(O, S);
    uint64_t l = 0;
    while (l < period && l < L && (o + l * O) % S != s)
        l++;
    if (l == period)
        return; /* no row of that shard is this one's */
    for (; l < L; l += period) {
        uint64_t global = o + l * O;
        memcpy((char *)dst + (global / S) * row_bytes, (const char *)src + l * row_bytes,
               row_bytes);
    }
}

/* The rows into a device shard: gathered in host memory, then one copy. */
static ember_status_t restore_device_rows(const restore_t *r, const old_shard_t *old, size_t n)
{
    ember_shard_t *table = r->table;
    const size_t bytes = (size_t)table->local_rows * table->row_bytes;
    if (bytes == 0)
        return EMBER_OK;
    void *staging = malloc(bytes);
    if (!staging)
        return ember_status_text(r->err, r->err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory to stage its %zu bytes of rows",
                                 table->spec.name, bytes);
    for (size_t k = 0; k < n; k++)
        copy_owned_rows(&table->spec, &old[k], old[k].arrays[0]->data, staging, table->row_bytes);
    ember_status_t status = table->dev->mem_copy(table->device, table->data, staging, bytes,
                                                 EMBER_COPY_HOST_TO_DEVICE);
    free(staging);
    if (status != EMBER_OK)
        return ember_status_text(r->err, r->err_length, status, "table %s: restore onto %s: %s",
                                 table->spec.name, ember_device_name(table->device),
                                 ember_status_string(status));
    return EMBER_OK;
}

/* The checked old shards into the table: a device's rows first (the one
 * copy that can fail), then the host's arrays. */
static ember_status_t restore_apply(const restore_t *r, const old_shard_t *old, size_t n)
{
    ember_shard_t *table = r->table;
    size_t first = 0;
    table_cow_range(table, 0, table->local_rows); /* a write in progress keeps them */
    if (table->device) {
        EMBER_CHECK(restore_device_rows(r, old, n));
        first = 1;
    }
    for (size_t k = 0; k < n; k++)
        for (size_t a = first; a < r->narrays; a++)
            copy_owned_rows(&table->spec, &old[k], old[k].arrays[a]->data, r->arrays[a].data,
                            array_row_bytes(&r->arrays[a]));
    ember_opt_set_steps(table->optimizer, old[0].opt_steps);
    table->next_step = old[0].step;
    return EMBER_OK;
}

/* --- a dynamic shard's restore ---------------------------------------------- */

/* File @i's tensor "NAME.@name": @dtype, [@rows] or [@rows, @per_row]. */
static ember_status_t dyn_tensor(const restore_t *r, size_t i, const char *name,
                                 ember_dtype_t dtype, uint64_t rows, size_t per_row,
                                 const ember_st_tensor_t **tensor_p)
{
    char full[STATE_KEY_MAX];
    snprintf(full, sizeof(full), "%s.%s", r->table->spec.name, name);
    const ember_st_tensor_t *t = ember_st_find(r->files[i], full);
    if (!t)
        return refuse_file(r, i, EMBER_ERR_FORMAT, "tensor '%s' is missing", full);
    const size_t ndim = per_row == 1 ? 1 : 2;
    if (t->dtype != dtype || t->ndim != ndim || (uint64_t)t->shape[0] != rows ||
        (ndim == 2 && (size_t)t->shape[1] != per_row))
        return refuse_file(r, i, EMBER_ERR_FORMAT,
                           "tensor '%s' is %s [%lld, %lld], a dynamic shard of %" PRIu64
                           " rows keeps %s [%" PRIu64 ", %zu]",
                           full, ember_dtype_name(t->dtype), (long long)t->shape[0],
                           (long long)(t->ndim > 1 ? t->shape[1] : 1), rows,
                           ember_dtype_name(dtype), rows, per_row);
    *tensor_p = t;
    return EMBER_OK;
}

/* One old dynamic shard, checked: its metadata, its arrays. */
typedef struct {
    old_shard_t old;
    uint64_t held, entries, admitted, evicted, dropped;
    const ember_st_tensor_t *state[EMBER_TABLE_STATE_TENSORS]; /* weight, the optimizer's */
    const ember_st_tensor_t *cols[DYN_ENTRY_ARRAYS];           /* keys counts seen freq */
} dyn_old_t;

static ember_status_t dyn_check_file(const restore_t *r, size_t i, dyn_old_t *d)
{
    char key[STATE_KEY_MAX];
    snprintf(key, sizeof(key), "%s.kind", r->table->spec.name);
    const char *kind = ember_st_metadata(r->files[i], key);
    if (!kind || strcmp(kind, "dynamic") != 0)
        return refuse_file(r, i, EMBER_ERR_FORMAT,
                           "a fixed table's shard (no '%s' dynamic), the table is dynamic", key);
    d->old.file = i;
    EMBER_CHECK(restore_check_meta(r, i, &d->old));
    EMBER_CHECK(meta_number(r, i, "held", INT64_MAX, &d->held));
    EMBER_CHECK(meta_number(r, i, "admitted", UINT64_MAX, &d->admitted));
    EMBER_CHECK(meta_number(r, i, "evicted", UINT64_MAX, &d->evicted));
    EMBER_CHECK(meta_number(r, i, "dropped", UINT64_MAX, &d->dropped));
    for (size_t a = 0; a < r->narrays; a++)
        EMBER_CHECK(dyn_tensor(r, i, r->arrays[a].name, r->arrays[a].dtype, d->held,
                               r->arrays[a].per_row, &d->state[a]));
    char full[STATE_KEY_MAX];
    snprintf(full, sizeof(full), "%s.keys", r->table->spec.name);
    const ember_st_tensor_t *keys = ember_st_find(r->files[i], full);
    d->entries = keys ? (uint64_t)keys->shape[0] : 0;
    if (d->entries < d->held)
        return refuse_file(r, i, EMBER_ERR_FORMAT, "%" PRIu64 " keys for %" PRIu64 " rows held",
                           d->entries, d->held);
    for (size_t e = 0; e < DYN_ENTRY_ARRAYS; e++)
        EMBER_CHECK(dyn_tensor(r, i, dyn_entry_names[e], e == 3 ? EMBER_DTYPE_F64 : EMBER_DTYPE_I64,
                               d->entries, 1, &d->cols[e]));
    return EMBER_OK;
}

/* A column's value @j (the file's bytes need not be aligned). */
static uint64_t col_u64(const ember_st_tensor_t *t, size_t j)
{
    uint64_t v;
    memcpy(&v, (const char *)t->data + 8 * j, 8);
    return v;
}

/* Every old shard's entries of this shard's keys, rows first in order of
 * the step last seen (a file's own order kept), then the candidates. */
static ember_status_t dyn_gather(const restore_t *r, const dyn_old_t *d, size_t n,
                                 table_dyn_entry_t **out_p, size_t *count_p,
                                 const dyn_old_t ***from_p, size_t **index_p)
{
    const ember_msg_table_create_t *spec = &r->table->spec;
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += d[k].entries;
    table_dyn_entry_t *out = malloc((total + 1) * sizeof(*out));
    const dyn_old_t **from = malloc((total + 1) * sizeof(*from));
    size_t *index = malloc((total + 1) * sizeof(*index));
    if (!out || !from || !index) {
        free(out), free(from), free(index);
        return ember_status_text(r->err, r->err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory to restore its keys", spec->name);
    }
    size_t m = 0;
    for (int rows = 1; rows >= 0; rows--) {
        const size_t first = m;
        for (size_t k = 0; k < n; k++) {
            const size_t lo = rows ? 0 : d[k].held, hi = rows ? d[k].held : d[k].entries;
            for (size_t j = lo; j < hi; j++) {
                const uint64_t key = col_u64(d[k].cols[0], j);
                if (ember_wire_key_shard(key, spec->num_shards) != spec->shard)
                    continue;
                double freq;
                memcpy(&freq, (const char *)d[k].cols[3]->data + 8 * j, 8);
                out[m] = (table_dyn_entry_t){.key = key,
                                             .count = col_u64(d[k].cols[1], j),
                                             .seen = col_u64(d[k].cols[2], j),
                                             .freq = freq,
                                             .slot = rows ? 0 : -1};
                from[m] = &d[k];
                index[m++] = j;
            }
        }
        /* Insertion by seen, stable: each file's list is in that order
         * already, so only the files' lists interleave. */
        for (size_t a = first + 1; a < m; a++) {
            table_dyn_entry_t e = out[a];
            const dyn_old_t *f = from[a];
            size_t ix = index[a], b = a;
            for (; b > first && out[b - 1].seen > e.seen; b--) {
                out[b] = out[b - 1], from[b] = from[b - 1], index[b] = index[b - 1];
            }
            out[b] = e, from[b] = f, index[b] = ix;
        }
    }
    *out_p = out, *count_p = m, *from_p = from, *index_p = index;
    return EMBER_OK;
}

/* The gathered entries into the shard: the rows' values and state staged
 * contiguous (from whichever file holds each), then put in slots. */
static ember_status_t restore_dyn_apply(const restore_t *r, const table_dyn_entry_t *entries,
                                        size_t m, const dyn_old_t *const *from, const size_t *index)
{
    ember_shard_t *table = r->table;
    size_t rows = 0;
    while (rows < m && entries[rows].slot >= 0)
        rows++;
    void *staged[EMBER_TABLE_STATE_TENSORS] = {NULL};
    ember_status_t status = EMBER_OK;
    for (size_t a = 0; a < r->narrays && status == EMBER_OK; a++) {
        const size_t bytes = array_row_bytes(&r->arrays[a]);
        staged[a] = malloc(rows * bytes + 1);
        if (!staged[a]) {
            status = ember_status_text(r->err, r->err_length, EMBER_ERR_NO_MEMORY,
                                       "table %s: no memory to stage its rows", table->spec.name);
            break;
        }
        for (size_t j = 0; j < rows; j++)
            memcpy((char *)staged[a] + j * bytes,
                   (const char *)from[j]->state[a]->data + index[j] * bytes, bytes);
    }
    if (status == EMBER_OK)
        status = table_dyn_restore(table, entries, m, staged[0], (const void *const *)staged + 1,
                                   r->err, r->err_length);
    for (size_t a = 0; a < r->narrays; a++)
        free(staged[a]);
    return status;
}

static ember_status_t restore_dyn(restore_t *r, size_t nfiles)
{
    ember_shard_t *table = r->table;
    dyn_old_t *d = calloc(nfiles ? nfiles : 1, sizeof(*d));
    old_shard_t *old = calloc(nfiles ? nfiles : 1, sizeof(*old));
    if (!d || !old) {
        free(d), free(old);
        return ember_status_text(r->err, r->err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory to restore it", table->spec.name);
    }
    char key[STATE_KEY_MAX];
    size_t n = 0;
    ember_status_t status = EMBER_OK;
    snprintf(key, sizeof(key), "%s.shard", table->spec.name);
    for (size_t i = 0; status == EMBER_OK && i < nfiles; i++) {
        if (!ember_st_metadata(r->files[i], key))
            continue;
        status = dyn_check_file(r, i, &d[n]);
        old[n] = d[n].old;
        n += status == EMBER_OK;
    }
    if (status == EMBER_OK && n == 0)
        status = ember_status_text(r->err, r->err_length, EMBER_ERR_NOT_FOUND,
                                   "table %s: none of the %zu files holds it (no '%s')",
                                   table->spec.name, nfiles, key);
    if (status == EMBER_OK)
        status = restore_check_layout(r, old, n);
    table_dyn_entry_t *entries = NULL;
    const dyn_old_t **from = NULL;
    size_t *index = NULL, m = 0;
    if (status == EMBER_OK)
        status = dyn_gather(r, d, n, &entries, &m, &from, &index);
    if (status == EMBER_OK)
        status = restore_dyn_apply(r, entries, m, from, index);
    if (status == EMBER_OK) {
        ember_opt_set_steps(table->optimizer, old[0].opt_steps);
        table->next_step = old[0].step;
        for (size_t k = 0; k < n; k++) /* the counters stay with their shard */
            if (d[k].old.num_shards == table->spec.num_shards &&
                d[k].old.shard == table->spec.shard)
                table_dyn_set_counters(table, d[k].admitted, d[k].evicted, d[k].dropped);
    }
    free(entries), free(from), free(index), free(d), free(old);
    return status;
}

ember_status_t ember_shard_restore(ember_shard_t *table, const ember_st_file_t *const *files,
                                   const char *const *names, size_t nfiles, char *err,
                                   size_t err_length)
{
    table_rows_changed_all(table); /* a copy of any row made before is void */
    if (table->dyn) {
        restore_t r = {.table = table,
                       .files = files,
                       .names = names,
                       .err = err,
                       .err_length = err_length};
        r.narrays = table_arrays(table, r.arrays);
        return restore_dyn(&r, nfiles);
    }
    restore_t r = {
            .table = table, .files = files, .names = names, .err = err, .err_length = err_length};
    size_t n = 0;
    r.narrays = table_arrays(table, r.arrays);
    old_shard_t *old = calloc(nfiles ? nfiles : 1, sizeof(*old));
    if (!old)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory to restore it", table->spec.name);
    ember_status_t status = restore_check(&r, nfiles, old, &n);
    if (status == EMBER_OK)
        status = restore_apply(&r, old, n);
    free(old);
    return status;
}
