/*
 * cuda/cuda_bag: EmbeddingBag forward and sparse backward on the GPU, with
 * the semantics of engine/ops/embedding_bag.c (sum / mean / max, per-sample
 * weights, padding_idx, empty bags -> zeros and argmax -1).
 *
 * Forward: a 2-D block, x = lanes across the row (float4 when the row and
 * the buffers allow), y = bags; each lane walks its bag's entries in order
 * (so sums round as the CPU's do), loading four rows ahead of the adds.
 *
 * Backward (deterministic, no atomics): key every entry by its row (padding
 * -> a sentinel past the last row), radix-sort (key, position) pairs with CUB
 * over only the bits a row id needs, run-length encode the sorted keys into
 * the sorted unique rows and their run lengths, scan the lengths into run
 * offsets, then one block row per unique row reduces its run in position
 * order, i.e. in the CPU's order.
 *
 * Fused backward + optimizer (bag_backward_update): the same sort and
 * runs, then one kernel where a warp owns a unique row: its lanes hold the
 * row's gradient in registers, summed in the fixed order of
 * engine/ops/bag_update.h (position order, sub-segments of BAG_UPDATE_SUB
 * added in order), and apply the optimizer to the row and its state in
 * place; no row-gradient buffer is written.  A long segment (over
 * BAG_UPDATE_SUB entries, a hot row) is first cut into its sub-segments,
 * a warp each writing their partial sums (k_upd_partials); the row's warp
 * adds them in order: the bits of one warp summing it all, in parallel.
 */
#include "cuda/cuda_internal.h"
#include "engine/ops/bag_update.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <limits.h>

