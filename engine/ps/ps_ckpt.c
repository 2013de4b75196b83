/* engine/ps/ps_ckpt: snapshots at step boundaries, written by a thread. */
#include "engine/ps/ps_ckpt.h"

#include "common/clock.h"
#include "engine/io/checkpoint.h"
#include "engine/io/safetensors.h"
#include "engine/ps/ps_msg.h"

#include <ember/config.h>
#include <ember/log.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CKPT_TENSORS_MAX (PS_MAX_TABLES * EMBER_TABLE_STATE_TENSORS)
#define CKPT_META_MAX    (PS_MAX_TABLES * EMBER_TABLE_STATE_META + 4)

struct ember_ps_ckpt {
    ember_msg_ckpt_plan_t plan;
    int planned;
    ember_ckpt_schedule_t schedule;
    /* shared with the writer, under lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int started, quit;
    atomic_int give_up; /* the write in progress stops at its next chunk */
    int busy;           /* the snapshots are the writer's until it ends */
    int copying;        /* the writer copies its half of a snapshot */
    ember_shard_t *const *copy_tables;
    size_t copy_count;
    ember_status_t copy_status;
    char copy_err[256];
    int finished;  /* @done holds a report not yet polled */
    double waited; /* by ember_ps_ckpt_wait since the last take */
    ember_msg_ckpt_done_t done;
    /* the write handed over */
    ember_shard_snapshot_t *snaps[PS_MAX_TABLES];
    size_t nsnaps;
    uint64_t step;
    double copy_s, wait_s;
    /* the writer's file, laid out: each tensor's snapshot and array */
    ember_st_tensor_t tensors[CKPT_TENSORS_MAX];
    ember_st_meta_t meta[CKPT_META_MAX];
    struct {
        const ember_shard_snapshot_t *snap;
        size_t array;
    } source[CKPT_TENSORS_MAX];
    /* the write's pace (EMBER_PS_CKPT_WRITE_RATE, tests only) */
    double rate, write_started;
    uint64_t filled;
};

ember_status_t ember_ps_ckpt_create(ember_ps_ckpt_t **ckpt_p)
{
    ember_ps_ckpt_t *ckpt = calloc(1, sizeof(*ckpt));
    if (!ckpt)
        return EMBER_ERR_NO_MEMORY;
    pthread_mutex_init(&ckpt->lock, NULL);
    pthread_cond_init(&ckpt->cond, NULL);
    *ckpt_p = ckpt;
    return EMBER_OK;
}

void ember_ps_ckpt_destroy(ember_ps_ckpt_t *ckpt)
{
    if (!ckpt)
        return;
    if (ckpt->started) {
        pthread_mutex_lock(&ckpt->lock);
        ckpt->quit = 1;
        pthread_cond_broadcast(&ckpt->cond);
        pthread_mutex_unlock(&ckpt->lock);
        pthread_join(ckpt->thread, NULL);
    }
    for (size_t i = 0; i < PS_MAX_TABLES; i++)
        ember_shard_snapshot_free(ckpt->snaps[i]);
    pthread_mutex_destroy(&ckpt->lock);
    pthread_cond_destroy(&ckpt->cond);
    free(ckpt);
}

void ember_ps_ckpt_give_up(ember_ps_ckpt_t *ckpt)
{
    if (ckpt)
        atomic_store_explicit(&ckpt->give_up, 1, memory_order_relaxed);
}

void ember_ps_ckpt_plan(ember_ps_ckpt_t *ckpt, const ember_msg_ckpt_plan_t *plan)
{
    ckpt->plan = *plan;
    ckpt->planned = plan->root[0] != '\0';
    ember_ckpt_schedule_init(&ckpt->schedule, plan->every);
}

int ember_ps_ckpt_planned(const ember_ps_ckpt_t *ckpt)
{
    return ckpt->planned;
}

ember_status_t ember_ps_ckpt_at(ember_ps_ckpt_t *ckpt, uint64_t step)
{
    return ember_ckpt_schedule_ask(&ckpt->schedule, step, 0);
}

int ember_ps_ckpt_due(const ember_ps_ckpt_t *ckpt, uint64_t step)
{
    return ckpt->planned && ember_ckpt_schedule_due(&ckpt->schedule, step);
}

