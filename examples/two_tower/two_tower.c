/*
 * two_tower: a two-tower retrieval model trained on ember, a model ember
 * does not ship, built against the installed package (README.md).
 *
 *     ember-run -n 4 ./two_tower --data data.st --out out.st
 *
 * Every rank of the job runs this program: ranks 0 .. T-1 train, the last
 * P ranks serve the embedding tables (ember_ps_serve).  Trainer 0 is the
 * job's coordinator: it creates the tables, the other trainers open them.
 *
 * The sparse half (embedding tables and their optimizer) lives on the PS:
 *   "user"     [users][D]       the user_id feature
 *   "item"     [items][D]       the history feature (items the user saw
 *                               recently, mean-pooled) and the item_id
 *                               feature: one table, two features
 *   "category" [categories][D]  the categories feature (mean-pooled)
 * The dense half (model.c: the two towers, the dot product, BCE) runs on
 * every trainer in plain C; its gradients are averaged over the trainers
 * with ember_allreduce (as DDP) and stepped with ember's dense optimizer.
 *
 * Trainer t of T takes, at step s, the examples s*T*B + j*T + t (j < B) of
 * the data file; the PS apply a step once every trainer's gradients are in
 * (sync), summed or averaged over the trainers (--sparse-reduce).
 *
 * --out: trainer 0 writes, as safetensors, every trainer's loss of every
 * step ("loss" [steps][T]) and the weights under PyTorch's names, as they
 * were before the first step ("init." + name) and after the last.
 */
#define _POSIX_C_SOURCE 200809L /* stat, unlink */

#include "data.h"
#include "model.h"

#include <ember/allreduce.h>
#include <ember/job.h>
#include <ember/lookup.h>
#include <ember/optimizer.h>
#include <ember/ps.h>
#include <ember/safetensors.h>
#include <ember/status.h>
#include <ember/table.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- flags ------------------------------------------------------------------- */

typedef struct {
    const char *data, *out;
    uint64_t trainers, num_ps;
    uint64_t steps; /* 0: every whole global batch of the data */
    uint64_t batch, dim, hidden, tower_dim;
    float lr, sparse_lr;
    ember_opt_kind_t optimizer, sparse_optimizer;
    ember_sparse_reduce_t sparse_reduce;
    uint64_t seed;
} flags_t;

typedef enum {
    FLAG_PATH,
    FLAG_COUNT,      /* an integer in [min, max] */
    FLAG_RATE,       /* a finite float > 0 */
    FLAG_DENSE_OPT,  /* sgd, adagrad, adam */
    FLAG_SPARSE_OPT, /* sgd, adagrad, rowwise_adagrad */
    FLAG_REDUCE      /* sum, mean */
} flag_kind_t;

typedef struct {
    const char *name;
    flag_kind_t kind;
    size_t offset; /* of its field in flags_t */
    uint64_t min, max;
    const char *help;
} flag_spec_t;

#define FIELD(f) offsetof(flags_t, f)
static const flag_spec_t flag_specs[] = {
        {"--data", FLAG_PATH, FIELD(data), 0, 0, "the data file (gen_data.py), required"},
        {"--out", FLAG_PATH, FIELD(out), 0, 0, "where trainer 0 writes losses and weights"},
        {"--trainers", FLAG_COUNT, FIELD(trainers), 1, 1024, "trainers T (2)"},
        {"--ps", FLAG_COUNT, FIELD(num_ps), 1, 1024,
         "parameter servers P (the ranks that are not trainers)"},
        {"--steps", FLAG_COUNT, FIELD(steps), 1, 1ull << 40,
         "steps (every whole global batch of the data)"},
        {"--batch", FLAG_COUNT, FIELD(batch), 1, 1u << 20, "examples a trainer a step (32)"},
        {"--dim", FLAG_COUNT, FIELD(dim), 1, 4096, "embedding dimension D (16)"},
        {"--hidden", FLAG_COUNT, FIELD(hidden), 1, 4096, "the towers' hidden width H (32)"},
        {"--tower-dim", FLAG_COUNT, FIELD(tower_dim), 1, 4096, "the towers' output E (16)"},
        {"--lr", FLAG_RATE, FIELD(lr), 0, 0, "the dense optimizer's learning rate (0.05)"},
        {"--sparse-lr", FLAG_RATE, FIELD(sparse_lr), 0, 0, "the tables' learning rate (0.1)"},
        {"--optimizer", FLAG_DENSE_OPT, FIELD(optimizer), 0, 0,
         "the dense optimizer: sgd, adagrad, adam (sgd)"},
        {"--sparse-optimizer", FLAG_SPARSE_OPT, FIELD(sparse_optimizer), 0, 0,
         "the tables' optimizer on the PS: sgd, adagrad, rowwise_adagrad (rowwise_adagrad)"},
        {"--sparse-reduce", FLAG_REDUCE, FIELD(sparse_reduce), 0, 0,
         "the trainers' row gradients summed or averaged: sum, mean (mean)"},
        {"--seed", FLAG_COUNT, FIELD(seed), 0, UINT64_MAX, "the initial weights' seed (1)"},
};
#define NUM_FLAGS (sizeof(flag_specs) / sizeof(flag_specs[0]))

