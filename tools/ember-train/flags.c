/*
 * tools/ember-train/flags: ember-train's flags.  One table (flags[]) says
 * each of the driver's own flags' kind, range and the field it sets; each
 * model brings its own (models/model.h), read the same way into its
 * configuration.  A model's flag given with another model is refused by
 * name, rather than accepted and ignored.
 */
#include "tools/ember-train/flags.h"

#include <ember/config.h>
#include <ember/log.h>
#include <ember/ps.h> /* EMBER_PS_THREADS_MAX */

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static ember_status_t parse_model(const char *flag, const char *value, void *target, char *err,
                                  size_t err_length);
static ember_status_t parse_optimizer(const char *flag, const char *value, void *target, char *err,
                                      size_t err_length);
static ember_status_t parse_device(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length);
static ember_status_t parse_bind(const char *flag, const char *value, void *target, char *err,
                                 size_t err_length);
static ember_status_t parse_data(const char *flag, const char *value, void *target, char *err,
                                 size_t err_length);
static ember_status_t parse_budget(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length);

#define FIELD(member) EMBER_FLAG_FIELD(train_job_t, member)
#define INT(lo, hi)   EMBER_FLAG_INT, (lo), (hi)
#define WORDS(...)                           \
    EMBER_FLAG_WORD, .values = (const int[]) \
    {                                        \
        __VA_ARGS__                          \
    }
