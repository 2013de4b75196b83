/*
 * ember: configuration.
 *
 * Every EMBER_* environment variable lives in one table with its default and
 * help text (as UCX's config tables); `ember-info --config` prints it.  Values
 * come from the defaults, then the environment, then command-line overrides
 * (ember_config_set).  Unknown EMBER_* variables are warned about once.
 * Nothing else in ember calls getenv() for an EMBER_* name.
 *
 * Threading: the table is the process's and not locked: load it
 * (ember_config_init; ember_job_join does) and set values from one thread
 * before other threads read it; once loaded and no longer set, the
 * getters read it from any thread.  Nothing here blocks.
 */
#ifndef EMBER_CONFIG_H
#define EMBER_CONFIG_H

#include <ember/status.h>

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EMBER_CONFIG_STRING,
    EMBER_CONFIG_INT,    /* signed 64-bit integer, within [min, max] */
    EMBER_CONFIG_SIZE,   /* bytes, with optional K/M/G suffix (binary) */
    EMBER_CONFIG_DOUBLE, /* within [min, max]; also durations in seconds */
    EMBER_CONFIG_BOOL,   /* 0/1, y/n, yes/no, true/false, on/off */
    EMBER_CONFIG_ENUM    /* one of @values (case-insensitive) */
} ember_config_type_t;

typedef struct {
    const char *name;          /* EMBER_... */
    const char *default_value; /* NULL means "unset" */
    ember_config_type_t type;
    const char *help;
    const char *values; /* ENUM: the accepted words, "a,b,c" */
    double min, max;    /* INT, DOUBLE: the accepted range (both 0: any) */
} ember_config_entry_t;

/**
 * Load the environment over the defaults.  Idempotent; every getter calls it
 * on first use.  Returns ERR_INVALID_PARAM when an EMBER_* value is not one
 * its entry accepts (its type, range or words), after logging one error for
 * each naming the variable, the value and what is accepted; such a value is
 * not taken (the default stays).
 */
ember_status_t ember_config_init(void);

/**
 * Override one value (a command-line flag).  @name must be in the table;
 * @value is copied (both borrowed for the call).  A value already borrowed
 * from ember_config_str for @name is freed.  Errors (logged): ERR_NOT_FOUND
 * (no such variable), ERR_INVALID_PARAM (a value its entry does not
 * accept: the old one stays), ERR_NO_MEMORY.
 */
ember_status_t ember_config_set(const char *name, const char *value);

/** Non-zero when @name was set (by the environment or ember_config_set),
 * not just defaulted. */
int ember_config_is_set(const char *name);

/* The getters (they load the table first if need be).  @name must be in
 * the table: another is a program's bug, logged, and the process aborts. */
/** Current value as a string; NULL when unset.  Borrowed from the table
 * until the value is set again. */
const char *ember_config_str(const char *name);
/** The value as its type says (checked when it was taken); 0 when unset. */
long long ember_config_int(const char *name);
size_t ember_config_size(const char *name);
double ember_config_double(const char *name);
int ember_config_bool(const char *name);

/** Parse a size such as "64K", "1M", "4096" (binary K/M/G/T, an optional
 * B) into *@size_p (untouched on error).  Any thread.  Errors:
 * ERR_INVALID_PARAM (malformed, or too large for a size_t). */
ember_status_t ember_config_parse_size(const char *text, size_t *size_p);

/** Print every variable to @stream (borrowed): name, current value,
 * default, help.  EMBER_SECRET's value is never printed: "(set, not
 * shown)" when it is set. */
void ember_config_print(FILE *stream);

#ifdef __cplusplus
}
#endif
#endif
