/* ember: the one table of EMBER_* variables. */
#include "common/config_env.h"

#include <ember/config.h>
#include <ember/log.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

/* Keep sorted by layer, then name.  Help text is what `ember-info -c` shows. */
static const ember_config_entry_t config_table[] = {
        /* common */
        {.name = "EMBER_LOG_LEVEL",
         .type = EMBER_CONFIG_ENUM,
         .default_value = "info",
         .help = "Log threshold: fatal, error, warn, info, debug, trace.",
         .values = "fatal,error,warn,info,debug,trace"},
        {.name = "EMBER_BIND",
         .type = EMBER_CONFIG_ENUM,
         .default_value = "numa",
         .help = "CPU/memory binding of each process: numa, core or none.",
         .values = "numa,core,none"},
        /* bootstrap */
        {.name = "EMBER_RANK",
         .type = EMBER_CONFIG_INT,
         .default_value = NULL,
         .help = "Rank of this process (else SLURM_PROCID).",
         .min = 0,
         .max = INT_MAX},
        {.name = "EMBER_WORLD_SIZE",
         .type = EMBER_CONFIG_INT,
         .default_value = NULL,
         .help = "Number of processes in the job (else SLURM_NTASKS).",
         .min = 1,
         .max = INT_MAX},
        {.name = "EMBER_LOCAL_RANK",
         .type = EMBER_CONFIG_INT,
         .default_value = NULL,
         .help = "Rank of this process on its host (else SLURM_LOCALID, else rank).",
         .min = 0,
         .max = INT_MAX},
        {.name = "EMBER_LOCAL_SIZE",
         .type = EMBER_CONFIG_INT,
         .default_value = NULL,
         .help = "Processes of the job on this host (else Slurm's tasks on this node, "
                 "else the world size); placement spreads them over NUMA nodes.",
         .min = 1,
         .max = INT_MAX},
        {.name = "EMBER_INIT",
         .type = EMBER_CONFIG_STRING,
         .default_value = NULL,
         .help = "Rendezvous store, tcp://HOST:PORT; rank 0 serves it.  PORT `auto`: "
                 "the first free of 8 ports derived from the job secret.  Unset: under "
                 "Slurm the first host of SLURM_JOB_NODELIST, port auto; else "
                 "tcp://127.0.0.1:29500."},
        {.name = "EMBER_NAME",
         .type = EMBER_CONFIG_STRING,
         .default_value = NULL,
         .help = "Worker name published in the store (default rank<N>)."},
        {.name = "EMBER_SECRET",
         .type = EMBER_CONFIG_STRING,
         .default_value = NULL,
         .help = "Job secret as hex (set by ember-run; prefer EMBER_SECRET_FILE)."},
        {.name = "EMBER_SECRET_FILE",
         .type = EMBER_CONFIG_STRING,
         .default_value = NULL,
         .help = "File holding the job secret; must not be readable by group/others."},
        {.name = "EMBER_CONNECT_TIMEOUT",
         .type = EMBER_CONFIG_DOUBLE,
         .default_value = "60",
         .help = "Seconds to wait for the rendezvous store and for all ranks to join.",
         .min = 0.001,
         .max = 1e6},
        /* transport */
        {.name = "EMBER_RPC_TIMEOUT",
         .type = EMBER_CONFIG_DOUBLE,
         .default_value = "60",
         .help = "Default deadline of an RPC call, in seconds (a hung peer fails then).",
         .min = 0.001,
         .max = 1e6},
        {.name = "EMBER_SHUTDOWN_TIMEOUT",
         .type = EMBER_CONFIG_DOUBLE,
         .default_value = "10",
         .help = "Seconds shutdown waits for in-flight calls before cancelling them.",
         .min = 0,
         .max = 1e6},
        {.name = "EMBER_MAX_MSG_SIZE",
         .type = EMBER_CONFIG_SIZE,
         .default_value = "1G",
         .help = "Largest RPC payload accepted; larger messages are rejected."},
        {.name = "EMBER_SPIN_US",
         .type = EMBER_CONFIG_DOUBLE,
         .default_value = NULL,
         .help = "Microseconds a waiter polls the UCX worker before blocking on its fd; "
                 "unset: 1000 when this host has a CPU for each of its ranks, else 20.",
         .min = 0,
         .max = 1e7},
        {.name = "EMBER_KEEPALIVE",
         .type = EMBER_CONFIG_DOUBLE,
         .default_value = "0.5",
         .help = "Seconds between UCX keepalive probes, to detect dead peers.",
         .min = 0.001,
         .max = 3600},
        {.name = "EMBER_TCP_EAGER",
         .type = EMBER_CONFIG_SIZE,
         .default_value = "64K",
         .help = "Messages (calls, replies, one-way) up to this size to a peer reached "
                 "over TCP go eager, without UCX's rendezvous handshake (two more "
                 "messages, each a system call); 0 leaves UCX's own threshold (about "
                 "20 KiB on TCP with UCX's 8 KiB segments, 90 KiB with "
                 "EMBER_TCP_SEG_SIZE's 64 KiB)."},
        {.name = "EMBER_TCP_SEG_SIZE",
         .type = EMBER_CONFIG_SIZE,
         .default_value = "64K",
         .help = "UCX's tcp send segment (UCX_TCP_TX_SEG_SIZE; its default is 8 KiB, a "
                 "system call per 8 KiB of an eager message); 0 leaves UCX's, and "
                 "UCX_TCP_TX_SEG_SIZE in the environment wins."},
        {.name = "EMBER_TCP_ONEWAY_EAGER",
         .type = EMBER_CONFIG_SIZE,
         .default_value = "256K",
         .help = "One-way messages (a pair's small allreduce vectors) up to this size to "
                 "a peer reached over TCP go eager: beyond EMBER_TCP_EAGER, as nobody "
                 "waits on their handshake and their receiver copies them once anyway."},
        {.name = "EMBER_ONEWAY_EAGER",
         .type = EMBER_CONFIG_SIZE,
         .default_value = "16K",
         .help = "One-way messages (small allreduce vectors, gradient pushes) up to this "
                 "size go eager over any transport (further over TCP and shared memory: "
                 "EMBER_TCP_EAGER, EMBER_SHM_EAGER): nobody waits on them, and UCX's "
                 "rendezvous handshake costs two more messages."},
        {.name = "EMBER_SHM_EAGER",
         .type = EMBER_CONFIG_SIZE,
         .default_value = "48K",
         .help = "Calls (requests answered by a reply, such as lookups) and one-way "
                 "messages up to this size to a peer reached over shared memory go eager: "
                 "UCX goes rendezvous above about 8 KiB there, and the server then "
                 "fetches each request itself before handling it; 0 leaves UCX's own "
                 "threshold."},
        {.name = "EMBER_TLS",
         .type = EMBER_CONFIG_STRING,
         .default_value = NULL,
         .help = "UCX transports (as UCX_TLS); unset leaves UCX's own choice."},
        /* engine */
        {.name = "EMBER_ALLREDUCE_ALGO",
         .type = EMBER_CONFIG_ENUM,
         .default_value = "auto",
         .help = "Host allreduce above 16 KiB: auto (recursive halving for 4, 8, 16... "
                 "members, else the ring) or ring; the same on every member.",
         .values = "auto,ring"},
        {.name = "EMBER_DENSE_ALLREDUCE",
         .type = EMBER_CONFIG_ENUM,
         .default_value = "auto",
         .help = "Trainers' dense allreduce: auto (the device's own: NCCL on GPUs, the "
                 "host ring on the CPU; where NCCL cannot form the group, as when "
                 "trainers share a GPU, the host ring on copies staged through host "
                 "memory) or staged (always the latter; on the CPU it only adds copies).",
         .values = "auto,staged"},
        {.name = "EMBER_GPUDIRECT",
         .type = EMBER_CONFIG_ENUM,
         .default_value = "auto",
         .help = "How GPU trainers' lookup replies and gradient pushes meet the network: "
                 "rdma (in GPU memory, registered with UCX once and handed to it as CUDA "
                 "memory; refused where UCX has no CUDA support or UCX_TLS leaves out "
                 "cuda_copy), staged (pinned host buffers, reused every step), or auto "
                 "(rdma where it would not be refused, else staged).",
         .values = "auto,staged,rdma"},
        {.name = "EMBER_CUDA_PLUGIN",
         .type = EMBER_CONFIG_STRING,
         .default_value = NULL,
         .help = "Path of the CUDA backend plugin, libember-cuda.so.  Unset: the one "
                 "next to libember (the build tree's lib/, or the install prefix's "
                 "libdir), else the configured install libdir."},
        {.name = "EMBER_CONSISTENCY",
         .type = EMBER_CONFIG_ENUM,
         .default_value = "sync",
         .help = "Parameter-server consistency: sync (deterministic) or async.",
         .values = "sync,async"},
        {.name = "EMBER_THREADS",
         .type = EMBER_CONFIG_INT,
         .default_value = "0",
         .help = "Threads of each process's dense math (OpenBLAS, OpenMP): 0 chooses the "
                 "cores of its binding divided among the local ranks sharing them "
                 "(OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, when set, are taken instead).",
         .min = 0,
         .max = 1024},
        {.name = "EMBER_PS_GRAIN",
         .type = EMBER_CONFIG_INT,
         .default_value = "65536",
         .help = "Work (floats read or summed) a PS thread takes at least of one lookup, "
                 "backward, reduction or optimizer step: smaller ones use fewer of its "
                 "--ps-threads (1: split whatever can be, as the tests do).",
         .min = 1,
         .max = 1e15},
        {.name = "EMBER_PS_CKPT_WRITE_RATE",
         .type = EMBER_CONFIG_SIZE,
         .default_value = "0",
         .help = "Tests only: bytes a second a PS's checkpoint writer writes at most, so "
                 "that training surely changes rows while a checkpoint is written (the "
                 "copy-on-write's tests); 0, the default: as fast as it can."},
        {.name = "EMBER_SEED",
         .type = EMBER_CONFIG_INT,
         .default_value = "0",
         .help = "Seed of initial weights and data.",
         .min = 0,
         .max = 9.2e18},
        {.name = "EMBER_METRICS",
         .type = EMBER_CONFIG_STRING,
         .default_value = NULL,
         .help = "JSON-lines metrics file written by the master."},
};

