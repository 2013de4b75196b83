/*
 * Allreduce tests: real processes (mp_spawn), real UCX endpoints.  CTest runs
 * every case over tcp and over shared memory.  Usage: test_allreduce CASE
 *
 * Results are checked against a double-precision sum of every rank's input
 * (each rank can regenerate them all), and every rank's result must be
 * bit-identical: ranks publish a checksum of their floats in the store.
 */
#include "engine/comm/allreduce.h"
#include "tests/common/mp_spawn.h"

#include <ember/transport.h>

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OP_AR   (EMBER_RPC_OP_USER_BASE + 16)
#define OP_AR2  (EMBER_RPC_OP_USER_BASE + 32)
#define OP_ECHO (EMBER_RPC_OP_USER_BASE + 48)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ember_tp_t *join(void)
{
    ember_tp_params_t params;
    ember_tp_t *tp;
    ember_tp_params_init(&params);
    ember_status_t status = ember_tp_create(&params, &tp);
    MP_CHECK(status == EMBER_OK, "ember_tp_create: %s", ember_status_string(status));
    return tp;
}

static ember_comm_allreduce_t *comm_all(ember_tp_t *tp, uint16_t op_base)
{
    int world = ember_tp_world_size(tp), ranks[64];
    ember_comm_allreduce_t *ar;
    for (int i = 0; i < world; i++)
        ranks[i] = i;
    ember_status_t status = ember_comm_allreduce_create(tp, ranks, world, op_base, &ar);
    MP_CHECK(status == EMBER_OK, "allreduce create: %s", ember_status_string(status));
    return ar;
}

/* A blocking in-place reduction (send left NULL). */
static ember_status_t reduce(ember_comm_allreduce_t *ar, float *data, size_t count, int average)
{
    const ember_comm_allreduce_args_t args = {.recv = data, .count = count, .average = average};
    return ember_comm_allreduce(ar, &args);
}

/* Input of @rank for reduction @tag, element @i: varied signs and scales. */
static float input(int rank, uint64_t tag, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull ^
                 (uint64_t)(rank + 1) * 0xbf58476d1ce4e5b9ull ^ (tag + 7) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 29;
    double unit = (double)(x >> 11) / 9007199254740992.0 - 0.5; /* [-0.5, 0.5) */
    double scale = (x & 3) == 0 ? 100.0 : (x & 3) == 1 ? 0.01 : 1.0;
    return (float)(unit * scale);
}

static void fill(float *data, size_t count, int rank, uint64_t tag)
{
    for (size_t i = 0; i < count; i++)
        data[i] = input(rank, tag, i);
}

/* Compare with the double sum over @members; returns the first bad index or -1. */
static void verify(const float *data, size_t count, const int *members, int n, int average,
                   uint64_t tag, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        double sum = 0, magnitude = 0;
        for (int m = 0; m < n; m++) {
            double v = input(members[m], tag, i);
            sum += v;
            magnitude += fabs(v);
        }
        if (average) {
            sum /= n;
            magnitude /= n;
        }
        double tolerance = 1e-6 * magnitude + 1e-30;
        MP_CHECK(fabs((double)data[i] - sum) <= tolerance,
                 "%s: element %zu of %zu is %.9g, want %.9g (tolerance %.3g)", what, i, count,
                 (double)data[i], sum, tolerance);
    }
}

static uint64_t checksum(const float *data, size_t count)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < count * sizeof(float); i++)
        hash = (hash ^ p[i]) * 1099511628211ull;
    return hash ^ count;
}

static void publish(ember_tp_t *tp, const char *key, int rank, uint64_t value)
{
    char full[160];
    snprintf(full, sizeof(full), "%.100s/%d", key, rank);
    MP_CHECK(ember_tp_store_set(tp, full, &value, sizeof(value)) == EMBER_OK, "store set");
}

/* Every member published its checksum under @key (after a barrier): same bits? */
static void same_bits(ember_tp_t *tp, const char *key, const int *members, int n, uint64_t mine)
{
    for (int m = 0; m < n; m++) {
        char full[160];
        void *value;
        size_t length;
        uint64_t theirs;
        snprintf(full, sizeof(full), "%.100s/%d", key, members[m]);
        MP_CHECK(ember_tp_store_get(tp, full, &value, &length) == EMBER_OK &&
                         length == sizeof(theirs),
                 "store get %s", full);
        memcpy(&theirs, value, sizeof(theirs));
        free(value);
        MP_CHECK(theirs == mine, "%s: rank %d's result differs in its bits from ours", key,
                 members[m]);
    }
}

