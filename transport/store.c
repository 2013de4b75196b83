/* transport/store: rendezvous key-value store over TCP (start-up only). */
#define _GNU_SOURCE /* pipe2 */
#include "transport/store.h"
#include "transport/tp_time.h"

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

#define STORE_MAGIC 0x454d5354u /* "EMST" */
#define STORE_MAX_CLIENTS 4096

enum { STORE_OP_SET = 1, STORE_OP_GET, STORE_OP_ADD, STORE_OP_WAIT_GE };

typedef struct {
    uint32_t magic;
    uint8_t op;
    uint8_t reserved[3];
    uint32_t key_length;
    uint32_t value_length;
    int64_t arg;        /* ADD: delta, WAIT_GE: target */
    int64_t timeout_ms; /* GET, WAIT_GE */
} store_request_t;

typedef struct {
    int32_t status;
    uint32_t value_length;
    int64_t value; /* ADD: the new counter */
} store_response_t;

typedef struct store_entry {
    struct store_entry *next;
    char *key;
    void *value;
    size_t length;
} store_entry_t;

typedef struct {
    int fd;
    /* A GET or WAIT_GE the server could not answer yet. */
    int waiting;
    store_request_t request;
    char key[TP_STORE_MAX_KEY + 1];
    double deadline;
} store_conn_t;

struct tp_store_server {
    int listen_fd;
    int wake_pipe[2];
    pthread_t thread;
    pthread_mutex_t lock;
    int stopping;
    double stop_deadline;
    store_entry_t *entries;
    store_conn_t *conns;
    size_t conn_count;
};

struct tp_store_client {
    int fd;
};

/* ---- helpers shared by both sides ---------------------------------------- */

