/* models/tutorial/replay_file: a replay file's metadata and tensors, checked. */
#include "models/tutorial/replay_file.h"

#include <ember/embedding_bag.h>
#include <ember/log.h>
#include <ember/optimizer.h>

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const ember_st_file_t *file;
    const char *path; /* for messages; may be NULL */
    char *err;
    size_t err_length;
} reader_t;

static ember_status_t refuse(const reader_t *r, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* ERR_FORMAT, the message prefixed with the file's name. */
static ember_status_t refuse(const reader_t *r, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    return ember_status_text(r->err, r->err_length, EMBER_ERR_FORMAT, "%s%s%s",
                             r->path ? r->path : "", r->path ? ": " : "", line);
}

/* ---------------------------------------------------------------- metadata */

/* Metadata @key's text, or @fallback when the file has none (a NULL
 * fallback: the key is required). */
static ember_status_t meta_text(const reader_t *r, const char *key, const char *fallback,
                                const char **text_p)
{
    const char *text = ember_st_metadata(r->file, key);
    *text_p = text ? text : fallback;
    return *text_p ? EMBER_OK : refuse(r, "metadata '%s' is missing", key);
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Metadata @key as an integer from @min to @max.  Decimal digits only:
 * strtoull would take a sign ("-1" as 2^64 - 1), spaces or a base prefix.
 * Parsed at 64 bits and checked whole before any caller narrows it. */
static ember_status_t read_int(const reader_t *r, const char *key, const char *fallback,
                               uint64_t min, uint64_t max, uint64_t *value_p)
{
    const char *text;
    char *end = NULL;
    unsigned long long value = 0;
    EMBER_CHECK(meta_text(r, key, fallback, &text));
    errno = 0;
    if (is_digit(text[0]))
        value = strtoull(text, &end, 10);
    if (!end || errno || *end || value < min || value > max)
        return refuse(r, "metadata '%s' is '%s', not an integer from %" PRIu64 " to %" PRIu64, key,
                      text, min, max);
    *value_p = value;
    return EMBER_OK;
}

/* Metadata @key as a decimal number from @min to @max: digits, a point and
 * an exponent, the whole string (no sign, space, hex, inf or nan; a value
 * strtod cannot hold is refused, not rounded to 0 or infinity). */
static ember_status_t read_double(const reader_t *r, const char *key, double min, double max,
                                  double *value_p)
{
    const char *text;
    char *end = NULL;
    double value = NAN;
    EMBER_CHECK(meta_text(r, key, NULL, &text));
    errno = 0;
    if ((is_digit(text[0]) || text[0] == '.') && strspn(text, "0123456789.eE+-") == strlen(text))
        value = strtod(text, &end);
    if (!end || errno || *end || !isfinite(value) || value < min || value > max)
        return refuse(r, "metadata '%s' is '%s', not a decimal number from %g to %g", key, text,
                      min, max);
    *value_p = value;
    return EMBER_OK;
}

/* Metadata @key as one of @words (NULL-terminated), copied into @out. */
static ember_status_t read_word(const reader_t *r, const char *key, const char *fallback,
                                const char *const *words, char *out, size_t out_length)
{
    const char *text;
    char list[256] = "";
    int used = 0;
    EMBER_CHECK(meta_text(r, key, fallback, &text));
    for (size_t i = 0; words[i]; i++) {
        if (strcmp(text, words[i]) == 0 && strlen(text) < out_length) {
            memcpy(out, text, strlen(text) + 1);
            return EMBER_OK;
        }
        if (used < (int)sizeof(list))
            used += snprintf(list + used, sizeof(list) - (size_t)used, "%s%s", i ? ", " : "",
                             words[i]);
    }
    return refuse(r, "metadata '%s' is '%s', not one of %s", key, text, list);
}

ember_status_t ember_replay_info_read(const ember_st_file_t *file, const char *path,
                                      ember_replay_info_t *info_p, char *err, size_t err_length)
{
    const reader_t r = {.file = file, .path = path, .err = err, .err_length = err_length};
    const char *const modes[] = {ember_bag_mode_name(EMBER_BAG_SUM),
                                 ember_bag_mode_name(EMBER_BAG_MEAN),
                                 ember_bag_mode_name(EMBER_BAG_MAX), NULL};
    const char *const reduces[] = {"sum", "mean", NULL};
    const char *const optimizers[] = {ember_opt_kind_name(EMBER_OPT_SGD),
                                      ember_opt_kind_name(EMBER_OPT_ADAGRAD),
                                      ember_opt_kind_name(EMBER_OPT_ROWWISE_ADAGRAD),
                                      ember_opt_kind_name(EMBER_OPT_ADAM), NULL};
    const char *const losses[] = {"cross_entropy_mean", NULL};
    ember_replay_info_t info = {0};
    uint64_t rows, dim, classes, trainers, steps, weights;
    char loss[32];

    EMBER_CHECK(read_int(&r, "rows", NULL, 1, EMBER_REPLAY_ROWS_MAX, &rows));
    EMBER_CHECK(read_int(&r, "dim", NULL, 1, EMBER_REPLAY_DIM_MAX, &dim));
    EMBER_CHECK(read_int(&r, "classes", NULL, 2, EMBER_REPLAY_CLASSES_MAX, &classes));
    EMBER_CHECK(read_int(&r, "trainers", NULL, 1, EMBER_REPLAY_TRAINERS_MAX, &trainers));
    EMBER_CHECK(read_int(&r, "steps", NULL, 1, EMBER_REPLAY_STEPS_MAX, &steps));
    EMBER_CHECK(read_int(&r, "per_sample_weights", NULL, 0, 1, &weights));
    EMBER_CHECK(read_int(&r, "seed", "0", 0, INT64_MAX, &info.seed));
    /* lr becomes a float: beyond FLT_MAX it would be infinite. */
    EMBER_CHECK(read_double(&r, "lr", 0.0, FLT_MAX, &info.lr));
    EMBER_CHECK(read_word(&r, "mode", NULL, modes, info.mode, sizeof(info.mode)));
    EMBER_CHECK(read_word(&r, "sparse_reduce", "sum", reduces, info.sparse_reduce,
                          sizeof(info.sparse_reduce)));
    EMBER_CHECK(
            read_word(&r, "optimizer", "sgd", optimizers, info.optimizer, sizeof(info.optimizer)));
    EMBER_CHECK(read_word(&r, "loss", losses[0], losses, loss, sizeof(loss)));
    /* PyTorch's EmbeddingBag takes per_sample_weights in sum mode only. */
    if (weights && strcmp(info.mode, "sum") != 0)
        return refuse(&r,
                      "metadata 'per_sample_weights' is '1' with 'mode' '%s': "
                      "per-sample weights need mode sum",
                      info.mode);
    info.rows = (int64_t)rows;
    info.dim = (uint32_t)dim;
    info.classes = (uint32_t)classes;
    info.trainers = (uint32_t)trainers;
    info.steps = (uint32_t)steps;
    info.per_sample_weights = (uint32_t)weights;
    *info_p = info;
    return EMBER_OK;
}

/* ----------------------------------------------------------------- tensors */

/* "F32 [100, 16]"; a wanted dim < 0 (any length) prints as n. */
static void shape_text(ember_dtype_t dtype, size_t ndim, const int64_t *shape, char *text,
                       size_t length)
{
    int used = snprintf(text, length, "%s [", ember_dtype_name(dtype));
    for (size_t d = 0; d < ndim && used < (int)length; d++) {
        if (shape[d] < 0)
            used += snprintf(text + used, length - (size_t)used, "%sn", d ? ", " : "");
        else
            used += snprintf(text + used, length - (size_t)used, "%s%" PRId64, d ? ", " : "",
                             shape[d]);
    }
    if (used < (int)length)
        snprintf(text + used, length - (size_t)used, "]");
}

/* Tensor @name is @dtype with exactly @ndim dims of @shape (a dim < 0: any
 * length).  *t_p: the tensor, or NULL when it is absent and @optional. */
static ember_status_t check_tensor(const reader_t *r, const char *name, ember_dtype_t dtype,
                                   size_t ndim, const int64_t *shape, int optional,
                                   const ember_st_tensor_t **t_p)
{
    const ember_st_tensor_t *t = ember_st_find(r->file, name);
    char have[160], want[160];
    *t_p = t;
    if (!t)
        return optional ? EMBER_OK : refuse(r, "tensor '%s' is missing", name);
    int ok = t->dtype == dtype && t->ndim == ndim;
    for (size_t d = 0; ok && d < ndim; d++)
        ok = shape[d] < 0 || t->shape[d] == shape[d];
    if (ok)
        return EMBER_OK;
    shape_text(t->dtype, t->ndim, t->shape, have, sizeof(have));
    shape_text(dtype, ndim, shape, want, sizeof(want));
    return refuse(r, "tensor '%s' is %s, not %s", name, have, want);
}

ember_status_t ember_replay_batch_shape(const ember_st_file_t *file, const char *path, int weighted,
                                        uint32_t trainer, uint64_t step, size_t *n_p,
                                        size_t *bags_p, char *err, size_t err_length)
{
    const reader_t r = {.file = file, .path = path, .err = err, .err_length = err_length};
    const ember_st_tensor_t *indices, *offsets, *t;
    char name[4][64];
    static const char *const parts[] = {"indices", "offsets", "targets", "weights"};
    for (int k = 0; k < 4; k++)
        snprintf(name[k], sizeof(name[k]), "t%" PRIu32 ".s%" PRIu64 ".%s", trainer, step, parts[k]);

    const int64_t any[1] = {-1};
    EMBER_CHECK(check_tensor(&r, name[0], EMBER_DTYPE_I64, 1, any, 0, &indices));
    EMBER_CHECK(check_tensor(&r, name[1], EMBER_DTYPE_I64, 1, any, 0, &offsets));
    if (offsets->shape[0] == 0)
        return refuse(&r, "tensor '%s' is I64 [0], not I64 [bags] with bags >= 1", name[1]);
    /* One target per bag, one weight per index. */
    EMBER_CHECK(check_tensor(&r, name[2], EMBER_DTYPE_I64, 1, offsets->shape, 0, &t));
    if (weighted)
        EMBER_CHECK(check_tensor(&r, name[3], EMBER_DTYPE_F32, 1, indices->shape, 0, &t));
    else if (ember_st_find(file, name[3]))
        return refuse(&r, "tensor '%s' is there, but metadata 'per_sample_weights' is '0'",
                      name[3]);
    *n_p = (size_t)indices->shape[0];
    *bags_p = (size_t)offsets->shape[0];
    return EMBER_OK;
}

ember_status_t ember_replay_check_tensors(const ember_st_file_t *file, const char *path,
                                          const ember_replay_info_t *info, char *err,
                                          size_t err_length)
{
    const reader_t r = {.file = file, .path = path, .err = err, .err_length = err_length};
    const int64_t table[2] = {info->rows, info->dim}, weight[2] = {info->classes, info->dim};
    const int64_t bias[1] = {info->classes}, losses[2] = {info->steps, info->trainers};
    static const char *const params[] = {"emb.weight", "fc.weight", "fc.bias"};
    const int64_t *const shapes[] = {table, weight, bias};
    const ember_st_tensor_t *t;
    char name[64];
    size_t n, bags;

    for (int k = 0; k < 3; k++)
        EMBER_CHECK(check_tensor(&r, params[k], EMBER_DTYPE_F32, k < 2 ? 2 : 1, shapes[k], 0, &t));
    /* Step-major, as the steps run: a short file is named at its first
     * missing batch.  The header holds every one that passes, so the loop
     * is bounded by the file, not by the metadata. */
    for (uint64_t s = 0; s < info->steps; s++) {
        for (uint32_t tr = 0; tr < info->trainers; tr++)
            EMBER_CHECK(ember_replay_batch_shape(file, path, (int)info->per_sample_weights, tr, s,
                                                 &n, &bags, err, err_length));
    }
    EMBER_CHECK(check_tensor(&r, "expected.loss", EMBER_DTYPE_F32, 2, losses, 1, &t));
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof(name), "expected.%s", params[k]);
        EMBER_CHECK(check_tensor(&r, name, EMBER_DTYPE_F32, k < 2 ? 2 : 1, shapes[k], 1, &t));
    }
    return EMBER_OK;
}

