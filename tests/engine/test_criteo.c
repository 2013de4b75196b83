/*
 * tests/engine/test_criteo: the Criteo TSV reader (engine/io/criteo) and the
 * metrics a click model is judged by (engine/ops/metrics).
 *
 *   parse_line     a full line, empty fields (dense 0, id 0), log(max(x,0)+1)
 *                  for negative, zero and large values, hex ids modulo
 *                  their table's rows in either case, CRLF
 *   parse_refused  too few and too many fields, a bad label, bad hex, 17
 *                  hex digits, a non-integer and an int64 overflow: each
 *                  refused naming the field and the value
 *   file           a file streamed line by line, a last line without a
 *                  newline taken, a cut-short last line refused as
 *                  "PATH:3: ...", an over-long line, a NUL byte and a missing
 *                  file refused
 *   auc            against the pairwise count (ties half) on random scores
 *                  with many ties, a perfect and a reversed ranking, and the
 *                  undefined cases (one class only, a bad label, NaN)
 *   log_loss       against the formula evaluated term by term, and stable
 *                  for logits of +-100
 *   generated      ember-criteo-gen (argv: its path) writes 20000 lines the
 *                  reader takes whole, the same for the same seed, with both
 *                  labels, and a hidden score whose AUC is well above chance
 *                  (the signal a model can learn); a bad flag is refused
 */
#include "engine/io/criteo.h"
#include "engine/ops/metrics.h"

#include <ember/log.h>

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int64_t rows[EMBER_CRITEO_SPARSE];

static void rows_init(void)
{
    for (size_t c = 0; c < EMBER_CRITEO_SPARSE; c++)
        rows[c] = 1000 + (int64_t)c;
}

/* A line of label @label, dense @dense, sparse @sparse (each field's text). */
static void make_line(char *line, size_t length, const char *label, const char *dense,
                      const char *sparse)
{
    int used = snprintf(line, length, "%s", label);
    for (int f = 0; f < EMBER_CRITEO_DENSE; f++)
        used += snprintf(line + used, length - (size_t)used, "\t%s", dense);
    for (int f = 0; f < EMBER_CRITEO_SPARSE; f++)
        used += snprintf(line + used, length - (size_t)used, "\t%s", sparse);
}

static int case_parse_line(void)
{
    char line[1024], err[256];
    ember_criteo_example_t ex;
    rows_init();
    const char *good = "1\t5\t-3\t0\t\t1000000\t7\t\t\t\t\t\t\t2"
                       "\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8"
                       "\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef"
                       "\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c"
                       "\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16\r";
    CHECK(ember_criteo_parse_line(good, strlen(good), rows, &ex, err, sizeof(err)) == EMBER_OK,
          "a Kaggle line: %s", err);
    CHECK(ex.label == 1.0f, "label %g", (double)ex.label);
    CHECK(ex.dense[0] == (float)log(6.0) && ex.dense[1] == 0.0f && ex.dense[2] == 0.0f &&
                  ex.dense[3] == 0.0f && ex.dense[4] == (float)log(1000001.0),
          "dense %g %g %g %g %g", (double)ex.dense[0], (double)ex.dense[1], (double)ex.dense[2],
          (double)ex.dense[3], (double)ex.dense[4]);
    CHECK(ex.sparse[0] == (int64_t)(0x68fd1e64ull % 1000), "C1 %lld", (long long)ex.sparse[0]);
    CHECK(ex.sparse[21] == 0, "empty C22 %lld", (long long)ex.sparse[21]);
    CHECK(ex.sparse[25] == (int64_t)(0x9727dd16ull % 1025), "C26 %lld (CR dropped)",
          (long long)ex.sparse[25]);
    make_line(line, sizeof(line), "0", "", "FFFFFFFFFFFFFFFF");
    CHECK(ember_criteo_parse_line(line, strlen(line), rows, &ex, err, sizeof(err)) == EMBER_OK,
          "%s", err);
    for (int c = 0; c < EMBER_CRITEO_SPARSE; c++)
        CHECK(ex.sparse[c] == (int64_t)(UINT64_MAX % (uint64_t)rows[c]), "C%d %lld", c + 1,
              (long long)ex.sparse[c]);
    CHECK(ex.label == 0.0f && ex.dense[12] == 0.0f, "all-empty dense");
    return 0;
}

