/*
 * tests/api/test_job: the public job, PS, table and allreduce calls
 * (include/ember/job.h, ps.h, table.h, allreduce.h) over real processes
 * forked by mp_spawn, UCX on loopback.  Usage: test_job CASE
 *
 *   roles_master     2 trainers, a master, 2 PS: every rank's role, index,
 *                    name and the coordinator as the layout says; two
 *                    barriers; each PS serves until every client left (OK)
 *   roles_plain      2 trainers, 1 PS, no master: trainer 0 coordinates
 *   roles_rest       5 ranks, 2 trainers, num_ps EMBER_JOB_PS_REST (the last
 *                    rank states 3, which agrees): 2 trainers + 3 PS, no
 *                    master; every rank a trainer: refused, saying why
 *   layout_mismatch  a rank that states another trainer count is refused,
 *                    naming both counts; the others do not get through
 *   from_roles       trainer, trainer, other, ps each stating its role
 *                    (EMBER_JOB_FROM_ROLES) under PyTorch's names: 2
 *                    trainers, 1 PS, the "master" coordinates; barriers,
 *                    the PS serves until every client left
 *   roles_order      a PS at rank 0: every rank's join fails, the error
 *                    naming rank 0, its (default) name and role; an ABI 1.0
 *                    program's params keep no role and cannot state one
 *   roles_no_ps      a trainer and another rank, no PS: they join, meet
 *                    and leave; a table cannot be created (no PS)
 *   abort            trainer 1 aborts as soon as its first barrier returns:
 *                    that barrier is OK on every client (the coordinator
 *                    released it before it heard of the abort, whichever
 *                    word reaches trainer 0 first); the next one fails
 *                    ERR_CANCELED with the cause on trainer 0 (the
 *                    master, told while it waits outside any barrier,
 *                    fails the one trainer 0 waits at) and on the master;
 *                    the PS stops with it
 *   coordinator_lost the master dies: the PS stops ERR_PEER_LOST, trainer
 *                    0's barrier fails naming the master
 *   barrier_timeout  trainer 1 never comes: trainer 0's barrier times out
 *                    naming it, and the job then ends in order
 *   barrier_names    two clients meet under different names: refused,
 *                    naming both
 *   tables           created by one trainer, opened by the other (waiting
 *                    for it), rows read (INIT_ROWS, INIT_NORMAL as
 *                    <ember/rng.h> draws them, zeros, fp16 rows rounded as
 *                    the engine's half conversion rounds) and written across
 *                    ranks on row- and table-wise placements; every bad
 *                    setting refused naming it; a taken name, an unknown
 *                    one, a destroy by another rank, a destroyed table;
 *                    the PS's stats
 *   allreduce        3 trainers: sums and averages of integers, several
 *                    requests in flight, a large buffer, a second allreduce
 *   set_optimizer    a table created with SGD set to Adagrad (changed), the
 *                    same again (unchanged), bad settings refused naming
 *                    them; a pushed gradient steps the rows as Adagrad
 *                    does; trainer 1 sets another through its opened handle
 *   optimizer_ckpt   a job that writes checkpoints: another optimizer
 *                    refused naming the table, the same one taken
 */
#include "engine/ops/half.h" /* the reference of fp16 rows */
#include "tests/api/api_test.h"

#include <ember/allreduce.h>
#include <ember/checkpoint.h>
#include <ember/log.h>
#include <ember/lookup.h>
#include <ember/rng.h>
#include <ember/table.h>

#include <math.h>
#include <stdint.h>
#include <time.h>

/* ---- roles ----------------------------------------------------------------- */

/* Every rank's role, index and name as the layout (T, others, P) says. */
static void check_roles(ember_job_t *job, int T, int P, int world)
{
    static const char *const kinds[] = {"trainer", "ps", "other"};
    const int others = world - T - P;
    MP_CHECK(ember_job_world_size(job) == world && ember_job_trainers(job) == T &&
                     ember_job_num_ps(job) == P,
             "world %d, %d trainers, %d PS", ember_job_world_size(job), ember_job_trainers(job),
             ember_job_num_ps(job));
    MP_CHECK(ember_job_coordinator(job) == (others ? T : 0), "coordinator %d",
             ember_job_coordinator(job));
    for (int rank = 0; rank < world; rank++) {
        int index = -2;
        ember_role_t role = ember_job_role(job, rank, &index);
        char want[32];
        if (rank < T)
            snprintf(want, sizeof(want), "trainer%d", rank);
        else if (rank >= world - P)
            snprintf(want, sizeof(want), "ps%d", rank - (world - P));
        else
            snprintf(want, sizeof(want), others == 1 ? "master" : "other%d", rank - T);
        const ember_role_t want_role = rank < T            ? EMBER_ROLE_TRAINER
                                       : rank >= world - P ? EMBER_ROLE_PS
                                                           : EMBER_ROLE_OTHER;
        const int want_index = rank < T ? rank : rank >= world - P ? rank - (world - P) : rank - T;
        MP_CHECK(role == want_role && index == want_index &&
                         !strcmp(ember_job_name(job, rank), want),
                 "rank %d: role %s index %d name %s; want %s %d %s", rank, kinds[role], index,
                 ember_job_name(job, rank), kinds[want_role], want_index, want);
        if (role == EMBER_ROLE_TRAINER)
            MP_CHECK(ember_job_trainer_rank(job, index) == rank, "trainer %d's rank", index);
        if (role == EMBER_ROLE_PS)
            MP_CHECK(ember_job_ps_rank(job, index) == rank, "ps %d's rank", index);
    }
    int index = 0;
    MP_CHECK(ember_job_role(job, world, &index) == EMBER_ROLE_OTHER && index == -1 &&
                     ember_job_trainer_rank(job, T) == -1 && ember_job_ps_rank(job, P) == -1 &&
                     ember_job_ps_rank(job, -1) == -1 && !strcmp(ember_job_name(job, world), "?"),
             "ranks outside the world");
    MP_CHECK(ember_job_local_rank(job) >= 0 &&
                     ember_job_local_rank(job) < ember_job_local_size(job),
             "local rank %d of %d", ember_job_local_rank(job), ember_job_local_size(job));
}

