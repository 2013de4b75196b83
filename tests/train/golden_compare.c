/*
 * golden_compare GOLDEN SAVED [TOL]: compare what `ember-train --replay
 * GOLDEN --save SAVED` wrote with the PyTorch run stored in GOLDEN: the loss
 * of every trainer at every step (SAVED's "losses" metadata; SAVED must hold
 * no "loss" tensor) and the final parameters, within TOL
 * (default 1e-4) absolute.  Prints the largest difference of each; exit 0
 * when all are within TOL.
 *
 * golden_compare --fp16 --fp16-ref REF GOLDEN SAVED [TOL]: the run was made
 * with `--table-dtype fp16`.  Its oracle is the single-process replay with
 * the table stored as fp16 (tests/common/replay_local.c): the saved run must
 * match it within TOL, every saved table value must be an fp16 value, and the
 * oracle must match REF, PyTorch's own run of GOLDEN with a float16 table
 * (tests/train/fp16_ref.py), within FP16_REF_TOL: the oracle runs on ember's
 * own conversions and optimizer, and this is what ties them to PyTorch's.
 * --fp16-replies (alone or with --fp16): the run used `--reply-dtype fp16`
 * with one PS; the oracle rounds each pooled reply as that PS does, REF is
 * PyTorch's run with its replies rounded (fp16_ref.py's "replies" or "both").
 */
#include "engine/io/safetensors.h"
#include "engine/ops/half.h"
#include "models/tutorial/replay_file.h"
#include "tests/common/replay_local.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The oracle against PyTorch's fp16 run: both widen, compute in fp32 and
 * round to the nearest fp16 at the same points, and here they agree within
 * 7e-6 on every loss and value (the table bit for bit).  A rounding of
 * another kind parts them by far more: truncation of the replies moves the
 * losses by 1.4e-4 to 6.6e-4 over these runs, truncation of the rows or of
 * their updates the table by an fp16 ulp (2e-3) and up. */
#define FP16_REF_TOL 5e-5

/* Largest |a - b| over n values, NaN counted as infinite. */
static double max_diff(const float *a, const float *b, size_t n, size_t *at_p)
{
    double worst = 0;
    *at_p = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) { /* also catches NaN */
            worst = isnan(d) ? INFINITY : d;
            *at_p = i;
        }
    }
    return worst;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* "STEPS,TRAINERS" (losses_shape) at full width, each within what a replay
 * file may hold (models/tutorial/replay_file.h): decimal digits, nothing else. */
static int parse_losses_shape(const char *text, uint64_t *steps_p, uint64_t *trainers_p)
{
    char *end;
    errno = 0;
    if (!is_digit(text[0]))
        return 0;
    unsigned long long steps = strtoull(text, &end, 10);
    if (errno || *end != ',' || !is_digit(end[1]))
        return 0;
    unsigned long long trainers = strtoull(end + 1, &end, 10);
    if (errno || *end || steps < 1 || steps > EMBER_REPLAY_STEPS_MAX || trainers < 1 ||
        trainers > EMBER_REPLAY_TRAINERS_MAX)
        return 0;
    *steps_p = steps;
    *trainers_p = trainers;
    return 1;
}

/* The saved run's "loss": the losses ember-train keeps in the file's
 * metadata ("losses", comma-separated, [steps][trainers] as "losses_shape"
 * says), so that the tensors are exactly the PyTorch module's.  Anything
 * else is a tensor. */
static int read_saved(ember_st_file_t *saved, const char *name, float **values_p, size_t *n_p)
{
    if (strcmp(name, "loss") != 0)
        return ember_st_read_copy(saved, name, EMBER_DTYPE_F32, (void **)values_p, n_p) == EMBER_OK;
    const char *text = ember_st_metadata(saved, "losses");
    const char *shape = ember_st_metadata(saved, "losses_shape");
    uint64_t steps, trainers;
    if (!text || !shape || !parse_losses_shape(shape, &steps, &trainers) ||
        ember_st_find(saved, "loss"))
        return 0; /* a "loss" tensor would break a strict load_state_dict */
    /* Each value takes two characters at least ("0,"): a count beyond the
     * text is refused before it sizes anything. */
    size_t n = (size_t)(steps * trainers);
    if (n > strlen(text) / 2 + 1)
        return 0;
    float *values = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; values && i < n; i++) {
        char *end;
        values[i] = strtof(text, &end);
        if (end == text || *end != (i + 1 < n ? ',' : '\0')) {
            free(values);
            return 0;
        }
        text = end + (i + 1 < n);
    }
    *values_p = values;
    *n_p = n;
    return values != NULL;
}

