/* engine/train/data: tutorial, synthetic and replayed batches. */
#include "engine/train/data.h"

#include "common/rng.h"
#include "engine/io/replay_file.h"
#include "engine/io/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ember_data {
    ember_msg_train_start_t spec;
    ember_st_file_t *file; /* replay */
    uint64_t steps;
    /* the batch being handed out */
    int64_t *indices, *offsets, *targets;
    float *weights;
    size_t capacity_n, capacity_bags;
};

ember_status_t ember_data_create(const ember_msg_train_start_t *spec, ember_data_t **data_p,
                                 char *err, size_t err_length)
{
    ember_data_t *data = calloc(1, sizeof(*data));
    if (!data)
        return EMBER_ERR_NO_MEMORY;
    data->spec = *spec;
    data->spec.replay_path[EMBER_PATH_MAX - 1] = '\0';
    if (spec->config.data == EMBER_DATA_REPLAY) {
        /* The file as this trainer reads it, checked whole: the one the job
         * was made from may have been replaced since. */
        ember_replay_info_t info;
        const char *path = data->spec.replay_path;
        ember_status_t status = ember_replay_open(path, &data->file, &info, err, err_length);
        if (status != EMBER_OK) {
            free(data);
            return status;
        }
        data->steps = info.steps;
    } else {
        data->steps = (uint64_t)spec->config.epochs * spec->config.batches;
    }
    *data_p = data;
    return EMBER_OK;
}

void ember_data_destroy(ember_data_t *data)
{
    if (!data)
        return;
    ember_st_close(data->file);
    free(data->indices);
    free(data->offsets);
    free(data->targets);
    free(data->weights);
    free(data);
}

uint64_t ember_data_steps(const ember_data_t *data)
{
    return data->steps;
}

static int reserve(ember_data_t *data, size_t n, size_t bags)
{
    if (n > data->capacity_n) {
        free(data->indices);
        free(data->weights);
        data->indices = malloc(n * sizeof(int64_t));
        data->weights = malloc(n * sizeof(float));
        data->capacity_n = n;
    }
    if (bags > data->capacity_bags) {
        free(data->offsets);
        free(data->targets);
        data->offsets = malloc(bags * sizeof(int64_t));
        data->targets = malloc(bags * sizeof(int64_t));
        data->capacity_bags = bags;
    }
    return data->indices && data->weights && data->offsets && data->targets;
}

/* The tutorial's draw: n in [min, max], bags start every 1-10 indices. */
static ember_status_t generate(ember_data_t *data, uint64_t step, ember_batch_t *batch)
{
    const ember_msg_train_start_t *spec = &data->spec;
    ember_rng_t rng;
    ember_rng_seed(&rng, spec->config.seed, (uint64_t)spec->trainer << 40 | step);
    size_t n = (size_t)ember_rng_int(&rng, spec->config.min_indices, spec->config.max_indices);
    if (!reserve(data, n ? n : 1, n ? n : 1))
        return EMBER_ERR_NO_MEMORY;
    size_t bags = 0;
    for (size_t start = 0; start < n; start += (size_t)ember_rng_int(&rng, 1, 10))
        data->offsets[bags++] = (int64_t)start;
    for (size_t b = 0; b < bags; b++) {
        size_t end = b + 1 < bags ? (size_t)data->offsets[b + 1] : n;
        int64_t target = ember_rng_int(&rng, 0, spec->config.classes - 1);
        for (size_t i = (size_t)data->offsets[b]; i < end; i++) {
            int64_t row = ember_rng_int(&rng, 0, spec->config.rows - 1);
            if (spec->config.data == EMBER_DATA_SYNTHETIC && ember_rng_uniform(&rng) < 0.8 &&
                target < spec->config.rows) {
                /* mostly rows of the bag's class: row % classes == target */
                int64_t per_class = (spec->config.rows - 1 - target) / spec->config.classes + 1;
                row = target + spec->config.classes * ember_rng_int(&rng, 0, per_class - 1);
            }
            data->indices[i] = row;
            /* --weights: drawn in [0, 1), as torch.rand (not all 1, which
             * would pool as if there were none) */
            data->weights[i] =
                    spec->config.per_sample_weights ? (float)ember_rng_uniform(&rng) : 1.0f;
        }
        data->targets[b] = target;
    }
    *batch = (ember_batch_t){.indices = data->indices,
                             .n = n,
                             .offsets = data->offsets,
                             .bags = bags,
                             .targets = data->targets,
                             .weights = spec->config.per_sample_weights ? data->weights : NULL,
                             .n_weights = spec->config.per_sample_weights ? n : 0};
    return EMBER_OK;
}

/* The batch of this trainer at @step, its tensors' shapes checked before
 * they are copied. */
static ember_status_t replay(ember_data_t *data, uint64_t step, ember_batch_t *batch, char *err,
                             size_t err_length)
{
    char name[64];
    void *values[4] = {0};
    static const char *const parts[] = {"indices", "offsets", "targets", "weights"};
    static const ember_dtype_t types[] = {EMBER_DTYPE_I64, EMBER_DTYPE_I64, EMBER_DTYPE_I64,
                                          EMBER_DTYPE_F32};
    int weighted = data->spec.config.per_sample_weights != 0;
    size_t wanted = weighted ? 4 : 3, n, bags;
    ember_status_t status =
            ember_replay_batch_shape(data->file, data->spec.replay_path, weighted,
                                     data->spec.trainer, step, &n, &bags, err, err_length);

    for (size_t k = 0; status == EMBER_OK && k < wanted; k++) {
        snprintf(name, sizeof(name), "t%u.s%llu.%s", data->spec.trainer, (unsigned long long)step,
                 parts[k]);
        status = ember_st_read_copy(data->file, name, types[k], &values[k], NULL);
        if (status != EMBER_OK)
            ember_status_text(err, err_length, status, "%s: tensor %s: %s", data->spec.replay_path,
                              name, ember_status_string(status));
    }
    if (status == EMBER_OK && !reserve(data, n ? n : 1, bags))
        status = EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK) {
        memcpy(data->indices, values[0], n * sizeof(int64_t));
        memcpy(data->offsets, values[1], bags * sizeof(int64_t));
        memcpy(data->targets, values[2], bags * sizeof(int64_t));
        if (weighted)
            memcpy(data->weights, values[3], n * sizeof(float));
        *batch = (ember_batch_t){.indices = data->indices,
                                 .n = n,
                                 .offsets = data->offsets,
                                 .bags = bags,
                                 .targets = data->targets,
                                 .weights = weighted ? data->weights : NULL,
                                 .n_weights = weighted ? n : 0};
    }
    for (size_t k = 0; k < 4; k++)
        free(values[k]);
    return status;
}

ember_status_t ember_data_next(ember_data_t *data, uint64_t step, ember_batch_t *batch_p, char *err,
                               size_t err_length)
{
    if (step >= data->steps)
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE, "step %llu of %llu",
                                 (unsigned long long)step, (unsigned long long)data->steps);
    if (data->spec.config.data == EMBER_DATA_REPLAY)
        return replay(data, step, batch_p, err, err_length);
    return generate(data, step, batch_p);
}
