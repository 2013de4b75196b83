/*
 * fuzz_ckpt_messages: the checkpoint messages as their handlers take them:
 * each payload as a CKPT_PLAN (engine/ps/ps.c), CKPT_AT (the PS, the
 * trainers and the master), CKPT_REQUEST (trainer0), CKPT_DONE (the
 * master) and TABLE_RESTORE (the PS) through the codec.
 *
 * Input: records (fuzz/fuzz_input.h), each payload one message as it came.
 *
 * Invariants: an accepted message is exactly its size; its texts are
 * terminated inside their fields; a CKPT_DONE's name and every name of a
 * TABLE_RESTORE is a plain file name (no '/', not "." or ".."), so a path
 * made from it stays in the checkpoint's directory; its times are finite;
 * a refused one says why.
 */
#include "engine/wire/codec.h"
#include "fuzz/fuzz_input.h"

#include <math.h>

static void plain_name(const char *name, size_t length)
{
    size_t n = strnlen(name, length);
    FUZZ_CHECK(n > 0 && n < length && !memchr(name, '/', n) && strcmp(name, ".") != 0 &&
                       strcmp(name, "..") != 0,
               "a file name that leaves the directory taken");
}

static void take_plan_at_request(const uint8_t *payload, size_t length)
{
    ember_msg_ckpt_plan_t plan;
    ember_msg_ckpt_at_t at;
    ember_msg_ckpt_request_t request;
    char err[160] = "";
    if (ember_wire_ckpt_plan_unpack(payload, length, &plan, err, sizeof(err)) == EMBER_OK)
        FUZZ_CHECK(length == sizeof(plan) && memchr(plan.root, '\0', sizeof(plan.root)),
                   "a plan of %zu bytes taken", length);
    else
        FUZZ_CHECK(err[0], "a plan refused without its cause");
    err[0] = '\0';
    if (ember_wire_ckpt_at_unpack(payload, length, &at, err, sizeof(err)) == EMBER_OK)
        FUZZ_CHECK(length == sizeof(at) && at.step > 0 && at.stop <= 1, "a step taken");
    else
        FUZZ_CHECK(err[0], "a checkpoint step refused without its cause");
    err[0] = '\0';
    if (ember_wire_ckpt_request_unpack(payload, length, &request, err, sizeof(err)) == EMBER_OK)
        FUZZ_CHECK(length == sizeof(request) && request.stop <= 1, "a request taken");
    else
        FUZZ_CHECK(err[0], "a request refused without its cause");
}

static void take_done(const uint8_t *payload, size_t length)
{
    ember_msg_ckpt_done_t done;
    char err[160] = "";
    if (ember_wire_ckpt_done_unpack(payload, length, &done, err, sizeof(err)) != EMBER_OK) {
        FUZZ_CHECK(err[0], "a report refused without its cause");
        return;
    }
    FUZZ_CHECK(length == sizeof(done) && memchr(done.text, '\0', sizeof(done.text)) &&
                       isfinite(done.copy_seconds) && isfinite(done.write_seconds) &&
                       isfinite(done.wait_seconds),
               "a report of %zu bytes taken", length);
    plain_name(done.name, sizeof(done.name));
}

static void take_restore(const uint8_t *payload, size_t length)
{
    ember_wire_table_restore_view_t view;
    char err[160] = "";
    if (ember_wire_table_restore_unpack(payload, length, &view, err, sizeof(err)) != EMBER_OK) {
        FUZZ_CHECK(err[0], "a restore refused without its cause");
        return;
    }
    FUZZ_CHECK(length == sizeof(view.head) + (size_t)view.head.count * EMBER_CKPT_FILE_NAME_MAX &&
                       memchr(view.head.dir, '\0', sizeof(view.head.dir)),
               "a restore of %zu bytes taken", length);
    for (uint32_t i = 0; i < view.head.count; i++)
        plain_name(view.names + (size_t)i * EMBER_CKPT_FILE_NAME_MAX, EMBER_CKPT_FILE_NAME_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {.data = data, .size = size};
    uint8_t *payload;
    size_t length;
    while (fuzz_record(&in, &payload, &length) >= 0) {
        take_plan_at_request(payload, length);
        take_done(payload, length);
        take_restore(payload, length);
        free(payload);
    }
    return 0;
}