#define CONFIG_COUNT (sizeof(config_table) / sizeof(config_table[0]))

static char *config_values[CONFIG_COUNT];
static unsigned char config_given[CONFIG_COUNT]; /* set, not defaulted */
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
    case 'K':
        shift = 10;
        end++;
        break;
    case 'M':
        shift = 20;
        end++;
        break;
    case 'G':
        shift = 30;
        end++;
        break;
    case 'T':
        shift = 40;
        end++;
        break;
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

/* @word is one of the comma-separated @values (case-insensitive). */
static int enum_has(const char *values, const char *word)
{
    size_t length = strlen(word);
    for (const char *p = values; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == length && strncasecmp(p, word, n) == 0)
            return 1;
        p += n + (end != NULL);
    }
    return 0;
}

static int in_range(const ember_config_entry_t *entry, double value)
{
    return (entry->min == 0 && entry->max == 0) || (value >= entry->min && value <= entry->max);
}

/* Every number at its full width: an integer that does not fit 64 bits, a
 * double that overflows, or one outside the entry's range is refused. */
static int config_valid(const ember_config_entry_t *entry, const char *text)
{
    char *end;
    size_t size;
    int flag;

    switch (entry->type) {
    case EMBER_CONFIG_STRING: return 1;
    case EMBER_CONFIG_INT: {
        errno = 0;
        long long value = strtoll(text, &end, 0);
        return errno == 0 && end != text && *end == '\0' && in_range(entry, (double)value);
    }
    case EMBER_CONFIG_DOUBLE: {
        errno = 0;
        double value = strtod(text, &end);
        return errno == 0 && end != text && *end == '\0' && isfinite(value) &&
               in_range(entry, value);
    }
    case EMBER_CONFIG_SIZE: return ember_config_parse_size(text, &size) == EMBER_OK;
    case EMBER_CONFIG_BOOL: return parse_bool(text, &flag);
    case EMBER_CONFIG_ENUM: return enum_has(entry->values, text);
    }
    return 0;
}

