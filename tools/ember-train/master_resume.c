/*
 * tools/ember-train/master_resume: the master's side of the checkpoints.
 *
 * Resuming: the checkpoint --resume names (the newest complete one that
 * verifies), checked against the job: the manifest's trainers, table dtype
 * and sparse reduce; trainer0's file's settings and the model's
 * description, setting by setting (the model compares its own); then its
 * dense parameters are the trainers' start.  A file written by ember-train
 * before the models moved onto the library API (format 1, whose settings
 * were a raw struct of that build) is refused saying what to do.
 * Writing: the library writes them (<ember/checkpoint.h>); the master
 * describes the job in their manifests and prints each one completed.
 */
#include "tools/ember-train/master.h"

#include "tools/ember-train/settings.h"

#include <ember/log.h>
#include <ember/safetensors.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The trainer files of ember-train before its models moved onto the API. */
#define FORMAT_BEFORE_API "ember-trainer-checkpoint-1"

/* The manifest's layout against the job's: trainers and row storage must
 * match; PS count and placement may change. */
static ember_status_t check_manifest(master_t *m)
{
    const ember_train_settings_t *s = &m->tj->settings;
    const ember_checkpoint_info_t *info = &m->resume;
    const char *dtype = ember_checkpoint_describe(info, "table_dtype");
    const char *reduce = ember_checkpoint_describe(info, "sparse_reduce");
    char was[16] = "?";
    if (info->trainers)
        snprintf(was, sizeof(was), "%u", info->trainers);
    if (info->trainers != (uint32_t)s->trainers)
        return ember_status_text(
                m->cause, sizeof(m->cause), EMBER_ERR_INVALID_PARAM,
                "%s was taken with %s trainers, this job has %d: a trainer's place in the data "
                "cannot be carried to another count (each trainer reads its own share of the "
                "data); resume with --trainers %s",
                info->dir, was, s->trainers, was);
    const char *kind = ember_checkpoint_describe(info, "table_kind");
    const char *want = s->table_kind == EMBER_TABLE_DYNAMIC ? "dynamic" : "fixed";
    if (strcmp(*kind ? kind : "fixed", want) != 0)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_INVALID_PARAM,
                                 "%s holds %s tables, this job's are %s: resume with "
                                 "--table-kind %s",
                                 info->dir, kind, want, kind);
    if (strcmp(dtype, ember_dtype_name(s->table_dtype)) != 0 ||
        strcmp(reduce, s->sparse_reduce == EMBER_REDUCE_MEAN ? "mean" : "sum") != 0)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_INVALID_PARAM,
                                 "%s: its --table-dtype %s and --sparse-reduce %s must be this "
                                 "job's",
                                 info->dir, *dtype ? dtype : "?", *reduce ? reduce : "?");
    return EMBER_OK;
}

/* A trainer file of ember-train before the API: what to do with it. */
static ember_status_t refuse_before_api(master_t *m, const char *path)
{
    ember_st_file_t *file;
    const char *format = NULL;
    if (ember_st_map(path, &file, NULL, 0) == EMBER_OK) {
        format = ember_st_metadata(file, "format");
        const int old = format && strcmp(format, FORMAT_BEFORE_API) == 0;
        ember_st_close(file);
        if (old)
            return ember_status_text(
                    m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                    "%s: written by an ember-train from before its models moved onto the "
                    "library API (format %s: its settings are a raw struct of that build, "
                    "which this one cannot check setting by setting); resume it with the "
                    "ember-train that wrote it, or start from its weights with --init %s "
                    "(step 0, fresh optimizer state)",
                    path, FORMAT_BEFORE_API, m->resume.dir);
    }
    return EMBER_ERR_FORMAT; /* the library's own refusal stands */
}

/* A metadata text of trainer0's file, or an error naming it. */
static ember_status_t meta_text(master_t *m, const ember_st_file_t *file, const char *path,
                                const char *key, const char **text_p)
{
    if (!(*text_p = ember_st_metadata(file, key)))
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                                 "%s: metadata '%s' is missing", path, key);
    return EMBER_OK;
}

/* The job that wrote @file against this one, setting by setting. */
static ember_status_t check_settings(master_t *m, const ember_st_file_t *file, const char *path)
{
    const train_job_t *tj = m->tj;
    const char *settings, *config, *differs = NULL;
    const ember_model_ops_t *model;
    ember_train_settings_t was = tj->settings;
    char why[400];
    EMBER_CHECK(meta_text(m, file, path, "train.settings", &settings));
    EMBER_CHECK(meta_text(m, file, path, "train.config", &config));
    if (train_settings_parse(settings, &model, &was, why, sizeof(why)) != EMBER_OK)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT, "%s: %s", path, why);
    if (model != m->model)
        differs = "--model";
    void *scratch = differs ? NULL : calloc(1, m->model->config_size);
    if (scratch) {
        if (m->model->parse(scratch, config, why, sizeof(why)) != EMBER_OK) {
            free(scratch);
            return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT, "%s: %s", path,
                                     why);
        }
        differs = m->model->differs(scratch, tj->config);
        free(scratch);
    } else if (!differs) {
        return EMBER_ERR_NO_MEMORY;
    }
    if (!differs)
        differs = train_settings_differ(&was, &tj->settings);
    if (differs)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_INVALID_PARAM,
                                 "%s: this job's %s differs from the checkpoint's: resume it "
                                 "with the flags it was started with",
                                 path, differs);
    return EMBER_OK;
}

