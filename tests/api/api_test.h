/*
 * tests/api/api_test: what the public API's tests share: joining a job of
 * real processes (tests/common/mp_spawn forks them; UCX over tcp or shared
 * memory on loopback), a PS rank's whole life, and a rank's log lines
 * captured so a test can check that an error names what was wrong.
 */
#ifndef EMBER_TESTS_API_TEST_H
#define EMBER_TESTS_API_TEST_H

#include "tests/common/mp_spawn.h"

#include <ember/config.h>
#include <ember/job.h>
#include <ember/ps.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The PS serve with more threads than this machine may have cores: their
 * results are the same bits for any count. */
#define API_TEST_PS_THREADS 3

static inline ember_job_t *api_test_join(int trainers, int num_ps)
{
    ember_job_params_t params;
    ember_job_t *job = NULL;
    ember_job_params_init(&params);
    params.trainers = trainers;
    params.num_ps = num_ps;
    ember_status_t status = ember_job_join(&params, &job);
    MP_CHECK(status == EMBER_OK, "ember_job_join (%d trainers, %d PS): %s", trainers, num_ps,
             ember_status_string(status));
    return job;
}

/* A PS rank: serve until the job ends, expecting @want, then leave. */
static inline int api_test_ps(ember_job_t *job, ember_status_t want)
{
    ember_ps_options_t options;
    ember_ps_options_init(&options);
    options.threads = API_TEST_PS_THREADS;
    ember_status_t status = ember_ps_serve(job, &options);
    MP_CHECK(status == want, "%s: ember_ps_serve: %s, expected %s",
             ember_job_name(job, ember_job_rank(job)), ember_status_string(status),
             ember_status_string(want));
    ember_job_leave(job, status);
    return 0;
}

/* ---- log lines: stderr into a file while a check runs --------------------- */

typedef struct {
    int saved; /* the real stderr */
    char path[64];
} api_test_log_t;

static inline void api_test_log_begin(api_test_log_t *log)
{
    snprintf(log->path, sizeof(log->path), "/tmp/ember-api-log-XXXXXX");
    int fd = mkstemp(log->path);
    MP_CHECK(fd >= 0, "mkstemp");
    fflush(stderr);
    log->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* What was logged since begin (malloc'd; the caller frees), stderr back. */
static inline char *api_test_log_end(api_test_log_t *log)
{
    fflush(stderr);
    dup2(log->saved, 2);
    close(log->saved);
    FILE *file = fopen(log->path, "r");
    char *text = calloc(1, 1 << 16);
    MP_CHECK(file && text, "reading %s", log->path);
    size_t n = fread(text, 1, (1 << 16) - 1, file);
    text[n] = '\0';
    fclose(file);
    unlink(log->path);
    fputs(text, stderr); /* still seen in the test's output */
    return text;
}

/* @text (freed here) holds each of the NULL-ended @words. */
static inline void api_test_log_has(char *text, const char *what, const char *const *words)
{
    for (size_t i = 0; words[i]; i++)
        MP_CHECK(strstr(text, words[i]), "%s: the error does not say '%s'; it logged:\n%s", what,
                 words[i], text);
    free(text);
}

#endif
