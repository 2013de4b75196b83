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

/* The bytes of each index's entry: its slot, and with EMBER_LOOKUP_WEIGHTS
 * its weight or with EMBER_LOOKUP_MAX its place (engine/wire/protocol.h). */
static inline size_t ember_wire_lookup_entry_bytes(uint32_t flags)
{
    return (flags & (EMBER_LOOKUP_WEIGHTS | EMBER_LOOKUP_MAX)) ? 8 : 4;
}

/* Where a LOOKUP of @bags has its entries: after the head and the offsets.
 * A sender writes both while it reads its batch (they do not move as the
 * shard's indices come in); its rows go after the last entry. */
static inline size_t ember_wire_lookup_entries_at(uint32_t bags)
{
    return sizeof(ember_msg_lookup_t) + 4 * (size_t)bags;
}

/* Where each array of a LOOKUP lies, in bytes from the message's start. */
typedef struct {
    uint64_t offsets;     /* uint32 [bags] */
    uint64_t entries;     /* [indices] of entry_bytes: slot, then weight or place */
    uint64_t entry_bytes; /* 4, or 8 with weights or places */
    uint64_t rows;        /* int64 [unique], 8-byte aligned after zero padding */
    uint64_t held;        /* EMBER_LOOKUP_ROWS: uint64 [unique] after the rows; else 0 */
    uint64_t size;        /* of the whole message: a multiple of EMBER_WIRE_ALIGN */
} ember_wire_lookup_layout_t;

/** The layout @head's counts and flags give (64-bit: the counts may be a
 * forger's; 32-bit counts cannot overflow it). */
void ember_wire_lookup_layout(const ember_msg_lookup_t *head, ember_wire_lookup_layout_t *layout);

/** Bytes of a LOOKUP's arrays (after the header), as @head's counts say. */
uint64_t ember_wire_lookup_array_bytes(const ember_msg_lookup_t *head);

/**
 * A LOOKUP built in place: @head written at the front of @message, whose
 * offsets and @head->indices entries are written already, and the padding
 * between the last entry and the rows zeroed; the @head->unique rows go at
 * the layout's rows (written before or after).
 */
void ember_wire_lookup_seal(const ember_msg_lookup_t *head, void *message);

/* ---- a LOOKUP's reply, and a table's part of a LOOKUPS reply ------------- */

/*
 * Where each thing of one table's reply lies, in bytes from its start.  The
 * PS pools into the part as the pooled_* fields say (fp32 values, then max
 * mode's places right behind them), and ember_wire_reply_finish makes that
 * the reply; the trainer finds the values, places and version where the
 * other fields say.  Every size is 64-bit: the counts may be a forger's.
 */
typedef struct {
    uint32_t flags, dim;
    uint64_t count;         /* pooled values: bags x dim */
    uint64_t values;        /* where they lie: 0 (the pooled values are first) */
    uint64_t value_bytes;   /* 4, or 2 with EMBER_LOOKUP_HALF_REPLY (fp16) */
    uint64_t places;        /* max mode: uint32 [count] at this offset, 4-byte aligned; else 0 */
    uint64_t bytes;         /* a LOOKUP's reply: the values, and max mode's places */
    uint64_t version;       /* a LOOKUPS part: the uint64 version (aligned) after the
                             * reply padded to EMBER_WIRE_ALIGN */
    uint64_t part_bytes;    /* a LOOKUPS part: all of it, a multiple of EMBER_WIRE_ALIGN */
    uint64_t pooled_places; /* where the PS pools max mode's places: behind fp32 values */
    uint64_t pooled_bytes;  /* what the PS pools into: fp32 values (and places) */
} ember_wire_reply_layout_t;

/** The reply layout of a lookup of @flags and @bags for a table of @dim. */
void ember_wire_reply_layout(uint32_t flags, uint32_t bags, uint32_t dim,
                             ember_wire_reply_layout_t *layout);

/**
 * The PS: make the @layout.pooled_bytes pooled at @part (fp32 values, max
 * mode's places behind them) the reply @layout says: values rounded to fp16
 * in place with EMBER_LOOKUP_HALF_REPLY, the places moved up behind them,
 * the padding up to the version zeroed.  @part has room for
 * max(pooled_bytes, version) bytes.
 */
void ember_wire_reply_finish(const ember_wire_reply_layout_t *layout, void *part);

/** The PS: a LOOKUPS part's @version (the steps the table had applied)
 * written where @layout says. */
void ember_wire_reply_put_version(const ember_wire_reply_layout_t *layout, void *part,
                                  uint64_t version);

