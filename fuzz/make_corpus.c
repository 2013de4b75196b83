/*
 * fuzz/make_corpus: writes the seed corpus of every fuzz target,
 * fuzz/corpus/<target>/seed-*, small valid and near-valid inputs in each
 * target's input layout (fuzz/fuzz_input.h records; the comments at the
 * top of each fuzz_<target>.c).  Built with the targets:
 *   build-fuzz/fuzz/make_corpus fuzz/corpus          (re)write the seeds
 *   build-fuzz/fuzz/make_corpus --check fuzz/corpus  exit 1 if they differ
 * Inputs the fuzzer found (regress-*) sit beside them and are left alone.
 */
#include "engine/io/safetensors.h"
#include "engine/wire/codec.h"
#include "engine/wire/protocol.h"
#include "models/dlrm/dlrm.h"
#include "models/tutorial/tutorial.h"
#include "tools/ember-train/messages.h"
#include "tools/ember-train/settings.h"
#include "transport/store.h"
#include "transport/tp_internal.h"

#include <ember/embedding_bag.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint8_t *data;
    size_t length, capacity;
} blob_t;

static const char *out_dir;
static int checking, differ;

static void put(blob_t *b, const void *bytes, size_t n)
{
    if (n == 0)
        return;
    if (b->length + n > b->capacity) {
        b->capacity = (b->length + n) * 2 + 64;
        b->data = realloc(b->data, b->capacity);
        if (!b->data)
            abort();
    }
    memcpy(b->data + b->length, bytes, n);
    b->length += n;
}

static void put_u8(blob_t *b, uint8_t v)
{
    put(b, &v, 1);
}

/* One record: [op][u16 length][payload]. */
static void record(blob_t *b, uint8_t op, const void *payload, size_t n)
{
    uint8_t head[3] = {op, (uint8_t)n, (uint8_t)(n >> 8)};
    put(b, head, 3);
    put(b, payload, n);
}

static void save(const char *target, const char *name, const void *data, size_t n)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", out_dir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        abort();
    snprintf(path, sizeof(path), "%s/%s/seed-%s", out_dir, target, name);
    if (checking) {
        FILE *f = fopen(path, "rb");
        uint8_t *have = malloc(n + 1);
        size_t got = f ? fread(have, 1, n + 1, f) : 0;
        if (!f || got != n || memcmp(have, data, n) != 0) {
            fprintf(stderr, "make_corpus: %s is not what the generator writes\n", path);
            differ = 1;
        }
        if (f)
            fclose(f);
        free(have);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "make_corpus: cannot write %s\n", path);
        exit(2);
    }
}

static void save_blob(const char *target, const char *name, blob_t *b)
{
    save(target, name, b->data, b->length);
    free(b->data);
    *b = (blob_t){0};
}

/* ------------------------------------------------------------ safetensors */

/* A file as ember_st_write makes it (the writer's own output). */
static void st_written(const char *name, const ember_st_tensor_t *t, size_t nt,
                       const ember_st_meta_t *meta, size_t nmeta)
{
    char path[] = "/tmp/make_corpus_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ember_st_write(path, t, nt, meta, nmeta) != EMBER_OK)
        abort();
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    unlink(path);
    close(fd);
    save("safetensors", name, buf, n);
}

/* A file from its header text and @data bytes of zeros. */
static void st_raw(const char *name, const char *header, size_t data)
{
    blob_t b = {0};
    uint64_t n = strlen(header);
    for (int i = 0; i < 8; i++)
        put_u8(&b, (uint8_t)(n >> (8 * i)));
    put(&b, header, n);
    for (size_t i = 0; i < data; i++)
        put_u8(&b, 0);
    save_blob("safetensors", name, &b);
}

