/*
 * engine/train/sparse: one embedding table's part of a trainer's step, over
 * the parameter servers that hold its shards.
 *
 * A step splits the batch by shard (row % shards) and deduplicates each
 * shard's rows (engine/wire/codec packs one LOOKUP per shard), sends the
 * lookups together, combines the replies into the dense model's input
 * (engine/train/parts), and after the backward pushes each shard the
 * gradient of its part: one-way, but the last step's as a call whose answer
 * says everything went in.  A PS refuses a bad push at the next lookup.
 *
 * One ember_sparse_t per table: a trainer of several tables runs each
 * phase for each of them.
 */
#ifndef EMBER_ENGINE_TRAIN_SPARSE_H
#define EMBER_ENGINE_TRAIN_SPARSE_H

#include "engine/train/data.h"
#include "engine/train/trainer_dev.h"

#include <ember/embedding_bag.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t table_id;
    const char *table_name;
    uint32_t num_ps; /* its shards: on ranks first_ps_rank .. + num_ps - 1 */
    int first_ps_rank;
    uint32_t dim;
    ember_bag_mode_t mode;
    int64_t padding_idx; /* entries of this row are not sent (-1: none) */
    int half_replies;    /* ask for fp16 replies */
    int trainer;         /* this trainer's index, as the PS knows it */
} ember_sparse_config_t;

typedef struct ember_sparse ember_sparse_t;

/**
 * A table's lookups for trainer @config->trainer over @tp, its parts on @td
 * (@rdma: the device path, engine/train/parts.h).  The calls wait for
 * their futures but give up when *@aborted becomes set (the master's
 * ABORT).  Borrowed: @config's name, @td, @aborted.
 */
ember_status_t ember_sparse_create(const ember_sparse_config_t *config, ember_tp_t *tp,
                                   const ember_trainer_dev_t *td, int rdma, const int *aborted,
                                   ember_sparse_t **sparse_p);

/** Free it, after at most ~2 s for a one-way push still leaving. */
void ember_sparse_destroy(ember_sparse_t *sparse);

/* Each phase below returns its status with one line in @err saying what
 * failed (the caller names the trainer and the step). */

/** Split @batch (checked) by shard and build each shard's LOOKUP. */
ember_status_t ember_sparse_split(ember_sparse_t *sparse, const ember_batch_t *batch, uint64_t step,
                                  char *err, size_t err_length);

/** The previous step's pushes have left and were taken (their buffers are
 * reused next); a push lost with its PS fails here. */
ember_status_t ember_sparse_pushes_wait(ember_sparse_t *sparse, uint64_t step, char *err,
                                        size_t err_length);

/** Send every shard its lookup and wait for all the replies. */
ember_status_t ember_sparse_lookup(ember_sparse_t *sparse, char *err, size_t err_length);

/** The replies combined into the dense model's input @x ([bags, dim] in
 * the device's memory). */
ember_status_t ember_sparse_combine(ember_sparse_t *sparse, float *x);

/**
 * Each shard's gradient from @grad_x (the input's, device memory), pushed;
 * @last: the job's last step (its pushes are calls, awaited by
 * ember_sparse_pushes_wait).
 */
ember_status_t ember_sparse_push(ember_sparse_t *sparse, const float *grad_x, uint64_t step,
                                 int last, char *err, size_t err_length);

#endif
