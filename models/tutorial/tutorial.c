/*
 * models/tutorial/tutorial: the tutorial model's hooks (models/model.h):
 * its flags, its configuration as text, its table, and the line that says
 * what is trained.
 */
#include "models/tutorial/tutorial.h"

#include "models/common/mlp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t tutorial_widths(const tutorial_config_t *c, size_t widths[TUTORIAL_HIDDEN_MAX + 2])
{
    size_t n = 0;
    widths[n++] = c->dim;
    for (uint32_t h = 0; h < c->nhidden && h < TUTORIAL_HIDDEN_MAX; h++)
        widths[n++] = c->hidden[h];
    widths[n++] = c->classes;
    return n - 1;
}

/* ---- flags ----------------------------------------------------------------------- */

/* --hidden W1,W2,...: @target is the configuration.  Empty items are
 * skipped (strtok's), each width read at its full width. */
static ember_status_t parse_hidden(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length)
{
    tutorial_config_t *c = target;
    char *copy = strdup(value), *save = NULL;
    (void)flag;
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    c->nhidden = 0;
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        long long v = strtoll(w, &end, 0);
        if (c->nhidden == TUTORIAL_HIDDEN_MAX || errno || end == w || *end || v < 1 || v > 65536) {
            free(copy);
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s", "");
        }
        c->hidden[c->nhidden++] = (uint32_t)v;
    }
    free(copy);
    return c->nhidden ? EMBER_OK
                      : ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s", "");
}

/* --mode: the word as the configuration's uint32_t. */
static ember_status_t parse_mode(const char *flag, const char *value, void *target, char *err,
                                 size_t err_length)
{
    ember_bag_mode_t mode;
    (void)flag;
    if (ember_bag_mode_parse(value, &mode) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s", "");
    *(uint32_t *)target = (uint32_t)mode;
    return EMBER_OK;
}

/* --replay FILE: its batches, weights and result. */
static ember_status_t parse_replay(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length)
{
    tutorial_config_t *c = target;
    if (!*value || strlen(value) >= sizeof(c->replay))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: a path of 1 to %zu bytes is wanted, not '%s'", flag,
                                 sizeof(c->replay) - 1, value);
    snprintf(c->replay, sizeof(c->replay), "%s", value);
    c->data = TUTORIAL_DATA_REPLAY;
    return EMBER_OK;
}

#define FIELD(member) EMBER_FLAG_FIELD(tutorial_config_t, member)
static const ember_flag_t tutorial_flags[] = {
        {"--rows", "R", "rows of the embedding table (100)", EMBER_FLAG_INT, 1, INT64_MAX / 65536,
         FIELD(rows)},
        {"--dim", "D", "its dimension (16)", EMBER_FLAG_INT, 1, 65536, FIELD(dim)},
        {"--classes", "C", "outputs of the last Linear layer (8)", EMBER_FLAG_INT, 2, 65536,
         FIELD(classes)},
        {"--hidden", "W1,W2,...",
         "a dense MLP: Linear+ReLU layers of these\n"
         "widths before the last Linear (none: the tutorial's)",
         EMBER_FLAG_CUSTOM, .parse = parse_hidden},
        {"--mode", "sum|mean|max", "EmbeddingBag pooling (sum)", EMBER_FLAG_CUSTOM,
         .parse = parse_mode, FIELD(mode)},
        {"--padding-idx", "I", "row that pools as nothing (none)", EMBER_FLAG_INT, -1, INT64_MAX,
         FIELD(padding_idx)},
        {"--weights", NULL,
         "per-sample weights (sum mode; the tutorial's and\n"
         "synthetic data draw each in [0, 1))",
         EMBER_FLAG_SWITCH, FIELD(weights)},
        {"--batches", "B", "batches per epoch (10)", EMBER_FLAG_INT, 1, 1 << 30, FIELD(batches)},
        {"--min-indices", "A", "fewest indices of a batch (20)", EMBER_FLAG_INT, 0, 1 << 30,
         FIELD(min_indices)},
        {"--max-indices", "B", "most indices of a batch (50)", EMBER_FLAG_INT, 1, 1 << 30,
         FIELD(max_indices)},
        {"--replay", "FILE",
         "train on a golden-layout file (sizes, weights,\n"
         "batches and SGD from it) in sync mode, then check the\n"
         "result against the file's expected values",
         EMBER_FLAG_CUSTOM, .parse = parse_replay},
        {"--replay-tolerance", "X",
         "--replay: the largest difference\n"
         "from the expected values that passes (1e-4)",
         EMBER_FLAG_FLOAT, FIELD(replay_tolerance)},
};
#undef FIELD

