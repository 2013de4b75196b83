/* engine/ps/ps_msg: the parameter server's checks of its requests' bytes. */
#include "engine/ps/ps_msg.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

ember_status_t ps_msg_table_create_check(ember_msg_table_create_t *spec, char *err,
                                         size_t err_length)
{
    spec->name[EMBER_TABLE_NAME_MAX - 1] = '\0';
    if (spec->table_id >= PS_MAX_TABLES)
        return ember_status_text(err, err_length, EMBER_ERR_EXISTS,
                                 "table id %u is taken or beyond %d", spec->table_id,
                                 PS_MAX_TABLES);
    if (spec->device > EMBER_TABLE_CUDA)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table %s: unknown device %u (host 0, cuda 1)", spec->name,
                                 spec->device);
    return EMBER_OK;
}

ember_status_t ps_msg_table_load_check(const ember_msg_table_load_t *msg, size_t rest,
                                       const ember_shard_t *table, char *err, size_t err_length)
{
    uint32_t dim = ember_shard_dim(table);
    /* The count first: count x dim floats must not wrap to the bytes sent. */
    if (msg->count < 0 || (uint64_t)msg->count > SIZE_MAX / sizeof(float) / dim ||
        rest != (size_t)msg->count * dim * sizeof(float))
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "table %s: load of %lld rows carries %zu bytes",
                                 ember_shard_name(table), (long long)msg->count, rest);
    return EMBER_OK;
}

ember_status_t ps_msg_table_read_check(const ember_msg_table_read_t *msg,
                                       const ember_shard_t *table, size_t *bytes_p, char *err,
                                       size_t err_length)
{
    const int64_t rows = ember_shard_local_rows(table);
    if (msg->count < 0 || msg->count > (1 << 24))
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM, "read of %lld rows",
                                 (long long)msg->count);
    /* Before the PS allocates the reply: rows the shard does not have must
     * not cost it count x dim floats (up to 2^24 x 65536). */
    if (msg->first < 0 || msg->first > rows || msg->count > rows - msg->first) {
        int64_t end = msg->first >= 0 && msg->count > INT64_MAX - msg->first
                              ? INT64_MAX
                              : msg->first + msg->count;
        return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                                 "table %s: read of local rows [%lld, %lld) outside "
                                 "[0, %lld)",
                                 ember_shard_name(table), (long long)msg->first, (long long)end,
                                 (long long)rows);
    }
    *bytes_p = (size_t)msg->count * ember_shard_dim(table) * sizeof(float);
    return EMBER_OK;
}

ember_status_t ps_msg_table_optimizer_check(const ember_msg_table_optimizer_t *msg, char *err,
                                            size_t err_length)
{
    const ember_opt_config_t *c = &msg->optimizer;
    const struct {
        const char *name;
        float value;
    } floats[] = {{"lr", c->lr},
                  {"momentum", c->momentum},
                  {"dampening", c->dampening},
                  {"lr_decay", c->lr_decay},
                  {"initial_accumulator", c->initial_accumulator},
                  {"eps", c->eps},
                  {"beta1", c->beta1},
                  {"beta2", c->beta2}};
    if (msg->reserved != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "table id %u: optimizer message with reserved %u", msg->table_id,
                                 msg->reserved);
    /* Those the kind ignores too: a config that compares equal is one the
     * trainers meant alike, not one with a NaN in a field nobody reads. */
    for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++) {
        if (!isfinite(floats[i].value))
            return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                     "optimizer: %s is not finite", floats[i].name);
    }
    if ((uint32_t)c->nesterov > 1 || (uint32_t)c->adam_row_step > 1)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "optimizer: nesterov %d, adam_row_step %d (each 0 or 1)",
                                 c->nesterov, c->adam_row_step);
    return ember_opt_config_check(c, err, err_length);
}

void ps_msg_stats_add(ember_msg_ps_stats_t *stats, const ember_shard_t *table)
{
    stats->table_bytes += ember_shard_bytes(table);
    stats->optimizer_bytes += ember_shard_optimizer_bytes(table);
    stats->other_bytes += ember_shard_other_bytes(table);
}
