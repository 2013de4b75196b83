/*
 * fuzz_split: a trainer's tables split into LOOKUPs (engine/train/split.c,
 * what ember_sparse_split runs for each table) from segments of any shape,
 * each LOOKUP taken by the codec (ember_wire_lookup_unpack) as a PS takes
 * it, and pooled by the PS's kernel (ember_bag_forward_slots) beside
 * ember_bag_forward over the expanded entries.
 *
 * Input: the table's four bytes, then records (fuzz/fuzz_input.h), each a
 * step of the same table (one ember_split_t: grow-only buffers reused):
 *   byte 0: bits 0-1 mode (sum, mean, max; 3: sum), 2 weights given, 3 a
 *           padding row, 4 fp16 replies, 5-6 shards - 1, 7 fp16 rows
 *   byte 1: rows - 1 (1 to 256)
 *   byte 2: the padding row (mod rows), bits 0-2 of byte 3 dim - 1, bit 3
 *           rows of ties (quarters) rather than rough values
 *   a record's op: bit 0 an evaluation; its payload: [features], then per
 *   feature [form][bags][shift], then per bag [length | spoil << 7] and
 *   its ids (a byte each, id = byte - 4: some negative, some past the
 *   rows); form bit 0 lengths (else offsets, values starting @shift ids
 *   in), 1 both given, 2 neither, 3 weights left out (or given to an
 *   unweighted table), 4 no values.  A spoilt bag's offset decreases (or
 *   its length is -1).
 *
 * Invariants: the split refuses exactly the inputs ember_sparse_split says
 * it checks, with a text naming the feature; what it takes, each shard's
 * LOOKUP is one the codec takes, exactly its size, a multiple of 8, zeros
 * before its rows, its head the table's and step's (flags: weights only
 * when given, max's places only in max mode), its offsets each bag's first
 * entry there, its entries the shard's ids in the input's order (the
 * padding row's left out) with their weights or places, its rows the
 * sorted distinct ids of the shard, each entry's slot its id's; the
 * combine's counts (max) and bag counts (mean) are the entries'; and the
 * PS's pooling from the rows and slots is ember_bag_forward's over the
 * expanded entries, bit for bit (values and argmax), fp32 and fp16 rows.
 */
#include "engine/ops/bag_slots.h"
#include "engine/ops/half.h"
#include "engine/train/split.h"
#include "engine/wire/codec.h"
#include "fuzz/fuzz_input.h"

#include <ember/embedding_bag.h>

#include <math.h>

#define MAX_FEATURES 4
#define MAX_BAGS     16
#define MAX_LEN      15
#define MAX_VALUES   (MAX_FEATURES * MAX_BAGS * MAX_LEN + 8)
#define MAX_SHARDS   4
#define MAX_DIM      8

typedef struct {
    ember_sparse_config_t config;
    int weighted, half_rows, ties;
    uint32_t dim;
    float rows[256 * MAX_DIM];
    uint16_t rows16[256 * MAX_DIM];
    ember_split_t split;
} harness_t;

/* One feature as decoded, and what the harness expects of it. */
typedef struct {
    int64_t values[MAX_BAGS * MAX_LEN + 4], offsets[MAX_BAGS + 1];
    int32_t lengths[MAX_BAGS];
    float weights[MAX_BAGS * MAX_LEN + 4];
    char name[16];
    int weighted; /* it gives weights */
    int bad;      /* the split must refuse it */
} feature_t;

/* The entries the split must send, in the input's order. */
typedef struct {
    int64_t row;
    float weight;
    uint32_t place;
    size_t bag; /* the table's */
} entry_t;

typedef struct {
    feature_t features[MAX_FEATURES];
    ember_sparse_segment_t segments[MAX_FEATURES];
    size_t count, bags;
    int weighted; /* the first feature's: the table's lookups carry weights */
    entry_t entries[MAX_VALUES];
    size_t nentries;
    int bad;
} step_t;

