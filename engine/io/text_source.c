/* engine/io/text_source: the text: source, a schema's general format (see
 * <ember/schema.h>, <ember/data.h>): tsv or csv (no quoting: a field is
 * the bytes between separators), with a header line or without, streamed
 * a line at a time. */
#include "engine/io/data_source.h"
#include "engine/io/lines.h"
#include "engine/io/schema_private.h"

#include <ember/data.h>
#include <ember/log.h>

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_PREFIX "text:"
#define NUMBER_MAX  64 /* bytes of a dense value spelled out */

typedef struct {
    data_source_t base;
    const ember_schema_t *schema;
    char separator;
    size_t files;
    char **paths;
    size_t file;                            /* the file the stream is in (files: past the last) */
    ember_lines_t *lines;                   /* that file, open, past its header */
    uint16_t map[EMBER_SCHEMA_COLUMNS_MAX]; /* the file's column j is the schema's map[j] */
} text_source_t;

/* "PATH:LINE: column NAME: what": a field refused. */
static ember_status_t refuse_field(const text_source_t *s, const char *column, char *err,
                                   size_t err_length, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

static ember_status_t refuse_field(const text_source_t *s, const char *column, char *err,
                                   size_t err_length, const char *fmt, ...)
{
    char what[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof(what), fmt, args);
    va_end(args);
    return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%" PRIu64 ": column %s: %s",
                             ember_lines_path(s->lines), ember_lines_number(s->lines), column,
                             what);
}

/* At most 40 bytes of a field, for a message. */
#define SHOWN(length) (int)((length) > 40 ? 40 : (length))

static int find_column(const ember_schema_t *schema, const char *name, size_t length)
{
    for (uint32_t c = 0; c < schema->num_columns; c++)
        if (strlen(schema->columns[c].name) == length &&
            memcmp(schema->columns[c].name, name, length) == 0)
            return (int)c;
    return -1;
}

/* The header line: each name a schema column, each schema column once. */
static ember_status_t read_header(text_source_t *s, char *err, size_t err_length)
{
    const ember_schema_t *schema = s->schema;
    const char *line = NULL;
    long length = -1;
    uint8_t seen[EMBER_SCHEMA_COLUMNS_MAX] = {0};
    EMBER_CHECK(ember_lines_next(s->lines, &line, &length, err, err_length));
    if (length < 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s:1: no header line (the schema says header yes)",
                                 ember_lines_path(s->lines));
    size_t n = (size_t)length - (length > 0 && line[length - 1] == '\r'), j = 0;
    for (size_t start = 0; start <= n; j++) {
        const char *end = memchr(line + start, s->separator, n - start);
        size_t field = end ? (size_t)(end - line) - start : n - start;
        char name[80];
        snprintf(name, sizeof(name), "'%.*s'", SHOWN(field), line + start);
        int c = find_column(schema, line + start, field);
        if (c < 0)
            return refuse_field(s, name, err, err_length, "not in the schema");
        if (seen[c]++)
            return refuse_field(s, name, err, err_length, "twice in the header");
        s->map[j] = (uint16_t)c;
        start += field + 1;
    }
    for (uint32_t c = 0; c < schema->num_columns; c++)
        if (!seen[c])
            return refuse_field(s, schema->columns[c].name, err, err_length,
                                "missing from the header");
    return EMBER_OK;
}

/* File @file open (its header read), the stream at its first example. */
static ember_status_t open_file(text_source_t *s, size_t file, char *err, size_t err_length)
{
    ember_lines_close(s->lines);
    s->lines = NULL;
    s->file = file;
    if (file == s->files)
        return EMBER_OK;
    EMBER_CHECK(ember_lines_open(s->paths[file], EMBER_DATA_LINE_MAX, &s->lines, err, err_length));
    return s->schema->header ? read_header(s, err, err_length) : EMBER_OK;
}

static ember_status_t text_rewind(data_source_t *base, char *err, size_t err_length)
{
    return open_file((text_source_t *)base, 0, err, err_length);
}

/* The next line (its '\r' dropped) across the files; *length_p -1 past
 * the last. */
static ember_status_t next_line(text_source_t *s, const char **line_p, long *length_p, char *err,
                                size_t err_length)
{
    *length_p = -1;
    while (s->lines) {
        EMBER_CHECK(ember_lines_next(s->lines, line_p, length_p, err, err_length));
        if (*length_p >= 0) {
            *length_p -= *length_p > 0 && (*line_p)[*length_p - 1] == '\r';
            return EMBER_OK;
        }
        EMBER_CHECK(open_file(s, s->file + 1, err, err_length));
    }
    return EMBER_OK;
}

/* A line's count of fields: the schema's, or refused naming the first
 * column missing or the first past the last. */