/* ---- cases ---------------------------------------------------------------- */

/* 4097: past the one-step path's 16 KiB; 64000 and 65537: either side of a
 * TCP pair's 256 KiB. */
static const size_t counts[] = {0,     1,     7,     136,    1000,          4097,
                                16000, 64000, 65537, 100003, (1u << 20) + 3};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

/*
 * Sum and average of every count, in place and out of place (input left
 * untouched, the same bits as in place); bit-identical across ranks.
 */
static int case_sums(int rank, int world, void *arg)
{
    ember_tp_t *tp = join();
    ember_comm_allreduce_t *ar = comm_all(tp, OP_AR);
    int members[64];
    uint64_t sums[NCOUNTS][2];
    float *data = malloc(((1u << 20) + 3) * sizeof(float));
    float *send = malloc(((1u << 20) + 3) * sizeof(float));
    (void)arg;
    MP_CHECK(data && send, "out of memory");
    /* Overlapping but different buffers: refused before anything travels
     * (every rank does it, so no sequence number is skipped anywhere). */
    ember_comm_allreduce_args_t args = {.send = data, .recv = data + 1, .count = 1000};
    MP_CHECK(ember_comm_allreduce(ar, &args) == EMBER_ERR_INVALID_PARAM,
             "overlapping send and receive buffers were accepted");
    args.recv = NULL;
    MP_CHECK(ember_comm_allreduce(ar, &args) == EMBER_ERR_INVALID_PARAM,
             "no receive buffer was accepted");
    MP_CHECK(ember_comm_allreduce(ar, NULL) == EMBER_ERR_INVALID_PARAM,
             "no arguments were accepted");
    for (int i = 0; i < world; i++)
        members[i] = i;
    const char *tls = getenv("UCX_TLS");
    size_t small_want = world == 2 && tls && strncmp(tls, "tcp", 3) == 0
                                ? EMBER_ALLREDUCE_SMALL_PAIR_TCP_BYTES
                                : EMBER_ALLREDUCE_SMALL_BYTES;
    MP_CHECK(ember_comm_allreduce_small_bytes(ar) == small_want,
             "one-step path up to %zu B "
             "on %d members over %s, want %zu",
             ember_comm_allreduce_small_bytes(ar), world, tls ? tls : "UCX's default", small_want);
    for (size_t k = 0; k < NCOUNTS; k++) {
        for (int average = 0; average < 2; average++) {
            uint64_t tag = k * 2 + (uint64_t)average;
            char what[64];
            fill(data, counts[k], rank, tag);
            ember_status_t status = reduce(ar, data, counts[k], average);
            MP_CHECK(status == EMBER_OK, "allreduce of %zu: %s", counts[k],
                     ember_status_string(status));
            snprintf(what, sizeof(what), "%s of %zu floats on %d ranks",
                     average ? "average" : "sum", counts[k], world);
            verify(data, counts[k], members, world, average, tag, what);
            sums[k][average] = checksum(data, counts[k]);

            fill(send, counts[k], rank, tag);
            memset(data, 0xff, counts[k] * sizeof(float)); /* NaN */
            args = (ember_comm_allreduce_args_t){
                    .send = send, .recv = data, .count = counts[k], .average = average};
            status = ember_comm_allreduce(ar, &args);
            MP_CHECK(status == EMBER_OK, "out-of-place allreduce of %zu: %s", counts[k],
                     ember_status_string(status));
            MP_CHECK(checksum(data, counts[k]) == sums[k][average],
                     "out of place, %s of %zu floats: not the bits of in place",
                     average ? "average" : "sum", counts[k]);
            for (size_t i = 0; i < counts[k]; i++)
                MP_CHECK(send[i] == input(rank, tag, i),
                         "out of place, %zu floats: "
                         "input element %zu was changed",
                         counts[k], i);
            snprintf(what, sizeof(what), "sums/%zu/%d", k, average);
            publish(tp, what, rank, sums[k][average]);
        }
    }
    MP_CHECK(ember_tp_barrier(tp, "published") == EMBER_OK, "barrier");
    for (size_t k = 0; k < NCOUNTS; k++) {
        for (int average = 0; average < 2; average++) {
            char key[64];
            snprintf(key, sizeof(key), "sums/%zu/%d", k, average);
            same_bits(tp, key, members, world, sums[k][average]);
        }
    }
    ember_comm_allreduce_destroy(ar);
    ember_tp_destroy(tp);
    free(data);
    free(send);
    return 0;
}

