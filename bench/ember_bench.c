/*
 * bench/ember_bench: `ember-bench SUBCOMMAND [ARGS]`, run under ember-run.
 *
 * The dispatch table below is the only place a subcommand is named; a new
 * benchmark adds one line and one source file.  Each subcommand's options are
 * a table too (bench_parse_opts).
 */
#include "bench/ember_bench.h"

#include "common/clock.h"
#include "common/topology.h"

#include <ember/config.h>
#include <ember/log.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const bench_cmd_t bench_cmds[] = {
        {.name = "rpc",
         .summary = "RPC round-trip latency and windowed bandwidth (2 ranks)",
         .main_cb = bench_rpc_main},
        {.name = "lookup",
         .summary = "embedding lookups (and gradient pushes) against real PS ranks",
         .main_cb = bench_lookup_main},
        {.name = "allreduce",
         .summary = "dense allreduce, nccl-tests all_reduce_perf format",
         .main_cb = bench_allreduce_main},
};

#define BENCH_CMD_COUNT (sizeof(bench_cmds) / sizeof(bench_cmds[0]))

/*
 * Timestamps on the TSC where the kernel keeps time with it, as
 * ucx_perftest's (ucs_get_time reads the TSC on x86), else CLOCK_MONOTONIC:
 * a vDSO clock_gettime is dearer on a KVM guest, and a small lookup's client
 * takes a timestamp on the path of every sample, so the clock showed in its
 * profile.  The rate is calibrated once, over 20 ms, against CLOCK_MONOTONIC.
 */
static ember_busy_clock_t bench_clock; /* calibrated first thing in main */

double bench_now(void)
{
    return ember_busy_clock_now(&bench_clock);
}

int bench_parse_size(const char *text, size_t *size_p)
{
    if (ember_config_parse_size(text, size_p) != EMBER_OK) {
        fprintf(stderr, "ember-bench: not a size: '%s'\n", text);
        return 0;
    }
    return 1;
}

int bench_parse_count_or_zero(const char *text, size_t *count_p)
{
    if (strcmp(text, "0") == 0) {
        *count_p = 0;
        return 1;
    }
    return bench_parse_count(text, count_p);
}

int bench_parse_count(const char *text, size_t *count_p)
{
    char *end;
    unsigned long long value;

    errno = 0;
    value = strtoull(text, &end, 10);
    if (errno || end == text || *end || value == 0 || text[0] == '-') {
        fprintf(stderr, "ember-bench: not a positive count: '%s'\n", text);
        return 0;
    }
    *count_p = (size_t)value;
    return 1;
}

static const bench_opt_t *bench_opt_find(const bench_opt_table_t *table, const char *arg)
{
    for (size_t i = 0; i < table->count; i++) {
        if (strcmp(arg, table->opts[i].name) == 0)
            return &table->opts[i];
    }
    return NULL;
}

/* @opt's @value into its @field: 1, or 0. */
static int bench_opt_read(const bench_opt_t *opt, const char *value, void *field)
{
    switch (opt->kind) {
    case BENCH_OPT_SIZE: return bench_parse_size(value, field);
    case BENCH_OPT_COUNT: return bench_parse_count(value, field);
    case BENCH_OPT_COUNT0: return bench_parse_count_or_zero(value, field);
    case BENCH_OPT_BIT:
        *(int *)field = value[0] == '1';
        return strcmp(value, "0") == 0 || strcmp(value, "1") == 0;
    case BENCH_OPT_CUSTOM: return opt->parse(value, field);
    case BENCH_OPT_SWITCH: break;
    }
    *(int *)field = 1;
    return 1;
}