static void tutorial_defaults(void *config)
{
    *(tutorial_config_t *)config = (tutorial_config_t){.rows = 100,
                                                       .dim = 16,
                                                       .classes = 8,
                                                       .mode = EMBER_BAG_SUM,
                                                       .padding_idx = -1,
                                                       .batches = 10,
                                                       .min_indices = 20,
                                                       .max_indices = 50,
                                                       .data = TUTORIAL_DATA_RANDOM,
                                                       .replay_tolerance = 1e-4};
}

/* --data tutorial|synthetic (a replay's batches are its file's: --data is
 * refused with --replay, by tutorial_check). */
static ember_status_t tutorial_data(void *config, const char *value, char *err, size_t err_length)
{
    tutorial_config_t *c = config;
    (void)err;
    (void)err_length;
    if (!value)
        return EMBER_OK;
    if (strcmp(value, "tutorial") != 0 && strcmp(value, "synthetic") != 0)
        return EMBER_ERR_NOT_FOUND;
    if (!c->replay[0])
        c->data = value[0] == 't' ? TUTORIAL_DATA_RANDOM : TUTORIAL_DATA_SYNTHETIC;
    return EMBER_OK;
}

/* ---- its description --------------------------------------------------------------- */

static const char *const data_words = "tutorial|synthetic|replay";

static void tutorial_describe(const void *config, model_text_t *text)
{
    const tutorial_config_t *c = config;
    model_text_add(text, "rows", "%lld", (long long)c->rows);
    model_text_add(text, "dim", "%u", c->dim);
    model_text_add(text, "classes", "%u", c->classes);
    model_text_add(text, "mode", "%s", ember_bag_mode_name((ember_bag_mode_t)c->mode));
    model_text_add(text, "padding_idx", "%lld", (long long)c->padding_idx);
    model_text_add(text, "weights", "%d", c->weights);
    model_text_add(text, "batches", "%u", c->batches);
    model_text_add(text, "min_indices", "%u", c->min_indices);
    model_text_add(text, "max_indices", "%u", c->max_indices);
    model_text_add_u32s(text, "hidden", c->hidden, c->nhidden);
    model_text_add(text, "data", "%s",
                   c->data == TUTORIAL_DATA_REPLAY      ? "replay"
                   : c->data == TUTORIAL_DATA_SYNTHETIC ? "synthetic"
                                                        : "tutorial");
    model_text_add(text, "replay", "%s", c->replay);
}

static ember_status_t parse_hidden_text(tutorial_config_t *c, const char *text, char *err,
                                        size_t err_length)
{
    char value[8];
    size_t n = 0;
    if (model_text_str(text, "hidden", value, sizeof(value), NULL, 0) == EMBER_OK && !value[0]) {
        c->nhidden = 0; /* the tutorial's one Linear layer */
        return EMBER_OK;
    }
    EMBER_CHECK(model_text_u32s(text, "hidden", TUTORIAL_HIDDEN_MAX, 1, 65536, c->hidden, &n, err,
                                err_length));
    c->nhidden = (uint32_t)n;
    return EMBER_OK;
}

