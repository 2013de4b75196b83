/*
 * engine/train/master: creates the tables on the parameter servers, starts the
 * trainers, prints one line per epoch, saves the result, ends the job.
 */
#ifndef EMBER_ENGINE_MASTER_H
#define EMBER_ENGINE_MASTER_H

#include "engine/train/job.h"

#include <ember/transport.h>

/** Run the job described by @job (borrowed).  Blocks until it ends. */
ember_status_t ember_master_run(ember_tp_t *tp, const ember_job_t *job);

/**
 * The check of an EPOCH_REPORT (@length bytes at @data, borrowed) by the
 * master of a job of @trainers trainers and @epochs epochs: one whole
 * report of a trainer and epoch of the job, copied into @msg_p.  Pure, for
 * the handler and the fuzzer.  Errors: ERR_BAD_MESSAGE (its size),
 * ERR_INVALID_PARAM (trainer or epoch); the cause in @err.
 */
ember_status_t ember_master_report_check(const void *data, size_t length, uint32_t trainers,
                                         uint32_t epochs, ember_msg_epoch_report_t *msg_p,
                                         char *err, size_t err_length);

#endif
