/* engine/io/checkpoint: manifests (round trip, every refusal with its
 * message), verify, find, begin, prune and exists, on real files in a
 * temporary directory. */
#include "engine/io/checkpoint.h"

#include "common/crc32c.h"
#include "engine/io/safetensors.h"

#include "test_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

static int make_root(void)
{
    snprintf(root, sizeof(root), "/tmp/ember_ckpt_XXXXXX");
    CHECK(mkdtemp(root), "mkdtemp");
    return 0;
}

static void remove_tree(const char *path)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", path);
}

static int write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "write %s", path);
    return 0;
}

/* A complete checkpoint of @step under the root: two data files (one a
 * safetensors file written durably, one plain), their manifest last. */
static int make_checkpoint(uint64_t step, char *dir, size_t dir_length)
{
    char err[1024] = "", path[512];
    float values[300];
    ember_st_written_t w;
    ember_ckpt_manifest_t m;

    CHECK(ember_ckpt_step_dir(root, step, dir, dir_length, err, sizeof(err)) == EMBER_OK,
          "step dir: %s", err);
    for (int i = 0; i < 300; i++)
        values[i] = (float)step + (float)i * 0.25f;
    ember_st_tensor_t t = {
            .name = "rows", .dtype = EMBER_DTYPE_F32, .ndim = 2, .shape = {100, 3}, .data = values};
    snprintf(path, sizeof(path), "%s/ps0.safetensors", dir);
    CHECK(ember_st_write_durable(path, &t, 1, NULL, 0, &w) == EMBER_OK, "data file");
    snprintf(path, sizeof(path), "%s/dense.bin", dir);
    CHECK(write_file(path, "dense state", 11) == 0, "dense");
    ember_ckpt_manifest_init(&m, step);
    CHECK(ember_ckpt_manifest_set(&m, "trainers", "2") == EMBER_OK, "set");
    CHECK(ember_ckpt_manifest_set(&m, "model", "dlrm with spaces") == EMBER_OK, "set");
    CHECK(ember_ckpt_manifest_add_file(&m, "ps0.safetensors", w.bytes, w.crc32c) == EMBER_OK,
          "add");
    CHECK(ember_ckpt_manifest_add_file(&m, "dense.bin", 11, ember_crc32c(0, "dense state", 11)) ==
                  EMBER_OK,
          "add");
    CHECK(ember_ckpt_manifest_write(dir, &m, err, sizeof(err)) == EMBER_OK, "write: %s", err);
    ember_ckpt_manifest_free(&m);
    return 0;
}

/* ---------------------------------------------------------------- manifests */

static int case_roundtrip(void)
{
    char dir[256], err[1024] = "", name[70];
    ember_ckpt_manifest_t m, back;

    if (make_root())
        return 1;
    ember_ckpt_manifest_init(&m, 100);
    CHECK(ember_ckpt_manifest_set(&m, "a.b_c9", "first") == EMBER_OK, "set");
    CHECK(ember_ckpt_manifest_set(&m, "empty", "") == EMBER_OK, "set empty");
    CHECK(ember_ckpt_manifest_set(&m, "a.b_c9", "  spaced value ~!\xc3\xa9 ") == EMBER_OK, "again");
    CHECK(m.nentries == 2, "a replaced key added an entry");
    CHECK(strcmp(ember_ckpt_manifest_get(&m, "a.b_c9"), "  spaced value ~!\xc3\xa9 ") == 0,
          "replaced");
    CHECK(ember_ckpt_manifest_get(&m, "nope") == NULL, "absent key found");
    for (int i = 0; i < 40; i++) { /* grows past the first allocation */
        snprintf(name, sizeof(name), "ps%d.safetensors", i);
        CHECK(ember_ckpt_manifest_add_file(&m, name, (uint64_t)i * 1000003u + UINT64_MAX / 2,
                                           0x01020304u * (uint32_t)i) == EMBER_OK,
              "add %s", name);
    }
    memset(name, 'x', 63);
    name[63] = '\0';
    CHECK(ember_ckpt_manifest_add_file(&m, name, 0, 0xffffffffu) == EMBER_OK, "63 characters");
    CHECK(ember_ckpt_step_dir(root, 100, dir, sizeof(dir), err, sizeof(err)) == EMBER_OK, "%s",
          err);
    CHECK(ember_ckpt_manifest_write(dir, &m, err, sizeof(err)) == EMBER_OK, "write: %s", err);
    CHECK(ember_ckpt_manifest_read(dir, &back, err, sizeof(err)) == EMBER_OK, "read: %s", err);
    CHECK(back.step == 100 && back.nentries == 2 && back.nfiles == 41, "counts %zu %zu",
          back.nentries, back.nfiles);
    for (size_t i = 0; i < m.nentries; i++)
        CHECK(strcmp(ember_ckpt_manifest_get(&back, m.entries[i].key), m.entries[i].value) == 0,
              "key %s", m.entries[i].key);
    for (size_t i = 0; i < m.nfiles; i++) {
        const ember_ckpt_file_t *f = ember_ckpt_manifest_file(&back, m.files[i].name);
        CHECK(f && f->bytes == m.files[i].bytes && f->crc32c == m.files[i].crc32c, "file %s",
              m.files[i].name);
    }
    ember_ckpt_manifest_free(&back);
    ember_ckpt_manifest_free(&m);
    remove_tree(root);
    return 0;
}

