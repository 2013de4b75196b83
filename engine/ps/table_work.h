/*
 * engine/ps/table_work: a host shard's compute split over the PS's worker
 * threads (common/workers.h): pooling by bag ranges, the backward and the
 * sync reduction by row ranges, the optimizer step by row ranges.
 *
 * Every split is deterministic: a bag is pooled by one task, a row's
 * gradient summed by one task in the order one thread would (indices in
 * bag order; trainers in trainer order), so the result is the same bits
 * for any number of threads.  A small job runs as one task on the caller
 * (a wake-up would cost more than it saves: EMBER_PS_GRAIN).  Private to engine/ps/table*.c.
 */
#ifndef EMBER_ENGINE_TABLE_WORK_H
#define EMBER_ENGINE_TABLE_WORK_H

#include "engine/ps/table_private.h"

#include <ember/embedding_bag.h>

/* A task's own scratch, one per thread of the pool. */
typedef struct table_task {
    ember_buffer_t seen;   /* max places: uint8 [unique], all zero between bags */
    ember_buffer_t first;  /* max places: uint32 [unique] a slot's first place */
    ember_buffer_t row;    /* the optimizer's fp32 copy of an fp16 row */
    ember_buffer_t cursor; /* reduction: each trainer's place and end (size_t) */
    size_t begin, count;   /* a range's place and size in a job's output */
    ember_status_t status;
} table_task_t;

/* The per-thread scratch for @table's pool (NULL: one thread). */
ember_status_t table_work_init(ember_shard_t *table, ember_workers_t *workers);
void table_work_free(ember_shard_t *table);

/* Pool the checked batch into @out (and @argmax in max mode) by bag
 * ranges; with @places (max mode), each maximum's place in its bag after
 * the values (engine/wire/protocol.h).  @rows NULL: the values are pooled
 * already (on a device), the places only.  Errors: ERR_NO_MEMORY (the
 * tasks' scratch), the pooling's. */
ember_status_t table_work_pool(ember_shard_t *table, const context_t *ctx,
                               const ember_bag_table_t *rows, const ember_bag_batch_t *batch,
                               const ember_bag_opts_t *opts, float *out, int64_t *argmax,
                               const uint8_t *places);

/* Sum pooling's backward into @pending (its rows: the lookup's distinct rows). */
void table_work_sum_backward(ember_shard_t *table, const context_t *ctx, const float *grad_out,
                             pending_t *pending);

/* Max pooling's backward into @pending (its rows: those an index refers
 * to; ctx->first is its scratch).  Errors: ERR_NO_MEMORY, ERR_INVALID_PARAM (an argmax not among the rows). */
ember_status_t table_work_max_backward(ember_shard_t *table, const context_t *ctx,
                                       const float *grad_out, pending_t *pending);

/* Sync: the sum of @count trainers' gradients (@grads in trainer order),
 * scaled by the table's reduce, by row ranges into acc_rows/acc_grad (each
 * task's range at its place there), every range's rows checked for the
 * optimizer.  Then either _step_reduced (a host shard: the optimizer
 * steps each range on its task) or _reduced_compact (the rows made one
 * array for a device's step; returns their count).  Errors: ERR_NO_MEMORY,
 * the optimizer's check. */
ember_status_t table_work_reduce(ember_shard_t *table, const pending_t *const *grads,
                                 uint32_t count);
ember_status_t table_work_step_reduced(ember_shard_t *table);
size_t table_work_reduced_compact(ember_shard_t *table);

/* The optimizer step on a host shard's @rows (sorted, distinct, local). */
ember_status_t table_work_step(ember_shard_t *table, const int64_t *rows, const float *grad,
                               size_t nrows);

#endif
