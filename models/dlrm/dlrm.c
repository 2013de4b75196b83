/*
 * models/dlrm/dlrm: DLRM's hooks (models/model.h): its flags (TorchRec
 * dlrm_main's names and defaults), its configuration as text, and the line
 * that says what is trained.
 */
#include "models/dlrm/dlrm.h"

#include "models/common/mlp.h"

#include <ember/log.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dlrm_widths(const dlrm_config_t *c, size_t dense[DLRM_MLP_MAX + 1],
                 size_t over[DLRM_MLP_MAX + 1])
{
    dense[0] = c->num_dense;
    for (uint32_t l = 0; l < c->dense_layers && l < DLRM_MLP_MAX; l++)
        dense[l + 1] = c->dense_sizes[l];
    over[0] = dlrm_interaction_width(c);
    for (uint32_t l = 0; l < c->over_layers && l < DLRM_MLP_MAX; l++)
        over[l + 1] = c->over_sizes[l];
}

size_t dlrm_interaction_width(const dlrm_config_t *c)
{
    const size_t features = (size_t)c->num_sparse + 1;
    if (c->interaction == DLRM_INTERACTION_DCN)
        return features * c->dim;
    return c->dim + features * (features - 1) / 2;
}

size_t dlrm_cross_params(const dlrm_config_t *c)
{
    const size_t n = ((size_t)c->num_sparse + 1) * c->dim;
    if (c->interaction != DLRM_INTERACTION_DCN)
        return 0;
    return EMBER_CROSSNET_PARAMS(n, (size_t)c->dcn_rank, (size_t)c->dcn_layers);
}

size_t dlrm_params(const void *config)
{
    const dlrm_config_t *c = config;
    size_t dense[DLRM_MLP_MAX + 1], over[DLRM_MLP_MAX + 1];
    if (c->dense_layers > DLRM_MLP_MAX || c->over_layers > DLRM_MLP_MAX || c->dim == 0 ||
        c->dim > 65536 || c->num_sparse > EMBER_SCHEMA_SPARSE_MAX ||
        c->num_dense > EMBER_SCHEMA_DENSE_MAX || c->dcn_layers > DLRM_MLP_MAX ||
        c->dcn_rank > 65536)
        return 0;
    dlrm_widths(c, dense, over);
    size_t a = model_mlp_params(dense, c->dense_layers), b = model_mlp_params(over, c->over_layers);
    return a && b ? a + dlrm_cross_params(c) + b : 0;
}

ember_status_t dlrm_schema(const dlrm_config_t *c, ember_schema_t **schema_p, char *err,
                           size_t err_length)
{
    return ember_schema_parse(c->schema, "the job's schema", schema_p, err, err_length);
}

ember_status_t dlrm_set_schema(dlrm_config_t *c, const ember_schema_t *schema, char *err,
                               size_t err_length)
{
    const size_t length = ember_schema_text(schema, c->schema, sizeof(c->schema));
    if (length >= sizeof(c->schema))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "the schema's text is %zu bytes, at most %zu", length,
                                 sizeof(c->schema) - 1);
    c->num_dense = ember_schema_num_dense(schema);
    c->num_sparse = ember_schema_num_sparse(schema);
    c->num_tables = ember_schema_num_tables(schema);
    return EMBER_OK;
}

/* ---- flags ----------------------------------------------------------------------- */

/* An integer in [min, max], at its full width (as every flag's). */
static int parse_i64(const char *text, int64_t min, int64_t max, int64_t *value_p)
{
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 0);
    if (errno || end == text || *end || value < min || value > max)
        return 0;
    *value_p = value;
    return 1;
}

/* "W1,W2,...": up to @max integers in [1, @top] into @out. */
static int parse_list(const char *value, int64_t top, size_t max, int64_t *out, size_t *count_p)
{
    char *copy = strdup(value), *save = NULL;
    size_t n = 0;
    int ok = copy != NULL && *value && value[strlen(value) - 1] != ',' && !strstr(value, ",,");
    for (char *w = ok ? strtok_r(copy, ",", &save) : NULL; ok && w; w = strtok_r(NULL, ",", &save))
        ok = n < max && parse_i64(w, 1, top, &out[n++]);
    free(copy);
    *count_p = n;
    return ok && n > 0;
}

static ember_status_t invalid(char *err, size_t err_length)
{
    return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s", "");
}

