/*
 * transport/rpc: calls, futures, handlers and replies over UCX active
 * messages.
 *
 * Requests and replies carry tp_header_t as the AM header; the payload is
 * the AM data.  Every header and length is checked before use; a message
 * that fails a check is counted and dropped, never trusted.  Large replies
 * (rendezvous) are received straight into the caller's response buffer.
 */
#include "transport/tp_internal.h"

#include "common/clock.h"
#include "common/copy.h"

#include <ember/log.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_OF(id)       ((uint32_t)((id)&0xffffffffu))
#define GENERATION_OF(id) ((uint32_t)((id) >> 32))
/* Small payloads are copied out at once, which is cheaper than holding a
 * UCX receive descriptor until the handler replies. */
#define TP_SMALL_COPY 4096
/* Deadlines are checked at least this often while calls are pending. */
#define DEADLINE_PERIOD_S 0.01

/* ---- futures -------------------------------------------------------------- */

static ember_status_t slots_grow(ember_tp_t *tp)
{
    size_t count = tp->slot_count ? 2 * tp->slot_count : 256;
    ember_future_t **slots = realloc(tp->slots, count * sizeof(*slots));
    if (!slots)
        return EMBER_ERR_NO_MEMORY;
    tp->slots = slots;
    uint32_t *generations = realloc(tp->generations, count * sizeof(*generations));
    if (!generations)
        return EMBER_ERR_NO_MEMORY;
    tp->generations = generations;
    uint32_t *free_slots = realloc(tp->free_slots, count * sizeof(*free_slots));
    if (!free_slots)
        return EMBER_ERR_NO_MEMORY;
    tp->free_slots = free_slots;
    for (size_t i = tp->slot_count; i < count; i++) {
        tp->slots[i] = NULL;
        tp->generations[i] = 1;
    }
    /* Hand out low slots first. */
    for (size_t i = count; i-- > tp->slot_count;)
        tp->free_slots[tp->free_count++] = (uint32_t)i;
    tp->slot_count = count;
    return EMBER_OK;
}

ember_status_t tp_future_alloc(ember_tp_t *tp, tp_future_kind_t kind, int peer, double timeout_s,
                               ember_future_t **future_p)
{
    ember_future_t *future;
    uint32_t slot;
    /* Deadlines run on the coarse clock (tp_progress_once): a precise read
     * here would be a clock read per call for nothing, and clock reads are
     * dear on a virtual machine.  The coarse clock lags, so the call starts
     * as much later as it may lag: it never fails early. */
    double now = ember_time_coarse() + tp->coarse_lag_s;

    if (tp->free_count == 0)
        EMBER_CHECK(slots_grow(tp));
    future = ember_pool_zalloc(&tp->pool, sizeof(*future));
    if (!future)
        return EMBER_ERR_NO_MEMORY;
    slot = tp->free_slots[--tp->free_count];
    future->tp = tp;
    future->kind = kind;
    future->peer = peer;
    future->id = (uint64_t)slot | (uint64_t)tp->generations[slot] << 32;
    future->status = EMBER_INPROGRESS;
    future->started = now;
    future->deadline = now + (timeout_s > 0 ? timeout_s : tp->rpc_timeout_s);
    tp->slots[slot] = future;
    if (tp->pending_count++ == 0 || future->deadline < tp->next_deadline_check)
        tp->next_deadline_check = future->deadline;
    *future_p = future;
    return EMBER_OK;
}

static ember_future_t *future_lookup(ember_tp_t *tp, uint64_t id)
{
    uint32_t slot = SLOT_OF(id);
    if (slot >= tp->slot_count || tp->generations[slot] != GENERATION_OF(id))
        return NULL;
    return tp->slots[slot];
}

/* Attach an error text to a failed future (what ember_future_data returns). */
static void future_set_text(ember_future_t *future, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (future->response_owned)
        ember_pool_put(&future->tp->pool, future->response);
    future->response = ember_pool_get(&future->tp->pool, (size_t)n + 1);
    future->response_owned = future->response != NULL;
    if (future->response)
        memcpy(future->response, text, (size_t)n + 1);
    future->length = future->response ? strlen(text) : 0;
}

void tp_future_complete(ember_future_t *future, ember_status_t status)
{
    ember_tp_t *tp = future->tp;
    uint32_t slot = SLOT_OF(future->id);

    if (future->status != EMBER_INPROGRESS)
        return;
    future->status = status;
    tp->slots[slot] = NULL;
    tp->generations[slot]++;
    tp->free_slots[tp->free_count++] = slot;
    tp->pending_count--;
    if (status == EMBER_ERR_PEER_LOST || status == EMBER_ERR_AUTH) {
        tp_peer_t *peer = &tp->peers[future->peer];
        future_set_text(future, "%s to %s (rank %d) failed: %s: %s",
                        future->kind == TP_FUTURE_RMA ? "RMA" : "call", peer->name, peer->rank,
                        ember_status_string(status), peer->reason);
    }
}

