/* engine/ps/table_work: a host shard's compute over the PS's worker threads. */
#include "engine/ps/table_work.h"

#include "common/search.h"
#include "common/workers.h"
#include "engine/ps/table_cow.h"
#include "engine/wire/codec.h"
#include "engine/wire/protocol.h"

#include <ember/config.h>
#include <ember/log.h>

#include <stdlib.h>
#include <string.h>

static unsigned work_tasks(const ember_shard_t *table, size_t work)
{
    return ember_workers_tasks(table->workers, work, table->grain);
}

static void tasks_free(table_task_t *tasks, unsigned count)
{
    for (unsigned k = 0; tasks && k < count; k++) {
        ember_buffer_free(&tasks[k].seen);
        ember_buffer_free(&tasks[k].first);
        ember_buffer_free(&tasks[k].row);
        ember_buffer_free(&tasks[k].cursor);
    }
    free(tasks);
}

ember_status_t table_work_init(ember_shard_t *table, ember_workers_t *workers)
{
    const unsigned count = ember_workers_threads(workers);
    table_task_t *tasks = calloc(count, sizeof(*tasks));
    if (!tasks)
        return EMBER_ERR_NO_MEMORY;
    for (unsigned k = 0; k < count; k++) {
        if (!ember_buffer_reserve(&tasks[k].row, table->spec.dim * sizeof(float) + 4)) {
            tasks_free(tasks, count);
            return EMBER_ERR_NO_MEMORY;
        }
    }
    tasks_free(table->tasks, table->ntasks);
    table->tasks = tasks;
    table->ntasks = count;
    table->workers = workers;
    table->grain = (size_t)ember_config_int("EMBER_PS_GRAIN");
    return EMBER_OK;
}

ember_status_t ember_shard_set_workers(ember_shard_t *table, ember_workers_t *workers)
{
    return table_work_init(table, workers);
}

ember_workers_t *ember_shard_workers(const ember_shard_t *table)
{
    return table->workers;
}

unsigned ember_shard_lookup_tasks(const ember_shard_t *table, const ember_msg_lookup_t *head)
{
    return work_tasks(table, ((size_t)head->indices + head->bags) * table->spec.dim);
}

void table_work_free(ember_shard_t *table)
{
    tasks_free(table->tasks, table->ntasks);
    table->tasks = NULL;
    table->ntasks = 0;
}

/* --- pooling, by bag ranges ----------------------------------------------- */

typedef struct {
    ember_shard_t *table;
    const context_t *ctx;
    const ember_bag_table_t *rows; /* NULL: places only (pooled on a device) */
    const ember_bag_slots_t *batch;
    ember_bag_mode_t mode;
    float *out;
    int64_t *argmax;
    const ember_wire_lookup_view_t *places; /* max mode: the lookup, its places; else NULL */
    uint32_t *places_out;
    unsigned tasks;
} pool_job_t;

/* Where bag @b ends: the next one's start, or the last index. */
static inline size_t bag_end(const ember_bag_slots_t *batch, size_t b)
{
    return b + 1 < batch->bags ? (size_t)batch->offsets[b + 1] : batch->n;
}

/* The first bag of task @k: the bags split where the indices are shared
 * evenly (a bag is never split). */
static size_t bag_split(const ember_bag_slots_t *batch, unsigned tasks, unsigned k)
{
    if (k == 0)
        return 0;
    if (k >= tasks)
        return batch->bags;
    const uint64_t target = (uint64_t)((unsigned __int128)batch->n * k / tasks);
    return ember_lower_bound_u32(batch->offsets, batch->bags, target);
}

/* Bags [b0, b1) of the batch as a batch of their own: offsets stay
 * absolute (slots and weights are the whole batch's). */
static ember_bag_slots_t bag_range(const ember_bag_slots_t *batch, size_t b0, size_t b1)
{
    ember_bag_slots_t sub = *batch;
    sub.offsets = batch->offsets + b0;
    sub.bags = b1 - b0;
    sub.n = b1 < batch->bags ? (size_t)batch->offsets[b1] : batch->n;
    return sub;
}

