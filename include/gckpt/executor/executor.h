/* The verification executor: a backend interface (memory, copies, the recipe's primitive
 * ops forward and backward, the optimizer, memory and time readings) and an interpreter
 * that performs a schedule's events (gckpt_schedule_build) on a backend with real
 * tensors. Two backends implement the interface: host (CPU reference, exact byte
 * counting) and cuda.
 *
 * Numerics: tensors are stored in their recipe dtype (2-byte tensors are bf16, or fp16
 * under amp-fp16) and computed in fp32. Every kernel is deterministic, so a layer's
 * recompute reproduces its forward bit for bit, and dropout draws from a counter-based
 * generator keyed by (step, micro-step, layer, op, element): the loss and every gradient
 * are identical for every every_n_layers / offload setting on one backend. */
#ifndef GCKPT_EXECUTOR_H
#define GCKPT_EXECUTOR_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/device.h"
#include "gckpt/core/dtype.h"
#include "gckpt/executor/comm.h"
#include "gckpt/executor/exec_rng.h"
#include "gckpt/core/model.h"
#include "gckpt/core/quant_layout.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/setting.h"
#include "gckpt/util/util.h"

/* ---- tensors ------------------------------------------------------------------------ */

/* A view of backend memory: n elements of dtype dt (gckpt_dtype) at p (NULL: absent).
 * rows x cols: the shape of the tensor it holds, as the recipe shapes it (gckpt_shape at
 * this micro-batch and sequence; 0 where no tensor). n may differ from rows x cols where
 * the buffer is the storage a view reads (an expanded kv head, a role of gpt2's packed
 * q/k/v); a buffer an op writes never does (op_sizes.h). */
typedef struct {
    void *p;
    uint64_t n;
    uint8_t dt;
    uint64_t cols, rows;
    /* a strided column view (a block of a fused projection's output, each head's first
     * columns: read in place): element i is p[gckpt_view_index(i, cols, vW, voff, vblk,
     * vstride)]; vW 0: dense; vstep > 1: a block's elements vstep apart (a strided slice
     * of a block view, DeepSeek's x[..., 0::2] of each head's rotary columns:
     * gckpt_view_index_step; the host backend only) */
    uint64_t vW, voff, vblk, vstride, vstep;
} gckpt_xt;

/* The elements of one rank's piece of collective op (comm.h) with these buffers over world
 * ranks; false (err says why) when their sizes or dtypes do not agree with op. */
bool gckpt_coll_count(gckpt_coll op, const gckpt_xt *send, const gckpt_xt *recv, int world, uint64_t *count,
                      gckpt_err *err);

typedef enum { GCKPT_MEM_DEVICE, GCKPT_MEM_PINNED } gckpt_mem_kind;

/* INTERRUPTED: the executor's stop flag (gckpt_exec_opts.stop) was set; the step or the
 * setup stopped between two events (allocations stay held until released). */
typedef enum { GCKPT_XS_OK, GCKPT_XS_OOM, GCKPT_XS_ERROR, GCKPT_XS_INTERRUPTED } gckpt_xstatus;

/* One forward or backward of a recipe op. Forward reads in[] and writes out[]; backward
 * reads gout and what it needs of in[] / out[] (the tensors the op saved), and writes
 * every non-NULL gin[k] completely (zeros where input k gets no gradient). An op whose
 * inputs are one storage (gpt2's packed q, k, v) has gin[k] only for the first of them. */
typedef struct {
    const gckpt_recipe *r;
    const gckpt_op *op;
    const gckpt_model *m;
    uint64_t b, s;          /* micro-batch and sequence length */
    gckpt_xt in[GCKPT_OP_MAX_IN], out[2];
    gckpt_xt gin[GCKPT_OP_MAX_IN], gout, ws;
    uint64_t rng;           /* dropout stream (step, micro-step, layer, op) */
    uint64_t window;        /* the sliding window the op applies (gckpt_key_visible), 0:
                             * causal only: a sliding layer's SDPA, a sliding mask's source */
    double rope_theta;      /* a rotary source's theta (Gemma 3: the pair of its layer type) */
} gckpt_xcall;

/* A quantized weight's statistics on the backend (QLoRA): its layout
 * (gckpt_quant_layout_of) and the buffer of each piece it stores (NULL where none); the
 * packed / int8 weight itself is the parameter's buffer. */
