/* engine/ops/half: fp16 <-> fp32 conversions and fp16 row kernels. */
#include "engine/ops/half.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HALF_HAVE_F16C 1
#include <cpuid.h>
#include <immintrin.h>
#endif

float ember_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu, bits;

    if (exp == 0x1f) {
        /* Infinity, or a NaN made quiet (as F16C's vcvtph2ps does). */
        bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* Subnormal: mant x 2^-24, normalised. */
        uint32_t e = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

uint16_t ember_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;

    if (abs >= 0x7f800000u) /* inf; NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7c00u |
                          (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
    if (abs >= 0x477ff000u) /* >= 65520: halfway to 2^16 or past, ties to even */
        return (uint16_t)(sign | 0x7c00u);
    if (abs >= 0x38800000u) { /* normal: >= 2^-14 */
        uint32_t h = ((abs >> 23) - 112u) << 10 | ((abs >> 13) & 0x3ffu);
        uint32_t rest = abs & 0x1fffu;
        /* A carry out of the mantissa bumps the exponent, as it should. */
        h += rest > 0x1000u || (rest == 0x1000u && (h & 1u));
        return (uint16_t)(sign | h);
    }
    if (abs <= 0x33000000u) /* <= 2^-25: zero (2^-25 itself ties to even 0) */
        return (uint16_t)sign;
    /* Subnormal result: the value in units of 2^-24. */
    uint32_t e = abs >> 23, mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14 .. 24 */
    uint32_t h = mant >> shift, rest = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    h += rest > halfway || (rest == halfway && (h & 1u));
    return (uint16_t)(sign | h);
}

/* ---- the run-time choice ----------------------------------------------- */

static int half_use_f16c = -1; /* -1: not decided yet */

static int half_cpu_f16c(void)
{
#ifdef HALF_HAVE_F16C
    unsigned eax, ebx, ecx, edx;
    __builtin_cpu_init();
    /* F16C from CPUID itself: clang before 15 knows no "f16c" here (an
     * error), and avx (which also says the OS saves the AVX state) it does. */
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
#else
    return 0;
#endif
}

int ember_half_f16c(void)
{
    int use = __atomic_load_n(&half_use_f16c, __ATOMIC_RELAXED);
    if (use < 0) {
        use = half_cpu_f16c();
        __atomic_store_n(&half_use_f16c, use, __ATOMIC_RELAXED);
    }
    return use;
}

void ember_half_force(int f16c)
{
    int use = f16c < 0 ? half_cpu_f16c() : (f16c && half_cpu_f16c());
    __atomic_store_n(&half_use_f16c, use, __ATOMIC_RELAXED);
}

/* ---- F16C kernels: 8 values per step, the tail done by the portable code.
 * Multiply and add stay separate instructions (no FMA), as in the portable
 * loops, so both give the same bits. */

#ifdef HALF_HAVE_F16C
__attribute__((target("avx,f16c"))) static void to_float_f16c(const uint16_t *in, float *out,
                                                              size_t n, size_t *done_p)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    *done_p = i;
}

__attribute__((target("avx,f16c"))) static void to_half_f16c(const float *in, uint16_t *out,
                                                             size_t n, size_t *done_p)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    *done_p = i;
}

__attribute__((target("avx,f16c"))) static void axpy_f16c(float *y, const uint16_t *x, float a,
                                                          size_t n, size_t *done_p)
{
    size_t i = 0;
    const __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) {
        __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, vx)));
    }
    *done_p = i;
}

__attribute__((target("avx,f16c"))) static void sgd_f16c(uint16_t *w, const float *g, float lr,
                                                         size_t n, size_t *done_p)
{
    size_t i = 0;
    const __m256 vlr = _mm256_set1_ps(lr);
    for (; i + 8 <= n; i += 8) {
        __m256 vw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        vw = _mm256_sub_ps(vw, _mm256_mul_ps(vlr, _mm256_loadu_ps(g + i)));
        _mm_storeu_si128((__m128i *)(w + i),
                         _mm256_cvtps_ph(vw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    *done_p = i;
}
#endif

void ember_half_sgd(uint16_t *w, const float *g, float lr, size_t n)
{
    size_t i = 0;
#ifdef HALF_HAVE_F16C
    if (ember_half_f16c())
        sgd_f16c(w, g, lr, n, &i);
#endif
    for (; i < n; i++)
        w[i] = ember_float_to_half(ember_half_to_float(w[i]) - lr * g[i]);
}

void ember_half_to_float_n(const uint16_t *in, float *out, size_t n)
{
    size_t i = 0;
#ifdef HALF_HAVE_F16C
    if (ember_half_f16c())
        to_float_f16c(in, out, n, &i);
#endif
    for (; i < n; i++)
        out[i] = ember_half_to_float(in[i]);
}

void ember_float_to_half_n(const float *in, uint16_t *out, size_t n)
{
    size_t i = 0;
#ifdef HALF_HAVE_F16C
    if (ember_half_f16c())
        to_half_f16c(in, out, n, &i);
#endif
    for (; i < n; i++)
        out[i] = ember_float_to_half(in[i]);
}

void ember_float_to_half_in_place(void *buf, size_t n)
{
    size_t i = 0;
#ifdef HALF_HAVE_F16C
    /* Each step loads its 8 floats before it stores their 8 halves, below
     * every float still to be loaded (the intrinsics may alias anything). */
    if (ember_half_f16c())
        to_half_f16c(buf, buf, n, &i);
#endif
    /* The rest a block at a time: a block is read whole before its halves
     * are copied down over bytes already read (memcpy: no type punning). */
    enum {
        BLOCK = 256
    };
    uint16_t halves[BLOCK];
    float values[BLOCK];
    for (size_t c = i; c < n; c += BLOCK) {
        size_t len = n - c < BLOCK ? n - c : BLOCK;
        memcpy(values, (const char *)buf + c * sizeof(float), len * sizeof(float));
        for (size_t k = 0; k < len; k++)
            halves[k] = ember_float_to_half(values[k]);
        memcpy((char *)buf + c * sizeof(uint16_t), halves, len * sizeof(uint16_t));
    }
}

void ember_half_axpy(float *y, const uint16_t *x, float a, size_t n)
{
    size_t i = 0;
#ifdef HALF_HAVE_F16C
    if (ember_half_f16c())
        axpy_f16c(y, x, a, n, &i);
#endif
    for (; i < n; i++)
        y[i] += a * ember_half_to_float(x[i]);
}

void ember_half_add(float *y, const uint16_t *x, size_t n)
{
    ember_half_axpy(y, x, 1.0f, n); /* 1 * x is x exactly */
}
