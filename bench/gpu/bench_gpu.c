/*
 * ember-bench-gpu: GPU cases of ember-bench.
 *
 *   ember-bench-gpu [--quick]
 *
 * Measures, in one run on GPU 0:
 *   - the physical reference: a device-to-device cudaMemcpy of 1 GiB
 *     (bandwidth = bytes read + bytes written, per second);
 *   - EmbeddingBag forward and backward (sum, mean, max) for several dims,
 *     uniform random rows of a ~2 GiB table, 64 Ki bags of 32 entries.
 *     Effective bandwidth: forward = rows gathered + indices + pooled output
 *     written; backward = grad_out read per entry + unique row grads written;
 *   - the fused backward + optimizer step (bag_backward_update) for every
 *     dim, mode and optimizer (SGD, Adagrad, row-wise Adagrad, Adam with
 *     per-row steps), over the same batches.  Bytes counted: what the op
 *     must move at least (UPDATE_BYTES_TEXT): grad_out read once per entry
 *     (n x dim x 4; max mode also reads argmax, n x dim x 8), indices and
 *     offsets read (n x 8 + bags x 8), and each unique row and its
 *     optimizer state read and written (2 x unique x (dim x 4 + state
 *     bytes per row: SGD 0, Adagrad dim x 4, row-wise 4, Adam 2 dim x 4 +
 *     4));
 *   - a single-rank NCCL allreduce (sanity: result unchanged) and its time.
 * Every case is timed alike (and as bench/peers/torch_bag_gpu.py times
 * PyTorch's): one untimed call, then ITERS calls back to back between two
 * device synchronizations, the time divided by ITERS.
 * Prints tables and "verdict" lines: forward >= 60% of the copy for dim >= 64,
 * backward + optimizer >= 50% of the copy for dim >= 64.
 * Exit 0 when everything ran (the verdict is reported, not enforced), 77 when
 * no GPU is visible.
 */