static ember_status_t parse_rows_all(const char *flag, const char *value, void *target, char *err,
                                     size_t err_length)
{
    dlrm_config_t *c = target;
    int64_t rows;
    (void)flag;
    if (!parse_i64(value, 1, INT64_MAX / 65536, &rows))
        return invalid(err, err_length);
    for (int t = 0; t < EMBER_CRITEO_SPARSE; t++)
        c->rows[t] = rows;
    return EMBER_OK;
}

static ember_status_t parse_rows_each(const char *flag, const char *value, void *target, char *err,
                                      size_t err_length)
{
    dlrm_config_t *c = target;
    int64_t rows[EMBER_CRITEO_SPARSE + 1];
    size_t n;
    if (!parse_list(value, INT64_MAX / 65536, EMBER_CRITEO_SPARSE + 1, rows, &n))
        return invalid(err, err_length);
    if (n != EMBER_CRITEO_SPARSE)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: %zu tables given; Criteo has %d categorical features, one "
                                 "table each",
                                 flag, n, EMBER_CRITEO_SPARSE);
    memcpy(c->rows, rows, sizeof(c->rows));
    return EMBER_OK;
}

/* --dense-arch-layer-sizes, --over-arch-layer-sizes. */
static ember_status_t parse_widths(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length)
{
    dlrm_config_t *c = target;
    int64_t widths[DLRM_MLP_MAX + 1];
    size_t n;
    if (!parse_list(value, 65536, DLRM_MLP_MAX + 1, widths, &n) || n > DLRM_MLP_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s '%s': 1 to %d widths of 1 to 65536 are wanted", flag, value,
                                 DLRM_MLP_MAX);
    const int dense = strcmp(flag, "--dense-arch-layer-sizes") == 0;
    uint32_t *sizes = dense ? c->dense_sizes : c->over_sizes;
    for (size_t l = 0; l < n; l++)
        sizes[l] = (uint32_t)widths[l];
    *(dense ? &c->dense_layers : &c->over_layers) = (uint32_t)n;
    return EMBER_OK;
}

/* The files of a source after its kind's word, or NULL when it is none
 * of DLRM's. */
static const char *source_paths(const char *value)
{
    return strncmp(value, "criteo:", 7) == 0        ? value + 7
           : strncmp(value, "criteo-npy:", 11) == 0 ? value + 11
           : strncmp(value, "text:", 5) == 0        ? value + 5
                                                    : NULL;
}

/* A source, "criteo:PATH[,PATH...]", "criteo-npy:PREFIX[,...]" or
 * "text:PATH[,...]", into @dst (its files are checked when a trainer opens
 * them). */
static ember_status_t take_source(const char *flag, const char *value, char *dst, char *err,
                                  size_t err_length)
{
    const char *rest = source_paths(value);
    if (!rest)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s '%s': criteo:PATH[,PATH...], criteo-npy:PREFIX[,PREFIX...] "
                                 "or text:PATH[,PATH...] (with --schema) is wanted",
                                 flag, value);
    if (!*rest || strstr(rest, ",,") || rest[strlen(rest) - 1] == ',')
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s '%s': an empty path",
                                 flag, value);
    if (strlen(value) >= DLRM_SOURCE_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: at most %d bytes of paths, not %zu", flag,
                                 DLRM_SOURCE_MAX - 1, strlen(value));
    snprintf(dst, DLRM_SOURCE_MAX, "%s", value);
    return EMBER_OK;
}

static ember_status_t parse_eval(const char *flag, const char *value, void *target, char *err,
                                 size_t err_length)
{
    return take_source(flag, value, ((dlrm_config_t *)target)->eval, err, err_length);
}

/* --schema FILE: read now, kept as its canonical text. */
static ember_status_t parse_schema(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length)
{
    dlrm_config_t *c = target;
    ember_schema_t *schema = NULL;
    char why[512] = "";
    ember_status_t status = ember_schema_load(value, &schema, why, sizeof(why));
    if (status == EMBER_OK)
        status = dlrm_set_schema(c, schema, why, sizeof(why));
    ember_schema_free(schema);
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s %s: %s", flag, value,
                                 why);
    c->schema_given = 1;
    return EMBER_OK;
}

/* --multi-hot-sizes S0,...: a bag size a sparse feature. */
static ember_status_t parse_multi_hot(const char *flag, const char *value, void *target, char *err,
                                      size_t err_length)
{
    dlrm_config_t *c = target;
    int64_t sizes[EMBER_SCHEMA_SPARSE_MAX + 1];
    size_t n;
    if (!parse_list(value, EMBER_SCHEMA_BAG_MAX, EMBER_SCHEMA_SPARSE_MAX + 1, sizes, &n) ||
        n > EMBER_SCHEMA_SPARSE_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s '%s': 1 to %d bag sizes of 1 to %d are wanted", flag, value,
                                 EMBER_SCHEMA_SPARSE_MAX, EMBER_SCHEMA_BAG_MAX);
    for (size_t f = 0; f < n; f++)
        c->multi_hot[f] = (uint32_t)sizes[f];
    c->multi_hots = (uint32_t)n;
    return EMBER_OK;
}

