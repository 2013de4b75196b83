/*
 * engine/device/device: opening a device backend and overlaying its ops table on
 * stubs, so every slot is callable (an unsupported op says so instead of
 * crashing on NULL).
 */
#define _GNU_SOURCE /* dladdr */
#include <ember/config.h>
#include <ember/device.h>
#include <ember/log.h>

#include "engine/device/device_comm.h"
#include "engine/device/device_cpu.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ember_device {
    struct ember_device_head head; /* first: ember_device_impl() reads it */
    ember_device_ops_t ops;        /* what callers get: backend + comm wrappers */
    ember_device_ops_t backend;    /* the backend's table over the stubs */
    int local_rank;
};

static ember_status_t unsupported(const char *op)
{
    ember_error("device", "%s: not supported by this device backend", op);
    return EMBER_ERR_UNSUPPORTED;
}

static ember_status_t stub_open(int local_rank, void **impl_p)
{
    return unsupported("open");
}
static void stub_close(void *impl)
{
}
static ember_status_t stub_mem_alloc(ember_device_t *dev, size_t bytes, void **ptr_p)
{
    return unsupported("mem_alloc");
}
static void stub_mem_free(ember_device_t *dev, void *ptr)
{
}
static ember_status_t stub_mem_copy(ember_device_t *dev, void *dst, const void *src, size_t bytes,
                                    ember_copy_kind_t kind)
{
    return unsupported("mem_copy");
}
static ember_status_t stub_mem_zero(ember_device_t *dev, void *ptr, size_t bytes)
{
    return unsupported("mem_zero");
}
static ember_status_t stub_synchronize(ember_device_t *dev)
{
    return EMBER_OK;
}
static ember_status_t stub_bag_forward(ember_device_t *dev, const float *table, int64_t rows,
                                       size_t dim, const ember_bag_batch_t *batch,
                                       const ember_bag_opts_t *opts, float *out_p,
                                       int64_t *argmax_p)
{
    return unsupported("bag_forward");
}
static ember_status_t stub_bag_backward(ember_device_t *dev, const float *table, int64_t rows,
                                        size_t dim, const ember_bag_batch_t *batch,
                                        const ember_bag_opts_t *opts, const float *grad_out,
                                        const int64_t *argmax, int64_t *grad_rows_p, float *grad_p,
                                        size_t *nrows_p, float *grad_weights_p)
{
    return unsupported("bag_backward");
}
static ember_status_t stub_linear_forward(ember_device_t *dev, const float *x, size_t batch,
                                          size_t in, size_t out, const float *weight,
                                          const float *bias, float *y_p)
{
    return unsupported("linear_forward");
}
static ember_status_t stub_linear_backward(ember_device_t *dev, const float *x, size_t batch,
                                           size_t in, size_t out, const float *weight,
                                           const float *grad_y, int accumulate, float *grad_x_p,
                                           float *grad_weight_p, float *grad_bias_p)
{
    return unsupported("linear_backward");
}
static ember_status_t stub_relu_forward(ember_device_t *dev, const float *x, size_t n, float *y_p)
{
    return unsupported("relu_forward");
}
static ember_status_t stub_relu_backward(ember_device_t *dev, const float *x, const float *grad_y,
                                         size_t n, float *grad_x_p)
{
    return unsupported("relu_backward");
}
static ember_status_t stub_cross_entropy(ember_device_t *dev, const float *logits, size_t batch,
                                         size_t classes, const int64_t *targets, float *loss_p,
                                         float *grad_p)
{
    return unsupported("cross_entropy");
}
static ember_status_t stub_comm_create(ember_device_t *dev, ember_tp_t *tp, const int *ranks,
                                       int nranks, uint16_t op_base, ember_device_comm_t **comm_p)
{
    return unsupported("comm_create");
}
static void stub_comm_destroy(ember_device_comm_t *comm)
{
}
static ember_status_t stub_allreduce_start(ember_device_comm_t *comm, float *data, size_t count,
                                           int average, ember_device_req_t **req_p)
{
    return unsupported("allreduce_start");
}
static ember_status_t stub_allreduce_test(ember_device_req_t *req)
{
    return EMBER_ERR_UNSUPPORTED;
}
static ember_status_t stub_allreduce_wait(ember_device_req_t *req)
{
    return EMBER_ERR_UNSUPPORTED;
}
static const char *stub_comm_error(const ember_device_comm_t *comm)
{
    return "";
}
/* Plain host memory: all a backend without pinned memory has. */
static ember_status_t stub_host_alloc(ember_device_t *dev, size_t bytes, void **ptr_p)
{
    void *ptr = NULL;
    if (bytes > 0 && !(ptr = malloc(bytes)))
        return EMBER_ERR_NO_MEMORY;
    *ptr_p = ptr;
    return EMBER_OK;
}
static void stub_host_free(ember_device_t *dev, void *ptr)
{
    free(ptr);
}
static ember_status_t stub_rows_gather(ember_device_t *dev, const float *table, size_t dim,
                                       const int64_t *rows, size_t n, float *out)
{
    return unsupported("rows_gather");
}
static ember_status_t stub_rows_scatter(ember_device_t *dev, float *table, size_t dim,
                                        const int64_t *rows, size_t n, const float *in)
{
    return unsupported("rows_scatter");
}
static ember_status_t stub_parts_combine(ember_device_t *dev, const float *parts, size_t stride,
                                         uint32_t nparts, size_t bags, size_t dim,
                                         ember_bag_mode_t mode, const uint32_t *counts,
                                         const uint32_t *bag_counts, const uint32_t *places,
                                         size_t places_stride, float *out, int16_t *winner)
{
    return unsupported("parts_combine");
}
static ember_status_t stub_parts_split(ember_device_t *dev, const float *grad, uint32_t nparts,
                                       size_t bags, size_t dim, ember_bag_mode_t mode,
                                       const uint32_t *bag_counts, const int16_t *winner,
                                       float *grads, size_t stride)
{
    return unsupported("parts_split");
}
static ember_status_t stub_network_path(ember_device_t *dev, ember_mem_type_t *mem_p,
                                        const char **text_p)
{
    *mem_p = EMBER_MEM_HOST;
    *text_p = NULL;
    return EMBER_OK;
}

