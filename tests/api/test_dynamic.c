/*
 * tests/api/test_dynamic: dynamic embedding tables (include/ember/table.h:
 * ember_table_create_dynamic, _read_keys, _write_keys, _shard_stats) over
 * real PS processes (mp_spawn) and real UCX, looked up by trainers through
 * the ebc (include/ember/lookup.h), sync, staleness 0.  Usage:
 * test_dynamic CASE
 *
 *   same_as_fixed_pP  two trainers, P PS (1, 2, 3): for each optimizer (sgd,
 *                     adagrad, rowwise_adagrad, adam) and pooling (sum,
 *                     mean, max) a dynamic table (admit 1, no budget) looked
 *                     up by raw keys scattered over 64 bits (0, -1,
 *                     INT64_MIN, INT64_MAX, large values) and a fixed table
 *                     looked up by the same keys remapped densely so that
 *                     each keeps its shard (the i-th key of shard p: id
 *                     i * P + p), its initial rows the dynamic table's
 *                     initial values (ember_table_read_keys before any
 *                     step); the same batches and output gradients for 10
 *                     steps: every step's pooled outputs and every key's
 *                     row at the end bit-identical (memcmp)
 *   admission_eviction two trainers, 1 PS: admit_count 2, budget 4, LRU; a
 *                     scripted stream of keys; after each step applied
 *                     (flush + barrier) the keys holding rows
 *                     (read_keys' found) and the shard's counters (rows,
 *                     candidates, admitted, evicted, dropped_grads,
 *                     dropped_candidates) equal a reference of the rules
 *                     (script steps 0-8: admission, LRU eviction with ties
 *                     in the order seen, no room when every row is seen,
 *                     the candidate bound); a new key meeting a full set
 *                     of candidates all seen in its step is not counted
 *                     (engine/ps/table_dyn.c cand_new; not dropped_candidates)
 *   evict_after       the same harness, admit 1, no budget, evict_after 2:
 *                     a row seen at step s goes after step s + 2, and an
 *                     expired key comes back as a fresh row
 *   adversarial_keys  two trainers, 2 PS: 0, 1, -1, INT64_MIN, INT64_MAX
 *                     and 4096 keys differing only in their high bits:
 *                     pooled outputs are the initial values, then the SGD
 *                     trained ones; read_keys agrees; max_probe < 100
 *   refusals          fixed-table calls on a dynamic table and key calls on
 *                     a fixed table refused (ERR_INVALID_PARAM); bad
 *                     dynamic settings refused at create (and the name
 *                     stays free); write_keys with a key twice refused
 */
#include "engine/wire/protocol.h" /* ember_wire_key_shard */
#include "tests/api/api_test.h"

#include <ember/lookup.h>
#include <ember/rng.h>
#include <ember/table.h>

#include <math.h>
#include <stdint.h>

#define LR 0.05f

static ember_job_t *join_or_serve(int trainers, int num_ps, int rank, int *is_ps)
{
    ember_job_t *job = api_test_join(trainers, num_ps);
    *is_ps = ember_job_role(job, rank, NULL) == EMBER_ROLE_PS;
    if (*is_ps)
        api_test_ps(job, EMBER_OK);
    return job;
}

static ember_ebc_t *make_ebc(ember_job_t *job, const ember_feature_t *features, size_t n)
{
    ember_ebc_t *ebc = NULL;
    ember_status_t status = ember_ebc_create(job, features, n, NULL, &ebc);
    MP_CHECK(status == EMBER_OK, "ember_ebc_create: %s", ember_status_string(status));
    return ebc;
}

static ember_table_t *open_table(ember_job_t *job, const char *name)
{
    ember_table_t *t = NULL;
    MP_CHECK(ember_table_open(job, name, &t) == EMBER_OK, "opening %s", name);
    return t;
}

/* ===================================================================== */
/* same_as_fixed                                                          */
/* ===================================================================== */

enum {
    SF_KEYS = 40,  /* the key universe */
    SF_B = 4,      /* bags a feature */
    SF_MAXLEN = 5, /* ids a bag */
    SF_DIM = 3,
    SF_STEPS = 10,
    SF_NOPT = 4,
    SF_NPOOL = 3,
    SF_NF = 2 * SF_NPOOL, /* dynamic sum, mean, max, then fixed sum, mean, max */
    SF_MAXV = SF_NF * SF_B * SF_MAXLEN,
    SF_OUT = SF_NF * SF_B * SF_DIM
};

static const ember_opt_kind_t sf_opts[SF_NOPT] = {EMBER_OPT_SGD, EMBER_OPT_ADAGRAD,
                                                  EMBER_OPT_ROWWISE_ADAGRAD, EMBER_OPT_ADAM};
static const char *const sf_opt_names[SF_NOPT] = {"sgd", "adagrad", "rwadagrad", "adam"};
static const ember_bag_mode_t sf_pools[SF_NPOOL] = {EMBER_BAG_SUM, EMBER_BAG_MEAN, EMBER_BAG_MAX};
static const char *const sf_pool_names[SF_NPOOL] = {"sum", "mean", "max"};

typedef struct {
    int64_t keys[SF_KEYS];
    int64_t dense[SF_KEYS];
    int64_t fixed_rows; /* the fixed tables' size */
} sf_keys_t;

