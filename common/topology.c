/* common/topology: placement of a rank next to its GPU and HCA (hwloc). */
#include "common/topology.h"

#include "common/math_threads.h"
#include "common/slurm.h"

#include <ember/config.h>
#include <ember/log.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PCI_VENDOR_NVIDIA    0x10de
#define PCI_CLASS_VGA        0x0300
#define PCI_CLASS_3D         0x0302
#define PCI_CLASS_INFINIBAND 0x0207
#define MAX_DEVICES          64

ember_status_t ember_bind_parse(const char *text, ember_bind_t *mode_p)
{
    static const struct {
        const char *name;
        ember_bind_t mode;
    } modes[] = {{"numa", EMBER_BIND_NUMA}, {"core", EMBER_BIND_CORE}, {"none", EMBER_BIND_NONE}};
    for (size_t i = 0; text && i < sizeof(modes) / sizeof(modes[0]); i++) {
        if (strcmp(text, modes[i].name) == 0) {
            *mode_p = modes[i].mode;
            return EMBER_OK;
        }
    }
    return EMBER_ERR_INVALID_PARAM;
}

const char *ember_bind_name(ember_bind_t mode)
{
    switch (mode) {
    case EMBER_BIND_NUMA: return "numa";
    case EMBER_BIND_CORE: return "core";
    case EMBER_BIND_NONE: return "none";
    }
    return "?";
}