/* The same with the ring forced where recursive halving is the default. */
static int case_sums_ring(int rank, int world, void *arg)
{
    setenv("EMBER_ALLREDUCE_ALGO", "ring", 1);
    return case_sums(rank, world, arg);
}

/*
 * Eight buckets in flight at once, mixed sizes and algorithms; one rank
 * starts late each round (its peers' messages arrive first and are held),
 * and ranks wait in different orders.
 */
static int case_overlap(int rank, int world, void *arg)
{
    static const size_t sizes[8] = {136, 5000, 70000, 1, 0, 300000, 17, 1000};
    ember_tp_t *tp = join();
    ember_comm_allreduce_t *ar = comm_all(tp, OP_AR);
    ember_comm_allreduce_req_t *reqs[8];
    float *buckets[8];
    uint64_t sums[6][8];
    int members[64];
    (void)arg;
    for (int i = 0; i < world; i++)
        members[i] = i;
    for (int b = 0; b < 8; b++) {
        buckets[b] = malloc((sizes[b] + 1) * sizeof(float));
        MP_CHECK(buckets[b], "out of memory");
    }
    for (int round = 0; round < 6; round++) {
        if (rank == round % world)
            usleep(300 * 1000); /* not progressing: the others run ahead */
        for (int b = 0; b < 8; b++) {
            uint64_t tag = 1000 + (uint64_t)round * 8 + (uint64_t)b;
            fill(buckets[b], sizes[b], rank, tag);
            /* send == recv: in place, as send NULL is elsewhere. */
            const ember_comm_allreduce_args_t args = {
                    .send = buckets[b], .recv = buckets[b], .count = sizes[b], .average = b & 1};
            MP_CHECK(ember_comm_allreduce_start(ar, &args, &reqs[b]) == EMBER_OK, "start bucket %d",
                     b);
        }
        /* Poll one bucket with test, then wait all in a rank-dependent order. */
        ember_status_t status;
        double until = now_s() + 60;
        while ((status = ember_comm_allreduce_test(reqs[2])) == EMBER_INPROGRESS && now_s() < until)
            ember_tp_wait(tp, 0.01);
        MP_CHECK(status == EMBER_OK, "test bucket 2: %s", ember_status_string(status));
        for (int i = 0; i < 8; i++) {
            int b = (rank + round) & 1 ? 7 - i : i;
            status = ember_comm_allreduce_wait(reqs[b]);
            MP_CHECK(status == EMBER_OK, "round %d bucket %d: %s", round, b,
                     ember_status_string(status));
        }
        for (int b = 0; b < 8; b++) {
            char what[96];
            uint64_t tag = 1000 + (uint64_t)round * 8 + (uint64_t)b;
            snprintf(what, sizeof(what), "round %d bucket %d (%zu floats)", round, b, sizes[b]);
            verify(buckets[b], sizes[b], members, world, b & 1, tag, what);
            snprintf(what, sizeof(what), "overlap/%d/%d", round, b);
            sums[round][b] = checksum(buckets[b], sizes[b]);
            publish(tp, what, rank, sums[round][b]);
        }
    }
    MP_CHECK(ember_tp_barrier(tp, "published") == EMBER_OK, "barrier");
    for (int round = 0; round < 6; round++) {
        for (int b = 0; b < 8; b++) {
            char key[64];
            snprintf(key, sizeof(key), "overlap/%d/%d", round, b);
            same_bits(tp, key, members, world, sums[round][b]);
        }
    }
    ember_comm_allreduce_destroy(ar);
    ember_tp_destroy(tp);
    for (int b = 0; b < 8; b++)
        free(buckets[b]);
    return 0;
}

