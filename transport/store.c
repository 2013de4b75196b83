/* transport/store: the authenticated rendezvous store over TCP (start-up). */
#define _GNU_SOURCE /* pipe2, accept4 */
#include "transport/store.h"
#include "common/clock.h"
#include "common/log_limit.h"
#include "common/reserve.h"

#include <ember/log.h>

#include <arpa/inet.h>
#include <dirent.h>
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
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define STORE_MAGIC       0x454d5354u /* "EMST": a request */
#define STORE_REPLY_MAGIC 0x454d5352u /* "EMSR": its reply */
#define STORE_HELLO_MAGIC 0x454d5348u /* "EMSH": the server's greeting */
#define STORE_VERSION     2           /* 2: authenticated */
/* A reply that does not leave within this (its client stopped reading)
 * drops the connection. */
#define STORE_WRITE_S 10.0
/* Late connections and idle waits are looked for at most this often, so
 * that what the store does per event does not grow with the connections
 * held (an outsider's idle ones cost nothing between two looks). */
#define STORE_SWEEP_S 0.05
/* Connections taken per pass before the others' events are served. */
#define STORE_ACCEPTS_PER_PASS 32
/* Accepting pauses this long when the process is out of descriptors. */
#define STORE_FD_BACKOFF_S   0.1
#define STORE_SOURCE_BUCKETS 256

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
    port = strcmp(colon + 1, "auto") == 0 ? TP_STORE_PORT_AUTO : strtol(colon + 1, &end, 10);
    if (port != TP_STORE_PORT_AUTO &&
        (errno || end == colon + 1 || *end != '\0' || port <= 0 || port > 65535))
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
    ember_error("store", "init method '%s' is not of the form tcp://HOST:PORT (or HOST:auto)",
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

/* A tiny intrusive list (a head is its own neighbour when empty). */
typedef struct store_link {
    struct store_link *prev, *next;
} store_link_t;

static void link_init(store_link_t *head)
{
    head->prev = head->next = head;
}

static void link_push(store_link_t *head, store_link_t *link)
{
    link->prev = head->prev;
    link->next = head;
    head->prev->next = link;
    head->prev = link;
}

static void link_remove(store_link_t *link)
{
    if (!link->next)
        return;
    link->prev->next = link->next;
    link->next->prev = link->prev;
    link->prev = link->next = NULL;
}

#define LINK_OWNER(link, type, member) ((type *)(void *)((char *)(link)-offsetof(type, member)))

/* Where connections come from (a remote address): how many it holds that
 * have not authenticated, oldest first, so that its flood displaces its
 * own connections, not another source's nor a rank's. */
typedef struct store_source {
    struct store_source *next; /* in its hash bucket */
    uint8_t address[16];
    size_t address_length;
    size_t conns;          /* all of its connections */
    size_t unproven_count; /* of them, not authenticated yet */
    store_link_t unproven;
} store_source_t;

typedef struct {
    int fd;
    size_t index; /* in server->conns */
    store_source_t *source;
    store_link_t by_age;    /* server->unproven, until it authenticates */
    store_link_t by_source; /* source->unproven, until it authenticates */
    store_link_t authed;    /* server->authed, once it has */
    int gone;               /* closed; freed at the end of the pass */
    uint32_t events;        /* what epoll watches for it */
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
    int epoll_fd;
    store_conn_t **conns;
    size_t conn_count, conn_capacity;
    size_t max_conns;      /* the descriptor budget's share (store_fd_budget) */
    store_link_t unproven; /* not authenticated, oldest first */
    store_link_t authed;
    store_conn_t **dead; /* dropped in this pass, freed at its end */
    size_t dead_count, dead_capacity;
    store_source_t *sources[STORE_SOURCE_BUCKETS];
    double next_sweep;
    double accept_paused_until; /* out of descriptors: accepting waits */
    int listen_watched;
    int door_closing; /* tp_store_server_close_door asked (under lock) */
    int door_closed;  /* listen_fd closed: no more connections */
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

/* A warning for a refusal, limited with counts (common/log_limit.h): an
 * outsider must not fill rank 0's log either. */
static void server_note(tp_store_server_t *server, int fd, const char *what)
{
    ember_warn_limited("store", "%s (client fd %d)", what, fd);
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
    if (conn->fd >= 0)
        close(conn->fd);
    free(conn->in);
    free(conn->out);
    free(conn);
}

static size_t source_bucket(const uint8_t *address, size_t length)
{
    uint32_t hash = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < length; i++)
        hash = (hash ^ address[i]) * 16777619u;
    return hash % STORE_SOURCE_BUCKETS;
}

/* The remote address of @fd as bytes (IPv4 or IPv6; 0 bytes if unknown). */
static size_t peer_address(int fd, uint8_t address[16])
{
    struct sockaddr_storage peer;
    socklen_t length = sizeof(peer);
    if (getpeername(fd, (struct sockaddr *)&peer, &length) != 0)
        return 0;
    if (peer.ss_family == AF_INET) {
        memcpy(address, &((struct sockaddr_in *)&peer)->sin_addr, 4);
        return 4;
    }
    if (peer.ss_family == AF_INET6) {
        memcpy(address, &((struct sockaddr_in6 *)&peer)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

/* @fd's source, created on its first connection; NULL without memory. */
static store_source_t *source_of(tp_store_server_t *server, int fd)
{
    uint8_t address[16];
    size_t length = peer_address(fd, address);
    store_source_t **bucket = &server->sources[source_bucket(address, length)];
    for (store_source_t *source = *bucket; source; source = source->next) {
        if (source->address_length == length && memcmp(source->address, address, length) == 0)
            return source;
    }
    store_source_t *source = calloc(1, sizeof(*source));
    if (!source)
        return NULL;
    memcpy(source->address, address, length);
    source->address_length = length;
    link_init(&source->unproven);
    source->next = *bucket;
    *bucket = source;
    return source;
}

/* A source is forgotten with its last connection. */
static void source_release(tp_store_server_t *server, store_source_t *source)
{
    if (--source->conns)
        return;
    store_source_t **p = &server->sources[source_bucket(source->address, source->address_length)];
    while (*p != source)
        p = &(*p)->next;
    *p = source->next;
    free(source);
}

/* @conn made its first authenticated request: limits no longer touch it. */
static void conn_proven(tp_store_server_t *server, store_conn_t *conn)
{
    link_remove(&conn->by_age);
    link_remove(&conn->by_source);
    conn->source->unproven_count--;
    link_push(&server->authed, &conn->authed);
}

/* Close @conn now and free it at the end of the pass (events for it may
 * still be in hand). */
static void server_drop(tp_store_server_t *server, store_conn_t *conn)
{
    if (conn->gone)
        return;
    if (!conn->authenticated)
        conn->source->unproven_count--;
    link_remove(&conn->by_age);
    link_remove(&conn->by_source);
    link_remove(&conn->authed);
    source_release(server, conn->source);
    close(conn->fd); /* leaves the epoll set with it */
    conn->fd = -1;
    conn->gone = 1;
    store_conn_t *last = server->conns[--server->conn_count];
    server->conns[conn->index] = last;
    last->index = conn->index;
    server->dead[server->dead_count++] = conn; /* room kept by server_admit */
}

static void server_reap(tp_store_server_t *server)
{
    for (size_t i = 0; i < server->dead_count; i++)
        conn_free(server->dead[i]);
    server->dead_count = 0;
}

/* Watch @conn for input, and for room to send while replies wait. */
static void conn_watch(tp_store_server_t *server, store_conn_t *conn)
{
    uint32_t events = EPOLLIN | (conn->out_length ? EPOLLOUT : 0);
    if (conn->gone || events == conn->events)
        return;
    struct epoll_event event = {.events = events, .data.ptr = conn};
    epoll_ctl(server->epoll_fd, EPOLL_CTL_MOD, conn->fd, &event);
    conn->events = events;
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
    ++server->counts.refused;
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
    server_note(server, conn->fd, what);
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
    ++server->counts.over_limits;
    pthread_mutex_unlock(&server->lock);
    char what[128];
    snprintf(what, sizeof(what),
             "refused a SET over the store's limits (%u keys, %u "
             "MiB of keys and values)",
             TP_STORE_MAX_ENTRIES, TP_STORE_MAX_BYTES >> 20);
    server_note(server, conn->fd, what);
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
            if (!conn->authenticated)
                conn_proven(server, conn);
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

/* The next moment a wait of an authenticated connection times out (the
 * others' deadlines are looked for by the sweep). */
static double server_next_wait(const tp_store_server_t *server, double next)
{
    for (const store_link_t *l = server->authed.next; l != &server->authed; l = l->next) {
        const store_conn_t *conn = LINK_OWNER(l, store_conn_t, authed);
        if (conn->wait.active && conn->wait.deadline < next)
            next = conn->wait.deadline;
    }
    return next;
}

/* The oldest connection of @head (by_age or by_source) that has still not
 * authenticated once what it sent is read: it makes way for a newcomer.
 * NULL when none. */
static store_conn_t *server_victim(tp_store_server_t *server, store_link_t *head, int by_source)
{
    while (head->next != head) {
        store_conn_t *conn = by_source ? LINK_OWNER(head->next, store_conn_t, by_source)
                                       : LINK_OWNER(head->next, store_conn_t, by_age);
        /* A rank's request may be waiting unread: it is not a victim. */
        if (!conn->draining_since && conn_read(server, conn) < 0) {
            server_drop(server, conn);
            continue;
        }
        if (!conn->authenticated)
            return conn;
    }
    return NULL;
}

/* Room for one more connection from @source: beyond its share of
 * connections that have not authenticated (TP_STORE_SOURCE_UNPROVEN), or
 * at the store's limit, the oldest of those makes way; authenticated ones
 * never do.  0 when there is no room. */
static int server_make_room(tp_store_server_t *server, store_source_t *source)
{
    store_conn_t *victim = NULL;
    if (source->unproven_count >= TP_STORE_SOURCE_UNPROVEN)
        victim = server_victim(server, &source->unproven, 1);
    if (!victim && server->conn_count >= server->max_conns)
        victim = server_victim(server, &server->unproven, 0);
    if (victim) {
        pthread_mutex_lock(&server->lock);
        ++server->counts.turned_away;
        pthread_mutex_unlock(&server->lock);
        server_note(server, victim->fd,
                    "closed an unauthenticated connection to make way for a newer one");
        server_drop(server, victim);
    }
    return server->conn_count < server->max_conns;
}

/* accept() found no descriptor: an unauthenticated connection gives its
 * up, else accepting pauses a moment (the listening socket stays readable:
 * retrying at once would spin). */
static void server_out_of_fds(tp_store_server_t *server, int error)
{
    store_conn_t *victim = server_victim(server, &server->unproven, 0);
    if (victim) {
        server_drop(server, victim);
        return;
    }
    if (!server->accept_paused_until)
        ember_warn("store", "accept: %s; pausing new connections %.1f s", strerror(error),
                   STORE_FD_BACKOFF_S);
    server->accept_paused_until = ember_time_now() + STORE_FD_BACKOFF_S;
    epoll_ctl(server->epoll_fd, EPOLL_CTL_DEL, server->listen_fd, NULL);
    server->listen_watched = 0;
}

static void server_turn_away(tp_store_server_t *server, int fd)
{
    pthread_mutex_lock(&server->lock);
    ++server->counts.turned_away;
    pthread_mutex_unlock(&server->lock);
    server_note(server, fd, "turned a connection away (too many)");
    close(fd);
}

/* Take in @fd: greet it, watch it.  0 when it was turned away. */
static int server_admit(tp_store_server_t *server, int fd)
{
    store_hello_t hello = {.magic = STORE_HELLO_MAGIC, .version = STORE_VERSION};
    store_source_t *source = source_of(server, fd);
    if (!source)
        return 0;
    source->conns++; /* held while room is made: it must not be forgotten */
    int room = server_make_room(server, source);
    store_conn_t *conn = room ? calloc(1, sizeof(*conn)) : NULL;
    if (!conn || tp_auth_nonce(hello.nonce) != EMBER_OK ||
        !EMBER_RESERVE(server->conns, server->conn_capacity, server->conn_count + 1) ||
        !EMBER_RESERVE(server->dead, server->dead_capacity, server->conn_count + 1)) {
        free(conn);
        source_release(server, source);
        return 0;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *conn = (store_conn_t){
            .fd = fd, .index = server->conn_count, .source = source, .events = EPOLLIN};
    conn->accepted_at = ember_time_now();
    memcpy(conn->nonce, hello.nonce, sizeof(hello.nonce));
    server->conns[server->conn_count++] = conn;
    source->unproven_count++;
    link_push(&server->unproven, &conn->by_age);
    link_push(&source->unproven, &conn->by_source);
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = conn};
    /* 24 bytes into a fresh socket's buffer: never short. */
    if (epoll_ctl(server->epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0 ||
        send(fd, &hello, sizeof(hello), MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof(hello))
        server_drop(server, conn);
    return 1;
}

static void server_accept(tp_store_server_t *server)
{
    for (int i = 0; i < STORE_ACCEPTS_PER_PASS; i++) {
        int fd = accept4(server->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0 && errno == EINTR)
            continue;
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
            server_out_of_fds(server, errno);
            if (!server->listen_watched)
                return;
            continue;
        }
        if (fd < 0)
            return; /* EAGAIN: none left; else the next pass retries */
        if (!server_admit(server, fd))
            server_turn_away(server, fd);
    }
}

/* Serve one connection's event: read, send, answer. */
static void server_event(tp_store_server_t *server, store_conn_t *conn, uint32_t events)
{
    int gone = 0;
    if (conn->gone)
        return;
    if (events & EPOLLOUT)
        gone = conn_flush(conn) < 0;
    if (!gone && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        gone = conn_read(server, conn) < 0;
    if (!gone && conn->wait.active)
        gone = conn_try_answer(server, conn, ember_time_now()) < 0;
    if (gone)
        server_drop(server, conn);
    else
        conn_watch(server, conn);
}

/* Every connection past its deadline goes (conn_late); at most every
 * STORE_SWEEP_S. */
static void server_sweep(tp_store_server_t *server, double now)
{
    for (size_t i = server->conn_count; i-- > 0;) {
        store_conn_t *conn = server->conns[i];
        const char *what = NULL;
        if (!conn_late(conn, now, &what))
            continue;
        if (*what) { /* "": a refused connection's moment is over */
            pthread_mutex_lock(&server->lock);
            ++server->counts.stalled;
            pthread_mutex_unlock(&server->lock);
            server_note(server, conn->fd, what);
        }
        server_drop(server, conn);
    }
    server->next_sweep = now + STORE_SWEEP_S;
}

/* A SET, ADD or ARRIVE may release other connections' waits; a wait may
 * time out.  Only authenticated connections wait. */
static void server_answer_waits(tp_store_server_t *server)
{
    double now = ember_time_now();
    store_link_t *l = server->authed.next;
    while (l != &server->authed) {
        store_conn_t *conn = LINK_OWNER(l, store_conn_t, authed);
        l = l->next; /* before a drop unlinks it */
        if (!conn->wait.active)
            continue;
        if (conn_try_answer(server, conn, now) < 0)
            server_drop(server, conn);
        else
            conn_watch(server, conn);
    }
}

/* Whether a secret holder is still connected (a stopping store waits for
 * them only, not for an outsider's connections). */
static int server_has_clients(const tp_store_server_t *server)
{
    return server->authed.next != &server->authed;
}

/* Accepting resumes once its pause is over. */
static void server_resume_accepting(tp_store_server_t *server, double now)
{
    if (server->door_closed || server->listen_watched || now < server->accept_paused_until)
        return;
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = &server->listen_fd};
    if (epoll_ctl(server->epoll_fd, EPOLL_CTL_ADD, server->listen_fd, &event) == 0)
        server->listen_watched = 1;
    server->accept_paused_until = 0;
}

/* How long the next wait for events may last, in ms. */
static int server_timeout_ms(tp_store_server_t *server, double now)
{
    double next = server_next_wait(server, server->next_sweep);
    if (!server->door_closed && !server->listen_watched && server->accept_paused_until < next)
        next = server->accept_paused_until;
    pthread_mutex_lock(&server->lock);
    if (server->stopping && server->stop_deadline < next)
        next = server->stop_deadline; /* not a sweep period past it */
    pthread_mutex_unlock(&server->lock);
    return next <= now ? 0 : (int)((next - now) * 1000) + 1;
}

/* Every member of the job is connected: stop listening (a connection
 * attempt is refused by the kernel, at no cost to us) and drop whoever has
 * not proven the secret by now. */
static void server_close_door(tp_store_server_t *server)
{
    if (server->listen_watched)
        epoll_ctl(server->epoll_fd, EPOLL_CTL_DEL, server->listen_fd, NULL);
    close(server->listen_fd);
    server->listen_fd = -1;
    server->listen_watched = 0;
    server->door_closed = 1;
    for (size_t i = server->conn_count; i-- > 0;) {
        if (!server->conns[i]->authenticated) {
            server_drop(server, server->conns[i]);
            pthread_mutex_lock(&server->lock);
            server->counts.turned_away++;
            pthread_mutex_unlock(&server->lock);
        }
    }
}

static void *server_main(void *arg)
{
    tp_store_server_t *server = arg;
    struct epoll_event events[64];

    for (;;) {
        double now = ember_time_now();
        pthread_mutex_lock(&server->lock);
        int stop =
                server->stopping && (!server_has_clients(server) || now >= server->stop_deadline);
        int close_door = server->door_closing && !server->door_closed;
        pthread_mutex_unlock(&server->lock);
        if (close_door)
            server_close_door(server);
        if (stop)
            break;
        int n = epoll_wait(server->epoll_fd, events, 64, server_timeout_ms(server, now));
        if (n < 0 && errno != EINTR)
            break;
        int accepting = 0;
        for (int i = 0; i < n; i++) {
            void *ptr = events[i].data.ptr;
            if (ptr == server->wake_pipe) {
                char drain[16];
                ssize_t rc = read(server->wake_pipe[0], drain, sizeof(drain));
                (void)rc;
            } else if (ptr == &server->listen_fd) {
                accepting = 1;
            } else {
                server_event(server, ptr, events[i].events);
            }
        }
        server_answer_waits(server);
        now = ember_time_now();
        if (now >= server->next_sweep)
            server_sweep(server, now);
        server_reap(server); /* no event in hand names a dropped one now */
        server_resume_accepting(server, now);
        if (accepting && server->listen_watched && !server->door_closed)
            server_accept(server);
    }
    server_reap(server);
    return NULL;
}

/* Descriptors held back from the store for the rest of the job: its UCX
 * endpoints (sockets, shared-memory files), the files it reads and the
 * checkpoints it writes. */
#define STORE_FD_RESERVE 256

static size_t fds_open(void)
{
    DIR *dir = opendir("/proc/self/fd");
    size_t count = 0;
    if (!dir)
        return 64; /* a guess on the safe side */
    while (readdir(dir))
        count++;
    closedir(dir);
    return count > 3 ? count - 3 : 0; /* ".", ".." and the directory's own */
}

/* How many connections the store may hold: RLIMIT_NOFILE (its soft limit
 * raised to the hard one where allowed) less what is open now and
 * STORE_FD_RESERVE, at most TP_STORE_MAX_CLIENTS.  Beyond the descriptor
 * limit, accept() would fail and so would every open() of the process:
 * its peers' /proc entries, its checkpoints. */
static size_t store_fd_budget(void)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return TP_STORE_MAX_CLIENTS;
    if (limit.rlim_cur < limit.rlim_max) {
        struct rlimit raised = {.rlim_cur = limit.rlim_max, .rlim_max = limit.rlim_max};
        if (raised.rlim_cur > (1u << 20))
            raised.rlim_cur = 1u << 20;
        if (raised.rlim_cur > limit.rlim_cur && setrlimit(RLIMIT_NOFILE, &raised) == 0)
            limit = raised;
    }
    size_t used = fds_open() + STORE_FD_RESERVE + 8; /* the store's own: listener, pipe, epoll */
    if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= used + TP_STORE_MAX_CLIENTS)
        return TP_STORE_MAX_CLIENTS;
    size_t budget = limit.rlim_cur > used ? (size_t)limit.rlim_cur - used : 0;
    if (budget < 16) {
        ember_warn("store",
                   "only %zu descriptors left for the rendezvous store's connections "
                   "(RLIMIT_NOFILE %llu); raise `ulimit -n`",
                   budget, (unsigned long long)limit.rlim_cur);
        budget = 16;
    }
    return budget;
}

/* Who listens on TCP @port here, if this user can see it: "pid 123
 * (name)", else "". */
static void port_occupant(int port, char *text, size_t size)
{
    static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    unsigned long inode = 0;
    char line[512];
    text[0] = '\0';
    for (int t = 0; t < 2 && !inode; t++) {
        FILE *file = fopen(tables[t], "r");
        while (file && fgets(line, sizeof(line), file)) {
            char local[128];
            unsigned state, local_port;
            unsigned long node;
            if (sscanf(line, " %*d: %127[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*s %*s %lu", local,
                       &local_port, &state, &node) == 4 &&
                local_port == (unsigned)port && state == 0x0A /* LISTEN */ && node) {
                inode = node;
                break;
            }
        }
        if (file)
            fclose(file);
    }
    DIR *proc = inode ? opendir("/proc") : NULL;
    struct dirent *entry;
    char want[64];
    snprintf(want, sizeof(want), "socket:[%lu]", inode);
    while (proc && !text[0] && (entry = readdir(proc))) {
        char path[300], target[64];
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%.20s/fd", entry->d_name);
        DIR *fds = opendir(path);
        struct dirent *fd;
        while (fds && !text[0] && (fd = readdir(fds))) {
            snprintf(path, sizeof(path), "/proc/%.20s/fd/%.20s", entry->d_name, fd->d_name);
            ssize_t n = readlink(path, target, sizeof(target) - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            if (strcmp(target, want) != 0)
                continue;
            char comm[64] = "?";
            snprintf(path, sizeof(path), "/proc/%.20s/comm", entry->d_name);
            FILE *file = fopen(path, "r");
            if (file && fgets(comm, sizeof(comm), file))
                comm[strcspn(comm, "\n")] = '\0';
            if (file)
                fclose(file);
            snprintf(text, size, "pid %.20s (%.60s)", entry->d_name, comm);
        }
        if (fds)
            closedir(fds);
    }
    if (proc)
        closedir(proc);
}

/* A listening socket on @host:@port; -1 with errno. */
static int server_listen(const char *host, int port)
{
    struct addrinfo *ai = NULL;
    int one = 1, rc = resolve(host, port, 1, &ai);
    if (rc != 0) {
        ember_error("store", "cannot resolve store host '%s': %s", host, gai_strerror(rc));
        errno = EINVAL;
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
            int error = errno;
            close(fd);
            fd = -1;
            errno = error;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

/* Serve on @listen_fd (taken). */
static ember_status_t server_run(int listen_fd, const tp_secret_t *secret,
                                 tp_store_server_t **server_p)
{
    tp_store_server_t *server = calloc(1, sizeof(*server));
    if (!server) {
        close(listen_fd);
        return EMBER_ERR_NO_MEMORY;
    }
    server->secret = *secret;
    server->listen_fd = listen_fd;
    server->wake_pipe[0] = server->wake_pipe[1] = -1;
    server->max_conns = store_fd_budget();
    link_init(&server->unproven);
    link_init(&server->authed);
    server->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event wake = {.events = EPOLLIN, .data.ptr = server->wake_pipe};
    struct epoll_event listening = {.events = EPOLLIN, .data.ptr = &server->listen_fd};
    if (server->epoll_fd < 0 || pipe2(server->wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0 ||
        epoll_ctl(server->epoll_fd, EPOLL_CTL_ADD, server->wake_pipe[0], &wake) != 0 ||
        epoll_ctl(server->epoll_fd, EPOLL_CTL_ADD, listen_fd, &listening) != 0)
        goto err;
    server->listen_watched = 1;
    pthread_mutex_init(&server->lock, NULL);
    if (pthread_create(&server->thread, NULL, server_main, server) != 0) {
        pthread_mutex_destroy(&server->lock);
        goto err;
    }
    ember_debug("store", "rendezvous store serving on port %d, up to %zu connections",
                tp_store_server_port(server), server->max_conns);
    *server_p = server;
    return EMBER_OK;
err:
    ember_error("store", "cannot serve the rendezvous store: %s", strerror(errno));
    for (int i = 0; i < 2; i++)
        if (server->wake_pipe[i] >= 0)
            close(server->wake_pipe[i]);
    if (server->epoll_fd >= 0)
        close(server->epoll_fd);
    close(listen_fd);
    free(server);
    return EMBER_ERR_IO;
}

ember_status_t tp_store_server_start(const char *host, int port, const tp_secret_t *secret,
                                     tp_store_server_t **server_p)
{
    int fd = server_listen(host, port);
    if (fd < 0 && errno == EADDRINUSE) {
        char occupant[128];
        port_occupant(port, occupant, sizeof(occupant));
        ember_error("store",
                    "cannot serve the rendezvous store on %s:%d: the port is taken%s%s "
                    "(EMBER_INIT names it; `tcp://%s:auto` picks one from the job "
                    "secret, skipping taken ones)",
                    host, port, occupant[0] ? " by " : " by another process", occupant, host);
        return EMBER_ERR_EXISTS;
    }
    if (fd < 0) {
        ember_error("store", "cannot serve the rendezvous store on %s:%d: %s", host, port,
                    strerror(errno));
        return EMBER_ERR_IO;
    }
    return server_run(fd, secret, server_p);
}

int tp_store_port_candidate(const tp_secret_t *secret, int attempt)
{
    uint8_t mac[TP_AUTH_MAC_SIZE];
    uint32_t a = (uint32_t)attempt, word;
    tp_auth_part_t parts[] = {{"ember-port", 10}, {&a, sizeof(a)}};
    tp_auth_hmac(secret, parts, 2, mac);
    memcpy(&word, mac, sizeof(word));
    return TP_STORE_AUTO_PORT_MIN +
           (int)(word % (TP_STORE_AUTO_PORT_MAX - TP_STORE_AUTO_PORT_MIN + 1));
}

ember_status_t tp_store_server_start_auto(const char *host, const tp_secret_t *secret,
                                          tp_store_server_t **server_p)
{
    for (int attempt = 0; attempt < TP_STORE_AUTO_TRIES; attempt++) {
        int port = tp_store_port_candidate(secret, attempt);
        int fd = server_listen(host, port);
        if (fd >= 0)
            return server_run(fd, secret, server_p);
        int error = errno;
        char occupant[128];
        if (error == EADDRINUSE)
            port_occupant(port, occupant, sizeof(occupant));
        if (error != EADDRINUSE) {
            ember_error("store", "cannot serve the rendezvous store on %s:%d: %s", host, port,
                        strerror(error));
            return EMBER_ERR_IO;
        }
        ember_warn("store",
                   "the job's rendezvous port %d (candidate %d of %d) is taken%s%s; "
                   "trying the next",
                   port, attempt + 1, TP_STORE_AUTO_TRIES, occupant[0] ? " by " : "", occupant);
    }
    ember_error("store", "all %d rendezvous ports derived from the job secret are taken on %s",
                TP_STORE_AUTO_TRIES, host);
    return EMBER_ERR_EXISTS;
}

void tp_store_server_close_door(tp_store_server_t *server)
{
    pthread_mutex_lock(&server->lock);
    server->door_closing = 1;
    pthread_mutex_unlock(&server->lock);
    char byte = 0;
    ssize_t rc = write(server->wake_pipe[1], &byte, 1);
    (void)rc;
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
    while (server->conn_count)
        server_drop(server, server->conns[server->conn_count - 1]);
    server_reap(server);
    free(server->conns);
    free(server->dead);
    while (server->entries) {
        store_entry_t *entry = server->entries;
        server->entries = entry->next;
        free(entry->key);
        free(entry->value);
        free(entry);
    }
    if (server->listen_fd >= 0)
        close(server->listen_fd);
    close(server->wake_pipe[0]);
    close(server->wake_pipe[1]);
    close(server->epoll_fd);
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
static ember_status_t client_greeted(tp_store_client_t *client, double timeout_s, int quiet)
{
    store_hello_t hello;
    ember_status_t status =
            io_full(client->fd, &hello, sizeof(hello), 0, ember_time_now() + timeout_s);
    if (status == EMBER_OK && (hello.magic != STORE_HELLO_MAGIC || hello.version != STORE_VERSION))
        status = EMBER_ERR_BAD_MESSAGE;
    if (status != EMBER_OK && !quiet) {
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

/* A client over the connected @fd (taken: closed on failure), not yet
 * greeted; NULL without memory. */
static tp_store_client_t *client_new(int fd, const char *host, int port, const tp_secret_t *secret)
{
    tp_store_client_t *client = calloc(1, sizeof(*client));
    int one = 1;
    if (!client) {
        close(fd);
        return NULL;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    client->fd = fd;
    client->secret = *secret;
    snprintf(client->where, sizeof(client->where), "%s:%d", host, port);
    return client;
}

ember_status_t tp_store_connect(const char *host, int port, const tp_secret_t *secret,
                                double timeout_s, tp_store_client_t **client_p)
{
    double deadline = ember_time_now() + timeout_s, delay = 0.01;
    int last_errno = 0;

    do {
        int fd = connect_once(host, port, &last_errno);
        if (fd >= 0) {
            tp_store_client_t *client = client_new(fd, host, port, secret);
            if (!client)
                return EMBER_ERR_NO_MEMORY;
            /* The greeting comes at once from a live store; a squatter on
             * the port must not hold us past the deadline. */
            double left = deadline - ember_time_now();
            ember_status_t status = client_greeted(client, left > 5.0 ? left : 5.0, 0);
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

static ember_status_t client_request_until(tp_store_client_t *client, uint8_t op, const char *key,
                                           const void *value, size_t length, int64_t arg,
                                           double timeout_s, double deadline,
                                           store_reply_t *reply_p, void **value_p)
{
    size_t key_length = strlen(key);

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

static ember_status_t client_request(tp_store_client_t *client, uint8_t op, const char *key,
                                     const void *value, size_t length, int64_t arg,
                                     double timeout_s, store_reply_t *reply_p, void **value_p)
{
    /* The server answers by its own deadline; allow it time to do so. */
    return client_request_until(client, op, key, value, length, arg, timeout_s,
                                ember_time_now() + timeout_s + 10.0, reply_p, value_p);
}

/* Connect to @host:@port and make a first request by @deadline: OK (the
 * reply proved the secret), ERR_IO (nobody listens yet, or the store
 * closed us first), else what says this is not our store. */
static ember_status_t join_once(const char *host, int port, const tp_secret_t *secret,
                                double deadline, int is_auto, tp_store_client_t **client_p)
{
    int last_errno = 0;
    int fd = connect_once(host, port, &last_errno);
    if (fd < 0)
        return EMBER_ERR_IO;
    tp_store_client_t *client = client_new(fd, host, port, secret);
    if (!client)
        return EMBER_ERR_NO_MEMORY;
    store_reply_t reply = {0};
    /* Quiet: a store that closed on us is tried again, a squatter on an
     * `auto` port skipped (tp_store_join says so). */
    ember_status_t status = client_greeted(client, deadline - ember_time_now(), 1);
    if (status != EMBER_OK && status != EMBER_ERR_IO && !is_auto)
        ember_error("store",
                    "the server at %s did not greet us as an ember store (version %d) would: %s",
                    client->where, STORE_VERSION, ember_status_string(status));
    /* A GET that answers at once (timed out: the key is never set), its
     * reply tagged under the secret. */
    if (status == EMBER_OK)
        status = client_request_until(client, TP_STORE_OP_GET, "ember/join", NULL, 0, 0, 0,
                                      deadline, &reply, NULL);
    if (status == EMBER_ERR_TIMED_OUT && reply.magic == STORE_REPLY_MAGIC)
        status = EMBER_OK;
    if (status != EMBER_OK) {
        tp_store_disconnect(client);
        return status;
    }
    *client_p = client;
    return EMBER_OK;
}

ember_status_t tp_store_join(const char *host, int port, const tp_secret_t *secret,
                             double timeout_s, tp_store_client_t **client_p)
{
    double deadline = ember_time_now() + timeout_s, delay = 0.01;
    int is_auto = port == TP_STORE_PORT_AUTO, tries = is_auto ? TP_STORE_AUTO_TRIES : 1;
    int skipped[TP_STORE_AUTO_TRIES] = {0};

    do {
        for (int attempt = 0; attempt < tries; attempt++) {
            int at = is_auto ? tp_store_port_candidate(secret, attempt) : port;
            /* A live store answers at once; a squatter must not hold us. */
            double left = deadline - ember_time_now();
            if (skipped[attempt])
                continue;
            ember_status_t status = join_once(host, at, secret,
                                              ember_time_now() + (is_auto      ? 3.0
                                                                  : left > 5.0 ? left
                                                                               : 5.0),
                                              is_auto, client_p);
            if (status == EMBER_OK || status == EMBER_ERR_NO_MEMORY)
                return status;
            if (status == EMBER_ERR_IO)
                continue; /* not up yet, or it made way for newer connections */
            if (!is_auto)
                return status; /* said why */
            skipped[attempt] = 1;
            ember_warn("store",
                       "port %d (candidate %d of %d derived from the job secret) is held by "
                       "a process that is not the job's store (%s); trying the next",
                       at, attempt + 1, tries, ember_status_string(status));
        }
        ember_time_sleep(delay);
        if (delay < 0.2)
            delay *= 2;
    } while (ember_time_now() < deadline);
    if (is_auto)
        ember_error("store",
                    "cannot reach the rendezvous store at %s on any of the %d ports derived "
                    "from the job secret within %.0f s",
                    host, tries, timeout_s);
    else
        ember_error("store", "cannot reach the rendezvous store at %s:%d within %.0f s", host, port,
                    timeout_s);
    return EMBER_ERR_TIMED_OUT;
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
