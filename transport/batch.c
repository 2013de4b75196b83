/*
 * transport/batch: small messages to one peer leave as one message.
 *
 * Replies.  A server that falls behind finds several requests ready per
 * progress pass (a PS serving a trainer's window of lookups).  Over TCP
 * each reply is a send system call, which cost a PS more than the lookup
 * itself; held until the handler run ends and packed together, they cost
 * one.  A reply that is alone at the end of the run goes as it was posted
 * (no copy); replies over the peer's item limit (tp_batch_item_max: 2 KiB,
 * 8 KiB over tcp, where a reply's copy into the batch costs far less than
 * its system call) never wait, and none waits longer than TP_BATCH_HOLD_S
 * after the handler that held it, plus the handler then running (a long
 * handler, e.g. an allreduce adding a segment, must not hold up the acks of
 * the ones before it).
 *
 * Calls.  Between ember_rpc_batch_begin and _end, small calls and one-way
 * sends to a connected peer are held the same way (libfabric's FI_MORE),
 * until the caller next waits or progresses, the batch is full, or _end:
 * a client with a window of lookups in flight posts the ones a batch of
 * replies freed together, and the server takes them in one message.
 *
 * Any other message to the peer flushes what it holds first, so a peer
 * still sees our messages in the order they were posted; replies and
 * requests never share a batch.
 *
 * Wire format (TP_AM_REPLY_BATCH, TP_AM_CALL_BATCH): a tp_header_t whose
 * length is the payload's, then per item its own tp_header_t and payload,
 * padded to 8.
 */
#include "transport/tp_internal.h"

#include <ember/log.h>

#include <string.h>

static size_t item_bytes(size_t payload)
{
    return sizeof(tp_header_t) + ((payload + 7) & ~(size_t)7);
}

int tp_request_batchable(ember_tp_t *tp, const tp_send_t *send)
{
    const tp_peer_t *peer = &tp->peers[send->peer];

    /* READY: its lanes, and so its item limit, are known.  A call whose
     * reply comes by rendezvous is alone by design (TP_FLAG_REPLY_RNDV). */
    return tp->batching && peer->state == TP_PEER_READY && send->mem_type == EMBER_MEM_HOST &&
           !(send->header.flags & TP_FLAG_REPLY_RNDV) &&
           (size_t)send->header.length <= tp_batch_item_max(peer);
}

void tp_send_defer(ember_tp_t *tp, tp_send_t *send)
{
    tp_peer_t *peer = &tp->peers[send->peer];
    size_t bytes = item_bytes((size_t)send->header.length);

    if (peer->deferred_count &&
        (peer->deferred_am != send->am_id || peer->deferred_bytes + bytes > tp_batch_bytes(peer)))
        tp_batch_flush(tp, send->peer);
    if (!peer->deferred_count) {
        tp->deferred_peers++;
        peer->deferred_am = send->am_id;
    }
    tp_list_push(&peer->deferred, &send->link);
    peer->deferred_count++;
    peer->deferred_bytes += bytes;
}

