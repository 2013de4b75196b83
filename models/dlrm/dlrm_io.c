/*
 * models/dlrm/dlrm_io: DLRM's tables and where they go, its weights under
 * the names TorchRec gives them (torchrec.models.dlrm.DLRM's and
 * DLRM_DCN's state_dict), so that a TorchRec model's weights load into
 * ember (--init) and ember's (--save) load into TorchRec with
 * load_state_dict(strict=True):
 *   sparse_arch.embedding_bag_collection.embedding_bags.TABLE.weight  [N, D]
 *       (Criteo's tables are t_cat_0 .. t_cat_25; a schema names its own)
 *   dense_arch.model._mlp.I._linear.weight [out, in], .bias [out]
 *   inter_arch.crossnet.W_kernels.L [n, r], V_kernels.L [r, n], bias.L [n]
 *       (DLRM_DCN only; n = (K + 1) D)
 *   over_arch.model.0._mlp.I._linear.weight|bias   every OverArch layer but the last
 *   over_arch.model.1.weight|bias                   the last ([1, in], [1])
 * and where its dense layers start: PyTorch's default Linear draw, and
 * TorchRec's for the cross layers (xavier_normal_ kernels, zero biases).
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
    uint8_t placed[EMBER_SCHEMA_SPARSE_MAX] = {0};
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

/* The schema's tables (Criteo's: one a categorical feature), drawn
 * uniform(-sqrt(1/N), sqrt(1/N)) on the PS (TorchRec's default), row-wise
 * over every PS or placed whole; dynamic where the schema says
 * kind=dynamic (check made every table so under --table-kind dynamic). */
size_t dlrm_tables(const void *config, const ember_train_settings_t *settings,
                   ember_model_table_t *out)
{
    const dlrm_config_t *c = config;
    ember_schema_t *schema = NULL;
    char err[256];
    if (dlrm_schema(c, &schema, err, sizeof(err)) != EMBER_OK)
        return 0; /* checked when the flags or the description were read */
    for (uint32_t f = 0; f < c->num_sparse; f++) {
        ember_schema_sparse_t info;
        ember_schema_sparse(schema, f, &info);
        const uint32_t t = info.table_index;
        out[t] = (ember_model_table_t){.rows = info.rows,
                                       .dim = c->dim,
                                       .init = EMBER_TABLE_INIT_UNIFORM,
                                       .seed = settings->seed + t,
                                       .sharding = EMBER_SHARD_ROW_WISE,
                                       .num_shards = (uint32_t)settings->num_ps,
                                       .kind = ember_schema_dynamic(schema, f) ? EMBER_TABLE_DYNAMIC
                                                                               : EMBER_TABLE_FIXED};
        snprintf(out[t].name, sizeof(out[t].name), "%s", info.table);
    }
    ember_schema_free(schema);
    if (c->sharding == EMBER_SHARD_TABLE_WISE)
        place_whole_tables(out, c->num_tables, (uint32_t)settings->num_ps);
    return c->num_tables;
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

/* The cross layers' kernels and biases, TorchRec's state_dict order. */
static size_t cross_tensors(const dlrm_config_t *c, size_t *offset, ember_model_tensor_t *out)
{
    static const char *const kinds[] = {"W_kernels", "V_kernels", "bias"};
    const int64_t n_in = ((int64_t)c->num_sparse + 1) * c->dim, r = c->dcn_rank;
    const int64_t shapes[3][2] = {{n_in, r}, {r, n_in}, {n_in, 0}};
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        for (uint32_t l = 0; l < c->dcn_layers; l++) {
            out[n] = (ember_model_tensor_t){.ndim = k == 2 ? 1 : 2,
                                            .shape = {shapes[k][0], shapes[k][1]},
                                            .table = -1,
                                            .offset = *offset};
            snprintf(out[n++].name, EMBER_MODEL_NAME_MAX, "inter_arch.crossnet.%s.%u", kinds[k], l);
            *offset += (size_t)(k == 2 ? n_in : n_in * r);
        }
    }
    return n;
}

size_t dlrm_tensors(const void *config, ember_model_tensor_t *out)
{
    const dlrm_config_t *c = config;
    /* the tables' names and rows, whatever the placement */
    const ember_train_settings_t one_ps = {.num_ps = 1};
    ember_model_table_t tables[EMBER_MODEL_TABLES_MAX];
    size_t dense[DLRM_MLP_MAX + 1], over[DLRM_MLP_MAX + 1], n = 0, offset = 0;
    const size_t ntables = dlrm_tables(config, &one_ps, tables);
    for (size_t t = 0; t < ntables; t++) {
        out[n] = (ember_model_tensor_t){
                .ndim = 2, .shape = {tables[t].rows, c->dim}, .table = (int)t};
        snprintf(out[n++].name, EMBER_MODEL_NAME_MAX,
                 "sparse_arch.embedding_bag_collection.embedding_bags.%.63s.weight",
                 tables[t].name);
    }
    dlrm_widths(c, dense, over);
    n += mlp_tensors(dense, c->dense_layers, "dense_arch.model._mlp", NULL, &offset, out + n);
    if (c->interaction == DLRM_INTERACTION_DCN)
        n += cross_tensors(c, &offset, out + n);
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

/* TorchRec's cross layers: each kernel xavier_normal_ (N(0, 2 / (fan_in +
 * fan_out)), Box-Muller over the generator at @seed), the biases 0. */
static float *draw_cross(const dlrm_config_t *c, uint64_t seed, float *params)
{
    const size_t n = ((size_t)c->num_sparse + 1) * c->dim, r = c->dcn_rank;
    const double std = sqrt(2.0 / (double)(n + r));
    const size_t kernels = 2 * (size_t)c->dcn_layers * n * r;
    ember_rng_t rng = {.state = seed};
    for (size_t i = 0; i < kernels; i++) {
        const double u1 = 1.0 - ember_rng_uniform(&rng), u2 = ember_rng_uniform(&rng);
        params[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    memset(params + kernels, 0, (size_t)c->dcn_layers * n * sizeof(float));
    return params + kernels + (size_t)c->dcn_layers * n;
}

/* DenseArch from the seed, OverArch from the next, the cross layers from
 * the one after; the tables drawn on the PS (--init, a TorchRec
 * state_dict, is the driver's). */
ember_status_t dlrm_initial(const void *config, const ember_train_settings_t *settings,
                            float *params, float **rows, char *err, size_t err_length)
{
    const dlrm_config_t *c = config;
    size_t dense[DLRM_MLP_MAX + 1], over[DLRM_MLP_MAX + 1];
    (void)err;
    (void)err_length;
    dlrm_widths(c, dense, over);
    float *rest = draw_mlp(dense, c->dense_layers, settings->seed, params);
    if (c->interaction == DLRM_INTERACTION_DCN)
        rest = draw_cross(c, settings->seed + 2, rest);
    draw_mlp(over, c->over_layers, settings->seed + 1, rest);
    for (size_t t = 0; t < c->num_tables; t++)
        rows[t] = NULL;
    return EMBER_OK;
}
