/*
 * models/tutorial/tutorial_io: the tutorial model in files: its tensors
 * under the names of the equivalent PyTorch module (so that
 * load_state_dict(strict=True) takes a --save file), where its dense layers
 * start (a --replay file's, or PyTorch's default initialisation from the
 * seed), and the check of a finished run against the values a --replay
 * file expects.
 */
#include "models/tutorial/tutorial.h"

#include "models/common/mlp.h"
#include "models/tutorial/replay_file.h"

#include <ember/log.h>
#include <ember/rng.h>
#include <ember/safetensors.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Layer @l's parameter names as the equivalent PyTorch module has them: the
 * tutorial's Linear is "fc" (the golden files' names); an MLP is
 * nn.Sequential(Linear, ReLU, ..., Linear) named "dense", whose Linear
 * layers are its modules 0, 2, 4, ... */
static void dense_names(size_t layers, size_t l, char *weight, char *bias, size_t length)
{
    if (layers == 1) {
        snprintf(weight, length, "fc.weight");
        snprintf(bias, length, "fc.bias");
    } else {
        snprintf(weight, length, "dense.%zu.weight", 2 * l);
        snprintf(bias, length, "dense.%zu.bias", 2 * l);
    }
}

/* The table as "emb.weight", then each Linear's weight and bias. */
size_t tutorial_tensors(const void *config, ember_model_tensor_t *out)
{
    const tutorial_config_t *c = config;
    size_t widths[TUTORIAL_HIDDEN_MAX + 2], layers = tutorial_widths(c, widths), n = 1, offset = 0;
    out[0] = (ember_model_tensor_t){.ndim = 2, .shape = {c->rows, c->dim}, .table = 0};
    snprintf(out[0].name, sizeof(out[0].name), "%s.weight", TUTORIAL_TABLE);
    for (size_t l = 0; l < layers; l++) {
        const int64_t o = (int64_t)widths[l + 1], in = (int64_t)widths[l];
        out[n] = (ember_model_tensor_t){.ndim = 2, .shape = {o, in}, .table = -1, .offset = offset};
        out[n + 1] = (ember_model_tensor_t){
                .ndim = 1, .shape = {o}, .table = -1, .offset = offset + (size_t)(o * in)};
        dense_names(layers, l, out[n].name, out[n + 1].name, sizeof(out[n].name));
        offset += (size_t)(o * in + o);
        n += 2;
    }
    return n;
}

/* The replay file's layer and table, at the shapes the job has: the tables
 * are made and the layer sent at these sizes, whatever the file (read again
 * here) says now.  One layer: --hidden is refused with --replay. */
static ember_status_t initial_from_replay(const tutorial_config_t *c, float *params,
                                          float **table_p, char *err, size_t err_length)
{
    const int64_t dim = c->dim, classes = c->classes;
    const int64_t shape_table[2] = {c->rows, dim}, shape_weight[2] = {classes, dim};
    const int64_t shape_bias[1] = {classes};
    void *weight = NULL, *bias = NULL, *table = NULL;
    ember_st_file_t *file;
    ember_replay_info_t info;
    ember_status_t status = ember_replay_open(c->replay, &file, &info, err, err_length);
    if (status == EMBER_OK) {
        status = ember_replay_read(file, c->replay, "fc.weight", EMBER_DTYPE_F32, 2, shape_weight,
                                   &weight, err, err_length);
        if (status == EMBER_OK)
            status = ember_replay_read(file, c->replay, "fc.bias", EMBER_DTYPE_F32, 1, shape_bias,
                                       &bias, err, err_length);
        if (status == EMBER_OK)
            status = ember_replay_read(file, c->replay, "emb.weight", EMBER_DTYPE_F32, 2,
                                       shape_table, &table, err, err_length);
        ember_st_close(file);
    }
    if (status == EMBER_OK) {
        const size_t nw = (size_t)(classes * dim);
        memcpy(params, weight, nw * sizeof(float));
        memcpy(params + nw, bias, (size_t)classes * sizeof(float));
        *table_p = table;
        table = NULL;
    }
    free(weight);
    free(bias);
    free(table);
    return status;
}

