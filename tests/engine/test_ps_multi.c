/*
 * tests/engine/test_ps_multi: a LOOKUPS and a GRADS over three shards
 * (engine/ps/ps_multi.c) in one process, as engine/ps/ps.c serves them
 * after engine/wire/codec took their bytes.
 *
 *   lookups_reply   each table's reply lies at its padded offset (padding
 *                   zeroed), the bits of that table's own lookup (sum,
 *                   weighted fp16, max with places)
 *   lookups_atomic  a LOOKUPS one table refuses (a row out of range, or an
 *                   open context on the middle table) leaves no context on
 *                   the tables before it and keeps the open one; the same
 *                   request then succeeds
 *   grads_atomic    a GRADS with one bad gradient (non-finite, wrong bags)
 *                   changes no table and leaves every context open; the
 *                   good one then applies each table's step as its own GRAD
 *                   would (the same bits)
 *   lookups_ready   sync: a request is ready when every sync table is at
 *                   its step, waits while one is before it, and is refused
 *                   naming the table once one is past it
 */
#include "engine/ps/ps_msg.h"
#include "engine/ps/ps_multi.h"
#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include <ember/embedding_bag.h>

#include "test_util.h"

#include <stdlib.h>

enum {
    ROWS = 40,
    BAGS = 5,
    N = 8,
    UNIQUE = 4,
    NTABLES = 3
};
#define LR 0.1f

/* Bags {3, 7, 3} {} {20} {11, 20, 3} {7}: rows 3 7 11 20 (slots 0..3). */
static const uint32_t counts[BAGS] = {3, 0, 1, 3, 1};
static const int64_t rows[UNIQUE] = {3, 7, 11, 20};
static const int64_t inverse[N] = {0, 1, 0, 3, 2, 3, 0, 1};
static const float weights[N] = {0.5f, 2.0f, 1.5f, -1.0f, 0.25f, 3.0f, 1.0f, -0.5f};
static const uint32_t places[N] = {0, 1, 2, 0, 0, 1, 2, 0};

static const uint32_t dims[NTABLES] = {4, 3, 5};
static const uint32_t flags_of[NTABLES] = {0, EMBER_LOOKUP_WEIGHTS | EMBER_LOOKUP_HALF_REPLY,
                                           EMBER_LOOKUP_MAX};
static const char *const names[NTABLES] = {"a", "b", "c"};

static ember_shard_t *make(size_t k, ember_consistency_t consistency, uint32_t trainers)
{
    ember_msg_table_create_t spec = {.table_id = (uint32_t)k,
                                     .num_shards = 1,
                                     .trainers = trainers,
                                     .rows = ROWS,
                                     .dim = dims[k],
                                     .consistency = consistency,
                                     .init = EMBER_INIT_NORMAL,
                                     .seed = 40 + k};
    ember_shard_t *table = NULL;
    char err[256];
    ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
    snprintf(spec.name, sizeof(spec.name), "%s", names[k]);
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK)
        fprintf(stderr, "ember_shard_create: %s\n", err);
    return table;
}

static int make_all(ember_shard_t **tables, ember_consistency_t consistency, uint32_t trainers)
{
    for (size_t k = 0; k < NTABLES; k++)
        CHECK((tables[k] = make(k, consistency, trainers)), "table %s", names[k]);
    return 0;
}

static void destroy_all(ember_shard_t **tables)
{
    for (size_t k = 0; k < NTABLES; k++)
        ember_shard_destroy(tables[k]);
}

/* A LOOKUPS of the three tables by trainer @trainer at @step, @bad_row as
 * table @bad's last row (-1: none), in @message, taken by the codec. */
static int lookups_view(uint8_t *message, uint32_t trainer, uint64_t step, uint32_t extra, int bad,
                        int64_t bad_row, ember_wire_lookups_view_t *view)
{
    ember_msg_lookups_t head = {.trainer = trainer, .count = NTABLES, .step = step};
    size_t length = sizeof(head);
    char err[256];
    memcpy(message, &head, sizeof(head));
    for (size_t k = 0; k < NTABLES; k++) {
        int64_t sent[UNIQUE];
        memcpy(sent, rows, sizeof(sent));
        if ((int)k == bad)
            sent[UNIQUE - 1] = bad_row;
        ember_wire_lookup_t lookup = {.head = {.table_id = (uint32_t)k,
                                               .trainer = trainer,
                                               .step = step,
                                               .flags = flags_of[k] | extra,
                                               .bags = BAGS,
                                               .unique = UNIQUE,
                                               .indices = N},
                                      .counts = counts,
                                      .rows = sent,
                                      .inverse = inverse,
                                      .weights = weights,
                                      .places = places};
        ember_wire_lookup_pack_padded(&lookup, message + length);
        length += ember_wire_lookup_padded_size(&lookup.head);
    }
    CHECK(ember_wire_lookups_unpack(message, length, view, err, sizeof(err)) == EMBER_OK, "%s",
          err);
    return 0;
}

