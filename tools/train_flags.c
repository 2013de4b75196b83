/* tools/train_flags: ember-train's flags, one table (flags[]) says each one's
 * kind, range and the field it sets. */
#include "tools/train_flags.h"

#include "common/workers.h"
#include "engine/io/replay_file.h"

#include <ember/config.h>
#include <ember/log.h>

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every flag, in the order --help lists them.  A replay file sets the
 * model, its batches and its optimizer: with --replay a flag that would set
 * what the file holds (REPLAY_COMPARED) must say what the file says, and
 * one the file has no such thing for (REPLAY_REFUSED) is refused; both by
 * name, rather than accepted and ignored. */
typedef enum {
    F_TRAINERS,
    F_PS,
    F_ROWS,
    F_DIM,
    F_CLASSES,
    F_HIDDEN,
    F_MODE,
    F_PADDING_IDX,
    F_WEIGHTS,
    F_OPTIMIZER,
    F_LR,
    F_MOMENTUM,
    F_EPOCHS,
    F_BATCHES,
    F_MIN_INDICES,
    F_MAX_INDICES,
    F_DATA,
    F_SEED,
    F_CONSISTENCY,
    F_SPARSE_REDUCE,
    F_TABLE_DTYPE,
    F_REPLY_DTYPE,
    F_STALENESS,
    F_REPLAY,
    F_REPLAY_TOLERANCE,
    F_SAVE,
    F_METRICS,
    F_MODEL,
    F_EMBEDDING_DIM,
    F_NUM_EMBEDDINGS,
    F_NUM_EMBEDDINGS_PER_FEATURE,
    F_DENSE_ARCH,
    F_OVER_ARCH,
    F_BATCH_SIZE,
    F_STEPS,
    F_SHARDING,
    F_INIT,
    F_EVAL,
    F_EVAL_EVERY,
    F_CHECKPOINT_DIR,
    F_CHECKPOINT_EVERY,
    F_CHECKPOINT_KEEP,
    F_RESUME,
    F_DEVICE,
    F_PS_DEVICE,
    F_PS_THREADS,
    F_BIND,
    F_HELP,
    F_VERSION,
    F_COUNT
} flag_id_t;

enum {
    REPLAY_FREE,
    REPLAY_REFUSED,
    REPLAY_COMPARED
};

/* How a flag's value is read.  K_INT: an integer in [min, max]; K_FLOAT: a
 * finite float >= 0; K_WORD: one of the words of its arg ("sync|async"),
 * which sets the value of the same place in values; K_PATH: a path that
 * fits the TRAIN_START message; K_CUSTOM: its own parser. */
typedef enum {
    K_SWITCH,
    K_INT,
    K_FLOAT,
    K_WORD,
    K_PATH,
    K_CUSTOM
} flag_kind_t;

/* The type of the field a flag sets (an enum is its integer type). */
typedef enum {
    T_NONE,
    T_INT,
    T_U32,
    T_I64,
    T_U64,
    T_F32,
    T_F64,
    T_STR
} target_type_t;

/* Where that field is: in the job, or in what parsing collects beside it. */
enum {
    AT_NONE,
    AT_JOB,
    AT_PARSED
};

/* What parsing collects beyond the job itself. */
typedef struct {
    ember_opt_kind_t kind;
    float lr, momentum;
} parsed_t;

/* A K_CUSTOM flag's parser; @target is its field (the job for --hidden). */
typedef ember_status_t (*flag_parse_t)(int f, const char *value, void *target);

typedef struct {
    const char *name; /* "--rows" */
    const char *arg;  /* what it takes ("R"); NULL: a switch */
    const char *help; /* lines after the first are indented by usage() */
    int replay;       /* REPLAY_*: what --replay makes of it */
    flag_kind_t kind;
    int64_t min, max;   /* K_INT */
    const int *values;  /* K_WORD: what each word of arg sets */
    flag_parse_t parse; /* K_CUSTOM */
    int at;             /* AT_*: the field it sets */
    size_t offset;
    target_type_t type;
} flag_t;

/* A bit of ember_train_job_t.given and a slot of its flag_values per flag. */
_Static_assert(F_COUNT <= 64, "more flags than ember_train_job_t.given has bits");

#define TYPE_OF(s, field) \
    _Generic(((s *)0)->field,                                                                      \
            int: T_INT,                                                                            \
            uint32_t: T_U32,                                                                       \
            int64_t: T_I64,                                                                        \
            uint64_t: T_U64,                                                                       \
            float: T_F32,                                                                          \
            double: T_F64,                                                                         \
            const char *: T_STR)
#define IN_JOB(field)                                           \
    .at = AT_JOB, .offset = offsetof(ember_train_job_t, field), \
    .type = TYPE_OF(ember_train_job_t, field)
#define IN_PARSED(field) \
    .at = AT_PARSED, .offset = offsetof(parsed_t, field), .type = TYPE_OF(parsed_t, field)
#define INT_FLAG(lo, hi, field)  .kind = K_INT, .min = (lo), .max = (hi), IN_JOB(field)
#define WORD_FLAG(field, ...)    .kind = K_WORD, .values = (const int[]){__VA_ARGS__}, IN_JOB(field)
#define CUSTOM_FLAG(parser, ...) .kind = K_CUSTOM, .parse = (parser), __VA_ARGS__

static ember_status_t parse_hidden(int f, const char *value, void *target);
static ember_status_t parse_mode(int f, const char *value, void *target);
static ember_status_t parse_optimizer(int f, const char *value, void *target);
static ember_status_t parse_device(int f, const char *value, void *target);
static ember_status_t parse_bind(int f, const char *value, void *target);
static ember_status_t parse_data(int f, const char *value, void *target);
static ember_status_t parse_eval(int f, const char *value, void *target);
static ember_status_t parse_rows_all(int f, const char *value, void *target);
static ember_status_t parse_rows_each(int f, const char *value, void *target);
static ember_status_t parse_widths(int f, const char *value, void *target);

