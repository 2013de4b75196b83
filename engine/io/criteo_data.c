/* engine/io/criteo_data: a trainer's Criteo stream, <ember/data.h>'s
 * stream under Criteo's preset schema (see criteo_data.h). */
#include "engine/io/criteo_data.h"

#include <ember/data.h>
#include <ember/log.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The Criteo stream is the schema's stream itself: its batches one id a
 * bag, so feature f's ids lie at values + f * n. */
struct ember_criteo_data {
    ember_data_t *data;
};

static ember_status_t check_config(const ember_criteo_data_config_t *c, char *err,
                                   size_t err_length)
{
    if (!c->source || !c->rows)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "Criteo data: no %s",
                                 c->source ? "table rows" : "source");
    if (c->trainers == 0 || c->trainer >= c->trainers)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: trainer %" PRIu32 " of %" PRIu32, c->trainer,
                                 c->trainers);
    if (c->batch == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: a batch of 0 examples");
    if (c->hold > EMBER_CRITEO_HOLD_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: hold %" PRIu32 " (at most %d batches)", c->hold,
                                 EMBER_CRITEO_HOLD_MAX);
    if (c->read_ahead > EMBER_CRITEO_READ_AHEAD_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "Criteo data: read_ahead %" PRIu32 " (at most %d batches)",
                                 c->read_ahead, EMBER_CRITEO_READ_AHEAD_MAX);
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++)
        if (c->rows[f] < 1)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "Criteo data: feature C%zu's table has %lld rows", f + 1,
                                     (long long)c->rows[f]);
    return EMBER_OK;
}

ember_status_t ember_criteo_data_open(const ember_criteo_data_config_t *config,
                                      ember_criteo_data_t **data_p, char *err, size_t err_length)
{
    ember_schema_t *schema;
    EMBER_CHECK(check_config(config, err, err_length));
    ember_criteo_data_t *d = calloc(1, sizeof(*d));
    if (!d)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    ember_status_t status = ember_schema_criteo(config->rows, &schema, err, err_length);
    if (status != EMBER_OK) {
        free(d);
        return status;
    }
    ember_data_config_t c = {.source = config->source,
                             .schema = schema,
                             .trainer = config->trainer,
                             .trainers = config->trainers,
                             .batch = config->batch,
                             .eval = config->eval,
                             .read_ahead = config->read_ahead,
                             .hold = config->hold};
    status = ember_data_open(&c, &d->data, err, err_length);
    ember_schema_free(schema);
    if (status != EMBER_OK) {
        free(d);
        return status;
    }
    *data_p = d;
    return EMBER_OK;
}

/* The schema's batch as Criteo's: one id a bag, feature f's at f * n. */
static void as_criteo(const ember_data_batch_t *b, ember_criteo_batch_t *batch_p)
{
    batch_p->n = b->n;
    batch_p->labels = b->labels;
    batch_p->dense = b->dense;
    for (size_t f = 0; f < EMBER_CRITEO_SPARSE; f++)
        batch_p->sparse[f] = b->kjt.values + f * b->n;
    batch_p->first_example = b->first_example;
}

ember_status_t ember_criteo_data_take(ember_criteo_data_t *d, ember_criteo_batch_t *batch_p,
                                      char *err, size_t err_length)
{
    ember_data_batch_t b;
    EMBER_CHECK(ember_data_take(d->data, &b, err, err_length));
    as_criteo(&b, batch_p);
    return EMBER_OK;
}

ember_status_t ember_criteo_data_release(ember_criteo_data_t *d)
{
    return ember_data_release(d->data);
}

ember_status_t ember_criteo_data_next(ember_criteo_data_t *d, ember_criteo_batch_t *batch_p,
                                      char *err, size_t err_length)
{
    ember_data_batch_t b;
    EMBER_CHECK(ember_data_next(d->data, &b, err, err_length));
    as_criteo(&b, batch_p);
    return EMBER_OK;
}

void ember_criteo_data_close(ember_criteo_data_t *d)
{
    if (!d)
        return;
    ember_data_close(d->data);
    free(d);
}
