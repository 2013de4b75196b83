/* engine/io/checkpoint: step directories (begin, verify, find, prune). */
#include "engine/io/checkpoint.h"

#include "common/crc32c.h"
#include "common/reserve.h"

#include <ember/log.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PATH_MAX 4096
/* What verify reads at a time. */
#define CKPT_READ_CHUNK (8u << 20)

ember_status_t ember_ckpt_dir_name(const char *root, uint64_t step, char *out, size_t length)
{
    if (!root || !out || length == 0)
        return EMBER_ERR_INVALID_PARAM;
    int n = snprintf(out, length, "%s/step-%012llu", root, (unsigned long long)step);
    return n > 0 && (size_t)n < length ? EMBER_OK : EMBER_ERR_INVALID_PARAM;
}

/* The step of a directory entry named exactly as ember_ckpt_dir_name
 * names it (twelve digits at least, no more leading zeros than that). */
static int ckpt_step_of(const char *name, uint64_t *step_p)
{
    char again[40];
    uint64_t step = 0;

    if (strncmp(name, "step-", 5) != 0 || name[5] == '\0' || strlen(name) > 25)
        return 0;
    for (const char *c = name + 5; *c; c++) {
        unsigned d = (unsigned)(unsigned char)*c - '0';
        if (d > 9 || step > (UINT64_MAX - d) / 10)
            return 0;
        step = step * 10 + d;
    }
    snprintf(again, sizeof(again), "step-%012llu", (unsigned long long)step);
    if (strcmp(again, name) != 0)
        return 0;
    *step_p = step;
    return 1;
}

/* @path's last component (trailing slashes ignored) as a step; 0 if it is
 * not one. */
static int ckpt_path_step(const char *path, uint64_t *step_p)
{
    char last[64];
    size_t end = strlen(path), begin;

    while (end > 1 && path[end - 1] == '/')
        end--;
    begin = end;
    while (begin > 0 && path[begin - 1] != '/')
        begin--;
    if (end - begin >= sizeof(last))
        return 0;
    memcpy(last, path + begin, end - begin);
    last[end - begin] = '\0';
    return ckpt_step_of(last, step_p);
}

static int ckpt_join(char *out, size_t length, const char *dir, const char *name)
{
    int n = snprintf(out, length, "%s/%s", dir, name);
    return n > 0 && (size_t)n < length;
}

/* ---------------------------------------------------------------- reading */

/* The whole of @path (at most EMBER_CKPT_MANIFEST_MAX bytes) into a new
 * buffer. */
static ember_status_t ckpt_read_text(const char *path, char **text_p, size_t *length_p, char *err,
                                     size_t err_length)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return ember_status_text(
                err, err_length, errno == ENOENT ? EMBER_ERR_NOT_FOUND : EMBER_ERR_IO, "%s: %s",
                path, errno == ENOENT ? "missing (the checkpoint is incomplete)" : strerror(errno));
    ember_status_t status = EMBER_OK;
    char *text = NULL;
    if (fstat(fd, &st) != 0)
        status = ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", path, strerror(errno));
    else if ((uint64_t)st.st_size > EMBER_CKPT_MANIFEST_MAX)
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                   "%s: %lld bytes, more than a manifest's %u", path,
                                   (long long)st.st_size, EMBER_CKPT_MANIFEST_MAX);
    else if (!(text = malloc((size_t)st.st_size + 1)))
        status = EMBER_ERR_NO_MEMORY;
    else if (read(fd, text, (size_t)st.st_size + 1) != st.st_size)
        status = ember_status_text(err, err_length, EMBER_ERR_IO,
                                   "%s: cannot read its %lld bytes (changed while read?)", path,
                                   (long long)st.st_size);
    close(fd);
    if (status != EMBER_OK) {
        free(text);
        return status;
    }
    *text_p = text;
    *length_p = (size_t)st.st_size;
    return EMBER_OK;
}

ember_status_t ember_ckpt_manifest_read(const char *dir, ember_ckpt_manifest_t *m, char *err,
                                        size_t err_length)
{
    char path[CKPT_PATH_MAX], *text = NULL;
    uint64_t step = 0;
    size_t length = 0;

    ember_ckpt_manifest_init(m, 0);
    if (!dir || !ckpt_join(path, sizeof(path), dir, "manifest"))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "no directory, or its path is too long");
    if (!ckpt_path_step(dir, &step))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s is not a checkpoint directory (step-N, N twelve digits)", dir);
    EMBER_CHECK(ckpt_read_text(path, &text, &length, err, err_length));
    ember_status_t status = ember_ckpt_manifest_parse(text, length, path, step, m, err, err_length);
    free(text);
    return status;
}

