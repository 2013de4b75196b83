/*
 * common/hugepage: huge-page backed memory: allocations for embedding tables and their optimizer state.
 *
 * Lookups and sparse updates touch random rows: with 4 KiB pages nearly every
 * row misses the TLB and its page walk stalls the row prefetches.  Large
 * allocations are therefore aligned to 2 MiB and marked MADV_HUGEPAGE (Linux
 * transparent huge pages in "madvise" mode, Debian's default).  Seen with
 * `perf annotate` on ember-bench lookup: the prefetch instruction stalling.
 */
#ifndef EMBER_COMMON_HUGEPAGE_H
#define EMBER_COMMON_HUGEPAGE_H

#include <stddef.h>

/* Fresh anonymous memory at a 2 MiB boundary, marked for transparent huge
 * pages: straight from mmap, as malloc may hand back heap pages already
 * faulted in as 4 KiB pages, which no huge page replaces on a later fault.
 * Used by the buffer pool's huge-page chunks and by the tables. */
#define EMBER_HUGE_PAGE ((size_t)2 << 20)

/* @bytes (a multiple of the page size) at a 2 MiB boundary, with @head
 * bytes (a multiple of the page size) mapped just before it; NULL when out
 * of memory.  Give it back with munmap(block - head, head + bytes). */
void *ember_huge_map(size_t bytes, size_t head);

/* @bytes of memory (zeroed when @zero), released with ember_huge_free();
 * NULL when out of memory.  From 2 MiB up: fresh pages from mmap at a 2 MiB
 * boundary (malloc could recycle heap pages already faulted in as 4 KiB
 * pages, which no huge page replaces), as long as @bytes rounded up to
 * 4 KiB pages (the tail past the last whole huge page in small pages);
 * below, malloc/calloc. */
void *ember_huge_alloc(size_t bytes, int zero);
/* Release what ember_huge_alloc returned (NULL is ignored). */
void ember_huge_free(void *p);

#endif