static void sf_make_keys(uint32_t P, sf_keys_t *k)
{
    int n = 0;
    const int64_t special[] = {0,
                               -1,
                               INT64_MIN,
                               INT64_MAX,
                               1,
                               2,
                               INT64_MIN + 1,
                               -2,
                               (int64_t)0x7fffffff,
                               (int64_t)0x100000000ll,
                               (int64_t)0x0123456789abcdefll,
                               (int64_t)0xfedcba9876543210ull};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        k->keys[n++] = special[i];
    ember_rng_t rng;
    ember_rng_seed(&rng, 99, 1);
    while (n < SF_KEYS)
        k->keys[n++] = (int64_t)ember_rng_next(&rng);
    /* Dense ids keeping the shard: the i-th key (in this order) of shard p
     * gets i * P + p. */
    int64_t next[64] = {0};
    k->fixed_rows = 1;
    for (int i = 0; i < SF_KEYS; i++) {
        uint32_t p = ember_wire_key_shard((uint64_t)k->keys[i], P);
        k->dense[i] = next[p]++ * (int64_t)P + p;
        if (k->dense[i] + 1 > k->fixed_rows)
            k->fixed_rows = k->dense[i] + 1;
    }
}

/* Trainer @t's batch of @step: feature f (0..2, dynamic) holds key indices;
 * feature f + 3 the same bags by dense id. */
typedef struct {
    int32_t lengths[SF_NF * SF_B];
    int64_t values[SF_MAXV];
    size_t n;
} sf_batch_t;

static void sf_make_batch(const sf_keys_t *k, uint32_t t, int step, sf_batch_t *b)
{
    int idx[SF_NPOOL][SF_B][SF_MAXLEN];
    int len[SF_NPOOL][SF_B];
    ember_rng_t rng;
    ember_rng_seed(&rng, 1234 + 100 * t + (uint64_t)step, 5);
    for (int f = 0; f < SF_NPOOL; f++)
        for (int bag = 0; bag < SF_B; bag++) {
            len[f][bag] = bag == 3 && step % 3 == 0 ? 0 : (int)ember_rng_int(&rng, 1, SF_MAXLEN);
            for (int i = 0; i < len[f][bag]; i++)
                idx[f][bag][i] = (int)ember_rng_int(&rng, 0, SF_KEYS - 1);
            if (len[f][bag] >= 3) /* a repeated key */
                idx[f][bag][2] = idx[f][bag][0];
        }
    b->n = 0;
    for (int half = 0; half < 2; half++)
        for (int f = 0; f < SF_NPOOL; f++)
            for (int bag = 0; bag < SF_B; bag++) {
                b->lengths[(half * SF_NPOOL + f) * SF_B + bag] = len[f][bag];
                for (int i = 0; i < len[f][bag]; i++)
                    b->values[b->n++] = half ? k->dense[idx[f][bag][i]] : k->keys[idx[f][bag][i]];
            }
}

/* The gradient: the dynamic features' block repeated for the fixed ones. */
static void sf_make_grad(uint32_t t, int step, float *g)
{
    ember_rng_t rng;
    ember_rng_seed(&rng, 555 + 100 * t + (uint64_t)step, 9);
    const size_t half = SF_OUT / 2;
    for (size_t i = 0; i < half; i++) {
        g[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0);
        g[half + i] = g[i];
    }
}

static void sf_name(char *out, size_t n, int fixed, int o, int f)
{
    snprintf(out, n, "%s_%s_%s", fixed ? "fix" : "dyn", sf_opt_names[o], sf_pool_names[f]);
}

