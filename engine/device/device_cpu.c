/*
 * engine/device/device_cpu: the "cpu" device backend.  Memory is host memory and
 * every op is the engine's own (engine/ops/embedding_bag.c, dense.c, loss.c);
 * the allreduce is the host ring over the transport (engine/comm/allreduce.c),
 * absent from a GPU-only build (EMBER_DEVICE_NO_TRANSPORT).
 */
#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/log.h>

#include "engine/device/device_cpu.h"
#include "engine/ops/bag_parts.h"
#include "engine/ops/crossnet.h"
#include "engine/ops/dense.h"
#include "engine/ops/interaction.h"
#include "engine/ops/loss.h"
#include "engine/ops/optimizer.h"

#include "common/reserve.h"
#ifndef EMBER_DEVICE_NO_TRANSPORT
#include "engine/comm/allreduce.h"
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The CPU backend's state: the fused op's row gradients, kept between
 * calls (grow-only; a device is used by one thread at a time). */
typedef struct {
    int64_t *update_rows;
    size_t update_rows_cap;
    float *update_grad;
    size_t update_grad_cap;
    float *crossnet_scratch; /* the cross layers' backward's, kept between steps */
    size_t crossnet_scratch_cap;
} cpu_dev_t;

static ember_status_t cpu_open(int local_rank, void **impl_p)
{
    cpu_dev_t *cpu = calloc(1, sizeof(*cpu));
    if (!cpu)
        return EMBER_ERR_NO_MEMORY;
    ember_debug("device", "device cpu (host memory, CBLAS)");
    *impl_p = cpu;
    return EMBER_OK;
}

static void cpu_close(void *impl)
{
    cpu_dev_t *cpu = impl;
    if (!cpu)
        return;
    free(cpu->update_rows);
    free(cpu->update_grad);
    free(cpu->crossnet_scratch);
    free(cpu);
}

static ember_status_t cpu_mem_alloc(ember_device_t *dev, size_t bytes, void **ptr_p)
{
    void *ptr;

    if (bytes == 0) {
        *ptr_p = NULL;
        return EMBER_OK;
    }
    /* 64-byte alignment: what the CUDA allocator gives, and what vector
     * loads like. */
    ptr = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!ptr) {
        ember_error("device", "cpu: cannot allocate %zu bytes", bytes);
        return EMBER_ERR_NO_MEMORY;
    }
    *ptr_p = ptr;
    return EMBER_OK;
}

static void cpu_mem_free(ember_device_t *dev, void *ptr)
{
    free(ptr);
}

static ember_status_t cpu_mem_copy(ember_device_t *dev, void *dst, const void *src, size_t bytes,
                                   ember_copy_kind_t kind)
{
    if (bytes > 0 && (!dst || !src))
        return EMBER_ERR_INVALID_PARAM;
    if (bytes > 0)
        memmove(dst, src, bytes);
    return EMBER_OK;
}

static ember_status_t cpu_mem_zero(ember_device_t *dev, void *ptr, size_t bytes)
{
    if (bytes > 0 && !ptr)
        return EMBER_ERR_INVALID_PARAM;
    if (bytes > 0)
        memset(ptr, 0, bytes);
    return EMBER_OK;
}

static ember_status_t cpu_synchronize(ember_device_t *dev)
{
    return EMBER_OK;
}

static ember_status_t cpu_bag_forward(ember_device_t *dev, const float *table, int64_t rows,
                                      size_t dim, const ember_bag_batch_t *batch,
                                      const ember_bag_opts_t *opts, float *out_p, int64_t *argmax_p)
{
    const ember_bag_table_t bag_table = {
            .data = table, .dtype = EMBER_DTYPE_F32, .rows = rows, .dim = dim};
    return ember_bag_forward(&bag_table, batch, opts, out_p, argmax_p);
}

static ember_status_t cpu_bag_backward(ember_device_t *dev, const float *table, int64_t rows,
                                       size_t dim, const ember_bag_batch_t *batch,
                                       const ember_bag_opts_t *opts, const float *grad_out,
                                       const int64_t *argmax, int64_t *grad_rows_p, float *grad_p,
                                       size_t *nrows_p, float *grad_weights_p)
{
    const ember_bag_table_t bag_table = {
            .data = table, .dtype = EMBER_DTYPE_F32, .rows = rows, .dim = dim};
    if (!nrows_p)
        return EMBER_ERR_INVALID_PARAM;
    ember_bag_grad_t out = {.rows = grad_rows_p, .grad = grad_p, .grad_weights = grad_weights_p};
    EMBER_CHECK(ember_bag_backward(&bag_table, batch, opts, grad_out, argmax, &out));
    *nrows_p = out.nrows;
    return EMBER_OK;
}

