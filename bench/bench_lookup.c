/*
 * bench/bench_lookup: `ember-bench lookup`, embedding lookups and gradient
 * pushes against real parameter servers (engine/ps: ember_ps_run).
 *
 *     ember-run -n N ember-bench lookup --ps P [sweep options]
 *
 * Ranks 0..N-P-1 are clients, the last P ranks are PS processes serving the
 * engine's own handlers.  Client 0 plays the master: it creates one async
 * table per sweep point on every shard (rows split by row % P) and shuts the
 * servers down at the end.  A client request is what one trainer step sends:
 * the batch is split by shard, each shard's rows deduplicated, and one
 * EMBER_OP_LOOKUP per shard carries offsets, unique rows and the inverse map,
 * packed by the wire codec as the trainer packs its own (engine/wire/codec.h,
 * engine/train/sparse.c); the request is done when every shard's pooled reply
 * (bags x dim floats) is in.
 *
 * The PS keeps a distributed-autograd context per (trainer, step) and takes
 * a new lookup from a trainer only after that context got its gradient.  So
 * each client runs SLOTS virtual trainers (trainer ids client x SLOTS +
 * slot), and:
 *   closed loop  rounds of SLOTS lookups with WINDOW outstanding (timed:
 *                latency from issue to the last shard's reply, throughput
 *                over the lookup phase), then SLOTS gradient pushes
 *                (EMBER_OP_GRAD with EMBER_GRAD_APPLY: the sparse update is
 *                applied) with WINDOW outstanding (timed separately: grad
 *                rows/s).  Lookups and pushes are never mixed in one figure.
 *   open loop    (--rate R) requests scheduled at R per second per client;
 *                each lookup's latency is measured from its *intended* send
 *                time (a request that had to wait for a free slot carries
 *                that wait: no coordinated omission).  As on a trainer, each
 *                lookup is followed by its gradient push; the slot is free
 *                again when the push is acknowledged.
 *
 * Check (-c 1): before any gradient is applied (round 0, all clients meet
 * after it), every pooled reply is compared with the sum computed locally
 * from the table read back with EMBER_OP_TABLE_READ; #wrong counts bags that
 * differ (and replies of the wrong length or status, in every round).
 */
#include "bench/ember_bench.h"

#include "common/workers.h"
#include "engine/ops/half.h"
#include "engine/ps/ps.h"
#include "engine/wire/codec.h"

#include <ember/config.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LK_MAX_LIST   16
#define LK_MAX_POINTS 63 /* table ids 0..62, one per sweep point */
#define LK_BATCHES    8  /* distinct prebuilt batches cycled through */
#define LK_MIN_ITERS  50
#define LK_SLOT_BYTES (96u << 20)  /* per-client budget for slot buffers */
#define LK_BATCH_HALF ((size_t)-1) /* --batch default: two batches in flight */

typedef struct {
    double alpha; /* 0: uniform */
} lk_dist_t;

/* A list option's values, the sweep's points taking each in turn. */
typedef struct {
    size_t at[LK_MAX_LIST];
    size_t count;
} lk_sizes_t;

typedef struct {
    lk_dist_t at[LK_MAX_LIST];
    size_t count;
} lk_dists_t;

typedef struct {
    ember_dtype_t at[2]; /* F32 and/or F16 */
    size_t count;
} lk_dtypes_t;

typedef struct {
    lk_sizes_t bags, pool, dim; /* bags per request, indices per bag, dims */
    lk_dists_t dist;
    lk_dtypes_t dtype; /* how the PS stores rows */
    lk_dtypes_t reply; /* replies on the wire (F16: the pooled values rounded) */
    size_t ps;
    size_t rows;
    size_t iters, warmup, window, slots;
    size_t max_bytes; /* per point: iters = min(iters, max(50, B / response)) */
    double rate;      /* open loop requests/s per client; 0 = closed loop */
    int check, csv;
    size_t batch; /* closed loop: lookups held per batch (ember_rpc_batch_begin);
                   * 0: each alone; LK_BATCH_HALF: half the window */
    uint64_t seed;
    lk_sizes_t threads; /* --ps-threads: a round of the sweep each (0: the PS's default) */
} lk_opts_t;

/* One shard's LOOKUP of a prebuilt batch, packed whole by the wire codec.
 * Slots in flight share its arrays (body), each sending its own header
 * (trainer, step) before them. */
typedef struct {
    uint8_t *message; /* bytes: the header (a template) and the arrays */
    size_t bytes;
    const uint8_t *body; /* in message: the arrays after the header */
    size_t body_bytes;
    uint32_t unique, indices;
} lk_part_t;

typedef struct {
    int64_t *keys;    /* [bags * pool] global rows, bag after bag */
    lk_part_t *parts; /* [P] */
} lk_batch_t;

typedef struct {
    ember_msg_lookup_t *hdr;  /* [P] */
    ember_msg_grad_t *ghdr;   /* [P] */
    ember_future_t **futures; /* [P] */
    float *resp;              /* [P][bags * dim], lent from lookup to collection */
    size_t batch;
    double intended;
    uint64_t step;
} lk_slot_t;

/* One client's figures for one sweep point (sent to client 0 via the store). */
typedef struct {
    double lookups, lookup_s, indices, req_bytes, resp_bytes;
    double grads, grad_s, grad_indices;
    double pct[5]; /* p50 p90 p99 p99.9 max, us */
    double wrong;
} lk_result_t;

typedef struct {
    ember_tp_t *tp;
    const lk_opts_t *opts;
    int client, clients, first_ps, P;
    uint32_t table_id;
    size_t bags, pool, dim, slots, window;
    lk_dist_t dist;
    ember_dtype_t dtype;
    int half_reply;
    double *zipf_cdf;
    lk_batch_t batches[LK_BATCHES];
    lk_slot_t *slot;
    /* Reply buffers: a trainer lands every step's lookup in the same
     * output, so a lookup here takes the buffer given back last (still in
     * cache), not one per virtual trainer. */
    float **resp_free; /* [slots], a stack */
    size_t resp_nfree;
    float *grad;  /* [bags * dim], shared by every push */
    float *table; /* -c 1: the whole table as read back, [rows * dim] */
    double *samples;
    size_t nsamples;
    lk_result_t res;
} lk_point_t;

/* ---- options ------------------------------------------------------------- */

static void lk_usage(FILE *stream)
{
    fprintf(stream,
            "usage: ember-run -n N ember-bench lookup [options]\n"
            "  --ps P            PS ranks (the last P ranks; 1); clients = N - P\n"
            "  --bags LIST       bags per request, e.g. 1,16,256 (1,16,256,4096)\n"
            "  --pool LIST       indices per bag (1,16)\n"
            "  --dim LIST        embedding dim (64)\n"
            "  --dist LIST       uniform and/or zipf:ALPHA (uniform,zipf:1.05)\n"
            "  --dtype LIST      the PS's rows: fp32 and/or fp16 (fp32); replies\n"
            "                    are fp32 (pooled in fp32) either way\n"
            "  --reply-dtype LIST  replies on the wire: fp32 and/or fp16 (fp32); fp16\n"
            "                    is the pooled values rounded, half the bytes\n"
            "  --rows R          table rows (100000)\n"
            "  -n ITERS          timed requests per point and client (2000)\n"
            "  -w WARMUP         untimed requests first (100)\n"
            "  --window W        closed loop: outstanding requests (16)\n"
            "  --slots S         virtual trainers per client (256; capped by memory)\n"
            "  --max-bytes B     per point: ITERS = min(ITERS, max(%d, B/response))\n"
            "                    (1G)\n"
            "  --rate R          open loop at R requests/s per client (closed loop)\n"
            "  -c 0|1            check pooled replies before any update (1)\n"
            "  --batch B         closed loop: up to B small lookups posted together to\n"
            "                    a PS leave as one message (ember_rpc_batch_begin), as\n"
            "                    the replies its handlers post together do; 0: each\n"
            "                    alone (half the window: two batches in flight)\n"
            "  --seed S          keys and table seed (1)\n"
            "  --ps-threads LIST each PS's compute threads, e.g. 1,2,4: the whole sweep\n"
            "                    once per value, against PS started afresh (the PS's\n"
            "                    default: the cores of its binding)\n"
            "  --csv             also print `csv,lookup,...` lines\n",
            LK_MIN_ITERS);
}

