/*
 * engine/train/replica: a trainer's replica of the dense model, on its
 * device.
 *
 * Linear(sizes[0], sizes[1]) ReLU ... Linear(sizes[layers-1],
 * sizes[layers]) and cross entropy (engine/wire/protocol.h's layout of the
 * flat parameters).  The backward hands each layer's gradients to the
 * allreduce as one bucket the moment they exist, while it goes on with the
 * layers below; the step then waits for the buckets and runs the dense
 * optimizer on the host copy (the dense part is small).  Every replica
 * applies the same averaged gradients, so the replicas stay equal.
 */
#ifndef EMBER_ENGINE_TRAIN_REPLICA_H
#define EMBER_ENGINE_TRAIN_REPLICA_H

#include "engine/ops/optimizer.h"
#include "engine/train/trainer_dev.h"
#include "engine/wire/protocol.h"

#include <ember/device.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ember_replica ember_replica_t;

/**
 * The replica of @spec's dense model on @td, its gradients averaged over
 * @comm (progressed through @tp while waited for); @params (host,
 * ember_dense_offset floats) are copied.  Row-wise Adagrad is a table
 * optimizer: the dense layers then use Adagrad.  Borrowed: @td, @comm, @tp.
 */
ember_status_t ember_replica_create(const ember_trainer_dev_t *td, ember_device_comm_t *comm,
                                    ember_tp_t *tp, const ember_msg_train_start_t *spec,
                                    const float *params, ember_replica_t **replica_p);
void ember_replica_destroy(ember_replica_t *replica);

/** Buffers for a step of @bags; the input to fill, [bags, sizes[0]] in the
 * device's memory, in *x_p. */
ember_status_t ember_replica_reserve(ember_replica_t *replica, size_t bags, float **x_p);

/**
 * Forward and loss over the input for @targets [bags] (host memory; checked
 * in range): *loss_p the mean cross entropy.  Errors: the device's, or
 * ERR_NUMERIC for a loss that is not finite (one line in @err).
 */
ember_status_t ember_replica_forward(ember_replica_t *replica, const int64_t *targets,
                                     float *loss_p, char *err, size_t err_length);

/** Backward, the layers' buckets going to the allreduce as they are made;
 * *grad_x_p: the input's gradient (device memory). */
ember_status_t ember_replica_backward(ember_replica_t *replica, const float **grad_x_p, char *err,
                                      size_t err_length);

/** Wait for every bucket (giving up when *@aborted is set) and step the
 * optimizer. */
ember_status_t ember_replica_step(ember_replica_t *replica, const int *aborted, char *err,
                                  size_t err_length);

/**
 * Wait for the allreduce of @count @buckets (the last started first: the
 * order the backward made them in reverse), each set to NULL, giving up
 * when *@aborted is set; a failed one is the communicator's error in @err.
 * Both dense models (this one and engine/train/dlrm_replica) step so.
 */
ember_status_t ember_replica_buckets_wait(const ember_trainer_dev_t *td, ember_device_comm_t *comm,
                                          ember_tp_t *tp, ember_device_req_t **buckets,
                                          size_t count, const int *aborted, char *err,
                                          size_t err_length);

/** The parameters (host memory, nparams floats), as the last step left them. */
const float *ember_replica_params(const ember_replica_t *replica, size_t *nparams_p);

/** The dense optimizer (its state is checkpointed and restored). */
ember_opt_t *ember_replica_optimizer(ember_replica_t *replica);

#endif
