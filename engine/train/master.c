/*
 * engine/train/master: the driver of a training job (the tutorial's master).
 *
 * TRAIN_START is answered by each trainer only when it finishes (as the
 * tutorial's rpc_async(_run_trainer)); epoch reports arrive meanwhile.  A
 * trainer that fails makes the master abort the others and the PS, so the
 * job ends with an error, never a hang.
 */
#include "engine/train/master.h"

#include "common/clock.h"
#include "engine/train/data.h"
#include "engine/train/dlrm_io.h"
#include "engine/train/master_ckpt.h"
#include "engine/train/master_eval.h"
#include "engine/train/model_io.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Chunks of table traffic between master and PS. */
#define CHUNK_BYTES (4u << 20)

typedef struct {
    ember_tp_t *tp;
    const ember_train_job_t *job;
    int first_ps;
    /* epoch reports: [epochs][trainers] */
    ember_msg_epoch_report_t *reports;
    uint8_t *reported;
    uint32_t epochs, printed;
    FILE *metrics;
    double started;
    /* the model every trainer starts from */
    ember_msg_train_start_t spec;
    size_t sizes[EMBER_MAX_HIDDEN + 2], layers, nparams;
    float *params;
    ember_train_job_table_t tables[EMBER_JOB_TABLES_MAX];
    size_t ntables;
    ember_master_eval_t *eval; /* DLRM's evaluations */
    /* checkpoints: writing them (NULL: none), and the one resumed from */
    ember_master_ckpt_t *ckpt;
    ember_master_resume_t resume;
    int *ps_holding; /* [num_ps]: PS p holds tables */
    /* one TRAIN_START per trainer, untouched until its call completes */
    ember_msg_train_start_t *starts;
    ember_future_t **futures;
    /* set by a phase that fails after the job began: the others are aborted */
    char cause[512];
} master_t;

/* What the trainers sent back when they finished. */
typedef struct {
    uint64_t steps, bags, per_trainer;
    float *losses; /* [per_trainer][trainers] */
    float *params; /* trainer0's dense layers */
    double last;   /* the last step's loss, mean over trainers */
} finished_t;

/* The mean loss of @epoch's steps over every trainer. */
static double epoch_mean_loss(const master_t *master, uint32_t epoch)
{
    double loss = 0;
    uint64_t steps = 0;
    for (int t = 0; t < master->job->trainers; t++) {
        const ember_msg_epoch_report_t *r =
                &master->reports[(size_t)epoch * master->job->trainers + t];
        loss += r->loss_sum;
        steps += r->steps;
    }
    return steps ? loss / (double)steps : 0.0;
}

/* With --staleness: the largest any trainer's lookups saw so far (the
 * lines of a job without it stay as they were). */
static void staleness_text(const ember_train_job_t *job, uint64_t seen, int json, char *out,
                           size_t length)
{
    out[0] = '\0';
    if (job->train.staleness > 0)
        snprintf(out, length, json ? ", \"staleness\": %llu" : "  staleness %llu",
                 (unsigned long long)seen);
}

static void print_epoch(master_t *master, uint32_t epoch)
{
    const ember_train_job_t *job = master->job;
    double seconds = 0;
    uint64_t steps = 0, bags = 0, stale = 0;
    char text[48], json[48];
    for (int t = 0; t < job->trainers; t++) {
        const ember_msg_epoch_report_t *r = &master->reports[epoch * job->trainers + t];
        steps += r->steps;
        bags += r->bags;
        if (r->seconds > seconds)
            seconds = r->seconds;
        if (r->staleness > stale)
            stale = r->staleness;
    }
    staleness_text(job, stale, 0, text, sizeof(text));
    staleness_text(job, stale, 1, json, sizeof(json));
    double mean = epoch_mean_loss(master, epoch);
    double steps_s = seconds > 0 ? (double)steps / seconds : 0.0;
    double bags_s = seconds > 0 ? (double)bags / seconds : 0.0;
    /* DLRM's bags are its examples (one bag a table an example). */
    const char *what = job->train.model == EMBER_MODEL_DLRM ? "examples" : "bags";
    printf("epoch %4u  mean loss %.4f  steps/s %.0f  %s/s %.0f%s\n", epoch + 1, mean, steps_s, what,
           bags_s, text);
    fflush(stdout);
    if (master->metrics) {
        fprintf(master->metrics,
                "{\"epoch\": %u, \"loss\": %.6f, \"steps\": %llu, "
                "\"%s\": %llu, \"seconds\": %.6f, \"steps_per_s\": %.1f, "
                "\"%s_per_s\": %.1f%s}\n",
                epoch + 1, mean, (unsigned long long)steps, what, (unsigned long long)bags, seconds,
                steps_s, what, bags_s, json);
        fflush(master->metrics);
    }
}

