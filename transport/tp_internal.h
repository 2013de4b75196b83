/*
 * transport: internal state shared by the transport's modules
 * (worker.c, endpoint.c, rpc.c, rma.c, bootstrap.c).
 */
#ifndef EMBER_TP_INTERNAL_H
#define EMBER_TP_INTERNAL_H

#include "common/pool.h"
#include "transport/auth.h"
#include "transport/store.h"

#include <ember/transport.h>

#include <ucp/api/ucp.h>

/* Active-message ids: one per message kind; op ids travel in our header. */
enum {
    TP_AM_REQUEST = 0,
    TP_AM_REPLY = 1,
    /* The connection handshake (endpoint.c): HELLO from the connecting side,
     * CHALLENGE back, CONFIRM, ACCEPT back. */
    TP_AM_HELLO = 2,
    TP_AM_CHALLENGE = 3,
    TP_AM_REPLY_BATCH = 4, /* several small replies to one peer (batch.c) */
    TP_AM_CALL_BATCH = 5,  /* several small calls and one-way sends (batch.c) */
    TP_AM_CONFIRM = 6,
    TP_AM_ACCEPT = 7,
    TP_AM_COUNT
};

#define TP_MAGIC 0x454d4252u /* "EMBR" */
/* 2: reply batches; 3: call batches; 4: mutual handshake; 5: the engine's
 * LOOKUP with its rows last and its entries together (engine/wire/protocol.h:
 * the engine's messages change with the transport's version); 6: every
 * handshake message proves the secret, HELLO and refusals included */
#define TP_VERSION 6

/*
 * A two-part payload whose first part is small (a message header of the
 * engine's) sends that part inside the AM header, so the bulk goes as one
 * contiguous buffer, which UCX's rendezvous moves zero-copy (it copies
 * iovs).  tp_header_t.flags >> TP_INLINE_SHIFT is its length; `length` is
 * still the whole payload.
 */
#define TP_INLINE_MAX   EMBER_RPC_INLINE_MAX
#define TP_INLINE_SHIFT 16
/* A one-way request: the receiver's handler runs, nothing is sent back. */
#define TP_FLAG_ONEWAY 1u
/* A call whose reply must come by rendezvous, the payload whole (no inline
 * head, no batch): the caller receives it straight into its buffer, which
 * may be GPU memory no host copy may touch. */
#define TP_FLAG_REPLY_RNDV 2u
#define TP_FLAGS_KNOWN     (TP_FLAG_ONEWAY | TP_FLAG_REPLY_RNDV)

/* The fixed, versioned header in front of every request and reply. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t op;
    uint64_t request_id;
    int32_t status; /* replies: the handler's status */
    uint32_t flags;
    uint64_t length; /* payload bytes that follow */
} tp_header_t;

/*
 * The four messages of the handshake (no ember header, no payload):
 *   HELLO     connecting A -> B  nonce_a, A's proof (nonce_b zero)
 *   CHALLENGE B -> A             nonce_a, nonce_b, B's proof
 *   CONFIRM   A -> B             nonce_a, nonce_b, A's proof
 *   ACCEPT    B -> A             status, nonce_a, nonce_b, B's proof
 * A proof is HMAC(secret, label | sender | receiver | status | nonce_a |
 * nonce_b | SHA-256 of the sender's worker address | of the receiver's),
 * the addresses as each side has them from the store, the label naming the
 * message (an ACCEPT that refuses has its own).  Every message proves the
 * secret, so one from an endpoint without it changes nothing (dropped and
 * counted): B answers only a HELLO that proves it and whose nonce it has
 * not seen (a replayed one gets nothing back), A believes a CHALLENGE or
 * ACCEPT only on its own endpoint to B and proven, and both sides prove the
 * secret over fresh nonces of both, so neither a replayed HELLO nor one
 * relayed from another connection passes, and B takes nothing from the
 * connection before A's CONFIRM is proven.
 */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    uint32_t src_rank;
    uint32_t dst_rank;
    int32_t status; /* ACCEPT: OK or ERR_AUTH */
    uint32_t reserved2;
    uint8_t nonce[TP_AUTH_NONCE_SIZE];      /* the connecting side's */
    uint8_t peer_nonce[TP_AUTH_NONCE_SIZE]; /* the accepting side's */
    uint8_t mac[TP_AUTH_MAC_SIZE];
} tp_hello_t;

