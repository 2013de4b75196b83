/* engine/train/master_ckpt: manifests, pruning and resuming (master_ckpt.h). */
#include "engine/train/master_ckpt.h"

#include "common/ckpt_signal.h"
#include "common/clock.h"
#include "engine/io/checkpoint.h"
#include "engine/ops/half.h"
#include "engine/train/ckpt_file.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define PENDING_MAX 8

/* One checkpoint whose reports are coming in. */
typedef struct {
    uint64_t step; /* 0: a free slot */
    ember_ckpt_manifest_t manifest;
    uint32_t reports;
    uint8_t *reported; /* [world]: that rank's report is in */
    int failed, done;
    uint64_t bytes;
    double copy_s, wait_s, write_s;
    double first_at;
    char failure[300];
} pending_t;

struct ember_master_ckpt {
    ember_tp_t *tp;
    const ember_train_job_t *job;
    FILE *metrics;
    uint32_t expected; /* reports a checkpoint needs: trainers + PS holding tables */
    const int *ps_holding;
    pending_t pending[PENDING_MAX];
    uint64_t last_complete, last_failed;
    uint64_t stop_step; /* a SIGTERM's, 0: none */
};

static const char *sharding_name(const ember_train_job_t *job)
{
    return job->train.model == EMBER_MODEL_DLRM && job->train.dlrm.sharding == EMBER_SHARD_TABLE
                   ? "table"
                   : "row";
}

/* The slot of @step's checkpoint (taken when new); NULL when all are busy. */
static pending_t *pending_of(ember_master_ckpt_t *ckpt, uint64_t step)
{
    pending_t *free_slot = NULL;
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step == step)
            return &ckpt->pending[i];
        if (!ckpt->pending[i].step && !free_slot)
            free_slot = &ckpt->pending[i];
    }
    if (free_slot) {
        uint8_t *reported = calloc((size_t)ember_tp_world_size(ckpt->tp), 1);
        if (!reported)
            return NULL;
        *free_slot = (pending_t){.step = step, .first_at = ember_time_now(), .reported = reported};
        ember_ckpt_manifest_init(&free_slot->manifest, step);
    }
    return free_slot;
}

static void pending_release(pending_t *p)
{
    ember_ckpt_manifest_free(&p->manifest);
    free(p->reported);
    *p = (pending_t){0};
}

/* The manifest's description of the job, for whoever reads it. */
static void describe(const ember_master_ckpt_t *ckpt, ember_ckpt_manifest_t *m)
{
    const ember_train_job_t *job = ckpt->job;
    char text[32];
    ember_ckpt_manifest_set(m, "model", job->train.model == EMBER_MODEL_DLRM ? "dlrm" : "tutorial");
    snprintf(text, sizeof(text), "%d", job->trainers);
    ember_ckpt_manifest_set(m, "trainers", text);
    snprintf(text, sizeof(text), "%d", job->num_ps);
    ember_ckpt_manifest_set(m, "ps", text);
    ember_ckpt_manifest_set(m, "sharding", sharding_name(job));
    ember_ckpt_manifest_set(m, "optimizer", ember_opt_kind_name(job->train.optimizer.kind));
    ember_ckpt_manifest_set(m, "table_dtype", ember_dtype_name(job->table_dtype));
    ember_ckpt_manifest_set(m, "sparse_reduce",
                            job->sparse_reduce == EMBER_REDUCE_MEAN ? "mean" : "sum");
}

static void print_complete(ember_master_ckpt_t *ckpt, const pending_t *p, const char *dir)
{
    double seconds = ember_time_now() - p->first_at;
    printf("checkpoint after step %llu: %s, %.1f MiB in %zu files; PS copies %.3f s (the pause), "
           "waits %.3f s, writes %.2f s; complete %.2f s after the first file\n",
           (unsigned long long)p->step, dir, p->bytes / 1048576.0, p->manifest.nfiles, p->copy_s,
           p->wait_s, p->write_s, seconds);
    fflush(stdout);
    if (ckpt->metrics) {
        fprintf(ckpt->metrics,
                "{\"checkpoint\": %llu, \"bytes\": %llu, \"files\": %zu, \"copy_seconds\": %.6f, "
                "\"wait_seconds\": %.6f, \"write_seconds\": %.6f}\n",
                (unsigned long long)p->step, (unsigned long long)p->bytes, p->manifest.nfiles,
                p->copy_s, p->wait_s, p->write_s);
        fflush(ckpt->metrics);
    }
}

