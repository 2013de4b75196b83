/*
 * engine/train/master_ckpt: the master's side of the job's checkpoints.
 *
 * Writing: the master tells each PS that holds tables the plan, then
 * collects every trainer's and PS's report (CKPT_DONE) of each checkpoint;
 * when all have come it writes the manifest (the checkpoint is complete only
 * then), prints its cost, and prunes old ones to --checkpoint-keep.
 * Resuming: the newest complete checkpoint under --resume (or the one
 * named), checked against the job (same model, optimizer, data, trainers),
 * whose PS files each PS restores its tables from and whose trainer files
 * the trainers take their state from.
 */
#ifndef EMBER_ENGINE_TRAIN_MASTER_CKPT_H
#define EMBER_ENGINE_TRAIN_MASTER_CKPT_H

#include "engine/train/job.h"

#include <ember/transport.h>
#include <stdio.h>

typedef struct ember_master_ckpt ember_master_ckpt_t;

/* What a resumed job starts from. */
typedef struct {
    char dir[EMBER_PATH_MAX]; /* the checkpoint ("" : from the start) */
    uint64_t step;            /* steps done */
    uint32_t epoch;           /* the epoch in progress */
    char *ps_files;           /* its PS files' names, [ps_count][EMBER_CKPT_FILE_NAME_MAX] */
    uint32_t ps_count;
} ember_master_resume_t;

void ember_master_resume_free(ember_master_resume_t *resume);

/**
 * For @job (NULL in *@ckpt_p when it neither writes nor resumes
 * checkpoints): its root made, leftovers of an interrupted write removed,
 * the signal handlers and CKPT_DONE / CKPT_AT handlers in place.
 * @ps_holding[p]: PS p holds tables (its report is awaited).  Errors in
 * @err (a root that holds a newer complete checkpoint than the one resumed,
 * or any when starting afresh).
 */
ember_status_t ember_master_ckpt_create(ember_tp_t *tp, const ember_train_job_t *job,
                                        const int *ps_holding, uint64_t start_step, FILE *metrics,
                                        ember_master_ckpt_t **ckpt_p, char *err, size_t err_length);
void ember_master_ckpt_destroy(ember_master_ckpt_t *ckpt);

/** The plan to every PS that holds tables (ranks first_ps + p). */
ember_status_t ember_master_ckpt_plan(ember_master_ckpt_t *ckpt, int first_ps, char *err,
                                      size_t err_length);
/** The plan as TRAIN_START carries it. */
void ember_master_ckpt_plan_of(const ember_train_job_t *job, ember_msg_ckpt_plan_t *plan);

/** From the master's wait: a signal goes to trainer0. */
void ember_master_ckpt_poll(ember_master_ckpt_t *ckpt);

/** Until the checkpoint after @steps (the job's last) and all before it are
 * complete or failed; ERR_IO when one failed. */
ember_status_t ember_master_ckpt_finish(ember_master_ckpt_t *ckpt, uint64_t steps, char *err,
                                        size_t err_length);

/** The job stopped at a SIGTERM's checkpoint after *@step_p steps. */
int ember_master_ckpt_stopped(const ember_master_ckpt_t *ckpt, uint64_t *step_p);

/**
 * --resume: the checkpoint to start from (ember_ckpt_find), checked against
 * @job, its dense parameters into @params (@nparams floats, the layout of
 * @spec's model) and where it stands into @resume.  Errors name the
 * checkpoint, file and setting.
 */
ember_status_t ember_master_resume_find(const ember_train_job_t *job,
                                        const ember_msg_train_start_t *spec, float *params,
                                        ember_master_resume_t *resume, char *err,
                                        size_t err_length);

/** Every PS's tables from the checkpoint (TABLE_RESTORE to each PS that
 * holds tables). */
ember_status_t ember_master_resume_tables(ember_tp_t *tp, const ember_master_resume_t *resume,
                                          const int *ps_holding, int num_ps, int first_ps,
                                          char *err, size_t err_length);

/**
 * --init DIR (a checkpoint, or a root of them): its weights only (the
 * job starts at step 0 with fresh optimizer state): trainer0's dense layers
 * into @params, each of @tables whole, by global row id from the PS files
 * of whatever layout wrote them, into @rows[t] (malloc'd [rows][dim]).
 * The tables must have the checkpoint's rows and dim (errors name them).
 */
ember_status_t ember_master_ckpt_weights(const char *path, const ember_msg_train_start_t *spec,
                                         const ember_train_job_table_t *tables, size_t ntables,
                                         float *params, float **rows, char *err, size_t err_length);

#endif
