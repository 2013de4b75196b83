/*
 * engine/io/checkpoint: the checkpoint directory layout and its manifest.
 *
 * A checkpoint root ROOT holds one directory per checkpoint,
 * ROOT/step-%012llu (the step: steps completed).  Each holds data files
 * (written by many processes, ember_st_write_durable) and, written LAST by
 * one process once every other file is on disk, `manifest`: the names,
 * sizes and CRC-32Cs of the data files.  A step directory without a
 * manifest is torn (its writer died) and is never loaded; one whose files
 * do not match their manifest is skipped as well.
 *
 * The manifest, one item a line, each ended by '\n', nothing else:
 *
 *     ember-checkpoint 1
 *     step 100
 *     key NAME VALUE                  NAME [a-z0-9_.]{1,31}; VALUE the rest
 *                                     of the line, up to 511 bytes, no
 *                                     control characters (may be empty)
 *     file NAME BYTES CRC32C          NAME a plain file name (below);
 *                                     BYTES decimal; CRC32C 8 lower-case
 *                                     hex digits
 *     end
 *
 * The header and the step line come first, then the `key` lines, then
 * the `file` lines, `end` last; each key and file name at most once (so a
 * manifest has one spelling: written back, it is the same bytes).
 * Numbers are decimal digits without sign or leading zeros, checked at
 * full width.  A file name is 1..63 bytes, no '/', space or control
 * character, not ".", "..", "manifest" or "manifest.tmp".
 */
#ifndef EMBER_ENGINE_IO_CHECKPOINT_H
#define EMBER_ENGINE_IO_CHECKPOINT_H

#include "engine/io/safetensors.h"

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_CKPT_NAME_MAX  64
#define EMBER_CKPT_KEY_MAX   32
#define EMBER_CKPT_VALUE_MAX 512
/* A manifest larger than this is refused before it is read. */
#define EMBER_CKPT_MANIFEST_MAX (16u << 20)
/* ember_ckpt_manifest_parse: take whatever step the text says. */
#define EMBER_CKPT_ANY_STEP UINT64_MAX

typedef struct {
    char name[EMBER_CKPT_NAME_MAX];
    uint64_t bytes;
    uint32_t crc32c;
} ember_ckpt_file_t;

typedef struct {
    char key[EMBER_CKPT_KEY_MAX];
    char value[EMBER_CKPT_VALUE_MAX];
} ember_ckpt_entry_t;

typedef struct {
    uint64_t step;
    ember_ckpt_entry_t *entries; /* malloc'd, grown; in the order set */
    size_t nentries;
    ember_ckpt_file_t *files; /* malloc'd, grown; in the order added */
    size_t nfiles;
    size_t entries_capacity, files_capacity; /* elements allocated */
} ember_ckpt_manifest_t;

/** An empty manifest of @step (allocates nothing). */
void ember_ckpt_manifest_init(ember_ckpt_manifest_t *m, uint64_t step);

/** Free what @m holds; it is empty (of its step) afterwards. */
void ember_ckpt_manifest_free(ember_ckpt_manifest_t *m);

/**
 * Set @key to @value (both copied), replacing an existing one.  Errors:
 * ERR_INVALID_PARAM (a key not [a-z0-9_.]{1,31}, a value of 512 bytes or
 * more or holding a control character; logged), ERR_NO_MEMORY.
 */
ember_status_t ember_ckpt_manifest_set(ember_ckpt_manifest_t *m, const char *key,
                                       const char *value);

/** @key's value (borrowed from @m), or NULL if absent. */
const char *ember_ckpt_manifest_get(const ember_ckpt_manifest_t *m, const char *key);

/**
 * Name a data file of the checkpoint (@name copied).  Errors:
 * ERR_INVALID_PARAM (a name not plain, as above, or already named;
 * logged), ERR_NO_MEMORY.
 */
ember_status_t ember_ckpt_manifest_add_file(ember_ckpt_manifest_t *m, const char *name,
                                            uint64_t bytes, uint32_t crc32c);

