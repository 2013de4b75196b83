/*
 * engine/ops/optimizer: the sparse (lazy) steps the parameter servers take,
 * over the public optimizer objects and configs (<ember/optimizer.h>, which
 * says what each kind computes and keeps).  Not thread-safe: one caller at
 * a time per object, but for the ranges of one sparse step
 * (ember_opt_sparse_rows, below).
 */
#ifndef EMBER_ENGINE_OPTIMIZER_H
#define EMBER_ENGINE_OPTIMIZER_H

#include <ember/dtype.h>
#include <ember/optimizer.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the values a sparse step updates live. */
typedef enum {
    EMBER_OPT_IN_TABLE, /* @data is the whole table [rows, dim]: row r at r * dim */
    EMBER_OPT_GATHERED  /* @data is [nrows, dim], row u being table row rows[u]: copied
                           out of a table kept elsewhere (a GPU); the caller copies it back */
} ember_opt_placement_t;

typedef struct {
    void *data;
    ember_dtype_t dtype; /* EMBER_DTYPE_F32, or EMBER_DTYPE_F16 (uint16_t, engine/ops/half.h):
                            each touched row widened, updated in fp32 with fp32 state and
                            rounded back to fp16 */
    size_t dim;          /* must match the object's */
    ember_opt_placement_t placement;
} ember_opt_values_t;

/**
 * One sparse (lazy) step: for each u < @nrows, table row @rows[u] (its
 * values where @values says) is updated with @grad [u * dim .. (u+1) * dim),
 * and only that row's state changes; other rows and their state are
 * untouched.  The state is the table's, indexed by row id, wherever the
 * values are: a step on gathered rows computes the same bits as one in the
 * table.  @rows must be strictly increasing (sorted unique, as
 * ember_bag_backward produces) and < the object's rows.  The object must be
 * EMBER_OPT_SPARSE.  All buffers borrowed.
 * Errors: ERR_INVALID_PARAM (dim mismatch, a dtype other than F32 and F16,
 * unsorted/duplicate rows), ERR_OUT_OF_RANGE (a row id outside the table;
 * nothing is updated).
 */
ember_status_t ember_opt_step_sparse(ember_opt_t *opt, const ember_opt_values_t *values,
                                     const int64_t *rows, const float *grad, size_t nrows);

/*
 * ember_opt_step_sparse in parts, for a step split by row ranges over
 * threads: _begin checks @values and counts the step (once per step: the
 * table-wide count Adagrad's lr_decay and per-table Adam read); _check is
 * its check of one range's rows (the ranges in increasing order make the
 * whole step's rows increasing); _rows updates one range's checked rows,
 * exactly as the whole step would (each row's update reads only that
 * row's state), with @row the calling thread's own scratch of dim floats
 * (fp16 rows are widened there; unused for fp32).  Ranges of one step may
 * run on different threads at once; nothing else may touch @opt then.
 */
ember_status_t ember_opt_sparse_begin(ember_opt_t *opt, const ember_opt_values_t *values);
ember_status_t ember_opt_sparse_check(const ember_opt_t *opt, const int64_t *rows, size_t nrows);
void ember_opt_sparse_rows(ember_opt_t *opt, const ember_opt_values_t *values, const int64_t *rows,
                           const float *grad, size_t nrows, float *row);

/**
 * A sparse optimizer of @rows rows whose state arrays are mapped but not
 * written (a dynamic table's slots, engine/ps/table_dyn.c): memory is
 * faulted in as rows are used, and each row's state must be set with
 * ember_opt_reset_rows before its first step (Adagrad's sums at
 * initial_accumulator, the rest zero).  Errors: as ember_opt_create.
 */
ember_status_t ember_opt_create_reserved(const ember_opt_config_t *cfg, size_t rows, size_t dim,
                                         ember_opt_t **opt_p);
/** Rows @rows[0..n) (< the object's rows) back at their initial state, as
 * a new optimizer has them (a reused slot starts afresh). */
void ember_opt_reset_rows(ember_opt_t *opt, const int64_t *rows, size_t n);
/** The state bytes one row keeps (every array's share). */
size_t ember_opt_row_state_bytes(const ember_opt_t *opt);

/* A sparse optimizer's state kept outside an ember_opt_t (a device's
 * table: include/ember/device.h's ember_device_opt_t), indexed by table
 * row, each array what ember_opt_state_arrays lists for the kind. */
typedef struct {
    float *buf0;        /* momentum / sum / exp_avg / row-wise accumulator */
    float *buf1;        /* exp_avg_sq */
    uint8_t *started;   /* SGD with dampening */
    uint32_t *row_step; /* Adam with per-row steps (cfg->adam_row_step is ignored:
                           per-row steps exactly when this is given) */
} ember_opt_bufs_t;

/**
 * ember_opt_step_sparse on borrowed state: the fp32 table @table
 * [table_rows, dim] (EMBER_OPT_IN_TABLE) and @bufs, at table-wide step
 * @step (this step included, >= 1), bit for bit what an ember_opt_t
 * holding that state would compute.  @rows strictly increasing.
 * Errors: ERR_INVALID_PARAM (bad config, state the kind needs missing,
 * unsorted rows, step 0), ERR_OUT_OF_RANGE (a row outside the table;
 * nothing updated).
 */
ember_status_t ember_opt_step_sparse_bufs(const ember_opt_config_t *cfg, uint64_t step,
                                          const ember_opt_bufs_t *bufs, float *table,
                                          size_t table_rows, size_t dim, const int64_t *rows,
                                          const float *grad, size_t nrows);

#ifdef __cplusplus
}
#endif
#endif
