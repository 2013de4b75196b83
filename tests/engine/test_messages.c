/*
 * tests/engine/test_messages: the checks of wire messages the fuzzers
 * (fuzz/) drive, on the inputs that once got through them.
 *
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
 *                  weighted, max: each index's entry its slot and weight or
 *                  place together, the rows last, aligned after zero
 *                  padding, the size a multiple of 8); a short message,
 *                  unknown flags, weights
 *                  with max, and counts whose bytes do not match the size
 *                  (UINT32_MAX of each: 64-bit sums) are refused
 *   wire_lookups   the codec's LOOKUPS: three tables' LOOKUPs (sum,
 *                  weighted, max fp16) packed as iovs, each aligned, taken
 *                  back table for table, and its reply sized; refused: a
 *                  short envelope, 0 or 65 tables, fewer or more LOOKUPs
 *                  than the count, one cut short, one of
 *                  another trainer or step, a table twice, evaluation and
 *                  training mixed, a LOOKUP's own bad flags, and counts of
 *                  2^32 - 1 (64-bit sizes, before anything is read)
 *   wire_grads     the codec's GRADS: the head packed, taken back, the bulk
 *                  split by the tables' dims; up to 4 tables' head fits the
 *                  transport's inline part; refused: short, 0 or 65 tables,
 *                  reserved set, heads cut, another trainer, step or flags,
 *                  a table twice, a bulk of other than the bags' and dims'
 *                  bytes (bags of 2^32 - 1: 64-bit), a dim of 0
 */
#include "engine/ps/ps_msg.h"
#include "engine/wire/codec.h"

#include <ember/embedding_bag.h>

#include "test_util.h"

#include <stddef.h>
#include <stdlib.h>

/* A host shard of 10 rows x 4 (fp16 rows when @half). */
static ember_shard_t *small_table(int half)
{
    ember_msg_table_create_t spec = {.num_shards = 1,
                                     .trainers = 1,
                                     .rows = 10,
                                     .dim = 4,
                                     .init = EMBER_INIT_LOAD,
                                     .dtype = half ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32,
                                     .optimizer = {.kind = EMBER_OPT_SGD, .lr = 0.1f}};
    ember_shard_t *table = NULL;
    char err[256];
    snprintf(spec.name, sizeof(spec.name), "small");
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK)
        fprintf(stderr, "table: %s\n", err);
    return table;
}

static int case_ps_read_range(void)
{
    ember_shard_t *table = small_table(1);
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
    ember_shard_destroy(table);
    return 0;
}

static int case_ps_load_wrap(void)
{
    ember_shard_t *table = small_table(0);
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
    ember_shard_destroy(table);
    return 0;
}

