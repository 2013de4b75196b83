/*
 * api/names: the job's table names, kept by the coordinator.
 *
 * A table's creator claims its name (and gets the table id the PS will
 * know it by: unique in the job, at most one per PS table slot), creates
 * its shards, then publishes its description; a rank that opens it asks
 * for the name and is answered once it is published.  The coordinator's
 * own calls go straight in; everyone else's are API_OP_TABLE_NAME calls.
 */
#include "api/api.h"

#include "common/clock.h"
#include "common/reserve.h"
#include "engine/wire/protocol.h"

#include <ember/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAMES_MAX EMBER_WIRE_MAX_TABLES /* a PS's table ids */

typedef enum {
    NAME_FREE = 0,
    NAME_CLAIMED,
    NAME_PUBLISHED
} name_state_t;

typedef struct {
    name_state_t state;
    api_table_desc_t desc; /* name and creator from the claim; all once published */
} name_entry_t;

/* A FIND waiting for its name to be published. */
typedef struct {
    ember_rpc_req_t *req;
    char name[EMBER_TABLE_NAME_MAX];
} name_wait_t;

struct api_names {
    name_entry_t entries[NAMES_MAX]; /* by table id */
    name_wait_t *waits;
    size_t nwaits, waits_capacity;
};

static name_entry_t *name_lookup(api_names_t *names, const char *name)
{
    for (size_t id = 0; id < NAMES_MAX; id++) {
        if (names->entries[id].state != NAME_FREE &&
            strcmp(names->entries[id].desc.name, name) == 0)
            return &names->entries[id];
    }
    return NULL;
}

/* ---- the coordinator's side ----------------------------------------------- */

static ember_status_t names_claim(ember_job_t *job, int rank, const char *name, uint32_t *id_p,
                                  char *err, size_t err_length)
{
    api_names_t *names = job->names;
    const name_entry_t *taken = name_lookup(names, name);
    if (taken)
        return ember_status_text(err, err_length, EMBER_ERR_EXISTS,
                                 "table %s exists in the job already (created by %s)", name,
                                 ember_tp_peer_name(job->tp, taken->desc.creator));
    for (uint32_t id = 0; id < NAMES_MAX; id++) {
        name_entry_t *e = &names->entries[id];
        if (e->state != NAME_FREE)
            continue;
        *e = (name_entry_t){.state = NAME_CLAIMED, .desc = {.table_id = id, .creator = rank}};
        snprintf(e->desc.name, sizeof(e->desc.name), "%s", name);
        *id_p = id;
        return EMBER_OK;
    }
    return ember_status_text(err, err_length, EMBER_ERR_OUT_OF_RANGE,
                             "table %s: %d tables live in the job already", name, NAMES_MAX);
}

/* A published name's waiters answered with its description. */
static void names_answer(ember_job_t *job, const name_entry_t *e)
{
    api_names_t *names = job->names;
    size_t kept = 0;
    for (size_t i = 0; i < names->nwaits; i++) {
        if (strcmp(names->waits[i].name, e->desc.name) != 0) {
            names->waits[kept++] = names->waits[i];
            continue;
        }
        ember_iov_t iov = {&e->desc, sizeof(e->desc)};
        ember_rpc_reply(names->waits[i].req, EMBER_OK, &iov, 1);
    }
    names->nwaits = kept;
}

static ember_status_t names_publish(ember_job_t *job, int rank, const api_table_desc_t *desc,
                                    char *err, size_t err_length)
{
    name_entry_t *e = desc->table_id < NAMES_MAX ? &job->names->entries[desc->table_id] : NULL;
    if (!e || e->state != NAME_CLAIMED || e->desc.creator != rank ||
        strncmp(e->desc.name, desc->name, sizeof(desc->name)) != 0)
        return ember_status_text(err, err_length, EMBER_ERR_INVALID_PARAM,
                                 "%s publishes table id %u, which it did not claim",
                                 ember_tp_peer_name(job->tp, rank), desc->table_id);
    e->desc = *desc;
    e->desc.creator = rank;
    e->state = NAME_PUBLISHED;
    names_answer(job, e);
    return EMBER_OK;
}

static void names_drop(ember_job_t *job, int rank, uint32_t id)
{
    if (id < NAMES_MAX && job->names->entries[id].desc.creator == rank)
        job->names->entries[id] = (name_entry_t){.state = NAME_FREE};
}

