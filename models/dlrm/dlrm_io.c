/*
 * models/dlrm/dlrm_io: DLRM's tables and where they go, its weights under
 * the names TorchRec gives them (torchrec.models.dlrm.DLRM's state_dict),
 * so that a TorchRec model's weights load into ember (--init) and ember's
 * (--save) load into TorchRec with load_state_dict(strict=True):
 *   sparse_arch.embedding_bag_collection.embedding_bags.t_cat_F.weight  [N_F, D]
 *   dense_arch.model._mlp.I._linear.weight [out, in], .bias [out]
 *   over_arch.model.0._mlp.I._linear.weight|bias   every OverArch layer but the last
 *   over_arch.model.1.weight|bias                   the last ([1, in], [1])
 * and where its dense layers start: PyTorch's default Linear draw.
 */
#include "models/dlrm/dlrm.h"

#include <ember/rng.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Table-wise: the largest table first (the lower index of equal ones) to
 * the PS with the fewest bytes so far (the lower index of equal ones). */
static void place_whole_tables(ember_model_table_t *tables, size_t count, uint32_t num_ps)
{
    uint64_t load[4096] = {0};
    uint8_t placed[EMBER_CRITEO_SPARSE] = {0};
    const uint32_t P = num_ps > 4096 ? 4096 : num_ps;
    for (size_t n = 0; n < count; n++) {
        size_t pick = count;
        for (size_t t = 0; t < count; t++) {
            if (!placed[t] && (pick == count || tables[t].rows > tables[pick].rows))
                pick = t;
        }
        uint32_t ps = 0;
        for (uint32_t p = 1; p < P; p++) {
            if (load[p] < load[ps])
                ps = p;
        }
        placed[pick] = 1;
        tables[pick].sharding = EMBER_SHARD_TABLE_WISE;
        tables[pick].num_shards = 1;
        tables[pick].first_ps = ps;
        load[ps] += (uint64_t)tables[pick].rows * tables[pick].dim * sizeof(float);
    }
}

/* One table a categorical feature, drawn uniform(-sqrt(1/N), sqrt(1/N)) on
 * the PS (TorchRec's default), row-wise over every PS or placed whole. */
size_t dlrm_tables(const void *config, const ember_train_settings_t *settings,
                   ember_model_table_t *out)
{
    const dlrm_config_t *c = config;
    for (size_t t = 0; t < EMBER_CRITEO_SPARSE; t++) {
        out[t] = (ember_model_table_t){.rows = c->rows[t],
                                       .dim = c->dim,
                                       .init = EMBER_TABLE_INIT_UNIFORM,
                                       .seed = settings->seed + t,
                                       .sharding = EMBER_SHARD_ROW_WISE,
                                       .num_shards = (uint32_t)settings->num_ps};
        snprintf(out[t].name, sizeof(out[t].name), "t_cat_%zu", t);
    }
    if (c->sharding == EMBER_SHARD_TABLE_WISE)
        place_whole_tables(out, EMBER_CRITEO_SPARSE, (uint32_t)settings->num_ps);
    return EMBER_CRITEO_SPARSE;
}

/* One MLP's layers as @prefix.I._linear.weight|bias, the last named
 * @last_prefix.weight|bias instead when given (OverArch's final Linear). */
static size_t mlp_tensors(const size_t *widths, uint32_t layers, const char *prefix,
                          const char *last_prefix, size_t *offset, ember_model_tensor_t *out)
{
    size_t n = 0;
    for (uint32_t l = 0; l < layers; l++) {
        const int64_t o = (int64_t)widths[l + 1], in = (int64_t)widths[l];
        char base[EMBER_MODEL_NAME_MAX - 16];
        if (last_prefix && l + 1 == layers)
            snprintf(base, sizeof(base), "%s", last_prefix);
        else
            snprintf(base, sizeof(base), "%s.%u._linear", prefix, l);
        out[n] =
                (ember_model_tensor_t){.ndim = 2, .shape = {o, in}, .table = -1, .offset = *offset};
        snprintf(out[n++].name, EMBER_MODEL_NAME_MAX, "%s.weight", base);
        *offset += (size_t)(o * in);
        out[n] = (ember_model_tensor_t){.ndim = 1, .shape = {o}, .table = -1, .offset = *offset};
        snprintf(out[n++].name, EMBER_MODEL_NAME_MAX, "%s.bias", base);
        *offset += (size_t)o;
    }
    return n;
}

size_t dlrm_tensors(const void *config, ember_model_tensor_t *out)
{
    const dlrm_config_t *c = config;
    size_t dense[DLRM_MLP_MAX + 1], over[DLRM_MLP_MAX + 1], n = 0, offset = 0;
    for (uint32_t t = 0; t < EMBER_CRITEO_SPARSE; t++) {
        out[n] = (ember_model_tensor_t){.ndim = 2, .shape = {c->rows[t], c->dim}, .table = (int)t};
        snprintf(out[n++].name, EMBER_MODEL_NAME_MAX,
                 "sparse_arch.embedding_bag_collection.embedding_bags.t_cat_%u.weight", t);
    }
    dlrm_widths(c, dense, over);
    n += mlp_tensors(dense, c->dense_layers, "dense_arch.model._mlp", NULL, &offset, out + n);
    n += mlp_tensors(over, c->over_layers, "over_arch.model.0._mlp", "over_arch.model.1", &offset,
                     out + n);
    return n;
}

/* PyTorch's default Linear draw, U(-1/sqrt(in), 1/sqrt(in)) for weights and
 * biases alike, layer after layer, from the generator at @seed (a plain
 * splitmix64 stream: state @seed, as engine/ops/dense.c's MLP drew). */
static float *draw_mlp(const size_t *widths, uint32_t layers, uint64_t seed, float *params)
{
    ember_rng_t rng = {.state = seed};
    for (uint32_t l = 0; l < layers; l++) {
        const float bound = 1.0f / sqrtf((float)widths[l]);
        const size_t count = widths[l + 1] * widths[l] + widths[l + 1];
        for (size_t i = 0; i < count; i++)
            params[i] = (float)((2.0 * ember_rng_uniform(&rng) - 1.0) * bound);
        params += count;
    }
    return params;
}

/* DenseArch from the seed, OverArch from the next; the tables drawn on the
 * PS (--init, a TorchRec state_dict, is the driver's). */
ember_status_t dlrm_initial(const void *config, const ember_train_settings_t *settings,
                            float *params, float **rows, char *err, size_t err_length)
{
    const dlrm_config_t *c = config;
    size_t dense[DLRM_MLP_MAX + 1], over[DLRM_MLP_MAX + 1];
    (void)err;
    (void)err_length;
    dlrm_widths(c, dense, over);
    float *rest = draw_mlp(dense, c->dense_layers, settings->seed, params);
    draw_mlp(over, c->over_layers, settings->seed + 1, rest);
    for (size_t t = 0; t < EMBER_CRITEO_SPARSE; t++)
        rows[t] = NULL;
    return EMBER_OK;
}
