/*
 * engine/ops/half: IEEE 754 binary16 ("fp16", torch.float16) storage for
 * embedding rows: conversions to and from fp32 and the row kernels the
 * pooling and the optimizers need.
 *
 * An fp16 table keeps half the bytes of an fp32 one (memory, and the memory
 * traffic of a gather); all arithmetic is fp32: a row is widened (exactly),
 * pooled or updated in fp32, and an updated row is rounded back to the
 * nearest fp16 (ties to even), as `tensor.half()` does.  Values beyond
 * +-65504 round to infinity, tiny ones to fp16 subnormals or zero.
 *
 * x86-64 CPUs with F16C convert 8 values per instruction; the choice is made
 * once, at run time, and both paths give the same bits (tests compare them).
 */
#ifndef EMBER_ENGINE_HALF_H
#define EMBER_ENGINE_HALF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The smallest magnitude that rounds to infinity (65504 + half an ulp). */
#define EMBER_HALF_OVERFLOW 65520.0f

/** fp16 bits -> fp32 (exact: every fp16 value is an fp32 value). */
float ember_half_to_float(uint16_t h);

/** fp32 -> nearest fp16 bits (ties to even; overflow to inf; NaN stays a
 * quiet NaN with its sign and top payload bits). */
uint16_t ember_float_to_half(float f);

/** @out[i] = widened @in[i], i < n. */
void ember_half_to_float_n(const uint16_t *in, float *out, size_t n);

/** @out[i] = @in[i] rounded to fp16, i < n. */
void ember_float_to_half_n(const float *in, uint16_t *out, size_t n);

/** @buf's n floats rounded to fp16 in place: uint16[n] at @buf afterwards
 * (a reply narrowed in its own buffer). */
void ember_float_to_half_in_place(void *buf, size_t n);

/** @y[i] += @a * @x[i] (fp32 arithmetic), i < n. */
void ember_half_axpy(float *y, const uint16_t *x, float a, size_t n);

/** The same with a = 1 (exactly y + x). */
void ember_half_add(float *y, const uint16_t *x, size_t n);

/** Plain SGD on a row of fp16 values: @w[i] = fp16(fp32(@w[i]) - @lr * @g[i]),
 * the multiply and the subtraction rounded apart, as the fp32 optimizer
 * does, i < n. */
void ember_half_sgd(uint16_t *w, const float *g, float lr, size_t n);

/** 1 when the F16C path is in use (for tests and the benchmark header). */
int ember_half_f16c(void);

/** Tests only: 0 forces the portable path, 1 the F16C one where the CPU has
 * it, -1 goes back to the choice made at start. */
void ember_half_force(int f16c);

#ifdef __cplusplus
}
#endif
#endif