/* A communicator of ranks {3, 1} of 4 (ring order 3 -> 1); 0 and 2 idle-serve. */
static int case_subset(int rank, int world, void *arg)
{
    static const int members[2] = {3, 1};
    ember_tp_t *tp = join();
    ember_comm_allreduce_t *ar = NULL;
    uint64_t sums[NCOUNTS];
    float *data = malloc(((1u << 20) + 3) * sizeof(float));
    (void)arg;
    (void)world;
    MP_CHECK(data, "out of memory");
    if (rank == 0 || rank == 2) {
        ember_status_t status = ember_comm_allreduce_create(tp, members, 2, OP_AR, &ar);
        MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "non-member create: %s",
                 ember_status_string(status));
    } else {
        MP_CHECK(ember_comm_allreduce_create(tp, members, 2, OP_AR, &ar) == EMBER_OK, "create");
        for (size_t k = 0; k < NCOUNTS; k++) {
            char what[64];
            fill(data, counts[k], rank, 500 + k);
            ember_status_t status = reduce(ar, data, counts[k], 1);
            MP_CHECK(status == EMBER_OK, "allreduce of %zu: %s", counts[k],
                     ember_status_string(status));
            snprintf(what, sizeof(what), "subset average of %zu", counts[k]);
            verify(data, counts[k], members, 2, 1, 500 + k, what);
            sums[k] = checksum(data, counts[k]);
            snprintf(what, sizeof(what), "subset/%zu", k);
            publish(tp, what, rank, sums[k]);
        }
    }
    /* The idle ranks wait here, serving the transport. */
    MP_CHECK(ember_tp_barrier(tp, "subset-done") == EMBER_OK, "barrier");
    if (ar) {
        for (size_t k = 0; k < NCOUNTS; k++) {
            char key[64];
            snprintf(key, sizeof(key), "subset/%zu", k);
            same_bits(tp, key, members, 2, sums[k]);
        }
        ember_comm_allreduce_destroy(ar);
    }
    ember_tp_destroy(tp);
    free(data);
    return 0;
}

/* Rank 2 dies (kill -9) in the middle of a reduction: the others fail fast. */
static int case_kill(int rank, int world, void *arg)
{
    enum {
        VICTIM = 2,
        DIE_AT = 7
    };
    ember_tp_t *tp;
    ember_comm_allreduce_t *ar;
    float *data = malloc(60000 * sizeof(float));
    (void)arg;
    MP_CHECK(data, "out of memory");
    setenv("EMBER_SHUTDOWN_TIMEOUT", "2", 1);
    tp = join();
    ar = comm_all(tp, OP_AR);
    for (int it = 0; it < 100000; it++) {
        size_t count = it & 1 ? 60000 : 136; /* ring and small alike */
        const ember_comm_allreduce_args_t args = {.recv = data, .count = count};
        fill(data, count, rank, (uint64_t)it);
        /* Everyone through the reduction before: a reduction done here may
         * still have its last messages on their way to the others, and a
         * victim dying with them would fail that one, not the one it died in. */
        if (it == DIE_AT)
            MP_CHECK(ember_tp_barrier(tp, "before-kill") == EMBER_OK, "barrier");
        if (rank == VICTIM && it == DIE_AT) {
            ember_comm_allreduce_req_t *req;
            MP_CHECK(ember_comm_allreduce_start(ar, &args, &req) == EMBER_OK, "start");
            ember_tp_progress(tp); /* some of it is out */
            double at = now_s();
            MP_CHECK(ember_tp_store_set(tp, "killed_at", &at, sizeof(at)) == EMBER_OK, "store");
            raise(SIGKILL);
        }
        ember_status_t status = ember_comm_allreduce(ar, &args);
        if (status == EMBER_OK)
            continue;
        double failed_at = now_s(), killed_at;
        void *value;
        size_t length;
        const char *text = ember_comm_allreduce_error(ar);
        MP_CHECK(rank != VICTIM, "the victim failed first: %s", text);
        MP_CHECK(status == EMBER_ERR_PEER_LOST || status == EMBER_ERR_TIMED_OUT,
                 "reduction %d failed with %s", it, ember_status_string(status));
        MP_CHECK(it >= DIE_AT, "failed at %d, before the victim died", it);
        MP_CHECK(ember_tp_store_get(tp, "killed_at", &value, &length) == EMBER_OK &&
                         length == sizeof(killed_at),
                 "killed_at");
        memcpy(&killed_at, value, sizeof(killed_at));
        free(value);
        MP_CHECK(failed_at - killed_at < 5.0, "failed %.2f s after the kill",
                 failed_at - killed_at);
        MP_CHECK(strstr(text, ember_tp_peer_name(tp, VICTIM)) != NULL, "error does not name %s: %s",
                 ember_tp_peer_name(tp, VICTIM), text);
        printf("rank %d: reduction %d failed %.3f s after the kill: %s: %s\n", rank, it,
               failed_at - killed_at, ember_status_string(status), text);
        /* Broken for good: later reductions fail at once. */
        ember_comm_allreduce_req_t *req;
        double t0 = now_s();
        MP_CHECK(ember_comm_allreduce_start(ar, &args, &req) == status && now_s() - t0 < 0.5,
                 "start on a broken communicator");
        /* Rank 0 serves the store, and a survivor of a lost rank leaves
         * without a last barrier: it stays until the others have read it. */
        char key[32];
        snprintf(key, sizeof(key), "checked/%d", rank);
        MP_CHECK(ember_tp_store_set(tp, key, "1", 1) == EMBER_OK, "store");
        for (int other = 0; rank == 0 && other < world; other++) {
            snprintf(key, sizeof(key), "checked/%d", other);
            if (other == VICTIM)
                continue;
            MP_CHECK(ember_tp_store_get(tp, key, &value, &length) == EMBER_OK, "rank %d's check",
                     other);
            free(value);
        }
        ember_comm_allreduce_destroy(ar);
        ember_tp_destroy(tp);
        free(data);
        return 0;
    }
    MP_CHECK(0, "no reduction failed");
    return 1;
}

