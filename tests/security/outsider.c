/*
 * tests/security/outsider: a process on the job's network without the job
 * secret, doing what the security tests say an outsider cannot get away
 * with.  It speaks the store's and the transport's wire formats itself
 * (their structs from transport/), with a secret of its own.
 *
 *   outsider store-stall HOST PORT N SECONDS
 *       N connections, each sending 4 bytes of a request, held until the
 *       store closes them or SECONDS pass: prints when each was closed and
 *       the bytes that came back (only the greeting may)
 *   outsider store-flood HOST PORT COUNT BYTES
 *       COUNT requests of BYTES-byte values under the wrong secret
 *   outsider store-hold HOST PORT N SECONDS
 *       keep N connections open to the store for SECONDS, opening a new one
 *       for each it closes: how many it opened, and the CPU seconds this
 *       process used ("cpu S"); with a last argument `closed`, at once
 *       (a control aimed at a port where nothing listens)
 *   outsider store-ports SECRET_FILE
 *       the candidate ports of `tcp://HOST:auto` for the secret in the file
 *   outsider store-forge HOST PORT KEY TEXT
 *       SET KEY (e.g. ember/addr/3, ember/proc/3) to TEXT, GET ember/addr/0
 *   outsider ucx-stranger DIR
 *       connect to the rank whose worker address is DIR/target.addr, claim
 *       to be rank 0, answer its challenge under the wrong secret, then send
 *       requests (OP 100.. 120) anyway; waits for the answers
 *   outsider ucx-pickle DIR NAME RANK OP PAYLOAD_FILE
 *       connect to the rank RANK whose worker address is DIR/NAME, send it
 *       requests of op OP carrying PAYLOAD_FILE's bytes (a pickle that
 *       would run a command, for the Python ranks), claim to be another
 *       rank, answer its challenge under the wrong secret, and send them
 *       again: how many were answered
 *   outsider ucx-relay DIR
 *       publish its own worker address as DIR/outsider.addr, then relay:
 *       the HELLO a rank sends it (believing it is the rank at
 *       DIR/target.addr) goes to that rank, the challenge back, a request
 *       after it; waits for anything to come of it
 *   outsider ucx-stall DIR SECONDS
 *       connect to DIR/target.addr, post a request and a HELLO, then hold
 *       the endpoint SECONDS without ever progressing, and exit
 *   outsider ucx-hello-flood DIR SECONDS flood|control
 *       HELLOs with junk proofs to DIR/target.addr as fast as they go for
 *       SECONDS, or (control) the same endpoint and a loop as busy that
 *       sends nothing; prints its count and CPU seconds
 *   outsider ucx-forge DIR
 *       watch lo (root) for rank 0's HELLO to rank 1 over tcp, answer it
 *       from its own endpoint to rank 0 (DIR/victim.addr) with a forged
 *       CHALLENGE, then rank 1's real challenge with forged refusals
 *   outsider job-ucx PORT SECONDS RANKS HOLD
 *       watch lo's traffic (root) for SECONDS for worker addresses in
 *       clear in the traffic of the store at PORT; to each of RANKS (e.g.
 *       0,3) found: a stalled wire-up (as ucx-stall, held HOLD seconds),
 *       then from another endpoint 200,000 HELLOs, 100,000 messages of
 *       unknown ids and six 64 MiB eager ones; exits 1 when the traffic gave
 *       an address away
 *   outsider ucx-flood DIR COUNT NAME...
 *       COUNT active messages to each worker whose address is DIR/NAME,
 *       with AM ids no one registered (8..31 and a few far larger ones;
 *       every 1000th a 256 KiB one, which travels by rendezvous): prints
 *       how many went, exits 0 once all are sent (the ranks' logs are the
 *       test's to judge)
 *
 * Each prints one line per attempt and a summary ("refused N of N"), and
 * exits 0 when everything it tried was refused or went unanswered, 1 when
 * the job let something through, 2 on bad usage or a broken test set-up.
 * Stores are reached at HOST:PORT, retried for up to 30 s (the job may be
 * starting).
 */
#define _GNU_SOURCE
#include "common/clock.h"
#include "transport/store.h"
#include "transport/tp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static const char wrong_secret[] = "an outsider's guess at the secret";

/* The CPU seconds this process has used, user and system. */
static double cpu_seconds(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 +
           (double)usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
}

static tp_secret_t outsider_secret(void)
{
    tp_secret_t secret = {.length = sizeof(wrong_secret) - 1};
    memcpy(secret.bytes, wrong_secret, secret.length);
    return secret;
}

/* ---- the store -------------------------------------------------------------- */

static int store_connect(const char *host, int port)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    double deadline = ember_time_now() + 30.0;
    while (ember_time_now() < deadline) {
        if (getaddrinfo(host, service, &hints, &ai) == 0) {
            int fd = socket(ai->ai_family, SOCK_STREAM, 0);
            int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
            freeaddrinfo(ai);
            if (ok)
                return fd;
            if (fd >= 0)
                close(fd);
        }
        ember_time_sleep(0.02);
    }
    return -1;
}

/* The store's greeting on @fd: its nonce for the connection. */
static int store_greeting(int fd, uint8_t nonce[TP_STORE_NONCE_SIZE])
{
    uint8_t hello[24];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 5000) != 1 || recv(fd, hello, sizeof(hello), MSG_WAITALL) != 24)
        return -1;
    memcpy(nonce, hello + 8, TP_STORE_NONCE_SIZE);
    return 0;
}

/* The status in the reply on @fd, or 1 when the store closed first. */
static int store_status(int fd)
{
    uint8_t reply[64];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 5000) != 1 || recv(fd, reply, sizeof(reply), MSG_WAITALL) != 64)
        return 1;
    int32_t status;
    memcpy(&status, reply + 4, sizeof(status));
    return status;
}