static ember_status_t tutorial_parse(void *config, const char *text, char *err, size_t err_length)
{
    static const char *const keys[] = {"rows",        "dim",     "classes", "mode",
                                       "padding_idx", "weights", "batches", "min_indices",
                                       "max_indices", "hidden",  "data",    "replay"};
    tutorial_config_t *c = config;
    int mode, data;
    uint32_t weights;
    tutorial_defaults(c);
    EMBER_CHECK(model_text_check(text, keys, sizeof(keys) / sizeof(keys[0]), 1, err, err_length));
    EMBER_CHECK(model_text_i64(text, "rows", 1, INT64_MAX / 65536, &c->rows, err, err_length));
    EMBER_CHECK(model_text_u32(text, "dim", 1, 65536, &c->dim, err, err_length));
    EMBER_CHECK(model_text_u32(text, "classes", 2, 65536, &c->classes, err, err_length));
    EMBER_CHECK(model_text_word(text, "mode", "sum|mean|max", &mode, err, err_length));
    EMBER_CHECK(
            model_text_i64(text, "padding_idx", -1, c->rows - 1, &c->padding_idx, err, err_length));
    EMBER_CHECK(model_text_u32(text, "weights", 0, 1, &weights, err, err_length));
    EMBER_CHECK(model_text_u32(text, "batches", 1, 1 << 30, &c->batches, err, err_length));
    EMBER_CHECK(model_text_u32(text, "min_indices", 0, 1 << 30, &c->min_indices, err, err_length));
    EMBER_CHECK(model_text_u32(text, "max_indices", c->min_indices > 0 ? c->min_indices : 1,
                               1 << 30, &c->max_indices, err, err_length));
    EMBER_CHECK(parse_hidden_text(c, text, err, err_length));
    EMBER_CHECK(model_text_word(text, "data", data_words, &data, err, err_length));
    EMBER_CHECK(model_text_str(text, "replay", c->replay, sizeof(c->replay), err, err_length));
    if ((data == TUTORIAL_DATA_REPLAY) != (c->replay[0] != '\0') || (weights && mode != 0))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "settings 'data', 'replay', 'weights' and 'mode' disagree");
    c->mode = (uint32_t)mode;
    c->weights = (int)weights;
    c->data = (uint32_t)data;
    return EMBER_OK;
}

/* The first setting a resumed job may not change, by its flag. */
static const char *tutorial_differs(const void *was, const void *now)
{
    const tutorial_config_t *a = was, *b = now;
    if (a->rows != b->rows)
        return "--rows";
    if (a->dim != b->dim)
        return "--dim";
    if (a->classes != b->classes)
        return "--classes";
    if (a->mode != b->mode)
        return "--mode";
    if (a->data != b->data)
        return "--data";
    if (a->padding_idx != b->padding_idx)
        return "--padding-idx";
    if (a->batches != b->batches)
        return "--batches";
    if (a->min_indices != b->min_indices)
        return "--min-indices";
    if (a->max_indices != b->max_indices)
        return "--max-indices";
    if (a->weights != b->weights)
        return "--weights";
    if (a->nhidden != b->nhidden ||
        memcmp(a->hidden, b->hidden, a->nhidden * sizeof(a->hidden[0])) != 0)
        return "--hidden";
    return NULL;
}

/* ---- its shape ------------------------------------------------------------------------ */

/* One table, row-wise over every PS, drawn N(0, 1) there (as
 * nn.EmbeddingBag) unless the replay file gives it. */
static size_t tutorial_tables(const void *config, const ember_train_settings_t *settings,
                              ember_model_table_t *out)
{
    const tutorial_config_t *c = config;
    out[0] = (ember_model_table_t){.rows = c->rows,
                                   .dim = c->dim,
                                   .init = EMBER_TABLE_INIT_NORMAL,
                                   .seed = settings->seed,
                                   .sharding = EMBER_SHARD_ROW_WISE,
                                   .num_shards = (uint32_t)settings->num_ps};
    snprintf(out[0].name, sizeof(out[0].name), "%s", TUTORIAL_TABLE);
    return 1;
}

static size_t tutorial_features(const void *config, ember_model_feature_t *out)
{
    const tutorial_config_t *c = config;
    out[0] = (ember_model_feature_t){
            .table = 0, .pooling = (ember_bag_mode_t)c->mode, .padding_idx = c->padding_idx};
    snprintf(out[0].name, sizeof(out[0].name), "%s", TUTORIAL_TABLE);
    return 1;
}

