/*
 * tests/engine/test_npy: the .npy reader (engine/io/npy).
 *
 *   numpy    NumPy's own files (argv: the folder tests/engine/npy_ref.py
 *            wrote): every dtype read with its shape and values, versions
 *            1.0, 2.0 and 3.0, a scalar, an empty array, 32 dimensions; a
 *            Fortran-order, a big-endian, a structured and a complex file
 *            refused as unsupported, naming the file
 *   header   headers by hand (ember_npy_parse_header): what NumPy may write
 *            besides its own spelling (double quotes, keys in any order, no
 *            trailing comma, Python 2's 5L) accepted, and each malformed
 *            one refused saying what is wrong: magic, version, the
 *            header's length, keys missing, repeated or unknown, a bad
 *            value, a shape that is not a tuple or overflows, bytes after
 *            the dict
 *   broken   whole files on disk: truncated data, bytes past the array, a
 *            header cut short, an empty file, a missing file, a folder:
 *            each refused naming the file
 */
#include "engine/io/npy.h"

#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An open of @dir/@name.npy; NULL (and the error printed) when refused. */
static ember_npy_t *open_named(const char *dir, const char *name)
{
    char path[512], err[512];
    ember_npy_t *npy = NULL;
    snprintf(path, sizeof(path), "%s/%s.npy", dir, name);
    if (ember_npy_open(path, &npy, err, sizeof(err)) != EMBER_OK) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return npy;
}

/* @npy has dtype @dtype and the @ndim dimensions @shape. */
static int has_shape(const ember_npy_t *npy, ember_npy_dtype_t dtype, uint32_t ndim,
                     const uint64_t *shape)
{
    const ember_npy_header_t *h = ember_npy_header(npy);
    uint64_t count = 1;
    CHECK(h->dtype == dtype && h->ndim == ndim, "%s: dtype %s ndim %u", ember_npy_path(npy),
          h->descr, h->ndim);
    for (uint32_t d = 0; d < ndim; d++) {
        CHECK(h->shape[d] == shape[d], "%s: dim %u is %llu", ember_npy_path(npy), d,
              (unsigned long long)h->shape[d]);
        count *= shape[d];
    }
    CHECK(h->count == count && h->data_bytes == count * h->itemsize, "%s: count %llu",
          ember_npy_path(npy), (unsigned long long)h->count);
    return 0;
}

#define LOAD(type, npy, i) (((const type *)ember_npy_data(npy))[i]) /* NumPy aligns to 16+ */

static int check_floats(const char *dir)
{
    ember_npy_t *f4 = open_named(dir, "f4_2d"), *f8 = open_named(dir, "f8_1d"),
                *f2 = open_named(dir, "f2_1d");
    CHECK(f4 && f8 && f2, "float files");
    if (has_shape(f4, EMBER_NPY_F4, 2, (uint64_t[]){3, 4}) ||
        has_shape(f8, EMBER_NPY_F8, 1, (uint64_t[]){5}) ||
        has_shape(f2, EMBER_NPY_F2, 1, (uint64_t[]){4}))
        return 1;
    for (int i = 0; i < 12; i++)
        CHECK(LOAD(float, f4, i) == 0.5f * (float)i, "f4[%d] %g", i, (double)LOAD(float, f4, i));
    for (int i = 0; i < 5; i++)
        CHECK(LOAD(double, f8, i) == i / 3.0, "f8[%d]", i);
    CHECK(LOAD(uint16_t, f2, 1) == 0x3e00, "f2[1] = 1.5 is 0x3e00: %#x", LOAD(uint16_t, f2, 1));
    CHECK(ember_npy_header(f4)->major == 1 && ember_npy_header(f4)->data_offset % 64 == 0,
          "np.save's 1.0, the data 64-aligned");
    ember_npy_close(f4);
    ember_npy_close(f8);
    ember_npy_close(f2);
    return 0;
}