static ember_status_t stub_bag_backward_update(ember_device_t *dev, float *table, int64_t rows,
                                               size_t dim, const ember_bag_batch_t *batch,
                                               const ember_bag_opts_t *opts, const float *grad_out,
                                               const int64_t *argmax, const ember_device_opt_t *opt)
{
    return unsupported("bag_backward_update");
}
static ember_status_t stub_interaction_forward(ember_device_t *dev, const float *dense,
                                               const float *pooled, size_t tables, size_t batch,
                                               size_t dim, float *out)
{
    return unsupported("interaction_forward");
}
static ember_status_t stub_interaction_backward(ember_device_t *dev, const float *dense,
                                                const float *pooled, size_t tables, size_t batch,
                                                size_t dim, const float *grad_out,
                                                float *grad_dense, float *grad_pooled)
{
    return unsupported("interaction_backward");
}
static ember_status_t stub_bce_with_logits(ember_device_t *dev, const float *logits,
                                           const float *targets, size_t n, float *loss_p,
                                           float *grad_p)
{
    return unsupported("bce_with_logits");
}
static ember_status_t stub_crossnet_forward(ember_device_t *dev, const float *dense,
                                            const float *pooled, size_t tables, size_t batch,
                                            size_t dim, size_t layers, size_t rank,
                                            const float *params, float *saved, float *out)
{
    return unsupported("crossnet_forward");
}
static ember_status_t stub_crossnet_backward(ember_device_t *dev, const float *dense,
                                             const float *pooled, size_t tables, size_t batch,
                                             size_t dim, size_t layers, size_t rank,
                                             const float *params, const float *saved,
                                             const float *grad_out, float *grad_params,
                                             float *grad_dense, float *grad_pooled)
{
    return unsupported("crossnet_backward");
}