static const flag_t flags[F_COUNT] = {
        [F_TRAINERS] = {"--trainers", "T", "trainers (2)", REPLAY_COMPARED,
                        INT_FLAG(1, 4096, trainers)},
        [F_PS] = {"--ps", "P", "parameter servers; rows split by row % P (1)", REPLAY_FREE,
                  INT_FLAG(1, 4096, num_ps)},
        [F_ROWS] = {"--rows", "R", "rows of the embedding table (100)", REPLAY_COMPARED,
                    INT_FLAG(1, INT64_MAX / 65536, train.rows)},
        [F_DIM] = {"--dim", "D", "its dimension (16)", REPLAY_COMPARED,
                   INT_FLAG(1, 65536, train.dim)},
        [F_CLASSES] = {"--classes", "C", "outputs of the last Linear layer (8)", REPLAY_COMPARED,
                       INT_FLAG(2, 65536, train.classes)},
        [F_HIDDEN] = {"--hidden", "W1,W2,...",
                      "a dense MLP: Linear+ReLU layers of these\n"
                      "widths before the last Linear (none: the tutorial's)",
                      REPLAY_REFUSED, CUSTOM_FLAG(parse_hidden, .at = AT_JOB)},
        [F_MODE] = {"--mode", "sum|mean|max", "EmbeddingBag pooling (sum)", REPLAY_COMPARED,
                    CUSTOM_FLAG(parse_mode, IN_JOB(train.mode))},
        [F_PADDING_IDX] = {"--padding-idx", "I", "row that pools as nothing (none)", REPLAY_REFUSED,
                           INT_FLAG(-1, INT64_MAX, train.padding_idx)},
        [F_WEIGHTS] = {"--weights", NULL,
                       "per-sample weights (sum mode; the tutorial's and\n"
                       "synthetic data draw each in [0, 1))",
                       REPLAY_COMPARED, .kind = K_SWITCH, IN_JOB(train.per_sample_weights)},
        [F_OPTIMIZER] = {"--optimizer", "NAME", "sgd, adagrad, rowwise_adagrad, adam (sgd)",
                         REPLAY_COMPARED, CUSTOM_FLAG(parse_optimizer, IN_PARSED(kind))},
        [F_LR] = {"--lr", "X", "learning rate (0.05)", REPLAY_COMPARED, .kind = K_FLOAT,
                  IN_PARSED(lr)},
        [F_MOMENTUM] = {"--momentum", "M", "SGD momentum (0; --optimizer sgd only)",
                        REPLAY_COMPARED, .kind = K_FLOAT, IN_PARSED(momentum)},
        [F_EPOCHS] = {"--epochs", "E", "epochs (100)", REPLAY_REFUSED,
                      INT_FLAG(1, 1 << 30, train.epochs)},
        [F_BATCHES] = {"--batches", "B", "batches per epoch (10)", REPLAY_REFUSED,
                       INT_FLAG(1, 1 << 30, train.batches)},
        [F_MIN_INDICES] = {"--min-indices", "A", "fewest indices of a batch (20)", REPLAY_REFUSED,
                           INT_FLAG(0, 1 << 30, train.min_indices)},
        [F_MAX_INDICES] = {"--max-indices", "B", "most indices of a batch (50)", REPLAY_REFUSED,
                           INT_FLAG(1, 1 << 30, train.max_indices)},
        [F_DATA] = {"--data", "SOURCE",
                    "tutorial (random bags), synthetic (bags with\n"
                    "a learnable target), or for --model dlrm\n"
                    "criteo:PATH[,PATH...] (Criteo TSV) or\n"
                    "criteo-npy:PREFIX[,...] (TorchRec's PREFIX_dense.npy,\n"
                    "_sparse.npy, _labels.npy) (tutorial)",
                    REPLAY_REFUSED, CUSTOM_FLAG(parse_data, .at = AT_JOB)},
        [F_SEED] = {"--seed", "S", "seed of weights and data (EMBER_SEED, 0)", REPLAY_REFUSED,
                    INT_FLAG(0, INT64_MAX, train.seed)},
        [F_CONSISTENCY] = {"--consistency", "sync|async", "(EMBER_CONSISTENCY, sync)", REPLAY_FREE,
                           WORD_FLAG(train.consistency, EMBER_SYNC, EMBER_ASYNC)},
        [F_SPARSE_REDUCE] = {"--sparse-reduce", "sum|mean",
                             "sync: how trainers' row gradients\n"
                             "combine (sum)",
                             REPLAY_COMPARED,
                             WORD_FLAG(sparse_reduce, EMBER_REDUCE_SUM, EMBER_REDUCE_MEAN)},
        [F_TABLE_DTYPE] = {"--table-dtype", "fp32|fp16",
                           "how the PS stores the table's rows\n"
                           "(fp32); fp16 halves its memory, arithmetic stays fp32",
                           REPLAY_FREE, WORD_FLAG(table_dtype, EMBER_DTYPE_F32, EMBER_DTYPE_F16)},
        [F_REPLY_DTYPE] = {"--reply-dtype", "fp32|fp16",
                           "lookups' replies on the wire (fp32);\n"
                           "fp16 halves their bytes (the pooled values rounded)",
                           REPLAY_FREE, WORD_FLAG(train.half_replies, 0, 1)},
        [F_STALENESS] = {"--staleness", "K",
                         "sync: a step's lookup may see the tables up to K\n"
                         "steps behind it, and leaves before the previous step's\n"
                         "gradients are pushed (0..16; 0: every update seen)",
                         REPLAY_FREE, INT_FLAG(0, EMBER_STALENESS_MAX, train.staleness)},
        [F_REPLAY] = {"--replay", "FILE",
                      "train on a golden-layout file (sizes, weights,\n"
                      "batches and SGD from it) in sync mode, then check the\n"
                      "result against the file's expected values",
                      REPLAY_FREE, .kind = K_PATH, IN_JOB(replay_path)},
        [F_REPLAY_TOLERANCE] = {"--replay-tolerance", "X",
                                "--replay: the largest difference\n"
                                "from the expected values that passes (1e-4)",
                                REPLAY_FREE, .kind = K_FLOAT, IN_JOB(replay_tolerance)},
        [F_SAVE] = {"--save", "FILE",
                    "write the final weights (safetensors, the names of\n"
                    "the PyTorch module: README.md)",
                    REPLAY_FREE, .kind = K_PATH, IN_JOB(save_path)},
        [F_METRICS] = {"--metrics", "FILE", "JSON lines, one per epoch (EMBER_METRICS)",
                       REPLAY_FREE, .kind = K_PATH, IN_JOB(metrics_path)},
        [F_MODEL] = {"--model", "tutorial|dlrm",
                     "the tutorial's table and Linear layers, or\n"
                     "DLRM (torchrec.models.dlrm.DLRM) on Criteo data (tutorial)",
                     REPLAY_REFUSED,
                     WORD_FLAG(train.model, EMBER_MODEL_TUTORIAL, EMBER_MODEL_DLRM)},
        [F_EMBEDDING_DIM] = {"--embedding-dim", "D", "dlrm: every table's dimension (64)",
                             REPLAY_REFUSED, INT_FLAG(1, 65536, train.dim)},
        [F_NUM_EMBEDDINGS] = {"--num-embeddings", "N", "dlrm: rows of every table (100000)",
                              REPLAY_REFUSED, CUSTOM_FLAG(parse_rows_all, .at = AT_JOB)},
        [F_NUM_EMBEDDINGS_PER_FEATURE] = {"--num-embeddings-per-feature", "N0,...,N25",
                                          "dlrm: rows of each table", REPLAY_REFUSED,
                                          CUSTOM_FLAG(parse_rows_each, .at = AT_JOB)},
        [F_DENSE_ARCH] = {"--dense-arch-layer-sizes", "W1,...,D",
                          "dlrm: DenseArch's widths, the last the\n"
                          "embedding dimension (512,256,64)",
                          REPLAY_REFUSED, CUSTOM_FLAG(parse_widths, .at = AT_JOB)},
        [F_OVER_ARCH] = {"--over-arch-layer-sizes", "W1,...,1",
                         "dlrm: OverArch's widths, the last 1\n"
                         "(512,512,256,1)",
                         REPLAY_REFUSED, CUSTOM_FLAG(parse_widths, .at = AT_JOB)},
        [F_BATCH_SIZE] = {"--batch-size", "B", "dlrm: examples per trainer step (32)",
                          REPLAY_REFUSED, INT_FLAG(1, 1 << 24, train.dlrm.batch_size)},
        [F_STEPS] = {"--steps", "S", "stop after S steps (dlrm; the epochs' end)", REPLAY_REFUSED,
                     INT_FLAG(1, INT64_MAX, train.dlrm.steps)},
        [F_SHARDING] = {"--sharding", "row|table",
                        "dlrm: each table's rows over every PS, or\n"
                        "whole tables to PS balanced by bytes (row)",
                        REPLAY_REFUSED,
                        WORD_FLAG(train.dlrm.sharding, EMBER_SHARD_ROW, EMBER_SHARD_TABLE)},
        [F_INIT] = {"--init", "FILE|DIR",
                    "start from these weights: a --save file of the same\n"
                    "model (DLRM: TorchRec's state_dict names, README.md) or\n"
                    "a checkpoint (DIR/step-N, or the newest in DIR), at step 0",
                    REPLAY_REFUSED, .kind = K_PATH, IN_JOB(init_path)},
        [F_EVAL] = {"--eval", "criteo:PATH",
                    "dlrm: the AUC and log loss over every example\n"
                    "of PATH, every --eval-every steps and at the end",
                    REPLAY_REFUSED, CUSTOM_FLAG(parse_eval, .at = AT_JOB)},
        [F_EVAL_EVERY] = {"--eval-every", "N", "dlrm: steps between evaluations (the end only)",
                          REPLAY_REFUSED, INT_FLAG(1, INT64_MAX, train.dlrm.eval_every)},
        [F_CHECKPOINT_DIR] = {"--checkpoint-dir", "DIR",
                              "write checkpoints of the whole job into DIR\n"
                              "(DIR/step-N/; sync mode): at the end, every\n"
                              "--checkpoint-every steps, on SIGUSR1, and on SIGTERM (then stop)",
                              REPLAY_FREE, .kind = K_PATH, IN_JOB(checkpoint_dir)},
        [F_CHECKPOINT_EVERY] = {"--checkpoint-every", "N",
                                "steps between checkpoints (the end only)", REPLAY_FREE,
                                INT_FLAG(1, INT64_MAX, checkpoint_every)},
        [F_CHECKPOINT_KEEP] = {"--checkpoint-keep", "K", "complete checkpoints kept (3)",
                               REPLAY_FREE, INT_FLAG(1, 1 << 20, checkpoint_keep)},
        [F_RESUME] = {"--resume", "PATH",
                      "go on from the newest complete checkpoint in PATH\n"
                      "(a --checkpoint-dir) or from PATH/step-N itself, on any\n"
                      "number of PS and placement, with the same trainers",
                      REPLAY_FREE, .kind = K_PATH, IN_JOB(resume_path)},
        [F_DEVICE] = {"--device", "cpu|cuda",
                      "where the trainers' dense model runs (cpu);\n"
                      "cuda takes GPU local_rank % GPUs, NCCL for its allreduce",
                      REPLAY_FREE, CUSTOM_FLAG(parse_device, IN_JOB(device))},
        [F_PS_DEVICE] = {"--ps-device", "cpu|cuda",
                         "where each PS keeps its table shards and\n"
                         "pools (cpu); cuda: GPU local_rank % GPUs, fp32 rows",
                         REPLAY_FREE, CUSTOM_FLAG(parse_device, IN_JOB(ps_device))},
        [F_PS_THREADS] = {"--ps-threads", "N",
                          "compute threads of each PS, its serving one\n"
                          "included (the cores it is bound to; unbound: those of its\n"
                          "NUMA node); any N gives the same bits",
                          REPLAY_FREE, INT_FLAG(1, EMBER_WORKERS_MAX, ps_threads)},
        [F_BIND] = {"--bind", "numa|core|none",
                    "CPU/memory binding near the GPU/HCA\n"
                    "(EMBER_BIND, numa)",
                    REPLAY_FREE, CUSTOM_FLAG(parse_bind, .at = AT_NONE)},
        [F_HELP] = {"--help", NULL, "this text", REPLAY_FREE, .kind = K_SWITCH},
        [F_VERSION] = {"--version", NULL, "the version of ember-train and its library", REPLAY_FREE,
                       .kind = K_SWITCH},
};