/* @file's bytes in @fd, read in chunks into @buf, against the manifest. */
static ember_status_t ckpt_verify_fd(int fd, const char *path, const ember_ckpt_file_t *file,
                                     uint8_t *buf, char *err, size_t err_length)
{
    uint64_t got = 0;
    uint32_t crc = 0;

    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
        ssize_t r = read(fd, buf, CKPT_READ_CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ember_status_text(err, err_length, EMBER_ERR_IO, "%s: read at byte %llu: %s",
                                     path, (unsigned long long)got, strerror(errno));
        if (r == 0)
            break;
        crc = ember_crc32c(crc, buf, (size_t)r);
        got += (uint64_t)r;
    }
    if (got != file->bytes)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: %llu bytes, the manifest says %llu", path,
                                 (unsigned long long)got, (unsigned long long)file->bytes);
    if (crc != file->crc32c)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "%s: CRC-32C %08x, the manifest says %08x (the file is corrupt)",
                                 path, (unsigned)crc, (unsigned)file->crc32c);
    return EMBER_OK;
}

/* One file: there, its size (checked before reading it all), its CRC. */
static ember_status_t ckpt_verify_file(const char *dir, const ember_ckpt_file_t *file, uint8_t *buf,
                                       char *err, size_t err_length)
{
    char path[CKPT_PATH_MAX];
    struct stat st;

    if (!ckpt_join(path, sizeof(path), dir, file->name))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s/%s: path too long",
                                 dir, file->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ember_status_text(err, err_length,
                                 errno == ENOENT ? EMBER_ERR_NOT_FOUND : EMBER_ERR_IO,
                                 "%s: %s (the manifest names it)", path,
                                 errno == ENOENT ? "missing" : strerror(errno));
    ember_status_t status = EMBER_OK;
    if (fstat(fd, &st) != 0)
        status = ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", path, strerror(errno));
    else if ((uint64_t)st.st_size != file->bytes)
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                   "%s: %llu bytes, the manifest says %llu", path,
                                   (unsigned long long)st.st_size, (unsigned long long)file->bytes);
    else
        status = ckpt_verify_fd(fd, path, file, buf, err, err_length);
    close(fd);
    return status;
}

ember_status_t ember_ckpt_verify(const char *dir, const ember_ckpt_manifest_t *m, char *err,
                                 size_t err_length)
{
    ember_status_t status = EMBER_OK;
    uint8_t *buf;

    if (!dir || !m)
        return EMBER_ERR_INVALID_PARAM;
    if (m->nfiles == 0)
        return EMBER_OK;
    buf = malloc(CKPT_READ_CHUNK);
    if (!buf)
        return EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i < m->nfiles && status == EMBER_OK; i++)
        status = ckpt_verify_file(dir, &m->files[i], buf, err, err_length);
    free(buf);
    return status;
}

ember_status_t ember_ckpt_verify_one(const char *dir, const ember_ckpt_file_t *file, char *err,
                                     size_t err_length)
{
    if (!dir || !file)
        return EMBER_ERR_INVALID_PARAM;
    uint8_t *buf = malloc(CKPT_READ_CHUNK);
    if (!buf)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = ckpt_verify_file(dir, file, buf, err, err_length);
    free(buf);
    return status;
}

/* ---------------------------------------------------------------- a root */

/* The steps of @root's step-N directories, ascending, into *steps_p
 * (malloc'd; NULL when none).  A missing root has none. */
static ember_status_t ckpt_list(const char *root, uint64_t **steps_p, size_t *count_p, char *err,
                                size_t err_length)
{
    uint64_t *steps = NULL, step;
    size_t count = 0, capacity = 0;
    struct dirent *e;
    DIR *d = opendir(root);

    *steps_p = NULL;
    *count_p = 0;
    if (!d)
        return errno == ENOENT ? EMBER_OK
                               : ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", root,
                                                   strerror(errno));
    while ((e = readdir(d)) != NULL) {
        if (!ckpt_step_of(e->d_name, &step))
            continue;
        if (!EMBER_RESERVE(steps, capacity, count + 1)) {
            closedir(d);
            free(steps);
            return EMBER_ERR_NO_MEMORY;
        }
        steps[count++] = step;
    }
    closedir(d);
    for (size_t i = 1; i < count; i++) /* few: insertion sort */
        for (size_t j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            uint64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    *steps_p = steps;
    *count_p = count;
    return EMBER_OK;
}

