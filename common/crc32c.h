/*
 * common/crc32c: CRC-32C (Castagnoli, the checksum of iSCSI, ext4 and
 * SCTP), for checkpoint files and their manifests.
 *
 *     uint32_t crc = ember_crc32c(0, a, a_length);
 *     crc = ember_crc32c(crc, b, b_length);   // == ember_crc32c(0, a||b)
 *
 * With SSE4.2 (checked at run time) three streams of the CRC instruction
 * run side by side and are joined by a shift table; elsewhere a
 * slicing-by-8 table.  Both give the same value; ember_crc32c picks the
 * fast one.
 */
#ifndef EMBER_COMMON_CRC32C_H
#define EMBER_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/** The CRC-32C of @crc's bytes followed by @length bytes at @data
 * (borrowed); @crc is 0 for the first piece.  Never fails; @data may be
 * NULL when @length is 0.  Thread-safe. */
uint32_t ember_crc32c(uint32_t crc, const void *data, size_t length);

/** The same, always by the table (the tests compare the two). */
uint32_t ember_crc32c_table(uint32_t crc, const void *data, size_t length);

/** The same, by the SSE4.2 instruction; only when ember_crc32c_hw says 1. */
uint32_t ember_crc32c_sse42(uint32_t crc, const void *data, size_t length);

/** 1 when this CPU (and this build) has the SSE4.2 path. */
int ember_crc32c_hw(void);

#endif