int bench_parse_opts(const bench_opt_table_t *table, int argc, char **argv, void *options)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        const bench_opt_t *opt = bench_opt_find(table, arg);

        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            table->usage(stdout);
            exit(BENCH_EXIT_OK);
        }
        if (opt && opt->kind == BENCH_OPT_SWITCH) {
            bench_opt_read(opt, NULL, (char *)options + opt->offset);
            continue;
        }
        if (!value) {
            fprintf(stderr, "ember-bench %s: %s needs a value\n", table->cmd, arg);
            return 0;
        }
        if (!opt) {
            fprintf(stderr, "ember-bench %s: unknown option '%s'\n", table->cmd, arg);
            table->usage(stderr);
            return 0;
        }
        if (!bench_opt_read(opt, value, (char *)options + opt->offset)) {
            fprintf(stderr, "ember-bench %s: bad value for %s: '%s'\n", table->cmd, arg, value);
            return 0;
        }
        i++;
    }
    return 1;
}

ember_status_t bench_join(ember_tp_t **tp_p)
{
    ember_tp_params_t params;
    ember_status_t status;

    ember_tp_params_init(&params);
    status = ember_tp_create(&params, tp_p);
    if (status != EMBER_OK) {
        fprintf(stderr,
                "ember-bench: cannot join the job: %s (run it under "
                "ember-run)\n",
                ember_status_string(status));
        return status;
    }
    /* EMBER_BIND as for ember-train; the binding line becomes a '#' comment
     * so the nccl-tests style outputs stay parseable. */
    char *line = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&line, &length);
    if (!stream)
        return EMBER_OK;
    status = ember_topo_bind_self(ember_tp_rank(*tp_p), ember_tp_world_size(*tp_p), stream);
    fclose(stream);
    if (line && length)
        fprintf(stderr, "# %s", line);
    free(line);
    if (status != EMBER_OK) {
        ember_tp_destroy(*tp_p);
        *tp_p = NULL;
    }
    return status;
}

const char *bench_tls_name(void)
{
    /* EMBER_TLS overrides UCX_TLS inside the transport (tp_worker_create). */
    const char *tls = ember_config_str("EMBER_TLS");
    if (tls && *tls)
        return tls;
    tls = getenv("UCX_TLS");
    return tls && *tls ? tls : "all (UCX default)";
}

static int double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *samples, size_t count)
{
    qsort(samples, count, sizeof(*samples), double_cmp);
}

double bench_percentile(const double *sorted, size_t count, double p)
{
    /* Nearest rank: the smallest sample with at least p% at or below it. */
    size_t rank;

    if (count == 0)
        return 0.0;
    rank = (size_t)((p / 100.0) * (double)count + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > count)
        rank = count;
    return sorted[rank - 1];
}

void *bench_buffer_alloc(size_t size)
{
    void *buffer = NULL;

    if (posix_memalign(&buffer, 4096, size ? size : 1) != 0)
        return NULL;
    /* Fault every page in now, not inside a timed loop. */
    memset(buffer, 0xa5, size);
    return buffer;
}

static void usage(FILE *stream)
{
    fprintf(stream, "usage: ember-run -n N ember-bench SUBCOMMAND [ARGS...]\n\n"
                    "Subcommands (SUBCOMMAND -h for their options):\n");
    for (size_t i = 0; i < BENCH_CMD_COUNT; i++)
        fprintf(stream, "  %-10s %s\n", bench_cmds[i].name, bench_cmds[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? BENCH_EXIT_USAGE : BENCH_EXIT_OK;
    }
    if (ember_config_init() != EMBER_OK) /* a bad EMBER_* value: refused by name */
        return BENCH_EXIT_USAGE;
    /* Calibrated before the rank joins: at its first timestamp, the 20 ms
     * spin fell inside the other ranks' first timed allreduce pass, which
     * then waited for this one and measured the spin. */
    ember_busy_clock_init(&bench_clock);
    ember_busy_clock_calibrate(&bench_clock, 20e-3);
    for (size_t i = 0; i < BENCH_CMD_COUNT; i++) {
        if (strcmp(argv[1], bench_cmds[i].name) == 0)
            return bench_cmds[i].main_cb(argc - 1, argv + 1);
    }
    fprintf(stderr, "ember-bench: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return BENCH_EXIT_USAGE;
}