/* nn.Linear's default initialisation, layer after layer, from the seed. */
static void initial_from_seed(const tutorial_config_t *c, uint64_t seed, float *params)
{
    size_t widths[TUTORIAL_HIDDEN_MAX + 2], layers = tutorial_widths(c, widths);
    ember_rng_t rng;
    ember_rng_seed(&rng, seed, 0xdeadull);
    float *layer = params;
    for (size_t l = 0; l < layers; l++) {
        const float bound = 1.0f / sqrtf((float)widths[l]);
        const size_t count = widths[l + 1] * widths[l] + widths[l + 1];
        for (size_t i = 0; i < count; i++)
            layer[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0) * bound;
        layer += count;
    }
}

ember_status_t tutorial_initial(const void *config, const ember_train_settings_t *settings,
                                float *params, float **rows, char *err, size_t err_length)
{
    const tutorial_config_t *c = config;
    rows[0] = NULL; /* the PS draw N(0, 1) */
    if (c->data == TUTORIAL_DATA_REPLAY)
        return initial_from_replay(c, params, &rows[0], err, err_length);
    initial_from_seed(c, settings->seed, params);
    return EMBER_OK;
}

/* ---- the replay check ------------------------------------------------------------ */

/* Largest |a - b| over n values (NaN counts as infinite). */
static double max_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

/* One value the replay file may expect: the run's, and the shape it has. */
typedef struct {
    const char *name;
    const float *mine;
    size_t count, ndim;
    int64_t shape[2];
} expected_t;

/* The comparison line being written, and whether anything is beyond. */
typedef struct {
    char text[1024];
    int used, checked, beyond;
} replay_line_t;

static void line_add(replay_line_t *line, const char *text)
{
    if (line->used < (int)sizeof(line->text))
        line->used += snprintf(line->text + line->used, sizeof(line->text) - (size_t)line->used,
                               "%s%s", line->checked ? ", " : "", text);
    line->checked++;
}

/* One expected tensor, if the file has it, against the run's: it must have
 * the shape of what the run made, or it is not compared (and fails). */
static void replay_compare(const tutorial_config_t *c, ember_st_file_t *file, const expected_t *e,
                           replay_line_t *line)
{
    char key[32], err[512];
    float *want = NULL;
    snprintf(key, sizeof(key), "expected.%s", e->name);
    if (!ember_st_find(file, key))
        return;
    if (ember_replay_read(file, NULL, key, EMBER_DTYPE_F32, e->ndim, e->shape, (void **)&want, err,
                          sizeof(err)) != EMBER_OK) {
        line_add(line, err);
        line->beyond = 1;
        return;
    }
    double worst = max_diff(e->mine, want, e->count);
    char text[128];
    line->beyond |= !(worst <= c->replay_tolerance);
    snprintf(text, sizeof(text), "%s max |diff| %.2g (%zu values)", e->name, worst, e->count);
    line_add(line, text);
    free(want);
}

ember_status_t tutorial_verify(const void *config, const ember_train_settings_t *settings,
                               const float *const *rows, const float *params, const float *losses,
                               uint64_t steps)
{
    const tutorial_config_t *c = config;
    if (c->data != TUTORIAL_DATA_REPLAY)
        return EMBER_OK;
    const int trainers = settings->trainers;
    const size_t n = (size_t)steps, nweight = (size_t)c->classes * c->dim;
    const expected_t expected[4] = {
            {"loss", losses, n * trainers, 2, {(int64_t)n, trainers}},
            {"emb.weight", rows[0], (size_t)c->rows * c->dim, 2, {c->rows, c->dim}},
            {"fc.weight", params, nweight, 2, {c->classes, c->dim}},
            {"fc.bias", params + nweight, c->classes, 1, {c->classes, 0}},
    };
    replay_line_t line = {.used = 0};
    ember_st_file_t *file;
    char err[512];
    if (ember_st_open(c->replay, &file, err, sizeof(err)) != EMBER_OK) {
        ember_error("master", "replay check: %s", err);
        return EMBER_ERR_IO;
    }
    for (int k = 0; k < 4; k++)
        replay_compare(c, file, &expected[k], &line);
    ember_st_close(file);
    if (!line.checked) {
        printf("replay: %s holds no expected values; nothing was checked\n", c->replay);
        return EMBER_OK;
    }
    printf("replay check against %s: %s: %s %g\n", c->replay, line.text,
           line.beyond ? "BEYOND the tolerance" : "all within", c->replay_tolerance);
    fflush(stdout);
    return line.beyond ? EMBER_ERR_NUMERIC : EMBER_OK;
}
