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
 *   wire_lookup    the codec's LOOKUP: what ember_wire_lookup_pack writes,
 *                  ember_wire_lookup_unpack gives back array for array (sum,
 *                  weighted, max); a short message, unknown flags, weights
 *                  with max, and counts whose bytes do not match the size
 *                  (UINT32_MAX of each: 64-bit sums) are refused
 *   wire_done      TRAIN_START's reply: its steps are its length's, checked
 *                  by division (a steps x 4 that wraps to a short report is
 *                  refused), and the losses and parameters are where it says
 *   wire_report    EPOCH_REPORT: exactly one report, of the job's trainers
 *                  and epochs
 */
#include "engine/ps/ps_msg.h"
#include "engine/wire/codec.h"

#include <ember/embedding_bag.h>

#include "test_util.h"

#include <stdlib.h>

/* A TRAIN_START of @spec with its dense parameters (zeros); malloc'd. */
static uint8_t *start_request(const ember_msg_train_start_t *spec, size_t *length_p)
{
    size_t nparams = (size_t)spec->config.classes * spec->config.dim + spec->config.classes;
    *length_p = sizeof(*spec) + nparams * sizeof(float);
    uint8_t *request = calloc(1, *length_p);
    if (request)
        memcpy(request, spec, sizeof(*spec));
    return request;
}

