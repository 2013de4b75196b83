/* engine/train/job: the role map of a job (its flags: tools/train_flags.c). */
#include "engine/train/job.h"

#include <stdio.h>

int ember_job_world_size(const ember_job_t *job)
{
    return job->trainers + 1 + job->num_ps;
}

ember_status_t ember_job_role(const ember_job_t *job, int rank, ember_role_t *role_p, int *index_p,
                              char *name, size_t name_length)
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
