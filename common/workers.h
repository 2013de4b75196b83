/*
 * common/workers: a fork-join pool of threads for one caller's compute.
 *
 * A pool of N threads is the calling thread and N - 1 worker threads,
 * started once (ember_workers_create) and joined at the end.
 * ember_workers_run(pool, ntasks, fn, arg) runs fn(arg, task) for every
 * task in [0, ntasks) on the pool's threads (the caller takes tasks too)
 * and returns when all are done.  Which thread runs a task is not fixed,
 * so a task's result must depend only on its index (then a job's result is
 * the same for any number of threads).  Between jobs the workers spin a
 * short while (a job that follows soon starts without a wake-up), then
 * sleep on a futex.
 *
 * One caller at a time: the engine's parameter server runs its handlers
 * on one thread (its UCX worker's) and fans their compute out here.  A
 * NULL pool is one thread: run calls every task in order on the caller;
 * so does a run from inside a task (a nested split runs inline).
 */
#ifndef EMBER_COMMON_WORKERS_H
#define EMBER_COMMON_WORKERS_H

#include <ember/status.h>

#include <stddef.h>

/* A sane ceiling for a pool (and --ps-threads): far above any node's cores. */
#define EMBER_WORKERS_MAX 1024

typedef struct ember_workers ember_workers_t;

typedef void (*ember_task_fn)(void *arg, unsigned task);

/**
 * Start a pool of @threads threads (1..EMBER_WORKERS_MAX; 1 starts none)
 * named @name in messages.  Errors (message in @err): ERR_INVALID_PARAM
 * (@threads out of range), ERR_NO_MEMORY (memory, or a thread the system
 * would not create: the message says which; the ones started are joined,
 * nothing is left).
 */
ember_status_t ember_workers_create(unsigned threads, const char *name, ember_workers_t **pool_p,
                                    char *err, size_t err_length);

/** Stop and join the workers, free the pool.  NULL is a no-op. */
void ember_workers_destroy(ember_workers_t *pool);

/** Threads of the pool, the caller's included (1 for NULL). */
unsigned ember_workers_threads(const ember_workers_t *pool);

/** Run @fn(@arg, task) for task 0..@ntasks-1 and return when all are done. */
void ember_workers_run(ember_workers_t *pool, unsigned ntasks, ember_task_fn fn, void *arg);

/** Part @part of @parts of [0, @n): a balanced split (sizes differ by at
 * most one, earlier parts larger). */
static inline void ember_split_range(size_t n, unsigned parts, unsigned part, size_t *begin_p,
                                     size_t *end_p)
{
    const size_t base = n / parts, extra = n % parts;
    *begin_p = part * base + (part < extra ? part : extra);
    *end_p = *begin_p + base + (part < extra ? 1 : 0);
}

/** Tasks for @work units of work, at least @grain units a task: between 1
 * and the pool's threads. */
static inline unsigned ember_workers_tasks(const ember_workers_t *pool, size_t work, size_t grain)
{
    const size_t most = ember_workers_threads(pool);
    size_t tasks = grain ? work / grain : most;
    return (unsigned)(tasks < 1 ? 1 : tasks > most ? most : tasks);
}

#endif