#include <ember/device.h>
#include <ember/log.h>

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define EK(call)                                                                                   \
    do {                                                                                           \
        ember_status_t s_ = (call);                                                                \
        if (s_ != EMBER_OK) {                                                                      \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, ember_status_string(s_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t rng = 0x1234;
static uint64_t next_u64(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Host time in ms: the ops run on the device's own stream, not the legacy
 * stream that events recorded here would time. */
static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static double copy_bandwidth(size_t bytes, int iters)
{
    void *a, *b;
    cudaEvent_t e0, e1;
    float ms;

    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); /* warm-up */
    CK(cudaEventRecord(e0, 0));
    for (int i = 0; i < iters; i++)
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * (double)bytes * iters / (ms * 1e-3) / 1e9;
}

/* One run's settings and what every case reads. */
typedef struct {
    ember_device_t *dev;
    const ember_device_ops_t *G;
    int iters;
    double copy_gbs;        /* the reference: 100% */
    size_t bags, len, n;    /* n = bags x len entries */
    int64_t *h_idx, *h_off; /* host copies of the batch */
} gpu_run_t;

/* One dim's device buffers: the table, the batch, outputs and gradients. */
typedef struct {
    int64_t rows;
    float *table, *out, *go, *grad;
    int64_t *idx, *off, *am, *grows;
    float *state0, *state1; /* the optimizers' state: [rows, dim] each */
    uint32_t *row_step;     /* [rows] */
    size_t unique;          /* distinct rows of the batch */
} gpu_bufs_t;

#define UPDATE_BYTES_TEXT                                                                 \
    "bytes = n*dim*4 grad_out (+ n*dim*8 argmax for max) + n*8 + bags*8 indices/offsets " \
    "+ 2*unique*(dim*4 + state/row: sgd 0, adagrad dim*4, rowwise 4, adam 2*dim*4+4)"

/* The batch's distinct rows (a bitmap over the table's rows). */
static size_t count_unique(const int64_t *idx, size_t n, int64_t rows)
{
    uint8_t *seen = calloc((size_t)rows / 8 + 1, 1);
    size_t u = 0;
    if (!seen) {
        fprintf(stderr, "ember-bench-gpu: no memory for the unique-row count\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t bit = (uint8_t)(1u << (idx[i] & 7));
        u += !(seen[idx[i] >> 3] & bit);
        seen[idx[i] >> 3] |= bit;
    }
    free(seen);
    return u;
}

/* A table of 2 GiB of rows of @dim, uniform random rows of it as the batch. */
static void bufs_alloc(const gpu_run_t *run, size_t dim, gpu_bufs_t *b)
{
    ember_device_t *dev = run->dev;
    const ember_device_ops_t *G = run->G;
    size_t bags = run->bags, n = run->n;

    b->rows = (int64_t)(((size_t)2 << 30) / (dim * 4));
    for (size_t i = 0; i < n; i++)
        run->h_idx[i] = (int64_t)(next_u64() % (uint64_t)b->rows);
    EK(G->mem_alloc(dev, (size_t)b->rows * dim * 4, (void **)&b->table));
    EK(G->mem_alloc(dev, bags * dim * 4, (void **)&b->out));
    EK(G->mem_alloc(dev, bags * dim * 4, (void **)&b->go));
    EK(G->mem_alloc(dev, bags * dim * 8, (void **)&b->am));
    EK(G->mem_alloc(dev, n * 8, (void **)&b->idx));
    EK(G->mem_alloc(dev, bags * 8, (void **)&b->off));
    EK(G->mem_alloc(dev, n * 8, (void **)&b->grows));
    EK(G->mem_alloc(dev, n * dim * 4, (void **)&b->grad));
    EK(G->mem_alloc(dev, (size_t)b->rows * dim * 4, (void **)&b->state0));
    EK(G->mem_alloc(dev, (size_t)b->rows * dim * 4, (void **)&b->state1));
    EK(G->mem_alloc(dev, (size_t)b->rows * 4, (void **)&b->row_step));
    CK(cudaMemset(b->state0, 0, (size_t)b->rows * dim * 4));
    CK(cudaMemset(b->state1, 0, (size_t)b->rows * dim * 4));
    CK(cudaMemset(b->row_step, 0, (size_t)b->rows * 4));
    b->unique = count_unique(run->h_idx, n, b->rows);
    CK(cudaMemset(b->table, 0, (size_t)b->rows * dim * 4));
    CK(cudaMemset(b->go, 0, bags * dim * 4));
    EK(G->mem_copy(dev, b->idx, run->h_idx, n * 8, EMBER_COPY_HOST_TO_DEVICE));
    EK(G->mem_copy(dev, b->off, run->h_off, bags * 8, EMBER_COPY_HOST_TO_DEVICE));
}

static void bufs_free(const gpu_run_t *run, gpu_bufs_t *b)
{
    ember_device_t *dev = run->dev;
    const ember_device_ops_t *G = run->G;
    G->mem_free(dev, b->table);
    G->mem_free(dev, b->out);
    G->mem_free(dev, b->go);
    G->mem_free(dev, b->am);
    G->mem_free(dev, b->idx);
    G->mem_free(dev, b->off);
    G->mem_free(dev, b->grows);
    G->mem_free(dev, b->grad);
    G->mem_free(dev, b->state0);
    G->mem_free(dev, b->state1);
    G->mem_free(dev, b->row_step);
}

static const char *const opt_names[] = {"sgd", "adagrad", "rowwise", "adam"};

/* Optimizer state bytes per row (kind as ember_device_opt_t's). */
static double state_row_bytes(int kind, size_t dim)
{
    switch (kind) {
    case 1: return dim * 4.0;
    case 2: return 4.0;
    case 3: return 2.0 * dim * 4 + 4;
    default: return 0.0;
    }
}

/* The fused backward + optimizer of @kind at @dim and mode @m: one row of
 * the second table.  Returns 0 when dim >= 64 misses the verdict. */
static int bench_update(const gpu_run_t *run, const gpu_bufs_t *b, size_t dim, int m, int kind)
{
    ember_device_t *dev = run->dev;
    const ember_device_ops_t *G = run->G;
    const size_t bags = run->bags, n = run->n;
    ember_bag_batch_t batch = {.indices = b->idx, .n = n, .offsets = b->off, .bags = bags};
    ember_bag_opts_t opts = {.mode = (ember_bag_mode_t)m, .padding_idx = -1};
    ember_device_opt_t opt = {.kind = kind,
                              .lr = 0.01f,
                              .eps = kind == 1 ? 1e-10f : 1e-8f,
                              .beta1 = 0.9f,
                              .beta2 = 0.999f,
                              .step = 1};
    if (kind != 0)
        opt.state0 = b->state0;
    if (kind == 3) {
        opt.state1 = b->state1;
        opt.row_step = b->row_step;
    }
    /* max mode: the forward's argmax of this mode */
    EK(G->bag_forward(dev, b->table, b->rows, dim, &batch, &opts, b->out, b->am));
    EK(G->bag_backward_update(dev, b->table, b->rows, dim, &batch, &opts, b->go, b->am, &opt));
    EK(G->synchronize(dev));
    double t0 = now_ms();
    for (int i = 0; i < run->iters; i++) {
        opt.step++;
        EK(G->bag_backward_update(dev, b->table, b->rows, dim, &batch, &opts, b->go, b->am, &opt));
    }
    EK(G->synchronize(dev));
    double ms = (now_ms() - t0) / run->iters;
    double bytes = (double)n * dim * (m == EMBER_BAG_MAX ? 12 : 4) + n * 8.0 + bags * 8.0 +
                   2.0 * (double)b->unique * (dim * 4.0 + state_row_bytes(kind, dim));
    double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("%-6zu %-5s %-8s %10.3f %10.1f %5.0f%%\n", dim, ember_bag_mode_name(opts.mode),
           opt_names[kind], ms, gbs, 100 * gbs / run->copy_gbs);
    return !(dim >= 64 && gbs < 0.5 * run->copy_gbs);
}

/* Pooling mode @m at @dim, forward then backward: one row of the table.
 * Returns 0 when a sum/mean forward at dim >= 64 misses the verdict. */
static int bench_mode(const gpu_run_t *run, const gpu_bufs_t *b, size_t dim, int m)
{
    ember_device_t *dev = run->dev;
    const ember_device_ops_t *G = run->G;
    const int iters = run->iters;
    size_t bags = run->bags, n = run->n, nrows = 0;
    ember_bag_batch_t batch = {.indices = b->idx, .n = n, .offsets = b->off, .bags = bags};
    ember_bag_opts_t opts = {.mode = (ember_bag_mode_t)m, .padding_idx = -1};

    EK(G->bag_forward(dev, b->table, b->rows, dim, &batch, &opts, b->out, b->am));
    EK(G->synchronize(dev));
    double t0 = now_ms();
    for (int i = 0; i < iters; i++)
        EK(G->bag_forward(dev, b->table, b->rows, dim, &batch, &opts, b->out, b->am));
    EK(G->synchronize(dev));
    double fwd_ms = (now_ms() - t0) / iters;
    double fwd_bytes =
            (double)n * dim * 4 + (double)bags * dim * 4 * (m == EMBER_BAG_MAX ? 3 : 1) + n * 8.0;
    EK(G->bag_backward(dev, b->table, b->rows, dim, &batch, &opts, b->go, b->am, b->grows, b->grad,
                       &nrows, NULL));
    EK(G->synchronize(dev));
    t0 = now_ms();
    for (int i = 0; i < iters; i++)
        EK(G->bag_backward(dev, b->table, b->rows, dim, &batch, &opts, b->go, b->am, b->grows,
                           b->grad, &nrows, NULL));
    EK(G->synchronize(dev));
    double bwd_ms = (now_ms() - t0) / iters;
    double bwd_bytes = (double)n * dim * 4 + (double)nrows * dim * 4 + n * 8.0 + (double)nrows * 8;
    double fwd_gbs = fwd_bytes / (fwd_ms * 1e-3) / 1e9;
    double bwd_gbs = bwd_bytes / (bwd_ms * 1e-3) / 1e9;
    printf("%-6zu %-5s %10.3f %10.1f %5.0f%% %10.3f %10.1f %5.0f%%\n", dim,
           ember_bag_mode_name(opts.mode), fwd_ms, fwd_gbs, 100 * fwd_gbs / run->copy_gbs, bwd_ms,
           bwd_gbs, 100 * bwd_gbs / run->copy_gbs);
    return !(dim >= 64 && m != EMBER_BAG_MAX && fwd_gbs < 0.6 * run->copy_gbs);
}

/* Every pooling mode at @dim (with @update: every mode and optimizer of
 * the fused op); returns 0 when one misses its verdict. */
static int bench_dim(const gpu_run_t *run, size_t dim, int update)
{
    gpu_bufs_t b;
    int ok = 1;

    bufs_alloc(run, dim, &b);
    for (int m = 0; m < 3; m++) {
        for (int k = 0; update && k < 4; k++)
            if (!bench_update(run, &b, dim, m, k))
                ok = 0;
        if (!update && !bench_mode(run, &b, dim, m))
            ok = 0;
    }
    bufs_free(run, &b);
    return ok;
}

/* NCCL single rank: sanity (identity) and time.  Returns 0 when the result
 * changed; NCCL missing is reported, not a failure. */
static int bench_nccl(const gpu_run_t *run)
{
    ember_device_t *dev = run->dev;
    const ember_device_ops_t *G = run->G;
    ember_device_comm_t *comm;
    int ranks[1] = {0};
    ember_status_t st = G->comm_create(dev, NULL, ranks, 1, 0, &comm);
    if (st != EMBER_OK) {
        printf("nccl allreduce 1 rank: %s\n", ember_status_string(st));
        return 1;
    }
    size_t count = (size_t)16 << 20; /* 64 MiB */
    float *h = malloc(count * 4), *back = malloc(count * 4), *d;
    for (size_t i = 0; i < count; i++)
        h[i] = (float)(i % 1000) * 0.5f;
    EK(G->mem_alloc(dev, count * 4, (void **)&d));
    EK(G->mem_copy(dev, d, h, count * 4, EMBER_COPY_HOST_TO_DEVICE));
    ember_device_req_t *req;
    EK(G->allreduce_start(comm, d, count, 0, &req));
    EK(G->allreduce_wait(req));
    double t0 = now_ms();
    for (int i = 0; i < run->iters; i++) {
        EK(G->allreduce_start(comm, d, count, i & 1, &req));
        EK(G->allreduce_wait(req));
    }
    double ms = (now_ms() - t0) / run->iters;
    EK(G->mem_copy(dev, back, d, count * 4, EMBER_COPY_DEVICE_TO_HOST));
    int same = memcmp(h, back, count * 4) == 0;
    printf("nccl allreduce 1 rank, 64 MiB: %.3f ms/op, result %s\n", ms,
           same ? "unchanged (PASS)" : "CHANGED (FAIL)");
    G->mem_free(dev, d);
    G->comm_destroy(comm);
    free(h);
    free(back);
    return same;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    gpu_run_t run = {.iters = quick ? 3 : 10, .bags = quick ? 16384 : 65536, .len = 32};

    ember_log_init();
    if (ember_device_cuda_count() <= 0) {
        fprintf(stderr, "ember-bench-gpu: no CUDA GPU visible, skipping\n");
        return 77;
    }
    EK(ember_device_open("cuda", 0, &run.dev));
    run.G = ember_device_ops(run.dev);
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));

    run.copy_gbs = copy_bandwidth((size_t)1 << 30, run.iters);
    printf("# ember-bench-gpu on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    printf("%-28s %10.1f GB/s   (read+write, reference = 100%%)\n", "d2d cudaMemcpy 1 GiB",
           run.copy_gbs);
    printf("%-6s %-5s %10s %10s %6s %10s %10s %6s\n", "dim", "mode", "fwd ms", "fwd GB/s", "%copy",
           "bwd ms", "bwd GB/s", "%copy");

    const size_t dims[] = {32, 64, 128, 256};
    int verdict_ok = 1;
    run.n = run.bags * run.len;
    run.h_idx = malloc(run.n * 8);
    run.h_off = malloc(run.bags * 8);
    for (size_t b = 0; b < run.bags; b++)
        run.h_off[b] = (int64_t)(b * run.len);
    for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
        if (!bench_dim(&run, dims[di], 0))
            verdict_ok = 0;
    }
    printf("verdict: EmbeddingBag forward (sum/mean) >= 60%% of the copy for dim >= 64: "
           "%s\n",
           verdict_ok ? "MET" : "NOT MET");
    printf("# backward + optimizer (bag_backward_update), %zu bags x %zu, uniform rows; "
           "%s\n",
           run.bags, run.len, UPDATE_BYTES_TEXT);
    printf("%-6s %-5s %-8s %10s %10s %6s\n", "dim", "mode", "optim", "upd ms", "upd GB/s", "%copy");
    int update_ok = 1;
    for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
        if (!bench_dim(&run, dims[di], 1))
            update_ok = 0;
    }
    printf("verdict: backward + optimizer >= 50%% of the copy for dim >= 64: %s\n",
           update_ok ? "MET" : "NOT MET");
    if (!bench_nccl(&run)) {
        ember_device_close(run.dev);
        return 1;
    }
    free(run.h_idx);
    free(run.h_off);
    ember_device_close(run.dev);
    return 0;
}
