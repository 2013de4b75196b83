/*
 * bench/peers/mpi_allreduce: MPI_Allreduce in the nccl-tests format, the peer
 * of `ember-bench allreduce` (same flags, sizes, pattern, check and columns).
 *
 *     mpirun -n N build/bench/peers/mpi_allreduce -b 8 -e 64M -f 2 -n 20 -w 5 -c 1
 *
 * Out-of-place: MPI_Allreduce(send, recv); in-place: MPI_IN_PLACE.  time =
 * average per call, averaged over ranks; busbw = algbw x 2(n-1)/n.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t min_bytes, max_bytes, factor, iters, warmup;
    int check, average;
} opts_t;

static int parse_size(const char *text, size_t *size_p)
{
    char *end;
    unsigned long long value = strtoull(text, &end, 10);
    if (end == text)
        return 0;
    switch (*end) {
    case 'K':
    case 'k':
        value <<= 10;
        end++;
        break;
    case 'M':
    case 'm':
        value <<= 20;
        end++;
        break;
    case 'G':
    case 'g':
        value <<= 30;
        end++;
        break;
    default: break;
    }
    if (*end)
        return 0;
    *size_p = (size_t)value;
    return 1;
}

static int parse(int argc, char **argv, opts_t *opts)
{
    *opts = (opts_t){.min_bytes = 8,
                     .max_bytes = 64u << 20,
                     .factor = 2,
                     .iters = 20,
                     .warmup = 5,
                     .check = 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *arg = argv[i], *value = argv[i + 1];
        int ok = 1;
        if (strcmp(arg, "-b") == 0)
            ok = parse_size(value, &opts->min_bytes);
        else if (strcmp(arg, "-e") == 0)
            ok = parse_size(value, &opts->max_bytes);
        else if (strcmp(arg, "-f") == 0)
            ok = parse_size(value, &opts->factor);
        else if (strcmp(arg, "-n") == 0)
            ok = parse_size(value, &opts->iters);
        else if (strcmp(arg, "-w") == 0)
            ok = parse_size(value, &opts->warmup);
        else if (strcmp(arg, "-c") == 0)
            opts->check = atoi(value);
        else if (strcmp(arg, "-d") == 0)
            ok = strcmp(value, "float") == 0;
        else if (strcmp(arg, "-o") == 0)
            ok = strcmp(value, "sum") == 0 || (opts->average = strcmp(value, "avg") == 0);
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "mpi_allreduce: bad option %s %s\n", arg, value);
            return 0;
        }
    }
    return opts->min_bytes >= 4 && opts->min_bytes <= opts->max_bytes && opts->factor >= 2 &&
           opts->iters > 0;
}

static float pattern(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 13) % 31) - 15.0f;
}

static double pass(const opts_t *opts, float *send, float *recv, size_t count, int in_place, int n)
{
    double start = 0.0;
    for (size_t it = 0; it < opts->warmup + opts->iters; it++) {
        if (it == opts->warmup)
            start = MPI_Wtime();
        MPI_Allreduce(in_place ? MPI_IN_PLACE : send, in_place ? send : recv, (int)count, MPI_FLOAT,
                      MPI_SUM, MPI_COMM_WORLD);
        if (opts->average) { /* MPI has no mean: the same division ember does */
            float *data = in_place ? send : recv;
            for (size_t i = 0; i < count; i++)
                data[i] /= (float)n;
        }
    }
    return (MPI_Wtime() - start) / (double)opts->iters;
}

static size_t check(const opts_t *opts, float *send, float *recv, size_t count, int rank, int n,
                    int in_place)
{
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        send[i] = pattern(i, rank);
    MPI_Allreduce(in_place ? MPI_IN_PLACE : send, in_place ? send : recv, (int)count, MPI_FLOAT,
                  MPI_SUM, MPI_COMM_WORLD);
    const float *data = in_place ? send : recv;
    for (size_t i = 0; i < count; i++) {
        float expect = 0.0f;
        for (int r = 0; r < n; r++)
            expect += pattern(i, r);
        if (data[i] != expect)
            wrong++;
    }
    return wrong;
}

/* What the sweep adds up over its sizes (rank 0 prints the busbw). */
typedef struct {
    double busbw_sum;
    size_t busbw_count, wrong_total;
} totals_t;

static void print_header(const opts_t *opts, int n)
{
    int len = 0;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(version, &len);
    version[strcspn(version, "\n,")] = '\0';
    printf("# mpi_allreduce: MPI_Allreduce MPI_FLOAT MPI_SUM, %s\n", version);
    printf("# nThread 1 nGpus 0 nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) "
           "warmup iters: %zu iters: %zu agg iters: 1 validation: %d graph: 0\n",
           n, opts->min_bytes, opts->max_bytes, opts->factor, opts->warmup, opts->iters,
           opts->check);
    printf("# connection warm-up: 128 untimed reductions of min(8000 B, maxBytes) "
           "before the sweep\n#\n");
    printf("#%75s%41s\n", "out-of-place", "in-place");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
}

/* Rank 0: a size's row from @stats (time summed over ranks, #wrong). */
static void print_row(const opts_t *opts, const double stats[4], size_t count, int n,
                      totals_t *totals)
{
    size_t size = count * sizeof(float);
    printf("%12zu  %12zu  %8s  %6s  %6d", size, count, "float", opts->average ? "avg" : "sum", -1);
    for (int p = 0; p < 2; p++) {
        double us = stats[p] / n;
        double algbw = us > 0 ? (double)size / (us * 1e-6) / 1e9 : 0.0;
        double busbw = algbw * 2.0 * (n - 1) / n;
        totals->busbw_sum += busbw;
        totals->busbw_count++;
        printf("  %7.2f  %6.2f  %6.2f  %6.0f", us, algbw, busbw, stats[2 + p]);
    }
    printf("\n");
    fflush(stdout);
}

/* One size, out-of-place then in-place, each checked under -c 1. */
static void one_size(const opts_t *opts, float *send, float *recv, size_t count, int rank, int n,
                     totals_t *totals)
{
    double stats[4] = {0, 0, 0, 0};
    memset(send, 0, count * sizeof(float));
    for (int in_place = 0; in_place < 2; in_place++) {
        stats[in_place] = pass(opts, send, recv, count, in_place, n) * 1e6;
        if (opts->check && !opts->average)
            stats[2 + in_place] = (double)check(opts, send, recv, count, rank, n, in_place);
        memset(send, 0, count * sizeof(float));
    }
    MPI_Allreduce(MPI_IN_PLACE, stats, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        print_row(opts, stats, count, n, totals);
    totals->wrong_total += (size_t)(stats[2] + stats[3]);
}

int main(int argc, char **argv)
{
    opts_t opts;
    int rank, n;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (!parse(argc, argv, &opts)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_allreduce [-b MIN] [-e MAX] [-f F] [-n ITERS] "
                            "[-w WARMUP] [-c 0|1] [-d float] [-o sum|avg]\n");
        MPI_Finalize();
        return 2;
    }
    size_t max_count = opts.max_bytes / sizeof(float);
    float *send = calloc(max_count, sizeof(float)), *recv = calloc(max_count, sizeof(float));
    if (!send || !recv)
        MPI_Abort(MPI_COMM_WORLD, 1);
    memset(recv, 0, max_count * sizeof(float));

    /* As ember-bench's: untimed reductions of min(8000 B, maxBytes) before the sweep. */
    for (int i = 0; i < 128 && max_count > 0; i++)
        MPI_Allreduce(send, recv, (int)(max_count < 2000 ? max_count : 2000), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
    if (rank == 0)
        print_header(&opts, n);
    totals_t totals = {0};
    for (size_t bytes = opts.min_bytes; bytes <= opts.max_bytes; bytes *= opts.factor) {
        one_size(&opts, send, recv, bytes / sizeof(float), rank, n, &totals);
        if (bytes > opts.max_bytes / opts.factor)
            break;
    }
    if (rank == 0) {
        printf("# Out of bounds values : %zu %s\n", totals.wrong_total,
               totals.wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n#\n",
               totals.busbw_count ? totals.busbw_sum / (double)totals.busbw_count : 0.0);
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return totals.wrong_total ? 1 : 0;
}