ember_status_t ember_topo_load(const char *xml_path, hwloc_topology_t *topo_p)
{
    hwloc_topology_t topo;

    if (hwloc_topology_init(&topo) != 0)
        return EMBER_ERR_NO_MEMORY;
    /* GPUs and HCAs are I/O objects, which hwloc drops by default. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (xml_path && hwloc_topology_set_xml(topo, xml_path) != 0) {
        ember_error("topo", "cannot read the topology %s: %s", xml_path, strerror(errno));
        goto err_destroy;
    }
    if (hwloc_topology_load(topo) != 0) {
        ember_error("topo", "hwloc cannot load the topology%s%s: %s", xml_path ? " " : "",
                    xml_path ? xml_path : "", strerror(errno));
        goto err_destroy;
    }
    *topo_p = topo;
    return EMBER_OK;

err_destroy:
    hwloc_topology_destroy(topo);
    return EMBER_ERR_IO;
}

/* --- devices --------------------------------------------------------------- */

static int is_gpu(hwloc_obj_t obj)
{
    return obj->type == HWLOC_OBJ_PCI_DEVICE && obj->attr->pcidev.vendor_id == PCI_VENDOR_NVIDIA &&
           (obj->attr->pcidev.class_id == PCI_CLASS_3D ||
            obj->attr->pcidev.class_id == PCI_CLASS_VGA);
}

static void pci_busid(hwloc_obj_t pci, char *buf, size_t length)
{
    snprintf(buf, length, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
             pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

static int list_gpus(hwloc_topology_t topo, hwloc_obj_t *gpus)
{
    int count = 0;
    for (hwloc_obj_t obj = hwloc_get_next_pcidev(topo, NULL); obj && count < MAX_DEVICES;
         obj = hwloc_get_next_pcidev(topo, obj)) {
        if (is_gpu(obj))
            gpus[count++] = obj;
    }
    return count;
}

static int has_openfabrics_child(hwloc_obj_t pci)
{
    for (hwloc_obj_t child = pci->io_first_child; child; child = child->next_sibling) {
        if (child->type == HWLOC_OBJ_OS_DEVICE &&
            child->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
            return 1;
    }
    return 0;
}

/*
 * HCAs: OpenFabrics OS devices (named mlx5_0...), plus InfiniBand PCI devices
 * that carry none (an XML or a machine without the verbs driver loaded).
 */
static int list_hcas(hwloc_topology_t topo, hwloc_obj_t *hcas)
{
    int count = 0;
    for (hwloc_obj_t obj = hwloc_get_next_osdev(topo, NULL); obj && count < MAX_DEVICES;
         obj = hwloc_get_next_osdev(topo, obj)) {
        if (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
            hcas[count++] = obj;
    }
    for (hwloc_obj_t obj = hwloc_get_next_pcidev(topo, NULL); obj && count < MAX_DEVICES;
         obj = hwloc_get_next_pcidev(topo, obj)) {
        if (obj->attr->pcidev.class_id == PCI_CLASS_INFINIBAND && !has_openfabrics_child(obj))
            hcas[count++] = obj;
    }
    return count;
}

static void device_name(hwloc_obj_t obj, char *buf, size_t length)
{
    if (obj->type == HWLOC_OBJ_OS_DEVICE)
        snprintf(buf, length, "%s", obj->name ? obj->name : "?");
    else
        pci_busid(obj, buf, length);
}

static int find_named(hwloc_obj_t *objs, int count, const char *name)
{
    char buf[64];
    for (int i = 0; name && *name && i < count; i++) {
        device_name(objs[i], buf, sizeof(buf));
        if (strcasecmp(buf, name) == 0)
            return i;
        /* Also accept the PCI bus id of an OS device, or the short form. */
        hwloc_obj_t pci = objs[i]->type == HWLOC_OBJ_OS_DEVICE ? objs[i]->parent : objs[i];
        if (pci && pci->type == HWLOC_OBJ_PCI_DEVICE) {
            pci_busid(pci, buf, sizeof(buf));
            if (strcasecmp(buf, name) == 0 || strcasecmp(buf + 5, name) == 0)
                return i;
        }
    }
    return -1;
}

/* Hops between two objects through their nearest common ancestor. */
static int hops(hwloc_obj_t a, hwloc_obj_t b)
{
    int up = 0;
    for (hwloc_obj_t x = a; x; x = x->parent, up++) {
        int down = 0;
        for (hwloc_obj_t y = b; y; y = y->parent, down++) {
            if (x == y)
                return up + down;
        }
    }
    return 1 << 20;
}

/* NUMA nodes that have CPUs, in logical order (memory-only nodes excluded). */
static int list_numa(hwloc_topology_t topo, hwloc_obj_t *nodes)
{
    int count = 0;
    for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, NULL);
         obj && count < MAX_DEVICES;
         obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, obj)) {
        if (obj->cpuset && !hwloc_bitmap_iszero(obj->cpuset))
            nodes[count++] = obj;
    }
    return count;
}

/* The NUMA node nearest an I/O object: of its locality, pick one by rank. */
static hwloc_obj_t numa_near(hwloc_topology_t topo, hwloc_obj_t io, hwloc_obj_t *nodes, int nnodes,
                             int local_rank)
{
    hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, io);
    hwloc_obj_t near[MAX_DEVICES];
    int count = 0;

    for (int i = 0; anchor && i < nnodes; i++) {
        if (hwloc_bitmap_isincluded(nodes[i]->cpuset, anchor->cpuset) ||
            hwloc_bitmap_isincluded(anchor->cpuset, nodes[i]->cpuset))
            near[count++] = nodes[i];
    }
    return count ? near[local_rank % count] : NULL;
}

typedef struct {
    hwloc_obj_t numa, gpu, hca;
    const char *reason;
} choice_t;

static void choose_devices(hwloc_topology_t topo, int local_rank, int local_size,
                           const char *gpu_name, const char *hca_name, hwloc_obj_t *nodes,
                           int nnodes, choice_t *choice)
{
    hwloc_obj_t gpus[MAX_DEVICES], hcas[MAX_DEVICES];
    int ngpus = list_gpus(topo, gpus), nhcas = list_hcas(topo, hcas);
    int at;

    memset(choice, 0, sizeof(*choice));
    if (ngpus) {
        at = find_named(gpus, ngpus, gpu_name);
        choice->gpu = gpus[at >= 0 ? at : local_rank % ngpus];
    }
    if (nhcas) {
        at = find_named(hcas, nhcas, hca_name);
        if (at >= 0) {
            choice->hca = hcas[at];
        } else if (choice->gpu) {
            hwloc_obj_t nearest[MAX_DEVICES];
            int best = 1 << 30, count = 0;
            for (int i = 0; i < nhcas; i++) {
                int h = hops(choice->gpu, hcas[i]);
                if (h < best) {
                    best = h;
                    count = 0;
                }
                if (h == best)
                    nearest[count++] = hcas[i];
            }
            choice->hca = nearest[local_rank % count];
        } else {
            choice->hca = hcas[local_rank % nhcas];
        }
    }
    if (choice->gpu && (choice->numa = numa_near(topo, choice->gpu, nodes, nnodes, local_rank))) {
        choice->reason = "near gpu";
    } else if (choice->hca &&
               (choice->numa = numa_near(topo, choice->hca, nodes, nnodes, local_rank))) {
        choice->reason = "near hca";
    } else {
        /* Blocks: ranks 0..k-1 on the first node, and so on; fewer ranks than
         * nodes are spread out (2 ranks on 4 nodes: nodes 0 and 2). */
        choice->numa = nodes[(int)((long long)local_rank * nnodes / local_size)];
        choice->reason = "spread";
    }
}

ember_status_t ember_placement_choose(hwloc_topology_t topo, int local_rank, int local_size,
                                      const char *gpu, const char *hca, ember_bind_t mode,
                                      ember_placement_t *out_p)
{
    hwloc_obj_t nodes[MAX_DEVICES];
    int nnodes = list_numa(topo, nodes);
    ember_placement_t out;
    choice_t choice;

    if (local_size <= 0 || local_rank < 0 || local_rank >= local_size)
        return EMBER_ERR_INVALID_PARAM;
    if (nnodes == 0)
        return EMBER_ERR_NOT_FOUND;
    memset(&out, 0, sizeof(out));
    out.mode = mode;
    out.numa = -1;
    out.core = -1;
    choose_devices(topo, local_rank, local_size, gpu, hca, nodes, nnodes, &choice);
    out.reason = choice.reason;
    if (choice.gpu)
        pci_busid(choice.gpu, out.gpu, sizeof(out.gpu));
    if (choice.hca)
        device_name(choice.hca, out.hca, sizeof(out.hca));

    switch (mode) {
    case EMBER_BIND_NONE:
        out.cpuset = hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(topo));
        out.nodeset = hwloc_bitmap_dup(hwloc_topology_get_topology_nodeset(topo));
        break;
    case EMBER_BIND_NUMA:
        out.numa = (int)choice.numa->os_index;
        out.cpuset = hwloc_bitmap_dup(choice.numa->cpuset);
        out.nodeset = hwloc_bitmap_dup(choice.numa->nodeset);
        break;
    case EMBER_BIND_CORE: {
        /* The ranks before me that landed on the same node take its first
         * cores (with the automatic device choice, as they make it). */
        int slot = 0, ncores;
        hwloc_obj_t core;
        for (int r = 0; r < local_rank; r++) {
            choice_t other;
            choose_devices(topo, r, local_size, NULL, NULL, nodes, nnodes, &other);
            slot += other.numa == choice.numa;
        }
        ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, choice.numa->cpuset, HWLOC_OBJ_CORE);
        core = ncores > 0 ? hwloc_get_obj_inside_cpuset_by_type(topo, choice.numa->cpuset,
                                                                HWLOC_OBJ_CORE,
                                                                (unsigned)(slot % ncores))
                          : NULL;
        out.numa = (int)choice.numa->os_index;
        out.core = core ? (int)core->logical_index : -1;
        out.cpuset = hwloc_bitmap_dup(core ? core->cpuset : choice.numa->cpuset);
        out.nodeset = hwloc_bitmap_dup(choice.numa->nodeset);
        break;
    }
    }
    if (!out.cpuset || !out.nodeset) {
        ember_placement_cleanup(&out);
        return EMBER_ERR_NO_MEMORY;
    }
    *out_p = out;
    return EMBER_OK;
}

