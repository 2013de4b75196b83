/*
 * fuzz_ps_messages: the master's requests to a parameter server,
 * TABLE_CREATE, TABLE_LOAD, TABLE_READ, PS_STATS and TABLE_OPTIMIZER, each through the
 * checks engine/ps/ps.c's handlers make (engine/wire/codec.h, engine/ps/ps_msg.h) and then the table,
 * in the order the handlers call them, on a PS's table ids.
 *
 * Input: records (fuzz/fuzz_input.h); op % 5: 0 CREATE, 1 LOAD, 2 READ,
 * 3 STATS, 4 OPTIMIZER; the payload is the request as it came.
 *
 * Invariants: a create the checks pass makes the table the spec says (name
 * NUL-terminated, its rows its shard's); a load is taken only when its
 * bytes are exactly its rows, and then the rows hold them (fp16: rounded),
 * a refused one changes nothing; a read the checks pass is one the table
 * serves (the PS allocates its reply before the table is asked), into a
 * buffer of the size it fills, and what it reads is the table; the stats
 * add up to the tables'; an optimizer the checks pass is one the
 * optimizer's own check takes, set (or found equal) on the table, which
 * then steps with it.  A create asking for more than a fuzzer can hold
 * (rows x dim > 2^12, over 64 trainers) or a GPU is checked but not made; a
 * dynamic table's (kind 1) is made within a small budget, checked and
 * freed (its rows go by key).
 */
#include "engine/ops/half.h"
#include "engine/ps/ps_msg.h"
#include "fuzz/fuzz_input.h"

#include <math.h>

#define FUZZ_MAX_VALUES   (1u << 12)
#define FUZZ_MAX_TRAINERS 64

typedef struct {
    ember_shard_t *tables[PS_MAX_TABLES];
    ember_msg_table_create_t specs[PS_MAX_TABLES]; /* as each was created */
} ps_state_t;

static void table_rows(ember_shard_t *table, float *out)
{
    char err[256];
    FUZZ_CHECK(ember_shard_read(table, 0, ember_shard_local_rows(table), out, err, sizeof(err)) ==
                       EMBER_OK,
               "the whole shard cannot be read: %s", err);
}

static size_t table_values(const ember_shard_t *table)
{
    return (size_t)ember_shard_local_rows(table) * ember_shard_dim(table);
}

static void on_create(ps_state_t *ps, const uint8_t *data, size_t length)
{
    ember_msg_table_create_t spec;
    char err[256];

    if (ember_wire_head(data, length, &spec, sizeof(spec), NULL, err, sizeof(err)) != EMBER_OK)
        return;
    if (ps_msg_table_create_check(&spec, err, sizeof(err)) != EMBER_OK)
        return;
    FUZZ_CHECK(spec.table_id < PS_MAX_TABLES && spec.device <= EMBER_TABLE_CUDA &&
                       memchr(spec.name, '\0', sizeof(spec.name)),
               "a create passed its check with id %u device %u", spec.table_id, spec.device);
    if (ps->tables[spec.table_id] || spec.device != EMBER_TABLE_HOST ||
        spec.trainers > FUZZ_MAX_TRAINERS || spec.rows <= 0 || spec.dim == 0 ||
        (uint64_t)spec.rows > FUZZ_MAX_VALUES / spec.dim)
        return; /* taken (the PS answers EXISTS), or beyond the fuzzer's means */
    ember_shard_t *table = NULL;
    if (spec.kind == EMBER_TABLE_KIND_DYNAMIC) {
        /* Made (within a small budget: an unbudgeted one maps gigabytes
         * of address space) and checked, but not kept: its rows go by key,
         * and this target's loads and reads by index. */
        if (spec.budget_rows <= 0 || (uint64_t)spec.budget_rows > FUZZ_MAX_VALUES / spec.dim ||
            ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK)
            return;
        FUZZ_CHECK(ember_shard_is_dynamic(table) &&
                           ember_shard_local_rows(table) == spec.budget_rows,
                   "a dynamic shard of budget %lld has %lld slots", (long long)spec.budget_rows,
                   (long long)ember_shard_local_rows(table));
        ember_shard_destroy(table);
        return;
    }
    if (ember_shard_create(&spec, NULL, &table, err, sizeof(err)) != EMBER_OK)
        return;
    FUZZ_CHECK(strcmp(ember_shard_name(table), spec.name) == 0, "the table's name");
    int64_t owned = 0;
    for (int64_t row = 0; row < spec.rows; row++)
        owned += (uint64_t)row % spec.num_shards == spec.shard;
    FUZZ_CHECK(ember_shard_local_rows(table) == owned,
               "shard %u of %u of %lld rows holds %lld rows, owns %lld", spec.shard,
               spec.num_shards, (long long)spec.rows, (long long)ember_shard_local_rows(table),
               (long long)owned);
    ps->tables[spec.table_id] = table;
    ps->specs[spec.table_id] = spec;
}

