/*
 * tests/engine/test_staleness: a sync table's staleness bound (--staleness
 * K), through the PS's own code (engine/ps/ps_multi.c over real
 * ember_shard_t, as engine/ps/ps.c serves a LOOKUPS and a GRADS), with a
 * held list as ps.c keeps one.
 *
 * Three trainers over two tables (dims 4 and 3, SGD) run STEPS steps each;
 * a trainer may have up to K + 1 lookups open (sent, not yet given their
 * gradient), and which trainer sends its next lookup or pushes its next
 * gradient is drawn at random, so pushes interleave across trainers and
 * steps.  After every applied step the tables are read back and kept.
 * Every served lookup's pooled values are compared with those the kept
 * copies give (ember_bag_forward): exactly one version must match, it must
 * be the version the reply names, and step - K <= version <= step (K 0:
 * version == step).  Every bag holds row 0, which every step updates, so
 * two versions never pool alike.
 *
 *   versions_k0, versions_k1, versions_k2   the above, 24 seeds each; for
 *                 K 1 and 2 some lookups are served behind their step; a
 *                 lookup K + 1 steps past the first pushed step is held
 *                 until that step is applied, then released
 *   refusals      with K 2, each refusal still named: a step already
 *                 applied, a second lookup of an open step, a lookup over
 *                 an open context K + 1 steps before, a gradient without a
 *                 lookup, a repeated gradient, a lost trainer's contexts
 *                 (every open step) dropped; a LOOKUPS one table refuses
 *                 takes back only that step's contexts; a staleness beyond
 *                 EMBER_STALENESS_MAX, or with async, is refused
 */
#include "engine/ps/ps_multi.h"
#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include <ember/embedding_bag.h>

#include "test_util.h"

#include <stdlib.h>

enum {
    ROWS = 30,
    BAGS = 3,
    PER_BAG = 3, /* entries: row 0, then two drawn */
    N = BAGS * PER_BAG,
    NT = 2,
    TRAINERS = 3,
    STEPS = 12,
    MSG_MAX = 1024,
    SEEDS = 24
};
#define LR 0.05f

static const uint32_t dims[NT] = {4, 3};
static const char *const names[NT] = {"a", "b"};

/* A trainer's LOOKUPS of one step: its bytes (the view points into them),
 * its entries (for the reference pools), whether it was served. */
typedef struct {
    uint8_t message[MSG_MAX];
    ember_wire_lookups_view_t view;
    int64_t entries[NT][N];
    int sent, served, held;
} request_t;

typedef struct {
    uint32_t staleness;
    ember_shard_t *tables[NT];
    float *kept[NT][STEPS + 1]; /* each table after v steps, v = 0 .. */
    size_t nkept;
    request_t req[TRAINERS][STEPS];
    uint32_t next_lookup[TRAINERS], next_push[TRAINERS];
    /* ps.c's held list: (trainer, step) in arrival order */
    uint32_t held_t[TRAINERS * STEPS], held_s[TRAINERS * STEPS];
    size_t nheld;
    size_t behind, held_served; /* lookups served behind their step; held ones served */
    uint64_t rng;
} world_t;

static ember_shard_t *make_table(size_t k, uint32_t staleness, ember_consistency_t consistency,
                                 char *err, size_t err_length)
{
    ember_msg_table_create_t spec = {.table_id = (uint32_t)k,
                                     .num_shards = 1,
                                     .trainers = TRAINERS,
                                     .rows = ROWS,
                                     .dim = dims[k],
                                     .consistency = consistency,
                                     .staleness = staleness,
                                     .init = EMBER_INIT_NORMAL,
                                     .seed = 70 + k};
    ember_shard_t *table = NULL;
    ember_opt_config_default(EMBER_OPT_SGD, LR, &spec.optimizer);
    snprintf(spec.name, sizeof(spec.name), "%s", names[k]);
    if (ember_shard_create(&spec, NULL, &table, err, err_length) != EMBER_OK)
        return NULL;
    return table;
}

