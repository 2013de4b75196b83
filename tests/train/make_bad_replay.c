/*
 * make_bad_replay GOLDEN OUT KIND TRAINER STEP: copy a golden file, breaking
 * the batch of (TRAINER, STEP) in one way, so the tests can check that
 * ember-train names the table, trainer and step and applies nothing.
 * KIND: index_high, index_negative, offsets_start, offsets_decrease,
 * offsets_past_end, weights_length.  Two kinds leave the batches and change
 * what the run is checked against (TRAINER and STEP unused): expected_off
 * moves expected.fc.bias[0] by 0.01, no_expected drops every expected.*
 * tensor.
 */
#include "engine/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const meta_keys[] = {
    "rows", "dim", "classes", "trainers", "steps", "lr", "mode", "sparse_reduce",
    "seed", "per_sample_weights", "optimizer", "loss", "generator"};

int main(int argc, char **argv)
{
    ember_st_file_t *file;
    char err[256], target[64];
    if (argc != 6) {
        fprintf(stderr, "usage: %s GOLDEN OUT KIND TRAINER STEP\n", argv[0]);
        return 2;
    }
    const char *kind = argv[3];
    if (ember_st_open(argv[1], &file, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    size_t count = ember_st_count(file), nmeta = 0;
    ember_st_tensor_t *tensors = calloc(count, sizeof(*tensors));
    void **copies = calloc(count, sizeof(*copies));
    ember_st_meta_t meta[16];
    int64_t rows = atoll(ember_st_metadata(file, "rows"));
    int changed = 0;

    for (size_t k = 0; k < sizeof(meta_keys) / sizeof(meta_keys[0]); k++) {
        const char *value = ember_st_metadata(file, meta_keys[k]);
        if (value)
            meta[nmeta++] = (ember_st_meta_t){meta_keys[k], value};
    }
    for (size_t i = 0; i < count; i++) {
        const ember_st_tensor_t *t = ember_st_tensor_at(file, i);
        tensors[i] = *t;
        copies[i] = malloc(t->nbytes + 8);
        memcpy(copies[i], t->data, t->nbytes);
        tensors[i].data = copies[i];
    }
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        int expected = strncmp(tensors[i].name, "expected.", 9) == 0;
        if (expected && !strcmp(kind, "no_expected")) {
            changed = 1;
            free(copies[i]);
            continue; /* dropped */
        }
        if (!strcmp(tensors[i].name, "expected.fc.bias") && !strcmp(kind, "expected_off"))
            ((float *)copies[i])[0] += 0.01f, changed = 1;
        tensors[kept] = tensors[i];
        copies[kept++] = copies[i];
    }
    count = kept;
    for (size_t i = 0; i < count; i++) {
        int64_t *values = copies[i];
        size_t n = tensors[i].numel;
        snprintf(target, sizeof(target), "t%s.s%s.", argv[4], argv[5]);
        if (strncmp(tensors[i].name, target, strlen(target)) != 0)
            continue;
        const char *part = tensors[i].name + strlen(target);
        if (!strcmp(part, "indices") && n > 3 && !strcmp(kind, "index_high"))
            values[3] = rows + 30, changed = 1;
        else if (!strcmp(part, "indices") && n > 3 && !strcmp(kind, "index_negative"))
            values[3] = -2, changed = 1;
        else if (!strcmp(part, "offsets") && n > 2 && !strcmp(kind, "offsets_start"))
            values[0] = 1, changed = 1;
        else if (!strcmp(part, "offsets") && n > 2 && !strcmp(kind, "offsets_decrease"))
            values[2] = values[1] - 1 >= 0 ? values[1] - 1 : 0, values[1] += 1,
            changed = 1;
        else if (!strcmp(part, "offsets") && n > 2 && !strcmp(kind, "offsets_past_end"))
            values[n - 1] = 1000000, changed = 1;
        else if (!strcmp(part, "weights") && n > 1 && !strcmp(kind, "weights_length"))
            tensors[i].shape[0] = (int64_t)n - 1, changed = 1;
    }
    int rc = 0;
    if (!changed) {
        fprintf(stderr, "make_bad_replay: nothing to break for %s\n", kind);
        rc = 2;
    } else if (ember_st_write(argv[2], tensors, count, meta, nmeta) != 0) {
        fprintf(stderr, "make_bad_replay: cannot write %s\n", argv[2]);
        rc = 2;
    }
    /* All freed, so LeakSanitizer (scripts/sanitize.sh) finds nothing. */
    for (size_t i = 0; i < count; i++)
        free(copies[i]);
    free(copies);
    free(tensors);
    ember_st_close(file); /* the names and metadata were borrowed from it */
    return rc;
}
