/*
 * ember engine: host allreduce over transport RPC (small all-to-all, or ring
 * reduce-scatter + all-gather).  See allreduce.h for the contract.
 *
 * Data flows as RPC requests (push): a member sends a segment to the member
 * that needs it, which consumes it (adds or copies it into its vector) from
 * the request handler and only then answers.  So a reduction advances from
 * the transport's progress loop, a sender's buffer stays borrowed exactly
 * until it was consumed, and a receiver that has not started a reduction yet
 * holds the request: the sender's future stays open (backpressure) and
 * nothing is dropped or copied.  Small vectors are the exception: they are
 * copied once and sent one-way (one message latency instead of a round
 * trip), and a receiver that must refuse one breaks the communicator itself.
 *
 * Ring, member index r of n, chunk c = [c*q + min(c, rem), +q + (c < rem)):
 *   reduce-scatter step k (0..n-2):  send chunk r-k,   receive r-k-1 (add)
 *   all-gather step j (k = n-1+j):   send chunk r+1-j, receive r-j (copy)
 * Out of place, step 0 sends from the input and each reduce-scatter receive
 * writes input + payload into the result, so the input is never copied.
 * The chunk received at step k is the one sent at step k+1, so every segment
 * is forwarded as soon as it is consumed (segment-level pipelining).  Member
 * r owns chunk r+1 after reduce-scatter; it alone averages it, and the
 * all-gather spreads its bits, so every member ends bit-identical.
 *
 * Objects (requests, their send tables, hold tables) come from a pool that
 * only grows to the peak in flight: the hot path does not allocate here.
 */
#include "engine/comm/allreduce.h"

#include "common/copy.h"
#include "common/reserve.h"

#include <ember/config.h>
#include <ember/log.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    OP_DATA = 0,
    OP_HELLO = 1,
    OP_ABORT = 2
}; /* op_base + 3: reserved */

/* A receive segment's state (r->seen); PLACED: landing, or landed, in the
 * result (place_segment) and not consumed yet. */
enum {
    SEG_NONE = 0,
    SEG_DONE,
    SEG_PARKED,
    SEG_PLACED,
    SEG_PLACED_PARKED
};

#define MAX_AHEAD    4096  /* sequence numbers a peer may run ahead of us */
#define MAX_HELD     65536 /* early messages held at once */
#define FAIL_GRACE_S 1.0   /* after a failure, wait this long for our sends */
#define WAIT_SLICE_S 0.05

/* A ring segment goes as a call (future: answered once consumed); a small
 * vector goes one-way (oneway_status: INPROGRESS until it left). */
typedef struct {
    ember_future_t *future;
    ember_comm_allreduce_req_t *owner;
    ember_status_t oneway_status;
    ember_comm_allreduce_wire_t hdr; /* borrowed by the send until it completes */
} ar_send_t;

typedef enum {
    AR_KIND_NONE = 0,
    AR_KIND_SMALL,
    AR_KIND_RING
} ar_kind_t;

/* op_base + 2: the communicator is broken (who was lost, and why). */
typedef struct {
    int32_t status;
    int32_t lost_rank; /* -1: nobody lost, a member failed otherwise */
    uint64_t seq;
    char text[200];
} ar_abort_msg_t;

struct ember_comm_allreduce_req {
    ember_comm_allreduce_t *ar;
    struct ember_comm_allreduce_req *prev, *next; /* ar->live, or the free list */
    uint64_t seq;
    const float *input; /* == data in place */
    float *data;        /* the result */
    size_t count;
    int average;
    ar_kind_t kind;
    ember_status_t status; /* INPROGRESS until final */
    int released;          /* the caller waited: recycle once sends are done */
    int receiving;         /* in ar->active */
    double last_progress;
    double failed_at;

    /* sends (ring segments, or the small vector to each member) */
    ar_send_t *sends;
    size_t nsends, sends_capacity, first_pending, send_expected;

    /* ring */
    size_t *step_base;        /* [nsteps+1]: first receive segment of each step */
    size_t *step_got;         /* [nsteps]: segments received per step (halving) */
    ember_rpc_req_t **parked; /* halving: messages for a step not open yet */
    size_t nparked, parked_capacity;
    size_t landing; /* all-gather segments being received into data in place */
    uint8_t *seen;  /* per receive segment: a SEG_* state */
    size_t seen_capacity, recv_expected, recv_done;

    /* small: the vectors held until all arrived, and our own copy */
    ember_rpc_req_t **held;    /* [n] */
    const unsigned char **src; /* [n] */
    int small_got;
    float *small_buf; /* ar->small_bytes */
};

struct ember_comm_allreduce {
    ember_tp_t *tp;
    int n, me, left, right; /* member indices */
    int halving_steps;      /* log2(n) when n is a power of two >= 4, else 0 */
    int *ranks;             /* [n] transport ranks */
    int *member_of;         /* [world]: member index or -1 */
    int world;
    uint16_t op_base;
    uint64_t hash;
    size_t seg_floats;
    size_t small_bytes; /* ember_comm_allreduce_small_bytes */
    double stall_s;
    uint64_t next_seq;

    ember_comm_allreduce_req_t **active; /* still expecting messages */
    size_t nactive, active_capacity;
    ember_comm_allreduce_req_t live; /* list head: not in the free list */
    ember_comm_allreduce_req_t *free_list;

    ember_rpc_req_t **early; /* messages for reductions not started yet */
    size_t nearly, early_capacity;

    ember_future_t **aborts;  /* [n]: our "broken" notices */
    ar_abort_msg_t abort_msg; /* borrowed by the abort sends */

    uint8_t ack_sink[8]; /* empty answers land here (no allocation) */
    ember_status_t error;
    char error_text[320];
};

/* Seconds, for stalls, grace periods and deadlines of a second or more:
 * the coarse clock (a tick is a few ms) is fine enough for those and much
 * cheaper to read than the precise one, which a small reduction would
 * otherwise read several times. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *peer_name(const ember_comm_allreduce_t *ar, int member)
{
    return ember_tp_peer_name(ar->tp, ar->ranks[member]);
}

/* ---- chunk geometry ------------------------------------------------------- */

static int mod_n(const ember_comm_allreduce_t *ar, int x)
{
    x %= ar->n;
    return x < 0 ? x + ar->n : x;
}

static void chunk_of(const ember_comm_allreduce_t *ar, size_t count, int c, size_t *base_p,
                     size_t *length_p)
{
    size_t q = count / (size_t)ar->n, rem = count % (size_t)ar->n;
    *base_p = (size_t)c * q + ((size_t)c < rem ? (size_t)c : rem);
    *length_p = q + ((size_t)c < rem ? 1 : 0);
}

static int recv_chunk(const ember_comm_allreduce_t *ar, int step)
{
    return step < ar->n - 1 ? mod_n(ar, ar->me - step - 1)
                            : mod_n(ar, ar->me - (step - (ar->n - 1)));
}

static int send_chunk(const ember_comm_allreduce_t *ar, int step)
{
    return step < ar->n - 1 ? mod_n(ar, ar->me - step)
                            : mod_n(ar, ar->me + 1 - (step - (ar->n - 1)));
}

/*
 * Recursive halving and doubling (Rabenseifner), n = 2^m members: the
 * reduce-scatter's step k (0..m-1) halves the region both partners (me and
 * me ^ n/2^(k+1)) hold; each keeps one half, sends the other and adds what
 * it receives into the half it keeps.  The all-gather replays the splits
 * backwards, exchanging the halves.  2m steps where the ring takes 2(n-1),
 * the same bytes.
 */
static void halving_region(const ember_comm_allreduce_t *ar, size_t count, int splits, size_t *lo_p,
                           size_t *hi_p)
{
    size_t lo = 0, hi = count;
    for (int k = 0; k < splits; k++) {
        size_t mid = lo + (hi - lo) / 2;
        if (ar->me & (ar->n >> (k + 1)))
            lo = mid;
        else
            hi = mid;
    }
    *lo_p = lo;
    *hi_p = hi;
}

/* The split step @step of the halving schedule makes or undoes (k), and the
 * distance to its partner (me ^ distance). */
static int halving_split(const ember_comm_allreduce_t *ar, int step, int *distance_p)
{
    int m = ar->halving_steps;
    int k = step < m ? step : 2 * m - 1 - step;
    *distance_p = ar->n >> (k + 1);
    return k;
}

/* Step @step of the halving schedule: the partner, and the halves of
 * region(k) that are ours and theirs. */
