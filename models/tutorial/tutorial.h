/*
 * models/tutorial: the PyTorch tutorial's model (the RPC tutorial's
 * HybridModel): one EmbeddingBag table on the PS, its pooled bags into a
 * Linear layer (or an MLP, --hidden) replicated on the trainers, cross
 * entropy over the bags' targets.  Data: the tutorial's random bags, bags
 * with a learnable target (synthetic), or a golden file's batches
 * (--replay, which also gives the initial weights and the result to check).
 *
 * Its pieces: tutorial.c (the hooks, its flags and description),
 * tutorial_check.c (what flags go together; --replay's file takes over the
 * job), tutorial_io.c (initial weights, names, the replay check),
 * tutorial_data.c (the batches), tutorial_trainer.c (a trainer's dense half
 * and step), replay_file.c (golden files, checked).
 */
#ifndef MODELS_TUTORIAL_TUTORIAL_H
#define MODELS_TUTORIAL_TUTORIAL_H

#include "models/model.h"

#include <stddef.h>
#include <stdint.h>

#define TUTORIAL_HIDDEN_MAX 8
#define TUTORIAL_PATH_MAX   512

/* Where its batches come from. */
typedef enum {
    TUTORIAL_DATA_RANDOM = 0,    /* the tutorial's random bags */
    TUTORIAL_DATA_SYNTHETIC = 1, /* a learnable target: the loss falls */
    TUTORIAL_DATA_REPLAY = 2     /* a golden file's batches */
} tutorial_source_t;

/* Its one table's name on the PS, in errors and ("emb.weight") in files. */
#define TUTORIAL_TABLE "emb"

typedef struct {
    int64_t rows;
    uint32_t dim, classes;
    uint32_t mode; /* ember_bag_mode_t */
    int64_t padding_idx;
    int weights; /* per-sample weights */
    uint32_t batches, min_indices, max_indices;
    uint32_t nhidden, hidden[TUTORIAL_HIDDEN_MAX];
    uint32_t data; /* tutorial_source_t */
    char replay[TUTORIAL_PATH_MAX];
    double replay_tolerance; /* the master's (not described) */
} tutorial_config_t;

/* Its hooks (tutorial.c). */
extern const ember_model_ops_t ember_model_tutorial;

/* The dense model's widths: dim, the hidden layers, classes; its layers. */
size_t tutorial_widths(const tutorial_config_t *c, size_t widths[TUTORIAL_HIDDEN_MAX + 2]);

/* tutorial_check.c */
ember_status_t tutorial_check(void *config, ember_train_settings_t *settings,
                              const ember_flag_given_t *given, size_t ngiven, char *err,
                              size_t err_length);

/* tutorial_io.c */
size_t tutorial_tensors(const void *config, ember_model_tensor_t *out);
ember_status_t tutorial_initial(const void *config, const ember_train_settings_t *settings,
                                float *params, float **rows, char *err, size_t err_length);
ember_status_t tutorial_verify(const void *config, const ember_train_settings_t *settings,
                               const float *const *rows, const float *params, const float *losses,
                               uint64_t steps);

/* tutorial_trainer.c */
ember_status_t tutorial_trainer_create(const ember_model_trainer_args_t *args, void **trainer_p,
                                       char *err, size_t err_length);
void tutorial_trainer_destroy(void *trainer);
ember_status_t tutorial_take(void *trainer, uint64_t step, int skip, ember_model_batch_t *batch,
                             const char **table_p, char *err, size_t err_length);
void tutorial_release(void *trainer);
ember_status_t tutorial_forward(void *trainer, const ember_model_batch_t *batch,
                                const float *pooled, float *loss_p, char *err, size_t err_length);
ember_status_t tutorial_backward(void *trainer, const float **grad_p, char *err, size_t err_length);
ember_status_t tutorial_step(void *trainer, char *err, size_t err_length);
const float *tutorial_trainer_params(void *trainer);
uint64_t tutorial_epoch_steps(void *trainer);
size_t tutorial_optimizers(void *trainer, ember_opt_t **out);

#endif
