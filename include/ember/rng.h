/*
 * ember: small, seedable, counter-friendly random numbers: the generator
 * every draw of ember's uses (its tables' initial rows, the tutorial's and
 * synthetic data), so a model draws its own data and weights exactly as
 * ember does.
 *
 * splitmix64 for streams (data generation) and a stateless hash of
 * (seed, counter) for values that must not depend on who computes them:
 * a table row's initial values are the same whatever the shard count
 * (row r, column c of a table of dim D is counter r * D + c:
 * ember_normal_at(seed, r * D + c) for EMBER_TABLE_INIT_NORMAL).
 *
 * Header-only (static inline): nothing to link, any thread, never blocks.
 */
#ifndef EMBER_RNG_H
#define EMBER_RNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* M_PI is POSIX, not C: the same double, spelled out for -std=c11.  The
 * powers of two are written out in decimal (exactly) for C++ before 17,
 * which has no hexadecimal floating literals. */
#define EMBER_RNG_PI     3.14159265358979323846
#define EMBER_RNG_2_M53  1.1102230246251565404236316680908203125e-16 /* 2^-53 */
#define EMBER_RNG_2_M24F 5.9604644775390625e-08f                     /* 2^-24 */

typedef struct {
    uint64_t state;
} ember_rng_t;

static inline uint64_t ember_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void ember_rng_seed(ember_rng_t *rng, uint64_t seed, uint64_t stream)
{
    rng->state = ember_mix64(seed ^ ember_mix64(stream + 0x9e3779b97f4a7c15ull));
}

static inline uint64_t ember_rng_next(ember_rng_t *rng)
{
    rng->state += 0x9e3779b97f4a7c15ull;
    return ember_mix64(rng->state);
}

/** Uniform integer in [lo, hi] (inclusive), as Python's random.randint. */
static inline int64_t ember_rng_int(ember_rng_t *rng, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(ember_rng_next(rng) % span);
}

/** Uniform double in [0, 1). */
static inline double ember_rng_uniform(ember_rng_t *rng)
{
    return (double)(ember_rng_next(rng) >> 11) * EMBER_RNG_2_M53;
}

/* Box-Muller on the uniform pair of (seed, @pair): counters 2 pair and
 * 2 pair + 1 take its cosine and sine halves.  In float, as PyTorch's CPU
 * normal_ for float tensors (u1 has 24 bits: |z| <= 5.77). */
static inline void ember_normal_pair(uint64_t seed, uint64_t pair, float *cos_half, float *sin_half)
{
    uint64_t h = ember_mix64(seed ^ ember_mix64(pair + 1));  /* two 24-bit draws */
    float u1 = ((float)(h >> 40) + 1.0f) * EMBER_RNG_2_M24F; /* (0, 1] */
    float u2 = (float)(h & 0xffffffu) * EMBER_RNG_2_M24F;    /* [0, 1) */
    float r = sqrtf(-2.0f * logf(u1)), theta = 2.0f * (float)EMBER_RNG_PI * u2;
    *cos_half = r * cosf(theta);
    *sin_half = r * sinf(theta);
}

/** Standard normal from a stateless (seed, counter) pair. */
static inline float ember_normal_at(uint64_t seed, uint64_t counter)
{
    float c, s;
    ember_normal_pair(seed, counter >> 1, &c, &s);
    return (counter & 1) ? s : c;
}

/** @out[i] = ember_normal_at(@seed, @first + i) for i < @n, each Box-Muller
 *  pair computed once (a table's initial values: half the log/sqrt calls). */
static inline void ember_normal_fill(uint64_t seed, uint64_t first, float *out, size_t n)
{
    size_t i = 0;
    if (n && (first & 1))
        out[i++] = ember_normal_at(seed, first);
    for (; i + 1 < n; i += 2) {
        float c, s;
        ember_normal_pair(seed, (first + i) >> 1, &c, &s);
        out[i] = c;
        out[i + 1] = s;
    }
    if (i < n)
        out[i] = ember_normal_at(seed, first + i);
}

/** @out[i] uniform in [-@bound, @bound) from a stateless (seed, @first + i)
 *  pair for i < @n: a 24-bit draw u per value, (2u - 1) * bound in float
 *  (its own counters: not the normal draws of the same seed). */
static inline void ember_uniform_fill(uint64_t seed, uint64_t first, float bound, float *out,
                                      size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t h = ember_mix64(seed ^ ember_mix64(first + i + 0x5851f42d4c957f2dull));
        float u = (float)(h >> 40) * EMBER_RNG_2_M24F; /* [0, 1) */
        out[i] = (2.0f * u - 1.0f) * bound;
    }
}

#ifdef __cplusplus
}
#endif
#endif