/* Max mode: the place of the entry each maximum of bags [b0, b1) came
 * from.  The pooling kept the first maximal entry, whose row occurs
 * nowhere earlier in the bag (an earlier copy would hold the same value):
 * its place is its row's first place in the bag.  @seen is all zero
 * before and after each bag. */
static void max_places_range(const pool_job_t *job, table_task_t *task, size_t b0, size_t b1)
{
    const context_t *ctx = job->ctx;
    const size_t dim = job->table->spec.dim;
    const int64_t *argmax = job->argmax;
    const int64_t *unique = ctx->unique.data;
    const uint32_t *inverse = ctx->inverse.data;
    uint8_t *seen = task->seen.data;
    uint32_t *first = task->first.data;
    for (size_t b = b0; b < b1; b++) {
        const size_t begin = (size_t)job->batch->offsets[b], end = bag_end(job->batch, b);
        for (size_t i = begin; i < end; i++) {
            if (!seen[inverse[i]]) {
                seen[inverse[i]] = 1;
                first[inverse[i]] = ember_wire_lookup_place(job->places, i);
            }
        }
        for (size_t d = 0; d < dim; d++) {
            int64_t row = argmax[b * dim + d];
            job->places_out[b * dim + d] =
                    row < 0 ? EMBER_PLACE_NONE
                            : first[ember_lower_bound_i64(unique, ctx->nunique, row)];
        }
        for (size_t i = begin; i < end; i++)
            seen[inverse[i]] = 0;
    }
}

static void pool_task(void *arg, unsigned k)
{
    const pool_job_t *job = arg;
    table_task_t *task = &job->table->tasks[k];
    const size_t b0 = bag_split(job->batch, job->tasks, k);
    const size_t b1 = bag_split(job->batch, job->tasks, k + 1);
    const size_t dim = job->table->spec.dim;
    task->status = EMBER_OK;
    if (b0 == b1)
        return;
    if (job->rows) {
        const ember_bag_slots_t sub = bag_range(job->batch, b0, b1);
        task->status = ember_bag_forward_slots(job->rows, &sub, job->mode, job->out + b0 * dim,
                                               job->argmax ? job->argmax + b0 * dim : NULL);
    }
    if (task->status == EMBER_OK && job->places)
        max_places_range(job, task, b0, b1);
}

/* Room for max places in each of @tasks tasks: @seen grows zeroed. */
static ember_status_t places_reserve(ember_shard_t *table, unsigned tasks, size_t unique)
{
    for (unsigned k = 0; k < tasks; k++) {
        table_task_t *task = &table->tasks[k];
        const size_t had = task->seen.capacity;
        if (!ember_buffer_reserve(&task->seen, unique + 1) ||
            !ember_buffer_reserve(&task->first, unique * 4 + 4))
            return EMBER_ERR_NO_MEMORY;
        memset((uint8_t *)task->seen.data + had, 0, task->seen.capacity - had);
    }
    return EMBER_OK;
}

static ember_status_t pool_run(pool_job_t *job)
{
    ember_shard_t *table = job->table;
    const size_t dim = table->spec.dim;
    job->tasks = work_tasks(table, (job->batch->n + job->batch->bags) * dim); /* as
                                                      * ember_shard_lookup_tasks */
    if (job->places)
        EMBER_CHECK(places_reserve(table, job->tasks, job->ctx->nunique));
    ember_workers_run(table->workers, job->tasks, pool_task, job);
    for (unsigned k = 0; k < job->tasks; k++)
        EMBER_CHECK(table->tasks[k].status);
    return EMBER_OK;
}

