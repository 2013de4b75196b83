/*
 * fuzz_grad: GRAD messages (engine/wire/protocol.h: header, then the pooled
 * output's gradient) into a PS shard (fuzz/fuzz_table.h) whose lookups the
 * input also makes, through ember_shard_lookup and ember_shard_grad as
 * engine/ps/ps.c serves them, sync and async.
 *
 * Input: the table's three bytes, then records (fuzz/fuzz_input.h):
 *   op % 4 == 0  a well-formed lookup built from the payload:
 *                [trainer][step][flags: 1 weights, 2 max, 4 fp16 reply]
 *                [bags] then one byte per index (its row)
 *   op % 4 == 1  a GRAD message as it came (header, floats; op bit 2: one
 *                byte off alignment)
 *   op % 4 == 2  a gradient of the right size for a trainer's open lookup:
 *                [trainer][flags] then one byte per value ((b - 128) / 16)
 *   op % 4 == 3  the trainer of payload[0] lost (ember_shard_drop_trainer)
 *
 * Invariants: a refused gradient changes no row and applies no step; an
 * accepted one without EMBER_GRAD_APPLY changes nothing; rows no applied
 * lookup touched never change; with SGD, an applied step is
 * row -= lr * (the reduced gradient the harness computes from the lookups'
 * rows, weights and maxima), within rounding.
 */
#include "fuzz/fuzz_table.h"

#include "engine/ops/half.h"

#define MAX_TRAINERS 4
#define MAX_BAGS     8
#define MAX_ENTRIES  64

typedef enum {
    CTX_CLOSED,
    CTX_OPEN,
    CTX_UNKNOWN
} ctx_state_t;

/* What the harness knows of a trainer's lookup (its context on the PS). */
typedef struct {
    ctx_state_t state;
    uint64_t step;
    uint32_t bags, flags;
    size_t n;
    uint32_t bag_of[MAX_ENTRIES];
    int64_t local_of[MAX_ENTRIES];
    float weight[MAX_ENTRIES];
    uint32_t begin[MAX_BAGS + 1]; /* the bag's first entry */
    int64_t *winner;              /* max: [bags * dim] local row, or -1 */
} lookup_t;

/* A trainer's gradient waiting for the step (sync), as rows of the shard. */
typedef struct {
    int valid;
    int known; /* its values small and finite: the SGD check applies */
    uint64_t step;
    float *rows; /* [local_rows * dim] */
    uint8_t *touched;
} pending_t;

typedef struct {
    fuzz_table_t ft;
    lookup_t lookups[MAX_TRAINERS];
    pending_t pending[MAX_TRAINERS];
    pending_t applying; /* async */
} harness_t;

/* ---------------------------------------------------------------- lookups */

/* A lookup as the payload of an op % 4 == 0 record gives it: the entries
 * spread over the bags in order, each of a local row of this shard. */
typedef struct {
    uint32_t trainer, bags;
    uint8_t flags;
    uint64_t step;
    size_t n;
    int64_t local[MAX_ENTRIES];
    float weights[MAX_ENTRIES];
    uint32_t counts[MAX_BAGS], offsets[MAX_BAGS], places[MAX_ENTRIES];
} lookup_input_t;

static void lookup_parse(const fuzz_table_t *ft, const uint8_t *p, size_t length,
                         lookup_input_t *in)
{
    in->trainer = (length > 0 ? p[0] : 0) % ft->spec.trainers;
    in->step = length > 1 ? p[1] : 0;
    in->flags = length > 2 ? p[2] & 7 : 0;
    in->bags = (length > 3 ? p[3] : 1) % (MAX_BAGS + 1);
    in->n = length > 4 ? length - 4 : 0;
    if ((in->flags & 3) == 3)
        in->flags &= (uint8_t)~1u; /* weights need sum mode */
    if (in->n > MAX_ENTRIES)
        in->n = MAX_ENTRIES;
    if (in->bags == 0 || ft->local_rows == 0)
        in->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        in->local[i] = p[4 + i] % ft->local_rows;
        in->weights[i] = (float)((int)(p[4 + i] % 7) - 3) * 0.25f;
    }
    for (uint32_t b = 0, i = 0; b < in->bags; b++) {
        in->offsets[b] = i;
        size_t end = (size_t)(b + 1) * in->n / in->bags;
        for (uint32_t k = 0; i < end; i++, k++)
            in->places[i] = k;
        in->counts[b] = i - in->offsets[b];
    }
}

