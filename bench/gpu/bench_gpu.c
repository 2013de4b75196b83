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
 *   - a single-rank NCCL allreduce (sanity: result unchanged) and its time.
 * Prints a table and "verdict" lines: forward >= 60% of the copy for dim >= 64.
 * Exit 0 when everything ran (the verdict is reported, not enforced), 77 when
 * no GPU is visible.
 */
#include <ember/device.h>
#include <ember/log.h>

#include <cuda_runtime.h>

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
} gpu_bufs_t;

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
    t0 = now_ms();
    for (int i = 0; i < iters; i++)
        EK(G->bag_backward(dev, b->table, b->rows, dim, &batch, &opts, b->go, b->am, b->grows,
                           b->grad, &nrows, NULL));
    double bwd_ms = (now_ms() - t0) / iters;
    double bwd_bytes = (double)n * dim * 4 + (double)nrows * dim * 4 + n * 8.0 + (double)nrows * 8;
    double fwd_gbs = fwd_bytes / (fwd_ms * 1e-3) / 1e9;
    double bwd_gbs = bwd_bytes / (bwd_ms * 1e-3) / 1e9;
    printf("%-6zu %-5s %10.3f %10.1f %5.0f%% %10.3f %10.1f %5.0f%%\n", dim,
           ember_bag_mode_name(opts.mode), fwd_ms, fwd_gbs, 100 * fwd_gbs / run->copy_gbs, bwd_ms,
           bwd_gbs, 100 * bwd_gbs / run->copy_gbs);
    return !(dim >= 64 && m != EMBER_BAG_MAX && fwd_gbs < 0.6 * run->copy_gbs);
}

/* Every pooling mode at @dim; returns 0 when one misses the verdict. */
static int bench_dim(const gpu_run_t *run, size_t dim)
{
    gpu_bufs_t b;
    int ok = 1;

    bufs_alloc(run, dim, &b);
    for (int m = 0; m < 3; m++) {
        if (!bench_mode(run, &b, dim, m))
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
        if (!bench_dim(&run, dims[di]))
            verdict_ok = 0;
    }
    printf("verdict: EmbeddingBag forward (sum/mean) >= 60%% of the copy for dim >= 64: "
           "%s\n",
           verdict_ok ? "MET" : "NOT MET");
    if (!bench_nccl(&run)) {
        ember_device_close(run.dev);
        return 1;
    }
    free(run.h_idx);
    free(run.h_off);
    ember_device_close(run.dev);
    return 0;
}
