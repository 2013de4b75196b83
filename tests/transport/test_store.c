/*
 * tests/transport/test_store: the rendezvous store's protocol and server, in
 * one process with a real server on 127.0.0.1 and real sockets as clients.
 *
 *   parse_replay     a request made for one connection's nonce and sequence
 *                    is refused with another nonce, another sequence, another
 *                    secret, a changed head, key or value; a whole one parses
 *   parse_partial    a request cut anywhere needs more bytes, never misreads
 *   parse_lengths    a key of 0 or 257 bytes, a value over 1 MiB, a bad magic
 *                    or operation: refused from the head alone
 *   forged           a SET under the wrong secret is refused and counted; the
 *                    key stays unwritten for the job's clients
 *   replayed         a request captured on one connection and sent again, on
 *                    it or on another, is refused
 *   stall            connections holding a partial request, or silent, are
 *                    dropped at the read deadline while a job's client is
 *                    served at once the whole time
 *   limits           values beyond the store's byte budget are refused, the
 *                    store keeps serving; a flood of unauthenticated 1 MiB
 *                    requests makes it allocate nothing
 *   arrivals         ARRIVE counts each rank once; WAIT_GE waits for them
 */
#define _GNU_SOURCE
#include "common/clock.h"
#include "transport/store.h"

#include "tests/engine/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static tp_secret_t secret_of(const char *text)
{
    tp_secret_t secret = {.length = strlen(text)};
    memcpy(secret.bytes, text, secret.length);
    return secret;
}

static const uint8_t nonce_a[TP_STORE_NONCE_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
static const uint8_t nonce_b[TP_STORE_NONCE_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11};

static ssize_t parse(const tp_secret_t *secret, const uint8_t *nonce, uint64_t seq,
                     const uint8_t *data, size_t length, const char **why_p)
{
    tp_store_request_t req;
    size_t need = 0;
    *why_p = NULL;
    return tp_store_request_parse(secret, nonce, seq, data, length, &req, &need, why_p);
}

static int case_parse_replay(void)
{
    tp_secret_t job = secret_of("job-secret"), other = secret_of("outsider");
    uint8_t request[512];
    const char *why;
    size_t n = tp_store_request_pack(&job, nonce_a, 7, TP_STORE_OP_SET, "ember/addr/3", 12, "value",
                                     5, 0, 0, request);
    tp_store_request_t req;
    size_t need;
    CHECK(tp_store_request_parse(&job, nonce_a, 7, request, n, &req, &need, &why) == (ssize_t)n,
          "a whole request did not parse: %s", why ? why : "");
    CHECK(req.op == TP_STORE_OP_SET && req.key_length == 12 &&
                  memcmp(req.key, "ember/addr/3", 12) == 0 && req.value_length == 5 &&
                  memcmp(req.value, "value", 5) == 0,
          "the request parsed wrong");
    CHECK(parse(&job, nonce_b, 7, request, n, &why) < 0, "another connection's nonce");
    CHECK(parse(&job, nonce_a, 8, request, n, &why) < 0, "a later sequence");
    CHECK(parse(&other, nonce_a, 7, request, n, &why) < 0, "another secret");
    size_t offsets[] = {
            4, 12, 16, 24, 40, sizeof(tp_store_head_t) + 3, sizeof(tp_store_head_t) + 13, n - 1};
    for (size_t k = 0; k < sizeof(offsets) / sizeof(offsets[0]); k++) {
        uint8_t changed[512];
        memcpy(changed, request, n);
        changed[offsets[k]] ^= 0x40;
        CHECK(parse(&job, nonce_a, 7, changed, n, &why) < 0, "a request changed at byte %zu parsed",
              offsets[k]);
    }
    return 0;
}

static int case_parse_partial(void)
{
    tp_secret_t job = secret_of("job-secret");
    uint8_t request[512];
    const char *why;
    size_t n = tp_store_request_pack(&job, nonce_a, 0, TP_STORE_OP_SET, "k", 1, "some value", 10, 0,
                                     0, request);
    for (size_t cut = 0; cut < n; cut++)
        CHECK(parse(&job, nonce_a, 0, request, cut, &why) == 0, "a request cut at %zu of %zu: %s",
              cut, n, why ? why : "parsed");
    return 0;
}

static int case_parse_lengths(void)
{
    tp_secret_t job = secret_of("job-secret");
    uint8_t *request = malloc(tp_store_request_size(300, 16));
    char key[300];
    const char *why;
    memset(key, 'k', sizeof(key));
    CHECK(request, "out of memory");
    /* Lengths beyond the limits: refused before the tag is even needed. */
    size_t n = tp_store_request_pack(&job, nonce_a, 0, TP_STORE_OP_SET, key, 257, "v", 1, 0, 0,
                                     request);
    CHECK(parse(&job, nonce_a, 0, request, sizeof(tp_store_head_t), &why) < 0, "a 257-byte key");
    tp_store_head_t head;
    n = tp_store_request_pack(&job, nonce_a, 0, TP_STORE_OP_SET, key, 1, "v", 1, 0, 0, request);
    memcpy(&head, request, sizeof(head));
    head.value_length = TP_STORE_MAX_VALUE + 1;
    memcpy(request, &head, sizeof(head));
    CHECK(parse(&job, nonce_a, 0, request, sizeof(head), &why) < 0 &&
                  strstr(why, "value over the limit"),
          "a value over 1 MiB: %s", why ? why : "accepted");
    memcpy(&head, request, sizeof(head));
    head.key_length = 0;
    memcpy(request, &head, sizeof(head));
    CHECK(parse(&job, nonce_a, 0, request, sizeof(head), &why) < 0, "an empty key");
    n = tp_store_request_pack(&job, nonce_a, 0, 99, key, 1, "v", 1, 0, 0, request);
    CHECK(parse(&job, nonce_a, 0, request, n, &why) < 0 && strstr(why, "operation"),
          "an unknown operation");
    request[0] ^= 1;
    CHECK(parse(&job, nonce_a, 0, request, n, &why) < 0 && strstr(why, "magic"), "a bad magic");
    free(request);
    return 0;
}

/* ---- a live server ---------------------------------------------------------- */

typedef struct {
    tp_store_server_t *server;
    int port;
    tp_secret_t secret;
} live_t;

static int live_start(live_t *live)
{
    live->secret = secret_of("job-secret");
    CHECK(tp_store_server_start("127.0.0.1", 0, &live->secret, &live->server) == EMBER_OK,
          "server start");
    live->port = tp_store_server_port(live->server);
    CHECK(live->port > 0, "no port");
    return 0;
}

/* A raw TCP connection to the store, its greeting (the nonce) read. */
static int raw_connect(const live_t *live, uint8_t nonce[TP_STORE_NONCE_SIZE])
{
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)live->port)};
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof(address)) != 0)
        return -1;
    uint8_t hello[24];
    if (nonce && (recv(fd, hello, sizeof(hello), MSG_WAITALL) != sizeof(hello)))
        return -1;
    if (nonce)
        memcpy(nonce, hello + 8, TP_STORE_NONCE_SIZE);
    return fd;
}