static ember_status_t start_check(const ember_msg_train_start_t *spec, char *err, size_t err_length)
{
    ember_wire_train_start_view_t taken;
    size_t length;
    uint8_t *request = start_request(spec, &length);
    if (!request)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status =
            ember_wire_train_start_unpack(request, length, 1, &taken, err, err_length);
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
                                          .config = {.rows = 100,
                                                     .dim = 16,
                                                     .classes = 8,
                                                     .mode = EMBER_BAG_SUM,
                                                     .data = EMBER_DATA_TUTORIAL,
                                                     .padding_idx = -1,
                                                     .epochs = 2,
                                                     .batches = 3,
                                                     .min_indices = 20,
                                                     .max_indices = 50,
                                                     .optimizer = {.kind = EMBER_OPT_SGD}}};
    char err[256];

    CHECK(start_check(&good, err, sizeof(err)) == EMBER_OK, "a job's spec: %s", err);
    ember_msg_train_start_t bad = good;
    bad.config.min_indices = 276; /* the fuzzer's: more than max_indices */
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "indices 276 to 50"),
          "min > max: %s", err);
    bad = good;
    bad.config.rows = 0;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && strstr(err, "rows 0"),
          "no rows: %s", err);
    bad = good;
    bad.config.mode = 9472;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "mode 9472"),
          "mode: %s", err);
    bad = good;
    bad.config.data = 3;
    CHECK(start_check(&bad, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && strstr(err, "data 3"),
          "data kind: %s", err);
    bad = good;
    bad.config.padding_idx = 100;
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
    if (ember_table_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK)
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

/* Pack a LOOKUP of 3 bags (rows 4, 9 | - | 9, 2, 4 as slots) with @flags and
 * check the codec's view of it array for array. */
static int lookup_round_trip(uint32_t flags)
{
    const uint32_t counts[3] = {2, 0, 3};
    const int64_t rows[3] = {2, 4, 9};
    const int64_t inverse[5] = {1, 2, 2, 0, 1};
    const float weights[5] = {0.5f, -1, 2, 3, 4};
    const uint32_t places[5] = {0, 1, 0, 1, 2};
    ember_wire_lookup_t lookup = {.head = {.table_id = 3,
                                           .trainer = 1,
                                           .step = 7,
                                           .flags = flags,
                                           .bags = 3,
                                           .unique = 3,
                                           .indices = 5},
                                  .counts = counts,
                                  .rows = rows,
                                  .inverse = inverse,
                                  .weights = weights,
                                  .places = places};
    size_t size = ember_wire_lookup_size(&lookup.head);
    uint8_t message[256];
    ember_wire_lookup_view_t view;
    char err[160];

    CHECK(size == sizeof(lookup.head) + 12 + 24 + 20 + (flags ? 20 : 0), "size %zu", size);
    ember_wire_lookup_pack(&lookup, message);
    CHECK(ember_wire_lookup_unpack(message, size, &view, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(memcmp(&view.head, &lookup.head, sizeof(view.head)) == 0, "the header");
    const uint32_t offsets[3] = {0, 2, 2};
    for (size_t b = 0; b < 3; b++)
        CHECK(ember_wire_load_u32(view.offsets, b) == offsets[b], "offset %zu", b);
    for (size_t u = 0; u < 3; u++)
        CHECK(ember_wire_load_i64(view.rows, u) == rows[u], "row %zu", u);
    for (size_t i = 0; i < 5; i++) {
        CHECK(ember_wire_load_u32(view.slots, i) == (uint32_t)inverse[i], "slot %zu", i);
        CHECK(!view.weights || ember_wire_load_f32(view.weights, i) == weights[i], "weight %zu", i);
        CHECK(!view.places || ember_wire_load_u32(view.places, i) == places[i], "place %zu", i);
    }
    CHECK(!view.weights == !(flags & EMBER_LOOKUP_WEIGHTS) &&
                  !view.places == !(flags & EMBER_LOOKUP_MAX),
          "flags %#x: weights %p places %p", flags, (const void *)view.weights,
          (const void *)view.places);
    /* One byte short, one over: refused, naming both sizes. */
    CHECK(ember_wire_lookup_unpack(message, size - 1, &view, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "needs"),
          "a byte short: %s", err);
    return 0;
}

static int case_wire_lookup(void)
{
    ember_wire_lookup_view_t view;
    char err[160];
    if (lookup_round_trip(0) || lookup_round_trip(EMBER_LOOKUP_WEIGHTS) ||
        lookup_round_trip(EMBER_LOOKUP_MAX | EMBER_LOOKUP_HALF_REPLY))
        return 1;
    ember_msg_lookup_t head = {.bags = 1};
    uint8_t message[sizeof(head) + 4] = {0};
    CHECK(ember_wire_lookup_unpack(message, sizeof(head) - 1, &view, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "shorter than its"),
          "a short header: %s", err);
    head.flags = 1u << 9;
    memcpy(message, &head, sizeof(head));
    CHECK(ember_wire_lookup_unpack(message, sizeof(message), &view, err, sizeof(err)) ==
                          EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "0x200"),
          "unknown flags: %s", err);
    head.flags = EMBER_LOOKUP_WEIGHTS | EMBER_LOOKUP_MAX;
    memcpy(message, &head, sizeof(head));
    CHECK(ember_wire_lookup_unpack(message, sizeof(message), &view, err, sizeof(err)) ==
                          EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "sum mode"),
          "weights with max: %s", err);
    /* Counts of 2^32 - 1 each: 4 + 8 + 8 bytes of each, 85899345900 in
     * all, not a number wrapped to the 4 bytes sent. */
    head = (ember_msg_lookup_t){.flags = EMBER_LOOKUP_WEIGHTS,
                                .bags = UINT32_MAX,
                                .unique = UINT32_MAX,
                                .indices = UINT32_MAX};
    memcpy(message, &head, sizeof(head));
    CHECK(ember_wire_lookup_unpack(message, sizeof(message), &view, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "needs 85899345900 bytes, got 4"),
          "huge counts: %s", err);
    return 0;
}

static int case_wire_done(void)
{
    const size_t nparams = 3;
    float report[6 + 2 + 3]; /* the header (24 bytes), 2 losses, 3 parameters */
    ember_msg_train_done_t head = {.steps = 2, .bags = 10, .seconds = 1.5};
    ember_wire_train_done_view_t view;
    char err[160];
    memcpy(report, &head, sizeof(head));
    report[6] = 0.25f, report[7] = 0.5f, report[8] = 1, report[9] = 2, report[10] = 3;
    CHECK(ember_wire_train_done_unpack(report, sizeof(report), nparams, 1, &view, err,
                                       sizeof(err)) == EMBER_OK,
          "%s", err);
    CHECK(view.head.steps == 2 && ember_wire_load_f32(view.losses, 1) == 0.5f &&
                  ember_wire_load_f32(view.params, 2) == 3.0f,
          "the losses and parameters misplaced");
    /* 2^62 + 2 steps: x 4 wraps to the 8 bytes of 2 losses. */
    head.steps = (UINT64_C(1) << 62) + 2;
    memcpy(report, &head, sizeof(head));
    CHECK(ember_wire_train_done_unpack(report, sizeof(report), nparams, 1, &view, err,
                                       sizeof(err)) == EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "trainer1"),
          "wrapped steps: %s", err);
    CHECK(ember_wire_train_done_unpack(report, sizeof(report) - 2, nparams, 1, &view, err,
                                       sizeof(err)) == EMBER_ERR_BAD_MESSAGE,
          "a length of no whole float: %s", err);
    CHECK(ember_wire_train_done_unpack(report, 10, nparams, 1, &view, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "shorter than its parameters: %s", err);
    return 0;
}

static int case_wire_report(void)
{
    ember_msg_epoch_report_t report = {.trainer = 1, .epoch = 2, .steps = 5}, taken;
    uint8_t bytes[sizeof(report) + 1];
    char err[160];
    memcpy(bytes, &report, sizeof(report));
    CHECK(ember_wire_epoch_report_unpack(bytes, sizeof(report), 2, 3, &taken, err, sizeof(err)) ==
                          EMBER_OK &&
                  taken.steps == 5,
          "%s", err);
    CHECK(ember_wire_epoch_report_unpack(bytes, sizeof(report) + 1, 2, 3, &taken, err,
                                         sizeof(err)) == EMBER_ERR_BAD_MESSAGE,
          "a byte over: %s", err);
    CHECK(ember_wire_epoch_report_unpack(bytes, sizeof(report), 2, 2, &taken, err, sizeof(err)) ==
                          EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "epoch 2"),
          "epoch 2 of 2: %s", err);
    CHECK(ember_wire_epoch_report_unpack(bytes, sizeof(report), 1, 3, &taken, err, sizeof(err)) ==
                  EMBER_ERR_INVALID_PARAM,
          "trainer 1 of 1: %s", err);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"start_spec", case_start_spec},     {"ps_read_range", case_ps_read_range},
            {"ps_load_wrap", case_ps_load_wrap}, {"table_far_rows", case_table_far_rows},
            {"wire_lookup", case_wire_lookup},   {"wire_done", case_wire_done},
            {"wire_report", case_wire_report},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
