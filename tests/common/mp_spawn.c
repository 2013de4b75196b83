/* tests/common/mp_spawn: fork N ranks of a test case, reap, kill on failure. */
#include "tests/common/mp_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A free loopback port below the ephemeral range (32768+), so no
 * connection of a concurrent test takes it as its source port before rank
 * 0 binds it; the kernel's choice if none is found there. */
static int free_port(void)
{
    for (int attempt = 0; attempt <= 64; attempt++) {
        struct sockaddr_in addr = {.sin_family = AF_INET,
                                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t length = sizeof(addr);
        int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

        if (attempt < 64)
            addr.sin_port = htons((uint16_t)(20000 + rand() % 12000));
        if (fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
            getsockname(fd, (struct sockaddr *)&addr, &length) == 0)
            port = ntohs(addr.sin_port);
        if (fd >= 0)
            close(fd);
        if (port > 0)
            return port;
    }
    return -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The ranks of one case, as the parent reaps them. */
typedef struct {
    int nranks;
    pid_t pids[64];
    int status_of[64]; /* -1 while running */
    int done, failed;  /* failed: 0, 1, or MP_SKIP when every failure skipped */
    unsigned may_die;
    double timeout, deadline;
} spawn_t;

/* A fresh job secret in @secret_path (mode 0600), 32 random bytes in hex;
 * seeds rand() for the port too. */
static int write_secret(const char *secret_path)
{
    FILE *file = fopen(secret_path, "w");
    if (!file)
        return -1;
    chmod(secret_path, 0600);
    /* via 64 bits: microseconds since boot pass 2^32 after 71 minutes */
    srand((unsigned)(uint64_t)(now_s() * 1e6) ^ (unsigned)getpid());
    for (size_t i = 0; i < 32; i++)
        fprintf(file, "%02x", (unsigned char)rand());
    fclose(file);
    return 0;
}

/* In the child: the rank's environment, then the case body. */
static void run_rank(int rank, int nranks, const char *url, const char *secret_path, mp_rank_fn fn,
                     void *arg)
{
    char value[16];
    setenv("EMBER_INIT", url, 1);
    setenv("EMBER_SECRET_FILE", secret_path, 1);
    snprintf(value, sizeof(value), "%d", rank);
    setenv("EMBER_RANK", value, 1);
    setenv("EMBER_LOCAL_RANK", value, 1);
    snprintf(value, sizeof(value), "%d", nranks);
    setenv("EMBER_WORLD_SIZE", value, 1);
    if (!getenv("UCX_NET_DEVICES"))
        setenv("UCX_NET_DEVICES", "lo", 1);
    /* A write to a peer that is gone fails the call; it must not kill the
     * rank. */
    signal(SIGPIPE, SIG_IGN);
    int rc = fn(rank, nranks, arg);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
}

/* Rank of @pid ended with @status: a failure unless it exited 0 or may die. */
static void reap(spawn_t *s, pid_t pid, int status)
{
    for (int rank = 0; rank < s->nranks; rank++) {
        if (s->pids[rank] != pid)
            continue;
        s->status_of[rank] = status;
        s->done++;
        int ok = (WIFEXITED(status) && WEXITSTATUS(status) == 0) || (s->may_die & (1u << rank));
        if (ok)
            continue;
        fprintf(stderr, "mp_spawn: rank %d %s %d\n", rank,
                WIFEXITED(status) ? "exited with" : "killed by signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        if (WIFEXITED(status) && WEXITSTATUS(status) == MP_SKIP && !s->failed)
            s->failed = MP_SKIP;
        else
            s->failed = 1;
    }
}

/* A failure or the deadline: every rank still running killed, then only
 * reaped. */
static void kill_running(spawn_t *s)
{
    if (!s->failed)
        fprintf(stderr, "mp_spawn: case timed out after %.0f s\n", s->timeout);
    s->failed = s->failed ? s->failed : 1;
    for (int rank = 0; rank < s->nranks; rank++) {
        if (s->status_of[rank] == -1)
            kill(s->pids[rank], SIGKILL);
    }
    s->deadline = now_s() + 3600;
}

static void wait_ranks(spawn_t *s)
{
    while (s->done < s->nranks) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0)
            reap(s, pid, status);
        else if (s->failed || now_s() > s->deadline)
            kill_running(s);
        else
            usleep(2000);
    }
}

int mp_spawn(int nranks, mp_rank_fn fn, void *arg, const mp_opts_t *opts)
{
    char dir[] = "/tmp/ember-test-XXXXXX", secret_path[64], url[64];
    spawn_t s = {.nranks = nranks,
                 .timeout = opts && opts->timeout_s > 0 ? opts->timeout_s : 120.0,
                 .may_die = opts ? opts->may_die_mask : 0};

    s.deadline = now_s() + s.timeout;
    if (nranks <= 0 || nranks > 64 || !mkdtemp(dir))
        return 1;
    snprintf(secret_path, sizeof(secret_path), "%s/secret", dir);
    if (write_secret(secret_path) != 0)
        return 1;
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    fflush(stdout);
    fflush(stderr);
    for (int rank = 0; rank < nranks; rank++) {
        s.status_of[rank] = -1;
        s.pids[rank] = fork();
        if (s.pids[rank] == 0)
            run_rank(rank, nranks, url, secret_path, fn, arg);
        if (s.pids[rank] < 0) {
            /* Only the ranks started are waited for (and killed): a pid of
             * -1 must never reach kill(). */
            fprintf(stderr, "mp_spawn: cannot start rank %d: %s\n", rank, strerror(errno));
            s.failed = 1;
            s.nranks = rank;
            break;
        }
    }
    wait_ranks(&s);
    unlink(secret_path);
    rmdir(dir);
    return s.failed;
}

int mp_main(int argc, char **argv, const mp_case_t *cases, size_t ncases, double timeout_s)
{
    for (size_t i = 0; argc == 2 && i < ncases; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            mp_opts_t opts = {.timeout_s = timeout_s, .may_die_mask = cases[i].may_die};
            int rc = mp_spawn(cases[i].ranks, cases[i].fn, NULL, &opts);
            printf("%s: %s\n", cases[i].name, rc == 0 ? "passed" : "FAILED");
            return rc;
        }
    }
    fprintf(stderr, "usage: %s CASE\n", argv[0]);
    return 2;
}
