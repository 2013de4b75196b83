/*
 * tools/ember-train/master_eval: the master's side of the evaluations.
 * Each trainer sends the logits of its share of the evaluation's examples
 * after step S (TRAIN_OP_EVAL, a call); once every trainer's share of S is
 * in, the exact ROC AUC (ties counted half) and the mean log loss over all
 * of them are printed ("eval step S: auc A logloss L examples N") and
 * written to the metrics file as a JSON line.
 */
#include "tools/ember-train/master.h"

#include <ember/metrics.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Evaluations in flight at once: in sync mode one (a trainer's next one
 * waits for the others' steps); async trainers may be a few apart. */
#define EVALS_OPEN 8

typedef struct {
    int open;
    uint64_t step;
    uint32_t reported; /* trainers so far */
    uint8_t *from;     /* [trainers]: reported yet */
    float *logits, *labels;
    size_t count, capacity;
} open_eval_t;

struct master_eval {
    master_t *m;
    uint32_t trainers;
    open_eval_t evals[EVALS_OPEN];
};

static open_eval_t *eval_slot(master_eval_t *eval, uint64_t step)
{
    open_eval_t *free_slot = NULL;
    for (int i = 0; i < EVALS_OPEN; i++) {
        open_eval_t *e = &eval->evals[i];
        if (e->open && e->step == step)
            return e;
        if (!e->open && !free_slot)
            free_slot = e;
    }
    if (free_slot) {
        free_slot->open = 1;
        free_slot->step = step;
        free_slot->reported = 0;
        free_slot->count = 0;
        memset(free_slot->from, 0, eval->trainers);
    }
    return free_slot;
}

/* Every trainer's share is in: score, print, write, close the slot. */
static void eval_finish(master_eval_t *eval, open_eval_t *e)
{
    FILE *metrics = eval->m->metrics;
    double auc = NAN;
    if (ember_roc_auc(e->logits, e->labels, e->count, &auc) != EMBER_OK)
        auc = NAN; /* one class only: no AUC */
    const double logloss = ember_log_loss(e->logits, e->labels, e->count);
    master_progress_hide(eval->m);
    printf("eval step %llu: auc %.6f logloss %.6f examples %zu\n", (unsigned long long)e->step, auc,
           logloss, e->count);
    fflush(stdout);
    master_progress_show(eval->m);
    if (metrics) {
        fprintf(metrics,
                "{\"eval_step\": %llu, \"auc\": %.9f, \"logloss\": %.9f, \"examples\": %zu}\n",
                (unsigned long long)e->step, auc, logloss, e->count);
        fflush(metrics);
    }
    e->open = 0;
}

/* A report's logits and labels appended to its evaluation. */
static ember_status_t eval_take(open_eval_t *e, const train_eval_t *view)
{
    const size_t n = (size_t)view->head.count, total = e->count + n;
    if (total > e->capacity) {
        const size_t want = total > 2 * e->capacity ? total : 2 * e->capacity;
        float *logits = realloc(e->logits, want * sizeof(float) + 4);
        if (logits)
            e->logits = logits;
        float *labels = realloc(e->labels, want * sizeof(float) + 4);
        if (labels)
            e->labels = labels;
        if (!logits || !labels)
            return EMBER_ERR_NO_MEMORY;
        e->capacity = want;
    }
    for (size_t i = 0; i < n; i++) {
        e->logits[e->count + i] = train_load_f32(view->logits, i);
        e->labels[e->count + i] = train_load_f32(view->labels, i);
    }
    e->count = total;
    return EMBER_OK;
}

static void on_eval(ember_rpc_req_t *req, void *arg)
{
    master_eval_t *eval = arg;
    train_eval_t view;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[160];
    ember_status_t status =
            train_eval_unpack(data, length, eval->trainers, &view, err, sizeof(err));
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "%s", err);
        return;
    }
    open_eval_t *e = eval_slot(eval, view.head.step);
    if (!e || e->from[view.head.trainer]) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM,
                              "evaluation of step %llu: trainer %u reported %s",
                              (unsigned long long)view.head.step, view.head.trainer,
                              e ? "twice" : "while too many evaluations were open");
        return;
    }
    if (eval_take(e, &view) != EMBER_OK) {
        ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "evaluation of step %llu: out of memory",
                              (unsigned long long)view.head.step);
        return;
    }
    e->from[view.head.trainer] = 1;
    if (++e->reported == eval->trainers)
        eval_finish(eval, e);
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

ember_status_t master_eval_create(master_t *m)
{
    master_eval_t *eval = calloc(1, sizeof(*eval));
    if (!eval)
        return EMBER_ERR_NO_MEMORY;
    m->eval = eval;
    eval->m = m;
    eval->trainers = (uint32_t)m->tj->settings.trainers;
    for (int i = 0; i < EVALS_OPEN; i++) {
        if (!(eval->evals[i].from = calloc(eval->trainers, 1)))
            return EMBER_ERR_NO_MEMORY;
    }
    ember_rpc_register(ember_job_transport(m->job), TRAIN_OP_EVAL, on_eval, eval);
    return EMBER_OK;
}

void master_eval_destroy(master_t *m)
{
    master_eval_t *eval = m->eval;
    if (!eval)
        return;
    ember_rpc_register(ember_job_transport(m->job), TRAIN_OP_EVAL, NULL, NULL);
    for (int i = 0; i < EVALS_OPEN; i++) {
        free(eval->evals[i].from);
        free(eval->evals[i].logits);
        free(eval->evals[i].labels);
    }
    free(eval);
    m->eval = NULL;
}
