/* The single-process reference against PyTorch's golden runs. */
#include "engine/io/safetensors.h"
#include "engine/ops/half.h"
#include "models/tutorial/replay_file.h"
#include "tests/common/replay_local.h"

#include "test_util.h"

#include <stdlib.h>
#include <unistd.h>

#define TOL 1e-4

/* Largest |a - b| over n floats; also reports where. */
static double max_abs_diff(const float *a, const float *b, size_t n, size_t *where_p)
{
    double worst = 0.0;
    *where_p = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) { /* NaN counts as worst */
            worst = isnan(d) ? INFINITY : d;
            *where_p = i;
        }
    }
    return worst;
}

static int check_tensor(const ember_st_file_t *f, const char *name, const float *got, size_t n)
{
    float *want;
    size_t numel, where;

    CHECK(ember_st_read_copy(f, name, EMBER_DTYPE_F32, (void **)&want, &numel) == EMBER_OK,
          "cannot read %s", name);
    CHECK(numel == n, "%s has %zu elements, replay produced %zu", name, numel, n);
    double err = max_abs_diff(got, want, n, &where);
    fprintf(stderr, "%s: max abs error %.3g (element %zu)\n", name, err, where);
    int ok = err <= TOL;
    if (!ok)
        fprintf(stderr, "FAIL %s: element %zu is %.7g, PyTorch has %.7g\n", name, where, got[where],
                want[where]);
    free(want);
    return ok ? 0 : 1;
}

static int replay_file(const char *stem)
{
    char path[4096], msg[512];
    ember_st_file_t *f;
    ember_replay_result_t res = {0};
    int rc = 0;

    CHECK(test_argc >= 1, "golden directory not given (argv[2])");
    snprintf(path, sizeof(path), "%s/%s.safetensors", test_argv[0], stem);
    CHECK(ember_st_open(path, &f, msg, sizeof(msg)) == EMBER_OK, "cannot open %s: %s", path, msg);
    ember_status_t status = ember_replay_local(f, NULL, &res, msg, sizeof(msg));
    if (status != EMBER_OK) {
        fprintf(stderr, "FAIL replay of %s: %s (%s)\n", path, ember_status_string(status), msg);
        ember_st_close(f);
        return 1;
    }

    /* Losses step by step, so a divergence is reported where it starts. */
    float *want;
    size_t numel;
    if (ember_st_read_copy(f, "expected.loss", EMBER_DTYPE_F32, (void **)&want, &numel) !=
                EMBER_OK ||
        numel != res.steps * res.trainers) {
        fprintf(stderr, "FAIL expected.loss missing or mis-shaped\n");
        rc = 1;
    } else {
        double worst = 0.0;
        for (size_t s = 0; s < res.steps && rc == 0; s++) {
            for (size_t t = 0; t < res.trainers; t++) {
                size_t i = s * res.trainers + t;
                double d = fabs((double)res.losses[i] - (double)want[i]);
                if (!(d <= TOL)) {
                    fprintf(stderr,
                            "FAIL loss of trainer %zu at step %zu is "
                            "%.7g, PyTorch has %.7g\n",
                            t, s, res.losses[i], want[i]);
                    rc = 1;
                    break;
                }
                worst = d > worst ? d : worst;
            }
        }
        fprintf(stderr,
                "losses: %zu steps x %zu trainers, max abs error %.3g "
                "(first %.5f, last %.5f)\n",
                res.steps, res.trainers, worst, want[0], want[res.steps * res.trainers - 1]);
        free(want);
    }
    rc |= check_tensor(f, "expected.emb.weight", res.emb, res.rows * res.dim);
    rc |= check_tensor(f, "expected.fc.weight", res.fc_weight, res.classes * res.dim);
    rc |= check_tensor(f, "expected.fc.bias", res.fc_bias, res.classes);

    /* The run must actually have trained: parameters moved. */
    const ember_st_tensor_t *init = ember_st_find(f, "emb.weight");
    float *w0 = malloc(init->nbytes);
    memcpy(w0, init->data, init->nbytes);
    size_t where;
    double moved = max_abs_diff(w0, res.emb, res.rows * res.dim, &where);
    free(w0);
    if (!(moved > 1e-3)) {
        fprintf(stderr, "FAIL the embedding did not move (%.3g)\n", moved);
        rc = 1;
    }
    ember_replay_result_cleanup(&res);
    ember_st_close(f);
    return rc;
}

static int case_seed_sum_2t(void)
{
    return replay_file("seed_sum_2t");
}
static int case_mean_3t_empty(void)
{
    return replay_file("mean_3t_empty");
}
static int case_sum_weighted_2t(void)
{
    return replay_file("sum_weighted_2t");
}