/* The status of the reply to what was sent on @fd (its tag not checked:
 * a refusal carries none), or 1 when the connection closed first. */
static int raw_status(int fd)
{
    uint8_t reply[64];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 5000) != 1 ||
        recv(fd, reply, sizeof(reply), MSG_WAITALL) != (ssize_t)sizeof(reply))
        return 1;
    int32_t status;
    memcpy(&status, reply + 4, sizeof(status));
    return status;
}

static int closed_within(int fd, double seconds)
{
    uint8_t sink[256];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    double deadline = ember_time_now() + seconds;
    while (ember_time_now() < deadline) {
        if (poll(&pfd, 1, 50) == 1 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) == 0)
            return 1;
    }
    return 0;
}

static int case_forged(void)
{
    live_t live;
    tp_secret_t other = secret_of("outsider");
    tp_store_client_t *client;
    uint8_t nonce[TP_STORE_NONCE_SIZE], request[512];
    if (live_start(&live))
        return 1;
    int fd = raw_connect(&live, nonce);
    CHECK(fd >= 0, "connect");
    size_t n = tp_store_request_pack(&other, nonce, 0, TP_STORE_OP_SET, "ember/proc/1", 12, "h 1",
                                     3, 0, 0, request);
    CHECK(send(fd, request, n, 0) == (ssize_t)n, "send");
    CHECK(raw_status(fd) == EMBER_ERR_AUTH, "a SET under another secret was not refused");
    CHECK(closed_within(fd, 3.0), "the refused connection stays open");
    close(fd);
    /* The job's own clients see nothing of it. */
    CHECK(tp_store_connect("127.0.0.1", live.port, &live.secret, 5, &client) == EMBER_OK,
          "job client");
    void *value = NULL;
    size_t length;
    CHECK(tp_store_get(client, "ember/proc/1", 0.2, &value, &length) == EMBER_ERR_TIMED_OUT,
          "the forged key was written");
    /* A client under another secret cannot even read. */
    tp_store_client_t *outsider;
    CHECK(tp_store_connect("127.0.0.1", live.port, &other, 5, &outsider) == EMBER_OK,
          "outsider connect");
    CHECK(tp_store_set(outsider, "x", "y", 1) == EMBER_ERR_AUTH, "outsider's SET");
    tp_store_disconnect(outsider);
    tp_store_counts_t counts;
    tp_store_server_counts(live.server, &counts);
    CHECK(counts.refused == 2, "%lu refusals counted, want 2", counts.refused);
    tp_store_disconnect(client);
    tp_store_server_stop(live.server, 1.0);
    return 0;
}

