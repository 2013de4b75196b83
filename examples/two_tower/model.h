/*
 * two_tower: the dense half of the model, in plain C (no ember in here).
 *
 *   user tower:  u = W2u relu(W1u [user_id ; history] + b1u) + b2u
 *   item tower:  v = W2i relu(W1i [item_id ; categories] + b1i) + b2i
 *   logit = u . v,  loss = mean over the batch of BCE with logits
 *
 * where [a ; b] concatenates two pooled embeddings of dim D (so each tower
 * reads 2D floats), W1 is [H][2D], W2 [E][H] (PyTorch's nn.Linear layout:
 * [out][in]).  Every parameter lives in one vector (and every gradient in
 * another of the same layout), so a step's dense gradients are one
 * allreduce and one optimizer step.
 */
#ifndef TWO_TOWER_MODEL_H
#define TWO_TOWER_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* One tower's parameters (or gradients): pointers into a model's vector. */
typedef struct {
    float *w1, *b1; /* [H][2D], [H] */
    float *w2, *b2; /* [E][H], [E] */
} tower_t;

/* A tower's activations of one batch. */
typedef struct {
    float *x; /* [B][2D]: the input, the two pooled features side by side */
    float *h; /* [B][H]: after the ReLU */
    float *z; /* [B][E]: the tower's output */
} tower_acts_t;

typedef struct {
    size_t dim, hidden, out; /* D, H, E */
    size_t num_params;
    float *params, *grads; /* [num_params] each */
    tower_t user, item;    /* into params */
    tower_t user_grad, item_grad;
    size_t batch_size; /* the activations' room */
    tower_acts_t user_acts, item_acts;
    /* backward scratch: [B], [B][E] twice, [B][H], [B][2D] */
    float *dlogit, *dz_user, *dz_item, *dh, *dx;
} model_t;

/**
 * A model of pooled dim @dim, hidden width @hidden and tower output @out for
 * batches of up to @batch_size, its parameters drawn as nn.Linear's default
 * (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases) from @seed,
 * so every trainer starts from the same values.  Returns 0, or -1 when out
 * of memory.
 */
int model_create(model_t *model, size_t dim, size_t hidden, size_t out, size_t batch_size,
                 uint64_t seed);
void model_destroy(model_t *model);

/* A step's pooled features (ember's output) and their gradients. */
typedef struct {
    const float *user_id, *history, *item_id, *categories; /* [B][D] each */
} model_input_t;

typedef struct {
    float *user_id, *history, *item_id, *categories; /* [B][D] each */
} model_input_grad_t;

/**
 * Forward and backward over a batch of @batch_size (<= the model's) with
 * @labels: the gradients of the parameters (of the mean loss) into
 * model->grads, overwritten, and those of the inputs into @input_grad.
 * Returns the batch's mean loss.
 */
float model_step(model_t *model, const model_input_t *input, const float *labels, size_t batch_size,
                 const model_input_grad_t *input_grad);

/* The parameters as PyTorch names them (reference.py's module): @i < 8. */
typedef struct {
    const char *name;
    float *data;       /* into model->params */
    size_t rows, cols; /* cols 0: a vector of rows */
} model_tensor_t;

#define MODEL_TENSORS 8
void model_tensor(const model_t *model, size_t i, model_tensor_t *tensor_p);

#endif
