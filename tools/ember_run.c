/*
 * ember-run: the local launcher (a small mpirun, or the tutorial's mp.spawn).
 *
 *     ember-run -n N [--timeout SECONDS] [--no-prefix] [--grace SECONDS]
 *               [--max-restarts R [--restart-delay SECONDS]] PROGRAM ARGS...
 *
 * Starts N ranks of PROGRAM on this host with the bootstrap environment
 * (EMBER_RANK, EMBER_WORLD_SIZE, EMBER_LOCAL_RANK, EMBER_INIT, a job secret,
 * UCX_NET_DEVICES=lo), forwards their output line by line with a `[RANK] `
 * prefix, and tears the whole job down as soon as one rank fails, the launcher
 * is signalled or the deadline passes.
 *
 * With --max-restarts R, a job torn down because a rank failed is started
 * again (all N ranks, a fresh rendezvous port), up to R times; when
 * PROGRAM's arguments name a --checkpoint-dir that already holds a complete
 * checkpoint (a step-* folder with its manifest), the new attempt gets
 * `--resume DIR` in place of any --resume it had.  A job stopped by a signal
 * to the launcher or by its deadline is not restarted.
 *
 * "The whole job" is every process group of a rank (each rank leads its own)
 * plus whatever was reparented to the launcher: it is a child subreaper, so a
 * grandchild that escaped its group (setsid, double fork) still ends up as our
 * child, and waitpid() saying ECHILD means nothing of the job is left.
 *
 * Single-threaded: one poll() loop over the ranks' pipes and a self-pipe that
 * the signal handlers write to.
 */
#define _GNU_SOURCE

#include "engine/io/checkpoint.h"

#include <ember/config.h>
#include <ember/log.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_MAX_RANKS    1024
#define RUN_LINE_MAX     (64 * 1024) /* longer lines go out in pieces */
#define RUN_IOV_MAX      64
#define RUN_GRACE_S      3.0 /* SIGTERM (or the forwarded signal) -> SIGKILL */
#define RUN_DELAY_S      1.0 /* between a failed attempt and the next */
#define RUN_MAX_RESTARTS 1000000
#define RUN_REAP_S       5.0 /* after SIGKILL, before giving up on a process */
#define RUN_DRAIN_S      2.0 /* output pipes still open once all are reaped */
#define RUN_SECRET_BYTES 32

#define RUN_EXIT_FAILURE 1
#define RUN_EXIT_USAGE   2
#define RUN_EXIT_TIMEOUT 124
#define RUN_EXIT_NOEXEC  127

typedef struct {
    int fd;       /* read end of the rank's stdout/stderr pipe; -1 after EOF */
    int out;      /* 0: launcher's stdout, 1: launcher's stderr */
    int mid_line; /* part of the current line was already written */
    size_t len;
    char buf[RUN_LINE_MAX];
} run_stream_t;

typedef struct {
    pid_t pid; /* also its process group id */
    int reaped;
    int group_gone; /* kill(-pid, 0) said ESRCH: never signal that id again */
    int signalled;  /* the last job_signal reached it (through its group or itself) */
    char prefix[16];
    size_t prefix_len;
    run_stream_t streams[2];
} run_rank_t;

typedef struct {
    /* options */
    int nranks;
    double timeout_s; /* 0: none */
    double grace_s;   /* SIGTERM -> SIGKILL */
    int max_restarts;
    double restart_delay_s;
    int prefix;
    const char *program;  /* as given, for messages */
    char *program_path;   /* resolved */
    char **argv;          /* PROGRAM ARGS..., NULL-terminated (borrowed) */
    char *checkpoint_dir; /* PROGRAM's --checkpoint-dir, or NULL */

    /* across attempts */
    char **attempt_argv; /* what this attempt runs (argv, or a copy with --resume) */
    int restarts;        /* attempts started after the first */
    int own_init;        /* EMBER_INIT is ours: a fresh port each attempt */
    int init_port;
    int no_restart;  /* the launcher was signalled, timed out or cannot go on */
    int sig_seen;    /* sig_count already handled */
    double deadline; /* of the whole job (every attempt); 0: none */

    /* state of one attempt */
    run_rank_t *ranks;
    int nstarted;
    int exit_code;   /* -1 until decided: first failure, signal, timeout or 0 */
    int fail_rank;   /* the first rank that failed, or -1 */
    int fail_status; /* its wait status */
    int stopping;
    int killed;
    int have_children; /* last waitpid() did not say ECHILD */
    int out_dead[2];   /* our stdout/stderr failed (EPIPE...): drop output */
    double stop_deadline;
    double give_up_deadline;
    double drain_deadline;
    int devnull;
    char secret_dir[PATH_MAX - 16]; /* room for "/secret" in secret_path */
    char secret_path[PATH_MAX];
} run_job_t;

static volatile sig_atomic_t sig_last;
static volatile sig_atomic_t sig_count;
static int sig_pipe[2] = {-1, -1};

static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NUM_FORWARDED (sizeof(forwarded_signals) / sizeof(forwarded_signals[0]))

