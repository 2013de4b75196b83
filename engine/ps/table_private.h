/*
 * engine/ps/table_private: a shard's layout, shared by the files of the
 * table module (table.c: lookups and gradients; table_state.c: its
 * snapshots and restores).  Nothing outside engine/ps/table*.c includes it.
 */
#ifndef EMBER_ENGINE_TABLE_PRIVATE_H
#define EMBER_ENGINE_TABLE_PRIVATE_H

#include "common/reserve.h"
#include "common/workers.h"
#include "engine/device/scratch.h"
#include "engine/ops/optimizer.h"
#include "engine/ps/table.h"

#include <ember/device.h>

#include <stddef.h>
#include <stdint.h>

/* What the forward of one trainer's lookup left for its backward: the
 * lookup as it came (its offsets, slots and weights, checked), its distinct
 * rows made local; an index's row is unique[inverse[i]], never expanded. */
typedef struct {
    int valid;
    uint64_t step;
    size_t n, bags;
    int max_mode, weighted;
    ember_buffer_t offsets; /* uint32 [bags]: each bag's first index */
    ember_buffer_t weights; /* float [n] */
    ember_buffer_t argmax;  /* int64 [bags * dim] */
    ember_buffer_t unique;  /* int64 local ids of the distinct rows, increasing */
    ember_buffer_t inverse; /* uint32 [n]: each index's slot in unique */
    ember_buffer_t first;   /* max: uint32 [unique], the backward's scratch */
    size_t nunique;
    /* A dynamic table's (engine/ps/table_dyn.c): unique holds each
     * distinct key's row at lookup time (its slot, or a scratch row with
     * its initial values), sorted; the keys as the trainer sent them
     * (sorted keys), each key's occurrences, and each unique's key. */
    ember_buffer_t keys;     /* uint64 [unique]: the lookup's keys, in its order */
    ember_buffer_t hits;     /* uint32 [unique]: each key's indices */
    ember_buffer_t key_of;   /* uint64 [unique]: unique[j]'s key */
    ember_buffer_t wire_ids; /* uint32 [unique]: each key's lookup-time row, in its order */
} context_t;

/* A trainer's sparse gradient for a step, waiting for the others (sync). */
typedef struct {
    int valid;
    uint64_t step;
    size_t nrows;
    ember_buffer_t rows; /* int64 local ids, sorted unique */
    ember_buffer_t grad; /* float [nrows * dim] */
    /* A dynamic table's: each row's key, and every key the lookup saw
     * with its occurrences (what the step boundary counts). */
    ember_buffer_t keys;      /* uint64 [nrows] */
    ember_buffer_t seen_keys; /* uint64 [nseen] */
    ember_buffer_t seen_hits; /* uint32 [nseen] */
    ember_buffer_t seen_ids;  /* uint32 [nseen]: each key's row at lookup time */
    size_t nseen;
} pending_t;

struct table_dyn;
struct table_cow;