/*
 * Members that disagree on a count (a caller's bug): every member gets an
 * error that names the counts and a peer, in well under the stall timeout,
 * for a small (one-way) reduction and for a ring one.
 */
static int case_mismatch(int rank, int world, void *arg)
{
    static const size_t agreed[2] = {136, 60000};
    ember_tp_t *tp;
    ember_comm_allreduce_t *ar;
    float *data = malloc(60001 * sizeof(float));
    (void)arg;
    MP_CHECK(data, "out of memory");
    setenv("EMBER_SHUTDOWN_TIMEOUT", "2", 1);
    tp = join();
    for (int k = 0; k < 2; k++) {
        ar = comm_all(tp, (uint16_t)(OP_AR + 4 * k));
        fill(data, agreed[k], rank, 1);
        MP_CHECK(reduce(ar, data, agreed[k], 0) == EMBER_OK, "agreeing reduction");
        /* Everyone is done with it: the break below fails every reduction
         * still in flight (as an NCCL abort), and a small one completes on a
         * member only when the others' one-way vectors have arrived. */
        MP_CHECK(ember_tp_barrier(tp, k ? "ring-agreed" : "small-agreed") == EMBER_OK, "barrier");
        size_t count = agreed[k] + (rank == world - 1); /* the last rank: one more */
        double start = now_s();
        ember_status_t status = reduce(ar, data, count, 0);
        const char *text = ember_comm_allreduce_error(ar);
        MP_CHECK(status == EMBER_ERR_BAD_MESSAGE, "%zu floats against %zu: %s (%s)", count,
                 agreed[k], ember_status_string(status), text);
        MP_CHECK(now_s() - start < 5.0, "the mismatch took %.1f s to surface", now_s() - start);
        MP_CHECK(strstr(text, "floats") && strstr(text, "reduces"),
                 "the error does not name the counts: %s", text);
        printf("rank %d, %s: %s\n", rank, k ? "ring" : "small", text);
        MP_CHECK(ember_tp_barrier(tp, k ? "ring-done" : "small-done") == EMBER_OK, "barrier");
        ember_comm_allreduce_destroy(ar);
    }
    ember_tp_destroy(tp);
    free(data);
    return 0;
}

static int call_status(ember_tp_t *tp, int peer, uint16_t op, const void *data, size_t length)
{
    ember_iov_t iov = {.buffer = data, .length = length};
    return ember_rpc_call(tp, peer, op, &iov, length ? 1 : 0, NULL, 0, NULL);
}

static int send_wire(ember_tp_t *tp, ember_comm_allreduce_wire_t hdr, size_t payload_floats)
{
    size_t length = sizeof(hdr) + payload_floats * sizeof(float);
    unsigned char *buffer = calloc(1, length);
    MP_CHECK(buffer, "out of memory");
    memcpy(buffer, &hdr, sizeof(hdr));
    int status = call_status(tp, 1, OP_AR, buffer, length);
    free(buffer);
    return status;
}

