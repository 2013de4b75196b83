/* python/src/pyckpt: ember._C.Checkpoint, the job's checkpoints
 * (<ember/checkpoint.h>): the tables on the PS and each trainer's named
 * float32 tensors; and the resuming calls (find, restore the tables, read
 * a trainer's file). */
#include "ember_py.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD pychild_t child;
    pyjob_t *pj;
    ember_checkpoint_t *ckpt; /* NULL once closed */
} pyckpt_t;

static PyTypeObject pyckpt_type;

static void ckpt_close_child(pychild_t *child)
{
    pyckpt_t *c = (pyckpt_t *)((char *)child - offsetof(pyckpt_t, child));
    ember_checkpoint_close(c->ckpt);
    c->ckpt = NULL;
}

static pyjob_t *job_arg(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &pyjob_type)) {
        PyErr_Format(PyExc_TypeError, "job: an ember._C.Job, got %.80s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return (pyjob_t *)obj;
}

/* checkpoint_open(job, root=None, *, every=0, keep=1, start_step=0) */
static PyObject *py_checkpoint_open(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"job", "root", "every", "keep", "start_step", NULL};
    PyObject *job_obj;
    const char *root = NULL;
    unsigned long long every = 0, start = 0;
    unsigned keep = 1;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|z$KIK", keywords, &job_obj, &root, &every,
                                     &keep, &start))
        return NULL;
    pyjob_t *pj = job_arg(job_obj);
    if (!pj)
        return NULL;
    if (keep < 1) {
        PyErr_SetString(PyExc_ValueError, "keep: >= 1");
        return NULL;
    }
    pyckpt_t *c = PyObject_New(pyckpt_t, &pyckpt_type);
    if (!c)
        return NULL;
    c->pj = (pyjob_t *)Py_NewRef(pj);
    c->ckpt = NULL;
    c->child.close = ckpt_close_child;
    c->child.next = NULL;
    if (!pyjob_acquire(pj)) {
        Py_DECREF(c);
        return NULL;
    }
    ember_checkpoint_config_t config;
    ember_checkpoint_config_init(&config);
    config.root = root;
    config.every = every;
    config.keep = keep;
    config.start_step = start;
    char err[512] = "";
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_checkpoint_open(pj->job, &config, &c->ckpt, err, sizeof(err)));
    if (status == EMBER_OK)
        pyjob_adopt(pj, &c->child);
    pyjob_release(pj);
    if (status != EMBER_OK) {
        Py_DECREF(c);
        return pyember_raise_text(status, "opening the checkpoints", err);
    }
    return (PyObject *)c;
}

static int ckpt_acquire(pyckpt_t *c)
{
    if (!c->ckpt) {
        PyErr_SetString(pyember_error, "the checkpoints were closed");
        return 0;
    }
    return pyjob_acquire(c->pj);
}

static PyObject *ckpt_step_begin(pyckpt_t *c, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"step", "last", NULL};
    unsigned long long step;
    int last = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "K|p", keywords, &step, &last) ||
        !ckpt_acquire(c))
        return NULL;
    char err[512] = "";
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_checkpoint_step_begin(c->ckpt, step, last, err, sizeof(err)));
    pyjob_release(c->pj);
    if (status != EMBER_OK)
        return pyember_raise_text(status, "checkpoint step_begin", err);
    Py_RETURN_NONE;
}

static PyObject *ckpt_due(pyckpt_t *c, PyObject *args)
{
    unsigned long long steps;
    if (!PyArg_ParseTuple(args, "K", &steps))
        return NULL;
    return PyBool_FromLong(c->ckpt && ember_checkpoint_due(c->ckpt, steps));
}

static PyObject *ckpt_stops(pyckpt_t *c, PyObject *args)
{
    unsigned long long steps;
    if (!PyArg_ParseTuple(args, "K", &steps))
        return NULL;
    return PyBool_FromLong(c->ckpt && ember_checkpoint_stops(c->ckpt, steps));
}