_Static_assert(EMBER_OPT_SGD == 0 && EMBER_OPT_ADAGRAD == 1 && EMBER_OPT_ROWWISE_ADAGRAD == 2 &&
                       EMBER_OPT_ADAM == 3,
               "ember_device_opt_t's kinds are ember_opt_kind_t's");

/* @opt as the engine's optimizer config (the hyper-parameters a step reads). */
static ember_status_t cpu_opt_config(const ember_device_opt_t *opt, ember_opt_config_t *cfg_p)
{
    if (!opt || (unsigned)opt->kind > EMBER_OPT_ADAM) {
        ember_error("device", "cpu: bag backward update: unknown optimizer kind %d",
                    opt ? opt->kind : -1);
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_opt_config_default((ember_opt_kind_t)opt->kind, opt->lr, cfg_p);
    cfg_p->momentum = opt->momentum;
    cfg_p->dampening = opt->dampening;
    cfg_p->nesterov = opt->nesterov;
    cfg_p->lr_decay = opt->lr_decay;
    cfg_p->eps = opt->eps;
    cfg_p->beta1 = opt->beta1;
    cfg_p->beta2 = opt->beta2;
    return EMBER_OK;
}

/* The reference: the CPU backward's sorted unique rows and their
 * gradients, then the engine's sparse step on the borrowed state. */
static ember_status_t cpu_bag_backward_update(ember_device_t *dev, float *table, int64_t rows,
                                              size_t dim, const ember_bag_batch_t *batch,
                                              const ember_bag_opts_t *opts, const float *grad_out,
                                              const int64_t *argmax, const ember_device_opt_t *opt)
{
    ember_opt_config_t cfg;
    EMBER_CHECK(cpu_opt_config(opt, &cfg));
    if (!batch || rows < 0 || dim == 0) {
        ember_error("device", "cpu: bag backward update: invalid arguments");
        return EMBER_ERR_INVALID_PARAM;
    }
    cpu_dev_t *cpu = ember_device_impl(dev);
    const size_t n = batch->n;
    if (n > SIZE_MAX / dim || !EMBER_RESERVE(cpu->update_rows, cpu->update_rows_cap, n) ||
        !EMBER_RESERVE(cpu->update_grad, cpu->update_grad_cap, n * dim)) {
        ember_error("device", "cpu: bag backward update: no memory for %zu entries", n);
        return EMBER_ERR_NO_MEMORY;
    }
    const ember_bag_table_t bag_table = {
            .data = table, .dtype = EMBER_DTYPE_F32, .rows = rows, .dim = dim};
    ember_bag_grad_t out = {.rows = cpu->update_rows, .grad = cpu->update_grad};
    EMBER_CHECK(ember_bag_backward(&bag_table, batch, opts, grad_out, argmax, &out));
    const ember_opt_bufs_t bufs = {.buf0 = opt->state0,
                                   .buf1 = opt->state1,
                                   .started = opt->started,
                                   .row_step = opt->row_step};
    return ember_opt_step_sparse_bufs(&cfg, opt->step, &bufs, table, (size_t)rows, dim, out.rows,
                                      out.grad, out.nrows);
}

static ember_status_t cpu_linear_forward(ember_device_t *dev, const float *x, size_t batch,
                                         size_t in, size_t out, const float *weight,
                                         const float *bias, float *y_p)
{
    return ember_linear_forward(x, batch, in, out, weight, bias, y_p);
}

static ember_status_t cpu_linear_backward(ember_device_t *dev, const float *x, size_t batch,
                                          size_t in, size_t out, const float *weight,
                                          const float *grad_y, int accumulate, float *grad_x_p,
                                          float *grad_weight_p, float *grad_bias_p)
{
    return ember_linear_backward(x, batch, in, out, weight, grad_y, accumulate, grad_x_p,
                                 grad_weight_p, grad_bias_p);
}

static ember_status_t cpu_relu_forward(ember_device_t *dev, const float *x, size_t n, float *y_p)
{
    if (n > 0 && (!x || !y_p))
        return EMBER_ERR_INVALID_PARAM;
    ember_relu_forward(x, n, y_p);
    return EMBER_OK;
}

static ember_status_t cpu_relu_backward(ember_device_t *dev, const float *x, const float *grad_y,
                                        size_t n, float *grad_x_p)
{
    if (n > 0 && (!x || !grad_y || !grad_x_p))
        return EMBER_ERR_INVALID_PARAM;
    ember_relu_backward(x, grad_y, n, grad_x_p);
    return EMBER_OK;
}

static ember_status_t cpu_cross_entropy(ember_device_t *dev, const float *logits, size_t batch,
                                        size_t classes, const int64_t *targets, float *loss_p,
                                        float *grad_p)
{
    return ember_cross_entropy(logits, batch, classes, targets, loss_p, grad_p);
}

static ember_status_t cpu_rows_gather(ember_device_t *dev, const float *table, size_t dim,
                                      const int64_t *rows, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * dim, table + (size_t)rows[i] * dim, dim * sizeof(float));
    return EMBER_OK;
}

