/* ember: a backtrace on a fatal signal (see crash.c). */
#ifndef EMBER_COMMON_CRASH_H
#define EMBER_COMMON_CRASH_H

/** Install the handler for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT. */
void ember_crash_handler_install(void);

#endif
