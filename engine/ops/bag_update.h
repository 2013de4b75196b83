/*
 * engine/ops/bag_update: the per-row algorithm of the fused EmbeddingBag
 * backward + sparse optimizer step (include/ember/device.h's
 * bag_backward_update), as inline functions that both nvcc (the kernel in
 * cuda/cuda_bag.cu) and the C compiler (its CPU twin, bag_update_row_host,
 * tested in tests/engine/test_bag_update.c) build.
 *
 * Input: the batch's entries sorted by (row, position), so that a unique
 * row's segment holds its entries in position order; each entry's bag; per
 * bag the mean's scale.  Element e of one row's gradient is the sum of its
 * entries' contributions in position order, cut into sub-segments of `sub`
 * entries: each sub-segment summed from 0, the partial sums then added in
 * order.  A segment of at most `sub` entries thus sums exactly as
 * ember_bag_backward does (its bag order is the position order); a longer
 * one within rounding of it.  The order is fixed by the data alone, not by
 * how threads share the work: the same bits on every run.
 *
 * The update of one row then follows engine/ops/optimizer.c's sparse step
 * expression for expression (sgd_span, adagrad_span, rowwise_row,
 * adam_sparse_span); only row-wise Adagrad's sum of squares over the row is
 * summed by the GPU in another order (a warp's butterfly), and nvcc fuses
 * multiply-adds the C build does not: CUDA is within rounding of the CPU.
 */
#ifndef EMBER_ENGINE_BAG_UPDATE_H
#define EMBER_ENGINE_BAG_UPDATE_H

#include <ember/device.h>
#include <ember/embedding_bag.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BAG_HD __host__ __device__ __forceinline__
#else
#define BAG_HD inline __attribute__((always_inline))
#endif

/* Entries one sub-segment sums before its partial joins the row's total:
 * FBGEMM's segment length per warp; segments up to this long sum as the
 * CPU does. */
#define BAG_UPDATE_SUB 32

/* The optimizer kinds of ember_device_opt_t (engine/ops/optimizer.h's). */
enum {
    BAG_OPT_SGD,
    BAG_OPT_ADAGRAD,
    BAG_OPT_ROWWISE_ADAGRAD,
    BAG_OPT_ADAM
};

/* What the per-row step reads (all borrowed; device memory on the GPU). */
typedef struct {
    const int *pos;          /* entry positions sorted by (row, position) */
    const int *bag_of;       /* [n]: each position's bag, -1 for none */
    const float *grad_out;   /* [bags, dim] */
    const float *weights;    /* [n] per-sample weights (sum mode) or NULL */
    const float *mean_scale; /* [bags]: 1 / non-padding entries (mean mode) */
    const int64_t *argmax;   /* [bags, dim] (max mode) */
    int mode;                /* ember_bag_mode_t */
    size_t dim;
    size_t sub; /* sub-segment length, >= 1 (BAG_UPDATE_SUB) */
} bag_update_src_t;

/* One entry of a segment: its bag (-1: contributes nothing) and the factor
 * its bag's gradient is scaled by. */
typedef struct {
    int bag;
    int scaled; /* 0: the gradient as it is (plain sum, max) */
    float scale;
} bag_entry_t;

/* Entry @j of the segment that starts at @begin.  Max mode: a row counts
 * once per bag however often it repeats there (its repeats are adjacent in
 * the segment), as the CPU's backward_max adds each bag's element once. */
static BAG_HD bag_entry_t bag_update_entry(const bag_update_src_t *s, size_t begin, size_t j)
{
    const int p = s->pos[j];
    bag_entry_t en;
    en.bag = s->bag_of[p];
    en.scaled = 0;
    en.scale = 1.0f;
    if (s->mode == EMBER_BAG_MAX) {
        if (j > begin && s->bag_of[s->pos[j - 1]] == en.bag)
            en.bag = -1;
    } else if (en.bag >= 0 && s->weights) {
        en.scaled = 1;
        en.scale = s->weights[p];
    } else if (en.bag >= 0 && s->mode == EMBER_BAG_MEAN) {
        en.scaled = 1;
        en.scale = s->mean_scale[en.bag];
    }
    return en;
}

/* The entry's contribution to element @e of row @row (0: none; adding 0
 * to a sum that started at +0 changes no bit). */
static BAG_HD float bag_update_contrib(const bag_update_src_t *s, bag_entry_t en, int64_t row,
                                       size_t e)
{
    if (en.bag < 0)
        return 0.0f;
    const size_t at = (size_t)en.bag * s->dim + e;
    const float go = s->grad_out[at];
    if (s->mode == EMBER_BAG_MAX)
        return s->argmax[at] == row ? go : 0.0f;
    return en.scaled ? en.scale * go : go;
}

