/* python/src/pyjob: ember._C.Job, a joined job (<ember/job.h>, <ember/ps.h>). */
#include "ember_py.h"

#include <string.h>

int pyjob_acquire(pyjob_t *pj)
{
    if (!pj->job) {
        PyErr_SetString(pyember_error, "the job was left (rpc.shutdown or a failure)");
        return 0;
    }
    if (pj->serving) {
        PyErr_SetString(pyember_error, "this rank is a parameter server: its thread serves "
                                       "the job, which makes no calls of its own");
        return 0;
    }
    PYEMBER_NOGIL(pthread_mutex_lock(&pj->lock));
    if (!pj->job || pj->serving) {
        pthread_mutex_unlock(&pj->lock);
        PyErr_SetString(pyember_error, !pj->job ? "the job was left" : "this rank serves");
        return 0;
    }
    ember_log_clear_error();
    return 1;
}

void pyjob_release(pyjob_t *pj)
{
    pthread_mutex_unlock(&pj->lock);
}

void pyjob_adopt(pyjob_t *pj, pychild_t *child)
{
    child->next = pj->children;
    pj->children = child;
}

void pyjob_disown(pyjob_t *pj, pychild_t *child)
{
    for (pychild_t **p = &pj->children; *p; p = &(*p)->next) {
        if (*p == child) {
            *p = child->next;
            child->next = NULL;
            return;
        }
    }
}

/* Everything made from the job, newest first (an ebc before its tables). */
static void close_children(pyjob_t *pj)
{
    while (pj->children) {
        pychild_t *child = pj->children;
        pj->children = child->next;
        child->next = NULL;
        child->close(child);
    }
}

static int parse_role(PyObject *role, int *role_p)
{
    if (role == Py_None) {
        *role_p = -1;
        return 1;
    }
    const char *text = PyUnicode_Check(role) ? PyUnicode_AsUTF8(role) : NULL;
    if (text && strcmp(text, "trainer") == 0)
        *role_p = EMBER_ROLE_TRAINER;
    else if (text && strcmp(text, "ps") == 0)
        *role_p = EMBER_ROLE_PS;
    else if (text && strcmp(text, "other") == 0)
        *role_p = EMBER_ROLE_OTHER;
    else {
        PyErr_SetString(PyExc_ValueError, "role: 'trainer', 'ps', 'other' or None");
        return 0;
    }
    return 1;
}

PyObject *pyjob_join(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"trainers", "num_ps",   "rank",   "world_size", "name",
                               "role",     "init_url", "secret", NULL};
    int trainers = 0, num_ps = 0, rank = -1, world = -1, role = -1;
    const char *name = NULL, *init_url = NULL;
    PyObject *role_obj = Py_None;
    Py_buffer secret = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$iiiizOzy*", keywords, &trainers, &num_ps,
                                     &rank, &world, &name, &role_obj, &init_url, &secret))
        return NULL;
    if (!parse_role(role_obj, &role)) {
        PyBuffer_Release(&secret);
        return NULL;
    }
    ember_job_params_t params;
    ember_job_params_init(&params);
    params.trainers = trainers;
    params.num_ps = num_ps;
    params.rank = rank;
    params.world_size = world;
    params.name = name;
    params.init_url = init_url;
    if (secret.buf && secret.len > 0) {
        params.secret = secret.buf;
        params.secret_length = (size_t)secret.len;
    }
    params.role = role;
    pyjob_t *pj = PyObject_New(pyjob_t, &pyjob_type);
    if (!pj) {
        PyBuffer_Release(&secret);
        return NULL;
    }
    pj->job = NULL;
    pj->serving = 0;
    pj->inline_fn = NULL;
    pj->queue = NULL;
    pj->queued = pj->queue_cap = 0;
    pj->op_first = pj->op_count = 0;
    pj->children = NULL;
    pj->lost_at_leave = NULL;
    pthread_mutex_init(&pj->lock, NULL);
    ember_status_t status;
    ember_log_clear_error();
    PYEMBER_NOGIL(status = ember_job_join(&params, &pj->job));
    PyBuffer_Release(&secret);
    if (status != EMBER_OK) {
        Py_DECREF(pj);
        return pyember_raise(status, "joining the job");
    }
    return (PyObject *)pj;
}

