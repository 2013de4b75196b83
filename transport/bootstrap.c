/*
 * transport/bootstrap: who am I, who are the others, and how to reach them.
 *
 * Rank and world size come from the parameters, EMBER_RANK/EMBER_WORLD_SIZE,
 * or Slurm (SLURM_PROCID/SLURM_NTASKS).  The store is EMBER_INIT, whose host
 * defaults under Slurm to the first host of SLURM_JOB_NODELIST (the launcher
 * script exports it).  Rank 0 serves the store; every rank publishes its
 * UCX worker address and name, then reads everyone else's.
 */
#include "common/clock.h"
#include "common/slurm.h"
#include "transport/tp_internal.h"

#include <ember/config.h>
#include <ember/log.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ember_status_t resolve_identity(ember_tp_t *tp, const ember_tp_params_t *params)
{
    tp->rank = params->rank;
    tp->world_size = params->world_size;
    if (tp->rank < 0)
        tp->rank = ember_config_str("EMBER_RANK") ? (int)ember_config_int("EMBER_RANK")
                                                  : ember_slurm_int("SLURM_PROCID", -1);
    if (tp->world_size < 0)
        tp->world_size = ember_config_str("EMBER_WORLD_SIZE")
                                 ? (int)ember_config_int("EMBER_WORLD_SIZE")
                                 : ember_slurm_int("SLURM_NTASKS", -1);
    if (tp->world_size <= 0 || tp->rank < 0 || tp->rank >= tp->world_size) {
        ember_error("boot",
                    "no valid rank/world size (rank %d, world size %d): "
                    "set EMBER_RANK and EMBER_WORLD_SIZE, run under ember-run, "
                    "or under srun",
                    tp->rank, tp->world_size);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

/*
 * A worker address as published: framed, so that what UCX is handed is
 * exactly what its rank published (a truncated or foreign value fails here,
 * naming its key, not in UCX's address parser), and sealed with the job
 * secret (tp_auth_seal, the rank as its context): whoever sees the store's
 * traffic learns no address to point a UCX endpoint at, and none but a
 * holder of the secret can make one that a rank takes.
 */
#define ADDRESS_MAGIC 0x454d4153u /* "EMAS" */
#define ADDRESS_MAX   (64u << 10)

typedef struct {
    uint32_t magic;
    uint32_t length;
    uint8_t nonce[TP_AUTH_NONCE_SIZE];
    uint8_t mac[TP_AUTH_MAC_SIZE]; /* the seal's, over the sealed address */
} address_frame_t;

ember_status_t ember_tp_worker_address(ember_tp_t *tp, void **address_p, size_t *length_p)
{
    ucp_address_t *address;
    size_t length;
    ucs_status_t status = ucp_worker_get_address(tp->worker, &address, &length);
    if (status != UCS_OK) {
        ember_error("boot", "ucp_worker_get_address: %s", ucs_status_string(status));
        return tp_status_from_ucs(status);
    }
    void *copy = malloc(length);
    if (copy)
        memcpy(copy, address, length);
    ucp_worker_release_address(tp->worker, address);
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    *address_p = copy;
    *length_p = length;
    return EMBER_OK;
}

static ember_status_t publish_address(ember_tp_t *tp)
{
    ucp_address_t *address;
    size_t length;
    char key[64];
    ucs_status_t status = ucp_worker_get_address(tp->worker, &address, &length);
    if (status != UCS_OK) {
        ember_error("boot", "ucp_worker_get_address: %s", ucs_status_string(status));
        return tp_status_from_ucs(status);
    }
    address_frame_t frame = {.magic = ADDRESS_MAGIC, .length = (uint32_t)length};
    uint8_t *value = malloc(sizeof(frame) + length);
    ember_status_t ret = value && length <= ADDRESS_MAX ? EMBER_OK : EMBER_ERR_NO_MEMORY;
    if (ret == EMBER_OK)
        ret = tp_auth_nonce(frame.nonce);
    if (ret == EMBER_OK) {
        tp_auth_digest(address, length, tp->address_digest);
        tp_auth_seal(&tp->secret, "ember-address", (uint32_t)tp->rank, frame.nonce, address, length,
                     value + sizeof(frame), frame.mac);
        memcpy(value, &frame, sizeof(frame));
        snprintf(key, sizeof(key), "ember/addr/%d", tp->rank);
        ret = tp_store_set(tp->store, key, value, sizeof(frame) + length);
    }
    free(value);
    ucp_worker_release_address(tp->worker, address);
    return ret;
}

/* Check @rank's published address (@value, taken) and keep it. */
static ember_status_t take_address(ember_tp_t *tp, int rank, void *value, size_t length)
{
    tp_peer_t *peer = &tp->peers[rank];
    address_frame_t frame;
    const char *why = NULL;

    if (length < sizeof(frame)) {
        why = "shorter than its frame";
    } else {
        memcpy(&frame, value, sizeof(frame));
        if (frame.magic != ADDRESS_MAGIC)
            why = "not an ember worker address";
        else if (frame.length == 0 || frame.length > ADDRESS_MAX ||
                 frame.length != length - sizeof(frame))
            why = "its length is not the one it states";
        else if (!(peer->address = malloc(frame.length)))
            why = "no memory for it";
        else if (!tp_auth_unseal(&tp->secret, "ember-address", (uint32_t)rank, frame.nonce,
                                 (uint8_t *)value + sizeof(frame), frame.length, frame.mac,
                                 peer->address))
            why = "its seal does not prove the job secret";
    }
    if (why) {
        free(peer->address);
        peer->address = NULL;
        ember_error("boot",
                    "ember/addr/%d: rank %d's worker address (%zu bytes) is "
                    "malformed: %s",
                    rank, rank, length, why);
        free(value);
        return EMBER_ERR_BAD_MESSAGE;
    }
    peer->address_length = frame.length;
    tp_auth_digest(peer->address, frame.length, peer->address_digest);
    free(value);
    return EMBER_OK;
}

/* A name or host: 1 to @max printable characters without spaces. */
static int word_valid(const char *text, size_t length, size_t max)
{
    if (length == 0 || length > max)
        return 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] <= ' ' || text[i] > '~')
            return 0;
    }
    return 1;
}

