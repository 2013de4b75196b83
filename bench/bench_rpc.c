/*
 * bench/bench_rpc: `ember-bench rpc`, the RPC layer against its own limits.
 *
 * Rank 1 serves, rank 0 measures.  For each size of the sweep:
 *   latency    ping-pong, request SIZE bytes, reply 8 bytes: p50/p99/avg of
 *              the round trip in microseconds;
 *   bandwidth  a window of outstanding requests of SIZE bytes with empty
 *              replies: MB/s (10^6 bytes) and messages/s.
 * Plus one ping-pong with 64 bytes both ways (the latency target, comparable
 * with ucx_perftest -t ucp_am_lat -s 64, which reports half of it).
 *
 * Every reply is checked, outside the timed calls: each echo is compared
 * byte for byte with its request (whose first 8 bytes change every call),
 * each 8-byte reply with the server's word, each empty reply's length; and
 * every size up to 64 KiB is echoed once, untimed, and compared.  A wrong
 * reply fails the run ("# wrong replies: N").
 *
 * Payloads go from one preallocated buffer (the transport sends it with an
 * iov datatype, no copy); the server's replies are zero-copy from static
 * buffers; responses land in a caller buffer, so the loops allocate nothing
 * of their own.
 */
#include "bench/ember_bench.h"

#include <ember/config.h>
#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OP_ACK = EMBER_RPC_OP_USER_BASE, /* reply 8 bytes */
    OP_ECHO,                         /* reply the payload (small sizes) */
    OP_SINK,                         /* reply nothing */
    OP_STOP,                         /* reply nothing; the server leaves */
};

#define ECHO_MAX      65536 /* largest payload OP_ECHO answers */
#define ACK_SIZE      8
#define ACK_WORD      0x656d626572ull /* what OP_ACK answers: "ember" */
#define PINGPONG_SIZE 64              /* the both-ways latency probe */
#define MIN_ITERS     20              /* never fewer samples per size than this */

typedef struct {
    size_t min_size, max_size, factor;
    size_t iters, warmup, window;
    size_t max_bytes; /* per-size byte budget that caps iterations */
    int poll;         /* --poll: busy-poll; else spin, then sleep */
    int csv;
} rpc_opts_t;

typedef struct {
    ember_tp_t *tp;
    int stop;
    uint64_t ack;
    uint8_t *echo; /* ECHO_MAX bytes */
    uint8_t *sink; /* where large requests land */
    size_t sink_size;
} rpc_server_t;

/* ---- options -------------------------------------------------------------- */

static void rpc_usage(FILE *stream)
{
    fprintf(stream,
            "usage: ember-run -n 2 ember-bench rpc [options]\n"
            "  -b MIN        smallest request size (8)\n"
            "  -e MAX        largest request size (16M)\n"
            "  -f FACTOR     size multiplier of the sweep (4); 64 and 64K are\n"
            "                always added when inside [MIN, MAX]\n"
            "  -n ITERS      iterations per size (10000), capped by --max-bytes\n"
            "  -w WARMUP     warm-up iterations per size (1000, at most ITERS)\n"
            "  --window W    outstanding requests in the bandwidth test (32)\n"
            "  --max-bytes B per-size byte budget: iterations = min(ITERS,\n"
            "                max(%d, B/SIZE)) (256M)\n"
            "  --poll        busy-poll futures (ember_future_test) and the server\n"
            "                (ember_tp_progress) instead of the default wait, which\n"
            "                spins EMBER_SPIN_US then sleeps on the UCX event fd\n"
            "  --csv         also print machine-readable `csv,` lines\n",
            MIN_ITERS);
}

#define RPC_OPT(name, kind, field) BENCH_OPT(rpc_opts_t, name, kind, field)

