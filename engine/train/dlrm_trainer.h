/*
 * engine/train/dlrm_trainer: a trainer's part of a DLRM job: its share of
 * the examples (engine/io/criteo_data, read ahead by a thread), the
 * lookups of all 26 tables in one request per PS (engine/train/sparse),
 * the dense half (engine/train/dlrm_replica), and the evaluations.
 *
 * A step: the batch's categorical values split by table and shard and
 * looked up; each table's pooled embeddings into the dense half; forward,
 * loss, backward; each table's pooled gradient pushed; the dense
 * allreduce waited for and the dense optimizer stepped.  An evaluation
 * after S steps runs forward-only lookups of the tables as S steps left
 * them over this trainer's share of the evaluation file and sends the
 * logits to the master (engine/train/master_eval scores them).
 */
#ifndef EMBER_ENGINE_TRAIN_DLRM_TRAINER_H
#define EMBER_ENGINE_TRAIN_DLRM_TRAINER_H

#include "engine/ops/optimizer.h"
#include "engine/train/trainer_dev.h"
#include "engine/wire/protocol.h"

#include <ember/device.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ember_dlrm_trainer ember_dlrm_trainer_t;

/* Where it runs (all borrowed for its life). */
typedef struct {
    const ember_msg_train_start_t *spec;
    const float *params; /* the initial dense parameters (copied) */
    ember_tp_t *tp;
    const ember_trainer_dev_t *td;
    ember_device_comm_t *comm;
    const int *aborted; /* the master's ABORT */
    int rdma;           /* replies land in device memory (the device path) */
} ember_dlrm_trainer_args_t;

/** Open the data (errors name the file) and set up the tables' lookups and
 * the dense half. */
ember_status_t ember_dlrm_trainer_create(const ember_dlrm_trainer_args_t *args,
                                         ember_dlrm_trainer_t **trainer_p, char *err,
                                         size_t err_length);
void ember_dlrm_trainer_destroy(ember_dlrm_trainer_t *trainer);

/**
 * Take the next batch of the epoch as the coming step's and read the one
 * after it: *@more_p whether the epoch has a step after this one.  At an
 * epoch's start *@have_p says whether it has a step at all.  Errors: the
 * data's (the file and line).
 */
ember_status_t ember_dlrm_trainer_take(ember_dlrm_trainer_t *trainer, int *have_p, int *more_p,
                                       char *err, size_t err_length);

/** Train @step on the batch taken; @last: the job's last (its pushes are
 * awaited); @ahead: the epoch's next batch may be taken now (the next
 * ember_dlrm_trainer_take then finds it) and its lookups built while this
 * step runs, or sent with staleness (engine/train/pipeline.h); not when an
 * evaluation comes before the next step.  *@loss_p this trainer's loss,
 * *@examples_p its examples. */
ember_status_t ember_dlrm_trainer_step(ember_dlrm_trainer_t *trainer, uint64_t step, int last,
                                       int ahead, float *loss_p, size_t *examples_p, char *err,
                                       size_t err_length);

/** The evaluation after @steps steps, its logits sent to the master. */
ember_status_t ember_dlrm_trainer_eval(ember_dlrm_trainer_t *trainer, uint64_t steps, char *err,
                                       size_t err_length);

/** Whether the job evaluates (--eval). */
int ember_dlrm_trainer_evaluates(const ember_dlrm_trainer_t *trainer);

/** The largest step - version of any of its lookups so far. */
uint64_t ember_dlrm_trainer_staleness_seen(const ember_dlrm_trainer_t *trainer);

/** The pushes of the steps so far have been taken by the PS. */
ember_status_t ember_dlrm_trainer_pushes_wait(ember_dlrm_trainer_t *trainer, uint64_t step,
                                              char *err, size_t err_length);

/** The dense parameters (ember_dlrm_params floats). */
const float *ember_dlrm_trainer_params(ember_dlrm_trainer_t *trainer, size_t *nparams_p);

/** The dense half's optimizers into @out; their count. */
size_t ember_dlrm_trainer_optimizers(ember_dlrm_trainer_t *trainer, ember_opt_t **out);

#endif
