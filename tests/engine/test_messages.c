/*
 * tests/engine/test_messages: the checks of wire messages the fuzzers
 * (fuzz/) drive, on the inputs that once got through them.
 *
 *   start_spec     TRAIN_START: a spec the job could have sent is taken;
 *                  one with no rows, or its range of indices upside down
 *                  (the draw divided by zero, or asked malloc for 2^64
 *                  indices), an unknown mode or data kind, or a padding_idx
 *                  beyond the rows, is refused and names the field
 *   ps_read_range  TABLE_READ of rows the shard does not have is refused by
 *                  its check, before the PS allocates the reply (it took
 *                  count x dim floats first: 256 MiB for 2^24 rows of 4)
 *   ps_load_wrap   TABLE_LOAD whose count x dim floats wraps around to the
 *                  bytes it carries (2^62 + 1 rows of 4 in 16 bytes) is
 *                  refused; one whose bytes are its rows is taken
 *   table_far_rows TABLE_LOAD/READ from row INT64_MAX are refused naming the
 *                  range (its end, first + count, overflowed: undefined, an
 *                  abort under UBSan)
 */
#include "engine/ps/ps_msg.h"
#include "engine/train/trainer.h"

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

static ember_status_t start_check(const ember_msg_train_start_t *spec, char *err, size_t err_length)
{
    ember_msg_train_start_t taken;
    size_t length, nparams;
    uint8_t *request = start_request(spec, &length);
    if (!request)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status =
            ember_trainer_start_check(request, length, 1, &taken, &nparams, err, err_length);
    free(request);
    return status;
}

static int case_start_spec(void)
{
    const ember_msg_train_start_t good = {.trainer = 1,
                                          .trainers = 2,
                                          .num_ps = 1,
                                          .first_ps_rank = 3,
                                          .master_rank = 2,
                                          .rows = 100,
                                          .dim = 16,
                                          .classes = 8,
                                          .mode = EMBER_BAG_SUM,
                                          .data = EMBER_DATA_TUTORIAL,
                                          .padding_idx = -1,
                                          .epochs = 2,
                                          .batches = 3,
                                          .min_indices = 20,
                                          .max_indices = 50,
                                          .optimizer = {.kind = EMBER_OPT_SGD}};
    char err[256];

    CHECK(start_check(&good, err, sizeof(err)) == EMBER_OK, "a job's spec: %s", err);
    ember_msg_train_start_t bad = good;
    bad.min_indices = 276; /* the fuzzer's: more than max_indices */
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "indices 276 to 50"),
          "min > max: %s", err);
    bad = good;
    bad.rows = 0;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && strstr(err, "rows 0"),
          "no rows: %s", err);
    bad = good;
    bad.mode = 9472;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "mode 9472"),
          "mode: %s", err);
    bad = good;
    bad.data = 3;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && strstr(err, "data 3"),
          "data kind: %s", err);
    bad = good;
    bad.padding_idx = 100;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "padding_idx 100"),
          "padding_idx: %s", err);
    return 0;
}

/* A host shard of 10 rows x 4 (fp16 rows when @half). */
static ember_table_t *small_table(int half)
{
    ember_msg_table_create_t spec = {.num_shards = 1,
                                     .trainers = 1,
                                     .rows = 10,
                                     .dim = 4,
                                     .init = EMBER_INIT_LOAD,
                                     .dtype = half ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32,
                                     .optimizer = {.kind = EMBER_OPT_SGD, .lr = 0.1f}};
    ember_table_t *table = NULL;
    char err[256];
    snprintf(spec.name, sizeof(spec.name), "small");
    if (ember_table_create(&spec, &table, err, sizeof(err)) != EMBER_OK)
        fprintf(stderr, "table: %s\n", err);
    return table;
}

static int case_ps_read_range(void)
{
    ember_table_t *table = small_table(1);
    char err[256];
    size_t bytes = 7;
    CHECK(table, "no table");
    ember_msg_table_read_t read = {.first = 0, .count = 1 << 24};
    CHECK(ps_msg_table_read_check(&read, table, &bytes, err, sizeof(err)) ==
                          EMBER_ERR_OUT_OF_RANGE &&
                  bytes == 7,
          "2^24 rows of 10: %s, %zu bytes", err, bytes);
    read = (ember_msg_table_read_t){.first = 8, .count = 3};
    CHECK(ps_msg_table_read_check(&read, table, &bytes, err, sizeof(err)) ==
                          EMBER_ERR_OUT_OF_RANGE &&
                  strstr(err, "[8, 11)"),
          "[8, 11): %s", err);
    read = (ember_msg_table_read_t){.first = INT64_MAX, .count = 1};
    CHECK(ps_msg_table_read_check(&read, table, &bytes, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE,
          "from INT64_MAX: %s", err);
    read = (ember_msg_table_read_t){.first = 8, .count = 2};
    CHECK(ps_msg_table_read_check(&read, table, &bytes, err, sizeof(err)) == EMBER_OK &&
                  bytes == 2 * 4 * sizeof(float),
          "[8, 10): %s, %zu bytes", err, bytes);
    read.count = -1;
    CHECK(ps_msg_table_read_check(&read, table, &bytes, err, sizeof(err)) ==
                  EMBER_ERR_INVALID_PARAM,
          "-1 rows: %s", err);
    ember_table_destroy(table);
    return 0;
}

static int case_ps_load_wrap(void)
{
    ember_table_t *table = small_table(0);
    char err[256];
    CHECK(table, "no table");
    ember_msg_table_load_t load = {.first = 0, .count = (INT64_C(1) << 62) + 1};
    CHECK(ps_msg_table_load_check(&load, 16, table, err, sizeof(err)) == EMBER_ERR_BAD_MESSAGE,
          "2^62 + 1 rows in 16 bytes: %s", err);
    load.count = 1;
    CHECK(ps_msg_table_load_check(&load, 16, table, err, sizeof(err)) == EMBER_OK,
          "a row of 4 in 16 bytes: %s", err);
    CHECK(ps_msg_table_load_check(&load, 12, table, err, sizeof(err)) == EMBER_ERR_BAD_MESSAGE,
          "a row of 4 in 12 bytes: %s", err);
    ember_table_destroy(table);
    return 0;
}

static int case_table_far_rows(void)
{
    ember_table_t *table = small_table(0);
    float row[4] = {0};
    char err[256];
    CHECK(table, "no table");
    CHECK(ember_table_load(table, INT64_MAX, 1, row, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE &&
                  strstr(err, "[9223372036854775807, "
                              "9223372036854775807)"),
          "load from INT64_MAX: %s", err);
    CHECK(ember_table_read(table, INT64_MAX, 2, row, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE,
          "read from INT64_MAX: %s", err);
    CHECK(ember_table_load(table, -3, 2, row, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE &&
                  strstr(err, "[-3, -1)"),
          "load from -3: %s", err);
    ember_table_destroy(table);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"start_spec", case_start_spec},
            {"ps_read_range", case_ps_read_range},
            {"ps_load_wrap", case_ps_load_wrap},
            {"table_far_rows", case_table_far_rows},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