static uint32_t draw(world_t *w, uint32_t n)
{
    return (uint32_t)test_uniform(&w->rng, 0, n) % n;
}

/* Both tables' rows as they are now, kept as version w->nkept. */
static int keep_version(world_t *w)
{
    for (size_t k = 0; k < NT; k++) {
        float *copy = malloc((size_t)ROWS * dims[k] * sizeof(float));
        char err[256];
        CHECK(copy, "out of memory");
        CHECK(ember_shard_read(w->tables[k], 0, ROWS, copy, err, sizeof(err)) == EMBER_OK, "%s",
              err);
        w->kept[k][w->nkept] = copy;
    }
    w->nkept++;
    return 0;
}

/* Trainer @t's LOOKUPS of @step: each table's bags row 0 and two drawn. */
static int build_request(world_t *w, uint32_t t, uint32_t step)
{
    request_t *r = &w->req[t][step];
    ember_msg_lookups_t head = {.trainer = t, .count = NT, .step = step};
    size_t length = sizeof(head);
    uint32_t counts[BAGS];
    char err[256];
    memcpy(r->message, &head, sizeof(head));
    for (size_t k = 0; k < NT; k++) {
        int64_t unique[N], inverse[N];
        size_t nunique;
        for (size_t i = 0; i < N; i++)
            r->entries[k][i] = i % PER_BAG == 0 ? 0 : 1 + draw(w, ROWS - 1);
        CHECK(ember_bag_dedup(r->entries[k], N, -1, unique, inverse, &nunique) == EMBER_OK,
              "dedup");
        for (size_t b = 0; b < BAGS; b++)
            counts[b] = PER_BAG;
        ember_wire_lookup_t lookup = {.head = {.table_id = (uint32_t)k,
                                               .trainer = t,
                                               .step = step,
                                               .bags = BAGS,
                                               .unique = (uint32_t)nunique,
                                               .indices = N},
                                      .counts = counts,
                                      .rows = unique,
                                      .inverse = inverse};
        CHECK(length + ember_wire_lookup_padded_size(&lookup.head) <= MSG_MAX, "message room");
        ember_wire_lookup_pack_padded(&lookup, r->message + length);
        length += ember_wire_lookup_padded_size(&lookup.head);
    }
    CHECK(ember_wire_lookups_unpack(r->message, length, &r->view, err, sizeof(err)) == EMBER_OK,
          "%s", err);
    return 0;
}

/* Which kept versions pool table @k's entries of @r to @got; *match_p the
 * last that does, *matches_p how many. */
static int match_versions(const world_t *w, const request_t *r, size_t k, const float *got,
                          size_t *match_p, size_t *matches_p)
{
    const int64_t offsets[BAGS] = {0, PER_BAG, 2 * PER_BAG};
    ember_bag_batch_t batch = {.indices = r->entries[k], .n = N, .offsets = offsets, .bags = BAGS};
    ember_bag_opts_t opts = {.mode = EMBER_BAG_SUM, .padding_idx = -1};
    float pooled[BAGS * 4];
    *matches_p = 0;
    for (size_t v = 0; v < w->nkept; v++) {
        ember_bag_table_t rows = {
                .data = w->kept[k][v], .dtype = EMBER_DTYPE_F32, .rows = ROWS, .dim = dims[k]};
        CHECK(ember_bag_forward(&rows, &batch, &opts, pooled, NULL) == EMBER_OK, "forward");
        if (memcmp(pooled, got, BAGS * dims[k] * sizeof(float)) == 0) {
            *match_p = v;
            ++*matches_p;
        }
    }
    return 0;
}

/* Serve (trainer @t, @step) now and check every table's reply: its values
 * are exactly one kept version's, the one it names, within the bound. */
