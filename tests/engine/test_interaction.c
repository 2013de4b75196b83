/*
 * tests/engine/test_interaction: DLRM's InteractionArch (engine/ops/interaction).
 *
 *   order   F = 4 by hand: the dense vector, then the dots in
 *           torch.triu_indices order (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
 *   fd      the backward against central finite differences (double) of
 *           sum(w * out), every input element, F = 5, D = 3
 *   torch   PyTorch's own (tests/engine/interaction_ref.py, argv: its raw
 *           output): F = 27, D = 8, B = 5, output and gradients within 1e-5
 *   loops   the kernels (blocked, vectorised, cloned per CPU) against plain
 *           loops summing in the same order, bit for bit, on shapes with
 *           partial blocks and rows: F 27 D 16 B 37, F 5 D 13 B 16, F 2 D 1 B 3
 *   refused a zero size or a NULL buffer
 */
#include "engine/ops/interaction.h"

#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int case_order(void)
{
    enum {
        F = 4,
        D = 2,
        B = 1
    };
    const float v0[D] = {1, 2}, v1[D] = {3, 4}, v2[D] = {5, 6}, v3[D] = {7, 8};
    const float *vectors[F] = {v0, v1, v2, v3};
    const ember_interaction_shape_t shape = {.features = F, .dim = D, .batch = B};
    float out[D + 6];
    CHECK(ember_interaction_width(&shape) == D + 6, "width %zu", ember_interaction_width(&shape));
    CHECK(ember_interaction_forward(&shape, vectors, out) == EMBER_OK, "forward");
    const float want[D + 6] = {1, 2, 11, 17, 23, 39, 53, 83};
    for (size_t k = 0; k < D + 6; k++)
        CHECK(out[k] == want[k], "out[%zu] %g, want %g", k, (double)out[k], (double)want[k]);
    return 0;
}

/* sum(w * forward(vectors)) in double, the finite differences' objective. */
static double objective(const ember_interaction_shape_t *shape, const float *const *vectors,
                        const float *w)
{
    const size_t width = ember_interaction_width(shape);
    float *out = malloc(shape->batch * width * sizeof(float));
    double sum = 0;
    if (!out || ember_interaction_forward(shape, vectors, out) != EMBER_OK)
        return NAN;
    for (size_t k = 0; k < shape->batch * width; k++)
        sum += (double)w[k] * out[k];
    free(out);
    return sum;
}

static int case_fd(void)
{
    enum {
        F = 5,
        D = 3,
        B = 2
    };
    const ember_interaction_shape_t shape = {.features = F, .dim = D, .batch = B};
    const size_t width = ember_interaction_width(&shape);
    static float store[F][B * D], grads_store[F][B * D], w[B * (D + F * (F - 1) / 2)];
    const float *vectors[F];
    float *grads[F];
    uint64_t rng = 5;
    for (size_t f = 0; f < F; f++) {
        vectors[f] = store[f];
        grads[f] = grads_store[f];
        for (size_t k = 0; k < B * D; k++)
            store[f][k] = (float)test_uniform(&rng, -1, 1);
    }
    for (size_t k = 0; k < B * width; k++)
        w[k] = (float)test_uniform(&rng, -1, 1);
    CHECK(ember_interaction_backward(&shape, vectors, w, grads) == EMBER_OK, "backward");
    const float h = 1e-2f;
    for (size_t f = 0; f < F; f++)
        for (size_t k = 0; k < B * D; k++) {
            float keep = store[f][k];
            store[f][k] = keep + h;
            double up = objective(&shape, vectors, w);
            store[f][k] = keep - h;
            double down = objective(&shape, vectors, w);
            store[f][k] = keep;
            double fd = (up - down) / (2.0 * h);
            CHECK(fabs(fd - grads[f][k]) <= 1e-3 * (1 + fabs(fd)),
                  "grad of vector %zu element %zu: %g, finite difference %g", f, k,
                  (double)grads[f][k], fd);
        }
    return 0;
}

static int read_floats(FILE *file, float *into, size_t count)
{
    CHECK(fread(into, sizeof(float), count, file) == count, "the reference is short");
    return 0;
}

static int case_torch(void)
{
    enum {
        F = 27,
        D = 8,
        B = 5,
        W = D + F * (F - 1) / 2
    };
    const ember_interaction_shape_t shape = {.features = F, .dim = D, .batch = B};
    static float store[F][B * D], grad_out[B * W], want_out[B * W], want_grads[F][B * D];
    static float out[B * W], grads_store[F][B * D];
    const float *vectors[F];
    float *grads[F];
    CHECK(test_argc >= 1, "usage: test_interaction torch REFERENCE");
    FILE *file = fopen(test_argv[0], "rb");
    CHECK(file, "cannot read %s", test_argv[0]);
    if (read_floats(file, &store[0][0], F * B * D) || read_floats(file, grad_out, B * W) ||
        read_floats(file, want_out, B * W) || read_floats(file, &want_grads[0][0], F * B * D))
        return 1;
    fclose(file);
    for (size_t f = 0; f < F; f++) {
        vectors[f] = store[f];
        grads[f] = grads_store[f];
    }
    CHECK(ember_interaction_forward(&shape, vectors, out) == EMBER_OK, "forward");
    for (size_t k = 0; k < B * W; k++)
        CHECK(fabsf(out[k] - want_out[k]) <= 1e-5f * (1 + fabsf(want_out[k])),
              "out[%zu] %g, PyTorch %g", k, (double)out[k], (double)want_out[k]);
    CHECK(ember_interaction_backward(&shape, vectors, grad_out, grads) == EMBER_OK, "backward");
    for (size_t f = 0; f < F; f++)
        for (size_t k = 0; k < B * D; k++)
            CHECK(fabsf(grads[f][k] - want_grads[f][k]) <= 1e-5f * (1 + fabsf(want_grads[f][k])),
                  "grad %zu[%zu] %g, PyTorch %g", f, k, (double)grads[f][k],
                  (double)want_grads[f][k]);
    return 0;
}

