/*
 * common/config_env: how the config table (common/config.c) takes one
 * environment entry; ember_config_init calls it for each entry of environ,
 * and the fuzzer (fuzz/fuzz_config.c) with any text.
 */
#ifndef EMBER_COMMON_CONFIG_ENV_H
#define EMBER_COMMON_CONFIG_ENV_H

#include <ember/status.h>

/**
 * Take @entry ("NAME=VALUE", borrowed) as the environment would give it: an
 * entry not naming an EMBER_* variable is left alone (OK), an unknown
 * EMBER_* name warned about (OK), a value its entry does not accept refused
 * with one error naming it (ERR_INVALID_PARAM; the value is not taken);
 * ERR_NO_MEMORY.  The table must be loaded (ember_config_init).
 */
ember_status_t ember_config_take_env(const char *entry);

#endif