/* The distinct global rows of @in, increasing, and each index's slot among
 * them (what ember_bag_dedup gives a trainer). */
static size_t lookup_distinct(const fuzz_table_t *ft, const lookup_input_t *in, int64_t *rows,
                              int64_t *inverse)
{
    int64_t unique[MAX_ENTRIES];
    size_t nunique = 0;
    for (size_t i = 0; i < in->n; i++) {
        int seen = 0;
        for (size_t u = 0; u < nunique; u++)
            seen |= unique[u] == in->local[i];
        if (!seen)
            unique[nunique++] = in->local[i];
    }
    for (size_t a = 1; a < nunique; a++) {
        for (size_t b = a; b > 0 && unique[b - 1] > unique[b]; b--) {
            int64_t swap = unique[b];
            unique[b] = unique[b - 1];
            unique[b - 1] = swap;
        }
    }
    for (size_t i = 0; i < in->n; i++) {
        for (uint32_t u = 0; u < nunique; u++)
            if (unique[u] == in->local[i])
                inverse[i] = u;
    }
    for (size_t u = 0; u < nunique; u++)
        rows[u] = unique[u] * ft->spec.num_shards + ft->spec.shard;
    return nunique;
}

/* @in packed by the codec as a trainer packs it, taken by it as the PS
 * takes it, and looked up into @out. */
static ember_status_t lookup_send(fuzz_table_t *ft, const lookup_input_t *in, float *out, char *err,
                                  size_t err_length)
{
    int64_t rows[MAX_ENTRIES], inverse[MAX_ENTRIES];
    size_t nunique = lookup_distinct(ft, in, rows, inverse);
    ember_wire_lookup_t lookup = {.head = {.trainer = in->trainer,
                                           .step = in->step,
                                           .flags = in->flags,
                                           .bags = in->bags,
                                           .unique = (uint32_t)nunique,
                                           .indices = (uint32_t)in->n},
                                  .counts = in->counts,
                                  .rows = rows,
                                  .inverse = inverse,
                                  .weights = in->weights,
                                  .places = in->places};
    size_t size = ember_wire_lookup_size(&lookup.head);
    uint8_t *message = malloc(size + 1);
    FUZZ_CHECK(message, "out of memory");
    ember_wire_lookup_pack(&lookup, message);

    ember_wire_lookup_view_t view;
    ember_status_t status = ember_wire_lookup_unpack(message, size, &view, err, err_length);
    FUZZ_CHECK(status == EMBER_OK, "the codec refused a well-formed lookup: %s", err);
    status = ember_shard_lookup(ft->table, &view, out, err, err_length);
    free(message);
    return status;
}

/* An accepted lookup's context as the harness keeps it; @out: its reply. */
static void lookup_record(const fuzz_table_t *ft, lookup_t *lk, const lookup_input_t *in,
                          const float *out)
{
    const uint32_t bags = in->bags;
    const size_t n = in->n;
    free(lk->winner);
    *lk = (lookup_t){.state = CTX_OPEN, .step = in->step, .bags = bags, .flags = in->flags, .n = n};
    for (size_t i = 0; i < n; i++) {
        lk->local_of[i] = in->local[i];
        lk->weight[i] = (in->flags & EMBER_LOOKUP_WEIGHTS) ? in->weights[i] : 1.0f;
    }
    for (uint32_t b = 0; b < bags; b++) {
        lk->begin[b] = in->offsets[b];
        for (size_t i = in->offsets[b]; i < (b + 1 < bags ? in->offsets[b + 1] : n); i++)
            lk->bag_of[i] = b;
    }
    lk->begin[bags] = (uint32_t)n;
    if (!(in->flags & EMBER_LOOKUP_MAX))
        return;
    /* Each maximum's place names its entry: the winner's row. */
    const uint32_t *won = (const uint32_t *)(out + (size_t)bags * ft->dim);
    lk->winner = malloc((size_t)bags * ft->dim * sizeof(int64_t) + 1);
    FUZZ_CHECK(lk->winner, "out of memory");
    for (uint32_t b = 0; b < bags; b++) {
        for (uint32_t d = 0; d < ft->dim; d++) {
            uint32_t place = won[b * ft->dim + d];
            size_t i = lk->begin[b] + (size_t)place;
            FUZZ_CHECK(place == EMBER_PLACE_NONE || i < lk->begin[b + 1],
                       "bag %u col %u: place %u beyond the bag", b, d, place);
            lk->winner[b * ft->dim + d] = place == EMBER_PLACE_NONE ? -1 : lk->local_of[i];
        }
    }
}

