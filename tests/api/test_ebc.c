/*
 * tests/api/test_ebc: a trainer's lookups and pushes (include/ember/lookup.h)
 * and the job's checkpoints (include/ember/checkpoint.h) over real PS
 * processes, forked by mp_spawn, against a reference every trainer computes
 * on its own with the engine's host ops: ember_bag_forward / _backward on
 * full copies of the tables, the trainers' row gradients summed in trainer
 * order and the table's sparse optimizer stepped on them
 * (ember_opt_step_sparse), as a sync PS does.
 *
 * The features: user_hist and item_hist share table A (sum), category is
 * table B's (mean, padding index 7), brand table C's (max, on a grid of
 * quarters so maxima tie); multi-hot bags of 0 to 4 ids, an empty bag, a
 * repeated id, padding now and then.  Usage: test_ebc CASE
 *
 *   pooling_pP       one trainer, P PS: every feature's pooled output (the
 *                    KJT by lengths and by offsets, into the caller's buffer
 *                    and the lookup's own) against ember_bag_forward; each
 *                    PS looked each table up once a step (A's two features
 *                    in one lookup) and took one gradient of each
 *   weighted         per-value weights on sum features, against the same
 *   train_OPT_pP_sK  two trainers, P PS, sync, staleness K: each step's
 *                    pooled outputs (each at the version the staleness
 *                    says, which ember_lookup_version must give), the
 *                    evaluation after the last step, and every row at the
 *                    end, against the reference of OPT (sgd, adagrad, adam)
 *   tablewise        C table-wise on ps1, A and B row-wise over both
 *   async            two trainers, async SGD: every gradient applied once
 *   visible          two trainers, sync SGD, one-way pushes: every table
 *                    read before a trainer's first push is the initial
 *                    rows; after each step's flush on both and a barrier,
 *                    a read sees that step applied (table.h's promise)
 *   bad_kjt          malformed batches refused naming the feature, the bag
 *                    and the table (an id outside it, a negative length,
 *                    decreasing offsets, weights with mean pooling, the
 *                    wrong feature count, values not covered); bad feature
 *                    lists refused by ember_ebc_create; a lookup's life out
 *                    of order refused; the ebc still works after each
 *   push_refused     a one-way push the PS refuses (a table destroyed
 *                    under it) fails ember_ebc_flush with its reason
 *   ckpt_resume      two trainers on 2 PS train 3 steps with checkpoints
 *                    after 2 and 3 (the trainers' own tensors in them);
 *                    then on 1 PS the tables are created empty, restored
 *                    from the newest, the trainers' tensors read back, and
 *                    3 more steps end where 6 uninterrupted reference steps
 *                    do; each trainer's file also opened from the step
 *                    directory alone (ember_checkpoint_open_trainer_at:
 *                    another step, a torn and a corrupt copy refused); a
 *                    fresh run on the same root is refused
 *   ckpt_sigusr1     two trainers, 6 steps, checkpoints on request only:
 *                    trainer 1 gets SIGUSR1 before step 1; trainer 0 names
 *                    a step before the last and every rank takes it; the
 *                    job goes on to the end, whose checkpoint is there too
 *   ckpt_sigterm     the same with SIGTERM: both trainers stop after that
 *                    step, at its checkpoint, and the coordinator knows it
 *
 * With EMBER_API_TEST_DEVICE=cuda (CTest's *.cuda and *.staged variants,
 * label cuda; skipped without a GPU) the trainers' ebcs live on the GPU:
 * the pooled outputs and gradients in device memory, replies landing there
 * by GPUDirect or staged through pinned host memory (EMBER_GPUDIRECT).
 */
#include "engine/ops/optimizer.h" /* the reference: ember_opt_step_sparse */
#include "tests/api/api_test.h"

#include <ember/allreduce.h>
#include <ember/checkpoint.h>
#include <ember/device.h>
#include <ember/embedding_bag.h>
#include <ember/lookup.h>
#include <ember/rng.h>
#include <ember/table.h>

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>

#define LR 0.05f

enum {
    NT = 3,     /* tables */
    NF = 4,     /* features */
    B = 5,      /* bags a feature */
    MAXLEN = 4, /* ids a bag (bag 0 two more) */
    MAXV = NF * B * (MAXLEN + 2),
    MAXSTEPS = 8,
    OUT_MAX = NF * B * 8
};

typedef struct {
    const char *name;
    int64_t rows;
    uint32_t dim;
} tspec_t;

static const tspec_t tspecs[NT] = {{"A", 53, 4}, {"B", 31, 3}, {"C", 17, 5}};

typedef struct {
    const char *name;
    int table;
    ember_bag_mode_t pooling;
    int64_t padding;
} fspec_t;

static const fspec_t fmixed[NF] = {{"user_hist", 0, EMBER_BAG_SUM, -1},
                                   {"item_hist", 0, EMBER_BAG_SUM, -1},
                                   {"category", 1, EMBER_BAG_MEAN, 7},
                                   {"brand", 2, EMBER_BAG_MAX, -1}};
/* With per-value weights every feature pools by sum. */
static const fspec_t fweighted[NF] = {{"user_hist", 0, EMBER_BAG_SUM, -1},
                                      {"item_hist", 0, EMBER_BAG_SUM, -1},
                                      {"category", 1, EMBER_BAG_SUM, 7},
                                      {"brand", 2, EMBER_BAG_SUM, -1}};

/* What a case runs. */
typedef struct {
    int trainers, num_ps;
    ember_opt_kind_t opt;
    uint32_t staleness;
    int weighted, tablewise, async;
    int steps;
} setup_t;

/* ---- where the outputs live ------------------------------------------------------ */

/* The ebc's device (NULL: the host) and its output and gradient buffers. */
static ember_device_t *g_device;
static const ember_device_ops_t *g_ops;
static float *g_out, *g_grad;

/* EMBER_API_TEST_DEVICE's device, opened on a trainer. */
static void device_setup(ember_job_t *job)
{
    const char *kind = getenv("EMBER_API_TEST_DEVICE");
    if (!kind || !*kind)
        return;
    MP_CHECK(ember_device_open(kind, ember_job_local_rank(job), &g_device) == EMBER_OK,
             "opening the %s device", kind);
    g_ops = ember_device_ops(g_device);
    MP_CHECK(g_ops->mem_alloc(g_device, OUT_MAX * sizeof(float), (void **)&g_out) == EMBER_OK &&
                     g_ops->mem_alloc(g_device, OUT_MAX * sizeof(float), (void **)&g_grad) ==
                             EMBER_OK,
             "device buffers");
}

static void device_close(void)
{
    if (!g_device)
        return;
    g_ops->mem_free(g_device, g_out);
    g_ops->mem_free(g_device, g_grad);
    ember_device_close(g_device);
    g_device = NULL;
}

/* @n floats of an ebc's output (device memory) into @host. */
static void to_host(const float *pooled, float *host, size_t n)
{
    if (!g_device) {
        if (pooled != host)
            memcpy(host, pooled, n * sizeof(float));
        return;
    }
    MP_CHECK(g_ops->mem_copy(g_device, host, pooled, n * sizeof(float),
                             EMBER_COPY_DEVICE_TO_HOST) == EMBER_OK,
             "copy to the host");
}

/* A gradient as the ebc takes it: @host itself, or its copy on the device. */
static const float *to_device(const float *host, size_t n)
{
    if (!g_device)
        return host;
    MP_CHECK(g_ops->mem_copy(g_device, g_grad, host, n * sizeof(float),
                             EMBER_COPY_HOST_TO_DEVICE) == EMBER_OK,
             "copy to the device");
    return g_grad;
}

/* ---- batches ------------------------------------------------------------------ */

/* One trainer's KJT of a step: lengths, and the same as offsets. */
typedef struct {
    int32_t lengths[NF * B];
    int64_t offsets[NF * B + 1];
    int64_t values[MAXV];
    float weights[MAXV];
    size_t nvalues;
} kjt_data_t;

