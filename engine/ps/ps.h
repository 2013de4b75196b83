/*
 * engine/ps/ps: the parameter-server process.  Owns table shards (engine/table)
 * and serves the master's and the trainers' requests until shut down.
 */
#ifndef EMBER_ENGINE_PS_H
#define EMBER_ENGINE_PS_H

#include <ember/transport.h>

/* A PS inside a job that ends it its own way (the public API's
 * ember_ps_serve, api/ps.c) rather than ember-train's master. */
typedef struct {
    int coordinator; /* the rank watched: the PS stops when it is lost */
    /* Asked after every wake of the serving loop: EMBER_INPROGRESS to go on,
     * else the status ember_ps_run returns (OK: every client left;
     * ERR_CANCELED: the job was aborted). */
    ember_status_t (*poll)(void *arg);
    /* Called once the PS's handlers are in, before it first waits: the
     * PS may be told to clients from here on. */
    void (*serving)(void *arg);
    void *arg;
} ember_ps_hooks_t;

typedef struct {
    int local_rank;   /* picks the GPU of tables created on one (local_rank % GPUs) */
    unsigned threads; /* compute threads (--ps-threads), its own included; 0: the
                       * cores of its binding (common/topology.c) */
    /* NULL: ember-train's PS: the "roles-ready" barrier first, the rank
     * named "master" watched, SHUTDOWN or ABORT end it.  Else: no barrier,
     * hooks->coordinator watched, hooks->poll ends it, and ABORT is left to
     * the caller's handler (the job's). */
    const ember_ps_hooks_t *hooks;
} ember_ps_run_options_t;

/**
 * Serve until the master's SHUTDOWN (returns OK) or ABORT (returns
 * ERR_CANCELED, the cause logged), or what @options->hooks says.  @tp
 * borrowed.  Blocks.
 *
 * One thread serves: it progresses the PS's one UCX worker, runs the
 * handlers and fans each request's compute (pooling, backward, reduction,
 * optimizer) out to a pool of @options->threads (common/workers.h), then
 * sends the reply.  Not a UCX worker per thread: each trainer would need
 * an endpoint (and its handshake) to every PS thread and would split its
 * request between them, and the sync step's gradients, arriving at
 * different workers, would need ordering across them before the
 * reduction; the fork-join keeps one ordered stream of requests and the
 * compute's results the same bits for any thread count.
 * Errors: ERR_INVALID_PARAM (@options->threads above EMBER_WORKERS_MAX),
 * ERR_NO_MEMORY (the pool could not be started: logged).
 */
ember_status_t ember_ps_run(ember_tp_t *tp, const ember_ps_run_options_t *options);

#endif
