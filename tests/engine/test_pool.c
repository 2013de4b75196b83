/*
 * common/pool: the free lists behind the transport's buffers and the
 * parameter server's lookup replies.  A buffer given back is the next one
 * handed out for its size class (the one still in cache), classes do not
 * mix, the byte count follows malloc and free, and the caches are bounded.
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
    enum { N = 80 };
    void *buffers[N];
    /* 80 buffers of 1 MiB: the cache keeps at most 64 MiB of a class. */
    for (int i = 0; i < N; i++) {
        buffers[i] = ember_pool_get(&pool, 1 << 20);
        CHECK(buffers[i], "buffer %d", i);
    }
    CHECK(pool.bytes == (size_t)N << 20, "bytes %zu with %d in use", pool.bytes, N);
    for (int i = 0; i < N; i++)
        ember_pool_put(&pool, buffers[i]);
    CHECK(pool.bytes == (size_t)64 << 20, "cached %zu bytes, expected the 64 MiB cap",
          pool.bytes);
    ember_pool_cleanup(&pool);
    CHECK(pool.bytes == 0, "bytes %zu after cleanup", pool.bytes);
    CHECK(ember_pool_get(&pool, (size_t)1 << 50) == NULL,
          "a size beyond the largest class is refused");
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"reuse", case_reuse},
        {"bounds", case_bounds},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