struct ember_shard {
    ember_msg_table_create_t spec;
    int64_t local_rows;
    void *data;       /* [local_rows, dim] of spec.dtype (fp32 or fp16) */
    size_t row_bytes; /* dim x the element size */
    ember_opt_t *optimizer;
    /* Each trainer's open lookups, a ring of `ring` (staleness + 1) by step:
     * a sync table serves step s once s - staleness steps are applied, so
     * a trainer has at most staleness + 1 of them open at once. */
    uint32_t ring;
    context_t *contexts;                      /* [trainers][ring] */
    context_t eval;                           /* evaluation lookups' scratch: never valid */
    pending_t *pending;                       /* [trainers][ring]: sync tables only wait on these */
    pending_t applying;                       /* async: the one gradient being applied now (a
                          * buffer per trainer would hold trainers x batch) */
    uint64_t next_step;                       /* sync: steps applied so far */
    ember_buffer_t acc_rows, acc_grad, order; /* sync reduction (by range), unaligned grad */
    ember_buffer_t written;                   /* a gradient's rows: written yet (uint8 per row) */
    ember_buffer_t reduce_list;               /* sync: the step's pending gradients (pointers) */
    /* The PS's worker pool (NULL: one thread) and each task's scratch
     * (engine/ps/table_work.c: the compute split over it). */
    ember_workers_t *workers;
    struct table_task *tasks;
    unsigned ntasks, reduced_tasks; /* reduced: the ranges of the last reduction */
    size_t grain;                   /* EMBER_PS_GRAIN: a task's least work */
    /* A shard on a device (NULL: host memory): data is device memory;
     * lookups pool there; an update gathers the touched rows, steps the
     * host optimizer on them (values) and scatters them back. */
    ember_device_t *device;
    const ember_device_ops_t *dev;
    ember_scratch_t d_batch, d_out, d_argmax, d_rows, d_values; /* device */
    ember_scratch_t h_batch, h_out, h_values;                   /* pinned host */
    /* A dynamic table's keys, slots and counters (engine/ps/table_dyn.c);
     * NULL: a fixed table.  Its data then maps local_rows slots and the
     * scratch rows after them. */
    struct table_dyn *dyn;
    /* Cached lookups (EMBER_LOOKUP_ROWS, engine/wire/protocol.h): each
     * row's (a dynamic table's slot's) last change on the row clock,
     * [changed_rows], zero pages mapped as touched (a dynamic table maps
     * room for every slot it may ever have); NULL until the first cached
     * lookup comes.  A row's change is the later of its entry and
     * changed_floor (every row's: the clock when the record was made, or
     * just after a write to all).  The row clock: next_step (sync),
     * async_applied (async). */
    uint64_t *changed;
    int64_t changed_rows;
    ember_buffer_t rows_pool; /* a cached max lookup's pools: only its argmax is kept */
    uint64_t changed_floor;
    uint64_t async_applied;
    /* A checkpoint's copy-on-write guard (engine/ps/table_cow.c): NULL
     * until a host shard's first snapshot kept that way. */
    struct table_cow *cow;
};

/* The row clock (engine/wire/protocol.h's ember_msg_rows_reply_t). */
static inline uint64_t table_row_clock(const ember_shard_t *table)
{
    return table->spec.consistency == EMBER_SYNC ? table->next_step : table->async_applied;
}

/* Rows (local ids, a dynamic table's slots) @rows [n] change in the
 * update being applied (at clock + 1); rows outside the record ignored.
 * Nothing before a cached lookup made the record. */
static inline void table_rows_changed(ember_shard_t *table, const int64_t *rows, size_t n)
{
    if (!table->changed)
        return;
    const uint64_t at = table_row_clock(table) + 1;
    for (size_t i = 0; i < n; i++) {
        if (rows[i] >= 0 && rows[i] < table->changed_rows)
            table->changed[rows[i]] = at;
    }
}

/* Every row changed by a write outside training (a load, a write by key,
 * a restore): no copy made before stands. */
static inline void table_rows_changed_all(ember_shard_t *table)
{
    table->changed_floor = table_row_clock(table) + 1;
}

/* Row @r's last change (table->changed made). */
static inline uint64_t table_row_changed(const ember_shard_t *table, int64_t r)
{
    const uint64_t at = table->changed[r];
    return at > table->changed_floor ? at : table->changed_floor;
}

/* Global row @row's initial values [dim] (N(0,1) or uniform), from (seed,
 * global element): the same whatever the number of shards; a dynamic
 * table's key @row gets the same values row @row of a fixed one would. */
void table_init_values(const ember_msg_table_create_t *spec, uint64_t row, float *values);

/* Trainer @trainer's context of @step: its slot of the trainer's ring. */
static inline context_t *table_context(const ember_shard_t *table, uint32_t trainer, uint64_t step)
{
    return &table->contexts[(size_t)trainer * table->ring + step % table->ring];
}

/* Trainer @trainer's pending gradient of @step (sync), as table_context. */
static inline pending_t *table_pending(const ember_shard_t *table, uint32_t trainer, uint64_t step)
{
    return &table->pending[(size_t)trainer * table->ring + step % table->ring];
}

/* Local row @local as stored. */
static inline void *table_row(const ember_shard_t *table, int64_t local)
{
    return (char *)table->data + (size_t)local * table->row_bytes;
}

/* Rows stored as fp16 (else fp32). */
static inline int table_half(const ember_shard_t *table)
{
    return table->spec.dtype == EMBER_DTYPE_F16;
}

#endif
