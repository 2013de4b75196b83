/*
 * bench/gpudirect_repro: the smallest program that does what crashed
 * (EMBER_GPUDIRECT=rdma under UCX 1.22: docs/PERFORMANCE.md): one process
 * sends UCX active messages by rendezvous to another, which receives each
 * straight into one buffer, in GPU memory (cudaMalloc), as ember's
 * trainers receive their lookup replies.  No ember code at all: UCX and
 * the CUDA runtime only, so a crash here is UCX's (or how it is asked).
 *
 *   gpudirect_repro [--mem cuda|host] [VARIANT...]     (all variants when none)
 *
 * Each variant runs in a child process of its own (the receiver, which
 * forks the sender), so a crash is reported as the variant and the signal
 * instead of ending the run; each message's data is copied back and
 * compared.  One line per variant on stdout:
 *   gpudirect_repro: mem=cuda variant=memh result=ok (4 sizes, 1 KiB..16 MiB)
 * --mem host: the same with host memory (malloc) where cuda would be, and
 * UCS_MEMORY_TYPE_HOST hints: the program itself, checked without a GPU.
 * UCX_TLS and the rest of UCX's environment are the caller's.
 * Exit: 0 every variant ok, 1 one failed or crashed, 77 --mem cuda without
 * a GPU, 2 usage.
 */
#include <cuda_runtime_api.h>
#include <ucp/api/ucp.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *name;
    const char *env_name, *env_value; /* set in the variant's processes */
    int memh;                         /* ucp_mem_map once, UCP_OP_ATTR_FIELD_MEMH every message */
    int hint;                         /* UCP_OP_ATTR_FIELD_MEMORY_TYPE (what ember passed) */
    int send_dev;                     /* the sender's buffer in device memory too (a push) */
    int alloc_first; /* the receive buffer allocated before ucp_init, as a trainer's
                      * CUDA device is opened before its transport: UCX's memory-type
                      * cache never saw the allocation */
    const char *what;
} variant_t;

static const variant_t variants[] = {
        {"hint", NULL, NULL, 0, 1, 0, 0, "memory-type hint, no registration (ember before)"},
        {"memh", NULL, NULL, 1, 1, 0, 0, "registered once, memh with every receive (ember now)"},
        {"memtype_cache_n", "UCX_MEMTYPE_CACHE", "n", 0, 1, 0, 0, "hint, UCX_MEMTYPE_CACHE=n"},
        {"dmabuf_no", "UCX_CUDA_COPY_DMABUF", "no", 0, 1, 0, 0, "hint, UCX_CUDA_COPY_DMABUF=no"},
        {"detect", NULL, NULL, 0, 0, 0, 0, "no hint, no registration: UCX detects"},
        {"push_memh", NULL, NULL, 1, 1, 1, 0, "both buffers in device memory, both registered"},
        {"early_hint", NULL, NULL, 0, 1, 0, 1, "hint, buffer allocated before ucp_init"},
        {"early_memh", NULL, NULL, 1, 1, 0, 1, "registered, buffer allocated before ucp_init"},
        {"early_cache_n", "UCX_MEMTYPE_CACHE", "n", 0, 1, 0, 1,
         "hint, allocated before ucp_init, UCX_MEMTYPE_CACHE=n"},
};
#define NVARIANTS (sizeof(variants) / sizeof(variants[0]))

static const size_t sizes[] = {1024, 65536, 1 << 20, 16 << 20};
#define NSIZES   (sizeof(sizes) / sizeof(sizes[0]))
#define MAX_SIZE (16 << 20)
#define AM_ID    7
#define TIMEOUT  30 /* seconds a variant may take */

/* Child exit codes (besides a signal). */
enum {
    RC_OK = 0,
    RC_DATA = 2,
    RC_EAGER = 3,
    RC_SETUP = 4,
    RC_SENDER = 5,
    RC_SENDER_SIGNAL = 6
};

static int use_cuda;

/* ---- memory: device or host ------------------------------------------------ */