/* @P EMBER_JOB_PS_REST: the ranks that are not trainers. */
static int roles(int rank, int T, int P, int world)
{
    ember_job_t *job = api_test_join(T, P);
    MP_CHECK(ember_job_rank(job) == rank, "rank %d, joined as %d", rank, ember_job_rank(job));
    check_roles(job, T, P == EMBER_JOB_PS_REST ? world - T : P, world);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS) {
        /* A PS is no client: it meets at no barrier. */
        MP_CHECK(ember_job_barrier(job, "x") == EMBER_ERR_INVALID_PARAM, "a PS's barrier");
        return api_test_ps(job, EMBER_OK);
    }
    for (int i = 0; i < 2; i++) {
        /* Trainer 1 is late to the second: the others wait for it. */
        if (i == 1 && rank == 1)
            sleep(1);
        ember_status_t status = ember_job_barrier(job, i ? "second" : "first");
        MP_CHECK(status == EMBER_OK, "barrier %d: %s", i, ember_status_string(status));
    }
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int roles_master(int rank, int world, void *arg)
{
    return roles(rank, 2, 2, world);
}

static int roles_plain(int rank, int world, void *arg)
{
    return roles(rank, 2, 1, world);
}

/* num_ps EMBER_JOB_PS_REST: the ranks that are not trainers are the PS. */
static int roles_rest(int rank, int world, void *arg)
{
    ember_job_params_t params;
    ember_job_t *job = NULL;
    api_test_log_t log;
    ember_job_params_init(&params);
    MP_CHECK(params.num_ps == EMBER_JOB_PS_REST, "the default P: %d", params.num_ps);
    params.trainers = world; /* nobody left to serve */
    api_test_log_begin(&log);
    ember_status_t status = ember_job_join(&params, &job);
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "every rank a trainer: %s",
             ember_status_string(status));
    api_test_log_has(
            text, "a job without a PS",
            (const char *const[]){"5 trainers and 0 PS (the rest)", "no rank is left", NULL});
    return roles(rank, 2, rank == world - 1 ? 3 : EMBER_JOB_PS_REST, world);
}

/* Rank 1 says there are 2 trainers and 1 PS, the others 1 and 1 (a master). */
static int layout_mismatch(int rank, int world, void *arg)
{
    ember_job_params_t params;
    ember_job_t *job = NULL;
    api_test_log_t log;
    ember_config_set("EMBER_CONNECT_TIMEOUT", "5");
    ember_job_params_init(&params);
    params.trainers = rank == 1 ? 2 : 1;
    params.num_ps = 1;
    api_test_log_begin(&log);
    ember_status_t status = ember_job_join(&params, &job);
    char *text = api_test_log_end(&log);
    MP_CHECK(status != EMBER_OK, "rank %d joined a job whose ranks disagree", rank);
    if (rank == 1) {
        MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "rank 1: %s", ember_status_string(status));
        api_test_log_has(text, "the layout",
                         (const char *const[]){"2 trainers 1 ps", "1 trainers 1 ps", NULL});
    } else {
        free(text);
    }
    return 0;
}

/* ---- a layout from the roles each rank states ------------------------------- */

/* Join stating @role under @name (NULL: the default). */
static ember_status_t join_role(ember_role_t role, const char *name, ember_job_t **job_p)
{
    ember_job_params_t params;
    ember_job_params_init(&params);
    MP_CHECK(params.role == -1, "the default role: %d", params.role);
    params.trainers = EMBER_JOB_FROM_ROLES;
    params.num_ps = EMBER_JOB_FROM_ROLES;
    params.role = (int)role;
    params.name = name;
    return ember_job_join(&params, job_p);
}

/* Rank @rank's role, index and name in @job. */
static void check_rank(ember_job_t *job, int rank, ember_role_t role, int index, const char *name)
{
    int got = -2;
    MP_CHECK(ember_job_role(job, rank, &got) == role && got == index &&
                     !strcmp(ember_job_name(job, rank), name),
             "rank %d: role %d index %d name %s; want %d %d %s", rank,
             (int)ember_job_role(job, rank, NULL), got, ember_job_name(job, rank), (int)role, index,
             name);
}

