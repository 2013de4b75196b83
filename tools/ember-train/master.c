/*
 * tools/ember-train/master: the master's phases (see master.h): set up
 * (reports, the resumed checkpoint, the metrics file), the tables, the
 * trainers started, waited for, and the end.
 */
#include "tools/ember-train/master.h"

#include "tools/ember-train/settings.h"

#include <ember/log.h>
#include <ember/ps.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- epochs ---------------------------------------------------------------------- */

/* The mean loss of @epoch's steps over every trainer. */
static double epoch_mean_loss(const master_t *m, uint32_t epoch)
{
    double loss = 0;
    uint64_t steps = 0;
    for (int t = 0; t < m->tj->settings.trainers; t++) {
        const train_msg_epoch_t *r = &m->reports[(size_t)epoch * m->tj->settings.trainers + t];
        loss += r->loss_sum;
        steps += r->steps;
    }
    return steps ? loss / (double)steps : 0.0;
}

/* With --staleness: the largest any trainer's lookups saw so far (the
 * lines of a job without it stay as they were). */
static void staleness_text(const master_t *m, uint64_t seen, int json, char *out, size_t length)
{
    out[0] = '\0';
    if (m->tj->settings.staleness > 0)
        snprintf(out, length, json ? ", \"staleness\": %llu" : "  staleness %llu",
                 (unsigned long long)seen);
}

static void print_epoch(master_t *m, uint32_t epoch)
{
    const int trainers = m->tj->settings.trainers;
    const char *what = m->model->unit;
    double seconds = 0;
    uint64_t steps = 0, bags = 0, stale = 0;
    char text[48], json[48];
    for (int t = 0; t < trainers; t++) {
        const train_msg_epoch_t *r = &m->reports[(size_t)epoch * trainers + t];
        steps += r->steps;
        bags += r->bags;
        seconds = r->seconds > seconds ? r->seconds : seconds;
        stale = r->staleness > stale ? r->staleness : stale;
    }
    staleness_text(m, stale, 0, text, sizeof(text));
    staleness_text(m, stale, 1, json, sizeof(json));
    const double mean = epoch_mean_loss(m, epoch);
    const double steps_s = seconds > 0 ? (double)steps / seconds : 0.0;
    const double bags_s = seconds > 0 ? (double)bags / seconds : 0.0;
    master_progress_hide(m);
    printf("epoch %4u  mean loss %.4f  steps/s %.0f  %s/s %.0f%s\n", epoch + 1, mean, steps_s, what,
           bags_s, text);
    fflush(stdout);
    master_progress_show(m);
    if (m->metrics) {
        fprintf(m->metrics,
                "{\"epoch\": %u, \"loss\": %.6f, \"steps\": %llu, "
                "\"%s\": %llu, \"seconds\": %.6f, \"steps_per_s\": %.1f, "
                "\"%s_per_s\": %.1f%s}\n",
                epoch + 1, mean, (unsigned long long)steps, what, (unsigned long long)bags, seconds,
                steps_s, what, bags_s, json);
        fflush(m->metrics);
    }
}

static void on_epoch(ember_rpc_req_t *req, void *arg)
{
    master_t *m = arg;
    const int trainers = m->tj->settings.trainers;
    train_msg_epoch_t msg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[128];
    ember_status_t status =
            train_epoch_unpack(data, length, (uint32_t)trainers, m->epochs, &msg, err, sizeof(err));
    if (status == EMBER_OK && msg.staleness > m->tj->settings.staleness)
        status = ember_status_text(err, sizeof(err), EMBER_ERR_INVALID_PARAM,
                                   "trainer%u saw staleness %llu, beyond --staleness %u",
                                   msg.trainer, (unsigned long long)msg.staleness,
                                   m->tj->settings.staleness);
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    const size_t slot = (size_t)msg.epoch * trainers + msg.trainer;
    m->reports[slot] = msg;
    m->reported[slot] = 1;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
    /* Print epochs in order, each once every trainer has reported it. */
    while (m->printed < m->epochs) {
        for (int t = 0; t < trainers; t++) {
            if (!m->reported[(size_t)m->printed * trainers + t])
                return;
        }
        print_epoch(m, m->printed++);
    }
}

/* ---- set-up ------------------------------------------------------------------------- */

