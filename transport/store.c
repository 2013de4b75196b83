/* transport/store: the authenticated rendezvous store over TCP (start-up). */
#define _GNU_SOURCE /* pipe2, accept4 */
#include "transport/store.h"
#include "common/clock.h"
#include "common/reserve.h"

#include <ember/log.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STORE_MAGIC       0x454d5354u /* "EMST": a request */
#define STORE_REPLY_MAGIC 0x454d5352u /* "EMSR": its reply */
#define STORE_HELLO_MAGIC 0x454d5348u /* "EMSH": the server's greeting */
#define STORE_VERSION     2           /* 2: authenticated */
/* A reply that does not leave within this (its client stopped reading)
 * drops the connection. */
#define STORE_WRITE_S 10.0
/* Refusals logged one by one up to this; the rest in the summary. */
#define STORE_LOGGED_MAX 8

/* Sent by the server on every new connection. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    uint8_t nonce[TP_STORE_NONCE_SIZE];
} store_hello_t;

/* A reply: its tag covers the connection's nonce, every field before it and
 * the value that follows. */
typedef struct {
    uint32_t magic;
    int32_t status;
    uint32_t value_length;
    uint32_t reserved;
    uint64_t seq;  /* of the request it answers */
    int64_t value; /* ADD: the counter; ARRIVE: the arrivals */
    uint8_t mac[TP_AUTH_MAC_SIZE];
} store_reply_t;

/* The whole of a request after its head: key, value, then this tag. */
#define STORE_BODY_MAC TP_AUTH_MAC_SIZE

/* ---- tags ------------------------------------------------------------------ */

static void head_mac(const tp_secret_t *secret, const uint8_t *nonce, const tp_store_head_t *head,
                     uint8_t mac[TP_AUTH_MAC_SIZE])
{
    tp_auth_part_t parts[] = {{"ember-store-head", 16},
                              {nonce, TP_STORE_NONCE_SIZE},
                              {head, offsetof(tp_store_head_t, mac)}};
    tp_auth_hmac(secret, parts, 3, mac);
}

/* The body's tag chains on the head's: it belongs to that one request. */
static void body_mac(const tp_secret_t *secret, const tp_store_head_t *head, const void *key,
                     const void *value, uint8_t mac[TP_AUTH_MAC_SIZE])
{
    tp_auth_part_t parts[] = {{"ember-store-body", 16},
                              {head->mac, TP_AUTH_MAC_SIZE},
                              {key, head->key_length},
                              {value, head->value_length}};
    tp_auth_hmac(secret, parts, 4, mac);
}

static void reply_mac(const tp_secret_t *secret, const uint8_t *nonce, const store_reply_t *reply,
                      const void *value, uint8_t mac[TP_AUTH_MAC_SIZE])
{
    tp_auth_part_t parts[] = {{"ember-store-reply", 17},
                              {nonce, TP_STORE_NONCE_SIZE},
                              {reply, offsetof(store_reply_t, mac)},
                              {value, reply->value_length}};
    tp_auth_hmac(secret, parts, 4, mac);
}

ssize_t tp_store_request_parse(const tp_secret_t *secret, const uint8_t nonce[TP_STORE_NONCE_SIZE],
                               uint64_t seq, const uint8_t *data, size_t length,
                               tp_store_request_t *req_p, size_t *need_p, const char **why_p)
{
    tp_store_head_t head;
    uint8_t mac[TP_AUTH_MAC_SIZE];

    *need_p = sizeof(head);
    if (length < sizeof(head))
        return 0;
    memcpy(&head, data, sizeof(head));
    *why_p = head.magic != STORE_MAGIC ? "not a store request (bad magic)"
             : head.op < TP_STORE_OP_SET || head.op > TP_STORE_OP_ARRIVE ? "an unknown operation"
             : head.key_length == 0 || head.key_length > TP_STORE_MAX_KEY
                     ? "a key length out of range"
             : head.value_length > TP_STORE_MAX_VALUE ? "a value over the limit"
                                                      : NULL;
    if (*why_p)
        return -1;
    head_mac(secret, nonce, &head, mac);
    if (!tp_auth_mac_equal(mac, head.mac)) {
        *why_p = "its head is not authenticated (no job secret, or a replay)";
        return -1;
    }
    if (head.seq != seq) {
        *why_p = "an authenticated request out of sequence (a replay)";
        return -1;
    }
    size_t total = sizeof(head) + head.key_length + head.value_length + STORE_BODY_MAC;
    *need_p = total;
    if (length < total)
        return 0;
    const uint8_t *key = data + sizeof(head), *value = key + head.key_length;
    body_mac(secret, &head, key, value, mac);
    if (!tp_auth_mac_equal(mac, value + head.value_length)) {
        *why_p = "its key or value is not authenticated";
        return -1;
    }
    *req_p = (tp_store_request_t){.op = head.op,
                                  .seq = head.seq,
                                  .arg = head.arg,
                                  .timeout_ms = head.timeout_ms,
                                  .key = (const char *)key,
                                  .key_length = head.key_length,
                                  .value = value,
                                  .value_length = head.value_length};
    *why_p = NULL;
    return (ssize_t)total;
}

