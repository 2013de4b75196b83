/*
 * cuda/gpudirect: the network path of GPU data (see gpudirect.h).
 */
#include "cuda/gpudirect.h"

#include <ember/config.h>
#include <ember/log.h>

#include <ucp/api/ucp.h>

#include <stdio.h>
#include <string.h>

const char *ember_gpudirect_path_name(ember_gpudirect_path_t path)
{
    return path == EMBER_GPUDIRECT_RDMA ? "rdma" : "staged";
}

ember_status_t ember_gpudirect_decide(uint64_t ucx_memory_types, const char *mode,
                                      ember_gpudirect_path_t *path_p, char *why, size_t why_length)
{
    int cuda = (ucx_memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    int forced = mode && strcmp(mode, "auto") != 0;
    char scratch[8];

    if (!why) {
        why = scratch;
        why_length = sizeof(scratch);
    }
    if (mode && strcmp(mode, "auto") != 0 && strcmp(mode, "staged") != 0 &&
        strcmp(mode, "rdma") != 0) {
        snprintf(why, why_length, "EMBER_GPUDIRECT=%s: expected auto, staged or rdma", mode);
        return EMBER_ERR_INVALID_PARAM;
    }
    if (mode && strcmp(mode, "rdma") == 0 && !cuda) {
        snprintf(why, why_length,
                 "EMBER_GPUDIRECT=rdma: this UCX has no CUDA memory "
                 "support (no cuda transport module); use auto or staged");
        return EMBER_ERR_UNSUPPORTED;
    }
    if (cuda && mode && strcmp(mode, "rdma") == 0) {
        snprintf(why, why_length,
                 "lookup replies land in and gradient pushes leave "
                 "from GPU memory, handed to UCX as CUDA memory (EMBER_GPUDIRECT=rdma; "
                 "GPUDirect RDMA where the NIC and driver allow it)");
        *path_p = EMBER_GPUDIRECT_RDMA;
        return EMBER_OK;
    }
    /* auto stays staged even where UCX lists CUDA memory: UCX 1.22 over
     * shared memory crashed receiving a rendezvous reply into GPU memory
     * (docs/PERFORMANCE.md), so handing it GPU buffers is asked for, not
     * assumed. */
    snprintf(why, why_length,
             "lookup replies and gradient pushes staged through "
             "pinned host buffers, reused every step (%s)",
             !cuda    ? "UCX here has no CUDA memory support"
             : forced ? "EMBER_GPUDIRECT=staged"
                      : "UCX supports CUDA memory; EMBER_GPUDIRECT=rdma hands it GPU "
                        "buffers");
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
        answer = ember_gpudirect_decide(attr.memory_types, ember_config_str("EMBER_GPUDIRECT"),
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
