/*
 * engine/wire/codec: every engine message packed and unpacked in one place.
 *
 * A message is a fixed header (engine/wire/protocol.h) and the arrays its
 * counts give.  Packing lays the arrays out as protocol.h says, as a list of
 * iovs the transport sends without a copy or, for LOOKUP, built in one
 * buffer; unpacking copies the header out and checks every array's bytes
 * against the counts at full width (64-bit sums of 32-bit counts) before
 * anything is read, then gives each array where it lies.  Arrays are not
 * aligned on the wire: read them with the ember_wire_load_* functions.
 *
 * The unpack functions are pure (no transport, no logging), so the handlers
 * and the fuzzers (fuzz/) run exactly the same checks.  Each refusal leaves
 * its cause in @err and returns the status the receiver answers with.
 */
#ifndef EMBER_ENGINE_WIRE_CODEC_H
#define EMBER_ENGINE_WIRE_CODEC_H

#include "engine/wire/protocol.h"

#include <ember/status.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- unaligned loads ------------------------------------------------------ */

static inline uint32_t ember_wire_load_u32(const uint8_t *array, size_t i)
{
    uint32_t value;
    memcpy(&value, array + 4 * i, sizeof(value));
    return value;
}

static inline int64_t ember_wire_load_i64(const uint8_t *array, size_t i)
{
    int64_t value;
    memcpy(&value, array + 8 * i, sizeof(value));
    return value;
}

static inline float ember_wire_load_f32(const uint8_t *array, size_t i)
{
    float value;
    memcpy(&value, array + 4 * i, sizeof(value));
    return value;
}

/* ---- any message: a fixed header and what follows it ---------------------- */

/* A received message: its header copied out, the rest where it lies. */
typedef struct {
    const uint8_t *body; /* the bytes after the header (borrowed) */
    size_t body_bytes;
} ember_wire_rest_t;

/**
 * Copy the @size-byte header at the front of @length bytes at @data into
 * @head; @rest_p (may be NULL): what follows it.  Errors: ERR_BAD_MESSAGE
 * (shorter than its header).
 */
ember_status_t ember_wire_head(const void *data, size_t length, void *head, size_t size,
                               ember_wire_rest_t *rest_p, char *err, size_t err_length);

/** The same for a message that is exactly its header (EPOCH_REPORT, PS_STATS). */
ember_status_t ember_wire_exact(const void *data, size_t length, void *head, size_t size,
                                const char *what, char *err, size_t err_length);

/**
 * A header and a body sent as they are: fills @iov (2 entries; a NULL body
 * or 0 bytes: 1) and returns how many it used.
 */
size_t ember_wire_pack_iov(const void *head, size_t size, const void *body, size_t body_bytes,
                           ember_iov_t iov[2]);

/* ---- LOOKUP ----------------------------------------------------------------- */

/* Where each array of a LOOKUP lies, in bytes from the message's start. */
typedef struct {
    size_t offsets, rows, slots;
    size_t extra; /* weights (EMBER_LOOKUP_WEIGHTS) or places (EMBER_LOOKUP_MAX) */
    size_t size;  /* of the whole message */
    int has_extra;
} ember_wire_lookup_layout_t;

/** The layout @head's counts and flags give (64-bit: the counts may be a
 * forger's; 32-bit counts cannot overflow it). */
void ember_wire_lookup_layout(const ember_msg_lookup_t *head, ember_wire_lookup_layout_t *layout);

/** Bytes of a LOOKUP's arrays (after the header), as @head's counts say. */
uint64_t ember_wire_lookup_array_bytes(const ember_msg_lookup_t *head);

/** Offset of a max lookup's places in its reply: after the values, 4-byte
 * aligned. */
uint64_t ember_wire_lookup_places_at(const ember_msg_lookup_t *head, uint32_t dim);

/** Bytes of a LOOKUP's reply for a table of @dim (its pooled values, and
 * max mode's places). */
uint64_t ember_wire_lookup_reply_bytes(const ember_msg_lookup_t *head, uint32_t dim);

/** Offset of a table's version (uint64: the steps it had applied when it
 * served the lookup) in its part of a LOOKUPS reply: its LOOKUP reply
 * padded to EMBER_WIRE_ALIGN. */
uint64_t ember_wire_lookup_version_at(const ember_msg_lookup_t *head, uint32_t dim);

/** Bytes of a table's part of a LOOKUPS reply: its LOOKUP reply, padded,
 * then its version; a multiple of EMBER_WIRE_ALIGN. */
uint64_t ember_wire_lookups_part_bytes(const ember_msg_lookup_t *head, uint32_t dim);

/* A LOOKUP as its sender has it: a shard's part of a batch, split and
 * deduplicated (ember_bag_dedup's unique rows and inverse map). */