static ember_status_t io_full(int fd, void *buffer, size_t length, int writing,
                              double deadline)
{
    char *p = buffer;
    while (length > 0) {
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        double left = deadline - tp_time_now();
        if (left <= 0)
            return EMBER_ERR_TIMED_OUT;
        int rc = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return rc == 0 ? EMBER_ERR_TIMED_OUT : EMBER_ERR_IO;
        ssize_t n = writing ? send(fd, p, length, MSG_NOSIGNAL)
                            : recv(fd, p, length, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return EMBER_ERR_IO;
        p += n;
        length -= (size_t)n;
    }
    return EMBER_OK;
}

ember_status_t tp_store_parse_url(const char *url, char *host, size_t host_size,
                                  int *port_p)
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
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535)
        goto err;
    memcpy(host, rest, (size_t)(colon - rest));
    host[colon - rest] = '\0';
    /* Accept [::1] style literals. */
    if (host[0] == '[') {
        size_t n = strlen(host);
        if (host[n - 1] != ']')
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

/* ---- server -------------------------------------------------------------- */

static store_entry_t *server_find(tp_store_server_t *server, const char *key)
{
    for (store_entry_t *e = server->entries; e; e = e->next) {
        if (strcmp(e->key, key) == 0)
            return e;
    }
    return NULL;
}

static store_entry_t *server_put(tp_store_server_t *server, const char *key,
                                 const void *value, size_t length)
{
    store_entry_t *entry = server_find(server, key);
    void *copy = malloc(length ? length : 1);

    if (!copy)
        return NULL;
    memcpy(copy, value, length);
    if (!entry) {
        entry = calloc(1, sizeof(*entry));
        if (!entry || !(entry->key = strdup(key))) {
            free(entry);
            free(copy);
            return NULL;
        }
        entry->next = server->entries;
        server->entries = entry;
    }
    free(entry->value);
    entry->value = copy;
    entry->length = length;
    return entry;
}

static int64_t entry_counter(const store_entry_t *entry)
{
    int64_t value = 0;
    if (entry && entry->length == sizeof(value))
        memcpy(&value, entry->value, sizeof(value));
    return value;
}

static void server_drop(tp_store_server_t *server, size_t index)
{
    close(server->conns[index].fd);
    server->conns[index] = server->conns[--server->conn_count];
}

static int server_respond(store_conn_t *conn, ember_status_t status,
                          const void *value, size_t length, int64_t number)
{
    store_response_t response = {.status = status,
                                 .value_length = (uint32_t)length,
                                 .value = number};
    double deadline = tp_time_now() + 10.0;
    if (io_full(conn->fd, &response, sizeof(response), 1, deadline) != EMBER_OK)
        return -1;
    if (length && io_full(conn->fd, (void *)value, length, 1, deadline) != EMBER_OK)
        return -1;
    return 0;
}

/* Answer a waiting GET/WAIT_GE if it can be answered now; 1 if answered. */
static int server_try_answer(tp_store_server_t *server, store_conn_t *conn,
                             int *failed_p)
{
    store_entry_t *entry = server_find(server, conn->key);

    *failed_p = 0;
    if (conn->request.op == STORE_OP_GET && entry) {
        conn->waiting = 0;
        *failed_p = server_respond(conn, EMBER_OK, entry->value, entry->length, 0);
        return 1;
    }
    if (conn->request.op == STORE_OP_WAIT_GE &&
        entry_counter(entry) >= conn->request.arg) {
        conn->waiting = 0;
        *failed_p = server_respond(conn, EMBER_OK, NULL, 0, entry_counter(entry));
        return 1;
    }
    if (tp_time_now() >= conn->deadline) {
        conn->waiting = 0;
        *failed_p = server_respond(conn, EMBER_ERR_TIMED_OUT, NULL, 0, 0);
        return 1;
    }
    return 0;
}

/* Read and execute one request; returns -1 when the client must be dropped. */
static int server_handle(tp_store_server_t *server, store_conn_t *conn)
{
    store_request_t request;
    double deadline = tp_time_now() + 10.0;
    void *value = NULL;
    int failed = 0;

    if (io_full(conn->fd, &request, sizeof(request), 0, deadline) != EMBER_OK)
        return -1;
    if (request.magic != STORE_MAGIC || request.key_length == 0 ||
        request.key_length > TP_STORE_MAX_KEY ||
        request.value_length > TP_STORE_MAX_VALUE) {
        ember_warn("store", "malformed store request dropped (client fd %d)",
                   conn->fd);
        return -1;
    }
    if (io_full(conn->fd, conn->key, request.key_length, 0, deadline) != EMBER_OK)
        return -1;
    conn->key[request.key_length] = '\0';
    if (request.value_length) {
        value = malloc(request.value_length);
        if (!value || io_full(conn->fd, value, request.value_length, 0,
                              deadline) != EMBER_OK) {
            free(value);
            return -1;
        }
    }

    pthread_mutex_lock(&server->lock);
    switch (request.op) {
    case STORE_OP_SET:
        failed = server_put(server, conn->key, value, request.value_length)
                     ? server_respond(conn, EMBER_OK, NULL, 0, 0)
                     : server_respond(conn, EMBER_ERR_NO_MEMORY, NULL, 0, 0);
        break;
    case STORE_OP_ADD: {
        int64_t counter = entry_counter(server_find(server, conn->key)) +
                          request.arg;
        failed = server_put(server, conn->key, &counter, sizeof(counter))
                     ? server_respond(conn, EMBER_OK, NULL, 0, counter)
                     : server_respond(conn, EMBER_ERR_NO_MEMORY, NULL, 0, 0);
        break;
    }
    case STORE_OP_GET:
    case STORE_OP_WAIT_GE:
        conn->request = request;
        conn->waiting = 1;
        conn->deadline = tp_time_now() + (double)request.timeout_ms / 1000.0;
        server_try_answer(server, conn, &failed);
        break;
    default:
        failed = server_respond(conn, EMBER_ERR_BAD_MESSAGE, NULL, 0, 0);
        break;
    }
    pthread_mutex_unlock(&server->lock);
    free(value);
    return failed ? -1 : 0;
}

static void *server_main(void *arg)
{
    tp_store_server_t *server = arg;
    struct pollfd *pfds = NULL;
    size_t capacity = 0;

    for (;;) {
        double now = tp_time_now(), next = now + 1.0;
        size_t n = 0;

        if (server->stopping &&
            (server->conn_count == 0 || now >= server->stop_deadline))
            break;
        if (capacity < server->conn_count + 2) {
            capacity = (server->conn_count + 2) * 2;
            struct pollfd *grown = realloc(pfds, capacity * sizeof(*pfds));
            if (!grown)
                break;
            pfds = grown;
        }
        pfds[n++] = (struct pollfd){.fd = server->wake_pipe[0], .events = POLLIN};
        pfds[n++] = (struct pollfd){.fd = server->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < server->conn_count; i++) {
            pfds[n++] = (struct pollfd){.fd = server->conns[i].fd,
                                        .events = POLLIN};
            if (server->conns[i].waiting && server->conns[i].deadline < next)
                next = server->conns[i].deadline;
        }
        if (poll(pfds, n, (int)((next - now) * 1000) + 1) < 0 && errno != EINTR)
            break;
        if (pfds[0].revents) {
            char drain[16];
            ssize_t rc = read(server->wake_pipe[0], drain, sizeof(drain));
            (void)rc;
        }
        /* Serve the connections that were polled (indices 2..n-1). */
        for (size_t i = n; i-- > 2;) {
            size_t index = i - 2;
            if (!pfds[i].revents)
                continue;
            if (server->conns[index].waiting ||
                server_handle(server, &server->conns[index]) < 0)
                server_drop(server, index); /* a waiting client closed, or bad */
        }
        /* A SET or ADD may have released waiters; timeouts too. */
        pthread_mutex_lock(&server->lock);
        for (size_t i = server->conn_count; i-- > 0;) {
            int failed = 0;
            if (server->conns[i].waiting)
                server_try_answer(server, &server->conns[i], &failed);
            if (failed)
                server_drop(server, i);
        }
        pthread_mutex_unlock(&server->lock);
        if (pfds[1].revents & POLLIN) {
            int fd = accept(server->listen_fd, NULL, NULL);
            if (fd >= 0 && server->conn_count < STORE_MAX_CLIENTS) {
                store_conn_t *grown = realloc(
                    server->conns, (server->conn_count + 1) * sizeof(*grown));
                if (grown) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    server->conns = grown;
                    server->conns[server->conn_count++] =
                        (store_conn_t){.fd = fd};
                    fd = -1;
                }
            }
            if (fd >= 0)
                close(fd);
        }
    }
    free(pfds);
    return NULL;
}