/* The (name, float32 buffer, shape) triples of @list into @tensors. */
static int take_tensors(PyObject *list, ember_st_tensor_t *tensors, Py_buffer *views, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, (Py_ssize_t)i), *buffer, *shape;
        const char *name;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "sOO", &name, &buffer, &shape)) {
            PyErr_Format(PyExc_TypeError, "tensors: item %zu is not (name, float32 buffer, shape)",
                         i);
            goto fail;
        }
        if (!pyember_buffer(buffer, "tensors", 'f', 0, &views[i]))
            goto fail;
        memset(&tensors[i], 0, sizeof(tensors[i]));
        tensors[i].name = name;
        tensors[i].dtype = EMBER_DTYPE_F32;
        PyObject *seq = PySequence_Fast(shape, "tensors: a shape is a sequence of ints");
        if (!seq) {
            PyBuffer_Release(&views[i]);
            goto fail;
        }
        const Py_ssize_t ndim = PySequence_Fast_GET_SIZE(seq);
        long long numel = 1;
        if (ndim > EMBER_ST_MAX_DIMS) {
            Py_DECREF(seq);
            PyBuffer_Release(&views[i]);
            PyErr_Format(PyExc_ValueError, "tensors: %s has %zd dims (at most %d)", name, ndim,
                         EMBER_ST_MAX_DIMS);
            goto fail;
        }
        tensors[i].ndim = (size_t)ndim;
        for (Py_ssize_t d = 0; d < ndim; d++) {
            const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
            if (v < 0) {
                Py_DECREF(seq);
                PyBuffer_Release(&views[i]);
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "tensors: %s has a negative dim", name);
                goto fail;
            }
            tensors[i].shape[d] = v;
            numel *= v;
        }
        Py_DECREF(seq);
        if (numel * 4 != views[i].len) {
            PyErr_Format(PyExc_ValueError, "tensors: %s holds %zd floats, its shape %lld", name,
                         views[i].len / 4, numel);
            PyBuffer_Release(&views[i]);
            goto fail;
        }
        tensors[i].numel = (size_t)numel;
        tensors[i].nbytes = (size_t)views[i].len;
        tensors[i].data = views[i].buf;
        continue;
    fail:
        for (size_t j = 0; j < i; j++)
            PyBuffer_Release(&views[j]);
        return 0;
    }
    return 1;
}

/* save(steps, tensors=[(name, float32 buffer, shape)], meta={str: str}) */
static PyObject *ckpt_save(pyckpt_t *c, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"steps", "tensors", "meta", NULL};
    unsigned long long steps;
    PyObject *list, *meta = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KO!|O", keywords, &steps, &PyList_Type, &list,
                                     &meta))
        return NULL;
    if (meta != Py_None && !PyDict_Check(meta)) {
        PyErr_SetString(PyExc_TypeError, "meta: a dict of str to str");
        return NULL;
    }
    const size_t n = (size_t)PyList_GET_SIZE(list);
    const size_t nmeta = meta == Py_None ? 0 : (size_t)PyDict_Size(meta);
    ember_st_tensor_t *tensors = calloc(n + 1, sizeof(*tensors));
    Py_buffer *views = calloc(n + 1, sizeof(*views));
    ember_st_meta_t *pairs = calloc(nmeta + 1, sizeof(*pairs));
    if (!tensors || !views || !pairs) {
        free(tensors);
        free(views);
        free(pairs);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    if (!take_tensors(list, tensors, views, n))
        goto out;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    size_t m = 0;
    while (meta != Py_None && PyDict_Next(meta, &pos, &key, &value)) {
        pairs[m].key = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        pairs[m].value = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
        if (!pairs[m].key || !pairs[m].value) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "meta: a dict of str to str");
            goto release;
        }
        m++;
    }
    if (ckpt_acquire(c)) {
        char err[512] = "";
        ember_status_t status;
        PYEMBER_NOGIL(status = ember_checkpoint_save(c->ckpt, steps, tensors, n, pairs, m, err,
                                                     sizeof(err)));
        pyjob_release(c->pj);
        result = status == EMBER_OK ? Py_NewRef(Py_None)
                                    : pyember_raise_text(status, "saving the checkpoint", err);
    }
release:
    for (size_t i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
out:
    free(tensors);
    free(views);
    free(pairs);
    return result;
}

static PyObject *ckpt_finish(pyckpt_t *c, PyObject *args)
{
    unsigned long long steps;
    if (!PyArg_ParseTuple(args, "K", &steps) || !ckpt_acquire(c))
        return NULL;
    char err[512] = "";
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_checkpoint_finish(c->ckpt, steps, err, sizeof(err)));
    pyjob_release(c->pj);
    if (status != EMBER_OK)
        return pyember_raise_text(status, "finishing the checkpoints", err);
    Py_RETURN_NONE;
}