/* What @entry accepts, for the error that refuses a value. */
static void config_accepted(const ember_config_entry_t *entry, char *text, size_t length)
{
    int ranged = !(entry->min == 0 && entry->max == 0);
    switch (entry->type) {
    case EMBER_CONFIG_STRING: snprintf(text, length, "any text"); break;
    case EMBER_CONFIG_INT:
        if (ranged)
            snprintf(text, length, "an integer from %.0f to %.0f", entry->min, entry->max);
        else
            snprintf(text, length, "a 64-bit integer");
        break;
    case EMBER_CONFIG_DOUBLE:
        if (ranged)
            snprintf(text, length, "a number from %g to %g", entry->min, entry->max);
        else
            snprintf(text, length, "a finite number");
        break;
    case EMBER_CONFIG_SIZE:
        snprintf(text, length, "a size in bytes, such as 4096, 64K, 1M or 2G");
        break;
    case EMBER_CONFIG_BOOL:
        snprintf(text, length, "one of 1, 0, y, n, yes, no, true, false, on, off");
        break;
    case EMBER_CONFIG_ENUM: {
        int used = snprintf(text, length, "one of ");
        for (const char *p = entry->values; *p && used < (int)length; p++)
            used += snprintf(text + used, length - (size_t)used, *p == ',' ? ", " : "%c", *p);
        break;
    }
    }
}