#define FIELD(member) EMBER_FLAG_FIELD(dlrm_config_t, member)
static const ember_flag_t dlrm_flags[] = {
        {"--embedding-dim", "D", "dlrm: every table's dimension (64)", EMBER_FLAG_INT, 1, 65536,
         FIELD(dim)},
        {"--num-embeddings", "N", "dlrm: rows of every table (100000)", EMBER_FLAG_CUSTOM,
         .parse = parse_rows_all},
        {"--num-embeddings-per-feature", "N0,...,N25", "dlrm: rows of each table",
         EMBER_FLAG_CUSTOM, .parse = parse_rows_each},
        {"--dense-arch-layer-sizes", "W1,...,D",
         "dlrm: DenseArch's widths, the last the\n"
         "embedding dimension (512,256,64)",
         EMBER_FLAG_CUSTOM, .parse = parse_widths},
        {"--over-arch-layer-sizes", "W1,...,1",
         "dlrm: OverArch's widths, the last 1\n"
         "(512,512,256,1)",
         EMBER_FLAG_CUSTOM, .parse = parse_widths},
        {"--batch-size", "B", "dlrm: examples per trainer step (32)", EMBER_FLAG_INT, 1, 1 << 24,
         FIELD(batch_size)},
        {"--steps", "S", "stop after S steps (dlrm; the epochs' end)", EMBER_FLAG_INT, 1, INT64_MAX,
         FIELD(steps)},
        {"--sharding", "row|table",
         "dlrm: each table's rows over every PS, or\n"
         "whole tables to PS balanced by bytes (row)",
         EMBER_FLAG_WORD, .values = (const int[]){EMBER_SHARD_ROW_WISE, EMBER_SHARD_TABLE_WISE},
         FIELD(sharding)},
        {"--eval", "SOURCE",
         "dlrm: the AUC and log loss over every example\n"
         "of SOURCE (as --data's), every --eval-every steps\n"
         "and at the end",
         EMBER_FLAG_CUSTOM, .parse = parse_eval},
        {"--eval-every", "N", "dlrm: steps between evaluations (the end only)", EMBER_FLAG_INT, 1,
         INT64_MAX, FIELD(eval_every)},
        {"--schema", "FILE",
         "dlrm: the features (<ember/schema.h>'s file) that\n"
         "--data text:PATH holds (Criteo's layout)",
         EMBER_FLAG_CUSTOM, .parse = parse_schema},
        {"--interaction-type", "original|dcn",
         "dlrm: InteractionArch's pairwise dots, or DLRM_DCN's\n"
         "LowRankCrossNet (original)",
         EMBER_FLAG_WORD, .values = (const int[]){DLRM_INTERACTION_ORIGINAL, DLRM_INTERACTION_DCN},
         FIELD(interaction)},
        {"--dcn-num-layers", "L", "dlrm dcn: cross layers (3)", EMBER_FLAG_INT, 1, DLRM_MLP_MAX,
         FIELD(dcn_layers)},
        {"--dcn-low-rank-dim", "R", "dlrm dcn: each cross layer's rank (512)", EMBER_FLAG_INT, 1,
         65536, FIELD(dcn_rank)},
        {"--multi-hot-sizes", "S0,...,S25",
         "dlrm: MLPerf's synthetic multi-hot: each one-id\n"
         "feature's row expanded into a bag of its size",
         EMBER_FLAG_CUSTOM, .parse = parse_multi_hot},
        {"--multi-hot-distribution-type", "uniform|pareto",
         "dlrm: the expanded rows' distribution (uniform)", EMBER_FLAG_WORD,
         .values = (const int[]){EMBER_MULTI_HOT_UNIFORM, EMBER_MULTI_HOT_PARETO},
         FIELD(multi_hot_dist)},
};
#undef FIELD