/* One request under the wrong secret on a fresh connection: 1 when refused. */
static int store_try(const char *host, int port, uint8_t op, const char *key, const void *value,
                     size_t length)
{
    tp_secret_t secret = outsider_secret();
    uint8_t nonce[TP_STORE_NONCE_SIZE];
    int fd = store_connect(host, port);
    if (fd < 0 || store_greeting(fd, nonce) != 0) {
        fprintf(stderr, "outsider: no store at %s:%d\n", host, port);
        exit(2);
    }
    uint8_t *request = malloc(tp_store_request_size(strlen(key), length));
    if (!request)
        exit(2);
    size_t n = tp_store_request_pack(&secret, nonce, 0, op, key, strlen(key), value, length, 0, 0,
                                     request);
    /* The store may close before all of a big value is in: that is a refusal. */
    ssize_t sent = send(fd, request, n, MSG_NOSIGNAL);
    (void)sent;
    free(request);
    int status = store_status(fd);
    close(fd);
    return status != EMBER_OK;
}

/* Each of @count connections sends 4 bytes of a request, then waits for the
 * store to close it, for up to @seconds: how long after its 4 bytes each
 * was closed, and how many bytes came back on it (the store's greeting,
 * 24, and nothing more: no reply to a request it never got whole). */
static int store_stall(const char *host, int port, int count, double seconds)
{
    struct pollfd *pfds = calloc((size_t)count, sizeof(*pfds));
    double *sent_at = calloc((size_t)count, sizeof(double));
    double *closed_after = calloc((size_t)count, sizeof(double));
    size_t *received = calloc((size_t)count, sizeof(size_t));
    if (!pfds || !sent_at || !closed_after || !received)
        return 2;
    for (int i = 0; i < count; i++) {
        pfds[i] = (struct pollfd){.fd = store_connect(host, port), .events = POLLIN};
        if (pfds[i].fd < 0 || send(pfds[i].fd, "EMST", 4, MSG_NOSIGNAL) != 4) {
            fprintf(stderr, "outsider: stall connection %d failed\n", i);
            return 2;
        }
        sent_at[i] = ember_time_now();
        closed_after[i] = -1;
    }
    printf("outsider: %d connections hold 4 bytes of a request\n", count);
    fflush(stdout);
    int still_open = count;
    double deadline = ember_time_now() + seconds;
    while (still_open && ember_time_now() < deadline) {
        if (poll(pfds, (nfds_t)count, 50) <= 0)
            continue;
        for (int i = 0; i < count; i++) {
            char sink[64];
            ssize_t n;
            if (pfds[i].fd < 0 || !pfds[i].revents)
                continue;
            while ((n = recv(pfds[i].fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
                received[i] += (size_t)n;
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                closed_after[i] = ember_time_now() - sent_at[i];
                close(pfds[i].fd);
                pfds[i].fd = -1;
                still_open--;
            }
        }
    }
    double first = 0, last = 0;
    size_t least = SIZE_MAX, most = 0;
    for (int i = 0; i < count; i++) {
        if (pfds[i].fd >= 0)
            close(pfds[i].fd);
        if (closed_after[i] >= 0) {
            first = first == 0 || closed_after[i] < first ? closed_after[i] : first;
            last = closed_after[i] > last ? closed_after[i] : last;
        }
        least = received[i] < least ? received[i] : least;
        most = received[i] > most ? received[i] : most;
    }
    printf("outsider: the store dropped %d of %d stalled connections, %.2f to %.2f s after "
           "their 4 bytes; %zu to %zu bytes came back on each\n",
           count - still_open, count, first, last, least, most);
    free(pfds);
    free(sent_at);
    free(closed_after);
    free(received);
    return still_open == 0 && least == most && most == 24 ? 0 : 1;
}

/* A connection to @host:@port without retrying (-1 when refused). */
static int store_connect_now(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static int store_hold(const char *host, int port, int count, double seconds, int wait_for_store)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    struct pollfd *pfds = calloc((size_t)count, sizeof(*pfds));
    if (!pfds || getaddrinfo(host, service, &hints, &ai) != 0)
        return 2;
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max; /* room for @count of ours */
        setrlimit(RLIMIT_NOFILE, &limit);
    }
    /* The store may not be up yet (a control aims at a closed port). */
    int first = wait_for_store ? store_connect(host, port) : -1;
    if (wait_for_store && first < 0)
        return 2;
    if (first >= 0)
        close(first);
    unsigned long opened = 0, most = 0;
    double deadline = ember_time_now() + seconds;
    for (int i = 0; i < count; i++)
        pfds[i] = (struct pollfd){.fd = -1, .events = POLLIN};
    while (ember_time_now() < deadline) {
        unsigned long open_now = 0;
        for (int i = 0; i < count; i++) {
            if (pfds[i].fd < 0 && (pfds[i].fd = store_connect_now(ai)) >= 0)
                opened++;
            open_now += pfds[i].fd >= 0;
        }
        most = open_now > most ? open_now : most;
        if (poll(pfds, (nfds_t)count, 20) <= 0)
            continue;
        for (int i = 0; i < count; i++) {
            char sink[256];
            if (pfds[i].fd < 0 || !pfds[i].revents)
                continue;
            ssize_t n;
            while ((n = recv(pfds[i].fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
                ;
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                close(pfds[i].fd);
                pfds[i].fd = -1;
            }
        }
    }
    for (int i = 0; i < count; i++)
        if (pfds[i].fd >= 0)
            close(pfds[i].fd);
    freeaddrinfo(ai);
    free(pfds);
    printf("outsider: opened %lu connections, up to %lu held at once, over %.1f s; cpu %.3f\n",
           opened, most, seconds, cpu_seconds());
    return 0;
}

static int store_ports(const char *path)
{
    tp_secret_t secret;
    if (setenv("EMBER_SECRET_FILE", path, 1) != 0 ||
        tp_auth_load_secret(NULL, 0, &secret) != EMBER_OK)
        return 2;
    for (int attempt = 0; attempt < TP_STORE_AUTO_TRIES; attempt++)
        printf("%d\n", tp_store_port_candidate(&secret, attempt));
    return 0;
}

static int store_flood(const char *host, int port, int count, size_t bytes)
{
    void *value = calloc(1, bytes ? bytes : 1);
    int refused = 0;
    for (int i = 0; value && i < count; i++) {
        char key[32];
        snprintf(key, sizeof(key), "flood/%d", i);
        refused += store_try(host, port, TP_STORE_OP_SET, key, value, bytes);
    }
    free(value);
    printf("outsider: refused %d of %d SETs of %zu bytes\n", refused, count, bytes);
    return refused == count ? 0 : 1;
}

static int store_forge(const char *host, int port, const char *key, const char *text)
{
    int refused = store_try(host, port, TP_STORE_OP_SET, key, text, strlen(text));
    refused += store_try(host, port, TP_STORE_OP_GET, "ember/addr/0", NULL, 0);
    printf("outsider: refused %d of 2 (SET %s, GET ember/addr/0)\n", refused, key);
    return refused == 2 ? 0 : 1;
}

/* ---- UCX ---------------------------------------------------------------------- */

typedef struct {
    unsigned am_id;
    ucp_ep_h reply_ep;
    size_t length;
    uint8_t data[256];
} seen_t;

typedef struct {
    ucp_context_h context;
    ucp_worker_h worker;
    seen_t seen[64];
    int nseen;
} ucx_t;

static ucs_status_t on_any(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param, unsigned am_id)
{
    ucx_t *ucx = arg;
    (void)header;
    (void)header_length;
    if (ucx->nseen < 64 && length <= sizeof(ucx->seen[0].data) &&
        !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        seen_t *seen = &ucx->seen[ucx->nseen++];
        seen->am_id = am_id;
        seen->reply_ep =
                (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
        seen->length = length;
        memcpy(seen->data, data, length);
    }
    return UCS_OK;
}

#define ON(id)                                                                          \
    static ucs_status_t on_##id(void *arg, const void *h, size_t hl, void *d, size_t l, \
                                const ucp_am_recv_param_t *p)                           \
    {                                                                                   \
        return on_any(arg, h, hl, d, l, p, id);                                         \
    }
ON(0)
ON(1)
ON(2)
ON(3)
ON(4)
ON(5)
ON(6)
ON(7)

static int ucx_open(ucx_t *ucx)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_am_recv_callback_t callbacks[8] = {on_0, on_1, on_2, on_3, on_4, on_5, on_6, on_7};
    memset(ucx, 0, sizeof(*ucx));
    if (ucp_init(&params, NULL, &ucx->context) != UCS_OK ||
        ucp_worker_create(ucx->context, &wparams, &ucx->worker) != UCS_OK)
        return -1;
    for (unsigned id = 0; id < 8; id++) {
        ucp_am_handler_param_t handler = {
                .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                              UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                .id = id,
                .cb = callbacks[id],
                .arg = ucx,
                .flags = UCP_AM_FLAG_WHOLE_MSG};
        if (ucp_worker_set_am_recv_handler(ucx->worker, &handler) != UCS_OK)
            return -1;
    }
    return 0;
}

/* Close @eps (NULL ones skipped) and the worker: a clean exit, so that
 * LeakSanitizer has nothing of ours to report. */
static void ucx_close(ucx_t *ucx, ucp_ep_h *eps, int count)
{
    for (int i = 0; i < count; i++) {
        if (!eps[i])
            continue;
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t request = ucp_ep_close_nbx(eps[i], &param);
        if (UCS_PTR_IS_PTR(request)) {
            while (ucp_request_check_status(request) == UCS_INPROGRESS)
                ucp_worker_progress(ucx->worker);
            ucp_request_free(request);
        }
    }
    ucp_worker_destroy(ucx->worker);
    ucp_cleanup(ucx->context);
}

static void ucx_progress(ucx_t *ucx, double seconds)
{
    double deadline = ember_time_now() + seconds;
    while (ember_time_now() < deadline) {
        if (!ucp_worker_progress(ucx->worker))
            ember_time_sleep(0.0005);
    }
}

/* The first message of @am_id seen since @from, or NULL after @seconds. */
static seen_t *ucx_wait_for(ucx_t *ucx, unsigned am_id, int from, double seconds)
{
    double deadline = ember_time_now() + seconds;
    do {
        for (int i = from; i < ucx->nseen; i++)
            if (ucx->seen[i].am_id == am_id)
                return &ucx->seen[i];
        ucx_progress(ucx, 0.01);
    } while (ember_time_now() < deadline);
    return NULL;
}

static void ucx_send(ucx_t *ucx, ucp_ep_h ep, unsigned am_id, const void *header,
                     size_t header_length, const void *data, size_t length)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_AM_SEND_FLAG_REPLY};
    ucs_status_ptr_t request =
            ucp_am_send_nbx(ep, am_id, header, header_length, data, length, &param);
    if (UCS_PTR_IS_PTR(request)) {
        double deadline = ember_time_now() + 5.0;
        while (ucp_request_check_status(request) == UCS_INPROGRESS && ember_time_now() < deadline)
            ucp_worker_progress(ucx->worker);
        ucp_request_free(request);
    }
}