/** The file named @name (borrowed from @m), or NULL. */
const ember_ckpt_file_t *ember_ckpt_manifest_file(const ember_ckpt_manifest_t *m, const char *name);

/** "ROOT/step-000000000100" into @out.  ERR_INVALID_PARAM if it does not
 * fit in @length bytes. */
ember_status_t ember_ckpt_dir_name(const char *root, uint64_t step, char *out, size_t length);

/**
 * ROOT/step-N made (and ROOT with its parents) if it is not there yet, its
 * path into @dir: where each of a checkpoint's writers puts its file (many
 * at once, so nothing in it is removed; a job's start clears torn ones,
 * ember_ckpt_clear_after).  Errors: ERR_IO (a path cannot be made),
 * ERR_INVALID_PARAM (@dir too short).
 */
ember_status_t ember_ckpt_step_dir(const char *root, uint64_t step, char *dir, size_t dir_length,
                                   char *err, size_t err_length);

/**
 * Write DIR/manifest (manifest.tmp, fsync, rename, fsync DIR and its
 * parent, so both names survive a crash).  The text is parsed back before
 * it is written: a manifest that would not read (a bad key, value or name
 * put into @m by hand) is refused.  Call it after every data file is on
 * disk.  Errors: ERR_INVALID_PARAM, ERR_IO, ERR_NO_MEMORY.
 */
ember_status_t ember_ckpt_manifest_write(const char *dir, const ember_ckpt_manifest_t *m, char *err,
                                         size_t err_length);

/**
 * Parse a manifest's @length bytes of @text (borrowed; no NUL needed),
 * strictly (the layout above), into @m, which this initialises (what it
 * held is not freed).  @where names the text in messages ("DIR/manifest");
 * @step is what the step line must say, or EMBER_CKPT_ANY_STEP.  Errors:
 * ERR_FORMAT ("WHERE:LINE: what is wrong" in @err; @m left empty),
 * ERR_NO_MEMORY.
 */
ember_status_t ember_ckpt_manifest_parse(const char *text, size_t length, const char *where,
                                         uint64_t step, ember_ckpt_manifest_t *m, char *err,
                                         size_t err_length);

/**
 * @m as the manifest's text, into *@text_p (malloc'd, the caller frees;
 * *@length_p bytes, no NUL).  What @m holds is written as it is (the
 * parse in ember_ckpt_manifest_write refuses what would not read back);
 * for a manifest that parsed, the text is exactly what was parsed (the
 * layout has one spelling).  Errors: ERR_NO_MEMORY.
 */
ember_status_t ember_ckpt_manifest_format(const ember_ckpt_manifest_t *m, char **text_p,
                                          size_t *length_p);

/**
 * Read and check DIR/manifest: DIR must be named step-N, and the step
 * line say N; an "end" line last (a manifest cut short is refused).  @m
 * as in ember_ckpt_manifest_parse.  Errors: ERR_NOT_FOUND (no manifest),
 * ERR_FORMAT, ERR_IO, ERR_NO_MEMORY.
 */
ember_status_t ember_ckpt_manifest_read(const char *dir, ember_ckpt_manifest_t *m, char *err,
                                        size_t err_length);

/**
 * Every file @m names exists in @dir with its size and CRC-32C (read in
 * big chunks).  Errors, naming the file and what differs: ERR_NOT_FOUND
 * (missing), ERR_FORMAT (size or CRC differs), ERR_IO, ERR_NO_MEMORY.
 */
ember_status_t ember_ckpt_verify(const char *dir, const ember_ckpt_manifest_t *m, char *err,
                                 size_t err_length);

/** As ember_ckpt_verify, for the one file @file of @dir's manifest. */
ember_status_t ember_ckpt_verify_one(const char *dir, const ember_ckpt_file_t *file, char *err,
                                     size_t err_length);

