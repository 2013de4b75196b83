/*
 * api/ebc: a trainer's EmbeddingBagCollection over the job's tables
 * (include/ember/lookup.h).
 *
 * One engine table (engine/train/sparse) per distinct table of the
 * features, its bags for a step those of its features one after another
 * (each feature a segment of the split's input), so its combined output is
 * its features' [B][dim] blocks back to back, and the tables' blocks in
 * feature order are the ebc's output.  Two steps in flight through
 * engine/train/pipeline (a slot per step parity); an evaluation borrows
 * the next step's slot.  On a GPU without the device path the tables'
 * parts live on a host device and combine into (and push from) one pinned
 * block each way, copied to the GPU once a step, as DLRM's staged trainer
 * does.
 */
#include "api/api.h"

#include "engine/device/scratch.h"
#include "engine/train/pipeline.h"
#include "engine/train/row_cache.h"
#include "engine/train/sparse.h"
#include "engine/train/trainer_dev.h"
#include "engine/wire/protocol.h"

#include <ember/log.h>
#include <ember/lookup.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURE_NAME_MAX 64

typedef struct {
    char name[FEATURE_NAME_MAX];
    ember_table_t *table;
    ember_bag_mode_t pooling;
    int64_t padding_idx;
    size_t table_index; /* its table among the ebc's */
    uint32_t dim;
} feature_t;

/* A distinct table and its features, first .. first + count - 1. */
typedef struct {
    ember_table_t *table;
    size_t first, count;
    size_t floats_per_bag; /* count * dim: its block's floats per bag of B */
} ebc_table_t;

struct ember_lookup {
    ember_ebc_t *ebc;
    uint64_t step;
    int eval; /* EMBER_LOOKUP_FORWARD_ONLY */
    int open, sent, waited, pushed;
    size_t batch;           /* B */
    ember_sparse_t *sparse; /* its slot's (an evaluation: borrowed) */
    ember_scratch_t own;    /* its pooled output when the caller gives none */
};

struct ember_ebc {
    ember_job_t *job;
    int trainer;
    feature_t *features;
    size_t nfeatures;
    ebc_table_t *tables;
    size_t ntables;
    ember_ebc_options_t options;
    ember_trainer_dev_t td; /* the outputs' device */
    ember_device_t *own_device;
    int rdma;
    /* staged: the parts on a host device, one pinned block each way */
    ember_device_t *host_device;
    ember_trainer_dev_t host_td;
    ember_scratch_t pooled_host, grads_host;
    ember_pipeline_t *pipe;
    ember_row_cache_t *cache; /* NULL: none (ember_ebc_set_cache_rows) */
    size_t cache_rows;
    int looked_up; /* a lookup was made: the cache is set before */
    uint32_t staleness;
    uint64_t next_step;               /* the next training lookup's */
    uint64_t pushed_upto;             /* steps before it pushed back */
    uint64_t waited_upto;             /* steps before it waited for */
    ember_lookup_t slots[2];          /* training lookups, by step parity */
    ember_lookup_t eval;              /* an evaluation */
    uint64_t broken;                  /* a step released without its backward, + 1 */
    ember_sparse_segment_t *segments; /* [nfeatures] */
    ember_sparse_input_t *inputs;     /* [ntables] */
    char err[600];
    char error[700]; /* the line the last failing call logged (ember_ebc_error) */
};