/* ps_multi_lookups into a buffer of its size (0xab where nothing wrote). */
static ember_status_t serve(ember_shard_t **tables, const ember_wire_lookups_view_t *view,
                            uint8_t **out_p, size_t *reply_p, char *err, size_t err_length)
{
    size_t reply = 0, bytes = ps_multi_lookups_out_bytes(tables, view, 1, &reply);
    uint8_t *out = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!out)
        return EMBER_ERR_NO_MEMORY;
    memset(out, 0xab, bytes);
    ember_status_t status = ps_multi_lookups(tables, view, 1, out, reply_p, err, err_length);
    if (status == EMBER_OK && *reply_p != reply)
        status = ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                   "served %zu bytes, sized %zu", *reply_p, reply);
    *out_p = out;
    return status;
}

static int case_lookups_reply(void)
{
    ember_shard_t *tables[NTABLES];
    static uint8_t message[2048], single[2048];
    static ember_wire_lookups_view_t view, alone;
    uint8_t *out = NULL;
    size_t reply = 0, at = 0;
    char err[256];
    if (make_all(tables, EMBER_SYNC, 1) || lookups_view(message, 0, 0, 0, -1, 0, &view))
        return 1;
    CHECK(serve(tables, &view, &out, &reply, err, sizeof(err)) == EMBER_OK, "%s", err);
    /* Each table's own: its lookup alone, as an evaluation (same pools). */
    if (lookups_view(single, 0, 0, EMBER_LOOKUP_EVAL, -1, 0, &alone))
        return 1;
    for (size_t k = 0; k < NTABLES; k++) {
        const ember_msg_lookup_t *head = &alone.lookups[k].head;
        size_t bytes = (size_t)ember_wire_lookup_reply_bytes(head, dims[k]);
        float own[2 * BAGS * 5];
        CHECK(ember_shard_lookup(tables[k], &alone.lookups[k], own, err, sizeof(err)) == EMBER_OK,
              "%s", err);
        size_t finished = ps_msg_lookup_reply_finish(head, dims[k], own);
        CHECK(finished == bytes && memcmp(out + at, own, bytes) == 0,
              "table %s: its reply at %zu is not its own lookup's", names[k], at);
        for (size_t i = bytes; i < (size_t)ember_wire_pad(bytes); i++)
            CHECK(out[at + i] == 0, "table %s: padding byte %zu is %#x", names[k], i, out[at + i]);
        uint64_t version;
        memcpy(&version, out + at + ember_wire_pad(bytes), sizeof(version));
        CHECK(version == 0, "table %s: version %llu before any step", names[k],
              (unsigned long long)version);
        at += (size_t)ember_wire_lookups_part_bytes(head, dims[k]);
    }
    /* 80 | 30 of fp16 padded to 32 | 100 + 100 (max: values and places),
     * each and its version (8). */
    CHECK(at == reply && reply == 88 + 40 + 208, "replies of %zu bytes (%zu)", at, reply);
    free(out);
    destroy_all(tables);
    return 0;
}

/* Whether trainer @trainer has a context of @step open on @table: a
 * gradient for it passes the check. */
static int context_open(ember_shard_t *table, uint32_t dim, uint32_t trainer, uint64_t step)
{
    static float zeros[BAGS * 8];
    ember_msg_grad_t msg = {.trainer = trainer, .step = step, .flags = 0, .bags = BAGS};
    ember_wire_grad_view_t grad = {
            .head = msg, .grad = (const uint8_t *)zeros, .grad_bytes = BAGS * dim * 4};
    char err[256];
    return ember_shard_grad_check(table, &grad, err, sizeof(err)) == EMBER_OK;
}

