/* ember: log lines `host:pid:rank [subsys] level message`. */
#include <ember/config.h>
#include <ember/log.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static ember_log_level_t log_threshold = EMBER_LOG_INFO;
static int log_rank = -1;
static char log_host[64];

static const char *const level_names[] = {"FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

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
    va_start(ap, fmt);
    if (len >= 0 && (size_t)len < sizeof(line))
        len += vsnprintf(line + len, sizeof(line) - (size_t)len, fmt, ap);
    va_end(ap);
    if (len < 0)
        return;
    if ((size_t)len >= sizeof(line) - 1)
        len = (int)sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line so lines from concurrent ranks never interleave. */
    ssize_t rc = write(STDERR_FILENO, line, (size_t)len);
    (void)rc;
}