/* What set, add_file, dir_name and write refuse. */
static int case_refused_calls(void)
{
    char dir[256], err[1024] = "", long_name[70], long_value[600];
    ember_ckpt_manifest_t m;

    ember_ckpt_manifest_init(&m, 7);
    memset(long_name, 'a', 64);
    long_name[64] = '\0';
    memset(long_value, 'v', 512);
    long_value[512] = '\0';
    const char *bad_keys[] = {"", "Upper", "has space", "a/b", "0123456789012345678901234567890x"};
    for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++)
        CHECK(ember_ckpt_manifest_set(&m, bad_keys[i], "v") == EMBER_ERR_INVALID_PARAM, "key '%s'",
              bad_keys[i]);
    CHECK(ember_ckpt_manifest_set(&m, "k", long_value) == EMBER_ERR_INVALID_PARAM, "long value");
    CHECK(ember_ckpt_manifest_set(&m, "k", "new\nline") == EMBER_ERR_INVALID_PARAM, "newline");
    long_value[511] = '\0';
    CHECK(ember_ckpt_manifest_set(&m, "k", long_value) == EMBER_OK, "511 bytes");
    const char *bad_names[] = {"",    ".",     "..",     "manifest", "manifest.tmp",
                               "a/b", "../up", "sp ace", "tab\t",    long_name};
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
        CHECK(ember_ckpt_manifest_add_file(&m, bad_names[i], 1, 2) == EMBER_ERR_INVALID_PARAM,
              "name '%s'", bad_names[i]);
    CHECK(ember_ckpt_manifest_add_file(&m, "a", 1, 2) == EMBER_OK, "a");
    CHECK(ember_ckpt_manifest_add_file(&m, "a", 3, 4) == EMBER_ERR_INVALID_PARAM, "duplicate");
    CHECK(m.nfiles == 1 && m.nentries == 1, "a refused call changed the manifest");
    CHECK(ember_ckpt_dir_name("/r", 100, dir, 21) == EMBER_OK &&
                  strcmp(dir, "/r/step-000000000100") == 0,
          "dir name '%s'", dir);
    CHECK(ember_ckpt_dir_name("/r", 100, dir, 20) == EMBER_ERR_INVALID_PARAM, "does not fit");
    /* A value filled in by hand with a line of its own is not written. */
    if (make_root())
        return 1;
    CHECK(ember_ckpt_step_dir(root, 7, dir, sizeof(dir), err, sizeof(err)) == EMBER_OK, "%s", err);
    snprintf(m.entries[0].value, sizeof(m.entries[0].value), "x\nfile evil 1 00000000");
    CHECK(ember_ckpt_manifest_write(dir, &m, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM,
          "a value with a newline written");
    fprintf(stderr, "refused: %s\n", err);
    CHECK(strstr(err, "would not read back") && !ember_ckpt_exists(dir), "message '%s'", err);
    ember_ckpt_manifest_free(&m);
    remove_tree(root);
    return 0;
}

