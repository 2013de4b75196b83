/*
 * ember: the device interface.
 *
 * The engine runs its numeric ops (EmbeddingBag, Linear, ReLU, cross
 * entropy) and its dense allreduce through one ops table, so the same engine
 * code drives the CPU and a GPU.  Two backends plug in:
 *   - "cpu":  engine/device/device_cpu.c, the engine's own CBLAS/C ops and the host
 *             ring allreduce over the transport (engine/comm/allreduce.h);
 *   - "cuda": cuda/, CUDA kernels + CUB, cuBLAS, NCCL.  Built only when a
 *             CUDA compiler was found (EMBER_HAVE_CUDA).
 *
 * Memory: every pointer an op takes lives in the device's memory
 * (ember_device_mem_type(): EMBER_MEM_HOST for "cpu", EMBER_MEM_CUDA for
 * "cuda") unless its doc says "host".  Move data with mem_copy.  All ops on
 * one device are ordered (one CUDA stream); an op that returns a host value
 * (bag_backward's row count, cross_entropy's loss) waits for the device, the
 * others only enqueue and return (asynchronous errors surface at the next
 * synchronizing call).
 *
 * The ops mirror <ember/embedding_bag.h> and the engine's dense, DLRM
 * interaction, DLRM-DCN cross net, loss and allreduce ops (engine/ops/dense.h,
 * engine/ops/interaction.h, engine/ops/crossnet.h, engine/ops/loss.h,
 * engine/comm/allreduce.h in the source tree); their semantics (modes, padding, empty bags, the sparse
 * sorted-unique backward, mean reductions) are those headers', bit-for-bit
 * on the CPU backend and within float rounding on CUDA.
 *
 * Table layout (libfabric/rdma-core style): it starts with its size; a
 * backend fills what it supports with designated initialisers and
 * ember_device_open() overlays the rest with stubs that return
 * ERR_UNSUPPORTED, so callers never test for NULL.
 *
 * Threading: a device is used by one thread at a time (like the transport).
 *
 * Ownership: every buffer an op takes is borrowed for the op (until it
 * completes on the device: do not free or rewrite it before the next
 * synchronizing call); what mem_alloc/host_alloc give is the caller's
 * (mem_free/host_free, before the device is closed).
 *
 * Errors of the ops: ERR_INVALID_PARAM (NULL buffers, sizes or a kind the
 * op refuses), ERR_NO_MEMORY, ERR_UNSUPPORTED (a slot this backend does not
 * fill: its stub), ERR_NUMERIC (a loss that is not finite), the driver's
 * (CUDA: out of memory ERR_NO_MEMORY, no usable GPU ERR_NO_DEVICE, a bad
 * argument ERR_INVALID_PARAM, anything else ERR_IO, each logged with the
 * CUDA error's name), the communicator's (the allreduce slots: a lost or
 * hung member ERR_PEER_LOST / ERR_TIMED_OUT, named).  An asynchronous
 * error surfaces at the next synchronizing call.
 */
#ifndef EMBER_DEVICE_H
#define EMBER_DEVICE_H

#include <ember/embedding_bag.h> /* the batch and pool types */
#include <ember/status.h>
#include <ember/transport.h> /* ember_mem_type_t, ember_tp_t */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_device ember_device_t;
typedef struct ember_device_comm ember_device_comm_t; /* backend-defined */
typedef struct ember_device_req ember_device_req_t;   /* backend-defined */

/** Direction of a copy, seen from the device. */
typedef enum {
    EMBER_COPY_HOST_TO_DEVICE,
    EMBER_COPY_DEVICE_TO_HOST,
    EMBER_COPY_DEVICE_TO_DEVICE
} ember_copy_kind_t;

/* Version of the table layout; bump when a slot is added or changes its
 * parameters (3: parts_combine takes the maxima's places; 4:
 * bag_backward_update; 5: DLRM's interaction and loss; 6: DLRM-DCN's
 * cross net). */
