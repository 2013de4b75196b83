/*
 * tests/api/test_cache: the trainer's row cache (ember_ebc_set_cache_rows,
 * <ember/lookup.h>) over real processes.  Usage: test_cache CASE
 *
 *   same_pP      two trainers, P PS (1, 2, 3), sync, staleness 0: twin
 *                tables (the same seed, so the same initial rows), one set
 *                looked up by an ebc with a row cache of 24 rows, the
 *                other by one without; fixed and dynamic tables, sum
 *                (with a padding_idx), max, mean and weighted sum, SGD and
 *                Adagrad; the same skewed batches and output gradients for
 *                12 steps, an evaluation every third: every step's pooled
 *                outputs (training and evaluation) and every row at the
 *                end bit-identical (memcmp), and the cache hit (the
 *                evaluations' rows are unchanged at the next step), so
 *                the test cannot pass with it off
 *   bound_sK     two trainers, 2 PS, sync, staleness K (1, 2), a skewed
 *                stream, first pipelined (the next step's lookups made
 *                before this one's wait): hits > 0 and no copy used more
 *                than K steps behind its step (the engine refuses a reply
 *                that says otherwise; stats.oldest <= K); then in lockstep
 *                (each step applied before the next is looked up, so every
 *                copy made since stands by the bound alone): hits by
 *                staleness, the oldest exactly K steps behind; all along
 *                the pooled outputs within 0.5 of the uncached twin's
 *                (they differ by at most K steps' SGD updates of lr 0.01)
 *   async_p2     as same_p2 with async tables and one trainer (whose pushes
 *                and lookups reach each PS in order, so the run is
 *                deterministic): the same bits, the cache hit (a copy
 *                stands while no gradient was applied to its row since)
 *   refusals     fp16 replies, a cache after a lookup, 2^30 + 1 rows:
 *                refused (ERR_INVALID_PARAM) naming the table or what was
 *                wrong; 0 turns it off; an ebc without a cache reports
 *                zeros; max pooling taken
 */
#include "tests/api/api_test.h"

#include <ember/lookup.h>
#include <ember/rng.h>
#include <ember/table.h>

#include <math.h>
#include <stdint.h>

enum {
    C_ROWS = 60, /* fixed tables' rows, and the dynamic ones' key universe */
    C_DIM = 4,
    C_B = 5,      /* bags a feature */
    C_MAXLEN = 4, /* ids a bag */
    C_STEPS = 12,
    C_CACHE = 24,
    C_NF = 4, /* fixed sum (padding 3), fixed max, dynamic sum, dynamic mean */
    C_MAXV = C_NF * C_B * C_MAXLEN,
    C_OUT = C_NF * C_B * C_DIM
};

static ember_job_t *join_or_serve(int trainers, int num_ps, int rank, int *is_ps)
{
    ember_job_t *job = api_test_join(trainers, num_ps);
    *is_ps = ember_job_role(job, rank, NULL) == EMBER_ROLE_PS;
    if (*is_ps)
        api_test_ps(job, EMBER_OK);
    return job;
}

/* Table @f (0..C_NF-1) of set @set ("u" uncached, "c" cached; "w" + set
 * for the weighted ebc's two tables, f 0 fixed and 2 dynamic). */
static void table_name(char *out, size_t n, const char *set, int f)
{
    snprintf(out, n, "%s_%d", set, f);
}

static int dynamic_of(int f)
{
    return f >= 2;
}

/* The tables' consistency (async_p2: EMBER_ASYNC). */
static ember_consistency_t g_consistency = EMBER_SYNC;

