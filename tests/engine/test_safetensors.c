/* safetensors: round trip, the golden files, and malformed-file rejection. */
#include "engine/io/safetensors.h"

#include "common/crc32c.h"
#include "engine/io/durable.h"

#include "test_util.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* A file image from a header text and @dlen data bytes (pattern-filled). */
static uint8_t *make_image(const char *header, size_t dlen, size_t *size_p)
{
    size_t hlen = strlen(header);
    uint8_t *img = malloc(8 + hlen + dlen + 1);
    for (int i = 0; i < 8; i++)
        img[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(img + 8, header, hlen);
    for (size_t i = 0; i < dlen; i++)
        img[8 + hlen + i] = (uint8_t)i;
    *size_p = 8 + hlen + dlen;
    return img;
}

/* Open an image that must be rejected with ERR_FORMAT and a message holding
 * each of @words. */
static int expect_format(const char *label, const uint8_t *img, size_t size,
                         const char *const *words)
{
    ember_st_file_t *f = NULL;
    char msg[256] = "";
    ember_status_t s = ember_st_open_buffer(img, size, &f, msg, sizeof(msg));
    if (s == EMBER_OK)
        ember_st_close(f);
    CHECK(s == EMBER_ERR_FORMAT, "%s: status %s, expected ERR_FORMAT", label,
          ember_status_string(s));
    for (; words && *words; words++)
        CHECK(strstr(msg, *words), "%s: message '%s' lacks '%s'", label, msg, *words);
    fprintf(stderr, "%s: rejected: %s\n", label, msg);
    return 0;
}

static int expect_header_format(const char *label, const char *header, size_t dlen,
                                const char *word)
{
    size_t size;
    uint8_t *img = make_image(header, dlen, &size);
    const char *words[] = {word, NULL};
    int rc = expect_format(label, img, size, words);
    free(img);
    return rc;
}

/* The round trip's tensors and metadata: every dtype's edge values, a
 * scalar, an empty tensor, and names and texts that need escaping. */
static const float rt_a[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e30f};
static const int64_t rt_b[4] = {INT64_MIN, -1, 0, INT64_MAX};
static const double rt_c = 3.141592653589793;
static const uint8_t rt_d[3] = {1, 0, 255}; /* odd length: next tensor unaligned */
static const float rt_e[2] = {7.0f, 8.0f};
static const ember_st_tensor_t rt_tensors[] = {
        {.name = "layer.a", .dtype = EMBER_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = rt_a},
        {.name = "b", .dtype = EMBER_DTYPE_I64, .ndim = 1, .shape = {4}, .data = rt_b},
        {.name = "scalar", .dtype = EMBER_DTYPE_F64, .ndim = 0, .data = &rt_c},
        {.name = "empty", .dtype = EMBER_DTYPE_F32, .ndim = 2, .shape = {0, 5}, .data = NULL},
        {.name = "bytes", .dtype = EMBER_DTYPE_U8, .ndim = 1, .shape = {3}, .data = rt_d},
        {.name = "we\"ird\\name\n",
         .dtype = EMBER_DTYPE_F32,
         .ndim = 1,
         .shape = {2},
         .data = rt_e},
};
static const ember_st_meta_t rt_meta[] = {
        {"format", "pt"}, {"quote", "a\"b\\c\nd\te"}, {"utf8", "h\xc3\xa9llo"}};

/* Written in place of the temporary file, its data 8-byte aligned as the
 * reference writer keeps it. */
static int rt_write(const char *path)
{
    CHECK(ember_st_write(path, rt_tensors, 6, rt_meta, 3) == EMBER_OK, "write");
    CHECK(access(path, F_OK) == 0, "file not there");
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "temporary file left behind");

    FILE *fp = fopen(path, "rb");
    uint8_t len_le[8];
    CHECK(fp && fread(len_le, 1, 8, fp) == 8, "read header length");
    fclose(fp);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | len_le[i];
    CHECK((8 + hlen) % 8 == 0, "header length %llu leaves data unaligned",
          (unsigned long long)hlen);
    return 0;
}