/* Pack @held (a detached list of replies, or of requests) into one message. */
static void batch_send(ember_tp_t *tp, int rank, unsigned am_id, tp_list_t *held, size_t bytes)
{
    uint8_t *buffer = ember_pool_get(&tp->pool, bytes);
    tp_send_t *batch = NULL;
    ember_iov_t iov = {.buffer = buffer, .length = bytes};
    unsigned batch_am = am_id == TP_AM_REPLY ? TP_AM_REPLY_BATCH : TP_AM_CALL_BATCH;

    if (buffer && tp_send_alloc(tp, rank, batch_am, &iov, 1, &batch) != EMBER_OK)
        batch = NULL;
    if (!batch) {
        /* No memory for the batch: each reply goes alone instead. */
        ember_pool_put(&tp->pool, buffer);
        while (!tp_list_empty(held)) {
            tp_send_t *send = tp_container_of(held->next, tp_send_t, link);
            tp_list_del(&send->link);
            tp_peer_send(tp, send);
        }
        return;
    }
    size_t offset = 0;
    while (!tp_list_empty(held)) {
        tp_send_t *send = tp_container_of(held->next, tp_send_t, link);
        size_t payload = (size_t)send->header.length;

        tp_list_del(&send->link);
        memcpy(buffer + offset, &send->header, sizeof(tp_header_t));
        offset += sizeof(tp_header_t);
        for (size_t i = 0; i < send->iovcnt; i++) {
            memcpy(buffer + offset, send->iov[i].buffer, send->iov[i].length);
            offset += send->iov[i].length;
        }
        memset(buffer + offset, 0, item_bytes(payload) - sizeof(tp_header_t) - payload);
        offset += item_bytes(payload) - sizeof(tp_header_t) - payload;
        /* Its payload is copied: a zero-copy reply's buffer is free now
         * (a call's future waits on for its reply). */
        tp_send_complete(send, EMBER_OK);
        if (batch_am == TP_AM_REPLY_BATCH)
            tp->batched_replies++;
        else
            tp->batched_calls++;
    }
    if (batch_am == TP_AM_REPLY_BATCH)
        tp->reply_batches++;
    else
        tp->call_batches++;
    batch->header = (tp_header_t){.magic = TP_MAGIC, .version = TP_VERSION, .length = bytes};
    batch->copy = buffer;
    tp_peer_send(tp, batch);
}

void tp_batch_flush(ember_tp_t *tp, int rank)
{
    tp_peer_t *peer = &tp->peers[rank];
    size_t count = peer->deferred_count, bytes = peer->deferred_bytes;
    tp_list_t held;

    if (!count)
        return;
    /* Detach first: the sends below come back through tp_peer_send. */
    tp_list_init(&held);
    held.next = peer->deferred.next;
    held.prev = peer->deferred.prev;
    held.next->prev = &held;
    held.prev->next = &held;
    tp_list_init(&peer->deferred);
    peer->deferred_count = peer->deferred_bytes = 0;
    if (--tp->deferred_peers == 0)
        tp->deferred_since = 0.0;

    if (count == 1) {
        tp_send_t *send = tp_container_of(held.next, tp_send_t, link);
        tp_list_del(&send->link);
        tp_peer_send(tp, send);
        return;
    }
    batch_send(tp, rank, peer->deferred_am, &held, bytes);
}

void tp_batch_flush_all(ember_tp_t *tp)
{
    for (int rank = 0; rank < tp->world_size && tp->deferred_peers; rank++)
        tp_batch_flush(tp, rank);
}

/* ---- receiving ------------------------------------------------------------ */

static const char *batch_kind(int calls)
{
    return calls ? "call" : "reply";
}

int tp_batch_header_parse(const void *header, size_t header_length, size_t length,
                          size_t max_message, tp_header_t *out)
{
    size_t inline_length;
    return tp_header_parse(header, header_length, length, max_message, out, &inline_length) &&
           inline_length == 0 && out->flags == 0 && length <= (size_t)TP_BATCH_BYTES_MAX;
}

int tp_batch_walk(uint8_t *data, size_t length, int calls, tp_batch_item_cb cb, void *arg,
                  size_t *bad_offset_p)
{
    size_t offset = 0;

    while (offset < length) {
        tp_header_t hdr;
        if (length - offset < sizeof(hdr))
            goto malformed;
        memcpy(&hdr, data + offset, sizeof(hdr));
        /* A request item may be one-way; nothing else rides in a batch.  The
         * item is whole, its padding too, before it is handed on. */
        uint32_t flags_ok = calls ? TP_FLAG_ONEWAY : 0;
        if (hdr.magic != TP_MAGIC || hdr.version != TP_VERSION || (hdr.flags & ~flags_ok) != 0 ||
            hdr.op >= EMBER_RPC_OP_MAX || hdr.length > length - offset - sizeof(hdr) ||
            item_bytes((size_t)hdr.length) > length - offset || (calls && hdr.status != 0))
            goto malformed;
        cb(arg, &hdr, data + offset + sizeof(hdr));
        offset += item_bytes((size_t)hdr.length);
    }
    return 1;
malformed:
    *bad_offset_p = offset;
    return 0;
}

typedef struct {
    ember_tp_t *tp;
    int peer;
} batch_target_t;

