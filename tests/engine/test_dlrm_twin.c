/*
 * tests/engine/test_dlrm_twin: the CUDA DLRM kernels' logic on the CPU.
 * cuda/cuda_dlrm_twin.c runs each kernel's work as the kernel partitions
 * it, through the per-element helpers the kernels call
 * (engine/ops/dlrm_math.h); here it meets the host ops, so a wrong index,
 * pair order or gradient term in the kernels' math fails on a machine
 * without a GPU.  The GPU itself is checked by tests/cuda (cuda.ops.dlrm_*).
 *
 *   pairs       ember_dlrm_pair / pair_of against the triu_indices order
 *               for F = 1..40
 *   forward     the twin's interaction forward against
 *               engine/ops/interaction.c, several shapes (F 1, 2, 27;
 *               D 1, 4, 16; batches not a multiple of its 8-wide blocks)
 *   backward    the same for the backward, every gradient
 *   bce         the twin's loss (the kernel's summation order) within
 *               1e-12 relative of engine/ops/loss.c's, its gradient equal
 *   device_cpu  the "cpu" device's interaction and BCE slots, bit for bit
 *               the host ops (what --device cpu runs)
 */
#include "cuda/cuda_dlrm_twin.h"
#include "engine/ops/dlrm_math.h"
#include "engine/ops/interaction.h"
#include "engine/ops/loss.h"

#include "test_util.h"

#include <ember/device.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t tables, dim, batch;
} shape_t;

static const shape_t shapes[] = {{0, 4, 3}, {1, 1, 9}, {26, 4, 13}, {26, 16, 17}, {5, 3, 8}};

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static float uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *randoms(size_t n)
{
    float *p = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; p && i < n; i++)
        p[i] = uniform();
    return p;
}

static size_t width_of(const shape_t *s)
{
    const size_t F = s->tables + 1;
    return s->dim + F * (F - 1) / 2;
}

/* The host op's vectors: the dense one, then each table's in @pooled. */
static void vectors_of(const shape_t *s, const float *dense, const float *pooled,
                       const float **vectors)
{
    vectors[0] = dense;
    for (size_t t = 0; t < s->tables; t++)
        vectors[1 + t] = pooled + t * s->batch * s->dim;
}

/* |got - want| within @tol relative (of 1 + |want|) over @n. */
static int close_all(const char *what, const float *got, const float *want, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        CHECK(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs(want[i])),
              "%s[%zu] %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
    return 0;
}

static int case_pairs(void)
{
    for (size_t F = 1; F <= 40; F++) {
        size_t p = 0;
        for (size_t i = 0; i < F; i++)
            for (size_t j = i + 1; j < F; j++, p++) {
                size_t a, b;
                CHECK(ember_dlrm_pair(F, i, j) == p, "F %zu: pair (%zu,%zu) at %zu, want %zu", F, i,
                      j, ember_dlrm_pair(F, i, j), p);
                ember_dlrm_pair_of(F, p, &a, &b);
                CHECK(a == i && b == j, "F %zu: pair %zu is (%zu,%zu), want (%zu,%zu)", F, p, a, b,
                      i, j);
            }
    }
    return 0;
}

static int forward_one(const shape_t *s)
{
    const size_t values = s->batch * s->dim, out_n = s->batch * width_of(s);
    const float *vectors[64];
    float *dense = randoms(values), *pooled = randoms(s->tables * values);
    float *got = calloc(out_n, sizeof(float)), *want = calloc(out_n, sizeof(float));
    CHECK(dense && pooled && got && want, "memory");
    vectors_of(s, dense, pooled, vectors);
    const ember_interaction_shape_t shape = {
            .features = s->tables + 1, .dim = s->dim, .batch = s->batch};
    CHECK(ember_interaction_forward(&shape, vectors, want) == EMBER_OK, "host forward");
    CHECK(ember_dlrm_twin_inter_forward(dense, pooled, s->tables, s->batch, s->dim, got) ==
                  EMBER_OK,
          "twin forward");
    int rc = close_all("out", got, want, out_n, 1e-6);
    free(dense), free(pooled), free(got), free(want);
    return rc;
}

static int case_forward(void)
{
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        if (forward_one(&shapes[k]) != 0)
            return 1;
    return 0;
}

static int backward_one(const shape_t *s)
{
    const size_t values = s->batch * s->dim, F = s->tables + 1;
    const float *vectors[64];
    float *grads[64];
    float *dense = randoms(values), *pooled = randoms(s->tables * values);
    float *grad_out = randoms(s->batch * width_of(s));
    float *want = calloc(F * values, sizeof(float)), *got = calloc(F * values, sizeof(float));
    CHECK(dense && pooled && grad_out && want && got, "memory");
    vectors_of(s, dense, pooled, vectors);
    for (size_t f = 0; f < F; f++)
        grads[f] = want + f * values;
    const ember_interaction_shape_t shape = {.features = F, .dim = s->dim, .batch = s->batch};
    CHECK(ember_interaction_backward(&shape, vectors, grad_out, grads) == EMBER_OK,
          "host backward");
    CHECK(ember_dlrm_twin_inter_backward(dense, pooled, s->tables, s->batch, s->dim, grad_out, got,
                                         got + values) == EMBER_OK,
          "twin backward");
    int rc = close_all("grad", got, want, F * values, 1e-6);
    free(dense), free(pooled), free(grad_out), free(want), free(got);
    return rc;
}

