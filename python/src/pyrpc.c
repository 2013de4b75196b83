/* python/src/pyrpc: Python's own calls between ranks, over the job's
 * transport (ember_rpc_*, <ember/transport.h>): requests queued for Python
 * (ember._C.Request) and calls in flight (ember._C.Future).  Only ranks
 * that proved the job secret reach these handlers: the transport refuses
 * everyone else before any handler runs. */
#include "ember_py.h"

#include <structmember.h>

#include <stdlib.h>
#include <string.h>

/* Requests queued and not yet taken by Python: beyond this, a request is
 * answered "busy" (the caller's future fails) rather than held. */
#define PY_QUEUE_MAX 65536

/* ---- a request taken by Python ------------------------------------------- */

typedef struct {
    PyObject_HEAD pychild_t child; /* answered "the rank left" when the job is left first */
    pyjob_t *pj;
    ember_rpc_req_t *req; /* NULL once answered */
    int peer, op, oneway;
    PyObject *data; /* bytes */
} pyrequest_t;

static void request_close(pychild_t *child)
{
    pyrequest_t *r = (pyrequest_t *)((char *)child - offsetof(pyrequest_t, child));
    if (r->req)
        ember_rpc_reply_error(r->req, EMBER_ERR_SHUTDOWN, "%s left the job before answering",
                              ember_job_name(r->pj->job, ember_job_rank(r->pj->job)));
    r->req = NULL;
}

/* Answer with the payload (ok) or with an error text (not ok: the caller's
 * future fails with ERR_REMOTE and the text). */
static PyObject *request_reply(pyrequest_t *r, PyObject *args)
{
    int ok;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "py*", &ok, &data))
        return NULL;
    if (!r->req) {
        PyBuffer_Release(&data);
        PyErr_SetString(pyember_error, "the request was answered already (or its rank left)");
        return NULL;
    }
    if (!pyjob_acquire(r->pj)) {
        PyBuffer_Release(&data);
        return NULL;
    }
    ember_rpc_req_t *req = r->req;
    r->req = NULL;
    pyjob_disown(r->pj, &r->child);
    ember_status_t status;
    if (ok) {
        ember_iov_t iov = {.buffer = data.buf, .length = (size_t)data.len};
        status = ember_rpc_reply(req, EMBER_OK, &iov, 1);
    } else {
        status = ember_rpc_reply_error(req, EMBER_ERR_REMOTE, "%.*s",
                                       (int)(data.len > 4000 ? 4000 : data.len), (char *)data.buf);
    }
    pyjob_release(r->pj);
    PyBuffer_Release(&data);
    if (status != EMBER_OK)
        return pyember_raise(status, "answering a request");
    Py_RETURN_NONE;
}

static void request_dealloc(pyrequest_t *r)
{
    if (r->req && r->pj->job && pyjob_acquire(r->pj)) {
        pyjob_disown(r->pj, &r->child);
        ember_rpc_reply_error(r->req, EMBER_ERR_REMOTE, "the request was dropped unanswered");
        pyjob_release(r->pj);
    } else if (r->req) {
        PyErr_Clear();
    }
    Py_XDECREF(r->data);
    Py_XDECREF(r->pj);
    PyObject_Free(r);
}

static PyMethodDef request_methods[] = {
        {"reply", (PyCFunction)request_reply, METH_VARARGS,
         "reply(ok, data): answer it (ok False: data is the error's text)"},
        {NULL, NULL, 0, NULL}};

static PyMemberDef request_members[] = {
        {"peer", T_INT, offsetof(pyrequest_t, peer), READONLY, "the caller's rank"},
        {"op", T_INT, offsetof(pyrequest_t, op), READONLY, "the op id"},
        {"oneway", T_INT, offsetof(pyrequest_t, oneway), READONLY, "nobody waits for a reply"},
        {"data", T_OBJECT, offsetof(pyrequest_t, data), READONLY, "the payload (bytes)"},
        {NULL, 0, 0, 0, NULL}};

PyTypeObject pyrequest_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Request",
        .tp_basicsize = sizeof(pyrequest_t),
        .tp_dealloc = (destructor)request_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "A Python request from another rank, to answer once (reply)",
        .tp_methods = request_methods,
        .tp_members = request_members,
};

/* ---- the handler ----------------------------------------------------------- */

/* A PS runs the request now, on its serving thread, with the GIL. */
static void run_inline(pyjob_t *pj, ember_rpc_req_t *req)
{
    size_t length = 0;
    const void *data = ember_rpc_req_data(req, &length);
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *result = PyObject_CallFunction(pj->inline_fn, "iiy#", ember_rpc_req_peer(req),
                                             (int)ember_rpc_req_op(req), (const char *)data,
                                             (Py_ssize_t)length);
    int ok = 0;
    const char *bytes = NULL;
    Py_ssize_t nbytes = 0;
    if (!result || !PyArg_ParseTuple(result, "py#", &ok, &bytes, &nbytes)) {
        PyErr_Print(); /* the function's own error goes back inside its result */
        ember_rpc_reply_error(req, EMBER_ERR_REMOTE, "the request's Python handler failed");
    } else if (ok) {
        ember_iov_t iov = {.buffer = bytes, .length = (size_t)nbytes};
        ember_rpc_reply(req, EMBER_OK, &iov, 1);
    } else {
        ember_rpc_reply_error(req, EMBER_ERR_REMOTE, "%.*s", (int)(nbytes > 4000 ? 4000 : nbytes),
                              bytes);
    }
    Py_XDECREF(result);
    PyGILState_Release(gil);
}