/* What carries a peer's active messages (its eager limits follow). */
typedef enum {
    TP_LANE_OTHER = 0,
    TP_LANE_TCP,
    TP_LANE_SHM
} tp_lane_class_t;

typedef enum {
    TP_PEER_IDLE,       /* no endpoint yet */
    TP_PEER_CONNECTING, /* HELLO sent, waiting for the CHALLENGE */
    TP_PEER_CONFIRMING, /* CONFIRM sent, waiting for the ACCEPT */
    TP_PEER_READY,
    TP_PEER_LOST, /* endpoint error, timeout with a stuck send, refused */
} tp_peer_state_t;

typedef struct tp_list {
    struct tp_list *prev, *next;
} tp_list_t;

/* An outgoing message: a call's request, or a reply. */
typedef struct tp_send {
    tp_list_t link; /* peer->waiting while the handshake runs */
    struct ember_tp *tp;
    int peer;
    unsigned am_id;
    tp_header_t header;
    uint8_t am_header[sizeof(tp_header_t) + TP_INLINE_MAX]; /* header + inline part */
    ucp_dt_iov_t *iov;                                      /* iov_inline or heap */
    size_t iovcnt;
    ucp_dt_iov_t iov_inline[4];
    void *copy;                  /* reply payload copy (owned) */
    struct ember_future *future; /* calls: completes the call's send side */
    ember_mem_type_t mem_type;   /* of the payload's bulk (its last part) */
    int force_rndv;              /* a reply a REPLY_RNDV call waits for */
    ucp_mem_h memh;              /* the bulk's registration (payload_reg), or NULL */
    ember_rpc_done_cb done_cb;   /* zcopy replies */
    void *done_arg;
} tp_send_t;

typedef struct {
    struct ember_tp *tp;
    int rank;
    char name[64];
    void *address; /* UCX worker address from the store (owned) */
    size_t address_length;
    uint8_t address_digest[TP_AUTH_MAC_SIZE]; /* its SHA-256: the handshake's */
    ucp_ep_h ep;                              /* our endpoint to the peer; NULL until first use */
    tp_peer_state_t state;
    uint8_t nonce[TP_AUTH_NONCE_SIZE];      /* our HELLO's */
    uint8_t peer_nonce[TP_AUTH_NONCE_SIZE]; /* its CHALLENGE's */
    tp_list_t waiting;                      /* tp_send_t queued until READY */
    unsigned unproven;  /* answers to our handshake that proved nothing (dropped) */
    tp_list_t deferred; /* small replies held to the end of a handler run, or
                         * calls held under ember_rpc_batch_begin (batch.c) */
    size_t deferred_count, deferred_bytes;
    unsigned deferred_am; /* what is held: TP_AM_REPLY or TP_AM_REQUEST */
    ember_status_t error;
    char reason[160];
    int close_pending; /* lost: close the endpoint from the progress loop */
    int unanswered;    /* a call to it timed out: hung, or too slow for the job */
    char host[64];     /* where the peer runs, and its pid, from the store */
    long pid;
    int watched;          /* no UCX failure detection: poll its pid instead */
    int beats;            /* on another host and watched: heartbeat calls */
    ember_future_t *beat; /* the heartbeat in flight */
    double next_beat;
    int lanes_known;         /* lane and eager_*_max set from the endpoint's lanes */
    tp_lane_class_t lane;    /* what carries its active messages */
    size_t eager_reply_max;  /* replies up to this go eager (0: UCX decides) */
    size_t eager_call_max;   /* calls up to this go eager (0: UCX decides) */
    size_t eager_oneway_max; /* one-way messages up to this go eager */
} tp_peer_t;

