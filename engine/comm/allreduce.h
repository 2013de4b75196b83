/*
 * ember engine: host allreduce over the transport, for dense data parallelism
 * (the trainers' replicated layers), when the dense model is not on GPUs.
 *
 * A communicator is a fixed, ordered set of transport ranks.  Every member
 * starts the same sequence of reductions with the same counts (as NCCL
 * requires); each reduction gets the next sequence number, so several may be
 * in flight at once (one per gradient bucket) and their messages still match.
 *
 * Algorithms (all deterministic: every member ends with the same bits, and
 * the same inputs give the same bits run after run):
 *   - small (count * 4 <= ember_comm_allreduce_small_bytes(): 16 KiB, or 256 KiB
 *     for two members over TCP): every member sends its whole vector to
 *     every other member, one-way (one message latency); each sums the n
 *     vectors in member order, the same additions everywhere.
 *   - ring: reduce-scatter then all-gather, 2(n-1) steps over n chunks, each
 *     chunk cut into segments that are forwarded as soon as they are reduced
 *     (pipelined).  The chunk's owner finishes (and averages) it; the
 *     all-gather hands out the owner's bits.
 *   - recursive halving and doubling (Rabenseifner), for 4, 8, 16... members
 *     unless EMBER_ALLREDUCE_ALGO=ring: 2 log2(n) steps of pairwise
 *     exchanges, the ring's bytes in fewer, larger steps; a step's segments
 *     go once the step before is complete (a segment that comes early waits,
 *     so the additions keep their order).
 *
 * Messages that arrive before this member started their reduction are held
 * (their RPC is answered only when consumed: natural backpressure).  Every
 * field of an incoming message is checked; a malformed one is answered with
 * ERR_BAD_MESSAGE.  A lost or silent peer fails the reduction with
 * ERR_PEER_LOST or ERR_TIMED_OUT and an error text that names it; the
 * communicator is then broken (every member is told), like NCCL after an
 * abort: reductions still in flight fail (a small one another member has
 * already finished among them: its vectors travel one-way) and later ones
 * fail at once.
 *
 * Threading: single-threaded, like the transport.  Progress happens in the
 * transport's progress loop (handlers) and in ember_comm_allreduce_test/wait.
 */
#ifndef EMBER_ENGINE_ALLREDUCE_H
#define EMBER_ENGINE_ALLREDUCE_H

#include <ember/status.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Vectors up to this many bytes take the one-step all-to-all path. */
#define EMBER_ALLREDUCE_SMALL_BYTES (16u * 1024u)
/* The same for a pair of members over TCP: there each ring step costs a
 * message latency, and a pair sends the ring's bytes either way, so the
 * one-step path stays ahead further; over shared memory it does not
 * (measured with bench/ab.sh; docs/PERFORMANCE.md has the allreduce's
 * current figures over both). */
#define EMBER_ALLREDUCE_SMALL_PAIR_TCP_BYTES (256u * 1024u)
/* Ring segments: at most this many bytes per message. */
#define EMBER_ALLREDUCE_SEGMENT_BYTES (524288u)
/* Number of RPC op ids a communicator uses from its op_base. */
#define EMBER_ALLREDUCE_OPS 4

typedef struct ember_comm_allreduce ember_comm_allreduce_t;
typedef struct ember_comm_allreduce_req ember_comm_allreduce_req_t;

/*
 * The wire header of a data message (op_base + 0), followed by @nfloats
 * floats.  Exposed for tests of hostile input; nothing else should build it.
 */
#define EMBER_ALLREDUCE_MAGIC 0x52414d45u /* "EMAR" */
enum {
    EMBER_ALLREDUCE_KIND_SMALL = 1,
    EMBER_ALLREDUCE_KIND_RING = 2
};
typedef struct {
    uint32_t magic;
    uint16_t kind;    /* EMBER_ALLREDUCE_KIND_* */
    uint16_t step;    /* ring: 0 .. 2(n-1)-1; small: 0 */
    uint64_t seq;     /* reduction sequence number */
    uint64_t count;   /* floats in the whole reduction */
    uint64_t offset;  /* ring: first float of this segment within its chunk */
    uint64_t nfloats; /* floats that follow */
} ember_comm_allreduce_wire_t;

