/*
 * tools/ember-train/master: the job's coordinator.  It creates the model's
 * tables on the PS (drawn there, or from the model's initial rows, --init,
 * or a checkpoint), starts every trainer (TRAIN_START, answered when the
 * trainer is done), prints each epoch and evaluation as the trainers report
 * them, writes the checkpoints' manifests (the library's), and at the end
 * prints the totals and the PS's memory, checks and saves the model.  A
 * trainer that fails makes it abort the job, so the job ends with an
 * error, never a hang.
 *
 * master.c its phases and the trainers' reports; master_tables.c the
 * tables (their start, --init, the save); master_resume.c --resume and the
 * checkpoints; master_eval.c the evaluations' AUC; master_progress.c the
 * progress lines between them.
 */
#ifndef EMBER_TRAIN_MASTER_H
#define EMBER_TRAIN_MASTER_H

#include "tools/ember-train/flags.h"
#include "tools/ember-train/messages.h"

#include <ember/checkpoint.h>
#include <ember/job.h>

#include <stdio.h>

typedef struct master_eval master_eval_t;

/* The progress lines (master_progress.c): the reports of step at being
 * collected, the step after it (both known to the trainers), the last line. */
typedef struct {
    int on, tty, drawn;
    uint64_t at, after;
    ember_rpc_req_t **held;       /* [trainers]: the reports of step at, unanswered */
    train_msg_progress_t *got;    /* [trainers] */
    uint64_t *examples;           /* [trainers]: each one's last report's */
    int count;                    /* reports of step at held */
    double point_time, line_time; /* when the last reports were all in, the last line */
    uint64_t point_steps, line_steps, line_examples;
    char text[160]; /* the last line (a terminal's, redrawn) */
} master_progress_t;

typedef struct {
    ember_job_t *job;
    const train_job_t *tj;
    const ember_model_ops_t *model;
    ember_model_table_t tables[EMBER_MODEL_TABLES_MAX];
    size_t ntables;
    ember_table_t *handles[EMBER_MODEL_TABLES_MAX];
    size_t nparams;
    float *params; /* the dense parameters every trainer starts from */
    /* epoch reports: [epochs][trainers] */
    train_msg_epoch_t *reports;
    uint8_t *reported;
    uint32_t epochs, printed;
    FILE *metrics;
    double started;
    master_eval_t *eval;
    master_progress_t progress;
    /* checkpoints: the one resumed from (info.manifest NULL: none), writing them */
    ember_checkpoint_info_t resume;
    uint64_t start_step;
    ember_checkpoint_t *ckpt;
    /* one TRAIN_START per trainer, untouched until its call completes */
    train_msg_start_t *starts;
    ember_iov_t (*iovs)[10];
    ember_future_t **futures;
    model_text_t settings_text, config_text;
    /* --init FILE's keys of a dynamic table ("NAME.keys", I64 [n]) whose
     * rows are the "NAME.weight" [n][dim] given, while the tables are made */
    int64_t *init_keys[EMBER_MODEL_TABLES_MAX];
    size_t init_nkeys[EMBER_MODEL_TABLES_MAX];
    /* set by a phase that fails after the job began: the others are aborted */
    char cause[512];
} master_t;

/** Run the job @tj describes (borrowed) as its master.  Blocks until it
 * ends.  On a failure after the job began, @cause (512 bytes) gets the
 * line the others are aborted with ("" otherwise). */
ember_status_t train_master_run(ember_job_t *job, const train_job_t *tj, char *cause);

/* master_tables.c */
/** The tables created, with the dense parameters' start: a resumed job's
 * empty then restored, --init's, or the model's. */
ember_status_t master_tables(master_t *m);
/** Every table read back, the model's check of the result and --save.
 * @losses [steps][trainers], @params the final dense parameters. */
ember_status_t master_result(master_t *m, const float *params, const float *losses, uint64_t steps);
void master_tables_close(master_t *m);
/** The model's dense tensors (@tensors, @n) from @file (@path names it)
 * into m->params, each F32 of its shape; errors into m->cause. */
ember_status_t master_dense_from(master_t *m, const ember_st_file_t *file, const char *path,
                                 const ember_model_tensor_t *tensors, size_t n);

/* master_resume.c */
/** --resume: the checkpoint found and checked against the job, its dense
 * parameters into m->params, where it stands (m->start_step, m->printed). */
ember_status_t master_resume_find(master_t *m);
/** The checkpoints written from here on (all clients meet in it). */
ember_status_t master_ckpt_open(master_t *m);
/** Print a completed checkpoint (the library's events); each returned. */
void master_ckpt_poll(master_t *m);

/* master_progress.c */
/** The PROGRESS reports taken from here on. */
ember_status_t master_progress_create(master_t *m);
/** The trainers start at @start_step, @now: the first two steps they
 * report at into @report_at (0, 0: none, --log-every 0). */
void master_progress_start(master_t *m, uint64_t start_step, double now, uint64_t report_at[2]);
/** Around any other line the master prints while the trainers train: the
 * progress line taken off the terminal, and drawn again after it. */
void master_progress_hide(master_t *m);
void master_progress_show(master_t *m);
/** The trainers are done: the terminal's line taken off for good. */
void master_progress_end(master_t *m);
/** Every report still held answered "no more", the handler gone. */
void master_progress_destroy(master_t *m);

/* master_eval.c */
ember_status_t master_eval_create(master_t *m);
void master_eval_destroy(master_t *m);

#endif
