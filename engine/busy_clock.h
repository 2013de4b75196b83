/*
 * engine/busy_clock: cheap timestamps for a server's own service-time
 * counters (the PS's lookup and gradient seconds).
 *
 * clock_gettime is the dearest step of a small request's bookkeeping on a
 * KVM guest (more than a TSC read; `perf` showed it), and the PS read it
 * twice per request, on the path of every reply.  Where the kernel itself keeps time
 * with the TSC (so the TSC is constant and synchronised), the TSC is read
 * instead and turned into seconds only when the counters are read, against
 * the monotonic clock over the whole time since init.  Elsewhere the ticks
 * are nanoseconds of CLOCK_MONOTONIC.
 */
#ifndef EMBER_ENGINE_BUSY_CLOCK_H
#define EMBER_ENGINE_BUSY_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

typedef struct {
    int tsc;          /* ticks are TSC cycles, else nanoseconds */
    uint64_t tsc0;    /* TSC and monotonic time at init */
    double t0;
    double tsc_per_s; /* from a short calibration at init */
} ember_busy_clock_t;

void ember_busy_clock_init(ember_busy_clock_t *clock);

static inline uint64_t ember_busy_clock_ticks(const ember_busy_clock_t *clock)
{
#if defined(__x86_64__)
    if (clock->tsc)
        return __rdtsc();
#endif
    (void)clock;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* @ticks (a difference of ember_busy_clock_ticks) in seconds. */
double ember_busy_clock_seconds(const ember_busy_clock_t *clock, uint64_t ticks);

/* Calibrate the TSC rate over @seconds since init (spins until then): for a
 * clock that also reads absolute time (ember_busy_clock_now). */
void ember_busy_clock_calibrate(ember_busy_clock_t *clock, double seconds);

/* Now, in seconds on CLOCK_MONOTONIC's time base, at the calibrated rate. */
static inline double ember_busy_clock_now(const ember_busy_clock_t *clock)
{
    uint64_t ticks = ember_busy_clock_ticks(clock);
    if (!clock->tsc)
        return (double)ticks * 1e-9;
    return clock->t0 + (double)(int64_t)(ticks - clock->tsc0) / clock->tsc_per_s;
}

/* About how many ticks make @seconds (the rate of the calibration at init:
 * for intervals such as "a few times a second", not for measurements). */
static inline uint64_t ember_busy_clock_ticks_for(const ember_busy_clock_t *clock,
                                                  double seconds)
{
    return (uint64_t)(seconds * (clock->tsc ? clock->tsc_per_s : 1e9));
}

#endif
