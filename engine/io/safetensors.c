/* ember engine: safetensors reader/writer with a small JSON parser. */
#include "engine/io/safetensors.h"

#include <ember/log.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Parse a string at p->pos (at the opening quote) into a new C string. */
static int json_string(json_parser_t *p, char **out_p)
{
    /* Decoded text is never longer than the source text. */
    size_t start = ++p->pos, cap = 1, n = 0;
    for (size_t i = start; i < p->len && p->s[i] != '"'; i++)
        cap += (p->s[i] == '\\' && i + 1 < p->len) ? (i++, 2) : 1;
    char *out = malloc(cap + 4);
    if (!out)
        return json_fail(p, "out of memory");

    while (1) {
        if (p->pos >= p->len) {
            free(out);
            return json_fail(p, "unterminated string");
        }
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c == '"')
            break;
        if (c < 0x20) {
            free(out);
            return json_fail(p, "control character in string");
        }
        if (c != '\\') {
            out[n++] = (char)c;
            continue;
        }
        if (p->pos >= p->len) {
            free(out);
            return json_fail(p, "unterminated escape");
        }
        char e = p->s[p->pos++];
        unsigned cp;
        switch (e) {
        case '"': out[n++] = '"'; continue;
        case '\\': out[n++] = '\\'; continue;
        case '/': out[n++] = '/'; continue;
        case 'b': out[n++] = '\b'; continue;
        case 'f': out[n++] = '\f'; continue;
        case 'n': out[n++] = '\n'; continue;
        case 'r': out[n++] = '\r'; continue;
        case 't': out[n++] = '\t'; continue;
        case 'u':
            if (json_hex4(p, &cp) < 0) {
                free(out);
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    free(out);
                    return json_fail(p, "unpaired surrogate");
                }
                p->pos += 2;
                if (json_hex4(p, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) {
                    free(out);
                    return json_fail(p, "bad low surrogate");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(out);
                return json_fail(p, "unpaired surrogate");
            }
            if (cp == 0) {
                /* Names are C strings; an embedded NUL could alias two. */
                free(out);
                return json_fail(p, "\\u0000 in string");
            }
            /* 6 source bytes (\uXXXX) always cover <= 4 UTF-8 bytes. */
            if (cp < 0x80) {
                out[n++] = (char)cp;
            } else if (cp < 0x800) {
                out[n++] = (char)(0xC0 | (cp >> 6));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[n++] = (char)(0xE0 | (cp >> 12));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[n++] = (char)(0xF0 | (cp >> 18));
                out[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        default: free(out); return json_fail(p, "unknown escape");
        }
    }
    out[n] = '\0';
    *out_p = out;
    return 0;
}

static int json_number(json_parser_t *p, json_node_t *node)
{
    size_t start = p->pos;
    int neg = 0, frac = 0;
    uint64_t mag = 0;
    int overflow = 0;

    if (p->s[p->pos] == '-') {
        neg = 1;
        p->pos++;
    }
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return json_fail(p, "bad number");
    if (p->s[p->pos] == '0' && p->pos + 1 < p->len && p->s[p->pos + 1] >= '0' &&
        p->s[p->pos + 1] <= '9')
        return json_fail(p, "leading zero in number");
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos++] - '0');
        if (mag > (UINT64_MAX - d) / 10)
            overflow = 1;
        else
            mag = mag * 10 + d;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        frac = 1;
        p->pos++;
        if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
            return json_fail(p, "bad fraction");
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        frac = 1;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
            return json_fail(p, "bad exponent");
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
    }
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

static int json_container(json_parser_t *p, json_node_t *node, int is_obj)
{
    json_node_t **tail = &node->child;
    char close = is_obj ? '}' : ']';

    if (++p->depth > JSON_MAX_DEPTH)
        return json_fail(p, "nested too deeply");
    p->pos++; /* '{' or '[' */
    json_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        p->depth--;
        return 0;
    }
    while (1) {
        char *key = NULL;
        json_node_t *child;

        json_ws(p);
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return json_fail(p, "expected a member name");
            if (json_string(p, &key) < 0)
                return -1;
            json_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                free(key);
                return json_fail(p, "expected ':'");
            }
            p->pos++;
        }
        if (json_value(p, &child) < 0) {
            free(key);
            return -1;
        }
        child->key = key;
        *tail = child;
        tail = &child->next;
        json_ws(p);
        if (p->pos >= p->len)
            return json_fail(p, "unterminated object or array");
        if (p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            break;
        }
        return json_fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
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

