/*
 * transport/rma: registered memory, packed remote keys, one-sided get/put.
 *
 * Registration carries the buffer's memory type so CUDA memory goes to the
 * NIC directly (GPUDirect RDMA) when UCX was built with CUDA support.
 */
#include "transport/tp_internal.h"

#include <ember/log.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ember_mem {
    ucp_mem_h memh;
    void *address;
    size_t length;
    ember_mem_type_t type;
};

struct ember_rkey {
    ucp_rkey_h rkey;
    int peer;
};

ember_status_t ember_mem_register(ember_tp_t *tp, void *address, size_t length,
                                  ember_mem_type_t type, ember_mem_t **mem_p)
{
    ember_mem_t *mem = calloc(1, sizeof(*mem));
    ucp_mem_map_params_t params = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                          UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
            .address = address,
            .length = length,
            .memory_type = type == EMBER_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST,
    };
    ucs_status_t status;

    if (!mem)
        return EMBER_ERR_NO_MEMORY;
    status = ucp_mem_map(tp->context, &params, &mem->memh);
    if (status != UCS_OK) {
        ember_error("rma", "cannot register %zu bytes of %s memory at %p: %s", length,
                    type == EMBER_MEM_CUDA ? "CUDA" : "host", address, ucs_status_string(status));
        free(mem);
        return tp_status_from_ucs(status);
    }
    mem->address = address;
    mem->length = length;
    mem->type = type;
    *mem_p = mem;
    return EMBER_OK;
}

ember_status_t tp_mem_handle(const ember_mem_t *mem, const void *buffer, size_t length,
                             ember_mem_type_t type, const char *what, ucp_mem_h *memh_p)
{
    *memh_p = NULL;
    if (!mem)
        return EMBER_OK;
    uintptr_t start = (uintptr_t)buffer, base = (uintptr_t)mem->address;
    size_t offset = start >= base ? start - base : SIZE_MAX;
    if (mem->type != type || !buffer || offset > mem->length || length > mem->length - offset) {
        ember_error("tp",
                    "%s: %zu bytes of %s memory at %p %s its registration "
                    "(%zu bytes of %s memory at %p)",
                    what, length, type == EMBER_MEM_CUDA ? "CUDA" : "host", buffer,
                    mem->type != type ? "are another memory type than" : "are not inside",
                    mem->length, mem->type == EMBER_MEM_CUDA ? "CUDA" : "host", mem->address);
        return EMBER_ERR_INVALID_PARAM;
    }
    *memh_p = mem->memh;
    return EMBER_OK;
}

void tp_param_memh(ucp_request_param_t *param, ucp_mem_h memh)
{
    if (memh) {
        param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param->memh = memh;
    }
}

void ember_mem_deregister(ember_tp_t *tp, ember_mem_t *mem)
{
    if (!mem)
        return;
    ucp_mem_unmap(tp->context, mem->memh);
    free(mem);
}

ember_status_t ember_mem_pack(ember_tp_t *tp, ember_mem_t *mem, void **rkey_p, size_t *length_p)
{
    void *packed, *copy;
    size_t length;
    ucs_status_t status = ucp_rkey_pack(tp->context, mem->memh, &packed, &length);

    if (status != UCS_OK) {
        ember_error("rma", "ucp_rkey_pack: %s", ucs_status_string(status));
        return tp_status_from_ucs(status);
    }
    copy = malloc(length);
    if (copy)
        memcpy(copy, packed, length);
    ucp_rkey_buffer_release(packed);
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    *rkey_p = copy;
    *length_p = length;
    return EMBER_OK;
}

ember_status_t ember_rkey_unpack(ember_tp_t *tp, int peer, const void *packed, size_t length,
                                 ember_rkey_t **rkey_p)
{
    ember_rkey_t *rkey;
    ucs_status_t status;

    (void)length;
    EMBER_CHECK(tp_peer_connect_wait(tp, peer));
    rkey = calloc(1, sizeof(*rkey));
    if (!rkey)
        return EMBER_ERR_NO_MEMORY;
    status = ucp_ep_rkey_unpack(tp->peers[peer].ep, packed, &rkey->rkey);
    if (status != UCS_OK) {
        ember_error("rma", "cannot unpack the remote key of %s: %s", tp->peers[peer].name,
                    ucs_status_string(status));
        free(rkey);
        return tp_status_from_ucs(status);
    }
    rkey->peer = peer;
    *rkey_p = rkey;
    return EMBER_OK;
}

void ember_rkey_destroy(ember_rkey_t *rkey)
{
    if (!rkey)
        return;
    ucp_rkey_destroy(rkey->rkey);
    free(rkey);
}

static void rma_cb(void *request, ucs_status_t status, void *user_data)
{
    ember_future_t *future = user_data;
    future->send_inflight = 0;
    tp_future_complete(future, status == UCS_OK ? EMBER_OK : EMBER_ERR_PEER_LOST);
    tp_future_maybe_free(future);
    ucp_request_free(request);
}

static ember_status_t rma_start(ember_tp_t *tp, int is_put, int peer, void *local, size_t length,
                                uint64_t remote_address, ember_rkey_t *rkey,
                                ember_future_t **future_p)
{
    ember_future_t *future;
    ucs_status_ptr_t request;
    ucp_request_param_t param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = rma_cb,
    };

    if (!rkey || rkey->peer != peer) {
        ember_error("rma", "remote key does not belong to rank %d", peer);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(tp_peer_connect_wait(tp, peer));
    EMBER_CHECK(tp_future_alloc(tp, TP_FUTURE_RMA, peer, 0, &future));
    param.user_data = future;
    future->send_inflight = 1;
    if (is_put) {
        request =
                ucp_put_nbx(tp->peers[peer].ep, local, length, remote_address, rkey->rkey, &param);
        /* put completes locally; flush the endpoint for remote completion. */
        if (!UCS_PTR_IS_ERR(request)) {
            if (UCS_PTR_IS_PTR(request))
                ucp_request_free(request);
            request = ucp_ep_flush_nbx(tp->peers[peer].ep, &param);
        }
    } else {
        request =
                ucp_get_nbx(tp->peers[peer].ep, local, length, remote_address, rkey->rkey, &param);
    }
    if (request == NULL) {
        future->send_inflight = 0;
        tp_future_complete(future, EMBER_OK);
    } else if (UCS_PTR_IS_ERR(request)) {
        future->send_inflight = 0;
        ember_error("rma", "%s of %zu bytes on %s failed: %s", is_put ? "put" : "get", length,
                    tp->peers[peer].name, ucs_status_string(UCS_PTR_STATUS(request)));
        tp_future_complete(future, tp_status_from_ucs(UCS_PTR_STATUS(request)));
    }
    *future_p = future;
    return EMBER_OK;
}

ember_status_t ember_rma_get(ember_tp_t *tp, int peer, void *local, size_t length,
                             uint64_t remote_address, ember_rkey_t *rkey, ember_future_t **future_p)
{
    return rma_start(tp, 0, peer, local, length, remote_address, rkey, future_p);
}

ember_status_t ember_rma_put(ember_tp_t *tp, int peer, const void *local, size_t length,
                             uint64_t remote_address, ember_rkey_t *rkey, ember_future_t **future_p)
{
    return rma_start(tp, 1, peer, (void *)local, length, remote_address, rkey, future_p);
}