/* @line refused with ERR_FORMAT, the error holding @want. */
static int refused(const char *line, const char *want)
{
    char err[256] = "";
    ember_criteo_example_t ex;
    ember_status_t status =
            ember_criteo_parse_line(line, strlen(line), rows, &ex, err, sizeof(err));
    CHECK(status == EMBER_ERR_FORMAT && strstr(err, want), "'%.30s...': status %d, '%s' lacks '%s'",
          line, status, err, want);
    return 0;
}

static int case_parse_refused(void)
{
    char line[2048];
    rows_init();
    make_line(line, sizeof(line), "1", "3", "ab");
    line[strlen(line) - 3] = '\0'; /* the last field and its tab gone */
    if (refused(line, "39 tab-separated fields, not 40"))
        return 1;
    make_line(line, sizeof(line), "1", "3", "ab");
    strcat(line, "\tcd");
    if (refused(line, "more than 40"))
        return 1;
    make_line(line, sizeof(line), "2", "3", "ab");
    if (refused(line, "field label is '2', not 0 or 1"))
        return 1;
    make_line(line, sizeof(line), "1", "3", "xyz");
    if (refused(line, "field C1 is 'xyz', not 1-16 hexadecimal digits"))
        return 1;
    make_line(line, sizeof(line), "1", "3", "12345678901234567");
    if (refused(line, "field C1 is '12345678901234567'"))
        return 1;
    make_line(line, sizeof(line), "1", "4.5", "ab");
    if (refused(line, "field I1 is '4.5', not a 64-bit integer"))
        return 1;
    make_line(line, sizeof(line), "1", "9223372036854775808", "ab");
    if (refused(line, "field I1 is '9223372036854775808'"))
        return 1;
    make_line(line, sizeof(line), "1", "-", "ab");
    return refused(line, "field I1 is '-'");
}

static int write_file(const char *path, const char *text)
{
    FILE *file = fopen(path, "w");
    CHECK(file && fputs(text, file) >= 0 && fclose(file) == 0, "cannot write %s", path);
    return 0;
}

/* Every example of @path, until the end or an error (its status). */
static ember_status_t read_all(const char *path, size_t *count_p, char *err, size_t err_length)
{
    ember_criteo_reader_t *reader;
    ember_criteo_example_t ex;
    int got = 1;
    *count_p = 0;
    EMBER_CHECK(ember_criteo_open(path, rows, &reader, err, err_length));
    ember_status_t status = EMBER_OK;
    while (status == EMBER_OK && got) {
        status = ember_criteo_next(reader, &ex, &got, err, err_length);
        *count_p += status == EMBER_OK && got;
    }
    ember_criteo_close(reader);
    return status;
}

static int case_file(void)
{
    char dir[] = "/tmp/ember-criteo-XXXXXX", path[96], line[1024], err[512];
    char text[4 * 1024 + 64 * 1024];
    size_t count;
    rows_init();
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof(path), "%s/day_0", dir);
    make_line(line, sizeof(line), "1", "3", "ab");
    snprintf(text, sizeof(text), "%s\n%s\r\n%s", line, line, line); /* no newline at the end */
    if (write_file(path, text))
        return 1;
    CHECK(read_all(path, &count, err, sizeof(err)) == EMBER_OK && count == 3, "3 lines: %zu, %s",
          count, err);
    snprintf(text, sizeof(text), "%s\n%s\n%.*s", line, line, (int)(strlen(line) - 5), line);
    if (write_file(path, text))
        return 1;
    CHECK(read_all(path, &count, err, sizeof(err)) == EMBER_ERR_FORMAT && count == 2 &&
                  strstr(err, path) && strstr(err, ":3: ") && strstr(err, "fields, not 40"),
          "cut-short last line: %zu, '%s'", count, err);
    memset(text, '1', EMBER_CRITEO_LINE_MAX + 10);
    text[EMBER_CRITEO_LINE_MAX + 10] = '\n';
    text[EMBER_CRITEO_LINE_MAX + 11] = '\0';
    if (write_file(path, text))
        return 1;
    CHECK(read_all(path, &count, err, sizeof(err)) == EMBER_ERR_FORMAT && strstr(err, ":1: longer"),
          "over-long line: '%s'", err);
    make_line(line, sizeof(line), "1", "3", "ab");
    line[3] = '\0'; /* a NUL inside I1's field */
    FILE *file = fopen(path, "w");
    CHECK(file && fwrite(line, 1, strlen(line + 4) + 4, file) == strlen(line + 4) + 4 &&
                  fputc('\n', file) == '\n' && fclose(file) == 0,
          "cannot write %s", path);
    CHECK(read_all(path, &count, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, ":1: a NUL byte"),
          "a NUL byte: '%s'", err);
    unlink(path);
    CHECK(read_all(path, &count, err, sizeof(err)) == EMBER_ERR_IO && strstr(err, path),
          "missing file: '%s'", err);
    rmdir(dir);
    return 0;
}

