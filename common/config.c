/* ember: the one table of EMBER_* variables. */
#include <ember/config.h>
#include <ember/log.h>

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

/* Keep sorted by layer, then name.  Help text is what `ember-info -c` shows. */
static const ember_config_entry_t config_table[] = {
    /* common */
    {"EMBER_LOG_LEVEL", "info", EMBER_CONFIG_STRING,
     "Log threshold: fatal, error, warn, info, debug, trace."},
    {"EMBER_BIND", "numa", EMBER_CONFIG_STRING,
     "CPU/memory binding of each process: numa, core or none."},
    /* bootstrap */
    {"EMBER_RANK", NULL, EMBER_CONFIG_INT,
     "Rank of this process (else SLURM_PROCID)."},
    {"EMBER_WORLD_SIZE", NULL, EMBER_CONFIG_INT,
     "Number of processes in the job (else SLURM_NTASKS)."},
    {"EMBER_LOCAL_RANK", NULL, EMBER_CONFIG_INT,
     "Rank of this process on its host (else SLURM_LOCALID, else rank)."},
    {"EMBER_LOCAL_SIZE", NULL, EMBER_CONFIG_INT,
     "Processes of the job on this host (else Slurm's tasks on this node, "
     "else the world size); placement spreads them over NUMA nodes."},
    {"EMBER_INIT", NULL, EMBER_CONFIG_STRING,
     "Rendezvous store, tcp://HOST:PORT; rank 0 serves it.  Unset: under "
     "Slurm the first host of SLURM_JOB_NODELIST, port 29500 + "
     "SLURM_JOB_ID % 1000; else tcp://127.0.0.1:29500."},
    {"EMBER_NAME", NULL, EMBER_CONFIG_STRING,
     "Worker name published in the store (default rank<N>)."},
    {"EMBER_SECRET", NULL, EMBER_CONFIG_STRING,
     "Job secret as hex (set by ember-run; prefer EMBER_SECRET_FILE)."},
    {"EMBER_SECRET_FILE", NULL, EMBER_CONFIG_STRING,
     "File holding the job secret; must not be readable by group/others."},
    {"EMBER_CONNECT_TIMEOUT", "60", EMBER_CONFIG_DOUBLE,
     "Seconds to wait for the rendezvous store and for all ranks to join."},
    /* transport */
    {"EMBER_RPC_TIMEOUT", "60", EMBER_CONFIG_DOUBLE,
     "Default deadline of an RPC call, in seconds (a hung peer fails then)."},
    {"EMBER_SHUTDOWN_TIMEOUT", "10", EMBER_CONFIG_DOUBLE,
     "Seconds shutdown waits for in-flight calls before cancelling them."},
    {"EMBER_MAX_MSG_SIZE", "1G", EMBER_CONFIG_SIZE,
     "Largest RPC payload accepted; larger messages are rejected."},
    {"EMBER_SPIN_US", NULL, EMBER_CONFIG_DOUBLE,
     "Microseconds a waiter polls the UCX worker before blocking on its fd; "
     "unset: 1000 when this host has a CPU for each of its ranks, else 20."},
    {"EMBER_KEEPALIVE", "0.5", EMBER_CONFIG_DOUBLE,
     "Seconds between UCX keepalive probes, to detect dead peers."},
    {"EMBER_TCP_EAGER", "64K", EMBER_CONFIG_SIZE,
     "Messages (calls, replies, one-way) up to this size to a peer reached "
     "over TCP go eager, without UCX's rendezvous handshake (two more "
     "messages, each a system call); 0 leaves UCX's own threshold (about "
     "20 KiB on TCP with UCX's 8 KiB segments, 90 KiB with "
     "EMBER_TCP_SEG_SIZE's 64 KiB)."},
    {"EMBER_TCP_SEG_SIZE", "64K", EMBER_CONFIG_SIZE,
     "UCX's tcp send segment (UCX_TCP_TX_SEG_SIZE; its default is 8 KiB, a "
     "system call per 8 KiB of an eager message); 0 leaves UCX's, and "
     "UCX_TCP_TX_SEG_SIZE in the environment wins."},
    {"EMBER_TCP_ONEWAY_EAGER", "256K", EMBER_CONFIG_SIZE,
     "One-way messages (a pair's small allreduce vectors) up to this size to "
     "a peer reached over TCP go eager: beyond EMBER_TCP_EAGER, as nobody "
     "waits on their handshake and their receiver copies them once anyway."},
    {"EMBER_ONEWAY_EAGER", "16K", EMBER_CONFIG_SIZE,
     "One-way messages (small allreduce vectors, gradient pushes) up to this "
     "size go eager over any transport (further over TCP and shared memory: "
     "EMBER_TCP_EAGER, EMBER_SHM_EAGER): nobody waits on them, and UCX's "
     "rendezvous handshake costs two more messages."},
    {"EMBER_SHM_EAGER", "48K", EMBER_CONFIG_SIZE,
     "Calls (requests answered by a reply, such as lookups) and one-way "
     "messages up to this size to a peer reached over shared memory go eager: "
     "UCX goes rendezvous above about 8 KiB there, and the server then "
     "fetches each request itself before handling it; 0 leaves UCX's own "
     "threshold."},
    {"EMBER_TLS", NULL, EMBER_CONFIG_STRING,
     "UCX transports (as UCX_TLS); unset leaves UCX's own choice."},
    /* engine */
    {"EMBER_ALLREDUCE_ALGO", "auto", EMBER_CONFIG_STRING,
     "Host allreduce above 16 KiB: auto (recursive halving for 4, 8, 16... "
     "members, else the ring) or ring; the same on every member."},
    {"EMBER_DENSE_ALLREDUCE", "auto", EMBER_CONFIG_STRING,
     "Trainers' dense allreduce: auto (the device's own: NCCL on GPUs, the "
     "host ring on the CPU; where NCCL cannot form the group, as when "
     "trainers share a GPU, the host ring on copies staged through host "
     "memory) or staged (always the latter; on the CPU it only adds copies)."},
    {"EMBER_GPUDIRECT", "auto", EMBER_CONFIG_STRING,
     "How GPU trainers' lookup replies and gradient pushes meet the network: "
     "auto or staged (pinned host buffers, reused every step), or rdma (in GPU "
     "memory, handed to UCX as CUDA memory; refused where UCX has none; not "
     "picked by auto: UCX 1.22 over shared memory crashed receiving into GPU "
     "memory, see docs/PERFORMANCE.md)."},
    {"EMBER_CUDA_PLUGIN", NULL, EMBER_CONFIG_STRING,
     "Path of the CUDA backend plugin, libember-cuda.so.  Unset: the one "
     "next to libember (the build tree's lib/, or the install prefix's "
     "libdir), else the configured install libdir."},
    {"EMBER_CONSISTENCY", "sync", EMBER_CONFIG_STRING,
     "Parameter-server consistency: sync (deterministic) or async."},
    {"EMBER_SEED", "0", EMBER_CONFIG_INT, "Seed of initial weights and data."},
    {"EMBER_METRICS", NULL, EMBER_CONFIG_STRING,
     "JSON-lines metrics file written by the master."},
};

