/*
 * ember: safetensors files (checkpoints, saved weights, golden runs), the
 * checked reader and the durable writer ember itself uses.
 *
 * Format: u64 little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 *    ..., "__metadata__": {"key": "value", ...}}
 * then the raw little-endian tensor bytes; offsets are relative to the byte
 * after the header.  The reader checks everything against the file size
 * before exposing a pointer: a malformed file yields ERR_FORMAT and a message
 * naming the tensor (or the JSON byte) at fault, never a crash.
 *
 * Threading: a file object may be read from any number of threads at once
 * (nothing in it changes after open); the calls keep no global state.
 * The calls that take a path block on its I/O; the others never block.
 */
#ifndef EMBER_SAFETENSORS_H
#define EMBER_SAFETENSORS_H

#include <ember/dtype.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_ST_MAX_DIMS 8
/* safetensors' own limit on the JSON header; also bounds what we allocate. */
#define EMBER_ST_MAX_HEADER (100u << 20)

/* ember_dtype_t: <ember/dtype.h>. */

/* One tensor.  From the reader: every field filled, name and data borrowed
 * from the file object (valid until ember_st_close); data is NOT aligned in
 * general (safetensors packs tensors back to back), so copy it out with
 * memcpy or ember_st_read_copy before using it as typed memory.
 * For the writer: name, dtype, ndim, shape, data are read; numel/nbytes are
 * ignored (computed). */
typedef struct {
    const char *name;
    ember_dtype_t dtype;
    size_t ndim;
    int64_t shape[EMBER_ST_MAX_DIMS];
    size_t numel;
    size_t nbytes;
    const void *data;
} ember_st_tensor_t;

/* One metadata entry (both strings borrowed). */
typedef struct {
    const char *key;
    const char *value;
} ember_st_meta_t;

typedef struct ember_st_file ember_st_file_t;

/* ember_dtype_name, ember_dtype_size: <ember/dtype.h>. */

/**
 * Read and check a whole file (read into memory, so a file changed later
 * does not affect us).  @path borrowed; *@file_p the caller's
 * (ember_st_close).  @err/@err_length (may be NULL/0) receive the cause on
 * error; nothing is logged.  Errors: ERR_IO (cannot open/read; errno text
 * in err), ERR_FORMAT (malformed), ERR_NO_MEMORY.
 */
ember_status_t ember_st_open(const char *path, ember_st_file_t **file_p, char *err,
                             size_t err_length);

/**
 * As ember_st_open, from a buffer of @size bytes (copied; borrowed for the
 * call).  Used for files received over the network and by the tests.
 * Errors: ERR_FORMAT, ERR_NO_MEMORY.
 */
ember_status_t ember_st_open_buffer(const void *buf, size_t size, ember_st_file_t **file_p,
                                    char *err, size_t err_length);

/** Free the file object and everything borrowed from it (its mapping or
 * copy).  NULL is a no-op. */
void ember_st_close(ember_st_file_t *file);

/** Number of tensors (metadata not counted).  Cannot fail. */
size_t ember_st_count(const ember_st_file_t *file);

/** Tensor @i (in header order), or NULL when i >= count. */
const ember_st_tensor_t *ember_st_tensor_at(const ember_st_file_t *file, size_t i);

/** Tensor named @name, or NULL.  Borrowed from the file object. */
const ember_st_tensor_t *ember_st_find(const ember_st_file_t *file, const char *name);

/** Metadata value for @key, or NULL.  Borrowed from the file object. */
const char *ember_st_metadata(const ember_st_file_t *file, const char *key);

/**
 * Copy tensor @name into a new, aligned buffer checked to be of @dtype.
 * @data_p receives malloc'd memory the caller frees; @numel_p the element
 * count (may be NULL).  A zero-element tensor gives a non-NULL 1-byte buffer.
 * Errors: ERR_NOT_FOUND, ERR_FORMAT (dtype differs; logged with the name),
 * ERR_NO_MEMORY.
 */
ember_status_t ember_st_read_copy(const ember_st_file_t *file, const char *name,
                                  ember_dtype_t dtype, void **data_p, size_t *numel_p);

/**
 * Write @ntensors tensors (in the order given, data back to back) and
 * @nmeta metadata strings to @path.  The file appears atomically: it is
 * written as "<path>.tmp" and renamed (ember_st_write_durable with no
 * @written).  All arguments borrowed.
 * Errors: ERR_INVALID_PARAM (NULL/duplicate/"__metadata__" names, ndim >
 * EMBER_ST_MAX_DIMS, negative dims), ERR_IO, ERR_NO_MEMORY; the cause is
 * logged, "<path>.tmp" is removed and a file already at @path stays as
 * it was (unless only the final directory sync failed: then @path is
 * removed too).
 */
ember_status_t ember_st_write(const char *path, const ember_st_tensor_t *tensors, size_t ntensors,
                              const ember_st_meta_t *meta, size_t nmeta);

/* What a durable write wrote: the file's size and the CRC-32C (Castagnoli) of all its
 * bytes, for a checkpoint's manifest. */
typedef struct {
    uint64_t bytes;
    uint32_t crc32c;
} ember_st_written_t;

/**
 * As ember_st_write, and durable: the data written
 * in chunks of a few MiB straight from the tensors (no copy of the file in
 * memory), the CRC-32C of every byte of the file computed as it is
 * written, "<path>.tmp" fsync'ed, renamed to @path, and the directory
 * fsync'ed (so the name survives a crash).  @written (may be NULL) gets
 * the file's size and CRC on success.  Blocks until the data is on disk.
 * Errors as ember_st_write.
 */
ember_status_t ember_st_write_durable(const char *path, const ember_st_tensor_t *tensors,
                                      size_t ntensors, const ember_st_meta_t *meta, size_t nmeta,
                                      ember_st_written_t *written);

/**
 * As ember_st_open, but the file is mapped read-only (MAP_PRIVATE), not
 * copied: for checkpoint shards of many GB, paged in as they are read.
 * Same checks.  The mapping lives until ember_st_close; the file must not
 * be truncated or rewritten in place meanwhile (checkpoint files are only
 * ever replaced by rename, which leaves the mapped one intact).
 */
ember_status_t ember_st_map(const char *path, ember_st_file_t **file_p, char *err,
                            size_t err_length);

#ifdef __cplusplus
}
#endif
#endif
