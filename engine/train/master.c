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
#include "common/rng.h"
#include "engine/io/replay_file.h"
#include "engine/io/safetensors.h"
#include "engine/train/data.h"

#include <ember/log.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_ID   0
#define TABLE_NAME "emb"
/* Chunks of table traffic between master and PS. */
#define CHUNK_BYTES (4u << 20)

typedef struct {
    ember_tp_t *tp;
    const ember_job_t *job;
    int first_ps;
    /* epoch reports: [epochs][trainers] */
    ember_msg_epoch_report_t *reports;
    uint8_t *reported;
    uint32_t epochs, printed;
    FILE *metrics;
    double started;
} master_t;

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

static void print_epoch(master_t *master, uint32_t epoch)
{
    const ember_job_t *job = master->job;
    double seconds = 0;
    uint64_t steps = 0, bags = 0;
    for (int t = 0; t < job->trainers; t++) {
        const ember_msg_epoch_report_t *r = &master->reports[epoch * job->trainers + t];
        steps += r->steps;
        bags += r->bags;
        if (r->seconds > seconds)
            seconds = r->seconds;
    }
    double mean = epoch_mean_loss(master, epoch);
    double steps_s = seconds > 0 ? (double)steps / seconds : 0.0;
    double bags_s = seconds > 0 ? (double)bags / seconds : 0.0;
    printf("epoch %4u  mean loss %.4f  steps/s %.0f  bags/s %.0f\n", epoch + 1, mean, steps_s,
           bags_s);
    fflush(stdout);
    if (master->metrics) {
        fprintf(master->metrics,
                "{\"epoch\": %u, \"loss\": %.6f, \"steps\": %llu, "
                "\"bags\": %llu, \"seconds\": %.6f, \"steps_per_s\": %.1f, "
                "\"bags_per_s\": %.1f}\n",
                epoch + 1, mean, (unsigned long long)steps, (unsigned long long)bags, seconds,
                steps_s, bags_s);
        fflush(master->metrics);
    }
}

ember_status_t ember_master_report_check(const void *data, size_t length, uint32_t trainers,
                                         uint32_t epochs, ember_msg_epoch_report_t *msg_p,
                                         char *err, size_t err_length)
{
    ember_msg_epoch_report_t msg;

    if (length != sizeof(msg))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "epoch report of %zu bytes", length);
    memcpy(&msg, data, sizeof(msg));
    if (msg.trainer >= trainers || msg.epoch >= epochs)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "epoch report for trainer %u epoch %u", msg.trainer, msg.epoch);
    *msg_p = msg;
    return EMBER_OK;
}