void tp_future_maybe_free(ember_future_t *future)
{
    if (!future->released || future->status == EMBER_INPROGRESS || future->send_inflight ||
        future->recv_inflight)
        return;
    if (future->response_owned)
        ember_pool_put(&future->tp->pool, future->response);
    ember_pool_put(&future->tp->pool, future);
}

void tp_fail_peer_futures(ember_tp_t *tp, int rank, ember_status_t status)
{
    for (size_t slot = 0; slot < tp->slot_count; slot++) {
        ember_future_t *future = tp->slots[slot];
        if (future && future->peer == rank && !future->recv_inflight) {
            tp_future_complete(future, status);
            tp_future_maybe_free(future);
        }
    }
}

void tp_futures_cancel_all(ember_tp_t *tp, ember_status_t status)
{
    for (size_t slot = 0; slot < tp->slot_count; slot++) {
        ember_future_t *future = tp->slots[slot];
        if (future) {
            tp_future_complete(future, status);
            tp_future_maybe_free(future);
        }
    }
}

/* A queued (not yet sent) request can simply be dropped. */
static void future_unqueue_send(ember_future_t *future)
{
    tp_send_t *send = future->send;
    if (send && !tp_list_empty(&send->link)) {
        tp_list_del(&send->link);
        tp_send_free(send);
        future->send = NULL;
        future->send_inflight = 0;
    }
}

void tp_check_deadlines(ember_tp_t *tp, double now)
{
    double next = now + 3600.0;
    int peers_lost = 0;

    for (size_t slot = 0; slot < tp->slot_count; slot++) {
        ember_future_t *future = tp->slots[slot];
        if (!future || future->recv_inflight)
            continue;
        if (future->deadline > now) {
            if (future->deadline < next)
                next = future->deadline;
            continue;
        }
        tp_peer_t *peer = &tp->peers[future->peer];
        if (peer->unproven && peer->state != TP_PEER_READY && peer->state != TP_PEER_LOST) {
            /* Its handshake never got a proven answer: say so, not "timed out". */
            tp_handshake_expired(tp, future->peer);
            peers_lost = 1; /* the sweep below fails its calls with that */
            continue;
        }
        peer->unanswered = 1; /* shutdown will not wait for it (tp_first_lost) */
        ember_error("tp", "%s op %u to %s (rank %d) timed out after %.1f s",
                    future->kind == TP_FUTURE_RMA ? "RMA" : "call", future->op, peer->name,
                    peer->rank, now - future->started);
        future_unqueue_send(future);
        tp_future_complete(future, EMBER_ERR_TIMED_OUT);
        future_set_text(future, "call op %u to %s (rank %d) timed out after %.1f s", future->op,
                        peer->name, peer->rank, now - future->started);
        if (future->send_inflight) {
            /* UCX still holds the caller's buffers: give up on this peer so
             * the send completes (with an error) before the caller returns. */
            tp_peer_lost(tp, future->peer, EMBER_ERR_TIMED_OUT,
                         "a call timed out while its request was still being sent");
            peers_lost = 1;
        }
        tp_future_maybe_free(future);
    }
    tp->next_deadline_check = next < now + DEADLINE_PERIOD_S ? now + DEADLINE_PERIOD_S : next;
    if (peers_lost)
        tp_endpoints_sweep(tp);
}

ember_status_t ember_future_test(ember_future_t *future)
{
    if (future->status == EMBER_INPROGRESS || future->recv_inflight)
        tp_progress_once(future->tp);
    return future->recv_inflight ? EMBER_INPROGRESS : future->status;
}

static int future_done(const void *arg)
{
    const ember_future_t *future = arg;
    return future->status != EMBER_INPROGRESS && !future->recv_inflight;
}

ember_status_t ember_future_wait(ember_future_t *future)
{
    /* The future's own deadline bounds the wait (deadline checks run in the
     * progress loop); the outer loop only guards against a missed wake-up. */
    while (!future_done(future))
        tp_progress_for(future->tp, future_done, future, 1.0);
    return future->status;
}

ember_status_t ember_future_wait_all(ember_future_t **futures, size_t count)
{
    ember_status_t first = EMBER_OK;
    for (size_t i = 0; i < count; i++) {
        ember_status_t status = ember_future_wait(futures[i]);
        if (status != EMBER_OK && first == EMBER_OK)
            first = status;
    }
    return first;
}

const void *ember_future_data(const ember_future_t *future, size_t *length_p)
{
    if (length_p)
        *length_p = future->length;
    return future->response;
}

