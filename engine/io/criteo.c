/* engine/io/criteo: the Criteo TSV reader (see criteo.h). */
#include "engine/io/criteo.h"

#include <ember/log.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (16 * 1024) /* read() at a time */

struct ember_criteo_reader {
    int fd;
    char *path;
    int64_t rows[EMBER_CRITEO_SPARSE];
    uint64_t line;
    size_t start, end; /* the bytes read and not yet taken: buffer[start, end) */
    int at_eof;
    char buffer[READ_CHUNK + EMBER_CRITEO_LINE_MAX + 1]; /* room for a whole line and more */
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

/* A decimal integer at full width: an optional '-' and 1-19 digits. */
static int parse_int(const char *text, size_t length, int64_t *value_p)
{
    size_t i = length > 0 && text[0] == '-';
    uint64_t value = 0, limit = i ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (i == length)
        return 0;
    for (; i < length; i++) {
        if (text[i] < '0' || text[i] > '9')
            return 0;
        uint64_t digit = (uint64_t)(text[i] - '0');
        if (value > (limit - digit) / 10)
            return 0;
        value = value * 10 + digit;
    }
    *value_p = text[0] == '-' ? (int64_t)(0 - value) : (int64_t)value;
    return 1;
}

/* 1-16 hexadecimal digits. */
static int parse_hex(const char *text, size_t length, uint64_t *value_p)
{
    uint64_t value = 0;
    if (length == 0 || length > 16)
        return 0;
    for (size_t i = 0; i < length; i++) {
        char c = text[i];
        int digit = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
        if (digit < 0)
            return 0;
        value = value << 4 | (uint64_t)digit;
    }
    *value_p = value;
    return 1;
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
        if (length && !parse_int(text, length, &x))
            return bad_field(f, text, length, "not a 64-bit integer", err, err_length);
        example->dense[f - 1] = ember_criteo_dense_value(x);
    } else {
        uint64_t id = 0;
        size_t c = f - 1 - EMBER_CRITEO_DENSE;
        if (length && !parse_hex(text, length, &id))
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
    return (int64_t)(id % (uint64_t)rows);
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
        if (rows[c] < 1)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "feature C%zu's table has %lld rows", c + 1,
                                     (long long)rows[c]);
    ember_criteo_reader_t *reader = calloc(1, sizeof(*reader));
    if (!reader || !(reader->path = strdup(path))) {
        free(reader);
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    }
    if ((reader->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        ember_criteo_close(reader);
        return ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", path, strerror(e));
    }
    memcpy(reader->rows, rows, sizeof(reader->rows));
    *reader_p = reader;
    return EMBER_OK;
}

/* More of the file after the bytes not yet taken (moved to the front). */
static ember_status_t fill(ember_criteo_reader_t *reader, char *err, size_t err_length)
{
    size_t left = reader->end - reader->start;
    memmove(reader->buffer, reader->buffer + reader->start, left);
    reader->start = 0;
    reader->end = left;
    for (;;) {
        ssize_t got = read(reader->fd, reader->buffer + left, sizeof(reader->buffer) - left);
        if (got > 0)
            reader->end += (size_t)got;
        reader->at_eof = got == 0;
        if (got >= 0)
            return EMBER_OK;
        if (errno != EINTR)
            return ember_status_text(err, err_length, EMBER_ERR_IO, "%s:%llu: %s", reader->path,
                                     (unsigned long long)reader->line + 1, strerror(errno));
    }
}

/* The next line in the buffer (*line_p, *length_p without its newline), or
 * *length_p = -1 at the end; ERR_FORMAT for one longer than
 * EMBER_CRITEO_LINE_MAX or holding a NUL byte (a C string would end
 * there).  The line stays valid until the next read. */
static ember_status_t read_line(ember_criteo_reader_t *reader, const char **line_p, long *length_p,
                                char *err, size_t err_length)
{
    const char *line, *newline;
    size_t avail;
    for (;;) {
        line = reader->buffer + reader->start;
        avail = reader->end - reader->start;
        newline = memchr(line, '\n',
                         avail < EMBER_CRITEO_LINE_MAX + 1 ? avail : EMBER_CRITEO_LINE_MAX + 1);
        if (newline || avail > EMBER_CRITEO_LINE_MAX || reader->at_eof)
            break;
        EMBER_CHECK(fill(reader, err, err_length));
    }
    *length_p = -1;
    if (!newline && avail == 0)
        return EMBER_OK;
    reader->line++;
    if (!newline && avail > EMBER_CRITEO_LINE_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%llu: longer than %d bytes",
                                 reader->path, (unsigned long long)reader->line,
                                 EMBER_CRITEO_LINE_MAX);
    size_t length = newline ? (size_t)(newline - line) : avail; /* the last, unended */
    reader->start += length + (newline != NULL);
    if (memchr(line, '\0', length))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%llu: a NUL byte",
                                 reader->path, (unsigned long long)reader->line);
    *line_p = line;
    *length_p = (long)length;
    return EMBER_OK;
}

ember_status_t ember_criteo_next(ember_criteo_reader_t *reader, ember_criteo_example_t *example,
                                 int *got_p, char *err, size_t err_length)
{
    const char *line = NULL;
    long length = -1;
    char why[256];
    *got_p = 0;
    EMBER_CHECK(read_line(reader, &line, &length, err, err_length));
    if (length < 0)
        return EMBER_OK;
    if (ember_criteo_parse_line(line, (size_t)length, reader->rows, example, why, sizeof(why)) !=
        EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%llu: %s", reader->path,
                                 (unsigned long long)reader->line, why);
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
    EMBER_CHECK(read_line(reader, &line, &length, err, err_length));
    if (length < 0)
        return EMBER_OK;
    if (ember_criteo_check_line(line, (size_t)length, why, sizeof(why)) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%llu: %s", reader->path,
                                 (unsigned long long)reader->line, why);
    *got_p = 1;
    return EMBER_OK;
}

uint64_t ember_criteo_line(const ember_criteo_reader_t *reader)
{
    return reader->line;
}

void ember_criteo_close(ember_criteo_reader_t *reader)
{
    if (!reader)
        return;
    if (reader->fd >= 0)
        close(reader->fd);
    free(reader->path);
    free(reader);
}