static PyObject *ckpt_close(pyckpt_t *c, PyObject *unused)
{
    (void)unused;
    if (c->ckpt) {
        if (!pyjob_acquire(c->pj))
            return NULL;
        pyjob_disown(c->pj, &c->child);
        PYEMBER_NOGIL(ckpt_close_child(&c->child));
        pyjob_release(c->pj);
    }
    Py_RETURN_NONE;
}

static void ckpt_dealloc(pyckpt_t *c)
{
    if (c->ckpt && c->pj->job && pyjob_acquire(c->pj)) {
        pyjob_disown(c->pj, &c->child);
        ckpt_close_child(&c->child);
        pyjob_release(c->pj);
    } else if (c->ckpt) {
        PyErr_Clear();
    }
    Py_XDECREF(c->pj);
    PyObject_Free(c);
}

static PyMethodDef ckpt_methods[] = {
        {"step_begin", (PyCFunction)(void (*)(void))ckpt_step_begin, METH_VARARGS | METH_KEYWORDS,
         "step_begin(step, last=False): ember_checkpoint_step_begin"},
        {"due", (PyCFunction)ckpt_due, METH_VARARGS, "due(steps) -> bool"},
        {"stops", (PyCFunction)ckpt_stops, METH_VARARGS, "stops(steps) -> bool"},
        {"save", (PyCFunction)(void (*)(void))ckpt_save, METH_VARARGS | METH_KEYWORDS,
         "save(steps, tensors=[(name, float32 buffer, shape)], meta=None)"},
        {"finish", (PyCFunction)ckpt_finish, METH_VARARGS, "finish(steps)"},
        {"close", (PyCFunction)ckpt_close, METH_NOARGS, "ember_checkpoint_close"},
        {NULL, NULL, 0, NULL}};

static PyTypeObject pyckpt_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Checkpoint",
        .tp_basicsize = sizeof(pyckpt_t),
        .tp_dealloc = (destructor)ckpt_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "The job's checkpoints (checkpoint_open)",
        .tp_methods = ckpt_methods,
};

/* ---- resuming -------------------------------------------------------------------- */

static int find(const char *path, ember_checkpoint_info_t *info)
{
    char err[512] = "";
    ember_status_t status;
    memset(info, 0, sizeof(*info));
    PYEMBER_NOGIL(status = ember_checkpoint_find(path, info, err, sizeof(err)));
    if (status != EMBER_OK) {
        ember_checkpoint_info_free(info);
        pyember_raise_text(status, "finding the checkpoint", err);
        return 0;
    }
    return 1;
}

/* checkpoint_find(path) -> (dir, step, trainers, num_ps) */
static PyObject *py_checkpoint_find(PyObject *self, PyObject *args)
{
    const char *path;
    ember_checkpoint_info_t info;
    (void)self;
    if (!PyArg_ParseTuple(args, "s", &path) || !find(path, &info))
        return NULL;
    PyObject *result = Py_BuildValue("(sKII)", info.dir, (unsigned long long)info.step,
                                     info.trainers, info.num_ps);
    ember_checkpoint_info_free(&info);
    return result;
}

/* checkpoint_restore_tables(job, path) -> step */
static PyObject *py_checkpoint_restore_tables(PyObject *self, PyObject *args)
{
    PyObject *job_obj;
    const char *path;
    (void)self;
    if (!PyArg_ParseTuple(args, "Os", &job_obj, &path))
        return NULL;
    pyjob_t *pj = job_arg(job_obj);
    ember_checkpoint_info_t info;
    if (!pj || !find(path, &info))
        return NULL;
    if (!pyjob_acquire(pj)) {
        ember_checkpoint_info_free(&info);
        return NULL;
    }
    char err[512] = "";
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_checkpoint_restore_tables(pj->job, &info, err, sizeof(err)));
    pyjob_release(pj);
    const unsigned long long step = info.step;
    ember_checkpoint_info_free(&info);
    if (status != EMBER_OK)
        return pyember_raise_text(status, "restoring the tables", err);
    return PyLong_FromUnsignedLongLong(step);
}

/* checkpoint_read_trainer(dir, step, trainer, meta_keys=()) ->
 * ({name: (shape, float32 bytes)}, {key: value}) */