static void usage(FILE *stream)
{
    fputs("usage: ember-train [flags]   (run under ember-run -n N, srun, or with\n"
          "       EMBER_RANK/EMBER_WORLD_SIZE/EMBER_INIT; N = trainers + 1 + ps)\n",
          stream);
    for (int f = 0; f < F_COUNT; f++) {
        char head[64];
        snprintf(head, sizeof(head), "%s%s%s", flags[f].name, flags[f].arg ? " " : "",
                 flags[f].arg ? flags[f].arg : "");
        fprintf(stream, "  %-30s ", head);
        for (const char *line = flags[f].help; line;) {
            const char *end = strchr(line, '\n');
            fwrite(line, 1, end ? (size_t)(end - line) : strlen(line), stream);
            fputs(end ? "\n                                 " : "\n", stream);
            line = end ? end + 1 : NULL;
        }
    }
}

static int find_flag(const char *name)
{
    for (int f = 0; f < F_COUNT; f++) {
        if (strcmp(flags[f].name, name) == 0)
            return f;
    }
    return strcmp(name, "-h") == 0 ? F_HELP : -1;
}

/* One line saying what was refused, then where the flags are listed. */
static ember_status_t refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static ember_status_t refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ember-train: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(ember-train --help lists the flags)\n", stderr);
    va_end(ap);
    return EMBER_ERR_INVALID_PARAM;
}

