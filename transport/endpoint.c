/*
 * transport/endpoint: endpoints to peers, the authentication handshake, the
 * send path, and what happens when a peer is lost.
 *
 * An endpoint is created on first use.  Its first message is HELLO; anything
 * else queued for that peer waits until the handshake (tp_hello_t) proves
 * both sides hold the job secret.  Incoming messages are accepted only on
 * reply endpoints whose CONFIRM proved it (tp_conn_t), so a stranger's
 * request never reaches a handler.
 */
#include "common/clock.h"
#include "common/log_limit.h"
#include "common/reserve.h"
#include "transport/tp_internal.h"

#include <ember/log.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void handshake_prove(const ember_tp_t *tp, const char *label, tp_hello_t *msg);

/* ---- incoming connections ------------------------------------------------ */

void tp_note_dropped(ember_tp_t *tp, const char *what)
{
    tp->dropped_messages++;
    ember_warn_limited("tp", "%s", what);
}

int tp_first_lost(const ember_tp_t *tp, int or_unanswered)
{
    for (int rank = 0; tp->peers && rank < tp->world_size; rank++) {
        if (tp->peers[rank].state == TP_PEER_LOST || (or_unanswered && tp->peers[rank].unanswered))
            return rank;
    }
    return -1;
}

int tp_conn_lookup(ember_tp_t *tp, ucp_ep_h reply_ep)
{
    for (size_t i = 0; i < tp->conn_count; i++) {
        if (tp->conns[i].reply_ep == reply_ep)
            return tp->conns[i].rank;
    }
    return -1;
}

int tp_am_sender(ember_tp_t *tp, const ucp_am_recv_param_t *param)
{
    return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
                   ? tp_conn_lookup(tp, param->reply_ep)
                   : -1;
}

static ember_status_t conn_add(ember_tp_t *tp, ucp_ep_h reply_ep, int rank)
{
    for (size_t i = 0; i < tp->conn_count; i++) {
        if (tp->conns[i].reply_ep == reply_ep) {
            tp->conns[i].rank = rank;
            return EMBER_OK;
        }
    }
    if (!EMBER_RESERVE(tp->conns, tp->conn_capacity, tp->conn_count + 1))
        return EMBER_ERR_NO_MEMORY;
    tp->conns[tp->conn_count++] = (tp_conn_t){.reply_ep = reply_ep, .rank = rank};
    return EMBER_OK;
}

/* ---- send path ------------------------------------------------------------ */

void tp_send_free(tp_send_t *send)
{
    ember_pool_t *pool = &send->tp->pool;
    if (send->iov != send->iov_inline)
        ember_pool_put(pool, send->iov);
    ember_pool_put(pool, send->copy);
    ember_pool_put(pool, send);
}

void tp_send_complete(tp_send_t *send, ember_status_t status)
{
    ember_future_t *future = send->future;

    if (future) {
        future->send_inflight = 0;
        future->send = NULL;
        if (status != EMBER_OK)
            tp_future_complete(future, status);
        tp_future_maybe_free(future);
    }
    if (send->done_cb)
        send->done_cb(send->done_arg, status);
    tp_send_free(send);
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    tp_send_t *send = user_data;
    ember_status_t ret = tp_status_from_ucs(status);

    send->tp->sends_inflight--;
    if (status != UCS_OK) {
        ember_debug("tp", "send to %s failed: %s", send->tp->peers[send->peer].name,
                    ucs_status_string(status));
        if (ret != EMBER_ERR_CANCELED)
            ret = EMBER_ERR_PEER_LOST;
    }
    tp_send_complete(send, ret);
    ucp_request_free(request);
}

/*
 * Which transport carries @ep's active messages.  UCX 1.13 has no query for
 * an endpoint's transports, so its printed configuration is read: a lane
 * line such as "lane[0]:  1:tcp/lo.0 md[1] -> md[1]/tcp/sysdev[255] ... am
 * am_bw#0" names the transport of the lane that carries "am" (posix, sysv
 * and xpmem are UCX's shared-memory ones).
 */
static tp_lane_class_t ep_am_lane_class(ucp_ep_h ep)
{
    static const char *const shm[] = {":posix/", ":sysv/", ":xpmem/"};
    char *text = NULL;
    size_t length = 0;
    tp_lane_class_t lane = TP_LANE_OTHER;
    FILE *stream = open_memstream(&text, &length);

    if (!stream)
        return lane;
    ucp_ep_print_info(ep, stream);
    fclose(stream);
    for (char *line = text; line && *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        if (strstr(line, "lane[") && strstr(line, " am ")) {
            if (strstr(line, ":tcp/"))
                lane = TP_LANE_TCP;
            for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++)
                if (strstr(line, shm[i]))
                    lane = TP_LANE_SHM;
        }
        line = end ? end + 1 : NULL;
    }
    free(text);
    return lane;
}

