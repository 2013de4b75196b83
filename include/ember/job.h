/*
 * ember: a job, as one process of it sees it.
 *
 * A job is a world of N processes, ranks 0..N-1, started by a launcher
 * (ember-run, srun) or by hand.  Each rank has a role, a pure function of
 * (rank, trainers T, num_ps P, world N):
 *
 *     ranks 0 .. T-1          trainers  "trainer0" .. (index t = rank)
 *     ranks T .. N-P-1        others    (exactly one: "master"; more: "other0"..)
 *     ranks N-P .. N-1        PS        "ps0" .. (index p = rank - (N - P))
 *
 * which is ember-train's layout (T trainers, the master, P PS) and, with no
 * other rank, the plain T + P layout of a program without a coordinator.
 * A program whose ranks know only their own role (PyTorch's RPC names,
 * "trainer0", "master", "ps") states that instead of T and P
 * (EMBER_JOB_FROM_ROLES): the job counts T and P from every rank's role,
 * which must lie in the same layout; P may then be 0 (a job of RPC ranks
 * without a PS) and T 0 (with at least one other rank).
 * The job's coordinator is the "master" rank when there is one, else
 * trainer 0 (the first other rank when there is no trainer): it keeps the
 * job's table names, writes checkpoint manifests and is the rank the PS
 * watch (a PS whose coordinator is lost stops).
 *
 * Processes join through the authenticated rendezvous store (the job
 * secret: EMBER_SECRET_FILE / EMBER_SECRET, or the params); nothing of the
 * job runs for a process without it.
 *
 * Threading: a job and everything made from it (tables, lookups,
 * allreduces, checkpoints) is used by one thread at a time, the thread that
 * progresses it (as the transport: <ember/transport.h>).  Calls that wait
 * progress the job's transport while they wait, so handlers (the PS's, the
 * job's own: aborts, barriers, table names) run from inside them.  A rank
 * that computes for long without calling into the job answers its peers
 * late, not wrongly.
 *
 * Errors: every call that fails says why in one log line naming the peer,
 * table, trainer or step (EMBER_LOG_LEVEL); the status says what kind.
 * A call that waits fails with ERR_CANCELED once another rank aborted the
 * job (ember_job_aborted() then gives the cause).
 */
#ifndef EMBER_JOB_H
#define EMBER_JOB_H

#include <ember/status.h>
#include <ember/transport.h>
#include <ember/version.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_job ember_job_t;

typedef enum {
    EMBER_ROLE_TRAINER = 0,
    EMBER_ROLE_PS = 1,
    EMBER_ROLE_OTHER = 2 /* a coordinator ("master") or any other rank */
} ember_role_t;

/* Op ids an application may register on the job's transport
 * (ember_rpc_register): [EMBER_OP_APP_BASE, EMBER_RPC_OP_MAX).  Ids below
 * are the transport's and the library's. */
#define EMBER_OP_APP_BASE 512

#define EMBER_JOB_NAME_MAX 32 /* bytes of a rank's name, its NUL included */

/* ember_job_params_t.num_ps: the PS are the ranks that are not trainers, so
 * `ember-run -n 5 ./prog` with 2 trainers is 2 trainers + 3 PS.  A job with
 * a coordinator ("master") of its own states P. */
#define EMBER_JOB_PS_REST 0

/* ember_job_params_t.trainers and num_ps: the layout comes from the role
 * each rank states (ember_job_params_t.role; ABI 1.1 and later). */
#define EMBER_JOB_FROM_ROLES (-1)

typedef struct {
    unsigned abi;         /* EMBER_ABI_VERSION the caller was built with (set by
                           * ember_job_params_init; the library refuses another) */
    int trainers;         /* T >= 1, or EMBER_JOB_FROM_ROLES */
    int num_ps;           /* P >= 1, or EMBER_JOB_PS_REST (0): every rank that
                           * is not a trainer (P = N - T, no other rank);
                           * EMBER_JOB_FROM_ROLES exactly when trainers is */
    int rank, world_size; /* -1: the launcher's (EMBER_RANK / SLURM_PROCID ...) */
    const char *name;     /* NULL: the role's name (above); at most 31 bytes */
    const char *init_url; /* NULL: EMBER_INIT, or the Slurm head node */
    const uint8_t *secret;
    size_t secret_length; /* secret NULL: EMBER_SECRET_FILE / EMBER_SECRET */
    int bind;             /* non-zero: bind near this rank's GPU and HCA (hwloc),
                           * as ember-train's --bind (the mode: EMBER_BIND) */
    /* ABI 1.1: the last field, read only from a program built against 1.1
     * or later (params->abi; an older program's struct ends before it). */
    int role; /* with trainers = EMBER_JOB_FROM_ROLES: this rank's
               * ember_role_t; -1 (the default) otherwise */
} ember_job_params_t;

