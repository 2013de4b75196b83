/*
 * tools/ember-train/master_tables: the model's tables on the PS and the
 * dense parameters' start, from one source: a resumed checkpoint (the
 * tables created empty, each PS restoring its own), --init (a checkpoint's
 * weights, or a file of the model's tensors), or the model (its initial
 * rows, or drawn on the PS).  At the end, every table read back for the
 * model's check and the --save file.
 */
#include "tools/ember-train/master.h"

#include <ember/log.h>
#include <ember/safetensors.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Losses beyond this many go only to --metrics (as epoch means): their text
 * would outgrow a safetensors header (100 MiB). */
#define SAVED_LOSSES_MAX (4u << 20)

/* The bytes a dynamic table's row costs a PS: its values, its optimizer
 * state, and about 100 bytes of key, counters and map. */
static uint64_t dynamic_row_bytes(const ember_train_settings_t *s, uint32_t dim)
{
    const uint64_t value = s->table_dtype == EMBER_DTYPE_F16 ? 2 : 4;
    uint64_t state = 0;
    switch (s->optimizer.kind) {
    case EMBER_OPT_SGD: state = s->optimizer.momentum != 0.0f ? 4ull * dim + 1 : 0; break;
    case EMBER_OPT_ADAGRAD: state = 4ull * dim; break;
    case EMBER_OPT_ROWWISE_ADAGRAD: state = 4; break;
    case EMBER_OPT_ADAM: state = 8ull * dim + 4; break;
    }
    return value * dim + state + 100;
}

/* Keys 0 .. @n - 1 (a dynamic table standing for a fixed one's rows), the
 * caller's to free; NULL when out of memory. */
static int64_t *first_keys(int64_t n)
{
    int64_t *keys = malloc((size_t)n * sizeof(int64_t) + 8);
    for (int64_t k = 0; keys && k < n; k++)
        keys[k] = k;
    return keys;
}

/* Whether table @t is dynamic: --table-kind dynamic, or the model's. */
static int table_dynamic(const master_t *m, size_t t)
{
    return m->tj->settings.table_kind == EMBER_TABLE_DYNAMIC ||
           m->tables[t].kind == EMBER_TABLE_DYNAMIC;
}

/* Table @t as a dynamic table (--table-kind dynamic, or the model's kind);
 * rows given are written as the keys --init gave with them ("NAME.keys"),
 * else (the model's rows, or --init's without keys) as keys 0 .. rows - 1. */
static ember_status_t create_dynamic(master_t *m, size_t t, ember_table_config_t *c,
                                     const float *rows)
{
    const ember_train_settings_t *s = &m->tj->settings;
    ember_table_dynamic_t dyn = s->dynamic;
    if (s->budget_bytes)
        dyn.budget_rows = (int64_t)(s->budget_bytes / dynamic_row_bytes(s, c->embedding_dim));
    if (s->budget_bytes && dyn.budget_rows < 1)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_INVALID_PARAM,
                                 "--table-budget %llu bytes holds no row of table %s",
                                 (unsigned long long)s->budget_bytes, c->name);
    /* The keys without a row read their initial values from the table's
     * rule: the model's draw, also under given rows or a restore. */
    c->init = m->tables[t].init;
    c->initial_rows = NULL;
    EMBER_CHECK(ember_table_create_dynamic(m->job, c, &dyn, &m->handles[t]));
    if (!rows)
        return EMBER_OK;
    if (m->init_keys[t])
        return m->init_nkeys[t] ? ember_table_write_keys(m->handles[t], m->init_keys[t],
                                                         m->init_nkeys[t], rows)
                                : EMBER_OK;
    int64_t *keys = first_keys(c->num_embeddings);
    if (!keys)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status =
            ember_table_write_keys(m->handles[t], keys, (size_t)c->num_embeddings, rows);
    free(keys);
    return status;
}

/* Table @t created on its PS: drawn there, zeros (a restore follows), or
 * from @rows (host, [rows][dim]). */