/* --bags, --pool, --dim: sizes above 0. */
static int lk_parse_list(const char *text, void *field)
{
    lk_sizes_t *list = field;
    char buf[256], *save = NULL;
    size_t count = 0;
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (count == LK_MAX_LIST || !bench_parse_size(tok, &list->at[count]) || !list->at[count])
            return 0;
        count++;
    }
    list->count = count;
    return count > 0;
}

static int lk_parse_dist(const char *text, void *field)
{
    lk_dists_t *dists = field;
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", text);
    dists->count = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        if (dists->count == LK_MAX_LIST)
            return 0;
        if (strcmp(tok, "uniform") == 0) {
            dists->at[dists->count++].alpha = 0.0;
        } else if (strncmp(tok, "zipf:", 5) == 0) {
            double alpha = strtod(tok + 5, &end);
            if (*end || !(alpha > 0.0) || alpha > 10.0) {
                fprintf(stderr, "ember-bench lookup: bad zipf alpha '%s'\n", tok + 5);
                return 0;
            }
            dists->at[dists->count++].alpha = alpha;
        } else {
            fprintf(stderr, "ember-bench lookup: bad distribution '%s'\n", tok);
            return 0;
        }
    }
    return dists->count > 0;
}

/* --dtype (the rows) and --reply-dtype: fp32 and/or fp16. */
static int lk_parse_dtype(const char *text, void *field)
{
    lk_dtypes_t *dtypes = field;
    char buf[64], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", text);
    dtypes->count = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (dtypes->count == 2 || (strcmp(tok, "fp32") && strcmp(tok, "fp16"))) {
            fprintf(stderr, "ember-bench lookup: bad dtype list '%s' (fp32, fp16)\n", text);
            return 0;
        }
        dtypes->at[dtypes->count++] = strcmp(tok, "fp16") == 0 ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
    }
    return dtypes->count > 0;
}

static int lk_parse_rate(const char *text, void *field)
{
    double *rate = field;
    char *end;
    *rate = strtod(text, &end);
    return !*end && *rate > 0.0;
}

static int lk_parse_seed(const char *text, void *field)
{
    size_t seed;
    if (!bench_parse_count(text, &seed))
        return 0;
    *(uint64_t *)field = seed;
    return 1;
}

static const char *lk_dtype_name(ember_dtype_t dtype)
{
    return dtype == EMBER_DTYPE_F16 ? "fp16" : "fp32";
}

#define LK_OPT(name, kind, field)    BENCH_OPT(lk_opts_t, name, kind, field)
#define LK_OPT_WITH(name, field, fn) BENCH_OPT_WITH(lk_opts_t, name, field, fn)

/* Every option (lk_usage says what each does). */
static const bench_opt_t lk_opt_list[] = {
        LK_OPT("--csv", BENCH_OPT_SWITCH, csv),
        LK_OPT("--ps", BENCH_OPT_COUNT, ps),
        LK_OPT_WITH("--bags", bags, lk_parse_list),
        LK_OPT_WITH("--pool", pool, lk_parse_list),
        LK_OPT_WITH("--dim", dim, lk_parse_list),
        LK_OPT_WITH("--dist", dist, lk_parse_dist),
        LK_OPT_WITH("--dtype", dtype, lk_parse_dtype),
        LK_OPT_WITH("--reply-dtype", reply, lk_parse_dtype),
        LK_OPT("--rows", BENCH_OPT_SIZE, rows),
        LK_OPT("-n", BENCH_OPT_COUNT, iters),
        LK_OPT("-w", BENCH_OPT_COUNT0, warmup),
        LK_OPT("--window", BENCH_OPT_COUNT, window),
        LK_OPT("--slots", BENCH_OPT_COUNT, slots),
        LK_OPT("--max-bytes", BENCH_OPT_SIZE, max_bytes),
        LK_OPT_WITH("--rate", rate, lk_parse_rate),
        LK_OPT("-c", BENCH_OPT_BIT, check),
        LK_OPT("--batch", BENCH_OPT_COUNT0, batch),
        LK_OPT_WITH("--seed", seed, lk_parse_seed),
        LK_OPT_WITH("--ps-threads", threads, lk_parse_list),
};

static const lk_opts_t lk_defaults = {.bags = {.at = {1, 16, 256, 4096}, .count = 4},
                                      .pool = {.at = {1, 16}, .count = 2},
                                      .dim = {.at = {64}, .count = 1},
                                      .dist = {.at = {{0.0}, {1.05}}, .count = 2},
                                      .dtype = {.at = {EMBER_DTYPE_F32}, .count = 1},
                                      .reply = {.at = {EMBER_DTYPE_F32}, .count = 1},
                                      .ps = 1,
                                      .rows = 100000,
                                      .iters = 2000,
                                      .warmup = 100,
                                      .window = 16,
                                      .slots = 256,
                                      .max_bytes = 1u << 30,
                                      .check = 1,
                                      .batch = LK_BATCH_HALF,
                                      .seed = 1,
                                      .threads = {.at = {0}, .count = 1}};

/* Points of the sweep: one per combination of the lists' values. */
static size_t lk_points(const lk_opts_t *opts)
{
    return opts->bags.count * opts->pool.count * opts->dim.count * opts->dist.count *
           opts->dtype.count * opts->reply.count;
}

static int lk_parse(int argc, char **argv, lk_opts_t *opts)
{
    static const bench_opt_table_t table = {.cmd = "lookup",
                                            .opts = lk_opt_list,
                                            .count = sizeof(lk_opt_list) / sizeof(lk_opt_list[0]),
                                            .usage = lk_usage};
    *opts = lk_defaults;
    if (!bench_parse_opts(&table, argc, argv, opts))
        return 0;
    if (lk_points(opts) > LK_MAX_POINTS) {
        fprintf(stderr, "ember-bench lookup: at most %d sweep points\n", LK_MAX_POINTS);
        return 0;
    }
    if (opts->rows < 1 || opts->rows > ((size_t)1 << 31)) {
        fprintf(stderr, "ember-bench lookup: --rows out of range\n");
        return 0;
    }
    for (size_t k = 0; k < opts->threads.count; k++) {
        if (opts->threads.at[k] > EMBER_WORKERS_MAX) {
            fprintf(stderr, "ember-bench lookup: --ps-threads %zu is above %d\n",
                    opts->threads.at[k], EMBER_WORKERS_MAX);
            return 0;
        }
    }
    return 1;
}

/* ---- keys ---------------------------------------------------------------- */