/* An incoming connection: a reply endpoint, authenticated by its CONFIRM. */
typedef struct {
    ucp_ep_h reply_ep;
    int rank;
} tp_conn_t;

/* An incoming connection whose HELLO was answered, awaiting its CONFIRM. */
typedef struct {
    ucp_ep_h reply_ep;
    int rank; /* the rank it claims */
    uint8_t nonce[TP_AUTH_NONCE_SIZE], peer_nonce[TP_AUTH_NONCE_SIZE];
    double since;
} tp_pending_t;
/* Handshakes awaiting their CONFIRM at once (an outsider's HELLOs evict
 * the oldest), and how long one may wait. */
#define TP_PENDING_MAX 256
#define TP_PENDING_S   10.0

/*
 * What a HELLO costs before it is known to prove the secret is bounded per
 * sending endpoint: each gets TP_HELLO_RATE proofs checked a second (a
 * burst of as many), in one of TP_HELLO_SLOTS slots by its endpoint; an
 * endpoint whose slot another active one holds draws on one shared bucket
 * of TP_HELLO_SHARED_RATE.  Over budget, a HELLO is dropped unread (the
 * job's own ranks send one per connection).
 */
#define TP_HELLO_SLOTS       64
#define TP_HELLO_RATE        8.0
#define TP_HELLO_SHARED_RATE 256.0
typedef struct {
    ucp_ep_h ep;
    double tokens, last;
} tp_hello_bucket_t;
/* Nonces of proven HELLOs answered so far (a replay of one is dropped). */
#define TP_SEEN_NONCES 4096

typedef enum {
    TP_FUTURE_CALL,
    TP_FUTURE_RMA
} tp_future_kind_t;

struct ember_future {
    struct ember_tp *tp;
    tp_future_kind_t kind;
    uint64_t id; /* slot | generation << 32 */
    int peer;
    uint16_t op;
    ember_status_t status; /* INPROGRESS until done */
    void *response;        /* user buffer or owned */
    size_t capacity;
    size_t length;
    int response_owned;
    int released; /* the user let go; free when nothing refers to it */
    int send_inflight;
    int recv_inflight;             /* rendezvous reply being received */
    ember_mem_type_t response_mem; /* where the caller's response buffer is */
    ucp_mem_h response_memh;       /* its registration (reply_reg), or NULL */
    int reply_rndv;                /* asked for the reply by rendezvous */
    double deadline;
    double started;
    tp_send_t *send;
};

struct ember_rpc_req {
    struct ember_tp *tp;
    tp_list_t link; /* tp->ready */
    int peer;
    uint16_t op;
    uint64_t request_id;
    void *data;
    size_t length;
    void *ucx_data;               /* eager data UCX lets us keep (release on reply) */
    void *owned_data;             /* rendezvous or copied payload (pool) */
    void *user_data;              /* rendezvous payload in the handler's own buffer */
    ember_rpc_release_cb release; /* ...given back with this when done */
    void *release_arg;
    size_t head_length; /* placed (user_data): the head that came inline */
    uint8_t head[TP_INLINE_MAX];
    int recv_inflight;
    ember_status_t recv_status;
    int oneway;     /* no reply travels back */
    int reply_rndv; /* the caller wants its reply by rendezvous */
};

typedef struct {
    ember_rpc_handler_cb cb;
    void *arg;
    ember_rpc_alloc_cb alloc;
    ember_rpc_release_cb release;
    void *alloc_arg;
} tp_handler_t;

/* A handshake message to send from the progress loop (not from inside
 * the UCX callback that caused it). */
typedef struct tp_ack {
    tp_list_t link;
    ucp_ep_h ep;
    unsigned am_id;
    tp_hello_t hello;
} tp_ack_t;

