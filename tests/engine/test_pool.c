/*
 * common/pool: the free lists behind the transport's buffers and the
 * parameter server's lookup replies.  A buffer given back is the next one
 * handed out for its size class (the one still in cache), classes do not
 * mix, the byte count follows malloc and free, and the caches are bounded.
 * Huge classes are carved out of 2 MiB-aligned chunks and kept until
 * cleanup.
 */
#include "common/pool.h"
#include "tests/engine/test_util.h"

#include <stdint.h>
#include <string.h>

static int case_reuse(void)
{
    ember_pool_t pool = {0};
    char *a = ember_pool_get(&pool, 1000), *b = ember_pool_get(&pool, 1000);
    CHECK(a && b && a != b, "two buffers of 1000 B");
    CHECK(((uintptr_t)a & 15) == 0, "buffers are 16-byte aligned");
    memset(a, 0xab, 1000); /* the whole size is usable */
    CHECK(pool.bytes == 2 * 1024, "bytes %zu after two 1 KiB-class buffers", pool.bytes);
    ember_pool_put(&pool, a);
    ember_pool_put(&pool, b);
    CHECK(ember_pool_get(&pool, 1024) == b, "the last buffer given back comes first");
    CHECK(ember_pool_get(&pool, 600) == a, "then the one before it (same class)");
    char *big = ember_pool_get(&pool, 1025);
    CHECK(big && big != a && big != b, "a larger size takes the next class");
    CHECK(pool.bytes == 4 * 1024, "bytes %zu", pool.bytes);
    ember_pool_put(&pool, a);
    ember_pool_put(&pool, b);
    ember_pool_put(&pool, big);
    ember_pool_put(&pool, NULL); /* no-op */
    ember_pool_cleanup(&pool);
    CHECK(pool.bytes == 0, "bytes %zu after cleanup", pool.bytes);
    char *z = ember_pool_zalloc(&pool, 100);
    CHECK(z && z[0] == 0 && z[99] == 0, "zalloc zeroes");
    ember_pool_put(&pool, z);
    ember_pool_cleanup(&pool);
    return 0;
}

static int case_bounds(void)
{
    ember_pool_t pool = {0};
    enum {
        N = 80
    };
    void *buffers[N];
    /* 80 buffers of 1 MiB: the cache keeps at most 64 MiB of a class. */
    for (int i = 0; i < N; i++) {
        buffers[i] = ember_pool_get(&pool, 1 << 20);
        CHECK(buffers[i], "buffer %d", i);
    }
    CHECK(pool.bytes == (size_t)N << 20, "bytes %zu with %d in use", pool.bytes, N);
    for (int i = 0; i < N; i++)
        ember_pool_put(&pool, buffers[i]);
    CHECK(pool.bytes == (size_t)64 << 20, "cached %zu bytes, expected the 64 MiB cap", pool.bytes);
    ember_pool_cleanup(&pool);
    CHECK(pool.bytes == 0, "bytes %zu after cleanup", pool.bytes);
    CHECK(ember_pool_get(&pool, (size_t)1 << 50) == NULL,
          "a size beyond the largest class is refused");
    return 0;
}

static int case_huge(void)
{
    ember_pool_t pool = {.huge_min = 64 << 10};
    const size_t huge_page = 2 << 20, stride = (64 << 10) + 64;
    char *a = ember_pool_get(&pool, 64 << 10), *b = ember_pool_get(&pool, 40 << 10);
    CHECK(a && b, "two buffers of the 64 KiB class");
    CHECK(((uintptr_t)a - 128) % huge_page == 0,
          "the first buffer sits 128 B into a 2 MiB-aligned chunk (%p)", (void *)a);
    CHECK(b == a + stride, "the next one follows it in the chunk");
    CHECK(pool.bytes == huge_page, "bytes %zu: one 2 MiB chunk", pool.bytes);
    memset(a, 1, 64 << 10);
    memset(b, 2, 64 << 10);
    char *small = ember_pool_get(&pool, 32 << 10);
    CHECK(small && pool.bytes == huge_page + (32 << 10),
          "a class below huge_min is malloc'd (bytes %zu)", pool.bytes);
    char *big = ember_pool_get(&pool, 2 << 20);
    CHECK(big && pool.bytes == 2 * huge_page + (32 << 10),
          "a class above 1 MiB is malloc'd (bytes %zu)", pool.bytes);
    char *mid = ember_pool_get(&pool, 1 << 20);
    CHECK(mid && ((uintptr_t)mid - 128) % huge_page == 0,
          "the 1 MiB class gets a chunk of its own");
    size_t with_mid = pool.bytes;
    CHECK(with_mid > 2 * huge_page + (32 << 10) + (4u << 20),
          "a 1 MiB chunk holds at least 4 buffers (bytes %zu)", with_mid);
    ember_pool_put(&pool, a);
    ember_pool_put(&pool, b);
    CHECK(ember_pool_get(&pool, 64 << 10) == b, "carved buffers are reused last-in first");
    ember_pool_put(&pool, b);
    /* Carved buffers stay cached past the malloc'd caps. */
    void *many[40];
    for (int i = 0; i < 40; i++)
        CHECK(many[i] = ember_pool_get(&pool, 64 << 10), "carved buffer %d", i);
    CHECK(pool.bytes == with_mid + huge_page, "40 buffers of 64 KiB: two chunks");
    for (int i = 0; i < 40; i++)
        ember_pool_put(&pool, many[i]);
    ember_pool_put(&pool, small);
    ember_pool_put(&pool, big);
    ember_pool_put(&pool, mid);
    ember_pool_cleanup(&pool);
    CHECK(pool.bytes == 0 && pool.chunks == NULL, "bytes %zu after cleanup", pool.bytes);
    /* The pool works again after a cleanup. */
    a = ember_pool_get(&pool, 100 << 10);
    CHECK(a && pool.bytes == huge_page, "a 128 KiB-class buffer after cleanup");
    ember_pool_put(&pool, a);
    ember_pool_cleanup(&pool);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"reuse", case_reuse},
            {"bounds", case_bounds},
            {"huge", case_huge},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
