/*
 * engine/ps/table_dyn: a dynamic table's shard: raw 64-bit keys, a hash map
 * (engine/ps/keymap.h) of key -> row slot, admission, eviction to a budget.
 *
 * A dynamic shard's rows and their optimizer state live in slots: arrays
 * mapped for `local_rows` slots whose pages are faulted in as slots are
 * first used (lowest free first), so memory follows the rows held, not the
 * room.  Behind the slots, scratch rows give a lookup's keys that hold no
 * row their initial values (drawn from (seed, key) as a fixed table's row
 * `key` would be), so an unknown key is served without being stored.
 *
 * What changes the table happens at step boundaries, in a fixed order, so
 * that a sync run is deterministic: when step s is applied (every
 * trainer's gradient in), each trainer's lookup of s is counted in trainer
 * order (each key's occurrences; its last step seen; its LFU frequency),
 * keys that reached admit_count get rows (initial values, fresh optimizer
 * state), evicting rows not seen in step s when the budget is full (LRU:
 * least recently seen first, ties in the order they were seen; LFU: the
 * lowest decayed count, then the least recent, then the smaller key), and
 * gradients of keys without a row are dropped and counted.  Then rows
 * unseen for evict_after steps go.  An async table does the same for
 * each gradient as it is applied.  Lookups change nothing: a lookup of a
 * key without a row returns its initial values.
 *
 * A table that can never evict (no budget and no evict_after) keeps no
 * record of its rows beyond the map (no counts, recency or links: nothing
 * reads them), and its checkpoints list its rows by key with zero counts.
 *
 * Keys that were seen but hold no row yet (admit_count > 1, or no room)
 * are candidates: their counts are kept, at most budget_rows of them.  When
 * they are at that bound, a newly seen key takes the place of the least
 * recently seen candidate not seen in the same step (counted in
 * dropped_candidates); if every candidate was seen in this step, the new
 * key is not counted at all this time.  Private to engine/ps/table*.c.
 */
#ifndef EMBER_ENGINE_TABLE_DYN_H
#define EMBER_ENGINE_TABLE_DYN_H

#include "engine/ps/table_private.h"

#include <stddef.h>
#include <stdint.h>

/* A dynamic shard's counters (EMBER_OP_TABLE_STATS). */
typedef struct {
    uint64_t rows;       /* held */
    uint64_t candidates; /* keys counted that hold no row */
    uint64_t admitted, evicted, dropped_grads, dropped_candidates;
    uint64_t capacity; /* slots mapped */
    uint64_t bytes;    /* rows + state + keys + counters + map of the slots in use */
    uint64_t map_bytes;
    double load_factor, mean_probe;
    uint32_t max_probe;
} table_dyn_stats_t;

/* Map the slots and make the shard's key state (spec: dynamic).  Sets
 * table->data, local_rows, optimizer, dyn.  Errors: ERR_INVALID_PARAM
 * (the dynamic settings), ERR_UNSUPPORTED (on a device), ERR_NO_MEMORY. */
ember_status_t table_dyn_create(ember_shard_t *table, char *err, size_t err_length);
void table_dyn_destroy(ember_shard_t *table);

/* The lookup's keys: sorted (as uint64), distinct, of this shard; each
 * given its row now (its slot, or a scratch row drawn for it), into
 * ctx->unique (in the keys' order) and ctx->keys.  Errors: ERR_INVALID_PARAM
 * (unsorted, another shard's), ERR_NO_MEMORY; the text in @err names the
 * key. */
ember_status_t table_dyn_take_keys(ember_shard_t *table, context_t *ctx,
                                   const ember_wire_lookup_view_t *lookup, char *err,
                                   size_t err_length);

/* After the entries are taken: each key's occurrences, and ctx->unique
 * sorted with the entries' slots renumbered to match (what the pooling,
 * the backward and the reduction expect). */
ember_status_t table_dyn_order(ember_shard_t *table, context_t *ctx);

/* After the backward into @pending: each of its rows' key, and the keys
 * the lookup saw with their occurrences.  Errors: ERR_NO_MEMORY. */
