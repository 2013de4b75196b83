/* engine/ops/metrics: ROC AUC and log loss (see metrics.h). */
#include "engine/ops/metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    float score;
    uint8_t positive;
} scored_t;

static int compare_scores(const void *a, const void *b)
{
    float x = ((const scored_t *)a)->score, y = ((const scored_t *)b)->score;
    return (x > y) - (x < y);
}

/* The labelled scores, checked; the positives' count in *positives_p. */
static ember_status_t take_scores(const float *scores, const float *labels, size_t n, scored_t *out,
                                  size_t *positives_p)
{
    size_t positives = 0;
    for (size_t i = 0; i < n; i++) {
        if ((labels[i] != 0.0f && labels[i] != 1.0f) || isnan(scores[i]))
            return EMBER_ERR_INVALID_PARAM;
        out[i] = (scored_t){.score = scores[i], .positive = labels[i] == 1.0f};
        positives += out[i].positive;
    }
    *positives_p = positives;
    return EMBER_OK;
}

ember_status_t ember_roc_auc(const float *scores, const float *labels, size_t n, double *auc_p)
{
    scored_t *sorted = malloc((n ? n : 1) * sizeof(*sorted));
    size_t positives;
    if (!sorted)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = take_scores(scores, labels, n, sorted, &positives);
    if (status != EMBER_OK || positives == 0 || positives == n) {
        free(sorted);
        return EMBER_ERR_INVALID_PARAM;
    }
    qsort(sorted, n, sizeof(*sorted), compare_scores);
    /* Each group of equal scores: its positives beat every negative below
     * it, and tie with its own negatives (half each). */
    double correct = 0, negatives_below = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i, pos = 0;
        while (j < n && sorted[j].score == sorted[i].score)
            pos += sorted[j++].positive;
        double neg = (double)(j - i - pos);
        correct += (double)pos * negatives_below + 0.5 * (double)pos * neg;
        negatives_below += neg;
        i = j;
    }
    free(sorted);
    *auc_p = correct / ((double)positives * (double)(n - positives));
    return EMBER_OK;
}

double ember_log_loss(const float *logits, const float *labels, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        double x = logits[i], y = labels[i];
        sum += (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
    }
    return n ? sum / (double)n : 0.0;
}