static void usage(FILE *stream)
{
    fprintf(stream,
            "usage: ember-run -n N [--timeout SECONDS] [--no-prefix] [--grace SECONDS]\n"
            "                 [--max-restarts R] [--restart-delay SECONDS] PROGRAM [ARGS...]\n"
            "\n"
            "Run N ranks of PROGRAM on this host and wait for them.\n"
            "\n"
            "  -n N               number of ranks (1..%d)\n"
            "  --timeout SECONDS  stop the job after SECONDS, restarts included (exit code %d)\n"
            "  --no-prefix        pass output through without the `[RANK] ` prefix\n"
            "  --grace SECONDS    from SIGTERM to SIGKILL when stopping the job (default %.0f)\n"
            "  --max-restarts R   when a rank fails, start the job again, up to R times\n"
            "                     (default 0); if ARGS hold --checkpoint-dir DIR and DIR has\n"
            "                     a complete checkpoint (step-*/manifest), the new attempt\n"
            "                     gets --resume DIR (replacing any --resume in ARGS)\n"
            "  --restart-delay SECONDS  wait before a restart (default %.0f)\n"
            "  -h, --help         this text\n"
            "\n"
            "Each rank gets EMBER_RANK, EMBER_LOCAL_RANK, EMBER_WORLD_SIZE,\n"
            "EMBER_INIT (tcp://127.0.0.1:<free port> unless set), EMBER_SECRET_FILE\n"
            "(a fresh 0600 file unless EMBER_SECRET or EMBER_SECRET_FILE is set) and\n"
            "UCX_NET_DEVICES=lo (unless set).  When a rank fails, every other rank\n"
            "gets SIGTERM, then SIGKILL after the grace period, and ember-run exits\n"
            "with the failing rank's code (128+signal if it was killed), that of the\n"
            "last attempt.  A signal to ember-run (forwarded to the ranks) or the\n"
            "timeout ends the job without a restart.\n",
            RUN_MAX_RANKS, RUN_EXIT_TIMEOUT, RUN_GRACE_S, RUN_DELAY_S);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "ember-run: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    usage(stderr);
    return RUN_EXIT_USAGE;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Whether the launcher's own environment already sets @name (non-empty).
 * This reads the environment directly rather than the config table: what
 * matters is what the children inherit, and the table's defaults (EMBER_INIT
 * has one) would hide whether a variable is really set.
 */
static int env_is_set(const char *name)
{
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0';
}

/*
 * Whether argv[*i_p] is option @name, as "NAME VALUE" (the next argument,
 * *i_p moves to it) or "NAME=VALUE"; *value_p is NULL when VALUE is missing.
 */
static int long_option(int argc, char **argv, int *i_p, const char *name, const char **value_p)
{
    const char *arg = argv[*i_p];
    size_t len = strlen(name);

    if (strncmp(arg, name, len) != 0 || (arg[len] != '\0' && arg[len] != '='))
        return 0;
    if (arg[len] == '=')
        *value_p = arg + len + 1;
    else
        *value_p = *i_p + 1 < argc ? argv[++*i_p] : NULL;
    return 1;
}

/* @value as seconds (finite, > 0, or >= 0 with @zero_ok); 0 or the usage code. */
static int parse_seconds(const char *name, const char *value, int zero_ok, double *out_p)
{
    char *end;

    if (!value)
        return usage_error("%s needs a value", name);
    errno = 0;
    double t = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(t) || t < 0 || (t == 0 && !zero_ok))
        return usage_error("bad %s '%s' (seconds %s 0)", name, value, zero_ok ? ">=" : ">");
    *out_p = t;
    return 0;
}

/* @value as a whole number in [@min, @max]; 0 or the usage code. */
static int parse_count(const char *name, const char *value, long min, long max, int *out_p)
{
    char *end;

    if (!value)
        return usage_error("%s needs a value", name);
    errno = 0;
    long n = strtol(value, &end, 10);
    if (errno || end == value || *end || n < min || n > max)
        return usage_error("bad %s '%s' (%ld..%ld)", name, value, min, max);
    *out_p = (int)n;
    return 0;
}

/* One option at argv[*i_p] (moved past its value); 0 or an exit code. */
static int parse_option(int argc, char **argv, int *i_p, run_job_t *job)
{
    const char *arg = argv[*i_p], *value = NULL;

    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        usage(stdout);
        exit(0);
    }
    if (strcmp(arg, "--no-prefix") == 0) {
        job->prefix = 0;
        return 0;
    }
    if (strncmp(arg, "-n", 2) == 0) {
        value = arg[2] ? arg + 2 : (*i_p + 1 < argc ? argv[++*i_p] : NULL);
        if (value && parse_count("number of ranks", value, 1, RUN_MAX_RANKS, &job->nranks) != 0)
            return RUN_EXIT_USAGE;
        return value ? 0 : usage_error("%s needs a value", arg);
    }
    if (long_option(argc, argv, i_p, "--timeout", &value))
        return parse_seconds("timeout", value, 0, &job->timeout_s);
    if (long_option(argc, argv, i_p, "--grace", &value))
        return parse_seconds("grace", value, 1, &job->grace_s);
    if (long_option(argc, argv, i_p, "--restart-delay", &value))
        return parse_seconds("restart delay", value, 1, &job->restart_delay_s);
    if (long_option(argc, argv, i_p, "--max-restarts", &value))
        return parse_count("max restarts", value, 0, RUN_MAX_RESTARTS, &job->max_restarts);
    return usage_error("unknown option '%s'", arg);
}

/* The value of PROGRAM's last --checkpoint-dir (either form), or NULL. */
static char *checkpoint_dir_of(char **args)
{
    char *dir = NULL;

    for (int i = 1; args[i]; i++) {
        if (strcmp(args[i], "--checkpoint-dir") == 0 && args[i + 1])
            dir = args[++i];
        else if (strncmp(args[i], "--checkpoint-dir=", 17) == 0)
            dir = args[i] + 17;
    }
    return dir && *dir ? dir : NULL;
}

