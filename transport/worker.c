/*
 * transport/worker: the UCX context and worker, and the progress engine.
 *
 * Whoever waits drives progress: spin (tp_spin_window), then arm the worker
 * and sleep on its event fd until traffic or the next deadline.  The spin is
 * long only where every rank of the host has a CPU of its own; several ranks
 * sharing two cores on a workstation must not spin for long.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "common/clock.h"
#include "common/log_limit.h"
#include "transport/tp_internal.h"

#include <ember/config.h>
#include <ember/log.h>
#include <ucs/debug/log_def.h> /* ucs_log_push_handler: in UCX 1.13 and 1.22 alike */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ember_status_t tp_status_from_ucs(ucs_status_t status)
{
    switch (status) {
    case UCS_OK: return EMBER_OK;
    case UCS_INPROGRESS: return EMBER_INPROGRESS;
    case UCS_ERR_NO_MEMORY: return EMBER_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM: return EMBER_ERR_INVALID_PARAM;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT: return EMBER_ERR_TIMED_OUT;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED: return EMBER_ERR_PEER_LOST;
    case UCS_ERR_CANCELED: return EMBER_ERR_CANCELED;
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_EXCEEDS_LIMIT: return EMBER_ERR_MSG_TOO_LONG;
    case UCS_ERR_UNSUPPORTED: return EMBER_ERR_UNSUPPORTED;
    default: return EMBER_ERR_TRANSPORT;
    }
}

int tp_tls_may_use_tcp(const char *tls)
{
    if (!tls || !*tls)
        return 1;
    if (tls[0] == '^') /* a list of what to leave out */
        return strstr(tls, "tcp") == NULL;
    return strstr(tls, "tcp") != NULL || strstr(tls, "all") != NULL;
}

static ember_status_t set_ucp_option(ucp_config_t *config, const char *name, const char *value)
{
    ucs_status_t status = ucp_config_modify(config, name, value);
    if (status != UCS_OK) {
        ember_error("tp", "UCX rejected %s=%s: %s", name, value, ucs_status_string(status));
        return tp_status_from_ucs(status);
    }
    return EMBER_OK;
}

/* A failed UCX call is logged once, here, naming the call. */
static ember_status_t check_ucs_call(ucs_status_t status, const char *call)
{
    if (status == UCS_OK)
        return EMBER_OK;
    ember_error("tp", "%s: %s", call, ucs_status_string(status));
    return tp_status_from_ucs(status);
}

/* UCX's tcp sends an eager message in segments of 8 KiB by default, a
 * system call each: 64 KiB ones take ember's eager messages in one. */
static void set_tcp_segment(ucp_config_t *config, const char *tls)
{
    size_t tcp_seg = ember_config_size("EMBER_TCP_SEG_SIZE");
    const char *ucx_tls = tls && *tls ? tls : getenv("UCX_TLS");
    char value[32];

    if (!tcp_seg || getenv("UCX_TCP_TX_SEG_SIZE") || !tp_tls_may_use_tcp(ucx_tls))
        return;
    /* tcp's own name in UCX 1.13; 1.22 refuses it (more of its transports
     * have one) and takes the prefixed name.  Only a speed-up: a UCX that
     * takes neither runs with its own segments. */
    snprintf(value, sizeof(value), "%zu", tcp_seg);
    if (ucp_config_modify(config, "TX_SEG_SIZE", value) != UCS_OK &&
        ucp_config_modify(config, "TCP_TX_SEG_SIZE", value) != UCS_OK)
        ember_warn("tp",
                   "this UCX takes no tcp segment size (EMBER_TCP_SEG_SIZE=%s "
                   "ignored)",
                   value);
}

/* UCX's configuration (UCX_* and EMBER_* of its own) with ember's
 * settings on top. */
static ember_status_t set_ucp_options(ucp_config_t *config)
{
    const char *tls = ember_config_str("EMBER_TLS");
    char keepalive[32];

    /* Dead peers must be noticed quickly, on shared memory too. */
    snprintf(keepalive, sizeof(keepalive), "%.0fms",
             ember_config_double("EMBER_KEEPALIVE") * 1000.0);
    EMBER_CHECK(set_ucp_option(config, "KEEPALIVE_INTERVAL", keepalive));
    if (tls && *tls)
        EMBER_CHECK(set_ucp_option(config, "TLS", tls));
    set_tcp_segment(config, tls);
    return EMBER_OK;
}

static ember_status_t context_create(ember_tp_t *tp, ucp_config_t *config)
{
    ucp_params_t params = {0};

    params.field_mask =
            UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    params.name = "ember";
    return check_ucs_call(ucp_init(&params, config, &tp->context), "ucp_init");
}