#define CONFIG_COUNT (sizeof(config_table) / sizeof(config_table[0]))

static char *config_values[CONFIG_COUNT];
static int config_loaded;

static int config_find(const char *name)
{
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        if (strcmp(config_table[i].name, name) == 0)
            return (int)i;
    }
    return -1;
}

ember_status_t ember_config_parse_size(const char *text, size_t *size_p)
{
    char *end;
    unsigned long long value;
    unsigned shift = 0;

    if (!text || !isdigit((unsigned char)*text))
        return EMBER_ERR_INVALID_PARAM;
    errno = 0;
    value = strtoull(text, &end, 10);
    if (errno)
        return EMBER_ERR_INVALID_PARAM;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || (shift && value > (~0ULL >> shift)))
        return EMBER_ERR_INVALID_PARAM;
    *size_p = (size_t)(value << shift);
    return EMBER_OK;
}

static int parse_bool(const char *text, int *value_p)
{
    static const char *const yes[] = {"1", "y", "yes", "true", "on"};
    static const char *const no[] = {"0", "n", "no", "false", "off"};
    for (size_t i = 0; i < 5; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *value_p = 1;
            return 1;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *value_p = 0;
            return 1;
        }
    }
    return 0;
}

static int config_valid(const ember_config_entry_t *entry, const char *text)
{
    char *end;
    size_t size;
    int flag;

    switch (entry->type) {
    case EMBER_CONFIG_STRING:
        return 1;
    case EMBER_CONFIG_INT:
        errno = 0;
        (void)strtoll(text, &end, 0);
        return errno == 0 && end != text && *end == '\0';
    case EMBER_CONFIG_DOUBLE:
        errno = 0;
        (void)strtod(text, &end);
        return errno == 0 && end != text && *end == '\0';
    case EMBER_CONFIG_SIZE:
        return ember_config_parse_size(text, &size) == EMBER_OK;
    case EMBER_CONFIG_BOOL:
        return parse_bool(text, &flag);
    }
    return 0;
}