static int case_lookups_atomic(void)
{
    ember_shard_t *tables[NTABLES];
    static uint8_t message[2048];
    static ember_wire_lookups_view_t view;
    uint8_t *out = NULL;
    size_t reply;
    char err[256] = "";
    if (make_all(tables, EMBER_SYNC, 2) || lookups_view(message, 0, 0, 0, 2, 1000, &view))
        return 1;
    CHECK(serve(tables, &view, &out, &reply, err, sizeof(err)) == EMBER_ERR_OUT_OF_RANGE &&
                  strstr(err, "table c: trainer 0 step 0: index 1000 is out of range"),
          "a row out of range in table c: %s", err);
    free(out);
    for (size_t k = 0; k < NTABLES; k++)
        CHECK(!context_open(tables[k], dims[k], 0, 0), "table %s kept a context", names[k]);
    /* Trainer 1 has a lookup of table b open: its LOOKUPS is refused at b,
     * a's context goes, b's (not the request's) stays. */
    if (lookups_view(message, 1, 0, 0, -1, 0, &view))
        return 1;
    static ember_wire_lookups_view_t only_b;
    only_b = view;
    only_b.head.count = 1;
    only_b.lookups[0] = view.lookups[1];
    CHECK(serve(&tables[1], &only_b, &out, &reply, err, sizeof(err)) == EMBER_OK, "%s", err);
    free(out);
    CHECK(serve(tables, &view, &out, &reply, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "table b: trainer 1 step 0: its lookup of step 0 has not been"),
          "over an open context: %s", err);
    free(out);
    CHECK(!context_open(tables[0], dims[0], 1, 0) && context_open(tables[1], dims[1], 1, 0) &&
                  !context_open(tables[2], dims[2], 1, 0),
          "contexts after the refusal: a %d b %d c %d", context_open(tables[0], dims[0], 1, 0),
          context_open(tables[1], dims[1], 1, 0), context_open(tables[2], dims[2], 1, 0));
    /* Trainer 0's request, good now: taken (nothing was left behind). */
    if (lookups_view(message, 0, 0, 0, -1, 0, &view))
        return 1;
    CHECK(serve(tables, &view, &out, &reply, err, sizeof(err)) == EMBER_OK, "%s", err);
    free(out);
    for (size_t k = 0; k < NTABLES; k++)
        CHECK(context_open(tables[k], dims[k], 0, 0), "table %s: no context", names[k]);
    destroy_all(tables);
    return 0;
}

/* Every table's rows, concatenated. */
static int read_all(ember_shard_t **tables, float *out)
{
    char err[256];
    for (size_t k = 0; k < NTABLES; k++) {
        CHECK(ember_shard_read(tables[k], 0, ROWS, out, err, sizeof(err)) == EMBER_OK, "%s", err);
        out += ROWS * dims[k];
    }
    return 0;
}

/* Gradients of the three tables' pools, back to back as a GRADS carries
 * them; the views of each. */
static void grads_make(float *bulk, ember_wire_grad_view_t *grads, uint32_t bags_of_b)
{
    size_t at = 0;
    uint64_t seed = 77;
    for (size_t k = 0; k < NTABLES; k++) {
        uint32_t bags = k == 1 ? bags_of_b : BAGS;
        grads[k] = (ember_wire_grad_view_t){.head = {.table_id = (uint32_t)k,
                                                     .trainer = 0,
                                                     .step = 0,
                                                     .flags = EMBER_GRAD_APPLY,
                                                     .bags = bags},
                                            .grad = (const uint8_t *)(bulk + at),
                                            .grad_bytes = (size_t)bags * dims[k] * 4};
        for (size_t i = 0; i < (size_t)BAGS * dims[k]; i++)
            bulk[at + i] = (float)test_uniform(&seed, -1.0, 1.0);
        at += (size_t)BAGS * dims[k];
    }
}

