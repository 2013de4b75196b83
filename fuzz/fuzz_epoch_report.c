/*
 * fuzz_epoch_report: a trainer's reports as the master takes them: each
 * payload as an EPOCH_REPORT (ember_wire_epoch_report_unpack, as
 * engine/train/master.c's handler takes it) into the [epochs][trainers]
 * table the master keeps, and as a DLRM job's EVAL_REPORT
 * (ember_wire_eval_report_unpack, engine/train/master_eval.c's).
 *
 * Input: [trainers - 1][epochs] then records (fuzz/fuzz_input.h), each
 * payload one report as it came.
 *
 * Invariants: an accepted report is exactly one report, of a trainer and
 * an epoch of the job (its slot inside the table: AddressSanitizer sees a
 * write past it); an accepted evaluation report's logits and labels are
 * exactly its bytes (every one read); a refused one says why.
 */
#include "engine/wire/codec.h"
#include "fuzz/fuzz_input.h"

/* The payload as an evaluation's report: its arrays read whole. */
static void take_eval_report(const uint8_t *payload, size_t length, uint32_t trainers)
{
    ember_wire_eval_report_view_t view;
    char err[160] = "";
    ember_status_t status =
            ember_wire_eval_report_unpack(payload, length, trainers, &view, err, sizeof(err));
    if (status != EMBER_OK) {
        FUZZ_CHECK(err[0] != '\0', "an evaluation report refused without its cause");
        return;
    }
    FUZZ_CHECK(view.head.trainer < trainers &&
                       length == sizeof(view.head) + (size_t)view.head.count * 8,
               "an evaluation report of %zu bytes taken", length);
    volatile float sum = 0.0f;
    for (uint64_t i = 0; i < view.head.count; i++)
        sum += ember_wire_load_f32(view.logits, i) + ember_wire_load_f32(view.labels, i);
    (void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint32_t trainers = 1u + fuzz_u8(&in) % 16, epochs = fuzz_u8(&in);
    ember_msg_epoch_report_t *reports = malloc((size_t)trainers * epochs * sizeof(*reports) + 1);
    uint8_t *payload;
    size_t length;

    FUZZ_CHECK(reports, "out of memory");
    while (fuzz_record(&in, &payload, &length) >= 0) {
        ember_msg_epoch_report_t msg;
        char err[96] = "";
        ember_status_t status = ember_wire_epoch_report_unpack(payload, length, trainers, epochs,
                                                               &msg, err, sizeof(err));
        if (status == EMBER_OK) {
            FUZZ_CHECK(length == sizeof(msg) && memcmp(&msg, payload, sizeof(msg)) == 0,
                       "a report of %zu bytes taken", length);
            reports[(size_t)msg.epoch * trainers + msg.trainer] = msg;
        } else {
            FUZZ_CHECK(err[0] != '\0', "a report refused without its cause");
        }
        take_eval_report(payload, length, trainers);
        free(payload);
    }
    free(reports);
    return 0;
}
