/* Context parallelism per rank as accelerate 1.15 sets it up (TrainingArguments(parallelism_config=
 * ParallelismConfig(cp_size=C)), cp_backend "torch"): the HF Trainer splits each micro-batch's
 * sequence over the C ranks of a CP group with torch 2.15's context_parallel(), whose ring
 * attention exchanges K/V between them (FINDINGS R-CP-1..9). The rules measured in tests/data/hf-cp
 * (tools/hf_probe/cp_ring_rerun.py: torch's own split and ring on gloo, the per-block CUDA SDPA
 * kernel stood in by the CPU flash kernel, R-CP-5): what accelerate, the Trainer and torch refuse,
 * the split, the ring's collectives and transients, and what a rank saves beyond one GPU at S / C. What
 * the CUDA kernels decide (their per-block outputs, scratch and layout) is unverified.
 * gckpt-plan --cp plans a rank under FSDP2 with them (planner/plan_cp.c, R-CP-11). (core: read by the planner) */
#ifndef GCKPT_CP_H
#define GCKPT_CP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gckpt/core/eval.h"
#include "gckpt/core/model.h"
#include "gckpt/core/setting.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* accelerate's cp_comm_strategy (TorchContextParallelConfig): how the ring moves K/V forward. */
typedef enum { GCKPT_CP_ALLGATHER, GCKPT_CP_ALLTOALL } gckpt_cp_comm;

/* Whether a CP group of cp ranks can train model m on sequences of seq tokens with attention attn,
 * one line in err when not: cp >= 2; seq a multiple of cp (R-CP-4: uneven pieces fail the ring's
 * first all-gather; nothing upstream checks); SDPA only (the Trainer, R-CP-2); no sliding-window
 * layers (accelerate's hooks, R-CP-3); and only the structure measured (the dense llama-like
 * block: untied, bias-free, one rotary table, no latent attention, experts or fused projections). */
bool gckpt_cp_check(const gckpt_model *m, uint64_t seq, uint32_t cp, gckpt_attention attn, gckpt_err *err);

/* Whether torch balances the split (head-tail): seq a multiple of 2 cp (R-CP-4). */
bool gckpt_cp_balanced(uint64_t seq, uint32_t cp);

/* The SDPA work of one attention call under torch's ring on the busiest rank of cp, in units of
 * the local causal SDPA over seq / cp tokens (_templated_ring_attention and its backward alike,
 * FINDINGS R-CP-12): step 0 is the local causal call (1); load-balanced, each of the cp - 1 others
 * is a non-causal call over half of the block (the first half of K / V, or the second half of Q:
 * 1 each), cp on every rank; contiguous, rank r skips the steps after r and computes the others
 * over the whole block (2 each), the last rank 2 cp - 1 (the step waits for it at the next
 * collective). *calls: the kernel calls on that rank. */
double gckpt_cp_attention_units(uint64_t seq, uint32_t cp, uint32_t *calls);

/* The positions rank r of cp holds, in order, into out[seq / cp] (R-CP-4); returns seq / cp. */
uint64_t gckpt_cp_positions(uint64_t seq, uint32_t cp, uint32_t r, uint64_t *out);

/* What rank r's layers save beyond one GPU's at seq / cp (s: the rank's local setting, s->seq the
 * local length): one [B, S / C, H D] tensor in the compute dtype per layer that is not
 * checkpointed, on the ranks whose last ring step is a partial update (balanced split, r < C - 1;
 * R-CP-7, CPU flash kernel's output layout). Per such layer, bytes. */
uint64_t gckpt_cp_layer_extra(const gckpt_model *m, const gckpt_setting *s, uint32_t cp, uint32_t r, bool balanced);
/* Whether something saves o_proj's input, so that a partial-merge rank's copy of it lives until the
 * layer's backward (R-CP-7): full fine-tuning (its weight's gradient), LoRA with an o_proj adapter
 * whose dropout is 0 (lora_A takes the input itself); not LoRA q,v or dropout > 0 (R-CP-23). */
bool gckpt_cp_oproj_input_saved(const gckpt_setting *s);

/* The bytes the embedding's saved input_ids storage holds beyond its local [B, S / C] int64:
 * context_parallel shrinks each buffer in place and the storage keeps its B S elements (R-CP-4). */
uint64_t gckpt_cp_ids_extra(const gckpt_setting *s, uint32_t cp);

/* The rotary tables' bytes beyond one GPU's: the Trainer makes position_ids = arange(S).expand(B, -1)
 * when the batch has none (R-CP-2), so cos and sin are [B, S / C, rotary_dim] (one GPU's HF run without
 * position_ids: [1, S, rotary_dim]), in the hidden states' dtype; saved once, by the first layer that
 * is not checkpointed (R-CP-7). */
uint64_t gckpt_cp_rope_extra(const gckpt_model *m, const gckpt_setting *s);

/* One micro-step's ring collectives on a CP rank, in its CP group (R-CP-6): calls and the bytes of
 * each call's input per kind (all-gather: all_gather_single; all-to-all: permute_tensor), dtype and
 * phase. s is the rank's local setting (s->seq = S / C). */