namespace
{

constexpr int kBlock = 256;

__device__ __forceinline__ size_t bag_end(const int64_t *offsets, size_t bags, size_t n, size_t b)
{
    return b + 1 < bags ? (size_t)offsets[b + 1] : n;
}

/* Lanes per bag: the row's vector count rounded up to a power of two. */
static unsigned lanes_for(size_t vecs)
{
    unsigned t = 1;
    while (t < vecs && t < kBlock)
        t <<= 1;
    return t;
}

template <typename V> struct vec_ops;
template <> struct vec_ops<float> {
    static __device__ __forceinline__ float zero()
    {
        return 0.0f;
    }
    static __device__ __forceinline__ void axpy(float &acc, float w, float v)
    {
        acc += w * v;
    }
    static __device__ __forceinline__ void add(float &acc, float v)
    {
        acc += v;
    }
    static __device__ __forceinline__ void div(float &acc, float c)
    {
        acc /= c;
    }
};
template <> struct vec_ops<float4> {
    static __device__ __forceinline__ float4 zero()
    {
        return make_float4(0.f, 0.f, 0.f, 0.f);
    }
    static __device__ __forceinline__ void axpy(float4 &a, float w, float4 v)
    {
        a.x += w * v.x;
        a.y += w * v.y;
        a.z += w * v.z;
        a.w += w * v.w;
    }
    static __device__ __forceinline__ void add(float4 &a, float4 v)
    {
        a.x += v.x;
        a.y += v.y;
        a.z += v.z;
        a.w += v.w;
    }
    static __device__ __forceinline__ void div(float4 &a, float c)
    {
        a.x /= c;
        a.y /= c;
        a.z /= c;
        a.w /= c;
    }
};

/* Sum / mean (weights only with sum, as validated on the host). */
template <typename V>
__global__ void
k_bag_sum(const V *__restrict__ table, size_t vecs, const int64_t *__restrict__ indices, size_t n,
          const int64_t *__restrict__ offsets, size_t bags, const float *__restrict__ weights,
          int64_t pad, int mean, V *__restrict__ out)
{
    size_t b = (size_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (b >= bags)
        return;
    size_t begin = (size_t)offsets[b], end = bag_end(offsets, bags, n, b);
    for (size_t d = threadIdx.x; d < vecs; d += blockDim.x) {
        V acc = vec_ops<V>::zero();
        size_t count = 0, i = begin;
        for (; i + 4 <= end; i += 4) {
            int64_t id[4];
            V v[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                id[k] = __ldg(indices + i + k);
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (id[k] != pad)
                    v[k] = __ldg(table + (size_t)id[k] * vecs + d);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (id[k] == pad)
                    continue;
                if (weights)
                    vec_ops<V>::axpy(acc, __ldg(weights + i + k), v[k]);
                else
                    vec_ops<V>::add(acc, v[k]);
                count++;
            }
        }
        for (; i < end; i++) {
            int64_t id = __ldg(indices + i);
            if (id == pad)
                continue;
            V v = __ldg(table + (size_t)id * vecs + d);
            if (weights)
                vec_ops<V>::axpy(acc, __ldg(weights + i), v);
            else
                vec_ops<V>::add(acc, v);
            count++;
        }
        if (mean && count > 1)
            vec_ops<V>::div(acc, (float)count);
        out[b * vecs + d] = acc;
    }
}

/* Max: strict '>' keeps the first maximum; argmax -1 for an empty bag. */
__global__ void k_bag_max(const float *__restrict__ table, size_t dim,
                          const int64_t *__restrict__ indices, size_t n,
                          const int64_t *__restrict__ offsets, size_t bags, int64_t pad,
                          float *__restrict__ out, int64_t *__restrict__ argmax)
{
    size_t b = (size_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (b >= bags)
        return;
    size_t begin = (size_t)offsets[b], end = bag_end(offsets, bags, n, b);
    for (size_t d = threadIdx.x; d < dim; d += blockDim.x) {
        float best = 0.0f;
        int64_t am = -1;
        for (size_t i = begin; i < end; i++) {
            int64_t id = __ldg(indices + i);
            if (id == pad)
                continue;
            float v = __ldg(table + (size_t)id * dim + d);
            if (am < 0 || v > best) {
                best = v;
                am = id;
            }
        }
        out[b * dim + d] = best;
        argmax[b * dim + d] = am;
    }
}

static int aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* ---- backward ----------------------------------------------------------- */

/* Per entry: the sort key (padding -> sentinel), its position, its bag (the
 * last bag whose offset is <= i; -1 when there are no bags). */
__global__ void k_bwd_keys(const int64_t *__restrict__ indices, size_t n,
                           const int64_t *__restrict__ offsets, size_t bags, int64_t pad,
                           unsigned long long sentinel, unsigned long long *keys, int *pos,
                           int *bag_of)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int64_t id = indices[i];
    keys[i] = id == pad ? sentinel : (unsigned long long)id;
    pos[i] = (int)i;
    size_t lo = 0, hi = bags; /* first offset > i */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((size_t)offsets[mid] <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    bag_of[i] = (int)lo - 1;
}

/* Mean: 1 / (non-padding entries) per bag (0 entries: unused). */
__global__ void k_bwd_mean_scale(const int64_t *__restrict__ indices, size_t n,
                                 const int64_t *__restrict__ offsets, size_t bags, int64_t pad,
                                 float *scale)
{
    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= bags)
        return;
    size_t begin = (size_t)offsets[b], end = bag_end(offsets, bags, n, b);
    size_t count = 0;
    for (size_t i = begin; i < end; i++)
        count += indices[i] != pad;
    scale[b] = count ? 1.0f / (float)count : 0.0f;
}

/* Rows written: runs, less the sentinel's run when padding occurred. */
__global__ void k_bwd_count(const unsigned long long *unique, const int *num_runs,
                            unsigned long long sentinel, unsigned long long *nrows)
{
    int r = *num_runs;
    *nrows = (unsigned long long)((r > 0 && unique[r - 1] == sentinel) ? r - 1 : r);
}

/* One row of blocks per unique row; lanes across dim. */
__global__ void k_bwd_reduce(size_t dim, const unsigned long long *__restrict__ unique,
                             const unsigned long long *__restrict__ nrows_d,
                             const int *__restrict__ run_offsets,
                             const int *__restrict__ run_lengths, const int *__restrict__ pos,
                             const int *__restrict__ bag_of, const float *__restrict__ grad_out,
                             const float *__restrict__ weights,
                             const float *__restrict__ mean_scale,
                             const int64_t *__restrict__ argmax, int mode, float *__restrict__ grad)
{
    size_t u = (size_t)blockIdx.x * blockDim.y + threadIdx.y;
    if (u >= *nrows_d)
        return;
    int start = run_offsets[u], len = run_lengths[u];
    int64_t row = (int64_t)unique[u];
    for (size_t d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = start; j < start + len; j++) {
            int p = pos[j], b = bag_of[p];
            if (b < 0)
                continue;
            float go = grad_out[(size_t)b * dim + d];
            if (mode == EMBER_BAG_MAX) {
                /* once per bag, however often the row repeats in it */
                if (j > start && bag_of[pos[j - 1]] == b)
                    continue;
                if (argmax[(size_t)b * dim + d] == row)
                    acc += go;
            } else if (weights) {
                acc += weights[p] * go;
            } else if (mode == EMBER_BAG_MEAN) {
                acc += mean_scale[b] * go;
            } else {
                acc += go;
            }
        }
        grad[u * dim + d] = acc;
    }
}

/* d out[b] / d w_i = table[idx_i] . grad_out[b]; a warp per entry. */
__global__ void k_bwd_weights(const float *__restrict__ table, size_t dim,
                              const int64_t *__restrict__ indices, size_t n,
                              const int *__restrict__ bag_of, int64_t pad,
                              const float *__restrict__ grad_out, float *__restrict__ grad_weights)
{
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    unsigned lane = threadIdx.x % 32;
    if (i >= n)
        return;
    int64_t id = indices[i];
    int b = bag_of[i];
    float acc = 0.0f;
    if (id != pad && b >= 0) {
        const float *row = table + (size_t)id * dim;
        const float *go = grad_out + (size_t)b * dim;
        for (size_t d = lane; d < dim; d += 32)
            acc += row[d] * go[d];
    }
    for (int off = 16; off > 0; off /= 2)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0)
        grad_weights[i] = acc;
}

