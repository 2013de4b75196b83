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

#include "engine/wire/codec.h"

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ember_table ember_table_t;
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
ember_status_t ember_table_create(const ember_msg_table_create_t *spec, struct ember_device *device,
                                  ember_table_t **table_p, char *err, size_t err_length);
void ember_table_destroy(ember_table_t *table);

const char *ember_table_name(const ember_table_t *table);
uint32_t ember_table_dim(const ember_table_t *table);
/** Rows stored by this shard. */
int64_t ember_table_local_rows(const ember_table_t *table);
/** Sync mode: the step whose lookups may be answered now (= steps applied). */
uint64_t ember_table_next_step(const ember_table_t *table);
int ember_table_is_sync(const ember_table_t *table);

/** Copy in rows [first, first + count) of the whole table (those owned).
 * fp16 rows: a finite value of magnitude 65520 or more (which fp16 rounds
 * to infinity) refuses the whole load (ERR_OUT_OF_RANGE, naming the row). */
ember_status_t ember_table_load(ember_table_t *table, int64_t first, int64_t count,
                                const float *data, char *err, size_t err_length);

/** Copy out local rows [first, first + count) into @out. */
ember_status_t ember_table_read(const ember_table_t *table, int64_t first, int64_t count,
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
ember_status_t ember_table_lookup(ember_table_t *table, const ember_wire_lookup_view_t *lookup,
                                  float *out, char *err, size_t err_length);

/**
 * Take the gradient of a lookup's output (@grad as the codec took it:
 * float[bags * dim], borrowed).  Sync: kept until every trainer's gradient
 * for the step is in, then reduced (in trainer order, so the result is
 * deterministic) and applied once; *applied_p says whether that happened
 * now.  Async: applied at once.  A non-finite gradient is refused, voiding
 * the context, and nothing is applied.  It is the three calls below.
 */
ember_status_t ember_table_grad(ember_table_t *table, const ember_wire_grad_view_t *grad,
                                int *applied_p, char *err, size_t err_length);

/**
 * Whatever ember_table_grad would refuse @grad for (the trainer, its open
 * context of that step and size, every value finite, none of the trainer's
 * waiting), changing nothing, not even the context: a multi-table push
 * (EMBER_OP_GRADS) checks every table's before it applies any.
 */
ember_status_t ember_table_grad_check(const ember_table_t *table,
                                      const ember_wire_grad_view_t *grad, char *err,
                                      size_t err_length);

/** After ember_table_grad_check passed: the room @grad's backward needs
 * (grow-only scratch; no row, context or pending gradient changes).
 * Errors: ERR_NO_MEMORY. */
ember_status_t ember_table_grad_reserve(ember_table_t *table, const ember_wire_grad_view_t *grad,
                                        char *err, size_t err_length);

/** After both: take @grad as ember_table_grad does (closes the context;
 * sync: *applied_p says whether the step was applied now).  Fails only in
 * the optimizer's step itself (a device's error). */
ember_status_t ember_table_grad_apply(ember_table_t *table, const ember_wire_grad_view_t *grad,
                                      int *applied_p, char *err, size_t err_length);

/** Forget what a lost trainer left behind (its context). */
void ember_table_drop_trainer(ember_table_t *table, uint32_t trainer);

size_t ember_table_bytes(const ember_table_t *table);
size_t ember_table_optimizer_bytes(const ember_table_t *table);
/** Contexts, pending gradients and scratch. */
size_t ember_table_other_bytes(const ember_table_t *table);

#endif