static void on_epoch_report(ember_rpc_req_t *req, void *arg)
{
    master_t *master = arg;
    ember_msg_epoch_report_t msg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[96];
    ember_status_t status = ember_wire_epoch_report_unpack(
            data, length, (uint32_t)master->job->trainers, master->epochs, &msg, err, sizeof(err));

    if (status == EMBER_OK && msg.staleness > master->job->train.staleness)
        status = ember_status_text(err, sizeof(err), EMBER_ERR_INVALID_PARAM,
                                   "trainer%u saw staleness %llu, beyond --staleness %u",
                                   msg.trainer, (unsigned long long)msg.staleness,
                                   master->job->train.staleness);
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    size_t slot = (size_t)msg.epoch * master->job->trainers + msg.trainer;
    master->reports[slot] = msg;
    master->reported[slot] = 1;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
    /* Print epochs in order, each once every trainer has reported it. */
    while (master->printed < master->epochs) {
        for (int t = 0; t < master->job->trainers; t++) {
            if (!master->reported[(size_t)master->printed * master->job->trainers + t])
                return;
        }
        print_epoch(master, master->printed++);
    }
}

/* Call and wait, turning a failure into one error line naming the peer. */
static ember_status_t master_call(master_t *master, int rank, uint16_t op, const ember_iov_t *iov,
                                  size_t iovcnt, void *out, size_t capacity, const char *what)
{
    ember_future_t *future;
    ember_status_t status =
            ember_rpc_call_async(master->tp, rank, op, iov, iovcnt, out, capacity, NULL, &future);
    if (status != EMBER_OK)
        return status;
    status = ember_future_wait(future);
    if (status != EMBER_OK) {
        size_t length;
        const char *text = ember_future_data(future, &length);
        ember_error("master", "%s on %s failed: %.*s", what, ember_tp_peer_name(master->tp, rank),
                    (int)length, text ? text : "");
    }
    ember_future_release(future);
    return status;
}

static void abort_job(master_t *master, const char *cause)
{
    ember_iov_t iov = {.buffer = cause, .length = strlen(cause)};
    ember_future_t *futures[4096];
    int count = 0;
    for (int rank = 0; rank < ember_tp_world_size(master->tp) && count < 4096; rank++) {
        if (rank == ember_tp_rank(master->tp) || ember_tp_peer_lost(master->tp, rank))
            continue;
        /* A live rank answers at once; a hung one must not hold the end up. */
        if (ember_rpc_call_async(master->tp, rank, EMBER_OP_ABORT, &iov, 1, NULL, 0,
                                 &(ember_rpc_param_t){.timeout_s = 1.0},
                                 &futures[count]) == EMBER_OK)
            count++;
    }
    for (int i = 0; i < count; i++) {
        ember_future_wait(futures[i]);
        ember_future_release(futures[i]);
    }
}

/* Initial values of @table: each shard keeps the rows it owns. */
static ember_status_t load_table(master_t *master, const ember_train_job_table_t *table, int ps,
                                 const float *initial)
{
    int64_t per_chunk = CHUNK_BYTES / (table->dim * sizeof(float));
    for (int64_t first = 0; first < table->rows; first += per_chunk) {
        int64_t count = table->rows - first < per_chunk ? table->rows - first : per_chunk;
        ember_msg_table_load_t load = {.table_id = table->id, .first = first, .count = count};
        ember_iov_t parts[2] = {
                {&load, sizeof(load)},
                {initial + (size_t)first * table->dim, (size_t)count * table->dim * sizeof(float)}};
        EMBER_CHECK(master_call(master, master->first_ps + ps, EMBER_OP_TABLE_LOAD, parts, 2, NULL,
                                0, "loading a table"));
    }
    return EMBER_OK;
}

