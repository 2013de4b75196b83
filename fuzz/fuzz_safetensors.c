/*
 * fuzz_safetensors: a whole safetensors file from memory, as ember_st_open
 * reads one (the same parser: ember_st_open_buffer).  A file it takes must
 * hold what its API promises: every tensor's bytes inside the file and
 * readable, found by its name, its size its shape's; a metadata value a
 * string.  Seeds: fuzz/corpus/safetensors and tests/data/golden.
 */
#include "engine/io/safetensors.h"
#include "fuzz/fuzz_input.h"

/* The metadata keys ember reads (engine/train/data.c, engine/train/master.c). */
static const char *const known_keys[] = {
        "rows", "dim",  "classes",       "trainers",  "steps",  "per_sample_weights",
        "lr",   "mode", "sparse_reduce", "optimizer", "losses", "format",
        "",
};

static void check_tensor(const ember_st_file_t *file, const ember_st_tensor_t *t)
{
    FUZZ_CHECK(t->name != NULL, "a tensor without a name");
    FUZZ_CHECK(ember_st_find(file, t->name) == t, "tensor '%s' not found by its name", t->name);
    FUZZ_CHECK(t->ndim <= EMBER_ST_MAX_DIMS, "tensor '%s': %zu dims", t->name, t->ndim);
    uint64_t numel = 1;
    for (size_t d = 0; d < t->ndim; d++) {
        FUZZ_CHECK(t->shape[d] >= 0, "tensor '%s': negative dim", t->name);
        numel *= (uint64_t)t->shape[d];
    }
    FUZZ_CHECK(numel == t->numel, "tensor '%s': numel %zu, shape says %llu", t->name, t->numel,
               (unsigned long long)numel);
    FUZZ_CHECK(t->nbytes == t->numel * ember_dtype_size(t->dtype),
               "tensor '%s': %zu bytes for %zu elements", t->name, t->nbytes, t->numel);
    void *copy = NULL;
    size_t n = 0;
    FUZZ_CHECK(ember_st_read_copy(file, t->name, t->dtype, &copy, &n) == EMBER_OK,
               "tensor '%s' cannot be copied", t->name);
    FUZZ_CHECK(n == t->numel && memcmp(copy, t->data, t->nbytes) == 0,
               "tensor '%s': its copy differs", t->name);
    free(copy);
}

/* Every quoted string of the header, as a tensor name and a metadata key
 * (escapes left as they are: most are names as they are). */
static void query_header_strings(const ember_st_file_t *file, const uint8_t *data, size_t size)
{
    uint64_t hlen = 0;
    char key[256];

    for (int i = 7; i >= 0 && size >= 8; i--)
        hlen = (hlen << 8) | data[i];
    if (size < 8 || hlen > size - 8)
        return;
    const char *header = (const char *)data + 8;
    for (size_t i = 0; i < hlen; i++) {
        if (header[i] != '"')
            continue;
        size_t n = 0;
        for (i++; i < hlen && header[i] != '"' && n + 1 < sizeof(key); i++)
            key[n++] = header[i];
        key[n] = '\0';
        const char *value = ember_st_metadata(file, key);
        if (value)
            (void)strlen(value);
        (void)ember_st_find(file, key);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ember_st_file_t *file = NULL;
    char msg[256];

    memset(msg, 0, sizeof(msg));
    ember_status_t status = ember_st_open_buffer(data, size, &file, msg, sizeof(msg));
    if (status != EMBER_OK) {
        FUZZ_CHECK(status == EMBER_ERR_FORMAT || status == EMBER_ERR_NO_MEMORY, "refused with %s",
                   ember_status_string(status));
        FUZZ_CHECK(status != EMBER_ERR_FORMAT || msg[0] != '\0',
                   "a malformed file refused without its cause");
        return 0;
    }
    for (size_t i = 0; i < ember_st_count(file); i++)
        check_tensor(file, ember_st_tensor_at(file, i));
    FUZZ_CHECK(ember_st_tensor_at(file, ember_st_count(file)) == NULL, "a tensor past the count");
    for (size_t k = 0; k < sizeof(known_keys) / sizeof(known_keys[0]); k++) {
        const char *value = ember_st_metadata(file, known_keys[k]);
        if (value)
            (void)strlen(value);
    }
    query_header_strings(file, data, size);
    ember_st_close(file);
    return 0;
}
