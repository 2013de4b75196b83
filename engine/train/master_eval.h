/*
 * engine/train/master_eval: the master's side of DLRM's evaluations.  Each
 * trainer sends the logits of its share of the evaluation file after step S
 * (EMBER_OP_EVAL_REPORT); once every trainer's share of S is in, the exact
 * ROC AUC (ties counted half) and the mean log loss over all of them are
 * printed ("eval step S: auc A logloss L examples N") and written to the
 * metrics file as a JSON line.
 */
#ifndef EMBER_ENGINE_TRAIN_MASTER_EVAL_H
#define EMBER_ENGINE_TRAIN_MASTER_EVAL_H

#include <ember/transport.h>

#include <stdint.h>
#include <stdio.h>

typedef struct ember_master_eval ember_master_eval_t;

/** Take @trainers' reports over @tp (the handler registered until destroy);
 * @metrics (borrowed, may be NULL) gets a line per evaluation. */
ember_status_t ember_master_eval_create(ember_tp_t *tp, uint32_t trainers, FILE *metrics,
                                        ember_master_eval_t **eval_p);
void ember_master_eval_destroy(ember_master_eval_t *eval);

/** Evaluations completed so far, and the last one's AUC (NAN before any). */
uint64_t ember_master_eval_done(const ember_master_eval_t *eval, double *last_auc_p);

#endif