ember_status_t table_work_pool(ember_shard_t *table, const context_t *ctx,
                               const ember_bag_table_t *rows, const ember_bag_slots_t *batch,
                               ember_bag_mode_t mode, float *out, int64_t *argmax,
                               const ember_wire_lookup_view_t *lookup)
{
    pool_job_t job = {.table = table,
                      .ctx = ctx,
                      .rows = rows,
                      .batch = batch,
                      .mode = mode,
                      .out = out,
                      .argmax = argmax,
                      .places = mode == EMBER_BAG_MAX ? lookup : NULL,
                      .places_out = (uint32_t *)(out + batch->bags * table->spec.dim)};
    return pool_run(&job);
}

/* --- backward, by row (slot) ranges ----------------------------------------- */

typedef struct {
    ember_shard_t *table;
    const context_t *ctx;
    const float *grad_out;
    pending_t *pending;
    unsigned tasks;
} backward_job_t;

/* Slots [s0, s1) of sum pooling's backward: every index is looked at in
 * bag order and those of this range's rows taken, so each row's gradient
 * is summed in the order one thread sums it.  A row's first index writes
 * its gradient and later ones add (most rows have one index: no zeroing
 * pass); a row no index refers to gets zeros. */
static void sum_backward_task(void *arg, unsigned k)
{
    const backward_job_t *job = arg;
    const context_t *ctx = job->ctx;
    const uint32_t *slot = ctx->inverse.data;
    const float *weights = ctx->weighted ? ctx->weights.data : NULL;
    const uint32_t *offsets = ctx->offsets.data;
    float *row_grad = job->pending->grad.data;
    uint8_t *written = job->table->written.data;
    const size_t dim = job->table->spec.dim;
    size_t s0, s1;
    ember_split_range(ctx->nunique, job->tasks, k, &s0, &s1);
    memcpy((int64_t *)job->pending->rows.data + s0, (const int64_t *)ctx->unique.data + s0,
           (s1 - s0) * sizeof(int64_t));
    memset(written + s0, 0, s1 - s0);
    for (size_t b = 0; b < ctx->bags; b++) {
        size_t end = b + 1 < ctx->bags ? (size_t)offsets[b + 1] : ctx->n;
        const float *g = job->grad_out + b * dim;
        for (size_t i = (size_t)offsets[b]; i < end; i++) {
            if (slot[i] < s0 || slot[i] >= s1)
                continue;
            float *dst = row_grad + (size_t)slot[i] * dim;
            const float w = weights ? weights[i] : 1.0f; /* 1 * g is g exactly */
            if (!written[slot[i]]) {
                written[slot[i]] = 1;
                for (size_t d = 0; d < dim; d++)
                    dst[d] = w * g[d];
            } else {
                for (size_t d = 0; d < dim; d++)
                    dst[d] += w * g[d];
            }
        }
    }
    for (size_t u = s0; u < s1; u++)
        if (!written[u])
            memset(row_grad + u * dim, 0, dim * sizeof(float));
}

void table_work_sum_backward(ember_shard_t *table, const context_t *ctx, const float *grad_out,
                             pending_t *pending)
{
    backward_job_t job = {.table = table, .ctx = ctx, .grad_out = grad_out, .pending = pending};
    job.tasks = work_tasks(table, ctx->n * table->spec.dim);
    ember_workers_run(table->workers, job.tasks, sum_backward_task, &job);
    pending->nrows = ctx->nunique;
}

/* Max backward, first half: which slots of [s0, s1) an index refers to
 * (written), and how many. */
static void max_mark_task(void *arg, unsigned k)
{
    const backward_job_t *job = arg;
    const context_t *ctx = job->ctx;
    const uint32_t *slot = ctx->inverse.data;
    uint8_t *written = job->table->written.data;
    size_t s0, s1, count = 0;
    ember_split_range(ctx->nunique, job->tasks, k, &s0, &s1);
    memset(written + s0, 0, s1 - s0);
    for (size_t i = 0; i < ctx->n; i++) {
        if (slot[i] >= s0 && slot[i] < s1)
            written[slot[i]] = 1;
    }
    for (size_t u = s0; u < s1; u++)
        count += written[u];
    job->table->tasks[k].count = count;
}

