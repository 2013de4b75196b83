/*
 * bench/peers/tutorial_batches: the batches ember-train draws with its
 * tutorial data, written to a file a peer can train on.
 *
 *     tutorial_batches --rows R --classes C --min-indices A --max-indices B
 *                      --seed S --trainers T --steps N --out FILE
 *
 * Each trainer's batch of each global step comes from ember's own data
 * source (models/tutorial/tutorial_data: tutorial_data_get), given the
 * configuration ember-train's flags of the same names set, so a peer reading FILE trains
 * on exactly the bags ember-train draws in its run with those flags (tutorial
 * data, no per-sample weights; its step s is epoch s / batches, batch
 * s % batches).  FILE is safetensors in the golden layout's batch names:
 * t{T}.s{S}.indices I64 [n], t{T}.s{S}.offsets I64 [bags] (each bag's start)
 * and t{T}.s{S}.targets I64 [bags], with the flags as metadata.
 * bench/peers/torchrec_bag.py reads it (bench/train_vs_torchrec.sh).
 *
 * Exit 0, or 2 on a bad flag, no memory or a file that cannot be written.
 */
#include "models/tutorial/tutorial_data.h"

#include <ember/safetensors.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    ROWS,
    CLASSES,
    MIN_INDICES,
    MAX_INDICES,
    SEED,
    TRAINERS,
    STEPS,
    NVALUES
};

/* Each flag's name and range: ember-train's (models/tutorial), and
 * steps x trainers batches few enough to hold in memory at once. */
static const struct {
    const char *name;
    int64_t min, max;
} numeric[NVALUES] = {
        [ROWS] = {"--rows", 1, INT64_MAX / 65536},
        [CLASSES] = {"--classes", 2, 65536},
        [MIN_INDICES] = {"--min-indices", 0, 1 << 30},
        [MAX_INDICES] = {"--max-indices", 1, 1 << 30},
        [SEED] = {"--seed", 0, INT64_MAX},
        [TRAINERS] = {"--trainers", 1, 4096},
        [STEPS] = {"--steps", 1, 1 << 20},
};

typedef struct {
    int64_t value[NVALUES];
    const char *out;
} args_t;

/* Every batch of the file: the tensors and the copies they point into. */
typedef struct {
    ember_st_tensor_t *tensors;
    char (*names)[48];
    int64_t **arrays;
    size_t count;
} batches_t;

static int usage(const char *why)
{
    fprintf(stderr,
            "tutorial_batches: %s\nusage: tutorial_batches --rows R --classes C "
            "--min-indices A --max-indices B --seed S --trainers T --steps N --out FILE\n",
            why);
    return 2;
}

/* @text as an integer of [min, max], read at full width. */
static int parse_value(int k, const char *text, int64_t *value_p)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || text[0] == '+' ||
        (int64_t)v < numeric[k].min || (int64_t)v > numeric[k].max) {
        fprintf(stderr,
                "tutorial_batches: %s '%s' is not an integer from %" PRId64 " to %" PRId64 "\n",
                numeric[k].name, text, numeric[k].min, numeric[k].max);
        return 0;
    }
    *value_p = (int64_t)v;
    return 1;
}

static int parse_args(int argc, char **argv, args_t *a)
{
    int given[NVALUES] = {0};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) {
            usage("a flag without its value");
            return 0;
        }
        if (strcmp(argv[i], "--out") == 0) {
            a->out = argv[i + 1];
            continue;
        }
        int k = 0;
        while (k < NVALUES && strcmp(argv[i], numeric[k].name) != 0)
            k++;
        if (k == NVALUES) {
            fprintf(stderr, "tutorial_batches: unknown flag '%s'\n", argv[i]);
            return 0;
        }
        if (!parse_value(k, argv[i + 1], &a->value[k]))
            return 0;
        given[k] = 1;
    }
    for (int k = 0; k < NVALUES; k++) {
        if (!given[k]) {
            fprintf(stderr, "tutorial_batches: %s missing\n", numeric[k].name);
            return 0;
        }
    }
    if (!a->out) {
        usage("--out missing");
        return 0;
    }
    if (a->value[MIN_INDICES] > a->value[MAX_INDICES]) {
        fprintf(stderr, "tutorial_batches: --min-indices %" PRId64 " > --max-indices %" PRId64 "\n",
                a->value[MIN_INDICES], a->value[MAX_INDICES]);
        return 0;
    }
    return 1;
}