#define EMBER_DEVICE_OPS_VERSION 6

/* Floats of crossnet_forward's @saved (version 6): each layer's input x_l
 * and gate [batch][n], and its V_l x_l [batch][rank]. */
#define EMBER_CROSSNET_SAVED(batch, n, rank, layers) ((layers) * (batch) * (2 * (n) + (rank)))
/* Floats of the cross net's parameters: per layer W [n][rank], V [rank][n], b [n]. */
#define EMBER_CROSSNET_PARAMS(n, rank, layers) ((layers) * (2 * (n) * (rank) + (n)))

/*
 * One sparse optimizer step for bag_backward_update (version 4): the
 * engine's sparse optimizer (engine/ops/optimizer.h, ember_opt_config_t and
 * the state ember_opt_state_arrays lists), its arrays in device memory.
 * The struct itself is host memory, read during the call only.
 */
typedef struct {
    int kind; /* ember_opt_kind_t: 0 SGD, 1 Adagrad, 2 row-wise Adagrad, 3 Adam */
    float lr;
    float momentum, dampening; /* SGD */
    int nesterov;              /* SGD */
    float lr_decay;            /* Adagrad */
    float eps;                 /* Adagrad, row-wise Adagrad, Adam */
    float beta1, beta2;        /* Adam */
    uint64_t step;             /* the table-wide step count, this step included (>= 1) */
    /* State, indexed by table row: SGD's momentum buffer, Adagrad's sum,
     * Adam's exp_avg ([rows, dim] each), row-wise Adagrad's accumulator
     * ([rows]); NULL for SGD without momentum. */
    float *state0;
    float *state1;      /* Adam's exp_avg_sq [rows, dim]; else NULL */
    uint8_t *started;   /* SGD with momentum and dampening != 0: [rows]; else NULL */
    uint32_t *row_step; /* Adam with a step count per row: [rows]; NULL: @step is t */
} ember_device_opt_t;

