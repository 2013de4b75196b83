/* models/common/text: key=value lines (see text.h). */
#include "models/common/text.h"

#include <ember/log.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void model_text_init(model_text_t *text)
{
    *text = (model_text_t){.data = NULL};
}

void model_text_free(model_text_t *text)
{
    free(text->data);
    model_text_init(text);
}

/* Room for @more bytes and the NUL. */
static int text_reserve(model_text_t *text, size_t more)
{
    if (text->failed)
        return 0;
    if (text->length + more + 1 <= text->capacity)
        return 1;
    size_t want = text->capacity ? text->capacity : 256;
    while (want < text->length + more + 1)
        want *= 2;
    char *grown = realloc(text->data, want);
    if (!grown) {
        text->failed = 1;
        return 0;
    }
    text->data = grown;
    text->capacity = want;
    return 1;
}

static void text_put(model_text_t *text, const char *bytes, size_t n)
{
    if (!text_reserve(text, n))
        return;
    memcpy(text->data + text->length, bytes, n);
    text->length += n;
    text->data[text->length] = '\0';
}

/* @value escaped: a line ends at its newline, whatever the value holds. */
static void text_put_escaped(model_text_t *text, const char *value)
{
    for (const char *p = value; *p; p++) {
        if (*p == '\\')
            text_put(text, "\\\\", 2);
        else if (*p == '\n')
            text_put(text, "\\n", 2);
        else
            text_put(text, p, 1);
    }
}

void model_text_add(model_text_t *text, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *value = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!value) {
        text->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(value, (size_t)n + 1, fmt, ap);
    va_end(ap);
    text_put(text, key, strlen(key));
    text_put(text, "=", 1);
    text_put_escaped(text, value);
    text_put(text, "\n", 1);
    free(value);
}

void model_text_add_float(model_text_t *text, const char *key, float value)
{
    model_text_add(text, key, "%a", (double)value);
}

void model_text_add_u32s(model_text_t *text, const char *key, const uint32_t *values, size_t n)
{
    text_put(text, key, strlen(key));
    text_put(text, "=", 1);
    for (size_t i = 0; i < n; i++) {
        char item[16];
        int length = snprintf(item, sizeof(item), "%s%u", i ? "," : "", values[i]);
        text_put(text, item, (size_t)length);
    }
    text_put(text, "\n", 1);
}

void model_text_add_i64s(model_text_t *text, const char *key, const int64_t *values, size_t n)
{
    text_put(text, key, strlen(key));
    text_put(text, "=", 1);
    for (size_t i = 0; i < n; i++) {
        char item[32];
        int length = snprintf(item, sizeof(item), "%s%lld", i ? "," : "", (long long)values[i]);
        text_put(text, item, (size_t)length);
    }
    text_put(text, "\n", 1);
}

const char *model_text_take(const model_text_t *text)
{
    if (text->failed)
        return NULL;
    return text->data ? text->data : "";
}

/* ---- reading ------------------------------------------------------------------ */

static int key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

/* The line at @line: its key's length (0: not "key=value"), its value and
 * the next line. */
static size_t line_split(const char *line, const char **value_p, const char **next_p)
{
    size_t k = 0;
    while (k < MODEL_TEXT_KEY_MAX && key_char(line[k]))
        k++;
    const char *end = strchr(line, '\n');
    *next_p = end ? end + 1 : line + strlen(line);
    if (k == 0 || k == MODEL_TEXT_KEY_MAX || line[k] != '=' || !end)
        return 0;
    *value_p = line + k + 1;
    return k;
}

/* The line of @key: its value (escaped, up to the newline), or NULL. */
static const char *line_of(const char *text, const char *key)
{
    const size_t want = strlen(key);
    for (const char *line = text; *line;) {
        const char *value, *next;
        size_t k = line_split(line, &value, &next);
        if (k == want && memcmp(line, key, k) == 0)
            return value;
        line = next;
    }
    return NULL;
}

ember_status_t model_text_check(const char *text, const char *const *keys, size_t nkeys, int all,
                                char *err, size_t err_length)
{
    unsigned char seen[128] = {0};
    size_t number = 1;
    if (nkeys > sizeof(seen))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "%zu keys", nkeys);
    for (const char *line = text; *line; number++) {
        const char *value, *next;
        size_t k = line_split(line, &value, &next), i = 0;
        while (k && i < nkeys && (strlen(keys[i]) != k || memcmp(keys[i], line, k) != 0))
            i++;
        if (!k)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "line %zu is not key=value: '%.*s'", number,
                                     (int)(next - line > 40 ? 40 : next - line), line);
        if (i == nkeys || seen[i]++)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "setting '%.*s' %s", (int)k,
                                     line, i == nkeys ? "is unknown" : "is given twice");
        line = next;
    }
    for (size_t i = 0; all && i < nkeys; i++) {
        if (!seen[i])
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "setting '%s' is missing",
                                     keys[i]);
    }
    return EMBER_OK;
}

int model_text_has(const char *text, const char *key)
{
    return line_of(text, key) != NULL;
}

ember_status_t model_text_str(const char *text, const char *key, char *out, size_t capacity,
                              char *err, size_t err_length)
{
    const char *p = line_of(text, key);
    size_t n = 0;
    if (!p)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "setting '%s' is missing", key);
    for (; *p != '\n'; p++) {
        char c = *p;
        if (c == '\\') {
            p++;
            c = *p == 'n' ? '\n' : *p;
            if (*p != 'n' && *p != '\\')
                return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                         "setting '%s': a bad escape", key);
        }
        if (n + 1 >= capacity)
            return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                     "setting '%s': longer than %zu bytes", key, capacity - 1);
        out[n++] = c;
    }
    out[n] = '\0';
    return EMBER_OK;
}

