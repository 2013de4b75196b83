/* engine/ps/ps_msg: the parameter server's checks of its requests' bytes. */
#include "engine/ps/ps_msg.h"

#include "engine/ops/half.h"

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

void ps_msg_stats_add(ember_msg_ps_stats_t *stats, const ember_shard_t *table)
{
    stats->table_bytes += ember_shard_bytes(table);
    stats->optimizer_bytes += ember_shard_optimizer_bytes(table);
    stats->other_bytes += ember_shard_other_bytes(table);
}

size_t ps_msg_lookup_out_bytes(const ember_msg_lookup_t *msg, uint32_t dim)
{
    const int max_mode = (msg->flags & EMBER_LOOKUP_MAX) != 0;
    return (size_t)msg->bags * dim * sizeof(float) * (max_mode ? 2 : 1);
}

size_t ps_msg_lookup_reply_finish(const ember_msg_lookup_t *msg, uint32_t dim, float *out)
{
    const size_t values = (size_t)msg->bags * dim;
    if (msg->flags & EMBER_LOOKUP_HALF_REPLY) {
        ember_float_to_half_in_place(out, values);
        if (msg->flags & EMBER_LOOKUP_MAX) /* the places move up behind the halved values */
            memmove((uint8_t *)out + ember_wire_lookup_places_at(msg, dim), out + values,
                    values * sizeof(uint32_t));
    }
    return (size_t)ember_wire_lookup_reply_bytes(msg, dim);
}
