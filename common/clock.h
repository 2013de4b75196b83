/*
 * common/clock: monotonic time in seconds (ember_time_*: deadlines, waits),
 * and the busy clock: cheap timestamps for a server's own service-time
 * counters (the PS's lookup and gradient seconds).
 *
 * clock_gettime can be the dearest step of a small request's bookkeeping
 * (on a virtual machine it costs more than a TSC read), and the PS reads
 * the clock twice per request, on the path of every reply.  Where the
 * kernel itself keeps time with the TSC (so the TSC is constant and
 * synchronised), the TSC is read instead and turned into seconds only when
 * the counters are read, against the monotonic clock over the whole time
 * since init.  Elsewhere the ticks are nanoseconds of CLOCK_MONOTONIC.
 */
#ifndef EMBER_COMMON_CLOCK_H
#define EMBER_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* ---- monotonic time (deadlines, waits, timers) ---- */
static inline double ember_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Cheap and a clock tick coarse (a few ms): for deadlines and timers that
 * are checked on every progress pass.  Same time base as ember_time_now. */
static inline double ember_time_coarse(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * How far ember_time_coarse() may lag ember_time_now(): a tick when the
 * timekeeping CPU runs, several when a busy VM's vCPU is held off.  A
 * deadline set on the coarse clock starts this much later, so that it never
 * fires early; it may fire that much late.
 */
#define EMBER_TIME_COARSE_LAG_MIN_S 0.05
static inline double ember_time_coarse_lag(void)
{
    struct timespec ts;
    double tick = clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0
                          ? 0.01
                          : (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return 4 * tick > EMBER_TIME_COARSE_LAG_MIN_S ? 4 * tick : EMBER_TIME_COARSE_LAG_MIN_S;
}

static inline void ember_time_sleep(double seconds)
{
    struct timespec ts = {.tv_sec = (time_t)seconds,
                          .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- the busy clock ---- */

typedef struct {
    int tsc;       /* ticks are TSC cycles, else nanoseconds */
    uint64_t tsc0; /* TSC and monotonic time at init */
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
static inline uint64_t ember_busy_clock_ticks_for(const ember_busy_clock_t *clock, double seconds)
{
    return (uint64_t)(seconds * (clock->tsc ? clock->tsc_per_s : 1e9));
}

#endif