/* @table's shards on its PS, drawn there (@init) or loaded from @initial. */
static ember_status_t create_table(master_t *master, const ember_train_job_table_t *table,
                                   uint32_t init, const float *initial)
{
    const ember_train_job_t *job = master->job;
    for (uint32_t shard = 0; shard < table->shards; shard++) {
        const int ps = (int)(table->first_ps + shard);
        ember_msg_table_create_t create = {
                .table_id = table->id,
                .shard = shard,
                .num_shards = table->shards,
                .trainers = (uint32_t)job->trainers,
                .rows = table->rows,
                .dim = table->dim,
                .consistency = job->train.consistency,
                .staleness = job->train.staleness,
                .sparse_reduce = job->sparse_reduce,
                .init = initial ? EMBER_INIT_LOAD : init,
                .dtype = job->table_dtype,
                .device = strcmp(job->ps_device, "cuda") == 0 ? EMBER_TABLE_CUDA : EMBER_TABLE_HOST,
                .seed = job->train.seed + table->id,
                .optimizer = job->train.optimizer,
        };
        snprintf(create.name, sizeof(create.name), "%s", table->name);
        ember_iov_t iov = {.buffer = &create, .length = sizeof(create)};
        EMBER_CHECK(master_call(master, master->first_ps + ps, EMBER_OP_TABLE_CREATE, &iov, 1, NULL,
                                0, "creating a table"));
        if (initial)
            EMBER_CHECK(load_table(master, table, ps, initial));
    }
    return EMBER_OK;
}

/* Read @table back from its shards, in global row order. */
static ember_status_t read_table(master_t *master, const ember_train_job_table_t *table, float *out)
{
    const uint32_t dim = table->dim, S = table->shards;
    int64_t per_chunk = CHUNK_BYTES / (dim * sizeof(float));
    float *chunk = malloc((size_t)per_chunk * dim * sizeof(float));
    ember_status_t status = chunk ? EMBER_OK : EMBER_ERR_NO_MEMORY;

    for (uint32_t p = 0; status == EMBER_OK && p < S; p++) {
        int64_t local_rows = (table->rows - p + S - 1) / S;
        for (int64_t first = 0; status == EMBER_OK && first < local_rows; first += per_chunk) {
            int64_t count = local_rows - first < per_chunk ? local_rows - first : per_chunk;
            ember_msg_table_read_t read = {.table_id = table->id, .first = first, .count = count};
            ember_iov_t iov = {.buffer = &read, .length = sizeof(read)};
            status = master_call(master, master->first_ps + (int)(table->first_ps + p),
                                 EMBER_OP_TABLE_READ, &iov, 1, chunk,
                                 (size_t)count * dim * sizeof(float), "reading a table");
            for (int64_t i = 0; status == EMBER_OK && i < count; i++)
                memcpy(out + (size_t)((first + i) * S + p) * dim, chunk + (size_t)i * dim,
                       dim * sizeof(float));
        }
    }
    free(chunk);
    return status;
}

static void print_memory(master_t *master)
{
    for (int p = 0; p < master->job->num_ps; p++) {
        ember_msg_ps_stats_t stats;
        if (master_call(master, master->first_ps + p, EMBER_OP_PS_STATS, NULL, 0, &stats,
                        sizeof(stats), "stats") != EMBER_OK)
            continue;
        ember_info("master",
                   "ps%d: table %.1f MiB, optimizer state %.1f MiB, other "
                   "%.1f MiB, resident %.1f MiB; %llu lookups, %llu gradients, %llu "
                   "steps applied",
                   p, stats.table_bytes / 1048576.0, stats.optimizer_bytes / 1048576.0,
                   stats.other_bytes / 1048576.0, stats.rss_bytes / 1048576.0,
                   (unsigned long long)stats.lookups, (unsigned long long)stats.grads,
                   (unsigned long long)stats.steps_applied);
    }
}

/* The TRAIN_START every trainer gets (less its index): the job's course of
 * training, whole, and where the others are. */
static void spec_from_job(master_t *master)
{
    const ember_train_job_t *job = master->job;
    master->spec = (ember_msg_train_start_t){
            .trainers = (uint32_t)job->trainers,
            .num_ps = (uint32_t)job->num_ps,
            .first_ps_rank = (uint32_t)master->first_ps,
            .master_rank = (uint32_t)job->trainers,
            .table_id = 0,
            .config = job->train,
    };
    if (job->replay_path)
        snprintf(master->spec.replay_path, sizeof(master->spec.replay_path), "%s",
                 job->replay_path);
    ember_master_ckpt_plan_of(job, &master->spec.checkpoints);
}

