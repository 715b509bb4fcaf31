/* Evaluating a setting: the event walk over a full schedule, and the fast evaluator
 * that composes per-segment summaries (one layer of each mode, profiled once per
 * micro-batch and sequence length) for sweeps. Both give the same numbers; tests
 * check that on every entry of sweeps. (core: read by the planner and the executor) */
#ifndef GCKPT_EVAL_H
#define GCKPT_EVAL_H

#include "gckpt/core/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t peak_bytes;        /* allocated peak (compare: torch.cuda.max_memory_allocated) */
    uint64_t device_peak_bytes; /* + CUDA context, segment rounding (compare: cudaMemGetInfo) */
    uint64_t host_pinned_bytes; /* peak pinned host memory (offload) */
    uint64_t host_pageable_bytes; /* several GPUs with CPU offload: the CPU optimizer's pageable bytes */
    uint64_t host_rng_bytes;    /* peak host bytes of the RNG states checkpointing keeps
                                 * (gckpt_rng_state_bytes); pageable, in no other figure */
    uint64_t after_forward_bytes; /* allocated after forward + loss, before backward (micro-step 1) */
    int64_t breakdown[GCKPT_NCOMP]; /* bytes per component at the peak; sums to peak_bytes */
    uint8_t peak_phase;         /* gckpt_phase */
    uint8_t peak_micro;         /* gckpt_micro */
    int32_t peak_layer;         /* gckpt_seg_place: -1 embedding, 0..L-1, L head, L+1 optimizer */
    int16_t peak_tensor;        /* recipe tensor allocated at the peak, -1 if none */
    bool peak_grad;             /* ... and that allocation is its gradient */
    bool peak_vision;           /* a VLM step (core/vlm_step.c): the peak is in the vision tower's
                                 * segments, peak_layer placed among its layers (its head: the projector) */
    double step_s, forward_s, backward_s, recompute_s, copy_s, optimizer_s;
    double comm_s;              /* several GPUs: collectives not hidden behind compute (in step_s) */
    /* several GPUs: bytes of the schedule's COLLECTIVE events per step (all-gathers of the
     * forward, of the backward and after the optimizer step; reductions, of them all-reduces);
     * coll_seen false when it has none. gckpt_parallel_comm times them. */
    double coll_gather_fwd, coll_gather_bwd, coll_gather_opt, coll_reduce, coll_all_reduce;
    double coll_gather_part[GCKPT_NSEC]; /* the all-gathers' pieces per section (gckpt_walk_state's) */
    bool coll_seen;
    double model_flops;         /* forward + backward FLOPs of the step as traced (no recompute) */
    double hw_flops;            /* ... and the recomputes' too: what the GPU executes */
    double tokens_per_s;
    double mfu;                 /* gckpt_palm_flops_per_token x tokens / (step_s x peak) */
    double hfu;                 /* hw_flops / (step_s x peak) */
} gckpt_result;

/* torch.utils.checkpoint with preserve_rng_state=True (transformers' default, both the
 * non-reentrant and the reentrant form) keeps, per checkpointed layer from its forward
 * until its backward frees the graph, torch.get_rng_state(): a uint8[5056] CPU tensor (the
 * CPU generator's state); on CUDA also torch.cuda.get_rng_state() per CUDA tensor among
 * the layer's positional arguments (get_device_states: the hidden states, and the mask
 * where it is positional), each a uint8[16] CPU tensor (seed and Philox offset,
 * CUDAGeneratorImpl::get_state). The recompute's torch.random.fork_rng stashes the current
 * states once more while it runs. All host memory, none on the GPU; the peak is at the
 * first recompute, with every layer's states live: (checkpointed + 1) x (5056 + the CUDA
 * states). Measured on the CPU (every probe fixture's host_peak_bytes: the offloaded
 * copies plus this); the CUDA part read in torch's source, unverified on a GPU. */
#define GCKPT_CPU_RNG_STATE_BYTES 5056u
#define GCKPT_CUDA_RNG_STATE_BYTES 16u
uint64_t gckpt_rng_state_bytes(const gckpt_ctx *c, uint32_t every_n);
/* The same for n checkpointed layers whose states are live together (a VLM's towers). */
uint64_t gckpt_rng_states_bytes_n(const gckpt_ctx *c, uint64_t n);
/* A walked result's figures beside its peak and time: the RNG states (every_n's, on c's
 * model), the device peak (segment rounding, the CUDA context), tokens/s, MFU and HFU
 * (c's tokens and model), a parallel mode's collectives. */
void gckpt_result_finish(const gckpt_ctx *c, uint32_t every_n, uint64_t grad_accum, gckpt_result *res);
/* The figures a walked step decides (core/eval.c): its breakdown at the peak, the peak's
 * place among `layers` layers, seconds, FLOPs, collectives, the device and pinned host peaks. */
struct gckpt_walk_state;
void gckpt_result_of_walk(const struct gckpt_walk_state *w, uint64_t layers, gckpt_result *res);