/* Returns 0, or an exit code after printing the problem. */
static int parse_args(int argc, char **argv, run_job_t *job)
{
    int i = 1;

    job->prefix = 1;
    job->grace_s = RUN_GRACE_S;
    job->restart_delay_s = RUN_DELAY_S;
    while (i < argc) {
        const char *arg = argv[i];

        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (arg[0] != '-' || arg[1] == '\0')
            break;
        int code = parse_option(argc, argv, &i, job);
        if (code != 0)
            return code;
        i++;
    }
    if (job->nranks == 0)
        return usage_error("-n N is required");
    if (i >= argc)
        return usage_error("no PROGRAM given");
    job->program = argv[i];
    job->argv = argv + i;
    job->attempt_argv = job->argv;
    job->checkpoint_dir = checkpoint_dir_of(job->argv);
    return 0;
}

static int is_executable_file(const char *path, int *err_p)
{
    struct stat st;

    if (stat(path, &st) != 0) {
        *err_p = errno;
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        *err_p = S_ISDIR(st.st_mode) ? EISDIR : EACCES;
        return 0;
    }
    if (access(path, X_OK) != 0) {
        *err_p = errno;
        return 0;
    }
    return 1;
}

/*
 * Find PROGRAM as execvp() would, so that a typo fails before any rank starts.
 * Returns 0 and sets job->program_path, or an exit code after the message.
 */
static int resolve_program(run_job_t *job)
{
    const char *name = job->program;
    int err = ENOENT;

    if (strchr(name, '/')) {
        if (!is_executable_file(name, &err)) {
            ember_error("run", "cannot execute '%s': %s", name, strerror(err));
            return RUN_EXIT_NOEXEC;
        }
        job->program_path = strdup(name);
        return job->program_path ? 0 : RUN_EXIT_FAILURE;
    }

    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    int saw_eacces = 0;
    for (const char *dir = path;; dir++) {
        const char *end = strchrnul(dir, ':');
        int dir_len = (int)(end - dir);
        char candidate[PATH_MAX];
        int len = snprintf(candidate, sizeof(candidate), "%.*s%s%s", dir_len, dir,
                           dir_len ? "/" : "", name);
        if (len > 0 && (size_t)len < sizeof(candidate)) {
            if (is_executable_file(candidate, &err)) {
                job->program_path = strdup(candidate);
                return job->program_path ? 0 : RUN_EXIT_FAILURE;
            }
            if (err == EACCES)
                saw_eacces = 1;
        }
        dir = end;
        if (*end == '\0')
            break;
    }
    if (saw_eacces)
        ember_error("run", "cannot execute '%s': permission denied", name);
    else
        ember_error("run", "cannot execute '%s': command not found in PATH", name);
    return RUN_EXIT_NOEXEC;
}

/* Can @port be bound on 127.0.0.1 right now (0: any, written back)? */
static int try_port(int *port_p)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    socklen_t addr_len = sizeof(addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

    if (fd < 0)
        return 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((uint16_t)*port_p);
    ok = bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
         getsockname(fd, (struct sockaddr *)&addr, &addr_len) == 0;
    close(fd);
    if (ok)
        *port_p = ntohs(addr.sin_port);
    return ok;
}

/*
 * A free port for the store that rank 0 serves.  Taken below Linux's
 * ephemeral range (32768+) when one is free there: a port from the
 * ephemeral range can be taken as the source port of some connection (UCX
 * makes many) between our check and rank 0's bind.
 */
static int find_free_port(int *port_p)
{
    for (int attempt = 0; attempt < 64; attempt++) {
        uint16_t r = 0;
        if (getrandom(&r, sizeof(r), 0) != sizeof(r))
            break;
        int port = 20000 + r % 12000;
        if (try_port(&port)) {
            *port_p = port;
            return 0;
        }
    }
    int port = 0;
    if (!try_port(&port)) {
        ember_error("run", "finding a free port on 127.0.0.1: %s", strerror(errno));
        return -1;
    }
    *port_p = port;
    return 0;
}

static void secret_remove(run_job_t *job)
{
    if (job->secret_path[0]) {
        if (unlink(job->secret_path) != 0 && errno != ENOENT)
            ember_warn("run", "removing %s: %s", job->secret_path, strerror(errno));
        job->secret_path[0] = '\0';
    }
    if (job->secret_dir[0]) {
        if (rmdir(job->secret_dir) != 0 && errno != ENOENT)
            ember_warn("run", "removing %s: %s", job->secret_dir, strerror(errno));
        job->secret_dir[0] = '\0';
    }
}

