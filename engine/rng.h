/*
 * engine/rng: small, seedable, counter-friendly random numbers.
 *
 * splitmix64 for streams (data generation) and a stateless hash of
 * (seed, counter) for values that must not depend on who computes them:
 * a table row's initial values are the same whatever the shard count.
 */
#ifndef EMBER_ENGINE_RNG_H
#define EMBER_ENGINE_RNG_H

#include <math.h>
#include <stdint.h>

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
    return (double)(ember_rng_next(rng) >> 11) * 0x1.0p-53;
}

/** Standard normal from a stateless (seed, counter) pair (Box-Muller). */
static inline float ember_normal_at(uint64_t seed, uint64_t counter)
{
    uint64_t a = ember_mix64(seed ^ ember_mix64(2 * counter + 1));
    uint64_t b = ember_mix64(seed ^ ember_mix64(2 * counter + 2));
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

#endif