/* Uniform in [-1, 1) from a 32-bit state. */
static float draw(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f;
}

/* One shape: the forward and the backward against plain loops, bit for bit. */
static int loops_match(size_t F, size_t D, size_t B)
{
    const ember_interaction_shape_t shape = {.features = F, .dim = D, .batch = B};
    const size_t W = ember_interaction_width(&shape);
    float *data = calloc(3 * F * B * D + 3 * B * W, sizeof(float));
    float *vectors[32], *grads[32], *want_grads[32];
    float *out = data + 3 * F * B * D, *want = out + B * W, *grad_out = want + B * W;
    uint32_t state = (uint32_t)(F * 1000 + D * 10 + B);
    CHECK(data && F <= 32, "memory");
    for (size_t f = 0; f < F; f++) {
        vectors[f] = data + f * B * D;
        grads[f] = vectors[f] + F * B * D;
        want_grads[f] = grads[f] + F * B * D;
        for (size_t i = 0; i < B * D; i++)
            vectors[f][i] = draw(&state);
    }
    for (size_t i = 0; i < B * W; i++)
        grad_out[i] = draw(&state);
    for (size_t b = 0; b < B; b++) { /* each sum over d, then over j, in increasing order */
        size_t p = D;
        memcpy(want + b * W, vectors[0] + b * D, D * sizeof(float));
        for (size_t i = 0; i < F; i++)
            for (size_t j = i + 1; j < F; j++, p++) {
                float dot = 0.0f;
                for (size_t d = 0; d < D; d++)
                    dot += vectors[i][b * D + d] * vectors[j][b * D + d];
                want[b * W + p] = dot;
            }
        for (size_t f = 0; f < F; f++)
            for (size_t d = 0; d < D; d++) {
                float sum = 0.0f;
                for (size_t j = 0; j < F; j++) {
                    if (j == f)
                        continue;
                    const size_t lo = f < j ? f : j, hi = f < j ? j : f;
                    const size_t pair = lo * F - lo * (lo + 1) / 2 + (hi - lo - 1);
                    sum += grad_out[b * W + D + pair] * vectors[j][b * D + d];
                }
                want_grads[f][b * D + d] = f == 0 ? grad_out[b * W + d] + sum : sum;
            }
    }
    CHECK(ember_interaction_forward(&shape, (const float *const *)vectors, out) == EMBER_OK,
          "forward");
    CHECK(ember_interaction_backward(&shape, (const float *const *)vectors, grad_out, grads) ==
                  EMBER_OK,
          "backward");
    CHECK(memcmp(out, want, B * W * sizeof(float)) == 0, "F %zu D %zu B %zu: forward differs", F, D,
          B);
    for (size_t f = 0; f < F; f++)
        CHECK(memcmp(grads[f], want_grads[f], B * D * sizeof(float)) == 0,
              "F %zu D %zu B %zu: feature %zu's gradient differs", F, D, B, f);
    free(data);
    return 0;
}

static int case_loops(void)
{
    if (loops_match(27, 16, 37) || loops_match(5, 13, 16) || loops_match(2, 1, 3))
        return 1;
    return 0;
}

static int case_refused(void)
{
    const float v[2] = {1, 2};
    const float *vectors[1] = {v}, *none[1] = {NULL};
    float out[4], *grads[1] = {out};
    ember_interaction_shape_t shape = {.features = 1, .dim = 2, .batch = 1};
    CHECK(ember_interaction_forward(&shape, vectors, out) == EMBER_OK, "one feature");
    CHECK(ember_interaction_forward(&shape, none, out) == EMBER_ERR_INVALID_PARAM, "NULL vector");
    CHECK(ember_interaction_backward(&shape, vectors, v, NULL) == EMBER_ERR_INVALID_PARAM,
          "NULL grads");
    CHECK(ember_interaction_backward(&shape, vectors, v, grads) == EMBER_OK, "backward");
    shape.dim = 0;
    CHECK(ember_interaction_forward(&shape, vectors, out) == EMBER_ERR_INVALID_PARAM, "dim 0");
    shape.dim = 2;
    shape.features = 0;
    CHECK(ember_interaction_forward(&shape, vectors, out) == EMBER_ERR_INVALID_PARAM, "F 0");
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"order", case_order}, {"fd", case_fd},           {"torch", case_torch},
            {"loops", case_loops}, {"refused", case_refused},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
