/* engine/ps/ps_multi: a LOOKUPS or a GRADS over a PS's tables, all or
 * nothing (see ps_multi.h). */
#include "engine/ps/ps_multi.h"

#include "common/workers.h"

#include <ember/log.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

ember_status_t ps_multi_lookups_ready(ember_shard_t *const *tables,
                                      const ember_wire_lookups_view_t *view, int *ready_p,
                                      char *err, size_t err_length)
{
    const uint64_t step = view->head.step;
    /* An evaluation sees the tables exactly as @step steps left them. */
    const int eval = view->head.count > 0 && (view->lookups[0].head.flags & EMBER_LOOKUP_EVAL);
    int ready = 1;
    for (size_t k = 0; k < view->head.count; k++) {
        if (!ember_shard_is_sync(tables[k]))
            continue;
        uint64_t next = ember_shard_next_step(tables[k]);
        uint64_t behind = eval ? 0 : ember_shard_staleness(tables[k]);
        if (step < next)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table %s: trainer %u step %llu: that step is already "
                                     "applied (next is %llu)",
                                     ember_shard_name(tables[k]), view->head.trainer,
                                     (unsigned long long)step, (unsigned long long)next);
        if (step - next > behind)
            ready = 0; /* a later table may still be past it: look on */
    }
    *ready_p = ready;
    return EMBER_OK;
}

/* Lookup @k's reply layout, for its table's dim (engine/wire/codec). */
static ember_wire_reply_layout_t reply_layout(ember_shard_t *const *tables,
                                              const ember_wire_lookups_view_t *view, size_t k)
{
    ember_wire_reply_layout_t layout;
    const ember_msg_lookup_t *head = &view->lookups[k].head;
    ember_wire_reply_layout(head->flags, head->bags, ember_shard_dim(tables[k]), &layout);
    return layout;
}

/* A table's room in the reply: its part (with the version), or its reply
 * padded (a single LOOKUP's values have no version behind them). */
static size_t reply_room(const ember_wire_reply_layout_t *layout, int versions)
{
    return (size_t)(versions ? layout->part_bytes : layout->version);
}

/* A cached lookup's (EMBER_LOOKUP_ROWS) most room: every row's values. */
static int is_rows(const ember_wire_lookup_view_t *lookup)
{
    return (lookup->head.flags & EMBER_LOOKUP_ROWS) != 0;
}

static size_t rows_room(ember_shard_t *const *tables, const ember_wire_lookups_view_t *view,
                        size_t k)
{
    const ember_msg_lookup_t *head = &view->lookups[k].head;
    return (size_t)ember_wire_rows_reply_bytes(head->unique, ember_shard_dim(tables[k]),
                                               head->unique);
}

size_t ps_multi_lookups_out_bytes(ember_shard_t *const *tables,
                                  const ember_wire_lookups_view_t *view, int versions,
                                  size_t *reply_bytes_p)
{
    size_t at = 0, reach = 0;
    for (size_t k = 0; k < view->head.count; k++) {
        if (is_rows(&view->lookups[k])) { /* written where it lies, no more than its room */
            at += rows_room(tables, view, k);
            continue;
        }
        const ember_wire_reply_layout_t layout = reply_layout(tables, view, k);
        size_t pooled = at + (size_t)layout.pooled_bytes;
        if (pooled > reach)
            reach = pooled;
        at += reply_room(&layout, versions);
    }
    *reply_bytes_p = at;
    return reach > at ? reach : at;
}

/* A refusal of lookup @failed: the contexts the tables before it kept go,
 * as if the request never came (each was closed before: a lookup over an
 * open context is refused). */
static void lookups_undo(ember_shard_t *const *tables, const ember_wire_lookups_view_t *view,
                         size_t failed)
{
    for (size_t k = 0; k < failed; k++) {
        if (!(view->lookups[k].head.flags & EMBER_LOOKUP_EVAL))
            ember_shard_drop_lookup(tables[k], view->head.trainer, view->head.step);
    }
}

/* One table's lookup of a LOOKUPS into its place in the reply, made the
 * reply the codec lays out: padded and, with @versions, followed by the
 * version (what the lookup saw: the readiness check let it be served at
 * most the table's staleness behind its step); its room in *room_p.  A
 * cached lookup's part is as long as its fresh rows make it. */
static ember_status_t lookup_one(ember_shard_t *table, const ember_wire_lookup_view_t *lookup,
                                 int versions, uint8_t *reply, size_t *room_p, char *err,
                                 size_t err_length)
{
    if (is_rows(lookup)) {
        ember_msg_rows_reply_t head;
        if (!versions)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table %s: trainer %u step %llu: a cached lookup (rows) "
                                     "comes in a LOOKUPS, not alone",
                                     ember_shard_name(table), lookup->head.trainer,
                                     (unsigned long long)lookup->head.step);
        EMBER_CHECK(ember_shard_lookup(table, lookup, (float *)reply, err, err_length));
        memcpy(&head, reply, sizeof(head));
        *room_p = (size_t)ember_wire_rows_reply_bytes(lookup->head.unique, ember_shard_dim(table),
                                                      head.fresh);
        return EMBER_OK;
    }
    ember_wire_reply_layout_t layout;
    ember_wire_reply_layout(lookup->head.flags, lookup->head.bags, ember_shard_dim(table), &layout);
    EMBER_CHECK(ember_shard_lookup(table, lookup, (float *)reply, err, err_length));
    ember_wire_reply_finish(&layout, reply);
    if (versions)
        ember_wire_reply_put_version(&layout, reply, ember_shard_next_step(table));
    *room_p = reply_room(&layout, versions);
    return EMBER_OK;
}