static void harness_open(harness_t *h, fuzz_input_t *in)
{
    const uint8_t shape = fuzz_u8(in), rows = fuzz_u8(in), pad = fuzz_u8(in), more = fuzz_u8(in);
    const ember_bag_mode_t modes[4] = {EMBER_BAG_SUM, EMBER_BAG_MEAN, EMBER_BAG_MAX, EMBER_BAG_SUM};
    memset(h, 0, sizeof(*h));
    h->config = (ember_sparse_config_t){.table_id = 5,
                                        .table_name = "fuzz",
                                        .num_ps = 1u + ((shape >> 5) & 3u),
                                        .rows = 1 + (int64_t)rows,
                                        .dim = 1u + (more & 7u),
                                        .mode = modes[shape & 3],
                                        .padding_idx = (shape & 8) ? pad % (1 + rows) : -1,
                                        .half_replies = (shape >> 4) & 1,
                                        .trainer = 1};
    h->weighted = (shape >> 2) & 1;
    h->half_rows = shape >> 7;
    h->ties = (more >> 3) & 1;
    h->dim = h->config.dim;
    for (size_t r = 0; r < 256; r++) {
        for (uint32_t d = 0; d < h->dim; d++) {
            /* Ties: quarters from a few values; rough: sums whose order shows. */
            uint64_t x = (r * 2654435761u + d * 40503u) % 1009;
            h->rows[r * h->dim + d] = h->ties ? (float)(x % 5) * 0.25f - 0.5f
                                              : (float)x / 7.0f - 70.0f + 1e-3f * (float)r;
        }
    }
    ember_float_to_half_n(h->rows, h->rows16, 256 * h->dim);
    if (h->half_rows) /* pooled as fp16 rows are: their widened values */
        ember_half_to_float_n(h->rows16, h->rows, 256 * h->dim);
    FUZZ_CHECK(ember_split_init(&h->split, &h->config) == EMBER_OK, "out of memory");
}

/* A feature from the payload, and what of it the harness expects. */
static void feature_decode(harness_t *h, fuzz_input_t *in, size_t f, step_t *st)
{
    feature_t *ft = &st->features[f];
    ember_sparse_segment_t *seg = &st->segments[f];
    const uint8_t form = fuzz_u8(in);
    const size_t bags = fuzz_u8(in) % (MAX_BAGS + 1), shift = fuzz_u8(in) % 4;
    const int lengths = form & 1;
    const int weighted = h->weighted ^ ((form >> 3) & 1); /* bit 3 flips the table's */
    size_t n = shift;
    snprintf(ft->name, sizeof(ft->name), "f%zu", f);
    for (size_t i = 0; i < shift; i++)
        ft->values[i] = -99; /* before the offsets: never read */
    ft->offsets[0] = (int64_t)shift;
    for (size_t b = 0; b < bags; b++) {
        const uint8_t byte = fuzz_u8(in);
        const size_t len = byte & MAX_LEN;
        const int spoil = byte >> 7;
        for (size_t k = 0; k < len; k++, n++) {
            uint8_t id = fuzz_u8(in);
            ft->values[n] = (int64_t)id - 4;
            ft->weights[n] = (float)((int)(id % 7) - 3) * 0.25f;
            if (ft->values[n] < 0 || ft->values[n] >= h->config.rows)
                ft->bad = 1;
            if (!ft->bad && ft->values[n] != h->config.padding_idx)
                st->entries[st->nentries++] = (entry_t){.row = ft->values[n],
                                                        .weight = ft->weights[n],
                                                        .place = (uint32_t)k,
                                                        .bag = st->bags + b};
        }
        ft->lengths[b] = spoil ? -1 : (int32_t)len;
        ft->offsets[b + 1] = (int64_t)n;
        if (spoil && !lengths && b > 0) /* this bag's start before the last one's */
            ft->offsets[b] = ft->offsets[b - 1] - 1;
        ft->bad |= spoil && (lengths || b > 0);
    }
    *seg = (ember_sparse_segment_t){
            .values = (form & 16) ? NULL : ft->values + (lengths ? shift : 0),
            .offsets = lengths ? NULL : ft->offsets,
            .lengths = lengths ? ft->lengths : NULL,
            .weights = weighted ? ft->weights + (lengths ? shift : 0) : NULL,
            .bags = bags,
            .name = ft->name};
    if (form & 2)
        seg->offsets = ft->offsets, seg->lengths = ft->lengths;
    if (form & 4)
        seg->offsets = NULL, seg->lengths = NULL;
    ft->weighted = weighted;
    ft->bad |= (form & 6) != 0 || ((form & 16) && n > shift) ||
               (weighted && h->config.mode != EMBER_BAG_SUM);
    st->bags += bags;
}

static void step_decode(harness_t *h, const uint8_t *payload, size_t length, step_t *st)
{
    fuzz_input_t in = {.data = payload, .size = length};
    memset(st, 0, offsetof(step_t, entries));
    st->nentries = 0;
    st->count = fuzz_u8(&in) % (MAX_FEATURES + 1);
    st->bad = st->count == 0;
    for (size_t f = 0; f < st->count; f++) {
        feature_decode(h, &in, f, st);
        /* Weights on all of a table's features or none: the first says. */
        st->bad |= st->features[f].bad || st->features[f].weighted != st->features[0].weighted;
    }
    st->weighted = st->count > 0 && st->features[0].weighted;
}

