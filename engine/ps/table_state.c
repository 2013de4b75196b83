/* engine/ps/table_state: a shard's snapshots and its restore by global row. */
#include "common/copy.h"
#include "common/reserve.h"
#include "engine/ps/table.h"
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

/* One array's room in the snapshot, and its description. */
static ember_status_t snap_reserve(const ember_shard_t *table, const ember_opt_state_t *a,
                                   snap_array_t *out, char *err, size_t err_length)
{
    const size_t bytes = a->rows * array_row_bytes(a);
    if (!ember_buffer_reserve(&out->data, bytes + 1))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory for a snapshot of its %s (%zu bytes)",
                                 table->spec.name, a->name, bytes);
    out->name = a->name;
    out->dtype = a->dtype;
    out->per_row = a->per_row;
    snprintf(out->tensor, sizeof(out->tensor), "%s.%s", table->spec.name, a->name);
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
    for (size_t i = 0; i < n; i++)
        EMBER_CHECK(snap_reserve(table, &arrays[i], &snap->arrays[i], err, err_length));
    memcpy(snap->name, table->spec.name, sizeof(snap->name));
    snap->local_rows = table->local_rows;
    snap->narrays = n;
    snap->next_step = table->next_step;
    snap_meta(snap, table);
    snap->valid = 1;
    return EMBER_OK;
}

ember_status_t ember_shard_snapshot_copy(const ember_shard_t *table, ember_shard_snapshot_t *snap,
                                         unsigned part, unsigned parts, char *err,
                                         size_t err_length)
{
    ember_opt_state_t arrays[EMBER_TABLE_STATE_TENSORS];
    const size_t n = table_arrays(table, arrays);
    if (!snap->valid || n != snap->narrays || parts == 0 || part >= parts)
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
    if (table->dyn)
        return ember_status_text(err, err_length, EMBER_ERR_UNSUPPORTED,
                                 "table %s: checkpoints of dynamic tables are not written yet",
                                 table->spec.name);
    ember_shard_snapshot_t *snap = *snap_p;
    const int created = snap == NULL;
    if (created && !(snap = calloc(1, sizeof(*snap))))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "table %s: no memory for a snapshot", table->spec.name);
    ember_status_t status = snapshot_fill(table, snap, err, err_length);
    if (status != EMBER_OK) {
        if (created)
            ember_shard_snapshot_free(snap);
        return status;
    }
    *snap_p = snap;
    return EMBER_OK;
}

void ember_shard_snapshot_free(ember_shard_snapshot_t *snap)
{
    if (!snap)
        return;
    for (size_t i = 0; i < EMBER_TABLE_STATE_TENSORS; i++)
        ember_buffer_free(&snap->arrays[i].data);
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
        t->shape[0] = snap->local_rows;
        t->shape[1] = (int64_t)a->per_row;
        t->numel = (size_t)snap->local_rows * a->per_row;
        t->nbytes = t->numel * ember_dtype_size(a->dtype);
        t->data = a->data.data;
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

ember_status_t ember_shard_restore(ember_shard_t *table, const ember_st_file_t *const *files,
                                   const char *const *names, size_t nfiles, char *err,
                                   size_t err_length)
{
    if (table->dyn)
        return ember_status_text(err, err_length, EMBER_ERR_UNSUPPORTED,
                                 "table %s: checkpoints of dynamic tables are not restored yet",
                                 table->spec.name);
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
