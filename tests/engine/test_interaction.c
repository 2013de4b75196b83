/*
 * tests/engine/test_interaction: DLRM's InteractionArch (engine/ops/interaction).
 *
 *   order   F = 4 by hand: the dense vector, then the dots in
 *           torch.triu_indices order (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
 *   fd      the backward against central finite differences (double) of
 *           sum(w * out), every input element, F = 5, D = 3
 *   torch   PyTorch's own (tests/engine/interaction_ref.py, argv: its raw
 *           output): F = 27, D = 8, B = 5, output and gradients within 1e-5
 *   refused a zero size or a NULL buffer
 */
#include "engine/ops/interaction.h"

#include "test_util.h"

#include <math.h>
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
            {"order", case_order},
            {"fd", case_fd},
            {"torch", case_torch},
            {"refused", case_refused},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
