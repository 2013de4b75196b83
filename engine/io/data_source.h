/*
 * engine/io/data_source: the examples of a data source one after another
 * in file order (the files concatenated), as the reader thread of
 * engine/io/data takes them: behind a small table of calls, one kind per
 * source prefix (criteo:, criteo-npy: in criteo_source.c; text: in
 * text_source.c).  Not thread-safe: one thread uses a source.
 */
#ifndef EMBER_ENGINE_DATA_SOURCE_H
#define EMBER_ENGINE_DATA_SOURCE_H

#include <ember/schema.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

/* Where one example goes: the source writes each field in place. */
typedef struct {
    float *label;
    float *dense;        /* [num_dense] */
    int64_t *const *ids; /* [num_sparse]: room for the feature's bag bound */
    int64_t *lengths;    /* [num_sparse]: the bags' sizes */
} data_example_t;

typedef struct data_source data_source_t;

typedef struct {
    /** Back to the first example of the first file.  Errors: ERR_IO. */
    ember_status_t (*rewind)(data_source_t *source, char *err, size_t err_length);
    /** Pass over up to @count examples (their lines' shape checked only);
     * *passed_p how many there were before the end.  Errors "PATH:LINE: ...". */
    ember_status_t (*skip)(data_source_t *source, uint64_t count, uint64_t *passed_p, char *err,
                           size_t err_length);
    /** The next example whole into @example, *got_p = 1; 0 past the end. */
    ember_status_t (*take)(data_source_t *source, data_example_t *example, int *got_p, char *err,
                           size_t err_length);
    void (*close)(data_source_t *source);
} data_source_ops_t;

struct data_source {
    const data_source_ops_t *ops;
    uint64_t examples; /* an epoch's, when known at open (npy); else 0 */
};

/**
 * A criteo: or criteo-npy: source (@spec whole) under @schema, which must
 * be Criteo's preset (its rows taken).  Errors: criteo_source_open's.
 */
ember_status_t data_source_criteo(const char *spec, const ember_schema_t *schema,
                                  data_source_t **source_p, char *err, size_t err_length);

/**
 * A text: source (@spec whole) in @schema's format; @schema borrowed for
 * the source's life.  Every file opened once now (its header checked).
 * Errors: ERR_INVALID_PARAM (the spec), ERR_IO, ERR_FORMAT ("PATH:1:
 * column NAME: ..."), ERR_NO_MEMORY.
 */
ember_status_t data_source_text(const char *spec, const ember_schema_t *schema,
                                data_source_t **source_p, char *err, size_t err_length);

#endif
