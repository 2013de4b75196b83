/*
 * models/model.h: the interface between ember-train and its models.
 *
 * ember-train (tools/ember-train/) is a generic driver over the public API:
 * it parses the flags, joins the job, creates the tables, starts the
 * trainers, runs the one training loop (lookups, pushes, checkpoints,
 * evaluations) and prints what happens.  What is particular to a model is
 * here, as the hooks of its ember_model_ops_t: its flags and configuration,
 * its description (the text that TRAIN_START carries and checkpoints keep),
 * its tables and features, its initial weights and saved files, and on each
 * trainer its data and its dense half.  A model is a folder of models/
 * including only public headers (<ember/...>), this file and models/common/;
 * it is registered by one line of models/models.c.
 *
 * Calls: the configuration hooks run on every rank as the flags are read
 * (before the job is joined); the master's hooks on the master; the
 * trainer's hooks on each trainer, one thread, between its lookups (the
 * driver progresses the job).  Errors: a hook that fails returns its status
 * and one line in @err (the driver adds who and when: rank, trainer, step).
 */
#ifndef EMBER_MODELS_MODEL_H
#define EMBER_MODELS_MODEL_H

#include "models/common/text.h"

#include <ember/allreduce.h>
#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>
#include <ember/lookup.h>
#include <ember/optimizer.h>
#include <ember/status.h>
#include <ember/table.h>

#include <stddef.h>
#include <stdint.h>

/* ---- flags ------------------------------------------------------------------ */

/* How a flag's value is read (the driver reads every flag, the models' too). */
typedef enum {
    EMBER_FLAG_SWITCH, /* no value: its int field set to 1 */
    EMBER_FLAG_INT,    /* an integer in [min, max], read at full width */
    EMBER_FLAG_FLOAT,  /* a finite float >= 0 */
    EMBER_FLAG_WORD,   /* one of the words of its arg ("sum|mean"): sets values[i] */
    EMBER_FLAG_PATH,   /* a path of 1 to 511 bytes (borrowed from argv) */
    EMBER_FLAG_CUSTOM  /* its own parser */
} ember_flag_kind_t;

/* The type of the field a flag sets (an enum is its integer type). */
typedef enum {
    EMBER_FIELD_NONE, /* a custom flag that takes the whole configuration */
    EMBER_FIELD_INT,
    EMBER_FIELD_U32,
    EMBER_FIELD_I64,
    EMBER_FIELD_U64,
    EMBER_FIELD_F32,
    EMBER_FIELD_F64,
    EMBER_FIELD_STR
} ember_field_t;

#define EMBER_FIELD_TYPE(type, member) \
    _Generic(((type *)0)->member,                                                                  \
            int: EMBER_FIELD_INT,                                                                  \
            uint32_t: EMBER_FIELD_U32,                                                             \
            int64_t: EMBER_FIELD_I64,                                                              \
            uint64_t: EMBER_FIELD_U64,                                                             \
            float: EMBER_FIELD_F32,                                                                \
            double: EMBER_FIELD_F64,                                                               \
            const char *: EMBER_FIELD_STR)
/* The field @member of @type (the model's configuration) a flag sets. */
#define EMBER_FLAG_FIELD(type, member) \
    .offset = offsetof(type, member), .field = EMBER_FIELD_TYPE(type, member)

/* A custom flag's parser: @value (borrowed from argv) into @target (its
 * field, or the whole configuration with EMBER_FIELD_NONE).  Returns
 * ERR_INVALID_PARAM with @err empty for "invalid value 'V' for FLAG", or
 * with the line to print instead. */
typedef ember_status_t (*ember_flag_parse_cb)(const char *flag, const char *value, void *target,
                                              char *err, size_t err_length);

typedef struct {
    const char *name; /* "--rows" */
    const char *arg;  /* what it takes ("R"); NULL: a switch */
    const char *help; /* lines after the first are indented by --help */
    ember_flag_kind_t kind;
    int64_t min, max;          /* EMBER_FLAG_INT */
    const int *values;         /* EMBER_FLAG_WORD: what each word of arg sets */
    ember_flag_parse_cb parse; /* EMBER_FLAG_CUSTOM */
    size_t offset;             /* the field it sets */
    ember_field_t field;
} ember_flag_t;

/* A flag as the command line gave it. */
typedef struct {
    const char *name;  /* "--rows" */
    const char *value; /* its value as given ("" for a switch) */
} ember_flag_given_t;

