/* ember engine: cross entropy and BCE-with-logits (mean reduction). */
#include "engine/ops/loss.h"

#include "engine/ops/dlrm_math.h"

#include <ember/log.h>

#include <inttypes.h>
#include <math.h>

ember_status_t ember_cross_entropy(const float *logits, size_t batch, size_t classes,
                                   const int64_t *targets, float *loss_p, float *grad_p)
{
    double total = 0.0;

    if (!logits || !targets || !loss_p || batch == 0 || classes == 0) {
        ember_error("loss",
                    "cross entropy: invalid arguments (batch %zu, "
                    "classes %zu)",
                    batch, classes);
        return EMBER_ERR_INVALID_PARAM;
    }
    /* Check every target first so that nothing is written on error. */
    for (size_t r = 0; r < batch; r++) {
        if (targets[r] < 0 || (uint64_t)targets[r] >= classes) {
            ember_error("loss",
                        "cross entropy: target %" PRId64 " at position "
                        "%zu is out of range [0, %zu)",
                        targets[r], r, classes);
            return EMBER_ERR_OUT_OF_RANGE;
        }
    }
    for (size_t r = 0; r < batch; r++) {
        const float *z = logits + r * classes;
        double zmax = z[0], sum = 0.0;
        /* log-softmax shifted by the max so exp never overflows. */
        for (size_t c = 1; c < classes; c++)
            zmax = z[c] > zmax ? z[c] : zmax;
        for (size_t c = 0; c < classes; c++)
            sum += exp((double)z[c] - zmax);
        double lse = zmax + log(sum);
        total += lse - (double)z[targets[r]];
    }
    double loss = total / (double)batch;
    if (!isfinite(loss)) {
        ember_error("loss", "cross entropy is not finite (%g)", loss);
        return EMBER_ERR_NUMERIC;
    }
    if (grad_p) {
        const double inv = 1.0 / (double)batch;
        for (size_t r = 0; r < batch; r++) {
            const float *z = logits + r * classes;
            float *g = grad_p + r * classes;
            double zmax = z[0], sum = 0.0;
            for (size_t c = 1; c < classes; c++)
                zmax = z[c] > zmax ? z[c] : zmax;
            for (size_t c = 0; c < classes; c++)
                sum += exp((double)z[c] - zmax);
            /* Read z[c] before writing g[c]: grad_p may alias logits. */
            for (size_t c = 0; c < classes; c++) {
                double p = exp((double)z[c] - zmax) / sum;
                double onehot = (int64_t)c == targets[r] ? 1.0 : 0.0;
                g[c] = (float)((p - onehot) * inv);
            }
        }
    }
    *loss_p = (float)loss;
    return EMBER_OK;
}

ember_status_t ember_bce_with_logits(const float *logits, const float *targets, size_t n,
                                     float *loss_p, float *grad_p)
{
    double total = 0.0;

    if (!logits || !targets || !loss_p || n == 0) {
        ember_error("loss", "bce: invalid arguments (n %zu)", n);
        return EMBER_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < n; i++) {
        total += ember_dlrm_bce_term(logits[i], targets[i]);
    }
    double loss = total / (double)n;
    if (!isfinite(loss)) {
        ember_error("loss", "bce with logits is not finite (%g)", loss);
        return EMBER_ERR_NUMERIC;
    }
    if (grad_p) {
        for (size_t i = 0; i < n; i++)
            grad_p[i] = ember_dlrm_bce_grad(logits[i], targets[i], (double)n);
    }
    *loss_p = (float)loss;
    return EMBER_OK;
}
