/*
 * ember: a feature schema: what one example of a click log holds and how
 * each raw value becomes what a model reads, written once and used by the
 * data reader (<ember/data.h>), the model (its tables and features) and
 * the checkpoints (a resume under another schema is refused naming the
 * feature that differs).
 *
 * An example is a label (0 or 1), N dense features (floats) and K sparse
 * features (each named), each sparse feature a bag of rows of its table:
 * its own table or one it shares with other features (equal rows and
 * pooling).  A sparse value becomes a row in one of three ways:
 *   int     a decimal integer (signed 64-bit), taken mod rows as Python's
 *           % takes it (a negative id lands in [0, rows));
 *   hex     1 to 16 hexadecimal digits, unsigned, mod rows (Criteo's rule);
 *   string  its bytes hashed by the schema's 64-bit hash, mod rows.
 * The hash is stated in the schema ("hash fnv1a64": FNV-1a 64, offset
 * basis 0xcbf29ce484222325, prime 0x100000001b3, over the field's bytes;
 * ember_schema_hash64), so any other program maps a string to the same row.
 * A multi-hot feature is a list of values inside one field, separated by
 * its list character, of at most its bag bound (which bounds the reader's
 * memory); an empty field is, as the feature says, an empty bag (pools to
 * 0), the row of id 0 (Criteo's rule for a missing value), or refused.
 *
 * A table is fixed (the default) or dynamic (kind=dynamic on its
 * features, all of them alike): a dynamic table (<ember/table.h>'s
 * ember_table_kind_t) takes any 64-bit key, so its features' ids are not
 * reduced at all: an int id is its int64 value (any sign; one outside
 * int64 refused naming file, line and column), a hex id its full 64-bit
 * value (more than 16 digits refused) as int64 bits, a string id its
 * FNV-1a 64 hash as int64 bits; an empty field of empty=zero is key 0.
 * Its rows= is then the table's nominal size (the uniform init's bound
 * sqrt(1/rows)).
 *
 * The schema file (any file; '#' starts a comment; one statement a line,
 * or ';' between statements, which is how a checkpoint keeps it on one
 * line):
 *
 *   format tsv|csv          the field separator: tab or comma (tsv)
 *   header yes|no           yes: each data file's first line names its
 *                           columns, matched to the schema's by name (any
 *                           order; an unknown or missing column refused);
 *                           no: the columns are the schema's, in order (no)
 *   hash fnv1a64            string ids' hash (the only one, and the default)
 *   label NAME              the label column (exactly one)
 *   dense NAME [log|none] [empty=zero|refuse]
 *                           a dense feature: log is log(max(x, 0) + 1) in
 *                           double, then float (Criteo's); none as given
 *                           (default log; an empty field 0 by default)
 *   sparse NAME int|hex|string rows=N [table=T] [pooling=sum|mean|max]
 *                           [list=C bag=M] [empty=bag|zero|refuse]
 *                           [kind=fixed|dynamic]
 *                           a sparse feature: its table T (default: its
 *                           own, named NAME), N rows; list=C a multi-hot
 *                           list separated by C (one printable character,
 *                           not the field separator, '#', ';', '=' or a
 *                           space) of at most M values; empty: an empty
 *                           field's meaning (default refuse); kind: its
 *                           table's (default fixed; see above)
 *   skip NAME               a column read past
 *
 * NAME is 1 to 63 bytes of [A-Za-z0-9_.-].  Columns are the label, dense,
 * sparse and skip statements in their order.  The sparse features'
 * order, in the reader's batches and the model's features, is the
 * schema's, except that the features of one table are moved next to the
 * first of them (stable), as an EmbeddingBagCollection needs them.
 *
 * Presets: Criteo's TSV layout (ember_schema_criteo: "label", I1..I13
 * log, C1..C26 hex with tables t_cat_0..t_cat_25, an empty field id 0),
 * which `criteo:` and `criteo-npy:` sources read (with any tables'
 * kinds: a dynamic one's ids are then its raw ids, TSV's hex value or the
 * npy array's integer).
 *
 * Threading: a schema is immutable once made; any thread may read it.
 */
#ifndef EMBER_SCHEMA_H
#define EMBER_SCHEMA_H

#include <ember/embedding_bag.h>
#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_SCHEMA_NAME_MAX   64   /* a name, its NUL included */
#define EMBER_SCHEMA_SPARSE_MAX 64   /* sparse features (and so tables) */
#define EMBER_SCHEMA_DENSE_MAX  1024 /* dense features */
#define EMBER_SCHEMA_COLUMNS_MAX \
    (1 + EMBER_SCHEMA_DENSE_MAX + EMBER_SCHEMA_SPARSE_MAX + 256) /* skips: 256 at most */
#define EMBER_SCHEMA_BAG_MAX  65536                              /* a list feature's bag bound */
#define EMBER_SCHEMA_TEXT_MAX 65536 /* a schema's text, file or canonical */

