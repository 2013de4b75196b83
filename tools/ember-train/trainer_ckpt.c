/*
 * tools/ember-train/trainer_ckpt: a trainer's file in a checkpoint
 * (<ember/checkpoint.h> writes it, with its own format, step, trainer and
 * trainers):
 *   the dense parameters under the --save file's names (the model's),
 *   "optimizer.M.STATE" each state array of the model's dense optimizer M,
 *   "losses" [steps] this trainer's losses so far, and metadata: each
 *   optimizer's step count, the epoch in progress (its number, steps, bags,
 *   loss sum and seconds so far: exact, as C99 hex floats), and the job as
 *   it was described to the trainers: "train.settings" (the driver's) and
 *   "train.config" (the model's), which a resume compares setting by
 *   setting.
 */
#include "tools/ember-train/trainer.h"

#include "tools/ember-train/settings.h"

#include <ember/checkpoint.h>
#include <ember/safetensors.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENSORS_MAX (EMBER_MODEL_TENSORS_MAX + EMBER_MODEL_OPTS_MAX * EMBER_OPT_STATE_MAX + 1)
#define META_MAX    (8 + EMBER_MODEL_OPTS_MAX)
#define VALUE_MAX   40

/* The file being laid out: tensors, metadata and the texts they point at. */
typedef struct {
    ember_st_tensor_t tensors[TENSORS_MAX];
    char names[TENSORS_MAX][EMBER_MODEL_NAME_MAX];
    size_t ntensors;
    ember_st_meta_t meta[META_MAX];
    char keys[META_MAX][32], values[META_MAX][VALUE_MAX];
    size_t nmeta;
} layout_t;