/* Which PS hold tables: only theirs are checkpoint files. */
static ember_status_t place_tables(master_t *master)
{
    const ember_train_job_t *job = master->job;
    master->ntables = ember_train_job_tables(&job->train, (uint32_t)job->num_ps, master->tables);
    master->ps_holding = calloc((size_t)job->num_ps, sizeof(int));
    if (!master->ps_holding)
        return EMBER_ERR_NO_MEMORY;
    for (size_t t = 0; t < master->ntables; t++) {
        for (uint32_t s = 0; s < master->tables[t].shards; s++)
            master->ps_holding[master->tables[t].first_ps + s] = 1;
    }
    return EMBER_OK;
}

/* --resume: the checkpoint, its dense layers, where the trainers go on;
 * then the writing of new ones (a job that resumes keeps writing them). */
static ember_status_t master_ckpt_setup(master_t *master)
{
    const ember_train_job_t *job = master->job;
    if (job->resume_path) {
        ember_status_t status =
                ember_master_resume_find(job, &master->spec, master->params, &master->resume,
                                         master->cause, sizeof(master->cause));
        if (status != EMBER_OK)
            return status;
        master->spec.start_step = master->resume.step;
        snprintf(master->spec.resume_dir, sizeof(master->spec.resume_dir), "%s",
                 master->resume.dir);
        master->printed = master->resume.epoch;
        printf("resuming from %s (step %llu)\n", master->resume.dir,
               (unsigned long long)master->resume.step);
        fflush(stdout);
    }
    return ember_master_ckpt_create(master->tp, job, master->ps_holding, master->spec.start_step,
                                    master->metrics, &master->ckpt, master->cause,
                                    sizeof(master->cause));
}

/* The spec, the buffers, the report handler, everyone's arrival, and the
 * metrics file. */
static ember_status_t master_setup(master_t *master)
{
    const ember_train_job_t *job = master->job;

    spec_from_job(master);
    master->layers = ember_dense_sizes(&master->spec, master->sizes);
    master->nparams = ember_model_params(&master->spec);
    EMBER_CHECK(place_tables(master));
    master->epochs = job->train.data == EMBER_DATA_REPLAY ? 1 : job->train.epochs;
    master->params = malloc(master->nparams * sizeof(float));
    master->futures = calloc((size_t)job->trainers, sizeof(*master->futures));
    master->starts = malloc((size_t)job->trainers * sizeof(*master->starts));
    master->reports = calloc((size_t)master->epochs * job->trainers, sizeof(*master->reports));
    master->reported = calloc((size_t)master->epochs * job->trainers, 1);
    if (!master->params || !master->futures || !master->starts || !master->reports ||
        !master->reported)
        return EMBER_ERR_NO_MEMORY;
    ember_rpc_register(master->tp, EMBER_OP_EPOCH_REPORT, on_epoch_report, master);
    EMBER_CHECK(ember_tp_barrier(master->tp, "roles-ready")); /* it said who did not come */
    if (job->metrics_path && !(master->metrics = fopen(job->metrics_path, "w"))) {
        snprintf(master->cause, sizeof(master->cause), "cannot write the metrics to %s: %s",
                 job->metrics_path, strerror(errno));
        return EMBER_ERR_IO;
    }
    EMBER_CHECK(master_ckpt_setup(master));
    if (job->train.model == EMBER_MODEL_DLRM)
        return ember_master_eval_create(master->tp, (uint32_t)job->trainers, master->metrics,
                                        &master->eval);
    return EMBER_OK;
}

/* DLRM's dense layers and tables: --init's, or drawn (the tables on the
 * PS, uniform(-sqrt(1/N), sqrt(1/N)) as TorchRec's default). */