static ember_status_t bad_value(int f, const char *value)
{
    if (f == F_STALENESS) /* its range is the point of the flag: say it */
        return refuse("invalid value '%s' for %s: K is an integer in [%lld, %lld]", value,
                      flags[f].name, (long long)flags[f].min, (long long)flags[f].max);
    return refuse("invalid value '%s' for %s", value, flags[f].name);
}

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

/* --hidden W1,W2,...: @target is the job (its nhidden and hidden). */
static ember_status_t parse_hidden(int f, const char *value, void *target)
{
    ember_train_job_t *job = target;
    char *copy = strdup(value), *save = NULL;
    int64_t v;
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    job->train.nhidden = 0;
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        if (job->train.nhidden == EMBER_MAX_HIDDEN || !parse_i64(w, 1, 65536, &v)) {
            free(copy);
            return bad_value(f, value);
        }
        job->train.hidden[job->train.nhidden++] = (uint32_t)v;
    }
    free(copy);
    return job->train.nhidden ? EMBER_OK : bad_value(f, value);
}

/* --mode: the word as the wire's uint32_t (job->train.mode). */
static ember_status_t parse_mode(int f, const char *value, void *target)
{
    ember_bag_mode_t mode;
    if (ember_bag_mode_parse(value, &mode) != EMBER_OK)
        return bad_value(f, value);
    *(uint32_t *)target = (uint32_t)mode;
    return EMBER_OK;
}

static ember_status_t parse_optimizer(int f, const char *value, void *target)
{
    return ember_opt_kind_parse(value, target) == EMBER_OK ? EMBER_OK : bad_value(f, value);
}

/* --device, --ps-device: the name, as the job spells it. */
static ember_status_t parse_device(int f, const char *value, void *target)
{
    int word;
    if (!parse_word(value, flags[f].arg, &word))
        return bad_value(f, value);
    *(const char **)target = word ? "cuda" : "cpu";
    return EMBER_OK;
}

/* A Criteo source, "criteo:PATH[,PATH...]" or "criteo-npy:PREFIX[,...]",
 * into @dst (whose files are checked when a trainer opens them). */
static ember_status_t take_source(int f, const char *value, char *dst)
{
    const char *rest = strncmp(value, "criteo:", 7) == 0        ? value + 7
                       : strncmp(value, "criteo-npy:", 11) == 0 ? value + 11
                                                                : NULL;
    if (!rest)
        return refuse("%s '%s': criteo:PATH[,PATH...] or criteo-npy:PREFIX[,PREFIX...] is wanted",
                      flags[f].name, value);
    if (!*rest || strstr(rest, ",,") || rest[strlen(rest) - 1] == ',')
        return refuse("%s '%s': an empty path", flags[f].name, value);
    if (strlen(value) >= EMBER_SOURCE_MAX)
        return refuse("%s: at most %d bytes of paths, not %zu", flags[f].name, EMBER_SOURCE_MAX - 1,
                      strlen(value));
    snprintf(dst, EMBER_SOURCE_MAX, "%s", value);
    return EMBER_OK;
}