static const ember_device_ops_t stub_ops = {
        .size = sizeof(ember_device_ops_t),
        .name = "stub",
        .mem_type = EMBER_MEM_HOST,
        .open = stub_open,
        .close = stub_close,
        .mem_alloc = stub_mem_alloc,
        .mem_free = stub_mem_free,
        .mem_copy = stub_mem_copy,
        .mem_zero = stub_mem_zero,
        .synchronize = stub_synchronize,
        .bag_forward = stub_bag_forward,
        .bag_backward = stub_bag_backward,
        .linear_forward = stub_linear_forward,
        .linear_backward = stub_linear_backward,
        .relu_forward = stub_relu_forward,
        .relu_backward = stub_relu_backward,
        .cross_entropy = stub_cross_entropy,
        .comm_create = stub_comm_create,
        .comm_destroy = stub_comm_destroy,
        .allreduce_start = stub_allreduce_start,
        .allreduce_test = stub_allreduce_test,
        .allreduce_wait = stub_allreduce_wait,
        .comm_error = stub_comm_error,
        .host_alloc = stub_host_alloc,
        .host_free = stub_host_free,
        .rows_gather = stub_rows_gather,
        .rows_scatter = stub_rows_scatter,
        .parts_combine = stub_parts_combine,
        .parts_split = stub_parts_split,
        .network_path = stub_network_path,
        .bag_backward_update = stub_bag_backward_update,
        .interaction_forward = stub_interaction_forward,
        .interaction_backward = stub_interaction_backward,
        .bce_with_logits = stub_bce_with_logits,
        .crossnet_forward = stub_crossnet_forward,
        .crossnet_backward = stub_crossnet_backward,
};

/* Copy the backend's non-NULL slots over the stubs.  A backend built against
 * an older (shorter) table only overlays the slots it knows. */
static void overlay(ember_device_ops_t *dst, const ember_device_ops_t *src)
{
    size_t n = src->size < sizeof(*dst) ? src->size : sizeof(*dst);
    *dst = stub_ops;
#define OVERLAY_(field)                                                                  \
    do {                                                                                 \
        if (offsetof(ember_device_ops_t, field) + sizeof(dst->field) <= n && src->field) \
            dst->field = src->field;                                                     \
    } while (0)
    OVERLAY_(name);
    OVERLAY_(open);
    OVERLAY_(close);
    OVERLAY_(mem_alloc);
    OVERLAY_(mem_free);
    OVERLAY_(mem_copy);
    OVERLAY_(mem_zero);
    OVERLAY_(synchronize);
    OVERLAY_(bag_forward);
    OVERLAY_(bag_backward);
    OVERLAY_(linear_forward);
    OVERLAY_(linear_backward);
    OVERLAY_(relu_forward);
    OVERLAY_(relu_backward);
    OVERLAY_(cross_entropy);
    OVERLAY_(comm_create);
    OVERLAY_(comm_destroy);
    OVERLAY_(allreduce_start);
    OVERLAY_(allreduce_test);
    OVERLAY_(allreduce_wait);
    OVERLAY_(comm_error);
    OVERLAY_(host_alloc);
    OVERLAY_(host_free);
    OVERLAY_(rows_gather);
    OVERLAY_(rows_scatter);
    OVERLAY_(parts_combine);
    OVERLAY_(parts_split);
    OVERLAY_(network_path);
    OVERLAY_(bag_backward_update);
    OVERLAY_(interaction_forward);
    OVERLAY_(interaction_backward);
    OVERLAY_(bce_with_logits);
    OVERLAY_(crossnet_forward);
    OVERLAY_(crossnet_backward);
#undef OVERLAY_
    dst->mem_type = src->mem_type;
    dst->size = sizeof(*dst);
}

/*
 * The CUDA backend.  Linked in statically (the GPU tests, the GPU bench, a
 * GPU-only build), its symbols are here; otherwise it is a plugin,
 * libember-cuda.so, loaded on first use, so a process that never asks for
 * "cuda" (every PS, the master, CPU trainers) does not map CUDA's libraries
 * (over 100 MiB resident for cuBLAS alone).  The plugin links libember.so,
 * whose public ember_* functions it uses; a program that links the engine
 * statically exports the same functions (lib/: ember_link_engine), and the
 * plugin binds to the program's, the one copy of the engine's state.
 */
extern const ember_device_ops_t ember_device_cuda_ops __attribute__((weak));
int ember_cuda_device_count(void) __attribute__((weak));

typedef struct {
    int tried;
    const ember_device_ops_t *ops;
    int (*count)(void);
} cuda_backend_t;

static cuda_backend_t cuda_backend;

