/*
 * tests/train/test_train_messages: ember-train's own messages
 * (tools/ember-train/messages.c), its settings as text (settings.c) and its
 * models' descriptions (each model's describe / parse / differs hooks): what
 * is packed is taken back whole, and what a job could not have sent, or a
 * checkpoint could not have kept, is refused naming what is wrong (the
 * inputs the fuzzers once got through among them: fuzz/fuzz_train_start.c,
 * fuzz_epoch_report.c).
 *
 *   start       TRAIN_START packed (head, four texts each padded to 8 bytes,
 *               the dense parameters) is taken back text for text; refused:
 *               short, another version, for another trainer or job, a NUL
 *               inside a text, a text longer than the bytes, a parameter
 *               count whose x 4 wraps (2^62 + 4), a directory too long
 *   tutorial    the tutorial's description read back equals the
 *               configuration; refused naming the setting: its range of
 *               indices upside down (the draw once allocated 2^64 indices),
 *               no rows, an unknown mode or data word, a padding index
 *               beyond the rows, an unknown or a missing key; a resume's
 *               --hidden named as the setting that differs
 *   dlrm        DLRM's description read back equals the configuration;
 *               refused: 25 tables, DenseArch not ending in the embedding
 *               dimension; a resume's --batch-size named
 *   settings    the driver's settings read back exactly (every optimizer
 *               field, the seed at 64 bits); refused: a model this build
 *               has not, a learning rate below 0, staleness with async; a
 *               resume's optimizer and seed named as the settings that differ
 *   done        TRAIN_START's answer: its steps are its length's, checked by
 *               division (a steps x 4 that wraps to a short answer is
 *               refused), the losses and parameters where it says
 *   epoch       EPOCH: exactly one report, of the job's trainers and epochs
 *   eval        EVAL: the logits and labels exactly its bytes, of a trainer
 *               of the job
 *   progress    PROGRESS: exactly one report, of a trainer and epoch of the
 *               job, its counts possible and its loss finite, else refused
 *               naming the trainer; its answer 0 or a step after the known
 */
#include "models/dlrm/dlrm.h"
#include "models/tutorial/tutorial.h"
#include "tools/ember-train/messages.h"
#include "tools/ember-train/settings.h"

#include "tests/engine/test_util.h"

#include <math.h>
#include <stdlib.h>

/* A TRAIN_START packed into one buffer (malloc'd), as the transport
 * delivers it. */
static uint8_t *start_bytes(train_msg_start_t *head, const char *const texts[4],
                            const float *params, size_t *length_p)
{
    ember_iov_t iov[10];
    const size_t n = train_start_pack(head, texts, params, iov);
    size_t length = 0;
    for (size_t i = 0; i < n; i++)
        length += iov[i].length;
    uint8_t *bytes = malloc(length + 1), *at = bytes;
    for (size_t i = 0; bytes && i < n; i++) {
        if (iov[i].length)
            memcpy(at, iov[i].buffer, iov[i].length);
        at += iov[i].length;
    }
    *length_p = length;
    return bytes;
}