static ember_status_t check_fields(const text_source_t *s, const char *line, size_t length,
                                   char *err, size_t err_length)
{
    size_t fields = 1, want = s->schema->num_columns;
    for (size_t i = 0; i < length; i++)
        fields += line[i] == s->separator;
    if (fields < want)
        return refuse_field(s, s->schema->columns[s->map[fields]].name, err, err_length,
                            "missing (%zu fields, not %zu)", fields, want);
    if (fields > want) {
        char column[32];
        snprintf(column, sizeof(column), "%zu", want + 1);
        return refuse_field(s, column, err, err_length, "past the last (%zu fields, not %zu)",
                            fields, want);
    }
    return EMBER_OK;
}

static ember_status_t text_skip(data_source_t *base, uint64_t count, uint64_t *passed_p, char *err,
                                size_t err_length)
{
    text_source_t *s = (text_source_t *)base;
    const char *line;
    long length = 0;
    uint64_t passed = 0;
    for (; passed < count; passed++) {
        EMBER_CHECK(next_line(s, &line, &length, err, err_length));
        if (length < 0)
            break;
        EMBER_CHECK(check_fields(s, line, (size_t)length, err, err_length));
    }
    *passed_p = passed;
    return EMBER_OK;
}

static ember_status_t take_label(const text_source_t *s, const char *name, const char *text,
                                 size_t length, float *label, char *err, size_t err_length)
{
    if (length != 1 || (text[0] != '0' && text[0] != '1'))
        return refuse_field(s, name, err, err_length, "'%.*s', not 0 or 1 (the label)",
                            SHOWN(length), text);
    *label = (float)(text[0] - '0');
    return EMBER_OK;
}

/* A dense field: an integer (at full width) or a finite decimal number. */
static ember_status_t take_dense(const text_source_t *s, const schema_dense_t *d, const char *name,
                                 const char *text, size_t length, float *value, char *err,
                                 size_t err_length)
{
    double x = 0.0;
    int64_t i;
    if (length == 0 && d->empty_refused)
        return refuse_field(s, name, err, err_length, "an empty field where the schema forbids it");
    if (length > 0 && ember_parse_int64(text, length, &i)) {
        x = (double)i;
    } else if (length > 0) {
        char number[NUMBER_MAX + 1], *end;
        int ok = length <= NUMBER_MAX && text[0] != ' ' && text[0] != '\t';
        if (ok) {
            memcpy(number, text, length);
            number[length] = '\0';
            x = strtod(number, &end);
            ok = end == number + length && isfinite(x);
        }
        if (!ok)
            return refuse_field(s, name, err, err_length, "'%.*s' is not a finite number",
                                SHOWN(length), text);
    }
    *value = d->transform == EMBER_DENSE_LOG ? (float)log((x > 0.0 ? x : 0.0) + 1.0) : (float)x;
    if (!isfinite(*value))
        return refuse_field(s, name, err, err_length, "'%.*s' does not fit a float", SHOWN(length),
                            text);
    return EMBER_OK;
}

/* Whether a field holds a separator a list would use. */
static int looks_like_list(const char *text, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if (text[i] == '|' || text[i] == ',' || text[i] == ';' || text[i] == ' ')
            return 1;
    return 0;
}

/* Whether @length bytes are a decimal integer past int64's range (an
 * optional '-', then digits only). */
static int out_of_range(const char *text, size_t length)
{
    size_t sign = length > 0 && text[0] == '-';
    if (length == sign)
        return 0;
    for (size_t i = sign; i < length; i++)
        if (text[i] < '0' || text[i] > '9')
            return 0;
    return 1; /* digits that ember_parse_int64 refused: too many */
}

/* One id of @f's kind, as its row: mod rows for a fixed table, the raw
 * 64-bit key for a dynamic one. */
static ember_status_t take_id(const text_source_t *s, const schema_sparse_t *f, const char *name,
                              const char *text, size_t length, int64_t *row, char *err,
                              size_t err_length)
{
    int64_t v;
    uint64_t u;
    if (f->ids == EMBER_IDS_STRING) {
        u = ember_schema_hash64(text, length);
        *row = (int64_t)(f->dynamic ? u : u % (uint64_t)f->rows);
        return EMBER_OK;
    }
    if (f->ids == EMBER_IDS_INT && ember_parse_int64(text, length, &v)) {
        if (f->dynamic) {
            *row = v;
            return EMBER_OK;
        }
        *row = v % f->rows; /* Python's %: a negative id lands in [0, rows) */
        *row += *row < 0 ? f->rows : 0;
        return EMBER_OK;
    }
    if (f->ids == EMBER_IDS_HEX && ember_parse_hex64(text, length, &u)) {
        *row = (int64_t)(f->dynamic ? u : u % (uint64_t)f->rows);
        return EMBER_OK;
    }
    if (!f->list && looks_like_list(text, length))
        return refuse_field(s, name, err, err_length, "'%.*s': a list where one id is expected",
                            SHOWN(length), text);
    if (f->ids == EMBER_IDS_INT && out_of_range(text, length))
        return refuse_field(s, name, err, err_length,
                            "'%.*s' is out of int64's range (int ids: -2^63 .. 2^63 - 1)",
                            SHOWN(length), text);
    return refuse_field(s, name, err, err_length, "'%.*s' is not %s", SHOWN(length), text,
                        f->ids == EMBER_IDS_INT ? "a decimal integer within 64 bits (int ids)"
                                                : "1 to 16 hexadecimal digits (hex ids)");
}