static void on_table_name(ember_rpc_req_t *req, void *arg)
{
    ember_job_t *job = arg;
    api_msg_table_name_t msg;
    size_t length;
    const void *data = ember_rpc_req_data(req, &length);
    const int peer = ember_rpc_req_peer(req);
    char err[300];
    if (length != sizeof(msg) || !api_is_client(job, peer)) {
        ember_rpc_reply_error(req, EMBER_ERR_BAD_MESSAGE, "a table name request of %zu bytes",
                              length);
        return;
    }
    memcpy(&msg, data, sizeof(msg));
    msg.name[sizeof(msg.name) - 1] = '\0';
    msg.desc.name[sizeof(msg.desc.name) - 1] = '\0';
    if (job->leaving && msg.what != API_NAME_DROP) {
        ember_rpc_reply_error(req, EMBER_ERR_SHUTDOWN, "table %s: the coordinator left the job",
                              msg.name);
        return;
    }
    ember_status_t status = EMBER_OK;
    uint32_t id = 0;
    const name_entry_t *e;
    switch (msg.what) {
    case API_NAME_CLAIM:
        if ((status = names_claim(job, peer, msg.name, &id, err, sizeof(err))) == EMBER_OK) {
            ember_iov_t iov = {&id, sizeof(id)};
            ember_rpc_reply(req, EMBER_OK, &iov, 1);
            return;
        }
        break;
    case API_NAME_PUBLISH: status = names_publish(job, peer, &msg.desc, err, sizeof(err)); break;
    case API_NAME_FIND:
        if ((e = name_lookup(job->names, msg.name)) && e->state == NAME_PUBLISHED) {
            ember_iov_t iov = {&e->desc, sizeof(e->desc)};
            ember_rpc_reply(req, EMBER_OK, &iov, 1);
            return;
        }
        if (!EMBER_RESERVE(job->names->waits, job->names->waits_capacity, job->names->nwaits + 1)) {
            status = ember_status_text(err, sizeof(err), EMBER_ERR_NO_MEMORY, "out of memory");
            break;
        }
        job->names->waits[job->names->nwaits].req = req;
        memcpy(job->names->waits[job->names->nwaits++].name, msg.name, sizeof(msg.name));
        return; /* answered once published */
    case API_NAME_DROP: names_drop(job, peer, msg.table_id); break;
    default:
        status = ember_status_text(err, sizeof(err), EMBER_ERR_BAD_MESSAGE, "table name request %u",
                                   msg.what);
    }
    if (status != EMBER_OK)
        ember_rpc_reply_error(req, status, "%s", err);
    else
        ember_rpc_reply(req, EMBER_OK, NULL, 0);
}

ember_status_t api_names_create(ember_job_t *job)
{
    return (job->names = calloc(1, sizeof(*job->names))) ? EMBER_OK : EMBER_ERR_NO_MEMORY;
}

void api_names_register(ember_job_t *job, int on)
{
    ember_rpc_register(job->tp, API_OP_TABLE_NAME, on ? on_table_name : NULL, on ? job : NULL);
}

void api_names_close(ember_job_t *job)
{
    for (size_t i = 0; job->names && i < job->names->nwaits; i++)
        ember_rpc_reply_error(job->names->waits[i].req, EMBER_ERR_SHUTDOWN,
                              "table %s: the coordinator left the job before it was created",
                              job->names->waits[i].name);
    if (job->names)
        job->names->nwaits = 0;
}

void api_names_destroy(ember_job_t *job)
{
    if (!job->names)
        return;
    free(job->names->waits);
    free(job->names);
    job->names = NULL;
}

/* ---- everyone's side -------------------------------------------------------- */

/* A request to the coordinator; the reply into @out. */
static ember_status_t names_call(ember_job_t *job, const api_msg_table_name_t *msg, void *out,
                                 size_t capacity, double timeout_s, const char *what, char *err,
                                 size_t err_length)
{
    ember_iov_t iov = {msg, sizeof(*msg)};
    size_t length = 0;
    EMBER_CHECK(api_call(job, job->coordinator, API_OP_TABLE_NAME, &iov, 1, out, capacity, &length,
                         timeout_s, what, err, err_length));
    if (length != capacity)
        return ember_status_text(err, err_length, EMBER_ERR_BAD_MESSAGE,
                                 "%s: the coordinator answered %zu bytes, not %zu", what, length,
                                 capacity);
    return EMBER_OK;
}

