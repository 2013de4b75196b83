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
 * Backends: `host` is engine/allreduce (small: all-to-all, large: pipelined
 * ring over the transport).  `nccl` needs a CUDA build with NCCL and a GPU;
 * the engine has no NCCL allreduce entry point yet, so it is reported as
 * skipped (exit 77 when asked for explicitly).
 *
 * The engine reduces in place only; out-of-place is a copy of the send
 * buffer into the receive buffer plus the in-place reduction, and the copy
 * is inside the timed region (as it is work the caller needs).
 */
#include "bench/ember_bench.h"

#include "engine/allreduce.h"
#include "engine/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AR_SKIP 77

typedef struct {
    size_t min_bytes, max_bytes, factor;
    size_t iters, warmup;
    int check;
    int average; /* -o avg */
    int nccl;    /* --backend nccl */
} ar_opts_t;

static void ar_usage(FILE *stream)
{
    fprintf(stream,
            "usage: ember-run -n N ember-bench allreduce [options]   (nccl-tests flags)\n"
            "  -b MIN      smallest size in bytes (8)\n"
            "  -e MAX      largest size in bytes (64M)\n"
            "  -f FACTOR   size multiplier (2)\n"
            "  -n ITERS    timed iterations per size (20)\n"
            "  -w WARMUP   warm-up iterations per size (5)\n"
            "  -c 0|1      check the result and count #wrong (1)\n"
            "  -d TYPE     datatype: float (the only one the engine reduces)\n"
            "  -o OP       sum or avg (sum)\n"
            "  --backend host|nccl   host ring over the transport (default), or\n"
            "              NCCL (skipped unless built with CUDA+NCCL on a GPU)\n");
}

static int ar_parse(int argc, char **argv, ar_opts_t *opts)
{
    *opts = (ar_opts_t){.min_bytes = 8, .max_bytes = 64u << 20, .factor = 2,
                        .iters = 20, .warmup = 5, .check = 1};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;

        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            ar_usage(stdout);
            exit(BENCH_EXIT_OK);
        }
        if (!value) {
            fprintf(stderr, "ember-bench allreduce: %s needs a value\n", arg);
            return 0;
        }
        if (strcmp(arg, "-b") == 0) {
            ok = bench_parse_size(value, &opts->min_bytes);
        } else if (strcmp(arg, "-e") == 0) {
            ok = bench_parse_size(value, &opts->max_bytes);
        } else if (strcmp(arg, "-f") == 0) {
            ok = bench_parse_count(value, &opts->factor);
        } else if (strcmp(arg, "-n") == 0) {
            ok = bench_parse_count(value, &opts->iters);
        } else if (strcmp(arg, "-w") == 0) {
            ok = bench_parse_count_or_zero(value, &opts->warmup);
        } else if (strcmp(arg, "-c") == 0) {
            ok = strcmp(value, "0") == 0 || strcmp(value, "1") == 0;
            opts->check = value[0] == '1';
        } else if (strcmp(arg, "-d") == 0) {
            ok = strcmp(value, "float") == 0 || strcmp(value, "float32") == 0;
            if (!ok)
                fprintf(stderr, "ember-bench allreduce: datatype '%s' is not "
                        "supported (the engine reduces float)\n", value);
        } else if (strcmp(arg, "-o") == 0) {
            ok = strcmp(value, "sum") == 0 || strcmp(value, "avg") == 0;
            opts->average = strcmp(value, "avg") == 0;
            if (!ok)
                fprintf(stderr, "ember-bench allreduce: op '%s' is not supported "
                        "(sum, avg)\n", value);
        } else if (strcmp(arg, "--backend") == 0) {
            ok = strcmp(value, "host") == 0 || strcmp(value, "nccl") == 0;
            opts->nccl = strcmp(value, "nccl") == 0;
        } else {
            fprintf(stderr, "ember-bench allreduce: unknown option '%s'\n", arg);
            ar_usage(stderr);
            return 0;
        }
        if (!ok)
            return 0;
        i++;
    }
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

/* One pass (out-of-place or in-place) at @count floats: seconds per call. */
static ember_status_t ar_pass(ember_allreduce_t *ar, const ar_opts_t *opts,
                              float *send, float *recv, size_t count,
                              int in_place, double *seconds_p)
{
    float *data = in_place ? send : recv;
    double start = 0.0;

    for (size_t it = 0; it < opts->warmup + opts->iters; it++) {
        if (it == opts->warmup)
            start = bench_now();
        /* Out of place as nccl-tests: send -> recv, the input untouched. */
        ember_status_t status = ember_allreduce_into(ar, send, data, count, opts->average);
        if (status != EMBER_OK) {
            fprintf(stderr, "ember-bench allreduce: %zu floats: %s: %s\n", count,
                    ember_status_string(status), ember_allreduce_error(ar));
            return status;
        }
    }
    *seconds_p = (bench_now() - start) / (double)opts->iters;
    return EMBER_OK;
}

/* The checked run: the pattern in, one reduction, the wrong elements out. */
static ember_status_t ar_check(ember_allreduce_t *ar, const ar_opts_t *opts,
                               float *send, float *recv, size_t count, int rank,
                               int n, int in_place, size_t *wrong_p)
{
    float *data = in_place ? send : recv;
    for (size_t i = 0; i < count; i++)
        send[i] = ar_pattern(i, rank);
    if (!in_place)
        memset(recv, 0xff, count * sizeof(float)); /* NaN: nothing left over */
    ember_status_t status = ember_allreduce_into(ar, send, data, count, opts->average);
    if (status != EMBER_OK)
        return status;
    *wrong_p = ar_count_wrong(data, count, n, opts->average);
    if (!in_place) {
        /* The input must come back untouched. */
        for (size_t i = 0; i < count; i++)
            *wrong_p += send[i] != ar_pattern(i, rank);
    }
    return EMBER_OK;
}

