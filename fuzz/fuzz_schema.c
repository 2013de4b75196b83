/*
 * fuzz_schema: a feature schema's text as ember_schema_parse takes it
 * (engine/io/schema.c: a file, or a checkpoint's one-line copy).
 *
 * Input: the text's bytes (cut at a NUL, as a C string is).
 *
 * Invariants: a refusal is ERR_FORMAT naming "schema:LINE: why"; an
 * accepted schema has a label, a feature, its tables' features adjacent
 * with alike rows, pooling and kind, every bag bound in range; its canonical
 * text parses back to a schema that differs in nothing and gives the same
 * text.
 */
#include "engine/io/schema_private.h"
#include "fuzz/fuzz_input.h"

#include <stdlib.h>
#include <string.h>

static char canon[1 << 20], again[1 << 20];

static void check_tables(const ember_schema_t *s)
{
    for (uint32_t f = 0; f < ember_schema_num_sparse(s); f++) {
        ember_schema_sparse_t a, b;
        ember_schema_sparse(s, f, &a);
        FUZZ_CHECK(a.rows >= 1 && a.bag_max >= 1 && a.bag_max <= EMBER_SCHEMA_BAG_MAX &&
                           (a.list || a.bag_max == 1) && a.table_index < ember_schema_num_tables(s),
                   "feature %u: rows %lld, bag %u, table %u", f, (long long)a.rows, a.bag_max,
                   a.table_index);
        if (f == 0)
            continue;
        ember_schema_sparse(s, f - 1, &b);
        FUZZ_CHECK(a.table_index == b.table_index || a.table_index == b.table_index + 1,
                   "feature %u's table %u after table %u", f, a.table_index, b.table_index);
        FUZZ_CHECK(a.table_index != b.table_index ||
                           (a.rows == b.rows && a.pooling == b.pooling &&
                            ember_schema_dynamic(s, f) == ember_schema_dynamic(s, f - 1)),
                   "a shared table's features differ");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), err[512] = "", why[256];
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    ember_schema_t *s = NULL, *t = NULL;
    ember_status_t status = ember_schema_parse(text, "schema", &s, err, sizeof(err));
    free(text);
    if (status != EMBER_OK) {
        FUZZ_CHECK(status == EMBER_ERR_FORMAT && strncmp(err, "schema:", 7) == 0 && !s,
                   "refused (%d) as '%s'", status, err);
        return 0;
    }
    FUZZ_CHECK(ember_schema_label(s)[0] != '\0' &&
                       ember_schema_num_dense(s) + ember_schema_num_sparse(s) > 0,
               "no label or feature");
    check_tables(s);
    size_t length = ember_schema_text(s, canon, sizeof(canon));
    FUZZ_CHECK(length < sizeof(canon), "canonical text of %zu bytes", length);
    status = ember_schema_parse(canon, "canonical", &t, err, sizeof(err));
    FUZZ_CHECK(status == EMBER_OK, "'%s' refused: %s", canon, err);
    FUZZ_CHECK(ember_schema_differs(s, t, why, sizeof(why)) == NULL, "'%s' differs: %s", canon,
               why);
    ember_schema_text(t, again, sizeof(again));
    FUZZ_CHECK(strcmp(canon, again) == 0, "'%s' then '%s'", canon, again);
    ember_schema_free(t);
    ember_schema_free(s);
    return 0;
}
