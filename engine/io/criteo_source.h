/*
 * engine/io/criteo_source: the examples of a Criteo data source one after
 * another in file order (the files concatenated), for the reader thread of
 * engine/io/criteo_data.  Two kinds (criteo_data.h says what each file holds
 * and what is done to it):
 *   criteo:P1[,P2...]            TSV files, streamed a line at a time
 *   criteo-npy:PREFIX[,...]      TorchRec's npy layout, mmap'ed, checked once
 * Not thread-safe: one thread uses a source.
 */
#ifndef EMBER_ENGINE_CRITEO_SOURCE_H
#define EMBER_ENGINE_CRITEO_SOURCE_H

#include "engine/io/criteo.h"

#include <ember/status.h>

#include <stdint.h>

typedef struct criteo_source criteo_source_t;

/**
 * Open the files @spec names (every one opened once now, so a missing one
 * is refused here; npy files are mapped and their headers checked against
 * each other), features taken modulo @rows[26] (copied, each >= 1; 0: a
 * dynamic table's, its raw ids).  The
 * source stands before its first example: call criteo_source_rewind.
 * Errors: ERR_INVALID_PARAM (the spec), ERR_IO, ERR_FORMAT, ERR_UNSUPPORTED
 * (naming the file), ERR_NO_MEMORY.
 */
ember_status_t criteo_source_open(const char *spec, const int64_t *rows, criteo_source_t **source_p,
                                  char *err, size_t err_length);

/** Back to the first example of the first file.  Errors: ERR_IO (a TSV
 * file that can no longer be opened). */
ember_status_t criteo_source_rewind(criteo_source_t *source, char *err, size_t err_length);

/**
 * Pass over up to @count examples, TSV lines checked for their shape only
 * (ember_criteo_skip); *passed_p how many there were before the end of the
 * last file.  Errors: ERR_FORMAT / ERR_IO, "PATH:LINE: ...".
 */
ember_status_t criteo_source_skip(criteo_source_t *source, uint64_t count, uint64_t *passed_p,
                                  char *err, size_t err_length);

/**
 * The next example whole into @example, *got_p = 1; *got_p = 0 past the
 * last file.  Errors: ERR_FORMAT "PATH:LINE: ..." (TSV) or
 * "PATH: example ROW: ..." (npy, ROW 0-based in that file), ERR_IO.
 */
ember_status_t criteo_source_take(criteo_source_t *source, ember_criteo_example_t *example,
                                  int *got_p, char *err, size_t err_length);

/** Close its files; NULL is ignored. */
void criteo_source_close(criteo_source_t *source);

#endif
