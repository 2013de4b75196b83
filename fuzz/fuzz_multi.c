/*
 * fuzz_multi: LOOKUPS and GRADS messages (engine/wire/protocol.h: every
 * table of a trainer's step on one PS) into three PS shards
 * (fuzz/fuzz_table.h), through the codec (ember_wire_lookups_unpack,
 * ember_wire_grads_unpack and _split) and engine/ps/ps_multi.c, as
 * engine/ps/ps.c serves them.  Table id k < 3 is shard k; others are not
 * on this PS (refused, as the PS refuses them).
 *
 * Input: the three tables' three bytes each, then records
 * (fuzz/fuzz_input.h) whose payload is one whole message:
 *   op bit 0 clear  a LOOKUPS; op bit 1: an accepted one's contexts closed
 *                   at once by a GRADS (built by the codec) that applies
 *                   nothing, when the PS would serve it now (ready)
 *   op bit 0 set    a GRADS
 *
 * Invariants: lookups change no row; a refused LOOKUPS leaves every
 * context as it was (none opened on the tables before the refusing one)
 * and an accepted one opens one on each of its tables (none for an
 * evaluation), never over an open one; its reply is the size the codec
 * gives and fits the buffer it was pooled into, each table's part where
 * the codec's reply layout has it: zeros after its values up to its
 * version, the version its table's steps applied, each max place in its
 * bag or EMBER_PLACE_NONE; a refused GRADS changes no
 * row and closes no context; an accepted one closes each of its tables'
 * contexts, was of open contexts of that step and size, and without
 * EMBER_GRAD_APPLY changes nothing.
 */
#include "engine/ps/ps_multi.h"
#include "fuzz/fuzz_table.h"

#define NTABLES      3
#define MAX_TRAINERS 4

typedef struct {
    int open;
    uint64_t step;
    uint32_t bags;
} context_t;

typedef struct {
    fuzz_table_t ft[NTABLES];
    context_t ctx[NTABLES][MAX_TRAINERS];
} harness_t;

/* Whether @table has trainer @t's context of (@step, @bags) open: a
 * gradient of zeros for it passes the check (or finds one waiting). */
static int probe_open(const fuzz_table_t *ft, uint32_t t, uint64_t step, uint32_t bags)
{
    static float zeros[256 * 16];
    size_t bytes = (size_t)bags * ft->dim * sizeof(float);
    ember_msg_grad_t msg = {.trainer = t, .step = step, .bags = bags};
    ember_wire_grad_view_t grad = {
            .head = msg, .grad = (const uint8_t *)zeros, .grad_bytes = bytes};
    char err[320] = "";
    if (bytes > sizeof(zeros))
        return -1; /* not probed */
    ember_status_t status = ember_shard_grad_check(ft->table, &grad, err, sizeof(err));
    return status == EMBER_OK || !strstr(err, "without a lookup");
}

/* Every context the harness knows of is as it says (@step, @bags: what a
 * closed one is probed with). */
static void contexts_check(const harness_t *h, size_t k, uint64_t step, uint32_t bags,
                           const char *after)
{
    const fuzz_table_t *ft = &h->ft[k];
    for (uint32_t t = 0; t < ft->spec.trainers; t++) {
        const context_t *c = &h->ctx[k][t];
        int open = c->open ? probe_open(ft, t, c->step, c->bags) : probe_open(ft, t, step, bags);
        FUZZ_CHECK(open < 0 || open == c->open, "after %s: table %zu trainer %u's context is %s",
                   after, k, t, open ? "open" : "closed");
    }
}

static void snapshot_all(harness_t *h)
{
    for (size_t k = 0; k < NTABLES; k++)
        fuzz_table_snapshot(&h->ft[k]);
}

static void unchanged_all(harness_t *h, const char *what)
{
    for (size_t k = 0; k < NTABLES; k++)
        fuzz_table_check_unchanged(&h->ft[k], what);
}

/* The shards a request names, as the PS finds them; 0 when one is not here. */
static int resolve(harness_t *h, const uint32_t *ids, size_t count, ember_shard_t **tables,
                   size_t *index)
{
    for (size_t k = 0; k < count; k++) {
        if (ids[k] >= NTABLES)
            return 0;
        index[k] = ids[k];
        tables[k] = h->ft[ids[k]].table;
    }
    return 1;
}

