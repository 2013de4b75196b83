/*
 * tests/engine/test_criteo_data: the DLRM job's example stream
 * (engine/io/criteo_data), on real files and its real reader thread.
 *
 * Two TSV files of 37 and 26 generated examples (C1 holds the example's
 * global index, so each batch says which examples it holds); every example
 * of every batch is checked field by field against the generator.
 *
 *   split_eval     trainers 1, 2, 3, batches of 1, 4, 5 and 7: trainer t
 *                  gets exactly the examples i % T == t in order across both
 *                  files, the last batch short (its features back to back
 *                  at f * n, as every batch's), then n == 0; the trainers
 *                  together cover each example once
 *   split_train    the same in training: floor(63 / (B*T)) full batches per
 *                  trainer, batch s holding examples (s*B + j)*T + t
 *   epochs         three epochs in a row, training and eval: each the same
 *                  batches as the first
 *   malformed      a bad field in the second file's line 10 (example 46):
 *                  its trainer gets the batches before it, then
 *                  "PATH:10: field C2 ..." from this and every later call;
 *                  the other trainer, which only counts that line, is not
 *                  stopped; a line of 39 fields stops both; a bad example
 *                  in the dropped tail is still an error; close returns
 *   close          close while the reader is mid-file (parsing one huge
 *                  batch, or running ahead) and while it waits on a full
 *                  ring: it returns, and nothing leaks (sanitizer build)
 *   tiny_ring      read_ahead 1 with batches of 1 across both files; a
 *                  batch larger than the data: training gives none per
 *                  epoch, eval one short batch per trainer
 *   refused        bad configs and sources refused at open naming the field
 *                  or file
 *   npy_equals_tsv (argv: python, criteo_npy_ref.py) the files converted to
 *                  TorchRec's npy layout as tsv_to_npys does: the same
 *                  batches (labels, rows, indices) as the TSV path, dense as
 *                  TorchRec wrote it (log(x - min + 2)); raw int dense
 *                  arrays give the TSV path's batches bit for bit; older
 *                  TorchRec's int32 ids (wrapped) and (N,) labels; a bad
 *                  label, a NaN and arrays of different rows refused
 *   hold           hold 2 with read_ahead 1: two batches taken stay whole
 *                  while the reader runs ahead, a third is refused until
 *                  the oldest is released, next releases the oldest
 *                  itself; every batch of the epoch as in split_train
 *   hold_end       hold 2, read_ahead 1, three epochs: the epoch's end
 *                  (n == 0) is taken while the last batch is held and holds
 *                  nothing: the next epoch's first batch is taken too, both
 *                  stay whole while the reader runs ahead, and two
 *                  releases free both
 *   bounded_memory a file far larger than the ring streams through two
 *                  epochs (every example checked, lines across the reader's
 *                  16 KiB reads) with the heap grown by the ring alone
 *                  (glibc's mallinfo2 over one arena, or the sanitizer's
 *                  count)
 */
#include "engine/io/criteo_data.h"

#include "test_heap.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILE_A 37
#define FILE_B 26
#define N_AB   (FILE_A + FILE_B)

static int64_t rows[EMBER_CRITEO_SPARSE];

static void rows_init(void)
{
    rows[0] = (int64_t)1 << 40; /* C1 is the example's index, taken whole */
    for (size_t f = 1; f < EMBER_CRITEO_SPARSE; f++)
        rows[f] = 1000 + 7 * (int64_t)f;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The generator: example i's label, raw dense counts and raw ids (0 for an
 * empty field, *empty_p set). */
static int gen_label(uint64_t i)
{
    return i % 3 == 0 || i % 7 == 1;
}

static int64_t gen_dense(uint64_t i, size_t f, int *empty_p)
{
    uint64_t h = mix(i * 13 + f);
    *empty_p = h % 8 == 0;
    if (*empty_p)
        return 0;
    if (h % 8 == 1)
        return -1 - (int64_t)(h >> 40) % 2; /* -1 or -2 */
    return (int64_t)((h >> 16) % (f == 4 ? 2000000 : 300));
}

static uint64_t gen_id(uint64_t i, size_t f, int *empty_p)
{
    uint64_t h = mix(i * 26 + f + 100000);
    *empty_p = f > 0 && h % 8 == 0;
    return f == 0 ? i : *empty_p ? 0 : h >> 32; /* half of them past 2^31 */
}