/* Every report is in: the manifest (last), then the older ones pruned. */
static void complete(ember_master_ckpt_t *ckpt, pending_t *p)
{
    char dir[EMBER_PATH_MAX + 32], err[400];
    const ember_train_job_t *job = ckpt->job;
    ember_status_t status = ember_ckpt_dir_name(job->checkpoint_dir, p->step, dir, sizeof(dir));
    if (status == EMBER_OK && !p->failed) {
        describe(ckpt, &p->manifest);
        status = ember_ckpt_manifest_write(dir, &p->manifest, err, sizeof(err));
        if (status != EMBER_OK)
            snprintf(p->failure, sizeof(p->failure), "%.290s", err);
    }
    if (p->failed || status != EMBER_OK) {
        ember_error("master", "checkpoint after step %llu failed (no manifest written): %s",
                    (unsigned long long)p->step, p->failure);
        ckpt->last_failed = p->step;
    } else {
        print_complete(ckpt, p, dir);
        ckpt->last_complete = p->step;
        if (ember_ckpt_prune(job->checkpoint_dir, job->checkpoint_keep, err, sizeof(err)) !=
            EMBER_OK)
            ember_warn("master", "pruning old checkpoints: %s", err);
    }
    pending_release(p);
}

/* Rank @rank writes a file of every checkpoint: a trainer, or a PS that
 * holds tables. */
static int owes_report(const ember_master_ckpt_t *ckpt, int rank)
{
    const int trainers = ckpt->job->trainers, ps = rank - trainers - 1;
    if (rank >= 0 && rank < trainers)
        return 1;
    return ps >= 0 && ps < ckpt->job->num_ps && ckpt->ps_holding[ps];
}

/* One report taken into its checkpoint. */
static void take_report(ember_master_ckpt_t *ckpt, pending_t *p, const ember_msg_ckpt_done_t *d,
                        int rank)
{
    if (d->status != EMBER_OK && !p->failed) {
        p->failed = 1;
        snprintf(p->failure, sizeof(p->failure), "%s: %s", ember_tp_peer_name(ckpt->tp, rank),
                 d->text);
    } else if (d->status == EMBER_OK &&
               ember_ckpt_manifest_add_file(&p->manifest, d->name, d->bytes, d->crc32c) !=
                       EMBER_OK &&
               !p->failed) {
        p->failed = 1;
        snprintf(p->failure, sizeof(p->failure), "%s reported %s twice",
                 ember_tp_peer_name(ckpt->tp, rank), d->name);
    }
    p->bytes += d->bytes;
    p->copy_s = d->copy_seconds > p->copy_s ? d->copy_seconds : p->copy_s;
    p->wait_s = d->wait_seconds > p->wait_s ? d->wait_seconds : p->wait_s;
    p->write_s = d->write_seconds > p->write_s ? d->write_seconds : p->write_s;
    p->reported[rank] = 1;
    if (++p->reports == ckpt->expected)
        complete(ckpt, p);
}

