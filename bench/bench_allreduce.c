/*
 * bench/bench_allreduce: `ember-bench allreduce`, the dense allreduce in the
 * nccl-tests format (all_reduce_perf), so its output lines up with
 * nccl-tests, bench/peers/mpi_allreduce.c and bench/peers/gloo_allreduce.py.
 *
 * Every rank of the job is a member.  For each size: -w warm-up and -n timed
 * reductions back to back, out-of-place then in-place; time = average per
 * reduction, averaged over ranks (nccl-tests' default -a 1); algbw =
 * size / time (GB/s, 10^9), busbw = algbw x 2(n-1)/n.  With -c 1 each pass
 * then runs once more on a known pattern and counts the elements that differ
 * from the exact expected result (#wrong, summed over ranks).
 *
 * Backends: `host` is engine/allreduce (small: all-to-all one-way, large:
 * pipelined ring or recursive halving over the transport), called directly;
 * out of place passes ember_comm_allreduce both buffers (the input is read, never
 * copied).
 * `nccl` and `cpu-device` go through the engine's device interface, as the
 * trainer does: `nccl` opens the "cuda" device of this local rank (NCCL on
 * the GPU; skipped, exit 77, without a CUDA build or a GPU), `cpu-device`
 * the CPU backend (the host allreduce behind the same ops, so this path is
 * exercised where there is no GPU).  The device interface reduces in place:
 * out of place there is a device-to-device copy plus the in-place reduction,
 * the copy timed.  Buffers are device memory; the check stages through host
 * memory.
 */
#include "bench/ember_bench.h"
#include "bench/nccl_format.h"

#include "common/topology.h"
#include "engine/comm/allreduce.h"
#include "engine/wire/protocol.h"

#include <ember/device.h>
#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AR_SKIP 77

typedef struct {
    size_t min_bytes, max_bytes, factor;
    size_t iters, warmup;
    int check;
    int average;         /* -o avg */
    const char *backend; /* host, nccl, cpu-device */
} ar_opts_t;

/* Where the reduction runs, and its buffers (device memory for a device). */
typedef struct {
    ember_comm_allreduce_t *ar; /* the host backend; also the stats exchange */
    ember_device_t *dev;        /* device backends */
    const ember_device_ops_t *ops;
    ember_device_comm_t *comm;
    float *send, *recv;
    float *stage; /* device backends: host copy for the check */
} ar_backend_t;

static void ar_usage(FILE *stream)
{
    fprintf(stream, "usage: ember-run -n N ember-bench allreduce [options]   (nccl-tests flags)\n"
                    "  -b MIN      smallest size in bytes (8)\n"
                    "  -e MAX      largest size in bytes (64M)\n"
                    "  -f FACTOR   size multiplier (2)\n"
                    "  -n ITERS    timed iterations per size (20)\n"
                    "  -w WARMUP   warm-up iterations per size (5)\n"
                    "  -c 0|1      check the result and count #wrong (1)\n"
                    "  -d TYPE     datatype: float (the only one the engine reduces)\n"
                    "  -o OP       sum or avg (sum)\n"
                    "  --backend host|nccl|cpu-device   the host allreduce (default), NCCL\n"
                    "              on this rank's GPU through the device interface (exit 77\n"
                    "              without CUDA+NCCL or a GPU), or the device interface's\n"
                    "              CPU backend\n");
}

/* 1 when @value is one of @choices (NULL-terminated); else 0, having said
 * "<what> '<value>'<why>". */
static int ar_one_of(const char *value, const char *const *choices, const char *what,
                     const char *why)
{
    for (; *choices; choices++) {
        if (strcmp(value, *choices) == 0)
            return 1;
    }
    fprintf(stderr, "ember-bench allreduce: %s '%s'%s\n", what, value, why);
    return 0;
}

static int ar_parse_datatype(const char *value, void *field)
{
    return ar_one_of(value, (const char *const[]){"float", "float32", NULL}, "datatype",
                     " is not supported (the engine reduces float)");
}

static int ar_parse_op(const char *value, void *field)
{
    *(int *)field = strcmp(value, "avg") == 0;
    return ar_one_of(value, (const char *const[]){"sum", "avg", NULL}, "op",
                     " is not supported (sum, avg)");
}