static size_t align_up(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

/* ---- fused backward + optimizer ------------------------------------------ */

/* A warp's share of one row's gradient: lane l holds elements e0 + 32 k
 * (k < VPL), each summed over the segment [begin, end) in
 * bag_update.h's order.  Four entries' loads are in flight at once. */
template <int VPL>
__device__ __forceinline__ void warp_row_grad(const bag_update_src_t &s, int64_t row, size_t begin,
                                              size_t end, size_t e0, float g[VPL])
{
    bag_acc_t a[VPL];
#pragma unroll
    for (int k = 0; k < VPL; k++)
        a[k].total = a[k].part = 0.0f;
#pragma unroll 4
    for (size_t j = begin; j < end; j++) {
        const bag_entry_t en = bag_update_entry(&s, begin, j);
        /* s.sub is BAG_UPDATE_SUB: the constant makes the test a mask. */
        const int boundary = bag_acc_boundary(j - begin, BAG_UPDATE_SUB);
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            size_t e = e0 + 32 * (size_t)k;
            float c = e < s.dim ? bag_update_contrib(&s, en, row, e) : 0.0f;
            bag_acc_add(&a[k], c, boundary);
        }
    }
#pragma unroll
    for (int k = 0; k < VPL; k++)
        g[k] = bag_acc_sum(&a[k], end - begin, BAG_UPDATE_SUB);
}

/* ---- long segments: their sub-segments' partials, a warp each ----------- */

/* Each place u < n: its row's sub-segment count when the segment is long
 * (over BAG_UPDATE_SUB entries), else 0 (places past the row count too). */
__global__ void k_upd_nsub(const unsigned long long *__restrict__ nrows_d,
                           const int *__restrict__ run_len, size_t n, int *__restrict__ nsub)
{
    size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n)
        return;
    int len = u < *nrows_d ? run_len[u] : 0;
    nsub[u] = len > BAG_UPDATE_SUB ? (len + BAG_UPDATE_SUB - 1) / BAG_UPDATE_SUB : 0;
}

/* Each long row's items (its sub-segments, from item_off[u] on) name it. */
__global__ void k_upd_items(const unsigned long long *__restrict__ nrows_d,
                            const int *__restrict__ nsub, const int *__restrict__ item_off,
                            size_t n, int *__restrict__ item_row)
{
    size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n || u >= *nrows_d)
        return;
    for (int k = 0; k < nsub[u]; k++)
        item_row[item_off[u] + k] = (int)u;
}

/* One warp per item: sub-segment k of a long row summed from 0 in
 * position order (bag_acc_t's `part`), into partials[item, :].  The
 * entries' max-mode "first in its bag" test looks back across the
 * sub-segment's start, as bag_update_entry does over the whole segment. */
template <int VPL>
__global__ void k_upd_partials(bag_update_src_t s, const int *__restrict__ run_off,
                               const int *__restrict__ run_len, const int *__restrict__ nsub,
                               const int *__restrict__ item_off, const int *__restrict__ item_row,
                               const unsigned long long *__restrict__ unique, size_t n,
                               size_t items_cap, float *__restrict__ partials)
{
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const unsigned lane = threadIdx.x % 32;
    const size_t items = (size_t)item_off[n - 1] + (size_t)nsub[n - 1];
    if (i >= items || i >= items_cap)
        return;
    const int u = item_row[i];
    const int64_t row = (int64_t)unique[u];
    const size_t seg = (size_t)run_off[u], seg_end = seg + (size_t)run_len[u];
    const size_t b0 = seg + (i - (size_t)item_off[u]) * BAG_UPDATE_SUB;
    const size_t b1 = b0 + BAG_UPDATE_SUB < seg_end ? b0 + BAG_UPDATE_SUB : seg_end;
    const size_t dim = s.dim, chunk = 32 * (size_t)VPL;
    for (size_t c0 = 0; c0 < dim; c0 += chunk) {
        float part[VPL];
#pragma unroll
        for (int k = 0; k < VPL; k++)
            part[k] = 0.0f;
#pragma unroll 4
        for (size_t j = b0; j < b1; j++) {
            const bag_entry_t en = bag_update_entry(&s, seg, j);
#pragma unroll
            for (int k = 0; k < VPL; k++) {
                size_t e = c0 + lane + 32 * (size_t)k;
                if (e < dim)
                    part[k] += bag_update_contrib(&s, en, row, e);
            }
        }
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            size_t e = c0 + lane + 32 * (size_t)k;
            if (e < dim)
                partials[i * dim + e] = part[k];
        }
    }
}