static const ember_flag_t flags[] = {
        {"--trainers", "T", "trainers (2)", INT(1, 4096), FIELD(settings.trainers)},
        {"--ps", "P", "parameter servers; rows split by row % P (1)", INT(1, 4096),
         FIELD(settings.num_ps)},
        {"--model", NULL, NULL, EMBER_FLAG_CUSTOM, .parse = parse_model},
        {"--optimizer", "NAME", "sgd, adagrad, rowwise_adagrad, adam (sgd)", EMBER_FLAG_CUSTOM,
         .parse = parse_optimizer, FIELD(opt_kind)},
        {"--lr", "X", "learning rate (0.05)", EMBER_FLAG_FLOAT, FIELD(lr)},
        {"--momentum", "M", "SGD momentum (0; --optimizer sgd only)", EMBER_FLAG_FLOAT,
         FIELD(momentum)},
        {"--epochs", "E", "epochs (the model's: below)", INT(1, 1 << 30), FIELD(settings.epochs)},
        {"--data", "SOURCE", "what the model trains on (the model's: below)", EMBER_FLAG_CUSTOM,
         .parse = parse_data, FIELD(settings.data)},
        {"--seed", "S", "seed of weights and data (EMBER_SEED, 0)", INT(0, INT64_MAX),
         FIELD(settings.seed)},
        {"--consistency", "sync|async", "(EMBER_CONSISTENCY, sync)", WORDS(EMBER_SYNC, EMBER_ASYNC),
         FIELD(settings.consistency)},
        {"--sparse-reduce", "sum|mean",
         "sync: how trainers' row gradients\n"
         "combine (sum)",
         WORDS(EMBER_REDUCE_SUM, EMBER_REDUCE_MEAN), FIELD(settings.sparse_reduce)},
        {"--table-dtype", "fp32|fp16",
         "how the PS stores the tables' rows\n"
         "(fp32); fp16 halves their memory, arithmetic stays fp32",
         WORDS(EMBER_DTYPE_F32, EMBER_DTYPE_F16), FIELD(settings.table_dtype)},
        {"--table-kind", "fixed|dynamic",
         "fixed: ids are rows 0..rows-1 (the model's mod);\n"
         "dynamic: ids are raw 64-bit keys, a hash map on each\n"
         "PS gives each key its own row (README.md)",
         WORDS(EMBER_TABLE_FIXED, EMBER_TABLE_DYNAMIC), FIELD(settings.table_kind)},
        {"--admit-count", "N", "dynamic: a key gets a row once seen N times (1)",
         INT(1, UINT32_MAX), FIELD(settings.dynamic.admit_count)},
        {"--table-budget", "N|BYTES",
         "dynamic: rows each PS may hold of each table, or\n"
         "bytes (e.g. 64MiB; its rows, state and keys); 0: no bound",
         EMBER_FLAG_CUSTOM, .parse = parse_budget},
        {"--evict", "lru|lfu",
         "dynamic: which rows go when the budget is full\n"
         "(least recently seen, or least often; lru)",
         WORDS(EMBER_EVICT_LRU, EMBER_EVICT_LFU), FIELD(settings.dynamic.evict)},
        {"--evict-after", "T", "dynamic: rows unseen for T steps go (0: never)", INT(0, UINT32_MAX),
         FIELD(settings.dynamic.evict_after)},
        {"--lfu-decay", "F", "dynamic, lfu: counts decay by F each step, (0, 1] (1)",
         EMBER_FLAG_FLOAT, FIELD(settings.dynamic.lfu_decay)},
        {"--reply-dtype", "fp32|fp16",
         "lookups' replies on the wire (fp32);\n"
         "fp16 halves their bytes (the pooled values rounded)",
         WORDS(0, 1), FIELD(settings.half_replies)},
        {"--cache-rows", "N",
         "each trainer keeps up to N rows of its tables, so\n"
         "that a row whose copy stands is not sent again\n"
         "(0: no cache; fp32 replies)",
         INT(0, 1 << 30), FIELD(settings.cache_rows)},
        {"--staleness", "K",
         "sync: a step's lookup may see the tables up to K\n"
         "steps behind it, and leaves before the previous step's\n"
         "gradients are pushed (0..16; 0: every update seen)",
         INT(0, EMBER_STALENESS_MAX), FIELD(settings.staleness)},
        {"--save", "FILE",
         "write the final weights (safetensors, the names of\n"
         "the PyTorch module: README.md)",
         EMBER_FLAG_PATH, FIELD(save_path)},
        {"--metrics", "FILE",
         "JSON lines: each epoch, progress line, evaluation\n"
         "and checkpoint (EMBER_METRICS)",
         EMBER_FLAG_PATH, FIELD(metrics_path)},
        {"--log-every", "N",
         "a progress line every N steps of the job: the\n"
         "step, the epoch and how much of it is done, the\n"
         "examples (bags) a second since the last line, the\n"
         "running mean loss (every trainer's since the epoch\n"
         "began) and the epoch's time left, also to --metrics;\n"
         "0: none (without it: every --log-every-seconds)",
         INT(0, TRAIN_LOG_EVERY_MAX), FIELD(log_every)},
        {"--log-every-seconds", "S",
         "without --log-every: a progress line every S\n"
         "seconds of wall time (10), at the first step after",
         EMBER_FLAG_FLOAT, FIELD(log_every_seconds)},
        {"--init", "FILE|DIR",
         "start from these weights: a --save file of the same\n"
         "model (DLRM: TorchRec's state_dict names, README.md) or\n"
         "a checkpoint (DIR/step-N, or the newest in DIR), at step 0",
         EMBER_FLAG_PATH, FIELD(settings.init_path)},
        {"--checkpoint-dir", "DIR",
         "write checkpoints of the whole job into DIR\n"
         "(DIR/step-N/; sync mode): at the end, every\n"
         "--checkpoint-every steps, on SIGUSR1, and on SIGTERM (then stop)",
         EMBER_FLAG_PATH, FIELD(checkpoint_dir)},
        {"--checkpoint-every", "N", "steps between checkpoints (the end only)", INT(1, INT64_MAX),
         FIELD(checkpoint_every)},
        {"--checkpoint-keep", "K", "complete checkpoints kept (3)", INT(1, 1 << 20),
         FIELD(checkpoint_keep)},
        {"--resume", "PATH",
         "go on from the newest complete checkpoint in PATH\n"
         "(a --checkpoint-dir) or from PATH/step-N itself, on any\n"
         "number of PS and placement, with the same trainers",
         EMBER_FLAG_PATH, FIELD(resume_path)},
        {"--device", "cpu|cuda",
         "where the trainers' dense model runs (cpu);\n"
         "cuda takes GPU local_rank % GPUs, NCCL for its allreduce",
         EMBER_FLAG_CUSTOM, .parse = parse_device, FIELD(settings.device)},
        {"--ps-device", "cpu|cuda",
         "where each PS keeps its table shards and\n"
         "pools (cpu); cuda: GPU local_rank % GPUs, fp32 rows",
         EMBER_FLAG_CUSTOM, .parse = parse_device, FIELD(settings.ps_device)},
        {"--ps-threads", "N",
         "compute threads of each PS, its serving one\n"
         "included (the cores it is bound to; unbound: those of its\n"
         "NUMA node); any N gives the same bits",
         INT(1, EMBER_PS_THREADS_MAX), FIELD(ps_threads)},
        {"--bind", "numa|core|none",
         "CPU/memory binding near the GPU/HCA\n"
         "(EMBER_BIND, numa)",
         EMBER_FLAG_CUSTOM, .parse = parse_bind},
        {"--help", NULL, "this text", .kind = EMBER_FLAG_SWITCH},
        {"--version", NULL, "the version of ember-train and its library",
         .kind = EMBER_FLAG_SWITCH},
};
#undef WORDS
#undef INT
#undef FIELD
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