/* One line naming the trainer and the step; returns @status. */
static ember_status_t ebc_fail(ember_ebc_t *ebc, uint64_t step, ember_status_t status,
                               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static ember_status_t ebc_fail(ember_ebc_t *ebc, uint64_t step, ember_status_t status,
                               const char *fmt, ...)
{
    char what[500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (status == EMBER_ERR_CANCELED && ebc->job->aborted)
        snprintf(ebc->error, sizeof(ebc->error), "trainer %d step %llu: the job was aborted: %s",
                 ebc->trainer, (unsigned long long)step, ebc->job->abort_cause);
    else
        snprintf(ebc->error, sizeof(ebc->error), "trainer %d step %llu: %s", ebc->trainer,
                 (unsigned long long)step, what);
    ember_error("lookup", "%s", ebc->error);
    return status;
}

void ember_ebc_options_init(ember_ebc_options_t *options)
{
    *options = (ember_ebc_options_t){.device = NULL};
}

/* ---- set-up ------------------------------------------------------------------ */

/* The features copied and grouped by table: a table's features adjacent,
 * pooling alike, the table one this trainer may look up. */
static ember_status_t features_take(ember_ebc_t *ebc, const ember_feature_t *features, size_t n)
{
    if (!(ebc->features = calloc(n, sizeof(*ebc->features))) ||
        !(ebc->tables = calloc(n, sizeof(*ebc->tables))))
        return EMBER_ERR_NO_MEMORY;
    ebc->nfeatures = n;
    for (size_t f = 0; f < n; f++) {
        const ember_feature_t *in = &features[f];
        feature_t *out = &ebc->features[f];
        if (in->name)
            snprintf(out->name, sizeof(out->name), "%s", in->name);
        else
            snprintf(out->name, sizeof(out->name), "feature%zu", f);
        if (!in->table)
            return ebc_fail(ebc, 0, EMBER_ERR_INVALID_PARAM, "feature %s: no table", out->name);
        const api_table_desc_t *d = &in->table->desc;
        out->table = in->table;
        out->pooling = in->pooling;
        out->padding_idx = in->padding_idx;
        out->dim = d->dim;
        if ((unsigned)in->pooling > EMBER_BAG_MAX || in->padding_idx < -1 ||
            (d->kind != EMBER_TABLE_DYNAMIC && in->padding_idx >= d->rows))
            return ebc_fail(ebc, 0, EMBER_ERR_INVALID_PARAM,
                            "feature %s: pooling %d, padding index %lld (of table %s's %lld "
                            "rows; -1: none)",
                            out->name, (int)in->pooling, (long long)in->padding_idx, d->name,
                            (long long)d->rows);
        if ((uint32_t)ebc->trainer >= d->trainers)
            return ebc_fail(ebc, 0, EMBER_ERR_INVALID_PARAM,
                            "feature %s: table %s is looked up by trainers 0 to %u only", out->name,
                            d->name, d->trainers - 1);
        ebc_table_t *last = ebc->ntables ? &ebc->tables[ebc->ntables - 1] : NULL;
        if (last && last->table->desc.table_id == d->table_id) {
            const feature_t *first = &ebc->features[last->first];
            if (first->pooling != out->pooling || first->padding_idx != out->padding_idx)
                return ebc_fail(ebc, 0, EMBER_ERR_INVALID_PARAM,
                                "features %s and %s of table %s pool differently (%s, padding "
                                "%lld; %s, padding %lld): one pooling a table",
                                first->name, out->name, d->name,
                                ember_bag_mode_name(first->pooling), (long long)first->padding_idx,
                                ember_bag_mode_name(out->pooling), (long long)out->padding_idx);
            last->count++;
        } else {
            for (size_t k = 0; k < ebc->ntables; k++) {
                if (ebc->tables[k].table->desc.table_id == d->table_id)
                    return ebc_fail(ebc, 0, EMBER_ERR_INVALID_PARAM,
                                    "feature %s: table %s's features must be given one after "
                                    "another (%s is apart)",
                                    out->name, d->name, ebc->features[ebc->tables[k].first].name);
            }
            ebc->tables[ebc->ntables++] = (ebc_table_t){.table = in->table, .first = f, .count = 1};
        }
        out->table_index = ebc->ntables - 1;
    }
    for (size_t k = 0; k < ebc->ntables; k++)
        ebc->tables[k].floats_per_bag = ebc->tables[k].count * ebc->tables[k].table->desc.dim;
    return EMBER_OK;
}

/* The outputs' device (the host when none is given), how the replies meet
 * it, and (a GPU without the device path) the host device the parts use. */
static ember_status_t device_setup(ember_ebc_t *ebc)
{
    ember_device_t *device = ebc->options.device;
    if (!device) {
        EMBER_CHECK(ember_device_open("cpu", 0, &ebc->own_device));
        device = ebc->own_device;
    }
    ebc->td = (ember_trainer_dev_t){.device = device,
                                    .ops = ember_device_ops(device),
                                    .on_host = ember_device_mem_type(device) == EMBER_MEM_HOST};
    if (ebc->td.on_host)
        return EMBER_OK;
    ember_mem_type_t net = EMBER_MEM_HOST;
    const char *path = NULL;
    EMBER_CHECK(ebc->td.ops->network_path(device, &net, &path));
    /* fp16 replies are widened on the host: staged then */
    ebc->rdma = net == EMBER_MEM_CUDA && !ebc->options.half_replies;
    if (ebc->rdma)
        return EMBER_OK;
    EMBER_CHECK(ember_device_open("cpu", 0, &ebc->host_device));
    ebc->host_td = (ember_trainer_dev_t){
            .device = ebc->host_device, .ops = ember_device_ops(ebc->host_device), .on_host = 1};
    ebc->pooled_host.pinned = ebc->grads_host.pinned = 1; /* the GPU's, for DMA */
    return EMBER_OK;
}

/* The engine's tables, in the ebc's order, over its device or the host's. */
static ember_status_t sparse_setup(ember_ebc_t *ebc)
{
    ember_sparse_config_t *configs = calloc(ebc->ntables, sizeof(*configs));
    if (!configs)
        return EMBER_ERR_NO_MEMORY;
    for (size_t k = 0; k < ebc->ntables; k++) {
        const api_table_desc_t *d = &ebc->tables[k].table->desc;
        const feature_t *f = &ebc->features[ebc->tables[k].first];
        configs[k] = (ember_sparse_config_t){.table_id = d->table_id,
                                             .table_name = d->name,
                                             .num_ps = d->num_shards,
                                             .first_ps_rank =
                                                     ember_job_ps_rank(ebc->job, (int)d->first_ps),
                                             .dim = d->dim,
                                             .mode = f->pooling,
                                             .padding_idx = f->padding_idx,
                                             .half_replies = ebc->options.half_replies != 0,
                                             .trainer = ebc->trainer,
                                             .async = d->consistency == EMBER_ASYNC,
                                             .staleness = d->staleness,
                                             .rows = d->rows,
                                             .dynamic = d->kind == EMBER_TABLE_DYNAMIC,
                                             .cache = ebc->cache};
    }
    ember_status_t status = ember_pipeline_create(configs, ebc->ntables, ebc->job->tp,
                                                  ebc->host_device ? &ebc->host_td : &ebc->td,
                                                  ebc->rdma, &ebc->job->aborted, &ebc->pipe);
    if (status == EMBER_OK)
        ebc->staleness = ember_pipeline_staleness(ebc->pipe);
    free(configs);
    return status;
}

ember_status_t ember_ebc_create(ember_job_t *job, const ember_feature_t *features, size_t nfeatures,
                                const ember_ebc_options_t *options, ember_ebc_t **ebc_p)
{
    int t;
    if (ember_job_role(job, job->rank, &t) != EMBER_ROLE_TRAINER || !features || !nfeatures) {
        ember_error("lookup", "%s: an ebc %s", ember_tp_peer_name(job->tp, job->rank),
                    nfeatures ? "is a trainer's" : "of no features");
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_ebc_t *ebc = calloc(1, sizeof(*ebc));
    if (!ebc)
        return EMBER_ERR_NO_MEMORY;
    ebc->job = job;
    ebc->trainer = t;
    if (options)
        ebc->options = *options;
    ebc->next_step = ebc->pushed_upto = ebc->waited_upto = ebc->options.start_step;
    for (int i = 0; i < 2; i++)
        ebc->slots[i].ebc = ebc;
    ebc->eval.ebc = ebc;
    ember_status_t status = features_take(ebc, features, nfeatures);
    if (status == EMBER_OK && (!(ebc->segments = calloc(nfeatures, sizeof(*ebc->segments))) ||
                               !(ebc->inputs = calloc(ebc->ntables, sizeof(*ebc->inputs)))))
        status = EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK)
        status = device_setup(ebc);
    if (status == EMBER_OK)
        status = sparse_setup(ebc);
    if (status != EMBER_OK) {
        ember_ebc_destroy(ebc);
        return status;
    }
    *ebc_p = ebc;
    return EMBER_OK;
}

void ember_ebc_destroy(ember_ebc_t *ebc)
{
    if (!ebc)
        return;
    ember_pipeline_destroy(ebc->pipe); /* a push still leaving: bounded */
    ember_row_cache_destroy(ebc->cache);
    ember_lookup_t *lookups[] = {&ebc->slots[0], &ebc->slots[1], &ebc->eval};
    if (ebc->td.device) {
        for (size_t i = 0; i < 3; i++)
            ember_scratch_free(ebc->td.device, &lookups[i]->own);
        ember_scratch_free(ebc->td.device, &ebc->pooled_host);
        ember_scratch_free(ebc->td.device, &ebc->grads_host);
    }
    ember_device_close(ebc->host_device);
    ember_device_close(ebc->own_device);
    free(ebc->features);
    free(ebc->tables);
    free(ebc->segments);
    free(ebc->inputs);
    free(ebc);
}

size_t ember_ebc_features(const ember_ebc_t *ebc)
{
    return ebc->nfeatures;
}

uint32_t ember_ebc_feature_dim(const ember_ebc_t *ebc, size_t f)
{
    return f < ebc->nfeatures ? ebc->features[f].dim : 0;
}

size_t ember_ebc_output_size(const ember_ebc_t *ebc, size_t batch_size)
{
    size_t floats = 0;
    for (size_t k = 0; k < ebc->ntables; k++)
        floats += ebc->tables[k].floats_per_bag * batch_size;
    return floats;
}

size_t ember_ebc_output_offset(const ember_ebc_t *ebc, size_t f, size_t batch_size)
{
    size_t at = 0;
    for (size_t g = 0; g < f && g < ebc->nfeatures; g++)
        at += (size_t)ebc->features[g].dim * batch_size;
    return at;
}

/* Where table @k's block starts in the output, in floats. */
static size_t table_offset(const ember_ebc_t *ebc, size_t k, size_t batch_size)
{
    return ember_ebc_output_offset(ebc, ebc->tables[k].first, batch_size);
}

const char *ember_ebc_error(const ember_ebc_t *ebc)
{
    return ebc ? ebc->error : "";
}

uint64_t ember_ebc_staleness_seen(const ember_ebc_t *ebc)
{
    return ember_pipeline_staleness_seen(ebc->pipe);
}

/* ---- the batch ------------------------------------------------------------------ */

/* The KJT as each table's segments: feature f's bags are entries f*B ..
 * (f+1)*B - 1 of the lengths or offsets.  The split checks each bag and
 * id; here what spans the features: the counts, and that the values are
 * covered exactly. */
static ember_status_t kjt_segments(ember_ebc_t *ebc, const ember_kjt_t *kjt, uint64_t step)
{
    const size_t F = ebc->nfeatures, B = kjt ? kjt->batch_size : 0;
    if (!kjt || kjt->num_features != F || B == 0 || !kjt->lengths == !kjt->offsets ||
        (kjt->num_values && !kjt->values) || B > UINT32_MAX / F)
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "a batch of %zu features (the ebc has %zu) and %zu bags each: %s",
                        kjt ? kjt->num_features : 0, F, B,
                        !kjt || kjt->num_features != F   ? "wrong feature count"
                        : B == 0                         ? "no bags"
                        : !kjt->lengths == !kjt->offsets ? "give exactly one of lengths and offsets"
                                                         : "values missing or too many bags");
    if (kjt->offsets && (kjt->offsets[0] != 0 || kjt->offsets[F * B] != (int64_t)kjt->num_values))
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "offsets run from %lld to %lld, not from 0 to num_values %zu",
                        (long long)kjt->offsets[0], (long long)kjt->offsets[F * B],
                        kjt->num_values);
    uint64_t start = 0;
    for (size_t f = 0; f < F; f++) {
        ember_sparse_segment_t *seg = &ebc->segments[f];
        *seg = (ember_sparse_segment_t){.values = kjt->values,
                                        .weights = kjt->weights,
                                        .bags = B,
                                        .name = ebc->features[f].name};
        if (kjt->offsets) {
            seg->offsets = kjt->offsets + f * B;
            continue;
        }
        seg->lengths = kjt->lengths + f * B;
        seg->values = kjt->values ? kjt->values + start : NULL;
        seg->weights = kjt->weights ? kjt->weights + start : NULL;
        for (size_t b = 0; b < B; b++) {
            if (seg->lengths[b] < 0)
                return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                                "feature %s: length %d of bag %zu is negative", seg->name,
                                (int)seg->lengths[b], b);
            start += (uint64_t)seg->lengths[b];
        }
        if (start > kjt->num_values)
            return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                            "feature %s: its lengths run past num_values %zu", seg->name,
                            kjt->num_values);
    }
    if (kjt->lengths && start != kjt->num_values)
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "the lengths add up to %llu values, num_values is %zu",
                        (unsigned long long)start, kjt->num_values);
    for (size_t k = 0; k < ebc->ntables; k++)
        ebc->inputs[k] = (ember_sparse_input_t){.segments = &ebc->segments[ebc->tables[k].first],
                                                .count = ebc->tables[k].count};
    return EMBER_OK;
}