/* Where the fused kernel finds a long row's partials. */
typedef struct {
    const int *nsub, *item_off;
    const float *partials;
} upd_long_t;

/* Row @u's gradient for the lane's elements: a short segment summed here,
 * a long one's partials added in order (bag_acc_t's `total`: the same
 * bits as one warp summing the whole segment by sub-segments). */
template <int VPL>
__device__ __forceinline__ void row_grad(const bag_update_src_t &s, const upd_long_t &lg, size_t u,
                                         int64_t row, size_t begin, size_t end, size_t e0,
                                         float g[VPL])
{
    if (end - begin <= BAG_UPDATE_SUB) {
        warp_row_grad<VPL>(s, row, begin, end, e0, g);
        return;
    }
    const size_t first = (size_t)lg.item_off[u], count = (size_t)lg.nsub[u], dim = s.dim;
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        size_t e = e0 + 32 * (size_t)k;
        float t = 0.0f;
        if (e < dim) {
            t = lg.partials[first * dim + e];
            for (size_t q = 1; q < count; q++)
                t = t + lg.partials[(first + q) * dim + e];
        }
        g[k] = t;
    }
}

/* Row-wise Adagrad's sum of squares over the row: each lane its elements
 * in order, then a butterfly (every lane ends with the same bits). */
template <int VPL>
__device__ __forceinline__ float warp_sq_sum(const float g[VPL], size_t e0, size_t dim)
{
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VPL; k++)
        if (e0 + 32 * (size_t)k < dim)
            sq += g[k] * g[k];
    return sq;
}

__device__ __forceinline__ float warp_allsum(float x)
{
    for (int off = 16; off > 0; off /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

/* One warp per unique row (warps past the row count return): the row's
 * gradient in registers, chunk by chunk of 32 * VPL elements, applied to
 * the row and its state.  Row-wise Adagrad over more than one chunk sums
 * its squares in a first pass (the gradient is recomputed, not stored). */
template <int VPL>
__global__ void k_bag_update(bag_update_src_t s, upd_long_t lg, ember_device_opt_t o, float clr,
                             float *__restrict__ table,
                             const unsigned long long *__restrict__ unique,
                             const unsigned long long *__restrict__ nrows_d,
                             const int *__restrict__ run_off, const int *__restrict__ run_len)
{
    const size_t u = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const unsigned lane = threadIdx.x % 32;
    if (u >= *nrows_d)
        return;
    const int64_t row = (int64_t)unique[u];
    const size_t begin = (size_t)run_off[u], end = begin + (size_t)run_len[u], dim = s.dim;
    const size_t chunk = 32 * (size_t)VPL;
    const int rowwise = o.kind == BAG_OPT_ROWWISE_ADAGRAD, one_chunk = dim <= chunk;
    bag_row_params_t p = bag_update_row_params(&o, row);
    float g[VPL], acc = 0.0f;

    if (rowwise) {
        float sq = 0.0f;
        for (size_t c0 = 0; c0 < dim; c0 += chunk) {
            row_grad<VPL>(s, lg, u, row, begin, end, c0 + lane, g);
            sq += warp_sq_sum<VPL>(g, c0 + lane, dim);
        }
        p.mult = bag_update_rowwise_mult(&o, o.state0[row], warp_allsum(sq), dim, &acc);
    }
    float *w = table + (size_t)row * dim;
    for (size_t c0 = 0; c0 < dim; c0 += chunk) {
        if (!(rowwise && one_chunk))
            row_grad<VPL>(s, lg, u, row, begin, end, c0 + lane, g);
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            size_t e = c0 + lane + 32 * (size_t)k;
            if (e < dim)
                bag_update_elem(&o, p, clr, &w[e], g[k], (size_t)row * dim + e);
        }
    }
    /* Every lane read the row's own state above before lane 0 writes it. */
    __syncwarp();
    if (lane == 0) {
        if (rowwise)
            o.state0[row] = acc;
        bag_update_row_commit(&o, row, p);
    }
}

} /* namespace */

