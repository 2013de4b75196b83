/* engine/io/npy: .npy headers and mapped arrays (see npy.h). */
#include "engine/io/npy.h"

#include <ember/log.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

static const struct {
    const char *descr;
    ember_npy_dtype_t dtype;
    size_t itemsize;
} npy_dtypes[] = {
        {"|b1", EMBER_NPY_BOOL, 1}, {"|i1", EMBER_NPY_I1, 1}, {"|u1", EMBER_NPY_U1, 1},
        {"<i2", EMBER_NPY_I2, 2},   {"<u2", EMBER_NPY_U2, 2}, {"<i4", EMBER_NPY_I4, 4},
        {"<u4", EMBER_NPY_U4, 4},   {"<i8", EMBER_NPY_I8, 8}, {"<u8", EMBER_NPY_U8, 8},
        {"<f2", EMBER_NPY_F2, 2},   {"<f4", EMBER_NPY_F4, 4}, {"<f8", EMBER_NPY_F8, 8},
};

/* The header's text and where the parse stands in it; @base is the text's
 * offset in the file, so an error names the byte of the file. */
typedef struct {
    const char *text;
    size_t length, pos, base;
    char *err;
    size_t err_length;
} cursor_t;

#define KEY_DESCR   1u
#define KEY_FORTRAN 2u
#define KEY_SHAPE   4u

static ember_status_t syntax(cursor_t *c, const char *what)
{
    return ember_status_text(c->err, c->err_length, EMBER_ERR_FORMAT, "header byte %zu: %s",
                             c->base + c->pos, what);
}

static int at(const cursor_t *c, char ch)
{
    return c->pos < c->length && c->text[c->pos] == ch;
}

static void skip_space(cursor_t *c)
{
    while (c->pos < c->length && (c->text[c->pos] == ' ' || c->text[c->pos] == '\t' ||
                                  c->text[c->pos] == '\n' || c->text[c->pos] == '\r'))
        c->pos++;
}

static ember_status_t expect(cursor_t *c, char ch, const char *what)
{
    skip_space(c);
    if (!at(c, ch))
        return syntax(c, what);
    c->pos++;
    skip_space(c);
    return EMBER_OK;
}

/* A quoted string without escapes (NumPy's dtypes and keys have none). */
static ember_status_t parse_string(cursor_t *c, char *out, size_t out_length)
{
    size_t n = 0;
    if (!at(c, '\'') && !at(c, '"'))
        return syntax(c, "expected a quoted string");
    char quote = c->text[c->pos++];
    for (; !at(c, quote); c->pos++, n++) {
        if (c->pos == c->length)
            return syntax(c, "a string without its closing quote");
        unsigned char ch = (unsigned char)c->text[c->pos];
        if (ch == '\\' || ch < 0x20 || ch > 0x7e)
            return syntax(c, "an escape or a non-printable byte in a string");
        if (n + 1 == out_length)
            return syntax(c, "a string too long for a key or a dtype");
        out[n] = (char)ch;
    }
    out[n] = '\0';
    c->pos++;
    return EMBER_OK;
}

static int take_word(cursor_t *c, const char *word)
{
    size_t n = strlen(word);
    if (c->length - c->pos < n || memcmp(c->text + c->pos, word, n) != 0)
        return 0;
    c->pos += n;
    return 1;
}

/* A dimension: decimal digits at full width (Python 2's 'L' suffix taken). */
static ember_status_t parse_dim(cursor_t *c, uint64_t *value_p)
{
    uint64_t value = 0;
    size_t start = c->pos;
    for (; c->pos < c->length && c->text[c->pos] >= '0' && c->text[c->pos] <= '9'; c->pos++) {
        uint64_t digit = (uint64_t)(c->text[c->pos] - '0');
        if (value > (UINT64_MAX - digit) / 10)
            return syntax(c, "a dimension past 2^64");
        value = value * 10 + digit;
    }
    if (c->pos == start)
        return syntax(c, "expected a dimension (a non-negative integer)");
    if (at(c, 'L'))
        c->pos++;
    *value_p = value;
    return EMBER_OK;
}

/* (), (N,), (N, M), ...: a tuple, so one dimension needs its comma. */
static ember_status_t parse_shape(cursor_t *c, ember_npy_header_t *h)
{
    int comma = 0;
    EMBER_CHECK(expect(c, '(', "expected the shape's '('"));
    h->ndim = 0;
    while (!at(c, ')')) {
        if (h->ndim == EMBER_NPY_MAX_DIMS)
            return syntax(c, "more than 64 dimensions");
        EMBER_CHECK(parse_dim(c, &h->shape[h->ndim]));
        h->ndim++;
        skip_space(c);
        comma = at(c, ',');
        if (!comma && !at(c, ')'))
            return syntax(c, "expected ',' or ')' in the shape");
        if (comma)
            EMBER_CHECK(expect(c, ',', "expected ','"));
    }
    if (h->ndim == 1 && !comma)
        return syntax(c, "the shape is not a tuple (one dimension is written (N,))");
    c->pos++;
    return EMBER_OK;
}

