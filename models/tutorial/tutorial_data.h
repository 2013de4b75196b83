/*
 * models/tutorial/tutorial_data: a trainer's batches, by step:
 *   random    - the PyTorch tutorial's bags (20-50 indices, a bag every 1-10,
 *               uniform rows and targets; per-sample weights, when asked,
 *               uniform in [0, 1))
 *   synthetic - the same shapes with a learnable target (a row's class is
 *               row % classes; a bag mostly holds rows of its target class)
 *   replay    - the batches stored in a golden file (replay_file.h)
 * Every batch is a function of (seed, trainer, step), so any step can be
 * had at any time: a batch lives in one of two slots (the step's and the
 * next one's are held together) until its slot is asked for again.
 */
#ifndef MODELS_TUTORIAL_TUTORIAL_DATA_H
#define MODELS_TUTORIAL_TUTORIAL_DATA_H

#include "models/tutorial/tutorial.h"

#include <stddef.h>
#include <stdint.h>

/* One batch; arrays the data's, valid until its slot is asked for again. */
typedef struct {
    const int64_t *indices;
    size_t n;
    const int64_t *offsets; /* [bags + 1]: bag b is indices[offsets[b] .. offsets[b + 1]) */
    size_t bags;
    const int64_t *targets; /* [bags] */
    const float *weights;   /* [n], or NULL */
} tutorial_batch_t;

typedef struct tutorial_data tutorial_data_t;

/** The batches of @config for @trainer, drawn from @seed (a replay: its
 * file, checked whole).  Errors name the file or tensor. */
ember_status_t tutorial_data_open(const tutorial_config_t *config, uint64_t seed, int trainer,
                                  tutorial_data_t **data_p, char *err, size_t err_length);
void tutorial_data_close(tutorial_data_t *data);

/** Steps an epoch (--batches, or a replay file's steps). */
uint64_t tutorial_data_per_epoch(const tutorial_data_t *data);

/** The batch of job step @step into slot @slot (0 or 1).  Errors: a
 * replay's tensor (its shape), ERR_NO_MEMORY. */
ember_status_t tutorial_data_get(tutorial_data_t *data, uint64_t step, unsigned slot,
                                 tutorial_batch_t *batch, char *err, size_t err_length);

#endif
