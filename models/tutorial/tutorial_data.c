/* models/tutorial/tutorial_data: random, synthetic and replayed batches
 * (see tutorial_data.h). */
#include "models/tutorial/tutorial_data.h"

#include "models/tutorial/replay_file.h"

#include <ember/rng.h>
#include <ember/safetensors.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A slot's arrays, grown as batches need. */
typedef struct {
    int64_t *indices, *offsets, *targets;
    float *weights;
    size_t capacity_n, capacity_bags;
} slot_t;

struct tutorial_data {
    tutorial_config_t config;
    uint64_t seed;
    uint32_t trainer;
    ember_st_file_t *file; /* a replay's */
    uint64_t per_epoch;
    slot_t slots[2];
};

ember_status_t tutorial_data_open(const tutorial_config_t *config, uint64_t seed, int trainer,
                                  tutorial_data_t **data_p, char *err, size_t err_length)
{
    tutorial_data_t *data = calloc(1, sizeof(*data));
    if (!data)
        return EMBER_ERR_NO_MEMORY;
    data->config = *config;
    data->seed = seed;
    data->trainer = (uint32_t)trainer;
    data->per_epoch = config->batches;
    if (config->data == TUTORIAL_DATA_REPLAY) {
        /* The file as this trainer reads it, checked whole: the one the job
         * was made from may have been replaced since. */
        ember_replay_info_t info;
        ember_status_t status =
                ember_replay_open(config->replay, &data->file, &info, err, err_length);
        if (status != EMBER_OK) {
            free(data);
            return status;
        }
        data->per_epoch = info.steps;
    }
    *data_p = data;
    return EMBER_OK;
}

void tutorial_data_close(tutorial_data_t *data)
{
    if (!data)
        return;
    ember_st_close(data->file);
    for (int s = 0; s < 2; s++) {
        free(data->slots[s].indices);
        free(data->slots[s].offsets);
        free(data->slots[s].targets);
        free(data->slots[s].weights);
    }
    free(data);
}

uint64_t tutorial_data_per_epoch(const tutorial_data_t *data)
{
    return data->per_epoch;
}

/* Room for @n indices and @bags bags (and the offsets' end). */
static int slot_reserve(slot_t *slot, size_t n, size_t bags)
{
    if (n > slot->capacity_n) {
        free(slot->indices);
        free(slot->weights);
        slot->indices = malloc(n * sizeof(int64_t));
        slot->weights = malloc(n * sizeof(float));
        slot->capacity_n = n;
    }
    if (bags > slot->capacity_bags) {
        free(slot->offsets);
        free(slot->targets);
        slot->offsets = malloc((bags + 1) * sizeof(int64_t));
        slot->targets = malloc(bags * sizeof(int64_t));
        slot->capacity_bags = bags;
    }
    return slot->indices && slot->weights && slot->offsets && slot->targets;
}

/* The tutorial's draw: n in [min, max], bags start every 1-10 indices. */
static ember_status_t generate(tutorial_data_t *data, uint64_t step, slot_t *slot,
                               tutorial_batch_t *batch)
{
    const tutorial_config_t *c = &data->config;
    ember_rng_t rng;
    ember_rng_seed(&rng, data->seed, (uint64_t)data->trainer << 40 | step);
    size_t n = (size_t)ember_rng_int(&rng, c->min_indices, c->max_indices);
    if (!slot_reserve(slot, n ? n : 1, n ? n : 1))
        return EMBER_ERR_NO_MEMORY;
    size_t bags = 0;
    for (size_t start = 0; start < n; start += (size_t)ember_rng_int(&rng, 1, 10))
        slot->offsets[bags++] = (int64_t)start;
    slot->offsets[bags] = (int64_t)n;
    for (size_t b = 0; b < bags; b++) {
        int64_t target = ember_rng_int(&rng, 0, c->classes - 1);
        for (size_t i = (size_t)slot->offsets[b]; i < (size_t)slot->offsets[b + 1]; i++) {
            int64_t row = ember_rng_int(&rng, 0, c->rows - 1);
            if (c->data == TUTORIAL_DATA_SYNTHETIC && ember_rng_uniform(&rng) < 0.8 &&
                target < c->rows) {
                /* mostly rows of the bag's class: row % classes == target */
                int64_t per_class = (c->rows - 1 - target) / c->classes + 1;
                row = target + c->classes * ember_rng_int(&rng, 0, per_class - 1);
            }
            slot->indices[i] = row;
            /* --weights: drawn in [0, 1), as torch.rand (not all 1, which
             * would pool as if there were none) */
            slot->weights[i] = c->weights ? (float)ember_rng_uniform(&rng) : 1.0f;
        }
        slot->targets[b] = target;
    }
    *batch = (tutorial_batch_t){.indices = slot->indices,
                                .n = n,
                                .offsets = slot->offsets,
                                .bags = bags,
                                .targets = slot->targets,
                                .weights = c->weights ? slot->weights : NULL};
    return EMBER_OK;
}

/* Tensor t{T}.s{S}.@part (its shape checked before) copied into @to. */
static void replay_copy(const tutorial_data_t *data, uint64_t step, const char *part, void *to)
{
    char name[64];
    snprintf(name, sizeof(name), "t%u.s%llu.%s", data->trainer, (unsigned long long)step, part);
    const ember_st_tensor_t *t = ember_st_find(data->file, name);
    memcpy(to, t->data, t->nbytes);
}

/* The batch of this trainer at @step, its tensors' shapes checked before
 * they are copied (once, straight into the slot). */
static ember_status_t replay(tutorial_data_t *data, uint64_t step, slot_t *slot,
                             tutorial_batch_t *batch, char *err, size_t err_length)
{
    const int weighted = data->config.weights != 0;
    size_t n, bags;
    EMBER_CHECK(ember_replay_batch_shape(data->file, data->config.replay, weighted, data->trainer,
                                         step, &n, &bags, err, err_length));
    if (!slot_reserve(slot, n ? n : 1, bags))
        return EMBER_ERR_NO_MEMORY;
    replay_copy(data, step, "indices", slot->indices);
    replay_copy(data, step, "offsets", slot->offsets);
    replay_copy(data, step, "targets", slot->targets);
    if (weighted)
        replay_copy(data, step, "weights", slot->weights);
    slot->offsets[bags] = (int64_t)n;
    *batch = (tutorial_batch_t){.indices = slot->indices,
                                .n = n,
                                .offsets = slot->offsets,
                                .bags = bags,
                                .targets = slot->targets,
                                .weights = weighted ? slot->weights : NULL};
    return EMBER_OK;
}

ember_status_t tutorial_data_get(tutorial_data_t *data, uint64_t step, unsigned slot,
                                 tutorial_batch_t *batch, char *err, size_t err_length)
{
    if (data->config.data == TUTORIAL_DATA_REPLAY)
        return replay(data, step, &data->slots[slot & 1], batch, err, err_length);
    return generate(data, step, &data->slots[slot & 1], batch);
}
