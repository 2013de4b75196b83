/*
 * ember: the trainers' dense allreduce.
 *
 * Data parallelism for the dense layers (DDP's role): every trainer hands
 * the same buffers in the same order and gets their sum or average back in
 * place.  On "cpu" devices (and the host) the ring / recursive halving over
 * the job's transport (host memory), on "cuda" NCCL (device memory).
 * Results are the same bits on every trainer.  Requests complete in the
 * order started.
 *
 * Gathering one value per trainer (each one's loss, for a log or a
 * comparison): a [T] buffer of zeros, each trainer writing its own slot t,
 * reduced with EMBER_ALLREDUCE_SUM: every trainer gets every value exactly
 * (x + 0 is x; only a -0.0 comes back +0.0).
 *
 * Threading: as the job's (one thread at a time, the job's).  Errors: a
 * failed call logs one line naming the trainer at fault; once a reduction
 * failed the communicator is broken and every later one fails with it.
 */
#ifndef EMBER_ALLREDUCE_H
#define EMBER_ALLREDUCE_H

#include <ember/device.h>
#include <ember/job.h>
#include <ember/status.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_allreduce ember_allreduce_t;
typedef struct ember_allreduce_req ember_allreduce_req_t;

typedef enum {
    EMBER_ALLREDUCE_SUM = 0,
    EMBER_ALLREDUCE_AVG = 1
} ember_allreduce_op_t;

/* Allreduces one job may have made (each takes its own op ids). */
#define EMBER_ALLREDUCE_MAX 8

/**
 * The allreduce of every trainer of @job on @device (borrowed, outlives it;
 * NULL: host memory).  Collective: every trainer calls it, the n-th
 * creation of each meeting the n-th of the others; blocks until all joined
 * (EMBER_CONNECT_TIMEOUT, naming who did not).  Only trainers.  *@ar_p the
 * caller's.  Errors: ERR_INVALID_PARAM (not a trainer), ERR_OUT_OF_RANGE
 * (EMBER_ALLREDUCE_MAX made already), ERR_TIMED_OUT, ERR_PEER_LOST, the
 * device's.
 */
ember_status_t ember_allreduce_create(ember_job_t *job, ember_device_t *device,
                                      ember_allreduce_t **ar_p);
/** Free it; no request may be in flight.  Blocks briefly, bounded (its
 * sends still leaving drain; NCCL's teardown).  NULL: nothing. */
void ember_allreduce_destroy(ember_allreduce_t *ar);

/**
 * Start reducing @count floats at @data (the device's memory, borrowed until
 * the request completes) in place, ordered after what was enqueued on the
 * device before.  Never blocks.  *@req_p is the allreduce's until waited
 * for (every request must be).  Errors: ERR_INVALID_PARAM (NULL data with
 * count > 0, an unknown op), ERR_NO_MEMORY, the communicator's (broken by
 * an earlier failure: named).
 */
ember_status_t ember_allreduce_start(ember_allreduce_t *ar, float *data, size_t count,
                                     ember_allreduce_op_t op, ember_allreduce_req_t **req_p);
/** INPROGRESS while running, then its status as ember_allreduce_wait's but
 * ERR_CANCELED (the request stays valid until waited for).  Progresses the
 * job once; never blocks. */
ember_status_t ember_allreduce_test(ember_allreduce_req_t *req);
/** Wait, then free @req (whatever the status).  Blocks (a lost or hung
 * trainer ends it: bounded).  Errors: ERR_PEER_LOST (a trainer lost),
 * ERR_TIMED_OUT (one that stopped answering), both named, and what the
 * device met (NCCL's); ERR_CANCELED once the job was aborted, whatever
 * became of the data. */
ember_status_t ember_allreduce_wait(ember_allreduce_req_t *req);
/** Why the communicator broke (naming the trainer at fault), "" while it
 * works: for a program that reports a failed wait elsewhere too.  Borrowed
 * from @ar (valid until it is destroyed); never blocks.  NULL: "". */
const char *ember_allreduce_error(const ember_allreduce_t *ar);

/** start + wait: blocks; their errors. */
ember_status_t ember_allreduce(ember_allreduce_t *ar, float *data, size_t count,
                               ember_allreduce_op_t op);

#ifdef __cplusplus
}
#endif
#endif