static int case_replayed(void)
{
    live_t live;
    uint8_t nonce1[TP_STORE_NONCE_SIZE], nonce2[TP_STORE_NONCE_SIZE], request[512];
    if (live_start(&live))
        return 1;
    int fd1 = raw_connect(&live, nonce1), fd2 = raw_connect(&live, nonce2);
    CHECK(fd1 >= 0 && fd2 >= 0, "connect");
    CHECK(memcmp(nonce1, nonce2, sizeof(nonce1)) != 0, "two connections, one nonce");
    /* A genuine request (as the job's client makes it) on connection 1... */
    size_t n = tp_store_request_pack(&live.secret, nonce1, 0, TP_STORE_OP_ADD, "counter", 7, NULL,
                                     0, 5, 0, request);
    CHECK(send(fd1, request, n, 0) == (ssize_t)n && raw_status(fd1) == EMBER_OK,
          "the genuine request");
    /* ...captured and sent again on it, and on connection 2. */
    CHECK(send(fd1, request, n, 0) == (ssize_t)n && raw_status(fd1) == EMBER_ERR_AUTH,
          "a replay on its own connection");
    CHECK(send(fd2, request, n, 0) == (ssize_t)n && raw_status(fd2) == EMBER_ERR_AUTH,
          "a replay on another connection");
    close(fd1);
    close(fd2);
    tp_store_client_t *client;
    int64_t value;
    CHECK(tp_store_connect("127.0.0.1", live.port, &live.secret, 5, &client) == EMBER_OK,
          "job client");
    CHECK(tp_store_add(client, "counter", 0, &value) == EMBER_OK && value == 5,
          "the counter is %lld: a replay was applied", (long long)value);
    tp_store_disconnect(client);
    tp_store_server_stop(live.server, 1.0);
    return 0;
}

static int case_stall(void)
{
    live_t live;
    int stalled[7], silent[3];
    tp_store_client_t *client;
    if (live_start(&live))
        return 1;
    for (int i = 0; i < 7; i++) {
        stalled[i] = raw_connect(&live, NULL);
        CHECK(stalled[i] >= 0 && send(stalled[i], "EMST", 4, 0) == 4, "stall %d", i);
    }
    for (int i = 0; i < 3; i++)
        CHECK((silent[i] = raw_connect(&live, NULL)) >= 0, "silent %d", i);
    CHECK(tp_store_connect("127.0.0.1", live.port, &live.secret, 5, &client) == EMBER_OK,
          "job client");
    /* Served at once while the others hold their connections. */
    double worst = 0;
    for (int i = 0; i < 50; i++) {
        double start = ember_time_now();
        int64_t value;
        CHECK(tp_store_add(client, "n", 1, &value) == EMBER_OK && value == i + 1, "add");
        double took = ember_time_now() - start;
        worst = took > worst ? took : worst;
        ember_time_sleep(0.05);
    }
    CHECK(worst < 0.5, "a request took %.3f s beside stalled connections", worst);
    for (int i = 0; i < 7; i++)
        CHECK(closed_within(stalled[i], 2.0), "a stalled connection was kept");
    for (int i = 0; i < 3; i++)
        CHECK(closed_within(silent[i], 2.0), "a silent connection was kept");
    tp_store_counts_t counts;
    tp_store_server_counts(live.server, &counts);
    CHECK(counts.stalled == 10, "%lu dropped, want 10", counts.stalled);
    for (int i = 0; i < 7; i++)
        close(stalled[i]);
    for (int i = 0; i < 3; i++)
        close(silent[i]);
    tp_store_disconnect(client);
    tp_store_server_stop(live.server, 1.0);
    return 0;
}

