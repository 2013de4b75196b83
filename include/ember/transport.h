/*
 * ember: the transport.
 *
 * One ember_tp_t per process: it joins the job through the rendezvous store
 * (tcp://HOST:PORT, or the Slurm environment), owns one UCX worker, and gives
 * RPC over UCX active messages plus one-sided RMA.
 *
 * Threading: single-threaded.  Progress is driven by whoever waits
 * (ember_future_wait, ember_tp_wait); request handlers run from there, never
 * from inside a UCX callback, so a handler may send and may reply later.
 * A handler must not block.
 *
 * Trust model: built for a trusted cluster network.  A job secret proves that
 * a connecting process belongs to the job (HMAC-SHA256 handshake before any
 * handler runs); payloads are not encrypted.  Every header, count and length
 * from the wire is checked before use.
 *
 * Errors: a failing call logs one line naming the peer and the op.  UCX's
 * statuses are translated at the boundary (the "transport's" errors other
 * headers name): ERR_NO_MEMORY, ERR_INVALID_PARAM, ERR_TIMED_OUT,
 * ERR_PEER_LOST (unreachable, rejected), ERR_CANCELED, ERR_MSG_TOO_LONG,
 * ERR_UNSUPPORTED, else ERR_TRANSPORT.  The getters (ranks, names, a
 * request's fields) never block and cannot fail.
 */
#ifndef EMBER_TRANSPORT_H
#define EMBER_TRANSPORT_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_tp ember_tp_t;
typedef struct ember_future ember_future_t;
typedef struct ember_rpc_req ember_rpc_req_t;
typedef struct ember_mem ember_mem_t;
typedef struct ember_rkey ember_rkey_t;

/** Where a buffer lives; every buffer handed to the transport says so. */
typedef enum {
    EMBER_MEM_HOST = 0,
    EMBER_MEM_CUDA = 1
} ember_mem_type_t;

/** One piece of a multi-part payload (borrowed until the call completes). */
typedef struct {
    const void *buffer;
    size_t length;
} ember_iov_t;

/** How to join the job.  Zeroed fields take their EMBER_* config defaults. */
typedef struct {
    int rank;              /* -1: from EMBER_RANK / SLURM_PROCID */
    int world_size;        /* -1: from EMBER_WORLD_SIZE / SLURM_NTASKS */
    const char *name;      /* worker name (NULL: EMBER_NAME or "rank<N>") */
    const char *init_url;  /* NULL: EMBER_INIT (or the Slurm head node) */
    const uint8_t *secret; /* NULL: EMBER_SECRET_FILE / EMBER_SECRET */
    size_t secret_length;
} ember_tp_params_t;

/** Initialise params to "everything from the environment".  Any thread;
 * never blocks. */
void ember_tp_params_init(ember_tp_params_t *params);

/**
 * Join the job: start or reach the rendezvous store, create the UCX worker,
 * publish its address and name, and wait until every rank has done so.
 * Blocks up to EMBER_CONNECT_TIMEOUT.  @params is borrowed for the call;
 * *@tp_p the caller's (ember_tp_destroy).  Errors: ERR_INVALID_PARAM (no
 * rank or world size, a bad EMBER_* value), ERR_AUTH (no secret, or a
 * handshake refused), ERR_IO (the secret file), ERR_TIMED_OUT (the store,
 * or a rank that did not come: named), ERR_EXISTS (two ranks of one name:
 * both named), ERR_BAD_MESSAGE (a malformed answer of the store),
 * ERR_NO_MEMORY, the transport's; nothing is left behind.
 */
ember_status_t ember_tp_create(const ember_tp_params_t *params, ember_tp_t **tp_p);

/**
 * Leave the job gracefully: waits (bounded by EMBER_SHUTDOWN_TIMEOUT) for
 * this process's in-flight calls and sends, then a barrier with every live
 * rank, then closes endpoints.  Pending calls still open fail with
 * ERR_SHUTDOWN.  Blocks (bounded); cannot fail; frees @tp (registrations
 * and rkeys must be released first).  NULL: nothing.
 */
void ember_tp_destroy(ember_tp_t *tp);

int ember_tp_rank(const ember_tp_t *tp);
int ember_tp_world_size(const ember_tp_t *tp);
/** Name of @rank ("master", "ps0", ...); borrowed from the transport
 * (valid until it is destroyed). */