static void on_epoch_report(ember_rpc_req_t *req, void *arg)
{
    master_t *master = arg;
    ember_msg_epoch_report_t msg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[96];
    ember_status_t status = ember_master_report_check(data, length, (uint32_t)master->job->trainers,
                                                      master->epochs, &msg, err, sizeof(err));

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

static ember_status_t create_tables(master_t *master, const ember_msg_train_start_t *spec,
                                    const float *initial)
{
    const ember_job_t *job = master->job;
    for (int p = 0; p < job->num_ps; p++) {
        ember_msg_table_create_t create = {
                .table_id = TABLE_ID,
                .shard = (uint32_t)p,
                .num_shards = (uint32_t)job->num_ps,
                .trainers = (uint32_t)job->trainers,
                .rows = spec->rows,
                .dim = spec->dim,
                .consistency = job->consistency,
                .sparse_reduce = job->sparse_reduce,
                .init = initial ? EMBER_INIT_LOAD : EMBER_INIT_NORMAL,
                .dtype = job->table_dtype,
                .device = strcmp(job->ps_device, "cuda") == 0 ? EMBER_TABLE_CUDA : EMBER_TABLE_HOST,
                .seed = job->seed,
                .optimizer = spec->optimizer,
        };
        snprintf(create.name, sizeof(create.name), "%s", TABLE_NAME);
        ember_iov_t iov = {.buffer = &create, .length = sizeof(create)};
        EMBER_CHECK(master_call(master, master->first_ps + p, EMBER_OP_TABLE_CREATE, &iov, 1, NULL,
                                0, "creating table " TABLE_NAME));
        if (!initial)
            continue;
        /* Initial values: each shard keeps the rows it owns. */
        int64_t per_chunk = CHUNK_BYTES / (spec->dim * sizeof(float));
        for (int64_t first = 0; first < spec->rows; first += per_chunk) {
            int64_t count = spec->rows - first < per_chunk ? spec->rows - first : per_chunk;
            ember_msg_table_load_t load = {.table_id = TABLE_ID, .first = first, .count = count};
            ember_iov_t parts[2] = {{&load, sizeof(load)},
                                    {initial + (size_t)first * spec->dim,
                                     (size_t)count * spec->dim * sizeof(float)}};
            EMBER_CHECK(master_call(master, master->first_ps + p, EMBER_OP_TABLE_LOAD, parts, 2,
                                    NULL, 0, "loading table " TABLE_NAME));
        }
    }
    return EMBER_OK;
}

/* Read the whole table back from its shards, in global row order. */
static ember_status_t read_table(master_t *master, int64_t rows, uint32_t dim, float *table)
{
    const ember_job_t *job = master->job;
    int64_t per_chunk = CHUNK_BYTES / (dim * sizeof(float));
    float *chunk = malloc((size_t)per_chunk * dim * sizeof(float));
    ember_status_t status = chunk ? EMBER_OK : EMBER_ERR_NO_MEMORY;

    for (int p = 0; status == EMBER_OK && p < job->num_ps; p++) {
        int64_t local_rows = (rows - p + job->num_ps - 1) / job->num_ps;
        for (int64_t first = 0; status == EMBER_OK && first < local_rows; first += per_chunk) {
            int64_t count = local_rows - first < per_chunk ? local_rows - first : per_chunk;
            ember_msg_table_read_t read = {.table_id = TABLE_ID, .first = first, .count = count};
            ember_iov_t iov = {.buffer = &read, .length = sizeof(read)};
            status = master_call(master, master->first_ps + p, EMBER_OP_TABLE_READ, &iov, 1, chunk,
                                 (size_t)count * dim * sizeof(float), "reading table " TABLE_NAME);
            for (int64_t i = 0; status == EMBER_OK && i < count; i++)
                memcpy(table + (size_t)((first + i) * job->num_ps + p) * dim,
                       chunk + (size_t)i * dim, dim * sizeof(float));
        }
    }
    free(chunk);
    return status;
}

/* Layer @l's parameter names as the equivalent PyTorch module has them: the
 * tutorial's Linear is "fc" (the golden files' names); an MLP is
 * nn.Sequential(Linear, ReLU, ..., Linear) named "dense", whose Linear
 * layers are its modules 0, 2, 4, ... */
static void dense_names(size_t layers, size_t l, char *weight, char *bias, size_t length)
{
    if (layers == 1) {
        snprintf(weight, length, "fc.weight");
        snprintf(bias, length, "fc.bias");
    } else {
        snprintf(weight, length, "dense.%zu.weight", 2 * l);
        snprintf(bias, length, "dense.%zu.bias", 2 * l);
    }
}

/* Losses beyond this many go only to --metrics (as epoch means): their text
 * would outgrow a safetensors header (100 MiB). */
#define SAVED_LOSSES_MAX (4u << 20)

/* The losses as the "losses" metadata: comma-separated, step-major. */
static char *losses_text(const float *losses, size_t count)
{
    char *text = malloc(count * 24 + 1), *p = text; /* "%.9g," is at most 16 */
    if (!text)
        return NULL;
    *p = '\0';
    for (size_t i = 0; i < count; i++)
        p += sprintf(p, "%s%.9g", i ? "," : "", (double)losses[i]);
    return text;
}

/* --save: the table and the dense layers under the names of the equivalent
 * PyTorch module (README.md), so load_state_dict(strict=True) takes the
 * file; the losses, [steps][trainers], in its metadata. */
static ember_status_t save(master_t *master, const ember_msg_train_start_t *spec,
                           const float *table, const float *params, const float *losses,
                           uint64_t steps)
{
    size_t sizes[EMBER_MAX_HIDDEN + 2], layers = ember_dense_sizes(spec, sizes);
    ember_st_tensor_t tensors[1 + 2 * (EMBER_MAX_HIDDEN + 1)];
    char names[2 * (EMBER_MAX_HIDDEN + 1)][32];
    size_t n = 0, count = (size_t)steps * (size_t)master->job->trainers;
    tensors[n++] = (ember_st_tensor_t){.name = "emb.weight",
                                       .dtype = EMBER_DTYPE_F32,
                                       .ndim = 2,
                                       .shape = {spec->rows, spec->dim},
                                       .data = table};
    for (size_t l = 0; l < layers; l++) {
        const float *w = params + ember_dense_offset(sizes, l);
        dense_names(layers, l, names[2 * l], names[2 * l + 1], sizeof(names[0]));
        tensors[n++] = (ember_st_tensor_t){.name = names[2 * l],
                                           .dtype = EMBER_DTYPE_F32,
                                           .ndim = 2,
                                           .shape = {(int64_t)sizes[l + 1], (int64_t)sizes[l]},
                                           .data = w};
        tensors[n++] = (ember_st_tensor_t){.name = names[2 * l + 1],
                                           .dtype = EMBER_DTYPE_F32,
                                           .ndim = 1,
                                           .shape = {(int64_t)sizes[l + 1]},
                                           .data = w + sizes[l + 1] * sizes[l]};
    }
    char shape[64], *text = count <= SAVED_LOSSES_MAX ? losses_text(losses, count) : NULL;
    snprintf(shape, sizeof(shape), "%llu,%d", (unsigned long long)steps, master->job->trainers);
    if (count <= SAVED_LOSSES_MAX && !text)
        return EMBER_ERR_NO_MEMORY;
    if (!text)
        ember_warn("master",
                   "%s: %zu losses are too many for its metadata (at most "
                   "%u): --metrics has the epochs' means",
                   master->job->save_path, count, SAVED_LOSSES_MAX);
    ember_st_meta_t meta[] = {
            {"producer", "ember-train"}, {"losses_shape", shape}, {"losses", text}};
    ember_status_t status = ember_st_write(master->job->save_path, tensors, n, meta, text ? 3 : 1);
    if (status != EMBER_OK)
        ember_error("master", "cannot write %s: %s", master->job->save_path,
                    ember_status_string(status));
    else
        printf("saved %s\n", master->job->save_path);
    free(text);
    return status;
}

/* Largest |a - b| over n values (NaN counts as infinite), and where. */
static double max_diff(const float *a, const float *b, size_t n, size_t *at_p)
{
    double worst = 0;
    *at_p = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) {
            worst = isnan(d) ? INFINITY : d;
            *at_p = i;
        }
    }
    return worst;
}

