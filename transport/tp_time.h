/* transport: monotonic time in seconds, shared by deadlines and waits. */
#ifndef EMBER_TP_TIME_H
#define EMBER_TP_TIME_H

#include <time.h>

static inline double tp_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Cheap and a clock tick coarse (a few ms): for deadlines and timers that
 * are checked on every progress pass.  Same time base as tp_time_now. */
static inline double tp_time_coarse(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * How far tp_time_coarse() may lag tp_time_now(): a tick when the timekeeping
 * CPU runs, several when a VM's vCPU is held off (4 ms ticks lagged by up to
 * 16 ms on this project's 2-vCPU VM with both vCPUs busy).  A deadline set
 * on the coarse clock starts this much later, so that it never fires early;
 * it may fire that much late.
 */
#define TP_COARSE_LAG_MIN_S 0.05
static inline double tp_time_coarse_lag(void)
{
    struct timespec ts;
    double tick = clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0
                      ? 0.01
                      : (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return 4 * tick > TP_COARSE_LAG_MIN_S ? 4 * tick : TP_COARSE_LAG_MIN_S;
}

static inline void tp_time_sleep(double seconds)
{
    struct timespec ts = {.tv_sec = (time_t)seconds,
                          .tv_nsec = (long)((seconds - (double)(time_t)seconds) *
                                            1e9)};
    nanosleep(&ts, NULL);
}

#endif
