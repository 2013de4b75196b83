/*
 * ember: the job's checkpoints.
 *
 * The layout: ROOT/step-%012llu/ holds psP.safetensors from every PS that
 * holds tables (each shard's rows as stored and its optimizer state under
 * PyTorch's names, metadata giving shard, shard count, rows, steps), one
 * file per trainer (trainerT.safetensors: the caller's named tensors and
 * metadata, plus the library's own: format "ember-trainer-checkpoint-2",
 * step, trainer, trainers), and the coordinator's `manifest` last (every
 * file's name, size and CRC-32C, the library's "trainers" and "ps" lines
 * and the caller's description lines).  A directory without a manifest is
 * torn and never loaded.  Every file is written durably (tmp, fsync,
 * rename).
 *
 * Which steps: every multiple of @every, and the steps trainer 0 names: the
 * last step's, and a signal's (SIGUSR1: one now and go on; SIGTERM: one,
 * then stop).  Trainer 0 names step s + 1 before it begins step s and every
 * rank acknowledges it before it goes on; no trainer has passed it when the
 * trainers meet every step (their dense allreduce, as data parallelism
 * does): one that has (it asked whether s + 1 is due) refuses it, and
 * trainer 0's ember_checkpoint_step_begin fails naming it.  The last step's
 * checkpoint every trainer knows itself (ember_checkpoint_step_begin's
 * @last).  Every PS
 * copies its shards once it has applied step K-1 and before it answers a
 * lookup of step K (the only pause), and writes from the copy on a
 * low-priority thread.
 *
 * Resume on any PS count: each PS restores its shards from whichever old
 * shards hold its rows (by global row id).
 *
 * Threading: as the job's (one thread at a time, the job's); the resuming
 * calls that take no job (find, info_free, describe, open_trainer,
 * open_trainer_at, read_table) from any thread, one at a time per info.
 * Errors: the calls that take @err/@err_length (may be NULL/0) put one
 * line there naming the file, rank, step or key at fault (only
 * ember_checkpoint_save also logs it, since its failure fails the
 * checkpoint at the coordinator); a call that waits fails with
 * ERR_CANCELED on an abort.  The coordinator logs a failed checkpoint.
 */
#ifndef EMBER_CHECKPOINT_H
#define EMBER_CHECKPOINT_H

#include <ember/job.h>
#include <ember/safetensors.h> /* ember_st_tensor_t, ember_st_meta_t, ember_st_file_t */
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_checkpoint ember_checkpoint_t;

#define EMBER_CHECKPOINT_PATH_MAX 512 /* bytes of a root, its NUL included */

typedef struct {
    const char *root;    /* NULL: none are written (resume only) */
    uint64_t every;      /* steps between them; 0: at the end and on request */
    uint32_t keep;       /* complete ones kept (>= 1) */
    uint64_t start_step; /* the step this run starts at (a resumed one's) */
    int signals;         /* SIGUSR1 / SIGTERM as requests (the PS too: see
                          * ember_ps_options_t's signals) */
    /* The coordinator's description lines of the manifest (keys
     * [a-z0-9_.]{1,31}, values up to 511 bytes without control characters;
     * borrowed for the call): what wrote it.  Other ranks' are ignored. */
    const ember_st_meta_t *describe;
    size_t ndescribe;
} ember_checkpoint_config_t;

/** Defaults: no root, every 0, keep 1, start_step 0, no signals, no lines.
 * Any thread; never blocks. */
void ember_checkpoint_config_init(ember_checkpoint_config_t *config);

/**
 * Collective over every rank that is not a PS, after the job's tables are
 * created (the PS that hold tables then owe a file to each checkpoint):
 * the coordinator clears torn leftovers after start_step (a fresh run,
 * start_step 0, refuses a root that holds a complete checkpoint:
 * ERR_EXISTS), tells every PS the plan and collects the files' reports;
 * trainer 0 picks the requested steps.  Blocks (the PS answer).  @config
 * borrowed for the call; *@ckpt_p the caller's.  Errors:
 * ERR_INVALID_PARAM (keep 0, a root too long, a bad description line,
 * called on a PS), ERR_EXISTS, ERR_IO (the root cannot be made),
 * ERR_NO_MEMORY, a PS's, ERR_CANCELED.
 */
