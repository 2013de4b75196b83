/*
 * common/hugemap: fresh anonymous memory at a 2 MiB boundary, marked for
 * transparent huge pages.
 *
 * Straight from mmap: malloc may hand back heap pages already faulted in as
 * 4 KiB pages, which no huge page replaces on a later fault.  Used by the
 * buffer pool's huge-page chunks and by the engine's tables.
 */
#ifndef EMBER_COMMON_HUGEMAP_H
#define EMBER_COMMON_HUGEMAP_H

#include <stddef.h>

#define EMBER_HUGE_PAGE ((size_t)2 << 20)

/* @bytes (a multiple of EMBER_HUGE_PAGE) at a 2 MiB boundary, with @head
 * bytes (a multiple of the page size) mapped just before it; NULL when out
 * of memory.  Give it back with munmap(block - head, head + bytes). */
void *ember_huge_map(size_t bytes, size_t head);

#endif