/* Check one tensor entry of the header and fill @t. */
static ember_status_t st_parse_tensor(const json_node_t *e, const uint8_t *data, size_t data_size,
                                      ember_st_tensor_t *t, char *err, size_t err_length)
{
    const char *name = e->key;
    const json_node_t *dt, *shape, *offs;
    uint64_t numel = 1, begin, end, esize;
    size_t nd = 0;

    if (e->type != J_OBJ) {
        (void)ember_status_text(err, err_length, EMBER_OK, "tensor '%s': entry is not an object",
                                name);
        return EMBER_ERR_FORMAT;
    }
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    for (int i = 0; i < 3; i++) {
        if (json_count(e, fields[i]) > 1) {
            (void)ember_status_text(err, err_length, EMBER_OK, "tensor '%s': %s given twice", name,
                                    fields[i]);
            return EMBER_ERR_FORMAT;
        }
    }
    dt = json_member(e, "dtype");
    shape = json_member(e, "shape");
    offs = json_member(e, "data_offsets");
    if (!dt || dt->type != J_STR || !dtype_parse(dt->str, &t->dtype)) {
        (void)ember_status_text(
                err, err_length, EMBER_OK, "tensor '%s': missing or unknown dtype%s%s", name,
                dt && dt->type == J_STR ? " " : "", dt && dt->type == J_STR ? dt->str : "");
        return EMBER_ERR_FORMAT;
    }
    if (!shape || shape->type != J_ARR) {
        (void)ember_status_text(err, err_length, EMBER_OK, "tensor '%s': missing shape array",
                                name);
        return EMBER_ERR_FORMAT;
    }
    for (const json_node_t *d = shape->child; d; d = d->next, nd++) {
        if (nd >= EMBER_ST_MAX_DIMS) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "tensor '%s': more than %d dimensions", name,
                                    EMBER_ST_MAX_DIMS);
            return EMBER_ERR_FORMAT;
        }
        if (d->type != J_NUM || !d->is_int || d->ival < 0) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "tensor '%s': shape[%zu] is not a "
                                    "non-negative integer",
                                    name, nd);
            return EMBER_ERR_FORMAT;
        }
        t->shape[nd] = d->ival;
        /* Overflow-safe product; a zero dimension makes the tensor empty. */
        if (d->ival != 0 && numel > UINT64_MAX / (uint64_t)d->ival) {
            (void)ember_status_text(err, err_length, EMBER_OK, "tensor '%s': shape overflows",
                                    name);
            return EMBER_ERR_FORMAT;
        }
        numel *= (uint64_t)d->ival;
    }
    t->ndim = nd;
    if (!offs || offs->type != J_ARR || !offs->child || !offs->child->next ||
        offs->child->next->next || offs->child->type != J_NUM || offs->child->next->type != J_NUM ||
        !offs->child->is_int || !offs->child->next->is_int || offs->child->ival < 0 ||
        offs->child->next->ival < 0) {
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "tensor '%s': data_offsets must be two "
                                "non-negative integers",
                                name);
        return EMBER_ERR_FORMAT;
    }
    begin = (uint64_t)offs->child->ival;
    end = (uint64_t)offs->child->next->ival;
    if (begin > end || end > data_size) {
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "tensor '%s': data_offsets [%llu, %llu] out of "
                                "bounds of the %zu data bytes",
                                name, (unsigned long long)begin, (unsigned long long)end,
                                data_size);
        return EMBER_ERR_FORMAT;
    }
    esize = ember_dtype_size(t->dtype);
    if (numel > UINT64_MAX / esize || numel * esize != end - begin) {
        (void)ember_status_text(
                err, err_length, EMBER_OK,
                "tensor '%s': shape and dtype %s need %llu bytes "
                "but data_offsets span %llu",
                name, ember_dtype_name(t->dtype),
                (unsigned long long)(numel > UINT64_MAX / esize ? UINT64_MAX : numel * esize),
                (unsigned long long)(end - begin));
        return EMBER_ERR_FORMAT;
    }
    t->name = name;
    t->numel = (size_t)numel;
    t->nbytes = (size_t)(end - begin);
    t->data = data + begin;
    return EMBER_OK;
}