static int run_same_as_fixed(int rank, uint32_t P)
{
    int is_ps;
    ember_job_t *job = join_or_serve(2, (int)P, rank, &is_ps);
    if (is_ps)
        return 0;
    sf_keys_t k;
    sf_make_keys(P, &k);
    ember_table_t *tables[SF_NOPT][SF_NF];
    char name[EMBER_TABLE_NAME_MAX];
    if (rank == 0) {
        for (int o = 0; o < SF_NOPT; o++)
            for (int f = 0; f < SF_NPOOL; f++) {
                ember_table_config_t c;
                ember_table_dynamic_t d;
                ember_table_config_init(&c);
                ember_table_dynamic_init(&d);
                sf_name(name, sizeof(name), 0, o, f);
                c.name = name;
                c.num_embeddings = 1000;
                c.embedding_dim = SF_DIM;
                c.init = EMBER_TABLE_INIT_NORMAL;
                c.seed = 7 + (uint64_t)(o * 3 + f);
                ember_opt_config_default(sf_opts[o], LR, &c.optimizer);
                ember_status_t st = ember_table_create_dynamic(job, &c, &d, &tables[o][f]);
                MP_CHECK(st == EMBER_OK, "creating %s: %s", name, ember_status_string(st));
                /* The fixed twin: the dynamic table's initial values at the
                 * dense ids. */
                float init[SF_KEYS * SF_DIM];
                uint8_t found[SF_KEYS];
                MP_CHECK(ember_table_read_keys(tables[o][f], k.keys, SF_KEYS, init, found) ==
                                 EMBER_OK,
                         "read_keys of %s before training", name);
                for (int i = 0; i < SF_KEYS; i++)
                    MP_CHECK(found[i] == 0, "%s: key %lld found before training", name,
                             (long long)k.keys[i]);
                float *rows = calloc((size_t)k.fixed_rows * SF_DIM, sizeof(float));
                MP_CHECK(rows, "out of memory");
                for (int64_t r = 0; r < k.fixed_rows * SF_DIM; r++)
                    rows[r] = 100.0f + (float)r; /* unused rows: anything */
                for (int i = 0; i < SF_KEYS; i++)
                    memcpy(rows + k.dense[i] * SF_DIM, init + i * SF_DIM, SF_DIM * sizeof(float));
                sf_name(name, sizeof(name), 1, o, f);
                c.name = name;
                c.num_embeddings = k.fixed_rows;
                c.init = EMBER_TABLE_INIT_ROWS;
                c.initial_rows = rows;
                st = ember_table_create(job, &c, &tables[o][SF_NPOOL + f]);
                MP_CHECK(st == EMBER_OK, "creating %s: %s", name, ember_status_string(st));
                free(rows);
            }
    } else {
        for (int o = 0; o < SF_NOPT; o++)
            for (int h = 0; h < SF_NF; h++) {
                sf_name(name, sizeof(name), h >= SF_NPOOL, o, h % SF_NPOOL);
                tables[o][h] = open_table(job, name);
            }
    }
    const uint32_t t = (uint32_t)rank;
    for (int o = 0; o < SF_NOPT; o++) {
        ember_feature_t features[SF_NF];
        for (int h = 0; h < SF_NF; h++)
            features[h] = (ember_feature_t){.name = NULL,
                                            .table = tables[o][h],
                                            .pooling = sf_pools[h % SF_NPOOL],
                                            .padding_idx = -1};
        ember_ebc_t *ebc = make_ebc(job, features, SF_NF);
        MP_CHECK(ember_ebc_output_size(ebc, SF_B) == SF_OUT, "output size");
        for (int s = 0; s < SF_STEPS; s++) {
            sf_batch_t b;
            sf_make_batch(&k, t, s, &b);
            ember_kjt_t kjt = {.num_features = SF_NF,
                               .batch_size = SF_B,
                               .values = b.values,
                               .lengths = b.lengths,
                               .num_values = b.n};
            ember_lookup_t *lk;
            float out[SF_OUT], g[SF_OUT];
            ember_status_t st = ember_ebc_lookup(ebc, &kjt, 0, &lk);
            MP_CHECK(st == EMBER_OK, "%s trainer %u step %d: lookup: %s", sf_opt_names[o], t, s,
                     ember_status_string(st));
            st = ember_lookup_wait(lk, out, NULL);
            MP_CHECK(st == EMBER_OK, "%s trainer %u step %d: wait: %s", sf_opt_names[o], t, s,
                     ember_status_string(st));
            for (int f = 0; f < SF_NPOOL; f++) {
                const size_t dyn = ember_ebc_output_offset(ebc, (size_t)f, SF_B);
                const size_t fix = ember_ebc_output_offset(ebc, (size_t)(SF_NPOOL + f), SF_B);
                for (size_t i = 0; i < SF_B * SF_DIM; i++)
                    MP_CHECK(memcmp(&out[dyn + i], &out[fix + i], sizeof(float)) == 0,
                             "P=%u %s %s trainer %u step %d: pooled value %zu: dynamic %.9g, "
                             "fixed %.9g",
                             P, sf_opt_names[o], sf_pool_names[f], t, s, i, (double)out[dyn + i],
                             (double)out[fix + i]);
            }
            sf_make_grad(t, s, g);
            st = ember_lookup_backward(lk, g, s + 1 == SF_STEPS ? EMBER_BACKWARD_WAIT : 0);
            MP_CHECK(st == EMBER_OK, "backward: %s", ember_status_string(st));
            ember_lookup_release(lk);
        }
        MP_CHECK(ember_ebc_flush(ebc) == EMBER_OK, "flush");
        MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier");
        for (int f = 0; f < SF_NPOOL; f++) {
            float dyn[SF_KEYS * SF_DIM];
            uint8_t found[SF_KEYS];
            float *fix = malloc((size_t)k.fixed_rows * SF_DIM * sizeof(float));
            MP_CHECK(fix, "out of memory");
            MP_CHECK(ember_table_read_keys(tables[o][f], k.keys, SF_KEYS, dyn, found) == EMBER_OK,
                     "read_keys");
            MP_CHECK(ember_table_read_rows(tables[o][SF_NPOOL + f], 0, k.fixed_rows, fix) ==
                             EMBER_OK,
                     "read_rows");
            int differ = 0;
            for (int i = 0; i < SF_KEYS; i++)
                if (memcmp(dyn + i * SF_DIM, fix + k.dense[i] * SF_DIM, SF_DIM * sizeof(float)) !=
                    0) {
                    if (differ++ < 5)
                        fprintf(stderr,
                                "P=%u %s %s: key %lld (dense %lld, found %d): dynamic "
                                "[%.9g %.9g %.9g], fixed [%.9g %.9g %.9g]\n",
                                P, sf_opt_names[o], sf_pool_names[f], (long long)k.keys[i],
                                (long long)k.dense[i], found[i], (double)dyn[i * SF_DIM],
                                (double)dyn[i * SF_DIM + 1], (double)dyn[i * SF_DIM + 2],
                                (double)fix[k.dense[i] * SF_DIM],
                                (double)fix[k.dense[i] * SF_DIM + 1],
                                (double)fix[k.dense[i] * SF_DIM + 2]);
                }
            MP_CHECK(differ == 0, "P=%u %s %s: %d of %d keys' rows differ after %d steps", P,
                     sf_opt_names[o], sf_pool_names[f], differ, SF_KEYS, SF_STEPS);
            free(fix);
        }
        MP_CHECK(ember_job_barrier(job, "checked") == EMBER_OK, "barrier");
        ember_ebc_destroy(ebc);
    }
    for (int o = 0; o < SF_NOPT; o++)
        for (int h = 0; h < SF_NF; h++)
            ember_table_close(tables[o][h]);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int same_as_fixed_p1(int rank, int world, void *arg)
{
    return run_same_as_fixed(rank, 1);
}
static int same_as_fixed_p2(int rank, int world, void *arg)
{
    return run_same_as_fixed(rank, 2);
}
static int same_as_fixed_p3(int rank, int world, void *arg)
{
    return run_same_as_fixed(rank, 3);
}

/* ===================================================================== */
/* admission_eviction                                                     */
/* ===================================================================== */

enum {
    AE_MAXK = 8,
    AE_UNIV = 32
};

/* One step of the script: each trainer's keys (one bag, sum), -1 ends. */
typedef struct {
    int64_t keys[2][AE_MAXK];
} ae_step_t;

/* admit 2, budget 4, LRU, 1 PS.  The comments: what the rules give. */
static const ae_step_t ae_script[] = {
        /* 0: 10 seen twice: admitted; 11, 12, 13 candidates; grads of
         * 11 (t0), 12, 13 (t1) dropped */
        {{{10, 10, 11, -1}, {12, 13, -1}}},
        /* 1: 11, 12, 13 admitted (4 rows: full); 14 a candidate */
        {{{11, 12, -1}, {13, 14, -1}}},
        /* 2: 14 and 15 reach 2: the budget full, rows not seen in step 2
         * go, LRU: 10 (seen at 0), then 11 (seen at 1 first) */
        {{{14, 15, 15, -1}, {16, -1}}},
        /* 3: 16 reaches 2 but every row is seen in step 3: no room, it
         * stays a candidate and its gradient is dropped */
        {{{16, -1}, {12, 13, 14, 15, -1}}},
        /* 4: 16 admitted; 13, 14, 15 were last seen at 3 (in that order),
         * 12 is seen now: 13 goes */
        {{{16, 12, -1}, {-1}}},
        /* 5: six new keys, room for 4 candidates and none of them may go
         * (all seen in step 5): 20..23 counted, 24 and 25 not counted at
         * all (nothing dropped: only candidates not seen in the step are) */
        {{{20, 21, 22, 23, 24, -1}, {25, -1}}},
        /* 6: the rows seen again; 26 new: candidate 20 (the least recently
         * seen) dropped for it */
        {{{12, 14, -1}, {15, 16, 26, -1}}},
        /* 7: 24 again: a new candidate (21 dropped), seen once: no row (had
         * step 5 counted it, it would be admitted now) */
        {{{24, -1}, {-1}}},
        /* 8: 24 a second time: admitted; LRU among 12, 14 (t0 at 6), 15, 16
         * (t1 at 6): 12 goes */
        {{{24, -1}, {22, -1}}},
};

/* admit 1, no budget, evict_after 2 */
static const ae_step_t ae_after_script[] = {
        {{{1, 2, -1}, {3, -1}}}, /* 0: 1, 2, 3 admitted */
        {{{1, -1}, {2, -1}}},    /* 1 */
        {{{1, -1}, {-1}}},       /* 2: 3 (seen at 0) goes after step 2 */
        {{{4, -1}, {-1}}},       /* 3: 4 admitted; 2 (seen at 1) goes */
        {{{3, -1}, {-1}}},       /* 4: 3 admitted again; 1 (seen at 2) goes */
        {{{4, 3, -1}, {3, -1}}}, /* 5: nothing changes */
};

typedef struct {
    const char *table;
    uint32_t admit, evict_after;
    int budget; /* 0: none */
    const ae_step_t *script;
    int steps;
} ae_setup_t;

static const ae_setup_t ae_lru = {
        "lru", 2, 0, 4, ae_script, (int)(sizeof(ae_script) / sizeof(ae_script[0]))};
static const ae_setup_t ae_after = {"after",
                                    1,
                                    2,
                                    0,
                                    ae_after_script,
                                    (int)(sizeof(ae_after_script) / sizeof(ae_after_script[0]))};

/* The reference's state per key. */
typedef struct {
    int64_t key;
    int row;        /* holds a row */
    int cand;       /* a candidate */
    uint64_t count; /* occurrences while a candidate */
    int64_t seen;   /* last step seen, -1 never */
    uint64_t order; /* when first seen in that step (ties) */
} ae_key_t;

typedef struct {
    ae_key_t k[AE_UNIV];
    int n;
    uint64_t admitted, evicted, dropped_grads, dropped_candidates;
    uint64_t tick;
} ae_ref_t;

static ae_key_t *ae_get(ae_ref_t *r, int64_t key)
{
    for (int i = 0; i < r->n; i++)
        if (r->k[i].key == key)
            return &r->k[i];
    MP_CHECK(r->n < AE_UNIV, "reference full");
    r->k[r->n] = (ae_key_t){.key = key, .seen = -1};
    return &r->k[r->n++];
}

static int ae_count(const ae_ref_t *r, int rows)
{
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += rows ? r->k[i].row : r->k[i].cand;
    return n;
}

/* The rules, for 1 PS, LRU (budget 0: none). */
static void ae_ref_step(ae_ref_t *r, const ae_step_t *st, int step, const ae_setup_t *su)
{
    const int budget = su->budget > 0 ? su->budget : 1 << 30;
    /* count, trainer order, each trainer's distinct keys in the order given
     * (the script gives them ascending, as the PS sorts them) */
    ae_key_t *newly[2 * AE_MAXK];
    int nnew = 0;
    for (int t = 0; t < 2; t++)
        for (int i = 0; st->keys[t][i] >= 0; i++) {
            int first = 1, hits = 0;
            for (int j = 0; st->keys[t][j] >= 0; j++) {
                first &= !(j < i && st->keys[t][j] == st->keys[t][i]);
                hits += st->keys[t][j] == st->keys[t][i];
            }
            if (!first)
                continue;
            ae_key_t *e = ae_get(r, st->keys[t][i]);
            if (!e->row && !e->cand) {
                /* a new candidate: one not seen in this step makes room, or
                 * the key is not counted */
                if (ae_count(r, 0) >= budget) {
                    ae_key_t *victim = NULL;
                    for (int v = 0; v < r->n; v++) {
                        ae_key_t *c = &r->k[v];
                        if (c->cand && c->seen != step &&
                            (!victim || c->seen < victim->seen ||
                             (c->seen == victim->seen && c->order < victim->order)))
                            victim = c;
                    }
                    if (!victim)
                        continue;
                    victim->cand = 0;
                    victim->count = 0;
                    r->dropped_candidates++;
                }
                e->cand = 1;
                e->count = 0;
            }
            e->order = r->tick++;
            e->seen = step;
            if (!e->row) {
                e->count += (uint64_t)hits;
                if (e->count >= su->admit) {
                    int dup = 0;
                    for (int j = 0; j < nnew; j++)
                        dup |= newly[j] == e;
                    if (!dup)
                        newly[nnew++] = e;
                }
            }
        }
    for (int j = 0; j < nnew; j++) {
        ae_key_t *e = newly[j];
        if (ae_count(r, 1) >= budget) {
            ae_key_t *victim = NULL;
            for (int i = 0; i < r->n; i++) {
                ae_key_t *v = &r->k[i];
                if (!v->row || v->seen == step)
                    continue;
                if (!victim || v->seen < victim->seen ||
                    (v->seen == victim->seen && v->order < victim->order))
                    victim = v;
            }
            if (!victim)
                continue; /* no room: stays a candidate */
            victim->row = 0;
            victim->count = 0;
            r->evicted++;
        }
        e->row = 1;
        e->cand = 0;
        e->count = 0;
        r->admitted++;
    }
    /* each trainer's gradient rows (its distinct keys) without a row */
    for (int t = 0; t < 2; t++)
        for (int i = 0; st->keys[t][i] >= 0; i++) {
            int first = 1;
            for (int j = 0; j < i; j++)
                first &= st->keys[t][j] != st->keys[t][i];
            if (first && !ae_get(r, st->keys[t][i])->row)
                r->dropped_grads++;
        }
    /* then rows and candidates unseen for evict_after steps go */
    if (su->evict_after)
        for (int i = 0; i < r->n; i++) {
            ae_key_t *v = &r->k[i];
            if ((v->row || v->cand) && step - v->seen >= (int64_t)su->evict_after) {
                if (v->row)
                    r->evicted++;
                else
                    r->dropped_candidates++;
                v->row = v->cand = 0;
                v->count = 0;
            }
        }
}

static int run_admission(int rank, const ae_setup_t *su)
{
    const ae_step_t *const script = su->script;
    int is_ps;
    ember_job_t *job = join_or_serve(2, 1, rank, &is_ps);
    if (is_ps)
        return 0;
    const uint32_t t = (uint32_t)rank;
    ember_table_t *table;
    if (rank == 0) {
        ember_table_config_t c;
        ember_table_dynamic_t d;
        ember_table_config_init(&c);
        ember_table_dynamic_init(&d);
        c.name = su->table;
        c.num_embeddings = 100;
        c.embedding_dim = 2;
        d.admit_count = su->admit;
        d.budget_rows = su->budget;
        d.evict_after = su->evict_after;
        d.evict = EMBER_EVICT_LRU;
        ember_status_t st = ember_table_create_dynamic(job, &c, &d, &table);
        MP_CHECK(st == EMBER_OK, "creating lru: %s", ember_status_string(st));
    } else {
        table = open_table(job, su->table);
    }
    ember_feature_t feature = {
            .name = "f", .table = table, .pooling = EMBER_BAG_SUM, .padding_idx = -1};
    ember_ebc_t *ebc = make_ebc(job, &feature, 1);
    ae_ref_t ref;
    memset(&ref, 0, sizeof(ref));
    int64_t universe[AE_UNIV];
    int nu = 0;
    for (int s = 0; s < su->steps; s++)
        for (int tt = 0; tt < 2; tt++)
            for (int i = 0; script[s].keys[tt][i] >= 0; i++) {
                int dup = 0;
                for (int j = 0; j < nu; j++)
                    dup |= universe[j] == script[s].keys[tt][i];
                if (!dup)
                    universe[nu++] = script[s].keys[tt][i];
            }
    for (int s = 0; s < su->steps; s++) {
        int32_t len = 0;
        while (script[s].keys[t][len] >= 0)
            len++;
        ember_kjt_t kjt = {.num_features = 1,
                           .batch_size = 1,
                           .values = script[s].keys[t],
                           .lengths = &len,
                           .num_values = (size_t)len};
        ember_lookup_t *lk;
        float out[2], g[2] = {0.5f, -0.25f};
        MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &lk) == EMBER_OK, "lookup of step %d", s);
        MP_CHECK(ember_lookup_wait(lk, out, NULL) == EMBER_OK, "wait of step %d", s);
        MP_CHECK(ember_lookup_backward(lk, g, EMBER_BACKWARD_WAIT) == EMBER_OK,
                 "backward of step %d", s);
        ember_lookup_release(lk);
        MP_CHECK(ember_ebc_flush(ebc) == EMBER_OK, "flush");
        char bname[32];
        snprintf(bname, sizeof(bname), "step%d", s);
        MP_CHECK(ember_job_barrier(job, bname) == EMBER_OK, "barrier");
        ae_ref_step(&ref, &script[s], s, su);
        float rows[AE_UNIV * 2];
        uint8_t found[AE_UNIV];
        MP_CHECK(ember_table_read_keys(table, universe, (size_t)nu, rows, found) == EMBER_OK,
                 "read_keys after step %d", s);
        char got[256] = "", want[256] = "";
        for (int i = 0; i < nu; i++) {
            if (found[i])
                snprintf(got + strlen(got), sizeof(got) - strlen(got), " %lld",
                         (long long)universe[i]);
            if (ae_get(&ref, universe[i])->row)
                snprintf(want + strlen(want), sizeof(want) - strlen(want), " %lld",
                         (long long)universe[i]);
        }
        MP_CHECK(strcmp(got, want) == 0,
                 "trainer %u after step %d: rows held {%s }, the rules give {%s }", t, s, got,
                 want);
        ember_table_stats_t stats;
        MP_CHECK(ember_table_shard_stats(table, 0, &stats) == EMBER_OK, "shard_stats");
        MP_CHECK(su->budget == 0 || stats.rows <= (uint64_t)su->budget,
                 "after step %d: %llu rows, budget %d", s, (unsigned long long)stats.rows,
                 su->budget);
        MP_CHECK(stats.rows == (uint64_t)ae_count(&ref, 1) &&
                         stats.candidates == (uint64_t)ae_count(&ref, 0) &&
                         stats.admitted == ref.admitted && stats.evicted == ref.evicted &&
                         stats.dropped_grads == ref.dropped_grads &&
                         stats.dropped_candidates == ref.dropped_candidates,
                 "after step %d: rows %llu candidates %llu admitted %llu evicted %llu "
                 "dropped_grads %llu dropped_candidates %llu; the rules give %d %d %llu %llu "
                 "%llu %llu",
                 s, (unsigned long long)stats.rows, (unsigned long long)stats.candidates,
                 (unsigned long long)stats.admitted, (unsigned long long)stats.evicted,
                 (unsigned long long)stats.dropped_grads,
                 (unsigned long long)stats.dropped_candidates, ae_count(&ref, 1), ae_count(&ref, 0),
                 (unsigned long long)ref.admitted, (unsigned long long)ref.evicted,
                 (unsigned long long)ref.dropped_grads, (unsigned long long)ref.dropped_candidates);
        MP_CHECK(ember_job_barrier(job, "read") == EMBER_OK, "barrier");
    }
    ember_ebc_destroy(ebc);
    ember_table_close(table);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int admission_eviction(int rank, int world, void *arg)
{
    return run_admission(rank, &ae_lru);
}

