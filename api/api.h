/*
 * api/api: what the public API's modules (the .c files of api/) share: the job's state,
 * the library's own op ids and messages between ranks, and waiting on the
 * transport the way every API call waits (progressing, giving up on an
 * abort).  Private to api/.
 */
#ifndef EMBER_API_API_H
#define EMBER_API_API_H

#include <ember/job.h>
#include <ember/table.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

/* The API's own ops, below EMBER_OP_APP_BASE and apart from the engine's
 * (engine/wire/protocol.h: 100 .. 128). */
enum {
    API_OP_LEAVE = EMBER_RPC_OP_USER_BASE + 96, /* 160: a rank that is not a PS -> each PS */
    API_OP_READY,                               /* anyone -> a PS: answered once it serves */
    API_OP_BARRIER,                             /* a rank that is not a PS -> the coordinator */
    API_OP_TABLE_NAME, /* anyone -> the coordinator: the job's table names */
    API_OP_ABORTED,    /* the coordinator -> each PS: an abort it heard, before it leaves */
    /* ember_allreduce_create's, EMBER_ALLREDUCE_MAX of 4 ids each */
    API_OP_ALLREDUCE_BASE = EMBER_RPC_OP_USER_BASE + 128, /* 192 .. 223 */
};

/* A table as the job knows it: created, placed, resolved. */
typedef struct {
    char name[EMBER_TABLE_NAME_MAX];
    int64_t rows;
    uint32_t dim;
    uint32_t dtype;      /* ember_dtype_t */
    uint32_t init;       /* ember_table_init_t */
    uint32_t sharding;   /* ember_sharding_t */
    uint32_t first_ps;   /* a PS index */
    uint32_t num_shards; /* resolved: 1 table-wise */
    uint32_t consistency, staleness, reduce, trainers;
    uint32_t device; /* 0 cpu, 1 cuda */
    uint32_t table_id;
    int32_t creator; /* its creator's rank */
    uint32_t reserved;
    uint64_t seed;
    ember_opt_config_t optimizer;
    /* A dynamic table's settings (all 0: a fixed table). */
    int64_t budget_rows;
    uint32_t kind, admit_count, evict, evict_after;
    float lfu_decay;
    uint32_t reserved2;
} api_table_desc_t;

/* API_OP_TABLE_NAME: one of these, answered with an api_table_desc_t
 * (FIND), a uint32 id (CLAIM), or nothing. */
enum {
    API_NAME_CLAIM = 1,   /* a free id for a new name, or ERR_EXISTS */
    API_NAME_PUBLISH = 2, /* the table is created: its description */
    API_NAME_FIND = 3,    /* answered once the name is published */
    API_NAME_DROP = 4     /* the name and id free again */
};
typedef struct {
    uint32_t what;
    uint32_t table_id;
    char name[EMBER_TABLE_NAME_MAX];
    api_table_desc_t desc; /* PUBLISH */
} api_msg_table_name_t;

/* API_OP_BARRIER. */
typedef struct {
    uint64_t seq; /* the caller's n-th barrier */
    char name[EMBER_JOB_NAME_MAX];
} api_msg_barrier_t;

/* The coordinator's view of the table names (api/names.c). */
typedef struct api_names api_names_t;
/* The coordinator's view of the barriers (api/job.c). */
typedef struct api_barrier api_barrier_t;

struct ember_job {
    ember_tp_t *tp;
    int rank, world, trainers, num_ps, others;
    int coordinator;
    int local_rank, local_size;
    int leaving; /* ember_job_leave runs: handlers answer what they can at once */
    /* An abort from another rank: its cause; abort_told: every PS was
     * told by this rank (it aborted, or forwarded it as the coordinator). */
    int aborted, abort_told;
    char abort_cause[300];
    /* A PS rank: serving (ember_ps_serve), READY requests held until it
     * does, the ranks that left. */
    int serving, served;
    ember_rpc_req_t **ready_held;
    size_t ready_count, ready_capacity;
    uint8_t *left_by; /* [world] */
    int left;
    /* A rank that is not a PS: the PS seen serving. */
    uint8_t *ps_ready; /* [num_ps] */
    uint64_t barriers; /* this rank's barriers so far */
    api_barrier_t *barrier;
    api_names_t *names; /* the coordinator's */
    int allreduces;     /* made from this job */
};