static const char good[] = "ember-checkpoint 1\n"
                           "step 100\n"
                           "key trainers 2\n"
                           "file ps0.safetensors 123456789 1a2b3c4d\n"
                           "end\n";

/* @text must be refused by the parser (step 100 expected) with @word in
 * its message, and leave the manifest empty. */
static int expect_refused(const char *label, const char *text, size_t n, const char *word)
{
    char err[1024] = "";
    ember_ckpt_manifest_t m;
    ember_status_t s = ember_ckpt_manifest_parse(text, n, "D/manifest", 100, &m, err, sizeof(err));
    CHECK(s == EMBER_ERR_FORMAT, "%s: status %s", label, ember_status_string(s));
    CHECK(strstr(err, word), "%s: message '%s' lacks '%s'", label, err, word);
    CHECK(m.nentries == 0 && m.nfiles == 0 && !m.entries && !m.files, "%s: not left empty", label);
    fprintf(stderr, "%s: %s\n", label, err);
    return 0;
}

static int refuse(const char *label, const char *text, const char *word)
{
    return expect_refused(label, text, strlen(text), word);
}

#define HEAD "ember-checkpoint 1\nstep 100\n"

static int case_refused_text(void)
{
    char err[1024] = "", value[700];
    ember_ckpt_manifest_t m;

    CHECK(ember_ckpt_manifest_parse(good, strlen(good), "D/manifest", 100, &m, err, sizeof(err)) ==
                  EMBER_OK,
          "good: %s", err);
    CHECK(m.nfiles == 1 && m.files[0].bytes == 123456789 && m.files[0].crc32c == 0x1a2b3c4du,
          "good file");
    ember_ckpt_manifest_free(&m);
    /* Names shown alike in messages are still two names (the fuzzer's
     * find: duplicates were once looked for by the shown name). */
    static const char alike[] = HEAD "file d\x8d 1 00000000\nfile d\x8e 2 00000000\nend\n";
    CHECK(ember_ckpt_manifest_parse(alike, strlen(alike), "D/manifest", 100, &m, err,
                                    sizeof(err)) == EMBER_OK &&
                  m.nfiles == 2 && ember_ckpt_manifest_file(&m, "d\x8e")->bytes == 2,
          "alike: %s", err);
    ember_ckpt_manifest_free(&m);
    /* Every cut of a good manifest is refused: only "end\n" at the end. */
    for (size_t n = 0; n < strlen(good); n++)
        if (expect_refused("cut", good, n, n == 0 ? "empty" : "cut short"))
            return 1;
    snprintf(value, sizeof(value), HEAD "key v %0512d\nend\n", 0);
    return refuse("header", "ember-checkpoint 2\nstep 100\nend\n", "D/manifest:1: ") ||
           refuse("not ours", "hello\n", "not \"ember-checkpoint 1\"") ||
           refuse("no step", "ember-checkpoint 1\nend\n",
                  ":2: the second line is not \"step N\"") ||
           refuse("step mismatch", "ember-checkpoint 1\nstep 99\nend\n",
                  ":2: step 99, but the directory is step 100") ||
           refuse("step overflow", "ember-checkpoint 1\nstep 18446744073709551616\nend\n",
                  "'18446744073709551616' is not a decimal number below 2^64") ||
           refuse("step sign", "ember-checkpoint 1\nstep +100\nend\n", "not a decimal") ||
           refuse("step zeros", "ember-checkpoint 1\nstep 0100\nend\n", "not a decimal") ||
           refuse("bytes overflow", HEAD "file a 99999999999999999999 00000000\nend\n",
                  ":3: file 'a': size '99999999999999999999' is not a decimal number") ||
           refuse("bytes text", HEAD "file a 12x 00000000\nend\n", "size '12x'") ||
           refuse("hex upper", HEAD "file a 1 1A2B3C4D\nend\n",
                  "CRC-32C '1A2B3C4D' is not 8 lower-case hex digits") ||
           refuse("hex short", HEAD "file a 1 1a2b3c4\nend\n", "CRC-32C '1a2b3c4'") ||
           refuse("hex long", HEAD "file a 1 1a2b3c4d0\nend\n", "CRC-32C") ||
           refuse("extra field", HEAD "file a 1 1a2b3c4d x\nend\n", "more than NAME BYTES") ||
           refuse("trailing space", HEAD "file a 1 1a2b3c4d \nend\n", "more than NAME BYTES") ||
           refuse("duplicate file", HEAD "file a 1 00000000\nfile a 2 00000000\nend\n",
                  ":4: file 'a' named twice") ||
           refuse("duplicate high bytes",
                  HEAD "file d\x8d 1 00000000\nfile d\x8d 2 00000000\nend\n",
                  ":4: file 'd?' named twice") ||
           refuse("path name", HEAD "file ../a 1 00000000\nend\n",
                  ":3: '../a': a file name with '/'") ||
           refuse("manifest name", HEAD "file manifest 1 00000000\nend\n", "reserved file name") ||
           refuse("dot name", HEAD "file .. 1 00000000\nend\n", "reserved") ||
           refuse("long name",
                  HEAD "file "
                       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                       " 1 00000000\nend\n",
                  "longer than 63") ||
           refuse("overlong value", value, ":3: key 'v': a value of 512 bytes or more") ||
           refuse("control value", HEAD "key v a\tb\nend\n", "control character") ||
           refuse("crlf", HEAD "key v b\r\nend\n", "control character") ||
           refuse("no value", HEAD "key lonely\nend\n", "key 'lonely' has no value") ||
           refuse("bad key", HEAD "key Bad v\nend\n", "'Bad': a key with a character") ||
           refuse("duplicate key", HEAD "key k 1\nkey k 2\nend\n", ":4: key 'k' given twice") ||
           refuse("key after files", HEAD "file a 1 00000000\nkey k v\nend\n",
                  ":4: a key line after the file lines") ||
           refuse("unknown line", HEAD "tensor x\nend\n", ":3: 'tensor' is not a manifest line") ||
           refuse("after end", HEAD "end\nfile a 1 00000000\n", "bytes after the \"end\" line") ||
           refuse("nul", HEAD "key v a\0b\nend\n" /* cut at the NUL by strlen */, "cut short") ||
           expect_refused("embedded nul", HEAD "key v a\0b\nend\n",
                          sizeof(HEAD "key v a\0b\nend\n") - 1, "control character");
}

