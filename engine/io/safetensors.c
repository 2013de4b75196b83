/* ember engine: safetensors reader/writer with a small JSON parser. */
#include "engine/io/safetensors.h"

#include "common/reserve.h"
#include "engine/io/durable.h"

#include <ember/log.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- dtypes */

static const struct {
    const char *name;
    size_t size;
} dtype_info[] = {
        [EMBER_DTYPE_F32] = {"F32", 4}, [EMBER_DTYPE_F64] = {"F64", 8},
        [EMBER_DTYPE_F16] = {"F16", 2}, [EMBER_DTYPE_BF16] = {"BF16", 2},
        [EMBER_DTYPE_I64] = {"I64", 8}, [EMBER_DTYPE_I32] = {"I32", 4},
        [EMBER_DTYPE_I16] = {"I16", 2}, [EMBER_DTYPE_I8] = {"I8", 1},
        [EMBER_DTYPE_U8] = {"U8", 1},   [EMBER_DTYPE_BOOL] = {"BOOL", 1},
        [EMBER_DTYPE_U32] = {"U32", 4},
};
#define DTYPE_COUNT (sizeof(dtype_info) / sizeof(dtype_info[0]))

const char *ember_dtype_name(ember_dtype_t dtype)
{
    return (unsigned)dtype < DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

size_t ember_dtype_size(ember_dtype_t dtype)
{
    return (unsigned)dtype < DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

static int dtype_parse(const char *text, ember_dtype_t *dtype_p)
{
    for (unsigned i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(text, dtype_info[i].name) == 0) {
            *dtype_p = (ember_dtype_t)i;
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ JSON */

/* Just enough JSON for a safetensors header: the full grammar, a tree of
 * nodes, strings decoded to UTF-8, integers kept exact as int64. */
typedef enum {
    J_NULL,
    J_BOOL,
    J_NUM,
    J_STR,
    J_ARR,
    J_OBJ
} json_type_t;

typedef struct json_node {
    json_type_t type;
    char *key;  /* member name inside an object */
    char *str;  /* J_STR */
    int is_int; /* J_NUM without fraction/exponent, fits int64 */
    int64_t ival;
    double num;
    int boolean;
    struct json_node *child; /* first element/member */
    struct json_node *next;  /* next sibling */
} json_node_t;

typedef struct {
    const char *s;
    size_t len, pos;
    int depth;
    char *err;
    size_t err_length;
} json_parser_t;

#define JSON_MAX_DEPTH 32

static void json_free(json_node_t *node)
{
    while (node) {
        json_node_t *next = node->next;
        json_free(node->child);
        free(node->key);
        free(node->str);
        free(node);
        node = next;
    }
}

static int json_fail(json_parser_t *p, const char *what)
{
    (void)ember_status_text(p->err, p->err_length, EMBER_OK, "bad JSON header at byte %zu: %s",
                            p->pos, what);
    return -1;
}

static void json_ws(json_parser_t *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int json_hex4(json_parser_t *p, unsigned *value_p)
{
    unsigned v = 0;
    if (p->len - p->pos < 4)
        return json_fail(p, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return json_fail(p, "bad hex digit in \\u escape");
    }
    *value_p = v;
    return 0;
}

static int json_at(const json_parser_t *p, char c)
{
    return p->pos < p->len && p->s[p->pos] == c;
}

static int json_at_digit(const json_parser_t *p)
{
    return p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9';
}

/* Room for the string at p->pos (at the opening quote) decoded: decoded
 * text is never longer than the source text. */
static size_t json_string_room(const json_parser_t *p)
{
    size_t room = 1;
    for (size_t i = p->pos + 1; i < p->len && p->s[i] != '"'; i++)
        room += (p->s[i] == '\\' && i + 1 < p->len) ? (i++, 2) : 1;
    return room;
}

/* The code point of a \u escape (p->pos after the 'u'), a surrogate pair
 * joined into one. */
static int json_code_point(json_parser_t *p, unsigned *cp_p)
{
    unsigned cp, lo;
    if (json_hex4(p, &cp) < 0)
        return -1;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return json_fail(p, "unpaired surrogate");
        p->pos += 2;
        if (json_hex4(p, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
            return json_fail(p, "bad low surrogate");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return json_fail(p, "unpaired surrogate");
    }
    /* Names are C strings; an embedded NUL could alias two. */
    if (cp == 0)
        return json_fail(p, "\\u0000 in string");
    *cp_p = cp;
    return 0;
}

/* @cp as UTF-8 at @out; the bytes written (at most 4). */
static size_t utf8_put(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape (p->pos after the backslash), decoded at out + *n_p. */
static int json_escape(json_parser_t *p, char *out, size_t *n_p)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    unsigned cp;

    if (p->pos >= p->len)
        return json_fail(p, "unterminated escape");
    char e = p->s[p->pos++];
    const char *simple = memchr(from, e, sizeof(from) - 1);
    if (simple) {
        out[(*n_p)++] = to[simple - from];
        return 0;
    }
    if (e != 'u')
        return json_fail(p, "unknown escape");
    if (json_code_point(p, &cp) < 0)
        return -1;
    /* 6 source bytes (\uXXXX) always cover <= 4 UTF-8 bytes. */
    *n_p += utf8_put(out + *n_p, cp);
    return 0;
}

/* The string's text up to and past its closing quote, decoded into @out. */
static int json_string_text(json_parser_t *p, char *out, size_t *n_p)
{
    while (1) {
        if (p->pos >= p->len)
            return json_fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c == '"')
            return 0;
        if (c < 0x20)
            return json_fail(p, "control character in string");
        if (c != '\\')
            out[(*n_p)++] = (char)c;
        else if (json_escape(p, out, n_p) < 0)
            return -1;
    }
}

/* Parse a string at p->pos (at the opening quote) into a new C string. */
static int json_string(json_parser_t *p, char **out_p)
{
    size_t room = json_string_room(p), n = 0;
    p->pos++; /* the opening quote */
    char *out = malloc(room + 4);
    if (!out)
        return json_fail(p, "out of memory");
    if (json_string_text(p, out, &n) < 0) {
        free(out);
        return -1;
    }
    out[n] = '\0';
    *out_p = out;
    return 0;
}

/* A number's integer part: its value in *mag_p unless it overflows 64 bits
 * (*overflow_p set). */
static int json_integer_part(json_parser_t *p, uint64_t *mag_p, int *overflow_p)
{
    if (!json_at_digit(p))
        return json_fail(p, "bad number");
    if (p->s[p->pos] == '0' && p->pos + 1 < p->len && p->s[p->pos + 1] >= '0' &&
        p->s[p->pos + 1] <= '9')
        return json_fail(p, "leading zero in number");
    while (json_at_digit(p)) {
        unsigned d = (unsigned)(p->s[p->pos++] - '0');
        if (*mag_p > (UINT64_MAX - d) / 10)
            *overflow_p = 1;
        else
            *mag_p = *mag_p * 10 + d;
    }
    return 0;
}

/* A number's fraction and exponent, either optional: *frac_p set when
 * there is one (the number is then not an integer). */
static int json_fraction_exponent(json_parser_t *p, int *frac_p)
{
    if (json_at(p, '.')) {
        *frac_p = 1;
        p->pos++;
        if (!json_at_digit(p))
            return json_fail(p, "bad fraction");
        while (json_at_digit(p))
            p->pos++;
    }
    if (json_at(p, 'e') || json_at(p, 'E')) {
        *frac_p = 1;
        p->pos++;
        if (json_at(p, '+') || json_at(p, '-'))
            p->pos++;
        if (!json_at_digit(p))
            return json_fail(p, "bad exponent");
        while (json_at_digit(p))
            p->pos++;
    }
    return 0;
}

static int json_number(json_parser_t *p, json_node_t *node)
{
    size_t start = p->pos;
    int neg = json_at(p, '-'), frac = 0, overflow = 0;
    uint64_t mag = 0;

    p->pos += (size_t)neg;
    if (json_integer_part(p, &mag, &overflow) < 0 || json_fraction_exponent(p, &frac) < 0)
        return -1;
    node->type = J_NUM;
    /* The header text is NUL-terminated by the caller, so strtod is safe. */
    node->num = strtod(p->s + start, NULL);
    if (!frac && !overflow && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX)) {
        node->is_int = 1;
        node->ival = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
    return 0;
}

static int json_literal(json_parser_t *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return json_fail(p, "unexpected character");
    p->pos += n;
    return 0;
}

static int json_value(json_parser_t *p, json_node_t **node_p);

/* An object member's name and the ':' after it. */
static int json_member_name(json_parser_t *p, char **key_p)
{
    if (!json_at(p, '"'))
        return json_fail(p, "expected a member name");
    if (json_string(p, key_p) < 0)
        return -1;
    json_ws(p);
    if (!json_at(p, ':')) {
        free(*key_p);
        *key_p = NULL;
        return json_fail(p, "expected ':'");
    }
    p->pos++;
    return 0;
}

/* After an element: 1 when a ',' says another follows, 0 at the closing
 * @close, -1 on anything else. */
static int json_next_element(json_parser_t *p, char close)
{
    json_ws(p);
    if (p->pos >= p->len)
        return json_fail(p, "unterminated object or array");
    if (p->s[p->pos] == ',' || p->s[p->pos] == close)
        return p->s[p->pos++] == ',';
    return json_fail(p, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

static int json_container(json_parser_t *p, json_node_t *node, int is_obj)
{
    json_node_t **tail = &node->child;
    char close = is_obj ? '}' : ']';
    int more = 1;

    if (++p->depth > JSON_MAX_DEPTH)
        return json_fail(p, "nested too deeply");
    p->pos++; /* '{' or '[' */
    json_ws(p);
    if (json_at(p, close)) {
        p->pos++;
        more = 0;
    }
    while (more) {
        char *key = NULL;
        json_node_t *child;

        json_ws(p);
        if (is_obj && json_member_name(p, &key) < 0)
            return -1;
        if (json_value(p, &child) < 0) {
            free(key);
            return -1;
        }
        child->key = key;
        *tail = child;
        tail = &child->next;
        more = json_next_element(p, close);
        if (more < 0)
            return -1;
    }
    p->depth--;
    return 0;
}

static int json_value(json_parser_t *p, json_node_t **node_p)
{
    json_node_t *node;
    int rc;

    json_ws(p);
    if (p->pos >= p->len)
        return json_fail(p, "unexpected end of header");
    node = calloc(1, sizeof(*node));
    if (!node)
        return json_fail(p, "out of memory");
    switch (p->s[p->pos]) {
    case '{':
        node->type = J_OBJ;
        rc = json_container(p, node, 1);
        break;
    case '[':
        node->type = J_ARR;
        rc = json_container(p, node, 0);
        break;
    case '"':
        node->type = J_STR;
        rc = json_string(p, &node->str);
        break;
    case 't':
        node->type = J_BOOL;
        node->boolean = 1;
        rc = json_literal(p, "true");
        break;
    case 'f':
        node->type = J_BOOL;
        rc = json_literal(p, "false");
        break;
    case 'n':
        node->type = J_NULL;
        rc = json_literal(p, "null");
        break;
    default: rc = json_number(p, node); break;
    }
    if (rc < 0) {
        json_free(node);
        return -1;
    }
    *node_p = node;
    return 0;
}

/* Parse @len bytes at @text (which must be followed by a NUL). */
static int json_parse(const char *text, size_t len, json_node_t **root_p, char *err,
                      size_t err_length)
{
    json_parser_t p = {.s = text, .len = len, .err = err, .err_length = err_length};
    json_node_t *root;

    if (json_value(&p, &root) < 0)
        return -1;
    json_ws(&p);
    if (p.pos != p.len) {
        json_free(root);
        return json_fail(&p, "trailing characters after the header object");
    }
    *root_p = root;
    return 0;
}

static const json_node_t *json_member(const json_node_t *obj, const char *key)
{
    for (const json_node_t *c = obj->child; c; c = c->next) {
        if (strcmp(c->key, key) == 0)
            return c;
    }
    return NULL;
}

static size_t json_count(const json_node_t *obj, const char *key)
{
    size_t n = 0;
    for (const json_node_t *c = obj->child; c; c = c->next)
        n += strcmp(c->key, key) == 0;
    return n;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key @obj holds twice, or NULL (*failed_p set when out of memory).
 * JSON leaves duplicates open: Python's reader keeps the last, json_member
 * the first, and the two must not read different values from one file.
 * Sorted, so a hostile header with very many keys costs O(n log n). */
static const char *json_duplicate_key(const json_node_t *obj, int *failed_p)
{
    size_t n = 0, i = 0;
    const char *found = NULL;
    for (const json_node_t *c = obj->child; c; c = c->next)
        n++;
    const char **keys = malloc((n ? n : 1) * sizeof(*keys));
    *failed_p = keys == NULL;
    if (!keys)
        return NULL;
    for (const json_node_t *c = obj->child; c; c = c->next)
        keys[i++] = c->key;
    qsort(keys, n, sizeof(*keys), cmp_keys);
    for (i = 1; i < n && !found; i++)
        found = strcmp(keys[i], keys[i - 1]) == 0 ? keys[i] : NULL;
    free(keys);
    return found;
}

/* ---------------------------------------------------------------- reader */

struct ember_st_file {
    uint8_t *image; /* the whole file */
    size_t size;
    int mapped;   /* image is a mapping of the file (munmap), else malloc'd */
    char *header; /* NUL-terminated copy of the JSON */
    json_node_t *root;
    ember_st_tensor_t *tensors;  /* header order */
    ember_st_tensor_t **by_name; /* sorted by name */
    size_t ntensors;
    const json_node_t *meta; /* the __metadata__ object, or NULL */
};

void ember_st_close(ember_st_file_t *file)
{
    if (!file)
        return;
    json_free(file->root);
    free(file->by_name);
    free(file->tensors);
    free(file->header);
    if (file->mapped)
        munmap(file->image, file->size);
    else
        free(file->image);
    free(file);
}

static int cmp_by_name(const void *a, const void *b)
{
    const ember_st_tensor_t *x = *(ember_st_tensor_t *const *)a;
    const ember_st_tensor_t *y = *(ember_st_tensor_t *const *)b;
    return strcmp(x->name, y->name);
}

/* By first byte, then by size: an empty tensor sits before the one that
 * starts where it does, whatever their order in the header (safetensors'
 * own writer puts empty tensors at such offsets). */
static int cmp_by_begin(const void *a, const void *b)
{
    const ember_st_tensor_t *x = *(ember_st_tensor_t *const *)a;
    const ember_st_tensor_t *y = *(ember_st_tensor_t *const *)b;
    if (x->data != y->data)
        return (x->data > y->data) - (x->data < y->data);
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* *numel_p times @dim, unless the product overflows 64 bits (then 0 and
 * *numel_p unchanged); a zero dimension makes the tensor empty. */
static int numel_times(uint64_t *numel_p, uint64_t dim)
{
    if (dim != 0 && *numel_p > UINT64_MAX / dim)
        return 0;
    *numel_p *= dim;
    return 1;
}

static int json_is_count(const json_node_t *node)
{
    return node->type == J_NUM && node->is_int && node->ival >= 0;
}

/* Entry @e is an object that gives each field at most once. */
static ember_status_t st_check_entry(const json_node_t *e, char *err, size_t err_length)
{
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};

    if (e->type != J_OBJ)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "tensor '%s': entry is not an object", e->key);
    for (int i = 0; i < 3; i++) {
        if (json_count(e, fields[i]) > 1)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "tensor '%s': %s given twice", e->key, fields[i]);
    }
    return EMBER_OK;
}

static ember_status_t st_parse_dtype(const json_node_t *dt, const char *name,
                                     ember_dtype_t *dtype_p, char *err, size_t err_length)
{
    if (dt && dt->type == J_STR && dtype_parse(dt->str, dtype_p))
        return EMBER_OK;
    int named = dt && dt->type == J_STR;
    return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                             "tensor '%s': missing or unknown dtype%s%s", name, named ? " " : "",
                             named ? dt->str : "");
}

/* The dims of @shape into @t, their product into *numel_p. */
static ember_status_t st_parse_shape(const json_node_t *shape, const char *name,
                                     ember_st_tensor_t *t, uint64_t *numel_p, char *err,
                                     size_t err_length)
{
    uint64_t numel = 1;
    size_t nd = 0;

    if (!shape || shape->type != J_ARR)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "tensor '%s': missing shape array", name);
    for (const json_node_t *d = shape->child; d; d = d->next, nd++) {
        if (nd >= EMBER_ST_MAX_DIMS)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "tensor '%s': more than %d dimensions", name,
                                     EMBER_ST_MAX_DIMS);
        if (!json_is_count(d))
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "tensor '%s': shape[%zu] is not a "
                                     "non-negative integer",
                                     name, nd);
        t->shape[nd] = d->ival;
        if (!numel_times(&numel, (uint64_t)d->ival))
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "tensor '%s': shape overflows", name);
    }
    t->ndim = nd;
    *numel_p = numel;
    return EMBER_OK;
}

/* data_offsets: two non-negative integers, a span of the @data_size data
 * bytes. */
static ember_status_t st_parse_offsets(const json_node_t *offs, const char *name, size_t data_size,
                                       uint64_t *begin_p, uint64_t *end_p, char *err,
                                       size_t err_length)
{
    if (!offs || offs->type != J_ARR || !offs->child || !offs->child->next ||
        offs->child->next->next || !json_is_count(offs->child) || !json_is_count(offs->child->next))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "tensor '%s': data_offsets must be two "
                                 "non-negative integers",
                                 name);
    uint64_t begin = (uint64_t)offs->child->ival, end = (uint64_t)offs->child->next->ival;
    if (begin > end || end > data_size)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "tensor '%s': data_offsets [%llu, %llu] out of "
                                 "bounds of the %zu data bytes",
                                 name, (unsigned long long)begin, (unsigned long long)end,
                                 data_size);
    *begin_p = begin;
    *end_p = end;
    return EMBER_OK;
}