void ember_placement_cleanup(ember_placement_t *placement)
{
    hwloc_bitmap_free(placement->cpuset);
    hwloc_bitmap_free(placement->nodeset);
    placement->cpuset = NULL;
    placement->nodeset = NULL;
}

ember_status_t ember_placement_apply(hwloc_topology_t topo, const ember_placement_t *placement)
{
    if (placement->mode == EMBER_BIND_NONE)
        return EMBER_OK;
    /* PROCESS: every thread, UCX's progress and async threads included. */
    if (hwloc_set_cpubind(topo, placement->cpuset, HWLOC_CPUBIND_PROCESS) != 0) {
        ember_warn("topo", "cannot bind to CPUs of NUMA node %d: %s", placement->numa,
                   strerror(errno));
        return EMBER_ERR_UNSUPPORTED;
    }
    if (hwloc_set_membind(topo, placement->nodeset, HWLOC_MEMBIND_BIND,
                          HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) != 0)
        ember_debug("topo", "memory of NUMA node %d not bound: %s", placement->numa,
                    strerror(errno));
    return EMBER_OK;
}

void ember_placement_format(const ember_placement_t *placement, int rank, int local_rank,
                            int local_size, const char *host, long pid, char *buf, size_t length)
{
    char cpus[256], numa[16];

    if (hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), placement->cpuset) < 0)
        snprintf(cpus, sizeof(cpus), "?");
    if (placement->numa >= 0)
        snprintf(numa, sizeof(numa), "%d", placement->numa);
    else
        snprintf(numa, sizeof(numa), "none");
    snprintf(buf, length,
             "ember-bind: rank %d local %d/%d host %s pid %ld: numa %s cpus %s "
             "mode %s gpu %s hca %s (%s)",
             rank, local_rank, local_size, host, pid, numa, cpus, ember_bind_name(placement->mode),
             placement->gpu[0] ? placement->gpu : "none",
             placement->hca[0] ? placement->hca : "none", placement->reason);
}