static ember_table_t *make_table(ember_job_t *job, int rank, const char *set, int f,
                                 ember_opt_kind_t opt, uint32_t staleness)
{
    char name[EMBER_TABLE_NAME_MAX];
    ember_table_t *table = NULL;
    table_name(name, sizeof(name), set, f);
    if (rank != 0) {
        MP_CHECK(ember_table_open(job, name, &table) == EMBER_OK, "opening %s", name);
        return table;
    }
    ember_table_config_t c;
    ember_table_config_init(&c);
    c.name = name;
    c.num_embeddings = C_ROWS;
    c.embedding_dim = C_DIM;
    c.init = EMBER_TABLE_INIT_NORMAL;
    c.seed = 31 + (uint64_t)f; /* the same in both sets: the same initial rows */
    c.staleness = staleness;
    c.consistency = g_consistency;
    ember_opt_config_default(opt, 0.01f, &c.optimizer);
    ember_status_t st;
    if (dynamic_of(f)) {
        ember_table_dynamic_t d;
        ember_table_dynamic_init(&d);
        st = ember_table_create_dynamic(job, &c, &d, &table);
    } else {
        st = ember_table_create(job, &c, &table);
    }
    MP_CHECK(st == EMBER_OK, "creating %s: %s", name, ember_status_string(st));
    return table;
}

static const ember_bag_mode_t pools[C_NF] = {EMBER_BAG_SUM, EMBER_BAG_MAX, EMBER_BAG_SUM,
                                             EMBER_BAG_MEAN};

static ember_ebc_t *make_ebc(ember_job_t *job, ember_table_t *const *tables, const int *which,
                             size_t n, size_t cache_rows)
{
    ember_feature_t features[C_NF];
    for (size_t h = 0; h < n; h++)
        features[h] = (ember_feature_t){.name = NULL,
                                        .table = tables[h],
                                        .pooling = pools[which[h]],
                                        .padding_idx = which[h] == 0 ? 3 : -1};
    ember_ebc_t *ebc = NULL;
    ember_status_t st = ember_ebc_create(job, features, n, NULL, &ebc);
    MP_CHECK(st == EMBER_OK, "ember_ebc_create: %s", ember_status_string(st));
    if (cache_rows) {
        st = ember_ebc_set_cache_rows(ebc, cache_rows);
        MP_CHECK(st == EMBER_OK, "ember_ebc_set_cache_rows(%zu): %s (%s)", cache_rows,
                 ember_status_string(st), ember_ebc_error(ebc));
    }
    return ebc;
}

/* A skewed batch of trainer @t's step @step for @n features: most ids of
 * 8 hot rows, a few of the rest; some bags empty, some ids repeated; a
 * dynamic table's ids spread over 64 bits. */
typedef struct {
    int32_t lengths[C_NF * C_B];
    int64_t values[C_MAXV];
    float weights[C_MAXV];
    size_t n;
} batch_t;

static void make_batch(uint32_t t, int step, const int *which, size_t nf, batch_t *b)
{
    ember_rng_t rng;
    ember_rng_seed(&rng, 777 + 100 * t + (uint64_t)step, 3);
    b->n = 0;
    for (size_t f = 0; f < nf; f++)
        for (int bag = 0; bag < C_B; bag++) {
            const int len = bag == 4 && step % 4 == 1 ? 0 : (int)ember_rng_int(&rng, 1, C_MAXLEN);
            b->lengths[f * C_B + bag] = len;
            for (int i = 0; i < len; i++) {
                int64_t id = ember_rng_int(&rng, 0, 9) < 8 ? ember_rng_int(&rng, 0, 7)
                                                           : ember_rng_int(&rng, 8, C_ROWS - 1);
                if (dynamic_of(which[f]))
                    id = (int64_t)((uint64_t)id * 0x9e3779b97f4a7c15ull);
                b->weights[b->n] = 0.25f + (float)ember_rng_int(&rng, 0, 6) * 0.5f;
                b->values[b->n++] = id;
            }
        }
}

static void make_grad(uint32_t t, int step, size_t n, float *g)
{
    for (size_t i = 0; i < n; i++)
        g[i] = 0.1f * sinf((float)(i * 7 + (size_t)step * 13 + t * 5)) + 0.01f;
}

