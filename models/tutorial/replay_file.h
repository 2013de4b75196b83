/*
 * models/tutorial/replay_file: a golden-layout replay file (tests/data/golden/README.md)
 * read without trusting it.
 *
 * Every metadata value is parsed at its full width (64 bits, the whole
 * string) and checked against the range below before anything narrows it;
 * every tensor is checked against the dtype and the exact shape the metadata
 * gives it before its data is used.  A bad value is refused naming the file,
 * the key and the value, a bad tensor naming the tensor, its shape and the
 * wanted one ("FILE: metadata 'steps' is '4294967296', not an integer from 1
 * to 2147483648"; "FILE: tensor 'emb.weight' is F32 [99, 16], not F32 [100,
 * 16]").  The tutorial model (its --replay, its data, its check of the
 * result) and the single-process replay (tests/common/replay_local.c) read
 * replay files through these functions only, so they accept and refuse the
 * same files.
 *
 * @path, in every function, only names the file in messages (may be NULL:
 * no name).  Files are borrowed; @err/@err_length (may be NULL/0) receive
 * the cause of an error, which is ERR_FORMAT unless said otherwise.
 */
#ifndef MODELS_TUTORIAL_REPLAY_FILE_H
#define MODELS_TUTORIAL_REPLAY_FILE_H

#include <ember/safetensors.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

/* What a replay file may say: the tutorial model's own flag ranges,
 * and steps few enough that steps x trainers losses stay allocatable. */
#define EMBER_REPLAY_ROWS_MAX     (INT64_MAX / 65536)
#define EMBER_REPLAY_DIM_MAX      65536
#define EMBER_REPLAY_CLASSES_MAX  65536
#define EMBER_REPLAY_TRAINERS_MAX 4096
#define EMBER_REPLAY_STEPS_MAX    (UINT64_C(1) << 31)

/* A replay file's metadata, every field checked. */
typedef struct {
    int64_t rows;                /* [1, EMBER_REPLAY_ROWS_MAX] */
    uint32_t dim;                /* [1, EMBER_REPLAY_DIM_MAX] */
    uint32_t classes;            /* [2, EMBER_REPLAY_CLASSES_MAX] */
    uint32_t trainers;           /* [1, EMBER_REPLAY_TRAINERS_MAX] */
    uint32_t steps;              /* [1, EMBER_REPLAY_STEPS_MAX] */
    uint32_t per_sample_weights; /* 0 or 1 (then mode is sum) */
    uint64_t seed;               /* [0, 2^63); 0 when absent */
    double lr;                   /* finite, >= 0, within a float's range */
    char mode[16];               /* sum, mean or max */
    char sparse_reduce[16];      /* sum (when absent) or mean */
    char optimizer[32];          /* a known optimizer; sgd when absent */
} ember_replay_info_t;

/** The metadata of @file, each value checked.  @info_p written only on
 * success. */
ember_status_t ember_replay_info_read(const ember_st_file_t *file, const char *path,
                                      ember_replay_info_t *info_p, char *err, size_t err_length);

/**
 * Every tensor of the layout against @info: emb.weight [rows, dim],
 * fc.weight [classes, dim], fc.bias [classes] (F32); each trainer's batch of
 * each step (ember_replay_batch_shape); the expected.* tensors present
 * (expected.loss [steps, trainers], the others as the parameters).  Reads
 * only the header: a file that passes holds every tensor a replay reads,
 * so nothing sized by the metadata outgrows the file.
 */
ember_status_t ember_replay_check_tensors(const ember_st_file_t *file, const char *path,
                                          const ember_replay_info_t *info, char *err,
                                          size_t err_length);

/**
 * Open @path and check it whole: its metadata (ember_replay_info_read) and
 * its tensors (ember_replay_check_tensors).  *file_p (closed by the caller
 * with ember_st_close) and *info_p written only on success.
 * Errors: those of ember_st_open too (ERR_IO, ERR_NO_MEMORY).
 */
ember_status_t ember_replay_open(const char *path, ember_st_file_t **file_p,
                                 ember_replay_info_t *info_p, char *err, size_t err_length);

/** ember_replay_open, then close: what @path holds, checked. */
ember_status_t ember_replay_info(const char *path, ember_replay_info_t *info_p, char *err,
                                 size_t err_length);

/**
 * The batch of @trainer at @step: t{T}.s{S}.indices I64 [n], offsets I64
 * [bags] with bags >= 1, targets I64 [bags], and weights F32 [n] when
 * @weighted (none otherwise).  *n_p and *bags_p receive n and bags.  Their
 * contents (indices in range, offsets in order) are the trainer's to check.
 */
ember_status_t ember_replay_batch_shape(const ember_st_file_t *file, const char *path, int weighted,
                                        uint32_t trainer, uint64_t step, size_t *n_p,
                                        size_t *bags_p, char *err, size_t err_length);

/**
 * Copy tensor @name after checking it is @dtype with exactly @ndim dims of
 * @shape.  *data_p receives malloc'd memory the caller frees.
 * Errors: ERR_FORMAT (missing, other dtype or shape), ERR_NO_MEMORY.
 */
ember_status_t ember_replay_read(const ember_st_file_t *file, const char *path, const char *name,
                                 ember_dtype_t dtype, size_t ndim, const int64_t *shape,
                                 void **data_p, char *err, size_t err_length);

#endif
