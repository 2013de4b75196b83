/*
 * fuzz_train_start: the master's TRAIN_START as a trainer takes it
 * (train_start_unpack, as tools/ember-train/trainer.c's handler takes it),
 * then what the trainer makes of an accepted one before the network: the
 * driver's settings (train_settings_parse), the model's description (the
 * model's parse hook), its dense parameters against the message's count,
 * the dense optimizer, and (the tutorial model's drawn data) its first
 * batches, checked as each step checks them (ember_bag_validate).
 *
 * Input: [trainer index in bits 0-1, PS count - 1 in bits 2-3][the request
 * as it came], in a job of 4 trainers.
 *
 * Invariants: an accepted request is exactly its head, its four texts (no
 * NUL inside, each padded to 8 bytes) and its dense parameters, for this
 * trainer of this job; its settings and description, when they parse, can
 * be trained: the optimizer is made, the tutorial's data source opens and
 * its first batches are drawn and checked, nothing crashes.  A replay or
 * DLRM description names files, which a fuzzer does not open; a batch of
 * more than 2^16 indices (the master's to ask) is not drawn.
 */
#include "fuzz/fuzz_input.h"
#include "models/tutorial/tutorial_data.h"
#include "tools/ember-train/messages.h"
#include "tools/ember-train/settings.h"

#include <ember/embedding_bag.h>
#include <ember/optimizer.h>

#define FUZZ_TRAINERS    4
#define FUZZ_MAX_INDICES (1u << 16)
#define FUZZ_STEPS       3

static size_t padded(size_t n)
{
    return n + (8 - n % 8) % 8;
}

/* The tutorial's first batches of an accepted description. */
static void draw_batches(const tutorial_config_t *c, uint64_t seed, int trainer)
{
    tutorial_data_t *data = NULL;
    char err[512];
    if (c->data == TUTORIAL_DATA_REPLAY || c->max_indices > FUZZ_MAX_INDICES)
        return; /* a file, which a fuzzer does not open */
    FUZZ_CHECK(tutorial_data_open(c, seed, trainer, &data, err, sizeof(err)) == EMBER_OK,
               "the tutorial's drawn data did not open: %s", err);
    for (uint64_t step = 0; step < FUZZ_STEPS; step++) {
        tutorial_batch_t batch;
        FUZZ_CHECK(tutorial_data_get(data, step, (unsigned)step, &batch, err, sizeof(err)) ==
                           EMBER_OK,
                   "a drawn batch failed: %s", err);
        ember_bag_batch_t check = {.indices = batch.indices,
                                   .n = batch.n,
                                   .offsets = batch.offsets,
                                   .bags = batch.bags,
                                   .weights = batch.weights,
                                   .n_weights = batch.weights ? batch.n : 0};
        ember_bag_opts_t opts = {.mode = (ember_bag_mode_t)c->mode, .padding_idx = c->padding_idx};
        (void)ember_bag_validate(&check, &opts, c->rows, err, sizeof(err));
    }
    tutorial_data_close(data);
}

/* An accepted request's settings and description, as the trainer takes them. */
static void take_spec(const train_start_t *start, int index)
{
    ember_train_settings_t settings = {.device = "cpu", .ps_device = "cpu"};
    const ember_model_ops_t *model;
    char err[512];
    if (train_settings_parse(start->settings, &model, &settings, err, sizeof(err)) != EMBER_OK)
        return;
    FUZZ_CHECK(model, "settings parsed without a model");
    void *config = calloc(1, model->config_size);
    FUZZ_CHECK(config, "out of memory");
    if (model->parse(config, start->config, err, sizeof(err)) == EMBER_OK &&
        model->params(config) == start->head.nparams) {
        ember_opt_config_t dense = settings.optimizer;
        if (dense.kind == EMBER_OPT_ROWWISE_ADAGRAD) /* as models/common/mlp.c */
            ember_opt_config_default(EMBER_OPT_ADAGRAD, dense.lr, &dense);
        ember_opt_t *optimizer = NULL;
        if (ember_opt_create(&dense, 1, start->head.nparams, EMBER_OPT_DENSE, &optimizer) ==
            EMBER_OK)
            ember_opt_destroy(optimizer);
        if (model == ember_model_find("tutorial"))
            draw_batches(config, settings.seed, index);
    }
    free(config);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    train_start_t start;
    char err[256];
    if (size < 1)
        return 0;
    const int index = data[0] & 3;
    const uint32_t num_ps = 1u + ((data[0] >> 2) & 3);
    /* The request in a buffer of its own size: a read past it is seen. */
    uint8_t *request = malloc(size - 1 ? size - 1 : 1);
    FUZZ_CHECK(request, "out of memory");
    memcpy(request, data + 1, size - 1);
    err[0] = '\0';
    ember_status_t status = train_start_unpack(request, size - 1, (uint32_t)index, FUZZ_TRAINERS,
                                               num_ps, &start, err, sizeof(err));
    if (status != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "TRAIN_START refused without its cause");
        free(request);
        return 0;
    }
    const char *texts[4] = {start.settings, start.config, start.root, start.resume};
    size_t at = sizeof(start.head);
    for (int k = 0; k < 4; k++) {
        FUZZ_CHECK(strlen(texts[k]) == start.head.bytes[k], "text %d cut at a NUL", k);
        at += padded(start.head.bytes[k]);
    }
    FUZZ_CHECK(start.head.trainer == (uint32_t)index && start.head.trainers == FUZZ_TRAINERS &&
                       start.head.num_ps == num_ps,
               "trainer %d took a start for trainer %u of %u", index, start.head.trainer,
               start.head.trainers);
    FUZZ_CHECK(size - 1 == at + start.head.nparams * sizeof(float) && start.params == request + at,
               "TRAIN_START of %zu bytes taken with %llu dense parameters", size - 1,
               (unsigned long long)start.head.nparams);
    take_spec(&start, index);
    train_start_free(&start);
    free(request);
    return 0;
}