/* One step (or an evaluation) of @ebc: its pooled outputs into @out. */
static ember_lookup_t *step_of(ember_ebc_t *ebc, const batch_t *b, size_t nf, int weighted,
                               int eval, float *out, const char *what, int step)
{
    ember_kjt_t kjt = {.num_features = nf,
                       .batch_size = C_B,
                       .values = b->values,
                       .lengths = b->lengths,
                       .weights = weighted ? b->weights : NULL,
                       .num_values = b->n};
    ember_lookup_t *lk = NULL;
    ember_status_t st = ember_ebc_lookup(ebc, &kjt, eval ? EMBER_LOOKUP_FORWARD_ONLY : 0, &lk);
    MP_CHECK(st == EMBER_OK, "%s step %d: lookup: %s (%s)", what, step, ember_status_string(st),
             ember_ebc_error(ebc));
    st = ember_lookup_wait(lk, out, NULL);
    MP_CHECK(st == EMBER_OK, "%s step %d: wait: %s (%s)", what, step, ember_status_string(st),
             ember_ebc_error(ebc));
    return lk;
}

static void same_bits(const float *a, const float *b, size_t n, const char *what, int step)
{
    for (size_t i = 0; i < n; i++)
        MP_CHECK(memcmp(&a[i], &b[i], sizeof(float)) == 0,
                 "%s step %d: pooled value %zu: cached %.9g, uncached %.9g", what, step, i,
                 (double)a[i], (double)b[i]);
}

/* The rows of table pair @u / @c (fixed: every row; dynamic: the keys the
 * stream may use) bit-identical. */
static void same_rows(ember_table_t *u, ember_table_t *c, int dynamic, const char *what)
{
    float ru[C_ROWS * C_DIM], rc[C_ROWS * C_DIM];
    if (dynamic) {
        int64_t keys[C_ROWS];
        uint8_t fu[C_ROWS], fc[C_ROWS];
        for (int i = 0; i < C_ROWS; i++)
            keys[i] = (int64_t)((uint64_t)i * 0x9e3779b97f4a7c15ull);
        MP_CHECK(ember_table_read_keys(u, keys, C_ROWS, ru, fu) == EMBER_OK &&
                         ember_table_read_keys(c, keys, C_ROWS, rc, fc) == EMBER_OK,
                 "%s: read_keys", what);
        MP_CHECK(memcmp(fu, fc, sizeof(fu)) == 0, "%s: the keys holding rows differ", what);
    } else {
        MP_CHECK(ember_table_read_rows(u, 0, C_ROWS, ru) == EMBER_OK &&
                         ember_table_read_rows(c, 0, C_ROWS, rc) == EMBER_OK,
                 "%s: read_rows", what);
    }
    for (int i = 0; i < C_ROWS * C_DIM; i++)
        MP_CHECK(memcmp(&ru[i], &rc[i], sizeof(float)) == 0,
                 "%s: row %d value %d: cached %.9g, uncached %.9g", what, i / C_DIM, i % C_DIM,
                 (double)rc[i], (double)ru[i]);
}

/* ===================================================================== */

