/* python/src/pyallreduce: ember._C.Allreduce, the trainers' dense
 * allreduce (<ember/allreduce.h>) on host memory: a float32 buffer reduced
 * in place, no copy. */
#include "ember_py.h"

#include <string.h>

typedef struct {
    PyObject_HEAD pychild_t child;
    pyjob_t *pj;
    ember_allreduce_t *ar; /* NULL once destroyed */
} pyallreduce_t;

static PyTypeObject pyallreduce_type;

static void allreduce_close_child(pychild_t *child)
{
    pyallreduce_t *a = (pyallreduce_t *)((char *)child - offsetof(pyallreduce_t, child));
    ember_allreduce_destroy(a->ar);
    a->ar = NULL;
}

/* Job.allreduce_create(): collective, every trainer. */
PyObject *pyjob_allreduce_create(pyjob_t *pj, PyObject *unused)
{
    pyallreduce_t *a = PyObject_New(pyallreduce_t, &pyallreduce_type);
    if (!a)
        return NULL;
    a->pj = NULL;
    a->ar = NULL;
    a->child.close = allreduce_close_child;
    a->child.next = NULL;
    if (!pyjob_acquire(pj)) {
        Py_DECREF(a);
        return NULL;
    }
    a->pj = (pyjob_t *)Py_NewRef(pj);
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_allreduce_create(pj->job, NULL, &a->ar));
    if (status == EMBER_OK)
        pyjob_adopt(pj, &a->child);
    pyjob_release(pj);
    if (status != EMBER_OK) {
        Py_DECREF(a);
        return pyember_raise(status, "creating the allreduce");
    }
    return (PyObject *)a;
}

/* allreduce(data, op="sum" | "avg"): @data reduced in place. */
static PyObject *allreduce_run(pyallreduce_t *a, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "op", NULL};
    PyObject *data;
    const char *op = "sum";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|s", keywords, &data, &op))
        return NULL;
    ember_allreduce_op_t which;
    if (strcmp(op, "sum") == 0)
        which = EMBER_ALLREDUCE_SUM;
    else if (strcmp(op, "avg") == 0)
        which = EMBER_ALLREDUCE_AVG;
    else
        return PyErr_Format(PyExc_ValueError, "op: 'sum' or 'avg', got '%s'", op);
    if (!a->ar)
        return PyErr_Format(pyember_error, "the allreduce was destroyed");
    Py_buffer view;
    if (!pyember_buffer(data, "data", 'f', 1, &view))
        return NULL;
    if (!pyjob_acquire(a->pj)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    ember_status_t status;
    PYEMBER_NOGIL(
            status = ember_allreduce(a->ar, view.buf, (size_t)view.len / sizeof(float), which));
    pyjob_release(a->pj);
    PyBuffer_Release(&view);
    if (status != EMBER_OK)
        return pyember_raise(status, "allreduce");
    Py_RETURN_NONE;
}

static PyObject *allreduce_destroy(pyallreduce_t *a, PyObject *unused)
{
    if (a->ar) {
        if (!pyjob_acquire(a->pj))
            return NULL;
        pyjob_disown(a->pj, &a->child);
        PYEMBER_NOGIL(allreduce_close_child(&a->child));
        pyjob_release(a->pj);
    }
    Py_RETURN_NONE;
}

static void allreduce_dealloc(pyallreduce_t *a)
{
    if (a->ar && a->pj && a->pj->job && pyjob_acquire(a->pj)) {
        pyjob_disown(a->pj, &a->child);
        allreduce_close_child(&a->child);
        pyjob_release(a->pj);
    } else if (a->ar) {
        PyErr_Clear();
    }
    Py_XDECREF(a->pj);
    PyObject_Free(a);
}

static PyMethodDef allreduce_methods[] = {
        {"allreduce", (PyCFunction)(void (*)(void))allreduce_run, METH_VARARGS | METH_KEYWORDS,
         "allreduce(data, op='sum'|'avg'): ember_allreduce, in place"},
        {"destroy", (PyCFunction)allreduce_destroy, METH_NOARGS, "ember_allreduce_destroy"},
        {NULL, NULL, 0, NULL}};

static PyTypeObject pyallreduce_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Allreduce",
        .tp_basicsize = sizeof(pyallreduce_t),
        .tp_dealloc = (destructor)allreduce_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "The trainers' dense allreduce (Job.allreduce_create)",
        .tp_methods = allreduce_methods,
};

int pyember_allreduce_init(PyObject *module)
{
    if (PyType_Ready(&pyallreduce_type) < 0)
        return -1;
    Py_INCREF(&pyallreduce_type);
    return PyModule_AddObject(module, "Allreduce", (PyObject *)&pyallreduce_type);
}