struct ember_tp {
    int rank;
    int world_size;
    tp_peer_t *peers;
    tp_conn_t *conns;
    size_t conn_count, conn_capacity;
    tp_pending_t pending[TP_PENDING_MAX];
    size_t pending_handshakes;
    tp_hello_bucket_t hello_buckets[TP_HELLO_SLOTS];
    tp_hello_bucket_t hello_shared;
    uint8_t seen_nonces[TP_SEEN_NONCES][TP_AUTH_NONCE_SIZE]; /* a ring */
    size_t seen_next, seen_count;
    tp_secret_t secret;
    uint8_t address_digest[TP_AUTH_MAC_SIZE]; /* SHA-256 of our worker address */

    ucp_context_h context;
    ucp_worker_h worker;
    int efd;
    double spin_s;
    double coarse_lag_s;     /* ember_time_coarse_lag() */
    int pull_rendezvous;     /* see ember_tp_pull_rendezvous */
    size_t tcp_eager;        /* EMBER_TCP_EAGER */
    size_t oneway_eager;     /* EMBER_ONEWAY_EAGER */
    size_t tcp_oneway_eager; /* EMBER_TCP_ONEWAY_EAGER */
    size_t shm_eager;        /* EMBER_SHM_EAGER */
    double rpc_timeout_s;
    size_t max_message;
    size_t inline_max; /* 0 when the worker's AM header is too small */

    tp_handler_t handlers[EMBER_RPC_OP_MAX];
    tp_list_t ready;                              /* ember_rpc_req_t with their payload in place */
    unsigned handler_depth;                       /* inside tp_run_handlers (nested: > 1) */
    int deferred_peers;                           /* peers with replies or calls held (batch.c) */
    unsigned batching;                            /* ember_rpc_batch_begin depth: calls are held */
    double deferred_since;                        /* first seen held between handlers; 0: not yet */
    unsigned long reply_batches, batched_replies; /* sent so far (batch.c) */
    unsigned long call_batches, batched_calls;
    tp_list_t acks; /* tp_ack_t to send */

    ember_future_t **slots; /* pending futures by slot */
    uint32_t *generations;
    uint32_t *free_slots;
    size_t slot_count, free_count;
    size_t pending_count;
    size_t sends_inflight; /* UCX send requests not yet completed */
    double next_deadline_check;

    int failed;                       /* ember_tp_set_failed: shutdown meets nobody */
    unsigned long dropped_messages;   /* malformed or unauthenticated */
    unsigned long refused_handshakes; /* handshake messages that proved nothing */
    unsigned long limited_hellos;     /* HELLOs dropped unread, over budget */
    unsigned long handled_requests;   /* handlers run for the job's ranks */
    int peer_events;                  /* a peer became ready or was lost: sweep */
    unsigned long event_total;        /* progress events so far (ember_tp_wait) */

    ember_pool_t pool; /* hot-path structs and payload buffers */
    tp_store_server_t *store_server;
    tp_store_client_t *store;
    double connect_timeout_s;
    unsigned barrier_seq; /* every rank passes barriers in the same order */
    char host[64];
    int watched_peers; /* pid-watched or heartbeat peers */
    double next_liveness_check;
};

/* The transport's own op below the user's: a heartbeat, answered empty.
 * A peer on another host that a rank watches (ember_tp_watch) gets one a
 * quarter of EMBER_RPC_TIMEOUT after the last was answered; one unanswered
 * at its deadline makes the peer lost.  UCX alone notices a peer cut off by
 * the network only when TCP gives up, minutes later, and a rank that only
 * answers (a PS) sends it nothing to fail. */
#define TP_OP_HEARTBEAT (EMBER_RPC_OP_USER_BASE - 1)
void tp_heartbeat_register(ember_tp_t *tp);

