/* engine/ops/interaction: DLRM's pairwise dot products (see interaction.h).
 *
 * Examples go through in blocks of BLOCK: their F vectors transposed into
 * one [F][D][BLOCK] tile, so each pair's dot is D multiply-adds of BLOCK
 * examples side by side, one vector (block_t) per row of the tile, with no
 * per-example horizontal sum.  Each example's sums still run over d (the
 * forward) or over j (the backward) in increasing order, as one plain loop
 * would, so the result does not depend on the block, the vector width or
 * the instructions: the file is built without fused multiply-adds
 * (-ffp-contract=off) and its kernels are cloned for AVX2 and AVX-512 (the
 * loader picks the CPU's), each giving the same bits as the baseline's.
 * The kernels keep several rows' sums in registers at once: a dot's rows
 * (the forward, four pairs of one i at a time) or a gradient's rows (the
 * backward, ROWS at a time), so each tile row is loaded once for them. */
#include "engine/ops/interaction.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 16 /* examples side by side: one AVX-512 vector, two AVX2 ones */
#define ROWS  4  /* a backward's rows of d summed in registers at once */

typedef float block_t __attribute__((vector_size(BLOCK * sizeof(float))));

/* The CPU's widest vectors for the kernels (GCC's function clones; others,
 * and the sanitizers' builds, compile the baseline alone). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
        !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define KERNEL __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define KERNEL
#endif
/* What a kernel calls is built into each of its clones. */
#define INLINE static inline __attribute__((always_inline))

size_t ember_interaction_width(const ember_interaction_shape_t *shape)
{
    return shape->dim + shape->features * (shape->features - 1) / 2;
}

static int shape_valid(const ember_interaction_shape_t *shape, const void *a, const void *b)
{
    return shape && shape->features >= 1 && shape->dim >= 1 && shape->batch >= 1 && a && b;
}

INLINE block_t load(const float *p)
{
    return *(const block_t *)p;
}

INLINE void store(float *p, block_t v)
{
    *(block_t *)p = v;
}

typedef float v8_t __attribute__((vector_size(8 * sizeof(float))));

/* An 8 x 8 square: dst[c * dst_stride + r] = src[r * src_stride + c], in
 * three rounds of shuffles (as unpack, shuffle and permute would). */
INLINE void transpose8(const float *src, size_t src_stride, float *dst, size_t dst_stride)
{
    v8_t r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        memcpy(&r[i], src + i * src_stride, sizeof(v8_t));
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int c = 0; c < 4; c++) {
        const v8_t low = __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        const v8_t high = __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
        memcpy(dst + c * dst_stride, &low, sizeof(v8_t));
        memcpy(dst + (c + 4) * dst_stride, &high, sizeof(v8_t));
    }
}

/* dst[c * dst_stride + r] = src[r * src_stride + c] for r < @rows, c <
 * @cols: the tiles' way in and out, in 8 x 8 squares, the edges one by one. */
INLINE void transpose(const float *src, size_t src_stride, size_t rows, size_t cols, float *dst,
                      size_t dst_stride)
{
    size_t r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        size_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8)
            transpose8(src + r0 * src_stride + c0, src_stride, dst + c0 * dst_stride + r0,
                       dst_stride);
        for (; c0 < cols; c0++)
            for (size_t r = r0; r < r0 + 8; r++)
                dst[c0 * dst_stride + r] = src[r * src_stride + c0];
    }
    for (; r0 < rows; r0++)
        for (size_t c = 0; c < cols; c++)
            dst[c * dst_stride + r0] = src[r0 * src_stride + c];
}

/* tile[f][d][k] = vectors[f][(b0 + k) * D + d] for the block's @n examples
 * (zeros past them). */
INLINE void tile_in(const ember_interaction_shape_t *shape, const float *const *vectors, size_t b0,
                    size_t n, float *restrict tile)
{
    const size_t F = shape->features, D = shape->dim;
    if (n < BLOCK)
        memset(tile, 0, F * D * BLOCK * sizeof(float));
    for (size_t f = 0; f < F; f++)
        transpose(vectors[f] + b0 * D, D, n, D, tile + f * D * BLOCK, BLOCK);
}

/* A tile of the vectors of F features, or of a block's pair gradients:
 * aligned for block_t. */