void ember_future_release(ember_future_t *future)
{
    if (!future)
        return;
    /* A rendezvous receive may be writing the caller's buffer: let it land. */
    while (future->recv_inflight)
        tp_progress_once(future->tp);
    future_unqueue_send(future);
    future->released = 1;
    if (future->status == EMBER_INPROGRESS)
        tp_future_complete(future, EMBER_ERR_CANCELED);
    tp_future_maybe_free(future);
}

/* ---- calls ---------------------------------------------------------------- */

ember_status_t tp_send_alloc(ember_tp_t *tp, int peer, unsigned am_id, const ember_iov_t *iov,
                             size_t iovcnt, tp_send_t **send_p)
{
    tp_send_t *send = ember_pool_zalloc(&tp->pool, sizeof(*send));
    if (!send)
        return EMBER_ERR_NO_MEMORY;
    send->tp = tp;
    send->peer = peer;
    send->am_id = am_id;
    send->iov =
            iovcnt <= 4 ? send->iov_inline : ember_pool_get(&tp->pool, iovcnt * sizeof(*send->iov));
    if (!send->iov) {
        ember_pool_put(&tp->pool, send);
        return EMBER_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < iovcnt; i++)
        send->iov[i] = (ucp_dt_iov_t){.buffer = (void *)iov[i].buffer, .length = iov[i].length};
    send->iovcnt = iovcnt;
    tp_list_init(&send->link);
    *send_p = send;
    return EMBER_OK;
}

static size_t iov_total(const ember_iov_t *iov, size_t iovcnt)
{
    size_t total = 0;
    for (size_t i = 0; i < iovcnt; i++)
        total += iov[i].length;
    return total;
}

/* A payload whose bulk is GPU memory: one buffer, or a host head small
 * enough to ride in the AM header and the bulk (no host copy touches it). */
static int mem_layout_ok(const ember_tp_t *tp, const ember_iov_t *iov, size_t iovcnt,
                         ember_mem_type_t payload_mem)
{
    return payload_mem == EMBER_MEM_HOST || iovcnt == 1 ||
           (iovcnt == 2 && iov[0].length <= tp->inline_max);
}

/* The registrations @param names (payload_reg; reply_reg when @reply_p),
 * checked against the buffers they are for: a registered bulk must go
 * contiguous (see send_layout), UCX takes no registration with an iov. */
static ember_status_t param_memh(const ember_tp_t *tp, uint16_t op, const ember_iov_t *iov,
                                 size_t iovcnt, const void *resp_buffer, size_t resp_capacity,
                                 const ember_rpc_param_t *param, ucp_mem_h *payload_p,
                                 ucp_mem_h *reply_p)
{
    char what[64];

    *payload_p = NULL;
    if (param->payload_reg) {
        if (!(iovcnt == 1 || (iovcnt == 2 && iov[0].length <= tp->inline_max))) {
            ember_error("tp",
                        "op %u: a registered payload needs one buffer or a head of at most "
                        "%zu bytes before it, not %zu parts",
                        op, tp->inline_max, iovcnt);
            return EMBER_ERR_INVALID_PARAM;
        }
        snprintf(what, sizeof(what), "op %u's payload", op);
        EMBER_CHECK(tp_mem_handle(param->payload_reg, iov[iovcnt - 1].buffer,
                                  iov[iovcnt - 1].length, param->payload_mem, what, payload_p));
    }
    if (reply_p) {
        snprintf(what, sizeof(what), "op %u's reply buffer", op);
        EMBER_CHECK(tp_mem_handle(param->reply_reg, resp_buffer, resp_capacity, param->reply_mem,
                                  what, reply_p));
    }
    return EMBER_OK;
}

/* A call or one-way send leaves now, or is held for its peer's batch. */
static ember_status_t request_post(ember_tp_t *tp, tp_send_t *send)
{
    if (tp_request_batchable(tp, send)) {
        tp_send_defer(tp, send);
        return EMBER_OK;
    }
    return tp_peer_send(tp, send);
}

/* Zeroed: host memory, EMBER_RPC_TIMEOUT (what a NULL param means). */
static const ember_rpc_param_t default_param;

