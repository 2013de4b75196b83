/*
 * models/tutorial/tutorial_check: the tutorial model's flags taken
 * together, and --replay: a golden file sets the model, its batches and its
 * optimizer, so with --replay a flag that would set what the file holds
 * must say what the file says (then it is honoured), and one the file has no
 * such thing for is refused; both by name, rather than accepted and
 * ignored.
 */
#include "models/tutorial/tutorial.h"

#include "models/tutorial/replay_file.h"

#include <ember/config.h>

#include <stdio.h>
#include <string.h>

/* Flags the file has no such thing for: refused with --replay. */
static const char *const replay_refused[] = {
        "--hidden",      "--padding-idx", "--epochs", "--batches", "--min-indices",
        "--max-indices", "--data",        "--seed",   "--model",   "--init"};
/* Flags for what the file sets: compared with it, in this order. */
static const char *const replay_compared[] = {
        "--trainers", "--rows",      "--dim", "--classes",  "--mode",
        "--weights",  "--optimizer", "--lr",  "--momentum", "--sparse-reduce"};

static int listed(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i], name) == 0)
            return 1;
    }
    return 0;
}

/* "--trainers 3", "--weights": a flag as it was given. */
static void given_text(const ember_flag_given_t *flag, char *text, size_t length)
{
    snprintf(text, length, "%s%s%s", flag->name, *flag->value ? " " : "", flag->value);
}

/* What the file cannot honour: its refused flags, async consistency (a
 * replay is sync) and EMBER_SEED (the file holds the draws). */
static ember_status_t replay_flags(const tutorial_config_t *c,
                                   const ember_train_settings_t *settings,
                                   const ember_flag_given_t *given, size_t ngiven, char *err,
                                   size_t err_length)
{
    char text[128];
    for (size_t i = 0; i < ngiven; i++) {
        if (!listed(given[i].name, replay_refused, sizeof(replay_refused) / sizeof(char *)))
            continue;
        given_text(&given[i], text, sizeof(text));
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s cannot be honoured with --replay %s: the file holds the "
                                 "model, its initial weights and every batch; drop the flag",
                                 text, c->replay);
    }
    if (settings->consistency == EMBER_ASYNC)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s cannot be honoured with --replay %s: a replay trains in "
                                 "sync mode",
                                 ember_flag_value(given, ngiven, "--consistency")
                                         ? "--consistency async"
                                         : "EMBER_CONSISTENCY=async",
                                 c->replay);
    if (ember_config_is_set("EMBER_SEED"))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "EMBER_SEED cannot be honoured with --replay %s: the file holds "
                                 "the initial weights and the batches",
                                 c->replay);
    return EMBER_OK;
}

/* What a compared flag sets, as text, so that the job's and the file's can
 * be compared and named alike. */
static void setting_text(const char *flag, const ember_train_settings_t *s,
                         const tutorial_config_t *c, char *text, size_t length)
{
    if (!strcmp(flag, "--trainers"))
        snprintf(text, length, "%d trainers", s->trainers);
    else if (!strcmp(flag, "--rows"))
        snprintf(text, length, "%lld rows", (long long)c->rows);
    else if (!strcmp(flag, "--dim"))
        snprintf(text, length, "dim %u", c->dim);
    else if (!strcmp(flag, "--classes"))
        snprintf(text, length, "%u classes", c->classes);
    else if (!strcmp(flag, "--mode"))
        snprintf(text, length, "mode %s", ember_bag_mode_name((ember_bag_mode_t)c->mode));
    else if (!strcmp(flag, "--weights"))
        snprintf(text, length, "%s per-sample weights", c->weights ? "its" : "no");
    else if (!strcmp(flag, "--optimizer"))
        snprintf(text, length, "optimizer %s", ember_opt_kind_name(s->optimizer.kind));
    else if (!strcmp(flag, "--lr"))
        snprintf(text, length, "lr %g", (double)s->optimizer.lr);
    else if (!strcmp(flag, "--momentum"))
        snprintf(text, length, "momentum %g", (double)s->optimizer.momentum);
    else /* --sparse-reduce */
        snprintf(text, length, "sparse_reduce %s",
                 s->sparse_reduce == EMBER_REDUCE_MEAN ? "mean" : "sum");
}