/* A split refused: its reason, the table named in front (the split names
 * the feature). */
static ember_status_t split_refused(ember_ebc_t *ebc, const ember_sparse_t *sparse,
                                    ember_status_t status, uint64_t step, const char *what)
{
    const char *table = ember_sparse_split_table(sparse);
    if (table)
        return ebc_fail(ebc, step, status, "%stable %s: %s", what, table, ebc->err);
    return ebc_fail(ebc, step, status, "%s%s", what, ebc->err);
}

/* ---- sending ------------------------------------------------------------------ */

/* Whether training step @step's lookups may leave: the first step at
 * once; then, staleness 0, once the step before pushed its gradients,
 * staleness K >= 1, once its replies are in. */
static int may_send(const ember_ebc_t *ebc, uint64_t step)
{
    if (step == ebc->options.start_step)
        return 1;
    return ebc->staleness == 0 ? ebc->pushed_upto >= step : ebc->waited_upto >= step;
}

static ember_status_t send_step(ember_ebc_t *ebc, ember_lookup_t *lookup)
{
    ember_status_t status =
            ember_pipeline_send(ebc->pipe, lookup->step, ebc->err, sizeof(ebc->err));
    if (status != EMBER_OK)
        return ebc_fail(ebc, lookup->step, status, "%s", ebc->err);
    lookup->sent = 1;
    return EMBER_OK;
}

