/*
 * Tiny test harness shared by the engine tests: each executable holds a table
 * of cases and runs the one named by argv[1] (CTest runs one case per test).
 * Exit 0 = pass, 1 = fail, 2 = usage/unknown case (so a CMake list that names
 * a case the binary lacks fails loudly instead of passing).
 */
#ifndef EMBER_TESTS_ENGINE_TEST_UTIL_H
#define EMBER_TESTS_ENGINE_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(void);
} test_case_t;

/* Arguments after the case name, for cases that need a path. */
static int test_argc;
static char **test_argv;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            return 1;                                                       \
        }                                                                   \
    } while (0)

static inline int test_main(int argc, char **argv, const test_case_t *cases, size_t ncases)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CASE [args]\ncases:", argv[0]);
        for (size_t i = 0; i < ncases; i++)
            fprintf(stderr, " %s", cases[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    test_argc = argc - 2;
    test_argv = argv + 2;
    for (size_t i = 0; i < ncases; i++) {
        if (strcmp(cases[i].name, argv[1]) == 0) {
            int rc = cases[i].fn();
            fprintf(stderr, "%s %s\n", rc == 0 ? "PASS" : "FAIL", argv[1]);
            return rc == 0 ? 0 : 1;
        }
    }
    fprintf(stderr, "unknown case '%s'\n", argv[1]);
    return 2;
}

/* Deterministic uniform floats in [lo, hi) for test data. */
static inline double test_uniform(uint64_t *state, double lo, double hi)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return lo + (hi - lo) * ((double)(z >> 11) * (1.0 / 9007199254740992.0));
}

#endif