static void make_kjt(const fspec_t *features, uint32_t t, uint64_t step, kjt_data_t *k)
{
    ember_rng_t rng;
    ember_rng_seed(&rng, 4242 + 1000 * t + step, 17);
    k->nvalues = 0;
    for (int f = 0; f < NF; f++) {
        const fspec_t *fs = &features[f];
        const int64_t rows = tspecs[fs->table].rows;
        for (int b = 0; b < B; b++) {
            const size_t at = k->nvalues;
            k->offsets[f * B + b] = (int64_t)at;
            int len = b == 1 ? 0 : (int)ember_rng_int(&rng, 0, MAXLEN);
            for (int i = 0; i < len; i++) {
                int64_t id = ember_rng_int(&rng, 0, rows - 1);
                if (fs->padding >= 0 && ember_rng_int(&rng, 0, 3) == 0)
                    id = fs->padding;
                k->values[k->nvalues++] = id;
            }
            if (b == 0) { /* a repeated id */
                k->values[k->nvalues] = k->values[k->nvalues + 1] =
                        ember_rng_int(&rng, 0, rows - 1);
                k->nvalues += 2;
            }
            k->lengths[f * B + b] = (int32_t)(k->nvalues - at);
        }
    }
    k->offsets[NF * B] = (int64_t)k->nvalues;
    for (size_t i = 0; i < k->nvalues; i++)
        k->weights[i] = (float)(0.25 + ember_rng_uniform(&rng));
}

static ember_kjt_t kjt_view(const kjt_data_t *k, int by_offsets, int weighted)
{
    return (ember_kjt_t){.num_features = NF,
                         .batch_size = B,
                         .values = k->values,
                         .lengths = by_offsets ? NULL : k->lengths,
                         .offsets = by_offsets ? k->offsets : NULL,
                         .weights = weighted ? k->weights : NULL,
                         .num_values = k->nvalues};
}

/* Trainer @t's gradient of the pooled outputs at @step. */
static void make_grad(uint32_t t, uint64_t step, float *g, size_t n)
{
    ember_rng_t rng;
    ember_rng_seed(&rng, 777 + 1000 * t + step, 3);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)(2.0 * ember_rng_uniform(&rng) - 1.0);
}

/* ---- the reference ------------------------------------------------------------ */

/* Every table after each step: hist[s][k], [rows][dim]. */
typedef struct {
    const setup_t *setup;
    const fspec_t *features;
    float *hist[MAXSTEPS + 1][NT];
    size_t out_size;
} ref_t;

static float *initial_table(int k)
{
    const tspec_t *s = &tspecs[k];
    const size_t cells = (size_t)s->rows * s->dim;
    float *w = malloc(cells * sizeof(float));
    ember_rng_t rng;
    MP_CHECK(w, "out of memory");
    ember_rng_seed(&rng, 91, (uint64_t)k);
    for (size_t i = 0; i < cells; i++) {
        float v = (float)(2.0 * ember_rng_uniform(&rng) - 1.0);
        w[i] = k == 2 ? roundf(v * 2.0f) / 4.0f : v; /* C: ties */
    }
    return w;
}

/* The version a lookup of @step sees: staleness 0 the steps before it,
 * staleness 1 one fewer (its lookup leaves before this trainer's push of
 * the step before, and no step goes ahead without it). */
static int version_of(const setup_t *setup, int step)
{
    return setup->staleness == 0 || step == 0 ? step : step - 1;
}

/* Table @k's bags of @kjt (its features'), as one ember_bag_batch_t. */
typedef struct {
    int64_t indices[MAXV], offsets[NF * B];
    float weights[MAXV];
    size_t n, bags;
} table_batch_t;

static void table_batch(const ref_t *ref, const kjt_data_t *kd, int k, table_batch_t *tb)
{
    tb->n = tb->bags = 0;
    for (int f = 0; f < NF; f++) {
        if (ref->features[f].table != k)
            continue;
        for (int b = 0; b < B; b++) {
            tb->offsets[tb->bags++] = (int64_t)tb->n;
            for (int64_t i = kd->offsets[f * B + b]; i < kd->offsets[f * B + b + 1]; i++) {
                tb->weights[tb->n] = kd->weights[i];
                tb->indices[tb->n++] = kd->values[i];
            }
        }
    }
}

static ember_bag_batch_t bag_batch(const ref_t *ref, const table_batch_t *tb)
{
    return (ember_bag_batch_t){.indices = tb->indices,
                               .n = tb->n,
                               .offsets = tb->offsets,
                               .bags = tb->bags,
                               .weights = ref->setup->weighted ? tb->weights : NULL,
                               .n_weights = ref->setup->weighted ? tb->n : 0};
}

static const fspec_t *table_feature(const ref_t *ref, int k)
{
    for (int f = 0; f < NF; f++)
        if (ref->features[f].table == k)
            return &ref->features[f];
    return NULL;
}

/* Table @k's pooled block of @kd on @w, and max mode's argmax. */
static void ref_forward(const ref_t *ref, const float *w, int k, const kjt_data_t *kd, float *out,
                        int64_t *argmax)
{
    table_batch_t tb;
    table_batch(ref, kd, k, &tb);
    const fspec_t *f = table_feature(ref, k);
    const ember_bag_table_t rows = {
            .data = w, .dtype = EMBER_DTYPE_F32, .rows = tspecs[k].rows, .dim = tspecs[k].dim};
    const ember_bag_batch_t batch = bag_batch(ref, &tb);
    const ember_bag_opts_t opts = {.mode = f->pooling, .padding_idx = f->padding};
    MP_CHECK(ember_bag_forward(&rows, &batch, &opts, out, argmax) == EMBER_OK, "reference forward");
}

/* Where table @k's block starts in the output (its features', in order). */
static size_t block_at(const ref_t *ref, int k)
{
    size_t at = 0;
    for (int f = 0; f < NF && ref->features[f].table != k; f++)
        at += (size_t)B * tspecs[ref->features[f].table].dim;
    return at;
}

/* Trainer @t's row gradients of table @k at @step added into @acc, the
 * rows it touched marked. */
static void ref_backward(const ref_t *ref, int k, uint32_t t, int step, float *acc,
                         uint8_t *touched)
{
    const tspec_t *s = &tspecs[k];
    kjt_data_t kd;
    table_batch_t tb;
    float g[OUT_MAX], pooled[OUT_MAX], grad[MAXV * 8];
    int64_t argmax[OUT_MAX], rows_out[MAXV];
    make_kjt(ref->features, t, (uint64_t)step, &kd);
    make_grad(t, (uint64_t)step, g, ref->out_size);
    table_batch(ref, &kd, k, &tb);
    const float *w = ref->hist[version_of(ref->setup, step)][k];
    ref_forward(ref, w, k, &kd, pooled, argmax);
    const fspec_t *f = table_feature(ref, k);
    const ember_bag_table_t rows = {
            .data = w, .dtype = EMBER_DTYPE_F32, .rows = s->rows, .dim = s->dim};
    const ember_bag_batch_t batch = bag_batch(ref, &tb);
    const ember_bag_opts_t opts = {.mode = f->pooling, .padding_idx = f->padding};
    ember_bag_grad_t out = {.rows = rows_out, .grad = grad};
    MP_CHECK(ember_bag_backward(&rows, &batch, &opts, g + block_at(ref, k),
                                f->pooling == EMBER_BAG_MAX ? argmax : NULL, &out) == EMBER_OK,
             "reference backward");
    for (size_t u = 0; u < out.nrows; u++) {
        touched[rows_out[u]] = 1;
        for (uint32_t d = 0; d < s->dim; d++)
            acc[(size_t)rows_out[u] * s->dim + d] += grad[u * s->dim + d];
    }
}

/* Table @k after step @step: its optimizer on every trainer's row
 * gradients, summed in trainer order, of the rows any touched. */
static void ref_step(ref_t *ref, int k, int step, ember_opt_t *opt)
{
    const tspec_t *s = &tspecs[k];
    const size_t cells = (size_t)s->rows * s->dim;
    float *acc = calloc(cells, sizeof(float)), *grads = malloc(cells * sizeof(float));
    uint8_t *touched = calloc((size_t)s->rows, 1);
    int64_t *rows = malloc((size_t)s->rows * sizeof(int64_t));
    float *w = malloc(cells * sizeof(float));
    MP_CHECK(acc && grads && touched && rows && w, "out of memory");
    for (uint32_t t = 0; t < (uint32_t)ref->setup->trainers; t++)
        ref_backward(ref, k, t, step, acc, touched);
    size_t n = 0;
    for (int64_t r = 0; r < s->rows; r++) {
        if (!touched[r])
            continue;
        memcpy(grads + n * s->dim, acc + (size_t)r * s->dim, s->dim * sizeof(float));
        rows[n++] = r;
    }
    memcpy(w, ref->hist[step][k], cells * sizeof(float));
    const ember_opt_values_t values = {
            .data = w, .dtype = EMBER_DTYPE_F32, .dim = s->dim, .placement = EMBER_OPT_IN_TABLE};
    MP_CHECK(ember_opt_step_sparse(opt, &values, rows, grads, n) == EMBER_OK, "reference step");
    ref->hist[step + 1][k] = w;
    free(acc);
    free(grads);
    free(touched);
    free(rows);
}

