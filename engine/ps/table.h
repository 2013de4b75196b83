/*
 * engine/ps/table: one shard of an embedding table on a parameter server, with
 * its optimizer state and the distributed-autograd contexts of its lookups.
 *
 * Pure computation (no transport): engine/ps/ps.c feeds it the messages.  Every
 * message is validated here in full before anything is touched, so a bad
 * request is answered with an error naming the table, trainer, step and the
 * offending value, and changes nothing.
 *
 * Rows are sharded by `row % num_shards`; a shard stores its rows densely
 * (local id = row / num_shards), as fp32 or as fp16 (the spec's dtype,
 * engine/ops/half.h).  Everything that goes in or out is fp32: loads are
 * rounded to fp16, reads and pooling widen, updates are computed in fp32
 * and rounded once.
 */
#ifndef EMBER_ENGINE_TABLE_H
#define EMBER_ENGINE_TABLE_H

#include "engine/io/safetensors.h"
#include "engine/ops/optimizer.h"
#include "engine/wire/codec.h"

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ember_shard ember_shard_t;
struct ember_device;

/**
 * Create a shard as @spec says (copied); initial rows N(0,1), uniform
 * (EMBER_INIT_UNIFORM) or zeros awaiting TABLE_LOAD.  @device (include/ember/device.h; borrowed, outlives
 * the table) holds the rows in its memory; NULL: host memory.  On a device,
 * lookups pool there; an update copies the touched rows out, steps the
 * optimizer (its state stays in host memory) and copies them back, so every
 * result is the host table's, bit for bit on the CPU backend.  Validation
 * is the host's, before the device sees anything; fp32 rows only there.
 * Errors (message in @err): ERR_INVALID_PARAM, ERR_UNSUPPORTED (fp16 rows
 * on a device), ERR_NO_MEMORY, or the device's.
 */
ember_status_t ember_shard_create(const ember_msg_table_create_t *spec, struct ember_device *device,
                                  ember_shard_t **table_p, char *err, size_t err_length);
void ember_shard_destroy(ember_shard_t *table);

struct ember_workers;
/**
 * Split the shard's compute over @workers (common/workers.h; borrowed,
 * outlives the table; NULL: one thread): pooling by bag ranges, the
 * backward, the sync reduction and the optimizer step by row ranges, each
 * deterministic, so every result is the same bits for any pool.  Not while
 * a request is being served.  Errors: ERR_NO_MEMORY (the tasks' scratch;
 * the table keeps its pool).
 */
ember_status_t ember_shard_set_workers(ember_shard_t *table, struct ember_workers *workers);
/** The pool set by ember_shard_set_workers (NULL: one thread). */
struct ember_workers *ember_shard_workers(const ember_shard_t *table);
/** The tasks ember_shard_lookup would split a lookup of @head into (1: it
 * pools on the calling thread alone). */
unsigned ember_shard_lookup_tasks(const ember_shard_t *table, const ember_msg_lookup_t *head);

const char *ember_shard_name(const ember_shard_t *table);
uint32_t ember_shard_dim(const ember_shard_t *table);
/** Rows stored by this shard. */
int64_t ember_shard_local_rows(const ember_shard_t *table);
/** Sync mode: the step whose lookups may be answered now (= steps applied). */
uint64_t ember_shard_next_step(const ember_shard_t *table);
int ember_shard_is_sync(const ember_shard_t *table);
/** Sync: how many steps behind its own a lookup may be served (the spec's
 * staleness; 0: exactly at its step). */
uint32_t ember_shard_staleness(const ember_shard_t *table);

/** Copy in rows [first, first + count) of the whole table (those owned).
 * fp16 rows: a finite value of magnitude 65520 or more (which fp16 rounds
 * to infinity) refuses the whole load (ERR_OUT_OF_RANGE, naming the row). */
ember_status_t ember_shard_load(ember_shard_t *table, int64_t first, int64_t count,
                                const float *data, char *err, size_t err_length);

/** Copy out local rows [first, first + count) into @out. */
ember_status_t ember_shard_read(const ember_shard_t *table, int64_t first, int64_t count,
                                float *out, char *err, size_t err_length);

/**
 * Serve one lookup, as engine/wire/codec took it (@lookup's arrays
 * borrowed): check what its arrays hold against the table (rows in range,
 * sorted, of this shard; offsets and slots consistent), pool into @out
 * [bags * dim], and keep the context for the backward (an
 * EMBER_LOOKUP_EVAL lookup keeps none, and may come while the trainer's
 * context is open).  With
 * EMBER_LOOKUP_MAX, @out has room for bags * dim more uint32 right after the
 * values: each maximum's place in its bag (engine/wire/protocol.h).  Fails,
 * changing nothing, on any bad value.
 */