/* ---- the driver's settings, as a model sees them -------------------------------- */

/* What ember-train's own flags say (a model's check may take some over:
 * a replay file states the trainers, the optimizer and the consistency). */
typedef struct {
    int trainers, num_ps;
    ember_opt_config_t optimizer; /* the tables' (and, as models choose, the dense layers') */
    ember_consistency_t consistency;
    uint32_t staleness;
    ember_sparse_reduce_t sparse_reduce;
    ember_dtype_t table_dtype;
    int half_replies; /* --reply-dtype fp16 */
    uint64_t seed;
    uint32_t epochs;
    const char *data;      /* --data as given (NULL: not given); the models read it */
    const char *init_path; /* --init FILE or DIR (NULL: none) */
    const char *device;    /* the trainers' dense half: "cpu" or "cuda" */
    const char *ps_device; /* the PS's shards: "cpu" or "cuda" */
    /* --table-kind dynamic: every table dynamic, with these settings
     * (<ember/table.h>); --table-budget in bytes is made rows per table.
     * The settings are also those of the tables a model makes dynamic
     * itself (ember_model_table_t.kind) under --table-kind fixed. */
    ember_table_kind_t table_kind;
    ember_table_dynamic_t dynamic;
    uint64_t budget_bytes;
    /* --cache-rows: rows of each trainer's row cache over its tables
     * (<ember/lookup.h>'s ember_ebc_set_cache_rows; 0: none) */
    uint64_t cache_rows;
} ember_train_settings_t;

/* ---- a model's shape ------------------------------------------------------------ */

#define EMBER_MODEL_TABLES_MAX  64  /* a job's tables at once (a PS serves ids 0..63) */
#define EMBER_MODEL_TENSORS_MAX 256 /* tensors of a saved model */
#define EMBER_MODEL_NAME_MAX    128 /* a saved tensor's name, its NUL included */

/* One of its tables, placed on the job's PS. */
typedef struct {
    char name[EMBER_TABLE_NAME_MAX];
    int64_t rows;
    uint32_t dim;
    ember_table_init_t init; /* what the PS draw when the model gives no rows: NORMAL, UNIFORM */
    uint64_t seed;
    ember_sharding_t sharding;
    uint32_t first_ps, num_shards; /* row-wise: num_shards 0 is every PS from first_ps on */
    /* FIXED (0, what a zeroed table says) or DYNAMIC: the master creates it
     * so (ember_table_create_dynamic, with the settings' dynamic settings
     * and budget); --table-kind dynamic makes every table dynamic whatever
     * this says.  A model whose data gives a dynamic table raw ids sets it
     * (DLRM: its schema's kind=dynamic). */
    ember_table_kind_t kind;
} ember_model_table_t;

/* One sparse feature: the ebc's, in order (a table's features adjacent). */
typedef struct {
    char name[EMBER_TABLE_NAME_MAX]; /* for errors */
    uint32_t table;                  /* its table, an index into the model's */
    ember_bag_mode_t pooling;
    int64_t padding_idx; /* -1: none */
} ember_model_feature_t;

/* One tensor of the model's saved file (--save, --init FILE; the dense ones
 * also a trainer's checkpoint file), named as its PyTorch module names it. */
typedef struct {
    char name[EMBER_MODEL_NAME_MAX];
    size_t ndim;
    int64_t shape[2];
    int table;     /* >= 0: that table's rows, [rows][dim]; -1: dense parameters */
    size_t offset; /* a dense tensor's first float in the flat dense parameters */
} ember_model_tensor_t;

/* ---- a trainer's side ----------------------------------------------------------- */

/* One batch as the driver sees it: the sparse part the lookup reads, and
 * the model's own. */
typedef struct {
    ember_kjt_t kjt;     /* the ebc's features' ids (the model's until released) */
    size_t examples;     /* what the epoch lines count (bags, examples); 0: the epoch's end */
    const float *labels; /* an evaluation's targets [examples], 0 or 1 (host); NULL in training */
    const void *own;     /* the model's own (its dense inputs, its targets) */
} ember_model_batch_t;

