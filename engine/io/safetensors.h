/*
 * engine/io/safetensors: safetensors files; the interface is public
 * (<ember/safetensors.h>) but for the engine's writer of tensors whose
 * bytes come from a callback (a PS's checkpoint read from its live tables,
 * engine/ps/ps_ckpt.c).
 */
#ifndef EMBER_ENGINE_SAFETENSORS_H
#define EMBER_ENGINE_SAFETENSORS_H

#include <ember/safetensors.h>

/* The bytes a filled tensor's writer asks for at a time: one durable
 * chunk, written (and its CRC taken) while it is in cache. */
#define EMBER_ST_FILL_CHUNK (4u << 20)

/* Fill @buf with bytes [@offset, @offset + @length) of tensor @tensor's
 * data (@length <= EMBER_ST_FILL_CHUNK); a failure's cause in @err. */
typedef ember_status_t (*ember_st_fill_cb)(void *arg, size_t tensor, uint64_t offset, void *buf,
                                           size_t length, char *err, size_t err_length);

/**
 * As ember_st_write_durable, but the tensors whose data is NULL (and that
 * have bytes) are written from @fill, called in order through each one's
 * bytes, a chunk at a time, into a buffer of the writer's own (allocated
 * per call).  A fill's failure fails the write (the temporary file
 * removed; its cause logged with the path).  Errors: as
 * ember_st_write_durable, and the fill's.
 */
ember_status_t ember_st_write_filled(const char *path, const ember_st_tensor_t *tensors,
                                     size_t ntensors, const ember_st_meta_t *meta, size_t nmeta,
                                     ember_st_fill_cb fill, void *arg, ember_st_written_t *written);

#endif