static void corpus_safetensors(void)
{
    float f[6] = {1, 2, 3, 4, 5, 6};
    int64_t l[4] = {0, 1, 2, 3};
    uint8_t bytes[16] = {0};
    ember_st_tensor_t two[] = {
            {.name = "emb.weight", .dtype = EMBER_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = f},
            {.name = "t0.s0.indices", .dtype = EMBER_DTYPE_I64, .ndim = 1, .shape = {4}, .data = l},
    };
    ember_st_meta_t meta[] = {{"rows", "100"}, {"mode", "sum"}, {"lr", "0.5"}};
    st_written("small", two, 2, meta, 3);
    ember_st_tensor_t kinds[] = {
            {.name = "f64", .dtype = EMBER_DTYPE_F64, .ndim = 1, .shape = {2}, .data = bytes},
            {.name = "f16", .dtype = EMBER_DTYPE_F16, .ndim = 2, .shape = {2, 2}, .data = bytes},
            {.name = "bf16", .dtype = EMBER_DTYPE_BF16, .ndim = 1, .shape = {1}, .data = bytes},
            {.name = "i32", .dtype = EMBER_DTYPE_I32, .ndim = 3, .shape = {1, 1, 2}, .data = bytes},
            {.name = "i16", .dtype = EMBER_DTYPE_I16, .ndim = 0, .data = bytes},
            {.name = "i8", .dtype = EMBER_DTYPE_I8, .ndim = 1, .shape = {0}, .data = bytes},
            {.name = "u8", .dtype = EMBER_DTYPE_U8, .ndim = 1, .shape = {3}, .data = bytes},
            {.name = "bool", .dtype = EMBER_DTYPE_BOOL, .ndim = 1, .shape = {1}, .data = bytes},
    };
    st_written("dtypes", kinds, sizeof(kinds) / sizeof(kinds[0]), NULL, 0);
    ember_st_tensor_t odd[] = {
            {.name = "quote\"back\\slash",
             .dtype = EMBER_DTYPE_U8,
             .ndim = 1,
             .shape = {1},
             .data = bytes},
            {.name = "tab\tnew\nline\x01",
             .dtype = EMBER_DTYPE_U8,
             .ndim = 1,
             .shape = {1},
             .data = bytes},
            {.name = "caf\xc3\xa9",
             .dtype = EMBER_DTYPE_U8,
             .ndim = 1,
             .shape = {1},
             .data = bytes},
    };
    ember_st_meta_t odd_meta[] = {{"k\"ey", "v\\al\x1f"}};
    st_written("escapes", odd, 3, odd_meta, 1);
    st_raw("empty", "{}", 0);
    st_raw("meta_only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0);
    st_raw("unicode",
           "{\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\":{\"dtype\":\"U8\",\"shape\":[2],"
           "\"data_offsets\":[0,2]}, \"n\": {\"dtype\":\"F32\",\"shape\":[1e0],"
           "\"data_offsets\":[2,6]}}",
           6);
    st_raw("numbers",
           "{\"a\":{\"dtype\":\"I8\",\"shape\":[-0, 1.5, 2E+3, 0],"
           "\"data_offsets\":[0,0],\"x\":[true,false,null,{},[]]}}",
           0);
    st_raw("past_end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    st_raw("overlap",
           "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
           8);
    st_raw("duplicate",
           "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
           "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
           2);
    st_raw("bad_dtype", "{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    st_raw("deep", "{\"__metadata__\":{\"k\":\"v\"},\"a\":[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}", 0);
    st_raw("huge_shape",
           "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
           "\"data_offsets\":[0,0]}}",
           0);
    st_raw("meta_number", "{\"__metadata__\":{\"rows\":100}}", 0);
}

/* ---------------------------------------------------------------- tables */

/* fuzz/fuzz_table.h's three bytes. */
static void table_bytes(blob_t *b, int async, int half, int mean, int opt, int shards, int zeroed,
                        int dim, int trainers, int shard, int rows)
{
    put_u8(b,
           (uint8_t)(async | half << 1 | mean << 2 | opt << 3 | (shards - 1) << 5 | zeroed << 7));
    put_u8(b, (uint8_t)((dim - 1) | (trainers - 1) << 4 | shard << 6));
    put_u8(b, (uint8_t)(rows - 1));
}

/* A LOOKUP message (header and arrays, laid out where the codec's layout
 * has them, whatever they hold) as one record. */
static void lookup_record(blob_t *b, uint8_t op, uint32_t trainer, uint64_t step, uint32_t flags,
                          uint32_t bags, const uint32_t *offsets, uint32_t unique,
                          const int64_t *rows, uint32_t n, const uint32_t *inverse,
                          const void *extra)
{
    ember_msg_lookup_t msg = {.trainer = trainer,
                              .step = step,
                              .flags = flags,
                              .bags = bags,
                              .unique = unique,
                              .indices = n};
    ember_wire_lookup_layout_t at;
    ember_wire_lookup_layout(&msg, &at);
    uint8_t *m = calloc(1, (size_t)at.size);
    if (!m)
        abort();
    memcpy(m, &msg, sizeof(msg));
    memcpy(m + at.offsets, offsets, 4ull * bags);
    for (uint32_t i = 0; i < n; i++) {
        memcpy(m + at.entries + at.entry_bytes * i, &inverse[i], 4);
        if (at.entry_bytes == 8)
            memcpy(m + at.entries + at.entry_bytes * i + 4, (const uint8_t *)extra + 4 * i, 4);
    }
    memcpy(m + at.rows, rows, 8ull * unique);
    for (uint32_t u = 0; (flags & EMBER_LOOKUP_ROWS) && u < unique; u++) {
        /* a cached lookup's held versions: none, then copies of clock u - 1 */
        const uint64_t held = u == 0 ? EMBER_ROW_NONE : u - 1;
        memcpy(m + at.held + 8ull * u, &held, 8);
    }
    record(b, op, m, (size_t)at.size);
    free(m);
}

static void corpus_lookup(void)
{
    static const uint32_t off[] = {0, 2}, inv[] = {0, 1, 1}, places[] = {0, 1, 0};
    static const int64_t rows[] = {3, 9}, wrong_shard[] = {2, 3}, unsorted[] = {9, 3};
    static const float weights[] = {0.5f, -1.0f, 2.0f};
    static const uint32_t bad_off[] = {1, 0};
    blob_t b = {0};

    table_bytes(&b, 0, 0, 0, 0, 1, 0, 4, 2, 0, 16);
    lookup_record(&b, 1, 0, 0, 0, 2, off, 2, rows, 3, inv, NULL);
    lookup_record(&b, 1, 1, 0, EMBER_LOOKUP_WEIGHTS, 2, off, 2, rows, 3, inv, weights);
    save_blob("lookup", "sum_weighted", &b);

    table_bytes(&b, 0, 0, 0, 0, 1, 1, 3, 1, 0, 16); /* zeroed rows: ties */
    lookup_record(&b, 1, 0, 0, EMBER_LOOKUP_MAX, 2, off, 2, rows, 3, inv, places);
    lookup_record(&b, 1, 0, 1, EMBER_LOOKUP_MAX | EMBER_LOOKUP_HALF_REPLY, 2, off, 2, rows, 3, inv,
                  places);
    save_blob("lookup", "max_ties_half", &b);

    table_bytes(&b, 1, 1, 0, 3, 2, 0, 5, 3, 1, 20); /* async fp16 adam, shard 1 of 2 */
    lookup_record(&b, 0, 2, 7, EMBER_LOOKUP_MAX, 2, off, 2, rows, 3, inv, places);
    lookup_record(&b, 1, 2, 8, 0, 2, off, 2, rows, 3, inv, NULL); /* context open */
    lookup_record(&b, 1, 0, 0, EMBER_LOOKUP_HALF_REPLY, 2, off, 2, wrong_shard, 3, inv, NULL);
    save_blob("lookup", "fp16_shards_open", &b);

    table_bytes(&b, 0, 0, 1, 1, 1, 0, 2, 1, 0, 8);
    lookup_record(&b, 1, 0, 0, 0, 2, bad_off, 2, rows, 3, inv, NULL);
    lookup_record(&b, 1, 0, 0, 0, 2, off, 2, unsorted, 3, inv, NULL);
    lookup_record(&b, 1, 0, 0, 0, 0, off, 0, rows, 0, inv, NULL);
    lookup_record(&b, 1, 5, 0, 0, 2, off, 2, rows, 3, inv, NULL); /* no trainer 5 */
    save_blob("lookup", "refused", &b);

    /* cached lookups (EMBER_LOOKUP_ROWS): plain, weighted, an evaluation;
     * with max pooling refused */
    table_bytes(&b, 0, 0, 0, 0, 1, 0, 4, 2, 0, 16);
    lookup_record(&b, 1, 0, 0, EMBER_LOOKUP_ROWS, 2, off, 2, rows, 3, inv, NULL);
    lookup_record(&b, 0, 1, 0, EMBER_LOOKUP_ROWS | EMBER_LOOKUP_WEIGHTS, 2, off, 2, rows, 3, inv,
                  weights);
    lookup_record(&b, 1, 0, 1, EMBER_LOOKUP_ROWS | EMBER_LOOKUP_EVAL, 2, off, 2, rows, 3, inv,
                  NULL);
    lookup_record(&b, 1, 0, 1, EMBER_LOOKUP_ROWS | EMBER_LOOKUP_MAX, 2, off, 2, rows, 3, inv,
                  places);
    save_blob("lookup", "rows", &b);
}

/* A LOOKUPS of tables @ids (each the lookup of bags {3, 9, 9}, {} with
 * @flags[k]; @bad: table k's last row 200 instead, or -1) as one record. */
static void lookups_record(blob_t *b, uint8_t op, uint32_t trainer, uint64_t step,
                           const uint32_t *ids, const uint32_t *flags, size_t n, int bad)
{
    static const uint32_t counts[] = {3, 0}, places[] = {0, 1, 2};
    static const int64_t inverse[] = {0, 1, 1};
    static const float weights[] = {0.5f, -1.0f, 2.0f};
    ember_msg_lookups_t head = {.trainer = trainer, .count = (uint32_t)n, .step = step};
    blob_t m = {0};
    put(&m, &head, sizeof(head));
    for (size_t k = 0; k < n; k++) {
        int64_t rows[2] = {3, (int)k == bad ? 201 : 9};
        uint8_t packed[256];
        ember_wire_lookup_t lookup = {.head = {.table_id = ids[k],
                                               .trainer = trainer,
                                               .step = step,
                                               .flags = flags[k],
                                               .bags = 2,
                                               .unique = 2,
                                               .indices = 3},
                                      .counts = counts,
                                      .rows = rows,
                                      .inverse = inverse,
                                      .weights = weights,
                                      .places = places};
        ember_wire_lookup_pack_padded(&lookup, packed);
        if (flags[k] & EMBER_LOOKUP_ROWS) { /* held: none, then a copy of clock 0 */
            ember_wire_lookup_layout_t at;
            const uint64_t held[2] = {EMBER_ROW_NONE, 0};
            ember_wire_lookup_layout(&lookup.head, &at);
            memcpy(packed + at.held, held, sizeof(held));
        }
        put(&m, packed, ember_wire_lookup_padded_size(&lookup.head));
    }
    record(b, op, m.data, m.length);
    free(m.data);
}

/* A GRADS of tables @ids of @dims (2 bags each), value @nan_at not finite
 * (beyond the values: none), as one record. */
static void grads_record(blob_t *b, uint32_t trainer, uint64_t step, const uint32_t *ids,
                         const uint32_t *dims, size_t n, size_t nan_at)
{
    ember_msg_grads_t head = {
            .trainer = trainer, .count = (uint32_t)n, .step = step, .flags = EMBER_GRAD_APPLY};
    ember_msg_grad_t heads[4];
    uint8_t packed[256];
    blob_t m = {0};
    size_t values = 0;
    for (size_t k = 0; k < n; k++) {
        heads[k] = (ember_msg_grad_t){.table_id = ids[k],
                                      .trainer = trainer,
                                      .step = step,
                                      .flags = EMBER_GRAD_APPLY,
                                      .bags = 2};
        values += 2 * (size_t)dims[k];
    }
    ember_wire_grads_pack_head(&head, heads, packed);
    put(&m, packed, ember_wire_grads_head_size(head.count));
    for (size_t i = 0; i < values; i++) {
        float v = i == nan_at ? NAN : 0.25f * (float)(i % 5) - 0.5f;
        put(&m, &v, sizeof(v));
    }
    record(b, 1, m.data, m.length);
    free(m.data);
}

static void corpus_multi(void)
{
    static const uint32_t ids[] = {0, 1, 2}, dims[] = {4, 3, 2};
    static const uint32_t plain[] = {0, EMBER_LOOKUP_WEIGHTS | EMBER_LOOKUP_HALF_REPLY,
                                     EMBER_LOOKUP_MAX};
    static const uint32_t eval[] = {EMBER_LOOKUP_EVAL, EMBER_LOOKUP_EVAL | EMBER_LOOKUP_WEIGHTS,
                                    EMBER_LOOKUP_EVAL | EMBER_LOOKUP_MAX};
    static const uint32_t twice[] = {0, 2, 0}, unknown[] = {0, 7};
    blob_t b = {0};

    /* sync sum fp32; async fp16 adagrad shard 1 of 2; sync zeroed (ties). */
    table_bytes(&b, 0, 0, 0, 0, 1, 0, 4, 2, 0, 16);
    table_bytes(&b, 1, 1, 0, 1, 2, 0, 3, 2, 1, 20);
    table_bytes(&b, 0, 0, 1, 0, 1, 1, 2, 2, 0, 10);
    lookups_record(&b, 0, 0, 0, ids, plain, 3, -1);
    lookups_record(&b, 0, 1, 0, ids, eval, 3, -1);
    grads_record(&b, 0, 0, ids, dims, 3, SIZE_MAX);
    lookups_record(&b, 2, 1, 0, ids, plain, 3, -1); /* closed at once */
    save_blob("multi", "lookups_grads", &b);

    table_bytes(&b, 0, 0, 0, 0, 1, 0, 4, 2, 0, 16);
    table_bytes(&b, 1, 1, 0, 1, 2, 0, 3, 2, 1, 20);
    table_bytes(&b, 0, 0, 1, 0, 1, 1, 2, 2, 0, 10);
    lookups_record(&b, 0, 0, 0, ids, plain, 3, 2); /* table 2's row 201 */
    lookups_record(&b, 0, 0, 0, twice, plain, 3, -1);
    lookups_record(&b, 0, 0, 0, unknown, plain, 2, -1);
    lookups_record(&b, 0, 0, 0, ids, plain, 3, -1);
    grads_record(&b, 0, 0, ids, dims, 3, 9); /* table 1's */
    grads_record(&b, 0, 1, ids, dims, 3, SIZE_MAX);
    save_blob("multi", "refused", &b);

    /* cached lookups beside a plain one, then pushed */
    static const uint32_t rows[] = {EMBER_LOOKUP_ROWS, EMBER_LOOKUP_ROWS | EMBER_LOOKUP_WEIGHTS, 0};
    table_bytes(&b, 0, 0, 0, 0, 1, 0, 4, 2, 0, 16);
    table_bytes(&b, 1, 1, 0, 1, 2, 0, 3, 2, 1, 20);
    table_bytes(&b, 0, 0, 1, 0, 1, 1, 2, 2, 0, 10);
    lookups_record(&b, 0, 0, 0, ids, rows, 3, -1);
    lookups_record(&b, 0, 1, 0, ids, rows, 3, -1);
    grads_record(&b, 0, 0, ids, dims, 3, SIZE_MAX);
    grads_record(&b, 1, 0, ids, dims, 3, SIZE_MAX);
    lookups_record(&b, 2, 0, 1, ids, rows, 3, -1);
    save_blob("multi", "rows", &b);
}

/* fuzz_split's table bytes: mode (0 sum, 1 mean, 2 max), weights, a padding
 * row, fp16 replies, shards, fp16 rows; rows, dim, ties. */
static void split_table(blob_t *b, int mode, int weights, int pad, int half, int shards,
                        int half_rows, int rows, int padding_row, int dim, int ties)
{
    put_u8(b, (uint8_t)(mode | weights << 2 | pad << 3 | half << 4 | (shards - 1) << 5 |
                        half_rows << 7));
    put_u8(b, (uint8_t)(rows - 1));
    put_u8(b, (uint8_t)padding_row);
    put_u8(b, (uint8_t)((dim - 1) | ties << 3));
}

/* One feature of a fuzz_split step: [form][bags][shift], then each bag's
 * [length | spoil << 7] and its ids (+4: a byte each). */
static void split_feature(blob_t *m, uint8_t form, uint8_t shift, size_t bags,
                          const uint8_t *lengths, const int *ids)
{
    put_u8(m, form);
    put_u8(m, (uint8_t)bags);
    put_u8(m, shift);
    for (size_t bag = 0, at = 0; bag < bags; bag++) {
        put_u8(m, lengths[bag]);
        for (size_t k = 0; k < (lengths[bag] & 15u); k++)
            put_u8(m, (uint8_t)(ids[at++] + 4));
    }
}

static void corpus_split(void)
{
    static const uint8_t len_a[] = {3, 0, 2}, len_b[] = {1, 4}, len_c[] = {2, 2, 0, 3};
    static const int ids_a[] = {7, 3, 7, 19, 0}, ids_b[] = {12, 5, 5, 8, 13};
    static const int ids_c[] = {5, 1, 1, 5, 9, 9, 2};
    static const int out[] = {7, 20, 3, 1, 1}, negative[] = {-2, 3, 7, 19, 0};
    static const uint8_t spoilt[] = {3, 0x80, 2}, negative_len[] = {1, 0x84};
    blob_t b = {0}, m = {0};

    /* Sum with weights over 2 shards: offsets 2 ids in, then lengths; an
     * evaluation step after. */
    split_table(&b, 0, 1, 0, 0, 2, 0, 20, 0, 3, 0);
    put_u8(&m, 2);
    split_feature(&m, 0, 2, 3, len_a, ids_a);
    split_feature(&m, 1, 0, 2, len_b, ids_b);
    record(&b, 0, m.data, m.length);
    record(&b, 1, m.data, m.length);
    save_blob("split", "sum_weighted_2ps", &b);
    free(m.data);
    m = (blob_t){0};

    /* Max over 3 shards with ties and a padding row (5), fp16 replies. */
    split_table(&b, 2, 0, 1, 1, 3, 0, 12, 5, 4, 1);
    put_u8(&m, 1);
    split_feature(&m, 0, 1, 4, len_c, ids_c);
    record(&b, 0, m.data, m.length);
    save_blob("split", "max_ties_pad_3ps", &b);
    free(m.data);
    m = (blob_t){0};

    /* Mean on fp16 rows, one shard, by lengths. */
    split_table(&b, 1, 0, 0, 0, 1, 1, 16, 0, 2, 0);
    put_u8(&m, 1);
    split_feature(&m, 1, 0, 4, len_c, ids_c);
    record(&b, 0, m.data, m.length);
    save_blob("split", "mean_fp16_rows", &b);
    free(m.data);
    m = (blob_t){0};

    /* Refused, then taken: an id past the rows, a negative one, offsets
     * that decrease, a negative length, both ways, neither, weights on one
     * feature of two, no values, no features. */
    static const struct {
        uint8_t form;
        size_t bags;
        const uint8_t *lengths;
        const int *ids;
    } bad[] = {{0, 3, len_a, out},          {1, 3, len_a, negative}, {0, 3, spoilt, ids_a},
               {1, 2, negative_len, ids_b}, {2, 3, len_a, ids_a},    {4, 3, len_a, ids_a},
               {16, 3, len_a, ids_a}};
    split_table(&b, 0, 0, 0, 0, 2, 0, 20, 0, 2, 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put_u8(&m, 1);
        split_feature(&m, bad[i].form, 0, bad[i].bags, bad[i].lengths, bad[i].ids);
        record(&b, 0, m.data, m.length);
        free(m.data);
        m = (blob_t){0};
    }
    put_u8(&m, 2);
    split_feature(&m, 0, 0, 3, len_a, ids_a);
    split_feature(&m, 8, 0, 2, len_b, ids_b); /* weights on this one only */
    record(&b, 0, m.data, m.length);
    free(m.data);
    m = (blob_t){0};
    put_u8(&m, 0);
    record(&b, 0, m.data, m.length);
    free(m.data);
    m = (blob_t){0};
    put_u8(&m, 1);
    split_feature(&m, 0, 3, 3, len_a, ids_a);
    record(&b, 0, m.data, m.length);
    save_blob("split", "refused", &b);
    free(m.data);
}

static void corpus_grad(void)
{
    /* A lookup record: [trainer][step][flags][bags][a row byte per index]. */
    static const uint8_t lk0[] = {0, 0, 0, 2, 1, 3, 3, 7, 2};
    static const uint8_t lk1[] = {1, 0, 1, 3, 4, 1, 5};
    static const uint8_t lkmax[] = {0, 1, 2, 2, 1, 2, 1, 3};
    static const uint8_t fit0[] = {0, 1, 130, 120, 140, 100, 128, 129, 200, 10};
    static const uint8_t fit1[] = {1, 1, 100, 150, 128, 90};
    static const uint8_t drop[] = {1};
    blob_t b = {0};

    table_bytes(&b, 0, 0, 0, 0, 1, 0, 4, 2, 0, 16); /* sync sgd, two trainers */
    record(&b, 0, lk0, sizeof(lk0));
    record(&b, 0, lk1, sizeof(lk1));
    record(&b, 2, fit0, sizeof(fit0));
    record(&b, 2, fit1, sizeof(fit1)); /* the step is applied */
    save_blob("grad", "sync_step", &b);

    table_bytes(&b, 1, 0, 0, 0, 2, 0, 3, 1, 1, 12); /* async, shard 1 of 2 */
    record(&b, 0, lkmax, sizeof(lkmax));
    record(&b, 2, fit0, sizeof(fit0));
    record(&b, 0, lk0, sizeof(lk0));
    record(&b, 2, fit0, sizeof(fit0));
    save_blob("grad", "async_max", &b);

    table_bytes(&b, 0, 1, 1, 2, 1, 0, 2, 2, 0, 10); /* fp16, mean, row-wise adagrad */
    record(&b, 0, lk1, sizeof(lk1));
    record(&b, 3, drop, sizeof(drop));
    record(&b, 0, lk1, sizeof(lk1));
    record(&b, 2, fit1, sizeof(fit1));
    save_blob("grad", "fp16_drop", &b);

    /* GRAD messages as they come: a NaN, a wrong size, a wrong step. */
    table_bytes(&b, 1, 0, 0, 0, 1, 0, 2, 1, 0, 8);
    record(&b, 0, lk0, sizeof(lk0));
    blob_t m = {0};
    ember_msg_grad_t g = {.trainer = 0, .step = 0, .flags = EMBER_GRAD_APPLY, .bags = 2};
    float values[4] = {1.0f, NAN, 2.0f, 3.0f};
    put(&m, &g, sizeof(g));
    put(&m, values, sizeof(values));
    record(&b, 1, m.data, m.length);
    record(&b, 5, m.data, m.length - 4);
    record(&b, 0, lk0, sizeof(lk0));
    values[1] = 0.5f;
    memcpy(m.data + sizeof(g), values, sizeof(values));
    record(&b, 5, m.data, m.length); /* one byte off alignment */
    g.step = 3;
    memcpy(m.data, &g, sizeof(g));
    record(&b, 1, m.data, m.length);
    free(m.data);
    save_blob("grad", "raw", &b);
}

static void corpus_ps_messages(void)
{
    blob_t b = {0};
    ember_msg_table_create_t spec = {.table_id = 3,
                                     .shard = 1,
                                     .num_shards = 2,
                                     .trainers = 2,
                                     .rows = 10,
                                     .dim = 4,
                                     .consistency = EMBER_SYNC,
                                     .init = EMBER_INIT_LOAD,
                                     .dtype = EMBER_DTYPE_F32,
                                     .seed = 1,
                                     .optimizer = {.kind = EMBER_OPT_SGD, .lr = 0.1f}};
    snprintf(spec.name, sizeof(spec.name), "emb");
    record(&b, 0, &spec, sizeof(spec));
    blob_t m = {0};
    ember_msg_table_load_t load = {.table_id = 3, .first = 2, .count = 5};
    put(&m, &load, sizeof(load));
    for (int i = 0; i < 5 * 4; i++) {
        float v = (float)i * 0.25f - 2.0f;
        put(&m, &v, 4);
    }
    record(&b, 1, m.data, m.length);
    ember_msg_table_read_t read = {.table_id = 3, .first = 0, .count = 5};
    record(&b, 2, &read, sizeof(read));
    record(&b, 3, NULL, 0);
    save_blob("ps_messages", "create_load_read", &b);
    record(&b, 0, &spec, sizeof(spec));
    ember_msg_table_optimizer_t optimizer = {.table_id = 3};
    ember_opt_config_default(EMBER_OPT_ADAGRAD, 0.5f, &optimizer.optimizer);
    record(&b, 4, &optimizer, sizeof(optimizer)); /* replaced */
    record(&b, 4, &optimizer, sizeof(optimizer)); /* the same: kept */
    optimizer.optimizer.beta1 = INFINITY;         /* a field Adagrad ignores, not finite */
    record(&b, 4, &optimizer, sizeof(optimizer));
    record(&b, 3, NULL, 0);
    save_blob("ps_messages", "create_optimizer", &b);
    spec.staleness = 2; /* a sync table serving up to 2 steps behind */
    spec.table_id = 4;
    record(&b, 0, &spec, sizeof(spec));
    save_blob("ps_messages", "create_staleness", &b);

    spec.table_id = 0;
    spec.dtype = EMBER_DTYPE_F16;
    spec.init = EMBER_INIT_NORMAL;
    spec.num_shards = 1;
    spec.shard = 0;
    spec.optimizer = (ember_opt_config_t){
            .kind = EMBER_OPT_ADAM, .lr = 0.01f, .eps = 1e-8f, .beta1 = 0.9f, .beta2 = 0.999f};
    memset(spec.name, 'x', sizeof(spec.name)); /* not terminated */
    record(&b, 0, &spec, sizeof(spec));
    record(&b, 0, &spec, sizeof(spec)); /* taken */
    float big = 70000.0f;               /* beyond fp16 */
    load = (ember_msg_table_load_t){.table_id = 0, .first = 9, .count = 1};
    memcpy(m.data, &load, sizeof(load));
    memcpy(m.data + sizeof(load), &big, 4);
    record(&b, 1, m.data, sizeof(load) + 4 * 4);
    record(&b, 1, m.data, sizeof(load) + 4 * 3); /* short */
    read = (ember_msg_table_read_t){.table_id = 0, .first = 8, .count = 3};
    record(&b, 2, &read, sizeof(read));
    read.count = 1 << 24;
    record(&b, 2, &read, sizeof(read));
    spec.table_id = 64;
    record(&b, 0, &spec, sizeof(spec));
    spec.table_id = 5;
    spec.device = 7;
    record(&b, 0, &spec, sizeof(spec));
    record(&b, 3, NULL, 0);
    free(m.data);
    save_blob("ps_messages", "fp16_refusals", &b);
}

/* One TRAIN_START for trainer @index of 4 with @num_ps PS (its first
 * byte: the target's input layout), of @model's configuration @config and
 * the driver's @settings; @nparams zeros as its dense parameters (one
 * short when @short_params). */
static void train_start(blob_t *b, int index, uint32_t num_ps, const ember_model_ops_t *model,
                        const void *config, const ember_train_settings_t *settings,
                        int short_params)
{
    model_text_t settings_text, config_text;
    model_text_init(&settings_text);
    model_text_init(&config_text);
    train_settings_describe(model, settings, &settings_text);
    model->describe(config, &config_text);
    const size_t nparams = model->params(config) - (short_params ? 1 : 0);
    float *params = calloc(nparams + 1, sizeof(float));
    const char *texts[4] = {model_text_take(&settings_text), model_text_take(&config_text),
                            "/shared/ckpt", ""};
    train_msg_start_t head = {.trainer = (uint32_t)index,
                              .trainers = 4,
                              .num_ps = num_ps,
                              .every = 5,
                              .nparams = nparams};
    ember_iov_t iov[10];
    if (!params || !texts[0] || !texts[1])
        abort();
    const size_t n = train_start_pack(&head, texts, params, iov);
    put_u8(b, (uint8_t)(index | (num_ps - 1) << 2));
    for (size_t i = 0; i < n; i++)
        put(b, iov[i].buffer, iov[i].length);
    model_text_free(&settings_text);
    model_text_free(&config_text);
    free(params);
}

/* A DLRM job's: 26 tables of dim 4, DenseArch 13-8-4, OverArch 355-8-1
 * (355 = 4 + 27 * 26 / 2), whole tables on 2 PS. */
static void corpus_train_start_dlrm(void)
{
    dlrm_config_t c;
    ember_model_dlrm.defaults(&c);
    c.dim = 4;
    c.dense_layers = 2;
    c.dense_sizes[0] = 8, c.dense_sizes[1] = 4;
    c.over_layers = 2;
    c.over_sizes[0] = 8, c.over_sizes[1] = 1;
    c.batch_size = 16;
    c.sharding = EMBER_SHARD_TABLE_WISE;
    c.steps = 10;
    c.eval_every = 5;
    snprintf(c.data, sizeof(c.data), "criteo:train.txt");
    snprintf(c.eval, sizeof(c.eval), "criteo:test.txt");
    for (int t = 0; t < EMBER_CRITEO_SPARSE; t++)
        c.rows[t] = 10 + t;
    ember_train_settings_t s = {.trainers = 4, .num_ps = 2, .epochs = 1};
    ember_opt_config_default(EMBER_OPT_ADAGRAD, 0.1f, &s.optimizer);
    blob_t b = {0};
    train_start(&b, 1, 2, &ember_model_dlrm, &c, &s, 0);
    save_blob("train_start", "dlrm", &b);
}

static void corpus_train_start(void)
{
    tutorial_config_t c;
    ember_model_tutorial.defaults(&c);
    c.batches = 3;
    ember_train_settings_t s = {.trainers = 4, .num_ps = 1, .epochs = 2, .seed = 1};
    ember_opt_config_default(EMBER_OPT_SGD, 0.5f, &s.optimizer);
    blob_t b = {0};
    train_start(&b, 1, 1, &ember_model_tutorial, &c, &s, 0);
    save_blob("train_start", "tutorial", &b);

    s.staleness = 2;
    train_start(&b, 1, 1, &ember_model_tutorial, &c, &s, 0);
    save_blob("train_start", "tutorial_staleness", &b);
    s.staleness = 0;

    /* What once got through as the old layout's regress-min_above_max: a
     * range of indices upside down (the draw allocated 2^64 indices). */
    c.min_indices = 276;
    train_start(&b, 1, 1, &ember_model_tutorial, &c, &s, 0);
    save_blob("train_start", "min_above_max", &b);
    c.min_indices = 20;

    c.data = TUTORIAL_DATA_SYNTHETIC;
    c.mode = EMBER_BAG_MAX;
    c.nhidden = 1;
    c.hidden[0] = 4;
    c.padding_idx = 7;
    ember_opt_config_default(EMBER_OPT_ROWWISE_ADAGRAD, 0.1f, &s.optimizer);
    train_start(&b, 1, 1, &ember_model_tutorial, &c, &s, 0);
    save_blob("train_start", "synthetic_mlp_max", &b);

    c.data = TUTORIAL_DATA_REPLAY;
    c.mode = EMBER_BAG_MEAN;
    snprintf(c.replay, sizeof(c.replay), "golden.safetensors");
    train_start(&b, 0, 3, &ember_model_tutorial, &c, &s, 1); /* one parameter short */
    save_blob("train_start", "replay_short", &b);

    corpus_train_start_dlrm();
}

static void corpus_epoch_report(void)
{
    blob_t b = {0};
    train_msg_epoch_t r = {
            .trainer = 1, .epoch = 2, .steps = 10, .bags = 55, .loss_sum = 20.5, .seconds = 0.25};
    put_u8(&b, 1); /* two trainers */
    put_u8(&b, 3); /* three epochs */
    record(&b, 0, &r, sizeof(r));
    r.trainer = 0;
    r.epoch = 0;
    record(&b, 0, &r, sizeof(r));
    record(&b, 0, &r, sizeof(r) - 1);
    r.epoch = 3;
    record(&b, 0, &r, sizeof(r));
    save_blob("epoch_report", "reports", &b);

    /* A DLRM evaluation's report: three examples, then one a byte short. */
    blob_t e = {0};
    uint8_t report[sizeof(train_msg_eval_t) + 3 * 8];
    train_msg_eval_t head = {.trainer = 1, .step = 5, .count = 3};
    const float values[6] = {0.5f, -1.0f, 2.0f, 1.0f, 0.0f, 1.0f};
    memcpy(report, &head, sizeof(head));
    memcpy(report + sizeof(head), values, sizeof(values));
    put_u8(&e, 1);
    put_u8(&e, 1);
    record(&e, 0, report, sizeof(report));
    record(&e, 0, report, sizeof(report) - 1);
    save_blob("epoch_report", "eval_reports", &e);

    /* A trainer's answer: 2 steps' losses and 3 parameters, then one short. */
    blob_t d = {0};
    uint8_t answer[sizeof(train_msg_done_t) + 5 * 4];
    train_msg_done_t done = {.steps = 2, .bags = 10, .seconds = 1.5};
    const float floats[5] = {0.25f, 0.5f, 1.0f, 2.0f, 3.0f};
    memcpy(answer, &done, sizeof(done));
    memcpy(answer + sizeof(done), floats, sizeof(floats));
    put_u8(&d, 1);
    put_u8(&d, 1);
    record(&d, 0, answer, sizeof(answer));
    record(&d, 0, answer, sizeof(answer) - 4);
    save_blob("epoch_report", "done", &d);
}

static void corpus_ckpt_messages(void)
{
    blob_t b = {0};
    ember_msg_ckpt_plan_t plan = {.every = 100, .index = 1};
    snprintf(plan.root, sizeof(plan.root), "/shared/ckpt");
    record(&b, 0, &plan, sizeof(plan));
    ember_msg_ckpt_at_t at = {.step = 200, .stop = 1};
    record(&b, 0, &at, sizeof(at));
    ember_msg_ckpt_request_t request = {.stop = 0};
    record(&b, 0, &request, sizeof(request));
    ember_msg_ckpt_done_t done = {.step = 200, .bytes = 4096, .crc32c = 0x1a2b3c4du};
    snprintf(done.name, sizeof(done.name), "ps0.safetensors");
    record(&b, 0, &done, sizeof(done));
    snprintf(done.name, sizeof(done.name), "..");
    record(&b, 0, &done, sizeof(done));
    save_blob("ckpt_messages", "each", &b);

    blob_t r = {0};
    uint8_t restore[sizeof(ember_msg_table_restore_t) + 2 * EMBER_CKPT_FILE_NAME_MAX] = {0};
    ember_msg_table_restore_t head = {.count = 2};
    snprintf(head.dir, sizeof(head.dir), "/shared/ckpt/step-000000000200");
    memcpy(restore, &head, sizeof(head));
    memcpy(restore + sizeof(head), "ps0.safetensors", 15);
    memcpy(restore + sizeof(head) + EMBER_CKPT_FILE_NAME_MAX, "ps1.safetensors", 15);
    record(&r, 0, restore, sizeof(restore));
    record(&r, 0, restore, sizeof(restore) - 1);
    save_blob("ckpt_messages", "restore", &r);
}

/* --------------------------------------------------------------- transport */

static tp_header_t tp_header(uint16_t op, uint64_t length, uint32_t flags)
{
    return (tp_header_t){.magic = TP_MAGIC,
                         .version = TP_VERSION,
                         .op = op,
                         .request_id = 0x100000002ull,
                         .flags = flags,
                         .length = length};
}

static void corpus_tp_header(void)
{
    uint8_t head[TP_INLINE_MAX] = {0};
    blob_t b = {0};
    uint32_t apart = 76;

    put(&b, &apart, 4);
    put_u8(&b, 0);
    tp_header_t h = tp_header(EMBER_OP_LOOKUP, 100, 24u << TP_INLINE_SHIFT);
    put(&b, &h, sizeof(h));
    put(&b, head, 24);
    save_blob("tp_header", "inline_lookup", &b);

    apart = 0;
    put(&b, &apart, 4);
    put_u8(&b, 20);
    h = tp_header(EMBER_OP_GRAD, 0, TP_FLAG_ONEWAY | TP_FLAG_REPLY_RNDV);
    put(&b, &h, sizeof(h));
    save_blob("tp_header", "oneway_rndv", &b);

    apart = 4096;
    put(&b, &apart, 4);
    put_u8(&b, 12); /* 4 KiB limit */
    h = tp_header(EMBER_OP_TABLE_LOAD, 4096 + TP_INLINE_MAX, TP_INLINE_MAX << TP_INLINE_SHIFT);
    put(&b, &h, sizeof(h));
    put(&b, head, TP_INLINE_MAX);
    save_blob("tp_header", "over_limit", &b);

    apart = 8;
    put(&b, &apart, 4);
    put_u8(&b, 0);
    h = tp_header(EMBER_OP_LOOKUP, 8, 0);
    h.version = TP_VERSION - 1;
    put(&b, &h, sizeof(h));
    save_blob("tp_header", "old_version", &b);
}

/* A batch: [calls][its header][items, each header + payload padded to 8]. */
static void tp_batch(const char *name, int calls, const uint32_t *sizes, size_t count,
                     uint32_t item_flags, size_t cut)
{
    blob_t items = {0}, b = {0};
    uint8_t payload[64];
    for (size_t i = 0; i < count; i++) {
        tp_header_t h = tp_header((uint16_t)(EMBER_OP_LOOKUP + i), sizes[i], item_flags);
        put(&items, &h, sizeof(h));
        memset(payload, (int)(0x11 * (i + 1)), sizeof(payload));
        put(&items, payload, (sizes[i] + 7) & ~7u);
    }
    items.length -= cut;
    put_u8(&b, (uint8_t)calls);
    tp_header_t outer = tp_header(0, items.length, 0);
    put(&b, &outer, sizeof(outer));
    put(&b, items.data, items.length);
    free(items.data);
    save_blob("tp_batch", name, &b);
}

static void corpus_tp_batch(void)
{
    static const uint32_t replies[] = {5, 16, 0}, calls[] = {24, 60};
    tp_batch("replies", 0, replies, 3, 0, 0);
    tp_batch("calls_oneway", 1, calls, 2, TP_FLAG_ONEWAY, 0);
    tp_batch("cut_padding", 0, replies, 2, 0, 3);
    tp_batch("reply_flagged", 0, calls, 2, TP_FLAG_ONEWAY, 0);
}

/* ------------------------------------------------------------------- store */

/* fuzz_store's authenticated request record: [op][key length][u16 value
 * length][flags][u64 arg][u64 timeout_ms][key and value bytes]. */
static void store_request(blob_t *b, uint8_t op, const char *key, const char *value, uint8_t flags,
                          int64_t arg, int64_t timeout_ms)
{
    blob_t m = {0};
    size_t value_length = value ? strlen(value) : 0;
    put_u8(&m, op);
    put_u8(&m, (uint8_t)strlen(key));
    put_u8(&m, (uint8_t)value_length);
    put_u8(&m, (uint8_t)(value_length >> 8));
    put_u8(&m, flags);
    put(&m, &arg, 8);
    put(&m, &timeout_ms, 8);
    put(&m, key, strlen(key));
    if (value)
        put(&m, value, value_length);
    record(b, 0, m.data, m.length);
    free(m.data);
}

static void corpus_store(void)
{
    enum {
        SERVE = 4
    }; /* op bit: the server parses what it has now */
    blob_t b = {0};
    store_request(&b, TP_STORE_OP_SET, "addr/3", "abcdefgh", 0, 0, 0);
    store_request(&b, TP_STORE_OP_GET, "addr/3", NULL, 0, 0, 2000);
    store_request(&b, TP_STORE_OP_ADD, "barrier/1", NULL, 0, 1, 0);
    store_request(&b, TP_STORE_OP_WAIT_GE, "barrier/1", NULL, 0, 4, 5000);
    store_request(&b, TP_STORE_OP_ARRIVE, "arrived/roles", NULL, 0, 2, 0);
    save_blob("store", "every_op", &b);

    static const uint8_t flip[] = {70, 0, 3}, garbage[] = "EMST not a request at all";
    store_request(&b, TP_STORE_OP_SET, "name/0", "rank0", 0, 0, 0);
    store_request(&b, TP_STORE_OP_SET, "name/1", "rank1", 0, 0, 0);
    record(&b, 2 | SERVE, flip, sizeof(flip));                    /* the second's head changed */
    record(&b, 3, NULL, 0);                                       /* a new connection */
    store_request(&b, TP_STORE_OP_GET, "name/1", NULL, 1, 0, 10); /* out of sequence */
    record(&b, 3, NULL, 0);
    record(&b, 1 | SERVE, garbage, sizeof(garbage));
    save_blob("store", "tampered_replayed", &b);

    store_request(&b, TP_STORE_OP_SET, "", "no key", 0, 0, 0);
    record(&b, 3, NULL, 0);
    store_request(&b, 9, "k", NULL, 0, 0, 0); /* an unknown op */
    record(&b, 3, NULL, 0);
    store_request(&b, TP_STORE_OP_SET, "long", "v", 2, 0, 0); /* a key of 260 bytes */
    save_blob("store", "limits", &b);
}

/* ------------------------------------------------------------------ config */

static void corpus_config(void)
{
    static const struct {
        const char *name, *text;
    } seeds[] = {
            {"size", "64K"},
            {"size_b", "1GB"},
            {"size_overflow", "17179869184G"},
            {"env", "EMBER_LOG_LEVEL=debug\nEMBER_TCP_EAGER=2M\nEMBER_BIND=core\n"
                    "EMBER_RPC_TIMEOUT=0.5\nEMBER_SEED=9200000000000000000\nEMBER_NOPE=1\nPATH=/"},
            {"number", "0.001"},
            {"word", "sync"},
            {"negative", "-1"},
            {"huge", "1e400"},
            {"hex", "0x7fffffffffffffff"},
            {"empty_value", "EMBER_NAME=\nEMBER_SPIN_US=\n=x\nEMBER_"},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        save("config", seeds[i].name, seeds[i].text, strlen(seeds[i].text));
}

/* Criteo lines: a Kaggle one, every field empty, CRLF, cut short. */
static void corpus_criteo(void)
{
    static const char *lines[][2] = {
            {"kaggle", "1\t5\t-3\t0\t\t1000000\t7\t\t\t\t\t\t\t2\t68fd1e64\t80e26c9b"
                       "\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510"
                       "\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7"
                       "\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\tc5c50484"
                       "\te8b83407\t9727dd16"},
            {"empty", "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"
                      "\t\t\t\t\t\t\t\t\t\t\t\t"},
            {"crlf", "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\ta\tb\tc\td\te\tf"
                     "\t1\t2\t3\t4\t5\t6\t7\t8\t9\t0\tA\tB\tC\tD\tE\tF\t10\t11\t12\t13\r"},
            {"short", "1\t1\t2\t3\tab\tcd"},
    };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        blob_t b = {0};
        put_u8(&b, (uint8_t)i);
        put(&b, lines[i][1], strlen(lines[i][1]));
        save_blob("criteo", lines[i][0], &b);
    }
}

/* Schemas: Criteo's spelled out, a movie one (csv, header, lists, a shared
 * table, strings), one line with ';', and near-misses. */
static void corpus_schema(void)
{
    static const struct {
        const char *name, *text;
    } seeds[] = {
            {"criteo", "# Criteo\nformat tsv\nheader no\nlabel label\ndense I1 log\n"
                       "dense I2 log empty=zero\nsparse C1 hex rows=100000 table=t_cat_0 "
                       "empty=zero\nsparse C2 hex rows=7 table=t_cat_1 empty=zero\n"},
            {"movies", "format csv\nheader yes\nhash fnv1a64\nlabel click\ndense age none "
                       "empty=refuse\nskip ts\nsparse movie int rows=50 table=items\n"
                       "sparse genres int rows=7 list=| bag=4 empty=bag pooling=mean\n"
                       "sparse watched int rows=50 table=items list=: bag=3 empty=bag\n"
                       "sparse user string rows=1000 empty=zero\n"},
            {"one_line", "format tsv; header no; hash fnv1a64; label y; dense d log empty=zero; "
                         "sparse a int rows=9223372036854775807 table=a pooling=max empty=refuse"},
            {"shared_differs", "label y\nsparse a int rows=5\nsparse b int rows=6 table=a\n"},
            {"bad_list", "format csv\nlabel y\nsparse a int rows=5 list=, bag=2\n"},
            {"dynamic", "label y\nsparse u int rows=100 kind=dynamic\nsparse z string rows=10 "
                        "kind=dynamic empty=zero\nsparse m int rows=5 table=u kind=dynamic\n"
                        "sparse f hex rows=3 kind=fixed\n"},
            {"kind_differs", "label y\nsparse a int rows=5 kind=dynamic\n"
                             "sparse b int rows=5 table=a\n"},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        save("schema", seeds[i].name, seeds[i].text, strlen(seeds[i].text));
}

/* Text data files for fuzz_text_line's three schemas: good lines, lists,
 * empty fields, a header, refusals. */
static void corpus_text_line(void)
{
    static const struct {
        const char *name;
        uint8_t schema;
        const char *text;
    } seeds[] = {
            {"kinds", 0, "1\t2\t-3.5\t-7\tabc\tfoo\t1|2|3\tz\n0\t\t1e3\t5\t\t\t\tz\r\n"},
            {"kinds_bad", 0, "1\t2\t1\t1|2\tab\tx\t1\tz\n"},
            {"csv_header", 1, "c,b,y,a\r\n1:2:-3,bob,1,2\n,alice,0,-9223372036854775808\n"},
            {"csv_unknown", 1, "y,a,b,zz\n1,1,x,\n"},
            {"criteo", 2, "1\t5\t-3\t68fd1e64\n0\t\t\t\n"},
            {"dynamic", 3,
             "1\t-9223372036854775808\tffffffffffffffff\tzip\t1|-2|3\t-5\n"
             "0\t9223372036854775807\t\t\t\t7\n"},
            {"dynamic_bad", 3, "1\t9223372036854775808\t10000000000000000\tz\t1\t1\n"},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        blob_t b = {0};
        put_u8(&b, seeds[i].schema);
        put(&b, seeds[i].text, strlen(seeds[i].text));
        save_blob("text_line", seeds[i].name, &b);
    }
}

/* .npy files as NumPy writes them (1.0, 2.0, 3.0; a scalar, an empty array)
 * and near-misses (Fortran order, a structured dtype, cut short). */
static void corpus_npy(void)
{
    static const struct {
        const char *name, *dict;
        int major;
        size_t data, keep; /* bytes of array written; keep: of the file (0: all) */
        uint8_t mode;
    } files[] = {
            {"f4_2d", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 1, 48, 0, 0},
            {"i8_v2", "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", 2, 16, 0, 0},
            {"u1_v3", "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", 3, 5, 0, 0},
            {"scalar", "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 1, 8, 0, 0},
            {"empty", "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 13), }", 1, 0, 0, 0},
            {"header_only", "{'descr': '<i4', 'fortran_order': False, 'shape': (1024,), }", 1, 0, 0,
             3},
            {"fortran", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1, 24, 0, 0},
            {"structured", "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }", 1,
             8, 0, 0},
            {"cut", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 1, 48, 40, 0},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        blob_t b = {0};
        size_t prelude = files[i].major == 1 ? 10 : 12, text = strlen(files[i].dict);
        size_t header = (prelude + text + 1 + 63) / 64 * 64 - prelude;
        uint8_t head[12] = {0x93,
                            'N',
                            'U',
                            'M',
                            'P',
                            'Y',
                            (uint8_t)files[i].major,
                            0,
                            (uint8_t)header,
                            (uint8_t)(header >> 8),
                            0,
                            0};
        put_u8(&b, files[i].mode);
        put(&b, head, prelude);
        put(&b, files[i].dict, text);
        for (size_t k = text; k + 1 < header; k++)
            put_u8(&b, ' ');
        put_u8(&b, '\n');
        for (size_t k = 0; k < files[i].data; k++)
            put_u8(&b, (uint8_t)k);
        if (files[i].keep)
            b.length = 1 + files[i].keep;
        save_blob("npy", files[i].name, &b);
    }
}

/* Checkpoint manifests: as ember_ckpt_manifest_write makes them (no keys,
 * keys and files, any step) and near-misses (cut short, a bad CRC, a step
 * of another directory). */
static void corpus_manifest(void)
{
    static const struct {
        const char *name;
        uint8_t mode;
        const char *text;
    } seeds[] = {
            {"bare", 0, "ember-checkpoint 1\nstep 100\nend\n"},
            {"full", 0,
             "ember-checkpoint 1\nstep 100\nkey trainers 2\nkey model dlrm\nkey empty \n"
             "file ps0.safetensors 2560000128 1a2b3c4d\nfile dense.safetensors 0 00000000\n"
             "end\n"},
            {"any_step", 1,
             "ember-checkpoint 1\nstep 18446744073709551615\nfile a 1 ffffffff\nend\n"},
            {"cut", 0, "ember-checkpoint 1\nstep 100\nfile ps0.safetensors 25600"},
            {"bad_crc", 0, "ember-checkpoint 1\nstep 100\nfile a 1 1A2B3C4D\nend\n"},
            {"other_step", 0, "ember-checkpoint 1\nstep 99\nend\n"},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        blob_t b = {0};
        put_u8(&b, seeds[i].mode);
        put(&b, seeds[i].text, strlen(seeds[i].text));
        save_blob("manifest", seeds[i].name, &b);
    }
}

/* ------------------------------------------------------------------ keymap */

/* fuzz_keymap's ops (the layout at the top of fuzz_keymap.c). */
enum {
    KM_INSERT,
    KM_FIND,
    KM_REMOVE,
    KM_SET,
    KM_FLOOD,
    KM_CLEAR,
    KM_RESERVE,
    KM_CHECK,
};
enum {
    KEY_U64,
    KEY_U8,
    KEY_EXTREME,
    KEY_PRESENT,
    KEY_BUCKET_MATE,
    KEY_END,
    KEY_NEIGHBOUR,
    KEY_TOP16,
};
#define KM_FLAG 0x40

static void put_le(blob_t *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_u8(b, (uint8_t)(v >> 8 * i));
}

static void keymap_op(blob_t *b, int op, int how)
{
    put_u8(b, (uint8_t)(op | how << 3));
}

static void keymap_head(blob_t *b, uint64_t seed, uint16_t expected)
{
    put_le(b, seed, 8);
    put_le(b, expected, 2);
}

/* Every op on keys of every kind. */
static void keymap_ops(blob_t *b)
{
    keymap_head(b, 1, 0);
    for (uint64_t k = 0; k < 20; k++) {
        keymap_op(b, KM_INSERT, KEY_U64);
        put_le(b, k * 0x9e3779b97f4a7c15ULL, 8);
        put_le(b, k, 4);
        keymap_op(b, KM_INSERT, KEY_U8);
        put_le(b, k * 3, 1);
        put_le(b, 1000 + k, 4);
    }
    keymap_op(b, KM_FIND, KEY_PRESENT);
    put_le(b, 7, 2);
    keymap_op(b, KM_FIND, KEY_NEIGHBOUR);
    put_le(b, 7, 2);
    put_le(b, 0xff, 1);
    keymap_op(b, KM_SET, KEY_PRESENT);
    put_le(b, 3, 2);
    put_le(b, 77, 4);
    keymap_op(b, KM_REMOVE, KEY_PRESENT);
    put_le(b, 5, 2);
    keymap_op(b, KM_REMOVE, KEY_U8);
    put_le(b, 200, 1);
    keymap_op(b, KM_INSERT, KEY_BUCKET_MATE);
    put_le(b, 9, 2);
    put_le(b, 0x1234, 2);
    put_le(b, 5, 4);
    keymap_op(b, KM_INSERT, KEY_TOP16);
    put_le(b, 0x8001, 2);
    put_le(b, 6, 4);
    keymap_op(b, KM_CHECK, 0);
}

/* Floods of keys sharing a home bucket: made up front (one rehash), and
 * each under the current seed (a rehash every bound's worth). */
static void keymap_flood(blob_t *b)
{
    keymap_head(b, 0x5eed, 0);
    keymap_op(b, KM_INSERT, KEY_U8);
    put_le(b, 1, 1);
    put_le(b, 1, 4);
    put_u8(b, KM_FLOOD | KEY_PRESENT << 3 | KM_FLAG);
    put_le(b, 0, 2);
    put_le(b, 199, 1);
    keymap_op(b, KM_CHECK, 0);
    keymap_op(b, KM_FLOOD, KEY_U64);
    put_le(b, 0xdeadbeef, 8);
    put_le(b, 255, 1);
    for (int i = 0; i < 8; i++) {
        keymap_op(b, KM_REMOVE, KEY_BUCKET_MATE);
        put_le(b, (uint64_t)i * 31, 2);
        put_le(b, (uint64_t)i * 3, 2);
    }
    keymap_op(b, KM_CHECK, 0);
}

/* The extreme keys and values, NONE refused, runs wrapping past the end. */
static void keymap_extremes(blob_t *b)
{
    keymap_head(b, UINT64_MAX, 0);
    for (int i = 0; i < 6; i++) {
        keymap_op(b, KM_INSERT, KEY_EXTREME);
        put_le(b, (uint64_t)i, 1);
        put_le(b, i % 2 ? 0 : UINT32_MAX - 1, 4);
    }
    keymap_op(b, KM_INSERT, KEY_EXTREME);
    put_le(b, 0, 1);
    put_le(b, 5, 4); /* present: refused */
    keymap_op(b, KM_INSERT, KEY_U64);
    put_le(b, 12345, 8);
    put_le(b, UINT32_MAX, 4); /* NONE: refused */
    keymap_op(b, KM_SET, KEY_EXTREME);
    put_le(b, 2, 1);
    put_le(b, UINT32_MAX, 4); /* NONE: refused */
    for (int i = 0; i < 40; i++) {
        keymap_op(b, KM_INSERT, KEY_END);
        put_le(b, (uint64_t)i, 1); /* both ends, alternately */
        put_le(b, (uint64_t)i, 4);
    }
    for (int i = 0; i < 40; i += 3) {
        keymap_op(b, KM_REMOVE, KEY_END);
        put_le(b, (uint64_t)i, 1);
    }
    keymap_op(b, KM_REMOVE, KEY_EXTREME);
    put_le(b, 2, 1);
    keymap_op(b, KM_CHECK, 0);
}

/* Reserves (and SIZE_MAX's refusal), clears back to create's size. */
static void keymap_clear_reserve(blob_t *b)
{
    keymap_head(b, 42, 100);
    for (uint64_t k = 0; k < 30; k++) {
        keymap_op(b, KM_INSERT, KEY_TOP16);
        put_le(b, k, 2);
        put_le(b, k, 4);
    }
    keymap_op(b, KM_RESERVE, 0);
    put_le(b, 1000, 2);
    keymap_op(b, KM_RESERVE, 0);
    put_le(b, 0xffff, 2);
    keymap_op(b, KM_CHECK, 0);
    keymap_op(b, KM_CLEAR, 0);
    keymap_op(b, KM_FIND, KEY_TOP16);
    put_le(b, 3, 2);
    keymap_op(b, KM_INSERT, KEY_U8);
    put_le(b, 0, 1);
    put_le(b, 0, 4);
    keymap_op(b, KM_CHECK, 0);
}

static void corpus_keymap(void)
{
    static const struct {
        const char *name;
        void (*write)(blob_t *b);
    } seeds[] = {
            {"ops", keymap_ops},
            {"flood", keymap_flood},
            {"extremes", keymap_extremes},
            {"clear_reserve", keymap_clear_reserve},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        blob_t b = {0};
        seeds[i].write(&b);
        save_blob("keymap", seeds[i].name, &b);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--check") == 0) {
        checking = 1;
        out_dir = argv[2];
    } else if (argc == 2) {
        out_dir = argv[1];
    } else {
        fprintf(stderr, "usage: make_corpus [--check] DIR\n");
        return 2;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return 2;
    corpus_safetensors();
    corpus_lookup();
    corpus_grad();
    corpus_multi();
    corpus_split();
    corpus_ps_messages();
    corpus_train_start();
    corpus_epoch_report();
    corpus_ckpt_messages();
    corpus_tp_header();
    corpus_tp_batch();
    corpus_config();
    corpus_store();
    corpus_criteo();
    corpus_npy();
    corpus_manifest();
    corpus_schema();
    corpus_text_line();
    corpus_keymap();
    return differ;
}