static ember_status_t parse_data(int f, const char *value, void *target)
{
    ember_train_job_t *job = target;
    if (strcmp(value, "tutorial") == 0 || strcmp(value, "synthetic") == 0) {
        job->train.data = value[0] == 't' ? EMBER_DATA_TUTORIAL : EMBER_DATA_SYNTHETIC;
        return EMBER_OK;
    }
    if (strncmp(value, "criteo", 6) != 0)
        return refuse("%s '%s': tutorial, synthetic, criteo:PATH[,PATH...] or "
                      "criteo-npy:PREFIX[,...] is wanted",
                      flags[f].name, value);
    job->train.data = EMBER_DATA_CRITEO;
    return take_source(f, value, job->train.dlrm.data);
}

static ember_status_t parse_eval(int f, const char *value, void *target)
{
    ember_train_job_t *job = target;
    return take_source(f, value, job->train.dlrm.eval);
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

static ember_status_t parse_rows_all(int f, const char *value, void *target)
{
    ember_train_job_t *job = target;
    int64_t rows;
    if (!parse_i64(value, 1, INT64_MAX / 65536, &rows))
        return bad_value(f, value);
    for (int t = 0; t < EMBER_DLRM_TABLES; t++)
        job->train.dlrm.rows[t] = rows;
    return EMBER_OK;
}

static ember_status_t parse_rows_each(int f, const char *value, void *target)
{
    ember_train_job_t *job = target;
    int64_t rows[EMBER_DLRM_TABLES + 1];
    size_t n;
    if (!parse_list(value, INT64_MAX / 65536, EMBER_DLRM_TABLES + 1, rows, &n))
        return bad_value(f, value);
    if (n != EMBER_DLRM_TABLES)
        return refuse("%s: %zu tables given; Criteo has %d categorical features, one table each",
                      flags[f].name, n, EMBER_DLRM_TABLES);
    memcpy(job->train.dlrm.rows, rows, sizeof(job->train.dlrm.rows));
    return EMBER_OK;
}

/* --dense-arch-layer-sizes, --over-arch-layer-sizes. */
static ember_status_t parse_widths(int f, const char *value, void *target)
{
    ember_dlrm_spec_t *dlrm = &((ember_train_job_t *)target)->train.dlrm;
    int64_t widths[EMBER_DLRM_MLP_MAX + 1];
    size_t n;
    if (!parse_list(value, 65536, EMBER_DLRM_MLP_MAX + 1, widths, &n) || n > EMBER_DLRM_MLP_MAX)
        return refuse("%s '%s': 1 to %d widths of 1 to 65536 are wanted", flags[f].name, value,
                      EMBER_DLRM_MLP_MAX);
    uint32_t *sizes = f == F_DENSE_ARCH ? dlrm->dense_sizes : dlrm->over_sizes;
    for (size_t l = 0; l < n; l++)
        sizes[l] = (uint32_t)widths[l];
    *(f == F_DENSE_ARCH ? &dlrm->dense_layers : &dlrm->over_layers) = (uint32_t)n;
    return EMBER_OK;
}

/* --bind was taken out of argv before (common/topology.h). */
static ember_status_t parse_bind(int f, const char *value, void *target)
{
    (void)f;
    (void)target;
    return ember_config_set("EMBER_BIND", value);
}

/* An integer into the field its flag names, converted to that field's type. */
static void store_int(target_type_t type, void *target, int64_t v)
{
    switch (type) {
    case T_INT: *(int *)target = (int)v; break;
    case T_U32: *(uint32_t *)target = (uint32_t)v; break;
    case T_I64: *(int64_t *)target = v; break;
    case T_U64: *(uint64_t *)target = (uint64_t)v; break;
    default: break;
    }
}

static ember_status_t take_int(int f, const char *value, void *target)
{
    int64_t v;
    if (!parse_i64(value, flags[f].min, flags[f].max, &v))
        return refuse("invalid value '%s' for %s (an integer in [%lld, %lld])", value,
                      flags[f].name, (long long)flags[f].min, (long long)flags[f].max);
    store_int(flags[f].type, target, v);
    return EMBER_OK;
}

static ember_status_t take_float(int f, const char *value, void *target)
{
    float v;
    if (!parse_nonneg_float(value, &v))
        return bad_value(f, value);
    if (flags[f].type == T_F64)
        *(double *)target = v;
    else
        *(float *)target = v;
    return EMBER_OK;
}

static ember_status_t take_word(int f, const char *value, void *target)
{
    int word;
    if (!parse_word(value, flags[f].arg, &word))
        return bad_value(f, value);
    store_int(flags[f].type, target, flags[f].values[word]);
    return EMBER_OK;
}

static ember_status_t take_path(int f, const char *value, void *target)
{
    if (!*value || strlen(value) >= EMBER_PATH_MAX)
        return refuse("%s: a path of 1 to 511 bytes is wanted, not '%s'", flags[f].name, value);
    *(const char **)target = value;
    return EMBER_OK;
}

/* Take one flag's value into the field its table entry names. */
static ember_status_t apply_flag(int f, const char *value, ember_train_job_t *job, parsed_t *parsed)
{
    const flag_t *flag = &flags[f];
    void *target = flag->at == AT_JOB      ? (void *)((char *)job + flag->offset)
                   : flag->at == AT_PARSED ? (void *)((char *)parsed + flag->offset)
                                           : NULL;
    switch (flag->kind) {
    case K_SWITCH: store_int(flag->type, target, 1); return EMBER_OK;
    case K_INT: return take_int(f, value, target);
    case K_FLOAT: return take_float(f, value, target);
    case K_WORD: return take_word(f, value, target);
    case K_PATH:
        EMBER_CHECK(take_path(f, value, target));
        if (f == F_REPLAY) /* the batches come from the file */
            job->train.data = EMBER_DATA_REPLAY;
        return EMBER_OK;
    case K_CUSTOM: return flag->parse(f, value, target);
    }
    return EMBER_ERR_INVALID_PARAM;
}

/* "--trainers 3", "--weights": a flag as it was given. */
static void given_text(const ember_train_job_t *job, int f, char *text, size_t length)
{
    const char *value = job->flag_values[f];
    snprintf(text, length, "%s%s%s", flags[f].name, value && *value ? " " : "", value ? value : "");
}

/* With --replay, what the file has no such thing for (REPLAY_REFUSED), and
 * async consistency (a replay is sync) or EMBER_SEED, are refused now; the
 * flags the file also sets are compared with it once it is read
 * (ember_train_job_take_replay). */
static ember_status_t check_replay_flags(const ember_train_job_t *job)
{
    char given[128];
    for (int f = 0; f < F_COUNT; f++) {
        if (flags[f].replay != REPLAY_REFUSED || !(job->given & (1ull << f)))
            continue;
        given_text(job, f, given, sizeof(given));
        return refuse("%s cannot be honoured with --replay %s: the file holds the "
                      "model, its initial weights and every batch; drop the flag",
                      given, job->replay_path);
    }
    if (job->train.consistency == EMBER_ASYNC)
        return refuse("%s cannot be honoured with --replay %s: a replay trains in "
                      "sync mode",
                      job->given & (1ull << F_CONSISTENCY) ? "--consistency async"
                                                           : "EMBER_CONSISTENCY=async",
                      job->replay_path);
    if (ember_config_is_set("EMBER_SEED"))
        return refuse("EMBER_SEED cannot be honoured with --replay %s: the file holds "
                      "the initial weights and the batches",
                      job->replay_path);
    return EMBER_OK;
}

#define GIVEN(job, f) (((job)->given >> (f)) & 1u)

/* Flags of one model given for the other: refused by name. */
static ember_status_t check_model_flags(const ember_train_job_t *job)
{
    static const int tutorial_only[] = {F_ROWS,   F_DIM,         F_CLASSES,     F_HIDDEN,
                                        F_MODE,   F_PADDING_IDX, F_WEIGHTS,     F_BATCHES,
                                        F_REPLAY, F_MIN_INDICES, F_MAX_INDICES, F_REPLAY_TOLERANCE};
    static const int dlrm_only[] = {F_EMBEDDING_DIM, F_NUM_EMBEDDINGS, F_NUM_EMBEDDINGS_PER_FEATURE,
                                    F_DENSE_ARCH,    F_OVER_ARCH,      F_BATCH_SIZE,
                                    F_STEPS,         F_SHARDING,       F_EVAL,
                                    F_EVAL_EVERY};
    const int dlrm = job->train.model == EMBER_MODEL_DLRM;
    const int *list = dlrm ? tutorial_only : dlrm_only;
    size_t n = dlrm ? sizeof(tutorial_only) / sizeof(int) : sizeof(dlrm_only) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
        if (GIVEN(job, list[i]))
            return refuse(
                    "%s is %s: %s", flags[list[i]].name, dlrm ? "the tutorial model's" : "DLRM's",
                    dlrm ? "--model dlrm has its own flags (--help)" : "it needs --model dlrm");
    }
    if (dlrm != (job->train.data == EMBER_DATA_CRITEO))
        return refuse("%s", dlrm ? "--model dlrm trains on --data criteo:PATH or criteo-npy:PREFIX"
                                 : "--data criteo: is DLRM's data: it needs --model dlrm");
    return EMBER_OK;
}