static void print_usage(FILE *stream)
{
    fprintf(stream, "usage: ember-run -n T+P two_tower --data FILE [flags]\n");
    for (size_t i = 0; i < NUM_FLAGS; i++)
        fprintf(stream, "  %-20s %s\n", flag_specs[i].name, flag_specs[i].help);
    fprintf(stream, "  %-20s %s\n", "--help", "this text");
}

/* @text as the flag's kind into its field; 0, or -1 naming what is wrong. */
static int parse_flag(const flag_spec_t *spec, const char *text, flags_t *flags)
{
    void *field = (char *)flags + spec->offset;
    char *end;

    switch (spec->kind) {
    case FLAG_PATH:
        if (!*text)
            break;
        *(const char **)field = text;
        return 0;
    case FLAG_COUNT: {
        errno = 0;
        unsigned long long value = strtoull(text, &end, 10);
        /* A digit first: strtoull would take "-1" (as 2^64 - 1) and " 1". */
        if (text[0] < '0' || text[0] > '9' || errno || *end || value < spec->min ||
            value > spec->max) {
            fprintf(stderr, "two_tower: %s '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n",
                    spec->name, text, spec->min, spec->max);
            return -1;
        }
        *(uint64_t *)field = value;
        return 0;
    }
    case FLAG_RATE: {
        errno = 0;
        float value = strtof(text, &end);
        if (errno || end == text || *end || !(value > 0.0f) || value > 1e6f)
            break;
        *(float *)field = value;
        return 0;
    }
    case FLAG_DENSE_OPT:
    case FLAG_SPARSE_OPT: {
        /* The ones reference.py mirrors: torch.optim's, and FBGEMM's row-wise
         * Adagrad for tables (one accumulator a row: none for a vector). */
        ember_opt_kind_t kind;
        if (ember_opt_kind_parse(text, &kind) != EMBER_OK ||
            kind == (spec->kind == FLAG_SPARSE_OPT ? EMBER_OPT_ADAM : EMBER_OPT_ROWWISE_ADAGRAD))
            break;
        *(ember_opt_kind_t *)field = kind;
        return 0;
    }
    case FLAG_REDUCE:
        if (strcmp(text, "sum") && strcmp(text, "mean"))
            break;
        *(ember_sparse_reduce_t *)field =
                strcmp(text, "sum") ? EMBER_REDUCE_MEAN : EMBER_REDUCE_SUM;
        return 0;
    }
    fprintf(stderr, "two_tower: %s '%s' is not valid: %s\n", spec->name, text, spec->help);
    return -1;
}

/* Returns -1 to go on, else the exit code (0 after --help, 2 on a bad flag). */
static int parse_flags(int argc, char **argv, flags_t *flags)
{
    int seen[NUM_FLAGS] = {0};

    *flags = (flags_t){.trainers = 2,
                       .num_ps = EMBER_JOB_PS_REST,
                       .batch = 32,
                       .dim = 16,
                       .hidden = 32,
                       .tower_dim = 16,
                       .lr = 0.05f,
                       .sparse_lr = 0.1f,
                       .optimizer = EMBER_OPT_SGD,
                       .sparse_optimizer = EMBER_OPT_ROWWISE_ADAGRAD,
                       .sparse_reduce = EMBER_REDUCE_MEAN,
                       .seed = 1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            print_usage(stdout);
            return 0;
        }
        size_t f = 0;
        while (f < NUM_FLAGS && strcmp(argv[i], flag_specs[f].name))
            f++;
        if (f == NUM_FLAGS) {
            fprintf(stderr, "two_tower: unknown flag '%s' (--help lists them)\n", argv[i]);
            return 2;
        }
        if (seen[f]++) {
            fprintf(stderr, "two_tower: %s given twice\n", argv[i]);
            return 2;
        }
        if (i + 1 == argc) {
            fprintf(stderr, "two_tower: %s needs a value\n", argv[i]);
            return 2;
        }
        if (parse_flag(&flag_specs[f], argv[++i], flags))
            return 2;
    }
    if (!flags->data) {
        fprintf(stderr, "two_tower: --data FILE is required (gen_data.py writes one)\n");
        return 2;
    }
    return -1;
}