static void on_ckpt_done(ember_rpc_req_t *req, void *arg)
{
    ember_master_ckpt_t *ckpt = arg;
    ember_msg_ckpt_done_t done;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[160];
    pending_t *p = NULL;
    ember_status_t status = ember_wire_ckpt_done_unpack(data, length, &done, err, sizeof(err));
    if (status == EMBER_OK && done.step <= ckpt->last_complete)
        status = ember_status_text(err, sizeof(err), EMBER_ERR_INVALID_PARAM,
                                   "a report of step %llu, not after the last complete one",
                                   (unsigned long long)done.step);
    if (status == EMBER_OK && !owes_report(ckpt, ember_rpc_req_peer(req)))
        status = ember_status_text(err, sizeof(err), EMBER_ERR_INVALID_PARAM,
                                   "a report from a rank that writes no checkpoint file");
    if (status == EMBER_OK && !(p = pending_of(ckpt, done.step)))
        status = ember_status_text(err, sizeof(err), EMBER_ERR_OUT_OF_RANGE,
                                   "too many checkpoints in progress");
    if (status == EMBER_OK && p->reported[ember_rpc_req_peer(req)])
        status = ember_status_text(err, sizeof(err), EMBER_ERR_INVALID_PARAM,
                                   "a second report of step %llu", (unsigned long long)done.step);
    if (status != EMBER_OK) {
        ember_warn("master", "a checkpoint report from %s refused: %s",
                   ember_tp_peer_name(ckpt->tp, ember_rpc_req_peer(req)), err);
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
    take_report(ckpt, p, &done, ember_rpc_req_peer(req));
}

static void on_ckpt_at(ember_rpc_req_t *req, void *arg)
{
    ember_master_ckpt_t *ckpt = arg;
    ember_msg_ckpt_at_t at;
    char err[128];
    ember_status_t status = ember_wire_ckpt_at_take(req, &at, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    if (at.stop && (!ckpt->stop_step || at.step < ckpt->stop_step))
        ckpt->stop_step = at.step;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

ember_status_t ember_master_ckpt_create(ember_tp_t *tp, const ember_train_job_t *job,
                                        const int *ps_holding, uint64_t start_step, FILE *metrics,
                                        ember_master_ckpt_t **ckpt_p, char *err, size_t err_length)
{
    *ckpt_p = NULL;
    if (!job->checkpoint_dir)
        return EMBER_OK;
    EMBER_CHECK(ember_ckpt_clear_after(job->checkpoint_dir, start_step, err, err_length));
    ember_master_ckpt_t *ckpt = calloc(1, sizeof(*ckpt));
    if (!ckpt)
        return EMBER_ERR_NO_MEMORY;
    *ckpt = (ember_master_ckpt_t){.tp = tp,
                                  .job = job,
                                  .metrics = metrics,
                                  .ps_holding = ps_holding,
                                  .last_complete = start_step};
    ckpt->expected = (uint32_t)job->trainers;
    for (int p = 0; p < job->num_ps; p++)
        ckpt->expected += ps_holding[p] != 0;
    ember_rpc_register(tp, EMBER_OP_CKPT_DONE, on_ckpt_done, ckpt);
    ember_rpc_register(tp, EMBER_OP_CKPT_AT, on_ckpt_at, ckpt);
    *ckpt_p = ckpt;
    return EMBER_OK;
}

void ember_master_ckpt_destroy(ember_master_ckpt_t *ckpt)
{
    if (!ckpt)
        return;
    ember_rpc_register(ckpt->tp, EMBER_OP_CKPT_DONE, NULL, NULL);
    ember_rpc_register(ckpt->tp, EMBER_OP_CKPT_AT, NULL, NULL);
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step)
            pending_release(&ckpt->pending[i]);
    }
    free(ckpt);
}

void ember_master_ckpt_plan_of(const ember_train_job_t *job, ember_msg_ckpt_plan_t *plan)
{
    *plan = (ember_msg_ckpt_plan_t){.every = job->checkpoint_every};
    if (job->checkpoint_dir)
        snprintf(plan->root, sizeof(plan->root), "%s", job->checkpoint_dir);
}

ember_status_t ember_master_ckpt_plan(ember_master_ckpt_t *ckpt, int first_ps, char *err,
                                      size_t err_length)
{
    for (int p = 0; ckpt && p < ckpt->job->num_ps; p++) {
        if (!ckpt->ps_holding[p])
            continue;
        ember_msg_ckpt_plan_t plan;
        ember_master_ckpt_plan_of(ckpt->job, &plan);
        plan.index = (uint32_t)p;
        ember_iov_t iov = {&plan, sizeof(plan)};
        size_t length;
        ember_status_t status = ember_rpc_call(ckpt->tp, first_ps + p, EMBER_OP_CKPT_PLAN, &iov, 1,
                                               NULL, 0, &length);
        if (status != EMBER_OK)
            return ember_status_text(err, err_length, status,
                                     "ps%d did not take the checkpoint plan: %s", p,
                                     ember_status_string(status));
    }
    return EMBER_OK;
}

void ember_master_ckpt_poll(ember_master_ckpt_t *ckpt)
{
    int what = ckpt ? ember_ckpt_signal_take() : EMBER_CKPT_SIGNAL_NONE;
    if (what == EMBER_CKPT_SIGNAL_NONE)
        return;
    ember_wire_ckpt_request_send(ckpt->tp, what == EMBER_CKPT_SIGNAL_STOP);
}

/* Whether a checkpoint up to @steps is still collecting reports. */
static int collecting(const ember_master_ckpt_t *ckpt, uint64_t steps)
{
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step && ckpt->pending[i].step <= steps)
            return 1;
    }
    return ckpt->last_complete < steps && ckpt->last_failed < steps;
}