static float *tile_alloc(size_t rows)
{
    return aligned_alloc(sizeof(block_t), (rows ? rows : 1) * BLOCK * sizeof(float));
}

/* The dots of vector @i with vectors j .. j + @count - 1 (1 to 4) of the
 * tile, each over d in increasing order, into dots[0 .. count). */
INLINE void dots_of(const float *restrict tile, size_t D, size_t i, size_t j, size_t count,
                    block_t dots[4])
{
    const float *a = tile + i * D * BLOCK, *b = tile + j * D * BLOCK;
    const size_t stride = D * BLOCK;
    block_t s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (size_t d = 0; d < D; d++) {
        const block_t x = load(a + d * BLOCK);
        const float *y = b + d * BLOCK;
        s0 += x * load(y);
        if (count > 1)
            s1 += x * load(y + stride);
        if (count > 2)
            s2 += x * load(y + 2 * stride);
        if (count > 3)
            s3 += x * load(y + 3 * stride);
    }
    dots[0] = s0, dots[1] = s1, dots[2] = s2, dots[3] = s3;
}

/* One block's output rows: the dense vector, then every pair's dot (into
 * @ptile [pairs][BLOCK] first, then turned into the rows). */
KERNEL static void forward_block(const ember_interaction_shape_t *shape,
                                 const float *const *vectors, float *restrict tile,
                                 float *restrict ptile, size_t b0, size_t n, float *out)
{
    const size_t F = shape->features, D = shape->dim, width = ember_interaction_width(shape);
    tile_in(shape, vectors, b0, n, tile);
    for (size_t k = 0; k < n; k++)
        memcpy(out + (b0 + k) * width, vectors[0] + (b0 + k) * D, D * sizeof(float));
    size_t pair = 0;
    for (size_t i = 0; i < F; i++) {
        for (size_t j = i + 1; j < F; j += 4) {
            const size_t count = F - j < 4 ? F - j : 4;
            block_t dots[4];
            if (count == 4) /* a constant to the inlined loop: no test per d */
                dots_of(tile, D, i, j, 4, dots);
            else
                dots_of(tile, D, i, j, count, dots);
            for (size_t c = 0; c < count; c++)
                store(ptile + (pair + c) * BLOCK, dots[c]);
            pair += count;
        }
    }
    transpose(ptile, BLOCK, pair, n, out + b0 * width + D, width);
}

ember_status_t ember_interaction_forward(const ember_interaction_shape_t *shape,
                                         const float *const *vectors, float *out)
{
    if (!shape_valid(shape, vectors, out))
        return EMBER_ERR_INVALID_PARAM;
    const size_t F = shape->features;
    for (size_t f = 0; f < F; f++)
        if (!vectors[f])
            return EMBER_ERR_INVALID_PARAM;
    float *tile = tile_alloc(F * shape->dim), *ptile = tile_alloc(F * (F - 1) / 2);
    ember_status_t status = tile && ptile ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    for (size_t b0 = 0; status == EMBER_OK && b0 < shape->batch; b0 += BLOCK) {
        const size_t n = shape->batch - b0 < BLOCK ? shape->batch - b0 : BLOCK;
        forward_block(shape, vectors, tile, ptile, b0, n, out);
    }
    free(tile);
    free(ptile);
    return status;
}

/* pair_of[i * F + j]: the place of the dot of i and j among the pairs
 * (triu_indices order), for i != j. */
static void pair_index(size_t F, uint32_t *pair_of)
{
    uint32_t k = 0;
    for (size_t i = 0; i < F; i++)
        for (size_t j = i + 1; j < F; j++, k++)
            pair_of[i * F + j] = pair_of[j * F + i] = k;
}

/* The block's pair gradients tiled: gtile[p][k] = grad_out's pair p of
 * example b0 + k (zeros past the block's @n). */
INLINE void grad_tile_in(const float *grad_out, size_t width, size_t D, size_t pairs, size_t b0,
                         size_t n, float *restrict gtile)
{
    if (n < BLOCK)
        memset(gtile, 0, pairs * BLOCK * sizeof(float));
    transpose(grad_out + b0 * width + D, width, n, pairs, gtile, BLOCK);
}