/** Defaults: everything from the environment, T 0 (must be given), P
 * EMBER_JOB_PS_REST, role -1.  Writes only the fields of @abi's struct (a
 * program built against ABI 1.0 has no role).  Any thread; never blocks. */
#define ember_job_params_init(params) ember_job_params_init_abi((params), EMBER_ABI_VERSION)
void ember_job_params_init_abi(ember_job_params_t *params, unsigned abi);

/** The rank and world size the launcher gives this process (EMBER_RANK and
 * EMBER_WORLD_SIZE, else Slurm's SLURM_PROCID and SLURM_NTASKS; -1 each
 * when none) into *@rank_p and *@world_size_p (the caller's), as
 * ember_job_join takes them with params rank and world_size -1: what a
 * program checks before it joins (the world it needs, what its rank
 * writes).  Call ember_config_init first (ember_job_join does); the same
 * thread as the other config calls.  Never blocks, cannot fail. */
void ember_job_launch_rank(int *rank_p, int *world_size_p);

/**
 * Join the job: reach the store, connect the transport under this rank's
 * name, check that every rank states the same T and P, and meet every rank.
 * Blocks up to EMBER_CONNECT_TIMEOUT.  @params borrowed for the call;
 * *@job_p the caller's until ember_job_leave / ember_job_abort.
 *
 * With trainers = num_ps = EMBER_JOB_FROM_ROLES each rank states its role
 * (params->role) instead: once connected it puts the role in the store,
 * rank 0 gathers every rank's, and each rank takes T = the trainers, P =
 * the PS from them.  The roles must lie as the layout above (trainers
 * first, then the others, the PS last), else every rank's join fails
 * ERR_INVALID_PARAM, logging the first rank out of place (its rank, name
 * and role) and the layout required.  P = 0 is a job without a PS (no
 * table can be created in it); T = 0 needs another rank (the
 * coordinator).  A rank's default name (name NULL) is then its role's when
 * its rank alone gives it, "trainer<rank>", else "ps-rank<rank>" or
 * "other-rank<rank>" (a PS's or other's index is known only once every
 * role is): a program that wants "ps0" or "master" names its ranks.
 *
 * Errors: ERR_INVALID_PARAM (T < 1, P < 0, T + P > world, P the rest
 * with no rank left for a PS, a rank outside the world, another ABI, a
 * name too long, ranks that state another T or P (P resolved); with
 * roles: a program of ABI 1.0, num_ps not EMBER_JOB_FROM_ROLES, a role
 * that is no ember_role_t, a role stated without EMBER_JOB_FROM_ROLES,
 * roles out of the layout, every rank a PS: logged naming it), ERR_AUTH (a
 * wrong secret), ERR_TIMED_OUT (a rank did not come: named),
 * ERR_BAD_MESSAGE (a rank's role in the store malformed), ERR_NO_MEMORY,
 * the transport's.
 */
ember_status_t ember_job_join(const ember_job_params_t *params, ember_job_t **job_p);

/**
 * Leave the job.  @outcome OK: an orderly end: every PS is told that this
 * rank is done (a PS's ember_ps_serve returns once every rank that is not a
 * PS has left), then the transport's final barrier with every live rank
 * (its calls in flight complete first, bounded by EMBER_SHUTDOWN_TIMEOUT).
 * Any other status: the job failed here: no final barrier (a hung rank must
 * not hold the others), peers learn it when the process exits.  An aborted
 * job leaves as failed whatever @outcome; its coordinator first tells each
 * PS of the abort (a second at most), so the PS stop on it rather than on
 * the coordinator's exit.  Blocks (bounded).  Frees @job; tables, ebcs,
 * allreduces and checkpoints made from it must be closed or destroyed
 * first (they borrow it).  Cannot fail (a PS lost meanwhile is logged).
 * NULL: nothing.
 */