/* TorchRec dlrm_main's defaults. */
static void dlrm_defaults(void *config)
{
    static const uint32_t dense[] = {512, 256, 64}, over[] = {512, 512, 256, 1};
    dlrm_config_t *c = config;
    *c = (dlrm_config_t){.dim = 64,
                         .dense_layers = 3,
                         .over_layers = 4,
                         .batch_size = 32,
                         .dcn_layers = 3,
                         .dcn_rank = 512};
    for (int t = 0; t < EMBER_CRITEO_SPARSE; t++)
        c->rows[t] = 100000;
    memcpy(c->dense_sizes, dense, sizeof(dense));
    memcpy(c->over_sizes, over, sizeof(over));
    /* Criteo's layout over those rows (check() makes it again over the
     * rows the flags give, or takes --schema's) */
    ember_schema_t *schema = NULL;
    if (ember_schema_criteo(c->rows, &schema, NULL, 0) == EMBER_OK)
        dlrm_set_schema(c, schema, NULL, 0);
    ember_schema_free(schema);
}

/* --data criteo:PATH[,...], criteo-npy:PREFIX[,...] or text:PATH[,...];
 * another word is another model's. */
static ember_status_t dlrm_data(void *config, const char *value, char *err, size_t err_length)
{
    if (!value || !source_paths(value))
        return EMBER_ERR_NOT_FOUND;
    return take_source("--data", value, ((dlrm_config_t *)config)->data, err, err_length);
}

/* The schema the job reads: --schema's, else Criteo's preset over the
 * tables' rows; a Criteo source needs Criteo's layout. */
static ember_status_t check_schema(dlrm_config_t *c, const ember_flag_given_t *given, size_t ngiven,
                                   char *err, size_t err_length)
{
    const int criteo = strncmp(c->data, "criteo", 6) == 0,
              criteo_eval = strncmp(c->eval, "criteo", 6) == 0;
    ember_schema_t *schema = NULL;
    if (!c->schema_given) {
        if (!criteo || (c->eval[0] && !criteo_eval))
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "--data text:PATH needs --schema FILE (what its columns are)");
        EMBER_CHECK(ember_schema_criteo(c->rows, &schema, err, err_length));
        ember_status_t status = dlrm_set_schema(c, schema, err, err_length);
        ember_schema_free(schema);
        return status;
    }
    if (ember_flag_value(given, ngiven, "--num-embeddings") ||
        ember_flag_value(given, ngiven, "--num-embeddings-per-feature"))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--schema says each table's rows: --num-embeddings and "
                                 "--num-embeddings-per-feature are for Criteo's preset");
    EMBER_CHECK(dlrm_schema(c, &schema, err, err_length));
    const int is_criteo = ember_schema_is_criteo(schema);
    for (uint32_t f = 0; is_criteo && f < EMBER_CRITEO_SPARSE; f++) {
        ember_schema_sparse_t info;
        ember_schema_sparse(schema, f, &info);
        c->rows[f] = info.rows;
    }
    ember_schema_free(schema);
    if ((criteo || (c->eval[0] && criteo_eval)) && !is_criteo)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--schema: a criteo: or criteo-npy: source holds Criteo's layout, "
                                 "and this schema is another (give the data as text:PATH)");
    return EMBER_OK;
}

/* --table-kind dynamic: every table of the schema dynamic, so the stream
 * gives every feature its raw ids (no mod rows); the description carries
 * the schema so, and so the trainers read as the master creates. */
static ember_status_t all_dynamic(dlrm_config_t *c, char *err, size_t err_length)
{
    ember_schema_t *schema = NULL, *dynamic = NULL;
    EMBER_CHECK(dlrm_schema(c, &schema, err, err_length));
    ember_status_t status = ember_schema_all_dynamic(schema, &dynamic);
    if (status == EMBER_OK)
        status = dlrm_set_schema(c, dynamic, err, err_length);
    else
        ember_status_text(err, err_length, status, "out of memory");
    ember_schema_free(dynamic);
    ember_schema_free(schema);
    return status;
}

/* --multi-hot-sizes: one a feature, each feature of one id a field. */
static ember_status_t check_multi_hot(const dlrm_config_t *c, const ember_flag_given_t *given,
                                      size_t ngiven, char *err, size_t err_length)
{
    ember_schema_t *schema = NULL;
    if (!c->multi_hots) {
        if (ember_flag_value(given, ngiven, "--multi-hot-distribution-type"))
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s needs %s",
                                     "--multi-hot-distribution-type", "--multi-hot-sizes");
        return EMBER_OK;
    }
    if (c->multi_hots != c->num_sparse)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--multi-hot-sizes: %u sizes given; the schema has %u sparse "
                                 "features, a size each",
                                 c->multi_hots, c->num_sparse);
    EMBER_CHECK(dlrm_schema(c, &schema, err, err_length));
    ember_status_t status = EMBER_OK;
    for (uint32_t f = 0; f < c->num_sparse && status == EMBER_OK; f++) {
        ember_schema_sparse_t info;
        ember_schema_sparse(schema, f, &info);
        if (info.list && c->multi_hot[f] != 1)
            status = ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                       "--multi-hot-sizes: feature '%s' is a list already (only "
                                       "a feature of one id a field is expanded; give it 1)",
                                       info.name);
    }
    ember_schema_free(schema);
    return status;
}

