/* Schedule: the events of one steady-state training step for one setting, grouped by
 * the step's segments (gckpt/core/step.h), derived from the recipe by one simulator that
 * decides every tensor's lifetime: forward consumers, tensors saved for backward,
 * checkpointed inputs, recompute, offload copies, gradients, the optimizer step.
 * (core: read by the planner and the executor) */
#ifndef GCKPT_SCHEDULE_H
#define GCKPT_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/collective.h"
#include "gckpt/core/device.h"
#include "gckpt/core/model.h"
#include "gckpt/core/par_state.h"
#include "gckpt/core/params.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/setting.h"
#include "gckpt/core/step.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GCKPT_C_WEIGHTS,
    GCKPT_C_GRADS,
    GCKPT_C_OPTIMIZER,
    GCKPT_C_ACTIVATIONS,  /* saved / in-flight activations of non-checkpointed work */
    GCKPT_C_CHECKPOINTS,  /* checkpointed layer inputs kept on the device */
    GCKPT_C_RECOMPUTE,    /* activations re-created in backward by checkpointed layers */
    GCKPT_C_LOGITS,       /* logits, fp32 upcast, log-softmax and their grads */
    GCKPT_C_BACKWARD,     /* activation gradients and backward temporaries */
    GCKPT_C_WEIGHT_CASTS, /* autocast's low-precision weight copies (AMP) */
    GCKPT_C_OPT_TEMP,     /* optimizer-step temporaries */
    GCKPT_C_WORKSPACE,    /* cuBLAS workspace */
    GCKPT_C_QUANT_WEIGHTS, /* QLoRA: the packed 4-bit / int8 base weights (not in weights) */
    GCKPT_C_QUANT_STATS,   /* QLoRA: their quantization statistics (absmax, code books, SCB) */
    GCKPT_C_PAGED_STATES,  /* paged optimizers: states in CUDA managed memory, outside the
                            * allocator (torch.cuda.max_memory_allocated does not see them) */
    GCKPT_C_PARALLEL,      /* several GPUs (core/parallel.c): what the mode adds on a rank - DDP's
                            * buckets, gathered parameters, reduce buffers, step counters, buffers */
    GCKPT_NCOMP
} gckpt_component;

extern const char *const gckpt_component_names[GCKPT_NCOMP];
/* Components a plan writes and reads only when they hold bytes (QLoRA's, paged states, a
 * parallel mode's), so that
 * gckpt.plan/1 and /2 files without them stay valid. */
static inline bool gckpt_component_optional(int k) { return k >= GCKPT_C_QUANT_WEIGHTS; }

/* ---- events ---------------------------------------------------------------------------- */

typedef enum {
    GCKPT_EV_ALLOC,           /* a buffer of tensor `tensor` (grad: its gradient): numel of dtype */
    GCKPT_EV_ALLOC_SCRATCH,   /* an op's temporaries (tensor -1): an fp32 accumulator of numel
                               * elements (SDPA's dq), or raw bytes (dtype uint8) the kernels
                               * need not touch (pow's, a broadcast operand's, the CPU target's);
                               * or a parallel wrapper's flat buffer of numel elements of dtype
                               * (comp PARALLEL: all-gather / reduce-scatter buffers; GRADS: FSDP2's
                               * fp32 sharded gradients of a unit), which a COLLECTIVE names */
    GCKPT_EV_FREE,
    GCKPT_EV_TO_CHECKPOINT,   /* a checkpointed layer keeps its input: its bytes move from comp
                               * to CHECKPOINTS */
    GCKPT_EV_BECOME_GRAD,     /* a summed gradient (inst) becomes parameter `tensor`'s .grad:
                               * its bytes move from comp (BACKWARD) to GRADS */
    GCKPT_EV_HOST_ALLOC,      /* the layer's pinned host buffer */
    GCKPT_EV_HOST_FREE,
    GCKPT_EV_D2H,             /* inst copied into the layer's host buffer (compute stream) */
    GCKPT_EV_H2D,             /* inst filled from it, in the order the copies went out */
    GCKPT_EV_FWD,             /* forward of recipe op `op` */
    GCKPT_EV_RECOMPUTE,       /* forward of op `op` re-run in backward */
    GCKPT_EV_BWD,             /* backward of op `op` */
    GCKPT_EV_GRAD_SUM,        /* sum.dst = sum.a + sum.b in dst's dtype (dst may be a) */
    GCKPT_EV_GRAD_CAST,       /* sum.dst = sum.b converted to dst's dtype (a gradient made
                               * wider than its input) */
    GCKPT_EV_GRAD_ACCUMULATE, /* parameter `tensor`'s .grad += sum.b (AccumulateGrad) */
    GCKPT_EV_OPT_TEMP_ALLOC,  /* the optimizer step's temporaries (every parameter's slice) */
    GCKPT_EV_OPT_STEP,        /* every parameter's update (a memory-bound pass) */
    GCKPT_EV_OPT_TEMP_FREE,
    GCKPT_EV_ZERO_GRAD,       /* zero_grad(set_to_none=True): every .grad freed (bytes: all) */
    GCKPT_EV_COLLECTIVE,      /* several GPUs: data moves between the ranks (arg.coll); memory
                               * is the ALLOC / FREE events around it */
    GCKPT_NEVENT
} gckpt_event_kind;

