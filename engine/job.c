/* engine/job: ember-train's flags and the role map. */
#include "engine/job.h"

#include <ember/config.h>
#include <ember/log.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: ember-train [flags]   (run under ember-run -n N, srun, or with\n"
    "       EMBER_RANK/EMBER_WORLD_SIZE/EMBER_INIT; N = trainers + 1 + ps)\n"
    "  --trainers T          trainers (default 2)\n"
    "  --ps P                parameter servers; rows split by row %% P (1)\n"
    "  --rows R --dim D      embedding table size (100 x 16)\n"
    "  --classes C           outputs of the Linear layer (8)\n"
    "  --hidden W1,W2,...    a dense MLP: Linear+ReLU layers of these widths\n"
    "                        before the last Linear (none: the tutorial's)\n"
    "  --mode sum|mean|max   EmbeddingBag pooling (sum)\n"
    "  --padding-idx I       row that pools as nothing (none)\n"
    "  --weights             per-sample weights (sum mode)\n"
    "  --optimizer NAME      sgd, adagrad, rowwise_adagrad, adam (sgd)\n"
    "  --lr X --momentum M   learning rate (0.05), SGD momentum (0)\n"
    "  --epochs E --batches B  epochs (100) of B batches (10)\n"
    "  --min-indices A --max-indices B  indices per batch (20..50)\n"
    "  --data tutorial|synthetic  random bags, or bags with a learnable target\n"
    "  --seed S              seed of weights and data (EMBER_SEED)\n"
    "  --consistency sync|async  (EMBER_CONSISTENCY, default sync)\n"
    "  --sparse-reduce sum|mean  sync: how trainers' row gradients combine\n"
    "  --table-dtype fp32|fp16  how the PS stores the table's rows (fp32); fp16\n"
    "                        halves its memory, arithmetic stays fp32\n"
    "  --reply-dtype fp32|fp16  lookups' replies on the wire (fp32); fp16 halves\n"
    "                        their bytes (the pooled values rounded)\n"
    "  --replay FILE         train on a golden-layout file (sizes, weights and\n"
    "                        batches from it), in sync mode\n"
    "  --save FILE           write emb.weight, fc.weight, fc.bias, loss\n"
    "  --metrics FILE        JSON lines, one per epoch (EMBER_METRICS)\n"
    "  --device cpu|cuda     where the trainers' dense model runs (cpu); cuda\n"
    "                        takes GPU local_rank %% GPUs, NCCL for its allreduce\n"
    "  --ps-device cpu|cuda  where each PS keeps its table shards and pools (cpu);\n"
    "                        cuda: GPU local_rank %% GPUs, fp32 rows\n"
    "  --bind numa|core|none CPU/memory binding near the GPU/HCA (EMBER_BIND)\n";

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

static ember_status_t bad(const char *flag, const char *value)
{
    fprintf(stderr, "ember-train: invalid value '%s' for %s\n%s", value ? value : "",
            flag, usage);
    return EMBER_ERR_INVALID_PARAM;
}

