/*
 * make_bad_replay GOLDEN OUT KIND TRAINER STEP: copy a golden file, breaking
 * one thing, so the tests can check what ember-train and the single-process
 * replay make of it.
 *
 * Batch contents (the batch of TRAINER, STEP), which the trainer must refuse
 * naming the table, trainer and step and applying nothing: index_high,
 * index_negative, offsets_start, offsets_decrease, offsets_past_end.
 *
 * What the run is checked against (TRAINER and STEP unused): expected_off
 * moves expected.fc.bias[0] by 0.01, no_expected drops every expected.*
 * tensor.
 *
 * The file itself, which every reader must refuse before training: one
 * metadata value (meta_kinds below) or one tensor's dtype or shape
 * (weights_length, emb_short, emb_flat, fc_weight_transposed, indices_dtype,
 * targets_short, offsets_none, batch_missing, expected_loss_shape).  For
 * these it prints one line, what the refusal must say (the key and the
 * value, or the tensor with its shape and the wanted one).
 */
#include "engine/io/safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const meta_keys[] = {
        "rows",      "dim",  "classes",       "trainers", "steps",
        "lr",        "mode", "sparse_reduce", "seed",     "per_sample_weights",
        "optimizer", "loss", "generator"};
#define NKEYS (sizeof(meta_keys) / sizeof(meta_keys[0]))

/* KEY set to VALUE, or (VALUE NULL) to the file's own value plus ADD: 2^32
 * more is what a reader that keeps 32 bits truncates back to the file's
 * value, and is accepted silently by one. */
static const struct {
    const char *kind, *key, *value;
    uint64_t add;
} meta_kinds[] = {
        {"steps_2e62", "steps", "4611686018427387904", 0},
        {"steps_2e32", "steps", "4294967296", 0},
        {"steps_beyond", "steps", NULL, 1}, /* one step more than it holds */
        {"classes_wrap", "classes", NULL, UINT64_C(1) << 32},
        {"dim_wrap", "dim", NULL, UINT64_C(1) << 32},
        {"trainers_wrap", "trainers", NULL, UINT64_C(1) << 32},
        {"rows_zero", "rows", "0", 0},
        {"lr_word", "lr", "sum", 0},
        {"lr_inf", "lr", "inf", 0},
        {"reduce_word", "sparse_reduce", "median", 0},
        {"mode_word", "mode", "median", 0},
        {"weights_flag", "per_sample_weights", "2", 0},
        {"seed_negative", "seed", "-1", 0},
        {"optimizer_word", "optimizer", "lbfgs", 0},
};
#define NMETA_KINDS (sizeof(meta_kinds) / sizeof(meta_kinds[0]))

typedef struct {
    const char *kind, *batch; /* batch: "t1.s5." */
    int64_t rows, dim, classes, trainers, steps;
    int changed;
} breaker_t;

static int64_t meta_int(const ember_st_file_t *file, const char *key)
{
    const char *text = ember_st_metadata(file, key);
    return text ? strtoll(text, NULL, 10) : 0;
}

/* "F32 [100, 16]" */
static void shape_text(const ember_st_tensor_t *t, char *text, size_t length)
{
    int used = snprintf(text, length, "%s [", ember_dtype_name(t->dtype));
    for (size_t d = 0; d < t->ndim && used < (int)length; d++)
        used += snprintf(text + used, length - (size_t)used, "%s%" PRId64, d ? ", " : "",
                         t->shape[d]);
    if (used < (int)length)
        snprintf(text + used, length - (size_t)used, "]");
}

/* The metadata, with one value replaced for a metadata kind. */
static size_t copy_metadata(const ember_st_file_t *file, breaker_t *b, ember_st_meta_t *meta)
{
    static char value[32];
    size_t n = 0;
    for (size_t k = 0; k < NKEYS; k++) {
        const char *text = ember_st_metadata(file, meta_keys[k]);
        for (size_t i = 0; i < NMETA_KINDS; i++) {
            if (strcmp(b->kind, meta_kinds[i].kind) != 0 ||
                strcmp(meta_keys[k], meta_kinds[i].key) != 0)
                continue;
            text = meta_kinds[i].value;
            if (!text) {
                snprintf(value, sizeof(value), "%" PRIu64,
                         (uint64_t)meta_int(file, meta_keys[k]) + meta_kinds[i].add);
                text = value;
            }
            if (strcmp(b->kind, "steps_beyond") == 0)
                printf("tensor 't0.s%" PRId64 ".indices' is missing\n", b->steps);
            else
                printf("metadata '%s' is '%s'\n", meta_keys[k], text);
            b->changed = 1;
        }
        if (text)
            meta[n++] = (ember_st_meta_t){meta_keys[k], text};
    }
    return n;
}

/* One tensor, broken for a tensor kind: 0 = keep, -1 = drop.  Shapes only
 * ever shrink or keep their element count, so the copied data still covers
 * what the writer takes from it. */