ember_status_t ember_checkpoint_open(ember_job_t *job, const ember_checkpoint_config_t *config,
                                     ember_checkpoint_t **ckpt_p, char *err, size_t err_length);
/** Waits (blocks, bounded by the job's abort and the coordinator's loss)
 * for this rank's reports to be taken, then frees it.  Before the job is
 * left.  NULL: nothing. */
void ember_checkpoint_close(ember_checkpoint_t *ckpt);

/** A trainer, before step @step (@last: the job's last): signals and requests
 * become the checkpoint after @step + 1 steps, which every rank then knows
 * (trainer 0 blocks until every rank answered; the others never block).
 * Other ranks: signals go to trainer 0.  Errors: a rank that did not take
 * it (named, with its status), ERR_OUT_OF_RANGE (16 checkpoints asked for
 * and not yet taken), ERR_NO_MEMORY, ERR_CANCELED. */
ember_status_t ember_checkpoint_step_begin(ember_checkpoint_t *ckpt, uint64_t step, int last,
                                           char *err, size_t err_length);
/** A checkpoint is due after @steps steps (every trainer must then save
 * one; a trainer that asked has passed @steps: trainer 0 can no longer name
 * it) / the job stops after @steps (a SIGTERM's checkpoint).  Never block,
 * cannot fail.  NULL: 0. */
int ember_checkpoint_due(ember_checkpoint_t *ckpt, uint64_t steps);
int ember_checkpoint_stops(const ember_checkpoint_t *ckpt, uint64_t steps);
/** The step a SIGTERM's checkpoint stops the job after (0: none asked).
 * Never blocks.  NULL: 0. */
uint64_t ember_checkpoint_stop_step(const ember_checkpoint_t *ckpt);

/**
 * A trainer's file of the checkpoint after @steps steps: @tensors and @meta
 * (borrowed for the call; names unique, the library's keys format, step,
 * trainer, trainers not among @meta's) as trainerT.safetensors, durably,
 * then its report to the coordinator.  Call it once step @steps - 1 is done
 * (the caller's state as that step left it).  Blocks while writing.
 * Errors: ERR_INVALID_PARAM (not a trainer, a reserved key, a checkpoint
 * not due), ERR_IO / ERR_NO_MEMORY (the file, named; the checkpoint then
 * fails at the coordinator), the report's (ERR_PEER_LOST: the coordinator,
 * ERR_CANCELED).
 */
ember_status_t ember_checkpoint_save(ember_checkpoint_t *ckpt, uint64_t steps,
                                     const ember_st_tensor_t *tensors, size_t ntensors,
                                     const ember_st_meta_t *meta, size_t nmeta, char *err,
                                     size_t err_length);

/* The coordinator's view of one completed (or failed) checkpoint. */
typedef struct {
    uint64_t step;
    int failed; /* the cause in text */
    char dir[600];
    uint64_t bytes;
    size_t files;
    /* The longest over the PS: the pause at the step boundary (the
     * snapshot: rows marked for copy-on-write, or a GPU or dynamic
     * table's copy), the wait for the previous write first, the write. */
    double copy_seconds, wait_seconds, write_seconds, complete_seconds;
    char text[300];
} ember_checkpoint_event_t;

/** The coordinator: progresses the job once (reports are taken), never
 * blocking; the next completed or failed checkpoint into *@event_p (the
 * caller's; returns 1), or 0.  Other ranks: 0. */
int ember_checkpoint_poll(ember_checkpoint_t *ckpt, ember_checkpoint_event_t *event_p);
/** The coordinator: wait (blocks) until every checkpoint up to @steps is
 * complete or failed.  Other ranks: OK at once.  Errors: ERR_IO (one
 * failed, the cause in @err), ERR_PEER_LOST (a rank lost before it reported
 * its file, named), ERR_TIMED_OUT (a PS whose file it waits for no longer
 * answers: asked every 10 s of waiting, each ask bounded by the RPC
 * timeout; named), ERR_CANCELED. */
ember_status_t ember_checkpoint_finish(ember_checkpoint_t *ckpt, uint64_t steps, char *err,
                                       size_t err_length);

/* ---- resuming -------------------------------------------------------------- */

/* One checkpoint found on disk (ember_checkpoint_find fills it, the caller
 * owns it; free with ember_checkpoint_info_free). */