const char *ember_tp_peer_name(const ember_tp_t *tp, int rank);
/**
 * Say that this process ends with the job failed: ember_tp_destroy() then
 * meets nobody (no final barrier: a hung rank would hold it up to
 * EMBER_SHUTDOWN_TIMEOUT) and rank 0's store lingers only briefly.
 */
void ember_tp_set_failed(ember_tp_t *tp);

/** Rank of the worker called @name, or -1. */
int ember_tp_peer_by_name(const ember_tp_t *tp, const char *name);
/** Non-zero when @rank was lost (error on its endpoint). */
int ember_tp_peer_lost(const ember_tp_t *tp, int rank);
/** Why @rank was lost ("its process 4242 on node1 has exited"), or "". */
const char *ember_tp_peer_reason(const ember_tp_t *tp, int rank);
/**
 * Connect to @rank now (its handshake), so that its loss is noticed even
 * while nothing is sent to it: a process waiting only for @rank's word
 * (a parameter server for its master) learns that it died.  Blocks until
 * connected, or the peer is lost or fails the handshake (EMBER_RPC_TIMEOUT).
 * Errors: ERR_INVALID_PARAM (@rank out of range or this one), ERR_TIMED_OUT,
 * ERR_PEER_LOST, ERR_AUTH, the transport's.
 */
ember_status_t ember_tp_watch(ember_tp_t *tp, int rank);

/** Put a value in the job's rendezvous store (small blobs, start-up): @key
 * and @value borrowed for the call (copied).  Blocks for the store's
 * answer.  Errors: ERR_INVALID_PARAM (a key or value the store refuses),
 * ERR_TIMED_OUT, ERR_IO, ERR_AUTH, ERR_NO_MEMORY. */
ember_status_t ember_tp_store_set(ember_tp_t *tp, const char *key, const void *value,
                                  size_t length);
/** Blocks until @key exists (or EMBER_CONNECT_TIMEOUT: ERR_TIMED_OUT);
 * *value_p: malloc'd, the caller frees; errors otherwise as store_set. */
ember_status_t ember_tp_store_get(ember_tp_t *tp, const char *key, void **value_p,
                                  size_t *length_p);
/**
 * All ranks meet.  Fails, logging who did not arrive, at the connect
 * timeout (ERR_TIMED_OUT), or at once when a rank is known lost
 * (ERR_PEER_LOST, naming it).  A failed barrier ends what the job was
 * doing: callers stop.
 */
ember_status_t ember_tp_barrier(ember_tp_t *tp, const char *name);

/* ---- RPC ---------------------------------------------------------------- */

/** Op ids 0..63 are reserved by the transport itself. */
#define EMBER_RPC_OP_USER_BASE 64
#define EMBER_RPC_OP_MAX       1024

/**
 * Request handler.  Runs from the progress loop.  It must eventually answer
 * @req with ember_rpc_reply() exactly once, now or later (deferred reply);
 * until then @req and its payload stay valid.
 */
typedef void (*ember_rpc_handler_cb)(ember_rpc_req_t *req, void *arg);

/** Register the handler of op id @op (EMBER_RPC_OP_USER_BASE..MAX-1); a
 * NULL @handler unregisters it (requests for @op then fail, "no handler").
 * @arg borrowed while registered.  Never blocks.  Errors:
 * ERR_INVALID_PARAM (@op outside the range). */
ember_status_t ember_rpc_register(ember_tp_t *tp, uint16_t op, ember_rpc_handler_cb handler,
                                  void *arg);

/**
 * Where a large (rendezvous) request from @peer should land, so a handler
 * can receive straight into its final buffer.  The message is @length bytes;
 * its first @head_length bytes (@head: a first iov part of at most
 * EMBER_RPC_INLINE_MAX bytes rides with the message header, else 0) are
 * already here.  Return a buffer for the @length - @head_length bytes after
 * the head that stays valid until @release is called for it (after the
 * reply), or NULL to let the transport pick one.  For a request placed this
 * way ember_rpc_req_data() is that buffer and ember_rpc_req_head() the head;
 * otherwise ember_rpc_req_data() is the whole message, contiguous.
 */
typedef void *(*ember_rpc_alloc_cb)(void *arg, int peer, const void *head, size_t head_length,
                                    size_t length);
typedef void (*ember_rpc_release_cb)(void *arg, void *buffer);

/** Largest first iov part that travels with the message header. */
#define EMBER_RPC_INLINE_MAX 128

