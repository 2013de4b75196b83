/*
 * tools/ember-train/messages: ember-train's own messages between its
 * master and its trainers, on the job's transport with op ids from
 * EMBER_OP_APP_BASE, packed and checked here (every length and count at
 * full width against the bytes received, before anything is sized from
 * it).  The library's messages (lookups, tables, checkpoints) are its own.
 */
#ifndef EMBER_TRAIN_MESSAGES_H
#define EMBER_TRAIN_MESSAGES_H

#include <ember/job.h>
#include <ember/status.h>
#include <ember/transport.h>

#include <stddef.h>
#include <stdint.h>

enum {
    TRAIN_OP_START = EMBER_OP_APP_BASE, /* master -> trainer, answered when it is done */
    TRAIN_OP_EPOCH,                     /* trainer -> master: an epoch's totals */
    TRAIN_OP_EVAL,                      /* trainer -> master: an evaluation's logits */
    TRAIN_OP_PROGRESS                   /* trainer -> master: where it stands, answered with
                                           when to say it next */
};

#define TRAIN_START_VERSION 2
#define TRAIN_TEXT_MAX      (1u << 20) /* bytes of a text TRAIN_START carries */
#define TRAIN_DIR_MAX       512        /* a directory's bytes, its NUL included */

/*
 * TRAIN_START: the head, then four texts, each padded with NULs to 8 bytes:
 * the driver's settings (tools/ember-train/settings.h), the model's
 * description (its describe hook), the checkpoint root ("": none) and the
 * checkpoint resumed from ("": from the start); then the initial dense
 * parameters, float[nparams].  The answer, when the trainer is done:
 * train_msg_done_t, float losses[steps], the final dense parameters.
 */
typedef struct {
    uint32_t version; /* TRAIN_START_VERSION */
    uint32_t trainer; /* the receiver's index */
    uint32_t trainers, num_ps;
    uint64_t start_step; /* resumed: the steps done before */
    uint64_t every;      /* checkpoints: steps between them (0: the end and signals) */
    uint64_t nparams;
    /* progress reports: after the first two steps (of the job's count) to
     * report at, start_step < [0] < [1]; each answer names the next (both 0:
     * none) */
    uint64_t report_at[2];
    uint32_t bytes[4]; /* the texts' lengths, NULs not counted */
} train_msg_start_t;

/* A TRAIN_START as a trainer takes it: the texts NUL-terminated (malloc'd,
 * train_start_free), the parameters in place (unaligned: read with memcpy). */
typedef struct {
    train_msg_start_t head;
    char *settings, *config, *root, *resume;
    const uint8_t *params;
} train_start_t;

/** The iovs of a TRAIN_START (@iov: 10 entries, the texts' and pads'
 * borrowed); their count.  @head's lengths are set from the texts. */
size_t train_start_pack(train_msg_start_t *head, const char *const texts[4], const float *params,
                        ember_iov_t *iov);

/** Take a TRAIN_START as trainer @trainer of @trainers and @num_ps PS.
 * Errors (one line in @err): ERR_BAD_MESSAGE (sizes, version, a NUL in a
 * text, report steps not after the start and each other), ERR_INVALID_PARAM
 * (for another trainer or job), ERR_NO_MEMORY. */
ember_status_t train_start_unpack(const void *data, size_t length, uint32_t trainer,
                                  uint32_t trainers, uint32_t num_ps, train_start_t *start,
                                  char *err, size_t err_length);
void train_start_free(train_start_t *start);

/* TRAIN_START's answer: followed by float losses[steps] and the final
 * dense parameters. */
/* Where a trainer's training time went, by phase of its steps (the
 * master's "time on trainerT" line): each a sum of seconds. */
enum {
    TRAIN_PHASE_DATA,     /* the next batch from the model's data */
    TRAIN_PHASE_LOOKUP,   /* lookups split and sent (this step's, the next's) */
    TRAIN_PHASE_WAIT,     /* waiting for the lookups' replies */
    TRAIN_PHASE_FORWARD,  /* the model's forward and loss */
    TRAIN_PHASE_BACKWARD, /* the model's backward */
    TRAIN_PHASE_PUSH,     /* the tables' gradients sent */
    TRAIN_PHASE_DENSE,    /* the dense step: the allreduce and the optimizer */
    TRAIN_PHASE_OTHER,    /* reports, checkpoints, evaluations: the rest */
    TRAIN_PHASES
};

/** The phases' names as the master prints them ("lookup wait"). */
extern const char *const train_phase_names[TRAIN_PHASES];

