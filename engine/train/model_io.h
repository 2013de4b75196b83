/*
 * engine/train/model_io: the job's model in files.  Where the dense layers
 * start (a --replay file's, or PyTorch's default initialisation from the
 * seed), the check of a finished run against the values a --replay file
 * expects, and the --save file, named as the equivalent PyTorch module
 * names its parameters so that load_state_dict(strict=True) takes it.
 */
#ifndef EMBER_ENGINE_MODEL_IO_H
#define EMBER_ENGINE_MODEL_IO_H

#include "engine/io/safetensors.h"
#include "engine/train/dlrm_io.h"
#include "engine/train/job.h"
#include "engine/wire/protocol.h"

/**
 * The dense parameters of @spec's model (either model) as the --save file
 * names them, each a slice of the flat array (its offset, in floats) and
 * its shape, into @out; their count.  DLRM's are dlrm_io's (its tables
 * left out).
 */
size_t ember_model_dense_layout(const ember_msg_train_start_t *spec,
                                ember_dlrm_tensor_t out[EMBER_DLRM_TENSORS_MAX]);

/* What a finished run made, as the master gathered it (all borrowed). */
typedef struct {
    const float *table;  /* [rows][dim], global row order */
    const float *params; /* the dense layers, ember_dense_offset floats */
    const float *losses; /* [steps][trainers] */
    uint64_t steps;      /* per trainer */
} ember_model_result_t;

/**
 * The dense layers' initial values into @params (@layers layers of
 * @sizes): the replay file's, whose table comes back in @table_p (malloc'd;
 * NULL otherwise), or nn.Linear's default U(-1/sqrt(in), 1/sqrt(in)) per
 * layer drawn from the job's seed.  Errors: the replay file's, logged.
 */
ember_status_t ember_model_initial(const ember_train_job_t *job, const size_t *sizes, size_t layers,
                                   float *params, float **table_p);

/**
 * The tutorial model's --init FILE (a --save file of the same model): its
 * table into *@table_p (malloc'd) and its dense layers into @params, each
 * tensor F32 of this job's shape, none missing or extra (errors name the
 * file and tensor).
 */
ember_status_t ember_model_init_file(const ember_train_job_t *job,
                                     const ember_msg_train_start_t *spec, float *params,
                                     float **table_p, char *err, size_t err_length);

/**
 * --replay: @result against the expected values the file holds (losses,
 * table, dense layer), within the job's tolerance; one line says what was
 * compared and by how much it differs.  ERR_NUMERIC when a difference is
 * beyond the tolerance, ERR_IO when the file cannot be read.
 */
ember_status_t ember_model_check_replay(const ember_train_job_t *job,
                                        const ember_model_result_t *result);

/**
 * --save: the table and dense layers of @spec's model in @result, and its
 * losses in the metadata (beyond SAVED_LOSSES_MAX only --metrics has them),
 * to the job's save path.  Errors: ERR_NO_MEMORY, the writer's (logged).
 */
ember_status_t ember_model_save(const ember_train_job_t *job, const ember_msg_train_start_t *spec,
                                const ember_model_result_t *result);

/**
 * Write @tensors and the losses ([steps][trainers], in the metadata as
 * "losses" and "losses_shape"; beyond SAVED_LOSSES_MAX only --metrics has
 * them) to the job's save path, printing "saved PATH".
 */
ember_status_t ember_model_write(const ember_train_job_t *job, const ember_st_tensor_t *tensors,
                                 size_t ntensors, const float *losses, uint64_t steps);

#endif
