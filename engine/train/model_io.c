/*
 * engine/train/model_io: the dense layers' start, the replay check and the
 * --save file (see model_io.h).
 */
#include "engine/train/model_io.h"

#include "common/rng.h"
#include "engine/io/replay_file.h"
#include "engine/io/safetensors.h"

#include <ember/log.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Losses beyond this many go only to --metrics (as epoch means): their text
 * would outgrow a safetensors header (100 MiB). */
#define SAVED_LOSSES_MAX (4u << 20)

/* The tensors of a saved model: the table and each layer's weight and bias. */
#define SAVED_TENSORS_MAX (1 + 2 * (EMBER_MAX_HIDDEN + 1))

typedef struct {
    ember_st_tensor_t tensors[SAVED_TENSORS_MAX];
    char names[SAVED_TENSORS_MAX][32];
    size_t count;
} saved_tensors_t;

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

size_t ember_model_dense_layout(const ember_msg_train_start_t *spec,
                                ember_dlrm_tensor_t out[EMBER_DLRM_TENSORS_MAX])
{
    size_t n = 0;
    if (spec->config.model == EMBER_MODEL_DLRM) {
        ember_dlrm_tensor_t all[EMBER_DLRM_TENSORS_MAX];
        size_t count = ember_dlrm_tensors(&spec->config, all);
        for (size_t i = 0; i < count; i++) {
            if (all[i].table < 0)
                out[n++] = all[i];
        }
        return n;
    }
    size_t sizes[EMBER_MAX_HIDDEN + 2], layers = ember_dense_sizes(spec, sizes);
    for (size_t l = 0; l < layers; l++) {
        const size_t offset = ember_dense_offset(sizes, l);
        const int64_t o = (int64_t)sizes[l + 1], in = (int64_t)sizes[l];
        out[n] = (ember_dlrm_tensor_t){.ndim = 2, .shape = {o, in}, .table = -1, .offset = offset};
        out[n + 1] = (ember_dlrm_tensor_t){
                .ndim = 1, .shape = {o}, .table = -1, .offset = offset + (size_t)(o * in)};
        dense_names(layers, l, out[n].name, out[n + 1].name, EMBER_DLRM_NAME_MAX);
        n += 2;
    }
    return n;
}

/* The losses as the "losses" metadata: comma-separated, step-major. */
static char *losses_text(const float *losses, size_t count)
{
    char *text = malloc(count * 24 + 1), *p = text; /* "%.9g," is at most 16 */
    if (!text)
        return NULL;
    *p = '\0';
    for (size_t i = 0; i < count; i++)
        p += sprintf(p, "%s%.9g", i ? "," : "", (double)losses[i]);
    return text;
}

static void saved_add(saved_tensors_t *saved, size_t ndim, int64_t d0, int64_t d1,
                      const float *data)
{
    ember_st_tensor_t *tensor = &saved->tensors[saved->count];
    *tensor = (ember_st_tensor_t){.name = saved->names[saved->count],
                                  .dtype = EMBER_DTYPE_F32,
                                  .ndim = ndim,
                                  .shape = {d0, d1},
                                  .data = data};
    saved->count++;
}

/* The table as "emb.weight", then each Linear's weight and bias. */
static void saved_fill(saved_tensors_t *saved, const ember_msg_train_start_t *spec,
                       const ember_model_result_t *result)
{
    size_t sizes[EMBER_MAX_HIDDEN + 2], layers = ember_dense_sizes(spec, sizes);

    saved->count = 0;
    snprintf(saved->names[0], sizeof(saved->names[0]), "emb.weight");
    saved_add(saved, 2, spec->config.rows, spec->config.dim, result->table);
    for (size_t l = 0; l < layers; l++) {
        const float *w = result->params + ember_dense_offset(sizes, l);
        int64_t out = (int64_t)sizes[l + 1], in = (int64_t)sizes[l];
        dense_names(layers, l, saved->names[saved->count], saved->names[saved->count + 1],
                    sizeof(saved->names[0]));
        saved_add(saved, 2, out, in, w);
        saved_add(saved, 1, out, 0, w + sizes[l + 1] * sizes[l]);
    }
}

