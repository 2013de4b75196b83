/* engine/io/schema: the feature schema (see <ember/schema.h>): its
 * statements parsed and checked, its canonical text, its comparison. */
#include "engine/io/schema_private.h"

#include "engine/io/lines.h"

#include <ember/log.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_MAX   256 /* skip columns */
#define WORDS_MAX  12  /* words of a statement: the longest has 10 */
#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME  0x100000001b3ULL

static ember_schema_t *schema_alloc(uint32_t columns, uint32_t dense, uint32_t sparse)
{
    size_t bytes = sizeof(ember_schema_t) + columns * sizeof(schema_column_t) +
                   dense * sizeof(schema_dense_t) + sparse * sizeof(schema_sparse_t);
    ember_schema_t *s = calloc(1, bytes);
    if (!s)
        return NULL;
    s->columns = (schema_column_t *)(s + 1);
    s->sparse = (schema_sparse_t *)(s->columns + columns); /* int64 member: 8-aligned */
    s->dense = (schema_dense_t *)(s->sparse + sparse);
    s->num_columns = columns;
    s->num_dense = dense;
    s->num_sparse = sparse;
    return s;
}

ember_schema_t *schema_copy(const ember_schema_t *from)
{
    ember_schema_t *s = schema_alloc(from->num_columns, from->num_dense, from->num_sparse);
    if (!s)
        return NULL;
    s->csv = from->csv;
    s->header = from->header;
    s->num_tables = from->num_tables;
    s->label = from->label;
    memcpy(s->columns, from->columns, s->num_columns * sizeof(*s->columns));
    memcpy(s->dense, from->dense, s->num_dense * sizeof(*s->dense));
    memcpy(s->sparse, from->sparse, s->num_sparse * sizeof(*s->sparse));
    return s;
}

void ember_schema_free(ember_schema_t *schema)
{
    free(schema);
}

char schema_separator(const ember_schema_t *schema)
{
    return schema->csv ? ',' : '\t';
}

uint64_t ember_schema_hash64(const void *bytes, size_t length)
{
    const uint8_t *p = bytes;
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < length; i++)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

/* ---------------------------------------------------------------- parsing */

typedef struct {
    const char *text;
    size_t length;
} word_t;

/* The parse's state: a schema at the largest counts, the position. */
typedef struct {
    ember_schema_t *s;
    const char *origin;
    uint32_t line;
    int have_format, have_header, have_hash, have_label;
    uint32_t skips;
    char *err;
    size_t err_length;
} parse_t;