/* Max backward, second half: the range's referenced rows at their places
 * (ctx->first maps a slot to its place), and each maximum's gradient
 * added to its row, bags in order (zeros first, as one thread does). */
static void max_grad_task(void *arg, unsigned k)
{
    const backward_job_t *job = arg;
    const context_t *ctx = job->ctx;
    table_task_t *task = &job->table->tasks[k];
    const uint8_t *written = job->table->written.data;
    const int64_t *unique = ctx->unique.data, *argmax = ctx->argmax.data;
    uint32_t *place = ctx->first.data;
    int64_t *rows = job->pending->rows.data;
    float *grad = job->pending->grad.data;
    const size_t dim = job->table->spec.dim;
    size_t s0, s1, at = task->begin;
    ember_split_range(ctx->nunique, job->tasks, k, &s0, &s1);
    task->status = EMBER_OK;
    for (size_t u = s0; u < s1; u++) {
        if (written[u]) {
            place[u] = (uint32_t)at;
            rows[at++] = unique[u];
        }
    }
    memset(grad + task->begin * dim, 0, task->count * dim * sizeof(float));
    if (s0 == s1)
        return;
    const int64_t lo = unique[s0], hi = unique[s1 - 1];
    for (size_t e = 0; e < ctx->bags * dim; e++) {
        const int64_t row = argmax[e];
        if (row < lo || row > hi)
            continue; /* another range's, or -1 (an empty bag) */
        size_t u = s0 + ember_lower_bound_i64(unique + s0, s1 - s0, row);
        if (u >= s1 || unique[u] != row || !written[u]) {
            task->status = EMBER_ERR_INVALID_PARAM; /* not a row of the bags: never */
            return;
        }
        grad[(size_t)place[u] * dim + e % dim] += job->grad_out[e];
    }
}

ember_status_t table_work_max_backward(ember_shard_t *table, const context_t *ctx,
                                       const float *grad_out, pending_t *pending)
{
    backward_job_t job = {.table = table, .ctx = ctx, .grad_out = grad_out, .pending = pending};
    job.tasks = work_tasks(table, ctx->bags * table->spec.dim + ctx->n);
    ember_workers_run(table->workers, job.tasks, max_mark_task, &job);
    size_t total = 0;
    for (unsigned k = 0; k < job.tasks; k++) {
        table->tasks[k].begin = total;
        total += table->tasks[k].count;
    }
    ember_workers_run(table->workers, job.tasks, max_grad_task, &job);
    for (unsigned k = 0; k < job.tasks; k++)
        EMBER_CHECK(table->tasks[k].status);
    pending->nrows = total;
    return EMBER_OK;
}

/* --- the sync reduction and the optimizer step, by row ranges --------------- */

typedef struct {
    ember_shard_t *table;
    const pending_t *const *grads;
    uint32_t count;
    const int64_t *pivots; /* [tasks + 1]: task k takes rows in [pivots[k], pivots[k + 1]) */
    float scale;
    unsigned tasks;
    ember_opt_values_t values;
} reduce_job_t;

/* Each trainer's first row of task @k's range, in @cursor [count], and
 * its end in @cursor [count..2 count); returns where the range's output
 * starts: no range can reduce to more rows than its trainers gave it. */
static size_t reduce_bounds(const reduce_job_t *job, unsigned k, size_t *cursor)
{
    size_t at = 0;
    for (uint32_t t = 0; t < job->count; t++) {
        const pending_t *p = job->grads[t];
        const int64_t *rows = p->rows.data;
        cursor[t] = k == 0 ? 0 : ember_lower_bound_i64(rows, p->nrows, job->pivots[k]);
        cursor[job->count + t] =
                k + 1 >= job->tasks ? p->nrows
                                    : ember_lower_bound_i64(rows, p->nrows, job->pivots[k + 1]);
        at += cursor[t];
    }
    return at;
}