static void *buf_alloc(int device, size_t n)
{
    void *p = NULL;
    if (device && use_cuda)
        return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
    return malloc(n);
}

static void buf_free(int device, void *p)
{
    if (device && use_cuda)
        cudaFree(p);
    else
        free(p);
}

static void pattern(uint8_t *host, size_t n, size_t seed)
{
    for (size_t i = 0; i < n; i++)
        host[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 12));
}

/* @n bytes of the pattern into @dst (device or host); 0 on success. */
static int buf_fill(int device, void *dst, size_t n, size_t seed, uint8_t *staging)
{
    pattern(device && use_cuda ? staging : dst, n, seed);
    if (device && use_cuda)
        return cudaMemcpy(dst, staging, n, cudaMemcpyHostToDevice) != cudaSuccess;
    return 0;
}

/* The first byte of @src that is not the pattern, or -1 (-2: copy failed). */
static long buf_check(int device, const void *src, size_t n, size_t seed, uint8_t *staging,
                      uint8_t *want)
{
    const uint8_t *got = src;
    if (device && use_cuda) {
        if (cudaMemcpy(staging, src, n, cudaMemcpyDeviceToHost) != cudaSuccess)
            return -2;
        got = staging;
    }
    pattern(want, n, seed);
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            return (long)i;
    return -1;
}

/* ---- UCX ---------------------------------------------------------------------- */

typedef struct {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_mem_h memh; /* the variant's buffer, where it registers */
} ucx_t;

static int ucx_open(ucx_t *u)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);

    if (st != UCS_OK)
        return -1;
    st = ucp_init(&params, config, &u->context);
    ucp_config_release(config);
    if (st != UCS_OK)
        return -1;
    return ucp_worker_create(u->context, &wparams, &u->worker) == UCS_OK ? 0 : -1;
}

static int ucx_map(ucx_t *u, void *buf, size_t n, int device)
{
    ucp_mem_map_params_t params = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                          UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
            .address = buf,
            .length = n,
            .memory_type = device && use_cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST};
    ucs_status_t st = ucp_mem_map(u->context, &params, &u->memh);
    if (st != UCS_OK)
        fprintf(stderr, "  ucp_mem_map of %zu bytes: %s\n", n, ucs_status_string(st));
    return st == UCS_OK ? 0 : -1;
}

static void ucx_close(ucx_t *u)
{
    if (u->memh)
        ucp_mem_unmap(u->context, u->memh);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->context)
        ucp_cleanup(u->context);
}

/* The variant's request parameters for @device memory. */
static void op_param(const variant_t *v, const ucx_t *u, int device, ucp_request_param_t *param)
{
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    param->datatype = ucp_dt_make_contig(1);
    if (v->hint) {
        param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        param->memory_type = device && use_cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    }
    if (v->memh && u->memh) {
        param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param->memh = u->memh;
    }
}

/* Progress until *@flag (0), or until the peer at the other end of @fd is
 * gone (-1: it closed its end, by exiting or dying); the deadline (alarm)
 * ends a process that hangs. */
static int progress_until(ucx_t *u, volatile int *flag, int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (unsigned n = 0; !*flag; n++) {
        ucp_worker_progress(u->worker);
        if (n % 1024 == 0 && poll(&p, 1, 0) > 0)
            return *flag ? 0 : -1;
    }
    return 0;
}

/* Progress until @fd is readable. */
static void progress_until_readable(ucx_t *u, int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 0) == 0)
        ucp_worker_progress(u->worker);
}

/* ---- the receiver ----------------------------------------------------------- */

typedef struct {
    ucx_t *u;
    const variant_t *v;
    void *buf;
    volatile int arrived, landed, eager;
    size_t length;
    ucs_status_t status;
} recv_state_t;

static void recv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    recv_state_t *s = user_data;
    s->status = status;
    s->length = length;
    s->landed = 1;
    ucp_request_free(request);
}

/* As ember's reply callback: the rendezvous data received at once, into the
 * buffer, and UCS_INPROGRESS returned (transport/rpc.c). */
