/*
 * tests/topology: placement (common/topology) on hand-written hwloc XML
 * topologies, and binding on this machine.
 *   test_topology CASE XML_DIR
 * Every case checks, for every local rank, the chosen NUMA node, cpuset,
 * GPU and HCA.  Exit 0 pass, 1 fail, 77 skip.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "common/topology.h"

#include "common/math_threads.h"

#include <ember/config.h>

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *xml_dir;
static int failures;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

static hwloc_topology_t load(const char *name, int with_io)
{
    char path[1024];
    hwloc_topology_t topo;

    snprintf(path, sizeof(path), "%s/%s.xml", xml_dir, name);
    if (with_io) {
        if (ember_topo_load(path, &topo) != EMBER_OK) {
            printf("FAIL: cannot load %s\n", path);
            exit(1);
        }
        return topo;
    }
    /* The same machine with its I/O devices left out: nothing to be near. */
    if (hwloc_topology_init(&topo) || hwloc_topology_set_xml(topo, path) ||
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE) ||
        hwloc_topology_load(topo)) {
        printf("FAIL: cannot load %s\n", path);
        exit(1);
    }
    return topo;
}

/* One expectation: NUMA node, cpus as a list ("4-7"), gpu, hca ("" = none). */
static void expect(hwloc_topology_t topo, int local_rank, int local_size, const char *gpu_arg,
                   const char *hca_arg, ember_bind_t mode, int numa, const char *cpus,
                   const char *gpu, const char *hca)
{
    ember_placement_t p;
    char list[256], line[512];
    ember_status_t status =
            ember_placement_choose(topo, local_rank, local_size, gpu_arg, hca_arg, mode, &p);

    CHECK(status == EMBER_OK, "rank %d/%d: %s", local_rank, local_size,
          ember_status_string(status));
    if (status != EMBER_OK)
        return;
    hwloc_bitmap_list_snprintf(list, sizeof(list), p.cpuset);
    ember_placement_format(&p, local_rank, local_rank, local_size, "test", 1, line, sizeof(line));
    printf("  %s\n", line);
    CHECK(p.numa == numa, "rank %d/%d mode %s: numa %d, want %d", local_rank, local_size,
          ember_bind_name(mode), p.numa, numa);
    CHECK(strcmp(list, cpus) == 0, "rank %d/%d mode %s: cpus %s, want %s", local_rank, local_size,
          ember_bind_name(mode), list, cpus);
    CHECK(strcmp(p.gpu, gpu) == 0, "rank %d/%d: gpu '%s', want '%s'", local_rank, local_size, p.gpu,
          gpu);
    CHECK(strcmp(p.hca, hca) == 0, "rank %d/%d: hca '%s', want '%s'", local_rank, local_size, p.hca,
          hca);
    ember_placement_cleanup(&p);
}

/* One NUMA node, 4 cores x 2 hyperthreads (core c = PUs c and c+4). */
static void case_one_numa(void)
{
    hwloc_topology_t topo = load("one_numa", 1);
    char cpus[16];

    for (int r = 0; r < 4; r++)
        expect(topo, r, 4, NULL, NULL, EMBER_BIND_NUMA, 0, "0-7", "", "");
    /* core: one core (both hyperthreads) each; the 5th and 6th rank wrap. */
    for (int r = 0; r < 6; r++) {
        snprintf(cpus, sizeof(cpus), "%d,%d", r % 4, r % 4 + 4);
        expect(topo, r, 6, NULL, NULL, EMBER_BIND_CORE, 0, cpus, "", "");
    }
    expect(topo, 0, 1, NULL, NULL, EMBER_BIND_NONE, -1, "0-7", "", "");
    /* Names not in the topology are ignored. */
    expect(topo, 1, 2, "0000:99:00.0", "mlx5_7", EMBER_BIND_NUMA, 0, "0-7", "", "");
    hwloc_topology_destroy(topo);
}