static long resident_kib(void)
{
    FILE *file = fopen("/proc/self/status", "r");
    char line[128];
    long kib = -1;
    while (file && fgets(line, sizeof(line), file))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (file)
        fclose(file);
    return kib;
}

static int case_limits(void)
{
    live_t live;
    tp_store_client_t *client;
    tp_secret_t other = secret_of("outsider");
    if (live_start(&live))
        return 1;
    CHECK(tp_store_connect("127.0.0.1", live.port, &live.secret, 5, &client) == EMBER_OK,
          "job client");
    void *big = calloc(1, TP_STORE_MAX_VALUE);
    CHECK(big, "out of memory");
    /* An outsider's flood of 1 MiB requests: each refused at its head. */
    long before = resident_kib();
    for (int i = 0; i < 200; i++) {
        tp_store_client_t *outsider;
        CHECK(tp_store_connect("127.0.0.1", live.port, &other, 5, &outsider) == EMBER_OK,
              "outsider connect %d", i);
        char key[32];
        snprintf(key, sizeof(key), "flood/%d", i);
        CHECK(tp_store_set(outsider, key, big, TP_STORE_MAX_VALUE) == EMBER_ERR_AUTH,
              "the flood's SET %d", i);
        tp_store_disconnect(outsider);
    }
    long grown = resident_kib() - before;
    CHECK(grown < 32 * 1024, "200 refused 1 MiB requests grew the process by %ld KiB", grown);
    /* The job's own: up to the byte budget, then refused, still serving. */
    int stored = 0;
    for (int i = 0; i < 80; i++) {
        char key[32];
        snprintf(key, sizeof(key), "big/%d", i);
        ember_status_t status = tp_store_set(client, key, big, TP_STORE_MAX_VALUE);
        if (status != EMBER_OK) {
            CHECK(status == EMBER_ERR_NO_MEMORY, "SET %d: %s", i, ember_status_string(status));
            break;
        }
        stored++;
    }
    CHECK(stored == 63, "%d MiB values stored, want 63 (the 64 MiB budget)", stored);
    CHECK(tp_store_set(client, "small", "x", 1) == EMBER_OK, "the store stopped serving");
    tp_store_counts_t counts;
    tp_store_server_counts(live.server, &counts);
    CHECK(counts.refused == 200 && counts.over_limits == 1, "%lu refused, %lu over the limits",
          counts.refused, counts.over_limits);
    free(big);
    tp_store_disconnect(client);
    tp_store_server_stop(live.server, 1.0);
    return 0;
}

static int case_arrivals(void)
{
    live_t live;
    tp_store_client_t *client;
    int64_t count = 0;
    if (live_start(&live))
        return 1;
    CHECK(tp_store_connect("127.0.0.1", live.port, &live.secret, 5, &client) == EMBER_OK, "client");
    CHECK(tp_store_arrive(client, "b", 3, &count) == EMBER_OK && count == 1, "first");
    CHECK(tp_store_arrive(client, "b", 3, &count) == EMBER_OK && count == 1,
          "a rank counted twice");
    CHECK(tp_store_arrive(client, "b", 0, &count) == EMBER_OK && count == 2, "second");
    CHECK(tp_store_wait_ge(client, "b", 3, 0.1) == EMBER_ERR_TIMED_OUT, "waited through");
    CHECK(tp_store_wait_ge(client, "b", 2, 0.1) == EMBER_OK, "not released");
    CHECK(tp_store_arrive(client, "b", -1, &count) == EMBER_ERR_OUT_OF_RANGE, "a negative rank");
    void *bits;
    size_t length;
    CHECK(tp_store_get(client, "b", 0.1, &bits, &length) == EMBER_OK && length == 1 &&
                  ((uint8_t *)bits)[0] == 0x09,
          "the arrival set");
    free(bits);
    tp_store_disconnect(client);
    tp_store_server_stop(live.server, 1.0);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"parse_replay", case_parse_replay},
            {"parse_partial", case_parse_partial},
            {"parse_lengths", case_parse_lengths},
            {"forged", case_forged},
            {"replayed", case_replayed},
            {"stall", case_stall},
            {"limits", case_limits},
            {"arrivals", case_arrivals},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