extern const char *const gckpt_event_names[GCKPT_NEVENT];

/* An instance that does not exist (an operand not needed). */
#define GCKPT_NOINST UINT32_MAX

/* One event. Operands name instances (ids unique within a schedule):
 *  FWD / RECOMPUTE: fwd.in[k] = input k (GCKPT_NOINST for a parameter: found by tensor
 *      and the segment's layer), fwd.out[k] = output k; a view's output is its input 0.
 *  BWD: bwd.grad_in[k] receives the gradient of input k: a fresh buffer, a temporary a
 *      following GRAD_* event accumulates, or bwd.grad_out itself when the gradient passes
 *      through unchanged; GCKPT_NOINST when none is needed (a parameter's is its .grad or
 *      a temporary). bwd.workspace: the op's scratch. The saved tensors are the operands
 *      of the latest FWD / RECOMPUTE of the op in the same segment's layer. */
typedef struct {
    uint32_t in[GCKPT_OP_MAX_IN], out[2];
    uint32_t workspace; /* the op's forward temporaries (ALLOC_SCRATCH), e.g. a quantized
                         * linear's dequantized weight; GCKPT_NOINST: none */
} gckpt_fwd_args;
typedef struct {
    uint32_t grad_in[GCKPT_OP_MAX_IN], grad_out, workspace;
} gckpt_bwd_args;
typedef struct {
    uint32_t dst, a, b;
} gckpt_sum_args;

/* A collective of a parallel wrapper (core/sim_parallel.c). The event's dtype is the dtype
 * on the wire, numel the elements of one rank's piece (gckpt/core/collective.h's count),
 * bytes the full buffer (all-gather output, reduce-scatter input, all-reduce buffer); tensor
 * -1 for a whole unit, else the one parameter. src and dst are instances of this schedule
 * (the ALLOC_SCRATCH / ALLOC before), GCKPT_NOINST for a buffer that persists outside it (the
 * rank's partition or shard, DeepSpeed's flat gradient partitions):
 *  FSDP2, per unit (tensor -1):
 *   ALL_GATHER      src = the rank's shards cast and packed (numel), dst = the flat output
 *                   (numel x ranks), then copied out into the unsharded parameters;
 *   REDUCE_SCATTER  src = the unit's gradients packed (numel x ranks), dst = the rank's
 *                   reduced shard (numel; cast into the fp32 sharded gradient after);
 *  ZeRO-3, per parameter:
 *   ALL_GATHER      src = GCKPT_NOINST (the partition), dst = the gathered parameter;
 *   REDUCE_SCATTER  src = dst = GCKPT_NOINST (the .grad goes through the persistent ipg
 *                   bucket into the persistent gradient partition);
 *  ZeRO-2, per parameter:
 *   ALL_REDUCE      src = dst = the ipg bucket (numel: the parameter's elements);
 *  DDP, per bucket, opening the optimizer segment (after the last micro-step's backward):
 *   ALL_REDUCE      src = dst = GCKPT_NOINST (the persistent fp32 bucket copy), index the bucket
 *                   (gckpt_ddp_buckets), unit the section of its first gradient;
 *  ZeRO-1, per ipg bucket flush, opening the optimizer segment:
 *   ALL_REDUCE      src = dst = GCKPT_NOINST (the ipg bucket the first backward made), index
 *                   the flush (gckpt_zero1_flushes), unit the section of its first parameter.
 * (BROADCAST: none in a schedule yet.) unit: the recipe section whose parameters move
 * (embedding, block: the segment's layer, head); index: the wrapper unit (which layer), or
 * DDP's bucket / ZeRO-1's flush. */
typedef struct {
    uint8_t kind; /* gckpt_coll (gckpt/core/collective.h) */
    uint8_t unit; /* gckpt_section */
    uint32_t src, dst;
    uint64_t index; /* the wrapper unit: 0 the embedding, 1 + l layer l, L + 1 the head */
    /* the process group (gckpt_coll_group): the world, or under HSDP the shard group (the
     * all-gathers and reduce-scatters) or the replicate group (the all-reduce of each unit's
     * reduced shard); group_size its ranks (0: the world's) */
    uint8_t group;
    uint32_t group_size;
} gckpt_coll_args;