static void opt_config(const setup_t *setup, ember_opt_config_t *cfg)
{
    ember_opt_config_default(setup->opt, LR, cfg);
}

static void ref_build(ref_t *ref, const setup_t *setup, const fspec_t *features)
{
    memset(ref, 0, sizeof(*ref));
    ref->setup = setup;
    ref->features = features;
    for (int f = 0; f < NF; f++)
        ref->out_size += (size_t)B * tspecs[features[f].table].dim;
    for (int k = 0; k < NT; k++) {
        ember_opt_config_t cfg;
        ember_opt_t *opt;
        opt_config(setup, &cfg);
        MP_CHECK(ember_opt_create(&cfg, (size_t)tspecs[k].rows, tspecs[k].dim, EMBER_OPT_SPARSE,
                                  &opt) == EMBER_OK,
                 "reference optimizer");
        ref->hist[0][k] = initial_table(k);
        for (int step = 0; step < setup->steps; step++)
            ref_step(ref, k, step, opt);
        ember_opt_destroy(opt);
    }
}

static void ref_free(ref_t *ref)
{
    for (int s = 0; s <= MAXSTEPS; s++)
        for (int k = 0; k < NT; k++)
            free(ref->hist[s][k]);
}

/* ---- the job's side ---------------------------------------------------------------- */

/* Values as close as the shards' partial sums allow (max: exact). */
static void check_close(float got, float want, int exact, const char *what, int i)
{
    const float tol = exact ? 0.0f : 2e-5f * (1.0f + fabsf(want));
    MP_CHECK(fabsf(got - want) <= tol, "%s, value %d: %.9g, the reference %.9g", what, i,
             (double)got, (double)want);
}

/* Every feature's pooled output of @kd against the reference tables of
 * version @v. */
static void check_pooled(const ref_t *ref, const ember_ebc_t *ebc, int v, const kjt_data_t *kd,
                         const float *pooled, const char *what)
{
    for (int k = 0; k < NT; k++) {
        float want[OUT_MAX];
        int64_t argmax[OUT_MAX];
        ref_forward(ref, ref->hist[v][k], k, kd, want, argmax);
        const size_t at = block_at(ref, k), first = ember_ebc_output_offset(ebc, 0, B);
        int f0 = 0;
        while (ref->features[f0].table != k)
            f0++;
        MP_CHECK(ember_ebc_output_offset(ebc, (size_t)f0, B) - first == at, "table %d's block", k);
        size_t n = 0;
        for (int f = 0; f < NF; f++)
            n += ref->features[f].table == k ? (size_t)B * tspecs[k].dim : 0;
        char label[96];
        snprintf(label, sizeof(label), "%s: table %s", what, tspecs[k].name);
        for (size_t i = 0; i < n; i++)
            check_close(pooled[at + i], want[i], table_feature(ref, k)->pooling == EMBER_BAG_MAX,
                        label, (int)i);
    }
}

/* Every row of every table against the reference after @steps. */
static void check_tables(const ref_t *ref, ember_table_t *const *tables, int steps)
{
    for (int k = 0; k < NT; k++) {
        const tspec_t *s = &tspecs[k];
        float *rows = malloc((size_t)s->rows * s->dim * sizeof(float));
        MP_CHECK(rows, "out of memory");
        MP_CHECK(ember_table_read_rows(tables[k], 0, s->rows, rows) == EMBER_OK, "reading %s",
                 s->name);
        char label[64];
        snprintf(label, sizeof(label), "table %s after %d steps", s->name, steps);
        for (size_t i = 0; i < (size_t)s->rows * s->dim; i++)
            check_close(rows[i], ref->hist[steps][k][i], 0, label, (int)i);
        free(rows);
    }
}

static void create_tables(ember_job_t *job, const setup_t *setup, int init_rows,
                          ember_table_t **tables)
{
    for (int k = 0; k < NT; k++) {
        ember_table_config_t c;
        float *initial = init_rows ? initial_table(k) : NULL;
        ember_table_config_init(&c);
        c.name = tspecs[k].name;
        c.num_embeddings = tspecs[k].rows;
        c.embedding_dim = tspecs[k].dim;
        c.init = init_rows ? EMBER_TABLE_INIT_ROWS : EMBER_TABLE_INIT_ZEROS;
        c.initial_rows = initial;
        opt_config(setup, &c.optimizer);
        c.consistency = setup->async ? EMBER_ASYNC : EMBER_SYNC;
        c.staleness = setup->staleness;
        if (setup->tablewise && k == 2) {
            c.sharding = EMBER_SHARD_TABLE_WISE;
            c.first_ps = (uint32_t)setup->num_ps - 1;
        }
        ember_status_t status = ember_table_create(job, &c, &tables[k]);
        MP_CHECK(status == EMBER_OK, "creating %s: %s", c.name, ember_status_string(status));
        free(initial);
    }
}

static void open_tables(ember_job_t *job, ember_table_t **tables)
{
    for (int k = 0; k < NT; k++)
        MP_CHECK(ember_table_open(job, tspecs[k].name, &tables[k]) == EMBER_OK, "opening %s",
                 tspecs[k].name);
}

/* Trainer 0 (rank 0) creates the tables, the other trainers open them. */
static void trainer_tables(ember_job_t *job, int rank, const setup_t *setup, int init_rows,
                           ember_table_t **tables)
{
    if (rank == 0)
        create_tables(job, setup, init_rows, tables);
    else
        open_tables(job, tables);
}

static ember_ebc_t *make_ebc(ember_job_t *job, const fspec_t *fs, ember_table_t *const *tables,
                             uint64_t start_step, ember_device_t *device)
{
    ember_feature_t features[NF];
    for (int f = 0; f < NF; f++)
        features[f] = (ember_feature_t){.name = fs[f].name,
                                        .table = tables[fs[f].table],
                                        .pooling = fs[f].pooling,
                                        .padding_idx = fs[f].padding};
    ember_ebc_options_t options;
    ember_ebc_options_init(&options);
    options.start_step = start_step;
    options.device = device;
    ember_ebc_t *ebc = NULL;
    ember_status_t status = ember_ebc_create(job, features, NF, &options, &ebc);
    MP_CHECK(status == EMBER_OK, "ember_ebc_create: %s", ember_status_string(status));
    return ebc;
}

/* Steps [from, to) of trainer @t: lookups one step ahead, each output
 * checked, gradients pushed (the last one's awaited). */
static void train(const ref_t *ref, ember_ebc_t *ebc, uint32_t t, int from, int to)
{
    const setup_t *setup = ref->setup;
    kjt_data_t kd[2];
    ember_lookup_t *lookups[2] = {NULL, NULL};
    float out[OUT_MAX], g[OUT_MAX], host[OUT_MAX];
    float *into = g_device ? g_out : out;
    MP_CHECK(ember_ebc_output_size(ebc, B) == ref->out_size, "output size %zu, want %zu",
             ember_ebc_output_size(ebc, B), ref->out_size);
    for (int s = from; s < to; s++) {
        for (int a = s; a <= s + 1 && a < to; a++) {
            if (lookups[a % 2])
                continue;
            make_kjt(ref->features, t, (uint64_t)a, &kd[a % 2]);
            ember_kjt_t kjt = kjt_view(&kd[a % 2], a % 2, setup->weighted);
            MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &lookups[a % 2]) == EMBER_OK,
                     "trainer %u: lookup of step %d", t, a);
            MP_CHECK(ember_lookup_step(lookups[a % 2]) == (uint64_t)a, "step %llu, want %d",
                     (unsigned long long)ember_lookup_step(lookups[a % 2]), a);
        }
        ember_lookup_t *lk = lookups[s % 2];
        const float *pooled = NULL;
        const int own = s % 3 == 1; /* now and then the lookup's own buffer */
        MP_CHECK(ember_lookup_wait(lk, own ? NULL : into, &pooled) == EMBER_OK,
                 "trainer %u: wait of step %d", t, s);
        MP_CHECK(own ? pooled != into : pooled == into, "the pooled buffer");
        to_host(pooled, host, ref->out_size);
        char what[64];
        snprintf(what, sizeof(what), "trainer %u step %d", t, s);
        if (!setup->async) {
            check_pooled(ref, ebc, version_of(setup, s), &kd[s % 2], host, what);
            for (int f = 0; f < NF; f++)
                MP_CHECK(ember_lookup_version(lk, (size_t)f) == (uint64_t)version_of(setup, s),
                         "%s: feature %d's version %llu, want %d", what, f,
                         (unsigned long long)ember_lookup_version(lk, (size_t)f),
                         version_of(setup, s));
        }
        make_grad(t, (uint64_t)s, g, ref->out_size);
        MP_CHECK(ember_lookup_backward(lk, to_device(g, ref->out_size),
                                       s + 1 == to ? EMBER_BACKWARD_WAIT : 0) == EMBER_OK,
                 "trainer %u: backward of step %d", t, s);
        ember_lookup_release(lk);
        lookups[s % 2] = NULL;
    }
    MP_CHECK(ember_ebc_flush(ebc) == EMBER_OK, "flush");
    MP_CHECK(ember_ebc_staleness_seen(ebc) == (setup->staleness && !setup->async ? 1u : 0u),
             "staleness seen %llu", (unsigned long long)ember_ebc_staleness_seen(ebc));
}

