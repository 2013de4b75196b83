/*
 * tools/ember-train/flags: ember-train's command line: its own flags (one
 * table), every model's (models/model.h), the model's check of them, and
 * the outputs checked before anything runs.
 */
#ifndef EMBER_TRAIN_FLAGS_H
#define EMBER_TRAIN_FLAGS_H

#include "models/model.h"

#include <stdint.h>

#define TRAIN_GIVEN_MAX       128
#define TRAIN_PATH_MAX        512                /* a path the flags name, its NUL included */
#define TRAIN_LOG_EVERY_MAX   (INT64_C(1) << 40) /* --log-every's largest N */
#define TRAIN_LOG_SECONDS_MAX 86400              /* --log-every-seconds' largest S */

/* The job as the flags say it (every rank reads the same). */
typedef struct {
    ember_train_settings_t settings;
    const ember_model_ops_t *model;
    void *config; /* the model's (malloc'd, model->config_size bytes) */
    const char *save_path;
    const char *metrics_path;
    const char *checkpoint_dir; /* NULL: no checkpoints */
    uint64_t checkpoint_every;  /* 0: at the end and on signals */
    uint32_t checkpoint_keep;
    const char *resume_path;
    uint32_t ps_threads; /* 0: its cores */
    /* the master's progress lines: every log_every steps when given (0:
     * none), else every log_every_seconds of wall time */
    uint64_t log_every;
    double log_every_seconds;
    /* the flags as given, in order (their values borrowed from argv) */
    ember_flag_given_t given[TRAIN_GIVEN_MAX];
    size_t ngiven;
    /* what parsing collects before the optimizer's config */
    ember_opt_kind_t opt_kind;
    float lr, momentum;
} train_job_t;

typedef enum {
    TRAIN_RUN,    /* train */
    TRAIN_HELP,   /* --help: usage printed, nothing else to do */
    TRAIN_VERSION /* --version: print it, nothing else to do */
} train_action_t;

/**
 * Parse ember-train's flags over the defaults (and EMBER_CONSISTENCY,
 * EMBER_SEED, EMBER_METRICS), then the model's check of them (which may
 * read files: a replay's).  Returns OK, or an error after printing one line
 * naming what was refused: an unknown flag, a missing or bad value, a flag
 * given twice, another model's flag, flags that do not go together (then
 * where the flags are listed), or a file the model reads.  *action_p says
 * what to do.  Free @job with train_job_free.
 */
ember_status_t train_flags_parse(int argc, char **argv, train_job_t *job, train_action_t *action_p);
void train_job_free(train_job_t *job);

/**
 * Before any training: every output path of the job (--save, --metrics)
 * can be written and --init read.  Prints what cannot and returns ERR_IO.
 * Called by the rank that writes them (the master).
 */
ember_status_t train_check_outputs(const train_job_t *job);

/** Ranks the job needs: trainers, the master, the PS. */
static inline int train_world_size(const train_job_t *job)
{
    return job->settings.trainers + 1 + job->settings.num_ps;
}

#endif
