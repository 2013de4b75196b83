/*
 * A program outside ember, built against an installed prefix (find_package
 * and pkg-config, shared and static; tests/install/test_install.sh): it
 * includes every installed header and checks what a few public functions
 * return against values worked out by hand.  Exit 0 with "consumer: ok", else
 * 1 naming each mismatch.
 *
 *   consumer [DEVICE]     DEVICE for the device ops: cpu (default) or cuda
 */
#include <ember/allreduce.h>
#include <ember/checkpoint.h>
#include <ember/config.h>
#include <ember/criteo.h>
#include <ember/data.h>
#include <ember/device.h>
#include <ember/dtype.h>
#include <ember/embedding_bag.h>
#include <ember/ember.h>
#include <ember/job.h>
#include <ember/log.h>
#include <ember/lookup.h>
#include <ember/metrics.h>
#include <ember/optimizer.h>
#include <ember/ps.h>
#include <ember/rng.h>
#include <ember/safetensors.h>
#include <ember/schema.h>
#include <ember/status.h>
#include <ember/table.h>
#include <ember/transport.h>
#include <ember/version.h>

#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            fprintf(stderr, "consumer: %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                             \
            fputc('\n', stderr);                                      \
            failures++;                                               \
        }                                                             \
    } while (0)

static void check_floats(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CHECK(got[i] == want[i], "%s[%zu] = %g, expected %g", what, i, got[i], want[i]);
}

static void check_version(void)
{
    char text[32];

    CHECK(strcmp(ember_version_string(), EMBER_VERSION_STRING) == 0,
          "library version %s, headers %s", ember_version_string(), EMBER_VERSION_STRING);
    snprintf(text, sizeof(text), "%d.%d.%d", EMBER_VERSION_MAJOR, EMBER_VERSION_MINOR,
             EMBER_VERSION_PATCH);
    CHECK(strcmp(text, EMBER_VERSION_STRING) == 0, "EMBER_VERSION_* %s, string %s", text,
          EMBER_VERSION_STRING);

    const uint32_t abi = ember_abi_version();
    CHECK(abi == EMBER_ABI_VERSION, "library ABI %u.%u, headers %u.%u",
          (unsigned)EMBER_ABI_MAJOR(abi), (unsigned)EMBER_ABI_MINOR(abi),
          (unsigned)EMBER_ABI_VERSION_MAJOR, (unsigned)EMBER_ABI_VERSION_MINOR);
    CHECK(EMBER_ABI_MAJOR(EMBER_ABI_VERSION) == EMBER_ABI_VERSION_MAJOR &&
                  EMBER_ABI_MINOR(EMBER_ABI_VERSION) == EMBER_ABI_VERSION_MINOR,
          "EMBER_ABI_VERSION does not unpack to its major and minor");
    CHECK(EMBER_ABI_COMPATIBLE(abi, EMBER_ABI_VERSION), "the library's ABI is not compatible");
    /* A newer minor serves older headers; an older minor, or another major, does not. */
    CHECK(EMBER_ABI_COMPATIBLE(EMBER_ABI_VERSION_MAKE(3, 5), EMBER_ABI_VERSION_MAKE(3, 2)) &&
                  !EMBER_ABI_COMPATIBLE(EMBER_ABI_VERSION_MAKE(3, 1),
                                        EMBER_ABI_VERSION_MAKE(3, 2)) &&
                  !EMBER_ABI_COMPATIBLE(EMBER_ABI_VERSION_MAKE(4, 0),
                                        EMBER_ABI_VERSION_MAKE(3, 2)) &&
                  !EMBER_ABI_COMPATIBLE(EMBER_ABI_VERSION_MAKE(2, 9), EMBER_ABI_VERSION_MAKE(3, 2)),
          "EMBER_ABI_COMPATIBLE's rule");
}

static void check_status_config(void)
{
    size_t size = 0;

    CHECK(strcmp(ember_status_string(EMBER_OK), "success") == 0, "EMBER_OK: %s",
          ember_status_string(EMBER_OK));
    CHECK(strcmp(ember_status_string(EMBER_ERR_NO_MEMORY), "out of memory") == 0,
          "EMBER_ERR_NO_MEMORY: %s", ember_status_string(EMBER_ERR_NO_MEMORY));
    CHECK(ember_config_parse_size("64K", &size) == EMBER_OK && size == 65536, "64K parsed as %zu",
          size);
    CHECK(ember_config_parse_size("1M", &size) == EMBER_OK && size == 1048576, "1M parsed as %zu",
          size);
    CHECK(ember_config_parse_size("lots", &size) == EMBER_ERR_INVALID_PARAM,
          "\"lots\" parsed as a size");
    CHECK(ember_config_init() == EMBER_OK, "ember_config_init failed");
    CHECK(ember_log_level() >= EMBER_LOG_FATAL && ember_log_level() <= EMBER_LOG_TRACE,
          "log level %d", (int)ember_log_level());

    ember_tp_params_t params;
    ember_tp_params_init(&params);
    CHECK(params.rank == -1 && params.world_size == -1 && !params.name,
          "ember_tp_params_init: rank %d world %d", params.rank, params.world_size);
}