ember_status_t table_dyn_pending(ember_shard_t *table, const context_t *ctx, pending_t *pending);

/* A step boundary (@step: the step being applied, or an async table's
 * count of applied gradients): count @grads' keys (in order), admit,
 * evict, then turn each gradient's rows from lookup-time rows into the
 * slots their keys hold now (sorted; the rows of keys without one
 * dropped).  Errors: ERR_NO_MEMORY (nothing counted then). */
ember_status_t table_dyn_boundary(ember_shard_t *table, pending_t *const *grads, uint32_t count,
                                  uint64_t step);

/* An async table's next apply's number (1, 2, ...). */
uint64_t table_dyn_next_apply(ember_shard_t *table);
/* Slots and scratch rows mapped: what a lookup's rows may index. */
int64_t table_dyn_rows_mapped(const ember_shard_t *table);
/* A new optimizer's state of every slot used set to its start. */
void table_dyn_reset_state(ember_shard_t *table, ember_opt_t *opt);
/* The lookups' and boundaries' scratch (grow-only). */
size_t table_dyn_scratch_bytes(const ember_shard_t *table);
/* The optimizer state's bytes of the slots used. */
size_t table_dyn_optimizer_bytes(const ember_shard_t *table);

/* After step @step was applied: the rows unseen for evict_after steps go. */
void table_dyn_expire(ember_shard_t *table, uint64_t step);

void table_dyn_stats(const ember_shard_t *table, table_dyn_stats_t *stats);

/* Host bytes of the rows, state and key state held (not the room). */
size_t table_dyn_bytes(const ember_shard_t *table);

/* The rows of @n keys (each's own or its initial values) into @out
 * [n][dim] fp32; @found[i] 1 when key i holds a row (may be NULL). */
void table_dyn_read_keys(const ember_shard_t *table, const uint64_t *keys, size_t n, float *out,
                         uint8_t *found);

/* Set the rows of @n keys (this shard's; others ignored) from @rows
 * [n][dim]: a key without a row gets one (admitted outright; its state
 * fresh), taking the budget's room first.  Errors: ERR_OUT_OF_RANGE (no
 * room: the budget is full; nothing written), ERR_NO_MEMORY. */
ember_status_t table_dyn_write_keys(ember_shard_t *table, const uint64_t *keys, size_t n,
                                    const float *rows, char *err, size_t err_length);

/* --- checkpoints (engine/ps/table_state.c's use) --- */

/* A row held (its slot) or a candidate (slot -1), with its key, count, last
 * step seen and LFU frequency (zeros for a table that never evicts, which
 * keeps none). */
typedef struct {
    uint64_t key, count, seen;
    double freq;
    int64_t slot; /* -1: a candidate */
} table_dyn_entry_t;
size_t table_dyn_rows_held(const ember_shard_t *table);
size_t table_dyn_candidates_held(const ember_shard_t *table);
/* Every row and then every candidate into @out (room for rows +
 * candidates): the rows in eviction order (the first to go first), or by
 * key in a table that never evicts. */
void table_dyn_entries(const ember_shard_t *table, table_dyn_entry_t *out);

/* Restore: put back @n entries (a checkpoint's; keys of other shards
 * skipped), rows first in eviction order; @values [n][dim] as stored
 * (fp32 or fp16) for the rows, @state the optimizer's arrays as
 * ember_opt_state_arrays lists them ([n][per_row] each), both indexed as
 * @entries.  Meant for a fresh shard (ember_shard_restore's).  Errors:
 * ERR_OUT_OF_RANGE (more rows than the budget: nothing put back),
 * ERR_NO_MEMORY (a candidate's room, after the rows: the restore fails and
 * the job with it). */
ember_status_t table_dyn_restore(ember_shard_t *table, const table_dyn_entry_t *entries, size_t n,
                                 const void *values, const void *const *state, char *err,
                                 size_t err_length);
void table_dyn_set_counters(ember_shard_t *table, uint64_t admitted, uint64_t evicted,
                            uint64_t dropped);

#endif