static void *read_file(const char *path, size_t *length_p, double wait_s)
{
    double deadline = ember_time_now() + wait_s;
    for (;;) {
        FILE *file = fopen(path, "rb");
        if (file) {
            uint8_t *data = malloc(1 << 16);
            size_t n = data ? fread(data, 1, 1 << 16, file) : 0;
            fclose(file);
            if (n > 0) {
                *length_p = n;
                return data;
            }
            free(data);
        }
        if (ember_time_now() > deadline)
            return NULL;
        ember_time_sleep(0.02);
    }
}

static ucp_ep_h ucx_connect(ucx_t *ucx, const void *address)
{
    ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = address};
    ucp_ep_h ep;
    return ucp_ep_create(ucx->worker, &params, &ep) == UCS_OK ? ep : NULL;
}

/* An endpoint to the worker whose address a test wrote to DIR/@name
 * (waited for up to 30 s), or NULL. */
static ucp_ep_h ucx_connect_to(ucx_t *ucx, const char *dir, const char *name)
{
    char path[512];
    size_t length;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    void *address = read_file(path, &length, 30.0);
    ucp_ep_h ep = address ? ucx_connect(ucx, address) : NULL;
    free(address);
    return ep;
}

/* Post a request and a HELLO claiming @src to @dst on @ep, and leave them
 * to a worker that is never progressed: a wire-up left half done. */