/* A valid small vector of 136 floats, the base of the malformed ones. */
static const ember_comm_allreduce_wire_t good_small = {.magic = EMBER_ALLREDUCE_MAGIC,
                                                       .kind = EMBER_ALLREDUCE_KIND_SMALL,
                                                       .seq = 0,
                                                       .count = 136,
                                                       .nfloats = 136};

/* Rank 0: malformed data, hello and abort messages to rank 1, each of them
 * answered with an error. */
static void send_malformed(ember_tp_t *tp, const ember_comm_allreduce_t *ar)
{
    ember_comm_allreduce_wire_t hdr;
    uint8_t junk[5] = {1, 2, 3, 4, 5};
    struct {
        const char *what;
        ember_comm_allreduce_wire_t hdr;
        size_t payload;
    } bad[16];
    int nbad = 0;
#define BAD(text, field_edit, floats) \
    do {                              \
        hdr = good_small;             \
        hdr.seq = 1;                  \
        field_edit;                   \
        bad[nbad].what = text;        \
        bad[nbad].hdr = hdr;          \
        bad[nbad++].payload = floats; \
    } while (0)
    BAD("bad magic", hdr.magic = 0xdeadbeef, 136);
    BAD("unknown kind", hdr.kind = 7, 136);
    BAD("payload shorter than the header says", (void)0, 135);
    BAD("payload longer than the header says", (void)0, 137);
    BAD("small with zero floats", (hdr.count = 0, hdr.nfloats = 0), 0);
    const uint64_t too_big = ember_comm_allreduce_small_bytes(ar) / sizeof(float) + 1;
    BAD("small too big", (hdr.count = too_big, hdr.nfloats = too_big), too_big);
    BAD("small with a step", hdr.step = 1, 136);
    BAD("small count differs from floats", hdr.count = 137, 136);
    BAD("ring step out of range",
        (hdr.kind = EMBER_ALLREDUCE_KIND_RING, hdr.count = 100000, hdr.step = 2), 136);
    BAD("ring count in the small range", (hdr.kind = EMBER_ALLREDUCE_KIND_RING, hdr.count = 1000),
        136);
    BAD("ring offset past the end",
        (hdr.kind = EMBER_ALLREDUCE_KIND_RING, hdr.count = 100000, hdr.offset = 100000), 136);
    BAD("ring segment too long",
        (hdr.kind = EMBER_ALLREDUCE_KIND_RING, hdr.count = 1u << 22, hdr.nfloats = 1u << 20),
        1u << 20);
    BAD("stale sequence number", hdr.seq = 0, 136);
    BAD("sequence number far ahead", hdr.seq = 1u << 30, 136);
    BAD("sequence number wraps", hdr.seq = UINT64_MAX, 136);
#undef BAD
    for (int i = 0; i < nbad; i++) {
        int status = send_wire(tp, bad[i].hdr, bad[i].payload);
        MP_CHECK(status == EMBER_ERR_BAD_MESSAGE, "%s: answered %s", bad[i].what,
                 ember_status_string(status));
    }
    MP_CHECK(call_status(tp, 1, OP_AR, junk, sizeof(junk)) == EMBER_ERR_BAD_MESSAGE,
             "short message");
    MP_CHECK(call_status(tp, 1, OP_AR + 1, junk, sizeof(junk)) == EMBER_ERR_BAD_MESSAGE,
             "short hello");
    uint64_t wrong_hash = 42;
    MP_CHECK(call_status(tp, 1, OP_AR + 1, &wrong_hash, sizeof(wrong_hash)) ==
                     EMBER_ERR_INVALID_PARAM,
             "hello with another member list");
    MP_CHECK(call_status(tp, 1, OP_AR + 2, junk, sizeof(junk)) == EMBER_ERR_BAD_MESSAGE,
             "short abort");
}

/* Rank 0: a plausible message for a reduction rank 1 has not started: held,
 * then refused when it starts seq 1 with another count. */