static int ar_parse_backend(const char *value, void *field)
{
    *(const char **)field = value;
    return ar_one_of(value, (const char *const[]){"host", "nccl", "cpu-device", NULL}, "backend",
                     ": host, nccl or cpu-device");
}

#define AR_OPT(name, kind, field)    BENCH_OPT(ar_opts_t, name, kind, field)
#define AR_OPT_WITH(name, field, fn) BENCH_OPT_WITH(ar_opts_t, name, field, fn)

/* Every option, each with a value (ar_usage says what each does). */
static const bench_opt_t ar_opt_list[] = {
        AR_OPT("-b", BENCH_OPT_SIZE, min_bytes),
        AR_OPT("-e", BENCH_OPT_SIZE, max_bytes),
        AR_OPT("-f", BENCH_OPT_COUNT, factor),
        AR_OPT("-n", BENCH_OPT_COUNT, iters),
        AR_OPT("-w", BENCH_OPT_COUNT0, warmup),
        AR_OPT("-c", BENCH_OPT_BIT, check),
        {"-d", BENCH_OPT_CUSTOM, 0, ar_parse_datatype}, /* checked only: one datatype */
        AR_OPT_WITH("-o", average, ar_parse_op),
        AR_OPT_WITH("--backend", backend, ar_parse_backend),
};

static int ar_parse(int argc, char **argv, ar_opts_t *opts)
{
    static const bench_opt_table_t table = {.cmd = "allreduce",
                                            .opts = ar_opt_list,
                                            .count = sizeof(ar_opt_list) / sizeof(ar_opt_list[0]),
                                            .usage = ar_usage};
    *opts = (ar_opts_t){.min_bytes = 8,
                        .max_bytes = 64u << 20,
                        .factor = 2,
                        .iters = 20,
                        .warmup = 5,
                        .check = 1,
                        .backend = "host"};
    if (!bench_parse_opts(&table, argc, argv, opts))
        return 0;
    if (opts->min_bytes < 4 || opts->min_bytes > opts->max_bytes || opts->factor < 2) {
        fprintf(stderr, "ember-bench allreduce: need 4 <= MIN <= MAX, FACTOR >= 2\n");
        return 0;
    }
    return 1;
}

/* Small integers: every partial sum is exact in float, in any order. */
static float ar_pattern(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 13) % 31) - 15.0f;
}

/* Elements of @data that differ from the exact sum (or mean) over @n ranks. */
static size_t ar_count_wrong(const float *data, size_t count, int n, int average)
{
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
        float expect = 0.0f;
        for (int r = 0; r < n; r++)
            expect += ar_pattern(i, r);
        if (average)
            expect /= (float)n;
        if (data[i] != expect)
            wrong++;
    }
    return wrong;
}

/* One reduction of @count floats from @send into @data (== @send in place). */
static ember_status_t ar_reduce(ar_backend_t *b, const ar_opts_t *opts, float *send, float *data,
                                size_t count)
{
    if (!b->dev)
        return ember_comm_allreduce(
                b->ar,
                &(ember_comm_allreduce_args_t){
                        .send = send, .recv = data, .count = count, .average = opts->average});
    if (send != data)
        EMBER_CHECK(b->ops->mem_copy(b->dev, data, send, count * sizeof(float),
                                     EMBER_COPY_DEVICE_TO_DEVICE));
    ember_device_req_t *req;
    EMBER_CHECK(b->ops->allreduce_start(b->comm, data, count, opts->average, &req));
    return b->ops->allreduce_wait(req);
}

static const char *ar_error(const ar_backend_t *b)
{
    return b->dev ? b->ops->comm_error(b->comm) : ember_comm_allreduce_error(b->ar);
}

/* Zeros while timing: sums stay finite whatever the iteration count. */
static ember_status_t ar_zero(ar_backend_t *b, float *buffer, size_t count)
{
    if (!b->dev) {
        memset(buffer, 0, count * sizeof(float));
        return EMBER_OK;
    }
    return b->ops->mem_zero(b->dev, buffer, count * sizeof(float));
}