/* Close the contexts an accepted LOOKUPS opened with a GRADS of zeros and
 * no EMBER_GRAD_APPLY, packed by the codec: taken, changing nothing. */
static void close_by_grads(harness_t *h, const ember_wire_lookups_view_t *view,
                           ember_shard_t **tables, const size_t *index)
{
    static uint8_t message[1 << 16];
    static ember_wire_grads_view_t grads;
    ember_msg_grad_t heads[EMBER_WIRE_MAX_TABLES];
    ember_wire_grad_view_t split[EMBER_WIRE_MAX_TABLES];
    uint32_t dims[EMBER_WIRE_MAX_TABLES];
    int applied[EMBER_WIRE_MAX_TABLES];
    ember_msg_grads_t head = {
            .trainer = view->head.trainer, .count = view->head.count, .step = view->head.step};
    size_t length = ember_wire_grads_head_size(head.count);
    char err[400];
    for (size_t k = 0; k < head.count; k++) {
        const ember_msg_lookup_t *sub = &view->lookups[k].head;
        heads[k] = (ember_msg_grad_t){.table_id = sub->table_id,
                                      .trainer = head.trainer,
                                      .step = head.step,
                                      .bags = sub->bags};
        dims[k] = h->ft[index[k]].dim;
        length += (size_t)sub->bags * dims[k] * sizeof(float);
    }
    if (length > sizeof(message))
        return;
    ember_wire_grads_pack_head(&head, heads, message);
    memset(message + ember_wire_grads_head_size(head.count), 0,
           length - ember_wire_grads_head_size(head.count));
    FUZZ_CHECK(ember_wire_grads_unpack(message, length, &grads, err, sizeof(err)) == EMBER_OK &&
                       ember_wire_grads_split(&grads, dims, split, err, sizeof(err)) == EMBER_OK,
               "the codec's own GRADS refused: %s", err);
    snapshot_all(h);
    FUZZ_CHECK(ps_multi_grads(tables, split, head.count, applied, err, sizeof(err)) == EMBER_OK,
               "the gradients of an accepted LOOKUPS refused: %s", err);
    unchanged_all(h, "a GRADS without EMBER_GRAD_APPLY");
    for (size_t k = 0; k < head.count; k++)
        h->ctx[index[k]][head.trainer].open = 0;
}

/* An accepted LOOKUPS: its reply's size, and the contexts it opened. */
static void lookups_accepted(harness_t *h, const ember_wire_lookups_view_t *view,
                             const size_t *index, size_t reply, size_t out_bytes)
{
    uint32_t dims[EMBER_WIRE_MAX_TABLES];
    const uint32_t t = view->head.trainer;
    const int eval = (view->lookups[0].head.flags & EMBER_LOOKUP_EVAL) != 0;
    for (size_t k = 0; k < view->head.count; k++)
        dims[k] = h->ft[index[k]].dim;
    int rows = 0; /* a cached lookup's part is as long as its fresh rows */
    for (size_t k = 0; k < view->head.count; k++)
        rows |= (view->lookups[k].head.flags & EMBER_LOOKUP_ROWS) != 0;
    FUZZ_CHECK((rows ||
                reply == ember_wire_lookups_reply_bytes(view->lookups, dims, view->head.count)) &&
                       reply <= out_bytes,
               "a reply of %zu bytes from a buffer of %zu", reply, out_bytes);
    for (size_t k = 0; k < view->head.count; k++) {
        context_t *c = &h->ctx[index[k]][t];
        FUZZ_CHECK(eval || !c->open, "table %zu trainer %u: a lookup accepted over an open context",
                   index[k], t);
        if (!eval)
            *c = (context_t){
                    .open = 1, .step = view->head.step, .bags = view->lookups[k].head.bags};
    }
    for (size_t k = 0; k < view->head.count; k++)
        contexts_check(h, index[k], view->head.step, view->lookups[k].head.bags,
                       "an accepted LOOKUPS");
}