/* --- this process ------------------------------------------------------------ */

void ember_topo_local_rank(int rank, int world_size, int *local_rank_p, int *local_size_p)
{
    const char *tasks = getenv("SLURM_STEP_TASKS_PER_NODE");
    int local_rank, local_size;

    local_rank = ember_config_str("EMBER_LOCAL_RANK") ? (int)ember_config_int("EMBER_LOCAL_RANK")
                                                      : ember_slurm_int("SLURM_LOCALID", rank);
    local_size =
            ember_config_str("EMBER_LOCAL_SIZE") ? (int)ember_config_int("EMBER_LOCAL_SIZE") : -1;
    if (local_size <= 0 && tasks)
        local_size = ember_slurm_tasks_on_node(tasks, ember_slurm_int("SLURM_NODEID", 0));
    if (local_size <= 0)
        local_size = world_size;
    if (local_rank < 0)
        local_rank = 0;
    if (local_size <= local_rank)
        local_size = local_rank + 1;
    *local_rank_p = local_rank;
    *local_size_p = local_size;
}

/* A single HCA named by UCX_NET_DEVICES (mlx5_0:1) is the one to stay near. */
static void hca_from_ucx(char *buf, size_t length)
{
    const char *devices = getenv("UCX_NET_DEVICES");
    buf[0] = '\0';
    if (devices && *devices && !strchr(devices, ',') && strcmp(devices, "all") != 0) {
        snprintf(buf, length, "%s", devices);
        buf[strcspn(buf, ":")] = '\0';
    }
}

/* The dense math's threads for this process, bound as it now is: set, and
 * "N (why)" in @text. */