/* Whether rank @r's report of checkpoint @step is in. */
static int has_reported(const ember_master_ckpt_t *ckpt, uint64_t step, int r)
{
    for (size_t i = 0; i < PENDING_MAX; i++) {
        if (ckpt->pending[i].step == step)
            return ckpt->pending[i].reported[r];
    }
    return 0;
}

/* A PS or trainer gone whose report of @step has not come: it never will
 * (a trainer that wrote its file may leave before the PS are done). */
static int rank_lost(const ember_master_ckpt_t *ckpt, uint64_t step, int *rank_p)
{
    for (int r = 0; r < ember_tp_world_size(ckpt->tp); r++) {
        if (owes_report(ckpt, r) && ember_tp_peer_lost(ckpt->tp, r) &&
            !has_reported(ckpt, step, r)) {
            *rank_p = r;
            return 1;
        }
    }
    return 0;
}

ember_status_t ember_master_ckpt_finish(ember_master_ckpt_t *ckpt, uint64_t steps, char *err,
                                        size_t err_length)
{
    int lost;
    if (!ckpt)
        return EMBER_OK;
    while (collecting(ckpt, steps)) {
        if (rank_lost(ckpt, steps, &lost))
            return ember_status_text(err, err_length, EMBER_ERR_PEER_LOST,
                                     "the checkpoint after step %llu: %s was lost before it "
                                     "wrote its file",
                                     (unsigned long long)steps, ember_tp_peer_name(ckpt->tp, lost));
        ember_tp_wait(ckpt->tp, 0.1);
    }
    if (ckpt->last_complete < steps)
        return ember_status_text(err, err_length, EMBER_ERR_IO,
                                 "the checkpoint after step %llu failed",
                                 (unsigned long long)steps);
    return EMBER_OK;
}

int ember_master_ckpt_stopped(const ember_master_ckpt_t *ckpt, uint64_t *step_p)
{
    if (!ckpt || !ckpt->stop_step)
        return 0;
    *step_p = ckpt->stop_step;
    return 1;
}

/* ---- resuming -------------------------------------------------------------- */

/* The settings a resumed job must share with the one that wrote the
 * checkpoint, by name (the rest of the course of training may change:
 * more epochs or steps, another placement, evaluations). */
typedef struct {
    const char *name;
    size_t offset, size;
} setting_t;

#define SETTING(field, text)                                                                    \
    {                                                                                           \
        text, offsetof(ember_train_config_t, field), sizeof(((ember_train_config_t *)0)->field) \
    }
static const setting_t settings[] = {
        SETTING(model, "--model"),
        SETTING(rows, "--rows"),
        SETTING(dim, "--dim / --embedding-dim"),
        SETTING(classes, "--classes"),
        SETTING(mode, "--mode"),
        SETTING(data, "--data"),
        SETTING(padding_idx, "--padding-idx"),
        SETTING(batches, "--batches"),
        SETTING(min_indices, "--min-indices"),
        SETTING(max_indices, "--max-indices"),
        SETTING(consistency, "--consistency"),
        SETTING(per_sample_weights, "--weights"),
        SETTING(seed, "--seed"),
        SETTING(optimizer, "--optimizer, --lr or --momentum"),
        SETTING(nhidden, "--hidden"),
        SETTING(hidden, "--hidden"),
        SETTING(half_replies, "--reply-dtype"),
        SETTING(dlrm.tables, "the tables"),
        SETTING(dlrm.batch_size, "--batch-size"),
        SETTING(dlrm.dense_layers, "--dense-arch-layer-sizes"),
        SETTING(dlrm.dense_sizes, "--dense-arch-layer-sizes"),
        SETTING(dlrm.over_layers, "--over-arch-layer-sizes"),
        SETTING(dlrm.over_sizes, "--over-arch-layer-sizes"),
        SETTING(dlrm.rows, "--num-embeddings(-per-feature)"),
};

