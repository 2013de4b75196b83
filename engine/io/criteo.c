/* engine/io/criteo: the Criteo TSV reader (see criteo.h). */
#include "engine/io/criteo.h"

#include "engine/io/lines.h"

#include <ember/log.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ember_criteo_reader {
    ember_lines_t *lines;
    int64_t rows[EMBER_CRITEO_SPARSE];
};

/* "I3", "C17": the field's name in Criteo's own column naming. */
static void field_name(size_t f, char *name, size_t length)
{
    if (f == 0)
        snprintf(name, length, "label");
    else if (f <= EMBER_CRITEO_DENSE)
        snprintf(name, length, "I%zu", f);
    else
        snprintf(name, length, "C%zu", f - EMBER_CRITEO_DENSE);
}

static ember_status_t bad_field(size_t f, const char *text, size_t length, const char *why,
                                char *err, size_t err_length)
{
    char name[24];
    field_name(f, name, sizeof(name));
    return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "field %s is '%.*s', %s", name,
                             (int)(length > 40 ? 40 : length), text, why);
}

static ember_status_t take_field(size_t f, const char *text, size_t length, const int64_t *rows,
                                 ember_criteo_example_t *example, char *err, size_t err_length)
{
    if (f == 0) {
        if (length != 1 || (text[0] != '0' && text[0] != '1'))
            return bad_field(f, text, length, "not 0 or 1", err, err_length);
        example->label = (float)(text[0] - '0');
    } else if (f <= EMBER_CRITEO_DENSE) {
        int64_t x = 0;
        if (length && !ember_parse_int64(text, length, &x))
            return bad_field(f, text, length, "not a 64-bit integer", err, err_length);
        example->dense[f - 1] = ember_criteo_dense_value(x);
    } else {
        uint64_t id = 0;
        size_t c = f - 1 - EMBER_CRITEO_DENSE;
        if (length && !ember_parse_hex64(text, length, &id))
            return bad_field(f, text, length, "not 1-16 hexadecimal digits", err, err_length);
        example->sparse[c] = ember_criteo_sparse_value(id, rows[c]);
    }
    return EMBER_OK;
}

float ember_criteo_dense_value(int64_t x)
{
    return (float)log((double)(x > 0 ? x : 0) + 1.0);
}

int64_t ember_criteo_sparse_value(uint64_t id, int64_t rows)
{
    return (int64_t)(rows > 0 ? id % (uint64_t)rows : id);
}

ember_status_t ember_criteo_check_line(const char *line, size_t length, char *err,
                                       size_t err_length)
{
    size_t f = 1;
    for (size_t i = 0; i < length; i++)
        f += line[i] == '\t';
    if (f != EMBER_CRITEO_FIELDS)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%zu tab-separated fields, not %d (label, I1-I13, C1-C26)", f,
                                 EMBER_CRITEO_FIELDS);
    return EMBER_OK;
}

ember_status_t ember_criteo_parse_line(const char *line, size_t length, const int64_t *rows,
                                       ember_criteo_example_t *example, char *err,
                                       size_t err_length)
{
    size_t f = 0, start = 0;
    if (length && line[length - 1] == '\r')
        length--;
    for (size_t i = 0; i <= length; i++) {
        if (i < length && line[i] != '\t')
            continue;
        if (f == EMBER_CRITEO_FIELDS)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "more than %d tab-separated fields", EMBER_CRITEO_FIELDS);
        EMBER_CHECK(take_field(f, line + start, i - start, rows, example, err, err_length));
        f++;
        start = i + 1;
    }
    if (f != EMBER_CRITEO_FIELDS)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%zu tab-separated fields, not %d (label, I1-I13, C1-C26)", f,
                                 EMBER_CRITEO_FIELDS);
    return EMBER_OK;
}

ember_status_t ember_criteo_open(const char *path, const int64_t *rows,
                                 ember_criteo_reader_t **reader_p, char *err, size_t err_length)
{
    for (size_t c = 0; c < EMBER_CRITEO_SPARSE; c++)
        if (rows[c] < 0) /* 0: a dynamic table's, its raw ids */
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "feature C%zu's table has %lld rows", c + 1,
                                     (long long)rows[c]);
    ember_criteo_reader_t *reader = calloc(1, sizeof(*reader));
    if (!reader)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    ember_status_t status =
            ember_lines_open(path, EMBER_CRITEO_LINE_MAX, &reader->lines, err, err_length);
    if (status != EMBER_OK) {
        free(reader);
        return status;
    }
    memcpy(reader->rows, rows, sizeof(reader->rows));
    *reader_p = reader;
    return EMBER_OK;
}

ember_status_t ember_criteo_next(ember_criteo_reader_t *reader, ember_criteo_example_t *example,
                                 int *got_p, char *err, size_t err_length)
{
    const char *line = NULL;
    long length = -1;
    char why[256];
    *got_p = 0;
    EMBER_CHECK(ember_lines_next(reader->lines, &line, &length, err, err_length));
    if (length < 0)
        return EMBER_OK;
    if (ember_criteo_parse_line(line, (size_t)length, reader->rows, example, why, sizeof(why)) !=
        EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%llu: %s",
                                 ember_lines_path(reader->lines),
                                 (unsigned long long)ember_lines_number(reader->lines), why);
    *got_p = 1;
    return EMBER_OK;
}

ember_status_t ember_criteo_skip(ember_criteo_reader_t *reader, int *got_p, char *err,
                                 size_t err_length)
{
    const char *line = NULL;
    long length = -1;
    char why[256];
    *got_p = 0;
    EMBER_CHECK(ember_lines_next(reader->lines, &line, &length, err, err_length));
    if (length < 0)
        return EMBER_OK;
    if (ember_criteo_check_line(line, (size_t)length, why, sizeof(why)) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%llu: %s",
                                 ember_lines_path(reader->lines),
                                 (unsigned long long)ember_lines_number(reader->lines), why);
    *got_p = 1;
    return EMBER_OK;
}

uint64_t ember_criteo_line(const ember_criteo_reader_t *reader)
{
    return ember_lines_number(reader->lines);
}

void ember_criteo_close(ember_criteo_reader_t *reader)
{
    if (!reader)
        return;
    ember_lines_close(reader->lines);
    free(reader);
}
