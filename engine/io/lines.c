/* engine/io/lines: a file's lines, streamed (see lines.h). */
#include "engine/io/lines.h"

#include <ember/log.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (16 * 1024) /* read() at a time */

struct ember_lines {
    int fd;
    char *path;
    uint64_t line;
    size_t line_max;
    size_t start, end; /* the bytes read and not yet taken: buffer[start, end) */
    size_t size;       /* READ_CHUNK + line_max + 1: room for a whole line and more */
    int at_eof;
    char *buffer;
};

ember_status_t ember_lines_open(const char *path, size_t line_max, ember_lines_t **lines_p,
                                char *err, size_t err_length)
{
    ember_lines_t *lines = calloc(1, sizeof(*lines));
    if (!lines || !(lines->path = strdup(path)) ||
        !(lines->buffer = malloc(READ_CHUNK + line_max + 1))) {
        ember_lines_close(lines);
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    }
    lines->fd = -1;
    lines->line_max = line_max;
    lines->size = READ_CHUNK + line_max + 1;
    if ((lines->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        ember_lines_close(lines);
        return ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", path, strerror(e));
    }
    *lines_p = lines;
    return EMBER_OK;
}

/* More of the file after the bytes not yet taken (moved to the front). */
static ember_status_t fill(ember_lines_t *lines, char *err, size_t err_length)
{
    size_t left = lines->end - lines->start;
    memmove(lines->buffer, lines->buffer + lines->start, left);
    lines->start = 0;
    lines->end = left;
    for (;;) {
        ssize_t got = read(lines->fd, lines->buffer + left, lines->size - left);
        if (got > 0)
            lines->end += (size_t)got;
        lines->at_eof = got == 0;
        if (got >= 0)
            return EMBER_OK;
        if (errno != EINTR)
            return ember_status_text(err, err_length, EMBER_ERR_IO, "%s:%llu: %s", lines->path,
                                     (unsigned long long)lines->line + 1, strerror(errno));
    }
}

ember_status_t ember_lines_next(ember_lines_t *lines, const char **line_p, long *length_p,
                                char *err, size_t err_length)
{
    const char *line, *newline;
    size_t avail, max = lines->line_max;
    for (;;) {
        line = lines->buffer + lines->start;
        avail = lines->end - lines->start;
        newline = memchr(line, '\n', avail < max + 1 ? avail : max + 1);
        if (newline || avail > max || lines->at_eof)
            break;
        EMBER_CHECK(fill(lines, err, err_length));
    }
    *length_p = -1;
    if (!newline && avail == 0)
        return EMBER_OK;
    lines->line++;
    if (!newline && avail > max)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s:%llu: longer than %zu bytes", lines->path,
                                 (unsigned long long)lines->line, max);
    size_t length = newline ? (size_t)(newline - line) : avail; /* the last, unended */
    lines->start += length + (newline != NULL);
    if (memchr(line, '\0', length))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s:%llu: a NUL byte",
                                 lines->path, (unsigned long long)lines->line);
    *line_p = line;
    *length_p = (long)length;
    return EMBER_OK;
}

uint64_t ember_lines_number(const ember_lines_t *lines)
{
    return lines->line;
}

const char *ember_lines_path(const ember_lines_t *lines)
{
    return lines->path;
}

void ember_lines_close(ember_lines_t *lines)
{
    if (!lines)
        return;
    if (lines->fd >= 0)
        close(lines->fd);
    free(lines->buffer);
    free(lines->path);
    free(lines);
}

int ember_parse_int64(const char *text, size_t length, int64_t *value_p)
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

int ember_parse_hex64(const char *text, size_t length, uint64_t *value_p)
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

ember_status_t ember_paths_split(const char *spec, const char *list, char ***paths_p,
                                 size_t *count_p, char *err, size_t err_length)
{
    size_t n = 1;
    *count_p = 0;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (!(*paths_p = calloc(n, sizeof(**paths_p))))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    for (const char *p = list;; p++) {
        size_t length = strcspn(p, ",");
        if (length == 0)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "data source '%s': path %zu is empty", spec, *count_p + 1);
        if (!((*paths_p)[*count_p] = strndup(p, length)))
            return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
        ++*count_p;
        p += length;
        if (!*p)
            return EMBER_OK;
    }
}

void ember_paths_free(char **paths, size_t count)
{
    for (size_t i = 0; paths && i < count; i++)
        free(paths[i]);
    free(paths);
}