/* The next training lookup, when it may leave now. */
static ember_status_t send_next(ember_ebc_t *ebc, uint64_t step)
{
    ember_lookup_t *next = &ebc->slots[(step + 1) % 2];
    if (next->open && next->step == step + 1 && !next->sent && may_send(ebc, step + 1))
        return send_step(ebc, next);
    return EMBER_OK;
}

/* ---- a step ------------------------------------------------------------------- */

static ember_status_t lookup_train(ember_ebc_t *ebc, const ember_kjt_t *kjt,
                                   ember_lookup_t **lookup_p)
{
    const uint64_t step = ebc->next_step;
    ember_lookup_t *lookup = &ebc->slots[step % 2];
    if (ebc->broken)
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "step %llu was released without its backward: the tables cannot go on",
                        (unsigned long long)(ebc->broken - 1));
    if (lookup->open || ebc->eval.open)
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "%s is still open (release it first: at most two lookups at a time)",
                        ebc->eval.open ? "an evaluation" : "the lookup of two steps before");
    EMBER_CHECK(kjt_segments(ebc, kjt, step));
    ember_status_t status =
            ember_pipeline_split(ebc->pipe, ebc->inputs, step, ebc->err, sizeof(ebc->err));
    if (status != EMBER_OK)
        return split_refused(ebc, ember_pipeline_sparse(ebc->pipe, step), status, step, "");
    *lookup = (ember_lookup_t){.ebc = ebc,
                               .step = step,
                               .open = 1,
                               .batch = kjt->batch_size,
                               .sparse = ember_pipeline_sparse(ebc->pipe, step),
                               .own = lookup->own};
    ebc->next_step++;
    if (may_send(ebc, step))
        EMBER_CHECK(send_step(ebc, lookup));
    *lookup_p = lookup;
    return EMBER_OK;
}