/* A sparse field: its bag into @ids (room for the bound), its size. */
static ember_status_t take_bag(const text_source_t *s, const schema_sparse_t *f, const char *name,
                               const char *text, size_t length, int64_t *ids, int64_t *size,
                               char *err, size_t err_length)
{
    *size = 0;
    if (length == 0) {
        if (f->empty == EMBER_EMPTY_REFUSE)
            return refuse_field(s, name, err, err_length,
                                "an empty bag where the schema forbids it");
        if (f->empty == EMBER_EMPTY_ZERO)
            ids[(*size)++] = 0;
        return EMBER_OK;
    }
    if (!f->list) {
        *size = 1;
        return take_id(s, f, name, text, length, ids, err, err_length);
    }
    size_t values = 1;
    for (size_t i = 0; i < length; i++)
        values += text[i] == f->list;
    if (values > f->bag_max)
        return refuse_field(s, name, err, err_length,
                            "a bag of %zu values, more than its bound %" PRIu32, values,
                            f->bag_max);
    for (size_t start = 0; start <= length; (*size)++) {
        const char *end = memchr(text + start, f->list, length - start);
        size_t item = end ? (size_t)(end - text) - start : length - start;
        if (item == 0)
            return refuse_field(s, name, err, err_length, "'%.*s': an empty value in the list",
                                SHOWN(length), text);
        EMBER_CHECK(take_id(s, f, name, text + start, item, &ids[*size], err, err_length));
        start += item + 1;
    }
    return EMBER_OK;
}

static ember_status_t take_field(const text_source_t *s, const schema_column_t *c, const char *text,
                                 size_t length, data_example_t *example, char *err,
                                 size_t err_length)
{
    const ember_schema_t *schema = s->schema;
    if (c->kind == SCHEMA_LABEL)
        return take_label(s, c->name, text, length, example->label, err, err_length);
    if (c->kind == SCHEMA_DENSE)
        return take_dense(s, &schema->dense[c->index], c->name, text, length,
                          &example->dense[c->index], err, err_length);
    if (c->kind == SCHEMA_SPARSE)
        return take_bag(s, &schema->sparse[c->index], c->name, text, length, example->ids[c->index],
                        &example->lengths[c->index], err, err_length);
    return EMBER_OK;
}

static ember_status_t text_take(data_source_t *base, data_example_t *example, int *got_p, char *err,
                                size_t err_length)
{
    text_source_t *s = (text_source_t *)base;
    const char *line;
    long length;
    *got_p = 0;
    EMBER_CHECK(next_line(s, &line, &length, err, err_length));
    if (length < 0)
        return EMBER_OK;
    EMBER_CHECK(check_fields(s, line, (size_t)length, err, err_length));
    size_t n = (size_t)length, j = 0;
    for (size_t start = 0; start <= n; j++) {
        const char *end = memchr(line + start, s->separator, n - start);
        size_t field = end ? (size_t)(end - line) - start : n - start;
        EMBER_CHECK(take_field(s, &s->schema->columns[s->map[j]], line + start, field, example, err,
                               err_length));
        start += field + 1;
    }
    *got_p = 1;
    return EMBER_OK;
}

static void text_close(data_source_t *base)
{
    text_source_t *s = (text_source_t *)base;
    if (!s)
        return;
    ember_lines_close(s->lines);
    ember_paths_free(s->paths, s->files);
    free(s);
}

static const data_source_ops_t text_ops = {text_rewind, text_skip, text_take, text_close};

ember_status_t data_source_text(const char *spec, const ember_schema_t *schema,
                                data_source_t **source_p, char *err, size_t err_length)
{
    ember_status_t status;
    text_source_t *s = calloc(1, sizeof(*s));
    if (!s)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    s->base.ops = &text_ops;
    s->schema = schema;
    s->separator = schema_separator(schema);
    for (uint32_t c = 0; c < schema->num_columns; c++)
        s->map[c] = (uint16_t)c;
    EMBER_CHECK_GOTO(ember_paths_split(spec, spec + strlen(TEXT_PREFIX), &s->paths, &s->files, err,
                                       err_length),
                     status, err_close);
    for (size_t i = 0; i < s->files; i++) /* each opened once: a missing one refused now */
        EMBER_CHECK_GOTO(open_file(s, i, err, err_length), status, err_close);
    EMBER_CHECK_GOTO(open_file(s, s->files, err, err_length), status, err_close);
    *source_p = &s->base;
    return EMBER_OK;

err_close:
    text_close(&s->base);
    return status;
}