static int check_ints(const char *dir)
{
    ember_npy_t *i4 = open_named(dir, "i4_1d"), *i8 = open_named(dir, "i8_3d"),
                *u8 = open_named(dir, "u8_1d"), *i2 = open_named(dir, "i2_1d"),
                *u2 = open_named(dir, "u2_1d"), *u4 = open_named(dir, "u4_1d");
    CHECK(i4 && i8 && u8 && i2 && u2 && u4, "integer files");
    if (has_shape(i4, EMBER_NPY_I4, 1, (uint64_t[]){10}) ||
        has_shape(i8, EMBER_NPY_I8, 3, (uint64_t[]){2, 3, 4}) ||
        has_shape(u8, EMBER_NPY_U8, 1, (uint64_t[]){3}) ||
        has_shape(i2, EMBER_NPY_I2, 1, (uint64_t[]){6}) ||
        has_shape(u2, EMBER_NPY_U2, 1, (uint64_t[]){3}) ||
        has_shape(u4, EMBER_NPY_U4, 1, (uint64_t[]){2}))
        return 1;
    for (int i = 0; i < 10; i++)
        CHECK(LOAD(int32_t, i4, i) == i - 5, "i4[%d]", i);
    for (int i = 0; i < 24; i++)
        CHECK(LOAD(int64_t, i8, i) == (int64_t)(i - 12) * 1000000000000, "i8[%d]", i);
    CHECK(LOAD(uint64_t, u8, 1) == 1ull << 63 && LOAD(uint64_t, u8, 2) == UINT64_MAX, "u8");
    CHECK(LOAD(int16_t, i2, 0) == -3 && LOAD(uint16_t, u2, 2) == 2000, "i2, u2");
    CHECK(LOAD(uint32_t, u4, 1) == UINT32_MAX, "u4");
    ember_npy_close(i4);
    ember_npy_close(i8);
    ember_npy_close(u8);
    ember_npy_close(i2);
    ember_npy_close(u2);
    ember_npy_close(u4);
    return 0;
}

static int check_bytes_and_shapes(const char *dir)
{
    ember_npy_t *u1 = open_named(dir, "u1_1d"), *i1 = open_named(dir, "i1_1d"),
                *b1 = open_named(dir, "bool_1d"), *scalar = open_named(dir, "scalar"),
                *empty = open_named(dir, "empty"), *dims = open_named(dir, "dims32");
    CHECK(u1 && i1 && b1 && scalar && empty && dims, "byte and shape files");
    uint64_t ones[32];
    for (int d = 0; d < 32; d++)
        ones[d] = d == 31 ? 2 : 1;
    if (has_shape(u1, EMBER_NPY_U1, 1, (uint64_t[]){256}) ||
        has_shape(i1, EMBER_NPY_I1, 1, (uint64_t[]){256}) ||
        has_shape(b1, EMBER_NPY_BOOL, 1, (uint64_t[]){3}) ||
        has_shape(scalar, EMBER_NPY_F4, 0, NULL) ||
        has_shape(empty, EMBER_NPY_F4, 2, (uint64_t[]){0, 13}) ||
        has_shape(dims, EMBER_NPY_I4, 32, ones))
        return 1;
    for (int i = 0; i < 256; i++)
        CHECK(LOAD(uint8_t, u1, i) == i && LOAD(int8_t, i1, i) == i - 128, "byte %d", i);
    CHECK(LOAD(uint8_t, b1, 0) == 1 && LOAD(uint8_t, b1, 1) == 0, "bool");
    CHECK(LOAD(float, scalar, 0) == 3.5f && LOAD(int32_t, dims, 1) == 1, "scalar, dims32");
    char text[64];
    ember_npy_shape_text(ember_npy_header(empty), text, sizeof(text));
    CHECK(strcmp(text, "(0, 13)") == 0, "shape text '%s'", text);
    ember_npy_close(u1);
    ember_npy_close(i1);
    ember_npy_close(b1);
    ember_npy_close(scalar);
    ember_npy_close(empty);
    ember_npy_close(dims);
    return 0;
}