/* Example i's line; @bad 1: C2 is "zz", 2: its last field gone. */
static void gen_line(uint64_t i, int bad, char *line, size_t length)
{
    int used = snprintf(line, length, "%d", gen_label(i)), empty;
    for (size_t f = 0; f < EMBER_CRITEO_DENSE; f++) {
        int64_t x = gen_dense(i, f, &empty);
        used += empty ? snprintf(line + used, length - (size_t)used, "\t")
                      : snprintf(line + used, length - (size_t)used, "\t%lld", (long long)x);
    }
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE - (bad == 2); f++) {
        uint64_t id = gen_id(i, f, &empty);
        used += bad == 1 && f == 1 ? snprintf(line + used, length - (size_t)used, "\tzz")
                : empty            ? snprintf(line + used, length - (size_t)used, "\t")
                                   : snprintf(line + used, length - (size_t)used, "\t%08llx",
                                              (unsigned long long)id);
    }
}

/* Examples [first, first + count) into @path, example @bad_index's line
 * broken the @bad way. */
static int write_tsv(const char *path, uint64_t first, uint64_t count, uint64_t bad_index, int bad)
{
    char line[1024];
    FILE *file = fopen(path, "w");
    CHECK(file, "cannot write %s", path);
    for (uint64_t i = first; i < first + count; i++) {
        gen_line(i, i == bad_index ? bad : 0, line, sizeof(line));
        CHECK(fprintf(file, "%s\n", line) > 0, "write %s", path);
    }
    CHECK(fclose(file) == 0, "close %s", path);
    return 0;
}

typedef struct {
    char dir[64], a[96], b[96], spec[256];
} files_t;

static int make_files(files_t *f, uint64_t bad_index, int bad)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/ember-criteo-data-XXXXXX");
    CHECK(mkdtemp(f->dir), "mkdtemp");
    snprintf(f->a, sizeof(f->a), "%s/day_0", f->dir);
    snprintf(f->b, sizeof(f->b), "%s/day_1", f->dir);
    snprintf(f->spec, sizeof(f->spec), "criteo:%s,%s", f->a, f->b);
    return write_tsv(f->a, 0, FILE_A, bad_index, bad) ||
           write_tsv(f->b, FILE_A, FILE_B, bad_index, bad);
}

static void remove_files(files_t *f)
{
    unlink(f->a);
    unlink(f->b);
    rmdir(f->dir);
}

/* What the batches are checked against: the TSV path's transform (exact),
 * or TorchRec's dense (within float32 log's error) and ids. */
typedef enum {
    EXPECT_TSV,       /* log(max(x, 0) + 1), id mod rows */
    EXPECT_TORCHREC,  /* log(x - file's min + 2) */
    EXPECT_OLD_TORCH, /* log(x + 3), ids wrapped into int32 then NumPy's % */
} expect_t;

static int64_t file_min[2];

static void file_min_init(void)
{
    int empty;
    file_min[0] = file_min[1] = INT64_MAX;
    for (uint64_t i = 0; i < N_AB; i++)
        for (size_t f = 0; f < EMBER_CRITEO_DENSE; f++) {
            int64_t x = gen_dense(i, f, &empty), *m = &file_min[i >= FILE_A];
            *m = x < *m ? x : *m;
        }
}

static double want_dense(expect_t expect, uint64_t i, size_t f)
{
    int empty;
    int64_t x = gen_dense(i, f, &empty);
    if (expect == EXPECT_TORCHREC)
        return log((double)(x - file_min[i >= FILE_A] + 2));
    if (expect == EXPECT_OLD_TORCH)
        return log((double)(x + 3));
    return (float)log((double)(x > 0 ? x : 0) + 1.0);
}

static int64_t want_id(expect_t expect, uint64_t i, size_t f)
{
    int empty;
    uint64_t id = gen_id(i, f, &empty);
    if (expect != EXPECT_OLD_TORCH)
        return (int64_t)(id % (uint64_t)rows[f]);
    int64_t v = (int32_t)(uint32_t)id, r = v % rows[f];
    return r < 0 ? r + rows[f] : r;
}