typedef struct ember_device_ops {
    size_t size;               /* sizeof(ember_device_ops_t) of the backend */
    const char *name;          /* "cpu", "cuda" */
    ember_mem_type_t mem_type; /* where its buffers live */

    /* ---- lifetime (called by ember_device_open/close only) ------------- */
    /* Open device @local_rank (GPU ordinal = local_rank % visible count);
     * *impl_p is the backend's state, kept until close.  May block (driver
     * init).  ERR_NO_DEVICE when the hardware is absent. */
    ember_status_t (*open)(int local_rank, void **impl_p);
    void (*close)(void *impl);

    /* ---- memory --------------------------------------------------------- */
    /* Allocate @bytes of device memory (0 bytes gives NULL and OK).
     * Not for the hot path: allocate once, reuse. */
    ember_status_t (*mem_alloc)(ember_device_t *dev, size_t bytes, void **ptr_p);
    void (*mem_free)(ember_device_t *dev, void *ptr);
    /* Ordered copy.  Returns once @src may be reused by the caller; a
     * DEVICE_TO_HOST copy returns once the data is on the host. */
    ember_status_t (*mem_copy)(ember_device_t *dev, void *dst, const void *src, size_t bytes,
                               ember_copy_kind_t kind);
    ember_status_t (*mem_zero)(ember_device_t *dev, void *ptr, size_t bytes);
    /* Wait for everything enqueued; reports asynchronous errors. */
    ember_status_t (*synchronize)(ember_device_t *dev);

    /* ---- EmbeddingBag (<ember/embedding_bag.h>) ------------------------ */
    /* @batch: the struct is host memory, its arrays device memory; the
     * batch must have passed ember_bag_validate() (on the host copy). */
    ember_status_t (*bag_forward)(ember_device_t *dev, const float *table, int64_t rows, size_t dim,
                                  const ember_bag_batch_t *batch, const ember_bag_opts_t *opts,
                                  float *out_p, int64_t *argmax_p);
    /* @nrows_p is host memory (this op waits for the device). */
    ember_status_t (*bag_backward)(ember_device_t *dev, const float *table, int64_t rows,
                                   size_t dim, const ember_bag_batch_t *batch,
                                   const ember_bag_opts_t *opts, const float *grad_out,
                                   const int64_t *argmax, int64_t *grad_rows_p, float *grad_p,
                                   size_t *nrows_p, float *grad_weights_p);

    /* ---- dense (engine/ops/dense.h) ------------------------------------------ */
    ember_status_t (*linear_forward)(ember_device_t *dev, const float *x, size_t batch, size_t in,
                                     size_t out, const float *weight, const float *bias,
                                     float *y_p);
    ember_status_t (*linear_backward)(ember_device_t *dev, const float *x, size_t batch, size_t in,
                                      size_t out, const float *weight, const float *grad_y,
                                      int accumulate, float *grad_x_p, float *grad_weight_p,
                                      float *grad_bias_p);
    ember_status_t (*relu_forward)(ember_device_t *dev, const float *x, size_t n, float *y_p);
    ember_status_t (*relu_backward)(ember_device_t *dev, const float *x, const float *grad_y,
                                    size_t n, float *grad_x_p);

    /* ---- loss (engine/ops/loss.h) -------------------------------------------- */
    /* @loss_p is host memory (this op waits).  As on the CPU, nothing is
     * written on error (CUDA checks targets and finiteness first). */
    ember_status_t (*cross_entropy)(ember_device_t *dev, const float *logits, size_t batch,
                                    size_t classes, const int64_t *targets, float *loss_p,
                                    float *grad_p);

    /* ---- dense allreduce (engine/comm/allreduce.h's shape) -------------------- */
    /* Create a communicator over transport ranks @ranks (member order = NCCL
     * rank order); every member passes the same list and @op_base (the CPU
     * ring's RPC op ids; the CUDA backend uses it to name its rendezvous
     * key).  @tp is borrowed and must outlive the communicator; the CUDA
     * backend accepts tp == NULL when nranks == 1.  Blocks until every member
     * joined (EMBER_CONNECT_TIMEOUT). */
    ember_status_t (*comm_create)(ember_device_t *dev, ember_tp_t *tp, const int *ranks, int nranks,
                                  uint16_t op_base, ember_device_comm_t **comm_p);
    void (*comm_destroy)(ember_device_comm_t *comm);
    /* In-place sum (average: / nranks) of @count floats of device memory at
     * @data, ordered after every op enqueued before on this device; @data is
     * borrowed until the request is waited for.  Never blocks. */
    ember_status_t (*allreduce_start)(ember_device_comm_t *comm, float *data, size_t count,
                                      int average, ember_device_req_t **req_p);
    /* INPROGRESS while running, then the final status; progresses the
     * transport and polls the communicator's health (the watchdog). */
    ember_status_t (*allreduce_test)(ember_device_req_t *req);
    /* Block until done (bounded: a lost peer or the timeout aborts the
     * communicator and fails the request), then free @req. */
    ember_status_t (*allreduce_wait)(ember_device_req_t *req);
    /* The error that broke the communicator (names the peer), or "". */
    const char *(*comm_error)(const ember_device_comm_t *comm);

    /* ---- network buffers (version 2) ------------------------------------- */
    /* Host memory the device copies to and from fastest (pinned on CUDA),
     * for the buffers that meet the network: lookup replies, gradient
     * pushes.  Not for the hot path: allocate once, reuse.  Without a slot
     * of its own a backend gets malloc/free. */
    ember_status_t (*host_alloc)(ember_device_t *dev, size_t bytes, void **ptr_p);
    void (*host_free)(ember_device_t *dev, void *ptr);
    /* ---- table rows (version 2): a parameter server's shard on a device -- */
    /* out[i, :] = table[rows[i], :] for i < n (rows, table, out: device
     * memory; rows valid, as the caller checked them). */
    ember_status_t (*rows_gather)(ember_device_t *dev, const float *table, size_t dim,
                                  const int64_t *rows, size_t n, float *out);
    /* table[rows[i], :] = in[i, :] (rows distinct). */
    ember_status_t (*rows_scatter)(ember_device_t *dev, float *table, size_t dim,
                                   const int64_t *rows, size_t n, const float *in);

    /* ---- a trainer's pools from its shards (version 2) ------------------ */
    /* All device memory.  @parts holds @nparts partial pools [bags, dim],
     * part p at parts + p * @stride floats; @counts [nparts][bags]: entries
     * of each bag on each shard; @bag_counts [bags]: entries of each bag.
     * Sum: the parts added in shard order; mean: that sum times
     * 1.0f / bag_counts[b] (bags without entries stay 0); max: the largest
     * value over the shards where the bag has entries, of equal values the
     * one of the lowest place (@places: part p's uint32 [bags, dim] at
     * places + p * @places_stride, where in its bag each value's entry is:
     * the bag's first maximal entry wins, as in PyTorch), and @winner (int16
     * [bags, dim]) that shard, -1 for an empty bag (which pools to 0).  Bit
     * for bit what engine/ops/bag_parts.c does on the host. */
    ember_status_t (*parts_combine)(ember_device_t *dev, const float *parts, size_t stride,
                                    uint32_t nparts, size_t bags, size_t dim, ember_bag_mode_t mode,
                                    const uint32_t *counts, const uint32_t *bag_counts,
                                    const uint32_t *places, size_t places_stride, float *out,
                                    int16_t *winner);
    /* Each shard's gradient of its partial pool from the pooled gradient
     * @grad [bags, dim], into @grads (part p at grads + p * @stride): sum: a
     * copy; mean: times 1.0f / bag_counts[b] (a bag without entries: a
     * copy); max: where @winner is p, else 0. */
    ember_status_t (*parts_split)(ember_device_t *dev, const float *grad, uint32_t nparts,
                                  size_t bags, size_t dim, ember_bag_mode_t mode,
                                  const uint32_t *bag_counts, const int16_t *winner, float *grads,
                                  size_t stride);

    /* How this device's data meets the network: *text_p gets one line for
     * the log (NULL: the device is host memory), *mem_p where the buffers
     * handed to the transport may be (EMBER_MEM_CUDA: lookup replies land in
     * and gradient pushes leave from device memory; EMBER_MEM_HOST: host
     * buffers, staged).  The first call decides (the CUDA backend asks UCX,
     * as EMBER_GPUDIRECT says), later ones repeat it.  ERR_UNSUPPORTED:
     * EMBER_GPUDIRECT asks for a path this machine or build cannot give;
     * ERR_INVALID_PARAM: an unknown value. */
    ember_status_t (*network_path)(ember_device_t *dev, ember_mem_type_t *mem_p,
                                   const char **text_p);

    /* ---- fused backward + sparse optimizer step (version 4) ------------- */
    /* bag_backward's sorted-unique row gradients of @batch applied to
     * @table [rows, dim] and to @opt's state in place, as
     * ember_opt_step_sparse (engine/ops/optimizer.h) would apply them: rows
     * the batch touched (padding excluded) are updated, even where their
     * gradient is 0 (entries outside every bag), the others untouched.  No
     * row gradient is stored and no weight gradient produced.  @opt (host
     * memory) is read during the call only.  Never waits for the device.
     * CPU: ember_bag_backward then the engine's optimizer, bit for bit;
     * CUDA: each row's contributions summed in position order in
     * sub-segments of BAG_UPDATE_SUB (engine/ops/bag_update.h), the same
     * bits from run to run, within float rounding of the CPU's.
     * Errors: ERR_INVALID_PARAM (NULL buffers, an unknown kind, state the
     * kind needs missing). */
    ember_status_t (*bag_backward_update)(ember_device_t *dev, float *table, int64_t rows,
                                          size_t dim, const ember_bag_batch_t *batch,
                                          const ember_bag_opts_t *opts, const float *grad_out,
                                          const int64_t *argmax, const ember_device_opt_t *opt);
    /* ---- DLRM's dense half (version 5; engine/ops/interaction.h) -------- */
    /* InteractionArch over @batch examples of F = tables + 1 vectors of
     * @dim: @dense [batch][dim] (DenseArch's output) and @pooled
     * [tables][batch][dim] (table t's at t * batch * dim); @out [batch][dim +
     * F(F-1)/2]: the dense vector, then every dot i < j in
     * torch.triu_indices order. */
    ember_status_t (*interaction_forward)(ember_device_t *dev, const float *dense,
                                          const float *pooled, size_t tables, size_t batch,
                                          size_t dim, float *out);
    /* Its backward from @grad_out [batch][width]: @grad_dense [batch][dim]
     * and @grad_pooled [tables][batch][dim], each fully written. */
    ember_status_t (*interaction_backward)(ember_device_t *dev, const float *dense,
                                           const float *pooled, size_t tables, size_t batch,
                                           size_t dim, const float *grad_out, float *grad_dense,
                                           float *grad_pooled);
    /* Mean BCE with logits (engine/ops/loss.h) of @logits against
     * @targets (floats in [0, 1]), both [n]; @loss_p is host memory (this
     * op waits); @grad_p [n] or NULL.  Nothing is written on error
     * (ERR_NUMERIC: a loss that is not finite). */
    ember_status_t (*bce_with_logits)(ember_device_t *dev, const float *logits,
                                      const float *targets, size_t n, float *loss_p, float *grad_p);
    /* ---- DLRM-DCN's interaction (version 6; engine/ops/crossnet.h) ---- */
    /* x0 [batch][n], n = (tables + 1) * dim: each example's @dense [batch][dim] vector, then
     * its pooled features (@pooled [tables][batch][dim]); then @layers of TorchRec's
     * LowRankCrossNet, x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l, the last into @out
     * [batch][n].  @params: W_0..W_{L-1} ([n][rank] each), V_0..V_{L-1} ([rank][n]),
     * b_0..b_{L-1} ([n]), TorchRec's state_dict order.  @saved: EMBER_CROSSNET_SAVED(batch, n,
     * rank, layers) floats the backward reads.
     * Every buffer is device memory, the caller's, borrowed for the op; @saved
     * is written here and must stay untouched until the backward that reads
     * it; @out and @saved may not overlap each other or an input; @pooled
     * may be NULL when @tables is 0.  Never waits for the device.  Errors:
     * ERR_INVALID_PARAM (a zero batch, dim, layers or rank, a NULL buffer, a
     * shape beyond what BLAS takes: over INT_MAX elements in one [batch][n],
     * [n][rank] or [batch][rank] matrix or in the parameters), the driver's. */
    ember_status_t (*crossnet_forward)(ember_device_t *dev, const float *dense, const float *pooled,
                                       size_t tables, size_t batch, size_t dim, size_t layers,
                                       size_t rank, const float *params, float *saved, float *out);
    /* Its backward from @grad_out [batch][n]: @grad_params (written, params' layout),
     * @grad_dense [batch][dim] and @grad_pooled [tables][batch][dim], each fully written:
     * overwritten, not accumulated.  @saved: the forward's, of the same
     * inputs and @params; @dense and @pooled are checked as the forward's
     * (their values come from @saved).  CPU: engine/ops/crossnet.c, bit for
     * bit; CUDA: cuBLAS, within float rounding of it.  Takes scratch of 3
     * [batch][n] and a [batch][rank] (CPU: allocated per call; CUDA: the
     * device's grow-only scratch, which may synchronize when it grows).
     * Errors: as the forward, and ERR_NO_MEMORY. */
    ember_status_t (*crossnet_backward)(ember_device_t *dev, const float *dense,
                                        const float *pooled, size_t tables, size_t batch,
                                        size_t dim, size_t layers, size_t rank, const float *params,
                                        const float *saved, const float *grad_out,
                                        float *grad_params, float *grad_dense, float *grad_pooled);
} ember_device_ops_t;