typedef struct {
    ember_msg_lookup_t head; /* flags and counts: bags, unique, indices */
    const uint32_t *counts;  /* [bags] entries of each bag on this shard */
    const int64_t *rows;     /* [unique] the distinct global rows, sorted */
    const int64_t *inverse;  /* [indices] rows[inverse[i]] is entry i's row */
    const float *weights;    /* [indices] with EMBER_LOOKUP_WEIGHTS */
    const uint32_t *places;  /* [indices] with EMBER_LOOKUP_MAX */
} ember_wire_lookup_t;

/** Bytes of the whole message @head describes (header and arrays). */
size_t ember_wire_lookup_size(const ember_msg_lookup_t *head);

/** Write @lookup into @message, ember_wire_lookup_size(&lookup->head) bytes. */
void ember_wire_lookup_pack(const ember_wire_lookup_t *lookup, void *message);

/* A received LOOKUP: the header, and its arrays where they lie (read with
 * ember_wire_load_*); weights and places NULL when the flags have none. */
typedef struct {
    ember_msg_lookup_t head;
    const uint8_t *offsets, *rows, *slots, *weights, *places;
} ember_wire_lookup_view_t;

/**
 * Take a LOOKUP: known flags (weights only with sum), and exactly the bytes
 * its counts say.  What the arrays hold is the table's to check (it knows
 * its rows).  Errors: ERR_BAD_MESSAGE (short, or counts that do not match
 * the size), ERR_INVALID_PARAM (flags).
 */
ember_status_t ember_wire_lookup_unpack(const void *data, size_t length,
                                        ember_wire_lookup_view_t *view, char *err,
                                        size_t err_length);

/* ---- LOOKUPS: every table of a step on one PS -------------------------- */

/** @bytes rounded up to EMBER_WIRE_ALIGN (64-bit: a forger's sizes). */
static inline uint64_t ember_wire_pad(uint64_t bytes)
{
    return (bytes + (EMBER_WIRE_ALIGN - 1)) & ~(uint64_t)(EMBER_WIRE_ALIGN - 1);
}

/** Bytes of @head's LOOKUP as a LOOKUPS carries it: padded. */
size_t ember_wire_lookup_padded_size(const ember_msg_lookup_t *head);

/** ember_wire_lookup_pack, then its padding zeroed:
 * ember_wire_lookup_padded_size(&lookup->head) bytes at @message. */
void ember_wire_lookup_pack_padded(const ember_wire_lookup_t *lookup, void *message);

/**
 * A LOOKUPS as iovs (@iov: @count + 1 entries; returns how many it used):
 * @head, then each of @count LOOKUPs packed by
 * ember_wire_lookup_pack_padded (@messages[k], borrowed until sent).
 */
size_t ember_wire_lookups_pack_iov(const ember_msg_lookups_t *head, const uint8_t *const *messages,
                                   size_t count, ember_iov_t *iov);

/* A received LOOKUPS: the envelope, and each table's LOOKUP as
 * ember_wire_lookup_unpack takes it, in the request's order. */
typedef struct {
    ember_msg_lookups_t head;
    ember_wire_lookup_view_t lookups[EMBER_WIRE_MAX_TABLES]; /* [head.count] */
} ember_wire_lookups_view_t;

/**
 * Take a LOOKUPS: a known count (1 .. EMBER_WIRE_MAX_TABLES); each LOOKUP
 * whole inside the message (its size from its counts at full width before
 * anything of it is read) and taken by ember_wire_lookup_unpack; each of
 * the envelope's trainer and step; distinct table ids; EMBER_LOOKUP_EVAL
 * on all or none; and the padded LOOKUPs end exactly where the message
 * does.  Errors: ERR_BAD_MESSAGE (sizes), ERR_INVALID_PARAM (the rest),
 * naming the table.
 */
ember_status_t ember_wire_lookups_unpack(const void *data, size_t length,
                                         ember_wire_lookups_view_t *view, char *err,
                                         size_t err_length);

/** Bytes of a LOOKUPS reply: each of @count LOOKUPs' part for its table's
 * @dims[k] (ember_wire_lookups_part_bytes). */
uint64_t ember_wire_lookups_reply_bytes(const ember_wire_lookup_view_t *lookups,
                                        const uint32_t *dims, size_t count);

/* ---- GRAD, TABLE_LOAD: a header and floats -------------------------------- */

/* A received GRAD: the header and the pooled output's gradient (its size is
 * the table's to check against its dim). */
typedef struct {
    ember_msg_grad_t head;
    const uint8_t *grad;
    size_t grad_bytes;
} ember_wire_grad_view_t;

ember_status_t ember_wire_grad_unpack(const void *data, size_t length, ember_wire_grad_view_t *view,
                                      char *err, size_t err_length);

