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
 * EMBER_OP_LOOKUP per shard carries offsets, unique rows and the inverse map
 * (the code of engine/train/trainer.c build_requests); the request is done when
 * every shard's pooled reply (bags x dim floats) is in.
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

#include "engine/ops/half.h"
#include "engine/ps/ps.h"
#include "engine/wire/protocol.h"

#include <ember/config.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>

#include <math.h>
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

typedef struct {
    size_t bags[LK_MAX_LIST], nbags;
    size_t pool[LK_MAX_LIST], npool; /* indices per bag */
    size_t dim[LK_MAX_LIST], ndim;
    lk_dist_t dist[LK_MAX_LIST];
    size_t ndist;
    ember_dtype_t dtype[2]; /* how the PS stores rows: F32 and/or F16 */
    size_t ndtype;
    int half_reply[2]; /* replies on the wire: fp32 (0) and/or fp16 (1) */
    size_t nreply;
    size_t ps;
    size_t rows;
    size_t iters, warmup, window, slots;
    size_t max_bytes; /* per point: iters = min(iters, max(50, B / response)) */
    double rate;      /* open loop requests/s per client; 0 = closed loop */
    int check, csv;
    size_t batch; /* closed loop: lookups held per batch (ember_rpc_batch_begin);
                   * 0: each alone; LK_BATCH_HALF: half the window */
    uint64_t seed;
} lk_opts_t;

/* One shard's part of a prebuilt batch: the bytes after the LOOKUP header. */
typedef struct {
    uint8_t *body;
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
            "  --csv             also print `csv,lookup,...` lines\n",
            LK_MIN_ITERS);
}

static int lk_parse_list(const char *text, size_t *out, size_t *count_p)
{
    char buf[256], *save = NULL;
    size_t count = 0;
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (count == LK_MAX_LIST || !bench_parse_size(tok, &out[count]) || !out[count])
            return 0;
        count++;
    }
    *count_p = count;
    return count > 0;
}

static int lk_parse_dist(const char *text, lk_opts_t *opts)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", text);
    opts->ndist = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        if (opts->ndist == LK_MAX_LIST)
            return 0;
        if (strcmp(tok, "uniform") == 0) {
            opts->dist[opts->ndist++].alpha = 0.0;
        } else if (strncmp(tok, "zipf:", 5) == 0) {
            double alpha = strtod(tok + 5, &end);
            if (*end || !(alpha > 0.0) || alpha > 10.0) {
                fprintf(stderr, "ember-bench lookup: bad zipf alpha '%s'\n", tok + 5);
                return 0;
            }
            opts->dist[opts->ndist++].alpha = alpha;
        } else {
            fprintf(stderr, "ember-bench lookup: bad distribution '%s'\n", tok);
            return 0;
        }
    }
    return opts->ndist > 0;
}

/* --dtype (@reply 0: the rows) or --reply-dtype (1): fp32 and/or fp16. */
static int lk_parse_dtype(const char *text, lk_opts_t *opts, int reply)
{
    char buf[64], *save = NULL;
    size_t *count = reply ? &opts->nreply : &opts->ndtype;
    snprintf(buf, sizeof(buf), "%s", text);
    *count = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*count == 2 || (strcmp(tok, "fp32") && strcmp(tok, "fp16"))) {
            fprintf(stderr, "ember-bench lookup: bad dtype list '%s' (fp32, fp16)\n", text);
            return 0;
        }
        int half = strcmp(tok, "fp16") == 0;
        if (reply)
            opts->half_reply[(*count)++] = half;
        else
            opts->dtype[(*count)++] = half ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
    }
    return *count > 0;
}

static const char *lk_dtype_name(ember_dtype_t dtype)
{
    return dtype == EMBER_DTYPE_F16 ? "fp16" : "fp32";
}