ember_status_t tp_store_server_start(const char *host, int port,
                                     tp_store_server_t **server_p)
{
    tp_store_server_t *server;
    struct addrinfo *ai = NULL;
    int one = 1, rc;

    server = calloc(1, sizeof(*server));
    if (!server)
        return EMBER_ERR_NO_MEMORY;
    server->listen_fd = -1;
    rc = resolve(host, port, 1, &ai);
    if (rc != 0) {
        ember_error("store", "cannot resolve store host '%s': %s", host,
                    gai_strerror(rc));
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
    ember_error("store", "cannot serve the rendezvous store on %s:%d: %s", host,
                port, strerror(errno));
    if (ai)
        freeaddrinfo(ai);
    if (server->listen_fd >= 0)
        close(server->listen_fd);
err_free:
    free(server);
    return EMBER_ERR_IO;
}

void tp_store_server_stop(tp_store_server_t *server, double linger_s)
{
    char byte = 1;
    ssize_t rc;

    if (!server)
        return;
    pthread_mutex_lock(&server->lock);
    server->stop_deadline = tp_time_now() + linger_s;
    server->stopping = 1;
    pthread_mutex_unlock(&server->lock);
    rc = write(server->wake_pipe[1], &byte, 1);
    (void)rc;
    pthread_join(server->thread, NULL);
    for (size_t i = 0; i < server->conn_count; i++)
        close(server->conns[i].fd);
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

ember_status_t tp_store_connect(const char *host, int port, double timeout_s,
                                tp_store_client_t **client_p)
{
    double deadline = tp_time_now() + timeout_s, delay = 0.01;
    int last_errno = 0;

    do {
        struct addrinfo *ai = NULL;
        if (resolve(host, port, 0, &ai) == 0) {
            for (struct addrinfo *a = ai; a; a = a->ai_next) {
                int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                    continue;
                if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                    tp_store_client_t *client = malloc(sizeof(*client));
                    int one = 1;
                    freeaddrinfo(ai);
                    if (!client) {
                        close(fd);
                        return EMBER_ERR_NO_MEMORY;
                    }
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    client->fd = fd;
                    *client_p = client;
                    return EMBER_OK;
                }
                last_errno = errno;
                close(fd);
            }
            freeaddrinfo(ai);
        }
        tp_time_sleep(delay);
        if (delay < 0.2)
            delay *= 2;
    } while (tp_time_now() < deadline);
    ember_error("store", "cannot reach the rendezvous store at %s:%d within %.0f s:"
                " %s", host, port, timeout_s,
                last_errno ? strerror(last_errno) : "host not resolved");
    return EMBER_ERR_TIMED_OUT;
}

void tp_store_disconnect(tp_store_client_t *client)
{
    if (!client)
        return;
    close(client->fd);
    free(client);
}

static ember_status_t client_request(tp_store_client_t *client, uint8_t op,
                                     const char *key, const void *value,
                                     size_t length, int64_t arg, double timeout_s,
                                     store_response_t *response_p, void **value_p)
{
    size_t key_length = strlen(key);
    store_request_t request = {.magic = STORE_MAGIC,
                               .op = op,
                               .key_length = (uint32_t)key_length,
                               .value_length = (uint32_t)length,
                               .arg = arg,
                               .timeout_ms = (int64_t)(timeout_s * 1000)};
    /* The server answers by its own deadline; allow it time to do so. */
    double deadline = tp_time_now() + timeout_s + 10.0;
    void *reply = NULL;

    if (key_length == 0 || key_length > TP_STORE_MAX_KEY ||
        length > TP_STORE_MAX_VALUE)
        return EMBER_ERR_INVALID_PARAM;
    EMBER_CHECK(io_full(client->fd, &request, sizeof(request), 1, deadline));
    EMBER_CHECK(io_full(client->fd, (void *)key, key_length, 1, deadline));
    if (length)
        EMBER_CHECK(io_full(client->fd, (void *)value, length, 1, deadline));
    EMBER_CHECK(io_full(client->fd, response_p, sizeof(*response_p), 0, deadline));
    if (response_p->value_length > TP_STORE_MAX_VALUE)
        return EMBER_ERR_BAD_MESSAGE;
    if (response_p->value_length) {
        reply = malloc(response_p->value_length);
        if (!reply)
            return EMBER_ERR_NO_MEMORY;
        ember_status_t status = io_full(client->fd, reply,
                                        response_p->value_length, 0, deadline);
        if (status != EMBER_OK) {
            free(reply);
            return status;
        }
    }
    if (value_p)
        *value_p = reply;
    else
        free(reply);
    return ember_status_from_wire(response_p->status);
}

ember_status_t tp_store_set(tp_store_client_t *client, const char *key,
                            const void *value, size_t length)
{
    store_response_t response;
    return client_request(client, STORE_OP_SET, key, value, length, 0, 0,
                          &response, NULL);
}

ember_status_t tp_store_get(tp_store_client_t *client, const char *key,
                            double timeout_s, void **value_p, size_t *length_p)
{
    store_response_t response;
    void *value = NULL;
    ember_status_t status = client_request(client, STORE_OP_GET, key, NULL, 0, 0,
                                           timeout_s, &response, &value);
    if (status != EMBER_OK) {
        free(value);
        return status;
    }
    if (!value)
        value = malloc(1); /* an empty value is still "present" */
    if (!value)
        return EMBER_ERR_NO_MEMORY;
    *value_p = value;
    *length_p = response.value_length;
    return EMBER_OK;
}

ember_status_t tp_store_add(tp_store_client_t *client, const char *key,
                            int64_t delta, int64_t *result_p)
{
    store_response_t response;
    EMBER_CHECK(client_request(client, STORE_OP_ADD, key, NULL, 0, delta, 0,
                               &response, NULL));
    if (result_p)
        *result_p = response.value;
    return EMBER_OK;
}

ember_status_t tp_store_wait_ge(tp_store_client_t *client, const char *key,
                                int64_t target, double timeout_s)
{
    store_response_t response;
    return client_request(client, STORE_OP_WAIT_GE, key, NULL, 0, target,
                          timeout_s, &response, NULL);
}