/* Clients: two barriers, then an orderly end. */
static int meet_and_leave(ember_job_t *job)
{
    for (int i = 0; i < 2; i++) {
        ember_status_t status = ember_job_barrier(job, i ? "second" : "first");
        MP_CHECK(status == EMBER_OK, "barrier %d: %s", i, ember_status_string(status));
    }
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int from_roles(int rank, int world, void *arg)
{
    static const ember_role_t roles[] = {EMBER_ROLE_TRAINER, EMBER_ROLE_TRAINER, EMBER_ROLE_OTHER,
                                         EMBER_ROLE_PS};
    static const char *const names[] = {"trainer0", "trainer1", "master", "ps"};
    ember_job_t *job = NULL;
    ember_status_t status = join_role(roles[rank], names[rank], &job);
    MP_CHECK(status == EMBER_OK, "rank %d: joining as %s: %s", rank, names[rank],
             ember_status_string(status));
    MP_CHECK(ember_job_rank(job) == rank && ember_job_world_size(job) == world &&
                     ember_job_trainers(job) == 2 && ember_job_num_ps(job) == 1 &&
                     ember_job_coordinator(job) == 2,
             "rank %d of %d, %d trainers, %d PS, coordinator %d", ember_job_rank(job),
             ember_job_world_size(job), ember_job_trainers(job), ember_job_num_ps(job),
             ember_job_coordinator(job));
    for (int r = 0; r < world; r++)
        check_rank(job, r, roles[r], r < 2 ? r : 0, names[r]);
    MP_CHECK(ember_job_trainer_rank(job, 1) == 1 && ember_job_ps_rank(job, 0) == 3 &&
                     ember_job_ps_rank(job, 1) == -1,
             "the trainers' and PS's ranks");
    if (roles[rank] == EMBER_ROLE_PS)
        return api_test_ps(job, EMBER_OK);
    return meet_and_leave(job);
}

/* ps, trainer, other: out of the layout, refused on every rank alike. */
static int roles_order(int rank, int world, void *arg)
{
    static const ember_role_t roles[] = {EMBER_ROLE_PS, EMBER_ROLE_TRAINER, EMBER_ROLE_OTHER};
    ember_job_params_t params;
    ember_job_t *job = NULL;
    api_test_log_t log;
    ember_config_set("EMBER_CONNECT_TIMEOUT", "10");
    /* A program of ABI 1.0 passes a struct without the role: init leaves
     * it alone, and the join refuses roles from it. */
    params.role = 7;
    ember_job_params_init_abi(&params, EMBER_ABI_VERSION_MAKE(1, 0));
    MP_CHECK(params.role == 7 && params.rank == -1, "an ABI 1.0 init wrote the role");
    params.trainers = params.num_ps = EMBER_JOB_FROM_ROLES;
    api_test_log_begin(&log);
    ember_status_t status = ember_job_join(&params, &job);
    api_test_log_has(api_test_log_end(&log), "roles from ABI 1.0",
                     (const char *const[]){"ABI 1.1", NULL});
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "roles from ABI 1.0: %s",
             ember_status_string(status));
    api_test_log_begin(&log);
    status = join_role(roles[rank], NULL, &job);
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "rank %d: roles out of order: %s", rank,
             ember_status_string(status));
    api_test_log_has(text, "roles out of order",
                     (const char *const[]){"rank 0 (ps-rank0)", "role ps", "needs a trainer",
                                           "the PS last", NULL});
    return 0;
}

/* A trainer and another rank (the coordinator), no PS. */
static int roles_no_ps(int rank, int world, void *arg)
{
    ember_job_t *job = NULL;
    api_test_log_t log;
    ember_status_t status = join_role(rank ? EMBER_ROLE_OTHER : EMBER_ROLE_TRAINER, NULL, &job);
    MP_CHECK(status == EMBER_OK, "rank %d: %s", rank, ember_status_string(status));
    MP_CHECK(ember_job_trainers(job) == 1 && ember_job_num_ps(job) == 0 &&
                     ember_job_coordinator(job) == 1 && ember_job_ps_rank(job, 0) == -1,
             "%d trainers, %d PS, coordinator %d", ember_job_trainers(job), ember_job_num_ps(job),
             ember_job_coordinator(job));
    check_rank(job, 0, EMBER_ROLE_TRAINER, 0, "trainer0");
    check_rank(job, 1, EMBER_ROLE_OTHER, 0, "other-rank1");
    if (rank == 0) {
        ember_table_config_t config;
        ember_table_t *table = NULL;
        ember_table_config_init(&config);
        config.name = "T";
        config.num_embeddings = 4;
        config.embedding_dim = 2;
        api_test_log_begin(&log);
        status = ember_table_create(job, &config, &table);
        api_test_log_has(api_test_log_end(&log), "a table without PS",
                         (const char *const[]){"table T", "no PS", NULL});
        MP_CHECK(status == EMBER_ERR_INVALID_PARAM && !table, "a table without PS: %s",
                 ember_status_string(status));
    }
    return meet_and_leave(job);
}

/* ---- failures -------------------------------------------------------------- */

/* 2 trainers, a master, 1 PS: trainer 1 aborts; everyone else hears it. */
static int abort_case(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(2, 1);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS) {
        api_test_ps(job, EMBER_ERR_CANCELED);
        return 0;
    }
    ember_status_t status = ember_job_barrier(job, "before");
    MP_CHECK(status == EMBER_OK, "%s: the first barrier, released before the abort: %s",
             ember_job_name(job, rank), ember_status_string(status));
    if (rank == 1) {
        ember_job_abort(job, "the data ran dry");
        return 0;
    }
    /* The master hears of it outside any barrier: trainer 0's, held there,
     * fails with the abort (not at the barrier timeout). */
    for (int i = 0; rank == 2 && i < 400 && !*ember_job_aborted(job); i++)
        ember_job_wait(job, 0.05);
    status = ember_job_barrier(job, "after");
    MP_CHECK(status == EMBER_ERR_CANCELED, "%s: barrier after the abort: %s",
             ember_job_name(job, rank), ember_status_string(status));
    /* The master's answer may come before trainer 1's word to this rank. */
    for (int i = 0; i < 100 && !*ember_job_aborted(job); i++)
        ember_job_wait(job, 0.05);
    MP_CHECK(strstr(ember_job_aborted(job), "the data ran dry") &&
                     strstr(ember_job_aborted(job), "trainer1"),
             "the cause: '%s'", ember_job_aborted(job));
    MP_CHECK(ember_job_wait(job, 0.01) == EMBER_ERR_CANCELED, "ember_job_wait after an abort");
    ember_job_leave(job, EMBER_OK); /* an aborted job leaves as failed */
    return 0;
}