/* Every tensor back as written: dtype, shape, sizes, bytes. */
static int rt_check_tensors(ember_st_file_t *f)
{
    CHECK(ember_st_count(f) == 6, "count %zu", ember_st_count(f));
    CHECK(strcmp(ember_st_tensor_at(f, 0)->name, "layer.a") == 0 &&
                  ember_st_tensor_at(f, 6) == NULL,
          "header order");
    for (size_t i = 0; i < 6; i++) {
        const ember_st_tensor_t *t = &rt_tensors[i];
        const ember_st_tensor_t *r = ember_st_find(f, t->name);
        CHECK(r, "tensor '%s' missing", t->name);
        CHECK(r->dtype == t->dtype && r->ndim == t->ndim, "'%s' dtype/rank", t->name);
        size_t numel = 1;
        for (size_t k = 0; k < r->ndim; k++) {
            CHECK(r->shape[k] == t->shape[k], "'%s' shape[%zu]", t->name, k);
            numel *= (size_t)r->shape[k];
        }
        CHECK(r->numel == numel, "'%s' numel %zu", t->name, r->numel);
        CHECK(r->nbytes == numel * ember_dtype_size(r->dtype), "'%s' nbytes", t->name);
        CHECK(numel == 0 || memcmp(r->data, t->data, r->nbytes) == 0, "'%s' data differs", t->name);
    }
    CHECK(ember_st_find(f, "nope") == NULL, "missing tensor found");
    return 0;
}

/* The metadata back unescaped; a tensor copied out, in its dtype only. */
static int rt_check_meta_copy(ember_st_file_t *f)
{
    CHECK(strcmp(ember_st_metadata(f, "format"), "pt") == 0, "metadata format");
    CHECK(strcmp(ember_st_metadata(f, "quote"), "a\"b\\c\nd\te") == 0,
          "escaped metadata came back as '%s'", ember_st_metadata(f, "quote"));
    CHECK(strcmp(ember_st_metadata(f, "utf8"), "h\xc3\xa9llo") == 0, "utf8");
    CHECK(ember_st_metadata(f, "nope") == NULL, "missing metadata found");

    void *copy;
    size_t numel;
    CHECK(ember_st_read_copy(f, "b", EMBER_DTYPE_I64, &copy, &numel) == EMBER_OK && numel == 4,
          "read_copy");
    CHECK(((int64_t *)copy)[0] == INT64_MIN && ((int64_t *)copy)[3] == INT64_MAX,
          "read_copy values");
    free(copy);
    CHECK(ember_st_read_copy(f, "b", EMBER_DTYPE_F32, &copy, NULL) == EMBER_ERR_FORMAT,
          "dtype mismatch accepted");
    CHECK(ember_st_read_copy(f, "zz", EMBER_DTYPE_F32, &copy, NULL) == EMBER_ERR_NOT_FOUND,
          "missing tensor copied");
    return 0;
}

/* The writer refuses what it could not write faithfully. */
static int rt_writer_refuses(const char *path)
{
    ember_st_tensor_t dup[2] = {rt_tensors[0], rt_tensors[0]};
    CHECK(ember_st_write(path, dup, 2, NULL, 0) == EMBER_ERR_INVALID_PARAM,
          "duplicate names written");
    ember_st_tensor_t reserved = rt_tensors[0];
    reserved.name = "__metadata__";
    CHECK(ember_st_write(path, &reserved, 1, NULL, 0) == EMBER_ERR_INVALID_PARAM,
          "__metadata__ written as a tensor");
    CHECK(ember_st_write("/nonexistent-dir/x.safetensors", rt_tensors, 1, NULL, 0) == EMBER_ERR_IO,
          "write into a missing directory");
    return 0;
}

static int case_roundtrip(void)
{
    char path[] = "/tmp/ember_st_XXXXXX", msg[256];
    int fd = mkstemp(path);
    ember_st_file_t *f;

    CHECK(fd >= 0, "mkstemp");
    close(fd);
    if (rt_write(path))
        return 1;
    CHECK(ember_st_open(path, &f, msg, sizeof(msg)) == EMBER_OK, "open: %s", msg);
    unlink(path);
    int rc = rt_check_tensors(f) || rt_check_meta_copy(f);
    ember_st_close(f);
    return rc || rt_writer_refuses(path);
}