static void add_meta(layout_t *l, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void add_meta(layout_t *l, const char *key, const char *fmt, ...)
{
    va_list ap;
    size_t i = l->nmeta++;
    snprintf(l->keys[i], sizeof(l->keys[i]), "%s", key);
    va_start(ap, fmt);
    vsnprintf(l->values[i], sizeof(l->values[i]), fmt, ap);
    va_end(ap);
    l->meta[i] = (ember_st_meta_t){l->keys[i], l->values[i]};
}

static void add_tensor(layout_t *l, ember_dtype_t dtype, size_t ndim, const int64_t *shape,
                       const void *data)
{
    ember_st_tensor_t *t = &l->tensors[l->ntensors];
    *t = (ember_st_tensor_t){
            .name = l->names[l->ntensors], .dtype = dtype, .ndim = ndim, .data = data};
    for (size_t d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    l->ntensors++;
}

/* The dense layers under their --save names, each optimizer's arrays, the losses. */
static void layout_tensors(layout_t *l, trainer_t *t, uint64_t steps)
{
    ember_model_tensor_t dense[EMBER_MODEL_TENSORS_MAX];
    ember_opt_t *opts[EMBER_MODEL_OPTS_MAX];
    const float *params = t->model->trainer_params(t->model_trainer);
    const size_t count = t->model->tensors(t->config, dense);
    for (size_t i = 0; i < count; i++) {
        if (dense[i].table >= 0)
            continue;
        memcpy(l->names[l->ntensors], dense[i].name, EMBER_MODEL_NAME_MAX);
        add_tensor(l, EMBER_DTYPE_F32, dense[i].ndim, dense[i].shape, params + dense[i].offset);
    }
    const size_t nopts = t->model->optimizers(t->model_trainer, opts);
    for (size_t m = 0; m < nopts; m++) {
        ember_opt_state_t arrays[EMBER_OPT_STATE_MAX];
        const size_t n = ember_opt_state_arrays(opts[m], arrays);
        for (size_t a = 0; a < n; a++) {
            const int64_t numel = (int64_t)(arrays[a].rows * arrays[a].per_row);
            snprintf(l->names[l->ntensors], EMBER_MODEL_NAME_MAX, "optimizer.%zu.%s", m,
                     arrays[a].name);
            add_tensor(l, arrays[a].dtype, 1, &numel, arrays[a].data);
        }
        char key[48];
        snprintf(key, sizeof(key), "optimizer.%zu.steps", m);
        add_meta(l, key, "%" PRIu64, ember_opt_steps(opts[m]));
    }
    const int64_t losses = (int64_t)steps;
    snprintf(l->names[l->ntensors], EMBER_MODEL_NAME_MAX, "losses");
    add_tensor(l, EMBER_DTYPE_F32, 1, &losses, t->losses);
}

static void layout_meta(layout_t *l, const train_progress_t *p)
{
    add_meta(l, "bags", "%" PRIu64, p->bags);
    add_meta(l, "epoch", "%u", p->epoch);
    add_meta(l, "epoch.steps", "%" PRIu64, p->epoch_steps);
    add_meta(l, "epoch.bags", "%" PRIu64, p->epoch_bags);
    add_meta(l, "epoch.loss_sum", "%a", p->epoch_loss_sum);
    add_meta(l, "epoch.seconds", "%a", p->epoch_seconds);
}

ember_status_t trainer_ckpt_save(trainer_t *t, const train_progress_t *p, char *err,
                                 size_t err_length)
{
    layout_t *l = calloc(1, sizeof(*l));
    model_text_t settings, config;
    model_text_init(&settings);
    model_text_init(&config);
    if (!l)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    layout_tensors(l, t, p->steps);
    layout_meta(l, p);
    train_settings_describe(t->model, &t->settings, &settings);
    t->model->describe(t->config, &config);
    ember_st_meta_t meta[META_MAX + 2];
    memcpy(meta, l->meta, l->nmeta * sizeof(meta[0]));
    meta[l->nmeta] = (ember_st_meta_t){"train.settings", model_text_take(&settings)};
    meta[l->nmeta + 1] = (ember_st_meta_t){"train.config", model_text_take(&config)};
    ember_status_t status =
            meta[l->nmeta].value && meta[l->nmeta + 1].value
                    ? ember_checkpoint_save(t->ckpt, p->steps, l->tensors, l->ntensors, meta,
                                            l->nmeta + 2, err, err_length)
                    : ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    model_text_free(&settings);
    model_text_free(&config);
    free(l);
    return status;
}

/* ---- reading ------------------------------------------------------------------ */

/* A file being read: its path names it in every error. */
typedef struct {
    ember_st_file_t *file;
    char path[TRAIN_DIR_MAX + 64];
} reading_t;

static ember_status_t meta_u64(const reading_t *r, const char *key, uint64_t max, uint64_t *out,
                               char *err, size_t err_length)
{
    const char *text = ember_st_metadata(r->file, key);
    char *end;
    errno = 0;
    unsigned long long v = text && *text >= '0' && *text <= '9' ? strtoull(text, &end, 10) : 0;
    if (!text || *text < '0' || *text > '9' || errno || *end || v > max)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: metadata '%s' is %s%s%s, not a number up to %llu", r->path,
                                 key, text ? "'" : "missing", text ? text : "", text ? "'" : "",
                                 (unsigned long long)max);
    *out = v;
    return EMBER_OK;
}

static ember_status_t meta_f64(const reading_t *r, const char *key, double *out, char *err,
                               size_t err_length)
{
    const char *text = ember_st_metadata(r->file, key);
    char *end = NULL;
    double v = text ? strtod(text, &end) : 0;
    if (!text || !*text || *end || !isfinite(v) || v < 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: metadata '%s' is not a finite number >= 0", r->path, key);
    *out = v;
    return EMBER_OK;
}

static ember_status_t read_progress(const reading_t *r, train_progress_t *p, char *err,
                                    size_t err_length)
{
    uint64_t epoch;
    EMBER_CHECK(meta_u64(r, "bags", UINT64_MAX, &p->bags, err, err_length));
    EMBER_CHECK(meta_u64(r, "epoch", UINT32_MAX, &epoch, err, err_length));
    EMBER_CHECK(meta_u64(r, "epoch.steps", p->steps, &p->epoch_steps, err, err_length));
    EMBER_CHECK(meta_u64(r, "epoch.bags", p->bags, &p->epoch_bags, err, err_length));
    EMBER_CHECK(meta_f64(r, "epoch.loss_sum", &p->epoch_loss_sum, err, err_length));
    EMBER_CHECK(meta_f64(r, "epoch.seconds", &p->epoch_seconds, err, err_length));
    p->epoch = (uint32_t)epoch;
    return EMBER_OK;
}

/* Tensor @name, of @dtype and @numel elements, or an error naming it. */
static ember_status_t find_tensor(const reading_t *r, const char *name, ember_dtype_t dtype,
                                  size_t numel, const ember_st_tensor_t **out, char *err,
                                  size_t err_length)
{
    const ember_st_tensor_t *tensor = ember_st_find(r->file, name);
    if (!tensor || tensor->dtype != dtype || tensor->numel != numel)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: tensor '%s' is %s, this job's is %s of %zu values", r->path,
                                 name, tensor ? ember_dtype_name(tensor->dtype) : "missing",
                                 ember_dtype_name(dtype), numel);
    *out = tensor;
    return EMBER_OK;
}

/* Each dense optimizer's state arrays and step count. */
static ember_status_t read_optimizers(const reading_t *r, trainer_t *t, char *err,
                                      size_t err_length)
{
    ember_opt_t *opts[EMBER_MODEL_OPTS_MAX];
    const size_t nopts = t->model->optimizers(t->model_trainer, opts);
    for (size_t m = 0; m < nopts; m++) {
        ember_opt_state_t arrays[EMBER_OPT_STATE_MAX];
        const size_t n = ember_opt_state_arrays(opts[m], arrays);
        char name[EMBER_MODEL_NAME_MAX];
        uint64_t steps;
        for (size_t a = 0; a < n; a++) {
            const ember_st_tensor_t *tensor = NULL; /* set unless it fails */
            snprintf(name, sizeof(name), "optimizer.%zu.%s", m, arrays[a].name);
            EMBER_CHECK(find_tensor(r, name, arrays[a].dtype, arrays[a].rows * arrays[a].per_row,
                                    &tensor, err, err_length));
            memcpy(arrays[a].data, tensor->data, tensor->nbytes);
        }
        snprintf(name, sizeof(name), "optimizer.%zu.steps", m);
        EMBER_CHECK(meta_u64(r, name, UINT64_MAX, &steps, err, err_length));
        ember_opt_set_steps(opts[m], steps);
    }
    return EMBER_OK;
}

/* The losses of steps 0 .. steps - 1. */
static ember_status_t read_losses(const reading_t *r, trainer_t *t, uint64_t steps, char *err,
                                  size_t err_length)
{
    const ember_st_tensor_t *tensor = NULL; /* set unless it fails */
    EMBER_CHECK(find_tensor(r, "losses", EMBER_DTYPE_F32, steps, &tensor, err, err_length));
    if (steps > t->losses_capacity) {
        float *grown = realloc(t->losses, steps * sizeof(float));
        if (!grown)
            return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
        t->losses = grown;
        t->losses_capacity = steps;
    }
    memcpy(t->losses, tensor->data, tensor->nbytes);
    return EMBER_OK;
}

ember_status_t trainer_ckpt_resume(trainer_t *t, char *err, size_t err_length)
{
    reading_t r = {.file = NULL};
    snprintf(r.path, sizeof(r.path), "%s/trainer%d.safetensors", t->start.resume, t->index);
    /* This trainer's file only (the master found and checked the
     * checkpoint, its trainer count among the rest): the library checks
     * it against the manifest and its own keys. */
    EMBER_CHECK(ember_checkpoint_open_trainer_at(t->start.resume, t->start.head.start_step,
                                                 (uint32_t)t->index, &r.file, err, err_length));
    t->resumed = (train_progress_t){.steps = t->start.head.start_step};
    ember_status_t status = read_progress(&r, &t->resumed, err, err_length);
    if (status == EMBER_OK)
        status = read_optimizers(&r, t, err, err_length);
    if (status == EMBER_OK)
        status = read_losses(&r, t, t->resumed.steps, err, err_length);
    ember_st_close(r.file);
    return status;
}
