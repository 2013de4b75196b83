/*
 * tests/engine/test_row_cache: the trainer's row cache
 * (engine/train/row_cache), a cached lookup's wire (EMBER_LOOKUP_ROWS,
 * engine/wire/codec) and a shard's answer to it (engine/ps/table.c,
 * engine/ps/ps_multi.c), in one process.
 *
 *   clock          capacity 4: rows found since the hand passed stay, the
 *                  others go first; a put of an older version keeps the
 *                  newer copy; the counters
 *   random         200000 puts and finds of 300 rows over 64 slots: each
 *                  row just put is found with its values, every row found
 *                  holds the values of its last put, and exactly the
 *                  counted rows are found (the index's backward-shift
 *                  deletion loses and keeps nothing)
 *   reply_check    a rows reply: the good one taken; fresh rows beyond the
 *                  request's, a part shorter than its rows, an unknown
 *                  state, a fresh count its states do not make: refused
 *   lookup_flags   EMBER_LOOKUP_ROWS with fp16 replies refused by the
 *                  codec; a cached lookup's size counts its held versions
 *   shard_rows     a sync shard, staleness 0 then 1: no copy held: every
 *                  row fresh, the table's values at clock 0; an
 *                  evaluation's copies of rows no step touched since stand
 *                  unchanged, rows a step touched (every row of its
 *                  lookups) come fresh (staleness 0) or stand by the bound
 *                  (staleness 1, one step old), never an evaluation's nor
 *                  one two steps old; a copy of a version ahead of the
 *                  table refused naming the row and keeping nothing; after
 *                  a load every copy comes fresh; a cached lookup alone (a
 *                  LOOKUP, no version) refused
 *   dynamic_rows   a dynamic shard: a copy made before its key had a row,
 *                  or of a key without one, comes fresh; an admitted key's
 *                  copy stands until a step touches it
 */
#include "engine/ps/ps_multi.h"
#include "engine/ps/table.h"
#include "engine/train/row_cache.h"
#include "engine/wire/codec.h"

#include <ember/rng.h>

#include "test_util.h"

#include <stdlib.h>

static int case_clock(void)
{
    ember_row_cache_t *cache = NULL;
    ember_row_cache_stats_t s;
    float v[2];
    CHECK(ember_row_cache_create(0, 2, &cache) == EMBER_ERR_INVALID_PARAM, "0 rows taken");
    CHECK(ember_row_cache_create(4, 2, &cache) == EMBER_OK, "create");
    for (uint64_t r = 0; r < 4; r++) {
        v[0] = (float)r, v[1] = 1;
        ember_row_cache_put(cache, 7, r, v, 2, 10);
    }
    /* rows 1 and 3 referenced: the hand passes them (clearing their bits)
     * and takes 0, then 2 */
    CHECK(ember_row_cache_find(cache, 7, 1) >= 0 && ember_row_cache_find(cache, 7, 3) >= 0,
          "rows 1, 3 held");
    v[0] = 100;
    ember_row_cache_put(cache, 7, 100, v, 2, 11);
    CHECK(ember_row_cache_find(cache, 7, 0) < 0, "row 0 (unreferenced) kept over row 1");
    v[0] = 101;
    ember_row_cache_put(cache, 8, 1, v, 2, 11); /* another table's row 1 */
    CHECK(ember_row_cache_find(cache, 7, 2) < 0, "row 2 (unreferenced) kept");
    int64_t a = ember_row_cache_find(cache, 7, 1), b = ember_row_cache_find(cache, 8, 1);
    CHECK(a >= 0 && b >= 0 && a != b, "table 7 row 1 and table 8 row 1 apart");
    CHECK(ember_row_cache_values(cache, a)[0] == 1.0f &&
                  ember_row_cache_values(cache, b)[0] == 101.0f,
          "their values");
    /* an older copy does not replace a newer one; a newer one does */
    v[0] = -1;
    ember_row_cache_put(cache, 8, 1, v, 2, 5);
    CHECK(ember_row_cache_values(cache, b)[0] == 101.0f && ember_row_cache_version(cache, b) == 11,
          "an older put replaced the newer copy");
    ember_row_cache_put(cache, 8, 1, v, 2, 12);
    CHECK(ember_row_cache_values(cache, b)[0] == -1.0f && ember_row_cache_version(cache, b) == 12,
          "a newer put did not replace it");
    ember_row_cache_count(cache, 10, 4, 1, 2);
    ember_row_cache_count(cache, 5, 1, 0, 1);
    ember_row_cache_stats(cache, &s);
    CHECK(s.rows == 4 && s.inserted == 6 && s.evicted == 2 && s.lookups == 15 && s.hits == 5 &&
                  s.stale == 1 && s.oldest == 2,
          "counters: rows %llu inserted %llu evicted %llu lookups %llu hits %llu stale %llu "
          "oldest %llu",
          (unsigned long long)s.rows, (unsigned long long)s.inserted, (unsigned long long)s.evicted,
          (unsigned long long)s.lookups, (unsigned long long)s.hits, (unsigned long long)s.stale,
          (unsigned long long)s.oldest);
    ember_row_cache_destroy(cache);
    return 0;
}