static ember_status_t check_settings(const ember_ckpt_trainer_file_t *file,
                                     const ember_train_config_t *job, char *err, size_t err_length)
{
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        const setting_t *s = &settings[i];
        if (memcmp((const char *)&file->config + s->offset, (const char *)job + s->offset,
                   s->size) != 0)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "%s: this job's %s differs from the checkpoint's: resume "
                                     "it with the flags it was started with",
                                     file->path, s->name);
    }
    if (strcmp(file->config.dlrm.data, job->dlrm.data) != 0)
        ember_warn("master",
                   "the checkpoint's job read %s, this one reads %s: the data "
                   "position is carried over as it is",
                   file->config.dlrm.data, job->dlrm.data);
    return EMBER_OK;
}

/* The manifest's layout against the job's: trainers and row storage must
 * match; PS count and placement may change. */
static ember_status_t check_manifest(const ember_train_job_t *job, const char *dir,
                                     const ember_ckpt_manifest_t *m, char *err, size_t err_length)
{
    const char *trainers = ember_ckpt_manifest_get(m, "trainers");
    const char *dtype = ember_ckpt_manifest_get(m, "table_dtype");
    const char *reduce = ember_ckpt_manifest_get(m, "sparse_reduce");
    char want[16];
    snprintf(want, sizeof(want), "%d", job->trainers);
    if (!trainers || strcmp(trainers, want) != 0)
        return ember_status_text(
                err, err_length, EMBER_ERR_INVALID_PARAM,
                "%s was taken with %s trainers, this job has %d: a trainer's place in the data "
                "cannot be carried to another count (the tutorial's and synthetic batches are "
                "drawn per trainer and step, a replay file holds each trainer's, and a DLRM "
                "trainer t reads examples i %% T == t); resume with --trainers %s",
                dir, trainers ? trainers : "?", job->trainers, trainers ? trainers : "?");
    if (!dtype || strcmp(dtype, ember_dtype_name(job->table_dtype)) != 0 || !reduce ||
        strcmp(reduce, job->sparse_reduce == EMBER_REDUCE_MEAN ? "mean" : "sum") != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: its --table-dtype %s and --sparse-reduce %s must be this "
                                 "job's",
                                 dir, dtype ? dtype : "?", reduce ? reduce : "?");
    return EMBER_OK;
}

/* The PS files the manifest names. */
static ember_status_t ps_files_of(const ember_ckpt_manifest_t *m, ember_master_resume_t *resume)
{
    resume->ps_files = calloc(m->nfiles ? m->nfiles : 1, EMBER_CKPT_FILE_NAME_MAX);
    if (!resume->ps_files)
        return EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i < m->nfiles; i++) {
        if (strncmp(m->files[i].name, "ps", 2) == 0)
            snprintf(resume->ps_files + (size_t)resume->ps_count++ * EMBER_CKPT_FILE_NAME_MAX,
                     EMBER_CKPT_FILE_NAME_MAX, "%s", m->files[i].name);
    }
    return EMBER_OK;
}