/* --dcn-*: only with the cross layers. */
static ember_status_t check_interaction(const dlrm_config_t *c, const ember_flag_given_t *given,
                                        size_t ngiven, char *err, size_t err_length)
{
    static const char *const dcn_flags[] = {"--dcn-num-layers", "--dcn-low-rank-dim"};
    for (size_t i = 0; c->interaction != DLRM_INTERACTION_DCN && i < 2; i++) {
        if (ember_flag_value(given, ngiven, dcn_flags[i]))
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s needs %s",
                                     dcn_flags[i], "--interaction-type dcn");
    }
    if (c->num_dense == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--schema: DLRM's DenseArch needs at least one dense feature");
    return EMBER_OK;
}

/* DLRM's shapes fit together. */
static ember_status_t dlrm_check(void *config, ember_train_settings_t *settings,
                                 const ember_flag_given_t *given, size_t ngiven, char *err,
                                 size_t err_length)
{
    dlrm_config_t *c = config;
    if (c->dense_sizes[c->dense_layers - 1] != c->dim)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--dense-arch-layer-sizes must end in the embedding dimension "
                                 "(%u), not %u",
                                 c->dim, c->dense_sizes[c->dense_layers - 1]);
    if (c->over_layers < 2)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--over-arch-layer-sizes %u: OverArch needs at least two layers "
                                 "(TorchRec's OverArch refuses one), the last of width 1",
                                 c->over_sizes[0]);
    if (c->over_sizes[c->over_layers - 1] != 1)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--over-arch-layer-sizes must end in 1 (the logit), not %u",
                                 c->over_sizes[c->over_layers - 1]);
    if (ember_flag_value(given, ngiven, "--num-embeddings") &&
        ember_flag_value(given, ngiven, "--num-embeddings-per-feature"))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s and %s both say the tables' rows: give one",
                                 "--num-embeddings", "--num-embeddings-per-feature");
    if (c->eval_every && !c->eval[0])
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s needs %s",
                                 "--eval-every", "--eval SOURCE");
    EMBER_CHECK(check_schema(c, given, ngiven, err, err_length));
    if (settings->table_kind == EMBER_TABLE_DYNAMIC)
        EMBER_CHECK(all_dynamic(c, err, err_length));
    EMBER_CHECK(check_multi_hot(c, given, ngiven, err, err_length));
    EMBER_CHECK(check_interaction(c, given, ngiven, err, err_length));
    if (dlrm_params(c) == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: the model's sizes are out of range", "--model dlrm");
    return EMBER_OK;
}

/* ---- its description --------------------------------------------------------------- */

static void dlrm_describe(const void *config, model_text_t *text)
{
    const dlrm_config_t *c = config;
    model_text_add(text, "dim", "%u", c->dim);
    model_text_add_i64s(text, "rows", c->rows, EMBER_CRITEO_SPARSE);
    model_text_add_u32s(text, "dense_arch", c->dense_sizes, c->dense_layers);
    model_text_add_u32s(text, "over_arch", c->over_sizes, c->over_layers);
    model_text_add(text, "batch_size", "%u", c->batch_size);
    model_text_add(text, "sharding", "%s", c->sharding == EMBER_SHARD_TABLE_WISE ? "table" : "row");
    model_text_add(text, "steps", "%llu", (unsigned long long)c->steps);
    model_text_add(text, "eval_every", "%llu", (unsigned long long)c->eval_every);
    model_text_add(text, "data", "%s", c->data);
    model_text_add(text, "eval", "%s", c->eval);
    model_text_add(text, "schema", "%s", c->schema);
    model_text_add(text, "interaction", "%s",
                   c->interaction == DLRM_INTERACTION_DCN ? "dcn" : "original");
    model_text_add(text, "dcn", "%u,%u", c->dcn_layers, c->dcn_rank);
    if (c->multi_hots)
        model_text_add_u32s(text, "multi_hot", c->multi_hot, c->multi_hots);
    model_text_add(text, "multi_hot_dist", "%s",
                   c->multi_hot_dist == EMBER_MULTI_HOT_PARETO ? "pareto" : "uniform");
}

