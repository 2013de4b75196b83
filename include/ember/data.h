/*
 * ember: a trainer's example stream for any feature schema
 * (<ember/schema.h>): click logs read ahead by a thread into a ring of
 * bounded batch buffers and handed out as keyed jagged batches, without a
 * copy.  It is <ember/criteo.h>'s stream for any schema, with multi-hot
 * bags of any length (empty ones included).
 *
 * Sources:
 *   criteo:P1[,P2...]        Criteo TSV (the schema must be Criteo's preset)
 *   criteo-npy:PREFIX[,...]  TorchRec's npy layout (likewise; <ember/criteo.h>
 *                            says what is done to each field of both)
 *   text:P1[,P2...]          the schema's general format: tsv or csv, with a
 *                            header line or without, streamed a line at a time
 *                            (a line of at most EMBER_DATA_LINE_MAX bytes)
 * The files are concatenated in order and their examples numbered i = 0,
 * 1, ...; trainer t of T takes those with i % T == t, in order.  Training
 * (eval 0): a batch of B exactly, and batch s only if the epoch has (s+1)
 * B T examples, so every trainer gives the same number of batches and the
 * rest of the epoch is dropped; eval: every example of its share, the last
 * batch short.  A batch of n == 0 ends an epoch; the next call starts the
 * next one from the first file.
 *
 * MLPerf's synthetic multi-hot (DLRM-dcnv2's reference, multi_hot.py):
 * with multi_hot_sizes, each one-id feature f's row r becomes a bag of
 * sizes[f] rows: r itself, then for j = 1 .. sizes[f] - 1 a row drawn from
 * a generator keyed by (seed, f, r, j) (ember_data_multi_hot_row), uniform
 * over the table or pareto (a = 0.25) as numpy's pareto(0.25) mod rows;
 * the same row always expands to the same bag, on every trainer and in
 * every epoch.
 *
 * Bad input: a line refused names "PATH:LINE: column NAME: what" (npy:
 * "PATH: example ROW: ..."); the batches before the bad example come first,
 * then the error from every later call.
 *
 * Memory: read_ahead + hold batch buffers, each B x (4 + 4 N + 8 sum of
 * the features' bag bounds + 8 K) bytes, allocated at open.
 *
 * Threading: one thread calls a stream (never two at once); the reader
 * thread is the stream's own.  Only take and next block (for the reader);
 * close joins the reader.
 */
#ifndef EMBER_DATA_H
#define EMBER_DATA_H

#include <ember/lookup.h>
#include <ember/schema.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_DATA_READ_AHEAD     4
#define EMBER_DATA_READ_AHEAD_MAX 1024
#define EMBER_DATA_HOLD_MAX       16
#define EMBER_DATA_LINE_MAX       (1 << 20) /* bytes of a text line */

typedef enum {
    EMBER_MULTI_HOT_UNIFORM,
    EMBER_MULTI_HOT_PARETO
} ember_multi_hot_dist_t;

typedef struct {
    const char *source;              /* see above; borrowed during open */
    const ember_schema_t *schema;    /* borrowed during open (copied) */
    uint32_t trainer, trainers;      /* trainer < trainers */
    uint32_t batch;                  /* examples per batch, >= 1 */
    int eval;                        /* 1: every example of the share, the last batch short */
    uint32_t read_ahead;             /* 0: EMBER_DATA_READ_AHEAD; at most _MAX */
    uint32_t hold;                   /* batches held at once; 0: 1; at most EMBER_DATA_HOLD_MAX */
    const uint32_t *multi_hot_sizes; /* [num_sparse] bag sizes >= 1 (one-id features only),
                                      * or NULL: none (copied) */
    ember_multi_hot_dist_t multi_hot_dist;
    uint64_t multi_hot_seed;
} ember_data_config_t;

/* A batch as given: its arrays are the stream's, valid while it is held. */
typedef struct {
    size_t n;               /* examples; 0: the epoch's end */
    const float *labels;    /* [n], 0 or 1 */
    const float *dense;     /* [n][num_dense] */
    ember_kjt_t kjt;        /* num_sparse features, batch_size n, feature-major: offsets
                           * [num_sparse * n + 1], values [num_values]; lengths, weights
                           * NULL: what ember_ebc_lookup reads */
    uint64_t first_example; /* global index of its first example; at an epoch's end the
                               epoch's examples in all */
} ember_data_batch_t;

typedef struct ember_data ember_data_t;

/**
 * Open @config's source for trainer config->trainer: check the config and
 * every file (a text file's header against the schema), allocate the ring
 * and start the reader thread.  *@data_p the caller's (ember_data_close).
 * Blocks while it opens the files.  Errors: ERR_INVALID_PARAM (the config:
 * which field; a Criteo source under another schema; multi-hot sizes on a
 * list feature), ERR_IO / ERR_FORMAT / ERR_UNSUPPORTED naming the file,
 * ERR_NO_MEMORY; nothing is left open.
 */
ember_status_t ember_data_open(const ember_data_config_t *config, ember_data_t **data_p, char *err,
                               size_t err_length);

/** The next batch, held until released (the oldest released first when
 * hold batches are held); errors as ember_criteo_data_next. */
ember_status_t ember_data_next(ember_data_t *data, ember_data_batch_t *batch_p, char *err,
                               size_t err_length);
/** The next batch without releasing one: ERR_INVALID_PARAM when hold are
 * held (an epoch's end counts for none). */
ember_status_t ember_data_take(ember_data_t *data, ember_data_batch_t *batch_p, char *err,
                               size_t err_length);
/** The oldest batch held is the reader's again.  ERR_INVALID_PARAM when
 * none is held.  Never blocks. */
ember_status_t ember_data_release(ember_data_t *data);

/** The examples of one epoch (every trainer's), once known: an npy source
 * at open, others after the reader first reached the end; 0 before.  Never
 * blocks. */
uint64_t ember_data_epoch_examples(const ember_data_t *data);

/** Stop the reader (promptly), join it, free everything; NULL ignored. */
void ember_data_close(ember_data_t *data);

/**
 * MLPerf's synthetic multi-hot: value @j (>= 1) of the bag of row @row of
 * feature @feature of a table of @rows rows.  Pure.  Exactly, in uint64
 * arithmetic (wrapping) with mix(x) splitmix64's step (x += 0x9e3779b97f4a7c15;
 * x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9; x = (x ^ x >> 27) * 0x94d049bb133111eb;
 * x ^ x >> 31):
 *   h = mix(mix(mix(mix(seed) ^ feature) ^ row) ^ j)
 *   uniform: h % rows
 *   pareto:  t = 1 - (h >> 11) * 2^-53 (in (0, 1], double); v = 1 / ((t t)(t t)) - 1;
 *            k = v >= 2^63 ? 2^63 - 1 : (uint64)v; k % rows
 */
int64_t ember_data_multi_hot_row(uint64_t seed, uint32_t feature, int64_t row, uint32_t j,
                                 int64_t rows, ember_multi_hot_dist_t dist);

#ifdef __cplusplus
}
#endif
#endif
