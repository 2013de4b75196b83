/*
 * common/log_limit: log lines that someone outside the job can cause,
 * limited, with counts.
 *
 * An outsider on the network can make a rank log (a message for no handler
 * that UCX warns about, a refused handshake, a store request without the
 * secret) as fast as it can send.  Such a line goes through here, keyed by
 * its call site (file and line: ember's own with ember_warn_limited, UCX's
 * through the handler transport/worker.c installs):
 *
 *   - a site prints its first EMBER_LOG_LIMIT_BURST lines as they come;
 *     the last of them says that more are limited;
 *   - after that at most one line per interval (10 s at first, doubling
 *     each time up to an hour, so a flood of a day costs a site about 30
 *     lines) prints, with how many like it were suppressed since the last;
 *   - ember_log_limited_summary prints, for every site, the count still
 *     unsaid with its last line: the transport calls it when it closes,
 *     and it runs at exit.
 *
 * At most EMBER_LOG_LIMIT_SITES sites are told apart (the rest share one)
 * and a line is cut at EMBER_LOG_LIMIT_LINE bytes, so a flood of any one
 * kind costs a few KB of log, and all of them together some tens of KB.
 *
 * Threads: any thread may call these (the store serves on a thread of its
 * own, UCX logs from its async thread); one lock is taken per limited line,
 * never on ember_log_emit's own path.  Nothing here fails or blocks but on
 * that lock and on stderr.
 */
#ifndef EMBER_COMMON_LOG_LIMIT_H
#define EMBER_COMMON_LOG_LIMIT_H

#include <ember/log.h>

#include <stdarg.h>

#define EMBER_LOG_LIMIT_BURST 10
#define EMBER_LOG_LIMIT_SITES 32
#define EMBER_LOG_LIMIT_LINE  512
#define EMBER_LOG_LIMIT_FIRST 10.0   /* seconds between count lines at first */
#define EMBER_LOG_LIMIT_LAST  3600.0 /* ... doubling up to this */

/* One line of the site @file:@line (both borrowed for the call, @file is
 * compared by its text), limited as above.  The caller checks the level
 * (the macros below do). */
void ember_log_limited(const char *file, unsigned line, ember_log_level_t level, const char *subsys,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void ember_log_limitedv(const char *file, unsigned line, ember_log_level_t level,
                        const char *subsys, const char *fmt, va_list ap)
        __attribute__((format(printf, 5, 0)));

/* Every site's suppressed lines not yet counted in the log, one line each;
 * a site with none prints nothing. */
void ember_log_limited_summary(void);

/* Tests: the clock the limiter reads (NULL: the monotonic clock), and
 * forget every site. */
void ember_log_limit_clock(double (*now)(void));
void ember_log_limit_reset(void);

#define EMBER_LOG_LIMITED_(lvl, subsys, ...)                                     \
    do {                                                                         \
        if ((lvl) <= ember_log_level())                                          \
            ember_log_limited(__FILE__, __LINE__, (lvl), (subsys), __VA_ARGS__); \
    } while (0)

#define ember_error_limited(subsys, ...) EMBER_LOG_LIMITED_(EMBER_LOG_ERROR, subsys, __VA_ARGS__)
#define ember_warn_limited(subsys, ...)  EMBER_LOG_LIMITED_(EMBER_LOG_WARN, subsys, __VA_ARGS__)

#endif