/**
 * Open a device: @kind "cpu" or "cuda"; @local_rank picks the GPU (ordinal
 * local_rank % device count; ignored for "cpu").  Logs the device chosen
 * once (name, ordinal, memory).
 * Blocks while the driver starts.  @kind borrowed; *@dev_p the caller's
 * (ember_device_close).  Errors: ERR_NO_DEVICE ("cuda" without a visible
 * GPU, or a build without CUDA; logged as an error naming why),
 * ERR_INVALID_PARAM (unknown kind), ERR_NO_MEMORY.
 */
ember_status_t ember_device_open(const char *kind, int local_rank, ember_device_t **dev_p);

/** Close the device and free its state (waiting for what is enqueued);
 * whatever was allocated on it, and every communicator, must be freed
 * first.  NULL is a no-op. */
void ember_device_close(ember_device_t *dev);

/* These never block and cannot fail: */
/** The device's ops table (complete: unsupported slots are stubs);
 * borrowed, valid until the device is closed. */
const ember_device_ops_t *ember_device_ops(const ember_device_t *dev);

/** Where this device's buffers live. */
ember_mem_type_t ember_device_mem_type(const ember_device_t *dev);

/** "cpu" or "cuda" (static storage). */
const char *ember_device_name(const ember_device_t *dev);

