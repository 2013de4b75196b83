/* common/workers: a fork-join pool of threads (see workers.h). */
#include "common/workers.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* How long a thread spins on a word before it sleeps, in polls: about the
 * time a PS takes from one request's compute to the next one's when they
 * come back to back, so those start without a futex wake-up. */
#define WORKERS_SPIN 4000

/*
 * A job is published in @ticket: the job's generation (high 32 bits) and
 * its next task (low 32).  A thread takes a task with a compare-and-swap
 * that also checks the generation, so a late thread of a finished job can
 * never take a task of the next one; it reads the job's function after
 * that swap succeeded, when the job cannot have ended (its task is not
 * done).  A new job first closes the ticket (its generation, no task
 * left), then sets its count, then opens it.  @done counts finished
 * tasks; the caller returns at ntasks.
 */
struct ember_workers {
    unsigned threads;
    pthread_t *ids;
    _Atomic uint64_t ticket;
    _Atomic uint32_t generation; /* futex: workers sleep on it between jobs */
    _Atomic uint32_t done;       /* futex: the caller sleeps on it */
    _Atomic uint32_t sleepers;   /* workers asleep (or about to) on generation */
    _Atomic uint32_t caller_asleep;
    _Atomic(ember_task_fn) fn;
    _Atomic(void *) arg;
    _Atomic uint32_t ntasks;
    _Atomic int stop;
    char name[32];
};

/* Set while this thread runs a task: a run from inside a task (a table's
 * own split, under a split over tables) runs its tasks inline, in order. */
static __thread int in_task;

static void futex_wait(_Atomic uint32_t *word, uint32_t value)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Take and run tasks of generation @gen until none is left. */
static void workers_drain(ember_workers_t *pool, uint32_t gen)
{
    uint64_t ticket = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    for (;;) {
        const uint32_t task = (uint32_t)ticket;
        /* acquire: a count of a later job is seen only after its closed
         * ticket, so the swap below then fails */
        if ((uint32_t)(ticket >> 32) != gen ||
            task >= atomic_load_explicit(&pool->ntasks, memory_order_acquire))
            return;
        if (!atomic_compare_exchange_weak_explicit(&pool->ticket, &ticket, ticket + 1,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue; /* @ticket reloaded */
        ember_task_fn fn = atomic_load_explicit(&pool->fn, memory_order_relaxed);
        in_task = 1;
        fn(atomic_load_explicit(&pool->arg, memory_order_relaxed), task);
        in_task = 0;
        /* seq_cst, against the caller's caller_asleep then done */
        uint32_t done = atomic_fetch_add(&pool->done, 1) + 1;
        if (done == atomic_load_explicit(&pool->ntasks, memory_order_relaxed) &&
            atomic_load(&pool->caller_asleep))
            futex_wake(&pool->done);
        ticket = atomic_load_explicit(&pool->ticket, memory_order_acquire);
    }
}

/* A worker's wait for the next generation: spin, then sleep.  The
 * seq_cst pair (sleepers up, then generation read; the caller's
 * generation stored, then sleepers read) means a job is never missed. */
static uint32_t workers_next(ember_workers_t *pool, uint32_t seen)
{
    for (unsigned spin = 0; spin < WORKERS_SPIN; spin++) {
        uint32_t gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        if (gen != seen)
            return gen;
        cpu_relax();
    }
    for (;;) {
        atomic_fetch_add(&pool->sleepers, 1);
        uint32_t gen = atomic_load(&pool->generation);
        if (gen == seen)
            futex_wait(&pool->generation, seen);
        atomic_fetch_sub(&pool->sleepers, 1);
        gen = atomic_load(&pool->generation);
        if (gen != seen)
            return gen;
    }
}

static void *workers_main(void *arg)
{
    ember_workers_t *pool = arg;
    uint32_t seen = 0;
    for (;;) {
        seen = workers_next(pool, seen);
        if (atomic_load(&pool->stop))
            return NULL;
        workers_drain(pool, seen);
    }
}

/* Publish a generation (a job, or the stop) and wake whoever sleeps. */
static void workers_publish(ember_workers_t *pool, uint32_t gen)
{
    atomic_store(&pool->generation, gen);
    if (atomic_load(&pool->sleepers))
        futex_wake(&pool->generation);
}

static void workers_join(ember_workers_t *pool, unsigned started)
{
    atomic_store(&pool->stop, 1);
    workers_publish(pool, atomic_load(&pool->generation) + 1);
    for (unsigned i = 0; i < started; i++)
        pthread_join(pool->ids[i], NULL);
}

ember_status_t ember_workers_create(unsigned threads, const char *name, ember_workers_t **pool_p,
                                    char *err, size_t err_length)
{
    *pool_p = NULL;
    if (threads < 1 || threads > EMBER_WORKERS_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: %u threads is outside [1, %d]", name, threads,
                                 EMBER_WORKERS_MAX);
    ember_workers_t *pool = calloc(1, sizeof(*pool));
    if (!pool || !(pool->ids = calloc(threads, sizeof(*pool->ids)))) {
        free(pool);
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "%s: no memory for a pool of %u threads", name, threads);
    }
    pool->threads = threads;
    snprintf(pool->name, sizeof(pool->name), "%s", name);
    for (unsigned i = 0; i + 1 < threads; i++) {
        int rc = pthread_create(&pool->ids[i], NULL, workers_main, pool);
        if (rc != 0) {
            workers_join(pool, i);
            free(pool->ids);
            free(pool);
            return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                     "%s: cannot start worker thread %u of %u: %s", name, i + 2,
                                     threads, strerror(rc));
        }
    }
    *pool_p = pool;
    return EMBER_OK;
}

void ember_workers_destroy(ember_workers_t *pool)
{
    if (!pool)
        return;
    workers_join(pool, pool->threads - 1);
    free(pool->ids);
    free(pool);
}

unsigned ember_workers_threads(const ember_workers_t *pool)
{
    return pool ? pool->threads : 1;
}

/* The caller's wait for the workers' last tasks: spin, then sleep. */
static void workers_wait_done(ember_workers_t *pool, uint32_t ntasks)
{
    for (unsigned spin = 0; spin < WORKERS_SPIN; spin++) {
        if (atomic_load_explicit(&pool->done, memory_order_acquire) == ntasks)
            return;
        cpu_relax();
    }
    for (;;) {
        atomic_store(&pool->caller_asleep, 1);
        uint32_t done = atomic_load(&pool->done);
        if (done != ntasks)
            futex_wait(&pool->done, done);
        atomic_store(&pool->caller_asleep, 0);
        if (atomic_load_explicit(&pool->done, memory_order_acquire) == ntasks)
            return;
    }
}

void ember_workers_run(ember_workers_t *pool, unsigned ntasks, ember_task_fn fn, void *arg)
{
    if (!pool || pool->threads == 1 || ntasks <= 1 || in_task) {
        for (unsigned task = 0; task < ntasks; task++)
            fn(arg, task);
        return;
    }
    const uint32_t gen = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
    /* Close the last job's ticket before its count changes: a late thread
     * that read the old ticket and then this job's larger count would
     * otherwise take a task "of the last job" that is one of this job's,
     * run it twice and overshoot @done (seen under TSan's scheduling). */
    atomic_store(&pool->ticket, (uint64_t)gen << 32 | UINT32_MAX);
    atomic_store_explicit(&pool->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool->ntasks, ntasks, memory_order_release);
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->ticket, (uint64_t)gen << 32, memory_order_release);
    workers_publish(pool, gen);
    workers_drain(pool, gen);
    workers_wait_done(pool, ntasks);
}