static ember_status_t master_dlrm_tables(master_t *master)
{
    ember_st_file_t *init = NULL;
    ember_status_t status = ember_dlrm_initial(master->job, master->params, &init, master->cause,
                                               sizeof(master->cause));
    for (size_t t = 0; status == EMBER_OK && t < master->ntables; t++) {
        float *rows = NULL;
        if (init)
            status = ember_dlrm_init_table(init, master->job, t, &rows, master->cause,
                                           sizeof(master->cause));
        if (status == EMBER_OK)
            status = create_table(master, &master->tables[t], EMBER_INIT_UNIFORM, rows);
        free(rows);
    }
    ember_st_close(init);
    if (status != EMBER_OK && !master->cause[0])
        snprintf(master->cause, sizeof(master->cause), "the master could not set up the tables");
    return status;
}

/* A resumed job's tables: created empty, then each PS restores its own
 * from the checkpoint's files (the dense layers came with it). */
static ember_status_t master_resumed_tables(master_t *master)
{
    ember_status_t status = EMBER_OK;
    for (size_t t = 0; status == EMBER_OK && t < master->ntables; t++)
        status = create_table(master, &master->tables[t], EMBER_INIT_LOAD, NULL);
    if (status == EMBER_OK)
        status = ember_master_resume_tables(master->tp, &master->resume, master->ps_holding,
                                            master->job->num_ps, master->first_ps, master->cause,
                                            sizeof(master->cause));
    if (status != EMBER_OK && !master->cause[0])
        snprintf(master->cause, sizeof(master->cause), "the master could not set up the tables");
    return status;
}

static ember_status_t master_first_tables(master_t *master);

/* The dense layers' start and the tables on the PS, from the same source;
 * then the PS's checkpoint plan. */
static ember_status_t master_tables(master_t *master)
{
    ember_status_t status = master_first_tables(master);
    if (status == EMBER_OK)
        status = ember_master_ckpt_plan(master->ckpt, master->first_ps, master->cause,
                                        sizeof(master->cause));
    return status;
}

/* --init DIR: a checkpoint's weights (either model), from step 0. */
static ember_status_t master_init_from_checkpoint(master_t *master)
{
    float *rows[EMBER_JOB_TABLES_MAX] = {NULL};
    ember_status_t status = ember_master_ckpt_weights(
            master->job->init_path, &master->spec, master->tables, master->ntables, master->params,
            rows, master->cause, sizeof(master->cause));
    for (size_t t = 0; status == EMBER_OK && t < master->ntables; t++)
        status = create_table(master, &master->tables[t], EMBER_INIT_LOAD, rows[t]);
    for (size_t t = 0; t < master->ntables; t++)
        free(rows[t]);
    if (status != EMBER_OK && !master->cause[0])
        snprintf(master->cause, sizeof(master->cause), "the master could not set up the tables");
    return status;
}

/* The tutorial model's --init FILE: a --save file's weights. */
static ember_status_t master_init_from_save(master_t *master)
{
    float *table = NULL;
    ember_status_t status = ember_model_init_file(master->job, &master->spec, master->params,
                                                  &table, master->cause, sizeof(master->cause));
    if (status == EMBER_OK)
        status = create_table(master, &master->tables[0], EMBER_INIT_LOAD, table);
    free(table);
    return status;
}