/* @numel elements of @t's dtype fill the @span bytes its offsets give. */
static ember_status_t st_check_span(const ember_st_tensor_t *t, const char *name, uint64_t numel,
                                    uint64_t span, char *err, size_t err_length)
{
    uint64_t esize = ember_dtype_size(t->dtype);
    if (numel <= UINT64_MAX / esize && numel * esize == span)
        return EMBER_OK;
    return ember_status_text(
            err, err_length, EMBER_ERR_FORMAT,
            "tensor '%s': shape and dtype %s need %llu bytes "
            "but data_offsets span %llu",
            name, ember_dtype_name(t->dtype),
            (unsigned long long)(numel > UINT64_MAX / esize ? UINT64_MAX : numel * esize),
            (unsigned long long)span);
}

/* Check one tensor entry of the header and fill @t. */
static ember_status_t st_parse_tensor(const json_node_t *e, const uint8_t *data, size_t data_size,
                                      ember_st_tensor_t *t, char *err, size_t err_length)
{
    const char *name = e->key;
    uint64_t numel = 0, begin = 0, end = 0;

    EMBER_CHECK(st_check_entry(e, err, err_length));
    EMBER_CHECK(st_parse_dtype(json_member(e, "dtype"), name, &t->dtype, err, err_length));
    EMBER_CHECK(st_parse_shape(json_member(e, "shape"), name, t, &numel, err, err_length));
    EMBER_CHECK(st_parse_offsets(json_member(e, "data_offsets"), name, data_size, &begin, &end, err,
                                 err_length));
    EMBER_CHECK(st_check_span(t, name, numel, end - begin, err, err_length));
    t->name = name;
    t->numel = (size_t)numel;
    t->nbytes = (size_t)(end - begin);
    t->data = data + begin;
    return EMBER_OK;
}

