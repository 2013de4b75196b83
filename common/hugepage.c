/* common/hugepage: 2 MiB-aligned, MADV_HUGEPAGE memory (see the header). */
#include "common/hugepage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

#define HEAD_PAGE  ((size_t)4096) /* kept before a mapping for its header */
#define HUGE_MAGIC 0x656d6275676570ull

/* Just before every block: how to give it back. */
typedef struct {
    uint64_t magic;
    void *base;    /* malloc's pointer, or the start of the mapping */
    size_t length; /* the mapping's length; 0: from malloc */
    uint64_t pad;  /* keeps the block 16-byte aligned after a malloc'd header */
} huge_header_t;

static void *from_malloc(size_t bytes, int zero)
{
    size_t total = sizeof(huge_header_t) + (bytes ? bytes : 1);
    huge_header_t *head = zero ? calloc(1, total) : malloc(total);
    if (!head)
        return NULL;
    *head = (huge_header_t){.magic = HUGE_MAGIC, .base = head, .length = 0};
    return head + 1;
}

/* Fault @bytes at @block in, writable (1), or leave it to the caller (0). */
static int populate(void *block, size_t bytes)
{
#ifdef MADV_POPULATE_WRITE
    return madvise(block, bytes, MADV_POPULATE_WRITE) == 0;
#else
    (void)block;
    (void)bytes;
    return 0;
#endif
}

void *ember_huge_alloc(size_t bytes, int zero)
{
    if (bytes < EMBER_HUGE_PAGE)
        return from_malloc(bytes, zero);
    if (bytes > SIZE_MAX - 2 * EMBER_HUGE_PAGE)
        return NULL;
    /* Fresh pages at a 2 MiB boundary, one small page before them for the
     * header.  The length is rounded to small pages only: the tail past
     * the last whole huge page stays in small pages, rather than up to
     * 2 MiB of resident memory no row uses (a PS of many tables has two
     * such blocks a table). */
    size_t rounded = (bytes + HEAD_PAGE - 1) / HEAD_PAGE * HEAD_PAGE;
    char *block = ember_huge_map(rounded, HEAD_PAGE);
    if (!block)
        return NULL;
    huge_header_t *head = (huge_header_t *)block - 1;
    *head = (huge_header_t){
            .magic = HUGE_MAGIC, .base = block - HEAD_PAGE, .length = HEAD_PAGE + rounded};
    /* Already zero, but faulted in now rather than by the first steps that
     * touch it: a huge page's first touch zeroes 2 MiB (and may compact
     * memory), which would make the first training steps that touch
     * optimizer state (Adam's) far slower than the rest.  The
     * kernel's populate (Linux 5.14+) faults the pages in without writing
     * them a second time; memset does it on older kernels. */
    if (zero && !populate(block, rounded))
        memset(block, 0, bytes);
    return block;
}

void ember_huge_free(void *p)
{
    if (!p)
        return;
    huge_header_t *head = (huge_header_t *)p - 1;
    if (head->magic != HUGE_MAGIC)
        abort(); /* not ours: freeing it would corrupt memory */
    head->magic = 0;
    if (head->length)
        munmap(head->base, head->length);
    else
        free(head->base);
}
