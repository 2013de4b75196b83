/*
 * tests/engine/test_log: the limit on log lines an outsider can cause
 * (common/log_limit.h), on a clock the test moves.
 *
 *   limit_burst     a site prints its first 10 lines, the 10th saying more
 *                   are limited; 10,000 more at once print nothing
 *   limit_interval  after the first interval the next line prints with the
 *                   count of those suppressed since; the interval then
 *                   doubles (20 s) and never passes an hour; the summary
 *                   prints what is still uncounted, with the total, once
 *   limit_sites     sites are told apart by file and line (the same text
 *                   at another line is another site); past 32 sites the
 *                   rest share one, so 100 sites print at most 33 bursts
 *   limit_threads   8 threads log 5,000 lines each at one site: 10 lines,
 *                   whole, and the summary counts the other 39,990
 *   limit_quiet     a site that never passes its burst has no summary
 */
#include "common/log_limit.h"

#include "test_util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static double fake_now;

static double fake_clock(void)
{
    return fake_now;
}

static FILE *captured;
static int saved_stderr = -1;

/* stderr into a temporary file, on the fake clock, no site known. */
static void capture_start(void)
{
    captured = tmpfile();
    saved_stderr = dup(STDERR_FILENO);
    dup2(fileno(captured), STDERR_FILENO);
    fake_now = 1000.0;
    ember_log_limit_clock(fake_clock);
    ember_log_limit_reset();
}

/* Everything logged since capture_start (malloc'ed); stderr back. */
static char *capture_take(void)
{
    off_t size = lseek(fileno(captured), 0, SEEK_END);
    char *text = calloc(1, (size_t)size + 1);
    if (text && pread(fileno(captured), text, (size_t)size, 0) != size)
        text[0] = '\0';
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    fclose(captured);
    return text;
}

/* How many times @needle occurs in @text. */
static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *at = text; (at = strstr(at, needle)) != NULL; at += strlen(needle))
        n++;
    return n;
}

static void site_a(int i)
{
    ember_log_limited("flood.c", 10, EMBER_LOG_WARN, "test", "flood line %d", i);
}

static int case_limit_burst(void)
{
    capture_start();
    for (int i = 0; i < 10010; i++)
        site_a(i);
    char *text = capture_take();
    CHECK(count_of(text, "\n") == 10, "%d lines:\n%s", count_of(text, "\n"), text);
    CHECK(count_of(text, "flood line 9 [more like this: one line per 10 s") == 1, "%s", text);
    CHECK(!strstr(text, "flood line 10"), "the 11th line printed:\n%s", text);
    free(text);
    return 0;
}

static int case_limit_interval(void)
{
    capture_start();
    for (int i = 0; i < 1000; i++)
        site_a(i);
    fake_now += 9.9;
    site_a(1000); /* within the interval: counted */
    fake_now += 0.2;
    site_a(1001); /* the interval's line: 990 + 1 suppressed before it */
    fake_now += 15;
    site_a(1002); /* the next interval is 20 s */
    fake_now += 6;
    site_a(1003);
    for (int i = 0; i < 20; i++) { /* 10, 20, ... an hour, an hour */
        fake_now += 4000;
        site_a(2000 + i);
        site_a(3000 + i); /* suppressed: the interval just began */
    }
    fake_now += 3599;
    site_a(9999);
    ember_log_limited_summary();
    ember_log_limited_summary(); /* nothing new: nothing printed */
    char *text = capture_take();
    CHECK(strstr(text, "flood line 1001 [991 more like this suppressed in the last 10 s]"), "%s",
          text);
    CHECK(strstr(text, "flood line 1003 [1 more like this suppressed in the last 21 s]"), "%s",
          text);
    CHECK(!strstr(text, "flood line 1002"), "%s", text);
    CHECK(strstr(text, "flood line 2019 [1 more like this suppressed in the last 4000 s]"), "%s",
          text);
    CHECK(!strstr(text, "flood line 9999 ["), "an interval past an hour:\n%s", text);
    CHECK(count_of(text, "suppressed 2 more like this (1013 in all) since: flood line 2019") == 1,
          "%s", text);
    CHECK(count_of(text, "\n") == 10 + 2 + 20 + 1, "%d lines:\n%s", count_of(text, "\n"), text);
    free(text);
    return 0;
}

static int case_limit_sites(void)
{
    capture_start();
    for (int round = 0; round < 20; round++) {
        ember_log_limited("a.c", 7, EMBER_LOG_WARN, "test", "same text");
        ember_log_limited("a.c", 8, EMBER_LOG_WARN, "test", "same text");
        ember_log_limited("dir/b.c", 7, EMBER_LOG_WARN, "test", "same text");
    }
    char *text = capture_take();
    CHECK(count_of(text, "\n") == 30, "three sites, %d lines:\n%s", count_of(text, "\n"), text);
    free(text);

    capture_start();
    for (int round = 0; round < 50; round++)
        for (unsigned line = 1; line <= 100; line++)
            ember_log_limited("many.c", line, EMBER_LOG_WARN, "test", "site %u", line);
    ember_log_limited_summary();
    text = capture_take();
    int lines = count_of(text, "\n");
    CHECK(lines == 33 * 10 + 33, "100 sites, %d lines (want 33 bursts and summaries)", lines);
    CHECK(count_of(text, "(40 in all)") == 32 && count_of(text, "(3390 in all)") == 1,
          "the summaries' totals:\n%s", text);
    free(text);
    return 0;
}

static void *flood_thread(void *arg)
{
    for (int i = 0; i < 5000; i++)
        ember_log_limited("threads.c", 1, EMBER_LOG_WARN, "test",
                          "from thread %ld, a line long enough to tear if written in pieces "
                          "................................................................",
                          (long)(intptr_t)arg);
    return NULL;
}

static int case_limit_threads(void)
{
    pthread_t threads[8];
    capture_start();
    for (long t = 0; t < 8; t++)
        pthread_create(&threads[t], NULL, flood_thread, (void *)(intptr_t)t);
    for (int t = 0; t < 8; t++)
        pthread_join(threads[t], NULL);
    ember_log_limited_summary();
    char *text = capture_take();
    CHECK(count_of(text, "\n") == 11, "%d lines:\n%s", count_of(text, "\n"), text);
    CHECK(count_of(text, "......\n") == 10 && count_of(text, "with counts]\n") == 1,
          "torn lines:\n%s", text);
    CHECK(count_of(text, "suppressed 39990 more like this (39990 in all)") == 1, "%s", text);
    free(text);
    return 0;
}

static int case_limit_quiet(void)
{
    capture_start();
    for (int i = 0; i < 10; i++)
        site_a(i);
    ember_log_limited_summary();
    char *text = capture_take();
    CHECK(count_of(text, "\n") == 10 && !strstr(text, "suppressed"), "%s", text);
    free(text);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"limit_burst", case_limit_burst}, {"limit_interval", case_limit_interval},
            {"limit_sites", case_limit_sites}, {"limit_threads", case_limit_threads},
            {"limit_quiet", case_limit_quiet},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
