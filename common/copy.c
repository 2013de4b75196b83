/* common/copy: the backward copy behind ember_copy (see copy.h). */
#include "common/copy.h"

void *ember_copy_backward(void *dst, const void *src, size_t n)
{
    typedef unsigned char v16 __attribute__((vector_size(16)));
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t i = n;

    /* 64 bytes a pass from the end: a forward loop stalls on the same 4 KiB
     * aliasing that slows rep movsb here. */
    while (i >= 64) {
        v16 x0, x1, x2, x3;
        i -= 64;
        memcpy(&x0, s + i, 16);
        memcpy(&x1, s + i + 16, 16);
        memcpy(&x2, s + i + 32, 16);
        memcpy(&x3, s + i + 48, 16);
        memcpy(d + i, &x0, 16);
        memcpy(d + i + 16, &x1, 16);
        memcpy(d + i + 32, &x2, 16);
        memcpy(d + i + 48, &x3, 16);
    }
    memcpy(d, s, i); /* under 64 bytes: no rep movsb */
    return dst;
}