ember_status_t ember_shard_lookup(ember_shard_t *table, const ember_wire_lookup_view_t *lookup,
                                  float *out, char *err, size_t err_length);

/**
 * Take the gradient of a lookup's output (@grad as the codec took it:
 * float[bags * dim], borrowed).  Sync: kept until every trainer's gradient
 * for the step is in, then reduced (in trainer order, so the result is
 * deterministic) and applied once, steps in order (with staleness a later
 * step's may come first and waits for its turn); *applied_p says how many
 * steps were applied now.  Async: applied at once.  A non-finite gradient is refused, voiding
 * the context, and nothing is applied.  It is the three calls below.
 */
ember_status_t ember_shard_grad(ember_shard_t *table, const ember_wire_grad_view_t *grad,
                                int *applied_p, char *err, size_t err_length);

/**
 * Whatever ember_shard_grad would refuse @grad for (the trainer, its open
 * context of that step and size, every value finite, none of the trainer's
 * waiting), changing nothing, not even the context: a multi-table push
 * (EMBER_OP_GRADS) checks every table's before it applies any.
 */
ember_status_t ember_shard_grad_check(const ember_shard_t *table,
                                      const ember_wire_grad_view_t *grad, char *err,
                                      size_t err_length);

/** After ember_shard_grad_check passed: the room @grad's backward needs
 * (grow-only scratch; no row, context or pending gradient changes).
 * Errors: ERR_NO_MEMORY. */
ember_status_t ember_shard_grad_reserve(ember_shard_t *table, const ember_wire_grad_view_t *grad,
                                        char *err, size_t err_length);

/** After both: take @grad as ember_shard_grad does (closes the context;
 * sync: *applied_p says whether the step was applied now).  Fails only in
 * the optimizer's step itself (a device's error). */
ember_status_t ember_shard_grad_apply(ember_shard_t *table, const ember_wire_grad_view_t *grad,
                                      int *applied_p, char *err, size_t err_length);

/** Forget what a lost trainer left behind (every open context). */
void ember_shard_drop_trainer(ember_shard_t *table, uint32_t trainer);

/** Forget trainer @trainer's context of @step, if it has one open (a
 * LOOKUPS refused whole takes back its tables' lookups; the trainer's other
 * open steps stay). */
void ember_shard_drop_lookup(ember_shard_t *table, uint32_t trainer, uint64_t step);

/**
 * Step with @cfg (copied; checked by the caller, ps_msg) from now on.
 * Equal to the shard's optimizer, field for field: nothing changes
 * (*@changed_p 0).  Else a new optimizer of the shard's rows
 * (EMBER_OPT_SPARSE; its state in host memory for a device shard too, as
 * at create) replaces the old one, its state restarting (zeros,
 * accumulators at initial_accumulator, step 0), and the spec's optimizer
 * is @cfg (*@changed_p 1).  Not while a request is being served.  Errors
 * (the old optimizer kept): ERR_INVALID_PARAM, ERR_NO_MEMORY.
 */
ember_status_t ember_shard_set_optimizer(ember_shard_t *table, const ember_opt_config_t *cfg,
                                         int *changed_p, char *err, size_t err_length);
/** Whether @cfg equals the shard's optimizer (as ember_shard_set_optimizer
 * compares them). */
int ember_shard_optimizer_is(const ember_shard_t *table, const ember_opt_config_t *cfg);

size_t ember_shard_bytes(const ember_shard_t *table);
size_t ember_shard_optimizer_bytes(const ember_shard_t *table);
/** Contexts, pending gradients and scratch. */
size_t ember_shard_other_bytes(const ember_shard_t *table);

/* --- dynamic tables (engine/ps/table_dyn.c) ------------------------------ */

/** Whether the shard is a dynamic table's (its rows by key). */
int ember_shard_is_dynamic(const ember_shard_t *table);
/** The rows of @n keys (@keys borrowed, any alignment) into @out [n][dim]
 * and @found [n] (1: the key holds a row; else its initial values).
 * Errors: ERR_UNSUPPORTED (a fixed table). */
ember_status_t ember_shard_read_keys(const ember_shard_t *table, const uint8_t *keys, size_t n,
                                     float *out, uint8_t *found, char *err, size_t err_length);
