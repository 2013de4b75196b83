/*
 * ember-info: what ember sees on this machine (as ucx_info / ibv_devinfo).
 *
 *   ember-info              everything below
 *   ember-info --config     the EMBER_* table: name, value, default, help
 *   ember-info --placement [--bind MODE] [-n N] [--xml FILE]
 *                           the binding line each of N local ranks would get
 *
 * Sections: NUMA nodes and cores (hwloc), GPUs (the CUDA backend when built,
 * and NVIDIA PCI devices hwloc sees), RDMA devices (libibverbs: device, port
 * state, link rate, NUMA node), UCX version and transports (UCT API).
 */
#include "common/topology.h"

#include <ember/config.h>
#include <ember/device.h>
#include <ember/log.h>

#include <hwloc/openfabrics-verbs.h>
#include <infiniband/verbs.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    SHOW_TOPOLOGY = 1 << 0,
    SHOW_GPUS = 1 << 1,
    SHOW_RDMA = 1 << 2,
    SHOW_UCX = 1 << 3,
    SHOW_CONFIG = 1 << 4,
    SHOW_BIND = 1 << 5,
    SHOW_ALL = SHOW_TOPOLOGY | SHOW_GPUS | SHOW_RDMA | SHOW_UCX | SHOW_CONFIG
};

static void usage(FILE *stream)
{
    fprintf(stream, "usage: ember-info [options]\n"
                    "  (none)           every section below\n"
                    "  -t, --topology   NUMA nodes, cores, PUs\n"
                    "  -g, --gpus       GPUs (CUDA backend, and NVIDIA PCI devices)\n"
                    "  -r, --rdma       RDMA devices (libibverbs): ports, state, rate, NUMA\n"
                    "  -u, --ucx        UCX version and transports\n"
                    "  -c, --config     every EMBER_* variable: value, default, help\n"
                    "  -b, --placement  the binding line of each local rank (not applied)\n"
                    "  --bind MODE      numa, core or none for --placement (EMBER_BIND)\n"
                    "  -n, --local-size N   ranks per host for --bind (default: this job's)\n"
                    "  --xml FILE       read the topology from an hwloc XML file\n"
                    "  -h, --help\n");
}

/* NUMA nodes next to an I/O object, as a list ("1" or "0-1"). */
static void io_numa(hwloc_topology_t topo, hwloc_obj_t io, char *buf, size_t length)
{
    hwloc_obj_t anchor = io ? hwloc_get_non_io_ancestor_obj(topo, io) : NULL;
    if (!anchor || !anchor->nodeset || hwloc_bitmap_list_snprintf(buf, length, anchor->nodeset) < 0)
        snprintf(buf, length, "?");
}

static void show_topology(hwloc_topology_t topo)
{
    int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    char cpus[256];

    printf("# topology\n");
    printf("packages %d, NUMA nodes %d, cores %d, PUs %d\n",
           hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE), nodes,
           hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE),
           hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
    for (int i = 0; i < nodes; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), node->cpuset);
        printf("numa %u: cores %d, cpus %s, memory %.1f GiB\n", node->os_index,
               hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE), cpus,
               (double)node->attr->numanode.local_memory / (1 << 30));
    }
}

static void show_gpus(hwloc_topology_t topo)
{
    char busid[32], numa[64];
    int seen = 0;

    printf("# gpus\n");
    if (ember_device_have_cuda()) /* counting loads the CUDA plugin */
        printf("cuda: %d device(s)\n", ember_device_cuda_count());
    else
        printf("cuda: CUDA not built\n");
    for (hwloc_obj_t obj = hwloc_get_next_pcidev(topo, NULL); obj;
         obj = hwloc_get_next_pcidev(topo, obj)) {
        if (obj->attr->pcidev.vendor_id != 0x10de ||
            (obj->attr->pcidev.class_id != 0x0302 && obj->attr->pcidev.class_id != 0x0300))
            continue;
        snprintf(busid, sizeof(busid), "%04x:%02x:%02x.%x", obj->attr->pcidev.domain,
                 obj->attr->pcidev.bus, obj->attr->pcidev.dev, obj->attr->pcidev.func);
        io_numa(topo, obj, numa, sizeof(numa));
        printf("pci gpu %s: device %04x, numa %s\n", busid, obj->attr->pcidev.device_id, numa);
        seen++;
    }
    if (!seen)
        printf("pci gpus: none\n");
}

