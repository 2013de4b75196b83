/*
 * common/topology: where each process should run, and binding it there.
 *
 * The choice is a pure function of an hwloc topology and a local rank
 * (ember_placement_choose), so it is tested on hand-written XML topologies
 * without the hardware.  GPUs are found as PCI devices of NVIDIA (vendor
 * 0x10de, class 0x0302 or 0x0300) and HCAs as OpenFabrics OS devices (or PCI
 * class 0x0207), both hwloc I/O objects, so no CUDA runtime is needed and an
 * XML topology can carry them.
 *
 * Rule: a rank takes GPU (local_rank % GPUs) and the HCA nearest that GPU;
 * its NUMA node is the one nearest the GPU, else nearest the HCA, else ranks
 * are spread over the NUMA nodes that have CPUs in blocks by local rank.
 * Mode numa binds to the whole NUMA node, core to one core of it (ranks that
 * share a NUMA node take its cores in local-rank order), none binds nothing.
 */
#ifndef EMBER_COMMON_TOPOLOGY_H
#define EMBER_COMMON_TOPOLOGY_H

#include <ember/status.h>

#include <hwloc.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    EMBER_BIND_NONE,
    EMBER_BIND_NUMA,
    EMBER_BIND_CORE
} ember_bind_t;

typedef struct {
    ember_bind_t mode;
    int numa;               /* OS index of the NUMA node; -1 with mode none */
    int core;               /* logical index of the core (mode core), else -1 */
    hwloc_bitmap_t cpuset;  /* owned: CPUs to bind to (all with mode none) */
    hwloc_bitmap_t nodeset; /* owned: memory nodes to bind to */
    char gpu[32];           /* PCI bus id of the GPU, "" when none */
    char hca[32];           /* HCA name (mlx5_0) or PCI bus id, "" when none */
    const char *reason;     /* static: why this NUMA node: gpu, hca, spread */
} ember_placement_t;

/** Parse "numa", "core" or "none"; ERR_INVALID_PARAM otherwise. */
ember_status_t ember_bind_parse(const char *text, ember_bind_t *mode_p);
const char *ember_bind_name(ember_bind_t mode);

/**
 * Load a topology with its I/O devices (PCI GPUs/HCAs, OS devices): this
 * machine when @xml_path is NULL, else the XML file (not bindable).
 * Destroy with hwloc_topology_destroy.  Errors: ERR_IO, ERR_NO_MEMORY.
 */
ember_status_t ember_topo_load(const char *xml_path, hwloc_topology_t *topo_p);

/**
 * Choose where local rank @local_rank of @local_size ranks on this host runs.
 * @gpu: PCI bus id ("0000:3b:00.0") of this rank's GPU, or NULL to take GPU
 * (local_rank % GPUs).  @hca: name (mlx5_0) or bus id of its HCA, or NULL for
 * the one nearest its GPU (else HCA local_rank % HCAs).  Both borrowed; a
 * name not in the topology is ignored (as NULL).  Pure: reads @topo only.
 * On success fills *out_p (release with ember_placement_cleanup).
 * Errors: ERR_INVALID_PARAM (ranks out of range), ERR_NO_MEMORY,
 * ERR_NOT_FOUND (a topology without CPUs).
 */
ember_status_t ember_placement_choose(hwloc_topology_t topo, int local_rank, int local_size,
                                      const char *gpu, const char *hca, ember_bind_t mode,
                                      ember_placement_t *out_p);

void ember_placement_cleanup(ember_placement_t *placement);

/**
 * Bind this process (all its threads) to the placement's CPUs and memory.
 * Mode none does nothing.  Errors: ERR_UNSUPPORTED when the OS refuses the
 * CPU binding (warned); a refused memory binding (containers often refuse
 * set_mempolicy) is logged at debug level only.
 */
ember_status_t ember_placement_apply(hwloc_topology_t topo, const ember_placement_t *placement);

/**
 * The one binding line, in the spirit of Slurm's cpu-bind report:
 *   ember-bind: rank 0 local 0/4 host node1 pid 42: numa 1 cpus 4-7 mode numa
 *   gpu 0000:3b:00.0 hca mlx5_0 (near gpu)
 * Written into @buf (truncated to @length).
 */
void ember_placement_format(const ember_placement_t *placement, int rank, int local_rank,
                            int local_size, const char *host, long pid, char *buf, size_t length);

/**
 * This process's local rank and local size: EMBER_LOCAL_RANK / SLURM_LOCALID
 * (else @rank) and EMBER_LOCAL_SIZE / Slurm's tasks on this node (else
 * @world_size).
 */
void ember_topo_local_rank(int rank, int world_size, int *local_rank_p, int *local_size_p);

/**
 * Everything ember-train does at start: read EMBER_BIND, load this machine's
 * topology, choose, bind, set the dense math's threads (common/math_threads:
 * the binding's share, ember_topo_shared_threads, unless the user set them)
 * and print the binding line, its threads at the end, on @stream.  A machine
 * where binding is refused is warned about, not fatal.
 * Errors: ERR_INVALID_PARAM (EMBER_BIND not numa|core|none).
 */
ember_status_t ember_topo_bind_self(int rank, int world_size, FILE *stream);

/**
 * Remove "--bind MODE" / "--bind=MODE" from argv (keeping argv[0] and the
 * order of the rest) and set EMBER_BIND from it, so any program takes the
 * flag without knowing it.  Errors: ERR_INVALID_PARAM (missing or bad mode).
 */
ember_status_t ember_topo_take_bind_flag(int *argc_p, char **argv);

/**
 * The threads a process bound to @bound should compute with: the cores
 * (not hardware threads) @bound touches; when @bound is every CPU of
 * @topo (no binding), those of the NUMA node holding CPU @cpu (OS index;
 * the whole machine without one).  At least 1.  @why (may be NULL) says
 * which: "the cores of its binding (cpus 0-7)", "the cores of NUMA node 1
 * (cpus 8-15)".  Pure: reads @topo only.
 */
unsigned ember_topo_threads_for(hwloc_topology_t topo, hwloc_const_cpuset_t bound, int cpu,
                                char *why, size_t why_length);

/**
 * The threads of dense math (BLAS) for local rank @local_rank of
 * @local_size bound to @bound: the cores @bound touches divided among the
 * local ranks whose placement under @mode (as ember_placement_choose with
 * @hca) shares a CPU with @bound, this one included; at least 1.  @why says
 * so ("2 cores of cpus 0-1 shared by 4 local ranks").  Pure: reads @topo
 * only.
 */
unsigned ember_topo_shared_threads(hwloc_topology_t topo, hwloc_const_cpuset_t bound,
                                   int local_rank, int local_size, ember_bind_t mode,
                                   const char *hca, char *why, size_t why_length);

/** ember_topo_threads_for this process on this machine (its binding, the
 * CPU it runs on); 1 when hwloc cannot tell (said in @why). */
unsigned ember_topo_default_threads(char *why, size_t why_length);

#endif