/* An evaluation of the tables as the steps pushed so far left them, in
 * the next step's slot. */
static ember_status_t lookup_eval(ember_ebc_t *ebc, const ember_kjt_t *kjt,
                                  ember_lookup_t **lookup_p)
{
    const uint64_t step = ebc->next_step;
    ember_lookup_t *lookup = &ebc->eval;
    ember_sparse_t *sparse = NULL;
    if (ebc->slots[0].open || ebc->slots[1].open || lookup->open)
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "an evaluation while %s is open (release it first)",
                        lookup->open ? "another evaluation" : "a training lookup");
    EMBER_CHECK(kjt_segments(ebc, kjt, step));
    char *err = ebc->err;
    const size_t n = sizeof(ebc->err);
    ember_status_t status = ember_pipeline_pushes_wait(ebc->pipe, step, err, n);
    if (status == EMBER_OK)
        status = ember_pipeline_borrow(ebc->pipe, step, &sparse, err, n);
    if (status == EMBER_OK &&
        (status = ember_sparse_split(sparse, ebc->inputs, step, 1, err, n)) != EMBER_OK)
        return split_refused(ebc, sparse, status, step, "evaluation: ");
    if (status == EMBER_OK)
        status = ember_sparse_lookup_send(sparse, err, n);
    if (status != EMBER_OK)
        return ebc_fail(ebc, step, status, "evaluation: %s", err);
    *lookup = (ember_lookup_t){.ebc = ebc,
                               .step = step,
                               .eval = 1,
                               .open = 1,
                               .sent = 1,
                               .batch = kjt->batch_size,
                               .sparse = sparse,
                               .own = lookup->own};
    *lookup_p = lookup;
    return EMBER_OK;
}

