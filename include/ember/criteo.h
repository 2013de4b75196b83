/*
 * ember: the Criteo click logs as one trainer's example stream (DLRM's
 * data), parsed ahead by a reader thread into a ring of bounded batch
 * buffers, handed out without a copy.
 *
 * Which examples: the files are concatenated in order and their examples
 * numbered i = 0, 1, ... (all trainers counted); trainer t of T takes those
 * with i % T == t, in order.  Training (eval == 0): its step s is its next
 * B, and batch s is given only if the epoch has at least (s+1)*B*T examples,
 * so every trainer gives the same number of batches, floor(N / (B*T)), and
 * the rest of the epoch is dropped (the reader reads past its own last
 * example of the round to know).  Eval: every example of its share, the last
 * batch short, so the T trainers cover each example once.  After the last
 * batch of an epoch a batch of n == 0 says the epoch ended (its
 * first_example: the epoch's examples in all); the next call starts the
 * next epoch from the first file, the same examples again.
 *
 * Sources and what is done to each field:
 *   criteo:P1[,P2...]  TSV (Kaggle's train.txt, the Terabyte set's day_N: a
 *       label, 13 integer and 26 hexadecimal fields, tab-separated): label 0/1; dense
 *       log(max(x, 0) + 1), empty 0; categorical int(hex or "0", 16) mod
 *       rows[f].  Every reader reads every line (it counts them) and checks
 *       each line's shape (its length, NUL bytes, 40 fields); it parses only
 *       its own examples' fields, so a bad field in another trainer's example
 *       is that trainer's error, a bad shape everyone's.
 *   criteo-npy:PREFIX[,PREFIX...]  TorchRec's preprocessed layout
 *       (BinaryCriteoUtils.tsv_to_npys, torchrec/datasets/criteo.py), three
 *       mmap'ed files per prefix, their rows (examples) the same:
 *     PREFIX_dense.npy   (N, 13) <f4: TorchRec's log already taken, so the
 *         values are used as they are (checked finite).  TorchRec writes
 *         log(x - m + 2), m the file's smallest raw dense value (before
 *         2025: log(x + 3)), not the TSV path's log(max(x, 0) + 1): the raw
 *         counts cannot be recovered, and a model trained on these files by
 *         TorchRec sees exactly these values.  An integer dtype instead
 *         (raw counts, e.g. the array tsv_to_npys holds before its log) is
 *         transformed as TSV: log(max(x, 0) + 1).
 *     PREFIX_sparse.npy  (N, 26) <i8 (<i4 before late 2024, and after the
 *         contiguous/shuffle scripts): the raw int(hex or "0", 16) ids, NOT
 *         yet taken mod the tables (TorchRec's loader does `sparse % hashes`
 *         itself); taken mod rows[f] here as NumPy's % does, so a
 *         non-negative id gives what the TSV path gives and a negative one
 *         (older TorchRec wrapped ids past 2^31 into int32) lands in range.
 *     PREFIX_labels.npy  (N, 1) <i4 (or (N,); any integer, bool or float
 *         dtype): must be 0 or 1 (the Kaggle test set's filler -1 refused).
 *   The same TSV converted by tsv_to_npys thus gives the same labels and
 *   rows through either path, and the dense values TorchRec trains on.
 *
 * Memory: read_ahead + hold batch buffers (the ready ones and those the
 * trainer holds), 472 bytes per example each (<ember/data.h>'s: ids, their
 * offsets, dense values, label), allocated at open; TSV files
 * are streamed a line at a time, npy files mapped (page cache, no copy).
 *
 * Holding: a trainer that keeps the batch of step s while it takes step
 * s + 1's (its lookups leave ahead) sets hold 2 and takes each batch with
 * ember_criteo_data_take, releasing the oldest with
 * ember_criteo_data_release once step s is done: the batch goes from the
 * ring straight into the lookup's request, never copied (every batch's
 * ids lie as a keyed jagged batch's values must, a short one's too).  An
 * epoch's end (n == 0) is never held: taking it occupies no hold and it is
 * not released, so a trainer holding the epoch's last batch takes the end
 * and then the next epoch's first batch with hold 2.
 *
 * Threading: one trainer thread calls a stream (open, take, next, release,
 * close: never two at once); the reader thread is the stream's own.  Only
 * take and next block (for the reader); close joins the reader.
 */
#ifndef EMBER_CRITEO_H
#define EMBER_CRITEO_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_CRITEO_DENSE          13   /* integer features */
#define EMBER_CRITEO_SPARSE         26   /* categorical ones: one table each */
#define EMBER_CRITEO_READ_AHEAD     4    /* read_ahead 0's batches */
#define EMBER_CRITEO_READ_AHEAD_MAX 1024 /* more is refused: the ring is allocated whole */
#define EMBER_CRITEO_HOLD_MAX       16