/* 1 trainer, a master, 1 PS: the master dies after the first barrier. */
static int coordinator_lost(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(1, 1);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS)
        return api_test_ps(job, EMBER_ERR_PEER_LOST);
    MP_CHECK(ember_job_barrier(job, "before") == EMBER_OK, "the first barrier");
    if (rank == 1) { /* the master, a little later, without a word */
        const time_t until = time(NULL) + 1;
        while (time(NULL) <= until)
            ember_job_wait(job, 0.1);
        _exit(3);
    }
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_job_barrier(job, "after");
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_PEER_LOST || status == EMBER_ERR_TIMED_OUT, "barrier: %s",
             ember_status_string(status));
    api_test_log_has(text, "the barrier", (const char *const[]){"master", NULL});
    MP_CHECK(ember_job_peer_lost(job, 1) && *ember_job_peer_reason(job, 1),
             "the master is not known lost");
    ember_job_leave(job, status);
    return 0;
}

/* 2 trainers, 1 PS: trainer 1 comes late, past trainer 0's timeout. */
static int barrier_timeout(int rank, int world, void *arg)
{
    ember_config_set("EMBER_CONNECT_TIMEOUT", "3");
    ember_job_t *job = api_test_join(2, 1);
    if (rank == 2)
        return api_test_ps(job, EMBER_OK);
    if (rank == 1) {
        ember_job_wait(job, 5.0);
        ember_job_leave(job, EMBER_OK);
        return 0;
    }
    api_test_log_t log;
    api_test_log_begin(&log);
    const time_t started = time(NULL);
    ember_status_t status = ember_job_barrier(job, "late");
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_TIMED_OUT, "barrier: %s", ember_status_string(status));
    MP_CHECK(time(NULL) - started < 30, "the barrier took %ld s", (long)(time(NULL) - started));
    api_test_log_has(text, "the barrier",
                     (const char *const[]){"'late'", "trainer1 (rank 1)", "3 s", NULL});
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* 3 trainers, 1 PS: trainer 2 meets under another name. */
static int barrier_names(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(3, 1);
    if (rank == 3)
        return api_test_ps(job, EMBER_OK);
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_job_barrier(job, rank == 2 ? "epoch" : "step");
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "%s: barrier: %s", ember_job_name(job, rank),
             ember_status_string(status));
    if (rank == 0)
        api_test_log_has(text, "the names", (const char *const[]){"'epoch'", "'step'", NULL});
    else
        free(text);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ---- tables ------------------------------------------------------------------ */

enum {
    A_ROWS = 11,
    A_DIM = 3,
    B_ROWS = 9,
    B_DIM = 2,
    B_SEED = 7
};

static float a_initial(int64_t r, uint32_t c)
{
    return (float)(r * 10 + c) + 0.25f;
}

/* One bad setting on the defaults of a good table, refused naming it. */
typedef struct {
    const char *what;
    void (*spoil)(ember_table_config_t *c);
    ember_status_t want;
    const char *says;
} bad_config_t;

static void bad_name(ember_table_config_t *c)
{
    c->name = "no spaces";
}
static void bad_rows(ember_table_config_t *c)
{
    c->num_embeddings = 0;
}
static void bad_dim(ember_table_config_t *c)
{
    c->embedding_dim = 70000;
}
static void bad_dtype(ember_table_config_t *c)
{
    c->dtype = EMBER_DTYPE_I64;
}
static void bad_init(ember_table_config_t *c)
{
    c->init = EMBER_TABLE_INIT_ROWS;
}
static void bad_first_ps(ember_table_config_t *c)
{
    c->first_ps = 2;
}
static void bad_shards(ember_table_config_t *c)
{
    c->first_ps = 1, c->num_shards = 2;
}
static void bad_table_wise(ember_table_config_t *c)
{
    c->sharding = EMBER_SHARD_TABLE_WISE, c->num_shards = 2;
}
static void bad_lr(ember_table_config_t *c)
{
    c->optimizer.lr = -1.0f;
}
static void bad_betas(ember_table_config_t *c)
{
    ember_opt_config_default(EMBER_OPT_ADAM, 0.1f, &c->optimizer);
    c->optimizer.beta1 = 1.0f;
}
static void bad_async_stale(ember_table_config_t *c)
{
    c->consistency = EMBER_ASYNC, c->staleness = 1;
}
static void bad_staleness(ember_table_config_t *c)
{
    c->staleness = EMBER_STALENESS_MAX + 1;
}
static void bad_trainers(ember_table_config_t *c)
{
    c->trainers = 3;
}
static void bad_device(ember_table_config_t *c)
{
    c->device = "tpu";
}
static void taken_name(ember_table_config_t *c)
{
    c->name = "A";
}

