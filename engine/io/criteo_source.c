/* engine/io/criteo_source: a Criteo source's examples in order (see
 * criteo_source.h; what each array holds: criteo_data.h). */
#include "engine/io/criteo_source.h"

#include "engine/io/data_source.h"
#include "engine/io/lines.h"
#include "engine/io/npy.h"

#include <ember/log.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy arrays are read as little-endian, the host's order"
#endif

#define TSV_PREFIX "criteo:"
#define NPY_PREFIX "criteo-npy:"

/* One npy prefix's three arrays, of @examples rows each. */
typedef struct {
    ember_npy_t *dense, *sparse, *labels;
    uint64_t examples;
} npy_day_t;

struct criteo_source {
    int npy;
    size_t files;
    char **paths;    /* TSV: the files; npy: the prefixes */
    npy_day_t *days; /* npy: one per prefix */
    int64_t rows[EMBER_CRITEO_SPARSE];
    size_t file;                   /* the file the stream is in (files: past the last) */
    ember_criteo_reader_t *reader; /* TSV: that file, open */
    uint64_t row;                  /* npy: the next row of days[file] */
};

/* Each TSV file opened once, so one that is missing is refused at open. */
static ember_status_t check_tsv_files(criteo_source_t *s, char *err, size_t err_length)
{
    for (size_t i = 0; i < s->files; i++) {
        ember_criteo_reader_t *reader;
        EMBER_CHECK(ember_criteo_open(s->paths[i], s->rows, &reader, err, err_length));
        ember_criteo_close(reader);
    }
    return EMBER_OK;
}

static int dtype_in(ember_npy_dtype_t dtype, const ember_npy_dtype_t *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == dtype)
            return 1;
    return 0;
}

/* PREFIX_@part.npy mapped and checked: a dtype of @dtypes, @columns columns
 * (0: a vector (N,) or a column (N, 1)). */
static ember_status_t open_part(const char *prefix, const char *part, size_t columns,
                                const ember_npy_dtype_t *dtypes, size_t ndtypes,
                                const char *allowed, ember_npy_t **npy_p, char *err,
                                size_t err_length)
{
    char path[4096], shape[96];
    if (snprintf(path, sizeof(path), "%s_%s.npy", prefix, part) >= (int)sizeof(path))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "npy prefix '%.64s...' too long", prefix);
    EMBER_CHECK(ember_npy_open(path, npy_p, err, err_length));
    const ember_npy_header_t *h = ember_npy_header(*npy_p);
    ember_npy_shape_text(h, shape, sizeof(shape));
    if (!dtype_in(h->dtype, dtypes, ndtypes))
        return ember_status_text(err, err_length, EMBER_ERR_UNSUPPORTED,
                                 "%s: dtype %s, not one of %s", path, h->descr, allowed);
    int fits = columns ? h->ndim == 2 && h->shape[1] == columns
                       : h->ndim == 1 || (h->ndim == 2 && h->shape[1] == 1);
    if (!fits)
        return columns ? ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                           "%s: shape %s, not (N, %zu)", path, shape, columns)
                       : ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                           "%s: shape %s, not (N, 1) or (N,)", path, shape);
    return EMBER_OK;
}

static const ember_npy_dtype_t dense_dtypes[] = {EMBER_NPY_F4, EMBER_NPY_I1, EMBER_NPY_I2,
                                                 EMBER_NPY_I4, EMBER_NPY_I8, EMBER_NPY_U1,
                                                 EMBER_NPY_U2, EMBER_NPY_U4};
static const ember_npy_dtype_t sparse_dtypes[] = {EMBER_NPY_I1, EMBER_NPY_I2, EMBER_NPY_I4,
                                                  EMBER_NPY_I8, EMBER_NPY_U1, EMBER_NPY_U2,
                                                  EMBER_NPY_U4, EMBER_NPY_U8};
static const ember_npy_dtype_t label_dtypes[] = {
        EMBER_NPY_BOOL, EMBER_NPY_I1, EMBER_NPY_I2, EMBER_NPY_I4, EMBER_NPY_I8, EMBER_NPY_U1,
        EMBER_NPY_U2,   EMBER_NPY_U4, EMBER_NPY_U8, EMBER_NPY_F4, EMBER_NPY_F8};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A prefix's three arrays, their rows the same. */