static uint64_t lk_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double lk_uniform01(uint64_t *state)
{
    return (double)(lk_rand(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Zipf over ranks 1..rows: P(k) ~ k^-alpha; rank k is row k-1. */
static double *lk_zipf_cdf(size_t rows, double alpha)
{
    double *cdf = malloc(rows * sizeof(*cdf)), sum = 0.0;
    if (!cdf)
        return NULL;
    for (size_t k = 0; k < rows; k++)
        cdf[k] = (sum += pow((double)(k + 1), -alpha));
    for (size_t k = 0; k < rows; k++)
        cdf[k] /= sum;
    return cdf;
}

static int64_t lk_key(const lk_point_t *pt, uint64_t *state)
{
    size_t rows = pt->opts->rows;
    if (!pt->zipf_cdf)
        return (int64_t)(lk_rand(state) % rows);
    double u = lk_uniform01(state);
    size_t lo = 0, hi = rows - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pt->zipf_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int64_t)lo;
}

/* ---- requests, packed as the trainer packs its own (engine/train/sparse.c) -- */

/* Where splitting a batch by shard puts each shard's part, in turn. */
typedef struct {
    int64_t *rows, *unique, *inverse; /* [n], [n + 1], [n + 1] */
    uint32_t *counts;                 /* [bags] */
} lk_split_t;

static ember_status_t lk_split_alloc(lk_split_t *split, size_t bags, size_t n)
{
    split->rows = malloc(n * sizeof(*split->rows));
    split->unique = malloc((n + 1) * sizeof(*split->unique));
    split->inverse = malloc((n + 1) * sizeof(*split->inverse));
    split->counts = malloc(bags * sizeof(*split->counts));
    return split->rows && split->unique && split->inverse && split->counts ? EMBER_OK
                                                                           : EMBER_ERR_NO_MEMORY;
}

static void lk_split_free(lk_split_t *split)
{
    free(split->rows);
    free(split->unique);
    free(split->inverse);
    free(split->counts);
}

static uint32_t lk_lookup_flags(const lk_point_t *pt)
{
    return pt->half_reply ? EMBER_LOOKUP_HALF_REPLY : 0;
}

/* Shard @p's entries of @batch, bag after bag, into split->rows and each
 * bag's count of them into split->counts; returns how many. */
static size_t lk_shard_entries(const lk_point_t *pt, const lk_batch_t *batch, uint32_t p,
                               lk_split_t *split)
{
    size_t bags = pt->bags, pool = pt->pool, entries = 0;
    memset(split->counts, 0, bags * sizeof(*split->counts));
    for (size_t b = 0; b < bags; b++) {
        for (size_t i = b * pool; i < (b + 1) * pool; i++) {
            if ((uint64_t)batch->keys[i] % (uint32_t)pt->P != p)
                continue;
            split->rows[entries++] = batch->keys[i];
            split->counts[b]++;
        }
    }
    return entries;
}

/* Shard @p's LOOKUP of @batch: its rows deduplicated, packed by the codec. */
static ember_status_t lk_pack_part(const lk_point_t *pt, lk_batch_t *batch, uint32_t p,
                                   lk_split_t *split)
{
    size_t entries = lk_shard_entries(pt, batch, p, split), nunique = 0;
    EMBER_CHECK(ember_bag_dedup(split->rows, entries, -1, split->unique, split->inverse, &nunique));
    ember_wire_lookup_t lookup = {.head = {.table_id = pt->table_id,
                                           .flags = lk_lookup_flags(pt),
                                           .bags = (uint32_t)pt->bags,
                                           .unique = (uint32_t)nunique,
                                           .indices = (uint32_t)entries},
                                  .counts = split->counts,
                                  .rows = split->unique,
                                  .inverse = split->inverse};
    ember_wire_lookup_layout_t at;
    lk_part_t *part = &batch->parts[p];

    ember_wire_lookup_layout(&lookup.head, &at);
    part->bytes = ember_wire_lookup_size(&lookup.head);
    part->message = malloc(part->bytes);
    if (!part->message)
        return EMBER_ERR_NO_MEMORY;
    ember_wire_lookup_pack(&lookup, part->message);
    part->body = part->message + at.offsets;
    part->body_bytes = part->bytes - at.offsets;
    part->unique = lookup.head.unique;
    part->indices = lookup.head.indices;
    return EMBER_OK;
}

/* A batch of bags x pool keys drawn, and its LOOKUP to every shard. */
static ember_status_t lk_build_batch(lk_point_t *pt, lk_batch_t *batch, uint64_t *rng)
{
    size_t n = pt->bags * pt->pool;
    lk_split_t split = {0};
    ember_status_t status;

    EMBER_CHECK_GOTO(lk_split_alloc(&split, pt->bags, n), status, out);
    batch->keys = malloc(n * sizeof(*batch->keys));
    batch->parts = calloc((size_t)pt->P, sizeof(*batch->parts));
    status = EMBER_ERR_NO_MEMORY;
    if (!batch->keys || !batch->parts)
        goto out;
    for (size_t i = 0; i < n; i++)
        batch->keys[i] = lk_key(pt, rng);
    for (uint32_t p = 0; p < (uint32_t)pt->P; p++)
        EMBER_CHECK_GOTO(lk_pack_part(pt, batch, p, &split), status, out);
    status = EMBER_OK;
out:
    lk_split_free(&split);
    return status;
}

/* ---- the master's part: tables ------------------------------------------ */

static ember_status_t lk_create_table(lk_point_t *pt)
{
    for (int p = 0; p < pt->P; p++) {
        ember_msg_table_create_t spec = {
                .table_id = pt->table_id,
                .shard = (uint32_t)p,
                .num_shards = (uint32_t)pt->P,
                .trainers = (uint32_t)(pt->clients * pt->slots),
                .rows = (int64_t)pt->opts->rows,
                .dim = (uint32_t)pt->dim,
                .consistency = EMBER_ASYNC,
                .sparse_reduce = EMBER_REDUCE_SUM,
                .init = EMBER_INIT_NORMAL,
                .dtype = pt->dtype,
                .seed = pt->opts->seed + pt->table_id,
        };
        ember_opt_config_default(EMBER_OPT_SGD, 0.01f, &spec.optimizer);
        snprintf(spec.name, sizeof(spec.name), "bench%u", pt->table_id);
        ember_iov_t iov = {.buffer = &spec, .length = sizeof(spec)};
        char err[256] = "";
        size_t length = 0;
        ember_status_t status = ember_rpc_call(pt->tp, pt->first_ps + p, EMBER_OP_TABLE_CREATE,
                                               &iov, 1, err, sizeof(err) - 1, &length);
        if (status != EMBER_OK) {
            fprintf(stderr, "ember-bench lookup: TABLE_CREATE on ps%d: %s: %.*s\n", p,
                    ember_status_string(status), (int)length, err);
            return status;
        }
    }
    return EMBER_OK;
}

/* The whole table back (for -c 1): global row r = local i * P + shard. */
static ember_status_t lk_read_table(lk_point_t *pt)
{
    size_t rows = pt->opts->rows, dim = pt->dim;
    pt->table = malloc(rows * dim * sizeof(float));
    float *chunk = malloc((65536 * dim + 1) * sizeof(float));
    ember_status_t status = EMBER_ERR_NO_MEMORY;
    if (!pt->table || !chunk)
        goto out;
    for (int p = 0; p < pt->P; p++) {
        int64_t local = ((int64_t)rows - p + pt->P - 1) / pt->P;
        for (int64_t first = 0; first < local; first += 65536) {
            int64_t count = local - first < 65536 ? local - first : 65536;
            ember_msg_table_read_t msg = {.table_id = pt->table_id, .first = first, .count = count};
            ember_iov_t iov = {.buffer = &msg, .length = sizeof(msg)};
            size_t length = 0;
            status = ember_rpc_call(pt->tp, pt->first_ps + p, EMBER_OP_TABLE_READ, &iov, 1, chunk,
                                    (65536 * dim + 1) * sizeof(float), &length);
            if (status != EMBER_OK || length != (size_t)count * dim * sizeof(float)) {
                fprintf(stderr, "ember-bench lookup: TABLE_READ of ps%d: %s (%zu B)\n", p,
                        ember_status_string(status), length);
                status = status == EMBER_OK ? EMBER_ERR_BAD_MESSAGE : status;
                goto out;
            }
            for (int64_t i = 0; i < count; i++)
                memcpy(pt->table + (size_t)((first + i) * pt->P + p) * dim, chunk + (size_t)i * dim,
                       dim * sizeof(float));
        }
    }
    status = EMBER_OK;
out:
    free(chunk);
    return status;
}

/* Bytes of one shard's reply: bags x dim values of 4 bytes, or 2 in fp16. */
static size_t lk_reply_bytes(const lk_point_t *pt)
{
    return pt->bags * pt->dim * (pt->half_reply ? sizeof(uint16_t) : sizeof(float));
}

/* Bags of @slot's reply that differ from the local sum over each shard
 * (rounded as the PS rounds an fp16 reply). */
static size_t lk_check_reply(const lk_point_t *pt, const lk_slot_t *slot)
{
    const lk_batch_t *batch = &pt->batches[slot->batch];
    size_t wrong = 0, dim = pt->dim;
    float *expect = malloc(dim * sizeof(float));
    if (!expect)
        return pt->bags;
    for (int p = 0; p < pt->P; p++) {
        const float *got = slot->resp + (size_t)p * pt->bags * dim;
        const uint16_t *got_half = (const uint16_t *)got;
        for (size_t b = 0; b < pt->bags; b++) {
            int bad = 0;
            memset(expect, 0, dim * sizeof(float));
            for (size_t i = b * pt->pool; i < (b + 1) * pt->pool; i++) {
                int64_t row = batch->keys[i];
                if ((uint64_t)row % (uint64_t)pt->P != (uint64_t)p)
                    continue;
                for (size_t d = 0; d < dim; d++)
                    expect[d] += pt->table[(size_t)row * dim + d];
            }
            for (size_t d = 0; d < dim; d++) {
                float e = expect[d], g = got[b * dim + d];
                if (pt->half_reply) {
                    e = ember_half_to_float(ember_float_to_half(e));
                    g = ember_half_to_float(got_half[b * dim + d]);
                }
                if (!(fabsf(e - g) <= 1e-4f * (1.0f + fabsf(e))))
                    bad = 1;
            }
            wrong += (size_t)bad;
        }
    }
    free(expect);
    return wrong;
}

/* ---- clients-only meeting points (the PS ranks are inside ember_ps_run) -- */

/* The sweep's round: one per --ps-threads value, each against PS started
 * afresh; the store's keys carry it. */
static unsigned lk_round;

static ember_status_t lk_meet(lk_point_t *pt, const char *what)
{
    char key[96];
    snprintf(key, sizeof(key), "lookup/%u/%s/%u/%d", lk_round, what, pt->table_id, pt->client);
    EMBER_CHECK(ember_tp_store_set(pt->tp, key, "1", 1));
    for (int c = 0; c < pt->clients; c++) {
        void *value = NULL;
        size_t length;
        snprintf(key, sizeof(key), "lookup/%u/%s/%u/%d", lk_round, what, pt->table_id, c);
        EMBER_CHECK(ember_tp_store_get(pt->tp, key, &value, &length));
        free(value);
    }
    return EMBER_OK;
}

/* ---- the loops ------------------------------------------------------------ */

/* Lend @slot a reply buffer (allocated the first time; at most one per
 * slot is ever in use, so resp_free has room for all of them). */
static ember_status_t lk_resp_take(lk_point_t *pt, lk_slot_t *slot)
{
    if (pt->resp_nfree) {
        slot->resp = pt->resp_free[--pt->resp_nfree];
        return EMBER_OK;
    }
    slot->resp = bench_buffer_alloc((size_t)pt->P * pt->bags * pt->dim * sizeof(float));
    return slot->resp ? EMBER_OK : EMBER_ERR_NO_MEMORY;
}

static void lk_resp_give(lk_point_t *pt, lk_slot_t *slot)
{
    pt->resp_free[pt->resp_nfree++] = slot->resp;
    slot->resp = NULL;
}

static ember_status_t lk_send_lookup(lk_point_t *pt, lk_slot_t *slot, size_t batch)
{
    size_t resp_bytes = lk_reply_bytes(pt);
    slot->batch = batch;
    EMBER_CHECK(lk_resp_take(pt, slot));
    for (int p = 0; p < pt->P; p++) {
        const lk_part_t *part = &pt->batches[batch].parts[p];
        ember_iov_t iov[2];
        slot->hdr[p].step = slot->step;
        slot->hdr[p].unique = part->unique;
        slot->hdr[p].indices = part->indices;
        size_t iovcnt = ember_wire_pack_iov(&slot->hdr[p], sizeof(slot->hdr[p]), part->body,
                                            part->body_bytes, iov);
        EMBER_CHECK(ember_rpc_call_async(pt->tp, pt->first_ps + p, EMBER_OP_LOOKUP, iov, iovcnt,
                                         slot->resp + (size_t)p * pt->bags * pt->dim, resp_bytes,
                                         NULL, &slot->futures[p]));
    }
    return EMBER_OK;
}

static ember_status_t lk_send_grad(lk_point_t *pt, lk_slot_t *slot)
{
    for (int p = 0; p < pt->P; p++) {
        ember_iov_t iov[2];
        slot->ghdr[p].step = slot->step;
        size_t iovcnt = ember_wire_pack_iov(&slot->ghdr[p], sizeof(slot->ghdr[p]), pt->grad,
                                            pt->bags * pt->dim * sizeof(float), iov);
        EMBER_CHECK(ember_rpc_call_async(pt->tp, pt->first_ps + p, EMBER_OP_GRAD, iov, iovcnt, NULL,
                                         0, NULL, &slot->futures[p]));
    }
    return EMBER_OK;
}

/* Collect @slot's P futures (@block: wait; else only if all are done). 1 when
 * done; a failed call or a reply of the wrong length counts as wrong. */
static int lk_collect(lk_point_t *pt, lk_slot_t *slot, int block, size_t expect)
{
    if (!block) {
        for (int p = 0; p < pt->P; p++)
            if (ember_future_test(slot->futures[p]) == EMBER_INPROGRESS)
                return 0;
    }
    for (int p = 0; p < pt->P; p++) {
        size_t length = 0;
        ember_status_t status = ember_future_wait(slot->futures[p]);
        const void *data = ember_future_data(slot->futures[p], &length);
        if (status != EMBER_OK || length != expect) {
            if (pt->res.wrong < 3)
                fprintf(stderr,
                        "ember-bench lookup: client %d: ps%d answered %s "
                        "(%zu B, expected %zu): %.*s\n",
                        pt->client, p, ember_status_string(status), length, expect,
                        status != EMBER_OK ? (int)(length > 200 ? 200 : length) : 0,
                        status != EMBER_OK && data ? (const char *)data : "");
            pt->res.wrong++;
        }
        ember_future_release(slot->futures[p]);
        slot->futures[p] = NULL;
    }
    return 1;
}

static void lk_account(lk_point_t *pt, const lk_slot_t *slot)
{
    pt->res.lookups++;
    pt->res.indices += (double)(pt->bags * pt->pool);
    pt->res.resp_bytes += (double)((size_t)pt->P * lk_reply_bytes(pt));
    for (int p = 0; p < pt->P; p++)
        pt->res.req_bytes += (double)pt->batches[slot->batch].parts[p].bytes;
}

/* Lookups per batch in the closed loop (0: none): --batch, by default half
 * the window, so that one batch is served while the next fills. */
static size_t lk_batch(const lk_opts_t *opts, size_t window)
{
    if (opts->batch != LK_BATCH_HALF)
        return opts->batch;
    return window / 2 > 1 ? window / 2 : 0;
}

/* Whether requests are batched at all: the open loop sends what is due
 * together unless --batch 0; the closed loop as lk_batch says. */
static int lk_batching(const lk_opts_t *opts, size_t window)
{
    return opts->rate > 0.0 ? opts->batch != 0 : lk_batch(opts, window) != 0;
}

/* A closed round's lookups: slots 0..n-1 at step @round, the window
 * outstanding; replies come back in order per PS.  @held: lookups in the
 * request batch being filled. */
static ember_status_t lk_closed_lookups(lk_point_t *pt, size_t n, uint64_t round, int timed,
                                        size_t *held)
{
    size_t resp_bytes = lk_reply_bytes(pt), window = pt->window;
    size_t batch = lk_batch(pt->opts, window), issued = 0, done = 0;

    while (done < n) {
        while (issued < n && issued - done < window) {
            lk_slot_t *slot = &pt->slot[issued];
            slot->step = round;
            slot->intended = bench_now();
            EMBER_CHECK(lk_send_lookup(pt, slot, (round * pt->slots + issued) % LK_BATCHES));
            issued++;
            if (batch && ++*held == batch) { /* this batch is full: it goes */
                ember_rpc_batch_end(pt->tp);
                ember_rpc_batch_begin(pt->tp);
                *held = 0;
            }
        }
        lk_slot_t *slot = &pt->slot[done];
        lk_collect(pt, slot, 1, resp_bytes);
        if (timed) {
            pt->samples[pt->nsamples++] = bench_now() - slot->intended;
            lk_account(pt, slot);
        }
        if (round != 0 || !pt->opts->check)
            lk_resp_give(pt, slot);
        done++;
    }
    return EMBER_OK;
}

/* Round 0 under -c 1: nobody has pushed a gradient yet, so every reply must
 * match the table read back; then all clients meet before any push. */
static ember_status_t lk_closed_check(lk_point_t *pt, size_t n)
{
    for (size_t s = 0; s < n; s++) {
        pt->res.wrong += (double)lk_check_reply(pt, &pt->slot[s]);
        lk_resp_give(pt, &pt->slot[s]);
    }
    return lk_meet(pt, "checked");
}

/* The gradient pushes of a round's lookups, applied (EMBER_GRAD_APPLY), the
 * window outstanding. */
static ember_status_t lk_closed_grads(lk_point_t *pt, size_t n)
{
    size_t issued = 0, done = 0;
    while (done < n) {
        while (issued < n && issued - done < pt->window)
            EMBER_CHECK(lk_send_grad(pt, &pt->slot[issued++]));
        lk_collect(pt, &pt->slot[done++], 1, 0);
    }
    return EMBER_OK;
}

/* Rounds of up to one lookup per slot, then their pushes, timed apart. */
static ember_status_t lk_closed_loop(lk_point_t *pt, size_t total, size_t warmup)
{
    size_t done_requests = 0, held = 0;
    uint64_t round = 0;

    while (done_requests < warmup + total) {
        size_t n = pt->slots, left = warmup + total - done_requests;
        if (n > left)
            n = left;
        int timed = done_requests >= warmup;
        double start = bench_now();
        EMBER_CHECK(lk_closed_lookups(pt, n, round, timed, &held));
        double mid = bench_now();
        if (timed)
            pt->res.lookup_s += mid - start;
        if (round == 0 && pt->opts->check) {
            EMBER_CHECK(lk_closed_check(pt, n));
            mid = bench_now();
        }
        EMBER_CHECK(lk_closed_grads(pt, n));
        if (timed) {
            pt->res.grad_s += bench_now() - mid;
            pt->res.grads += (double)n;
            pt->res.grad_indices += (double)(n * pt->bags * pt->pool);
        }
        done_requests += n;
        round++;
    }
    return EMBER_OK;
}

/* The open loop's slots: a FIFO of those in lookup, a FIFO of those in push,
 * and a free list. */
typedef struct {
    size_t *lookq, *gradq, *freel;
    size_t lh, lt, gh, gt, nfree;
    size_t next, completed; /* requests sent, lookups answered */
    size_t warmup, end;     /* end: warmup + timed requests */
    double interval, t0, first, last;
} lk_open_t;

static ember_status_t lk_open_start(lk_point_t *pt, lk_open_t *q, size_t total, size_t warmup)
{
    size_t S = pt->slots;
    *q = (lk_open_t){.lookq = malloc(S * sizeof(size_t)),
                     .gradq = malloc(S * sizeof(size_t)),
                     .freel = malloc(S * sizeof(size_t)),
                     .nfree = S,
                     .warmup = warmup,
                     .end = warmup + total,
                     .interval = 1.0 / pt->opts->rate};
    if (!q->lookq || !q->gradq || !q->freel)
        return EMBER_ERR_NO_MEMORY;
    for (size_t s = 0; s < S; s++) {
        q->freel[s] = S - 1 - s;
        pt->slot[s].step = 0;
    }
    q->t0 = bench_now();
    return EMBER_OK;
}

/* Everything due goes out while slots are free; the rest waits, its
 * intended time unchanged. */
static ember_status_t lk_open_send_due(lk_point_t *pt, lk_open_t *q, double now, int *progress)
{
    size_t S = pt->slots;
    while (q->next < q->end && now >= q->t0 + (double)q->next * q->interval && q->nfree) {
        lk_slot_t *slot = &pt->slot[q->freel[--q->nfree]];
        slot->intended = q->t0 + (double)q->next * q->interval;
        EMBER_CHECK(lk_send_lookup(pt, slot, q->next % LK_BATCHES));
        q->lookq[q->lt++ % S] = (size_t)(slot - pt->slot);
        q->next++;
        *progress = 1;
    }
    return EMBER_OK;
}

/* Lookups answered, in order: each timed one sampled from its intended
 * send time, then its gradient pushed. */
static ember_status_t lk_open_take_lookups(lk_point_t *pt, lk_open_t *q, int *progress)
{
    size_t S = pt->slots, resp_bytes = lk_reply_bytes(pt);
    while (q->lh != q->lt && lk_collect(pt, &pt->slot[q->lookq[q->lh % S]], 0, resp_bytes)) {
        lk_slot_t *slot = &pt->slot[q->lookq[q->lh++ % S]];
        double end = bench_now();
        lk_resp_give(pt, slot);
        if (q->completed >= q->warmup) {
            if (q->completed == q->warmup)
                q->first = slot->intended;
            q->last = end;
            pt->samples[pt->nsamples++] = end - slot->intended;
            lk_account(pt, slot);
        }
        q->completed++;
        EMBER_CHECK(lk_send_grad(pt, slot));
        q->gradq[q->gt++ % S] = (size_t)(slot - pt->slot);
        *progress = 1;
    }
    return EMBER_OK;
}

/* Pushes acknowledged, in order: their slots free for their next step.
 * Returns whether any was. */
static int lk_open_take_grads(lk_point_t *pt, lk_open_t *q)
{
    size_t S = pt->slots;
    int progress = 0;
    while (q->gh != q->gt && lk_collect(pt, &pt->slot[q->gradq[q->gh % S]], 0, 0)) {
        lk_slot_t *slot = &pt->slot[q->gradq[q->gh++ % S]];
        slot->step++;
        q->freel[q->nfree++] = (size_t)(slot - pt->slot);
        progress = 1;
    }
    return progress;
}

/* Nothing moved: wait on the transport until the next request is due, at
 * most 1 ms. */
static void lk_open_idle(lk_point_t *pt, const lk_open_t *q, double now)
{
    double wait = q->next < q->end ? q->t0 + (double)q->next * q->interval - now : 1e-3;
    if (q->lh != q->lt || q->gh != q->gt || wait > 0)
        ember_tp_wait(pt->tp, wait > 1e-3 ? 1e-3 : (wait > 0 ? wait : 0));
}

/* Requests at the rate asked, each lookup followed by its push. */
static ember_status_t lk_open_loop(lk_point_t *pt, size_t total, size_t warmup)
{
    lk_open_t q;
    ember_status_t status;

    EMBER_CHECK_GOTO(lk_open_start(pt, &q, total, warmup), status, out);
    while (q.completed < q.end || q.gh != q.gt) {
        double now = bench_now();
        int progress = 0;
        EMBER_CHECK_GOTO(lk_open_send_due(pt, &q, now, &progress), status, out);
        EMBER_CHECK_GOTO(lk_open_take_lookups(pt, &q, &progress), status, out);
        progress |= lk_open_take_grads(pt, &q);
        if (!progress)
            lk_open_idle(pt, &q, now);
    }
    pt->res.lookup_s = q.last - q.first;
out:
    free(q.lookq);
    free(q.gradq);
    free(q.freel);
    return status;
}

/* ---- one sweep point ------------------------------------------------------ */

static void lk_point_free(lk_point_t *pt)
{
    for (size_t g = 0; g < LK_BATCHES; g++) {
        for (int p = 0; pt->batches[g].parts && p < pt->P; p++)
            free(pt->batches[g].parts[p].message);
        free(pt->batches[g].parts);
        free(pt->batches[g].keys);
    }
    for (size_t s = 0; pt->slot && s < pt->slots; s++) {
        free(pt->slot[s].hdr);
        free(pt->slot[s].ghdr);
        free(pt->slot[s].futures);
        free(pt->slot[s].resp);
    }
    for (size_t i = 0; i < pt->resp_nfree; i++)
        free(pt->resp_free[i]);
    free(pt->resp_free);
    free(pt->slot);
    free(pt->grad);
    free(pt->table);
    free(pt->zipf_cdf);
    free(pt->samples);
}

/* Timed requests per client at this point: --max-bytes of replies, at least
 * LK_MIN_ITERS, at most -n. */
static size_t lk_point_total(const lk_point_t *pt)
{
    size_t total = pt->opts->max_bytes / (lk_reply_bytes(pt) * (size_t)pt->P);
    if (total < LK_MIN_ITERS)
        total = LK_MIN_ITERS;
    if (total > pt->opts->iters)
        total = pt->opts->iters;
    return total;
}

/* The batches (keys and requests), the slots, the gradient every push sends
 * and room for @total samples. */
static ember_status_t lk_point_alloc(lk_point_t *pt, size_t total)
{
    const lk_opts_t *opts = pt->opts;
    size_t grad_bytes = pt->bags * pt->dim * sizeof(float);
    uint64_t rng = opts->seed * 1000003u + (uint64_t)pt->client * 7919u + pt->table_id;

    if (pt->dist.alpha > 0.0 && !(pt->zipf_cdf = lk_zipf_cdf(opts->rows, pt->dist.alpha)))
        return EMBER_ERR_NO_MEMORY;
    for (size_t g = 0; g < LK_BATCHES; g++)
        EMBER_CHECK(lk_build_batch(pt, &pt->batches[g], &rng));
    pt->slot = calloc(pt->slots, sizeof(*pt->slot));
    pt->resp_free = calloc(pt->slots, sizeof(*pt->resp_free));
    pt->grad = malloc(grad_bytes + 4);
    pt->samples = malloc((total + 1) * sizeof(double));
    if (!pt->slot || !pt->resp_free || !pt->grad || !pt->samples)
        return EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i < pt->bags * pt->dim; i++)
        pt->grad[i] = 1e-4f;
    return EMBER_OK;
}

/* Each slot a virtual trainer (client x slots + slot): its LOOKUP and GRAD
 * headers to every shard, a send filling in the step (and the counts). */
static ember_status_t lk_slots_init(lk_point_t *pt)
{
    for (size_t s = 0; s < pt->slots; s++) {
        lk_slot_t *slot = &pt->slot[s];
        slot->hdr = calloc((size_t)pt->P, sizeof(*slot->hdr));
        slot->ghdr = calloc((size_t)pt->P, sizeof(*slot->ghdr));
        slot->futures = calloc((size_t)pt->P, sizeof(*slot->futures));
        if (!slot->hdr || !slot->ghdr || !slot->futures)
            return EMBER_ERR_NO_MEMORY;
        uint32_t trainer = (uint32_t)((size_t)pt->client * pt->slots + s);
        for (int p = 0; p < pt->P; p++) {
            slot->hdr[p] = (ember_msg_lookup_t){.table_id = pt->table_id,
                                                .trainer = trainer,
                                                .flags = lk_lookup_flags(pt),
                                                .bags = (uint32_t)pt->bags};
            slot->ghdr[p] = (ember_msg_grad_t){.table_id = pt->table_id,
                                               .trainer = trainer,
                                               .flags = EMBER_GRAD_APPLY,
                                               .bags = (uint32_t)pt->bags};
        }
    }
    return EMBER_OK;
}

/* Client 0 creates the shards; the others wait for the word. */
static ember_status_t lk_table_ready(lk_point_t *pt)
{
    char key[64];
    snprintf(key, sizeof(key), "lookup/%u/table/%u", lk_round, pt->table_id);
    if (pt->client == 0) {
        EMBER_CHECK(lk_create_table(pt));
        return ember_tp_store_set(pt->tp, key, "1", 1);
    }
    void *value = NULL;
    size_t length;
    EMBER_CHECK(ember_tp_store_get(pt->tp, key, &value, &length));
    free(value);
    return EMBER_OK;
}

/* The loop the options ask for, then the latency percentiles. */
static ember_status_t lk_point_measure(lk_point_t *pt, size_t total)
{
    const lk_opts_t *opts = pt->opts;
    /* Held requests count in latency: it runs from before their post. */
    int batching = lk_batching(opts, pt->window);
    if (batching)
        ember_rpc_batch_begin(pt->tp);
    ember_status_t status = opts->rate > 0.0 ? lk_open_loop(pt, total, opts->warmup)
                                             : lk_closed_loop(pt, total, opts->warmup);
    if (batching)
        ember_rpc_batch_end(pt->tp);
    EMBER_CHECK(status);
    bench_sort(pt->samples, pt->nsamples);
    const double pcts[5] = {50.0, 90.0, 99.0, 99.9, 100.0};
    for (int i = 0; i < 5; i++)
        pt->res.pct[i] = bench_percentile(pt->samples, pt->nsamples, pcts[i]) * 1e6;
    return EMBER_OK;
}

static ember_status_t lk_point_run(lk_point_t *pt)
{
    size_t total = lk_point_total(pt);

    EMBER_CHECK(lk_point_alloc(pt, total));
    EMBER_CHECK(lk_slots_init(pt));
    EMBER_CHECK(lk_table_ready(pt));
    if (pt->opts->check)
        EMBER_CHECK(lk_read_table(pt));
    EMBER_CHECK(lk_meet(pt, "start"));
    return lk_point_measure(pt, total);
}

/* Every PS's counters (client 0, between points: nobody sends then). */
static ember_status_t lk_ps_stats(ember_tp_t *tp, int clients, int P, ember_msg_ps_stats_t *stats)
{
    for (int p = 0; p < P; p++) {
        size_t got = 0;
        EMBER_CHECK(ember_rpc_call(tp, clients + p, EMBER_OP_PS_STATS, NULL, 0, &stats[p],
                                   sizeof(stats[p]), &got));
        if (got != sizeof(stats[p]))
            return EMBER_ERR_BAD_MESSAGE;
    }
    return EMBER_OK;
}

/* The busiest PS's service time per lookup over a point, in microseconds
 * (@compute: of it, the tables' own work). */
static double lk_ps_us(const ember_msg_ps_stats_t *before, const ember_msg_ps_stats_t *after, int P,
                       int compute)
{
    double worst = 0.0;
    for (int p = 0; p < P; p++) {
        uint64_t lookups = after[p].lookups - before[p].lookups;
        double seconds =
                compute ? after[p].lookup_compute_seconds - before[p].lookup_compute_seconds
                        : after[p].lookup_seconds - before[p].lookup_seconds;
        double us = lookups ? seconds / (double)lookups * 1e6 : 0.0;
        worst = us > worst ? us : worst;
    }
    return worst;
}

static void lk_header(const lk_opts_t *opts, int clients, int P)
{
    printf("# ember-bench lookup: %d client(s) (ranks 0..%d), %d PS (engine/ps, async "
           "tables of %zu rows, SGD), UCX_TLS=%s\n",
           clients, clients - 1, P, opts->rows, bench_tls_name());
    if (opts->rate > 0.0)
        printf("# open loop: %.0f requests/s per client, latency from the intended "
               "send time; each lookup followed by its gradient push; slots %zu\n",
               opts->rate, opts->slots);
    else
        printf("# closed loop: window %zu outstanding requests per client, rounds of "
               "up to %zu lookups then their gradient pushes (timed apart)\n",
               opts->window, opts->slots);
    if (!lk_batching(opts, opts->window))
        printf("# requests not batched: each its own message (--batch 0)\n");
    else if (opts->rate > 0.0)
        printf("# requests batched: the lookups and pushes due together leave as one "
               "message per PS (up to 2 KiB each, 8 KiB over tcp; --batch 0: each alone)\n");
    else
        printf("# requests batched: up to %zu lookups (and pushes) posted together leave "
               "as one message per PS (each up to 2 KiB, 8 KiB over tcp; --batch 0: each "
               "alone)\n",
               lk_batch(opts, opts->window));
    printf("# request = one trainer step: one LOOKUP per shard (dedup'd rows); "
           "resp_B = P x bags x dim x 4; GB = 10^9 B of responses; rows = indices;\n"
           "# dtype = how the PS stores the table's rows (pooled in fp32); reply = the\n"
           "# replies on the wire (fp16: the pooled values rounded, resp_B x 2 / 4)\n"
           "# latency us = max over clients of each percentile; rows/s, GB/s, req/s "
           "summed over clients; grad = GRAD+APPLY rows/s; %%pf = filled by "
           "bench/compare.sh\n"
           "# ps_us = the busiest PS's own time per lookup (checks, pooling, reply "
           "handed to the transport, which sends replies <= 2 KiB (8 KiB over tcp) batched after "
           "it; engine/ps counters): P x bags x dim x 4 / ps_us is the most the "
           "PS can serve\n"
           "# thr = each PS's compute threads (--ps-threads); cmp_us = of ps_us, the "
           "tables' own work (checks, pooling) on them; ps_us - cmp_us: unpacking, the\n"
           "# reply handed to UCX; per request the PS's wall time is 1 / req/s per PS\n");
    for (size_t t = 0; t < opts->dtype.count; t++) {
        if (opts->dtype.at[t] == EMBER_DTYPE_F16) {
            printf("# fp16 rows converted %s (this client's CPU; the PS's may differ)\n",
                   ember_half_f16c() ? "with F16C, 8 values an instruction"
                                     : "by portable code (no F16C)");
            break;
        }
    }
    printf("%-6s %3s %3s %-9s %6s %5s %5s %5s %5s %10s %10s %12s %8s %10s %9s %9s %9s %9s "
           "%9s %8s %12s %5s %6s %3s %8s\n",
           "mode", "ps", "cli", "dist", "bags", "idx", "dim", "dtype", "reply", "req_B", "resp_B",
           "rows/s", "GB/s", "req/s", "p50_us", "p90_us", "p99_us", "p99.9_us", "max_us", "ps_us",
           "grad_rows/s", "%pf", "#wrong", "thr", "cmp_us");
    fflush(stdout);
}

/* A client's sweep, and (client 0) every PS's counters between points. */
typedef struct {
    ember_tp_t *tp;
    const lk_opts_t *opts;
    int client, clients, P;
    ember_msg_ps_stats_t *before, *after; /* [P] */
    double wrong_total;
    int ret;
} lk_client_t;

/* Everybody's figures at one point, as client 0 prints them. */
typedef struct {
    double rows_s, bytes_s, req_s, grad_s, wrong, req_b, pct[5];
    double ps_us, compute_us;
    uint32_t threads;
} lk_row_t;

/* The lowest digit of *@rest in base @base, taken off it. */
static size_t lk_digit(size_t *rest, size_t base)
{
    size_t digit = *rest % base;
    *rest /= base;
    return digit;
}

/* Sweep point @table_id: the bags vary fastest, then the indices per bag,
 * the dim, the distribution, the rows' dtype and the replies'. */
static void lk_point_init(lk_point_t *pt, const lk_client_t *cl, uint32_t table_id)
{
    const lk_opts_t *opts = cl->opts;
    size_t rest = table_id;
    size_t bags = opts->bags.at[lk_digit(&rest, opts->bags.count)];
    size_t pool = opts->pool.at[lk_digit(&rest, opts->pool.count)];
    size_t dim = opts->dim.at[lk_digit(&rest, opts->dim.count)];
    lk_dist_t dist = opts->dist.at[lk_digit(&rest, opts->dist.count)];
    ember_dtype_t dtype = opts->dtype.at[lk_digit(&rest, opts->dtype.count)];
    ember_dtype_t reply = opts->reply.at[lk_digit(&rest, opts->reply.count)];

    *pt = (lk_point_t){.tp = cl->tp,
                       .opts = opts,
                       .client = cl->client,
                       .clients = cl->clients,
                       .first_ps = cl->clients,
                       .P = cl->P,
                       .table_id = table_id,
                       .bags = bags,
                       .pool = pool,
                       .dim = dim,
                       .dist = dist,
                       .dtype = dtype,
                       .half_reply = reply == EMBER_DTYPE_F16,
                       .window = opts->window};
    /* Virtual trainers: as many as LK_SLOT_BYTES of reply and key buffers
     * hold, at most --slots, at least the window (which the closed loop
     * cannot keep fuller than its slots). */
    size_t per_slot = (size_t)pt->P * pt->bags * pt->dim * sizeof(float) + pt->bags * pt->pool * 16;
    pt->slots = LK_SLOT_BYTES / per_slot;
    if (pt->slots > opts->slots)
        pt->slots = opts->slots;
    if (pt->slots < pt->window)
        pt->slots = pt->window;
    if (opts->rate == 0.0 && pt->window > pt->slots)
        pt->window = pt->slots;
}

/* Client @c's figures at @pt: client 0's own, the others' from the store. */
static ember_status_t lk_result_get(const lk_client_t *cl, const lk_point_t *pt, int c,
                                    lk_result_t *res)
{
    char key[64];
    void *value = NULL;
    size_t length = 0;

    if (c == 0) {
        *res = pt->res;
        return EMBER_OK;
    }
    snprintf(key, sizeof(key), "lookup/%u/result/%u/%d", lk_round, pt->table_id, c);
    ember_status_t status = ember_tp_store_get(cl->tp, key, &value, &length);
    if (status == EMBER_OK && length != sizeof(*res))
        status = EMBER_ERR_BAD_MESSAGE;
    if (status == EMBER_OK)
        memcpy(res, value, sizeof(*res));
    free(value);
    return status;
}

/* Client 0: everybody's rates at @pt summed, each latency percentile the
 * worst client's. */
static ember_status_t lk_row_sum(const lk_client_t *cl, const lk_point_t *pt, lk_row_t *row)
{
    *row = (lk_row_t){0};
    for (int c = 0; c < cl->clients; c++) {
        lk_result_t res;
        EMBER_CHECK(lk_result_get(cl, pt, c, &res));
        if (res.lookup_s > 0) {
            row->rows_s += res.indices / res.lookup_s;
            row->bytes_s += res.resp_bytes / res.lookup_s;
            row->req_s += res.lookups / res.lookup_s;
        }
        if (res.grad_s > 0)
            row->grad_s += res.grad_indices / res.grad_s;
        if (res.lookups > 0 && c == 0)
            row->req_b = res.req_bytes / res.lookups;
        row->wrong += res.wrong;
        for (int i = 0; i < 5; i++)
            row->pct[i] = res.pct[i] > row->pct[i] ? res.pct[i] : row->pct[i];
    }
    return EMBER_OK;
}

/* Every client is done with the point: the PS counters are final.  A PS
 * that does not answer leaves ps_us 0 and fails the run. */
static void lk_row_ps(lk_client_t *cl, lk_row_t *row)
{
    row->ps_us = row->compute_us = 0.0;
    row->threads = 0;
    if (lk_ps_stats(cl->tp, cl->clients, cl->P, cl->after) == EMBER_OK) {
        row->ps_us = lk_ps_us(cl->before, cl->after, cl->P, 0);
        row->compute_us = lk_ps_us(cl->before, cl->after, cl->P, 1);
        row->threads = cl->after[0].threads;
        memcpy(cl->before, cl->after, (size_t)cl->P * sizeof(*cl->before));
    } else {
        cl->ret = BENCH_EXIT_FAIL;
    }
}

static void lk_row_print(const lk_client_t *cl, const lk_point_t *pt, const lk_row_t *row)
{
    const lk_opts_t *opts = cl->opts;
    const double *pct = row->pct;
    int P = cl->P, clients = cl->clients;
    char dist[32], grad[32];

    if (pt->dist.alpha > 0.0)
        snprintf(dist, sizeof(dist), "zipf:%g", pt->dist.alpha);
    else
        snprintf(dist, sizeof(dist), "uniform");
    if (opts->rate > 0.0)
        snprintf(grad, sizeof(grad), "-");
    else
        snprintf(grad, sizeof(grad), "%.4g", row->grad_s);
    size_t resp_b = (size_t)P * lk_reply_bytes(pt);
    const char *reply = pt->half_reply ? "fp16" : "fp32";
    const char *mode = opts->rate > 0.0 ? "open" : "closed";
    printf("%-6s %3d %3d %-9s %6zu %5zu %5zu %5s %5s %10.0f %10zu %12.4g %8.3f %10.4g "
           "%9.1f %9.1f %9.1f %9.1f %9.1f %8.2f %12s %5s %6.0f %3u %8.2f\n",
           mode, P, clients, dist, pt->bags, pt->pool, pt->dim, lk_dtype_name(pt->dtype), reply,
           row->req_b, resp_b, row->rows_s, row->bytes_s / 1e9, row->req_s, pct[0], pct[1], pct[2],
           pct[3], pct[4], row->ps_us, grad, "-", row->wrong, row->threads, row->compute_us);
    if (opts->csv)
        printf("csv,lookup,%s,%d,%d,%s,%zu,%zu,%zu,%.0f,%zu,%zu,%.6g,%.6g,%.6g,"
               "%.3f,%.3f,%.3f,%.3f,%.3f,%.6g,%.0f,%zu,%.3f,%s,%s,%u,%.3f\n",
               mode, P, clients, dist, pt->bags, pt->pool, pt->dim, row->req_b, resp_b,
               lk_reply_bytes(pt), row->rows_s, row->bytes_s / 1e9, row->req_s, pct[0], pct[1],
               pct[2], pct[3], pct[4], opts->rate > 0.0 ? 0.0 : row->grad_s, row->wrong, pt->window,
               row->ps_us, lk_dtype_name(pt->dtype), reply, row->threads, row->compute_us);
    fflush(stdout);
}

/* The point's figures: the other clients hand theirs to client 0, which adds
 * everybody's up and prints the row.  0: the sweep cannot go on. */
static int lk_point_report(lk_client_t *cl, const lk_point_t *pt)
{
    if (cl->client != 0) {
        char key[64];
        snprintf(key, sizeof(key), "lookup/%u/result/%u/%d", lk_round, pt->table_id, cl->client);
        if (ember_tp_store_set(cl->tp, key, &pt->res, sizeof(pt->res)) != EMBER_OK)
            cl->ret = BENCH_EXIT_FAIL;
        return 1;
    }
    lk_row_t row;
    if (lk_row_sum(cl, pt, &row) != EMBER_OK)
        return 0;
    cl->wrong_total += row.wrong;
    lk_row_ps(cl, &row);
    lk_row_print(cl, pt, &row);
    return 1;
}

/* One sweep point, measured and reported; 0: the sweep cannot go on. */
static int lk_client_point(lk_client_t *cl, uint32_t table_id)
{
    lk_point_t pt;
    int go_on = 0;

    lk_point_init(&pt, cl, table_id);
    ember_status_t status = lk_point_run(&pt);
    if (status == EMBER_OK)
        go_on = lk_point_report(cl, &pt);
    else
        fprintf(stderr, "ember-bench lookup: client %d, point %u: %s\n", cl->client, table_id,
                ember_status_string(status));
    lk_point_free(&pt);
    return go_on;
}

/* Client 0 prints the header and takes the PS counters before the first
 * point: each point's "after" is the next one's "before" (nobody looks up
 * between points). */
static ember_status_t lk_client_start(lk_client_t *cl)
{
    cl->before = calloc((size_t)cl->P, sizeof(*cl->before));
    cl->after = calloc((size_t)cl->P, sizeof(*cl->after));
    if (!cl->before || !cl->after)
        return EMBER_ERR_NO_MEMORY;
    if (cl->client != 0)
        return EMBER_OK;
    if (lk_round == 0)
        lk_header(cl->opts, cl->clients, cl->P);
    return lk_ps_stats(cl->tp, cl->clients, cl->P, cl->before);
}

/* Client 0, everybody's results in, so nobody sends any more: the verdict,
 * and the PS stopped. */
static void lk_client_finish(lk_client_t *cl)
{
    printf("# wrong replies: %.0f %s\n", cl->wrong_total, cl->wrong_total ? "FAILED" : "OK");
    fflush(stdout);
    for (int p = 0; p < cl->P; p++) {
        if (ember_rpc_call(cl->tp, cl->clients + p, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0, NULL) !=
            EMBER_OK)
            cl->ret = BENCH_EXIT_FAIL;
    }
    if (cl->wrong_total)
        cl->ret = BENCH_EXIT_FAIL;
}

static int lk_client(ember_tp_t *tp, const lk_opts_t *opts, int client, int clients, int P)
{
    lk_client_t cl = {.tp = tp,
                      .opts = opts,
                      .client = client,
                      .clients = clients,
                      .P = P,
                      .ret = BENCH_EXIT_OK};
    int ret = lk_client_start(&cl) == EMBER_OK ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;

    for (uint32_t t = 0; ret == BENCH_EXIT_OK && t < lk_points(opts); t++) {
        if (!lk_client_point(&cl, t))
            ret = BENCH_EXIT_FAIL;
    }
    if (ret == BENCH_EXIT_OK && client == 0)
        lk_client_finish(&cl);
    free(cl.before);
    free(cl.after);
    return ret == BENCH_EXIT_OK ? cl.ret : ret;
}

int bench_lookup_main(int argc, char **argv)
{
    lk_opts_t opts;
    ember_tp_t *tp = NULL;
    int ret;

    if (!lk_parse(argc, argv, &opts))
        return BENCH_EXIT_USAGE;
    if (bench_join(&tp) != EMBER_OK)
        return BENCH_EXIT_FAIL;
    int n = ember_tp_world_size(tp), rank = ember_tp_rank(tp);
    int P = (int)opts.ps, clients = n - P;
    if (clients < 1) {
        if (rank == 0)
            fprintf(stderr,
                    "ember-bench lookup: %d ranks cannot hold %d PS and a "
                    "client (run ember-run -n %d or more)\n",
                    n, P, P + 1);
        ember_tp_destroy(tp);
        return BENCH_EXIT_USAGE;
    }
    ret = BENCH_EXIT_OK;
    for (lk_round = 0; ret == BENCH_EXIT_OK && lk_round < opts.threads.count; lk_round++) {
        const unsigned threads = (unsigned)opts.threads.at[lk_round];
        if (rank >= clients) {
            ember_status_t status = ember_ps_run(tp, &(ember_ps_run_options_t){.threads = threads});
            ret = status == EMBER_OK ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
        } else {
            /* The PS ranks meet here once their handlers are registered. */
            ret = ember_tp_barrier(tp, "roles-ready") == EMBER_OK
                          ? lk_client(tp, &opts, rank, clients, P)
                          : BENCH_EXIT_FAIL;
        }
    }
    ember_tp_destroy(tp);
    return ret;
}
