/*
 * fuzz_lookup: LOOKUP messages (engine/wire/protocol.h: header, offsets,
 * each index's slot with its weight or place, the rows last) into a PS
 * shard (fuzz/fuzz_table.h), through the codec (ember_wire_lookup_unpack),
 * ember_shard_lookup and the codec's reply layout (ember_wire_reply_*), as
 * engine/ps/ps_multi.c serves them.
 *
 * Input: the table's three bytes, then records (fuzz/fuzz_input.h) whose
 * payload is one whole message; op bit 0 closes an accepted lookup's
 * context at once with a gradient that applies nothing.
 *
 * Invariants: a lookup changes no row; a refused one leaves no context (a
 * gradient for it is refused at the end) and an accepted one does (its
 * gradient is taken), but for an evaluation (EMBER_LOOKUP_EVAL), which
 * keeps none and leaves an open one as it was; no training lookup is
 * accepted over an open context; what is
 * accepted pools what the rows hold (sum: the weighted sum within rounding;
 * max: the maximum and its first maximal entry's place, exactly); the reply
 * fits the buffer the PS pooled into and, finished as the codec lays it
 * out, holds those values (fp16: each one rounded) and places where the
 * layout says, zeros up to its version; a cached lookup's
 * (EMBER_LOOKUP_ROWS) answer is one the codec takes back, within its room,
 * every row held by no copy sent, every row sent the table's values, no
 * copy ahead of the shard's clock accepted.
 */
#include "engine/ops/half.h"
#include "engine/wire/codec.h"
#include "fuzz/fuzz_table.h"

typedef struct {
    int open;
    uint64_t step;
    uint32_t bags;
} context_t;

/* The value of the row of index @i at column @d, as the table held it. */
static float entry_value(const fuzz_table_t *ft, const ember_wire_lookup_view_t *lookup, size_t i,
                         uint32_t d)
{
    int64_t local = ember_wire_load_i64(lookup->rows, ember_wire_lookup_slot(lookup, i)) /
                    ft->spec.num_shards;
    FUZZ_CHECK(local >= 0 && local < ft->local_rows, "accepted row beyond the shard");
    return ft->before[(size_t)local * ft->dim + d];
}

/* What an accepted lookup pooled into @out, against the rows themselves. */
static void check_pooling(const fuzz_table_t *ft, const ember_wire_lookup_view_t *lookup,
                          const float *out)
{
    const ember_msg_lookup_t *msg = &lookup->head;
    const size_t bags = msg->bags, n = msg->indices, dim = ft->dim;
    const int max_mode = (msg->flags & EMBER_LOOKUP_MAX) != 0;
    const int weighted = (msg->flags & EMBER_LOOKUP_WEIGHTS) != 0;
    const uint32_t *places = (const uint32_t *)(out + bags * dim);

    for (size_t b = 0; b < bags; b++) {
        size_t begin = ember_wire_load_u32(lookup->offsets, b);
        size_t end = b + 1 < bags ? ember_wire_load_u32(lookup->offsets, b + 1) : n;
        for (uint32_t d = 0; d < dim; d++) {
            float got = out[b * dim + d];
            if (max_mode) {
                float want = 0.0f;
                uint32_t place = EMBER_PLACE_NONE;
                for (size_t i = begin; i < end; i++) {
                    float v = entry_value(ft, lookup, i, d);
                    if (i == begin || v > want) {
                        want = v;
                        place = ember_wire_lookup_place(lookup, i);
                    }
                }
                FUZZ_CHECK(memcmp(&got, &want, sizeof(got)) == 0,
                           "bag %zu col %u: max %g, the rows say %g", b, d, got, want);
                FUZZ_CHECK(places[b * dim + d] == place,
                           "bag %zu col %u: place %u, the rows say %u", b, d, places[b * dim + d],
                           place);
                continue;
            }
            double want = 0.0, scale = 0.0;
            int checkable = 1;
            for (size_t i = begin; i < end; i++) {
                float w = weighted ? ember_wire_lookup_weight(lookup, i) : 1.0f;
                checkable &= fabsf(w) <= 1e6f;
                double term = (double)w * entry_value(ft, lookup, i, d);
                want += term;
                scale += fabs(term);
            }
            if (checkable)
                FUZZ_CHECK(fabs(got - want) <= 1e-5 * scale + 1e-6,
                           "bag %zu col %u: sum %g, the rows say %g", b, d, got, want);
        }
    }
}

