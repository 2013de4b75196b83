/*
 * engine/train/dlrm_io: DLRM's weights in files, named as TorchRec names
 * them (torchrec.models.dlrm.DLRM's state_dict), so that a TorchRec model's
 * weights load into ember (--init) and ember's (--save) load into TorchRec
 * with load_state_dict(strict=True):
 *   sparse_arch.embedding_bag_collection.embedding_bags.t_cat_F.weight  [N_F, D]
 *   dense_arch.model._mlp.I._linear.weight [out, in], .bias [out]
 *   over_arch.model.0._mlp.I._linear.weight|bias   every OverArch layer but the last
 *   over_arch.model.1.weight|bias                   the last ([1, in], [1])
 * The dense parameters are one flat array: DenseArch's layers then
 * OverArch's, each weight then bias (ember_dlrm_params).
 */
#ifndef EMBER_ENGINE_TRAIN_DLRM_IO_H
#define EMBER_ENGINE_TRAIN_DLRM_IO_H

#include "engine/io/safetensors.h"
#include "engine/ops/dlrm.h"
#include "engine/train/job.h"

#include <stddef.h>
#include <stdint.h>

#define EMBER_DLRM_NAME_MAX    96
#define EMBER_DLRM_TENSORS_MAX (EMBER_DLRM_TABLES + 4 * EMBER_DLRM_MLP_MAX)

/* One of the model's tensors: a table (table >= 0) or a slice of the flat
 * dense parameters at @offset. */
typedef struct {
    char name[EMBER_DLRM_NAME_MAX];
    size_t ndim;
    int64_t shape[2];
    int table;     /* its table, or -1 */
    size_t offset; /* a dense tensor's, in floats */
} ember_dlrm_tensor_t;

/** @config's DLRM as engine/ops/dlrm builds it. */
void ember_dlrm_shape(const ember_train_config_t *config, ember_dlrm_config_t *shape);

/** The tensors of @config's DLRM, tables first, into @out; their count. */
size_t ember_dlrm_tensors(const ember_train_config_t *config,
                          ember_dlrm_tensor_t out[EMBER_DLRM_TENSORS_MAX]);

/**
 * The dense parameters to start from into @params (ember_dlrm_params
 * floats): --init's, whose file stays open in *@init_p for the tables
 * (ember_dlrm_init_table), or PyTorch's default U(-1/sqrt(in), 1/sqrt(in))
 * drawn from the job's seed (*@init_p NULL: the PS draw the tables).  The
 * file must hold exactly the model's tensors, each F32 of its shape (as
 * load_state_dict(strict=True) wants); errors name the file and tensor.
 */
ember_status_t ember_dlrm_initial(const ember_train_job_t *job, float *params,
                                  ember_st_file_t **init_p, char *err, size_t err_length);

/** Table @table's rows from the --init file (malloc'd, [rows][dim]). */
ember_status_t ember_dlrm_init_table(const ember_st_file_t *init, const ember_train_job_t *job,
                                     size_t table, float **rows_p, char *err, size_t err_length);

/** --save: the tables (@tables[t] [rows][dim]), the dense @params and the
 * losses ([steps][trainers]) to the job's save path. */
ember_status_t ember_dlrm_save(const ember_train_job_t *job, const float *const *tables,
                               const float *params, const float *losses, uint64_t steps);

#endif