static void stall_post(ucp_ep_h ep, uint32_t src, uint32_t dst)
{
    static char payload[1024];
    tp_header_t header = {.magic = TP_MAGIC,
                          .version = TP_VERSION,
                          .op = EMBER_RPC_OP_USER_BASE,
                          .request_id = 1,
                          .length = sizeof(payload)};
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_AM_SEND_FLAG_REPLY};
    tp_hello_t hello = {.magic = TP_MAGIC, .version = TP_VERSION, .src_rank = src, .dst_rank = dst};
    (void)ucp_am_send_nbx(ep, TP_AM_REQUEST, &header, sizeof(header), payload, sizeof(payload),
                          &param);
    (void)ucp_am_send_nbx(ep, TP_AM_HELLO, NULL, 0, &hello, sizeof(hello), &param);
}

/* Requests with ember's header for a few ops (ECHO of the tests, ABORT of
 * the engine): none may be answered. */
static int ucx_requests(ucx_t *ucx, ucp_ep_h ep, int from)
{
    for (uint16_t op = EMBER_RPC_OP_USER_BASE; op < EMBER_RPC_OP_USER_BASE + 48; op += 4) {
        tp_header_t header = {.magic = TP_MAGIC,
                              .version = TP_VERSION,
                              .op = op,
                              .request_id = 1000 + op,
                              .length = 8};
        ucx_send(ucx, ep, TP_AM_REQUEST, &header, sizeof(header), "outsider", 8);
    }
    ucx_progress(ucx, 1.0);
    int answered = 0;
    for (int i = from; i < ucx->nseen; i++)
        answered += ucx->seen[i].am_id == TP_AM_REPLY || ucx->seen[i].am_id == TP_AM_REPLY_BATCH;
    printf("outsider: %d of 12 requests answered\n", answered);
    return answered;
}

static int ucx_stranger(const char *dir)
{
    ucx_t ucx;
    if (ucx_open(&ucx) != 0)
        return 2;
    ucp_ep_h ep = ucx_connect_to(&ucx, dir, "target.addr");
    if (!ep)
        return 2;
    /* Claim rank 0 to rank 1. */
    tp_hello_t hello = {.magic = TP_MAGIC, .version = TP_VERSION, .src_rank = 0, .dst_rank = 1};
    memset(hello.nonce, 0x5a, sizeof(hello.nonce));
    ucx_send(&ucx, ep, TP_AM_HELLO, NULL, 0, &hello, sizeof(hello));
    seen_t *challenge = ucx_wait_for(&ucx, TP_AM_CHALLENGE, 0, 2.0);
    printf("outsider: the HELLO was %s\n", challenge ? "CHALLENGED" : "not answered");
    /* A CONFIRM all the same, as if a challenge had come. */
    tp_hello_t confirm;
    if (challenge)
        memcpy(&confirm, challenge->data, sizeof(confirm));
    else
        confirm = hello;
    confirm.src_rank = 0;
    confirm.dst_rank = 1;
    tp_secret_t secret = outsider_secret();
    tp_auth_part_t parts[] = {{"ember-confirm", 13}, {confirm.nonce, 16}, {confirm.peer_nonce, 16}};
    tp_auth_hmac(&secret, parts, 3, confirm.mac); /* a guess: not the job's proof */
    int mark = ucx.nseen;
    ucx_send(&ucx, ep, TP_AM_CONFIRM, NULL, 0, &confirm, sizeof(confirm));
    seen_t *accept = ucx_wait_for(&ucx, TP_AM_ACCEPT, mark, 2.0);
    tp_hello_t verdict = {0};
    if (accept)
        memcpy(&verdict, accept->data, sizeof(verdict));
    printf("outsider: the confirmation was %s\n", !accept                      ? "not answered"
                                                  : verdict.status == EMBER_OK ? "ACCEPTED"
                                                                               : "refused");
    int answered = ucx_requests(&ucx, ep, ucx.nseen);
    ucx_close(&ucx, &ep, 1);
    return challenge || (accept && verdict.status == EMBER_OK) || answered ? 1 : 0;
}

/* Requests of @op carrying @payload, @count of them: how many answered. */
static int ucx_payloads(ucx_t *ucx, ucp_ep_h ep, uint16_t op, const void *payload, size_t length,
                        int count)
{
    const int from = ucx->nseen;
    for (int i = 0; i < count; i++) {
        tp_header_t header = {.magic = TP_MAGIC,
                              .version = TP_VERSION,
                              .op = op,
                              .request_id = 5000 + (uint64_t)i,
                              .length = length};
        ucx_send(ucx, ep, TP_AM_REQUEST, &header, sizeof(header), payload, length);
    }
    ucx_progress(ucx, 1.0);
    int answered = 0;
    for (int i = from; i < ucx->nseen; i++)
        answered += ucx->seen[i].am_id == TP_AM_REPLY || ucx->seen[i].am_id == TP_AM_REPLY_BATCH;
    return answered;
}