extern "C" ember_status_t cuda_bag_forward(cuda_dev_t *dev, const float *table, int64_t rows,
                                           size_t dim, const ember_bag_batch_t *batch,
                                           const ember_bag_opts_t *opts, float *out_p,
                                           int64_t *argmax_p)
{
    if (!batch || !opts || dim == 0 || (batch->bags > 0 && (!out_p || !batch->offsets)) ||
        (batch->n > 0 && (!table || !batch->indices)) ||
        (opts->mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax_p)) {
        ember_error("cuda", "bag forward: invalid arguments");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->bags == 0)
        return EMBER_OK;
    const size_t bags = batch->bags;
    const int64_t pad = opts->padding_idx;
    const float *w = batch->weights;

    if (opts->mode == EMBER_BAG_MAX) {
        unsigned tx = lanes_for(dim), ty = kBlock / tx;
        dim3 block(tx, ty), grid((unsigned)((bags + ty - 1) / ty));
        k_bag_max<<<grid, block, 0, dev->stream>>>(table, dim, batch->indices, batch->n,
                                                   batch->offsets, bags, pad, out_p, argmax_p);
    } else {
        int mean = opts->mode == EMBER_BAG_MEAN;
        if (dim % 4 == 0 && aligned16(table) && aligned16(out_p)) {
            size_t vecs = dim / 4;
            unsigned tx = lanes_for(vecs), ty = kBlock / tx;
            dim3 block(tx, ty), grid((unsigned)((bags + ty - 1) / ty));
            k_bag_sum<float4><<<grid, block, 0, dev->stream>>>(
                    (const float4 *)table, vecs, batch->indices, batch->n, batch->offsets, bags, w,
                    pad, mean, (float4 *)out_p);
        } else {
            unsigned tx = lanes_for(dim), ty = kBlock / tx;
            dim3 block(tx, ty), grid((unsigned)((bags + ty - 1) / ty));
            k_bag_sum<float><<<grid, block, 0, dev->stream>>>(table, dim, batch->indices, batch->n,
                                                              batch->offsets, bags, w, pad, mean,
                                                              out_p);
        }
    }
    CUDA_CALL(cudaGetLastError());
    (void)rows;
    return EMBER_OK;
}

