/*
 * engine/train/trainer_ckpt: a trainer's side of the job's checkpoints.
 *
 * Which steps: every multiple of the plan's `every`, and the steps trainer0
 * names in a CKPT_AT: the last step's (a job that checkpoints always ends
 * with one) and a signal's (SIGUSR1: write one and go on; SIGTERM: write one
 * and stop).  trainer0 picks such a step K = s + 1 before it begins step s
 * and has every other rank acknowledge it before it goes on: no trainer can
 * finish step s before trainer0 joins its allreduce, and no PS can apply it
 * before trainer0's gradients, so nobody has passed K when it hears of it.
 * The others hand their signals to trainer0 (CKPT_REQUEST).
 */
#ifndef EMBER_ENGINE_TRAIN_TRAINER_CKPT_H
#define EMBER_ENGINE_TRAIN_TRAINER_CKPT_H

#include "engine/train/ckpt_file.h"

#include <ember/transport.h>

typedef struct ember_trainer_ckpt ember_trainer_ckpt_t;

/** For @spec's trainer (borrowed, outlives it); NULL in *@ckpt_p when the
 * job writes no checkpoints.  Registers CKPT_AT and (trainer0)
 * CKPT_REQUEST. */
ember_status_t ember_trainer_ckpt_create(ember_tp_t *tp, const ember_msg_train_start_t *spec,
                                         const int *aborted, ember_trainer_ckpt_t **ckpt_p);
/** Waits for its reports to the master, unregisters. NULL: nothing. */
void ember_trainer_ckpt_destroy(ember_trainer_ckpt_t *ckpt);

/** Before step @step (@last: the job's last): signals and requests become
 * a checkpoint after @step + 1 steps (trainer0), or go to trainer0. */
ember_status_t ember_trainer_ckpt_before(ember_trainer_ckpt_t *ckpt, uint64_t step, int last,
                                         char *err, size_t err_length);

/** A checkpoint is due after @steps steps. */
int ember_trainer_ckpt_due(const ember_trainer_ckpt_t *ckpt, uint64_t steps);
/** The job stops after @steps steps (a SIGTERM's checkpoint). */
int ember_trainer_ckpt_stops(const ember_trainer_ckpt_t *ckpt, uint64_t steps);

/** This trainer's file of the checkpoint after state->progress.steps
 * steps, then its report to the master. */
ember_status_t ember_trainer_ckpt_write(ember_trainer_ckpt_t *ckpt,
                                        const ember_ckpt_trainer_state_t *state, char *err,
                                        size_t err_length);

/**
 * A resumed trainer's state from its checkpoint (spec->resume_dir, the file
 * of trainer spec->resume_from): the optimizers' arrays and steps, the
 * progress, and (its own file) the losses so far into @losses
 * (progress.steps floats, or NULL).  Errors name the file.
 */
ember_status_t ember_trainer_ckpt_resume(const ember_msg_train_start_t *spec,
                                         ember_opt_t *const *opts, size_t nopts,
                                         ember_ckpt_progress_t *progress, float *losses, char *err,
                                         size_t err_length);

#endif
