/*
 * engine/io/durable: files that survive a crash whole or not at all.
 *
 *     ember_durable_t d;
 *     EMBER_CHECK(ember_durable_open(&d, path, err, n));   // "<path>.tmp"
 *     ... ember_durable_write(&d, bytes, length, err, n) ...
 *     status = ember_durable_commit(&d, &bytes, &crc, err, n);
 *
 * The bytes go to "<path>.tmp" in chunks of EMBER_DURABLE_CHUNK, each
 * one's CRC-32C taken just before it is written (while it is in cache),
 * its writeback started at once; commit syncs the file (most of it
 * already on disk), renames it to @path and syncs the directory, so after
 * a crash @path is either the old file (or none) or the new one whole.
 * Any failure removes "<path>.tmp"; after one, commit only cleans up.
 * safetensors.c and checkpoint_manifest.c write through it.
 *
 * Opened direct (ember_durable_open_direct), the bytes are gathered in a
 * staging buffer of EMBER_DURABLE_CHUNK, aligned, and each full one
 * written with O_DIRECT, past the page cache: the copy into it and the
 * writeback, most of a buffered write's CPU, are the disk's DMA instead
 * (a PS's checkpoint, written beside training).  The last partial chunk
 * goes through the page cache.  Where the file system refuses O_DIRECT
 * the file is written as an ordinary one.
 */
#ifndef EMBER_ENGINE_IO_DURABLE_H
#define EMBER_ENGINE_IO_DURABLE_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

/* Big enough that the system calls cost nothing beside the copy, small
 * enough to stay in cache between the checksum and the write. */
#define EMBER_DURABLE_CHUNK (4u << 20)

typedef struct {
    char *path; /* the final name (owned copy) */
    char *tmp;  /* "<path>.tmp" */
    int fd;
    uint64_t bytes;   /* written so far */
    uint64_t flushed; /* on disk and out of the page cache up to here */
    uint32_t crc32c;
    int renamed;           /* the rename was done */
    ember_status_t status; /* the first failure, else OK */
    int direct_fd;         /* O_DIRECT on the same file, or -1 */
    uint8_t *stage;        /* direct: EMBER_DURABLE_CHUNK bytes, aligned */
    size_t staged;         /* bytes in stage, not yet written */
} ember_durable_t;

/** Create (truncate) "<@path>.tmp" for writing.  @path borrowed.
 * Errors: ERR_IO (the name and errno's text in @err), ERR_NO_MEMORY; on
 * error @d needs no commit. */
ember_status_t ember_durable_open(ember_durable_t *d, const char *path, char *err,
                                  size_t err_length);

/** As ember_durable_open, written direct where the file system allows it
 * (above).  Errors: as ember_durable_open. */
ember_status_t ember_durable_open_direct(ember_durable_t *d, const char *path, char *err,
                                         size_t err_length);

/** A direct file's staging room: where the next *@room_p (> 0) bytes go,
 * to be filled by the caller and then counted with ember_durable_advance
 * (so a producer writes into it without a copy of its own); NULL when the
 * file is not written direct (use ember_durable_write). */
void *ember_durable_room(ember_durable_t *d, size_t *room_p);

/** @length bytes (<= the room) written into ember_durable_room's room
 * appended: folded into the CRC and written once the stage is full.
 * Errors: as ember_durable_write. */
ember_status_t ember_durable_advance(ember_durable_t *d, size_t length, char *err,
                                     size_t err_length);

/** Append @length bytes (borrowed) and fold them into the CRC.  After a
 * failure (ERR_IO, its cause in @err) further writes do nothing. */
ember_status_t ember_durable_write(ember_durable_t *d, const void *data, size_t length, char *err,
                                   size_t err_length);

/** fsync, close, rename to the final name, fsync its directory; on any
 * earlier or present failure, close and remove the temporary file
 * instead (or the renamed file, when only the directory's sync failed)
 * and return the failure.  @bytes_p / @crc32c_p (may be NULL): the
 * file's size and CRC-32C, on success.  Frees what @d holds. */
ember_status_t ember_durable_commit(ember_durable_t *d, uint64_t *bytes_p, uint32_t *crc32c_p,
                                    char *err, size_t err_length);

/** fsync the directory @dir, so entries made or renamed in it stay after
 * a crash.  Errors: ERR_IO (in @err). */
ember_status_t ember_durable_sync_dir(const char *dir, char *err, size_t err_length);

#endif