void ember_job_leave(ember_job_t *job, ember_status_t outcome);

/**
 * Tell every other rank that the job failed, with @cause (one line, at
 * most 250 bytes kept; copied; NULL: "(no cause given)"): their waiting
 * calls fail with ERR_CANCELED and ember_job_aborted() gives the cause
 * ("NAME: cause"); each PS's ember_ps_serve returns ERR_CANCELED.  Blocks:
 * every live rank is told at once and its answer awaited, a second at
 * most.  Then leaves as ember_job_leave with a failure (frees @job).
 * NULL: nothing.
 */
void ember_job_abort(ember_job_t *job, const char *cause);

/** The cause of an abort received from another rank, "NAME: cause" (""
 * while none); borrowed from @job. */
const char *ember_job_aborted(const ember_job_t *job);

/* The layout and the peers, as the job knows them: these never block and
 * cannot fail; strings borrowed from @job (valid until it is left). */
int ember_job_rank(const ember_job_t *job);
int ember_job_world_size(const ember_job_t *job);
int ember_job_trainers(const ember_job_t *job);
int ember_job_num_ps(const ember_job_t *job);
/** @rank's role; its index among its role in *@index_p (may be NULL).
 * A rank outside the world: EMBER_ROLE_OTHER, index -1. */
ember_role_t ember_job_role(const ember_job_t *job, int rank, int *index_p);
/** Rank of trainer @t / PS @p; -1 when out of range. */
int ember_job_trainer_rank(const ember_job_t *job, int t);
int ember_job_ps_rank(const ember_job_t *job, int p);
/** The coordinator's rank ("master", else trainer 0, else the first
 * other rank). */
int ember_job_coordinator(const ember_job_t *job);
/** @rank's name ("trainer1", "ps0", ...; "?" outside the world); borrowed
 * from the job. */
const char *ember_job_name(const ember_job_t *job, int rank);
/** This rank's index among the ranks on its host, and how many there are
 * (EMBER_LOCAL_RANK / SLURM_LOCALID ...): which GPU it takes. */
int ember_job_local_rank(const ember_job_t *job);
int ember_job_local_size(const ember_job_t *job);

/** Non-zero when @rank was lost; why ("its process 42 on node1 exited"),
 * borrowed, "" while it was not. */
int ember_job_peer_lost(const ember_job_t *job, int rank);
const char *ember_job_peer_reason(const ember_job_t *job, int rank);

/**
 * Every rank that is not a PS meets (the PS serve meanwhile): each returns
 * once all have called it with the same @name (at most 31 bytes; borrowed
 * for the call), the n-th barrier of each rank meeting the n-th of the
 * others.  The coordinator decides each barrier and every client returns
 * its verdict: OK when all had come before it heard of an abort (even on a
 * client that hears of the abort first: the verdict is already on its way,
 * and a client waits for it, EMBER_SHUTDOWN_TIMEOUT at most), else
 * ERR_CANCELED.  Blocks, up to EMBER_CONNECT_TIMEOUT.  Errors:
 * ERR_TIMED_OUT (naming who did not come), ERR_PEER_LOST (naming who was
 * lost), ERR_CANCELED (an abort), ERR_SHUTDOWN (the coordinator left the
 * job before the others came), ERR_INVALID_PARAM (a PS calls it, a name
 * too long, or ranks that meet under different names: both named), the
 * transport's.
 */
ember_status_t ember_job_barrier(ember_job_t *job, const char *name);

/** The job's transport, for an application's own RPCs (op ids from
 * EMBER_OP_APP_BASE) and progress, used from the job's thread; borrowed,
 * lives as long as @job (never destroy it).  Never blocks. */
ember_tp_t *ember_job_transport(ember_job_t *job);

/** Progress the job (handlers run), blocking up to @timeout_s or until
 * something happened.  Returns OK, or ERR_CANCELED once the job was
 * aborted (then at once). */
ember_status_t ember_job_wait(ember_job_t *job, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif
