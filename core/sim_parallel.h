/* The parallel wrappers' working set as events (private to core/): what FSDP2's fully_shard
 * units and DeepSpeed ZeRO-2/3's hooks hold around the recipe's ops on one rank, emitted by
 * the simulator at the matching hooks (sim.c calls these; gckpt/core/schedule.h,
 * GCKPT_EV_COLLECTIVE, says what an event carries; tools/hf_probe/FINDINGS.md R-DIST-16 to R-DIST-19 the rules).
 * Units are numbered 0 the embedding, 1 + l layer l, L + 1 the tail (final norm, lm_head). */
#ifndef GCKPT_SIM_PARALLEL_H
#define GCKPT_SIM_PARALLEL_H

#include "sim.h"

typedef struct gckpt_wrap gckpt_wrap;

gckpt_wrap *gckpt_wrap_new(void);
void gckpt_wrap_free(gckpt_wrap *w);
/* A micro-step of a step of `layers` layers starts; sync: it reduces the gradients (the last
 * micro-step, or the only one); first: no gradients exist yet. false when out of memory. */
bool gckpt_wrap_begin(gckpt_wrap *w, const gckpt_ctx *c, uint64_t layers, bool sync, bool first);
/* Whether .grad survives a micro-step (false under ZeRO-2/3: their reduce hooks free it, so
 * every micro-step makes it afresh). */
bool gckpt_wrap_grads_kept(const gckpt_ctx *c);
/* Whether the context's mode has wrapper events (its descriptor's sim hooks). */
bool gckpt_wrap_active(const gckpt_ctx *c);

void gckpt_wrap_pre_forward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
void gckpt_wrap_post_forward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
/* The root module's forward returned (after the loss). */
void gckpt_wrap_forward_end(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o);
/* The gradient of a unit's output arrived: its parameters unsharded, the next one prefetched. */
void gckpt_wrap_pre_backward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
void gckpt_wrap_post_backward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
/* The backward's final callback. */
void gckpt_wrap_backward_end(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o);
/* Layer 0's input needs no gradient in this step (a frozen table, layer 0 not checkpointed: the
 * recipe's frozen0): the embedding's module, and layer 0's modules whose output needs no
 * gradient then (the tensors' rg0), never run a backward. */
void gckpt_wrap_frozen_input(gckpt_wrap *w, bool frozen);
/* Parameter tensor t of unit `unit` got its .grad (schedule id gid). */
void gckpt_wrap_grad_made(gckpt_wrap *w, uint64_t unit, int t, uint32_t gid);

/* Around recipe op i of a section instance (unit: the section's, as above): ZeRO-3 gathers
 * the parameters an op uses before it runs and releases them after it (the module's hooks). */
typedef enum { GCKPT_WRAP_PRE_FWD, GCKPT_WRAP_POST_FWD, GCKPT_WRAP_PRE_RECOMPUTE, GCKPT_WRAP_POST_RECOMPUTE,
               GCKPT_WRAP_PRE_BWD, GCKPT_WRAP_POST_BWD } gckpt_wrap_at;
void gckpt_wrap_op(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit, int op, gckpt_wrap_at at);

/* A mode's simulator hooks (gckpt_par_mode.sim): what each of the calls above does for it
 * (NULL: nothing). backward_end runs after the last reduce-scatter input is released and
 * before the ipg buckets and the partition buffer are. */
typedef struct gckpt_wrap_hooks {
    void (*pre_forward)(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
    void (*post_forward)(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
    void (*pre_backward)(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
    void (*post_backward)(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit);
    void (*backward_end)(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o);
    void (*op)(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit, int op, gckpt_wrap_at at);
} gckpt_wrap_hooks;
/* FSDP2's units, ZeRO-2's reduce hooks through the ipg bucket, ZeRO-3's gathers and reduce hooks */
extern const gckpt_wrap_hooks gckpt_wrap_fsdp, gckpt_wrap_zero2, gckpt_wrap_zero3;

/* The reduction after the last micro-step (gckpt_par_mode.sync_events), at the start of the
 * optimizer segment: DDP all-reduces its fp32 buckets (gckpt_ddp_buckets: one event per bucket,
 * index the bucket, src = dst = GCKPT_NOINST, the persistent bucket copy); ZeRO-1 all-reduces the
 * .grad through the ipg bucket (gckpt_zero1_flushes: one event per flush, index the flush, src =
 * dst = GCKPT_NOINST, the bucket made at the first backward's first hook). The Trainer reduces
 * in the last micro-step's backward (DDP's hooks; ZeRO-1's engine.backward at the boundary): the
 * time model lets the reduction overlap one micro-step's backward (gckpt_parallel_comm). */
void gckpt_sync_ddp(const gckpt_ctx *c, gckpt_schedule *o);
void gckpt_sync_zero1(const gckpt_ctx *c, gckpt_schedule *o);
/* The all-gather after the optimizer step (gckpt_par_mode.step_gather_events, FINDINGS R-DIST-12),
 * right after OPT_STEP, src = dst = GCKPT_NOINST (persistent buffers): ZeRO-1/2 one per optimizer
 * group (index the group; numel the rank's partition of the flat weights padded to 2 N, tensor
 * -1); ZeRO-3 one per persistent parameter instance (tensor, index its wrapper unit; numel its
 * partition, gathered into its whole copy). */
void gckpt_gather_zero12(const gckpt_ctx *c, gckpt_schedule *o);
void gckpt_gather_zero3(const gckpt_ctx *c, gckpt_schedule *o);

#endif