/*
 * Over TCP, UCX sends an active message above its rendezvous threshold
 * (which EMBER_TCP_SEG_SIZE, the segment size ember asks for, raises) by
 * rendezvous: a request-to-send, the receiver's answer, then the data, each
 * message a system call on loopback or a round trip on a wire.  A reply's
 * receiver is already waiting for it, and nobody waits on a one-way
 * message's handshake, so both go eager up to EMBER_TCP_EAGER, and calls
 * too.  The limit stays where the handshake still costs more than what
 * eager adds: an eager message is copied once more at the receiver.
 *
 * Over shared memory UCX goes rendezvous above a few KiB, and the server
 * then fetches each request itself (a process_vm_readv pinning the caller's
 * pages, and an answer) before its handler runs; calls and one-way
 * messages up to EMBER_SHM_EAGER go eager instead, copied through the
 * FIFO.  Replies: UCX decides (its rendezvous reads them zero-copy).
 *
 * One-way messages go eager up to EMBER_ONEWAY_EAGER over any transport
 * (RDMA included, where nothing here was measured), and to a TCP peer up to
 * EMBER_TCP_ONEWAY_EAGER, above the call limit: a caller waits through the
 * receiver's extra copy of an eager message, nobody waits on a one-way one.
 * Each limit was set by ember-bench lookup and allreduce runs alternating
 * with UCX's own choice (docs/PERFORMANCE.md, "Lookup and allreduce beside
 * their peers", has the current figures).
 * Decided once per peer, at its first send or reply, when its lanes are
 * set up (a peer is READY only after its HELLO was answered).
 */
static void peer_lanes(ember_tp_t *tp, tp_peer_t *peer)
{
    if (peer->lanes_known)
        return;
    peer->lane = ep_am_lane_class(peer->ep);
    size_t lane_eager = peer->lane == TP_LANE_TCP   ? tp->tcp_eager
                        : peer->lane == TP_LANE_SHM ? tp->shm_eager
                                                    : 0;
    peer->eager_reply_max = peer->lane == TP_LANE_TCP ? tp->tcp_eager : 0;
    peer->eager_call_max = lane_eager;
    size_t oneway = peer->lane == TP_LANE_TCP && tp->tcp_oneway_eager > lane_eager
                            ? tp->tcp_oneway_eager
                            : lane_eager;
    peer->eager_oneway_max = oneway > tp->oneway_eager ? oneway : tp->oneway_eager;
    peer->lanes_known = 1;
    ember_debug("tp",
                "%s (%s): eager up to %zu B replies, %zu B calls, %zu B one-way "
                "(0: UCX decides)",
                peer->name,
                peer->lane == TP_LANE_TCP   ? "tcp"
                : peer->lane == TP_LANE_SHM ? "shared memory"
                                            : "other",
                peer->eager_reply_max, peer->eager_call_max, peer->eager_oneway_max);
}

int ember_tp_peer_over_tcp(ember_tp_t *tp, int rank)
{
    if (!tp || rank < 0 || rank >= tp->world_size || rank == tp->rank)
        return -1;
    tp_peer_t *peer = &tp->peers[rank];
    if (!peer->ep || peer->state != TP_PEER_READY)
        return -1;
    peer_lanes(tp, peer);
    return peer->lane == TP_LANE_TCP;
}

/* What UCX is handed for one send: its header and data, and how. */
typedef struct {
    ucp_request_param_t param;
    const void *buffer;
    size_t count;
    size_t header_length;
} send_args_t;

/* The header, and the payload as UCX takes it: a small first part inline
 * in the header, one buffer contiguous, else the iov. */
static void send_layout(ember_tp_t *tp, tp_send_t *send, send_args_t *args)
{
    args->buffer = send->iov;
    args->count = send->iovcnt;
    args->header_length = sizeof(send->header);
    memcpy(send->am_header, &send->header, sizeof(send->header));
    if (send->iovcnt == 2 && send->am_id != TP_AM_HELLO && send->iov[0].length <= tp->inline_max) {
        /* A small first part rides in the AM header (see TP_INLINE_MAX). */
        tp_header_t *header = (tp_header_t *)send->am_header;
        header->flags |= (uint32_t)send->iov[0].length << TP_INLINE_SHIFT;
        memcpy(send->am_header + sizeof(*header), send->iov[0].buffer, send->iov[0].length);
        args->header_length += send->iov[0].length;
        args->param.datatype = ucp_dt_make_contig(1);
        args->buffer = send->iov[1].buffer;
        args->count = send->iov[1].length;
    } else if (send->iovcnt <= 1) {
        /* One buffer goes as contiguous data: UCX's rendezvous then reads it
         * zero-copy, which it does not do for an iov. */
        args->param.datatype = ucp_dt_make_contig(1);
        args->buffer = send->iovcnt ? send->iov[0].buffer : NULL;
        args->count = send->iovcnt ? send->iov[0].length : 0;
    }
    if (send->mem_type == EMBER_MEM_CUDA) { /* UCX reads it from GPU memory */
        args->param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        args->param.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    /* The bulk as its owner registered it (ember_rpc_param_t.payload_reg);
     * the call's checks made sure it goes contiguous. */
    if (args->param.datatype == ucp_dt_make_contig(1))
        tp_param_memh(&args->param, send->memh);
}

/* Eager or rendezvous, by the peer's limits (peer_lanes). */
static void send_protocol(ember_tp_t *tp, tp_peer_t *peer, tp_send_t *send, send_args_t *args)
{
    ucp_request_param_t *param = &args->param;
    int contig = param->datatype == ucp_dt_make_contig(1);

    if (send->am_id != TP_AM_HELLO)
        peer_lanes(tp, peer);
    if ((send->am_id == TP_AM_REPLY || send->am_id == TP_AM_REPLY_BATCH ||
         send->am_id == TP_AM_CALL_BATCH) &&
        contig && args->count <= peer->eager_reply_max)
        param->flags |= UCP_AM_SEND_FLAG_EAGER;
    /* A one-way message is not waited on, and its receiver's handler runs on
     * arrival: up to the peer's one-way limit it skips the rendezvous
     * handshake, which over shared memory costs a small allreduce several
     * times its eager time.  Calls go eager up to the peer's call limit
     * (see peer_lanes). */
    size_t request_eager_max =
            (send->header.flags & TP_FLAG_ONEWAY) ? peer->eager_oneway_max : peer->eager_call_max;
    /* The data after UCX's header: a small head riding in the header (an
     * allreduce segment's) does not push a payload at the limit past it. */
    size_t data_bytes = contig ? args->count : send->header.length;
    if (send->am_id == TP_AM_REQUEST && request_eager_max && data_bytes <= request_eager_max)
        param->flags |= UCP_AM_SEND_FLAG_EAGER;
    /* A reply its caller receives straight into its buffer (REPLY_RNDV). */
    if (send->force_rndv)
        param->flags = (param->flags & ~(uint32_t)UCP_AM_SEND_FLAG_EAGER) | UCP_AM_SEND_FLAG_RNDV;
}

static void send_now(ember_tp_t *tp, tp_send_t *send)
{
    tp_peer_t *peer = &tp->peers[send->peer];
    send_args_t args = {
            .param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                      UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS,
                      .cb.send = send_cb,
                      .user_data = send,
                      .datatype = ucp_dt_make_iov(),
                      .flags = UCP_AM_SEND_FLAG_REPLY},
    };

    send_layout(tp, send, &args);
    send_protocol(tp, peer, send, &args);
    /* HELLO carries no ember header: it is all payload. */
    ucs_status_ptr_t request = ucp_am_send_nbx(peer->ep, send->am_id,
                                               send->am_id == TP_AM_HELLO ? NULL : send->am_header,
                                               send->am_id == TP_AM_HELLO ? 0 : args.header_length,
                                               args.buffer, args.count, &args.param);
    if (request == NULL) {
        tp_send_complete(send, EMBER_OK);
    } else if (UCS_PTR_IS_ERR(request)) {
        ember_debug("tp", "send to %s failed at once: %s", peer->name,
                    ucs_status_string(UCS_PTR_STATUS(request)));
        tp_send_complete(send, EMBER_ERR_PEER_LOST);
    } else {
        peer->tp->sends_inflight++; /* until send_cb */
    }
}