static size_t tutorial_params(const void *config)
{
    size_t widths[TUTORIAL_HIDDEN_MAX + 2];
    size_t layers = tutorial_widths(config, widths);
    return model_mlp_params(widths, layers);
}

/* "sync", "async", or "sync, staleness K". */
static void consistency_text(const ember_train_settings_t *s, char *out, size_t length)
{
    if (s->consistency != EMBER_SYNC)
        snprintf(out, length, "async");
    else if (s->staleness > 0)
        snprintf(out, length, "sync, staleness %u", s->staleness);
    else
        snprintf(out, length, "sync");
}

static void tutorial_print(const void *config, const ember_train_settings_t *s,
                           const ember_model_table_t *tables, size_t ntables)
{
    const tutorial_config_t *c = config;
    size_t widths[TUTORIAL_HIDDEN_MAX + 2], layers = tutorial_widths(c, widths);
    char consistency[40], dense[256];
    int used = 0;
    (void)tables;
    (void)ntables;
    consistency_text(s, consistency, sizeof(consistency));
    for (size_t l = 0; l < layers && used < (int)sizeof(dense); l++)
        used += snprintf(dense + used, sizeof(dense) - (size_t)used, "%sLinear(%zu, %zu)",
                         l ? " ReLU " : "", widths[l], widths[l + 1]);
    printf("training: %d trainers%s, %d ps, table %s %lld x %u (%s%s%s%s), %s, "
           "%s lr %g, %s, %s\n",
           s->trainers, strcmp(s->device, "cuda") == 0 ? " on GPUs" : "", s->num_ps, TUTORIAL_TABLE,
           (long long)c->rows, c->dim, ember_bag_mode_name((ember_bag_mode_t)c->mode),
           s->table_dtype == EMBER_DTYPE_F16 ? ", fp16 rows" : "",
           s->half_replies ? ", fp16 replies" : "",
           strcmp(s->ps_device, "cuda") == 0 ? ", on the PS's GPU" : "", dense,
           ember_opt_kind_name(s->optimizer.kind), (double)s->optimizer.lr, consistency,
           c->data == TUTORIAL_DATA_REPLAY      ? c->replay
           : c->data == TUTORIAL_DATA_SYNTHETIC ? "synthetic data"
                                                : "tutorial data");
    fflush(stdout);
}

static int tutorial_verifies(const void *config)
{
    return ((const tutorial_config_t *)config)->data == TUTORIAL_DATA_REPLAY;
}

static uint64_t tutorial_max_steps(const void *config)
{
    (void)config;
    return 0; /* its epochs of batches */
}

const ember_model_ops_t ember_model_tutorial = {
        .size = sizeof(ember_model_ops_t),
        .name = "tutorial",
        .whose = "the tutorial model's",
        .help = "the tutorial's table and Linear layers",
        .unit = "bags",
        .epochs = 100,
        .flags = tutorial_flags,
        .nflags = sizeof(tutorial_flags) / sizeof(tutorial_flags[0]),
        .config_size = sizeof(tutorial_config_t),
        .defaults = tutorial_defaults,
        .data_words = "tutorial, synthetic",
        .data_name = "tutorial",
        .data_need = "trains on --data tutorial or synthetic",
        .data = tutorial_data,
        .check = tutorial_check,
        .describe = tutorial_describe,
        .parse = tutorial_parse,
        .differs = tutorial_differs,
        .tables = tutorial_tables,
        .features = tutorial_features,
        .tensors = tutorial_tensors,
        .params = tutorial_params,
        .initial = tutorial_initial,
        .print = tutorial_print,
        .verifies = tutorial_verifies,
        .verify = tutorial_verify,
        .trainer_create = tutorial_trainer_create,
        .trainer_destroy = tutorial_trainer_destroy,
        .max_steps = tutorial_max_steps,
        .take = tutorial_take,
        .release = tutorial_release,
        .forward = tutorial_forward,
        .backward = tutorial_backward,
        .step = tutorial_step,
        .trainer_params = tutorial_trainer_params,
        .optimizers = tutorial_optimizers,
        .epoch_steps = tutorial_epoch_steps,
};
