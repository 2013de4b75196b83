/* common/ckpt_signal: SIGUSR1/SIGTERM recorded for the job's loops. */
#include "common/ckpt_signal.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t requested;
static volatile sig_atomic_t terms;

static void on_signal(int signo)
{
    if (signo == SIGTERM) {
        /* The first asks for a checkpoint; a second means it now. */
        if (terms++) {
            signal(SIGTERM, SIG_DFL);
            raise(SIGTERM);
        }
        requested = EMBER_CKPT_SIGNAL_STOP;
    } else if (requested == EMBER_CKPT_SIGNAL_NONE) {
        requested = EMBER_CKPT_SIGNAL_SAVE;
    }
}

void ember_ckpt_signal_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int ember_ckpt_signal_take(void)
{
    return __atomic_exchange_n(&requested, EMBER_CKPT_SIGNAL_NONE, __ATOMIC_SEQ_CST);
}
