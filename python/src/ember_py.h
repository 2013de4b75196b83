/*
 * python/src: ember._C, the CPython extension under the `ember` package,
 * over libember's public API only (<ember/ember.h>).
 *
 * Threading: the GIL is released around every call that may block, so a
 * job's calls are serialised by the job's own lock (a job is used by one
 * thread at a time, <ember/job.h>).  A PS rank's serving thread holds that
 * lock for as long as it serves; Python calls to the PS then run on that
 * thread, with the GIL, from inside the serving loop (pyjob_serve).  On the
 * other ranks a Python call is queued by its handler and taken by whichever
 * Python thread next asks (Job.take_requests), and answered through the
 * lock.
 *
 * Errors: a failed ember call raises ember.EmberError (a RuntimeError) whose
 * message is the line ember logged for it (ember_log_last_error) and whose
 * `status` is ember's status name; a bad argument raises TypeError or
 * ValueError naming the argument, before anything is sent.
 */
#ifndef EMBER_PY_H
#define EMBER_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ember/ember.h>

#include <pthread.h>

/* @stmt with the GIL released (it may block). */
#define PYEMBER_NOGIL(stmt)                               \
    do {                                                  \
        PyThreadState *nogil_save_ = PyEval_SaveThread(); \
        stmt;                                             \
        PyEval_RestoreThread(nogil_save_);                \
    } while (0)

/* A job and what was made from it. */
typedef struct pychild pychild_t;

typedef struct {
    PyObject_HEAD ember_job_t *job; /* NULL once left */
    pthread_mutex_t lock;
    int serving;         /* a PS's thread is in ember_ps_serve */
    PyObject *inline_fn; /* a PS's: fn(peer, op, bytes) -> (ok, bytes), run while serving */
    ember_rpc_req_t **queue;
    size_t queued, queue_cap;
    uint16_t op_first, op_count; /* the Python ops this job registered */
    pychild_t *children;         /* tables and ebcs still open */
    PyObject *lost_at_leave;     /* [(rank, why)] when serving ended on a loss */
} pyjob_t;

/* Something that borrows the job: closed before the job is left. */
struct pychild {
    pychild_t *next;
    void (*close)(pychild_t *child);
};

extern PyTypeObject pyjob_type, pytable_type, pyebc_type, pylookup_type, pyfuture_type,
        pyrequest_type;
extern PyObject *pyember_error;

/* Raise ember.EmberError for @status of @what (the logged line, else the
 * status's name); returns NULL. */
PyObject *pyember_raise(ember_status_t status, const char *what);
/* The same with @text (a call's own error line; NULL or "": the status's
 * name) instead of the logged line. */
PyObject *pyember_raise_text(ember_status_t status, const char *what, const char *text);

/* The job's lock, taken with the GIL released (another thread may hold it
 * across a blocking call); 0 and an exception set when the job is left or
 * serving on another thread. */
int pyjob_acquire(pyjob_t *pj);
void pyjob_release(pyjob_t *pj);
void pyjob_adopt(pyjob_t *pj, pychild_t *child);
void pyjob_disown(pyjob_t *pj, pychild_t *child);

/* A contiguous buffer of @format ('q' int64, 'i' int32, 'f' float32) for
 * argument @arg: 0 and a TypeError / ValueError naming @arg otherwise. */
int pyember_buffer(PyObject *obj, const char *arg, char format, int writable, Py_buffer *view);

int pyember_table_init(PyObject *module);
int pyember_ebc_init(PyObject *module);
int pyember_rpc_init(PyObject *module);

/* Methods of Job defined elsewhere. */
PyObject *pyjob_table_create(pyjob_t *pj, PyObject *args, PyObject *kwargs);
PyObject *pyjob_table_open(pyjob_t *pj, PyObject *args);
PyObject *pyjob_ebc_create(pyjob_t *pj, PyObject *args, PyObject *kwargs);
PyObject *pyjob_rpc_register(pyjob_t *pj, PyObject *args);
PyObject *pyjob_take_requests(pyjob_t *pj, PyObject *unused);
PyObject *pyjob_call_async(pyjob_t *pj, PyObject *args, PyObject *kwargs);
PyObject *pyjob_allreduce_create(pyjob_t *pj, PyObject *unused);
void pyjob_fail_queued(pyjob_t *pj, const char *why);

#endif