/* --replay: the run against the expected values the file holds (its losses,
 * the final table and dense layer), within --replay-tolerance.  One line
 * saying what was compared and by how much it differs; ERR_NUMERIC when a
 * difference is beyond the tolerance. */
static ember_status_t replay_check(master_t *master, const float *table, const float *params,
                                   const float *losses, uint64_t steps)
{
    const ember_job_t *job = master->job;
    const char *names[4] = {"loss", "emb.weight", "fc.weight", "fc.bias"};
    const float *mine[4] = {losses, table, params, params + (size_t)job->classes * job->dim};
    size_t counts[4] = {(size_t)steps * job->trainers, (size_t)job->rows * job->dim,
                        (size_t)job->classes * job->dim, job->classes};
    /* Each expected tensor has the shape of what the run made, or it is
     * not compared (and the check fails). */
    const int64_t shapes[4][2] = {{(int64_t)steps, job->trainers},
                                  {job->rows, job->dim},
                                  {job->classes, job->dim},
                                  {job->classes, 0}};
    const size_t ndims[4] = {2, 2, 2, 1};
    char line[1024], err[512];
    int used = 0, checked = 0, beyond = 0;
    ember_st_file_t *file;

    if (ember_st_open(job->replay_path, &file, err, sizeof(err)) != EMBER_OK) {
        ember_error("master", "replay check: %s", err);
        return EMBER_ERR_IO;
    }
    for (int k = 0; k < 4 && used < (int)sizeof(line); k++) {
        char expected[32];
        float *want = NULL;
        size_t at;
        snprintf(expected, sizeof(expected), "expected.%s", names[k]);
        if (!ember_st_find(file, expected))
            continue;
        if (ember_replay_read(file, NULL, expected, EMBER_DTYPE_F32, ndims[k], shapes[k],
                              (void **)&want, err, sizeof(err)) != EMBER_OK) {
            used += snprintf(line + used, sizeof(line) - (size_t)used, "%s%s",
                             checked++ ? ", " : "", err);
            beyond = 1;
            continue;
        }
        double worst = max_diff(mine[k], want, counts[k], &at);
        beyond |= !(worst <= job->replay_tolerance);
        used += snprintf(line + used, sizeof(line) - (size_t)used,
                         "%s%s max |diff| %.2g "
                         "(%zu values)",
                         checked++ ? ", " : "", names[k], worst, counts[k]);
        free(want);
    }
    ember_st_close(file);
    if (!checked) {
        printf("replay: %s holds no expected values; nothing was checked\n", job->replay_path);
        return EMBER_OK;
    }
    printf("replay check against %s: %s: %s %g\n", job->replay_path, line,
           beyond ? "BEYOND the tolerance" : "all within", job->replay_tolerance);
    fflush(stdout);
    return beyond ? EMBER_ERR_NUMERIC : EMBER_OK;
}