typedef struct {
    /* "criteo:P1[,P2...]" (TSV) or "criteo-npy:PREFIX[,PREFIX...]"
     * (PREFIX_dense.npy, PREFIX_sparse.npy, PREFIX_labels.npy); borrowed
     * during open.  A path holding a comma cannot be named. */
    const char *source;
    uint32_t trainer, trainers; /* trainer < trainers */
    uint32_t batch;             /* examples per batch, >= 1 */
    const int64_t *rows; /* [EMBER_CRITEO_SPARSE] each table's rows (>= 1): categorical value mod
                            rows[f]; copied */
    int eval;            /* 1: every example of this trainer's share, the last batch may be short;
                            0: training */
    uint32_t read_ahead; /* batches the reader thread may hold ready (bounded memory); 0:
                            EMBER_CRITEO_READ_AHEAD; at most EMBER_CRITEO_READ_AHEAD_MAX */
    uint32_t hold;       /* batches the trainer may hold at once (taken, not released); 0: 1;
                            at most EMBER_CRITEO_HOLD_MAX */
} ember_criteo_data_config_t;

/* A batch as given: its arrays are the stream's (the ring's buffer), valid
 * while it is held (until released; see ember_criteo_data_next), never
 * written by the caller.  An epoch's end (n == 0) has nothing to read. */
typedef struct {
    size_t n;                                   /* examples in this batch */
    const float *labels;                        /* [n], 0 or 1 */
    const float *dense;                         /* [n][EMBER_CRITEO_DENSE] */
    const int64_t *sparse[EMBER_CRITEO_SPARSE]; /* feature-major: sparse[f][i] is example i's row of
                                                   table f; back to back, sparse[f] = sparse[0] +
                                                   f * n (also for a short batch): sparse[0] is the
                                                   values of a KJT of one id a bag, n * 26 long */
    uint64_t first_example; /* global index (in the files, counting all trainers) of its first
                               example; at an epoch's end the epoch's examples in all */
} ember_criteo_batch_t;

typedef struct ember_criteo_data ember_criteo_data_t;

/**
 * Open @config's source for trainer config->trainer: check the config and
 * every file (each TSV file opened once; the npy arrays mapped, their
 * headers, dtypes and rows checked against each other), allocate the ring
 * and start the reader thread.  @config and its strings borrowed for the
 * call (rows copied); *@data_p the caller's (ember_criteo_data_close).
 * @err/@err_length (may be NULL/0) get one line naming what is wrong;
 * nothing is logged.  Blocks while it opens the files.  Errors:
 * ERR_INVALID_PARAM (the config: which field), ERR_IO / ERR_FORMAT /
 * ERR_UNSUPPORTED naming the file, ERR_NO_MEMORY; nothing is left open.
 */
ember_status_t ember_criteo_data_open(const ember_criteo_data_config_t *config,
                                      ember_criteo_data_t **data_p, char *err, size_t err_length);

/**
 * The next batch into *@batch_p (the caller's struct; the arrays the
 * stream's), held until released: when @config's hold batches are held
 * the oldest is released first (so with hold 1, a batch is valid until
 * the next call).  OK with batch->n > 0; OK with n == 0 at the end of an
 * epoch (held by nobody; the next call starts the next epoch from the
 * first file again).  A malformed line or an unreadable file: an error
 * naming the file and line (TSV, "PATH:LINE: ...") or the file and example
 * (npy, "PATH: example ROW: ...", ROW 0-based in that file) in @err (may
 * be NULL/0; nothing logged).  The batches read before the bad example
 * come first; the error (ERR_FORMAT, ERR_IO, ERR_NO_MEMORY, as the reader
 * met it) then comes from this and every later call.  Blocks only until
 * the reader thread has a batch ready.  Not thread-safe: one trainer
 * thread calls it.
 */
ember_status_t ember_criteo_data_next(ember_criteo_data_t *data, ember_criteo_batch_t *batch_p,
                                      char *err, size_t err_length);

/** The next batch as ember_criteo_data_next, but never releasing one:
 * ERR_INVALID_PARAM ("N batches held") when hold batches are held already
 * (an epoch's end counts for none); else its errors. */
ember_status_t ember_criteo_data_take(ember_criteo_data_t *data, ember_criteo_batch_t *batch_p,
                                      char *err, size_t err_length);

/** The oldest batch held is released (its arrays are the reader's again;
 * an epoch's end was never held).  ERR_INVALID_PARAM when none is held.
 * Never blocks. */
ember_status_t ember_criteo_data_release(ember_criteo_data_t *data);

/** Stop the reader thread (promptly, even mid-file: it checks between
 * examples and while it waits for a free buffer), join it and free
 * everything, the batches held included; NULL is ignored. */
void ember_criteo_data_close(ember_criteo_data_t *data);

#ifdef __cplusplus
}
#endif
#endif
