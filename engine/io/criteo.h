/*
 * engine/io/criteo: examples of the Criteo click logs' TSV format (Kaggle's
 * train.txt, the Terabyte set's day_N): a label, 13 integer features and 26
 * hexadecimal categorical features, tab-separated, any feature empty.
 *
 * A dense value is log(max(x, 0) + 1) (0 for an empty field), a
 * categorical one int(hex or "0", 16) mod the feature's table rows, as
 * TorchRec's DLRM takes them.  Files are streamed a line at a time
 * (engine/io/lines; a line of at most EMBER_CRITEO_LINE_MAX bytes), never
 * loaded whole; a malformed line is refused naming the file, the line and
 * the field (I1..I13, C1..C26).
 */
#ifndef EMBER_ENGINE_CRITEO_H
#define EMBER_ENGINE_CRITEO_H

#include <ember/criteo.h> /* EMBER_CRITEO_DENSE, EMBER_CRITEO_SPARSE */
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#define EMBER_CRITEO_FIELDS   (1 + EMBER_CRITEO_DENSE + EMBER_CRITEO_SPARSE)
#define EMBER_CRITEO_LINE_MAX 4096 /* a real line is a few hundred bytes */

typedef struct {
    float label; /* 0 or 1 */
    float dense[EMBER_CRITEO_DENSE];
    int64_t sparse[EMBER_CRITEO_SPARSE]; /* each < its table's rows */
} ember_criteo_example_t;

/**
 * One line (@length bytes, no newline; a trailing '\r' is dropped) into
 * @example, feature f's id taken modulo @rows[f] (each >= 1; 0: raw).  Pure.
 * Errors: ERR_FORMAT, naming the field and what is wrong with it in @err.
 */
ember_status_t ember_criteo_parse_line(const char *line, size_t length, const int64_t *rows,
                                       ember_criteo_example_t *example, char *err,
                                       size_t err_length);

/** A dense feature's raw count @x as the model takes it: log(max(x, 0) + 1). */
float ember_criteo_dense_value(int64_t x);

/** A categorical id @id as the model takes it: @id mod @rows (>= 1), or
 * with @rows 0 (a dynamic table's) @id itself, as int64 bits. */
int64_t ember_criteo_sparse_value(uint64_t id, int64_t rows);

/**
 * The shape of a line only (@length bytes, no newline): its count of
 * tab-separated fields, for a reader that passes over other trainers'
 * examples without parsing them.  Pure.  Errors: ERR_FORMAT, in @err.
 */
ember_status_t ember_criteo_check_line(const char *line, size_t length, char *err,
                                       size_t err_length);

typedef struct ember_criteo_reader ember_criteo_reader_t;

/**
 * Open @path for reading examples whose features index tables of @rows[26]
 * rows (copied; each >= 1, or 0: raw ids).  Errors: ERR_IO (the file), ERR_INVALID_PARAM
 * (rows below 0), ERR_NO_MEMORY.
 */
ember_status_t ember_criteo_open(const char *path, const int64_t *rows,
                                 ember_criteo_reader_t **reader_p, char *err, size_t err_length);

/**
 * The next example into @example and *got_p = 1, or *got_p = 0 at the end
 * of the file.  Errors: ERR_FORMAT ("PATH:LINE: ..."; a last line cut short
 * is refused like any other), ERR_IO; the reader stays at the bad line.
 */
ember_status_t ember_criteo_next(ember_criteo_reader_t *reader, ember_criteo_example_t *example,
                                 int *got_p, char *err, size_t err_length);

/**
 * Pass over the next line, checking its shape only (its length, NUL bytes,
 * ember_criteo_check_line): *got_p = 1, or 0 at the end of the file.
 * Errors as ember_criteo_next.
 */
ember_status_t ember_criteo_skip(ember_criteo_reader_t *reader, int *got_p, char *err,
                                 size_t err_length);

/** Lines read so far (the number of the last one). */
uint64_t ember_criteo_line(const ember_criteo_reader_t *reader);

void ember_criteo_close(ember_criteo_reader_t *reader);

#endif