ember_status_t ember_model_write(const ember_train_job_t *job, const ember_st_tensor_t *tensors,
                                 size_t ntensors, const float *losses, uint64_t steps)
{
    size_t count = (size_t)steps * (size_t)job->trainers;
    char shape[64], *text = count <= SAVED_LOSSES_MAX ? losses_text(losses, count) : NULL;

    if (count <= SAVED_LOSSES_MAX && !text)
        return EMBER_ERR_NO_MEMORY;
    if (!text)
        ember_warn("master",
                   "%s: %zu losses are too many for its metadata (at most %u): --metrics has "
                   "the epochs' means",
                   job->save_path, count, SAVED_LOSSES_MAX);
    snprintf(shape, sizeof(shape), "%llu,%d", (unsigned long long)steps, job->trainers);
    ember_st_meta_t meta[] = {
            {"producer", "ember-train"}, {"losses_shape", shape}, {"losses", text}};
    ember_status_t status = ember_st_write(job->save_path, tensors, ntensors, meta, text ? 3 : 1);
    if (status != EMBER_OK)
        ember_error("master", "cannot write %s: %s", job->save_path, ember_status_string(status));
    else
        printf("saved %s\n", job->save_path);
    free(text);
    return status;
}

ember_status_t ember_model_save(const ember_train_job_t *job, const ember_msg_train_start_t *spec,
                                const ember_model_result_t *result)
{
    saved_tensors_t saved;
    saved_fill(&saved, spec, result);
    return ember_model_write(job, saved.tensors, saved.count, result->losses, result->steps);
}

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
static void replay_compare(const ember_train_job_t *job, ember_st_file_t *file, const expected_t *e,
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
    line->beyond |= !(worst <= job->replay_tolerance);
    snprintf(text, sizeof(text), "%s max |diff| %.2g (%zu values)", e->name, worst, e->count);
    line_add(line, text);
    free(want);
}

ember_status_t ember_model_check_replay(const ember_train_job_t *job,
                                        const ember_model_result_t *result)
{
    size_t steps = (size_t)result->steps, nweight = (size_t)job->train.classes * job->train.dim;
    const expected_t expected[4] = {
            {"loss", result->losses, steps * job->trainers, 2, {(int64_t)steps, job->trainers}},
            {"emb.weight",
             result->table,
             (size_t)job->train.rows * job->train.dim,
             2,
             {job->train.rows, job->train.dim}},
            {"fc.weight", result->params, nweight, 2, {job->train.classes, job->train.dim}},
            {"fc.bias", result->params + nweight, job->train.classes, 1, {job->train.classes, 0}},
    };
    replay_line_t line = {.used = 0};
    ember_st_file_t *file;
    char err[512];

    if (ember_st_open(job->replay_path, &file, err, sizeof(err)) != EMBER_OK) {
        ember_error("master", "replay check: %s", err);
        return EMBER_ERR_IO;
    }
    for (int k = 0; k < 4; k++)
        replay_compare(job, file, &expected[k], &line);
    ember_st_close(file);
    if (!line.checked) {
        printf("replay: %s holds no expected values; nothing was checked\n", job->replay_path);
        return EMBER_OK;
    }
    printf("replay check against %s: %s: %s %g\n", job->replay_path, line.text,
           line.beyond ? "BEYOND the tolerance" : "all within", job->replay_tolerance);
    fflush(stdout);
    return line.beyond ? EMBER_ERR_NUMERIC : EMBER_OK;
}

/* The replay file's layer and table, at the shapes the job has: the tables
 * are made and the layer sent at these sizes, whatever the file (read again
 * here) says now.  One layer: --hidden is refused with --replay. */