size_t tp_store_request_pack(const tp_secret_t *secret, const uint8_t nonce[TP_STORE_NONCE_SIZE],
                             uint64_t seq, uint8_t op, const char *key, size_t key_length,
                             const void *value, size_t value_length, int64_t arg,
                             int64_t timeout_ms, uint8_t *out)
{
    tp_store_head_t head = {.magic = STORE_MAGIC,
                            .op = op,
                            .key_length = (uint32_t)key_length,
                            .value_length = (uint32_t)value_length,
                            .seq = seq,
                            .arg = arg,
                            .timeout_ms = timeout_ms};
    head_mac(secret, nonce, &head, head.mac);
    uint8_t *p = out;
    memcpy(p, &head, sizeof(head));
    p += sizeof(head);
    memcpy(p, key, key_length);
    p += key_length;
    if (value_length)
        memcpy(p, value, value_length);
    p += value_length;
    body_mac(secret, &head, key, value, p);
    return tp_store_request_size(key_length, value_length);
}

/* ---- helpers shared by both sides ---------------------------------------- */

static ember_status_t io_full(int fd, void *buffer, size_t length, int writing, double deadline)
{
    char *p = buffer;
    while (length > 0) {
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        double left = deadline - ember_time_now();
        if (left <= 0)
            return EMBER_ERR_TIMED_OUT;
        int rc = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return rc == 0 ? EMBER_ERR_TIMED_OUT : EMBER_ERR_IO;
        ssize_t n = writing ? send(fd, p, length, MSG_NOSIGNAL) : recv(fd, p, length, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return EMBER_ERR_IO;
        p += n;
        length -= (size_t)n;
    }
    return EMBER_OK;
}

ember_status_t tp_store_parse_url(const char *url, char *host, size_t host_size, int *port_p)
{
    const char *rest, *colon;
    char *end;
    long port;

    if (!url || strncmp(url, "tcp://", 6) != 0)
        goto err;
    rest = url + 6;
    colon = strrchr(rest, ':');
    if (!colon || colon == rest || (size_t)(colon - rest) >= host_size)
        goto err;
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end != '\0' || port <= 0 || port > 65535)
        goto err;
    memcpy(host, rest, (size_t)(colon - rest));
    host[colon - rest] = '\0';
    /* Accept [::1] style literals. */
    if (host[0] == '[') {
        size_t n = strlen(host);
        if (n < 2 || host[n - 1] != ']')
            goto err;
        memmove(host, host + 1, n - 2);
        host[n - 2] = '\0';
    }
    *port_p = (int)port;
    return EMBER_OK;
err:
    ember_error("store", "init method '%s' is not of the form tcp://HOST:PORT",
                url ? url : "(null)");
    return EMBER_ERR_INVALID_PARAM;
}

static int resolve(const char *host, int port, int passive, struct addrinfo **ai_p)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char service[16];
    if (passive)
        hints.ai_flags = AI_PASSIVE;
    snprintf(service, sizeof(service), "%d", port);
    return getaddrinfo(host, service, &hints, ai_p);
}

/* ---- the server's data ------------------------------------------------------ */

typedef enum {
    ENTRY_BYTES,
    ENTRY_COUNTER,
    ENTRY_ARRIVALS
} entry_kind_t;

typedef struct store_entry {
    struct store_entry *next;
    char *key;
    entry_kind_t kind;
    void *value; /* ENTRY_ARRIVALS: a bitmap of ranks */
    size_t length;
    int64_t number; /* ENTRY_COUNTER: its value; ENTRY_ARRIVALS: bits set */
} store_entry_t;

/* A GET or WAIT_GE the server could not answer yet. */
typedef struct {
    int active;
    uint8_t op;
    uint64_t seq;
    int64_t target;
    double deadline;
    char key[TP_STORE_MAX_KEY + 1];
} store_wait_t;

typedef struct {
    int fd;
    uint8_t nonce[TP_STORE_NONCE_SIZE];
    uint64_t seq;      /* the next request's */
    int authenticated; /* has made one valid request */
    double accepted_at;
    double partial_since; /* bytes of an incomplete request held since; 0: none */
    uint8_t *in;          /* the request being received */
    size_t in_length, in_capacity;
    uint8_t *out; /* replies not yet sent */
    size_t out_length, out_sent;
    double out_since;
    store_wait_t wait;
    double draining_since; /* refused: read and dropped until it closes */
} store_conn_t;

struct tp_store_server {
    int listen_fd;
    int wake_pipe[2];
    pthread_t thread;
    pthread_mutex_t lock; /* stopping, counts */
    int stopping;
    double stop_deadline;
    tp_secret_t secret;
    store_entry_t *entries;
    size_t entry_count, entry_bytes;
    store_conn_t *conns;
    size_t conn_count, conn_capacity;
    tp_store_counts_t counts;
};

