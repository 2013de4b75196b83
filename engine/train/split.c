/* engine/train/split: a table's bags split by shard into LOOKUPs built in
 * place (see split.h). */
#include "engine/train/split.h"

#include "common/reserve.h"
#include "engine/wire/codec.h"

#include <ember/embedding_bag.h>
#include <ember/log.h>
#include <ember/status.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A step's pass over a table: what the loop over its ids keeps at hand. */
typedef struct {
    ember_split_t *split;
    uint32_t P;
    int64_t rows, pad;
    int has_pad; /* pad is a row (-1: none; a dynamic table's key -1 is 2^64 - 1) */
    int dynamic; /* ids are keys: any value, placed by ember_wire_key_shard */
    size_t entries_at, entry_bytes;
    size_t row_bytes;    /* a distinct row's: its id, and a cached lookup's held version */
    int weights, places; /* the entries carry them */
    int count_max, count_mean;
    size_t npairs;
    size_t bag; /* the table's bag the pass is in */
} pass_t;

ember_status_t ember_split_init(ember_split_t *split, const ember_sparse_config_t *config)
{
    *split = (ember_split_t){.config = *config};
    split->shards = calloc(config->num_ps ? config->num_ps : 1, sizeof(*split->shards));
    return split->shards ? EMBER_OK : EMBER_ERR_NO_MEMORY;
}

void ember_split_free(ember_split_t *split)
{
    for (uint32_t p = 0; split->shards && p < split->config.num_ps; p++)
        free(split->shards[p].request);
    free(split->shards);
    free(split->counts);
    free(split->bag_counts);
    free(split->pairs);
    free(split->other);
    *split = (ember_split_t){0};
}

/* One line naming the feature. */
static ember_status_t refuse(char *err, size_t err_length, ember_status_t status,
                             const ember_sparse_segment_t *seg, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static ember_status_t refuse(char *err, size_t err_length, ember_status_t status,
                             const ember_sparse_segment_t *seg, const char *fmt, ...)
{
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return ember_status_text(err, err_length, status, "feature %s: %s", seg->name ? seg->name : "?",
                             what);
}

/* ---- the input's shape, before any id is read ------------------------------ */

/* Each segment gives its bags one way and has values for them; weights on
 * all or none, and only with sum; *bags_p the table's bags. */
static ember_status_t check_segments(const ember_split_t *split, const ember_sparse_input_t *input,
                                     size_t *bags_p, char *err, size_t err_length)
{
    if (!input || !input->segments || input->count == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "no features: a table's input has at least one segment");
    const ember_sparse_segment_t *first = &input->segments[0];
    uint64_t bags = 0;
    for (size_t s = 0; s < input->count; s++) {
        const ember_sparse_segment_t *seg = &input->segments[s];
        if (!seg->offsets == !seg->lengths)
            return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                          "its bags are given by offsets or by lengths (exactly one of them, "
                          "%s given)",
                          seg->offsets ? "both" : "neither");
        if (!seg->weights != !first->weights)
            return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                          "per-sample weights %s, but feature %s's %s: a table's features have "
                          "them all or none",
                          seg->weights ? "given" : "missing", first->name ? first->name : "?",
                          first->weights ? "are given" : "are not");
        if (seg->weights && split->config.mode != EMBER_BAG_SUM)
            return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                          "per-sample weights are only supported with mode sum (mode is %s)",
                          ember_bag_mode_name(split->config.mode));
        bags += seg->bags;
    }
    if (bags > UINT32_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%" PRIu64 " bags in one step: a lookup carries at most %" PRIu32,
                                 bags, UINT32_MAX);
    *bags_p = (size_t)bags;
    return EMBER_OK;
}

/* ---- the shards' LOOKUPs ------------------------------------------------------ */

/* Room for @room entries and their rows behind the step's offsets. */
static size_t request_bytes(const pass_t *pass, size_t room)
{
    return pass->entries_at + EMBER_WIRE_ALIGN + (pass->entry_bytes + pass->row_bytes) * room;
}

/* The entries @shard's request has room for, as its capacity stands. */
static size_t request_room(const pass_t *pass, const ember_split_shard_t *shard)
{
    const size_t fixed = request_bytes(pass, 0);
    return shard->capacity < fixed
                   ? 0
                   : (shard->capacity - fixed) / (pass->entry_bytes + pass->row_bytes);
}

/* At least @room entries' room (the contents kept: realloc). */
static ember_status_t shard_reserve(const pass_t *pass, ember_split_shard_t *shard, size_t room)
{
    if (!EMBER_RESERVE(shard->request, shard->capacity, request_bytes(pass, room)))
        return EMBER_ERR_NO_MEMORY;
    shard->room = request_room(pass, shard);
    /* The request is malloc's: its offsets and entries are 4-byte aligned. */
    shard->offsets = (uint32_t *)(shard->request + sizeof(ember_msg_lookup_t));
    shard->base = (uint32_t *)(shard->request + pass->entries_at);
    return EMBER_OK;
}