static int ucx_pickle(const char *dir, const char *name, int rank, int op, const char *file)
{
    static char payload[1 << 16];
    FILE *in = fopen(file, "rb");
    size_t length = in ? fread(payload, 1, sizeof(payload), in) : 0;
    if (in)
        fclose(in);
    ucx_t ucx;
    if (!length || op < 0 || op >= EMBER_RPC_OP_MAX || ucx_open(&ucx) != 0)
        return 2;
    ucp_ep_h ep = ucx_connect_to(&ucx, dir, name);
    if (!ep)
        return 2;
    int answered = ucx_payloads(&ucx, ep, (uint16_t)op, payload, length, 10);
    const uint32_t claimed = rank == 0 ? 1 : 0;
    tp_hello_t hello = {.magic = TP_MAGIC,
                        .version = TP_VERSION,
                        .src_rank = claimed,
                        .dst_rank = (uint32_t)rank};
    memset(hello.nonce, 0x5a, sizeof(hello.nonce));
    ucx_send(&ucx, ep, TP_AM_HELLO, NULL, 0, &hello, sizeof(hello));
    seen_t *challenge = ucx_wait_for(&ucx, TP_AM_CHALLENGE, 0, 2.0);
    tp_hello_t confirm = hello;
    if (challenge)
        memcpy(&confirm, challenge->data, sizeof(confirm));
    confirm.src_rank = claimed;
    confirm.dst_rank = (uint32_t)rank;
    tp_secret_t secret = outsider_secret();
    tp_auth_part_t parts[] = {{"ember-confirm", 13}, {confirm.nonce, 16}, {confirm.peer_nonce, 16}};
    tp_auth_hmac(&secret, parts, 3, confirm.mac);
    ucx_send(&ucx, ep, TP_AM_CONFIRM, NULL, 0, &confirm, sizeof(confirm));
    ucx_progress(&ucx, 0.5);
    answered += ucx_payloads(&ucx, ep, (uint16_t)op, payload, length, 10);
    printf("outsider: the HELLO was %s; %d of 20 requests of op %d answered\n",
           challenge ? "CHALLENGED" : "not answered", answered, op);
    ucx_close(&ucx, &ep, 1);
    return challenge || answered ? 1 : 0;
}

static int ucx_relay(const char *dir)
{
    ucx_t ucx;
    char path[512];
    ucp_address_t *own;
    size_t own_length;
    if (ucx_open(&ucx) != 0 || ucp_worker_get_address(ucx.worker, &own, &own_length) != UCS_OK)
        return 2;
    snprintf(path, sizeof(path), "%s/outsider.addr.tmp", dir);
    FILE *file = fopen(path, "wb");
    int written = file && fwrite(own, 1, own_length, file) == own_length;
    ucp_worker_release_address(ucx.worker, own);
    if (!file || fclose(file) != 0 || !written)
        return 2;
    char final[512];
    snprintf(final, sizeof(final), "%s/outsider.addr", dir);
    if (rename(path, final) != 0)
        return 2;
    ucp_ep_h to_target = ucx_connect_to(&ucx, dir, "target.addr");
    if (!to_target)
        return 2;
    /* The victim's HELLO, meant for the target, comes to us. */
    seen_t *hello = ucx_wait_for(&ucx, TP_AM_HELLO, 0, 30.0);
    if (!hello) {
        printf("outsider: no HELLO came to relay\n");
        return 2;
    }
    ucp_ep_h to_victim = hello->reply_ep;
    int mark = ucx.nseen;
    ucx_send(&ucx, to_target, TP_AM_HELLO, NULL, 0, hello->data, hello->length);
    seen_t *challenge = ucx_wait_for(&ucx, TP_AM_CHALLENGE, mark, 5.0);
    printf("outsider: relayed the HELLO; the target %s\n",
           challenge ? "challenged it" : "did not answer");
    /* The old attack: a request right after the relayed HELLO. */
    int answered = ucx_requests(&ucx, to_target, ucx.nseen);
    if (challenge && to_victim) {
        mark = ucx.nseen;
        ucx_send(&ucx, to_victim, TP_AM_CHALLENGE, NULL, 0, challenge->data, challenge->length);
        seen_t *confirm = ucx_wait_for(&ucx, TP_AM_CONFIRM, mark, 3.0);
        printf("outsider: relayed the challenge; the victim %s\n",
               confirm ? "CONFIRMED it" : "refused to confirm");
        if (confirm) { /* it should not have: relay its proof too */
            ucx_send(&ucx, to_target, TP_AM_CONFIRM, NULL, 0, confirm->data, confirm->length);
            answered += ucx_requests(&ucx, to_target, ucx.nseen) ? 1 : 0;
            answered += 100; /* the victim proved itself through a relay */
        }
    }
    ucx_close(&ucx, &to_target, 1); /* the victim's reply endpoint is UCX's */
    return answered ? 1 : 0;
}

/* Connect to the target, post one message, then hold the connection
 * without ever progressing our worker for @seconds, and leave without
 * closing anything: a wire-up left half done. */
static int ucx_stall(const char *dir, double seconds)
{
    ucx_t ucx;
    if (ucx_open(&ucx) != 0)
        return 2;
    ucp_ep_h ep = ucx_connect_to(&ucx, dir, "target.addr");
    if (!ep)
        return 2;
    stall_post(ep, 0, 1);
    printf("outsider: posted one message; holding for %.1f s without progress\n", seconds);
    ember_time_sleep(seconds);
    _exit(0);
}

/* ---- what an outsider sees on the wire ---------------------------------------- */

/* Only IPv4 TCP segments to or from @port pass (a classic BPF filter on
 * lo's Ethernet framing), so that watching one job's store costs nothing
 * for the rest of lo's traffic. */
static void sniff_port_only(int fd, int port)
{
    struct sock_filter code[] = {
            BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12), /* ethertype */
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 9),
            BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23), /* IP protocol */
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, 7),
            BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 20), /* fragment offset */
            BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 5, 0),
            BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14), /* the IP header's length */
            BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14),  /* source port */
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)port, 3, 0),
            BPF_STMT(BPF_LD | BPF_H | BPF_IND, 16), /* destination port */
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)port, 1, 0),
            BPF_STMT(BPF_RET | BPF_K, 0),
            BPF_STMT(BPF_RET | BPF_K, 0x40000),
    };
    struct sock_fprog program = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof(program)) != 0) {
        printf("outsider: filtering lo's traffic: %s\n", strerror(errno));
        exit(2);
    }
}

