/* Schedule: the ordered events of one steady-state training step for one setting,
 * derived from the recipe by one simulator that decides every tensor's lifetime:
 * forward consumers, tensors saved for backward, checkpointed inputs, recompute,
 * offload copies, gradients, the optimizer step. */
#ifndef GCKPT_SCHEDULE_H
#define GCKPT_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/device.h"
#include "gckpt/core/model.h"
#include "gckpt/core/params.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/setting.h"

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
    GCKPT_NCOMP
} gckpt_component;

extern const char *const gckpt_component_names[GCKPT_NCOMP];

typedef enum {
    GCKPT_PH_FORWARD,
    GCKPT_PH_LOSS,
    GCKPT_PH_BACKWARD,
    GCKPT_PH_OPTIMIZER,
    GCKPT_NPHASE
} gckpt_phase;

extern const char *const gckpt_phase_names[GCKPT_NPHASE];

typedef enum {
    GCKPT_EV_ALLOC,      /* device allocation (bytes, comp) */
    GCKPT_EV_FREE,       /* device free (bytes, comp) */
    GCKPT_EV_RETAG,      /* bytes move from comp to comp2 (a kept input becomes a checkpoint;
                          * with comp2 = GRADS: instance inst becomes the .grad of param op) */
    GCKPT_EV_HOST_ALLOC, /* pinned host allocation */
    GCKPT_EV_HOST_FREE,
    GCKPT_EV_D2H,        /* copy to pinned host on the compute stream */
    GCKPT_EV_H2D,
    GCKPT_EV_FWD,        /* forward of recipe op `op` */
    GCKPT_EV_RECOMPUTE,  /* forward of op `op` re-run in backward */
    GCKPT_EV_BWD,        /* backward of op `op` */
    GCKPT_EV_OPT,        /* optimizer step (memory-bound pass) */
    GCKPT_EV_GRAD_ADD,   /* arg[0] = arg[1] + arg[2] (gradient accumulation; may be in place) */
} gckpt_event_kind;

/* Operand bindings (arg) of events, for executors; GCKPT_NOINST where there is none.
 *  FWD / RECOMPUTE: arg[k] (k < nin) = data instance of input k (NOINST for parameters:
 *      they are found by (layer, tensor)); arg[4], arg[5] = instances of out[0], out[1].
 *  BWD: arg[k] = instance that receives the gradient of input k: a fresh buffer, a
 *      temporary that a following GRAD_ADD accumulates, or arg[4] itself when the
 *      gradient passes through unchanged; NOINST when none is needed. For a parameter
 *      it is its .grad (a GRADS allocation) or a temporary. arg[4] = gradient of out[0],
 *      arg[5] = backward workspace. Saved tensors are the op's inputs and outputs as
 *      bound by the latest FWD / RECOMPUTE of the op in that layer.
 *  GRAD_ADD: arg[0] = arg[1] + arg[2], converted to arg[0]'s dtype; arg[1] = NOINST:
 *      arg[0] = arg[2] converted (a gradient computed in fp32 for a 16-bit input); for
 *      a parameter (op = its tensor) arg[0] = arg[1] = NOINST: add arg[2] into .grad.
 *  D2H: arg[0] = device instance copied out to the layer's host buffer. H2D: arg[0] =
 *      device instance filled from the layer's host buffer. */
#define GCKPT_NOINST UINT32_MAX

typedef struct {
    uint8_t kind, comp, comp2, phase;
    uint8_t micro;    /* 0: first micro-step (no grads yet), 1: a later one (grads exist) */
    uint8_t grad;     /* ALLOC: 1 if it is a gradient (of tensor op) */
    uint8_t dtype;    /* ALLOC: bytes per element of the buffer */
    int16_t op;       /* recipe op (compute) or recipe tensor (memory events); -1 none */
    int32_t layer;    /* -1 embedding, 0..L-1 block, L head/loss, L+1 optimizer */
    uint32_t inst;    /* tensor instance id for memory events */
    uint64_t bytes;
    double seconds;   /* compute and copy events */
    double flops;     /* compute events */
    uint32_t arg[6];  /* operand bindings, see above */
} gckpt_event;

