/* engine/train/dlrm_io: DLRM's weights under TorchRec's names (see
 * dlrm_io.h). */
#include "engine/train/dlrm_io.h"

#include "engine/ops/dlrm.h"
#include "engine/train/model_io.h"

#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One MLP's layers as @prefix.I._linear.weight|bias, the last named
 * @last_prefix.weight|bias instead when given (OverArch's final Linear). */
static size_t mlp_tensors(const uint32_t *sizes, uint32_t layers, size_t in, const char *prefix,
                          const char *last_prefix, size_t *offset, ember_dlrm_tensor_t *out)
{
    size_t n = 0;
    for (uint32_t l = 0; l < layers; l++) {
        const int64_t o = sizes[l];
        const int last = last_prefix && l + 1 == layers;
        char base[EMBER_DLRM_NAME_MAX - 16];
        if (last)
            snprintf(base, sizeof(base), "%s", last_prefix);
        else
            snprintf(base, sizeof(base), "%s.%u._linear", prefix, l);
        out[n] = (ember_dlrm_tensor_t){
                .ndim = 2, .shape = {o, (int64_t)in}, .table = -1, .offset = *offset};
        snprintf(out[n++].name, EMBER_DLRM_NAME_MAX, "%s.weight", base);
        *offset += (size_t)o * in;
        out[n] = (ember_dlrm_tensor_t){.ndim = 1, .shape = {o}, .table = -1, .offset = *offset};
        snprintf(out[n++].name, EMBER_DLRM_NAME_MAX, "%s.bias", base);
        *offset += (size_t)o;
        in = (size_t)o;
    }
    return n;
}

size_t ember_dlrm_tensors(const ember_train_config_t *config,
                          ember_dlrm_tensor_t out[EMBER_DLRM_TENSORS_MAX])
{
    const ember_dlrm_spec_t *d = &config->dlrm;
    size_t n = 0, offset = 0;
    for (uint32_t t = 0; t < d->tables; t++) {
        out[n] = (ember_dlrm_tensor_t){
                .ndim = 2, .shape = {d->rows[t], (int64_t)config->dim}, .table = (int)t};
        snprintf(out[n++].name, EMBER_DLRM_NAME_MAX,
                 "sparse_arch.embedding_bag_collection.embedding_bags.t_cat_%u.weight", t);
    }
    n += mlp_tensors(d->dense_sizes, d->dense_layers, EMBER_DLRM_DENSE, "dense_arch.model._mlp",
                     NULL, &offset, out + n);
    n += mlp_tensors(d->over_sizes, d->over_layers, ember_dlrm_over_input(config),
                     "over_arch.model.0._mlp", "over_arch.model.1", &offset, out + n);
    return n;
}

/* Every tensor of the file is one of the model's, F32 of its shape, and
 * every one of the model's is there. */
static ember_status_t init_check(const ember_st_file_t *file, const char *path,
                                 const ember_dlrm_tensor_t *tensors, size_t count, char *err,
                                 size_t err_length)
{
    for (size_t i = 0; i < ember_st_count(file); i++) {
        const ember_st_tensor_t *got = ember_st_tensor_at(file, i);
        size_t k = 0;
        while (k < count && strcmp(tensors[k].name, got->name) != 0)
            k++;
        if (k == count)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "%s: tensor '%s' is not one of this DLRM's", path, got->name);
        const ember_dlrm_tensor_t *want = &tensors[k];
        if (got->dtype != EMBER_DTYPE_F32 || got->ndim != want->ndim ||
            got->shape[0] != want->shape[0] || (want->ndim == 2 && got->shape[1] != want->shape[1]))
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "%s: tensor '%s' is %s of %zu dims [%lld, %lld], this model's "
                                     "is F32 [%lld%s%lld]",
                                     path, got->name, ember_dtype_name(got->dtype), got->ndim,
                                     (long long)got->shape[0],
                                     (long long)(got->ndim > 1 ? got->shape[1] : 0),
                                     (long long)want->shape[0], want->ndim == 2 ? ", " : "",
                                     want->ndim == 2 ? (long long)want->shape[1] : 0LL);
    }
    for (size_t k = 0; k < count; k++) {
        if (!ember_st_find(file, tensors[k].name))
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "%s: tensor '%s' is missing", path, tensors[k].name);
    }
    return EMBER_OK;
}

/* The dense tensors of --init into the flat parameters. */
static ember_status_t init_dense(const ember_st_file_t *file, const ember_dlrm_tensor_t *tensors,
                                 size_t count, float *params)
{
    for (size_t k = 0; k < count; k++) {
        if (tensors[k].table >= 0)
            continue;
        const ember_st_tensor_t *got = ember_st_find(file, tensors[k].name);
        memcpy(params + tensors[k].offset, got->data, got->nbytes);
    }
    return EMBER_OK;
}

void ember_dlrm_shape(const ember_train_config_t *config, ember_dlrm_config_t *shape)
{
    const ember_dlrm_spec_t *d = &config->dlrm;
    *shape = (ember_dlrm_config_t){.dense_features = EMBER_DLRM_DENSE,
                                   .tables = d->tables,
                                   .dim = config->dim,
                                   .dense_layers = d->dense_layers,
                                   .over_layers = d->over_layers};
    for (uint32_t l = 0; l < d->dense_layers; l++)
        shape->dense_sizes[l] = d->dense_sizes[l];
    for (uint32_t l = 0; l < d->over_layers; l++)
        shape->over_sizes[l] = d->over_sizes[l];
}

/* PyTorch's default Linear draw for both MLPs, from the seed. */
static ember_status_t drawn_dense(const ember_train_config_t *config, float *params)
{
    ember_dlrm_config_t shape;
    ember_dlrm_shape(config, &shape);
    ember_dlrm_t *model;
    EMBER_CHECK(ember_dlrm_create(&shape, config->seed, &model));
    ember_mlp_t *dense = ember_dlrm_dense_arch(model), *over = ember_dlrm_over_arch(model);
    size_t first = ember_mlp_num_params(dense);
    memcpy(params, ember_mlp_params(dense), first * sizeof(float));
    memcpy(params + first, ember_mlp_params(over), ember_mlp_num_params(over) * sizeof(float));
    ember_dlrm_destroy(model);
    return EMBER_OK;
}

ember_status_t ember_dlrm_initial(const ember_train_job_t *job, float *params,
                                  ember_st_file_t **init_p, char *err, size_t err_length)
{
    ember_dlrm_tensor_t tensors[EMBER_DLRM_TENSORS_MAX];
    size_t count = ember_dlrm_tensors(&job->train, tensors);
    *init_p = NULL;
    if (!job->init_path) {
        ember_status_t status = drawn_dense(&job->train, params);
        if (status != EMBER_OK)
            return ember_status_text(err, err_length, status, "DLRM's dense layers: %s",
                                     ember_status_string(status));
        return EMBER_OK;
    }
    char why[256];
    ember_st_file_t *file;
    ember_status_t status = ember_st_open(job->init_path, &file, why, sizeof(why));
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "--init %s: %s", job->init_path, why);
    status = init_check(file, job->init_path, tensors, count, err, err_length);
    if (status == EMBER_OK)
        status = init_dense(file, tensors, count, params);
    if (status != EMBER_OK) {
        ember_st_close(file);
        return status;
    }
    *init_p = file;
    return EMBER_OK;
}

ember_status_t ember_dlrm_init_table(const ember_st_file_t *init, const ember_train_job_t *job,
                                     size_t table, float **rows_p, char *err, size_t err_length)
{
    ember_dlrm_tensor_t tensors[EMBER_DLRM_TENSORS_MAX];
    ember_dlrm_tensors(&job->train, tensors);
    ember_status_t status =
            ember_st_read_copy(init, tensors[table].name, EMBER_DTYPE_F32, (void **)rows_p, NULL);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "--init %s: tensor '%s': %s",
                                 job->init_path, tensors[table].name, ember_status_string(status));
    return EMBER_OK;
}

ember_status_t ember_dlrm_save(const ember_train_job_t *job, const float *const *tables,
                               const float *params, const float *losses, uint64_t steps)
{
    ember_dlrm_tensor_t tensors[EMBER_DLRM_TENSORS_MAX];
    ember_st_tensor_t out[EMBER_DLRM_TENSORS_MAX];
    size_t count = ember_dlrm_tensors(&job->train, tensors);
    for (size_t k = 0; k < count; k++) {
        const ember_dlrm_tensor_t *t = &tensors[k];
        out[k] = (ember_st_tensor_t){.name = t->name,
                                     .dtype = EMBER_DTYPE_F32,
                                     .ndim = t->ndim,
                                     .shape = {t->shape[0], t->shape[1]},
                                     .data = t->table >= 0 ? (const void *)tables[t->table]
                                                           : (const void *)(params + t->offset)};
    }
    return ember_model_write(job, out, count, losses, steps);
}