/* Takes ownership of @image (freed on error too). */
static ember_status_t st_load(uint8_t *image, size_t size, ember_st_file_t **file_p, char *err,
                              size_t err_length)
{
    ember_status_t status = EMBER_ERR_FORMAT;
    ember_st_file_t *f;
    uint64_t hlen = 0;
    size_t count = 0, k = 0;
    const ember_st_tensor_t **order = NULL;

    f = calloc(1, sizeof(*f));
    if (!f) {
        free(image);
        return EMBER_ERR_NO_MEMORY;
    }
    f->image = image;
    f->size = size;
    if (size < 8) {
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "file is %zu bytes, too short for the 8-byte "
                                "header length",
                                size);
        goto err_close;
    }
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | image[i]; /* little-endian on any host */
    if (hlen > size - 8 || hlen > EMBER_ST_MAX_HEADER || hlen < 2) {
        (void)ember_status_text(err, err_length, EMBER_OK,
                                "header length %llu does not fit the file of %zu "
                                "bytes (truncated or not safetensors)",
                                (unsigned long long)hlen, size);
        goto err_close;
    }
    f->header = malloc(hlen + 1);
    if (!f->header) {
        status = EMBER_ERR_NO_MEMORY;
        goto err_close;
    }
    memcpy(f->header, image + 8, hlen);
    f->header[hlen] = '\0';
    if (json_parse(f->header, hlen, &f->root, err, err_length) < 0)
        goto err_close;
    if (f->root->type != J_OBJ) {
        (void)ember_status_text(err, err_length, EMBER_OK, "header is not a JSON object");
        goto err_close;
    }

    size_t nmeta = 0;
    for (const json_node_t *e = f->root->child; e; e = e->next) {
        if (strcmp(e->key, "__metadata__") != 0)
            count++;
        else if (++nmeta > 1) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "__metadata__ appears twice in the header");
            goto err_close;
        }
    }
    f->tensors = calloc(count ? count : 1, sizeof(*f->tensors));
    f->by_name = calloc(count ? count : 1, sizeof(*f->by_name));
    order = calloc(count ? count : 1, sizeof(*order));
    if (!f->tensors || !f->by_name || !order) {
        status = EMBER_ERR_NO_MEMORY;
        goto err_close;
    }
    const uint8_t *data = image + 8 + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    for (const json_node_t *e = f->root->child; e; e = e->next) {
        if (strcmp(e->key, "__metadata__") == 0) {
            if (e->type != J_OBJ) {
                (void)ember_status_text(err, err_length, EMBER_OK, "__metadata__ is not an object");
                goto err_close;
            }
            for (const json_node_t *m = e->child; m; m = m->next) {
                if (m->type != J_STR) {
                    (void)ember_status_text(err, err_length, EMBER_OK,
                                            "__metadata__ value '%s' is not a "
                                            "string",
                                            m->key);
                    goto err_close;
                }
            }
            int failed;
            const char *twice = json_duplicate_key(e, &failed);
            if (failed || twice) {
                if (twice)
                    (void)ember_status_text(err, err_length, EMBER_OK,
                                            "__metadata__ key '%s' "
                                            "appears twice",
                                            twice);
                status = failed ? EMBER_ERR_NO_MEMORY : EMBER_ERR_FORMAT;
                goto err_close;
            }
            f->meta = e;
            continue;
        }
        status = st_parse_tensor(e, data, data_size, &f->tensors[k], err, err_length);
        if (status != EMBER_OK)
            goto err_close;
        order[k] = &f->tensors[k];
        k++;
    }
    f->ntensors = count;

    /* A name index: lookups in O(log n), and duplicates found in O(n log n)
     * even for a hostile header with very many entries. */
    for (size_t i = 0; i < count; i++)
        f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, count, sizeof(*f->by_name), cmp_by_name);
    for (size_t i = 1; i < count; i++) {
        if (strcmp(f->by_name[i]->name, f->by_name[i - 1]->name) == 0) {
            (void)ember_status_text(err, err_length, EMBER_OK,
                                    "tensor '%s' appears twice in the header", f->by_name[i]->name);
            status = EMBER_ERR_FORMAT;
            goto err_close;
        }
    }

    /* Tensors must not share bytes: a crafted file could otherwise make two
     * tensors alias, and a writer through one would change the other. */
    qsort(order, count, sizeof(*order), cmp_by_begin);
    for (size_t i = 1; i < count; i++) {
        const uint8_t *prev_end = (const uint8_t *)order[i - 1]->data + order[i - 1]->nbytes;
        if ((const uint8_t *)order[i]->data < prev_end) {
            (void)ember_status_text(err, err_length, EMBER_OK, "tensor '%s' overlaps tensor '%s'",
                                    order[i]->name, order[i - 1]->name);
            status = EMBER_ERR_FORMAT;
            goto err_close;
        }
    }
    free(order);
    (void)ember_status_text(err, err_length, EMBER_OK, "%s", "");
    *file_p = f;
    return EMBER_OK;

