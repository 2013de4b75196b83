/*
 * fuzz_epoch_report: a trainer's EPOCH_REPORT as the master takes it
 * (ember_wire_epoch_report_unpack, as engine/train/master.c's handler takes it), into the
 * [epochs][trainers] table the master keeps.
 *
 * Input: [trainers - 1][epochs] then records (fuzz/fuzz_input.h), each
 * payload one report as it came.
 *
 * Invariants: an accepted report is exactly one report, of a trainer and
 * an epoch of the job (its slot inside the table: AddressSanitizer sees a
 * write past it); a refused one says why.
 */
#include "engine/wire/codec.h"
#include "fuzz/fuzz_input.h"

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
        free(payload);
    }
    free(reports);
    return 0;
}