#ifdef EMBER_CUDA_PLUGIN_LIBDIR
#define CUDA_PLUGIN_FILE "libember-cuda.so"

/* dlopen @path; on failure append "PATH (why)" to @tried. */
static void *plugin_open(const char *path, char *tried, size_t tried_len)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle)
        return handle;
    const char *why = dlerror();
    size_t n = strlen(path), used = strlen(tried);
    if (strncmp(why, path, n) == 0 && strncmp(why + n, ": ", 2) == 0)
        why += n + 2; /* "PATH: cannot open ...": the path is said already */
    snprintf(tried + used, tried_len - used, "%s%s (%s)", used ? "; " : "", path, why);
    return NULL;
}

/*
 * The folder where libember's own shared objects are, seen from the module
 * that holds this code: a shared library (libember.so, in the build tree's
 * lib/ as in an install's libdir) is there itself; a program that links the
 * engine statically (libember.a, ember-train) finds it as an installed
 * libember would be, EMBER_CUDA_PLUGIN_BIN_TO_LIB from its own folder
 * (P/bin/../lib; build/tools/../lib).  Empty when it cannot be told.
 */
static void libember_dir(char *dir, size_t dir_len)
{
    const struct link_map *map = NULL;
    char path[PATH_MAX];
    Dl_info self;
    int n;

    dir[0] = '\0';
    if (!dladdr1((const void *)libember_dir, &self, (void **)&map, RTLD_DL_LINKMAP) ||
        !self.dli_fname || !map)
        return;
    /* The main program's link map has the name ""; its dli_fname is argv[0],
     * which may be a bare name: /proc/self/exe says where it is. */
    int program = map->l_name[0] == '\0';
    if (program) {
        ssize_t len = readlink("/proc/self/exe", path, sizeof(path));
        if (len <= 0 || (size_t)len >= sizeof(path))
            return;
        path[len] = '\0';
    } else if (snprintf(path, sizeof(path), "%s", self.dli_fname) >= (int)sizeof(path)) {
        return;
    }
    char *slash = strrchr(path, '/');
    if (!slash)
        return;
    *slash = '\0';
    if (program)
        n = snprintf(dir, dir_len, "%s/%s", path, EMBER_CUDA_PLUGIN_BIN_TO_LIB);
    else
        n = snprintf(dir, dir_len, "%s", path[0] ? path : "/");
    if (n < 0 || (size_t)n >= dir_len) {
        dir[0] = '\0'; /* too long to be a path: not looked in */
        return;
    }
    char *real = realpath(dir, NULL); /* "bin/../lib" -> "lib" */
    if (real && strlen(real) < dir_len)
        strcpy(dir, real);
    free(real);
}

/* DIR/libember-cuda.so into @path; 0 when it does not fit. */
static int plugin_path(char *path, size_t path_len, const char *dir)
{
    int n = snprintf(path, path_len, "%s/" CUDA_PLUGIN_FILE, dir);
    return n > 0 && (size_t)n < path_len;
}

/*
 * Where the plugin is looked for: EMBER_CUDA_PLUGIN when set (only there);
 * else where libember is (libember_dir() above); else the configured install
 * libdir.  Never the build tree by a compiled-in path.  Errors name every
 * path tried.
 */
static void *plugin_load(char *path, size_t path_len)
{
    char tried[3 * PATH_MAX];
    char dir[PATH_MAX];
    void *handle;

    tried[0] = '\0';
    const char *env = ember_config_str("EMBER_CUDA_PLUGIN");
    if (env && *env) {
        snprintf(path, path_len, "%s", env);
        if ((handle = plugin_open(path, tried, sizeof(tried))))
            return handle;
        ember_error("device", "cannot load the CUDA backend EMBER_CUDA_PLUGIN=%s", tried);
        return NULL;
    }
    libember_dir(dir, sizeof(dir));
    if (dir[0] && plugin_path(path, path_len, dir) &&
        (handle = plugin_open(path, tried, sizeof(tried))))
        return handle;
    if (strcmp(dir, EMBER_CUDA_PLUGIN_LIBDIR) != 0 &&
        plugin_path(path, path_len, EMBER_CUDA_PLUGIN_LIBDIR) &&
        (handle = plugin_open(path, tried, sizeof(tried))))
        return handle;
    ember_error("device",
                "cannot load the CUDA backend: tried %s; set "
                "EMBER_CUDA_PLUGIN to the path of " CUDA_PLUGIN_FILE,
                tried);
    return NULL;
}
#endif

