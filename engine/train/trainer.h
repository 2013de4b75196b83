/*
 * engine/train/trainer: a trainer process.  Waits for the master's TRAIN_START,
 * runs every step (remote lookup, local dense layer, loss, backward,
 * allreduce of the dense gradients, gradient push to the PS shards,
 * optimizer step), reports each epoch, and answers TRAIN_START at the end.
 */
#ifndef EMBER_ENGINE_TRAINER_H
#define EMBER_ENGINE_TRAINER_H

#include "engine/wire/protocol.h"

#include <ember/transport.h>

#include <stddef.h>

/**
 * Serve as trainer @index of @trainers (ranks 0..trainers-1 form the dense
 * data-parallel group), its dense model on @device ("cpu" or "cuda"; the GPU
 * is picked by @local_rank).  Blocks until training ends; returns its status
 * (an error is also reported to the master, naming trainer and step).
 */
ember_status_t ember_trainer_run(ember_tp_t *tp, int index, int trainers, const char *device,
                                 int local_rank);

/**
 * The check of a TRAIN_START request (@length bytes at @data, borrowed) by
 * trainer @index: the spec fits this trainer and the dense parameters that
 * follow it are all there.  Fills @spec_p (its replay path NUL-terminated)
 * and *nparams_p (floats at data + sizeof(*spec_p)).  Pure, for the handler
 * and the fuzzer.  Errors: ERR_INVALID_PARAM (the cause in @err).
 */
ember_status_t ember_trainer_start_check(const void *data, size_t length, int index,
                                         ember_msg_train_start_t *spec_p, size_t *nparams_p,
                                         char *err, size_t err_length);

#endif