static void leave(pyjob_t *pj, ember_status_t outcome)
{
    pyjob_fail_queued(pj, "the rank left the job");
    close_children(pj);
    ember_job_t *job = pj->job;
    pj->job = NULL;
    PYEMBER_NOGIL(ember_job_leave(job, outcome));
}

static PyObject *job_leave(pyjob_t *pj, PyObject *args)
{
    int ok = 1;
    if (!PyArg_ParseTuple(args, "|p", &ok))
        return NULL;
    if (!pj->job)
        Py_RETURN_NONE;
    if (!pyjob_acquire(pj))
        return NULL;
    leave(pj, ok ? EMBER_OK : EMBER_ERR_CANCELED);
    pyjob_release(pj);
    Py_RETURN_NONE;
}

static PyObject *job_abort(pyjob_t *pj, PyObject *args)
{
    const char *cause = NULL;
    if (!PyArg_ParseTuple(args, "z", &cause))
        return NULL;
    if (!pj->job)
        Py_RETURN_NONE;
    if (!pyjob_acquire(pj))
        return NULL;
    pyjob_fail_queued(pj, "the job was aborted");
    close_children(pj);
    ember_job_t *job = pj->job;
    pj->job = NULL;
    PYEMBER_NOGIL(ember_job_abort(job, cause));
    pyjob_release(pj);
    Py_RETURN_NONE;
}

static PyObject *job_barrier(pyjob_t *pj, PyObject *args)
{
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name) || !pyjob_acquire(pj))
        return NULL;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_job_barrier(pj->job, name));
    pyjob_release(pj);
    if (status != EMBER_OK)
        return pyember_raise(status, "barrier");
    Py_RETURN_NONE;
}

/* Progress up to @timeout seconds; returns how many Python requests wait. */
static PyObject *job_wait(pyjob_t *pj, PyObject *args)
{
    double timeout = 0.0;
    if (!PyArg_ParseTuple(args, "d", &timeout) || !pyjob_acquire(pj))
        return NULL;
    ember_status_t status = EMBER_OK;
    if (pj->queued == 0) {
        PYEMBER_NOGIL(status = ember_job_wait(pj->job, timeout));
    }
    const size_t queued = pj->queued;
    pyjob_release(pj);
    if (status != EMBER_OK)
        return pyember_raise(status, ember_job_aborted(pj->job));
    return PyLong_FromSize_t(queued);
}

static PyObject *job_lost(pyjob_t *pj, PyObject *unused);

/* A PS serves until every other rank left; Python calls to it run here,
 * on this thread, through inline_fn.  Then the job is left. */
static PyObject *job_serve(pyjob_t *pj, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"threads", NULL};
    unsigned threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|I", keywords, &threads) || !pyjob_acquire(pj))
        return NULL;
    ember_ps_options_t options;
    ember_ps_options_init(&options);
    options.threads = threads;
    pj->serving = 1;
    ember_status_t status;
    PYEMBER_NOGIL(status = ember_ps_serve(pj->job, &options));
    pj->serving = 0;
    PyObject *result = NULL;
    if (status != EMBER_OK) {
        Py_XSETREF(pj->lost_at_leave, job_lost(pj, NULL)); /* before the job is left */
        pyember_raise(status, "serving");
    } else
        result = Py_NewRef(Py_None);
    leave(pj, status);
    pyjob_release(pj);
    return result;
}