/* An evaluation after @steps: the tables as they are. */
static void evaluate(const ref_t *ref, ember_ebc_t *ebc, uint32_t t, int steps)
{
    kjt_data_t kd;
    ember_lookup_t *lk;
    float out[OUT_MAX], host[OUT_MAX];
    float *into = g_device ? g_out : out;
    make_kjt(ref->features, t + 50, 99, &kd);
    ember_kjt_t kjt = kjt_view(&kd, 0, ref->setup->weighted);
    MP_CHECK(ember_ebc_lookup(ebc, &kjt, EMBER_LOOKUP_FORWARD_ONLY, &lk) == EMBER_OK, "evaluation");
    MP_CHECK(ember_lookup_forward_only(lk) && ember_lookup_step(lk) == (uint64_t)steps,
             "an evaluation after %d steps", steps);
    MP_CHECK(ember_lookup_wait(lk, into, NULL) == EMBER_OK, "evaluation's wait");
    MP_CHECK(ember_lookup_backward(lk, into, 0) == EMBER_ERR_INVALID_PARAM, "an evaluation's push");
    to_host(into, host, ref->out_size);
    check_pooled(ref, ebc, steps, &kd, host, "the evaluation");
    ember_lookup_release(lk);
}

/* A job of @setup: trainer 0 creates the tables, the others open them. */
static int run_train(int rank, const setup_t *setup, const fspec_t *features)
{
    ember_job_t *job = api_test_join(setup->trainers, setup->num_ps);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS)
        return api_test_ps(job, EMBER_OK);
    ref_t ref;
    ref_build(&ref, setup, features);
    ember_table_t *tables[NT];
    trainer_tables(job, rank, setup, 1, tables);
    device_setup(job);
    ember_ebc_t *ebc = make_ebc(job, features, tables, 0, g_device);
    train(&ref, ebc, (uint32_t)rank, 0, setup->steps);
    MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier");
    if (!setup->async)
        evaluate(&ref, ebc, (uint32_t)rank, setup->steps);
    check_tables(&ref, tables, setup->steps);
    ember_ebc_destroy(ebc);
    device_close();
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ref_free(&ref);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ---- pooling ------------------------------------------------------------------------ */

static int run_pooling(int rank, int num_ps, int weighted)
{
    const setup_t setup = {.trainers = 1,
                           .num_ps = num_ps,
                           .opt = EMBER_OPT_SGD,
                           .weighted = weighted,
                           .steps = 0};
    const fspec_t *features = weighted ? fweighted : fmixed;
    ember_job_t *job = api_test_join(1, num_ps);
    if (rank > 0)
        return api_test_ps(job, EMBER_OK);
    ref_t ref;
    ref_build(&ref, &setup, features);
    ember_table_t *tables[NT];
    create_tables(job, &setup, 1, tables);
    device_setup(job);
    ember_ebc_t *ebc = make_ebc(job, features, tables, 0, g_device);
    for (int by_offsets = 0; by_offsets < 2; by_offsets++) {
        kjt_data_t kd;
        ember_lookup_t *lk;
        float out[OUT_MAX], g[OUT_MAX] = {0}, host[OUT_MAX];
        const float *pooled;
        make_kjt(features, 0, (uint64_t)by_offsets, &kd);
        ember_kjt_t kjt = kjt_view(&kd, by_offsets, weighted);
        MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &lk) == EMBER_OK, "lookup");
        MP_CHECK(ember_lookup_wait(lk,
                                   by_offsets ? NULL
                                   : g_device ? g_out
                                              : out,
                                   &pooled) == EMBER_OK,
                 "wait");
        to_host(pooled, host, ref.out_size);
        check_pooled(&ref, ebc, 0, &kd, host, by_offsets ? "by offsets" : "by lengths");
        /* A zero gradient: the tables stay as they were (SGD). */
        MP_CHECK(ember_lookup_backward(lk, to_device(g, ref.out_size), EMBER_BACKWARD_WAIT) ==
                         EMBER_OK,
                 "backward");
        ember_lookup_release(lk);
    }
    for (int p = 0; p < num_ps; p++) {
        ember_ps_stats_t stats;
        MP_CHECK(ember_ps_stats(job, p, &stats) == EMBER_OK, "stats of ps%d", p);
        MP_CHECK(stats.lookups == 2 * NT && stats.grads == 2 * NT && stats.steps_applied == 2 * NT,
                 "ps%d: %llu table lookups, %llu gradients, %llu steps applied; want %d each "
                 "(its %d tables once a step, two steps)",
                 p, (unsigned long long)stats.lookups, (unsigned long long)stats.grads,
                 (unsigned long long)stats.steps_applied, 2 * NT, NT);
    }
    ember_ebc_destroy(ebc);
    device_close();
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ref_free(&ref);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int pooling_p1(int rank, int world, void *arg)
{
    return run_pooling(rank, 1, 0);
}

static int pooling_p2(int rank, int world, void *arg)
{
    return run_pooling(rank, 2, 0);
}

static int weighted(int rank, int world, void *arg)
{
    return run_pooling(rank, 2, 1);
}

/* ---- training cases -------------------------------------------------------------------- */

#define TRAIN_CASE(name, P, OPT, K)                                                  \
    static int name(int rank, int world, void *arg)                                  \
    {                                                                                \
        const setup_t setup = {                                                      \
                .trainers = 2, .num_ps = P, .opt = OPT, .staleness = K, .steps = 5}; \
        return run_train(rank, &setup, fmixed);                                      \
    }

TRAIN_CASE(train_sgd_p1_s0, 1, EMBER_OPT_SGD, 0)
TRAIN_CASE(train_sgd_p2_s0, 2, EMBER_OPT_SGD, 0)
TRAIN_CASE(train_adagrad_p2_s0, 2, EMBER_OPT_ADAGRAD, 0)
TRAIN_CASE(train_adam_p2_s0, 2, EMBER_OPT_ADAM, 0)
TRAIN_CASE(train_sgd_p2_s1, 2, EMBER_OPT_SGD, 1)
TRAIN_CASE(train_adam_p1_s1, 1, EMBER_OPT_ADAM, 1)

static int tablewise(int rank, int world, void *arg)
{
    const setup_t setup = {
            .trainers = 2, .num_ps = 2, .opt = EMBER_OPT_ADAGRAD, .tablewise = 1, .steps = 4};
    return run_train(rank, &setup, fmixed);
}

/* Async SGD: the gradients do not depend on the tables (no max pooling),
 * so whatever order the PS applies them in, each is applied once. */
static int async_case(int rank, int world, void *arg)
{
    const setup_t setup = {.trainers = 2,
                           .num_ps = 2,
                           .opt = EMBER_OPT_SGD,
                           .async = 1,
                           .weighted = 1,
                           .steps = 4};
    return run_train(rank, &setup, fweighted);
}

/* ---- when a step is visible -------------------------------------------------------------- */

/* Two trainers, 2 PS, sync SGD, one step at a time with one-way pushes:
 * each trainer reads every table before its first push (the initial rows:
 * no sync step is applied without it), then after each step flushes
 * (ember_ebc_flush: every PS took its pushes), meets the other at a
 * barrier and reads every table: that step applied, exactly as the
 * reference has it. */