static int case_grads_atomic(void)
{
    ember_shard_t *tables[NTABLES], *twins[NTABLES];
    static uint8_t message[2048];
    static ember_wire_lookups_view_t view;
    static float before[ROWS * 12], after[ROWS * 12], bulk[BAGS * 12];
    ember_wire_grad_view_t grads[NTABLES];
    int applied[NTABLES];
    uint8_t *out;
    size_t reply;
    char err[256] = "";
    if (make_all(tables, EMBER_SYNC, 1) || make_all(twins, EMBER_SYNC, 1) ||
        lookups_view(message, 0, 0, 0, -1, 0, &view) || read_all(tables, before))
        return 1;
    for (int twin = 0; twin < 2; twin++) {
        CHECK(serve(twin ? twins : tables, &view, &out, &reply, err, sizeof(err)) == EMBER_OK, "%s",
              err);
        free(out);
    }
    grads_make(bulk, grads, BAGS);
    bulk[BAGS * 4 + 5] = INFINITY; /* table b's */
    CHECK(ps_multi_grads(tables, grads, NTABLES, applied, err, sizeof(err)) == EMBER_ERR_NUMERIC &&
                  strstr(err, "table b: trainer 0 step 0: non-finite gradient (bag 1)"),
          "a non-finite gradient in b: %s", err);
    grads_make(bulk, grads, BAGS - 1);
    CHECK(ps_multi_grads(tables, grads, NTABLES, applied, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "table b: trainer 0 step 0: gradient of 4 bags"),
          "wrong bags in b: %s", err);
    if (read_all(tables, after))
        return 1;
    CHECK(memcmp(before, after, sizeof(before)) == 0, "a refused GRADS changed a table");
    for (size_t k = 0; k < NTABLES; k++)
        CHECK(context_open(tables[k], dims[k], 0, 0), "table %s lost its context", names[k]);
    grads_make(bulk, grads, BAGS);
    CHECK(ps_multi_grads(tables, grads, NTABLES, applied, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (size_t k = 0; k < NTABLES; k++) {
        int one = 0;
        CHECK(applied[k] && ember_shard_next_step(tables[k]) == 1, "table %s not applied",
              names[k]);
        CHECK(ember_shard_grad(twins[k], &grads[k], &one, err, sizeof(err)) == EMBER_OK && one,
              "%s", err);
    }
    if (read_all(tables, after) || read_all(twins, before))
        return 1;
    CHECK(memcmp(before, after, sizeof(before)) == 0, "a GRADS applied other rows than its GRADs");
    destroy_all(tables);
    destroy_all(twins);
    return 0;
}

static int case_lookups_ready(void)
{
    ember_shard_t *tables[NTABLES];
    static uint8_t message[2048];
    static ember_wire_lookups_view_t view;
    static float bulk[BAGS * 12];
    ember_wire_grad_view_t grads[NTABLES];
    int ready = -1, applied[NTABLES];
    uint8_t *out;
    size_t reply;
    char err[256] = "";
    if (make_all(tables, EMBER_SYNC, 1))
        return 1;
    ember_shard_destroy(tables[2]);
    CHECK((tables[2] = make(2, EMBER_ASYNC, 1)), "async table c");
    if (lookups_view(message, 0, 1, 0, -1, 0, &view))
        return 1;
    CHECK(ps_multi_lookups_ready(tables, &view, &ready, err, sizeof(err)) == EMBER_OK && !ready,
          "step 1 before step 0 is applied: ready %d %s", ready, err);
    if (lookups_view(message, 0, 0, 0, -1, 0, &view))
        return 1;
    CHECK(ps_multi_lookups_ready(tables, &view, &ready, err, sizeof(err)) == EMBER_OK && ready,
          "step 0: ready %d %s", ready, err);
    CHECK(serve(tables, &view, &out, &reply, err, sizeof(err)) == EMBER_OK, "%s", err);
    free(out);
    grads_make(bulk, grads, BAGS);
    CHECK(ps_multi_grads(tables, grads, NTABLES, applied, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ps_multi_lookups_ready(tables, &view, &ready, err, sizeof(err)) ==
                          EMBER_ERR_INVALID_PARAM &&
                  strstr(err,
                         "table a: trainer 0 step 0: that step is already applied (next is 1)"),
          "step 0 again: %s", err);
    if (lookups_view(message, 0, 1, EMBER_LOOKUP_EVAL, -1, 0, &view))
        return 1;
    CHECK(ps_multi_lookups_ready(tables, &view, &ready, err, sizeof(err)) == EMBER_OK && ready,
          "an evaluation of step 1: ready %d %s", ready, err);
    destroy_all(tables);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"lookups_reply", case_lookups_reply},
            {"lookups_atomic", case_lookups_atomic},
            {"grads_atomic", case_grads_atomic},
            {"lookups_ready", case_lookups_ready},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