static int case_random(void)
{
    enum {
        CAP = 64,
        UNIVERSE = 300,
        DIM = 3,
        OPS = 200000
    };
    static uint64_t last[UNIVERSE]; /* the version of each row's last put, 0: never */
    ember_row_cache_t *cache = NULL;
    CHECK(ember_row_cache_create(CAP, DIM, &cache) == EMBER_OK, "create");
    ember_rng_t rng;
    ember_rng_seed(&rng, 5, 0);
    for (uint64_t op = 1; op <= OPS; op++) {
        /* skewed: a third of the ops on 16 rows; keys far apart in 64 bits */
        const uint64_t r = ember_rng_int(&rng, 0, 2) == 0
                                   ? (uint64_t)ember_rng_int(&rng, 0, 15)
                                   : (uint64_t)ember_rng_int(&rng, 0, UNIVERSE - 1);
        const uint64_t key = r * 0x9e3779b97f4a7c15ull;
        if (ember_rng_int(&rng, 0, 1)) {
            float v[DIM] = {(float)r, (float)op, -(float)op};
            ember_row_cache_put(cache, (uint32_t)(r % 3), key, v, DIM, op);
            last[r] = op;
        }
        const int64_t slot = ember_row_cache_find(cache, (uint32_t)(r % 3), key);
        if (last[r] == op)
            CHECK(slot >= 0, "op %llu: row %llu just put is not found", (unsigned long long)op,
                  (unsigned long long)r);
        if (slot >= 0) {
            const float *v = ember_row_cache_values(cache, slot);
            CHECK(v[0] == (float)r && v[1] == (float)last[r] &&
                          ember_row_cache_version(cache, slot) == last[r],
                  "op %llu: row %llu holds %g %g at %llu, its last put %llu",
                  (unsigned long long)op, (unsigned long long)r, (double)v[0], (double)v[1],
                  (unsigned long long)ember_row_cache_version(cache, slot),
                  (unsigned long long)last[r]);
        }
        if (op % 997 == 0) {
            ember_row_cache_stats_t s;
            uint64_t found = 0;
            ember_row_cache_stats(cache, &s);
            for (uint64_t q = 0; q < UNIVERSE; q++)
                found += ember_row_cache_find(cache, (uint32_t)(q % 3),
                                              q * 0x9e3779b97f4a7c15ull) >= 0;
            CHECK(found == s.rows && s.rows <= CAP && s.inserted - s.evicted == s.rows,
                  "op %llu: %llu rows found, %llu held, %llu in, %llu out", (unsigned long long)op,
                  (unsigned long long)found, (unsigned long long)s.rows,
                  (unsigned long long)s.inserted, (unsigned long long)s.evicted);
        }
    }
    ember_row_cache_destroy(cache);
    return 0;
}

/* A rows reply part of @unique rows of dim 2: @states, values for the
 * fresh ones, head saying @fresh. */