static int visible(int rank, int world, void *arg)
{
    const setup_t setup = {.trainers = 2, .num_ps = 2, .opt = EMBER_OPT_SGD, .steps = 4};
    ember_job_t *job = api_test_join(setup.trainers, setup.num_ps);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS)
        return api_test_ps(job, EMBER_OK);
    ref_t ref;
    ref_build(&ref, &setup, fmixed);
    ember_table_t *tables[NT];
    trainer_tables(job, rank, &setup, 1, tables);
    device_setup(job);
    ember_ebc_t *ebc = make_ebc(job, fmixed, tables, 0, g_device);
    const uint32_t t = (uint32_t)rank;
    float out[OUT_MAX], g[OUT_MAX];
    float *into = g_device ? g_out : out;
    for (int s = 0; s < setup.steps; s++) {
        kjt_data_t kd;
        ember_lookup_t *lk;
        make_kjt(fmixed, t, (uint64_t)s, &kd);
        ember_kjt_t kjt = kjt_view(&kd, 0, 0);
        MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &lk) == EMBER_OK, "trainer %u: lookup %d", t, s);
        MP_CHECK(ember_lookup_wait(lk, into, NULL) == EMBER_OK, "trainer %u: wait %d", t, s);
        if (s == 0)
            check_tables(&ref, tables, 0); /* before this trainer's first push */
        make_grad(t, (uint64_t)s, g, ref.out_size);
        MP_CHECK(ember_lookup_backward(lk, to_device(g, ref.out_size), 0) == EMBER_OK,
                 "trainer %u: backward %d", t, s);
        ember_lookup_release(lk);
        MP_CHECK(ember_ebc_flush(ebc) == EMBER_OK, "trainer %u: flush after step %d", t, s);
        MP_CHECK(ember_job_barrier(job, "pushed") == EMBER_OK, "barrier");
        check_tables(&ref, tables, s + 1);
        MP_CHECK(ember_job_barrier(job, "read") == EMBER_OK, "barrier"); /* then the next step */
    }
    ember_ebc_destroy(ebc);
    device_close();
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ref_free(&ref);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ---- bad batches ------------------------------------------------------------------------ */

/* One lookup of @kjt refused with @want, its error saying each of @words. */
static void refused(ember_ebc_t *ebc, const ember_kjt_t *kjt, unsigned flags, ember_status_t want,
                    const char *what, const char *const *words)
{
    ember_lookup_t *lk = NULL;
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_ebc_lookup(ebc, kjt, flags, &lk);
    char *text = api_test_log_end(&log);
    MP_CHECK(status == want && !lk, "%s: %s, expected %s", what, ember_status_string(status),
             ember_status_string(want));
    api_test_log_has(text, what, words);
}

/* A good step still goes through. */
static void step_ok(ember_ebc_t *ebc, const kjt_data_t *kd)
{
    ember_kjt_t kjt = kjt_view(kd, 0, 0);
    ember_lookup_t *lk;
    float out[OUT_MAX], g[OUT_MAX] = {0};
    MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &lk) == EMBER_OK, "a good lookup after a refusal");
    MP_CHECK(ember_lookup_wait(lk, out, NULL) == EMBER_OK, "its wait");
    MP_CHECK(ember_lookup_backward(lk, g, EMBER_BACKWARD_WAIT) == EMBER_OK, "its backward");
    ember_lookup_release(lk);
}

static void bad_batches(ember_ebc_t *ebc)
{
    kjt_data_t kd, bad;
    make_kjt(fmixed, 0, 0, &kd);
    ember_kjt_t kjt = kjt_view(&kd, 0, 0);
    kjt.num_features = NF - 1;
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "3 features of 4",
            (const char *const[]){"3 features", "the ebc has 4", NULL});
    /* category's bag 0 (never empty) gets id 31 of B's 31 rows */
    bad = kd;
    bad.values[bad.offsets[2 * B] + 1] = 31;
    kjt = kjt_view(&bad, 1, 0);
    refused(ebc, &kjt, 0, EMBER_ERR_OUT_OF_RANGE, "an id outside table B",
            (const char *const[]){"feature category", "index 31", "(bag 0)", "table B", "[0, 31)",
                                  NULL});
    bad = kd;
    bad.lengths[B + 2] = -1;
    kjt = kjt_view(&bad, 0, 0);
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "a negative length",
            (const char *const[]){"feature item_hist", "length -1 of bag 2", NULL});
    bad = kd;
    bad.offsets[3 * B + 1] = bad.offsets[3 * B + 3] + 1;
    kjt = kjt_view(&bad, 1, 0);
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "decreasing offsets",
            (const char *const[]){"feature brand", "offsets decrease at bag 2", NULL});
    kjt = kjt_view(&kd, 0, 1);
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "weights with mean pooling",
            (const char *const[]){"feature category", "only supported with mode sum", NULL});
    kjt = kjt_view(&kd, 1, 0);
    kjt.num_values = kd.nvalues + 3;
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "values not covered",
            (const char *const[]){"not from 0 to num_values", NULL});
    kjt = kjt_view(&kd, 0, 0);
    kjt.num_values = kd.nvalues - 1;
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "lengths past the values",
            (const char *const[]){"past num_values", NULL});
    kjt = kjt_view(&kd, 0, 0);
    kjt.offsets = kd.offsets;
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "lengths and offsets",
            (const char *const[]){"exactly one of lengths and offsets", NULL});
    step_ok(ebc, &kd);
}

/* Lookups out of their order. */
static void bad_order(ember_ebc_t *ebc)
{
    kjt_data_t kd;
    make_kjt(fmixed, 0, 3, &kd);
    ember_kjt_t kjt = kjt_view(&kd, 0, 0);
    ember_lookup_t *a, *b;
    float out[OUT_MAX], g[OUT_MAX] = {0};
    MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &a) == EMBER_OK, "lookup a");
    MP_CHECK(ember_lookup_backward(a, g, 0) == EMBER_ERR_INVALID_PARAM, "backward before wait");
    MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &b) == EMBER_OK, "lookup b");
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "a third open lookup",
            (const char *const[]){"still open", NULL});
    refused(ebc, &kjt, EMBER_LOOKUP_FORWARD_ONLY, EMBER_ERR_INVALID_PARAM,
            "an evaluation while training", (const char *const[]){"a training lookup", NULL});
    /* b's lookups leave after a's push (staleness 0): waiting first would hang */
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_lookup_wait(b, out, NULL);
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "waiting for the next step first: %s",
             ember_status_string(status));
    api_test_log_has(text, "the order", (const char *const[]){"backward", NULL});
    MP_CHECK(ember_lookup_wait(a, out, NULL) == EMBER_OK, "wait a");
    MP_CHECK(ember_lookup_wait(a, out, NULL) == EMBER_ERR_INVALID_PARAM, "waiting twice");
    MP_CHECK(ember_lookup_backward(a, g, 0) == EMBER_OK, "backward a");
    MP_CHECK(ember_lookup_backward(a, g, 0) == EMBER_ERR_INVALID_PARAM, "backward twice");
    ember_lookup_release(a);
    MP_CHECK(ember_lookup_wait(b, out, NULL) == EMBER_OK, "wait b");
    ember_lookup_release(b); /* without its backward: nothing more */
    refused(ebc, &kjt, 0, EMBER_ERR_INVALID_PARAM, "after a release without a backward",
            (const char *const[]){"released without its backward", NULL});
}

/* ebc_create's refusals. */
static void bad_features(ember_job_t *job, ember_table_t *const *tables)
{
    ember_feature_t f[3] = {
            {.name = "x", .table = tables[0], .pooling = EMBER_BAG_SUM, .padding_idx = -1},
            {.name = "y", .table = tables[1], .pooling = EMBER_BAG_SUM, .padding_idx = -1},
            {.name = "z", .table = tables[0], .pooling = EMBER_BAG_SUM, .padding_idx = -1}};
    ember_ebc_t *ebc = NULL;
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_ebc_create(job, f, 3, NULL, &ebc);
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM && !ebc, "a table's features apart: %s",
             ember_status_string(status));
    api_test_log_has(text, "features apart",
                     (const char *const[]){"feature z", "table A", "one after another", NULL});
    f[1] = (ember_feature_t){
            .name = "y", .table = tables[0], .pooling = EMBER_BAG_MEAN, .padding_idx = -1};
    api_test_log_begin(&log);
    status = ember_ebc_create(job, f, 2, NULL, &ebc);
    text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM && !ebc, "a table pooled two ways: %s",
             ember_status_string(status));
    api_test_log_has(text, "two poolings",
                     (const char *const[]){"features x and y", "pool differently", NULL});
    f[1] = (ember_feature_t){
            .name = "y", .table = tables[1], .pooling = EMBER_BAG_SUM, .padding_idx = 31};
    api_test_log_begin(&log);
    status = ember_ebc_create(job, f, 2, NULL, &ebc);
    text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM && !ebc, "a padding index outside: %s",
             ember_status_string(status));
    api_test_log_has(text, "padding", (const char *const[]){"feature y", "padding index 31", NULL});
}