static ember_status_t open_day(const char *prefix, npy_day_t *day, char *err, size_t err_length)
{
    EMBER_CHECK(open_part(prefix, "dense", EMBER_CRITEO_DENSE, dense_dtypes, COUNT(dense_dtypes),
                          "<f4 (TorchRec's, taken as it is) or an integer type (raw counts)",
                          &day->dense, err, err_length));
    EMBER_CHECK(open_part(prefix, "sparse", EMBER_CRITEO_SPARSE, sparse_dtypes,
                          COUNT(sparse_dtypes), "the integer types", &day->sparse, err,
                          err_length));
    EMBER_CHECK(open_part(prefix, "labels", 0, label_dtypes, COUNT(label_dtypes),
                          "bool, the integer types, <f4 and <f8", &day->labels, err, err_length));
    day->examples = ember_npy_header(day->dense)->shape[0];
    ember_npy_t *others[2] = {day->sparse, day->labels};
    for (size_t i = 0; i < 2; i++) {
        uint64_t n = ember_npy_header(others[i])->shape[0];
        if (n != day->examples)
            return ember_status_text(
                    err, err_length, EMBER_ERR_FORMAT, "%s: %" PRIu64 " examples, %s has %" PRIu64,
                    ember_npy_path(others[i]), n, ember_npy_path(day->dense), day->examples);
    }
    return EMBER_OK;
}

static ember_status_t open_days(criteo_source_t *s, char *err, size_t err_length)
{
    if (!(s->days = calloc(s->files, sizeof(*s->days))))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < s->files; i++)
        EMBER_CHECK(open_day(s->paths[i], &s->days[i], err, err_length));
    return EMBER_OK;
}

ember_status_t criteo_source_open(const char *spec, const int64_t *rows, criteo_source_t **source_p,
                                  char *err, size_t err_length)
{
    ember_status_t status;
    int npy = strncmp(spec, NPY_PREFIX, strlen(NPY_PREFIX)) == 0;
    if (!npy && strncmp(spec, TSV_PREFIX, strlen(TSV_PREFIX)) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "data source '%s' is neither " TSV_PREFIX
                                 "PATH[,PATH...] nor " NPY_PREFIX "PREFIX[,PREFIX...]",
                                 spec);
    criteo_source_t *s = calloc(1, sizeof(*s));
    if (!s)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    s->npy = npy;
    memcpy(s->rows, rows, sizeof(s->rows));
    EMBER_CHECK_GOTO(ember_paths_split(spec, spec + strlen(npy ? NPY_PREFIX : TSV_PREFIX),
                                       &s->paths, &s->files, err, err_length),
                     status, err_close);
    EMBER_CHECK_GOTO(npy ? open_days(s, err, err_length) : check_tsv_files(s, err, err_length),
                     status, err_close);
    s->file = s->files;
    *source_p = s;
    return EMBER_OK;

err_close:
    criteo_source_close(s);
    return status;
}

ember_status_t criteo_source_rewind(criteo_source_t *s, char *err, size_t err_length)
{
    s->file = 0;
    s->row = 0;
    if (s->npy)
        return EMBER_OK;
    ember_criteo_close(s->reader);
    s->reader = NULL;
    return ember_criteo_open(s->paths[0], s->rows, &s->reader, err, err_length);
}

/* The next TSV line, parsed whole (@example) or its shape checked (NULL),
 * across the files; *got_p = 0 past the last. */
static ember_status_t tsv_next(criteo_source_t *s, ember_criteo_example_t *example, int *got_p,
                               char *err, size_t err_length)
{
    *got_p = 0;
    while (s->reader) {
        EMBER_CHECK(example ? ember_criteo_next(s->reader, example, got_p, err, err_length)
                            : ember_criteo_skip(s->reader, got_p, err, err_length));
        if (*got_p)
            return EMBER_OK;
        ember_criteo_close(s->reader);
        s->reader = NULL;
        if (++s->file < s->files)
            EMBER_CHECK(ember_criteo_open(s->paths[s->file], s->rows, &s->reader, err, err_length));
    }
    return EMBER_OK;
}

/* Past the npy files' ends that leave no row. */
static void npy_settle(criteo_source_t *s)
{
    while (s->file < s->files && s->row == s->days[s->file].examples) {
        s->file++;
        s->row = 0;
    }
}

