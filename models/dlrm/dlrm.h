/*
 * models/dlrm: TorchRec's DLRM (torchrec.models.dlrm.DLRM) and DLRM-DCN
 * (DLRM_DCN, MLPerf's model) over any feature schema (<ember/schema.h>):
 * Criteo's layout by default (`--data criteo:` or `criteo-npy:`, 13 dense
 * and 26 categorical features, a table each), or `--schema FILE` with
 * `--data text:PATH`: N dense features, K sparse ones on their tables
 * (shared or not), multi-hot bags of any length, pooled as each says;
 * MLPerf's synthetic multi-hot (`--multi-hot-sizes`) over one-id features.
 * DenseArch (an MLP with a ReLU after every layer) over the dense
 * features; the interaction: InteractionArch (the dense vector and every
 * pair's dot of the K + 1 vectors) or, with `--interaction-type dcn`,
 * InteractionDCNArch (TorchRec's LowRankCrossNet over their concatenation);
 * OverArch (an MLP to one logit), BCE with logits; evaluations' AUC over a
 * second source.
 *
 * Its pieces: dlrm.c (the hooks, its flags and description), dlrm_io.c
 * (tables and their placement, tensors under TorchRec's names, the initial
 * dense layers), dlrm_trainer.c (a trainer's data and dense half).
 */
#ifndef MODELS_DLRM_DLRM_H
#define MODELS_DLRM_DLRM_H

#include "models/model.h"

#include <ember/criteo.h>
#include <ember/data.h>
#include <ember/schema.h>

#include <stddef.h>
#include <stdint.h>

#define DLRM_MLP_MAX    16   /* layers of either MLP */
#define DLRM_SOURCE_MAX 2048 /* "criteo:PATH,PATH...", its NUL included */
#define DLRM_SCHEMA_MAX EMBER_SCHEMA_TEXT_MAX

/* --interaction-type */
enum {
    DLRM_INTERACTION_ORIGINAL,
    DLRM_INTERACTION_DCN
};

typedef struct {
    uint32_t dim;                      /* every table's, and DenseArch's output */
    int64_t rows[EMBER_CRITEO_SPARSE]; /* Criteo's tables (--num-embeddings...) */
    uint32_t dense_layers, over_layers;
    uint32_t dense_sizes[DLRM_MLP_MAX];          /* DenseArch's widths, the last = dim */
    uint32_t over_sizes[DLRM_MLP_MAX];           /* OverArch's widths, the last = 1 */
    uint32_t batch_size;                         /* examples a trainer's step */
    uint32_t sharding;                           /* ember_sharding_t */
    uint64_t steps;                              /* stop after so many (0: the epochs) */
    uint64_t eval_every;                         /* steps between evaluations (0: at the end) */
    uint32_t interaction;                        /* DLRM_INTERACTION_* */
    uint32_t dcn_layers, dcn_rank;               /* LowRankCrossNet's */
    uint32_t multi_hot[EMBER_SCHEMA_SPARSE_MAX]; /* MLPerf's bag sizes */
    uint32_t multi_hots;                         /* their count; 0: none */
    uint32_t multi_hot_dist;                     /* ember_multi_hot_dist_t */
    char data[DLRM_SOURCE_MAX];                  /* the training examples */
    char eval[DLRM_SOURCE_MAX];                  /* the evaluation's ("": none) */
    int schema_given;                            /* --schema FILE */
    char schema[DLRM_SCHEMA_MAX]; /* its canonical text ("": Criteo's, made by check) */
    /* the schema's counts (derived from it, never described) */
    uint32_t num_dense, num_sparse, num_tables;
} dlrm_config_t;

/* Its hooks (dlrm.c). */
extern const ember_model_ops_t ember_model_dlrm;

/* DenseArch's widths (the dense features, then its sizes) and OverArch's
 * (the interaction's width, then its sizes), into @dense and @over. */
void dlrm_widths(const dlrm_config_t *c, size_t dense[DLRM_MLP_MAX + 1],
                 size_t over[DLRM_MLP_MAX + 1]);
/* OverArch's input: the dense vector and every pair's dot of F = K + 1
 * vectors (original), or the crossed concatenation of them, F * dim (dcn). */
size_t dlrm_interaction_width(const dlrm_config_t *c);
/* The cross layers' parameters (0 for the original interaction). */
size_t dlrm_cross_params(const dlrm_config_t *c);
/* The dense parameters (DenseArch's, the cross layers', then OverArch's);
 * 0: a size out of range. */
size_t dlrm_params(const void *config);
/* The configuration's schema (its text parsed; the caller frees it). */
ember_status_t dlrm_schema(const dlrm_config_t *c, ember_schema_t **schema_p, char *err,
                           size_t err_length);
/* @c's schema text set from @schema, and its counts. */
ember_status_t dlrm_set_schema(dlrm_config_t *c, const ember_schema_t *schema, char *err,
                               size_t err_length);

/* dlrm_io.c */
size_t dlrm_tables(const void *config, const ember_train_settings_t *settings,
                   ember_model_table_t *out);
size_t dlrm_tensors(const void *config, ember_model_tensor_t *out);
ember_status_t dlrm_initial(const void *config, const ember_train_settings_t *settings,
                            float *params, float **rows, char *err, size_t err_length);

/* dlrm_trainer.c */
ember_status_t dlrm_trainer_create(const ember_model_trainer_args_t *args, void **trainer_p,
                                   char *err, size_t err_length);
void dlrm_trainer_destroy(void *trainer);
ember_status_t dlrm_take(void *trainer, uint64_t step, int skip, ember_model_batch_t *batch,
                         const char **table_p, char *err, size_t err_length);
void dlrm_release(void *trainer);
ember_status_t dlrm_forward(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                            float *loss_p, char *err, size_t err_length);
ember_status_t dlrm_backward(void *trainer, const float **grad_p, char *err, size_t err_length);
ember_status_t dlrm_step(void *trainer, char *err, size_t err_length);
const float *dlrm_trainer_params(void *trainer);
size_t dlrm_optimizers(void *trainer, ember_opt_t **out);
uint64_t dlrm_epoch_steps(void *trainer);
ember_status_t dlrm_eval_take(void *trainer, ember_model_batch_t *batch, char *err,
                              size_t err_length);
ember_status_t dlrm_logits(void *trainer, const ember_model_batch_t *batch, const float *pooled,
                           float *logits, char *err, size_t err_length);

#endif
