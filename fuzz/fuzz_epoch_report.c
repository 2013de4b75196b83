/*
 * fuzz_epoch_report: a trainer's reports as ember-train's master takes
 * them: each payload as an EPOCH report (train_epoch_unpack, as
 * tools/ember-train/master.c's handler takes it) into the [epochs][trainers]
 * table the master keeps, as an evaluation's report (train_eval_unpack,
 * master_eval.c's), and as a trainer's answer to TRAIN_START
 * (train_done_unpack) of a model of 3 dense parameters.
 *
 * Input: [trainers - 1][epochs] then records (fuzz/fuzz_input.h), each
 * payload one report as it came.
 *
 * Invariants: an accepted report is exactly one report, of a trainer and
 * an epoch of the job (its slot inside the table: AddressSanitizer sees a
 * write past it); an accepted evaluation report's logits and labels, and an
 * accepted answer's losses and parameters, are exactly its bytes (every one
 * read); a refused one says why.
 */
#include "fuzz/fuzz_input.h"
#include "tools/ember-train/messages.h"

/* The payload as an evaluation's report: its arrays read whole. */
static void take_eval_report(const uint8_t *payload, size_t length, uint32_t trainers)
{
    train_eval_t view;
    char err[160] = "";
    ember_status_t status = train_eval_unpack(payload, length, trainers, &view, err, sizeof(err));
    if (status != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "an evaluation report refused without its cause");
        return;
    }
    FUZZ_CHECK(view.head.trainer < trainers &&
                       length == sizeof(view.head) + (size_t)view.head.count * 8,
               "an evaluation report of %zu bytes taken", length);
    volatile float sum = 0.0f;
    for (uint64_t i = 0; i < view.head.count; i++)
        sum += train_load_f32(view.logits, i) + train_load_f32(view.labels, i);
    (void)sum;
}

/* The payload as a trainer's answer: its losses and parameters read whole. */
static void take_done(const uint8_t *payload, size_t length)
{
    train_done_t done;
    char err[160] = "";
    if (train_done_unpack(payload, length, 3, 1, &done, err, sizeof(err)) != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "an answer refused without its cause");
        return;
    }
    FUZZ_CHECK(length == sizeof(done.head) + (size_t)(done.head.steps + 3) * 4,
               "an answer of %zu bytes taken with %llu steps", length,
               (unsigned long long)done.head.steps);
    volatile float sum = 0.0f;
    for (uint64_t i = 0; i < done.head.steps; i++)
        sum += train_load_f32(done.losses, i);
    for (size_t i = 0; i < 3; i++)
        sum += train_load_f32(done.params, i);
    (void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint32_t trainers = 1u + fuzz_u8(&in) % 16, epochs = fuzz_u8(&in);
    train_msg_epoch_t *reports = malloc((size_t)trainers * epochs * sizeof(*reports) + 1);
    uint8_t *payload;
    size_t length;

    FUZZ_CHECK(reports, "out of memory");
    while (fuzz_record(&in, &payload, &length) >= 0) {
        train_msg_epoch_t msg;
        char err[96] = "";
        ember_status_t status =
                train_epoch_unpack(payload, length, trainers, epochs, &msg, err, sizeof(err));
        if (status == EMBER_OK) {
            FUZZ_CHECK(length == sizeof(msg) && memcmp(&msg, payload, sizeof(msg)) == 0,
                       "a report of %zu bytes taken", length);
            reports[(size_t)msg.epoch * trainers + msg.trainer] = msg;
        } else {
            FUZZ_CHECK(err[0] != '\0', "a report refused without its cause");
        }
        take_eval_report(payload, length, trainers);
        take_done(payload, length);
        free(payload);
    }
    free(reports);
    return 0;
}