typedef struct {
    gckpt_event *ev;
    size_t n, cap;
    bool oom;         /* event buffer could not grow */
} gckpt_events;

void gckpt_events_free(gckpt_events *e);

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
    /* persistent state, bytes (the table's totals), and the cuBLAS workspace */
    uint64_t weights, grads, opt_states, opt_temp, workspace;
    double opt_seconds;                  /* one optimizer step */
    /* each op at this setting: forward [0] and backward [1] seconds, matmul FLOPs and
     * workspace bytes; the backward's promoted copies (CPU target) */
    double op_s[2][GCKPT_MAX_OPS], op_flops[2][GCKPT_MAX_OPS];
    uint64_t op_ws[2][GCKPT_MAX_OPS], op_promo[GCKPT_MAX_OPS];
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

/* Build the full steady-state step: micro-step 1 (no grads at start), one later
 * micro-step when grad_accum > 1 (its time counts grad_accum - 1 times), the optimizer
 * step and zero_grad. */
bool gckpt_schedule_build(const gckpt_ctx *c, gckpt_events *out);

/* --- the simulator's building blocks, shared with the fast evaluator ------------- */

typedef enum { GCKPT_LAYER_PLAIN, GCKPT_LAYER_CKPT, GCKPT_LAYER_CKPT_OFFLOAD, GCKPT_NLAYERMODE } gckpt_layer_mode;

typedef struct gckpt_sim gckpt_sim;

/* A simulator for one micro-step over `layers` layers; segments emit into `out`. */
gckpt_sim *gckpt_sim_new(const gckpt_ctx *c, bool grads_exist, uint8_t micro, uint64_t layers);
/* Whether layers are checkpointed (every_n > 0) and offloaded: checkpoints then hold the
 * layers' arguments (recipe.h, ckpt_held) until layer 0's backward ends, else the base
 * model drops them when its forward returns. A cross-layer effect; the fast evaluator
 * keeps a profile variant per first-layer mode, which decides it. */
void gckpt_sim_set_checkpointing(gckpt_sim *s, bool any, bool offload);
/* Reuse a simulator (keeps its buffers). false on out of memory. */
bool gckpt_sim_reset(gckpt_sim *s, const gckpt_ctx *c, bool grads_exist, uint8_t micro, uint64_t layers);
/* Instance ids are unique within a sim; a later micro-step continues the numbering. */
uint32_t gckpt_sim_next_id(const gckpt_sim *s);
void gckpt_sim_set_first_id(gckpt_sim *s, uint32_t first);
/* The mode HF gives layer i under a setting. */
gckpt_layer_mode gckpt_layer_mode_of(const gckpt_setting *s, uint64_t i);
void gckpt_sim_free(gckpt_sim *s);
void gckpt_sim_embed_fwd(gckpt_sim *s, gckpt_events *out);
void gckpt_sim_layer_fwd(gckpt_sim *s, int layer, gckpt_layer_mode mode, gckpt_events *out);
void gckpt_sim_head_fwd(gckpt_sim *s, gckpt_events *out);
void gckpt_sim_fwd_end_layer(gckpt_sim *s, int layer, gckpt_events *out);
void gckpt_sim_fwd_end_head(gckpt_sim *s, gckpt_events *out);
void gckpt_sim_head_bwd(gckpt_sim *s, gckpt_events *out);
void gckpt_sim_layer_bwd(gckpt_sim *s, int layer, gckpt_events *out);
void gckpt_sim_embed_bwd(gckpt_sim *s, gckpt_events *out);
void gckpt_sim_step_end(gckpt_sim *s, gckpt_events *out);
/* Optimizer step + zero_grad(set_to_none=True). */
void gckpt_sim_optimizer(const gckpt_ctx *c, gckpt_events *out);
/* Persistent memory at the start of a steady-state step (weights, states, workspace). */
void gckpt_persistent(const gckpt_ctx *c, int64_t comp[GCKPT_NCOMP]);

#ifdef __cplusplus
}
#endif

#endif
