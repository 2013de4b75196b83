/*
 * tests/transport/test_wire: the transport's parsing of received bytes,
 * without processes (the pure functions the AM callbacks and the fuzzers
 * of fuzz/ call), on the inputs the fuzzers found.
 *
 *   batch_items        a reply batch of three items, each padded to 8, is
 *                      walked whole, each item handed on once, in order
 *   batch_cut_padding  a batch whose last item's padding is cut is
 *                      malformed at that item, which is not handed on (it
 *                      was, and the offset named was past the batch's end)
 */
#include "transport/tp_internal.h"

#include <stdio.h>
#include <string.h>

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            return 1;                                                       \
        }                                                                   \
    } while (0)

typedef struct {
    size_t count;
    uint64_t lengths[8];
    size_t at[8];
    const uint8_t *base;
} seen_t;

static void on_item(void *arg, const tp_header_t *hdr, uint8_t *payload)
{
    seen_t *seen = arg;
    if (seen->count < 8) {
        seen->lengths[seen->count] = hdr->length;
        seen->at[seen->count] = (size_t)(payload - seen->base);
    }
    seen->count++;
}

/* Items of @sizes payload bytes, each padded to 8, into @out; its length. */
static size_t make_batch(uint8_t *out, const uint32_t *sizes, size_t count)
{
    size_t offset = 0;
    for (size_t i = 0; i < count; i++) {
        tp_header_t h = {.magic = TP_MAGIC,
                         .version = TP_VERSION,
                         .op = (uint16_t)(100 + i),
                         .length = sizes[i]};
        memcpy(out + offset, &h, sizeof(h));
        offset += sizeof(h);
        memset(out + offset, 0x5a, (sizes[i] + 7) & ~7u);
        offset += (sizes[i] + 7) & ~7u;
    }
    return offset;
}

static int case_batch_items(void)
{
    static const uint32_t sizes[] = {5, 16, 0};
    uint8_t batch[256];
    size_t length = make_batch(batch, sizes, 3), bad = 0;
    seen_t seen = {.base = batch};

    CHECK(tp_batch_walk(batch, length, 0, on_item, &seen, &bad) == 1, "stopped at %zu", bad);
    CHECK(seen.count == 3, "%zu items", seen.count);
    CHECK(seen.lengths[0] == 5 && seen.at[0] == 32, "item 0: %llu at %zu",
          (unsigned long long)seen.lengths[0], seen.at[0]);
    CHECK(seen.lengths[1] == 16 && seen.at[1] == 32 + 8 + 32, "item 1 at %zu", seen.at[1]);
    CHECK(seen.lengths[2] == 0 && seen.at[2] == length, "item 2 at %zu", seen.at[2]);
    return 0;
}

static int case_batch_cut_padding(void)
{
    static const uint32_t sizes[] = {5, 5};
    uint8_t batch[256];
    size_t length = make_batch(batch, sizes, 2) - 2, bad = 0; /* 1 byte of padding */
    seen_t seen = {.base = batch};

    CHECK(tp_batch_walk(batch, length, 0, on_item, &seen, &bad) == 0, "walked whole");
    CHECK(seen.count == 1, "%zu items handed on", seen.count);
    CHECK(bad == 40 && bad <= length, "malformed at %zu of %zu", bad, length);
    return 0;
}

/* UCX's library against its headers: the same major.minor passes (the
 * release may differ), anything else is refused naming both. */
static int case_ucx_version(void)
{
    char why[256] = "";
    CHECK(tp_ucx_version_check(1, 22, 1, 22, why, sizeof(why)) == EMBER_OK, "1.22 vs 1.22");
    CHECK(tp_ucx_version_check(1, 22, 1, 13, why, sizeof(why)) == EMBER_ERR_UNSUPPORTED &&
                  strstr(why, "library 1.22") && strstr(why, "UCX 1.13's headers") &&
                  strstr(why, "EMBER_UCX_ROOT"),
          "1.22 under 1.13's headers: %s", why);
    CHECK(tp_ucx_version_check(1, 13, 1, 22, why, sizeof(why)) == EMBER_ERR_UNSUPPORTED &&
                  strstr(why, "library 1.13"),
          "1.13 under 1.22's headers: %s", why);
    CHECK(tp_ucx_version_check(2, 13, 1, 13, why, sizeof(why)) == EMBER_ERR_UNSUPPORTED,
          "another major");
    /* This build's own pair (what ember_tp_create checks at start-up). */
    unsigned major, minor, release;
    ucp_get_version(&major, &minor, &release);
    CHECK(tp_ucx_version_check(major, minor, UCP_API_MAJOR, UCP_API_MINOR, why, sizeof(why)) ==
                  EMBER_OK,
          "this build: %s", why);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
            {"batch_items", case_batch_items},
            {"batch_cut_padding", case_batch_cut_padding},
            {"ucx_version", case_ucx_version},
    };
    for (size_t i = 0; argc == 2 && i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            int rc = cases[i].fn();
            fprintf(stderr, "%s %s\n", rc ? "FAIL" : "PASS", argv[1]);
            return rc;
        }
    }
    fprintf(stderr, "usage: test_wire CASE\n");
    return 2;
}