static int case_table_far_rows(void)
{
    ember_shard_t *table = small_table(0);
    float row[4] = {0};
    char err[256];
    CHECK(table, "no table");
    CHECK(ember_shard_load(table, INT64_MAX, 1, row, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE &&
                  strstr(err, "[9223372036854775807, "
                              "9223372036854775807)"),
          "load from INT64_MAX: %s", err);
    CHECK(ember_shard_read(table, INT64_MAX, 2, row, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE,
          "read from INT64_MAX: %s", err);
    CHECK(ember_shard_load(table, -3, 2, row, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE &&
                  strstr(err, "[-3, -1)"),
          "load from -3: %s", err);
    ember_shard_destroy(table);
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

    /* Offsets 12, entries 20 (slots) or 40 (and weights or places) padded
     * to 8, then the rows 24. */
    CHECK(size == sizeof(lookup.head) + 12 + (flags ? 44 : 20) + 24 && size % 8 == 0, "size %zu",
          size);
    memset(message, 0xee, sizeof(message));
    ember_wire_lookup_pack(&lookup, message);
    CHECK(ember_wire_lookup_unpack(message, size, &view, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(memcmp(&view.head, &lookup.head, sizeof(view.head)) == 0, "the header");
    const uint32_t offsets[3] = {0, 2, 2};
    for (size_t b = 0; b < 3; b++)
        CHECK(ember_wire_load_u32(view.offsets, b) == offsets[b], "offset %zu", b);
    CHECK(view.rows == message + size - 24 && view.slots == message + sizeof(lookup.head) + 12 &&
                  view.entry_bytes == (flags ? 8u : 4u),
          "rows at %td, entries at %td of %zu bytes", view.rows - message, view.slots - message,
          view.entry_bytes);
    for (const uint8_t *pad = view.slots + 5 * view.entry_bytes; pad < view.rows; pad++)
        CHECK(*pad == 0, "padding byte at %td is %#x", pad - message, *pad);
    for (size_t u = 0; u < 3; u++)
        CHECK(ember_wire_load_i64(view.rows, u) == rows[u], "row %zu", u);
    for (size_t i = 0; i < 5; i++) {
        CHECK(ember_wire_lookup_slot(&view, i) == (uint32_t)inverse[i], "slot %zu", i);
        CHECK(!view.weights || ember_wire_lookup_weight(&view, i) == weights[i], "weight %zu", i);
        CHECK(!view.places || ember_wire_lookup_place(&view, i) == places[i], "place %zu", i);
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
    /* Counts of 2^32 - 1 each: 4 + 8 + 8 bytes of each and 4 of padding,
     * 85899345904 in all, not a number wrapped to the 4 bytes sent. */
    head = (ember_msg_lookup_t){.flags = EMBER_LOOKUP_WEIGHTS,
                                .bags = UINT32_MAX,
                                .unique = UINT32_MAX,
                                .indices = UINT32_MAX};
    memcpy(message, &head, sizeof(head));
    CHECK(ember_wire_lookup_unpack(message, sizeof(message), &view, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "needs 85899345904 bytes, got 4"),
          "huge counts: %s", err);
    return 0;
}

/* ---- LOOKUPS / GRADS ---------------------------------------------------- */

/* The round trip's LOOKUP of 3 bags as table @id of trainer 1 step 7. */
static const uint32_t lk_counts[3] = {2, 0, 3};
static const int64_t lk_rows[3] = {2, 4, 9};
static const int64_t lk_inverse[5] = {1, 2, 2, 0, 1};
static const float lk_weights[5] = {0.5f, -1, 2, 3, 4};
static const uint32_t lk_places[5] = {0, 1, 0, 1, 2};

static ember_wire_lookup_t lk_table(uint32_t id, uint32_t flags)
{
    return (ember_wire_lookup_t){.head = {.table_id = id,
                                          .trainer = 1,
                                          .step = 7,
                                          .flags = flags,
                                          .bags = 3,
                                          .unique = 3,
                                          .indices = 5},
                                 .counts = lk_counts,
                                 .rows = lk_rows,
                                 .inverse = lk_inverse,
                                 .weights = lk_weights,
                                 .places = lk_places};
}

typedef struct {
    uint8_t bytes[1024];
    size_t length;
    size_t at[4]; /* where each LOOKUP starts */
} lk_message_t;

/* @n tables' LOOKUPs (@subs) under an envelope of trainer 1 step 7 counting
 * @count, gathered from the codec's iovs as the transport sends them. */
static void lk_build(lk_message_t *m, const ember_wire_lookup_t *subs, size_t n, uint32_t count)
{
    static uint8_t packed[4][256];
    const uint8_t *messages[4];
    ember_iov_t iov[5];
    ember_msg_lookups_t head = {.trainer = 1, .count = count, .step = 7};
    for (size_t k = 0; k < n; k++) {
        ember_wire_lookup_pack_padded(&subs[k], packed[k]);
        messages[k] = packed[k];
    }
    size_t iovcnt = ember_wire_lookups_pack_iov(&head, messages, n, iov);
    m->length = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        if (i > 0)
            m->at[i - 1] = m->length;
        memcpy(m->bytes + m->length, iov[i].buffer, iov[i].length);
        m->length += iov[i].length;
    }
}

/* @m's bytes refused with @status and a text holding @needle. */
static int lk_refused(const lk_message_t *m, size_t length, ember_status_t status,
                      const char *needle)
{
    static ember_wire_lookups_view_t view;
    char err[200] = "";
    CHECK(ember_wire_lookups_unpack(m->bytes, length, &view, err, sizeof(err)) == status &&
                  strstr(err, needle),
          "want %s and '%s', got %s: '%s'", ember_status_string(status), needle,
          ember_status_string(ember_wire_lookups_unpack(m->bytes, length, &view, err, sizeof(err))),
          err);
    return 0;
}

static int lk_round_trip(void)
{
    const ember_wire_lookup_t subs[3] = {lk_table(3, 0), lk_table(5, EMBER_LOOKUP_WEIGHTS),
                                         lk_table(9, EMBER_LOOKUP_MAX | EMBER_LOOKUP_HALF_REPLY)};
    static ember_wire_lookups_view_t view;
    lk_message_t m;
    char err[200];
    lk_build(&m, subs, 3, 3);
    /* 88, 112, 112 after the 16-byte envelope. */
    CHECK(m.length == 16 + 88 + 112 + 112 && m.at[1] == 104 && m.at[2] == 216,
          "laid out at %zu %zu %zu of %zu", m.at[0], m.at[1], m.at[2], m.length);
    CHECK(ember_wire_lookups_unpack(m.bytes, m.length, &view, err, sizeof(err)) == EMBER_OK, "%s",
          err);
    CHECK(view.head.count == 3 && view.head.trainer == 1 && view.head.step == 7, "the envelope");
    for (size_t k = 0; k < 3; k++) {
        const ember_wire_lookup_view_t *sub = &view.lookups[k];
        CHECK(memcmp(&sub->head, &subs[k].head, sizeof(sub->head)) == 0, "table %zu's head", k);
        CHECK(sub->rows == m.bytes + m.at[k] + (k ? 88 : 64), "table %zu's rows", k);
        CHECK(ember_wire_load_i64(sub->rows, 2) == 9 && ember_wire_lookup_slot(sub, 4) == 1,
              "table %zu's arrays", k);
    }
    CHECK(view.lookups[1].weights && ember_wire_lookup_weight(&view.lookups[1], 3) == 3.0f &&
                  view.lookups[2].places && ember_wire_lookup_place(&view.lookups[2], 4) == 2,
          "the weights and places");
    /* Replies of dims 4, 3, 5: 48; 36 padded to 40; 32 of fp16 values and 60
     * of places, 96; each then its version, 8. */
    const uint32_t dims[3] = {4, 3, 5};
    CHECK(ember_wire_lookup_version_at(&view.lookups[1].head, 3) == 40 &&
                  ember_wire_lookups_part_bytes(&view.lookups[1].head, 3) == 48,
          "table 1's version at %llu",
          (unsigned long long)ember_wire_lookup_version_at(&view.lookups[1].head, 3));
    CHECK(ember_wire_lookups_reply_bytes(view.lookups, dims, 3) == 56 + 48 + 104, "reply of %llu",
          (unsigned long long)ember_wire_lookups_reply_bytes(view.lookups, dims, 3));
    return 0;
}

static int lk_refusals_counts(void)
{
    ember_wire_lookup_t subs[3] = {lk_table(3, 0), lk_table(5, EMBER_LOOKUP_WEIGHTS),
                                   lk_table(9, 0)};
    lk_message_t m;
    lk_build(&m, subs, 3, 3);
    if (lk_refused(&m, 15, EMBER_ERR_BAD_MESSAGE, "shorter than its 16-byte header") ||
        lk_refused(&m, m.length - 8, EMBER_ERR_BAD_MESSAGE, "needs 88 bytes, 80 left") ||
        lk_refused(&m, m.length + 8, EMBER_ERR_BAD_MESSAGE, "8 bytes after them"))
        return 1;
    lk_build(&m, subs, 3, 4);
    if (lk_refused(&m, m.length, EMBER_ERR_BAD_MESSAGE, "lookup 3 of the request: 0 bytes left"))
        return 1;
    lk_build(&m, subs, 3, 2);
    if (lk_refused(&m, m.length, EMBER_ERR_BAD_MESSAGE,
                   "LOOKUPS of 2 tables in 304 bytes has 88 bytes after them"))
        return 1;
    lk_build(&m, subs, 3, 0);
    if (lk_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "LOOKUPS of 0 tables (1 to 64)"))
        return 1;
    lk_build(&m, subs, 3, EMBER_WIRE_MAX_TABLES + 1);
    if (lk_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "LOOKUPS of 65 tables (1 to 64)"))
        return 1;
    /* The weighted one last, its rows cut short. */
    ember_wire_lookup_t last[2] = {lk_table(3, 0), lk_table(5, EMBER_LOOKUP_WEIGHTS)};
    lk_build(&m, last, 2, 2);
    if (lk_refused(&m, m.length - 4, EMBER_ERR_BAD_MESSAGE, "table 5: lookup of 3 bags"))
        return 1;
    /* Counts of 2^32 - 1 in table 5's head: 85899345936 bytes (64-bit). */
    lk_build(&m, subs, 3, 3);
    ember_msg_lookup_t huge = subs[1].head;
    huge.bags = huge.unique = huge.indices = UINT32_MAX;
    memcpy(m.bytes + m.at[1], &huge, sizeof(huge));
    return lk_refused(&m, m.length, EMBER_ERR_BAD_MESSAGE,
                      "table 5: lookup of 4294967295 bags, 4294967295 rows, 4294967295 indices "
                      "needs 85899345936 bytes, 200 left");
}

static int lk_refusals_fields(void)
{
    ember_wire_lookup_t subs[3] = {lk_table(3, 0), lk_table(5, 0), lk_table(9, 0)};
    lk_message_t m;
    subs[1].head.trainer = 2;
    lk_build(&m, subs, 3, 3);
    if (lk_refused(&m, m.length, EMBER_ERR_INVALID_PARAM,
                   "table 5: its lookup of trainer 2 step 7 is in a request of trainer 1 step 7"))
        return 1;
    subs[1].head.trainer = 1;
    subs[2].head.step = 8;
    lk_build(&m, subs, 3, 3);
    if (lk_refused(&m, m.length, EMBER_ERR_INVALID_PARAM,
                   "table 9: its lookup of trainer 1 step 8"))
        return 1;
    subs[2].head.step = 7;
    subs[2].head.table_id = 3;
    lk_build(&m, subs, 3, 3);
    if (lk_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "table 3 appears twice in one lookup"))
        return 1;
    subs[2].head.table_id = 9;
    subs[1].head.flags = EMBER_LOOKUP_EVAL;
    lk_build(&m, subs, 3, 3);
    if (lk_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "an evaluation lookup and a training"))
        return 1;
    subs[1].head.flags = 1u << 9;
    lk_build(&m, subs, 3, 3);
    return lk_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "table 5: unknown lookup flags 0x200");
}