/* One element's sum over a segment, in sub-segments. */
typedef struct {
    float total; /* the finished sub-segments' partials, added in order */
    float part;  /* the current sub-segment's sum */
} bag_acc_t;

/* Before the segment's entry @k: 0 inside a sub-segment, 1 where the first
 * ends (its partial becomes the total), 2 where a later one ends. */
static BAG_HD int bag_acc_boundary(size_t k, size_t sub)
{
    if (k == 0 || k % sub != 0)
        return 0;
    return k == sub ? 1 : 2;
}

static BAG_HD void bag_acc_add(bag_acc_t *a, float c, int boundary)
{
    if (boundary) {
        a->total = boundary == 1 ? a->part : a->total + a->part;
        a->part = 0.0f;
    }
    a->part += c;
}

/* The element's gradient once the segment's @len entries are added. */
static BAG_HD float bag_acc_sum(const bag_acc_t *a, size_t len, size_t sub)
{
    return len <= sub ? a->part : a->total + a->part;
}

/* What one row's update needs beyond its gradient. */
typedef struct {
    int first;       /* SGD: the row's momentum buffer starts now */
    uint32_t t;      /* Adam: the step count its bias correction uses */
    float step_size; /* Adam */
    float mult;      /* row-wise Adagrad: lr / (sqrt(acc) + eps) */
} bag_row_params_t;

/* Adagrad's decayed rate at the table-wide step (optimizer.c's
 * adagrad_clr, in double as there). */
static BAG_HD float bag_update_adagrad_clr(const ember_device_opt_t *o)
{
    return (float)(o->lr / (1.0 + (double)(o->step - 1) * o->lr_decay));
}

/* SparseAdam's step size at step @t (optimizer.c's adam_sparse_span). */
static BAG_HD float bag_update_adam_step_size(const ember_device_opt_t *o, uint64_t t)
{
    const double bc1 = 1.0 - pow((double)o->beta1, (double)t);
    const double bc2 = 1.0 - pow((double)o->beta2, (double)t);
    return (float)(o->lr * sqrt(bc2) / bc1);
}

/* Whether SGD keeps a started flag per row (momentum with dampening: a
 * zero buffer is not "not started" then). */
static BAG_HD int bag_update_sgd_flags(const ember_device_opt_t *o)
{
    return o->kind == BAG_OPT_SGD && o->momentum != 0.0f && o->dampening != 0.0f;
}

/* Row @row's parameters, read from its state before anything is written. */
static BAG_HD bag_row_params_t bag_update_row_params(const ember_device_opt_t *o, int64_t row)
{
    bag_row_params_t p;
    p.first = 0;
    p.t = 0;
    p.step_size = 0.0f;
    p.mult = 0.0f;
    if (bag_update_sgd_flags(o))
        p.first = !o->started[row];
    if (o->kind == BAG_OPT_ADAM) {
        uint64_t t = o->step;
        if (o->row_step) {
            /* Saturate: past 2^32 updates the bias terms are exactly 1. */
            uint32_t c = o->row_step[row];
            p.t = c != UINT32_MAX ? c + 1 : c;
            t = p.t;
        }
        p.step_size = bag_update_adam_step_size(o, t);
    }
    return p;
}

/* Row-wise Adagrad: the accumulator after adding the row's mean square
 * (@sq: the sum of g^2 over the row) into *@acc_p, and the multiplier. */
static BAG_HD float bag_update_rowwise_mult(const ember_device_opt_t *o, float acc, float sq,
                                            size_t dim, float *acc_p)
{
    acc += sq / (float)dim;
    *acc_p = acc;
    return o->lr / (sqrtf(acc) + o->eps);
}

/* The row's per-row state written once its elements are done. */
static BAG_HD void bag_update_row_commit(const ember_device_opt_t *o, int64_t row,
                                         bag_row_params_t p)
{
    if (bag_update_sgd_flags(o))
        o->started[row] = 1;
    if (o->kind == BAG_OPT_ADAM && o->row_step)
        o->row_step[row] = p.t;
}

/* Element @e of row @row: @w its value, @g its gradient; the state at the
 * same place.  Plain SGD has no state (state0 NULL). */