/* A flag of the command line: the driver's (model NULL) or a model's. */
typedef struct {
    const ember_flag_t *flag;
    const ember_model_ops_t *model;
} found_t;

/* @fmt appended to @buf (@length bytes) at *@used, cut short when full. */
static void append(char *buf, size_t length, size_t *used, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t length, size_t *used, const char *fmt, ...)
{
    va_list ap;
    if (*used >= length)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, length - *used, fmt, ap);
    va_end(ap);
    *used = n < 0 ? length : *used + (size_t)n;
}

/* --model's word list and help, from the table of models. */
static void model_flag_text(char *arg, size_t arg_length, char *help, size_t help_length)
{
    size_t a = 0, h = 0;
    arg[0] = help[0] = '\0';
    for (size_t m = 0; ember_models[m]; m++) {
        append(arg, arg_length, &a, "%s%s", m ? "|" : "", ember_models[m]->name);
        append(help, help_length, &h, "%s%s: %s", m ? ",\n" : "", ember_models[m]->name,
               ember_models[m]->help);
    }
    append(help, help_length, &h, " (%s)", ember_models[0]->name);
}

static void usage_line(FILE *stream, const char *name, const char *arg, const char *help)
{
    char head[64];
    snprintf(head, sizeof(head), "%s%s%s", name, arg ? " " : "", arg ? arg : "");
    fprintf(stream, "  %-30s ", head);
    for (const char *line = help; line;) {
        const char *end = strchr(line, '\n');
        fwrite(line, 1, end ? (size_t)(end - line) : strlen(line), stream);
        fputs(end ? "\n                                 " : "\n", stream);
        line = end ? end + 1 : NULL;
    }
}

static void usage(FILE *stream)
{
    char arg[128], help[1024];
    model_flag_text(arg, sizeof(arg), help, sizeof(help));
    fputs("usage: ember-train [flags]   (run under ember-run -n N, srun, or with\n"
          "       EMBER_RANK/EMBER_WORLD_SIZE/EMBER_INIT; N = trainers + 1 + ps)\n",
          stream);
    for (size_t f = 0; f < NFLAGS; f++) {
        if (strcmp(flags[f].name, "--model") == 0)
            usage_line(stream, flags[f].name, arg, help);
        else
            usage_line(stream, flags[f].name, flags[f].arg, flags[f].help);
    }
    for (size_t m = 0; ember_models[m]; m++) {
        const ember_model_ops_t *model = ember_models[m];
        fprintf(stream, "--model %s (--data %s; --epochs %u):\n", model->name, model->data_words,
                model->epochs);
        for (size_t f = 0; f < model->nflags; f++)
            usage_line(stream, model->flags[f].name, model->flags[f].arg, model->flags[f].help);
    }
}

/* One line saying what was refused, then where the flags are listed. */
static ember_status_t refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static ember_status_t refuse(const char *fmt, ...)
{
    /* One write: every rank refuses alike, and the launcher may stop a
     * rank between two. */
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ember-train: %s\n(ember-train --help lists the flags)\n", text);
    return EMBER_ERR_INVALID_PARAM;
}

/* A model's or a file's refusal: a flag's gets the --help line, a file's not. */
static ember_status_t refuse_text(ember_status_t status, const char *text)
{
    if (status == EMBER_ERR_INVALID_PARAM)
        return refuse("%s", text);
    fprintf(stderr, "ember-train: %s\n", text);
    return status;
}

/* ---- reading one flag -------------------------------------------------------------- */

/* An integer in [min, max], at its full width. */
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

/* A finite float >= 0 that float holds (no overflow to infinity). */
static int parse_nonneg_float(const char *text, float *value_p)
{
    char *end;
    errno = 0;
    float value = strtof(text, &end);
    if (errno || end == text || *end || !isfinite(value) || value < 0)
        return 0;
    *value_p = value;
    return 1;
}

/* @value must be one of @words ("a|b|c"); its index in *index_p. */
static int parse_word(const char *value, const char *words, int *index_p)
{
    int index = 0;
    size_t length = strlen(value);
    for (const char *p = words; *p; index++) {
        const char *end = strchr(p, '|');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == length && strncmp(p, value, n) == 0) {
            *index_p = index;
            return 1;
        }
        p += n + (end != NULL);
    }
    return 0;
}

static ember_status_t bad_value(const ember_flag_t *flag, const char *value)
{
    return refuse("invalid value '%s' for %s", value, flag->name);
}

