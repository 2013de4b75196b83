/*
 * ember-criteo-gen: Criteo-format click logs with a learnable signal, for
 * tests and benchmarks where the real data set cannot be downloaded.
 *
 *     ember-criteo-gen --examples N --out PATH [--seed S] [--logits PATH]
 *
 * Each line is what engine/io/criteo reads, and what Criteo's own files
 * hold: a label, 13 integers (some negative, some empty) and 26 8-digit hex
 * ids (some empty), tab-separated.  The ids of each feature follow a power
 * law over a vocabulary of its own; the label is drawn from the logistic of
 * a hidden score (a weight per id of the first eight features and two dense
 * terms), so a model that learns the ids' weights beats chance clearly.
 * --logits writes that hidden score per line (the best any model can do).
 */
#include "common/rng.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DENSE  13
#define SPARSE 26

typedef struct {
    uint64_t examples, seed;
    const char *out, *logits;
} gen_opts_t;

static int usage(FILE *stream)
{
    fprintf(stream, "usage: ember-criteo-gen --examples N --out PATH [--seed S] [--logits PATH]\n"
                    "  --examples N   lines to write (1 to 2^40)\n"
                    "  --out PATH     the Criteo TSV file\n"
                    "  --seed S       the draw (0)\n"
                    "  --logits PATH  each line's hidden score, one per line\n");
    return stream == stdout ? 0 : 2;
}

/* A decimal integer in [lo, hi], all of @text. */
static int parse_u64(const char *flag, const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = text[0] >= '0' && text[0] <= '9' ? strtoull(text, &end, 10) : 0;
    if (text[0] < '0' || text[0] > '9' || errno || *end || v < lo || v > hi) {
        fprintf(stderr,
                "ember-criteo-gen: %s '%s' is not an integer from %" PRIu64 " to %" PRIu64 "\n",
                flag, text, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_args(int argc, char **argv, gen_opts_t *opts)
{
    *opts = (gen_opts_t){.seed = 0};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(flag, "--help") == 0)
            exit(usage(stdout));
        if (!value) {
            fprintf(stderr, "ember-criteo-gen: %s needs a value\n", flag);
            return 0;
        }
        i++;
        if (strcmp(flag, "--examples") == 0) {
            if (!parse_u64(flag, value, 1, 1ull << 40, &opts->examples))
                return 0;
        } else if (strcmp(flag, "--seed") == 0) {
            if (!parse_u64(flag, value, 0, UINT64_MAX, &opts->seed))
                return 0;
        } else if (strcmp(flag, "--out") == 0) {
            opts->out = value;
        } else if (strcmp(flag, "--logits") == 0) {
            opts->logits = value;
        } else {
            fprintf(stderr, "ember-criteo-gen: unknown flag '%s'\n", flag);
            return 0;
        }
    }
    if (!opts->examples || !opts->out) {
        fprintf(stderr, "ember-criteo-gen: --examples and --out are needed\n");
        return 0;
    }
    return 1;
}

/* The hidden weight of id @id of feature @f: in [-1.5, 1.5] for the first
 * eight features, none for the others (noise a model must learn to
 * ignore). */
static double id_weight(int f, uint64_t id)
{
    if (f >= 8)
        return 0.0;
    uint64_t h = ember_mix64(((uint64_t)f << 40) ^ id ^ 0x5bd1e995ull);
    return ((double)(h & 0xffff) / 65535.0 - 0.5) * 3.0;
}

/* One example: its line into @file, its hidden score returned. */
static double write_example(FILE *file, ember_rng_t *rng)
{
    char fields[DENSE + SPARSE][24];
    double score = -1.0;
    for (int d = 0; d < DENSE; d++) {
        double u = ember_rng_uniform(rng);
        int64_t x = (int64_t)floor(exp(6.0 * ember_rng_uniform(rng))) - 2; /* -1 .. 400 */
        if (u < 0.1) {
            fields[d][0] = '\0';
            x = 0;
        } else {
            snprintf(fields[d], sizeof(fields[d]), "%" PRId64, x);
        }
        if (d < 2)
            score += (d == 0 ? 0.4 : -0.4) * log((double)(x > 0 ? x : 0) + 1.0);
    }
    for (int f = 0; f < SPARSE; f++) {
        uint64_t vocab = 100ull << (f % 6); /* 100 .. 3200 ids */
        uint64_t id = (uint64_t)((double)vocab * pow(ember_rng_uniform(rng), 3.0));
        if (ember_rng_uniform(rng) < 0.05) {
            fields[DENSE + f][0] = '\0';
            continue;
        }
        score += id_weight(f, id);
        uint32_t hex = (uint32_t)ember_mix64(((uint64_t)f << 32) ^ id);
        snprintf(fields[DENSE + f], sizeof(fields[DENSE + f]), "%08x", hex);
    }
    int label = ember_rng_uniform(rng) < 1.0 / (1.0 + exp(-score));
    fprintf(file, "%d", label);
    for (int i = 0; i < DENSE + SPARSE; i++)
        fprintf(file, "\t%s", fields[i]);
    fputc('\n', file);
    return score;
}

static int close_checked(FILE *file, const char *path)
{
    if (file && (ferror(file) | fclose(file))) {
        fprintf(stderr, "ember-criteo-gen: cannot write %s: %s\n", path, strerror(errno));
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    gen_opts_t opts;
    if (!parse_args(argc, argv, &opts))
        return usage(stderr);
    FILE *out = fopen(opts.out, "w"), *logits = opts.logits ? fopen(opts.logits, "w") : NULL;
    if (!out || (opts.logits && !logits)) {
        fprintf(stderr, "ember-criteo-gen: cannot write %s: %s\n", !out ? opts.out : opts.logits,
                strerror(errno));
        return 1;
    }
    ember_rng_t rng;
    ember_rng_seed(&rng, opts.seed, 0xc817e0ull);
    for (uint64_t i = 0; i < opts.examples; i++) {
        double score = write_example(out, &rng);
        if (logits)
            fprintf(logits, "%.9g\n", score);
    }
    int ok = close_checked(out, opts.out) & close_checked(logits, opts.logits);
    return ok ? 0 : 1;
}
