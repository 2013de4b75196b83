/* common/math_threads: the dense math's threads, from the binding's share or the user. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "common/math_threads.h"

#include <ember/config.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

/* A thread count the user set in @name: 1..1024, else 0 (unset or not a count,
 * which the library reading it ignores too). */
static unsigned env_threads(const char *name)
{
    const char *text = getenv(name);
    char *end;
    if (!text || !*text)
        return 0;
    unsigned long value = strtoul(text, &end, 10);
    return *end == '\0' && value >= 1 && value <= 1024 ? (unsigned)value : 0;
}

/* Set @threads in each library that is loaded. */
static void set_library_threads(unsigned threads)
{
    void (*openblas_set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    void (*omp_set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (openblas_set)
        openblas_set((int)threads);
    if (omp_set)
        omp_set((int)threads);
}

unsigned ember_math_threads_apply(unsigned chosen, const char *chosen_why, char *text,
                                  size_t length)
{
    static const char *const user_vars[] = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"};
    unsigned threads = (unsigned)ember_config_int("EMBER_THREADS");
    if (threads > 0) {
        set_library_threads(threads);
        snprintf(text, length, "%u (EMBER_THREADS)", threads);
        return threads;
    }
    for (size_t i = 0; i < sizeof(user_vars) / sizeof(user_vars[0]); i++) {
        if ((threads = env_threads(user_vars[i])) > 0) {
            snprintf(text, length, "%u (%s)", threads, user_vars[i]);
            return threads;
        }
    }
    threads = chosen > 0 ? chosen : 1;
    set_library_threads(threads);
    snprintf(text, length, "%u (%s)", threads, chosen_why);
    return threads;
}
