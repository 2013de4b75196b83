/*
 * transport/bootstrap: who am I, who are the others, and how to reach them.
 *
 * Rank and world size come from the parameters, EMBER_RANK/EMBER_WORLD_SIZE,
 * or Slurm (SLURM_PROCID/SLURM_NTASKS).  The store is EMBER_INIT, whose host
 * defaults under Slurm to the first host of SLURM_JOB_NODELIST (the launcher
 * script exports it).  Rank 0 serves the store; every rank publishes its
 * UCX worker address and name, then reads everyone else's.
 */
#include "transport/tp_internal.h"
#include "transport/tp_time.h"

#include <ember/config.h>
#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_int(const char *slurm_name, int fallback)
{
    /* Slurm's variables are not ember's: read directly, not via the table. */
    const char *text = getenv(slurm_name);
    return text && *text ? atoi(text) : fallback;
}

static ember_status_t resolve_identity(ember_tp_t *tp, const ember_tp_params_t *params)
{
    tp->rank = params->rank;
    tp->world_size = params->world_size;
    if (tp->rank < 0)
        tp->rank = ember_config_str("EMBER_RANK")
                       ? (int)ember_config_int("EMBER_RANK")
                       : env_int("SLURM_PROCID", -1);
    if (tp->world_size < 0)
        tp->world_size = ember_config_str("EMBER_WORLD_SIZE")
                             ? (int)ember_config_int("EMBER_WORLD_SIZE")
                             : env_int("SLURM_NTASKS", -1);
    if (tp->world_size <= 0 || tp->rank < 0 || tp->rank >= tp->world_size) {
        ember_error("boot", "no valid rank/world size (rank %d, world size %d): "
                    "set EMBER_RANK and EMBER_WORLD_SIZE, run under ember-run, "
                    "or under srun", tp->rank, tp->world_size);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

static ember_status_t publish_and_collect(ember_tp_t *tp, const char *name)
{
    ucp_address_t *address;
    size_t address_length;
    char key[64];
    ucs_status_t status;
    ember_status_t ret;

    status = ucp_worker_get_address(tp->worker, &address, &address_length);
    if (status != UCS_OK) {
        ember_error("boot", "ucp_worker_get_address: %s", ucs_status_string(status));
        return tp_status_from_ucs(status);
    }
    snprintf(key, sizeof(key), "ember/addr/%d", tp->rank);
    ret = tp_store_set(tp->store, key, address, address_length);
    ucp_worker_release_address(tp->worker, address);
    EMBER_CHECK(ret);
    snprintf(key, sizeof(key), "ember/name/%d", tp->rank);
    EMBER_CHECK(tp_store_set(tp->store, key, name, strlen(name)));
    char process[96];
    snprintf(process, sizeof(process), "%s %ld", tp->host, (long)getpid());
    snprintf(key, sizeof(key), "ember/proc/%d", tp->rank);
    EMBER_CHECK(tp_store_set(tp->store, key, process, strlen(process)));

    for (int rank = 0; rank < tp->world_size; rank++) {
        tp_peer_t *peer = &tp->peers[rank];
        void *value;
        size_t length;

        snprintf(key, sizeof(key), "ember/addr/%d", rank);
        ret = tp_store_get(tp->store, key, tp->connect_timeout_s, &peer->address,
                           &peer->address_length);
        if (ret == EMBER_OK) {
            snprintf(key, sizeof(key), "ember/name/%d", rank);
            ret = tp_store_get(tp->store, key, tp->connect_timeout_s, &value,
                               &length);
        }
        if (ret != EMBER_OK) {
            ember_error("boot", "rank %d did not join within %.0f s "
                        "(EMBER_CONNECT_TIMEOUT)", rank, tp->connect_timeout_s);
            return ret;
        }
        snprintf(peer->name, sizeof(peer->name), "%.*s",
                 (int)(length < sizeof(peer->name) ? length : sizeof(peer->name) - 1),
                 (const char *)value);
        free(value);
        snprintf(key, sizeof(key), "ember/proc/%d", rank);
        EMBER_CHECK(tp_store_get(tp->store, key, tp->connect_timeout_s, &value,
                                 &length));
        char entry[96];
        snprintf(entry, sizeof(entry), "%.*s",
                 (int)(length < sizeof(entry) ? length : sizeof(entry) - 1),
                 (const char *)value);
        free(value);
        if (sscanf(entry, "%63s %ld", peer->host, &peer->pid) != 2) {
            ember_error("boot", "rank %d published a malformed process entry", rank);
            return EMBER_ERR_BAD_MESSAGE;
        }
        for (int other = 0; other < rank; other++) {
            if (strcmp(tp->peers[other].name, peer->name) == 0) {
                ember_error("boot", "ranks %d and %d both call themselves '%s'",
                            other, rank, peer->name);
                return EMBER_ERR_EXISTS;
            }
        }
    }
    return EMBER_OK;
}

ember_status_t tp_slurm_first_host(const char *nodelist, char *host, size_t size)
{
    /* "node[01-04,07],gpu5" -> "node01": the prefix, then the first number
     * of the first range, as written (zero padding kept). */
    size_t n = 0;
    const char *p = nodelist;

    if (!p || !*p)
        return EMBER_ERR_INVALID_PARAM;
    while (*p && *p != ',' && *p != '[' && n + 1 < size)
        host[n++] = *p++;
    if (*p == '[') {
        p++;
        while (*p >= '0' && *p <= '9' && n + 1 < size)
            host[n++] = *p++;
        if (n == 0 || !(*p == '-' || *p == ',' || *p == ']'))
            return EMBER_ERR_INVALID_PARAM;
    }
    host[n] = '\0';
    return n ? EMBER_OK : EMBER_ERR_INVALID_PARAM;
}

/* EMBER_INIT, else the Slurm job's first node, else this host. */
static const char *init_url(char *buffer, size_t size)
{
    const char *url = ember_config_str("EMBER_INIT");
    const char *nodelist = getenv("SLURM_JOB_NODELIST");
    char host[256];

    if (url && *url)
        return url;
    if (nodelist && tp_slurm_first_host(nodelist, host, sizeof(host)) == EMBER_OK) {
        const char *job = getenv("SLURM_JOB_ID");
        snprintf(buffer, size, "tcp://%s:%d", host, 29500 + (job ? atoi(job) % 1000 : 0));
        return buffer;
    }
    return "tcp://127.0.0.1:29500";
}

ember_status_t tp_bootstrap_join(ember_tp_t *tp, const ember_tp_params_t *params)
{
    char url_buffer[300];
    const char *url = params->init_url ? params->init_url
                                       : init_url(url_buffer, sizeof(url_buffer));
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

    if (tp->rank == 0)
        EMBER_CHECK(tp_store_server_start(host, port, &tp->store_server));
    EMBER_CHECK(tp_store_connect(host, port, tp->connect_timeout_s, &tp->store));

    snprintf(default_name, sizeof(default_name), "rank%d", tp->rank);
    name = params->name ? params->name : ember_config_str("EMBER_NAME");
    if (!name || !*name)
        name = default_name;
    EMBER_CHECK(publish_and_collect(tp, name));
    EMBER_CHECK(ember_tp_barrier(tp, "join"));
    ember_debug("boot", "joined as %s (rank %d of %d) through %s", name, tp->rank,
                tp->world_size, url);
    return EMBER_OK;
}

void tp_bootstrap_leave(ember_tp_t *tp)
{
    tp_store_disconnect(tp->store);
    tp->store = NULL;
    /* Rank 0 keeps serving until the others have read the last barrier. */
    tp_store_server_stop(tp->store_server, ember_config_double("EMBER_SHUTDOWN_TIMEOUT"));
    tp->store_server = NULL;
    if (tp->peers) {
        for (int rank = 0; rank < tp->world_size; rank++)
            free(tp->peers[rank].address);
    }
}

ember_status_t ember_tp_store_set(ember_tp_t *tp, const char *key,
                                  const void *value, size_t length)
{
    char full[TP_STORE_MAX_KEY];
    snprintf(full, sizeof(full), "user/%s", key);
    return tp_store_set(tp->store, full, value, length);
}

ember_status_t ember_tp_store_get(ember_tp_t *tp, const char *key,
                                  void **value_p, size_t *length_p)
{
    char full[TP_STORE_MAX_KEY];
    snprintf(full, sizeof(full), "user/%s", key);
    return tp_store_get(tp->store, full, tp->connect_timeout_s, value_p, length_p);
}

/*
 * Barriers on the store keep serving UCX traffic while they wait, so a rank
 * blocked here still answers the peers that are not there yet.
 */
static ember_status_t barrier_wait(ember_tp_t *tp, const char *name, double timeout_s)
{
    char key[TP_STORE_MAX_KEY];
    double deadline = tp_time_now() + timeout_s;
    ember_status_t status;

    snprintf(key, sizeof(key), "ember/barrier/%u/%s", tp->barrier_seq++, name);
    EMBER_CHECK(tp_store_add(tp->store, key, 1, NULL));
    do {
        status = tp_store_wait_ge(tp->store, key, tp->world_size, 0.02);
        if (status != EMBER_ERR_TIMED_OUT)
            return status;
        if (tp->worker)
            tp_progress_once(tp);
    } while (tp_time_now() < deadline);
    return EMBER_ERR_TIMED_OUT;
}

ember_status_t ember_tp_barrier(ember_tp_t *tp, const char *name)
{
    ember_status_t status = barrier_wait(tp, name, tp->connect_timeout_s);
    if (status == EMBER_ERR_TIMED_OUT)
        ember_error("boot", "barrier '%s': not every rank arrived within %.0f s",
                    name, tp->connect_timeout_s);
    return status;
}

ember_status_t tp_bootstrap_final_barrier(ember_tp_t *tp, double timeout_s)
{
    return barrier_wait(tp, "leave", timeout_s);
}