static int evict_after(int rank, int world, void *arg)
{
    return run_admission(rank, &ae_after);
}

/* ===================================================================== */
/* adversarial_keys                                                       */
/* ===================================================================== */

enum {
    AK_HIGH = 4096,
    AK_N = 5 + AK_HIGH,
    AK_DIM = 4
};

static void ak_keys(int64_t *keys)
{
    keys[0] = 0;
    keys[1] = 1;
    keys[2] = -1;
    keys[3] = INT64_MIN;
    keys[4] = INT64_MAX;
    for (uint64_t i = 0; i < AK_HIGH; i++) /* bits 52..63 differ, the rest 0x...0042 */
        keys[5 + i] = (int64_t)((i << 52) | 0x42u);
}

static void ak_grad(uint32_t t, float *g)
{
    ember_rng_t rng;
    ember_rng_seed(&rng, 31 + t, 2);
    for (size_t i = 0; i < (size_t)AK_N * AK_DIM; i++)
        g[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0);
}

static int adversarial_keys(int rank, int world, void *arg)
{
    int is_ps;
    ember_job_t *job = join_or_serve(2, 2, rank, &is_ps);
    if (is_ps)
        return 0;
    const uint32_t t = (uint32_t)rank;
    ember_table_t *table;
    if (rank == 0) {
        ember_table_config_t c;
        ember_table_dynamic_t d;
        ember_table_config_init(&c);
        ember_table_dynamic_init(&d);
        c.name = "adv";
        c.num_embeddings = 1 << 20;
        c.embedding_dim = AK_DIM;
        c.seed = 3;
        ember_opt_config_default(EMBER_OPT_SGD, LR, &c.optimizer);
        ember_status_t st = ember_table_create_dynamic(job, &c, &d, &table);
        MP_CHECK(st == EMBER_OK, "creating adv: %s", ember_status_string(st));
    } else {
        table = open_table(job, "adv");
    }
    int64_t *keys = malloc(AK_N * sizeof(int64_t));
    int32_t *lengths = malloc(AK_N * sizeof(int32_t));
    float *init = malloc((size_t)AK_N * AK_DIM * sizeof(float));
    float *out = malloc((size_t)AK_N * AK_DIM * sizeof(float));
    float *g0 = malloc((size_t)AK_N * AK_DIM * sizeof(float));
    float *g1 = malloc((size_t)AK_N * AK_DIM * sizeof(float));
    float *rows = malloc((size_t)AK_N * AK_DIM * sizeof(float));
    uint8_t *found = malloc(AK_N);
    MP_CHECK(keys && lengths && init && out && g0 && g1 && rows && found, "out of memory");
    ak_keys(keys);
    for (int i = 0; i < AK_N; i++)
        lengths[i] = 1;
    MP_CHECK(ember_table_read_keys(table, keys, AK_N, init, found) == EMBER_OK, "read_keys");
    for (int i = 0; i < AK_N; i++)
        MP_CHECK(!found[i], "key %lld found before any step", (long long)keys[i]);
    /* the initial values are N(0,1) draws: not all zero, not all alike */
    MP_CHECK(memcmp(init, init + AK_DIM, AK_DIM * sizeof(float)) != 0 &&
                     memcmp(init + 5 * AK_DIM, init + 6 * AK_DIM, AK_DIM * sizeof(float)) != 0,
             "keys given the same initial values");
    ember_feature_t feature = {
            .name = "adv", .table = table, .pooling = EMBER_BAG_SUM, .padding_idx = -1};
    ember_ebc_t *ebc = make_ebc(job, &feature, 1);
    ak_grad(0, g0);
    ak_grad(1, g1);
    ember_kjt_t kjt = {.num_features = 1,
                       .batch_size = AK_N,
                       .values = keys,
                       .lengths = lengths,
                       .num_values = AK_N};
    for (int s = 0; s < 2; s++) {
        ember_lookup_t *lk;
        ember_status_t st = ember_ebc_lookup(ebc, &kjt, 0, &lk);
        MP_CHECK(st == EMBER_OK, "lookup of step %d: %s", s, ember_status_string(st));
        MP_CHECK(ember_lookup_wait(lk, out, NULL) == EMBER_OK, "wait of step %d", s);
        if (s == 1) {
            MP_CHECK(ember_table_read_keys(table, keys, AK_N, rows, found) == EMBER_OK,
                     "read_keys");
        }
        for (int i = 0; i < AK_N; i++) {
            for (int d = 0; d < AK_DIM; d++) {
                const size_t at = (size_t)i * AK_DIM + d;
                float want = s == 0 ? init[at] : init[at] - LR * (g0[at] + g1[at]);
                MP_CHECK(fabsf(out[at] - want) <= 1e-6f * (1.0f + fabsf(want)),
                         "trainer %u step %d: key %lld (0x%016llx) value %d: %.9g, want %.9g", t, s,
                         (long long)keys[i], (unsigned long long)keys[i], d, (double)out[at],
                         (double)want);
                if (s == 1)
                    MP_CHECK(found[i] && memcmp(&rows[at], &out[at], sizeof(float)) == 0,
                             "key %lld: read_keys found %d value %.9g, the lookup %.9g",
                             (long long)keys[i], found[i], (double)rows[at], (double)out[at]);
            }
        }
        MP_CHECK(ember_lookup_backward(lk, t ? g1 : g0, EMBER_BACKWARD_WAIT) == EMBER_OK,
                 "backward of step %d", s);
        ember_lookup_release(lk);
    }
    MP_CHECK(ember_ebc_flush(ebc) == EMBER_OK, "flush");
    MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier");
    uint64_t total = 0;
    for (uint32_t p = 0; p < 2; p++) {
        ember_table_stats_t stats;
        MP_CHECK(ember_table_shard_stats(table, p, &stats) == EMBER_OK, "stats of shard %u", p);
        total += stats.rows;
        MP_CHECK(stats.max_probe < 100, "shard %u: max_probe %u (mean %.2f, load %.2f)", p,
                 stats.max_probe, stats.mean_probe, stats.load_factor);
        MP_CHECK(stats.dropped_grads == 0 && stats.evicted == 0,
                 "shard %u: dropped %llu evicted %llu", p, (unsigned long long)stats.dropped_grads,
                 (unsigned long long)stats.evicted);
        if (t == 0)
            printf("shard %u: rows %llu max_probe %u mean_probe %.3f load %.3f\n", p,
                   (unsigned long long)stats.rows, stats.max_probe, stats.mean_probe,
                   stats.load_factor);
    }
    MP_CHECK(total == AK_N, "%llu rows held, want %d", (unsigned long long)total, AK_N);
    MP_CHECK(ember_job_barrier(job, "checked") == EMBER_OK, "barrier");
    ember_ebc_destroy(ebc);
    ember_table_close(table);
    free(keys);
    free(lengths);
    free(init);
    free(out);
    free(g0);
    free(g1);
    free(rows);
    free(found);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ===================================================================== */
/* refusals                                                               */
/* ===================================================================== */

static int refusals(int rank, int world, void *arg)
{
    int is_ps;
    ember_job_t *job = join_or_serve(1, 1, rank, &is_ps);
    if (is_ps)
        return 0;
    ember_table_config_t c;
    ember_table_dynamic_t d;
    ember_table_t *dyn = NULL, *fix = NULL, *bad = NULL;
    ember_status_t st;
    ember_table_config_init(&c);
    c.name = "dyn";
    c.num_embeddings = 10;
    c.embedding_dim = 2;

    /* bad dynamic settings */
    struct {
        const char *what;
        uint32_t admit;
        int64_t budget;
        ember_evict_t evict;
        float decay;
        ember_table_init_t init;
    } bads[] = {
            {"admit_count 0", 0, 0, EMBER_EVICT_LRU, 1.0f, EMBER_TABLE_INIT_NORMAL},
            {"a negative budget", 1, -1, EMBER_EVICT_LRU, 1.0f, EMBER_TABLE_INIT_NORMAL},
            {"lfu_decay 0", 1, 4, EMBER_EVICT_LFU, 0.0f, EMBER_TABLE_INIT_NORMAL},
            {"lfu_decay 1.5", 1, 4, EMBER_EVICT_LFU, 1.5f, EMBER_TABLE_INIT_NORMAL},
            {"an unknown eviction", 1, 4, (ember_evict_t)7, 1.0f, EMBER_TABLE_INIT_NORMAL},
            {"init ROWS", 1, 0, EMBER_EVICT_LRU, 1.0f, EMBER_TABLE_INIT_ROWS},
    };
    float ten_rows[20] = {0};
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        ember_table_dynamic_init(&d);
        d.admit_count = bads[i].admit;
        d.budget_rows = bads[i].budget;
        d.evict = bads[i].evict;
        d.lfu_decay = bads[i].decay;
        c.init = bads[i].init;
        c.initial_rows = bads[i].init == EMBER_TABLE_INIT_ROWS ? ten_rows : NULL;
        bad = NULL;
        st = ember_table_create_dynamic(job, &c, &d, &bad);
        MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "create_dynamic with %s: %s, want INVALID_PARAM",
                 bads[i].what, ember_status_string(st));
        MP_CHECK(bad == NULL, "create_dynamic with %s left a handle", bads[i].what);
    }
    c.init = EMBER_TABLE_INIT_NORMAL;
    c.initial_rows = NULL;
    ember_table_dynamic_init(&d);
    st = ember_table_create_dynamic(job, &c, &d, &dyn); /* the name is still free */
    MP_CHECK(st == EMBER_OK, "create_dynamic after the refusals: %s", ember_status_string(st));
    MP_CHECK(ember_table_dynamic(dyn) && ember_table_dynamic(dyn)->admit_count == 1,
             "ember_table_dynamic of a dynamic table");
    c.name = "fix";
    st = ember_table_create(job, &c, &fix);
    MP_CHECK(st == EMBER_OK, "create fixed: %s", ember_status_string(st));
    MP_CHECK(ember_table_dynamic(fix) == NULL, "ember_table_dynamic of a fixed table");

    float rows[8] = {0};
    int64_t keys[4] = {1, -1, 5, 1};
    uint8_t found[4];
    ember_table_stats_t stats;
    /* fixed-table calls on the dynamic table */
    st = ember_table_read_rows(dyn, 0, 2, rows);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "read_rows on a dynamic table: %s",
             ember_status_string(st));
    st = ember_table_write_rows(dyn, 0, 2, rows);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "write_rows on a dynamic table: %s",
             ember_status_string(st));
    /* key calls on the fixed table */
    st = ember_table_read_keys(fix, keys, 2, rows, found);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "read_keys on a fixed table: %s",
             ember_status_string(st));
    st = ember_table_write_keys(fix, keys, 2, rows);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "write_keys on a fixed table: %s",
             ember_status_string(st));
    st = ember_table_shard_stats(fix, 0, &stats);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "shard_stats on a fixed table: %s",
             ember_status_string(st));
    /* bad key calls on the dynamic table */
    st = ember_table_shard_stats(dyn, 1, &stats);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "shard_stats of shard 1 of 1: %s",
             ember_status_string(st));
    st = ember_table_write_keys(dyn, keys, 4, rows); /* key 1 twice */
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "write_keys with a key twice: %s",
             ember_status_string(st));
    st = ember_table_read_keys(dyn, keys, 3, rows, found);
    MP_CHECK(st == EMBER_OK, "read_keys: %s", ember_status_string(st));
    MP_CHECK(!found[0] && !found[1] && !found[2], "the refused write_keys wrote keys");
    MP_CHECK(ember_table_shard_stats(dyn, 0, &stats) == EMBER_OK && stats.rows == 0,
             "rows after the refused write");
    st = ember_table_read_keys(dyn, NULL, 2, rows, found);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "read_keys with NULL keys: %s",
             ember_status_string(st));
    /* and a good write: 3 rows held, read back */
    const float vals[6] = {1, 2, 3, 4, 5, 6};
    st = ember_table_write_keys(dyn, keys, 3, vals);
    MP_CHECK(st == EMBER_OK, "write_keys: %s", ember_status_string(st));
    MP_CHECK(ember_table_read_keys(dyn, keys, 3, rows, found) == EMBER_OK, "read_keys");
    MP_CHECK(found[0] && found[1] && found[2] && memcmp(rows, vals, sizeof(vals)) == 0,
             "write_keys then read_keys");
    MP_CHECK(ember_table_destroy(dyn) == EMBER_OK && ember_table_destroy(fix) == EMBER_OK,
             "destroy");
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static const mp_case_t cases[] = {
        {"same_as_fixed_p1", same_as_fixed_p1, 3, 0},
        {"same_as_fixed_p2", same_as_fixed_p2, 4, 0},
        {"same_as_fixed_p3", same_as_fixed_p3, 5, 0},
        {"admission_eviction", admission_eviction, 3, 0},
        {"evict_after", evict_after, 3, 0},
        {"adversarial_keys", adversarial_keys, 4, 0},
        {"refusals", refusals, 2, 0},
};

int main(int argc, char **argv)
{
    return mp_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 200.0);
}
