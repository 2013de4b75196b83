/*
 * tests/engine/test_common: small common/ helpers the engine builds on.
 *
 *   status_text_self   an error wrapped in context formats from its own
 *                      buffer (ember_status_text(err, .., "ctx: %s", err)):
 *                      the text is the context and the whole cause, as
 *                      the trainer reports a data source's error
 *   status_text_cut    a long text is cut to the buffer, NUL-terminated
 *   reserve_grow       EMBER_RESERVE grows keeping the contents, and asks
 *                      for nothing when the capacity suffices
 *   reserve_refused    a growth that cannot happen (memory, or the size's
 *                      arithmetic) reports it and leaves the array and its
 *                      capacity exactly as they were, still usable
 *   buffer_reserve     an ember_buffer_t takes a first size exactly, at
 *                      least doubles after (a few reallocations for many
 *                      growths), keeps its bytes, and refuses a size past
 *                      PTRDIFF_MAX leaving itself as it was
 */
#include "common/reserve.h"

#include <ember/status.h>

#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int case_status_text_self(void)
{
    char err[128];
    snprintf(err, sizeof(err), "replay.safetensors: tensor 't1.s0.indices' is missing");
    ember_status_t status =
            ember_status_text(err, sizeof(err), EMBER_ERR_FORMAT, "trainer %d: %s", 1, err);
    CHECK(status == EMBER_ERR_FORMAT, "status %d", status);
    CHECK(strcmp(err, "trainer 1: replay.safetensors: tensor 't1.s0.indices' is "
                      "missing") == 0,
          "got \"%s\"", err);
    /* The same when the cause sits further into the buffer than it writes. */
    ember_status_text(err, sizeof(err), EMBER_OK, "%s", err + 11);
    CHECK(strcmp(err, "replay.safetensors: tensor 't1.s0.indices' is missing") == 0, "got \"%s\"",
          err);
    return 0;
}

static int case_status_text_cut(void)
{
    char err[8];
    memset(err, 'x', sizeof(err));
    ember_status_text(err, sizeof(err), EMBER_OK, "%s", "0123456789");
    CHECK(strcmp(err, "0123456") == 0, "got \"%.8s\"", err);
    CHECK(ember_status_text(NULL, 0, EMBER_ERR_IO, "%d", 1) == EMBER_ERR_IO, "NULL text");
    return 0;
}

static int case_reserve_grow(void)
{
    int64_t *values = NULL;
    size_t capacity = 0;
    CHECK(EMBER_RESERVE(values, capacity, 0), "0 elements of nothing");
    CHECK(EMBER_RESERVE(values, capacity, 10) && values && capacity >= 10,
          "grow to 10: capacity %zu", capacity);
    for (int64_t i = 0; i < 10; i++)
        values[i] = i * 7;
    int64_t *before = values;
    size_t had = capacity;
    CHECK(EMBER_RESERVE(values, capacity, had) && values == before && capacity == had,
          "a reserve within the capacity moved the array");
    CHECK(EMBER_RESERVE(values, capacity, 1000) && capacity >= 1000, "grow to 1000");
    for (int64_t i = 0; i < 10; i++)
        CHECK(values[i] == i * 7, "element %lld lost in the growth", (long long)i);
    free(values);
    return 0;
}

static int case_reserve_refused(void)
{
    double *values = NULL;
    size_t capacity = 0;
    CHECK(EMBER_RESERVE(values, capacity, 4), "grow to 4");
    for (int i = 0; i < 4; i++)
        values[i] = i + 0.5;
    double *before = values;
    size_t had = capacity;
    /* More than the address space: realloc refuses (then the old macro had
     * already set the capacity and lost the array). */
    CHECK(!EMBER_RESERVE(values, capacity, SIZE_MAX / sizeof(double) / 4),
          "a growth to 2^61 bytes succeeded");
    CHECK(values == before && capacity == had,
          "a refused growth changed the array "
          "(%p -> %p) or its capacity (%zu -> %zu)",
          (void *)before, (void *)values, had, capacity);
    /* Beyond what size_t can count: refused before any allocation. */
    CHECK(!EMBER_RESERVE(values, capacity, SIZE_MAX / 2), "count * size overflowed");
    CHECK(values == before && capacity == had, "the overflowing growth changed it");
    for (int i = 0; i < 4; i++)
        CHECK(values[i] == i + 0.5, "element %d lost", i);
    free(values);
    return 0;
}

static int case_buffer_reserve(void)
{
    ember_buffer_t buffer = {0};
    CHECK(ember_buffer_reserve(&buffer, 1000) && buffer.capacity == 1000,
          "a first size of 1000 bytes took %zu", buffer.capacity);
    memset(buffer.data, 0x5a, 1000);
    int growths = 0;
    for (size_t bytes = 1001; bytes <= 1000000; bytes += 1000) {
        size_t had = buffer.capacity;
        CHECK(ember_buffer_reserve(&buffer, bytes) && buffer.capacity >= bytes, "grow to %zu",
              bytes);
        if (buffer.capacity != had) {
            growths++;
            CHECK(buffer.capacity >= 2 * had, "grew %zu -> %zu: less than double", had,
                  buffer.capacity);
        }
    }
    CHECK(growths <= 11, "%d growths for 1000 sizes", growths);
    for (size_t i = 0; i < 1000; i++)
        CHECK(((unsigned char *)buffer.data)[i] == 0x5a, "byte %zu lost in the growth", i);
    void *before = buffer.data;
    size_t had = buffer.capacity;
    CHECK(!ember_buffer_reserve(&buffer, (size_t)PTRDIFF_MAX + 1), "PTRDIFF_MAX + 1 bytes");
    CHECK(buffer.data == before && buffer.capacity == had, "a refused growth changed it");
    ember_buffer_free(&buffer);
    CHECK(!buffer.data && !buffer.capacity, "freed buffer still holds memory");
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"status_text_self", case_status_text_self}, {"status_text_cut", case_status_text_cut},
            {"reserve_grow", case_reserve_grow},         {"buffer_reserve", case_buffer_reserve},
            {"reserve_refused", case_reserve_refused},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