static int break_tensor(breaker_t *b, ember_st_tensor_t *t)
{
    char before[96], after[96];
    const char *part =
            strncmp(t->name, b->batch, strlen(b->batch)) == 0 ? t->name + strlen(b->batch) : "";
    const char *kind = b->kind;
    shape_text(t, before, sizeof(before));
    if (!strcmp(t->name, "emb.weight") && !strcmp(kind, "emb_short"))
        t->shape[0] = b->rows - 1;
    else if (!strcmp(t->name, "emb.weight") && !strcmp(kind, "emb_flat"))
        t->ndim = 1, t->shape[0] = b->rows * b->dim;
    else if (!strcmp(t->name, "fc.weight") && !strcmp(kind, "fc_weight_transposed"))
        t->shape[0] = b->dim, t->shape[1] = b->classes;
    else if (!strcmp(t->name, "expected.loss") && !strcmp(kind, "expected_loss_shape"))
        t->shape[0] = b->trainers, t->shape[1] = b->steps;
    else if (!strcmp(part, "indices") && !strcmp(kind, "indices_dtype"))
        t->dtype = EMBER_DTYPE_I32;
    else if (!strcmp(part, "targets") && t->shape[0] > 1 && !strcmp(kind, "targets_short"))
        t->shape[0]--;
    else if ((!strcmp(part, "offsets") || !strcmp(part, "targets")) &&
             !strcmp(kind, "offsets_none"))
        t->shape[0] = 0;
    else if (!strcmp(part, "weights") && t->shape[0] > 1 && !strcmp(kind, "weights_length"))
        t->shape[0]--;
    else if (!strcmp(part, "targets") && !strcmp(kind, "batch_missing")) {
        printf("tensor '%s' is missing\n", t->name);
        b->changed = 1;
        return -1;
    } else {
        return 0;
    }
    b->changed = 1;
    shape_text(t, after, sizeof(after));
    if (!strcmp(kind, "offsets_none") && !strcmp(part, "targets"))
        return 0; /* the offsets' line says it */
    if (!strcmp(kind, "indices_dtype") || !strcmp(kind, "offsets_none"))
        printf("tensor '%s' is %s, not ", t->name, after);
    else
        printf("tensor '%s' is %s, not %s\n", t->name, after, before);
    if (!strcmp(kind, "indices_dtype"))
        printf("I64\n");
    else if (!strcmp(kind, "offsets_none"))
        printf("I64 [bags] with bags >= 1\n");
    return 0;
}

/* The batch of (trainer, step) with its contents broken for a batch kind. */
static void break_batch(breaker_t *b, ember_st_tensor_t *t, void *copy)
{
    int64_t *values = copy;
    size_t n = t->numel;
    const char *kind = b->kind;
    if (strncmp(t->name, b->batch, strlen(b->batch)) != 0)
        return;
    const char *part = t->name + strlen(b->batch);
    if (!strcmp(part, "indices") && n > 3 && !strcmp(kind, "index_high"))
        values[3] = b->rows + 30, b->changed = 1;
    else if (!strcmp(part, "indices") && n > 3 && !strcmp(kind, "index_negative"))
        values[3] = -2, b->changed = 1;
    else if (!strcmp(part, "offsets") && n > 2 && !strcmp(kind, "offsets_start"))
        values[0] = 1, b->changed = 1;
    else if (!strcmp(part, "offsets") && n > 2 && !strcmp(kind, "offsets_decrease"))
        values[2] = values[1] - 1 >= 0 ? values[1] - 1 : 0, values[1] += 1, b->changed = 1;
    else if (!strcmp(part, "offsets") && n > 2 && !strcmp(kind, "offsets_past_end"))
        values[n - 1] = 1000000, b->changed = 1;
}

int main(int argc, char **argv)
{
    ember_st_file_t *file;
    char err[256], batch[64];
    if (argc != 6) {
        fprintf(stderr, "usage: %s GOLDEN OUT KIND TRAINER STEP\n", argv[0]);
        return 2;
    }
    if (ember_st_open(argv[1], &file, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    snprintf(batch, sizeof(batch), "t%s.s%s.", argv[4], argv[5]);
    breaker_t b = {.kind = argv[3],
                   .batch = batch,
                   .rows = meta_int(file, "rows"),
                   .dim = meta_int(file, "dim"),
                   .classes = meta_int(file, "classes"),
                   .trainers = meta_int(file, "trainers"),
                   .steps = meta_int(file, "steps")};
    size_t count = ember_st_count(file);
    ember_st_tensor_t *tensors = calloc(count, sizeof(*tensors));
    void **copies = calloc(count, sizeof(*copies));
    ember_st_meta_t meta[NKEYS];
    size_t nmeta = copy_metadata(file, &b, meta), kept = 0;

    for (size_t i = 0; i < count; i++) {
        const ember_st_tensor_t *t = ember_st_tensor_at(file, i);
        int expected = strncmp(t->name, "expected.", 9) == 0;
        if (expected && !strcmp(b.kind, "no_expected")) {
            b.changed = 1;
            continue; /* dropped */
        }
        tensors[kept] = *t;
        copies[kept] = malloc(t->nbytes + 8);
        memcpy(copies[kept], t->data, t->nbytes);
        tensors[kept].data = copies[kept];
        if (!strcmp(t->name, "expected.fc.bias") && !strcmp(b.kind, "expected_off"))
            ((float *)copies[kept])[0] += 0.01f, b.changed = 1;
        break_batch(&b, &tensors[kept], copies[kept]);
        if (break_tensor(&b, &tensors[kept]) == 0)
            kept++;
        else
            free(copies[kept]);
    }
    int rc = 0;
    if (!b.changed) {
        fprintf(stderr, "make_bad_replay: nothing to break for %s\n", b.kind);
        rc = 2;
    } else if (ember_st_write(argv[2], tensors, kept, meta, nmeta) != 0) {
        fprintf(stderr, "make_bad_replay: cannot write %s\n", argv[2]);
        rc = 2;
    }
    /* All freed, so LeakSanitizer (scripts/sanitize.sh) finds nothing. */
    for (size_t i = 0; i < kept; i++)
        free(copies[i]);
    free(copies);
    free(tensors);
    ember_st_close(file); /* the names and metadata were borrowed from it */
    return rc;
}
