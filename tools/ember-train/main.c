/*
 * ember-train: the hybrid training job.  Every rank runs this program with
 * the same flags; its rank says what it is (<ember/job.h>): ranks 0..T-1
 * the trainers, rank T the master, the last P the parameter servers.
 * Defaults: the PyTorch tutorial's job.
 *
 *   ember-run -n 4 ember-train            (2 trainers, master, 1 PS)
 *
 * This file is the launch: the flags (flags.c, the models' own through
 * models/model.h), the checks that need no other rank, the job joined,
 * and each role's part (master.c, trainer.c, the library's PS).
 */
#include "tools/ember-train/flags.h"
#include "tools/ember-train/master.h"
#include "tools/ember-train/trainer.h"

#include <ember/config.h>
#include <ember/device.h>
#include <ember/job.h>
#include <ember/log.h>
#include <ember/ps.h>
#include <ember/version.h>

#include <stdio.h>
#include <string.h>

/* What a phase returns to go on; anything else is main's exit code. */
#define GO_ON (-1)

/* The flags (and the files the model reads for them) into @job;
 * --help and --version end here. */
static int job_read(int argc, char **argv, train_job_t *job)
{
    train_action_t action;
    if (ember_config_init() != EMBER_OK)
        return 2;
    if (train_flags_parse(argc, argv, job, &action) != EMBER_OK)
        return 2;
    if (action == TRAIN_HELP)
        return 0;
    if (action == TRAIN_VERSION) {
        printf("ember-train %s (libember %s)\n", EMBER_VERSION_STRING, ember_version_string());
        return 0;
    }
    return GO_ON;
}

/* Fail before joining when the asked-for device is not there. */
static int devices_check(const train_job_t *job)
{
    const char *gpu_flag = strcmp(job->settings.device, "cuda") == 0      ? "--device"
                           : strcmp(job->settings.ps_device, "cuda") == 0 ? "--ps-device"
                                                                          : NULL;
    if (gpu_flag && ember_device_cuda_count() == 0) {
        fprintf(stderr, "ember-train: %s cuda: %s\n", gpu_flag,
                !ember_device_have_cuda()     ? "this build has no CUDA backend"
                : !ember_device_cuda_loaded() ? "the CUDA backend cannot be loaded "
                                                "(the error above says from where)"
                                              : "no CUDA GPU is visible");
        return 2;
    }
    return GO_ON;
}

/* What the launcher says, checked before joining: the world the job
 * needs; the master's outputs (a path it cannot write ends the job now,
 * not after the training: the launcher stops the other ranks). */
static int launch_check(const train_job_t *job)
{
    int rank, world;
    ember_job_launch_rank(&rank, &world);
    if (world > 0 && world != train_world_size(job)) {
        fprintf(stderr,
                "ember-train: the job needs %d processes (%d trainers + master "
                "+ %d ps) but %d were started\n",
                train_world_size(job), job->settings.trainers, job->settings.num_ps, world);
        return 2;
    }
    if ((rank < 0 || rank == job->settings.trainers) && train_check_outputs(job) != EMBER_OK)
        return 2;
    return GO_ON;
}

/* Join the job's world, bound near this rank's devices (--bind). */
static int join(const train_job_t *job, ember_job_t **job_p)
{
    ember_job_params_t params;
    ember_job_params_init(&params);
    params.trainers = job->settings.trainers;
    params.num_ps = job->settings.num_ps;
    params.bind = 1; /* as EMBER_BIND says (--bind sets it): numa by default */
    ember_status_t status = ember_job_join(&params, job_p);
    if (status != EMBER_OK) {
        fprintf(stderr, "ember-train: cannot join the job: %s\n", ember_status_string(status));
        return 1;
    }
    if (ember_job_world_size(*job_p) != train_world_size(job)) {
        fprintf(stderr, "ember-train: the job needs %d processes, the world has %d\n",
                train_world_size(job), ember_job_world_size(*job_p));
        ember_job_leave(*job_p, EMBER_ERR_INVALID_PARAM);
        return 2;
    }
    return GO_ON;
}

/* This rank's part of the job, then its end: an orderly leave, or (the
 * master, on a failure while the trainers ran) an abort of the others. */
static int role_run(ember_job_t *job, const train_job_t *tj)
{
    char cause[512] = "";
    ember_status_t status;
    switch (ember_job_role(job, ember_job_rank(job), NULL)) {
    case EMBER_ROLE_PS: {
        ember_ps_options_t options;
        ember_ps_options_init(&options);
        options.threads = tj->ps_threads;
        options.signals = tj->checkpoint_dir != NULL; /* SIGUSR1/SIGTERM: a checkpoint */
        status = ember_ps_serve(job, &options);
        ember_job_leave(job, status);
        return status == EMBER_OK ? 0 : 1;
    }
    case EMBER_ROLE_TRAINER:
        status = train_trainer_run(job, tj);
        ember_job_leave(job, status);
        return status == EMBER_OK ? 0 : 1;
    default: break;
    }
    status = train_master_run(job, tj, cause);
    if (cause[0]) {
        fprintf(stderr, "ember-train: job failed: %s\n", cause);
        ember_job_abort(job, cause);
    } else {
        /* The trainers are done: the job ends in order, whatever this run's
         * verdict (a failed check, a stop at a checkpoint). */
        ember_job_leave(job, EMBER_OK);
    }
    return status == EMBER_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    train_job_t tj = {.config = NULL};
    ember_job_t *job = NULL;
    int code;
    ember_crash_handler_install(); /* a crashed rank says where */
    ember_device_blas_check(argv); /* returns only to go on, fast kernels or not */
    if ((code = job_read(argc, argv, &tj)) == GO_ON && (code = devices_check(&tj)) == GO_ON &&
        (code = launch_check(&tj)) == GO_ON && (code = join(&tj, &job)) == GO_ON)
        code = role_run(job, &tj);
    train_job_free(&tj);
    return code;
}