/* Shard @p's LOOKUP against the entries the input has there. */
static void lookup_check(const harness_t *h, const step_t *st, uint64_t step, int eval, uint32_t p)
{
    const ember_split_shard_t *shard = &h->split.shards[p];
    const ember_msg_lookup_t *head = &shard->head;
    const uint32_t P = h->config.num_ps;
    const size_t size = ember_wire_lookup_size(head);
    ember_wire_lookup_view_t view;
    char err[320];
    FUZZ_CHECK(size % 8 == 0 && size <= shard->capacity, "shard %u: a LOOKUP of %zu bytes", p,
               size);
    FUZZ_CHECK(ember_wire_lookup_unpack(shard->request, size, &view, err, sizeof(err)) == EMBER_OK,
               "shard %u: the codec refused the split's LOOKUP: %s", p, err);
    const uint32_t flags = (st->weighted ? EMBER_LOOKUP_WEIGHTS : 0) |
                           (h->config.mode == EMBER_BAG_MAX ? EMBER_LOOKUP_MAX : 0) |
                           (h->config.half_replies ? EMBER_LOOKUP_HALF_REPLY : 0) |
                           (eval ? EMBER_LOOKUP_EVAL : 0);
    FUZZ_CHECK(view.head.table_id == 5 && view.head.trainer == 1 && view.head.step == step &&
                       view.head.flags == flags && view.head.bags == st->bags,
               "shard %u: head of table %u trainer %u step %llu flags %#x bags %u", p,
               view.head.table_id, view.head.trainer, (unsigned long long)view.head.step,
               view.head.flags, view.head.bags);
    for (const uint8_t *at = view.slots + view.entry_bytes * view.head.indices; at < view.rows;
         at++)
        FUZZ_CHECK(*at == 0, "shard %u: a padding byte is %#x", p, *at);
    size_t i = 0, b = 0;
    int64_t previous = -1;
    for (size_t u = 0; u < view.head.unique; u++) { /* sorted, distinct, this shard's */
        int64_t row = ember_wire_load_i64(view.rows, u);
        FUZZ_CHECK(row > previous && (uint64_t)row % P == p, "shard %u: row %lld after %lld", p,
                   (long long)row, (long long)previous);
        previous = row;
    }
    for (size_t e = 0; e < st->nentries; e++) {
        const entry_t *want = &st->entries[e];
        if ((uint64_t)want->row % P != p)
            continue;
        for (; b <= want->bag; b++)
            FUZZ_CHECK(ember_wire_load_u32(view.offsets, b) == i,
                       "shard %u: offset of bag %zu is %u, %zu entries before it", p, b,
                       ember_wire_load_u32(view.offsets, b), i);
        FUZZ_CHECK(i < view.head.indices, "shard %u: fewer entries than the input's", p);
        const uint32_t slot = ember_wire_lookup_slot(&view, i);
        FUZZ_CHECK(slot < view.head.unique && ember_wire_load_i64(view.rows, slot) == want->row,
                   "shard %u entry %zu: slot %u, not row %lld's", p, i, slot, (long long)want->row);
        FUZZ_CHECK(!view.weights || ember_wire_lookup_weight(&view, i) == want->weight,
                   "shard %u entry %zu: its weight", p, i);
        FUZZ_CHECK(!view.places || ember_wire_lookup_place(&view, i) == want->place,
                   "shard %u entry %zu: place %u, not %u", p, i, ember_wire_lookup_place(&view, i),
                   want->place);
        i++;
    }
    for (; b < st->bags; b++)
        FUZZ_CHECK(ember_wire_load_u32(view.offsets, b) == i, "shard %u: offset of bag %zu", p, b);
    FUZZ_CHECK(i == view.head.indices, "shard %u: %u entries, the input has %zu", p,
               view.head.indices, i);
}

/* The combine's counts: max mode's per shard and bag, mean's per bag. */
static void counts_check(const harness_t *h, const step_t *st)
{
    const uint32_t P = h->config.num_ps;
    static uint32_t want[MAX_SHARDS * MAX_FEATURES * MAX_BAGS], bag[MAX_FEATURES * MAX_BAGS];
    memset(want, 0, sizeof(want));
    memset(bag, 0, sizeof(bag));
    for (size_t e = 0; e < st->nentries; e++) {
        want[(uint64_t)st->entries[e].row % P * st->bags + st->entries[e].bag]++;
        bag[st->entries[e].bag]++;
    }
    if (h->config.mode == EMBER_BAG_MAX)
        FUZZ_CHECK(memcmp(h->split.counts, want, P * st->bags * 4) == 0, "max mode's counts");
    if (h->config.mode == EMBER_BAG_MEAN)
        FUZZ_CHECK(memcmp(h->split.bag_counts, bag, st->bags * 4) == 0, "mean's bag counts");
}

/* Shard @p pooled as the PS pools it (rows[slot], uint32 offsets) and as
 * ember_bag_forward pools the expanded entries: the same bits. */
