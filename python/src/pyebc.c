/* python/src/pyebc: ember._C.Ebc and Lookup, a trainer's lookups and pushes
 * (<ember/lookup.h>).  Arrays cross as buffers, without copies: ids and
 * lengths are read straight from the caller's, pooled rows land in the
 * caller's output and gradients are sent from the caller's. */
#include "ember_py.h"

#include <stdlib.h>
#include <string.h>

ember_table_t *pytable_handle(PyObject *obj, const char *arg);

typedef struct {
    PyObject_HEAD pychild_t child;
    pyjob_t *pj;
    ember_ebc_t *ebc; /* NULL once destroyed (its lookups with it) */
    PyObject *tables; /* the tables it borrows, kept alive */
} pyebc_t;

typedef struct {
    PyObject_HEAD pyebc_t *owner;
    ember_lookup_t *lookup; /* NULL once released */
    size_t batch_size;
} pylookup_t;

static void ebc_close_child(pychild_t *child)
{
    pyebc_t *e = (pyebc_t *)((char *)child - offsetof(pyebc_t, child));
    ember_ebc_destroy(e->ebc);
    e->ebc = NULL;
}

static int parse_pooling(PyObject *obj, ember_bag_mode_t *mode)
{
    const char *text = PyUnicode_Check(obj) ? PyUnicode_AsUTF8(obj) : NULL;
    if (text && strcmp(text, "sum") == 0)
        *mode = EMBER_BAG_SUM;
    else if (text && strcmp(text, "mean") == 0)
        *mode = EMBER_BAG_MEAN;
    else if (text && strcmp(text, "max") == 0)
        *mode = EMBER_BAG_MAX;
    else {
        PyErr_Format(PyExc_ValueError, "features: pooling %R is not 'sum', 'mean' or 'max'", obj);
        return 0;
    }
    return 1;
}

/* features: [(name, table, pooling, padding_idx)] */
static int parse_features(PyObject *list, ember_feature_t **features_p, size_t *n_p)
{
    if (!PyList_Check(list) || PyList_GET_SIZE(list) == 0) {
        PyErr_SetString(PyExc_TypeError, "features: a non-empty list of (name, table, pooling, "
                                         "padding_idx)");
        return 0;
    }
    const size_t n = (size_t)PyList_GET_SIZE(list);
    ember_feature_t *features = calloc(n, sizeof(*features));
    if (!features) {
        PyErr_NoMemory();
        return 0;
    }
    for (size_t f = 0; f < n; f++) {
        PyObject *item = PyList_GET_ITEM(list, (Py_ssize_t)f), *table, *pooling;
        const char *name;
        long long padding;
        if (!PyArg_ParseTuple(item, "sOOL", &name, &table, &pooling, &padding) ||
            !(features[f].table = pytable_handle(table, "features: table")) ||
            !parse_pooling(pooling, &features[f].pooling)) {
            free(features);
            return 0;
        }
        features[f].name = name;
        features[f].padding_idx = padding;
    }
    *features_p = features;
    *n_p = n;
    return 1;
}

PyObject *pyjob_ebc_create(pyjob_t *pj, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"features", "half_replies", "start_step", "cache_rows", NULL};
    PyObject *list;
    int half = 0;
    unsigned long long start = 0;
    long long cache_rows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$pKL", keywords, &list, &half, &start,
                                     &cache_rows))
        return NULL;
    if (cache_rows < 0 || cache_rows > (1ll << 30)) {
        PyErr_Format(PyExc_ValueError, "cache_rows: %lld is not a row count in [0, 2^30]",
                     cache_rows);
        return NULL;
    }
    ember_feature_t *features;
    size_t n;
    if (!parse_features(list, &features, &n))
        return NULL;
    pyebc_t *e = PyObject_New(pyebc_t, &pyebc_type);
    if (!e || !pyjob_acquire(pj)) {
        free(features);
        Py_XDECREF(e);
        return NULL;
    }
    e->pj = (pyjob_t *)Py_NewRef(pj);
    e->ebc = NULL;
    e->tables = PyList_GetSlice(list, 0, PyList_GET_SIZE(list));
    e->child.close = ebc_close_child;
    e->child.next = NULL;
    ember_ebc_options_t options;
    ember_ebc_options_init(&options);
    options.half_replies = half;
    options.start_step = start;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_ebc_create(pj->job, features, n, &options, &e->ebc));
    if (status == EMBER_OK && cache_rows > 0 &&
        (status = ember_ebc_set_cache_rows(e->ebc, (size_t)cache_rows)) != EMBER_OK) {
        ember_ebc_destroy(e->ebc);
        e->ebc = NULL;
    }
    if (status == EMBER_OK)
        pyjob_adopt(pj, &e->child);
    pyjob_release(pj);
    free(features);
    if (status != EMBER_OK) {
        Py_DECREF(e);
        return pyember_raise(status, "creating the collection");
    }
    return (PyObject *)e;
}