static int case_wire_lookups(void)
{
    return lk_round_trip() || lk_refusals_counts() || lk_refusals_fields();
}

typedef struct {
    uint8_t bytes[512];
    size_t length;
} gr_message_t;

/* A GRADS of trainer 1 step 7 of @n tables (ids @ids, bags @bags) with
 * @floats gradient values counting up from 0.5. */
static void gr_build(gr_message_t *m, const uint32_t *ids, const uint32_t *bags, uint32_t n,
                     size_t floats)
{
    ember_msg_grads_t head = {.trainer = 1, .count = n, .step = 7, .flags = EMBER_GRAD_APPLY};
    ember_msg_grad_t grads[4];
    for (uint32_t k = 0; k < n; k++)
        grads[k] = (ember_msg_grad_t){.table_id = ids[k],
                                      .trainer = 1,
                                      .step = 7,
                                      .flags = EMBER_GRAD_APPLY,
                                      .bags = bags[k]};
    ember_wire_grads_pack_head(&head, grads, m->bytes);
    m->length = ember_wire_grads_head_size(n);
    for (size_t i = 0; i < floats; i++, m->length += 4)
        memcpy(m->bytes + m->length, &(float){0.5f + (float)i}, 4);
}

static int gr_refused(const gr_message_t *m, size_t length, ember_status_t status,
                      const char *needle)
{
    static ember_wire_grads_view_t view;
    char err[200] = "";
    ember_status_t got = ember_wire_grads_unpack(m->bytes, length, &view, err, sizeof(err));
    CHECK(got == status && strstr(err, needle), "want %s and '%s', got %s: '%s'",
          ember_status_string(status), needle, ember_status_string(got), err);
    return 0;
}