/**
 * The checkpoint to resume from.  @path a root: the newest step-N whose
 * manifest reads and verifies; each newer one skipped is logged
 * (ember_warn "skipping DIR: REASON") and the one taken with ember_info
 * (saying when it is not the newest).  @path a step-N directory itself
 * (its last component is step-N): it must read and verify.  @dir gets the
 * directory, @m (initialised here) its manifest.  Errors: ERR_NOT_FOUND
 * (none; @err lists what was tried and why each failed), or the step
 * directory's own error, ERR_INVALID_PARAM (@dir too short).
 */
ember_status_t ember_ckpt_find(const char *path, char *dir, size_t dir_length,
                               ember_ckpt_manifest_t *m, char *err, size_t err_length);

/** 1 when @path (a root, or a step-N directory) holds at least one
 * step-N/manifest (no reading or verifying: for the launcher), else 0. */
int ember_ckpt_exists(const char *path);

/**
 * Keep the @keep (>= 1) newest complete checkpoints of @root (a manifest
 * that reads; not verified); remove the step-N directories older than the
 * newest complete one that are not kept, complete or not, never one newer
 * (it may be being written).  Each is removed manifest first (so a removal
 * cut short leaves a torn directory, never a complete-looking one with
 * files missing), then its files, then itself.  Nothing complete: nothing
 * removed.  Errors: ERR_INVALID_PARAM (keep 0), ERR_IO (in @err).
 */
ember_status_t ember_ckpt_prune(const char *root, unsigned keep, char *err, size_t err_length);

/**
 * A job starting at step @after (0: afresh) with ROOT its checkpoint root:
 * ROOT made (and its parents); every step-N after @after that is torn (no
 * manifest, or files that do not match it) removed; a complete one refused
 * (ERR_EXISTS: it belongs to another course of the job, the text says
 * what to do).
 */
ember_status_t ember_ckpt_clear_after(const char *root, uint64_t after, char *err,
                                      size_t err_length);

/**
 * Map the @count files of @dir named at @names + i * @stride (at most
 * @stride bytes each), with ember_st_map; their paths into @paths
 * (malloc'd).  On error the ones mapped so far stay for
 * ember_ckpt_unmap_files, which takes any of them.
 */
ember_status_t ember_ckpt_map_files(const char *dir, const char *names, size_t stride, size_t count,
                                    ember_st_file_t **files, char **paths, char *err,
                                    size_t err_length);
void ember_ckpt_unmap_files(ember_st_file_t **files, char **paths, size_t count);

/*
 * Which steps a job checkpoints after: every multiple of @every, and the
 * steps asked for (the last step's, a signal's; @stop: the job ends
 * there).  Each rank keeps one, so all agree on it.
 */
#define EMBER_CKPT_ASKED_MAX 16
typedef struct {
    uint64_t every; /* 0: only the steps asked for */
    uint64_t asked[EMBER_CKPT_ASKED_MAX];
    uint8_t stop[EMBER_CKPT_ASKED_MAX];
    size_t nasked;
} ember_ckpt_schedule_t;

void ember_ckpt_schedule_init(ember_ckpt_schedule_t *s, uint64_t every);
/** Also after @step (again: nothing new, but @stop kept).  ERR_OUT_OF_RANGE
 * when EMBER_CKPT_ASKED_MAX are pending. */
ember_status_t ember_ckpt_schedule_ask(ember_ckpt_schedule_t *s, uint64_t step, int stop);
/** A checkpoint is due after @steps steps (never after 0). */
int ember_ckpt_schedule_due(const ember_ckpt_schedule_t *s, uint64_t steps);
/** The job stops after @steps steps. */
int ember_ckpt_schedule_stops(const ember_ckpt_schedule_t *s, uint64_t steps);
/** The checkpoint after @steps is taken: steps asked before it are dropped
 * (its own stays, so ember_ckpt_schedule_stops still tells of it). */
void ember_ckpt_schedule_taken(ember_ckpt_schedule_t *s, uint64_t steps);

#ifdef __cplusplus
}
#endif

#endif
