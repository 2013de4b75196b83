/*
 * two_tower: the data file and the steps' batches (data.h).
 */
#include "data.h"

#include <ember/safetensors.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failf(char *err, size_t err_length, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int failf(char *err, size_t err_length, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_length, fmt, ap);
    va_end(ap);
    return -1;
}

/* A count of the metadata, a decimal integer in [1, 2^40]. */
static int read_count(const char *path, ember_st_file_t *file, const char *key, int64_t *count_p,
                      char *err, size_t err_length)
{
    const char *text = ember_st_metadata(file, key);
    char *end;

    if (!text)
        return failf(err, err_length, "%s: no '%s' in its metadata", path, key);
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end || value < 1 || value > (1ll << 40))
        return failf(err, err_length, "%s: metadata %s = '%s' is not a count in [1, 2^40]", path,
                     key, text);
    *count_p = value;
    return 0;
}

/* Tensor @name, @dtype, one dimension; its element count in *@numel_p. */
static int read_array(const char *path, ember_st_file_t *file, const char *name,
                      ember_dtype_t dtype, void **data_p, int64_t *numel_p, char *err,
                      size_t err_length)
{
    const ember_st_tensor_t *tensor = ember_st_find(file, name);
    size_t numel;

    if (!tensor)
        return failf(err, err_length, "%s: no tensor '%s'", path, name);
    if (tensor->dtype != dtype || tensor->ndim != 1)
        return failf(err, err_length, "%s: tensor '%s' is %s with %zu dimensions, expected %s [n]",
                     path, name, ember_dtype_name(tensor->dtype), tensor->ndim,
                     ember_dtype_name(dtype));
    if (ember_st_read_copy(file, name, dtype, data_p, &numel) != EMBER_OK)
        return failf(err, err_length, "%s: cannot copy tensor '%s' (out of memory)", path, name);
    *numel_p = (int64_t)numel;
    return 0;
}

/* @ids [@n]: each in [0, @rows). */
static int check_ids(const char *path, const char *name, const int64_t *ids, int64_t n,
                     int64_t rows, const char *table, char *err, size_t err_length)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= rows)
            return failf(err, err_length,
                         "%s: %s[%" PRId64 "] = %" PRId64 " is not a row of %s [0, %" PRId64 ")",
                         path, name, i, ids[i], table, rows);
    return 0;
}

/* A list of lists: @offsets [@lists + 1] from 0, non-decreasing, to @n. */
static int check_offsets(const char *path, const char *name, const int64_t *offsets, int64_t count,
                         int64_t lists, int64_t n, char *err, size_t err_length)
{
    if (count != lists + 1)
        return failf(err, err_length, "%s: %s has %" PRId64 " entries, expected %" PRId64, path,
                     name, count, lists + 1);
    if (offsets[0] != 0 || offsets[lists] != n)
        return failf(err, err_length,
                     "%s: %s runs from %" PRId64 " to %" PRId64 ", expected 0 to %" PRId64, path,
                     name, offsets[0], offsets[lists], n);
    for (int64_t i = 0; i < lists; i++)
        if (offsets[i + 1] < offsets[i])
            return failf(err, err_length,
                         "%s: %s[%" PRId64 "] = %" PRId64 " < %s[%" PRId64 "] = %" PRId64, path,
                         name, i + 1, offsets[i + 1], name, i, offsets[i]);
    return 0;
}

static int load_arrays(const char *path, ember_st_file_t *file, data_t *data, char *err,
                       size_t err_length)
{
    int64_t n_hist_offsets, n_hist, n_cat_offsets, n_cats, n_items, n_labels;

    if (read_count(path, file, "users", &data->users, err, err_length) ||
        read_count(path, file, "items", &data->items, err, err_length) ||
        read_count(path, file, "categories", &data->categories, err, err_length) ||
        read_array(path, file, "history_offsets", EMBER_DTYPE_I64, (void **)&data->history_offsets,
                   &n_hist_offsets, err, err_length) ||
        read_array(path, file, "history", EMBER_DTYPE_I64, (void **)&data->history, &n_hist, err,
                   err_length) ||
        read_array(path, file, "category_offsets", EMBER_DTYPE_I64,
                   (void **)&data->category_offsets, &n_cat_offsets, err, err_length) ||
        read_array(path, file, "item_categories", EMBER_DTYPE_I64, (void **)&data->item_categories,
                   &n_cats, err, err_length) ||
        read_array(path, file, "example_user", EMBER_DTYPE_I64, (void **)&data->example_user,
                   &data->examples, err, err_length) ||
        read_array(path, file, "example_item", EMBER_DTYPE_I64, (void **)&data->example_item,
                   &n_items, err, err_length) ||
        read_array(path, file, "example_label", EMBER_DTYPE_F32, (void **)&data->example_label,
                   &n_labels, err, err_length))
        return -1;
    if (n_items != data->examples || n_labels != data->examples)
        return failf(err, err_length,
                     "%s: example_user, example_item, example_label have %" PRId64 ", %" PRId64
                     ", %" PRId64 " entries: not the same",
                     path, data->examples, n_items, n_labels);
    if (check_offsets(path, "history_offsets", data->history_offsets, n_hist_offsets, data->users,
                      n_hist, err, err_length) ||
        check_offsets(path, "category_offsets", data->category_offsets, n_cat_offsets, data->items,
                      n_cats, err, err_length) ||
        check_ids(path, "history", data->history, n_hist, data->items, "item", err, err_length) ||
        check_ids(path, "item_categories", data->item_categories, n_cats, data->categories,
                  "category", err, err_length) ||
        check_ids(path, "example_user", data->example_user, data->examples, data->users, "user",
                  err, err_length) ||
        check_ids(path, "example_item", data->example_item, data->examples, data->items, "item",
                  err, err_length))
        return -1;
    for (int64_t i = 0; i < data->examples; i++)
        if (data->example_label[i] != 0.0f && data->example_label[i] != 1.0f)
            return failf(err, err_length, "%s: example_label[%" PRId64 "] = %g is not 0 or 1", path,
                         i, (double)data->example_label[i]);
    return 0;
}

