/*
 * transport/store: the rendezvous store behind `tcp://HOST:PORT`.
 *
 * A tiny key-value server (like torch's TCPStore) that rank 0 runs in a
 * thread; every rank, rank 0 included, is a client.  It carries start-up
 * data only (worker addresses, names, barriers), never training traffic.
 *
 * Every request and reply is authenticated under the job secret: on each
 * connection the server first sends a fresh nonce; a request carries a
 * sequence number (0, 1, 2, ... on its connection) and HMAC-SHA256 tags over
 * the nonce, the sequence and every byte it sends, and the reply a tag over
 * the same nonce and sequence and its own bytes.  A captured request cannot
 * be replayed (not on its connection, whose sequence moved on, nor on
 * another, whose nonce differs), a forged one is refused before the server
 * allocates for its value, and a client believes no reply a secret holder
 * did not make.  Nothing is encrypted: the store's values (worker addresses,
 * host names, pids) can be read by whoever sees the traffic.
 */
#ifndef EMBER_TP_STORE_H
#define EMBER_TP_STORE_H

#include "transport/auth.h"

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct tp_store_server tp_store_server_t;
typedef struct tp_store_client tp_store_client_t;

/** Limits checked on both sides before any allocation. */
#define TP_STORE_MAX_KEY     256
#define TP_STORE_MAX_VALUE   (1u << 20)
#define TP_STORE_MAX_ENTRIES 65536u      /* keys held at once */
#define TP_STORE_MAX_BYTES   (64u << 20) /* their values, in all */
/* Connections held at once, at most; fewer where RLIMIT_NOFILE leaves
 * fewer descriptors (all but 256 of what is left at start, the job's). */
#define TP_STORE_MAX_CLIENTS 4096
/* Connections from one address that have not yet made an authenticated
 * request; beyond it, its oldest such one makes way for a newcomer. */
#define TP_STORE_SOURCE_UNPROVEN 128
/* `tcp://HOST:auto`: the port is the first free one of TP_STORE_AUTO_TRIES
 * candidates derived from the job secret, in this range. */
#define TP_STORE_AUTO_PORT_MIN 20000
#define TP_STORE_AUTO_PORT_MAX 59999
#define TP_STORE_AUTO_TRIES    8
#define TP_STORE_PORT_AUTO     0 /* tp_store_parse_url's port for "auto" */
/* A request must arrive whole within this of its first byte, and a new
 * connection must complete an authenticated request within this of being
 * accepted: one slow or silent client never holds the store up. */
#define TP_STORE_READ_S     2.0
#define TP_STORE_NONCE_SIZE TP_AUTH_NONCE_SIZE

enum {
    TP_STORE_OP_SET = 1,
    TP_STORE_OP_GET,     /* waits up to the request's timeout for the key */
    TP_STORE_OP_ADD,     /* counter += arg; answers the new value */
    TP_STORE_OP_WAIT_GE, /* waits until counter (or arrivals) >= arg */
    TP_STORE_OP_ARRIVE,  /* sets bit arg of the key's arrival set */
};

/* The fixed head of a request: its tag covers the connection's nonce and
 * every field before it, so the lengths are trusted only once it checks. */
typedef struct {
    uint32_t magic;
    uint8_t op;
    uint8_t reserved[3];
    uint32_t key_length;
    uint32_t value_length;
    uint64_t seq;       /* 0, 1, 2, ... on the connection */
    int64_t arg;        /* ADD: delta; WAIT_GE: target; ARRIVE: the rank */
    int64_t timeout_ms; /* GET, WAIT_GE */
    uint8_t mac[TP_AUTH_MAC_SIZE];
} tp_store_head_t;

/* A request as tp_store_request_parse() found it (pointers into its bytes). */
typedef struct {
    uint8_t op;
    uint64_t seq;
    int64_t arg, timeout_ms;
    const char *key; /* key_length bytes, not NUL-terminated */
    size_t key_length;
    const void *value;
    size_t value_length;
} tp_store_request_t;

/**
 * Parse the request that starts at @data (@length bytes received so far) on
 * a connection whose server nonce is @nonce and whose next request must
 * carry sequence @seq.  The head's tag is checked before its lengths are
 * used, the body's tag (the key and value) once they are all there.
 * Returns the request's size in bytes, with *req_p filled, when a whole
 * authenticated request is at @data; 0 when more bytes are needed (*need_p:
 * how many in all so far as known); -1 when it must be refused (*why_p: a
 * static text saying why).  Pure: keeps no pointer and changes nothing.
 */
ssize_t tp_store_request_parse(const tp_secret_t *secret, const uint8_t nonce[TP_STORE_NONCE_SIZE],
                               uint64_t seq, const uint8_t *data, size_t length,
                               tp_store_request_t *req_p, size_t *need_p, const char **why_p);