ember_status_t tp_ucx_version_check(unsigned lib_major, unsigned lib_minor, unsigned hdr_major,
                                    unsigned hdr_minor, char *why, size_t why_length)
{
    if (lib_major == hdr_major && lib_minor == hdr_minor)
        return EMBER_OK;
    snprintf(why, why_length,
             "UCX library %u.%u, but ember was built with UCX %u.%u's headers: build against "
             "the UCX it runs with (cmake -DEMBER_UCX_ROOT=PREFIX) or run with the one it was "
             "built with (LD_LIBRARY_PATH)",
             lib_major, lib_minor, hdr_major, hdr_minor);
    return EMBER_ERR_UNSUPPORTED;
}

/* Refused, not warned about: the structures ember hands UCX (request and
 * receive parameters) and the behaviour it was tested with are those of its
 * headers' version, and the one crash on record inside UCX (GPUDirect,
 * docs/PERFORMANCE.md) ran 1.22's library under 1.13's headers. */
static ember_status_t ucx_version_match(void)
{
    unsigned major, minor, release;
    char why[256];

    ucp_get_version(&major, &minor, &release);
    ember_status_t status =
            tp_ucx_version_check(major, minor, UCP_API_MAJOR, UCP_API_MINOR, why, sizeof(why));
    if (status != EMBER_OK)
        ember_error("tp", "%s", why);
    return status;
}

/* ---- UCX's log, as ember's ---------------------------------------------- */

static ember_log_level_t ucx_level_as_ember(ucs_log_level_t level)
{
    switch (level) {
    case UCS_LOG_LEVEL_FATAL: return EMBER_LOG_FATAL;
    case UCS_LOG_LEVEL_ERROR: return EMBER_LOG_ERROR;
    case UCS_LOG_LEVEL_WARN: return EMBER_LOG_WARN;
    case UCS_LOG_LEVEL_DIAG:
    case UCS_LOG_LEVEL_INFO:
    case UCS_LOG_LEVEL_PRINT: return EMBER_LOG_INFO;
    case UCS_LOG_LEVEL_DEBUG: return EMBER_LOG_DEBUG;
    default: return EMBER_LOG_TRACE;
    }
}

/* Whether a UCX line that UCX_LOG_LEVEL let through shows: UCX_LOG_LEVEL
 * set above warn (its default) asks for those lines and is obeyed;
 * otherwise EMBER_LOG_LEVEL quiets UCX's warnings and errors as ember's. */
static int ucx_line_shows(ucs_log_level_t level, const ucs_log_component_config_t *component)
{
    if (level != UCS_LOG_LEVEL_PRINT && level > component->log_level)
        return 0; /* a component's line its own level leaves out */
    if (component->log_level > UCS_LOG_LEVEL_WARN && level > UCS_LOG_LEVEL_WARN)
        return 1;
    return ucx_level_as_ember(level) <= ember_log_level();
}

/*
 * Every line UCX logs, as an ember line `[ucx] LEVEL file.c:LINE text` on
 * stderr (UCX's own handler writes to stdout, unlimited).  An outsider can
 * make UCX warn once per message it sends (an active message for an id
 * with no handler: 67 MB of log in one job), so lines down to UCX's info
 * are limited per UCX call site (log_limit.h); debug and trace lines, which
 * someone asked for, are not.  Lines at UCX_LOG_LEVEL_TRIGGER or worse go
 * on to UCX's handler too: they are UCX's error handling (a backtrace, a
 * debugger), not just a line.
 */
static ucs_log_func_rc_t ucx_log_line(const char *file, unsigned line, const char *function,
                                      ucs_log_level_t level,
                                      const ucs_log_component_config_t *component,
                                      const char *format, va_list ap)
{
    char text[EMBER_LOG_LIMIT_LINE];
    const char *name = strrchr(file, '/');

    (void)function;
    if (level <= ucs_global_opts.log_level_trigger)
        return UCS_LOG_FUNC_RC_CONTINUE;
    if (!ucx_line_shows(level, component))
        return UCS_LOG_FUNC_RC_STOP;
    name = name ? name + 1 : file;
    vsnprintf(text, sizeof(text), format, ap);
    for (char *c = text; *c; c++)
        if (*c == '\n')
            *c = ' '; /* one line a message */
    ember_log_level_t ours = ucx_level_as_ember(level);
    if (level > UCS_LOG_LEVEL_INFO && level != UCS_LOG_LEVEL_PRINT)
        ember_log_emit(ours, "ucx", "%s:%u %s", name, line, text);
    else
        ember_log_limited(file, line, ours, "ucx", "%s:%u %s", name, line, text);
    return UCS_LOG_FUNC_RC_STOP;
}