/* The smallest row at the trainers' cursors, or INT64_MAX when all ended. */
static int64_t reduce_next_row(const reduce_job_t *job, const size_t *cursor)
{
    int64_t row = INT64_MAX;
    for (uint32_t t = 0; t < job->count; t++) {
        if (cursor[t] < cursor[job->count + t]) {
            int64_t r = ((const int64_t *)job->grads[t]->rows.data)[cursor[t]];
            row = r < row ? r : row;
        }
    }
    return row;
}

/* Rows of task @k's range merged from every trainer's sorted rows, each
 * row's gradient summed in trainer order (the first trainer's copied,
 * the others' added), then scaled; the rows come out increasing. */
static void reduce_task(void *arg, unsigned k)
{
    const reduce_job_t *job = arg;
    ember_shard_t *table = job->table;
    table_task_t *task = &table->tasks[k];
    size_t *cursor = task->cursor.data;
    const size_t dim = table->spec.dim, begin = reduce_bounds(job, k, cursor);
    int64_t *acc_rows = (int64_t *)table->acc_rows.data + begin;
    float *acc = (float *)table->acc_grad.data + begin * dim;
    size_t out = 0;
    for (int64_t row; (row = reduce_next_row(job, cursor)) != INT64_MAX; out++) {
        float *dst = acc + out * dim;
        int first = 1;
        for (uint32_t t = 0; t < job->count; t++) {
            const pending_t *p = job->grads[t];
            if (cursor[t] >= cursor[job->count + t] ||
                ((const int64_t *)p->rows.data)[cursor[t]] != row)
                continue;
            const float *src = (const float *)p->grad.data + cursor[t]++ * dim;
            if (first)
                memcpy(dst, src, dim * sizeof(float));
            else
                for (size_t d = 0; d < dim; d++)
                    dst[d] += src[d];
            first = 0;
        }
        for (size_t d = 0; d < dim; d++)
            dst[d] = dst[d] * job->scale;
        acc_rows[out] = row;
    }
    task->begin = begin;
    task->count = out;
    task->status = ember_opt_sparse_check(table->optimizer, acc_rows, out);
}

static void step_task(void *arg, unsigned k)
{
    const reduce_job_t *job = arg;
    ember_shard_t *table = job->table;
    const table_task_t *task = &table->tasks[k];
    /* A checkpoint being written keeps the rows' old values first. */
    table_cow_rows(table, (const int64_t *)table->acc_rows.data + task->begin, task->count);
    ember_opt_sparse_rows(table->optimizer, &job->values,
                          (const int64_t *)table->acc_rows.data + task->begin,
                          (const float *)table->acc_grad.data + task->begin * table->spec.dim,
                          task->count, task->row.data);
}

/* The pivots: the rows of the trainer with the most, at even steps. */
static void reduce_pivots(const reduce_job_t *job, int64_t *pivots)
{
    const pending_t *most = job->grads[0];
    for (uint32_t t = 1; t < job->count; t++)
        if (job->grads[t]->nrows > most->nrows)
            most = job->grads[t];
    for (unsigned k = 1; k < job->tasks; k++) {
        size_t at, end;
        ember_split_range(most->nrows, job->tasks, k, &at, &end);
        pivots[k] = at < most->nrows ? ((const int64_t *)most->rows.data)[at] : INT64_MAX;
    }
}

/* The room a reduction needs: every trainer's rows, each task's cursors. */
static ember_status_t reduce_reserve(ember_shard_t *table, const reduce_job_t *job, size_t total)
{
    const size_t dim = table->spec.dim;
    if (!ember_buffer_reserve(&table->acc_rows, total * 8 + 8) ||
        !ember_buffer_reserve(&table->acc_grad, total * dim * sizeof(float) + 4))
        return EMBER_ERR_NO_MEMORY;
    for (unsigned k = 0; k < job->tasks; k++)
        if (!ember_buffer_reserve(&table->tasks[k].cursor,
                                  2 * (size_t)job->count * sizeof(size_t) + 8))
            return EMBER_ERR_NO_MEMORY;
    return EMBER_OK;
}