static int halving_step(const ember_comm_allreduce_t *ar, size_t count, int step, size_t *mine_base,
                        size_t *mine_len, size_t *other_base, size_t *other_len)
{
    int d, k = halving_split(ar, step, &d);
    size_t lo, hi;
    halving_region(ar, count, k, &lo, &hi);
    size_t mid = lo + (hi - lo) / 2;
    int upper = (ar->me & d) != 0;
    *mine_base = upper ? mid : lo;
    *mine_len = upper ? hi - mid : mid - lo;
    *other_base = upper ? lo : mid;
    *other_len = upper ? mid - lo : hi - mid;
    return ar->me ^ d;
}

/*
 * What step @step sends (@sending) or receives -- reduce-scatter receives
 * are added, all-gather ones copied -- and to or from which member.
 */
static int step_range(const ember_comm_allreduce_t *ar, size_t count, int step, int sending,
                      size_t *base_p, size_t *length_p)
{
    if (!ar->halving_steps) {
        chunk_of(ar, count, sending ? send_chunk(ar, step) : recv_chunk(ar, step), base_p,
                 length_p);
        return sending ? ar->right : ar->left;
    }
    size_t mb, ml, ob, ol;
    int partner = halving_step(ar, count, step, &mb, &ml, &ob, &ol);
    /* The reduce-scatter keeps (receives into) our half and sends theirs;
     * the all-gather sends ours and receives theirs. */
    int ours = (step < ar->halving_steps) != sending;
    *base_p = ours ? mb : ob;
    *length_p = ours ? ml : ol;
    return partner;
}

/* The member step @step's messages come from (no count needed). */
static int step_from(const ember_comm_allreduce_t *ar, int step)
{
    if (!ar->halving_steps)
        return ar->left;
    int d;
    halving_split(ar, step, &d);
    return ar->me ^ d;
}

/* A chunk is sent in segments; an empty chunk still takes one (empty) one. */
static size_t segments(const ember_comm_allreduce_t *ar, size_t length)
{
    return length ? (length + ar->seg_floats - 1) / ar->seg_floats : 1;
}

static int nsteps(const ember_comm_allreduce_t *ar)
{
    return ar->halving_steps ? 2 * ar->halving_steps : 2 * (ar->n - 1);
}

/* ---- pool ----------------------------------------------------------------- */

static void list_del(ember_comm_allreduce_req_t *r)
{
    r->prev->next = r->next;
    r->next->prev = r->prev;
    r->prev = r->next = r;
}

static void list_push(ember_comm_allreduce_req_t *head, ember_comm_allreduce_req_t *r)
{
    r->prev = head->prev;
    r->next = head;
    head->prev->next = r;
    head->prev = r;
}

static void req_free_memory(ember_comm_allreduce_req_t *r)
{
    free(r->sends);
    free(r->step_base);
    free(r->step_got);
    free(r->parked);
    free(r->seen);
    free(r->held);
    free(r->src);
    free(r->small_buf);
    free(r);
}

static ember_comm_allreduce_req_t *req_get(ember_comm_allreduce_t *ar)
{
    ember_comm_allreduce_req_t *r = ar->free_list;

    if (r) {
        ar->free_list = r->next;
    } else {
        r = calloc(1, sizeof(*r));
        if (!r)
            return NULL;
        r->step_base = calloc((size_t)nsteps(ar) + 1, sizeof(*r->step_base));
        r->step_got = calloc((size_t)nsteps(ar) + 1, sizeof(*r->step_got));
        r->held = calloc((size_t)ar->n, sizeof(*r->held));
        r->src = calloc((size_t)ar->n, sizeof(*r->src));
        r->small_buf = malloc(ar->small_bytes);
        if (!r->step_base || !r->step_got || !r->held || !r->src || !r->small_buf) {
            req_free_memory(r);
            return NULL;
        }
        r->ar = ar;
    }
    r->status = EMBER_INPROGRESS;
    r->released = r->receiving = 0;
    r->nsends = r->first_pending = r->send_expected = 0;
    r->recv_expected = r->recv_done = 0;
    r->small_got = 0;
    r->nparked = 0;
    r->landing = 0;
    r->kind = AR_KIND_NONE;
    list_push(&ar->live, r);
    return r;
}

/* Capacity for everything the handlers will append: they never reallocate. */
static ember_status_t req_reserve(ember_comm_allreduce_req_t *r, size_t sends, size_t seen)
{
    if (!EMBER_RESERVE(r->sends, r->sends_capacity, sends) ||
        !EMBER_RESERVE(r->seen, r->seen_capacity, seen))
        return EMBER_ERR_NO_MEMORY;
    return EMBER_OK;
}

static void req_recycle(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    list_del(r);
    r->next = ar->free_list;
    ar->free_list = r;
}

static ember_comm_allreduce_req_t *find_active(ember_comm_allreduce_t *ar, uint64_t seq)
{
    for (size_t i = 0; i < ar->nactive; i++) {
        if (ar->active[i]->seq == seq)
            return ar->active[i];
    }
    return NULL;
}

static void active_remove(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    for (size_t i = 0; i < ar->nactive; i++) {
        if (ar->active[i] == r) {
            memmove(&ar->active[i], &ar->active[i + 1],
                    (ar->nactive - i - 1) * sizeof(*ar->active));
            ar->nactive--;
            break;
        }
    }
    r->receiving = 0;
}

/* ---- failure -------------------------------------------------------------- */

static void notify_members(ember_comm_allreduce_t *ar, ember_status_t status, int lost_rank,
                           uint64_t seq)
{
    ember_iov_t iov = {.buffer = &ar->abort_msg, .length = sizeof(ar->abort_msg)};

    ar->abort_msg.status = status;
    ar->abort_msg.lost_rank = lost_rank;
    ar->abort_msg.seq = seq;
    /* The text is cut to fit; the status and lost rank travel whole. */
    size_t length = strlen(ar->error_text);
    if (length >= sizeof(ar->abort_msg.text))
        length = sizeof(ar->abort_msg.text) - 1;
    memcpy(ar->abort_msg.text, ar->error_text, length);
    ar->abort_msg.text[length] = '\0';
    for (int m = 0; m < ar->n; m++) {
        if (m == ar->me || ar->aborts[m] || ar->ranks[m] == lost_rank ||
            ember_tp_peer_lost(ar->tp, ar->ranks[m]))
            continue;
        if (ember_rpc_call_async(ar->tp, ar->ranks[m], ar->op_base + OP_ABORT, &iov, 1,
                                 ar->ack_sink, sizeof(ar->ack_sink), NULL,
                                 &ar->aborts[m]) != EMBER_OK)
            ar->aborts[m] = NULL;
    }
}

/*
 * The communicator is broken: fail every reduction still receiving, answer
 * every held message with the error (which tells those senders too), and,
 * when we detected it (@notify), tell every member.  Logged once.
 */