static void peer_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    tp_peer_t *peer = arg;
    char reason[128];

    (void)ep;
    /* Only record it here: the endpoint is closed from the progress loop. */
    snprintf(reason, sizeof(reason), "endpoint error: %s", ucs_status_string(status));
    tp_peer_lost(peer->tp, peer->rank, EMBER_ERR_PEER_LOST, reason);
}

static ember_status_t peer_connect(ember_tp_t *tp, tp_peer_t *peer)
{
    ucp_ep_params_t params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = peer->address,
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = peer_err_cb, .arg = peer},
    };
    ucs_status_t status;
    tp_send_t *hello;
    tp_hello_t message = {.magic = TP_MAGIC,
                          .version = TP_VERSION,
                          .src_rank = (uint32_t)tp->rank,
                          .dst_rank = (uint32_t)peer->rank};

    EMBER_CHECK(tp_auth_nonce(peer->nonce));
    if (strcmp(peer->host, tp->host) == 0) {
        /* A peer on this host: UCX 1.13's shared-memory transports cannot
         * detect a dead peer, and asking for that makes UCX pick TCP
         * instead.  Take shared memory and watch the peer's process. */
        params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        status = ucp_ep_create(tp->worker, &params, &peer->ep);
        if (status == UCS_OK) {
            ember_debug("tp", "%s is on this host: watching its process %ld", peer->name,
                        peer->pid);
            peer->watched = 1;
            tp->watched_peers++;
        }
    } else {
        status = ucp_ep_create(tp->worker, &params, &peer->ep);
    }
    if (status != UCS_OK) {
        ember_error("tp", "cannot create an endpoint to %s (rank %d): %s", peer->name, peer->rank,
                    ucs_status_string(status));
        return tp_status_from_ucs(status);
    }
    peer->state = TP_PEER_CONNECTING;
    /* HELLO proves the secret, so that B answers no outsider, but not its
     * freshness (B refuses a nonce it has seen): the challenge that both
     * sides' proofs answer does. */
    memcpy(message.nonce, peer->nonce, sizeof(message.nonce));
    handshake_prove(tp, "ember-hello", &message);

    hello = ember_pool_zalloc(&tp->pool, sizeof(*hello));
    if (!hello)
        return EMBER_ERR_NO_MEMORY;
    hello->tp = tp;
    hello->peer = peer->rank;
    hello->am_id = TP_AM_HELLO;
    hello->iov = hello->iov_inline;
    hello->copy = ember_pool_get(&tp->pool, sizeof(message));
    if (!hello->copy) {
        ember_pool_put(&tp->pool, hello);
        return EMBER_ERR_NO_MEMORY;
    }
    memcpy(hello->copy, &message, sizeof(message));
    hello->iov[0] = (ucp_dt_iov_t){.buffer = hello->copy, .length = sizeof(message)};
    hello->iovcnt = 1;
    tp_list_init(&hello->link);
    send_now(tp, hello);
    return EMBER_OK;
}