/* RUN_SECRET_BYTES random bytes as hex digits. */
static int secret_draw(char hex[2 * RUN_SECRET_BYTES])
{
    unsigned char key[RUN_SECRET_BYTES];
    size_t got = 0;

    while (got < sizeof(key)) {
        ssize_t n = getrandom(key + got, sizeof(key) - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            ember_error("run", "getrandom() for the job secret: %s", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(key); i++) {
        static const char digits[] = "0123456789abcdef";
        hex[2 * i] = digits[key[i] >> 4];
        hex[2 * i + 1] = digits[key[i] & 15];
    }
    memset(key, 0, sizeof(key));
    return 0;
}

/* A fresh 0700 folder under TMPDIR, and the secret's path in it. */
static int secret_dir_make(run_job_t *job)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    int len = snprintf(job->secret_dir, sizeof(job->secret_dir), "%s/ember-run.XXXXXX", tmp);
    if (len < 0 || (size_t)len >= sizeof(job->secret_dir)) {
        ember_error("run", "TMPDIR '%s' is too long", tmp);
        job->secret_dir[0] = '\0';
        return -1;
    }
    if (!mkdtemp(job->secret_dir)) { /* mode 0700 */
        ember_error("run", "mkdtemp(%s): %s", job->secret_dir, strerror(errno));
        job->secret_dir[0] = '\0';
        return -1;
    }
    snprintf(job->secret_path, sizeof(job->secret_path), "%s/secret", job->secret_dir);
    return 0;
}

/* @hex into a new 0600 file at job->secret_path. */
static int secret_write(run_job_t *job, const char *hex, size_t length)
{
    int fd = open(job->secret_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        ember_error("run", "creating %s: %s", job->secret_path, strerror(errno));
        job->secret_path[0] = '\0';
        return -1;
    }
    size_t done = 0;
    while (done < length) {
        ssize_t n = write(fd, hex + done, length - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ember_error("run", "writing %s: %s", job->secret_path,
                        n < 0 ? strerror(errno) : "short write");
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    if (close(fd) != 0) {
        ember_error("run", "closing %s: %s", job->secret_path, strerror(errno));
        return -1;
    }
    return 0;
}

/* 32 random bytes as 64 hex chars in a 0600 file inside a fresh 0700 dir. */
static int secret_create(run_job_t *job)
{
    char hex[2 * RUN_SECRET_BYTES];
    int rc = -1;

    if (secret_draw(hex) != 0)
        return -1;
    if (secret_dir_make(job) == 0) {
        rc = secret_write(job, hex, sizeof(hex));
        if (rc != 0)
            secret_remove(job);
    }
    memset(hex, 0, sizeof(hex));
    return rc;
}

/*
 * EMBER_INIT at a free port, unless the caller set it; each attempt gets a
 * port other than the last one's (the old store's may linger in TIME_WAIT).
 */
static int env_init_setup(run_job_t *job)
{
    char value[64];
    int port;

    if (!job->own_init)
        return 0;
    do {
        if (find_free_port(&port) != 0)
            return -1;
    } while (port == job->init_port);
    job->init_port = port;
    snprintf(value, sizeof(value), "tcp://127.0.0.1:%d", port);
    if (setenv("EMBER_INIT", value, 1) != 0) {
        ember_error("run", "setenv: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* The environment every rank shares; per-rank variables are set at spawn. */
static int env_setup(run_job_t *job)
{
    char value[64];

    snprintf(value, sizeof(value), "%d", job->nranks);
    if (setenv("EMBER_WORLD_SIZE", value, 1) != 0)
        goto err_setenv;
    job->own_init = !env_is_set("EMBER_INIT");
    /* All ranks are on this host: never let UCX pick another interface. */
    if (!env_is_set("UCX_NET_DEVICES") && setenv("UCX_NET_DEVICES", "lo", 1) != 0)
        goto err_setenv;
    if (!env_is_set("EMBER_SECRET_FILE") && !env_is_set("EMBER_SECRET")) {
        if (secret_create(job) != 0)
            return -1;
        if (setenv("EMBER_SECRET_FILE", job->secret_path, 1) != 0)
            goto err_setenv;
    }
    return 0;

err_setenv:
    ember_error("run", "setenv: %s", strerror(errno));
    return -1;
}

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return strsignal(sig);
    }
}

static void on_signal(int signo)
{
    int saved_errno = errno;
    char byte = (char)signo;

    if (signo != SIGCHLD) {
        sig_last = signo;
        sig_count = sig_count + 1;
    }
    /* Only to wake poll(); a full pipe already will. */
    ssize_t rc = write(sig_pipe[1], &byte, 1);
    (void)rc;
    errno = saved_errno;
}

static int signals_setup(void)
{
    struct sigaction sa;

    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        ember_error("run", "pipe2: %s", strerror(errno));
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NUM_FORWARDED; i++)
        sigaction(forwarded_signals[i], &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    /* A closed stdout must not kill the launcher (and orphan the job). */
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void signals_block(sigset_t *old_p)
{
    sigset_t set;

    sigemptyset(&set);
    for (size_t i = 0; i < NUM_FORWARDED; i++)
        sigaddset(&set, forwarded_signals[i]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, old_p);
}

/* Runs in the child between fork and exec; does not return. */
static void child_exec(run_job_t *job, int rank, pid_t parent, int out_fd, int err_fd,
                       int exec_err_fd, const sigset_t *old_mask)
{
    int in_fd = job->devnull;
    int err;

    setpgid(0, 0);
    /* The launcher dying (even by SIGKILL) must not leave the rank running. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(RUN_EXIT_FAILURE);
    for (size_t i = 0; i < NUM_FORWARDED; i++)
        signal(forwarded_signals[i], SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, old_mask, NULL);

    /*
     * Ranks run in background process groups: reading a terminal would stop
     * them (SIGTTIN), so only rank 0 gets stdin, and only when it is no tty.
     */
    if (rank == 0 && !isatty(STDIN_FILENO))
        in_fd = STDIN_FILENO;
    if (dup2(in_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
        dup2(err_fd, STDERR_FILENO) < 0) {
        err = errno;
    } else {
        execv(job->program_path, job->attempt_argv);
        err = errno;
    }
    ssize_t rc = write(exec_err_fd, &err, sizeof(err));
    (void)rc;
    _exit(RUN_EXIT_NOEXEC);
}

/*
 * Start rank @rank.  Returns 0, or the job's exit code after the message
 * (whatever was started stays in job->ranks for the teardown).
 */
static int spawn_rank(run_job_t *job, int rank, const sigset_t *old_mask)
{
    run_rank_t *r = &job->ranks[rank];
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
    char value[32];
    int code = RUN_EXIT_FAILURE;

    snprintf(value, sizeof(value), "%d", rank);
    if (setenv("EMBER_RANK", value, 1) != 0 || setenv("EMBER_LOCAL_RANK", value, 1) != 0) {
        ember_error("run", "setenv: %s", strerror(errno));
        return RUN_EXIT_FAILURE;
    }
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
        pipe2(exec_pipe, O_CLOEXEC) != 0) {
        ember_error("run", "pipe2 for rank %d: %s", rank, strerror(errno));
        goto out_close;
    }

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        ember_error("run", "fork for rank %d: %s", rank, strerror(errno));
        goto out_close;
    }
    if (pid == 0)
        child_exec(job, rank, parent, out_pipe[1], err_pipe[1], exec_pipe[1], old_mask);

    /* Also here, so that the group exists before we might signal it. */
    setpgid(pid, pid);
    r->pid = pid;
    job->nstarted = rank + 1;
    r->prefix_len = (size_t)snprintf(r->prefix, sizeof(r->prefix), "[%d] ", rank);
    r->streams[0].fd = out_pipe[0];
    r->streams[0].out = 0;
    r->streams[1].fd = err_pipe[0];
    r->streams[1].out = 1;
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    /* the rank's streams now own the read ends */
    out_pipe[0] = err_pipe[0] = -1;

    /* EOF: exec succeeded (the pipe is close-on-exec); an int: it failed. */
    close(exec_pipe[1]);
    exec_pipe[1] = -1;
    int err = 0;
    ssize_t n;
    do {
        n = read(exec_pipe[0], &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(err)) {
        ember_error("run", "rank %d: cannot execute '%s': %s", rank, job->program, strerror(err));
        code = RUN_EXIT_NOEXEC;
        goto out_close;
    }
    code = 0;

out_close:
    for (int i = 0; i < 2; i++) {
        if (out_pipe[i] >= 0)
            close(out_pipe[i]);
        if (err_pipe[i] >= 0)
            close(err_pipe[i]);
        if (exec_pipe[i] >= 0)
            close(exec_pipe[i]);
    }
    return code;
}

/* Write all of @iov to our stdout (0) or stderr (1); drop output if it fails. */
static void out_writev(run_job_t *job, int which, struct iovec *iov, int count)
{
    int fd = which ? STDERR_FILENO : STDOUT_FILENO;

    while (count > 0 && !job->out_dead[which]) {
        ssize_t n = writev(fd, iov, count);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) { /* someone made it non-blocking */
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                poll(&pfd, 1, 100);
                continue;
            }
            job->out_dead[which] = 1;
            return;
        }
        while (count > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            count--;
        }
        if (count > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
}

/*
 * Write the complete lines buffered in @s, each whole and prefixed.  A line
 * that fills the buffer goes out in pieces (prefixed once); at @eof a partial
 * last line goes out too, ended by a newline when prefixing.
 */
static void stream_flush(run_job_t *job, run_rank_t *r, run_stream_t *s, int eof)
{
    static char newline[] = "\n";
    struct iovec iov[RUN_IOV_MAX];
    size_t prefix_len = job->prefix ? r->prefix_len : 0;
    size_t start = 0;
    int count = 0;

    for (;;) {
        char *nl = memchr(s->buf + start, '\n', s->len - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - s->buf) + 1;
        if (prefix_len && !s->mid_line)
            iov[count++] = (struct iovec){r->prefix, prefix_len};
        iov[count++] = (struct iovec){s->buf + start, end - start};
        s->mid_line = 0;
        start = end;
        if (count > RUN_IOV_MAX - 2) {
            out_writev(job, s->out, iov, count);
            count = 0;
        }
    }
    if (start < s->len && (eof || (start == 0 && s->len == sizeof(s->buf)))) {
        if (prefix_len && !s->mid_line)
            iov[count++] = (struct iovec){r->prefix, prefix_len};
        iov[count++] = (struct iovec){s->buf + start, s->len - start};
        s->mid_line = 1;
        start = s->len;
    }
    if (eof && s->mid_line && prefix_len) {
        iov[count++] = (struct iovec){newline, 1};
        s->mid_line = 0;
    }
    if (count)
        out_writev(job, s->out, iov, count);
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

static void stream_read(run_job_t *job, run_rank_t *r, run_stream_t *s)
{
    ssize_t n = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);

    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        stream_flush(job, r, s, 1);
        close(s->fd);
        s->fd = -1;
        return;
    }
    s->len += (size_t)n;
    stream_flush(job, r, s, 0);
}

/*
 * Signal the whole job: each rank's process group, and each of our children
 * (the ranks, and any orphan of the job reparented to us as subreaper).
 * Every process gets @sig once: a rank counts the SIGTERMs it receives
 * (common/ckpt_signal.c: the first asks for a checkpoint and a stop, a
 * second means stop now), so a rank that its group's signal reached is not
 * signalled again by pid.
 */
static int job_signalled(const run_job_t *job, int pid)
{
    for (int i = 0; i < job->nstarted; i++) {
        if (job->ranks[i].pid == pid)
            return job->ranks[i].signalled;
    }
    return 0;
}

static void job_signal(run_job_t *job, int sig)
{
    for (int i = 0; i < job->nstarted; i++) {
        run_rank_t *r = &job->ranks[i];
        r->signalled = 0;
        if (r->group_gone)
            continue;
        if (kill(-r->pid, sig) == 0) {
            r->signalled = 1; /* the rank leads its group: it got it */
            continue;
        }
        if (errno == ESRCH && r->reaped)
            r->group_gone = 1;
        if (!r->reaped && kill(r->pid, sig) == 0) /* it never got its own group */
            r->signalled = 1;
    }

    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    int pid;
    while (fscanf(f, "%d", &pid) == 1) {
        if (pid > 0 && !job_signalled(job, pid))
            kill(pid, sig);
    }
    fclose(f);
}

static void job_stop(run_job_t *job, int sig)
{
    job->stopping = 1;
    job->stop_deadline = now_s() + job->grace_s;
    job_signal(job, sig);
}

static void job_kill(run_job_t *job)
{
    job->killed = 1;
    job->give_up_deadline = now_s() + RUN_REAP_S;
    job_signal(job, SIGKILL);
}

static int exit_code_of(int status)
{
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : RUN_EXIT_FAILURE;
}

static void rank_exited(run_job_t *job, int rank, int status)
{
    int code = exit_code_of(status);

    job->ranks[rank].reaped = 1;
    if (code == 0 || job->exit_code >= 0)
        return;
    job->exit_code = code;
    job->fail_rank = rank;
    job->fail_status = status;
    if (WIFSIGNALED(status))
        ember_error("run",
                    "rank %d (pid %d) killed by signal %d (%s): exit code %d; "
                    "stopping the job",
                    rank, (int)job->ranks[rank].pid, WTERMSIG(status), strsignal(WTERMSIG(status)),
                    code);
    else
        ember_error("run", "rank %d (pid %d) exited with code %d; stopping the job", rank,
                    (int)job->ranks[rank].pid, code);
    job_stop(job, SIGTERM);
}

/* Reap every child that exited: ranks and orphans of the job alike. */
static void job_reap(run_job_t *job)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int i = 0; i < job->nstarted; i++) {
                if (job->ranks[i].pid == pid) {
                    rank_exited(job, i, status);
                    break;
                }
            }
            continue;
        }
        if (pid < 0 && errno == EINTR)
            continue;
        job->have_children = pid == 0;
        break;
    }

    /* A reaped rank's group lives on while any process in it does. */
    for (int i = 0; i < job->nstarted; i++) {
        run_rank_t *r = &job->ranks[i];
        if (r->reaped && !r->group_gone && kill(-r->pid, 0) != 0 && errno == ESRCH)
            r->group_gone = 1;
    }
}

static int job_all_reaped(const run_job_t *job)
{
    for (int i = 0; i < job->nstarted; i++) {
        if (!job->ranks[i].reaped)
            return 0;
    }
    return 1;
}

static int job_tree_alive(const run_job_t *job)
{
    if (job->have_children)
        return 1;
    for (int i = 0; i < job->nstarted; i++) {
        if (!job->ranks[i].group_gone)
            return 1;
    }
    return 0;
}

static void job_handle_signals(run_job_t *job)
{
    char drain[64];

    while (read(sig_pipe[0], drain, sizeof(drain)) > 0)
        ;
    if (sig_count == job->sig_seen)
        return;
    job->sig_seen = sig_count;
    job->no_restart = 1;
    int sig = sig_last;
    if (job->exit_code < 0 && !job->stopping) {
        job->exit_code = 128 + sig;
        ember_error("run", "received %s: forwarding it to %d rank(s)", signal_name(sig),
                    job->nstarted);
        job_stop(job, sig);
    } else if (!job->killed) {
        ember_error("run", "received %s while stopping: killing the job", signal_name(sig));
        if (job->exit_code < 0)
            job->exit_code = 128 + sig;
        job_kill(job);
    }
}

static int poll_timeout_ms(const run_job_t *job, double job_deadline)
{
    double now = now_s(), next = now + 1.0; /* re-check at least every second */

    if (!job->stopping && job_deadline > 0 && job_deadline < next)
        next = job_deadline;
    if (job->stopping && !job->killed && job->stop_deadline < next)
        next = job->stop_deadline;
    if (job->killed && job->give_up_deadline < next)
        next = job->give_up_deadline;
    if (job->drain_deadline > 0 && job->drain_deadline < next)
        next = job->drain_deadline;
    if (next <= now)
        return 0;
    return (int)ceil((next - now) * 1000.0);
}