static ember_status_t cpu_rows_scatter(ember_device_t *dev, float *table, size_t dim,
                                       const int64_t *rows, size_t n, const float *in)
{
    for (size_t i = 0; i < n; i++)
        memcpy(table + (size_t)rows[i] * dim, in + i * dim, dim * sizeof(float));
    return EMBER_OK;
}

static ember_status_t cpu_parts_combine(ember_device_t *dev, const float *parts, size_t stride,
                                        uint32_t nparts, size_t bags, size_t dim,
                                        ember_bag_mode_t mode, const uint32_t *counts,
                                        const uint32_t *bag_counts, const uint32_t *places,
                                        size_t places_stride, float *out, int16_t *winner)
{
    if (nparts == 0 || nparts > INT16_MAX || (mode == EMBER_BAG_MAX && !places))
        return EMBER_ERR_INVALID_PARAM;
    ember_bag_parts_combine(parts, stride, nparts, bags, dim, mode, counts, bag_counts, places,
                            places_stride, out, winner);
    return EMBER_OK;
}

static ember_status_t cpu_parts_split(ember_device_t *dev, const float *grad, uint32_t nparts,
                                      size_t bags, size_t dim, ember_bag_mode_t mode,
                                      const uint32_t *bag_counts, const int16_t *winner,
                                      float *grads, size_t stride)
{
    ember_bag_parts_split(grad, nparts, bags, dim, mode, bag_counts, winner, grads, stride);
    return EMBER_OK;
}

/* The host interaction takes one pointer a vector: the dense one, then each
 * table's [batch][dim] in the pooled block.  A stack array holds the usual
 * count (DLRM's 27); more are allocated. */
#define CPU_VECTORS 64

static const float **cpu_vectors(const float *first, const float *pooled, size_t tables,
                                 size_t values, const float **stack)
{
    const float **vectors =
            tables + 1 <= CPU_VECTORS ? stack : malloc((tables + 1) * sizeof(*vectors));
    if (!vectors)
        return NULL;
    vectors[0] = first;
    for (size_t t = 0; t < tables; t++)
        vectors[1 + t] = pooled + t * values;
    return vectors;
}

static ember_status_t cpu_interaction_forward(ember_device_t *dev, const float *dense,
                                              const float *pooled, size_t tables, size_t batch,
                                              size_t dim, float *out)
{
    const float *stack[CPU_VECTORS];
    const ember_interaction_shape_t shape = {.features = tables + 1, .dim = dim, .batch = batch};
    if (tables > 0 && !pooled)
        return EMBER_ERR_INVALID_PARAM;
    const float **vectors = cpu_vectors(dense, pooled, tables, batch * dim, stack);
    if (!vectors)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = ember_interaction_forward(&shape, vectors, out);
    if (vectors != stack)
        free(vectors);
    return status;
}

static ember_status_t cpu_interaction_backward(ember_device_t *dev, const float *dense,
                                               const float *pooled, size_t tables, size_t batch,
                                               size_t dim, const float *grad_out, float *grad_dense,
                                               float *grad_pooled)
{
    const float *stack[CPU_VECTORS], *grad_stack[CPU_VECTORS];
    const ember_interaction_shape_t shape = {.features = tables + 1, .dim = dim, .batch = batch};
    if (tables > 0 && (!pooled || !grad_pooled))
        return EMBER_ERR_INVALID_PARAM;
    const float **vectors = cpu_vectors(dense, pooled, tables, batch * dim, stack);
    const float **grads = cpu_vectors(grad_dense, grad_pooled, tables, batch * dim, grad_stack);
    ember_status_t status = vectors && grads ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK)
        status = ember_interaction_backward(&shape, vectors, grad_out, (float *const *)grads);
    if (vectors && vectors != stack)
        free(vectors);
    if (grads && grads != grad_stack)
        free(grads);
    return status;
}

static ember_status_t cpu_crossnet_forward(ember_device_t *dev, const float *dense,
                                           const float *pooled, size_t tables, size_t batch,
                                           size_t dim, size_t layers, size_t rank,
                                           const float *params, float *saved, float *out)
{
    const ember_crossnet_shape_t shape = {
            .tables = tables, .batch = batch, .dim = dim, .layers = layers, .rank = rank};
    return ember_crossnet_forward(&shape, dense, pooled, params, saved, out);
}