static ember_status_t call_check(const ember_tp_t *tp, int peer, uint16_t op,
                                 const ember_iov_t *iov, size_t iovcnt, const void *resp_buffer,
                                 const ember_rpc_param_t *param, size_t total)
{
    if (peer < 0 || peer >= tp->world_size || op >= EMBER_RPC_OP_MAX || (iovcnt && !iov)) {
        ember_error("tp",
                    "call op %u to rank %d: invalid peer or op (world size "
                    "%d)",
                    op, peer, tp->world_size);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (!mem_layout_ok(tp, iov, iovcnt, param->payload_mem) ||
        (param->reply_mem != EMBER_MEM_HOST && !resp_buffer)) {
        ember_error("tp",
                    "call op %u: GPU memory needs one buffer or a head of at "
                    "most %zu bytes before it, and a reply buffer",
                    op, tp->inline_max);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (total > tp->max_message) {
        ember_error("tp",
                    "call op %u to %s: request of %zu bytes exceeds "
                    "EMBER_MAX_MSG_SIZE (%zu)",
                    op, tp->peers[peer].name, total, tp->max_message);
        return EMBER_ERR_MSG_TOO_LONG;
    }
    return EMBER_OK;
}

ember_status_t ember_rpc_call_async(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov,
                                    size_t iovcnt, void *resp_buffer, size_t resp_capacity,
                                    const ember_rpc_param_t *param, ember_future_t **future_p)
{
    ember_future_t *future;
    tp_send_t *send;
    size_t total = iov_total(iov, iovcnt);
    ember_status_t status;
    ucp_mem_h payload_memh, reply_memh;

    if (!param)
        param = &default_param;
    EMBER_CHECK(call_check(tp, peer, op, iov, iovcnt, resp_buffer, param, total));
    EMBER_CHECK(param_memh(tp, op, iov, iovcnt, resp_buffer, resp_capacity, param, &payload_memh,
                           &reply_memh));
    EMBER_CHECK(tp_future_alloc(tp, TP_FUTURE_CALL, peer, param->timeout_s, &future));
    future->op = op;
    future->response = resp_buffer;
    future->capacity = resp_buffer ? resp_capacity : 0;
    status = tp_send_alloc(tp, peer, TP_AM_REQUEST, iov, iovcnt, &send);
    if (status != EMBER_OK) {
        tp_future_complete(future, status);
        future->released = 1;
        tp_future_maybe_free(future);
        return status;
    }
    int reply_rndv = param->reply_rndv || param->reply_mem != EMBER_MEM_HOST;
    send->header = (tp_header_t){.magic = TP_MAGIC,
                                 .version = TP_VERSION,
                                 .op = op,
                                 .request_id = future->id,
                                 .flags = reply_rndv ? TP_FLAG_REPLY_RNDV : 0,
                                 .length = total};
    send->mem_type = param->payload_mem;
    send->memh = payload_memh;
    send->future = future;
    future->response_mem = param->reply_mem;
    future->response_memh = reply_memh;
    future->reply_rndv = reply_rndv;
    future->send = send;
    future->send_inflight = 1;
    *future_p = future;
    return request_post(tp, send);
}

ember_status_t ember_rpc_send(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov,
                              size_t iovcnt, const ember_rpc_param_t *param,
                              ember_rpc_done_cb done_cb, void *done_arg)
{
    tp_send_t *send;
    size_t total = iov_total(iov, iovcnt);
    ucp_mem_h payload_memh;

    if (!param)
        param = &default_param;
    ember_mem_type_t payload_mem = param->payload_mem;

    if (peer < 0 || peer >= tp->world_size || op >= EMBER_RPC_OP_MAX || (iovcnt && !iov) ||
        !done_cb) {
        ember_error("tp", "send op %u to rank %d: invalid peer, op or callback", op, peer);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (!mem_layout_ok(tp, iov, iovcnt, payload_mem)) {
        ember_error("tp",
                    "send op %u: GPU memory needs one buffer or a head of at "
                    "most %zu bytes before it",
                    op, tp->inline_max);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (total > tp->max_message) {
        ember_error("tp", "send op %u to %s: %zu bytes exceed EMBER_MAX_MSG_SIZE", op,
                    tp->peers[peer].name, total);
        return EMBER_ERR_MSG_TOO_LONG;
    }
    EMBER_CHECK(param_memh(tp, op, iov, iovcnt, NULL, 0, param, &payload_memh, NULL));
    EMBER_CHECK(tp_send_alloc(tp, peer, TP_AM_REQUEST, iov, iovcnt, &send));
    send->mem_type = payload_mem;
    send->memh = payload_memh;
    send->header = (tp_header_t){.magic = TP_MAGIC,
                                 .version = TP_VERSION,
                                 .op = op,
                                 .flags = TP_FLAG_ONEWAY,
                                 .length = total};
    send->done_cb = done_cb;
    send->done_arg = done_arg;
    return request_post(tp, send);
}

void ember_rpc_batch_begin(ember_tp_t *tp)
{
    tp->batching++;
}

void ember_rpc_batch_end(ember_tp_t *tp)
{
    if (tp->batching && --tp->batching == 0 && tp->deferred_peers && !tp->handler_depth)
        tp_batch_flush_all(tp);
}

ember_status_t ember_rpc_call(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov,
                              size_t iovcnt, void *resp_buffer, size_t resp_capacity,
                              size_t *resp_length_p)
{
    ember_future_t *future;
    ember_status_t status;

    EMBER_CHECK(ember_rpc_call_async(tp, peer, op, iov, iovcnt, resp_buffer, resp_capacity, NULL,
                                     &future));
    status = ember_future_wait(future);
    if (resp_length_p)
        *resp_length_p = future->length;
    if (status < 0 && status != EMBER_ERR_TIMED_OUT && future->length) {
        ember_debug("tp", "call op %u to %s: %.*s", op, tp->peers[peer].name, (int)future->length,
                    (const char *)future->response);
    }
    ember_future_release(future);
    return status;
}

/* ---- incoming ------------------------------------------------------------- */

int tp_header_parse(const void *header, size_t header_length, size_t length, size_t max_message,
                    tp_header_t *out, size_t *inline_p)
{
    if (header_length < sizeof(*out))
        return 0;
    memcpy(out, header, sizeof(*out));
    size_t inline_length = out->flags >> TP_INLINE_SHIFT;
    *inline_p = inline_length;
    return out->magic == TP_MAGIC && out->version == TP_VERSION &&
           (out->flags & ((1u << TP_INLINE_SHIFT) - 1) & ~TP_FLAGS_KNOWN) == 0 &&
           inline_length <= TP_INLINE_MAX && header_length == sizeof(*out) + inline_length &&
           out->length == inline_length + length && out->length <= max_message &&
           out->op < EMBER_RPC_OP_MAX;
}

int tp_header_valid(ember_tp_t *tp, const void *header, size_t header_length, size_t length,
                    tp_header_t *out, size_t *inline_p)
{
    return tp_header_parse(header, header_length, length, tp->max_message, out, inline_p);
}

ember_status_t tp_rndv_receive(ember_tp_t *tp, void *desc, void *buffer, size_t length,
                               ember_mem_type_t mem_type, ucp_mem_h memh,
                               ucp_am_recv_data_nbx_callback_t cb, void *user_data)
{
    ucp_request_param_t param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_DATATYPE,
            .cb.recv_am = cb,
            .user_data = user_data,
            .datatype = ucp_dt_make_contig(1),
    };
    if (mem_type == EMBER_MEM_CUDA) { /* UCX moves it into GPU memory */
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        param.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    /* Registered once by its owner: UCX neither registers it again nor
     * asks which memory it is (its memory-type detection is one suspect of
     * the crash receiving into GPU memory: docs/PERFORMANCE.md). */
    tp_param_memh(&param, memh);
    ucs_status_ptr_t request = ucp_am_recv_data_nbx(tp->worker, desc, buffer, length, &param);
    if (request == NULL)
        return EMBER_OK;
    if (UCS_PTR_IS_ERR(request))
        return tp_status_from_ucs(UCS_PTR_STATUS(request));
    return EMBER_INPROGRESS;
}

static void request_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    ember_rpc_req_t *req = user_data;
    req->recv_inflight = 0;
    req->recv_status = tp_status_from_ucs(status);
    tp_list_push(&req->tp->ready, &req->link);
    ucp_request_free(request);
}

static ember_rpc_req_t *request_new(ember_tp_t *tp, int peer, const tp_header_t *hdr)
{
    ember_rpc_req_t *req = ember_pool_zalloc(&tp->pool, sizeof(*req));
    if (!req)
        return NULL;
    req->tp = tp;
    req->peer = peer;
    req->op = hdr->op;
    req->request_id = hdr->request_id;
    req->length = hdr->length;
    req->oneway = (hdr->flags & TP_FLAG_ONEWAY) != 0;
    req->reply_rndv = (hdr->flags & TP_FLAG_REPLY_RNDV) != 0;
    tp_list_init(&req->link);
    return req;
}

/* @req's payload (@head, then @data) copied into a buffer of its own and
 * queued for its handler; dropped when there is no memory. */
static ember_status_t request_copy(ember_tp_t *tp, ember_rpc_req_t *req, const void *head,
                                   size_t head_length, const void *data, size_t length)
{
    size_t total = head_length + length;
    req->owned_data = ember_pool_get(&tp->pool, total ? total : 1);
    if (!req->owned_data) {
        ember_pool_put(&tp->pool, req);
        return EMBER_ERR_NO_MEMORY;
    }
    if (head_length)
        memcpy(req->owned_data, head, head_length);
    ember_copy((uint8_t *)req->owned_data + head_length, data, length);
    req->data = req->owned_data;
    tp_list_push(&tp->ready, &req->link);
    return EMBER_OK;
}

ucs_status_t tp_am_request_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    ember_tp_t *tp = arg;
    tp_header_t hdr;
    ember_rpc_req_t *req;
    int peer = tp_am_sender(tp, param);

    if (peer < 0) {
        tp_note_dropped(tp, "request from an unauthenticated connection dropped");
        return UCS_OK;
    }
    size_t inline_length;
    if (!tp_header_valid(tp, header, header_length, length, &hdr, &inline_length)) {
        tp->dropped_messages++;
        ember_warn("tp",
                   "malformed request from %s (rank %d) dropped: header "
                   "%zu bytes, payload %zu bytes",
                   tp->peers[peer].name, peer, header_length, length);
        return UCS_OK;
    }
    const uint8_t *inline_part = (const uint8_t *)header + sizeof(hdr);
    size_t total = hdr.length;
    req = request_new(tp, peer, &hdr);
    if (!req)
        return UCS_OK;

    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        tp_handler_t *handler = &tp->handlers[hdr.op];
        /* The handler's own buffer if it has one for this, else the pool
         * (a recycled buffer has its pages already). */
        if (handler->alloc)
            req->user_data =
                    handler->alloc(handler->alloc_arg, peer, inline_part, inline_length, total);
        uint8_t *dest;
        if (req->user_data) {
            /* Placed: the head stays here, the rest lands in their buffer,
             * which goes back through the release registered now (the
             * handler may be replaced before the request is done). */
            req->release = handler->release;
            req->release_arg = handler->alloc_arg;
            memcpy(req->head, inline_part, inline_length);
            req->head_length = inline_length;
            req->data = dest = req->user_data;
            req->length = length;
        } else {
            req->owned_data = ember_pool_get(&tp->pool, total ? total : 1);
            if (!req->owned_data) {
                ember_pool_put(&tp->pool, req);
                return UCS_OK;
            }
            req->data = req->owned_data;
            memcpy(req->data, inline_part, inline_length);
            dest = (uint8_t *)req->data + inline_length;
        }
        req->recv_inflight = 1;
        ember_status_t status =
                tp_rndv_receive(tp, data, dest, length, EMBER_MEM_HOST, NULL, request_recv_cb, req);
        if (status != EMBER_INPROGRESS) {
            req->recv_inflight = 0;
            req->recv_status = status;
            tp_list_push(&tp->ready, &req->link);
        }
        return UCS_INPROGRESS;
    }
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) && inline_length == 0 &&
        length > TP_SMALL_COPY) {
        req->ucx_data = data; /* kept until the reply: no copy */
        req->data = data;
        tp_list_push(&tp->ready, &req->link);
        return UCS_INPROGRESS;
    }
    (void)request_copy(tp, req, inline_part, inline_length, data, length);
    return UCS_OK;
}