ember_status_t ember_master_resume_find(const ember_train_job_t *job,
                                        const ember_msg_train_start_t *spec, float *params,
                                        ember_master_resume_t *resume, char *err, size_t err_length)
{
    ember_ckpt_manifest_t m;
    ember_ckpt_trainer_file_t file;
    memset(resume, 0, sizeof(*resume));
    EMBER_CHECK(ember_ckpt_find(job->resume_path, resume->dir, sizeof(resume->dir), &m, err,
                                err_length));
    ember_status_t status = check_manifest(job, resume->dir, &m, err, err_length);
    if (status == EMBER_OK)
        status = ember_ckpt_trainer_open(resume->dir, 0, &file, err, err_length);
    if (status == EMBER_OK) {
        status = check_settings(&file, &job->train, err, err_length);
        if (status == EMBER_OK && file.progress.steps != m.step)
            status = ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                       "%s: taken after step %llu, its manifest says %llu",
                                       file.path, (unsigned long long)file.progress.steps,
                                       (unsigned long long)m.step);
        if (status == EMBER_OK)
            status = ember_ckpt_trainer_dense(&file, spec, params, err, err_length);
        resume->epoch = file.progress.epoch;
        ember_ckpt_trainer_close(&file);
    }
    resume->step = m.step;
    if (status == EMBER_OK)
        status = ps_files_of(&m, resume);
    ember_ckpt_manifest_free(&m);
    return status;
}

void ember_master_resume_free(ember_master_resume_t *resume)
{
    free(resume->ps_files);
    resume->ps_files = NULL;
}

/* PS @p's TABLE_RESTORE, answered: its error text into @err. */
static ember_status_t restore_answer(ember_future_t *future, int p, char *err, size_t err_length)
{
    ember_status_t status = ember_future_wait(future);
    if (status != EMBER_OK) {
        size_t length = 0;
        const char *text = ember_future_data(future, &length);
        ember_status_text(err, err_length, status, "ps%d could not restore its tables: %.*s", p,
                          (int)(length > 300 ? 300 : length), text ? text : "");
    }
    ember_future_release(future);
    return status;
}

ember_status_t ember_master_resume_tables(ember_tp_t *tp, const ember_master_resume_t *resume,
                                          const int *ps_holding, int num_ps, int first_ps,
                                          char *err, size_t err_length)
{
    ember_msg_table_restore_t head = {.count = resume->ps_count};
    snprintf(head.dir, sizeof(head.dir), "%s", resume->dir);
    ember_iov_t iov[2] = {{&head, sizeof(head)},
                          {resume->ps_files, (size_t)resume->ps_count * EMBER_CKPT_FILE_NAME_MAX}};
    ember_future_t **futures = calloc((size_t)num_ps, sizeof(*futures));
    ember_status_t status = futures ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    /* Every PS reads its files at once; a large table takes a while: no
     * RPC deadline but the PS's loss. */
    for (int p = 0; status == EMBER_OK && p < num_ps; p++) {
        if (ps_holding[p])
            status = ember_rpc_call_async(tp, first_ps + p, EMBER_OP_TABLE_RESTORE, iov, 2, NULL, 0,
                                          &(ember_rpc_param_t){.timeout_s = 1e9}, &futures[p]);
    }
    for (int p = 0; futures && p < num_ps; p++) {
        if (!futures[p])
            continue;
        ember_status_t answer = restore_answer(futures[p], p, status == EMBER_OK ? err : NULL,
                                               status == EMBER_OK ? err_length : 0);
        if (status == EMBER_OK)
            status = answer;
    }
    free(futures);
    return status;
}

/* ---- --init from a checkpoint ------------------------------------------------ */

/* A PS file's metadata number @table.@key, or -1. */
static int64_t shard_meta(const ember_st_file_t *file, const char *table, const char *key)
{
    char name[EMBER_TABLE_NAME_MAX + 16], *end;
    snprintf(name, sizeof(name), "%s.%s", table, key);
    const char *text = ember_st_metadata(file, name);
    errno = 0;
    long long v = text && *text >= '0' && *text <= '9' ? strtoll(text, &end, 10) : -1;
    return text && !errno && v >= 0 && *end == '\0' ? v : -1;
}