/** Set the rows of @n keys (@keys, @rows [n][dim] borrowed, any alignment;
 * other shards' keys skipped): a key without a row gets one.  Nothing is
 * written on an error.  Errors: ERR_UNSUPPORTED (a fixed table),
 * ERR_INVALID_PARAM (a key twice, a value not finite), ERR_OUT_OF_RANGE
 * (the budget cannot hold the new keys), ERR_NO_MEMORY. */
ember_status_t ember_shard_write_keys(ember_shard_t *table, const uint8_t *keys, size_t n,
                                      const uint8_t *rows, char *err, size_t err_length);
/** A dynamic shard's counters (<ember/table.h>).  Errors: ERR_UNSUPPORTED
 * (a fixed table). */
ember_status_t ember_shard_stats(const ember_shard_t *table, ember_table_stats_t *stats, char *err,
                                 size_t err_length);

/* --- checkpoints (engine/ps/table_state.c) -------------------------------
 *
 * A shard's state is its rows as stored (F32 or F16), its optimizer's state
 * arrays (ember_opt_state_arrays) and step count, and next_step.  At a step
 * boundary a PS marks a host shard's state as owed to a snapshot
 * (ember_shard_snapshot_mark: copy-on-write, engine/ps/table_cow.h, no copy
 * in the pause training sees) and writes it from the live table while
 * training goes on, every chunk of rows changed meanwhile copied aside
 * before it changes; a device shard or a dynamic table is copied into its
 * snapshot (ember_shard_snapshot_take, _begin and _copy) in the pause.  A
 * restore puts the state back by global row id, so a checkpoint of P
 * shards loads into any number of shards. */

typedef struct ember_shard_snapshot ember_shard_snapshot_t;

/**
 * Copy @table's rows (as stored), its optimizer state arrays and step count,
 * and its next_step into *@snap_p: created at the first call (*snap_p
 * NULL), reused and grown after (any table).  A plain copy of each array; a
 * device shard's rows come out with the device's copy.  Not thread-safe
 * with the table's updates: the caller holds the table still.
 * Errors (message in @err): ERR_NO_MEMORY (a new snapshot is freed and
 * *snap_p stays NULL; a reused one is left unusable until a take
 * succeeds), or the device's.
 */
ember_status_t ember_shard_snapshot_take(const ember_shard_t *table,
                                         ember_shard_snapshot_t **snap_p, char *err,
                                         size_t err_length);
/**
 * ember_shard_snapshot_take in two halves, so the copy can be shared:
 * _begin sizes the snapshot and describes it (its step, its metadata), no
 * copy yet; _copy then copies part @part of @parts of every array (a
 * device shard's rows whole, in part 0).  The parts may run on different
 * threads at once; the snapshot is whole once all have returned OK.
 */
ember_status_t ember_shard_snapshot_begin(const ember_shard_t *table,
                                          ember_shard_snapshot_t **snap_p, char *err,
                                          size_t err_length);
ember_status_t ember_shard_snapshot_copy(const ember_shard_t *table, ember_shard_snapshot_t *snap,
                                         unsigned part, unsigned parts, char *err,
                                         size_t err_length);
/** Whether @table's snapshot can be kept by copy-on-write (a host shard of a
 * fixed table; a device shard or a dynamic table is copied). */
int ember_shard_snapshot_cow_able(const ember_shard_t *table);
/**
 * A copy-on-write snapshot of @table (ember_shard_snapshot_cow_able) into
 * *@snap_p (created at the first call, reused after): its step and metadata
 * recorded, every chunk of its rows and optimizer state marked owed to it,
 * nothing copied.  From then until ember_shard_snapshot_end, every change
 * of the table's rows or state (its optimizer steps on any of the PS's
 * threads, ember_shard_load, ember_shard_restore) first copies the owed
 * chunks it touches aside, and ember_shard_snapshot_read gives the arrays
 * as they were here.  The table must not be destroyed, nor its optimizer
 * replaced, before the end (the reader reads its live arrays).  The caller
 * holds the table still during the call, and the previous snapshot of the
 * table has ended.  Errors: ERR_UNSUPPORTED (not cow-able), ERR_NO_MEMORY
 * (the guard's states; in @err).
 */
ember_status_t ember_shard_snapshot_mark(ember_shard_t *table, ember_shard_snapshot_t **snap_p,
                                         char *err, size_t err_length);
