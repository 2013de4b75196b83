/*
 * ember: a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) prints
 * where it happened, a backtrace of `binary(+offset)` frames that
 * `addr2line -e binary offset` turns into lines, then dies of it as it
 * would have (the launcher reports the signal).  A rank that crashes on a
 * cluster then leaves more than "exit code 139".
 */
#include "common/crash.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void crash_write(const char *text)
{
    ssize_t rc = write(STDERR_FILENO, text, strlen(text));
    (void)rc;
}

static void crash_handler(int sig, siginfo_t *info, void *context)
{
    char line[160];
    void *frames[64];
    (void)context;
    snprintf(line, sizeof(line),
             "ember: pid %d caught signal %d (%s) at address %p; "
             "backtrace:\n",
             (int)getpid(), sig, strsignal(sig), info->si_addr);
    crash_write(line);
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    /* SA_RESETHAND restored the default action: die of it. */
    raise(sig);
}

void ember_crash_handler_install(void)
{
    static const int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    struct sigaction sa;
    void *warm[1];

    /* The first backtrace() loads libgcc: not inside a signal handler. */
    (void)backtrace(warm, 1);
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
        sigaction(signals[i], &sa, NULL);
}