typedef struct {
    uint64_t steps; /* this trainer's */
    uint64_t bags;  /* what the epoch lines count, in all */
    double seconds;
    double phase_seconds[TRAIN_PHASES]; /* of @seconds; each finite, >= 0 */
    /* Its row cache's counters (--cache-rows; all 0 without):
     * ember_ebc_cache_stats's */
    uint64_t cache_lookups, cache_hits, cache_stale, cache_oldest, cache_inserted, cache_evicted,
            cache_rows;
} train_msg_done_t;

typedef struct {
    train_msg_done_t head;
    const uint8_t *losses, *params; /* unaligned */
} train_done_t;

/** Take trainer @trainer's answer, whose model has @nparams dense
 * parameters.  ERR_BAD_MESSAGE: "trainerT sent a malformed report". */
ember_status_t train_done_unpack(const void *data, size_t length, uint64_t nparams, int trainer,
                                 train_done_t *done, char *err, size_t err_length);

/* EPOCH: a trainer's totals of one epoch, sent as it ends. */
typedef struct {
    uint32_t trainer;
    uint32_t epoch;
    uint64_t steps;
    uint64_t bags;
    double loss_sum; /* over the epoch's steps */
    double seconds;  /* wall time of the epoch on this trainer */
    /* the largest step - version of any lookup's table so far (at most the
     * job's staleness) */
    uint64_t staleness;
} train_msg_epoch_t;

/** Take an EPOCH of a job of @trainers and @epochs: exactly one report, of
 * one of its trainers and epochs.  Errors: ERR_BAD_MESSAGE (its size),
 * ERR_INVALID_PARAM (trainer or epoch). */
ember_status_t train_epoch_unpack(const void *data, size_t length, uint32_t trainers,
                                  uint32_t epochs, train_msg_epoch_t *epoch, char *err,
                                  size_t err_length);

/*
 * PROGRESS: where a trainer stands after the steps the master named (the
 * first two in TRAIN_START, then each answer names the one after the next
 * it knows): a call, answered once every trainer has reported that step
 * with uint64_t next: the step to report after the one the trainer already
 * knows (0: report no more).  A trainer sends a report only once the one
 * before is answered, so the master holds at most one of each.
 */
typedef struct {
    uint32_t trainer;
    uint32_t epoch;       /* the epoch the step trained (from 0) */
    uint64_t steps;       /* the job's steps done: the step it was asked for */
    uint64_t epoch_steps; /* of them in @epoch (>= 1; a resumed epoch's counted) */
    uint64_t epoch_size;  /* the epoch's steps (the model's epoch_steps); 0: unknown */
    uint64_t examples;    /* what the epoch lines count, trained by this process so far */
    double loss_sum;      /* of its losses of the @epoch_steps steps */
} train_msg_progress_t;

/** Take a PROGRESS of a job of @trainers and @epochs: exactly one report,
 * of one of its trainers and epochs, its counts possible (1 <= epoch_steps
 * <= steps, and <= epoch_size when that is known) and its loss finite.
 * Errors: ERR_BAD_MESSAGE naming the trainer (or the size, of a report too
 * short to name one). */
ember_status_t train_progress_unpack(const void *data, size_t length, uint32_t trainers,
                                     uint32_t epochs, train_msg_progress_t *progress, char *err,
                                     size_t err_length);

/** Take a PROGRESS answer to trainer @trainer, whose next report is after
 * step @known: *@next_p 0 (no more) or a step after @known.  Errors:
 * ERR_BAD_MESSAGE. */
ember_status_t train_progress_next(const void *data, size_t length, int trainer, uint64_t known,
                                   uint64_t *next_p, char *err, size_t err_length);

/* EVAL: a trainer's share of an evaluation after @step steps, a call:
 * followed by float logits[count], then float labels[count]. */
typedef struct {
    uint32_t trainer;
    uint32_t reserved;
    uint64_t step;
    uint64_t count;
} train_msg_eval_t;

typedef struct {
    train_msg_eval_t head;
    const uint8_t *logits, *labels; /* unaligned */
} train_eval_t;

/** Take an EVAL of a job of @trainers.  Errors: ERR_BAD_MESSAGE. */
ember_status_t train_eval_unpack(const void *data, size_t length, uint32_t trainers,
                                 train_eval_t *eval, char *err, size_t err_length);

/** Float @i of unaligned @bytes. */
float train_load_f32(const uint8_t *bytes, size_t i);

#endif
