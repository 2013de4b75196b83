/* engine/wire/codec: the engine's messages packed and checked (see codec.h). */
#include "engine/wire/codec.h"

#include "engine/ops/half.h"

#include <ember/embedding_bag.h>
#include <ember/log.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- any message ------------------------------------------------------------ */

ember_status_t ember_wire_head(const void *data, size_t length, void *head, size_t size,
                               ember_wire_rest_t *rest_p, char *err, size_t err_length)
{
    if (length < size)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "message of %zu bytes is shorter than its %zu-byte header", length,
                                 size);
    memcpy(head, data, size);
    if (rest_p)
        *rest_p = (ember_wire_rest_t){.body = (const uint8_t *)data + size,
                                      .body_bytes = length - size};
    return EMBER_OK;
}

ember_status_t ember_wire_exact(const void *data, size_t length, void *head, size_t size,
                                const char *what, char *err, size_t err_length)
{
    if (length != size)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE, "%s of %zu bytes", what,
                                 length);
    memcpy(head, data, size);
    return EMBER_OK;
}

size_t ember_wire_pack_iov(const void *head, size_t size, const void *body, size_t body_bytes,
                           ember_iov_t iov[2])
{
    iov[0] = (ember_iov_t){.buffer = head, .length = size};
    if (!body || body_bytes == 0)
        return 1;
    iov[1] = (ember_iov_t){.buffer = body, .length = body_bytes};
    return 2;
}

/* ---- LOOKUP ----------------------------------------------------------------- */

void ember_wire_lookup_layout(const ember_msg_lookup_t *head, ember_wire_lookup_layout_t *layout)
{
    layout->offsets = sizeof(*head);
    layout->entries = layout->offsets + 4ull * head->bags;
    layout->entry_bytes = ember_wire_lookup_entry_bytes(head->flags);
    layout->rows = ember_wire_pad(layout->entries + layout->entry_bytes * head->indices);
    layout->held = (head->flags & EMBER_LOOKUP_ROWS) ? layout->rows + 8ull * head->unique : 0;
    layout->size = layout->rows + 8ull * head->unique * ((head->flags & EMBER_LOOKUP_ROWS) ? 2 : 1);
}

uint64_t ember_wire_lookup_array_bytes(const ember_msg_lookup_t *head)
{
    ember_wire_lookup_layout_t layout;
    ember_wire_lookup_layout(head, &layout);
    return layout.size - sizeof(*head);
}

void ember_wire_lookup_seal(const ember_msg_lookup_t *head, void *message)
{
    ember_wire_lookup_layout_t at;
    ember_wire_lookup_layout(head, &at);
    const size_t end = (size_t)(at.entries + at.entry_bytes * head->indices);
    memcpy(message, head, sizeof(*head));
    memset((uint8_t *)message + end, 0, (size_t)at.rows - end);
}

/* ---- a lookup's reply ------------------------------------------------------- */

void ember_wire_reply_layout(uint32_t flags, uint32_t bags, uint32_t dim,
                             ember_wire_reply_layout_t *layout)
{
    const int max_mode = (flags & EMBER_LOOKUP_MAX) != 0;
    const uint64_t count = (uint64_t)bags * dim;
    const uint64_t value_bytes = (flags & EMBER_LOOKUP_HALF_REPLY) ? 2 : 4;
    /* fp16 values of an odd count end mid-word: the places start aligned. */
    const uint64_t places = max_mode ? (count * value_bytes + 3) & ~3ull : 0;
    const uint64_t bytes = max_mode ? places + 4 * count : count * value_bytes;
    *layout = (ember_wire_reply_layout_t){.flags = flags,
                                          .dim = dim,
                                          .count = count,
                                          .values = 0,
                                          .value_bytes = value_bytes,
                                          .places = places,
                                          .bytes = bytes,
                                          .version = ember_wire_pad(bytes),
                                          .part_bytes = ember_wire_pad(bytes) + sizeof(uint64_t),
                                          .pooled_places = max_mode ? 4 * count : 0,
                                          .pooled_bytes = 4 * count * (max_mode ? 2 : 1)};
}

void ember_wire_reply_finish(const ember_wire_reply_layout_t *layout, void *part)
{
    uint8_t *out = part;
    if (layout->value_bytes == 2) {
        ember_float_to_half_in_place(out, (size_t)layout->count);
        if (layout->flags & EMBER_LOOKUP_MAX) /* the places move up behind the halved values */
            memmove(out + layout->places, out + layout->pooled_places, (size_t)layout->count * 4);
    }
    memset(out + layout->bytes, 0, (size_t)(layout->version - layout->bytes));
}