/* Example @j of @b is example @i, every field. */
static int check_example(expect_t expect, const ember_criteo_batch_t *b, size_t j, uint64_t i)
{
    CHECK(b->sparse[0][j] == (int64_t)i, "example %zu of the batch is %lld, not %llu", j,
          (long long)b->sparse[0][j], (unsigned long long)i);
    CHECK(b->labels[j] == (float)gen_label(i), "example %llu: label %g", (unsigned long long)i,
          (double)b->labels[j]);
    for (size_t f = 0; f < EMBER_CRITEO_DENSE; f++) {
        double got = b->dense[j * EMBER_CRITEO_DENSE + f], want = want_dense(expect, i, f);
        int close = expect == EXPECT_TSV ? got == want : fabs(got - want) <= 1e-6 * fabs(want);
        CHECK(close, "example %llu: I%zu is %.9g, not %.9g", (unsigned long long)i, f + 1, got,
              want);
    }
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++)
        CHECK(b->sparse[f][j] == want_id(expect, i, f), "example %llu: C%zu is %lld, not %lld",
              (unsigned long long)i, f + 1, (long long)b->sparse[f][j],
              (long long)want_id(expect, i, f));
    return 0;
}

typedef struct {
    uint32_t trainer, trainers, batch;
    int eval;
    uint64_t examples; /* in the files */
    expect_t expect;
} run_t;

/* One epoch of @d: every batch as @run says it must be, then n == 0.
 * @seen[i] counts the times example i was given. */
static int read_epoch(ember_criteo_data_t *d, const run_t *run, uint8_t *seen)
{
    char err[1024];
    ember_criteo_batch_t b;
    uint64_t T = run->trainers, t = run->trainer, B = run->batch;
    uint64_t own = run->examples > t ? (run->examples - t + T - 1) / T : 0;
    uint64_t want_batches = run->eval ? (own + B - 1) / B : run->examples / (B * T);
    for (uint64_t s = 0; s < want_batches; s++) {
        CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK, "batch %llu: %s",
              (unsigned long long)s, err);
        uint64_t n = run->eval && s == want_batches - 1 ? own - s * B : B;
        for (size_t f = 1; f < EMBER_CRITEO_SPARSE; f++)
            CHECK(b.sparse[f] == b.sparse[0] + f * b.n, "batch %llu of %zu: feature %zu at %td",
                  (unsigned long long)s, b.n, f, b.sparse[f] - b.sparse[0]);
        CHECK(b.n == n && b.first_example == s * B * T + t,
              "trainer %llu of %llu, B %llu: batch %llu has %zu from %llu, not %llu",
              (unsigned long long)t, (unsigned long long)T, (unsigned long long)B,
              (unsigned long long)s, b.n, (unsigned long long)b.first_example,
              (unsigned long long)n);
        for (size_t j = 0; j < b.n; j++) {
            uint64_t i = b.first_example + j * T;
            if (check_example(run->expect, &b, j, i))
                return 1;
            seen[i]++;
        }
    }
    CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 0,
          "trainer %llu of %llu, B %llu: the epoch does not end after %llu batches (n %zu): %s",
          (unsigned long long)t, (unsigned long long)T, (unsigned long long)B,
          (unsigned long long)want_batches, b.n, err);
    return 0;
}

static ember_criteo_data_config_t config_of(const char *spec, const run_t *run, uint32_t read_ahead)
{
    return (ember_criteo_data_config_t){.source = spec,
                                        .trainer = run->trainer,
                                        .trainers = run->trainers,
                                        .batch = run->batch,
                                        .rows = rows,
                                        .eval = run->eval,
                                        .read_ahead = read_ahead};
}

/* @epochs epochs of @spec as @run; @seen as read_epoch. */
static int run_epochs(const char *spec, const run_t *run, uint32_t read_ahead, int epochs,
                      uint8_t *seen)
{
    char err[1024];
    ember_criteo_data_t *d;
    ember_criteo_data_config_t config = config_of(spec, run, read_ahead);
    CHECK(ember_criteo_data_open(&config, &d, err, sizeof(err)) == EMBER_OK, "open %s: %s", spec,
          err);
    int failed = 0;
    for (int e = 0; e < epochs && !failed; e++)
        failed = read_epoch(d, run, seen);
    ember_criteo_data_close(d);
    CHECK(!failed, "%s, epoch of trainer %u of %u", spec, run->trainer, run->trainers);
    return 0;
}

/* Every trainer of 1, 2 and 3, every batch size of @sizes; eval: the
 * trainers together see each example once. */
