/*
 * ember engine: single-process reference of the synchronous hybrid step.
 *
 * Replays a golden run (layout: tests/data/golden/README.md) in one process: at
 * each step every trainer runs EmbeddingBag -> Linear -> cross entropy and
 * its backward against the same parameters; then the dense gradients are
 * averaged over trainers (what the allreduce does), the sparse row gradients
 * are summed or averaged over trainers (per the file's `sparse_reduce`), and
 * SGD updates both.  This is the oracle the distributed engine is compared
 * with; its agreement with the files proves the ops reproduce PyTorch.
 */
#ifndef EMBER_ENGINE_REPLAY_LOCAL_H
#define EMBER_ENGINE_REPLAY_LOCAL_H

#include "engine/io/safetensors.h"

#include <ember/dtype.h>
#include <ember/status.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a replay produces; every array is owned by the result (freed by
 * ember_replay_result_cleanup). */
typedef struct {
    size_t rows, dim, classes, trainers, steps;
    float *losses;    /* [steps, trainers], loss before each step's update */
    float *emb;       /* [rows, dim] final embedding table */
    float *fc_weight; /* [classes, dim] final dense weight */
    float *fc_bias;   /* [classes] final dense bias */
} ember_replay_result_t;

/* How the replay keeps its table and reads its replies; a zeroed struct (or
 * NULL) is the plain fp32 replay. */
typedef struct {
    /* EMBER_DTYPE_F32, or EMBER_DTYPE_F16 as a PS of fp16 rows keeps it
     * (initial rows rounded, every update computed in fp32 and rounded): the
     * oracle of `ember-train --table-dtype fp16`.  result->emb holds the
     * widened rows. */
    ember_dtype_t emb_dtype;
    /* Each pooled sum (or max) rounded to fp16 before the dense layer, a mean
     * divided after, as one PS answering with EMBER_LOOKUP_HALF_REPLY gives
     * it (`--reply-dtype fp16`, one PS; with more, each shard's part is
     * rounded on its own). */
    int half_replies;
} ember_replay_opts_t;

/**
 * Run the golden run in @golden (borrowed; only its inputs are read: initial
 * parameters, batches and metadata, never the expected.* tensors) as @opts
 * says (NULL: the defaults, a zeroed ember_replay_opts_t).
 * @result_p is filled only on success; @err/@err_length (may be NULL/0) receive
 * the cause of a failure (which tensor, trainer, step).
 * The file is checked as ember-train checks it (models/tutorial/replay_file.h), with
 * the same messages, before anything is sized from it.
 * Errors: ERR_INVALID_PARAM (an emb_dtype other than F32 and F16),
 * ERR_FORMAT (missing/mis-shaped tensor, bad metadata, invalid batch),
 * ERR_UNSUPPORTED (a known optimizer other than sgd), ERR_NUMERIC,
 * ERR_NO_MEMORY.
 */
ember_status_t ember_replay_local(const ember_st_file_t *golden, const ember_replay_opts_t *opts,
                                  ember_replay_result_t *result_p, char *err, size_t err_length);

/** Free the arrays of a result and zero it.  Safe on a zeroed result. */
void ember_replay_result_cleanup(ember_replay_result_t *result);

#ifdef __cplusplus
}
#endif
#endif