/* ---- a trainer ------------------------------------------------------------------ */

enum {
    TABLE_USER,
    TABLE_ITEM,
    TABLE_CATEGORY,
    NUM_TABLES
};
static const char *const table_names[NUM_TABLES] = {"user", "item", "category"};

/* A step in flight: its batch (the labels are read after the next step's
 * batch is made) and its lookup.  Two steps are in flight: two slots. */
typedef struct {
    batch_t batch;
    ember_lookup_t *lookup;
} slot_t;

typedef struct {
    const flags_t *flags;
    ember_job_t *job;
    int t, trainers; /* this trainer's index, T */
    uint64_t steps;
    data_t data;
    ember_table_t *tables[NUM_TABLES];
    float *initial_rows[NUM_TABLES]; /* trainer 0: the tables before the first step */
    float *initial_params;           /* trainer 0: the dense weights before it */
    ember_ebc_t *ebc;
    ember_allreduce_t *allreduce;
    model_t model;
    ember_opt_t *optimizer; /* the dense one: every parameter, one vector */
    slot_t slots[2];
    size_t feature_offset[NUM_FEATURES]; /* each feature's [B][D] in a step's output */
    float *grad;                         /* the pooled features' gradients of a step */
    float *losses; /* [steps][T]: this trainer's column, then every trainer's */
    char err[1024];
} trainer_t;