static const bad_config_t bad_configs[] = {
        {"a name with a space", bad_name, EMBER_ERR_INVALID_PARAM, "no spaces"},
        {"no rows", bad_rows, EMBER_ERR_INVALID_PARAM, "0 rows"},
        {"dim 70000", bad_dim, EMBER_ERR_INVALID_PARAM, "dim 70000"},
        {"I64 rows", bad_dtype, EMBER_ERR_INVALID_PARAM, "dtype I64"},
        {"INIT_ROWS without rows", bad_init, EMBER_ERR_INVALID_PARAM, "initial_rows missing"},
        {"first_ps 2 of 2", bad_first_ps, EMBER_ERR_INVALID_PARAM, "first_ps 2"},
        {"2 shards from ps1", bad_shards, EMBER_ERR_INVALID_PARAM, "2 shards from ps1"},
        {"table-wise over 2", bad_table_wise, EMBER_ERR_INVALID_PARAM, "num_shards 2"},
        {"lr -1", bad_lr, EMBER_ERR_INVALID_PARAM, "lr must be"},
        {"Adam beta1 1", bad_betas, EMBER_ERR_INVALID_PARAM, "betas"},
        {"async with staleness", bad_async_stale, EMBER_ERR_INVALID_PARAM, "staleness 1"},
        {"staleness 17", bad_staleness, EMBER_ERR_INVALID_PARAM, "staleness 17"},
        {"3 trainers of 2", bad_trainers, EMBER_ERR_INVALID_PARAM, "trainers 3"},
        {"device tpu", bad_device, EMBER_ERR_INVALID_PARAM, "'tpu'"},
        {"a taken name", taken_name, EMBER_ERR_EXISTS, "exists"},
};

static void refuse_bad_configs(ember_job_t *job)
{
    for (size_t i = 0; i < sizeof(bad_configs) / sizeof(bad_configs[0]); i++) {
        const bad_config_t *bad = &bad_configs[i];
        ember_table_config_t c;
        ember_table_t *table = NULL;
        ember_table_config_init(&c);
        c.name = "fine";
        c.num_embeddings = 5;
        c.embedding_dim = 2;
        bad->spoil(&c);
        api_test_log_t log;
        api_test_log_begin(&log);
        ember_status_t status = ember_table_create(job, &c, &table);
        char *text = api_test_log_end(&log);
        MP_CHECK(status == bad->want && !table, "%s: %s, expected %s", bad->what,
                 ember_status_string(status), ember_status_string(bad->want));
        api_test_log_has(text, bad->what, (const char *const[]){bad->says, NULL});
    }
}

/* Rows [first, first + count) of @table equal @want(r, c). */
static void check_rows(ember_table_t *table, int64_t first, int64_t count,
                       float (*want)(int64_t, uint32_t))
{
    const ember_table_config_t *c = ember_table_config(table);
    float *rows = malloc((size_t)(count ? count : 1) * c->embedding_dim * sizeof(float));
    MP_CHECK(rows, "out of memory");
    ember_status_t status = ember_table_read_rows(table, first, count, rows);
    MP_CHECK(status == EMBER_OK, "table %s: rows [%lld, +%lld): %s", c->name, (long long)first,
             (long long)count, ember_status_string(status));
    for (int64_t r = 0; r < count; r++) {
        for (uint32_t d = 0; d < c->embedding_dim; d++) {
            float got = rows[r * c->embedding_dim + d], w = want(first + r, d);
            MP_CHECK(memcmp(&got, &w, sizeof(float)) == 0,
                     "table %s row %lld col %u: %.9g, want %.9g", c->name, (long long)(first + r),
                     d, (double)got, (double)w);
        }
    }
    free(rows);
}

static float b_initial(int64_t r, uint32_t c)
{
    return ember_normal_at(B_SEED, (uint64_t)r * B_DIM + c);
}

static float zero(int64_t r, uint32_t c)
{
    return 0.0f;
}

/* H: fp16 rows of a_initial's values / 7, as the PS stores them. */
static float h_value(int64_t r, uint32_t c)
{
    return a_initial(r, c) / 7.0f;
}

static float h_stored(int64_t r, uint32_t c)
{
    return ember_half_to_float(ember_float_to_half(h_value(r, c)));
}

static float a_written(int64_t r, uint32_t c)
{
    return r >= 3 && r < 8 ? -(float)(r * 100 + c) : a_initial(r, c);
}

/* Trainer 0: A row-wise over both PS from its rows, B table-wise on ps1
 * drawn N(0,1), Z zeros; then every bad config. */
static void tables_create(ember_job_t *job, ember_table_t **a, ember_table_t **b, ember_table_t **z)
{
    float initial[A_ROWS * A_DIM];
    for (int64_t r = 0; r < A_ROWS; r++)
        for (uint32_t d = 0; d < A_DIM; d++)
            initial[r * A_DIM + d] = a_initial(r, d);
    ember_table_config_t c;
    ember_table_config_init(&c);
    c.name = "A", c.num_embeddings = A_ROWS, c.embedding_dim = A_DIM;
    c.init = EMBER_TABLE_INIT_ROWS, c.initial_rows = initial;
    MP_CHECK(ember_table_create(job, &c, a) == EMBER_OK, "creating A");
    ember_table_config_init(&c);
    c.name = "B", c.num_embeddings = B_ROWS, c.embedding_dim = B_DIM, c.seed = B_SEED;
    c.sharding = EMBER_SHARD_TABLE_WISE, c.first_ps = 1;
    MP_CHECK(ember_table_create(job, &c, b) == EMBER_OK, "creating B");
    ember_table_config_init(&c);
    c.name = "Z", c.num_embeddings = 4, c.embedding_dim = 2, c.init = EMBER_TABLE_INIT_ZEROS;
    MP_CHECK(ember_table_create(job, &c, z) == EMBER_OK, "creating Z");
    for (int64_t r = 0; r < A_ROWS; r++)
        for (uint32_t d = 0; d < A_DIM; d++)
            initial[r * A_DIM + d] = h_value(r, d);
    ember_table_t *h;
    ember_table_config_init(&c);
    c.name = "H", c.num_embeddings = A_ROWS, c.embedding_dim = A_DIM, c.dtype = EMBER_DTYPE_F16;
    c.init = EMBER_TABLE_INIT_ROWS, c.initial_rows = initial;
    MP_CHECK(ember_table_create(job, &c, &h) == EMBER_OK, "creating H (fp16)");
    check_rows(h, 0, A_ROWS, h_stored);
    MP_CHECK(h_stored(1, 1) != h_value(1, 1), "H's values are not rounded by fp16");
    MP_CHECK(ember_table_destroy(h) == EMBER_OK, "destroying H");
    const ember_table_config_t *got = ember_table_config(*a);
    MP_CHECK(got->num_shards == 2 && got->trainers == 2 && !strcmp(got->name, "A") &&
                     !strcmp(got->device, "cpu"),
             "A's config: %u shards, %u trainers", got->num_shards, got->trainers);
    refuse_bad_configs(job);
}

