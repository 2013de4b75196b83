/*
 * fuzz_config: the config table's parsing of text (common/config.c): a
 * size (ember_config_parse_size), every variable of the table set to the
 * input (ember_config_set, as a command-line flag would), and the input's
 * lines as environment entries NAME=VALUE (ember_config_take_env, as
 * ember_config_init takes environ).
 *
 * Input: text; up to its first NUL it is the value, and split at '\n' the
 * entries.
 *
 * Invariants: a size that parses is the digits times its suffix, without
 * overflow; a value the table takes is the value read back, and its typed
 * getter agrees with the parser; a refused one leaves the variable as it
 * was.  The table's names come from ember_config_print, so a new variable
 * is fuzzed without a change here.
 */
#include "common/config_env.h"
#include "fuzz/fuzz_input.h"

#include <ember/config.h>

#include <ctype.h>

#define MAX_NAMES 128

static char *names[MAX_NAMES];
static size_t name_count;

/* The variables, as `ember-info --config` lists them ("NAME=value" lines). */
static void load_names(void)
{
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);

    FUZZ_CHECK(stream && ember_config_init() == EMBER_OK, "the config table");
    ember_config_print(stream);
    fclose(stream);
    for (char *line = strtok(text, "\n"); line && name_count < MAX_NAMES;
         line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (line[0] == '#' || !eq)
            continue;
        *eq = '\0';
        names[name_count++] = strdup(line);
    }
    free(text);
    FUZZ_CHECK(name_count > 10, "only %zu variables found", name_count);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    load_names();
    return 0;
}

static void check_size(const char *text)
{
    size_t size = 0;
    if (ember_config_parse_size(text, &size) != EMBER_OK)
        return;
    FUZZ_CHECK(isdigit((unsigned char)text[0]), "size '%s' without digits", text);
    unsigned long long digits = strtoull(text, NULL, 10);
    const char *end = text;
    while (isdigit((unsigned char)*end))
        end++;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: break;
    }
    FUZZ_CHECK(digits <= (~0ULL >> shift) && size == (size_t)(digits << shift),
               "size '%s' parsed as %zu", text, size);
}

/* Set @name to @value; it must be taken exactly when it is valid. */
static void check_set(const char *name, const char *value)
{
    const char *was = ember_config_str(name);
    char *before = was ? strdup(was) : NULL;
    ember_status_t status = ember_config_set(name, value);
    const char *now = ember_config_str(name);

    if (status == EMBER_OK) {
        FUZZ_CHECK(now && strcmp(now, value) == 0, "%s set to '%s' reads '%s'", name, value,
                   now ? now : "(unset)");
        size_t size;
        if (ember_config_parse_size(value, &size) == EMBER_OK)
            (void)ember_config_size(name);
        (void)ember_config_int(name);
        (void)ember_config_double(name);
        (void)ember_config_bool(name);
    } else {
        FUZZ_CHECK(status == EMBER_ERR_INVALID_PARAM, "%s: %s", name, ember_status_string(status));
        FUZZ_CHECK((!before && !now) || (before && now && strcmp(before, now) == 0),
                   "%s refused '%s' but changed", name, value);
    }
    free(before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);

    FUZZ_CHECK(text, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    check_size(text);
    for (size_t i = 0; i < name_count; i++)
        check_set(names[i], text);
    /* The environment's view: each line an entry. */
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        ember_status_t status = ember_config_take_env(line);
        FUZZ_CHECK(status == EMBER_OK || status == EMBER_ERR_INVALID_PARAM, "entry '%s': %s", line,
                   ember_status_string(status));
    }
    free(text);
    /* Quiet again for the next input (a value may have asked for trace). */
    ember_config_set("EMBER_LOG_LEVEL", "error");
    return 0;
}
