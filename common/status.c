/* ember: status strings, generated from the same X-macro as the enum. */
#include <ember/status.h>

#include <stdarg.h>
#include <stdio.h>

const char *ember_status_string(ember_status_t status)
{
    switch (status) {
#define EMBER_STATUS_CASE_(name, value, text) case EMBER_##name: return text;
    EMBER_STATUS_MAP(EMBER_STATUS_CASE_)
#undef EMBER_STATUS_CASE_
    }
    return "unknown status";
}

ember_status_t ember_status_from_wire(int value)
{
    switch (value) {
#define EMBER_STATUS_CASE_(name, v, text) case v: return EMBER_##name;
    EMBER_STATUS_MAP(EMBER_STATUS_CASE_)
#undef EMBER_STATUS_CASE_
    }
    /* A peer sent a code we do not know: treat as a remote failure. */
    return EMBER_ERR_REMOTE;
}

ember_status_t ember_status_text(char *text, size_t length, ember_status_t status,
                                 const char *fmt, ...)
{
    va_list ap;
    if (text && length) {
        va_start(ap, fmt);
        vsnprintf(text, length, fmt, ap);
        va_end(ap);
    }
    return status;
}