static int split(int eval)
{
    files_t files;
    static const uint32_t sizes[] = {1, 4, 5, 7};
    rows_init();
    if (make_files(&files, UINT64_MAX, 0))
        return 1;
    for (uint32_t T = 1; T <= 3; T++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            uint8_t seen[N_AB] = {0};
            for (uint32_t t = 0; t < T; t++) {
                run_t run = {t, T, sizes[k], eval, N_AB, EXPECT_TSV};
                if (run_epochs(files.spec, &run, 0, 1, seen))
                    return 1;
            }
            uint64_t kept = eval ? N_AB : N_AB / (sizes[k] * T) * sizes[k] * T;
            for (uint64_t i = 0; i < N_AB; i++)
                CHECK(seen[i] == (i < kept), "T %u B %u: example %llu given %u times", T, sizes[k],
                      (unsigned long long)i, seen[i]);
        }
    remove_files(&files);
    return 0;
}

static int case_split_eval(void)
{
    return split(1);
}

static int case_split_train(void)
{
    return split(0);
}

static int case_epochs(void)
{
    files_t files;
    rows_init();
    if (make_files(&files, UINT64_MAX, 0))
        return 1;
    for (int eval = 0; eval <= 1; eval++)
        for (uint32_t t = 0; t < 2; t++) {
            uint8_t seen[N_AB] = {0};
            run_t run = {t, 2, 5, eval, N_AB, EXPECT_TSV};
            if (run_epochs(files.spec, &run, 2, 3, seen))
                return 1;
            for (uint64_t i = t; i < (eval ? N_AB : 60); i += 2)
                CHECK(seen[i] == 3, "example %llu given %u times in 3 epochs",
                      (unsigned long long)i, seen[i]);
        }
    remove_files(&files);
    return 0;
}

/* Trainer @t of 2 (batches of 4) over files broken at example @bad_index
 * the @bad way: @good batches, then an error holding @want, twice. */
static int fails_after(const files_t *files, uint32_t t, int eval, uint64_t good, const char *want)
{
    char err[1024] = "";
    ember_criteo_data_t *d;
    ember_criteo_batch_t b;
    run_t run = {t, 2, 4, eval, N_AB, EXPECT_TSV};
    ember_criteo_data_config_t config = config_of(files->spec, &run, 2);
    CHECK(ember_criteo_data_open(&config, &d, err, sizeof(err)) == EMBER_OK, "open: %s", err);
    for (uint64_t s = 0; s < good; s++) {
        CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 4,
              "trainer %u batch %llu: %s", t, (unsigned long long)s, err);
        for (size_t j = 0; j < b.n; j++)
            if (check_example(EXPECT_TSV, &b, j, b.first_example + j * 2))
                return 1;
    }
    for (int again = 0; again < 2; again++) {
        err[0] = '\0';
        ember_status_t status = ember_criteo_data_next(d, &b, err, sizeof(err));
        CHECK(status == EMBER_ERR_FORMAT && strstr(err, files->b) && strstr(err, want),
              "trainer %u call %llu: status %d, '%s' lacks '%s'", t,
              (unsigned long long)good + 1 + again, status, err, want);
    }
    ember_criteo_data_close(d); /* the reader ended: close joins it */
    return 0;
}

static int case_malformed(void)
{
    files_t files;
    uint8_t seen[N_AB] = {0};
    rows_init();
    /* example 46: line 10 of the second file, trainer 0's (46 % 2) */
    if (make_files(&files, 46, 1))
        return 1;
    for (int eval = 0; eval <= 1; eval++)
        if (fails_after(&files, 0, eval, 5, ":10: field C2 is 'zz'"))
            return 1;
    run_t other = {1, 2, 4, 1, N_AB, EXPECT_TSV};
    if (run_epochs(files.spec, &other, 2, 2, seen)) /* counts line 10, parses none of it */
        return 1;
    remove_files(&files);
    if (make_files(&files, 46, 2))
        return 1;
    if (fails_after(&files, 0, 1, 5, ":10: 39 tab-separated fields, not 40") ||
        fails_after(&files, 1, 1, 5, ":10: 39 tab-separated fields, not 40") ||
        fails_after(&files, 1, 0, 5, ":10: 39 tab-separated fields"))
        return 1;
    remove_files(&files);
    /* example 60 (line 24 of the second file): in the tail training drops,
     * still trainer 0's to parse on the way to the end */
    if (make_files(&files, 60, 1))
        return 1;
    if (fails_after(&files, 0, 0, 7, ":24: field C2"))
        return 1;
    remove_files(&files);
    return 0;
}