void ember_wire_reply_put_version(const ember_wire_reply_layout_t *layout, void *part,
                                  uint64_t version)
{
    memcpy((uint8_t *)part + layout->version, &version, sizeof(version));
}

uint64_t ember_wire_reply_get_version(const ember_wire_reply_layout_t *layout, const void *part)
{
    uint64_t version;
    memcpy(&version, (const uint8_t *)part + layout->version, sizeof(version));
    return version;
}

static ember_wire_reply_layout_t reply_layout_of(const ember_msg_lookup_t *head, uint32_t dim)
{
    ember_wire_reply_layout_t layout;
    ember_wire_reply_layout(head->flags, head->bags, dim, &layout);
    return layout;
}

uint64_t ember_wire_lookup_places_at(const ember_msg_lookup_t *head, uint32_t dim)
{
    return reply_layout_of(head, dim).places;
}

uint64_t ember_wire_lookup_reply_bytes(const ember_msg_lookup_t *head, uint32_t dim)
{
    return reply_layout_of(head, dim).bytes;
}

uint64_t ember_wire_lookup_version_at(const ember_msg_lookup_t *head, uint32_t dim)
{
    return reply_layout_of(head, dim).version;
}

uint64_t ember_wire_lookups_part_bytes(const ember_msg_lookup_t *head, uint32_t dim)
{
    return reply_layout_of(head, dim).part_bytes;
}

size_t ember_wire_lookup_size(const ember_msg_lookup_t *head)
{
    return sizeof(*head) + (size_t)ember_wire_lookup_array_bytes(head);
}

void ember_wire_lookup_pack(const ember_wire_lookup_t *lookup, void *message)
{
    const ember_msg_lookup_t *head = &lookup->head;
    uint8_t *out = message;
    ember_wire_lookup_layout_t at;
    uint32_t offset = 0;

    ember_wire_lookup_layout(head, &at);
    for (size_t b = 0; b < head->bags; b++) { /* each bag's first entry */
        memcpy(out + at.offsets + 4 * b, &offset, 4);
        offset += lookup->counts[b];
    }
    for (size_t i = 0; i < head->indices; i++) {
        uint8_t *entry = out + at.entries + at.entry_bytes * i;
        uint32_t slot = (uint32_t)lookup->inverse[i];
        memcpy(entry, &slot, 4);
        if (head->flags & EMBER_LOOKUP_WEIGHTS)
            memcpy(entry + 4, &lookup->weights[i], 4);
        else if (head->flags & EMBER_LOOKUP_MAX)
            memcpy(entry + 4, &lookup->places[i], 4);
    }
    if (head->unique)
        memcpy(out + at.rows, lookup->rows, 8 * (size_t)head->unique);
    ember_wire_lookup_seal(head, message);
}

/* The flags the protocol knows, and weights only where they mean something. */
static ember_status_t lookup_check_flags(const ember_msg_lookup_t *head, char *err,
                                         size_t err_length)
{
    const uint32_t known = EMBER_LOOKUP_WEIGHTS | EMBER_LOOKUP_MAX | EMBER_LOOKUP_HALF_REPLY |
                           EMBER_LOOKUP_EVAL | EMBER_LOOKUP_ROWS;
    if (head->flags & ~known)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "unknown lookup flags %#x", head->flags);
    if ((head->flags & EMBER_LOOKUP_WEIGHTS) && (head->flags & EMBER_LOOKUP_MAX))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "per-sample weights need sum mode (flags %#x)", head->flags);
    if ((head->flags & EMBER_LOOKUP_ROWS) && (head->flags & EMBER_LOOKUP_HALF_REPLY))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "a cached lookup (rows) has no fp16 replies (flags %#x)",
                                 head->flags);
    return EMBER_OK;
}