/* ---------------------------------------------------------------- verify */

/* verify accepts the checkpoint, then catches each fault, naming the file. */
static int case_verify(void)
{
    char dir[256], err[1024] = "", path[512];
    ember_ckpt_manifest_t m;

    if (make_root() || make_checkpoint(5, dir, sizeof(dir)))
        return 1;
    CHECK(ember_ckpt_manifest_read(dir, &m, err, sizeof(err)) == EMBER_OK, "read: %s", err);
    CHECK(ember_ckpt_verify(dir, &m, err, sizeof(err)) == EMBER_OK, "verify: %s", err);
    snprintf(path, sizeof(path), "%s/dense.bin", dir);
    CHECK(write_file(path, "dense statX", 11) == 0, "change a byte");
    CHECK(ember_ckpt_verify(dir, &m, err, sizeof(err)) == EMBER_ERR_FORMAT, "changed byte");
    CHECK(strstr(err, "dense.bin: CRC-32C") && strstr(err, "the manifest says"), "'%s'", err);
    fprintf(stderr, "changed: %s\n", err);
    CHECK(write_file(path, "dense stat", 10) == 0, "truncate");
    CHECK(ember_ckpt_verify(dir, &m, err, sizeof(err)) == EMBER_ERR_FORMAT, "truncated");
    CHECK(strstr(err, "dense.bin: 10 bytes, the manifest says 11"), "'%s'", err);
    fprintf(stderr, "truncated: %s\n", err);
    CHECK(unlink(path) == 0, "unlink");
    CHECK(ember_ckpt_verify(dir, &m, err, sizeof(err)) == EMBER_ERR_NOT_FOUND, "missing");
    CHECK(strstr(err, "dense.bin: missing"), "'%s'", err);
    fprintf(stderr, "missing: %s\n", err);
    ember_ckpt_manifest_free(&m);
    remove_tree(root);
    return 0;
}