static store_entry_t *server_find(tp_store_server_t *server, const char *key)
{
    for (store_entry_t *e = server->entries; e; e = e->next) {
        if (strcmp(e->key, key) == 0)
            return e;
    }
    return NULL;
}

/* A warning for each of the first few refusals: an outsider must not fill
 * rank 0's log either. */
static void server_note(tp_store_server_t *server, unsigned long count, int fd, const char *what)
{
    if (count <= STORE_LOGGED_MAX)
        ember_warn("store", "%s (client fd %d)%s", what, fd,
                   count == STORE_LOGGED_MAX ? "; further ones are only counted" : "");
}

/* The entry for @key, created as @kind when absent; NULL when the store's
 * limits or memory refuse it, or it exists as another kind. */
static store_entry_t *server_entry(tp_store_server_t *server, const char *key, entry_kind_t kind,
                                   size_t key_length)
{
    store_entry_t *entry = server_find(server, key);
    if (entry)
        return entry->kind == kind || kind == ENTRY_BYTES ? entry : NULL;
    if (server->entry_count >= TP_STORE_MAX_ENTRIES ||
        server->entry_bytes + key_length > TP_STORE_MAX_BYTES)
        return NULL;
    entry = calloc(1, sizeof(*entry));
    if (!entry || !(entry->key = strdup(key))) {
        free(entry);
        return NULL;
    }
    entry->kind = kind;
    entry->next = server->entries;
    server->entries = entry;
    server->entry_count++;
    server->entry_bytes += key_length;
    return entry;
}

/* Replace @entry's bytes (a SET), within the limits. */
static int entry_set(tp_store_server_t *server, store_entry_t *entry, const void *value,
                     size_t length)
{
    size_t others = server->entry_bytes - entry->length;
    if (others + length > TP_STORE_MAX_BYTES)
        return 0;
    void *copy = malloc(length ? length : 1);
    if (!copy)
        return 0;
    memcpy(copy, value, length);
    free(entry->value);
    entry->value = copy;
    entry->length = length;
    entry->kind = ENTRY_BYTES;
    server->entry_bytes = others + length;
    return 1;
}

/* Set bit @rank of an arrival set; the number of bits set after. */
static int entry_arrive(tp_store_server_t *server, store_entry_t *entry, int64_t rank)
{
    size_t byte = (size_t)rank / 8;
    if (byte >= entry->length) {
        size_t grown_length = byte + 1;
        if (server->entry_bytes + grown_length - entry->length > TP_STORE_MAX_BYTES)
            return 0;
        uint8_t *grown = realloc(entry->value, grown_length);
        if (!grown)
            return 0;
        memset(grown + entry->length, 0, grown_length - entry->length);
        server->entry_bytes += grown_length - entry->length;
        entry->value = grown;
        entry->length = grown_length;
    }
    uint8_t *bits = entry->value, bit = (uint8_t)(1u << (rank % 8));
    if (!(bits[byte] & bit)) {
        bits[byte] |= bit;
        entry->number++;
    }
    return 1;
}

/* ---- the server's connections ----------------------------------------------- */

static void conn_free(store_conn_t *conn)
{
    close(conn->fd);
    free(conn->in);
    free(conn->out);
}

static void server_drop(tp_store_server_t *server, size_t index)
{
    conn_free(&server->conns[index]);
    server->conns[index] = server->conns[--server->conn_count];
}

