/*
 * engine/ps/ps_ckpt: a PS's side of the job's checkpoints.
 *
 * When a step boundary is due (a multiple of the plan's `every`, or a step
 * trainer0 named), the PS takes a snapshot of every table it holds as soon
 * as it has applied the step, before it answers a lookup of the next one:
 * a host shard's is copy-on-write (its steps and metadata recorded, every
 * chunk of its rows and optimizer state marked owed: no copy,
 * engine/ps/table_cow.h), a device shard's or a dynamic table's a copy
 * (half on the PS's thread, half on the writer's).  That is all the time
 * training waits (the report's copy seconds).  A writer thread (at the
 * PS's priority: its work is one copy out of the table and the CRC) then
 * writes ROOT/step-K/psP.safetensors (durably, direct: engine/io/durable.h;
 * its bytes a chunk at a time from the live tables, or the chunks training
 * copied aside before changing them) while training goes on, and the PS
 * reports the file to the master from its serving loop.  A checkpoint due while the previous one is still being
 * written waits for it (the wait is reported).  Not thread-safe but for
 * the writer it owns.
 */
#ifndef EMBER_ENGINE_PS_CKPT_H
#define EMBER_ENGINE_PS_CKPT_H

#include "engine/ps/table.h"
#include "engine/wire/protocol.h"

#include <ember/status.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ember_ps_ckpt ember_ps_ckpt_t;

ember_status_t ember_ps_ckpt_create(ember_ps_ckpt_t **ckpt_p);
/** Waits for a write in progress (see ember_ps_ckpt_give_up), then frees
 * everything. */
void ember_ps_ckpt_destroy(ember_ps_ckpt_t *ckpt);
/** A write in progress stops at its next chunk (its file is not made, its
 * report says so): the PS stops on an abort.  Any thread. */
void ember_ps_ckpt_give_up(ember_ps_ckpt_t *ckpt);

/** The master's plan (replaces an earlier one). */
void ember_ps_ckpt_plan(ember_ps_ckpt_t *ckpt, const ember_msg_ckpt_plan_t *plan);
/** Whether a plan with a directory was given. */
int ember_ps_ckpt_planned(const ember_ps_ckpt_t *ckpt);
/** trainer0's CKPT_AT: also after @step steps.  ERR_NO_MEMORY when too many
 * are pending. */
ember_status_t ember_ps_ckpt_at(ember_ps_ckpt_t *ckpt, uint64_t step);

/** A checkpoint is due now that the tables are at @step (steps applied). */
int ember_ps_ckpt_due(const ember_ps_ckpt_t *ckpt, uint64_t step);

/**
 * Until the writer has ended the write in progress (none: at once).  Its
 * report is then ember_ps_ckpt_poll's, and must be taken before the next
 * ember_ps_ckpt_take: the next write's report would replace it.  The time
 * waited counts in the next take's wait.
 */
void ember_ps_ckpt_wait(ember_ps_ckpt_t *ckpt);

/**
 * Snapshot @tables (all at @step: marked, or copied, as above) and hand
 * them to the writer; first waits for the previous write.  Until that
 * write ends (ember_ps_ckpt_wait) the tables must not be destroyed nor
 * their optimizers replaced.  Fails (text in @err) when a snapshot cannot be made, or
 * when the previous write's report was not taken (ember_ps_ckpt_wait, then
 * ember_ps_ckpt_poll); the write's own failure is reported by
 * ember_ps_ckpt_poll.
 */
ember_status_t ember_ps_ckpt_take(ember_ps_ckpt_t *ckpt, ember_shard_t *const *tables, size_t count,
                                  uint64_t step, char *err, size_t err_length);

/**
 * Before training: the snapshots of the @tables that are copied (device
 * shards, dynamic tables) made once (a copy of their state now, which
 * nothing writes), so that a checkpoint's copy, the pause training sees,
 * goes into memory already allocated and touched.
 */
ember_status_t ember_ps_ckpt_prepare(ember_ps_ckpt_t *ckpt, ember_shard_t *const *tables,
                                     size_t count, char *err, size_t err_length);

/** 1 and the report in @done when a write has ended since the last call. */
int ember_ps_ckpt_poll(ember_ps_ckpt_t *ckpt, ember_msg_ckpt_done_t *done);

/**
 * TABLE_RESTORE: every table of @tables from the PS files @names in @dir
 * (mapped, not copied), each by global row id whatever layout wrote them.
 * A table it fails for is named in @err.
 */
ember_status_t ember_ps_ckpt_restore(ember_shard_t *const *tables, size_t count, const char *dir,
                                     const char *names, size_t nnames, char *err,
                                     size_t err_length);

#endif