/* The header's length, from the file's first 8 bytes. */
static ember_status_t st_header_length(const uint8_t *image, size_t size, uint64_t *hlen_p,
                                       char *err, size_t err_length)
{
    uint64_t hlen = 0;

    if (size < 8)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "file is %zu bytes, too short for the 8-byte "
                                 "header length",
                                 size);
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | image[i]; /* little-endian on any host */
    if (hlen > size - 8 || hlen > EMBER_ST_MAX_HEADER || hlen < 2)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "header length %llu does not fit the file of %zu "
                                 "bytes (truncated or not safetensors)",
                                 (unsigned long long)hlen, size);
    *hlen_p = hlen;
    return EMBER_OK;
}

/* The @hlen header bytes after the length, copied NUL-terminated and
 * parsed: a JSON object. */
static ember_status_t st_parse_header(ember_st_file_t *f, size_t hlen, char *err, size_t err_length)
{
    f->header = malloc(hlen + 1);
    if (!f->header)
        return EMBER_ERR_NO_MEMORY;
    memcpy(f->header, f->image + 8, hlen);
    f->header[hlen] = '\0';
    if (json_parse(f->header, hlen, &f->root, err, err_length) < 0)
        return EMBER_ERR_FORMAT;
    if (f->root->type != J_OBJ)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "header is not a JSON object");
    return EMBER_OK;
}