/* Set field @offset of sub-head @k (or, k < 0, of the envelope) to @value. */
static void gr_poke(gr_message_t *m, int k, size_t offset, const void *value, size_t size)
{
    size_t at = k < 0 ? 0 : sizeof(ember_msg_grads_t) + (size_t)k * sizeof(ember_msg_grad_t);
    memcpy(m->bytes + at + offset, value, size);
}

static int gr_round_trip(void)
{
    const uint32_t ids[3] = {3, 5, 9}, bags[3] = {2, 1, 3}, dims[3] = {4, 3, 2};
    static ember_wire_grads_view_t view;
    ember_wire_grad_view_t grads[3];
    gr_message_t m;
    char err[200];
    /* Up to 4 tables the head rides inline; the device path handles more. */
    CHECK(ember_wire_grads_head_size(4) <= EMBER_RPC_INLINE_MAX &&
                  ember_wire_grads_head_size(5) > EMBER_RPC_INLINE_MAX &&
                  ember_wire_grads_head_size(3) == 96,
          "head sizes %zu, %zu", ember_wire_grads_head_size(4), ember_wire_grads_head_size(5));
    gr_build(&m, ids, bags, 3, 17);
    CHECK(ember_wire_grads_unpack(m.bytes, m.length, &view, err, sizeof(err)) == EMBER_OK, "%s",
          err);
    CHECK(view.head.count == 3 && view.bulk == m.bytes + 96 && view.bulk_bytes == 68,
          "the bulk at %td, %zu bytes", view.bulk - m.bytes, view.bulk_bytes);
    CHECK(ember_wire_grads_split(&view, dims, grads, err, sizeof(err)) == EMBER_OK, "%s", err);
    const size_t at[3] = {0, 8, 11}, floats[3] = {8, 3, 6};
    for (size_t k = 0; k < 3; k++)
        CHECK(grads[k].head.table_id == ids[k] && grads[k].head.bags == bags[k] &&
                      grads[k].grad == view.bulk + 4 * at[k] &&
                      grads[k].grad_bytes == 4 * floats[k] &&
                      ember_wire_load_f32(grads[k].grad, 0) == 0.5f + (float)at[k],
              "table %zu's gradient", k);
    uint32_t wide[3] = {4, 3, 3};
    CHECK(ember_wire_grads_split(&view, wide, grads, err, sizeof(err)) == EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "carries 68 bytes of gradients, their bags and dims need 80"),
          "a dim too wide: %s", err);
    wide[2] = 0;
    CHECK(ember_wire_grads_split(&view, wide, grads, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "table 9: dim 0"),
          "dim 0: %s", err);
    /* Bags of 2^32 - 1 at dim 65536: 2^50 - 2^18 bytes, no wrap. */
    const uint32_t huge[1] = {UINT32_MAX}, widest[1] = {65536};
    gr_build(&m, ids, huge, 1, 4);
    CHECK(ember_wire_grads_unpack(m.bytes, m.length, &view, err, sizeof(err)) == EMBER_OK, "%s",
          err);
    CHECK(ember_wire_grads_split(&view, widest, grads, err, sizeof(err)) == EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "carries 16 bytes of gradients, their bags and dims need "
                              "1125899906580480"),
          "huge bags: %s", err);
    return 0;
}