/* The reply finished from @pooled (fp32 values, then max mode's places) as
 * the codec lays it out: each value where the layout has it (fp16: that
 * value rounded), each place, and zeros up to the version. */
static void check_reply(const ember_wire_reply_layout_t *layout, const float *pooled,
                        const uint8_t *reply)
{
    for (size_t i = 0; i < layout->count; i++) {
        const uint8_t *at = reply + layout->values + layout->value_bytes * i;
        if (layout->value_bytes == 2) {
            uint16_t got, want = ember_float_to_half(pooled[i]);
            memcpy(&got, at, sizeof(got));
            FUZZ_CHECK(got == want, "fp16 value %zu: %#x, %g rounds to %#x", i, got,
                       (double)pooled[i], want);
        } else {
            FUZZ_CHECK(memcmp(at, &pooled[i], 4) == 0, "value %zu moved in the reply", i);
        }
    }
    for (size_t i = 0; (layout->flags & EMBER_LOOKUP_MAX) && i < layout->count; i++)
        FUZZ_CHECK(memcmp(reply + layout->places + 4 * i,
                          (const uint8_t *)pooled + layout->pooled_places + 4 * i, 4) == 0,
                   "place %zu is not where the layout has it", i);
    for (uint64_t at = layout->bytes; at < layout->version; at++)
        FUZZ_CHECK(reply[at] == 0, "padding byte %llu of the reply is %#x", (unsigned long long)at,
                   reply[at]);
}

/* A cached lookup's answer (EMBER_LOOKUP_ROWS): a part the codec takes
 * back, no larger than its room; a row without a held copy comes fresh,
 * and every fresh row holds the table's values. */
static void check_rows_reply(const fuzz_table_t *ft, const ember_wire_lookup_view_t *lookup,
                             const uint8_t *out, size_t room)
{
    const size_t unique = lookup->head.unique, dim = ft->dim;
    ember_msg_rows_reply_t head;
    size_t bytes = 0;
    char err[200];
    FUZZ_CHECK(ember_wire_rows_reply_check(out, room, unique, ft->dim, &head, &bytes, err,
                                           sizeof(err)) == EMBER_OK,
               "a cached lookup's answer the codec refuses: %s", err);
    FUZZ_CHECK(bytes <= room, "a cached lookup's answer of %zu bytes in %zu", bytes, room);
    const uint8_t *states = out + ember_wire_rows_reply_states_at();
    const float *values = (const float *)(out + ember_wire_rows_reply_values_at(unique));
    for (size_t u = 0, fresh = 0; u < unique; u++) {
        const uint64_t held = (uint64_t)ember_wire_load_i64(lookup->held, u);
        FUZZ_CHECK(held != EMBER_ROW_NONE || states[u] == EMBER_ROW_FRESH,
                   "row %zu: no copy held, but not sent", u);
        FUZZ_CHECK(held == EMBER_ROW_NONE || held <= head.clock,
                   "row %zu: a copy of version %llu accepted at clock %llu", u,
                   (unsigned long long)held, (unsigned long long)head.clock);
        if (states[u] != EMBER_ROW_FRESH)
            continue;
        const int64_t local = ember_wire_load_i64(lookup->rows, u) / ft->spec.num_shards;
        FUZZ_CHECK(local >= 0 && local < ft->local_rows, "accepted row beyond the shard");
        FUZZ_CHECK(memcmp(values + fresh++ * dim, ft->before + (size_t)local * dim, dim * 4) == 0,
                   "row %zu: sent values that are not the table's", u);
    }
}

/* A gradient that applies nothing, for trainer @t's step: it must be taken
 * exactly when the trainer's context is open. */
static void close_context(fuzz_table_t *ft, context_t *ctx, uint32_t t)
{
    ember_msg_grad_t msg = {.trainer = t, .step = ctx->step, .bags = ctx->bags};
    size_t length = (size_t)ctx->bags * ft->dim * sizeof(float);
    float *zeros = calloc(1, length + 1);
    char err[320];
    int applied = 1;

    fuzz_table_snapshot(ft);
    ember_wire_grad_view_t grad = {
            .head = msg, .grad = (const uint8_t *)zeros, .grad_bytes = length};
    ember_status_t status = ember_shard_grad(ft->table, &grad, &applied, err, sizeof(err));
    free(zeros);
    fuzz_table_check_unchanged(ft, "a gradient without EMBER_GRAD_APPLY");
    FUZZ_CHECK(applied == 0, "a gradient without EMBER_GRAD_APPLY applied");
    FUZZ_CHECK((status == EMBER_OK) == ctx->open, "trainer %u's context %s, gradient %s", t,
               ctx->open ? "open" : "closed", ember_status_string(status));
    ctx->open = 0;
}