static ember_status_t take_descr(cursor_t *c, ember_npy_header_t *h)
{
    char descr[32];
    if (at(c, '['))
        return ember_status_text(c->err, c->err_length, EMBER_ERR_UNSUPPORTED,
                                 "a structured dtype (a list descr) is not read");
    EMBER_CHECK(parse_string(c, descr, sizeof(descr)));
    for (size_t i = 0; i < sizeof(npy_dtypes) / sizeof(npy_dtypes[0]); i++)
        if (strcmp(descr, npy_dtypes[i].descr) == 0) {
            h->descr = npy_dtypes[i].descr;
            h->dtype = npy_dtypes[i].dtype;
            h->itemsize = npy_dtypes[i].itemsize;
            return EMBER_OK;
        }
    return ember_status_text(c->err, c->err_length, EMBER_ERR_UNSUPPORTED,
                             "dtype '%s' is not read (bool, int8-64, uint8-64 and float16-64, "
                             "little-endian: '|b1', '|i1', '|u1', '<i2' ... '<f8')",
                             descr);
}

static ember_status_t take_fortran(cursor_t *c)
{
    if (take_word(c, "False"))
        return EMBER_OK;
    if (take_word(c, "True"))
        return ember_status_text(c->err, c->err_length, EMBER_ERR_UNSUPPORTED,
                                 "fortran_order True (column-major) is not read: save the "
                                 "array in C order (np.ascontiguousarray)");
    return syntax(c, "fortran_order is neither True nor False");
}

/* One "'key': value" of the dict, each of the three keys once. */
static ember_status_t take_entry(cursor_t *c, ember_npy_header_t *h, unsigned *seen)
{
    char key[32];
    size_t key_pos = c->pos;
    EMBER_CHECK(parse_string(c, key, sizeof(key)));
    unsigned bit = strcmp(key, "descr") == 0           ? KEY_DESCR
                   : strcmp(key, "fortran_order") == 0 ? KEY_FORTRAN
                   : strcmp(key, "shape") == 0         ? KEY_SHAPE
                                                       : 0;
    if (!bit || (*seen & bit)) {
        c->pos = key_pos; /* the error names the key's byte */
        return syntax(c, bit ? "a key given twice"
                             : "a key other than 'descr', 'fortran_order' and 'shape'");
    }
    *seen |= bit;
    EMBER_CHECK(expect(c, ':', "expected ':' after the key"));
    if (bit == KEY_DESCR)
        return take_descr(c, h);
    if (bit == KEY_FORTRAN)
        return take_fortran(c);
    return parse_shape(c, h);
}

static ember_status_t parse_dict(cursor_t *c, ember_npy_header_t *h)
{
    unsigned seen = 0;
    EMBER_CHECK(expect(c, '{', "the header is not a dict (expected '{')"));
    while (!at(c, '}')) {
        EMBER_CHECK(take_entry(c, h, &seen));
        skip_space(c);
        if (at(c, ','))
            EMBER_CHECK(expect(c, ',', "expected ','"));
        else if (!at(c, '}'))
            return syntax(c, "expected ',' or '}' after a value");
    }
    c->pos++;
    skip_space(c);
    if (c->pos != c->length)
        return syntax(c, "bytes after the dict's '}'");
    if (seen != (KEY_DESCR | KEY_FORTRAN | KEY_SHAPE))
        return syntax(c, "the dict lacks 'descr', 'fortran_order' or 'shape'");
    return EMBER_OK;
}

/* The shape's bytes at full width, against what the file holds. */
static ember_status_t check_size(ember_npy_header_t *h, uint64_t file_size, char *err,
                                 size_t err_length)
{
    char shape[96];
    uint64_t count = 1;
    int empty = 0, overflow = 0;
    for (uint32_t d = 0; d < h->ndim; d++)
        empty |= h->shape[d] == 0;
    for (uint32_t d = 0; d < h->ndim && !empty && !overflow; d++) {
        overflow = count > UINT64_MAX / h->shape[d];
        count *= overflow ? 1 : h->shape[d];
    }
    ember_npy_shape_text(h, shape, sizeof(shape));
    if (overflow || count > UINT64_MAX / h->itemsize)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "shape %s of %s is past 2^64 bytes", shape, h->descr);
    h->count = empty ? 0 : count;
    h->data_bytes = h->count * h->itemsize;
    uint64_t room = file_size - h->data_offset;
    if (h->data_bytes != room)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "shape %s of %s is %" PRIu64 " bytes after the header, the file "
                                 "has %" PRIu64 " (%s)",
                                 shape, h->descr, h->data_bytes, room,
                                 h->data_bytes > room ? "truncated" : "bytes past the array");
    return EMBER_OK;
}

/* The magic, the version and the header's length: the header's text is
 * *text_p bytes from *prelude_p. */
static ember_status_t parse_prelude(const uint8_t *b, size_t length, uint64_t file_size,
                                    ember_npy_header_t *h, size_t *prelude_p, uint64_t *text_p,
                                    char *err, size_t err_length)
{
    if (length < 10)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "not a .npy file (%zu bytes, short of its magic and version)",
                                 length);
    if (memcmp(b, npy_magic, sizeof(npy_magic)) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "not a .npy file (bad magic, not \\x93NUMPY)");
    h->major = b[6];
    h->minor = b[7];
    if ((h->major < 1 || h->major > 3) || h->minor != 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "format version %u.%u (1.0, 2.0 and 3.0 are read)", h->major,
                                 h->minor);
    size_t prelude = h->major == 1 ? 10 : 12;
    if (length < prelude)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "truncated in the header's length");
    uint64_t text = h->major == 1 ? (uint64_t)b[8] | (uint64_t)b[9] << 8
                                  : (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 |
                                            (uint64_t)b[11] << 24;
    if (text > EMBER_NPY_HEADER_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "a header of %" PRIu64 " bytes (at most %d are read)", text,
                                 EMBER_NPY_HEADER_MAX);
    if (prelude + text > file_size)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "a header of %" PRIu64 " bytes, past the %" PRIu64
                                 " bytes of the file (truncated)",
                                 text, file_size);
    if (prelude + text > length)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a header of %" PRIu64 " bytes, past the %zu bytes given", text,
                                 length);
    *prelude_p = prelude;
    *text_p = text;
    return EMBER_OK;
}

ember_status_t ember_npy_parse_header(const void *bytes, size_t length, uint64_t file_size,
                                      ember_npy_header_t *header_p, char *err, size_t err_length)
{
    ember_npy_header_t h = {0};
    size_t prelude = 0;
    uint64_t text = 0;
    if (length > file_size)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%zu bytes of a file of %" PRIu64, length, file_size);
    EMBER_CHECK(parse_prelude(bytes, length, file_size, &h, &prelude, &text, err, err_length));
    cursor_t c = {.text = (const char *)bytes + prelude,
                  .length = (size_t)text,
                  .base = prelude,
                  .err = err,
                  .err_length = err_length};
    EMBER_CHECK(parse_dict(&c, &h));
    h.data_offset = prelude + text;
    EMBER_CHECK(check_size(&h, file_size, err, err_length));
    *header_p = h;
    return EMBER_OK;
}

void ember_npy_shape_text(const ember_npy_header_t *header, char *text, size_t length)
{
    size_t used = 0;
    if (length == 0)
        return;
    text[0] = '\0';
    for (uint32_t d = 0; d <= header->ndim && used < length; d++) {
        int n = d == header->ndim
                        ? snprintf(text + used, length - used, "%s)", header->ndim == 1 ? "," : "")
                        : snprintf(text + used, length - used, "%s%" PRIu64, d ? ", " : "(",
                                   header->shape[d]);
        used += n > 0 ? (size_t)n : 0;
    }
    if (header->ndim == 0)
        snprintf(text, length, "()");
}

struct ember_npy {
    char *path;
    void *map;
    size_t map_bytes;
    ember_npy_header_t header;
};

/* @npy's file mapped whole. */
static ember_status_t map_file(ember_npy_t *npy, char *err, size_t err_length)
{
    struct stat st;
    int fd = open(npy->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return ember_status_text(err, err_length, EMBER_ERR_IO, "%s: %s", npy->path, strerror(e));
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 1 || (uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 S_ISREG(st.st_mode) ? "%s: an empty file, not a .npy file"
                                                     : "%s: not a regular file",
                                 npy->path);
    }
    npy->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (npy->map == MAP_FAILED) {
        npy->map = NULL;
        return ember_status_text(err, err_length, EMBER_ERR_IO, "%s: mmap: %s", npy->path,
                                 strerror(e));
    }
    npy->map_bytes = (size_t)st.st_size;
    return EMBER_OK;
}

ember_status_t ember_npy_open(const char *path, ember_npy_t **npy_p, char *err, size_t err_length)
{
    char why[512];
    ember_status_t status;
    ember_npy_t *npy = calloc(1, sizeof(*npy));
    if (!npy || !(npy->path = strdup(path))) {
        free(npy);
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    EMBER_CHECK_GOTO(map_file(npy, err, err_length), status, err_close);
    status = ember_npy_parse_header(npy->map, npy->map_bytes, npy->map_bytes, &npy->header, why,
                                    sizeof(why));
    if (status != EMBER_OK) {
        ember_status_text(err, err_length, status, "%s: %s", path, why);
        goto err_close;
    }
    *npy_p = npy;
    return EMBER_OK;

err_close:
    ember_npy_close(npy);
    return status;
}

const ember_npy_header_t *ember_npy_header(const ember_npy_t *npy)
{
    return &npy->header;
}

const void *ember_npy_data(const ember_npy_t *npy)
{
    return (const uint8_t *)npy->map + npy->header.data_offset;
}

const char *ember_npy_path(const ember_npy_t *npy)
{
    return npy->path;
}

void ember_npy_close(ember_npy_t *npy)
{
    if (!npy)
        return;
    if (npy->map)
        munmap(npy->map, npy->map_bytes);
    free(npy->path);
    free(npy);
}