/* A tiny run built here, then broken in one way at a time. */
static int write_tiny(const char *path, int64_t bad_index, const char *optimizer)
{
    float emb[4 * 2] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    float fcw[2 * 2] = {0.1f, -0.1f, 0.2f, 0.3f}, fcb[2] = {0.0f, 0.1f};
    int64_t idx[3] = {0, 3, bad_index}, off[2] = {0, 1}, tgt[2] = {1, 0};
    ember_st_tensor_t t[] = {
            {.name = "emb.weight",
             .dtype = EMBER_DTYPE_F32,
             .ndim = 2,
             .shape = {4, 2},
             .data = emb},
            {.name = "fc.weight",
             .dtype = EMBER_DTYPE_F32,
             .ndim = 2,
             .shape = {2, 2},
             .data = fcw},
            {.name = "fc.bias", .dtype = EMBER_DTYPE_F32, .ndim = 1, .shape = {2}, .data = fcb},
            {.name = "t0.s0.indices",
             .dtype = EMBER_DTYPE_I64,
             .ndim = 1,
             .shape = {3},
             .data = idx},
            {.name = "t0.s0.offsets",
             .dtype = EMBER_DTYPE_I64,
             .ndim = 1,
             .shape = {2},
             .data = off},
            {.name = "t0.s0.targets",
             .dtype = EMBER_DTYPE_I64,
             .ndim = 1,
             .shape = {2},
             .data = tgt},
    };
    ember_st_meta_t m[] = {{"rows", "4"},
                           {"dim", "2"},
                           {"classes", "2"},
                           {"trainers", "1"},
                           {"steps", "1"},
                           {"lr", "0.1"},
                           {"mode", "sum"},
                           {"sparse_reduce", "sum"},
                           {"per_sample_weights", "0"},
                           {"optimizer", optimizer},
                           {"loss", "cross_entropy_mean"}};
    return ember_st_write(path, t, 6, m, sizeof(m) / sizeof(m[0])) == EMBER_OK;
}

static int run_tiny(int64_t bad_index, const char *optimizer, ember_status_t expect,
                    const char *words)
{
    char path[] = "/tmp/ember_replay_tiny_XXXXXX", msg[512];
    ember_st_file_t *f;
    ember_replay_result_t res = {0};
    int fd = mkstemp(path);

    CHECK(fd >= 0, "mkstemp");
    close(fd);
    CHECK(write_tiny(path, bad_index, optimizer), "cannot write %s", path);
    CHECK(ember_st_open(path, &f, msg, sizeof(msg)) == EMBER_OK, "%s", msg);
    unlink(path);
    ember_status_t status = ember_replay_local(f, NULL, &res, msg, sizeof(msg));
    if (status == EMBER_OK)
        CHECK(res.losses[0] > 0.0f && isfinite(res.losses[0]), "loss %g", res.losses[0]);
    ember_replay_result_cleanup(&res);
    ember_st_close(f);
    CHECK(status == expect, "status %s, expected %s (%s)", ember_status_string(status),
          ember_status_string(expect), msg);
    CHECK(!words || strstr(msg, words), "message '%s' lacks '%s'", msg, words);
    return 0;
}

static int case_tiny_ok(void)
{
    return run_tiny(2, "sgd", EMBER_OK, NULL);
}

static int case_bad_index(void)
{
    return run_tiny(9, "sgd", EMBER_ERR_FORMAT, "trainer 0 step 0: index 9 at position 2 (bag 1)");
}

/* A known optimizer the replay does not run (an unknown name is a bad
 * file: the refuses.* cases). */
static int case_bad_optimizer(void)
{
    return run_tiny(2, "adagrad", EMBER_ERR_UNSUPPORTED, "adagrad");
}

/* refuses GOLDEN MAKE_BAD_REPLAY KIND: the file make_bad_replay makes of
 * GOLDEN with KIND broken is refused before anything is sized from it,
 * naming what make_bad_replay says it broke (the key and the value, or the
 * tensor, its shape and the wanted one), in ember-train's words. */
