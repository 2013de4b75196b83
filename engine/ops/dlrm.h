/*
 * engine/ops/dlrm: the dense half of DLRM (torchrec.models.dlrm.DLRM) on one
 * trainer: DenseArch (an MLP over the dense features, ReLU after every
 * layer, its last width the embedding dimension), InteractionArch (the
 * dense vector and every pairwise dot of it and the tables' pooled
 * embeddings, engine/ops/interaction.h) and OverArch (an MLP, ReLU after
 * every layer but the last, of width 1: the logit).  The tables live on the
 * PS; their pooled embeddings come in, and their gradients go out.
 */
#ifndef EMBER_ENGINE_DLRM_H
#define EMBER_ENGINE_DLRM_H

#include "engine/ops/dense.h"

#include <ember/status.h>

#include <stddef.h>
#include <stdint.h>

#define EMBER_DLRM_LAYERS_MAX 16

typedef struct {
    size_t dense_features;                                   /* 13 for Criteo */
    size_t tables;                                           /* one pooled embedding each */
    size_t dim;                                              /* the embedding dimension D */
    size_t dense_layers, dense_sizes[EMBER_DLRM_LAYERS_MAX]; /* the last is D */
    size_t over_layers, over_sizes[EMBER_DLRM_LAYERS_MAX];   /* the last is 1 */
} ember_dlrm_config_t;

typedef struct ember_dlrm ember_dlrm_t;

/**
 * The model @config describes (copied), its Linear layers initialised as
 * ember_mlp_create does from @seed.  Errors: ERR_INVALID_PARAM (no layers,
 * too many, a DenseArch not ending in D or an OverArch not ending in 1, a
 * zero size), ERR_NO_MEMORY.
 */
ember_status_t ember_dlrm_create(const ember_dlrm_config_t *config, uint64_t seed,
                                 ember_dlrm_t **model_p);
void ember_dlrm_destroy(ember_dlrm_t *model);

/* The two MLPs (their flat parameters and gradients: ember_mlp_params). */
ember_mlp_t *ember_dlrm_dense_arch(ember_dlrm_t *model);
ember_mlp_t *ember_dlrm_over_arch(ember_dlrm_t *model);

/**
 * The logits [batch] of @dense [batch][dense_features] and the tables'
 * @pooled[t] [batch][D] (borrowed until the backward).  Errors:
 * ERR_INVALID_PARAM, ERR_NO_MEMORY.
 */
ember_status_t ember_dlrm_forward(ember_dlrm_t *model, const float *dense,
                                  const float *const *pooled, size_t batch, float *logits);

/**
 * The backward of the last forward from @grad_logits [batch]: both MLPs'
 * gradients (overwritten) and each table's pooled gradient into
 * @grad_pooled[t] [batch][D].  Errors: ERR_INVALID_PARAM (no forward).
 */
ember_status_t ember_dlrm_backward(ember_dlrm_t *model, const float *grad_logits,
                                   float *const *grad_pooled);

#endif
