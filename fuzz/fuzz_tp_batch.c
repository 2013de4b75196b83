/*
 * fuzz_tp_batch: a call or reply batch as the transport receives one
 * (transport/batch.c: tp_batch_header_parse, then tp_batch_walk, which
 * tp_am_call_batch_cb and tp_am_reply_batch_cb use to hand on each item).
 *
 * Input: [u8: bit 0 a call batch][the batch's own header, sizeof
 * (tp_header_t) bytes][its payload, the items].
 *
 * Invariants: every item handed on is a checked header and a payload
 * inside the batch (read whole: AddressSanitizer sees a read past it),
 * each item starting where the last one's padding ended; a batch walked
 * to the end is exactly its items; a malformed one stops inside it; the
 * batch's own header passes only as an empty-headed, flagless message of
 * at most TP_BATCH_BYTES_MAX.
 */
#include "fuzz/fuzz_input.h"
#include "transport/tp_internal.h"

typedef struct {
    const uint8_t *data;
    size_t length;
    size_t next; /* where the next item's header must be */
    int calls;
    size_t items;
} walk_t;

static void on_item(void *arg, const tp_header_t *hdr, uint8_t *payload)
{
    walk_t *walk = arg;
    size_t at = (size_t)(payload - walk->data);

    FUZZ_CHECK(at == walk->next + sizeof(*hdr), "item %zu at byte %zu, expected %zu", walk->items,
               at, walk->next + sizeof(*hdr));
    FUZZ_CHECK(hdr->length <= walk->length - at, "item %zu: %llu bytes at byte %zu of %zu",
               walk->items, (unsigned long long)hdr->length, at, walk->length);
    FUZZ_CHECK(hdr->magic == TP_MAGIC && hdr->version == TP_VERSION && hdr->op < EMBER_RPC_OP_MAX &&
                       (hdr->flags & ~(walk->calls ? TP_FLAG_ONEWAY : 0u)) == 0 &&
                       (!walk->calls || hdr->status == 0),
               "item %zu: an unchecked header", walk->items);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < hdr->length; i++)
        sink ^= payload[i];
    (void)sink;
    walk->next = at + (((size_t)hdr->length + 7) & ~(size_t)7);
    walk->items++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    int calls = fuzz_u8(&in) & 1;
    const uint8_t *header, *bytes;
    size_t header_length = fuzz_take(&in, sizeof(tp_header_t), &header);
    size_t length = fuzz_take(&in, size, &bytes);
    uint8_t *items = malloc(length ? length : 1);
    tp_header_t hdr;
    size_t bad = 0;

    FUZZ_CHECK(items, "out of memory");
    memcpy(items, bytes, length);
    if (tp_batch_header_parse(header, header_length, length, (size_t)1 << 30, &hdr))
        FUZZ_CHECK(hdr.flags == 0 && hdr.length == length && length <= TP_BATCH_BYTES_MAX,
                   "a batch header of flags %#x, %llu bytes passed", hdr.flags,
                   (unsigned long long)hdr.length);
    /* The walk must hold on any bytes, whatever their header said. */
    walk_t walk = {.data = items, .length = length, .calls = calls};
    if (tp_batch_walk(items, length, calls, on_item, &walk, &bad))
        FUZZ_CHECK(walk.next == length, "a batch of %zu bytes walked to %zu", length, walk.next);
    else
        FUZZ_CHECK(bad <= length, "a malformed batch stopped at %zu of %zu", bad, length);
    free(items);
    return 0;
}