static int case_refuses(void)
{
    char path[] = "/tmp/ember_replay_bad_XXXXXX", command[8192], want[512] = "";
    char msg[1024] = "";
    ember_replay_result_t res = {0};
    ember_st_file_t *f;

    CHECK(test_argc >= 3, "usage: refuses GOLDEN MAKE_BAD_REPLAY KIND");
    for (int i = 0; i < 3; i++)
        CHECK(!strchr(test_argv[i], '\''), "a quote in '%s'", test_argv[i]);
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    snprintf(command, sizeof(command), "'%s' '%s' '%s' '%s' 1 5", test_argv[1], test_argv[0], path,
             test_argv[2]);
    FILE *made = popen(command, "r");
    CHECK(made, "cannot run %s", command);
    if (!fgets(want, sizeof(want), made))
        want[0] = '\0';
    int rc = pclose(made);
    want[strcspn(want, "\n")] = '\0';
    if (rc != 0 || !want[0])
        unlink(path);
    CHECK(rc == 0 && want[0], "%s exited %d, saying '%s'", command, rc, want);

    /* What ember-train and its trainers read the file with. */
    ember_replay_info_t info;
    char named[1024], why[256];
    ember_status_t status = ember_replay_info(path, &info, msg, sizeof(msg));
    ember_status_t opened = ember_st_open(path, &f, why, sizeof(why));
    unlink(path);
    snprintf(named, sizeof(named), "%s: %s", path, want);
    CHECK(opened == EMBER_OK, "the bad file does not open: %s", why);
    if (status != EMBER_ERR_FORMAT || !strstr(msg, named))
        ember_st_close(f);
    CHECK(status == EMBER_ERR_FORMAT, "ember_replay_info: status %s, not ERR_FORMAT",
          ember_status_string(status));
    CHECK(strstr(msg, named), "ember_replay_info: message '%s' lacks '%s'", msg, named);
    fprintf(stderr, "ember_replay_info refused: %s\n", msg);

    status = ember_replay_local(f, NULL, &res, msg, sizeof(msg));
    ember_replay_result_cleanup(&res);
    ember_st_close(f);
    CHECK(status == EMBER_ERR_FORMAT, "status %s, not ERR_FORMAT (%s)", ember_status_string(status),
          msg);
    CHECK(strstr(msg, want), "message '%s' lacks '%s'", msg, want);
    fprintf(stderr, "refused: %s\n", msg);
    return 0;
}

/* The fp16 oracle (ember_replay_opts_t.emb_dtype): F32 is the plain replay bit
 * for bit; F16 keeps a table of fp16 values that differs from the fp32 run
 * (it really rounds) by no more than fp16's drift over a golden run, and is
 * a function of its input (two replays give the same bits). */
static int case_fp16_oracle(void)
{
    char path[4096], msg[512];
    ember_st_file_t *f;
    ember_replay_result_t plain = {0}, typed = {0}, half = {0}, again = {0};
    const ember_replay_opts_t f32 = {.emb_dtype = EMBER_DTYPE_F32},
                              f16 = {.emb_dtype = EMBER_DTYPE_F16},
                              bf16 = {.emb_dtype = EMBER_DTYPE_BF16};

    CHECK(test_argc >= 1, "golden directory not given (argv[2])");
    snprintf(path, sizeof(path), "%s/seed_sum_2t.safetensors", test_argv[0]);
    CHECK(ember_st_open(path, &f, msg, sizeof(msg)) == EMBER_OK, "cannot open %s: %s", path, msg);
    CHECK(ember_replay_local(f, NULL, &plain, msg, sizeof(msg)) == EMBER_OK &&
                  ember_replay_local(f, &f32, &typed, msg, sizeof(msg)) == EMBER_OK &&
                  ember_replay_local(f, &f16, &half, msg, sizeof(msg)) == EMBER_OK &&
                  ember_replay_local(f, &f16, &again, msg, sizeof(msg)) == EMBER_OK,
          "replay: %s", msg);
    size_t n = plain.rows * plain.dim, steps = plain.steps * plain.trainers;
    CHECK(memcmp(plain.emb, typed.emb, n * sizeof(float)) == 0 &&
                  memcmp(plain.losses, typed.losses, steps * sizeof(float)) == 0,
          "the F32 replay differs from the plain one");
    CHECK(memcmp(half.emb, again.emb, n * sizeof(float)) == 0 &&
                  memcmp(half.losses, again.losses, steps * sizeof(float)) == 0,
          "two fp16 replays differ");
    double drift = 0.0;
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(ember_half_to_float(ember_float_to_half(half.emb[i])) == half.emb[i],
              "element %zu (%g) is not an fp16 value", i, (double)half.emb[i]);
        differ += half.emb[i] != plain.emb[i];
        double d = fabs((double)half.emb[i] - (double)plain.emb[i]);
        drift = d > drift ? d : drift;
    }
    CHECK(differ > n / 2 && drift > 0.0 && drift < 0.05,
          "fp16 table: %zu of %zu values differ from fp32's, by up to %g", differ, n, drift);
    fprintf(stderr, "fp16 oracle: %zu of %zu table values differ from fp32's, by up to %.3g\n",
            differ, n, drift);
    CHECK(ember_replay_local(f, &bf16, &again, msg, sizeof(msg)) == EMBER_ERR_INVALID_PARAM,
          "a bf16 replay was accepted");
    ember_replay_result_cleanup(&plain);
    ember_replay_result_cleanup(&typed);
    ember_replay_result_cleanup(&half);
    ember_replay_result_cleanup(&again);
    ember_st_close(f);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"seed_sum_2t", case_seed_sum_2t},
            {"mean_3t_empty", case_mean_3t_empty},
            {"sum_weighted_2t", case_sum_weighted_2t},
            {"tiny_ok", case_tiny_ok},
            {"bad_index", case_bad_index},
            {"bad_optimizer", case_bad_optimizer},
            {"fp16_oracle", case_fp16_oracle},
            {"refuses", case_refuses},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