/* The header's tensor entries, counted; __metadata__ given at most once. */
static ember_status_t st_count_tensors(const json_node_t *root, size_t *count_p, char *err,
                                       size_t err_length)
{
    size_t count = 0, nmeta = 0;

    for (const json_node_t *e = root->child; e; e = e->next) {
        if (strcmp(e->key, "__metadata__") != 0)
            count++;
        else if (++nmeta > 1)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "__metadata__ appears twice in the header");
    }
    *count_p = count;
    return EMBER_OK;
}

/* __metadata__: an object of strings, each key once. */
static ember_status_t st_check_metadata(const json_node_t *e, char *err, size_t err_length)
{
    int failed;

    if (e->type != J_OBJ)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "__metadata__ is not an object");
    for (const json_node_t *m = e->child; m; m = m->next) {
        if (m->type != J_STR)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "__metadata__ value '%s' is not a "
                                     "string",
                                     m->key);
    }
    const char *twice = json_duplicate_key(e, &failed);
    if (failed)
        return EMBER_ERR_NO_MEMORY;
    if (twice)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "__metadata__ key '%s' "
                                 "appears twice",
                                 twice);
    return EMBER_OK;
}

/* Each entry of the header in turn: the metadata checked, each tensor
 * parsed into f->tensors (header order) and listed in @order. */