static ember_status_t cpu_crossnet_backward(ember_device_t *dev, const float *dense,
                                            const float *pooled, size_t tables, size_t batch,
                                            size_t dim, size_t layers, size_t rank,
                                            const float *params, const float *saved,
                                            const float *grad_out, float *grad_params,
                                            float *grad_dense, float *grad_pooled)
{
    cpu_dev_t *cpu = ember_device_impl(dev);
    const ember_crossnet_shape_t shape = {
            .tables = tables, .batch = batch, .dim = dim, .layers = layers, .rank = rank};
    /* a bad shape grows nothing: the op refuses it */
    const size_t need = ember_crossnet_shape_ok(&shape) ? ember_crossnet_scratch_floats(&shape) : 0;
    if (need > cpu->crossnet_scratch_cap) {
        float *grown = malloc(need * sizeof(float));
        if (!grown)
            return EMBER_ERR_NO_MEMORY;
        free(cpu->crossnet_scratch);
        cpu->crossnet_scratch = grown;
        cpu->crossnet_scratch_cap = need;
    }
    return ember_crossnet_backward_in(&shape, dense, pooled, params, saved, grad_out, grad_params,
                                      grad_dense, grad_pooled, cpu->crossnet_scratch);
}

static ember_status_t cpu_bce_with_logits(ember_device_t *dev, const float *logits,
                                          const float *targets, size_t n, float *loss_p,
                                          float *grad_p)
{
    return ember_bce_with_logits(logits, targets, n, loss_p, grad_p);
}

#ifndef EMBER_DEVICE_NO_TRANSPORT
/* The CPU communicator is the host ring itself; requests are its requests. */
static ember_status_t cpu_comm_create(ember_device_t *dev, ember_tp_t *tp, const int *ranks,
                                      int nranks, uint16_t op_base, ember_device_comm_t **comm_p)
{
    ember_comm_allreduce_t *ar;

    if (!tp) {
        ember_error("device", "cpu allreduce needs the transport");
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(ember_comm_allreduce_create(tp, ranks, nranks, op_base, &ar));
    *comm_p = (ember_device_comm_t *)ar;
    return EMBER_OK;
}

static void cpu_comm_destroy(ember_device_comm_t *comm)
{
    ember_comm_allreduce_destroy((ember_comm_allreduce_t *)comm);
}

static ember_status_t cpu_allreduce_start(ember_device_comm_t *comm, float *data, size_t count,
                                          int average, ember_device_req_t **req_p)
{
    const ember_comm_allreduce_args_t args = {.recv = data, .count = count, .average = average};
    return ember_comm_allreduce_start((ember_comm_allreduce_t *)comm, &args,
                                      (ember_comm_allreduce_req_t **)req_p);
}

static ember_status_t cpu_allreduce_test(ember_device_req_t *req)
{
    return ember_comm_allreduce_test((ember_comm_allreduce_req_t *)req);
}

static ember_status_t cpu_allreduce_wait(ember_device_req_t *req)
{
    return ember_comm_allreduce_wait((ember_comm_allreduce_req_t *)req);
}

static const char *cpu_comm_error(const ember_device_comm_t *comm)
{
    return ember_comm_allreduce_error((const ember_comm_allreduce_t *)comm);
}
#endif

const ember_device_ops_t ember_device_cpu_ops = {
        .size = sizeof(ember_device_ops_t),
        .name = "cpu",
        .mem_type = EMBER_MEM_HOST,
        .open = cpu_open,
        .close = cpu_close,
        .mem_alloc = cpu_mem_alloc,
        .mem_free = cpu_mem_free,
        .mem_copy = cpu_mem_copy,
        .mem_zero = cpu_mem_zero,
        .synchronize = cpu_synchronize,
        .bag_forward = cpu_bag_forward,
        .bag_backward = cpu_bag_backward,
        .bag_backward_update = cpu_bag_backward_update,
        .linear_forward = cpu_linear_forward,
        .linear_backward = cpu_linear_backward,
        .relu_forward = cpu_relu_forward,
        .relu_backward = cpu_relu_backward,
        .cross_entropy = cpu_cross_entropy,
        .rows_gather = cpu_rows_gather,
        .rows_scatter = cpu_rows_scatter,
        .parts_combine = cpu_parts_combine,
        .parts_split = cpu_parts_split,
        .interaction_forward = cpu_interaction_forward,
        .interaction_backward = cpu_interaction_backward,
        .bce_with_logits = cpu_bce_with_logits,
        .crossnet_forward = cpu_crossnet_forward,
        .crossnet_backward = cpu_crossnet_backward,
#ifndef EMBER_DEVICE_NO_TRANSPORT
        .comm_create = cpu_comm_create,
        .comm_destroy = cpu_comm_destroy,
        .allreduce_start = cpu_allreduce_start,
        .allreduce_test = cpu_allreduce_test,
        .allreduce_wait = cpu_allreduce_wait,
        .comm_error = cpu_comm_error,
#endif
};
