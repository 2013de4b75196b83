/*
 * common/copy: ember_copy copies exactly the bytes memcpy would, for every
 * size around its thresholds and every destination distance around the
 * ones it copies backwards, and writes nothing outside the destination.
 */
#include "common/copy.h"
#include "tests/engine/test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int case_distances(void)
{
    static const size_t sizes[] = {0,    1,    15,   63,   64,   65,   127,
                                   2048, 2049, 2111, 4095, 4096, 8205, 65543};
    enum {
        GUARD = 64,
        SPAN = 65543 + 8192 + 2 * GUARD
    };
    unsigned char *src = NULL, *dst = NULL;
    CHECK(posix_memalign((void **)&src, 4096, SPAN) == 0 &&
                  posix_memalign((void **)&dst, 4096, SPAN) == 0,
          "out of memory");
    for (size_t i = 0; i < SPAN; i++)
        src[i] = (unsigned char)(i * 131u + (i >> 8) * 7u + 1u);
    size_t checked = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (size_t src_off = 0; src_off < 4; src_off++) {
            for (size_t distance = 0; distance < 4096; distance++) {
                /* every distance near the backward window, a sample elsewhere */
                if (distance > 130 && distance < 4090 && distance % 509 != 0)
                    continue;
                const unsigned char *from = src + src_off;
                unsigned char *to = dst + GUARD + (src_off + distance) % 4096;
                size_t n = sizes[s];
                memset(dst, 0xee, SPAN);
                CHECK(ember_copy(to, from, n) == to, "returns its destination");
                CHECK(memcmp(to, from, n) == 0,
                      "%zu bytes, distance %zu, source offset "
                      "%zu: the copy differs",
                      n, distance, src_off);
                for (unsigned char *p = dst; p < to; p++)
                    CHECK(*p == 0xee,
                          "%zu bytes, distance %zu: wrote %td bytes before "
                          "the destination",
                          n, distance, to - p);
                for (unsigned char *p = to + n; p < dst + SPAN; p++)
                    CHECK(*p == 0xee, "%zu bytes, distance %zu: wrote past the end", n, distance);
                checked++;
            }
        }
    }
    CHECK(checked >= 8000, "only %zu copies checked", checked);
    free(src);
    free(dst);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {{"distances", case_distances}};
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