/* Every option (rpc_usage says what each does). */
static const bench_opt_t rpc_opt_list[] = {
        RPC_OPT("--poll", BENCH_OPT_SWITCH, poll),
        RPC_OPT("--csv", BENCH_OPT_SWITCH, csv),
        RPC_OPT("-b", BENCH_OPT_SIZE, min_size),
        RPC_OPT("-e", BENCH_OPT_SIZE, max_size),
        RPC_OPT("-f", BENCH_OPT_COUNT, factor),
        RPC_OPT("-n", BENCH_OPT_COUNT, iters),
        RPC_OPT("-w", BENCH_OPT_COUNT0, warmup),
        RPC_OPT("--window", BENCH_OPT_COUNT, window),
        RPC_OPT("--max-bytes", BENCH_OPT_SIZE, max_bytes),
};

static int rpc_parse(int argc, char **argv, rpc_opts_t *opts)
{
    static const bench_opt_table_t table = {.cmd = "rpc",
                                            .opts = rpc_opt_list,
                                            .count = sizeof(rpc_opt_list) / sizeof(rpc_opt_list[0]),
                                            .usage = rpc_usage};
    *opts = (rpc_opts_t){.min_size = 8,
                         .max_size = 16u << 20,
                         .factor = 4,
                         .iters = 10000,
                         .warmup = 1000,
                         .window = 32,
                         .max_bytes = 256u << 20};
    if (!bench_parse_opts(&table, argc, argv, opts))
        return 0;
    if (opts->min_size == 0 || opts->min_size > opts->max_size || opts->factor < 2) {
        fprintf(stderr, "ember-bench rpc: need 0 < MIN <= MAX and FACTOR >= 2\n");
        return 0;
    }
    return 1;
}

/* Sizes MIN, MIN*F, ... <= MAX, plus 64, 64K and MAX; sorted, unique. */
static size_t rpc_sizes(const rpc_opts_t *opts, size_t *sizes, size_t capacity)
{
    size_t count = 0;
    const size_t extra[] = {64, 65536, opts->max_size};

    for (size_t s = opts->min_size; s <= opts->max_size && count < capacity; s *= opts->factor) {
        sizes[count++] = s;
        if (s > opts->max_size / opts->factor)
            break;
    }
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
        size_t s = extra[i], j;
        if (s < opts->min_size || s > opts->max_size)
            continue;
        for (j = 0; j < count && sizes[j] != s; j++)
            ;
        if (j == count && count < capacity)
            sizes[count++] = s;
    }
    for (size_t i = 1; i < count; i++) { /* insertion sort: a dozen entries */
        size_t s = sizes[i], j = i;
        for (; j > 0 && sizes[j - 1] > s; j--)
            sizes[j] = sizes[j - 1];
        sizes[j] = s;
    }
    return count;
}

static size_t rpc_iters_for(const rpc_opts_t *opts, size_t size)
{
    size_t by_bytes = opts->max_bytes / size;
    if (by_bytes < MIN_ITERS)
        by_bytes = MIN_ITERS;
    return opts->iters < by_bytes ? opts->iters : by_bytes;
}

/* ---- server --------------------------------------------------------------- */

static void on_ack(ember_rpc_req_t *req, void *arg)
{
    rpc_server_t *server = arg;
    ember_iov_t iov = {.buffer = &server->ack, .length = ACK_SIZE};
    ember_rpc_reply_zcopy(req, EMBER_OK, &iov, 1, NULL, NULL);
}

static void on_echo(ember_rpc_req_t *req, void *arg)
{
    rpc_server_t *server = arg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);

    if (length > ECHO_MAX) {
        ember_rpc_reply_error(req, EMBER_ERR_MSG_TOO_LONG,
                              "echo of %zu bytes "
                              "(max %d)",
                              length, ECHO_MAX);
        return;
    }
    /* One call at a time (ping-pong), so one static reply buffer suffices;
     * the request's payload is released by the reply, hence the copy. */
    memcpy(server->echo, data, length);
    ember_iov_t iov = {.buffer = server->echo, .length = length};
    ember_rpc_reply_zcopy(req, EMBER_OK, &iov, 1, NULL, NULL);
}

