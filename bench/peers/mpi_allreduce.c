/*
 * bench/peers/mpi_allreduce: MPI_Allreduce in the nccl-tests format, the peer
 * of `ember-bench allreduce` (same flags, sizes, pattern, check and columns).
 *
 *     mpirun -n N build/bench/peers/mpi_allreduce -b 8 -e 64M -f 2 -n 20 -w 5 -c 1
 *
 * Out-of-place: MPI_Allreduce(send, recv); in-place: MPI_IN_PLACE.  time =
 * average per call, averaged over ranks; busbw = algbw x 2(n-1)/n.
 */
#include "bench/nccl_format.h"

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

static void print_header(const opts_t *opts, int n)
{
    int len = 0;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(version, &len);
    version[strcspn(version, "\n,")] = '\0';
    printf("# mpi_allreduce: MPI_Allreduce MPI_FLOAT MPI_SUM, %s\n", version);
    nccl_print_settings(n, opts->min_bytes, opts->max_bytes, opts->factor, opts->warmup,
                        opts->iters, opts->check);
    printf("# connection warm-up: 128 untimed reductions of min(8000 B, maxBytes) "
           "before the sweep\n#\n");
    nccl_print_columns();
}

/* One size, out-of-place then in-place, each checked under -c 1. */
static void one_size(const opts_t *opts, float *send, float *recv, size_t count, int rank, int n,
                     nccl_totals_t *totals)
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
    if (rank == 0) {
        const double us[2] = {stats[0] / n, stats[1] / n}, wrong[2] = {stats[2], stats[3]};
        nccl_print_row(count, opts->average ? "avg" : "sum", n, us, wrong, totals);
    }
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
    nccl_totals_t totals = {0};
    for (size_t bytes = opts.min_bytes; bytes <= opts.max_bytes; bytes *= opts.factor) {
        one_size(&opts, send, recv, bytes / sizeof(float), rank, n, &totals);
        if (bytes > opts.max_bytes / opts.factor)
            break;
    }
    if (rank == 0)
        nccl_print_summary(&totals);
    free(send);
    free(recv);
    MPI_Finalize();
    return totals.wrong_total ? 1 : 0;
}