/* Each shard's request ready for the step: room for its offsets and as
 * many entries as it had last step (grow-only: a steady run reallocates
 * nothing). */
static ember_status_t shards_begin(pass_t *pass)
{
    ember_split_t *split = pass->split;
    for (uint32_t p = 0; p < pass->P; p++) {
        ember_split_shard_t *shard = &split->shards[p];
        const size_t hint = shard->entries > 16 ? shard->entries : 16;
        shard->entries = 0;
        EMBER_CHECK(shard_reserve(pass, shard, hint));
    }
    return EMBER_OK;
}

/* The combine's counts for the step's bags, zeroed, in the mode that reads
 * them. */
static ember_status_t counts_begin(pass_t *pass, size_t bags)
{
    ember_split_t *split = pass->split;
    if (pass->count_max) {
        const size_t count = (size_t)pass->P * bags;
        if (!EMBER_RESERVE(split->counts, split->counts_capacity, count + 1))
            return EMBER_ERR_NO_MEMORY;
        memset(split->counts, 0, count * sizeof(uint32_t));
    }
    if (pass->count_mean) {
        if (!EMBER_RESERVE(split->bag_counts, split->bag_counts_capacity, bags + 1))
            return EMBER_ERR_NO_MEMORY;
        memset(split->bag_counts, 0, bags * sizeof(uint32_t));
    }
    return EMBER_OK;
}

/* ---- the pass ---------------------------------------------------------------- */

/* Room for @count more entries, whichever shards they go to: in the sort,
 * and in every shard's LOOKUP (reserved, not touched: a shard's request
 * only grows to what it has held).  Nothing moves while a bag is read. */
static ember_status_t room_for(pass_t *pass, const ember_sparse_segment_t *seg, size_t count,
                               char *err, size_t err_length)
{
    ember_split_t *split = pass->split;
    if (count > UINT32_MAX - pass->npairs) /* an entry's number fits the pair's 32 bits */
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "more than %" PRIu32 " indices in one step's lookup", UINT32_MAX);
    const size_t need = pass->npairs + count;
    int ok = need <= split->pairs_capacity ||
             EMBER_RESERVE(split->pairs, split->pairs_capacity, need + 1);
    for (uint32_t p = 0; ok && p < pass->P; p++) {
        ember_split_shard_t *shard = &split->shards[p];
        if (shard->entries + count > shard->room)
            ok = shard_reserve(pass, shard, shard->entries + count) == EMBER_OK;
    }
    if (!ok)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "out of memory for its lookups");
    return EMBER_OK;
}

/* Bag @b of @seg given by lengths: where its values begin and end (from
 * *@cursor_p, the bag's first), its length checked, room for it. */
static ember_status_t length_bag(pass_t *pass, const ember_sparse_segment_t *seg, size_t b,
                                 size_t *cursor_p, size_t *begin_p, size_t *end_p, char *err,
                                 size_t err_length)
{
    const int32_t length = seg->lengths[b];
    if (length < 0)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "length %" PRId32 " of bag %zu is negative", length, b);
    if (length > 0 && !seg->values)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "indices missing for the %" PRId32 " entries of bag %zu", length, b);
    *begin_p = *cursor_p;
    *end_p = *cursor_p + (size_t)length;
    *cursor_p = *end_p;
    return room_for(pass, seg, (size_t)length, err, err_length);
}

/* Bag @b of @seg given by offsets: its start was checked as the bag before
 * ended (or by offsets_span); its end is checked before any of its values
 * is read. */
static ember_status_t offset_bag(const ember_sparse_segment_t *seg, size_t b, int64_t end_all,
                                 size_t *begin_p, size_t *end_p, char *err, size_t err_length)
{
    const int64_t start = seg->offsets[b];
    const int64_t next = b + 1 < seg->bags ? seg->offsets[b + 1] : end_all;
    if (next < start)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "offsets decrease at bag %zu: %" PRId64 " after %" PRId64, b + 1, next,
                      start);
    if (next > end_all)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "offset %" PRId64 " of bag %zu is past the end of indices (n = %" PRId64 ")",
                      next, b + 1, end_all);
    *begin_p = (size_t)start;
    *end_p = (size_t)next;
    return EMBER_OK;
}

/* The offsets' first and last, before a bag is read: the first not
 * negative nor past the last, values there for what they span, room for
 * as many entries. */