static ember_status_t st_parse_entries(ember_st_file_t *f, const uint8_t *data, size_t data_size,
                                       const ember_st_tensor_t **order, char *err,
                                       size_t err_length)
{
    size_t k = 0;

    for (const json_node_t *e = f->root->child; e; e = e->next) {
        if (strcmp(e->key, "__metadata__") == 0) {
            EMBER_CHECK(st_check_metadata(e, err, err_length));
            f->meta = e;
            continue;
        }
        EMBER_CHECK(st_parse_tensor(e, data, data_size, &f->tensors[k], err, err_length));
        order[k] = &f->tensors[k];
        k++;
    }
    f->ntensors = k;
    return EMBER_OK;
}

/* A name index: lookups in O(log n), and duplicates found in O(n log n)
 * even for a hostile header with very many entries. */
static ember_status_t st_index_names(ember_st_file_t *f, char *err, size_t err_length)
{
    size_t count = f->ntensors;

    for (size_t i = 0; i < count; i++)
        f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, count, sizeof(*f->by_name), cmp_by_name);
    for (size_t i = 1; i < count; i++) {
        if (strcmp(f->by_name[i]->name, f->by_name[i - 1]->name) == 0)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "tensor '%s' appears twice in the header",
                                     f->by_name[i]->name);
    }
    return EMBER_OK;
}

/* Tensors must not share bytes: a crafted file could otherwise make two
 * tensors alias, and a writer through one would change the other. */
static ember_status_t st_check_overlaps(const ember_st_tensor_t **order, size_t count, char *err,
                                        size_t err_length)
{
    qsort(order, count, sizeof(*order), cmp_by_begin);
    for (size_t i = 1; i < count; i++) {
        const uint8_t *prev_end = (const uint8_t *)order[i - 1]->data + order[i - 1]->nbytes;
        if ((const uint8_t *)order[i]->data < prev_end)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "tensor '%s' overlaps tensor '%s'", order[i]->name,
                                     order[i - 1]->name);
    }
    return EMBER_OK;
}

/* Takes ownership of @image (freed, or unmapped when @mapped, on error
 * too). */
static ember_status_t st_load(uint8_t *image, size_t size, int mapped, ember_st_file_t **file_p,
                              char *err, size_t err_length)
{
    ember_status_t status;
    const ember_st_tensor_t **order = NULL;
    uint64_t hlen = 0;
    size_t count = 0;
    ember_st_file_t *f = calloc(1, sizeof(*f));

    if (!f) {
        if (mapped)
            munmap(image, size);
        else
            free(image);
        return EMBER_ERR_NO_MEMORY;
    }
    f->image = image;
    f->size = size;
    f->mapped = mapped;
    EMBER_CHECK_GOTO(st_header_length(image, size, &hlen, err, err_length), status, err_close);
    EMBER_CHECK_GOTO(st_parse_header(f, (size_t)hlen, err, err_length), status, err_close);
    EMBER_CHECK_GOTO(st_count_tensors(f->root, &count, err, err_length), status, err_close);
    f->tensors = calloc(count ? count : 1, sizeof(*f->tensors));
    f->by_name = calloc(count ? count : 1, sizeof(*f->by_name));
    order = calloc(count ? count : 1, sizeof(*order));
    status = EMBER_ERR_NO_MEMORY;
    if (!f->tensors || !f->by_name || !order)
        goto err_close;
    EMBER_CHECK_GOTO(
            st_parse_entries(f, image + 8 + hlen, size - 8 - (size_t)hlen, order, err, err_length),
            status, err_close);
    EMBER_CHECK_GOTO(st_index_names(f, err, err_length), status, err_close);
    EMBER_CHECK_GOTO(st_check_overlaps(order, count, err, err_length), status, err_close);
    free(order);
    (void)ember_status_text(err, err_length, EMBER_OK, "%s", "");
    *file_p = f;
    return EMBER_OK;

err_close:
    free(order);
    ember_st_close(f);
    return status;
}