/**
 * Create a communicator over @nranks transport ranks @ranks (borrowed; copied),
 * this process among them.  The order of @ranks is the ring order and the
 * summation order; every member must pass the same list and @op_base.
 * Registers RPC handlers for op ids @op_base .. @op_base+3, then meets every
 * other member (a handshake that also checks the member lists agree).
 * Blocks until every member has created it (up to EMBER_CONNECT_TIMEOUT).
 * @tp is borrowed and must outlive the communicator.
 * Errors: ERR_INVALID_PARAM (bad ranks, op ids, this rank not a member),
 * ERR_NO_MEMORY, ERR_TIMED_OUT (a member never came), or the transport's.
 */
ember_status_t ember_comm_allreduce_create(ember_tp_t *tp, const int *ranks, int nranks,
                                           uint16_t op_base, ember_comm_allreduce_t **ar_p);

/**
 * Destroy the communicator.  Reductions should have been waited for; any
 * still in flight are canceled and their handles become invalid.  Held
 * messages from peers are answered with ERR_SHUTDOWN; waits (bounded, about
 * 1 s) for this member's own outstanding messages.  Unregisters the handlers.
 * Op ids may be reused by a new communicator once every member destroyed
 * this one.
 */
void ember_comm_allreduce_destroy(ember_comm_allreduce_t *ar);

/**
 * The largest vector, in bytes, this communicator reduces by the one-step
 * all-to-all path: EMBER_ALLREDUCE_SMALL_BYTES, or
 * EMBER_ALLREDUCE_SMALL_PAIR_TCP_BYTES for two members whose messages
 * travel over TCP.  Both members of a pair decide it from their own
 * endpoint; where they disagree (transports set differently on each), the
 * first reduction in between fails with ERR_BAD_MESSAGE naming the member.
 */
size_t ember_comm_allreduce_small_bytes(const ember_comm_allreduce_t *ar);

/*
 * One reduction's arguments (as UCX's ucp_request_param_t: one call, its
 * options in a struct).  A field left zero is the default.
 */
typedef struct {
    const float *send; /* the input; NULL or == recv: in place */
    float *recv;       /* the result (and the input in place) */
    size_t count;      /* floats */
    int average;       /* nonzero: the sum divided by the member count */
} ember_comm_allreduce_args_t;

/**
 * Start the sum (or average) of every member's @args->send into
 * @args->recv, @args->count floats.  Out of place, send is only read and
 * is never copied to recv first: the reduce-scatter adds it as it goes;
 * the two must not overlap (ERR_INVALID_PARAM).  In place, recv is read
 * and written throughout.  Both are borrowed until the request completes;
 * @args itself only during the call.  Non-blocking: the reduction
 * progresses whenever the transport progresses.  *req_p is owned by the
 * caller until ember_comm_allreduce_wait (which frees it).
 * Errors: ERR_INVALID_PARAM, ERR_NO_MEMORY, or the error that broke the
 * communicator (ERR_PEER_LOST, ERR_TIMED_OUT, ...), then *req_p is untouched.
 */
ember_status_t ember_comm_allreduce_start(ember_comm_allreduce_t *ar,
                                          const ember_comm_allreduce_args_t *args,
                                          ember_comm_allreduce_req_t **req_p);

/**
 * Progress once without blocking; INPROGRESS while running, then the final
 * status (the request stays valid until ember_comm_allreduce_wait).
 */
ember_status_t ember_comm_allreduce_test(ember_comm_allreduce_req_t *req);

/**
 * Block (progressing the transport, sleeping when idle) until @req
 * completes, then free it.  Returns OK, or ERR_PEER_LOST / ERR_TIMED_OUT /
 * ERR_BAD_MESSAGE / ... (see ember_comm_allreduce_error).  On error the contents
 * of recv are unspecified, and neither buffer is accessed once this returns.
 */
ember_status_t ember_comm_allreduce_wait(ember_comm_allreduce_req_t *req);

/** Blocking start + wait. */
ember_status_t ember_comm_allreduce(ember_comm_allreduce_t *ar,
                                    const ember_comm_allreduce_args_t *args);

/**
 * Text of the error that broke the communicator (names the peer), or "" while
 * it is healthy.  Borrowed from @ar.
 */
const char *ember_comm_allreduce_error(const ember_comm_allreduce_t *ar);

#ifdef __cplusplus
}
#endif
#endif