ember_status_t ember_wire_lookup_unpack(const void *data, size_t length,
                                        ember_wire_lookup_view_t *view, char *err,
                                        size_t err_length)
{
    ember_msg_lookup_t *head = &view->head;
    const uint8_t *message = data;
    ember_wire_lookup_layout_t at;

    EMBER_CHECK(ember_wire_head(data, length, head, sizeof(*head), NULL, err, err_length));
    EMBER_CHECK(lookup_check_flags(head, err, err_length));
    uint64_t expect = ember_wire_lookup_array_bytes(head);
    if (expect != length - sizeof(*head))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "lookup of %u bags, %u rows, %u indices needs %llu bytes, got %zu",
                                 head->bags, head->unique, head->indices,
                                 (unsigned long long)expect, length - sizeof(*head));
    ember_wire_lookup_layout(head, &at);
    view->offsets = message + at.offsets;
    view->rows = message + at.rows;
    view->slots = message + at.entries;
    view->entry_bytes = (size_t)at.entry_bytes;
    view->weights = (head->flags & EMBER_LOOKUP_WEIGHTS) ? view->slots + 4 : NULL;
    view->places = (head->flags & EMBER_LOOKUP_MAX) ? view->slots + 4 : NULL;
    view->held = (head->flags & EMBER_LOOKUP_ROWS) ? message + at.held : NULL;
    return EMBER_OK;
}

/* ---- a cached lookup's reply -------------------------------------------------- */

uint64_t ember_wire_rows_reply_values_at(uint64_t unique)
{
    return ember_wire_pad(ember_wire_rows_reply_states_at() + unique);
}

uint64_t ember_wire_rows_reply_bytes(uint64_t unique, uint32_t dim, uint64_t fresh)
{
    return ember_wire_pad(ember_wire_rows_reply_values_at(unique) + fresh * dim * 4);
}

ember_status_t ember_wire_rows_reply_check(const void *part, size_t length, uint64_t unique,
                                           uint32_t dim, ember_msg_rows_reply_t *head_p,
                                           size_t *bytes_p, char *err, size_t err_length)
{
    const uint8_t *in = part;
    if (length < ember_wire_rows_reply_values_at(unique))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "a cached lookup's reply of %zu bytes for %llu rows", length,
                                 (unsigned long long)unique);
    memcpy(head_p, in, sizeof(*head_p));
    if (head_p->fresh > unique || ember_wire_rows_reply_bytes(unique, dim, head_p->fresh) > length)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "a cached lookup's reply says %llu fresh rows of %llu in %zu "
                                 "bytes",
                                 (unsigned long long)head_p->fresh, (unsigned long long)unique,
                                 length);
    const uint8_t *states = in + ember_wire_rows_reply_states_at();
    uint64_t fresh = 0;
    for (uint64_t u = 0; u < unique; u++) {
        if (states[u] > EMBER_ROW_FRESH)
            return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                     "a cached lookup's reply gives row %llu state %u",
                                     (unsigned long long)u, states[u]);
        fresh += states[u] == EMBER_ROW_FRESH;
    }
    if (fresh != head_p->fresh)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "a cached lookup's reply has %llu fresh rows, its head says %llu",
                                 (unsigned long long)fresh, (unsigned long long)head_p->fresh);
    *bytes_p = (size_t)ember_wire_rows_reply_bytes(unique, dim, head_p->fresh);
    return EMBER_OK;
}

/* ---- LOOKUPS ---------------------------------------------------------------- */

size_t ember_wire_lookup_padded_size(const ember_msg_lookup_t *head)
{
    return (size_t)ember_wire_pad(ember_wire_lookup_size(head));
}

void ember_wire_lookup_pack_padded(const ember_wire_lookup_t *lookup, void *message)
{
    ember_wire_lookup_pack(lookup, message);
}

size_t ember_wire_lookups_pack_iov(const ember_msg_lookups_t *head, const uint8_t *const *messages,
                                   size_t count, ember_iov_t *iov)
{
    iov[0] = (ember_iov_t){.buffer = head, .length = sizeof(*head)};
    for (size_t k = 0; k < count; k++) {
        ember_msg_lookup_t sub;
        memcpy(&sub, messages[k], sizeof(sub));
        iov[k + 1] =
                (ember_iov_t){.buffer = messages[k], .length = ember_wire_lookup_padded_size(&sub)};
    }
    return count + 1;
}

/* A count of tables an envelope may carry. */
static ember_status_t check_table_count(uint32_t count, const char *what, char *err,
                                        size_t err_length)
{
    if (count == 0 || count > EMBER_WIRE_MAX_TABLES)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s of %u tables (1 to %d)", what, count, EMBER_WIRE_MAX_TABLES);
    return EMBER_OK;
}