enum { GCKPT_CP_FWD, GCKPT_CP_BWD };
enum { GCKPT_CP_ALL_GATHER, GCKPT_CP_PERMUTE }; /* torch's all_gather_single, permute_tensor (all-to-all) */
typedef struct {
    uint8_t kind;  /* GCKPT_CP_ALL_GATHER / GCKPT_CP_PERMUTE */
    uint8_t dtype; /* gckpt_dtype */
    uint8_t phase; /* GCKPT_CP_FWD / BWD */
    uint64_t calls;
    double bytes_per_call;
} gckpt_cp_coll;
#define GCKPT_CP_MAX_COLL 6
size_t gckpt_cp_collectives(const gckpt_model *m, const gckpt_setting *s, uint32_t cp, gckpt_cp_comm comm,
                            gckpt_cp_coll out[GCKPT_CP_MAX_COLL]);

/* What a CP rank of a CP x FSDP2 step holds at its backward peak beyond FSDP2's plan of the same
 * rank at S / C tokens (FINDINGS R-CP-11; s: the local setting, seq the whole sequence, hidden_size /
 * compute_size the hidden states' and the attention output's element sizes): the Trainer's CP buffers
 * (their storages stay whole), the rotary tables per batch row, and on the partial-merge ranks (R-CP-7)
 * one [B, S / C, H D] copy per plain layer plus the recomputed layer's. Measured at B = 2 with the
 * peak after the ring's calls (an MLP product of the backward); the ring's own transients
 * (gckpt_cp_ring_peak) are not at that peak. */
/* How far gckpt_cp_step_extra's plan may be from the measured peaks (test_parallel_cp_fsdp). */
#define GCKPT_CP_PEAK_BOUND_PCT "0.5"
/* ... where the peak is inside a ring call (the wide-attention fixtures): the plan below the measured
 * peak by at most this; not replayed there: the CPU kernels' promoted fp32 copies of the block
 * gradients in the accumulators' mixed-dtype += (R-CPU-2) and flatten's copies of accumulators
 * zeros_like left non-contiguous (FINDINGS R-CP-11). */
#define GCKPT_CP_RING_PEAK_BOUND_PCT "0.75"
uint64_t gckpt_cp_step_extra(const gckpt_model *m, const gckpt_setting *s, uint64_t seq, uint32_t cp, uint32_t r,
                             unsigned hidden_size, unsigned compute_size);

/* gckpt_cp_step_extra's buffers with `copies` o_proj-input copies live (partial-merge ranks only). */
uint64_t gckpt_cp_extra_at(const gckpt_model *m, const gckpt_setting *s, uint64_t seq, uint32_t cp, uint32_t r,
                           unsigned hidden_size, unsigned compute_size, uint64_t copies);

/* The CP buffers live at an SDPA op of layer `layer` (forward, recompute or backward): gckpt_cp_extra_at
 * with the o_proj copies of the plain layers before it (a layer's copy is made after its forward's
 * ring call and freed at its backward's; a recomputed layer's likewise). gckpt_cp_peak and gckpt-run's
 * CP ranks (executor/interp_cp.c) both read it. */
uint64_t gckpt_cp_extra_before(const gckpt_model *m, const gckpt_setting *s, uint64_t seq, uint32_t cp, uint32_t r,
                               unsigned hidden_size, unsigned compute_size, int32_t layer);

/* A CP rank's step peak into r (r: ctx c's walked step at S / C, c->set the rank's local setting):
 * the higher of r's peak plus gckpt_cp_step_extra and, at each SDPA op of the walked schedule
 * (forward, recompute, backward), the memory before the plain kernel's outputs plus the ring's
 * replayed peak (gckpt_cp_ring_peak of rank `rank`) plus the CP buffers live then (R-CP-10, R-CP-11);
 * the breakdown, phase and layer follow. false when out of memory. */
bool gckpt_cp_peak(const gckpt_ctx *c, uint64_t seq, uint32_t cp, uint32_t rank, gckpt_cp_comm comm,
                   unsigned hidden_size, unsigned compute_size, gckpt_result *r);

/* The most bytes one ring attention call holds above its inputs (forward: q, k, v; backward: the
 * gradient of out, q, k, v, out, lse), its outputs included, on rank rank of cp (s: the rank's local
 * setting, s->seq = S / C): torch 2.15's _templated_ring_attention (backward_pass false) or
 * _templated_ring_attention_backward replayed buffer by buffer (core/cp_ring.c, FINDINGS R-CP-10):
 * the K/V cat and what the rotater receives (allgather: a C-times buffer; alltoall: one block), each
 * block's out and lse, the fp32 merge's temporaries and _partial_update's cats; backward: the fp32
 * accumulators, each block's dq / dk / dv, the fp32 dK/dV cat and what arrives. The per-block kernel
 * is the CPU flash kernel's outputs (out in the compute dtype, lse fp32); its scratch and the CUDA
 * kernels' extra outputs are not in it (unverified). */
uint64_t gckpt_cp_ring_peak(const gckpt_model *m, const gckpt_setting *s, uint32_t cp, uint32_t rank, bool balanced,
                            gckpt_cp_comm comm, bool backward_pass);

#ifdef __cplusplus
}
#endif

#endif