ember_status_t api_name_claim(ember_job_t *job, const char *name, uint32_t *id_p)
{
    char err[400];
    ember_status_t status;
    if (job->rank == job->coordinator) {
        status = names_claim(job, job->rank, name, id_p, err, sizeof(err));
    } else {
        api_msg_table_name_t msg = {.what = API_NAME_CLAIM};
        snprintf(msg.name, sizeof(msg.name), "%s", name);
        status = names_call(job, &msg, id_p, sizeof(*id_p), 0, "claiming a table name", err,
                            sizeof(err));
    }
    if (status != EMBER_OK)
        ember_error("table", "%s: table %s: %s", ember_tp_peer_name(job->tp, job->rank), name, err);
    return status;
}

ember_status_t api_name_publish(ember_job_t *job, const api_table_desc_t *desc)
{
    char err[400];
    ember_status_t status;
    if (job->rank == job->coordinator) {
        status = names_publish(job, job->rank, desc, err, sizeof(err));
    } else {
        api_msg_table_name_t msg = {.what = API_NAME_PUBLISH, .desc = *desc};
        ember_iov_t iov = {&msg, sizeof(msg)};
        status = api_call(job, job->coordinator, API_OP_TABLE_NAME, &iov, 1, NULL, 0, NULL, 0,
                          "publishing a table", err, sizeof(err));
    }
    if (status != EMBER_OK)
        ember_error("table", "%s: table %s: %s", ember_tp_peer_name(job->tp, job->rank), desc->name,
                    err);
    return status;
}

ember_status_t api_name_find(ember_job_t *job, const char *name, api_table_desc_t *desc_p)
{
    char err[400];
    ember_status_t status = EMBER_OK;
    if (job->rank == job->coordinator) {
        /* What another rank creates it waits for like anyone. */
        const double deadline = ember_time_now() + api_connect_timeout();
        const name_entry_t *e;
        while (!((e = name_lookup(job->names, name)) && e->state == NAME_PUBLISHED)) {
            if (job->aborted || ember_time_now() > deadline) {
                status = job->aborted ? EMBER_ERR_CANCELED : EMBER_ERR_TIMED_OUT;
                break;
            }
            ember_tp_wait(job->tp, 0.1);
        }
        if (status == EMBER_OK)
            *desc_p = e->desc;
        snprintf(err, sizeof(err), "%s", status == EMBER_OK ? "" : ember_status_string(status));
    } else {
        api_msg_table_name_t msg = {.what = API_NAME_FIND};
        snprintf(msg.name, sizeof(msg.name), "%s", name);
        status = names_call(job, &msg, desc_p, sizeof(*desc_p), api_connect_timeout(),
                            "opening a table", err, sizeof(err));
    }
    if (status == EMBER_ERR_TIMED_OUT) {
        ember_error("table", "%s: table %s was not created within %.0f s (EMBER_CONNECT_TIMEOUT)",
                    ember_tp_peer_name(job->tp, job->rank), name, api_connect_timeout());
        return EMBER_ERR_NOT_FOUND;
    }
    if (status != EMBER_OK)
        ember_error("table", "%s: table %s: %s", ember_tp_peer_name(job->tp, job->rank), name, err);
    return status;
}

void api_name_drop(ember_job_t *job, uint32_t table_id, const char *name)
{
    char err[300];
    if (job->rank == job->coordinator) {
        names_drop(job, job->rank, table_id);
        return;
    }
    api_msg_table_name_t msg = {.what = API_NAME_DROP, .table_id = table_id};
    snprintf(msg.name, sizeof(msg.name), "%s", name);
    ember_iov_t iov = {&msg, sizeof(msg)};
    if (api_call(job, job->coordinator, API_OP_TABLE_NAME, &iov, 1, NULL, 0, NULL, 0,
                 "freeing a table name", err, sizeof(err)) != EMBER_OK)
        ember_warn("table", "%s: table %s: %s", ember_tp_peer_name(job->tp, job->rank), name, err);
}

void api_names_holding(const ember_job_t *job, uint8_t *holding)
{
    for (size_t id = 0; job->names && id < NAMES_MAX; id++) {
        const name_entry_t *e = &job->names->entries[id];
        for (uint32_t s = 0; e->state == NAME_PUBLISHED && s < e->desc.num_shards; s++)
            holding[e->desc.first_ps + s] = 1;
    }
}