/* Trainer 1: opens what trainer 0 creates (waiting), reads, writes. */
static void tables_other(ember_job_t *job)
{
    ember_table_t *a, *b;
    MP_CHECK(ember_table_open(job, "A", &a) == EMBER_OK, "opening A");
    MP_CHECK(ember_table_open(job, "B", &b) == EMBER_OK, "opening B");
    const ember_table_config_t *bc = ember_table_config(b);
    MP_CHECK(bc->sharding == EMBER_SHARD_TABLE_WISE && bc->first_ps == 1 && bc->num_shards == 1 &&
                     bc->seed == B_SEED,
             "B as opened: sharding %d on ps%u, %u shards", (int)bc->sharding, bc->first_ps,
             bc->num_shards);
    check_rows(a, 0, A_ROWS, a_initial);
    check_rows(a, 3, 5, a_initial);
    check_rows(a, A_ROWS, 0, a_initial);
    check_rows(b, 0, B_ROWS, b_initial);
    float rows[5 * A_DIM];
    for (int64_t r = 3; r < 8; r++)
        for (uint32_t d = 0; d < A_DIM; d++)
            rows[(r - 3) * A_DIM + d] = a_written(r, d);
    MP_CHECK(ember_table_write_rows(a, 3, 5, rows) == EMBER_OK, "writing A");
    float out[A_DIM];
    MP_CHECK(ember_table_read_rows(a, 10, 2, out) == EMBER_ERR_OUT_OF_RANGE &&
                     ember_table_write_rows(a, -1, 1, rows) == EMBER_ERR_OUT_OF_RANGE,
             "rows outside the table");
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_table_destroy(b); /* not its creator: the handle goes */
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "destroying another's table: %s",
             ember_status_string(status));
    api_test_log_has(text, "destroy", (const char *const[]){"table B", "trainer0", NULL});
    MP_CHECK(ember_job_barrier(job, "written") == EMBER_OK, "barrier");
    MP_CHECK(ember_job_barrier(job, "destroyed") == EMBER_OK, "barrier");
    ember_table_t *z = NULL;
    ember_config_set("EMBER_CONNECT_TIMEOUT", "2");
    api_test_log_begin(&log);
    status = ember_table_open(job, "Z", &z);
    text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_NOT_FOUND && !z, "opening the destroyed Z: %s",
             ember_status_string(status));
    api_test_log_has(text, "opening Z", (const char *const[]){"table Z", "not created", NULL});
    ember_table_close(a);
    MP_CHECK(ember_job_barrier(job, "done") == EMBER_OK, "barrier");
}

static int tables(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(2, 2);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS)
        return api_test_ps(job, EMBER_OK);
    if (rank == 1) {
        tables_other(job);
        ember_job_leave(job, EMBER_OK);
        return 0;
    }
    ember_table_t *a, *b, *z;
    tables_create(job, &a, &b, &z);
    check_rows(z, 0, 4, zero);
    MP_CHECK(ember_job_barrier(job, "written") == EMBER_OK, "barrier");
    check_rows(a, 0, A_ROWS, a_written);
    MP_CHECK(ember_table_destroy(z) == EMBER_OK, "destroying Z");
    MP_CHECK(ember_job_barrier(job, "destroyed") == EMBER_OK, "barrier");
    ember_ps_stats_t stats;
    MP_CHECK(ember_ps_stats(job, 1, &stats) == EMBER_OK, "stats of ps1");
    /* ps1: A's odd rows (5 x 3) and all of B (9 x 2), fp32 */
    MP_CHECK(stats.table_bytes == (5 * A_DIM + B_ROWS * B_DIM) * sizeof(float) &&
                     stats.threads == API_TEST_PS_THREADS && stats.rss_bytes > 0,
             "ps1 holds %llu bytes of rows with %u threads", (unsigned long long)stats.table_bytes,
             stats.threads);
    MP_CHECK(ember_ps_stats(job, 2, &stats) == EMBER_ERR_INVALID_PARAM, "stats of ps2 of 2");
    ember_table_close(a);
    MP_CHECK(ember_table_destroy(b) == EMBER_OK, "destroying B");
    MP_CHECK(ember_job_barrier(job, "done") == EMBER_OK, "barrier");
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ---- the allreduce ------------------------------------------------------------- */

enum {
    AR_SMALL = 37,
    AR_LARGE = 300000
};