static int case_golden(void)
{
    char path[4096], msg[256];
    ember_st_file_t *f;

    CHECK(test_argc >= 1, "golden directory not given");
    snprintf(path, sizeof(path), "%s/seed_sum_2t.safetensors", test_argv[0]);
    CHECK(ember_st_open(path, &f, msg, sizeof(msg)) == EMBER_OK, "%s: %s", path, msg);
    CHECK(strcmp(ember_st_metadata(f, "rows"), "100") == 0, "rows");
    CHECK(strcmp(ember_st_metadata(f, "mode"), "sum") == 0, "mode");
    /* 3 params + 100 steps x 2 trainers x 3 + 4 expected. */
    CHECK(ember_st_count(f) == 3 + 600 + 4, "count %zu", ember_st_count(f));
    const ember_st_tensor_t *w = ember_st_find(f, "emb.weight");
    CHECK(w && w->dtype == EMBER_DTYPE_F32 && w->ndim == 2 && w->shape[0] == 100 &&
                  w->shape[1] == 16,
          "emb.weight");
    const ember_st_tensor_t *l = ember_st_find(f, "expected.loss");
    CHECK(l && l->shape[0] == 100 && l->shape[1] == 2, "expected.loss");
    const ember_st_tensor_t *i = ember_st_find(f, "t1.s99.indices");
    CHECK(i && i->dtype == EMBER_DTYPE_I64 && i->ndim == 1, "t1.s99.indices");
    ember_st_close(f);
    return 0;
}

static int case_truncated(void)
{
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                      "\"data_offsets\":[0,16]}}";
    size_t size;
    uint8_t *img = make_image(hdr, 16, &size);
    const char *short_words[] = {"too short", NULL};
    const char *hdr_words[] = {"header length", "does not fit", NULL};
    const char *data_words[] = {"'w'", "out of bounds", NULL};
    int rc = expect_format("4 bytes", img, 4, short_words) ||
             expect_format("empty", img, 0, short_words) ||
             expect_format("inside header", img, 8 + strlen(hdr) - 1, hdr_words) ||
             expect_format("inside data", img, size - 1, data_words);
    /* And the whole image opens. */
    ember_st_file_t *f;
    if (!rc && ember_st_open_buffer(img, size, &f, NULL, 0) != EMBER_OK) {
        fprintf(stderr, "FAIL the untruncated image does not open\n");
        rc = 1;
    } else if (!rc) {
        ember_st_close(f);
    }
    free(img);

    /* A truncated file on disk, through the path API. */
    char path[] = "/tmp/ember_st_trunc_XXXXXX", msg[256];
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    img = make_image(hdr, 16, &size);
    CHECK(write(fd, img, size - 5) == (ssize_t)(size - 5), "write");
    close(fd);
    free(img);
    CHECK(ember_st_open(path, &f, msg, sizeof(msg)) == EMBER_ERR_FORMAT && strstr(msg, "'w'"),
          "truncated file: '%s'", msg);
    unlink(path);
    CHECK(ember_st_open(path, &f, msg, sizeof(msg)) == EMBER_ERR_IO && strstr(msg, "cannot open"),
          "missing file: '%s'", msg);
    return rc;
}

static int case_offsets_out_of_bounds(void)
{
    return expect_header_format("end past data",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                                8, "'a'") ||
           expect_header_format("begin > end",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}",
                                8, "out of bounds") ||
           expect_header_format("huge offset",
                                "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
                                "\"data_offsets\":[18446744073709551615,0]}}",
                                8, "'a'") ||
           expect_header_format("negative offset",
                                "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}",
                                8, "non-negative") ||
           expect_header_format("size mismatch",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
                                8, "need 12 bytes") ||
           expect_header_format("shape overflow",
                                "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                                "\"data_offsets\":[0,8]}}",
                                8, "'a'") ||
           expect_header_format("overlap",
                                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                                12, "overlaps");
}