static int serve_and_check(world_t *w, uint32_t t, uint32_t step)
{
    request_t *r = &w->req[t][step];
    size_t reply_bytes = 0,
           bytes = ps_multi_lookups_out_bytes(w->tables, &r->view, 1, &reply_bytes);
    uint8_t *out = aligned_alloc(64, (bytes + 63) / 64 * 64);
    char err[320];
    CHECK(out, "out of memory");
    CHECK(ps_multi_lookups(w->tables, &r->view, 1, out, &reply_bytes, err, sizeof(err)) == EMBER_OK,
          "trainer %u step %u: %s", t, step, err);
    size_t at = 0;
    for (size_t k = 0; k < NT; k++) {
        const ember_msg_lookup_t *head = &r->view.lookups[k].head;
        uint64_t claimed;
        size_t match = 0, matches = 0;
        memcpy(&claimed, out + at + ember_wire_lookup_version_at(head, dims[k]), sizeof(claimed));
        CHECK(match_versions(w, r, k, (const float *)(out + at), &match, &matches) == 0, "match");
        CHECK(matches == 1, "K %u trainer %u step %u table %s: %zu kept versions pool alike",
              w->staleness, t, step, names[k], matches);
        CHECK(match == claimed, "K %u trainer %u step %u table %s: served version %zu, claims %llu",
              w->staleness, t, step, names[k], match, (unsigned long long)claimed);
        CHECK(claimed <= step && step - claimed <= w->staleness,
              "K %u trainer %u step %u table %s: version %llu is out of the bound", w->staleness, t,
              step, names[k], (unsigned long long)claimed);
        w->behind += claimed < step;
        at += (size_t)ember_wire_lookups_part_bytes(head, dims[k]);
    }
    CHECK(at == reply_bytes, "reply of %zu bytes, parts %zu", reply_bytes, at);
    free(out);
    r->served = 1;
    w->held_served += r->held;
    return 0;
}

/* ps.c's routing: served when ready, else held. */
static int route(world_t *w, uint32_t t, uint32_t step)
{
    int ready = 0;
    char err[320];
    CHECK(ps_multi_lookups_ready(w->tables, &w->req[t][step].view, &ready, err, sizeof(err)) ==
                  EMBER_OK,
          "trainer %u step %u: %s", t, step, err);
    if (ready)
        return serve_and_check(w, t, step);
    w->req[t][step].held = 1;
    w->held_t[w->nheld] = t;
    w->held_s[w->nheld++] = step;
    return 0;
}

/* A step was applied: the held requests now ready are served, in order. */
static int release_held(world_t *w)
{
    size_t kept = 0, n = w->nheld;
    w->nheld = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t t = w->held_t[i], s = w->held_s[i];
        size_t before = w->nheld;
        CHECK(route(w, t, s) == 0, "route");
        if (w->nheld > before) { /* held again: keep its place */
            w->nheld = before;
            w->held_t[kept] = t;
            w->held_s[kept++] = s;
            w->nheld = kept;
        }
    }
    (void)kept;
    return 0;
}

static int send_lookup(world_t *w, uint32_t t)
{
    uint32_t s = w->next_lookup[t]++;
    CHECK(build_request(w, t, s) == 0, "build");
    w->req[t][s].sent = 1;
    return route(w, t, s);
}

/* Trainer @t's gradient of its oldest open step, drawn per (t, step). */
static int push_grad(world_t *w, uint32_t t)
{
    uint32_t s = w->next_push[t]++;
    float values[NT][BAGS * 4];
    ember_wire_grad_view_t grads[NT];
    int applied[NT];
    char err[320];
    for (size_t k = 0; k < NT; k++) {
        for (size_t i = 0; i < BAGS * dims[k]; i++)
            values[k][i] = (float)test_uniform(&w->rng, 0.1, 1.0);
        grads[k] = (ember_wire_grad_view_t){.head = {.table_id = (uint32_t)k,
                                                     .trainer = t,
                                                     .step = s,
                                                     .flags = EMBER_GRAD_APPLY,
                                                     .bags = BAGS},
                                            .grad = (const uint8_t *)values[k],
                                            .grad_bytes = BAGS * dims[k] * sizeof(float)};
    }
    CHECK(ps_multi_grads(w->tables, grads, NT, applied, err, sizeof(err)) == EMBER_OK,
          "trainer %u step %u: %s", t, s, err);
    CHECK(applied[0] == applied[1], "the tables applied %d and %d steps", applied[0], applied[1]);
    for (int a = 0; a < applied[0]; a++)
        CHECK(keep_version(w) == 0, "keep");
    CHECK(w->nkept == ember_shard_next_step(w->tables[0]) + 1,
          "%zu versions kept at next step %llu", w->nkept,
          (unsigned long long)ember_shard_next_step(w->tables[0]));
    return applied[0] ? release_held(w) : 0;
}

