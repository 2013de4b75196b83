/*
 * engine/train/pipeline: a trainer's lookups of two steps overlapped with
 * its compute.
 *
 * Two ember_sparse_t (engine/train/sparse), one for even steps and one for
 * odd ones, each with its own split, reply and gradient buffers, so the
 * next step's lookups can be built, and sent, while the current step's
 * replies are combined, its dense part runs and its gradients are pushed:
 *   - staleness 0: step s+1's batch is taken, split, deduplicated and its
 *     requests built while step s's lookups are in flight; they leave after
 *     step s's pushes, as without the pipeline (the PS answers them once
 *     step s is applied: every result bit for bit the unpipelined one);
 *   - staleness K >= 1: step s+1's lookups leave as soon as step s's replies
 *     are in, before step s's gradients are pushed; the PS serves them once
 *     s+1-K steps are applied, and each reply's version is checked.
 * A step's lookups are split into its slot (ember_pipeline_split), sent
 * (ember_pipeline_send: that slot's previous push waited for first, its
 * buffers are reused) and waited for (ember_pipeline_wait); the step's
 * ember_sparse_t (ember_pipeline_sparse) then combines and pushes them.
 */
#ifndef EMBER_ENGINE_TRAIN_PIPELINE_H
#define EMBER_ENGINE_TRAIN_PIPELINE_H

#include "engine/train/sparse.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ember_pipeline ember_pipeline_t;

/**
 * Both slots' ember_sparse_t over @tables (as ember_sparse_create; every
 * table's staleness the same, the pipeline's).  Errors: ember_sparse_create's,
 * ERR_INVALID_PARAM (tables of different staleness).
 */
ember_status_t ember_pipeline_create(const ember_sparse_config_t *tables, size_t ntables,
                                     ember_tp_t *tp, const ember_trainer_dev_t *td, int rdma,
                                     const int *aborted, ember_pipeline_t **pipe_p);
void ember_pipeline_destroy(ember_pipeline_t *pipe);

/** The tables' staleness: 0, or how far ahead the next step's lookups go. */
uint32_t ember_pipeline_staleness(const ember_pipeline_t *pipe);

/** Step @step's ember_sparse_t (its slot's). */
ember_sparse_t *ember_pipeline_sparse(ember_pipeline_t *pipe, uint64_t step);

/** Whether @step's lookups are split in its slot (and not yet waited for). */
int ember_pipeline_is_split(const ember_pipeline_t *pipe, uint64_t step);

/** Split @step's tables (their segments) into its slot (ember_sparse_split).  Errors:
 * ERR_INVALID_PARAM while the slot's lookups of another step are in flight. */
ember_status_t ember_pipeline_split(ember_pipeline_t *pipe, const ember_sparse_input_t *tables,
                                    uint64_t step, char *err, size_t err_length);

/** Send @step's split lookups, once its slot's previous push has left (a
 * no-op when they are in flight already).  Errors: ERR_INVALID_PARAM (not
 * split), ember_sparse_pushes_wait's and ember_sparse_lookup_send's. */
ember_status_t ember_pipeline_send(ember_pipeline_t *pipe, uint64_t step, char *err,
                                   size_t err_length);

/** Wait for @step's replies (ember_sparse_lookup_wait: versions checked);
 * the slot is free for step + 2 after.  Errors: ERR_INVALID_PARAM (not
 * sent), ember_sparse_lookup_wait's. */
ember_status_t ember_pipeline_wait(ember_pipeline_t *pipe, uint64_t step, char *err,
                                   size_t err_length);

/** @step's slot for other lookups (an evaluation's after @step steps): its
 * previous push waited for, nothing of its own in flight or split (what was
 * split is dropped).  Errors: ERR_INVALID_PARAM (lookups in flight),
 * ember_sparse_pushes_wait's. */
ember_status_t ember_pipeline_borrow(ember_pipeline_t *pipe, uint64_t step,
                                     ember_sparse_t **sparse_p, char *err, size_t err_length);

/** Both slots' pushes have left (ember_sparse_pushes_wait; before an
 * evaluation). */
ember_status_t ember_pipeline_pushes_wait(ember_pipeline_t *pipe, uint64_t step, char *err,
                                          size_t err_length);

/** Both slots' pushes have left and every PS took them
 * (ember_sparse_pushes_taken): the job's end, before others read the
 * tables. */
ember_status_t ember_pipeline_flush(ember_pipeline_t *pipe, uint64_t step, char *err,
                                    size_t err_length);

/** The largest step - version either slot's lookups saw. */
uint64_t ember_pipeline_staleness_seen(const ember_pipeline_t *pipe);

#endif
