/*
 * transport/store: the rendezvous store behind `tcp://HOST:PORT`.
 *
 * A tiny key-value server (like torch's TCPStore) that rank 0 runs in a
 * thread; every rank, rank 0 included, is a client.  It carries start-up
 * data only (worker addresses, names, barriers), never training traffic.
 */
#ifndef EMBER_TP_STORE_H
#define EMBER_TP_STORE_H

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct tp_store_server tp_store_server_t;
typedef struct tp_store_client tp_store_client_t;

/** Limits checked on both sides before any allocation. */
#define TP_STORE_MAX_KEY   256
#define TP_STORE_MAX_VALUE (1u << 20)

/** Listen on @host:@port and serve in a background thread. */
ember_status_t tp_store_server_start(const char *host, int port,
                                     tp_store_server_t **server_p);
/**
 * Stop serving once every client has disconnected, or after @linger_s.
 * Frees @server.
 */
void tp_store_server_stop(tp_store_server_t *server, double linger_s);

/** Connect, retrying until @timeout_s (the server may not be up yet). */
ember_status_t tp_store_connect(const char *host, int port, double timeout_s,
                                tp_store_client_t **client_p);
void tp_store_disconnect(tp_store_client_t *client);

ember_status_t tp_store_set(tp_store_client_t *client, const char *key,
                            const void *value, size_t length);
/** Wait up to @timeout_s for @key; *value_p is malloc'd (caller frees). */
ember_status_t tp_store_get(tp_store_client_t *client, const char *key,
                            double timeout_s, void **value_p, size_t *length_p);
/** Atomically add @delta to the counter @key (created at 0). */
ember_status_t tp_store_add(tp_store_client_t *client, const char *key,
                            int64_t delta, int64_t *result_p);
/** Wait up to @timeout_s until counter @key >= @target; else ERR_TIMED_OUT. */
ember_status_t tp_store_wait_ge(tp_store_client_t *client, const char *key,
                                int64_t target, double timeout_s);

/** Parse "tcp://HOST:PORT" into @host (size @host_size) and @port_p. */
ember_status_t tp_store_parse_url(const char *url, char *host, size_t host_size,
                                  int *port_p);

#endif