static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    recv_state_t *s = arg;
    ucp_request_param_t rp = {.op_attr_mask =
                                      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                              .cb.recv_am = recv_done,
                              .user_data = s};
    (void)header;
    (void)header_length;
    s->arrived = 1;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        s->eager = 1;
        s->landed = 1;
        return UCS_OK;
    }
    op_param(s->v, s->u, 1, &rp);
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(s->u->worker, data, s->buf, length, &rp);
    if (req == NULL) {
        s->status = UCS_OK;
        s->length = length;
        s->landed = 1;
    } else if (UCS_PTR_IS_ERR(req)) {
        s->status = UCS_PTR_STATUS(req);
        s->landed = 1;
    }
    return UCS_INPROGRESS;
}

static int send_address(ucx_t *u, int sock)
{
    ucp_address_t *address;
    size_t length;
    if (ucp_worker_get_address(u->worker, &address, &length) != UCS_OK)
        return -1;
    int rc = write(sock, &length, sizeof(length)) == sizeof(length) &&
                             write(sock, address, length) == (ssize_t)length
                     ? 0
                     : -1;
    ucp_worker_release_address(u->worker, address);
    return rc;
}

/* Each size: wait for it, check it, tell the sender to go on. */
static int receive_all(recv_state_t *s, int sock, uint8_t *staging, uint8_t *want)
{
    for (size_t k = 0; k < NSIZES; k++) {
        if (progress_until(s->u, &s->landed, sock) != 0) {
            fprintf(stderr, "  the sender went away before %zu bytes landed\n", sizes[k]);
            return RC_SENDER;
        }
        if (s->eager) {
            fprintf(stderr, "  %zu bytes came eager, not by rendezvous\n", sizes[k]);
            return RC_EAGER;
        }
        long bad = buf_check(1, s->buf, sizes[k], k, staging, want);
        if (s->status != UCS_OK || s->length != sizes[k] || bad != -1) {
            fprintf(stderr, "  %zu bytes: %s, %zu landed, first wrong byte %ld\n", sizes[k],
                    ucs_status_string(s->status), s->length, bad);
            return RC_DATA;
        }
        s->arrived = s->landed = 0;
        char go = 1;
        if (write(sock, &go, 1) != 1)
            return RC_SENDER;
    }
    return RC_OK;
}

static int sender_run(const variant_t *v, int sock);

/* The child of one variant: fork the sender, receive, report by exit code. */
static int receiver_run(const variant_t *v)
{
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
        return RC_SETUP;
    pid_t sender = fork();
    if (sender == 0) {
        /* Ends with the receiver, whatever becomes of it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(TIMEOUT);
        close(fds[0]);
        _exit(sender_run(v, fds[1]));
    }
    close(fds[1]);
    ucx_t u = {0};
    recv_state_t s = {.u = &u, .v = v};
    uint8_t *staging = malloc(MAX_SIZE), *want = malloc(MAX_SIZE);
    ucp_am_handler_param_t h = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                              UCP_AM_HANDLER_PARAM_FIELD_CB |
                                              UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                .id = AM_ID,
                                .cb = am_cb,
                                .arg = &s};
    int rc = RC_SETUP;
    if (v->alloc_first)
        s.buf = buf_alloc(1, MAX_SIZE);
    if (sender > 0 && staging && want && (s.buf || !v->alloc_first) && ucx_open(&u) == 0 &&
        (s.buf || (s.buf = buf_alloc(1, MAX_SIZE)) != NULL) &&
        (!v->memh || ucx_map(&u, s.buf, MAX_SIZE, 1) == 0) &&
        ucp_worker_set_am_recv_handler(u.worker, &h) == UCS_OK && send_address(&u, fds[0]) == 0)
        rc = receive_all(&s, fds[0], staging, want);
    int status = 0;
    close(fds[0]);
    if (sender > 0 && waitpid(sender, &status, 0) == sender) {
        if (WIFSIGNALED(status)) {
            fprintf(stderr, "  the sender died: %s\n", strsignal(WTERMSIG(status)));
            rc = RC_SENDER_SIGNAL;
        } else if (rc == RC_OK && WEXITSTATUS(status) != 0) {
            fprintf(stderr, "  the sender exited %d\n", WEXITSTATUS(status));
            rc = RC_SENDER;
        }
    }
    ucx_close(&u);
    buf_free(1, s.buf);
    free(staging);
    free(want);
    return rc;
}

/* ---- the sender ---------------------------------------------------------------- */

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    *(ucs_status_t *)user_data = status;
    (void)request;
}

/* One rendezvous message of @n bytes from @buf; 0 when it left whole. */
static int send_one(const variant_t *v, ucx_t *u, ucp_ep_h ep, void *buf, size_t n)
{
    ucs_status_t status = UCS_INPROGRESS;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                 UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_FLAGS,
                                 .cb.send = send_done,
                                 .user_data = &status,
                                 .flags = UCP_AM_SEND_FLAG_RNDV};
    op_param(v, u, v->send_dev, &param);
    ucs_status_ptr_t req = ucp_am_send_nbx(ep, AM_ID, NULL, 0, buf, n, &param);
    if (UCS_PTR_IS_ERR(req))
        return -1;
    if (req != NULL) {
        while (status == UCS_INPROGRESS)
            ucp_worker_progress(u->worker);
        ucp_request_free(req);
    }
    return req == NULL || status == UCS_OK ? 0 : -1;
}