typedef struct ember_schema ember_schema_t;

typedef enum {
    EMBER_IDS_INT,
    EMBER_IDS_HEX,
    EMBER_IDS_STRING
} ember_ids_kind_t;
typedef enum {
    EMBER_EMPTY_REFUSE,
    EMBER_EMPTY_BAG,
    EMBER_EMPTY_ZERO
} ember_empty_rule_t;
typedef enum {
    EMBER_DENSE_LOG,
    EMBER_DENSE_NONE
} ember_dense_transform_t;

/* One sparse feature as the schema says it (strings the schema's). */
typedef struct {
    const char *name;
    const char *table;    /* its table's name */
    uint32_t table_index; /* its table among ember_schema_num_tables' */
    int64_t rows;         /* its table's */
    ember_bag_mode_t pooling;
    ember_ids_kind_t ids;
    ember_empty_rule_t empty;
    char list;        /* the list separator; '\0': one value a field */
    uint32_t bag_max; /* values a bag at most (1 without a list) */
} ember_schema_sparse_t;

/* One dense feature. */
typedef struct {
    const char *name;
    ember_dense_transform_t transform;
    int empty_refused; /* 0: an empty field is 0 */
} ember_schema_dense_t;

/**
 * A schema from @text (the file's syntax), @origin naming it in errors
 * ("movielens.schema"); every statement checked.  *@schema_p the caller's
 * (ember_schema_free).  Any thread; never blocks.  Errors: ERR_FORMAT (one
 * line in @err naming origin:line and what is wrong: an unknown statement
 * or key, a bad name or value, a name twice, no label, no feature, a
 * shared table whose rows or pooling differ, too many of a kind),
 * ERR_NO_MEMORY.
 */
ember_status_t ember_schema_parse(const char *text, const char *origin, ember_schema_t **schema_p,
                                  char *err, size_t err_length);

/** ember_schema_parse of the file @path (at most EMBER_SCHEMA_TEXT_MAX
 * bytes).  Blocks while it reads.  Errors: its, and ERR_IO naming the file. */
ember_status_t ember_schema_load(const char *path, ember_schema_t **schema_p, char *err,
                                 size_t err_length);

/** Criteo's layout with table f of @rows[f] rows (26 values, each >= 1;
 * NULL: 100000 each).  Errors: ERR_INVALID_PARAM (a table of no rows),
 * ERR_NO_MEMORY. */
ember_status_t ember_schema_criteo(const int64_t *rows, ember_schema_t **schema_p, char *err,
                                   size_t err_length);

void ember_schema_free(ember_schema_t *schema);

/** The canonical text of @schema into @text (one line, statements
 * separated by "; ", every default spelled out but kind=fixed, so a schema
 * without dynamic tables reads as it did before kinds), NUL-terminated when it
 * fits; returns its length (without the NUL), whatever @length.  Parsing
 * it gives the same schema. */
size_t ember_schema_text(const ember_schema_t *schema, char *text, size_t length);

/** NULL when a job of @now may read what @was describes (a checkpoint's);
 * else one line in @why naming the first feature or setting that differs
 * ("sparse feature 'genres': bag 6, now 8"), returned. */
const char *ember_schema_differs(const ember_schema_t *was, const ember_schema_t *now, char *why,
                                 size_t length);

uint32_t ember_schema_num_dense(const ember_schema_t *schema);
uint32_t ember_schema_num_sparse(const ember_schema_t *schema);
uint32_t ember_schema_num_tables(const ember_schema_t *schema);
/** Sparse feature @f (< num_sparse, the batches' order) into @out. */
void ember_schema_sparse(const ember_schema_t *schema, uint32_t f, ember_schema_sparse_t *out);
/** Whether sparse feature @f's table is dynamic (kind=dynamic: its ids
 * raw, not taken mod rows). */
int ember_schema_dynamic(const ember_schema_t *schema, uint32_t f);
/** A copy of @schema with every table dynamic (ember_schema_free), as
 * `ember-train --table-kind dynamic` makes it.  Errors: ERR_NO_MEMORY. */
ember_status_t ember_schema_all_dynamic(const ember_schema_t *schema, ember_schema_t **schema_p);
/** Dense feature @i (< num_dense) into @out. */
void ember_schema_dense(const ember_schema_t *schema, uint32_t i, ember_schema_dense_t *out);
/** The label column's name. */
const char *ember_schema_label(const ember_schema_t *schema);
/** Whether it is the Criteo preset's layout (what criteo: sources read). */
int ember_schema_is_criteo(const ember_schema_t *schema);

/** The schema's string hash (FNV-1a 64) of @length bytes at @bytes. */
uint64_t ember_schema_hash64(const void *bytes, size_t length);

#ifdef __cplusplus
}
#endif
#endif
