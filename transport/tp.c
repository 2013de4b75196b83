/* transport/tp: the per-process transport object, its life and accessors. */
#include "common/clock.h"
#include "transport/tp_internal.h"

#include <ember/config.h>
#include <ember/log.h>

#include <stdlib.h>
#include <string.h>

void ember_tp_params_init(ember_tp_params_t *params)
{
    memset(params, 0, sizeof(*params));
    params->rank = -1;
    params->world_size = -1;
}

ember_status_t ember_tp_create(const ember_tp_params_t *params, ember_tp_t **tp_p)
{
    ember_tp_t *tp;
    ember_status_t status;

    EMBER_CHECK(ember_config_init());
    tp = calloc(1, sizeof(*tp));
    if (!tp)
        return EMBER_ERR_NO_MEMORY;
    tp->efd = -1;
    tp_list_init(&tp->ready);
    tp_list_init(&tp->acks);
    tp->rpc_timeout_s = ember_config_double("EMBER_RPC_TIMEOUT");
    tp->max_message = ember_config_size("EMBER_MAX_MSG_SIZE");
    tp->tcp_eager = ember_config_size("EMBER_TCP_EAGER");
    tp->oneway_eager = ember_config_size("EMBER_ONEWAY_EAGER");
    tp->tcp_oneway_eager = ember_config_size("EMBER_TCP_ONEWAY_EAGER");
    tp->shm_eager = ember_config_size("EMBER_SHM_EAGER");
    tp->coarse_lag_s = ember_time_coarse_lag();

    EMBER_CHECK_GOTO(tp_auth_load_secret(params->secret, params->secret_length, &tp->secret),
                     status, err_free);
    tp_heartbeat_register(tp);
    EMBER_CHECK_GOTO(tp_worker_create(tp), status, err_free);
    EMBER_CHECK_GOTO(tp_bootstrap_join(tp, params), status, err_leave);
    tp->spin_s = tp_spin_window(tp); /* needs the peers' hosts */
    tp->pull_rendezvous = tp_pull_rendezvous_config();
    *tp_p = tp;
    return EMBER_OK;

err_leave:
    tp_bootstrap_leave(tp);
    tp_worker_destroy(tp);
err_free:
    free(tp->peers);
    free(tp);
    return status;
}

/* A peer that left a call unanswered is hung: what is still being sent to
 * it would hold shutdown up to the timeout.  Give it up now. */
static void tp_shutdown_give_up_hung(ember_tp_t *tp)
{
    for (int rank = 0; rank < tp->world_size; rank++) {
        if (tp->peers[rank].unanswered && tp->peers[rank].state != TP_PEER_LOST)
            tp_peer_lost(tp, rank, EMBER_ERR_TIMED_OUT,
                         "it left a call unanswered at its deadline");
    }
    if (tp->peer_events)
        tp_endpoints_sweep(tp);
}

/* Heartbeats in flight are abandoned: nobody watches a peer any more. */
static void tp_shutdown_stop_beats(ember_tp_t *tp)
{
    for (int rank = 0; rank < tp->world_size; rank++) {
        tp->peers[rank].beats = 0;
        ember_future_release(tp->peers[rank].beat);
        tp->peers[rank].beat = NULL;
    }
}

/* Calls still held for a batch (ember_rpc_batch_begin) leave now. */
static void tp_shutdown_send_held(ember_tp_t *tp)
{
    tp->batching = 0;
    if (!tp->handler_depth)
        tp_batch_flush_all(tp);
}

/* Let this process's own calls finish (bounded), and the sends of those
 * already answered: a rendezvous send completes only when its receiver's
 * acknowledgement comes, which may follow the reply; a worker destroyed
 * before would leak the request (UCX warns).  A failed job waits half a
 * second at most: a send to a hung rank would never complete, and
 * tp_shutdown_close closes its endpoint by force. */
static void tp_shutdown_finish_calls(ember_tp_t *tp, double deadline, double timeout)
{
    double calls_deadline = tp->failed ? ember_time_now() + 0.5 : deadline;

    while ((tp->pending_count || tp->sends_inflight) && ember_time_now() < calls_deadline)
        ember_tp_wait(tp, tp->pending_count ? 0.05 : 0.001);
    if (tp->pending_count)
        ember_warn("tp",
                   "shutdown: %zu call(s) still pending after %.0f s are "
                   "cancelled",
                   tp->pending_count, timeout);
    tp_futures_cancel_all(tp, EMBER_ERR_SHUTDOWN);
}

/* Meet the others, serving their traffic meanwhile, so nobody sees us
 * vanish while it still needs an answer.  With a rank lost the job is
 * over: nobody waits for it (a survivor ends at once, not at the
 * barrier's timeout). */