ember_status_t tp_peer_send(ember_tp_t *tp, tp_send_t *send)
{
    tp_peer_t *peer = &tp->peers[send->peer];

    /* Replies held for a batch go first: a peer sees our messages in order. */
    if (peer->deferred_count)
        tp_batch_flush(tp, send->peer);
    tp_list_init(&send->link);
    switch (peer->state) {
    case TP_PEER_READY: send_now(tp, send); return EMBER_OK;
    case TP_PEER_LOST: tp_send_complete(send, peer->error); return EMBER_OK;
    case TP_PEER_IDLE: {
        ember_status_t status = peer_connect(tp, peer);
        if (status != EMBER_OK) {
            tp_peer_lost(tp, peer->rank, status, "cannot connect");
            tp_send_complete(send, peer->error);
            return EMBER_OK;
        }
    } /* fall through */
    case TP_PEER_CONNECTING:
    case TP_PEER_CONFIRMING: tp_list_push(&peer->waiting, &send->link); return EMBER_OK;
    }
    return EMBER_OK;
}

ember_status_t tp_peer_connect_wait(ember_tp_t *tp, int rank)
{
    tp_peer_t *peer;

    if (rank < 0 || rank >= tp->world_size)
        return EMBER_ERR_INVALID_PARAM;
    peer = &tp->peers[rank];
    if (peer->state == TP_PEER_IDLE) {
        ember_status_t status = peer_connect(tp, peer);
        if (status != EMBER_OK)
            tp_peer_lost(tp, rank, status, "cannot connect");
    }
    /* The handshake is one round trip; a hung peer fails at the deadline. */
    double deadline = ember_time_now() + tp->rpc_timeout_s;
    while ((peer->state == TP_PEER_CONNECTING || peer->state == TP_PEER_CONFIRMING) &&
           ember_time_now() < deadline)
        ember_tp_wait(tp, 0.01);
    tp_handshake_expired(tp, rank);
    if (peer->state != TP_PEER_READY) {
        tp_progress_once(tp);
        return peer->error ? peer->error : EMBER_ERR_PEER_LOST;
    }
    return EMBER_OK;
}

static void peer_flush_waiting(ember_tp_t *tp, tp_peer_t *peer)
{
    while (!tp_list_empty(&peer->waiting)) {
        tp_send_t *send = tp_container_of(peer->waiting.next, tp_send_t, link);
        tp_list_del(&send->link);
        if (peer->state == TP_PEER_READY)
            send_now(tp, send);
        else
            tp_send_complete(send, peer->error);
    }
}

void tp_peer_lost(ember_tp_t *tp, int rank, ember_status_t status, const char *reason)
{
    tp_peer_t *peer = &tp->peers[rank];

    if (peer->state == TP_PEER_LOST)
        return;
    peer->state = TP_PEER_LOST;
    peer->error = status;
    snprintf(peer->reason, sizeof(peer->reason), "%s", reason);
    peer->close_pending = 1; /* the sweep logs it and fails its calls */
    tp->peer_events = 1;
}

/*
 * Handle peers that became ready or were lost since the last pass: log a loss
 * once, close its endpoint, and release or fail what waited for it.  Runs
 * from the progress loop, never inside a UCX callback.
 */
void tp_endpoints_sweep(ember_tp_t *tp)
{
    tp->peer_events = 0;
    for (int rank = 0; rank < tp->world_size; rank++) {
        tp_peer_t *peer = &tp->peers[rank];
        if (peer->close_pending) {
            ember_error("tp", "peer %s (rank %d) lost: %s", peer->name, rank, peer->reason);
            peer->close_pending = 0;
            if (peer->ep) {
                ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
                ucs_status_ptr_t request = ucp_ep_close_nbx(peer->ep, &param);
                if (UCS_PTR_IS_PTR(request)) {
                    while (ucp_request_check_status(request) == UCS_INPROGRESS)
                        ucp_worker_progress(tp->worker);
                    ucp_request_free(request);
                }
                peer->ep = NULL;
                peer->lanes_known = 0;
            }
            peer_flush_waiting(tp, peer);
            tp_fail_peer_futures(tp, rank, peer->error);
        } else if (peer->state != TP_PEER_CONNECTING && peer->state != TP_PEER_CONFIRMING) {
            peer_flush_waiting(tp, peer);
        }
    }
}

void tp_endpoints_close(ember_tp_t *tp, double deadline)
{
    void **requests = calloc((size_t)tp->world_size, sizeof(*requests));

    for (int rank = 0; rank < tp->world_size; rank++) {
        tp_peer_t *peer = &tp->peers[rank];
        if (!peer->ep)
            continue;
        /* A flush would wait for a lost or hung peer's acknowledgement. */
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = peer->state == TP_PEER_LOST || peer->unanswered ||
                                                              tp->failed
                                                      ? UCP_EP_CLOSE_FLAG_FORCE
                                                      : 0};
        ucs_status_ptr_t request = ucp_ep_close_nbx(peer->ep, &param);
        peer->ep = NULL;
        peer->lanes_known = 0;
        if (UCS_PTR_IS_PTR(request) && requests)
            requests[rank] = request;
        else if (UCS_PTR_IS_PTR(request))
            ucp_request_free(request);
        peer_flush_waiting(tp, peer);
    }
    for (int rank = 0; requests && rank < tp->world_size; rank++) {
        while (requests[rank] && ucp_request_check_status(requests[rank]) == UCS_INPROGRESS &&
               ember_time_now() < deadline)
            ucp_worker_progress(tp->worker);
        if (requests[rank]) {
            if (ucp_request_check_status(requests[rank]) == UCS_INPROGRESS)
                ucp_request_cancel(tp->worker, requests[rank]);
            ucp_request_free(requests[rank]);
        }
    }
    free(requests);
}