static int ebc_acquire(pyebc_t *e)
{
    if (!e->ebc) {
        PyErr_SetString(pyember_error, "the collection was destroyed");
        return 0;
    }
    return pyjob_acquire(e->pj);
}

/* The optional buffers of a lookup, each checked against the others. */
typedef struct {
    Py_buffer values, lengths, offsets, weights;
    int has_lengths, has_offsets, has_weights;
} kjt_views_t;

static void views_release(kjt_views_t *v)
{
    PyBuffer_Release(&v->values);
    if (v->has_lengths)
        PyBuffer_Release(&v->lengths);
    if (v->has_offsets)
        PyBuffer_Release(&v->offsets);
    if (v->has_weights)
        PyBuffer_Release(&v->weights);
}

static int views_take(PyObject *values, PyObject *lengths, PyObject *offsets, PyObject *weights,
                      kjt_views_t *v)
{
    memset(v, 0, sizeof(*v));
    if (!pyember_buffer(values, "values", 'q', 0, &v->values))
        return 0;
    if ((lengths == Py_None) == (offsets == Py_None)) {
        PyBuffer_Release(&v->values);
        PyErr_SetString(PyExc_ValueError, "lengths, offsets: give exactly one of them");
        return 0;
    }
    if (lengths != Py_None &&
        !(v->has_lengths = pyember_buffer(lengths, "lengths", 'i', 0, &v->lengths)))
        goto fail;
    if (offsets != Py_None &&
        !(v->has_offsets = pyember_buffer(offsets, "offsets", 'q', 0, &v->offsets)))
        goto fail;
    if (weights != Py_None &&
        !(v->has_weights = pyember_buffer(weights, "weights", 'f', 0, &v->weights)))
        goto fail;
    if (v->has_weights && v->weights.len / 4 != v->values.len / 8) {
        PyErr_Format(PyExc_ValueError, "weights: %zd for %zd values", v->weights.len / 4,
                     v->values.len / 8);
        goto fail;
    }
    return 1;
fail:
    views_release(v);
    return 0;
}

static PyObject *ebc_lookup(pyebc_t *e, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"values",  "batch_size",   "lengths", "offsets",
                               "weights", "forward_only", NULL};
    PyObject *values, *lengths = Py_None, *offsets = Py_None, *weights = Py_None;
    Py_ssize_t batch;
    int forward_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On|$OOOp", keywords, &values, &batch, &lengths,
                                     &offsets, &weights, &forward_only))
        return NULL;
    if (batch < 0) {
        PyErr_SetString(PyExc_ValueError, "batch_size: >= 0");
        return NULL;
    }
    kjt_views_t v;
    if (!views_take(values, lengths, offsets, weights, &v))
        return NULL;
    const size_t nf = e->ebc ? ember_ebc_features(e->ebc) : 0;
    const size_t bags = nf * (size_t)batch;
    if (v.has_lengths && (size_t)v.lengths.len / 4 != bags) {
        PyErr_Format(PyExc_ValueError, "lengths: %zd for %zu features x %zd bags",
                     v.lengths.len / 4, nf, batch);
        views_release(&v);
        return NULL;
    }
    if (v.has_offsets && (size_t)v.offsets.len / 8 != bags + 1) {
        PyErr_Format(PyExc_ValueError, "offsets: %zd for %zu features x %zd bags (+1)",
                     v.offsets.len / 8, nf, batch);
        views_release(&v);
        return NULL;
    }
    pylookup_t *l = PyObject_New(pylookup_t, &pylookup_type);
    if (!l || !ebc_acquire(e)) {
        views_release(&v);
        Py_XDECREF(l);
        return NULL;
    }
    l->owner = (pyebc_t *)Py_NewRef(e);
    l->lookup = NULL;
    l->batch_size = (size_t)batch;
    ember_kjt_t kjt = {.num_features = nf,
                       .batch_size = (size_t)batch,
                       .values = v.values.buf,
                       .lengths = v.has_lengths ? v.lengths.buf : NULL,
                       .offsets = v.has_offsets ? v.offsets.buf : NULL,
                       .weights = v.has_weights ? v.weights.buf : NULL,
                       .num_values = (size_t)v.values.len / 8};
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_ebc_lookup(
                          e->ebc, &kjt, forward_only ? EMBER_LOOKUP_FORWARD_ONLY : 0, &l->lookup));
    pyjob_release(e->pj);
    views_release(&v);
    if (status != EMBER_OK) {
        Py_DECREF(l);
        return pyember_raise(status, "lookup");
    }
    return (PyObject *)l;
}