/* One pass (out-of-place or in-place) at @count floats: seconds per call. */
static ember_status_t ar_pass(ar_backend_t *b, const ar_opts_t *opts, size_t count, int in_place,
                              double *seconds_p)
{
    float *data = in_place ? b->send : b->recv;
    double start = 0.0;

    for (size_t it = 0; it < opts->warmup + opts->iters; it++) {
        if (it == opts->warmup)
            start = bench_now();
        /* Out of place as nccl-tests: send -> recv, the input untouched. */
        ember_status_t status = ar_reduce(b, opts, b->send, data, count);
        if (status != EMBER_OK) {
            fprintf(stderr, "ember-bench allreduce: %zu floats: %s: %s\n", count,
                    ember_status_string(status), ar_error(b));
            return status;
        }
    }
    *seconds_p = (bench_now() - start) / (double)opts->iters;
    return EMBER_OK;
}

/*
 * Before the sweep, AR_CONNECTION_WARMUP untimed reductions of 8000 B (the
 * peers run the same).  UCX's shared-memory transport maps the receive
 * descriptors of its FIFO lazily, and each one's first messages cost page
 * faults, several times a warm message (as many slow messages as the FIFO
 * has slots: UCX_MM_FIFO_SIZE moves their count), and again where a message
 * first reaches a descriptor's second page.  A per-size warm-up left some of
 * those in the timed part of the first sizes too large for the FIFO's
 * inline slots; 8000 B fills a descriptor without going rendezvous.
 */
#define AR_CONNECTION_WARMUP 128

static ember_status_t ar_connection_warmup(ar_backend_t *b, const ar_opts_t *opts, size_t max_count)
{
    size_t count = max_count < 2000 ? max_count : 2000;
    if (count == 0)
        return EMBER_OK;
    EMBER_CHECK(ar_zero(b, b->send, count));
    for (int i = 0; i < AR_CONNECTION_WARMUP; i++)
        EMBER_CHECK(ar_reduce(b, opts, b->send, b->recv, count));
    return EMBER_OK;
}

/* Host memory of the check: the buffer itself (host), else the stage. */
static ember_status_t ar_load(ar_backend_t *b, float *dst, const float *host, size_t count)
{
    if (!b->dev) {
        if (dst != host)
            memcpy(dst, host, count * sizeof(float));
        return EMBER_OK;
    }
    return b->ops->mem_copy(b->dev, dst, host, count * sizeof(float), EMBER_COPY_HOST_TO_DEVICE);
}

static const float *ar_fetch(ar_backend_t *b, const float *src, size_t count)
{
    if (!b->dev)
        return src;
    if (b->ops->mem_copy(b->dev, b->stage, src, count * sizeof(float), EMBER_COPY_DEVICE_TO_HOST) !=
        EMBER_OK)
        return NULL;
    return b->stage;
}

/* The checked run: the pattern in, one reduction, the wrong elements out
 * (out of place, a changed input counts as wrong too). */
static ember_status_t ar_check(ar_backend_t *b, const ar_opts_t *opts, size_t count, int rank,
                               int n, int in_place, size_t *wrong_p)
{
    float *data = in_place ? b->send : b->recv;
    float *host = b->dev ? b->stage : b->send;
    if (!in_place) {
        memset(host, 0xff, count * sizeof(float)); /* NaN: nothing left over */
        EMBER_CHECK(ar_load(b, b->recv, host, count));
    }
    for (size_t i = 0; i < count; i++)
        host[i] = ar_pattern(i, rank);
    EMBER_CHECK(ar_load(b, b->send, host, count));
    EMBER_CHECK(ar_reduce(b, opts, b->send, data, count));
    const float *result = ar_fetch(b, data, count);
    if (!result)
        return EMBER_ERR_IO;
    *wrong_p = ar_count_wrong(result, count, n, opts->average);
    if (!in_place) {
        const float *input = ar_fetch(b, b->send, count);
        if (!input)
            return EMBER_ERR_IO;
        for (size_t i = 0; i < count; i++)
            *wrong_p += input[i] != ar_pattern(i, rank);
    }
    return EMBER_OK;
}

