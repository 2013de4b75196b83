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

/* @bytes of memory (zeroed when @zero), released with ember_huge_free();
 * NULL when out of memory.  From 2 MiB up: fresh pages from mmap at a 2 MiB
 * boundary (malloc could recycle heap pages already faulted in as 4 KiB
 * pages, which no huge page replaces); below, malloc/calloc. */
void *ember_huge_alloc(size_t bytes, int zero);
/* Release what ember_huge_alloc returned (NULL is ignored). */
void ember_huge_free(void *p);

#endif