static void pooling_check(const harness_t *h, uint32_t p)
{
    const ember_split_shard_t *shard = &h->split.shards[p];
    ember_wire_lookup_view_t view;
    char err[320];
    FUZZ_CHECK(ember_wire_lookup_unpack(shard->request, ember_wire_lookup_size(&shard->head), &view,
                                        err, sizeof(err)) == EMBER_OK,
               "%s", err);
    const size_t n = view.head.indices, bags = view.head.bags, dim = h->dim;
    static int64_t rows[MAX_VALUES], indices[MAX_VALUES], offsets64[MAX_FEATURES * MAX_BAGS];
    static int64_t argmax_a[MAX_FEATURES * MAX_BAGS * MAX_DIM],
            argmax_b[MAX_FEATURES * MAX_BAGS * MAX_DIM];
    static uint32_t slots[MAX_VALUES], offsets[MAX_FEATURES * MAX_BAGS];
    static float weights[MAX_VALUES], a[MAX_FEATURES * MAX_BAGS * MAX_DIM],
            b[MAX_FEATURES * MAX_BAGS * MAX_DIM];
    for (size_t u = 0; u < view.head.unique; u++)
        rows[u] = ember_wire_load_i64(view.rows, u);
    for (size_t i = 0; i < n; i++) {
        slots[i] = ember_wire_lookup_slot(&view, i);
        indices[i] = rows[slots[i]];
        weights[i] = view.weights ? ember_wire_lookup_weight(&view, i) : 0.0f;
    }
    for (size_t k = 0; k < bags; k++)
        offsets64[k] = offsets[k] = ember_wire_load_u32(view.offsets, k);
    const ember_bag_table_t table = {.data = h->half_rows ? (const void *)h->rows16
                                                          : (const void *)h->rows,
                                     .dtype = h->half_rows ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32,
                                     .rows = h->config.rows,
                                     .dim = dim};
    const ember_bag_mode_t mode = view.places ? EMBER_BAG_MAX : EMBER_BAG_SUM;
    const ember_bag_slots_t slotted = {.rows = rows,
                                       .slots = slots,
                                       .n = n,
                                       .offsets = offsets,
                                       .bags = bags,
                                       .weights = view.weights ? weights : NULL};
    const ember_bag_batch_t expanded = {.indices = indices,
                                        .n = n,
                                        .offsets = offsets64,
                                        .bags = bags,
                                        .weights = view.weights ? weights : NULL,
                                        .n_weights = view.weights ? n : 0};
    const ember_bag_opts_t opts = {.mode = mode, .padding_idx = -1};
    FUZZ_CHECK(ember_bag_forward_slots(&table, &slotted, mode, a, argmax_a) == EMBER_OK &&
                       ember_bag_forward(&table, &expanded, &opts, b, argmax_b) == EMBER_OK,
               "shard %u: a pooling refused", p);
    FUZZ_CHECK(memcmp(a, b, bags * dim * sizeof(float)) == 0,
               "shard %u: pooled from the slots, not ember_bag_forward's bits", p);
    FUZZ_CHECK(mode != EMBER_BAG_MAX || memcmp(argmax_a, argmax_b, bags * dim * 8) == 0,
               "shard %u: another argmax from the slots", p);
}

static void step_one(harness_t *h, int op, const uint8_t *payload, size_t length, uint64_t step)
{
    static step_t st;
    char err[400] = "";
    step_decode(h, payload, length, &st);
    const ember_sparse_input_t input = {.segments = st.segments, .count = st.count};
    const int eval = op & 1;
    ember_status_t status = ember_split_table(&h->split, &input, step, eval, err, sizeof(err));
    if (st.bad) {
        FUZZ_CHECK(status != EMBER_OK, "a bad input split");
        FUZZ_CHECK(strncmp(err, "feature f", 9) == 0 ||
                           (st.count == 0 && strstr(err, "no features")),
                   "a refusal naming no feature: %s", err);
        return;
    }
    FUZZ_CHECK(status == EMBER_OK, "a good input refused: %s", err);
    FUZZ_CHECK(h->split.bags == st.bags, "%zu bags, the input has %zu", h->split.bags, st.bags);
    for (uint32_t p = 0; p < h->config.num_ps; p++) {
        lookup_check(h, &st, step, eval, p);
        pooling_check(h, p);
    }
    counts_check(h, &st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    static harness_t h;
    uint8_t *payload;
    size_t length;
    int op;
    uint64_t step = 0;

    harness_open(&h, &in);
    while ((op = fuzz_record(&in, &payload, &length)) >= 0) {
        step_one(&h, op, payload, length, step++);
        free(payload);
    }
    ember_split_free(&h.split);
    return 0;
}