static void lookup_make(harness_t *h, const uint8_t *p, size_t length)
{
    fuzz_table_t *ft = &h->ft;
    lookup_input_t in;
    char err[320];

    lookup_parse(ft, p, length, &in);
    lookup_t *lk = &h->lookups[in.trainer];
    float *out = malloc((size_t)in.bags * ft->dim * 8 + 1);
    FUZZ_CHECK(out, "out of memory");
    ember_status_t status = lookup_send(ft, &in, out, err, sizeof(err));
    if (lk->state != CTX_UNKNOWN)
        FUZZ_CHECK((status == EMBER_OK) == (lk->state == CTX_CLOSED),
                   "trainer %u: a well-formed lookup %s over a %s context (%s)", in.trainer,
                   status == EMBER_OK ? "accepted" : "refused",
                   lk->state == CTX_OPEN ? "open" : "closed", err);
    if (status == EMBER_OK)
        lookup_record(ft, lk, &in, out);
    free(out);
}

/* ------------------------------------------------------------- gradients */

/* The rows' gradient of @lk's lookup given the pooled output's @grad, added
 * into @p. */
static void gradient_rows(const fuzz_table_t *ft, const lookup_t *lk, const float *grad,
                          float scale, pending_t *p)
{
    const size_t dim = ft->dim;
    if (lk->flags & EMBER_LOOKUP_MAX) {
        /* Every row of the lookup is in the step (the backward's distinct
         * rows): one that won no maximum with a zero gradient, which moves
         * it still under a stateful optimizer (Adam's moments). */
        for (size_t i = 0; i < lk->n; i++)
            p->touched[lk->local_of[i]] = 1;
        for (size_t b = 0; b < lk->bags; b++) {
            for (size_t d = 0; d < dim; d++) {
                int64_t row = lk->winner[b * dim + d];
                if (row < 0)
                    continue;
                p->rows[(size_t)row * dim + d] += scale * grad[b * dim + d];
                p->touched[row] = 1;
            }
        }
        return;
    }
    for (size_t i = 0; i < lk->n; i++) {
        int64_t row = lk->local_of[i];
        for (size_t d = 0; d < dim; d++)
            p->rows[(size_t)row * dim + d] +=
                    scale * lk->weight[i] * grad[(size_t)lk->bag_of[i] * dim + d];
        p->touched[row] = 1;
    }
}

static void pending_clear(const fuzz_table_t *ft, pending_t *p)
{
    memset(p->rows, 0, ft->values * sizeof(float) + 1);
    memset(p->touched, 0, (size_t)ft->local_rows + 1);
    p->valid = 0;
}

/* After an applied step of @count gradients: rows none of them touched are
 * as they were; with SGD each touched one moved by -lr * its gradient. */