/* An integer into the field its flag names, converted to that field's type. */
static void store_int(ember_field_t type, void *target, int64_t v)
{
    switch (type) {
    case EMBER_FIELD_INT: *(int *)target = (int)v; break;
    case EMBER_FIELD_U32: *(uint32_t *)target = (uint32_t)v; break;
    case EMBER_FIELD_I64: *(int64_t *)target = v; break;
    case EMBER_FIELD_U64: *(uint64_t *)target = (uint64_t)v; break;
    default: break;
    }
}

static ember_status_t take_int(const ember_flag_t *flag, const char *value, void *target)
{
    int64_t v;
    if (!parse_i64(value, flag->min, flag->max, &v))
        return refuse("invalid value '%s' for %s (an integer in [%lld, %lld])", value, flag->name,
                      (long long)flag->min, (long long)flag->max);
    store_int(flag->field, target, v);
    return EMBER_OK;
}

static ember_status_t take_float(const ember_flag_t *flag, const char *value, void *target)
{
    float v;
    if (!parse_nonneg_float(value, &v))
        return bad_value(flag, value);
    if (flag->field == EMBER_FIELD_F64)
        *(double *)target = v;
    else
        *(float *)target = v;
    return EMBER_OK;
}

static ember_status_t take_word(const ember_flag_t *flag, const char *value, void *target)
{
    int word;
    if (!parse_word(value, flag->arg, &word))
        return bad_value(flag, value);
    store_int(flag->field, target, flag->values[word]);
    return EMBER_OK;
}

static ember_status_t take_path(const ember_flag_t *flag, const char *value, void *target)
{
    if (!*value || strlen(value) >= TRAIN_PATH_MAX)
        return refuse("%s: a path of 1 to %d bytes is wanted, not '%s'", flag->name,
                      TRAIN_PATH_MAX - 1, value);
    *(const char **)target = value;
    return EMBER_OK;
}

static ember_status_t take_custom(const ember_flag_t *flag, const char *value, void *target)
{
    char err[512] = "";
    ember_status_t status = flag->parse(flag->name, value, target, err, sizeof(err));
    if (status == EMBER_OK)
        return EMBER_OK;
    if (status == EMBER_ERR_INVALID_PARAM && !err[0])
        return bad_value(flag, value);
    return refuse_text(status, err[0] ? err : ember_status_string(status));
}

/* Take one flag's value into the field its table entry names, in @base
 * (the job, or a model's configuration). */
static ember_status_t apply_flag(const ember_flag_t *flag, const char *value, void *base)
{
    void *target = flag->field == EMBER_FIELD_NONE ? base : (char *)base + flag->offset;
    switch (flag->kind) {
    case EMBER_FLAG_SWITCH: store_int(flag->field, target, 1); return EMBER_OK;
    case EMBER_FLAG_INT: return take_int(flag, value, target);
    case EMBER_FLAG_FLOAT: return take_float(flag, value, target);
    case EMBER_FLAG_WORD: return take_word(flag, value, target);
    case EMBER_FLAG_PATH: return take_path(flag, value, target);
    case EMBER_FLAG_CUSTOM: return take_custom(flag, value, target);
    }
    return EMBER_ERR_INVALID_PARAM;
}

/* ---- the driver's custom flags ------------------------------------------------------ */

static ember_status_t parse_model(const char *flag, const char *value, void *target, char *err,
                                  size_t err_length)
{
    train_job_t *job = target;
    (void)flag;
    job->model = ember_model_find(value);
    return job->model ? EMBER_OK
                      : ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s", "");
}

static ember_status_t parse_optimizer(const char *flag, const char *value, void *target, char *err,
                                      size_t err_length)
{
    (void)flag;
    if (ember_opt_kind_parse(value, target) == EMBER_OK)
        return EMBER_OK;
    return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s", "");
}

/* --device, --ps-device: the name, as the job spells it. */
static ember_status_t parse_device(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length)
{
    int word;
    (void)flag;
    if (!parse_word(value, "cpu|cuda", &word))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s", "");
    *(const char **)target = word ? "cuda" : "cpu";
    return EMBER_OK;
}

/* --data: the model reads it (train_flags_parse's take_data). */
static ember_status_t parse_data(const char *flag, const char *value, void *target, char *err,
                                 size_t err_length)
{
    (void)flag;
    (void)err;
    (void)err_length;
    *(const char **)target = value;
    return EMBER_OK;
}

/* --table-budget: rows (a plain count) or bytes (a count with B, KiB, MiB
 * or GiB), checked at full width. */
