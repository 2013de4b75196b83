/*
 * fuzz_text_line: a text: data file through the text source
 * (engine/io/text_source.c: every line as the reader thread takes it).
 *
 * Input: [schema selector] then the file's bytes (written to a memfd and
 * read by its /proc/self/fd path, lines, headers, NUL bytes and all).
 *
 * Invariants: an accepted example has a label of 0 or 1, finite dense
 * values, bags within their bounds and every id inside its table; a
 * refusal is ERR_FORMAT naming the file and its line.
 */
#define _GNU_SOURCE
#include "engine/io/data_source.h"
#include "fuzz/fuzz_input.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const schemas[] = {
        /* the kinds, lists, empty rules */
        ("label y\ndense d\ndense n none empty=refuse\nsparse i int rows=7\n"
         "sparse h hex rows=9223372036854775807 empty=zero\nsparse s string rows=13 empty=bag\n"
         "sparse l int rows=5 list=| bag=3 empty=bag\nskip x\n"),
        /* csv with a header, a shared table */
        ("format csv\nheader yes\nlabel y\nsparse a int rows=3\nsparse b string rows=11\n"
         "sparse c int rows=3 table=a list=: bag=4 empty=bag\n"),
        /* Criteo's first columns */
        "label label\ndense I1\ndense I2\nsparse C1 hex rows=1000 table=t_cat_0 empty=zero\n",
        /* dynamic tables: raw ids of each kind (no mod), a fixed one beside */
        ("label y\nsparse i int rows=7 kind=dynamic\nsparse h hex rows=9 kind=dynamic "
         "empty=zero\nsparse s string rows=13 kind=dynamic empty=bag\n"
         "sparse l int rows=5 list=| bag=3 empty=bag kind=dynamic\nsparse f int rows=4\n"),
};
#define SCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

static ember_schema_t *parsed[SCHEMAS];

static void check_example(const ember_schema_t *s, const data_example_t *ex)
{
    FUZZ_CHECK(*ex->label == 0.0f || *ex->label == 1.0f, "label %g", (double)*ex->label);
    for (uint32_t i = 0; i < ember_schema_num_dense(s); i++)
        FUZZ_CHECK(isfinite(ex->dense[i]), "dense %u = %g", i, (double)ex->dense[i]);
    for (uint32_t f = 0; f < ember_schema_num_sparse(s); f++) {
        ember_schema_sparse_t sp;
        ember_schema_sparse(s, f, &sp);
        FUZZ_CHECK(ex->lengths[f] >= 0 && ex->lengths[f] <= (int64_t)sp.bag_max,
                   "feature %u: a bag of %lld", f, (long long)ex->lengths[f]);
        for (int64_t k = 0; k < ex->lengths[f] && !ember_schema_dynamic(s, f); k++)
            FUZZ_CHECK(ex->ids[f][k] >= 0 && ex->ids[f][k] < sp.rows, "feature %u: row %lld", f,
                       (long long)ex->ids[f][k]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint8_t selector = fuzz_u8(&in);
    const ember_schema_t *s;
    char err[1024], spec[64], path[48];
    size_t which = selector % SCHEMAS;
    if (!parsed[which] &&
        ember_schema_parse(schemas[which], "fuzz", &parsed[which], err, sizeof(err)) != EMBER_OK)
        FUZZ_CHECK(0, "the fuzz schema %zu: %s", which, err);
    s = parsed[which];
    int fd = memfd_create("text", MFD_CLOEXEC);
    FUZZ_CHECK(fd >= 0, "memfd_create");
    FUZZ_CHECK(in.size == 0 || write(fd, in.data, in.size) == (ssize_t)in.size, "write");
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    snprintf(spec, sizeof(spec), "text:%s", path);
    data_source_t *source = NULL;
    float label, dense[8];
    int64_t values[8][4], lengths[8];
    int64_t *ids[8] = {values[0], values[1], values[2], values[3],
                       values[4], values[5], values[6], values[7]};
    data_example_t ex = {.label = &label, .dense = dense, .ids = ids, .lengths = lengths};
    ember_status_t status = data_source_text(spec, s, &source, err, sizeof(err));
    if (status == EMBER_OK)
        status = source->ops->rewind(source, err, sizeof(err));
    for (int got = 1; status == EMBER_OK && got;) {
        status = source->ops->take(source, &ex, &got, err, sizeof(err));
        if (status == EMBER_OK && got)
            check_example(s, &ex);
    }
    if (status != EMBER_OK)
        FUZZ_CHECK(status == EMBER_ERR_FORMAT && strncmp(err, path, strlen(path)) == 0 &&
                           err[strlen(path)] == ':',
                   "refused (%d) as '%s'", status, err);
    if (source)
        source->ops->close(source);
    close(fd);
    return 0;
}
