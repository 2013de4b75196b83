/*
 * engine/train/ckpt_file: a trainer's file in a checkpoint,
 * DIR/trainerT.safetensors:
 *   the dense parameters under the --save file's names (model_io's layout),
 *   "optimizer.M.STATE" each state array of the dense optimizer M (one for
 *   the tutorial's model, DenseArch's and OverArch's for DLRM),
 *   "losses" [steps] this trainer's losses so far, "train_config" (U8) the
 *   course of training it ran (ember_train_config_t, to refuse resuming
 *   another job), and metadata: format, step, trainer, trainers, each
 *   optimizer's step count, and the epoch in progress (its number, steps,
 *   bags, loss sum and seconds so far: exact, as C99 hex floats).
 */
#ifndef EMBER_ENGINE_TRAIN_CKPT_FILE_H
#define EMBER_ENGINE_TRAIN_CKPT_FILE_H

#include "engine/io/safetensors.h"
#include "engine/ops/optimizer.h"
#include "engine/wire/protocol.h"

#include <stddef.h>
#include <stdint.h>

#define EMBER_CKPT_OPTS_MAX 2

/* Where a trainer is in its data and epoch after `steps` steps. */
typedef struct {
    uint64_t steps;
    uint64_t bags; /* in all */
    uint32_t epoch;
    uint64_t epoch_steps, epoch_bags;
    double epoch_loss_sum, epoch_seconds;
} ember_ckpt_progress_t;

/* What a trainer writes (all borrowed). */
typedef struct {
    const float *params;
    size_t nparams;
    ember_opt_t *const *opts;
    size_t nopts;
    const float *losses; /* [progress.steps] */
    ember_ckpt_progress_t progress;
} ember_ckpt_trainer_state_t;

/** Write @spec's trainer's file into @dir; @done gets its name, size and
 * CRC (or the error). */
ember_status_t ember_ckpt_trainer_write(const char *dir, const ember_msg_train_start_t *spec,
                                        const ember_ckpt_trainer_state_t *state,
                                        ember_msg_ckpt_done_t *done);

/* A trainer's file, opened and its metadata checked. */
typedef struct {
    ember_st_file_t *file;
    char path[EMBER_PATH_MAX + 80];
    uint32_t trainer, trainers;
    ember_ckpt_progress_t progress;
    ember_train_config_t config; /* the job that wrote it */
} ember_ckpt_trainer_file_t;

/** Open DIR/trainer@trainer.safetensors and check its metadata (every
 * number at full width); errors name the file and key. */
ember_status_t ember_ckpt_trainer_open(const char *dir, uint32_t trainer,
                                       ember_ckpt_trainer_file_t *out, char *err,
                                       size_t err_length);
void ember_ckpt_trainer_close(ember_ckpt_trainer_file_t *file);

/** The dense parameters of @spec's model into @params (nparams floats),
 * each tensor of the layout checked (F32, its shape). */
ember_status_t ember_ckpt_trainer_dense(const ember_ckpt_trainer_file_t *file,
                                        const ember_msg_train_start_t *spec, float *params,
                                        char *err, size_t err_length);

/** Each optimizer's state arrays and step count, checked against @opts. */
ember_status_t ember_ckpt_trainer_optimizers(const ember_ckpt_trainer_file_t *file,
                                             ember_opt_t *const *opts, size_t nopts, char *err,
                                             size_t err_length);

/** The losses of steps 0..progress.steps-1 into @losses. */
ember_status_t ember_ckpt_trainer_losses(const ember_ckpt_trainer_file_t *file, float *losses,
                                         char *err, size_t err_length);

#endif