static int case_backward(void)
{
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        if (backward_one(&shapes[k]) != 0)
            return 1;
    return 0;
}

/* Logits over a wide range (the sigmoid's two branches, log1p's tail) and
 * labels 0 and 1. */
static void bce_inputs(size_t n, float *logits, float *labels)
{
    for (size_t i = 0; i < n; i++) {
        logits[i] = uniform() * 30.0f;
        labels[i] = uniform() > 0 ? 1.0f : 0.0f;
    }
}

static int case_bce(void)
{
    static const size_t sizes[] = {1, 7, 255, 256, 257, 2048, 5000};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        const size_t n = sizes[k];
        float *logits = malloc(n * sizeof(float)), *labels = malloc(n * sizeof(float));
        float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), loss;
        CHECK(logits && labels && want && got, "memory");
        bce_inputs(n, logits, labels);
        CHECK(ember_bce_with_logits(logits, labels, n, &loss, want) == EMBER_OK, "host bce");
        double twin = ember_dlrm_twin_bce(logits, labels, n, got);
        CHECK(fabs(twin - loss) <= 1e-6 * fabs(loss) + 1e-12, "n %zu: loss %.12g, host %.12g", n,
              twin, (double)loss);
        CHECK(memcmp(got, want, n * sizeof(float)) == 0, "n %zu: the gradients differ", n);
        free(logits), free(labels), free(want), free(got);
    }
    return 0;
}

static int device_one(const ember_device_ops_t *ops, ember_device_t *dev, const shape_t *s)
{
    const size_t values = s->batch * s->dim, F = s->tables + 1, out_n = s->batch * width_of(s);
    const float *vectors[64];
    float *grads[64];
    float *dense = randoms(values), *pooled = randoms(s->tables * values);
    float *out = calloc(out_n, sizeof(float)), *want_out = calloc(out_n, sizeof(float));
    float *grad = calloc(F * values, sizeof(float)), *want = calloc(F * values, sizeof(float));
    CHECK(dense && pooled && out && want_out && grad && want, "memory");
    vectors_of(s, dense, pooled, vectors);
    for (size_t f = 0; f < F; f++)
        grads[f] = want + f * values;
    const ember_interaction_shape_t shape = {.features = F, .dim = s->dim, .batch = s->batch};
    CHECK(ember_interaction_forward(&shape, vectors, want_out) == EMBER_OK, "host forward");
    CHECK(ops->interaction_forward(dev, dense, pooled, s->tables, s->batch, s->dim, out) ==
                  EMBER_OK,
          "device forward");
    CHECK(memcmp(out, want_out, out_n * sizeof(float)) == 0, "forward differs");
    CHECK(ember_interaction_backward(&shape, vectors, want_out, grads) == EMBER_OK, "host bwd");
    CHECK(ops->interaction_backward(dev, dense, pooled, s->tables, s->batch, s->dim, want_out, grad,
                                    grad + values) == EMBER_OK,
          "device backward");
    CHECK(memcmp(grad, want, F * values * sizeof(float)) == 0, "backward differs");
    free(dense), free(pooled), free(out), free(want_out), free(grad), free(want);
    return 0;
}

static int case_device_cpu(void)
{
    ember_device_t *dev;
    CHECK(ember_device_open("cpu", 0, &dev) == EMBER_OK, "open cpu");
    const ember_device_ops_t *ops = ember_device_ops(dev);
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        if (device_one(ops, dev, &shapes[k]) != 0)
            return 1;
    float logits[300], labels[300], grad[300], want[300], loss, want_loss;
    bce_inputs(300, logits, labels);
    CHECK(ember_bce_with_logits(logits, labels, 300, &want_loss, want) == EMBER_OK, "host bce");
    CHECK(ops->bce_with_logits(dev, logits, labels, 300, &loss, grad) == EMBER_OK, "device bce");
    CHECK(loss == want_loss && memcmp(grad, want, sizeof(grad)) == 0, "bce differs");
    logits[3] = INFINITY;
    CHECK(ops->bce_with_logits(dev, logits, labels, 300, &loss, grad) == EMBER_ERR_NUMERIC,
          "an infinite logit is not refused");
    ember_device_close(dev);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"pairs", case_pairs}, {"forward", case_forward},       {"backward", case_backward},
            {"bce", case_bce},     {"device_cpu", case_device_cpu},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