static ember_status_t refuse(const parse_t *p, uint32_t line, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static ember_status_t refuse(const parse_t *p, uint32_t line, const char *fmt, ...)
{
    char why[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(why, sizeof(why), fmt, args);
    va_end(args);
    return ember_status_text(p->err, p->err_length, EMBER_ERR_FORMAT, "%s:%" PRIu32 ": %s",
                             p->origin, line, why);
}

static int word_is(word_t w, const char *text)
{
    return w.length == strlen(text) && memcmp(w.text, text, w.length) == 0;
}

/* A "key=value" word's value (*length_p bytes) when its key is @key, else
 * NULL. */
static const char *value_of(word_t w, const char *key, size_t *length_p)
{
    size_t k = strlen(key);
    if (w.length <= k || memcmp(w.text, key, k) != 0 || w.text[k] != '=')
        return NULL;
    *length_p = w.length - k - 1;
    return w.text + k + 1;
}

static int name_ok(const char *text, size_t length)
{
    if (length == 0 || length >= EMBER_SCHEMA_NAME_MAX)
        return 0;
    for (size_t i = 0; i < length; i++) {
        char c = text[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static ember_status_t take_name(const parse_t *p, const char *what, const char *text, size_t length,
                                char *name)
{
    if (!name_ok(text, length))
        return refuse(p, p->line, "%s name '%.*s' is not 1 to 63 of [A-Za-z0-9_.-]", what,
                      (int)(length > 80 ? 80 : length), text);
    memcpy(name, text, length);
    name[length] = '\0';
    return EMBER_OK;
}

/* A new column named @w (not yet any column's name). */
static ember_status_t add_column(parse_t *p, schema_kind_t kind, word_t w, uint32_t index)
{
    ember_schema_t *s = p->s;
    if (s->num_columns == EMBER_SCHEMA_COLUMNS_MAX)
        return refuse(p, p->line, "more than %d columns", EMBER_SCHEMA_COLUMNS_MAX);
    schema_column_t *c = &s->columns[s->num_columns];
    EMBER_CHECK(take_name(p, "a column's", w.text, w.length, c->name));
    for (uint32_t i = 0; i < s->num_columns; i++)
        if (strcmp(s->columns[i].name, c->name) == 0)
            return refuse(p, p->line, "column '%s' named twice", c->name);
    c->kind = kind;
    c->index = index;
    s->num_columns++;
    return EMBER_OK;
}

static ember_status_t words_exactly(const parse_t *p, const word_t *w, size_t n, size_t want,
                                    const char *usage)
{
    if (n != want)
        return refuse(p, p->line, "'%.*s' takes %s", (int)w[0].length, w[0].text, usage);
    return EMBER_OK;
}

static ember_status_t parse_setting(parse_t *p, const word_t *w, size_t n, int *seen,
                                    const char *yes, const char *no, int *value)
{
    char usage[64];
    snprintf(usage, sizeof(usage), "%s or %s", yes, no);
    EMBER_CHECK(words_exactly(p, w, n, 2, usage));
    if (*seen)
        return refuse(p, p->line, "'%.*s' given twice", (int)w[0].length, w[0].text);
    if (!word_is(w[1], yes) && !word_is(w[1], no))
        return refuse(p, p->line, "%.*s '%.*s', not %s", (int)w[0].length, w[0].text,
                      (int)(w[1].length > 40 ? 40 : w[1].length), w[1].text, usage);
    *seen = 1;
    *value = word_is(w[1], yes);
    return EMBER_OK;
}

static ember_status_t parse_dense(parse_t *p, const word_t *w, size_t n)
{
    ember_schema_t *s = p->s;
    size_t length;
    int have_transform = 0, have_empty = 0;
    if (n < 2)
        return refuse(p, p->line, "'dense' takes NAME [log|none] [empty=zero|refuse]");
    if (s->num_dense == EMBER_SCHEMA_DENSE_MAX)
        return refuse(p, p->line, "more than %d dense features", EMBER_SCHEMA_DENSE_MAX);
    schema_dense_t *d = &s->dense[s->num_dense];
    *d = (schema_dense_t){.column = s->num_columns, .transform = EMBER_DENSE_LOG};
    for (size_t i = 2; i < n; i++) {
        const char *v = value_of(w[i], "empty", &length);
        int *seen = v ? &have_empty : &have_transform;
        if (*seen)
            return refuse(p, p->line, "dense feature '%.*s': %s given twice", (int)w[1].length,
                          w[1].text, v ? "empty=" : "its transform");
        *seen = 1;
        if (v && (word_is(w[i], "empty=zero") || word_is(w[i], "empty=refuse")))
            d->empty_refused = word_is(w[i], "empty=refuse");
        else if (!v && (word_is(w[i], "log") || word_is(w[i], "none")))
            d->transform = word_is(w[i], "log") ? EMBER_DENSE_LOG : EMBER_DENSE_NONE;
        else
            return refuse(p, p->line,
                          "dense feature '%.*s': '%.*s' is not log, none, "
                          "empty=zero or empty=refuse",
                          (int)w[1].length, w[1].text, (int)(w[i].length > 40 ? 40 : w[i].length),
                          w[i].text);
    }
    EMBER_CHECK(add_column(p, SCHEMA_DENSE, w[1], s->num_dense));
    s->num_dense++;
    return EMBER_OK;
}

/* The word of one of @names (its index), or -1. */
static int one_of(const char *text, size_t length, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == length && memcmp(names[i], text, length) == 0)
            return i;
    return -1;
}

static const char *const ids_names[] = {"int", "hex", "string"};
static const char *const pooling_names[] = {"sum", "mean", "max"};
static const char *const empty_names[] = {"refuse", "bag", "zero"};
static const char *const kind_names[] = {"fixed", "dynamic"}; /* a table's kind= */

/* A whole number in [1, @max] at full width. */
static int count_ok(const char *text, size_t length, int64_t max, int64_t *value_p)
{
    return ember_parse_int64(text, length, value_p) && text[0] != '-' && *value_p >= 1 &&
           *value_p <= max;
}

/* Sparse option @w (key=value) into @f; @seen: the keys given so far. */
static ember_status_t sparse_option(const parse_t *p, const char *name, word_t w,
                                    schema_sparse_t *f, unsigned *seen)
{
    static const char *const keys[] = {"rows", "table", "pooling", "list", "bag", "empty", "kind"};
    const char *eq = memchr(w.text, '=', w.length);
    int key = eq ? one_of(w.text, (size_t)(eq - w.text), keys, 7) : -1;
    if (key < 0)
        return refuse(p, p->line,
                      "sparse feature '%s': unknown key '%.*s' (rows=, table=, pooling=, list=, "
                      "bag=, empty=, kind=)",
                      name, (int)(w.length > 40 ? 40 : w.length), w.text);
    if (*seen & 1u << key)
        return refuse(p, p->line, "sparse feature '%s': %s= given twice", name, keys[key]);
    *seen |= 1u << key;
    const char *v = eq + 1;
    size_t n = w.length - (size_t)(v - w.text);
    int64_t number = 0;
    int got = 1, which = 0;
    if (key == 0)
        got = count_ok(v, n, INT64_MAX, &f->rows);
    else if (key == 1)
        return take_name(p, "a table's", v, n, f->table);
    else if (key == 2)
        got = (which = one_of(v, n, pooling_names, 3)) >= 0;
    else if (key == 3)
        got = n == 1 && v[0] > ' ' && v[0] < 0x7f && v[0] != '#' && v[0] != ';' && v[0] != '=';
    else if (key == 4)
        got = count_ok(v, n, EMBER_SCHEMA_BAG_MAX, &number);
    else if (key == 5)
        got = (which = one_of(v, n, empty_names, 3)) >= 0;
    else
        got = (which = one_of(v, n, kind_names, 2)) >= 0;
    static const char *const wants[] = {"a whole number from 1 to 2^63 - 1",
                                        "",
                                        "sum, mean or max",
                                        "one printable character (not a space, '#', ';' or '=')",
                                        "a whole number from 1 to 65536",
                                        "bag, zero or refuse",
                                        "fixed or dynamic"};
    if (!got)
        return refuse(p, p->line, "sparse feature '%s': %s='%.*s', not %s", name, keys[key],
                      (int)(n > 40 ? 40 : n), v, wants[key]);
    if (key == 2)
        f->pooling = (ember_bag_mode_t)which;
    if (key == 5)
        f->empty = (ember_empty_rule_t)which;
    if (key == 3)
        f->list = v[0];
    if (key == 4)
        f->bag_max = (uint32_t)number;
    if (key == 6)
        f->dynamic = which;
    return EMBER_OK;
}

static ember_status_t parse_sparse(parse_t *p, const word_t *w, size_t n)
{
    ember_schema_t *s = p->s;
    unsigned seen = 0;
    char name[EMBER_SCHEMA_NAME_MAX];
    if (n < 3)
        return refuse(p, p->line,
                      "'sparse' takes NAME int|hex|string rows=N [table=T] "
                      "[pooling=sum|mean|max] [list=C bag=M] [empty=bag|zero|refuse] "
                      "[kind=fixed|dynamic]");
    if (s->num_sparse == EMBER_SCHEMA_SPARSE_MAX)
        return refuse(p, p->line, "more than %d sparse features", EMBER_SCHEMA_SPARSE_MAX);
    EMBER_CHECK(take_name(p, "a column's", w[1].text, w[1].length, name));
    schema_sparse_t *f = &s->sparse[s->num_sparse];
    *f = (schema_sparse_t){.column = s->num_columns,
                           .pooling = EMBER_BAG_SUM,
                           .empty = EMBER_EMPTY_REFUSE,
                           .line = p->line};
    int ids = one_of(w[2].text, w[2].length, ids_names, 3);
    if (ids < 0)
        return refuse(p, p->line, "sparse feature '%s': ids '%.*s', not int, hex or string", name,
                      (int)(w[2].length > 40 ? 40 : w[2].length), w[2].text);
    f->ids = (ember_ids_kind_t)ids;
    for (size_t i = 3; i < n; i++)
        EMBER_CHECK(sparse_option(p, name, w[i], f, &seen));
    if (!(seen & 1u))
        return refuse(p, p->line, "sparse feature '%s': no rows=", name);
    if (!!(seen & 1u << 3) != !!(seen & 1u << 4))
        return refuse(p, p->line, "sparse feature '%s': %s", name,
                      seen & 1u << 3 ? "list= without bag=" : "bag= without list=");
    if (!f->list)
        f->bag_max = 1;
    if (!(seen & 1u << 1))
        strcpy(f->table, name);
    EMBER_CHECK(add_column(p, SCHEMA_SPARSE, w[1], s->num_sparse));
    s->num_sparse++;
    return EMBER_OK;
}

static ember_status_t parse_statement(parse_t *p, const word_t *w, size_t n)
{
    ember_schema_t *s = p->s;
    if (word_is(w[0], "format"))
        return parse_setting(p, w, n, &p->have_format, "csv", "tsv", &s->csv);
    if (word_is(w[0], "header"))
        return parse_setting(p, w, n, &p->have_header, "yes", "no", &s->header);
    if (word_is(w[0], "hash")) {
        EMBER_CHECK(words_exactly(p, w, n, 2, "fnv1a64 (the only hash)"));
        if (p->have_hash)
            return refuse(p, p->line, "'hash' given twice");
        if (!word_is(w[1], "fnv1a64"))
            return refuse(p, p->line, "hash '%.*s', not fnv1a64 (the only one)",
                          (int)(w[1].length > 40 ? 40 : w[1].length), w[1].text);
        p->have_hash = 1;
        return EMBER_OK;
    }
    if (word_is(w[0], "dense"))
        return parse_dense(p, w, n);
    if (word_is(w[0], "sparse"))
        return parse_sparse(p, w, n);
    if (word_is(w[0], "label")) {
        EMBER_CHECK(words_exactly(p, w, n, 2, "NAME"));
        if (p->have_label)
            return refuse(p, p->line, "a second label ('%.*s')", (int)w[1].length, w[1].text);
        p->have_label = 1;
        s->label = s->num_columns;
        return add_column(p, SCHEMA_LABEL, w[1], 0);
    }
    if (word_is(w[0], "skip")) {
        EMBER_CHECK(words_exactly(p, w, n, 2, "NAME"));
        if (p->skips == SKIP_MAX)
            return refuse(p, p->line, "more than %d skip columns", SKIP_MAX);
        p->skips++;
        return add_column(p, SCHEMA_SKIP, w[1], 0);
    }
    return refuse(p, p->line,
                  "unknown statement '%.*s' (format, header, hash, label, dense, "
                  "sparse, skip)",
                  (int)(w[0].length > 40 ? 40 : w[0].length), w[0].text);
}

/* One statement's words (space- or tab-separated), then the statement. */
static ember_status_t parse_words(parse_t *p, const char *text, size_t length)
{
    word_t w[WORDS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < length;) {
        if (text[i] == ' ' || text[i] == '\t' || text[i] == '\r') {
            i++;
            continue;
        }
        size_t start = i;
        while (i < length && text[i] != ' ' && text[i] != '\t' && text[i] != '\r')
            i++;
        if (n == WORDS_MAX)
            return refuse(p, p->line, "more than %d words in one statement", WORDS_MAX);
        w[n++] = (word_t){text + start, i - start};
    }
    return n ? parse_statement(p, w, n) : EMBER_OK;
}

/* One line: its comment cut, its statements (';'-separated) parsed. */
static ember_status_t parse_line(parse_t *p, const char *text, size_t length)
{
    const char *hash = memchr(text, '#', length);
    if (hash)
        length = (size_t)(hash - text);
    for (size_t start = 0; start <= length;) {
        const char *semi = memchr(text + start, ';', length - start);
        size_t end = semi ? (size_t)(semi - text) : length;
        EMBER_CHECK(parse_words(p, text + start, end - start));
        start = end + 1;
    }
    return EMBER_OK;
}

/* The rules across statements: a label, a feature, list characters that
 * are not the separator, a shared table's rows and pooling alike. */
static ember_status_t check_whole(parse_t *p)
{
    ember_schema_t *s = p->s;
    if (!p->have_label)
        return refuse(p, p->line, "no label statement");
    if (s->num_dense + s->num_sparse == 0)
        return refuse(p, p->line, "no feature (a dense or sparse statement)");
    for (uint32_t f = 0; f < s->num_sparse; f++) {
        const schema_sparse_t *a = &s->sparse[f];
        const char *name = s->columns[a->column].name;
        if (a->list && a->list == schema_separator(s))
            return refuse(p, a->line, "sparse feature '%s': list='%c' is the field separator", name,
                          a->list);
        for (uint32_t g = 0; g < f; g++) {
            const schema_sparse_t *b = &s->sparse[g];
            if (strcmp(a->table, b->table) != 0)
                continue;
            if (a->rows != b->rows || a->pooling != b->pooling)
                return refuse(p, a->line,
                              "sparse feature '%s' shares table '%s' with '%s' but has %s "
                              "(%" PRId64 ", %s), not (%" PRId64 ", %s)",
                              name, a->table, s->columns[b->column].name,
                              a->rows != b->rows ? "other rows" : "another pooling", a->rows,
                              pooling_names[a->pooling], b->rows, pooling_names[b->pooling]);
            if (a->dynamic != b->dynamic)
                return refuse(p, a->line,
                              "sparse feature '%s' shares table '%s' with '%s' but has kind=%s, "
                              "not kind=%s (a table is fixed or dynamic for all its features)",
                              name, a->table, s->columns[b->column].name, kind_names[a->dynamic],
                              kind_names[b->dynamic]);
            break;
        }
    }
    return EMBER_OK;
}

/* The features of one table next to the first of them (stable), tables
 * numbered in order of first use. */
static ember_schema_t *finish(const ember_schema_t *d)
{
    ember_schema_t *s = schema_copy(d);
    if (!s)
        return NULL;
    uint32_t k = 0;
    s->num_tables = 0;
    for (uint32_t f = 0; f < d->num_sparse; f++) {
        int first = 1;
        for (uint32_t g = 0; g < f && first; g++)
            first = strcmp(d->sparse[g].table, d->sparse[f].table) != 0;
        if (!first)
            continue;
        for (uint32_t g = f; g < d->num_sparse; g++) {
            if (strcmp(d->sparse[g].table, d->sparse[f].table) != 0)
                continue;
            s->sparse[k] = d->sparse[g];
            s->sparse[k].table_index = s->num_tables;
            s->sparse[k].line = 0;
            s->columns[d->sparse[g].column].index = k;
            k++;
        }
        s->num_tables++;
    }
    return s;
}

ember_status_t ember_schema_parse(const char *text, const char *origin, ember_schema_t **schema_p,
                                  char *err, size_t err_length)
{
    parse_t p = {
            .origin = origin ? origin : "schema", .line = 1, .err = err, .err_length = err_length};
    ember_status_t status = EMBER_OK;
    p.s = schema_alloc(EMBER_SCHEMA_COLUMNS_MAX, EMBER_SCHEMA_DENSE_MAX, EMBER_SCHEMA_SPARSE_MAX);
    if (!p.s)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    p.s->num_columns = p.s->num_dense = p.s->num_sparse = 0;
    size_t length = strlen(text);
    for (size_t start = 0; start <= length && status == EMBER_OK; p.line++) {
        const char *newline = memchr(text + start, '\n', length - start);
        size_t end = newline ? (size_t)(newline - text) : length;
        status = parse_line(&p, text + start, end - start);
        start = end + 1;
        if (!newline)
            break;
    }
    if (status == EMBER_OK)
        status = check_whole(&p);
    if (status == EMBER_OK && !(*schema_p = finish(p.s)))
        status = ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    free(p.s);
    return status;
}

ember_status_t ember_schema_load(const char *path, ember_schema_t **schema_p, char *err,
                                 size_t err_length)
{
    char *text = malloc(EMBER_SCHEMA_TEXT_MAX + 1);
    if (!text)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "out of memory");
    FILE *file = fopen(path, "rb");
    if (!file) {
        int e = errno;
        free(text);
        return ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", path, strerror(e));
    }
    size_t got = fread(text, 1, EMBER_SCHEMA_TEXT_MAX + 1, file);
    int failed = ferror(file);
    fclose(file);
    ember_status_t status = EMBER_OK;
    if (failed)
        status = ember_status_text(err, err_length, EMBER_ERR_IO, "%s: a read failed", path);
    else if (got > EMBER_SCHEMA_TEXT_MAX)
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s: longer than %d bytes",
                                   path, EMBER_SCHEMA_TEXT_MAX);
    else if (memchr(text, '\0', got))
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s: a NUL byte", path);
    if (status == EMBER_OK) {
        text[got] = '\0';
        status = ember_schema_parse(text, path, schema_p, err, err_length);
    }
    free(text);
    return status;
}

/* ------------------------------------------------------------ the preset */

ember_status_t ember_schema_criteo(const int64_t *rows, ember_schema_t **schema_p, char *err,
                                   size_t err_length)
{
    char text[4096];
    int used = snprintf(text, sizeof(text), "label label");
    for (int i = 1; i <= 13; i++)
        used += snprintf(text + used, sizeof(text) - (size_t)used, "; dense I%d log", i);
    for (int f = 0; f < 26; f++) {
        int64_t n = rows ? rows[f] : 100000;
        if (n < 1)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "feature C%d's table has %" PRId64 " rows", f + 1, n);
        used += snprintf(text + used, sizeof(text) - (size_t)used,
                         "; sparse C%d hex rows=%" PRId64 " table=t_cat_%d empty=zero", f + 1, n,
                         f);
    }
    return ember_schema_parse(text, "Criteo's preset", schema_p, err, err_length);
}

const char *schema_criteo_differs(const ember_schema_t *schema, char *why, size_t length)
{
    int64_t rows[26];
    ember_schema_t *criteo;
    if (schema->num_sparse != 26) {
        snprintf(why, length, "%" PRIu32 " sparse features, not 26", schema->num_sparse);
        return why;
    }
    for (int f = 0; f < 26; f++) /* any rows: the job's tables */
        rows[f] = schema->sparse[f].rows;
    if (ember_schema_criteo(rows, &criteo, why, length) != EMBER_OK)
        return why;
    for (int f = 0; f < 26; f++) /* any kinds: a dynamic table takes its raw ids */
        criteo->sparse[f].dynamic = schema->sparse[f].dynamic;
    const char *differs = ember_schema_differs(criteo, schema, why, length);
    ember_schema_free(criteo);
    return differs;
}

int ember_schema_is_criteo(const ember_schema_t *schema)
{
    char why[256];
    return schema_criteo_differs(schema, why, sizeof(why)) == NULL;
}

/* ------------------------------------------------------- text, comparison */

static const char *const column_names[] = {"label", "dense", "sparse", "skip"};

/* Column @c as its statement, after @sep, at text + *used (counted past
 * @length as snprintf counts). */
static void column_text(const ember_schema_t *s, uint32_t c, char *text, size_t length,
                        size_t *used)
{
    const schema_column_t *col = &s->columns[c];
    char list[32] = "";
#define PUT(...)                                                    \
    *used += (size_t)snprintf(*used < length ? text + *used : NULL, \
                              *used < length ? length - *used : 0, __VA_ARGS__)
    PUT("; %s %s", column_names[col->kind], col->name);
    if (col->kind == SCHEMA_DENSE) {
        const schema_dense_t *d = &s->dense[col->index];
        PUT(" %s empty=%s", d->transform == EMBER_DENSE_LOG ? "log" : "none",
            d->empty_refused ? "refuse" : "zero");
    } else if (col->kind == SCHEMA_SPARSE) {
        const schema_sparse_t *f = &s->sparse[col->index];
        if (f->list)
            snprintf(list, sizeof(list), " list=%c bag=%" PRIu32, f->list, f->bag_max);
        PUT(" %s rows=%" PRId64 " table=%s pooling=%s%s empty=%s%s", ids_names[f->ids], f->rows,
            f->table, pooling_names[f->pooling], list, empty_names[f->empty],
            f->dynamic ? " kind=dynamic" : "");
    }
#undef PUT
}

size_t ember_schema_text(const ember_schema_t *schema, char *text, size_t length)
{
    size_t used = (size_t)snprintf(text, length, "format %s; header %s; hash fnv1a64",
                                   schema->csv ? "csv" : "tsv", schema->header ? "yes" : "no");
    for (uint32_t c = 0; c < schema->num_columns; c++)
        column_text(schema, c, text, length, &used);
    return used;
}

static const char *say(char *why, size_t length, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static const char *say(char *why, size_t length, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(why, length, fmt, args);
    va_end(args);
    return why;
}

static const char *dense_differs(const schema_dense_t *a, const schema_dense_t *b, const char *name,
                                 char *why, size_t length)
{
    if (a->transform != b->transform)
        return say(why, length, "dense feature '%s': %s, now %s", name,
                   a->transform == EMBER_DENSE_LOG ? "log" : "none",
                   b->transform == EMBER_DENSE_LOG ? "log" : "none");
    if (a->empty_refused != b->empty_refused)
        return say(why, length, "dense feature '%s': empty=%s, now empty=%s", name,
                   a->empty_refused ? "refuse" : "zero", b->empty_refused ? "refuse" : "zero");
    return NULL;
}

static const char *sparse_differs(const schema_sparse_t *a, const schema_sparse_t *b,
                                  const char *name, char *why, size_t length)
{
    if (a->ids != b->ids)
        return say(why, length, "sparse feature '%s': %s ids, now %s", name, ids_names[a->ids],
                   ids_names[b->ids]);
    if (a->rows != b->rows)
        return say(why, length, "sparse feature '%s': rows %" PRId64 ", now %" PRId64, name,
                   a->rows, b->rows);
    if (strcmp(a->table, b->table) != 0)
        return say(why, length, "sparse feature '%s': table '%s', now '%s'", name, a->table,
                   b->table);
    if (a->pooling != b->pooling)
        return say(why, length, "sparse feature '%s': pooling %s, now %s", name,
                   pooling_names[a->pooling], pooling_names[b->pooling]);
    if (a->list != b->list)
        return say(why, length, "sparse feature '%s': list '%c', now '%c'", name,
                   a->list ? a->list : '-', b->list ? b->list : '-');
    if (a->bag_max != b->bag_max)
        return say(why, length, "sparse feature '%s': bag %" PRIu32 ", now %" PRIu32, name,
                   a->bag_max, b->bag_max);
    if (a->empty != b->empty)
        return say(why, length, "sparse feature '%s': empty=%s, now empty=%s", name,
                   empty_names[a->empty], empty_names[b->empty]);
    if (a->dynamic != b->dynamic)
        return say(why, length, "sparse feature '%s': kind=%s, now kind=%s", name,
                   kind_names[a->dynamic], kind_names[b->dynamic]);
    return NULL;
}

const char *ember_schema_differs(const ember_schema_t *was, const ember_schema_t *now, char *why,
                                 size_t length)
{
    if (was->csv != now->csv)
        return say(why, length, "format %s, now %s", was->csv ? "csv" : "tsv",
                   now->csv ? "csv" : "tsv");
    if (was->header != now->header)
        return say(why, length, "header %s, now %s", was->header ? "yes" : "no",
                   now->header ? "yes" : "no");
    for (uint32_t c = 0; c < was->num_columns && c < now->num_columns; c++) {
        const schema_column_t *a = &was->columns[c], *b = &now->columns[c];
        const char *differs = NULL;
        if (a->kind != b->kind || strcmp(a->name, b->name) != 0)
            return say(why, length, "column %" PRIu32 ": %s '%s', now %s '%s'", c + 1,
                       column_names[a->kind], a->name, column_names[b->kind], b->name);
        if (a->kind == SCHEMA_DENSE)
            differs = dense_differs(&was->dense[a->index], &now->dense[b->index], a->name, why,
                                    length);
        else if (a->kind == SCHEMA_SPARSE)
            differs = sparse_differs(&was->sparse[a->index], &now->sparse[b->index], a->name, why,
                                     length);
        if (differs)
            return differs;
    }
    if (was->num_columns != now->num_columns)
        return say(why, length, "%" PRIu32 " columns, now %" PRIu32, was->num_columns,
                   now->num_columns);
    return NULL;
}

/* -------------------------------------------------------------- accessors */

uint32_t ember_schema_num_dense(const ember_schema_t *schema)
{
    return schema->num_dense;
}

uint32_t ember_schema_num_sparse(const ember_schema_t *schema)
{
    return schema->num_sparse;
}

uint32_t ember_schema_num_tables(const ember_schema_t *schema)
{
    return schema->num_tables;
}

void ember_schema_sparse(const ember_schema_t *schema, uint32_t f, ember_schema_sparse_t *out)
{
    const schema_sparse_t *s = &schema->sparse[f];
    *out = (ember_schema_sparse_t){.name = schema->columns[s->column].name,
                                   .table = s->table,
                                   .table_index = s->table_index,
                                   .rows = s->rows,
                                   .pooling = s->pooling,
                                   .ids = s->ids,
                                   .empty = s->empty,
                                   .list = s->list,
                                   .bag_max = s->bag_max};
}

int ember_schema_dynamic(const ember_schema_t *schema, uint32_t f)
{
    return schema->sparse[f].dynamic;
}

ember_status_t ember_schema_all_dynamic(const ember_schema_t *schema, ember_schema_t **schema_p)
{
    ember_schema_t *s = schema_copy(schema);
    if (!s)
        return EMBER_ERR_NO_MEMORY;
    for (uint32_t f = 0; f < s->num_sparse; f++)
        s->sparse[f].dynamic = 1;
    *schema_p = s;
    return EMBER_OK;
}

void ember_schema_dense(const ember_schema_t *schema, uint32_t i, ember_schema_dense_t *out)
{
    const schema_dense_t *d = &schema->dense[i];
    *out = (ember_schema_dense_t){.name = schema->columns[d->column].name,
                                  .transform = d->transform,
                                  .empty_refused = d->empty_refused};
}

const char *ember_schema_label(const ember_schema_t *schema)
{
    return schema->columns[schema->label].name;
}