static ember_status_t parse_budget(const char *flag, const char *value, void *target, char *err,
                                   size_t err_length)
{
    ember_train_settings_t *s = &((train_job_t *)target)->settings;
    char *end = NULL;
    errno = 0;
    const unsigned long long n = strtoull(value, &end, 10);
    static const struct {
        const char *suffix;
        unsigned long long scale;
    } units[] = {{"", 0}, {"B", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}};
    for (size_t u = 0;
         end != value && errno == 0 && value[0] != '-' && u < sizeof(units) / sizeof(units[0]);
         u++) {
        if (strcmp(end, units[u].suffix) != 0)
            continue;
        if (units[u].scale == 0 && n <= 0x7ffffffeull) {
            s->dynamic.budget_rows = (int64_t)n;
            s->budget_bytes = 0;
            return EMBER_OK;
        }
        if (units[u].scale && n <= UINT64_MAX / units[u].scale) {
            s->budget_bytes = n * units[u].scale;
            s->dynamic.budget_rows = 0;
            return EMBER_OK;
        }
    }
    return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                             "invalid value '%s' for %s (rows 0 .. 2147483646, or bytes: N B, "
                             "KiB, MiB or GiB)",
                             value, flag);
}

/* --bind: the binding mode, as EMBER_BIND says it (the job binds by it). */
static ember_status_t parse_bind(const char *flag, const char *value, void *target, char *err,
                                 size_t err_length)
{
    int word;
    (void)target;
    if (!parse_word(value, "numa|core|none", &word))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: want numa, core or none, not '%s'", flag, value);
    return ember_config_set("EMBER_BIND", value);
}

/* ---- the command line ------------------------------------------------------------------ */

/* The model --model names (the default when none, or a word that is none:
 * --model itself is then refused in its turn). */
static const ember_model_ops_t *model_named(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--model") == 0)
            return ember_model_find(argv[i + 1]) ? ember_model_find(argv[i + 1]) : ember_models[0];
    }
    return ember_models[0];
}

static int find_in(const ember_flag_t *table, size_t n, const char *name)
{
    for (size_t f = 0; f < n; f++) {
        if (strcmp(table[f].name, name) == 0)
            return (int)f;
    }
    return -1;
}

/* @name among the driver's flags, then the model's, then other models'. */
static int find_flag(const train_job_t *job, const char *name, found_t *found)
{
    int f = find_in(flags, NFLAGS, strcmp(name, "-h") == 0 ? "--help" : name);
    if (f >= 0) {
        *found = (found_t){&flags[f], NULL};
        return 1;
    }
    if ((f = find_in(job->model->flags, job->model->nflags, name)) >= 0) {
        *found = (found_t){&job->model->flags[f], job->model};
        return 1;
    }
    for (size_t m = 0; ember_models[m]; m++) {
        const ember_model_ops_t *other = ember_models[m];
        if ((f = find_in(other->flags, other->nflags, name)) >= 0) {
            *found = (found_t){&other->flags[f], other};
            return 1;
        }
    }
    return 0;
}

/* Another model's flag: its value read (so a bad one is told as such),
 * into a scratch configuration of its own. */
static ember_status_t apply_foreign(const found_t *found, const char *value)
{
    void *scratch = calloc(1, found->model->config_size);
    if (!scratch)
        return EMBER_ERR_NO_MEMORY;
    found->model->defaults(scratch);
    ember_status_t status = apply_flag(found->flag, value, scratch);
    free(scratch);
    return status;
}

/* "--bind=VALUE": --bind's other spelling (as the launchers pass it). */
static const char *split_bind(const char *arg, char *name, size_t length)
{
    if (strncmp(arg, "--bind=", 7) != 0)
        return NULL;
    snprintf(name, length, "--bind");
    return arg + 7;
}

