/*
 * fuzz_train_start: the master's TRAIN_START as a trainer takes it
 * (ember_wire_train_start_unpack, as engine/train/trainer.c's handler takes it), then what the
 * trainer does with an accepted spec before the network: its dense
 * optimizer, its data source and its first batches, checked as each step
 * checks them (engine/train/data.c, ember_bag_validate).
 *
 * Input: [trainer index][the request as it came].
 *
 * Invariants: an accepted request is exactly the spec and its dense
 * parameters; a spec it accepts can be trained: its data source opens, its
 * first batches are drawn and pass the step's checks, the optimizer is
 * made, nothing crashes.  A replay or DLRM spec names files, which a
 * fuzzer does not open; a batch of more than 2^16 indices (the master's to
 * ask) is not drawn.  A DLRM spec's sources are NUL-terminated.
 */
#include "engine/ops/optimizer.h"
#include "engine/train/data.h"
#include "engine/wire/codec.h"
#include "fuzz/fuzz_input.h"

#include <ember/embedding_bag.h>

#define FUZZ_MAX_INDICES (1u << 16)
#define FUZZ_STEPS       3

/* An MLP's parameters from @in inputs through @layers widths. */
static unsigned __int128 mlp_count(uint64_t in, const uint32_t *sizes, uint32_t layers)
{
    unsigned __int128 total = 0;
    for (uint32_t l = 0; l < layers; l++) {
        total += (unsigned __int128)sizes[l] * in + sizes[l];
        in = sizes[l];
    }
    return total;
}

/* The dense parameters the spec's layers have, counted apart: DLRM's two
 * MLPs (OverArch over the dense vector and the tables' pairwise dots), or
 * the tutorial's layers. */
static unsigned __int128 dense_count(const ember_msg_train_start_t *spec)
{
    if (spec->config.model == EMBER_MODEL_DLRM) {
        const ember_dlrm_spec_t *d = &spec->config.dlrm;
        uint64_t features = (uint64_t)d->tables + 1;
        return mlp_count(EMBER_DLRM_DENSE, d->dense_sizes, d->dense_layers) +
               mlp_count(spec->config.dim + features * (features - 1) / 2, d->over_sizes,
                         d->over_layers);
    }
    unsigned __int128 total = 0;
    uint64_t in = spec->config.dim;
    for (uint32_t l = 0; l <= spec->config.nhidden; l++) {
        uint64_t out = l < spec->config.nhidden ? spec->config.hidden[l] : spec->config.classes;
        total += (unsigned __int128)out * in + out;
        in = out;
    }
    return total;
}

static void draw_batches(const ember_msg_train_start_t *spec)
{
    ember_data_t *data = NULL;
    char err[512];

    if (spec->config.data == EMBER_DATA_REPLAY || spec->config.data == EMBER_DATA_CRITEO ||
        spec->config.max_indices > FUZZ_MAX_INDICES)
        return; /* files, which a fuzzer does not open */
    if (ember_data_create(spec, &data, err, sizeof(err)) != EMBER_OK)
        return;
    uint64_t steps = ember_data_steps(data);
    for (uint64_t step = 0; step < steps && step < FUZZ_STEPS; step++) {
        ember_batch_t batch;
        if (ember_data_next(data, step, &batch, err, sizeof(err)) != EMBER_OK)
            break;
        ember_bag_batch_t check = {.indices = batch.indices,
                                   .n = batch.n,
                                   .offsets = batch.offsets,
                                   .bags = batch.bags,
                                   .weights = batch.weights,
                                   .n_weights = batch.n_weights};
        ember_bag_opts_t opts = {.mode = (ember_bag_mode_t)spec->config.mode,
                                 .padding_idx = spec->config.padding_idx};
        (void)ember_bag_validate(&check, &opts, spec->config.rows, err, sizeof(err));
    }
    ember_data_destroy(data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ember_wire_train_start_view_t start;
    const ember_msg_train_start_t *spec = &start.spec;
    char err[256];

    if (size < 1)
        return 0;
    int index = data[0] % 4;
    /* The request in a buffer of its own size: a read past it is seen. */
    uint8_t *request = malloc(size - 1 ? size - 1 : 1);
    FUZZ_CHECK(request, "out of memory");
    memcpy(request, data + 1, size - 1);
    err[0] = '\0';
    ember_status_t status =
            ember_wire_train_start_unpack(request, size - 1, index, &start, err, sizeof(err));
    size_t nparams = start.nparams;
    if (status != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "TRAIN_START refused without its cause");
        free(request);
        return 0;
    }
    FUZZ_CHECK(spec->trainer == (uint32_t)index, "trainer %d took trainer %u's start", index,
               spec->trainer);
    FUZZ_CHECK(dense_count(spec) == nparams &&
                       size - 1 == sizeof(*spec) + nparams * sizeof(float) &&
                       start.params == request + sizeof(*spec),
               "TRAIN_START of %zu bytes taken with %zu dense parameters", size - 1, nparams);
    FUZZ_CHECK(memchr(spec->replay_path, '\0', sizeof(spec->replay_path)),
               "the replay path is not NUL-terminated");
    FUZZ_CHECK(spec->config.model != EMBER_MODEL_DLRM ||
                       (memchr(spec->config.dlrm.data, '\0', EMBER_SOURCE_MAX) &&
                        memchr(spec->config.dlrm.eval, '\0', EMBER_SOURCE_MAX)),
               "a DLRM source is not NUL-terminated");
    ember_opt_config_t dense = spec->config.optimizer;
    if (dense.kind == EMBER_OPT_ROWWISE_ADAGRAD) /* as trainer_setup */
        ember_opt_config_default(EMBER_OPT_ADAGRAD, dense.lr, &dense);
    ember_opt_t *optimizer = NULL;
    if (ember_opt_create(&dense, 1, nparams, EMBER_OPT_DENSE, &optimizer) == EMBER_OK)
        ember_opt_destroy(optimizer);
    draw_batches(spec);
    free(request);
    return 0;
}
