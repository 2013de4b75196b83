/* ember engine: the synchronous hybrid step, replayed in one process. */
#include "tests/common/replay_local.h"

#include "engine/ops/dense.h"
#include "engine/ops/half.h"
#include "engine/ops/loss.h"
#include "engine/ops/optimizer.h"
#include "models/tutorial/replay_file.h"

#include <ember/embedding_bag.h>
#include <ember/log.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const ember_st_file_t *golden;
    size_t rows, dim, classes, trainers, steps;
    float lr;
    ember_bag_opts_t bag;
    int weighted;
    int sparse_mean;
    /* parameters; the table as the PS stores it: emb (fp32), or emb_half
     * (fp16) with emb widened from it at the end */
    float *emb, *fc_w, *fc_b;
    ember_dtype_t emb_dtype;
    uint16_t *emb_half;
    int half_replies; /* the PS's reply rounded to fp16 (one PS) */
    ember_opt_t *opt_emb, *opt_w, *opt_b;
    /* per-step accumulators */
    float *d_fc_w, *d_fc_b; /* summed over trainers, then averaged */
    float *d_emb;           /* [rows, dim] summed sparse row grads */
    uint8_t *touched;       /* [rows] */
    int64_t *touched_rows;  /* [rows] */
    size_t ntouched;
    float *compact; /* [rows, dim] the touched rows' gradients, in row order */
    float *losses;  /* [steps, trainers] */
    char *err;
    size_t err_length;
} replay_t;

/* One trainer's step: its batch as the file holds it, and its buffers. */
typedef struct {
    size_t t, s;
    int64_t *indices, *offsets, *targets;
    float *weights;
    ember_bag_batch_t batch;
    float *pooled, *grad_pooled, *logits;
    int64_t *argmax;
    ember_bag_grad_t grad; /* the rows' gradient */
} replay_step_t;