/* The AUC by its definition: every (positive, negative) pair, ties half. */
static double auc_pairs(const float *scores, const float *labels, size_t n)
{
    double correct = 0, pairs = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (labels[i] == 1.0f && labels[j] == 0.0f) {
                pairs++;
                correct += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
            }
    return correct / pairs;
}

static int case_auc(void)
{
    enum {
        N = 3000
    };
    static float scores[N], labels[N];
    uint64_t rng = 11;
    double auc;
    for (size_t i = 0; i < N; i++) {
        labels[i] = test_uniform(&rng, 0, 1) < 0.3 ? 1.0f : 0.0f;
        /* a signal, and few distinct values: many ties */
        scores[i] = (float)floor(8 * test_uniform(&rng, 0, 1) + 3 * labels[i]) / 8.0f;
    }
    CHECK(ember_roc_auc(scores, labels, N, &auc) == EMBER_OK, "auc");
    double want = auc_pairs(scores, labels, N);
    CHECK(fabs(auc - want) <= 1e-12, "auc %.15f, pairs %.15f", auc, want);
    CHECK(auc > 0.6 && auc < 1.0, "auc %g: the signal", auc);
    const float sorted_scores[4] = {0.1f, 0.2f, 0.3f, 0.4f}, up[4] = {0, 0, 1, 1},
                down[4] = {1, 1, 0, 0}, same[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    CHECK(ember_roc_auc(sorted_scores, up, 4, &auc) == EMBER_OK && auc == 1.0, "perfect %g", auc);
    CHECK(ember_roc_auc(sorted_scores, down, 4, &auc) == EMBER_OK && auc == 0.0, "reversed %g",
          auc);
    CHECK(ember_roc_auc(same, up, 4, &auc) == EMBER_OK && auc == 0.5, "all tied %g", auc);
    const float ones[4] = {1, 1, 1, 1}, bad[4] = {0, 1, 2, 0}, nan_scores[4] = {0, NAN, 1, 2};
    CHECK(ember_roc_auc(sorted_scores, ones, 4, &auc) == EMBER_ERR_INVALID_PARAM, "one class");
    CHECK(ember_roc_auc(sorted_scores, bad, 4, &auc) == EMBER_ERR_INVALID_PARAM, "label 2");
    CHECK(ember_roc_auc(nan_scores, up, 4, &auc) == EMBER_ERR_INVALID_PARAM, "a NaN score");
    return 0;
}

static int case_log_loss(void)
{
    const float logits[5] = {-2.0f, 0.0f, 0.5f, 100.0f, -100.0f}, labels[5] = {0, 1, 1, 0, 0};
    double want = 0;
    for (int i = 0; i < 5; i++) {
        double p = 1.0 / (1.0 + exp(-(double)logits[i]));
        want += labels[i] == 1.0f ? -log(p) : (i == 3 ? 100.0 : -log1p(-p));
    }
    want /= 5;
    double got = ember_log_loss(logits, labels, 5);
    CHECK(fabs(got - want) <= 1e-12 * fabs(want) + 1e-15, "log loss %.15f, want %.15f", got, want);
    CHECK(ember_log_loss(logits, labels, 0) == 0.0, "no examples");
    return 0;
}

/* Run the generator with @args; its exit status. */
static int run_gen(const char *args)
{
    char command[1024];
    snprintf(command, sizeof(command), "'%s' %s", test_argv[0], args);
    int rc = system(command);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* @path's bytes into a malloc'd buffer (NUL-terminated), its size in *size_p. */
static char *slurp(const char *path, size_t *size_p)
{
    FILE *file = fopen(path, "r");
    char *text = NULL;
    if (file && fseek(file, 0, SEEK_END) == 0) {
        long size = ftell(file);
        rewind(file);
        text = size >= 0 ? malloc((size_t)size + 1) : NULL;
        if (text && fread(text, 1, (size_t)size, file) == (size_t)size) {
            text[size] = '\0';
            *size_p = (size_t)size;
        } else {
            free(text);
            text = NULL;
        }
    }
    if (file)
        fclose(file);
    return text;
}

/* The generated file's labels and the generator's scores: the AUC. */
static int generated_signal(const char *data, const char *logits_path, size_t n)
{
    float *labels = malloc(n * sizeof(float)), *scores = malloc(n * sizeof(float));
    ember_criteo_reader_t *reader;
    ember_criteo_example_t ex;
    char err[256];
    int got = 1;
    size_t count = 0, positives = 0;
    FILE *logits = fopen(logits_path, "r");
    CHECK(labels && scores && logits, "memory or %s", logits_path);
    CHECK(ember_criteo_open(data, rows, &reader, err, sizeof(err)) == EMBER_OK, "%s", err);
    while (got) {
        CHECK(ember_criteo_next(reader, &ex, &got, err, sizeof(err)) == EMBER_OK, "%s", err);
        if (!got)
            break;
        CHECK(count < n && fscanf(logits, "%f", &scores[count]) == 1, "score %zu", count);
        labels[count] = ex.label;
        positives += ex.label == 1.0f;
        count++;
    }
    ember_criteo_close(reader);
    fclose(logits);
    CHECK(count == n, "%zu examples read, %zu written", count, n);
    CHECK(positives > n / 10 && positives < n * 6 / 10, "%zu positives of %zu", positives, n);
    double auc;
    CHECK(ember_roc_auc(scores, labels, n, &auc) == EMBER_OK && auc > 0.8,
          "the hidden score's AUC %g", auc);
    fprintf(stderr, "the hidden score's AUC: %.4f\n", auc);
    free(labels);
    free(scores);
    return 0;
}

static int case_generated(void)
{
    char dir[] = "/tmp/ember-criteo-gen-XXXXXX", a[96], b[96], logits[96], args[512];
    size_t size_a, size_b;
    rows_init();
    CHECK(test_argc >= 1, "usage: test_criteo generated PATH-OF-ember-criteo-gen");
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(a, sizeof(a), "%s/a.tsv", dir);
    snprintf(b, sizeof(b), "%s/b.tsv", dir);
    snprintf(logits, sizeof(logits), "%s/a.logits", dir);
    snprintf(args, sizeof(args), "--examples 20000 --seed 7 --out %s --logits %s", a, logits);
    CHECK(run_gen(args) == 0, "ember-criteo-gen %s", args);
    snprintf(args, sizeof(args), "--examples 20000 --seed 7 --out %s", b);
    CHECK(run_gen(args) == 0, "ember-criteo-gen %s", args);
    char *text_a = slurp(a, &size_a), *text_b = slurp(b, &size_b);
    CHECK(text_a && text_b && size_a == size_b && memcmp(text_a, text_b, size_a) == 0,
          "the same seed wrote different files");
    free(text_a);
    free(text_b);
    if (generated_signal(a, logits, 20000))
        return 1;
    snprintf(args, sizeof(args), "--examples 0 --out %s 2>/dev/null", b);
    CHECK(run_gen(args) == 2, "--examples 0 taken");
    snprintf(args, sizeof(args), "--examples 10 --bogus 1 --out %s 2>/dev/null", b);
    CHECK(run_gen(args) == 2, "--bogus taken");
    unlink(a);
    unlink(b);
    unlink(logits);
    rmdir(dir);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"parse_line", case_parse_line},
            {"parse_refused", case_parse_refused},
            {"file", case_file},
            {"auc", case_auc},
            {"log_loss", case_log_loss},
            {"generated", case_generated},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
