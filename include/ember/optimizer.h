/*
 * ember: optimizers, dense (a trainer's own parameters, as torch.optim) and
 * sparse / lazy (a table's, applied on the parameter servers: only the rows
 * a step touched are updated, and only their state moves; a table names its
 * optimizer in its config, <ember/table.h>).
 *
 * One optimizer object serves one parameter of shape [rows, dim] (a dense
 * vector is rows = 1, dim = n) and owns that parameter's state, allocated once
 * at create and sized to what the algorithm needs.  SGD, Adagrad and Adam
 * are element-wise (their step count is the object's, shared by every
 * element stepped together), so one EMBER_OPT_DENSE object over all of a
 * model's parameters laid end to end in one vector steps each of them
 * as one object per tensor would (torch.optim's parameter groups
 * are only needed for different settings).  Row-wise Adagrad keeps one
 * accumulator per row: give it the rows the model means.  State:
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
 * Threading: one caller at a time per object; distinct objects are
 * independent; the calls without an object (kind names, configs) from any
 * thread.  No call blocks.  Nothing is logged but by ember_opt_create and
 * ember_opt_step_dense, which log the error they return.
 */
#ifndef EMBER_OPTIMIZER_H
#define EMBER_OPTIMIZER_H

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

/** Name of a kind ("sgd", "adagrad", "rowwise_adagrad", "adam"; "unknown"
 * for another value); static storage. */
const char *ember_opt_kind_name(ember_opt_kind_t kind);

/** Parse a kind name as printed by ember_opt_kind_name into *@kind_p
 * (untouched on error).  @text borrowed.  Errors: ERR_INVALID_PARAM (NULL
 * or another name). */
ember_status_t ember_opt_kind_parse(const char *text, ember_opt_kind_t *kind_p);

/**
 * Fill @cfg_p (the caller's, written whole) with PyTorch's defaults for
 * @kind and learning rate @lr (momentum 0, dampening 0, Adagrad eps 1e-10,
 * row-wise Adagrad eps 1e-8 (FBGEMM), Adam betas 0.9/0.999 eps 1e-8,
 * adam_row_step 1).  Nothing is checked here (ember_opt_config_check).
 */
void ember_opt_config_default(ember_opt_kind_t kind, float lr, ember_opt_config_t *cfg_p);

/**
 * Check @cfg's hyper-parameters as ember_opt_create would (lr finite and >=
 * 0, momentum >= 0, nesterov with momentum and no dampening, lr_decay,
 * initial_accumulator and eps >= 0, Adam's betas in [0, 1), a known kind).
 * @err (may be NULL/0) gets one line naming the setting.  Nothing logged.
 * Errors: ERR_INVALID_PARAM.
 */
ember_status_t ember_opt_config_check(const ember_opt_config_t *cfg, char *err, size_t err_length);

/**
 * Create an optimizer for a parameter of [rows, dim] floats stepped as
 * @layout (@rows may be 0 for EMBER_OPT_SPARSE: a shard that owns no row).
 * @cfg is copied; *@opt_p the caller's (ember_opt_destroy).  State is
 * zero-initialised (accumulators at initial_accumulator).  The errors are
 * logged.
 * Errors: ERR_INVALID_PARAM (bad sizes or hyper-parameters, e.g. lr < 0,
 * nesterov without momentum, betas outside [0, 1)), ERR_NO_MEMORY.
 */
ember_status_t ember_opt_create(const ember_opt_config_t *cfg, size_t rows, size_t dim,
                                ember_opt_layout_t layout, ember_opt_t **opt_p);

/** Free the optimizer and its state.  NULL is a no-op. */
void ember_opt_destroy(ember_opt_t *opt);

/** Bytes of optimizer state held (the arrays listed above; 0 for plain
 * SGD). */
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

/** Set the step count when restoring (with the state arrays); the next
 * step is @steps + 1. */
void ember_opt_set_steps(ember_opt_t *opt, uint64_t steps);

/**
 * One dense step: @param [n] -= update(@grad [n]), host memory.  n must
 * equal rows * dim and the object must be EMBER_OPT_DENSE.  Both buffers
 * borrowed for the call; @param written in place.  Errors:
 * ERR_INVALID_PARAM (NULL buffers, another n, a sparse object; logged,
 * nothing stepped).
 */
ember_status_t ember_opt_step_dense(ember_opt_t *opt, float *param, const float *grad, size_t n);

#ifdef __cplusplus
}
#endif
#endif
