/*
 * fuzz_manifest: a checkpoint's manifest as ember_ckpt_manifest_read takes
 * it (ember_ckpt_manifest_parse, engine/io/checkpoint_manifest.c).
 *
 * Input: [mode] then the manifest's bytes.  Mode bit 0 set: any step is
 * taken; clear: the step line must say 100 (a directory step-...100).
 *
 * Invariants: a refused text says why ("manifest:LINE: ..." or "empty"),
 * as a format error, and leaves the manifest empty; an accepted one has
 * valid, distinct keys and file names, values without control characters,
 * the step asked for, and written back (ember_ckpt_manifest_format) is
 * exactly the bytes given: the layout has one spelling.
 */
#include "engine/io/checkpoint.h"
#include "fuzz/fuzz_input.h"

static void check_accepted(const ember_ckpt_manifest_t *m, const uint8_t *bytes, size_t length,
                           uint64_t step)
{
    FUZZ_CHECK(step == EMBER_CKPT_ANY_STEP || m->step == step, "step %llu",
               (unsigned long long)m->step);
    for (size_t i = 0; i < m->nentries; i++) {
        const ember_ckpt_entry_t *e = &m->entries[i];
        size_t kn = strnlen(e->key, EMBER_CKPT_KEY_MAX),
               vn = strnlen(e->value, EMBER_CKPT_VALUE_MAX);
        FUZZ_CHECK(kn > 0 && kn < EMBER_CKPT_KEY_MAX && vn < EMBER_CKPT_VALUE_MAX, "entry %zu", i);
        FUZZ_CHECK(strspn(e->key, "abcdefghijklmnopqrstuvwxyz0123456789_.") == kn, "key '%s'",
                   e->key);
        for (size_t k = 0; k < vn; k++)
            FUZZ_CHECK((unsigned char)e->value[k] >= 0x20 && e->value[k] != 0x7f, "value of %s",
                       e->key);
        FUZZ_CHECK(ember_ckpt_manifest_get(m, e->key) == e->value, "key '%s' twice", e->key);
    }
    for (size_t i = 0; i < m->nfiles; i++) {
        const ember_ckpt_file_t *f = &m->files[i];
        size_t n = strnlen(f->name, EMBER_CKPT_NAME_MAX);
        FUZZ_CHECK(n > 0 && n < EMBER_CKPT_NAME_MAX && !strchr(f->name, '/') &&
                           !strchr(f->name, ' ') && strcmp(f->name, ".") != 0 &&
                           strcmp(f->name, "..") != 0 && strcmp(f->name, "manifest") != 0,
                   "file name '%s'", f->name);
        FUZZ_CHECK(ember_ckpt_manifest_file(m, f->name) == f, "file '%s' twice", f->name);
    }
    char *text = NULL;
    size_t n = 0;
    FUZZ_CHECK(ember_ckpt_manifest_format(m, &text, &n) == EMBER_OK, "format");
    FUZZ_CHECK(n == length && memcmp(text, bytes, n) == 0,
               "written back as %zu bytes, different from the %zu given", n, length);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint8_t mode = fuzz_u8(&in);
    const uint8_t *bytes;
    size_t length = fuzz_take(&in, size, &bytes);
    uint64_t step = mode & 1 ? EMBER_CKPT_ANY_STEP : 100;
    ember_ckpt_manifest_t m;
    char err[1024] = "";

    ember_status_t status = ember_ckpt_manifest_parse((const char *)bytes, length, "manifest", step,
                                                      &m, err, sizeof(err));
    if (status != EMBER_OK) {
        FUZZ_CHECK(status == EMBER_ERR_FORMAT && strncmp(err, "manifest:", 9) == 0,
                   "refused (%d) without a cause: '%s'", status, err);
        FUZZ_CHECK(m.nentries == 0 && m.nfiles == 0 && !m.entries && !m.files,
                   "a refused manifest holds something");
        return 0;
    }
    check_accepted(&m, bytes, length, step);
    ember_ckpt_manifest_free(&m);
    return 0;
}