static void ar_break(ember_comm_allreduce_t *ar, ember_status_t status, int lost_rank, uint64_t seq,
                     int notify, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void ar_break(ember_comm_allreduce_t *ar, ember_status_t status, int lost_rank, uint64_t seq,
                     int notify, const char *fmt, ...)
{
    double now = now_s();
    va_list ap;

    if (ar->error != EMBER_OK)
        return;
    ar->error = status;
    va_start(ap, fmt);
    vsnprintf(ar->error_text, sizeof(ar->error_text), fmt, ap);
    va_end(ap);
    ember_error("allreduce", "%s", ar->error_text);

    while (ar->nactive) {
        ember_comm_allreduce_req_t *r = ar->active[ar->nactive - 1];
        for (int m = 0; m < ar->n; m++) {
            if (r->held[m]) {
                ember_rpc_reply_error(r->held[m], status, "%s", ar->error_text);
                r->held[m] = NULL;
            }
        }
        while (r->nparked)
            ember_rpc_reply_error(r->parked[--r->nparked], status, "%s", ar->error_text);
        r->status = status;
        r->failed_at = now;
        active_remove(ar, r);
    }
    while (ar->nearly) {
        ember_rpc_req_t *req = ar->early[--ar->nearly];
        ember_rpc_reply_error(req, status, "%s", ar->error_text);
    }
    if (notify)
        notify_members(ar, status, lost_rank, seq);
}

/* ---- sending -------------------------------------------------------------- */

static void send_segment(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r, int step,
                         size_t segment)
{
    size_t base, length;
    ar_send_t *send;
    ember_status_t status;

    if (ar->error != EMBER_OK)
        return;
    int to = step_range(ar, r->count, step, 1, &base, &length);
    size_t offset = segment * ar->seg_floats;
    size_t nfloats = length - offset < ar->seg_floats ? length - offset : ar->seg_floats;
    if (length == 0)
        offset = nfloats = 0;

    send = &r->sends[r->nsends]; /* reserved at start */
    send->hdr = (ember_comm_allreduce_wire_t){.magic = EMBER_ALLREDUCE_MAGIC,
                                              .kind = EMBER_ALLREDUCE_KIND_RING,
                                              .step = (uint16_t)step,
                                              .seq = r->seq,
                                              .count = r->count,
                                              .offset = offset,
                                              .nfloats = nfloats};
    /* Step 0 sends our input; every later step sends what we reduced or
     * received into the result. */
    const float *from = step == 0 ? r->input : r->data;
    ember_iov_t iov[2] = {{&send->hdr, sizeof(send->hdr)},
                          {from + base + offset, nfloats * sizeof(float)}};
    status =
            ember_rpc_call_async(ar->tp, ar->ranks[to], ar->op_base + OP_DATA, iov, nfloats ? 2 : 1,
                                 ar->ack_sink, sizeof(ar->ack_sink), NULL, &send->future);
    if (status != EMBER_OK) {
        ar_break(ar, status, -1, r->seq, 1,
                 "allreduce seq %" PRIu64 ": cannot send to %s (rank %d): %s", r->seq,
                 peer_name(ar, to), ar->ranks[to], ember_status_string(status));
        return;
    }
    r->nsends++;
}

/* ---- receiving ------------------------------------------------------------ */

/* dst = mine + payload; @mine is @dst in place, our input out of place (so
 * the input is never copied first: every chunk reduced here is touched
 * exactly once by the reduce-scatter). */
static void add_floats(float *dst, const float *mine, const unsigned char *restrict src, size_t n)
{
    /* The payload sits in a transport buffer; it is float-aligned in
     * practice (pool buffers, a header of whole floats), and then a plain
     * loop the compiler vectorizes does the work. */
    if ((uintptr_t)src % sizeof(float) == 0) {
        const float *restrict s = (const float *)(const void *)src;
        if (mine == dst) {
            for (size_t i = 0; i < n; i++)
                dst[i] += s[i];
        } else {
            for (size_t i = 0; i < n; i++)
                dst[i] = mine[i] + s[i];
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, src + i * sizeof(float), sizeof(v));
        dst[i] = mine[i] + v;
    }
}

static void small_finish(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    const float scale = (float)ar->n;

    for (int m = 0; m < ar->n; m++) {
        r->src[m] = m == ar->me ? (const unsigned char *)r->small_buf
                                : (const unsigned char *)ember_rpc_req_data(r->held[m], NULL) +
                                          sizeof(ember_comm_allreduce_wire_t);
    }
    /* Member order on every member: the same additions, the same bits.  A
     * member at a time over the whole vector, a loop the compiler
     * vectorizes, where a loop over the members per element does not. */
    float *out = r->data;
    ember_copy(out, r->src[0], r->count * sizeof(float));
    for (int m = 1; m < ar->n; m++)
        add_floats(out, out, r->src[m], r->count);
    if (r->average)
        for (size_t i = 0; i < r->count; i++)
            out[i] /= scale;
    for (int m = 0; m < ar->n; m++) {
        if (r->held[m]) {
            ember_rpc_reply(r->held[m], EMBER_OK, NULL, 0);
            r->held[m] = NULL;
        }
    }
    active_remove(ar, r);
    /* Our vector went from small_buf: the caller's data is free already. */
    r->status = EMBER_OK;
}

/*
 * A message's wire header and payload: from its head and placed body when
 * place_segment put it in the result, else from the front of its data.
 * NULL when it is shorter than a header.  *length_p: the whole message.
 */
static const unsigned char *message_header(ember_rpc_req_t *req, ember_comm_allreduce_wire_t *hdr,
                                           size_t *length_p)
{
    size_t head_length, length;
    const void *head = ember_rpc_req_head(req, &head_length);
    const unsigned char *data = ember_rpc_req_data(req, &length);

    if (length_p)
        *length_p = length + (head ? head_length : 0);
    if (head) {
        if (head_length != sizeof(*hdr))
            return NULL;
        memcpy(hdr, head, sizeof(*hdr));
        return data;
    }
    if (length < sizeof(*hdr))
        return NULL;
    memcpy(hdr, data, sizeof(*hdr));
    return data + sizeof(*hdr);
}

/*
 * Refuse a message.  A call is answered with the error (its sender breaks
 * the communicator on it, or it was not a member's); a one-way message is a
 * member's small vector whose sender waits for no answer, so the
 * communicator is broken here, telling every member why.
 */
static void refuse(ember_comm_allreduce_t *ar, ember_rpc_req_t *req, ember_status_t status,
                   uint64_t seq, int member, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));

static void refuse(ember_comm_allreduce_t *ar, ember_rpc_req_t *req, ember_status_t status,
                   uint64_t seq, int member, const char *fmt, ...)
{
    char text[300];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (member >= 0 && ember_rpc_req_oneway(req) && ar->error == EMBER_OK) {
        ember_rpc_reply(req, EMBER_OK, NULL, 0); /* frees it: nobody listens */
        ar_break(ar, status, -1, seq, 1, "%s", text);
        return;
    }
    ember_rpc_reply_error(req, status, "%s", text);
}

/*
 * Where the segment @hdr announces lies in @r (its receive step's range):
 * *dst_p and its receive-segment index; 0 when it does not fit the
 * geometry (*length_p: that step's range, for the message).
 */
static int segment_target(const ember_comm_allreduce_t *ar, const ember_comm_allreduce_req_t *r,
                          const ember_comm_allreduce_wire_t *hdr, float **dst_p, size_t *index_p,
                          size_t *length_p)
{
    size_t base, length;
    step_range(ar, r->count, hdr->step, 0, &base, &length);
    size_t want = length > hdr->offset ? length - hdr->offset : 0;
    if (want > ar->seg_floats)
        want = ar->seg_floats;
    *length_p = length;
    if (hdr->offset % ar->seg_floats != 0 || (length ? hdr->offset >= length : hdr->offset != 0) ||
        hdr->nfloats != want)
        return 0;
    *dst_p = r->data + base + hdr->offset;
    *index_p = r->step_base[hdr->step] + hdr->offset / ar->seg_floats;
    return 1;
}

static int step_complete(const ember_comm_allreduce_req_t *r, int step)
{
    return r->step_got[step] == r->step_base[step + 1] - r->step_base[step];
}

static void open_step(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r, int step);
static void deliver_ring(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r,
                         ember_rpc_req_t *req, const ember_comm_allreduce_wire_t *hdr,
                         const unsigned char *payload, int parked_release);

/*
 * Consume one checked message for the started reduction @r, or answer it
 * with an error.  Runs from a handler or from start (early messages).
 */
static void deliver(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r, ember_rpc_req_t *req,
                    int member, const ember_comm_allreduce_wire_t *hdr,
                    const unsigned char *payload)
{
    if (hdr->count != r->count ||
        (r->kind == AR_KIND_SMALL) != (hdr->kind == EMBER_ALLREDUCE_KIND_SMALL)) {
        refuse(ar, req, EMBER_ERR_BAD_MESSAGE, hdr->seq, member,
               "allreduce seq %" PRIu64 ": %" PRIu64 " floats by the %s path from %s, "
               "but %s reduces %zu by the %s path (one step up to %zu B here)",
               hdr->seq, hdr->count, hdr->kind == EMBER_ALLREDUCE_KIND_SMALL ? "one-step" : "ring",
               peer_name(ar, member), peer_name(ar, ar->me), r->count,
               r->kind == AR_KIND_SMALL ? "one-step" : "ring", ar->small_bytes);
        return;
    }
    r->last_progress = now_s();
    if (r->kind == AR_KIND_SMALL) {
        if (r->held[member]) {
            refuse(ar, req, EMBER_ERR_BAD_MESSAGE, hdr->seq, member,
                   "allreduce seq %" PRIu64 ": second vector from %s", hdr->seq,
                   peer_name(ar, member));
            return;
        }
        r->held[member] = req; /* its payload stays valid until the answer */
        if (++r->small_got == ar->n - 1)
            small_finish(ar, r);
        return;
    }
    deliver_ring(ar, r, req, hdr, payload, 0);
}