/* Whether @pid has exited: only ESRCH from kill(0), an absent /proc entry
 * or a zombie say so.  A /proc entry that cannot be opened for want of
 * descriptors or memory (EMFILE, ENFILE, ENOMEM: an outsider holding many
 * connections to the store may cause that) says nothing about the peer. */
static int process_gone(long pid)
{
    char path[64], state = '?';
    FILE *file;

    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 1;
    /* A zombie still answers kill(0): read its state. */
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    file = fopen(path, "r");
    if (!file)
        return errno == ENOENT || errno == ESRCH;
    if (fscanf(file, "%*d %*s %c", &state) != 1)
        state = '?';
    fclose(file);
    return state == 'Z' || state == 'X';
}

static void on_heartbeat(ember_rpc_req_t *req, void *arg)
{
    (void)arg;
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

void tp_heartbeat_register(ember_tp_t *tp)
{
    tp->handlers[TP_OP_HEARTBEAT] = (tp_handler_t){.cb = on_heartbeat};
}

/* A remote watched peer: its heartbeat answered (the next one later),
 * failed (lost), or due. */
static void heartbeat(ember_tp_t *tp, tp_peer_t *peer, double now)
{
    if (peer->beat) {
        ember_status_t status = peer->beat->status;
        if (status == EMBER_INPROGRESS)
            return;
        ember_future_release(peer->beat);
        peer->beat = NULL;
        if (status != EMBER_OK && peer->state != TP_PEER_LOST) {
            char reason[96];
            snprintf(reason, sizeof(reason), "it answered no heartbeat within %.1f s",
                     tp->rpc_timeout_s);
            tp_peer_lost(tp, peer->rank, status, reason);
            return;
        }
        peer->next_beat = now + tp->rpc_timeout_s / 4;
        return;
    }
    if (now >= peer->next_beat && ember_rpc_call_async(tp, peer->rank, TP_OP_HEARTBEAT, NULL, 0,
                                                       NULL, 0, NULL, &peer->beat) != EMBER_OK)
        peer->beat = NULL;
}

void tp_check_liveness(ember_tp_t *tp, double now)
{
    tp->next_liveness_check = now + 0.1;
    for (int rank = 0; rank < tp->world_size; rank++) {
        tp_peer_t *peer = &tp->peers[rank];
        if (peer->beats && peer->state != TP_PEER_LOST)
            heartbeat(tp, peer, now);
        if (!peer->watched || peer->state == TP_PEER_LOST || !process_gone(peer->pid))
            continue;
        char reason[96];
        snprintf(reason, sizeof(reason), "its process %ld on %s has exited", peer->pid, peer->host);
        tp_peer_lost(tp, rank, EMBER_ERR_PEER_LOST, reason);
    }
}

/* ---- the handshake ------------------------------------------------------- */

/* A side's proof (tp_hello_t's comment): @src proves it to @dst. */
static void handshake_mac(const ember_tp_t *tp, const char *label, uint32_t src, uint32_t dst,
                          int32_t status, const uint8_t *nonce, const uint8_t *peer_nonce,
                          uint8_t mac[TP_AUTH_MAC_SIZE])
{
    const uint8_t *src_digest =
            src == (uint32_t)tp->rank ? tp->address_digest : tp->peers[src].address_digest;
    const uint8_t *dst_digest =
            dst == (uint32_t)tp->rank ? tp->address_digest : tp->peers[dst].address_digest;
    tp_auth_part_t parts[] = {{label, strlen(label)},
                              {&src, sizeof(src)},
                              {&dst, sizeof(dst)},
                              {&status, sizeof(status)},
                              {nonce, TP_AUTH_NONCE_SIZE},
                              {peer_nonce, TP_AUTH_NONCE_SIZE},
                              {src_digest, TP_AUTH_MAC_SIZE},
                              {dst_digest, TP_AUTH_MAC_SIZE}};
    tp_auth_hmac(&tp->secret, parts, sizeof(parts) / sizeof(parts[0]), mac);
}

/* Whether @msg carries @label's proof of its sender. */
static int handshake_proven(const ember_tp_t *tp, const char *label, const tp_hello_t *msg)
{
    uint8_t expected[TP_AUTH_MAC_SIZE];
    handshake_mac(tp, label, msg->src_rank, msg->dst_rank, msg->status, msg->nonce, msg->peer_nonce,
                  expected);
    return tp_auth_mac_equal(expected, msg->mac);
}

/* Fill in @msg's proof, by us, under @label. */
static void handshake_prove(const ember_tp_t *tp, const char *label, tp_hello_t *msg)
{
    handshake_mac(tp, label, msg->src_rank, msg->dst_rank, msg->status, msg->nonce, msg->peer_nonce,
                  msg->mac);
}

/* An answer to our handshake with @peer that proved nothing: dropped,
 * counted, and said when the handshake expires (tp_handshake_expired). */
static void handshake_unproven(ember_tp_t *tp, tp_peer_t *peer, const char *what)
{
    peer->unproven++;
    tp->refused_handshakes++;
    ember_warn_limited("tp",
                       "dropped %s claiming to come from %s (rank %d): it does not prove the "
                       "job secret",
                       what, peer->name, peer->rank);
}

void tp_handshake_expired(ember_tp_t *tp, int rank)
{
    tp_peer_t *peer = &tp->peers[rank];
    char reason[160];

    if (peer->state != TP_PEER_CONNECTING && peer->state != TP_PEER_CONFIRMING)
        return;
    if (!peer->unproven) {
        tp_peer_lost(tp, rank, EMBER_ERR_TIMED_OUT, "no answer to our connection");
        return;
    }
    /* Only answers that proved nothing: a wrong secret or address on one
     * side (or an outsider's forgeries, and no answer from the peer). */
    snprintf(reason, sizeof(reason),
             "no proven answer to our connection: %u answer(s) did not prove the job secret "
             "for the address it published",
             peer->unproven);
    tp_peer_lost(tp, rank, EMBER_ERR_AUTH, reason);
}

/* A handshake message is its struct, whole, with no header or rendezvous,
 * and addressed to us by a rank of the job. */
static int handshake_take(ember_tp_t *tp, size_t header_length, const void *data, size_t length,
                          const ucp_am_recv_param_t *param, tp_hello_t *msg)
{
    if (header_length != 0 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
        length != sizeof(*msg) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        tp->dropped_messages++;
        return 0;
    }
    memcpy(msg, data, sizeof(*msg));
    if (msg->magic != TP_MAGIC || msg->version != TP_VERSION ||
        msg->dst_rank != (uint32_t)tp->rank || msg->src_rank >= (uint32_t)tp->world_size) {
        tp->dropped_messages++;
        return 0;
    }
    return 1;
}

/* Queue @msg for @ep, sent from the progress loop (tp_send_acks). */
static void handshake_queue(ember_tp_t *tp, ucp_ep_h ep, unsigned am_id, const tp_hello_t *msg)
{
    tp_ack_t *ack = calloc(1, sizeof(*ack));
    if (!ack)
        return; /* the other side's handshake times out */
    ack->ep = ep;
    ack->am_id = am_id;
    ack->hello = *msg;
    tp_list_push(&tp->acks, &ack->link);
}

/* The pending handshake of @reply_ep, or NULL. */
static tp_pending_t *pending_find(ember_tp_t *tp, ucp_ep_h reply_ep)
{
    for (size_t i = 0; i < tp->pending_handshakes; i++) {
        if (tp->pending[i].reply_ep == reply_ep)
            return &tp->pending[i];
    }
    return NULL;
}

static void pending_remove(ember_tp_t *tp, tp_pending_t *pending)
{
    *pending = tp->pending[--tp->pending_handshakes];
}

/* Room for one more pending handshake: expired ones go, else the oldest. */
static tp_pending_t *pending_slot(ember_tp_t *tp, ucp_ep_h reply_ep, double now)
{
    tp_pending_t *slot = pending_find(tp, reply_ep);
    if (slot)
        return slot; /* a new HELLO on the connection starts over */
    for (size_t i = tp->pending_handshakes; i-- > 0;) {
        if (now - tp->pending[i].since > TP_PENDING_S)
            pending_remove(tp, &tp->pending[i]);
    }
    if (tp->pending_handshakes == TP_PENDING_MAX) {
        size_t oldest = 0;
        for (size_t i = 1; i < tp->pending_handshakes; i++) {
            if (tp->pending[i].since < tp->pending[oldest].since)
                oldest = i;
        }
        pending_remove(tp, &tp->pending[oldest]);
    }
    return &tp->pending[tp->pending_handshakes++];
}

/* Whether a HELLO from @ep may have its proof checked now (see
 * TP_HELLO_RATE): a token from its slot, or from the shared bucket. */
static int bucket_take(tp_hello_bucket_t *bucket, double rate, double now)
{
    bucket->tokens += (now - bucket->last) * rate;
    if (bucket->tokens > rate)
        bucket->tokens = rate;
    bucket->last = now;
    if (bucket->tokens < 1.0)
        return 0;
    bucket->tokens -= 1.0;
    return 1;
}

static int hello_allowed(ember_tp_t *tp, ucp_ep_h ep, double now)
{
    tp_hello_bucket_t *slot = &tp->hello_buckets[((uintptr_t)ep >> 4) % TP_HELLO_SLOTS];
    if (slot->ep != ep && (!slot->ep || now - slot->last > 1.0))
        *slot = (tp_hello_bucket_t){.ep = ep, .tokens = TP_HELLO_RATE, .last = now};
    if (slot->ep == ep)
        return bucket_take(slot, TP_HELLO_RATE, now);
    return bucket_take(&tp->hello_shared, TP_HELLO_SHARED_RATE, now);
}

/* A proven HELLO's nonce: 1 the first time, 0 for a replay (then dropped). */
static int nonce_fresh(ember_tp_t *tp, const uint8_t nonce[TP_AUTH_NONCE_SIZE])
{
    for (size_t i = 0; i < tp->seen_count; i++) {
        if (memcmp(tp->seen_nonces[i], nonce, TP_AUTH_NONCE_SIZE) == 0)
            return 0;
    }
    memcpy(tp->seen_nonces[tp->seen_next], nonce, TP_AUTH_NONCE_SIZE);
    tp->seen_next = (tp->seen_next + 1) % TP_SEEN_NONCES;
    if (tp->seen_count < TP_SEEN_NONCES)
        tp->seen_count++;
    return 1;
}

static const uint8_t zero_nonce[TP_AUTH_NONCE_SIZE];

/* B: a HELLO.  Answer it with a challenge if it proves the secret and is
 * new; nothing is accepted yet. */
ucs_status_t tp_am_hello_cb(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    ember_tp_t *tp = arg;
    tp_hello_t hello, challenge;
    double now = ember_time_coarse();

    (void)header;
    if (!handshake_take(tp, header_length, data, length, param, &hello))
        return UCS_OK;
    if (hello.status != 0 || memcmp(hello.peer_nonce, zero_nonce, sizeof(zero_nonce)) != 0) {
        tp->dropped_messages++;
        return UCS_OK;
    }
    if (!hello_allowed(tp, param->reply_ep, now)) {
        tp->limited_hellos++;
        return UCS_OK;
    }
    if (!handshake_proven(tp, "ember-hello", &hello)) {
        tp->refused_handshakes++;
        ember_warn_limited("tp",
                           "refused a connection claiming to be rank %u (%s): it does not "
                           "prove the job secret",
                           hello.src_rank, tp->peers[hello.src_rank].name);
        return UCS_OK;
    }
    if (!nonce_fresh(tp, hello.nonce)) {
        tp->dropped_messages++; /* a replay: its sender cannot answer our challenge */
        return UCS_OK;
    }
    tp_pending_t *pending = pending_slot(tp, param->reply_ep, ember_time_now());
    challenge = (tp_hello_t){.magic = TP_MAGIC,
                             .version = TP_VERSION,
                             .src_rank = (uint32_t)tp->rank,
                             .dst_rank = hello.src_rank};
    memcpy(challenge.nonce, hello.nonce, sizeof(hello.nonce));
    if (tp_auth_nonce(challenge.peer_nonce) != EMBER_OK) {
        pending_remove(tp, pending);
        return UCS_OK;
    }
    *pending = (tp_pending_t){
            .reply_ep = param->reply_ep, .rank = (int)hello.src_rank, .since = ember_time_now()};
    memcpy(pending->nonce, challenge.nonce, sizeof(pending->nonce));
    memcpy(pending->peer_nonce, challenge.peer_nonce, sizeof(pending->peer_nonce));
    handshake_prove(tp, "ember-challenge", &challenge);
    handshake_queue(tp, param->reply_ep, TP_AM_CHALLENGE, &challenge);
    return UCS_OK;
}

/* A: the peer a CHALLENGE or ACCEPT claims to come from, if it came on our
 * own endpoint to that peer, in handshake @state, for our nonce (and its,
 * once known); else NULL (dropped: stale, or not an answer of that peer's). */
static tp_peer_t *handshake_answerer(ember_tp_t *tp, const tp_hello_t *msg,
                                     const ucp_am_recv_param_t *param, tp_peer_state_t state)
{
    tp_peer_t *peer = &tp->peers[msg->src_rank];
    if (peer->state != state || param->reply_ep != peer->ep ||
        memcmp(msg->nonce, peer->nonce, sizeof(msg->nonce)) != 0 ||
        (state == TP_PEER_CONFIRMING &&
         memcmp(msg->peer_nonce, peer->peer_nonce, sizeof(msg->peer_nonce)) != 0)) {
        tp->dropped_messages++;
        return NULL;
    }
    return peer;
}

/* A: B's challenge to our HELLO.  Check B's proof, then prove ours. */
ucs_status_t tp_am_challenge_cb(void *arg, const void *header, size_t header_length, void *data,
                                size_t length, const ucp_am_recv_param_t *param)
{
    ember_tp_t *tp = arg;
    tp_hello_t challenge, confirm;

    (void)header;
    if (!handshake_take(tp, header_length, data, length, param, &challenge))
        return UCS_OK;
    tp_peer_t *peer = handshake_answerer(tp, &challenge, param, TP_PEER_CONNECTING);
    if (!peer)
        return UCS_OK;
    if (challenge.status != 0 || !handshake_proven(tp, "ember-challenge", &challenge)) {
        handshake_unproven(tp, peer, "a challenge");
        return UCS_OK;
    }
    confirm = challenge;
    confirm.src_rank = (uint32_t)tp->rank;
    confirm.dst_rank = challenge.src_rank;
    handshake_prove(tp, "ember-confirm", &confirm);
    memcpy(peer->peer_nonce, challenge.peer_nonce, sizeof(peer->peer_nonce));
    peer->state = TP_PEER_CONFIRMING;
    handshake_queue(tp, peer->ep, TP_AM_CONFIRM, &confirm);
    return UCS_OK;
}

/* B: A's proof.  Only now does the connection speak for A. */
ucs_status_t tp_am_confirm_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    ember_tp_t *tp = arg;
    tp_hello_t confirm, accept;

    (void)header;
    if (!handshake_take(tp, header_length, data, length, param, &confirm))
        return UCS_OK;
    tp_pending_t *pending = pending_find(tp, param->reply_ep);
    if (!pending || pending->rank != (int)confirm.src_rank ||
        memcmp(pending->nonce, confirm.nonce, sizeof(confirm.nonce)) != 0 ||
        memcmp(pending->peer_nonce, confirm.peer_nonce, sizeof(confirm.peer_nonce)) != 0) {
        tp->dropped_messages++; /* no challenge of ours asked for it */
        return UCS_OK;
    }
    pending_remove(tp, pending);
    accept = confirm;
    accept.src_rank = (uint32_t)tp->rank;
    accept.dst_rank = confirm.src_rank;
    if (confirm.status != 0 || !handshake_proven(tp, "ember-confirm", &confirm)) {
        tp->refused_handshakes++;
        ember_warn_limited("tp",
                           "refused a connection claiming to be rank %u (%s): it does not "
                           "prove the job secret",
                           confirm.src_rank, tp->peers[confirm.src_rank].name);
        accept.status = EMBER_ERR_AUTH;
    } else if (conn_add(tp, param->reply_ep, (int)confirm.src_rank) != EMBER_OK) {
        accept.status = EMBER_ERR_NO_MEMORY;
    } else {
        accept.status = EMBER_OK;
    }
    /* A refusal is proven too: a rank believes no refusal an outsider could
     * have sent (one that holds the secret and was refused learns why). */
    handshake_prove(tp, accept.status == EMBER_OK ? "ember-accept" : "ember-refuse", &accept);
    handshake_queue(tp, param->reply_ep, TP_AM_ACCEPT, &accept);
    return UCS_OK;
}