static int gr_refusals(void)
{
    const uint32_t ids[3] = {3, 5, 9}, bags[3] = {2, 1, 3};
    gr_message_t m;
    gr_build(&m, ids, bags, 3, 17);
    if (gr_refused(&m, 23, EMBER_ERR_BAD_MESSAGE, "shorter than its 24-byte header") ||
        gr_refused(&m, 95, EMBER_ERR_BAD_MESSAGE,
                   "GRADS of 3 tables in 95 bytes: its heads need 96"))
        return 1;
    const uint32_t zero = 0, many = EMBER_WIRE_MAX_TABLES + 1, two = 2, eight = 8;
    const uint64_t step = 8;
    gr_poke(&m, -1, offsetof(ember_msg_grads_t, count), &zero, 4);
    if (gr_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "GRADS of 0 tables (1 to 64)"))
        return 1;
    gr_poke(&m, -1, offsetof(ember_msg_grads_t, count), &many, 4);
    if (gr_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "GRADS of 65 tables (1 to 64)"))
        return 1;
    gr_build(&m, ids, bags, 3, 17);
    gr_poke(&m, -1, offsetof(ember_msg_grads_t, reserved), &eight, 4);
    if (gr_refused(&m, m.length, EMBER_ERR_INVALID_PARAM, "reserved field 8"))
        return 1;
    gr_build(&m, ids, bags, 3, 17);
    gr_poke(&m, 1, offsetof(ember_msg_grad_t, trainer), &two, 4);
    if (gr_refused(&m, m.length, EMBER_ERR_INVALID_PARAM,
                   "table 5: its gradient of trainer 2 step 7 is in a request of trainer 1 step 7"))
        return 1;
    gr_build(&m, ids, bags, 3, 17);
    gr_poke(&m, 2, offsetof(ember_msg_grad_t, step), &step, 8);
    if (gr_refused(&m, m.length, EMBER_ERR_INVALID_PARAM,
                   "table 9: its gradient of trainer 1 step 8"))
        return 1;
    gr_build(&m, ids, bags, 3, 17);
    gr_poke(&m, 0, offsetof(ember_msg_grad_t, flags), &zero, 4);
    if (gr_refused(&m, m.length, EMBER_ERR_INVALID_PARAM,
                   "table 3: gradient flags 0 in a GRADS of flags 0x1"))
        return 1;
    const uint32_t twice[3] = {3, 5, 5};
    gr_build(&m, twice, bags, 3, 17);
    return gr_refused(&m, m.length, EMBER_ERR_INVALID_PARAM,
                      "table 5 appears twice in one gradient");
}

static int case_wire_grads(void)
{
    return gr_round_trip() || gr_refusals();
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"ps_read_range", case_ps_read_range},   {"ps_load_wrap", case_ps_load_wrap},
            {"table_far_rows", case_table_far_rows}, {"wire_lookup", case_wire_lookup},
            {"wire_lookups", case_wire_lookups},     {"wire_grads", case_wire_grads},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