static void ar_header(const ar_opts_t *opts, ember_tp_t *tp, int n)
{
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    printf("# ember-bench allreduce: backend host (engine/allreduce: all-to-all up "
           "to %u B, pipelined ring of %u-B segments above), UCX_TLS=%s\n",
           EMBER_ALLREDUCE_SMALL_BYTES, EMBER_ALLREDUCE_SEGMENT_BYTES,
           bench_tls_name());
#ifdef EMBER_HAVE_NCCL
    printf("# backend nccl: skipped (the engine has no NCCL allreduce entry point "
           "yet)\n");
#else
    printf("# backend nccl: skipped (built without CUDA/NCCL; no GPU here)\n");
#endif
    printf("# nThread 1 nGpus 0 nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) "
           "warmup iters: %zu iters: %zu agg iters: 1 validation: %d graph: 0\n", n,
           opts->min_bytes, opts->max_bytes, opts->factor, opts->warmup, opts->iters,
           opts->check);
    printf("#\n# Using devices\n");
    for (int r = 0; r < n; r++)
        printf("#  Rank %2d Group  0 Pid %6s on %10s device  - [host] %s\n", r, "-",
               host, ember_tp_peer_name(tp, r));
    printf("#\n");
    printf("#%75s%41s\n", "out-of-place", "in-place");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
           "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
           "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
           "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
           "(GB/s)", "(GB/s)", "");
    fflush(stdout);
}

int bench_allreduce_main(int argc, char **argv)
{
    ar_opts_t opts;
    ember_tp_t *tp = NULL;
    ember_allreduce_t *ar = NULL;
    float *send = NULL, *recv = NULL;
    int ret = BENCH_EXIT_FAIL, *ranks = NULL;

    if (!ar_parse(argc, argv, &opts))
        return BENCH_EXIT_USAGE;
    if (opts.nccl) {
        printf("# ember-bench allreduce: backend nccl: skipped (%s)\n",
#ifdef EMBER_HAVE_NCCL
               "the engine has no NCCL allreduce entry point yet"
#else
               "built without CUDA/NCCL; no GPU here"
#endif
        );
        return AR_SKIP;
    }
    if (bench_join(&tp) != EMBER_OK)
        return BENCH_EXIT_FAIL;
    int n = ember_tp_world_size(tp), rank = ember_tp_rank(tp);
    size_t max_count = opts.max_bytes / sizeof(float);

    ranks = malloc((size_t)n * sizeof(*ranks));
    send = bench_buffer_alloc(max_count * sizeof(float));
    recv = bench_buffer_alloc(max_count * sizeof(float));
    if (!ranks || !send || !recv) {
        fprintf(stderr, "ember-bench allreduce: out of memory for %zu bytes\n",
                opts.max_bytes);
        goto out;
    }
    for (int r = 0; r < n; r++)
        ranks[r] = r;
    if (ember_allreduce_create(tp, ranks, n, EMBER_OP_ALLREDUCE_BASE, &ar) != EMBER_OK)
        goto out;
    if (rank == 0)
        ar_header(&opts, tp, n);

    double busbw_sum = 0.0;
    size_t busbw_count = 0, wrong_total = 0;
    for (size_t bytes = opts.min_bytes; bytes <= opts.max_bytes; bytes *= opts.factor) {
        size_t count = bytes / sizeof(float);
        size_t wrong[2] = {0, 0};
        double seconds[2];
        /* Zeros while timing: sums stay finite whatever the iteration count. */
        memset(send, 0, count * sizeof(float));
        for (int in_place = 0; in_place < 2; in_place++) {
            if (ar_pass(ar, &opts, send, recv, count, in_place, &seconds[in_place]) !=
                EMBER_OK)
                goto out;
            if (opts.check &&
                ar_check(ar, &opts, send, recv, count, rank, n, in_place,
                         &wrong[in_place]) != EMBER_OK)
                goto out;
            memset(send, 0, count * sizeof(float));
        }
        /* Times (us) averaged and #wrong summed over ranks. */
        float stats[4] = {(float)(seconds[0] * 1e6), (float)(seconds[1] * 1e6),
                          (float)wrong[0], (float)wrong[1]};
        if (ember_allreduce(ar, stats, 4, 0) != EMBER_OK)
            goto out;
        if (rank == 0) {
            size_t size = count * sizeof(float);
            printf("%12zu  %12zu  %8s  %6s  %6d", size, count, "float",
                   opts.average ? "avg" : "sum", -1);
            for (int p = 0; p < 2; p++) {
                double us = stats[p] / n;
                double algbw = us > 0 ? (double)size / (us * 1e-6) / 1e9 : 0.0;
                double busbw = algbw * 2.0 * (n - 1) / n;
                busbw_sum += busbw;
                busbw_count++;
                printf("  %7.2f  %6.2f  %6.2f  %6.0f", us, algbw, busbw, stats[2 + p]);
            }
            printf("\n");
            fflush(stdout);
        }
        wrong_total += (size_t)(stats[2] + stats[3]);
        if (bytes > opts.max_bytes / opts.factor)
            break;
    }
    if (rank == 0) {
        printf("# Out of bounds values : %zu %s\n", wrong_total,
               wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n#\n",
               busbw_count ? busbw_sum / (double)busbw_count : 0.0);
        fflush(stdout);
    }
    ret = wrong_total ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
out:
    if (ar)
        ember_allreduce_destroy(ar);
    free(send);
    free(recv);
    free(ranks);
    if (tp)
        ember_tp_destroy(tp);
    return ret;
}