static ember_status_t create_table(master_t *m, size_t t, const float *rows, int zeros)
{
    const ember_train_settings_t *s = &m->tj->settings;
    const ember_model_table_t *table = &m->tables[t];
    ember_table_config_t c;
    ember_table_config_init(&c);
    c.name = table->name;
    c.num_embeddings = table->rows;
    c.embedding_dim = table->dim;
    c.dtype = s->table_dtype;
    c.init = rows ? EMBER_TABLE_INIT_ROWS : zeros ? EMBER_TABLE_INIT_ZEROS : table->init;
    c.seed = table->seed;
    c.initial_rows = rows;
    c.sharding = table->sharding;
    c.first_ps = table->first_ps;
    c.num_shards = table->num_shards;
    c.optimizer = s->optimizer;
    c.consistency = s->consistency;
    c.staleness = s->staleness;
    c.reduce = s->sparse_reduce;
    c.device = s->ps_device;
    if (!table_dynamic(m, t))
        return ember_table_create(m->job, &c, &m->handles[t]);
    return create_dynamic(m, t, &c, rows);
}

static ember_status_t create_tables(master_t *m, float *const *rows, int zeros)
{
    for (size_t t = 0; t < m->ntables; t++)
        EMBER_CHECK(create_table(m, t, rows ? rows[t] : NULL, zeros));
    return EMBER_OK;
}

static int is_directory(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The model's dense tensors from @file (a checkpoint's trainer file, or a
 * --init file) into m->params, each F32 of its shape. */
ember_status_t master_dense_from(master_t *m, const ember_st_file_t *file, const char *path,
                                 const ember_model_tensor_t *tensors, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const ember_model_tensor_t *want = &tensors[i];
        if (want->table >= 0)
            continue;
        const ember_st_tensor_t *got = ember_st_find(file, want->name);
        const size_t numel = (size_t)want->shape[0] * (want->ndim > 1 ? (size_t)want->shape[1] : 1);
        if (!got || got->dtype != EMBER_DTYPE_F32 || got->numel != numel ||
            got->ndim != want->ndim || got->shape[0] != want->shape[0])
            return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                                     "%s: tensor '%s' is %s, this job's is F32 of %zu values", path,
                                     want->name, got ? ember_dtype_name(got->dtype) : "missing",
                                     numel);
        memcpy(m->params + want->offset, got->data, got->nbytes);
    }
    return EMBER_OK;
}

/* --init DIR: a checkpoint's weights (any format: the PS files' tables by
 * global row, trainer0's dense tensors by name), from step 0. */
static ember_status_t init_from_checkpoint(master_t *m, float **rows)
{
    ember_model_tensor_t tensors[EMBER_MODEL_TENSORS_MAX];
    const size_t n = m->model->tensors(m->tj->config, tensors);
    ember_checkpoint_info_t info;
    ember_status_t status =
            ember_checkpoint_find(m->tj->settings.init_path, &info, m->cause, sizeof(m->cause));
    for (size_t t = 0; status == EMBER_OK && t < m->ntables; t++) {
        const ember_model_table_t *table = &m->tables[t];
        rows[t] = malloc((size_t)table->rows * table->dim * sizeof(float) + 4);
        status = rows[t] ? ember_checkpoint_read_table(&info, table->name, table->rows, table->dim,
                                                       rows[t], m->cause, sizeof(m->cause))
                         : EMBER_ERR_NO_MEMORY;
    }
    if (status == EMBER_OK) {
        char path[700], why[400];
        ember_st_file_t *file;
        snprintf(path, sizeof(path), "%s/trainer0.safetensors", info.dir);
        status = ember_st_map(path, &file, why, sizeof(why));
        if (status != EMBER_OK) {
            ember_status_text(m->cause, sizeof(m->cause), status, "--init %s: %s",
                              m->tj->settings.init_path, why);
        } else {
            status = master_dense_from(m, file, path, tensors, n);
            ember_st_close(file);
        }
    }
    if (status == EMBER_OK)
        ember_info("master", "--init: the weights of %s", info.dir);
    ember_checkpoint_info_free(&info);
    return status;
}

/* A dynamic table's tensor @name ("PREFIX.weight")'s keys: "PREFIX.keys"
 * into @keys; 0 when @name does not end in ".weight". */
