/*
 * fuzz_store: the bytes a rendezvous-store connection delivers, through the
 * server's request parser (transport/store.c, tp_store_request_parse, pure:
 * the server's loop calls it on what it has read so far).
 *
 * Input: records (fuzz/fuzz_input.h) building one connection's stream:
 *   op % 4 == 0  an authenticated request (tp_store_request_pack, the
 *                client's layout) from [op][key length][u16 value length]
 *                [flags: 1 wrong sequence, 2 key length + 256][u64 arg]
 *                [u64 timeout_ms][key bytes][value bytes]
 *   op % 4 == 1  bytes as they came
 *   op % 4 == 2  one bit flipped in the bytes not parsed yet ([u16 where][bit])
 *   op % 4 == 3  the connection closed: a new one (nonce and sequence anew)
 * With op bit 2, and at the end, the server's loop parses what the stream
 * holds by then (so a request can be cut, changed, or come in parts).
 *
 * Invariants: what is taken is exactly an untouched authenticated request
 * of ours with the connection's next sequence number, whole (its key and
 * value inside it, within the store's limits), and such a request is
 * taken; a request of another sequence, or with a bit changed, is refused;
 * a partial one asks for more, never more than the largest request; the
 * parser is pure (the same answer twice, the bytes unchanged).
 */
#include "fuzz/fuzz_input.h"
#include "transport/store.h"

#define MAX_SEGMENTS 64

/* A stretch of the stream: one of our requests, or bytes as they came. */
typedef struct {
    size_t start, length;
    int authentic; /* packed under the secret, for the sequence it was given */
    int in_sequence;
    uint64_t seq;
} segment_t;

typedef struct {
    tp_secret_t secret;
    uint8_t nonce[TP_STORE_NONCE_SIZE];
    uint64_t seq; /* the next request's */
    uint8_t *stream;
    uint8_t *sent; /* the stream as appended, before any bit flipped */
    size_t length, parsed;
    segment_t segments[MAX_SEGMENTS];
    size_t nsegments, front; /* segments[front]: the first not parsed */
} conn_t;

static void conn_open(conn_t *c, unsigned generation)
{
    free(c->stream);
    free(c->sent);
    tp_secret_t secret = c->secret;
    memset(c, 0, sizeof(*c));
    c->secret = secret;
    for (size_t i = 0; i < sizeof(c->nonce); i++)
        c->nonce[i] = (uint8_t)(generation * 31u + i);
}

static void append(conn_t *c, const uint8_t *bytes, size_t n, segment_t seg)
{
    if (c->nsegments == MAX_SEGMENTS || n == 0)
        return;
    uint8_t *grown = realloc(c->stream, c->length + n);
    FUZZ_CHECK(grown, "out of memory");
    c->stream = grown;
    grown = realloc(c->sent, c->length + n);
    FUZZ_CHECK(grown, "out of memory");
    c->sent = grown;
    memcpy(c->stream + c->length, bytes, n);
    memcpy(c->sent + c->length, bytes, n);
    seg.start = c->length;
    seg.length = n;
    c->segments[c->nsegments++] = seg;
    c->length += n;
}

static void add_request(conn_t *c, const uint8_t *p, size_t length)
{
    uint8_t fields[5 + 16] = {0};
    memcpy(fields, p, length < sizeof(fields) ? length : sizeof(fields));
    size_t key_length = fields[1] + ((fields[4] & 2) ? 256u : 0u);
    size_t value_length = (size_t)fields[2] | (size_t)fields[3] << 8;
    int64_t arg, timeout_ms;
    memcpy(&arg, fields + 5, 8);
    memcpy(&timeout_ms, fields + 13, 8);
    uint64_t seq = c->seq + (uint64_t)(fields[4] & 1);
    /* The key and value: the record's bytes after the fields, repeated. */
    const uint8_t *body = length > sizeof(fields) ? p + sizeof(fields) : fields;
    size_t body_length = length > sizeof(fields) ? length - sizeof(fields) : 1;
    uint8_t *key = malloc(key_length + value_length + 1), *value = key + key_length;
    FUZZ_CHECK(key, "out of memory");
    for (size_t i = 0; i < key_length + value_length; i++)
        key[i] = body[i % body_length];

    size_t size = tp_store_request_size(key_length, value_length);
    uint8_t *request = malloc(size);
    FUZZ_CHECK(request, "out of memory");
    size_t packed =
            tp_store_request_pack(&c->secret, c->nonce, seq, fields[0], (const char *)key,
                                  key_length, value, value_length, arg, timeout_ms, request);
    FUZZ_CHECK(packed == size, "a request packed in %zu bytes, its size %zu", packed, size);
    append(c, request, size,
           (segment_t){.authentic = 1, .in_sequence = !(fields[4] & 1), .seq = seq});
    /* The sequence moves on once per request sent, as the client's. */
    if (!(fields[4] & 1))
        c->seq++;
    free(request);
    free(key);
}