static void deliver_call(void *arg, const tp_header_t *hdr, uint8_t *payload)
{
    batch_target_t *to = arg;
    (void)tp_request_deliver_copy(to->tp, to->peer, hdr, payload, (size_t)hdr->length);
}

static void deliver_reply(void *arg, const tp_header_t *hdr, uint8_t *payload)
{
    batch_target_t *to = arg;
    (void)tp_reply_deliver(to->tp, to->peer, hdr, payload, 0, payload, (size_t)hdr->length, 0);
}

/* Hand every item of a batch on: a reply to its call, a request to its
 * handler's queue; stop at the first malformed one. */
static void batch_deliver(ember_tp_t *tp, int peer, int calls, uint8_t *data, size_t length)
{
    batch_target_t to = {.tp = tp, .peer = peer};
    size_t offset;

    if (tp_batch_walk(data, length, calls, calls ? deliver_call : deliver_reply, &to, &offset))
        return;
    tp->dropped_messages++;
    ember_warn("tp",
               "malformed %s batch from %s (rank %d): the rest (from byte "
               "%zu of %zu) dropped",
               batch_kind(calls), tp->peers[peer].name, peer, offset, length);
}

typedef struct {
    ember_tp_t *tp;
    int peer, calls;
    uint8_t *buffer;
    size_t length;
} batch_recv_t;

static void batch_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    batch_recv_t *recv = user_data;
    ember_tp_t *tp = recv->tp;

    (void)length;
    if (status == UCS_OK)
        batch_deliver(tp, recv->peer, recv->calls, recv->buffer, recv->length);
    else
        ember_warn("tp", "%s batch from %s: payload not received: %s", batch_kind(recv->calls),
                   tp->peers[recv->peer].name, ucs_status_string(status));
    ember_pool_put(&tp->pool, recv->buffer);
    ember_pool_put(&tp->pool, recv);
    ucp_request_free(request);
}

static ucs_status_t batch_recv(ember_tp_t *tp, int calls, const void *header, size_t header_length,
                               void *data, size_t length, const ucp_am_recv_param_t *param)
{
    tp_header_t hdr;
    int peer = tp_am_sender(tp, param);

    if (peer < 0 || !tp_batch_header_parse(header, header_length, length, tp->max_message, &hdr)) {
        tp_note_dropped(tp, calls ? "malformed or unauthenticated call batch dropped"
                                  : "malformed or unauthenticated reply batch dropped");
        return UCS_OK;
    }
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        batch_deliver(tp, peer, calls, data, length);
        return UCS_OK;
    }
    /* Rendezvous: land the batch in a buffer of ours, deliver when complete. */
    batch_recv_t *recv = ember_pool_get(&tp->pool, sizeof(*recv));
    uint8_t *buffer = ember_pool_get(&tp->pool, length ? length : 1);
    ember_status_t status = EMBER_ERR_NO_MEMORY;
    if (recv && buffer) {
        *recv = (batch_recv_t){
                .tp = tp, .peer = peer, .calls = calls, .buffer = buffer, .length = length};
        status = tp_rndv_receive(tp, data, buffer, length, EMBER_MEM_HOST, NULL, batch_recv_cb,
                                 recv);
        if (status == EMBER_INPROGRESS)
            return UCS_INPROGRESS;
        if (status == EMBER_OK)
            batch_deliver(tp, peer, calls, buffer, length);
    }
    if (status != EMBER_OK)
        ember_warn("tp", "%s batch from %s (%zu bytes) not received: %s", batch_kind(calls),
                   tp->peers[peer].name, length, ember_status_string(status));
    ember_pool_put(&tp->pool, buffer);
    ember_pool_put(&tp->pool, recv);
    /* A rendezvous the receive was asked for is UCX's to finish. */
    return (recv && buffer) ? UCS_INPROGRESS : UCS_OK;
}

ucs_status_t tp_am_reply_batch_cb(void *arg, const void *header, size_t header_length, void *data,
                                  size_t length, const ucp_am_recv_param_t *param)
{
    return batch_recv(arg, 0, header, header_length, data, length, param);
}

ucs_status_t tp_am_call_batch_cb(void *arg, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
    return batch_recv(arg, 1, header, header_length, data, length, param);
}