/* The epoch in progress, as trainer0's file has it. */
static ember_status_t take_epoch(master_t *m, const ember_st_file_t *file, const char *path)
{
    const char *text;
    char *end;
    EMBER_CHECK(meta_text(m, file, path, "epoch", &text));
    errno = 0;
    unsigned long long epoch = *text >= '0' && *text <= '9' ? strtoull(text, &end, 10) : 0;
    if (*text < '0' || *text > '9' || errno || *end || epoch >= m->epochs + 1ull)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                                 "%s: metadata 'epoch' is '%s', not an epoch of this job's %u",
                                 path, text, m->epochs);
    m->printed = (uint32_t)epoch;
    return EMBER_OK;
}

ember_status_t master_resume_find(master_t *m)
{
    ember_model_tensor_t tensors[EMBER_MODEL_TENSORS_MAX];
    const size_t n = m->model->tensors(m->tj->config, tensors);
    ember_st_file_t *file;
    char path[700];
    EMBER_CHECK(ember_checkpoint_find(m->tj->resume_path, &m->resume, m->cause, sizeof(m->cause)));
    EMBER_CHECK(check_manifest(m));
    snprintf(path, sizeof(path), "%s/trainer0.safetensors", m->resume.dir);
    ember_status_t status =
            ember_checkpoint_open_trainer(&m->resume, 0, &file, m->cause, sizeof(m->cause));
    if (status == EMBER_ERR_FORMAT)
        return refuse_before_api(m, path);
    if (status != EMBER_OK)
        return status;
    status = check_settings(m, file, path);
    if (status == EMBER_OK)
        status = take_epoch(m, file, path);
    if (status == EMBER_OK)
        status = master_dense_from(m, file, path, tensors, n);
    ember_st_close(file);
    if (status != EMBER_OK)
        return status;
    m->start_step = m->resume.step;
    printf("resuming from %s (step %llu)\n", m->resume.dir, (unsigned long long)m->start_step);
    fflush(stdout);
    return EMBER_OK;
}

/* ---- writing them -------------------------------------------------------------------- */

ember_status_t master_ckpt_open(master_t *m)
{
    const train_job_t *tj = m->tj;
    const ember_train_settings_t *s = &tj->settings;
    int table_wise = 0;
    for (size_t t = 0; t < m->ntables; t++)
        table_wise |= m->tables[t].sharding == EMBER_SHARD_TABLE_WISE;
    /* The manifest's description of the job, for whoever reads it. */
    const ember_st_meta_t describe[] = {
            {"model", m->model->name},
            {"sharding", table_wise ? "table" : "row"},
            {"optimizer", ember_opt_kind_name(s->optimizer.kind)},
            {"table_dtype", ember_dtype_name(s->table_dtype)},
            {"table_kind", s->table_kind == EMBER_TABLE_DYNAMIC ? "dynamic" : "fixed"},
            {"sparse_reduce", s->sparse_reduce == EMBER_REDUCE_MEAN ? "mean" : "sum"}};
    ember_checkpoint_config_t config;
    ember_checkpoint_config_init(&config);
    config.root = tj->checkpoint_dir;
    config.every = tj->checkpoint_every;
    config.keep = tj->checkpoint_keep;
    config.start_step = m->start_step;
    config.signals = tj->checkpoint_dir != NULL;
    config.describe = describe;
    config.ndescribe = sizeof(describe) / sizeof(describe[0]);
    return ember_checkpoint_open(m->job, &config, &m->ckpt, m->cause, sizeof(m->cause));
}

void master_ckpt_poll(master_t *m)
{
    ember_checkpoint_event_t e;
    while (m->ckpt && ember_checkpoint_poll(m->ckpt, &e)) {
        if (e.failed)
            continue; /* the library said why */
        master_progress_hide(m);
        printf("checkpoint after step %llu: %s, %.1f MiB in %zu files; PS pauses %.3f s (its "
               "snapshot), waits %.3f s, writes %.2f s; complete %.2f s after the first file\n",
               (unsigned long long)e.step, e.dir, e.bytes / 1048576.0, e.files, e.copy_seconds,
               e.wait_seconds, e.write_seconds, e.complete_seconds);
        fflush(stdout);
        if (m->metrics) {
            fprintf(m->metrics,
                    "{\"checkpoint\": %llu, \"bytes\": %llu, \"files\": %zu, \"copy_seconds\": "
                    "%.6f, \"wait_seconds\": %.6f, \"write_seconds\": %.6f}\n",
                    (unsigned long long)e.step, (unsigned long long)e.bytes, e.files,
                    e.copy_seconds, e.wait_seconds, e.write_seconds);
            fflush(m->metrics);
        }
        master_progress_show(m);
    }
}
