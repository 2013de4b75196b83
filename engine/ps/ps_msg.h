/*
 * engine/ps/ps_msg: the parameter server's checks of its requests' bytes.
 *
 * What engine/ps/ps.c's handlers do with a request, once engine/wire/codec
 * has taken its bytes, before it reaches a table (engine/ps/table.c
 * validates what lookups and gradients hold itself), as pure functions: no transport, no logging, so the fuzzer (fuzz/) runs exactly
 * the code the PS runs.  Each refusal leaves its cause in @err and returns
 * the status the PS answers with.
 */
#ifndef EMBER_ENGINE_PS_MSG_H
#define EMBER_ENGINE_PS_MSG_H

#include "engine/ps/table.h"
#include "engine/wire/codec.h"

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

/* Table ids a PS serves: [0, PS_MAX_TABLES), so a LOOKUPS or GRADS
 * (at most EMBER_WIRE_MAX_TABLES) can name all of them. */
#define PS_MAX_TABLES EMBER_WIRE_MAX_TABLES

/**
 * TABLE_CREATE: @spec as it came; its name is NUL-terminated here.  Refuses
 * a table id beyond PS_MAX_TABLES (ERR_EXISTS, as a taken one, which is the
 * PS's to check) and an unknown device (ERR_INVALID_PARAM).  The rest of
 * the spec is ember_shard_create's to check.
 */
ember_status_t ps_msg_table_create_check(ember_msg_table_create_t *spec, char *err,
                                         size_t err_length);

/**
 * TABLE_LOAD of @table (borrowed): the @rest bytes after @msg must be
 * msg->count rows of the table's dim floats.  Errors: ERR_BAD_MESSAGE.
 */
ember_status_t ps_msg_table_load_check(const ember_msg_table_load_t *msg, size_t rest,
                                       const ember_shard_t *table, char *err, size_t err_length);

/**
 * TABLE_READ of @table (borrowed): *bytes_p the reply's size, checked
 * before the PS allocates it.  Errors: ERR_INVALID_PARAM (a negative count,
 * or more than 2^24 rows at once), ERR_OUT_OF_RANGE (rows the shard does
 * not have).
 */
ember_status_t ps_msg_table_read_check(const ember_msg_table_read_t *msg,
                                       const ember_shard_t *table, size_t *bytes_p, char *err,
                                       size_t err_length);

/**
 * TABLE_OPTIMIZER: every field of @msg at full width: reserved 0, each
 * float finite (those the kind ignores too), nesterov and adam_row_step 0
 * or 1, then ember_opt_config_check's rules.  @err names the setting.
 * Errors: ERR_INVALID_PARAM.
 */
ember_status_t ps_msg_table_optimizer_check(const ember_msg_table_optimizer_t *msg, char *err,
                                            size_t err_length);

/** PS_STATS: add @table's memory (table, optimizer, other) into @stats. */
void ps_msg_stats_add(ember_msg_ps_stats_t *stats, const ember_shard_t *table);

#endif