/* What a parallel mode's event is where its kind and component leave it open (set by
 * core/sim.c and core/sim_parallel.c, read by the executor instead of sizes or order). */
typedef enum {
    GCKPT_PE_NONE,
    GCKPT_PE_IPG_BUCKET,     /* ALLOC_SCRATCH: a ZeRO-1/2 ipg bucket (reduce_bucket_size elements) */
    GCKPT_PE_GRAD_PARTITION, /* ALLOC_SCRATCH: ZeRO-2's reduced gradients of the rank's partition
                              * (comp GRADS: the step's; PARALLEL: a later micro-step's) */
    GCKPT_PE_RS_INPUT,       /* ALLOC_SCRATCH: FSDP2's reduce-scatter input, which the unit's
                              * .grad FREEs that follow are packed into */
    GCKPT_PE_OUTSIDE_PARTITION /* ZERO_GRAD: ZeRO-1/2 free the .grad outside the rank's
                                * partition before the step (the rest after it) */
} gckpt_par_event;

typedef struct {
    uint8_t kind;    /* gckpt_event_kind */
    uint8_t comp;    /* memory events: the component its bytes count in (moves: from) */
    uint8_t dtype;   /* ALLOC, ALLOC_SCRATCH: gckpt_dtype */
    bool grad;       /* ALLOC: a gradient of `tensor` */
    uint8_t par;     /* gckpt_par_event: a parallel mode's buffer or event; GCKPT_PE_NONE else */
    int16_t tensor;  /* memory, copy and gradient events: the recipe tensor; -1 none */
    int16_t op;      /* FWD, RECOMPUTE, BWD: the recipe op; -1 otherwise */
    uint32_t inst;   /* memory and copy events: the instance */
    uint64_t numel;  /* ALLOC, ALLOC_SCRATCH: elements */
    uint64_t bytes;  /* memory events: bytes allocated, freed or moved; copies: bytes copied */
    double seconds;  /* compute, copy, gradient and optimizer events */
    double flops;    /* compute events */
    union {
        gckpt_fwd_args fwd;
        gckpt_bwd_args bwd;
        gckpt_sum_args sum;
        gckpt_coll_args coll;
    } arg;
} gckpt_event;

/* A segment of the step, its events [begin, end), and how many times it runs in the step
 * (its micro-step's gckpt_micro_run.repeat: a later micro-step's grad_accum - 1, or grad_accum - 2
 * and 1 where the synchronising one is apart; the optimizer's 1). */
typedef struct {
    gckpt_seg seg;
    size_t begin, end;
    uint64_t repeat;
} gckpt_sched_seg;

typedef struct {
    gckpt_event *ev;
    size_t n, cap;
    gckpt_sched_seg *seg;
    size_t nseg, seg_cap;
    bool oom; /* a buffer could not grow */
} gckpt_schedule;

void gckpt_schedule_free(gckpt_schedule *s);

/* ---- memory accounting -------------------------------------------------------------------
 * Current device bytes per component and pinned host bytes: the one accounting of memory
 * events, applied by the step's walk (gckpt/core/step_walk.h). */
typedef struct {
    int64_t cur[GCKPT_NCOMP];
    int64_t total, host;
} gckpt_mem;

enum { GCKPT_MEM_DEVICE_UP = 1, GCKPT_MEM_HOST_UP = 2 };

/* Applies e; GCKPT_MEM_DEVICE_UP / GCKPT_MEM_HOST_UP when it allocated (a peak may follow). */
static inline int gckpt_mem_apply(gckpt_mem *m, const gckpt_event *e)
{
    int64_t b = (int64_t)e->bytes;
    switch (e->kind) {
    case GCKPT_EV_ALLOC: case GCKPT_EV_ALLOC_SCRATCH: case GCKPT_EV_OPT_TEMP_ALLOC:
        m->cur[e->comp] += b;
        m->total += b;
        return GCKPT_MEM_DEVICE_UP;
    case GCKPT_EV_FREE: case GCKPT_EV_OPT_TEMP_FREE: case GCKPT_EV_ZERO_GRAD:
        m->cur[e->comp] -= b;
        m->total -= b;
        return 0;
    case GCKPT_EV_TO_CHECKPOINT:
        m->cur[e->comp] -= b;
        m->cur[GCKPT_C_CHECKPOINTS] += b;
        return 0;
    case GCKPT_EV_BECOME_GRAD:
        m->cur[e->comp] -= b;
        m->cur[GCKPT_C_GRADS] += b;
        return 0;
    case GCKPT_EV_HOST_ALLOC:
        m->host += b;
        return GCKPT_MEM_HOST_UP;
    case GCKPT_EV_HOST_FREE:
        m->host -= b;
        return 0;
    default: return 0;
    }
}

