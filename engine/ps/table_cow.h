/*
 * engine/ps/table_cow: a host shard's rows and optimizer state kept for a
 * checkpoint by copy-on-write, so the checkpoint's pause is no copy.
 *
 * At a step boundary table_cow_begin marks every chunk of every array
 * (the rows, each optimizer state array; TABLE_COW_CHUNK_BYTES of the
 * widest array's rows a chunk) as owed to the snapshot.  The writer then
 * reads the arrays straight from the live table (table_cow_read).  Before
 * anything changes a row (an optimizer step on any of the PS's threads, a
 * row write, a restore) it calls table_cow_rows / table_cow_range, which
 * copies each owed chunk it touches aside first, into a shadow of the
 * array at the same offset, and marks it copied; the writer takes a copied
 * chunk from the shadow.  So the written bytes are the state at the
 * boundary, whatever changed during the write.
 *
 * A chunk's state is one atomic byte per array: OWED (nobody changed it
 * yet), COPYING (an updater is copying it aside), ASIDE (the shadow holds
 * it); and per array the writer's progress, the byte below which every
 * chunk is its already.  An updater claims an owed chunk the writer has
 * not reached with a compare-and-swap OWED -> COPYING and never waits for
 * the writer (an updater is the training's critical path).  The writer copies a run of
 * chunks from the live table first, then reads their states: one no
 * longer OWED may have changed after an updater copied it aside, so its
 * bytes are taken again from the shadow (a seqlock's reader: the writer
 * writes no state, only its progress).
 *
 * The shadows are anonymous MAP_NORESERVE mappings of the arrays' size:
 * only the chunks copied aside use memory, bounded by what changed during
 * the write, and given back lazily (MADV_FREE) after it.
 *
 * Device shards and dynamic tables are not kept this way (their snapshot
 * is a copy, engine/ps/table_state.c).  Private to engine/ps/table*.c.
 */
#ifndef EMBER_ENGINE_TABLE_COW_H
#define EMBER_ENGINE_TABLE_COW_H

#include "engine/ps/table_private.h"

#include <ember/status.h>
#include <stddef.h>
#include <stdint.h>

/* Small chunks copy little more than the rows changed (a step's rows are
 * spread at random over the table); a state byte per chunk is what they
 * cost.  256 bytes: a row of 64 floats a chunk. */
#define TABLE_COW_CHUNK_BYTES 256u

/* One array the snapshot owes: @rows rows of @row_bytes at @data (live). */
typedef struct {
    void *data;
    size_t row_bytes;
} table_cow_array_t;

/* What a write cost: chunks copied aside by updaters, and their bytes. */
typedef struct {
    uint64_t chunks, bytes;
} table_cow_stats_t;

/* @table's @narrays arrays (@arrays borrowed; their rows the table's
 * local_rows) owed to a snapshot from now on: every chunk of each.  The
 * caller holds the table still (a step boundary) and no write of an
 * earlier snapshot is in progress.  The guard and its shadows are made at
 * the first call (and again when the arrays changed: a new optimizer).
 * Errors: ERR_NO_MEMORY (in @err). */
ember_status_t table_cow_begin(ember_shard_t *table, const table_cow_array_t *arrays,
                               size_t narrays, char *err, size_t err_length);

/* Whether a write is still owed chunks of @table (any thread). */
int table_cow_owing(const ember_shard_t *table);

/* Before rows @rows[0..n) (local, increasing) of every array change: the
 * owed chunks among them copied aside.  Any of the PS's threads, several
 * at once (each its own rows); never waits for the writer. */
void table_cow_rows(ember_shard_t *table, const int64_t *rows, size_t n);

/* The same for rows [@first, @first + @count) (clamped to the table). */
void table_cow_range(ember_shard_t *table, int64_t first, int64_t count);

/* The writer: bytes [@offset, @offset + @length) of array @array as they
 * were at table_cow_begin, into @buf.  Errors: ERR_INVALID_PARAM (no such
 * array or bytes; nothing owed). */
ember_status_t table_cow_read(ember_shard_t *table, size_t array, uint64_t offset, void *buf,
                              size_t length, char *err, size_t err_length);

/* The writer, after its write (whole, failed or given up): nothing owed
 * any more, the shadows' memory given back; what the updaters copied
 * aside into @stats (may be NULL). */
void table_cow_end(ember_shard_t *table, table_cow_stats_t *stats);

/* At the table's destroy (no write in progress). */
void table_cow_free(ember_shard_t *table);

#endif
