/*
 * engine/io/npy: NumPy's .npy files, memory-mapped.
 *
 * A file is the magic "\x93NUMPY", a format version (1.0: a 2-byte header
 * length; 2.0 and 3.0: 4 bytes, 3.0's header UTF-8), then the header: a
 * Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)},
 * then the array's bytes.  Read here: the little-endian (or one-byte)
 * numeric dtypes, C order only (fortran_order True is refused), the shape at
 * full width, its bytes exactly what the file holds after the header.  A
 * refused file is named with what is wrong with it (magic, version, header,
 * dtype, shape, truncated).
 */
#ifndef EMBER_ENGINE_NPY_H
#define EMBER_ENGINE_NPY_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#define EMBER_NPY_MAX_DIMS   64        /* NumPy 2's NPY_MAXDIMS */
#define EMBER_NPY_HEADER_MAX (1 << 20) /* NumPy refuses past 10000 by default */

typedef enum {
    EMBER_NPY_BOOL, /* |b1 */
    EMBER_NPY_I1,   /* |i1 */
    EMBER_NPY_U1,   /* |u1 */
    EMBER_NPY_I2,   /* <i2 */
    EMBER_NPY_U2,   /* <u2 */
    EMBER_NPY_I4,   /* <i4 */
    EMBER_NPY_U4,   /* <u4 */
    EMBER_NPY_I8,   /* <i8 */
    EMBER_NPY_U8,   /* <u8 */
    EMBER_NPY_F2,   /* <f2 */
    EMBER_NPY_F4,   /* <f4 */
    EMBER_NPY_F8,   /* <f8 */
} ember_npy_dtype_t;

typedef struct {
    ember_npy_dtype_t dtype;
    const char *descr; /* as NumPy writes it, "<f4" (static) */
    size_t itemsize;
    uint8_t major, minor; /* the format version */
    uint32_t ndim;        /* 0 for a scalar */
    uint64_t shape[EMBER_NPY_MAX_DIMS];
    uint64_t count;       /* elements: the shape's product (1 for a scalar) */
    uint64_t data_offset; /* where the array starts in the file */
    uint64_t data_bytes;  /* count * itemsize, all of the file after the header */
} ember_npy_header_t;

/**
 * The header of a .npy file whose first @length bytes are @bytes and whose
 * size is @file_size (>= @length; the header must lie in @bytes), checked:
 * the magic, the version, the dict's keys (each once, no others), a dtype of
 * the table above, fortran_order False, the shape (each dimension and the
 * product at full width) and its bytes exactly the rest of the file.  Pure.
 * Errors: ERR_FORMAT (or ERR_UNSUPPORTED for a valid file ember does not
 * read: another dtype, fortran order), what is wrong in @err.
 */
ember_status_t ember_npy_parse_header(const void *bytes, size_t length, uint64_t file_size,
                                      ember_npy_header_t *header_p, char *err, size_t err_length);

/** "(3, 13)": @header's shape as NumPy prints it, into @text (cut to @length). */
void ember_npy_shape_text(const ember_npy_header_t *header, char *text, size_t length);

typedef struct ember_npy ember_npy_t;

/**
 * Map @path (read-only, shared: pages come from the page cache and are
 * never copied) and check its header.  Errors: ERR_IO (open, stat, mmap),
 * ERR_FORMAT / ERR_UNSUPPORTED as ember_npy_parse_header, each "PATH: ...",
 * ERR_NO_MEMORY.
 */
ember_status_t ember_npy_open(const char *path, ember_npy_t **npy_p, char *err, size_t err_length);

/** The header, the array's first byte (header->data_bytes of them, not
 * necessarily aligned) and the path; valid until ember_npy_close. */
const ember_npy_header_t *ember_npy_header(const ember_npy_t *npy);
const void *ember_npy_data(const ember_npy_t *npy);
const char *ember_npy_path(const ember_npy_t *npy);

/** Unmap; NULL is ignored. */
void ember_npy_close(ember_npy_t *npy);

#endif