static int case_close(void)
{
    char dir[] = "/tmp/ember-criteo-close-XXXXXX", path[96], spec[128], err[1024];
    ember_criteo_data_t *d;
    ember_criteo_batch_t b;
    rows_init();
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof(path), "%s/big", dir);
    snprintf(spec, sizeof(spec), "criteo:%s", path);
    if (write_tsv(path, 0, 40000, UINT64_MAX, 0))
        return 1;
    const struct {
        uint32_t batch, read_ahead;
        int take;
    } runs[] = {
            {1000000, 1, 0}, /* parsing one batch of the whole file */
            {1, 64, 0},      /* running ahead */
            {16, 2, 1},      /* waiting on a full ring */
    };
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        run_t run = {0, 1, runs[k].batch, 0, 40000, EXPECT_TSV};
        ember_criteo_data_config_t config = config_of(spec, &run, runs[k].read_ahead);
        CHECK(ember_criteo_data_open(&config, &d, err, sizeof(err)) == EMBER_OK, "open: %s", err);
        if (runs[k].take) {
            CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 16, "%s",
                  err);
            usleep(10000); /* let the reader fill the ring and wait (either order passes) */
        }
        ember_criteo_data_close(d);
    }
    unlink(path);
    rmdir(dir);
    return 0;
}

static int case_tiny_ring(void)
{
    files_t files;
    char err[1024];
    rows_init();
    if (make_files(&files, UINT64_MAX, 0))
        return 1;
    uint8_t seen[N_AB] = {0};
    run_t ones = {1, 2, 1, 0, N_AB, EXPECT_TSV};
    if (run_epochs(files.spec, &ones, 1, 2, seen))
        return 1;
    for (uint32_t t = 0; t < 2; t++) {
        run_t big = {t, 2, 1000, 1, N_AB, EXPECT_TSV}; /* eval: one short batch */
        if (run_epochs(files.spec, &big, 1, 2, seen))
            return 1;
    }
    run_t train = {0, 2, 1000, 0, N_AB, EXPECT_TSV};
    ember_criteo_data_config_t config = config_of(files.spec, &train, 1);
    ember_criteo_data_t *d;
    ember_criteo_batch_t b;
    CHECK(ember_criteo_data_open(&config, &d, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (int e = 0; e < 3; e++)
        CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 0 &&
                      b.first_example == N_AB,
              "training with a batch past the data: epoch %d gave %zu", e, b.n);
    ember_criteo_data_close(d);
    remove_files(&files);
    return 0;
}

/* @config refused at open with @status, the error holding @want. */
static int open_refused(const ember_criteo_data_config_t *config, ember_status_t status,
                        const char *want)
{
    char err[1024] = "";
    ember_criteo_data_t *d = NULL;
    ember_status_t got = ember_criteo_data_open(config, &d, err, sizeof(err));
    CHECK(got == status && d == NULL && strstr(err, want), "'%s': status %d, '%s' lacks '%s'",
          config->source ? config->source : "(null)", got, err, want);
    return 0;
}

static int case_refused(void)
{
    files_t files;
    char spec[512];
    rows_init();
    if (make_files(&files, UINT64_MAX, 0))
        return 1;
    run_t run = {0, 2, 4, 0, N_AB, EXPECT_TSV};
    ember_criteo_data_config_t c = config_of(files.spec, &run, 0);
    c.trainer = 2;
    if (open_refused(&c, EMBER_ERR_INVALID_PARAM, "trainer 2 of 2"))
        return 1;
    c = config_of(files.spec, &run, 0);
    c.batch = 0;
    if (open_refused(&c, EMBER_ERR_INVALID_PARAM, "a batch of 0"))
        return 1;
    int64_t bad_rows[EMBER_CRITEO_SPARSE];
    memcpy(bad_rows, rows, sizeof(bad_rows));
    bad_rows[3] = 0;
    c = config_of(files.spec, &run, 0);
    c.rows = bad_rows;
    if (open_refused(&c, EMBER_ERR_INVALID_PARAM, "feature C4's table has 0 rows"))
        return 1;
    c = config_of("tsv:/x", &run, 0);
    if (open_refused(&c, EMBER_ERR_INVALID_PARAM, "is neither criteo:"))
        return 1;
    snprintf(spec, sizeof(spec), "criteo:%s,,%s", files.a, files.b);
    c = config_of(spec, &run, 0);
    if (open_refused(&c, EMBER_ERR_INVALID_PARAM, "path 2 is empty"))
        return 1;
    snprintf(spec, sizeof(spec), "criteo:%s,%s/day_9", files.a, files.dir);
    c = config_of(spec, &run, 0);
    if (open_refused(&c, EMBER_ERR_IO, "day_9: No such file"))
        return 1;
    snprintf(spec, sizeof(spec), "criteo-npy:%s/day_0", files.dir);
    c = config_of(spec, &run, 0);
    if (open_refused(&c, EMBER_ERR_IO, "day_0_dense.npy: No such file"))
        return 1;
    c = config_of(files.spec, &run, EMBER_CRITEO_READ_AHEAD_MAX + 1);
    if (open_refused(&c, EMBER_ERR_INVALID_PARAM, "read_ahead 1025 (at most 1024"))
        return 1;
    c = config_of(files.spec, &run, EMBER_CRITEO_READ_AHEAD_MAX);
    c.batch = UINT32_MAX; /* 1025 buffers of 2^32 examples */
    if (open_refused(&c, EMBER_ERR_NO_MEMORY, "out of memory"))
        return 1;
    remove_files(&files);
    return 0;
}

/* criteo_npy_ref.py (argv) converts @files into @out. */
static int convert(const files_t *files, const char *out)
{
    CHECK(test_argc >= 2, "usage: test_criteo_data npy_equals_tsv PYTHON criteo_npy_ref.py");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        execl(test_argv[0], test_argv[0], test_argv[1], out, files->a, files->b, (char *)NULL);
        _exit(127);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "%s %s failed", test_argv[0], test_argv[1]);
    return 0;
}