static ember_shard_t *find(ps_state_t *ps, uint32_t table_id)
{
    return table_id < PS_MAX_TABLES ? ps->tables[table_id] : NULL;
}

/* Two values the same, NaN being NaN whatever its bits. */
static int same_value(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof(a)) == 0;
}

/* What a load of @msg must have left in @now, from @before: the rows of
 * the range this shard owns hold @rows' values (fp16 rows: rounded), every
 * other row is as it was. */
static void check_loaded(const ember_msg_table_create_t *spec, const ember_msg_table_load_t *msg,
                         const float *rows, const float *before, const float *now,
                         int64_t local_rows)
{
    const uint32_t dim = spec->dim;
    for (int64_t l = 0; l < local_rows; l++) {
        int64_t row = l * spec->num_shards + spec->shard;
        int loaded = row >= msg->first && row - msg->first < msg->count;
        for (uint32_t d = 0; d < dim; d++) {
            size_t at = (size_t)l * dim + d;
            float want = before[at];
            if (loaded) {
                want = rows[(size_t)(row - msg->first) * dim + d];
                if (spec->dtype == EMBER_DTYPE_F16)
                    want = ember_half_to_float(ember_float_to_half(want));
            }
            FUZZ_CHECK(same_value(now[at], want),
                       "after a load of rows [%lld, +%lld): row %lld col %u is %g, not %g",
                       (long long)msg->first, (long long)msg->count, (long long)row, d, now[at],
                       want);
        }
    }
}

static void on_load(ps_state_t *ps, const uint8_t *data, size_t length)
{
    ember_msg_table_load_t msg;
    ember_wire_rest_t body;
    char err[256];
    ember_shard_t *table;

    if (ember_wire_head(data, length, &msg, sizeof(msg), &body, err, sizeof(err)) != EMBER_OK ||
        !(table = find(ps, msg.table_id)))
        return;
    size_t rest = body.body_bytes;
    if (ps_msg_table_load_check(&msg, rest, table, err, sizeof(err)) != EMBER_OK)
        return;
    unsigned __int128 want =
            (unsigned __int128)(uint64_t)msg.count * ember_shard_dim(table) * sizeof(float);
    FUZZ_CHECK(msg.count >= 0 && want == rest,
               "a load of %lld rows x %u passed its check with %zu bytes", (long long)msg.count,
               ember_shard_dim(table), rest);
    float *rows = malloc(rest + 4); /* the PS's aligned copy */
    size_t values = table_values(table);
    float *before = malloc(values * sizeof(float) + 1);
    float *now = malloc(values * sizeof(float) + 1);
    FUZZ_CHECK(rows && before && now, "out of memory");
    memcpy(rows, body.body, rest);
    table_rows(table, before);
    ember_status_t status = ember_shard_load(table, msg.first, msg.count, rows, err, sizeof(err));
    table_rows(table, now);
    if (status != EMBER_OK)
        FUZZ_CHECK(memcmp(before, now, values * sizeof(float)) == 0,
                   "a refused load changed the table");
    else
        check_loaded(&ps->specs[msg.table_id], &msg, rows, before, now,
                     ember_shard_local_rows(table));
    free(rows);
    free(before);
    free(now);
}

