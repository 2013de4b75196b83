/*
 * ember: status codes.
 *
 * One enum for the whole engine, generated with its strings from a single
 * X-macro (as libuv does), so a code and its text can never drift apart.
 * Zero is success, positive values are "not done yet", negatives are errors.
 *
 * Every call here: any thread, never blocks, allocates nothing, cannot
 * fail; the strings are static storage.
 */
#ifndef EMBER_STATUS_H
#define EMBER_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_STATUS_MAP(X)                           \
    X(OK, 0, "success")                               \
    X(INPROGRESS, 1, "operation in progress")         \
    X(ERR_INVALID_PARAM, -1, "invalid parameter")     \
    X(ERR_NO_MEMORY, -2, "out of memory")             \
    X(ERR_IO, -3, "input/output error")               \
    X(ERR_TIMED_OUT, -4, "timed out")                 \
    X(ERR_PEER_LOST, -5, "peer lost")                 \
    X(ERR_AUTH, -6, "authentication failed")          \
    X(ERR_MSG_TOO_LONG, -7, "message too long")       \
    X(ERR_BAD_MESSAGE, -8, "malformed message")       \
    X(ERR_UNSUPPORTED, -9, "operation not supported") \
    X(ERR_NOT_FOUND, -10, "not found")                \
    X(ERR_CANCELED, -11, "canceled")                  \
    X(ERR_TRANSPORT, -12, "transport error")          \
    X(ERR_NO_DEVICE, -13, "no such device")           \
    X(ERR_OUT_OF_RANGE, -14, "value out of range")    \
    X(ERR_NUMERIC, -15, "non-finite numeric value")   \
    X(ERR_FORMAT, -16, "bad file format")             \
    X(ERR_SHUTDOWN, -17, "shutting down")             \
    X(ERR_EXISTS, -18, "already exists")              \
    X(ERR_REMOTE, -19, "remote handler failed")

typedef enum {
#define EMBER_STATUS_ENUM_(name, value, text) EMBER_##name = (value),
    EMBER_STATUS_MAP(EMBER_STATUS_ENUM_)
#undef EMBER_STATUS_ENUM_
} ember_status_t;

/** Text of a status code; never NULL (unknown codes get a generic text). */
const char *ember_status_string(ember_status_t status);

/**
 * Write a printf-formatted message into a caller's buffer (@text may be NULL
 * or @length 0: nothing is written; at most 1023 characters are kept) and
 * return @status.  For functions that hand the cause of an error back
 * instead of logging it (a PS answers the trainer with it).  An argument may
 * point into @text itself, to wrap an error in more context:
 * ember_status_text(err, n, s, "trainer 1: %s", err).
 */
ember_status_t ember_status_text(char *text, size_t length, ember_status_t status, const char *fmt,
                                 ...) __attribute__((format(printf, 4, 5)));

/** ember_status_text with a va_list. */
ember_status_t ember_status_vtext(char *text, size_t length, ember_status_t status, const char *fmt,
                                  va_list ap) __attribute__((format(printf, 4, 0)));

/** Inverse of the wire encoding: a status received from a peer, validated
 * (a value not in the map: EMBER_ERR_REMOTE). */
ember_status_t ember_status_from_wire(int value);

#ifdef __cplusplus
}
#endif
#endif