err_close:
    free(order);
    ember_st_close(f);
    if (status == EMBER_OK)
        status = EMBER_ERR_FORMAT;
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
    status = st_load(image, size, file_p, err, err_length);
    if (status != EMBER_OK)
        ember_error("safetensors", "buffer of %zu bytes: %s", size,
                    err ? err : ember_status_string(status));
    return status;
}

ember_status_t ember_st_open(const char *path, ember_st_file_t **file_p, char *err,
                             size_t err_length)
{
    struct stat st;
    uint8_t *image;
    size_t got = 0;
    ember_status_t status;
    int fd;

    if (!path || !file_p)
        return EMBER_ERR_INVALID_PARAM;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        (void)ember_status_text(err, err_length, EMBER_OK, "cannot open %s: %s", path,
                                strerror(errno));
        ember_error("safetensors", "cannot open %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return EMBER_ERR_IO;
    }
    image = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (!image) {
        close(fd);
        return EMBER_ERR_NO_MEMORY;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, image + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            (void)ember_status_text(err, err_length, EMBER_OK, "cannot read %s: %s", path,
                                    r < 0 ? strerror(errno) : "file shrank while reading");
            ember_error("safetensors", "cannot read %s", path);
            free(image);
            close(fd);
            return EMBER_ERR_IO;
        }
        got += (size_t)r;
    }
    close(fd);
    /* st_load owns image from here. */
    status = st_load(image, got, file_p, err, err_length);
    if (status != EMBER_OK)
        ember_error("safetensors", "%s: %s", path, err ? err : ember_status_string(status));
    return status;
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
    if (sb->failed)
        return;
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 256;
        while (cap < sb->len + n + 1)
            cap *= 2;
        char *p = realloc(sb->buf, cap);
        if (!p) {
            sb->failed = 1;
            return;
        }
        sb->buf = p;
        sb->cap = cap;
    }
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
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

static ember_status_t st_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return EMBER_ERR_IO;
        p += w;
        len -= (size_t)w;
    }
    return EMBER_OK;
}

