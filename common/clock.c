/* common/clock: see the header. */
#include "common/clock.h"

#include <stdio.h>
#include <string.h>

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether the kernel keeps time with the TSC (it then vouches for it). */
static int kernel_uses_tsc(void)
{
    char name[32] = "";
    FILE *file = fopen("/sys/devices/system/clocksource/clocksource0/"
                       "current_clocksource",
                       "r");
    if (!file)
        return 0;
    if (!fgets(name, sizeof(name), file))
        name[0] = '\0';
    fclose(file);
    return strcmp(name, "tsc\n") == 0 || strcmp(name, "tsc") == 0;
}

void ember_busy_clock_init(ember_busy_clock_t *clock)
{
    memset(clock, 0, sizeof(*clock));
#if defined(__x86_64__)
    clock->tsc = kernel_uses_tsc();
    if (clock->tsc) {
        clock->t0 = monotonic_now();
        clock->tsc0 = __rdtsc();
        /* A first rate over 2 ms, for counters read right after start. */
        ember_busy_clock_calibrate(clock, 2e-3);
    }
#endif
}

void ember_busy_clock_calibrate(ember_busy_clock_t *clock, double seconds)
{
#if defined(__x86_64__)
    if (!clock->tsc)
        return;
    double t;
    while ((t = monotonic_now()) - clock->t0 < seconds)
        ;
    clock->tsc_per_s = (double)(__rdtsc() - clock->tsc0) / (t - clock->t0);
    if (clock->tsc_per_s <= 0.0)
        clock->tsc = 0;
#else
    (void)clock;
    (void)seconds;
#endif
}

double ember_busy_clock_seconds(const ember_busy_clock_t *clock, uint64_t ticks)
{
    if (!clock->tsc)
        return (double)ticks * 1e-9;
#if defined(__x86_64__)
    /* The longer the baseline, the better the rate: use all of it. */
    double elapsed = monotonic_now() - clock->t0;
    uint64_t cycles = __rdtsc() - clock->tsc0;
    double rate = elapsed > 0.1 ? (double)cycles / elapsed : clock->tsc_per_s;
    return (double)ticks / rate;
#else
    return (double)ticks * 1e-9;
#endif
}
