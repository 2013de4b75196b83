/* engine/train/job: the role map of a job (its flags: tools/train_flags.c). */
#include "engine/train/job.h"

#include <stdio.h>
#include <string.h>

/* Table-wise: the largest table first (the lower id of equal ones) to the
 * PS with the fewest bytes so far (the lower index of equal ones). */
static void place_whole_tables(ember_train_job_table_t *tables, size_t count, uint32_t num_ps)
{
    uint64_t load[4096] = {0};
    uint8_t placed[EMBER_JOB_TABLES_MAX] = {0};
    const uint32_t P = num_ps > 4096 ? 4096 : num_ps;
    for (size_t n = 0; n < count; n++) {
        size_t pick = count;
        for (size_t t = 0; t < count; t++) {
            if (!placed[t] && (pick == count || tables[t].rows > tables[pick].rows))
                pick = t;
        }
        uint32_t ps = 0;
        for (uint32_t p = 1; p < P; p++) {
            if (load[p] < load[ps])
                ps = p;
        }
        placed[pick] = 1;
        tables[pick].shards = 1;
        tables[pick].first_ps = ps;
        load[ps] += (uint64_t)tables[pick].rows * tables[pick].dim * sizeof(float);
    }
}

size_t ember_train_job_tables(const ember_train_config_t *config, uint32_t num_ps,
                              ember_train_job_table_t tables[EMBER_JOB_TABLES_MAX])
{
    if (config->model != EMBER_MODEL_DLRM) {
        tables[0] = (ember_train_job_table_t){
                .id = 0, .rows = config->rows, .dim = config->dim, .shards = num_ps};
        snprintf(tables[0].name, sizeof(tables[0].name), "%s", EMBER_TRAIN_TABLE_NAME);
        return 1;
    }
    const size_t count = config->dlrm.tables <= EMBER_JOB_TABLES_MAX ? config->dlrm.tables
                                                                     : EMBER_JOB_TABLES_MAX;
    for (size_t t = 0; t < count; t++) {
        tables[t] = (ember_train_job_table_t){.id = (uint32_t)t,
                                              .rows = config->dlrm.rows[t],
                                              .dim = config->dim,
                                              .shards = num_ps};
        snprintf(tables[t].name, sizeof(tables[t].name), "t_cat_%zu", t);
    }
    if (config->dlrm.sharding == EMBER_SHARD_TABLE)
        place_whole_tables(tables, count, num_ps);
    return count;
}

int ember_train_job_world_size(const ember_train_job_t *job)
{
    return job->trainers + 1 + job->num_ps;
}

ember_status_t ember_train_job_role(const ember_train_job_t *job, int rank,
                                    ember_train_role_t *role_p, int *index_p, char *name,
                                    size_t name_length)
{
    if (rank < 0 || rank >= ember_train_job_world_size(job))
        return EMBER_ERR_INVALID_PARAM;
    if (rank < job->trainers) {
        *role_p = EMBER_TRAIN_ROLE_TRAINER;
        *index_p = rank;
        snprintf(name, name_length, "trainer%d", rank);
    } else if (rank == job->trainers) {
        *role_p = EMBER_TRAIN_ROLE_MASTER;
        *index_p = 0;
        snprintf(name, name_length, "master");
    } else {
        *role_p = EMBER_TRAIN_ROLE_PS;
        *index_p = rank - job->trainers - 1;
        snprintf(name, name_length, "ps%d", *index_p);
    }
    return EMBER_OK;
}

void ember_train_job_print_roles(const ember_train_job_t *job, FILE *stream)
{
    char name[32];
    ember_train_role_t role;
    int index;
    fprintf(stream, "roles:");
    for (int rank = 0; rank < ember_train_job_world_size(job); rank++) {
        ember_train_job_role(job, rank, &role, &index, name, sizeof(name));
        fprintf(stream, " %s=rank%d", name, rank);
    }
    fprintf(stream, "\n");
    if (job->train.model != EMBER_MODEL_DLRM)
        return;
    ember_train_job_table_t tables[EMBER_JOB_TABLES_MAX];
    size_t count = ember_train_job_tables(&job->train, (uint32_t)job->num_ps, tables);
    for (int p = 0; p < job->num_ps; p++) {
        fprintf(stream, "tables on ps%d:", p);
        for (size_t t = 0; t < count; t++) {
            const ember_train_job_table_t *table = &tables[t];
            if ((uint32_t)p < table->first_ps || (uint32_t)p >= table->first_ps + table->shards)
                continue;
            fprintf(stream, " %s", table->name);
            if (table->shards > 1)
                fprintf(stream, "[rows %% %u == %u]", table->shards, (uint32_t)p - table->first_ps);
        }
        fprintf(stream, "\n");
    }
}