/* The tutorial model's configuration for these flags; only what its data
 * source reads matters. */
static tutorial_config_t config_of(const args_t *a)
{
    return (tutorial_config_t){.rows = a->value[ROWS],
                               .classes = (uint32_t)a->value[CLASSES],
                               .data = TUTORIAL_DATA_RANDOM,
                               .batches = (uint32_t)a->value[STEPS],
                               .min_indices = (uint32_t)a->value[MIN_INDICES],
                               .max_indices = (uint32_t)a->value[MAX_INDICES]};
}

/* Tensor @k of @b: a copy of @n values of @values, named trainer @t, step
 * @s, @part. */
static int add_tensor(batches_t *b, size_t k, uint32_t t, uint64_t s, const char *part,
                      const int64_t *values, size_t n)
{
    snprintf(b->names[k], sizeof(b->names[k]), "t%u.s%" PRIu64 ".%s", t, s, part);
    b->arrays[k] = malloc(n ? n * sizeof(int64_t) : 1);
    if (!b->arrays[k])
        return 0;
    if (n)
        memcpy(b->arrays[k], values, n * sizeof(int64_t));
    b->tensors[k] = (ember_st_tensor_t){.name = b->names[k],
                                        .dtype = EMBER_DTYPE_I64,
                                        .ndim = 1,
                                        .shape = {(int64_t)n},
                                        .data = b->arrays[k]};
    return 1;
}

/* Every step of trainer @t into @b from tensor @first on. */
static int draw_trainer(const args_t *a, uint32_t t, batches_t *b, size_t first)
{
    const tutorial_config_t config = config_of(a);
    tutorial_data_t *data;
    char err[256] = "";
    if (tutorial_data_open(&config, (uint64_t)a->value[SEED], (int)t, &data, err, sizeof(err)) !=
        EMBER_OK) {
        fprintf(stderr, "tutorial_batches: trainer %u: %s\n", t, err);
        return 0;
    }
    int ok = 1;
    for (uint64_t s = 0; ok && s < (uint64_t)a->value[STEPS]; s++) {
        tutorial_batch_t batch;
        size_t k = first + 3 * s;
        ok = tutorial_data_get(data, s, 0, &batch, err, sizeof(err)) == EMBER_OK;
        if (!ok)
            fprintf(stderr, "tutorial_batches: trainer %u step %" PRIu64 ": %s\n", t, s, err);
        ok = ok && add_tensor(b, k, t, s, "indices", batch.indices, batch.n) &&
             add_tensor(b, k + 1, t, s, "offsets", batch.offsets, batch.bags) &&
             add_tensor(b, k + 2, t, s, "targets", batch.targets, batch.bags);
    }
    tutorial_data_close(data);
    return ok;
}

static int write_file(const args_t *a, const batches_t *b)
{
    char text[NVALUES][24];
    ember_st_meta_t meta[NVALUES + 1];
    for (int k = 0; k < NVALUES; k++) {
        snprintf(text[k], sizeof(text[k]), "%" PRId64, a->value[k]);
        meta[k] = (ember_st_meta_t){.key = numeric[k].name + 2, .value = text[k]};
    }
    meta[NVALUES] = (ember_st_meta_t){.key = "producer", .value = "tutorial_batches"};
    if (ember_st_write(a->out, b->tensors, b->count, meta, NVALUES + 1) != EMBER_OK) {
        fprintf(stderr, "tutorial_batches: cannot write %s\n", a->out);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    args_t a = {.out = NULL};
    if (!parse_args(argc, argv, &a))
        return 2;
    const size_t per_trainer = 3 * (size_t)a.value[STEPS];
    batches_t b = {.count = per_trainer * (size_t)a.value[TRAINERS]};
    b.tensors = calloc(b.count, sizeof(*b.tensors));
    b.names = calloc(b.count, sizeof(*b.names));
    b.arrays = calloc(b.count, sizeof(*b.arrays));
    int ok = b.tensors && b.names && b.arrays;
    if (!ok)
        fprintf(stderr, "tutorial_batches: out of memory\n");
    for (uint32_t t = 0; ok && t < (uint32_t)a.value[TRAINERS]; t++)
        ok = draw_trainer(&a, t, &b, t * per_trainer);
    ok = ok && write_file(&a, &b);
    for (size_t k = 0; b.arrays && k < b.count; k++)
        free(b.arrays[k]);
    free(b.arrays);
    free(b.names);
    free(b.tensors);
    return ok ? 0 : 2;
}
