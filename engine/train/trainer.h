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

#endif