/* The npy prefixes @name_0,@name_1 under @dir, every trainer of 2 in
 * either mode, against @expect. */
static int npy_runs(const char *dir, const char *name, expect_t expect)
{
    char spec[512];
    snprintf(spec, sizeof(spec), "criteo-npy:%s/%s_0,%s/%s_1", dir, name, dir, name);
    for (int eval = 0; eval <= 1; eval++)
        for (uint32_t t = 0; t < 2; t++) {
            uint8_t seen[N_AB] = {0};
            run_t run = {t, 2, 4, eval, N_AB, expect};
            if (run_epochs(spec, &run, 2, 2, seen))
                return 1;
        }
    return 0;
}

/* The npy prefix @dir/@name: @good batches of trainer 0 of 1 (B 4), then an
 * error holding @want. */
static int npy_fails(const char *dir, const char *name, uint64_t good, const char *want)
{
    char spec[512], err[1024] = "";
    ember_criteo_data_t *d;
    ember_criteo_batch_t b;
    snprintf(spec, sizeof(spec), "criteo-npy:%s/%s", dir, name);
    run_t run = {0, 1, 4, 1, FILE_A, EXPECT_TORCHREC};
    ember_criteo_data_config_t config = config_of(spec, &run, 1);
    CHECK(ember_criteo_data_open(&config, &d, err, sizeof(err)) == EMBER_OK, "%s: %s", spec, err);
    for (uint64_t s = 0; s < good; s++)
        CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 4, "%s: %s",
              name, err);
    ember_status_t status = ember_criteo_data_next(d, &b, err, sizeof(err));
    CHECK(status == EMBER_ERR_FORMAT && strstr(err, want), "%s: status %d, '%s' lacks '%s'", name,
          status, err, want);
    ember_criteo_data_close(d);
    return 0;
}