static void check_applied(harness_t *h, pending_t *const *applied, size_t count)
{
    fuzz_table_t *ft = &h->ft;
    const int sgd = ft->spec.optimizer.kind == EMBER_OPT_SGD;
    const int half = ft->spec.dtype == EMBER_DTYPE_F16;
    int values_known = 1;

    for (size_t k = 0; k < count; k++)
        values_known &= applied[k]->known;
    fuzz_table_read(ft, ft->after);
    for (int64_t r = 0; r < ft->local_rows; r++) {
        int touched = 0;
        for (size_t k = 0; k < count; k++)
            touched |= applied[k]->touched[r];
        for (uint32_t d = 0; d < ft->dim; d++) {
            size_t at = (size_t)r * ft->dim + d;
            float old = ft->before[at], now = ft->after[at];
            if (!touched) {
                FUZZ_CHECK(memcmp(&old, &now, sizeof(old)) == 0,
                           "row %lld col %u changed (%g -> %g) but no gradient touched it",
                           (long long)r, d, old, now);
                continue;
            }
            if (!sgd || !values_known)
                continue;
            double g = 0.0, size = fabs(old);
            for (size_t k = 0; k < count; k++) {
                g += applied[k]->rows[at];
                size += FUZZ_TABLE_LR * fabs(applied[k]->rows[at]);
            }
            double want = old - FUZZ_TABLE_LR * g;
            double tol = half ? 2e-3 * size + 1e-3 : 1e-5 * size + 1e-6;
            /* fp16 rows round a step past 65504 to infinity, as a half
             * tensor in PyTorch does. */
            if (half && fabs(want) >= 65504.0 - tol && isinf(now) && (now > 0) == (want > 0))
                continue;
            FUZZ_CHECK(fabs(now - want) <= tol,
                       "row %lld col %u: SGD gave %.9g, the gradients say %.9g "
                       "(from %.9g)",
                       (long long)r, d, now, want, old);
        }
    }
}

/* One gradient message, and what it must have done. */
static void grad_one(harness_t *h, const ember_msg_grad_t *msg, const void *grad, size_t length)
{
    fuzz_table_t *ft = &h->ft;
    const int sync = ft->spec.consistency == EMBER_SYNC;
    char err[320];
    int applied = 0;
    uint64_t step_before = ember_shard_next_step(ft->table);

    err[0] = '\0';
    fuzz_table_snapshot(ft);
    ember_wire_grad_view_t view = {.head = *msg, .grad = grad, .grad_bytes = length};
    ember_status_t status = ember_shard_grad(ft->table, &view, &applied, err, sizeof(err));
    lookup_t *lk = msg->trainer < ft->spec.trainers ? &h->lookups[msg->trainer] : NULL;
    if (status != EMBER_OK) {
        fuzz_table_check_unchanged(ft, "a refused gradient");
        FUZZ_CHECK(!applied && ember_shard_next_step(ft->table) == step_before,
                   "a refused gradient applied a step");
        FUZZ_CHECK(err[0] != '\0', "a gradient refused (%s) without its cause",
                   ember_status_string(status));
        if (lk && status == EMBER_ERR_NUMERIC)
            lk->state = CTX_CLOSED; /* the step is void */
        else if (lk && status != EMBER_ERR_INVALID_PARAM && status != EMBER_ERR_BAD_MESSAGE)
            lk->state = CTX_UNKNOWN;
        return;
    }
    FUZZ_CHECK(lk && lk->state != CTX_CLOSED,
               "trainer %u: a gradient accepted without an open lookup", msg->trainer);
    FUZZ_CHECK(msg->step == lk->step && msg->bags == lk->bags &&
                       length == (size_t)lk->bags * ft->dim * sizeof(float),
               "trainer %u: a gradient accepted for another lookup", msg->trainer);
    lk->state = CTX_CLOSED;
    if (!(msg->flags & EMBER_GRAD_APPLY)) {
        FUZZ_CHECK(!applied, "a gradient without EMBER_GRAD_APPLY applied");
        fuzz_table_check_unchanged(ft, "a gradient without EMBER_GRAD_APPLY");
        return;
    }
    /* The harness's own reduction of the same gradient. */
    float *values = malloc(length + 1);
    FUZZ_CHECK(values, "out of memory");
    memcpy(values, grad, length);
    float scale = sync && ft->spec.sparse_reduce == EMBER_REDUCE_MEAN
                          ? 1.0f / (float)ft->spec.trainers
                          : 1.0f;
    pending_t *mine = sync ? &h->pending[msg->trainer] : &h->applying;
    FUZZ_CHECK(!mine->valid, "trainer %u: a second gradient taken while one waits", msg->trainer);
    pending_clear(ft, mine);
    gradient_rows(ft, lk, values, scale, mine);
    mine->known = fuzz_finite(values, length / sizeof(float), 1e6f);
    free(values);
    mine->valid = 1;
    mine->step = msg->step;

    if (!sync) {
        FUZZ_CHECK(applied, "an async gradient not applied");
        pending_t *one[] = {mine};
        check_applied(h, one, 1);
        mine->valid = 0;
        return;
    }
    int complete = 1;
    for (uint32_t t = 0; t < ft->spec.trainers; t++)
        complete &= h->pending[t].valid && h->pending[t].step == step_before;
    FUZZ_CHECK(applied == complete, "sync step %llu %s with %s gradient in",
               (unsigned long long)step_before, applied ? "applied" : "not applied",
               complete ? "every" : "not every");
    if (!applied) {
        fuzz_table_check_unchanged(ft, "a sync gradient still waiting for others");
        return;
    }
    FUZZ_CHECK(ember_shard_next_step(ft->table) == step_before + 1,
               "an applied sync step did not advance the step");
    pending_t *all[MAX_TRAINERS];
    for (uint32_t t = 0; t < ft->spec.trainers; t++)
        all[t] = &h->pending[t];
    check_applied(h, all, ft->spec.trainers);
    for (uint32_t t = 0; t < ft->spec.trainers; t++)
        h->pending[t].valid = 0;
}