/* What trainer @t may do now: 1 send its next lookup (at most K + 1
 * open), 2 push its oldest open step's gradient (its lookup served). */
static int may(const world_t *w, uint32_t t, int what)
{
    if (what == 1)
        return w->next_lookup[t] < STEPS && w->next_lookup[t] - w->next_push[t] <= w->staleness;
    return w->next_push[t] < w->next_lookup[t] && w->req[t][w->next_push[t]].served;
}

/* The held case: trainer 0 opens steps 0 .. K, pushes step 0 and asks for
 * step K + 1, which must wait for the others' step 0. */
static int open_with_hold(world_t *w)
{
    for (uint32_t s = 0; s <= w->staleness; s++)
        CHECK(send_lookup(w, 0) == 0, "send");
    CHECK(push_grad(w, 0) == 0, "push");
    CHECK(send_lookup(w, 0) == 0, "send");
    CHECK(w->nheld == 1 && w->req[0][w->staleness + 1].held && !w->req[0][w->staleness + 1].served,
          "K %u: trainer 0's lookup of step %u was not held", w->staleness, w->staleness + 1);
    return 0;
}

static int run_world(world_t *w)
{
    CHECK(open_with_hold(w) == 0, "the held case");
    for (;;) {
        uint32_t options[TRAINERS * 2], n = 0;
        for (uint32_t t = 0; t < TRAINERS; t++)
            for (int what = 1; what <= 2; what++)
                if (may(w, t, what))
                    options[n++] = t * 2 + (uint32_t)(what - 1);
        if (n == 0)
            break;
        uint32_t pick = options[draw(w, n)];
        CHECK((pick % 2 ? push_grad(w, pick / 2) : send_lookup(w, pick / 2)) == 0, "event");
    }
    for (uint32_t t = 0; t < TRAINERS; t++)
        CHECK(w->next_push[t] == STEPS, "trainer %u stopped at step %u (held %zu)", t,
              w->next_push[t], w->nheld);
    CHECK(w->nheld == 0 && ember_shard_next_step(w->tables[0]) == STEPS, "all applied");
    CHECK(w->held_served >= 1, "no held lookup was released");
    return 0;
}

static void world_free(world_t *w)
{
    for (size_t k = 0; k < NT; k++) {
        ember_shard_destroy(w->tables[k]);
        for (size_t v = 0; v < w->nkept; v++)
            free(w->kept[k][v]);
    }
    free(w);
}

static int versions(uint32_t staleness)
{
    size_t behind = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        world_t *w = calloc(1, sizeof(*w));
        char err[256];
        CHECK(w, "out of memory");
        w->staleness = staleness;
        w->rng = seed * 977;
        for (size_t k = 0; k < NT; k++)
            CHECK((w->tables[k] = make_table(k, staleness, EMBER_SYNC, err, sizeof(err))), "%s",
                  err);
        CHECK(keep_version(w) == 0, "keep");
        int rc = run_world(w);
        behind += w->behind;
        world_free(w);
        CHECK(rc == 0, "seed %llu", (unsigned long long)seed);
    }
    CHECK(staleness == 0 ? behind == 0 : behind > 0, "K %u: %zu lookups served behind their step",
          staleness, behind);
    printf("K %u: %d seeds, %zu lookups served behind their step\n", staleness, SEEDS, behind);
    return 0;
}

static int case_versions_k0(void)
{
    return versions(0);
}
static int case_versions_k1(void)
{
    return versions(1);
}
static int case_versions_k2(void)
{
    return versions(2);
}