static PyObject *job_set_inline(pyjob_t *pj, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "fn: a callable or None");
        return NULL;
    }
    Py_XSETREF(pj->inline_fn, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *job_name(pyjob_t *pj, PyObject *args)
{
    int rank;
    if (!PyArg_ParseTuple(args, "i", &rank))
        return NULL;
    if (!pj->job)
        return pyember_raise(EMBER_ERR_SHUTDOWN, "the job was left");
    return PyUnicode_FromString(ember_job_name(pj->job, rank));
}

static PyObject *job_role(pyjob_t *pj, PyObject *args)
{
    int rank, index;
    if (!PyArg_ParseTuple(args, "i", &rank))
        return NULL;
    if (!pj->job)
        return pyember_raise(EMBER_ERR_SHUTDOWN, "the job was left");
    ember_role_t role = ember_job_role(pj->job, rank, &index);
    return Py_BuildValue("(si)",
                         role == EMBER_ROLE_TRAINER ? "trainer"
                         : role == EMBER_ROLE_PS    ? "ps"
                                                    : "other",
                         index);
}

/* Why @rank was lost, or None. */
static PyObject *job_peer_lost(pyjob_t *pj, PyObject *args)
{
    int rank;
    if (!PyArg_ParseTuple(args, "i", &rank))
        return NULL;
    if (!pj->job || !ember_job_peer_lost(pj->job, rank))
        Py_RETURN_NONE;
    return PyUnicode_FromString(ember_job_peer_reason(pj->job, rank));
}

/* The worker address in clear (ember_tp_worker_address), for tests. */
static PyObject *job_worker_address(pyjob_t *pj, PyObject *unused)
{
    if (!pyjob_acquire(pj))
        return NULL;
    void *address = NULL;
    size_t length = 0;
    ember_status_t status =
            ember_tp_worker_address(ember_job_transport(pj->job), &address, &length);
    pyjob_release(pj);
    if (status != EMBER_OK)
        return pyember_raise(status, "worker address");
    PyObject *bytes = PyBytes_FromStringAndSize(address, (Py_ssize_t)length);
    free(address);
    return bytes;
}

/* [(rank, why)] of every rank lost so far, in rank order. */
static PyObject *job_lost(pyjob_t *pj, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    const int world = pj->job ? ember_job_world_size(pj->job) : 0;
    for (int r = 0; list && r < world; r++) {
        if (!ember_job_peer_lost(pj->job, r))
            continue;
        PyObject *item = Py_BuildValue("(is)", r, ember_job_peer_reason(pj->job, r));
        if (!item || PyList_Append(list, item) < 0)
            Py_CLEAR(list);
        Py_XDECREF(item);
    }
    return list;
}

static PyObject *job_int(pyjob_t *pj, int (*get)(const ember_job_t *))
{
    if (!pj->job)
        return pyember_raise(EMBER_ERR_SHUTDOWN, "the job was left");
    return PyLong_FromLong(get(pj->job));
}

static PyObject *get_rank(pyjob_t *pj, void *c)
{
    return job_int(pj, ember_job_rank);
}
static PyObject *get_world(pyjob_t *pj, void *c)
{
    return job_int(pj, ember_job_world_size);
}
static PyObject *get_trainers(pyjob_t *pj, void *c)
{
    return job_int(pj, ember_job_trainers);
}
static PyObject *get_num_ps(pyjob_t *pj, void *c)
{
    return job_int(pj, ember_job_num_ps);
}
static PyObject *get_coordinator(pyjob_t *pj, void *c)
{
    return job_int(pj, ember_job_coordinator);
}
static PyObject *get_left(pyjob_t *pj, void *c)
{
    return PyBool_FromLong(pj->job == NULL);
}

static PyObject *get_lost_at_leave(pyjob_t *pj, void *c)
{
    return pj->lost_at_leave ? Py_NewRef(pj->lost_at_leave) : PyList_New(0);
}

static PyObject *get_aborted(pyjob_t *pj, void *c)
{
    return PyUnicode_FromString(pj->job ? ember_job_aborted(pj->job) : "");
}

static void job_dealloc(pyjob_t *pj)
{
    if (pj->job) { /* never left: a failure, peers learn it at exit */
        pyjob_fail_queued(pj, "the rank's job object was dropped");
        close_children(pj);
        ember_job_leave(pj->job, EMBER_ERR_CANCELED);
        pj->job = NULL;
    }
    free(pj->queue);
    Py_XDECREF(pj->inline_fn);
    Py_XDECREF(pj->lost_at_leave);
    pthread_mutex_destroy(&pj->lock);
    PyObject_Free(pj);
}

static PyMethodDef job_methods[] = {
        {"leave", (PyCFunction)job_leave, METH_VARARGS, "leave(ok=True): ember_job_leave"},
        {"abort", (PyCFunction)job_abort, METH_VARARGS, "abort(cause): ember_job_abort"},
        {"barrier", (PyCFunction)job_barrier, METH_VARARGS, "barrier(name): ember_job_barrier"},
        {"wait", (PyCFunction)job_wait, METH_VARARGS,
         "wait(timeout) -> requests queued: progress (ember_job_wait)"},
        {"serve", (PyCFunction)(void (*)(void))job_serve, METH_VARARGS | METH_KEYWORDS,
         "serve(threads=0): ember_ps_serve, then leave"},
        {"set_inline", (PyCFunction)job_set_inline, METH_O,
         "set_inline(fn): a PS's Python requests run as fn(peer, op, data) -> (ok, bytes)"},
        {"name", (PyCFunction)job_name, METH_VARARGS, "name(rank)"},
        {"role", (PyCFunction)job_role, METH_VARARGS, "role(rank) -> (role, index)"},
        {"peer_lost", (PyCFunction)job_peer_lost, METH_VARARGS, "peer_lost(rank) -> why or None"},
        {"lost", (PyCFunction)job_lost, METH_NOARGS, "[(rank, why)] of the ranks lost"},
        {"worker_address", (PyCFunction)job_worker_address, METH_NOARGS,
         "this rank's UCX worker address in clear (ember_tp_worker_address)"},
        {"table_create", (PyCFunction)(void (*)(void))pyjob_table_create,
         METH_VARARGS | METH_KEYWORDS, "table_create(name, num_embeddings, embedding_dim, ...)"},
        {"table_open", (PyCFunction)pyjob_table_open, METH_VARARGS, "table_open(name)"},
        {"ebc_create", (PyCFunction)(void (*)(void))pyjob_ebc_create, METH_VARARGS | METH_KEYWORDS,
         "ebc_create(features, half_replies=False, start_step=0, cache_rows=0)"},
        {"rpc_register", (PyCFunction)pyjob_rpc_register, METH_VARARGS,
         "rpc_register(first_op, count): queue requests of these ops for Python"},
        {"take_requests", (PyCFunction)pyjob_take_requests, METH_NOARGS,
         "take_requests() -> [Request]"},
        {"allreduce_create", (PyCFunction)pyjob_allreduce_create, METH_NOARGS,
         "allreduce_create() -> Allreduce: the trainers' dense allreduce (collective)"},
        {"call_async", (PyCFunction)(void (*)(void))pyjob_call_async, METH_VARARGS | METH_KEYWORDS,
         "call_async(peer, op, data, timeout=0.0) -> Future"},
        {NULL, NULL, 0, NULL}};

static PyGetSetDef job_getset[] = {{"rank", (getter)get_rank, NULL, NULL, NULL},
                                   {"world_size", (getter)get_world, NULL, NULL, NULL},
                                   {"trainers", (getter)get_trainers, NULL, NULL, NULL},
                                   {"num_ps", (getter)get_num_ps, NULL, NULL, NULL},
                                   {"coordinator", (getter)get_coordinator, NULL, NULL, NULL},
                                   {"aborted", (getter)get_aborted, NULL, NULL, NULL},
                                   {"left", (getter)get_left, NULL, NULL, NULL},
                                   {"lost_at_leave", (getter)get_lost_at_leave, NULL,
                                    "[(rank, why)] lost when a PS's serving ended on a failure",
                                    NULL},
                                   {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject pyjob_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Job",
        .tp_basicsize = sizeof(pyjob_t),
        .tp_dealloc = (destructor)job_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "A joined ember job (ember._C.join)",
        .tp_methods = job_methods,
        .tp_getset = job_getset,
};