/* Two NUMA nodes; the GPU (81:00.0) and HCA (mlx5_0) sit on the second. */
static void case_two_numa(void)
{
    hwloc_topology_t topo = load("two_numa_gpu_hca", 1);
    char cpus[16];

    for (int size = 1; size <= 2; size++) {
        for (int r = 0; r < size; r++)
            expect(topo, r, size, NULL, NULL, EMBER_BIND_NUMA, 1, "4-7", "0000:81:00.0", "mlx5_0");
    }
    /* core: the ranks share the GPU's NUMA node, one core each. */
    for (int r = 0; r < 4; r++) {
        snprintf(cpus, sizeof(cpus), "%d", 4 + r);
        expect(topo, r, 4, NULL, NULL, EMBER_BIND_CORE, 1, cpus, "0000:81:00.0", "mlx5_0");
    }
    expect(topo, 0, 2, NULL, NULL, EMBER_BIND_NONE, -1, "0-7", "0000:81:00.0", "mlx5_0");
    /* The HCA by PCI address is the same device. */
    expect(topo, 0, 1, NULL, "0000:82:00.0", EMBER_BIND_NUMA, 1, "4-7", "0000:81:00.0", "mlx5_0");
    hwloc_topology_destroy(topo);

    /* Without the devices: ranks spread over both nodes in blocks. */
    topo = load("two_numa_gpu_hca", 0);
    for (int r = 0; r < 4; r++)
        expect(topo, r, 4, NULL, NULL, EMBER_BIND_NUMA, r / 2, r < 2 ? "0-3" : "4-7", "", "");
    hwloc_topology_destroy(topo);
}

/* Four NUMA nodes; GPU n on node n; mlx5_0 on node 0, mlx5_1 on node 2. */
static const char *const four_gpus[] = {"0000:17:00.0", "0000:31:00.0", "0000:b1:00.0",
                                        "0000:ca:00.0"};
static const char *const four_hcas[] = {"mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"};

static void case_four_numa(void)
{
    hwloc_topology_t topo = load("four_numa_4gpu_2hca", 1);
    char cpus[16];

    /* One rank per GPU: each on its GPU's node, with the HCA of its package. */
    for (int r = 0; r < 4; r++) {
        snprintf(cpus, sizeof(cpus), "%d-%d", 4 * r, 4 * r + 3);
        expect(topo, r, 4, NULL, NULL, EMBER_BIND_NUMA, r, cpus, four_gpus[r], four_hcas[r]);
    }
    /* Eight ranks: GPU r % 4; core mode gives the second rank of a GPU the
     * next core of the same node. */
    for (int r = 0; r < 8; r++) {
        int n = r % 4;
        snprintf(cpus, sizeof(cpus), "%d-%d", 4 * n, 4 * n + 3);
        expect(topo, r, 8, NULL, NULL, EMBER_BIND_NUMA, n, cpus, four_gpus[n], four_hcas[n]);
        snprintf(cpus, sizeof(cpus), "%d", 4 * n + r / 4);
        expect(topo, r, 8, NULL, NULL, EMBER_BIND_CORE, n, cpus, four_gpus[n], four_hcas[n]);
    }
    /* A GPU named by the caller (CUDA_VISIBLE_DEVICES-style assignment). */
    expect(topo, 0, 4, "0000:b1:00.0", NULL, EMBER_BIND_NUMA, 2, "8-11", "0000:b1:00.0", "mlx5_1");
    expect(topo, 0, 4, "ca:00.0", "mlx5_0", EMBER_BIND_NUMA, 3, "12-15", "0000:ca:00.0", "mlx5_0");
    hwloc_topology_destroy(topo);

    /* Without devices: 8 ranks in blocks of 2 per node; 2 ranks on nodes 0, 2. */
    topo = load("four_numa_4gpu_2hca", 0);
    for (int r = 0; r < 8; r++) {
        int n = r / 2;
        snprintf(cpus, sizeof(cpus), "%d-%d", 4 * n, 4 * n + 3);
        expect(topo, r, 8, NULL, NULL, EMBER_BIND_NUMA, n, cpus, "", "");
        snprintf(cpus, sizeof(cpus), "%d", 4 * n + r % 2);
        expect(topo, r, 8, NULL, NULL, EMBER_BIND_CORE, n, cpus, "", "");
    }
    expect(topo, 0, 2, NULL, NULL, EMBER_BIND_NUMA, 0, "0-3", "", "");
    expect(topo, 1, 2, NULL, NULL, EMBER_BIND_NUMA, 2, "8-11", "", "");
    hwloc_topology_destroy(topo);
}

static void case_bad_args(void)
{
    hwloc_topology_t topo = load("one_numa", 1);
    ember_placement_t p;
    ember_bind_t mode;

    CHECK(ember_placement_choose(topo, 4, 4, NULL, NULL, EMBER_BIND_NUMA, &p) ==
                  EMBER_ERR_INVALID_PARAM,
          "rank 4 of 4 accepted");
    CHECK(ember_placement_choose(topo, 0, 0, NULL, NULL, EMBER_BIND_NUMA, &p) ==
                  EMBER_ERR_INVALID_PARAM,
          "size 0 accepted");
    CHECK(ember_placement_choose(topo, -1, 2, NULL, NULL, EMBER_BIND_NUMA, &p) ==
                  EMBER_ERR_INVALID_PARAM,
          "rank -1 accepted");
    CHECK(ember_bind_parse("socket", &mode) == EMBER_ERR_INVALID_PARAM, "bad mode");
    CHECK(ember_bind_parse("core", &mode) == EMBER_OK && mode == EMBER_BIND_CORE, "core");
    hwloc_topology_destroy(topo);
}