/* What an envelope says of every message in it. */
typedef struct {
    uint32_t trainer;
    uint64_t step;
} envelope_t;

/* Sub-message @k of an envelope: its trainer and step, and a table id none
 * before it (@ids[k]) had. */
static ember_status_t check_sub(const char *what, uint32_t table_id, uint32_t trainer,
                                uint64_t step, const envelope_t *envelope, const uint32_t *ids,
                                size_t k, char *err, size_t err_length)
{
    if (trainer != envelope->trainer || step != envelope->step)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %u: its %s of trainer %u step %llu is in a request of "
                                 "trainer %u step %llu",
                                 table_id, what, trainer, (unsigned long long)step,
                                 envelope->trainer, (unsigned long long)envelope->step);
    for (size_t j = 0; j < k; j++) {
        if (ids[j] == table_id)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table %u appears twice in one %s (entries %zu and %zu)",
                                     table_id, what, j, k);
    }
    return EMBER_OK;
}

/* Sub-lookup @k at @at of a LOOKUPS of @length bytes: its size from its
 * counts, checked against what is left, before the codec takes it (a
 * LOOKUP's size is a multiple of EMBER_WIRE_ALIGN: the next one is
 * aligned). */
static ember_status_t lookups_take_one(const uint8_t *data, size_t length, size_t at, size_t k,
                                       ember_wire_lookup_view_t *view, uint64_t *size_p, char *err,
                                       size_t err_length)
{
    ember_msg_lookup_t head;
    char why[200];
    if (length - at < sizeof(head))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "lookup %zu of the request: %zu bytes left, its header is %zu", k,
                                 length - at, sizeof(head));
    memcpy(&head, data + at, sizeof(head));
    uint64_t size = sizeof(head) + ember_wire_lookup_array_bytes(&head);
    if (size > length - at)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "table %u: lookup of %u bags, %u rows, %u indices needs %llu "
                                 "bytes, %zu left in the request",
                                 head.table_id, head.bags, head.unique, head.indices,
                                 (unsigned long long)size, length - at);
    ember_status_t status =
            ember_wire_lookup_unpack(data + at, (size_t)size, view, why, sizeof(why));
    if (status != EMBER_OK)
        return ember_status_text(err, err_length, status, "table %u: %s", head.table_id, why);
    *size_p = size;
    return EMBER_OK;
}

ember_status_t ember_wire_lookups_unpack(const void *data, size_t length,
                                         ember_wire_lookups_view_t *view, char *err,
                                         size_t err_length)
{
    const ember_msg_lookups_t *head = &view->head;
    uint32_t ids[EMBER_WIRE_MAX_TABLES];
    size_t at = sizeof(*head);

    EMBER_CHECK(
            ember_wire_head(data, length, &view->head, sizeof(view->head), NULL, err, err_length));
    EMBER_CHECK(check_table_count(head->count, "LOOKUPS", err, err_length));
    const envelope_t envelope = {.trainer = head->trainer, .step = head->step};
    for (size_t k = 0; k < head->count; k++) {
        ember_wire_lookup_view_t *sub = &view->lookups[k];
        uint64_t size = 0;
        EMBER_CHECK(lookups_take_one(data, length, at, k, sub, &size, err, err_length));
        EMBER_CHECK(check_sub("lookup", sub->head.table_id, sub->head.trainer, sub->head.step,
                              &envelope, ids, k, err, err_length));
        ids[k] = sub->head.table_id;
        if ((sub->head.flags ^ view->lookups[0].head.flags) & EMBER_LOOKUP_EVAL)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table %u: an evaluation lookup and a training one in one "
                                     "LOOKUPS",
                                     sub->head.table_id);
        at += (size_t)size;
    }
    if (at != length)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "LOOKUPS of %u tables in %zu bytes has %zu bytes after them",
                                 head->count, length, length - at);
    return EMBER_OK;
}

uint64_t ember_wire_lookups_reply_bytes(const ember_wire_lookup_view_t *lookups,
                                        const uint32_t *dims, size_t count)
{
    uint64_t bytes = 0;
    for (size_t k = 0; k < count; k++)
        bytes += ember_wire_lookups_part_bytes(&lookups[k].head, dims[k]);
    return bytes;
}

/* ---- GRAD ------------------------------------------------------------------- */