static int allreduce(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(3, 1);
    if (rank == 3)
        return api_test_ps(job, EMBER_OK);
    ember_allreduce_t *ar, *ar2;
    MP_CHECK(ember_allreduce_create(job, NULL, &ar) == EMBER_OK, "allreduce_create");
    MP_CHECK(ember_allreduce_create(job, NULL, &ar2) == EMBER_OK, "a second allreduce");
    float *small = malloc(AR_SMALL * sizeof(float)), *other = malloc(AR_SMALL * sizeof(float));
    float *large = malloc(AR_LARGE * sizeof(float));
    MP_CHECK(small && other && large, "out of memory");
    for (int i = 0; i < AR_SMALL; i++) {
        small[i] = (float)((rank + 1) * i);
        other[i] = (float)(rank == 1 ? 3 * i : 0);
    }
    for (int i = 0; i < AR_LARGE; i++)
        large[i] = (float)(rank + 1 + i % 7);
    ember_allreduce_req_t *r1, *r2, *r3;
    MP_CHECK(ember_allreduce_start(ar, small, AR_SMALL, EMBER_ALLREDUCE_SUM, &r1) == EMBER_OK &&
                     ember_allreduce_start(ar, large, AR_LARGE, EMBER_ALLREDUCE_AVG, &r2) ==
                             EMBER_OK &&
                     ember_allreduce_start(ar2, other, AR_SMALL, EMBER_ALLREDUCE_SUM, &r3) ==
                             EMBER_OK,
             "starting three");
    MP_CHECK(ember_allreduce_wait(r3) == EMBER_OK && ember_allreduce_wait(r1) == EMBER_OK &&
                     ember_allreduce_wait(r2) == EMBER_OK,
             "waiting");
    for (int i = 0; i < AR_SMALL; i++)
        MP_CHECK(small[i] == (float)(6 * i) && other[i] == (float)(3 * i),
                 "element %d: %g and %g, want %d and %d", i, (double)small[i], (double)other[i],
                 6 * i, 3 * i);
    for (int i = 0; i < AR_LARGE; i++)
        MP_CHECK(large[i] == (float)(2 + i % 7), "large element %d: %g, want %d", i,
                 (double)large[i], 2 + i % 7);
    MP_CHECK(ember_allreduce(ar, small, 0, EMBER_ALLREDUCE_SUM) == EMBER_OK, "an empty reduce");
    MP_CHECK(ember_allreduce(ar, small, 4, (ember_allreduce_op_t)7) == EMBER_ERR_INVALID_PARAM,
             "an unknown op");
    ember_allreduce_destroy(ar2);
    ember_allreduce_destroy(ar);
    free(small);
    free(other);
    free(large);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ---- a table's optimizer set after its creation ------------------------------ */

#define OPT_ROWS 4
#define OPT_DIM  2

/* Table O: OPT_ROWS x OPT_DIM rows 0.1 * i, SGD lr 0.1, stepped by trainer 0 alone. */
static ember_table_t *opt_table_create(ember_job_t *job, float *w0)
{
    ember_table_config_t config;
    ember_table_t *table = NULL;
    for (int i = 0; i < OPT_ROWS * OPT_DIM; i++)
        w0[i] = 0.1f * (float)i;
    ember_table_config_init(&config);
    config.name = "O";
    config.num_embeddings = OPT_ROWS;
    config.embedding_dim = OPT_DIM;
    config.init = EMBER_TABLE_INIT_ROWS;
    config.initial_rows = w0;
    config.trainers = 1;
    ember_opt_config_default(EMBER_OPT_SGD, 0.1f, &config.optimizer);
    ember_status_t status = ember_table_create(job, &config, &table);
    MP_CHECK(status == EMBER_OK, "creating O: %s", ember_status_string(status));
    return table;
}

/* @table set to @cfg: the status, and *changed_p. */
static void opt_set(ember_table_t *table, const ember_opt_config_t *cfg, int want_changed)
{
    int changed = -1;
    ember_status_t status = ember_table_set_optimizer(table, cfg, &changed);
    MP_CHECK(status == EMBER_OK && changed == want_changed, "setting %s lr %g: %s, changed %d",
             ember_opt_kind_name(cfg->kind), (double)cfg->lr, ember_status_string(status), changed);
    MP_CHECK(!memcmp(&ember_table_config(table)->optimizer, cfg, sizeof(*cfg)),
             "the handle's config keeps the old optimizer");
}

/* @cfg refused, the log naming @says. */
static void opt_refused(ember_table_t *table, const ember_opt_config_t *cfg, const char *what,
                        const char *says)
{
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_table_set_optimizer(table, cfg, NULL);
    api_test_log_has(api_test_log_end(&log), what, (const char *const[]){"table O", says, NULL});
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "%s: %s", what, ember_status_string(status));
}

/* One step of trainer 0: row 1 looked up alone, @grad pushed and awaited. */
static void opt_step(ember_job_t *job, ember_table_t *table, const float *grad)
{
    const ember_feature_t feature = {
            .name = "f", .table = table, .pooling = EMBER_BAG_SUM, .padding_idx = -1};
    ember_ebc_options_t options;
    ember_ebc_t *ebc = NULL;
    ember_lookup_t *lookup = NULL;
    const int64_t values[1] = {1};
    const int32_t lengths[1] = {1};
    const ember_kjt_t kjt = {.num_features = 1,
                             .batch_size = 1,
                             .values = values,
                             .lengths = lengths,
                             .num_values = 1};
    float out[OPT_DIM];
    ember_ebc_options_init(&options);
    MP_CHECK(ember_ebc_create(job, &feature, 1, &options, &ebc) == EMBER_OK, "the ebc");
    MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &lookup) == EMBER_OK, "the lookup");
    MP_CHECK(ember_lookup_wait(lookup, out, NULL) == EMBER_OK, "the lookup's wait");
    MP_CHECK(ember_lookup_backward(lookup, grad, EMBER_BACKWARD_WAIT) == EMBER_OK, "the push");
    ember_lookup_release(lookup);
    MP_CHECK(ember_ebc_flush(ebc) == EMBER_OK, "the flush");
    ember_ebc_destroy(ebc);
}