static void on_sink(ember_rpc_req_t *req, void *arg)
{
    (void)arg;
    ember_rpc_reply_zcopy(req, EMBER_OK, NULL, 0, NULL, NULL);
}

static void on_stop(ember_rpc_req_t *req, void *arg)
{
    rpc_server_t *server = arg;
    server->stop = 1;
    ember_rpc_reply_zcopy(req, EMBER_OK, NULL, 0, NULL, NULL);
}

/* Large request payloads land in one preallocated sink, as ucx_perftest
 * receives into one buffer: the contents are discarded anyway. */
static void *sink_alloc(void *arg, int peer, const void *head, size_t head_length, size_t length)
{
    rpc_server_t *server = arg;
    (void)peer;
    (void)head;
    return length - head_length <= server->sink_size ? server->sink : NULL;
}

static void sink_release(void *arg, void *buffer)
{
    (void)arg;
    (void)buffer;
}

static int rpc_serve(ember_tp_t *tp, const rpc_opts_t *opts)
{
    rpc_server_t server = {.tp = tp, .ack = ACK_WORD};

    server.echo = bench_buffer_alloc(ECHO_MAX);
    server.sink_size = opts->max_size;
    server.sink = bench_buffer_alloc(server.sink_size);
    if (!server.echo || !server.sink) {
        free(server.echo);
        free(server.sink);
        return BENCH_EXIT_FAIL;
    }
    if (ember_rpc_register(tp, OP_ACK, on_ack, &server) != EMBER_OK ||
        ember_rpc_register(tp, OP_ECHO, on_echo, &server) != EMBER_OK ||
        ember_rpc_register(tp, OP_SINK, on_sink, &server) != EMBER_OK ||
        ember_rpc_register(tp, OP_STOP, on_stop, &server) != EMBER_OK ||
        ember_rpc_register_alloc(tp, OP_ACK, sink_alloc, sink_release, &server) != EMBER_OK ||
        ember_rpc_register_alloc(tp, OP_SINK, sink_alloc, sink_release, &server) != EMBER_OK ||
        ember_tp_barrier(tp, "bench-rpc-start") != EMBER_OK) {
        free(server.echo);
        free(server.sink);
        return BENCH_EXIT_FAIL;
    }
    while (!server.stop) {
        if (opts->poll)
            ember_tp_progress(tp);
        else
            ember_tp_wait(tp, 1.0);
    }
    free(server.echo);
    free(server.sink);
    return BENCH_EXIT_OK;
}

/* ---- client --------------------------------------------------------------- */

/* What the client's loops use, allocated once: they allocate nothing. */
typedef struct {
    uint8_t *payload; /* max(MAX, PINGPONG_SIZE) bytes */
    uint8_t resp[PINGPONG_SIZE];
    uint8_t *echo;         /* ECHO_MAX bytes: the untimed echo of each size */
    double *samples;       /* max(ITERS, MIN_ITERS) round trips */
    ember_future_t **ring; /* [window] */
    uint64_t stamp;        /* written into the payload before each echo */
    size_t echoes, acks, empties, wrong;
} rpc_client_t;

/* A request's first bytes made new, so an echo of an earlier one (or of
 * the buffer's previous contents) cannot pass for this one's. */
static void rpc_stamp(rpc_client_t *client, size_t size)
{
    uint64_t x = ++client->stamp * 0x9e3779b97f4a7c15ull;
    memcpy(client->payload, &x, size < sizeof(x) ? size : sizeof(x));
}

/* Whether @future's reply to @op with the @size request bytes at @sent is
 * the right one: an echo those bytes, an ack the server's word, a sink
 * nothing.  Counted; the first wrong one is described. */
static void rpc_check_reply(rpc_client_t *client, uint16_t op, const uint8_t *sent, size_t size,
                            ember_future_t *future)
{
    const uint64_t word = ACK_WORD;
    size_t length;
    const uint8_t *got = ember_future_data(future, &length);
    int ok;

    if (op == OP_ECHO) {
        ok = length == size && (size == 0 || memcmp(got, sent, size) == 0);
        client->echoes++;
    } else if (op == OP_ACK) {
        ok = length == ACK_SIZE && memcmp(got, &word, ACK_SIZE) == 0;
        client->acks++;
    } else {
        ok = length == 0;
        client->empties++;
    }
    if (ok || client->wrong++)
        return;
    size_t at = 0;
    const size_t want = op == OP_ECHO ? size : op == OP_ACK ? ACK_SIZE : 0;
    const uint8_t *expect = op == OP_ECHO ? sent : (const uint8_t *)&word;
    while (at < length && at < want && got[at] == expect[at])
        at++;
    fprintf(stderr,
            "ember-bench rpc: wrong reply to %s of %zu bytes: %zu bytes back, want %zu; "
            "first difference at byte %zu\n",
            op == OP_ECHO  ? "an echo"
            : op == OP_ACK ? "a call"
                           : "a windowed call",
            size, length, want, at);
}

static ember_status_t rpc_wait(ember_future_t *future, int poll)
{
    ember_status_t status;

    if (!poll)
        return ember_future_wait(future);
    while ((status = ember_future_test(future)) == EMBER_INPROGRESS)
        ;
    return status;
}

/* Ping-pong @op with @size-byte requests from the client's payload;
 * round trips (s) into its samples; every reply checked after its time is
 * taken. */
static ember_status_t rpc_pingpong(ember_tp_t *tp, const rpc_opts_t *opts, rpc_client_t *client,
                                   uint16_t op, size_t size, void *resp, size_t resp_capacity,
                                   size_t warmup, size_t iters)
{
    ember_iov_t iov = {.buffer = client->payload, .length = size};

    for (size_t i = 0; i < warmup + iters; i++) {
        ember_future_t *future;
        if (op == OP_ECHO)
            rpc_stamp(client, size);
        double start = bench_now();
        ember_status_t status =
                ember_rpc_call_async(tp, 1, op, &iov, 1, resp, resp_capacity, NULL, &future);
        if (status != EMBER_OK)
            return status;
        status = rpc_wait(future, opts->poll);
        double end = bench_now();
        if (status == EMBER_OK)
            rpc_check_reply(client, op, client->payload, size, future);
        ember_future_release(future);
        if (status != EMBER_OK) {
            fprintf(stderr, "ember-bench rpc: call of %zu bytes failed: %s\n", size,
                    ember_status_string(status));
            return status;
        }
        if (i >= warmup)
            client->samples[i - warmup] = end - start;
    }
    return EMBER_OK;
}

/* @iters calls of @size bytes, at most @window outstanding; seconds taken. */
static ember_status_t rpc_stream(ember_tp_t *tp, const rpc_opts_t *opts, rpc_client_t *client,
                                 size_t size, size_t iters, double *elapsed_p)
{
    ember_iov_t iov = {.buffer = client->payload, .length = size};
    ember_future_t **ring = client->ring;
    size_t window = opts->window, issued = 0, done = 0;
    double start = bench_now();

    while (done < iters) {
        while (issued < iters && issued - done < window) {
            ember_status_t status = ember_rpc_call_async(tp, 1, OP_SINK, &iov, 1, client->resp,
                                                         ACK_SIZE, NULL, &ring[issued % window]);
            if (status != EMBER_OK)
                return status;
            issued++;
        }
        /* Replies come back in order; waiting on the oldest keeps the window
         * full without scanning it. */
        ember_future_t *future = ring[done % window];
        ember_status_t status = rpc_wait(future, opts->poll);
        if (status == EMBER_OK)
            rpc_check_reply(client, OP_SINK, NULL, size, future);
        ember_future_release(future);
        if (status != EMBER_OK) {
            fprintf(stderr,
                    "ember-bench rpc: windowed call of %zu bytes failed: "
                    "%s\n",
                    size, ember_status_string(status));
            for (size_t i = done + 1; i < issued; i++)
                ember_future_release(ring[i % window]);
            return status;
        }
        done++;
    }
    *elapsed_p = bench_now() - start;
    return EMBER_OK;
}

typedef struct {
    double p50, p99, avg; /* us */
} rpc_latency_t;

/* @iters round trips (s) in @samples, which this sorts. */
static rpc_latency_t rpc_latency(double *samples, size_t iters)
{
    double sum = 0.0;
    for (size_t i = 0; i < iters; i++)
        sum += samples[i];
    bench_sort(samples, iters);
    rpc_latency_t lat = {.p50 = bench_percentile(samples, iters, 50.0) * 1e6,
                         .p99 = bench_percentile(samples, iters, 99.0) * 1e6};
    lat.avg = sum / (double)iters * 1e6;
    return lat;
}

static void rpc_header(ember_tp_t *tp, const rpc_opts_t *opts)
{
    printf("# ember-bench rpc: UCX_TLS=%s, 2 ranks (rank 0 -> rank 1), window %zu, "
           "wait %s (spin %g us)\n",
           bench_tls_name(), opts->window, opts->poll ? "poll" : "spin-then-sleep",
           ember_tp_spin_us(tp));
    printf("# latency: request SIZE B, reply %d B, round trip in us; bandwidth: "
           "%zu outstanding SIZE-B requests, empty replies, MB = 10^6 B\n",
           ACK_SIZE, opts->window);
    printf("%10s %8s %10s %10s %10s %8s %12s %12s\n", "size", "iters", "p50_us", "p99_us", "avg_us",
           "bw_iters", "MB/s", "msgs/s");
    fflush(stdout);
}

/* One size of the sweep: its ping-pong latency, then its windowed bandwidth. */
static ember_status_t rpc_size(ember_tp_t *tp, const rpc_opts_t *opts, rpc_client_t *client,
                               size_t size)
{
    size_t iters = rpc_iters_for(opts, size);
    size_t warmup = opts->warmup < iters ? opts->warmup : iters;
    size_t bw_iters = iters < 2 * opts->window ? 2 * opts->window : iters;
    double elapsed;

    /* Untimed: the size's bytes go there and back intact. */
    if (size <= ECHO_MAX)
        EMBER_CHECK(rpc_pingpong(tp, opts, client, OP_ECHO, size, client->echo, ECHO_MAX, 1, 0));
    EMBER_CHECK(rpc_pingpong(tp, opts, client, OP_ACK, size, client->resp, sizeof(client->resp),
                             warmup, iters));
    rpc_latency_t lat = rpc_latency(client->samples, iters);
    if (warmup)
        EMBER_CHECK(rpc_stream(tp, opts, client, size, warmup, &elapsed));
    EMBER_CHECK(rpc_stream(tp, opts, client, size, bw_iters, &elapsed));
    double mbps = (double)size * (double)bw_iters / elapsed / 1e6;
    double rate = (double)bw_iters / elapsed;

    printf("%10zu %8zu %10.2f %10.2f %10.2f %8zu %12.1f %12.0f\n", size, iters, lat.p50, lat.p99,
           lat.avg, bw_iters, mbps, rate);
    if (opts->csv)
        printf("csv,rpc,%zu,%zu,%.3f,%.3f,%.3f,%zu,%.3f,%.1f\n", size, iters, lat.p50, lat.p99,
               lat.avg, bw_iters, mbps, rate);
    fflush(stdout);
    return EMBER_OK;
}

/* The latency target: PINGPONG_SIZE bytes both ways. */
static ember_status_t rpc_pingpong_target(ember_tp_t *tp, const rpc_opts_t *opts,
                                          rpc_client_t *client)
{
    size_t iters = opts->iters, warmup = opts->warmup;

    EMBER_CHECK(rpc_pingpong(tp, opts, client, OP_ECHO, PINGPONG_SIZE, client->resp,
                             sizeof(client->resp), warmup, iters));
    rpc_latency_t lat = rpc_latency(client->samples, iters);
    printf("# ping-pong %d B both ways, %zu iters: round trip p50 %.2f us, "
           "p99 %.2f us, avg %.2f us\n",
           PINGPONG_SIZE, iters, lat.p50, lat.p99, lat.avg);
    if (opts->csv)
        printf("csv,pingpong,%d,%zu,%.3f,%.3f,%.3f\n", PINGPONG_SIZE, iters, lat.p50, lat.p99,
               lat.avg);
    return EMBER_OK;
}

static int rpc_measure(ember_tp_t *tp, const rpc_opts_t *opts)
{
    size_t sizes[64];
    size_t count = rpc_sizes(opts, sizes, 64);
    size_t max_iters = opts->iters > MIN_ITERS ? opts->iters : MIN_ITERS;
    size_t payload_size = opts->max_size > PINGPONG_SIZE ? opts->max_size : PINGPONG_SIZE;
    rpc_client_t client = {.payload = bench_buffer_alloc(payload_size),
                           .echo = bench_buffer_alloc(ECHO_MAX),
                           .samples = malloc(max_iters * sizeof(*client.samples)),
                           .ring = malloc(opts->window * sizeof(*client.ring))};
    int ret = BENCH_EXIT_FAIL;
    ember_status_t status;

    if (!client.payload || !client.echo || !client.samples || !client.ring) {
        fprintf(stderr, "ember-bench rpc: out of memory\n");
        goto out;
    }
    /* Bytes that differ from one place to the next: a reply from the wrong
     * offset or of another request's bytes is told from the right one. */
    for (size_t i = 0; i < payload_size; i++)
        client.payload[i] = (uint8_t)(i * 131 + (i >> 8) * 7 + 1);
    EMBER_CHECK_GOTO(ember_tp_barrier(tp, "bench-rpc-start"), status, out);
    rpc_header(tp, opts);
    for (size_t k = 0; k < count; k++)
        EMBER_CHECK_GOTO(rpc_size(tp, opts, &client, sizes[k]), status, out);
    EMBER_CHECK_GOTO(rpc_pingpong_target(tp, opts, &client), status, out);
    printf("# replies checked: %zu echoes byte for byte, %zu acks, %zu empty\n", client.echoes,
           client.acks, client.empties);
    printf("# wrong replies: %zu %s\n", client.wrong, client.wrong ? "FAILED" : "OK");
    ret = client.wrong ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;

out:
    /* Let the server go, whatever happened here. */
    status = ember_rpc_call(tp, 1, OP_STOP, NULL, 0, client.resp, sizeof(client.resp), NULL);
    if (status != EMBER_OK) {
        fprintf(stderr, "ember-bench rpc: stopping the server: %s\n", ember_status_string(status));
        ret = BENCH_EXIT_FAIL;
    }
    free(client.ring);
    free(client.samples);
    free(client.echo);
    free(client.payload);
    return ret;
}

int bench_rpc_main(int argc, char **argv)
{
    rpc_opts_t opts;
    ember_tp_t *tp;
    int ret;

    if (!rpc_parse(argc, argv, &opts))
        return BENCH_EXIT_USAGE;
    if (bench_join(&tp) != EMBER_OK)
        return BENCH_EXIT_FAIL;
    if (ember_tp_world_size(tp) != 2) {
        fprintf(stderr,
                "ember-bench rpc: needs exactly 2 ranks (ember-run -n 2), "
                "got %d\n",
                ember_tp_world_size(tp));
        ember_tp_destroy(tp);
        return BENCH_EXIT_USAGE;
    }
    ret = ember_tp_rank(tp) == 0 ? rpc_measure(tp, &opts) : rpc_serve(tp, &opts);
    ember_tp_destroy(tp);
    return ret;
}
