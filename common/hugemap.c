/* common/hugemap: see the header. */
#include "common/hugemap.h"

#include <stdint.h>
#include <sys/mman.h>

void *ember_huge_map(size_t bytes, size_t head)
{
    if (bytes > SIZE_MAX - head - EMBER_HUGE_PAGE)
        return NULL;
    /* Map an extra huge page of slack, then cut back to the aligned block
     * and its head. */
    size_t span = head + bytes + EMBER_HUGE_PAGE;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *block = (char *)(((uintptr_t)p + head + EMBER_HUGE_PAGE - 1) &
                           ~(uintptr_t)(EMBER_HUGE_PAGE - 1));
    char *base = block - head;
    if (base > p)
        munmap(p, (size_t)(base - p));
    if (block + bytes < p + span)
        munmap(block + bytes, (size_t)(p + span - (block + bytes)));
#ifdef MADV_HUGEPAGE
    /* Advice only: without THP the memory works the same, just slower. */
    (void)madvise(block, bytes, MADV_HUGEPAGE);
#endif
    return block;
}
