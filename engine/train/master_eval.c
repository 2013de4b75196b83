/* engine/train/master_eval: the evaluations' reports, gathered and scored
 * (see master_eval.h). */
#include "engine/train/master_eval.h"

#include "common/reserve.h"
#include "engine/ops/metrics.h"
#include "engine/wire/codec.h"

#include <ember/log.h>

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
    size_t count, capacity_logits, capacity_labels;
} open_eval_t;

struct ember_master_eval {
    ember_tp_t *tp;
    uint32_t trainers;
    FILE *metrics;
    open_eval_t evals[EVALS_OPEN];
    uint64_t done;
    double last_auc;
};

static open_eval_t *eval_slot(ember_master_eval_t *eval, uint64_t step)
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
static void eval_finish(ember_master_eval_t *eval, open_eval_t *e)
{
    double auc = NAN;
    if (ember_roc_auc(e->logits, e->labels, e->count, &auc) != EMBER_OK)
        auc = NAN; /* one class only: no AUC */
    double logloss = ember_log_loss(e->logits, e->labels, e->count);
    printf("eval step %llu: auc %.6f logloss %.6f examples %zu\n", (unsigned long long)e->step, auc,
           logloss, e->count);
    fflush(stdout);
    if (eval->metrics) {
        fprintf(eval->metrics,
                "{\"eval_step\": %llu, \"auc\": %.9f, \"logloss\": %.9f, \"examples\": %zu}\n",
                (unsigned long long)e->step, auc, logloss, e->count);
        fflush(eval->metrics);
    }
    eval->done++;
    eval->last_auc = auc;
    e->open = 0;
}

/* Append a report's logits and labels to its evaluation. */
static ember_status_t eval_take(open_eval_t *e, const ember_wire_eval_report_view_t *view)
{
    const size_t n = (size_t)view->head.count, total = e->count + n;
    if (!EMBER_RESERVE(e->logits, e->capacity_logits, total + 1) ||
        !EMBER_RESERVE(e->labels, e->capacity_labels, total + 1))
        return EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        e->logits[e->count + i] = ember_wire_load_f32(view->logits, i);
        e->labels[e->count + i] = ember_wire_load_f32(view->labels, i);
    }
    e->count = total;
    return EMBER_OK;
}

static void on_eval_report(ember_rpc_req_t *req, void *arg)
{
    ember_master_eval_t *eval = arg;
    ember_wire_eval_report_view_t view;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    char err[160];
    ember_status_t status =
            ember_wire_eval_report_unpack(data, length, eval->trainers, &view, err, sizeof(err));
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
    status = eval_take(e, &view);
    if (status != EMBER_OK) {
        ember_rpc_reply_error(req, status, "evaluation of step %llu: out of memory",
                              (unsigned long long)view.head.step);
        return;
    }
    e->from[view.head.trainer] = 1;
    if (++e->reported == eval->trainers)
        eval_finish(eval, e);
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

ember_status_t ember_master_eval_create(ember_tp_t *tp, uint32_t trainers, FILE *metrics,
                                        ember_master_eval_t **eval_p)
{
    ember_master_eval_t *eval = calloc(1, sizeof(*eval));
    if (!eval)
        return EMBER_ERR_NO_MEMORY;
    *eval = (ember_master_eval_t){
            .tp = tp, .trainers = trainers, .metrics = metrics, .last_auc = NAN};
    for (int i = 0; i < EVALS_OPEN; i++) {
        if (!(eval->evals[i].from = calloc(trainers, 1))) {
            ember_master_eval_destroy(eval);
            return EMBER_ERR_NO_MEMORY;
        }
    }
    ember_rpc_register(tp, EMBER_OP_EVAL_REPORT, on_eval_report, eval);
    *eval_p = eval;
    return EMBER_OK;
}

void ember_master_eval_destroy(ember_master_eval_t *eval)
{
    if (!eval)
        return;
    ember_rpc_register(eval->tp, EMBER_OP_EVAL_REPORT, NULL, NULL);
    for (int i = 0; i < EVALS_OPEN; i++) {
        free(eval->evals[i].from);
        free(eval->evals[i].logits);
        free(eval->evals[i].labels);
    }
    free(eval);
}

uint64_t ember_master_eval_done(const ember_master_eval_t *eval, double *last_auc_p)
{
    if (last_auc_p)
        *last_auc_p = eval ? eval->last_auc : NAN;
    return eval ? eval->done : 0;
}