static void ar_header(const ar_opts_t *opts, ember_tp_t *tp, int n)
{
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    if (strcmp(opts->backend, "host") == 0)
        printf("# ember-bench allreduce: backend host (engine/allreduce: one-way "
               "all-to-all up to %u B, above it a pipelined ring, or recursive "
               "halving for 4, 8, 16... ranks, in %u-B segments), UCX_TLS=%s\n",
               EMBER_ALLREDUCE_SMALL_BYTES, EMBER_ALLREDUCE_SEGMENT_BYTES, bench_tls_name());
    else
        printf("# ember-bench allreduce: backend %s (the engine's device interface, "
               "device \"%s\"; out of place = device copy + in-place reduction, "
               "timed), UCX_TLS=%s\n",
               opts->backend, strcmp(opts->backend, "nccl") == 0 ? "cuda" : "cpu",
               bench_tls_name());
    nccl_print_settings(n, opts->min_bytes, opts->max_bytes, opts->factor, opts->warmup,
                        opts->iters, opts->check);
    printf("# connection warm-up: %d untimed reductions of min(8000 B, maxBytes) "
           "before the sweep\n",
           AR_CONNECTION_WARMUP);
    printf("#\n# Using devices\n");
    for (int r = 0; r < n; r++)
        printf("#  Rank %2d Group  0 Pid %6s on %10s device  - [host] %s\n", r, "-", host,
               ember_tp_peer_name(tp, r));
    printf("#\n");
    nccl_print_columns();
    fflush(stdout);
}

/* Open the device backend (its comm over every rank, its buffers). */
static ember_status_t ar_device_open(ar_backend_t *b, const ar_opts_t *opts, ember_tp_t *tp,
                                     const int *ranks, int n, size_t bytes)
{
    int local_rank, local_size;
    ember_topo_local_rank(ember_tp_rank(tp), n, &local_rank, &local_size);
    EMBER_CHECK(ember_device_open(strcmp(opts->backend, "nccl") == 0 ? "cuda" : "cpu", local_rank,
                                  &b->dev));
    b->ops = ember_device_ops(b->dev);
    /* Its own op ids: the stats exchange keeps the host communicator. */
    EMBER_CHECK(b->ops->comm_create(b->dev, tp, ranks, n,
                                    EMBER_OP_ALLREDUCE_BASE + EMBER_ALLREDUCE_OPS, &b->comm));
    EMBER_CHECK(b->ops->mem_alloc(b->dev, bytes, (void **)&b->send));
    EMBER_CHECK(b->ops->mem_alloc(b->dev, bytes, (void **)&b->recv));
    b->stage = bench_buffer_alloc(bytes);
    return b->stage ? EMBER_OK : EMBER_ERR_NO_MEMORY;
}

static void ar_backend_close(ar_backend_t *b)
{
    if (b->dev) {
        b->ops->mem_free(b->dev, b->send);
        b->ops->mem_free(b->dev, b->recv);
        if (b->comm)
            b->ops->comm_destroy(b->comm);
        ember_device_close(b->dev);
        free(b->stage);
    } else {
        free(b->send);
        free(b->recv);
    }
    if (b->ar)
        ember_comm_allreduce_destroy(b->ar);
}

/* The host communicator over every rank (the host backend, and every
 * backend's stats exchange), then the backend's buffers. */
static ember_status_t ar_backend_open(ar_backend_t *b, const ar_opts_t *opts, ember_tp_t *tp,
                                      const int *ranks, int n, size_t max_count)
{
    EMBER_CHECK(ember_comm_allreduce_create(tp, ranks, n, EMBER_OP_ALLREDUCE_BASE, &b->ar));
    if (strcmp(opts->backend, "host") == 0) {
        b->send = bench_buffer_alloc(max_count * sizeof(float));
        b->recv = bench_buffer_alloc(max_count * sizeof(float));
        if (!b->send || !b->recv) {
            fprintf(stderr, "ember-bench allreduce: out of memory for %zu bytes\n",
                    opts->max_bytes);
            return EMBER_ERR_NO_MEMORY;
        }
        return EMBER_OK;
    }
    ember_status_t status = ar_device_open(b, opts, tp, ranks, n, max_count * sizeof(float));
    if (status != EMBER_OK)
        fprintf(stderr, "ember-bench allreduce: backend %s on rank %d: %s%s%s\n", opts->backend,
                ember_tp_rank(tp), ember_status_string(status), b->comm ? ": " : "",
                b->comm ? b->ops->comm_error(b->comm) : "");
    return status;
}

