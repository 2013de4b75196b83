/*
 * two_tower: the dense half of the model, forward and backward (model.h).
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: the initial weights from a seed, the same on every trainer. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* @n values uniform in [-@bound, @bound). */
static void fill_uniform(float *out, size_t n, float bound, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        float u = (float)(next_random(state) >> 40) * 0x1.0p-24f; /* [0, 1) */
        out[i] = (2.0f * u - 1.0f) * bound;
    }
}

static const char *const tensor_names[MODEL_TENSORS] = {
        "user_tower.0.weight", "user_tower.0.bias", "user_tower.2.weight", "user_tower.2.bias",
        "item_tower.0.weight", "item_tower.0.bias", "item_tower.2.weight", "item_tower.2.bias"};

void model_tensor(const model_t *model, size_t i, model_tensor_t *tensor_p)
{
    const tower_t *tower = i < 4 ? &model->user : &model->item;
    const size_t in = 2 * model->dim, h = model->hidden, e = model->out;
    switch (i % 4) {
    case 0: *tensor_p = (model_tensor_t){tensor_names[i], tower->w1, h, in}; break;
    case 1: *tensor_p = (model_tensor_t){tensor_names[i], tower->b1, h, 0}; break;
    case 2: *tensor_p = (model_tensor_t){tensor_names[i], tower->w2, e, h}; break;
    default: *tensor_p = (model_tensor_t){tensor_names[i], tower->b2, e, 0}; break;
    }
}

/* The four arrays of a tower, carved from @base in the tensors' order. */
static float *tower_layout(tower_t *tower, float *base, size_t in, size_t hidden, size_t out)
{
    tower->w1 = base;
    tower->b1 = tower->w1 + hidden * in;
    tower->w2 = tower->b1 + hidden;
    tower->b2 = tower->w2 + out * hidden;
    return tower->b2 + out;
}

static int acts_alloc(tower_acts_t *acts, size_t batch_size, size_t in, size_t hidden, size_t out)
{
    acts->x = malloc(batch_size * in * sizeof(float));
    acts->h = malloc(batch_size * hidden * sizeof(float));
    acts->z = malloc(batch_size * out * sizeof(float));
    return acts->x && acts->h && acts->z ? 0 : -1;
}

int model_create(model_t *model, size_t dim, size_t hidden, size_t out, size_t batch_size,
                 uint64_t seed)
{
    const size_t in = 2 * dim;
    memset(model, 0, sizeof(*model));
    model->dim = dim;
    model->hidden = hidden;
    model->out = out;
    model->batch_size = batch_size;
    model->num_params = 2 * (hidden * in + hidden + out * hidden + out);
    model->params = malloc(model->num_params * sizeof(float));
    model->grads = calloc(model->num_params, sizeof(float));
    model->dlogit = malloc(batch_size * sizeof(float));
    model->dz_user = malloc(batch_size * out * sizeof(float));
    model->dz_item = malloc(batch_size * out * sizeof(float));
    model->dh = malloc(batch_size * hidden * sizeof(float));
    model->dx = malloc(batch_size * in * sizeof(float));
    if (!model->params || !model->grads || !model->dlogit || !model->dz_user || !model->dz_item ||
        !model->dh || !model->dx || acts_alloc(&model->user_acts, batch_size, in, hidden, out) ||
        acts_alloc(&model->item_acts, batch_size, in, hidden, out)) {
        model_destroy(model);
        return -1;
    }
    tower_layout(&model->item, tower_layout(&model->user, model->params, in, hidden, out), in,
                 hidden, out);
    tower_layout(&model->item_grad, tower_layout(&model->user_grad, model->grads, in, hidden, out),
                 in, hidden, out);

    /* nn.Linear's default: weight and bias U(-1/sqrt(in), 1/sqrt(in)). */
    uint64_t state = seed;
    for (size_t i = 0; i < MODEL_TENSORS; i++) {
        model_tensor_t t;
        model_tensor(model, i, &t);
        size_t fan_in = i % 4 < 2 ? in : hidden;
        fill_uniform(t.data, t.rows * (t.cols ? t.cols : 1), 1.0f / sqrtf((float)fan_in), &state);
    }
    return 0;
}

static void acts_free(tower_acts_t *acts)
{
    free(acts->x);
    free(acts->h);
    free(acts->z);
}

void model_destroy(model_t *model)
{
    free(model->params);
    free(model->grads);
    free(model->dlogit);
    free(model->dz_user);
    free(model->dz_item);
    free(model->dh);
    free(model->dx);
    acts_free(&model->user_acts);
    acts_free(&model->item_acts);
    memset(model, 0, sizeof(*model));
}

/* y[b][o] = bias[o] + sum_i w[o][i] x[b][i]  (x [B][in], w [out][in]) */
static void linear_forward(const float *x, const float *w, const float *bias, float *y,
                           size_t batch_size, size_t in, size_t out)
{
    for (size_t b = 0; b < batch_size; b++)
        for (size_t o = 0; o < out; o++) {
            float sum = bias[o];
            for (size_t i = 0; i < in; i++)
                sum += w[o * in + i] * x[b * in + i];
            y[b * out + o] = sum;
        }
}