/* DLRM's shapes fit together. */
static ember_status_t check_dlrm(const ember_train_job_t *job)
{
    const ember_dlrm_spec_t *d = &job->train.dlrm;
    if (d->dense_sizes[d->dense_layers - 1] != job->train.dim)
        return refuse("--dense-arch-layer-sizes must end in the embedding dimension (%u), not %u",
                      job->train.dim, d->dense_sizes[d->dense_layers - 1]);
    if (d->over_layers < 2)
        return refuse("--over-arch-layer-sizes %u: OverArch needs at least two layers "
                      "(TorchRec's OverArch refuses one), the last of width 1",
                      d->over_sizes[0]);
    if (d->over_sizes[d->over_layers - 1] != 1)
        return refuse("--over-arch-layer-sizes must end in 1 (the logit), not %u",
                      d->over_sizes[d->over_layers - 1]);
    if (GIVEN(job, F_NUM_EMBEDDINGS) && GIVEN(job, F_NUM_EMBEDDINGS_PER_FEATURE))
        return refuse("%s and %s both say the tables' rows: give one", "--num-embeddings",
                      "--num-embeddings-per-feature");
    if (GIVEN(job, F_EVAL_EVERY) && !d->eval[0])
        return refuse("%s needs %s", "--eval-every", "--eval criteo:PATH");
    if (ember_dlrm_params(&job->train) == 0)
        return refuse("%s: the model's sizes are out of range", "--model dlrm");
    return EMBER_OK;
}

/* DLRM's defaults (TorchRec dlrm_main's) where no flag set them. */
static void dlrm_defaults(ember_train_job_t *job)
{
    ember_dlrm_spec_t *d = &job->train.dlrm;
    static const uint32_t dense[] = {512, 256, 64}, over[] = {512, 512, 256, 1};
    d->tables = EMBER_DLRM_TABLES;
    if (!GIVEN(job, F_EMBEDDING_DIM))
        job->train.dim = 64;
    if (!GIVEN(job, F_NUM_EMBEDDINGS) && !GIVEN(job, F_NUM_EMBEDDINGS_PER_FEATURE))
        for (int t = 0; t < EMBER_DLRM_TABLES; t++)
            d->rows[t] = 100000;
    if (!GIVEN(job, F_DENSE_ARCH)) {
        d->dense_layers = 3;
        memcpy(d->dense_sizes, dense, sizeof(dense));
    }
    if (!GIVEN(job, F_OVER_ARCH)) {
        d->over_layers = 4;
        memcpy(d->over_sizes, over, sizeof(over));
    }
    if (!GIVEN(job, F_BATCH_SIZE))
        d->batch_size = 32;
    if (!GIVEN(job, F_EPOCHS))
        job->train.epochs = 1;
    job->train.classes = 2; /* a click or not: one logit */
}

