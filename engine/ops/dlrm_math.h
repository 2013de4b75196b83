/*
 * engine/ops/dlrm_math: the per-element math of DLRM's interaction and loss,
 * in one place for the host ops (engine/ops/loss.c), the CUDA kernels
 * (cuda/cuda_dlrm.cu) and their CPU twins (cuda/cuda_dlrm_twin.c), so the
 * kernels' arithmetic is the arithmetic a unit test checks on a machine
 * without a GPU.  C11 and CUDA C++ alike; nothing here allocates or fails.
 */
#ifndef EMBER_ENGINE_DLRM_MATH_H
#define EMBER_ENGINE_DLRM_MATH_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define EMBER_HD static inline __host__ __device__
#else
#define EMBER_HD static inline
#endif

/* The place of the dot of vectors i < j among F vectors' pairs, in the
 * order of torch.triu_indices(F, F, offset=1). */
EMBER_HD size_t ember_dlrm_pair(size_t F, size_t i, size_t j)
{
    return i * F - i * (i + 1) / 2 + (j - i - 1);
}

/* The inverse: pair @p's two vectors (i < j). */
EMBER_HD void ember_dlrm_pair_of(size_t F, size_t p, size_t *i_p, size_t *j_p)
{
    size_t i = 0;
    while (p >= F - 1 - i) {
        p -= F - 1 - i;
        i++;
    }
    *i_p = i;
    *j_p = i + 1 + p;
}

/* The dot of @a and @b (strides 1) summed over d in increasing order from
 * 0.0f, as engine/ops/interaction.c sums each example's. */
EMBER_HD float ember_dlrm_dot(const float *a, const float *b, size_t dim)
{
    float acc = 0.0f;
    for (size_t d = 0; d < dim; d++)
        acc += a[d] * b[d];
    return acc;
}

/* One example's gradient of vector @f at @d: @x its F vectors [F][D], @g
 * its pair gradients (triu order), @dense_grad its output's gradient at d
 * (the dense vector's own slice, added for f == 0).  The sum over j runs
 * in increasing j, as engine/ops/interaction.c's backward. */
EMBER_HD float ember_dlrm_inter_grad(const float *x, const float *g, size_t F, size_t D, size_t f,
                                     size_t d, float dense_grad)
{
    float acc = 0.0f;
    for (size_t j = 0; j < F; j++) {
        if (j == f)
            continue;
        size_t p = j < f ? ember_dlrm_pair(F, j, f) : ember_dlrm_pair(F, f, j);
        acc += g[p] * x[j * D + d];
    }
    return f == 0 ? dense_grad + acc : acc;
}

/* BCE with logits of one example: max(x,0) - x t + log(1 + e^-|x|), which
 * overflows for no finite x. */
EMBER_HD double ember_dlrm_bce_term(double x, double t)
{
    return (x > 0 ? x : 0) - x * t + log1p(exp(-fabs(x)));
}

/* Its gradient, of the mean over @n: (sigmoid(x) - t) / n, the sigmoid's
 * two branches avoiding exp overflow. */
EMBER_HD float ember_dlrm_bce_grad(double x, double t, double n)
{
    double s = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    return (float)((s - t) / n);
}

#endif