typedef struct {
    char dir[600];
    uint64_t step;
    uint32_t trainers; /* its manifest's "trainers" line (0: none) */
    uint32_t num_ps;   /* its manifest's "ps" line (0: none) */
    void *manifest;    /* its description and files (ember_checkpoint_describe) */
} ember_checkpoint_info_t;

/** @path a root (its newest complete checkpoint that verifies; newer ones
 * skipped are logged) or one step directory; every file's size and CRC
 * checked.  Blocks (reads every file).  Errors (naming the path and what
 * is wrong): ERR_NOT_FOUND, ERR_FORMAT, ERR_IO, ERR_NO_MEMORY. */
ember_status_t ember_checkpoint_find(const char *path, ember_checkpoint_info_t *info, char *err,
                                     size_t err_length);
/** Free what @info holds (the struct itself is the caller's).  An info
 * that find failed on is freed too; NULL: nothing. */
void ember_checkpoint_info_free(ember_checkpoint_info_t *info);
/** A description line of its manifest ("" when absent, or @info or @key
 * NULL); borrowed from @info (valid until ember_checkpoint_info_free). */
const char *ember_checkpoint_describe(const ember_checkpoint_info_t *info, const char *key);

/** Every PS restores its shards of the job's tables from @info's PS files
 * (the tables created first, with their names, rows and dims as
 * checkpointed, on any placement).  Any rank but a PS; @info borrowed;
 * blocks until every PS answered.  Errors: ERR_INVALID_PARAM (called on a
 * PS, no checkpoint in @info, its path too long), ERR_NO_MEMORY, the PS's
 * (named: a table missing from the files, a shape that differs),
 * ERR_CANCELED. */
ember_status_t ember_checkpoint_restore_tables(ember_job_t *job,
                                               const ember_checkpoint_info_t *info, char *err,
                                               size_t err_length);

/** Trainer @t's file of @info, opened (mapped) and its library metadata
 * checked (format, step, trainer, trainers as the manifest says);
 * *@file_p the caller's (ember_st_close).  Blocks (maps the file).
 * Errors: ERR_INVALID_PARAM (no info), ERR_NOT_FOUND (no such file),
 * ERR_FORMAT (naming the key; a file of another format, such as an
 * ember-train checkpoint before the library API, format 1, is refused
 * saying so), ERR_IO. */
ember_status_t ember_checkpoint_open_trainer(const ember_checkpoint_info_t *info, uint32_t t,
                                             ember_st_file_t **file_p, char *err,
                                             size_t err_length);

/**
 * The same without ember_checkpoint_find, for a trainer that resumes from
 * a checkpoint its coordinator found: @dir is the checkpoint's step
 * directory (ROOT/step-N, info.dir), @step its step.  Reads @dir's
 * manifest (a directory without one is torn: refused) and checks only
 * trainer @t's file: its size and CRC-32C against the manifest, then as
 * ember_checkpoint_open_trainer.  Blocks (reads that one file).  Any rank,
 * no job needed.  *@file_p the caller's (ember_st_close).  Errors:
 * ERR_INVALID_PARAM (no @dir), ERR_NOT_FOUND (no manifest, or none of
 * trainer @t), ERR_FORMAT (a manifest of another step or malformed, a
 * file that does not match it, a bad key: named), ERR_IO, ERR_NO_MEMORY.
 */
ember_status_t ember_checkpoint_open_trainer_at(const char *dir, uint64_t step, uint32_t t,
                                                ember_st_file_t **file_p, char *err,
                                                size_t err_length);

/** Table @name whole ([rows][dim] floats into @out, the caller's) from the
 * PS files of any layout: a model's initial weights.  Blocks (maps and
 * reads the PS files).  Errors: ERR_INVALID_PARAM (no checkpoint, a bad
 * name, rows or dim < 1, @out NULL), ERR_FORMAT (the files hold another
 * shape, or not every row: named), ERR_IO, ERR_NO_MEMORY. */
ember_status_t ember_checkpoint_read_table(const ember_checkpoint_info_t *info, const char *name,
                                           int64_t rows, uint32_t dim, float *out, char *err,
                                           size_t err_length);

#ifdef __cplusplus
}
#endif
#endif
