/*
 * tests/engine/test_dlrm: DLRM's dense half (engine/ops/dlrm) against
 * PyTorch's (tests/engine/dlrm_ref.py, argv: its raw output): the same
 * weights and inputs give the logits, the BCE loss, both MLPs' gradients and
 * every table's pooled gradient within 1e-5; the model refuses archs that
 * do not end in D and in 1.
 */
#include "engine/ops/dlrm.h"
#include "engine/ops/loss.h"

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    B = 6,
    DENSE = 13,
    T = 3,
    D = 4
};

static const ember_dlrm_config_t config = {.dense_features = DENSE,
                                           .tables = T,
                                           .dim = D,
                                           .dense_layers = 2,
                                           .dense_sizes = {8, 4},
                                           .over_layers = 2,
                                           .over_sizes = {6, 1}};

static int take(FILE *file, float *into, size_t count)
{
    CHECK(fread(into, sizeof(float), count, file) == count, "the reference is short");
    return 0;
}

static int close_all(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t k = 0; k < n; k++)
        CHECK(fabsf(got[k] - want[k]) <= 1e-5f * (1 + fabsf(want[k])), "%s[%zu] %g, PyTorch %g",
              what, k, (double)got[k], (double)want[k]);
    return 0;
}

/* What the reference holds, in its order. */
typedef struct {
    float dense[B * DENSE], pooled[T][B * D], labels[B];
    float *dense_params, *over_params, logits[B], loss, *dense_grads, *over_grads;
    float grad_pooled[T][B * D];
} reference_t;

static int read_reference(const char *path, size_t n_dense, size_t n_over, reference_t *r)
{
    FILE *file = fopen(path, "rb");
    CHECK(file, "cannot read %s", path);
    r->dense_params = malloc(n_dense * 4);
    r->over_params = malloc(n_over * 4);
    r->dense_grads = malloc(n_dense * 4);
    r->over_grads = malloc(n_over * 4);
    CHECK(r->dense_params && r->over_params && r->dense_grads && r->over_grads, "memory");
    int bad = take(file, r->dense, B * DENSE) || take(file, &r->pooled[0][0], T * B * D) ||
              take(file, r->labels, B) || take(file, r->dense_params, n_dense) ||
              take(file, r->over_params, n_over) || take(file, r->logits, B) ||
              take(file, &r->loss, 1) || take(file, r->dense_grads, n_dense) ||
              take(file, r->over_grads, n_over) || take(file, &r->grad_pooled[0][0], T * B * D);
    fclose(file);
    return bad;
}

static int case_torch(void)
{
    static reference_t ref;
    ember_dlrm_t *model;
    CHECK(test_argc >= 1, "usage: test_dlrm torch REFERENCE");
    CHECK(ember_dlrm_create(&config, 1, &model) == EMBER_OK, "create");
    ember_mlp_t *dense_arch = ember_dlrm_dense_arch(model),
                *over_arch = ember_dlrm_over_arch(model);
    const size_t n_dense = ember_mlp_num_params(dense_arch),
                 n_over = ember_mlp_num_params(over_arch);
    if (read_reference(test_argv[0], n_dense, n_over, &ref))
        return 1;
    memcpy(ember_mlp_params(dense_arch), ref.dense_params, n_dense * 4);
    memcpy(ember_mlp_params(over_arch), ref.over_params, n_over * 4);
    const float *pooled[T] = {ref.pooled[0], ref.pooled[1], ref.pooled[2]};
    static float grad_pooled[T][B * D];
    float *grads[T] = {grad_pooled[0], grad_pooled[1], grad_pooled[2]};
    float logits[B], grad_logits[B], loss;
    CHECK(ember_dlrm_forward(model, ref.dense, pooled, B, logits) == EMBER_OK, "forward");
    CHECK(ember_bce_with_logits(logits, ref.labels, B, &loss, grad_logits) == EMBER_OK, "loss");
    CHECK(ember_dlrm_backward(model, grad_logits, grads) == EMBER_OK, "backward");
    if (close_all("logits", logits, ref.logits, B) || close_all("loss", &loss, &ref.loss, 1) ||
        close_all("dense arch grad", ember_mlp_grads(dense_arch), ref.dense_grads, n_dense) ||
        close_all("over arch grad", ember_mlp_grads(over_arch), ref.over_grads, n_over) ||
        close_all("pooled grad", &grad_pooled[0][0], &ref.grad_pooled[0][0], T * B * D))
        return 1;
    ember_dlrm_destroy(model);
    free(ref.dense_params);
    free(ref.over_params);
    free(ref.dense_grads);
    free(ref.over_grads);
    return 0;
}

static int case_refused(void)
{
    ember_dlrm_config_t bad = config;
    ember_dlrm_t *model = NULL;
    bad.dense_sizes[1] = 5; /* not D */
    CHECK(ember_dlrm_create(&bad, 1, &model) == EMBER_ERR_INVALID_PARAM, "DenseArch ending in 5");
    bad = config;
    bad.over_sizes[1] = 2;
    CHECK(ember_dlrm_create(&bad, 1, &model) == EMBER_ERR_INVALID_PARAM, "OverArch ending in 2");
    bad = config;
    bad.dense_layers = 0;
    CHECK(ember_dlrm_create(&bad, 1, &model) == EMBER_ERR_INVALID_PARAM, "no DenseArch");
    CHECK(ember_dlrm_create(&config, 1, &model) == EMBER_OK, "the config");
    float grad[B];
    CHECK(ember_dlrm_backward(model, grad, NULL) == EMBER_ERR_INVALID_PARAM,
          "a backward before any forward");
    ember_dlrm_destroy(model);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {{"torch", case_torch}, {"refused", case_refused}};
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