static void ucx_log_route(void)
{
    ucs_log_push_handler(ucx_log_line);
}

/* The context, from UCX's configuration with ember's settings. */
static ember_status_t context_open(ember_tp_t *tp)
{
    static pthread_once_t routed = PTHREAD_ONCE_INIT;
    ucp_config_t *config;
    ember_status_t status;

    EMBER_CHECK(ucx_version_match());
    /* Before UCX reads its configuration: its warnings about it are ours. */
    pthread_once(&routed, ucx_log_route);
    EMBER_CHECK(check_ucs_call(ucp_config_read("EMBER", NULL, &config), "ucp_config_read"));
    status = set_ucp_options(config);
    if (status == EMBER_OK)
        status = context_create(tp, config);
    ucp_config_release(config);
    return status;
}

/* The worker, whether small messages' heads fit inline, and its event fd. */
static ember_status_t worker_open(ember_tp_t *tp)
{
    ucp_worker_params_t worker_params = {0};

    worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
    EMBER_CHECK(check_ucs_call(ucp_worker_create(tp->context, &worker_params, &tp->worker),
                               "ucp_worker_create"));
    /* The inline part of a message needs room in the AM header. */
    ucp_worker_attr_t attr = {.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER};
    if (ucp_worker_query(tp->worker, &attr) == UCS_OK &&
        attr.max_am_header >= sizeof(tp_header_t) + TP_INLINE_MAX)
        tp->inline_max = TP_INLINE_MAX;
    ember_debug("tp", "AM header room %zu bytes: small message heads %s",
                (size_t)attr.max_am_header, tp->inline_max ? "ride inline" : "do not fit");
    return check_ucs_call(ucp_worker_get_efd(tp->worker, &tp->efd), "ucp_worker_get_efd");
}

/*
 * Every AM id ember does not use gets UCX's "no handler" entry (a NULL
 * callback), the last one first.  UCX 1.13.1 reads a received id's entry
 * before it checks the id against its table (ucp_am_handler_common), and
 * leaves the entries its table grows by uninitialised: one active message
 * with a large id from anyone who can reach the worker crashed a rank
 * (SIGSEGV, the am_flood test), one with an id just past ember's could
 * call whatever the new memory held.  With every id's entry written, an
 * unknown id only makes UCX warn (a limited line, ucx_log_line).  The
 * table costs 65536 entries of 24 bytes and about 5 ms: only where it is
 * needed, before UCX 1.21 (which checks the id first, commit 6fa1faf).
 */
static ember_status_t am_ids_cover_all(ember_tp_t *tp)
{
    unsigned major, minor, release;
    ucp_get_version(&major, &minor, &release);
    if (major > 1 || minor >= 21)
        return EMBER_OK;
    ucp_am_handler_param_t none = {
            .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
            .id = UINT16_MAX,
            .cb = NULL,
    };
    ucs_status_t status = ucp_worker_set_am_recv_handler(tp->worker, &none);
    for (unsigned id = TP_AM_COUNT; status == UCS_OK && id < UINT16_MAX; id++) {
        none.id = id;
        status = ucp_worker_set_am_recv_handler(tp->worker, &none);
    }
    return check_ucs_call(status, "ucp_worker_set_am_recv_handler (the unused ids)");
}

static ember_status_t am_handlers_set(ember_tp_t *tp)
{
    static const ucp_am_recv_callback_t callbacks[TP_AM_COUNT] = {
            [TP_AM_REQUEST] = tp_am_request_cb,
            [TP_AM_REPLY] = tp_am_reply_cb,
            [TP_AM_HELLO] = tp_am_hello_cb,
            [TP_AM_CHALLENGE] = tp_am_challenge_cb,
            [TP_AM_REPLY_BATCH] = tp_am_reply_batch_cb,
            [TP_AM_CALL_BATCH] = tp_am_call_batch_cb,
            [TP_AM_CONFIRM] = tp_am_confirm_cb,
            [TP_AM_ACCEPT] = tp_am_accept_cb,
    };

    for (unsigned id = 0; id < TP_AM_COUNT; id++) {
        /* Requests wait for tp_run_handlers, so UCX must keep their data;
         * replies and batches are copied out (or received by rendezvous,
         * which needs no flag) inside the callback.  With PERSISTENT_DATA
         * UCX would first copy every message it holds in its own buffers
         * (all of tcp's, the shared-memory FIFO's inline ones) into one of
         * its descriptors. */
        int keeps = id == TP_AM_REQUEST; /* the handshake's are copied too */
        ucp_am_handler_param_t handler = {
                .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                              UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                .id = id,
                .cb = callbacks[id],
                .arg = tp,
                .flags = UCP_AM_FLAG_WHOLE_MSG | (keeps ? UCP_AM_FLAG_PERSISTENT_DATA : 0),
        };
        ucs_status_t status = ucp_worker_set_am_recv_handler(tp->worker, &handler);
        if (status != UCS_OK) {
            ember_error("tp", "ucp_worker_set_am_recv_handler(%u): %s", id,
                        ucs_status_string(status));
            return tp_status_from_ucs(status);
        }
    }
    return am_ids_cover_all(tp);
}