/* Whether a bit of @seg is not what was sent (two flips of one bit undo). */
static int touched(const conn_t *c, const segment_t *seg)
{
    return memcmp(c->stream + seg->start, c->sent + seg->start, seg->length) != 0;
}

/* A request of ours the parser must take: untouched, in sequence, valid. */
static int must_take(const conn_t *c, const segment_t *seg, const uint8_t *bytes)
{
    tp_store_head_t head;
    if (!seg->authentic || !seg->in_sequence || touched(c, seg))
        return 0;
    memcpy(&head, bytes, sizeof(head)); /* ours: a whole head at least */
    return head.op >= TP_STORE_OP_SET && head.op <= TP_STORE_OP_ARRIVE && head.key_length >= 1 &&
           head.key_length <= TP_STORE_MAX_KEY && head.value_length <= TP_STORE_MAX_VALUE;
}

/* The server's loop on what the stream holds; 0 once it closed it. */
static int serve(conn_t *c, uint64_t *expected_seq)
{
    while (c->parsed < c->length) {
        const uint8_t *at = c->stream + c->parsed;
        size_t left = c->length - c->parsed, need = 0, need2 = 0;
        tp_store_request_t req, again;
        const char *why = NULL, *why2 = NULL;
        ssize_t taken = tp_store_request_parse(&c->secret, c->nonce, *expected_seq, at, left, &req,
                                               &need, &why);
        ssize_t taken2 = tp_store_request_parse(&c->secret, c->nonce, *expected_seq, at, left,
                                                &again, &need2, &why2);
        FUZZ_CHECK(taken == taken2 && (taken != 0 || need == need2),
                   "the parser answered %zd then %zd", taken, taken2);
        const segment_t *front = c->front < c->nsegments ? &c->segments[c->front] : NULL;
        int starts_segment = front && front->start == c->parsed;
        if (taken > 0) {
            FUZZ_CHECK(starts_segment && front->authentic && front->in_sequence &&
                               !touched(c, front) && (size_t)taken == front->length,
                       "took %zd bytes at %zu that are not one untouched request of ours", taken,
                       c->parsed);
            FUZZ_CHECK(req.seq == *expected_seq && req.key_length >= 1 &&
                               req.key_length <= TP_STORE_MAX_KEY &&
                               req.value_length <= TP_STORE_MAX_VALUE &&
                               (size_t)taken ==
                                       tp_store_request_size(req.key_length, req.value_length),
                       "a request taken out of its limits");
            FUZZ_CHECK((const uint8_t *)req.key >= at &&
                               (const uint8_t *)req.key + req.key_length <= at + taken &&
                               (const uint8_t *)req.value >= at &&
                               (const uint8_t *)req.value + req.value_length <= at + taken,
                       "a request's key or value outside its bytes");
            c->parsed += (size_t)taken;
            c->front++;
            (*expected_seq)++;
            continue;
        }
        if (taken == 0) {
            FUZZ_CHECK(need > left &&
                               need <= tp_store_request_size(TP_STORE_MAX_KEY, TP_STORE_MAX_VALUE),
                       "waits for %zu bytes with %zu in hand", need, left);
            FUZZ_CHECK(!(starts_segment && front->length <= left && must_take(c, front, at)),
                       "a whole request of ours waits for more");
            return 1;
        }
        FUZZ_CHECK(why != NULL, "a refusal without its cause");
        FUZZ_CHECK(!(starts_segment && must_take(c, front, at)), "a request of ours refused: %s",
                   why);
        return 0; /* the server closes the connection */
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    static conn_t conn;
    uint64_t expected_seq = 0;
    unsigned generation = 0;
    uint8_t *payload;
    size_t length;
    int op;

    memcpy(conn.secret.bytes, "fuzz-job-secret", 15);
    conn.secret.length = 15;
    conn_open(&conn, generation);
    while ((op = fuzz_record(&in, &payload, &length)) >= 0) {
        switch (op & 3) {
        case 0: add_request(&conn, payload, length); break;
        case 1: append(&conn, payload, length, (segment_t){0}); break;
        case 2:
            if (conn.length > conn.parsed && length >= 2) {
                size_t where = conn.parsed + ((size_t)payload[0] | (size_t)payload[1] << 8) %
                                                     (conn.length - conn.parsed);
                conn.stream[where] ^= (uint8_t)(1u << ((length > 2 ? payload[2] : 0) & 7));
            }
            break;
        default:
            (void)serve(&conn, &expected_seq); /* what it had before it closed */
            conn_open(&conn, ++generation);
            expected_seq = 0;
            break;
        }
        free(payload);
        if ((op & 4) && !serve(&conn, &expected_seq)) {
            conn_open(&conn, ++generation);
            expected_seq = 0;
        }
    }
    (void)serve(&conn, &expected_seq);
    free(conn.stream);
    free(conn.sent);
    conn.stream = conn.sent = NULL;
    return 0;
}