ember_status_t table_work_reduce(ember_shard_t *table, const pending_t *const *grads,
                                 uint32_t count)
{
    const size_t dim = table->spec.dim;
    size_t total = 0;
    for (uint32_t t = 0; t < count; t++)
        total += grads[t]->nrows;
    int64_t pivots[EMBER_WORKERS_MAX + 1];
    const int mean = table->spec.sparse_reduce == EMBER_REDUCE_MEAN;
    reduce_job_t job = {.table = table,
                        .grads = grads,
                        .count = count,
                        .pivots = pivots,
                        .scale = mean ? 1.0f / (float)table->spec.trainers : 1.0f,
                        .tasks = count ? work_tasks(table, total * dim) : 1};
    table->reduced_tasks = 0;
    EMBER_CHECK(reduce_reserve(table, &job, total));
    if (count > 0)
        reduce_pivots(&job, pivots);
    ember_workers_run(table->workers, job.tasks, reduce_task, &job);
    for (unsigned k = 0; k < job.tasks; k++)
        EMBER_CHECK(table->tasks[k].status);
    table->reduced_tasks = job.tasks;
    return EMBER_OK;
}

size_t table_work_reduced_compact(ember_shard_t *table)
{
    const size_t dim = table->spec.dim;
    int64_t *rows = table->acc_rows.data;
    float *grad = table->acc_grad.data;
    size_t at = 0;
    for (unsigned k = 0; k < table->reduced_tasks; k++) {
        const table_task_t *task = &table->tasks[k];
        memmove(rows + at, rows + task->begin, task->count * sizeof(int64_t));
        memmove(grad + at * dim, grad + task->begin * dim, task->count * dim * sizeof(float));
        at += task->count;
    }
    return at;
}

ember_status_t table_work_step_reduced(ember_shard_t *table)
{
    reduce_job_t job = {
            .table = table,
            .tasks = table->reduced_tasks,
            .values = {.data = table->data, .dtype = table->spec.dtype, .dim = table->spec.dim}};
    EMBER_CHECK(ember_opt_sparse_begin(table->optimizer, &job.values));
    ember_workers_run(table->workers, job.tasks, step_task, &job);
    return EMBER_OK;
}

/* Async: one trainer's rows, split evenly. */
static void step_list_task(void *arg, unsigned k)
{
    const reduce_job_t *job = arg;
    ember_shard_t *table = job->table;
    const pending_t *p = job->grads[0];
    size_t u0, u1;
    ember_split_range(p->nrows, job->tasks, k, &u0, &u1);
    table_cow_rows(table, (const int64_t *)p->rows.data + u0, u1 - u0);
    ember_opt_sparse_rows(table->optimizer, &job->values, (const int64_t *)p->rows.data + u0,
                          (const float *)p->grad.data + u0 * table->spec.dim, u1 - u0,
                          table->tasks[k].row.data);
}

ember_status_t table_work_step(ember_shard_t *table, const int64_t *rows, const float *grad,
                               size_t nrows)
{
    const pending_t list = {
            .nrows = nrows, .rows = {.data = (void *)rows}, .grad = {.data = (void *)grad}};
    const pending_t *grads[1] = {&list};
    reduce_job_t job = {
            .table = table,
            .grads = grads,
            .count = 1,
            .tasks = work_tasks(table, nrows * table->spec.dim),
            .values = {.data = table->data, .dtype = table->spec.dtype, .dim = table->spec.dim}};
    EMBER_CHECK(ember_opt_sparse_check(table->optimizer, rows, nrows));
    EMBER_CHECK(ember_opt_sparse_begin(table->optimizer, &job.values));
    ember_workers_run(table->workers, job.tasks, step_list_task, &job);
    return EMBER_OK;
}
