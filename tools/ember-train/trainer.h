/*
 * tools/ember-train/trainer: a trainer, from the master's TRAIN_START to
 * its answer: the model it is told (its description parsed by the model),
 * the job's tables looked up through one EmbeddingBagCollection, the
 * model's dense half on the trainer's device, and the one training loop
 * (trainer.c's train_loop).
 *
 * trainer.c the set-up, the loop and the step; trainer_ckpt.c this
 * trainer's checkpoint files (written, and read back on resume).
 */
#ifndef EMBER_TRAIN_TRAINER_H
#define EMBER_TRAIN_TRAINER_H

#include "tools/ember-train/flags.h"
#include "tools/ember-train/messages.h"

#include <ember/checkpoint.h>
#include <ember/job.h>
#include <ember/lookup.h>

/* Where a trainer is in its data and epoch after `steps` steps. */
typedef struct {
    uint64_t steps;
    uint64_t bags; /* in all */
    uint32_t epoch;
    uint64_t epoch_steps, epoch_bags;
    double epoch_loss_sum, epoch_seconds;
} train_progress_t;

typedef struct {
    ember_job_t *job;
    const train_job_t *tj; /* this rank's flags: its device */
    int index, trainers, master;
    /* the master's TRAIN_START */
    int started;
    ember_rpc_req_t *start_req; /* answered when training ends */
    train_start_t start;
    ember_train_settings_t settings;
    const ember_model_ops_t *model;
    void *config;
    /* where it runs */
    ember_device_t *device;
    ember_allreduce_t *allreduce;
    ember_table_t *tables[EMBER_MODEL_TABLES_MAX];
    size_t ntables;
    ember_ebc_t *ebc;
    ember_checkpoint_t *ckpt;
    void *model_trainer;
    /* the losses so far, by step */
    float *losses;
    size_t losses_capacity;
    train_progress_t resumed; /* a resumed job's progress at its start */
    /* progress reports: the next after step report_next (0: none), the one
     * after it report_after, or the answer of report_future once it comes */
    uint64_t report_next, report_after;
    ember_future_t *report_future;
    train_msg_progress_t report; /* owned by the call in flight */
    char err[512];               /* the failure's line, sent to the master */
    /* where the training steps' time went (TRAIN_PHASE_*), and when the
     * phase being timed began */
    double phase_s[TRAIN_PHASES];
    double phase_mark;
} trainer_t;

/** Serve as a trainer of the job @tj describes (this rank's flags).
 * Blocks until training ends; returns its status (an error is also the
 * master's answer, naming trainer and step). */
ember_status_t train_trainer_run(ember_job_t *job, const train_job_t *tj);

/* trainer_ckpt.c */
/** This trainer's file of the checkpoint after @p->steps steps. */
ember_status_t trainer_ckpt_save(trainer_t *t, const train_progress_t *p, char *err,
                                 size_t err_length);
/** A resumed trainer's state from its file of the checkpoint it starts
 * from: the optimizers' arrays and steps, the losses so far, its progress
 * (into t->resumed).  Errors name the file. */
ember_status_t trainer_ckpt_resume(trainer_t *t, char *err, size_t err_length);

#endif