/* ---- lists ---- */
static inline void tp_list_init(tp_list_t *head)
{
    head->prev = head->next = head;
}
static inline int tp_list_empty(const tp_list_t *head)
{
    return head->next == head;
}
static inline void tp_list_push(tp_list_t *head, tp_list_t *item)
{
    item->prev = head->prev;
    item->next = head;
    head->prev->next = item;
    head->prev = item;
}
static inline void tp_list_del(tp_list_t *item)
{
    item->prev->next = item->next;
    item->next->prev = item->prev;
    item->prev = item->next = item;
}
#define tp_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Translate a UCX status at the boundary (and log where it happened). */
ember_status_t tp_status_from_ucs(ucs_status_t status);

/* worker.c */
ember_status_t tp_worker_create(ember_tp_t *tp);
void tp_worker_destroy(ember_tp_t *tp);
/* One pass: UCX progress, deferred acks/closes, handlers, deadlines. */
unsigned tp_progress_once(ember_tp_t *tp);
/* Seconds a waiter polls before sleeping (EMBER_SPIN_US, else by CPUs per rank). */
double tp_spin_window(const ember_tp_t *tp);
/* Whether every transport configured reads rendezvous payloads itself. */
int tp_pull_rendezvous_config(void);
/* Progress until done(arg) or @deadline (absolute); blocks when idle. */
void tp_progress_until(ember_tp_t *tp, int (*done)(const void *arg), const void *arg,
                       double deadline);
/* The same for @timeout_s, counted from the first idle pass: a wait that
 * is over before it idles reads no clock (a read per call shows in a small
 * request's time where clock reads are dear, as on a virtual machine). */
void tp_progress_for(ember_tp_t *tp, int (*done)(const void *arg), const void *arg,
                     double timeout_s);

/* endpoint.c */
ember_status_t tp_peer_send(ember_tp_t *tp, tp_send_t *send);
/* The send is over (sent, failed or never posted): tell its owner, free it. */
void tp_send_complete(tp_send_t *send, ember_status_t status);
/* Connect to @rank now (if not yet) and wait for the handshake. */
ember_status_t tp_peer_connect_wait(ember_tp_t *tp, int rank);
void tp_peer_lost(ember_tp_t *tp, int rank, ember_status_t status, const char *reason);
/* Our handshake with @rank ran out of time: lost, as ERR_AUTH naming the
 * unproven answers it dropped if any, else ERR_TIMED_OUT. */
void tp_handshake_expired(ember_tp_t *tp, int rank);
void tp_endpoints_sweep(ember_tp_t *tp);
void tp_endpoints_close(ember_tp_t *tp, double deadline);
/* Peers without UCX failure detection: notice when their process is gone. */
void tp_check_liveness(ember_tp_t *tp, double now);
int tp_conn_lookup(ember_tp_t *tp, ucp_ep_h reply_ep);
/* Count a dropped message and warn (@what), limited with counts
 * (common/log_limit.h): an outsider cannot fill the log. */
void tp_note_dropped(ember_tp_t *tp, const char *what);
/* The first peer known lost (@or_unanswered: or that left a call of ours
 * unanswered at its deadline), or -1: a job with one is over. */
int tp_first_lost(const ember_tp_t *tp, int or_unanswered);
/* The authenticated rank an active message came from, else -1. */
int tp_am_sender(ember_tp_t *tp, const ucp_am_recv_param_t *param);

/* rpc.c */
/* Check a request or reply header; *inline_p: the payload bytes that rode in it. */
int tp_header_valid(ember_tp_t *tp, const void *header, size_t header_length, size_t length,
                    tp_header_t *out, size_t *inline_p);
/* The same check with the transport's one limit given (@max_message: the
 * largest payload accepted): no transport needed, for the fuzzer. */
int tp_header_parse(const void *header, size_t header_length, size_t length, size_t max_message,
                    tp_header_t *out, size_t *inline_p);
/*
 * Receive a rendezvous payload (@desc from the AM callback) into @buffer
 * (of @mem_type; @memh: its registration, or NULL).
 * INPROGRESS: @cb runs when it has landed; else it already has (OK) or
 * failed, and @cb will not run.
 */