typedef struct {
    const gckpt_quant_layout *layout;
    void *stat[GCKPT_NQS];
} gckpt_xquant;

/* Parameter initialisation: uniform(-scale, scale) from a counter-based generator keyed
 * by key, or the constant scale. */
typedef enum { GCKPT_INIT_UNIFORM, GCKPT_INIT_CONST } gckpt_init;

/* One parameter tensor's optimizer update. */
typedef struct {
    gckpt_optimizer kind;
    gckpt_xt param, grad;
    gckpt_xt s1, s2;        /* adamw: exp_avg, exp_avg_sq (param dtype, or u8 codes for 8-bit);
                               sgd: s1 = momentum buffer */
    gckpt_xt s1_absmax, s2_absmax; /* adamw-8bit blockwise scales (fp32, one per 256) */
    gckpt_xt temp;          /* adamw-foreach: the sqrt(exp_avg_sq) temporary */
    double lr, beta1, beta2, eps, weight_decay, momentum;
    uint64_t step;          /* 1-based */
} gckpt_optcall;

typedef struct {
    uint64_t allocated, allocated_peak;   /* bytes held through alloc (device kind) */
    uint64_t pinned, pinned_peak;         /* pinned host bytes */
    bool has_device;                      /* device_* below are measured */
    uint64_t device_used_peak;            /* max (total - free) of cudaMemGetInfo */
    uint64_t device_baseline;             /* (total - free) after context + library init */
    uint64_t device_total;
} gckpt_memstat;

/* What the backend runs on, for the report. */
typedef struct {
    char kind[8];           /* "cpu" or "gpu" */
    char name[256];         /* CPU model or GPU name */
    uint64_t memory_bytes;  /* host RAM or GPU memory */
    char driver[32];        /* GPU driver version ("" on the CPU) */
    char runtime[32];       /* CUDA runtime version ("" on the CPU) */
    char arch[32];          /* compute capability, or the CPU's logical cores */
} gckpt_devinfo;

/* Context parallelism's ring geometry (the backend's ring_* ops): cp ranks, this one's rank, s
 * tokens per rank, pos every rank's token positions [cp][s] on the host (gckpt_cp_positions). */
typedef struct {
    uint32_t cp, rank;
    uint64_t s;
    const uint64_t *pos;
} gckpt_ring;