/* A one-way push the PS refuse (its table C destroyed after the lookup):
 * ember_ebc_flush fails with their refusal, naming the table id. */
static void push_refused(ember_job_t *job, ember_table_t **tables)
{
    ember_ebc_t *ebc = make_ebc(job, fmixed, tables, 0, NULL);
    kjt_data_t kd;
    make_kjt(fmixed, 0, 0, &kd);
    ember_kjt_t kjt = kjt_view(&kd, 0, 0);
    ember_lookup_t *lk;
    float out[OUT_MAX], g[OUT_MAX] = {0};
    MP_CHECK(ember_ebc_lookup(ebc, &kjt, 0, &lk) == EMBER_OK &&
                     ember_lookup_wait(lk, out, NULL) == EMBER_OK,
             "the step before the refusal");
    MP_CHECK(ember_table_destroy(tables[2]) == EMBER_OK, "destroying table C");
    tables[2] = NULL;
    MP_CHECK(ember_lookup_backward(lk, g, 0) == EMBER_OK, "a one-way push leaves");
    ember_lookup_release(lk);
    api_test_log_t log;
    api_test_log_begin(&log);
    ember_status_t status = ember_ebc_flush(ebc);
    char *text = api_test_log_end(&log);
    MP_CHECK(status == EMBER_ERR_INVALID_PARAM, "the flush after a refused push: %s",
             ember_status_string(status));
    MP_CHECK(strstr(ember_ebc_error(ebc), "no table with id"), "ember_ebc_error: '%s'",
             ember_ebc_error(ebc));
    api_test_log_has(text, "a refused push",
                     (const char *const[]){"trainer 0", "gradients of trainer 0 step 0",
                                           "no table with id", NULL});
    ember_ebc_destroy(ebc);
}