/* @status with @needle in @err, or a failure naming @what. */
#define REFUSED(call, status, needle, what)                                      \
    do {                                                                         \
        err[0] = '\0';                                                           \
        ember_status_t got_ = (call);                                            \
        CHECK(got_ == (status) && strstr(err, needle), "%s: %s (%s)", what, err, \
              ember_status_string(got_));                                        \
    } while (0)

/* One table's lookup of (trainer, step) from a built request. */
static const ember_wire_lookup_view_t *table_lookup(world_t *w, uint32_t t, uint32_t s, size_t k)
{
    return &w->req[t][s].view.lookups[k];
}

static ember_wire_grad_view_t grad_of(uint32_t t, uint32_t s, size_t k, const float *values)
{
    return (ember_wire_grad_view_t){.head = {.table_id = (uint32_t)k,
                                             .trainer = t,
                                             .step = s,
                                             .flags = EMBER_GRAD_APPLY,
                                             .bags = BAGS},
                                    .grad = (const uint8_t *)values,
                                    .grad_bytes = BAGS * dims[k] * sizeof(float)};
}

static int refusals_create(void)
{
    char err[256];
    ember_shard_t *table = make_table(0, EMBER_STALENESS_MAX + 1, EMBER_SYNC, err, sizeof(err));
    CHECK(!table && strstr(err, "staleness 17"), "staleness 17 taken: %s", err);
    table = make_table(0, 1, EMBER_ASYNC, err, sizeof(err));
    CHECK(!table && strstr(err, "staleness 1 (async)"), "async staleness taken: %s", err);
    table = make_table(0, EMBER_STALENESS_MAX, EMBER_SYNC, err, sizeof(err));
    CHECK(table, "staleness 16 refused: %s", err);
    ember_shard_destroy(table);
    return 0;
}

/* Trainer 0 opens steps 0..2 (K 2); each refusal leaves them open. */
static int refusals_open(world_t *w)
{
    char err[320];
    float out[BAGS * 4 * 2], values[BAGS * 4] = {0};
    int applied;
    for (uint32_t s = 0; s < 3; s++)
        CHECK(send_lookup(w, 0) == 0, "send");
    CHECK(build_request(w, 0, 3) == 0 && build_request(w, 1, 0) == 0, "build");
    REFUSED(ember_shard_lookup(w->tables[0], table_lookup(w, 0, 1, 0), out, err, sizeof(err)),
            EMBER_ERR_INVALID_PARAM, "table a: trainer 0 step 1: its lookup of step 1 has not",
            "a second lookup of an open step");
    REFUSED(ember_shard_lookup(w->tables[0], table_lookup(w, 0, 3, 0), out, err, sizeof(err)),
            EMBER_ERR_INVALID_PARAM, "trainer 0 step 3: its lookup of step 0 has not",
            "a lookup over step 0's open context");
    ember_wire_grad_view_t g = grad_of(1, 0, 0, values);
    REFUSED(ember_shard_grad(w->tables[0], &g, &applied, err, sizeof(err)), EMBER_ERR_INVALID_PARAM,
            "table a: trainer 1 step 0: gradient without a lookup", "a gradient without a lookup");
    g = grad_of(0, 1, 0, values);
    CHECK(ember_shard_grad(w->tables[0], &g, &applied, err, sizeof(err)) == EMBER_OK && !applied,
          "trainer 0's step-1 gradient before step 0's: %s", err);
    REFUSED(ember_shard_grad(w->tables[0], &g, &applied, err, sizeof(err)), EMBER_ERR_INVALID_PARAM,
            "trainer 0 step 1: gradient without a lookup", "a repeated gradient");
    return 0;
}

/* A LOOKUPS table b refuses (trainer 1 step 0, b's context already open)
 * takes back a's context of that step, not trainer 1's others; a lost
 * trainer loses every open step. */