static ember_status_t master_setup(master_t *m)
{
    const train_job_t *tj = m->tj;
    const int trainers = tj->settings.trainers;
    m->nparams = m->model->params(tj->config);
    m->epochs = tj->settings.epochs;
    m->params = malloc(m->nparams * sizeof(float) + 4);
    m->futures = calloc((size_t)trainers, sizeof(*m->futures));
    m->starts = calloc((size_t)trainers, sizeof(*m->starts));
    m->iovs = calloc((size_t)trainers, sizeof(*m->iovs));
    m->reports = calloc((size_t)m->epochs * trainers, sizeof(*m->reports));
    m->reported = calloc((size_t)m->epochs * trainers, 1);
    if (!m->params || !m->futures || !m->starts || !m->iovs || !m->reports || !m->reported)
        return EMBER_ERR_NO_MEMORY;
    ember_rpc_register(ember_job_transport(m->job), TRAIN_OP_EPOCH, on_epoch, m);
    EMBER_CHECK(master_progress_create(m));
    if (tj->metrics_path && !(m->metrics = fopen(tj->metrics_path, "w"))) {
        snprintf(m->cause, sizeof(m->cause), "cannot write the metrics to %s: %s", tj->metrics_path,
                 strerror(errno));
        return EMBER_ERR_IO;
    }
    if (tj->resume_path)
        EMBER_CHECK(master_resume_find(m));
    return m->model->eval_take ? master_eval_create(m) : EMBER_OK;
}

/* One line naming every rank's role, and (a model of several tables) one
 * per PS naming the tables it holds. */
static void print_roles(const master_t *m)
{
    printf("roles:");
    for (int rank = 0; rank < ember_job_world_size(m->job); rank++)
        printf(" %s=rank%d", ember_job_name(m->job, rank), rank);
    printf("\n");
    for (int p = 0; m->ntables > 1 && p < m->tj->settings.num_ps; p++) {
        printf("tables on ps%d:", p);
        for (size_t t = 0; t < m->ntables; t++) {
            const ember_model_table_t *table = &m->tables[t];
            const uint32_t shards = table->sharding == EMBER_SHARD_TABLE_WISE ? 1
                                    : table->num_shards                       ? table->num_shards
                                                        : (uint32_t)m->tj->settings.num_ps;
            if ((uint32_t)p < table->first_ps || (uint32_t)p >= table->first_ps + shards)
                continue;
            printf(" %s", table->name);
            if (shards > 1)
                printf("[rows %% %u == %u]", shards, (uint32_t)p - table->first_ps);
        }
        printf("\n");
    }
    fflush(stdout);
}

/* ---- the trainers ------------------------------------------------------------------ */

/* Every trainer's TRAIN_START: the driver's settings, the model's
 * description, where checkpoints go and come from, the dense start. */
static ember_status_t start_trainers(master_t *m)
{
    const train_job_t *tj = m->tj;
    ember_tp_t *tp = ember_job_transport(m->job);
    train_settings_describe(m->model, &tj->settings, &m->settings_text);
    m->model->describe(tj->config, &m->config_text);
    const char *texts[4] = {model_text_take(&m->settings_text), model_text_take(&m->config_text),
                            tj->checkpoint_dir ? tj->checkpoint_dir : "",
                            m->resume.manifest ? m->resume.dir : ""};
    if (!texts[0] || !texts[1])
        return EMBER_ERR_NO_MEMORY;
    uint64_t report_at[2];
    m->started = now_s();
    master_progress_start(m, m->start_step, m->started, report_at);
    for (int t = 0; t < tj->settings.trainers; t++) {
        m->starts[t] = (train_msg_start_t){.trainer = (uint32_t)t,
                                           .trainers = (uint32_t)tj->settings.trainers,
                                           .num_ps = (uint32_t)tj->settings.num_ps,
                                           .start_step = m->start_step,
                                           .every = tj->checkpoint_every,
                                           .nparams = m->nparams,
                                           .report_at = {report_at[0], report_at[1]}};
        size_t n = train_start_pack(&m->starts[t], texts, m->params, m->iovs[t]);
        /* Answered when the trainer is done: no deadline but its loss. */
        EMBER_CHECK(ember_rpc_call_async(tp, ember_job_trainer_rank(m->job, t), TRAIN_OP_START,
                                         m->iovs[t], n, NULL, 0,
                                         &(ember_rpc_param_t){.timeout_s = 1e9}, &m->futures[t]));
    }
    return EMBER_OK;
}

