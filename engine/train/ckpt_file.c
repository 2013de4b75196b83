/* engine/train/ckpt_file: a trainer's checkpoint file (see ckpt_file.h). */
#include "engine/train/ckpt_file.h"

#include "common/clock.h"
#include "engine/train/model_io.h"

#include <ember/log.h>
#include <errno.h>
#include <stdarg.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT      "ember-trainer-checkpoint-1"
#define TENSORS_MAX (EMBER_DLRM_TENSORS_MAX + EMBER_CKPT_OPTS_MAX * EMBER_OPT_STATE_MAX + 2)
#define META_MAX    (16 + EMBER_CKPT_OPTS_MAX)
#define TEXT_MAX    40

/* The file being laid out: tensors, metadata and the texts they point at. */
typedef struct {
    ember_st_tensor_t tensors[TENSORS_MAX];
    char names[TENSORS_MAX][EMBER_DLRM_NAME_MAX];
    size_t ntensors;
    ember_st_meta_t meta[META_MAX];
    char keys[META_MAX][32], values[META_MAX][TEXT_MAX];
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

static ember_st_tensor_t *add_tensor(layout_t *l, ember_dtype_t dtype, int64_t d0, int64_t d1,
                                     size_t ndim, const void *data)
{
    ember_st_tensor_t *t = &l->tensors[l->ntensors];
    *t = (ember_st_tensor_t){.name = l->names[l->ntensors],
                             .dtype = dtype,
                             .ndim = ndim,
                             .shape = {d0, d1},
                             .data = data};
    l->ntensors++;
    return t;
}

/* The dense layers under their --save names, then each optimizer's arrays. */
static void layout_tensors(layout_t *l, const ember_msg_train_start_t *spec,
                           const ember_ckpt_trainer_state_t *state)
{
    ember_dlrm_tensor_t dense[EMBER_DLRM_TENSORS_MAX];
    size_t count = ember_model_dense_layout(spec, dense);
    for (size_t i = 0; i < count; i++) {
        memcpy(l->names[l->ntensors], dense[i].name, EMBER_DLRM_NAME_MAX);
        add_tensor(l, EMBER_DTYPE_F32, dense[i].shape[0], dense[i].shape[1], dense[i].ndim,
                   state->params + dense[i].offset);
    }
    for (size_t m = 0; m < state->nopts; m++) {
        ember_opt_state_t arrays[EMBER_OPT_STATE_MAX];
        size_t n = ember_opt_state_arrays(state->opts[m], arrays);
        for (size_t a = 0; a < n; a++) {
            snprintf(l->names[l->ntensors], EMBER_DLRM_NAME_MAX, "optimizer.%zu.%s", m,
                     arrays[a].name);
            add_tensor(l, arrays[a].dtype, (int64_t)(arrays[a].rows * arrays[a].per_row), 0, 1,
                       arrays[a].data);
        }
        char key[48];
        snprintf(key, sizeof(key), "optimizer.%u.steps", (unsigned)m);
        add_meta(l, key, "%" PRIu64, ember_opt_steps(state->opts[m]));
    }
    snprintf(l->names[l->ntensors], EMBER_DLRM_NAME_MAX, "losses");
    add_tensor(l, EMBER_DTYPE_F32, (int64_t)state->progress.steps, 0, 1, state->losses);
    snprintf(l->names[l->ntensors], EMBER_DLRM_NAME_MAX, "train_config");
    add_tensor(l, EMBER_DTYPE_U8, (int64_t)sizeof(spec->config), 0, 1, &spec->config);
}

static void layout_meta(layout_t *l, const ember_msg_train_start_t *spec,
                        const ember_ckpt_progress_t *p)
{
    add_meta(l, "format", FORMAT);
    add_meta(l, "step", "%" PRIu64, p->steps);
    add_meta(l, "trainer", "%u", spec->trainer);
    add_meta(l, "trainers", "%u", spec->trainers);
    add_meta(l, "bags", "%" PRIu64, p->bags);
    add_meta(l, "epoch", "%u", p->epoch);
    add_meta(l, "epoch.steps", "%" PRIu64, p->epoch_steps);
    add_meta(l, "epoch.bags", "%" PRIu64, p->epoch_bags);
    add_meta(l, "epoch.loss_sum", "%a", p->epoch_loss_sum);
    add_meta(l, "epoch.seconds", "%a", p->epoch_seconds);
}

ember_status_t ember_ckpt_trainer_write(const char *dir, const ember_msg_train_start_t *spec,
                                        const ember_ckpt_trainer_state_t *state,
                                        ember_msg_ckpt_done_t *done)
{
    layout_t *l = calloc(1, sizeof(*l));
    char path[EMBER_PATH_MAX + 80];
    ember_st_written_t written = {0};
    double started = ember_time_now();
    *done = (ember_msg_ckpt_done_t){.step = state->progress.steps};
    snprintf(done->name, sizeof(done->name), "trainer%u.safetensors", spec->trainer);
    if (!l)
        return done->status = EMBER_ERR_NO_MEMORY;
    layout_tensors(l, spec, state);
    layout_meta(l, spec, &state->progress);
    snprintf(path, sizeof(path), "%s/%s", dir, done->name);
    ember_status_t status =
            ember_st_write_durable(path, l->tensors, l->ntensors, l->meta, l->nmeta, &written);
    if (status != EMBER_OK)
        snprintf(done->text, sizeof(done->text), "%.200s: %s", path, ember_status_string(status));
    done->status = status;
    done->bytes = written.bytes;
    done->crc32c = written.crc32c;
    done->write_seconds = ember_time_now() - started;
    free(l);
    return status;
}

/* ---- reading --------------------------------------------------------------- */

static ember_status_t meta_u64(const ember_ckpt_trainer_file_t *f, const char *key, uint64_t max,
                               uint64_t *out, char *err, size_t err_length)
{
    const char *text = ember_st_metadata(f->file, key);
    char *end;
    errno = 0;
    unsigned long long v = text && *text >= '0' && *text <= '9' ? strtoull(text, &end, 10) : 0;
    if (!text || *text < '0' || *text > '9' || errno || *end || v > max)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: metadata '%s' is %s%s%s, not a number up to %llu", f->path,
                                 key, text ? "'" : "missing", text ? text : "", text ? "'" : "",
                                 (unsigned long long)max);
    *out = v;
    return EMBER_OK;
}