/* Model FLOPs per token as PaLM (Chowdhery et al. 2022, appendix B) and torchtitan
 * (get_num_flop_per_token) count them, the one definition of MFU: 6 x the parameters less the
 * input embeddings (token and learned position tables) + 12 x layers x heads x head_dim x seq
 * (attention's two matmuls, forward and backward, the causal half not skipped); recompute
 * excluded; a mixture of experts counts the experts a token is routed to (top_k of them). The
 * model's own parameters under LoRA / QLoRA too (the frozen weights' gradients count, as the
 * convention does: such an MFU is not the work done, hfu is). */
double gckpt_palm_flops_per_token(const gckpt_model *m, uint64_t seq);
/* The same with the model's parameter count given (gckpt_param_count traces a recipe: the
 * evaluators pass the context's model_params). */
double gckpt_palm_flops_per_token_n(const gckpt_model *m, uint64_t params, uint64_t seq);

/* Walk a schedule built by gckpt_schedule_build. */
void gckpt_walk(const gckpt_ctx *c, const gckpt_schedule *s, gckpt_result *res);

/* Summary of one segment's events. */
typedef struct {
    int64_t net[GCKPT_NCOMP];
    int64_t net_total;
    int64_t peak_rel;             /* max running total relative to the segment start */
    int64_t at_peak[GCKPT_NCOMP]; /* running delta per component at that point */
    int64_t host_net, host_peak_rel;
    bool has_peak;
    int16_t peak_tensor;
    bool peak_grad;
    double seconds, flops, hw_flops, recompute_s, copy_s;
    double fwd_s, bwd_s;
    /* its COLLECTIVE events' bytes (gckpt_walk_state's coll_*) */
    double coll_reduce, coll_all_reduce, coll_gather_fwd, coll_gather_bwd, coll_gather_opt;
    double coll_gather_part[GCKPT_NSEC];
    bool coll_seen;
} gckpt_seg_summary;

/* Every segment of a step, summarised once per micro-batch and sequence length: the
 * fast evaluator composes a setting from them in the step's order (gckpt_micro_order).
 * Layer 0 is apart: the base model holds its input (the embedding output) until it
 * returns, and its mode (every_n off: plain; else checkpointed, offloaded or not) also
 * decides whether checkpoints hold eager attention's mask, so the once-rows and layer 0
 * are kept per layer 0's mode; the later layers per row, block type (gckpt_block_type)
 * and mode. [micro]: the first micro-step, a later one. */
typedef struct {
    gckpt_seg_summary first[GCKPT_NLAYERMODE][2][GCKPT_MICRO_ROWS];
    gckpt_seg_summary later[2][GCKPT_MICRO_ROWS][GCKPT_NBLOCK][GCKPT_NLAYERMODE];
    gckpt_seg_summary optimizer;
    bool later_micro; /* the [1] summaries exist: built for a grad_accum > 1 */
    bool typed;       /* the layers have more than one block type (gckpt_layer_block) */
    uint8_t block0;   /* layer 0's block type (every layer's when not typed) */
    /* two attention types (Gemma 2/3, Qwen with some sliding layers): layer 0's type alone
     * checkpointed in first, both in first_both (their eager masks held by checkpoints:
     * gckpt_ckpt_types) */
    bool two_types;
    gckpt_seg_summary first_both[GCKPT_NLAYERMODE][2][GCKPT_MICRO_ROWS];
} gckpt_profile;

/* Profile the segments for c's model, precision, attention, micro-batch and seq
 * (every_n and offload in c are ignored); the later micro-steps' segments only when c's
 * grad_accum is > 1. false on out of memory. */
bool gckpt_profile_build(const gckpt_ctx *c, gckpt_profile *p);
/* The same, reusing a profiler's buffers across many calls (sweeps). */
typedef struct gckpt_profiler gckpt_profiler;
gckpt_profiler *gckpt_profiler_new(void);
void gckpt_profiler_free(gckpt_profiler *pr);
bool gckpt_profile_build_with(gckpt_profiler *pr, const gckpt_ctx *c, gckpt_profile *p);

/* Evaluate one setting from a profile. A grad_accum > 1 needs a profile built for one
 * (later_micro); without, the result says so: peak and device peak UINT64_MAX. Several GPUs
 * under fsdp or a ZeRO stage (the wrapper's events make the layers unlike, or the ranks'
 * peaks differ): the setting's schedule is built and walked instead; under zero1 and zero2
 * at rank 0 every rank's, the busiest one returned (gckpt_result_rank). */
void gckpt_fast_eval(const gckpt_ctx *c, const gckpt_profile *p, uint32_t every_n, bool offload,
                     uint64_t grad_accum, gckpt_result *res);
/* The same; breakdown = false skips the per-component vector at the peak (the rest of
 * the result is identical), for sweeps that only rank settings. */
void gckpt_fast_eval_ex(const gckpt_ctx *c, const gckpt_profile *p, uint32_t every_n, bool offload,
                        uint64_t grad_accum, bool breakdown, gckpt_result *res);

/* The rank whose schedule gives the result of c's setting (gckpt_fast_eval at c's every_n,
 * offload and grad_accum): under zero1 and zero2 at rank 0 the busiest rank (the first of
 * equals), else c's own; the timeline walks that rank's step. false when out of memory. */
bool gckpt_result_rank(const gckpt_ctx *c, uint32_t *rank);

#ifdef __cplusplus
}
#endif

#endif
