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

int mp_spawn(int nranks, mp_rank_fn fn, void *arg, const mp_opts_t *opts)
{
    char dir[] = "/tmp/ember-test-XXXXXX", secret_path[64], url[64], value[16];
    pid_t pids[64];
    int status_of[64], done = 0, failed = 0;
    double timeout = opts && opts->timeout_s > 0 ? opts->timeout_s : 120.0;
    unsigned may_die = opts ? opts->may_die_mask : 0;
    double deadline = now_s() + timeout;
    unsigned char secret[32];
    FILE *file;

    if (nranks <= 0 || nranks > 64 || !mkdtemp(dir))
        return 1;
    snprintf(secret_path, sizeof(secret_path), "%s/secret", dir);
    file = fopen(secret_path, "w");
    if (!file)
        return 1;
    chmod(secret_path, 0600);
    /* via 64 bits: microseconds since boot pass 2^32 after 71 minutes */
    srand((unsigned)(uint64_t)(now_s() * 1e6) ^ (unsigned)getpid());
    for (size_t i = 0; i < sizeof(secret); i++) {
        secret[i] = (unsigned char)rand();
        fprintf(file, "%02x", secret[i]);
    }
    fclose(file);
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
    fflush(stdout);
    fflush(stderr);

    for (int rank = 0; rank < nranks; rank++) {
        pids[rank] = fork();
        if (pids[rank] == 0) {
            setenv("EMBER_INIT", url, 1);
            setenv("EMBER_SECRET_FILE", secret_path, 1);
            snprintf(value, sizeof(value), "%d", rank);
            setenv("EMBER_RANK", value, 1);
            setenv("EMBER_LOCAL_RANK", value, 1);
            snprintf(value, sizeof(value), "%d", nranks);
            setenv("EMBER_WORLD_SIZE", value, 1);
            if (!getenv("UCX_NET_DEVICES"))
                setenv("UCX_NET_DEVICES", "lo", 1);
            /* Die with the parent, so a killed test leaves nothing behind. */
            signal(SIGPIPE, SIG_IGN);
            int rc = fn(rank, nranks, arg);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
        status_of[rank] = -1;
    }

    while (done < nranks) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int rank = 0; rank < nranks; rank++) {
                if (pids[rank] != pid)
                    continue;
                status_of[rank] = status;
                done++;
                int ok =
                        (WIFEXITED(status) && WEXITSTATUS(status) == 0) || (may_die & (1u << rank));
                if (!ok) {
                    fprintf(stderr, "mp_spawn: rank %d %s %d\n", rank,
                            WIFEXITED(status) ? "exited with" : "killed by signal",
                            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                    if (WIFEXITED(status) && WEXITSTATUS(status) == MP_SKIP && !failed)
                        failed = MP_SKIP;
                    else
                        failed = 1;
                }
            }
            continue;
        }
        if (failed || now_s() > deadline) {
            if (!failed)
                fprintf(stderr, "mp_spawn: case timed out after %.0f s\n", timeout);
            failed = failed ? failed : 1;
            for (int rank = 0; rank < nranks; rank++) {
                if (status_of[rank] == -1)
                    kill(pids[rank], SIGKILL);
            }
            deadline = now_s() + 3600; /* only reaping from here */
            continue;
        }
        usleep(2000);
    }
    unlink(secret_path);
    rmdir(dir);
    return failed;
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