ember_status_t ember_st_open_buffer(const void *buf, size_t size, ember_st_file_t **file_p,
                                    char *err, size_t err_length)
{
    uint8_t *image;
    ember_status_t status;

    if ((!buf && size > 0) || !file_p)
        return EMBER_ERR_INVALID_PARAM;
    image = malloc(size ? size : 1);
    if (!image)
        return EMBER_ERR_NO_MEMORY;
    if (size)
        memcpy(image, buf, size);
    status = st_load(image, size, 0, file_p, err, err_length);
    if (status != EMBER_OK)
        ember_error("safetensors", "buffer of %zu bytes: %s", size,
                    err ? err : ember_status_string(status));
    return status;
}

/* The @size bytes of @fd into a new buffer *image_p. */
static ember_status_t st_read_image(int fd, const char *path, off_t size, uint8_t **image_p,
                                    char *err, size_t err_length)
{
    size_t got = 0;
    uint8_t *image = malloc(size > 0 ? (size_t)size : 1);

    if (!image)
        return EMBER_ERR_NO_MEMORY;
    while (got < (size_t)size) {
        ssize_t r = read(fd, image + got, (size_t)size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            (void)ember_status_text(err, err_length, EMBER_OK, "cannot read %s: %s", path,
                                    r < 0 ? strerror(errno) : "file shrank while reading");
            ember_error("safetensors", "cannot read %s", path);
            free(image);
            return EMBER_ERR_IO;
        }
        got += (size_t)r;
    }
    *image_p = image;
    return EMBER_OK;
}

/* @path opened and its size taken; the cause in @err when not. */
static ember_status_t st_open_fd(const char *path, int *fd_p, off_t *size_p, char *err,
                                 size_t err_length)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0 || fstat(fd, &st) != 0) {
        (void)ember_status_text(err, err_length, EMBER_OK, "cannot open %s: %s", path,
                                strerror(errno));
        ember_error("safetensors", "cannot open %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return EMBER_ERR_IO;
    }
    *fd_p = fd;
    *size_p = st.st_size;
    return EMBER_OK;
}

/* The file's @size bytes mapped read-only; a file too short to be one
 * (mmap refuses an empty range) is read instead, for st_load's message. */
static ember_status_t st_map_image(int fd, const char *path, off_t size, uint8_t **image_p,
                                   int *mapped_p, char *err, size_t err_length)
{
    void *map;

    *mapped_p = 0;
    if (size < 8)
        return st_read_image(fd, path, size, image_p, err, err_length);
    map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        (void)ember_status_text(err, err_length, EMBER_OK, "cannot map %s (%lld bytes): %s", path,
                                (long long)size, strerror(errno));
        ember_error("safetensors", "cannot map %s: %s", path, strerror(errno));
        return EMBER_ERR_IO;
    }
    *image_p = map;
    *mapped_p = 1;
    return EMBER_OK;
}

/* ember_st_open (@map 0) and ember_st_map (@map 1). */
static ember_status_t st_open_path(const char *path, int map, ember_st_file_t **file_p, char *err,
                                   size_t err_length)
{
    uint8_t *image = NULL;
    ember_status_t status;
    off_t size = 0;
    int fd = -1, mapped = 0;

    if (!path || !file_p)
        return EMBER_ERR_INVALID_PARAM;
    EMBER_CHECK(st_open_fd(path, &fd, &size, err, err_length));
    if (map)
        status = st_map_image(fd, path, size, &image, &mapped, err, err_length);
    else
        status = st_read_image(fd, path, size, &image, err, err_length);
    close(fd);
    if (status != EMBER_OK)
        return status;
    /* st_load owns image from here. */
    status = st_load(image, (size_t)size, mapped, file_p, err, err_length);
    if (status != EMBER_OK)
        ember_error("safetensors", "%s: %s", path, err ? err : ember_status_string(status));
    return status;
}

ember_status_t ember_st_open(const char *path, ember_st_file_t **file_p, char *err,
                             size_t err_length)
{
    return st_open_path(path, 0, file_p, err, err_length);
}

ember_status_t ember_st_map(const char *path, ember_st_file_t **file_p, char *err,
                            size_t err_length)
{
    return st_open_path(path, 1, file_p, err, err_length);
}

size_t ember_st_count(const ember_st_file_t *file)
{
    return file->ntensors;
}

const ember_st_tensor_t *ember_st_tensor_at(const ember_st_file_t *file, size_t i)
{
    return i < file->ntensors ? &file->tensors[i] : NULL;
}

