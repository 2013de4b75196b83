/*
 * bench/ember_bench: shared pieces of the ember-bench subcommands.
 *
 * Each subcommand is one entry of the dispatch table in ember_bench.c; it
 * gets the arguments after its name and returns a process exit code.
 */
#ifndef EMBER_BENCH_H
#define EMBER_BENCH_H

#include <ember/status.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

/* Exit codes of a subcommand (as in the tests: 77 = skipped). */
#define BENCH_EXIT_OK    0
#define BENCH_EXIT_FAIL  1
#define BENCH_EXIT_USAGE 2

typedef struct {
    const char *name;                      /* "rpc", "lookup", ... */
    const char *summary;                   /* one line for `ember-bench -h` */
    int (*main_cb)(int argc, char **argv); /* argv[0] is the subcommand name */
} bench_cmd_t;

/* The subcommands (one per bench_<name>.c). */
int bench_rpc_main(int argc, char **argv);
int bench_lookup_main(int argc, char **argv);
int bench_allreduce_main(int argc, char **argv);

/** Monotonic time in seconds (the TSC where the kernel keeps time with it,
 *  calibrated over 20 ms when ember-bench starts). */
double bench_now(void);

/** Parse "64", "64K", "16M" (binary suffixes); 0 and logs on failure. */
int bench_parse_size(const char *text, size_t *size_p);
/** Parse a positive integer; 0 and logs on failure. */
int bench_parse_count(const char *text, size_t *count_p);
/** As bench_parse_count, 0 allowed (warm-up iterations). */
int bench_parse_count_or_zero(const char *text, size_t *count_p);

/** Join the job with everything from the environment (ember-run sets it). */
ember_status_t bench_join(ember_tp_t **tp_p);

/** UCX transports in use as a printable string (UCX_TLS / EMBER_TLS). */
const char *bench_tls_name(void);

/** Percentile @p (0..100) of @count sorted samples. */
double bench_percentile(const double *sorted, size_t count, double p);
void bench_sort(double *samples, size_t count);

/** Page-aligned, touched buffer of @size bytes (free with free()). */
void *bench_buffer_alloc(size_t size);

#endif