/* The job as the replay file @info says it trains. */
static ember_status_t replay_job(tutorial_config_t *c, ember_train_settings_t *s,
                                 const ember_replay_info_t *info, char *err, size_t err_length)
{
    /* ember_replay_info checked the word; its hyper-parameters are
     * PyTorch's defaults, as make_golden.py's runs take them. */
    ember_opt_kind_t kind;
    if (ember_opt_kind_parse(info->optimizer, &kind) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: metadata 'optimizer' is '%s', not one ember has", c->replay,
                                 info->optimizer);
    /* ember_replay_info checked the words; this only converts them. */
    ember_bag_mode_t mode;
    if (ember_bag_mode_parse(info->mode, &mode) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: metadata 'mode' is '%s', not sum, mean or max", c->replay,
                                 info->mode);
    c->mode = (uint32_t)mode;
    c->rows = info->rows;
    c->dim = info->dim;
    c->classes = info->classes;
    c->weights = (int)info->per_sample_weights;
    c->padding_idx = -1;
    s->trainers = (int)info->trainers;
    s->consistency = EMBER_SYNC;
    s->sparse_reduce =
            strcmp(info->sparse_reduce, "mean") == 0 ? EMBER_REDUCE_MEAN : EMBER_REDUCE_SUM;
    ember_opt_config_default(kind, (float)info->lr, &s->optimizer);
    s->epochs = 1; /* the file's steps, one epoch */
    return EMBER_OK;
}

/* --replay: the file's metadata read, the job made the one it trains; a
 * flag that says otherwise refused by name. */
static ember_status_t take_replay(tutorial_config_t *c, ember_train_settings_t *settings,
                                  const ember_flag_given_t *given, size_t ngiven, char *err,
                                  size_t err_length)
{
    ember_replay_info_t info;
    tutorial_config_t file = *c;
    ember_train_settings_t file_settings = *settings;
    char mine[96], theirs[96], text[128];
    EMBER_CHECK(ember_replay_info(c->replay, &info, err, err_length));
    EMBER_CHECK(replay_job(&file, &file_settings, &info, err, err_length));
    for (size_t f = 0; f < sizeof(replay_compared) / sizeof(replay_compared[0]); f++) {
        for (size_t i = 0; i < ngiven; i++) {
            if (strcmp(given[i].name, replay_compared[f]) != 0)
                continue;
            setting_text(given[i].name, settings, c, mine, sizeof(mine));
            setting_text(given[i].name, &file_settings, &file, theirs, sizeof(theirs));
            if (strcmp(mine, theirs) == 0)
                continue; /* says what the file says: honoured */
            given_text(&given[i], text, sizeof(text));
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "%s cannot be honoured with --replay %s: the file trains "
                                     "with %s",
                                     text, c->replay, theirs);
        }
    }
    *c = file;
    *settings = file_settings;
    return EMBER_OK;
}

ember_status_t tutorial_check(void *config, ember_train_settings_t *settings,
                              const ember_flag_given_t *given, size_t ngiven, char *err,
                              size_t err_length)
{
    tutorial_config_t *c = config;
    const int replay = c->replay[0] != '\0';
    if (replay) /* first: the file sets most of what is checked below */
        EMBER_CHECK(replay_flags(c, settings, given, ngiven, err, err_length));
    if (c->min_indices > c->max_indices)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s is greater than %s",
                                 "--min-indices", "--max-indices");
    if (c->padding_idx >= c->rows)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: not a row of the table (%s)", "--padding-idx",
                                 "rows are 0 .. --rows - 1");
    if (c->weights && c->mode != EMBER_BAG_SUM)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: per-sample weights need %s", "--weights", "--mode sum");
    if (settings->staleness > 0 && replay)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "--staleness %u with --replay %s: the file's expected values are "
                                 "sync training's (--staleness 0)",
                                 settings->staleness, c->replay);
    if (ember_flag_value(given, ngiven, "--replay-tolerance") && !replay)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s checks a replay: it needs %s", "--replay-tolerance",
                                 "--replay FILE");
    return replay ? take_replay(c, settings, given, ngiven, err, err_length) : EMBER_OK;
}