static int check_versions(const char *dir)
{
    ember_npy_t *v2 = open_named(dir, "v2"), *v3 = open_named(dir, "v3");
    CHECK(v2 && v3, "version 2.0 and 3.0 files");
    if (has_shape(v2, EMBER_NPY_F4, 2, (uint64_t[]){2, 3}) ||
        has_shape(v3, EMBER_NPY_I8, 2, (uint64_t[]){3, 2}))
        return 1;
    CHECK(ember_npy_header(v2)->major == 2 && ember_npy_header(v3)->major == 3, "versions");
    CHECK(LOAD(float, v2, 5) == 5.0f && LOAD(int64_t, v3, 5) == 5, "values");
    ember_npy_close(v2);
    ember_npy_close(v3);
    return 0;
}

/* @dir/@name.npy refused with @status, the error naming it and holding @want. */
static int refused_file(const char *dir, const char *name, ember_status_t status, const char *want)
{
    char path[512], err[512] = "";
    ember_npy_t *npy = NULL;
    snprintf(path, sizeof(path), "%s/%s.npy", dir, name);
    ember_status_t got = ember_npy_open(path, &npy, err, sizeof(err));
    CHECK(got == status && npy == NULL && strstr(err, path) && strstr(err, want),
          "%s: status %d, '%s' lacks '%s'", name, got, err, want);
    return 0;
}

static int case_numpy(void)
{
    CHECK(test_argc >= 1, "usage: test_npy numpy DIR (npy_ref.py's)");
    const char *dir = test_argv[0];
    if (check_floats(dir) || check_ints(dir) || check_bytes_and_shapes(dir) || check_versions(dir))
        return 1;
    return refused_file(dir, "fortran", EMBER_ERR_UNSUPPORTED, "fortran_order True") ||
           refused_file(dir, "big_endian", EMBER_ERR_UNSUPPORTED, "dtype '>f4'") ||
           refused_file(dir, "structured", EMBER_ERR_UNSUPPORTED, "structured dtype") ||
           refused_file(dir, "complex", EMBER_ERR_UNSUPPORTED, "dtype '<c8'");
}

/* A .npy file's bytes: version @major.0, header @dict (padded with spaces
 * and a newline as NumPy does when @pad), then @data_bytes bytes. */
static size_t make_npy(uint8_t *out, size_t room, int major, const char *dict, int pad,
                       size_t data_bytes)
{
    size_t prelude = major == 1 ? 10 : 12, text = strlen(dict);
    size_t total = prelude + text + (pad ? 1 : 0);
    if (pad)
        total = (total + 63) / 64 * 64;
    size_t header = total - prelude;
    if (total + data_bytes > room)
        abort();
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)major;
    out[7] = 0;
    out[8] = (uint8_t)header;
    out[9] = (uint8_t)(header >> 8);
    if (major > 1)
        out[10] = out[11] = 0;
    memset(out + prelude, ' ', header);
    memcpy(out + prelude, dict, text);
    if (pad)
        out[total - 1] = '\n';
    for (size_t i = 0; i < data_bytes; i++)
        out[total + i] = (uint8_t)i;
    return total + data_bytes;
}

/* The header @dict (version @major) over @data_bytes bytes parses. */
static int accepted(int major, const char *dict, size_t data_bytes, ember_npy_header_t *h)
{
    static uint8_t bytes[1 << 16];
    char err[512] = "";
    size_t n = make_npy(bytes, sizeof(bytes), major, dict, 1, data_bytes);
    ember_status_t status = ember_npy_parse_header(bytes, n, n, h, err, sizeof(err));
    CHECK(status == EMBER_OK, "'%s' refused: %s", dict, err);
    return 0;
}

/* The header @dict over @data_bytes bytes refused with @status and @want. */
static int refused(const char *dict, size_t data_bytes, ember_status_t status, const char *want)
{
    static uint8_t bytes[1 << 16];
    char err[512] = "";
    ember_npy_header_t h;
    size_t n = make_npy(bytes, sizeof(bytes), 1, dict, 1, data_bytes);
    ember_status_t got = ember_npy_parse_header(bytes, n, n, &h, err, sizeof(err));
    CHECK(got == status && strstr(err, want), "'%s': status %d, '%s' lacks '%s'", dict, got, err,
          want);
    return 0;
}