static void replay_msg(replay_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The embedding table as stored (fp32 or fp16). */
static void *replay_rows(const replay_t *r)
{
    return r->emb_half ? (void *)r->emb_half : (void *)r->emb;
}

static ember_bag_table_t replay_table(const replay_t *r)
{
    return (ember_bag_table_t){
            .data = replay_rows(r), .dtype = r->emb_dtype, .rows = (int64_t)r->rows, .dim = r->dim};
}

static void replay_msg(replay_t *r, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ember_error("replay", "%s", line);
    if (r->err && r->err_length)
        snprintf(r->err, r->err_length, "%s", line);
}

/* Copy tensor @name, checking its dtype and exact shape (ndim dims). */
static ember_status_t load_tensor(replay_t *r, const char *name, ember_dtype_t dtype, size_t ndim,
                                  const int64_t *shape, void **data_p)
{
    char why[1024];
    ember_status_t status =
            ember_replay_read(r->golden, NULL, name, dtype, ndim, shape, data_p, why, sizeof(why));
    if (status != EMBER_OK)
        replay_msg(r, "%s", why);
    return status;
}

/* Tensor t{t}.s{s}.@what of the step's batch, of @count values. */
static ember_status_t load_batch_tensor(replay_t *r, const replay_step_t *st, const char *what,
                                        ember_dtype_t dtype, size_t count, void **data_p)
{
    char name[64];
    const int64_t shape[1] = {(int64_t)count};
    snprintf(name, sizeof(name), "t%zu.s%zu.%s", st->t, st->s, what);
    return load_tensor(r, name, dtype, 1, shape, data_p);
}

/* The step's batch, read and validated as a trainer validates it. */
static ember_status_t step_load(replay_t *r, replay_step_t *st)
{
    char why[1024];
    size_t n, bags;
    ember_status_t status = ember_replay_batch_shape(r->golden, NULL, r->weighted, (uint32_t)st->t,
                                                     st->s, &n, &bags, why, sizeof(why));
    if (status != EMBER_OK) {
        replay_msg(r, "%s", why);
        return status;
    }
    EMBER_CHECK(load_batch_tensor(r, st, "indices", EMBER_DTYPE_I64, n, (void **)&st->indices));
    EMBER_CHECK(load_batch_tensor(r, st, "offsets", EMBER_DTYPE_I64, bags, (void **)&st->offsets));
    EMBER_CHECK(load_batch_tensor(r, st, "targets", EMBER_DTYPE_I64, bags, (void **)&st->targets));
    if (r->weighted)
        EMBER_CHECK(load_batch_tensor(r, st, "weights", EMBER_DTYPE_F32, n, (void **)&st->weights));
    st->batch = (ember_bag_batch_t){.indices = st->indices,
                                    .n = n,
                                    .offsets = st->offsets,
                                    .bags = bags,
                                    .weights = st->weights,
                                    .n_weights = st->weights ? n : 0};
    if (ember_bag_validate(&st->batch, &r->bag, (int64_t)r->rows, why, sizeof(why)) != EMBER_OK) {
        replay_msg(r, "trainer %zu step %zu: %s", st->t, st->s, why);
        return EMBER_ERR_FORMAT;
    }
    return EMBER_OK;
}

static ember_status_t step_alloc(replay_t *r, replay_step_t *st)
{
    const size_t n = st->batch.n, bags = st->batch.bags;
    st->pooled = malloc((bags * r->dim + 1) * sizeof(float));
    st->grad_pooled = malloc((bags * r->dim + 1) * sizeof(float));
    st->logits = malloc((bags * r->classes + 1) * sizeof(float));
    st->grad.rows = malloc((n + 1) * sizeof(int64_t));
    st->grad.grad = malloc((n * r->dim + 1) * sizeof(float));
    if (r->bag.mode == EMBER_BAG_MAX)
        st->argmax = malloc((bags * r->dim + 1) * sizeof(int64_t));
    if (!st->pooled || !st->grad_pooled || !st->logits || !st->grad.rows || !st->grad.grad ||
        (r->bag.mode == EMBER_BAG_MAX && !st->argmax)) {
        replay_msg(r, "trainer %zu step %zu: out of memory", st->t, st->s);
        return EMBER_ERR_NO_MEMORY;
    }
    return EMBER_OK;
}

/* With fp16 replies the PS rounds its pooled sum (or max) and the trainer
 * divides a mean's sum by the bag's count after widening it. */
static void step_round_replies(const replay_t *r, replay_step_t *st)
{
    const ember_bag_batch_t *batch = &st->batch;
    float *pooled = st->pooled;
    for (size_t i = 0; i < batch->bags * r->dim; i++)
        pooled[i] = ember_half_to_float(ember_float_to_half(pooled[i]));
    for (size_t b = 0; r->bag.mode == EMBER_BAG_MEAN && b < batch->bags; b++) {
        size_t end = b + 1 < batch->bags ? (size_t)batch->offsets[b + 1] : batch->n;
        size_t count = end - (size_t)batch->offsets[b];
        float inv = count ? 1.0f / (float)count : 0.0f;
        for (size_t d = 0; count && d < r->dim; d++)
            pooled[b * r->dim + d] *= inv;
    }
}

/* The lookup: the pooled input of the dense layer, as the PS answers it. */
static ember_status_t step_pool(const replay_t *r, replay_step_t *st)
{
    const ember_bag_table_t table = replay_table(r);
    ember_bag_opts_t pool = r->bag;
    if (r->half_replies && pool.mode == EMBER_BAG_MEAN)
        pool.mode = EMBER_BAG_SUM;
    EMBER_CHECK(ember_bag_forward(&table, &st->batch, &pool, st->pooled, st->argmax));
    if (r->half_replies)
        step_round_replies(r, st);
    return EMBER_OK;
}

/* The dense layer, the loss and their backward, into the step's sums. */
static ember_status_t step_dense(replay_t *r, replay_step_t *st, float *loss_p)
{
    const size_t bags = st->batch.bags;
    EMBER_CHECK(ember_linear_forward(st->pooled, bags, r->dim, r->classes, r->fc_w, r->fc_b,
                                     st->logits));
    /* The logits buffer becomes their gradient (in place is allowed). */
    ember_status_t status =
            ember_cross_entropy(st->logits, bags, r->classes, st->targets, loss_p, st->logits);
    if (status != EMBER_OK) {
        replay_msg(r, "trainer %zu step %zu: cross entropy failed: %s", st->t, st->s,
                   ember_status_string(status));
        return status;
    }
    return ember_linear_backward(st->pooled, bags, r->dim, r->classes, r->fc_w, st->logits, 1,
                                 st->grad_pooled, r->d_fc_w, r->d_fc_b);
}

/* This trainer's rows summed into the step's accumulator (the PS's job). */
static void step_accumulate(replay_t *r, const replay_step_t *st)
{
    for (size_t u = 0; u < st->grad.nrows; u++) {
        size_t row = (size_t)st->grad.rows[u];
        float *dst = r->d_emb + row * r->dim;
        const float *src = st->grad.grad + u * r->dim;
        if (!r->touched[row]) {
            r->touched[row] = 1;
            r->touched_rows[r->ntouched++] = (int64_t)row;
            memset(dst, 0, r->dim * sizeof(float));
        }
        for (size_t d = 0; d < r->dim; d++)
            dst[d] += src[d];
    }
}

static void step_free(replay_step_t *st)
{
    free(st->argmax);
    free(st->grad.grad);
    free(st->grad.rows);
    free(st->logits);
    free(st->grad_pooled);
    free(st->pooled);
    free(st->weights);
    free(st->targets);
    free(st->offsets);
    free(st->indices);
}

/* Forward + backward of trainer @t at step @s; adds its gradients into the
 * step accumulators. */
static ember_status_t replay_trainer(replay_t *r, size_t t, size_t s, float *loss_p)
{
    replay_step_t st = {.t = t, .s = s};
    const ember_bag_table_t table = replay_table(r);
    ember_status_t status;

    EMBER_CHECK_GOTO(step_load(r, &st), status, out);
    EMBER_CHECK_GOTO(step_alloc(r, &st), status, out);
    EMBER_CHECK_GOTO(step_pool(r, &st), status, out);
    EMBER_CHECK_GOTO(step_dense(r, &st, loss_p), status, out);
    EMBER_CHECK_GOTO(
            ember_bag_backward(&table, &st.batch, &r->bag, st.grad_pooled, st.argmax, &st.grad),
            status, out);
    step_accumulate(r, &st);
out:
    step_free(&st);
    return status;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void ember_replay_result_cleanup(ember_replay_result_t *result)
{
    if (!result)
        return;
    free(result->losses);
    free(result->emb);
    free(result->fc_weight);
    free(result->fc_bias);
    memset(result, 0, sizeof(*result));
}

/* The file's metadata, checked as ember-train checks it (the same words:
 * every value in range and every tensor of its shape before any is used or
 * sized from), into @r. */
static ember_status_t replay_read_info(replay_t *r)
{
    ember_replay_info_t info;
    char why[1024];
    ember_status_t status = ember_replay_info_read(r->golden, NULL, &info, why, sizeof(why));
    if (status == EMBER_OK)
        status = ember_replay_check_tensors(r->golden, NULL, &info, why, sizeof(why));
    if (status != EMBER_OK) {
        replay_msg(r, "%s", why);
        return status;
    }
    if (strcmp(info.optimizer, "sgd") != 0) {
        replay_msg(r, "optimizer '%s' is not supported by the replay (sgd)", info.optimizer);
        return EMBER_ERR_UNSUPPORTED;
    }
    r->rows = (size_t)info.rows;
    r->dim = info.dim;
    r->classes = info.classes;
    r->trainers = info.trainers;
    r->steps = info.steps;
    r->lr = (float)info.lr; /* in a float's range: checked */
    r->bag.padding_idx = -1;
    r->weighted = info.per_sample_weights != 0;
    r->sparse_mean = strcmp(info.sparse_reduce, "mean") == 0;
    if (ember_bag_mode_parse(info.mode, &r->bag.mode) != EMBER_OK)
        return EMBER_ERR_FORMAT; /* not reached: the mode was checked */
    return EMBER_OK;
}

/* The initial parameters, and the table as the PS stores it. */
static ember_status_t replay_load_params(replay_t *r)
{
    const int64_t shape_emb[2] = {(int64_t)r->rows, (int64_t)r->dim};
    const int64_t shape_w[2] = {(int64_t)r->classes, (int64_t)r->dim};
    const int64_t shape_b[1] = {(int64_t)r->classes};
    EMBER_CHECK(load_tensor(r, "emb.weight", EMBER_DTYPE_F32, 2, shape_emb, (void **)&r->emb));
    EMBER_CHECK(load_tensor(r, "fc.weight", EMBER_DTYPE_F32, 2, shape_w, (void **)&r->fc_w));
    EMBER_CHECK(load_tensor(r, "fc.bias", EMBER_DTYPE_F32, 1, shape_b, (void **)&r->fc_b));
    if (r->emb_dtype == EMBER_DTYPE_F16) {
        /* The initial rows rounded, as a PS of fp16 rows loads them. */
        if (!(r->emb_half = malloc(r->rows * r->dim * sizeof(uint16_t))))
            return EMBER_ERR_NO_MEMORY;
        ember_float_to_half_n(r->emb, r->emb_half, r->rows * r->dim);
    }
    return EMBER_OK;
}

/* The accumulators and the optimizers (plain SGD, as the file's). */
static ember_status_t replay_alloc(replay_t *r)
{
    ember_opt_config_t cfg;
    r->d_fc_w = malloc(r->classes * r->dim * sizeof(float));
    r->d_fc_b = malloc(r->classes * sizeof(float));
    r->d_emb = malloc(r->rows * r->dim * sizeof(float));
    r->touched = calloc(r->rows, 1);
    r->touched_rows = malloc(r->rows * sizeof(int64_t));
    r->compact = malloc(r->rows * r->dim * sizeof(float));
    r->losses = malloc((r->steps * r->trainers + 1) * sizeof(float));
    if (!r->d_fc_w || !r->d_fc_b || !r->d_emb || !r->touched || !r->touched_rows || !r->compact ||
        !r->losses)
        return EMBER_ERR_NO_MEMORY;
    ember_opt_config_default(EMBER_OPT_SGD, r->lr, &cfg);
    EMBER_CHECK(ember_opt_create(&cfg, r->rows, r->dim, EMBER_OPT_SPARSE, &r->opt_emb));
    EMBER_CHECK(ember_opt_create(&cfg, 1, r->classes * r->dim, EMBER_OPT_DENSE, &r->opt_w));
    return ember_opt_create(&cfg, 1, r->classes, EMBER_OPT_DENSE, &r->opt_b);
}

/* The step's update once every trainer ran: the dense gradients averaged
 * (the allreduce), the touched rows sorted and summed (or averaged) over
 * trainers (the PS), then SGD on both. */
static ember_status_t replay_apply(replay_t *r)
{
    const float inv_t = 1.0f / (float)r->trainers;
    for (size_t i = 0; i < r->classes * r->dim; i++)
        r->d_fc_w[i] *= inv_t;
    for (size_t i = 0; i < r->classes; i++)
        r->d_fc_b[i] *= inv_t;

    qsort(r->touched_rows, r->ntouched, sizeof(int64_t), cmp_i64);
    const float scale = r->sparse_mean ? inv_t : 1.0f;
    for (size_t u = 0; u < r->ntouched; u++) {
        size_t row = (size_t)r->touched_rows[u];
        for (size_t d = 0; d < r->dim; d++)
            r->compact[u * r->dim + d] = r->d_emb[row * r->dim + d] * scale;
        r->touched[row] = 0;
    }
    const ember_opt_values_t values = {
            .data = replay_rows(r), .dtype = r->emb_dtype, .dim = r->dim};
    EMBER_CHECK(ember_opt_step_dense(r->opt_w, r->fc_w, r->d_fc_w, r->classes * r->dim));
    EMBER_CHECK(ember_opt_step_dense(r->opt_b, r->fc_b, r->d_fc_b, r->classes));
    return ember_opt_step_sparse(r->opt_emb, &values, r->touched_rows, r->compact, r->ntouched);
}

/* Every trainer sees the same parameters: nothing is updated until all of
 * them have run backward (the sync mode's barrier). */
static ember_status_t replay_step(replay_t *r, size_t s)
{
    memset(r->d_fc_w, 0, r->classes * r->dim * sizeof(float));
    memset(r->d_fc_b, 0, r->classes * sizeof(float));
    r->ntouched = 0;
    for (size_t t = 0; t < r->trainers; t++)
        EMBER_CHECK(replay_trainer(r, t, s, &r->losses[s * r->trainers + t]));
    return replay_apply(r);
}

/* The final parameters handed to @result_p, which owns them from now. */
static void replay_take_result(replay_t *r, ember_replay_result_t *result_p)
{
    if (r->emb_half)
        ember_half_to_float_n(r->emb_half, r->emb, r->rows * r->dim);
    result_p->rows = r->rows;
    result_p->dim = r->dim;
    result_p->classes = r->classes;
    result_p->trainers = r->trainers;
    result_p->steps = r->steps;
    result_p->losses = r->losses;
    result_p->emb = r->emb;
    result_p->fc_weight = r->fc_w;
    result_p->fc_bias = r->fc_b;
    r->losses = NULL;
    r->emb = r->fc_w = r->fc_b = NULL;
}

static void replay_free(replay_t *r)
{
    ember_opt_destroy(r->opt_b);
    ember_opt_destroy(r->opt_w);
    ember_opt_destroy(r->opt_emb);
    free(r->losses);
    free(r->compact);
    free(r->touched_rows);
    free(r->touched);
    free(r->d_emb);
    free(r->d_fc_b);
    free(r->d_fc_w);
    free(r->fc_b);
    free(r->fc_w);
    free(r->emb);
    free(r->emb_half);
}

ember_status_t ember_replay_local(const ember_st_file_t *golden, const ember_replay_opts_t *opts,
                                  ember_replay_result_t *result_p, char *err, size_t err_length)
{
    const ember_replay_opts_t defaults = {.emb_dtype = EMBER_DTYPE_F32};
    if (!opts)
        opts = &defaults;
    replay_t r = {.golden = golden,
                  .err = err,
                  .err_length = err_length,
                  .emb_dtype = opts->emb_dtype,
                  .half_replies = opts->half_replies};
    ember_status_t status;

    if (!golden || !result_p ||
        (opts->emb_dtype != EMBER_DTYPE_F32 && opts->emb_dtype != EMBER_DTYPE_F16))
        return EMBER_ERR_INVALID_PARAM;
    if (err && err_length)
        err[0] = '\0';
    EMBER_CHECK_GOTO(replay_read_info(&r), status, out);
    EMBER_CHECK_GOTO(replay_load_params(&r), status, out);
    EMBER_CHECK_GOTO(replay_alloc(&r), status, out);
    for (size_t s = 0; s < r.steps; s++)
        EMBER_CHECK_GOTO(replay_step(&r, s), status, out);
    replay_take_result(&r, result_p);
    status = EMBER_OK;
out:
    replay_free(&r);
    return status;
}