/* Checkpoints: where, in sync mode; a resumed job's start is the checkpoint. */
static ember_status_t check_checkpoint_flags(const ember_train_job_t *job)
{
    if ((GIVEN(job, F_CHECKPOINT_EVERY) || GIVEN(job, F_CHECKPOINT_KEEP)) && !job->checkpoint_dir)
        return refuse("%s needs %s",
                      GIVEN(job, F_CHECKPOINT_EVERY) ? "--checkpoint-every" : "--checkpoint-keep",
                      "--checkpoint-dir DIR");
    if ((job->checkpoint_dir || job->resume_path) && job->train.consistency == EMBER_ASYNC)
        return refuse("%s: checkpoints are taken at a step boundary, which %s does not have",
                      job->checkpoint_dir ? "--checkpoint-dir" : "--resume", "--consistency async");
    if (job->resume_path && job->init_path)
        return refuse("%s and %s both say where the weights start: give one", "--resume", "--init");
    if ((job->checkpoint_dir || job->resume_path) && job->train.staleness > 0)
        return refuse("%s with --staleness %u: a checkpoint is the tables at a step boundary, "
                      "and with staleness the trainers' next lookups have already read past it "
                      "(its resume would not be the run it stopped); use --staleness 0",
                      job->checkpoint_dir ? "--checkpoint-dir" : "--resume", job->train.staleness);
    return EMBER_OK;
}

/* Flags that only mean something together with others. */
static ember_status_t check_combinations(const ember_train_job_t *job, const parsed_t *parsed)
{
    EMBER_CHECK(check_model_flags(job));
    if (job->train.model == EMBER_MODEL_DLRM)
        EMBER_CHECK(check_dlrm(job));
    if (job->replay_path) /* first: the file sets most of what is checked below */
        EMBER_CHECK(check_replay_flags(job));
    if (job->train.min_indices > job->train.max_indices)
        return refuse("%s is greater than %s", "--min-indices", "--max-indices");
    if (job->train.padding_idx >= job->train.rows)
        return refuse("%s: not a row of the table (%s)", "--padding-idx",
                      "rows are 0 .. --rows - 1");
    if (job->train.per_sample_weights && job->train.mode != EMBER_BAG_SUM)
        return refuse("%s: per-sample weights need %s", "--weights", "--mode sum");
    if ((job->given & (1ull << F_MOMENTUM)) && parsed->kind != EMBER_OPT_SGD)
        return refuse("%s is SGD's: --optimizer %s has none", "--momentum",
                      ember_opt_kind_name(parsed->kind));
    if (job->train.staleness > 0 && job->train.consistency == EMBER_ASYNC)
        return refuse("%s bounds how far a sync lookup may be behind the step's updates: %s "
                      "has no steps to be behind",
                      "--staleness", "--consistency async");
    if (job->train.staleness > 0 && job->replay_path)
        return refuse("--staleness %u with --replay %s: the file's expected values are "
                      "sync training's (--staleness 0)",
                      job->train.staleness, job->replay_path);
    if ((job->given & (1ull << F_SPARSE_REDUCE)) && job->train.consistency == EMBER_ASYNC)
        return refuse("%s is how sync steps combine gradients: %s applies each as it "
                      "comes",
                      "--sparse-reduce", "--consistency async");
    if (job->table_dtype == EMBER_DTYPE_F16 && strcmp(job->ps_device, "cuda") == 0)
        return refuse("%s: a PS on a GPU keeps fp32 rows (%s)", "--table-dtype fp16",
                      "--ps-device cuda");
    if ((job->given & (1ull << F_REPLAY_TOLERANCE)) && !job->replay_path)
        return refuse("%s checks a replay: it needs %s", "--replay-tolerance", "--replay FILE");
    return check_checkpoint_flags(job);
}

static void job_defaults(ember_train_job_t *job)
{
    const char *consistency = ember_config_str("EMBER_CONSISTENCY");
    *job = (ember_train_job_t){.trainers = 2,
                               .num_ps = 1,
                               .train.rows = 100,
                               .train.dim = 16,
                               .train.classes = 8,
                               .train.mode = EMBER_BAG_SUM,
                               .train.padding_idx = -1,
                               .train.epochs = 100,
                               .train.batches = 10,
                               .train.min_indices = 20,
                               .train.max_indices = 50,
                               .train.seed = (uint64_t)ember_config_int("EMBER_SEED"),
                               .train.data = EMBER_DATA_TUTORIAL,
                               .metrics_path = ember_config_str("EMBER_METRICS"),
                               .device = "cpu",
                               .ps_device = "cpu",
                               .replay_tolerance = 1e-4,
                               .checkpoint_keep = 3};
    job->train.consistency =
            consistency && strcasecmp(consistency, "async") == 0 ? EMBER_ASYNC : EMBER_SYNC;
}

