/*
 * bench/nccl_format: the nccl-tests (all_reduce_perf) table, printed alike
 * by `ember-bench allreduce` and its MPI peer (bench/peers/mpi_allreduce.c,
 * which links MPI only: hence a header); bench/peers/gloo_allreduce.py
 * prints the same in Python.  busbw = algbw x 2(n-1)/n.
 */
#ifndef EMBER_BENCH_NCCL_FORMAT_H
#define EMBER_BENCH_NCCL_FORMAT_H

#include <stddef.h>
#include <stdio.h>

/* What a sweep adds up over its sizes, for the summary. */
typedef struct {
    double busbw_sum;
    size_t busbw_count, wrong_total;
} nccl_totals_t;

/* The run's settings line, as nccl-tests prints it. */
static inline void nccl_print_settings(int n, size_t min_bytes, size_t max_bytes, size_t factor,
                                       size_t warmup, size_t iters, int check)
{
    printf("# nThread 1 nGpus 0 nRanks %d minBytes %zu maxBytes %zu step: %zu(factor) "
           "warmup iters: %zu iters: %zu agg iters: 1 validation: %d graph: 0\n",
           n, min_bytes, max_bytes, factor, warmup, iters, check);
}

static inline void nccl_print_columns(void)
{
    printf("#%75s%41s\n", "out-of-place", "in-place");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
}

/* One size's row of @count floats over @n ranks: us[0] and us[1] the
 * out-of-place and in-place times averaged over the ranks, wrong[] their
 * #wrong; each pass's busbw goes into @totals. */
static inline void nccl_print_row(size_t count, const char *redop, int n, const double us[2],
                                  const double wrong[2], nccl_totals_t *totals)
{
    size_t size = count * sizeof(float);

    printf("%12zu  %12zu  %8s  %6s  %6d", size, count, "float", redop, -1);
    for (int p = 0; p < 2; p++) {
        double algbw = us[p] > 0 ? (double)size / (us[p] * 1e-6) / 1e9 : 0.0;
        double busbw = algbw * 2.0 * (n - 1) / n;
        totals->busbw_sum += busbw;
        totals->busbw_count++;
        printf("  %7.2f  %6.2f  %6.2f  %6.0f", us[p], algbw, busbw, wrong[p]);
    }
    printf("\n");
    fflush(stdout);
}

static inline void nccl_print_summary(const nccl_totals_t *totals)
{
    printf("# Out of bounds values : %zu %s\n", totals->wrong_total,
           totals->wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n",
           totals->busbw_count ? totals->busbw_sum / (double)totals->busbw_count : 0.0);
    fflush(stdout);
}

#endif