ember_status_t ember_ebc_set_cache_rows(ember_ebc_t *ebc, size_t rows)
{
    const uint64_t step = ebc->next_step;
    if (ebc->looked_up)
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "the row cache is set before the ebc's first lookup");
    if (rows > ((size_t)1 << 30))
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM, "a row cache of %zu rows: at most 2^30",
                        rows);
    uint32_t dim = 0;
    for (size_t k = 0; k < ebc->ntables; k++) {
        const api_table_desc_t *d = &ebc->tables[k].table->desc;
        const feature_t *f = &ebc->features[ebc->tables[k].first];
        const char *why = ebc->options.half_replies ? "fp16 replies"
                          : ebc->rdma               ? "the device path (EMBER_GPUDIRECT=staged "
                                                      "caches)"
                                                    : NULL;
        if (rows > 0 && why)
            return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                            "table %s (feature %s): its rows cannot be cached with %s", d->name,
                            f->name, why);
        dim = d->dim > dim ? d->dim : dim;
    }
    ember_row_cache_t *cache = NULL;
    ember_pipeline_t *pipe = NULL, *old = ebc->pipe;
    ember_row_cache_t *old_cache = ebc->cache;
    ember_status_t status = rows ? ember_row_cache_create(rows, dim, &cache) : EMBER_OK;
    if (status != EMBER_OK)
        return ebc_fail(ebc, step, status, "a row cache of %zu rows of %u floats: %s", rows, dim,
                        ember_status_string(status));
    /* The tables' lookups made anew over the cache (nothing was looked up). */
    ebc->cache = cache;
    ebc->pipe = NULL;
    status = sparse_setup(ebc);
    if (status != EMBER_OK) {
        ebc->pipe = old;
        ebc->cache = old_cache;
        ember_row_cache_destroy(cache);
        return ebc_fail(ebc, step, status, "the tables' lookups over a row cache: %s",
                        ember_status_string(status));
    }
    pipe = ebc->pipe;
    ebc->pipe = old;
    ember_pipeline_destroy(old);
    ember_row_cache_destroy(old_cache);
    ebc->pipe = pipe;
    ebc->cache_rows = rows;
    return EMBER_OK;
}