typedef struct gckpt_backend gckpt_backend;
struct gckpt_backend {
    const char *name;       /* "host", "cuda" */
    gckpt_err err;          /* the last error */
    gckpt_xstatus (*alloc)(gckpt_backend *be, gckpt_mem_kind k, uint64_t bytes, void **out);
    void (*release)(gckpt_backend *be, gckpt_mem_kind k, void *p, uint64_t bytes);
    /* device <-> pinned host on the compute stream */
    gckpt_xstatus (*copy)(gckpt_backend *be, void *dst, const void *src, uint64_t bytes, bool to_host);
    /* ordinary host memory <-> device (setup and inspection; synchronous) */
    gckpt_xstatus (*upload)(gckpt_backend *be, void *dst, const void *src, uint64_t bytes);
    gckpt_xstatus (*download)(gckpt_backend *be, void *dst, const void *src, uint64_t bytes);
    gckpt_xstatus (*init)(gckpt_backend *be, gckpt_xt t, gckpt_init how, float scale, uint64_t key);
    /* SOURCE op: ids / labels come from host (n int64 values), the rest are computed */
    gckpt_xstatus (*source)(gckpt_backend *be, gckpt_source what, const gckpt_xcall *c, const int64_t *host);
    gckpt_xstatus (*forward)(gckpt_backend *be, const gckpt_xcall *c);
    gckpt_xstatus (*backward)(gckpt_backend *be, const gckpt_xcall *c);
    /* out (rows x cols of the compute dtype, f32 / bf16 / f16) = the quantized weight w
     * (its packed or int8 buffer) dequantized with its statistics q, as bitsandbytes does
     * (quant4.h, quant8.h) */
    gckpt_xstatus (*dequant)(gckpt_backend *be, const gckpt_xquant *q, gckpt_xt w, gckpt_xt out);
    /* dst = a + b elementwise, or dst = b when a.p is NULL; dst may be a; dtypes may
     * differ (computed in fp32, rounded to dst's) */
    gckpt_xstatus (*add)(gckpt_backend *be, gckpt_xt dst, gckpt_xt a, gckpt_xt b);
    /* dst = value (seed gradient of the loss) */
    gckpt_xstatus (*set_scalar)(gckpt_backend *be, gckpt_xt dst, float value);
    gckpt_xstatus (*optim)(gckpt_backend *be, const gckpt_optcall *c);
    /* order-independent hash of the bits of t (salted) and the sum of squares */
    gckpt_xstatus (*checksum)(gckpt_backend *be, gckpt_xt t, uint64_t salt, uint64_t *hash, double *sumsq);
    /* remember a fp32 scalar (the loss) in slot; read all slots later (synchronises) */
    gckpt_xstatus (*record)(gckpt_backend *be, gckpt_xt scalar, int slot);
    gckpt_xstatus (*read_records)(gckpt_backend *be, float *out, int n);
    void (*memstat)(gckpt_backend *be, gckpt_memstat *m);
    void (*reset_peaks)(gckpt_backend *be);
    gckpt_xstatus (*timer_start)(gckpt_backend *be);
    gckpt_xstatus (*timer_stop)(gckpt_backend *be, double *seconds);
    gckpt_xstatus (*sync)(gckpt_backend *be);
    /* the persistent cuBLAS workspace the schedule counts (NULL, 0: none) */
    gckpt_xstatus (*set_workspace)(gckpt_backend *be, void *p, uint64_t bytes);
    void (*describe)(gckpt_backend *be, gckpt_devinfo *d);
    /* Join the run's communicator (comm.h; the one-rank one until then), before the first
     * collective: the host backend keeps it, the CUDA backend creates its NCCL
     * communicator from a unique id rank 0 broadcasts over it. */
    gckpt_xstatus (*attach)(gckpt_backend *be, gckpt_comm *comm);
    /* A collective among the ranks on this backend's buffers (comm.h says what each op
     * moves; gckpt_coll_count the sizes): host over the communicator, CUDA with NCCL on
     * the compute stream. Schedule events that move data between ranks call it directly. */
    gckpt_xstatus (*collective)(gckpt_backend *be, gckpt_coll op, gckpt_redop red, gckpt_xt send, gckpt_xt recv,
                                int root);
    /* HSDP's process groups (gckpt_coll_group, comm.h's split): join group g's communicator
     * (kept, not owned), and a collective within it. NULL: the backend runs collectives over
     * every rank only, and gckpt-run refuses a plan with process groups on it. The CUDA
     * backend makes an NCCL communicator per group (cuda_nccl.cu). */
    gckpt_xstatus (*attach_group)(gckpt_backend *be, gckpt_coll_group g, gckpt_comm *comm);
    gckpt_xstatus (*collective_group)(gckpt_backend *be, gckpt_coll_group g, gckpt_coll op, gckpt_redop red,
                                      gckpt_xt send, gckpt_xt recv);
    /* Tensor parallelism's vocabulary-parallel ops (interp_tp.c). An op's temporaries outside
     * the allocator's counts, as a kernel's own scratch (host: malloc; CUDA: the stream's
     * pool), freed by scratch_free after the op's last use of them on the stream. */
    gckpt_xstatus (*scratch)(gckpt_backend *be, uint64_t bytes, void **out);
    void (*scratch_free)(gckpt_backend *be, void *p);
    /* height rows of width bytes, src's rows spitch bytes apart, to dst's dpitch apart
     * (backend memory, on the compute stream): a block of columns of a row-major matrix */
    gckpt_xstatus (*copy2d)(gckpt_backend *be, void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                            uint64_t width, uint64_t height);
    /* embedding_rowwise's lookup: row k of out (out.n / ids.n columns) is row ids[k] - lo of
     * tab (the rank's rows [lo, lo + tab.n / columns) of the vocabulary) when the id is one of
     * them, else zeros; ids int64. An id outside [0, vocab): the host backend fails, the CUDA
     * backend writes zeros (a kernel cannot stop the step). */
    gckpt_xstatus (*embed_rows)(gckpt_backend *be, gckpt_xt out, gckpt_xt tab, gckpt_xt ids, uint64_t lo,
                                uint64_t vocab);
    /* Context parallelism's ring attention (interp_cp.c; FINDINGS R-CP-6, R-EXEC-6), one K/V
     * block at a time; the interpreter does the exchanges (collective / collective_group) and
     * owns every float buffer below (backend memory, fp32). cat(K, V) of one rank: its K rows
     * [b, s, kv heads, qk_dim] then its V rows [b, s, kv heads, v_dim], n floats.
     * ring_pack: this rank's cat(K, V) of the SDPA call into kv (kv NULL: only *n).
     * ring_block_fwd: the call's queries against block src's cat(K, V) (keys visible when their
     *   position, g->pos, is not later than the query's): out [b, s, heads, v_dim] rounded to the
     *   call's dtype, lse [b, heads, s]; -inf where the row sees no key of the block.
     * ring_merge: a block into the fp32 running (acc, acc_lse) as torch's _SDPAMerger (acc_lse
     *   -inf: no block yet, the block is copied; a block row with lse -inf is left out).
     * ring_store: the merged out and lse into the call's out[0], out[1].
     * ring_block_bwd: block src's backward with the merged out / lse the call holds: its dq added
     *   into dq [b, s, heads, qk_dim], its dK / dV into dkv (block src's cat layout), each rounded
     *   to the call's dtype first (the block kernel's outputs).
     * ring_grad: dq and this rank's summed cat(dK, dV) into the call's input gradients. */
    gckpt_xstatus (*ring_pack)(gckpt_backend *be, const gckpt_xcall *c, float *kv, uint64_t *n);
    gckpt_xstatus (*ring_block_fwd)(gckpt_backend *be, const gckpt_xcall *c, const gckpt_ring *g, uint32_t src,
                                    const float *kv, float *out, float *lse);
    gckpt_xstatus (*ring_merge)(gckpt_backend *be, const gckpt_xcall *c, float *acc, float *acc_lse,
                                const float *out, const float *lse);
    gckpt_xstatus (*ring_store)(gckpt_backend *be, const gckpt_xcall *c, const float *acc, const float *acc_lse);
    gckpt_xstatus (*ring_block_bwd)(gckpt_backend *be, const gckpt_xcall *c, const gckpt_ring *g, uint32_t src,
                                    const float *kv, float *dq, float *dkv);
    gckpt_xstatus (*ring_grad)(gckpt_backend *be, const gckpt_xcall *c, const float *dq, const float *dkv);
    void (*destroy)(gckpt_backend *be);
};