static int header_accepted(void)
{
    ember_npy_header_t h;
    if (accepted(1, "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<i8\"}", 48, &h))
        return 1;
    CHECK(h.dtype == EMBER_NPY_I8 && h.ndim == 2 && h.shape[1] == 3 && h.count == 6, "reordered");
    if (accepted(2, "{'descr':'|u1','fortran_order':False,'shape':(7,),}", 7, &h))
        return 1;
    CHECK(h.major == 2 && h.data_offset % 64 == 0 && h.count == 7, "2.0 compact");
    if (accepted(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 4L)}", 48, &h))
        return 1;
    CHECK(h.shape[0] == 3 && h.shape[1] == 4, "Python 2's longs");
    if (accepted(3, "{'descr': '<u8', 'fortran_order': False, 'shape': (0, 18446744073709551615)}",
                 0, &h))
        return 1;
    CHECK(h.count == 0 && h.data_bytes == 0, "a zero dimension with a huge one: empty");
    return accepted(1, "{'descr': '<f8', 'fortran_order': False, 'shape': ( ) }", 8, &h);
}

static int header_refused_values(void)
{
    const char *ok_shape = "'fortran_order': False, 'shape': (2,)}";
    char dict[256];
    snprintf(dict, sizeof(dict), "{'descr': '>i4', %s", ok_shape);
    if (refused(dict, 8, EMBER_ERR_UNSUPPORTED, "dtype '>i4' is not read"))
        return 1;
    snprintf(dict, sizeof(dict), "{'descr': '|O', %s", ok_shape);
    if (refused(dict, 16, EMBER_ERR_UNSUPPORTED, "dtype '|O'"))
        return 1;
    snprintf(dict, sizeof(dict), "{'descr': <f4, %s", ok_shape);
    if (refused(dict, 8, EMBER_ERR_FORMAT, "expected a quoted string"))
        return 1;
    snprintf(dict, sizeof(dict), "{'descr': '<f4\\n', %s", ok_shape);
    if (refused(dict, 8, EMBER_ERR_FORMAT, "an escape"))
        return 1;
    return refused("{'descr': '<f4', 'fortran_order': True, 'shape': (2,)}", 8,
                   EMBER_ERR_UNSUPPORTED, "fortran_order True") ||
           refused("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", 8, EMBER_ERR_FORMAT,
                   "neither True nor False") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", 8, EMBER_ERR_FORMAT,
                   "not a tuple") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", 8, EMBER_ERR_FORMAT,
                   "expected a dimension") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", 8, EMBER_ERR_FORMAT,
                   "expected ',' or ')'") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,)}", 8,
                   EMBER_ERR_FORMAT, "past 2^64") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 8,
                   EMBER_ERR_FORMAT, "past 2^64 bytes") ||
           refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,)}", 8,
                   EMBER_ERR_FORMAT, "past 2^64 bytes") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 8, EMBER_ERR_FORMAT,
                   "12 bytes after the header, the file has 8 (truncated)") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 8, EMBER_ERR_FORMAT,
                   "(bytes past the array)");
}

static int header_refused_dict(void)
{
    return refused("['descr', '<f4']", 8, EMBER_ERR_FORMAT, "not a dict") ||
           refused("{'descr': '<f4', 'shape': (2,)}", 8, EMBER_ERR_FORMAT, "lacks") ||
           refused("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
                   EMBER_ERR_FORMAT, "header byte 27: a key given twice") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8,
                   EMBER_ERR_FORMAT, "a key other than") ||
           refused("{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", 8, EMBER_ERR_FORMAT,
                   "expected ':'") ||
           refused("{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, EMBER_ERR_FORMAT,
                   "expected ',' or '}'") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, EMBER_ERR_FORMAT,
                   "bytes after the dict") ||
           refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, EMBER_ERR_FORMAT,
                   "expected ',' or '}'") ||
           refused("{'descr: '<f4'}", 8, EMBER_ERR_FORMAT, "a key other than") ||
           refused("{'descr", 8, EMBER_ERR_FORMAT, "a string too long") ||
           refused("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,)}", 8,
                   EMBER_ERR_UNSUPPORTED, "structured");
}