/** Set @op's payload placement (the op's handler must be registered;
 * @arg borrowed while it is).  Never blocks.  Errors: ERR_INVALID_PARAM
 * (@op outside the range or without a handler). */
ember_status_t ember_rpc_register_alloc(ember_tp_t *tp, uint16_t op, ember_rpc_alloc_cb alloc,
                                        ember_rpc_release_cb release, void *arg);

/** The request's payload (borrowed until the reply; see ember_rpc_alloc_cb). */
const void *ember_rpc_req_data(const ember_rpc_req_t *req, size_t *length_p);
/** The head of a request its op's ember_rpc_alloc_cb placed, else NULL (0). */
const void *ember_rpc_req_head(const ember_rpc_req_t *req, size_t *length_p);
int ember_rpc_req_peer(const ember_rpc_req_t *req);
uint16_t ember_rpc_req_op(const ember_rpc_req_t *req);

/**
 * Answer a request.  @status travels to the caller (a negative one fails
 * the caller's future with that status; the payload is then an error text).
 * The payload is copied, so @iov may be reused as soon as this returns.
 * Frees @req, whatever the status; never blocks.  Errors: ERR_MSG_TOO_LONG
 * (over EMBER_MAX_MSG_SIZE: the caller gets that status instead),
 * ERR_NO_MEMORY, the transport's (a lost caller: the reply is dropped).
 * Replies of up to 2 KiB posted by a handler leave when the
 * handler run ends (at most ~10 us later), packed with the run's other
 * small replies to the same peer into one message; anything else sent to
 * that peer first takes them along, so the peer sees the order they were
 * posted in.
 */
ember_status_t ember_rpc_reply(ember_rpc_req_t *req, ember_status_t status, const ember_iov_t *iov,
                               size_t iovcnt);

/** Called once a zero-copy reply's buffers may be reused (or the send failed). */
typedef void (*ember_rpc_done_cb)(void *arg, ember_status_t status);

/**
 * Zero-copy reply: @iov is borrowed until @done_cb runs, exactly once, from
 * the progress loop or before this returns (also when it fails).  Frees
 * @req.  Never blocks.  Errors: as ember_rpc_reply.
 */
ember_status_t ember_rpc_reply_zcopy(ember_rpc_req_t *req, ember_status_t status,
                                     const ember_iov_t *iov, size_t iovcnt,
                                     ember_rpc_done_cb done_cb, void *done_arg);

/** Reply with an error @status (< 0; another is sent as ERR_REMOTE) and a
 * printf-formatted message for the caller (copied).  As ember_rpc_reply. */
ember_status_t ember_rpc_reply_error(ember_rpc_req_t *req, ember_status_t status, const char *fmt,
                                     ...) __attribute__((format(printf, 3, 4)));

/**
 * A call's or a send's options (UCX's ucp_request_param_t).  A NULL param,
 * or one zeroed, is the common case: host buffers, EMBER_RPC_TIMEOUT.
 *
 * GPU memory: a GPU payload is one buffer, or a host head of at most
 * EMBER_RPC_INLINE_MAX bytes and the GPU bulk (the head rides in the
 * message header); UCX reads it from the GPU (it must support CUDA memory:
 * ucp_context memory types).  A GPU reply buffer makes the replier answer by
 * rendezvous with the payload whole, never batched, so UCX writes it into
 * GPU memory and no host copy touches it; a reply that comes otherwise fails
 * the call (ERR_BAD_MESSAGE).  An error reply's text still comes to the host.
 * Another layout is ERR_INVALID_PARAM.
 */
typedef struct {
    double timeout_s;             /* <= 0: EMBER_RPC_TIMEOUT (calls only) */
    ember_mem_type_t payload_mem; /* the request's bulk: its only or last iov part */
    ember_mem_type_t reply_mem;   /* @resp_buffer's (calls only) */
    int reply_rndv;               /* the reply by rendezvous, whole, straight
                                   * into @resp_buffer (always when reply_mem
                                   * is not host memory; calls only) */
    /* Registrations (ember_mem_register, of payload_mem's and reply_mem's
     * type) covering the request's bulk and @resp_buffer; NULL: none.  UCX
     * takes the buffer as registered (UCP_OP_ATTR_FIELD_MEMH) rather than
     * registering it and detecting its memory type per message: a buffer
     * reused every step is registered once.  A bulk with a registration
     * must go contiguous (one buffer, or a head UCX's header carries). */
    const ember_mem_t *payload_reg;
    const ember_mem_t *reply_reg; /* calls only */
} ember_rpc_param_t;