/* Each table's part of an accepted LOOKUPS's @reply, found through the
 * codec's reply layout: its padding zero, its version its table's, its
 * max places in its bag (none past the bag's entries on the shard). */
static void reply_parts_check(const ember_wire_lookups_view_t *view, ember_shard_t *const *tables,
                              const uint8_t *reply, size_t reply_bytes)
{
    size_t at = 0;
    for (size_t k = 0; k < view->head.count; k++) {
        const ember_wire_lookup_view_t *sub = &view->lookups[k];
        if (sub->head.flags & EMBER_LOOKUP_ROWS) { /* a cached lookup's answer */
            ember_msg_rows_reply_t head;
            size_t bytes = 0;
            char err[200];
            FUZZ_CHECK(ember_wire_rows_reply_check(reply + at, reply_bytes - at, sub->head.unique,
                                                   ember_shard_dim(tables[k]), &head, &bytes, err,
                                                   sizeof(err)) == EMBER_OK,
                       "table %zu: a cached lookup's answer the codec refuses: %s", k, err);
            FUZZ_CHECK(head.version == ember_shard_next_step(tables[k]),
                       "table %zu: version %llu, the table's %llu", k,
                       (unsigned long long)head.version,
                       (unsigned long long)ember_shard_next_step(tables[k]));
            at += bytes;
            continue;
        }
        ember_wire_reply_layout_t layout;
        ember_wire_reply_layout(sub->head.flags, sub->head.bags, ember_shard_dim(tables[k]),
                                &layout);
        FUZZ_CHECK(at + layout.part_bytes <= reply_bytes, "table %zu's part past the reply", k);
        const uint8_t *part = reply + at;
        for (uint64_t i = layout.bytes; i < layout.version; i++)
            FUZZ_CHECK(part[i] == 0, "table %zu: padding byte %llu is %#x", k,
                       (unsigned long long)i, part[i]);
        FUZZ_CHECK(ember_wire_reply_get_version(&layout, part) == ember_shard_next_step(tables[k]),
                   "table %zu: version %llu, the table's %llu", k,
                   (unsigned long long)ember_wire_reply_get_version(&layout, part),
                   (unsigned long long)ember_shard_next_step(tables[k]));
        for (uint64_t i = 0; (layout.flags & EMBER_LOOKUP_MAX) && i < layout.count; i++) {
            const size_t b = (size_t)(i / layout.dim);
            const uint32_t begin = ember_wire_load_u32(sub->offsets, b);
            const uint32_t end = b + 1 < sub->head.bags ? ember_wire_load_u32(sub->offsets, b + 1)
                                                        : sub->head.indices;
            uint32_t place;
            memcpy(&place, part + layout.places + 4 * i, sizeof(place));
            FUZZ_CHECK(begin == end ? place == EMBER_PLACE_NONE
                                    : place == ember_wire_lookup_place(sub, begin) ||
                                              (place > ember_wire_lookup_place(sub, begin) &&
                                               place <= ember_wire_lookup_place(sub, end - 1)),
                       "table %zu value %llu: place %u outside its bag's", k, (unsigned long long)i,
                       place);
        }
        at += (size_t)layout.part_bytes;
    }
    FUZZ_CHECK(at == reply_bytes, "the parts end at %zu, the reply at %zu", at, reply_bytes);
}