/*
 * The segment @hdr announces, checked against its step's geometry and what
 * @r received so far: 1 with its place in the result and its receive-segment
 * index, or 0 once it was answered with an error.
 */
static int segment_accept(const ember_comm_allreduce_t *ar, const ember_comm_allreduce_req_t *r,
                          ember_rpc_req_t *req, const ember_comm_allreduce_wire_t *hdr, int placed,
                          int parked_release, float **dst_p, size_t *index_p)
{
    int step = hdr->step;
    size_t length;

    if (!segment_target(ar, r, hdr, dst_p, index_p, &length)) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE,
                              "allreduce seq %" PRIu64 " step %d: segment [%" PRIu64 ", +%" PRIu64
                              ") does not fit chunk of %zu floats",
                              hdr->seq, step, hdr->offset, hdr->nfloats, length);
        return 0;
    }
    uint8_t expect = parked_release ? (placed ? SEG_PLACED_PARKED : SEG_PARKED)
                                    : (placed ? SEG_PLACED : SEG_NONE);
    if (r->seen[*index_p] != expect) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE,
                              "allreduce seq %" PRIu64 " step %d: segment %zu twice", hdr->seq,
                              step, (size_t)(hdr->offset / ar->seg_floats));
        return 0;
    }
    return 1;
}

/*
 * Consume @want floats of step @step into the result at @dst: the
 * reduce-scatter adds (and its last step averages), the all-gather copies
 * (@placed: the transport put them there already).
 */
static void segment_consume(const ember_comm_allreduce_t *ar, const ember_comm_allreduce_req_t *r,
                            int step, float *dst, const unsigned char *payload, size_t want,
                            int placed)
{
    int half = nsteps(ar) / 2;

    if (step < half) {
        /* The ring adds into each chunk once, so onto the input; halving
         * adds into regions it added into at the step before, after step 0. */
        const float *mine = ar->halving_steps && step > 0 ? dst : r->input + (dst - r->data);
        add_floats(dst, mine, payload, want);
        if (step == half - 1 && r->average) {
            const float scale = (float)ar->n;
            for (size_t i = 0; i < want; i++)
                dst[i] /= scale;
        }
    } else if (!placed) {
        ember_copy(dst, payload, want * sizeof(float));
    }
}

/* After segment @segment of step @step was consumed: the schedule moves on. */
static void segment_advance(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r, int step,
                            size_t segment)
{
    r->step_got[step]++;
    int done = ++r->recv_done == r->recv_expected;
    if (!ar->halving_steps) {
        /* Ring: the segment received at step k is the one sent at k+1. */
        if (step + 1 < nsteps(ar))
            send_segment(ar, r, step + 1, segment);
    } else if (step_complete(r, step) && step + 1 < nsteps(ar)) {
        open_step(ar, r, step + 1);
    }
    if (done && r->receiving)
        active_remove(ar, r);
}

/*
 * A ring or halving segment (@parked_release: one parked earlier, now taken
 * up): accepted, parked or consumed, answered, and the schedule advanced.
 */
static void deliver_ring(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r,
                         ember_rpc_req_t *req, const ember_comm_allreduce_wire_t *hdr,
                         const unsigned char *payload, int parked_release)
{
    int step = hdr->step;
    int placed = ember_rpc_req_head(req, NULL) != NULL;
    size_t index;
    float *dst;

    if (!segment_accept(ar, r, req, hdr, placed, parked_release, &dst, &index))
        return;
    if (ar->halving_steps && step > 0 && !step_complete(r, step - 1) && !parked_release) {
        /* Its region is still being reduced here: adding now would change
         * the order of the additions (and so the bits), and taking a step
         * early would open the next one on data not yet complete.  Taken up
         * when the step before completes (open_step). */
        r->parked[r->nparked++] = req; /* capacity: every segment, reserved */
        r->seen[index] = placed ? SEG_PLACED_PARKED : SEG_PARKED;
        return;
    }
    r->seen[index] = SEG_DONE;
    /*
     * Overwriting in the all-gather is safe although our reduce-scatter send
     * of the same chunk may not be acknowledged yet: this data was built on
     * top of that send having been received in full by our right neighbour.
     */
    segment_consume(ar, r, step, dst, payload, hdr->nfloats, placed);
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
    segment_advance(ar, r, step, hdr->offset / ar->seg_floats);
}

/* Halving: step @step may start: send its segments, take up what waited. */
static void open_step(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r, int step)
{
    size_t base, length;
    step_range(ar, r->count, step, 1, &base, &length);
    for (size_t s = 0; s < segments(ar, length) && ar->error == EMBER_OK; s++)
        send_segment(ar, r, step, s);
    for (size_t i = 0; i < r->nparked && ar->error == EMBER_OK;) {
        ember_rpc_req_t *req = r->parked[i];
        ember_comm_allreduce_wire_t hdr;
        const unsigned char *payload = message_header(req, &hdr, NULL);
        if (hdr.step != step) {
            i++;
            continue;
        }
        r->parked[i] = r->parked[--r->nparked];
        deliver_ring(ar, r, req, &hdr, payload, 1);
        i = 0; /* that may have opened (and emptied) later steps: rescan */
    }
}

/* The largest small vector any member of this communicator may send: what
 * a peer's may be before our handshake decided ar->small_bytes.  Whether
 * both chose the same path for a count is checked on delivery. */
static size_t small_max(const ember_comm_allreduce_t *ar)
{
    return ar->n == 2 ? EMBER_ALLREDUCE_SMALL_PAIR_TCP_BYTES : EMBER_ALLREDUCE_SMALL_BYTES;
}

/* Header checks that need no reduction state; "" when it passes. */
static const char *check_header(const ember_comm_allreduce_t *ar, int member,
                                const ember_comm_allreduce_wire_t *hdr, size_t length)
{
    size_t payload = length - sizeof(*hdr);

    if (hdr->magic != EMBER_ALLREDUCE_MAGIC)
        return "bad magic";
    if (hdr->nfloats > payload / sizeof(float) || hdr->nfloats * sizeof(float) != payload)
        return "payload length differs from the header";
    if (hdr->kind == EMBER_ALLREDUCE_KIND_SMALL) {
        if (member == ar->me)
            return "vector from ourselves";
        if (hdr->step != 0 || hdr->offset != 0 || hdr->count != hdr->nfloats || hdr->count == 0 ||
            hdr->count > (ar->small_bytes ? ar->small_bytes : small_max(ar)) / sizeof(float))
            return "bad small-vector geometry";
        return "";
    }
    if (hdr->kind != EMBER_ALLREDUCE_KIND_RING)
        return "unknown kind";
    if (ar->n < 2 || hdr->step >= nsteps(ar))
        return "ring step out of range";
    if (member != step_from(ar, hdr->step))
        return "ring segment from a member that does not send at that step";
    if (hdr->count <= EMBER_ALLREDUCE_SMALL_BYTES / sizeof(float) ||
        hdr->count > SIZE_MAX / sizeof(float))
        return "ring count out of range";
    if (hdr->nfloats > ar->seg_floats || hdr->offset >= hdr->count)
        return "ring segment out of range";
    return "";
}

static void on_data(ember_rpc_req_t *req, void *arg)
{
    ember_comm_allreduce_t *ar = arg;
    int rank = ember_rpc_req_peer(req);
    int member = rank >= 0 && rank < ar->world ? ar->member_of[rank] : -1;
    size_t length;
    ember_comm_allreduce_wire_t hdr;
    const unsigned char *payload = message_header(req, &hdr, &length);
    const char *why;

    if (member < 0) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE, "allreduce: rank %d is not a member",
                              rank);
        return;
    }
    if (ar->error != EMBER_OK) {
        ember_rpc_reply_error(req, ar->error, "%s", ar->error_text);
        return;
    }
    if (!payload) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE, "allreduce: message of %zu bytes from %s",
                              length, peer_name(ar, member));
        return;
    }
    why = check_header(ar, member, &hdr, length);
    if (*why) {
        refuse(ar, req, EMBER_ERR_BAD_MESSAGE, hdr.seq, member,
               "allreduce seq %" PRIu64 " from %s: %s", hdr.seq, peer_name(ar, member), why);
        return;
    }
    if (hdr.seq >= ar->next_seq) {
        if (hdr.seq - ar->next_seq >= MAX_AHEAD || ar->nearly >= MAX_HELD) {
            refuse(ar, req, EMBER_ERR_BAD_MESSAGE, hdr.seq, member,
                   "allreduce seq %" PRIu64 " from %s: too far ahead of seq %" PRIu64, hdr.seq,
                   peer_name(ar, member), ar->next_seq);
            return;
        }
        if (!EMBER_RESERVE(ar->early, ar->early_capacity, ar->nearly + 1)) {
            refuse(ar, req, EMBER_ERR_NO_MEMORY, hdr.seq, member,
                   "allreduce seq %" PRIu64 ": %s cannot hold an early message "
                   "from %s",
                   hdr.seq, peer_name(ar, ar->me), peer_name(ar, member));
            return;
        }
        ar->early[ar->nearly++] = req; /* answered once we start hdr.seq */
        return;
    }
    ember_comm_allreduce_req_t *r = find_active(ar, hdr.seq);
    if (!r) {
        refuse(ar, req, EMBER_ERR_BAD_MESSAGE, hdr.seq, member,
               "allreduce seq %" PRIu64 " from %s: that reduction already finished "
               "here",
               hdr.seq, peer_name(ar, member));
        return;
    }
    deliver(ar, r, req, member, &hdr, payload);
}