/* ---------------------------------------------------------------- find */

/* Run find on @path with stderr caught into @log. */
static ember_status_t find_logged(const char *path, char *dir, size_t dir_length,
                                  ember_ckpt_manifest_t *m, char *err, size_t err_length, char *log,
                                  size_t log_length)
{
    char log_path[128];
    snprintf(log_path, sizeof(log_path), "%s.log", root);
    fflush(stderr);
    int saved = dup(2), fd = open(log_path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    dup2(fd, 2);
    ember_status_t s = ember_ckpt_find(path, dir, dir_length, m, err, err_length);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, log, log_length - 1, 0);
    log[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(log_path);
    fputs(log, stderr);
    return s;
}

static int case_find(void)
{
    char dir[256], torn[256], bad[256], err[1024] = "", log[8192], path[512];
    ember_ckpt_manifest_t m;

    if (make_root())
        return 1;
    CHECK(find_logged(root, dir, sizeof(dir), &m, err, sizeof(err), log, sizeof(log)) ==
                          EMBER_ERR_NOT_FOUND &&
                  strstr(err, "no step-N directory"),
          "empty root: '%s'", err);
    if (make_checkpoint(100, dir, sizeof(dir)) || make_checkpoint(200, dir, sizeof(dir)) ||
        make_checkpoint(300, bad, sizeof(bad)))
        return 1;
    snprintf(path, sizeof(path), "%s/ps0.safetensors", bad);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "\xff", 1, 100) == 1 && close(fd) == 0, "corrupt step 300");
    CHECK(ember_ckpt_step_dir(root, 400, torn, sizeof(torn), err, sizeof(err)) == EMBER_OK, "%s",
          err);
    snprintf(path, sizeof(path), "%s/ps0.safetensors", torn);
    CHECK(write_file(path, "half", 4) == 0, "torn file");
    mkdir(strcat(strcpy(path, root), "/step-5"), 0755); /* not ours: ignored */

    CHECK(find_logged(root, dir, sizeof(dir), &m, err, sizeof(err), log, sizeof(log)) == EMBER_OK,
          "find: %s", err);
    CHECK(m.step == 200 && strstr(dir, "/step-000000000200"), "took %s", dir);
    CHECK(strcmp(ember_ckpt_manifest_get(&m, "model"), "dlrm with spaces") == 0, "its manifest");
    CHECK(strstr(log, "skipping") && strstr(log, "step-000000000400: ") &&
                  strstr(log, "manifest: missing"),
          "the torn one not reported");
    CHECK(strstr(log, "step-000000000300: ") && strstr(log, "ps0.safetensors: CRC-32C"),
          "the corrupt one not reported");
    CHECK(strstr(log, "not the newest: 2 newer skipped"), "not said to be older");
    ember_ckpt_manifest_free(&m);

    /* A step directory named itself: it or nothing. */
    CHECK(find_logged(bad, dir, sizeof(dir), &m, err, sizeof(err), log, sizeof(log)) ==
                          EMBER_ERR_FORMAT &&
                  strstr(err, "CRC-32C"),
          "a named corrupt checkpoint taken: '%s'", err);
    snprintf(path, sizeof(path), "%s/step-000000000100/", root);
    CHECK(find_logged(path, dir, sizeof(dir), &m, err, sizeof(err), log, sizeof(log)) == EMBER_OK &&
                  m.step == 100,
          "named: %s", err);
    ember_ckpt_manifest_free(&m);

    /* None complete: every one tried is listed. */
    snprintf(path, sizeof(path),
             "rm -f %s/step-000000000100/manifest %s/step-000000000200/manifest", root, root);
    CHECK(system(path) == 0, "remove manifests");
    CHECK(find_logged(root, dir, sizeof(dir), &m, err, sizeof(err), log, sizeof(log)) ==
                  EMBER_ERR_NOT_FOUND,
          "found one");
    CHECK(strstr(err, "no complete checkpoint in") && strstr(err, "step-000000000400:") &&
                  strstr(err, "step-000000000100:"),
          "'%s'", err);
    remove_tree(root);
    return 0;
}

