/* engine/ps/ps_multi: a LOOKUPS or a GRADS over a PS's tables, all or
 * nothing (see ps_multi.h). */
#include "engine/ps/ps_multi.h"

#include "engine/ps/ps_msg.h"

#include <ember/log.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

ember_status_t ps_multi_lookups_ready(ember_table_t *const *tables,
                                      const ember_wire_lookups_view_t *view, int *ready_p,
                                      char *err, size_t err_length)
{
    const uint64_t step = view->head.step;
    /* An evaluation sees the tables exactly as @step steps left them. */
    const int eval = view->head.count > 0 && (view->lookups[0].head.flags & EMBER_LOOKUP_EVAL);
    int ready = 1;
    for (size_t k = 0; k < view->head.count; k++) {
        if (!ember_table_is_sync(tables[k]))
            continue;
        uint64_t next = ember_table_next_step(tables[k]);
        uint64_t behind = eval ? 0 : ember_table_staleness(tables[k]);
        if (step < next)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table %s: trainer %u step %llu: that step is already "
                                     "applied (next is %llu)",
                                     ember_table_name(tables[k]), view->head.trainer,
                                     (unsigned long long)step, (unsigned long long)next);
        if (step - next > behind)
            ready = 0; /* a later table may still be past it: look on */
    }
    *ready_p = ready;
    return EMBER_OK;
}

size_t ps_multi_lookups_out_bytes(ember_table_t *const *tables,
                                  const ember_wire_lookups_view_t *view, int versions,
                                  size_t *reply_bytes_p)
{
    size_t at = 0, reach = 0;
    for (size_t k = 0; k < view->head.count; k++) {
        const ember_msg_lookup_t *head = &view->lookups[k].head;
        const uint32_t dim = ember_table_dim(tables[k]);
        size_t pooled = at + ps_msg_lookup_out_bytes(head, dim);
        if (pooled > reach)
            reach = pooled;
        at += versions ? (size_t)ember_wire_lookups_part_bytes(head, dim)
                       : (size_t)ember_wire_pad(ember_wire_lookup_reply_bytes(head, dim));
    }
    *reply_bytes_p = at;
    return reach > at ? reach : at;
}

/* A refusal of lookup @failed: the contexts the tables before it kept go,
 * as if the request never came (each was closed before: a lookup over an
 * open context is refused). */
static void lookups_undo(ember_table_t *const *tables, const ember_wire_lookups_view_t *view,
                         size_t failed)
{
    for (size_t k = 0; k < failed; k++) {
        if (!(view->lookups[k].head.flags & EMBER_LOOKUP_EVAL))
            ember_table_drop_lookup(tables[k], view->head.trainer, view->head.step);
    }
}

ember_status_t ps_multi_lookups(ember_table_t *const *tables, const ember_wire_lookups_view_t *view,
                                int versions, void *out, size_t *reply_bytes_p, char *err,
                                size_t err_length)
{
    uint8_t *reply = out;
    size_t at = 0;
    for (size_t k = 0; k < view->head.count; k++) {
        const ember_wire_lookup_view_t *lookup = &view->lookups[k];
        const uint32_t dim = ember_table_dim(tables[k]);
        ember_status_t status =
                ember_table_lookup(tables[k], lookup, (float *)(reply + at), err, err_length);
        if (status != EMBER_OK) {
            lookups_undo(tables, view, k);
            return status;
        }
        size_t bytes = ps_msg_lookup_reply_finish(&lookup->head, dim, (float *)(reply + at));
        size_t padded = (size_t)ember_wire_pad(bytes);
        memset(reply + at + bytes, 0, padded - bytes);
        /* The version: what the lookup saw (the readiness check let it be
         * served at most the table's staleness behind its step). */
        const uint64_t version = ember_table_next_step(tables[k]);
        if (versions)
            memcpy(reply + at + padded, &version, sizeof(version));
        at += padded + (versions ? sizeof(version) : 0);
    }
    *reply_bytes_p = at;
    return EMBER_OK;
}

ember_status_t ps_multi_grads(ember_table_t *const *tables, const ember_wire_grad_view_t *grads,
                              size_t count, int *applied_p, char *err, size_t err_length)
{
    for (size_t k = 0; k < count; k++) {
        applied_p[k] = 0;
        EMBER_CHECK(ember_table_grad_check(tables[k], &grads[k], err, err_length));
    }
    for (size_t k = 0; k < count; k++)
        EMBER_CHECK(ember_table_grad_reserve(tables[k], &grads[k], err, err_length));
    for (size_t k = 0; k < count; k++) {
        ember_status_t status =
                ember_table_grad_apply(tables[k], &grads[k], &applied_p[k], err, err_length);
        if (status != EMBER_OK) {
            if (k > 0 && err_length > 0) { /* the step itself failed: say what went in */
                size_t used = strlen(err);
                snprintf(err + used, err_length - used,
                         " (the %zu tables before it in this push were applied)", k);
            }
            return status;
        }
    }
    return EMBER_OK;
}