/* The library API's plain calls: the ABI, defaults, checks, the generator. */
static void check_api(void)
{
    CHECK(ember_abi_version() == EMBER_ABI_VERSION, "library ABI %u, headers %u",
          ember_abi_version(), EMBER_ABI_VERSION);
    ember_job_params_t params;
    ember_job_params_init(&params);
    CHECK(params.abi == EMBER_ABI_VERSION && params.rank == -1 && params.trainers == 0,
          "ember_job_params_init: abi %u rank %d trainers %d", params.abi, params.rank,
          params.trainers);
    ember_table_config_t table;
    ember_table_config_init(&table);
    CHECK(table.dtype == EMBER_DTYPE_F32 && table.optimizer.kind == EMBER_OPT_SGD &&
                  table.consistency == EMBER_SYNC && !table.name,
          "ember_table_config_init");
    ember_opt_config_t opt;
    char err[128];
    ember_opt_config_default(EMBER_OPT_ADAM, -1.0f, &opt);
    CHECK(ember_opt_config_check(&opt, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM &&
                  strstr(err, "lr"),
          "a negative lr: '%s'", err);
    CHECK(strcmp(ember_dtype_name(EMBER_DTYPE_F16), "F16") == 0 &&
                  ember_dtype_size(EMBER_DTYPE_I64) == 8,
          "dtype names and sizes");
    /* splitmix64's finaliser of 1, as Python computes it */
    CHECK(ember_mix64(1) == 0x5692161d100b05e5ull, "ember_mix64(1) = %llx",
          (unsigned long long)ember_mix64(1));
    const float scores[4] = {0.1f, 0.9f, 0.8f, 0.3f}, labels[4] = {0, 1, 0, 1};
    double auc = 0;
    CHECK(ember_roc_auc(scores, labels, 4, &auc) == EMBER_OK && auc == 0.75, "AUC %g", auc);
}

/* Four rows of two; bags {0, 2}, {} and {1, 3, 2}. */
static const float table[4 * 2] = {1, 2, 3, -1, 0.5f, 4, -2, 0};
static const int64_t indices[] = {0, 2, 1, 3, 2};
static const int64_t offsets[] = {0, 2, 2};

static void check_bags(void)
{
    const ember_bag_batch_t batch = {indices, 5, offsets, 3, NULL, 0};
    ember_bag_opts_t opts = {EMBER_BAG_SUM, -1};
    float out[3 * 2];
    int64_t argmax[3 * 2];
    ember_bag_mode_t mode;
    char msg[128];

    CHECK(ember_bag_validate(&batch, &opts, 4, msg, sizeof(msg)) == EMBER_OK,
          "valid batch refused: %s", msg);
    const ember_bag_table_t rows = {table, EMBER_DTYPE_F32, 4, 2};
    CHECK(ember_bag_forward(&rows, &batch, &opts, out, NULL) == EMBER_OK, "sum forward failed");
    const float want_sum[] = {1.5f, 6, 0, 0, 1.5f, 3};
    check_floats("sum", out, want_sum, 6);

    CHECK(ember_bag_mode_parse("max", &mode) == EMBER_OK && mode == EMBER_BAG_MAX,
          "\"max\" not parsed as EMBER_BAG_MAX");
    opts.mode = mode;
    CHECK(ember_bag_forward(&rows, &batch, &opts, out, argmax) == EMBER_OK, "max forward failed");
    const float want_max[] = {1, 4, 0, 0, 3, 4};
    const int64_t want_argmax[] = {0, 2, -1, -1, 1, 2};
    check_floats("max", out, want_max, 6);
    for (int i = 0; i < 6; i++)
        CHECK(argmax[i] == want_argmax[i], "argmax[%d] = %lld, expected %lld", i,
              (long long)argmax[i], (long long)want_argmax[i]);
    CHECK(strcmp(ember_bag_mode_name(EMBER_BAG_MEAN), "mean") == 0, "mean's name: %s",
          ember_bag_mode_name(EMBER_BAG_MEAN));
    const ember_bag_table_t int_rows = {table, EMBER_DTYPE_I64, 4, 2};
    CHECK(ember_bag_forward(&int_rows, &batch, &opts, out, argmax) == EMBER_ERR_INVALID_PARAM,
          "an int64 table was pooled");

    const int64_t bad[] = {0, 7, 1, 3, 2};
    const ember_bag_batch_t bad_batch = {bad, 5, offsets, 3, NULL, 0};
    CHECK(ember_bag_validate(&bad_batch, &opts, 4, msg, sizeof(msg)) == EMBER_ERR_OUT_OF_RANGE &&
                  strstr(msg, "index 7"),
          "index 7 of 4 rows: \"%s\"", msg);
}

/* y = x W^T + b, x [2, 3], W [2, 3], b [2], through a device's ops. */
static void check_device(const char *kind)
{
    const float x[2 * 3] = {1, 2, 3, 4, 5, 6};
    const float w[2 * 3] = {1, 0, -1, 0.5f, 0.5f, 0.5f};
    const float b[2] = {0.25f, -1};
    const float want[2 * 2] = {-1.75f, 2, -1.75f, 6.5f};
    float y[2 * 2] = {0};
    ember_device_t *dev;
    void *dx = NULL, *dw = NULL, *db = NULL, *dy = NULL;

    if (ember_device_open(kind, 0, &dev) != EMBER_OK) {
        CHECK(0, "ember_device_open(\"%s\") failed", kind);
        return;
    }
    const ember_device_ops_t *ops = ember_device_ops(dev);
    CHECK(strcmp(ember_device_name(dev), kind) == 0, "device name %s", ember_device_name(dev));
    CHECK(ember_device_mem_type(dev) ==
                  (strcmp(kind, "cpu") == 0 ? EMBER_MEM_HOST : EMBER_MEM_CUDA),
          "device memory type %d", (int)ember_device_mem_type(dev));
    CHECK(ops->mem_alloc(dev, sizeof(x), &dx) == EMBER_OK &&
                  ops->mem_alloc(dev, sizeof(w), &dw) == EMBER_OK &&
                  ops->mem_alloc(dev, sizeof(b), &db) == EMBER_OK &&
                  ops->mem_alloc(dev, sizeof(y), &dy) == EMBER_OK,
          "mem_alloc failed");
    if (dx && dw && db && dy) {
        CHECK(ops->mem_copy(dev, dx, x, sizeof(x), EMBER_COPY_HOST_TO_DEVICE) == EMBER_OK &&
                      ops->mem_copy(dev, dw, w, sizeof(w), EMBER_COPY_HOST_TO_DEVICE) == EMBER_OK &&
                      ops->mem_copy(dev, db, b, sizeof(b), EMBER_COPY_HOST_TO_DEVICE) == EMBER_OK,
              "mem_copy to the device failed");
        CHECK(ops->linear_forward(dev, dx, 2, 3, 2, dw, db, dy) == EMBER_OK,
              "linear_forward failed");
        CHECK(ops->mem_copy(dev, y, dy, sizeof(y), EMBER_COPY_DEVICE_TO_HOST) == EMBER_OK,
              "mem_copy from the device failed");
        check_floats("linear", y, want, 4);
    }
    ops->mem_free(dev, dx);
    ops->mem_free(dev, dw);
    ops->mem_free(dev, db);
    ops->mem_free(dev, dy);
    ember_device_close(dev);
}

/* The schema's preset and text, and a data source refused: <ember/schema.h>
 * and <ember/data.h> linked from the installed library. */
static void check_schema(void)
{
    ember_schema_t *schema = NULL;
    ember_data_t *data = NULL;
    char err[256] = "", text[4096];
    CHECK(ember_schema_criteo(NULL, &schema, err, sizeof(err)) == EMBER_OK &&
                  ember_schema_is_criteo(schema) && ember_schema_num_sparse(schema) == 26,
          "Criteo's preset: %s", err);
    CHECK(schema && ember_schema_text(schema, text, sizeof(text)) < sizeof(text) &&
                  strstr(text, "sparse C26 hex rows=100000 table=t_cat_25"),
          "the preset's text: %s", text);
    ember_data_config_t config = {.source = "nope:x", .schema = schema, .trainers = 1, .batch = 1};
    CHECK(ember_data_open(&config, &data, err, sizeof(err)) == EMBER_ERR_INVALID_PARAM && !data,
          "a source of no kind opened: %s", err);
    ember_schema_free(schema);
}

int main(int argc, char **argv)
{
    const char *kind = argc > 1 ? argv[1] : "cpu";

    check_version();
    check_status_config();
    check_api();
    check_bags();
    check_schema();
    check_device(kind);
    if (failures) {
        fprintf(stderr, "consumer: %d check(s) failed\n", failures);
        return 1;
    }
    printf("consumer: ok (ember %s, ABI %u.%u, device %s, cuda backend %s)\n",
           ember_version_string(), (unsigned)EMBER_ABI_MAJOR(ember_abi_version()),
           (unsigned)EMBER_ABI_MINOR(ember_abi_version()), kind,
           ember_device_have_cuda() ? "built" : "not built");
    return 0;
}
