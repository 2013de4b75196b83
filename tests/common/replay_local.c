/* ember engine: the synchronous hybrid step, replayed in one process. */
#include "tests/common/replay_local.h"

#include "engine/io/replay_file.h"
#include "engine/ops/dense.h"
#include "engine/ops/half.h"
#include "engine/ops/loss.h"
#include "engine/ops/optimizer.h"

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
    /* per-step accumulators */
    float *d_fc_w, *d_fc_b; /* summed over trainers, then averaged */
    float *d_emb;           /* [rows, dim] summed sparse row grads */
    uint8_t *touched;       /* [rows] */
    int64_t *touched_rows;  /* [rows] */
    size_t ntouched;
    char *err;
    size_t err_length;
} replay_t;

static void replay_msg(replay_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The embedding table as stored (fp32 or fp16). */
static void *replay_table(const replay_t *r)
{
    return r->emb_half ? (void *)r->emb_half : (void *)r->emb;
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

/* Forward + backward of one trainer at one step; adds its gradients into the
 * step accumulators. */
static ember_status_t replay_trainer(replay_t *r, size_t t, size_t s, float *loss_p)
{
    ember_status_t status;
    char name[64], why[1024];
    int64_t *indices = NULL, *offsets = NULL, *targets = NULL, *argmax = NULL;
    int64_t *grad_rows = NULL;
    float *weights = NULL, *pooled = NULL, *logits = NULL, *grad_pooled = NULL;
    float *grad_rows_val = NULL;
    size_t n, bags, nrows = 0;

    status = ember_replay_batch_shape(r->golden, NULL, r->weighted, (uint32_t)t, s, &n, &bags, why,
                                      sizeof(why));
    if (status != EMBER_OK) {
        replay_msg(r, "%s", why);
        return status;
    }
    const int64_t shape_n[1] = {(int64_t)n}, shape_b[1] = {(int64_t)bags};

    snprintf(name, sizeof(name), "t%zu.s%zu.indices", t, s);
    if ((status = load_tensor(r, name, EMBER_DTYPE_I64, 1, shape_n, (void **)&indices)) != EMBER_OK)
        goto out;
    snprintf(name, sizeof(name), "t%zu.s%zu.offsets", t, s);
    if ((status = load_tensor(r, name, EMBER_DTYPE_I64, 1, shape_b, (void **)&offsets)) != EMBER_OK)
        goto out;
    snprintf(name, sizeof(name), "t%zu.s%zu.targets", t, s);
    if ((status = load_tensor(r, name, EMBER_DTYPE_I64, 1, shape_b, (void **)&targets)) != EMBER_OK)
        goto out;
    if (r->weighted) {
        snprintf(name, sizeof(name), "t%zu.s%zu.weights", t, s);
        if ((status = load_tensor(r, name, EMBER_DTYPE_F32, 1, shape_n, (void **)&weights)) !=
            EMBER_OK)
            goto out;
    }

    ember_bag_batch_t batch = {.indices = indices,
                               .n = n,
                               .offsets = offsets,
                               .bags = bags,
                               .weights = weights,
                               .n_weights = weights ? n : 0};
    status = ember_bag_validate(&batch, &r->bag, (int64_t)r->rows, why, sizeof(why));
    if (status != EMBER_OK) {
        replay_msg(r, "trainer %zu step %zu: %s", t, s, why);
        status = EMBER_ERR_FORMAT;
        goto out;
    }

    status = EMBER_ERR_NO_MEMORY;
    pooled = malloc((bags * r->dim + 1) * sizeof(float));
    grad_pooled = malloc((bags * r->dim + 1) * sizeof(float));
    logits = malloc((bags * r->classes + 1) * sizeof(float));
    grad_rows = malloc((n + 1) * sizeof(int64_t));
    grad_rows_val = malloc((n * r->dim + 1) * sizeof(float));
    if (r->bag.mode == EMBER_BAG_MAX)
        argmax = malloc((bags * r->dim + 1) * sizeof(int64_t));
    if (!pooled || !grad_pooled || !logits || !grad_rows || !grad_rows_val ||
        (r->bag.mode == EMBER_BAG_MAX && !argmax)) {
        replay_msg(r, "trainer %zu step %zu: out of memory", t, s);
        goto out;
    }

    /* With fp16 replies the PS rounds its pooled sum (or max) and the
     * trainer divides a mean's sum by the bag's count after widening it. */
    ember_bag_opts_t pool = r->bag;
    if (r->half_replies && pool.mode == EMBER_BAG_MEAN)
        pool.mode = EMBER_BAG_SUM;
    if ((status = ember_bag_forward_typed(replay_table(r), r->emb_dtype, (int64_t)r->rows, r->dim,
                                          &batch, &pool, pooled, argmax)) != EMBER_OK)
        goto out;
    if (r->half_replies) {
        for (size_t i = 0; i < bags * r->dim; i++)
            pooled[i] = ember_half_to_float(ember_float_to_half(pooled[i]));
        for (size_t b = 0; r->bag.mode == EMBER_BAG_MEAN && b < bags; b++) {
            size_t end = b + 1 < bags ? (size_t)batch.offsets[b + 1] : batch.n;
            size_t count = end - (size_t)batch.offsets[b];
            float inv = count ? 1.0f / (float)count : 0.0f;
            for (size_t d = 0; count && d < r->dim; d++)
                pooled[b * r->dim + d] *= inv;
        }
    }
    if ((status = ember_linear_forward(pooled, bags, r->dim, r->classes, r->fc_w, r->fc_b,
                                       logits)) != EMBER_OK)
        goto out;
    /* The logits buffer becomes their gradient (in place is allowed). */
    status = ember_cross_entropy(logits, bags, r->classes, targets, loss_p, logits);
    if (status != EMBER_OK) {
        replay_msg(r, "trainer %zu step %zu: cross entropy failed: %s", t, s,
                   ember_status_string(status));
        goto out;
    }
    if ((status = ember_linear_backward(pooled, bags, r->dim, r->classes, r->fc_w, logits, 1,
                                        grad_pooled, r->d_fc_w, r->d_fc_b)) != EMBER_OK ||
        (status = ember_bag_backward_typed(replay_table(r), r->emb_dtype, (int64_t)r->rows, r->dim,
                                           &batch, &r->bag, grad_pooled, argmax, grad_rows,
                                           grad_rows_val, &nrows, NULL)) != EMBER_OK)
        goto out;

    /* Sum this trainer's rows into the step's accumulator (the PS's job). */
    for (size_t u = 0; u < nrows; u++) {
        size_t row = (size_t)grad_rows[u];
        float *dst = r->d_emb + row * r->dim;
        const float *src = grad_rows_val + u * r->dim;
        if (!r->touched[row]) {
            r->touched[row] = 1;
            r->touched_rows[r->ntouched++] = (int64_t)row;
            memset(dst, 0, r->dim * sizeof(float));
        }
        for (size_t d = 0; d < r->dim; d++)
            dst[d] += src[d];
    }

out:
    free(argmax);
    free(grad_rows_val);
    free(grad_rows);
    free(logits);
    free(grad_pooled);
    free(pooled);
    free(weights);
    free(targets);
    free(offsets);
    free(indices);
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

ember_status_t ember_replay_local(const ember_st_file_t *golden, ember_replay_result_t *result_p,
                                  char *err, size_t err_length)
{
    return ember_replay_local_typed(golden, EMBER_DTYPE_F32, 0, result_p, err, err_length);
}

ember_status_t ember_replay_local_typed(const ember_st_file_t *golden, ember_dtype_t emb_dtype,
                                        int half_replies, ember_replay_result_t *result_p,
                                        char *err, size_t err_length)
{
    replay_t r = {.golden = golden,
                  .err = err,
                  .err_length = err_length,
                  .emb_dtype = emb_dtype,
                  .half_replies = half_replies};
    ember_opt_t *opt_emb = NULL, *opt_w = NULL, *opt_b = NULL;
    ember_opt_config_t cfg;
    float *losses = NULL, *compact = NULL;
    ember_replay_info_t info;
    ember_status_t status;
    char why[1024];

    if (!golden || !result_p || (emb_dtype != EMBER_DTYPE_F32 && emb_dtype != EMBER_DTYPE_F16))
        return EMBER_ERR_INVALID_PARAM;
    if (err && err_length)
        err[0] = '\0';
    /* What ember-train checks, with the same words: every value in range
     * and every tensor of its shape before any is used or sized from. */
    if ((status = ember_replay_info_read(golden, NULL, &info, why, sizeof(why))) != EMBER_OK ||
        (status = ember_replay_check_tensors(golden, NULL, &info, why, sizeof(why))) != EMBER_OK) {
        replay_msg(&r, "%s", why);
        return status;
    }
    if (strcmp(info.optimizer, "sgd") != 0) {
        replay_msg(&r, "optimizer '%s' is not supported by the replay (sgd)", info.optimizer);
        return EMBER_ERR_UNSUPPORTED;
    }
    r.rows = (size_t)info.rows;
    r.dim = info.dim;
    r.classes = info.classes;
    r.trainers = info.trainers;
    r.steps = info.steps;
    r.lr = (float)info.lr; /* in a float's range: checked */
    r.bag.padding_idx = -1;
    r.weighted = info.per_sample_weights != 0;
    r.sparse_mean = strcmp(info.sparse_reduce, "mean") == 0;
    if (ember_bag_mode_parse(info.mode, &r.bag.mode) != EMBER_OK)
        return EMBER_ERR_FORMAT; /* not reached: the mode was checked */

    const int64_t shape_emb[2] = {info.rows, info.dim}, shape_w[2] = {info.classes, info.dim};
    const int64_t shape_b[1] = {info.classes};
    if ((status = load_tensor(&r, "emb.weight", EMBER_DTYPE_F32, 2, shape_emb, (void **)&r.emb)) !=
                EMBER_OK ||
        (status = load_tensor(&r, "fc.weight", EMBER_DTYPE_F32, 2, shape_w, (void **)&r.fc_w)) !=
                EMBER_OK ||
        (status = load_tensor(&r, "fc.bias", EMBER_DTYPE_F32, 1, shape_b, (void **)&r.fc_b)) !=
                EMBER_OK)
        goto out;

    status = EMBER_ERR_NO_MEMORY;
    if (emb_dtype == EMBER_DTYPE_F16) {
        /* The initial rows rounded, as a PS of fp16 rows loads them. */
        if (!(r.emb_half = malloc(r.rows * r.dim * sizeof(uint16_t))))
            goto out;
        ember_float_to_half_n(r.emb, r.emb_half, r.rows * r.dim);
    }
    r.d_fc_w = malloc(r.classes * r.dim * sizeof(float));
    r.d_fc_b = malloc(r.classes * sizeof(float));
    r.d_emb = malloc(r.rows * r.dim * sizeof(float));
    r.touched = calloc(r.rows, 1);
    r.touched_rows = malloc(r.rows * sizeof(int64_t));
    compact = malloc(r.rows * r.dim * sizeof(float));
    losses = malloc((r.steps * r.trainers + 1) * sizeof(float));
    if (!r.d_fc_w || !r.d_fc_b || !r.d_emb || !r.touched || !r.touched_rows || !compact || !losses)
        goto out;

    ember_opt_config_default(EMBER_OPT_SGD, r.lr, &cfg);
    if ((status = ember_opt_create(&cfg, r.rows, r.dim, EMBER_OPT_SPARSE, &opt_emb)) != EMBER_OK ||
        (status = ember_opt_create(&cfg, 1, r.classes * r.dim, EMBER_OPT_DENSE, &opt_w)) !=
                EMBER_OK ||
        (status = ember_opt_create(&cfg, 1, r.classes, EMBER_OPT_DENSE, &opt_b)) != EMBER_OK)
        goto out;

    for (size_t s = 0; s < r.steps; s++) {
        memset(r.d_fc_w, 0, r.classes * r.dim * sizeof(float));
        memset(r.d_fc_b, 0, r.classes * sizeof(float));
        r.ntouched = 0;
        /* Every trainer sees the same parameters: nothing is updated until
         * all of them have run backward (the sync mode's barrier). */
        for (size_t t = 0; t < r.trainers; t++) {
            status = replay_trainer(&r, t, s, &losses[s * r.trainers + t]);
            if (status != EMBER_OK)
                goto out;
        }

        /* Dense: the allreduce average. */
        const float inv_t = 1.0f / (float)r.trainers;
        for (size_t i = 0; i < r.classes * r.dim; i++)
            r.d_fc_w[i] *= inv_t;
        for (size_t i = 0; i < r.classes; i++)
            r.d_fc_b[i] *= inv_t;

        /* Sparse: sorted unique rows, summed (or averaged) over trainers. */
        qsort(r.touched_rows, r.ntouched, sizeof(int64_t), cmp_i64);
        const float scale = r.sparse_mean ? inv_t : 1.0f;
        for (size_t u = 0; u < r.ntouched; u++) {
            size_t row = (size_t)r.touched_rows[u];
            for (size_t d = 0; d < r.dim; d++)
                compact[u * r.dim + d] = r.d_emb[row * r.dim + d] * scale;
            r.touched[row] = 0;
        }
        if ((status = ember_opt_step_dense(opt_w, r.fc_w, r.d_fc_w, r.classes * r.dim)) !=
                    EMBER_OK ||
            (status = ember_opt_step_dense(opt_b, r.fc_b, r.d_fc_b, r.classes)) != EMBER_OK ||
            (status = ember_opt_step_sparse_typed(opt_emb, replay_table(&r), r.emb_dtype, r.dim,
                                                  r.touched_rows, compact, r.ntouched)) != EMBER_OK)
            goto out;
    }
    if (r.emb_half)
        ember_half_to_float_n(r.emb_half, r.emb, r.rows * r.dim);

    result_p->rows = r.rows;
    result_p->dim = r.dim;
    result_p->classes = r.classes;
    result_p->trainers = r.trainers;
    result_p->steps = r.steps;
    result_p->losses = losses;
    result_p->emb = r.emb;
    result_p->fc_weight = r.fc_w;
    result_p->fc_bias = r.fc_b;
    /* The result owns these now. */
    losses = NULL;
    r.emb = r.fc_w = r.fc_b = NULL;
    status = EMBER_OK;

out:
    ember_opt_destroy(opt_b);
    ember_opt_destroy(opt_w);
    ember_opt_destroy(opt_emb);
    free(losses);
    free(compact);
    free(r.touched_rows);
    free(r.touched);
    free(r.d_emb);
    free(r.d_fc_b);
    free(r.d_fc_w);
    free(r.fc_b);
    free(r.fc_w);
    free(r.emb);
    free(r.emb_half);
    return status;
}