/* Rows d0 .. d0 + @count - 1 (1 to ROWS) of feature @f's gradient over the
 * block into @acc [D][BLOCK]: the sum over every other j, in increasing j,
 * of its pair's gradient times x_j (the dense part is added by the caller). */
INLINE void feature_rows(const float *restrict tile, const float *restrict gtile,
                         const uint32_t *pair_of, size_t F, size_t D, size_t f, size_t d0,
                         size_t count, float *restrict acc)
{
    block_t s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (size_t j = 0; j < F; j++) {
        if (j == f)
            continue;
        const block_t g = load(gtile + (size_t)pair_of[f * F + j] * BLOCK);
        const float *x = tile + (j * D + d0) * BLOCK;
        s0 += g * load(x);
        if (count > 1)
            s1 += g * load(x + BLOCK);
        if (count > 2)
            s2 += g * load(x + 2 * BLOCK);
        if (count > 3)
            s3 += g * load(x + 3 * BLOCK);
    }
    const block_t sums[ROWS] = {s0, s1, s2, s3};
    for (size_t r = 0; r < count; r++)
        store(acc + (d0 + r) * BLOCK, sums[r]);
}

/* The scratch of a backward: the tiles, a feature's sums, the pair map. */
typedef struct {
    float *tile, *gtile, *acc;
    uint32_t *pair_of;
} backward_scratch_t;

static int scratch_alloc(const ember_interaction_shape_t *shape, backward_scratch_t *s)
{
    const size_t F = shape->features, D = shape->dim;
    s->tile = tile_alloc(F * D);
    s->gtile = tile_alloc(F * (F - 1) / 2);
    s->acc = tile_alloc(D);
    s->pair_of = malloc(F * F * sizeof(uint32_t));
    return s->tile && s->gtile && s->acc && s->pair_of;
}

static void scratch_free(backward_scratch_t *s)
{
    free(s->tile);
    free(s->gtile);
    free(s->acc);
    free(s->pair_of);
}

/* One block's gradients of every feature, written out untiled. */
KERNEL static void backward_block(const ember_interaction_shape_t *shape,
                                  const float *const *vectors, const float *grad_out,
                                  float *const *grads, const backward_scratch_t *s, size_t b0,
                                  size_t n)
{
    const size_t F = shape->features, D = shape->dim, width = ember_interaction_width(shape);
    tile_in(shape, vectors, b0, n, s->tile);
    grad_tile_in(grad_out, width, D, F * (F - 1) / 2, b0, n, s->gtile);
    for (size_t f = 0; f < F; f++) {
        size_t d0 = 0;
        for (; d0 + ROWS <= D; d0 += ROWS) /* ROWS a constant to the inlined loop */
            feature_rows(s->tile, s->gtile, s->pair_of, F, D, f, d0, ROWS, s->acc);
        if (d0 < D)
            feature_rows(s->tile, s->gtile, s->pair_of, F, D, f, d0, D - d0, s->acc);
        transpose(s->acc, BLOCK, D, n, grads[f] + b0 * D, D);
    }
    for (size_t k = 0; k < n; k++) { /* the dense vector's own slice, added as one sum would */
        float *out = grads[0] + (b0 + k) * D;
        const float *dense = grad_out + (b0 + k) * width;
        for (size_t d = 0; d < D; d++)
            out[d] = dense[d] + out[d];
    }
}

ember_status_t ember_interaction_backward(const ember_interaction_shape_t *shape,
                                          const float *const *vectors, const float *grad_out,
                                          float *const *grads)
{
    if (!shape_valid(shape, vectors, grad_out) || !grads)
        return EMBER_ERR_INVALID_PARAM;
    const size_t F = shape->features;
    for (size_t f = 0; f < F; f++)
        if (!vectors[f] || !grads[f])
            return EMBER_ERR_INVALID_PARAM;
    backward_scratch_t s;
    if (!scratch_alloc(shape, &s)) {
        scratch_free(&s);
        return EMBER_ERR_NO_MEMORY;
    }
    pair_index(F, s.pair_of);
    for (size_t b0 = 0; b0 < shape->batch; b0 += BLOCK) {
        const size_t n = shape->batch - b0 < BLOCK ? shape->batch - b0 : BLOCK;
        backward_block(shape, vectors, grad_out, grads, &s, b0, n);
    }
    scratch_free(&s);
    return EMBER_OK;
}
