/*
 * fuzz_tp_header: the transport's header of every request and reply
 * (transport/rpc.c, tp_header_parse: what tp_header_valid checks for the
 * active-message callbacks), with the inline head a small payload carries
 * behind it.
 *
 * Input: [u32 payload bytes that came apart][u8 max_message: 0 for the
 * default 1 GiB, else 2^k][the AM header as it came].
 *
 * Invariants: a header passes only when it is the fixed header plus
 * exactly its inline part, of at most TP_INLINE_MAX bytes, with known
 * flags and op, and the payload it announces is its inline part plus what
 * came apart, within max_message (the inline part is read as the handler
 * would: AddressSanitizer sees a read past the header).
 */
#include "fuzz/fuzz_input.h"
#include "transport/tp_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    size_t length = fuzz_u32(&in);
    uint8_t shift = fuzz_u8(&in) % 64;
    size_t max_message = shift ? (size_t)1 << shift : (size_t)1 << 30;
    const uint8_t *bytes;
    size_t header_length = fuzz_take(&in, size, &bytes);
    uint8_t *header = malloc(header_length ? header_length : 1);
    tp_header_t hdr;
    size_t inline_length = 0;

    FUZZ_CHECK(header, "out of memory");
    memcpy(header, bytes, header_length);
    if (tp_header_parse(header, header_length, length, max_message, &hdr, &inline_length)) {
        FUZZ_CHECK(hdr.magic == TP_MAGIC && hdr.version == TP_VERSION && hdr.op < EMBER_RPC_OP_MAX,
                   "a header of magic %#x version %u op %u passed", hdr.magic, hdr.version, hdr.op);
        FUZZ_CHECK(inline_length <= TP_INLINE_MAX && header_length == sizeof(hdr) + inline_length,
                   "an inline part of %zu bytes in a header of %zu", inline_length, header_length);
        FUZZ_CHECK(hdr.length == inline_length + length && hdr.length <= max_message,
                   "a payload of %llu bytes announced for %zu + %zu",
                   (unsigned long long)hdr.length, inline_length, length);
        FUZZ_CHECK((hdr.flags & ((1u << TP_INLINE_SHIFT) - 1) & ~TP_FLAGS_KNOWN) == 0,
                   "unknown flags %#x passed", hdr.flags);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < inline_length; i++)
            sink ^= header[sizeof(hdr) + i];
        (void)sink;
    }
    free(header);
    return 0;
}