#define GCKPT_MAX_RECORDS 64

/* ---- the interpreter ---------------------------------------------------------------- */

typedef struct {
    uint64_t seed;          /* weights, data and dropout */
    double lr;              /* optimizer learning rate (default 1e-4 when 0) */
    double init_std;        /* weight init standard deviation (default 0.02, HF's) */
    double bias_std;        /* biases (and gpt_oss's sinks) uniform with this standard deviation
                             * instead of 0, so that every bias reaches the numbers (checks
                             * against another implementation: tools/exec_dump.c); 0: zeros */
    /* NULL, or a flag (set by a signal handler) read before every event of a step and
     * every persistent allocation of the setup: nonzero stops there with
     * GCKPT_XS_INTERRUPTED; gckpt_exec_release_all / gckpt_exec_free then free it all. */
    const volatile sig_atomic_t *stop;
    /* This process's rank of the setting's layout (gckpt/core/parallel.h) and the ranks in
     * all (0 read as 1): its gpus x nodes for a multi-GPU setting, 1 otherwise. Rank r's
     * micro-step k trains the global batch's micro-step r x grad_accum + k (data and
     * dropout keyed by it), so one process running grad_accum x world micro-steps sees the
     * same samples. Collectives go through the backend's (attach it first). */
    int rank, world;
    /* The run's communicator (NULL: one rank), for the few host values the ranks exchange
     * outside the schedule (FSDP2's gradient checksum over the ranks' shards). */
    gckpt_comm *comm;
} gckpt_exec_opts;

typedef struct gckpt_exec gckpt_exec;

/* Whether the executor has kernels for model m (a family a backend executes, the family
 * table's host / cuda; its rotary tables and padding row), under either attention and at
 * any sequence; false: *err says why. */
