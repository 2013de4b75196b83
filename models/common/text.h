/*
 * models/common/text: a configuration as text, "key=value" lines, the way
 * ember-train's models and driver describe themselves (TRAIN_START carries
 * the text, a checkpoint keeps it, a resume compares it).
 *
 * A key is 1..31 bytes of [a-z0-9_.]; a value any bytes but NUL, with '\'
 * and the newline escaped ("\\", "\n") so that a line ends at the first
 * newline; every line ends with one.  Reading checks every line (its key
 * known, none twice) and each value at its full width against the range its
 * flag has; a bad one is refused naming the key and the value.
 *
 * Threading: none shared; a text is one caller's.
 */
#ifndef MODELS_COMMON_TEXT_H
#define MODELS_COMMON_TEXT_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

/* A text being written (grows as it goes; a failed allocation is kept and
 * reported by model_text_take). */
typedef struct {
    char *data;
    size_t length, capacity;
    int failed;
} model_text_t;

#define MODEL_TEXT_KEY_MAX 32

void model_text_init(model_text_t *text);
void model_text_free(model_text_t *text);

/** One line: @key and the printf-formatted value (escaped). */
void model_text_add(model_text_t *text, const char *key, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/** A float, exactly ("%a": the same bits read back). */
void model_text_add_float(model_text_t *text, const char *key, float value);
/** A list of integers, comma-separated. */
void model_text_add_u32s(model_text_t *text, const char *key, const uint32_t *values, size_t n);
void model_text_add_i64s(model_text_t *text, const char *key, const int64_t *values, size_t n);

/** The text written (NUL-terminated, borrowed from @text), or NULL when an
 * allocation failed. */
const char *model_text_take(const model_text_t *text);

/* ---- reading ---------------------------------------------------------------------- */

/**
 * @text's lines checked: each "key=value", its key one of @keys (@nkeys,
 * all of them required when @all), none twice.  Errors (ERR_FORMAT, one
 * line in @err naming the line or key): a malformed line, an unknown,
 * repeated or missing key.
 */
ember_status_t model_text_check(const char *text, const char *const *keys, size_t nkeys, int all,
                                char *err, size_t err_length);

/** Whether @text has a line of @key. */
int model_text_has(const char *text, const char *key);

/** The value of @key, unescaped, into @out (@capacity bytes, NUL
 * included).  ERR_FORMAT: missing, or longer. */
ember_status_t model_text_str(const char *text, const char *key, char *out, size_t capacity,
                              char *err, size_t err_length);
/** An integer in [@min, @max], at its full width (decimal). */
ember_status_t model_text_i64(const char *text, const char *key, int64_t min, int64_t max,
                              int64_t *out, char *err, size_t err_length);
ember_status_t model_text_u64(const char *text, const char *key, uint64_t min, uint64_t max,
                              uint64_t *out, char *err, size_t err_length);
ember_status_t model_text_u32(const char *text, const char *key, uint32_t min, uint32_t max,
                              uint32_t *out, char *err, size_t err_length);
/** A float (as model_text_add_float writes it, or decimal): finite, within
 * [@min, @max], and exactly a float. */
ember_status_t model_text_float(const char *text, const char *key, float min, float max, float *out,
                                char *err, size_t err_length);
/** One of @words ("sum|mean|max"): its index. */
ember_status_t model_text_word(const char *text, const char *key, const char *words, int *index_p,
                               char *err, size_t err_length);
/** 1 to @max integers in [@min, @top], comma-separated, into @out; their count. */
ember_status_t model_text_u32s(const char *text, const char *key, size_t max, uint32_t min,
                               uint32_t top, uint32_t *out, size_t *count_p, char *err,
                               size_t err_length);
ember_status_t model_text_i64s(const char *text, const char *key, size_t max, int64_t min,
                               int64_t top, int64_t *out, size_t *count_p, char *err,
                               size_t err_length);

#endif
