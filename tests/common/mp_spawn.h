/*
 * tests/common/mp_spawn: run N ranks of a test case as real processes.
 *
 * The test binary forks itself (as libuv's runner does): each child gets the
 * rank environment (EMBER_RANK, EMBER_WORLD_SIZE, EMBER_INIT on a free
 * loopback port, EMBER_SECRET_FILE with mode 0600) and runs the case body.
 * When a rank fails, the others are killed; nothing outlives the test.
 * The parent never initialises UCX, so forking is safe.
 */
#ifndef EMBER_TEST_MP_SPAWN_H
#define EMBER_TEST_MP_SPAWN_H

#include <stdio.h>
#include <stdlib.h>

#define MP_SKIP 77

typedef int (*mp_rank_fn)(int rank, int world_size, void *arg);

typedef struct {
    double timeout_s;      /* whole case; default 120 */
    unsigned may_die_mask; /* ranks the case itself kills (bit per rank) */
} mp_opts_t;

/** Run @fn on @nranks processes; 0 when every rank returned 0. */
int mp_spawn(int nranks, mp_rank_fn fn, void *arg, const mp_opts_t *opts);

/* One multi-process test case: its body, rank count, ranks it kills. */
typedef struct {
    const char *name;
    mp_rank_fn fn;
    int ranks;
    unsigned may_die;
} mp_case_t;

/**
 * main() of a test executable: run the case named by argv[1] (one ctest
 * test per case) with @timeout_s; prints "CASE: passed" or "FAILED".
 */
int mp_main(int argc, char **argv, const mp_case_t *cases, size_t ncases, double timeout_s);

/** Fail the current rank with a message (exits the process with 1). */
#define MP_CHECK(cond, ...)                                                         \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "CHECK FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, "\n");                                                  \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#endif
