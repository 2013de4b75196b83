/*
 * ember-train: the hybrid training job.  Every rank runs this program with
 * the same flags; the role map (engine/train/job.h) says who is a trainer, the
 * master or a parameter server.  Defaults: the PyTorch tutorial's job.
 *
 *   ember-run -n 4 ember-train            (2 trainers, master, 1 PS)
 */
#include "common/ckpt_signal.h"
#include "common/crash.h"
#include "common/slurm.h"
#include "common/topology.h"
#include "engine/ps/ps.h"
#include "engine/train/data.h"
#include "engine/train/master.h"
#include "engine/train/trainer.h"
#include "tools/train_flags.h"

#include <ember/config.h>
#include <ember/device.h>
#include <ember/log.h>
#include <ember/transport.h>
#include <ember/version.h>

#include <stdio.h>
#include <string.h>

/* What a phase returns to go on; anything else is main's exit code. */
#define GO_ON (-1)

/* The flags, and --replay's file, into @job; --help and --version end here. */
static int job_read(int *argc, char **argv, ember_train_job_t *job)
{
    ember_train_job_action_t action;

    if (ember_config_init() != EMBER_OK || ember_topo_take_bind_flag(argc, argv) != EMBER_OK)
        return 2;
    if (ember_train_job_parse(*argc, argv, job, &action) != EMBER_OK)
        return 2;
    if (action == EMBER_JOB_HELP)
        return 0;
    if (action == EMBER_JOB_VERSION) {
        printf("ember-train %s (libember %s)\n", EMBER_VERSION_STRING, ember_version_string());
        return 0;
    }
    if (job->replay_path && ember_train_job_take_replay(job) != EMBER_OK)
        return 2;
    return GO_ON;
}

/* Fail before joining when the asked-for device is not there. */
static int devices_check(const ember_train_job_t *job)
{
    const char *gpu_flag = strcmp(job->device, "cuda") == 0      ? "--device"
                           : strcmp(job->ps_device, "cuda") == 0 ? "--ps-device"
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

/* What the launcher's environment says, checked before joining: the world
 * the job needs, this rank's name (into @name, for @params), the outputs. */
static int launch_check(const ember_train_job_t *job, ember_tp_params_t *params, char *name,
                        size_t name_length)
{
    ember_train_role_t role;
    int index;
    /* As the transport takes them (transport/bootstrap.c): under srun the
     * rank is Slurm's, and so is the name ("master", "ps0") peers find it by. */
    int rank = ember_config_str("EMBER_RANK") ? (int)ember_config_int("EMBER_RANK")
                                              : ember_slurm_int("SLURM_PROCID", -1);
    int world = ember_config_str("EMBER_WORLD_SIZE") ? (int)ember_config_int("EMBER_WORLD_SIZE")
                                                     : ember_slurm_int("SLURM_NTASKS", -1);

    if (world > 0 && world != ember_train_job_world_size(job)) {
        fprintf(stderr,
                "ember-train: the job needs %d processes (%d trainers + master "
                "+ %d ps) but %d were started\n",
                ember_train_job_world_size(job), job->trainers, job->num_ps, world);
        return 2;
    }
    if (rank >= 0 && ember_train_job_role(job, rank, &role, &index, name, name_length) == EMBER_OK)
        params->name = name;
    /* The master writes the outputs: a path it cannot write ends the job
     * now, not after the training (the launcher stops the other ranks). */
    if ((rank < 0 || rank == job->trainers) && ember_train_job_check_outputs(job) != EMBER_OK)
        return 2;
    return GO_ON;
}

/* Join the job's world, bound near this rank's devices. */
static int join(const ember_train_job_t *job, ember_tp_t **tp_p)
{
    ember_tp_params_t params;
    char name[32];
    ember_tp_t *tp;

    ember_tp_params_init(&params);
    int code = launch_check(job, &params, name, sizeof(name));
    if (code != GO_ON)
        return code;
    ember_status_t status = ember_tp_create(&params, &tp);
    if (status != EMBER_OK) {
        fprintf(stderr, "ember-train: cannot join the job: %s\n", ember_status_string(status));
        return 1;
    }
    /* --bind / EMBER_BIND: near this rank's GPU and HCA; one binding line. */
    if (ember_topo_bind_self(ember_tp_rank(tp), ember_tp_world_size(tp), stderr) != EMBER_OK) {
        ember_tp_destroy(tp);
        return 2;
    }
    if (ember_tp_world_size(tp) != ember_train_job_world_size(job)) {
        fprintf(stderr, "ember-train: the job needs %d processes, the world has %d\n",
                ember_train_job_world_size(job), ember_tp_world_size(tp));
        ember_tp_destroy(tp);
        return 2;
    }
    *tp_p = tp;
    return GO_ON;
}

/* This rank's part of the job: the master, a PS or a trainer. */
static ember_status_t role_run(ember_tp_t *tp, const ember_train_job_t *job)
{
    ember_train_role_t role;
    int index, local_rank, local_size;
    char name[32];

    ember_train_job_role(job, ember_tp_rank(tp), &role, &index, name, sizeof(name));
    if (role == EMBER_TRAIN_ROLE_MASTER) {
        ember_train_job_print_roles(job, stdout);
        fflush(stdout);
        return ember_master_run(tp, job);
    }
    ember_topo_local_rank(ember_tp_rank(tp), ember_tp_world_size(tp), &local_rank, &local_size);
    if (role == EMBER_TRAIN_ROLE_PS)
        return ember_ps_run(tp, &(ember_ps_run_options_t){.local_rank = local_rank,
                                                          .threads = job->ps_threads});
    return ember_trainer_run(tp, index, job->trainers, job->device, local_rank);
}

int main(int argc, char **argv)
{
    ember_train_job_t job;
    ember_tp_t *tp;
    int code;

    ember_crash_handler_install(); /* a crashed rank says where */
    if ((code = job_read(&argc, argv, &job)) != GO_ON || (code = devices_check(&job)) != GO_ON ||
        (code = join(&job, &tp)) != GO_ON)
        return code;
    if (job.checkpoint_dir) /* SIGUSR1: a checkpoint; SIGTERM: one, then stop */
        ember_ckpt_signal_install();
    ember_status_t status = role_run(tp, &job);
    if (status != EMBER_OK)
        ember_tp_set_failed(tp); /* nobody waits for a hung rank */
    ember_tp_destroy(tp);
    return status == EMBER_OK ? 0 : 1;
}
