/*
 * engine/io/schema: a feature schema's layout (<ember/schema.h> its
 * interface), for the readers of engine/io that walk its columns.
 */
#ifndef EMBER_ENGINE_SCHEMA_PRIVATE_H
#define EMBER_ENGINE_SCHEMA_PRIVATE_H

#include <ember/schema.h>

typedef enum {
    SCHEMA_LABEL,
    SCHEMA_DENSE,
    SCHEMA_SPARSE,
    SCHEMA_SKIP
} schema_kind_t;

typedef struct {
    char name[EMBER_SCHEMA_NAME_MAX];
    schema_kind_t kind;
    uint32_t index; /* dense: its index; sparse: its index in the batches' order */
} schema_column_t;

typedef struct {
    uint32_t column;
    ember_dense_transform_t transform;
    int empty_refused;
} schema_dense_t;

typedef struct {
    uint32_t column;
    char table[EMBER_SCHEMA_NAME_MAX];
    uint32_t table_index;
    int64_t rows;
    ember_bag_mode_t pooling;
    ember_ids_kind_t ids;
    ember_empty_rule_t empty;
    char list; /* '\0': one value a field */
    uint32_t bag_max;
    int dynamic;   /* kind=dynamic: its table dynamic, its ids raw */
    uint32_t line; /* of its statement, while parsing */
} schema_sparse_t;

/* One allocation: the struct, then its arrays, each exactly as long. */
struct ember_schema {
    int csv, header;
    uint32_t num_columns, num_dense, num_sparse, num_tables;
    uint32_t label; /* its column */
    schema_column_t *columns;
    schema_dense_t *dense;
    schema_sparse_t *sparse; /* the batches' order */
};

/** A copy of @schema (ember_schema_free), or NULL when out of memory. */
ember_schema_t *schema_copy(const ember_schema_t *schema);

/** NULL when @schema is Criteo's preset (any rows), else @why: the first
 * difference. */
const char *schema_criteo_differs(const ember_schema_t *schema, char *why, size_t length);

/** The field separator: '\t' or ','. */
char schema_separator(const ember_schema_t *schema);

#endif