/* ---- GRADS: the gradients of a LOOKUPS ------------------------------------ */

/** Bytes of a GRADS head of @count tables: the envelope and the GRAD heads
 * (a multiple of EMBER_WIRE_ALIGN: the gradients after it are aligned). */
size_t ember_wire_grads_head_size(uint32_t count);

/** Write the GRADS head (@head, then @grads[head->count]) into @out,
 * ember_wire_grads_head_size(head->count) bytes. */
void ember_wire_grads_pack_head(const ember_msg_grads_t *head, const ember_msg_grad_t *grads,
                                void *out);

/* A received GRADS: the envelope and the GRAD heads copied out, the
 * gradients where they lie (each table's size is its dim's, which only the
 * PS knows: ember_wire_grads_split). */
typedef struct {
    ember_msg_grads_t head;
    ember_msg_grad_t grads[EMBER_WIRE_MAX_TABLES]; /* [head.count] */
    const uint8_t *bulk;
    size_t bulk_bytes;
} ember_wire_grads_view_t;

/**
 * Take a GRADS: a known count, reserved 0, the heads all there, each of the
 * envelope's trainer, step and flags, distinct table ids.  Errors:
 * ERR_BAD_MESSAGE (short), ERR_INVALID_PARAM (the rest, naming the table).
 */
ember_status_t ember_wire_grads_unpack(const void *data, size_t length,
                                       ember_wire_grads_view_t *view, char *err, size_t err_length);

/**
 * Each table's gradient of @view: table k's is float[bags_k * @dims[k]]
 * (@dims: the tables', 1 to 65536), back to back; they must fill the bulk
 * exactly (64-bit sums).  Fills @grads[view->head.count] (pointing into the
 * message).  Errors: ERR_BAD_MESSAGE (naming the sizes), ERR_INVALID_PARAM
 * (a dim out of range).
 */
ember_status_t ember_wire_grads_split(const ember_wire_grads_view_t *view, const uint32_t *dims,
                                      ember_wire_grad_view_t *grads, char *err, size_t err_length);

/* ---- checkpoints ------------------------------------------------------------ */

/* A plain name for a file in a checkpoint's directory: NUL-terminated in
 * @length bytes, not empty, no '/', not "." or "..". */
int ember_wire_ckpt_name_ok(const char *name, size_t length);

/** Take a CKPT_PLAN: exactly one, its root NUL-terminated.  Errors:
 * ERR_BAD_MESSAGE (its size), ERR_INVALID_PARAM (the root). */
ember_status_t ember_wire_ckpt_plan_unpack(const void *data, size_t length,
                                           ember_msg_ckpt_plan_t *plan, char *err,
                                           size_t err_length);

/** Take a CKPT_AT: exactly one, a step of at least 1 and stop 0 or 1. */
ember_status_t ember_wire_ckpt_at_unpack(const void *data, size_t length, ember_msg_ckpt_at_t *at,
                                         char *err, size_t err_length);

/** A CKPT_AT as its handler takes it: unpacked, and from trainer0 (rank
 * 0), the one rank that names checkpoint steps. */
ember_status_t ember_wire_ckpt_at_take(const ember_rpc_req_t *req, ember_msg_ckpt_at_t *at,
                                       char *err, size_t err_length);

/** A signal's CKPT_REQUEST (@stop: SIGTERM's) to trainer0, one-way.  Its
 * message is this process's one static copy: requests are rare and alike. */
ember_status_t ember_wire_ckpt_request_send(ember_tp_t *tp, int stop);

/** Take a CKPT_REQUEST: exactly one, stop 0 or 1. */
ember_status_t ember_wire_ckpt_request_unpack(const void *data, size_t length,
                                              ember_msg_ckpt_request_t *request, char *err,
                                              size_t err_length);

/** Take a CKPT_DONE: exactly one, its name a plain file name and its text
 * NUL-terminated; the times finite and not negative. */
ember_status_t ember_wire_ckpt_done_unpack(const void *data, size_t length,
                                           ember_msg_ckpt_done_t *done, char *err,
                                           size_t err_length);

/* A received TABLE_RESTORE: its head and its files' names. */
typedef struct {
    ember_msg_table_restore_t head; /* its dir NUL-terminated */
    const char *names;              /* [head.count][EMBER_CKPT_FILE_NAME_MAX], each checked */
} ember_wire_table_restore_view_t;

/** Take a TABLE_RESTORE: 1..EMBER_WIRE_MAX_CKPT_FILES names, exactly that
 * many after the head, each a plain file name. */
ember_status_t ember_wire_table_restore_unpack(const void *data, size_t length,
                                               ember_wire_table_restore_view_t *view, char *err,
                                               size_t err_length);

#define EMBER_WIRE_MAX_CKPT_FILES 4096

#endif