static void math_threads_here(hwloc_topology_t topo, int local_rank, int local_size,
                              ember_bind_t mode, const char *hca, char *text, size_t length)
{
    char why[256] = "hwloc cannot read this process's binding";
    unsigned chosen = 1;
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (topo && bound && hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS) == 0)
        chosen = ember_topo_shared_threads(topo, bound, local_rank, local_size, mode, hca, why,
                                           sizeof(why));
    else if (!topo)
        snprintf(why, sizeof(why), "no topology");
    hwloc_bitmap_free(bound);
    ember_math_threads_apply(chosen, why, text, length);
}

ember_status_t ember_topo_bind_self(int rank, int world_size, FILE *stream)
{
    const char *text = ember_config_str("EMBER_BIND");
    ember_placement_t placement;
    hwloc_topology_t topo;
    ember_bind_t mode;
    int local_rank, local_size;
    char host[64] = "localhost", hca[64], line[512], threads[320];
    ember_status_t status;

    if (ember_bind_parse(text, &mode) != EMBER_OK) {
        ember_error("topo", "EMBER_BIND='%s': want numa, core or none", text ? text : "");
        return EMBER_ERR_INVALID_PARAM;
    }
    ember_topo_local_rank(rank, world_size, &local_rank, &local_size);
    /* Slurm's node name, as its own cpu-bind report (several slurmd may share
     * a host); else the host name. */
    if (getenv("SLURMD_NODENAME"))
        snprintf(host, sizeof(host), "%s", getenv("SLURMD_NODENAME"));
    else
        gethostname(host, sizeof(host) - 1);
    hca_from_ucx(hca, sizeof(hca));
    if (ember_topo_load(NULL, &topo) != EMBER_OK) {
        math_threads_here(NULL, local_rank, local_size, mode, hca, threads, sizeof(threads));
        fprintf(stream,
                "ember-bind: rank %d local %d/%d host %s pid %ld: not bound "
                "(no topology) threads %s\n",
                rank, local_rank, local_size, host, (long)getpid(), threads);
        return EMBER_OK;
    }
    status = ember_placement_choose(topo, local_rank, local_size, NULL, hca, mode, &placement);
    if (status == EMBER_OK) {
        if (ember_placement_apply(topo, &placement) != EMBER_OK) {
            placement.mode = EMBER_BIND_NONE;
            placement.numa = -1;
            placement.reason = "binding refused";
        }
        ember_placement_format(&placement, rank, local_rank, local_size, host, (long)getpid(), line,
                               sizeof(line));
        math_threads_here(topo, local_rank, local_size, mode, hca, threads, sizeof(threads));
        fprintf(stream, "%s threads %s\n", line, threads);
        fflush(stream);
        ember_placement_cleanup(&placement);
    } else {
        ember_warn("topo", "no placement for local rank %d of %d: %s", local_rank, local_size,
                   ember_status_string(status));
        math_threads_here(topo, local_rank, local_size, EMBER_BIND_NONE, hca, threads,
                          sizeof(threads));
        fprintf(stream, "ember-bind: rank %d local %d/%d host %s pid %ld: not bound threads %s\n",
                rank, local_rank, local_size, host, (long)getpid(), threads);
    }
    hwloc_topology_destroy(topo);
    return EMBER_OK;
}

ember_status_t ember_topo_take_bind_flag(int *argc_p, char **argv)
{
    int out = 1;

    for (int i = 1; i < *argc_p; i++) {
        const char *value = NULL;
        ember_bind_t mode;

        if (strcmp(argv[i], "--") == 0) {
            while (i < *argc_p)
                argv[out++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], "--bind") == 0) {
            value = i + 1 < *argc_p ? argv[++i] : NULL;
        } else if (strncmp(argv[i], "--bind=", 7) == 0) {
            value = argv[i] + 7;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        if (ember_bind_parse(value, &mode) != EMBER_OK) {
            fprintf(stderr, "--bind: want numa, core or none, not '%s'\n", value ? value : "");
            return EMBER_ERR_INVALID_PARAM;
        }
        EMBER_CHECK(ember_config_set("EMBER_BIND", value));
    }
    argv[out] = NULL;
    *argc_p = out;
    return EMBER_OK;
}