static int case_npy_equals_tsv(void)
{
    files_t files;
    char out[128], spec[512];
    rows_init();
    file_min_init();
    if (make_files(&files, UINT64_MAX, 0))
        return 1;
    snprintf(out, sizeof(out), "%s/npy", files.dir);
    CHECK(mkdir(out, 0700) == 0, "mkdir %s", out);
    if (convert(&files, out) || npy_runs(out, "tr", EXPECT_TORCHREC) ||
        npy_runs(out, "raw", EXPECT_TSV) || npy_runs(out, "old", EXPECT_OLD_TORCH))
        return 1;
    /* errors: the row in that file, the file named */
    if (npy_fails(out, "badlabel", 1, "badlabel_labels.npy: example 5: label 2, not 0 or 1") ||
        npy_fails(out, "nan", 0, "nan_dense.npy: example 3: I3 is nan, not finite"))
        return 1;
    snprintf(spec, sizeof(spec), "criteo-npy:%s/short", out);
    run_t run = {0, 1, 4, 1, FILE_A, EXPECT_TORCHREC};
    ember_criteo_data_config_t c = config_of(spec, &run, 0);
    if (open_refused(&c, EMBER_ERR_FORMAT, "short_sparse.npy: 36 examples, ") ||
        open_refused(&c, EMBER_ERR_FORMAT, "short_dense.npy has 37"))
        return 1;
    snprintf(spec, sizeof(spec), "rm -rf '%s'", out);
    CHECK(system(spec) == 0, "rm %s", out);
    remove_files(&files);
    return 0;
}

static int case_bounded_memory(void)
{
    enum {
        LINES = 40000,
        BATCH = 32,
        READ_AHEAD = 2,
        SLACK = 64 * 1024 /* the reader's FILE and the stream's small state */
    };
    char dir[] = "/tmp/ember-criteo-mem-XXXXXX", path[96], spec[128], err[1024];
    struct stat st;
    ember_criteo_batch_t b;
    CHECK(test_heap_one_arena(), "mallopt");
    rows_init();
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof(path), "%s/big", dir);
    snprintf(spec, sizeof(spec), "criteo:%s", path);
    if (write_tsv(path, 0, LINES, UINT64_MAX, 0))
        return 1;
    size_t ring = (READ_AHEAD + 1) * BATCH * (26 * 8 + 14 * 4);
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size > 50 * (ring + SLACK),
          "the file (%lld bytes) is far larger than the ring", (long long)st.st_size);
    run_t run = {0, 1, BATCH, 0, LINES, EXPECT_TSV};
    ember_criteo_data_config_t config = config_of(spec, &run, READ_AHEAD);
    ember_criteo_data_t *d;
    size_t before = test_heap_bytes();
    CHECK(ember_criteo_data_open(&config, &d, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == BATCH, "%s", err);
    size_t opened = test_heap_bytes(), peak = opened;
    CHECK(opened >= before + ring && opened <= before + ring + SLACK,
          "open took %zu bytes of heap, the ring is %zu", opened - before, ring);
    uint64_t batches = 1;
    for (int e = 0; e < 2; e++, batches = 0) {
        for (; ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n; batches++) {
            size_t now = test_heap_bytes();
            peak = now > peak ? now : peak;
            for (size_t j = 0; j < b.n; j++) /* lines across the reads' edges */
                if (check_example(EXPECT_TSV, &b, j, b.first_example + j))
                    return 1;
        }
        CHECK(batches == LINES / BATCH && b.n == 0, "epoch %d: %llu batches: %s", e,
              (unsigned long long)batches, err);
    }
    CHECK(peak <= opened + SLACK, "the heap grew by %zu bytes while streaming %lld", peak - opened,
          (long long)st.st_size);
    ember_criteo_data_close(d);
    CHECK(test_heap_bytes() <= before + SLACK, "close left %zu bytes", test_heap_bytes() - before);
    unlink(path);
    rmdir(dir);
    return 0;
}

/* Batch @s of training trainer 0 of 1 in batches of 4: examples 4s .. 4s+3. */
static int check_batch(const ember_criteo_batch_t *b, uint64_t s)
{
    CHECK(b->n == 4, "batch %llu has %zu examples", (unsigned long long)s, b->n);
    for (size_t j = 0; j < 4; j++)
        if (check_example(EXPECT_TSV, b, j, 4 * s + j))
            return 1;
    return 0;
}

/* The A and B files read by one trainer in batches of 4, holding 2. */
static int open_holding(files_t *files, ember_criteo_data_t **d)
{
    char err[1024];
    rows_init();
    if (make_files(files, UINT64_MAX, 0))
        return 1;
    run_t run = {0, 1, 4, 0, N_AB, EXPECT_TSV};
    ember_criteo_data_config_t config = config_of(files->spec, &run, 1);
    config.hold = 2;
    CHECK(ember_criteo_data_open(&config, d, err, sizeof(err)) == EMBER_OK, "%s", err);
    return 0;
}

