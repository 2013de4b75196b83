/*
 * cuda/gpudirect: the network path of GPU data (see gpudirect.h).
 */
#include "cuda/gpudirect.h"

#include <ember/config.h>
#include <ember/log.h>

#include <ucp/api/ucp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ember_gpudirect_path_name(ember_gpudirect_path_t path)
{
    return path == EMBER_GPUDIRECT_RDMA ? "rdma" : "staged";
}

int ember_gpudirect_tls_allows_cuda_copy(const char *tls)
{
    char list[256];
    int exclude, named = 0;

    if (!tls || !*tls)
        return 1; /* unset: every transport */
    exclude = tls[0] == '^';
    snprintf(list, sizeof(list), "%s", tls + exclude);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        /* "cuda" is UCX's alias of its CUDA transports, cuda_copy among them. */
        if (strcmp(name, "cuda_copy") == 0 || strcmp(name, "cuda") == 0 ||
            (!exclude && strcmp(name, "all") == 0))
            named = 1;
    }
    return exclude ? !named : named;
}

static int mode_known(const char *mode)
{
    return !mode || strcmp(mode, "auto") == 0 || strcmp(mode, "staged") == 0 ||
           strcmp(mode, "rdma") == 0;
}

/* Why UCX cannot take GPU buffers here, or NULL when it can. */
static const char *no_cuda_reason(uint64_t ucx_memory_types, const char *tls)
{
    if (!(ucx_memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
        return "this UCX has no CUDA memory support (no cuda transport module loaded)";
    if (!ember_gpudirect_tls_allows_cuda_copy(tls))
        return "the transports UCX may use (UCX_TLS or EMBER_TLS) leave out cuda_copy";
    return NULL;
}

ember_status_t ember_gpudirect_decide(uint64_t ucx_memory_types, const char *tls, const char *mode,
                                      ember_gpudirect_path_t *path_p, char *why, size_t why_length)
{
    char scratch[8];

    if (!why) {
        why = scratch;
        why_length = sizeof(scratch);
    }
    if (!mode_known(mode)) {
        snprintf(why, why_length, "EMBER_GPUDIRECT=%s: expected auto, staged or rdma", mode);
        return EMBER_ERR_INVALID_PARAM;
    }
    const char *no_cuda = no_cuda_reason(ucx_memory_types, tls);
    int staged = mode && strcmp(mode, "staged") == 0;
    int rdma = mode && strcmp(mode, "rdma") == 0;
    if (rdma && no_cuda) {
        snprintf(why, why_length, "EMBER_GPUDIRECT=rdma: %s%s%s; use auto or staged", no_cuda,
                 tls && *tls ? ": " : "", tls ? tls : "");
        return EMBER_ERR_UNSUPPORTED;
    }
    if (!staged && !no_cuda) {
        snprintf(why, why_length,
                 "lookup replies land in and gradient pushes leave from GPU memory, "
                 "registered with UCX once (EMBER_GPUDIRECT=%s: UCX supports CUDA memory and "
                 "may use cuda_copy)",
                 rdma ? "rdma" : "auto");
        *path_p = EMBER_GPUDIRECT_RDMA;
        return EMBER_OK;
    }
    snprintf(why, why_length,
             "lookup replies and gradient pushes staged through pinned host buffers, reused "
             "every step (%s)",
             staged ? "EMBER_GPUDIRECT=staged" : no_cuda);
    *path_p = EMBER_GPUDIRECT_STAGED;
    return EMBER_OK;
}

ember_status_t ember_gpudirect_probe(ember_gpudirect_path_t *path_p, const char **text_p)
{
    static int probed;
    static ember_status_t answer;
    static ember_gpudirect_path_t chosen;
    static char line[320];
    ucp_params_t params = {0};
    ucp_context_attr_t attr = {0};
    ucp_config_t *config;
    ucp_context_h context;
    ucs_status_t st;

    if (!probed) {
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
        /* The transports the transport's context will be limited to:
         * EMBER_TLS replaces UCX_TLS there (transport/worker.c). */
        const char *tls = ember_config_str("EMBER_TLS");
        if (!tls || !*tls)
            tls = getenv("UCX_TLS");
        answer = ember_gpudirect_decide(attr.memory_types, tls, ember_config_str("EMBER_GPUDIRECT"),
                                        &chosen, line, sizeof(line));
        probed = 1;
        if (answer == EMBER_OK)
            ember_info("gpudirect", "GPU data path: %s", line);
        else
            ember_error("gpudirect", "%s", line);
    }
    *path_p = chosen;
    *text_p = line;
    return answer;
}
