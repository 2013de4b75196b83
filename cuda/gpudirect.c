/*
 * cuda/gpudirect: the RDMA-or-staging decision and the reusable network
 * buffers of GPU data (see gpudirect.h).
 */
#include "cuda/gpudirect.h"

#include <ember/log.h>

#include <ucp/api/ucp.h>

#include <stdlib.h>
#include <string.h>

struct ember_gpudirect_buf {
    ember_tp_t *tp;
    ember_gpudirect_path_t path;
    void *device;
    void *host;         /* STAGED: pinned mirror */
    size_t bytes;
    cudaStream_t stream;
    ember_mem_t *mem;
};

const char *ember_gpudirect_path_name(ember_gpudirect_path_t path)
{
    return path == EMBER_GPUDIRECT_RDMA ? "rdma" : "staged";
}

ember_status_t ember_gpudirect_decide(uint64_t ucx_memory_types, const char *mode,
                                      ember_gpudirect_path_t *path_p)
{
    int cuda = (ucx_memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;

    if (!mode || strcmp(mode, "auto") == 0) {
        *path_p = cuda ? EMBER_GPUDIRECT_RDMA : EMBER_GPUDIRECT_STAGED;
    } else if (strcmp(mode, "rdma") == 0) {
        if (!cuda) {
            ember_error("gpudirect", "GPUDirect RDMA required, but this UCX has "
                                     "no CUDA memory support (no uct_cuda module)");
            return EMBER_ERR_UNSUPPORTED;
        }
        *path_p = EMBER_GPUDIRECT_RDMA;
    } else if (strcmp(mode, "staged") == 0) {
        *path_p = EMBER_GPUDIRECT_STAGED;
    } else {
        ember_error("gpudirect", "unknown GPUDirect mode '%s' (auto, rdma, staged)",
                    mode);
        return EMBER_ERR_INVALID_PARAM;
    }
    return EMBER_OK;
}

ember_status_t ember_gpudirect_probe(const char *mode, ember_gpudirect_path_t *path_p)
{
    static int probed;
    static ember_gpudirect_path_t chosen;
    ucp_params_t params = {0};
    ucp_context_attr_t attr = {0};
    ucp_config_t *config;
    ucp_context_h context;
    ucs_status_t st;

    if (probed) {
        *path_p = chosen;
        return EMBER_OK;
    }
    st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        ember_error("gpudirect", "ucp_config_read: %s", ucs_status_string(st));
        return EMBER_ERR_TRANSPORT;
    }
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
    st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (st != UCS_OK) {
        ember_error("gpudirect", "ucp_init: %s", ucs_status_string(st));
        return EMBER_ERR_TRANSPORT;
    }
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    st = ucp_context_query(context, &attr);
    ucp_cleanup(context);
    if (st != UCS_OK) {
        ember_error("gpudirect", "ucp_context_query: %s", ucs_status_string(st));
        return EMBER_ERR_TRANSPORT;
    }
    EMBER_CHECK(ember_gpudirect_decide(attr.memory_types, mode, &chosen));
    probed = 1;
    ember_info("gpudirect", "GPU data path: %s (UCX %s CUDA memory%s)",
               chosen == EMBER_GPUDIRECT_RDMA
                   ? "GPUDirect RDMA: buffers registered as CUDA memory"
                   : "pinned host staging buffers, reused",
               (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) ? "supports"
                                                                    : "lacks",
               mode && strcmp(mode, "auto") != 0 ? ", forced" : "");
    *path_p = chosen;
    return EMBER_OK;
}