/* A LOOKUPS split over tables: each table's lookup a task of its own. */
typedef struct {
    ember_shard_t *const *tables;
    const ember_wire_lookups_view_t *view;
    uint8_t *reply;
    int versions; /* each table's reply followed by its version */
    size_t at[EMBER_WIRE_MAX_TABLES];
    ember_status_t status[EMBER_WIRE_MAX_TABLES];
    char err[EMBER_WIRE_MAX_TABLES][256];
} by_table_t;

static void lookup_task(void *arg, unsigned k)
{
    by_table_t *job = arg;
    size_t room;
    job->status[k] = lookup_one(job->tables[k], &job->view->lookups[k], job->versions,
                                job->reply + job->at[k], &room, job->err[k], sizeof(job->err[k]));
}

/* Whether the tables' lookups go one a task: several tables on one pool,
 * each too small to split itself (a table's pooling that reaches past its
 * reply, fp16 replies, would write into the next table's: not then).
 * Each table's place in the reply goes into @job. */
static int split_by_table(by_table_t *job)
{
    const ember_wire_lookups_view_t *view = job->view;
    ember_workers_t *pool = ember_shard_workers(job->tables[0]);
    size_t at = 0;
    if (view->head.count < 2 || ember_workers_threads(pool) < 2)
        return 0;
    for (size_t k = 0; k < view->head.count; k++) {
        const ember_wire_reply_layout_t layout = reply_layout(job->tables, view, k);
        if (is_rows(&view->lookups[k])) /* its part's size is known once it is made */
            return 0;
        if (ember_shard_workers(job->tables[k]) != pool ||
            ember_shard_lookup_tasks(job->tables[k], &view->lookups[k].head) > 1 ||
            layout.pooled_bytes > layout.version)
            return 0;
        job->at[k] = at;
        at += reply_room(&layout, job->versions);
    }
    return 1;
}

/* Every table's lookup at once; all or nothing as one after another is:
 * the first refusal in the request's order is told, and the contexts the
 * others kept are dropped. */
static ember_status_t lookups_by_table(by_table_t *job, size_t *reply_bytes_p, char *err,
                                       size_t err_length)
{
    const ember_wire_lookups_view_t *view = job->view;
    const size_t count = view->head.count;
    ember_workers_run(ember_shard_workers(job->tables[0]), (unsigned)count, lookup_task, job);
    size_t failed = count;
    for (size_t k = 0; k < count && failed == count; k++)
        if (job->status[k] != EMBER_OK)
            failed = k;
    if (failed == count) {
        const ember_wire_reply_layout_t last = reply_layout(job->tables, view, count - 1);
        *reply_bytes_p = job->at[count - 1] + reply_room(&last, job->versions);
        return EMBER_OK;
    }
    for (size_t k = 0; k < count; k++) {
        if (job->status[k] == EMBER_OK && !(view->lookups[k].head.flags & EMBER_LOOKUP_EVAL))
            ember_shard_drop_lookup(job->tables[k], view->head.trainer, view->head.step);
    }
    snprintf(err, err_length, "%s", job->err[failed]);
    return job->status[failed];
}

ember_status_t ps_multi_lookups(ember_shard_t *const *tables, const ember_wire_lookups_view_t *view,
                                int versions, void *out, size_t *reply_bytes_p, char *err,
                                size_t err_length)
{
    /* The split's bookkeeping, kept between calls (a step allocates
     * nothing); one call at a time per thread. */
    static __thread by_table_t job;
    uint8_t *reply = out;
    size_t at = 0;
    job.tables = tables;
    job.view = view;
    job.reply = reply;
    job.versions = versions;
    if (split_by_table(&job))
        return lookups_by_table(&job, reply_bytes_p, err, err_length);
    for (size_t k = 0; k < view->head.count; k++) {
        size_t room;
        ember_status_t status = lookup_one(tables[k], &view->lookups[k], versions, reply + at,
                                           &room, err, err_length);
        if (status != EMBER_OK) {
            lookups_undo(tables, view, k);
            return status;
        }
        at += room;
    }
    *reply_bytes_p = at;
    return EMBER_OK;
}

ember_status_t ps_multi_grads(ember_shard_t *const *tables, const ember_wire_grad_view_t *grads,
                              size_t count, int *applied_p, char *err, size_t err_length)
{
    for (size_t k = 0; k < count; k++) {
        applied_p[k] = 0;
        EMBER_CHECK(ember_shard_grad_check(tables[k], &grads[k], err, err_length));
    }
    for (size_t k = 0; k < count; k++)
        EMBER_CHECK(ember_shard_grad_reserve(tables[k], &grads[k], err, err_length));
    for (size_t k = 0; k < count; k++) {
        ember_status_t status =
                ember_shard_grad_apply(tables[k], &grads[k], &applied_p[k], err, err_length);
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