/* A table handle (include/ember/table.h). */
struct ember_table {
    ember_job_t *job;
    api_table_desc_t desc;
    ember_table_config_t config;   /* as ember_table_config gives it */
    int creator;                   /* this handle made it */
    ember_table_dynamic_t dynamic; /* a dynamic table's (desc.kind) */
};

/* One request to each shard of @desc (@iov_of fills shard s's, at most 4
 * iovs), all in flight together, then every answer: shard s's reply into
 * @out + s * @out_stride, exactly @out_bytes[s] of it (@out NULL: none);
 * the first failure in @err naming the table, @what and the PS
 * (api/table.c). */
typedef size_t (*shard_iov_cb)(void *arg, uint32_t s, ember_iov_t *iov);
ember_status_t api_table_to_shards(ember_job_t *job, const api_table_desc_t *desc, uint16_t op,
                                   shard_iov_cb iov_of, void *arg, void *out, size_t out_stride,
                                   size_t *out_bytes, const char *what, char *err,
                                   size_t err_length);

/* EMBER_CONNECT_TIMEOUT as it is now: how long a wait for another rank
 * (its barrier, its table, its serving) lasts. */
double api_connect_timeout(void);

/* The ranks a barrier and a table's life involve: all but the PS. */
int api_clients(const ember_job_t *job);
int api_is_client(const ember_job_t *job, int rank);

/**
 * Wait for @future (progressing the job): its status, or ERR_CANCELED once
 * the job is aborted (the future is then left pending for its owner to
 * release).  On an error other than that, @err (may be NULL) gets "WHAT
 * on PEER failed: the peer's text".
 */
ember_status_t api_wait(ember_job_t *job, ember_future_t *future, int peer, const char *what,
                        char *err, size_t err_length);

/** A call to @peer of @op and its wait (api_wait), the reply into @out
 * (@capacity bytes; *@length_p what came, may be NULL).  @timeout_s <= 0:
 * EMBER_RPC_TIMEOUT. */
ember_status_t api_call(ember_job_t *job, int peer, uint16_t op, const ember_iov_t *iov,
                        size_t iovcnt, void *out, size_t capacity, size_t *length_p,
                        double timeout_s, const char *what, char *err, size_t err_length);

/** PS @p serves (it answered a READY once; remembered).  Errors:
 * ERR_TIMED_OUT ("psP is not serving after N s"), ERR_PEER_LOST,
 * ERR_CANCELED; logged. */
ember_status_t api_ps_ready(ember_job_t *job, int p);

/* The table names (api/names.c): handlers on the coordinator, calls from
 * anyone (the coordinator's own go straight in). */
ember_status_t api_names_create(ember_job_t *job);
/** The coordinator's handler in place (@on) or gone. */
void api_names_register(ember_job_t *job, int on);
/** The coordinator leaves: the FINDs still waiting answered (while there
 * is a transport); requests from here on are answered at once. */
void api_names_close(ember_job_t *job);
void api_names_destroy(ember_job_t *job);
ember_status_t api_name_claim(ember_job_t *job, const char *name, uint32_t *id_p);
ember_status_t api_name_publish(ember_job_t *job, const api_table_desc_t *desc);
ember_status_t api_name_find(ember_job_t *job, const char *name, api_table_desc_t *desc_p);
void api_name_drop(ember_job_t *job, uint32_t table_id, const char *name);
/** The coordinator: @holding[p] set for each PS p that holds a shard of a
 * table of the job ([num_ps], the caller's, zeroed by it). */
void api_names_holding(const ember_job_t *job, uint8_t *holding);

/* A PS rank (api/ps.c's ember_ps_serve): serving starts and ends. */
void api_job_serving(ember_job_t *job, int serving);
/** A PS's end: INPROGRESS while a client is still in the job, else OK
 * (all left), ERR_CANCELED (an abort), ERR_PEER_LOST (a client lost). */
ember_status_t api_job_ps_poll(ember_job_t *job);

#endif