static int case_hold(void)
{
    files_t files;
    char err[1024];
    ember_criteo_data_t *d;
    ember_criteo_batch_t held[2], b;
    if (open_holding(&files, &d))
        return 1;
    CHECK(ember_criteo_data_release(d) == EMBER_ERR_INVALID_PARAM, "a release of nothing held");
    CHECK(ember_criteo_data_take(d, &held[0], err, sizeof(err)) == EMBER_OK &&
                  ember_criteo_data_take(d, &held[1], err, sizeof(err)) == EMBER_OK,
          "two takes: %s", err);
    CHECK(ember_criteo_data_take(d, &b, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "2 batches held"),
          "a third take while two are held: '%s'", err);
    usleep(100000); /* the reader fills what it may meanwhile */
    if (check_batch(&held[0], 0) || check_batch(&held[1], 1))
        return 1;
    const uint64_t batches = N_AB / 4;
    for (uint64_t s = 2; s < batches; s++) {
        /* every other step through next, which releases the oldest itself */
        if (s % 2 == 0) {
            CHECK(ember_criteo_data_release(d) == EMBER_OK, "release");
            CHECK(ember_criteo_data_take(d, &held[s % 2], err, sizeof(err)) == EMBER_OK, "%s", err);
        } else {
            CHECK(ember_criteo_data_next(d, &held[s % 2], err, sizeof(err)) == EMBER_OK, "%s", err);
        }
        usleep(s == 2 ? 50000 : 0);
        if (check_batch(&held[(s + 1) % 2], s - 1) || check_batch(&held[s % 2], s))
            return 1;
    }
    CHECK(ember_criteo_data_next(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 0,
          "the epoch's end after %llu batches: %zu", (unsigned long long)batches, b.n);
    if (check_batch(&held[(batches - 1) % 2], batches - 1))
        return 1;
    ember_criteo_data_close(d);
    remove_files(&files);
    return 0;
}

/* A trainer that holds step s's batch while it takes the next one, across
 * the epochs' ends: the end holds nothing. */
static int case_hold_end(void)
{
    files_t files;
    char err[1024];
    ember_criteo_data_t *d;
    ember_criteo_batch_t cur, next, b;
    const uint64_t batches = N_AB / 4;
    if (open_holding(&files, &d))
        return 1;
    CHECK(ember_criteo_data_take(d, &cur, err, sizeof(err)) == EMBER_OK, "%s", err);
    for (int epoch = 0; epoch < 3; epoch++) {
        for (uint64_t s = 1; s < batches; s++) {
            CHECK(ember_criteo_data_take(d, &next, err, sizeof(err)) == EMBER_OK, "%s", err);
            if (check_batch(&cur, s - 1) || check_batch(&next, s))
                return 1;
            CHECK(ember_criteo_data_release(d) == EMBER_OK, "release");
            cur = next;
        }
        /* the last batch held: the end, then the next epoch's first */
        CHECK(ember_criteo_data_take(d, &b, err, sizeof(err)) == EMBER_OK && b.n == 0 &&
                      b.first_example == N_AB,
              "epoch %d: its end after %llu batches: n %zu, %s", epoch, (unsigned long long)batches,
              b.n, err);
        CHECK(ember_criteo_data_take(d, &next, err, sizeof(err)) == EMBER_OK,
              "epoch %d: the next one's first batch with the last held and the end taken: %s",
              epoch, err);
        usleep(50000); /* the reader fills what it may meanwhile */
        if (check_batch(&cur, batches - 1) || check_batch(&next, 0))
            return 1;
        CHECK(ember_criteo_data_take(d, &b, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                      strstr(err, "2 batches held"),
              "a third take: '%s'", err);
        CHECK(ember_criteo_data_release(d) == EMBER_OK, "release the last batch");
        cur = next;
    }
    CHECK(ember_criteo_data_release(d) == EMBER_OK, "release the first batch");
    CHECK(ember_criteo_data_release(d) == EMBER_ERR_INVALID_PARAM,
          "nothing is held: the epochs' ends held nothing");
    ember_criteo_data_close(d);
    remove_files(&files);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"split_eval", case_split_eval},
            {"split_train", case_split_train},
            {"epochs", case_epochs},
            {"malformed", case_malformed},
            {"close", case_close},
            {"tiny_ring", case_tiny_ring},
            {"refused", case_refused},
            {"npy_equals_tsv", case_npy_equals_tsv},
            {"bounded_memory", case_bounded_memory},
            {"hold", case_hold},
            {"hold_end", case_hold_end},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