/** Whether @snap is a copy-on-write snapshot not yet ended. */
int ember_shard_snapshot_marked(const ember_shard_snapshot_t *snap);
/**
 * Bytes [@offset, @offset + @length) of the snapshot's array @array (its
 * tensors' order, ember_shard_snapshot_tensors) into @buf: from the live
 * table or the chunks copied aside for a marked snapshot (one reader
 * thread, concurrently with the table's updates), from the copy otherwise.
 * Errors: ERR_INVALID_PARAM (no such bytes, or the snapshot ended).
 */
ember_status_t ember_shard_snapshot_read(const ember_shard_snapshot_t *snap, size_t array,
                                         uint64_t offset, void *buf, size_t length, char *err,
                                         size_t err_length);
/** What keeping a marked snapshot cost: the chunks the table's updates
 * copied aside during its write, and their bytes. */
typedef struct {
    uint64_t chunks, bytes;
} ember_shard_snapshot_kept_t;
/**
 * The end of a marked snapshot's write (whole, failed or given up): the
 * table owes it nothing more, the copied-aside memory is given back, and
 * the snapshot is invalid until its next mark or take; @kept (may be
 * NULL) what it cost.  A copied snapshot: nothing (kept zero).  Called by
 * the reader's thread.
 */
void ember_shard_snapshot_end(ember_shard_snapshot_t *snap, ember_shard_snapshot_kept_t *kept);
/** Free a snapshot and its arrays.  NULL is a no-op. */
void ember_shard_snapshot_free(ember_shard_snapshot_t *snap);
/** Host memory the snapshot holds (its arrays' room). */
size_t ember_shard_snapshot_bytes(const ember_shard_snapshot_t *snap);
/** The table's next_step the snapshot was taken at. */
uint64_t ember_shard_snapshot_step(const ember_shard_snapshot_t *snap);

/* The rows, the optimizer's arrays, and a dynamic shard's four key arrays. */
#define EMBER_TABLE_STATE_TENSORS (1 + EMBER_OPT_STATE_MAX + 4)
#define EMBER_TABLE_STATE_META    12

/**
 * The snapshot as safetensors tensors (every field filled but, for a
 * marked snapshot, data: NULL, its bytes come from
 * ember_shard_snapshot_read), all borrowed from it (valid until its next
 * take or free): "NAME.weight" [local_rows, dim] (F32 or F16) and
 * "NAME.STATE" for each state array ([local_rows, per_row], or
 * [local_rows] when per_row is 1), NAME the table's name; and metadata
 * (text, stored in the snapshot) "NAME.shard", "NAME.num_shards",
 * "NAME.rows" (the whole table's), "NAME.dim", "NAME.optimizer" (kind
 * name), "NAME.opt_steps", "NAME.step" (next_step).  Appended to @tensors
 * at *@ntensors and @meta at *@nmeta (many tables of a PS in one file).
 * Errors: ERR_INVALID_PARAM (it would pass @max_tensors or @max_meta, or
 * the last take failed; nothing appended).
 */
ember_status_t ember_shard_snapshot_tensors(const ember_shard_snapshot_t *snap,
                                            ember_st_tensor_t *tensors, size_t *ntensors,
                                            size_t max_tensors, ember_st_meta_t *meta,
                                            size_t *nmeta, size_t max_meta);

/**
 * Restore @table (freshly created with the same name, rows, dim, dtype and
 * optimizer kind and settings; any shard/num_shards) from the files that
 * hold the table's shards as some earlier layout wrote them (@files
 * borrowed; those without this table's metadata are ignored; @names[i] is
 * file i's path for messages, @names may be NULL).  Every global row this
 * shard owns is copied from the old shard holding it, rows and every
 * optimizer state array, so the result does not depend on the old layout;
 * the optimizer's step count and next_step are set (all old shards must
 * agree on them).  Everything is checked first and an error changes
 * nothing: each file's metadata (rows, dim, optimizer as the table's;
 * shard < num_shards; the shards exactly 0..num_shards-1, each once),
 * every tensor's dtype and shape, no state the table's optimizer does not
 * keep.  Errors (message naming the file, the table and what differs):
 * ERR_FORMAT, ERR_NOT_FOUND (no file holds the table), ERR_NO_MEMORY, or
 * the device's.
 */
ember_status_t ember_shard_restore(ember_shard_t *table, const ember_st_file_t *const *files,
                                   const char *const *names, size_t nfiles, char *err,
                                   size_t err_length);

#endif
