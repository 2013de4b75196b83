/*
 * tests/engine/test_messages: the checks of wire messages the fuzzers
 * (fuzz/) drive, on the inputs that once got through them.
 *
 *   start_spec     TRAIN_START: a spec the job could have sent is taken;
 *                  one with no rows, or its range of indices upside down
 *                  (the draw divided by zero, or asked malloc for 2^64
 *                  indices), an unknown mode or data kind, or a padding_idx
 *                  beyond the rows, is refused and names the field
 */
#include "engine/trainer.h"

#include <ember/embedding_bag.h>

#include "test_util.h"

#include <stdlib.h>

/* A TRAIN_START of @spec with its dense parameters (zeros); malloc'd. */
static uint8_t *start_request(const ember_msg_train_start_t *spec, size_t *length_p)
{
    size_t nparams = (size_t)spec->classes * spec->dim + spec->classes;
    *length_p = sizeof(*spec) + nparams * sizeof(float);
    uint8_t *request = calloc(1, *length_p);
    if (request)
        memcpy(request, spec, sizeof(*spec));
    return request;
}

static ember_status_t start_check(const ember_msg_train_start_t *spec, char *err,
                                  size_t err_length)
{
    ember_msg_train_start_t taken;
    size_t length, nparams;
    uint8_t *request = start_request(spec, &length);
    if (!request)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = ember_trainer_start_check(request, length, 1, &taken, &nparams,
                                                      err, err_length);
    free(request);
    return status;
}

static int case_start_spec(void)
{
    const ember_msg_train_start_t good = {
        .trainer = 1, .trainers = 2, .num_ps = 1, .first_ps_rank = 3, .master_rank = 2,
        .rows = 100, .dim = 16, .classes = 8, .mode = EMBER_POOL_SUM,
        .data = EMBER_DATA_TUTORIAL, .padding_idx = -1, .epochs = 2, .batches = 3,
        .min_indices = 20, .max_indices = 50, .optimizer = {.kind = EMBER_OPT_SGD}};
    char err[256];

    CHECK(start_check(&good, err, sizeof(err)) == EMBER_OK, "a job's spec: %s", err);
    ember_msg_train_start_t bad = good;
    bad.min_indices = 276; /* the fuzzer's: more than max_indices */
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
              strstr(err, "indices 276 to 50"), "min > max: %s", err);
    bad = good;
    bad.rows = 0;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
              strstr(err, "rows 0"), "no rows: %s", err);
    bad = good;
    bad.mode = 9472;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
              strstr(err, "mode 9472"), "mode: %s", err);
    bad = good;
    bad.data = 3;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
              strstr(err, "data 3"), "data kind: %s", err);
    bad = good;
    bad.padding_idx = 100;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
              strstr(err, "padding_idx 100"), "padding_idx: %s", err);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"start_spec", case_start_spec},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
