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
    EMBER_TRAIN_ROLE_TRAINER,
    EMBER_TRAIN_ROLE_MASTER,
    EMBER_TRAIN_ROLE_PS
} ember_train_role_t;

typedef struct {
    int trainers, num_ps;
    ember_train_config_t train; /* what every trainer is told (TRAIN_START) */
    ember_sparse_reduce_t sparse_reduce;
    ember_dtype_t table_dtype; /* the PS's rows: F32 or F16 */
    const char *replay_path;   /* borrowed from argv */
    const char *save_path;
    const char *init_path; /* --init: DLRM's starting weights (safetensors) */
    const char *metrics_path;
    const char *checkpoint_dir;  /* --checkpoint-dir: the root (NULL: none) */
    uint64_t checkpoint_every;   /* --checkpoint-every (0: at the end and on signals) */
    uint32_t checkpoint_keep;    /* --checkpoint-keep */
    const char *resume_path;     /* --resume: a root or one checkpoint */
    const char *device;          /* trainers' dense model: "cpu" or "cuda" */
    const char *ps_device;       /* the PS's table shards: "cpu" or "cuda" */
    uint32_t ps_threads;         /* --ps-threads: each PS's compute threads (0: its cores) */
    double replay_tolerance;     /* --replay: the largest difference that passes */
    uint64_t given;              /* bit per flag given on the command line */
    const char *flag_values[64]; /* their values as given (borrowed from argv) */
} ember_train_job_t;

/* One embedding table of a job and where it lives: rows split by row %
 * shards over PS first_ps .. first_ps + shards - 1. */
typedef struct {
    uint32_t id;
    char name[EMBER_TABLE_NAME_MAX]; /* "emb", DLRM's "t_cat_F" */
    int64_t rows;
    uint32_t dim;
    uint32_t shards;
    uint32_t first_ps; /* a PS index (its rank is trainers + 1 + first_ps) */
} ember_train_job_table_t;

#define EMBER_JOB_TABLES_MAX EMBER_DLRM_TABLES

/**
 * The tables of @config's model over @num_ps PS into @tables, their count
 * returned: the tutorial's one table row-wise over all; DLRM's one per
 * categorical feature, row-wise over all or (EMBER_SHARD_TABLE) each whole
 * on one PS, the largest first to the PS with the fewest bytes so far.
 * The same on every rank (the master and each trainer place alike).
 */
size_t ember_train_job_tables(const ember_train_config_t *config, uint32_t num_ps,
                              ember_train_job_table_t tables[EMBER_JOB_TABLES_MAX]);

/** Ranks the job needs: trainers + 1 + num_ps. */
int ember_train_job_world_size(const ember_train_job_t *job);

/** Role and index (trainer t, ps p) of @rank; name like "trainer1". */
ember_status_t ember_train_job_role(const ember_train_job_t *job, int rank,
                                    ember_train_role_t *role_p, int *index_p, char *name,
                                    size_t name_length);

/** One line naming every rank's role, and (DLRM) one per PS naming the
 * tables it holds. */
void ember_train_job_print_roles(const ember_train_job_t *job, FILE *stream);

#endif