/* Wait for all trainers, reacting to the first one that fails. */
static ember_status_t wait_trainers(master_t *m)
{
    for (int remaining = m->tj->settings.trainers; remaining > 0;) {
        remaining = 0;
        for (int t = 0; t < m->tj->settings.trainers; t++) {
            ember_status_t status = ember_future_test(m->futures[t]);
            if (status == EMBER_INPROGRESS) {
                remaining++;
                continue;
            }
            if (status != EMBER_OK) {
                size_t length;
                const char *text = ember_future_data(m->futures[t], &length);
                snprintf(m->cause, sizeof(m->cause), "%.*s", (int)length, text ? text : "");
                master_progress_end(m);
                ember_error("master", "trainer%d failed: %s", t, m->cause);
                return status;
            }
        }
        if (remaining)
            ember_job_wait(m->job, 0.5);
        master_ckpt_poll(m);
    }
    master_progress_end(m);
    return EMBER_OK;
}

/* ---- the end ------------------------------------------------------------------------ */

/* What the trainers sent back: their totals, their losses step-major, and
 * trainer0's final layers (the others' must be the same: a difference is
 * warned of). */
typedef struct {
    uint64_t steps, bags, per_trainer;
    float *losses; /* [per_trainer][trainers] */
    float *params;
    double last; /* the last step's loss, mean over trainers */
} finished_t;

static ember_status_t take_reports(master_t *m, train_done_t *done)
{
    for (int t = 0; t < m->tj->settings.trainers; t++) {
        size_t length;
        const void *data = ember_future_data(m->futures[t], &length);
        ember_status_t status = train_done_unpack(data, length, m->nparams, t, &done[t], m->cause,
                                                  sizeof(m->cause));
        if (status == EMBER_OK && done[t].head.steps != done[0].head.steps)
            status = ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_BAD_MESSAGE,
                                       "trainer%d sent a malformed report", t);
        if (status != EMBER_OK)
            return status;
    }
    return EMBER_OK;
}

static ember_status_t gather_results(master_t *m, const train_done_t *done, finished_t *fin)
{
    const int trainers = m->tj->settings.trainers;
    const size_t param_bytes = m->nparams * sizeof(float);
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
            const float loss = train_load_f32(done[t].losses, s);
            fin->losses[s * trainers + t] = loss;
            if (s + 1 == fin->per_trainer)
                fin->last += loss / trainers;
        }
    }
    return EMBER_OK;
}

static void print_done(master_t *m, const finished_t *fin)
{
    const double seconds = now_s() - m->started;
    const char *what = m->model->unit;
    printf("done: %llu steps (%llu %s) in %.3f s: %.0f steps/s, %.0f %s/s; "
           "last step's loss %.4f (mean over trainers), last epoch's mean loss %.4f\n",
           (unsigned long long)fin->steps, (unsigned long long)fin->bags, what, seconds,
           (double)fin->steps / seconds, (double)fin->bags / seconds, what, fin->last,
           m->printed ? epoch_mean_loss(m, m->printed - 1) : fin->last);
    fflush(stdout);
}

/* Where each trainer's time went, by phase: printed, and a --metrics line each. */
static void print_phases(master_t *m, const train_done_t *done)
{
    for (int t = 0; t < m->tj->settings.trainers; t++) {
        const train_msg_done_t *d = &done[t].head;
        double total = 0;
        for (int p = 0; p < TRAIN_PHASES; p++)
            total += d->phase_seconds[p];
        printf("time on trainer%d: %.3f s:", t, total);
        for (int p = 0; p < TRAIN_PHASES; p++)
            printf("%s %s %.1f%%", p ? "," : "", train_phase_names[p],
                   total > 0 ? 100.0 * d->phase_seconds[p] / total : 0.0);
        printf("\n");
        if (!m->metrics)
            continue;
        fprintf(m->metrics, "{\"trainer_time\": %d, \"seconds\": %.6f", t, total);
        for (int p = 0; p < TRAIN_PHASES; p++)
            fprintf(m->metrics, ", \"%s\": %.6f", train_phase_names[p], d->phase_seconds[p]);
        fprintf(m->metrics, "}\n");
    }
    fflush(stdout);
}

/* Each dynamic table's counters on each of its PS: printed, and a
 * --metrics line each. */
