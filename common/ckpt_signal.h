/*
 * common/ckpt_signal: SIGUSR1 and SIGTERM as requests for a checkpoint.
 *
 * A job that writes checkpoints (--checkpoint-dir) takes SIGUSR1 as "write
 * one now and go on" and SIGTERM (Slurm's preemption and scancel, the
 * launcher's teardown) as "write one and stop"; the handler only records
 * which came, and whoever loops (trainer, PS, master) takes it from there.
 * A second SIGTERM, when the first could not be honoured in time, ends the
 * process as SIGTERM does by default.
 */
#ifndef EMBER_COMMON_CKPT_SIGNAL_H
#define EMBER_COMMON_CKPT_SIGNAL_H

enum {
    EMBER_CKPT_SIGNAL_NONE = 0,
    EMBER_CKPT_SIGNAL_SAVE = 1, /* SIGUSR1 */
    EMBER_CKPT_SIGNAL_STOP = 2  /* SIGTERM */
};

/** Install the handlers (once per process). */
void ember_ckpt_signal_install(void);

/** The strongest request since the last call (EMBER_CKPT_SIGNAL_*), cleared. */
int ember_ckpt_signal_take(void);

#endif