/* Trainer 0: the optimizer set, checked, then a step under it. */
static void opt_trainer0(ember_job_t *job, ember_table_t *table, const float *w0)
{
    ember_opt_config_t adagrad, bad;
    ember_opt_config_default(EMBER_OPT_ADAGRAD, 0.5f, &adagrad);
    opt_set(table, &adagrad, 1);
    opt_set(table, &adagrad, 0); /* the same: state kept */
    ember_opt_config_default(EMBER_OPT_SGD, -1.0f, &bad);
    opt_refused(table, &bad, "lr -1", "lr must be");
    ember_opt_config_default(EMBER_OPT_ADAM, 0.1f, &bad);
    bad.beta1 = 1.0f;
    opt_refused(table, &bad, "Adam beta1 1", "betas");
    MP_CHECK(ember_table_config(table)->optimizer.kind == EMBER_OPT_ADAGRAD,
             "a refused config changed the handle's");
    const float grad[OPT_DIM] = {2.0f, -4.0f};
    opt_step(job, table, grad);
    float rows[OPT_ROWS * OPT_DIM];
    MP_CHECK(ember_table_read_rows(table, 0, OPT_ROWS, rows) == EMBER_OK, "reading O");
    for (int i = 0; i < OPT_ROWS * OPT_DIM; i++) {
        /* Adagrad's first step: sum = 0 + g^2, w -= lr g / (sqrt(sum) + eps). */
        const float g = i / OPT_DIM == 1 ? grad[i % OPT_DIM] : 0.0f;
        const float want =
                g == 0.0f ? w0[i] : w0[i] - adagrad.lr * g / (sqrtf(g * g) + adagrad.eps);
        MP_CHECK(fabsf(rows[i] - want) < 1e-6f, "O[%d] %g, Adagrad's %g (SGD's %g)", i,
                 (double)rows[i], (double)want, (double)(w0[i] - 0.1f * g));
    }
}

static int set_optimizer(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(2, 1);
    float w0[OPT_ROWS * OPT_DIM];
    ember_table_t *table = NULL;
    if (rank == 2)
        return api_test_ps(job, EMBER_OK);
    if (rank == 0)
        table = opt_table_create(job, w0);
    MP_CHECK(ember_job_barrier(job, "created") == EMBER_OK, "barrier created");
    if (rank == 1)
        MP_CHECK(ember_table_open(job, "O", &table) == EMBER_OK, "opening O");
    if (rank == 0)
        opt_trainer0(job, table, w0);
    MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier trained");
    if (rank == 1) {
        ember_opt_config_t sgd;
        ember_opt_config_default(EMBER_OPT_SGD, 0.2f, &sgd);
        opt_set(table, &sgd, 1); /* through a handle that did not create it */
        opt_set(table, &sgd, 0);
    }
    MP_CHECK(ember_job_barrier(job, "set") == EMBER_OK, "barrier set");
    if (rank == 0)
        MP_CHECK(ember_table_destroy(table) == EMBER_OK, "destroying O");
    else
        ember_table_close(table);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int optimizer_ckpt(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(1, 1);
    if (rank == 1)
        return api_test_ps(job, EMBER_OK);
    float w0[OPT_ROWS * OPT_DIM];
    char root[] = "/tmp/ember-opt-ckpt-XXXXXX", err[400];
    MP_CHECK(mkdtemp(root), "mkdtemp");
    ember_table_t *table = opt_table_create(job, w0);
    ember_checkpoint_config_t config;
    ember_checkpoint_t *ckpt = NULL;
    ember_checkpoint_config_init(&config);
    config.root = root;
    ember_status_t status = ember_checkpoint_open(job, &config, &ckpt, err, sizeof(err));
    MP_CHECK(status == EMBER_OK, "ember_checkpoint_open: %s: %s", ember_status_string(status), err);
    ember_opt_config_t cfg = ember_table_config(table)->optimizer;
    opt_set(table, &cfg, 0); /* the same: taken */
    ember_opt_config_default(EMBER_OPT_ADAGRAD, 0.5f, &cfg);
    opt_refused(table, &cfg, "another optimizer with checkpoints", "checkpoints");
    MP_CHECK(ember_table_config(table)->optimizer.kind == EMBER_OPT_SGD,
             "a refused config changed the handle's");
    ember_checkpoint_close(ckpt);
    ember_table_close(table);
    ember_job_leave(job, EMBER_OK);
    rmdir(root);
    return 0;
}

static const mp_case_t cases[] = {
        {"roles_master", roles_master, 5, 0},
        {"roles_plain", roles_plain, 3, 0},
        {"roles_rest", roles_rest, 5, 0},
        {"layout_mismatch", layout_mismatch, 3, 0},
        {"from_roles", from_roles, 4, 0},
        {"roles_order", roles_order, 3, 0},
        {"roles_no_ps", roles_no_ps, 2, 0},
        {"abort", abort_case, 4, 0},
        {"coordinator_lost", coordinator_lost, 3, 1u << 1},
        {"barrier_timeout", barrier_timeout, 3, 0},
        {"barrier_names", barrier_names, 4, 0},
        {"tables", tables, 4, 0},
        {"allreduce", allreduce, 4, 0},
        {"set_optimizer", set_optimizer, 3, 0},
        {"optimizer_ckpt", optimizer_ckpt, 2, 0},
};

int main(int argc, char **argv)
{
    return mp_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 120.0);
}