static ember_status_t config_store(int index, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return EMBER_ERR_NO_MEMORY;
    free(config_values[index]);
    config_values[index] = copy;
    return EMBER_OK;
}

ember_status_t ember_config_init(void)
{
    ember_status_t status = EMBER_OK;

    if (config_loaded)
        return EMBER_OK;
    config_loaded = 1;
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        if (config_table[i].default_value &&
            config_store((int)i, config_table[i].default_value) != EMBER_OK)
            return EMBER_ERR_NO_MEMORY;
    }
    ember_log_init();
    for (char **env = environ; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        char name[128];
        size_t len;
        int index;

        if (strncmp(*env, "EMBER_", 6) != 0 || !eq)
            continue;
        len = (size_t)(eq - *env);
        if (len >= sizeof(name))
            continue;
        memcpy(name, *env, len);
        name[len] = '\0';
        index = config_find(name);
        if (index < 0) {
            ember_warn("config", "unknown variable %s ignored (see ember-info "
                       "--config)", name);
            continue;
        }
        if (!config_valid(&config_table[index], eq + 1)) {
            ember_error("config", "%s='%s' is not a valid value", name, eq + 1);
            status = EMBER_ERR_INVALID_PARAM;
            continue;
        }
        if (config_store(index, eq + 1) != EMBER_OK)
            return EMBER_ERR_NO_MEMORY;
    }
    ember_log_init();
    return status;
}

ember_status_t ember_config_set(const char *name, const char *value)
{
    int index;

    ember_config_init();
    index = config_find(name);
    if (index < 0) {
        ember_error("config", "no configuration variable named %s", name);
        return EMBER_ERR_NOT_FOUND;
    }
    if (!config_valid(&config_table[index], value)) {
        ember_error("config", "%s='%s' is not a valid value", name, value);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(config_store(index, value));
    if (strcmp(name, "EMBER_LOG_LEVEL") == 0)
        ember_log_init();
    return EMBER_OK;
}

const char *ember_config_str(const char *name)
{
    int index;

    ember_config_init();
    index = config_find(name);
    if (index < 0) {
        ember_error("config", "internal: %s is not in the config table", name);
        abort();
    }
    return config_values[index];
}

long long ember_config_int(const char *name)
{
    const char *text = ember_config_str(name);
    return text ? strtoll(text, NULL, 0) : 0;
}

size_t ember_config_size(const char *name)
{
    const char *text = ember_config_str(name);
    size_t size = 0;
    if (text)
        (void)ember_config_parse_size(text, &size);
    return size;
}

double ember_config_double(const char *name)
{
    const char *text = ember_config_str(name);
    return text ? strtod(text, NULL) : 0.0;
}

int ember_config_bool(const char *name)
{
    const char *text = ember_config_str(name);
    int flag = 0;
    if (text)
        (void)parse_bool(text, &flag);
    return flag;
}

void ember_config_print(FILE *stream)
{
    static const char *const type_names[] = {"string", "int", "size",
                                             "double", "bool"};
    ember_config_init();
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        const ember_config_entry_t *entry = &config_table[i];
        fprintf(stream, "#\n# %s\n#\n# type: %s, default: %s\n#\n%s=%s\n",
                entry->help, type_names[entry->type],
                entry->default_value ? entry->default_value : "(unset)",
                entry->name, config_values[i] ? config_values[i] : "");
    }
}