/* The manifest of @dir read and its files verified, into @m. */
static ember_status_t ckpt_load_checked(const char *dir, ember_ckpt_manifest_t *m, char *err,
                                        size_t err_length)
{
    EMBER_CHECK(ember_ckpt_manifest_read(dir, m, err, err_length));
    ember_status_t status = ember_ckpt_verify(dir, m, err, err_length);
    if (status != EMBER_OK)
        ember_ckpt_manifest_free(m);
    return status;
}

/* "; step-N: why" appended to the list of what was tried. */
static void ckpt_tried(char *tried, size_t length, uint64_t step, const char *why)
{
    size_t n = strlen(tried);
    if (n + 1 < length)
        (void)ember_status_text(tried + n, length - n, EMBER_OK, "%sstep-%012llu: %s",
                                n ? "; " : "", (unsigned long long)step, why);
}

/* The newest complete checkpoint of @root (find's root case). */
static ember_status_t ckpt_find_in_root(const char *root, char *dir, size_t dir_length,
                                        ember_ckpt_manifest_t *m, char *err, size_t err_length)
{
    char why[1024], tried[1024] = "";
    uint64_t *steps;
    size_t count, skipped = 0;

    EMBER_CHECK(ckpt_list(root, &steps, &count, err, err_length));
    for (size_t i = count; i-- > 0;) {
        if (ember_ckpt_dir_name(root, steps[i], dir, dir_length) != EMBER_OK) {
            free(steps);
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "%s: a checkpoint's path does not fit %zu bytes", root,
                                     dir_length);
        }
        if (ckpt_load_checked(dir, m, why, sizeof(why)) == EMBER_OK) {
            if (skipped)
                ember_info("checkpoint", "taking %s (step %llu), not the newest: %zu newer skipped",
                           dir, (unsigned long long)steps[i], skipped);
            else
                ember_info("checkpoint", "taking %s (step %llu)", dir,
                           (unsigned long long)steps[i]);
            free(steps);
            return EMBER_OK;
        }
        ember_warn("checkpoint", "skipping %s: %s", dir, why);
        ckpt_tried(tried, sizeof(tried), steps[i], why);
        skipped++;
    }
    free(steps);
    if (count == 0)
        return ember_status_text(err, err_length, EMBER_ERR_NOT_FOUND,
                                 "no checkpoint in %s (no step-N directory)", root);
    return ember_status_text(err, err_length, EMBER_ERR_NOT_FOUND,
                             "no complete checkpoint in %s: %s", root, tried);
}

ember_status_t ember_ckpt_find(const char *path, char *dir, size_t dir_length,
                               ember_ckpt_manifest_t *m, char *err, size_t err_length)
{
    uint64_t step;

    if (!path || !dir || !m)
        return EMBER_ERR_INVALID_PARAM;
    ember_ckpt_manifest_init(m, 0);
    if (!ckpt_path_step(path, &step))
        return ckpt_find_in_root(path, dir, dir_length, m, err, err_length);
    if ((size_t)snprintf(dir, dir_length, "%s", path) >= dir_length)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s: longer than %zu bytes", path, dir_length);
    EMBER_CHECK(ckpt_load_checked(dir, m, err, err_length));
    ember_info("checkpoint", "taking %s (step %llu)", dir, (unsigned long long)step);
    return EMBER_OK;
}

static int ckpt_has_manifest(const char *dir)
{
    char path[CKPT_PATH_MAX];
    return ckpt_join(path, sizeof(path), dir, "manifest") && access(path, F_OK) == 0;
}

int ember_ckpt_exists(const char *path)
{
    char dir[CKPT_PATH_MAX];
    uint64_t *steps, step;
    size_t count;
    int found = 0;

    if (!path)
        return 0;
    if (ckpt_path_step(path, &step))
        return ckpt_has_manifest(path);
    if (ckpt_list(path, &steps, &count, NULL, 0) != EMBER_OK)
        return 0;
    for (size_t i = count; i-- > 0 && !found;)
        found = ember_ckpt_dir_name(path, steps[i], dir, sizeof(dir)) == EMBER_OK &&
                ckpt_has_manifest(dir);
    free(steps);
    return found;
}

/* ---------------------------------------------------------------- making, removing */

/* Every entry of @dir but the manifest removed (it goes first, by the
 * caller); a directory inside is refused: ember puts none there. */
