/* common/crc32c: the standard check values, the SSE4.2 and table paths
 * against each other and a bitwise reference, chaining. */
#include "common/crc32c.h"

#include "test_util.h"

#include <stdlib.h>

/* One bit at a time, straight from the definition: the reference. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    uint32_t c = ~crc;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static uint8_t *pattern(size_t n)
{
    uint8_t *b = malloc(n);
    uint64_t state = 12345;
    for (size_t i = 0; b && i < n; i++)
        b[i] = (uint8_t)(test_uniform(&state, 0, 256));
    return b;
}

/* "123456789" (RFC 3720's and every CRC catalogue's check), 32 zeros and
 * 32 0xff bytes (RFC 3720 B.4), on both paths. */
static int case_check_value(void)
{
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof(ones));
    CHECK(ember_crc32c(0, "123456789", 9) == 0xe3069283u, "%08x", ember_crc32c(0, "123456789", 9));
    CHECK(ember_crc32c_table(0, "123456789", 9) == 0xe3069283u, "table");
    CHECK(ember_crc32c_table(0, zeros, 32) == 0x8a9136aau, "zeros %08x",
          ember_crc32c_table(0, zeros, 32));
    CHECK(ember_crc32c_table(0, ones, 32) == 0x62a8ab43u, "ones %08x",
          ember_crc32c_table(0, ones, 32));
    CHECK(ember_crc32c(0, NULL, 0) == 0, "empty");
    if (ember_crc32c_hw()) {
        CHECK(ember_crc32c_sse42(0, "123456789", 9) == 0xe3069283u, "sse4.2");
        CHECK(ember_crc32c_sse42(0, zeros, 32) == 0x8a9136aau, "sse4.2 zeros");
        CHECK(ember_crc32c_sse42(0, ones, 32) == 0x62a8ab43u, "sse4.2 ones");
    } else {
        fprintf(stderr, "no SSE4.2 here: the table path only\n");
    }
    return 0;
}

/* Every length up to past three long blocks (the stream joins, the short
 * blocks, the 8-byte loop and the tail), at every alignment of 8. */
static int case_paths_agree(void)
{
    size_t n = 3 * 8192 * 2 + 3 * 256 + 100;
    uint8_t *b = pattern(n + 8);
    CHECK(b, "no memory");
    for (size_t len = 0; len <= n; len += len < 1024 ? 1 : 97) {
        for (size_t off = 0; off < 8; off += len < 1024 ? 1 : 3) {
            uint32_t want = crc_bitwise(0, b + off, len);
            uint32_t table = ember_crc32c_table(0, b + off, len);
            CHECK(table == want, "table: length %zu at +%zu: %08x, want %08x", len, off, table,
                  want);
            if (ember_crc32c_hw()) {
                uint32_t hw = ember_crc32c_sse42(0, b + off, len);
                CHECK(hw == want, "sse4.2: length %zu at +%zu: %08x, want %08x", len, off, hw,
                      want);
            }
        }
    }
    free(b);
    return 0;
}

/* crc(crc(0, a), b) == crc(0, a || b) at every split, both paths. */
static int case_chained(void)
{
    size_t n = 3 * 8192 + 1000;
    uint8_t *b = pattern(n);
    CHECK(b, "no memory");
    uint32_t whole = crc_bitwise(0, b, n);
    for (size_t cut = 0; cut <= n; cut += 1 + cut / 3) {
        uint32_t t = ember_crc32c_table(ember_crc32c_table(0, b, cut), b + cut, n - cut);
        uint32_t f = ember_crc32c(ember_crc32c(0, b, cut), b + cut, n - cut);
        CHECK(t == whole && f == whole, "cut at %zu: table %08x, ember_crc32c %08x, want %08x", cut,
              t, f, whole);
    }
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"check_value", case_check_value},
            {"paths_agree", case_paths_agree},
            {"chained", case_chained},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
