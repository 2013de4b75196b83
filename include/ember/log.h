/*
 * ember: logging.
 *
 * Lines look like `host:pid:rank [subsys] level message`, so output from many
 * ranks on many hosts can be merged and still read.  The level comes from
 * EMBER_LOG_LEVEL.  An error is logged once, where it is detected; callers
 * pass the status up through EMBER_CHECK, which leaves a debug breadcrumb.
 *
 * Threading: ember_log_emit (and the macros) from any thread, one write(2)
 * a line, never interleaved; the level and rank are plain process-wide
 * settings, set from the main thread (ember_log_init, ember_log_set_rank)
 * before other threads log.  Nothing here fails or blocks (but on stderr
 * itself).
 */
#ifndef EMBER_LOG_H
#define EMBER_LOG_H

#include <ember/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EMBER_LOG_FATAL,
    EMBER_LOG_ERROR,
    EMBER_LOG_WARN,
    EMBER_LOG_INFO,
    EMBER_LOG_DEBUG,
    EMBER_LOG_TRACE
} ember_log_level_t;

/** Set the rank shown in every line (-1 until known). */
void ember_log_set_rank(int rank);

/** Re-read EMBER_LOG_LEVEL from the config table. */
void ember_log_init(void);

/** A backtrace on stderr on a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
 * SIGABRT), then the signal's default action: a crashed process says where
 * (the launcher reports the signal).  Call once, early, from the main
 * thread (it replaces those signals' handlers).  Cannot fail. */
void ember_crash_handler_install(void);

/** The message of the last error (or fatal) line the calling thread logged
 * (without its `host:pid:rank [subsys] level` prefix; at most 1023 bytes),
 * "" when none since ember_log_clear_error: the reason a binding gives for
 * the call that failed (the Python package puts it in its exceptions).
 * Thread-local storage, valid until this thread logs another error.  Lines
 * below the threshold (EMBER_LOG_LEVEL fatal) are not kept.  Never fails. */
const char *ember_log_last_error(void);
/** Forget it (this thread's).  Never fails. */
void ember_log_clear_error(void);

/** Current threshold; messages above it are dropped. */
ember_log_level_t ember_log_level(void);

/** printf-like; prints one whole line to stderr in a single write (at
 * most 2047 bytes: longer is cut); @subsys and @fmt's arguments borrowed
 * for the call. */
void ember_log_emit(ember_log_level_t level, const char *subsys, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#define EMBER_LOG_(lvl, subsys, ...)                      \
    do {                                                  \
        if ((lvl) <= ember_log_level())                   \
            ember_log_emit((lvl), (subsys), __VA_ARGS__); \
    } while (0)

#define ember_error(subsys, ...) EMBER_LOG_(EMBER_LOG_ERROR, subsys, __VA_ARGS__)
#define ember_warn(subsys, ...)  EMBER_LOG_(EMBER_LOG_WARN, subsys, __VA_ARGS__)
#define ember_info(subsys, ...)  EMBER_LOG_(EMBER_LOG_INFO, subsys, __VA_ARGS__)
#define ember_debug(subsys, ...) EMBER_LOG_(EMBER_LOG_DEBUG, subsys, __VA_ARGS__)
#define ember_trace(subsys, ...) EMBER_LOG_(EMBER_LOG_TRACE, subsys, __VA_ARGS__)

/* Propagate an error status up, leaving a one-line breadcrumb (NCCLCHECK). */
#define EMBER_CHECK(expr)                                                      \
    do {                                                                       \
        ember_status_t check_status_ = (expr);                                 \
        if (check_status_ < 0) {                                               \
            ember_debug("trace", "%s:%d: %s -> %s", __FILE__, __LINE__, #expr, \
                        ember_status_string(check_status_));                   \
            return check_status_;                                              \
        }                                                                      \
    } while (0)

/* The same for a function with something to undo: @status takes the error
 * and control goes to @label, where the function releases what it holds and
 * returns @status (UCX's UCS_CHECK_GOTO). */
#define EMBER_CHECK_GOTO(expr, status, label)                                  \
    do {                                                                       \
        (status) = (expr);                                                     \
        if ((status) < 0) {                                                    \
            ember_debug("trace", "%s:%d: %s -> %s", __FILE__, __LINE__, #expr, \
                        ember_status_string(status));                          \
            goto label;                                                        \
        }                                                                      \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