static int keys_name(const char *name, char *keys, size_t length)
{
    const size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 7, ".weight") != 0 || n + 1 > length)
        return 0;
    snprintf(keys, length, "%.*s.keys", (int)(n - 7), name);
    return 1;
}

/* The model's tensor @name's index, or its dynamic table's keys tensor
 * ("PREFIX.keys" of a dynamic table's "PREFIX.weight": *@keys_p 1); n when
 * neither. */
static size_t find_tensor(const master_t *m, const ember_model_tensor_t *tensors, size_t n,
                          const char *name, int *keys_p)
{
    char keys[EMBER_MODEL_NAME_MAX + 8];
    *keys_p = 0;
    for (size_t k = 0; k < n; k++) {
        if (strcmp(tensors[k].name, name) == 0)
            return k;
        if (tensors[k].table >= 0 && table_dynamic(m, (size_t)tensors[k].table) &&
            keys_name(tensors[k].name, keys, sizeof(keys)) && strcmp(keys, name) == 0) {
            *keys_p = 1;
            return k;
        }
    }
    return n;
}

/* A dynamic table's keys in the --init file: I64 [n], n the rows of its
 * weight [n][dim] (a key twice the PS refuses when they are written);
 * @weight the model's tensor. */
static ember_status_t init_check_keys(master_t *m, const ember_st_file_t *file,
                                      const ember_model_tensor_t *weight,
                                      const ember_st_tensor_t *keys)
{
    const char *path = m->tj->settings.init_path;
    const ember_st_tensor_t *rows = ember_st_find(file, weight->name);
    if (keys->dtype != EMBER_DTYPE_I64 || keys->ndim != 1 || !rows ||
        rows->dtype != EMBER_DTYPE_F32 || rows->ndim != 2 || rows->shape[0] != keys->shape[0] ||
        rows->shape[1] != weight->shape[1])
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                                 "%s: tensor '%s' (a dynamic table's keys) must be I64 [n] with "
                                 "'%s' F32 [n, %lld]",
                                 path, keys->name, weight->name, (long long)weight->shape[1]);
    return EMBER_OK;
}

/* Every tensor of the --init file is one of the model's, F32 of its shape,
 * and every one of the model's is there (load_state_dict(strict=True));
 * a dynamic table's weight may come with its keys ("NAME.keys", I64 [n])
 * and then holds their rows ([n, dim]). */
static ember_status_t init_check(master_t *m, const ember_st_file_t *file,
                                 const ember_model_tensor_t *tensors, size_t n)
{
    const char *path = m->tj->settings.init_path;
    for (size_t i = 0; i < ember_st_count(file); i++) {
        const ember_st_tensor_t *got = ember_st_tensor_at(file, i);
        int is_keys, has_keys;
        size_t k = find_tensor(m, tensors, n, got->name, &is_keys);
        if (k == n)
            return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                                     "%s: tensor '%s' is not one of this model's", path, got->name);
        const ember_model_tensor_t *want = &tensors[k];
        if (is_keys) {
            EMBER_CHECK(init_check_keys(m, file, want, got));
            continue;
        }
        char keys[EMBER_MODEL_NAME_MAX + 8];
        has_keys = want->table >= 0 && table_dynamic(m, (size_t)want->table) &&
                   keys_name(want->name, keys, sizeof(keys)) && ember_st_find(file, keys);
        if (has_keys)
            continue; /* checked with its keys */
        if (got->dtype != EMBER_DTYPE_F32 || got->ndim != want->ndim ||
            got->shape[0] != want->shape[0] || (want->ndim == 2 && got->shape[1] != want->shape[1]))
            return ember_status_text(
                    m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                    "%s: tensor '%s' is %s of %zu dims [%lld, %lld], this model's is F32 "
                    "[%lld%s%lld]",
                    path, got->name, ember_dtype_name(got->dtype), got->ndim,
                    (long long)got->shape[0], (long long)(got->ndim > 1 ? got->shape[1] : 0),
                    (long long)want->shape[0], want->ndim == 2 ? ", " : "",
                    want->ndim == 2 ? (long long)want->shape[1] : 0LL);
    }
    for (size_t k = 0; k < n; k++) {
        if (!ember_st_find(file, tensors[k].name))
            return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_FORMAT,
                                     "%s: tensor '%s' is missing", path, tensors[k].name);
    }
    return EMBER_OK;
}