/*
 * Where an all-gather segment lands: straight in the result, where the
 * copy would have put it (registered only where the transport reads the
 * payload itself, so nothing can land after a failed reduction returned).
 * Anything else (reduce-scatter segments to add, early or doubtful
 * messages) goes to a transport buffer and is checked by on_data.
 */
static void *place_segment(void *arg, int peer, const void *head, size_t head_length, size_t length)
{
    ember_comm_allreduce_t *ar = arg;
    ember_comm_allreduce_wire_t hdr;
    int member = peer >= 0 && peer < ar->world ? ar->member_of[peer] : -1;

    if (member < 0 || ar->error != EMBER_OK || head_length != sizeof(hdr))
        return NULL;
    memcpy(&hdr, head, sizeof(hdr));
    if (*check_header(ar, member, &hdr, length) || hdr.kind != EMBER_ALLREDUCE_KIND_RING ||
        hdr.step < nsteps(ar) / 2 || hdr.seq >= ar->next_seq)
        return NULL;
    ember_comm_allreduce_req_t *r = find_active(ar, hdr.seq);
    if (!r || r->kind != AR_KIND_RING || hdr.count != r->count)
        return NULL;
    float *dst;
    size_t index, chunk;
    if (!segment_target(ar, r, &hdr, &dst, &index, &chunk) || r->seen[index] != SEG_NONE)
        return NULL;
    r->seen[index] = SEG_PLACED;
    r->landing++;
    return dst;
}

/* A placed segment's request is done (consumed, refused or failed). */
static void place_release(void *arg, void *buffer)
{
    ember_comm_allreduce_t *ar = arg;
    const float *at = buffer;

    for (ember_comm_allreduce_req_t *r = ar->live.next; r != &ar->live; r = r->next) {
        if (r->landing && at >= r->data && at < r->data + r->count) {
            r->landing--;
            return;
        }
    }
}

static void on_hello(ember_rpc_req_t *req, void *arg)
{
    ember_comm_allreduce_t *ar = arg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    uint64_t hash;

    if (length != sizeof(hash)) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE, "allreduce hello: %zu bytes", length);
        return;
    }
    memcpy(&hash, data, sizeof(hash));
    if (hash != ar->hash) {
        ember_rpc_reply_error(req, EMBER_ERR_INVALID_PARAM,
                              "allreduce on %s: member list, op ids or segment size "
                              "differ",
                              ember_tp_peer_name(ar->tp, ar->ranks[ar->me]));
        return;
    }
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

static void on_abort(ember_rpc_req_t *req, void *arg)
{
    ember_comm_allreduce_t *ar = arg;
    int rank = ember_rpc_req_peer(req);
    int member = rank >= 0 && rank < ar->world ? ar->member_of[rank] : -1;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    ar_abort_msg_t msg;

    if (member < 0 || length != sizeof(msg)) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE,
                              "allreduce abort: bad message from rank %d", rank);
        return;
    }
    memcpy(&msg, data, sizeof(msg));
    msg.text[sizeof(msg.text) - 1] = '\0';
    ember_status_t status = ember_status_from_wire(msg.status);
    if (status >= 0 || msg.lost_rank < -1 || msg.lost_rank >= ar->world) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE,
                              "allreduce abort: bad status or rank from %s", peer_name(ar, member));
        return;
    }
    ember_rpc_reply(req, EMBER_OK, NULL, 0);
    for (char *p = msg.text; *p; p++) {
        if (*p < 0x20 || *p > 0x7e)
            *p = '?';
    }
    if (msg.lost_rank >= 0)
        ar_break(ar, status, msg.lost_rank, msg.seq, 0,
                 "allreduce seq %" PRIu64 ": %s (rank %d) lost, reported by %s "
                 "(rank %d): %s",
                 msg.seq, ember_tp_peer_name(ar->tp, msg.lost_rank), msg.lost_rank,
                 peer_name(ar, member), rank, msg.text);
    else
        ar_break(ar, status, -1, msg.seq, 0,
                 "allreduce seq %" PRIu64 ": broken at %s (rank %d): %s", msg.seq,
                 peer_name(ar, member), rank, msg.text);
}

/* ---- progress ------------------------------------------------------------- */

/* A send finished badly: who is to blame, and what to say. */
static void send_failed(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r,
                        ember_future_t *future, ember_status_t status, int peer_rank)
{
    size_t length = 0;
    const char *text = ember_future_data(future, &length);
    int lost = ember_tp_peer_lost(ar->tp, peer_rank) || status == EMBER_ERR_TIMED_OUT;

    if (!text)
        length = 0;
    if (length > 240)
        length = 240;
    if (lost)
        ar_break(ar, status, peer_rank, r->seq, 1,
                 "allreduce seq %" PRIu64 ": %s (rank %d) lost: %s: %.*s", r->seq,
                 ember_tp_peer_name(ar->tp, peer_rank), peer_rank, ember_status_string(status),
                 (int)length, text ? text : "");
    else
        ar_break(ar, status, -1, r->seq, 1,
                 "allreduce seq %" PRIu64 ": %s (rank %d) answered %s: %.*s", r->seq,
                 ember_tp_peer_name(ar->tp, peer_rank), peer_rank, ember_status_string(status),
                 (int)length, text ? text : "");
}

static int send_peer(const ember_comm_allreduce_t *ar, const ember_comm_allreduce_req_t *r,
                     size_t index)
{
    if (r->kind == AR_KIND_RING) {
        size_t base, length;
        int step = r->sends[index].hdr.step;
        return ar->ranks[step_range(ar, r->count, step, 1, &base, &length)];
    }
    /* Small: one send per other member, in member order. */
    int m = (int)index + ((int)index >= ar->me ? 1 : 0);
    return ar->ranks[m];
}

/* Poll @r's sends in order; each test progresses the transport once. */
static void poll_sends(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    while (r->first_pending < r->nsends) {
        size_t i = r->first_pending;
        ar_send_t *send = &r->sends[i];
        ember_status_t status =
                send->future ? ember_future_test(send->future) : send->oneway_status;
        if (status == EMBER_INPROGRESS)
            return;
        if (status != EMBER_OK && ar->error == EMBER_OK) {
            int peer = send_peer(ar, r, i);
            if (send->future)
                send_failed(ar, r, send->future, status, peer);
            else
                ar_break(ar, status, ember_tp_peer_lost(ar->tp, peer) ? peer : -1, r->seq, 1,
                         "allreduce seq %" PRIu64 ": cannot send to %s "
                         "(rank %d): %s",
                         r->seq, ember_tp_peer_name(ar->tp, peer), peer,
                         ember_status_string(status));
        }
        if (status != EMBER_OK && r->status == EMBER_INPROGRESS) {
            r->status = status;
            r->failed_at = now_s();
        }
        ember_future_release(send->future);
        send->future = NULL;
        r->first_pending++;
        r->last_progress = now_s();
    }
}

/* Let go of the calls still out; a one-way send still borrows its buffer
 * until its callback, so it is never abandoned (the request lives on). */
static void abandon_sends(ember_comm_allreduce_req_t *r)
{
    while (r->first_pending < r->nsends) {
        ar_send_t *send = &r->sends[r->first_pending];
        if (!send->future && send->oneway_status == EMBER_INPROGRESS)
            return;
        ember_future_release(send->future);
        send->future = NULL;
        r->first_pending++;
    }
}