ember_status_t tp_worker_create(ember_tp_t *tp)
{
    ember_status_t status;

    EMBER_CHECK(context_open(tp));
    EMBER_CHECK_GOTO(worker_open(tp), status, err_destroy);
    EMBER_CHECK_GOTO(am_handlers_set(tp), status, err_destroy);
    return EMBER_OK;

err_destroy:
    tp_worker_destroy(tp);
    return status;
}

void tp_worker_destroy(ember_tp_t *tp)
{
    if (tp->worker)
        ucp_worker_destroy(tp->worker);
    if (tp->context)
        ucp_cleanup(tp->context);
    tp->worker = NULL;
    tp->context = NULL;
    /* What a flood's limited lines left uncounted, now rather than at exit
     * (which a rank ended by _exit or a signal never reaches). */
    ember_log_limited_summary();
}

unsigned tp_progress_once(ember_tp_t *tp)
{
    unsigned events = 0;
    double now;

    /* Calls held for a batch (ember_rpc_batch_begin) leave before we look
     * for their answers; a handler run's replies leave when it ends. */
    if (tp->deferred_peers && !tp->handler_depth)
        tp_batch_flush_all(tp);
    while (ucp_worker_progress(tp->worker))
        events++;
    if (!tp_list_empty(&tp->acks)) {
        tp_send_acks(tp);
        events++;
    }
    if (tp->peer_events) {
        tp_endpoints_sweep(tp);
        events++;
    }
    if (!tp_list_empty(&tp->ready)) {
        tp_run_handlers(tp);
        events++;
    }
    tp->event_total += events;
    if (!tp->pending_count && !tp->watched_peers)
        return events; /* nothing timed: skip the clock */
    now = ember_time_coarse();
    if (tp->pending_count && now >= tp->next_deadline_check)
        tp_check_deadlines(tp, now);
    if (tp->watched_peers && now >= tp->next_liveness_check)
        tp_check_liveness(tp, now);
    return events;
}

#define SPIN_DEDICATED_S 1000e-6
#define SPIN_SHARED_S    20e-6

/*
 * How long a waiter polls before sleeping (EMBER_SPIN_US, else chosen
 * here).  With a CPU for every rank on this host, a long spin keeps a
 * waiter off the sleep/wake path, which a large allreduce would otherwise
 * take once per segment (each segment outlasts a short spin); when ranks
 * share CPUs, spinning takes the very core the awaited peer needs, so the
 * window stays short.
 */
double tp_spin_window(const ember_tp_t *tp)
{
    const char *text = ember_config_str("EMBER_SPIN_US");
    if (text)
        return ember_config_double("EMBER_SPIN_US") * 1e-6;
    int local = 0;
    for (int r = 0; r < tp->world_size; r++)
        local += r == tp->rank || strcmp(tp->peers[r].host, tp->host) == 0;
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    double spin = local <= cpus ? SPIN_DEDICATED_S : SPIN_SHARED_S;
    ember_debug("tp", "%d rank(s) on %s, %d CPU(s): waiters spin %.0f us", local, tp->host, cpus,
                spin * 1e6);
    return spin;
}

/*
 * Nothing happened: spin politely within the spin window (on an
 * oversubscribed node the peer we wait for may need this very core), else
 * arm the worker and sleep on its fd until traffic, @deadline or the next
 * timer of the transport.  Returns the new start of the idle period.
 */
