/* ember: status strings, generated from the same X-macro as the enum. */
#include <ember/status.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ember_status_string(ember_status_t status)
{
    switch (status) {
#define EMBER_STATUS_CASE_(name, value, text) \
    case EMBER_##name: return text;
        EMBER_STATUS_MAP(EMBER_STATUS_CASE_)
#undef EMBER_STATUS_CASE_
    }
    return "unknown status";
}

ember_status_t ember_status_from_wire(int value)
{
    switch (value) {
#define EMBER_STATUS_CASE_(name, v, text) \
    case v: return EMBER_##name;
        EMBER_STATUS_MAP(EMBER_STATUS_CASE_)
#undef EMBER_STATUS_CASE_
    }
    /* A peer sent a code we do not know: treat as a remote failure. */
    return EMBER_ERR_REMOTE;
}

ember_status_t ember_status_vtext(char *text, size_t length, ember_status_t status, const char *fmt,
                                  va_list ap)
{
    if (!text || !length)
        return status;
    /* Formatted apart, then copied: an argument may be @text itself (an
     * error wrapped in more context), and vsnprintf's buffers must not
     * overlap. */
    char formatted[1024];
    int n = vsnprintf(formatted, sizeof(formatted), fmt, ap);
    size_t used = n < 0 ? 0 : (size_t)n < sizeof(formatted) ? (size_t)n : sizeof(formatted) - 1;
    if (used >= length)
        used = length - 1;
    memmove(text, formatted, used);
    text[used] = '\0';
    return status;
}

ember_status_t ember_status_text(char *text, size_t length, ember_status_t status, const char *fmt,
                                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    ember_status_vtext(text, length, status, fmt, ap);
    va_end(ap);
    return status;
}