static void on_python_request(ember_rpc_req_t *req, void *arg)
{
    pyjob_t *pj = arg;
    if (pj->serving && pj->inline_fn) {
        run_inline(pj, req);
        return;
    }
    if (pj->queued == pj->queue_cap) {
        const size_t cap = pj->queue_cap ? 2 * pj->queue_cap : 16;
        ember_rpc_req_t **queue =
                cap <= PY_QUEUE_MAX ? realloc(pj->queue, cap * sizeof(*queue)) : NULL;
        if (!queue) {
            ember_rpc_reply_error(req, EMBER_ERR_NO_MEMORY, "%s: too many Python requests waiting",
                                  ember_job_name(pj->job, ember_job_rank(pj->job)));
            return;
        }
        pj->queue = queue;
        pj->queue_cap = cap;
    }
    pj->queue[pj->queued++] = req;
}

PyObject *pyjob_rpc_register(pyjob_t *pj, PyObject *args)
{
    int first, count;
    if (!PyArg_ParseTuple(args, "ii", &first, &count))
        return NULL;
    if (first < EMBER_OP_APP_BASE || count < 1 || first + count > EMBER_RPC_OP_MAX) {
        PyErr_Format(PyExc_ValueError, "first_op, count: ops in [%d, %d)", EMBER_OP_APP_BASE,
                     EMBER_RPC_OP_MAX);
        return NULL;
    }
    if (!pyjob_acquire(pj))
        return NULL;
    ember_tp_t *tp = ember_job_transport(pj->job);
    for (int op = first; op < first + count; op++)
        ember_rpc_register(tp, (uint16_t)op, on_python_request, pj);
    pj->op_first = (uint16_t)first;
    pj->op_count = (uint16_t)count;
    pyjob_release(pj);
    Py_RETURN_NONE;
}

void pyjob_fail_queued(pyjob_t *pj, const char *why)
{
    for (size_t i = 0; i < pj->queued; i++)
        ember_rpc_reply_error(pj->queue[i], EMBER_ERR_SHUTDOWN, "%s: %s",
                              ember_job_name(pj->job, ember_job_rank(pj->job)), why);
    pj->queued = 0;
    if (pj->job && pj->op_count) {
        ember_tp_t *tp = ember_job_transport(pj->job);
        for (int op = pj->op_first; op < pj->op_first + pj->op_count; op++)
            ember_rpc_register(tp, (uint16_t)op, NULL, NULL);
        pj->op_count = 0;
    }
}

static PyObject *request_new(pyjob_t *pj, ember_rpc_req_t *req)
{
    size_t length = 0;
    const void *data = ember_rpc_req_data(req, &length);
    pyrequest_t *r = PyObject_New(pyrequest_t, &pyrequest_type);
    if (!r)
        return NULL;
    r->pj = (pyjob_t *)Py_NewRef(pj);
    r->req = req;
    r->peer = ember_rpc_req_peer(req);
    r->op = ember_rpc_req_op(req);
    r->oneway = ember_rpc_req_oneway(req);
    r->child.close = request_close;
    r->child.next = NULL;
    r->data = PyBytes_FromStringAndSize(data, (Py_ssize_t)length);
    if (!r->data) {
        r->req = NULL;
        Py_DECREF(r);
        return NULL;
    }
    pyjob_adopt(pj, &r->child);
    return (PyObject *)r;
}

PyObject *pyjob_take_requests(pyjob_t *pj, PyObject *unused)
{
    if (!pyjob_acquire(pj))
        return NULL;
    PyObject *list = PyList_New(0);
    size_t taken = 0;
    for (; list && taken < pj->queued; taken++) {
        PyObject *r = request_new(pj, pj->queue[taken]);
        if (!r || PyList_Append(list, r) < 0) {
            if (!r) /* not taken: answered */
                ember_rpc_reply_error(pj->queue[taken], EMBER_ERR_NO_MEMORY, "out of memory");
            Py_XDECREF(r);
            Py_CLEAR(list);
            taken++;
            break;
        }
        Py_DECREF(r);
    }
    memmove(pj->queue, pj->queue + taken, (pj->queued - taken) * sizeof(*pj->queue));
    pj->queued -= taken;
    pyjob_release(pj);
    return list;
}

/* ---- a call in flight ------------------------------------------------------ */

typedef struct {
    PyObject_HEAD pychild_t child; /* released when the job is left */
    pyjob_t *pj;
    ember_future_t *future; /* NULL once released */
    Py_buffer payload;      /* borrowed by the transport until done */
    ember_status_t status;  /* INPROGRESS until done */
    PyObject *result;       /* bytes: the reply, or the error's text */
} pyfuture_t;

