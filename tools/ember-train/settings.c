/* tools/ember-train/settings: the driver's settings as text (settings.h). */
#include "tools/ember-train/settings.h"

#include <string.h>

static const char *const keys[] = {"model",
                                   "optimizer",
                                   "lr",
                                   "momentum",
                                   "dampening",
                                   "nesterov",
                                   "lr_decay",
                                   "initial_accumulator",
                                   "eps",
                                   "beta1",
                                   "beta2",
                                   "adam_row_step",
                                   "consistency",
                                   "staleness",
                                   "sparse_reduce",
                                   "table_dtype",
                                   "reply_dtype",
                                   "seed",
                                   "epochs"};

void train_settings_describe(const ember_model_ops_t *model, const ember_train_settings_t *s,
                             model_text_t *text)
{
    const ember_opt_config_t *o = &s->optimizer;
    model_text_add(text, "model", "%s", model->name);
    model_text_add(text, "optimizer", "%s", ember_opt_kind_name(o->kind));
    model_text_add_float(text, "lr", o->lr);
    model_text_add_float(text, "momentum", o->momentum);
    model_text_add_float(text, "dampening", o->dampening);
    model_text_add(text, "nesterov", "%d", o->nesterov != 0);
    model_text_add_float(text, "lr_decay", o->lr_decay);
    model_text_add_float(text, "initial_accumulator", o->initial_accumulator);
    model_text_add_float(text, "eps", o->eps);
    model_text_add_float(text, "beta1", o->beta1);
    model_text_add_float(text, "beta2", o->beta2);
    model_text_add(text, "adam_row_step", "%d", o->adam_row_step != 0);
    model_text_add(text, "consistency", "%s", s->consistency == EMBER_ASYNC ? "async" : "sync");
    model_text_add(text, "staleness", "%u", s->staleness);
    model_text_add(text, "sparse_reduce", "%s",
                   s->sparse_reduce == EMBER_REDUCE_MEAN ? "mean" : "sum");
    model_text_add(text, "table_dtype", "%s", s->table_dtype == EMBER_DTYPE_F16 ? "fp16" : "fp32");
    model_text_add(text, "reply_dtype", "%s", s->half_replies ? "fp16" : "fp32");
    model_text_add(text, "seed", "%llu", (unsigned long long)s->seed);
    model_text_add(text, "epochs", "%u", s->epochs);
}

/* The optimizer's kind and hyper-parameters, checked as ember_opt_create would. */
static ember_status_t parse_optimizer(const char *text, ember_opt_config_t *o, char *err,
                                      size_t err_length)
{
    int kind;
    uint32_t nesterov, row_step;
    const float big = 3.4e38f;
    EMBER_CHECK(model_text_word(text, "optimizer", "sgd|adagrad|rowwise_adagrad|adam", &kind, err,
                                err_length));
    o->kind = (ember_opt_kind_t)kind;
    EMBER_CHECK(model_text_float(text, "lr", 0, big, &o->lr, err, err_length));
    EMBER_CHECK(model_text_float(text, "momentum", 0, big, &o->momentum, err, err_length));
    EMBER_CHECK(model_text_float(text, "dampening", -big, big, &o->dampening, err, err_length));
    EMBER_CHECK(model_text_u32(text, "nesterov", 0, 1, &nesterov, err, err_length));
    EMBER_CHECK(model_text_float(text, "lr_decay", 0, big, &o->lr_decay, err, err_length));
    EMBER_CHECK(model_text_float(text, "initial_accumulator", 0, big, &o->initial_accumulator, err,
                                 err_length));
    EMBER_CHECK(model_text_float(text, "eps", 0, big, &o->eps, err, err_length));
    EMBER_CHECK(model_text_float(text, "beta1", 0, 1, &o->beta1, err, err_length));
    EMBER_CHECK(model_text_float(text, "beta2", 0, 1, &o->beta2, err, err_length));
    EMBER_CHECK(model_text_u32(text, "adam_row_step", 0, 1, &row_step, err, err_length));
    o->nesterov = (int)nesterov;
    o->adam_row_step = (int)row_step;
    return ember_opt_config_check(o, err, err_length) == EMBER_OK ? EMBER_OK : EMBER_ERR_FORMAT;
}

ember_status_t train_settings_parse(const char *text, const ember_model_ops_t **model_p,
                                    ember_train_settings_t *s, char *err, size_t err_length)
{
    char name[64];
    int consistency, reduce, dtype, replies;
    uint64_t seed;
    EMBER_CHECK(model_text_check(text, keys, sizeof(keys) / sizeof(keys[0]), 1, err, err_length));
    EMBER_CHECK(model_text_str(text, "model", name, sizeof(name), err, err_length));
    if (!(*model_p = ember_model_find(name)))
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "setting 'model' is '%s', not a model this ember-train has", name);
    EMBER_CHECK(parse_optimizer(text, &s->optimizer, err, err_length));
    EMBER_CHECK(model_text_word(text, "consistency", "sync|async", &consistency, err, err_length));
    EMBER_CHECK(model_text_u32(text, "staleness", 0, EMBER_STALENESS_MAX, &s->staleness, err,
                               err_length));
    EMBER_CHECK(model_text_word(text, "sparse_reduce", "sum|mean", &reduce, err, err_length));
    EMBER_CHECK(model_text_word(text, "table_dtype", "fp32|fp16", &dtype, err, err_length));
    EMBER_CHECK(model_text_word(text, "reply_dtype", "fp32|fp16", &replies, err, err_length));
    EMBER_CHECK(model_text_u64(text, "seed", 0, INT64_MAX, &seed, err, err_length));
    EMBER_CHECK(model_text_u32(text, "epochs", 1, 1u << 30, &s->epochs, err, err_length));
    s->consistency = consistency ? EMBER_ASYNC : EMBER_SYNC;
    s->sparse_reduce = reduce ? EMBER_REDUCE_MEAN : EMBER_REDUCE_SUM;
    s->table_dtype = dtype ? EMBER_DTYPE_F16 : EMBER_DTYPE_F32;
    s->half_replies = replies;
    s->seed = seed;
    if (s->staleness > 0 && s->consistency != EMBER_SYNC)
        return ember_status_text(err, err_length, EMBER_ERR_FORMAT,
                                 "settings 'staleness' %u and 'consistency' async: sync only",
                                 s->staleness);
    return EMBER_OK;
}

const char *train_settings_differ(const ember_train_settings_t *was,
                                  const ember_train_settings_t *now)
{
    if (memcmp(&was->optimizer, &now->optimizer, sizeof(was->optimizer)) != 0)
        return "--optimizer, --lr or --momentum";
    if (was->consistency != now->consistency)
        return "--consistency";
    if (was->seed != now->seed)
        return "--seed";
    if (was->half_replies != now->half_replies)
        return "--reply-dtype";
    return NULL;
}