ember_status_t criteo_source_skip(criteo_source_t *s, uint64_t count, uint64_t *passed_p, char *err,
                                  size_t err_length)
{
    uint64_t passed = 0;
    int got = 1;
    for (; s->npy && passed < count && s->file < s->files; npy_settle(s)) {
        uint64_t left = s->days[s->file].examples - s->row, step = count - passed;
        step = step < left ? step : left;
        s->row += step;
        passed += step;
    }
    for (; !s->npy && passed < count && got; passed += (uint64_t)got)
        EMBER_CHECK(tsv_next(s, NULL, &got, err, err_length));
    *passed_p = passed;
    return EMBER_OK;
}

static int64_t load_signed(const uint8_t *p, ember_npy_dtype_t dtype)
{
    int8_t i1;
    int16_t i2;
    int32_t i4;
    int64_t i8;
    if (dtype == EMBER_NPY_I1) {
        memcpy(&i1, p, sizeof(i1));
        return i1;
    }
    if (dtype == EMBER_NPY_I2) {
        memcpy(&i2, p, sizeof(i2));
        return i2;
    }
    if (dtype == EMBER_NPY_I4) {
        memcpy(&i4, p, sizeof(i4));
        return i4;
    }
    memcpy(&i8, p, sizeof(i8));
    return i8;
}

static uint64_t load_unsigned(const uint8_t *p, ember_npy_dtype_t dtype)
{
    uint16_t u2;
    uint32_t u4;
    uint64_t u8;
    if (dtype == EMBER_NPY_BOOL || dtype == EMBER_NPY_U1)
        return p[0];
    if (dtype == EMBER_NPY_U2) {
        memcpy(&u2, p, sizeof(u2));
        return u2;
    }
    if (dtype == EMBER_NPY_U4) {
        memcpy(&u4, p, sizeof(u4));
        return u4;
    }
    memcpy(&u8, p, sizeof(u8));
    return u8;
}

static int is_signed(ember_npy_dtype_t dtype)
{
    return dtype == EMBER_NPY_I1 || dtype == EMBER_NPY_I2 || dtype == EMBER_NPY_I4 ||
           dtype == EMBER_NPY_I8;
}

/* Element @i of @npy's array: its address. */
static const uint8_t *element(const ember_npy_t *npy, uint64_t i)
{
    return (const uint8_t *)ember_npy_data(npy) + i * ember_npy_header(npy)->itemsize;
}

/* An id mod @rows as NumPy's % takes it (TorchRec's `sparse % hashes`): a
 * negative one (an id past 2^31 that older TorchRec wrapped into int32)
 * lands in [0, rows) too. */
static int64_t npy_id(const uint8_t *p, ember_npy_dtype_t dtype, int64_t rows)
{
    if (!is_signed(dtype))
        return ember_criteo_sparse_value(load_unsigned(p, dtype), rows);
    int64_t v = load_signed(p, dtype);
    if (v >= 0 || rows == 0) /* rows 0: a dynamic table's raw id */
        return ember_criteo_sparse_value((uint64_t)v, rows);
    return rows - 1 - (int64_t)((uint64_t)(-(v + 1)) % (uint64_t)rows);
}

static ember_status_t npy_label(const ember_npy_t *npy, uint64_t row, float *label_p, char *err,
                                size_t err_length)
{
    ember_npy_dtype_t dtype = ember_npy_header(npy)->dtype;
    const uint8_t *p = element(npy, row);
    double value;
    float f4;
    if (dtype == EMBER_NPY_F8)
        memcpy(&value, p, 8);
    else if (dtype == EMBER_NPY_F4)
        value = (memcpy(&f4, p, 4), f4);
    else
        value = is_signed(dtype) ? (double)load_signed(p, dtype) : (double)load_unsigned(p, dtype);
    if (value != 0.0 && value != 1.0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: example %" PRIu64 ": label %g, not 0 or 1%s",
                                 ember_npy_path(npy), row, value,
                                 value == -1.0 ? " (-1: the Kaggle test set's filler)" : "");
    *label_p = (float)value;
    return EMBER_OK;
}

/* TorchRec's float32 dense values as they are (finite), or raw counts
 * transformed as the TSV reader does. */
