/*
 * ember: how a click model is judged: the exact ROC AUC of its scores
 * (every pair of a positive and a negative example, a tie counted half) and
 * the mean log loss of its logits.  Any thread; the buffers are borrowed
 * for the call; nothing blocks but for the work itself.
 */
#ifndef EMBER_METRICS_H
#define EMBER_METRICS_H

#include <ember/status.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The ROC AUC of @scores[n] against @labels[n] (0 or 1): the fraction of
 * (positive, negative) pairs the scores order correctly, ties half, in
 * O(n log n) with O(n) scratch.  Errors: ERR_INVALID_PARAM (a label other
 * than 0 or 1, a NaN score, or no positive or no negative example: the AUC
 * is undefined), ERR_NO_MEMORY.
 */
ember_status_t ember_roc_auc(const float *scores, const float *labels, size_t n, double *auc_p);
/* (*@auc_p, the caller's, is written on success only; nothing is logged.) */

/**
 * The mean binary cross-entropy of @logits[n] against @labels[n], as
 * PyTorch's BCEWithLogitsLoss computes it (max(x, 0) - x y + log1p(e^-|x|)),
 * in double.  0 for n == 0.
 */
double ember_log_loss(const float *logits, const float *labels, size_t n);

#ifdef __cplusplus
}
#endif
#endif
