/*
 * engine/ps/ps_multi: a LOOKUPS or a GRADS over a PS's tables, all or
 * nothing.
 *
 * engine/ps/ps.c resolves the request's tables (engine/wire/codec took its
 * bytes) and hands them here: pure functions over the tables, no transport
 * and no logging, so the fuzzer (fuzz/fuzz_multi.c) runs exactly what the
 * PS runs.  A single LOOKUP is a LOOKUPS of one table here.  Each refusal
 * leaves its cause in @err, naming the table, trainer and step, and returns
 * the status the PS answers with.
 */
#ifndef EMBER_ENGINE_PS_MULTI_H
#define EMBER_ENGINE_PS_MULTI_H

#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

/**
 * Sync: whether @view's step is open on every sync table of @tables
 * (@tables[k] serves @view->lookups[k]; borrowed): *ready_p 1 when every
 * one has applied at least step - its staleness steps (an evaluation:
 * exactly step), 0 when one is further behind (the request waits).
 * Errors: ERR_INVALID_PARAM, a table already past the step.  Async tables
 * are always ready.
 */
ember_status_t ps_multi_lookups_ready(ember_shard_t *const *tables,
                                      const ember_wire_lookups_view_t *view, int *ready_p,
                                      char *err, size_t err_length);

/**
 * The bytes ps_multi_lookups pools into for @view: each table pools its
 * fp32 values (and max mode's places) where its reply will lie, behind the
 * replies of the tables before it, so the buffer must reach past the last
 * of those pools.  *reply_bytes_p: the reply's (every table's padded, and
 * with @versions its version; ps_multi_lookups).
 */
size_t ps_multi_lookups_out_bytes(ember_shard_t *const *tables,
                                  const ember_wire_lookups_view_t *view, int versions,
                                  size_t *reply_bytes_p);

/**
 * Serve every lookup of @view on its table into @out
 * (ps_multi_lookups_out_bytes, EMBER_WIRE_ALIGN-aligned): each table's
 * reply (ps_msg_lookup_reply_finish) in the request's order, each padded
 * with zeros and, with @versions (a LOOKUPS; not a single LOOKUP, whose
 * reply is its values alone), followed by the table's version (its next
 * step: the steps the values include; engine/wire/protocol.h);
 * *reply_bytes_p the total.  All or nothing: when a table
 * refuses its lookup, the contexts the tables before it kept are dropped,
 * so the request leaves nothing behind (the trainer's lookups of other
 * steps stay open).  Errors: the refusing table's
 * (ember_shard_lookup).
 */
ember_status_t ps_multi_lookups(ember_shard_t *const *tables, const ember_wire_lookups_view_t *view,
                                int versions, void *out, size_t *reply_bytes_p, char *err,
                                size_t err_length);

/**
 * Take @count gradients (@grads[k] for @tables[k], as
 * ember_wire_grads_split made them): every one checked
 * (ember_shard_grad_check), then room made for all, before any is applied,
 * so a refused one changes no table.  @applied_p[k]: how many of table k's
 * sync steps were applied now.  Errors: the first refusal's, naming its table.
 */
ember_status_t ps_multi_grads(ember_shard_t *const *tables, const ember_wire_grad_view_t *grads,
                              size_t count, int *applied_p, char *err, size_t err_length);

#endif