static PyObject *ebc_flush(pyebc_t *e, PyObject *unused)
{
    if (!ebc_acquire(e))
        return NULL;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_ebc_flush(e->ebc));
    pyjob_release(e->pj);
    if (status != EMBER_OK)
        return pyember_raise(status, "flush");
    Py_RETURN_NONE;
}

static PyObject *ebc_output_size(pyebc_t *e, PyObject *args)
{
    Py_ssize_t batch;
    if (!PyArg_ParseTuple(args, "n", &batch))
        return NULL;
    if (!e->ebc || batch < 0)
        return PyErr_Format(PyExc_ValueError, "batch_size: >= 0 on a live collection");
    return PyLong_FromSize_t(ember_ebc_output_size(e->ebc, (size_t)batch));
}

static PyObject *ebc_feature_dims(pyebc_t *e, PyObject *unused)
{
    if (!e->ebc)
        return PyErr_Format(pyember_error, "the collection was destroyed");
    const size_t n = ember_ebc_features(e->ebc);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t f = 0; list && f < n; f++)
        PyList_SET_ITEM(list, (Py_ssize_t)f,
                        PyLong_FromUnsignedLong(ember_ebc_feature_dim(e->ebc, f)));
    return list;
}

static PyObject *ebc_destroy(pyebc_t *e, PyObject *unused)
{
    if (e->ebc && pyjob_acquire(e->pj)) {
        pyjob_disown(e->pj, &e->child);
        PYEMBER_NOGIL(ebc_close_child(&e->child));
        pyjob_release(e->pj);
    } else if (e->ebc) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static void ebc_dealloc(pyebc_t *e)
{
    if (e->ebc && e->pj->job && pyjob_acquire(e->pj)) {
        pyjob_disown(e->pj, &e->child);
        ebc_close_child(&e->child);
        pyjob_release(e->pj);
    } else if (e->ebc) {
        PyErr_Clear();
    }
    Py_XDECREF(e->tables);
    Py_XDECREF(e->pj);
    PyObject_Free(e);
}

/* ember_ebc_cache_stats as a dict. */
static PyObject *ebc_cache_stats(pyebc_t *e, PyObject *unused)
{
    (void)unused;
    if (!e->ebc) {
        PyErr_SetString(pyember_error, "the collection was destroyed");
        return NULL;
    }
    ember_ebc_cache_stats_t s;
    ember_ebc_cache_stats(e->ebc, &s);
    return Py_BuildValue("{sKsKsKsKsKsKsKsK}", "capacity", (unsigned long long)s.capacity, "rows",
                         (unsigned long long)s.rows, "lookups", (unsigned long long)s.lookups,
                         "hits", (unsigned long long)s.hits, "stale_hits",
                         (unsigned long long)s.stale_hits, "oldest", (unsigned long long)s.oldest,
                         "inserted", (unsigned long long)s.inserted, "evicted",
                         (unsigned long long)s.evicted);
}

static PyMethodDef ebc_methods[] = {
        {"cache_stats", (PyCFunction)ebc_cache_stats, METH_NOARGS,
         "the row cache's counters (ember_ebc_cache_stats) as a dict"},
        {"lookup", (PyCFunction)(void (*)(void))ebc_lookup, METH_VARARGS | METH_KEYWORDS,
         "lookup(values, batch_size, *, lengths=None, offsets=None, weights=None, "
         "forward_only=False) -> Lookup"},
        {"flush", (PyCFunction)ebc_flush, METH_NOARGS, "ember_ebc_flush"},
        {"output_size", (PyCFunction)ebc_output_size, METH_VARARGS, "output_size(batch_size)"},
        {"feature_dims", (PyCFunction)ebc_feature_dims, METH_NOARGS, "each feature's dim"},
        {"destroy", (PyCFunction)ebc_destroy, METH_NOARGS, "ember_ebc_destroy"},
        {NULL, NULL, 0, NULL}};

PyTypeObject pyebc_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Ebc",
        .tp_basicsize = sizeof(pyebc_t),
        .tp_dealloc = (destructor)ebc_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "A trainer's EmbeddingBagCollection (Job.ebc_create)",
        .tp_methods = ebc_methods,
};

/* ---- a lookup ---------------------------------------------------------------- */

static int lookup_acquire(pylookup_t *l)
{
    if (!l->lookup || !l->owner->ebc) {
        PyErr_SetString(pyember_error, "the lookup was released");
        return 0;
    }
    return pyjob_acquire(l->owner->pj);
}

/* @obj as argument @arg: float32, the lookup's output size, and the job
 * taken; 0 (nothing held, an exception set) otherwise. */