static ucp_ep_h connect_to(ucx_t *u, int sock)
{
    size_t length;
    ucp_ep_h ep = NULL;
    if (read(sock, &length, sizeof(length)) != sizeof(length) || length > 65536)
        return NULL;
    void *address = malloc(length);
    if (address && read(sock, address, length) == (ssize_t)length) {
        ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                  .address = address};
        if (ucp_ep_create(u->worker, &params, &ep) != UCS_OK)
            ep = NULL;
    }
    free(address);
    return ep;
}

static void ep_close(ucx_t *u, ucp_ep_h ep)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (req && !UCS_PTR_IS_ERR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS)
            ucp_worker_progress(u->worker);
        ucp_request_free(req);
    }
}

static int sender_run(const variant_t *v, int sock)
{
    ucx_t u = {0};
    uint8_t *staging = malloc(MAX_SIZE);
    void *buf = NULL;
    ucp_ep_h ep = NULL;
    int rc = RC_SETUP;
    if (staging && ucx_open(&u) == 0 && (buf = buf_alloc(v->send_dev, MAX_SIZE)) != NULL &&
        (!v->memh || !v->send_dev || ucx_map(&u, buf, MAX_SIZE, 1) == 0) &&
        (ep = connect_to(&u, sock)) != NULL) {
        rc = RC_OK;
        for (size_t k = 0; k < NSIZES && rc == RC_OK; k++) {
            char go;
            if (buf_fill(v->send_dev, buf, sizes[k], k, staging) != 0 ||
                send_one(v, &u, ep, buf, sizes[k]) != 0) {
                fprintf(stderr, "  sending %zu bytes failed\n", sizes[k]);
                rc = RC_SENDER;
                break;
            }
            progress_until_readable(&u, sock);
            if (read(sock, &go, 1) != 1)
                rc = RC_SENDER;
        }
        ep_close(&u, ep);
    }
    ucx_close(&u);
    buf_free(v->send_dev, buf);
    free(staging);
    return rc;
}

/* ---- the parent: one child per variant -------------------------------------- */