/* ---------------------------------------------------------------- begin, exists, prune */

/* A job's start: parents made, torn step-N after its start removed (no
 * manifest; files not matching it), a complete one refused, those before
 * it untouched. */
static int case_clear_after(void)
{
    char dir[256], err[1024] = "", path[512];

    if (make_root())
        return 1;
    snprintf(path, sizeof(path), "%s/a/b/c", root);
    CHECK(ember_ckpt_clear_after(path, 0, err, sizeof(err)) == EMBER_OK, "parents: %s", err);
    CHECK(access(path, F_OK) == 0, "no root made");
    CHECK(!ember_ckpt_exists(path), "exists in nothing");
    if (make_checkpoint(10, dir, sizeof(dir)) || make_checkpoint(20, dir, sizeof(dir)) ||
        make_checkpoint(30, dir, sizeof(dir)))
        return 1;
    CHECK(ember_ckpt_exists(root) && ember_ckpt_exists(dir), "exists");
    snprintf(path, sizeof(path), "%s/ps0.safetensors", dir); /* step 30: a changed byte */
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "\xff", 1, 100) == 1 && close(fd) == 0, "corrupt step 30");
    CHECK(ember_ckpt_step_dir(root, 40, dir, sizeof(dir), err, sizeof(err)) == EMBER_OK, "%s", err);
    snprintf(path, sizeof(path), "%s/ps0.safetensors.tmp", dir); /* step 40: no manifest */
    CHECK(write_file(path, "torn", 4) == 0, "torn");
    CHECK(ember_ckpt_clear_after(root, 10, err, sizeof(err)) == EMBER_ERR_EXISTS, "20 kept");
    CHECK(strstr(err, "holds a complete checkpoint after step 20"), "'%s'", err);
    fprintf(stderr, "refused: %s\n", err);
    CHECK(ember_ckpt_clear_after(root, 20, err, sizeof(err)) == EMBER_OK, "from 20: %s", err);
    static const uint64_t gone[] = {30, 40}, kept[] = {10, 20};
    for (size_t i = 0; i < 2; i++) {
        CHECK(ember_ckpt_dir_name(root, gone[i], dir, sizeof(dir)) == EMBER_OK, "name");
        CHECK(access(dir, F_OK) != 0, "torn %s kept", dir);
        CHECK(ember_ckpt_dir_name(root, kept[i], dir, sizeof(dir)) == EMBER_OK, "name");
        CHECK(ember_ckpt_exists(dir), "%s removed", dir);
    }
    snprintf(path, sizeof(path), "%s/file", root);
    CHECK(write_file(path, "x", 1) == 0, "file");
    CHECK(ember_ckpt_clear_after(path, 0, err, sizeof(err)) == EMBER_ERR_IO &&
                  strstr(err, "not a directory"),
          "a root that is a file: '%s'", err);
    remove_tree(root);
    return 0;
}

/* Which steps: multiples of every, the steps asked (once each, stop kept),
 * at most EMBER_CKPT_ASKED_MAX pending; a taken one drops those before. */
