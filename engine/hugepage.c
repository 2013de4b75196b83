/* engine/hugepage: 2 MiB-aligned, MADV_HUGEPAGE allocations (see the header). */
#include "engine/hugepage.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE (2u << 20)

void *ember_huge_alloc(size_t bytes, int zero)
{
    void *p = NULL;

    if (bytes < HUGE_PAGE)
        return zero ? calloc(1, bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
    size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, rounded) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    /* Advice only: without THP the memory works the same, just slower. */
    (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    if (zero)
        memset(p, 0, bytes);
    return p;
}
