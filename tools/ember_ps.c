/*
 * ember-ps: a parameter server and nothing else, for jobs whose other ranks
 * are programs of their own (a PyTorch program over the `ember` package, a
 * C program over libember): it joins under the role PS, serves the tables
 * the others create until every rank that is not a PS has left, and exits.
 * A user of libember's public API only (<ember/ember.h>).
 *
 *   ember-ps [--name NAME] [--threads N] [--trainers T --num-ps P]
 *
 * The layout: by default every rank states its role (the Python package's
 * ranks do: EMBER_JOB_FROM_ROLES); with --trainers and --num-ps, the
 * layout every rank states instead (a C program's).  The rank and world
 * come from the launcher (ember-run, srun).  Exit 0 when the job ended in
 * order, 1 when it failed (the cause logged), 2 on a bad flag.
 */
#include <ember/ember.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *stream)
{
    fprintf(stream, "usage: ember-ps [--name NAME] [--threads N] [--trainers T --num-ps P]\n"
                    "  serve as a PS of the job this process's launcher started (ember-run,\n"
                    "  srun); NAME defaults to \"ps\" (one PS) or the launcher's EMBER_NAME\n");
}

/* A non-negative int flag value, checked at its full width. */
static int parse_count(const char *flag, const char *text, int *value)
{
    char *end;
    long v = text ? strtol(text, &end, 10) : -1;
    if (!text || *end || v < 0 || v > 1 << 20) {
        fprintf(stderr, "ember-ps: %s: %s is not a count\n", flag, text ? text : "(missing)");
        return 0;
    }
    *value = (int)v;
    return 1;
}

int main(int argc, char **argv)
{
    const char *name = getenv("EMBER_NAME");
    int threads = 0, trainers = -1, num_ps = -1;
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--name") == 0 && value) {
            name = argv[++i];
        } else if (strcmp(argv[i], "--threads") == 0) {
            if (!parse_count("--threads", value, &threads))
                return 2;
            i++;
        } else if (strcmp(argv[i], "--trainers") == 0) {
            if (!parse_count("--trainers", value, &trainers))
                return 2;
            i++;
        } else if (strcmp(argv[i], "--num-ps") == 0) {
            if (!parse_count("--num-ps", value, &num_ps))
                return 2;
            i++;
        } else {
            fprintf(stderr, "ember-ps: unknown argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if ((trainers < 0) != (num_ps < 0)) {
        fprintf(stderr, "ember-ps: --trainers and --num-ps go together\n");
        return 2;
    }
    ember_crash_handler_install();
    ember_job_params_t params;
    ember_job_params_init(&params);
    params.name = name && *name ? name : "ps";
    if (trainers < 0) {
        params.trainers = params.num_ps = EMBER_JOB_FROM_ROLES;
        params.role = EMBER_ROLE_PS;
    } else {
        params.trainers = trainers;
        params.num_ps = num_ps;
    }
    ember_job_t *job;
    ember_status_t status = ember_job_join(&params, &job);
    if (status != EMBER_OK)
        return 1; /* logged */
    ember_ps_options_t options;
    ember_ps_options_init(&options);
    options.threads = (unsigned)threads;
    status = ember_ps_serve(job, &options);
    ember_job_leave(job, status);
    return status == EMBER_OK ? 0 : 1;
}