static int case_schedule(void)
{
    ember_ckpt_schedule_t s;
    ember_ckpt_schedule_init(&s, 4);
    CHECK(!ember_ckpt_schedule_due(&s, 0) && ember_ckpt_schedule_due(&s, 8) &&
                  !ember_ckpt_schedule_due(&s, 6),
          "every 4");
    CHECK(ember_ckpt_schedule_ask(&s, 6, 0) == EMBER_OK &&
                  ember_ckpt_schedule_ask(&s, 6, 1) == EMBER_OK,
          "ask");
    CHECK(s.nasked == 1 && ember_ckpt_schedule_due(&s, 6) && ember_ckpt_schedule_stops(&s, 6) &&
                  !ember_ckpt_schedule_stops(&s, 8),
          "6 asked twice, the stop kept");
    for (uint64_t k = 100; s.nasked < EMBER_CKPT_ASKED_MAX; k++)
        CHECK(ember_ckpt_schedule_ask(&s, k, 0) == EMBER_OK, "ask %llu", (unsigned long long)k);
    CHECK(ember_ckpt_schedule_ask(&s, 7, 0) == EMBER_ERR_OUT_OF_RANGE, "more than the room");
    ember_ckpt_schedule_taken(&s, 6);
    CHECK(ember_ckpt_schedule_stops(&s, 6), "the taken step's stop forgotten");
    ember_ckpt_schedule_taken(&s, 100);
    CHECK(!ember_ckpt_schedule_due(&s, 6) && ember_ckpt_schedule_due(&s, 100) &&
                  ember_ckpt_schedule_ask(&s, 7, 0) == EMBER_OK,
          "steps before the taken one kept");
    ember_ckpt_schedule_init(&s, 0);
    CHECK(!ember_ckpt_schedule_due(&s, 5), "every 0 is no periodic checkpoint");
    return 0;
}

static int count_steps(const uint64_t *want, size_t n)
{
    char dir[256];
    for (size_t i = 0; i < n; i++) {
        CHECK(ember_ckpt_dir_name(root, want[i], dir, sizeof(dir)) == EMBER_OK, "name");
        CHECK(access(dir, F_OK) == 0, "%s removed", dir);
    }
    return 0;
}

static int case_prune(void)
{
    char dir[256], err[1024] = "";
    static const uint64_t steps[] = {10, 20, 30, 40, 50};

    if (make_root())
        return 1;
    CHECK(ember_ckpt_prune(root, 0, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM, "keep 0");
    for (size_t i = 0; i < 5; i++)
        if (make_checkpoint(steps[i], dir, sizeof(dir)))
            return 1;
    /* torn: 25 (older: goes), 60 (newer than the newest complete: stays) */
    CHECK(ember_ckpt_step_dir(root, 25, dir, sizeof(dir), err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_ckpt_step_dir(root, 60, dir, sizeof(dir), err, sizeof(err)) == EMBER_OK, "%s", err);
    CHECK(ember_ckpt_prune(root, 2, err, sizeof(err)) == EMBER_OK, "prune: %s", err);
    static const uint64_t kept[] = {40, 50, 60}, gone[] = {10, 20, 25, 30};
    if (count_steps(kept, 3))
        return 1;
    for (size_t i = 0; i < 4; i++) {
        CHECK(ember_ckpt_dir_name(root, gone[i], dir, sizeof(dir)) == EMBER_OK, "name");
        CHECK(access(dir, F_OK) != 0, "%s kept", dir);
    }
    CHECK(ember_ckpt_prune(root, 1, err, sizeof(err)) == EMBER_OK, "prune 1: %s", err);
    static const uint64_t kept1[] = {50, 60};
    if (count_steps(kept1, 2))
        return 1;
    CHECK(ember_ckpt_dir_name(root, 40, dir, sizeof(dir)) == EMBER_OK && access(dir, F_OK) != 0,
          "40 kept with keep 1");
    /* Nothing complete: nothing removed. */
    CHECK(ember_ckpt_dir_name(root, 50, dir, sizeof(dir)) == EMBER_OK, "name");
    strcat(dir, "/manifest");
    CHECK(unlink(dir) == 0, "unlink");
    CHECK(ember_ckpt_prune(root, 1, err, sizeof(err)) == EMBER_OK, "prune none: %s", err);
    if (count_steps(kept1, 2))
        return 1;
    remove_tree(root);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
            {"roundtrip", case_roundtrip},
            {"refused_calls", case_refused_calls},
            {"refused_text", case_refused_text},
            {"verify", case_verify},
            {"find", case_find},
            {"clear_after", case_clear_after},
            {"schedule", case_schedule},
            {"prune", case_prune},
    };
    return test_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
