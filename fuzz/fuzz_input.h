/*
 * fuzz/fuzz_input: what the fuzz targets share.  A reader over libFuzzer's
 * input (reads past the end give zeros, so every input means something),
 * the record framing the stateful targets use, and the check that turns a
 * broken invariant into a crash libFuzzer reports.
 *
 * Records: [u8 op][u16 length, little-endian][length bytes]; a record cut
 * short by the end of the input has the bytes that are there.
 * fuzz/make_corpus.c writes them with the same layout.
 */
#ifndef EMBER_FUZZ_INPUT_H
#define EMBER_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *data;
    size_t size, pos;
} fuzz_input_t;

/* An invariant of ember's the input broke: say which, then crash. */
#define FUZZ_CHECK(cond, ...)                                                                   \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz: %s:%d: invariant '%s' broken: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fputc('\n', stderr);                                                                \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

static inline int fuzz_left(const fuzz_input_t *in)
{
    return in->pos < in->size;
}

static inline uint8_t fuzz_u8(fuzz_input_t *in)
{
    return in->pos < in->size ? in->data[in->pos++] : 0;
}

static inline uint16_t fuzz_u16(fuzz_input_t *in)
{
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

static inline uint32_t fuzz_u32(fuzz_input_t *in)
{
    uint32_t lo = fuzz_u16(in);
    return lo | (uint32_t)fuzz_u16(in) << 16;
}

/* Up to @n bytes at the reader (fewer at the end): *bytes_p points at them
 * in the input; returns how many. */
static inline size_t fuzz_take(fuzz_input_t *in, size_t n, const uint8_t **bytes_p)
{
    size_t left = in->size - in->pos;
    if (n > left)
        n = left;
    *bytes_p = in->data + in->pos;
    in->pos += n;
    return n;
}

/* The next record's op; its payload copied into a buffer of exactly its
 * size (malloc'd, freed by the caller; so AddressSanitizer sees a read past
 * it), *length_p its bytes.  Returns -1 at the end of the input. */
static inline int fuzz_record(fuzz_input_t *in, uint8_t **payload_p, size_t *length_p)
{
    const uint8_t *bytes;
    if (!fuzz_left(in))
        return -1;
    int op = fuzz_u8(in);
    size_t length = fuzz_take(in, fuzz_u16(in), &bytes);
    uint8_t *copy = malloc(length ? length : 1);
    if (!copy)
        abort();
    memcpy(copy, bytes, length);
    *payload_p = copy;
    *length_p = length;
    return op;
}

#endif
