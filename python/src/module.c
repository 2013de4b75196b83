/* python/src/module: ember._C, its exception and the buffers it reads. */
#include "ember_py.h"

#include <string.h>

PyObject *pyember_error;

PyObject *pyember_raise_text(ember_status_t status, const char *what, const char *text)
{
    PyObject *message = PyUnicode_FromFormat("%s: %s", what,
                                             text && *text ? text : ember_status_string(status));
    if (!message)
        return NULL;
    PyObject *error = PyObject_CallOneArg(pyember_error, message);
    Py_DECREF(message);
    if (!error)
        return NULL;
    PyObject *name = PyUnicode_FromString(ember_status_string(status));
    if (name) {
        PyObject_SetAttrString(error, "status", name);
        Py_DECREF(name);
    }
    PyErr_SetObject(pyember_error, error);
    Py_DECREF(error);
    ember_log_clear_error();
    return NULL;
}

PyObject *pyember_raise(ember_status_t status, const char *what)
{
    return pyember_raise_text(status, what, ember_log_last_error());
}

/* The struct-module format codes that mean @format's C type on this ABI. */
static int format_matches(const char *given, char format)
{
    if (!given)
        given = "B";
    if (*given == '@' || *given == '=' || *given == '<')
        given++;
    if (given[0] == '\0' || given[1] != '\0')
        return 0;
    switch (format) {
    case 'q': /* int64: numpy writes 'l' on LP64 */
        return given[0] == 'q' || (given[0] == 'l' && sizeof(long) == 8);
    case 'i': return given[0] == 'i' || (given[0] == 'l' && sizeof(long) == 4);
    default: return given[0] == format;
    }
}

static const char *format_name(char format)
{
    return format == 'q' ? "int64" : format == 'i' ? "int32" : "float32";
}

int pyember_buffer(PyObject *obj, const char *arg, char format, int writable, Py_buffer *view)
{
    const int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a %scontiguous %s array (a CPU tensor's .numpy()), got %.80s",
                     arg, writable ? "writable " : "", format_name(format), Py_TYPE(obj)->tp_name);
        return 0;
    }
    if (!format_matches(view->format, format)) {
        PyErr_Format(PyExc_TypeError, "%s: expected %s elements, got format '%s'", arg,
                     format_name(format), view->format ? view->format : "B");
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

static PyObject *py_version(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(II)", (unsigned)EMBER_ABI_MAJOR(ember_abi_version()),
                         (unsigned)EMBER_ABI_MINOR(ember_abi_version()));
}

PyObject *pyjob_join(PyObject *self, PyObject *args, PyObject *kwargs);
int pyember_ckpt_init(PyObject *module);
int pyember_allreduce_init(PyObject *module);

static PyMethodDef module_methods[] = {
        {"join", (PyCFunction)(void (*)(void))pyjob_join, METH_VARARGS | METH_KEYWORDS,
         "join(*, trainers, num_ps, rank=-1, world_size=-1, name=None, role=None, "
         "init_url=None, secret=None) -> Job: ember_job_join"},
        {"abi_version", py_version, METH_NOARGS, "libember's ABI version (major, minor)"},
        {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "ember._C",
                                        "ember's C API (libember) for the ember package", -1,
                                        module_methods};

static int add_type(PyObject *module, PyTypeObject *type, const char *name)
{
    if (PyType_Ready(type) < 0)
        return -1;
    Py_INCREF(type);
    return PyModule_AddObject(module, name, (PyObject *)type);
}

PyMODINIT_FUNC PyInit__C(void)
{
    if (ember_config_init() != EMBER_OK) {
        PyErr_SetString(PyExc_ImportError, "ember._C: the EMBER_* environment is invalid "
                                           "(see the line logged above)");
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (!module)
        return NULL;
    pyember_error = PyErr_NewExceptionWithDoc("ember._C.EmberError",
                                              "A failed ember call; `status` names ember's status.",
                                              PyExc_RuntimeError, NULL);
    if (!pyember_error || PyModule_AddObject(module, "EmberError", Py_NewRef(pyember_error)) < 0 ||
        add_type(module, &pyjob_type, "Job") < 0 ||
        add_type(module, &pyfuture_type, "Future") < 0 ||
        add_type(module, &pyrequest_type, "Request") < 0 || pyember_table_init(module) < 0 ||
        pyember_ebc_init(module) < 0 || pyember_ckpt_init(module) < 0 ||
        pyember_allreduce_init(module) < 0 ||
        PyModule_AddIntConstant(module, "OP_APP_BASE", EMBER_OP_APP_BASE) < 0 ||
        PyModule_AddIntConstant(module, "JOB_FROM_ROLES", EMBER_JOB_FROM_ROLES) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