/* A gradient built for trainer payload[0]'s open lookup. */
static void grad_fitting(harness_t *h, const uint8_t *p, size_t length)
{
    fuzz_table_t *ft = &h->ft;
    uint32_t trainer = (length > 0 ? p[0] : 0) % ft->spec.trainers;
    const lookup_t *lk = &h->lookups[trainer];
    ember_msg_grad_t msg = {.trainer = trainer,
                            .step = lk->step,
                            .flags = length > 1 ? p[1] & 1 : 0,
                            .bags = lk->bags};
    size_t count = (size_t)lk->bags * ft->dim;
    float *grad = malloc(count * sizeof(float) + 1);

    FUZZ_CHECK(grad, "out of memory");
    for (size_t i = 0; i < count; i++)
        grad[i] = ((2 + i < length ? (float)p[2 + i] : 128.0f) - 128.0f) / 16.0f;
    grad_one(h, &msg, grad, count * sizeof(float));
    free(grad);
}

/* A GRAD message as it came, through the codec; @shift bytes off alignment. */
static void grad_raw(harness_t *h, const uint8_t *p, size_t length, int shift)
{
    uint8_t *copy = malloc(length + (size_t)shift + 1);
    ember_wire_grad_view_t view;
    char err[160] = "";

    FUZZ_CHECK(copy, "out of memory");
    memcpy(copy + shift, p, length);
    if (ember_wire_grad_unpack(copy + shift, length, &view, err, sizeof(err)) == EMBER_OK) {
        grad_one(h, &view.head, view.grad, view.grad_bytes);
    } else {
        FUZZ_CHECK(length < sizeof(view.head) && err[0],
                   "the codec refused a %zu-byte gradient: %s", length, err);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    harness_t h;
    uint8_t *payload;
    size_t length;
    int op;

    memset(&h, 0, sizeof(h));
    fuzz_table_open(&h.ft, &in);
    for (uint32_t t = 0; t <= MAX_TRAINERS; t++) {
        pending_t *p = t < MAX_TRAINERS ? &h.pending[t] : &h.applying;
        p->rows = malloc(h.ft.values * sizeof(float) + 1);
        p->touched = malloc((size_t)h.ft.local_rows + 1);
        FUZZ_CHECK(p->rows && p->touched, "out of memory");
        pending_clear(&h.ft, p);
    }
    while ((op = fuzz_record(&in, &payload, &length)) >= 0) {
        switch (op & 3) {
        case 0: lookup_make(&h, payload, length); break;
        case 1: grad_raw(&h, payload, length, (op >> 2) & 1); break;
        case 2: grad_fitting(&h, payload, length); break;
        default: {
            uint32_t t = (length ? payload[0] : 0) % h.ft.spec.trainers;
            ember_shard_drop_trainer(h.ft.table, t);
            h.lookups[t].state = CTX_CLOSED;
            break;
        }
        }
        free(payload);
    }
    for (uint32_t t = 0; t <= MAX_TRAINERS; t++) {
        pending_t *p = t < MAX_TRAINERS ? &h.pending[t] : &h.applying;
        free(p->rows);
        free(p->touched);
        if (t < MAX_TRAINERS)
            free(h.lookups[t].winner);
    }
    fuzz_table_close(&h.ft);
    return 0;
}