static int case_bad_json(void)
{
    static const struct {
        const char *label, *header, *word;
    } bad[] = {
            {"trailing comma", "{\"a\":{\"dtype\":\"F32\",}}", "JSON"},
            {"missing colon", "{\"a\" 1}", "expected ':'"},
            {"not an object", "[1, 2]", "not a JSON object"},
            {"trailing garbage", "{} x", "trailing"},
            {"unterminated string", "{\"abc", "unterminated"},
            {"bad escape", "{\"a\\q\":1}", "escape"},
            {"control char", "{\"a\nb\":1}", "control"},
            {"lone surrogate", "{\"\\ud800\":1}", "surrogate"},
            {"bad literal", "{\"a\":tru}", "JSON"},
            {"leading zero", "{\"a\":01}", "leading zero"},
            {"deep nesting",
             "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]"
             "]]]]]]]]]]]]]]]]]}",
             "nested"},
            {"unknown dtype", "{\"a\":{\"dtype\":\"Q8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
             "Q8"},
            {"no shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "shape"},
            {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
             "shape[0]"},
            {"fractional dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
             "shape[0]"},
            {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
             "data_offsets"},
            {"entry not object", "{\"a\":5}", "'a'"},
            {"duplicate tensor",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
             "twice"},
            {"metadata not strings", "{\"__metadata__\":{\"k\":1}}", "'k'"},
            /* A reader keeping the first and one keeping the last would see
         * two different files. */
            {"duplicate metadata key",
             "{\"__metadata__\":{\"steps\":\"1\",\"k\":\"\",\"steps\":\"4294967296\"}}",
             "'steps' appears twice"},
            {"duplicate dtype",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"dtype\":\"U8\","
             "\"data_offsets\":[0,4]}}",
             "dtype given twice"},
            {"duplicate shape",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"shape\":[2],"
             "\"data_offsets\":[0,1]}}",
             "shape given twice"},
            {"duplicate offsets",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
             "\"data_offsets\":[1,2]}}",
             "data_offsets given twice"},
            {"metadata not object", "{\"__metadata__\":[]}", "__metadata__"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (expect_header_format(bad[i].label, bad[i].header, 16, bad[i].word))
            return 1;
    }
    /* A header length larger than any sane header, in a file that is big
     * enough to hold the 8 bytes only. */
    uint8_t img[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    const char *words[] = {"header length", NULL};
    return expect_format("huge header length", img, sizeof(img), words);
}

static int case_json_escapes(void)
{
    /* \u escapes (BMP and a surrogate pair) decode to UTF-8; whitespace and
     * an empty metadata key are fine. */
    const char *hdr = " {\n \"__metadata__\" : {\"k\\u00e9\": \"\\ud83d\\ude00\\/\","
                      " \"\": \"\"},\n \"t\\u0041\": {\"dtype\": \"BOOL\", "
                      "\"shape\": [], \"data_offsets\": [0, 1]}\t} ";
    size_t size;
    uint8_t *img = make_image(hdr, 1, &size);
    ember_st_file_t *f;
    char msg[256];
    ember_status_t s = ember_st_open_buffer(img, size, &f, msg, sizeof(msg));
    free(img);
    CHECK(s == EMBER_OK, "open: %s", msg);
    const char *v = ember_st_metadata(f, "k\xc3\xa9");
    int ok = v && strcmp(v, "\xf0\x9f\x98\x80/") == 0 && ember_st_metadata(f, "") &&
             ember_st_find(f, "tA") && ember_st_find(f, "tA")->ndim == 0 &&
             ember_st_find(f, "tA")->numel == 1;
    ember_st_close(f);
    CHECK(ok, "escapes not decoded (value '%s')", v ? v : "(null)");
    return 0;
}

/* Empty tensors take no bytes: one at the offset where another begins
 * (as safetensors' writer places them) is no overlap, whichever comes first
 * in the header; one inside another's bytes still is. */
static int case_empty_tensors(void)
{
    static const char *const ok[] = {
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
            "\"e\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]}}",
            "{\"e\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]},"
            "\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
            "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
            "\"e\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[8,8]}}",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        size_t size;
        uint8_t *img = make_image(ok[i], 8, &size);
        ember_st_file_t *f;
        char msg[256] = "";
        ember_status_t s = ember_st_open_buffer(img, size, &f, msg, sizeof(msg));
        free(img);
        CHECK(s == EMBER_OK, "header %zu: %s", i, msg);
        CHECK(ember_st_find(f, "e") && ember_st_find(f, "e")->numel == 0 &&
                      ember_st_find(f, "a")->nbytes == 8,
              "header %zu: tensors wrong", i);
        ember_st_close(f);
    }
    return expect_header_format("empty inside another",
                                "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                                "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                                8, "overlaps");
}

/* The whole of @path into a new buffer; *size_p its size. */
static uint8_t *read_whole(const char *path, size_t *size_p)
{
    struct stat st;
    FILE *fp = fopen(path, "rb");
    uint8_t *b = fp && stat(path, &st) == 0 ? malloc((size_t)st.st_size + 1) : NULL;
    size_t got = b ? fread(b, 1, (size_t)st.st_size, fp) : 0;
    if (fp)
        fclose(fp);
    if (b && got != (size_t)st.st_size) {
        free(b);
        b = NULL;
    }
    *size_p = got;
    return b;
}

/* The round trip's tensors and one of several chunks (not a multiple of
 * the chunk) into @t; *big_p its data, for the caller to free. */
static int big_tensors(ember_st_tensor_t t[7], uint8_t **big_p)
{
    size_t nbig = 3 * EMBER_DURABLE_CHUNK + 12345;
    uint8_t *big = malloc(nbig);
    CHECK(big, "no memory");
    for (size_t i = 0; i < nbig; i++)
        big[i] = (uint8_t)(i * 2654435761u >> 11);
    memcpy(t, rt_tensors, sizeof(rt_tensors));
    t[6] = (ember_st_tensor_t){.name = "big",
                               .dtype = EMBER_DTYPE_U8,
                               .ndim = 1,
                               .shape = {(int64_t)nbig},
                               .data = big};
    *big_p = big;
    return 0;
}

/* Size and CRC as the file has them; every tensor back through the
 * mapping; a mapped file cut short refused as the reader refuses it. */
static int case_durable_map(void)
{
    char path[] = "/tmp/ember_st_XXXXXX", msg[256] = "";
    int fd = mkstemp(path);
    ember_st_written_t w = {0};
    ember_st_file_t *f = NULL;
    uint8_t *big = NULL, *bytes;
    size_t size;

    ember_st_tensor_t t[7];
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    if (big_tensors(t, &big))
        return 1;
    CHECK(ember_st_write_durable(path, t, 7, rt_meta, 3, &w) == EMBER_OK, "durable write");
    bytes = read_whole(path, &size);
    CHECK(bytes && w.bytes == size, "written says %llu bytes, the file has %zu",
          (unsigned long long)w.bytes, size);
    CHECK(w.crc32c == ember_crc32c(0, bytes, size), "written CRC %08x, the file's %08x", w.crc32c,
          ember_crc32c(0, bytes, size));
    CHECK(ember_st_map(path, &f, msg, sizeof(msg)) == EMBER_OK, "map: %s", msg);
    const ember_st_tensor_t *b = ember_st_find(f, "big");
    CHECK(b && b->nbytes == 3 * EMBER_DURABLE_CHUNK + 12345 && memcmp(b->data, big, b->nbytes) == 0,
          "big tensor differs");
    int rc = rt_check_meta_copy(f);
    ember_st_close(f);
    CHECK(rc == 0, "metadata through the mapping");
    CHECK(truncate(path, (off_t)(size - 1)) == 0, "truncate");
    CHECK(ember_st_map(path, &f, msg, sizeof(msg)) == EMBER_ERR_FORMAT, "a cut file mapped");
    fprintf(stderr, "cut file refused: %s\n", msg);
    unlink(path);
    free(bytes);
    free(big);
    return 0;
}

/* ember_st_write_filled's source in the test: the tensors' own bytes,
 * asked for in order, a chunk at most at a time; it fails at @fail_at. */
typedef struct {
    const ember_st_tensor_t *tensors;
    size_t tensor;
    uint64_t next, fail_at, asked;
    int out_of_order;
} filled_src_t;

static ember_status_t fill_from(void *arg, size_t tensor, uint64_t offset, void *buf, size_t length,
                                char *err, size_t err_length)
{
    filled_src_t *src = arg;
    if (tensor != src->tensor) {
        src->tensor = tensor;
        src->next = 0;
    }
    src->out_of_order |= offset != src->next || length > EMBER_ST_FILL_CHUNK || length == 0;
    src->next = offset + length;
    src->asked += length;
    if (src->fail_at && src->asked >= src->fail_at)
        return ember_status_text(err, err_length, EMBER_ERR_CANCELED, "the test's fill fails");
    memcpy(buf, (const uint8_t *)src->tensors[tensor].data + offset, length);
    return EMBER_OK;
}

/* A file whose tensors come from a callback (and is written direct, past
 * the page cache, where /tmp allows it) is byte for byte the file written
 * from the tensors, its size and CRC too; a fill that fails leaves none. */
static int case_durable_filled(void)
{
    char dir[] = "/tmp/ember_st_XXXXXX", ref[256], filled[256], tmp[300];
    ember_st_written_t wr = {0}, wf = {0};
    uint8_t *big = NULL;
    ember_st_tensor_t t[7], holes[7];
    size_t ref_size, filled_size;

    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(ref, sizeof(ref), "%s/ref.safetensors", dir);
    snprintf(filled, sizeof(filled), "%s/filled.safetensors", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", filled);
    if (big_tensors(t, &big))
        return 1;
    CHECK(ember_st_write_durable(ref, t, 7, rt_meta, 3, &wr) == EMBER_OK, "reference");
    for (size_t i = 0; i < 7; i++) { /* every other one from the callback, the big one too */
        holes[i] = t[i];
        if (i % 2 == 0 || t[i].nbytes > EMBER_DURABLE_CHUNK)
            holes[i].data = NULL;
    }
    filled_src_t src = {.tensors = t, .tensor = SIZE_MAX};
    CHECK(ember_st_write_filled(filled, holes, 7, rt_meta, 3, fill_from, &src, &wf) == EMBER_OK,
          "filled write");
    CHECK(!src.out_of_order, "the fill was asked out of order or for too much");
    uint8_t *a = read_whole(ref, &ref_size), *b = read_whole(filled, &filled_size);
    CHECK(a && b && ref_size == filled_size && memcmp(a, b, ref_size) == 0,
          "the filled file differs from the reference (%zu and %zu bytes)", ref_size, filled_size);
    CHECK(wf.bytes == wr.bytes && wf.crc32c == wr.crc32c, "written %llu/%08x, reference %llu/%08x",
          (unsigned long long)wf.bytes, wf.crc32c, (unsigned long long)wr.bytes, wr.crc32c);
    unlink(filled);
    filled_src_t failing = {.tensors = t, .tensor = SIZE_MAX, .fail_at = 2 * EMBER_DURABLE_CHUNK};
    CHECK(ember_st_write_filled(filled, holes, 7, rt_meta, 3, fill_from, &failing, &wf) ==
                  EMBER_ERR_CANCELED,
          "a failing fill");
    CHECK(access(filled, F_OK) != 0 && access(tmp, F_OK) != 0, "a failed write left a file");
    unlink(ref);
    rmdir(dir);
    free(a);
    free(b);
    free(big);
    return 0;
}

/* A write that fails leaves no file: into a missing directory, and one
 * stopped by the file-size limit half way (the file that was at @path
 * before stays as it was). */
static int case_durable_fails(void)
{
    char dir[] = "/tmp/ember_st_XXXXXX", path[256], tmp[300];
    ember_st_written_t w = {.bytes = 7};
    size_t before_size, after_size;

    CHECK(ember_st_write_durable("/nonexistent-dir/x.safetensors", rt_tensors, 1, NULL, 0, &w) ==
                          EMBER_ERR_IO &&
                  w.bytes == 7,
          "write into a missing directory");
    CHECK(access("/nonexistent-dir/x.safetensors.tmp", F_OK) != 0, "tmp file there");
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof(path), "%s/x.safetensors", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(ember_st_write_durable(path, rt_tensors, 6, rt_meta, 3, NULL) == EMBER_OK, "first");
    uint8_t *before = read_whole(path, &before_size);

    struct rlimit limit = {.rlim_cur = 1u << 20, .rlim_max = RLIM_INFINITY};
    signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead */
    CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0, "setrlimit");
    uint8_t *big = NULL;
    ember_st_tensor_t t[7];
    if (big_tensors(t, &big))
        return 1;
    CHECK(ember_st_write_durable(path, t, 7, rt_meta, 3, &w) == EMBER_ERR_IO && w.bytes == 7,
          "a write past the size limit");
    CHECK(access(tmp, F_OK) != 0, "%s left behind", tmp);
    uint8_t *after = read_whole(path, &after_size);
    CHECK(before && after && before_size == after_size && memcmp(before, after, after_size) == 0,
          "the earlier file changed");
    unlink(path);
    rmdir(dir);
    free(before);
    free(after);
    free(big);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"roundtrip", case_roundtrip},
            {"golden", case_golden},
            {"truncated", case_truncated},
            {"offsets_out_of_bounds", case_offsets_out_of_bounds},
            {"bad_json", case_bad_json},
            {"json_escapes", case_json_escapes},
            {"empty_tensors", case_empty_tensors},
            {"durable_map", case_durable_map},
            {"durable_fails", case_durable_fails},
            {"durable_filled", case_durable_filled},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