/* "HOST PID": where @rank runs, checked at full width. */
static ember_status_t take_process(ember_tp_t *tp, int rank, const char *text, size_t length)
{
    tp_peer_t *peer = &tp->peers[rank];
    const char *space = memchr(text, ' ', length);
    char pid_text[24];
    char *end;
    long long pid = 0;
    int ok = space && word_valid(text, (size_t)(space - text), sizeof(peer->host) - 1);
    size_t digits = ok ? length - (size_t)(space - text) - 1 : 0;
    if (ok && digits > 0 && digits < sizeof(pid_text)) {
        memcpy(pid_text, space + 1, digits);
        pid_text[digits] = '\0';
        errno = 0;
        pid = strtoll(pid_text, &end, 10);
        ok = errno == 0 && *end == '\0' && pid > 0 && pid <= INT32_MAX;
    } else {
        ok = 0;
    }
    if (!ok) {
        ember_error("boot",
                    "ember/proc/%d: rank %d published a malformed process "
                    "entry '%.*s' (want HOST PID)",
                    rank, rank, (int)(length > 80 ? 80 : length), text);
        return EMBER_ERR_BAD_MESSAGE;
    }
    memcpy(peer->host, text, (size_t)(space - text));
    peer->host[space - text] = '\0';
    peer->pid = (long)pid;
    return EMBER_OK;
}

static ember_status_t get_key(ember_tp_t *tp, const char *format, int rank, void **value_p,
                              size_t *length_p)
{
    char key[64];
    snprintf(key, sizeof(key), format, rank);
    ember_status_t status = tp_store_get(tp->store, key, tp->connect_timeout_s, value_p, length_p);
    if (status == EMBER_ERR_TIMED_OUT)
        ember_error("boot",
                    "rank %d did not join within %.0f s (no %s; "
                    "EMBER_CONNECT_TIMEOUT)",
                    rank, tp->connect_timeout_s, key);
    return status;
}

/* Read @rank's address, name and process entry, each checked. */
static ember_status_t collect_peer(ember_tp_t *tp, int rank)
{
    tp_peer_t *peer = &tp->peers[rank];
    void *value;
    size_t length;

    EMBER_CHECK(get_key(tp, "ember/addr/%d", rank, &value, &length));
    EMBER_CHECK(take_address(tp, rank, value, length));
    EMBER_CHECK(get_key(tp, "ember/name/%d", rank, &value, &length));
    int named = word_valid(value, length, sizeof(peer->name) - 1);
    if (named) {
        memcpy(peer->name, value, length);
        peer->name[length] = '\0';
    }
    free(value);
    if (!named) {
        ember_error("boot",
                    "ember/name/%d: rank %d's name is not 1 to %zu printable "
                    "characters",
                    rank, rank, sizeof(peer->name) - 1);
        return EMBER_ERR_BAD_MESSAGE;
    }
    EMBER_CHECK(get_key(tp, "ember/proc/%d", rank, &value, &length));
    ember_status_t status = take_process(tp, rank, value, length);
    free(value);
    EMBER_CHECK(status);
    for (int other = 0; other < rank; other++) {
        if (strcmp(tp->peers[other].name, peer->name) == 0) {
            ember_error("boot", "ranks %d and %d both call themselves '%s'", other, rank,
                        peer->name);
            return EMBER_ERR_EXISTS;
        }
    }
    return EMBER_OK;
}