/* Compare @n floats @want (named @what) with the saved values @got. */
static int compare_values(const char *what, const float *want, size_t n, ember_st_file_t *saved,
                          const char *got, double tol)
{
    float *b = NULL;
    size_t nb = 0, at;
    int ok = 0;

    if (!read_saved(saved, got, &b, &nb)) {
        printf("%-12s missing or malformed\n", got);
    } else if (n != nb) {
        printf("%-12s has %zu elements, %s %zu\n", got, nb, what, n);
    } else {
        double worst = max_diff(want, b, n, &at);
        ok = worst <= tol;
        printf("%-12s max |diff| %.3g against %s at element %zu (%zu elements) %s\n", got, worst,
               what, at, n, ok ? "ok" : "FAIL");
    }
    free(b);
    return ok;
}

/* The saved tensor @got has the shape of @want (the same count in another
 * shape is another tensor); the saved losses are checked by their count. */
static int same_shape(const ember_st_tensor_t *want, ember_st_file_t *saved, const char *got)
{
    const ember_st_tensor_t *t = ember_st_find(saved, got);
    if (!t)
        return strcmp(got, "loss") == 0;
    int same = t->ndim == want->ndim;
    for (size_t d = 0; same && d < t->ndim; d++)
        same = t->shape[d] == want->shape[d];
    if (!same)
        printf("%-12s has another shape than %s\n", got, want->name);
    return same;
}

static int compare(ember_st_file_t *golden, const char *expected, ember_st_file_t *saved,
                   const char *got, double tol)
{
    float *a = NULL;
    size_t na = 0;
    int ok = 0;

    if (ember_st_read_copy(golden, expected, EMBER_DTYPE_F32, (void **)&a, &na))
        printf("%-12s missing (%s)\n", got, expected);
    else if (same_shape(ember_st_find(golden, expected), saved, got))
        ok = compare_values("PyTorch", a, na, saved, got, tol);
    free(a);
    return ok;
}