static ember_status_t npy_dense(const ember_npy_t *npy, uint64_t row, float *dense, char *err,
                                size_t err_length)
{
    ember_npy_dtype_t dtype = ember_npy_header(npy)->dtype;
    for (size_t f = 0; f < EMBER_CRITEO_DENSE; f++) {
        const uint8_t *p = element(npy, row * EMBER_CRITEO_DENSE + f);
        if (dtype != EMBER_NPY_F4) {
            dense[f] = ember_criteo_dense_value(
                    is_signed(dtype) ? load_signed(p, dtype) : (int64_t)load_unsigned(p, dtype));
            continue;
        }
        memcpy(&dense[f], p, 4);
        if (!isfinite(dense[f]))
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "%s: example %" PRIu64 ": I%zu is %g, not finite",
                                     ember_npy_path(npy), row, f + 1, (double)dense[f]);
    }
    return EMBER_OK;
}

ember_status_t criteo_source_take(criteo_source_t *s, ember_criteo_example_t *example, int *got_p,
                                  char *err, size_t err_length)
{
    if (!s->npy)
        return tsv_next(s, example, got_p, err, err_length);
    npy_settle(s);
    *got_p = 0;
    if (s->file == s->files)
        return EMBER_OK;
    const npy_day_t *day = &s->days[s->file];
    EMBER_CHECK(npy_label(day->labels, s->row, &example->label, err, err_length));
    EMBER_CHECK(npy_dense(day->dense, s->row, example->dense, err, err_length));
    ember_npy_dtype_t dtype = ember_npy_header(day->sparse)->dtype;
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++)
        example->sparse[f] =
                npy_id(element(day->sparse, s->row * EMBER_CRITEO_SPARSE + f), dtype, s->rows[f]);
    s->row++;
    *got_p = 1;
    return EMBER_OK;
}

void criteo_source_close(criteo_source_t *s)
{
    if (!s)
        return;
    ember_criteo_close(s->reader);
    for (size_t i = 0; s->days && i < s->files; i++) {
        ember_npy_close(s->days[i].dense);
        ember_npy_close(s->days[i].sparse);
        ember_npy_close(s->days[i].labels);
    }
    ember_paths_free(s->paths, s->files);
    free(s->days);
    free(s);
}

/* ------------------------------------------- as engine/io/data's source */

typedef struct {
    data_source_t base;
    criteo_source_t *source;
} criteo_data_source_t;

static ember_status_t criteo_rewind(data_source_t *s, char *err, size_t err_length)
{
    return criteo_source_rewind(((criteo_data_source_t *)s)->source, err, err_length);
}

static ember_status_t criteo_skip(data_source_t *s, uint64_t count, uint64_t *passed_p, char *err,
                                  size_t err_length)
{
    return criteo_source_skip(((criteo_data_source_t *)s)->source, count, passed_p, err,
                              err_length);
}

static ember_status_t criteo_take(data_source_t *s, data_example_t *example, int *got_p, char *err,
                                  size_t err_length)
{
    ember_criteo_example_t ex;
    EMBER_CHECK(
            criteo_source_take(((criteo_data_source_t *)s)->source, &ex, got_p, err, err_length));
    if (!*got_p)
        return EMBER_OK;
    *example->label = ex.label;
    memcpy(example->dense, ex.dense, sizeof(ex.dense));
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++) {
        example->ids[f][0] = ex.sparse[f];
        example->lengths[f] = 1;
    }
    return EMBER_OK;
}

static void criteo_close(data_source_t *s)
{
    criteo_source_close(((criteo_data_source_t *)s)->source);
    free(s);
}

static const data_source_ops_t criteo_ops = {criteo_rewind, criteo_skip, criteo_take, criteo_close};

ember_status_t data_source_criteo(const char *spec, const ember_schema_t *schema,
                                  data_source_t **source_p, char *err, size_t err_length)
{
    int64_t rows[EMBER_CRITEO_SPARSE];
    ember_schema_sparse_t f;
    for (uint32_t i = 0; i < EMBER_CRITEO_SPARSE; i++) {
        ember_schema_sparse(schema, i, &f);
        rows[i] = ember_schema_dynamic(schema, i) ? 0 : f.rows; /* 0: raw ids */
    }
    criteo_data_source_t *s = calloc(1, sizeof(*s));
    if (!s)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    ember_status_t status = criteo_source_open(spec, rows, &s->source, err, err_length);
    if (status != EMBER_OK) {
        free(s);
        return status;
    }
    s->base.ops = &criteo_ops;
    for (size_t i = 0; s->source->npy && i < s->source->files; i++)
        s->base.examples += s->source->days[i].examples;
    *source_p = &s->base;
    return EMBER_OK;
}
