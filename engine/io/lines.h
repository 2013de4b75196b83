/*
 * engine/io/lines: a text file streamed a line at a time (read 16 KiB at a
 * time into one buffer allocated at open, never the file whole), and the
 * full-width integer fields the click-log readers share (engine/io/criteo,
 * engine/io/text_source).
 */
#ifndef EMBER_ENGINE_LINES_H
#define EMBER_ENGINE_LINES_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ember_lines ember_lines_t;

/** Open @path for lines of at most @line_max bytes (its newline not
 * counted).  Errors: ERR_IO ("PATH: why"), ERR_NO_MEMORY. */
ember_status_t ember_lines_open(const char *path, size_t line_max, ember_lines_t **lines_p,
                                char *err, size_t err_length);

/**
 * The next line (*line_p, *length_p bytes without its newline), or
 * *length_p = -1 at the end of the file; valid until the next call.
 * Errors: ERR_FORMAT ("PATH:LINE: longer than N bytes", "PATH:LINE: a NUL
 * byte": a C string would end there), ERR_IO ("PATH:LINE: why").
 */
ember_status_t ember_lines_next(ember_lines_t *lines, const char **line_p, long *length_p,
                                char *err, size_t err_length);

/** Lines read so far (the number of the last one). */
uint64_t ember_lines_number(const ember_lines_t *lines);
const char *ember_lines_path(const ember_lines_t *lines);

/** NULL is ignored. */
void ember_lines_close(ember_lines_t *lines);

/**
 * The comma-separated paths of @list (a data source's, @spec the whole of
 * it for errors), each non-empty, into *@paths_p (*@count_p of them; free
 * with ember_paths_free, also after an error).  Errors: ERR_INVALID_PARAM
 * ("data source 'SPEC': path N is empty"), ERR_NO_MEMORY.
 */
ember_status_t ember_paths_split(const char *spec, const char *list, char ***paths_p,
                                 size_t *count_p, char *err, size_t err_length);
void ember_paths_free(char **paths, size_t count);

/** A decimal integer at full width: an optional '-' and digits within
 * int64_t.  1 when @length bytes at @text are one. */
int ember_parse_int64(const char *text, size_t length, int64_t *value_p);

/** 1-16 hexadecimal digits (either case).  1 when @length bytes are. */
int ember_parse_hex64(const char *text, size_t length, uint64_t *value_p);

#endif