static void on_read(ps_state_t *ps, const uint8_t *data, size_t length)
{
    ember_msg_table_read_t msg;
    size_t bytes;
    char err[256];
    ember_shard_t *table;

    if (ember_wire_head(data, length, &msg, sizeof(msg), NULL, err, sizeof(err)) != EMBER_OK ||
        !(table = find(ps, msg.table_id)))
        return;
    if (ps_msg_table_read_check(&msg, table, &bytes, err, sizeof(err)) != EMBER_OK)
        return;
    /* The PS allocates the reply now: the check must have refused every
     * read the table would, or a request makes it allocate for nothing. */
    FUZZ_CHECK(bytes <= table_values(table) * sizeof(float),
               "a read of local rows [%lld, +%lld) of a shard of %lld passed its check: "
               "a reply buffer of %zu bytes",
               (long long)msg.first, (long long)msg.count, (long long)ember_shard_local_rows(table),
               bytes);
    float *out = malloc(bytes + 4); /* as the PS */
    FUZZ_CHECK(out, "out of memory");
    FUZZ_CHECK(ember_shard_read(table, msg.first, msg.count, out, err, sizeof(err)) == EMBER_OK,
               "a read passed its check but the table refused it: %s", err);
    FUZZ_CHECK(bytes == (size_t)msg.count * ember_shard_dim(table) * sizeof(float),
               "a read of %lld rows replies %zu bytes", (long long)msg.count, bytes);
    float *all = malloc(table_values(table) * sizeof(float) + 1);
    FUZZ_CHECK(all, "out of memory");
    table_rows(table, all);
    FUZZ_CHECK(memcmp(out, all + (size_t)msg.first * ember_shard_dim(table), bytes) == 0,
               "a read of local rows [%lld, +%lld) is not the table", (long long)msg.first,
               (long long)msg.count);
    free(all);
    free(out);
}

static void on_stats(ps_state_t *ps)
{
    ember_msg_ps_stats_t stats = {0};
    uint64_t table_bytes = 0;
    for (size_t i = 0; i < PS_MAX_TABLES; i++) {
        if (!ps->tables[i])
            continue;
        ps_msg_stats_add(&stats, ps->tables[i]);
        table_bytes += ember_shard_bytes(ps->tables[i]);
    }
    FUZZ_CHECK(stats.table_bytes == table_bytes, "PS_STATS: %llu table bytes of %llu",
               (unsigned long long)stats.table_bytes, (unsigned long long)table_bytes);
}

static void on_optimizer(ps_state_t *ps, const uint8_t *data, size_t length)
{
    ember_msg_table_optimizer_t msg;
    ember_shard_t *table;
    char err[256];
    int changed = 0;

    if (ember_wire_exact(data, length, &msg, sizeof(msg), "table optimizer", err, sizeof(err)) !=
                EMBER_OK ||
        !(table = find(ps, msg.table_id)))
        return;
    if (ps_msg_table_optimizer_check(&msg, err, sizeof(err)) != EMBER_OK)
        return;
    FUZZ_CHECK(ember_opt_config_check(&msg.optimizer, NULL, 0) == EMBER_OK,
               "an optimizer passed the PS's check, not its own");
    const int same = ember_shard_optimizer_is(table, &msg.optimizer);
    if (ember_shard_set_optimizer(table, &msg.optimizer, &changed, err, sizeof(err)) != EMBER_OK)
        return; /* out of memory: the old one kept */
    FUZZ_CHECK(changed == !same && ember_shard_optimizer_is(table, &msg.optimizer),
               "optimizer set: changed %d, equal before %d", changed, same);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    static ps_state_t ps; /* a PS's state is large: not on the stack */
    uint8_t *payload;
    size_t length;
    int op;

    memset(&ps, 0, sizeof(ps));
    while ((op = fuzz_record(&in, &payload, &length)) >= 0) {
        switch (op % 5) {
        case 0: on_create(&ps, payload, length); break;
        case 1: on_load(&ps, payload, length); break;
        case 2: on_read(&ps, payload, length); break;
        case 3: on_stats(&ps); break;
        default: on_optimizer(&ps, payload, length); break;
        }
        free(payload);
    }
    for (size_t i = 0; i < PS_MAX_TABLES; i++)
        ember_shard_destroy(ps.tables[i]);
    return 0;
}