ember_status_t ember_job_parse(int argc, char **argv, ember_job_t *job, int *help_p)
{
    const char *consistency = ember_config_str("EMBER_CONSISTENCY");
    float momentum = 0.0f, lr = 0.05f;
    ember_opt_kind_t kind = EMBER_OPT_SGD;
    int64_t v;

    *help_p = 0;
    *job = (ember_job_t){.trainers = 2, .num_ps = 1, .rows = 100, .dim = 16,
                         .classes = 8, .mode = EMBER_POOL_SUM, .padding_idx = -1,
                         .epochs = 100, .batches = 10, .min_indices = 20,
                         .max_indices = 50,
                         .seed = (uint64_t)ember_config_int("EMBER_SEED"),
                         .data = EMBER_DATA_TUTORIAL,
                         .metrics_path = ember_config_str("EMBER_METRICS"),
                         .device = "cpu", .ps_device = "cpu"};
    job->consistency = consistency && strcmp(consistency, "async") == 0 ? EMBER_ASYNC
                                                                        : EMBER_SYNC;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = 1;
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            fputs(usage, stdout);
            *help_p = 1;
            return EMBER_OK;
        } else if (!strcmp(flag, "--weights")) {
            job->per_sample_weights = 1;
            takes_value = 0;
        } else if (!value) {
            return bad(flag, NULL);
        } else if (!strcmp(flag, "--trainers")) {
            if (!parse_i64(value, 1, 4096, &v))
                return bad(flag, value);
            job->trainers = (int)v;
        } else if (!strcmp(flag, "--ps")) {
            if (!parse_i64(value, 1, 4096, &v))
                return bad(flag, value);
            job->num_ps = (int)v;
        } else if (!strcmp(flag, "--rows")) {
            if (!parse_i64(value, 1, INT64_MAX / 65536, &v))
                return bad(flag, value);
            job->rows = v;
        } else if (!strcmp(flag, "--dim")) {
            if (!parse_i64(value, 1, 65536, &v))
                return bad(flag, value);
            job->dim = (uint32_t)v;
        } else if (!strcmp(flag, "--classes")) {
            if (!parse_i64(value, 2, 65536, &v))
                return bad(flag, value);
            job->classes = (uint32_t)v;
        } else if (!strcmp(flag, "--hidden")) {
            char *copy = strdup(value), *save = NULL;
            job->nhidden = 0;
            for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                if (job->nhidden == EMBER_MAX_HIDDEN || !parse_i64(w, 1, 65536, &v)) {
                    free(copy);
                    return bad(flag, value);
                }
                job->hidden[job->nhidden++] = (uint32_t)v;
            }
            free(copy);
        } else if (!strcmp(flag, "--mode")) {
            if (ember_pool_mode_parse(value, &job->mode) != EMBER_OK)
                return bad(flag, value);
        } else if (!strcmp(flag, "--padding-idx")) {
            if (!parse_i64(value, -1, INT64_MAX, &v))
                return bad(flag, value);
            job->padding_idx = v;
        } else if (!strcmp(flag, "--optimizer")) {
            if (ember_opt_kind_parse(value, &kind) != EMBER_OK)
                return bad(flag, value);
        } else if (!strcmp(flag, "--lr") || !strcmp(flag, "--momentum")) {
            char *end;
            float x = strtof(value, &end);
            if (*end || end == value || x < 0)
                return bad(flag, value);
            *(!strcmp(flag, "--lr") ? &lr : &momentum) = x;
        } else if (!strcmp(flag, "--epochs") || !strcmp(flag, "--batches") ||
                   !strcmp(flag, "--min-indices") || !strcmp(flag, "--max-indices")) {
            if (!parse_i64(value, !strcmp(flag, "--min-indices") ? 0 : 1, 1 << 30, &v))
                return bad(flag, value);
            uint32_t *field = !strcmp(flag, "--epochs")        ? &job->epochs
                              : !strcmp(flag, "--batches")     ? &job->batches
                              : !strcmp(flag, "--min-indices") ? &job->min_indices
                                                               : &job->max_indices;
            *field = (uint32_t)v;
        } else if (!strcmp(flag, "--seed")) {
            if (!parse_i64(value, 0, INT64_MAX, &v))
                return bad(flag, value);
            job->seed = (uint64_t)v;
        } else if (!strcmp(flag, "--consistency")) {
            if (strcmp(value, "sync") && strcmp(value, "async"))
                return bad(flag, value);
            job->consistency = !strcmp(value, "sync") ? EMBER_SYNC : EMBER_ASYNC;
        } else if (!strcmp(flag, "--sparse-reduce")) {
            if (strcmp(value, "sum") && strcmp(value, "mean"))
                return bad(flag, value);
            job->sparse_reduce = !strcmp(value, "sum") ? EMBER_REDUCE_SUM
                                                       : EMBER_REDUCE_MEAN;
        } else if (!strcmp(flag, "--table-dtype")) {
            if (strcmp(value, "fp32") && strcmp(value, "fp16"))
                return bad(flag, value);
            job->table_dtype = !strcmp(value, "fp16") ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
        } else if (!strcmp(flag, "--reply-dtype")) {
            if (strcmp(value, "fp32") && strcmp(value, "fp16"))
                return bad(flag, value);
            job->half_replies = !strcmp(value, "fp16");
        } else if (!strcmp(flag, "--data")) {
            if (strcmp(value, "tutorial") && strcmp(value, "synthetic"))
                return bad(flag, value);
            job->data = !strcmp(value, "tutorial") ? EMBER_DATA_TUTORIAL
                                                   : EMBER_DATA_SYNTHETIC;
        } else if (!strcmp(flag, "--replay")) {
            job->replay_path = value;
            job->data = EMBER_DATA_REPLAY;
        } else if (!strcmp(flag, "--save")) {
            job->save_path = value;
        } else if (!strcmp(flag, "--metrics")) {
            job->metrics_path = value;
        } else if (!strcmp(flag, "--device")) {
            if (strcmp(value, "cpu") && strcmp(value, "cuda"))
                return bad(flag, value);
            job->device = value;
        } else if (!strcmp(flag, "--ps-device")) {
            if (strcmp(value, "cpu") && strcmp(value, "cuda"))
                return bad(flag, value);
            job->ps_device = value;
        } else {
            fprintf(stderr, "ember-train: unknown flag '%s'\n%s", flag, usage);
            return EMBER_ERR_INVALID_PARAM;
        }
        i += takes_value;
    }
    if (job->min_indices > job->max_indices)
        return bad("--min-indices", "greater than --max-indices");
    if (job->padding_idx >= job->rows)
        return bad("--padding-idx", "not a row of the table");
    if (job->per_sample_weights && job->mode != EMBER_POOL_SUM)
        return bad("--weights", "per-sample weights need --mode sum");
    ember_opt_config_default(kind, lr, &job->optimizer);
    job->optimizer.momentum = momentum;
    return EMBER_OK;
}

int ember_job_world_size(const ember_job_t *job)
{
    return job->trainers + 1 + job->num_ps;
}

ember_status_t ember_job_role(const ember_job_t *job, int rank, ember_role_t *role_p,
                              int *index_p, char *name, size_t name_length)
{
    if (rank < 0 || rank >= ember_job_world_size(job))
        return EMBER_ERR_INVALID_PARAM;
    if (rank < job->trainers) {
        *role_p = EMBER_ROLE_TRAINER;
        *index_p = rank;
        snprintf(name, name_length, "trainer%d", rank);
    } else if (rank == job->trainers) {
        *role_p = EMBER_ROLE_MASTER;
        *index_p = 0;
        snprintf(name, name_length, "master");
    } else {
        *role_p = EMBER_ROLE_PS;
        *index_p = rank - job->trainers - 1;
        snprintf(name, name_length, "ps%d", *index_p);
    }
    return EMBER_OK;
}

void ember_job_print_roles(const ember_job_t *job, FILE *stream)
{
    char name[32];
    ember_role_t role;
    int index;
    fprintf(stream, "roles:");
    for (int rank = 0; rank < ember_job_world_size(job); rank++) {
        ember_job_role(job, rank, &role, &index, name, sizeof(name));
        fprintf(stream, " %s=rank%d", name, rank);
    }
    fprintf(stream, "\n");
}