static ember_status_t publish_and_collect(ember_tp_t *tp, const char *name)
{
    char key[64], process[96];

    if (!word_valid(name, strlen(name), sizeof(tp->peers[0].name) - 1)) {
        ember_error("boot",
                    "the name '%s' is not 1 to %zu printable characters "
                    "without spaces (EMBER_NAME)",
                    name, sizeof(tp->peers[0].name) - 1);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(publish_address(tp));
    snprintf(key, sizeof(key), "ember/name/%d", tp->rank);
    EMBER_CHECK(tp_store_set(tp->store, key, name, strlen(name)));
    snprintf(process, sizeof(process), "%s %ld", tp->host, (long)getpid());
    snprintf(key, sizeof(key), "ember/proc/%d", tp->rank);
    EMBER_CHECK(tp_store_set(tp->store, key, process, strlen(process)));
    for (int rank = 0; rank < tp->world_size; rank++)
        EMBER_CHECK(collect_peer(tp, rank));
    return EMBER_OK;
}

/* EMBER_INIT, else the Slurm job's first node, else this host. */
static const char *init_url(char *buffer, size_t size)
{
    const char *url = ember_config_str("EMBER_INIT");
    const char *nodelist = getenv("SLURM_JOB_NODELIST");
    char host[256];

    if (url && *url)
        return url;
    if (nodelist && ember_slurm_first_host(nodelist, host, sizeof(host)) == EMBER_OK) {
        /* A port an outsider cannot predict (and squat): the job secret's. */
        snprintf(buffer, size, "tcp://%s:auto", host);
        return buffer;
    }
    return "tcp://127.0.0.1:29500";
}

ember_status_t tp_bootstrap_join(ember_tp_t *tp, const ember_tp_params_t *params)
{
    char url_buffer[300];
    const char *url =
            params->init_url ? params->init_url : init_url(url_buffer, sizeof(url_buffer));
    char host[256], default_name[32];
    const char *name;
    int port;

    EMBER_CHECK(resolve_identity(tp, params));
    if (gethostname(tp->host, sizeof(tp->host) - 1) != 0)
        snprintf(tp->host, sizeof(tp->host), "localhost");
    ember_log_set_rank(tp->rank);
    EMBER_CHECK(tp_store_parse_url(url, host, sizeof(host), &port));
    tp->connect_timeout_s = ember_config_double("EMBER_CONNECT_TIMEOUT");

    tp->peers = calloc((size_t)tp->world_size, sizeof(*tp->peers));
    if (!tp->peers)
        return EMBER_ERR_NO_MEMORY;
    for (int rank = 0; rank < tp->world_size; rank++) {
        tp->peers[rank].tp = tp;
        tp->peers[rank].rank = rank;
        tp_list_init(&tp->peers[rank].waiting);
        tp_list_init(&tp->peers[rank].deferred);
    }

    if (tp->rank == 0 && port == TP_STORE_PORT_AUTO) {
        EMBER_CHECK(tp_store_server_start_auto(host, &tp->secret, &tp->store_server));
        port = tp_store_server_port(tp->store_server); /* rank 0 knows which */
    } else if (tp->rank == 0) {
        EMBER_CHECK(tp_store_server_start(host, port, &tp->secret, &tp->store_server));
    }
    EMBER_CHECK(tp_store_join(host, port, &tp->secret, tp->connect_timeout_s, &tp->store));

    snprintf(default_name, sizeof(default_name), "rank%d", tp->rank);
    name = params->name ? params->name : ember_config_str("EMBER_NAME");
    if (!name || !*name)
        name = default_name;
    EMBER_CHECK(publish_and_collect(tp, name));
    EMBER_CHECK(ember_tp_barrier(tp, "join"));
    /* Everyone is in: nobody else may connect to the store from now on, so
     * an outsider can hold none of its connections or descriptors. */
    if (tp->store_server)
        tp_store_server_close_door(tp->store_server);
    ember_debug("boot", "joined as %s (rank %d of %d) through %s", name, tp->rank, tp->world_size,
                url);
    return EMBER_OK;
}

void tp_bootstrap_leave(ember_tp_t *tp)
{
    tp_store_disconnect(tp->store);
    tp->store = NULL;
    /* Rank 0 keeps serving until the others have read the last barrier; a
     * job that lost a rank has none, and its survivors end at once. */
    tp_store_server_stop(tp->store_server, tp->failed || tp_first_lost(tp, 1) >= 0
                                                   ? 0.2
                                                   : ember_config_double("EMBER_SHUTDOWN_TIMEOUT"));
    tp->store_server = NULL;
    if (tp->peers) {
        for (int rank = 0; rank < tp->world_size; rank++)
            free(tp->peers[rank].address);
    }
}

ember_status_t ember_tp_store_set(ember_tp_t *tp, const char *key, const void *value, size_t length)
{
    char full[TP_STORE_MAX_KEY];
    snprintf(full, sizeof(full), "user/%s", key);
    return tp_store_set(tp->store, full, value, length);
}

ember_status_t ember_tp_store_get(ember_tp_t *tp, const char *key, void **value_p, size_t *length_p)
{
    char full[TP_STORE_MAX_KEY];
    snprintf(full, sizeof(full), "user/%s", key);
    return tp_store_get(tp->store, full, tp->connect_timeout_s, value_p, length_p);
}

/*
 * Barriers on the store keep serving UCX traffic while they wait, so a rank
 * blocked here still answers the peers that are not there yet.  Each rank
 * marks itself in the barrier's arrival set, so who did not come can be
 * named.
 */
static ember_status_t barrier_wait(ember_tp_t *tp, const char *key, double timeout_s)
{
    double deadline = ember_time_now() + timeout_s;
    ember_status_t status;

    EMBER_CHECK(tp_store_arrive(tp->store, key, tp->rank, NULL));
    do {
        status = tp_store_wait_ge(tp->store, key, tp->world_size, 0.02);
        if (status != EMBER_ERR_TIMED_OUT)
            return status;
        if (tp->worker)
            tp_progress_once(tp);
        if (tp_first_lost(tp, 0) >= 0)
            return EMBER_ERR_PEER_LOST;
    } while (ember_time_now() < deadline);
    return EMBER_ERR_TIMED_OUT;
}

/* "rank 3 (ps0), rank 4 (ps1)": the ranks missing from @key's arrivals. */
static void barrier_missing(ember_tp_t *tp, const char *key, char *text, size_t size)
{
    void *value = NULL;
    size_t length = 0, used = 0, shown = 0, missing = 0;
    text[0] = '\0';
    if (tp_store_get(tp->store, key, 0.5, &value, &length) != EMBER_OK)
        length = 0;
    for (int rank = 0; rank < tp->world_size; rank++) {
        size_t byte = (size_t)rank / 8;
        if (byte < length && (((uint8_t *)value)[byte] >> (rank % 8) & 1))
            continue;
        missing++;
        if (shown++ < 8 && used < size)
            used += (size_t)snprintf(text + used, size - used, "%srank %d (%s)",
                                     shown > 1 ? ", " : "", rank, tp->peers[rank].name);
    }
    if (missing > shown && used < size)
        snprintf(text + used, size - used, " and %zu more", missing - shown);
    free(value);
}

static void barrier_key(ember_tp_t *tp, const char *name, char *key, size_t size)
{
    snprintf(key, size, "ember/barrier/%u/%s", tp->barrier_seq++, name);
}

ember_status_t ember_tp_barrier(ember_tp_t *tp, const char *name)
{
    char key[TP_STORE_MAX_KEY], missing[512];
    barrier_key(tp, name, key, sizeof(key));
    ember_status_t status = barrier_wait(tp, key, tp->connect_timeout_s);
    int lost = tp_first_lost(tp, 0);
    if (status == EMBER_ERR_PEER_LOST && lost >= 0) {
        ember_error("boot", "barrier '%s': %s (rank %d) was lost: %s", name, tp->peers[lost].name,
                    lost, tp->peers[lost].reason);
    } else if (status == EMBER_ERR_TIMED_OUT) {
        barrier_missing(tp, key, missing, sizeof(missing));
        ember_error("boot",
                    "barrier '%s': %s did not arrive within %.0f s "
                    "(EMBER_CONNECT_TIMEOUT)",
                    name, missing[0] ? missing : "a rank", tp->connect_timeout_s);
    } else if (status != EMBER_OK) {
        ember_error("boot", "barrier '%s': the rendezvous store failed: %s", name,
                    ember_status_string(status));
    }
    return status;
}

ember_status_t tp_bootstrap_final_barrier(ember_tp_t *tp, double timeout_s)
{
    char key[TP_STORE_MAX_KEY];
    barrier_key(tp, "leave", key, sizeof(key));
    return barrier_wait(tp, key, timeout_s);
}