static ember_status_t offsets_span(pass_t *pass, const ember_sparse_segment_t *seg,
                                   int64_t *end_all_p, char *err, size_t err_length)
{
    const int64_t first = seg->offsets[0], end_all = seg->offsets[seg->bags];
    if (first < 0)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "offset %" PRId64 " of bag 0 is negative", first);
    if (first > end_all)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "offset %" PRId64 " of bag 0 is past the end of indices (n = %" PRId64 ")",
                      first, end_all);
    if (end_all > first && !seg->values)
        return refuse(err, err_length, EMBER_ERR_INVALID_PARAM, seg,
                      "indices missing for %" PRId64 " entries", end_all - first);
    *end_all_p = end_all;
    return room_for(pass, seg, (size_t)(end_all - first), err, err_length);
}

/* Each shard's offset of the table's bag @pass->bag: its entries so far. */
static inline void bag_open(const pass_t *pass)
{
    ember_split_shard_t *shards = pass->split->shards;
    for (uint32_t p = 0; p < pass->P; p++)
        shards[p].offsets[pass->bag] = (uint32_t)shards[p].entries;
}

/* Bag @b of @seg's values [begin, end) (room made for them): each id
 * checked, and each but the padding row's written into its shard's LOOKUP
 * (the entry's weight or place now, its slot once the rows are sorted) and
 * into the sort.  @one: a table of one shard (a constant where inlined).
 * The entries are 4-byte aligned: written as uint32 and float. */
static inline __attribute__((always_inline)) ember_status_t
bag_entries(pass_t *pass, const ember_sparse_segment_t *seg, size_t b, size_t begin, size_t end,
            const int one, char *err, size_t err_length)
{
    ember_split_t *split = pass->split;
    const int64_t rows = pass->rows, pad = pass->pad;
    const uint32_t P = pass->P;
    const size_t words = pass->entry_bytes / 4, bag = pass->bag;
    const int64_t *values = seg->values;
    ember_radix_pair_t *pairs = split->pairs;
    size_t npairs = pass->npairs;
    ember_split_shard_t *shard = split->shards;
    size_t entries = one ? shard->entries : 0;
    ember_status_t status = EMBER_OK;
    for (size_t i = begin; i < end; i++) {
        const int64_t row = values[i];
        if (!pass->dynamic && (row < 0 || row >= rows)) {
            status = refuse(err, err_length, EMBER_ERR_OUT_OF_RANGE, seg,
                            "index %" PRId64 " at position %zu (bag %zu) is out of range [0, "
                            "%" PRId64 ")",
                            row, i, b, rows);
            break;
        }
        if (row == pad && pass->has_pad)
            continue; /* contributes nothing, is not counted */
        const uint32_t p = one             ? 0
                           : pass->dynamic ? ember_wire_key_shard((uint64_t)row, P)
                                           : (uint32_t)((uint64_t)row % P);
        if (!one) {
            shard = &split->shards[p];
            entries = shard->entries;
        }
        uint32_t *entry = shard->base + words * entries;
        if (pass->weights)
            memcpy(entry + 1, &seg->weights[i], sizeof(float));
        else if (pass->places)
            entry[1] = (uint32_t)(i - begin);
        pairs[npairs++] =
                (ember_radix_pair_t){.key = (uint64_t)row, .value = (uint64_t)p << 32 | entries};
        if (pass->count_max)
            split->counts[(size_t)p * split->bags + bag]++;
        if (pass->count_mean)
            split->bag_counts[bag]++;
        entries++;
        if (!one)
            shard->entries = entries;
    }
    if (one)
        shard->entries = entries;
    pass->npairs = npairs;
    return status;
}

/* Every bag of @seg, read once. */
static inline __attribute__((always_inline)) ember_status_t
segment_pass(pass_t *pass, const ember_sparse_segment_t *seg, const int one, char *err,
             size_t err_length)
{
    int64_t end_all = 0;
    size_t cursor = 0, begin = 0, end = 0;
    if (seg->offsets)
        EMBER_CHECK(offsets_span(pass, seg, &end_all, err, err_length));
    for (size_t b = 0; b < seg->bags; b++, pass->bag++) {
        if (seg->offsets)
            EMBER_CHECK(offset_bag(seg, b, end_all, &begin, &end, err, err_length));
        else
            EMBER_CHECK(length_bag(pass, seg, b, &cursor, &begin, &end, err, err_length));
        bag_open(pass);
        EMBER_CHECK(bag_entries(pass, seg, b, begin, end, one, err, err_length));
    }
    return EMBER_OK;
}

static ember_status_t split_segment(pass_t *pass, const ember_sparse_segment_t *seg, char *err,
                                    size_t err_length)
{
    if (pass->P == 1)
        return segment_pass(pass, seg, 1, err, err_length);
    return segment_pass(pass, seg, 0, err, err_length);
}

/* ---- the rows ------------------------------------------------------------------ */

/* The pairs sorted by row: each shard's distinct rows written last in its
 * LOOKUP, increasing, and each entry's slot among them; then each LOOKUP's
 * head (and the padding before its rows). */
static ember_status_t rows_emit(pass_t *pass, uint64_t step)
{
    ember_split_t *split = pass->split;
    const size_t n = pass->npairs, words = pass->entry_bytes / 4;
    if (!EMBER_RESERVE(split->other, split->other_capacity, n + 1))
        return EMBER_ERR_NO_MEMORY;
    uint64_t min = 0, max = pass->rows > 0 ? (uint64_t)pass->rows - 1 : 0;
    if (pass->dynamic) { /* keys anywhere in 64 bits: sort only the span they have */
        min = UINT64_MAX, max = 0;
        for (size_t k = 0; k < n; k++) {
            min = split->pairs[k].key < min ? split->pairs[k].key : min;
            max = split->pairs[k].key > max ? split->pairs[k].key : max;
        }
    }
    const ember_radix_pair_t *sorted = ember_radix_sort(split->pairs, split->other, n, min, max);
    for (uint32_t p = 0; p < pass->P; p++) {
        ember_split_shard_t *shard = &split->shards[p];
        shard->head = (ember_msg_lookup_t){.table_id = split->config.table_id,
                                           .trainer = (uint32_t)split->config.trainer,
                                           .step = step,
                                           .flags = split->flags,
                                           .bags = (uint32_t)split->bags,
                                           .unique = 0,
                                           .indices = (uint32_t)shard->entries};
    }
    uint64_t previous = 0; /* k == 0 starts the first row (a key may be any value) */
    ember_split_shard_t *shard = NULL;
    uint32_t *base = NULL, slot = 0;
    for (size_t k = 0; k < n; k++) {
        const uint64_t row = sorted[k].key;
        if (k == 0 || row != previous) { /* a new row: its copies are all of one shard */
            shard = &split->shards[sorted[k].value >> 32];
            /* Its rows go 8-byte aligned after its last entry (the room
             * for them was reserved with the entries). */
            int64_t *rows = (int64_t *)(shard->request +
                                        ember_wire_pad(pass->entries_at +
                                                       pass->entry_bytes * shard->entries));
            slot = shard->head.unique++;
            rows[slot] = (int64_t)row;
            base = shard->base;
            previous = row;
        }
        base[words * (uint32_t)sorted[k].value] = slot;
    }
    for (uint32_t p = 0; p < pass->P; p++)
        ember_wire_lookup_seal(&split->shards[p].head, split->shards[p].request);
    return EMBER_OK;
}

ember_status_t ember_split_table(ember_split_t *split, const ember_sparse_input_t *input,
                                 uint64_t step, int eval, char *err, size_t err_length)
{
    const ember_sparse_config_t *config = &split->config;
    size_t bags = 0;
    EMBER_CHECK(check_segments(split, input, &bags, err, err_length));
    const int weighted = input->segments[0].weights != NULL;
    split->bags = bags;
    split->flags = (weighted ? EMBER_LOOKUP_WEIGHTS : 0) |
                   (config->mode == EMBER_BAG_MAX ? EMBER_LOOKUP_MAX : 0) |
                   (config->half_replies ? EMBER_LOOKUP_HALF_REPLY : 0) |
                   (eval ? EMBER_LOOKUP_EVAL : 0) | (config->cache ? EMBER_LOOKUP_ROWS : 0);
    pass_t pass = {.split = split,
                   .P = config->num_ps,
                   .rows = config->rows,
                   .pad = config->padding_idx,
                   .has_pad = config->padding_idx >= 0,
                   .dynamic = config->dynamic,
                   .entries_at = ember_wire_lookup_entries_at((uint32_t)bags),
                   .entry_bytes = ember_wire_lookup_entry_bytes(split->flags),
                   .row_bytes = config->cache ? 16 : 8,
                   .weights = weighted,
                   .places = config->mode == EMBER_BAG_MAX,
                   .count_max = config->mode == EMBER_BAG_MAX,
                   .count_mean = config->mode == EMBER_BAG_MEAN};
    if (shards_begin(&pass) != EMBER_OK || counts_begin(&pass, bags) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "out of memory for its lookups");
    for (size_t s = 0; s < input->count; s++)
        EMBER_CHECK(split_segment(&pass, &input->segments[s], err, err_length));
    if (rows_emit(&pass, step) != EMBER_OK)
        return ember_status_text(err, err_length, EMBER_ERR_NO_MEMORY,
                                 "out of memory for its lookups");
    return EMBER_OK;
}
