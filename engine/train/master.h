/*
 * engine/train/master: creates the tables on the parameter servers, starts the
 * trainers, prints one line per epoch, saves the result, ends the job.
 */
#ifndef EMBER_ENGINE_MASTER_H
#define EMBER_ENGINE_MASTER_H

#include "engine/train/job.h"

#include <ember/transport.h>

/** Run the job described by @job (borrowed).  Blocks until it ends. */
ember_status_t ember_master_run(ember_tp_t *tp, const ember_train_job_t *job);

#endif