static void send_held_bogus(ember_tp_t *tp, ember_comm_allreduce_t *ar, float *data, int rank)
{
    ember_comm_allreduce_wire_t hdr = good_small;
    ember_future_t *future;
    size_t length = sizeof(hdr) + 136 * sizeof(float);
    unsigned char *buffer = calloc(1, length);
    MP_CHECK(buffer, "out of memory");
    hdr.seq = 1;
    hdr.kind = EMBER_ALLREDUCE_KIND_RING;
    hdr.count = 100000;
    memcpy(buffer, &hdr, sizeof(hdr));
    ember_iov_t iov = {.buffer = buffer, .length = length};
    MP_CHECK(ember_rpc_call_async(tp, 1, OP_AR, &iov, 1, NULL, 0, 0, &future) == EMBER_OK,
             "early call");
    MP_CHECK(ember_tp_barrier(tp, "hostile-done") == EMBER_OK, "barrier");
    fill(data, 136, rank, 2);
    MP_CHECK(reduce(ar, data, 136, 0) == EMBER_OK, "second allreduce");
    int status = ember_future_wait(future);
    MP_CHECK(status == EMBER_ERR_BAD_MESSAGE, "held bogus message: %s",
             ember_status_string(status));
    ember_future_release(future);
    free(buffer);
}

/* Hostile input: each malformed message is answered with an error; the
 * communicator {0, 1} keeps working.  Rank 2 is not a member. */
static int case_malformed(int rank, int world, void *arg)
{
    static const int members[2] = {0, 1};
    ember_tp_t *tp = join();
    ember_comm_allreduce_t *ar = NULL;
    float data[136];
    (void)arg;
    (void)world;
    if (rank < 2) {
        MP_CHECK(ember_comm_allreduce_create(tp, members, 2, OP_AR, &ar) == EMBER_OK, "create");
        fill(data, 136, rank, 1);
        MP_CHECK(reduce(ar, data, 136, 0) == EMBER_OK, "first allreduce");
        verify(data, 136, members, 2, 0, 1, "first allreduce");
    }
    MP_CHECK(ember_tp_barrier(tp, "created") == EMBER_OK, "barrier");
    if (rank == 2) {
        ember_comm_allreduce_wire_t hdr = good_small;
        hdr.seq = 1;
        MP_CHECK(send_wire(tp, hdr, 136) == EMBER_ERR_BAD_MESSAGE, "non-member accepted");
    }
    MP_CHECK(ember_tp_barrier(tp, "stranger") == EMBER_OK, "barrier");
    if (rank == 0) {
        send_malformed(tp, ar);
        send_held_bogus(tp, ar, data, rank);
    } else {
        MP_CHECK(ember_tp_barrier(tp, "hostile-done") == EMBER_OK, "barrier");
        if (rank == 1) {
            fill(data, 136, rank, 2);
            MP_CHECK(reduce(ar, data, 136, 0) == EMBER_OK, "second allreduce");
        }
    }
    if (ar) {
        verify(data, 136, members, 2, 0, 2, "second allreduce");
        MP_CHECK(ember_comm_allreduce_error(ar)[0] == '\0', "communicator broke: %s",
                 ember_comm_allreduce_error(ar));
    }
    MP_CHECK(ember_tp_barrier(tp, "done") == EMBER_OK, "barrier");
    if (ar)
        ember_comm_allreduce_destroy(ar);
    ember_tp_destroy(tp);
    return 0;
}

static void on_echo(ember_rpc_req_t *req, void *arg)
{
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    ember_iov_t iov = {.buffer = data, .length = length};
    ++*(int *)arg;
    ember_rpc_reply(req, EMBER_OK, &iov, 1);
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The big reductions of case latency, all in place on one buffer: the
 * first sums the two ranks' inputs (one float addition an element, the
 * same in either order), each further one doubles that, which floats do
 * exactly.  After @reduces of them every element must be, to the bit,
 * (a + b) * 2^(reduces - 1). */
static void verify_doubled(const float *data, size_t count, uint64_t tag, int reduces)
{
    for (size_t i = 0; i < count; i++) {
        const float sum = input(0, tag, i) + input(1, tag, i);
        const float want = ldexpf(sum, reduces - 1);
        MP_CHECK(data[i] == want,
                 "big allreduce: element %zu of %zu is %.9g after %d in-place sums, want "
                 "%.9g",
                 i, count, (double)data[i], reduces, (double)want);
    }
}