static size_t make_reply(uint8_t *part, const uint8_t *states, size_t unique, uint64_t fresh)
{
    ember_msg_rows_reply_t head = {.version = 3, .clock = 3, .fresh = fresh};
    memset(part, 0, 256);
    memcpy(part, &head, sizeof(head));
    memcpy(part + ember_wire_rows_reply_states_at(), states, unique);
    return (size_t)ember_wire_rows_reply_bytes(unique, 2, fresh);
}

static int case_reply_check(void)
{
    uint8_t part[256];
    const uint8_t states[3] = {EMBER_ROW_FRESH, EMBER_ROW_UNCHANGED, EMBER_ROW_STALE};
    ember_msg_rows_reply_t head;
    size_t bytes = 0;
    char err[200];
    size_t n = make_reply(part, states, 3, 1);
    CHECK(n == 40, "a part of 3 rows, 1 fresh of dim 2: %zu bytes, not 24 + 8 + 8", n);
    CHECK(ember_wire_rows_reply_check(part, 200, 3, 2, &head, &bytes, err, sizeof(err)) ==
                          EMBER_OK &&
                  bytes == n && head.fresh == 1 && head.clock == 3,
          "the good reply: %s", err);
    n = make_reply(part, states, 3, 4);
    CHECK(ember_wire_rows_reply_check(part, 200, 3, 2, &head, &bytes, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "4 fresh rows of 3"),
          "fresh beyond unique: %s", err);
    n = make_reply(part, states, 3, 1);
    CHECK(ember_wire_rows_reply_check(part, n - 8, 3, 2, &head, &bytes, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a part shorter than its rows: %s", err);
    CHECK(ember_wire_rows_reply_check(part, 20, 3, 2, &head, &bytes, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a part shorter than its states: %s", err);
    const uint8_t odd[3] = {EMBER_ROW_FRESH, 7, EMBER_ROW_STALE};
    make_reply(part, odd, 3, 1);
    CHECK(ember_wire_rows_reply_check(part, 200, 3, 2, &head, &bytes, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "row 1 state 7"),
          "an unknown state: %s", err);
    make_reply(part, states, 3, 2);
    CHECK(ember_wire_rows_reply_check(part, 200, 3, 2, &head, &bytes, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "1 fresh rows, its head says 2"),
          "a fresh count its states do not make: %s", err);
    return 0;
}

/* Bags {0, 1} {2} {1, 2}: rows 3 8 11 (slots 0..2), one shard of 20 rows. */
enum {
    BAGS = 3,
    N = 5,
    UNIQUE = 3,
    DIM = 2,
    ROWS = 20
};
static const uint32_t counts[BAGS] = {2, 1, 2};
static const int64_t rows_of[UNIQUE] = {3, 8, 11};
static const int64_t inverse[N] = {0, 1, 2, 1, 2};

/* A cached lookup of trainer 0 at @step holding @held [UNIQUE] (of keys
 * @rows), packed into @message and taken by the codec. */
static int rows_lookup(uint8_t *message, uint64_t step, uint32_t flags, const int64_t *rows,
                       const uint64_t *held, ember_wire_lookup_view_t *view)
{
    ember_wire_lookup_t lookup = {.head = {.table_id = 0,
                                           .trainer = 0,
                                           .step = step,
                                           .flags = EMBER_LOOKUP_ROWS | flags,
                                           .bags = BAGS,
                                           .unique = UNIQUE,
                                           .indices = N},
                                  .counts = counts,
                                  .rows = rows,
                                  .inverse = inverse};
    ember_wire_lookup_layout_t at;
    char err[200];
    ember_wire_lookup_pack(&lookup, message);
    ember_wire_lookup_layout(&lookup.head, &at);
    memcpy(message + at.held, held, UNIQUE * sizeof(uint64_t));
    CHECK(ember_wire_lookup_unpack(message, ember_wire_lookup_size(&lookup.head), view, err,
                                   sizeof(err)) == EMBER_OK,
          "unpack: %s", err);
    return 0;
}

static int case_lookup_flags(void)
{
    uint8_t message[512];
    ember_wire_lookup_view_t view;
    char err[200];
    const uint64_t held[UNIQUE] = {EMBER_ROW_NONE, EMBER_ROW_NONE, EMBER_ROW_NONE};
    CHECK(rows_lookup(message, 0, 0, rows_of, held, &view) == 0, "a plain cached lookup");
    const ember_msg_lookup_t plain = {.bags = BAGS, .unique = UNIQUE, .indices = N};
    CHECK(ember_wire_lookup_size(&view.head) == ember_wire_lookup_size(&plain) + 8 * UNIQUE &&
                  view.held != NULL,
          "a cached lookup's size does not count its held versions");
    ember_msg_lookup_t head = view.head;
    head.flags |= EMBER_LOOKUP_HALF_REPLY;
    memcpy(message, &head, sizeof(head));
    CHECK(ember_wire_lookup_unpack(message, ember_wire_lookup_size(&head), &view, err,
                                   sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "cached lookup"),
          "fp16 replies with rows: %s", err);
    return 0;
}

static ember_shard_t *make_shard(uint32_t staleness, uint32_t kind)
{
    ember_msg_table_create_t spec = {.table_id = 0,
                                     .num_shards = 1,
                                     .trainers = 1,
                                     .rows = ROWS,
                                     .dim = DIM,
                                     .consistency = EMBER_SYNC,
                                     .init = EMBER_INIT_NORMAL,
                                     .staleness = staleness,
                                     .seed = 3,
                                     .kind = kind,
                                     .admit_count = kind == EMBER_TABLE_KIND_DYNAMIC,
                                     .lfu_decay = kind == EMBER_TABLE_KIND_DYNAMIC ? 1.0f : 0.0f};
    ember_shard_t *table = NULL;
    char err[256];
    ember_opt_config_default(EMBER_OPT_SGD, 0.5f, &spec.optimizer);
    snprintf(spec.name, sizeof(spec.name), "t");
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK)
        fprintf(stderr, "ember_shard_create: %s\n", err);
    return table;
}

/* Serve @view on @table: *@head_p the reply's head, @states its rows'. */
static ember_status_t serve_rows(ember_shard_t *table, const ember_wire_lookup_view_t *view,
                                 uint8_t *out, ember_msg_rows_reply_t *head_p, char *err,
                                 size_t err_length)
{
    memset(out, 0xab, 512);
    ember_status_t status = ember_shard_lookup(table, view, (float *)out, err, err_length);
    if (status == EMBER_OK)
        memcpy(head_p, out, sizeof(*head_p));
    return status;
}

static const uint8_t *states_of(const uint8_t *out)
{
    return out + ember_wire_rows_reply_states_at();
}

/* Step @step's gradient (bag 0 only: rows 3 and 8) applied. */
static int push_bag0(ember_shard_t *table, uint64_t step)
{
    float grad[BAGS * DIM] = {1, 1, 0, 0, 0, 0};
    ember_msg_grad_t head = {
            .table_id = 0, .trainer = 0, .step = step, .flags = EMBER_GRAD_APPLY, .bags = BAGS};
    ember_wire_grad_view_t view = {
            .head = head, .grad = (const uint8_t *)grad, .grad_bytes = sizeof(grad)};
    int applied = 0;
    char err[256];
    CHECK(ember_shard_grad(table, &view, &applied, err, sizeof(err)) == EMBER_OK && applied == 1,
          "grad of step %llu: %s", (unsigned long long)step, err);
    return 0;
}

/* One cached lookup of @rows holding @held at @step (@flags: EVAL or 0)
 * served: its states into @states_out, its head into *@head_p. */
static int serve_step(ember_shard_t *table, uint64_t step, uint32_t flags, const int64_t *rows,
                      const uint64_t *held, uint8_t *states_out, ember_msg_rows_reply_t *head_p)
{
    static uint8_t message[512], out[512];
    ember_wire_lookup_view_t view;
    char err[256];
    CHECK(rows_lookup(message, step, flags, rows, held, &view) == 0, "lookup %llu",
          (unsigned long long)step);
    CHECK(serve_rows(table, &view, out, head_p, err, sizeof(err)) == EMBER_OK, "step %llu: %s",
          (unsigned long long)step, err);
    memcpy(states_out, states_of(out), UNIQUE);
    return 0;
}

#define NONE               EMBER_ROW_NONE
#define STATES(s, a, b, c) ((s)[0] == (a) && (s)[1] == (b) && (s)[2] == (c))

static int case_shard_rows(void)
{
    static uint8_t message[512], out[512];
    ember_wire_lookup_view_t view;
    ember_msg_rows_reply_t head;
    uint8_t st[UNIQUE];
    char err[256];
    /* A = rows 3 8 11, B = 3 8 12 */
    const int64_t a[UNIQUE] = {3, 8, 11}, b[UNIQUE] = {3, 8, 12};
    for (uint32_t staleness = 0; staleness < 2; staleness++) {
        ember_shard_t *table = make_shard(staleness, 0);
        CHECK(table, "shard");
        /* step 0: nothing held: every row fresh, the table's values */
        const uint64_t none[UNIQUE] = {NONE, NONE, NONE};
        CHECK(rows_lookup(message, 0, 0, a, none, &view) == 0, "lookup 0");
        CHECK(serve_rows(table, &view, out, &head, err, sizeof(err)) == EMBER_OK, "step 0: %s",
              err);
        CHECK(head.version == 0 && head.clock == 0 && head.fresh == UNIQUE, "step 0's head");
        float rows[ROWS * DIM];
        CHECK(ember_shard_read(table, 0, ROWS, rows, err, sizeof(err)) == EMBER_OK, "read");
        const float *values = (const float *)(out + ember_wire_rows_reply_values_at(UNIQUE));
        for (int u = 0; u < UNIQUE; u++)
            CHECK(states_of(out)[u] == EMBER_ROW_FRESH &&
                          memcmp(values + u * DIM, rows + a[u] * DIM, DIM * 4) == 0,
                  "row %lld: not its values", (long long)a[u]);
        CHECK(push_bag0(table, 0) == 0, "push 0"); /* every row of the lookup steps */
        /* step 1: an evaluation of A holding clock-0 copies: all changed
         * (an evaluation never takes a stale copy) */
        const uint64_t zero[UNIQUE] = {0, 0, 0};
        CHECK(serve_step(table, 1, EMBER_LOOKUP_EVAL, a, zero, st, &head) == 0, "eval 1");
        CHECK(head.clock == 1 && STATES(st, 2, 2, 2), "eval 1: states %u %u %u", st[0], st[1],
              st[2]);
        /* step 1: B holding the evaluation's copies of 3 and 8: unchanged */
        const uint64_t b_held[UNIQUE] = {1, 1, NONE};
        CHECK(serve_step(table, 1, 0, b, b_held, st, &head) == 0, "step 1");
        CHECK(STATES(st, EMBER_ROW_UNCHANGED, EMBER_ROW_UNCHANGED, EMBER_ROW_FRESH) &&
                      head.fresh == 1,
              "step 1: states %u %u %u", st[0], st[1], st[2]);
        CHECK(push_bag0(table, 1) == 0, "push 1"); /* 3 8 12 step */
        /* step 2: a copy ahead of the table refused, naming it, keeping
         * nothing */
        const uint64_t ahead[UNIQUE] = {1, 9, 1};
        CHECK(rows_lookup(message, 2, 0, a, ahead, &view) == 0, "lookup 2");
        CHECK(serve_rows(table, &view, out, &head, err, sizeof(err)) == EMBER_ERR_BAD_MESSAGE &&
                      strstr(err, "row 8") && strstr(err, "version 9"),
              "a copy ahead: %s", err);
        /* A holding clock-1 copies: 11 unchanged since; 3 and 8 stepped in
         * step 1: fresh, or (staleness 1) standing one step behind */
        const uint64_t ones[UNIQUE] = {1, 1, 1};
        CHECK(serve_step(table, 2, 0, a, ones, st, &head) == 0, "step 2");
        const uint8_t stepped = staleness ? EMBER_ROW_STALE : EMBER_ROW_FRESH;
        CHECK(STATES(st, stepped, stepped, EMBER_ROW_UNCHANGED) && head.clock == 2 &&
                      head.fresh == (staleness ? 0u : 2u),
              "staleness %u, step 2: states %u %u %u", staleness, st[0], st[1], st[2]);
        CHECK(push_bag0(table, 2) == 0, "push 2");
        /* a copy two steps behind stands by no bound here */
        const uint64_t old[UNIQUE] = {1, 1, 3};
        CHECK(serve_step(table, 3, 0, a, old, st, &head) == 0, "step 3");
        CHECK(STATES(st, 2, 2, EMBER_ROW_UNCHANGED), "staleness %u, step 3: states %u %u %u",
              staleness, st[0], st[1], st[2]);
        ember_shard_drop_lookup(table, 0, 3);
        /* after a load every copy comes fresh */
        CHECK(ember_shard_load(table, 0, ROWS, rows, err, sizeof(err)) == EMBER_OK, "load");
        const uint64_t three[UNIQUE] = {3, 3, 3};
        CHECK(serve_step(table, 3, 0, a, three, st, &head) == 0, "step 3 after a load");
        CHECK(head.fresh == UNIQUE, "after a load: %llu fresh", (unsigned long long)head.fresh);
        ember_shard_drop_lookup(table, 0, 3);
        /* a cached lookup alone (a LOOKUP: no version in its reply) */
        CHECK(rows_lookup(message, 3, 0, a, three, &view) == 0, "lookup 3");
        ember_wire_lookups_view_t one = {.head = {.trainer = 0, .count = 1, .step = 3}};
        one.lookups[0] = view;
        size_t reply = 0;
        CHECK(ps_multi_lookups(&table, &one, 0, out, &reply, err, sizeof(err)) ==
                              EMBER_ERR_INVALID_PARAM &&
                      strstr(err, "in a LOOKUPS"),
              "a cached LOOKUP alone: %s", err);
        ember_shard_destroy(table);
    }
    return 0;
}

static int case_dynamic_rows(void)
{
    ember_msg_rows_reply_t head;
    uint8_t st[UNIQUE];
    ember_shard_t *table = make_shard(0, EMBER_TABLE_KIND_DYNAMIC);
    CHECK(table, "dynamic shard");
    /* sorted as the wire's keys: unsigned */
    const int64_t a[UNIQUE] = {8, 1000000007, -5}, b[UNIQUE] = {8, 77, -5};
    const uint64_t none[UNIQUE] = {NONE, NONE, NONE};
    CHECK(serve_step(table, 0, 0, a, none, st, &head) == 0 && head.fresh == UNIQUE, "step 0");
    CHECK(push_bag0(table, 0) == 0, "push 0"); /* each key given a row, and stepped */
    /* a copy made before its key had a row never stands */
    const uint64_t zero[UNIQUE] = {0, 0, 0};
    CHECK(serve_step(table, 1, EMBER_LOOKUP_EVAL, a, zero, st, &head) == 0, "eval 1");
    CHECK(head.fresh == UNIQUE, "eval 1: %llu fresh", (unsigned long long)head.fresh);
    /* the evaluation's copies stand; a key without a row comes fresh */
    const uint64_t b_held[UNIQUE] = {1, 1, 1};
    CHECK(serve_step(table, 1, 0, b, b_held, st, &head) == 0, "step 1");
    CHECK(STATES(st, EMBER_ROW_UNCHANGED, EMBER_ROW_FRESH, EMBER_ROW_UNCHANGED),
          "step 1: states %u %u %u (77 has no row)", st[0], st[1], st[2]);
    CHECK(push_bag0(table, 1) == 0, "push 1");
    const uint64_t ones[UNIQUE] = {1, 1, 1};
    CHECK(serve_step(table, 2, 0, a, ones, st, &head) == 0, "step 2");
    CHECK(STATES(st, EMBER_ROW_FRESH, EMBER_ROW_UNCHANGED, EMBER_ROW_FRESH),
          "step 2: states %u %u %u (keys 8 and -5 stepped, 1000000007 not)", st[0], st[1], st[2]);
    ember_shard_destroy(table);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"clock", case_clock},
            {"random", case_random},
            {"reply_check", case_reply_check},
            {"lookup_flags", case_lookup_flags},
            {"shard_rows", case_shard_rows},
            {"dynamic_rows", case_dynamic_rows},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
