/* tools/ember-train/messages: ember-train's messages, packed and checked
 * (see messages.h). */
#include "tools/ember-train/messages.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t zeros[8];

static size_t pad8(size_t n)
{
    return (8 - n % 8) % 8;
}

size_t train_start_pack(train_msg_start_t *head, const char *const texts[4], const float *params,
                        ember_iov_t *iov)
{
    size_t n = 0;
    head->version = TRAIN_START_VERSION;
    iov[n++] = (ember_iov_t){head, sizeof(*head)};
    for (int k = 0; k < 4; k++) {
        const size_t bytes = strlen(texts[k]);
        head->bytes[k] = (uint32_t)bytes;
        iov[n++] = (ember_iov_t){texts[k], bytes};
        iov[n++] = (ember_iov_t){zeros, pad8(bytes)};
    }
    iov[n++] = (ember_iov_t){params, (size_t)head->nparams * sizeof(float)};
    return n;
}

void train_start_free(train_start_t *start)
{
    free(start->settings);
    free(start->config);
    free(start->root);
    free(start->resume);
    start->settings = start->config = start->root = start->resume = NULL;
}

/* Text @k of @start's body at *@at: checked (its length, no NUL inside,
 * its padding there), copied NUL-terminated. */
static ember_status_t take_text(const uint8_t *data, size_t length, size_t *at, uint32_t bytes,
                                char **out, const char *what, char *err, size_t err_length)
{
    const size_t need = (size_t)bytes + pad8(bytes);
    if (bytes > TRAIN_TEXT_MAX || length - *at < need || memchr(data + *at, '\0', bytes))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "TRAIN_START: its %s (%u bytes) does not fit the %zu received",
                                 what, bytes, length);
    if (!(*out = malloc((size_t)bytes + 1)))
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    memcpy(*out, data + *at, bytes);
    (*out)[bytes] = '\0';
    *at += need;
    return EMBER_OK;
}

ember_status_t train_start_unpack(const void *data, size_t length, uint32_t trainer,
                                  uint32_t trainers, uint32_t num_ps, train_start_t *start,
                                  char *err, size_t err_length)
{
    static const char *const what[4] = {"settings", "model's description", "checkpoint root",
                                        "checkpoint resumed"};
    char **texts[4] = {&start->settings, &start->config, &start->root, &start->resume};
    const uint8_t *bytes = data;
    size_t at = sizeof(start->head);
    memset(start, 0, sizeof(*start));
    if (!data || length < sizeof(start->head))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE, "TRAIN_START of %zu bytes",
                                 length);
    memcpy(&start->head, data, sizeof(start->head));
    const train_msg_start_t *h = &start->head;
    if (h->version != TRAIN_START_VERSION)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "TRAIN_START version %u, this ember-train's is %d", h->version,
                                 TRAIN_START_VERSION);
    if (h->trainer != trainer || h->trainers != trainers || h->num_ps != num_ps)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "trainer%u: TRAIN_START for trainer %u of %u with %u PS (this "
                                 "job: %u trainers, %u PS)",
                                 trainer, h->trainer, h->trainers, h->num_ps, trainers, num_ps);
    for (int k = 0; k < 4; k++) {
        ember_status_t status =
                take_text(bytes, length, &at, h->bytes[k], texts[k], what[k], err, err_length);
        if (status != EMBER_OK) {
            train_start_free(start);
            return status;
        }
    }
    if (h->bytes[2] >= TRAIN_DIR_MAX || h->bytes[3] >= TRAIN_DIR_MAX ||
        h->nparams != (length - at) / sizeof(float) || (length - at) % sizeof(float) != 0) {
        train_start_free(start);
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "TRAIN_START: %llu parameters (and directories of %u and %u "
                                 "bytes) in %zu bytes",
                                 (unsigned long long)h->nparams, h->bytes[2], h->bytes[3], length);
    }
    const uint64_t *report = h->report_at;
    if ((report[0] || report[1]) && !(h->start_step < report[0] && report[0] < report[1])) {
        train_start_free(start);
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "TRAIN_START: progress reports after steps %llu and %llu of a job "
                                 "starting at %llu",
                                 (unsigned long long)report[0], (unsigned long long)report[1],
                                 (unsigned long long)h->start_step);
    }
    start->params = bytes + at;
    return EMBER_OK;
}

