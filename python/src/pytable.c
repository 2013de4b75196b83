/* python/src/pytable: ember._C.Table, a table on the PS (<ember/table.h>). */
#include "ember_py.h"

#include <math.h>
#include <string.h>

typedef struct {
    PyObject_HEAD pychild_t child;
    pyjob_t *pj;
    ember_table_t *table; /* NULL once closed */
} pytable_t;

static pytable_t *as_table(pychild_t *child)
{
    return (pytable_t *)((char *)child - offsetof(pytable_t, child));
}

static void table_close_child(pychild_t *child)
{
    pytable_t *t = as_table(child);
    ember_table_close(t->table);
    t->table = NULL;
}

ember_table_t *pytable_handle(PyObject *obj, const char *arg)
{
    if (!PyObject_TypeCheck(obj, &pytable_type)) {
        PyErr_Format(PyExc_TypeError, "%s: an ember._C.Table, got %.80s", arg,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    pytable_t *t = (pytable_t *)obj;
    if (!t->table)
        PyErr_Format(pyember_error, "%s: the table was closed", arg);
    return t->table;
}

/* A float option of @options (a dict) into *@value, when given. */
static int opt_float(PyObject *options, const char *key, float *value)
{
    PyObject *item = PyDict_GetItemString(options, key);
    if (!item)
        return 1;
    const double v = PyFloat_AsDouble(item);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "optimizer: %s must be a number", key);
        return 0;
    }
    if (!isfinite(v) || fabs(v) > 3.4e38) {
        PyErr_Format(PyExc_ValueError, "optimizer: %s %g is not a finite float32", key, v);
        return 0;
    }
    *value = (float)v;
    return 1;
}

static int opt_flag(PyObject *options, const char *key, int *value)
{
    PyObject *item = PyDict_GetItemString(options, key);
    if (!item)
        return 1;
    const int v = PyObject_IsTrue(item);
    if (v < 0)
        return 0;
    *value = v;
    return 1;
}

/* An optimizer from {"kind": "sgd" | "adagrad" | "rowwise_adagrad" |
 * "adam", "lr": ..., and ember_opt_config_t's other fields by name}. */
int pyember_optimizer(PyObject *options, ember_opt_config_t *cfg)
{
    static const char *known[] = {"kind",
                                  "lr",
                                  "momentum",
                                  "dampening",
                                  "nesterov",
                                  "lr_decay",
                                  "initial_accumulator",
                                  "eps",
                                  "beta1",
                                  "beta2",
                                  "adam_row_step",
                                  NULL};
    if (!PyDict_Check(options)) {
        PyErr_SetString(PyExc_TypeError, "optimizer: a dict {'kind': ..., 'lr': ...}");
        return 0;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(options, &pos, &key, &value)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        int found = 0;
        for (int i = 0; k && known[i]; i++)
            found |= strcmp(k, known[i]) == 0;
        if (!found) {
            PyErr_Format(PyExc_ValueError, "optimizer: ember's optimizers have no option %R", key);
            return 0;
        }
    }
    PyObject *kind = PyDict_GetItemString(options, "kind");
    const char *text = kind && PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
    ember_opt_kind_t k;
    if (!text || ember_opt_kind_parse(text, &k) != EMBER_OK) {
        PyErr_Format(PyExc_ValueError,
                     "optimizer: kind %R is none of sgd, adagrad, rowwise_adagrad, adam", kind);
        return 0;
    }
    float lr = 0.01f;
    if (!opt_float(options, "lr", &lr))
        return 0;
    ember_opt_config_default(k, lr, cfg);
    if (!opt_float(options, "momentum", &cfg->momentum) ||
        !opt_float(options, "dampening", &cfg->dampening) ||
        !opt_flag(options, "nesterov", &cfg->nesterov) ||
        !opt_float(options, "lr_decay", &cfg->lr_decay) ||
        !opt_float(options, "initial_accumulator", &cfg->initial_accumulator) ||
        !opt_float(options, "eps", &cfg->eps) || !opt_float(options, "beta1", &cfg->beta1) ||
        !opt_float(options, "beta2", &cfg->beta2) ||
        !opt_flag(options, "adam_row_step", &cfg->adam_row_step))
        return 0;
    char err[256];
    if (ember_opt_config_check(cfg, err, sizeof(err)) != EMBER_OK) {
        PyErr_Format(PyExc_ValueError, "optimizer: %s", err);
        return 0;
    }
    return 1;
}

static int pick(const char *arg, const char *given, const char *const names[], int *value)
{
    for (int i = 0; names[i]; i++) {
        if (strcmp(given, names[i]) == 0) {
            *value = i;
            return 1;
        }
    }
    PyErr_Format(PyExc_ValueError, "%s: %R is not one of the choices", arg,
                 PyUnicode_FromString(given));
    return 0;
}