const ember_st_tensor_t *ember_st_find(const ember_st_file_t *file, const char *name)
{
    size_t lo = 0, hi = file->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(file->by_name[mid]->name, name);
        if (c == 0)
            return file->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *ember_st_metadata(const ember_st_file_t *file, const char *key)
{
    const json_node_t *m = file->meta ? json_member(file->meta, key) : NULL;
    return m ? m->str : NULL;
}

ember_status_t ember_st_read_copy(const ember_st_file_t *file, const char *name,
                                  ember_dtype_t dtype, void **data_p, size_t *numel_p)
{
    const ember_st_tensor_t *t = ember_st_find(file, name);
    void *copy;

    if (!t)
        return EMBER_ERR_NOT_FOUND;
    if (t->dtype != dtype) {
        ember_error("safetensors", "tensor '%s' is %s, expected %s", name,
                    ember_dtype_name(t->dtype), ember_dtype_name(dtype));
        return EMBER_ERR_FORMAT;
    }
    copy = malloc(t->nbytes ? t->nbytes : 1);
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    memcpy(copy, t->data, t->nbytes);
    *data_p = copy;
    if (numel_p)
        *numel_p = t->numel;
    return EMBER_OK;
}

/* ---------------------------------------------------------------- writer */

typedef struct {
    char *buf;
    size_t len, cap;
    int failed;
} strbuf_t;

static void sb_putn(strbuf_t *sb, const char *s, size_t n)
{
    if (!sb->failed && !EMBER_RESERVE(sb->buf, sb->cap, sb->len + n))
        sb->failed = 1;
    if (sb->failed)
        return;
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
}

static void sb_puts(strbuf_t *sb, const char *s)
{
    sb_putn(sb, s, strlen(s));
}

static void sb_printf(strbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(strbuf_t *sb, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_putn(sb, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void sb_json_string(strbuf_t *sb, const char *s)
{
    sb_puts(sb, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"')
            sb_puts(sb, "\\\"");
        else if (c == '\\')
            sb_puts(sb, "\\\\");
        else if (c < 0x20)
            sb_printf(sb, "\\u%04x", c);
        else
            sb_putn(sb, (const char *)&c, 1);
    }
    sb_puts(sb, "\"");
}

/* The "__metadata__" object of the header. */
static ember_status_t st_header_metadata(strbuf_t *sb, const char *path,
                                         const ember_st_meta_t *meta, size_t nmeta)
{
    sb_puts(sb, "\"__metadata__\":{");
    for (size_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value) {
            ember_error("safetensors", "write %s: metadata %zu is NULL", path, i);
            return EMBER_ERR_INVALID_PARAM;
        }
        if (i)
            sb_puts(sb, ",");
        sb_json_string(sb, meta[i].key);
        sb_puts(sb, ":");
        sb_json_string(sb, meta[i].value);
    }
    sb_puts(sb, "}");
    return EMBER_OK;
}

/* Tensor @i of @tensors can be written: a name no earlier one has, a known
 * dtype, a shape within range and data for it.  *size_p: its bytes. */
static ember_status_t st_check_written(const char *path, const ember_st_tensor_t *tensors, size_t i,
                                       int filled, size_t *size_p)
{
    const ember_st_tensor_t *t = &tensors[i];
    uint64_t numel = 1, esize = ember_dtype_size(t->dtype);

    if (!t->name || strcmp(t->name, "__metadata__") == 0 || esize == 0 ||
        t->ndim > EMBER_ST_MAX_DIMS) {
        ember_error("safetensors",
                    "write %s: tensor %zu ('%s') has a bad "
                    "name, dtype or rank",
                    path, i, t->name ? t->name : "(null)");
        return EMBER_ERR_INVALID_PARAM;
    }
    for (size_t j = 0; j < i; j++) {
        if (strcmp(tensors[j].name, t->name) == 0) {
            ember_error("safetensors", "write %s: tensor '%s' given twice", path, t->name);
            return EMBER_ERR_INVALID_PARAM;
        }
    }
    for (size_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || !numel_times(&numel, (uint64_t)t->shape[d])) {
            ember_error("safetensors",
                        "write %s: tensor '%s' has a bad "
                        "shape",
                        path, t->name);
            return EMBER_ERR_INVALID_PARAM;
        }
    }
    if (numel > SIZE_MAX / esize || (numel > 0 && !t->data && !filled)) {
        ember_error("safetensors", "write %s: tensor '%s' has no data", path, t->name);
        return EMBER_ERR_INVALID_PARAM;
    }
    *size_p = (size_t)(numel * esize);
    return EMBER_OK;
}

/* Tensor @t's entry of the header: its data at *offset_p, which moves past
 * its @size bytes. */
static void st_header_tensor(strbuf_t *sb, const ember_st_tensor_t *t, size_t size,
                             size_t *offset_p)
{
    sb_json_string(sb, t->name);
    sb_printf(sb, ":{\"dtype\":\"%s\",\"shape\":[", ember_dtype_name(t->dtype));
    for (size_t d = 0; d < t->ndim; d++)
        sb_printf(sb, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    sb_printf(sb, "],\"data_offsets\":[%zu,", *offset_p);
    *offset_p += size;
    sb_printf(sb, "%zu]}", *offset_p);
}

/* The whole JSON header, every argument checked; sizes[i]: tensor i's
 * bytes. */
static ember_status_t st_header(strbuf_t *sb, const char *path, const ember_st_tensor_t *tensors,
                                size_t ntensors, const ember_st_meta_t *meta, size_t nmeta,
                                int filled, size_t *sizes)
{
    size_t offset = 0;

    sb_puts(sb, "{");
    if (nmeta > 0)
        EMBER_CHECK(st_header_metadata(sb, path, meta, nmeta));
    for (size_t i = 0; i < ntensors; i++) {
        EMBER_CHECK(st_check_written(path, tensors, i, filled, &sizes[i]));
        if (i || nmeta)
            sb_puts(sb, ",");
        st_header_tensor(sb, &tensors[i], sizes[i], &offset);
    }
    sb_puts(sb, "}");
    /* Pad with spaces so the data starts 8-byte aligned (as the reference
     * implementation does); JSON ignores trailing whitespace. */
    sb_putn(sb, "       ", (8 - sb->len % 8) % 8);
    return sb->failed ? EMBER_ERR_NO_MEMORY : EMBER_OK;
}

/* Where a filled tensor's bytes come from: @fill, through @buf. */
typedef struct {
    ember_st_fill_cb fill;
    void *arg;
    uint8_t *buf; /* EMBER_ST_FILL_CHUNK */
} st_filler_t;

/* Tensor @i's @size bytes from its filler, a chunk at a time: straight
 * into a direct file's staging room, else through the filler's buffer. */
static ember_status_t st_write_filled_tensor(ember_durable_t *d, const st_filler_t *filler,
                                             size_t i, size_t size, char *err, size_t err_length)
{
    ember_status_t status = EMBER_OK;
    for (size_t at = 0, n; at < size && status == EMBER_OK; at += n) {
        size_t room = EMBER_ST_FILL_CHUNK;
        void *to = ember_durable_room(d, &room);
        n = size - at < room ? size - at : room;
        status = filler->fill(filler->arg, i, at, to ? to : filler->buf, n, err, err_length);
        if (status == EMBER_OK)
            status = to ? ember_durable_advance(d, n, err, err_length)
                        : ember_durable_write(d, filler->buf, n, err, err_length);
    }
    return status;
}

/* The header's length (little-endian on any host), the header, then the
 * tensors' data back to back, each straight from its tensor (or its
 * filler, @filler given and its data NULL). */
static ember_status_t st_write_contents(ember_durable_t *d, const strbuf_t *sb,
                                        const ember_st_tensor_t *tensors, size_t ntensors,
                                        const size_t *sizes, const st_filler_t *filler, char *err,
                                        size_t err_length)
{
    uint8_t len_le[8];

    for (int i = 0; i < 8; i++)
        len_le[i] = (uint8_t)((uint64_t)sb->len >> (8 * i));
    ember_status_t status = ember_durable_write(d, len_le, 8, err, err_length);
    if (status == EMBER_OK)
        status = ember_durable_write(d, sb->buf, sb->len, err, err_length);
    for (size_t i = 0; i < ntensors && status == EMBER_OK; i++)
        status = filler && !tensors[i].data
                         ? st_write_filled_tensor(d, filler, i, sizes[i], err, err_length)
                         : ember_durable_write(d, tensors[i].data, sizes[i], err, err_length);
    return status;
}

/* Written as "<path>.tmp", synced, renamed, the directory synced: @path
 * appears whole or not at all. */
static ember_status_t st_write_file(const char *path, const strbuf_t *sb,
                                    const ember_st_tensor_t *tensors, size_t ntensors,
                                    const size_t *sizes, const st_filler_t *filler,
                                    ember_st_written_t *written)
{
    char err[512] = "";
    ember_durable_t d;
    uint64_t bytes = 0;
    uint32_t crc = 0;

    ember_status_t status = filler ? ember_durable_open_direct(&d, path, err, sizeof(err))
                                   : ember_durable_open(&d, path, err, sizeof(err));
    if (status == EMBER_OK) {
        ember_status_t wrote =
                st_write_contents(&d, sb, tensors, ntensors, sizes, filler, err, sizeof(err));
        if (wrote != EMBER_OK && d.status == EMBER_OK)
            d.status = wrote; /* a filler's failure: the commit removes the file */
        status = ember_durable_commit(&d, &bytes, &crc, err, sizeof(err));
    }
    if (status != EMBER_OK) {
        ember_error("safetensors", "cannot write %s: %s", path, err);
        return status;
    }
    if (written)
        *written = (ember_st_written_t){.bytes = bytes, .crc32c = crc};
    return EMBER_OK;
}

/* The header, then the file; @filler NULL: every tensor's data given. */
static ember_status_t st_write_any(const char *path, const ember_st_tensor_t *tensors,
                                   size_t ntensors, const ember_st_meta_t *meta, size_t nmeta,
                                   const st_filler_t *filler, ember_st_written_t *written)
{
    strbuf_t sb = {0};
    ember_status_t status;
    size_t *sizes;

    if (!path || (ntensors > 0 && !tensors) || (nmeta > 0 && !meta))
        return EMBER_ERR_INVALID_PARAM;
    sizes = calloc(ntensors ? ntensors : 1, sizeof(*sizes));
    if (!sizes)
        return EMBER_ERR_NO_MEMORY;
    status = st_header(&sb, path, tensors, ntensors, meta, nmeta, filler != NULL, sizes);
    if (status == EMBER_OK)
        status = st_write_file(path, &sb, tensors, ntensors, sizes, filler, written);
    free(sizes);
    free(sb.buf);
    return status;
}

ember_status_t ember_st_write_durable(const char *path, const ember_st_tensor_t *tensors,
                                      size_t ntensors, const ember_st_meta_t *meta, size_t nmeta,
                                      ember_st_written_t *written)
{
    return st_write_any(path, tensors, ntensors, meta, nmeta, NULL, written);
}

ember_status_t ember_st_write_filled(const char *path, const ember_st_tensor_t *tensors,
                                     size_t ntensors, const ember_st_meta_t *meta, size_t nmeta,
                                     ember_st_fill_cb fill, void *arg, ember_st_written_t *written)
{
    if (!fill)
        return EMBER_ERR_INVALID_PARAM;
    st_filler_t filler = {.fill = fill, .arg = arg, .buf = malloc(EMBER_ST_FILL_CHUNK)};
    if (!filler.buf)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = st_write_any(path, tensors, ntensors, meta, nmeta, &filler, written);
    free(filler.buf);
    return status;
}

ember_status_t ember_st_write(const char *path, const ember_st_tensor_t *tensors, size_t ntensors,
                              const ember_st_meta_t *meta, size_t nmeta)
{
    return ember_st_write_durable(path, tensors, ntensors, meta, nmeta, NULL);
}