/* Per-lane Gb/s of an IB active_speed code; lanes of an active_width code. */
static double ib_lane_gbps(uint8_t speed)
{
    switch (speed) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 4:
    case 8: return 10.0;
    case 16: return 14.0;
    case 32: return 25.0;
    case 64: return 50.0;
    case 128: return 100.0;
    default: return 0.0;
    }
}

static int ib_lanes(uint8_t width)
{
    switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
    }
}

static void show_rdma(hwloc_topology_t topo)
{
    int count = 0;
    struct ibv_device **devices = ibv_get_device_list(&count);

    printf("# rdma (libibverbs)\n");
    if (!devices || count == 0) {
        printf("rdma devices: none\n");
        if (devices)
            ibv_free_device_list(devices);
        return;
    }
    for (int i = 0; i < count; i++) {
        const char *name = ibv_get_device_name(devices[i]);
        struct ibv_context *context = ibv_open_device(devices[i]);
        struct ibv_device_attr attr;
        char numa[64];

        io_numa(topo, topo ? hwloc_ibv_get_device_osdev(topo, devices[i]) : NULL, numa,
                sizeof(numa));
        if (!context || ibv_query_device(context, &attr) != 0) {
            printf("%s: cannot open (numa %s)\n", name, numa);
            if (context)
                ibv_close_device(context);
            continue;
        }
        for (uint8_t port = 1; port <= attr.phys_port_cnt; port++) {
            struct ibv_port_attr pattr;
            if (ibv_query_port(context, port, &pattr) != 0) {
                printf("%s port %u: cannot query\n", name, port);
                continue;
            }
            printf("%s port %u: %s, %s, rate %.0f Gb/s (%dx %.1f), numa %s\n", name, port,
                   ibv_port_state_str(pattr.state),
                   pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand",
                   ib_lanes(pattr.active_width) * ib_lane_gbps(pattr.active_speed),
                   ib_lanes(pattr.active_width), ib_lane_gbps(pattr.active_speed), numa);
        }
        ibv_close_device(context);
    }
    ibv_free_device_list(devices);
}

static const char *uct_device_type(uct_device_type_t type)
{
    switch (type) {
    case UCT_DEVICE_TYPE_NET: return "network";
    case UCT_DEVICE_TYPE_SHM: return "shared memory";
    case UCT_DEVICE_TYPE_ACC: return "accelerator";
    case UCT_DEVICE_TYPE_SELF: return "loopback";
    default: return "?";
    }
}

/* Every component -> memory domain -> transport resource, as UCX reports it. */
static void show_ucx(void)
{
    uct_component_h *components;
    unsigned num_components;
    int transports = 0;

    printf("# ucx\n");
    printf("ucx version %s\n", ucp_get_version_string());
    /* ember's transport refuses a library of another major.minor. */
    printf("ucx headers %d.%d\n", UCP_API_MAJOR, UCP_API_MINOR);
    if (uct_query_components(&components, &num_components) != UCS_OK) {
        printf("ucx transports: cannot query components\n");
        return;
    }
    for (unsigned c = 0; c < num_components; c++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        if (uct_component_query(components[c], &attr) != UCS_OK)
            continue;
        uct_md_resource_desc_t *mds = calloc(attr.md_resource_count + 1, sizeof(*mds));
        if (!mds)
            break;
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        if (uct_component_query(components[c], &attr) != UCS_OK) {
            free(mds);
            continue;
        }
        for (unsigned m = 0; m < attr.md_resource_count; m++) {
            uct_md_config_t *config;
            uct_md_h md;
            uct_tl_resource_desc_t *resources;
            unsigned num_resources;

            if (uct_md_config_read(components[c], NULL, NULL, &config) != UCS_OK)
                continue;
            ucs_status_t status = uct_md_open(components[c], mds[m].md_name, config, &md);
            uct_config_release(config);
            if (status != UCS_OK)
                continue;
            if (uct_md_query_tl_resources(md, &resources, &num_resources) == UCS_OK) {
                for (unsigned r = 0; r < num_resources; r++) {
                    printf("transport %-10s device %-14s %s (component %s, md %s)\n",
                           resources[r].tl_name, resources[r].dev_name,
                           uct_device_type(resources[r].dev_type), attr.name, mds[m].md_name);
                    transports++;
                }
                uct_release_tl_resource_list(resources);
            }
            uct_md_close(md);
        }
        free(mds);
    }
    uct_release_component_list(components);
    if (!transports)
        printf("ucx transports: none\n");
}