static ember_status_t meta_f64(const ember_ckpt_trainer_file_t *f, const char *key, double *out,
                               char *err, size_t err_length)
{
    const char *text = ember_st_metadata(f->file, key);
    char *end = NULL;
    double v = text ? strtod(text, &end) : 0;
    if (!text || !*text || *end || !isfinite(v) || v < 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: metadata '%s' is not a finite number >= 0", f->path, key);
    *out = v;
    return EMBER_OK;
}

static ember_status_t read_progress(ember_ckpt_trainer_file_t *f, char *err, size_t err_length)
{
    uint64_t trainer, trainers, epoch;
    ember_ckpt_progress_t *p = &f->progress;
    const char *format = ember_st_metadata(f->file, "format");
    if (!format || strcmp(format, FORMAT) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: not a trainer's checkpoint file (format '%s')", f->path,
                                 format ? format : "missing");
    EMBER_CHECK(meta_u64(f, "step", UINT64_MAX, &p->steps, err, err_length));
    EMBER_CHECK(meta_u64(f, "trainer", UINT32_MAX, &trainer, err, err_length));
    EMBER_CHECK(meta_u64(f, "trainers", UINT32_MAX, &trainers, err, err_length));
    EMBER_CHECK(meta_u64(f, "bags", UINT64_MAX, &p->bags, err, err_length));
    EMBER_CHECK(meta_u64(f, "epoch", UINT32_MAX, &epoch, err, err_length));
    EMBER_CHECK(meta_u64(f, "epoch.steps", p->steps, &p->epoch_steps, err, err_length));
    EMBER_CHECK(meta_u64(f, "epoch.bags", p->bags, &p->epoch_bags, err, err_length));
    EMBER_CHECK(meta_f64(f, "epoch.loss_sum", &p->epoch_loss_sum, err, err_length));
    EMBER_CHECK(meta_f64(f, "epoch.seconds", &p->epoch_seconds, err, err_length));
    if (trainer >= trainers)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s: trainer %llu of %llu",
                                 f->path, (unsigned long long)trainer,
                                 (unsigned long long)trainers);
    f->trainer = (uint32_t)trainer;
    f->trainers = (uint32_t)trainers;
    p->epoch = (uint32_t)epoch;
    return EMBER_OK;
}

/* Tensor @name, of @dtype and @numel elements (its shape @ndim, @shape when
 * given), or an error naming it. */