/* Given dy [B][out]: dw += dy^T x, dbias += sum_b dy, and dx = dy w (when
 * @dx is not NULL). */
static void linear_backward(const float *x, const float *w, const float *dy, float *dw,
                            float *dbias, float *dx, size_t batch_size, size_t in, size_t out)
{
    for (size_t b = 0; b < batch_size; b++)
        for (size_t o = 0; o < out; o++) {
            float g = dy[b * out + o];
            dbias[o] += g;
            for (size_t i = 0; i < in; i++)
                dw[o * in + i] += g * x[b * in + i];
        }
    if (!dx)
        return;
    for (size_t b = 0; b < batch_size; b++)
        for (size_t i = 0; i < in; i++) {
            float sum = 0.0f;
            for (size_t o = 0; o < out; o++)
                sum += dy[b * out + o] * w[o * in + i];
            dx[b * in + i] = sum;
        }
}

/* x = [a ; c] row by row: the tower's input from two pooled features. */
static void concat(float *x, const float *a, const float *c, size_t batch_size, size_t dim)
{
    for (size_t b = 0; b < batch_size; b++) {
        memcpy(x + b * 2 * dim, a + b * dim, dim * sizeof(float));
        memcpy(x + b * 2 * dim + dim, c + b * dim, dim * sizeof(float));
    }
}

/* The inverse: dx's halves into the two features' gradients. */
static void split(const float *dx, float *da, float *dc, size_t batch_size, size_t dim)
{
    for (size_t b = 0; b < batch_size; b++) {
        memcpy(da + b * dim, dx + b * 2 * dim, dim * sizeof(float));
        memcpy(dc + b * dim, dx + b * 2 * dim + dim, dim * sizeof(float));
    }
}

static void tower_forward(const model_t *model, const tower_t *tower, tower_acts_t *acts,
                          size_t batch_size)
{
    const size_t in = 2 * model->dim, hidden = model->hidden;
    linear_forward(acts->x, tower->w1, tower->b1, acts->h, batch_size, in, hidden);
    for (size_t i = 0; i < batch_size * hidden; i++)
        acts->h[i] = acts->h[i] > 0.0f ? acts->h[i] : 0.0f;
    linear_forward(acts->h, tower->w2, tower->b2, acts->z, batch_size, hidden, model->out);
}

/* From the output's gradient @dz to the parameters' (@grad) and the
 * input's (model->dx). */
static void tower_backward(model_t *model, const tower_t *tower, const tower_acts_t *acts,
                           const float *dz, const tower_t *grad, size_t batch_size)
{
    const size_t in = 2 * model->dim, hidden = model->hidden;
    linear_backward(acts->h, tower->w2, dz, grad->w2, grad->b2, model->dh, batch_size, hidden,
                    model->out);
    for (size_t i = 0; i < batch_size * hidden; i++) /* ReLU: no gradient where it cut */
        if (acts->h[i] <= 0.0f)
            model->dh[i] = 0.0f;
    linear_backward(acts->x, tower->w1, model->dh, grad->w1, grad->b1, model->dx, batch_size, in,
                    hidden);
}

/* BCE with logits, PyTorch's stable form: max(x, 0) - x y + log(1 + exp(-|x|)). */
static float bce_with_logits(float x, float y)
{
    return fmaxf(x, 0.0f) - x * y + log1pf(expf(-fabsf(x)));
}

static float sigmoid(float x)
{
    return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

float model_step(model_t *model, const model_input_t *input, const float *labels, size_t batch_size,
                 const model_input_grad_t *input_grad)
{
    const size_t dim = model->dim, out = model->out;
    tower_acts_t *u = &model->user_acts, *v = &model->item_acts;

    concat(u->x, input->user_id, input->history, batch_size, dim);
    concat(v->x, input->item_id, input->categories, batch_size, dim);
    tower_forward(model, &model->user, u, batch_size);
    tower_forward(model, &model->item, v, batch_size);

    /* The loss, and its gradient at each logit (the mean: 1/B each). */
    double loss = 0.0;
    for (size_t b = 0; b < batch_size; b++) {
        float logit = 0.0f;
        for (size_t e = 0; e < out; e++)
            logit += u->z[b * out + e] * v->z[b * out + e];
        loss += bce_with_logits(logit, labels[b]);
        model->dlogit[b] = (sigmoid(logit) - labels[b]) / (float)batch_size;
    }

    /* d(u . v)/du = v and d(u . v)/dv = u: each tower's output gradient. */
    for (size_t b = 0; b < batch_size; b++)
        for (size_t e = 0; e < out; e++) {
            model->dz_user[b * out + e] = model->dlogit[b] * v->z[b * out + e];
            model->dz_item[b * out + e] = model->dlogit[b] * u->z[b * out + e];
        }
    memset(model->grads, 0, model->num_params * sizeof(float));
    tower_backward(model, &model->user, u, model->dz_user, &model->user_grad, batch_size);
    split(model->dx, input_grad->user_id, input_grad->history, batch_size, dim);
    tower_backward(model, &model->item, v, model->dz_item, &model->item_grad, batch_size);
    split(model->dx, input_grad->item_id, input_grad->categories, batch_size, dim);
    return (float)(loss / (double)batch_size);
}