/* One error naming the variable, the value refused and what is accepted. */
static void config_refuse(const ember_config_entry_t *entry, const char *value)
{
    char accepted[256];
    config_accepted(entry, accepted, sizeof(accepted));
    ember_error("config", "%s='%s' is not valid: %s is %s", entry->name, value, entry->name,
                accepted);
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

ember_status_t ember_config_take_env(const char *entry)
{
    const char *eq = strchr(entry, '=');
    char name[128];
    size_t len;
    int index;

    if (strncmp(entry, "EMBER_", 6) != 0 || !eq)
        return EMBER_OK;
    len = (size_t)(eq - entry);
    if (len >= sizeof(name))
        return EMBER_OK;
    memcpy(name, entry, len);
    name[len] = '\0';
    index = config_find(name);
    if (index < 0) {
        ember_warn("config",
                   "unknown variable %s ignored (see ember-info "
                   "--config)",
                   name);
        return EMBER_OK;
    }
    if (!config_valid(&config_table[index], eq + 1)) {
        config_refuse(&config_table[index], eq + 1);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(config_store(index, eq + 1));
    config_given[index] = 1;
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
        ember_status_t taken = ember_config_take_env(*env);
        if (taken == EMBER_ERR_NO_MEMORY)
            return taken;
        if (taken != EMBER_OK)
            status = taken;
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
        config_refuse(&config_table[index], value);
        return EMBER_ERR_INVALID_PARAM;
    }
    EMBER_CHECK(config_store(index, value));
    config_given[index] = 1;
    if (strcmp(name, "EMBER_LOG_LEVEL") == 0)
        ember_log_init();
    return EMBER_OK;
}

int ember_config_is_set(const char *name)
{
    ember_config_str(name); /* loads the table; aborts on an unknown name */
    return config_given[config_find(name)];
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

/* What the listing shows of entry @i: a secret's value never (whoever reads
 * the listing, or a log it lands in, must not learn the job secret). */
static const char *config_shown(size_t i)
{
    if (!config_values[i])
        return "";
    return strcmp(config_table[i].name, "EMBER_SECRET") == 0 ? "(set, not shown)"
                                                             : config_values[i];
}

void ember_config_print(FILE *stream)
{
    static const char *const type_names[] = {"string", "int", "size", "double", "bool", "enum"};
    ember_config_init();
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        const ember_config_entry_t *entry = &config_table[i];
        char accepted[256];
        config_accepted(entry, accepted, sizeof(accepted));
        fprintf(stream, "#\n# %s\n#\n# type: %s (%s), default: %s\n#\n%s=%s\n", entry->help,
                type_names[entry->type], accepted,
                entry->default_value ? entry->default_value : "(unset)", entry->name,
                config_shown(i));
    }
}
