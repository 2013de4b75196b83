/* common/crc32c: CRC-32C by SSE4.2 (three streams) or slicing-by-8. */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CRC_HAVE_SSE42 1
#endif

/* The reflected Castagnoli polynomial: bit 31 is x^0. */
#define CRC_POLY 0x82f63b78u

/* The hardware path's streams: CRC_LONG bytes each while that much is
 * left, then CRC_SHORT each; joining them costs a table look-up per byte
 * of the CRC, so the blocks are long enough to make it small. */
#define CRC_LONG  8192u
#define CRC_SHORT 256u

static uint32_t crc_table[8][256];       /* slicing-by-8 */
static uint32_t crc_shift_long[4][256];  /* times x^(8 * CRC_LONG) */
static uint32_t crc_shift_short[4][256]; /* times x^(8 * CRC_SHORT) */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

/* a * b modulo the polynomial (both reflected). */
static uint32_t crc_multiply(uint32_t a, uint32_t b)
{
    uint32_t product = 0;
    for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if (a & m)
            product ^= b;
        b = b & 1 ? (b >> 1) ^ CRC_POLY : b >> 1;
    }
    return product;
}

/* x^(8 * @bytes) modulo the polynomial: the CRC register's factor when
 * @bytes zero bytes go through it. */
static uint32_t crc_x_pow_bytes(uint64_t bytes)
{
    uint32_t result = 1u << 31, square = 1u << 23; /* 1 and x^8 */
    for (; bytes != 0; bytes >>= 1) {
        if (bytes & 1)
            result = crc_multiply(square, result);
        square = crc_multiply(square, square);
    }
    return result;
}

static void crc_shift_fill(uint32_t table[4][256], uint64_t bytes)
{
    uint32_t factor = crc_x_pow_bytes(bytes);
    for (unsigned k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            table[k][b] = crc_multiply(factor, b << (8 * k));
}

static void crc_tables_fill(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC_POLY : c >> 1;
        crc_table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xff];
    crc_shift_fill(crc_shift_long, CRC_LONG);
    crc_shift_fill(crc_shift_short, CRC_SHORT);
}

static uint32_t crc_byte(uint32_t c, uint8_t byte)
{
    return (c >> 8) ^ crc_table[0][(c ^ byte) & 0xff];
}

static uint32_t crc_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t ember_crc32c_table(uint32_t crc, const void *data, size_t length)
{
    const uint8_t *p = data;
    uint32_t c = ~crc;

    pthread_once(&crc_once, crc_tables_fill);
    for (; length >= 8; p += 8, length -= 8) {
        uint32_t lo = c ^ crc_le32(p), hi = crc_le32(p + 4);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
            crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
            crc_table[0][hi >> 24];
    }
    while (length--)
        c = crc_byte(c, *p++);
    return ~c;
}

#ifdef CRC_HAVE_SSE42

/* The register @c as if CRC_LONG or CRC_SHORT zero bytes followed. */
static uint32_t crc_shift(const uint32_t table[4][256], uint32_t c)
{
    return table[0][c & 0xff] ^ table[1][(c >> 8) & 0xff] ^ table[2][(c >> 16) & 0xff] ^
           table[3][c >> 24];
}

static uint64_t crc_load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v)); /* unaligned; x86 is little-endian */
    return v;
}

/* Rounds of three blocks of @block bytes, one stream each (the
 * instruction's latency hidden behind the other two), while they fit;
 * the register and the bytes left come back. */
__attribute__((target("sse4.2"))) static uint32_t crc_streams(uint32_t c, const uint8_t **p_p,
                                                              size_t *length_p, size_t block,
                                                              const uint32_t shift[4][256])
{
    const uint8_t *p = *p_p;
    size_t length = *length_p;

    for (; length >= 3 * block; p += 3 * block, length -= 3 * block) {
        uint64_t c0 = c, c1 = 0, c2 = 0;
        for (size_t i = 0; i < block; i += 8) {
            c0 = _mm_crc32_u64(c0, crc_load64(p + i));
            c1 = _mm_crc32_u64(c1, crc_load64(p + block + i));
            c2 = _mm_crc32_u64(c2, crc_load64(p + 2 * block + i));
        }
        /* The register is linear in its start and the bytes: stream 0's
         * result moved past block 1, plus block 1's from zero, and so on. */
        c = crc_shift(shift, (uint32_t)c0) ^ (uint32_t)c1;
        c = crc_shift(shift, c) ^ (uint32_t)c2;
    }
    *p_p = p;
    *length_p = length;
    return c;
}

__attribute__((target("sse4.2"))) uint32_t ember_crc32c_sse42(uint32_t crc, const void *data,
                                                              size_t length)
{
    const uint8_t *p = data;
    uint32_t c = ~crc;

    pthread_once(&crc_once, crc_tables_fill);
    c = crc_streams(c, &p, &length, CRC_LONG, crc_shift_long);
    c = crc_streams(c, &p, &length, CRC_SHORT, crc_shift_short);
    uint64_t c64 = c;
    for (; length >= 8; p += 8, length -= 8)
        c64 = _mm_crc32_u64(c64, crc_load64(p));
    c = (uint32_t)c64;
    while (length--)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}

static int crc_cpu_sse42(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
}

#else

uint32_t ember_crc32c_sse42(uint32_t crc, const void *data, size_t length)
{
    return ember_crc32c_table(crc, data, length);
}

static int crc_cpu_sse42(void)
{
    return 0;
}

#endif

static int crc_use_hw = -1; /* -1: not decided yet */

int ember_crc32c_hw(void)
{
    int use = __atomic_load_n(&crc_use_hw, __ATOMIC_RELAXED);
    if (use < 0) {
        use = crc_cpu_sse42();
        __atomic_store_n(&crc_use_hw, use, __ATOMIC_RELAXED);
    }
    return use;
}

uint32_t ember_crc32c(uint32_t crc, const void *data, size_t length)
{
    if (ember_crc32c_hw())
        return ember_crc32c_sse42(crc, data, length);
    return ember_crc32c_table(crc, data, length);
}