/* One flag (and its value) of argv at *@i. */
static ember_status_t take_arg(int argc, char **argv, int *i, train_job_t *job,
                               const ember_model_ops_t **foreign_p, const char **foreign_name_p,
                               train_action_t *action_p)
{
    char bind[16];
    const char *inline_value = split_bind(argv[*i], bind, sizeof(bind));
    const char *name = inline_value ? bind : argv[*i];
    found_t found;
    if (!find_flag(job, name, &found))
        return refuse("unknown flag '%s'", argv[*i]);
    if (!strcmp(found.flag->name, "--help") || !strcmp(found.flag->name, "--version")) {
        const int help = !strcmp(found.flag->name, "--help");
        if (help)
            usage(stdout);
        *action_p = help ? TRAIN_HELP : TRAIN_VERSION;
        return EMBER_OK;
    }
    if (ember_flag_value(job->given, job->ngiven, found.flag->name))
        return refuse("%s is given twice", found.flag->name);
    if (job->ngiven == TRAIN_GIVEN_MAX)
        return refuse("more than %d flags", TRAIN_GIVEN_MAX);
    const char *value = "";
    if (found.flag->kind != EMBER_FLAG_SWITCH) {
        char arg[128], help[8];
        model_flag_text(arg, sizeof(arg), help, sizeof(help));
        if (inline_value)
            value = inline_value;
        else if (*i + 1 >= argc)
            return refuse("%s needs a value (%s)", found.flag->name,
                          found.flag->arg ? found.flag->arg : arg);
        else
            value = argv[++*i];
    }
    job->given[job->ngiven++] = (ember_flag_given_t){found.flag->name, value};
    if (found.model && found.model != job->model) {
        if (!*foreign_p) {
            *foreign_p = found.model;
            *foreign_name_p = found.flag->name;
        }
        return apply_foreign(&found, value);
    }
    return apply_flag(found.flag, value, found.model ? job->config : (void *)job);
}

static ember_status_t job_defaults(train_job_t *job, const ember_model_ops_t *model)
{
    const char *consistency = ember_config_str("EMBER_CONSISTENCY");
    *job = (train_job_t){.settings = {.trainers = 2,
                                      .num_ps = 1,
                                      .table_dtype = EMBER_DTYPE_F32,
                                      .seed = (uint64_t)ember_config_int("EMBER_SEED"),
                                      .device = "cpu",
                                      .ps_device = "cpu",
                                      .dynamic = {.admit_count = 1,
                                                  .evict = EMBER_EVICT_LRU,
                                                  .lfu_decay = 1.0f}},
                         .model = model,
                         .metrics_path = ember_config_str("EMBER_METRICS"),
                         .checkpoint_keep = 3,
                         .log_every_seconds = 10,
                         .opt_kind = EMBER_OPT_SGD,
                         .lr = 0.05f};
    job->settings.consistency =
            consistency && strcasecmp(consistency, "async") == 0 ? EMBER_ASYNC : EMBER_SYNC;
    job->config = calloc(1, model->config_size);
    if (!job->config)
        return EMBER_ERR_NO_MEMORY;
    model->defaults(job->config);
    return EMBER_OK;
}

void train_job_free(train_job_t *job)
{
    free(job->config);
    job->config = NULL;
}

/* A flag of another model: "--rows is the tutorial model's: --model dlrm
 * has its own flags (--help)", "--embedding-dim is DLRM's: it needs
 * --model dlrm". */
static ember_status_t refuse_foreign(const train_job_t *job, const ember_model_ops_t *owner,
                                     const char *name)
{
    if (job->model == ember_models[0])
        return refuse("%s is %s: it needs --model %s", name, owner->whose, owner->name);
    return refuse("%s is %s: --model %s has its own flags (--help)", name, owner->whose,
                  job->model->name);
}

/* --data: the model's, or another model's (refused saying whose), or no
 * model's (refused listing every model's words). */
static ember_status_t take_data(train_job_t *job)
{
    char err[512] = "";
    const char *value = job->settings.data;
    ember_status_t status = job->model->data(job->config, value, err, sizeof(err));
    if (status != EMBER_ERR_NOT_FOUND)
        return status == EMBER_OK ? EMBER_OK : refuse_text(status, err);
    if (!value)
        return refuse("--model %s %s", job->model->name, job->model->data_need);
    for (size_t m = 0; ember_models[m]; m++) {
        const ember_model_ops_t *other = ember_models[m];
        void *scratch = other == job->model ? NULL : calloc(1, other->config_size);
        if (!scratch)
            continue;
        other->defaults(scratch);
        status = other->data(scratch, value, err, sizeof(err));
        free(scratch);
        if (status == EMBER_ERR_NOT_FOUND)
            continue;
        if (status != EMBER_OK) /* that model's kind of data, but not good data of it */
            return refuse_text(status, err);
        if (job->model != ember_models[0])
            return refuse("--model %s %s", job->model->name, job->model->data_need);
        return refuse("--data %s is %s data: it needs --model %s", other->data_name, other->whose,
                      other->name);
    }
    char words[512];
    size_t used = 0;
    words[0] = '\0';
    for (size_t m = 0; ember_models[m]; m++)
        append(words, sizeof(words), &used, "%s%s", m ? ", " : "", ember_models[m]->data_words);
    return refuse("--data '%s': %s is wanted", value, words);
}