static int run_variant(const variant_t *v, const char *mem)
{
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        alarm(TIMEOUT);
        if (v->env_name)
            setenv(v->env_name, v->env_value, 1);
        _exit(receiver_run(v));
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child)
        return 1;
    static const char *const codes[] = {[RC_OK] = "ok",
                                        [RC_DATA] = "FAILED (wrong data or status)",
                                        [RC_EAGER] = "FAILED (came eager)",
                                        [RC_SETUP] = "FAILED (UCX or memory set-up)",
                                        [RC_SENDER] = "FAILED (the sender)",
                                        [RC_SENDER_SIGNAL] = "CRASHED (in the sender)"};
    char result[96];
    if (WIFSIGNALED(status))
        snprintf(result, sizeof(result), "CRASHED (%s%s)", strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == SIGALRM ? ": hung past the deadline" : "");
    else if (WEXITSTATUS(status) < (int)(sizeof(codes) / sizeof(codes[0])) &&
             codes[WEXITSTATUS(status)])
        snprintf(result, sizeof(result), "%s", codes[WEXITSTATUS(status)]);
    else
        snprintf(result, sizeof(result), "FAILED (exit %d)", WEXITSTATUS(status));
    printf("gpudirect_repro: mem=%s variant=%s result=%s (%zu sizes, 1 KiB..16 MiB; %s)\n", mem,
           v->name, result, NSIZES, v->what);
    return !(WIFEXITED(status) && WEXITSTATUS(status) == RC_OK);
}

/* UCX's versions and whether it supports CUDA memory (a context of its own,
 * in a child: neither UCX nor CUDA is initialised in the process that forks
 * the variants). */
static void describe_ucx(void)
{
    fflush(stdout);
    pid_t child = fork();
    if (child != 0) {
        waitpid(child, NULL, 0);
        return;
    }
    unsigned major, minor, release;
    ucx_t u = {0};
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    ucp_get_version(&major, &minor, &release);
    int cuda = ucx_open(&u) == 0 && ucp_context_query(u.context, &attr) == UCS_OK &&
               (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    ucx_close(&u);
    const char *tls = getenv("UCX_TLS");
    printf("gpudirect_repro: UCX library %u.%u.%u, headers %d.%d, CUDA memory %s, UCX_TLS=%s\n",
           major, minor, release, UCP_API_MAJOR, UCP_API_MINOR, cuda ? "yes" : "no",
           tls ? tls : "(all)");
    fflush(stdout);
    _exit(0);
}

static const variant_t *variant_named(const char *name)
{
    for (size_t i = 0; i < NVARIANTS; i++)
        if (strcmp(variants[i].name, name) == 0)
            return &variants[i];
    return NULL;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "gpudirect_repro: %s\nusage: gpudirect_repro [--mem cuda|host] [VARIANT...]\n"
            "variants:",
            why);
    for (size_t i = 0; i < NVARIANTS; i++)
        fprintf(stderr, " %s", variants[i].name);
    fprintf(stderr, "\n");
    return 2;
}

int main(int argc, char **argv)
{
    int first = 1, failed = 0, count = 0;
    const char *mem = "cuda";
    if (argc >= 3 && strcmp(argv[1], "--mem") == 0) {
        mem = argv[2];
        first = 3;
    }
    if (strcmp(mem, "cuda") != 0 && strcmp(mem, "host") != 0)
        return usage("--mem takes cuda or host");
    for (int i = first; i < argc; i++)
        if (!variant_named(argv[i]))
            return usage("unknown variant");
    use_cuda = strcmp(mem, "cuda") == 0;
    if (use_cuda) {
        /* Asked in a child: CUDA initialised before fork is unusable after. */
        pid_t probe = fork();
        if (probe == 0) {
            int n = 0;
            _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 77);
        }
        int status = 0;
        if (probe < 0 || waitpid(probe, &status, 0) != probe || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            printf("gpudirect_repro: mem=cuda: no CUDA GPU visible: skipped\n");
            return 77;
        }
    }
    describe_ucx();
    for (size_t i = 0; i < NVARIANTS; i++) {
        int wanted = first == argc;
        for (int j = first; j < argc; j++)
            wanted |= strcmp(argv[j], variants[i].name) == 0;
        if (wanted) {
            failed += run_variant(&variants[i], mem);
            count++;
        }
    }
    printf("gpudirect_repro: mem=%s: %d of %d variants ok\n", mem, count - failed, count);
    return failed ? 1 : 0;
}