bool gckpt_exec_model_ok(const gckpt_model *m, gckpt_err *err);
/* Build the recipe, context and schedule of setting s and check them; nothing is
 * allocated on the backend yet. NULL with err set on bad input. */
gckpt_exec *gckpt_exec_new(gckpt_backend *be, const gckpt_model *m, const gckpt_device *d,
                           const gckpt_setting *s, const gckpt_exec_opts *o, gckpt_err *err);
/* The recipe the executor performs for setting s on any backend: the CUDA target's, under
 * the setting's fine-tuning method (full, LoRA, QLoRA). */
void gckpt_exec_recipe(const gckpt_model *m, const gckpt_setting *s, gckpt_recipe *r);
/* The schedule and context (for the prediction: gckpt_walk). */
const gckpt_ctx *gckpt_exec_ctx(const gckpt_exec *x);
const gckpt_schedule *gckpt_exec_schedule(const gckpt_exec *x);

/* Allocate the persistent state (weights, optimizer states, workspace) and initialise
 * it. OOM when the backend cannot hold it. */
gckpt_xstatus gckpt_exec_setup(gckpt_exec *x, gckpt_err *err);

typedef void (*gckpt_grads_fn)(gckpt_exec *x, void *user);

typedef struct {
    bool update;            /* perform the optimizer step (false: stop before it) */
    bool checksum;          /* hash all gradients before the optimizer step */
    gckpt_grads_fn on_grads;/* called with all gradients complete, before the optimizer */
    void *user;
} gckpt_step_opts;

typedef struct {
    double loss;            /* mean of the micro-steps' losses */
    double seconds;         /* wall time of the step (backend timer) */
    uint64_t grad_hash;     /* with checksum */
    double grad_norm;       /* with checksum: sqrt of the sum of squares of all gradients */
    size_t events;          /* events performed */
    float micro_loss[GCKPT_MAX_RECORDS]; /* each micro-step's loss (the first GCKPT_MAX_RECORDS) */
    int nmicro;
} gckpt_step_result;

/* One training step: every event of the schedule (the later micro-step's events
 * grad_accum - 1 times), the optimizer and zero_grad. On OOM, error or a stop request
 * (INTERRUPTED) the step stops;
 * call gckpt_exec_free (or gckpt_exec_release_all) to free everything. */
gckpt_xstatus gckpt_exec_step(gckpt_exec *x, const gckpt_step_opts *o, gckpt_step_result *res,
                              gckpt_err *err);

/* Parameter access (layer is ignored for embedding / head parameters). The tensor must
 * be a PARAM of the recipe. Values are converted to fp32 on the host. */
uint64_t gckpt_exec_param_numel(const gckpt_exec *x, int tensor);
/* Whether a layer's parameter tensor is one of layer `layer`'s (block types with parameters
 * of their own: DeepSeek-V3's dense layers have other tensors than its MoE layers); an
 * embedding or head parameter: layer 0 only. Readers iterate the layers and skip the rest. */
bool gckpt_exec_param_in_layer(const gckpt_exec *x, int tensor, int layer);
gckpt_xstatus gckpt_exec_read_param(gckpt_exec *x, int layer, int tensor, float *out, gckpt_err *err);
gckpt_xstatus gckpt_exec_write_param(gckpt_exec *x, int layer, int tensor, const float *in, gckpt_err *err);
/* Raw bytes of a parameter's .grad (only inside on_grads); bytes = numel * dtype size. */
gckpt_xstatus gckpt_exec_read_grad_raw(gckpt_exec *x, int layer, int tensor, void *out, uint64_t bytes,
                                       gckpt_err *err);
gckpt_xstatus gckpt_exec_read_grad(gckpt_exec *x, int layer, int tensor, float *out, gckpt_err *err);

/* The input ids and labels (micro_batch x seq each) of the latest micro-step run, as the
 * executor made them (to run the same batch elsewhere: tools/exec_dump.c). */
void gckpt_exec_batch(const gckpt_exec *x, const int64_t **ids, const int64_t **labels);

/* Free every backend allocation the executor holds (idempotent). */
void gckpt_exec_release_all(gckpt_exec *x);
void gckpt_exec_free(gckpt_exec *x);

#endif
