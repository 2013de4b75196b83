/* ember: log lines `host:pid:rank [subsys] level message`, and the limit on
 * those an outsider can cause (common/log_limit.h). */
#include "common/clock.h"
#include "common/log_limit.h"

#include <ember/config.h>
#include <ember/log.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static ember_log_level_t log_threshold = EMBER_LOG_INFO;
static int log_rank = -1;
static char log_host[64];

static const char *const level_names[] = {"FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

/* The message of the last error this thread logged (ember_log_last_error):
 * what a binding puts in the exception it raises for the failed call. */
static __thread char last_error[1024];

const char *ember_log_last_error(void)
{
    return last_error;
}

void ember_log_clear_error(void)
{
    last_error[0] = '\0';
}

void ember_log_set_rank(int rank)
{
    log_rank = rank;
}

ember_log_level_t ember_log_level(void)
{
    return log_threshold;
}

void ember_log_init(void)
{
    const char *value = ember_config_str("EMBER_LOG_LEVEL");
    for (int i = 0; i <= EMBER_LOG_TRACE; i++) {
        if (value && strcasecmp(value, level_names[i]) == 0)
            log_threshold = (ember_log_level_t)i;
    }
}

void ember_log_emit(ember_log_level_t level, const char *subsys, const char *fmt, ...)
{
    char line[2048];
    int len;
    va_list ap;

    if (log_host[0] == '\0') {
        if (gethostname(log_host, sizeof(log_host) - 1) != 0)
            strcpy(log_host, "?");
        char *dot = strchr(log_host, '.');
        if (dot)
            *dot = '\0';
    }
    len = snprintf(line, sizeof(line), "%s:%d:%d [%s] %s ", log_host, (int)getpid(), log_rank,
                   subsys, level_names[level]);
    const int prefix = len >= 0 && (size_t)len < sizeof(line) ? len : 0;
    va_start(ap, fmt);
    if (len >= 0 && (size_t)len < sizeof(line))
        len += vsnprintf(line + len, sizeof(line) - (size_t)len, fmt, ap);
    va_end(ap);
    if (len < 0)
        return;
    if (level <= EMBER_LOG_ERROR) {
        const size_t keep = strnlen(line + prefix, sizeof(last_error) - 1);
        memcpy(last_error, line + prefix, keep);
        last_error[keep] = '\0';
    }
    if ((size_t)len >= sizeof(line) - 1)
        len = (int)sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line so lines from concurrent ranks never interleave. */
    ssize_t rc = write(STDERR_FILENO, line, (size_t)len);
    (void)rc;
}

/* ---- lines an outsider can cause, limited with counts (log_limit.h) ---- */

typedef struct {
    uint64_t file_hash; /* of the call site's file name, with its line */
    unsigned line;
    int used;
    ember_log_level_t level;
    char subsys[16];
    unsigned long printed;    /* lines printed in the first burst */
    unsigned long suppressed; /* since the last line that counted them */
    unsigned long total;      /* suppressed in all */
    double interval, next_report, shown_at;
    char last[EMBER_LOG_LIMIT_LINE]; /* the last line printed, for the summary */
} limit_site_t;

/* The sites, and one more that all the others share once they are full. */
static limit_site_t limit_sites[EMBER_LOG_LIMIT_SITES + 1];
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;
static double (*limit_now)(void) = ember_time_coarse;

typedef enum {
    LIMIT_PRINT,      /* within the burst */
    LIMIT_PRINT_LAST, /* the burst's last line */
    LIMIT_COUNT,      /* suppressed, counted */
    LIMIT_REPORT      /* an interval's line, with the count */
} limit_verdict_t;

void ember_log_limit_clock(double (*now)(void))
{
    limit_now = now ? now : ember_time_coarse;
}

void ember_log_limit_reset(void)
{
    pthread_mutex_lock(&limit_lock);
    memset(limit_sites, 0, sizeof(limit_sites));
    pthread_mutex_unlock(&limit_lock);
}

/* FNV-1a: sites are told apart by their file's text, not its pointer. */
static uint64_t file_hash(const char *file)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    for (const unsigned char *c = (const unsigned char *)(file ? file : ""); *c; c++)
        hash = (hash ^ *c) * 0x100000001b3ull;
    return hash;
}

