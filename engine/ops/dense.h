/*
 * ember engine: dense layers on the CPU (CBLAS): Linear, ReLU, and a small MLP
 * built from them (Linear+ReLU ... Linear, the last without ReLU).
 *
 * Layout is row-major everywhere, as PyTorch: x [batch, in], Linear weight
 * A [out, in], bias b [out], y = x A^T + b.
 */
#ifndef EMBER_ENGINE_DENSE_H
#define EMBER_ENGINE_DENSE_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * y = x A^T + b.
 * @x [batch, in], @weight [out, in], @bias [out] or NULL (no bias),
 * @y_p [batch, out] overwritten.  All borrowed; @y_p must not alias @x.
 * Errors: ERR_INVALID_PARAM (NULL buffers, a size beyond what BLAS takes).
 */
ember_status_t ember_linear_forward(const float *x, size_t batch, size_t in, size_t out,
                                    const float *weight, const float *bias, float *y_p);

/**
 * Backward of ember_linear_forward, given @grad_y [batch, out].
 * @grad_x_p [batch, in] or NULL (not needed, e.g. first layer);
 * @grad_weight_p [out, in] and @grad_bias_p [out], each NULL when not wanted.
 * @accumulate: 0 overwrites the parameter gradients, 1 adds into them
 * (gradient accumulation); grad_x_p is always overwritten.
 * Errors: ERR_INVALID_PARAM.
 */
ember_status_t ember_linear_backward(const float *x, size_t batch, size_t in, size_t out,
                                     const float *weight, const float *grad_y, int accumulate,
                                     float *grad_x_p, float *grad_weight_p, float *grad_bias_p);

/** y = max(x, 0) over @n floats; @y_p may equal @x (in place). */
void ember_relu_forward(const float *x, size_t n, float *y_p);

/**
 * grad_x = grad_y where the ReLU passed its input (x > 0), else 0.  @x may be
 * the ReLU's input or its output (same sign test); @grad_x_p may equal
 * @grad_y.  The gradient at exactly 0 is 0, as PyTorch.
 */
void ember_relu_backward(const float *x, const float *grad_y, size_t n, float *grad_x_p);

/* A stack of Linear layers with ReLU between them.  Parameters and their
 * gradients each live in one flat buffer (layer 0 weight, layer 0 bias, layer
 * 1 weight, ...), so a data-parallel trainer allreduces one contiguous span. */
typedef struct ember_mlp ember_mlp_t;

/**
 * Create an MLP with layer widths @sizes[0] (input) .. @sizes[nsizes-1]
 * (output); nsizes >= 2.  Weights and biases are drawn uniform in
 * +-1/sqrt(fan_in) (PyTorch's Linear default range; not its random stream)
 * from @seed.  @sizes is copied.
 * Errors: ERR_INVALID_PARAM (nsizes < 2, a zero width), ERR_NO_MEMORY.
 */
ember_status_t ember_mlp_create(const size_t *sizes, size_t nsizes, uint64_t seed,
                                ember_mlp_t **mlp_p);

/** Free the MLP and everything it owns.  NULL is a no-op. */
void ember_mlp_destroy(ember_mlp_t *mlp);

/** Number of layers (Linear count). */
size_t ember_mlp_num_layers(const ember_mlp_t *mlp);

/** Total number of parameters (floats) in the flat buffers. */
size_t ember_mlp_num_params(const ember_mlp_t *mlp);

/** Flat parameter / gradient buffers, owned by the MLP (num_params floats). */
float *ember_mlp_params(ember_mlp_t *mlp);
float *ember_mlp_grads(ember_mlp_t *mlp);

/**
 * Pointers into the flat buffers for layer @layer: weight [out, in] and bias
 * [out] (each output may be NULL when not wanted), and their gradients.
 * Errors: ERR_OUT_OF_RANGE (layer >= num_layers).
 */
ember_status_t ember_mlp_layer(ember_mlp_t *mlp, size_t layer, float **weight_p, float **bias_p,
                               float **grad_weight_p, float **grad_bias_p);

/**
 * Forward a batch: @x [batch, sizes[0]] -> @y_p [batch, sizes[last]].
 * @x is borrowed and must stay unchanged until the matching backward (it is
 * the first layer's saved input, as autograd would keep it).  Activations are
 * kept inside the MLP; their buffers grow only when the batch grows.
 * Errors: ERR_INVALID_PARAM, ERR_NO_MEMORY.
 */
ember_status_t ember_mlp_forward(ember_mlp_t *mlp, const float *x, size_t batch, float *y_p);

/**
 * Backward of the last forward: @grad_y [batch, sizes[last]].  Overwrites the
 * gradient buffer (ember_mlp_grads); writes @grad_x_p [batch, sizes[0]] when
 * not NULL (the embedding output's gradient, sent back to the PS).
 * Errors: ERR_INVALID_PARAM (no forward before).
 */
ember_status_t ember_mlp_backward(ember_mlp_t *mlp, const float *grad_y, float *grad_x_p);

#ifdef __cplusplus
}
#endif
#endif