static int is_directory(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static ember_status_t master_first_tables(master_t *master)
{
    const ember_train_job_t *job = master->job;
    if (master->resume.dir[0])
        return master_resumed_tables(master);
    if (is_directory(job->init_path))
        return master_init_from_checkpoint(master);
    if (job->init_path && job->train.model == EMBER_MODEL_TUTORIAL)
        return master_init_from_save(master);
    if (master->job->train.model == EMBER_MODEL_DLRM)
        return master_dlrm_tables(master);
    float *table = NULL;
    ember_status_t status =
            ember_model_initial(master->job, master->sizes, master->layers, master->params, &table);
    if (status == EMBER_OK)
        status = create_table(master, &master->tables[0], EMBER_INIT_NORMAL, table);
    free(table);
    if (status != EMBER_OK)
        snprintf(master->cause, sizeof(master->cause), "the master could not set up the tables");
    return status;
}

/* "13-512-256-64": an MLP's widths from its input. */
static void widths_text(size_t in, const uint32_t *sizes, uint32_t layers, char *text,
                        size_t length)
{
    int used = snprintf(text, length, "%zu", in);
    for (uint32_t l = 0; l < layers && used > 0 && (size_t)used < length; l++)
        used += snprintf(text + used, length - (size_t)used, "-%u", sizes[l]);
}

/* "sync", "async", or "sync, staleness K". */
static void consistency_text(const ember_train_job_t *job, char *out, size_t length)
{
    if (job->train.consistency != EMBER_SYNC)
        snprintf(out, length, "async");
    else if (job->train.staleness > 0)
        snprintf(out, length, "sync, staleness %u", job->train.staleness);
    else
        snprintf(out, length, "sync");
}

static void print_dlrm_job(const master_t *master)
{
    const ember_train_job_t *job = master->job;
    const ember_dlrm_spec_t *d = &job->train.dlrm;
    char dense[160], over[160], consistency[40];
    consistency_text(job, consistency, sizeof(consistency));
    int64_t rows = 0;
    for (size_t t = 0; t < master->ntables; t++)
        rows += master->tables[t].rows;
    widths_text(EMBER_DLRM_DENSE, d->dense_sizes, d->dense_layers, dense, sizeof(dense));
    widths_text(ember_dlrm_over_input(&job->train), d->over_sizes, d->over_layers, over,
                sizeof(over));
    printf("training: dlrm, %d trainers x batch %u, %d ps (%s), %zu tables of dim %u (%lld "
           "rows%s), "
           "DenseArch %s, OverArch %s, %s lr %g, %s, %s%s%s\n",
           job->trainers, d->batch_size, job->num_ps,
           d->sharding == EMBER_SHARD_TABLE ? "table-wise" : "row-wise", master->ntables,
           job->train.dim, (long long)rows, job->table_dtype == EMBER_DTYPE_F16 ? ", fp16" : "",
           dense, over, ember_opt_kind_name(job->train.optimizer.kind), job->train.optimizer.lr,
           consistency, d->data, d->eval[0] ? ", eval " : "", d->eval);
    fflush(stdout);
}

/* One line saying what is trained, where and how. */
static void print_job(const master_t *master)
{
    const ember_train_job_t *job = master->job;
    if (job->train.model == EMBER_MODEL_DLRM) {
        print_dlrm_job(master);
        return;
    }
    char consistency[40];
    consistency_text(job, consistency, sizeof(consistency));
    char dense[128];
    int used = 0;
    for (size_t l = 0; l < master->layers && used < (int)sizeof(dense); l++)
        used += snprintf(dense + used, sizeof(dense) - (size_t)used, "%sLinear(%zu, %zu)",
                         l ? " ReLU " : "", master->sizes[l], master->sizes[l + 1]);
    printf("training: %d trainers%s, %d ps, table %s %lld x %u (%s%s%s%s), %s, "
           "%s lr %g, %s, %s\n",
           job->trainers, strcmp(job->device, "cuda") == 0 ? " on GPUs" : "", job->num_ps,
           EMBER_TRAIN_TABLE_NAME, (long long)job->train.rows, job->train.dim,
           ember_bag_mode_name(job->train.mode),
           job->table_dtype == EMBER_DTYPE_F16 ? ", fp16 rows" : "",
           job->train.half_replies ? ", fp16 replies" : "",
           strcmp(job->ps_device, "cuda") == 0 ? ", on the PS's GPU" : "", dense,
           ember_opt_kind_name(job->train.optimizer.kind), job->train.optimizer.lr, consistency,
           job->train.data == EMBER_DATA_REPLAY      ? job->replay_path
           : job->train.data == EMBER_DATA_SYNTHETIC ? "synthetic data"
                                                     : "tutorial data");
    fflush(stdout);
}

static ember_status_t start_trainers(master_t *master)
{
    master->started = ember_time_now();
    for (int t = 0; t < master->job->trainers; t++) {
        master->starts[t] = master->spec;
        master->starts[t].trainer = (uint32_t)t;
        master->starts[t].checkpoints.index = (uint32_t)t;
        master->starts[t].resume_from = (uint32_t)t;
        ember_iov_t iov[2] = {{&master->starts[t], sizeof(master->spec)},
                              {master->params, master->nparams * sizeof(float)}};
        /* Answered when the trainer finishes: no deadline but peer loss. */
        EMBER_CHECK(ember_rpc_call_async(master->tp, t, EMBER_OP_TRAIN_START, iov, 2, NULL, 0,
                                         &(ember_rpc_param_t){.timeout_s = 1e9},
                                         &master->futures[t]));
    }
    return EMBER_OK;
}

/* Wait for all trainers, reacting to the first one that fails. */
static ember_status_t wait_trainers(master_t *master)
{
    for (int remaining = master->job->trainers; remaining > 0;) {
        remaining = 0;
        for (int t = 0; t < master->job->trainers; t++) {
            ember_status_t status = ember_future_test(master->futures[t]);
            if (status == EMBER_INPROGRESS) {
                remaining++;
                continue;
            }
            if (status != EMBER_OK) {
                size_t length;
                const char *text = ember_future_data(master->futures[t], &length);
                snprintf(master->cause, sizeof(master->cause), "%.*s", (int)length,
                         text ? text : "");
                ember_error("master", "trainer%d failed: %s", t, master->cause);
                return status;
            }
        }
        if (remaining)
            ember_tp_wait(master->tp, 0.5);
        ember_master_ckpt_poll(master->ckpt);
    }
    return EMBER_OK;
}

/* Each trainer's reply, checked whole and against trainer0's step count. */
static ember_status_t take_reports(master_t *master, ember_wire_train_done_view_t *done)
{
    for (int t = 0; t < master->job->trainers; t++) {
        size_t length;
        const void *data = ember_future_data(master->futures[t], &length);
        ember_status_t status = ember_wire_train_done_unpack(
                data, length, master->nparams, t, &done[t], master->cause, sizeof(master->cause));
        if (status == EMBER_OK && done[t].head.steps != done[0].head.steps)
            status = ember_status_text(master->cause, sizeof(master->cause), EMBER_ERR_BAD_MESSAGE,
                                       "trainer%d sent a malformed report", t);
        if (status != EMBER_OK)
            return status;
    }
    return EMBER_OK;
}

/* The trainers' totals, their losses step-major, trainer0's final layers
 * (the others' must be the same: a difference is warned of). */
static ember_status_t gather_results(master_t *master, const ember_wire_train_done_view_t *done,
                                     finished_t *fin)
{
    int trainers = master->job->trainers;
    size_t param_bytes = master->nparams * sizeof(float);

    fin->per_trainer = done[0].head.steps;
    for (int t = 0; t < trainers; t++) {
        fin->steps += done[t].head.steps;
        fin->bags += done[t].head.bags;
        if (t && memcmp(done[t].params, done[0].params, param_bytes) != 0)
            ember_warn("master", "trainer%d's dense parameters differ from trainer0's", t);
    }
    fin->params = malloc(param_bytes + 4);
    fin->losses = malloc(fin->per_trainer * trainers * sizeof(float) + 4);
    if (!fin->params || !fin->losses)
        return EMBER_ERR_NO_MEMORY;
    memcpy(fin->params, done[0].params, param_bytes);
    for (uint64_t s = 0; s < fin->per_trainer; s++) {
        for (int t = 0; t < trainers; t++) {
            float loss = ember_wire_load_f32(done[t].losses, s);
            fin->losses[s * trainers + t] = loss;
            if (s + 1 == fin->per_trainer)
                fin->last += loss / trainers;
        }
    }
    return EMBER_OK;
}

static void print_done(master_t *master, const finished_t *fin)
{
    double seconds = ember_time_now() - master->started;
    const char *what = master->job->train.model == EMBER_MODEL_DLRM ? "examples" : "bags";
    printf("done: %llu steps (%llu %s) in %.3f s: %.0f steps/s, %.0f %s/s; "
           "last step's loss %.4f (mean over trainers), last epoch's mean loss %.4f\n",
           (unsigned long long)fin->steps, (unsigned long long)fin->bags, what, seconds,
           (double)fin->steps / seconds, (double)fin->bags / seconds, what, fin->last,
           master->printed ? epoch_mean_loss(master, master->printed - 1) : fin->last);
    fflush(stdout);
}

/* DLRM's tables, read back, and its dense layers to --save. */
static ember_status_t save_dlrm(master_t *master, const finished_t *fin)
{
    float *tables[EMBER_JOB_TABLES_MAX] = {NULL};
    ember_status_t status = EMBER_OK;
    for (size_t t = 0; status == EMBER_OK && t < master->ntables; t++) {
        const ember_train_job_table_t *table = &master->tables[t];
        tables[t] = malloc((size_t)table->rows * table->dim * sizeof(float) + 4);
        status = tables[t] ? read_table(master, table, tables[t]) : EMBER_ERR_NO_MEMORY;
    }
    if (status == EMBER_OK)
        status = ember_dlrm_save(master->job, (const float *const *)tables, fin->params,
                                 fin->losses, fin->per_trainer);
    for (size_t t = 0; t < master->ntables; t++)
        free(tables[t]);
    return status;
}

/* The whole table, read once, for the replay check and the save.  A run
 * that failed its check is still saved: the file shows how. */
static ember_status_t check_and_save(master_t *master, const finished_t *fin)
{
    const ember_train_job_t *job = master->job;
    ember_model_result_t result = {
            .params = fin->params, .losses = fin->losses, .steps = fin->per_trainer};
    ember_status_t status = EMBER_OK;
    float *whole = NULL;

    if (!job->save_path && !job->replay_path)
        return EMBER_OK;
    if (job->train.model == EMBER_MODEL_DLRM)
        return save_dlrm(master, fin);
    whole = malloc((size_t)master->spec.config.rows * master->spec.config.dim * sizeof(float) + 4);
    status = whole ? read_table(master, &master->tables[0], whole) : EMBER_ERR_NO_MEMORY;
    result.table = whole;
    if (status == EMBER_OK && job->replay_path)
        status = ember_model_check_replay(job, &result);
    if (job->save_path && whole) {
        ember_status_t saved = ember_model_save(job, &master->spec, &result);
        if (status == EMBER_OK)
            status = saved;
    }
    free(whole);
    return status;
}

/* The trainers' reports, the closing lines, the model's check and save. */
static ember_status_t finish_job(master_t *master)
{
    ember_wire_train_done_view_t *done = calloc((uint32_t)master->job->trainers, sizeof(*done));
    finished_t fin = {.steps = 0};
    ember_status_t status = done ? take_reports(master, done) : EMBER_ERR_NO_MEMORY;

    if (status != EMBER_OK) {
        free(done);
        return status;
    }
    status = gather_results(master, done, &fin);
    print_done(master, &fin);
    print_memory(master);
    if (status == EMBER_OK)
        status = ember_master_ckpt_finish(master->ckpt, fin.per_trainer, master->cause,
                                          sizeof(master->cause));
    uint64_t stopped_at;
    if (status == EMBER_OK && ember_master_ckpt_stopped(master->ckpt, &stopped_at)) {
        printf("stopped after step %llu, at its checkpoint: go on with --resume %s\n",
               (unsigned long long)stopped_at, master->job->checkpoint_dir);
        fflush(stdout);
        status = EMBER_ERR_CANCELED;
    } else if (status == EMBER_OK) {
        status = check_and_save(master, &fin);
    }
    for (int p = 0; p < master->job->num_ps; p++)
        master_call(master, master->first_ps + p, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0,
                    "shutdown");
    free(fin.params);
    free(fin.losses);
    free(done);
    return status;
}

static void master_cleanup(master_t *master)
{
    /* Its state lives in this frame: a late report must find no handler. */
    ember_rpc_register(master->tp, EMBER_OP_EPOCH_REPORT, NULL, NULL);
    ember_master_eval_destroy(master->eval);
    ember_master_ckpt_destroy(master->ckpt);
    ember_master_resume_free(&master->resume);
    free(master->ps_holding);
    for (int t = 0; master->futures && t < master->job->trainers; t++)
        ember_future_release(master->futures[t]);
    if (master->metrics)
        fclose(master->metrics);
    free(master->futures);
    free(master->starts);
    free(master->params);
    free(master->reports);
    free(master->reported);
}

ember_status_t ember_master_run(ember_tp_t *tp, const ember_train_job_t *job)
{
    master_t master = {.tp = tp, .job = job, .first_ps = job->trainers + 1};
    ember_status_t status = master_setup(&master);

    if (status == EMBER_OK)
        status = master_tables(&master);
    if (status == EMBER_OK) {
        print_job(&master);
        status = start_trainers(&master);
    }
    if (status == EMBER_OK)
        status = wait_trainers(&master);
    if (status == EMBER_OK)
        status = finish_job(&master);
    if (master.cause[0]) {
        fprintf(stderr, "ember-train: job failed: %s\n", master.cause);
        abort_job(&master, master.cause);
        if (status == EMBER_OK)
            status = EMBER_ERR_CANCELED;
    }
    master_cleanup(&master);
    return status;
}
