/*
 * engine/ps/ps: the parameter-server process.  Owns table shards (engine/table)
 * and serves the master's and the trainers' requests until shut down.
 */
#ifndef EMBER_ENGINE_PS_H
#define EMBER_ENGINE_PS_H

#include <ember/transport.h>

/**
 * Serve until the master's SHUTDOWN (returns OK) or ABORT (returns
 * ERR_CANCELED, the cause logged).  @tp borrowed.  Blocks.  @local_rank
 * picks the GPU of tables created on one (local_rank % GPUs).
 */
ember_status_t ember_ps_run(ember_tp_t *tp, int local_rank);

#endif