void ember_ebc_cache_stats(const ember_ebc_t *ebc, ember_ebc_cache_stats_t *stats)
{
    *stats = (ember_ebc_cache_stats_t){0};
    if (!ebc->cache)
        return;
    ember_row_cache_stats_t s;
    ember_row_cache_stats(ebc->cache, &s);
    *stats = (ember_ebc_cache_stats_t){.capacity = ebc->cache_rows,
                                       .rows = s.rows,
                                       .lookups = s.lookups,
                                       .hits = s.hits,
                                       .stale_hits = s.stale,
                                       .oldest = s.oldest,
                                       .inserted = s.inserted,
                                       .evicted = s.evicted};
}

ember_status_t ember_ebc_lookup(ember_ebc_t *ebc, const ember_kjt_t *kjt, unsigned flags,
                                ember_lookup_t **lookup_p)
{
    ebc->looked_up = 1;
    if (flags & ~(unsigned)EMBER_LOOKUP_FORWARD_ONLY)
        return ebc_fail(ebc, ebc->next_step, EMBER_ERR_INVALID_PARAM, "lookup flags %#x", flags);
    if (ebc->job->aborted)
        return ebc_fail(ebc, ebc->next_step, EMBER_ERR_CANCELED, "aborted");
    if (flags & EMBER_LOOKUP_FORWARD_ONLY)
        return lookup_eval(ebc, kjt, lookup_p);
    return lookup_train(ebc, kjt, lookup_p);
}

uint64_t ember_lookup_step(const ember_lookup_t *lookup)
{
    return lookup->step;
}

int ember_lookup_forward_only(const ember_lookup_t *lookup)
{
    return lookup->eval;
}

/* Every table's replies combined into @x (device memory): in place, or
 * staged in the pinned block and copied over once. */
static ember_status_t combine_all(ember_ebc_t *ebc, ember_lookup_t *lookup, float *x)
{
    const size_t B = lookup->batch, floats = ember_ebc_output_size(ebc, B);
    float *into = x;
    if (ebc->host_device) {
        EMBER_CHECK(ember_scratch_reserve(ebc->td.device, &ebc->pooled_host,
                                          floats * sizeof(float) + 4));
        into = ebc->pooled_host.data;
    }
    for (size_t k = 0; k < ebc->ntables; k++)
        EMBER_CHECK(ember_sparse_combine(lookup->sparse, k, into + table_offset(ebc, k, B)));
    if (!ebc->host_device)
        return EMBER_OK;
    return ember_trainer_to_device(&ebc->td, x, into, floats * sizeof(float));
}

ember_status_t ember_lookup_wait(ember_lookup_t *lookup, float *out, const float **pooled_p)
{
    ember_ebc_t *ebc = lookup->ebc;
    const uint64_t step = lookup->step;
    if (!lookup->open || lookup->waited || (!out && !pooled_p))
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM, "%s",
                        !lookup->open    ? "waiting for a released lookup"
                        : lookup->waited ? "waited for twice"
                                         : "no output (out and pooled_p both NULL)");
    if (!lookup->sent && !may_send(ebc, step))
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM,
                        "waiting for step %llu before step %llu's %s (it could never come)",
                        (unsigned long long)step, (unsigned long long)step - 1,
                        ebc->staleness ? "replies" : "backward");
    if (!lookup->sent)
        EMBER_CHECK(send_step(ebc, lookup));
    ember_status_t status =
            lookup->eval ? ember_sparse_lookup_wait(lookup->sparse, ebc->err, sizeof(ebc->err))
                         : ember_pipeline_wait(ebc->pipe, step, ebc->err, sizeof(ebc->err));
    lookup->sent = 0;
    if (status != EMBER_OK)
        return ebc_fail(ebc, step, status, "%s", ebc->err);
    float *x = out;
    if (!x) {
        status = ember_scratch_reserve(ebc->td.device, &lookup->own,
                                       ember_ebc_output_size(ebc, lookup->batch) * sizeof(float) +
                                               4);
        if (status != EMBER_OK)
            return ebc_fail(ebc, step, status, "no memory for the pooled output");
        x = lookup->own.data;
    }
    status = combine_all(ebc, lookup, x);
    if (status != EMBER_OK)
        return ebc_fail(ebc, step, status, "combining the replies: %s",
                        ember_status_string(status));
    lookup->waited = 1;
    if (pooled_p)
        *pooled_p = x;
    if (lookup->eval)
        return EMBER_OK;
    ebc->waited_upto = step + 1;
    return send_next(ebc, step);
}

