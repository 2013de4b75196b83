/*
 * engine/ops/crossnet: DLRM-DCN's interaction (torchrec.models.dlrm.DLRM_DCN's
 * InteractionDCNArch), TorchRec's LowRankCrossNet over the concatenated
 * features.
 *
 * Per example, x0 [n] with n = (tables + 1) * dim: the dense arch's output,
 * then the pooled embedding of each table.  Then @layers of
 *     x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l
 * with V_l [rank][n], W_l [n][rank], b_l [n]; the output is x_L [batch][n].
 *
 * Parameters, one block in TorchRec's state_dict order: W_0..W_{L-1}
 * ([n][rank] each), V_0..V_{L-1} ([rank][n]), b_0..b_{L-1} ([n]).
 *
 * The forward keeps what its backward reads in a caller's @saved buffer of
 * ember_crossnet_saved_floats() floats: each layer's input x_l, then each
 * layer's gate (W_l V_l x_l + b_l) [batch][n], then each layer's V_l x_l
 * [batch][rank].  Nothing else carries over between the two calls.
 */
#ifndef EMBER_ENGINE_CROSSNET_H
#define EMBER_ENGINE_CROSSNET_H

#include <ember/status.h>

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The shape of one cross net over one batch. */
typedef struct {
    size_t tables; /* pooled features, >= 0 */
    size_t batch;  /* >= 1 */
    size_t dim;    /* >= 1 */
    size_t layers; /* >= 1 */
    size_t rank;   /* >= 1 */
} ember_crossnet_shape_t;

/* The counts are inline, as the CUDA backend (a plugin that sees only
 * libember's public symbols) sizes and checks its shapes by them too. */

/** The width of x0 and of the output: (tables + 1) * dim. */
static inline size_t ember_crossnet_width(const ember_crossnet_shape_t *shape)
{
    return (shape->tables + 1) * shape->dim;
}

/** Floats of the parameter block: layers * (2 * n * rank + n). */
static inline size_t ember_crossnet_param_floats(const ember_crossnet_shape_t *shape)
{
    const size_t n = ember_crossnet_width(shape);
    return shape->layers * (2 * n * shape->rank + n);
}

/** Floats of @saved: layers * batch * (2 * n + rank). */
static inline size_t ember_crossnet_saved_floats(const ember_crossnet_shape_t *shape)
{
    const size_t n = ember_crossnet_width(shape);
    return shape->layers * shape->batch * (2 * n + shape->rank);
}

/* a * b elements under INT_MAX: what one BLAS matrix may hold. */
static inline int ember_crossnet_blas_fits(size_t a, size_t b)
{
    return a <= INT_MAX && b <= INT_MAX && (a == 0 || b <= INT_MAX / a);
}

/** Whether the ops take @shape: no zero size but tables, each matrix of a
 * layer ([batch][n], [n][rank], [batch][rank]) and the parameter block
 * within BLAS's int, the saved block's count within size_t. */
static inline int ember_crossnet_shape_ok(const ember_crossnet_shape_t *shape)
{
    if (!shape || shape->batch == 0 || shape->dim == 0 || shape->layers == 0 || shape->rank == 0 ||
        shape->tables >= SIZE_MAX / shape->dim - 1)
        return 0;
    const size_t n = ember_crossnet_width(shape), r = shape->rank;
    return ember_crossnet_blas_fits(shape->batch, n) && ember_crossnet_blas_fits(n, r) &&
           ember_crossnet_blas_fits(shape->batch, r) &&
           ember_crossnet_blas_fits(shape->layers, 2 * n * r + n) &&
           shape->layers <= SIZE_MAX / (shape->batch * (2 * n + r));
}

/**
 * The forward: @out [batch][n] from @dense [batch][dim] and @pooled
 * [tables][batch][dim] (table t's at t * batch * dim; NULL when tables is
 * 0), @params as above; @saved written for the backward.  All borrowed;
 * @out and @saved must not overlap each other or the inputs.
 * Errors: ERR_INVALID_PARAM (a zero size, a NULL buffer, a size beyond what
 * BLAS takes).
 */
ember_status_t ember_crossnet_forward(const ember_crossnet_shape_t *shape, const float *dense,
                                      const float *pooled, const float *params, float *saved,
                                      float *out);

/**
 * The backward from @grad_out [batch][n] and the forward's @saved:
 * @grad_params (params' layout), @grad_dense [batch][dim] and @grad_pooled
 * [tables][batch][dim], each fully written (overwritten, not accumulated).
 * @dense and @pooled are the forward's (checked, unread: @saved holds x0).
 * Errors: as the forward, and ERR_NO_MEMORY (its scratch).
 */
ember_status_t ember_crossnet_backward(const ember_crossnet_shape_t *shape, const float *dense,
                                       const float *pooled, const float *params, const float *saved,
                                       const float *grad_out, float *grad_params, float *grad_dense,
                                       float *grad_pooled);

/* Rows the host ops take through every layer at a time (their working set
 * in cache: 128 rows of DLRM-DCN's n = 1728 are 0.9 MB an array). */
#define EMBER_CROSSNET_CHUNK 128

/** The backward's working floats: three [chunk][n] and one [chunk][rank]. */
static inline size_t ember_crossnet_scratch_floats(const ember_crossnet_shape_t *shape)
{
    return EMBER_CROSSNET_CHUNK * (3 * ember_crossnet_width(shape) + shape->rank);
}

/** ember_crossnet_backward in the caller's @scratch
 * (ember_crossnet_scratch_floats), allocating nothing: a training step's
 * backward, whose scratch stays between steps. */
ember_status_t ember_crossnet_backward_in(const ember_crossnet_shape_t *shape, const float *dense,
                                          const float *pooled, const float *params,
                                          const float *saved, const float *grad_out,
                                          float *grad_params, float *grad_dense, float *grad_pooled,
                                          float *scratch);

#ifdef __cplusplus
}
#endif

#endif