static void lookup_one(fuzz_table_t *ft, context_t *contexts, int op, const uint8_t *payload,
                       size_t length)
{
    ember_wire_lookup_view_t lookup;
    const ember_msg_lookup_t *msg = &lookup.head;
    char err[320] = "";

    /* As the PS: the codec first, and a reply buffer only for a message it
     * took (its counts match its size). */
    if (ember_wire_lookup_unpack(payload, length, &lookup, err, sizeof(err)) != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "a lookup message refused without its cause");
        FUZZ_CHECK(length < sizeof(*msg) ||
                           ember_wire_lookup_array_bytes(msg) != length - sizeof(*msg) ||
                           strstr(err, "flags"),
                   "a well-formed lookup refused by the codec: %s", err);
        return;
    }
    FUZZ_CHECK(ember_wire_lookup_size(msg) == length,
               "the codec took %zu bytes of a %zu-byte lookup", length,
               ember_wire_lookup_size(msg));
    ember_wire_reply_layout_t layout;
    ember_wire_reply_layout(msg->flags, msg->bags, ft->dim, &layout);
    /* The PS pools into a part with room for the reply padded too. */
    const int rows = (msg->flags & EMBER_LOOKUP_ROWS) != 0;
    size_t out_bytes = rows ? (size_t)ember_wire_rows_reply_bytes(msg->unique, ft->dim, msg->unique)
                            : (size_t)(layout.pooled_bytes > layout.version ? layout.pooled_bytes
                                                                            : layout.version);
    float *out = malloc(out_bytes ? out_bytes : 1);
    FUZZ_CHECK(out, "out of memory");
    int was_open = msg->trainer < ft->spec.trainers && contexts[msg->trainer].open;

    fuzz_table_snapshot(ft);
    ember_status_t status = ember_shard_lookup(ft->table, &lookup, out, err, sizeof(err));
    fuzz_table_check_unchanged(ft, "a lookup");
    if (status != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "a lookup refused (%s) without its cause",
                   ember_status_string(status));
        free(out);
        return;
    }
    const int eval = (msg->flags & EMBER_LOOKUP_EVAL) != 0;
    FUZZ_CHECK(eval || !was_open, "trainer %u: a lookup accepted over an open context",
               msg->trainer);
    if (rows) {
        check_rows_reply(ft, &lookup, (const uint8_t *)out, out_bytes);
        free(out);
        if (!eval)
            contexts[msg->trainer] = (context_t){.open = 1, .step = msg->step, .bags = msg->bags};
        if (!eval && (op & 1))
            close_context(ft, &contexts[msg->trainer], msg->trainer);
        return;
    }
    check_pooling(ft, &lookup, out);
    float *pooled = malloc(layout.pooled_bytes + 4);
    FUZZ_CHECK(pooled, "out of memory");
    memcpy(pooled, out, (size_t)layout.pooled_bytes);
    ember_wire_reply_finish(&layout, out);
    size_t reply = (size_t)layout.bytes;
    FUZZ_CHECK(reply <= out_bytes && layout.version <= out_bytes,
               "a reply of %zu bytes from a buffer of %zu", reply, out_bytes);
    check_reply(&layout, pooled, (const uint8_t *)out);
    free(pooled);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < reply; i++)
        sink ^= ((const uint8_t *)out)[i]; /* what the transport would send */
    (void)sink;
    free(out);
    if (eval)
        return; /* no context kept: an open one stays as it was */
    contexts[msg->trainer] = (context_t){.open = 1, .step = msg->step, .bags = msg->bags};
    if (op & 1)
        close_context(ft, &contexts[msg->trainer], msg->trainer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    fuzz_table_t ft;
    context_t contexts[4] = {{0}};
    uint8_t *payload;
    size_t length;
    int op;

    fuzz_table_open(&ft, &in);
    while ((op = fuzz_record(&in, &payload, &length)) >= 0) {
        lookup_one(&ft, contexts, op, payload, length);
        free(payload);
    }
    for (uint32_t t = 0; t < ft.spec.trainers; t++)
        close_context(&ft, &contexts[t], t);
    fuzz_table_close(&ft);
    return 0;
}