static void print_dynamic(master_t *m)
{
    for (size_t t = 0; t < m->ntables; t++) {
        ember_table_t *table = m->handles[t];
        if (!table || !ember_table_dynamic(table))
            continue;
        const ember_table_config_t *c = ember_table_config(table);
        for (uint32_t shard = 0; shard < c->num_shards; shard++) {
            ember_table_stats_t s;
            if (ember_table_shard_stats(table, shard, &s) != EMBER_OK)
                continue;
            printf("table %s on ps%u: %llu rows held (%.1f MiB), %llu admitted, %llu evicted, "
                   "%llu gradient rows dropped, %llu candidates; map load %.2f, probes mean "
                   "%.2f max %u\n",
                   c->name, c->first_ps + shard, (unsigned long long)s.rows, s.bytes / 1048576.0,
                   (unsigned long long)s.admitted, (unsigned long long)s.evicted,
                   (unsigned long long)s.dropped_grads, (unsigned long long)s.candidates,
                   s.load_factor, s.mean_probe, s.max_probe);
            if (m->metrics)
                fprintf(m->metrics,
                        "{\"dynamic_table\": \"%s\", \"ps\": %u, \"rows\": %llu, \"bytes\": "
                        "%llu, \"admitted\": %llu, \"evicted\": %llu, \"dropped_grads\": %llu, "
                        "\"candidates\": %llu, \"load_factor\": %.4f, \"mean_probe\": %.4f, "
                        "\"max_probe\": %u}\n",
                        c->name, c->first_ps + shard, (unsigned long long)s.rows,
                        (unsigned long long)s.bytes, (unsigned long long)s.admitted,
                        (unsigned long long)s.evicted, (unsigned long long)s.dropped_grads,
                        (unsigned long long)s.candidates, s.load_factor, s.mean_probe, s.max_probe);
        }
    }
    fflush(stdout);
}

/* The trainers' row caches (--cache-rows): their hit rate, printed and a
 * --metrics line; a copy used beyond --staleness fails the job (the
 * engine refuses one, so this is its check). */
static ember_status_t print_cache(master_t *m, const train_done_t *done)
{
    const ember_train_settings_t *s = &m->tj->settings;
    if (s->cache_rows == 0)
        return EMBER_OK;
    uint64_t lookups = 0, hits = 0, stale = 0, oldest = 0, inserted = 0, evicted = 0, rows = 0;
    for (int t = 0; t < s->trainers; t++) {
        const train_msg_done_t *d = &done[t].head;
        lookups += d->cache_lookups;
        hits += d->cache_hits;
        stale += d->cache_stale;
        inserted += d->cache_inserted;
        evicted += d->cache_evicted;
        rows += d->cache_rows;
        oldest = d->cache_oldest > oldest ? d->cache_oldest : oldest;
    }
    const double rate = lookups ? 100.0 * (double)hits / (double)lookups : 0.0;
    printf("cache: hit rate %.1f%% (%llu of %llu rows), %llu by staleness (oldest %llu steps "
           "behind), %llu rows held in %d caches of %llu, %llu put in, %llu replaced\n",
           rate, (unsigned long long)hits, (unsigned long long)lookups, (unsigned long long)stale,
           (unsigned long long)oldest, (unsigned long long)rows, s->trainers,
           (unsigned long long)s->cache_rows, (unsigned long long)inserted,
           (unsigned long long)evicted);
    fflush(stdout);
    if (m->metrics)
        fprintf(m->metrics,
                "{\"cache\": %llu, \"lookups\": %llu, \"hits\": %llu, \"hit_rate\": %.6f, "
                "\"stale_hits\": %llu, \"oldest\": %llu, \"rows\": %llu, \"inserted\": %llu, "
                "\"evicted\": %llu}\n",
                (unsigned long long)s->cache_rows, (unsigned long long)lookups,
                (unsigned long long)hits, lookups ? (double)hits / (double)lookups : 0.0,
                (unsigned long long)stale, (unsigned long long)oldest, (unsigned long long)rows,
                (unsigned long long)inserted, (unsigned long long)evicted);
    if (oldest > s->staleness)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_BAD_MESSAGE,
                                 "a trainer used a cached row %llu steps behind its step, beyond "
                                 "--staleness %u",
                                 (unsigned long long)oldest, s->staleness);
    return EMBER_OK;
}