static PyObject *py_checkpoint_read_trainer(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"dir", "step", "trainer", "meta_keys", NULL};
    const char *dir;
    unsigned long long step;
    unsigned trainer;
    PyObject *keys = NULL;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sKI|O", keywords, &dir, &step, &trainer, &keys))
        return NULL;
    char err[512] = "";
    ember_st_file_t *file = NULL;
    ember_status_t status;
    PYEMBER_NOGIL(
            status = ember_checkpoint_open_trainer_at(dir, step, trainer, &file, err, sizeof(err)));
    if (status != EMBER_OK)
        return pyember_raise_text(status, "reading the trainer's checkpoint", err);
    PyObject *tensors = PyDict_New(), *meta = PyDict_New(), *result = NULL;
    if (!tensors || !meta)
        goto out;
    for (size_t i = 0; i < ember_st_count(file); i++) {
        const ember_st_tensor_t *t = ember_st_tensor_at(file, i);
        if (t->dtype != EMBER_DTYPE_F32) {
            PyErr_Format(PyExc_ValueError, "%s: tensor %s is not float32", dir, t->name);
            goto out;
        }
        PyObject *shape = PyTuple_New((Py_ssize_t)t->ndim);
        for (size_t d = 0; shape && d < t->ndim; d++)
            PyTuple_SET_ITEM(shape, (Py_ssize_t)d, PyLong_FromLongLong(t->shape[d]));
        PyObject *bytes = PyBytes_FromStringAndSize(t->data, (Py_ssize_t)t->nbytes);
        PyObject *pair = shape && bytes ? PyTuple_Pack(2, shape, bytes) : NULL;
        Py_XDECREF(shape);
        Py_XDECREF(bytes);
        if (!pair || PyDict_SetItemString(tensors, t->name, pair) < 0) {
            Py_XDECREF(pair);
            goto out;
        }
        Py_DECREF(pair);
    }
    if (keys) {
        PyObject *seq = PySequence_Fast(keys, "meta_keys: a sequence of str");
        if (!seq)
            goto out;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
            PyObject *key = PySequence_Fast_GET_ITEM(seq, k);
            const char *text = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
            const char *value = text ? ember_st_metadata(file, text) : NULL;
            if (!text) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_TypeError, "meta_keys: a sequence of str");
                goto out;
            }
            if (value) {
                PyObject *v = PyUnicode_FromString(value);
                if (!v || PyDict_SetItem(meta, key, v) < 0) {
                    Py_XDECREF(v);
                    Py_DECREF(seq);
                    goto out;
                }
                Py_DECREF(v);
            }
        }
        Py_DECREF(seq);
    }
    result = PyTuple_Pack(2, tensors, meta);
out:
    Py_XDECREF(tensors);
    Py_XDECREF(meta);
    ember_st_close(file);
    return result;
}

static PyMethodDef ckpt_functions[] = {
        {"checkpoint_open", (PyCFunction)(void (*)(void))py_checkpoint_open,
         METH_VARARGS | METH_KEYWORDS,
         "checkpoint_open(job, root=None, *, every=0, keep=1, start_step=0) -> Checkpoint"},
        {"checkpoint_find", (PyCFunction)py_checkpoint_find, METH_VARARGS,
         "checkpoint_find(path) -> (dir, step, trainers, num_ps)"},
        {"checkpoint_restore_tables", (PyCFunction)py_checkpoint_restore_tables, METH_VARARGS,
         "checkpoint_restore_tables(job, path) -> step: every PS restores its shards"},
        {"checkpoint_read_trainer", (PyCFunction)(void (*)(void))py_checkpoint_read_trainer,
         METH_VARARGS | METH_KEYWORDS,
         "checkpoint_read_trainer(dir, step, trainer, meta_keys=()) -> ({name: (shape, "
         "bytes)}, {key: value})"},
        {NULL, NULL, 0, NULL}};

int pyember_ckpt_init(PyObject *module)
{
    if (PyType_Ready(&pyckpt_type) < 0)
        return -1;
    Py_INCREF(&pyckpt_type);
    if (PyModule_AddObject(module, "Checkpoint", (PyObject *)&pyckpt_type) < 0)
        return -1;
    return PyModule_AddFunctions(module, ckpt_functions);
}