static void lookups_one(harness_t *h, int op, const uint8_t *payload, size_t length)
{
    static ember_wire_lookups_view_t view;
    ember_shard_t *tables[EMBER_WIRE_MAX_TABLES];
    uint32_t ids[EMBER_WIRE_MAX_TABLES];
    size_t index[EMBER_WIRE_MAX_TABLES], reply = 0;
    char err[400] = "";
    int ready = 0;
    if (ember_wire_lookups_unpack(payload, length, &view, err, sizeof(err)) != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "a LOOKUPS refused without its cause");
        return;
    }
    for (size_t k = 0; k < view.head.count; k++)
        ids[k] = view.lookups[k].head.table_id;
    if (!resolve(h, ids, view.head.count, tables, index))
        return;
    (void)ps_multi_lookups_ready(tables, &view, &ready, err, sizeof(err)); /* the PS's hold */
    size_t bytes = ps_multi_lookups_out_bytes(tables, &view, 1, &reply);
    uint8_t *out = aligned_alloc(EMBER_WIRE_ALIGN, (bytes + EMBER_WIRE_ALIGN) & ~(size_t)7);
    FUZZ_CHECK(out, "out of memory");
    snapshot_all(h);
    ember_status_t status = ps_multi_lookups(tables, &view, 1, out, &reply, err, sizeof(err));
    unchanged_all(h, "a LOOKUPS");
    if (status == EMBER_OK && reply <= bytes)
        reply_parts_check(&view, tables, out, reply);
    free(out);
    if (status != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "a LOOKUPS refused (%s) without its cause",
                   ember_status_string(status));
        for (size_t k = 0; k < view.head.count; k++)
            contexts_check(h, index[k], view.head.step, view.lookups[k].head.bags,
                           "a refused LOOKUPS");
        return;
    }
    lookups_accepted(h, &view, index, reply, bytes);
    /* Closed at once only when the PS would have served it now: one it
     * holds (sync, a step not yet applied, e.g. with an earlier step's
     * gradient still waiting in the same slot) is served here anyway,
     * but its gradient may meet that one. */
    if ((op & 2) && ready && !(view.lookups[0].head.flags & EMBER_LOOKUP_EVAL))
        close_by_grads(h, &view, tables, index);
}

/* Every context the harness knows open is still open. */
static void opened_still(const harness_t *h, const char *after)
{
    for (size_t k = 0; k < NTABLES; k++)
        contexts_check(h, k, UINT64_MAX, 1, after);
}

static void grads_one(harness_t *h, const uint8_t *payload, size_t length)
{
    static ember_wire_grads_view_t view;
    ember_wire_grad_view_t grads[EMBER_WIRE_MAX_TABLES];
    ember_shard_t *tables[EMBER_WIRE_MAX_TABLES];
    uint32_t ids[EMBER_WIRE_MAX_TABLES], dims[EMBER_WIRE_MAX_TABLES];
    size_t index[EMBER_WIRE_MAX_TABLES];
    int applied[EMBER_WIRE_MAX_TABLES];
    char err[400] = "";
    if (ember_wire_grads_unpack(payload, length, &view, err, sizeof(err)) != EMBER_OK)
        return;
    for (size_t k = 0; k < view.head.count; k++)
        ids[k] = view.grads[k].table_id;
    if (!resolve(h, ids, view.head.count, tables, index))
        return;
    for (size_t k = 0; k < view.head.count; k++)
        dims[k] = h->ft[index[k]].dim;
    if (ember_wire_grads_split(&view, dims, grads, err, sizeof(err)) != EMBER_OK)
        return;
    snapshot_all(h);
    ember_status_t status =
            ps_multi_grads(tables, grads, view.head.count, applied, err, sizeof(err));
    if (status != EMBER_OK || !(view.head.flags & EMBER_GRAD_APPLY))
        unchanged_all(h, status != EMBER_OK ? "a refused GRADS" : "a GRADS without APPLY");
    if (status != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "a GRADS refused without its cause");
        opened_still(h, "a refused GRADS");
        return;
    }
    for (size_t k = 0; k < view.head.count; k++) {
        context_t *c = &h->ctx[index[k]][view.head.trainer];
        FUZZ_CHECK(c->open && c->step == view.head.step && c->bags == view.grads[k].bags,
                   "table %zu: a gradient taken for a context the harness had %s", index[k],
                   c->open ? "of another step or size" : "closed");
        c->open = 0;
    }
    opened_still(h, "an accepted GRADS");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    static harness_t h;
    uint8_t *payload;
    size_t length;
    int op;

    memset(&h, 0, sizeof(h));
    for (size_t k = 0; k < NTABLES; k++)
        fuzz_table_open(&h.ft[k], &in);
    while ((op = fuzz_record(&in, &payload, &length)) >= 0) {
        if (op & 1)
            grads_one(&h, payload, length);
        else
            lookups_one(&h, op, payload, length);
        free(payload);
    }
    for (size_t k = 0; k < NTABLES; k++)
        fuzz_table_close(&h.ft[k]);
    return 0;
}