/* --init FILE: a file of the model's tensors (its own --save, or the
 * equivalent PyTorch module's state_dict). */
static ember_status_t init_from_file(master_t *m, float **rows)
{
    ember_model_tensor_t tensors[EMBER_MODEL_TENSORS_MAX];
    const size_t n = m->model->tensors(m->tj->config, tensors);
    ember_st_file_t *file;
    char why[400];
    ember_status_t status = ember_st_open(m->tj->settings.init_path, &file, why, sizeof(why));
    if (status != EMBER_OK)
        return ember_status_text(m->cause, sizeof(m->cause), status, "--init %s: %s",
                                 m->tj->settings.init_path, why);
    status = init_check(m, file, tensors, n);
    for (size_t i = 0; status == EMBER_OK && i < n; i++) {
        const int t = tensors[i].table;
        char keys[EMBER_MODEL_NAME_MAX + 8];
        if (t < 0)
            continue;
        status =
                ember_st_read_copy(file, tensors[i].name, EMBER_DTYPE_F32, (void **)&rows[t], NULL);
        if (status == EMBER_OK && table_dynamic(m, (size_t)t) &&
            keys_name(tensors[i].name, keys, sizeof(keys)) && ember_st_find(file, keys))
            status = ember_st_read_copy(file, keys, EMBER_DTYPE_I64, (void **)&m->init_keys[t],
                                        &m->init_nkeys[t]);
    }
    if (status == EMBER_OK)
        status = master_dense_from(m, file, m->tj->settings.init_path, tensors, n);
    ember_st_close(file);
    return status;
}

/* The first values: --init's, or the model's (rows it gives, or drawn). */
static ember_status_t first_values(master_t *m, float **rows)
{
    const char *init = m->tj->settings.init_path;
    if (init && is_directory(init) && m->tj->settings.table_kind == EMBER_TABLE_DYNAMIC)
        return ember_status_text(m->cause, sizeof(m->cause), EMBER_ERR_INVALID_PARAM,
                                 "--init %s: a checkpoint's tables by row do not start dynamic "
                                 "tables (resume it with --resume, or give a file of rows)",
                                 init);
    if (init && is_directory(init))
        return init_from_checkpoint(m, rows);
    if (init)
        return init_from_file(m, rows);
    return m->model->initial(m->tj->config, &m->tj->settings, m->params, rows, m->cause,
                             sizeof(m->cause));
}

ember_status_t master_tables(master_t *m)
{
    float *rows[EMBER_MODEL_TABLES_MAX] = {NULL};
    ember_status_t status;
    if (m->resume.manifest) { /* created empty, restored by each PS */
        status = create_tables(m, NULL, 1);
        if (status == EMBER_OK)
            status =
                    ember_checkpoint_restore_tables(m->job, &m->resume, m->cause, sizeof(m->cause));
    } else {
        status = first_values(m, rows);
        if (status == EMBER_OK)
            status = create_tables(m, rows, 0);
    }
    for (size_t t = 0; t < m->ntables; t++) {
        free(rows[t]);
        free(m->init_keys[t]);
        m->init_keys[t] = NULL;
    }
    if (status != EMBER_OK && !m->cause[0])
        snprintf(m->cause, sizeof(m->cause), "the master could not set up the tables");
    return status;
}

void master_tables_close(master_t *m)
{
    for (size_t t = 0; t < m->ntables; t++) {
        ember_table_close(m->handles[t]);
        m->handles[t] = NULL;
    }
}

/* ---- the result --------------------------------------------------------------------- */

/* The losses as the "losses" metadata: comma-separated, step-major. */
static char *losses_text(const float *losses, size_t count)
{
    char *text = malloc(count * 24 + 1), *p = text; /* "%.9g," is at most 16 */
    if (!text)
        return NULL;
    *p = '\0';
    for (size_t i = 0; i < count; i++)
        p += sprintf(p, "%s%.9g", i ? "," : "", (double)losses[i]);
    return text;
}

