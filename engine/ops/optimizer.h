/*
 * ember engine: optimizers, dense (trainer side, as torch.optim) and sparse /
 * lazy (parameter-server side: only the rows a step touched are updated, and
 * only their state moves).
 *
 * One optimizer object serves one parameter of shape [rows, dim] (a dense
 * vector is rows = 1, dim = n) and owns that parameter's state, allocated once
 * at create and sized to what the algorithm needs:
 *
 *   SGD                 none; momentum: one buffer [rows, dim]; sparse with
 *                       dampening != 0 also one byte per row ("buffer started")
 *   Adagrad             sum of squares [rows, dim]
 *   row-wise Adagrad    one accumulator per row [rows]
 *   Adam                exp_avg + exp_avg_sq [rows, dim]; sparse with
 *                       per-row steps also a uint32 step count per row
 *
 * Formulas follow PyTorch 1.13: SGD (momentum, dampening, nesterov), Adagrad
 * (lr_decay, eps 1e-10, initial accumulator), Adam (bias-corrected, eps on
 * sqrt(v_hat)); sparse Adam follows torch.optim.SparseAdam (eps on sqrt(v),
 * step size lr * sqrt(1 - b2^t) / (1 - b1^t)), with t counted per row by
 * default so a row's bias correction matches the updates its moments saw.
 * Row-wise Adagrad is FBGEMM's EXACT_ROWWISE_ADAGRAD: acc_r += mean_d(g^2),
 * w_r -= lr / (sqrt(acc_r) + eps) * g_r.  Weight decay is not supported.
 *
 * Not thread-safe: one caller at a time per object, but for the ranges of
 * one sparse step (ember_opt_sparse_rows, below).
 */
#ifndef EMBER_ENGINE_OPTIMIZER_H
#define EMBER_ENGINE_OPTIMIZER_H

#include <ember/dtype.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EMBER_OPT_SGD,
    EMBER_OPT_ADAGRAD,
    EMBER_OPT_ROWWISE_ADAGRAD,
    EMBER_OPT_ADAM
} ember_opt_kind_t;

/* Whether the object is stepped with whole gradients or with touched rows. */
typedef enum {
    EMBER_OPT_DENSE,
    EMBER_OPT_SPARSE
} ember_opt_layout_t;

typedef struct {
    ember_opt_kind_t kind;
    float lr;
    float momentum;            /* SGD; 0 = plain SGD */
    float dampening;           /* SGD */
    int nesterov;              /* SGD; needs momentum > 0, dampening 0 */
    float lr_decay;            /* Adagrad */
    float initial_accumulator; /* Adagrad, row-wise Adagrad */
    float eps;                 /* Adagrad, row-wise Adagrad, Adam */
    float beta1, beta2;        /* Adam */
    int adam_row_step;         /* sparse Adam: 1 = step count per row,
                                  0 = one count per table (SparseAdam) */
} ember_opt_config_t;

typedef struct ember_opt ember_opt_t;

/** Name of a kind ("sgd", "adagrad", "rowwise_adagrad", "adam"). */
const char *ember_opt_kind_name(ember_opt_kind_t kind);

/** Parse a kind name as printed by ember_opt_kind_name; ERR_INVALID_PARAM. */
ember_status_t ember_opt_kind_parse(const char *text, ember_opt_kind_t *kind_p);

/**
 * Fill @cfg_p with PyTorch's defaults for @kind and learning rate @lr
 * (momentum 0, dampening 0, Adagrad eps 1e-10, row-wise Adagrad eps 1e-8
 * (FBGEMM), Adam betas 0.9/0.999 eps 1e-8, adam_row_step 1).
 */
void ember_opt_config_default(ember_opt_kind_t kind, float lr, ember_opt_config_t *cfg_p);

/**
 * Create an optimizer for a parameter of [rows, dim] floats stepped as
 * @layout (@rows may be 0 for EMBER_OPT_SPARSE: a shard that owns no row).
 * @cfg is copied.  State is zero-initialised (accumulators at
 * initial_accumulator).
 * Errors: ERR_INVALID_PARAM (bad sizes or hyper-parameters, e.g. lr < 0,
 * nesterov without momentum, betas outside [0, 1)), ERR_NO_MEMORY.
 */
ember_status_t ember_opt_create(const ember_opt_config_t *cfg, size_t rows, size_t dim,
                                ember_opt_layout_t layout, ember_opt_t **opt_p);

/** Free the optimizer and its state.  NULL is a no-op. */
void ember_opt_destroy(ember_opt_t *opt);

/** Bytes of optimizer state held (the arrays listed above; 0 for SGD). */
size_t ember_opt_state_bytes(const ember_opt_t *opt);

#define EMBER_OPT_STATE_MAX 4

/*
 * One array of an optimizer's state, for checkpoints: @rows x @per_row
 * elements of @dtype, row r at r * per_row (per_row: dim, or 1 for per-row
 * state), named as PyTorch's optimizer.state_dict() names it: SGD momentum
 * "momentum_buffer", Adagrad "sum", Adam "exp_avg" and "exp_avg_sq", sparse
 * Adam's per-row counts "step" (U32), row-wise Adagrad FBGEMM's "momentum1"
 * ([rows], F32), sparse SGD with dampening's "started" (U8, one a row:
 * 0 or 1).  @data points at the live state (write to it to restore).
 */
typedef struct {
    const char *name;
    ember_dtype_t dtype;
    size_t rows, per_row;
    void *data;
} ember_opt_state_t;

/**
 * The state arrays @opt holds (0 for plain SGD), into @out, in a fixed
 * order for each kind and settings (the order above); returns the count.
 * The arrays are borrowed from @opt (valid until ember_opt_destroy); a
 * restore writes every one of them and sets the step count, and the
 * optimizer then steps exactly as the one they were copied from would.
 */
size_t ember_opt_state_arrays(ember_opt_t *opt, ember_opt_state_t out[EMBER_OPT_STATE_MAX]);

/** Steps taken (dense: the Adam/Adagrad step count; sparse: the
 * table-wide count, which Adagrad's lr_decay and per-table Adam use). */
uint64_t ember_opt_steps(const ember_opt_t *opt);

/** Set the step count when restoring (with the state arrays). */
void ember_opt_set_steps(ember_opt_t *opt, uint64_t steps);

/**
 * One dense step: @param [n] -= update(@grad [n]).  n must equal rows * dim
 * and the object must be EMBER_OPT_DENSE.  Both buffers borrowed.
 * Errors: ERR_INVALID_PARAM.
 */
ember_status_t ember_opt_step_dense(ember_opt_t *opt, float *param, const float *grad, size_t n);

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