ember_status_t ember_replay_open(const char *path, ember_st_file_t **file_p,
                                 ember_replay_info_t *info_p, char *err, size_t err_length)
{
    ember_st_file_t *file;
    ember_replay_info_t info;
    ember_status_t status = ember_st_open(path, &file, err, err_length);
    if (status == EMBER_ERR_FORMAT) /* the parser's message does not name the file */
        return ember_status_text(err, err_length, status, "%s: %s", path, err ? err : "");
    if (status != EMBER_OK)
        return status;
    status = ember_replay_info_read(file, path, &info, err, err_length);
    if (status == EMBER_OK)
        status = ember_replay_check_tensors(file, path, &info, err, err_length);
    if (status != EMBER_OK) {
        ember_st_close(file);
        return status;
    }
    *file_p = file;
    *info_p = info;
    return EMBER_OK;
}

ember_status_t ember_replay_info(const char *path, ember_replay_info_t *info_p, char *err,
                                 size_t err_length)
{
    ember_st_file_t *file;
    EMBER_CHECK(ember_replay_open(path, &file, info_p, err, err_length));
    ember_st_close(file);
    return EMBER_OK;
}

ember_status_t ember_replay_read(const ember_st_file_t *file, const char *path, const char *name,
                                 ember_dtype_t dtype, size_t ndim, const int64_t *shape,
                                 void **data_p, char *err, size_t err_length)
{
    const reader_t r = {.file = file, .path = path, .err = err, .err_length = err_length};
    const ember_st_tensor_t *t;
    EMBER_CHECK(check_tensor(&r, name, dtype, ndim, shape, 0, &t));
    ember_status_t status = ember_st_read_copy(file, name, dtype, data_p, NULL);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "%s%stensor '%s': %s", path ? path : "",
                                 path ? ": " : "", name, ember_status_string(status));
    return EMBER_OK;
}