/* The value of @key into @buf as text; its refusal names the key. */
static ember_status_t value_of(const char *text, const char *key, char *buf, size_t capacity,
                               char *err, size_t err_length)
{
    return model_text_str(text, key, buf, capacity, err, err_length);
}

static ember_status_t bad_value(const char *key, const char *value, const char *what, char *err,
                                size_t err_length)
{
    return ember_status_text(err, err_length, EMBER_ERR_FORMAT, "setting '%s' is '%.60s', not %s",
                             key, value, what);
}

/* One decimal integer at full width: the whole of @s. */
static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || (*s != '-' && (*s < '0' || *s > '9')))
        return 0;
    *out = v;
    return 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s < '0' || *s > '9')
        return 0;
    *out = v;
    return 1;
}

ember_status_t model_text_i64(const char *text, const char *key, int64_t min, int64_t max,
                              int64_t *out, char *err, size_t err_length)
{
    char buf[64], what[96];
    int64_t v;
    EMBER_CHECK(value_of(text, key, buf, sizeof(buf), err, err_length));
    if (!parse_i64(buf, &v) || v < min || v > max) {
        snprintf(what, sizeof(what), "an integer from %lld to %lld", (long long)min,
                 (long long)max);
        return bad_value(key, buf, what, err, err_length);
    }
    *out = v;
    return EMBER_OK;
}

ember_status_t model_text_u64(const char *text, const char *key, uint64_t min, uint64_t max,
                              uint64_t *out, char *err, size_t err_length)
{
    char buf[64], what[96];
    uint64_t v;
    EMBER_CHECK(value_of(text, key, buf, sizeof(buf), err, err_length));
    if (!parse_u64(buf, &v) || v < min || v > max) {
        snprintf(what, sizeof(what), "an integer from %llu to %llu", (unsigned long long)min,
                 (unsigned long long)max);
        return bad_value(key, buf, what, err, err_length);
    }
    *out = v;
    return EMBER_OK;
}

ember_status_t model_text_u32(const char *text, const char *key, uint32_t min, uint32_t max,
                              uint32_t *out, char *err, size_t err_length)
{
    uint64_t v;
    EMBER_CHECK(model_text_u64(text, key, min, max, &v, err, err_length));
    *out = (uint32_t)v;
    return EMBER_OK;
}

ember_status_t model_text_float(const char *text, const char *key, float min, float max, float *out,
                                char *err, size_t err_length)
{
    char buf[64], *end;
    EMBER_CHECK(value_of(text, key, buf, sizeof(buf), err, err_length));
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || end == buf || *end || !isfinite(v) || v < min || v > max ||
        (double)(float)v != v) {
        char what[96];
        snprintf(what, sizeof(what), "a float from %g to %g", (double)min, (double)max);
        return bad_value(key, buf, what, err, err_length);
    }
    *out = (float)v;
    return EMBER_OK;
}

ember_status_t model_text_word(const char *text, const char *key, const char *words, int *index_p,
                               char *err, size_t err_length)
{
    char buf[64];
    EMBER_CHECK(value_of(text, key, buf, sizeof(buf), err, err_length));
    const size_t length = strlen(buf);
    int index = 0;
    for (const char *p = words; *p; index++) {
        const char *end = strchr(p, '|');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == length && strncmp(p, buf, n) == 0) {
            *index_p = index;
            return EMBER_OK;
        }
        p += n + (end != NULL);
    }
    char what[128];
    snprintf(what, sizeof(what), "one of %s", words);
    return bad_value(key, buf, what, err, err_length);
}

/* The comma-separated items of @key's value, each at full width. */
static ember_status_t list_of(const char *text, const char *key, size_t max, int64_t min,
                              int64_t top, int64_t *out, size_t *count_p, char *err,
                              size_t err_length)
{
    char buf[4096], what[128];
    size_t n = 0;
    EMBER_CHECK(value_of(text, key, buf, sizeof(buf), err, err_length));
    snprintf(what, sizeof(what), "1 to %zu integers from %lld to %lld", max, (long long)min,
             (long long)top);
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        int64_t v;
        if (n == max || !parse_i64(item, &v) || v < min || v > top)
            return bad_value(key, buf, what, err, err_length);
        out[n++] = v;
    }
    *count_p = n;
    return EMBER_OK;
}

ember_status_t model_text_u32s(const char *text, const char *key, size_t max, uint32_t min,
                               uint32_t top, uint32_t *out, size_t *count_p, char *err,
                               size_t err_length)
{
    int64_t values[256];
    if (max > 256)
        max = 256;
    EMBER_CHECK(list_of(text, key, max, min, top, values, count_p, err, err_length));
    for (size_t i = 0; i < *count_p; i++)
        out[i] = (uint32_t)values[i];
    return EMBER_OK;
}

ember_status_t model_text_i64s(const char *text, const char *key, size_t max, int64_t min,
                               int64_t top, int64_t *out, size_t *count_p, char *err,
                               size_t err_length)
{
    return list_of(text, key, max, min, top, out, count_p, err, err_length);
}