/* Try to send what @conn holds; -1 when the connection is gone. */
static int conn_flush(store_conn_t *conn)
{
    while (conn->out_sent < conn->out_length) {
        ssize_t n = send(conn->fd, conn->out + conn->out_sent, conn->out_length - conn->out_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0; /* POLLOUT will tell */
        if (n <= 0)
            return -1;
        conn->out_sent += (size_t)n;
    }
    conn->out_length = conn->out_sent = 0;
    conn->out_since = 0;
    return 0;
}

/* Queue the authenticated reply to request @seq; -1 when out of memory. */
static int conn_reply(tp_store_server_t *server, store_conn_t *conn, uint64_t seq,
                      ember_status_t status, const void *value, size_t length, int64_t number)
{
    store_reply_t reply = {.magic = STORE_REPLY_MAGIC,
                           .status = status,
                           .value_length = (uint32_t)length,
                           .seq = seq,
                           .value = number};
    reply_mac(&server->secret, conn->nonce, &reply, value, reply.mac);
    size_t need = conn->out_length + sizeof(reply) + length;
    uint8_t *grown = realloc(conn->out, need);
    if (!grown)
        return -1;
    conn->out = grown;
    memcpy(conn->out + conn->out_length, &reply, sizeof(reply));
    if (length)
        memcpy(conn->out + conn->out_length + sizeof(reply), value, length);
    conn->out_length = need;
    if (!conn->out_since)
        conn->out_since = ember_time_now();
    return conn_flush(conn);
}

/* A refused request: say so (unauthenticated: its tag is zeros, which no
 * client trusts, but its status lets a client with another secret name the
 * cause) and stop answering.  The rest it sends is read and dropped for a
 * moment, so the close does not reset the connection before the refusal is
 * read (TCP drops what a reset overtakes). */
static void conn_refuse(tp_store_server_t *server, store_conn_t *conn, const char *why)
{
    store_reply_t reply = {.magic = STORE_REPLY_MAGIC, .status = EMBER_ERR_AUTH, .seq = conn->seq};
    /* Counted before the refusal leaves, so whoever reads it sees the count. */
    pthread_mutex_lock(&server->lock);
    unsigned long count = ++server->counts.refused;
    pthread_mutex_unlock(&server->lock);
    ssize_t rc = send(conn->fd, &reply, sizeof(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)rc;
    shutdown(conn->fd, SHUT_WR);
    conn->draining_since = ember_time_now();
    conn->wait.active = 0;
    conn->out_length = conn->out_sent = 0;
    conn->out_since = 0;
    char what[160];
    snprintf(what, sizeof(what), "refused a request: %s", why);
    server_note(server, count, conn->fd, what);
}

/* Answer @conn's wait if it can be answered now; -1 when the connection is
 * gone. */
static int conn_try_answer(tp_store_server_t *server, store_conn_t *conn, double now)
{
    store_wait_t *wait = &conn->wait;
    store_entry_t *entry = server_find(server, wait->key);

    if (wait->op == TP_STORE_OP_GET && entry && entry->kind == ENTRY_BYTES) {
        wait->active = 0;
        return conn_reply(server, conn, wait->seq, EMBER_OK, entry->value, entry->length, 0);
    }
    if (wait->op == TP_STORE_OP_GET && entry) { /* a counter or arrival set */
        wait->active = 0;
        return conn_reply(server, conn, wait->seq, EMBER_OK, entry->value, entry->length,
                          entry->number);
    }
    if (wait->op == TP_STORE_OP_WAIT_GE && entry && entry->kind != ENTRY_BYTES &&
        entry->number >= wait->target) {
        wait->active = 0;
        return conn_reply(server, conn, wait->seq, EMBER_OK, NULL, 0, entry->number);
    }
    if (now >= wait->deadline) {
        wait->active = 0;
        return conn_reply(server, conn, wait->seq, EMBER_ERR_TIMED_OUT, NULL, 0, 0);
    }
    return 0;
}

static int over_limits(tp_store_server_t *server, store_conn_t *conn, uint64_t seq)
{
    pthread_mutex_lock(&server->lock);
    unsigned long count = ++server->counts.over_limits;
    pthread_mutex_unlock(&server->lock);
    char what[128];
    snprintf(what, sizeof(what),
             "refused a SET over the store's limits (%u keys, %u "
             "MiB of keys and values)",
             TP_STORE_MAX_ENTRIES, TP_STORE_MAX_BYTES >> 20);
    server_note(server, count, conn->fd, what);
    return conn_reply(server, conn, seq, EMBER_ERR_NO_MEMORY, NULL, 0, 0);
}

/* Execute one authenticated request; -1 when the connection is gone. */
static int server_execute(tp_store_server_t *server, store_conn_t *conn,
                          const tp_store_request_t *req)
{
    char key[TP_STORE_MAX_KEY + 1];
    store_entry_t *entry;

    memcpy(key, req->key, req->key_length);
    key[req->key_length] = '\0';
    if (memchr(key, '\0', req->key_length))
        return conn_reply(server, conn, req->seq, EMBER_ERR_INVALID_PARAM, NULL, 0, 0);
    switch (req->op) {
    case TP_STORE_OP_SET:
        entry = server_entry(server, key, ENTRY_BYTES, req->key_length);
        if (!entry || !entry_set(server, entry, req->value, req->value_length))
            return over_limits(server, conn, req->seq);
        return conn_reply(server, conn, req->seq, EMBER_OK, NULL, 0, 0);
    case TP_STORE_OP_ADD:
        entry = server_entry(server, key, ENTRY_COUNTER, req->key_length);
        if (!entry)
            return over_limits(server, conn, req->seq);
        /* Wrapping is the adder's business, not undefined behaviour here. */
        entry->number = (int64_t)((uint64_t)entry->number + (uint64_t)req->arg);
        return conn_reply(server, conn, req->seq, EMBER_OK, NULL, 0, entry->number);
    case TP_STORE_OP_ARRIVE:
        if (req->arg < 0 || req->arg >= 8 * (int64_t)TP_STORE_MAX_VALUE)
            return conn_reply(server, conn, req->seq, EMBER_ERR_OUT_OF_RANGE, NULL, 0, 0);
        entry = server_entry(server, key, ENTRY_ARRIVALS, req->key_length);
        if (!entry || !entry_arrive(server, entry, req->arg))
            return over_limits(server, conn, req->seq);
        return conn_reply(server, conn, req->seq, EMBER_OK, NULL, 0, entry->number);
    default: /* GET, WAIT_GE */
        conn->wait =
                (store_wait_t){.active = 1, .op = req->op, .seq = req->seq, .target = req->arg};
        /* The deadline at full width: a huge or negative timeout is bounded. */
        int64_t ms = req->timeout_ms < 0          ? 0
                     : req->timeout_ms > 86400000 ? 86400000
                                                  : req->timeout_ms;
        conn->wait.deadline = ember_time_now() + (double)ms / 1000.0;
        memcpy(conn->wait.key, key, req->key_length + 1);
        return conn_try_answer(server, conn, ember_time_now());
    }
}

/* A refused connection's bytes: read and dropped; -1 once it closed. */
static int conn_drain(store_conn_t *conn)
{
    uint8_t sink[4096];
    for (;;) {
        ssize_t n = recv(conn->fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1;
    }
}

/* Read what @conn sent and serve every whole request; -1 when it must be
 * dropped (closed, or sent while a request of its waits). */
static int conn_read(tp_store_server_t *server, store_conn_t *conn)
{
    if (conn->draining_since)
        return conn_drain(conn);
    for (;;) {
        size_t need = 0;
        const char *why = NULL;
        tp_store_request_t req;
        ssize_t used = conn->in_length ? tp_store_request_parse(&server->secret, conn->nonce,
                                                                conn->seq, conn->in,
                                                                conn->in_length, &req, &need, &why)
                                       : 0;
        if (used < 0) {
            conn_refuse(server, conn, why);
            return conn_drain(conn);
        }
        if (used > 0) {
            if (conn->wait.active) /* one request at a time */
                return -1;
            conn->seq++;
            conn->authenticated = 1;
            pthread_mutex_lock(&server->lock);
            server->counts.requests++;
            pthread_mutex_unlock(&server->lock);
            int rc = server_execute(server, conn, &req);
            memmove(conn->in, conn->in + used, conn->in_length - (size_t)used);
            conn->in_length -= (size_t)used;
            conn->partial_since = conn->in_length ? ember_time_now() : 0;
            if (rc < 0)
                return -1;
            continue;
        }
        if (!need)
            need = sizeof(tp_store_head_t);
        /* Room for what the (authenticated) head says is coming: no more. */
        if (conn->in_capacity < need) {
            uint8_t *grown = realloc(conn->in, need);
            if (!grown)
                return -1;
            conn->in = grown;
            conn->in_capacity = need;
        }
        ssize_t n =
                recv(conn->fd, conn->in + conn->in_length, need - conn->in_length, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1; /* closed */
        if (!conn->in_length)
            conn->partial_since = ember_time_now();
        conn->in_length += (size_t)n;
    }
}

/* A connection holding part of a request, or none yet authenticated, past
 * TP_STORE_READ_S; or one whose replies do not leave. */
static int conn_late(const store_conn_t *conn, double now, const char **what_p)
{
    if (conn->draining_since)
        *what_p = now - conn->draining_since > 1.0 ? "" : NULL; /* counted already */
    else if (conn->partial_since && now - conn->partial_since > TP_STORE_READ_S)
        *what_p = "dropped a connection that sent part of a request and stopped";
    else if (!conn->authenticated && now - conn->accepted_at > TP_STORE_READ_S)
        *what_p = "dropped a connection that made no authenticated request";
    else if (conn->out_since && now - conn->out_since > STORE_WRITE_S)
        *what_p = "dropped a connection that does not read its replies";
    else
        return 0;
    return *what_p != NULL;
}

/* The next moment something must be checked: a wait's deadline, a late
 * connection. */
static double server_next_check(const tp_store_server_t *server, double now)
{
    double next = now + 1.0;
    for (size_t i = 0; i < server->conn_count; i++) {
        const store_conn_t *conn = &server->conns[i];
        double at[5] = {conn->wait.active ? conn->wait.deadline : next,
                        conn->partial_since ? conn->partial_since + TP_STORE_READ_S : next,
                        !conn->authenticated ? conn->accepted_at + TP_STORE_READ_S : next,
                        conn->out_since ? conn->out_since + STORE_WRITE_S : next,
                        conn->draining_since ? conn->draining_since + 1.0 : next};
        for (int k = 0; k < 5; k++)
            next = at[k] < next ? at[k] : next;
    }
    return next;
}

/* Room for one more connection: at the limit, the oldest that has not
 * authenticated goes (an outsider's flood must not lock the ranks out). */
static int server_make_room(tp_store_server_t *server)
{
    if (server->conn_count < TP_STORE_MAX_CLIENTS)
        return 1;
    size_t oldest = server->conn_count;
    for (size_t i = 0; i < server->conn_count; i++) {
        if (!server->conns[i].authenticated &&
            (oldest == server->conn_count ||
             server->conns[i].accepted_at < server->conns[oldest].accepted_at))
            oldest = i;
    }
    if (oldest == server->conn_count)
        return 0;
    server_drop(server, oldest);
    return 1;
}

static void server_accept(tp_store_server_t *server)
{
    int fd = accept4(server->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    store_hello_t hello = {.magic = STORE_HELLO_MAGIC, .version = STORE_VERSION};
    if (!server_make_room(server) || tp_auth_nonce(hello.nonce) != EMBER_OK ||
        !EMBER_RESERVE(server->conns, server->conn_capacity, server->conn_count + 1)) {
        pthread_mutex_lock(&server->lock);
        unsigned long count = ++server->counts.turned_away;
        pthread_mutex_unlock(&server->lock);
        server_note(server, count, fd, "turned a connection away (too many)");
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    store_conn_t *conn = &server->conns[server->conn_count++];
    *conn = (store_conn_t){.fd = fd, .accepted_at = ember_time_now()};
    memcpy(conn->nonce, hello.nonce, sizeof(hello.nonce));
    /* 24 bytes into a fresh socket's buffer: never short. */
    if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof(hello))
        server_drop(server, server->conn_count - 1);
}

/* One pass over the connections after poll: serve, answer, drop. */
static void server_serve(tp_store_server_t *server, const struct pollfd *pfds)
{
    double now = ember_time_now();
    for (size_t i = server->conn_count; i-- > 0;) {
        store_conn_t *conn = &server->conns[i];
        short revents = pfds[2 + i].revents;
        const char *what = NULL;
        int gone = 0;
        if (revents & POLLOUT)
            gone = conn_flush(conn) < 0;
        if (!gone && (revents & (POLLIN | POLLHUP | POLLERR)))
            gone = conn_read(server, conn) < 0;
        if (!gone && conn->wait.active)
            gone = conn_try_answer(server, conn, now) < 0;
        if (!gone && conn_late(conn, now, &what)) {
            if (*what) { /* "": a refused connection's moment is over */
                pthread_mutex_lock(&server->lock);
                unsigned long count = ++server->counts.stalled;
                pthread_mutex_unlock(&server->lock);
                server_note(server, count, conn->fd, what);
            }
            gone = 1;
        }
        if (gone)
            server_drop(server, i);
    }
}

/* A SET, ADD or ARRIVE may release other connections' waits. */
static void server_answer_waits(tp_store_server_t *server)
{
    double now = ember_time_now();
    for (size_t i = server->conn_count; i-- > 0;) {
        if (server->conns[i].wait.active && conn_try_answer(server, &server->conns[i], now) < 0)
            server_drop(server, i);
    }
}

/* Whether a secret holder is still connected (a stopping store waits for
 * them only, not for an outsider's connections). */
static int server_has_clients(const tp_store_server_t *server)
{
    for (size_t i = 0; i < server->conn_count; i++) {
        if (server->conns[i].authenticated)
            return 1;
    }
    return 0;
}

static void *server_main(void *arg)
{
    tp_store_server_t *server = arg;
    struct pollfd *pfds = NULL;
    size_t capacity = 0;

    for (;;) {
        double now = ember_time_now();
        pthread_mutex_lock(&server->lock);
        int stop =
                server->stopping && (!server_has_clients(server) || now >= server->stop_deadline);
        pthread_mutex_unlock(&server->lock);
        if (stop)
            break;
        if (!EMBER_RESERVE(pfds, capacity, server->conn_count + 2))
            break;
        size_t n = 0;
        pfds[n++] = (struct pollfd){.fd = server->wake_pipe[0], .events = POLLIN};
        pfds[n++] = (struct pollfd){.fd = server->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < server->conn_count; i++)
            pfds[n++] = (struct pollfd){
                    .fd = server->conns[i].fd,
                    .events = (short)(POLLIN | (server->conns[i].out_length ? POLLOUT : 0))};
        double next = server_next_check(server, now);
        pthread_mutex_lock(&server->lock);
        if (server->stopping && server->stop_deadline < next)
            next = server->stop_deadline; /* not a poll period past it */
        pthread_mutex_unlock(&server->lock);
        if (poll(pfds, n, (int)((next - now) * 1000) + 1) < 0 && errno != EINTR)
            break;
        if (pfds[0].revents) {
            char drain[16];
            ssize_t rc = read(server->wake_pipe[0], drain, sizeof(drain));
            (void)rc;
        }
        server_serve(server, pfds);
        server_answer_waits(server);
        if (pfds[1].revents & POLLIN)
            server_accept(server);
    }
    free(pfds);
    return NULL;
}

ember_status_t tp_store_server_start(const char *host, int port, const tp_secret_t *secret,
                                     tp_store_server_t **server_p)
{
    tp_store_server_t *server;
    struct addrinfo *ai = NULL;
    int one = 1, rc;

    server = calloc(1, sizeof(*server));
    if (!server)
        return EMBER_ERR_NO_MEMORY;
    server->secret = *secret;
    server->listen_fd = -1;
    rc = resolve(host, port, 1, &ai);
    if (rc != 0) {
        ember_error("store", "cannot resolve store host '%s': %s", host, gai_strerror(rc));
        goto err_free;
    }
    server->listen_fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server->listen_fd < 0)
        goto err_sys;
    setsockopt(server->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(server->listen_fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
        listen(server->listen_fd, 1024) < 0)
        goto err_sys;
    freeaddrinfo(ai);
    ai = NULL;
    if (pipe2(server->wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        goto err_sys;
    pthread_mutex_init(&server->lock, NULL);
    if (pthread_create(&server->thread, NULL, server_main, server) != 0)
        goto err_close_pipe;
    ember_debug("store", "rendezvous store serving on %s:%d", host, port);
    *server_p = server;
    return EMBER_OK;

err_close_pipe:
    close(server->wake_pipe[0]);
    close(server->wake_pipe[1]);
err_sys:
    ember_error("store", "cannot serve the rendezvous store on %s:%d: %s", host, port,
                strerror(errno));
    if (ai)
        freeaddrinfo(ai);
    if (server->listen_fd >= 0)
        close(server->listen_fd);
err_free:
    free(server);
    return EMBER_ERR_IO;
}

int tp_store_server_port(const tp_store_server_t *server)
{
    struct sockaddr_storage address;
    socklen_t length = sizeof(address);
    if (getsockname(server->listen_fd, (struct sockaddr *)&address, &length) != 0)
        return -1;
    return ntohs(address.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&address)->sin6_port
                                               : ((struct sockaddr_in *)&address)->sin_port);
}

void tp_store_server_counts(tp_store_server_t *server, tp_store_counts_t *counts_p)
{
    pthread_mutex_lock(&server->lock);
    *counts_p = server->counts;
    pthread_mutex_unlock(&server->lock);
}

void tp_store_server_stop(tp_store_server_t *server, double linger_s)
{
    char byte = 1;
    ssize_t rc;

    if (!server)
        return;
    pthread_mutex_lock(&server->lock);
    server->stop_deadline = ember_time_now() + linger_s;
    server->stopping = 1;
    pthread_mutex_unlock(&server->lock);
    rc = write(server->wake_pipe[1], &byte, 1);
    (void)rc;
    pthread_join(server->thread, NULL);
    const tp_store_counts_t *c = &server->counts;
    if (c->refused || c->stalled || c->over_limits || c->turned_away)
        ember_warn("store",
                   "served %lu authenticated requests; refused %lu "
                   "unauthenticated or malformed ones, dropped %lu stalled or silent "
                   "connections, refused %lu SETs over its limits, turned %lu "
                   "connections away",
                   c->requests, c->refused, c->stalled, c->over_limits, c->turned_away);
    for (size_t i = 0; i < server->conn_count; i++)
        conn_free(&server->conns[i]);
    free(server->conns);
    while (server->entries) {
        store_entry_t *entry = server->entries;
        server->entries = entry->next;
        free(entry->key);
        free(entry->value);
        free(entry);
    }
    close(server->listen_fd);
    close(server->wake_pipe[0]);
    close(server->wake_pipe[1]);
    pthread_mutex_destroy(&server->lock);
    free(server);
}

/* ---- client -------------------------------------------------------------- */

struct tp_store_client {
    int fd;
    uint8_t nonce[TP_STORE_NONCE_SIZE];
    uint64_t seq;
    tp_secret_t secret;
    char where[300]; /* host:port, for errors */
};

/* The server's greeting: its nonce for this connection. */
static ember_status_t client_greeted(tp_store_client_t *client, double timeout_s)
{
    store_hello_t hello;
    ember_status_t status =
            io_full(client->fd, &hello, sizeof(hello), 0, ember_time_now() + timeout_s);
    if (status == EMBER_OK && (hello.magic != STORE_HELLO_MAGIC || hello.version != STORE_VERSION))
        status = EMBER_ERR_BAD_MESSAGE;
    if (status != EMBER_OK) {
        ember_error("store",
                    "the server at %s did not greet us as an ember store "
                    "(version %d) would: %s",
                    client->where, STORE_VERSION, ember_status_string(status));
        return status;
    }
    memcpy(client->nonce, hello.nonce, sizeof(client->nonce));
    return EMBER_OK;
}

static int connect_once(const char *host, int port, int *errno_p)
{
    struct addrinfo *ai = NULL;
    int fd = -1;
    if (resolve(host, port, 0, &ai) != 0)
        return -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            *errno_p = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

ember_status_t tp_store_connect(const char *host, int port, const tp_secret_t *secret,
                                double timeout_s, tp_store_client_t **client_p)
{
    double deadline = ember_time_now() + timeout_s, delay = 0.01;
    int last_errno = 0;

    do {
        int fd = connect_once(host, port, &last_errno);
        if (fd >= 0) {
            tp_store_client_t *client = calloc(1, sizeof(*client));
            int one = 1;
            if (!client) {
                close(fd);
                return EMBER_ERR_NO_MEMORY;
            }
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            client->fd = fd;
            client->secret = *secret;
            snprintf(client->where, sizeof(client->where), "%s:%d", host, port);
            /* The greeting comes at once from a live store; a squatter on
             * the port must not hold us past the deadline. */
            double left = deadline - ember_time_now();
            ember_status_t status = client_greeted(client, left > 5.0 ? left : 5.0);
            if (status != EMBER_OK) {
                tp_store_disconnect(client);
                return status;
            }
            *client_p = client;
            return EMBER_OK;
        }
        ember_time_sleep(delay);
        if (delay < 0.2)
            delay *= 2;
    } while (ember_time_now() < deadline);
    ember_error("store",
                "cannot reach the rendezvous store at %s:%d within %.0f s:"
                " %s",
                host, port, timeout_s, last_errno ? strerror(last_errno) : "host not resolved");
    return EMBER_ERR_TIMED_OUT;
}

void tp_store_disconnect(tp_store_client_t *client)
{
    if (!client)
        return;
    close(client->fd);
    free(client);
}

/* Read and check the reply to request @seq; its value (malloc'd) in
 * *value_p when asked. */
static ember_status_t client_reply(tp_store_client_t *client, uint64_t seq, double deadline,
                                   store_reply_t *reply_p, void **value_p)
{
    uint8_t mac[TP_AUTH_MAC_SIZE];
    void *value = NULL;

    EMBER_CHECK(io_full(client->fd, reply_p, sizeof(*reply_p), 0, deadline));
    if (reply_p->magic != STORE_REPLY_MAGIC || reply_p->value_length > TP_STORE_MAX_VALUE)
        return EMBER_ERR_BAD_MESSAGE;
    if (reply_p->value_length) {
        value = malloc(reply_p->value_length);
        if (!value)
            return EMBER_ERR_NO_MEMORY;
        ember_status_t status = io_full(client->fd, value, reply_p->value_length, 0, deadline);
        if (status != EMBER_OK) {
            free(value);
            return status;
        }
    }
    reply_mac(&client->secret, client->nonce, reply_p, value, mac);
    if (!tp_auth_mac_equal(mac, reply_p->mac) || reply_p->seq != seq) {
        ember_error("store", "%s",
                    reply_p->status == EMBER_ERR_AUTH
                            ? "the rendezvous store refused our request: it does not hold our "
                              "job secret (EMBER_SECRET_FILE), or refused it as malformed"
                            : "a reply from the rendezvous store is not authenticated: it "
                              "does not hold our job secret, or is not the job's store");
        free(value);
        return EMBER_ERR_AUTH;
    }
    if (value_p)
        *value_p = value;
    else
        free(value);
    return ember_status_from_wire(reply_p->status);
}

static ember_status_t client_request(tp_store_client_t *client, uint8_t op, const char *key,
                                     const void *value, size_t length, int64_t arg,
                                     double timeout_s, store_reply_t *reply_p, void **value_p)
{
    size_t key_length = strlen(key);
    /* The server answers by its own deadline; allow it time to do so. */
    double deadline = ember_time_now() + timeout_s + 10.0;

    if (key_length == 0 || key_length > TP_STORE_MAX_KEY || length > TP_STORE_MAX_VALUE)
        return EMBER_ERR_INVALID_PARAM;
    uint8_t *request = malloc(tp_store_request_size(key_length, length));
    if (!request)
        return EMBER_ERR_NO_MEMORY;
    uint64_t seq = client->seq++;
    size_t bytes = tp_store_request_pack(&client->secret, client->nonce, seq, op, key, key_length,
                                         value, length, arg, (int64_t)(timeout_s * 1000), request);
    ember_status_t status = io_full(client->fd, request, bytes, 1, deadline);
    free(request);
    EMBER_CHECK(status);
    return client_reply(client, seq, deadline, reply_p, value_p);
}

ember_status_t tp_store_set(tp_store_client_t *client, const char *key, const void *value,
                            size_t length)
{
    store_reply_t reply;
    return client_request(client, TP_STORE_OP_SET, key, value, length, 0, 0, &reply, NULL);
}

ember_status_t tp_store_get(tp_store_client_t *client, const char *key, double timeout_s,
                            void **value_p, size_t *length_p)
{
    store_reply_t reply;
    void *value = NULL;
    ember_status_t status =
            client_request(client, TP_STORE_OP_GET, key, NULL, 0, 0, timeout_s, &reply, &value);
    if (status != EMBER_OK) {
        free(value);
        return status;
    }
    if (!value)
        value = malloc(1); /* an empty value is still "present" */
    if (!value)
        return EMBER_ERR_NO_MEMORY;
    *value_p = value;
    *length_p = reply.value_length;
    return EMBER_OK;
}

ember_status_t tp_store_add(tp_store_client_t *client, const char *key, int64_t delta,
                            int64_t *result_p)
{
    store_reply_t reply;
    EMBER_CHECK(client_request(client, TP_STORE_OP_ADD, key, NULL, 0, delta, 0, &reply, NULL));
    if (result_p)
        *result_p = reply.value;
    return EMBER_OK;
}

ember_status_t tp_store_wait_ge(tp_store_client_t *client, const char *key, int64_t target,
                                double timeout_s)
{
    store_reply_t reply;
    return client_request(client, TP_STORE_OP_WAIT_GE, key, NULL, 0, target, timeout_s, &reply,
                          NULL);
}

ember_status_t tp_store_arrive(tp_store_client_t *client, const char *key, int rank,
                               int64_t *count_p)
{
    store_reply_t reply;
    EMBER_CHECK(client_request(client, TP_STORE_OP_ARRIVE, key, NULL, 0, rank, 0, &reply, NULL));
    if (count_p)
        *count_p = reply.value;
    return EMBER_OK;
}