ember_status_t tp_rndv_receive(ember_tp_t *tp, void *desc, void *buffer, size_t length,
                               ember_mem_type_t mem_type, ucp_mem_h memh,
                               ucp_am_recv_data_nbx_callback_t cb, void *user_data);

/* A request's buffer @buffer..+@length as its registration @mem (see
 * ember_rpc_param_t): @mem's handle, or NULL when @mem is NULL.
 * ERR_INVALID_PARAM (logged, naming @what): @mem does not cover the buffer
 * or is of another memory type than @type. */
ember_status_t tp_mem_handle(const ember_mem_t *mem, const void *buffer, size_t length,
                             ember_mem_type_t type, const char *what, ucp_mem_h *memh_p);
/* Add @memh to @param (nothing when NULL).  The field is in UCX's
 * request parameters from 1.13 on, the oldest UCX CMake accepts. */
void tp_param_memh(ucp_request_param_t *param, ucp_mem_h memh);

/* worker.c: UCX's library against the headers ember was built with.  A
 * pure check (the versions given): OK when major and minor match, else
 * ERR_UNSUPPORTED and @why says which is which. */
ember_status_t tp_ucx_version_check(unsigned lib_major, unsigned lib_minor, unsigned hdr_major,
                                    unsigned hdr_minor, char *why, size_t why_length);
ember_status_t tp_send_alloc(ember_tp_t *tp, int peer, unsigned am_id, const ember_iov_t *iov,
                             size_t iovcnt, tp_send_t **send_p);
/* A reply's header and payload, to its waiting call (UCS_INPROGRESS: a
 * rendezvous payload @data is being received). */
ucs_status_t tp_reply_deliver(ember_tp_t *tp, int peer, const tp_header_t *hdr,
                              const uint8_t *inline_part, size_t inline_length, void *data,
                              size_t length, int rndv);

/* worker.c: whether UCX may open tcp interfaces under the transport list
 * @tls (NULL or empty: UCX's default, all of them); a tcp setting given
 * when it does not would draw UCX's warning about a setting nothing used. */
int tp_tls_may_use_tcp(const char *tls);

/* batch.c: small replies posted by handlers leave together at the end of the
 * handler run, one message per peer. */
#define TP_BATCH_ITEM_MAX 2048u /* larger replies go alone (two must fit a batch) */
#define TP_BATCH_BYTES    8192u /* one batch at most */
/* Over TCP, where each message is a system call, up to 8 KiB replies in
 * batches of 32 KiB (eager there, EMBER_TCP_EAGER). */
#define TP_BATCH_ITEM_MAX_TCP 8192u
#define TP_BATCH_BYTES_TCP    32768u
#define TP_BATCH_BYTES_MAX    TP_BATCH_BYTES_TCP /* what a receiver accepts */
#define TP_BATCH_HOLD_S       10e-6              /* held no longer, whatever the handlers do */
/* Whether @peer takes TCP's larger batches: over tcp, and with batches
 * that size still eager (a rendezvous batch could land after a later
 * message). */
static inline int tp_peer_batch_tcp(const tp_peer_t *peer)
{
    return peer->lanes_known && peer->lane == TP_LANE_TCP &&
           peer->eager_reply_max >= TP_BATCH_BYTES_TCP;
}
/* The largest reply held for @peer's batch, and the largest batch. */
static inline size_t tp_batch_item_max(const tp_peer_t *peer)
{
    return tp_peer_batch_tcp(peer) ? TP_BATCH_ITEM_MAX_TCP : TP_BATCH_ITEM_MAX;
}
static inline size_t tp_batch_bytes(const tp_peer_t *peer)
{
    return tp_peer_batch_tcp(peer) ? TP_BATCH_BYTES_TCP : TP_BATCH_BYTES;
}
/* Hold @send (a reply, call or one-way send of at most tp_batch_item_max
 * bytes) for its peer's batch; replies and requests never share one. */