static void print_memory(master_t *m)
{
    for (int p = 0; p < m->tj->settings.num_ps; p++) {
        ember_ps_stats_t s;
        if (ember_ps_stats(m->job, p, &s) != EMBER_OK)
            continue;
        ember_info("master",
                   "ps%d: table %.1f MiB, optimizer state %.1f MiB, other "
                   "%.1f MiB, resident %.1f MiB; %llu lookups, %llu gradients, %llu "
                   "steps applied",
                   p, s.table_bytes / 1048576.0, s.optimizer_bytes / 1048576.0,
                   s.other_bytes / 1048576.0, s.rss_bytes / 1048576.0,
                   (unsigned long long)s.lookups, (unsigned long long)s.grads,
                   (unsigned long long)s.steps_applied);
    }
}

/* The last checkpoints complete, or the job stopped at a SIGTERM's. */
static ember_status_t finish_checkpoints(master_t *m, uint64_t steps)
{
    ember_status_t status = ember_checkpoint_finish(m->ckpt, steps, m->cause, sizeof(m->cause));
    master_ckpt_poll(m);
    if (status != EMBER_OK)
        return status;
    const uint64_t stopped_at = ember_checkpoint_stop_step(m->ckpt);
    if (stopped_at && stopped_at <= steps) {
        printf("stopped after step %llu, at its checkpoint: go on with --resume %s\n",
               (unsigned long long)stopped_at, m->tj->checkpoint_dir);
        fflush(stdout);
        return EMBER_ERR_CANCELED;
    }
    return EMBER_OK;
}

/* The trainers' reports, the closing lines, the checkpoints, the model's
 * check and save. */
static ember_status_t finish_job(master_t *m)
{
    train_done_t *done = calloc((uint32_t)m->tj->settings.trainers, sizeof(*done));
    finished_t fin = {.steps = 0};
    ember_status_t status = done ? take_reports(m, done) : EMBER_ERR_NO_MEMORY;
    if (status != EMBER_OK) {
        free(done);
        return status;
    }
    status = gather_results(m, done, &fin);
    print_done(m, &fin);
    print_phases(m, done);
    print_memory(m);
    print_dynamic(m);
    if (status == EMBER_OK)
        status = print_cache(m, done);
    if (status == EMBER_OK)
        status = finish_checkpoints(m, fin.per_trainer);
    if (status == EMBER_OK)
        status = master_result(m, fin.params, fin.losses, fin.per_trainer);
    free(fin.params);
    free(fin.losses);
    free(done);
    return status;
}

static void master_cleanup(master_t *m)
{
    /* Its state lives in this frame: a late report must find no handler. */
    ember_rpc_register(ember_job_transport(m->job), TRAIN_OP_EPOCH, NULL, NULL);
    master_progress_destroy(m);
    master_eval_destroy(m);
    ember_checkpoint_close(m->ckpt);
    ember_checkpoint_info_free(&m->resume);
    master_tables_close(m);
    for (int t = 0; m->futures && t < m->tj->settings.trainers; t++)
        ember_future_release(m->futures[t]);
    if (m->metrics)
        fclose(m->metrics);
    model_text_free(&m->settings_text);
    model_text_free(&m->config_text);
    free(m->futures);
    free(m->starts);
    free(m->iovs);
    free(m->params);
    free(m->reports);
    free(m->reported);
}

/* Until every trainer is done; a failure meanwhile gets a cause the others
 * are aborted with. */
static ember_status_t run_trainers(master_t *m)
{
    const train_job_t *tj = m->tj;
    ember_status_t status = master_setup(m);
    if (status == EMBER_OK)
        status = master_tables(m);
    if (status == EMBER_OK) {
        m->model->print(tj->config, &tj->settings, m->tables, m->ntables);
        status = start_trainers(m);
    }
    if (status == EMBER_OK)
        status = master_ckpt_open(m);
    if (status == EMBER_OK)
        status = wait_trainers(m);
    if (status != EMBER_OK && !m->cause[0])
        snprintf(m->cause, sizeof(m->cause), "the master failed: %s", ember_status_string(status));
    return status;
}

ember_status_t train_master_run(ember_job_t *job, const train_job_t *tj, char *cause)
{
    master_t m = {.job = job, .tj = tj, .model = tj->model};
    model_text_init(&m.settings_text);
    model_text_init(&m.config_text);
    m.ntables = m.model->tables(tj->config, &tj->settings, m.tables);
    print_roles(&m);
    ember_status_t status = run_trainers(&m);
    /* The trainers are done: what fails now (a checkpoint, the model's
     * check, the save) fails this run, not the job's end. */
    if (status == EMBER_OK)
        status = finish_job(&m);
    snprintf(cause, 512, "%s", m.cause);
    master_cleanup(&m);
    return status;
}