static void oneway_done(void *arg, ember_status_t status)
{
    ar_send_t *send = arg;
    send->oneway_status = status;
    send->owner->last_progress = now_s();
}

static void check_peers(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r, double now)
{
    for (int m = 0; m < ar->n && ar->error == EMBER_OK; m++) {
        if (m != ar->me && ember_tp_peer_lost(ar->tp, ar->ranks[m]))
            ar_break(ar, EMBER_ERR_PEER_LOST, ar->ranks[m], r->seq, 1,
                     "allreduce seq %" PRIu64 ": %s (rank %d) lost", r->seq, peer_name(ar, m),
                     ar->ranks[m]);
    }
    if (ar->error != EMBER_OK || now - r->last_progress <= ar->stall_s)
        return;
    int waited = ar->left;
    if (r->kind == AR_KIND_SMALL) {
        for (int m = 0; m < ar->n; m++) {
            if (m != ar->me && !r->held[m]) {
                waited = m;
                break;
            }
        }
    }
    ar_break(ar, EMBER_ERR_TIMED_OUT, ar->ranks[waited], r->seq, 1,
             "allreduce seq %" PRIu64 ": nothing from %s (rank %d) for %.0f s", r->seq,
             peer_name(ar, waited), ar->ranks[waited], ar->stall_s);
}

/* Advance everything: acknowledgements, completions, failures, recycling. */
static void pump(ember_comm_allreduce_t *ar)
{
    double now = now_s();

    ember_tp_progress(ar->tp);
    for (ember_comm_allreduce_req_t *r = ar->live.next, *next; r != &ar->live; r = next) {
        poll_sends(ar, r);
        if (r->status == EMBER_INPROGRESS) {
            if (r->receiving)
                check_peers(ar, r, now);
            if (r->status == EMBER_INPROGRESS && !r->receiving &&
                r->recv_done == r->recv_expected && r->nsends == r->send_expected &&
                r->first_pending == r->nsends)
                r->status = EMBER_OK;
        }
        if (r->released && r->status < 0 && r->first_pending < r->nsends &&
            now - r->failed_at > FAIL_GRACE_S)
            abandon_sends(r);
        next = r->next; /* handlers never unlink; only this loop does */
        if (r->released && r->first_pending == r->nsends && !r->landing)
            req_recycle(ar, r);
    }
    for (int m = 0; m < ar->n; m++) {
        if (ar->aborts[m] && ember_future_test(ar->aborts[m]) != EMBER_INPROGRESS) {
            ember_future_release(ar->aborts[m]);
            ar->aborts[m] = NULL;
        }
    }
}

/* ---- public --------------------------------------------------------------- */

static uint64_t fnv(uint64_t hash, const void *data, size_t length)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < length; i++)
        hash = (hash ^ p[i]) * 1099511628211ull;
    return hash;
}

static void unregister(ember_comm_allreduce_t *ar)
{
    for (int op = 0; op < EMBER_ALLREDUCE_OPS; op++)
        ember_rpc_register(ar->tp, (uint16_t)(ar->op_base + op), NULL, NULL);
}

/* One HELLO to member @m: OK, UNSUPPORTED (its handler is not registered
 * yet: try again), or what went wrong (logged when it answered). */
static ember_status_t hello(ember_comm_allreduce_t *ar, int m)
{
    ember_iov_t iov = {.buffer = &ar->hash, .length = sizeof(ar->hash)};
    ember_future_t *future;
    ember_status_t status;

    status = ember_rpc_call_async(ar->tp, ar->ranks[m], ar->op_base + OP_HELLO, &iov, 1,
                                  ar->ack_sink, sizeof(ar->ack_sink), NULL, &future);
    if (status != EMBER_OK)
        return status;
    status = ember_future_wait(future);
    if (status != EMBER_OK && status != EMBER_ERR_UNSUPPORTED) {
        size_t length = 0;
        const char *text = ember_future_data(future, &length);
        ember_error("allreduce", "create: %s (rank %d) answered %s: %.*s", peer_name(ar, m),
                    ar->ranks[m], ember_status_string(status),
                    text ? (int)(length > 240 ? 240 : length) : 0, text ? text : "");
    }
    ember_future_release(future);
    return status;
}

/* A HELLO to every member not met yet (@done); *remaining_p counts down. */
static ember_status_t hello_round(ember_comm_allreduce_t *ar, int *done, int *remaining_p)
{
    for (int m = 0; m < ar->n; m++) {
        if (m == ar->me || done[m])
            continue;
        ember_status_t status = hello(ar, m);
        if (status == EMBER_OK) {
            done[m] = 1;
            (*remaining_p)--;
        } else if (status != EMBER_ERR_UNSUPPORTED) {
            return status;
        }
    }
    return EMBER_OK;
}

/* Name the first member that never answered. */
static void log_absent(const ember_comm_allreduce_t *ar, const int *done)
{
    for (int m = 0; m < ar->n; m++) {
        if (m != ar->me && !done[m]) {
            ember_error("allreduce",
                        "create: %s (rank %d) did not create the "
                        "communicator within EMBER_CONNECT_TIMEOUT",
                        peer_name(ar, m), ar->ranks[m]);
            return;
        }
    }
}

/* Meet every other member: retried while its handler is not registered yet. */
static ember_status_t handshake(ember_comm_allreduce_t *ar)
{
    double deadline = now_s() + ember_config_double("EMBER_CONNECT_TIMEOUT");
    int *done = calloc((size_t)ar->n, sizeof(*done));
    int remaining = ar->n - 1;
    ember_status_t ret = EMBER_OK;

    if (!done)
        return EMBER_ERR_NO_MEMORY;
    while (remaining > 0) {
        ret = hello_round(ar, done, &remaining);
        if (ret != EMBER_OK || remaining == 0)
            break;
        if (now_s() > deadline) {
            log_absent(ar, done);
            ret = EMBER_ERR_TIMED_OUT;
            break;
        }
        ember_tp_wait(ar->tp, 0.01); /* serve others while they catch up */
    }
    free(done);
    return ret;
}