/* What a trainer's model is made with (all borrowed for its life). */
typedef struct {
    const void *config; /* the model's, as TRAIN_START described it */
    const ember_train_settings_t *settings;
    int trainer;                  /* this trainer's index */
    ember_device_t *device;       /* where its dense half runs */
    ember_allreduce_t *allreduce; /* the trainers' dense allreduce on @device */
    const float *params;          /* the initial dense parameters (copied) */
} ember_model_trainer_args_t;

/* ---- the hooks ------------------------------------------------------------------ */

typedef struct ember_model_ops {
    size_t size;       /* sizeof(ember_model_ops_t) it was built with */
    const char *name;  /* --model's word ("tutorial", "dlrm") */
    const char *whose; /* its flags' owner in refusals: "the tutorial model's", "DLRM's" */
    const char *help;  /* --model's help for it */
    const char *unit;  /* what the epoch lines count: "bags", "examples" */
    uint32_t epochs;   /* --epochs' default */

    /* -- its configuration, on every rank -------------------------------------- */
    const ember_flag_t *flags; /* its own, in --help's order */
    size_t nflags;
    size_t config_size; /* bytes of its configuration (the driver allocates it) */
    /** The defaults, before the flags. */
    void (*defaults)(void *config);
    /* --data: what it trains on, for the refusals ("tutorial, synthetic";
     * "criteo:" and "trains on --data criteo:PATH or criteo-npy:PREFIX"). */
    const char *data_words;
    const char *data_name;
    const char *data_need;
    /** @value (NULL: not given) taken as its data, or ERR_NOT_FOUND when it
     * is not this model's kind of data (no line), or a refusal. */
    ember_status_t (*data)(void *config, const char *value, char *err, size_t err_length);
    /** The flags read (@given, in the command line's order): what only
     * means something together, what it takes over of @settings, and the
     * files they name read (a replay's).  ERR_INVALID_PARAM: a flag refused
     * (the driver adds where the flags are listed); other errors: a file's. */
    ember_status_t (*check)(void *config, ember_train_settings_t *settings,
                            const ember_flag_given_t *given, size_t ngiven, char *err,
                            size_t err_length);

    /* -- its description: TRAIN_START's and the checkpoints' text --------------- */
    /** The configuration as key=value lines (models/common/text.h). */
    void (*describe)(const void *config, model_text_t *text);
    /** A description read back into @config, every value checked as its flag
     * would be (errors name the key). */
    ember_status_t (*parse)(void *config, const char *text, char *err, size_t err_length);
    /** A checkpoint's configuration @was against this job's @now: NULL when
     * a job of @now may go on from it, else the flags of the first setting
     * that must not change ("--hidden"). */
    const char *(*differs)(const void *was, const void *now);

    /* -- its shape --------------------------------------------------------------- */
    /** Its tables into @out (at most EMBER_MODEL_TABLES_MAX), placed on
     * @settings' PS; their count. */
    size_t (*tables)(const void *config, const ember_train_settings_t *settings,
                     ember_model_table_t *out);
    /** Its sparse features into @out (at most EMBER_MODEL_TABLES_MAX); their count. */
    size_t (*features)(const void *config, ember_model_feature_t *out);
    /** The tensors of its saved file, tables first, into @out (at most
     * EMBER_MODEL_TENSORS_MAX); their count. */
    size_t (*tensors)(const void *config, ember_model_tensor_t *out);
    /** Its dense parameters, in floats. */
    size_t (*params)(const void *config);

    /* -- the master ------------------------------------------------------------ */
    /** The dense parameters to start from into @params, and for each table t
     * either its initial rows in @rows[t] (malloc'd [rows][dim], the driver
     * frees them) or NULL (the PS draw it as its table says).  --init and
     * --resume are the driver's. */
    ember_status_t (*initial)(const void *config, const ember_train_settings_t *settings,
                              float *params, float **rows, char *err, size_t err_length);
    /** The "training: ..." line: what is trained, where and how. */
    void (*print)(const void *config, const ember_train_settings_t *settings,
                  const ember_model_table_t *tables, size_t ntables);
    /** Whether this job's result is checked (verify); NULL: never. */
    int (*verifies)(const void *config);
    /** After training, before the save: a check of the result
     * (every table's rows, the dense parameters, the losses [steps][trainers])
     * that prints its verdict; ERR_NUMERIC when it fails. */
    ember_status_t (*verify)(const void *config, const ember_train_settings_t *settings,
                             const float *const *rows, const float *params, const float *losses,
                             uint64_t steps);

    /* -- a trainer ------------------------------------------------------------- */
    /** Its data and its dense half (errors name the file). */
    ember_status_t (*trainer_create)(const ember_model_trainer_args_t *args, void **trainer_p,
                                     char *err, size_t err_length);
    void (*trainer_destroy)(void *trainer);
    /** Steps of the job at most (0: its data and the epochs decide). */
    uint64_t (*max_steps)(const void *config);
    /**
     * The next batch (step @step of the job) into @batch, held until
     * release (the driver holds at most two: a step's and the next one's);
     * examples 0 at the end of the epoch (nothing held; the next call
     * starts the next epoch).  @skip: a resumed job's step before its start,
     * only passed by (its batch is not used).  A batch its table refuses:
     * *@table_p names the table.
     */
    ember_status_t (*take)(void *trainer, uint64_t step, int skip, ember_model_batch_t *batch,
                           const char **table_p, char *err, size_t err_length);
    /** The oldest batch held is the model's again. */
    void (*release)(void *trainer);
    /** Forward and loss of @batch from the pooled features @pooled (the
     * ebc's output layout on the device, borrowed until the backward). */
    ember_status_t (*forward)(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                              float *loss_p, char *err, size_t err_length);
    /** The backward: the pooled features' gradient in *@grad_p (device
     * memory, the model's, valid until the next forward), its dense
     * gradients on their way through the allreduce. */
    ember_status_t (*backward)(void *trainer, const float **grad_p, char *err, size_t err_length);
    /** The allreduce waited for and the dense optimizers stepped. */
    ember_status_t (*step)(void *trainer, char *err, size_t err_length);
    /** The dense parameters as the last step left them (host memory, the
     * params() floats). */
    const float *(*trainer_params)(void *trainer);
    /** Its dense optimizers into @out (at most EMBER_MODEL_OPTS_MAX): their
     * state goes into checkpoints. */
    size_t (*optimizers)(void *trainer, ember_opt_t **out);

    /* -- evaluations (NULL eval_take: the model has none) -------------------------- */
    /** Steps between evaluations (0: at the end only); none when eval_take
     * says the job has no evaluation data. */
    uint64_t (*eval_every)(const void *config);
    /** Whether this job evaluates (its flags gave evaluation data). */
    int (*evaluates)(const void *config);
    /** The evaluation's next batch (valid until the next call); examples 0
     * at its end (the next call starts it again). */
    ember_status_t (*eval_take)(void *trainer, ember_model_batch_t *batch, char *err,
                                size_t err_length);
    /** The logits of @batch into @logits ([examples], host memory). */
    ember_status_t (*logits)(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                             float *logits, char *err, size_t err_length);

    /* -- appended: read only where size says the model has them ------------------- */
    /** The steps of one epoch of this trainer's data (every trainer takes as
     * many: those the take hook gives before its epoch's end), or 0 while
     * the model does not know it (yet): a stream that learns its size on
     * reaching its end says it from then on.  Called on the trainer between
     * steps, after take; must not block.  NULL: never known.  The progress
     * lines' fraction of the epoch and time left come from it (DLRM: its
     * stream's ember_data_epoch_examples() / (batch size x trainers), once
     * that is not 0). */
    uint64_t (*epoch_steps)(void *trainer);
} ember_model_ops_t;

/** Whether @model (built with its own sizeof, @model->size) has the
 * appended hook @member, and sets it. */
#define EMBER_MODEL_HAS(model, member)                                                 \
    ((model)->size >= offsetof(ember_model_ops_t, member) + sizeof((model)->member) && \
     (model)->member != NULL)

#define EMBER_MODEL_OPTS_MAX 4 /* dense optimizers of a model */

/** The models ember-train ships (models/models.c), NULL-terminated; the
 * first is --model's default. */
extern const ember_model_ops_t *const ember_models[];

/** The model named @name, or NULL. */
const ember_model_ops_t *ember_model_find(const char *name);

/* ---- helpers for the hooks ------------------------------------------------------- */

/** The value @name was given on the command line, or NULL. */
static inline const char *ember_flag_value(const ember_flag_given_t *given, size_t ngiven,
                                           const char *name)
{
    for (size_t i = 0; i < ngiven; i++) {
        const char *a = given[i].name, *b = name;
        while (*a && *a == *b)
            a++, b++;
        if (*a == *b)
            return given[i].value;
    }
    return NULL;
}

#endif