static int refusals_undo(world_t *w)
{
    char err[320];
    float out[BAGS * 4 * 2], values[BAGS * 4] = {0};
    int applied;
    uint8_t *reply = aligned_alloc(64, 4096);
    size_t bytes;
    CHECK(reply, "out of memory");
    CHECK(build_request(w, 1, 1) == 0, "build");
    CHECK(ember_shard_lookup(w->tables[0], table_lookup(w, 1, 1, 0), out, err, sizeof(err)) ==
                  EMBER_OK,
          "trainer 1 step 1 on a: %s", err);
    CHECK(ember_shard_lookup(w->tables[1], table_lookup(w, 1, 0, 1), out, err, sizeof(err)) ==
                  EMBER_OK,
          "trainer 1 step 0 on b: %s", err);
    REFUSED(ps_multi_lookups(w->tables, &w->req[1][0].view, 1, reply, &bytes, err, sizeof(err)),
            EMBER_ERR_INVALID_PARAM, "table b: trainer 1 step 0", "a LOOKUPS b refuses");
    ember_wire_grad_view_t g = grad_of(1, 0, 0, values);
    REFUSED(ember_shard_grad_check(w->tables[0], &g, err, sizeof(err)), EMBER_ERR_INVALID_PARAM,
            "without a lookup", "a's step-0 context after the refused LOOKUPS");
    g = grad_of(1, 1, 0, values);
    CHECK(ember_shard_grad_check(w->tables[0], &g, err, sizeof(err)) == EMBER_OK,
          "trainer 1's step-1 context on a was dropped with the refused step 0: %s", err);
    ember_shard_drop_trainer(w->tables[0], 0);
    for (uint32_t s = 0; s < 3; s++) {
        g = grad_of(0, s, 0, values);
        if (s == 1)
            continue; /* its gradient is in: no context */
        REFUSED(ember_shard_grad(w->tables[0], &g, &applied, err, sizeof(err)),
                EMBER_ERR_INVALID_PARAM, "without a lookup", "a lost trainer's open step");
    }
    free(reply);
    return 0;
}

/* Step 0 applied by every trainer's gradient, then a lookup of step 0 is
 * refused as already applied. */
static int refusals_applied(void)
{
    world_t *w = calloc(1, sizeof(*w));
    char err[320];
    int ready;
    CHECK(w, "out of memory");
    w->staleness = 2;
    for (size_t k = 0; k < NT; k++)
        CHECK((w->tables[k] = make_table(k, 2, EMBER_SYNC, err, sizeof(err))), "%s", err);
    CHECK(keep_version(w) == 0, "keep");
    for (uint32_t t = 0; t < TRAINERS; t++)
        CHECK(send_lookup(w, t) == 0 && push_grad(w, t) == 0, "step 0 of trainer %u", t);
    CHECK(ember_shard_next_step(w->tables[0]) == 1, "step 0 applied");
    CHECK(build_request(w, 0, 0) == 0, "build");
    REFUSED(ps_multi_lookups_ready(w->tables, &w->req[0][0].view, &ready, err, sizeof(err)),
            EMBER_ERR_INVALID_PARAM, "table a: trainer 0 step 0: that step is already applied",
            "a lookup of an applied step");
    world_free(w);
    return 0;
}

static int case_refusals(void)
{
    world_t *w = calloc(1, sizeof(*w));
    char err[256];
    CHECK(w, "out of memory");
    CHECK(refusals_create() == 0, "create");
    w->staleness = 2;
    w->rng = 5;
    for (size_t k = 0; k < NT; k++)
        CHECK((w->tables[k] = make_table(k, 2, EMBER_SYNC, err, sizeof(err))), "%s", err);
    CHECK(keep_version(w) == 0, "keep");
    int rc = refusals_open(w) || refusals_undo(w);
    world_free(w);
    CHECK(rc == 0, "refusals");
    return refusals_applied();
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {{"versions_k0", case_versions_k0},
                                        {"versions_k1", case_versions_k1},
                                        {"versions_k2", case_versions_k2},
                                        {"refusals", case_refusals}};
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