static int run_same(int rank, uint32_t P, int trainers)
{
    int is_ps;
    ember_job_t *job = join_or_serve(trainers, (int)P, rank, &is_ps);
    if (is_ps)
        return 0;
    const uint32_t t = (uint32_t)rank;
    const ember_opt_kind_t opts[2] = {EMBER_OPT_SGD, EMBER_OPT_ADAGRAD};
    const char *opt_names[2] = {"sgd", "adagrad"};
    for (int o = 0; o < 2; o++) {
        /* Unweighted: all four tables; weighted: fixed and dynamic sum. */
        const int all[C_NF] = {0, 1, 2, 3}, sums[2] = {0, 2};
        for (int weighted = 0; weighted < 2; weighted++) {
            const int *which = weighted ? sums : all;
            const size_t nf = weighted ? 2 : C_NF;
            char set_u[16], set_c[16], what[64];
            snprintf(set_u, sizeof(set_u), "u%d%d", o, weighted);
            snprintf(set_c, sizeof(set_c), "c%d%d", o, weighted);
            snprintf(what, sizeof(what), "P=%u %s %s trainer %u", P, opt_names[o],
                     weighted ? "weighted" : "plain", t);
            ember_table_t *tu[C_NF], *tc[C_NF];
            for (size_t h = 0; h < nf; h++) {
                tu[h] = make_table(job, rank, set_u, which[h], opts[o], 0);
                tc[h] = make_table(job, rank, set_c, which[h], opts[o], 0);
            }
            ember_ebc_t *eu = make_ebc(job, tu, which, nf, 0);
            ember_ebc_t *ec = make_ebc(job, tc, which, nf, C_CACHE);
            const size_t out_n = ember_ebc_output_size(eu, C_B);
            for (int s = 0; s < C_STEPS; s++) {
                batch_t b;
                float ou[C_OUT], oc[C_OUT], g[C_OUT];
                make_batch(t, s, which, nf, &b);
                if (s % 3 == 2) { /* an evaluation first: its rows stand at the step */
                    ember_lookup_release(step_of(eu, &b, nf, weighted, 1, ou, what, s));
                    ember_lookup_release(step_of(ec, &b, nf, weighted, 1, oc, what, s));
                    same_bits(oc, ou, out_n, what, s);
                }
                ember_lookup_t *lu = step_of(eu, &b, nf, weighted, 0, ou, what, s);
                ember_lookup_t *lc = step_of(ec, &b, nf, weighted, 0, oc, what, s);
                same_bits(oc, ou, out_n, what, s);
                make_grad(t, s, out_n, g);
                const unsigned last = s + 1 == C_STEPS ? EMBER_BACKWARD_WAIT : 0;
                MP_CHECK(ember_lookup_backward(lu, g, last) == EMBER_OK &&
                                 ember_lookup_backward(lc, g, last) == EMBER_OK,
                         "%s step %d: backward", what, s);
                ember_lookup_release(lu);
                ember_lookup_release(lc);
            }
            MP_CHECK(ember_ebc_flush(eu) == EMBER_OK && ember_ebc_flush(ec) == EMBER_OK, "flush");
            ember_ebc_cache_stats_t stats;
            ember_ebc_cache_stats(ec, &stats);
            fprintf(stderr, "%s: cache %llu of %llu rows hit, %llu held, %llu put in\n", what,
                    (unsigned long long)stats.hits, (unsigned long long)stats.lookups,
                    (unsigned long long)stats.rows, (unsigned long long)stats.inserted);
            MP_CHECK(stats.capacity == C_CACHE && stats.hits > 0 && stats.lookups > stats.hits &&
                             stats.rows <= C_CACHE && stats.stale_hits == 0 && stats.oldest == 0,
                     "%s: cache counters: %llu hits of %llu, %llu rows, %llu stale", what,
                     (unsigned long long)stats.hits, (unsigned long long)stats.lookups,
                     (unsigned long long)stats.rows, (unsigned long long)stats.stale_hits);
            MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier");
            for (size_t h = 0; h < nf; h++)
                same_rows(tu[h], tc[h], dynamic_of(which[h]), what);
            MP_CHECK(ember_job_barrier(job, "checked") == EMBER_OK, "barrier");
            ember_ebc_destroy(eu);
            ember_ebc_destroy(ec);
            for (size_t h = 0; h < nf; h++) {
                ember_table_close(tu[h]);
                ember_table_close(tc[h]);
            }
        }
    }
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int same_p1(int rank, int world, void *arg)
{
    return run_same(rank, 1, 2);
}
static int same_p2(int rank, int world, void *arg)
{
    return run_same(rank, 2, 2);
}
static int same_p3(int rank, int world, void *arg)
{
    return run_same(rank, 3, 2);
}
/* Async tables, one trainer (its pushes and lookups reach each PS in
 * order: the run is deterministic, so the twins are the same bits). */
static int async_p2(int rank, int world, void *arg)
{
    g_consistency = EMBER_ASYNC;
    return run_same(rank, 2, 1);
}

/* ===================================================================== */

static int run_bound(int rank, uint32_t K)
{
    int is_ps;
    ember_job_t *job = join_or_serve(2, 2, rank, &is_ps);
    if (is_ps)
        return 0;
    const uint32_t t = (uint32_t)rank;
    const int which[C_NF] = {0, 1, 2, 3};
    ember_table_t *tu[C_NF], *tc[C_NF];
    for (int h = 0; h < C_NF; h++) {
        tu[h] = make_table(job, rank, "bu", h, EMBER_OPT_SGD, K);
        tc[h] = make_table(job, rank, "bc", h, EMBER_OPT_SGD, K);
    }
    ember_ebc_t *eu = make_ebc(job, tu, which, C_NF, 0);
    ember_ebc_t *ec = make_ebc(job, tc, which, C_NF, C_CACHE);
    char what[48];
    snprintf(what, sizeof(what), "staleness %u trainer %u", K, t);
    /* Two steps in flight, as a training loop overlaps them. */
    ember_lookup_t *lu[2] = {NULL, NULL}, *lc[2] = {NULL, NULL};
    batch_t b[2];
    float ou[C_OUT], oc[C_OUT], g[C_OUT];
    const int steps = 30;
    for (int s = 0; s < steps; s++) {
        const int i = s % 2;
        /* Step 0's lookups, then each step's next ones made before its
         * wait (they leave once its replies are in). */
        for (int j = s == 0 ? s : s + 1; j <= s + 1 && j < steps; j++) {
            const int k = j % 2;
            make_batch(t, j, which, C_NF, &b[k]);
            ember_kjt_t kjt = {.num_features = C_NF,
                               .batch_size = C_B,
                               .values = b[k].values,
                               .lengths = b[k].lengths,
                               .num_values = b[k].n};
            MP_CHECK(ember_ebc_lookup(eu, &kjt, 0, &lu[k]) == EMBER_OK &&
                             ember_ebc_lookup(ec, &kjt, 0, &lc[k]) == EMBER_OK,
                     "%s step %d: lookup (%s)", what, j, ember_ebc_error(ec));
        }
        ember_status_t su = ember_lookup_wait(lu[i], ou, NULL);
        ember_status_t sc = ember_lookup_wait(lc[i], oc, NULL);
        MP_CHECK(su == EMBER_OK && sc == EMBER_OK, "%s step %d: wait: %s / %s (%s)", what, s,
                 ember_status_string(su), ember_status_string(sc), ember_ebc_error(ec));
        for (int v = 0; v < C_OUT; v++)
            MP_CHECK(fabsf(ou[v] - oc[v]) <= 0.5f, "%s step %d: value %d: cached %g, uncached %g",
                     what, s, v, (double)oc[v], (double)ou[v]);
        make_grad(t, s, C_OUT, g);
        const unsigned last = s + 1 == steps ? EMBER_BACKWARD_WAIT : 0;
        MP_CHECK(ember_lookup_backward(lu[i], g, last) == EMBER_OK &&
                         ember_lookup_backward(lc[i], g, last) == EMBER_OK,
                 "%s step %d: backward", what, s);
        ember_lookup_release(lu[i]);
        ember_lookup_release(lc[i]);
        lu[i] = lc[i] = NULL;
    }
    ember_ebc_cache_stats_t stats;
    ember_ebc_cache_stats(ec, &stats);
    fprintf(stderr, "%s, pipelined: cache %llu of %llu rows hit, %llu by staleness, oldest %llu\n",
            what, (unsigned long long)stats.hits, (unsigned long long)stats.lookups,
            (unsigned long long)stats.stale_hits, (unsigned long long)stats.oldest);
    MP_CHECK(stats.hits > 0 && stats.oldest <= K && ember_ebc_staleness_seen(ec) <= K,
             "%s, pipelined: %llu hits, %llu by staleness, oldest %llu steps behind (bound %u)",
             what, (unsigned long long)stats.hits, (unsigned long long)stats.stale_hits,
             (unsigned long long)stats.oldest, K);
    /* Lockstep: every step applied before the next one's lookup (a flush
     * and a barrier), so each is served at its own step and the copies
     * made since stand by the bound alone: some exactly K steps old. */
    const uint64_t before = stats.stale_hits;
    for (int s = steps; s < 2 * steps; s++) {
        batch_t one;
        make_batch(t, s, which, C_NF, &one);
        ember_lookup_t *a = step_of(eu, &one, C_NF, 0, 0, ou, what, s);
        ember_lookup_t *c = step_of(ec, &one, C_NF, 0, 0, oc, what, s);
        for (int v = 0; v < C_OUT; v++)
            MP_CHECK(fabsf(ou[v] - oc[v]) <= 0.5f, "%s step %d: value %d: cached %g, uncached %g",
                     what, s, v, (double)oc[v], (double)ou[v]);
        make_grad(t, s, C_OUT, g);
        MP_CHECK(ember_lookup_backward(a, g, EMBER_BACKWARD_WAIT) == EMBER_OK &&
                         ember_lookup_backward(c, g, EMBER_BACKWARD_WAIT) == EMBER_OK,
                 "%s step %d: backward", what, s);
        ember_lookup_release(a);
        ember_lookup_release(c);
        MP_CHECK(ember_job_barrier(job, "step") == EMBER_OK, "barrier");
    }
    ember_ebc_cache_stats(ec, &stats);
    fprintf(stderr, "%s, lockstep: cache %llu of %llu rows hit, %llu by staleness, oldest %llu\n",
            what, (unsigned long long)stats.hits, (unsigned long long)stats.lookups,
            (unsigned long long)stats.stale_hits, (unsigned long long)stats.oldest);
    MP_CHECK(stats.stale_hits > before && stats.oldest == K,
             "%s, lockstep: %llu hits by staleness (%llu before), oldest %llu steps behind, not "
             "the bound %u",
             what, (unsigned long long)stats.stale_hits, (unsigned long long)before,
             (unsigned long long)stats.oldest, K);
    MP_CHECK(ember_ebc_flush(eu) == EMBER_OK && ember_ebc_flush(ec) == EMBER_OK, "flush");
    MP_CHECK(ember_job_barrier(job, "done") == EMBER_OK, "barrier");
    ember_ebc_destroy(eu);
    ember_ebc_destroy(ec);
    for (int h = 0; h < C_NF; h++) {
        ember_table_close(tu[h]);
        ember_table_close(tc[h]);
    }
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int bound_s1(int rank, int world, void *arg)
{
    return run_bound(rank, 1);
}
static int bound_s2(int rank, int world, void *arg)
{
    return run_bound(rank, 2);
}

/* ===================================================================== */

static void refused(ember_ebc_t *ebc, size_t rows, const char *what, const char *const *words)
{
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t st = ember_ebc_set_cache_rows(ebc, rows);
    char *text = api_test_log_end(&log);
    MP_CHECK(st == EMBER_ERR_INVALID_PARAM, "%s: %s, not refused", what, ember_status_string(st));
    api_test_log_has(text, what, words);
}

static int refusals(int rank, int world, void *arg)
{
    int is_ps;
    ember_job_t *job = join_or_serve(1, 1, rank, &is_ps);
    if (is_ps)
        return 0;
    ember_table_t *sum = make_table(job, rank, "r", 0, EMBER_OPT_SGD, 0);
    ember_table_t *maxed = make_table(job, rank, "r", 1, EMBER_OPT_SGD, 0);
    ember_feature_t features[2] = {
            {.name = "clicks", .table = sum, .pooling = EMBER_BAG_SUM, .padding_idx = -1},
            {.name = "views", .table = maxed, .pooling = EMBER_BAG_MAX, .padding_idx = -1}};
    ember_ebc_t *ebc = NULL;
    MP_CHECK(ember_ebc_create(job, features, 2, NULL, &ebc) == EMBER_OK, "ebc");
    ember_ebc_cache_stats_t stats;
    ember_ebc_cache_stats(ebc, &stats);
    MP_CHECK(stats.capacity == 0 && stats.lookups == 0, "no cache: counters not 0");
    MP_CHECK(ember_ebc_set_cache_rows(ebc, 10) == EMBER_OK, "10 rows with max pooling");
    MP_CHECK(ember_ebc_set_cache_rows(ebc, 0) == EMBER_OK, "0 rows (off)");
    ember_ebc_cache_stats(ebc, &stats);
    MP_CHECK(stats.capacity == 0, "off: capacity %llu", (unsigned long long)stats.capacity);
    ember_ebc_destroy(ebc);

    ember_ebc_options_t options;
    ember_ebc_options_init(&options);
    options.half_replies = 1;
    MP_CHECK(ember_ebc_create(job, features, 1, &options, &ebc) == EMBER_OK, "ebc fp16");
    refused(ebc, 10, "fp16 replies", (const char *const[]){"r_0", "clicks", "fp16 replies", NULL});
    ember_ebc_destroy(ebc);

    MP_CHECK(ember_ebc_create(job, features, 1, NULL, &ebc) == EMBER_OK, "ebc");
    refused(ebc, ((size_t)1 << 30) + 1, "too many rows", (const char *const[]){"2^30", NULL});
    MP_CHECK(ember_ebc_set_cache_rows(ebc, 8) == EMBER_OK, "8 rows");
    MP_CHECK(ember_ebc_set_cache_rows(ebc, 16) == EMBER_OK, "16 rows, again before a lookup");
    ember_ebc_cache_stats(ebc, &stats);
    MP_CHECK(stats.capacity == 16, "capacity %llu, not 16", (unsigned long long)stats.capacity);
    const int64_t ids[2] = {1, 2};
    const int32_t lengths[2] = {1, 1};
    ember_kjt_t kjt = {
            .num_features = 1, .batch_size = 2, .values = ids, .lengths = lengths, .num_values = 2};
    ember_lookup_t *lk;
    float out[2 * C_DIM];
    MP_CHECK(ember_ebc_lookup(ebc, &kjt, EMBER_LOOKUP_FORWARD_ONLY, &lk) == EMBER_OK &&
                     ember_lookup_wait(lk, out, NULL) == EMBER_OK,
             "an evaluation over the cache");
    ember_lookup_release(lk);
    refused(ebc, 8, "after a lookup", (const char *const[]){"before the ebc's first lookup", NULL});
    ember_ebc_cache_stats(ebc, &stats);
    MP_CHECK(stats.capacity == 16 && stats.lookups == 2 && stats.hits == 0 && stats.rows == 2,
             "after one evaluation: capacity %llu, %llu lookups, %llu hits, %llu rows",
             (unsigned long long)stats.capacity, (unsigned long long)stats.lookups,
             (unsigned long long)stats.hits, (unsigned long long)stats.rows);
    ember_ebc_destroy(ebc);
    ember_table_close(sum);
    ember_table_close(maxed);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static const mp_case_t cases[] = {
        {"same_p1", same_p1, 3, 0},   {"same_p2", same_p2, 4, 0},   {"same_p3", same_p3, 5, 0},
        {"bound_s1", bound_s1, 4, 0}, {"bound_s2", bound_s2, 4, 0}, {"refusals", refusals, 2, 0},
        {"async_p2", async_p2, 3, 0},
};

int main(int argc, char **argv)
{
    return mp_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 200.0);
}