static int lk_parse(int argc, char **argv, lk_opts_t *opts)
{
    *opts = (lk_opts_t){.nbags = 4,
                        .bags = {1, 16, 256, 4096},
                        .npool = 2,
                        .pool = {1, 16},
                        .ndim = 1,
                        .dim = {64},
                        .ndist = 2,
                        .dist = {{0.0}, {1.05}},
                        .ndtype = 1,
                        .dtype = {EMBER_DTYPE_F32},
                        .nreply = 1,
                        .half_reply = {0},
                        .ps = 1,
                        .rows = 100000,
                        .iters = 2000,
                        .warmup = 100,
                        .window = 16,
                        .slots = 256,
                        .max_bytes = 1u << 30,
                        .check = 1,
                        .batch = LK_BATCH_HALF,
                        .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1, takes_value = 1;
        size_t n;

        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            lk_usage(stdout);
            exit(BENCH_EXIT_OK);
        } else if (strcmp(arg, "--csv") == 0) {
            opts->csv = 1;
            takes_value = 0;
        } else if (!value) {
            fprintf(stderr, "ember-bench lookup: %s needs a value\n", arg);
            return 0;
        } else if (strcmp(arg, "--ps") == 0) {
            ok = bench_parse_count(value, &opts->ps);
        } else if (strcmp(arg, "--bags") == 0) {
            ok = lk_parse_list(value, opts->bags, &opts->nbags);
        } else if (strcmp(arg, "--pool") == 0) {
            ok = lk_parse_list(value, opts->pool, &opts->npool);
        } else if (strcmp(arg, "--dim") == 0) {
            ok = lk_parse_list(value, opts->dim, &opts->ndim);
        } else if (strcmp(arg, "--dist") == 0) {
            ok = lk_parse_dist(value, opts);
        } else if (strcmp(arg, "--dtype") == 0) {
            ok = lk_parse_dtype(value, opts, 0);
        } else if (strcmp(arg, "--reply-dtype") == 0) {
            ok = lk_parse_dtype(value, opts, 1);
        } else if (strcmp(arg, "--rows") == 0) {
            ok = bench_parse_size(value, &opts->rows);
        } else if (strcmp(arg, "-n") == 0) {
            ok = bench_parse_count(value, &opts->iters);
        } else if (strcmp(arg, "-w") == 0) {
            ok = bench_parse_count_or_zero(value, &opts->warmup);
        } else if (strcmp(arg, "--window") == 0) {
            ok = bench_parse_count(value, &opts->window);
        } else if (strcmp(arg, "--slots") == 0) {
            ok = bench_parse_count(value, &opts->slots);
        } else if (strcmp(arg, "--max-bytes") == 0) {
            ok = bench_parse_size(value, &opts->max_bytes);
        } else if (strcmp(arg, "--rate") == 0) {
            char *end;
            opts->rate = strtod(value, &end);
            ok = !*end && opts->rate > 0.0;
        } else if (strcmp(arg, "-c") == 0) {
            ok = strcmp(value, "0") == 0 || strcmp(value, "1") == 0;
            opts->check = value[0] == '1';
        } else if (strcmp(arg, "--batch") == 0) {
            ok = bench_parse_count_or_zero(value, &opts->batch);
        } else if (strcmp(arg, "--seed") == 0) {
            ok = bench_parse_count(value, &n);
            opts->seed = n;
        } else {
            fprintf(stderr, "ember-bench lookup: unknown option '%s'\n", arg);
            lk_usage(stderr);
            return 0;
        }
        if (!ok) {
            fprintf(stderr, "ember-bench lookup: bad value for %s: '%s'\n", arg,
                    value ? value : "");
            return 0;
        }
        i += takes_value;
    }
    if (opts->nbags * opts->npool * opts->ndim * opts->ndist * opts->ndtype * opts->nreply >
        LK_MAX_POINTS) {
        fprintf(stderr, "ember-bench lookup: at most %d sweep points\n", LK_MAX_POINTS);
        return 0;
    }
    if (opts->rows < 1 || opts->rows > ((size_t)1 << 31)) {
        fprintf(stderr, "ember-bench lookup: --rows out of range\n");
        return 0;
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

/* ---- requests, as engine/train/trainer.c build_requests ---------------------- */

static ember_status_t lk_build_batch(lk_point_t *pt, lk_batch_t *batch, uint64_t *rng)
{
    size_t bags = pt->bags, pool = pt->pool, n = bags * pool;
    uint32_t P = (uint32_t)pt->P;
    int64_t *rows = malloc(n * sizeof(*rows));
    int64_t *unique = malloc((n + 1) * sizeof(*unique));
    int64_t *inverse = malloc((n + 1) * sizeof(*inverse));
    uint32_t *counts = malloc(bags * sizeof(*counts));
    ember_status_t status = EMBER_ERR_NO_MEMORY;

    batch->keys = malloc(n * sizeof(*batch->keys));
    batch->parts = calloc(P, sizeof(*batch->parts));
    if (!rows || !unique || !inverse || !counts || !batch->keys || !batch->parts)
        goto out;
    for (size_t i = 0; i < n; i++)
        batch->keys[i] = lk_key(pt, rng);
    for (uint32_t p = 0; p < P; p++) {
        size_t entries = 0, nunique = 0;
        memset(counts, 0, bags * sizeof(*counts));
        for (size_t b = 0; b < bags; b++) {
            for (size_t i = b * pool; i < (b + 1) * pool; i++) {
                if ((uint64_t)batch->keys[i] % P != p)
                    continue;
                rows[entries++] = batch->keys[i];
                counts[b]++;
            }
        }
        status = ember_bag_dedup(rows, entries, -1, unique, inverse, &nunique);
        if (status != EMBER_OK)
            goto out;
        lk_part_t *part = &batch->parts[p];
        part->body_bytes = 4 * bags + 8 * nunique + 4 * entries;
        part->body = malloc(part->body_bytes + 8);
        part->unique = (uint32_t)nunique;
        part->indices = (uint32_t)entries;
        status = EMBER_ERR_NO_MEMORY;
        if (!part->body)
            goto out;
        uint8_t *out = part->body;
        uint32_t offset = 0;
        for (size_t b = 0; b < bags; b++) {
            memcpy(out, &offset, 4);
            out += 4;
            offset += counts[b];
        }
        memcpy(out, unique, 8 * nunique);
        out += 8 * nunique;
        for (size_t i = 0; i < entries; i++) {
            uint32_t slot = (uint32_t)inverse[i];
            memcpy(out, &slot, 4);
            out += 4;
        }
    }
    status = EMBER_OK;
out:
    free(rows);
    free(unique);
    free(inverse);
    free(counts);
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

static ember_status_t lk_meet(lk_point_t *pt, const char *what)
{
    char key[96];
    snprintf(key, sizeof(key), "lookup/%s/%u/%d", what, pt->table_id, pt->client);
    EMBER_CHECK(ember_tp_store_set(pt->tp, key, "1", 1));
    for (int c = 0; c < pt->clients; c++) {
        void *value = NULL;
        size_t length;
        snprintf(key, sizeof(key), "lookup/%s/%u/%d", what, pt->table_id, c);
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
        slot->hdr[p].step = slot->step;
        slot->hdr[p].unique = part->unique;
        slot->hdr[p].indices = part->indices;
        ember_iov_t iov[2] = {{&slot->hdr[p], sizeof(slot->hdr[p])},
                              {part->body, part->body_bytes}};
        EMBER_CHECK(ember_rpc_call_async(pt->tp, pt->first_ps + p, EMBER_OP_LOOKUP, iov, 2,
                                         slot->resp + (size_t)p * pt->bags * pt->dim, resp_bytes,
                                         NULL, &slot->futures[p]));
    }
    return EMBER_OK;
}

static ember_status_t lk_send_grad(lk_point_t *pt, lk_slot_t *slot)
{
    for (int p = 0; p < pt->P; p++) {
        slot->ghdr[p].step = slot->step;
        ember_iov_t iov[2] = {{&slot->ghdr[p], sizeof(slot->ghdr[p])},
                              {pt->grad, pt->bags * pt->dim * sizeof(float)}};
        EMBER_CHECK(ember_rpc_call_async(pt->tp, pt->first_ps + p, EMBER_OP_GRAD, iov, 2, NULL, 0,
                                         NULL, &slot->futures[p]));
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
        pt->res.req_bytes +=
                (double)(sizeof(ember_msg_lookup_t) + pt->batches[slot->batch].parts[p].body_bytes);
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

static ember_status_t lk_closed_loop(lk_point_t *pt, size_t total, size_t warmup)
{
    size_t resp_bytes = lk_reply_bytes(pt), done_requests = 0;
    size_t window = pt->window, batch = lk_batch(pt->opts, window), held = 0;
    uint64_t round = 0;

    while (done_requests < warmup + total) {
        size_t n = pt->slots, left = warmup + total - done_requests;
        if (n > left)
            n = left;
        int timed = done_requests >= warmup;
        size_t issued = 0, done = 0;
        double start = bench_now();
        /* Lookups, WINDOW outstanding; replies come back in order per PS. */
        while (done < n) {
            while (issued < n && issued - done < window) {
                lk_slot_t *slot = &pt->slot[issued];
                slot->step = round;
                slot->intended = bench_now();
                EMBER_CHECK(lk_send_lookup(pt, slot, (round * pt->slots + issued) % LK_BATCHES));
                issued++;
                if (batch && ++held == batch) { /* this batch is full: it goes */
                    ember_rpc_batch_end(pt->tp);
                    ember_rpc_batch_begin(pt->tp);
                    held = 0;
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
        double mid = bench_now();
        if (timed)
            pt->res.lookup_s += mid - start;
        if (round == 0 && pt->opts->check) {
            /* Nobody has pushed a gradient yet: the replies must match. */
            for (size_t s = 0; s < n; s++) {
                pt->res.wrong += (double)lk_check_reply(pt, &pt->slot[s]);
                lk_resp_give(pt, &pt->slot[s]);
            }
            EMBER_CHECK(lk_meet(pt, "checked"));
            mid = bench_now();
        }
        /* The gradient pushes of those lookups, applied (EMBER_GRAD_APPLY). */
        issued = done = 0;
        while (done < n) {
            while (issued < n && issued - done < window)
                EMBER_CHECK(lk_send_grad(pt, &pt->slot[issued++]));
            lk_collect(pt, &pt->slot[done++], 1, 0);
        }
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

/* Open loop: FIFO of slots in lookup, FIFO of slots in push, free list. */
static ember_status_t lk_open_loop(lk_point_t *pt, size_t total, size_t warmup)
{
    size_t S = pt->slots, resp_bytes = lk_reply_bytes(pt);
    size_t *lookq = malloc(S * sizeof(size_t)), *gradq = malloc(S * sizeof(size_t));
    size_t *freel = malloc(S * sizeof(size_t));
    size_t lh = 0, lt = 0, gh = 0, gt = 0, nfree = S, next = 0, completed = 0;
    double interval = 1.0 / pt->opts->rate, t0, first = 0.0, last = 0.0;
    ember_status_t status = EMBER_OK;

    if (!lookq || !gradq || !freel) {
        status = EMBER_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t s = 0; s < S; s++) {
        freel[s] = S - 1 - s;
        pt->slot[s].step = 0;
    }
    t0 = bench_now();
    while (completed < warmup + total || gh != gt) {
        double now = bench_now();
        int progress = 0;
        /* Everything due goes out while slots are free; the rest waits, its
         * intended time unchanged. */
        while (next < warmup + total && now >= t0 + (double)next * interval && nfree) {
            lk_slot_t *slot = &pt->slot[freel[--nfree]];
            slot->intended = t0 + (double)next * interval;
            status = lk_send_lookup(pt, slot, next % LK_BATCHES);
            if (status != EMBER_OK)
                goto out;
            lookq[lt++ % S] = (size_t)(slot - pt->slot);
            next++;
            progress = 1;
        }
        while (lh != lt && lk_collect(pt, &pt->slot[lookq[lh % S]], 0, resp_bytes)) {
            lk_slot_t *slot = &pt->slot[lookq[lh++ % S]];
            double end = bench_now();
            lk_resp_give(pt, slot);
            if (completed >= warmup) {
                if (completed == warmup)
                    first = slot->intended;
                last = end;
                pt->samples[pt->nsamples++] = end - slot->intended;
                lk_account(pt, slot);
            }
            completed++;
            status = lk_send_grad(pt, slot);
            if (status != EMBER_OK)
                goto out;
            gradq[gt++ % S] = (size_t)(slot - pt->slot);
            progress = 1;
        }
        while (gh != gt && lk_collect(pt, &pt->slot[gradq[gh % S]], 0, 0)) {
            lk_slot_t *slot = &pt->slot[gradq[gh++ % S]];
            slot->step++;
            freel[nfree++] = (size_t)(slot - pt->slot);
            progress = 1;
        }
        if (!progress) {
            double wait = next < warmup + total ? t0 + (double)next * interval - now : 1e-3;
            if (lh != lt || gh != gt || wait > 0)
                ember_tp_wait(pt->tp, wait > 1e-3 ? 1e-3 : (wait > 0 ? wait : 0));
        }
    }
    pt->res.lookup_s = last - first;
out:
    free(lookq);
    free(gradq);
    free(freel);
    return status;
}

/* ---- one sweep point ------------------------------------------------------ */

static void lk_point_free(lk_point_t *pt)
{
    for (size_t g = 0; g < LK_BATCHES; g++) {
        for (int p = 0; pt->batches[g].parts && p < pt->P; p++)
            free(pt->batches[g].parts[p].body);
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

static ember_status_t lk_point_run(lk_point_t *pt)
{
    const lk_opts_t *opts = pt->opts;
    size_t resp_bytes = pt->bags * pt->dim * sizeof(float); /* and the gradient's */
    size_t total = opts->max_bytes / (lk_reply_bytes(pt) * (size_t)pt->P);
    char key[64];
    uint64_t rng = opts->seed * 1000003u + (uint64_t)pt->client * 7919u + pt->table_id;

    if (total < LK_MIN_ITERS)
        total = LK_MIN_ITERS;
    if (total > opts->iters)
        total = opts->iters;
    if (pt->dist.alpha > 0.0 && !(pt->zipf_cdf = lk_zipf_cdf(opts->rows, pt->dist.alpha)))
        return EMBER_ERR_NO_MEMORY;
    for (size_t g = 0; g < LK_BATCHES; g++)
        EMBER_CHECK(lk_build_batch(pt, &pt->batches[g], &rng));
    pt->slot = calloc(pt->slots, sizeof(*pt->slot));
    pt->resp_free = calloc(pt->slots, sizeof(*pt->resp_free));
    pt->grad = malloc(resp_bytes + 4);
    pt->samples = malloc((total + 1) * sizeof(double));
    if (!pt->slot || !pt->resp_free || !pt->grad || !pt->samples)
        return EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i < pt->bags * pt->dim; i++)
        pt->grad[i] = 1e-4f;
    for (size_t s = 0; s < pt->slots; s++) {
        lk_slot_t *slot = &pt->slot[s];
        slot->hdr = calloc((size_t)pt->P, sizeof(*slot->hdr));
        slot->ghdr = calloc((size_t)pt->P, sizeof(*slot->ghdr));
        slot->futures = calloc((size_t)pt->P, sizeof(*slot->futures));
        if (!slot->hdr || !slot->ghdr || !slot->futures)
            return EMBER_ERR_NO_MEMORY;
        uint32_t trainer = (uint32_t)((size_t)pt->client * pt->slots + s);
        for (int p = 0; p < pt->P; p++) {
            slot->hdr[p] =
                    (ember_msg_lookup_t){.table_id = pt->table_id,
                                         .trainer = trainer,
                                         .flags = pt->half_reply ? EMBER_LOOKUP_HALF_REPLY : 0,
                                         .bags = (uint32_t)pt->bags};
            slot->ghdr[p] = (ember_msg_grad_t){.table_id = pt->table_id,
                                               .trainer = trainer,
                                               .flags = EMBER_GRAD_APPLY,
                                               .bags = (uint32_t)pt->bags};
        }
    }
    /* Client 0 creates the shards; the others wait for the word. */
    snprintf(key, sizeof(key), "lookup/table/%u", pt->table_id);
    if (pt->client == 0) {
        EMBER_CHECK(lk_create_table(pt));
        EMBER_CHECK(ember_tp_store_set(pt->tp, key, "1", 1));
    } else {
        void *value = NULL;
        size_t length;
        EMBER_CHECK(ember_tp_store_get(pt->tp, key, &value, &length));
        free(value);
    }
    if (opts->check)
        EMBER_CHECK(lk_read_table(pt));
    EMBER_CHECK(lk_meet(pt, "start"));
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

/* The busiest PS's service time per lookup over a point, in microseconds. */
static double lk_ps_us(const ember_msg_ps_stats_t *before, const ember_msg_ps_stats_t *after, int P)
{
    double worst = 0.0;
    for (int p = 0; p < P; p++) {
        uint64_t lookups = after[p].lookups - before[p].lookups;
        double us = lookups ? (after[p].lookup_seconds - before[p].lookup_seconds) /
                                      (double)lookups * 1e6
                            : 0.0;
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
           "PS can serve\n");
    for (size_t t = 0; t < opts->ndtype; t++) {
        if (opts->dtype[t] == EMBER_DTYPE_F16) {
            printf("# fp16 rows converted %s (this client's CPU; the PS's may differ)\n",
                   ember_half_f16c() ? "with F16C, 8 values an instruction"
                                     : "by portable code (no F16C)");
            break;
        }
    }
    printf("%-6s %3s %3s %-9s %6s %5s %5s %5s %5s %10s %10s %12s %8s %10s %9s %9s %9s %9s "
           "%9s %8s %12s %5s %6s\n",
           "mode", "ps", "cli", "dist", "bags", "idx", "dim", "dtype", "reply", "req_B", "resp_B",
           "rows/s", "GB/s", "req/s", "p50_us", "p90_us", "p99_us", "p99.9_us", "max_us", "ps_us",
           "grad_rows/s", "%pf", "#wrong");
    fflush(stdout);
}

static int lk_client(ember_tp_t *tp, const lk_opts_t *opts, int client, int clients, int P)
{
    uint32_t table_id = 0;
    int ret = BENCH_EXIT_OK;
    double wrong_total = 0.0;
    ember_msg_ps_stats_t *before = calloc((size_t)P, sizeof(*before));
    ember_msg_ps_stats_t *after = calloc((size_t)P, sizeof(*after));

    if (!before || !after) {
        free(before);
        free(after);
        return BENCH_EXIT_FAIL;
    }
    if (client == 0) {
        lk_header(opts, clients, P);
        /* Each point's "after" is the next one's "before": nobody looks up
         * between points. */
        if (lk_ps_stats(tp, clients, P, before) != EMBER_OK) {
            free(before);
            free(after);
            return BENCH_EXIT_FAIL;
        }
    }
    for (size_t ir = 0; ir < opts->nreply; ir++)
        for (size_t it = 0; it < opts->ndtype; it++)
            for (size_t id = 0; id < opts->ndist; id++)
                for (size_t im = 0; im < opts->ndim; im++)
                    for (size_t ip = 0; ip < opts->npool; ip++)
                        for (size_t ib = 0; ib < opts->nbags; ib++, table_id++) {
                            lk_point_t pt = {.tp = tp,
                                             .opts = opts,
                                             .client = client,
                                             .clients = clients,
                                             .first_ps = clients,
                                             .P = P,
                                             .table_id = table_id,
                                             .bags = opts->bags[ib],
                                             .pool = opts->pool[ip],
                                             .dim = opts->dim[im],
                                             .dist = opts->dist[id],
                                             .dtype = opts->dtype[it],
                                             .half_reply = opts->half_reply[ir],
                                             .window = opts->window};
                            size_t per_slot = (size_t)P * pt.bags * pt.dim * sizeof(float) +
                                              pt.bags * pt.pool * 16;
                            pt.slots = LK_SLOT_BYTES / per_slot;
                            if (pt.slots > opts->slots)
                                pt.slots = opts->slots;
                            if (pt.slots < pt.window)
                                pt.slots = pt.window;
                            if (opts->rate == 0.0 && pt.window > pt.slots)
                                pt.window = pt.slots;
                            ember_status_t status = lk_point_run(&pt);
                            if (status != EMBER_OK) {
                                fprintf(stderr, "ember-bench lookup: client %d, point %u: %s\n",
                                        client, table_id, ember_status_string(status));
                                lk_point_free(&pt);
                                free(before);
                                free(after);
                                return BENCH_EXIT_FAIL;
                            }
                            char key[64];
                            if (client != 0) {
                                snprintf(key, sizeof(key), "lookup/result/%u/%d", table_id, client);
                                if (ember_tp_store_set(tp, key, &pt.res, sizeof(pt.res)) !=
                                    EMBER_OK)
                                    ret = BENCH_EXIT_FAIL;
                                lk_point_free(&pt);
                                continue;
                            }
                            /* Client 0 adds everybody's figures up and prints the row. */
                            double rows_s = 0, bytes_s = 0, req_s = 0, grad_s = 0, wrong = 0,
                                   req_b = 0;
                            double pct[5] = {0, 0, 0, 0, 0};
                            for (int c = 0; c < clients; c++) {
                                lk_result_t res = pt.res;
                                if (c) {
                                    void *value = NULL;
                                    size_t length = 0;
                                    snprintf(key, sizeof(key), "lookup/result/%u/%d", table_id, c);
                                    if (ember_tp_store_get(tp, key, &value, &length) != EMBER_OK ||
                                        length != sizeof(res)) {
                                        free(value);
                                        lk_point_free(&pt);
                                        free(before);
                                        free(after);
                                        return BENCH_EXIT_FAIL;
                                    }
                                    memcpy(&res, value, sizeof(res));
                                    free(value);
                                }
                                if (res.lookup_s > 0) {
                                    rows_s += res.indices / res.lookup_s;
                                    bytes_s += res.resp_bytes / res.lookup_s;
                                    req_s += res.lookups / res.lookup_s;
                                }
                                if (res.grad_s > 0)
                                    grad_s += res.grad_indices / res.grad_s;
                                if (res.lookups > 0 && c == 0)
                                    req_b = res.req_bytes / res.lookups;
                                wrong += res.wrong;
                                for (int i = 0; i < 5; i++)
                                    pct[i] = res.pct[i] > pct[i] ? res.pct[i] : pct[i];
                            }
                            wrong_total += wrong;
                            /* Every client is done with this point: the PS counters are final. */
                            double ps_us = 0.0;
                            if (lk_ps_stats(tp, clients, P, after) == EMBER_OK) {
                                ps_us = lk_ps_us(before, after, P);
                                memcpy(before, after, (size_t)P * sizeof(*before));
                            } else {
                                ret = BENCH_EXIT_FAIL;
                            }
                            char dist[32], grad[32];
                            if (pt.dist.alpha > 0.0)
                                snprintf(dist, sizeof(dist), "zipf:%g", pt.dist.alpha);
                            else
                                snprintf(dist, sizeof(dist), "uniform");
                            if (opts->rate > 0.0)
                                snprintf(grad, sizeof(grad), "-");
                            else
                                snprintf(grad, sizeof(grad), "%.4g", grad_s);
                            size_t resp_b = (size_t)P * lk_reply_bytes(&pt);
                            const char *reply = pt.half_reply ? "fp16" : "fp32";
                            const char *mode = opts->rate > 0.0 ? "open" : "closed";
                            printf("%-6s %3d %3d %-9s %6zu %5zu %5zu %5s %5s %10.0f %10zu %12.4g "
                                   "%8.3f %10.4g "
                                   "%9.1f %9.1f %9.1f %9.1f %9.1f %8.2f %12s %5s %6.0f\n",
                                   mode, P, clients, dist, pt.bags, pt.pool, pt.dim,
                                   lk_dtype_name(pt.dtype), reply, req_b, resp_b, rows_s,
                                   bytes_s / 1e9, req_s, pct[0], pct[1], pct[2], pct[3], pct[4],
                                   ps_us, grad, "-", wrong);
                            if (opts->csv)
                                printf("csv,lookup,%s,%d,%d,%s,%zu,%zu,%zu,%.0f,%zu,%zu,%.6g,%.6g,%"
                                       ".6g,"
                                       "%.3f,%.3f,%.3f,%.3f,%.3f,%.6g,%.0f,%zu,%.3f,%s,%s\n",
                                       mode, P, clients, dist, pt.bags, pt.pool, pt.dim, req_b,
                                       resp_b, lk_reply_bytes(&pt), rows_s, bytes_s / 1e9, req_s,
                                       pct[0], pct[1], pct[2], pct[3], pct[4],
                                       opts->rate > 0.0 ? 0.0 : grad_s, wrong, pt.window, ps_us,
                                       lk_dtype_name(pt.dtype), reply);
                            fflush(stdout);
                            lk_point_free(&pt);
                        }
    if (client == 0) {
        printf("# wrong replies: %.0f %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
        fflush(stdout);
        /* Everybody's results are in, so nobody sends any more: stop the PS. */
        for (int p = 0; p < P; p++) {
            if (ember_rpc_call(tp, clients + p, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0, NULL) !=
                EMBER_OK)
                ret = BENCH_EXIT_FAIL;
        }
        if (wrong_total)
            ret = BENCH_EXIT_FAIL;
    }
    free(before);
    free(after);
    return ret;
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
    if (rank >= clients) {
        ember_status_t status = ember_ps_run(tp, 0);
        ret = status == EMBER_OK ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
    } else {
        /* The PS ranks meet here once their handlers are registered. */
        ret = ember_tp_barrier(tp, "roles-ready") == EMBER_OK
                      ? lk_client(tp, &opts, rank, clients, P)
                      : BENCH_EXIT_FAIL;
    }
    ember_tp_destroy(tp);
    return ret;
}
