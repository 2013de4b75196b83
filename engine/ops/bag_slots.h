/*
 * engine/ops/bag_slots: EmbeddingBag's forward over a deduplicated batch,
 * as a parameter server holds a lookup: the distinct rows once, each
 * entry's slot among them, the bags cut by uint32 offsets.  Each entry's
 * row is read where it lies (rows[slots[i]]), nothing is expanded per
 * entry, and every sum is the one ember_bag_forward makes over the
 * expanded batch (the same rows in the same order): the same bits.
 */
#ifndef EMBER_ENGINE_OPS_BAG_SLOTS_H
#define EMBER_ENGINE_OPS_BAG_SLOTS_H

#include <ember/embedding_bag.h>

#include <stddef.h>
#include <stdint.h>

/* A deduplicated batch.  All arrays are borrowed. */
typedef struct {
    const int64_t *rows;   /* the distinct row ids, checked against the table */
    const uint32_t *slots; /* [n] entry i's row is rows[slots[i]] */
    size_t n;
    const uint32_t *offsets; /* [bags] each bag's first entry; the last runs to n */
    size_t bags;
    const float *weights; /* [n] per-sample weights (sum), or NULL */
} ember_bag_slots_t;

/**
 * Pool @batch (checked: offsets rising within n, slots among the rows, rows
 * in the table) from @table into @out_p [bags, dim] with @mode (no padding
 * row: a PS's lookups carry none), and in max mode each element's row into
 * @argmax_p [bags, dim].  The results are ember_bag_forward's over the
 * expanded batch, bit for bit.  Errors: ERR_INVALID_PARAM (missing
 * buffers, a dtype other than F32 and F16).
 */
ember_status_t ember_bag_forward_slots(const ember_bag_table_t *table,
                                       const ember_bag_slots_t *batch, ember_bag_mode_t mode,
                                       float *out_p, int64_t *argmax_p);

#endif