/* Checkpoints: where, in sync mode; a resumed job's start is the checkpoint. */
static ember_status_t check_checkpoint_flags(const train_job_t *job)
{
    const ember_train_settings_t *s = &job->settings;
    const int every = ember_flag_value(job->given, job->ngiven, "--checkpoint-every") != NULL;
    const int keep = ember_flag_value(job->given, job->ngiven, "--checkpoint-keep") != NULL;
    if ((every || keep) && !job->checkpoint_dir)
        return refuse("%s needs %s", every ? "--checkpoint-every" : "--checkpoint-keep",
                      "--checkpoint-dir DIR");
    if ((job->checkpoint_dir || job->resume_path) && s->consistency == EMBER_ASYNC)
        return refuse("%s: checkpoints are taken at a step boundary, which %s does not have",
                      job->checkpoint_dir ? "--checkpoint-dir" : "--resume", "--consistency async");
    if (job->resume_path && s->init_path)
        return refuse("%s and %s both say where the weights start: give one", "--resume", "--init");
    if ((job->checkpoint_dir || job->resume_path) && s->staleness > 0)
        return refuse("%s with --staleness %u: a checkpoint is the tables at a step boundary, "
                      "and with staleness the trainers' next lookups have already read past it "
                      "(its resume would not be the run it stopped); use --staleness 0",
                      job->checkpoint_dir ? "--checkpoint-dir" : "--resume", s->staleness);
    return EMBER_OK;
}

/* The driver's own flags that only mean something together. */

/* The name of a table the model makes dynamic itself (its schema's
 * kind=dynamic), or NULL. */
static const char *model_dynamic_table(const train_job_t *job)
{
    static ember_model_table_t tables[EMBER_MODEL_TABLES_MAX]; /* the flags': one thread */
    const size_t n = job->model->tables(job->config, &job->settings, tables);
    for (size_t t = 0; t < n; t++)
        if (tables[t].kind == EMBER_TABLE_DYNAMIC)
            return tables[t].name;
    return NULL;
}

/* The dynamic flags: only with a dynamic table (--table-kind dynamic, or
 * one the model makes so), each in its range. */
static ember_status_t check_dynamic_flags(const train_job_t *job)
{
    const ember_train_settings_t *s = &job->settings;
    static const char *const dynamic_only[] = {"--admit-count", "--table-budget", "--evict",
                                               "--evict-after", "--lfu-decay"};
    const char *table = s->table_kind == EMBER_TABLE_DYNAMIC ? NULL : model_dynamic_table(job);
    char why[96];
    if (s->table_kind == EMBER_TABLE_DYNAMIC)
        snprintf(why, sizeof(why), "--table-kind dynamic");
    else
        snprintf(why, sizeof(why), "table %s (kind=dynamic)", table ? table : "");
    for (size_t i = 0; s->table_kind != EMBER_TABLE_DYNAMIC && !table && i < 5; i++)
        if (ember_flag_value(job->given, job->ngiven, dynamic_only[i]))
            return refuse("%s is a dynamic table's setting: give %s (or a schema's "
                          "kind=dynamic)",
                          dynamic_only[i], "--table-kind dynamic");
    if (s->table_kind != EMBER_TABLE_DYNAMIC && !table)
        return EMBER_OK;
    if (!(s->dynamic.lfu_decay > 0.0f && s->dynamic.lfu_decay <= 1.0f))
        return refuse("invalid value '%s' for %s (in (0, 1])",
                      ember_flag_value(job->given, job->ngiven, "--lfu-decay"), "--lfu-decay");
    if (strcmp(s->ps_device, "cpu") != 0)
        return refuse("%s: a dynamic table's rows live in the PS's host memory (%s)", why,
                      "--ps-device cuda");
    return EMBER_OK;
}