/* The site of @hash:@line, taken when new; the shared last one when every
 * other is taken.  Under limit_lock. */
static limit_site_t *limit_site(uint64_t hash, unsigned line, ember_log_level_t level,
                                const char *subsys)
{
    limit_site_t *site = &limit_sites[EMBER_LOG_LIMIT_SITES];
    for (int i = 0; i < EMBER_LOG_LIMIT_SITES; i++) {
        if (!limit_sites[i].used) {
            site = &limit_sites[i];
            break;
        }
        if (limit_sites[i].file_hash == hash && limit_sites[i].line == line)
            return &limit_sites[i];
    }
    if (!site->used) {
        site->used = 1;
        site->file_hash = hash;
        site->line = line;
        site->level = level;
        snprintf(site->subsys, sizeof(site->subsys), "%s", subsys);
        site->interval = EMBER_LOG_LIMIT_FIRST;
    }
    return site;
}

/* Whether the site's line at @now prints; @counted_p: the suppressed lines
 * an interval's line reports, @since_p the seconds they came in.  Under
 * limit_lock. */
static limit_verdict_t limit_verdict(limit_site_t *site, double now, unsigned long *counted_p,
                                     double *since_p)
{
    if (site->printed < EMBER_LOG_LIMIT_BURST) {
        site->shown_at = now;
        if (++site->printed < EMBER_LOG_LIMIT_BURST)
            return LIMIT_PRINT;
        site->next_report = now + site->interval;
        return LIMIT_PRINT_LAST;
    }
    if (now < site->next_report) {
        site->suppressed++;
        site->total++;
        return LIMIT_COUNT;
    }
    *counted_p = site->suppressed;
    *since_p = now - site->shown_at;
    site->suppressed = 0;
    site->shown_at = now;
    /* Doubling: a flood that goes on for days costs a line an hour. */
    site->interval =
            site->interval * 2 < EMBER_LOG_LIMIT_LAST ? site->interval * 2 : EMBER_LOG_LIMIT_LAST;
    site->next_report = now + site->interval;
    return *counted_p ? LIMIT_REPORT : LIMIT_PRINT;
}

static void limit_at_exit(void)
{
    atexit(ember_log_limited_summary);
}

void ember_log_limitedv(const char *file, unsigned line, ember_log_level_t level,
                        const char *subsys, const char *fmt, va_list ap)
{
    char text[EMBER_LOG_LIMIT_LINE];
    unsigned long counted = 0;
    double since = 0.0;
    uint64_t hash = file_hash(file);

    pthread_once(&limit_once, limit_at_exit);
    pthread_mutex_lock(&limit_lock);
    limit_site_t *site = limit_site(hash, line, level, subsys);
    limit_verdict_t verdict = limit_verdict(site, limit_now(), &counted, &since);
    if (verdict != LIMIT_COUNT) {
        vsnprintf(site->last, sizeof(site->last), fmt, ap);
        memcpy(text, site->last, sizeof(text));
    }
    pthread_mutex_unlock(&limit_lock);
    /* Written outside the lock: a slow stderr holds up only its own thread. */
    if (verdict == LIMIT_PRINT)
        ember_log_emit(level, subsys, "%s", text);
    else if (verdict == LIMIT_PRINT_LAST)
        ember_log_emit(level, subsys,
                       "%s [more like this: one line per %.0f s or more, with counts]", text,
                       EMBER_LOG_LIMIT_FIRST);
    else if (verdict == LIMIT_REPORT)
        ember_log_emit(level, subsys, "%s [%lu more like this suppressed in the last %.0f s]", text,
                       counted, since);
}

void ember_log_limited(const char *file, unsigned line, ember_log_level_t level, const char *subsys,
                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ember_log_limitedv(file, line, level, subsys, fmt, ap);
    va_end(ap);
}

void ember_log_limited_summary(void)
{
    for (int i = 0; i <= EMBER_LOG_LIMIT_SITES; i++) {
        limit_site_t site;
        pthread_mutex_lock(&limit_lock);
        site = limit_sites[i];
        limit_sites[i].suppressed = 0;
        pthread_mutex_unlock(&limit_lock);
        if (site.used && site.suppressed)
            ember_log_emit(site.level, site.subsys,
                           "suppressed %lu more like this (%lu in all) since: %s", site.suppressed,
                           site.total, site.last);
    }
}
