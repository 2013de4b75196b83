/*
 * cuda/nccl_tp: the NCCL bootstrap over ember's transport (rendezvous store
 * for the unique id, the transport's peer state for the watchdog).  Built
 * only when the transport is (not in EMBER_GPU_ONLY builds).
 */
#include "cuda/nccl_comm.h"

#include <ember/transport.h>

static ember_status_t tp_store_set(void *arg, const char *key, const void *value, size_t length)
{
    return ember_tp_store_set(arg, key, value, length);
}

static ember_status_t tp_store_get(void *arg, const char *key, void **value_p, size_t *length_p)
{
    return ember_tp_store_get(arg, key, value_p, length_p);
}

static int tp_peer_lost(void *arg, int rank)
{
    return ember_tp_peer_lost(arg, rank);
}

static const char *tp_peer_name(void *arg, int rank)
{
    return ember_tp_peer_name(arg, rank);
}

static void tp_progress(void *arg)
{
    (void)ember_tp_progress(arg);
}

void ember_nccl_bootstrap_tp(ember_tp_t *tp, ember_nccl_bootstrap_t *boot_p)
{
    *boot_p = (ember_nccl_bootstrap_t){
            .size = sizeof(*boot_p),
            .self = ember_tp_rank(tp),
            .store_set = tp_store_set,
            .store_get = tp_store_get,
            .peer_lost = tp_peer_lost,
            .peer_name = tp_peer_name,
            .progress = tp_progress,
            .arg = tp,
    };
}