static void case_bind_flag(void)
{
    char a0[] = "prog", a1[] = "--epochs", a2[] = "3", a3[] = "--bind", a4[] = "core",
         a5[] = "--save", a6[] = "x";
    char *argv[] = {a0, a1, a2, a3, a4, a5, a6, NULL};
    int argc = 7;
    char b0[] = "prog", b1[] = "--bind=none";
    char *argv2[] = {b0, b1, NULL};
    int argc2 = 2;
    char c0[] = "prog", c1[] = "--bind", c2[] = "socket";
    char *argv3[] = {c0, c1, c2, NULL};
    int argc3 = 3;

    CHECK(ember_topo_take_bind_flag(&argc, argv) == EMBER_OK, "--bind core");
    CHECK(argc == 5 && !strcmp(argv[3], "--save") && !strcmp(argv[4], "x") && !argv[5],
          "argv not compacted (argc %d)", argc);
    CHECK(!strcmp(ember_config_str("EMBER_BIND"), "core"), "EMBER_BIND not set");
    CHECK(ember_topo_take_bind_flag(&argc2, argv2) == EMBER_OK && argc2 == 1, "--bind=");
    CHECK(!strcmp(ember_config_str("EMBER_BIND"), "none"), "EMBER_BIND not none");
    CHECK(ember_topo_take_bind_flag(&argc3, argv3) == EMBER_ERR_INVALID_PARAM,
          "--bind socket accepted");
}

static void case_local_rank(void)
{
    int local_rank, local_size;

    unsetenv("SLURM_LOCALID");
    unsetenv("SLURM_STEP_TASKS_PER_NODE");
    ember_topo_local_rank(3, 5, &local_rank, &local_size);
    CHECK(local_rank == 3 && local_size == 5, "plain: %d/%d", local_rank, local_size);
    /* Slurm: node 2 of "2(x2),1" runs one task. */
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_NODEID", "2", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2),1", 1);
    ember_topo_local_rank(4, 5, &local_rank, &local_size);
    CHECK(local_rank == 0 && local_size == 1, "slurm node 2: %d/%d", local_rank, local_size);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_NODEID", "1", 1);
    ember_topo_local_rank(3, 5, &local_rank, &local_size);
    CHECK(local_rank == 1 && local_size == 2, "slurm node 1: %d/%d", local_rank, local_size);
}

/* The threads of local rank @r of @size placed by @mode: its placement's cpus shared. */
static unsigned shared(hwloc_topology_t topo, int r, int size, ember_bind_t mode, char *why,
                       size_t length)
{
    ember_placement_t p;
    unsigned threads = 0;
    CHECK(ember_placement_choose(topo, r, size, NULL, NULL, mode, &p) == EMBER_OK, "no placement");
    if (failures)
        return 0;
    threads = ember_topo_shared_threads(topo, p.cpuset, r, size, mode, NULL, why, length);
    ember_placement_cleanup(&p);
    return threads;
}

/* The dense math's threads: each rank's binding divided among the ranks sharing it. */
static void case_shared_threads(void)
{
    hwloc_topology_t topo = load("four_numa_4gpu_2hca", 1); /* 4 nodes of 4 cores */
    char why[256];
    unsigned threads;
    for (int r = 0; r < 4; r++) /* a node each: its 4 cores */
        CHECK((threads = shared(topo, r, 4, EMBER_BIND_NUMA, why, sizeof(why))) == 4,
              "4 ranks numa: rank %d %u threads (%s)", r, threads, why);
    for (int r = 0; r < 8; r++) { /* two to a node: 2 each; a core each: 1 */
        CHECK((threads = shared(topo, r, 8, EMBER_BIND_NUMA, why, sizeof(why))) == 2,
              "8 ranks numa: rank %d %u threads (%s)", r, threads, why);
        CHECK(strstr(why, "4 cores of cpus ") && strstr(why, "shared by 2 local ranks"), "why: %s",
              why);
        CHECK((threads = shared(topo, r, 8, EMBER_BIND_CORE, why, sizeof(why))) == 1,
              "8 ranks core: rank %d %u threads (%s)", r, threads, why);
    }
    /* Unbound: the machine's 16 cores among all 3 (5 each), or 40 (1 each). */
    CHECK((threads = shared(topo, 1, 3, EMBER_BIND_NONE, why, sizeof(why))) == 5,
          "3 ranks unbound: %u threads (%s)", threads, why);
    CHECK((threads = shared(topo, 39, 40, EMBER_BIND_NONE, why, sizeof(why))) == 1,
          "40 ranks unbound: %u threads (%s)", threads, why);
    hwloc_topology_destroy(topo);
}