/* The --fp16 / --fp16-replies checks; @golden and @saved stay open. */
static int compare_fp16(ember_st_file_t *golden, ember_st_file_t *saved, int half_rows, int replies,
                        const char *ref_path, double tol)
{
    ember_replay_result_t oracle;
    char msg[256];
    const ember_replay_opts_t opts = {.emb_dtype = half_rows ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32,
                                      .half_replies = replies};
    if (ember_replay_local(golden, &opts, &oracle, msg, sizeof(msg)) != EMBER_OK) {
        fprintf(stderr, "golden_compare: the fp16 replay failed: %s\n", msg);
        return 0;
    }
    size_t rows = oracle.rows * oracle.dim, dense = oracle.classes * oracle.dim;
    int ok = compare_values("the fp16 oracle", oracle.losses, oracle.steps * oracle.trainers, saved,
                            "loss", tol);
    ok &= compare_values("the fp16 oracle", oracle.emb, rows, saved, "emb.weight", tol);
    ok &= compare_values("the fp16 oracle", oracle.fc_weight, dense, saved, "fc.weight", tol);
    ok &= compare_values("the fp16 oracle", oracle.fc_bias, oracle.classes, saved, "fc.bias", tol);

    /* What the PS stored: fp16 values only. */
    float *emb = NULL;
    size_t n = 0, off = 0;
    if (half_rows &&
        ember_st_read_copy(saved, "emb.weight", EMBER_DTYPE_F32, (void **)&emb, &n) == 0) {
        for (size_t i = 0; i < n && !off; i++)
            if (ember_half_to_float(ember_float_to_half(emb[i])) != emb[i])
                off = i + 1;
        printf("emb.weight   %s\n", off ? "holds a value fp16 cannot: FAIL" : "fp16 values ok");
        ok &= !off;
    }
    free(emb);

    /* The oracle against PyTorch's own fp16 run. */
    ember_st_file_t *ref;
    char err[256];
    if (ember_st_open(ref_path, &ref, err, sizeof(err)) != EMBER_OK) {
        printf("the PyTorch fp16 run: %s: FAIL\n", err);
        ember_replay_result_cleanup(&oracle);
        return 0;
    }
    const char *names[4] = {"loss", "emb.weight", "fc.weight", "fc.bias"};
    const float *mine[4] = {oracle.losses, oracle.emb, oracle.fc_weight, oracle.fc_bias};
    const size_t counts[4] = {oracle.steps * oracle.trainers, rows, dense, oracle.classes};
    for (int k = 0; k < 4; k++) {
        char expected[64];
        float *want = NULL;
        size_t nw = 0, at;
        snprintf(expected, sizeof(expected), "expected.%s", names[k]);
        if (ember_st_read_copy(ref, expected, EMBER_DTYPE_F32, (void **)&want, &nw) ||
            nw != counts[k]) {
            printf("%-12s %s: missing, or not %zu values: FAIL\n", names[k], ref_path, counts[k]);
            free(want);
            ok = 0;
            continue;
        }
        double diff = max_diff(mine[k], want, nw, &at);
        printf("%-12s fp16 oracle vs PyTorch's fp16 run: max |diff| %.3g at element %zu %s\n",
               names[k], diff, at, diff <= FP16_REF_TOL ? "ok" : "FAIL");
        ok &= diff <= FP16_REF_TOL;
        free(want);
    }
    ember_st_close(ref);
    ember_replay_result_cleanup(&oracle);
    return ok;
}

int main(int argc, char **argv)
{
    ember_st_file_t *golden, *saved;
    char err[256];
    int rows = 0, replies = 0;
    const char *ref = NULL;
    for (; argc > 1; argc--, argv++) {
        if (!strcmp(argv[1], "--fp16") || !strcmp(argv[1], "--fp16-replies")) {
            *(!strcmp(argv[1], "--fp16") ? &rows : &replies) = 1;
        } else if (!strcmp(argv[1], "--fp16-ref") && argc > 2) {
            ref = argv[2];
            argc--;
            argv++;
        } else {
            break;
        }
    }
    double tol = 1e-4;
    char *end = NULL;

    if (argc > 3)
        tol = strtod(argv[3], &end);
    if (argc < 3 || (end && (end == argv[3] || *end || !(tol >= 0) || !isfinite(tol))) ||
        (rows || replies) != (ref != NULL)) {
        fprintf(stderr,
                "usage: %s [--fp16] [--fp16-replies] [--fp16-ref REF] GOLDEN SAVED [TOL >= 0]\n"
                "  (--fp16-ref, PyTorch's fp16 run of GOLDEN, goes with --fp16 or "
                "--fp16-replies)\n",
                argv[0]);
        return 2;
    }
    /* The golden file checked as ember-train checks it: its expected.*
     * tensors then have the shapes of the run they are compared with. */
    ember_replay_info_t info;
    if (ember_replay_open(argv[1], &golden, &info, err, sizeof(err)) ||
        ember_st_open(argv[2], &saved, err, sizeof(err))) {
        fprintf(stderr, "golden_compare: %s\n", err);
        return 2;
    }
    int ok;
    if (rows || replies) {
        ok = compare_fp16(golden, saved, rows, replies, ref, tol);
    } else {
        ok = compare(golden, "expected.loss", saved, "loss", tol);
        ok &= compare(golden, "expected.emb.weight", saved, "emb.weight", tol);
        ok &= compare(golden, "expected.fc.weight", saved, "fc.weight", tol);
        ok &= compare(golden, "expected.fc.bias", saved, "fc.bias", tol);
    }
    ember_st_close(golden);
    ember_st_close(saved);
    return ok ? 0 : 1;
}