static int output_buffer(pylookup_t *l, PyObject *obj, const char *arg, int writable,
                         Py_buffer *view)
{
    if (!pyember_buffer(obj, arg, 'f', writable, view))
        return 0;
    const size_t need = l->owner->ebc ? ember_ebc_output_size(l->owner->ebc, l->batch_size) : 0;
    if ((size_t)view->len / 4 != need) {
        PyErr_Format(PyExc_ValueError, "%s: %zd floats, the output is %zu", arg, view->len / 4,
                     need);
        PyBuffer_Release(view);
        return 0;
    }
    if (!lookup_acquire(l)) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* The pooled outputs into @out (float32, output_size(batch) of them). */
static PyObject *lookup_wait(pylookup_t *l, PyObject *out)
{
    Py_buffer view;
    if (!output_buffer(l, out, "out", 1, &view))
        return NULL;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_lookup_wait(l->lookup, view.buf, NULL));
    pyjob_release(l->owner->pj);
    PyBuffer_Release(&view);
    if (status != EMBER_OK)
        return pyember_raise(status, "lookup");
    Py_RETURN_NONE;
}

static PyObject *lookup_backward(pylookup_t *l, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"grad", "wait", NULL};
    PyObject *grad;
    int wait = 0;
    Py_buffer view;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p", keywords, &grad, &wait) ||
        !output_buffer(l, grad, "grad", 0, &view))
        return NULL;
    ember_status_t status;
    PYEMBER_NOGIL(
            status = ember_lookup_backward(l->lookup, view.buf, wait ? EMBER_BACKWARD_WAIT : 0));
    pyjob_release(l->owner->pj);
    PyBuffer_Release(&view);
    if (status != EMBER_OK)
        return pyember_raise(status, "pushing gradients");
    Py_RETURN_NONE;
}

static PyObject *lookup_release(pylookup_t *l, PyObject *unused)
{
    if (l->lookup && l->owner->ebc) {
        if (!pyjob_acquire(l->owner->pj))
            return NULL;
        ember_lookup_release(l->lookup);
        pyjob_release(l->owner->pj);
    }
    l->lookup = NULL;
    Py_RETURN_NONE;
}

static PyObject *lookup_step(pylookup_t *l, void *c)
{
    if (!l->lookup || !l->owner->ebc)
        return PyErr_Format(pyember_error, "the lookup was released");
    return PyLong_FromUnsignedLongLong(ember_lookup_step(l->lookup));
}

static PyObject *lookup_version(pylookup_t *l, PyObject *args)
{
    Py_ssize_t f;
    if (!PyArg_ParseTuple(args, "n", &f))
        return NULL;
    if (!l->lookup || !l->owner->ebc)
        return PyErr_Format(pyember_error, "the lookup was released");
    return PyLong_FromUnsignedLongLong(ember_lookup_version(l->lookup, (size_t)f));
}

static void lookup_dealloc(pylookup_t *l)
{
    if (l->lookup && l->owner->ebc && l->owner->pj->job && pyjob_acquire(l->owner->pj)) {
        ember_lookup_release(l->lookup);
        pyjob_release(l->owner->pj);
    } else if (l->lookup) {
        PyErr_Clear();
    }
    Py_XDECREF(l->owner);
    PyObject_Free(l);
}

static PyMethodDef lookup_methods[] = {
        {"wait", (PyCFunction)lookup_wait, METH_O, "wait(out): pooled outputs into out"},
        {"backward", (PyCFunction)(void (*)(void))lookup_backward, METH_VARARGS | METH_KEYWORDS,
         "backward(grad, wait=False): push the outputs' gradients"},
        {"release", (PyCFunction)lookup_release, METH_NOARGS, "ember_lookup_release"},
        {"version", (PyCFunction)lookup_version, METH_VARARGS, "version(feature)"},
        {NULL, NULL, 0, NULL}};

static PyGetSetDef lookup_getset[] = {{"step", (getter)lookup_step, NULL, NULL, NULL},
                                      {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pylookup_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Lookup",
        .tp_basicsize = sizeof(pylookup_t),
        .tp_dealloc = (destructor)lookup_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "One step's lookup (Ebc.lookup)",
        .tp_methods = lookup_methods,
        .tp_getset = lookup_getset,
};

int pyember_ebc_init(PyObject *module)
{
    if (PyType_Ready(&pyebc_type) < 0 || PyType_Ready(&pylookup_type) < 0)
        return -1;
    Py_INCREF(&pyebc_type);
    Py_INCREF(&pylookup_type);
    if (PyModule_AddObject(module, "Ebc", (PyObject *)&pyebc_type) < 0 ||
        PyModule_AddObject(module, "Lookup", (PyObject *)&pylookup_type) < 0)
        return -1;
    return 0;
}