ember_status_t ember_st_write(const char *path, const ember_st_tensor_t *tensors, size_t ntensors,
                              const ember_st_meta_t *meta, size_t nmeta)
{
    strbuf_t sb = {0};
    ember_status_t status = EMBER_ERR_INVALID_PARAM;
    size_t offset = 0, *sizes = NULL;
    char *tmp_path = NULL;
    int fd = -1;

    if (!path || (ntensors > 0 && !tensors) || (nmeta > 0 && !meta))
        return EMBER_ERR_INVALID_PARAM;
    sizes = calloc(ntensors ? ntensors : 1, sizeof(*sizes));
    if (!sizes)
        return EMBER_ERR_NO_MEMORY;

    sb_puts(&sb, "{");
    if (nmeta > 0) {
        sb_puts(&sb, "\"__metadata__\":{");
        for (size_t i = 0; i < nmeta; i++) {
            if (!meta[i].key || !meta[i].value) {
                ember_error("safetensors", "write %s: metadata %zu is NULL", path, i);
                goto out_free;
            }
            if (i)
                sb_puts(&sb, ",");
            sb_json_string(&sb, meta[i].key);
            sb_puts(&sb, ":");
            sb_json_string(&sb, meta[i].value);
        }
        sb_puts(&sb, "}");
    }
    for (size_t i = 0; i < ntensors; i++) {
        const ember_st_tensor_t *t = &tensors[i];
        uint64_t numel = 1, esize = ember_dtype_size(t->dtype);

        if (!t->name || strcmp(t->name, "__metadata__") == 0 || esize == 0 ||
            t->ndim > EMBER_ST_MAX_DIMS) {
            ember_error("safetensors",
                        "write %s: tensor %zu ('%s') has a bad "
                        "name, dtype or rank",
                        path, i, t->name ? t->name : "(null)");
            goto out_free;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(tensors[j].name, t->name) == 0) {
                ember_error("safetensors", "write %s: tensor '%s' given twice", path, t->name);
                goto out_free;
            }
        }
        for (size_t d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (t->shape[d] && numel > UINT64_MAX / (uint64_t)t->shape[d])) {
                ember_error("safetensors",
                            "write %s: tensor '%s' has a bad "
                            "shape",
                            path, t->name);
                goto out_free;
            }
            numel *= (uint64_t)t->shape[d];
        }
        if (numel > SIZE_MAX / esize || (numel > 0 && !t->data)) {
            ember_error("safetensors", "write %s: tensor '%s' has no data", path, t->name);
            goto out_free;
        }
        sizes[i] = (size_t)(numel * esize);
        if (i || nmeta)
            sb_puts(&sb, ",");
        sb_json_string(&sb, t->name);
        sb_printf(&sb, ":{\"dtype\":\"%s\",\"shape\":[", ember_dtype_name(t->dtype));
        for (size_t d = 0; d < t->ndim; d++)
            sb_printf(&sb, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        sb_printf(&sb, "],\"data_offsets\":[%zu,", offset);
        offset += sizes[i];
        sb_printf(&sb, "%zu]}", offset);
    }
    sb_puts(&sb, "}");
    /* Pad with spaces so the data starts 8-byte aligned (as the reference
     * implementation does); JSON ignores trailing whitespace. */
    while ((sb.len + 8) % 8 != 0)
        sb_puts(&sb, " ");
    if (sb.failed) {
        status = EMBER_ERR_NO_MEMORY;
        goto out_free;
    }

    tmp_path = malloc(strlen(path) + 5);
    if (!tmp_path) {
        status = EMBER_ERR_NO_MEMORY;
        goto out_free;
    }
    sprintf(tmp_path, "%s.tmp", path);
    fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        ember_error("safetensors", "cannot create %s: %s", tmp_path, strerror(errno));
        status = EMBER_ERR_IO;
        goto out_free;
    }
    uint8_t len_le[8];
    for (int i = 0; i < 8; i++)
        len_le[i] = (uint8_t)((uint64_t)sb.len >> (8 * i));
    status = st_write_all(fd, len_le, 8);
    if (status == EMBER_OK)
        status = st_write_all(fd, sb.buf, sb.len);
    for (size_t i = 0; i < ntensors && status == EMBER_OK; i++)
        status = st_write_all(fd, tensors[i].data, sizes[i]);
    if (status == EMBER_OK && fsync(fd) != 0)
        status = EMBER_ERR_IO;
    if (close(fd) != 0 && status == EMBER_OK)
        status = EMBER_ERR_IO;
    if (status == EMBER_OK && rename(tmp_path, path) != 0)
        status = EMBER_ERR_IO;
    if (status != EMBER_OK) {
        ember_error("safetensors", "cannot write %s: %s", path, strerror(errno));
        unlink(tmp_path);
    }

out_free:
    free(tmp_path);
    free(sizes);
    free(sb.buf);
    return status;
}