/* A raw socket on the loopback device: every TCP segment between the job's
 * processes, or only those of @port when not 0 (root only; 77 without the
 * right to open one). */
static int sniff_open(int port)
{
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_IP));
    if (fd < 0) {
        printf("outsider: cannot watch the network (%s): needs root\n", strerror(errno));
        exit(77);
    }
    struct sockaddr_ll at = {.sll_family = AF_PACKET,
                             .sll_protocol = htons(ETH_P_IP),
                             .sll_ifindex = (int)if_nametoindex("lo")};
    if (port)
        sniff_port_only(fd, port);
    if (bind(fd, (struct sockaddr *)&at, sizeof(at)) != 0) {
        printf("outsider: bind to lo: %s\n", strerror(errno));
        exit(2);
    }
    return fd;
}

/* The next TCP payload seen within @timeout_s to or from @port (0: any),
 * one copy per segment (the outgoing copy is skipped): its length, or 0
 * when none came. */
static size_t sniff_next(int fd, int port, uint8_t *buffer, size_t capacity,
                         const uint8_t **payload_p, double timeout_s)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(timeout_s * 1000)) <= 0)
            return 0;
        struct sockaddr_ll from;
        socklen_t from_length = sizeof(from);
        ssize_t n = recvfrom(fd, buffer, capacity, 0, (struct sockaddr *)&from, &from_length);
        if (n <= 14 || from.sll_pkttype == PACKET_OUTGOING)
            continue;
        const uint8_t *ip = buffer + 14; /* lo's Ethernet header */
        size_t ip_length = (size_t)n - 14;
        size_t ihl = (size_t)(ip[0] & 0xf) * 4;
        if (ip_length < ihl + 20 || ip[9] != IPPROTO_TCP)
            continue;
        const uint8_t *tcp = ip + ihl;
        size_t doff = (size_t)(tcp[12] >> 4) * 4;
        int src = tcp[0] << 8 | tcp[1], dst = tcp[2] << 8 | tcp[3];
        if (ip_length < ihl + doff + 1 || (port && src != port && dst != port))
            continue;
        *payload_p = tcp + doff;
        return ip_length - ihl - doff;
    }
}

/* A worker address published in clear (the frame before sealing: "EMAD",
 * length, SHA-256, the address), after its key ember/addr/RANK in a store
 * request: its rank, the address copied to @address; -1 if none here.
 * *sealed_p counts sealed ones ("EMAS") seen. */
static int clear_address(const uint8_t *data, size_t length, uint8_t *address, size_t *length_p,
                         unsigned *sealed_p)
{
    for (size_t at = 0; at + 40 <= length; at++) {
        if (memcmp(data + at, "SAME", 4) == 0)
            ++*sealed_p;
        if (memcmp(data + at, "DAME", 4) != 0)
            continue;
        uint32_t n;
        memcpy(&n, data + at + 4, 4);
        if (n == 0 || n > length - at - 40)
            continue;
        uint8_t digest[TP_AUTH_MAC_SIZE];
        tp_auth_digest(data + at + 40, n, digest);
        if (memcmp(digest, data + at + 8, sizeof(digest)) != 0)
            continue;
        const char *key = memmem(data, at, "ember/addr/", 11);
        if (!key)
            continue;
        memcpy(address, data + at + 40, n);
        *length_p = n;
        return atoi(key + 11);
    }
    return -1;
}

/* Connect to @address, post a request and a HELLO, and never progress. */
static int stall_target(ucx_t *ucx, const void *address)
{
    ucp_ep_h ep = ucx_connect(ucx, address);
    if (!ep)
        return -1;
    stall_post(ep, 1, 0);
    return 0;
}

/* From a second endpoint to @address: what the attacker sent a
 * rank it could reach: 200,000 HELLOs with junk proofs, 100,000 messages
 * with ids nobody registered, and six 64 MiB eager messages at once. */
static void flood_target(ucx_t *ucx, const void *address)
{
    ucp_ep_h ep = ucx_connect(ucx, address);
    if (!ep)
        return;
    tp_hello_t hello = {.magic = TP_MAGIC, .version = TP_VERSION, .src_rank = 1, .dst_rank = 0};
    for (unsigned long i = 0; i < 200000; i++) {
        memcpy(hello.nonce, &i, sizeof(i));
        ucx_send(ucx, ep, TP_AM_HELLO, NULL, 0, &hello, sizeof(hello));
    }
    for (unsigned i = 0; i < 100000; i++)
        ucx_send(ucx, ep, 8 + i % 24, NULL, 0, &i, sizeof(i));
    size_t big = (size_t)64 << 20;
    char *bulk = calloc(1, big);
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    void *requests[6] = {0};
    for (int i = 0; bulk && i < 6; i++) {
        ucs_status_ptr_t request = ucp_am_send_nbx(ep, TP_AM_REQUEST, NULL, 0, bulk, big, &param);
        requests[i] = UCS_PTR_IS_PTR(request) ? request : NULL;
    }
    double deadline = ember_time_now() + 10;
    for (int i = 0; i < 6; i++) {
        while (requests[i] && ucp_request_check_status(requests[i]) == UCS_INPROGRESS &&
               ember_time_now() < deadline)
            ucp_worker_progress(ucx->worker);
    }
    free(bulk); /* the requests are the worker's when it goes */
}

/*
 * Watch the traffic of the store at @port for @seconds for worker
 * addresses in clear, and give each rank in @ranks (comma-separated) found
 * a stalled wire-up and a flood (flood_target); hold the stalled ones
 * @hold seconds, then exit without closing anything.  1 when an address
 * was found (the traffic gave it away), else 0.
 */
