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
    dense[0] = EMBER_CRITEO_DENSE;
    for (uint32_t l = 0; l < c->dense_layers && l < DLRM_MLP_MAX; l++)
        dense[l + 1] = c->dense_sizes[l];
    over[0] = dlrm_interaction_width(c);
    for (uint32_t l = 0; l < c->over_layers && l < DLRM_MLP_MAX; l++)
        over[l + 1] = c->over_sizes[l];
}

size_t dlrm_interaction_width(const dlrm_config_t *c)
{
    const size_t features = EMBER_CRITEO_SPARSE + 1;
    return c->dim + features * (features - 1) / 2;
}

size_t dlrm_params(const void *config)
{
    const dlrm_config_t *c = config;
    size_t dense[DLRM_MLP_MAX + 1], over[DLRM_MLP_MAX + 1];
    if (c->dense_layers > DLRM_MLP_MAX || c->over_layers > DLRM_MLP_MAX || c->dim == 0 ||
        c->dim > 65536)
        return 0;
    dlrm_widths(c, dense, over);
    size_t a = model_mlp_params(dense, c->dense_layers), b = model_mlp_params(over, c->over_layers);
    return a && b ? a + b : 0;
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

/* A Criteo source, "criteo:PATH[,PATH...]" or "criteo-npy:PREFIX[,...]",
 * into @dst (its files are checked when a trainer opens them). */
static ember_status_t take_source(const char *flag, const char *value, char *dst, char *err,
                                  size_t err_length)
{
    const char *rest = strncmp(value, "criteo:", 7) == 0        ? value + 7
                       : strncmp(value, "criteo-npy:", 11) == 0 ? value + 11
                                                                : NULL;
    if (!rest)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s '%s': criteo:PATH[,PATH...] or criteo-npy:PREFIX[,PREFIX...] "
                                 "is wanted",
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
        {"--eval", "criteo:PATH",
         "dlrm: the AUC and log loss over every example\n"
         "of PATH, every --eval-every steps and at the end",
         EMBER_FLAG_CUSTOM, .parse = parse_eval},
        {"--eval-every", "N", "dlrm: steps between evaluations (the end only)", EMBER_FLAG_INT, 1,
         INT64_MAX, FIELD(eval_every)},
};
#undef FIELD

/* TorchRec dlrm_main's defaults. */
static void dlrm_defaults(void *config)
{
    static const uint32_t dense[] = {512, 256, 64}, over[] = {512, 512, 256, 1};
    dlrm_config_t *c = config;
    *c = (dlrm_config_t){.dim = 64, .dense_layers = 3, .over_layers = 4, .batch_size = 32};
    for (int t = 0; t < EMBER_CRITEO_SPARSE; t++)
        c->rows[t] = 100000;
    memcpy(c->dense_sizes, dense, sizeof(dense));
    memcpy(c->over_sizes, over, sizeof(over));
}

/* --data criteo:PATH[,...] or criteo-npy:PREFIX[,...]; another word is
 * another model's. */
static ember_status_t dlrm_data(void *config, const char *value, char *err, size_t err_length)
{
    if (!value || strncmp(value, "criteo", 6) != 0)
        return EMBER_ERR_NOT_FOUND;
    return take_source("--data", value, ((dlrm_config_t *)config)->data, err, err_length);
}

/* DLRM's shapes fit together. */
static ember_status_t dlrm_check(void *config, ember_train_settings_t *settings,
                                 const ember_flag_given_t *given, size_t ngiven, char *err,
                                 size_t err_length)
{
    const dlrm_config_t *c = config;
    (void)settings;
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
                                 "--eval-every", "--eval criteo:PATH");
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
}

static ember_status_t dlrm_parse(void *config, const char *text, char *err, size_t err_length)
{
    static const char *const keys[] = {"dim",      "rows",  "dense_arch", "over_arch", "batch_size",
                                       "sharding", "steps", "eval_every", "data",      "eval"};
    dlrm_config_t *c = config;
    size_t n, dense, over;
    int sharding;
    dlrm_defaults(c);
    EMBER_CHECK(model_text_check(text, keys, sizeof(keys) / sizeof(keys[0]), 1, err, err_length));
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
        c->over_sizes[over - 1] != 1 || strncmp(c->data, "criteo", 6) != 0 ||
        (c->eval[0] && strncmp(c->eval, "criteo", 6) != 0))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "settings 'rows', 'dim', 'dense_arch', 'over_arch', 'data' and "
                                 "'eval' are not a DLRM's");
    return EMBER_OK;
}

static const char *dlrm_differs(const void *was, const void *now)
{
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
    (void)config;
    for (uint32_t t = 0; t < EMBER_CRITEO_SPARSE; t++) {
        out[t] = (ember_model_feature_t){.table = t, .pooling = EMBER_BAG_SUM, .padding_idx = -1};
        snprintf(out[t].name, sizeof(out[t].name), "t_cat_%u", t);
    }
    return EMBER_CRITEO_SPARSE;
}

/* "13-512-256-64": an MLP's widths from its input. */
static void widths_text(const size_t *widths, uint32_t layers, char *text, size_t length)
{
    int used = snprintf(text, length, "%zu", widths[0]);
    for (uint32_t l = 1; l <= layers && used > 0 && (size_t)used < length; l++)
        used += snprintf(text + used, length - (size_t)used, "-%zu", widths[l]);
}

static void dlrm_print(const void *config, const ember_train_settings_t *s,
                       const ember_model_table_t *tables, size_t ntables)
{
    const dlrm_config_t *c = config;
    size_t dense_w[DLRM_MLP_MAX + 1], over_w[DLRM_MLP_MAX + 1];
    char dense[160], over[160], consistency[40];
    int64_t rows = 0;
    for (size_t t = 0; t < ntables; t++)
        rows += tables[t].rows;
    dlrm_widths(c, dense_w, over_w);
    widths_text(dense_w, c->dense_layers, dense, sizeof(dense));
    widths_text(over_w, c->over_layers, over, sizeof(over));
    if (s->consistency != EMBER_SYNC)
        snprintf(consistency, sizeof(consistency), "async");
    else if (s->staleness > 0)
        snprintf(consistency, sizeof(consistency), "sync, staleness %u", s->staleness);
    else
        snprintf(consistency, sizeof(consistency), "sync");
    printf("training: dlrm, %d trainers x batch %u, %d ps (%s), %zu tables of dim %u (%lld "
           "rows%s), DenseArch %s, OverArch %s, %s lr %g, %s, %s%s%s\n",
           s->trainers, c->batch_size, s->num_ps,
           c->sharding == EMBER_SHARD_TABLE_WISE ? "table-wise" : "row-wise", ntables, c->dim,
           (long long)rows, s->table_dtype == EMBER_DTYPE_F16 ? ", fp16" : "", dense, over,
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
        .help = "DLRM (torchrec.models.dlrm.DLRM) on Criteo data",
        .unit = "examples",
        .epochs = 1,
        .flags = dlrm_flags,
        .nflags = sizeof(dlrm_flags) / sizeof(dlrm_flags[0]),
        .config_size = sizeof(dlrm_config_t),
        .defaults = dlrm_defaults,
        .data_words = "criteo:PATH[,PATH...] or criteo-npy:PREFIX[,...]",
        .data_name = "criteo:",
        .data_need = "trains on --data criteo:PATH or criteo-npy:PREFIX",
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
};