static PyObject *table_new(pyjob_t *pj, ember_table_t *table)
{
    pytable_t *t = PyObject_New(pytable_t, &pytable_type);
    if (!t) {
        ember_table_close(table);
        return NULL;
    }
    t->pj = (pyjob_t *)Py_NewRef(pj);
    t->table = table;
    t->child.close = table_close_child;
    t->child.next = NULL;
    pyjob_adopt(pj, &t->child);
    return (PyObject *)t;
}

PyObject *pyjob_table_create(pyjob_t *pj, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"name",      "num_embeddings", "embedding_dim", "rows",
                               "init",      "seed",           "dtype",         "sharding",
                               "first_ps",  "num_shards",     "optimizer",     "consistency",
                               "staleness", "reduce",         "trainers",      NULL};
    static const char *const inits[] = {"normal", "uniform", "zeros", NULL};
    static const char *const dtypes[] = {"float32", "float16", NULL};
    static const char *const shardings[] = {"row_wise", "table_wise", NULL};
    static const char *const consistencies[] = {"sync", "async", NULL};
    static const char *const reduces[] = {"sum", "mean", NULL};
    const char *name, *init = "normal", *dtype = "float32", *sharding = "row_wise",
                      *consistency = "sync", *reduce = "sum";
    long long num_embeddings;
    unsigned dim, first_ps = 0, num_shards = 0, staleness = 0, trainers = 0;
    unsigned long long seed = 0;
    PyObject *rows = Py_None, *optimizer = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sLI|$OsKssIIOsIsI", keywords, &name,
                                     &num_embeddings, &dim, &rows, &init, &seed, &dtype, &sharding,
                                     &first_ps, &num_shards, &optimizer, &consistency, &staleness,
                                     &reduce, &trainers))
        return NULL;
    ember_table_config_t config;
    ember_table_config_init(&config);
    int v;
    config.name = name;
    config.num_embeddings = num_embeddings;
    config.embedding_dim = dim;
    config.seed = seed;
    config.first_ps = first_ps;
    config.num_shards = num_shards;
    config.staleness = staleness;
    config.trainers = trainers;
    if (!pick("init", init, inits, &v))
        return NULL;
    config.init = (ember_table_init_t)v;
    if (!pick("dtype", dtype, dtypes, &v))
        return NULL;
    config.dtype = v ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
    if (!pick("sharding", sharding, shardings, &v))
        return NULL;
    config.sharding = (ember_sharding_t)v;
    if (!pick("consistency", consistency, consistencies, &v))
        return NULL;
    config.consistency = (ember_consistency_t)v;
    if (!pick("reduce", reduce, reduces, &v))
        return NULL;
    config.reduce = (ember_sparse_reduce_t)v;
    if (optimizer != Py_None && !pyember_optimizer(optimizer, &config.optimizer))
        return NULL;
    Py_buffer view = {0};
    if (rows != Py_None) {
        if (!pyember_buffer(rows, "rows", 'f', 0, &view))
            return NULL;
        if (num_embeddings < 0 ||
            (unsigned long long)view.len !=
                    (unsigned long long)num_embeddings * dim * sizeof(float)) {
            PyErr_Format(PyExc_ValueError, "rows: %zd floats for a table of %lld x %u",
                         view.len / (Py_ssize_t)sizeof(float), num_embeddings, dim);
            PyBuffer_Release(&view);
            return NULL;
        }
        config.init = EMBER_TABLE_INIT_ROWS;
        config.initial_rows = view.buf;
    }
    if (!pyjob_acquire(pj)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    ember_table_t *table = NULL;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_table_create(pj->job, &config, &table));
    PyObject *result =
            status == EMBER_OK ? table_new(pj, table) : pyember_raise(status, "creating the table");
    pyjob_release(pj);
    PyBuffer_Release(&view);
    return result;
}

PyObject *pyjob_table_open(pyjob_t *pj, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name) || !pyjob_acquire(pj))
        return NULL;
    ember_table_t *table = NULL;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_table_open(pj->job, name, &table));
    PyObject *result =
            status == EMBER_OK ? table_new(pj, table) : pyember_raise(status, "opening the table");
    pyjob_release(pj);
    return result;
}

static int table_acquire(pytable_t *t)
{
    if (!t->table) {
        PyErr_SetString(pyember_error, "the table was closed");
        return 0;
    }
    return pyjob_acquire(t->pj);
}