void tp_send_defer(ember_tp_t *tp, tp_send_t *send);
/* Whether @send (a call or one-way send, header set) may wait for a batch. */
int tp_request_batchable(ember_tp_t *tp, const tp_send_t *send);
/* Send what @rank holds: alone if one, else as one batch. */
void tp_batch_flush(ember_tp_t *tp, int rank);
void tp_batch_flush_all(ember_tp_t *tp);
/* A received batch's own header (no inline part, no flags, at most
 * TP_BATCH_BYTES_MAX of items), as tp_header_parse. */
int tp_batch_header_parse(const void *header, size_t header_length, size_t length,
                          size_t max_message, tp_header_t *out);
/* One item of a received batch: its header, checked, and its hdr->length
 * payload bytes (inside the batch, borrowed for the call). */
typedef void (*tp_batch_item_cb)(void *arg, const tp_header_t *hdr, uint8_t *payload);
/* Hand the items of a batch's @length bytes (@calls: a call batch, else
 * replies) to @cb in order.  1 when every byte was a whole item, padding
 * included; 0 at the first malformed one (*bad_offset_p: where it starts,
 * inside the batch), the items before it handed on, it not.  Pure: the
 * receive callbacks and the fuzzer use it. */
int tp_batch_walk(uint8_t *data, size_t length, int calls, tp_batch_item_cb cb, void *arg,
                  size_t *bad_offset_p);
ucs_status_t tp_am_reply_batch_cb(void *arg, const void *header, size_t header_length, void *data,
                                  size_t length, const ucp_am_recv_param_t *param);
ucs_status_t tp_am_call_batch_cb(void *arg, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param);
ucs_status_t tp_am_hello_cb(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param);
ucs_status_t tp_am_challenge_cb(void *arg, const void *header, size_t header_length, void *data,
                                size_t length, const ucp_am_recv_param_t *param);
ucs_status_t tp_am_confirm_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);
ucs_status_t tp_am_accept_cb(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param);
void tp_send_acks(ember_tp_t *tp);
void tp_send_free(tp_send_t *send);
/*
 * Tests of hostile input only: send any AM to @rank as is, on our
 * authenticated endpoint or (@authenticated == 0) on a fresh one that never
 * said HELLO.  Blocks until sent.
 */
ember_status_t tp_debug_send_raw(ember_tp_t *tp, int rank, unsigned am_id, const void *header,
                                 size_t header_length, const void *data, size_t length,
                                 int authenticated);
/* Tests of a compromised store only: from now on believe @rank's worker
 * address is @address (as if the store had said so), before connecting. */
ember_status_t tp_debug_set_peer_address(ember_tp_t *tp, int rank, const void *address,
                                         size_t length);

/* rpc.c */
ucs_status_t tp_am_request_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param);
ucs_status_t tp_am_reply_cb(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param);
/* A request of a call batch (@hdr checked, no inline part): its payload
 * copied, queued for its handler.  EMBER_ERR_NO_MEMORY drops it. */
ember_status_t tp_request_deliver_copy(ember_tp_t *tp, int peer, const tp_header_t *hdr,
                                       const void *data, size_t length);
void tp_run_handlers(ember_tp_t *tp);
void tp_check_deadlines(ember_tp_t *tp, double now);
void tp_fail_peer_futures(ember_tp_t *tp, int rank, ember_status_t status);
ember_status_t tp_future_alloc(ember_tp_t *tp, tp_future_kind_t kind, int peer, double timeout_s,
                               ember_future_t **future_p);
void tp_future_complete(ember_future_t *future, ember_status_t status);
void tp_future_maybe_free(ember_future_t *future);
void tp_futures_cancel_all(ember_tp_t *tp, ember_status_t status);

/* bootstrap.c */
ember_status_t tp_bootstrap_join(ember_tp_t *tp, const ember_tp_params_t *params);
void tp_bootstrap_leave(ember_tp_t *tp);
/* The barrier of a graceful shutdown: bounded, failure is not fatal. */
ember_status_t tp_bootstrap_final_barrier(ember_tp_t *tp, double timeout_s);

#endif
