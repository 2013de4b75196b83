/*
 * engine/train/split: one table's bags of a step split by shard, each
 * shard's LOOKUP built where it is sent from.
 *
 * One pass over the table's segments reads each id once, checks it, and
 * writes what the wire needs straight into its shard's LOOKUP
 * (engine/wire/protocol.h): each bag's offset, and each index's entry (its
 * weight only when the segments have weights, its place in its bag only in
 * max mode).  The ids are then sorted once, as (row, shard and entry)
 * pairs (common/radix.h: the deduplication's scratch), so each shard's
 * distinct rows go in last, sorted, and each entry gets its slot among
 * them.  Nothing of a batch is staged per entry and copied again.
 *
 * Pure (no transport, no logging): engine/train/sparse sends what it
 * builds, and fuzz/fuzz_split.c checks it.  Single-threaded.
 */
#ifndef EMBER_ENGINE_TRAIN_SPLIT_H
#define EMBER_ENGINE_TRAIN_SPLIT_H

#include "common/radix.h"
#include "engine/train/sparse.h"
#include "engine/wire/protocol.h"

#include <stddef.h>
#include <stdint.h>

/* A shard's LOOKUP of the step. */
typedef struct {
    uint8_t *request;        /* the message: ember_wire_lookup_size(&head) bytes */
    size_t capacity;         /* its room, bytes (grow-only) */
    size_t room;             /* entries that fit, with their rows, this step */
    size_t entries;          /* this step's indices here */
    uint32_t *offsets;       /* its bags' offsets, in request (this step's) */
    uint32_t *base;          /* its entries: request + ember_wire_lookup_entries_at(bags) */
    ember_msg_lookup_t head; /* as sealed in front of request */
} ember_split_shard_t;

typedef struct {
    ember_sparse_config_t config; /* its table_name borrowed */
    ember_split_shard_t *shards;  /* [config.num_ps] */
    size_t bags;                  /* this step's */
    uint32_t flags;               /* this step's lookup flags */
    /* What the trainer's combine needs (engine/ops/bag_parts.h), this
     * step's, only in the mode that reads it: max mode's entries of each bag
     * on each shard, [num_ps][bags]; mean's of each bag, [bags]. */
    uint32_t *counts, *bag_counts;
    size_t counts_capacity, bag_counts_capacity;
    /* The sort: (row, shard << 32 | its entry) per index sent, and the
     * radix sort's second buffer. */
    ember_radix_pair_t *pairs, *other;
    size_t pairs_capacity, other_capacity;
} ember_split_t;

/** A split of the table @config describes (copied; its name borrowed).
 * Errors: ERR_NO_MEMORY. */
ember_status_t ember_split_init(ember_split_t *split, const ember_sparse_config_t *config);

/** Free its buffers (a zeroed one too). */
void ember_split_free(ember_split_t *split);

/**
 * Split @input (the table's segments, borrowed for the call) as step @step
 * of the config's trainer, @eval an evaluation's: each shard's LOOKUP sealed
 * in shards[p].request, counts and bag_counts filled (max, mean).  Checks
 * as ember_sparse_split says, one line in @err naming the feature.  Errors:
 * ERR_OUT_OF_RANGE (an id), ERR_INVALID_PARAM (the rest), ERR_NO_MEMORY;
 * then no LOOKUP is whole.
 */
ember_status_t ember_split_table(ember_split_t *split, const ember_sparse_input_t *input,
                                 uint64_t step, int eval, char *err, size_t err_length);

#endif