/* Timed, not asserted: per-allreduce time for 136 floats and for 16 MiB
 * between 2 ranks.  Asserted: what every one of those reductions left. */
static int case_latency(int rank, int world, void *arg)
{
    enum {
        WARMUP = 200,
        ITERS = 3000,
        BIG_ITERS = 10
    };
    ember_tp_t *tp = join();
    ember_comm_allreduce_t *ar;
    static double times[ITERS];
    float data[136];
    int echoed = 0;
    (void)arg;
    (void)world;
    ember_rpc_register(tp, OP_ECHO, on_echo, &echoed);
    ar = comm_all(tp, OP_AR);
    for (int i = 0; i < WARMUP; i++)
        MP_CHECK(reduce(ar, data, 136, 1) == EMBER_OK, "warmup");
    MP_CHECK(ember_tp_barrier(tp, "timed") == EMBER_OK, "barrier");
    double start = now_s();
    for (int i = 0; i < ITERS; i++) {
        double t0 = now_s();
        MP_CHECK(reduce(ar, data, 136, 1) == EMBER_OK, "allreduce");
        times[i] = now_s() - t0;
    }
    double total = now_s() - start;
    fill(data, 136, rank, 3);
    MP_CHECK(reduce(ar, data, 136, 1) == EMBER_OK, "checked allreduce");
    verify(data, 136, (const int[]){0, 1}, 2, 1, 3, "latency case");
    MP_CHECK(ember_tp_barrier(tp, "rpc") == EMBER_OK, "barrier");
    if (rank == 0) {
        qsort(times, ITERS, sizeof(times[0]), compare_double);
        /* The raw RPC round trip of the same bytes, for scale. */
        double rpc_start = now_s();
        for (int i = 0; i < ITERS; i++)
            MP_CHECK(call_status(tp, 1, OP_ECHO, data, sizeof(data)) == EMBER_OK, "echo");
        double rpc = (now_s() - rpc_start) / ITERS;
        printf("latency: allreduce of 136 floats, 2 ranks: mean %.1f us, median %.1f "
               "us, p99 %.1f us; RPC round trip of 544 B: %.1f us\n",
               total / ITERS * 1e6, times[ITERS / 2] * 1e6, times[ITERS * 99 / 100] * 1e6,
               rpc * 1e6);
    } else {
        double until = now_s() + 60;
        while (echoed < ITERS && now_s() < until)
            ember_tp_wait(tp, 0.1); /* serve the echoes promptly */
    }
    MP_CHECK(ember_tp_barrier(tp, "big") == EMBER_OK, "barrier");
    size_t big = 1u << 22; /* 16 MiB: the ring */
    float *buffer = malloc(big * sizeof(float));
    MP_CHECK(buffer, "out of memory");
    fill(buffer, big, rank, 4);
    MP_CHECK(reduce(ar, buffer, big, 0) == EMBER_OK, "big warmup");
    start = now_s();
    for (int i = 0; i < BIG_ITERS; i++)
        MP_CHECK(reduce(ar, buffer, big, 0) == EMBER_OK, "big");
    double per = (now_s() - start) / BIG_ITERS;
    verify_doubled(buffer, big, 4, 1 + BIG_ITERS);
    if (rank == 0)
        printf("latency: allreduce of %zu MiB, 2 ranks: %.2f ms (%.2f GB/s algorithm "
               "bandwidth)\n",
               big * sizeof(float) >> 20, per * 1e3, (double)big * sizeof(float) / per / 1e9);
    free(buffer);
    ember_comm_allreduce_destroy(ar);
    ember_tp_destroy(tp);
    return 0;
}

static const mp_case_t cases[] = {
        {"sum2", case_sums, 2, 0},          {"sum3", case_sums, 3, 0},
        {"sum4", case_sums, 4, 0},          {"sum8", case_sums, 8, 0},
        {"sum4ring", case_sums_ring, 4, 0}, {"overlap", case_overlap, 4, 0},
        {"overlap2", case_overlap, 2, 0},   {"subset", case_subset, 4, 0},
        {"kill", case_kill, 4, 1u << 2},    {"malformed", case_malformed, 3, 0},
        {"latency", case_latency, 2, 0},    {"mismatch", case_mismatch, 3, 0},
};

int main(int argc, char **argv)
{
    return mp_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 110);
}
