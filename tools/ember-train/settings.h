/*
 * tools/ember-train/settings: the driver's settings as text (key=value
 * lines, models/common/text.h): what TRAIN_START tells every trainer
 * besides the model's own description, and what a trainer's checkpoint file
 * keeps so that a resume can be checked setting by setting.
 */
#ifndef EMBER_TRAIN_SETTINGS_H
#define EMBER_TRAIN_SETTINGS_H

#include "models/model.h"

/** @model's name and @settings' course of training (optimizer, consistency,
 * staleness, sparse reduce, table and reply dtypes, seed, epochs). */
void train_settings_describe(const ember_model_ops_t *model, const ember_train_settings_t *settings,
                             model_text_t *text);

/** @text read back: the model it names into *@model_p, the settings into
 * @settings (those not described left as they are), each value checked at
 * full width.  Errors: ERR_FORMAT naming the key. */
ember_status_t train_settings_parse(const char *text, const ember_model_ops_t **model_p,
                                    ember_train_settings_t *settings, char *err, size_t err_length);

/** A checkpoint's settings @was against this job's @now: NULL when the job
 * may go on from it, else the flags of the first one that must not change
 * (the model, the optimizer and its hyper-parameters, the consistency, the
 * seed, the reply dtype; the table dtype and sparse reduce are the
 * manifest's). */
const char *train_settings_differ(const ember_train_settings_t *was,
                                  const ember_train_settings_t *now);

#endif
