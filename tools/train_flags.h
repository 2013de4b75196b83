/*
 * tools/train_flags: ember-train's command line: its flags into a job
 * (engine/train/job.h), --replay's file taken into it, the outputs checked.
 */
#ifndef EMBER_TOOLS_TRAIN_FLAGS_H
#define EMBER_TOOLS_TRAIN_FLAGS_H

#include "engine/train/job.h"

typedef enum {
    EMBER_JOB_RUN,    /* train */
    EMBER_JOB_HELP,   /* --help: usage printed, nothing else to do */
    EMBER_JOB_VERSION /* --version: print it, nothing else to do */
} ember_train_job_action_t;

/**
 * Parse ember-train's flags over the defaults (and EMBER_CONSISTENCY,
 * EMBER_SEED, EMBER_METRICS).  Returns OK, or ERR_INVALID_PARAM after
 * printing one line naming what was refused: an unknown flag, a missing or
 * bad value, a flag given twice, flags that do not go together, or a flag
 * that --replay cannot honour (the file decides the model, data and
 * optimizer).  *action_p says what to do.
 */
ember_status_t ember_train_job_parse(int argc, char **argv, ember_train_job_t *job,
                                     ember_train_job_action_t *action_p);

/**
 * --replay: read the file's metadata and make the job the one it trains
 * (sizes, trainers, pooling, per-sample weights, SGD at its lr, sync).  A
 * flag given for any of those must say what the file says (then it is
 * honoured), else it is refused by name.  Errors are printed.
 */
ember_status_t ember_train_job_take_replay(ember_train_job_t *job);

/**
 * Before any training: every output path of the job (--save, --metrics)
 * can be written.  Prints what cannot and returns ERR_IO.  Called by the
 * rank that writes them (the master).
 */
ember_status_t ember_train_job_check_outputs(const ember_train_job_t *job);

#endif