static ember_status_t initial_from_replay(const ember_train_job_t *job, const size_t *sizes,
                                          size_t layers, float *params, float **table_p)
{
    int64_t dim = (int64_t)sizes[0], classes = (int64_t)sizes[layers];
    const int64_t shape_table[2] = {job->train.rows, dim}, shape_weight[2] = {classes, dim};
    const int64_t shape_bias[1] = {classes};
    void *weight = NULL, *bias = NULL, *table = NULL;
    ember_st_file_t *file;
    ember_replay_info_t info;
    char err[1024];
    ember_status_t status = ember_replay_open(job->replay_path, &file, &info, err, sizeof(err));

    if (status == EMBER_OK) {
        status = ember_replay_read(file, job->replay_path, "fc.weight", EMBER_DTYPE_F32, 2,
                                   shape_weight, &weight, err, sizeof(err));
        if (status == EMBER_OK)
            status = ember_replay_read(file, job->replay_path, "fc.bias", EMBER_DTYPE_F32, 1,
                                       shape_bias, &bias, err, sizeof(err));
        if (status == EMBER_OK)
            status = ember_replay_read(file, job->replay_path, "emb.weight", EMBER_DTYPE_F32, 2,
                                       shape_table, &table, err, sizeof(err));
        ember_st_close(file);
    }
    if (status != EMBER_OK) {
        ember_error("master", "%s", err);
    } else {
        size_t nw = (size_t)(classes * dim);
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
static void initial_from_seed(const ember_train_job_t *job, const size_t *sizes, size_t layers,
                              float *params)
{
    ember_rng_t rng;
    ember_rng_seed(&rng, job->train.seed, 0xdeadull);
    for (size_t l = 0; l < layers; l++) {
        float bound = 1.0f / sqrtf((float)sizes[l]);
        float *layer = params + ember_dense_offset(sizes, l);
        for (size_t i = 0; i < sizes[l + 1] * sizes[l] + sizes[l + 1]; i++)
            layer[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0) * bound;
    }
}

ember_status_t ember_model_initial(const ember_train_job_t *job, const size_t *sizes, size_t layers,
                                   float *params, float **table_p)
{
    *table_p = NULL;
    if (job->train.data == EMBER_DATA_REPLAY)
        return initial_from_replay(job, sizes, layers, params, table_p);
    initial_from_seed(job, sizes, layers, params);
    return EMBER_OK;
}

/* Tensor @name of @file, F32 [@d0(, @d1)], copied to @out. */
static ember_status_t init_tensor(const ember_st_file_t *file, const char *path, const char *name,
                                  size_t ndim, int64_t d0, int64_t d1, float *out, char *err,
                                  size_t err_length)
{
    const ember_st_tensor_t *t = ember_st_find(file, name);
    if (!t || t->dtype != EMBER_DTYPE_F32 || t->ndim != ndim || t->shape[0] != d0 ||
        (ndim == 2 && t->shape[1] != d1))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "--init %s: tensor '%s' is %s, this model's is F32 [%lld%s%lld]",
                                 path, name, t ? "of another dtype or shape" : "missing",
                                 (long long)d0, ndim == 2 ? ", " : "",
                                 (long long)(ndim == 2 ? d1 : 0));
    memcpy(out, t->data, t->nbytes);
    return EMBER_OK;
}

ember_status_t ember_model_init_file(const ember_train_job_t *job,
                                     const ember_msg_train_start_t *spec, float *params,
                                     float **table_p, char *err, size_t err_length)
{
    ember_dlrm_tensor_t dense[EMBER_DLRM_TENSORS_MAX];
    size_t count = ember_model_dense_layout(spec, dense);
    const int64_t rows = job->train.rows, dim = job->train.dim;
    ember_st_file_t *file;
    *table_p = NULL;
    EMBER_CHECK(ember_st_open(job->init_path, &file, err, err_length));
    ember_status_t status =
            ember_st_count(file) == count + 1
                    ? EMBER_OK
                    : ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                        "--init %s: %zu tensors, this model has %zu",
                                        job->init_path, ember_st_count(file), count + 1);
    float *table = malloc((size_t)(rows * dim) * sizeof(float) + 4);
    if (status == EMBER_OK && !table)
        status = EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK)
        status = init_tensor(file, job->init_path, "emb.weight", 2, rows, dim, table, err,
                             err_length);
    for (size_t i = 0; status == EMBER_OK && i < count; i++)
        status = init_tensor(file, job->init_path, dense[i].name, dense[i].ndim, dense[i].shape[0],
                             dense[i].shape[1], params + dense[i].offset, err, err_length);
    ember_st_close(file);
    if (status != EMBER_OK)
        free(table);
    else
        *table_p = table;
    return status;
}