/* Both passes at @count floats (each checked with -c 1), then over the
 * ranks: @stats = the out-of-place and in-place times (us) summed, then
 * their #wrong summed. */
static ember_status_t ar_size(ar_backend_t *b, const ar_opts_t *opts, size_t count, int rank, int n,
                              float stats[4])
{
    size_t wrong[2] = {0, 0};
    double seconds[2];

    EMBER_CHECK(ar_zero(b, b->send, count));
    for (int in_place = 0; in_place < 2; in_place++) {
        EMBER_CHECK(ar_pass(b, opts, count, in_place, &seconds[in_place]));
        if (opts->check)
            EMBER_CHECK(ar_check(b, opts, count, rank, n, in_place, &wrong[in_place]));
        EMBER_CHECK(ar_zero(b, b->send, count));
    }
    stats[0] = (float)(seconds[0] * 1e6);
    stats[1] = (float)(seconds[1] * 1e6);
    stats[2] = (float)wrong[0];
    stats[3] = (float)wrong[1];
    return ember_comm_allreduce(b->ar, &(ember_comm_allreduce_args_t){.recv = stats, .count = 4});
}

static ember_status_t ar_sweep(ar_backend_t *b, const ar_opts_t *opts, int rank, int n,
                               nccl_totals_t *totals)
{
    for (size_t bytes = opts->min_bytes; bytes <= opts->max_bytes; bytes *= opts->factor) {
        size_t count = bytes / sizeof(float);
        float stats[4];
        EMBER_CHECK(ar_size(b, opts, count, rank, n, stats));
        if (rank == 0) {
            /* The ranks' sums come as floats (the allreduce reduces float). */
            const double us[2] = {stats[0] / n, stats[1] / n}, wrong[2] = {stats[2], stats[3]};
            nccl_print_row(count, opts->average ? "avg" : "sum", n, us, wrong, totals);
        }
        totals->wrong_total += (size_t)(stats[2] + stats[3]);
        if (bytes > opts->max_bytes / opts->factor)
            break;
    }
    return EMBER_OK;
}

/* nccl without CUDA or a GPU: say so (the run is skipped). */
static int ar_nccl_missing(const ar_opts_t *opts)
{
    if (strcmp(opts->backend, "nccl") != 0 ||
        (ember_device_have_cuda() && ember_device_cuda_count() > 0))
        return 0;
    printf("# ember-bench allreduce: backend nccl: skipped (%s)\n",
           ember_device_have_cuda() ? "no GPU visible here" : "built without CUDA/NCCL");
    return 1;
}

int bench_allreduce_main(int argc, char **argv)
{
    ar_opts_t opts;
    ember_tp_t *tp = NULL;
    ar_backend_t b = {0};
    nccl_totals_t totals = {0};
    int ret = BENCH_EXIT_FAIL, *ranks = NULL;

    if (!ar_parse(argc, argv, &opts))
        return BENCH_EXIT_USAGE;
    if (ar_nccl_missing(&opts))
        return AR_SKIP;
    if (bench_join(&tp) != EMBER_OK)
        return BENCH_EXIT_FAIL;
    int n = ember_tp_world_size(tp), rank = ember_tp_rank(tp);
    size_t max_count = opts.max_bytes / sizeof(float);

    ranks = malloc((size_t)n * sizeof(*ranks));
    if (!ranks)
        goto out;
    for (int r = 0; r < n; r++)
        ranks[r] = r;
    if (ar_backend_open(&b, &opts, tp, ranks, n, max_count) != EMBER_OK)
        goto out;
    if (ar_connection_warmup(&b, &opts, max_count) != EMBER_OK) {
        fprintf(stderr, "ember-bench allreduce: connection warm-up: %s\n", ar_error(&b));
        goto out;
    }
    if (rank == 0)
        ar_header(&opts, tp, n);
    if (ar_sweep(&b, &opts, rank, n, &totals) != EMBER_OK)
        goto out;
    if (rank == 0)
        nccl_print_summary(&totals);
    ret = totals.wrong_total ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
out:
    ar_backend_close(&b);
    free(ranks);
    if (tp)
        ember_tp_destroy(tp);
    return ret;
}