/* What a checkpoint written before schemas lacks: Criteo's layout over its
 * rows, the original interaction. */
static ember_status_t parse_schema_text(dlrm_config_t *c, const char *text, char *err,
                                        size_t err_length)
{
    ember_schema_t *schema = NULL;
    if (model_text_has(text, "schema")) {
        EMBER_CHECK(model_text_str(text, "schema", c->schema, sizeof(c->schema), err, err_length));
        EMBER_CHECK(dlrm_schema(c, &schema, err, err_length));
    } else {
        EMBER_CHECK(ember_schema_criteo(c->rows, &schema, err, err_length));
    }
    ember_status_t status = dlrm_set_schema(c, schema, err, err_length);
    ember_schema_free(schema);
    return status;
}

static ember_status_t parse_interaction(dlrm_config_t *c, const char *text, char *err,
                                        size_t err_length)
{
    int interaction = 0, dist = 0;
    uint32_t dcn[2];
    size_t n = 0, hots = 0;
    if (model_text_has(text, "interaction"))
        EMBER_CHECK(model_text_word(text, "interaction", "original|dcn", &interaction, err,
                                    err_length));
    if (model_text_has(text, "dcn")) {
        EMBER_CHECK(model_text_u32s(text, "dcn", 2, 1, 65536, dcn, &n, err, err_length));
        if (n != 2 || dcn[0] > DLRM_MLP_MAX)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "setting 'dcn' is not LAYERS,RANK");
        c->dcn_layers = dcn[0];
        c->dcn_rank = dcn[1];
    }
    if (model_text_has(text, "multi_hot"))
        EMBER_CHECK(model_text_u32s(text, "multi_hot", EMBER_SCHEMA_SPARSE_MAX, 1,
                                    EMBER_SCHEMA_BAG_MAX, c->multi_hot, &hots, err, err_length));
    if (model_text_has(text, "multi_hot_dist"))
        EMBER_CHECK(
                model_text_word(text, "multi_hot_dist", "uniform|pareto", &dist, err, err_length));
    c->interaction = interaction ? DLRM_INTERACTION_DCN : DLRM_INTERACTION_ORIGINAL;
    c->multi_hots = (uint32_t)hots;
    c->multi_hot_dist = dist ? EMBER_MULTI_HOT_PARETO : EMBER_MULTI_HOT_UNIFORM;
    return EMBER_OK;
}

static ember_status_t dlrm_parse(void *config, const char *text, char *err, size_t err_length)
{
    static const char *const keys[] = {"dim",        "rows",      "dense_arch",    "over_arch",
                                       "batch_size", "sharding",  "steps",         "eval_every",
                                       "data",       "eval",      "schema",        "interaction",
                                       "dcn",        "multi_hot", "multi_hot_dist"};
    dlrm_config_t *c = config;
    size_t n, dense, over;
    int sharding;
    dlrm_defaults(c);
    EMBER_CHECK(model_text_check(text, keys, sizeof(keys) / sizeof(keys[0]), 0, err, err_length));
    EMBER_CHECK(model_text_u32(text, "dim", 1, 65536, &c->dim, err, err_length));
    EMBER_CHECK(model_text_i64s(text, "rows", EMBER_CRITEO_SPARSE, 1, INT64_MAX / 65536, c->rows,
                                &n, err, err_length));
    EMBER_CHECK(model_text_u32s(text, "dense_arch", DLRM_MLP_MAX, 1, 65536, c->dense_sizes, &dense,
                                err, err_length));
    EMBER_CHECK(model_text_u32s(text, "over_arch", DLRM_MLP_MAX, 1, 65536, c->over_sizes, &over,
                                err, err_length));
    EMBER_CHECK(model_text_u32(text, "batch_size", 1, 1 << 24, &c->batch_size, err, err_length));
    EMBER_CHECK(model_text_word(text, "sharding", "row|table", &sharding, err, err_length));
    EMBER_CHECK(model_text_u64(text, "steps", 0, INT64_MAX, &c->steps, err, err_length));
    EMBER_CHECK(model_text_u64(text, "eval_every", 0, INT64_MAX, &c->eval_every, err, err_length));
    EMBER_CHECK(model_text_str(text, "data", c->data, sizeof(c->data), err, err_length));
    EMBER_CHECK(model_text_str(text, "eval", c->eval, sizeof(c->eval), err, err_length));
    c->dense_layers = (uint32_t)dense;
    c->over_layers = (uint32_t)over;
    c->sharding = sharding ? EMBER_SHARD_TABLE_WISE : EMBER_SHARD_ROW_WISE;
    if (n != EMBER_CRITEO_SPARSE || c->dense_sizes[dense - 1] != c->dim || over < 2 ||
        c->over_sizes[over - 1] != 1 || !source_paths(c->data) ||
        (c->eval[0] && !source_paths(c->eval)))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "settings 'rows', 'dim', 'dense_arch', 'over_arch', 'data' and "
                                 "'eval' are not a DLRM's");
    EMBER_CHECK(parse_schema_text(c, text, err, err_length));
    EMBER_CHECK(parse_interaction(c, text, err, err_length));
    if (dlrm_params(c) == 0 || (c->multi_hots && c->multi_hots != c->num_sparse))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "settings 'schema', 'dcn' and 'multi_hot' are not a DLRM's");
    return EMBER_OK;
}

