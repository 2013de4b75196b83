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
 *   outsider store-forge HOST PORT KEY TEXT
 *       SET KEY (e.g. ember/addr/3, ember/proc/3) to TEXT, GET ember/addr/0
 *   outsider ucx-stranger DIR
 *       connect to the rank whose worker address is DIR/target.addr, claim
 *       to be rank 0, answer its challenge under the wrong secret, then send
 *       requests (OP 100.. 120) anyway; waits for the answers
 *   outsider ucx-relay DIR
 *       publish its own worker address as DIR/outsider.addr, then relay:
 *       the HELLO a rank sends it (believing it is the rank at
 *       DIR/target.addr) goes to that rank, the challenge back, a request
 *       after it; waits for anything to come of it
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
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char wrong_secret[] = "an outsider's guess at the secret";

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
    char path[512];
    size_t length;
    snprintf(path, sizeof(path), "%s/target.addr", dir);
    void *target = read_file(path, &length, 30.0);
    if (!target || ucx_open(&ucx) != 0)
        return 2;
    ucp_ep_h ep = ucx_connect(&ucx, target);
    free(target);
    if (!ep)
        return 2;
    /* Claim rank 0 to rank 1. */
    tp_hello_t hello = {.magic = TP_MAGIC, .version = TP_VERSION, .src_rank = 0, .dst_rank = 1};
    memset(hello.nonce, 0x5a, sizeof(hello.nonce));
    ucx_send(&ucx, ep, TP_AM_HELLO, NULL, 0, &hello, sizeof(hello));
    seen_t *challenge = ucx_wait_for(&ucx, TP_AM_CHALLENGE, 0, 5.0);
    if (!challenge) {
        printf("outsider: no challenge came\n");
        return 2;
    }
    tp_hello_t confirm;
    memcpy(&confirm, challenge->data, sizeof(confirm));
    confirm.src_rank = 0;
    confirm.dst_rank = 1;
    tp_secret_t secret = outsider_secret();
    tp_auth_part_t parts[] = {{"ember-confirm", 13}, {confirm.nonce, 16}, {confirm.peer_nonce, 16}};
    tp_auth_hmac(&secret, parts, 3, confirm.mac); /* a guess: not the job's proof */
    int mark = ucx.nseen;
    ucx_send(&ucx, ep, TP_AM_CONFIRM, NULL, 0, &confirm, sizeof(confirm));
    seen_t *accept = ucx_wait_for(&ucx, TP_AM_ACCEPT, mark, 5.0);
    tp_hello_t verdict = {0};
    if (accept)
        memcpy(&verdict, accept->data, sizeof(verdict));
    printf("outsider: the confirmation was %s\n", !accept                      ? "not answered"
                                                  : verdict.status == EMBER_OK ? "ACCEPTED"
                                                                               : "refused");
    int answered = ucx_requests(&ucx, ep, ucx.nseen);
    ucx_close(&ucx, &ep, 1);
    return (accept && verdict.status == EMBER_OK) || answered ? 1 : 0;
}

static int ucx_relay(const char *dir)
{
    ucx_t ucx;
    char path[512];
    size_t length;
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
    snprintf(path, sizeof(path), "%s/target.addr", dir);
    void *target = read_file(path, &length, 30.0);
    ucp_ep_h to_target = target ? ucx_connect(&ucx, target) : NULL;
    free(target);
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
        char path[512];
        size_t length;
        snprintf(path, sizeof(path), "%s/%s", dir, names[t]);
        void *address = read_file(path, &length, 30.0);
        eps[t] = address ? ucx_connect(&ucx, address) : NULL;
        free(address);
        if (!eps[t])
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
    if (argc == 6 && strcmp(argv[1], "store-flood") == 0)
        return store_flood(argv[2], atoi(argv[3]), atoi(argv[4]),
                           (size_t)strtoull(argv[5], NULL, 10));
    if (argc == 6 && strcmp(argv[1], "store-forge") == 0)
        return store_forge(argv[2], atoi(argv[3]), argv[4], argv[5]);
    if (argc == 3 && strcmp(argv[1], "ucx-stranger") == 0)
        return ucx_stranger(argv[2]);
    if (argc == 3 && strcmp(argv[1], "ucx-relay") == 0)
        return ucx_relay(argv[2]);
    if (argc >= 5 && strcmp(argv[1], "ucx-flood") == 0)
        return ucx_flood(argv[2], atoi(argv[3]), argv + 4, argc - 4);
    fprintf(stderr, "usage: see tests/security/outsider.c\n");
    return 2;
}