/** A LOOKUPS part's version, read in host memory (the trainer's device path
 * copies the 8 bytes at @layout->version out instead). */
uint64_t ember_wire_reply_get_version(const ember_wire_reply_layout_t *layout, const void *part);

/** The layout's fields for a LOOKUP of @head (tests, benchmarks): */
uint64_t ember_wire_lookup_places_at(const ember_msg_lookup_t *head, uint32_t dim);
uint64_t ember_wire_lookup_reply_bytes(const ember_msg_lookup_t *head, uint32_t dim);
uint64_t ember_wire_lookup_version_at(const ember_msg_lookup_t *head, uint32_t dim);
uint64_t ember_wire_lookups_part_bytes(const ember_msg_lookup_t *head, uint32_t dim);

/* A LOOKUP as tests and benchmarks describe one (the trainer builds its
 * own in place): a shard's part of a batch, deduplicated. */
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
 * ember_wire_load_* and the accessors below); weights and places NULL when
 * the flags have none (they share the entries with the slots, at
 * entry_bytes a step). */
typedef struct {
    ember_msg_lookup_t head;
    const uint8_t *offsets, *rows, *slots, *weights, *places;
    const uint8_t *held; /* EMBER_LOOKUP_ROWS: uint64 [unique]; else NULL */
    size_t entry_bytes;
} ember_wire_lookup_view_t;

/* Index @i's slot, weight, place (the last two only when the view has them). */
static inline uint32_t ember_wire_lookup_slot(const ember_wire_lookup_view_t *view, size_t i)
{
    uint32_t value;
    memcpy(&value, view->slots + view->entry_bytes * i, sizeof(value));
    return value;
}

static inline float ember_wire_lookup_weight(const ember_wire_lookup_view_t *view, size_t i)
{
    float value;
    memcpy(&value, view->weights + view->entry_bytes * i, sizeof(value));
    return value;
}

static inline uint32_t ember_wire_lookup_place(const ember_wire_lookup_view_t *view, size_t i)
{
    uint32_t value;
    memcpy(&value, view->places + view->entry_bytes * i, sizeof(value));
    return value;
}

/**
 * Take a LOOKUP: known flags (weights only with sum), and exactly the bytes
 * its counts say.  What the arrays hold is the table's to check (it knows
 * its rows).  Errors: ERR_BAD_MESSAGE (short, or counts that do not match
 * the size), ERR_INVALID_PARAM (flags).
 */
ember_status_t ember_wire_lookup_unpack(const void *data, size_t length,
                                        ember_wire_lookup_view_t *view, char *err,
                                        size_t err_length);

/* ---- an EMBER_LOOKUP_ROWS lookup's reply (engine/wire/protocol.h) ------- */

/** Where its states lie, and its values with @unique rows. */
static inline uint64_t ember_wire_rows_reply_states_at(void)
{
    return sizeof(ember_msg_rows_reply_t);
}
uint64_t ember_wire_rows_reply_values_at(uint64_t unique);
/** Bytes of the part with @fresh of @unique rows' values of @dim (a
 * multiple of EMBER_WIRE_ALIGN); @fresh = @unique: the most it takes. */
uint64_t ember_wire_rows_reply_bytes(uint64_t unique, uint32_t dim, uint64_t fresh);

/**
 * The trainer: the head of a rows reply part of @length bytes (at least
 * what is left of the reply) for a request of @unique rows of @dim,
 * checked at full width: @fresh at most @unique, the part within @length,
 * every state known and the fresh ones exactly @fresh.  *@bytes_p: the
 * part's size.  Errors: ERR_BAD_MESSAGE, one line in @err.
 */
ember_status_t ember_wire_rows_reply_check(const void *part, size_t length, uint64_t unique,
                                           uint32_t dim, ember_msg_rows_reply_t *head_p,
                                           size_t *bytes_p, char *err, size_t err_length);

/* ---- LOOKUPS: every table of a step on one PS -------------------------- */

/** @bytes rounded up to EMBER_WIRE_ALIGN (64-bit: a forger's sizes). */
static inline uint64_t ember_wire_pad(uint64_t bytes)
{
    return (bytes + (EMBER_WIRE_ALIGN - 1)) & ~(uint64_t)(EMBER_WIRE_ALIGN - 1);
}

/** Bytes of @head's LOOKUP as a LOOKUPS carries it: padded (every LOOKUP
 * is a multiple of EMBER_WIRE_ALIGN already: its size). */
size_t ember_wire_lookup_padded_size(const ember_msg_lookup_t *head);

/** ember_wire_lookup_pack (a LOOKUP needs no padding of its own). */
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