/* --save: the model's tensors and the losses ([steps][trainers], in the
 * metadata as "losses" and "losses_shape"). */
static ember_status_t save(master_t *m, const float *const *rows, const float *params,
                           const float *losses, uint64_t steps)
{
    const train_job_t *tj = m->tj;
    ember_model_tensor_t tensors[EMBER_MODEL_TENSORS_MAX];
    ember_st_tensor_t out[EMBER_MODEL_TENSORS_MAX];
    const size_t n = m->model->tensors(tj->config, tensors);
    for (size_t i = 0; i < n; i++) {
        const ember_model_tensor_t *t = &tensors[i];
        out[i] = (ember_st_tensor_t){.name = t->name,
                                     .dtype = EMBER_DTYPE_F32,
                                     .ndim = t->ndim,
                                     .shape = {t->shape[0], t->shape[1]},
                                     .data = t->table >= 0 ? (const void *)rows[t->table]
                                                           : (const void *)(params + t->offset)};
    }
    const size_t count = (size_t)steps * (size_t)tj->settings.trainers;
    char shape[64], *text = count <= SAVED_LOSSES_MAX ? losses_text(losses, count) : NULL;
    if (count <= SAVED_LOSSES_MAX && !text)
        return EMBER_ERR_NO_MEMORY;
    if (!text)
        ember_warn("master",
                   "%s: %zu losses are too many for its metadata (at most %u): --metrics has "
                   "the epochs' means",
                   tj->save_path, count, SAVED_LOSSES_MAX);
    snprintf(shape, sizeof(shape), "%llu,%d", (unsigned long long)steps, tj->settings.trainers);
    ember_st_meta_t meta[] = {
            {"producer", "ember-train"}, {"losses_shape", shape}, {"losses", text}};
    ember_status_t status = ember_st_write(tj->save_path, out, n, meta, text ? 3 : 1);
    if (status != EMBER_OK)
        ember_error("master", "cannot write %s: %s", tj->save_path, ember_status_string(status));
    else
        printf("saved %s\n", tj->save_path);
    free(text);
    return status;
}

/* A table's rows 0 .. rows - 1: a dynamic table's keys 0 .. rows - 1 (a
 * key without a row: its initial values). */
static ember_status_t read_table(ember_table_t *table, int64_t rows, float *out)
{
    if (!ember_table_dynamic(table))
        return ember_table_read_rows(table, 0, rows, out);
    int64_t *keys = first_keys(rows);
    if (!keys)
        return EMBER_ERR_NO_MEMORY;
    ember_status_t status = ember_table_read_keys(table, keys, (size_t)rows, out, NULL);
    free(keys);
    return status;
}

/* Every table whole, for the model's check and the save.  A run that
 * failed its check is still saved: the file shows how. */
ember_status_t master_result(master_t *m, const float *params, const float *losses, uint64_t steps)
{
    const train_job_t *tj = m->tj;
    const int verifies = m->model->verifies && m->model->verifies(tj->config);
    float *rows[EMBER_MODEL_TABLES_MAX] = {NULL};
    ember_status_t status = EMBER_OK;
    if (!tj->save_path && !verifies)
        return EMBER_OK;
    for (size_t t = 0; status == EMBER_OK && t < m->ntables; t++) {
        const ember_model_table_t *table = &m->tables[t];
        rows[t] = malloc((size_t)table->rows * table->dim * sizeof(float) + 4);
        status = rows[t] ? read_table(m->handles[t], table->rows, rows[t]) : EMBER_ERR_NO_MEMORY;
    }
    if (status == EMBER_OK && verifies)
        status = m->model->verify(tj->config, &tj->settings, (const float *const *)rows, params,
                                  losses, steps);
    if (tj->save_path && (status == EMBER_OK || status == EMBER_ERR_NUMERIC)) {
        ember_status_t saved = save(m, (const float *const *)rows, params, losses, steps);
        if (status == EMBER_OK)
            status = saved;
    }
    for (size_t t = 0; t < m->ntables; t++)
        free(rows[t]);
    return status;
}
