/* engine/io/checkpoint_manifest: a checkpoint's manifest in memory, its
 * text (strict parser and writer).  The layout: checkpoint.h. */
#include "engine/io/checkpoint.h"

#include "common/reserve.h"
#include "engine/io/durable.h"

#include <ember/log.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_HEADER "ember-checkpoint 1"

void ember_ckpt_manifest_init(ember_ckpt_manifest_t *m, uint64_t step)
{
    *m = (ember_ckpt_manifest_t){.step = step};
}

void ember_ckpt_manifest_free(ember_ckpt_manifest_t *m)
{
    free(m->entries);
    free(m->files);
    ember_ckpt_manifest_init(m, m->step);
}

/* ---------------------------------------------------------------- checks */

/* Why @key (@n bytes) cannot be a key, or NULL. */
static const char *ckpt_key_fault(const char *key, size_t n)
{
    if (n == 0)
        return "an empty key";
    if (n >= EMBER_CKPT_KEY_MAX)
        return "a key longer than 31 characters";
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return "a key with a character outside [a-z0-9_.]";
    }
    return NULL;
}

/* Why @value (@n bytes) cannot be a value, or NULL. */
static const char *ckpt_value_fault(const char *value, size_t n)
{
    if (n >= EMBER_CKPT_VALUE_MAX)
        return "a value of 512 bytes or more";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c < 0x20 || c == 0x7f)
            return "a value with a control character";
    }
    return NULL;
}

/* Why @name (@n bytes) cannot be a data file's name, or NULL. */
static const char *ckpt_name_fault(const char *name, size_t n)
{
    if (n == 0)
        return "an empty file name";
    if (n >= EMBER_CKPT_NAME_MAX)
        return "a file name longer than 63 characters";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c <= 0x20 || c == 0x7f || c == '/')
            return "a file name with '/', a space or a control character";
    }
    static const char *const reserved[] = {".", "..", "manifest", "manifest.tmp"};
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (strlen(reserved[i]) == n && memcmp(name, reserved[i], n) == 0)
            return "a reserved file name";
    return NULL;
}

/* ---------------------------------------------------------------- in memory */

static ember_ckpt_entry_t *ckpt_entry(const ember_ckpt_manifest_t *m, const char *key)
{
    for (size_t i = 0; i < m->nentries; i++)
        if (strcmp(m->entries[i].key, key) == 0)
            return &m->entries[i];
    return NULL;
}

