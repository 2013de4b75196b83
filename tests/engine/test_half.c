/*
 * tests/engine/test_half: fp16 storage (engine/ops/half.c).
 *
 *   widen_all: every one of the 65536 fp16 values widens to the fp32 value
 *   the compiler's own _Float16 gives (NaNs: a quiet NaN of the same sign
 *   and payload) and rounds back to itself.
 *   rounding: fp32 -> fp16 against _Float16 over the boundary cases (ties
 *   to even at every scale, 65504/65520, subnormals, 2^-25, signed zeros,
 *   inf, NaN) and 4 million random values of every exponent.
 *   f16c_same: the F16C path and the portable one give the same bits for
 *   every conversion, the pooling kernels (axpy, add) and the fp16 SGD row
 *   update (which is the fp32 update rounded), lengths 0-70.
 */
#include "engine/ops/half.h"

#include "test_util.h"

#include <stdlib.h>

#if defined(__FLT16_MAX__)
#define HAVE_FLOAT16 1
#endif

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float float_of(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* The compiler's conversions, where it has _Float16: an independent
 * reference (libgcc's soft-float rounding). */
#ifdef HAVE_FLOAT16
static uint16_t ref_to_half(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

static float ref_to_float(uint16_t b)
{
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}
#endif

static int is_nan16(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

static int case_widen_all(void)
{
    ember_half_force(0);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ember_half_to_float((uint16_t)h);
        uint16_t back = ember_float_to_half(f);
        if (is_nan16((uint16_t)h)) {
            CHECK(f != f, "%#06x widened to a number", h);
            CHECK(back == (h | 0x200u), "NaN %#06x came back as %#06x", h, back);
            continue;
        }
        CHECK(back == h, "%#06x -> %a -> %#06x", h, (double)f, back);
#ifdef HAVE_FLOAT16
        CHECK(bits_of(f) == bits_of(ref_to_float((uint16_t)h)), "%#06x: %a, _Float16 %a", h,
              (double)f, (double)ref_to_float((uint16_t)h));
#endif
    }
    CHECK(ember_half_to_float(0x3c00) == 1.0f && ember_half_to_float(0x7bff) == 65504.0f &&
                  ember_half_to_float(0x0001) == ldexpf(1.0f, -24) &&
                  ember_half_to_float(0xc000) == -2.0f,
          "known values");
    ember_half_force(-1);
    return 0;
}

static int check_round(float f)
{
    uint16_t h = ember_float_to_half(f);
#ifdef HAVE_FLOAT16
    uint16_t want = ref_to_half(f);
    if (f != f)
        want = (uint16_t)(want | 0x200u); /* both quiet */
    CHECK(h == want, "%a (%#010x) -> %#06x, _Float16 %#06x", (double)f, bits_of(f), h, want);
#else
    (void)h;
#endif
    return 0;
}

static int case_rounding(void)
{
    static const struct {
        float f;
        uint16_t h;
    } known[] = {
            {0.0f, 0x0000},
            {-0.0f, 0x8000},
            {1.0f, 0x3c00},
            {65504.0f, 0x7bff},
            {65519.996f, 0x7bff},
            {65520.0f, 0x7c00},
            {-65520.0f, 0xfc00},
            {1e10f, 0x7c00},
            {0x1p-24f, 0x0001},
            {0x1p-25f, 0x0000},
            {0x1.000002p-25f, 0x0001},
            {0x1.8p-24f, 0x0002},
            {0x1.4p-24f, 0x0001},
            {0x1p-14f, 0x0400},
            {0x1.ffcp-15f, 0x0400},
            {1.0f + 0x1p-11f, 0x3c00},     /* tie, even below */
            {1.0f + 0x3p-11f, 0x3c02},     /* tie, even above */
            {1.0f + 0x1.004p-11f, 0x3c01}, /* just past the tie */
            {2047.5f, 0x6800},
            {2046.5f, 0x67fe},
    };
    ember_half_force(0);
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        uint16_t h = ember_float_to_half(known[i].f);
        CHECK(h == known[i].h, "%a -> %#06x, want %#06x", (double)known[i].f, h, known[i].h);
        if (check_round(known[i].f))
            return 1;
    }
    CHECK(ember_float_to_half(INFINITY) == 0x7c00 && ember_float_to_half(-INFINITY) == 0xfc00,
          "infinities");
    CHECK(is_nan16(ember_float_to_half(NAN)), "NaN");
    /* Every tie and its neighbours at every fp16 exponent, both signs. */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        uint32_t lo = bits_of(ember_half_to_float((uint16_t)h));
        uint32_t hi = bits_of(ember_half_to_float((uint16_t)(h + 1)));
        uint32_t mid = lo + (hi - lo) / 2;
        for (int64_t d = -1; d <= 1; d++) {
            float f = float_of((uint32_t)((int64_t)mid + d));
            if (check_round(f) || check_round(-f))
                return 1;
        }
    }
    uint64_t rng = 42;
    for (int i = 0; i < 4000000; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(rng >> 32);
        /* Exponents around fp16's range are the interesting ones. */
        if (i & 1)
            b = (b & 0x807fffffu) | ((uint32_t)(95 + (rng >> 20) % 50) << 23);
        if (check_round(float_of(b)))
            return 1;
    }
    ember_half_force(-1);
    return 0;
}

enum {
    F16C_N = 70
};

/* Every half widens to the same bits either way. */
static int f16c_widen_all(void)
{
    static uint16_t all[65536];
    static float wide_fast[65536], wide_slow[65536];
    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    ember_half_force(1);
    ember_half_to_float_n(all, wide_fast, 65536);
    ember_half_force(0);
    ember_half_to_float_n(all, wide_slow, 65536);
    for (uint32_t h = 0; h < 65536; h++)
        CHECK(bits_of(wide_fast[h]) == bits_of(wide_slow[h]), "%#06x: F16C %#010x, portable %#010x",
              h, bits_of(wide_fast[h]), bits_of(wide_slow[h]));
    return 0;
}

/* A round's floats @x (mostly ones fp16 can hold unless @round % 3 == 0),
 * gradients @y0 and halves @xs. */
static void f16c_draw(int round, uint64_t *rng, float *x, float *y0, uint16_t *xs)
{
    for (size_t i = 0; i < F16C_N; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(*rng >> 32);
        if (round % 3 != 0)
            b = (b & 0x807fffffu) | ((uint32_t)(98 + (*rng >> 20) % 34) << 23);
        x[i] = float_of(b);
        y0[i] = (float)test_uniform(rng, -4.0, 4.0);
        xs[i] = (uint16_t)(*rng >> 16);
    }
}

static int f16c_narrow(const float *x, size_t n)
{
    uint16_t h_fast[F16C_N], h_slow[F16C_N];
    ember_half_force(1);
    ember_float_to_half_n(x, h_fast, n);
    ember_half_force(0);
    ember_float_to_half_n(x, h_slow, n);
    for (size_t i = 0; i < n; i++)
        CHECK(h_fast[i] == h_slow[i], "%a: F16C %#06x, portable %#06x", (double)x[i], h_fast[i],
              h_slow[i]);
    return 0;
}

/* The SGD step on n halves: the same either way, the fp32 step rounded
 * once, nothing written past n. */
static int f16c_sgd(const uint16_t *xs, const float *y0, uint64_t *rng, size_t n)
{
    uint16_t w_fast[F16C_N], w_slow[F16C_N];
    float lr = (float)test_uniform(rng, 0.0, 2.0);
    memcpy(w_fast, xs, sizeof(w_fast));
    memcpy(w_slow, xs, sizeof(w_slow));
    ember_half_force(1);
    ember_half_sgd(w_fast, y0, lr, n);
    ember_half_force(0);
    ember_half_sgd(w_slow, y0, lr, n);
    for (size_t i = 0; i < F16C_N; i++) {
        float want = ember_half_to_float(xs[i]) - lr * y0[i];
        CHECK(w_fast[i] == w_slow[i] || (is_nan16(w_fast[i]) && is_nan16(w_slow[i])),
              "sgd n %zu [%zu]: F16C %#06x, portable %#06x", n, i, w_fast[i], w_slow[i]);
        CHECK(i >= n || w_slow[i] == ember_float_to_half(want) || want != want,
              "sgd [%zu]: %#06x, want %#06x", i, w_slow[i], ember_float_to_half(want));
        CHECK(i < n || w_slow[i] == xs[i], "sgd wrote past n at %zu", i);
    }
    return 0;
}

/* Halves added (or scaled and added) into floats: the same bits either way. */
static int f16c_add_axpy(const uint16_t *xs, const float *y0, uint64_t *rng, size_t n)
{
    float y_fast[F16C_N], y_slow[F16C_N];
    for (int add = 0; add <= 1; add++) {
        float a = add ? 1.0f : (float)test_uniform(rng, -3.0, 3.0);
        memcpy(y_fast, y0, sizeof(y_fast));
        memcpy(y_slow, y0, sizeof(y_slow));
        for (int fast = 0; fast <= 1; fast++) {
            float *y = fast ? y_fast : y_slow;
            ember_half_force(fast);
            if (add)
                ember_half_add(y, xs, n);
            else
                ember_half_axpy(y, xs, a, n);
        }
        for (size_t i = 0; i < F16C_N; i++)
            CHECK(bits_of(y_fast[i]) == bits_of(y_slow[i]) ||
                          (y_fast[i] != y_fast[i] && y_slow[i] != y_slow[i]),
                  "%s n %zu [%zu]: F16C %a, portable %a", add ? "add" : "axpy", n, i,
                  (double)y_fast[i], (double)y_slow[i]);
    }
    return 0;
}

static int case_f16c_same(void)
{
    ember_half_force(1);
    if (!ember_half_f16c()) {
        fprintf(stderr, "this CPU has no F16C: only the portable path exists\n");
        ember_half_force(-1);
        return 0;
    }
    if (f16c_widen_all())
        return 1;
    uint64_t rng = 7;
    float x[F16C_N], y0[F16C_N];
    uint16_t xs[F16C_N];
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)round % (F16C_N + 1);
        f16c_draw(round, &rng, x, y0, xs);
        if (f16c_narrow(x, n) || f16c_sgd(xs, y0, &rng, n) || f16c_add_axpy(xs, y0, &rng, n))
            return 1;
    }
    ember_half_force(-1);
    return 0;
}

/* A reply narrowed in its own buffer: the same halves as a copy, every
 * length to past two blocks, F16C and portable, nothing written past the
 * floats. */
static int case_in_place(void)
{
    uint64_t rng = 9;
    for (int fast = 0; fast <= 1; fast++)
        for (size_t n = 0; n <= 600; n++) {
            ember_half_force(fast);
            float values[601] = {0}, buf[601];
            uint16_t want[601];
            for (size_t i = 0; i < n; i++)
                values[i] = (float)test_uniform(&rng, -70000.0, 70000.0) * (i % 3 ? 1e-4f : 1.0f);
            ember_float_to_half_n(values, want, n);
            memcpy(buf, values, n * sizeof(float));
            buf[n] = 12345.0f; /* a guard past the floats */
            ember_float_to_half_in_place(buf, n);
            CHECK(memcmp(buf, want, n * sizeof(uint16_t)) == 0, "n %zu: halves differ", n);
            CHECK(buf[n] == 12345.0f, "n %zu: wrote past the floats", n);
        }
    ember_half_force(-1);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"widen_all", case_widen_all},
            {"rounding", case_rounding},
            {"f16c_same", case_f16c_same},
            {"in_place", case_in_place},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