/**
 * Lay out the request @op on @key (@key_length bytes) with @value
 * (@value_length bytes), @arg and @timeout_ms, as sequence @seq of a
 * connection whose server nonce is @nonce, tagged under @secret, into @out
 * (at least tp_store_request_size() bytes).  Returns the bytes written.
 */
size_t tp_store_request_pack(const tp_secret_t *secret, const uint8_t nonce[TP_STORE_NONCE_SIZE],
                             uint64_t seq, uint8_t op, const char *key, size_t key_length,
                             const void *value, size_t value_length, int64_t arg,
                             int64_t timeout_ms, uint8_t *out);

/** The size of a request with these lengths. */
static inline size_t tp_store_request_size(size_t key_length, size_t value_length)
{
    return sizeof(tp_store_head_t) + key_length + value_length + TP_AUTH_MAC_SIZE;
}

/** What a server refused or dropped so far (tests; the summary at stop). */
typedef struct {
    unsigned long requests;    /* authenticated requests served */
    unsigned long refused;     /* requests failing their tag, seq or format */
    unsigned long stalled;     /* connections dropped at TP_STORE_READ_S */
    unsigned long over_limits; /* SETs refused by the size or count limits */
    unsigned long turned_away; /* connections closed at the store's limits */
} tp_store_counts_t;

/** Listen on @host:@port and serve in a background thread; requests must
 * be authenticated under @secret (copied). */
ember_status_t tp_store_server_start(const char *host, int port, const tp_secret_t *secret,
                                     tp_store_server_t **server_p);
/** Listen on @host at the first free port of the candidates derived from
 * @secret (tp_store_port_candidate), each taken one logged. */
ember_status_t tp_store_server_start_auto(const char *host, const tp_secret_t *secret,
                                          tp_store_server_t **server_p);
/** Candidate @attempt (0, 1, ...) of a `tcp://HOST:auto` store's port:
 * HMAC-SHA256(secret, "ember-port" | attempt) mapped into
 * TP_STORE_AUTO_PORT_MIN..MAX, which an outsider cannot predict. */
int tp_store_port_candidate(const tp_secret_t *secret, int attempt);
/** The port @server listens on (an ephemeral one when started on port 0). */
int tp_store_server_port(const tp_store_server_t *server);

/** Stop accepting connections: every member of the job has joined (a
 * later attempt is refused by the kernel), and connections that have not
 * proven the secret by now are dropped.  Returns at once; the serving
 * thread closes the listening socket. */
void tp_store_server_close_door(tp_store_server_t *server);
/** A snapshot of @server's counts (taken under its lock). */
void tp_store_server_counts(tp_store_server_t *server, tp_store_counts_t *counts_p);
/**
 * Stop serving once every client has disconnected, or after @linger_s.
 * Logs what it refused, if anything.  Frees @server.
 */
void tp_store_server_stop(tp_store_server_t *server, double linger_s);

/** Connect, retrying until @timeout_s (the server may not be up yet), and
 * take the server's nonce.  @secret is copied. */
ember_status_t tp_store_connect(const char *host, int port, const tp_secret_t *secret,
                                double timeout_s, tp_store_client_t **client_p);
void tp_store_disconnect(tp_store_client_t *client);
/**
 * A rank's way in: connect to @host:@port (TP_STORE_PORT_AUTO: try the
 * secret's candidates in turn) and make a first request, whose reply must
 * prove the secret.  A store that closed us before that (it made way for
 * newer connections under a flood) is tried again until @timeout_s; on
 * `auto`, a port whose occupant is not the job's store is skipped, logged.
 */
ember_status_t tp_store_join(const char *host, int port, const tp_secret_t *secret,
                             double timeout_s, tp_store_client_t **client_p);

ember_status_t tp_store_set(tp_store_client_t *client, const char *key, const void *value,
                            size_t length);
/** Wait up to @timeout_s for @key; *value_p is malloc'd (caller frees). */
ember_status_t tp_store_get(tp_store_client_t *client, const char *key, double timeout_s,
                            void **value_p, size_t *length_p);
/** Atomically add @delta to the counter @key (created at 0). */
ember_status_t tp_store_add(tp_store_client_t *client, const char *key, int64_t delta,
                            int64_t *result_p);
/** Wait up to @timeout_s until counter @key (or the number of arrivals at
 * it) >= @target; else ERR_TIMED_OUT. */
ember_status_t tp_store_wait_ge(tp_store_client_t *client, const char *key, int64_t target,
                                double timeout_s);
/** Mark @rank arrived at @key (a set of ranks); *count_p: how many have. */
ember_status_t tp_store_arrive(tp_store_client_t *client, const char *key, int rank,
                               int64_t *count_p);

/** Parse "tcp://HOST:PORT" (PORT a number or `auto`: TP_STORE_PORT_AUTO)
 * into @host (size @host_size) and @port_p. */
ember_status_t tp_store_parse_url(const char *url, char *host, size_t host_size, int *port_p);

#endif