/* The snapshots as one file's tensors and metadata. */
static ember_status_t gather_tensors(ember_ps_ckpt_t *ckpt, ember_st_tensor_t *tensors,
                                     size_t *ntensors, ember_st_meta_t *meta, size_t *nmeta,
                                     char *step_text)
{
    *ntensors = *nmeta = 0;
    snprintf(step_text, 24, "%llu", (unsigned long long)ckpt->step);
    meta[(*nmeta)++] = (ember_st_meta_t){"format", "ember-ps-checkpoint-1"};
    meta[(*nmeta)++] = (ember_st_meta_t){"step", step_text};
    for (size_t i = 0; i < ckpt->nsnaps; i++) {
        const size_t first = *ntensors;
        EMBER_CHECK(ember_shard_snapshot_tensors(ckpt->snaps[i], tensors, ntensors,
                                                 CKPT_TENSORS_MAX, meta, nmeta, CKPT_META_MAX));
        for (size_t t = first; t < *ntensors; t++) {
            ckpt->source[t].snap = ckpt->snaps[i];
            ckpt->source[t].array = t - first;
        }
    }
    return EMBER_OK;
}

/* Until @bytes more keep the test's pace (EMBER_PS_CKPT_WRITE_RATE). */
static void keep_pace(ember_ps_ckpt_t *ckpt, size_t bytes)
{
    ckpt->filled += bytes;
    double ahead = ckpt->write_started + (double)ckpt->filled / ckpt->rate - ember_time_now();
    if (ahead > 0) {
        struct timespec ts = {.tv_sec = (time_t)ahead,
                              .tv_nsec = (long)((ahead - (double)(time_t)ahead) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* ember_st_write_filled's source: a marked snapshot's bytes from its live
 * table (engine/ps/table_cow.c), a chunk at a time. */
static ember_status_t fill_tensor(void *arg, size_t tensor, uint64_t offset, void *buf,
                                  size_t length, char *err, size_t err_length)
{
    ember_ps_ckpt_t *ckpt = arg;
    if (atomic_load_explicit(&ckpt->give_up, memory_order_relaxed))
        return ember_status_text(err, err_length, EMBER_ERR_CANCELED,
                                 "the PS stopped: the write was given up");
    EMBER_CHECK(ember_shard_snapshot_read(ckpt->source[tensor].snap, ckpt->source[tensor].array,
                                          offset, buf, length, err, err_length));
    if (ckpt->rate > 0)
        keep_pace(ckpt, length);
    return EMBER_OK;
}

/* Every snapshot read from its live table ended (the tables owe it
 * nothing more); returns how many, and what keeping them cost in @all. */
static size_t end_snapshots(ember_ps_ckpt_t *ckpt, ember_shard_snapshot_kept_t *all)
{
    size_t marked = 0;
    *all = (ember_shard_snapshot_kept_t){0};
    for (size_t i = 0; i < ckpt->nsnaps; i++) {
        ember_shard_snapshot_kept_t kept;
        marked += ember_shard_snapshot_marked(ckpt->snaps[i]);
        ember_shard_snapshot_end(ckpt->snaps[i], &kept);
        all->chunks += kept.chunks;
        all->bytes += kept.bytes;
    }
    return marked;
}

/* Write the file of the snapshots handed over; the report into @done. */
static void write_file(ember_ps_ckpt_t *ckpt, ember_msg_ckpt_done_t *done)
{
    ember_st_tensor_t *tensors = ckpt->tensors;
    ember_st_meta_t *meta = ckpt->meta;
    char dir[EMBER_PATH_MAX + 32], path[EMBER_PATH_MAX + 128], step_text[24];
    size_t ntensors, nmeta;
    ember_st_written_t written = {0};
    double started = ember_time_now();

    *done = (ember_msg_ckpt_done_t){
            .step = ckpt->step, .copy_seconds = ckpt->copy_s, .wait_seconds = ckpt->wait_s};
    snprintf(done->name, sizeof(done->name), "ps%u.safetensors", ckpt->plan.index);
    ember_status_t status = ember_ckpt_step_dir(ckpt->plan.root, ckpt->step, dir, sizeof(dir),
                                                done->text, sizeof(done->text));
    if (status == EMBER_OK)
        status = gather_tensors(ckpt, tensors, &ntensors, meta, &nmeta, step_text);
    if (status == EMBER_OK) {
        snprintf(path, sizeof(path), "%s/%s", dir, done->name);
        ckpt->rate = (double)ember_config_size("EMBER_PS_CKPT_WRITE_RATE");
        ckpt->write_started = ember_time_now();
        ckpt->filled = 0;
        status = ember_st_write_filled(path, tensors, ntensors, meta, nmeta, fill_tensor, ckpt,
                                       &written);
        if (status != EMBER_OK && !done->text[0])
            snprintf(done->text, sizeof(done->text), "%.200s: %s", path,
                     ember_status_string(status));
    }
    ember_shard_snapshot_kept_t kept;
    const size_t marked = end_snapshots(ckpt, &kept);
    if (marked) /* what training changed during the write (the tests look) */
        ember_info("ps",
                   "the checkpoint of step %llu was written while training changed "
                   "%llu chunks (%.1f MiB) of its %zu tables: copied aside first",
                   (unsigned long long)ckpt->step, (unsigned long long)kept.chunks,
                   kept.bytes / 1048576.0, marked);
    done->status = status;
    done->bytes = written.bytes;
    done->crc32c = written.crc32c;
    done->write_seconds = ember_time_now() - started;
}

/* Half @half of every table's copy (the PS's thread takes 0, the writer 1:
 * while the copy runs the trainers wait, and the other core with them). */
static ember_status_t copy_half(ember_ps_ckpt_t *ckpt, unsigned half)
{
    ember_status_t status = EMBER_OK;
    char *err = half ? ckpt->copy_err : NULL;
    char local[256];
    for (size_t i = 0; status == EMBER_OK && i < ckpt->copy_count; i++)
        if (!ember_shard_snapshot_marked(ckpt->snaps[i]))
            status = ember_shard_snapshot_copy(ckpt->copy_tables[i], ckpt->snaps[i], half, 2,
                                               err ? err : local, sizeof(local));
    if (half)
        ckpt->copy_status = status;
    else if (status != EMBER_OK)
        memcpy(ckpt->copy_err, local, sizeof(local));
    return status;
}

/*
 * The writer runs at the PS's own priority.  It used to run at idle
 * priority (SCHED_IDLE), training first, when a write meant copying the
 * file into the page cache and its writeback.  Now its work is one copy
 * out of the table and the CRC (about 0.5 s of a core for 2.44 GiB,
 * copy-on-write and O_DIRECT), and an idle writer on a busy node only
 * made the write last longer than the steps to the next checkpoint: the
 * whole job then waited for it, and training changed more rows before the
 * writer reached them, each one copied aside (bench/checkpoint.sh on the
 * 2-vCPU VM: writes of 6-10 s and 1-3 s waits at idle priority, 2.3-4.4 s
 * and none at the PS's, docs/PERFORMANCE.md).
 */
static void *writer_main(void *arg)
{
    ember_ps_ckpt_t *ckpt = arg;
    pthread_mutex_lock(&ckpt->lock);
    for (;;) {
        while (!ckpt->busy && !ckpt->copying && !ckpt->quit)
            pthread_cond_wait(&ckpt->cond, &ckpt->lock);
        if (ckpt->copying) {
            pthread_mutex_unlock(&ckpt->lock);
            copy_half(ckpt, 1);
            pthread_mutex_lock(&ckpt->lock);
            ckpt->copying = 0;
            pthread_cond_broadcast(&ckpt->cond);
            continue;
        }
        if (!ckpt->busy)
            break;
        pthread_mutex_unlock(&ckpt->lock);
        ember_msg_ckpt_done_t done;
        write_file(ckpt, &done);
        pthread_mutex_lock(&ckpt->lock);
        ckpt->done = done;
        ckpt->finished = 1;
        ckpt->busy = 0;
        pthread_cond_broadcast(&ckpt->cond);
    }
    pthread_mutex_unlock(&ckpt->lock);
    return NULL;
}

/* Until the writer has ended its write and its report was taken. */
static double wait_writer(ember_ps_ckpt_t *ckpt)
{
    double started = ember_time_now();
    pthread_mutex_lock(&ckpt->lock);
    while (ckpt->busy)
        pthread_cond_wait(&ckpt->cond, &ckpt->lock);
    pthread_mutex_unlock(&ckpt->lock);
    return ember_time_now() - started;
}

void ember_ps_ckpt_wait(ember_ps_ckpt_t *ckpt)
{
    if (ckpt->started)
        ckpt->waited += wait_writer(ckpt);
}

static ember_status_t start_writer(ember_ps_ckpt_t *ckpt, char *err, size_t err_length)
{
    if (ckpt->started)
        return EMBER_OK;
    int rc = pthread_create(&ckpt->thread, NULL, writer_main, ckpt);
    if (rc != 0)
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                 "the checkpoint writer thread: %s", strerror(rc));
    ckpt->started = 1;
    return EMBER_OK;
}

/* Each table's snapshot begun: marked for copy-on-write where it can be
 * (nothing copied now), else sized for the copy. */
static ember_status_t mark_or_begin(ember_ps_ckpt_t *ckpt, ember_shard_t *const *tables,
                                    size_t count, char *err, size_t err_length)
{
    for (size_t i = 0; i < count; i++) {
        ember_status_t status =
                ember_shard_snapshot_cow_able(tables[i])
                        ? ember_shard_snapshot_mark(tables[i], &ckpt->snaps[i], err, err_length)
                        : ember_shard_snapshot_begin(tables[i], &ckpt->snaps[i], err, err_length);
        ckpt->nsnaps = i + (status == EMBER_OK);
        EMBER_CHECK(status);
    }
    return EMBER_OK;
}

/* Whether any snapshot of @count is a copy (a device or dynamic table's). */
static int copies_due(const ember_ps_ckpt_t *ckpt, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!ember_shard_snapshot_marked(ckpt->snaps[i]))
            return 1;
    return 0;
}

/* The snapshots' copy, half here and half on the writer thread. */
static ember_status_t copy_shared(ember_ps_ckpt_t *ckpt, ember_shard_t *const *tables, size_t count,
                                  char *err, size_t err_length)
{
    pthread_mutex_lock(&ckpt->lock);
    ckpt->copy_tables = tables;
    ckpt->copy_count = count;
    ckpt->copy_status = EMBER_OK;
    ckpt->copying = 1;
    pthread_cond_broadcast(&ckpt->cond);
    pthread_mutex_unlock(&ckpt->lock);
    ember_status_t mine = copy_half(ckpt, 0);
    pthread_mutex_lock(&ckpt->lock);
    while (ckpt->copying)
        pthread_cond_wait(&ckpt->cond, &ckpt->lock);
    ember_status_t theirs = ckpt->copy_status;
    pthread_mutex_unlock(&ckpt->lock);
    if (mine != EMBER_OK || theirs != EMBER_OK) {
        snprintf(err, err_length, "%s", ckpt->copy_err);
        return mine != EMBER_OK ? mine : theirs;
    }
    return EMBER_OK;
}

ember_status_t ember_ps_ckpt_take(ember_ps_ckpt_t *ckpt, ember_shard_t *const *tables, size_t count,
                                  uint64_t step, char *err, size_t err_length)
{
    EMBER_CHECK(start_writer(ckpt, err, err_length));
    double waited = ckpt->waited + wait_writer(ckpt);
    ckpt->waited = 0;
    pthread_mutex_lock(&ckpt->lock);
    const int unreported = ckpt->finished;
    const uint64_t ended = ckpt->done.step;
    pthread_mutex_unlock(&ckpt->lock);
    if (unreported) /* the next write's report would replace it */
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "the report of the write after step %llu was not taken",
                                 (unsigned long long)ended);
    double started = ember_time_now();
    ckpt->nsnaps = 0;
    ember_status_t status = mark_or_begin(ckpt, tables, count, err, err_length);
    if (status == EMBER_OK && copies_due(ckpt, count))
        status = copy_shared(ckpt, tables, count, err, err_length);
    if (status != EMBER_OK) {
        ember_shard_snapshot_kept_t kept; /* the tables owe nothing to a write never begun */
        (void)end_snapshots(ckpt, &kept);
        return status;
    }
    ember_ckpt_schedule_taken(&ckpt->schedule, step);
    pthread_mutex_lock(&ckpt->lock);
    ckpt->step = step;
    ckpt->copy_s = ember_time_now() - started;
    ckpt->wait_s = waited;
    ckpt->busy = 1;
    pthread_cond_broadcast(&ckpt->cond);
    pthread_mutex_unlock(&ckpt->lock);
    return EMBER_OK;
}

ember_status_t ember_ps_ckpt_prepare(ember_ps_ckpt_t *ckpt, ember_shard_t *const *tables,
                                     size_t count, char *err, size_t err_length)
{
    (void)wait_writer(ckpt); /* a write in progress owns them */
    for (size_t i = 0; i < count; i++)
        if (!ember_shard_snapshot_cow_able(tables[i])) /* copy-on-write needs no room */
            EMBER_CHECK(ember_shard_snapshot_take(tables[i], &ckpt->snaps[i], err, err_length));
    return EMBER_OK;
}

int ember_ps_ckpt_poll(ember_ps_ckpt_t *ckpt, ember_msg_ckpt_done_t *done)
{
    int finished;
    pthread_mutex_lock(&ckpt->lock);
    finished = ckpt->finished;
    if (finished)
        *done = ckpt->done;
    ckpt->finished = 0;
    pthread_mutex_unlock(&ckpt->lock);
    return finished;
}

ember_status_t ember_ps_ckpt_restore(ember_shard_t *const *tables, size_t count, const char *dir,
                                     const char *names, size_t nnames, char *err, size_t err_length)
{
    ember_st_file_t **files = calloc(nnames, sizeof(*files));
    char **paths = calloc(nnames, sizeof(*paths));
    ember_status_t status = files && paths ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    if (status == EMBER_OK)
        status = ember_ckpt_map_files(dir, names, EMBER_CKPT_FILE_NAME_MAX, nnames, files, paths,
                                      err, err_length);
    for (size_t t = 0; status == EMBER_OK && t < count; t++)
        status = ember_shard_restore(tables[t], (const ember_st_file_t *const *)files,
                                     (const char *const *)paths, nnames, err, err_length);
    ember_ckpt_unmap_files(files, paths, nnames);
    free(files);
    free(paths);
    return status;
}