/* Initial dense parameters: from the replay file, or nn.Linear's default
 * U(-1/sqrt(in), 1/sqrt(in)) for each layer, from the seed. */
static ember_status_t initial_dense(const ember_job_t *job, const size_t *sizes, size_t layers,
                                    float *params, float **table_p)
{
    *table_p = NULL;
    if (job->data == EMBER_DATA_REPLAY) {
        ember_st_file_t *file;
        ember_replay_info_t info;
        char err[1024];
        void *weight = NULL, *bias = NULL, *table = NULL;
        /* one layer: --hidden is refused with --replay */
        int64_t dim = (int64_t)sizes[0], classes = (int64_t)sizes[layers];
        /* The shapes the job has: the tables are made and the layer sent at
         * these sizes, whatever the file (read again here) says now. */
        const int64_t shape_table[2] = {job->rows, dim}, shape_weight[2] = {classes, dim};
        const int64_t shape_bias[1] = {classes};
        ember_status_t status = ember_replay_open(job->replay_path, &file, &info, err, sizeof(err));
        if (status == EMBER_OK) {
            status = ember_replay_read(file, job->replay_path, "fc.weight", EMBER_DTYPE_F32, 2,
                                       shape_weight, &weight, err, sizeof(err));
            if (status == EMBER_OK)
                status = ember_replay_read(file, job->replay_path, "fc.bias", EMBER_DTYPE_F32, 1,
                                           shape_bias, &bias, err, sizeof(err));
            if (status == EMBER_OK)
                status = ember_replay_read(file, job->replay_path, "emb.weight", EMBER_DTYPE_F32, 2,
                                           shape_table, &table, err, sizeof(err));
            ember_st_close(file);
        }
        if (status != EMBER_OK) {
            ember_error("master", "%s", err);
        } else {
            size_t nw = (size_t)(classes * dim);
            memcpy(params, weight, nw * sizeof(float));
            memcpy(params + nw, bias, (size_t)classes * sizeof(float));
            *table_p = table;
            table = NULL;
        }
        free(weight);
        free(bias);
        free(table);
        return status;
    }
    ember_rng_t rng;
    ember_rng_seed(&rng, job->seed, 0xdeadull);
    for (size_t l = 0; l < layers; l++) {
        float bound = 1.0f / sqrtf((float)sizes[l]);
        float *layer = params + ember_dense_offset(sizes, l);
        for (size_t i = 0; i < sizes[l + 1] * sizes[l] + sizes[l + 1]; i++)
            layer[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0) * bound;
    }
    return EMBER_OK;
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

ember_status_t ember_master_run(ember_tp_t *tp, const ember_job_t *job)
{
    master_t master = {.tp = tp, .job = job, .first_ps = job->trainers + 1};
    ember_msg_train_start_t spec = {
            .trainers = (uint32_t)job->trainers,
            .num_ps = (uint32_t)job->num_ps,
            .first_ps_rank = (uint32_t)master.first_ps,
            .master_rank = (uint32_t)job->trainers,
            .table_id = TABLE_ID,
            .rows = job->rows,
            .dim = job->dim,
            .classes = job->classes,
            .mode = job->mode,
            .data = job->data,
            .padding_idx = job->padding_idx,
            .epochs = job->epochs,
            .batches = job->batches,
            .min_indices = job->min_indices,
            .max_indices = job->max_indices,
            .consistency = job->consistency,
            .per_sample_weights = (uint32_t)job->per_sample_weights,
            .seed = job->seed,
            .optimizer = job->optimizer,
            .nhidden = job->nhidden,
            .half_replies = (uint32_t)job->half_replies,
    };
    memcpy(spec.hidden, job->hidden, sizeof(spec.hidden));
    size_t sizes[EMBER_MAX_HIDDEN + 2];
    size_t layers = ember_dense_sizes(&spec, sizes);
    size_t nparams = ember_dense_offset(sizes, layers);
    float *params = malloc(nparams * sizeof(float)), *table = NULL;
    ember_msg_train_start_t *starts = NULL;
    ember_future_t **futures = calloc((size_t)job->trainers, sizeof(*futures));
    ember_status_t status = EMBER_OK;
    char cause[512] = "";

    if (job->replay_path)
        snprintf(spec.replay_path, sizeof(spec.replay_path), "%s", job->replay_path);
    master.epochs = job->data == EMBER_DATA_REPLAY ? 1 : job->epochs;
    master.reports = calloc((size_t)master.epochs * job->trainers, sizeof(*master.reports));
    master.reported = calloc((size_t)master.epochs * job->trainers, 1);
    if (!params || !futures || !master.reports || !master.reported) {
        status = EMBER_ERR_NO_MEMORY;
        goto out;
    }
    ember_rpc_register(tp, EMBER_OP_EPOCH_REPORT, on_epoch_report, &master);
    status = ember_tp_barrier(tp, "roles-ready"); /* it said who did not come */
    if (status != EMBER_OK)
        goto out;
    if (job->metrics_path && !(master.metrics = fopen(job->metrics_path, "w"))) {
        snprintf(cause, sizeof(cause), "cannot write the metrics to %s: %s", job->metrics_path,
                 strerror(errno));
        status = EMBER_ERR_IO;
        goto abort;
    }

    status = initial_dense(job, sizes, layers, params, &table);
    if (status == EMBER_OK)
        status = create_tables(&master, &spec, table);
    free(table);
    if (status != EMBER_OK) {
        snprintf(cause, sizeof(cause), "the master could not set up the tables");
        goto abort;
    }
    char dense[128];
    int used = 0;
    for (size_t l = 0; l < layers && used < (int)sizeof(dense); l++)
        used += snprintf(dense + used, sizeof(dense) - (size_t)used, "%sLinear(%zu, %zu)",
                         l ? " ReLU " : "", sizes[l], sizes[l + 1]);
    printf("training: %d trainers%s, %d ps, table %s %lld x %u (%s%s%s%s), %s, "
           "%s lr %g, %s, %s\n",
           job->trainers, strcmp(job->device, "cuda") == 0 ? " on GPUs" : "", job->num_ps,
           TABLE_NAME, (long long)job->rows, job->dim, ember_bag_mode_name(job->mode),
           job->table_dtype == EMBER_DTYPE_F16 ? ", fp16 rows" : "",
           job->half_replies ? ", fp16 replies" : "",
           strcmp(job->ps_device, "cuda") == 0 ? ", on the PS's GPU" : "", dense,
           ember_opt_kind_name(job->optimizer.kind), job->optimizer.lr,
           job->consistency == EMBER_SYNC ? "sync" : "async",
           job->data == EMBER_DATA_REPLAY      ? job->replay_path
           : job->data == EMBER_DATA_SYNTHETIC ? "synthetic data"
                                               : "tutorial data");
    fflush(stdout);

    master.started = ember_time_now();
    starts = malloc((size_t)job->trainers * sizeof(*starts));
    if (!starts) {
        status = EMBER_ERR_NO_MEMORY;
        goto out;
    }
    for (int t = 0; t < job->trainers; t++) {
        /* Each message stays untouched until its call completes. */
        starts[t] = spec;
        starts[t].trainer = (uint32_t)t;
        ember_iov_t iov[2] = {{&starts[t], sizeof(spec)}, {params, nparams * sizeof(float)}};
        /* Answered when the trainer finishes: no deadline but peer loss. */
        status = ember_rpc_call_async(tp, t, EMBER_OP_TRAIN_START, iov, 2, NULL, 0,
                                      &(ember_rpc_param_t){.timeout_s = 1e9}, &futures[t]);
        if (status != EMBER_OK)
            goto out;
    }
    /* Wait for all trainers, reacting to the first one that fails. */
    for (int remaining = job->trainers; remaining > 0;) {
        remaining = 0;
        for (int t = 0; t < job->trainers; t++) {
            status = ember_future_test(futures[t]);
            if (status == EMBER_INPROGRESS) {
                remaining++;
                continue;
            }
            if (status != EMBER_OK) {
                size_t length;
                const char *text = ember_future_data(futures[t], &length);
                snprintf(cause, sizeof(cause), "%.*s", (int)length, text ? text : "");
                ember_error("master", "trainer%d failed: %s", t, cause);
                goto abort;
            }
        }
        if (remaining)
            ember_tp_wait(tp, 0.5);
    }
    status = EMBER_OK;

    double seconds = ember_time_now() - master.started;
    const ember_msg_train_done_t *done[4096] = {0};
    uint64_t steps = 0, bags = 0;
    for (int t = 0; t < job->trainers && t < 4096; t++) {
        size_t length;
        done[t] = ember_future_data(futures[t], &length);
        /* The report's length says how many losses follow its header and
         * the parameters: checked before any field is read, by division
         * (a wire steps x 4 could wrap to the length of a short report). */
        size_t fixed = sizeof(**done) + nparams * sizeof(float);
        if (!done[t] || length < fixed || (length - fixed) % sizeof(float) != 0 ||
            done[t]->steps != (length - fixed) / sizeof(float) ||
            done[t]->steps != done[0]->steps) {
            snprintf(cause, sizeof(cause), "trainer%d sent a malformed report", t);
            status = EMBER_ERR_BAD_MESSAGE;
            goto abort;
        }
        steps += done[t]->steps;
        bags += done[t]->bags;
    }
    uint64_t per_trainer = done[0]->steps;
    const float *final_params = (const float *)((const uint8_t *)done[0] + sizeof(**done) +
                                                per_trainer * sizeof(float));
    for (int t = 1; t < job->trainers; t++) {
        const float *other = (const float *)((const uint8_t *)done[t] + sizeof(**done) +
                                             per_trainer * sizeof(float));
        if (memcmp(other, final_params, nparams * sizeof(float)) != 0)
            ember_warn("master",
                       "trainer%d's dense parameters differ from "
                       "trainer0's",
                       t);
    }
    float *losses = malloc(per_trainer * job->trainers * sizeof(float) + 4);
    double last = 0;
    for (uint64_t s = 0; losses && s < per_trainer; s++) {
        for (int t = 0; t < job->trainers; t++) {
            const float *l = (const float *)((const uint8_t *)done[t] + sizeof(**done));
            losses[s * job->trainers + t] = l[s];
            if (s + 1 == per_trainer)
                last += l[s] / job->trainers;
        }
    }
    printf("done: %llu steps (%llu bags) in %.3f s: %.0f steps/s, %.0f bags/s; "
           "last step's loss %.4f (mean over trainers), last epoch's mean loss %.4f\n",
           (unsigned long long)steps, (unsigned long long)bags, seconds, (double)steps / seconds,
           (double)bags / seconds, last, epoch_mean_loss(&master, master.epochs - 1));
    fflush(stdout);
    print_memory(&master);
    if (!losses)
        status = EMBER_ERR_NO_MEMORY;
    /* The whole table, once, for the replay check and the save. */
    float *whole = NULL;
    if (status == EMBER_OK && (job->save_path || job->replay_path)) {
        whole = malloc((size_t)spec.rows * spec.dim * sizeof(float) + 4);
        status = whole ? read_table(&master, spec.rows, spec.dim, whole) : EMBER_ERR_NO_MEMORY;
    }
    if (status == EMBER_OK && job->replay_path)
        status = replay_check(&master, whole, final_params, losses, per_trainer);
    /* A run that failed its check is still saved: the file shows how. */
    if (job->save_path && whole && losses) {
        ember_status_t saved = save(&master, &spec, whole, final_params, losses, per_trainer);
        if (status == EMBER_OK)
            status = saved;
    }
    free(whole);
    free(losses);
    for (int p = 0; p < job->num_ps; p++)
        master_call(&master, master.first_ps + p, EMBER_OP_PS_SHUTDOWN, NULL, 0, NULL, 0,
                    "shutdown");
    goto out;

abort:
    fprintf(stderr, "ember-train: job failed: %s\n", cause);
    abort_job(&master, cause);
    if (status == EMBER_OK)
        status = EMBER_ERR_CANCELED;
out:
    /* Its state lives in this frame: a late report must find no handler. */
    ember_rpc_register(tp, EMBER_OP_EPOCH_REPORT, NULL, NULL);
    for (int t = 0; futures && t < job->trainers; t++)
        ember_future_release(futures[t]);
    if (master.metrics)
        fclose(master.metrics);
    free(futures);
    free(starts);
    free(params);
    free(master.reports);
    free(master.reported);
    return status;
}