const char *const train_phase_names[TRAIN_PHASES] = {"data",     "lookup", "lookup wait", "forward",
                                                     "backward", "push",   "dense step",  "other"};

ember_status_t train_done_unpack(const void *data, size_t length, uint64_t nparams, int trainer,
                                 train_done_t *done, char *err, size_t err_length)
{
    const size_t head = sizeof(done->head);
    if (!data || length < head || nparams > (length - head) / sizeof(float))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "trainer%d sent a malformed report", trainer);
    memcpy(&done->head, data, head);
    const size_t rest = length - head - (size_t)nparams * sizeof(float);
    if (rest % sizeof(float) != 0 || done->head.steps != rest / sizeof(float))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "trainer%d sent a malformed report", trainer);
    for (int p = 0; p < TRAIN_PHASES; p++)
        if (!(done->head.phase_seconds[p] >= 0.0 && done->head.phase_seconds[p] < 1e12))
            return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                     "trainer%d reported %g s of %s", trainer,
                                     done->head.phase_seconds[p], train_phase_names[p]);
    done->losses = (const uint8_t *)data + head;
    done->params = done->losses + rest;
    return EMBER_OK;
}

ember_status_t train_epoch_unpack(const void *data, size_t length, uint32_t trainers,
                                  uint32_t epochs, train_msg_epoch_t *epoch, char *err,
                                  size_t err_length)
{
    train_msg_epoch_t taken;
    if (!data || length != sizeof(taken))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "an epoch report of %zu bytes, not %zu", length, sizeof(taken));
    memcpy(&taken, data, sizeof(taken));
    if (taken.trainer >= trainers || taken.epoch >= epochs)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "epoch report for trainer %u epoch %u", taken.trainer,
                                 taken.epoch);
    *epoch = taken;
    return EMBER_OK;
}

ember_status_t train_progress_unpack(const void *data, size_t length, uint32_t trainers,
                                     uint32_t epochs, train_msg_progress_t *progress, char *err,
                                     size_t err_length)
{
    train_msg_progress_t p;
    if (!data || length != sizeof(p))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "a progress report of %zu bytes, not %zu", length, sizeof(p));
    memcpy(&p, data, sizeof(p));
    if (p.trainer >= trainers)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "a progress report of trainer %u of %u", p.trainer, trainers);
    if (p.epoch >= epochs || p.epoch_steps == 0 || p.epoch_steps > p.steps ||
        (p.epoch_size && p.epoch_steps > p.epoch_size) || !isfinite(p.loss_sum))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "trainer%u's progress report: epoch %u of %u, step %llu of the "
                                 "job, %llu of an epoch of %llu, loss sum %g",
                                 p.trainer, p.epoch, epochs, (unsigned long long)p.steps,
                                 (unsigned long long)p.epoch_steps,
                                 (unsigned long long)p.epoch_size, p.loss_sum);
    *progress = p;
    return EMBER_OK;
}

ember_status_t train_progress_next(const void *data, size_t length, int trainer, uint64_t known,
                                   uint64_t *next_p, char *err, size_t err_length)
{
    uint64_t next = 0;
    if (data && length == sizeof(next))
        memcpy(&next, data, sizeof(next));
    if (!data || length != sizeof(next) || (next && next <= known))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "trainer %d: the master's answer to a progress report (%zu bytes) "
                                 "names step %llu, not one after %llu",
                                 trainer, length, (unsigned long long)next,
                                 (unsigned long long)known);
    *next_p = next;
    return EMBER_OK;
}

ember_status_t train_eval_unpack(const void *data, size_t length, uint32_t trainers,
                                 train_eval_t *eval, char *err, size_t err_length)
{
    const size_t head = sizeof(eval->head);
    if (!data || length < head)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "an evaluation report of %zu bytes", length);
    memcpy(&eval->head, data, head);
    const size_t body = length - head;
    /* count is a forger's: 8 bytes an example, checked by division */
    if (eval->head.trainer >= trainers || body % 8 != 0 || eval->head.count != body / 8)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "evaluation report of trainer %u: %llu examples in %zu bytes",
                                 eval->head.trainer, (unsigned long long)eval->head.count, body);
    eval->logits = (const uint8_t *)data + head;
    eval->labels = eval->logits + eval->head.count * 4;
    return EMBER_OK;
}

float train_load_f32(const uint8_t *bytes, size_t i)
{
    float v;
    memcpy(&v, bytes + i * sizeof(float), sizeof(v));
    return v;
}