static int job_ucx(int port, double seconds, const char *ranks, double hold)
{
    static uint8_t packet[1 << 17], address[1 << 16];
    int fd = sniff_open(port);
    ucx_t ucx;
    if (ucx_open(&ucx) != 0)
        return 2;
    unsigned sealed = 0, found = 0, stalled = 0;
    double deadline = ember_time_now() + seconds;
    char wanted[64];
    snprintf(wanted, sizeof(wanted), ",%s,", ranks);
    while (ember_time_now() < deadline) {
        const uint8_t *payload;
        size_t n = sniff_next(fd, port, packet, sizeof(packet), &payload, 0.1), length;
        int rank = n ? clear_address(payload, n, address, &length, &sealed) : -1;
        if (rank < 0)
            continue;
        char mark[16];
        snprintf(mark, sizeof(mark), ",%d,", rank);
        char *slot = strstr(wanted, mark);
        found++;
        printf("outsider: rank %d's worker address in clear (%zu bytes)\n", rank, length);
        if (slot && stall_target(&ucx, address) == 0) {
            stalled++;
            slot[1] = 'x'; /* once per rank */
            flood_target(&ucx, address);
        }
    }
    printf("outsider: %u worker address(es) seen in clear, %u sealed; %u rank(s) attacked\n", found,
           sealed, stalled);
    if (stalled)
        ember_time_sleep(hold);
    _exit(found ? 1 : 0);
}

/*
 * HELLOs claiming rank 0 to the rank at DIR/target.addr, with fresh nonces
 * and junk proofs, as fast as they go for @seconds; with @control, the
 * same endpoint and a loop as busy, sending nothing (the CPU-matched
 * control).  Prints how many went and its CPU seconds.
 */
static int ucx_hello_flood(const char *dir, double seconds, int control)
{
    ucx_t ucx;
    if (ucx_open(&ucx) != 0)
        return 2;
    ucp_ep_h ep = ucx_connect_to(&ucx, dir, "target.addr");
    if (!ep)
        return 2;
    tp_hello_t hello = {.magic = TP_MAGIC, .version = TP_VERSION, .src_rank = 0, .dst_rank = 1};
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_AM_SEND_FLAG_REPLY};
    void *inflight[64] = {0};
    unsigned long sent = 0;
    double deadline = ember_time_now() + seconds;
    while (ember_time_now() < deadline) {
        for (int i = 0; i < 64; i++) {
            if (inflight[i] && ucp_request_check_status(inflight[i]) == UCS_INPROGRESS)
                continue;
            if (inflight[i])
                ucp_request_free(inflight[i]);
            inflight[i] = NULL;
            if (control)
                continue;
            memcpy(hello.nonce, &sent, sizeof(sent));
            memcpy(hello.mac, &sent, sizeof(sent));
            ucs_status_ptr_t request =
                    ucp_am_send_nbx(ep, TP_AM_HELLO, NULL, 0, &hello, sizeof(hello), &param);
            sent++;
            if (UCS_PTR_IS_PTR(request))
                inflight[i] = request;
        }
        ucp_worker_progress(ucx.worker);
    }
    for (int i = 0; i < 64; i++) {
        if (inflight[i]) {
            ucp_request_cancel(ucx.worker, inflight[i]);
            ucp_request_free(inflight[i]);
        }
    }
    printf("outsider: %s; %lu HELLOs sent over %.1f s; cpu %.3f\n",
           control ? "the control" : "the flood", sent, seconds, cpu_seconds());
    ucx_close(&ucx, &ep, 1);
    return 0;
}

/* A handshake message of ours in @data (magic, version), from @src to
 * @dst: copied to @msg; 0 if none. */
static int handshake_seen(const uint8_t *data, size_t length, uint32_t src, uint32_t dst,
                          tp_hello_t *msg)
{
    for (size_t at = 0; at + sizeof(*msg) <= length; at++) {
        memcpy(msg, data + at, sizeof(*msg));
        if (msg->magic == TP_MAGIC && msg->version == TP_VERSION && msg->src_rank == src &&
            msg->dst_rank == dst)
            return 1;
    }
    return 0;
}

/*
 * Watch lo for rank 0's HELLO to rank 1 and answer it, from our own
 * endpoint to rank 0 (DIR/victim.addr), with a CHALLENGE claiming to be
 * rank 1 under a junk proof; then watch for rank 1's real challenge and
 * send rank 0 ACCEPTs that refuse (status ERR_AUTH), junk proofs again.
 * DIR/armed is written once we watch.  0 when both were sent in time, 2
 * when nothing came to forge.
 */
static int ucx_forge(const char *dir)
{
    static uint8_t packet[1 << 17];
    char path[512];
    int fd = sniff_open(0);
    ucx_t ucx;
    if (ucx_open(&ucx) != 0)
        return 2;
    ucp_ep_h ep = ucx_connect_to(&ucx, dir, "victim.addr");
    if (!ep)
        return 2;
    uint32_t junk = 0;
    ucx_send(&ucx, ep, TP_AM_HELLO, NULL, 0, &junk, sizeof(junk)); /* wires the endpoint up */
    snprintf(path, sizeof(path), "%s/armed", dir);
    FILE *armed = fopen(path, "w");
    if (!armed || fclose(armed) != 0)
        return 2;
    tp_hello_t hello = {0}, forged = {0}, msg;
    int challenged = 0, refused = 0;
    double deadline = ember_time_now() + 30;
    while (!(challenged && refused) && ember_time_now() < deadline) {
        const uint8_t *payload;
        size_t n = sniff_next(fd, 0, packet, sizeof(packet), &payload, 0.01);
        ucp_worker_progress(ucx.worker);
        if (!challenged && n && handshake_seen(payload, n, 0, 1, &msg)) {
            hello = msg;
            forged = (tp_hello_t){.magic = TP_MAGIC, .version = TP_VERSION, .src_rank = 1};
            memcpy(forged.nonce, hello.nonce, sizeof(forged.nonce));
            memset(forged.peer_nonce, 0x3c, sizeof(forged.peer_nonce));
            memset(forged.mac, 0x77, sizeof(forged.mac));
            ucx_send(&ucx, ep, TP_AM_CHALLENGE, NULL, 0, &forged, sizeof(forged));
            printf("outsider: saw rank 0's HELLO; sent it a forged challenge\n");
            challenged = 1;
        } else if (challenged && !refused && n && handshake_seen(payload, n, 1, 0, &msg) &&
                   memcmp(msg.nonce, hello.nonce, sizeof(msg.nonce)) == 0 &&
                   memcmp(msg.peer_nonce, forged.peer_nonce, sizeof(msg.peer_nonce)) != 0) {
            tp_hello_t accept = msg;
            accept.status = EMBER_ERR_AUTH;
            memset(accept.mac, 0x55, sizeof(accept.mac));
            for (int i = 0; i < 3; i++)
                ucx_send(&ucx, ep, TP_AM_ACCEPT, NULL, 0, &accept, sizeof(accept));
            printf("outsider: saw rank 1's challenge; sent rank 0 forged refusals\n");
            refused = 1;
        }
    }
    ucx_progress(&ucx, 0.2);
    ucx_close(&ucx, &ep, 1);
    printf("outsider: forged %s\n", challenged && refused ? "a challenge and refusals"
                                    : challenged          ? "a challenge only"
                                                          : "nothing");
    return challenged && refused ? 0 : 2;
}