/**
 * The CPU's own BLAS kernels for the "cpu" device's dense layers: OpenBLAS
 * picks its kernels once, as it loads, from OPENBLAS_CORETYPE or the CPU's
 * model, and on a model it does not know (virtual machines often report a
 * generic one) falls back to its oldest, SSE3 ones, 3-5x slower than the
 * CPU's AVX2 or AVX-512 kernels.  When the BLAS in use is OpenBLAS,
 * OPENBLAS_CORETYPE is unset and OpenBLAS runs a core without AVX2 on a
 * CPU with AVX2 and FMA, this sets OPENBLAS_CORETYPE (SkylakeX with
 * AVX-512 F, BW, DQ and VL; else Haswell), logs it (info) and executes the
 * program again with @argv (its own file, /proc/self/exe's target: the
 * same process, its pid and open files kept); otherwise it returns 0 and changes nothing.  At most
 * once: the variable is set the second time.  Call it first thing in main,
 * before any thread is started.  Returns -1 (errno set, a warning logged)
 * when the execution failed; the process goes on with the slow kernels.
 */
int ember_device_blas_check(char **argv);

/* The device's first member is its backend's state: the backends (which
 * sit below the engine and do not link engine/device/device.c) read it inline.
 * Everything else in the struct is private to engine/device/device.c. */
struct ember_device_head {
    void *impl;
};

/** The backend's state, for the backend's own ops. */
static inline void *ember_device_impl(const ember_device_t *dev)
{
    return ((const struct ember_device_head *)(const void *)dev)->impl;
}

/** Non-zero when this build has the CUDA backend.  Any thread. */
int ember_device_have_cuda(void);

/** Non-zero when the CUDA backend is here: linked in, or its plugin loaded
 * (which this call tries once, blocking while it loads; a failure is logged
 * with the paths tried).  Call it first from one thread. */
int ember_device_cuda_loaded(void);

/** Visible CUDA GPUs; 0 without a driver, a GPU, or the CUDA backend.  May
 * block while the driver starts (and load the plugin, as above). */
int ember_device_cuda_count(void);

#ifdef __cplusplus
}
#endif
#endif