static ember_status_t find_tensor(const ember_ckpt_trainer_file_t *f, const char *name,
                                  ember_dtype_t dtype, size_t numel, size_t ndim,
                                  const int64_t *shape, const ember_st_tensor_t **out, char *err,
                                  size_t err_length)
{
    const ember_st_tensor_t *t = ember_st_find(f->file, name);
    int ok = t && t->dtype == dtype && t->numel == numel && (!shape || t->ndim == ndim);
    for (size_t d = 0; ok && shape && d < ndim; d++)
        ok = t->shape[d] == shape[d];
    if (!ok)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: tensor '%s' is %s, this job's is %s of %zu values", f->path,
                                 name, t ? ember_dtype_name(t->dtype) : "missing",
                                 ember_dtype_name(dtype), numel);
    *out = t;
    return EMBER_OK;
}

ember_status_t ember_ckpt_trainer_open(const char *dir, uint32_t trainer,
                                       ember_ckpt_trainer_file_t *out, char *err, size_t err_length)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->path, sizeof(out->path), "%s/trainer%u.safetensors", dir, trainer);
    EMBER_CHECK(ember_st_open(out->path, &out->file, err, err_length));
    ember_status_t status = read_progress(out, err, err_length);
    const ember_st_tensor_t *config;
    if (status == EMBER_OK)
        status = find_tensor(out, "train_config", EMBER_DTYPE_U8, sizeof(out->config), 1, NULL,
                             &config, err, err_length);
    if (status == EMBER_OK)
        memcpy(&out->config, config->data, sizeof(out->config));
    if (status == EMBER_OK && out->trainer != trainer)
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s: written by trainer %u",
                                   out->path, out->trainer);
    if (status != EMBER_OK)
        ember_ckpt_trainer_close(out);
    return status;
}

void ember_ckpt_trainer_close(ember_ckpt_trainer_file_t *file)
{
    ember_st_close(file->file);
    file->file = NULL;
}

ember_status_t ember_ckpt_trainer_dense(const ember_ckpt_trainer_file_t *file,
                                        const ember_msg_train_start_t *spec, float *params,
                                        char *err, size_t err_length)
{
    ember_dlrm_tensor_t dense[EMBER_DLRM_TENSORS_MAX];
    size_t count = ember_model_dense_layout(spec, dense);
    for (size_t i = 0; i < count; i++) {
        const ember_st_tensor_t *t;
        size_t numel = (size_t)dense[i].shape[0] * (dense[i].ndim > 1 ? dense[i].shape[1] : 1);
        EMBER_CHECK(find_tensor(file, dense[i].name, EMBER_DTYPE_F32, numel, dense[i].ndim,
                                dense[i].shape, &t, err, err_length));
        memcpy(params + dense[i].offset, t->data, numel * sizeof(float));
    }
    return EMBER_OK;
}

ember_status_t ember_ckpt_trainer_optimizers(const ember_ckpt_trainer_file_t *file,
                                             ember_opt_t *const *opts, size_t nopts, char *err,
                                             size_t err_length)
{
    for (size_t m = 0; m < nopts; m++) {
        ember_opt_state_t arrays[EMBER_OPT_STATE_MAX];
        size_t n = ember_opt_state_arrays(opts[m], arrays);
        char name[EMBER_DLRM_NAME_MAX];
        uint64_t steps;
        for (size_t a = 0; a < n; a++) {
            const ember_st_tensor_t *t;
            size_t numel = arrays[a].rows * arrays[a].per_row;
            snprintf(name, sizeof(name), "optimizer.%zu.%s", m, arrays[a].name);
            EMBER_CHECK(
                    find_tensor(file, name, arrays[a].dtype, numel, 1, NULL, &t, err, err_length));
            memcpy(arrays[a].data, t->data, t->nbytes);
        }
        snprintf(name, sizeof(name), "optimizer.%zu.steps", m);
        EMBER_CHECK(meta_u64(file, name, UINT64_MAX, &steps, err, err_length));
        ember_opt_set_steps(opts[m], steps);
    }
    return EMBER_OK;
}

ember_status_t ember_ckpt_trainer_losses(const ember_ckpt_trainer_file_t *file, float *losses,
                                         char *err, size_t err_length)
{
    const ember_st_tensor_t *t;
    EMBER_CHECK(find_tensor(file, "losses", EMBER_DTYPE_F32, file->progress.steps, 1, NULL, &t, err,
                            err_length));
    memcpy(losses, t->data, t->nbytes);
    return EMBER_OK;
}