static ember_status_t ckpt_empty(const char *dir, char *err, size_t err_length)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    ember_status_t status = EMBER_OK;

    if (!d)
        return ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", dir, strerror(errno));
    while (status == EMBER_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) != 0)
            status = ember_status_text(err, err_length, EMBER_ERR_IO, "cannot remove %s/%s: %s",
                                       dir, e->d_name, strerror(errno));
    }
    closedir(d);
    return status;
}

/* @dir: its manifest, then its files, then itself. */
static ember_status_t ckpt_remove(const char *dir, char *err, size_t err_length)
{
    char path[CKPT_PATH_MAX];

    if (!ckpt_join(path, sizeof(path), dir, "manifest"))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s: path too long",
                                 dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return ember_status_text(err, err_length, EMBER_ERR_IO, "cannot remove %s: %s", path,
                                 strerror(errno));
    EMBER_CHECK(ckpt_empty(dir, err, err_length));
    if (rmdir(dir) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_IO, "cannot remove %s: %s", dir,
                                 strerror(errno));
    return EMBER_OK;
}

/* mkdir -p @path. */
static ember_status_t ckpt_make_dirs(const char *path, char *err, size_t err_length)
{
    char partial[CKPT_PATH_MAX];
    size_t n = strlen(path);
    struct stat st;

    if (n == 0 || n >= sizeof(partial))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "checkpoint root '%s': empty or too long", path);
    memcpy(partial, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (partial[i] != '/' && partial[i] != '\0')
            continue;
        partial[i] = '\0';
        if (mkdir(partial, 0755) != 0 && errno != EEXIST)
            return ember_status_text(err, err_length, EMBER_ERR_IO, "cannot make %s: %s", partial,
                                     strerror(errno));
        partial[i] = path[i];
    }
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return ember_status_text(err, err_length, EMBER_ERR_IO, "%s is not a directory", path);
    return EMBER_OK;
}

ember_status_t ember_ckpt_step_dir(const char *root, uint64_t step, char *dir, size_t dir_length,
                                   char *err, size_t err_length)
{
    if (!root || !dir || ember_ckpt_dir_name(root, step, dir, dir_length) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "checkpoint of step %llu in %s: the path does not fit",
                                 (unsigned long long)step, root ? root : "(null)");
    EMBER_CHECK(ckpt_make_dirs(root, err, err_length));
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ember_status_text(err, err_length, EMBER_ERR_IO, "cannot make %s: %s", dir,
                                 strerror(errno));
    return EMBER_OK;
}

/* Which of @steps (ascending) prune removes: below the newest complete one
 * and not among the @keep newest complete ones.  *remove_p: flags. */
static ember_status_t ckpt_prune_plan(const char *root, const uint64_t *steps, size_t count,
                                      unsigned keep, char *remove)
{
    char dir[CKPT_PATH_MAX], why[1024];
    size_t complete = 0, newest = count;

    for (size_t i = count; i-- > 0;) {
        ember_ckpt_manifest_t m;
        remove[i] = 0;
        if (ember_ckpt_dir_name(root, steps[i], dir, sizeof(dir)) != EMBER_OK)
            return EMBER_ERR_INVALID_PARAM;
        int ok = ember_ckpt_manifest_read(dir, &m, why, sizeof(why)) == EMBER_OK;
        ember_ckpt_manifest_free(&m);
        if (ok && newest == count)
            newest = i;
        if (newest == count)
            continue; /* newer than every complete one: may be being written */
        if (ok && complete < keep)
            complete++;
        else
            remove[i] = 1;
    }
    return EMBER_OK;
}

ember_status_t ember_ckpt_prune(const char *root, unsigned keep, char *err, size_t err_length)
{
    char dir[CKPT_PATH_MAX], *remove = NULL;
    uint64_t *steps;
    size_t count;
    ember_status_t status;

    if (!root || keep == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "pruning checkpoints: keep at least one");
    EMBER_CHECK(ckpt_list(root, &steps, &count, err, err_length));
    remove = calloc(count ? count : 1, 1);
    status = remove ? ckpt_prune_plan(root, steps, count, keep, remove) : EMBER_ERR_NO_MEMORY;
    for (size_t i = 0; i < count && status == EMBER_OK; i++) {
        if (!remove[i] || ember_ckpt_dir_name(root, steps[i], dir, sizeof(dir)) != EMBER_OK)
            continue;
        status = ckpt_remove(dir, err, err_length);
        if (status == EMBER_OK)
            ember_info("checkpoint", "pruned %s", dir);
    }
    free(remove);
    free(steps);
    return status;
}

