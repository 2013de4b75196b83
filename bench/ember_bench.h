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
#include <stdio.h>

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

/* ---- options: one table per subcommand ----------------------------------- */

/* How an option's value is read into its field. */
typedef enum {
    BENCH_OPT_SWITCH, /* takes no value: the int field becomes 1 */
    BENCH_OPT_SIZE,   /* size_t: "64", "64K", "16M" */
    BENCH_OPT_COUNT,  /* size_t above 0 */
    BENCH_OPT_COUNT0, /* size_t, 0 allowed */
    BENCH_OPT_BIT,    /* int: "0" or "1" */
    BENCH_OPT_CUSTOM  /* parse(value, field) */
} bench_opt_kind_t;

typedef struct {
    const char *name; /* "--rows" */
    bench_opt_kind_t kind;
    size_t offset; /* of its field in the subcommand's options */
    /* BENCH_OPT_CUSTOM: 1, or 0 (bench_parse_opts then names the option
     * and its value) */
    int (*parse)(const char *value, void *field);
} bench_opt_t;

/* A table's entries: BENCH_OPT(lk_opts_t, "--rows", BENCH_OPT_SIZE, rows). */
#define BENCH_OPT(type, name, kind, field)          \
    {                                               \
        (name), (kind), offsetof(type, field), NULL \
    }
#define BENCH_OPT_WITH(type, name, field, parse)                 \
    {                                                            \
        (name), BENCH_OPT_CUSTOM, offsetof(type, field), (parse) \
    }

typedef struct {
    const char *cmd; /* "lookup", for the messages */
    const bench_opt_t *opts;
    size_t count;
    void (*usage)(FILE *stream);
} bench_opt_table_t;

/**
 * Read argv[1..argc-1] into @options by @table.  -h/--help prints the usage
 * on stdout and exits 0; an unknown option prints it on stderr.  Returns 1,
 * or 0 having said what is wrong.
 */
int bench_parse_opts(const bench_opt_table_t *table, int argc, char **argv, void *options);

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