static void show_bind(hwloc_topology_t topo, int local_size)
{
    const char *text = ember_config_str("EMBER_BIND");
    char host[64] = "localhost", line[512];
    ember_bind_t mode;

    printf("# binding (EMBER_BIND=%s; not applied)\n", text ? text : "");
    if (ember_bind_parse(text, &mode) != EMBER_OK) {
        printf("EMBER_BIND='%s' is not numa, core or none\n", text ? text : "");
        return;
    }
    gethostname(host, sizeof(host) - 1);
    for (int r = 0; r < local_size; r++) {
        ember_placement_t placement;
        if (ember_placement_choose(topo, r, local_size, NULL, NULL, mode, &placement) != EMBER_OK) {
            printf("local rank %d: no placement\n", r);
            continue;
        }
        ember_placement_format(&placement, r, r, local_size, host, 0, line, sizeof(line));
        printf("%s\n", line);
        ember_placement_cleanup(&placement);
    }
}

/* What a phase returns to go on; anything else is main's exit code. */
#define GO_ON (-1)

typedef struct {
    int show; /* SHOW_* */
    int local_size;
    const char *xml;
} info_opts_t;

/* The flags that each ask for one section. */
static const struct {
    const char *short_name, *long_name;
    int section;
} section_flags[] = {
        {"-t", "--topology", SHOW_TOPOLOGY}, {"-g", "--gpus", SHOW_GPUS},
        {"-r", "--rdma", SHOW_RDMA},         {"-u", "--ucx", SHOW_UCX},
        {"-c", "--config", SHOW_CONFIG},     {"-b", "--placement", SHOW_BIND},
};

static int section_flag(const char *a)
{
    for (size_t k = 0; k < sizeof(section_flags) / sizeof(section_flags[0]); k++) {
        if (!strcmp(a, section_flags[k].short_name) || !strcmp(a, section_flags[k].long_name))
            return section_flags[k].section;
    }
    return 0;
}

/* One flag at argv[*i] (a value after it taken too). */
static int parse_option(int argc, char **argv, int *i, info_opts_t *opts)
{
    const char *a = argv[*i];
    int section = section_flag(a);
    if (section) {
        opts->show |= section;
    } else if ((!strcmp(a, "-n") || !strcmp(a, "--local-size")) && *i + 1 < argc) {
        opts->local_size = atoi(argv[++*i]);
        if (opts->local_size <= 0 || opts->local_size > 4096) {
            fprintf(stderr, "ember-info: bad --local-size %s\n", argv[*i]);
            return 2;
        }
    } else if (!strcmp(a, "--xml") && *i + 1 < argc) {
        opts->xml = argv[++*i];
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        usage(stdout);
        return 0;
    } else {
        fprintf(stderr, "ember-info: unknown option %s\n", a);
        usage(stderr);
        return 2;
    }
    return GO_ON;
}

static int parse_options(int *argc, char **argv, info_opts_t *opts)
{
    int original_argc = *argc;
    if (ember_topo_take_bind_flag(argc, argv) != EMBER_OK)
        return 2;
    if (*argc != original_argc)
        opts->show |= SHOW_BIND;
    for (int i = 1; i < *argc; i++) {
        int code = parse_option(*argc, argv, &i, opts);
        if (code != GO_ON)
            return code;
    }
    if (!opts->show)
        opts->show = SHOW_ALL;
    if (opts->local_size)
        opts->show |= SHOW_BIND;
    return GO_ON;
}

static void show_sections(hwloc_topology_t topo, info_opts_t *opts)
{
    int show = opts->show;

    if (show & SHOW_TOPOLOGY)
        show_topology(topo);
    if (show & SHOW_GPUS)
        show_gpus(topo);
    if (show & SHOW_RDMA)
        show_rdma(opts->xml ? NULL : topo);
    if (show & SHOW_UCX)
        show_ucx();
    if (show & SHOW_BIND) {
        int local_rank;
        if (!opts->local_size)
            ember_topo_local_rank(0, 1, &local_rank, &opts->local_size);
        show_bind(topo, opts->local_size);
    }
    if (show & SHOW_CONFIG) {
        if (show != SHOW_CONFIG)
            printf("# config\n");
        ember_config_print(stdout);
    }
}

int main(int argc, char **argv)
{
    info_opts_t opts = {0};
    hwloc_topology_t topo = NULL;

    if (ember_config_init() != EMBER_OK)
        return 2;
    int code = parse_options(&argc, argv, &opts);
    if (code != GO_ON)
        return code;
    if ((opts.show & ~(SHOW_CONFIG | SHOW_UCX)) && ember_topo_load(opts.xml, &topo) != EMBER_OK)
        return 1;
    show_sections(topo, &opts);
    if (topo)
        hwloc_topology_destroy(topo);
    return 0;
}
