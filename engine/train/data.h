/*
 * engine/train/data: where a trainer's batches come from.
 *   tutorial  - the PyTorch tutorial's random bags (20-50 indices, bags of
 *               1-10, uniform rows and targets; per-sample weights, when
 *               asked, uniform in [0, 1))
 *   synthetic - the same shapes with a learnable target (a row's class is
 *               row % classes; a bag mostly holds rows of its target class)
 *   replay    - the batches stored in a golden-layout safetensors file
 */
#ifndef EMBER_ENGINE_DATA_H
#define EMBER_ENGINE_DATA_H

#include "engine/wire/protocol.h"

#include <stddef.h>
#include <stdint.h>

/* One batch; arrays owned by the data source, valid until the next call. */
typedef struct {
    const int64_t *indices;
    size_t n;
    const int64_t *offsets;
    size_t bags;
    const int64_t *targets; /* [bags] */
    const float *weights;   /* [n_weights] or NULL */
    size_t n_weights;       /* validated against n by the trainer */
} ember_batch_t;

typedef struct ember_data ember_data_t;

/** Open the source @spec describes for trainer spec->trainer.  Errors name
 * the file or tensor (in @err). */
ember_status_t ember_data_create(const ember_msg_train_start_t *spec, ember_data_t **data_p,
                                 char *err, size_t err_length);
void ember_data_destroy(ember_data_t *data);

/** Steps this trainer runs in all. */
uint64_t ember_data_steps(const ember_data_t *data);

/** The batch of global step @step (0-based). */
ember_status_t ember_data_next(ember_data_t *data, uint64_t step, ember_batch_t *batch_p, char *err,
                               size_t err_length);

#endif
