/*
 * engine/hugepage: allocations for embedding tables and their optimizer state.
 *
 * Lookups and sparse updates touch random rows: with 4 KiB pages nearly every
 * row misses the TLB and its page walk stalls the row prefetches.  Large
 * allocations are therefore aligned to 2 MiB and marked MADV_HUGEPAGE (Linux
 * transparent huge pages in "madvise" mode, Debian's default).  Seen with
 * `perf annotate` on ember-bench lookup: the prefetch instruction stalling.
 */
#ifndef EMBER_ENGINE_HUGEPAGE_H
#define EMBER_ENGINE_HUGEPAGE_H

#include <stddef.h>

/* @bytes of memory (zeroed when @zero), released with free(); NULL when out
 * of memory.  Below 2 MiB this is plain malloc/calloc. */
void *ember_huge_alloc(size_t bytes, int zero);

#endif
