/*
 * ember: serving as a parameter server.
 *
 * A PS rank calls ember_ps_serve and nothing else of the job until it
 * returns: it holds the shards of the tables placed on it (created by other
 * ranks, <ember/table.h>), answers lookups, applies gradients with each
 * table's optimizer (sync, async or stale), snapshots its shards for the
 * job's checkpoints and restores them on resume.  Other ranks wait for a PS
 * to serve before they first use it (up to EMBER_CONNECT_TIMEOUT), so the
 * PS may come up after them.
 *
 * Threading and errors: as the job's (<ember/job.h>).
 */
#ifndef EMBER_PS_H
#define EMBER_PS_H

#include <ember/job.h>
#include <ember/status.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most compute threads a PS starts (ember_ps_options_t.threads). */
#define EMBER_PS_THREADS_MAX 1024

typedef struct {
    unsigned threads; /* compute threads, the serving one included, at most
                       * EMBER_PS_THREADS_MAX; 0: the cores of its binding
                       * (its first log line says which; more than the
                       * maximum is refused) */
    int local_rank;   /* picks the GPU of a table kept on one ("cuda"); -1:
                       * the job's (ember_job_local_rank) */
    int signals;      /* non-zero: SIGUSR1 / SIGTERM here ask trainer 0 for a
                       * checkpoint (a job whose ember_checkpoint_open says
                       * signals), as they do on the other ranks */
} ember_ps_options_t;

/** Defaults: threads 0, local_rank -1, no signals.  Any thread; never
 * blocks. */
void ember_ps_options_init(ember_ps_options_t *options);

/**
 * Serve until every rank that is not a PS has left the job (OK), the job is
 * aborted (ERR_CANCELED, the cause logged and in ember_job_aborted), or the
 * coordinator is lost (ERR_PEER_LOST, named): a PS without its coordinator
 * has nobody to stop it.  Blocks.  @options borrowed for the call (NULL: the
 * defaults).  The calling rank must be a PS.  Then call ember_job_leave with
 * the status returned.  Threading: the calling thread serves and progresses
 * the job; the compute threads are the PS's own, joined before it returns.
 * Errors also: ERR_INVALID_PARAM (not a PS, served twice, threads above
 * EMBER_PS_THREADS_MAX), ERR_NO_MEMORY (the threads could not start).
 */
ember_status_t ember_ps_serve(ember_job_t *job, const ember_ps_options_t *options);

/* A PS's memory and work, as it reports them (ember_ps_stats). */
typedef struct {
    uint64_t table_bytes;     /* rows of every shard it holds */
    uint64_t optimizer_bytes; /* their optimizer state */
    uint64_t other_bytes;     /* contexts, accumulators, scratch, replies */
    uint64_t rss_bytes;       /* its process's resident set */
    uint64_t lookups, grads, steps_applied;
    double lookup_seconds, grad_seconds; /* serving them (not waiting) */
    double lookup_compute_seconds;       /* of lookup_seconds, the tables' own work */
    uint32_t threads;
} ember_ps_stats_t;

/** PS @p's stats into *@stats_p (the caller's, written on success).  A
 * call: blocks until it answers (the PS serving first).  Any rank but a
 * PS.  Errors: ERR_INVALID_PARAM (@p out of range, called on a PS),
 * ERR_TIMED_OUT (not serving in time, or no answer), ERR_PEER_LOST,
 * ERR_BAD_MESSAGE (an answer of another size), ERR_CANCELED; logged. */
ember_status_t ember_ps_stats(ember_job_t *job, int p, ember_ps_stats_t *stats_p);

#ifdef __cplusplus
}
#endif
#endif
