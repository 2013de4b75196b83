/*
 * engine/train/job: what ember-train runs — the flags, their defaults (the PyTorch
 * tutorial's job), and the role map (which rank is which worker).
 *
 * Ranks 0..T-1 are the trainers, rank T the master, ranks T+1..T+P the
 * parameter servers: with the defaults (T=2, P=1) exactly the tutorial's
 * layout (trainer0, trainer1, master, ps).
 */
#ifndef EMBER_ENGINE_JOB_H
#define EMBER_ENGINE_JOB_H

#include "engine/ops/optimizer.h"
#include "engine/wire/protocol.h"

#include <ember/embedding_bag.h>

#include <stdint.h>
#include <stdio.h>

typedef enum {
    EMBER_ROLE_TRAINER,
    EMBER_ROLE_MASTER,
    EMBER_ROLE_PS
} ember_role_t;

typedef struct {
    int trainers, num_ps;
    ember_train_config_t train; /* what every trainer is told (TRAIN_START) */
    ember_sparse_reduce_t sparse_reduce;
    ember_dtype_t table_dtype; /* the PS's rows: F32 or F16 */
    const char *replay_path;   /* borrowed from argv */
    const char *save_path;
    const char *metrics_path;
    const char *device;          /* trainers' dense model: "cpu" or "cuda" */
    const char *ps_device;       /* the PS's table shards: "cpu" or "cuda" */
    double replay_tolerance;     /* --replay: the largest difference that passes */
    uint64_t given;              /* bit per flag given on the command line */
    const char *flag_values[64]; /* their values as given (borrowed from argv) */
} ember_job_t;

/** Ranks the job needs: trainers + 1 + num_ps. */
int ember_job_world_size(const ember_job_t *job);

/** Role and index (trainer t, ps p) of @rank; name like "trainer1". */
ember_status_t ember_job_role(const ember_job_t *job, int rank, ember_role_t *role_p, int *index_p,
                              char *name, size_t name_length);

/** One line naming every rank's role. */
void ember_job_print_roles(const ember_job_t *job, FILE *stream);

#endif