/* What job_loop polls: the signal pipe, then every rank's open streams. */
typedef struct {
    struct pollfd *fds; /* NULL: out of memory, the job is killed */
    run_stream_t **owners;
    run_rank_t **owner_ranks;
    size_t nfds;
    int open_streams;
} run_poll_t;

static void poll_set_alloc(run_job_t *job, run_poll_t *ps)
{
    size_t max_fds = 1 + 2 * (size_t)job->nstarted;

    ps->fds = calloc(max_fds, sizeof(*ps->fds));
    ps->owners = calloc(max_fds, sizeof(*ps->owners));
    ps->owner_ranks = calloc(max_fds, sizeof(*ps->owner_ranks));
    if (!ps->fds || !ps->owners || !ps->owner_ranks) {
        ember_error("run", "out of memory");
        if (job->exit_code < 0)
            job->exit_code = RUN_EXIT_FAILURE;
        job_kill(job);
    }
}

static void poll_set_free(run_poll_t *ps)
{
    free(ps->owner_ranks);
    free(ps->owners);
    free(ps->fds);
}

/* The job's course: done once every rank exited, stopped at its deadline,
 * killed when a stop outlasts its grace. */
static void job_advance(run_job_t *job, double job_deadline, double now)
{
    if (!job->stopping) {
        if (job_all_reaped(job)) {
            if (job->exit_code < 0)
                job->exit_code = 0;
            if (job_tree_alive(job)) /* leftovers of ranks that exited */
                job_stop(job, SIGTERM);
        } else if (job_deadline > 0 && now >= job_deadline) {
            job->exit_code = RUN_EXIT_TIMEOUT;
            job->no_restart = 1;
            ember_error("run", "job timed out after %g s: stopping %d rank(s)", job->timeout_s,
                        job->nstarted);
            job_stop(job, SIGTERM);
        }
    } else if (!job->killed && now >= job->stop_deadline && job_tree_alive(job)) {
        job_kill(job);
    }
}