static double tp_idle(ember_tp_t *tp, double now, double idle_since, double deadline)
{
    if (now - idle_since < tp->spin_s) {
        /* Busy-poll the first part of the window (a reply is usually that
         * close); yield in the rest. */
        if (now - idle_since > tp->spin_s / 4)
            sched_yield();
        return idle_since;
    }
    if (ucp_worker_arm(tp->worker) == UCS_ERR_BUSY)
        return idle_since;
    double wake = deadline;
    if (tp->pending_count && tp->next_deadline_check < wake)
        wake = tp->next_deadline_check;
    if (tp->watched_peers && tp->next_liveness_check < wake)
        wake = tp->next_liveness_check;
    /* Timers run on the coarse clock and may already be due: never a
     * negative (infinite) poll timeout. */
    int timeout_ms = wake > now ? (int)((wake - now) * 1000.0) + 1 : 0;
    if (timeout_ms > 1000)
        timeout_ms = 1000; /* bounded: flags set outside UCX get seen */
    struct pollfd pfd = {.fd = tp->efd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR)
        ember_warn("tp", "poll on the UCX event fd: %s", strerror(errno));
    /* After a wake-up, spin only briefly before sleeping again. */
    return ember_time_now() - tp->spin_s / 2;
}

/* The loop of both: @deadline absolute, or < 0 for @timeout_s from the
 * first idle pass (a wait that never idles reads no clock at all). */
static void progress_loop(ember_tp_t *tp, int (*done)(const void *arg), const void *arg,
                          double deadline, double timeout_s)
{
    double idle_since = 0.0;
    unsigned idle_passes = 0;

    /* A handler that waits after all: what it replied must not wait with it. */
    if (tp->deferred_peers)
        tp_batch_flush_all(tp);
    while (!done(arg)) {
        if (tp_progress_once(tp)) {
            idle_passes = 0;
            continue;
        }
        /* Reading the clock costs more than a poll on some machines: look
         * at it every few idle passes only. */
        if (idle_passes++ % 8 != 0)
            continue;
        double now = ember_time_now();
        if (idle_passes == 1)
            idle_since = now; /* the first idle pass after some activity */
        if (deadline < 0.0)
            deadline = now + timeout_s;
        if (now >= deadline)
            return;
        idle_since = tp_idle(tp, now, idle_since, deadline);
    }
}

void tp_progress_until(ember_tp_t *tp, int (*done)(const void *arg), const void *arg,
                       double deadline)
{
    progress_loop(tp, done, arg, deadline < 0.0 ? 0.0 : deadline, 0.0);
}

void tp_progress_for(ember_tp_t *tp, int (*done)(const void *arg), const void *arg,
                     double timeout_s)
{
    progress_loop(tp, done, arg, -1.0, timeout_s > 0.0 ? timeout_s : 0.0);
}

unsigned ember_tp_progress(ember_tp_t *tp)
{
    return tp_progress_once(tp);
}

double ember_tp_spin_us(const ember_tp_t *tp)
{
    return tp->spin_s * 1e6;
}

int ember_tp_pull_rendezvous(const ember_tp_t *tp)
{
    return tp->pull_rendezvous;
}

int tp_pull_rendezvous_config(void)
{
    /* UCX transports whose rendezvous the receiver drives (get_zcopy), and
     * ones that carry no rendezvous at all.  "sm" counts on CMA: where the
     * kernel refuses it (another user, a strict ptrace scope), UCX pushes
     * the payload through shared memory instead, as over tcp. */
    static const char *const pull[] = {"sm", "shm",  "cma",     "xpmem",    "knem",
                                       "rc", "rc_v", "rc_x",    "rc_verbs", "rc_mlx5",
                                       "dc", "dc_x", "dc_mlx5", "cuda_ipc"};
    static const char *const neutral[] = {"self", "cuda_copy", "gdr_copy"};
    const char *tls = ember_config_str("EMBER_TLS");
    char list[256], *save = NULL;
    int pulls = 0;

    if (!tls || !*tls)
        tls = getenv("UCX_TLS");
    if (!tls || !*tls || strlen(tls) >= sizeof(list))
        return 0; /* UCX's default list includes tcp */
    snprintf(list, sizeof(list), "%s", tls);
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int known = 0;
        for (size_t i = 0; i < sizeof(pull) / sizeof(pull[0]); i++)
            if (strcmp(name, pull[i]) == 0)
                known = pulls = 1;
        for (size_t i = 0; i < sizeof(neutral) / sizeof(neutral[0]); i++)
            known |= strcmp(name, neutral[i]) == 0;
        if (!known)
            return 0; /* tcp, ud, posix without cma, "all", "^...": not sure */
    }
    return pulls;
}

typedef struct {
    const ember_tp_t *tp;
    unsigned long events;
} tp_events_seen_t;

static int tp_something_happened(const void *arg)
{
    const tp_events_seen_t *seen = arg;
    return seen->tp->event_total != seen->events;
}

ember_status_t ember_tp_wait(ember_tp_t *tp, double timeout_s)
{
    tp_events_seen_t seen = {.tp = tp, .events = tp->event_total};
    tp_progress_for(tp, tp_something_happened, &seen, timeout_s);
    return EMBER_OK;
}