/* AM ids no rank registers: just past ember's (TP_AM_COUNT is 8) and far. */
static unsigned flood_am_id(int i)
{
    static const unsigned far[] = {100, 1000, 4095, 30000, 65535};
    if (i % 25 < 24)
        return 8 + (unsigned)(i % 24);
    return far[(i / 25) % 5];
}

/* Wait for the oldest of @outstanding requests until at most @keep are left. */
static void flood_drain(ucx_t *ucx, void **requests, int *outstanding, int keep)
{
    while (*outstanding > keep) {
        void *request = requests[0];
        double deadline = ember_time_now() + 10.0;
        while (ucp_request_check_status(request) == UCS_INPROGRESS && ember_time_now() < deadline)
            ucp_worker_progress(ucx->worker);
        ucp_request_free(request);
        memmove(requests, requests + 1, (size_t)(*outstanding - 1) * sizeof(*requests));
        (*outstanding)--;
    }
}

static int ucx_flood(const char *dir, int count, char **names, int ntargets)
{
    enum {
        WINDOW = 256,
        BIG = 256 << 10
    };
    ucx_t ucx;
    ucp_ep_h eps[8];
    void *requests[WINDOW];
    int outstanding = 0, sent = 0;
    uint8_t *big = calloc(1, BIG);
    if (!big || ntargets > 8 || ucx_open(&ucx) != 0)
        return 2;
    for (int t = 0; t < ntargets; t++) {
        if (!(eps[t] = ucx_connect_to(&ucx, dir, names[t])))
            return 2;
    }
    for (int i = 0; i < count; i++) {
        for (int t = 0; t < ntargets; t++) {
            ucp_request_param_t param = {0};
            size_t length = i % 1000 == 999 ? BIG : 8;
            ucs_status_ptr_t request =
                    ucp_am_send_nbx(eps[t], flood_am_id(i), NULL, 0, big, length, &param);
            if (UCS_PTR_IS_ERR(request))
                continue;
            sent++;
            if (UCS_PTR_IS_PTR(request)) {
                requests[outstanding++] = request;
                flood_drain(&ucx, requests, &outstanding, WINDOW - 1);
            }
        }
        if (i % 64 == 0)
            ucp_worker_progress(ucx.worker);
    }
    flood_drain(&ucx, requests, &outstanding, 0);
    ucx_progress(&ucx, 0.5);
    printf("outsider: sent %d of %d active messages with unknown ids to %d rank(s)\n", sent,
           count * ntargets, ntargets);
    ucx_close(&ucx, eps, ntargets);
    free(big);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && strcmp(argv[1], "store-stall") == 0)
        return store_stall(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]));
    if (argc == 6 && strcmp(argv[1], "store-hold") == 0)
        return store_hold(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]), 1);
    if (argc == 7 && strcmp(argv[1], "store-hold") == 0 && strcmp(argv[6], "closed") == 0)
        return store_hold(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]), 0);
    if (argc == 3 && strcmp(argv[1], "store-ports") == 0)
        return store_ports(argv[2]);
    if (argc == 6 && strcmp(argv[1], "store-flood") == 0)
        return store_flood(argv[2], atoi(argv[3]), atoi(argv[4]),
                           (size_t)strtoull(argv[5], NULL, 10));
    if (argc == 6 && strcmp(argv[1], "store-forge") == 0)
        return store_forge(argv[2], atoi(argv[3]), argv[4], argv[5]);
    if (argc == 3 && strcmp(argv[1], "ucx-stranger") == 0)
        return ucx_stranger(argv[2]);
    if (argc == 6 && strcmp(argv[1], "job-ucx") == 0)
        return job_ucx(atoi(argv[2]), atof(argv[3]), argv[4], atof(argv[5]));
    if (argc == 5 && strcmp(argv[1], "ucx-hello-flood") == 0)
        return ucx_hello_flood(argv[2], atof(argv[3]), strcmp(argv[4], "control") == 0);
    if (argc == 3 && strcmp(argv[1], "ucx-forge") == 0)
        return ucx_forge(argv[2]);
    if (argc == 4 && strcmp(argv[1], "ucx-stall") == 0)
        return ucx_stall(argv[2], atof(argv[3]));
    if (argc == 7 && strcmp(argv[1], "ucx-pickle") == 0)
        return ucx_pickle(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argv[6]);
    if (argc == 3 && strcmp(argv[1], "ucx-relay") == 0)
        return ucx_relay(argv[2]);
    if (argc >= 5 && strcmp(argv[1], "ucx-flood") == 0)
        return ucx_flood(argv[2], atoi(argv[3]), argv + 4, argc - 4);
    fprintf(stderr, "usage: see tests/security/outsider.c\n");
    return 2;
}