ember_status_t ember_train_job_parse(int argc, char **argv, ember_train_job_t *job,
                                     ember_train_job_action_t *action_p)
{
    parsed_t parsed = {.kind = EMBER_OPT_SGD, .lr = 0.05f, .momentum = 0.0f};

    *action_p = EMBER_JOB_RUN;
    job_defaults(job);
    for (int i = 1; i < argc; i++) {
        int f = find_flag(argv[i]);
        if (f < 0)
            return refuse("unknown flag '%s'", argv[i]);
        if (f == F_HELP || f == F_VERSION) {
            if (f == F_HELP)
                usage(stdout);
            *action_p = f == F_HELP ? EMBER_JOB_HELP : EMBER_JOB_VERSION;
            return EMBER_OK;
        }
        if (job->given & (1ull << f))
            return refuse("%s is given twice", flags[f].name);
        job->given |= 1ull << f;
        const char *value = "";
        if (flags[f].arg) {
            if (i + 1 >= argc)
                return refuse("%s needs a value (%s)", flags[f].name, flags[f].arg);
            value = argv[++i];
        }
        job->flag_values[f] = value;
        EMBER_CHECK(apply_flag(f, value, job, &parsed));
    }
    if (job->train.model == EMBER_MODEL_DLRM)
        dlrm_defaults(job);
    EMBER_CHECK(check_combinations(job, &parsed));
    ember_opt_config_default(parsed.kind, parsed.lr, &job->train.optimizer);
    job->train.optimizer.momentum = parsed.momentum;
    return EMBER_OK;
}

/* What a REPLAY_COMPARED flag sets, as text, so the job's and the file's can
 * be compared and named alike. */
static void setting_text(const ember_train_job_t *job, int f, char *text, size_t length)
{
    switch (f) {
    case F_TRAINERS: snprintf(text, length, "%d trainers", job->trainers); break;
    case F_ROWS: snprintf(text, length, "%lld rows", (long long)job->train.rows); break;
    case F_DIM: snprintf(text, length, "dim %u", job->train.dim); break;
    case F_CLASSES: snprintf(text, length, "%u classes", job->train.classes); break;
    case F_MODE: snprintf(text, length, "mode %s", ember_bag_mode_name(job->train.mode)); break;
    case F_WEIGHTS:
        snprintf(text, length, "%s per-sample weights",
                 job->train.per_sample_weights ? "its" : "no");
        break;
    case F_OPTIMIZER:
        snprintf(text, length, "optimizer %s", ember_opt_kind_name(job->train.optimizer.kind));
        break;
    case F_LR: snprintf(text, length, "lr %g", (double)job->train.optimizer.lr); break;
    case F_MOMENTUM:
        snprintf(text, length, "momentum %g", (double)job->train.optimizer.momentum);
        break;
    default: /* F_SPARSE_REDUCE */
        snprintf(text, length, "sparse_reduce %s",
                 job->sparse_reduce == EMBER_REDUCE_MEAN ? "mean" : "sum");
        break;
    }
}

/* The job as the replay file @info says it trains. */
static ember_status_t replay_job(const ember_train_job_t *job, const ember_replay_info_t *info,
                                 ember_train_job_t *file)
{
    *file = *job;
    if (strcmp(info->optimizer, "sgd") != 0) {
        fprintf(stderr, "ember-train: %s: replay supports the sgd optimizer, not %s\n",
                job->replay_path, info->optimizer);
        return EMBER_ERR_UNSUPPORTED;
    }
    /* ember_replay_info checked the words; this only converts them. */
    ember_bag_mode_t mode;
    if (ember_bag_mode_parse(info->mode, &mode) != EMBER_OK) {
        fprintf(stderr,
                "ember-train: %s: metadata 'mode' is '%s', not sum, mean or "
                "max\n",
                job->replay_path, info->mode);
        return EMBER_ERR_FORMAT;
    }
    file->train.mode = mode;
    file->train.rows = info->rows;
    file->train.dim = info->dim;
    file->train.classes = info->classes;
    file->trainers = (int)info->trainers;
    file->train.per_sample_weights = (int)info->per_sample_weights;
    file->train.consistency = EMBER_SYNC;
    file->sparse_reduce =
            strcmp(info->sparse_reduce, "mean") == 0 ? EMBER_REDUCE_MEAN : EMBER_REDUCE_SUM;
    file->train.padding_idx = -1;
    ember_opt_config_default(EMBER_OPT_SGD, (float)info->lr, &file->train.optimizer);
    return EMBER_OK;
}

ember_status_t ember_train_job_take_replay(ember_train_job_t *job)
{
    ember_replay_info_t info;
    ember_train_job_t file;
    char err[256], mine[96], theirs[96], given[128];
    ember_status_t status = ember_replay_info(job->replay_path, &info, err, sizeof(err));
    if (status != EMBER_OK) {
        fprintf(stderr, "ember-train: %s\n", err);
        return status;
    }
    EMBER_CHECK(replay_job(job, &info, &file));
    for (int f = 0; f < F_COUNT; f++) {
        if (flags[f].replay != REPLAY_COMPARED || !(job->given & (1ull << f)))
            continue;
        setting_text(job, f, mine, sizeof(mine));
        setting_text(&file, f, theirs, sizeof(theirs));
        if (strcmp(mine, theirs) == 0)
            continue; /* says what the file says: honoured */
        given_text(job, f, given, sizeof(given));
        return refuse("%s cannot be honoured with --replay %s: the file trains with %s", given,
                      job->replay_path, theirs);
    }
    *job = file;
    return EMBER_OK;
}

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

ember_status_t ember_train_job_check_outputs(const ember_train_job_t *job)
{
    if (job->save_path)
        EMBER_CHECK(check_writable("--save", job->save_path));
    if (job->init_path && access(job->init_path, R_OK) != 0) {
        fprintf(stderr, "ember-train: --init %s: %s; nothing was run\n", job->init_path,
                strerror(errno));
        return EMBER_ERR_IO;
    }
    if (job->metrics_path)
        EMBER_CHECK(check_writable(job->given & (1ull << F_METRICS) ? "--metrics" : "EMBER_METRICS",
                                   job->metrics_path));
    return EMBER_OK;
}