static void poll_set_fill(run_job_t *job, run_poll_t *ps)
{
    ps->open_streams = 0;
    ps->nfds = 0;
    if (!ps->fds)
        return;
    ps->fds[ps->nfds++] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
    for (int i = 0; i < job->nstarted; i++) {
        for (int k = 0; k < 2; k++) {
            run_stream_t *s = &job->ranks[i].streams[k];
            if (s->fd < 0)
                continue;
            ps->owners[ps->nfds] = s;
            ps->owner_ranks[ps->nfds] = &job->ranks[i];
            ps->fds[ps->nfds++] = (struct pollfd){.fd = s->fd, .events = POLLIN};
            ps->open_streams++;
        }
    }
}

/* Non-zero when the loop ends: nothing of the job left and its output read
 * (or a pipe held past RUN_DRAIN_S), or processes that survive SIGKILL. */
static int job_finished(run_job_t *job, int open_streams, double now)
{
    if (job_all_reaped(job) && !job_tree_alive(job)) {
        if (!open_streams)
            return 1;
        /* A pipe held open by something outside the job: bounded wait. */
        if (job->drain_deadline == 0)
            job->drain_deadline = now + RUN_DRAIN_S;
        else if (now >= job->drain_deadline)
            return 1;
    }
    if (job->killed && now >= job->give_up_deadline) {
        ember_error("run",
                    "processes of the job survive SIGKILL after %.0f s; "
                    "giving up on them (and on restarts)",
                    RUN_REAP_S);
        job->no_restart = 1;
        return 1;
    }
    return 0;
}

/* Wait for a signal, output or the next deadline, and take what came. */
static void poll_once(run_job_t *job, run_poll_t *ps, double job_deadline)
{
    int ready = poll(ps->fds, ps->nfds, poll_timeout_ms(job, job_deadline));
    if (ready < 0) {
        if (errno != EINTR) {
            ember_error("run", "poll: %s", strerror(errno));
            usleep(100 * 1000);
        }
        return;
    }
    if (ps->fds[0].revents)
        job_handle_signals(job);
    for (size_t i = 1; i < ps->nfds; i++) {
        if (ps->fds[i].revents)
            stream_read(job, ps->owner_ranks[i], ps->owners[i]);
    }
}

/* Whatever is still buffered (a pipe that never reached EOF). */
static void streams_flush_rest(run_job_t *job)
{
    for (int i = 0; i < job->nstarted; i++) {
        for (int k = 0; k < 2; k++) {
            run_stream_t *s = &job->ranks[i].streams[k];
            if (s->fd >= 0) {
                stream_flush(job, &job->ranks[i], s, 1);
                close(s->fd);
                s->fd = -1;
            }
        }
    }
}

static void job_loop(run_job_t *job)
{
    run_poll_t ps;
    double job_deadline = job->deadline;

    poll_set_alloc(job, &ps);
    for (;;) {
        job_reap(job);
        double now = now_s();
        job_advance(job, job_deadline, now);
        poll_set_fill(job, &ps);
        if (job_finished(job, ps.open_streams, now))
            break;
        if (!ps.fds) {
            usleep(100 * 1000);
            continue;
        }
        poll_once(job, &ps, job_deadline);
    }
    streams_flush_rest(job);
    poll_set_free(&ps);
}

/* Keep fds 0-2 taken, so that no pipe of ours lands on them. */
static void std_fds_ensure(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int null_fd = open("/dev/null", O_RDWR);
            if (null_fd >= 0 && null_fd != fd)
                close(null_fd);
        }
    }
}

/* PROGRAM ARGS without any --resume (either form), then --resume @dir. */
static char **argv_with_resume(char **args, char *dir)
{
    static char resume_flag[] = "--resume";
    size_t n = 0, k = 0;

    while (args[n])
        n++;
    char **out = calloc(n + 3, sizeof(*out));
    if (!out)
        return NULL;
    out[k++] = args[0];
    for (size_t i = 1; i < n; i++) {
        if (strcmp(args[i], "--resume") == 0)
            i++; /* and its value */
        else if (strncmp(args[i], "--resume=", 9) != 0)
            out[k++] = args[i];
    }
    out[k++] = resume_flag;
    out[k++] = dir;
    out[k] = NULL;
    return out;
}

/* "rank R was killed by SIGX" or "rank R exited with code C". */
static void failure_describe(const run_job_t *job, char *buf, size_t length)
{
    int status = job->fail_status;

    if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        if (abbrev)
            snprintf(buf, length, "rank %d was killed by SIG%s", job->fail_rank, abbrev);
        else
            snprintf(buf, length, "rank %d was killed by signal %d", job->fail_rank,
                     WTERMSIG(status));
    } else {
        snprintf(buf, length, "rank %d exited with code %d", job->fail_rank, exit_code_of(status));
    }
}

/* Where the next attempt starts (its arguments in job->attempt_argv), said in @buf. */
static int restart_point(run_job_t *job, char *buf, size_t length)
{
    const char *dir = job->checkpoint_dir;

    if (!dir) {
        snprintf(buf, length, "from the start (no --checkpoint-dir)");
        return 0;
    }
    if (!ember_ckpt_exists(dir)) {
        snprintf(buf, length, "from the start (no checkpoint in %s yet)", dir);
        return 0;
    }
    char **args = argv_with_resume(job->argv, job->checkpoint_dir);
    if (!args) {
        ember_error("run", "out of memory for the arguments of a restart");
        return -1;
    }
    if (job->attempt_argv != job->argv)
        free(job->attempt_argv);
    job->attempt_argv = args;
    snprintf(buf, length, "from the latest checkpoint in %s", dir);
    return 0;
}

