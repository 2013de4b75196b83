/*
 * fuzz_criteo: one line of a Criteo TSV file as the reader takes it
 * (ember_criteo_parse_line, engine/io/criteo.c).
 *
 * Input: [rows selector] then the line's bytes (tabs, CR, NUL and all).
 *
 * Invariants: an accepted line gives a label of 0 or 1, finite dense
 * values >= 0 (log(max(x, 0) + 1)) and every categorical id inside its
 * table; a refused one says why.
 */
#include "engine/io/criteo.h"
#include "fuzz/fuzz_input.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint8_t selector = fuzz_u8(&in);
    int64_t rows[EMBER_CRITEO_SPARSE];
    /* one row, small tables, or the largest a table may have */
    for (size_t c = 0; c < EMBER_CRITEO_SPARSE; c++)
        rows[c] = selector % 3 == 0 ? 1 : selector % 3 == 1 ? 1 + (int64_t)c * 97 : INT64_MAX;
    ember_criteo_example_t ex;
    char err[256] = "";
    ember_status_t status =
            ember_criteo_parse_line((const char *)in.data, in.size, rows, &ex, err, sizeof(err));
    if (status != EMBER_OK) {
        FUZZ_CHECK(status == EMBER_ERR_FORMAT && err[0] != '\0', "refused (%d) without a cause",
                   status);
        return 0;
    }
    FUZZ_CHECK(ex.label == 0.0f || ex.label == 1.0f, "label %g", (double)ex.label);
    for (size_t f = 0; f < EMBER_CRITEO_DENSE; f++)
        FUZZ_CHECK(isfinite(ex.dense[f]) && ex.dense[f] >= 0.0f, "I%zu = %g", f + 1,
                   (double)ex.dense[f]);
    for (size_t c = 0; c < EMBER_CRITEO_SPARSE; c++)
        FUZZ_CHECK(ex.sparse[c] >= 0 && ex.sparse[c] < rows[c], "C%zu = %lld of %lld rows", c + 1,
                   (long long)ex.sparse[c], (long long)rows[c]);
    return 0;
}