/* A: B accepted (or refused) our proof. */
ucs_status_t tp_am_accept_cb(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    ember_tp_t *tp = arg;
    tp_hello_t accept;

    (void)header;
    if (!handshake_take(tp, header_length, data, length, param, &accept))
        return UCS_OK;
    tp_peer_t *peer = handshake_answerer(tp, &accept, param, TP_PEER_CONFIRMING);
    if (!peer)
        return UCS_OK;
    if (!handshake_proven(tp, accept.status == EMBER_OK ? "ember-accept" : "ember-refuse",
                          &accept)) {
        handshake_unproven(tp, peer, accept.status == EMBER_OK ? "an acceptance" : "a refusal");
        return UCS_OK;
    }
    if (accept.status != EMBER_OK) {
        tp_peer_lost(tp, peer->rank, ember_status_from_wire(accept.status),
                     accept.status == EMBER_ERR_AUTH
                             ? "it refused our connection: our proof did not match its secret "
                               "and address"
                             : "it refused our connection");
        return UCS_OK;
    }
    peer->state = TP_PEER_READY;
    tp->peer_events = 1; /* queued sends leave from the progress loop */
    return UCS_OK;
}

static void ack_sent_cb(void *request, ucs_status_t status, void *user_data)
{
    free(user_data);
    ucp_request_free(request);
}