static const char *dlrm_differs(const void *was, const void *now)
{
    static char why[400]; /* the master's, one resume at a time */
    const dlrm_config_t *a = was, *b = now;
    if (a->dim != b->dim)
        return "--embedding-dim";
    if (a->batch_size != b->batch_size)
        return "--batch-size";
    if (a->dense_layers != b->dense_layers ||
        memcmp(a->dense_sizes, b->dense_sizes, a->dense_layers * sizeof(uint32_t)) != 0)
        return "--dense-arch-layer-sizes";
    if (a->over_layers != b->over_layers ||
        memcmp(a->over_sizes, b->over_sizes, a->over_layers * sizeof(uint32_t)) != 0)
        return "--over-arch-layer-sizes";
    if (memcmp(a->rows, b->rows, sizeof(a->rows)) != 0)
        return "--num-embeddings(-per-feature)";
    if (a->interaction != b->interaction)
        return "--interaction-type";
    if (a->interaction == DLRM_INTERACTION_DCN &&
        (a->dcn_layers != b->dcn_layers || a->dcn_rank != b->dcn_rank))
        return "--dcn-num-layers/--dcn-low-rank-dim";
    if (a->multi_hots != b->multi_hots ||
        memcmp(a->multi_hot, b->multi_hot, a->multi_hots * sizeof(uint32_t)) != 0 ||
        (a->multi_hots && a->multi_hot_dist != b->multi_hot_dist))
        return "--multi-hot-sizes/--multi-hot-distribution-type";
    ember_schema_t *sa = NULL, *sb = NULL;
    char line[320];
    const int unreadable = dlrm_schema(a, &sa, line, sizeof(line)) != EMBER_OK ||
                           dlrm_schema(b, &sb, line, sizeof(line)) != EMBER_OK;
    const int differs = unreadable || ember_schema_differs(sa, sb, line, sizeof(line));
    ember_schema_free(sa);
    ember_schema_free(sb);
    if (differs) { /* the flag, and the feature or the reason */
        snprintf(why, sizeof(why), "--schema (%s)", line);
        return why;
    }
    if (strcmp(a->data, b->data) != 0)
        ember_warn("master",
                   "the checkpoint's job read %s, this one reads %s: the data position is "
                   "carried over as it is",
                   a->data, b->data);
    return NULL;
}

/* ---- its shape and its line ------------------------------------------------------------ */

static size_t dlrm_features(const void *config, ember_model_feature_t *out)
{
    const dlrm_config_t *c = config;
    ember_schema_t *schema = NULL;
    char err[256];
    if (dlrm_schema(c, &schema, err, sizeof(err)) != EMBER_OK)
        return 0; /* checked when the flags or the description were read */
    for (uint32_t f = 0; f < c->num_sparse; f++) {
        ember_schema_sparse_t info;
        ember_schema_sparse(schema, f, &info);
        out[f] = (ember_model_feature_t){
                .table = info.table_index, .pooling = info.pooling, .padding_idx = -1};
        snprintf(out[f].name, sizeof(out[f].name), "%s", info.name);
    }
    ember_schema_free(schema);
    return c->num_sparse;
}

/* "13-512-256-64": an MLP's widths from its input. */
static void widths_text(const size_t *widths, uint32_t layers, char *text, size_t length)
{
    int used = snprintf(text, length, "%zu", widths[0]);
    for (uint32_t l = 1; l <= layers && used > 0 && (size_t)used < length; l++)
        used += snprintf(text + used, length - (size_t)used, "-%zu", widths[l]);
}

