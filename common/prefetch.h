/*
 * common/prefetch: software prefetch for row gathers and scatters.
 *
 * Rows picked by random keys defeat the hardware prefetcher, so a gather of
 * N rows waits out N memory latencies one after another.  Touching the row
 * EMBER_PREFETCH_AHEAD positions ahead keeps that many rows in flight
 * instead.
 */
#ifndef EMBER_ENGINE_PREFETCH_H
#define EMBER_ENGINE_PREFETCH_H

#include <stddef.h>

#define EMBER_PREFETCH_AHEAD 16

/* Ask for every cache line of @bytes at @p; @write: 1 when it will be stored to. */
#define ember_prefetch_span(p, bytes, write)                                           \
    do {                                                                               \
        const char *ember_pf_p_ = (const char *)(p);                                   \
        for (size_t ember_pf_o_ = 0; ember_pf_o_ < (size_t)(bytes); ember_pf_o_ += 64) \
            __builtin_prefetch(ember_pf_p_ + ember_pf_o_, (write), 3);                 \
    } while (0)

#endif