/* The count reaches the OpenBLAS this test links, and the user's settings win. */
static void case_math_threads(void)
{
    int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    char text[320];
    if (!get) {
        printf("no OpenBLAS in this test: skip\n");
        exit(77);
    }
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    CHECK(ember_math_threads_apply(3, "three", text, sizeof(text)) == 3 && get() == 3,
          "chosen 3: %s, OpenBLAS %d", text, get());
    CHECK(strcmp(text, "3 (three)") == 0, "text '%s'", text);
    CHECK(ember_math_threads_apply(0, "none", text, sizeof(text)) == 1 && get() == 1,
          "chosen 0 is 1: %s, OpenBLAS %d", text, get());
    setenv("OMP_NUM_THREADS", "2", 1);
    CHECK(ember_math_threads_apply(1, "one", text, sizeof(text)) == 2 &&
                  strcmp(text, "2 (OMP_NUM_THREADS)") == 0,
          "the user's OMP_NUM_THREADS: %s", text);
    setenv("OMP_NUM_THREADS", "lots", 1); /* not a count: as if unset */
    CHECK(ember_math_threads_apply(1, "one", text, sizeof(text)) == 1, "OMP_NUM_THREADS=lots: %s",
          text);
    CHECK(ember_config_set("EMBER_THREADS", "2") == EMBER_OK, "EMBER_THREADS=2 refused");
    CHECK(ember_math_threads_apply(1, "one", text, sizeof(text)) == 2 && get() == 2 &&
                  strcmp(text, "2 (EMBER_THREADS)") == 0,
          "EMBER_THREADS: %s, OpenBLAS %d", text, get());
    CHECK(ember_config_set("EMBER_THREADS", "-1") != EMBER_OK, "EMBER_THREADS=-1 taken");
}

/* This machine: choose, bind, and check the kernel's affinity agrees. */
static void case_bind_here(void)
{
    hwloc_topology_t topo;
    hwloc_bitmap_t now = hwloc_bitmap_alloc();
    ember_placement_t p;
    char line[512], want[256], got[256];

    CHECK(ember_topo_load(NULL, &topo) == EMBER_OK, "cannot load this machine");
    if (failures)
        return;
    for (int mode = EMBER_BIND_NUMA; mode <= EMBER_BIND_CORE; mode++) {
        CHECK(ember_placement_choose(topo, 0, 1, NULL, NULL, (ember_bind_t)mode, &p) == EMBER_OK,
              "no placement");
        if (failures)
            break;
        CHECK(ember_placement_apply(topo, &p) == EMBER_OK, "binding refused");
        CHECK(hwloc_get_cpubind(topo, now, HWLOC_CPUBIND_PROCESS) == 0, "get_cpubind");
        hwloc_bitmap_list_snprintf(want, sizeof(want), p.cpuset);
        hwloc_bitmap_list_snprintf(got, sizeof(got), now);
        CHECK(hwloc_bitmap_isequal(now, p.cpuset), "bound to %s, want %s", got, want);
        ember_placement_format(&p, 0, 0, 1, "here", (long)getpid(), line, sizeof(line));
        printf("%s\n", line);
        CHECK(strstr(line, "ember-bind: rank 0 local 0/1 host here pid ") &&
                      strstr(line, " cpus ") && strstr(line, " numa ") && strstr(line, " gpu ") &&
                      strstr(line, " hca "),
              "binding line lacks a field");
        ember_placement_cleanup(&p);
    }
    hwloc_bitmap_free(now);
    hwloc_topology_destroy(topo);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"one_numa", case_one_numa},        {"two_numa", case_two_numa},
                 {"four_numa", case_four_numa},      {"bad_args", case_bad_args},
                 {"bind_flag", case_bind_flag},      {"local_rank", case_local_rank},
                 {"bind_here", case_bind_here},      {"shared_threads", case_shared_threads},
                 {"math_threads", case_math_threads}};

    if (argc != 3) {
        fprintf(stderr, "usage: %s CASE XML_DIR\n", argv[0]);
        return 2;
    }
    xml_dir = argv[2];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].fn();
            printf("%s: %s\n", argv[1], failures ? "FAIL" : "ok");
            return failures ? 1 : 0;
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