static BAG_HD void bag_update_elem(const ember_device_opt_t *o, bag_row_params_t p, float clr,
                                   float *w, float g, size_t at)
{
    switch (o->kind) {
    case BAG_OPT_SGD: {
        if (o->momentum == 0.0f || !o->state0) { /* plain SGD, as optimizer.c */
            *w -= o->lr * g;
            break;
        }
        const float mom = o->momentum, damp1 = 1.0f - o->dampening;
        float b = p.first ? g : mom * o->state0[at] + damp1 * g;
        o->state0[at] = b;
        float d = o->nesterov ? g + mom * b : b;
        *w -= o->lr * d;
        break;
    }
    case BAG_OPT_ADAGRAD: {
        float s = o->state0[at] + g * g;
        o->state0[at] = s;
        *w -= clr * (g / (sqrtf(s) + o->eps));
        break;
    }
    case BAG_OPT_ROWWISE_ADAGRAD: *w -= p.mult * g; break;
    case BAG_OPT_ADAM: {
        const float b1 = o->beta1, b2 = o->beta2;
        float m = o->state0[at], v = o->state1[at];
        m += (g - m) * (1.0f - b1);
        v += (g * g - v) * (1.0f - b2);
        o->state0[at] = m;
        o->state1[at] = v;
        *w -= p.step_size * (m / (sqrtf(v) + o->eps));
        break;
    }
    default: break;
    }
}

/* The state @o's kind needs, present; NULL when complete, else why not. */
static BAG_HD const char *bag_update_opt_check(const ember_device_opt_t *o)
{
    if (!o)
        return "no optimizer";
    if (o->step == 0)
        return "step 0 (the count includes this step)";
    switch (o->kind) {
    case BAG_OPT_SGD:
        if (o->momentum != 0.0f && !o->state0)
            return "SGD with momentum needs its momentum buffer (state0)";
        if (bag_update_sgd_flags(o) && !o->started)
            return "SGD with dampening needs its started flags";
        return NULL;
    case BAG_OPT_ADAGRAD:
    case BAG_OPT_ROWWISE_ADAGRAD: return o->state0 ? NULL : "Adagrad needs its sum (state0)";
    case BAG_OPT_ADAM: return o->state0 && o->state1 ? NULL : "Adam needs exp_avg and exp_avg_sq";
    default: return "unknown optimizer kind";
    }
}

#ifndef __CUDACC__
/* Element @e of row @row's gradient over its segment [@begin, @end), as
 * the GPU computes it: a segment of at most `sub` entries with bag_acc_t
 * (one warp), a longer one as its sub-segments' partials, each summed from
 * 0 (a warp each), then added in order.  @by_acc 1: bag_acc_t for every
 * segment, which must give the same bits (the test checks it). */
static inline float bag_update_grad_host(const bag_update_src_t *s, int64_t row, size_t begin,
                                         size_t end, size_t e, int by_acc)
{
    if (by_acc || end - begin <= s->sub) {
        bag_acc_t a = {0.0f, 0.0f};
        for (size_t j = begin; j < end; j++)
            bag_acc_add(&a, bag_update_contrib(s, bag_update_entry(s, begin, j), row, e),
                        bag_acc_boundary(j - begin, s->sub));
        return bag_acc_sum(&a, end - begin, s->sub);
    }
    float total = 0.0f;
    for (size_t b0 = begin; b0 < end; b0 += s->sub) {
        const size_t b1 = end - b0 > s->sub ? b0 + s->sub : end;
        float part = 0.0f;
        for (size_t j = b0; j < b1; j++)
            part += bag_update_contrib(s, bag_update_entry(s, begin, j), row, e);
        total = b0 == begin ? part : total + part;
    }
    return total;
}

/*
 * The CPU twin of the kernels for one unique row @row, whose segment is
 * entries [@begin, @end) of s->pos: the same sums in the same order, then
 * the update of @table's row and its state.  @g: dim floats of the caller's.
 */
static inline void bag_update_row_host(const bag_update_src_t *s, const ember_device_opt_t *o,
                                       float clr, float *table, int64_t row, size_t begin,
                                       size_t end, float *g)
{
    const size_t dim = s->dim;
    for (size_t e = 0; e < dim; e++)
        g[e] = bag_update_grad_host(s, row, begin, end, e, 0);
    bag_row_params_t p = bag_update_row_params(o, row);
    float acc = 0.0f;
    if (o->kind == BAG_OPT_ROWWISE_ADAGRAD) {
        float sq = 0.0f;
        for (size_t e = 0; e < dim; e++)
            sq += g[e] * g[e];
        p.mult = bag_update_rowwise_mult(o, o->state0[row], sq, dim, &acc);
    }
    float *w = table + (size_t)row * dim;
    for (size_t e = 0; e < dim; e++)
        bag_update_elem(o, p, clr, &w[e], g[e], (size_t)row * dim + e);
    if (o->kind == BAG_OPT_ROWWISE_ADAGRAD)
        o->state0[row] = acc;
    bag_update_row_commit(o, row, p);
}
#endif

#endif