static ember_status_t check_combinations(const train_job_t *job)
{
    const ember_train_settings_t *s = &job->settings;
    if (ember_flag_value(job->given, job->ngiven, "--momentum") && job->opt_kind != EMBER_OPT_SGD)
        return refuse("%s is SGD's: --optimizer %s has none", "--momentum",
                      ember_opt_kind_name(job->opt_kind));
    if (s->staleness > 0 && s->consistency == EMBER_ASYNC)
        return refuse("%s bounds how far a sync lookup may be behind the step's updates: %s "
                      "has no steps to be behind",
                      "--staleness", "--consistency async");
    if (ember_flag_value(job->given, job->ngiven, "--sparse-reduce") &&
        s->consistency == EMBER_ASYNC)
        return refuse("%s is how sync steps combine gradients: %s applies each as it "
                      "comes",
                      "--sparse-reduce", "--consistency async");
    if (ember_flag_value(job->given, job->ngiven, "--log-every") &&
        ember_flag_value(job->given, job->ngiven, "--log-every-seconds"))
        return refuse("%s and %s both say when to print progress: give one", "--log-every",
                      "--log-every-seconds");
    if (!(job->log_every_seconds > 0 && job->log_every_seconds <= TRAIN_LOG_SECONDS_MAX))
        return refuse("invalid value '%s' for %s (seconds in (0, %d])",
                      ember_flag_value(job->given, job->ngiven, "--log-every-seconds"),
                      "--log-every-seconds", TRAIN_LOG_SECONDS_MAX);
    if (s->cache_rows > 0 && s->half_replies)
        return refuse("%s: a trainer pools its cached rows itself, the PS's fp32 values (%s)",
                      "--cache-rows", "--reply-dtype fp16");
    if (s->cache_rows > 0 && strcmp(s->ps_device, "cpu") != 0)
        return refuse("%s: the rows of a cached lookup are read from the PS's host memory "
                      "(%s)",
                      "--cache-rows", "--ps-device cuda");
    if (s->table_dtype == EMBER_DTYPE_F16 && strcmp(s->ps_device, "cuda") == 0)
        return refuse("%s: a PS on a GPU keeps fp32 rows (%s)", "--table-dtype fp16",
                      "--ps-device cuda");
    EMBER_CHECK(check_dynamic_flags(job));
    return check_checkpoint_flags(job);
}

/* What the flags say together: the model's data and its check (which may
 * take over settings: a replay's), then the driver's. */
static ember_status_t settle(train_job_t *job, const ember_model_ops_t *foreign,
                             const char *foreign_name)
{
    char err[1024] = "";
    if (foreign)
        return refuse_foreign(job, foreign, foreign_name);
    if (!ember_flag_value(job->given, job->ngiven, "--epochs"))
        job->settings.epochs = job->model->epochs;
    ember_opt_config_default(job->opt_kind, job->lr, &job->settings.optimizer);
    job->settings.optimizer.momentum = job->momentum;
    EMBER_CHECK(take_data(job));
    ember_status_t status = job->model->check(job->config, &job->settings, job->given, job->ngiven,
                                              err, sizeof(err));
    if (status != EMBER_OK)
        return refuse_text(status, err);
    return check_combinations(job);
}

ember_status_t train_flags_parse(int argc, char **argv, train_job_t *job, train_action_t *action_p)
{
    const ember_model_ops_t *foreign = NULL;
    const char *foreign_name = NULL;
    *action_p = TRAIN_RUN;
    EMBER_CHECK(job_defaults(job, model_named(argc, argv)));
    for (int i = 1; i < argc; i++) {
        EMBER_CHECK(take_arg(argc, argv, &i, job, &foreign, &foreign_name, action_p));
        if (*action_p != TRAIN_RUN)
            return EMBER_OK;
    }
    return settle(job, foreign, foreign_name);
}

/* ---- the outputs ------------------------------------------------------------------------ */

/* @path can be written by this process: its folder exists and is writable,
 * and it is not itself a folder or a file we may not replace. */
static ember_status_t check_writable(const char *flag, const char *path)
{
    struct stat st;
    char *copy = strdup(path);
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    const char *dir = dirname(copy);
    const char *why = NULL;
    if (stat(dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "its folder is not a folder";
    else if (access(dir, W_OK | X_OK) != 0)
        why = strerror(errno);
    else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        why = "it is a folder";
    else if (stat(path, &st) == 0 && access(path, W_OK) != 0)
        why = strerror(errno);
    if (why)
        fprintf(stderr,
                "ember-train: %s %s: cannot write there (%s: %s); nothing was "
                "run\n",
                flag, path, dir, why);
    free(copy);
    return why ? EMBER_ERR_IO : EMBER_OK;
}

ember_status_t train_check_outputs(const train_job_t *job)
{
    if (job->save_path)
        EMBER_CHECK(check_writable("--save", job->save_path));
    if (job->settings.init_path && access(job->settings.init_path, R_OK) != 0) {
        fprintf(stderr, "ember-train: --init %s: %s; nothing was run\n", job->settings.init_path,
                strerror(errno));
        return EMBER_ERR_IO;
    }
    if (job->metrics_path)
        EMBER_CHECK(check_writable(ember_flag_value(job->given, job->ngiven, "--metrics")
                                           ? "--metrics"
                                           : "EMBER_METRICS",
                                   job->metrics_path));
    return EMBER_OK;
}
