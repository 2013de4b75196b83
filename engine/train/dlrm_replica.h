/*
 * engine/train/dlrm_replica: a trainer's replica of DLRM's dense half
 * (engine/ops/dlrm: DenseArch, InteractionArch, OverArch) on its device
 * (--device cpu or cuda), with the loss (BCE with logits, mean over the
 * batch) and the data-parallel step: in the backward, each MLP's gradients
 * go to the allreduce as one bucket (averaged over the trainers) as soon as
 * they exist, then each MLP steps its optimizer on the host copy of its
 * parameters (the dense half is small: the tutorial's replica does so too).
 * Every op goes through the device's table (engine/train/dlrm_arch for the
 * MLPs; the interaction and the loss through their own slots); on "cpu"
 * those are engine/ops/dlrm.c's ops in its order, bit for bit.
 * Every replica applies the same averaged gradients, so they stay equal.
 * The flat parameters are DenseArch's then OverArch's (ember_dlrm_params).
 */
#ifndef EMBER_ENGINE_TRAIN_DLRM_REPLICA_H
#define EMBER_ENGINE_TRAIN_DLRM_REPLICA_H

#include "engine/train/trainer_dev.h"
#include "engine/wire/protocol.h"

#include <ember/device.h>

#include <stddef.h>

typedef struct ember_dlrm_replica ember_dlrm_replica_t;

/**
 * The replica of @config's DLRM starting from @params (copied), its
 * gradients averaged over @comm on @td (the host), progressed through @tp.
 * Row-wise Adagrad is a table optimizer: the dense layers then use Adagrad.
 */
ember_status_t ember_dlrm_replica_create(const ember_train_config_t *config, const float *params,
                                         const ember_trainer_dev_t *td, ember_device_comm_t *comm,
                                         ember_tp_t *tp, ember_dlrm_replica_t **replica_p);
void ember_dlrm_replica_destroy(ember_dlrm_replica_t *replica);

/**
 * Forward of @batch examples: @dense [batch][13] and @labels [batch] (0 or
 * 1) host memory, copied to the device once; @pooled [tables][batch][dim]
 * device memory (borrowed until the backward).  The loss in *@loss_p.
 * ERR_NUMERIC for a loss that is not finite (one line in @err).
 */
ember_status_t ember_dlrm_replica_forward(ember_dlrm_replica_t *replica, const float *dense,
                                          const float *pooled, size_t batch, const float *labels,
                                          float *loss_p, char *err, size_t err_length);

/** The backward: the tables' pooled gradients into @grad_pooled
 * [tables][batch][dim] (device memory), and both MLPs' gradients on their
 * way through the allreduce. */
ember_status_t ember_dlrm_replica_backward(ember_dlrm_replica_t *replica, float *grad_pooled,
                                           char *err, size_t err_length);

/** Wait for the allreduce (giving up when *@aborted is set), then step. */
ember_status_t ember_dlrm_replica_step(ember_dlrm_replica_t *replica, const int *aborted, char *err,
                                       size_t err_length);

/** The logits [batch] (host memory) of an evaluation's examples, @dense and
 * @pooled as the forward's (no backward follows). */
ember_status_t ember_dlrm_replica_logits(ember_dlrm_replica_t *replica, const float *dense,
                                         const float *pooled, size_t batch, float *logits);

/** The flat parameters as the last step left them. */
const float *ember_dlrm_replica_params(ember_dlrm_replica_t *replica, size_t *nparams_p);

/** DenseArch's and OverArch's optimizers into @out; their count (2). */
size_t ember_dlrm_replica_optimizers(ember_dlrm_replica_t *replica, ember_opt_t **out);

#endif