/* The rows of @table that one PS file holds, put at their global ids. */
static ember_status_t take_shard(const ember_st_file_t *file, const char *path,
                                 const ember_train_job_table_t *table, float *out, int64_t *covered,
                                 char *err, size_t err_length)
{
    const int64_t shard = shard_meta(file, table->name, "shard");
    const int64_t count = shard_meta(file, table->name, "num_shards");
    char name[EMBER_TABLE_NAME_MAX + 16];
    snprintf(name, sizeof(name), "%s.weight", table->name);
    const ember_st_tensor_t *w = ember_st_find(file, name);
    if (shard < 0 && count < 0 && !w)
        return EMBER_OK; /* not a file of this table */
    const int64_t local = count > 0 ? (table->rows - shard + count - 1) / count : -1;
    if (shard < 0 || count <= 0 || shard >= count ||
        shard_meta(file, table->name, "rows") != table->rows || !w || w->ndim != 2 ||
        w->shape[0] != local || w->shape[1] != (int64_t)table->dim ||
        (w->dtype != EMBER_DTYPE_F32 && w->dtype != EMBER_DTYPE_F16))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: table %s is not a shard of %lld x %u rows", path, table->name,
                                 (long long)table->rows, table->dim);
    const size_t dim = table->dim, bytes = ember_dtype_size(w->dtype);
    for (int64_t i = 0; i < local; i++) {
        const char *row = (const char *)w->data + (size_t)i * dim * bytes;
        float *dst = out + (size_t)(shard + i * count) * dim;
        if (w->dtype == EMBER_DTYPE_F32)
            memcpy(dst, row, dim * sizeof(float));
        else
            for (size_t d = 0; d < dim; d++) {
                uint16_t h;
                memcpy(&h, row + d * 2, 2);
                dst[d] = ember_half_to_float(h);
            }
    }
    *covered += local;
    return EMBER_OK;
}

/* Table @table whole from the mapped PS files. */
static ember_status_t whole_table(ember_st_file_t *const *files, char *const *paths, size_t n,
                                  const ember_train_job_table_t *table, float **rows_p, char *err,
                                  size_t err_length)
{
    int64_t covered = 0;
    float *out = malloc((size_t)table->rows * table->dim * sizeof(float) + 4);
    ember_status_t status = out ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; status == EMBER_OK && i < n; i++)
        status = take_shard(files[i], paths[i], table, out, &covered, err, err_length);
    if (status == EMBER_OK && covered != table->rows)
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                   "the checkpoint's PS files hold %lld of table %s's %lld rows",
                                   (long long)covered, table->name, (long long)table->rows);
    if (status != EMBER_OK) {
        free(out);
        out = NULL;
    }
    *rows_p = out;
    return status;
}

static ember_status_t init_tables(const char *dir, const ember_master_resume_t *r,
                                  const ember_train_job_table_t *tables, size_t ntables,
                                  float **rows, char *err, size_t err_length)
{
    ember_st_file_t **files = calloc(r->ps_count + 1, sizeof(*files));
    char **paths = calloc(r->ps_count + 1, sizeof(*paths));
    ember_status_t status = files && paths ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK)
        status = ember_ckpt_map_files(dir, r->ps_files, EMBER_CKPT_FILE_NAME_MAX, r->ps_count,
                                      files, paths, err, err_length);
    for (size_t t = 0; status == EMBER_OK && t < ntables; t++)
        status = whole_table(files, paths, r->ps_count, &tables[t], &rows[t], err, err_length);
    ember_ckpt_unmap_files(files, paths, r->ps_count);
    free(files);
    free(paths);
    return status;
}

ember_status_t ember_master_ckpt_weights(const char *path, const ember_msg_train_start_t *spec,
                                         const ember_train_job_table_t *tables, size_t ntables,
                                         float *params, float **rows, char *err, size_t err_length)
{
    ember_ckpt_manifest_t m;
    ember_master_resume_t r = {.step = 0};
    ember_ckpt_trainer_file_t file;
    EMBER_CHECK(ember_ckpt_find(path, r.dir, sizeof(r.dir), &m, err, err_length));
    ember_status_t status = ps_files_of(&m, &r);
    ember_ckpt_manifest_free(&m);
    if (status == EMBER_OK)
        status = ember_ckpt_trainer_open(r.dir, 0, &file, err, err_length);
    if (status == EMBER_OK) {
        status = ember_ckpt_trainer_dense(&file, spec, params, err, err_length);
        ember_ckpt_trainer_close(&file);
    }
    if (status == EMBER_OK)
        status = init_tables(r.dir, &r, tables, ntables, rows, err, err_length);
    if (status == EMBER_OK)
        ember_info("master", "--init: the weights of %s", r.dir);
    ember_master_resume_free(&r);
    return status;
}