void tp_send_acks(ember_tp_t *tp)
{
    while (!tp_list_empty(&tp->acks)) {
        tp_ack_t *ack = tp_container_of(tp->acks.next, tp_ack_t, link);
        ucp_request_param_t param = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                UCP_OP_ATTR_FIELD_FLAGS,
                .cb.send = ack_sent_cb,
                .user_data = ack,
                .flags = UCP_AM_SEND_FLAG_REPLY,
        };
        ucs_status_ptr_t request;

        tp_list_del(&ack->link);
        request = ucp_am_send_nbx(ack->ep, ack->am_id, NULL, 0, &ack->hello, sizeof(ack->hello),
                                  &param);
        if (!UCS_PTR_IS_PTR(request))
            free(ack);
    }
}

/* ---- hostile-input tests ---------------------------------------------------- */

static void raw_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    (void)status;
}

ember_status_t tp_debug_set_peer_address(ember_tp_t *tp, int rank, const void *address,
                                         size_t length)
{
    if (rank < 0 || rank >= tp->world_size || tp->peers[rank].state != TP_PEER_IDLE)
        return EMBER_ERR_INVALID_PARAM;
    void *copy = malloc(length ? length : 1);
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    memcpy(copy, address, length);
    free(tp->peers[rank].address);
    tp->peers[rank].address = copy;
    tp->peers[rank].address_length = length;
    tp_auth_digest(copy, length, tp->peers[rank].address_digest);
    return EMBER_OK;
}