/**
 * Call @op on @peer.  @iov (borrowed until the future completes) is the
 * request payload.  The response lands in @resp_buffer (capacity
 * @resp_capacity, borrowed until completion; large responses are received
 * straight into it) or, when @resp_buffer is NULL, in a buffer the future
 * owns.  @param (borrowed for the call only; NULL: the defaults) gives the
 * timeout and where the buffers live.  Never blocks.  *@future_p the
 * caller's (ember_future_release, also after it failed).  Errors (nothing
 * is sent): ERR_INVALID_PARAM (@peer or @op out of range, a payload layout
 * the memory types refuse), ERR_MSG_TOO_LONG (over EMBER_MAX_MSG_SIZE),
 * ERR_NO_MEMORY.  What happens later is the future's status: the replier's
 * error status, ERR_TIMED_OUT (the deadline), ERR_PEER_LOST (@peer lost),
 * ERR_MSG_TOO_LONG (a reply over @resp_capacity), ERR_BAD_MESSAGE (a reply
 * that did not come as @param asked), ERR_SHUTDOWN (the transport ended).
 */
ember_status_t ember_rpc_call_async(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov,
                                    size_t iovcnt, void *resp_buffer, size_t resp_capacity,
                                    const ember_rpc_param_t *param, ember_future_t **future_p);

/**
 * Batching small requests (libfabric's FI_MORE): between
 * ember_rpc_batch_begin and ember_rpc_batch_end, calls and one-way sends of
 * host memory of at most 2 KiB (8 KiB to a peer over tcp) to a peer already
 * connected are held, and leave together, one message per peer, when this
 * process next waits or progresses (any ember_future_wait/_test,
 * ember_tp_wait, ember_tp_progress), when the peer's batch is full, or at the
 * outermost ember_rpc_batch_end.  Order per peer is kept.  For a caller
 * about to post several requests to the same peers: a client refilling its
 * window of lookups, a trainer's lookups of several tables on one PS.
 * Nests.  The batch is one message: its receiver's handlers run in order.
 */
void ember_rpc_batch_begin(ember_tp_t *tp);
void ember_rpc_batch_end(ember_tp_t *tp);

/**
 * One-way request: @op's handler runs on @peer and nothing comes back (its
 * reply, if it makes one, is dropped).  @iov is borrowed until @done_cb
 * runs, from the progress loop (possibly before this returns), with OK once
 * the message left, or the error that lost it (a lost peer).  Of @param
 * (NULL: host memory) a send reads payload_mem and payload_reg only.  Never
 * blocks.  Errors (@done_cb then does not run): as ember_rpc_call_async's.
 */
ember_status_t ember_rpc_send(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov,
                              size_t iovcnt, const ember_rpc_param_t *param,
                              ember_rpc_done_cb done_cb, void *done_arg);

/** Non-zero when @req came from ember_rpc_send (no one waits for a reply). */
int ember_rpc_req_oneway(const ember_rpc_req_t *req);

/** Blocking call: returns the status (ember_rpc_call_async's, then the
 * future's) and the response length (@resp_length_p may be NULL); the
 * reply lands in @resp_buffer. */
ember_status_t ember_rpc_call(ember_tp_t *tp, int peer, uint16_t op, const ember_iov_t *iov,
                              size_t iovcnt, void *resp_buffer, size_t resp_capacity,
                              size_t *resp_length_p);

/** INPROGRESS while pending; then the call's final status (see
 * ember_rpc_call_async).  Progresses once; never blocks. */
ember_status_t ember_future_test(ember_future_t *future);
/** Progress (spin, then block on the worker fd) until the future is done
 * (bounded by the call's deadline); its final status. */
ember_status_t ember_future_wait(ember_future_t *future);
/** Wait for all of @futures (blocks); returns the first error, if any. */
ember_status_t ember_future_wait_all(ember_future_t **futures, size_t count);
/** Response payload (or error text) and its length; owned by the future
 * (valid until it is released).  Never blocks. */
const void *ember_future_data(const ember_future_t *future, size_t *length_p);
/** Release a future; a pending one is abandoned (its reply is dropped; a
 * rendezvous reply still landing in the caller's buffer is waited for
 * first).  NULL: nothing. */
void ember_future_release(ember_future_t *future);

/**
 * Progress the worker and run handlers; block up to @timeout_s (spinning for
 * EMBER_SPIN_US first) until something happened.  Returns OK (a peer's
 * failure shows in its calls and ember_tp_peer_lost).
 */
