/* ember: a backtrace on a fatal signal (see crash.c). */
#ifndef EMBER_COMMON_CRASH_H
#define EMBER_COMMON_CRASH_H

/* ember_crash_handler_install: <ember/log.h> (public). */
#include <ember/log.h>

#endif