int data_load(const char *path, data_t *data, char *err, size_t err_length)
{
    ember_st_file_t *file;
    char cause[512];

    memset(data, 0, sizeof(*data));
    if (ember_st_open(path, &file, cause, sizeof(cause)) != EMBER_OK)
        return failf(err, err_length, "%s: %s", path, cause);
    int rc = load_arrays(path, file, data, err, err_length);
    ember_st_close(file);
    if (rc)
        data_free(data);
    return rc;
}

void data_free(data_t *data)
{
    free(data->history_offsets);
    free(data->history);
    free(data->category_offsets);
    free(data->item_categories);
    free(data->example_user);
    free(data->example_item);
    free(data->example_label);
    memset(data, 0, sizeof(*data));
}

/* Room for @values ids and @batch_size bags of every feature. */
static int batch_reserve(batch_t *batch, size_t values, size_t batch_size)
{
    if (values > batch->capacity) {
        int64_t *v = realloc(batch->values, values * sizeof(*v));
        if (!v)
            return -1;
        batch->values = v;
        batch->capacity = values;
    }
    if (batch_size > batch->bags) {
        int32_t *lengths = realloc(batch->lengths, NUM_FEATURES * batch_size * sizeof(*lengths));
        if (!lengths)
            return -1;
        batch->lengths = lengths;
        float *labels = realloc(batch->labels, batch_size * sizeof(*labels));
        if (!labels)
            return -1;
        batch->labels = labels;
        batch->bags = batch_size;
    }
    return 0;
}

/* Append list @i of the offsets/ids pair as one bag of @feature. */
static size_t put_list(batch_t *batch, size_t at, int feature, size_t b, size_t batch_size,
                       const int64_t *offsets, const int64_t *ids, int64_t i)
{
    int64_t n = offsets[i + 1] - offsets[i];
    memcpy(batch->values + at, ids + offsets[i], (size_t)n * sizeof(int64_t));
    batch->lengths[(size_t)feature * batch_size + b] = (int32_t)n;
    return at + (size_t)n;
}

int batch_fill(batch_t *batch, const data_t *data, int64_t first, int64_t stride, size_t batch_size)
{
    /* The size first: one pass to count, one to copy. */
    size_t values = 0;
    for (size_t b = 0; b < batch_size; b++) {
        int64_t e = first + (int64_t)b * stride;
        int64_t user = data->example_user[e], item = data->example_item[e];
        values += 2 + (size_t)(data->history_offsets[user + 1] - data->history_offsets[user]) +
                  (size_t)(data->category_offsets[item + 1] - data->category_offsets[item]);
    }
    if (batch_reserve(batch, values, batch_size))
        return -1;

    /* Feature after feature: the KJT's values are grouped by feature. */
    size_t at = 0;
    for (int f = 0; f < NUM_FEATURES; f++) {
        for (size_t b = 0; b < batch_size; b++) {
            int64_t e = first + (int64_t)b * stride;
            int64_t user = data->example_user[e], item = data->example_item[e];
            switch (f) {
            case FEATURE_USER_ID:
                batch->values[at++] = user;
                batch->lengths[(size_t)f * batch_size + b] = 1;
                break;
            case FEATURE_HISTORY:
                at = put_list(batch, at, f, b, batch_size, data->history_offsets, data->history,
                              user);
                break;
            case FEATURE_ITEM_ID:
                batch->values[at++] = item;
                batch->lengths[(size_t)f * batch_size + b] = 1;
                break;
            case FEATURE_CATEGORIES:
                at = put_list(batch, at, f, b, batch_size, data->category_offsets,
                              data->item_categories, item);
                break;
            }
            if (f == 0)
                batch->labels[b] = data->example_label[e];
        }
    }
    batch->kjt = (ember_kjt_t){.num_features = NUM_FEATURES,
                               .batch_size = batch_size,
                               .values = batch->values,
                               .lengths = batch->lengths,
                               .offsets = NULL,
                               .weights = NULL,
                               .num_values = at};
    return 0;
}

void batch_free(batch_t *batch)
{
    free(batch->values);
    free(batch->lengths);
    free(batch->labels);
    memset(batch, 0, sizeof(*batch));
}