ember_status_t ember_tp_wait(ember_tp_t *tp, double timeout_s);
/** Progress without blocking; returns the number of events handled. */
unsigned ember_tp_progress(ember_tp_t *tp);
/** How long a waiter polls before sleeping, in microseconds: EMBER_SPIN_US,
 *  else 1000 where this host has a CPU for each of its ranks, else 20. */
double ember_tp_spin_us(const ember_tp_t *tp);

/**
 * Non-zero when every transport this process may use (EMBER_TLS, else
 * UCX_TLS) reads a rendezvous payload itself: shared memory with CMA (sm),
 * RDMA (rc, dc).  A payload an ember_rpc_alloc_cb placed in a caller's
 * buffer then lands within this process's own progress, whatever its sender
 * does meanwhile; over tcp (and with UCX's default list, which includes it)
 * the sender pushes the payload, so a stalled sender could still write into
 * the buffer after its receiver gave up.
 */
int ember_tp_pull_rendezvous(const ember_tp_t *tp);

/*
 * Whether active messages to @rank travel over TCP: 1 yes, 0 no, -1 not
 * known (no connection to it yet, or @rank is ourselves or out of range).
 * Read from UCX's lanes of our endpoint once it is connected.
 */
int ember_tp_peer_over_tcp(ember_tp_t *tp, int rank);

/**
 * This process's UCX worker address, in clear (the store keeps it sealed
 * with the job secret): for a tool that inspects a rank from outside, such
 * as the security tests' outsider, which shows what a process that learnt
 * it, without the secret, can and cannot do.  *@address_p malloc'd (the
 * caller frees), *@length_p its bytes.  The job's thread.  Never blocks.
 * Errors: ERR_NO_MEMORY, the transport's.
 */
ember_status_t ember_tp_worker_address(ember_tp_t *tp, void **address_p, size_t *length_p);

/* ---- RMA ---------------------------------------------------------------- */

/* Threading and blocking as above: the registration calls may block while
 * UCX pins the memory; the RMA calls never block (their futures complete). */

/** Register @length bytes at @address (borrowed: it must stay allocated
 * until deregistered) for remote access, or for ember_rpc_param_t's
 * payload_reg/reply_reg; *@mem_p the caller's (ember_mem_deregister, before
 * ember_tp_destroy).  Errors: ERR_NO_MEMORY, the transport's. */
ember_status_t ember_mem_register(ember_tp_t *tp, void *address, size_t length,
                                  ember_mem_type_t type, ember_mem_t **mem_p);
/** NULL @mem: nothing. */
void ember_mem_deregister(ember_tp_t *tp, ember_mem_t *mem);
/** Packed remote key to send to peers; *rkey_p is malloc'd (caller frees).
 * Errors: ERR_NO_MEMORY, the transport's. */
ember_status_t ember_mem_pack(ember_tp_t *tp, ember_mem_t *mem, void **rkey_p, size_t *length_p);
/** Unpack a peer's key (@packed borrowed for the call) for use on the
 * endpoint to @peer, connecting to it first if need be (blocks then);
 * *@rkey_p the caller's (ember_rkey_destroy).  Errors: ERR_INVALID_PARAM,
 * ERR_TIMED_OUT, ERR_PEER_LOST, ERR_NO_MEMORY, the transport's. */
ember_status_t ember_rkey_unpack(ember_tp_t *tp, int peer, const void *packed, size_t length,
                                 ember_rkey_t **rkey_p);
/** NULL: nothing. */
void ember_rkey_destroy(ember_rkey_t *rkey);

/** One-sided read of @length bytes at @remote_address on @peer into @local
 * (borrowed until the future completes); *@future_p the caller's.  The
 * future fails with ERR_PEER_LOST when the read does.  Errors: as
 * ember_rpc_call_async's. */
ember_status_t ember_rma_get(ember_tp_t *tp, int peer, void *local, size_t length,
                             uint64_t remote_address, ember_rkey_t *rkey,
                             ember_future_t **future_p);
/** One-sided write; completes when the data is placed remotely.  As
 * ember_rma_get (@local borrowed until then). */
ember_status_t ember_rma_put(ember_tp_t *tp, int peer, const void *local, size_t length,
                             uint64_t remote_address, ember_rkey_t *rkey,
                             ember_future_t **future_p);

#ifdef __cplusplus
}
#endif
#endif