static int bad_kjt(int rank, int world, void *arg)
{
    const setup_t setup = {.trainers = 1, .num_ps = 2, .opt = EMBER_OPT_SGD};
    ember_job_t *job = api_test_join(1, 2);
    if (rank > 0)
        return api_test_ps(job, EMBER_OK);
    ember_table_t *tables[NT];
    create_tables(job, &setup, 1, tables);
    bad_features(job, tables);
    ember_ebc_t *ebc = make_ebc(job, fmixed, tables, 0, NULL);
    bad_batches(ebc);
    bad_order(ebc);
    ember_ebc_destroy(ebc);
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int push_refused_case(int rank, int world, void *arg)
{
    const setup_t setup = {.trainers = 1, .num_ps = 1, .opt = EMBER_OPT_SGD};
    ember_job_t *job = api_test_join(1, 1);
    if (rank > 0)
        return api_test_ps(job, EMBER_OK);
    ember_table_t *tables[NT];
    create_tables(job, &setup, 1, tables);
    push_refused(job, tables);
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

static const char *ckpt_root;
enum {
    CKPT_STEPS = 6,
    CKPT_AT = 3
};

static const setup_t ckpt_setup = {
        .trainers = 2, .num_ps = 2, .opt = EMBER_OPT_ADAGRAD, .tablewise = 1, .steps = CKPT_STEPS};

/* A trainer's own state: "dense" [4], written at each checkpoint. */
static void dense_of(uint32_t t, uint64_t steps, float *dense)
{
    for (int i = 0; i < 4; i++)
        dense[i] = (float)(t * 100 + steps * 10 + (uint64_t)i) + 0.5f;
}

/* Steps [from, to) with a checkpoint open: each step begun, each due
 * checkpoint saved with the trainer's tensors. */
static void train_ckpt(const ref_t *ref, ember_ebc_t *ebc, ember_checkpoint_t *ckpt, uint32_t t,
                       int from, int to)
{
    char err[400];
    for (int s = from; s < to; s++) {
        MP_CHECK(ember_checkpoint_step_begin(ckpt, (uint64_t)s, s + 1 == to, err, sizeof(err)) ==
                         EMBER_OK,
                 "step_begin %d: %s", s, err);
        train(ref, ebc, t, s, s + 1);
        if (!ember_checkpoint_due(ckpt, (uint64_t)s + 1))
            continue;
        float dense[4];
        dense_of(t, (uint64_t)s + 1, dense);
        const ember_st_tensor_t tensor = {
                .name = "dense", .dtype = EMBER_DTYPE_F32, .ndim = 1, .shape = {4}, .data = dense};
        const ember_st_meta_t meta = {"note", "api test"};
        MP_CHECK(ember_checkpoint_save(ckpt, (uint64_t)s + 1, &tensor, 1, &meta, 1, err,
                                       sizeof(err)) == EMBER_OK,
                 "saving after step %d: %s", s + 1, err);
    }
}

static ember_checkpoint_t *ckpt_open(ember_job_t *job, uint64_t every, uint64_t start)
{
    ember_checkpoint_config_t config;
    ember_checkpoint_t *ckpt = NULL;
    char err[400];
    const ember_st_meta_t lines[] = {{"model", "two-tables"}};
    ember_checkpoint_config_init(&config);
    config.root = ckpt_root;
    config.every = every;
    config.keep = 2;
    config.start_step = start;
    config.describe = lines;
    config.ndescribe = 1;
    ember_status_t status = ember_checkpoint_open(job, &config, &ckpt, err, sizeof(err));
    MP_CHECK(status == EMBER_OK, "ember_checkpoint_open: %s: %s", ember_status_string(status), err);
    return ckpt;
}

/* The coordinator (trainer 0): every checkpoint up to @steps complete. */
static void ckpt_finish(ember_job_t *job, ember_checkpoint_t *ckpt, uint64_t steps,
                        const uint64_t *want, size_t nwant, size_t files)
{
    char err[400];
    if (ember_job_rank(job) != 0)
        return;
    MP_CHECK(ember_checkpoint_finish(ckpt, steps, err, sizeof(err)) == EMBER_OK, "finish: %s", err);
    ember_checkpoint_event_t event;
    for (size_t i = 0; i < nwant; i++) {
        MP_CHECK(ember_checkpoint_poll(ckpt, &event) == 1, "no event of step %llu",
                 (unsigned long long)want[i]);
        MP_CHECK(event.step == want[i] && !event.failed && event.files == files,
                 "event: step %llu, failed %d (%s), %zu files; want step %llu of %zu files",
                 (unsigned long long)event.step, event.failed, event.text, event.files,
                 (unsigned long long)want[i], files);
    }
    MP_CHECK(ember_checkpoint_poll(ckpt, &event) == 0, "an event too many");
}

/* The first run: 3 steps on 2 PS, checkpoints after 2 and 3. */
static int ckpt_first(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(2, 2);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS)
        return api_test_ps(job, EMBER_OK);
    ref_t ref;
    ref_build(&ref, &ckpt_setup, fmixed);
    ember_table_t *tables[NT];
    trainer_tables(job, rank, &ckpt_setup, 1, tables);
    ember_checkpoint_t *ckpt = ckpt_open(job, 2, 0);
    device_setup(job);
    ember_ebc_t *ebc = make_ebc(job, fmixed, tables, 0, g_device);
    train_ckpt(&ref, ebc, ckpt, (uint32_t)rank, 0, CKPT_AT);
    ckpt_finish(job, ckpt, CKPT_AT, (const uint64_t[]){2, 3}, 2, 4);
    MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier"); /* every push in */
    check_tables(&ref, tables, CKPT_AT);
    ember_ebc_destroy(ebc);
    device_close();
    ember_checkpoint_close(ckpt);
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ref_free(&ref);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* @from copied to @to, its byte @flip (if < its size) flipped. */
static void copy_file(const char *from, const char *to, long flip)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    MP_CHECK(in && out, "copying %s to %s", from, to);
    int c;
    for (long at = 0; (c = fgetc(in)) != EOF; at++)
        fputc(at == flip ? c ^ 0x40 : c, out);
    fclose(in);
    MP_CHECK(fclose(out) == 0, "writing %s", to);
}

/* Trainer @t's dense tensor of @file is the one it saved after CKPT_AT. */
static void ckpt_check_dense(ember_st_file_t *file, uint32_t t)
{
    const ember_st_tensor_t *dense = ember_st_find(file, "dense");
    float want[4], got[4];
    dense_of(t, CKPT_AT, want);
    MP_CHECK(dense && dense->dtype == EMBER_DTYPE_F32 && dense->numel == 4, "its dense tensor");
    memcpy(got, dense->data, sizeof(got));
    MP_CHECK(!memcmp(got, want, sizeof(got)) &&
                     !strcmp(ember_st_metadata(file, "note"), "api test"),
             "trainer %u's dense %g.. (want %g..)", t, (double)got[0], (double)want[0]);
}

/* A resuming trainer's own file without ember_checkpoint_find: taken from
 * the step directory alone; another step, another trainer, a torn copy and
 * a corrupt copy refused, each saying so. */
static void ckpt_check_open_at(const ember_checkpoint_info_t *info, uint32_t t)
{
    char err[600], copy[] = "/tmp/ember-api-copy-XXXXXX", dir[128], from[700], to[200];
    ember_st_file_t *file = NULL;
    MP_CHECK(ember_checkpoint_open_trainer_at(info->dir, info->step, t, &file, err, sizeof(err)) ==
                     EMBER_OK,
             "trainer %u's file from %s alone: %s", t, info->dir, err);
    ckpt_check_dense(file, t);
    ember_st_close(file);
    MP_CHECK(ember_checkpoint_open_trainer_at(info->dir, info->step + 1, t, &file, err,
                                              sizeof(err)) == EMBER_ERR_FORMAT &&
                     strstr(err, "not 4"),
             "the file of another step: %s", err);
    MP_CHECK(ember_checkpoint_open_trainer_at(info->dir, info->step, 7, &file, err, sizeof(err)) ==
                             EMBER_ERR_NOT_FOUND &&
                     strstr(err, "names no trainer7.safetensors"),
             "trainer 7's file: %s", err);
    /* A copy of the step directory: torn (no manifest), then corrupt. */
    MP_CHECK(mkdtemp(copy), "mkdtemp");
    snprintf(dir, sizeof(dir), "%s/step-%012llu", copy, (unsigned long long)info->step);
    MP_CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    snprintf(from, sizeof(from), "%s/trainer%u.safetensors", info->dir, t);
    snprintf(to, sizeof(to), "%s/trainer%u.safetensors", dir, t);
    copy_file(from, to, -1);
    MP_CHECK(ember_checkpoint_open_trainer_at(dir, info->step, t, &file, err, sizeof(err)) ==
                     EMBER_ERR_NOT_FOUND,
             "a step directory without its manifest: %s", err);
    snprintf(from, sizeof(from), "%s/manifest", info->dir);
    snprintf(to, sizeof(to), "%s/manifest", dir);
    copy_file(from, to, -1);
    snprintf(from, sizeof(from), "%s/trainer%u.safetensors", info->dir, t);
    snprintf(to, sizeof(to), "%s/trainer%u.safetensors", dir, t);
    struct stat st;
    MP_CHECK(stat(from, &st) == 0, "stat %s", from);
    copy_file(from, to, (long)st.st_size - 1); /* the last byte of its tensors */
    MP_CHECK(ember_checkpoint_open_trainer_at(dir, info->step, t, &file, err, sizeof(err)) ==
                             EMBER_ERR_FORMAT &&
                     strstr(err, "CRC-32C"),
             "a corrupt file: %s", err);
    unlink(to);
    snprintf(to, sizeof(to), "%s/manifest", dir);
    unlink(to);
    rmdir(dir);
    rmdir(copy);
}

/* What the newest checkpoint holds, as a resumed trainer finds it. */
static void ckpt_check_found(const ember_checkpoint_info_t *info, const ref_t *ref, uint32_t t)
{
    char err[400];
    MP_CHECK(info->step == CKPT_AT && info->trainers == 2 && info->num_ps == 2 &&
                     !strcmp(ember_checkpoint_describe(info, "model"), "two-tables") &&
                     !strcmp(ember_checkpoint_describe(info, "absent"), ""),
             "found step %llu of %u trainers, %u PS, model '%s'", (unsigned long long)info->step,
             info->trainers, info->num_ps, ember_checkpoint_describe(info, "model"));
    ember_st_file_t *file;
    MP_CHECK(ember_checkpoint_open_trainer(info, t, &file, err, sizeof(err)) == EMBER_OK,
             "opening trainer %u's file: %s", t, err);
    ckpt_check_dense(file, t);
    ember_st_close(file);
    ckpt_check_open_at(info, t);
    MP_CHECK(ember_checkpoint_open_trainer(info, 7, &file, err, sizeof(err)) ==
                             EMBER_ERR_NOT_FOUND &&
                     strstr(err, "trainer7"),
             "trainer 7's file: %s", err);
    for (int k = 0; k < NT; k++) {
        const tspec_t *s = &tspecs[k];
        float *rows = malloc((size_t)s->rows * s->dim * sizeof(float));
        MP_CHECK(rows && ember_checkpoint_read_table(info, s->name, s->rows, s->dim, rows, err,
                                                     sizeof(err)) == EMBER_OK,
                 "reading %s from the checkpoint: %s", s->name, err);
        for (size_t i = 0; i < (size_t)s->rows * s->dim; i++)
            check_close(rows[i], ref->hist[CKPT_AT][k][i], 0, "the checkpoint's rows", (int)i);
        MP_CHECK(ember_checkpoint_read_table(info, s->name, s->rows + 1, s->dim, rows, err,
                                             sizeof(err)) == EMBER_ERR_FORMAT,
                 "a table of another shape");
        free(rows);
    }
}

/* The resumed run: on 1 PS, tables empty then restored, 3 more steps. */
static int ckpt_second(int rank, int world, void *arg)
{
    setup_t setup = ckpt_setup;
    setup.num_ps = 1;
    ember_job_t *job = api_test_join(2, 1);
    if (ember_job_role(job, rank, NULL) == EMBER_ROLE_PS)
        return api_test_ps(job, EMBER_OK);
    ref_t ref;
    ref_build(&ref, &ckpt_setup, fmixed);
    ember_checkpoint_info_t info;
    char err[400];
    MP_CHECK(ember_checkpoint_find(ckpt_root, &info, err, sizeof(err)) == EMBER_OK, "find: %s",
             err);
    ckpt_check_found(&info, &ref, (uint32_t)rank);
    ember_table_t *tables[NT];
    if (rank == 0) {
        create_tables(job, &setup, 0, tables);
        MP_CHECK(ember_checkpoint_restore_tables(job, &info, err, sizeof(err)) == EMBER_OK,
                 "restore: %s", err);
    }
    MP_CHECK(ember_job_barrier(job, "restored") == EMBER_OK, "barrier");
    if (rank != 0)
        open_tables(job, tables);
    check_tables(&ref, tables, CKPT_AT);
    ember_checkpoint_t *ckpt = ckpt_open(job, 0, info.step);
    device_setup(job);
    ember_ebc_t *ebc = make_ebc(job, fmixed, tables, info.step, g_device);
    train_ckpt(&ref, ebc, ckpt, (uint32_t)rank, CKPT_AT, CKPT_STEPS);
    ckpt_finish(job, ckpt, CKPT_STEPS, (const uint64_t[]){CKPT_STEPS}, 1, 3);
    MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier");
    check_tables(&ref, tables, CKPT_STEPS);
    ember_checkpoint_info_free(&info);
    ember_ebc_destroy(ebc);
    device_close();
    ember_checkpoint_close(ckpt);
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ref_free(&ref);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* A fresh run (start 0) on a root with complete checkpoints: refused. */
static int ckpt_fresh(int rank, int world, void *arg)
{
    ember_job_t *job = api_test_join(1, 1);
    if (rank == 1)
        return api_test_ps(job, EMBER_OK);
    ember_checkpoint_config_t config;
    ember_checkpoint_t *ckpt = NULL;
    char err[600];
    ember_checkpoint_config_init(&config);
    config.root = ckpt_root;
    ember_status_t status = ember_checkpoint_open(job, &config, &ckpt, err, sizeof(err));
    MP_CHECK(status == EMBER_ERR_EXISTS && !ckpt && strstr(err, "holds a complete checkpoint"),
             "a fresh run on a used root: %s: %s", ember_status_string(status), err);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

/* Trainer 1 signals itself before step 1: a checkpoint soon after. */
static int run_signal(int rank, int sig)
{
    const setup_t setup = {.trainers = 2, .num_ps = 1, .opt = EMBER_OPT_SGD, .steps = 6};
    ember_job_t *job = api_test_join(2, 1);
    if (rank == 2)
        return api_test_ps(job, EMBER_OK);
    ref_t ref;
    ref_build(&ref, &setup, fmixed);
    ember_table_t *tables[NT];
    trainer_tables(job, rank, &setup, 1, tables);
    ember_checkpoint_config_t config;
    ember_checkpoint_t *ckpt = NULL;
    char err[400];
    ember_checkpoint_config_init(&config);
    config.root = ckpt_root;
    config.signals = 1;
    config.keep = 2;
    MP_CHECK(ember_checkpoint_open(job, &config, &ckpt, err, sizeof(err)) == EMBER_OK, "open: %s",
             err);
    ember_ebc_t *ebc = make_ebc(job, fmixed, tables, 0, NULL);
    /* The trainers meet every step, as their dense allreduce makes them:
     * what lets trainer 0 name the next step for all. */
    ember_allreduce_t *ar;
    MP_CHECK(ember_allreduce_create(job, NULL, &ar) == EMBER_OK, "allreduce");
    uint64_t asked = 0, ran = 0;
    for (int s = 0; s < setup.steps; s++) {
        if (rank == 1 && s == 1)
            raise(sig);
        MP_CHECK(ember_checkpoint_step_begin(ckpt, (uint64_t)s, s + 1 == setup.steps, err,
                                             sizeof(err)) == EMBER_OK,
                 "step_begin: %s", err);
        train(&ref, ebc, (uint32_t)rank, s, s + 1);
        float one = 1.0f;
        MP_CHECK(ember_allreduce(ar, &one, 1, EMBER_ALLREDUCE_SUM) == EMBER_OK && one == 2.0f,
                 "the step's allreduce");
        ran = (uint64_t)s + 1;
        if (ember_checkpoint_due(ckpt, ran)) {
            if (ran < (uint64_t)setup.steps)
                asked = ran;
            float dense[4];
            dense_of((uint32_t)rank, ran, dense);
            const ember_st_tensor_t tensor = {.name = "dense",
                                              .dtype = EMBER_DTYPE_F32,
                                              .ndim = 1,
                                              .shape = {4},
                                              .data = dense};
            MP_CHECK(ember_checkpoint_save(ckpt, ran, &tensor, 1, NULL, 0, err, sizeof(err)) ==
                             EMBER_OK,
                     "save: %s", err);
        }
        if (ember_checkpoint_stops(ckpt, ran))
            break;
    }
    MP_CHECK(asked >= 2 && asked <= 5, "%s: the signal's checkpoint came after step %llu",
             ember_job_name(job, rank), (unsigned long long)asked);
    if (sig == SIGTERM)
        MP_CHECK(ran == asked && ember_checkpoint_stop_step(ckpt) == asked,
                 "SIGTERM: ran %llu steps, stop step %llu, the checkpoint after %llu",
                 (unsigned long long)ran, (unsigned long long)ember_checkpoint_stop_step(ckpt),
                 (unsigned long long)asked);
    else
        MP_CHECK(ran == (uint64_t)setup.steps && !ember_checkpoint_stop_step(ckpt),
                 "SIGUSR1: ran %llu steps", (unsigned long long)ran);
    if (rank == 0)
        MP_CHECK(ember_checkpoint_finish(ckpt, ran, err, sizeof(err)) == EMBER_OK, "finish: %s",
                 err);
    MP_CHECK(ember_job_barrier(job, "trained") == EMBER_OK, "barrier");
    check_tables(&ref, tables, (int)ran);
    ember_allreduce_destroy(ar);
    ember_ebc_destroy(ebc);
    ember_checkpoint_close(ckpt);
    for (int k = 0; k < NT; k++)
        ember_table_close(tables[k]);
    ref_free(&ref);
    ember_job_leave(job, EMBER_OK);
    return 0;
}

static int ckpt_sigusr1(int rank, int world, void *arg)
{
    return run_signal(rank, SIGUSR1);
}

static int ckpt_sigterm(int rank, int world, void *arg)
{
    return run_signal(rank, SIGTERM);
}

static int dir_has(const char *root, const char *name)
{
    char path[700];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s/manifest", root, name);
    return stat(path, &st) == 0;
}

static int ckpt_resume(void)
{
    char root[] = "/tmp/ember-api-ckpt-XXXXXX";
    MP_CHECK(mkdtemp(root), "mkdtemp");
    ckpt_root = root;
    mp_opts_t opts = {.timeout_s = 200.0};
    int rc = mp_spawn(4, ckpt_first, NULL, &opts);
    if (rc == 0 && !(dir_has(root, "step-000000000002") && dir_has(root, "step-000000000003"))) {
        fprintf(stderr, "the first run left no checkpoints after steps 2 and 3 in %s\n", root);
        rc = 1;
    }
    if (rc == 0)
        rc = mp_spawn(3, ckpt_second, NULL, &opts);
    if (rc == 0 && !(dir_has(root, "step-000000000006") && dir_has(root, "step-000000000003") &&
                     !dir_has(root, "step-000000000002"))) {
        fprintf(stderr, "after the resumed run %s does not hold steps 3 and 6 alone\n", root);
        rc = 1;
    }
    if (rc == 0)
        rc = mp_spawn(2, ckpt_fresh, NULL, &opts);
    if (rc == 0) {
        char command[100];
        snprintf(command, sizeof(command), "rm -rf %s", root);
        if (system(command) != 0)
            fprintf(stderr, "could not remove %s\n", root);
    }
    printf("ckpt_resume: %s\n", rc == 0 ? "passed" : "FAILED");
    return rc;
}

static const mp_case_t cases[] = {
        {"pooling_p1", pooling_p1, 2, 0},
        {"pooling_p2", pooling_p2, 3, 0},
        {"weighted", weighted, 3, 0},
        {"train_sgd_p1_s0", train_sgd_p1_s0, 3, 0},
        {"train_sgd_p2_s0", train_sgd_p2_s0, 4, 0},
        {"train_adagrad_p2_s0", train_adagrad_p2_s0, 4, 0},
        {"train_adam_p2_s0", train_adam_p2_s0, 4, 0},
        {"train_sgd_p2_s1", train_sgd_p2_s1, 4, 0},
        {"train_adam_p1_s1", train_adam_p1_s1, 3, 0},
        {"tablewise", tablewise, 4, 0},
        {"async", async_case, 4, 0},
        {"visible", visible, 4, 0},
        {"bad_kjt", bad_kjt, 3, 0},
        {"push_refused", push_refused_case, 2, 0},
};

/* A signal case in a fresh root: its checkpoints there as it says. */
static int ckpt_signal(mp_rank_fn fn, const char *name, int sigterm)
{
    char root[] = "/tmp/ember-api-ckpt-XXXXXX", command[100];
    MP_CHECK(mkdtemp(root), "mkdtemp");
    ckpt_root = root;
    mp_opts_t opts = {.timeout_s = 120.0};
    int rc = mp_spawn(3, fn, NULL, &opts);
    int found = 0, last = 0;
    for (int k = 2; k <= 6; k++) {
        char dir[32];
        snprintf(dir, sizeof(dir), "step-%012d", k);
        found += dir_has(root, dir) && k < 6;
        last = dir_has(root, dir) ? k : last;
    }
    if (rc == 0 && (sigterm ? found != 1 || last > 5 : found != 1 || last != 6)) {
        fprintf(stderr, "%s: %d checkpoints before the last, the newest after step %d\n", name,
                found, last);
        rc = 1;
    }
    snprintf(command, sizeof(command), "rm -rf %s", root);
    if (system(command) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    printf("%s: %s\n", name, rc == 0 ? "passed" : "FAILED");
    return rc;
}

int main(int argc, char **argv)
{
    const char *kind = getenv("EMBER_API_TEST_DEVICE");
    if (kind && !strcmp(kind, "cuda") && ember_device_cuda_count() < 1) {
        printf("skipped: EMBER_API_TEST_DEVICE=cuda, but no GPU is visible\n");
        return MP_SKIP;
    }
    if (argc == 2 && strcmp(argv[1], "ckpt_resume") == 0)
        return ckpt_resume();
    if (argc == 2 && strcmp(argv[1], "ckpt_sigusr1") == 0)
        return ckpt_signal(ckpt_sigusr1, argv[1], 0);
    if (argc == 2 && strcmp(argv[1], "ckpt_sigterm") == 0)
        return ckpt_signal(ckpt_sigterm, argv[1], 1);
    return mp_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 150.0);
}
