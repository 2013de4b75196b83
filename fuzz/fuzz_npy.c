/*
 * fuzz_npy: the header of a .npy file as the reader takes it
 * (ember_npy_parse_header, engine/io/npy.c; ember_npy_open runs it on the
 * mapped file).
 *
 * Input: [mode] then the file's first bytes.  Mode bit 0 clear: those bytes
 * are the whole file; set: the file goes on (mode >> 1) * 4096 bytes past
 * them, so headers whose arrays lie beyond the bytes given are reached.
 *
 * Invariants: an accepted header lies inside the bytes given, names a dtype
 * of the table with its item size, has at most 64 dimensions whose product
 * is its count, and its array is exactly the rest of the file; a refused one
 * says why, as a format error, an unsupported file or (only when the file
 * goes on past the bytes) a header past them.
 */
#include "engine/io/npy.h"
#include "fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint8_t mode = fuzz_u8(&in);
    const uint8_t *bytes;
    size_t length = fuzz_take(&in, size, &bytes);
    uint64_t file_size = length + (mode & 1 ? (uint64_t)(mode >> 1) * 4096 : 0);
    ember_npy_header_t h;
    char err[512] = "";
    ember_status_t status = ember_npy_parse_header(bytes, length, file_size, &h, err, sizeof(err));
    if (status != EMBER_OK) {
        FUZZ_CHECK((status == EMBER_ERR_FORMAT || status == EMBER_ERR_UNSUPPORTED ||
                    (status == EMBER_ERR_INVALID_PARAM && file_size > length)) &&
                           err[0] != '\0',
                   "refused (%d) without a cause: '%s'", status, err);
        return 0;
    }
    static const size_t itemsize[] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8};
    FUZZ_CHECK(h.dtype <= EMBER_NPY_F8 && h.itemsize == itemsize[h.dtype] && h.descr,
               "dtype %d of %zu bytes", (int)h.dtype, h.itemsize);
    FUZZ_CHECK(h.data_offset <= length && h.data_offset >= 10, "the header ends at %llu of %zu",
               (unsigned long long)h.data_offset, length);
    FUZZ_CHECK(h.data_offset + h.data_bytes == file_size && h.data_bytes == h.count * h.itemsize,
               "%llu bytes of array from %llu in a file of %llu", (unsigned long long)h.data_bytes,
               (unsigned long long)h.data_offset, (unsigned long long)file_size);
    FUZZ_CHECK(h.ndim <= EMBER_NPY_MAX_DIMS, "%u dimensions", h.ndim);
    uint64_t count = 1;
    for (uint32_t d = 0; d < h.ndim; d++)
        count *= h.shape[d]; /* no overflow: the parser checked, or a zero makes it 0 */
    FUZZ_CHECK(count == h.count || h.count == 0, "count %llu, shape's %llu",
               (unsigned long long)h.count, (unsigned long long)count);
    char text[64];
    ember_npy_shape_text(&h, text, sizeof(text)); /* cut short, never past */
    FUZZ_CHECK(text[0] == '(', "shape text '%s'", text);
    return 0;
}