/* --- threads for compute --------------------------------------------------- */

/* Cores of @topo with a PU in @set. */
static unsigned cores_in(hwloc_topology_t topo, hwloc_const_cpuset_t set)
{
    unsigned cores = 0;
    hwloc_obj_t core = NULL;
    while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)))
        cores += hwloc_bitmap_intersects(core->cpuset, set) != 0;
    if (cores == 0) /* a topology without cores: its PUs */
        cores = (unsigned)hwloc_bitmap_weight(set);
    return cores;
}

/* The NUMA node whose CPUs hold @cpu, or NULL. */
static hwloc_obj_t numa_of_cpu(hwloc_topology_t topo, int cpu)
{
    hwloc_obj_t node = NULL;
    while (cpu >= 0 && (node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)))
        if (hwloc_bitmap_isset(node->cpuset, (unsigned)cpu))
            return node;
    return NULL;
}

unsigned ember_topo_threads_for(hwloc_topology_t topo, hwloc_const_cpuset_t bound, int cpu,
                                char *why, size_t why_length)
{
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
    hwloc_const_cpuset_t set = bound;
    char cpus[128], text[192];
    hwloc_obj_t node = NULL;
    if (hwloc_bitmap_isincluded(all, bound) && (node = numa_of_cpu(topo, cpu)))
        set = node->cpuset;
    hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), set);
    if (node)
        snprintf(text, sizeof(text), "the cores of NUMA node %u (cpus %s)", node->os_index, cpus);
    else
        snprintf(text, sizeof(text), "the cores of its binding (cpus %s)", cpus);
    if (why && why_length)
        snprintf(why, why_length, "%s", text);
    unsigned cores = cores_in(topo, set);
    return cores ? cores : 1;
}

unsigned ember_topo_shared_threads(hwloc_topology_t topo, hwloc_const_cpuset_t bound,
                                   int local_rank, int local_size, ember_bind_t mode,
                                   const char *hca, char *why, size_t why_length)
{
    unsigned cores = cores_in(topo, bound), sharers = 0;
    char cpus[128];
    for (int r = 0; r < local_size; r++) {
        ember_placement_t other;
        if (r == local_rank) {
            sharers++;
            continue;
        }
        if (ember_placement_choose(topo, r, local_size, NULL, hca, mode, &other) != EMBER_OK)
            continue;
        sharers += hwloc_bitmap_intersects(other.cpuset, bound) != 0;
        ember_placement_cleanup(&other);
    }
    hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), bound);
    if (why && why_length)
        snprintf(why, why_length, "%u core%s of cpus %s shared by %u local rank%s", cores,
                 cores == 1 ? "" : "s", cpus, sharers, sharers == 1 ? "" : "s");
    return cores > sharers ? cores / sharers : 1;
}

unsigned ember_topo_default_threads(char *why, size_t why_length)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
        snprintf(why, why_length, "hwloc cannot load this machine's topology");
        return 1;
    }
    hwloc_bitmap_t bound = hwloc_bitmap_alloc(), here = hwloc_bitmap_alloc();
    unsigned threads = 1;
    if (!bound || !here || hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS) != 0) {
        snprintf(why, why_length, "hwloc cannot read this process's binding");
    } else {
        int cpu = -1;
        if (hwloc_get_last_cpu_location(topo, here, HWLOC_CPUBIND_THREAD) == 0)
            cpu = hwloc_bitmap_first(here);
        threads = ember_topo_threads_for(topo, bound, cpu, why, why_length);
    }
    hwloc_bitmap_free(bound);
    hwloc_bitmap_free(here);
    hwloc_topology_destroy(topo);
    return threads;
}