uint64_t ember_lookup_version(const ember_lookup_t *lookup, size_t feature)
{
    const ember_ebc_t *ebc = lookup->ebc;
    if (!lookup->waited || feature >= ebc->nfeatures)
        return 0;
    return ember_sparse_version(lookup->sparse, ebc->features[feature].table_index);
}

/* The gradient's per-table blocks where the pushes read them: in place, or
 * copied back to the pinned block once. */
static ember_status_t grads_out(ember_ebc_t *ebc, const ember_lookup_t *lookup, const float *grad,
                                const float **per_table)
{
    const size_t B = lookup->batch, floats = ember_ebc_output_size(ebc, B);
    const float *from = grad;
    if (ebc->host_device) {
        EMBER_CHECK(ember_scratch_reserve(ebc->td.device, &ebc->grads_host,
                                          floats * sizeof(float) + 4));
        EMBER_CHECK(ember_trainer_to_host(&ebc->td, ebc->grads_host.data, grad,
                                          floats * sizeof(float)));
        from = ebc->grads_host.data;
    }
    for (size_t k = 0; k < ebc->ntables; k++)
        per_table[k] = from + table_offset(ebc, k, B);
    return EMBER_OK;
}

ember_status_t ember_lookup_backward(ember_lookup_t *lookup, const float *grad, unsigned flags)
{
    ember_ebc_t *ebc = lookup->ebc;
    const uint64_t step = lookup->step;
    if (lookup->eval || !lookup->open || !lookup->waited || lookup->pushed || !grad ||
        (flags & ~(unsigned)EMBER_BACKWARD_WAIT))
        return ebc_fail(ebc, step, EMBER_ERR_INVALID_PARAM, "backward %s",
                        lookup->eval      ? "of an evaluation"
                        : !lookup->open   ? "of a released lookup"
                        : !lookup->waited ? "before its wait"
                        : lookup->pushed  ? "twice"
                        : !grad           ? "of no gradient"
                                          : "with unknown flags");
    const float **per_table = calloc(ebc->ntables, sizeof(*per_table));
    if (!per_table)
        return ebc_fail(ebc, step, EMBER_ERR_NO_MEMORY, "out of memory");
    ember_status_t status = grads_out(ebc, lookup, grad, per_table);
    if (status != EMBER_OK)
        snprintf(ebc->err, sizeof(ebc->err), "the gradients: %s", ember_status_string(status));
    const int wait = (flags & EMBER_BACKWARD_WAIT) != 0;
    if (status == EMBER_OK)
        status = ember_sparse_push(lookup->sparse, (const float *const *)per_table, step, wait,
                                   ebc->err, sizeof(ebc->err));
    free(per_table);
    if (status == EMBER_OK)
        lookup->pushed = 1;
    if (status == EMBER_OK && wait)
        status = ember_sparse_pushes_wait(lookup->sparse, step, ebc->err, sizeof(ebc->err));
    if (status != EMBER_OK)
        return ebc_fail(ebc, step, status, "%s", ebc->err);
    ebc->pushed_upto = step + 1;
    return send_next(ebc, step);
}

void ember_lookup_release(ember_lookup_t *lookup)
{
    if (!lookup || !lookup->open)
        return;
    ember_ebc_t *ebc = lookup->ebc;
    if (!lookup->eval && !lookup->pushed && !ebc->broken) {
        ebc->broken = lookup->step + 1;
        ember_error("lookup",
                    "trainer %d step %llu: released without its backward: the PS wait for its "
                    "gradients, this ebc takes no more training lookups",
                    ebc->trainer, (unsigned long long)lookup->step);
    }
    lookup->open = 0;
}

ember_status_t ember_ebc_flush(ember_ebc_t *ebc)
{
    ember_status_t status =
            ember_pipeline_flush(ebc->pipe, ebc->next_step, ebc->err, sizeof(ebc->err));
    if (status != EMBER_OK)
        return ebc_fail(ebc, ebc->pushed_upto ? ebc->pushed_upto - 1 : 0, status, "%s", ebc->err);
    return EMBER_OK;
}