/* Rows [first, first + count) into @out (float32, count * dim). */
static PyObject *table_read_rows(pytable_t *t, PyObject *args)
{
    long long first, count;
    PyObject *out;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "LLO", &first, &count, &out) ||
        !pyember_buffer(out, "out", 'f', 1, &view))
        return NULL;
    const ember_table_config_t *c = t->table ? ember_table_config(t->table) : NULL;
    if (c && (count < 0 || (unsigned long long)view.len <
                                   (unsigned long long)count * c->embedding_dim * sizeof(float))) {
        PyErr_Format(PyExc_ValueError, "out: %zd floats for %lld rows of %u", view.len / 4, count,
                     c->embedding_dim);
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!table_acquire(t)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_table_read_rows(t->table, first, count, view.buf));
    pyjob_release(t->pj);
    PyBuffer_Release(&view);
    if (status != EMBER_OK)
        return pyember_raise(status, "reading rows");
    Py_RETURN_NONE;
}

static PyObject *table_write_rows(pytable_t *t, PyObject *args)
{
    long long first;
    PyObject *rows;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "LO", &first, &rows) ||
        !pyember_buffer(rows, "rows", 'f', 0, &view))
        return NULL;
    const ember_table_config_t *c = t->table ? ember_table_config(t->table) : NULL;
    const long long row_bytes = c ? (long long)c->embedding_dim * (long long)sizeof(float) : 1;
    if (c && view.len % row_bytes != 0) {
        PyErr_Format(PyExc_ValueError, "rows: %zd floats is not whole rows of %u", view.len / 4,
                     c->embedding_dim);
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!table_acquire(t)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_table_write_rows(t->table, first, (int64_t)(view.len / row_bytes),
                                                  view.buf));
    pyjob_release(t->pj);
    PyBuffer_Release(&view);
    if (status != EMBER_OK)
        return pyember_raise(status, "writing rows");
    Py_RETURN_NONE;
}

/* set_optimizer(dict) -> changed */
static PyObject *table_set_optimizer(pytable_t *t, PyObject *options)
{
    ember_opt_config_t cfg;
    if (!pyember_optimizer(options, &cfg) || !table_acquire(t))
        return NULL;
    int changed = 0;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_table_set_optimizer(t->table, &cfg, &changed));
    pyjob_release(t->pj);
    if (status != EMBER_OK)
        return pyember_raise(status, "setting the optimizer");
    return PyBool_FromLong(changed);
}

static PyObject *table_close(pytable_t *t, PyObject *unused)
{
    if (t->table) {
        pyjob_disown(t->pj, &t->child);
        table_close_child(&t->child);
    }
    Py_RETURN_NONE;
}

static PyObject *get_config(pytable_t *t, void *c)
{
    if (!t->table)
        return pyember_raise(EMBER_ERR_SHUTDOWN, "the table was closed");
    const ember_table_config_t *cfg = ember_table_config(t->table);
    return Py_BuildValue("{s:s,s:L,s:I,s:s,s:s,s:I,s:I,s:s,s:f,s:s,s:I,s:I}", "name", cfg->name,
                         "num_embeddings", (long long)cfg->num_embeddings, "embedding_dim",
                         cfg->embedding_dim, "dtype",
                         cfg->dtype == EMBER_DTYPE_F16 ? "float16" : "float32", "sharding",
                         cfg->sharding == EMBER_SHARD_TABLE_WISE ? "table_wise" : "row_wise",
                         "first_ps", cfg->first_ps, "num_shards", cfg->num_shards, "optimizer",
                         ember_opt_kind_name(cfg->optimizer.kind), "lr", (double)cfg->optimizer.lr,
                         "consistency", cfg->consistency == EMBER_ASYNC ? "async" : "sync",
                         "staleness", cfg->staleness, "trainers", cfg->trainers);
}

static void table_dealloc(pytable_t *t)
{
    if (t->table) {
        pyjob_disown(t->pj, &t->child);
        table_close_child(&t->child);
    }
    Py_XDECREF(t->pj);
    PyObject_Free(t);
}

static PyMethodDef table_methods[] = {
        {"read_rows", (PyCFunction)table_read_rows, METH_VARARGS,
         "read_rows(first, count, out): ember_table_read_rows into a float32 buffer"},
        {"write_rows", (PyCFunction)table_write_rows, METH_VARARGS,
         "write_rows(first, rows): ember_table_write_rows"},
        {"set_optimizer", (PyCFunction)table_set_optimizer, METH_O,
         "set_optimizer({'kind': ..., 'lr': ...}) -> changed"},
        {"close", (PyCFunction)table_close, METH_NOARGS, "ember_table_close"},
        {NULL, NULL, 0, NULL}};

static PyGetSetDef table_getset[] = {{"config", (getter)get_config, NULL, NULL, NULL},
                                     {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pytable_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Table",
        .tp_basicsize = sizeof(pytable_t),
        .tp_dealloc = (destructor)table_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "An ember table (Job.table_create / table_open)",
        .tp_methods = table_methods,
        .tp_getset = table_getset,
};

int pyember_table_init(PyObject *module)
{
    if (PyType_Ready(&pytable_type) < 0)
        return -1;
    Py_INCREF(&pytable_type);
    return PyModule_AddObject(module, "Table", (PyObject *)&pytable_type);
}