/* After an attempt: whether to start another (the line saying so printed). */
static int restart_prepare(run_job_t *job)
{
    char what[96], from[PATH_MAX + 64];

    if (job->no_restart || job->fail_rank < 0 || job->max_restarts == 0)
        return 0;
    failure_describe(job, what, sizeof(what));
    if (job->restarts >= job->max_restarts) {
        fprintf(stderr, "ember-run: %s; no restart left (%d done)\n", what, job->restarts);
        return 0;
    }
    if (restart_point(job, from, sizeof(from)) != 0)
        return 0;
    job->restarts++;
    fprintf(stderr, "ember-run: %s; restart %d of %d %s\n", what, job->restarts, job->max_restarts,
            from);
    fflush(stderr);
    return 1;
}

/* The restart delay: 0, or the exit code when a signal or the deadline comes first. */
static int restart_wait(run_job_t *job)
{
    double end = now_s() + job->restart_delay_s;
    char drain[64];

    for (;;) {
        double now = now_s(), next = end;
        if (job->deadline > 0 && now >= job->deadline) {
            ember_error("run", "job timed out after %g s, before restart %d", job->timeout_s,
                        job->restarts);
            return RUN_EXIT_TIMEOUT;
        }
        if (now >= end)
            return 0;
        if (job->deadline > 0 && job->deadline < next)
            next = job->deadline;
        struct pollfd pfd = {.fd = sig_pipe[0], .events = POLLIN};
        poll(&pfd, 1, (int)ceil((next - now) * 1000.0));
        while (read(sig_pipe[0], drain, sizeof(drain)) > 0)
            ;
        if (sig_count != job->sig_seen) {
            job->sig_seen = sig_count;
            ember_error("run", "received %s before restart %d: not restarting",
                        signal_name(sig_last), job->restarts);
            return 128 + sig_last;
        }
    }
}

/* Forget the last attempt's ranks (their pipes are closed, all reaped). */
static void attempt_reset(run_job_t *job)
{
    memset(job->ranks, 0, (size_t)job->nranks * sizeof(*job->ranks));
    job->nstarted = 0;
    job->exit_code = -1;
    job->fail_rank = -1;
    job->fail_status = 0;
    job->stopping = job->killed = job->have_children = 0;
    job->stop_deadline = job->give_up_deadline = job->drain_deadline = 0;
}

/* One attempt: start every rank, run the job to its end; its exit code. */
static int attempt_run(run_job_t *job)
{
    sigset_t old_mask;

    attempt_reset(job);
    if (env_init_setup(job) != 0) {
        job->no_restart = 1;
        return RUN_EXIT_FAILURE;
    }
    /* Signals wait until every rank exists, so a teardown sees them all. */
    signals_block(&old_mask);
    for (int i = 0; i < job->nranks; i++) {
        int code = spawn_rank(job, i, &old_mask);
        if (code != 0) {
            job->exit_code = code;
            job->no_restart = 1; /* it would fail the same way again */
            job_stop(job, SIGTERM);
            break;
        }
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    job_loop(job);
    return job->exit_code < 0 ? RUN_EXIT_FAILURE : job->exit_code;
}

/* Every attempt, until one ends without a restart; the last one's code. */
static int job_run(run_job_t *job)
{
    int code;

    job->deadline = job->timeout_s > 0 ? now_s() + job->timeout_s : 0;
    for (;;) {
        code = attempt_run(job);
        if (!restart_prepare(job))
            return code;
        int wait_code = restart_wait(job);
        if (wait_code != 0)
            return wait_code;
    }
}

/* What main needs before the first attempt; 0 or an exit code. */
static int job_prepare(run_job_t *job)
{
    job->ranks = calloc((size_t)job->nranks, sizeof(*job->ranks));
    if (!job->ranks) {
        ember_error("run", "out of memory for %d ranks", job->nranks);
        return RUN_EXIT_FAILURE;
    }
    job->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (job->devnull < 0) {
        ember_error("run", "opening /dev/null: %s", strerror(errno));
        return RUN_EXIT_FAILURE;
    }
    if (signals_setup() != 0)
        return RUN_EXIT_FAILURE;
    /* Orphans of the job become our children, so we can end and reap them. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        ember_warn("run",
                   "PR_SET_CHILD_SUBREAPER: %s; processes that leave "
                   "their rank's group may survive the job",
                   strerror(errno));
    return 0;
}

int main(int argc, char **argv)
{
    run_job_t *job = calloc(1, sizeof(*job));
    int code;

    std_fds_ensure();
    /* A bad EMBER_* value is refused once here, not by every rank. */
    if (ember_config_init() != EMBER_OK) {
        free(job);
        return RUN_EXIT_USAGE;
    }
    if (!job) {
        ember_error("run", "out of memory");
        return RUN_EXIT_FAILURE;
    }
    job->exit_code = -1;
    job->devnull = -1;
    code = parse_args(argc, argv, job);
    if (code == 0)
        code = resolve_program(job);
    if (code == 0)
        code = job_prepare(job);
    if (code == 0)
        code = env_setup(job) == 0 ? job_run(job) : RUN_EXIT_FAILURE;
    secret_remove(job);
    if (job->devnull >= 0)
        close(job->devnull);
    if (job->attempt_argv != job->argv)
        free(job->attempt_argv);
    free(job->ranks);
    free(job->program_path);
    free(job);
    return code;
}