static ember_status_t fail(trainer_t *tr, ember_status_t status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Record the first error of @tr (its cause and @status's text). */
static ember_status_t fail(trainer_t *tr, ember_status_t status, const char *fmt, ...)
{
    if (tr->err[0])
        return status;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tr->err, sizeof(tr->err), fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof(tr->err))
        snprintf(tr->err + n, sizeof(tr->err) - (size_t)n, ": %s", ember_status_string(status));
    return status;
}

#define TRY(tr, call, ...)                               \
    do {                                                 \
        ember_status_t try_status_ = (call);             \
        if (try_status_ != EMBER_OK)                     \
            return fail((tr), try_status_, __VA_ARGS__); \
    } while (0)

static int64_t table_rows(const trainer_t *tr, int table)
{
    const int64_t rows[NUM_TABLES] = {tr->data.users, tr->data.items, tr->data.categories};
    return rows[table];
}

/* Trainer 0 creates the tables (each row drawn from the seed, the row and the
 * column: the same values on any number of PS); the others open them by
 * name, which waits for their creation. */
static ember_status_t open_tables(trainer_t *tr)
{
    const flags_t *flags = tr->flags;
    for (int i = 0; i < NUM_TABLES; i++) {
        if (tr->t == 0) {
            ember_table_config_t config;
            ember_table_config_init(&config); /* sync, row-wise over every PS, fp32 */
            config.name = table_names[i];
            config.num_embeddings = table_rows(tr, i);
            config.embedding_dim = (uint32_t)flags->dim;
            config.init = EMBER_TABLE_INIT_UNIFORM;
            config.seed = flags->seed + 1 + (uint64_t)i;
            ember_opt_config_default(flags->sparse_optimizer, flags->sparse_lr, &config.optimizer);
            config.reduce = flags->sparse_reduce;
            TRY(tr, ember_table_create(tr->job, &config, &tr->tables[i]), "cannot create table %s",
                table_names[i]);
        } else {
            TRY(tr, ember_table_open(tr->job, table_names[i], &tr->tables[i]),
                "cannot open table %s", table_names[i]);
            const ember_table_config_t *config = ember_table_config(tr->tables[i]);
            if (config->num_embeddings != table_rows(tr, i) || config->embedding_dim != flags->dim)
                return fail(tr, EMBER_ERR_INVALID_PARAM,
                            "table %s is [%" PRId64 "][%" PRIu32 "], this trainer expects "
                            "[%" PRId64 "][%" PRIu64 "] (its --data and --dim)",
                            table_names[i], config->num_embeddings, config->embedding_dim,
                            table_rows(tr, i), flags->dim);
        }
    }
    return EMBER_OK;
}

/* The features, as TorchRec's EmbeddingBagCollection lists them.  One id a
 * bag pools to its row with any pooling; "item"'s two features must pool
 * alike: all mean. */
static ember_status_t create_ebc(trainer_t *tr)
{
    const ember_feature_t features[NUM_FEATURES] = {
            [FEATURE_USER_ID] = {.name = "user_id",
                                 .table = tr->tables[TABLE_USER],
                                 .pooling = EMBER_BAG_MEAN,
                                 .padding_idx = -1},
            [FEATURE_HISTORY] = {.name = "history",
                                 .table = tr->tables[TABLE_ITEM],
                                 .pooling = EMBER_BAG_MEAN,
                                 .padding_idx = -1},
            [FEATURE_ITEM_ID] = {.name = "item_id",
                                 .table = tr->tables[TABLE_ITEM],
                                 .pooling = EMBER_BAG_MEAN,
                                 .padding_idx = -1},
            [FEATURE_CATEGORIES] = {.name = "categories",
                                    .table = tr->tables[TABLE_CATEGORY],
                                    .pooling = EMBER_BAG_MEAN,
                                    .padding_idx = -1}};
    ember_ebc_options_t options;
    ember_ebc_options_init(&options); /* pooled outputs in host memory */
    TRY(tr, ember_ebc_create(tr->job, features, NUM_FEATURES, &options, &tr->ebc),
        "cannot create the embedding bag collection");
    return EMBER_OK;
}

/* Trainer 0: table @i's rows [rows][D] into a new buffer *@rows_p. */
static ember_status_t read_table(trainer_t *tr, int i, float **rows_p)
{
    size_t n = (size_t)table_rows(tr, i) * tr->flags->dim;
    float *rows = malloc(n * sizeof(float));
    if (!rows)
        return fail(tr, EMBER_ERR_NO_MEMORY, "table %s: no memory for its rows", table_names[i]);
    ember_status_t status = ember_table_read_rows(tr->tables[i], 0, table_rows(tr, i), rows);
    if (status != EMBER_OK) {
        free(rows);
        return fail(tr, status, "cannot read table %s", table_names[i]);
    }
    *rows_p = rows;
    return EMBER_OK;
}

static ember_status_t set_up(trainer_t *tr)
{
    const flags_t *flags = tr->flags;
    const uint64_t per_step = tr->trainers * flags->batch;

    if (data_load(flags->data, &tr->data, tr->err, sizeof(tr->err)))
        return EMBER_ERR_INVALID_PARAM;
    uint64_t available = (uint64_t)tr->data.examples / per_step;
    tr->steps = flags->steps ? flags->steps : available;
    if (tr->steps == 0 || tr->steps > available)
        return fail(tr, EMBER_ERR_INVALID_PARAM,
                    "%s holds %" PRId64 " examples: %" PRIu64 " steps of %" PRIu64
                    " (--batch %" PRIu64 " x %d trainers) need %" PRIu64,
                    flags->data, tr->data.examples, tr->steps ? tr->steps : 1, per_step,
                    flags->batch, tr->trainers, (tr->steps ? tr->steps : 1) * per_step);

    TRY(tr, open_tables(tr), "tables");
    TRY(tr, create_ebc(tr), "ebc");
    TRY(tr, ember_allreduce_create(tr->job, NULL, &tr->allreduce), "cannot join the allreduce");
    if (model_create(&tr->model, flags->dim, flags->hidden, flags->tower_dim, flags->batch,
                     flags->seed))
        return fail(tr, EMBER_ERR_NO_MEMORY, "the dense model");
    /* Every optimizer ember has is elementwise: one over the whole vector
     * steps each parameter as one a tensor would (torch.optim). */
    ember_opt_config_t opt_config;
    ember_opt_config_default(flags->optimizer, flags->lr, &opt_config);
    TRY(tr, ember_opt_create(&opt_config, 1, tr->model.num_params, EMBER_OPT_DENSE, &tr->optimizer),
        "the dense optimizer");

    if (!(tr->grad = malloc(ember_ebc_output_size(tr->ebc, flags->batch) * sizeof(float))))
        return fail(tr, EMBER_ERR_NO_MEMORY, "the pooled gradients");
    for (size_t f = 0; f < NUM_FEATURES; f++)
        tr->feature_offset[f] = ember_ebc_output_offset(tr->ebc, f, flags->batch);
    if (!(tr->losses = calloc(tr->steps * tr->trainers, sizeof(float))))
        return fail(tr, EMBER_ERR_NO_MEMORY, "the losses");

    /* The tables as initialised, for --out: no step can be applied before
     * trainer 0 pushes its first gradients (sync), so these are step 0's. */
    if (tr->t != 0 || !flags->out)
        return EMBER_OK;
    for (int i = 0; i < NUM_TABLES; i++)
        TRY(tr, read_table(tr, i, &tr->initial_rows[i]), "initial rows");
    if (!(tr->initial_params = malloc(tr->model.num_params * sizeof(float))))
        return fail(tr, EMBER_ERR_NO_MEMORY, "the initial dense weights");
    memcpy(tr->initial_params, tr->model.params, tr->model.num_params * sizeof(float));
    return EMBER_OK;
}

/* Step @step's batch of this trainer into its slot, and its lookup: split
 * at once, sent as soon as the tables may answer it (once the previous
 * step's gradients were pushed). */
static ember_status_t start_step(trainer_t *tr, uint64_t step)
{
    slot_t *slot = &tr->slots[step % 2];
    const int64_t first = (int64_t)(step * tr->trainers * tr->flags->batch) + tr->t;
    if (batch_fill(&slot->batch, &tr->data, first, tr->trainers, tr->flags->batch))
        return fail(tr, EMBER_ERR_NO_MEMORY, "step %" PRIu64 ": the batch", step);
    TRY(tr, ember_ebc_lookup(tr->ebc, &slot->batch.kjt, 0, &slot->lookup),
        "step %" PRIu64 ": lookup", step);
    return EMBER_OK;
}

static ember_status_t train_step(trainer_t *tr, uint64_t step)
{
    const size_t batch_size = tr->flags->batch;
    slot_t *slot = &tr->slots[step % 2];
    const size_t *at = tr->feature_offset;
    const float *pooled;

    TRY(tr, ember_lookup_wait(slot->lookup, NULL, &pooled), "step %" PRIu64 ": lookup", step);
    if (step + 1 < tr->steps)
        TRY(tr, start_step(tr, step + 1), "step %" PRIu64, step + 1);

    /* The dense half, forward and backward, on the pooled features. */
    const model_input_t input = {.user_id = pooled + at[FEATURE_USER_ID],
                                 .history = pooled + at[FEATURE_HISTORY],
                                 .item_id = pooled + at[FEATURE_ITEM_ID],
                                 .categories = pooled + at[FEATURE_CATEGORIES]};
    const model_input_grad_t input_grad = {.user_id = tr->grad + at[FEATURE_USER_ID],
                                           .history = tr->grad + at[FEATURE_HISTORY],
                                           .item_id = tr->grad + at[FEATURE_ITEM_ID],
                                           .categories = tr->grad + at[FEATURE_CATEGORIES]};
    float loss = model_step(&tr->model, &input, slot->batch.labels, batch_size, &input_grad);
    tr->losses[step * tr->trainers + tr->t] = loss;

    /* The sparse gradients to the PS (the last step's as a call: once it
     * returns, the PS hold them), which sends the next step's lookup; the
     * dense ones averaged over the trainers meanwhile, then stepped. */
    const unsigned flags = step + 1 == tr->steps ? EMBER_BACKWARD_WAIT : 0;
    TRY(tr, ember_lookup_backward(slot->lookup, tr->grad, flags), "step %" PRIu64 ": backward",
        step);
    ember_lookup_release(slot->lookup);
    slot->lookup = NULL;
    TRY(tr,
        ember_allreduce(tr->allreduce, tr->model.grads, tr->model.num_params, EMBER_ALLREDUCE_AVG),
        "step %" PRIu64 ": allreduce", step);
    TRY(tr,
        ember_opt_step_dense(tr->optimizer, tr->model.params, tr->model.grads,
                             tr->model.num_params),
        "step %" PRIu64 ": dense optimizer", step);
    return EMBER_OK;
}

/* One tensor of --out: [rows][cols] floats (cols 0: a vector). */
static ember_st_tensor_t out_tensor(const char *name, const float *data, size_t rows, size_t cols)
{
    ember_st_tensor_t tensor = {.name = name, .dtype = EMBER_DTYPE_F32, .data = data};
    tensor.ndim = cols ? 2 : 1;
    tensor.shape[0] = (int64_t)rows;
    tensor.shape[1] = (int64_t)cols;
    return tensor;
}

/* Trainer 0's --out: the losses, the initial and the final weights. */
static ember_status_t write_out(trainer_t *tr, float *final_rows[NUM_TABLES])
{
    enum {
        NAME = 64,
        COUNT = 1 + 2 * (MODEL_TENSORS + NUM_TABLES)
    };
    char names[COUNT][NAME];
    ember_st_tensor_t tensors[COUNT];
    size_t n = 0;

    tensors[n++] = out_tensor("loss", tr->losses, tr->steps, (size_t)tr->trainers);
    for (int i = 0; i < NUM_TABLES; i++)
        for (int final = 0; final < 2; final++) {
            snprintf(names[n], NAME, "%sembedding_bags.%s.weight", final ? "" : "init.",
                     table_names[i]);
            tensors[n] = out_tensor(names[n], final ? final_rows[i] : tr->initial_rows[i],
                                    (size_t)table_rows(tr, i), tr->flags->dim);
            n++;
        }
    for (size_t i = 0; i < MODEL_TENSORS; i++) {
        model_tensor_t t;
        model_tensor(&tr->model, i, &t);
        tensors[n++] = out_tensor(t.name, t.data, t.rows, t.cols);
    }
    for (size_t i = 0; i < MODEL_TENSORS; i++) {
        model_tensor_t t;
        model_tensor(&tr->model, i, &t);
        snprintf(names[n], NAME, "init.%s", t.name);
        tensors[n] = out_tensor(names[n], tr->initial_params + (t.data - tr->model.params), t.rows,
                                t.cols);
        n++;
    }
    char trainers[16], steps[24];
    snprintf(trainers, sizeof(trainers), "%d", tr->trainers);
    snprintf(steps, sizeof(steps), "%" PRIu64, tr->steps);
    const ember_st_meta_t meta[] = {
            {"format", "two_tower"}, {"trainers", trainers}, {"steps", steps}};
    TRY(tr, ember_st_write(tr->flags->out, tensors, n, meta, 3), "cannot write %s", tr->flags->out);
    return EMBER_OK;
}

/* After the last step: every trainer's losses to every trainer, and trainer
 * 0 reads the tables back and writes --out. */
static ember_status_t finish(trainer_t *tr)
{
    float *final_rows[NUM_TABLES] = {NULL};
    ember_status_t status = EMBER_OK;

    TRY(tr, ember_ebc_flush(tr->ebc), "the last pushes");
    /* Each trainer wrote its own column, zeros elsewhere: the sum gathers. */
    TRY(tr,
        ember_allreduce(tr->allreduce, tr->losses, tr->steps * tr->trainers, EMBER_ALLREDUCE_SUM),
        "gathering the losses");
    /* Past it, every trainer's last push was taken: the tables hold the
     * last step. */
    TRY(tr, ember_job_barrier(tr->job, "trained"), "the barrier after training");
    if (tr->t == 0) {
        printf("two_tower: %" PRIu64 " steps, the last step's loss", tr->steps);
        for (int t = 0; t < tr->trainers; t++)
            printf(" %.6f", (double)tr->losses[(tr->steps - 1) * tr->trainers + t]);
        printf("\n");
    }
    if (tr->t != 0 || !tr->flags->out)
        return EMBER_OK;
    for (int i = 0; i < NUM_TABLES && status == EMBER_OK; i++)
        status = read_table(tr, i, &final_rows[i]);
    if (status == EMBER_OK)
        status = write_out(tr, final_rows);
    for (int i = 0; i < NUM_TABLES; i++)
        free(final_rows[i]);
    return status;
}

static void tear_down(trainer_t *tr)
{
    for (int i = 0; i < 2; i++) {
        ember_lookup_release(tr->slots[i].lookup);
        batch_free(&tr->slots[i].batch);
    }
    free(tr->grad);
    ember_ebc_destroy(tr->ebc);
    for (int i = 0; i < NUM_TABLES; i++) {
        ember_table_close(tr->tables[i]);
        free(tr->initial_rows[i]);
    }
    ember_allreduce_destroy(tr->allreduce);
    ember_opt_destroy(tr->optimizer);
    model_destroy(&tr->model);
    free(tr->initial_params);
    data_free(&tr->data);
    free(tr->losses);
}

/* --out must be writable before anyone trains for it. */
static ember_status_t check_out(trainer_t *tr)
{
    struct stat st;
    const char *path = tr->flags->out;
    int existed = stat(path, &st) == 0;
    FILE *file = fopen(path, "ab");
    if (!file)
        return fail(tr, EMBER_ERR_IO, "--out %s cannot be written (%s)", path, strerror(errno));
    fclose(file);
    if (!existed)
        unlink(path);
    return EMBER_OK;
}

static int train(ember_job_t *job, int t, const flags_t *flags)
{
    trainer_t tr = {.flags = flags, .job = job, .t = t, .trainers = ember_job_trainers(job)};
    ember_status_t status = EMBER_OK;

    if (t == 0) {
        printf("two_tower: %d trainers and %d PS\n", tr.trainers, ember_job_num_ps(job));
        fflush(stdout);
    }
    if (t == 0 && flags->out)
        status = check_out(&tr);
    if (status == EMBER_OK)
        status = set_up(&tr);
    if (status == EMBER_OK)
        status = start_step(&tr, 0);
    for (uint64_t step = 0; status == EMBER_OK && step < tr.steps; step++)
        status = train_step(&tr, step);
    if (status == EMBER_OK)
        status = finish(&tr);

    tear_down(&tr);
    if (status == EMBER_ERR_CANCELED && *ember_job_aborted(job)) {
        /* Another rank failed and told us why. */
        fprintf(stderr, "two_tower: trainer %d stopped: %s\n", t, ember_job_aborted(job));
        ember_job_leave(job, status);
        return 1;
    }
    if (status != EMBER_OK) {
        /* Everyone else stops too, told why (a PS ends its serve). */
        fprintf(stderr, "two_tower: trainer %d: %s\n", t, tr.err);
        ember_job_abort(job, tr.err);
        return 1;
    }
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ---- a parameter server ------------------------------------------------------------ */

static int serve(ember_job_t *job)
{
    ember_ps_options_t options;
    ember_ps_options_init(&options);
    ember_status_t status = ember_ps_serve(job, &options); /* until the trainers leave */
    if (status != EMBER_OK)
        fprintf(stderr, "two_tower: %s: %s (%s)\n", ember_job_name(job, ember_job_rank(job)),
                ember_status_string(status), ember_job_aborted(job));
    ember_job_leave(job, status);
    return status == EMBER_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    flags_t flags;
    int rc = parse_flags(argc, argv, &flags);
    if (rc >= 0)
        return rc;

    ember_job_params_t params;
    ember_job_params_init(&params); /* the launcher's rank, world, rendezvous and secret */
    params.trainers = (int)flags.trainers;
    params.num_ps = (int)flags.num_ps;
    ember_job_t *job;
    ember_status_t status = ember_job_join(&params, &job);
    if (status != EMBER_OK) {
        fprintf(stderr, "two_tower: cannot join the job: %s\n", ember_status_string(status));
        return 1;
    }
    /* --ps P: exactly T + P ranks (a rank more would be the library's
     * "master", which this program does not have). */
    if (flags.num_ps != EMBER_JOB_PS_REST &&
        ember_job_world_size(job) != (int)(flags.trainers + flags.num_ps)) {
        fprintf(stderr,
                "two_tower: the job has %d ranks, --trainers %" PRIu64 " + --ps %" PRIu64
                " make %" PRIu64 "\n",
                ember_job_world_size(job), flags.trainers, flags.num_ps,
                flags.trainers + flags.num_ps);
        ember_job_leave(job, EMBER_ERR_INVALID_PARAM);
        return 2;
    }
    int index;
    if (ember_job_role(job, ember_job_rank(job), &index) == EMBER_ROLE_PS)
        return serve(job);
    return train(job, index, &flags);
}
