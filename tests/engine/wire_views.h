/*
 * Tests that drive a table directly: a header and arrays laid out as they
 * arrive, taken through engine/wire/codec as the PS takes them.
 */
#ifndef EMBER_TESTS_ENGINE_WIRE_VIEWS_H
#define EMBER_TESTS_ENGINE_WIRE_VIEWS_H

#include "engine/wire/codec.h"

#include <string.h>

/* @msg then @arrays (@length bytes) in @message (room for both), and the
 * codec's view of them. */
static inline ember_status_t test_lookup_view(const ember_msg_lookup_t *msg, const void *arrays,
                                              size_t length, uint8_t *message,
                                              ember_wire_lookup_view_t *view, char *err,
                                              size_t err_length)
{
    memcpy(message, msg, sizeof(*msg));
    if (length)
        memcpy(message + sizeof(*msg), arrays, length);
    return ember_wire_lookup_unpack(message, sizeof(*msg) + length, view, err, err_length);
}

/* A gradient as the codec gives it: @bytes at @grad (borrowed). */
static inline ember_wire_grad_view_t test_grad_view(const ember_msg_grad_t *msg, const void *grad,
                                                    size_t bytes)
{
    return (ember_wire_grad_view_t){.head = *msg, .grad = grad, .grad_bytes = bytes};
}

#endif
