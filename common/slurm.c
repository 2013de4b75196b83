/* common/slurm: Slurm's environment, checked (see slurm.h). */
#include "common/slurm.h"

#include <ember/log.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int ember_slurm_int(const char *name, int fallback)
{
    const char *text = getenv(name);
    char *end;
    if (!text || !*text)
        return fallback;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || *end || value < 0 || value > INT32_MAX) {
        ember_error("slurm", "%s='%s' is not an integer from 0 to %d", name, text, INT32_MAX);
        return -1;
    }
    return (int)value;
}

/* One count of the notation: "N" or "N(xR)", at full width. */
static const char *tasks_term(const char *text, long long *tasks_p, long long *repeat_p)
{
    char *end;
    errno = 0;
    *tasks_p = strtoll(text, &end, 10);
    *repeat_p = 1;
    if (end == text || errno || *tasks_p < 0 || *tasks_p > INT32_MAX)
        return NULL;
    if (strncmp(end, "(x", 2) == 0) {
        const char *start = end + 2;
        *repeat_p = strtoll(start, &end, 10);
        if (end == start || errno || *repeat_p < 1 || *repeat_p > INT32_MAX || *end++ != ')')
            return NULL;
    }
    if (*end != ',' && *end != '\0')
        return NULL;
    return *end == ',' ? end + 1 : end;
}

int ember_slurm_tasks_on_node(const char *text, int node)
{
    long long left = node;
    while (text && *text && left >= 0) {
        long long tasks, repeat;
        if (!(text = tasks_term(text, &tasks, &repeat)))
            return -1;
        if (left < repeat)
            return (int)tasks;
        left -= repeat;
    }
    return -1;
}

ember_status_t ember_slurm_first_host(const char *nodelist, char *host, size_t size)
{
    size_t n = 0;
    const char *p = nodelist;

    if (!p || !*p || size == 0)
        return EMBER_ERR_INVALID_PARAM;
    while (*p && *p != ',' && *p != '[' && n + 1 < size)
        host[n++] = *p++;
    if (*p == '[') {
        p++;
        while (*p >= '0' && *p <= '9' && n + 1 < size)
            host[n++] = *p++;
        if (n == 0 || !(*p == '-' || *p == ',' || *p == ']'))
            return EMBER_ERR_INVALID_PARAM;
    }
    host[n] = '\0';
    return n ? EMBER_OK : EMBER_ERR_INVALID_PARAM;
}