/* The arguments a backward needs, and the kernels' 32-bit positions. */
static ember_status_t bwd_check(const float *table, int64_t rows, size_t dim,
                                const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                const float *grad_out, const int64_t *argmax,
                                const int64_t *grad_rows_p, const float *grad_p,
                                const size_t *nrows_p, const float *grad_weights_p)
{
    if (!batch || !opts || dim == 0 || !nrows_p || rows <= 0 ||
        (batch->bags > 0 && (!grad_out || !batch->offsets)) ||
        (batch->n > 0 && (!batch->indices || !grad_rows_p || !grad_p))) {
        ember_error("cuda", "bag backward: invalid arguments");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (opts->mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax) {
        ember_error("cuda", "bag backward: max mode needs the argmax");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (grad_weights_p && (!batch->weights || !table || opts->mode != EMBER_BAG_SUM)) {
        ember_error("cuda", "bag backward: weight gradient needs weights, "
                            "the table and mode sum");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->n >= (size_t)INT_MAX || batch->bags >= (size_t)INT_MAX) {
        ember_error("cuda",
                    "bag backward: %zu entries / %zu bags exceed the "
                    "kernel's 32-bit positions",
                    batch->n, batch->bags);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/* A backward's arrays in the device scratch, and CUB's temporary storage. */
typedef struct {
    unsigned long long *keys_in, *keys_out, *nrows;
    int *pos_in, *pos_out, *bag_of, *lengths, *run_off, *nruns;
    float *mean_scale;
    unsigned long long *unique; /* [n]: the fused op's unique rows (else NULL) */
    /* The fused op's long segments (over BAG_UPDATE_SUB entries): per row
     * its sub-segment count (0 for a short one) and their first item; per
     * item its row; per item its partial sums [items_cap, dim]. */
    int *nsub, *item_off, *item_row;
    float *partials;
    size_t items_cap;
    void *cub_tmp;
    size_t cub_bytes;
    unsigned long long sentinel; /* the key of a padding entry: sorts last */
    int end_bit;
} bwd_scratch_t;

/* CUB's temporary storage for n entries: the largest of the three calls. */
static ember_status_t bwd_cub_bytes(cuda_dev_t *dev, int nn, int end_bit, size_t *bytes_p)
{
    size_t tmp_sort = 0, tmp_rle = 0, tmp_scan = 0;
    unsigned long long *nullk = nullptr;
    int *nulli = nullptr;
    CUDA_CALL(cub::DeviceRadixSort::SortPairs(nullptr, tmp_sort, nullk, nullk, nulli, nulli, nn, 0,
                                              end_bit, dev->stream));
    CUDA_CALL(cub::DeviceRunLengthEncode::Encode(nullptr, tmp_rle, nullk, nullk, nulli, nulli, nn,
                                                 dev->stream));
    CUDA_CALL(cub::DeviceScan::ExclusiveSum(nullptr, tmp_scan, nulli, nulli, nn, dev->stream));
    size_t tmp = tmp_sort > tmp_rle ? tmp_sort : tmp_rle;
    *bytes_p = tmp > tmp_scan ? tmp : tmp_scan;
    return EMBER_OK;
}

static ember_status_t bwd_scratch(cuda_dev_t *dev, int64_t rows, size_t n, size_t bags,
                                  size_t update_dim, bwd_scratch_t *sc)
{
    sc->sentinel = (unsigned long long)rows;
    sc->end_bit = 64 - __builtin_clzll(sc->sentinel); /* rows > 0 */
    EMBER_CHECK(bwd_cub_bytes(dev, (int)n, sc->end_bit, &sc->cub_bytes));
    size_t o_keys_in = 0;
    size_t o_keys_out = o_keys_in + align_up(n * 8);
    size_t o_pos_in = o_keys_out + align_up(n * 8);
    size_t o_pos_out = o_pos_in + align_up(n * 4);
    size_t o_bag = o_pos_out + align_up(n * 4);
    size_t o_len = o_bag + align_up(n * 4);
    size_t o_runoff = o_len + align_up(n * 4);
    size_t o_nruns = o_runoff + align_up(n * 4);
    size_t o_nrows = o_nruns + align_up(sizeof(int));
    size_t o_scale = o_nrows + align_up(sizeof(unsigned long long));
    /* update_dim != 0: the fused op's arrays too.  A long segment of len
     * entries has ceil(len / SUB) <= 2 len / SUB items: at most 2n / SUB. */
    const int upd = update_dim != 0;
    sc->items_cap = upd ? 2 * n / BAG_UPDATE_SUB + 1 : 0;
    size_t o_unique = o_scale + align_up((bags + 1) * 4);
    size_t o_nsub = o_unique + (upd ? align_up(n * 8) : 0);
    size_t o_item_off = o_nsub + (upd ? align_up(n * 4) : 0);
    size_t o_item_row = o_item_off + (upd ? align_up(n * 4) : 0);
    size_t o_partials = o_item_row + align_up(sc->items_cap * 4);
    size_t o_tmp = o_partials + align_up(sc->items_cap * update_dim * 4);
    EMBER_CHECK(cuda_scratch_reserve(dev, o_tmp + align_up(sc->cub_bytes)));

    char *s = (char *)dev->scratch;
    sc->keys_in = (unsigned long long *)(s + o_keys_in);
    sc->keys_out = (unsigned long long *)(s + o_keys_out);
    sc->pos_in = (int *)(s + o_pos_in);
    sc->pos_out = (int *)(s + o_pos_out);
    sc->bag_of = (int *)(s + o_bag);
    sc->lengths = (int *)(s + o_len);
    sc->run_off = (int *)(s + o_runoff);
    sc->nruns = (int *)(s + o_nruns);
    sc->nrows = (unsigned long long *)(s + o_nrows);
    sc->mean_scale = (float *)(s + o_scale);
    sc->unique = upd ? (unsigned long long *)(s + o_unique) : NULL;
    sc->nsub = upd ? (int *)(s + o_nsub) : NULL;
    sc->item_off = upd ? (int *)(s + o_item_off) : NULL;
    sc->item_row = upd ? (int *)(s + o_item_row) : NULL;
    sc->partials = upd ? (float *)(s + o_partials) : NULL;
    sc->cub_tmp = s + o_tmp;
    return EMBER_OK;
}

/* Each entry's (row, position) key sorted, the runs of equal rows counted
 * and their starts scanned: the unique rows land in @unique. */
static ember_status_t bwd_group_rows(cuda_dev_t *dev, const ember_bag_batch_t *batch,
                                     const ember_bag_opts_t *opts, bwd_scratch_t *sc,
                                     unsigned long long *unique)
{
    const size_t n = batch->n, bags = batch->bags;
    const int nn = (int)n;
    const int64_t pad = opts->padding_idx;
    unsigned grid_n = (unsigned)((n + kBlock - 1) / kBlock);
    k_bwd_keys<<<grid_n, kBlock, 0, dev->stream>>>(batch->indices, n, batch->offsets, bags, pad,
                                                   sc->sentinel, sc->keys_in, sc->pos_in,
                                                   sc->bag_of);
    CUDA_CALL(cudaGetLastError());
    if (opts->mode == EMBER_BAG_MEAN && bags > 0) {
        k_bwd_mean_scale<<<(unsigned)((bags + kBlock - 1) / kBlock), kBlock, 0, dev->stream>>>(
                batch->indices, n, batch->offsets, bags, pad, sc->mean_scale);
        CUDA_CALL(cudaGetLastError());
    }
    size_t t = sc->cub_bytes;
    CUDA_CALL(cub::DeviceRadixSort::SortPairs(sc->cub_tmp, t, sc->keys_in, sc->keys_out, sc->pos_in,
                                              sc->pos_out, nn, 0, sc->end_bit, dev->stream));
    CUDA_CALL(cudaMemsetAsync(sc->lengths, 0, n * sizeof(int), dev->stream));
    t = sc->cub_bytes;
    CUDA_CALL(cub::DeviceRunLengthEncode::Encode(sc->cub_tmp, t, sc->keys_out, unique, sc->lengths,
                                                 sc->nruns, nn, dev->stream));
    t = sc->cub_bytes;
    CUDA_CALL(cub::DeviceScan::ExclusiveSum(sc->cub_tmp, t, sc->lengths, sc->run_off, nn,
                                            dev->stream));
    k_bwd_count<<<1, 1, 0, dev->stream>>>(unique, sc->nruns, sc->sentinel, sc->nrows);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

extern "C" ember_status_t cuda_bag_backward(cuda_dev_t *dev, const float *table, int64_t rows,
                                            size_t dim, const ember_bag_batch_t *batch,
                                            const ember_bag_opts_t *opts, const float *grad_out,
                                            const int64_t *argmax, int64_t *grad_rows_p,
                                            float *grad_p, size_t *nrows_p, float *grad_weights_p)
{
    EMBER_CHECK(bwd_check(table, rows, dim, batch, opts, grad_out, argmax, grad_rows_p, grad_p,
                          nrows_p, grad_weights_p));
    if (batch->n == 0) {
        *nrows_p = 0;
        return EMBER_OK;
    }
    const size_t n = batch->n;
    bwd_scratch_t sc = {};
    /* The unique rows land straight in the caller's buffer (capacity n). */
    auto *unique = (unsigned long long *)grad_rows_p;
    EMBER_CHECK(bwd_scratch(dev, rows, n, batch->bags, 0, &sc));
    EMBER_CHECK(bwd_group_rows(dev, batch, opts, &sc, unique));

    /* Launch over every possible row; blocks past the real count return. */
    unsigned tx = lanes_for(dim), ty = kBlock / tx;
    dim3 block(tx, ty), grid((unsigned)((n + ty - 1) / ty));
    k_bwd_reduce<<<grid, block, 0, dev->stream>>>(dim, unique, sc.nrows, sc.run_off, sc.lengths,
                                                  sc.pos_out, sc.bag_of, grad_out, batch->weights,
                                                  sc.mean_scale, argmax, (int)opts->mode, grad_p);
    CUDA_CALL(cudaGetLastError());
    if (grad_weights_p) {
        unsigned grid_w = (unsigned)((n * 32 + kBlock - 1) / kBlock);
        k_bwd_weights<<<grid_w, kBlock, 0, dev->stream>>>(table, dim, batch->indices, n, sc.bag_of,
                                                          opts->padding_idx, grad_out,
                                                          grad_weights_p);
        CUDA_CALL(cudaGetLastError());
    }
    unsigned long long *host = (unsigned long long *)dev->pinned;
    CUDA_CALL(cudaMemcpyAsync(host, sc.nrows, sizeof(*host), cudaMemcpyDeviceToHost, dev->stream));
    CUDA_CALL(cudaStreamSynchronize(dev->stream));
    *nrows_p = (size_t)*host;
    return EMBER_OK;
}

/* The fused op's arguments, the state its optimizer needs included. */
static ember_status_t update_check(const float *table, int64_t rows, size_t dim,
                                   const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                   const float *grad_out, const int64_t *argmax,
                                   const ember_device_opt_t *opt)
{
    /* A shard that owns no row may still step an empty batch. */
    if (!batch || !opts || dim == 0 || rows < 0 || (rows == 0 && batch->n > 0) ||
        (batch->bags > 0 && (!grad_out || !batch->offsets)) ||
        (batch->n > 0 && (!batch->indices || !table)) ||
        (opts->mode == EMBER_BAG_MAX && batch->bags > 0 && !argmax)) {
        ember_error("cuda", "bag backward update: invalid arguments");
        return EMBER_ERR_INVALID_PARAM;
    }
    const char *why = bag_update_opt_check(opt);
    if (why) {
        ember_error("cuda", "bag backward update: %s", why);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (batch->n >= (size_t)INT_MAX || batch->bags >= (size_t)INT_MAX) {
        ember_error("cuda",
                    "bag backward update: %zu entries / %zu bags exceed the kernel's "
                    "32-bit positions",
                    batch->n, batch->bags);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/* The long segments' items: counted, scanned, named by their rows. */
static ember_status_t update_items(cuda_dev_t *dev, const bwd_scratch_t &sc, size_t n)
{
    unsigned grid_n = (unsigned)((n + kBlock - 1) / kBlock);
    k_upd_nsub<<<grid_n, kBlock, 0, dev->stream>>>(sc.nrows, sc.lengths, n, sc.nsub);
    CUDA_CALL(cudaGetLastError());
    size_t t = sc.cub_bytes;
    CUDA_CALL(cub::DeviceScan::ExclusiveSum(sc.cub_tmp, t, sc.nsub, sc.item_off, (int)n,
                                            dev->stream));
    k_upd_items<<<grid_n, kBlock, 0, dev->stream>>>(sc.nrows, sc.nsub, sc.item_off, n, sc.item_row);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}

/* The long segments' partials (a warp per possible item), then one warp
 * per possible unique row (n of them); VPL elements per lane. */
template <int VPL>
static void update_launch(cuda_dev_t *dev, const bag_update_src_t &src,
                          const ember_device_opt_t &opt, float clr, float *table,
                          const bwd_scratch_t &sc, size_t n)
{
    const unsigned warps = kBlock / 32;
    unsigned grid_items = (unsigned)((sc.items_cap + warps - 1) / warps);
    k_upd_partials<VPL><<<grid_items, kBlock, 0, dev->stream>>>(
            src, sc.run_off, sc.lengths, sc.nsub, sc.item_off, sc.item_row, sc.unique, n,
            sc.items_cap, sc.partials);
    const upd_long_t lg = {sc.nsub, sc.item_off, sc.partials};
    unsigned grid = (unsigned)((n + warps - 1) / warps);
    k_bag_update<VPL><<<grid, kBlock, 0, dev->stream>>>(src, lg, opt, clr, table, sc.unique,
                                                        sc.nrows, sc.run_off, sc.lengths);
}

extern "C" ember_status_t cuda_bag_backward_update(cuda_dev_t *dev, float *table, int64_t rows,
                                                   size_t dim, const ember_bag_batch_t *batch,
                                                   const ember_bag_opts_t *opts,
                                                   const float *grad_out, const int64_t *argmax,
                                                   const ember_device_opt_t *opt)
{
    EMBER_CHECK(update_check(table, rows, dim, batch, opts, grad_out, argmax, opt));
    if (batch->n == 0)
        return EMBER_OK;
    const size_t n = batch->n;
    bwd_scratch_t sc = {};
    EMBER_CHECK(bwd_scratch(dev, rows, n, batch->bags, dim, &sc));
    EMBER_CHECK(bwd_group_rows(dev, batch, opts, &sc, sc.unique));
    EMBER_CHECK(update_items(dev, sc, n));
    bag_update_src_t src = {};
    src.pos = sc.pos_out;
    src.bag_of = sc.bag_of;
    src.grad_out = grad_out;
    src.weights = opts->mode == EMBER_BAG_SUM ? batch->weights : NULL;
    src.mean_scale = sc.mean_scale;
    src.argmax = argmax;
    src.mode = (int)opts->mode;
    src.dim = dim;
    src.sub = BAG_UPDATE_SUB;
    const float clr = opt->kind == BAG_OPT_ADAGRAD ? bag_update_adagrad_clr(opt) : 0.0f;
    if (dim <= 32)
        update_launch<1>(dev, src, *opt, clr, table, sc, n);
    else if (dim <= 64)
        update_launch<2>(dev, src, *opt, clr, table, sc, n);
    else if (dim <= 128)
        update_launch<4>(dev, src, *opt, clr, table, sc, n);
    else
        update_launch<8>(dev, src, *opt, clr, table, sc, n);
    CUDA_CALL(cudaGetLastError());
    return EMBER_OK;
}