static ember_status_t create_check(ember_tp_t *tp, const int *ranks, int nranks, uint16_t op_base,
                                   ember_comm_allreduce_t **ar_p, size_t max_message)
{
    int world = tp ? ember_tp_world_size(tp) : 0;

    if (!tp || !ranks || !ar_p || nranks < 1 || nranks > world ||
        op_base < EMBER_RPC_OP_USER_BASE || op_base + EMBER_ALLREDUCE_OPS > EMBER_RPC_OP_MAX ||
        max_message < sizeof(ember_comm_allreduce_wire_t) + EMBER_ALLREDUCE_SMALL_BYTES) {
        ember_error("allreduce",
                    "create: invalid parameters (%d ranks of %d, op ids "
                    "%u..%u, EMBER_MAX_MSG_SIZE %zu)",
                    nranks, world, op_base, op_base + EMBER_ALLREDUCE_OPS - 1, max_message);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

static void ar_free(ember_comm_allreduce_t *ar)
{
    free(ar->active);
    free(ar->early);
    free(ar->aborts);
    free(ar->member_of);
    free(ar->ranks);
    free(ar);
}

/* The communicator and its member tables, not filled in yet; NULL when out
 * of memory. */
static ember_comm_allreduce_t *ar_alloc(ember_tp_t *tp, int nranks, uint16_t op_base)
{
    ember_comm_allreduce_t *ar = calloc(1, sizeof(*ar));

    if (!ar)
        return NULL;
    ar->tp = tp;
    ar->n = nranks;
    ar->world = ember_tp_world_size(tp);
    ar->op_base = op_base;
    ar->me = -1;
    ar->live.prev = ar->live.next = &ar->live;
    ar->ranks = malloc((size_t)nranks * sizeof(*ar->ranks));
    ar->member_of = malloc((size_t)ar->world * sizeof(*ar->member_of));
    ar->aborts = calloc((size_t)nranks, sizeof(*ar->aborts));
    if (!ar->ranks || !ar->member_of || !ar->aborts) {
        ar_free(ar);
        return NULL;
    }
    return ar;
}

/* The member list: each rank in range and listed once, this process one. */
static ember_status_t set_members(ember_comm_allreduce_t *ar, const int *ranks)
{
    int self = ember_tp_rank(ar->tp);

    for (int i = 0; i < ar->world; i++)
        ar->member_of[i] = -1;
    for (int m = 0; m < ar->n; m++) {
        if (ranks[m] < 0 || ranks[m] >= ar->world || ar->member_of[ranks[m]] >= 0) {
            ember_error("allreduce",
                        "create: member %d is rank %d: out of range or "
                        "listed twice",
                        m, ranks[m]);
            return EMBER_ERR_INVALID_PARAM;
        }
        ar->ranks[m] = ranks[m];
        ar->member_of[ranks[m]] = m;
        if (ranks[m] == self)
            ar->me = m;
    }
    if (ar->me < 0) {
        ember_error("allreduce", "create: rank %d is not among the %d members", self, ar->n);
        return EMBER_ERR_INVALID_PARAM;
    }
    ar->left = mod_n(ar, ar->me - 1);
    ar->right = mod_n(ar, ar->me + 1);
    return EMBER_OK;
}

/* The algorithm, the segment size and the stall timeout. */
static void choose_schedule(ember_comm_allreduce_t *ar, size_t max_message)
{
    /* Recursive halving for 4, 8, 16... members (fewer, larger steps: what
     * counts where ranks share CPUs or links are long); the ring otherwise
     * (for 2 members they are the same exchange).  EMBER_ALLREDUCE_ALGO=ring
     * forces the ring; it must be the same on every member (hashed). */
    const char *algo = ember_config_str("EMBER_ALLREDUCE_ALGO");
    if ((!algo || strcmp(algo, "ring") != 0) && ar->n >= 4 && (ar->n & (ar->n - 1)) == 0) {
        while ((1 << ar->halving_steps) < ar->n)
            ar->halving_steps++;
    }
    /* Segments must fit a message, and match on every member (hashed). */
    size_t segment_bytes = EMBER_ALLREDUCE_SEGMENT_BYTES;
    if (segment_bytes > max_message - sizeof(ember_comm_allreduce_wire_t))
        segment_bytes = max_message - sizeof(ember_comm_allreduce_wire_t);
    ar->seg_floats = segment_bytes / sizeof(float);
    /* A member that stops sending is reported after the RPC deadline plus
     * 2 s: a member held up by a hung PS fails first, at its call's
     * deadline, naming the PS (the cause), not this member (a symptom). */
    ar->stall_s = ember_config_double("EMBER_RPC_TIMEOUT") + 2.0;
}

/* What every member must agree on, compared by the handshake. */
static void hash_config(ember_comm_allreduce_t *ar)
{
    ar->hash = 1469598103934665603ull;
    ar->hash = fnv(ar->hash, &ar->n, sizeof(ar->n));
    ar->hash = fnv(ar->hash, ar->ranks, (size_t)ar->n * sizeof(*ar->ranks));
    ar->hash = fnv(ar->hash, &ar->op_base, sizeof(ar->op_base));
    ar->hash = fnv(ar->hash, &ar->seg_floats, sizeof(ar->seg_floats));
    ar->hash = fnv(ar->hash, &ar->halving_steps, sizeof(ar->halving_steps));
}

static ember_status_t register_handlers(ember_comm_allreduce_t *ar)
{
    ember_tp_t *tp = ar->tp;
    uint16_t op_base = ar->op_base;

    EMBER_CHECK(ember_rpc_register(tp, op_base + OP_DATA, on_data, ar));
    if (ember_tp_pull_rendezvous(tp))
        EMBER_CHECK(
                ember_rpc_register_alloc(tp, op_base + OP_DATA, place_segment, place_release, ar));
    EMBER_CHECK(ember_rpc_register(tp, op_base + OP_HELLO, on_hello, ar));
    return ember_rpc_register(tp, op_base + OP_ABORT, on_abort, ar);
}

/* Connected now: a pair over TCP takes the one-step path further. */
static void choose_small_bytes(ember_comm_allreduce_t *ar, size_t max_message)
{
    ar->small_bytes = EMBER_ALLREDUCE_SMALL_BYTES;
    if (ar->n == 2 && ember_tp_peer_over_tcp(ar->tp, ar->ranks[1 - ar->me]) == 1 &&
        max_message >= sizeof(ember_comm_allreduce_wire_t) + EMBER_ALLREDUCE_SMALL_PAIR_TCP_BYTES)
        ar->small_bytes = EMBER_ALLREDUCE_SMALL_PAIR_TCP_BYTES;
}

ember_status_t ember_comm_allreduce_create(ember_tp_t *tp, const int *ranks, int nranks,
                                           uint16_t op_base, ember_comm_allreduce_t **ar_p)
{
    size_t max_message = ember_config_size("EMBER_MAX_MSG_SIZE");
    ember_comm_allreduce_t *ar;
    ember_status_t status;

    EMBER_CHECK(create_check(tp, ranks, nranks, op_base, ar_p, max_message));
    ar = ar_alloc(tp, nranks, op_base);
    if (!ar)
        return EMBER_ERR_NO_MEMORY;
    EMBER_CHECK_GOTO(set_members(ar, ranks), status, err_free);
    choose_schedule(ar, max_message);
    hash_config(ar);
    EMBER_CHECK_GOTO(register_handlers(ar), status, err_unregister);
    EMBER_CHECK_GOTO(handshake(ar), status, err_unregister);
    choose_small_bytes(ar, max_message);
    ember_debug("allreduce",
                "communicator of %d members (op ids %u..%u): member %d, "
                "one step up to %zu B",
                nranks, op_base, op_base + EMBER_ALLREDUCE_OPS - 1, ar->me, ar->small_bytes);
    *ar_p = ar;
    return EMBER_OK;

err_unregister:
    /* Messages that arrived meanwhile are answered, then nobody listens. */
    ar_break(ar, EMBER_ERR_SHUTDOWN, -1, 0, 0, "allreduce: create failed");
    unregister(ar);
err_free:
    ar_free(ar);
    return status;
}

size_t ember_comm_allreduce_small_bytes(const ember_comm_allreduce_t *ar)
{
    return ar ? ar->small_bytes : 0;
}

/* Reductions still in flight fail, which answers every held message: the
 * peers learn it from that. */
static void destroy_fail_pending(ember_comm_allreduce_t *ar)
{
    if ((!ar->nactive && !ar->nearly) || ar->error != EMBER_OK)
        return;
    ember_warn("allreduce",
               "destroyed with %zu reductions in flight and %zu "
               "early messages",
               ar->nactive, ar->nearly);
    ar_break(ar, EMBER_ERR_SHUTDOWN, -1, ar->next_seq, 0, "allreduce: communicator destroyed");
}

/* Our own messages: let them finish (until @deadline), then abandon them. */
static void destroy_drain(ember_comm_allreduce_t *ar, double deadline)
{
    for (;;) {
        int pending = 0;
        pump(ar);
        for (ember_comm_allreduce_req_t *r = ar->live.next; r != &ar->live; r = r->next)
            pending += r->first_pending < r->nsends || r->landing;
        for (int m = 0; m < ar->n; m++)
            pending += ar->aborts[m] != NULL;
        if (!pending || now_s() > deadline)
            break;
        ember_tp_wait(ar->tp, 0.01);
    }
}

/* Free every request the transport no longer holds; 1 when a segment is
 * still landing (place_release will still be called with @ar). */
static int destroy_requests(ember_comm_allreduce_t *ar)
{
    int landing = 0;

    for (ember_comm_allreduce_req_t *r = ar->live.next, *next; r != &ar->live; r = next) {
        next = r->next;
        abandon_sends(r);
        if (r->first_pending < r->nsends || r->landing) {
            /* A one-way send the transport still holds (a hung peer), or a
             * segment still landing: their callbacks will touch @r, so @r
             * is left to them, not freed. */
            ember_warn("allreduce",
                       "destroy: seq %" PRIu64 " is still in the "
                       "transport; its request is leaked",
                       r->seq);
            landing |= r->landing != 0;
            if (!r->landing)
                list_del(r); /* else left where place_release looks */
            continue;
        }
        list_del(r);
        req_free_memory(r);
    }
    while (ar->free_list) {
        ember_comm_allreduce_req_t *r = ar->free_list;
        ar->free_list = r->next;
        req_free_memory(r);
    }
    return landing;
}

void ember_comm_allreduce_destroy(ember_comm_allreduce_t *ar)
{
    double deadline = now_s() + FAIL_GRACE_S;

    if (!ar)
        return;
    destroy_fail_pending(ar);
    for (ember_comm_allreduce_req_t *r = ar->live.next; r != &ar->live; r = r->next)
        r->released = 1;
    destroy_drain(ar, deadline);
    unregister(ar);
    if (destroy_requests(ar))
        return; /* place_release will still be called with @ar: keep it */
    for (int m = 0; m < ar->n; m++)
        ember_future_release(ar->aborts[m]);
    ar_free(ar);
}

/* Feed @r the messages that arrived before it started. */
static void take_early(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    size_t i = 0;

    while (i < ar->nearly && ar->error == EMBER_OK && r->receiving) {
        ember_rpc_req_t *req = ar->early[i];
        ember_comm_allreduce_wire_t hdr;
        const unsigned char *payload = message_header(req, &hdr, NULL);

        if (hdr.seq != r->seq) {
            i++;
            continue;
        }
        ar->early[i] = ar->early[--ar->nearly];
        int rank = ember_rpc_req_peer(req);
        deliver(ar, r, req, ar->member_of[rank], &hdr, payload);
    }
}

/* The arguments, checked; *send_p: the input (the result in place). */
static ember_status_t start_check(const ember_comm_allreduce_t *ar,
                                  const ember_comm_allreduce_args_t *args,
                                  ember_comm_allreduce_req_t **req_p, const float **send_p)
{
    size_t count = args ? args->count : 0;

    if (!ar || !args || !req_p || (count && !args->recv) || count > SIZE_MAX / sizeof(float) / 2) {
        ember_error("allreduce", "start: invalid parameters (%zu floats)", count);
        return EMBER_ERR_INVALID_PARAM;
    }
    const float *send = args->send ? args->send : args->recv;
    const float *recv = args->recv;
    if (send != recv && count && (uintptr_t)send < (uintptr_t)(recv + count) &&
        (uintptr_t)recv < (uintptr_t)(send + count)) {
        ember_error("allreduce",
                    "start: the send and receive buffers of %zu floats "
                    "overlap without being the same",
                    count);
        return EMBER_ERR_INVALID_PARAM;
    }
    *send_p = send;
    return ar->error; /* logged when it broke */
}

/* One member, or nothing to reduce: nothing travels, and every member
 * skips this sequence number alike. */
static void start_trivial(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    if (r->input != r->data && r->count)
        ember_copy(r->data, r->input, r->count * sizeof(float));
    r->seq = ar->next_seq++;
    r->status = EMBER_OK;
}

/* Ring or halving: each step's receive segments, every send, and room for
 * all of them (the handlers never allocate). */
static ember_status_t plan_ring(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    size_t base, length, total = 0;

    r->kind = AR_KIND_RING;
    for (int step = 0; step < nsteps(ar); step++) {
        r->step_base[step] = r->recv_expected;
        r->step_got[step] = 0;
        step_range(ar, r->count, step, 0, &base, &length);
        r->recv_expected += segments(ar, length);
        step_range(ar, r->count, step, 1, &base, &length);
        total += segments(ar, length);
    }
    r->step_base[nsteps(ar)] = r->recv_expected;
    r->send_expected = total;
    EMBER_CHECK(req_reserve(r, total, r->recv_expected));
    memset(r->seen, 0, r->recv_expected);
    if (ar->halving_steps && !EMBER_RESERVE(r->parked, r->parked_capacity, r->recv_expected))
        return EMBER_ERR_NO_MEMORY;
    return EMBER_OK;
}

/* The path for @r's size, and the memory it needs. */
static ember_status_t plan(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    if (r->count * sizeof(float) <= ar->small_bytes) {
        r->kind = AR_KIND_SMALL;
        return req_reserve(r, (size_t)ar->n - 1, 0);
    }
    return plan_ring(ar, r);
}

/*
 * Small: our copy of the vector goes one-way to every other member.  A
 * reduction completes once every vector arrived and ours left, one message
 * latency (a mismatch breaks the communicator at the receiver, which tells
 * everyone: see refuse).
 */
static void post_small(ember_comm_allreduce_t *ar, ember_comm_allreduce_req_t *r)
{
    ember_copy(r->small_buf, r->input, r->count * sizeof(float));
    const ember_comm_allreduce_wire_t hdr = {.magic = EMBER_ALLREDUCE_MAGIC,
                                             .kind = EMBER_ALLREDUCE_KIND_SMALL,
                                             .seq = r->seq,
                                             .count = r->count,
                                             .nfloats = r->count};
    r->send_expected = (size_t)ar->n - 1;
    for (int m = 0; m < ar->n && ar->error == EMBER_OK; m++) {
        if (m == ar->me)
            continue;
        ar_send_t *out = &r->sends[r->nsends++];
        *out = (ar_send_t){.owner = r, .oneway_status = EMBER_INPROGRESS, .hdr = hdr};
        ember_iov_t iov[2] = {{&out->hdr, sizeof(out->hdr)},
                              {r->small_buf, r->count * sizeof(float)}};
        ember_status_t status = ember_rpc_send(ar->tp, ar->ranks[m], ar->op_base + OP_DATA, iov, 2,
                                               NULL, oneway_done, out);
        if (status != EMBER_OK) {
            out->oneway_status = status; /* the callback will not run */
            ar_break(ar, status, -1, r->seq, 1,
                     "allreduce seq %" PRIu64 ": cannot send to %s (rank %d): %s", r->seq,
                     peer_name(ar, m), ar->ranks[m], ember_status_string(status));
        }
    }
}

ember_status_t ember_comm_allreduce_start(ember_comm_allreduce_t *ar,
                                          const ember_comm_allreduce_args_t *args,
                                          ember_comm_allreduce_req_t **req_p)
{
    const float *send;
    ember_comm_allreduce_req_t *r;
    ember_status_t status;

    EMBER_CHECK(start_check(ar, args, req_p, &send));
    if (!EMBER_RESERVE(ar->active, ar->active_capacity, ar->nactive + 1))
        return EMBER_ERR_NO_MEMORY;
    r = req_get(ar);
    if (!r)
        return EMBER_ERR_NO_MEMORY;
    r->input = send;
    r->data = args->recv;
    r->count = args->count;
    r->average = args->average;
    r->last_progress = now_s();
    if (ar->n == 1 || r->count == 0) {
        start_trivial(ar, r);
        *req_p = r;
        return EMBER_OK;
    }
    status = plan(ar, r);
    if (status != EMBER_OK) {
        r->released = 1;
        req_recycle(ar, r);
        return status;
    }
    r->seq = ar->next_seq++;
    r->receiving = 1;
    ar->active[ar->nactive++] = r;
    *req_p = r;
    if (r->kind == AR_KIND_SMALL)
        post_small(ar, r);
    else
        open_step(ar, r, 0);
    take_early(ar, r);
    return EMBER_OK;
}

ember_status_t ember_comm_allreduce_test(ember_comm_allreduce_req_t *req)
{
    if (!req)
        return EMBER_ERR_INVALID_PARAM;
    pump(req->ar);
    return req->status;
}

ember_status_t ember_comm_allreduce_wait(ember_comm_allreduce_req_t *req)
{
    ember_comm_allreduce_t *ar;
    ember_status_t status;

    if (!req)
        return EMBER_ERR_INVALID_PARAM;
    ar = req->ar;
    for (;;) {
        pump(ar);
        if (req->status != EMBER_INPROGRESS)
            break;
        ember_tp_wait(ar->tp, WAIT_SLICE_S);
    }
    status = req->status;
    /* A failed reduction may still have sends reading @data, and segments
     * being received into it in place (read by this process's own progress:
     * see place_segment): give them a moment to finish (they fail fast once
     * the peers know), then let go. */
    while (status < 0 && (req->first_pending < req->nsends || req->landing) &&
           now_s() - req->failed_at <= FAIL_GRACE_S) {
        ember_tp_wait(ar->tp, 0.01);
        pump(ar);
    }
    if (status < 0) {
        abandon_sends(req);
        if (req->landing)
            ember_warn("allreduce",
                       "seq %" PRIu64 ": %zu segment(s) still being "
                       "received into the result after the failure",
                       req->seq, req->landing);
    }
    req->released = 1;
    if (req->first_pending == req->nsends && !req->landing)
        req_recycle(ar, req);
    return status;
}

ember_status_t ember_comm_allreduce(ember_comm_allreduce_t *ar,
                                    const ember_comm_allreduce_args_t *args)
{
    ember_comm_allreduce_req_t *req;
    EMBER_CHECK(ember_comm_allreduce_start(ar, args, &req));
    return ember_comm_allreduce_wait(req);
}

const char *ember_comm_allreduce_error(const ember_comm_allreduce_t *ar)
{
    return ar && ar->error != EMBER_OK ? ar->error_text : "";
}