/* ---------------------------------------------------------------- a job's start */

/* One step-N of @root after a job's start: torn, it goes; complete, it
 * belongs to another course of the job and is refused. */
static ember_status_t ckpt_clear_one(const char *root, uint64_t step, uint64_t after, char *err,
                                     size_t err_length)
{
    char dir[CKPT_PATH_MAX], why[1024];
    ember_ckpt_manifest_t m;
    if (ember_ckpt_dir_name(root, step, dir, sizeof(dir)) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%s: path too long",
                                 root);
    if (ckpt_load_checked(dir, &m, why, sizeof(why)) == EMBER_OK) {
        ember_ckpt_manifest_free(&m);
        return ember_status_text(
                err, err_length, EMBER_ERR_EXISTS,
                "%s holds a complete checkpoint after step %llu, %s: resume "
                "from it (--resume %s) or move it away",
                root, (unsigned long long)step,
                after ? "later than the one resumed from" : "and this job starts afresh", root);
    }
    ember_warn("checkpoint", "removing %s, torn (%s)", dir, why);
    return ckpt_remove(dir, err, err_length);
}

ember_status_t ember_ckpt_clear_after(const char *root, uint64_t after, char *err,
                                      size_t err_length)
{
    uint64_t *steps;
    size_t count;
    EMBER_CHECK(ckpt_make_dirs(root, err, err_length));
    EMBER_CHECK(ckpt_list(root, &steps, &count, err, err_length));
    ember_status_t status = EMBER_OK;
    for (size_t i = 0; status == EMBER_OK && i < count; i++) {
        if (steps[i] > after)
            status = ckpt_clear_one(root, steps[i], after, err, err_length);
    }
    free(steps);
    return status;
}

/* ---------------------------------------------------------------- reading files */

ember_status_t ember_ckpt_map_files(const char *dir, const char *names, size_t stride, size_t count,
                                    ember_st_file_t **files, char **paths, char *err,
                                    size_t err_length)
{
    for (size_t i = 0; i < count; i++) {
        const char *name = names + i * stride;
        size_t length = strlen(dir) + strnlen(name, stride) + 2;
        if (!(paths[i] = malloc(length)))
            return EMBER_ERR_NO_MEMORY;
        snprintf(paths[i], length, "%s/%.*s", dir, (int)strnlen(name, stride), name);
        EMBER_CHECK(ember_st_map(paths[i], &files[i], err, err_length));
    }
    return EMBER_OK;
}

void ember_ckpt_unmap_files(ember_st_file_t **files, char **paths, size_t count)
{
    for (size_t i = 0; files && paths && i < count; i++) {
        ember_st_close(files[i]);
        free(paths[i]);
        files[i] = NULL;
        paths[i] = NULL;
    }
}

/* ---------------------------------------------------------------- which steps */

void ember_ckpt_schedule_init(ember_ckpt_schedule_t *s, uint64_t every)
{
    memset(s, 0, sizeof(*s));
    s->every = every;
}

ember_status_t ember_ckpt_schedule_ask(ember_ckpt_schedule_t *s, uint64_t step, int stop)
{
    for (size_t i = 0; i < s->nasked; i++) {
        if (s->asked[i] == step) {
            s->stop[i] |= stop != 0;
            return EMBER_OK;
        }
    }
    if (s->nasked == EMBER_CKPT_ASKED_MAX)
        return EMBER_ERR_OUT_OF_RANGE;
    s->asked[s->nasked] = step;
    s->stop[s->nasked++] = stop != 0;
    return EMBER_OK;
}

int ember_ckpt_schedule_due(const ember_ckpt_schedule_t *s, uint64_t steps)
{
    if (steps == 0)
        return 0;
    if (s->every && steps % s->every == 0)
        return 1;
    for (size_t i = 0; i < s->nasked; i++) {
        if (s->asked[i] == steps)
            return 1;
    }
    return 0;
}

int ember_ckpt_schedule_stops(const ember_ckpt_schedule_t *s, uint64_t steps)
{
    for (size_t i = 0; i < s->nasked; i++) {
        if (s->asked[i] == steps && s->stop[i])
            return 1;
    }
    return 0;
}

void ember_ckpt_schedule_taken(ember_ckpt_schedule_t *s, uint64_t steps)
{
    size_t kept = 0;
    for (size_t i = 0; i < s->nasked; i++) {
        if (s->asked[i] >= steps) {
            s->asked[kept] = s->asked[i];
            s->stop[kept++] = s->stop[i];
        }
    }
    s->nasked = kept;
}