/* Bytes that are not a header at all: magic, version, the length. */
static int header_refused_prelude(void)
{
    uint8_t bytes[256];
    char err[512] = "";
    ember_npy_header_t h;
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}";
    size_t n = make_npy(bytes, sizeof(bytes), 1, dict, 1, 4);
    CHECK(ember_npy_parse_header(bytes, 9, 9, &h, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "9 bytes, short of its magic"),
          "9 bytes: %s", err);
    bytes[1] = 'n';
    CHECK(ember_npy_parse_header(bytes, n, n, &h, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "bad magic"),
          "magic: %s", err);
    bytes[1] = 'N';
    bytes[6] = 4;
    CHECK(ember_npy_parse_header(bytes, n, n, &h, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "format version 4.0"),
          "version: %s", err);
    bytes[6] = 1;
    bytes[7] = 1;
    CHECK(ember_npy_parse_header(bytes, n, n, &h, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "format version 1.1"),
          "minor version: %s", err);
    bytes[7] = 0;
    bytes[9] = 0xff;
    CHECK(ember_npy_parse_header(bytes, n, n, &h, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "past the 132 bytes of the file (truncated)"),
          "header length: %s", err);
    n = make_npy(bytes, sizeof(bytes), 1, "{'desc", 0, 0); /* no padding after it */
    CHECK(ember_npy_parse_header(bytes, n, n, &h, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "header byte 16: a string without its closing quote"),
          "unterminated: %s", err);
    n = make_npy(bytes, sizeof(bytes), 2, dict, 1, 4);
    bytes[11] = 0x10; /* 256 MiB of header */
    CHECK(ember_npy_parse_header(bytes, n, n, &h, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "at most 1048576"),
          "huge header: %s", err);
    return 0;
}

static int case_header(void)
{
    return header_accepted() || header_refused_values() || header_refused_dict() ||
           header_refused_prelude();
}

static int write_bytes(const char *path, const uint8_t *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
    return 0;
}

static int case_broken(void)
{
    char dir[] = "/tmp/ember-npy-XXXXXX";
    static uint8_t bytes[4096];
    CHECK(mkdtemp(dir), "mkdtemp");
    const char *dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (10, 2)}";
    char path[128];
    snprintf(path, sizeof(path), "%s/cut.npy", dir);
    size_t n = make_npy(bytes, sizeof(bytes), 1, dict, 1, 160);
    if (write_bytes(path, bytes, n - 1) || refused_file(dir, "cut", EMBER_ERR_FORMAT,
                                                        "160 bytes after the header, the file "
                                                        "has 159 (truncated)"))
        return 1;
    snprintf(path, sizeof(path), "%s/long.npy", dir);
    ember_npy_t *npy = NULL;
    CHECK(write_bytes(path, bytes, n) == 0 && (npy = open_named(dir, "long")) &&
                  LOAD(uint64_t, npy, 19) == 0x9f9e9d9c9b9a9998ull,
          "the file whole opens, its last element read");
    ember_npy_close(npy);
    bytes[n] = 7;
    if (write_bytes(path, bytes, n + 1) ||
        refused_file(dir, "long", EMBER_ERR_FORMAT, "the file has 161 (bytes past the array)"))
        return 1;
    snprintf(path, sizeof(path), "%s/header.npy", dir);
    if (write_bytes(path, bytes, 40) ||
        refused_file(dir, "header", EMBER_ERR_FORMAT, "past the 40 bytes of the file"))
        return 1;
    snprintf(path, sizeof(path), "%s/empty.npy", dir);
    if (write_bytes(path, bytes, 0) || refused_file(dir, "empty", EMBER_ERR_FORMAT, "empty file"))
        return 1;
    snprintf(path, sizeof(path), "%s/folder.npy", dir);
    CHECK(mkdir(path, 0700) == 0, "mkdir");
    if (refused_file(dir, "folder", EMBER_ERR_FORMAT, "not a regular file") ||
        refused_file(dir, "missing", EMBER_ERR_IO, "No such file"))
        return 1;
    rmdir(path);
    const char *names[] = {"cut", "long", "header", "empty"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s.npy", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"numpy", case_numpy},
            {"header", case_header},
            {"broken", case_broken},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
