/* engine/io/durable: write to "<path>.tmp", fsync, rename, fsync the
 * directory. */
#define _GNU_SOURCE
#include "engine/io/durable.h"

#include "common/crc32c.h"

#include <ember/log.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ember_status_t ember_durable_open(ember_durable_t *d, const char *path, char *err,
                                  size_t err_length)
{
    size_t n = strlen(path);

    *d = (ember_durable_t){.fd = -1, .direct_fd = -1};
    d->path = malloc(n + 1);
    d->tmp = malloc(n + 5);
    if (!d->path || !d->tmp) {
        free(d->path);
        free(d->tmp);
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "writing %s: out of memory",
                                 path);
    }
    memcpy(d->path, path, n + 1);
    snprintf(d->tmp, n + 5, "%s.tmp", path);
    d->fd = open(d->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (d->fd < 0) {
        ember_status_t status = ember_status_text(err, err_length, EMBER_ERR_IO,
                                                  "cannot create %s: %s", d->tmp, strerror(errno));
        free(d->path);
        free(d->tmp);
        return status;
    }
    return EMBER_OK;
}

/* All @length bytes, through short writes and signals; *bytes_p counts
 * what was written. */
static int durable_write_all(int fd, const uint8_t *p, size_t length, uint64_t *bytes_p)
{
    while (length > 0) {
        ssize_t w = write(fd, p, length);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        length -= (size_t)w;
        *bytes_p += (uint64_t)w;
    }
    return 0;
}

/* Writeback of the chunk just written started now, and the file up to a
 * chunk behind it waited for and dropped from the page cache: the disk
 * writes while we copy, instead of all at the fsync, and a checkpoint of
 * many GB neither fills the page cache with dirty pages (whose throttling
 * stalls the writer) nor evicts the training's memory. */
static void durable_flush_behind(ember_durable_t *d, uint64_t at)
{
    (void)sync_file_range(d->fd, (off_t)at, (off_t)(d->bytes - at), SYNC_FILE_RANGE_WRITE);
    if (at > d->flushed + 2 * (uint64_t)EMBER_DURABLE_CHUNK) {
        uint64_t end = at - EMBER_DURABLE_CHUNK;
        (void)sync_file_range(d->fd, (off_t)d->flushed, (off_t)(end - d->flushed),
                              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                      SYNC_FILE_RANGE_WAIT_AFTER);
        (void)posix_fadvise(d->fd, (off_t)d->flushed, (off_t)(end - d->flushed),
                            POSIX_FADV_DONTNEED);
        d->flushed = end;
    }
}