ember_status_t ember_wire_grad_unpack(const void *data, size_t length, ember_wire_grad_view_t *view,
                                      char *err, size_t err_length)
{
    ember_wire_rest_t rest = {0};
    EMBER_CHECK(
            ember_wire_head(data, length, &view->head, sizeof(view->head), &rest, err, err_length));
    view->grad = rest.body;
    view->grad_bytes = rest.body_bytes;
    return EMBER_OK;
}

/* ---- GRADS ------------------------------------------------------------------ */

size_t ember_wire_grads_head_size(uint32_t count)
{
    return sizeof(ember_msg_grads_t) + (size_t)count * sizeof(ember_msg_grad_t);
}

_Static_assert(sizeof(ember_msg_grads_t) % EMBER_WIRE_ALIGN == 0 &&
                       sizeof(ember_msg_grad_t) % EMBER_WIRE_ALIGN == 0,
               "a GRADS head keeps its gradients aligned");

void ember_wire_grads_pack_head(const ember_msg_grads_t *head, const ember_msg_grad_t *grads,
                                void *out)
{
    memcpy(out, head, sizeof(*head));
    memcpy((uint8_t *)out + sizeof(*head), grads, (size_t)head->count * sizeof(*grads));
}

ember_status_t ember_wire_grads_unpack(const void *data, size_t length,
                                       ember_wire_grads_view_t *view, char *err, size_t err_length)
{
    const ember_msg_grads_t *head = &view->head;
    uint32_t ids[EMBER_WIRE_MAX_TABLES];

    EMBER_CHECK(
            ember_wire_head(data, length, &view->head, sizeof(view->head), NULL, err, err_length));
    EMBER_CHECK(check_table_count(head->count, "GRADS", err, err_length));
    if (head->reserved != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "GRADS with reserved field %u", head->reserved);
    size_t head_size = ember_wire_grads_head_size(head->count);
    if (length < head_size)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "GRADS of %u tables in %zu bytes: its heads need %zu", head->count,
                                 length, head_size);
    memcpy(view->grads, (const uint8_t *)data + sizeof(*head),
           (size_t)head->count * sizeof(view->grads[0]));
    const envelope_t envelope = {.trainer = head->trainer, .step = head->step};
    for (size_t k = 0; k < head->count; k++) {
        const ember_msg_grad_t *sub = &view->grads[k];
        EMBER_CHECK(check_sub("gradient", sub->table_id, sub->trainer, sub->step, &envelope, ids, k,
                              err, err_length));
        if (sub->flags != head->flags)
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table %u: gradient flags %#x in a GRADS of flags %#x",
                                     sub->table_id, sub->flags, head->flags);
        ids[k] = sub->table_id;
    }
    view->bulk = (const uint8_t *)data + head_size;
    view->bulk_bytes = length - head_size;
    return EMBER_OK;
}

ember_status_t ember_wire_grads_split(const ember_wire_grads_view_t *view, const uint32_t *dims,
                                      ember_wire_grad_view_t *grads, char *err, size_t err_length)
{
    uint64_t need = 0;
    for (size_t k = 0; k < view->head.count; k++) {
        if (dims[k] == 0 || dims[k] > 65536) /* a table's: the sum below cannot wrap */
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "table %u: dim %u",
                                     view->grads[k].table_id, dims[k]);
        need += (uint64_t)view->grads[k].bags * dims[k] * sizeof(float);
    }
    if (need != view->bulk_bytes)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "GRADS of %u tables carries %zu bytes of gradients, their bags "
                                 "and dims need %llu",
                                 view->head.count, view->bulk_bytes, (unsigned long long)need);
    size_t at = 0;
    for (size_t k = 0; k < view->head.count; k++) {
        size_t bytes = (size_t)view->grads[k].bags * dims[k] * sizeof(float);
        grads[k] = (ember_wire_grad_view_t){
                .head = view->grads[k], .grad = view->bulk + at, .grad_bytes = bytes};
        at += bytes;
    }
    return EMBER_OK;
}

/* ---- checkpoints ------------------------------------------------------------ */

int ember_wire_ckpt_name_ok(const char *name, size_t length)
{
    size_t n = strnlen(name, length);
    return n > 0 && n < length && !memchr(name, '/', n) && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

ember_status_t ember_wire_ckpt_plan_unpack(const void *data, size_t length,
                                           ember_msg_ckpt_plan_t *plan, char *err,
                                           size_t err_length)
{
    EMBER_CHECK(ember_wire_exact(data, length, plan, sizeof(*plan), "checkpoint plan", err,
                                 err_length));
    if (!memchr(plan->root, '\0', sizeof(plan->root)))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "checkpoint plan: its directory is not terminated");
    return EMBER_OK;
}