ember_status_t tp_request_deliver_copy(ember_tp_t *tp, int peer, const tp_header_t *hdr,
                                       const void *data, size_t length)
{
    ember_rpc_req_t *req = request_new(tp, peer, hdr);
    if (!req)
        return EMBER_ERR_NO_MEMORY;
    return request_copy(tp, req, NULL, 0, data, length);
}

static void reply_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    ember_future_t *future = user_data;
    future->recv_inflight = 0;
    tp_future_complete(future, status == UCS_OK ? EMBER_OK : tp_status_from_ucs(status));
    tp_future_maybe_free(future);
    ucp_request_free(request);
}

ucs_status_t tp_am_reply_cb(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    ember_tp_t *tp = arg;
    tp_header_t hdr;
    int peer = tp_am_sender(tp, param);

    size_t inline_length = 0;
    if (peer < 0 || !tp_header_valid(tp, header, header_length, length, &hdr, &inline_length)) {
        tp_note_dropped(tp, "malformed or unauthenticated reply dropped");
        return UCS_OK;
    }
    return tp_reply_deliver(tp, peer, &hdr, (const uint8_t *)header + sizeof(hdr), inline_length,
                            data, length, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
}

ucs_status_t tp_reply_deliver(ember_tp_t *tp, int peer, const tp_header_t *hdr,
                              const uint8_t *inline_part, size_t inline_length, void *data,
                              size_t length, int rndv)
{
    ember_future_t *future = future_lookup(tp, hdr->request_id);
    if (!future || future->peer != peer || future->kind != TP_FUTURE_CALL ||
        future->status != EMBER_INPROGRESS || future->recv_inflight) {
        /* Late (after a timeout or release) or not for us. */
        ember_debug("tp", "reply %#llx from %s matches no pending call",
                    (unsigned long long)hdr->request_id, tp->peers[peer].name);
        return UCS_OK;
    }
    if (hdr->status != EMBER_OK) {
        /* The handler failed: the payload is its error text. */
        size_t n = rndv ? 0 : length;
        tp_future_complete(future, ember_status_from_wire(hdr->status));
        future_set_text(future, "%s (rank %d): %.*s", tp->peers[peer].name, peer,
                        (int)(n > 200 ? 200 : n), (const char *)data);
        tp_future_maybe_free(future);
        return UCS_OK;
    }
    size_t total = hdr->length;
    if (future->capacity && total > future->capacity) {
        ember_error("tp",
                    "reply of %zu bytes from %s to op %u exceeds the "
                    "caller's buffer of %zu bytes",
                    total, tp->peers[peer].name, future->op, future->capacity);
        tp_future_complete(future, EMBER_ERR_MSG_TOO_LONG);
        tp_future_maybe_free(future);
        return UCS_OK;
    }
    if (!future->response) {
        future->response = ember_pool_get(&tp->pool, total ? total : 1);
        if (!future->response) {
            tp_future_complete(future, EMBER_ERR_NO_MEMORY);
            tp_future_maybe_free(future);
            return UCS_OK;
        }
        future->response_owned = 1;
    }
    if (future->reply_rndv && total > 0 && (!rndv || inline_length)) {
        /* Asked for a whole rendezvous reply (no host copy may touch a GPU
         * buffer), the replier did otherwise: a broken peer. */
        tp_future_complete(future, EMBER_ERR_BAD_MESSAGE);
        future_set_text(future,
                        "reply of %zu bytes from %s to op %u came %s, not "
                        "whole by rendezvous as asked",
                        total, tp->peers[peer].name, future->op,
                        rndv ? "with an inline head" : "eager");
        tp_future_maybe_free(future);
        return UCS_OK;
    }
    future->length = total;
    memcpy(future->response, inline_part, inline_length);
    uint8_t *rest = (uint8_t *)future->response + inline_length;
    if (rndv) {
        /* Straight into the caller's buffer: no intermediate copy. */
        future->recv_inflight = 1;
        ember_status_t status = tp_rndv_receive(tp, data, rest, length, future->response_mem,
                                                future->response_memh, reply_recv_cb, future);
        if (status != EMBER_INPROGRESS) {
            future->recv_inflight = 0;
            tp_future_complete(future, status);
        }
        tp_future_maybe_free(future);
        return UCS_INPROGRESS;
    }
    ember_copy(rest, data, length);
    tp_future_complete(future, EMBER_OK);
    tp_future_maybe_free(future);
    return UCS_OK;
}

/* ---- handlers and replies ------------------------------------------------- */

ember_status_t ember_rpc_register(ember_tp_t *tp, uint16_t op, ember_rpc_handler_cb handler,
                                  void *arg)
{
    if (op < EMBER_RPC_OP_USER_BASE || op >= EMBER_RPC_OP_MAX) {
        ember_error("tp", "op id %u is outside [%d, %d)", op, EMBER_RPC_OP_USER_BASE,
                    EMBER_RPC_OP_MAX);
        return EMBER_ERR_INVALID_PARAM;
    }
    tp->handlers[op] = (tp_handler_t){.cb = handler, .arg = arg}; /* resets alloc */
    return EMBER_OK;
}

ember_status_t ember_rpc_register_alloc(ember_tp_t *tp, uint16_t op, ember_rpc_alloc_cb alloc,
                                        ember_rpc_release_cb release, void *arg)
{
    if (op >= EMBER_RPC_OP_MAX || !tp->handlers[op].cb || !alloc || !release) {
        ember_error("tp", "op %u: register its handler before its allocator", op);
        return EMBER_ERR_INVALID_PARAM;
    }
    tp->handlers[op].alloc = alloc;
    tp->handlers[op].release = release;
    tp->handlers[op].alloc_arg = arg;
    return EMBER_OK;
}

const void *ember_rpc_req_data(const ember_rpc_req_t *req, size_t *length_p)
{
    if (length_p)
        *length_p = req->length;
    return req->data;
}

const void *ember_rpc_req_head(const ember_rpc_req_t *req, size_t *length_p)
{
    if (length_p)
        *length_p = req->user_data ? req->head_length : 0;
    return req->user_data ? req->head : NULL;
}

int ember_rpc_req_peer(const ember_rpc_req_t *req)
{
    return req->peer;
}
int ember_rpc_req_oneway(const ember_rpc_req_t *req)
{
    return req->oneway;
}
uint16_t ember_rpc_req_op(const ember_rpc_req_t *req)
{
    return req->op;
}

static void req_free(ember_rpc_req_t *req)
{
    if (req->ucx_data)
        ucp_am_data_release(req->tp->worker, req->ucx_data);
    if (req->user_data)
        req->release(req->release_arg, req->user_data);
    ember_pool_put(&req->tp->pool, req->owned_data);
    ember_pool_put(&req->tp->pool, req);
}

void tp_run_handlers(ember_tp_t *tp)
{
    /* Handlers may reply (and so send) at once; they never wait here.  Small
     * replies are held and leave together when the run ends (batch.c). */
    tp->handler_depth++;
    while (!tp_list_empty(&tp->ready)) {
        ember_rpc_req_t *req = tp_container_of(tp->ready.next, ember_rpc_req_t, link);
        tp_handler_t *handler = &tp->handlers[req->op];

        tp_list_del(&req->link);
        if (req->recv_status != EMBER_OK) {
            ember_warn("tp", "request op %u from %s: payload not received: %s", req->op,
                       tp->peers[req->peer].name, ember_status_string(req->recv_status));
            req_free(req);
        } else if (!handler->cb) {
            ember_rpc_reply_error(req, EMBER_ERR_UNSUPPORTED, "no handler for op %u on %s", req->op,
                                  tp->peers[tp->rank].name);
        } else {
            tp->handled_requests++; /* every request here came from a proven rank */
            handler->cb(req, handler->arg);
        }
        /* More to run and replies held: bound their wait (the clock is read
         * only then, so a lone request costs no clock read). */
        if (tp->deferred_peers && !tp_list_empty(&tp->ready)) {
            double now = ember_time_now();
            if (tp->deferred_since == 0.0)
                tp->deferred_since = now;
            else if (now - tp->deferred_since >= TP_BATCH_HOLD_S)
                tp_batch_flush_all(tp);
        }
    }
    if (--tp->handler_depth == 0 && tp->deferred_peers)
        tp_batch_flush_all(tp);
}

static ember_status_t reply_send(ember_rpc_req_t *req, ember_status_t status,
                                 const ember_iov_t *iov, size_t iovcnt, int copy,
                                 ember_rpc_done_cb done_cb, void *done_arg)
{
    ember_tp_t *tp = req->tp;

    if (req->oneway) { /* nobody waits for an answer */
        req_free(req);
        if (done_cb)
            done_cb(done_arg, EMBER_OK);
        return EMBER_OK;
    }
    size_t total = iov_total(iov, iovcnt);
    tp_send_t *send;
    ember_status_t ret;

    if (total > tp->max_message) {
        ember_error("tp", "reply of %zu bytes to %s exceeds EMBER_MAX_MSG_SIZE", total,
                    tp->peers[req->peer].name);
        req_free(req);
        if (done_cb)
            done_cb(done_arg, EMBER_ERR_MSG_TOO_LONG);
        return EMBER_ERR_MSG_TOO_LONG;
    }
    if (copy) {
        ember_iov_t flat;
        char *buffer = ember_pool_get(&tp->pool, total ? total : 1);
        if (!buffer) {
            req_free(req);
            return EMBER_ERR_NO_MEMORY;
        }
        for (size_t i = 0, offset = 0; i < iovcnt; offset += iov[i].length, i++)
            ember_copy(buffer + offset, iov[i].buffer, iov[i].length);
        flat = (ember_iov_t){.buffer = buffer, .length = total};
        ret = tp_send_alloc(tp, req->peer, TP_AM_REPLY, &flat, 1, &send);
        if (ret != EMBER_OK) {
            ember_pool_put(&tp->pool, buffer);
            req_free(req);
            return ret;
        }
        send->copy = buffer;
    } else {
        ret = tp_send_alloc(tp, req->peer, TP_AM_REPLY, iov, iovcnt, &send);
        if (ret != EMBER_OK) {
            req_free(req);
            if (done_cb)
                done_cb(done_arg, ret);
            return ret;
        }
    }
    send->header = (tp_header_t){.magic = TP_MAGIC,
                                 .version = TP_VERSION,
                                 .op = req->op,
                                 .request_id = req->request_id,
                                 .status = status,
                                 .length = total};
    send->done_cb = done_cb;
    send->done_arg = done_arg;
    /* Its caller receives straight into its buffer (maybe GPU memory): the
     * payload whole, by rendezvous, never batched.  An error's text is
     * read on the host, as always. */
    send->force_rndv = req->reply_rndv && status >= 0;
    req_free(req);
    if (tp->handler_depth && !send->force_rndv &&
        total <= tp_batch_item_max(&tp->peers[send->peer])) {
        tp_send_defer(tp, send);
        return EMBER_OK;
    }
    return tp_peer_send(tp, send);
}

ember_status_t ember_rpc_reply(ember_rpc_req_t *req, ember_status_t status, const ember_iov_t *iov,
                               size_t iovcnt)
{
    return reply_send(req, status, iov, iovcnt, 1, NULL, NULL);
}

ember_status_t ember_rpc_reply_zcopy(ember_rpc_req_t *req, ember_status_t status,
                                     const ember_iov_t *iov, size_t iovcnt,
                                     ember_rpc_done_cb done_cb, void *done_arg)
{
    return reply_send(req, status, iov, iovcnt, 0, done_cb, done_arg);
}

ember_status_t ember_rpc_reply_error(ember_rpc_req_t *req, ember_status_t status, const char *fmt,
                                     ...)
{
    char text[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(text))
        n = sizeof(text) - 1;
    ember_iov_t iov = {.buffer = text, .length = (size_t)n};
    return reply_send(req, status < 0 ? status : EMBER_ERR_REMOTE, &iov, 1, 1, NULL, NULL);
}
