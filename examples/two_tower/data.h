/*
 * two_tower: the data file (gen_data.py writes it) and a step's keyed
 * jagged batch of it.
 *
 * The file is safetensors: int64 arrays of who saw what, and the examples
 * (user, item, label) with the sampled negatives already drawn, shuffled,
 * so that this program and reference.py see exactly the same examples:
 *
 *   history_offsets [users + 1], history [..]       items each user saw recently
 *   category_offsets [items + 1], item_categories [..]   each item's categories
 *   example_user, example_item [examples] (I64), example_label [examples] (F32, 0 or 1)
 *   metadata: users, items, categories (the tables' rows)
 */
#ifndef TWO_TOWER_DATA_H
#define TWO_TOWER_DATA_H

#include <ember/lookup.h>

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t users, items, categories, examples;
    int64_t *history_offsets, *history;
    int64_t *category_offsets, *item_categories;
    int64_t *example_user, *example_item;
    float *example_label;
} data_t;

/**
 * Read and check the whole file at @path into @data: every id within its
 * table, every offset array starting at 0 and non-decreasing, labels 0 or 1.
 * Returns 0, or -1 with the cause (naming the file and the tensor) in @err.
 */
int data_load(const char *path, data_t *data, char *err, size_t err_length);
void data_free(data_t *data);

/* The features of the batch, in the ebc's order: the user tower's two, then
 * the item tower's two (the item table's two features next to each other). */
enum {
    FEATURE_USER_ID,    /* the user's id (one id a bag)               -> table "user" */
    FEATURE_HISTORY,    /* the items the user saw recently (multi-hot) -> table "item" */
    FEATURE_ITEM_ID,    /* the candidate item's id                    -> table "item" */
    FEATURE_CATEGORIES, /* the candidate item's categories (multi-hot) -> table "category" */
    NUM_FEATURES
};

/* A step's batch: B examples, as a KJT (lengths) over the arrays below. */
typedef struct {
    size_t capacity, bags; /* values and bags (of each feature) the arrays hold */
    int64_t *values;
    int32_t *lengths; /* [NUM_FEATURES * B] */
    float *labels;    /* [B] */
    ember_kjt_t kjt;
} batch_t;

/**
 * The batch of examples @first, @first + @stride, ... (@batch_size of them)
 * into @batch, growing its arrays as needed.  Returns 0, or -1 when out of
 * memory.
 */
int batch_fill(batch_t *batch, const data_t *data, int64_t first, int64_t stride,
               size_t batch_size);
void batch_free(batch_t *batch);

#endif