static const cuda_backend_t *cuda_load(void)
{
    if (cuda_backend.tried)
        return &cuda_backend;
    cuda_backend.tried = 1;
    if (&ember_device_cuda_ops && ember_cuda_device_count) {
        ember_debug("device", "the CUDA backend is linked in");
        cuda_backend.ops = &ember_device_cuda_ops;
        cuda_backend.count = ember_cuda_device_count;
        return &cuda_backend;
    }
#ifdef EMBER_CUDA_PLUGIN_LIBDIR
    char path[PATH_MAX];
    void *handle = plugin_load(path, sizeof(path));
    if (!handle)
        return &cuda_backend;
    cuda_backend.ops = dlsym(handle, "ember_device_cuda_ops");
    cuda_backend.count = (int (*)(void))dlsym(handle, "ember_cuda_device_count");
    if (!cuda_backend.ops || !cuda_backend.count) {
        ember_error("device", "%s is not an ember CUDA backend", path);
        cuda_backend.ops = NULL;
        cuda_backend.count = NULL;
        return &cuda_backend;
    }
    ember_debug("device", "loaded the CUDA backend %s", path);
#endif
    return &cuda_backend;
}

int ember_device_have_cuda(void)
{
#ifdef EMBER_CUDA_PLUGIN_LIBDIR
    return 1;
#else
    return &ember_device_cuda_ops != NULL;
#endif
}

int ember_device_cuda_loaded(void)
{
    return cuda_load()->ops != NULL;
}

int ember_device_cuda_count(void)
{
    const cuda_backend_t *cuda = cuda_load();
    return cuda->count ? cuda->count() : 0;
}

ember_status_t ember_device_open(const char *kind, int local_rank, ember_device_t **dev_p)
{
    const ember_device_ops_t *backend;
    ember_device_t *dev;
    ember_status_t status;

    if (!kind || !dev_p) {
        ember_error("device", "open: no device kind given");
        return EMBER_ERR_INVALID_PARAM;
    }
    if (strcmp(kind, "cpu") == 0) {
        backend = &ember_device_cpu_ops;
    } else if (strcmp(kind, "cuda") == 0) {
        backend = cuda_load()->ops;
        if (!backend) {
            if (!ember_device_have_cuda())
                ember_error("device", "device 'cuda' requested, but this ember was "
                                      "built without CUDA (no nvcc at configure time)");
            return EMBER_ERR_NO_DEVICE;
        }
    } else {
        ember_error("device", "unknown device '%s' (expected cpu or cuda)", kind);
        return EMBER_ERR_INVALID_PARAM;
    }

    dev = calloc(1, sizeof(*dev));
    if (!dev) {
        ember_error("device", "open %s: out of memory", kind);
        return EMBER_ERR_NO_MEMORY;
    }
    overlay(&dev->backend, backend);
    dev->ops = dev->backend;
#ifndef EMBER_DEVICE_NO_TRANSPORT
    /* The dense allreduce: the backend's, or the host ring on staged copies
     * where the backend cannot form the group (engine/device/device_comm.c). */
    ember_device_comm_wrap(&dev->ops);
#endif
    dev->local_rank = local_rank;
    status = dev->ops.open(local_rank, &dev->head.impl);
    if (status != EMBER_OK) {
        free(dev);
        return status; /* the backend logged the cause */
    }
    *dev_p = dev;
    return EMBER_OK;
}

void ember_device_close(ember_device_t *dev)
{
    if (!dev)
        return;
    dev->ops.close(dev->head.impl);
    free(dev);
}

const ember_device_ops_t *ember_device_ops(const ember_device_t *dev)
{
    return &dev->ops;
}

const ember_device_ops_t *ember_device_backend_ops(const ember_device_t *dev)
{
    return &dev->backend;
}

ember_mem_type_t ember_device_mem_type(const ember_device_t *dev)
{
    return dev->ops.mem_type;
}

const char *ember_device_name(const ember_device_t *dev)
{
    return dev->ops.name;
}