/* Everything the simulator needs, resolved once per (model, setting, micro-batch, seq). */
typedef struct {
    const gckpt_model *model;
    const gckpt_device *dev;
    const gckpt_recipe *recipe;
    gckpt_setting set;
    uint64_t tbytes[GCKPT_MAX_TENSORS]; /* allocation bytes of each tensor (rounded) */
    uint64_t raw[GCKPT_MAX_TENSORS];    /* exact bytes */
    uint64_t numel[GCKPT_MAX_TENSORS];  /* elements */
    uint64_t tokens;                     /* micro_batch * seq */
    /* ops whose forward is a view of input 0 (recipe.h: view_fwd, and batched_copy at
     * micro-batch 1): no allocation, the output is input 0's storage (storage[t]: the
     * tensor whose allocation holds t); their backward runs as recipe ops do */
    bool fwd_view[GCKPT_MAX_OPS];
    int16_t storage[GCKPT_MAX_TENSORS];
    gckpt_params params;                 /* the parameter state table */
    uint64_t model_params;               /* gckpt_param_count of the model (MFU's count), once per
                                          * context: it traces a recipe of its own */
    /* persistent state, bytes (the table's totals), and the cuBLAS workspace */
    uint64_t weights, grads, opt_states, opt_temp, workspace;
    uint64_t quant_weights, quant_stats; /* QLoRA's packed weights and statistics (not in weights) */
    uint64_t paged_states;               /* paged optimizer states (not in opt_states) */
    uint64_t parallel;                   /* a parallel mode's per-rank additions (GCKPT_C_PARALLEL) */
    uint64_t step_grads;                 /* of grads, what stays allocated into the optimizer step
                                          * (all but under ZeRO-1/2: the rank's reduced partition) */
    double opt_seconds;                  /* one optimizer step */
    gckpt_par_state par;                 /* the parallel mode's own state (gckpt/core/par_state.h) */
    /* each op at this setting: forward [0] and backward [1] seconds, matmul FLOPs and
     * workspace bytes; the backward's promoted copies (CPU target) */
    double op_s[2][GCKPT_MAX_OPS], op_flops[2][GCKPT_MAX_OPS];
    uint64_t op_ws[2][GCKPT_MAX_OPS], op_promo[GCKPT_MAX_OPS];
    /* TP: the temporaries of an op's output redistribution, made once its inputs are released
     * (lm_head's colwise_gather_output, gckpt_tp_gather_bytes); 0 elsewhere */
    uint64_t op_gather[GCKPT_MAX_OPS];
} gckpt_ctx;

/* The most bytes a step may allocate in total (persistent state + every allocation of
 * its micro-steps, a bound computed from the recipe): far beyond any GPU, small enough
 * that no byte count of the simulation can overflow. */
#define GCKPT_MAX_STEP_BYTES ((uint64_t)1 << 62)

/* Resolve sizes; false (err set) when a size overflows 64 bits or the step's bound
 * exceeds GCKPT_MAX_STEP_BYTES. */
bool gckpt_ctx_init(gckpt_ctx *c, const gckpt_model *m, const gckpt_device *d,
                    const gckpt_recipe *r, const gckpt_setting *s, gckpt_err *err);

/* Bytes one non-checkpointed layer keeps for its backward (the tensors its ops save,
 * counted once per storage; shared tensors such as rotary tables excluded). */
uint64_t gckpt_layer_saved_bytes(const gckpt_ctx *c);
/* The same for any section (embedding, block, head). */
uint64_t gckpt_section_saved_bytes(const gckpt_ctx *c, int sec);
/* ... of layer 0 when its input needs no gradient (recipe frozen0; else as the others). */
uint64_t gckpt_layer0_frozen_saved_bytes(const gckpt_ctx *c);

/* Build the steady-state step of c's setting: its segments in order (gckpt_step_next)
 * with their events. false when out of memory. */
bool gckpt_schedule_build(const gckpt_ctx *c, gckpt_schedule *out);

/* Persistent memory at the start of a steady-state step (weights, states, workspace). */
void gckpt_persistent(const gckpt_ctx *c, int64_t comp[GCKPT_NCOMP]);

#ifdef __cplusplus
}
#endif

#endif