static int case_start(void)
{
    const char *texts[4] = {"model=tutorial\n", "rows=100\n", "/ck", ""};
    const float params[3] = {1, 2, 3};
    train_msg_start_t head = {.trainer = 1, .trainers = 2, .num_ps = 3, .nparams = 3};
    size_t length;
    uint8_t *bytes = start_bytes(&head, texts, params, &length);
    train_start_t start;
    char err[256];
    CHECK(bytes && length == sizeof(head) + 16 + 16 + 8 + 0 + 12, "%zu bytes", length);
    CHECK(train_start_unpack(bytes, length, 1, 2, 3, &start, err, sizeof(err)) == EMBER_OK, "%s",
          err);
    CHECK(!strcmp(start.settings, texts[0]) && !strcmp(start.config, texts[1]) &&
                  !strcmp(start.root, "/ck") && !strcmp(start.resume, "") &&
                  train_load_f32(start.params, 2) == 3.0f,
          "the texts or parameters misplaced");
    train_start_free(&start);
    CHECK(train_start_unpack(bytes, sizeof(head) - 1, 1, 2, 3, &start, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "short: %s", err);
    CHECK(train_start_unpack(bytes, length, 0, 2, 3, &start, err, sizeof(err)) ==
                          EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "for trainer 1 of 2"),
          "another trainer's: %s", err);
    CHECK(train_start_unpack(bytes, length, 1, 2, 2, &start, err, sizeof(err)) ==
                  EMBER_ERR_INVALID_PARAM,
          "another job's: %s", err);
    CHECK(train_start_unpack(bytes, length - 1, 1, 2, 3, &start, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a parameter cut: %s", err);
    train_msg_start_t bad;
    memcpy(&bad, bytes, sizeof(bad));
    bad.version = TRAIN_START_VERSION - 1;
    memcpy(bytes, &bad, sizeof(bad));
    CHECK(train_start_unpack(bytes, length, 1, 2, 3, &start, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "version 1"),
          "another version: %s", err);
    bad.version = TRAIN_START_VERSION;
    /* progress reports: none, or two steps after the start in order */
    static const uint64_t reports[][3] = {{5, 6, 7}, {5, 7, 7}, {0, 9, 0}, {0, 0, 9}, {6, 6, 9}};
    for (size_t r = 0; r < sizeof(reports) / sizeof(reports[0]); r++) {
        bad.start_step = reports[r][0];
        bad.report_at[0] = reports[r][1];
        bad.report_at[1] = reports[r][2];
        memcpy(bytes, &bad, sizeof(bad));
        const ember_status_t status =
                train_start_unpack(bytes, length, 1, 2, 3, &start, err, sizeof(err));
        train_start_free(&start);
        CHECK(r == 0 ? status == EMBER_OK
                     : status == EMBER_ERR_BAD_MESSAGE && strstr(err, "progress reports"),
              "reports after %llu and %llu from %llu: %s", (unsigned long long)reports[r][1],
              (unsigned long long)reports[r][2], (unsigned long long)reports[r][0], err);
    }
    bad.start_step = bad.report_at[0] = bad.report_at[1] = 0;
    bad.nparams = (UINT64_C(1) << 62) + 3; /* x 4 wraps to the 12 bytes there */
    memcpy(bytes, &bad, sizeof(bad));
    CHECK(train_start_unpack(bytes, length, 1, 2, 3, &start, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "wrapped parameters: %s", err);
    bad.nparams = 3;
    bad.bytes[0] = 1u << 30; /* longer than the bytes */
    memcpy(bytes, &bad, sizeof(bad));
    CHECK(train_start_unpack(bytes, length, 1, 2, 3, &start, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "settings"),
          "a text beyond the bytes: %s", err);
    bad.bytes[0] = 15;
    memcpy(bytes, &bad, sizeof(bad));
    bytes[sizeof(bad) + 3] = '\0';
    CHECK(train_start_unpack(bytes, length, 1, 2, 3, &start, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a NUL inside a text: %s", err);
    free(bytes);
    char dir[TRAIN_DIR_MAX + 1];
    memset(dir, 'd', TRAIN_DIR_MAX);
    dir[TRAIN_DIR_MAX] = '\0';
    texts[3] = dir;
    head = (train_msg_start_t){.trainer = 1, .trainers = 2, .num_ps = 3, .nparams = 3};
    bytes = start_bytes(&head, texts, params, &length);
    CHECK(bytes && train_start_unpack(bytes, length, 1, 2, 3, &start, err, sizeof(err)) ==
                           EMBER_ERR_BAD_MESSAGE,
          "a directory of %d bytes: %s", TRAIN_DIR_MAX, err);
    free(bytes);
    return 0;
}

/* @model's description of @config read back into @out. */
static ember_status_t round_trip(const ember_model_ops_t *model, const void *config, void *out,
                                 char *err, size_t err_length)
{
    model_text_t text;
    model_text_init(&text);
    model->describe(config, &text);
    ember_status_t status = model_text_take(&text)
                                    ? model->parse(out, model_text_take(&text), err, err_length)
                                    : EMBER_ERR_NO_MEMORY;
    model_text_free(&text);
    return status;
}

/* @text with line @key's value replaced by @value (malloc'd). */
static char *with(const char *text, const char *key, const char *value)
{
    char *out = malloc(strlen(text) + strlen(value) + 64), *p = out;
    const size_t n = strlen(key);
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n') + 1;
        if (!strncmp(line, key, n) && line[n] == '=')
            p += sprintf(p, "%s=%s\n", key, value);
        else
            p += sprintf(p, "%.*s", (int)(end - line), line);
        line = end;
    }
    *p = '\0';
    return out;
}

/* @model refuses @good with @key set to @value, naming @want. */
static int refuses(const ember_model_ops_t *model, const char *good, const char *key,
                   const char *value, const char *want)
{
    char err[256] = "", *bad = with(good, key, value);
    void *config = calloc(1, model->config_size);
    ember_status_t status = model->parse(config, bad, err, sizeof(err));
    free(bad);
    free(config);
    CHECK(status == EMBER_ERR_FORMAT && strstr(err, want), "%s=%s: %s (want '%s')", key, value, err,
          want);
    return 0;
}

static int case_tutorial(void)
{
    const ember_model_ops_t *model = &ember_model_tutorial;
    tutorial_config_t c, back;
    char err[256];
    model->defaults(&c);
    c.nhidden = 2, c.hidden[0] = 8, c.hidden[1] = 4;
    c.mode = EMBER_BAG_MEAN;
    c.data = TUTORIAL_DATA_SYNTHETIC;
    CHECK(round_trip(model, &c, &back, err, sizeof(err)) == EMBER_OK, "%s", err);
    back.replay_tolerance = c.replay_tolerance; /* the master's, not described */
    CHECK(!memcmp(&c, &back, sizeof(c)) && !model->differs(&c, &back), "read back otherwise");
    model_text_t text;
    model_text_init(&text);
    model->describe(&c, &text);
    const char *good = model_text_take(&text);
    int bad = refuses(model, good, "min_indices", "276", "setting 'max_indices' is '50'") ||
              refuses(model, good, "rows", "0", "setting 'rows' is '0'") ||
              refuses(model, good, "mode", "9472", "setting 'mode' is '9472'") ||
              refuses(model, good, "data", "3", "setting 'data' is '3'") ||
              refuses(model, good, "padding_idx", "100", "setting 'padding_idx' is '100'") ||
              refuses(model, good, "dim", "16\nlayers=3", "setting 'layers' is unknown");
    char *missing = with(good, "classes", "8");
    *strstr(missing, "classes=8\n") = '\0'; /* the lines from classes on gone */
    bad = bad || (model->parse(&back, missing, err, sizeof(err)) == EMBER_OK);
    free(missing);
    model_text_free(&text);
    CHECK(!bad, "a refusal");
    back = c;
    back.hidden[1] = 5;
    CHECK(model->differs(&c, &back) && !strcmp(model->differs(&c, &back), "--hidden"),
          "another --hidden is not named");
    return 0;
}

/* A schema's DLRM-DCN read back whole; another bag bound named by its feature. */
static int case_dlrm_schema(const ember_model_ops_t *model, dlrm_config_t *c)
{
    static const char *const texts[] = {
            "label y; dense a log; sparse u int rows=9; sparse g int rows=5 list=| bag=3 empty=bag",
            "label y; dense a log; sparse u int rows=9; sparse g int rows=5 list=| bag=4 "
            "empty=bag"};
    static dlrm_config_t other; /* large: not on the stack */
    dlrm_config_t *configs[] = {c, &other};
    char err[256];
    for (int i = 0; i < 2; i++) {
        ember_schema_t *schema = NULL;
        CHECK(ember_schema_parse(texts[i], "test", &schema, err, sizeof(err)) == EMBER_OK, "%s",
              err);
        if (i == 1)
            other = *c;
        CHECK(dlrm_set_schema(configs[i], schema, err, sizeof(err)) == EMBER_OK, "%s", err);
        ember_schema_free(schema);
    }
    c->interaction = other.interaction = DLRM_INTERACTION_DCN;
    c->dcn_layers = other.dcn_layers = 2;
    c->dcn_rank = other.dcn_rank = 7;
    static dlrm_config_t back;
    CHECK(round_trip(model, c, &back, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(!memcmp(c, &back, sizeof(*c)) && !model->differs(c, &back),
          "a schema's DLRM-DCN read back otherwise");
    const char *why = model->differs(c, &other);
    CHECK(why && strstr(why, "--schema (") && strstr(why, "'g'"), "another bag bound: %s",
          why ? why : "(not refused)");
    return 0;
}

static int case_dlrm(void)
{
    const ember_model_ops_t *model = &ember_model_dlrm;
    dlrm_config_t c, back;
    char err[256];
    model->defaults(&c);
    snprintf(c.data, sizeof(c.data), "criteo:/data/a,/data/b\nc");
    snprintf(c.eval, sizeof(c.eval), "criteo-npy:/data/e");
    c.sharding = EMBER_SHARD_TABLE_WISE;
    c.rows[25] = 7;
    CHECK(round_trip(model, &c, &back, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(!memcmp(&c, &back, sizeof(c)) && !model->differs(&c, &back), "read back otherwise");
    model_text_t text;
    model_text_init(&text);
    model->describe(&c, &text);
    const char *good = model_text_take(&text);
    int bad = refuses(model, good, "rows",
                      "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,"
                      "21,22,23,24,25",
                      "not a DLRM's") ||
              refuses(model, good, "dense_arch", "512,256,32", "not a DLRM's");
    model_text_free(&text);
    CHECK(!bad, "a refusal");
    back = c;
    back.batch_size = 64;
    CHECK(model->differs(&c, &back) && !strcmp(model->differs(&c, &back), "--batch-size"),
          "another --batch-size is not named");
    return case_dlrm_schema(model, &c);
}

static int case_settings(void)
{
    ember_train_settings_t s = {.staleness = 2, .seed = UINT64_C(0x7fffffffffffffff), .epochs = 9},
                           back;
    const ember_model_ops_t *model;
    model_text_t text;
    char err[256];
    ember_opt_config_default(EMBER_OPT_ADAM, 1e-3f, &s.optimizer);
    s.optimizer.beta1 = 0.8f;
    model_text_init(&text);
    train_settings_describe(&ember_model_dlrm, &s, &text);
    const char *good = model_text_take(&text);
    back = (ember_train_settings_t){.epochs = 0};
    CHECK(train_settings_parse(good, &model, &back, err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(model == ember_model_find("dlrm") &&
                  !memcmp(&s.optimizer, &back.optimizer, sizeof(s.optimizer)) &&
                  back.seed == s.seed && back.staleness == 2 && back.epochs == 9 &&
                  !train_settings_differ(&s, &back),
          "read back otherwise");
    back.seed = 3;
    CHECK(train_settings_differ(&s, &back) && !strcmp(train_settings_differ(&s, &back), "--seed"),
          "another --seed is not named");
    back = s;
    back.optimizer.lr = 0.5f;
    CHECK(train_settings_differ(&s, &back) && strstr(train_settings_differ(&s, &back), "--lr"),
          "another --lr is not named");
    char *bad = with(good, "model", "two_tower");
    CHECK(train_settings_parse(bad, &model, &back, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "two_tower"),
          "an unknown model: %s", err);
    free(bad);
    bad = with(good, "lr", "-1");
    CHECK(train_settings_parse(bad, &model, &back, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "'lr'"),
          "lr -1: %s", err);
    free(bad);
    bad = with(good, "consistency", "async");
    CHECK(train_settings_parse(bad, &model, &back, err, sizeof(err)) == EMBER_ERR_FORMAT &&
                  strstr(err, "staleness"),
          "staleness with async: %s", err);
    free(bad);
    model_text_free(&text);
    return 0;
}

static int case_done(void)
{
    enum {
        HEAD = sizeof(train_msg_done_t) / sizeof(float)
    };
    float answer[HEAD + 2 + 3]; /* the head, 2 losses, 3 parameters */
    train_msg_done_t head = {.steps = 2, .bags = 10, .seconds = 1.5, .cache_hits = 7};
    train_done_t done;
    char err[160];
    _Static_assert(sizeof(train_msg_done_t) % sizeof(float) == 0, "a head of whole floats");
    head.phase_seconds[TRAIN_PHASE_WAIT] = 0.5;
    memcpy(answer, &head, sizeof(head));
    answer[HEAD] = 0.25f, answer[HEAD + 1] = 0.5f;
    answer[HEAD + 2] = 1, answer[HEAD + 3] = 2, answer[HEAD + 4] = 3;
    CHECK(train_done_unpack(answer, sizeof(answer), 3, 1, &done, err, sizeof(err)) == EMBER_OK,
          "%s", err);
    CHECK(done.head.steps == 2 && train_load_f32(done.losses, 1) == 0.5f &&
                  train_load_f32(done.params, 2) == 3.0f &&
                  done.head.phase_seconds[TRAIN_PHASE_WAIT] == 0.5 && done.head.cache_hits == 7,
          "the losses, parameters or phases misplaced");
    /* A phase's time that is no time: named. */
    static const double bad_times[] = {-1.0, 1e300, NAN};
    for (size_t i = 0; i < sizeof(bad_times) / sizeof(bad_times[0]); i++) {
        train_msg_done_t bad = head;
        bad.phase_seconds[TRAIN_PHASE_DENSE] = bad_times[i];
        memcpy(answer, &bad, sizeof(bad));
        CHECK(train_done_unpack(answer, sizeof(answer), 3, 1, &done, err, sizeof(err)) ==
                              EMBER_ERR_BAD_MESSAGE &&
                      strstr(err, "trainer1") && strstr(err, "dense step"),
              "%g s of a phase: %s", bad_times[i], err);
    }
    head.steps = (UINT64_C(1) << 62) + 2; /* x 4 wraps to the 8 bytes of 2 losses */
    memcpy(answer, &head, sizeof(head));
    CHECK(train_done_unpack(answer, sizeof(answer), 3, 1, &done, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "trainer1"),
          "wrapped steps: %s", err);
    CHECK(train_done_unpack(answer, sizeof(answer) - 2, 3, 1, &done, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a length of no whole float: %s", err);
    CHECK(train_done_unpack(answer, 10, 3, 1, &done, err, sizeof(err)) == EMBER_ERR_BAD_MESSAGE,
          "shorter than its parameters: %s", err);
    return 0;
}

static int case_epoch(void)
{
    train_msg_epoch_t report = {.trainer = 1, .epoch = 2, .steps = 5}, taken;
    uint8_t bytes[sizeof(report) + 1];
    char err[160];
    memcpy(bytes, &report, sizeof(report));
    CHECK(train_epoch_unpack(bytes, sizeof(report), 2, 3, &taken, err, sizeof(err)) == EMBER_OK &&
                  taken.steps == 5,
          "%s", err);
    CHECK(train_epoch_unpack(bytes, sizeof(report) + 1, 2, 3, &taken, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a byte over: %s", err);
    CHECK(train_epoch_unpack(bytes, sizeof(report), 2, 2, &taken, err, sizeof(err)) ==
                          EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "epoch 2"),
          "epoch 2 of 2: %s", err);
    CHECK(train_epoch_unpack(bytes, sizeof(report), 1, 3, &taken, err, sizeof(err)) ==
                  EMBER_ERR_INVALID_PARAM,
          "trainer 1 of 1: %s", err);
    return 0;
}

static int case_progress(void)
{
    const train_msg_progress_t good = {.trainer = 1,
                                       .epoch = 2,
                                       .steps = 30,
                                       .epoch_steps = 10,
                                       .epoch_size = 10,
                                       .examples = 300,
                                       .loss_sum = 6.5};
    train_msg_progress_t taken, bad;
    uint8_t bytes[sizeof(good) + 1];
    char err[200];
    memcpy(bytes, &good, sizeof(good));
    CHECK(train_progress_unpack(bytes, sizeof(good), 2, 3, &taken, err, sizeof(err)) == EMBER_OK &&
                  !memcmp(&taken, &good, sizeof(good)),
          "%s", err);
    CHECK(train_progress_unpack(bytes, sizeof(good) + 1, 2, 3, &taken, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a byte over: %s", err);
    CHECK(train_progress_unpack(bytes, sizeof(good), 1, 3, &taken, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "trainer 1 of 1"),
          "trainer 1 of 1: %s", err);
    /* each count that cannot be: refused naming the trainer */
    for (int k = 0; k < 6; k++) {
        bad = good;
        switch (k) {
        case 0: bad.epoch = 3; break;
        case 1: bad.epoch_steps = 0; break;
        case 2:
            bad.epoch_steps = 31;
            bad.epoch_size = 0;
            break;
        case 3: bad.epoch_size = 9; break;
        case 4: bad.loss_sum = NAN; break;
        default: bad.loss_sum = -INFINITY; break;
        }
        memcpy(bytes, &bad, sizeof(bad));
        CHECK(train_progress_unpack(bytes, sizeof(bad), 2, 3, &taken, err, sizeof(err)) ==
                              EMBER_ERR_BAD_MESSAGE &&
                      strstr(err, "trainer1's progress report"),
              "bad count %d: %s", k, err);
    }
    bad = good;
    bad.epoch_size = 0; /* unknown */
    memcpy(bytes, &bad, sizeof(bad));
    CHECK(train_progress_unpack(bytes, sizeof(bad), 2, 3, &taken, err, sizeof(err)) == EMBER_OK,
          "an unknown size: %s", err);
    /* the answer: 0, or a step after the one known */
    uint64_t next, values[3] = {0, 8, 7};
    CHECK(train_progress_next(&values[0], 8, 1, 7, &next, err, sizeof(err)) == EMBER_OK &&
                  next == 0,
          "no more: %s", err);
    CHECK(train_progress_next(&values[1], 8, 1, 7, &next, err, sizeof(err)) == EMBER_OK &&
                  next == 8,
          "the next: %s", err);
    CHECK(train_progress_next(&values[2], 8, 1, 7, &next, err, sizeof(err)) ==
                          EMBER_ERR_BAD_MESSAGE &&
                  strstr(err, "trainer 1"),
          "not after: %s", err);
    CHECK(train_progress_next(&values[1], 7, 1, 7, &next, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "short: %s", err);
    CHECK(train_progress_next(NULL, 0, 1, 7, &next, err, sizeof(err)) == EMBER_ERR_BAD_MESSAGE,
          "empty: %s", err);
    return 0;
}

static int case_eval(void)
{
    uint8_t report[sizeof(train_msg_eval_t) + 3 * 8];
    train_msg_eval_t head = {.trainer = 1, .step = 5, .count = 3};
    const float values[6] = {0.5f, -1.0f, 2.0f, 1.0f, 0.0f, 1.0f};
    train_eval_t eval;
    char err[160];
    memcpy(report, &head, sizeof(head));
    memcpy(report + sizeof(head), values, sizeof(values));
    CHECK(train_eval_unpack(report, sizeof(report), 2, &eval, err, sizeof(err)) == EMBER_OK &&
                  train_load_f32(eval.logits, 2) == 2.0f && train_load_f32(eval.labels, 0) == 1.0f,
          "%s", err);
    CHECK(train_eval_unpack(report, sizeof(report) - 1, 2, &eval, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "a byte short: %s", err);
    CHECK(train_eval_unpack(report, sizeof(report), 1, &eval, err, sizeof(err)) ==
                  EMBER_ERR_BAD_MESSAGE,
          "trainer 1 of 1: %s", err);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"start", case_start},       {"tutorial", case_tutorial}, {"dlrm", case_dlrm},
            {"settings", case_settings}, {"done", case_done},         {"epoch", case_epoch},
            {"eval", case_eval},         {"progress", case_progress},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