ember_status_t ember_wire_ckpt_at_unpack(const void *data, size_t length, ember_msg_ckpt_at_t *at,
                                         char *err, size_t err_length)
{
    EMBER_CHECK(
            ember_wire_exact(data, length, at, sizeof(*at), "checkpoint step", err, err_length));
    if (at->step == 0 || at->stop > 1)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "checkpoint step %llu (stop %u)", (unsigned long long)at->step,
                                 at->stop);
    return EMBER_OK;
}

ember_status_t ember_wire_ckpt_at_take(const ember_rpc_req_t *req, ember_msg_ckpt_at_t *at,
                                       char *err, size_t err_length)
{
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    EMBER_CHECK(ember_wire_ckpt_at_unpack(data, length, at, err, err_length));
    if (ember_rpc_req_peer(req) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "only trainer0 names checkpoint steps, not rank %d",
                                 ember_rpc_req_peer(req));
    return EMBER_OK;
}

/* A request's end: a lost trainer0 is noticed by the job itself. */
static void request_sent(void *arg, ember_status_t status)
{
    (void)arg;
    if (status != EMBER_OK)
        ember_warn("checkpoint", "a checkpoint request to trainer0 was lost: %s",
                   ember_status_string(status));
}

ember_status_t ember_wire_ckpt_request_send(ember_tp_t *tp, int stop)
{
    static ember_msg_ckpt_request_t request;
    request.stop = stop != 0;
    ember_iov_t iov = {&request, sizeof(request)};
    return ember_rpc_send(tp, 0, EMBER_OP_CKPT_REQUEST, &iov, 1, NULL, request_sent, NULL);
}

ember_status_t ember_wire_ckpt_request_unpack(const void *data, size_t length,
                                              ember_msg_ckpt_request_t *request, char *err,
                                              size_t err_length)
{
    EMBER_CHECK(ember_wire_exact(data, length, request, sizeof(*request), "checkpoint request", err,
                                 err_length));
    if (request->stop > 1)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "checkpoint request: stop %u", request->stop);
    return EMBER_OK;
}

static int seconds_ok(double s)
{
    return isfinite(s) && s >= 0;
}

ember_status_t ember_wire_ckpt_done_unpack(const void *data, size_t length,
                                           ember_msg_ckpt_done_t *done, char *err,
                                           size_t err_length)
{
    EMBER_CHECK(ember_wire_exact(data, length, done, sizeof(*done), "checkpoint report", err,
                                 err_length));
    if (!ember_wire_ckpt_name_ok(done->name, sizeof(done->name)) ||
        !memchr(done->text, '\0', sizeof(done->text)))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "checkpoint report: a bad file name or text");
    if (!seconds_ok(done->copy_seconds) || !seconds_ok(done->wait_seconds) ||
        !seconds_ok(done->write_seconds) || done->step == 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "checkpoint report for %s: step %llu, bad times", done->name,
                                 (unsigned long long)done->step);
    return EMBER_OK;
}

ember_status_t ember_wire_table_restore_unpack(const void *data, size_t length,
                                               ember_wire_table_restore_view_t *view, char *err,
                                               size_t err_length)
{
    if (!data || length < sizeof(view->head))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE, "table restore: %zu bytes",
                                 length);
    memcpy(&view->head, data, sizeof(view->head));
    const uint64_t count = view->head.count;
    if (count == 0 || count > EMBER_WIRE_MAX_CKPT_FILES ||
        length - sizeof(view->head) != count * EMBER_CKPT_FILE_NAME_MAX)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "table restore: %llu files in %zu bytes",
                                 (unsigned long long)count, length);
    if (!memchr(view->head.dir, '\0', sizeof(view->head.dir)))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table restore: its directory is not terminated");
    view->names = (const char *)data + sizeof(view->head);
    for (uint64_t i = 0; i < count; i++) {
        if (!ember_wire_ckpt_name_ok(view->names + i * EMBER_CKPT_FILE_NAME_MAX,
                                     EMBER_CKPT_FILE_NAME_MAX))
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "table restore: file %llu's name is not a plain name",
                                     (unsigned long long)i);
    }
    return EMBER_OK;
}