ember_status_t ember_ckpt_manifest_set(ember_ckpt_manifest_t *m, const char *key, const char *value)
{
    const char *fault = !key || !value ? "NULL" : ckpt_key_fault(key, strlen(key));

    if (!fault)
        fault = ckpt_value_fault(value, strlen(value));
    if (fault) {
        ember_error("checkpoint", "manifest key '%s': %s", key ? key : "(null)", fault);
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_ckpt_entry_t *e = ckpt_entry(m, key);
    if (!e) {
        if (!EMBER_RESERVE(m->entries, m->entries_capacity, m->nentries + 1))
            return EMBER_ERR_NO_MEMORY;
        e = &m->entries[m->nentries++];
        snprintf(e->key, sizeof(e->key), "%s", key);
    }
    snprintf(e->value, sizeof(e->value), "%s", value);
    return EMBER_OK;
}

const char *ember_ckpt_manifest_get(const ember_ckpt_manifest_t *m, const char *key)
{
    const ember_ckpt_entry_t *e = key ? ckpt_entry(m, key) : NULL;
    return e ? e->value : NULL;
}

const ember_ckpt_file_t *ember_ckpt_manifest_file(const ember_ckpt_manifest_t *m, const char *name)
{
    for (size_t i = 0; name && i < m->nfiles; i++)
        if (strcmp(m->files[i].name, name) == 0)
            return &m->files[i];
    return NULL;
}

ember_status_t ember_ckpt_manifest_add_file(ember_ckpt_manifest_t *m, const char *name,
                                            uint64_t bytes, uint32_t crc32c)
{
    const char *fault = !name ? "NULL" : ckpt_name_fault(name, strlen(name));

    if (!fault && ember_ckpt_manifest_file(m, name))
        fault = "named twice";
    if (fault) {
        ember_error("checkpoint", "manifest file '%s': %s", name ? name : "(null)", fault);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (!EMBER_RESERVE(m->files, m->files_capacity, m->nfiles + 1))
        return EMBER_ERR_NO_MEMORY;
    ember_ckpt_file_t *f = &m->files[m->nfiles++];
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->bytes = bytes;
    f->crc32c = crc32c;
    return EMBER_OK;
}

/* ---------------------------------------------------------------- parser */

typedef struct {
    const char *where;
    size_t line;
    char *err;
    size_t err_length;
} ckpt_parse_t;

static ember_status_t ckpt_fail(const ckpt_parse_t *p, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* "WHERE:LINE: " and the cause, into the parse's error text. */
static ember_status_t ckpt_fail(const ckpt_parse_t *p, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return ember_status_text(p->err, p->err_length, EMBER_ERR_FORMAT, "%s:%zu: %s", p->where,
                             p->line, what);
}

/* A piece of the line: bytes and length. */
typedef struct {
    const char *s;
    size_t n;
} ckpt_span_t;

/* The next token of *@rest up to a space (consumed) or its end. */
static ckpt_span_t ckpt_token(ckpt_span_t *rest)
{
    const char *space = memchr(rest->s, ' ', rest->n);
    ckpt_span_t t = {rest->s, space ? (size_t)(space - rest->s) : rest->n};
    size_t skip = space ? t.n + 1 : t.n;
    rest->s += skip;
    rest->n -= skip;
    return t;
}

static int ckpt_is(ckpt_span_t t, const char *word)
{
    return t.n == strlen(word) && memcmp(t.s, word, t.n) == 0;
}

/* Decimal digits, no sign, no leading zero, below 2^64. */
static int ckpt_u64(ckpt_span_t t, uint64_t *value_p)
{
    uint64_t v = 0;
    if (t.n == 0 || (t.s[0] == '0' && t.n > 1))
        return 0;
    for (size_t i = 0; i < t.n; i++) {
        unsigned d = (unsigned)(unsigned char)t.s[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *value_p = v;
    return 1;
}

/* Exactly 8 lower-case hex digits. */
static int ckpt_hex32(ckpt_span_t t, uint32_t *value_p)
{
    uint32_t v = 0;
    if (t.n != 8)
        return 0;
    for (size_t i = 0; i < 8; i++) {
        char c = t.s[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                                            : 16u;
        if (d > 15)
            return 0;
        v = v << 4 | d;
    }
    *value_p = v;
    return 1;
}

/* A printable copy of @t for a message (cut, control bytes as '?'). */
static const char *ckpt_show(ckpt_span_t t, char *out, size_t length)
{
    size_t n = t.n < length - 1 ? t.n : length - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t.s[i];
        out[i] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
    }
    out[n] = '\0';
    return out;
}

/* "key NAME VALUE": VALUE the rest of the line. */
static ember_status_t ckpt_parse_key(const ckpt_parse_t *p, ckpt_span_t rest,
                                     ember_ckpt_manifest_t *m)
{
    char shown[40];
    int has_value = memchr(rest.s, ' ', rest.n) != NULL;
    ckpt_span_t key = ckpt_token(&rest);
    const char *fault = ckpt_key_fault(key.s, key.n);

    if (fault)
        return ckpt_fail(p, "'%s': %s", ckpt_show(key, shown, sizeof(shown)), fault);
    ckpt_show(key, shown, sizeof(shown));
    if (!has_value)
        return ckpt_fail(p, "key '%s' has no value (\"key NAME VALUE\")", shown);
    if ((fault = ckpt_value_fault(rest.s, rest.n)) != NULL)
        return ckpt_fail(p, "key '%s': %s", shown, fault);
    char name[EMBER_CKPT_KEY_MAX];
    memcpy(name, key.s, key.n);
    name[key.n] = '\0';
    if (ckpt_entry(m, name))
        return ckpt_fail(p, "key '%s' given twice", shown);
    if (!EMBER_RESERVE(m->entries, m->entries_capacity, m->nentries + 1))
        return EMBER_ERR_NO_MEMORY;
    ember_ckpt_entry_t *e = &m->entries[m->nentries++];
    memcpy(e->key, name, key.n + 1);
    memcpy(e->value, rest.s, rest.n);
    e->value[rest.n] = '\0';
    return EMBER_OK;
}

/* "file NAME BYTES CRC32C". */
static ember_status_t ckpt_parse_file(const ckpt_parse_t *p, ckpt_span_t rest,
                                      ember_ckpt_manifest_t *m)
{
    char shown[72], number[32];
    ckpt_span_t name = ckpt_token(&rest), bytes = ckpt_token(&rest), crc = ckpt_token(&rest);
    const char *fault = ckpt_name_fault(name.s, name.n);
    ember_ckpt_file_t f = {0};

    ckpt_show(name, shown, sizeof(shown));
    if (fault)
        return ckpt_fail(p, "'%s': %s", shown, fault);
    if (!ckpt_u64(bytes, &f.bytes))
        return ckpt_fail(p, "file '%s': size '%s' is not a decimal number below 2^64", shown,
                         ckpt_show(bytes, number, sizeof(number)));
    if (!ckpt_hex32(crc, &f.crc32c))
        return ckpt_fail(p, "file '%s': CRC-32C '%s' is not 8 lower-case hex digits", shown,
                         ckpt_show(crc, number, sizeof(number)));
    if (rest.n > 0 || rest.s[-1] == ' ')
        return ckpt_fail(p, "file '%s': more than NAME BYTES CRC32C on the line", shown);
    memcpy(f.name, name.s, name.n); /* the name itself: shown may differ */
    if (ember_ckpt_manifest_file(m, f.name))
        return ckpt_fail(p, "file '%s' named twice", shown);
    if (!EMBER_RESERVE(m->files, m->files_capacity, m->nfiles + 1))
        return EMBER_ERR_NO_MEMORY;
    m->files[m->nfiles++] = f;
    return EMBER_OK;
}

/* The first two lines: the header and "step N" (N @step unless ANY). */
static ember_status_t ckpt_parse_head(const ckpt_parse_t *p, ckpt_span_t line, uint64_t step,
                                      ember_ckpt_manifest_t *m)
{
    char shown[48];
    if (p->line == 1) {
        if (!ckpt_is(line, CKPT_HEADER))
            return ckpt_fail(p,
                             "'%s' is not \"" CKPT_HEADER "\" (not a manifest, or another "
                             "version)",
                             ckpt_show(line, shown, sizeof(shown)));
        return EMBER_OK;
    }
    ckpt_span_t word = ckpt_token(&line);
    if (!ckpt_is(word, "step"))
        return ckpt_fail(p, "the second line is not \"step N\"");
    if (!ckpt_u64(line, &m->step))
        return ckpt_fail(p, "step '%s' is not a decimal number below 2^64",
                         ckpt_show(line, shown, sizeof(shown)));
    if (step != EMBER_CKPT_ANY_STEP && m->step != step)
        return ckpt_fail(p, "step %llu, but the directory is step %llu",
                         (unsigned long long)m->step, (unsigned long long)step);
    return EMBER_OK;
}

/* Line @p->line (no '\n'); *end_p set by "end". */
static ember_status_t ckpt_parse_line(const ckpt_parse_t *p, ckpt_span_t line, uint64_t step,
                                      ember_ckpt_manifest_t *m, int *end_p)
{
    char shown[24];
    if (p->line <= 2)
        return ckpt_parse_head(p, line, step, m);
    if (ckpt_is(line, "end")) {
        *end_p = 1;
        return EMBER_OK;
    }
    ckpt_span_t word = ckpt_token(&line);
    if (ckpt_is(word, "key") && m->nfiles > 0)
        return ckpt_fail(p, "a key line after the file lines (keys come first)");
    if (ckpt_is(word, "key"))
        return ckpt_parse_key(p, line, m);
    if (ckpt_is(word, "file"))
        return ckpt_parse_file(p, line, m);
    return ckpt_fail(p, "'%s' is not a manifest line (key, file or end)",
                     ckpt_show(word, shown, sizeof(shown)));
}

ember_status_t ember_ckpt_manifest_parse(const char *text, size_t length, const char *where,
                                         uint64_t step, ember_ckpt_manifest_t *m, char *err,
                                         size_t err_length)
{
    ckpt_parse_t p = {.where = where ? where : "manifest", .err = err, .err_length = err_length};
    ember_status_t status = EMBER_OK;
    size_t at = 0;
    int end = 0;

    ember_ckpt_manifest_init(m, 0);
    if (length == 0)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "%s: empty", p.where);
    while (status == EMBER_OK && at < length && !end) {
        const char *nl = memchr(text + at, '\n', length - at);
        p.line++;
        if (!nl) {
            status = ckpt_fail(&p, "the last line has no newline: the manifest is cut short");
            break;
        }
        ckpt_span_t line = {text + at, (size_t)(nl - (text + at))};
        status = ckpt_parse_line(&p, line, step, m, &end);
        at += line.n + 1;
    }
    if (status == EMBER_OK && !end)
        status = ckpt_fail(&p, "no \"end\" line: the manifest is cut short");
    else if (status == EMBER_OK && at < length)
        status = ckpt_fail(&p, "%zu bytes after the \"end\" line", length - at);
    if (status != EMBER_OK)
        ember_ckpt_manifest_free(m);
    return status;
}

/* ---------------------------------------------------------------- writer */

ember_status_t ember_ckpt_manifest_format(const ember_ckpt_manifest_t *m, char **text_p,
                                          size_t *length_p)
{
    size_t cap = 64 + m->nentries * (EMBER_CKPT_KEY_MAX + EMBER_CKPT_VALUE_MAX + 8) +
                 m->nfiles * (EMBER_CKPT_NAME_MAX + 40);
    char *text = malloc(cap);
    size_t n = 0;

    if (!text)
        return EMBER_ERR_NO_MEMORY;
    n += (size_t)snprintf(text + n, cap - n, CKPT_HEADER "\nstep %llu\n",
                          (unsigned long long)m->step);
    /* %.*s: a field filled by hand without its NUL cannot run past it;
     * the parse that follows refuses what it cuts. */
    for (size_t i = 0; i < m->nentries; i++)
        n += (size_t)snprintf(text + n, cap - n, "key %.*s %.*s\n", EMBER_CKPT_KEY_MAX - 1,
                              m->entries[i].key, EMBER_CKPT_VALUE_MAX - 1, m->entries[i].value);
    for (size_t i = 0; i < m->nfiles; i++)
        n += (size_t)snprintf(text + n, cap - n, "file %.*s %llu %08x\n", EMBER_CKPT_NAME_MAX - 1,
                              m->files[i].name, (unsigned long long)m->files[i].bytes,
                              (unsigned)m->files[i].crc32c);
    n += (size_t)snprintf(text + n, cap - n, "end\n");
    *text_p = text;
    *length_p = n;
    return EMBER_OK;
}

/* @text parsed back as the reader will take it, and saying what @m says
 * (a value or name filled in by hand could hold a line of its own). */
static ember_status_t ckpt_manifest_check(const ember_ckpt_manifest_t *m, const char *text,
                                          size_t length, const char *path, char *err,
                                          size_t err_length)
{
    ember_ckpt_manifest_t back;
    ember_status_t status =
            ember_ckpt_manifest_parse(text, length, path, m->step, &back, err, err_length);
    if (status == EMBER_OK && (back.nentries != m->nentries || back.nfiles != m->nfiles))
        status = ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                   "%s: a key, value or file name holds a line of its own", path);
    ember_ckpt_manifest_free(&back);
    if (status == EMBER_ERR_FORMAT)
        status = ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                   "refusing to write a manifest that would not read back: %s",
                                   err ? err : "");
    return status;
}

/* fsync the directory that holds @dir, so @dir's own name stays. */
static ember_status_t ckpt_sync_parent(const char *dir, char *err, size_t err_length)
{
    char parent[4096];
    size_t n = strlen(dir);

    while (n > 1 && dir[n - 1] == '/')
        n--;
    while (n > 0 && dir[n - 1] != '/')
        n--;
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (n == 0 || n >= sizeof(parent))
        return ember_durable_sync_dir(n == 0 ? "." : "/", err, err_length);
    memcpy(parent, dir, n);
    parent[n] = '\0';
    return ember_durable_sync_dir(parent, err, err_length);
}

ember_status_t ember_ckpt_manifest_write(const char *dir, const ember_ckpt_manifest_t *m, char *err,
                                         size_t err_length)
{
    char path[4096], *text = NULL;
    size_t length = 0;
    ember_durable_t d;

    if (!dir || !m || (size_t)snprintf(path, sizeof(path), "%s/manifest", dir) >= sizeof(path))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "manifest: no directory, or its path is too long");
    EMBER_CHECK(ember_ckpt_manifest_format(m, &text, &length));
    ember_status_t status = ckpt_manifest_check(m, text, length, path, err, err_length);
    if (status == EMBER_OK)
        status = ember_durable_open(&d, path, err, err_length);
    if (status == EMBER_OK) {
        (void)ember_durable_write(&d, text, length, err, err_length);
        status = ember_durable_commit(&d, NULL, NULL, err, err_length);
    }
    if (status == EMBER_OK)
        status = ckpt_sync_parent(dir, err, err_length);
    free(text);
    return status;
}