static void future_finish(pyfuture_t *f, ember_status_t status)
{
    f->status = status;
    size_t length = 0;
    const void *data = f->future ? ember_future_data(f->future, &length) : NULL;
    f->result = PyBytes_FromStringAndSize(data ? data : "", data ? (Py_ssize_t)length : 0);
    ember_future_release(f->future);
    f->future = NULL;
    PyBuffer_Release(&f->payload);
}

static void future_close(pychild_t *child)
{
    pyfuture_t *f = (pyfuture_t *)((char *)child - offsetof(pyfuture_t, child));
    if (f->future) {
        PyGILState_STATE gil = PyGILState_Ensure();
        ember_future_release(f->future);
        f->future = NULL;
        f->status = EMBER_ERR_SHUTDOWN;
        f->result = PyBytes_FromString("this rank left the job before the answer came");
        PyBuffer_Release(&f->payload);
        PyGILState_Release(gil);
    }
}

PyObject *pyjob_call_async(pyjob_t *pj, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"peer", "op", "data", "timeout", NULL};
    int peer, op;
    double timeout = 0.0;
    pyfuture_t *f = PyObject_New(pyfuture_t, &pyfuture_type);
    if (!f)
        return NULL;
    f->pj = NULL;
    f->future = NULL;
    f->status = EMBER_INPROGRESS;
    f->result = NULL;
    f->child.close = future_close;
    f->child.next = NULL;
    memset(&f->payload, 0, sizeof(f->payload));
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiy*|d", keywords, &peer, &op, &f->payload,
                                     &timeout)) {
        Py_DECREF(f);
        return NULL;
    }
    if (op < EMBER_OP_APP_BASE || op >= EMBER_RPC_OP_MAX) {
        PyErr_Format(PyExc_ValueError, "op: in [%d, %d)", EMBER_OP_APP_BASE, EMBER_RPC_OP_MAX);
        Py_DECREF(f);
        return NULL;
    }
    if (!pyjob_acquire(pj)) {
        Py_DECREF(f);
        return NULL;
    }
    f->pj = (pyjob_t *)Py_NewRef(pj);
    ember_iov_t iov = {.buffer = f->payload.buf, .length = (size_t)f->payload.len};
    ember_rpc_param_t param = {.timeout_s = timeout};
    ember_status_t status = ember_rpc_call_async(ember_job_transport(pj->job), peer, (uint16_t)op,
                                                 &iov, 1, NULL, 0, &param, &f->future);
    if (status == EMBER_OK)
        pyjob_adopt(pj, &f->child);
    pyjob_release(pj);
    if (status != EMBER_OK) {
        Py_DECREF(f);
        return pyember_raise(status, "calling");
    }
    return (PyObject *)f;
}

/* Progress once; True once it is done. */
static PyObject *future_poll(pyfuture_t *f, PyObject *unused)
{
    if (f->status != EMBER_INPROGRESS)
        Py_RETURN_TRUE;
    if (!pyjob_acquire(f->pj)) {
        if (f->status != EMBER_INPROGRESS) { /* closed with the job meanwhile */
            PyErr_Clear();
            Py_RETURN_TRUE;
        }
        return NULL;
    }
    ember_status_t status = ember_future_test(f->future);
    if (status != EMBER_INPROGRESS) {
        pyjob_disown(f->pj, &f->child);
        future_finish(f, status);
    }
    pyjob_release(f->pj);
    return PyBool_FromLong(f->status != EMBER_INPROGRESS);
}

/* (status name, bytes) once done: the reply, or the error's text. */
static PyObject *future_outcome(pyfuture_t *f, PyObject *unused)
{
    if (f->status == EMBER_INPROGRESS) {
        PyErr_SetString(pyember_error, "the call is still in flight");
        return NULL;
    }
    return Py_BuildValue("(sO)", f->status == EMBER_OK ? "OK" : ember_status_string(f->status),
                         f->result ? f->result : Py_None);
}

static void future_dealloc(pyfuture_t *f)
{
    if (f->future && f->pj && f->pj->job && pyjob_acquire(f->pj)) {
        pyjob_disown(f->pj, &f->child);
        ember_future_release(f->future);
        pyjob_release(f->pj);
    } else if (f->future) {
        PyErr_Clear();
    }
    PyBuffer_Release(&f->payload);
    Py_XDECREF(f->result);
    Py_XDECREF(f->pj);
    PyObject_Free(f);
}

static PyMethodDef future_methods[] = {
        {"poll", (PyCFunction)future_poll, METH_NOARGS, "progress once; True once done"},
        {"outcome", (PyCFunction)future_outcome, METH_NOARGS,
         "(status, bytes): 'OK' and the reply, or the status and the error's text"},
        {NULL, NULL, 0, NULL}};

PyTypeObject pyfuture_type = {
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ember._C.Future",
        .tp_basicsize = sizeof(pyfuture_t),
        .tp_dealloc = (destructor)future_dealloc,
        .tp_flags = Py_TPFLAGS_DEFAULT,
        .tp_doc = "A Python call in flight (Job.call_async)",
        .tp_methods = future_methods,
};