/* "dcn (3 layers of rank 64), multi-hot pareto": the interaction and the data's bags. */
static void shape_text(const dlrm_config_t *c, char *text, size_t length)
{
    int used = c->interaction == DLRM_INTERACTION_DCN
                       ? snprintf(text, length, "LowRankCrossNet %u layers of rank %u",
                                  c->dcn_layers, c->dcn_rank)
                       : snprintf(text, length, "pairwise dots");
    if (c->multi_hots && used > 0 && (size_t)used < length)
        snprintf(text + used, length - (size_t)used, ", multi-hot %s",
                 c->multi_hot_dist == EMBER_MULTI_HOT_PARETO ? "pareto" : "uniform");
}

static void dlrm_print(const void *config, const ember_train_settings_t *s,
                       const ember_model_table_t *tables, size_t ntables)
{
    const dlrm_config_t *c = config;
    size_t dense_w[DLRM_MLP_MAX + 1], over_w[DLRM_MLP_MAX + 1];
    char dense[160], over[160], consistency[40], shape[120];
    int64_t rows = 0;
    for (size_t t = 0; t < ntables; t++)
        rows += tables[t].rows;
    dlrm_widths(c, dense_w, over_w);
    widths_text(dense_w, c->dense_layers, dense, sizeof(dense));
    widths_text(over_w, c->over_layers, over, sizeof(over));
    shape_text(c, shape, sizeof(shape));
    if (s->consistency != EMBER_SYNC)
        snprintf(consistency, sizeof(consistency), "async");
    else if (s->staleness > 0)
        snprintf(consistency, sizeof(consistency), "sync, staleness %u", s->staleness);
    else
        snprintf(consistency, sizeof(consistency), "sync");
    printf("training: dlrm%s, %d trainers x batch %u, %d ps (%s), %u dense and %u sparse "
           "features, %zu tables of dim %u (%lld rows%s), DenseArch %s, %s, OverArch %s, %s lr "
           "%g, %s, %s%s%s\n",
           c->interaction == DLRM_INTERACTION_DCN ? "-dcn" : "", s->trainers, c->batch_size,
           s->num_ps, c->sharding == EMBER_SHARD_TABLE_WISE ? "table-wise" : "row-wise",
           c->num_dense, c->num_sparse, ntables, c->dim, (long long)rows,
           s->table_dtype == EMBER_DTYPE_F16 ? ", fp16" : "", dense, shape, over,
           ember_opt_kind_name(s->optimizer.kind), (double)s->optimizer.lr, consistency, c->data,
           c->eval[0] ? ", eval " : "", c->eval);
    fflush(stdout);
}

static uint64_t dlrm_max_steps(const void *config)
{
    return ((const dlrm_config_t *)config)->steps;
}

static uint64_t dlrm_eval_every(const void *config)
{
    return ((const dlrm_config_t *)config)->eval_every;
}

static int dlrm_evaluates(const void *config)
{
    return ((const dlrm_config_t *)config)->eval[0] != '\0';
}

const ember_model_ops_t ember_model_dlrm = {
        .size = sizeof(ember_model_ops_t),
        .name = "dlrm",
        .whose = "DLRM's",
        .help = "DLRM (torchrec.models.dlrm.DLRM, DLRM_DCN) on Criteo or any schema's data",
        .unit = "examples",
        .epochs = 1,
        .flags = dlrm_flags,
        .nflags = sizeof(dlrm_flags) / sizeof(dlrm_flags[0]),
        .config_size = sizeof(dlrm_config_t),
        .defaults = dlrm_defaults,
        .data_words = "criteo:PATH[,PATH...], criteo-npy:PREFIX[,...] or text:PATH[,...]",
        .data_name = "criteo:",
        .data_need = "trains on --data criteo:PATH, criteo-npy:PREFIX or text:PATH",
        .data = dlrm_data,
        .check = dlrm_check,
        .describe = dlrm_describe,
        .parse = dlrm_parse,
        .differs = dlrm_differs,
        .tables = dlrm_tables,
        .features = dlrm_features,
        .tensors = dlrm_tensors,
        .params = dlrm_params,
        .initial = dlrm_initial,
        .print = dlrm_print,
        .trainer_create = dlrm_trainer_create,
        .trainer_destroy = dlrm_trainer_destroy,
        .max_steps = dlrm_max_steps,
        .take = dlrm_take,
        .release = dlrm_release,
        .forward = dlrm_forward,
        .backward = dlrm_backward,
        .step = dlrm_step,
        .trainer_params = dlrm_trainer_params,
        .optimizers = dlrm_optimizers,
        .eval_every = dlrm_eval_every,
        .evaluates = dlrm_evaluates,
        .eval_take = dlrm_eval_take,
        .logits = dlrm_logits,
        .epoch_steps = dlrm_epoch_steps,
};