ember_status_t tp_debug_send_raw(ember_tp_t *tp, int rank, unsigned am_id, const void *header,
                                 size_t header_length, const void *data, size_t length,
                                 int authenticated)
{
    ucp_ep_h ep;
    ucs_status_ptr_t request;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_AM_SEND_FLAG_REPLY};
    ember_status_t status = EMBER_OK;

    if (authenticated) {
        EMBER_CHECK(tp_peer_connect_wait(tp, rank));
        ep = tp->peers[rank].ep;
    } else {
        ucp_ep_params_t params = {
                .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                              UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
                .address = tp->peers[rank].address,
                .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                .err_handler = {.cb = raw_err_cb},
        };
        /* The same error mode as real endpoints: UCX refuses a mismatch. */
        if (strcmp(tp->peers[rank].host, tp->host) == 0)
            params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        if (ucp_ep_create(tp->worker, &params, &ep) != UCS_OK)
            return EMBER_ERR_TRANSPORT;
    }
    request = ucp_am_send_nbx(ep, am_id, header, header_length, data, length, &param);
    if (UCS_PTR_IS_PTR(request)) {
        while (ucp_request_check_status(request) == UCS_INPROGRESS)
            tp_progress_once(tp);
        status = tp_status_from_ucs(ucp_request_check_status(request));
        ucp_request_free(request);
    } else if (UCS_PTR_IS_ERR(request)) {
        status = tp_status_from_ucs(UCS_PTR_STATUS(request));
    }
    if (!authenticated) {
        /* Let the message arrive.  The endpoint stays open until the worker
         * is destroyed: closing it would also tear down the peer's side,
         * which UCX may share with our real endpoint to that peer. */
        request = ucp_ep_flush_nbx(ep, &(ucp_request_param_t){0});
        if (UCS_PTR_IS_PTR(request)) {
            while (ucp_request_check_status(request) == UCS_INPROGRESS)
                tp_progress_once(tp);
            ucp_request_free(request);
        }
    }
    return status;
}
