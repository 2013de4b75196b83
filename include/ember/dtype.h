/*
 * ember: element types, as safetensors names them.  Files may hold any of
 * these; an embedding table stores F32 or F16 (IEEE binary16) rows.
 * The calls: any thread, never block, cannot fail; the names are static.
 */
#ifndef EMBER_DTYPE_H
#define EMBER_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EMBER_DTYPE_F32,
    EMBER_DTYPE_F64,
    EMBER_DTYPE_F16,
    EMBER_DTYPE_BF16,
    EMBER_DTYPE_I64,
    EMBER_DTYPE_I32,
    EMBER_DTYPE_I16,
    EMBER_DTYPE_I8,
    EMBER_DTYPE_U8,
    EMBER_DTYPE_BOOL,
    EMBER_DTYPE_U32 /* sparse Adam's per-row step counts in checkpoints */
} ember_dtype_t;

/** "F32", "I64", ... (safetensors' names); "?" for a value not listed. */
const char *ember_dtype_name(ember_dtype_t dtype);

/** Bytes per element of @dtype; 0 for a value not listed. */
size_t ember_dtype_size(ember_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif
