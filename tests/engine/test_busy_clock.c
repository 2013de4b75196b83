/*
 * engine/busy_clock: ticks turned into seconds agree with CLOCK_MONOTONIC
 * over the same interval, with the TSC (where the kernel keeps time with
 * it) and without.  Not a timing test: both clocks time the same span.
 */
#include "common/clock.h"
#include "tests/engine/test_util.h"

#include <time.h>

static double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Time a 50 ms span with both clocks; the two must agree within 1%. */
static int span_agrees(ember_busy_clock_t *clock, const char *what)
{
    double start = monotonic();
    uint64_t ticks = ember_busy_clock_ticks(clock);
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 50000000};
    nanosleep(&pause, NULL);
    uint64_t end_ticks = ember_busy_clock_ticks(clock);
    double elapsed = monotonic() - start;
    double seconds = ember_busy_clock_seconds(clock, end_ticks - ticks);
    CHECK(seconds > 0.99 * elapsed - 1e-5 && seconds < 1.01 * elapsed + 1e-5,
          "%s: %.6f s by the busy clock, %.6f s by CLOCK_MONOTONIC", what, seconds, elapsed);
    return 0;
}

/* ember_busy_clock_now reads CLOCK_MONOTONIC's time: within 1 ms of it
 * after a 20 ms calibration, and still after a 50 ms pause. */
static int now_agrees(ember_busy_clock_t *clock, const char *what)
{
    for (int i = 0; i < 2; i++) {
        double busy = ember_busy_clock_now(clock), mono = monotonic();
        CHECK(busy > mono - 1e-3 && busy < mono + 1e-3,
              "%s: now %.6f s by the busy clock, %.6f s by CLOCK_MONOTONIC", what, busy, mono);
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 50000000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

static int case_convert(void)
{
    ember_busy_clock_t clock;
    ember_busy_clock_init(&clock);
    fprintf(stderr, "ticks are %s\n", clock.tsc ? "TSC cycles" : "nanoseconds");
    if (span_agrees(&clock, clock.tsc ? "TSC" : "monotonic"))
        return 1;
    ember_busy_clock_calibrate(&clock, 20e-3);
    if (now_agrees(&clock, clock.tsc ? "TSC" : "monotonic"))
        return 1;
    clock.tsc = 0; /* the fallback every machine has */
    return span_agrees(&clock, "monotonic") || now_agrees(&clock, "monotonic");
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"convert", case_convert},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
