/* A parallel mode's own state on one rank (gckpt_ctx.par): what gckpt_parallel_apply
 * (core/parallel.c, each mode's apply) leaves for the simulator, the evaluators and the executor
 * besides the component totals. Zero on one GPU and in a mode that has no such field. Held by
 * value (an evaluator copies the context to walk another rank, gckpt_ctx_init remakes it). The
 * per-rank buffers themselves are the rows of gckpt_rank_rows (gckpt/core/parallel.h).
 * (core: read by the planner and the executor) */
#ifndef GCKPT_PAR_STATE_H
#define GCKPT_PAR_STATE_H

#include <stdint.h>

#include "gckpt/core/recipe.h"

typedef struct {
    uint64_t ddp_used_map;          /* DDP: find_unused_parameters' maps, in GCKPT_C_PARALLEL for
                                     * every_n off only (not in the context's parallel) */
    uint64_t unit_part[GCKPT_NSEC]; /* FSDP2: elements of one unit's padded local shards (the
                                     * embedding, one layer, the tail): what the all-gather carries */
    uint64_t unit_grad_part[GCKPT_NSEC]; /* ... of its trainable parameters: its reduce-scatter and
                                          * fp32 sharded gradient (LoRA: the adapters') */
    uint64_t unit_host[GCKPT_NSEC];     /* ... bytes of all of them as stored (fp32, a bf16 Params4bit's
                                         * bf16): CPU offload's H2D copy before each all-gather */
    uint64_t unit_f32_part[GCKPT_NSEC]; /* ... elements of those stored fp32 (copied, then cast) */
    uint64_t z2_numel;              /* ZeRO-2: elements of the rank's reduced gradients */
    uint64_t z1_reduce_numel;       /* ZeRO-1: elements (model dtype) its boundary reduction holds
                                     * above the full .grad for a moment (a transient at the end
                                     * of the reducing micro-step's backward) */
    uint64_t z12_offload_numel;     /* ZeRO-1/2 offload_optimizer: elements of the parameters
                                     * overlapping the rank's partition (their pinned
                                     * accumulators under gradient accumulation) */
    uint64_t step_released;         /* of the context's parallel (and ZeRO-1's bucket), what the
                                     * optimizer step frees first (ZeRO-1/2's ipg bucket: each
                                     * backward allocates it) */
    uint64_t step_retaken;          /* ... and of that, what it allocates again at its end (the
                                     * rest is allocated again by the next step's backward) */
    /* CPU offload (layout.offload): host bytes the rank holds for the run, pinned (in the
     * result's host_pinned_bytes) and pageable (the CPU optimizer's states; ZeRO-3's fp32 master) */
    uint64_t host_pinned, host_pageable;
} gckpt_par_state;

#endif