ember_status_t ember_gpudirect_buf_create(ember_tp_t *tp, ember_gpudirect_path_t path,
                                          void *device_ptr, size_t bytes,
                                          cudaStream_t stream,
                                          ember_gpudirect_buf_t **buf_p)
{
    ember_gpudirect_buf_t *buf;
    ember_status_t status;
    cudaError_t err;

    if (!device_ptr || bytes == 0 || !buf_p ||
        (path != EMBER_GPUDIRECT_RDMA && path != EMBER_GPUDIRECT_STAGED))
        return EMBER_ERR_INVALID_PARAM;
    buf = calloc(1, sizeof(*buf));
    if (!buf)
        return EMBER_ERR_NO_MEMORY;
    buf->tp = tp;
    buf->path = path;
    buf->device = device_ptr;
    buf->bytes = bytes;
    buf->stream = stream;
    if (path == EMBER_GPUDIRECT_STAGED) {
        err = cudaHostAlloc(&buf->host, bytes, cudaHostAllocPortable);
        if (err != cudaSuccess) {
            ember_error("gpudirect", "cudaHostAlloc(%zu): %s", bytes,
                        cudaGetErrorString(err));
            (void)cudaGetLastError();
            status = EMBER_ERR_NO_MEMORY;
            goto err_free_buf;
        }
    }
    if (tp) {
        void *net = path == EMBER_GPUDIRECT_RDMA ? buf->device : buf->host;
        ember_mem_type_t type =
            path == EMBER_GPUDIRECT_RDMA ? EMBER_MEM_CUDA : EMBER_MEM_HOST;
        status = ember_mem_register(tp, net, bytes, type, &buf->mem);
        if (status != EMBER_OK)
            goto err_free_host;
    }
    *buf_p = buf;
    return EMBER_OK;

err_free_host:
    if (buf->host)
        cudaFreeHost(buf->host);
err_free_buf:
    free(buf);
    return status;
}

void ember_gpudirect_buf_destroy(ember_gpudirect_buf_t *buf)
{
    if (!buf)
        return;
    if (buf->mem)
        ember_mem_deregister(buf->tp, buf->mem);
    if (buf->host)
        cudaFreeHost(buf->host);
    free(buf);
}

void *ember_gpudirect_buf_net(const ember_gpudirect_buf_t *buf,
                              ember_mem_type_t *type_p)
{
    if (type_p)
        *type_p = buf->path == EMBER_GPUDIRECT_RDMA ? EMBER_MEM_CUDA : EMBER_MEM_HOST;
    return buf->path == EMBER_GPUDIRECT_RDMA ? buf->device : buf->host;
}

ember_mem_t *ember_gpudirect_buf_mem(const ember_gpudirect_buf_t *buf)
{
    return buf->mem;
}

static ember_status_t cuda_fail(cudaError_t err, const char *what)
{
    ember_error("gpudirect", "%s: %s", what, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return EMBER_ERR_IO;
}

ember_status_t ember_gpudirect_buf_to_device(ember_gpudirect_buf_t *buf, size_t bytes)
{
    cudaError_t err;

    if (bytes > buf->bytes)
        return EMBER_ERR_INVALID_PARAM;
    if (buf->path == EMBER_GPUDIRECT_RDMA || bytes == 0)
        return EMBER_OK;
    err = cudaMemcpyAsync(buf->device, buf->host, bytes, cudaMemcpyHostToDevice,
                          buf->stream);
    return err == cudaSuccess ? EMBER_OK : cuda_fail(err, "staging copy to device");
}

ember_status_t ember_gpudirect_buf_from_device(ember_gpudirect_buf_t *buf,
                                               size_t bytes)
{
    cudaError_t err;

    if (bytes > buf->bytes)
        return EMBER_ERR_INVALID_PARAM;
    if (buf->path == EMBER_GPUDIRECT_STAGED && bytes > 0) {
        err = cudaMemcpyAsync(buf->host, buf->device, bytes, cudaMemcpyDeviceToHost,
                              buf->stream);
        if (err != cudaSuccess)
            return cuda_fail(err, "staging copy from device");
    }
    err = cudaStreamSynchronize(buf->stream);
    return err == cudaSuccess ? EMBER_OK : cuda_fail(err, "stream synchronize");
}