ember_status_t ember_durable_open_direct(ember_durable_t *d, const char *path, char *err,
                                         size_t err_length)
{
    EMBER_CHECK(ember_durable_open(d, path, err, err_length));
    void *stage = NULL;
    if (posix_memalign(&stage, 4096, EMBER_DURABLE_CHUNK) != 0)
        return EMBER_OK; /* written as an ordinary file: no worse than before */
    /* O_DIRECT refused (tmpfs, some network file systems): ordinary. */
    d->direct_fd = open(d->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (d->direct_fd < 0) {
        free(stage);
        return EMBER_OK;
    }
    d->stage = stage;
    return EMBER_OK;
}

void *ember_durable_room(ember_durable_t *d, size_t *room_p)
{
    if (!d->stage)
        return NULL;
    *room_p = EMBER_DURABLE_CHUNK - d->staged;
    return d->stage + d->staged;
}

/* The staged bytes at the file's end: @direct, a whole aligned chunk past
 * the page cache; else (the last, partial one) through it. */
static ember_status_t durable_write_stage(ember_durable_t *d, int direct, char *err,
                                          size_t err_length)
{
    const uint64_t at = d->bytes;
    d->crc32c = ember_crc32c(d->crc32c, d->stage, d->staged);
    if (direct) {
        for (size_t done = 0; done < d->staged;) {
            ssize_t w = pwrite(d->direct_fd, d->stage + done, d->staged - done, (off_t)(at + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0 || (size_t)w % 4096 != 0) {
                if (w >= 0)
                    errno = EIO; /* a direct write cut short: not resumable */
                d->bytes = at + done;
                return d->status = ember_status_text(err, err_length, EMBER_ERR_IO,
                                                     "cannot write %s at byte %llu: %s", d->tmp,
                                                     (unsigned long long)d->bytes, strerror(errno));
            }
            done += (size_t)w;
        }
        d->bytes = at + d->staged;
    } else if (lseek(d->fd, (off_t)at, SEEK_SET) < 0 ||
               durable_write_all(d->fd, d->stage, d->staged, &d->bytes) != 0) {
        return d->status = ember_status_text(err, err_length, EMBER_ERR_IO,
                                             "cannot write %s at byte %llu: %s", d->tmp,
                                             (unsigned long long)d->bytes, strerror(errno));
    }
    d->staged = 0;
    return EMBER_OK;
}

ember_status_t ember_durable_advance(ember_durable_t *d, size_t length, char *err,
                                     size_t err_length)
{
    if (d->status != EMBER_OK)
        return d->status;
    d->staged += length;
    if (d->staged < EMBER_DURABLE_CHUNK)
        return EMBER_OK;
    return durable_write_stage(d, 1, err, err_length);
}

/* @length bytes into the stage, written as it fills. */
static ember_status_t durable_write_staged(ember_durable_t *d, const uint8_t *p, size_t length,
                                           char *err, size_t err_length)
{
    while (d->status == EMBER_OK && length > 0) {
        size_t room = 0;
        uint8_t *to = ember_durable_room(d, &room);
        const size_t n = length < room ? length : room;
        memcpy(to, p, n);
        (void)ember_durable_advance(d, n, err, err_length);
        p += n;
        length -= n;
    }
    return d->status;
}

ember_status_t ember_durable_write(ember_durable_t *d, const void *data, size_t length, char *err,
                                   size_t err_length)
{
    const uint8_t *p = data;

    if (d->stage)
        return durable_write_staged(d, p, length, err, err_length);

    while (d->status == EMBER_OK && length > 0) {
        size_t n = length < EMBER_DURABLE_CHUNK ? length : EMBER_DURABLE_CHUNK;
        d->crc32c = ember_crc32c(d->crc32c, p, n);
        uint64_t at = d->bytes;
        if (durable_write_all(d->fd, p, n, &d->bytes) != 0)
            d->status = ember_status_text(err, err_length, EMBER_ERR_IO,
                                          "cannot write %s at byte %llu: %s", d->tmp,
                                          (unsigned long long)d->bytes, strerror(errno));
        else
            durable_flush_behind(d, at);
        p += n;
        length -= n;
    }
    return d->status;
}

/* The directory part of @path ("." for a plain name), malloc'd. */
static char *durable_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    char *dir = malloc(n + 1);

    if (dir) {
        memcpy(dir, slash ? path : ".", n);
        dir[n] = '\0';
    }
    return dir;
}

ember_status_t ember_durable_sync_dir(const char *dir, char *err, size_t err_length)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0 || fsync(fd) != 0) {
        ember_status_t status =
                ember_status_text(err, err_length, EMBER_ERR_IO, "cannot sync directory %s: %s",
                                  dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return status;
    }
    close(fd);
    return EMBER_OK;
}

/* The file's data on disk and under its final name; the first failure. */
static ember_status_t durable_finish(ember_durable_t *d, char *err, size_t err_length)
{
    int fd = d->fd;

    d->fd = -1;
    if (fsync(fd) != 0) {
        ember_status_t status = ember_status_text(err, err_length, EMBER_ERR_IO,
                                                  "cannot sync %s: %s", d->tmp, strerror(errno));
        close(fd);
        return status;
    }
    if (close(fd) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_IO, "cannot close %s: %s", d->tmp,
                                 strerror(errno));
    if (rename(d->tmp, d->path) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_IO, "cannot rename %s to %s: %s",
                                 d->tmp, d->path, strerror(errno));
    d->renamed = 1;
    char *dir = durable_dir_of(d->path);
    if (!dir)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "%s", "out of memory");
    ember_status_t status = ember_durable_sync_dir(dir, err, err_length);
    free(dir);
    return status;
}

ember_status_t ember_durable_commit(ember_durable_t *d, uint64_t *bytes_p, uint32_t *crc32c_p,
                                    char *err, size_t err_length)
{
    if (d->status == EMBER_OK && d->stage && d->staged > 0)
        (void)durable_write_stage(d, 0, err, err_length);
    if (d->direct_fd >= 0)
        close(d->direct_fd);
    free(d->stage);
    d->direct_fd = -1;
    d->stage = NULL;
    ember_status_t status = d->status;

    if (status == EMBER_OK)
        status = durable_finish(d, err, err_length);
    if (d->fd >= 0)
        close(d->fd);
    /* After a failed directory sync the file is whole, but a crash may or
     * may not keep its name: the caller was told it failed, so no file. */
    if (status != EMBER_OK)
        unlink(d->renamed ? d->path : d->tmp);
    if (status == EMBER_OK && bytes_p)
        *bytes_p = d->bytes;
    if (status == EMBER_OK && crc32c_p)
        *crc32c_p = d->crc32c;
    free(d->path);
    free(d->tmp);
    *d = (ember_durable_t){.fd = -1, .direct_fd = -1};
    return status;
}
