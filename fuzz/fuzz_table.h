/*
 * fuzz/fuzz_table: the small PS shard fuzz_lookup and fuzz_grad feed.
 *
 * Its shape comes from the input's first three bytes:
 *   byte 0: bit 0 async, 1 fp16 rows, 2 mean reduction, 3-4 the optimizer
 *           (sgd, adagrad, row-wise adagrad, adam), 5-6 shards - 1, 7 rows
 *           zeroed (init LOAD: every maximum a tie) instead of N(0,1)
 *   byte 1: bits 0-3 dim - 1, 4-5 trainers - 1, 6-7 this shard (mod shards)
 *   byte 2: rows - 1 of the whole table
 * so every kind of table ember_shard_create makes is reached, small enough
 * to be copied whole before and after each message.
 */
#ifndef EMBER_FUZZ_TABLE_H
#define EMBER_FUZZ_TABLE_H

#include "engine/ps/table.h"
#include "fuzz/fuzz_input.h"

#include <math.h>

#define FUZZ_TABLE_LR 0.5f

typedef struct {
    ember_msg_table_create_t spec;
    ember_shard_t *table;
    int64_t local_rows;
    uint32_t dim;
    size_t values; /* local_rows * dim */
    float *before; /* the rows as they were before the message */
    float *after;
} fuzz_table_t;

/* Every row, widened to fp32 (reads of fp16 rows are exact). */
static inline void fuzz_table_read(const fuzz_table_t *ft, float *out)
{
    char err[256];
    FUZZ_CHECK(ember_shard_read(ft->table, 0, ft->local_rows, out, err, sizeof(err)) == EMBER_OK,
               "the whole shard cannot be read: %s", err);
}

static inline void fuzz_table_snapshot(fuzz_table_t *ft)
{
    fuzz_table_read(ft, ft->before);
}

/* The message left every row as it was. */
static inline void fuzz_table_check_unchanged(fuzz_table_t *ft, const char *what)
{
    fuzz_table_read(ft, ft->after);
    FUZZ_CHECK(memcmp(ft->before, ft->after, ft->values * sizeof(float)) == 0,
               "%s changed the table", what);
}

static inline int fuzz_table_open(fuzz_table_t *ft, fuzz_input_t *in)
{
    uint8_t shape = fuzz_u8(in), sizes = fuzz_u8(in), rows = fuzz_u8(in);
    char err[256];

    memset(ft, 0, sizeof(*ft));
    ember_msg_table_create_t *spec = &ft->spec;
    spec->num_shards = 1u + ((shape >> 5) & 3u);
    spec->shard = (sizes >> 6) % spec->num_shards;
    spec->trainers = 1u + ((sizes >> 4) & 3u);
    spec->rows = 1 + (int64_t)rows;
    spec->dim = 1u + (sizes & 15u);
    spec->consistency = (shape & 1) ? EMBER_ASYNC : EMBER_SYNC;
    spec->sparse_reduce = (shape & 4) ? EMBER_REDUCE_MEAN : EMBER_REDUCE_SUM;
    spec->init = (shape & 128) ? EMBER_INIT_LOAD : EMBER_INIT_NORMAL;
    spec->dtype = (shape & 2) ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
    spec->seed = 7;
    ember_opt_config_default((ember_opt_kind_t)((shape >> 3) & 3), FUZZ_TABLE_LR, &spec->optimizer);
    snprintf(spec->name, sizeof(spec->name), "fuzz");
    FUZZ_CHECK(ember_shard_create(spec, NULL, &ft->table, err, sizeof(err)) == EMBER_OK,
               "a valid spec refused: %s", err);
    ft->local_rows = ember_shard_local_rows(ft->table);
    ft->dim = spec->dim;
    ft->values = (size_t)ft->local_rows * ft->dim;
    ft->before = malloc(ft->values * sizeof(float) + 1);
    ft->after = malloc(ft->values * sizeof(float) + 1);
    FUZZ_CHECK(ft->before && ft->after, "out of memory");
    return 1;
}

static inline void fuzz_table_close(fuzz_table_t *ft)
{
    ember_shard_destroy(ft->table);
    free(ft->before);
    free(ft->after);
}

static inline int fuzz_finite(const float *v, size_t n, float bound)
{
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(v[i]) <= bound))
            return 0;
    }
    return 1;
}

#endif