static void tp_shutdown_meet(ember_tp_t *tp, double timeout)
{
    int lost = tp_first_lost(tp, 1);

    if (tp->failed)
        ember_debug("tp", "shutdown: the job failed here: no final barrier");
    else if (lost >= 0)
        ember_debug("tp",
                    "shutdown: %s (rank %d) was lost or left a call unanswered: "
                    "no final barrier",
                    tp->peers[lost].name, lost);
    else if (tp_bootstrap_final_barrier(tp, timeout) != EMBER_OK)
        ember_warn("tp",
                   "shutdown: not every rank reached the final barrier "
                   "within %.0f s",
                   timeout);
}

/* Requests received but never handled, and acknowledgements never sent. */
static void tp_shutdown_drop_queued(ember_tp_t *tp)
{
    while (!tp_list_empty(&tp->ready)) {
        ember_rpc_req_t *req = tp_container_of(tp->ready.next, ember_rpc_req_t, link);
        tp_list_del(&req->link);
        if (req->ucx_data)
            ucp_am_data_release(tp->worker, req->ucx_data);
        if (req->user_data)
            req->release(req->release_arg, req->user_data);
        ember_pool_put(&tp->pool, req->owned_data);
        ember_pool_put(&tp->pool, req);
    }
    while (!tp_list_empty(&tp->acks)) {
        tp_ack_t *ack = tp_container_of(tp->acks.next, tp_ack_t, link);
        tp_list_del(&ack->link);
        free(ack);
    }
}

/* Flush and close endpoints, then what the worker still holds (replies
 * still held for a batch, if destroy runs inside a handler, go out
 * first). */
static void tp_shutdown_close(ember_tp_t *tp, double timeout)
{
    tp_batch_flush_all(tp);
    tp_endpoints_close(tp, ember_time_now() + timeout);
    tp_shutdown_drop_queued(tp);
}

/* What ran for whom: handlers only for ranks that proved the secret. */
static void tp_shutdown_report(const ember_tp_t *tp)
{
    if (tp->dropped_messages || tp->refused_handshakes)
        ember_warn("tp",
                   "ran handlers for %lu requests of the job's ranks; dropped %lu "
                   "malformed or unauthenticated messages and refused %lu connections "
                   "that did not prove the job secret",
                   tp->handled_requests, tp->dropped_messages, tp->refused_handshakes);
    else
        ember_debug("tp", "ran handlers for %lu requests of the job's ranks", tp->handled_requests);
}

static void tp_shutdown_free(ember_tp_t *tp)
{
    tp_bootstrap_leave(tp);
    tp_worker_destroy(tp);
    free(tp->peers);
    free(tp->conns);
    free(tp->slots);
    free(tp->generations);
    free(tp->free_slots);
    ember_pool_cleanup(&tp->pool);
    free(tp);
}

void ember_tp_destroy(ember_tp_t *tp)
{
    double timeout = ember_config_double("EMBER_SHUTDOWN_TIMEOUT");
    double deadline = ember_time_now() + timeout;

    if (!tp)
        return;
    ember_debug("tp", "batches sent: %lu of %lu replies, %lu of %lu requests", tp->reply_batches,
                tp->batched_replies, tp->call_batches, tp->batched_calls);
    tp_shutdown_give_up_hung(tp);
    tp_shutdown_stop_beats(tp);
    tp_shutdown_send_held(tp);
    tp_shutdown_finish_calls(tp, deadline, timeout);
    tp_shutdown_meet(tp, timeout);
    tp_shutdown_close(tp, timeout);
    tp_shutdown_report(tp);
    tp_shutdown_free(tp);
}

void ember_tp_set_failed(ember_tp_t *tp)
{
    tp->failed = 1;
}

int ember_tp_rank(const ember_tp_t *tp)
{
    return tp->rank;
}
int ember_tp_world_size(const ember_tp_t *tp)
{
    return tp->world_size;
}

const char *ember_tp_peer_name(const ember_tp_t *tp, int rank)
{
    return rank >= 0 && rank < tp->world_size ? tp->peers[rank].name : "?";
}

int ember_tp_peer_by_name(const ember_tp_t *tp, const char *name)
{
    for (int rank = 0; rank < tp->world_size; rank++) {
        if (strcmp(tp->peers[rank].name, name) == 0)
            return rank;
    }
    return -1;
}

int ember_tp_peer_lost(const ember_tp_t *tp, int rank)
{
    return rank >= 0 && rank < tp->world_size && tp->peers[rank].state == TP_PEER_LOST;
}

const char *ember_tp_peer_reason(const ember_tp_t *tp, int rank)
{
    return ember_tp_peer_lost(tp, rank) ? tp->peers[rank].reason : "";
}

ember_status_t ember_tp_watch(ember_tp_t *tp, int rank)
{
    if (rank == tp->rank || rank < 0 || rank >= tp->world_size)
        return EMBER_OK;
    EMBER_CHECK(tp_peer_connect_wait(tp, rank));
    tp_peer_t *peer = &tp->peers[rank];
    if (!peer->watched && !peer->beats) { /* its pid cannot be watched from here */
        peer->beats = 1;
        peer->next_beat = ember_time_coarse();
        tp->watched_peers++;
    }
    return EMBER_OK;
}
