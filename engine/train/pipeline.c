/* engine/train/pipeline: two steps' lookups in flight (see pipeline.h). */
#include "engine/train/pipeline.h"

#include <ember/log.h>

#include <stdlib.h>

typedef struct {
    ember_sparse_t *sparse;
    uint64_t step;
    int split; /* step's lookups built */
    int sent;  /* and in flight */
} slot_t;

struct ember_pipeline {
    slot_t slots[2];
    uint32_t staleness;
};

ember_status_t ember_pipeline_create(const ember_sparse_config_t *tables, size_t ntables,
                                     ember_tp_t *tp, const ember_trainer_dev_t *td, int rdma,
                                     const int *aborted, ember_pipeline_t **pipe_p)
{
    for (size_t k = 1; k < ntables; k++) {
        if (tables[k].staleness != tables[0].staleness) {
            ember_error("trainer", "tables %s and %s have staleness %u and %u: one a job",
                        tables[0].table_name, tables[k].table_name, tables[0].staleness,
                        tables[k].staleness);
            return EMBER_ERR_INVALID_PARAM;
        }
    }
    ember_pipeline_t *pipe = calloc(1, sizeof(*pipe));
    if (!pipe)
        return EMBER_ERR_NO_MEMORY;
    pipe->staleness = ntables ? tables[0].staleness : 0;
    for (int i = 0; i < 2; i++) {
        ember_status_t status =
                ember_sparse_create(tables, ntables, tp, td, rdma, aborted, &pipe->slots[i].sparse);
        if (status != EMBER_OK) {
            ember_pipeline_destroy(pipe);
            return status;
        }
    }
    *pipe_p = pipe;
    return EMBER_OK;
}

void ember_pipeline_destroy(ember_pipeline_t *pipe)
{
    if (!pipe)
        return;
    for (int i = 0; i < 2; i++)
        ember_sparse_destroy(pipe->slots[i].sparse);
    free(pipe);
}

uint32_t ember_pipeline_staleness(const ember_pipeline_t *pipe)
{
    return pipe->staleness;
}

static slot_t *slot_of(ember_pipeline_t *pipe, uint64_t step)
{
    return &pipe->slots[step % 2];
}

ember_sparse_t *ember_pipeline_sparse(ember_pipeline_t *pipe, uint64_t step)
{
    return slot_of(pipe, step)->sparse;
}

int ember_pipeline_is_split(const ember_pipeline_t *pipe, uint64_t step)
{
    const slot_t *slot = &pipe->slots[step % 2];
    return slot->split && slot->step == step;
}

ember_status_t ember_pipeline_split(ember_pipeline_t *pipe, const ember_sparse_input_t *tables,
                                    uint64_t step, char *err, size_t err_length)
{
    slot_t *slot = slot_of(pipe, step);
    if (slot->sent)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "the lookups of step %llu before step %llu's replies are in",
                                 (unsigned long long)step, (unsigned long long)slot->step);
    slot->split = 0;
    EMBER_CHECK(ember_sparse_split(slot->sparse, tables, step, 0, err, err_length));
    slot->step = step;
    slot->split = 1;
    return EMBER_OK;
}

ember_status_t ember_pipeline_send(ember_pipeline_t *pipe, uint64_t step, char *err,
                                   size_t err_length)
{
    slot_t *slot = slot_of(pipe, step);
    if (!ember_pipeline_is_split(pipe, step))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "the lookups of step %llu were not built",
                                 (unsigned long long)step);
    if (slot->sent)
        return EMBER_OK;
    /* The slot's buffers are reused: its last push (step - 2) must have left. */
    EMBER_CHECK(ember_sparse_pushes_wait(slot->sparse, step, err, err_length));
    EMBER_CHECK(ember_sparse_lookup_send(slot->sparse, err, err_length));
    slot->sent = 1;
    return EMBER_OK;
}

ember_status_t ember_pipeline_wait(ember_pipeline_t *pipe, uint64_t step, char *err,
                                   size_t err_length)
{
    slot_t *slot = slot_of(pipe, step);
    if (!ember_pipeline_is_split(pipe, step) || !slot->sent)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "the lookups of step %llu were not sent",
                                 (unsigned long long)step);
    slot->split = slot->sent = 0;
    return ember_sparse_lookup_wait(slot->sparse, err, err_length);
}

ember_status_t ember_pipeline_borrow(ember_pipeline_t *pipe, uint64_t step,
                                     ember_sparse_t **sparse_p, char *err, size_t err_length)
{
    slot_t *slot = slot_of(pipe, step);
    if (slot->sent)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "the lookups of step %llu are still in flight",
                                 (unsigned long long)slot->step);
    EMBER_CHECK(ember_sparse_pushes_wait(slot->sparse, step, err, err_length));
    slot->split = 0;
    *sparse_p = slot->sparse;
    return EMBER_OK;
}

ember_status_t ember_pipeline_pushes_wait(ember_pipeline_t *pipe, uint64_t step, char *err,
                                          size_t err_length)
{
    for (int i = 0; i < 2; i++)
        EMBER_CHECK(ember_sparse_pushes_wait(pipe->slots[i].sparse, step, err, err_length));
    return EMBER_OK;
}

ember_status_t ember_pipeline_flush(ember_pipeline_t *pipe, uint64_t step, char *err,
                                    size_t err_length)
{
    EMBER_CHECK(ember_pipeline_pushes_wait(pipe, step, err, err_length));
    /* Both slots push to the same PS: one fence each suffices. */
    return ember_sparse_pushes_taken(pipe->slots[0].sparse, step, err, err_length);
}

uint64_t ember_pipeline_staleness_seen(const ember_pipeline_t *pipe)
{
    uint64_t a = ember_sparse_staleness_seen(pipe->slots[0].sparse);
    uint64_t b = ember_sparse_staleness_seen(pipe->slots[1].sparse);
    return a > b ? a : b;
}
