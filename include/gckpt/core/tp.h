/* Tensor parallelism per rank as transformers 5.24 sets it up: every rank loads the model with
 * from_pretrained(distributed_config=DistributedConfig(tp_size=T)) (tp_plan "auto": the model's
 * base_model_tp_plan), the HF Trainer then builds accelerate's ParallelismConfig(tp_size=T) and
 * wraps nothing (FINDINGS R-TP-1). The rules of tools/hf_probe/tp_rules.py, measured in
 * tests/data/hf-tp (test_parallel_tp checks them there): what a rank keeps, the gradients entering
 * the step, the collectives of a step, and what transformers and accelerate refuse. Standalone TP
 * (dp_shard 1) of the dense llama-like models measured (llama, qwen3); TP x FSDP (R-TP-8) as
 * the TP rank's local model under FSDP2 (gckpt_tp_fsdp_layout, the FSDP2 rules of
 * core/parallel.c and core/sim_parallel.c). (core: read by the planner) */
#ifndef GCKPT_TP_H
#define GCKPT_TP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/params.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/setting.h"
#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device meshes' bytes kept on every rank of a TP (or TP x FSDP) world of `world` ranks: three
 * int32[world] tensors still referenced (R-TP-4, R-TP-8: 12 T and 12 T S bytes measured). */
uint64_t gckpt_tp_mesh_bytes(uint32_t world);

/* DTensor's Shard of n elements over t ranks (torch.chunk): rank r holds ceil(n / t), the last
 * ranks fewer or none (R-TP-2). */
uint64_t gckpt_tp_chunk(uint64_t n, uint32_t t, uint32_t r);

/* Whether model m can be split over tp ranks by its tp_plan as measured, one line in err when not
 * (R-TP-2): attention and key/value heads divisible by tp (the attention's view of a shard that is
 * not whole heads fails in the forward; neither transformers nor accelerate checks it), and only
 * the structure measured (untied, bias-free, dense, one rotary table; qwen3's q / k norms). */
bool gckpt_tp_model_ok(const gckpt_model *m, uint32_t tp, gckpt_err *err);

/* Whether LoRA / QLoRA as pf says is planned on top of model m's tp_plan (dp_shard, dp_replicate: the
 * --dp-shard / --dp-replicate sizes, 0 or 1 without), one line in err when not: QLoRA fails at the 4-bit
 * base's forward and in get_peft_model (R-TP-14), an adapter on a rowwise layer (o_proj, down_proj) in the
 * first forward (R-TP-13), every adapter under TP x FSDP too (R-TP-16); under TP x DDP lora_B's gradient is
 * not averaged over the replicas (R-TP-17); adapters on colwise layers under TP alone run, equal one process
 * and are planned as measured in tests/data/hf-tp-peft (R-TP-12: llama-like, no modules_to_save). */
bool gckpt_tp_peft_ok(const gckpt_peft *pf, const gckpt_model *m, uint32_t tp, uint32_t dp_shard, uint32_t dp_replicate,
                      gckpt_err *err);
/* The adapters per layer under TP (LoRA on colwise layers, R-TP-12): each a replicated lora_A whose
 * gradient the Trainer all-reduces and a sharded lora_B whose input gradient is all-reduced. */
uint64_t gckpt_tp_lora_adapters(const gckpt_peft *pf);

/* What TP rank `rank` (its index in the TP group) keeps between steps and takes into the optimizer
 * step, bytes, each allocation rounded to round except the scalars (R-TP-4, R-TP-5). */
typedef struct {
    uint64_t weights; /* the local shards (the loaded dtype: gckpt_tp_param_dtype; the norms whole) */
    uint64_t states;  /* AdamW's exp_avg and exp_avg_sq on them */
    uint64_t scalars; /* AdamW's fp32 step per parameter tensor, the device meshes (3 int32[T]) */
    uint64_t mesh;    /* ... of them the meshes */
    uint64_t buffers; /* rotary inv_freq and original_inv_freq */
    uint64_t total;   /* kept between steps */
    uint64_t step_grads; /* the gradients entering the step: the local shards', the embedding's whole [V, h] */
} gckpt_tp_bytes;
void gckpt_tp_rank_bytes(const gckpt_model *m, gckpt_precision prec, gckpt_optimizer o, uint32_t tp, uint32_t rank,
                         uint64_t round, gckpt_tp_bytes *out);
/* Whether optimizer o is planned on tp ranks (fused AdamW; SGD under TP alone, not data_parallel; the others
 * fail on DTensors or are not measured, R-TP-23); false with the reason in err. */
bool gckpt_tp_optimizer_ok(gckpt_optimizer o, uint32_t tp, bool data_parallel, gckpt_err *err);
/* The dtype a TP rank's parameters, gradients and AdamW states are loaded in: bf16 under pure bf16
 * (from_pretrained(dtype=torch.bfloat16), R-TP-22), fp32 otherwise (amp-bf16 is autocast over fp32). */
gckpt_dtype gckpt_tp_param_dtype(gckpt_precision p);

/* One step's collectives on a TP rank, all in its TP group (R-TP-6; with LoRA s->peft R-TP-12): calls and
 * bytes (all-reduce: the buffer; all-gather: the output) per kind, dtype and phase. Under TP x FSDP (s->layout.tp set, mode FSDP)
 * the same less the Trainer's norm-gradient all-reduces (R-TP-8: the norms are FSDP2's); FSDP2's own
 * all-gathers and reduce-scatters are the schedule's. */
enum { GCKPT_TP_FWD, GCKPT_TP_BWD };
typedef struct {
    uint8_t kind;  /* gckpt_coll: ALL_REDUCE, ALL_GATHER */
    uint8_t dtype; /* gckpt_dtype */
    uint8_t phase; /* GCKPT_TP_FWD / BWD */
    uint64_t calls;
    double bytes;
} gckpt_tp_coll;
#define GCKPT_TP_MAX_COLL 8
/* Setting s (its precision, micro-batch, sequence, grad_accum, every_n) of model m over tp ranks,
 * merged per (kind, dtype, phase); returns how many. */
size_t gckpt_tp_collectives(const gckpt_model *m, const gckpt_setting *s, uint32_t tp,
                            gckpt_tp_coll out[GCKPT_TP_MAX_COLL]);

/* The seconds of those collectives at a bus bandwidth (nccl-tests' busbw: all-reduce 2 (T - 1) / T x its
 * bytes, all-gather (T - 1) / T), none hidden behind compute (planned, unverified on GPUs). */
double gckpt_tp_comm_seconds(const gckpt_model *m, const gckpt_setting *s, uint32_t tp, double bus_bytes_per_s);

/* The model a TP rank computes like (R-TP-7): heads / tp, key/value heads / tp and the rank's
 * chunk of the intermediate size; hidden size and vocabulary whole (the residual stream, the norms
 * and the gathered logits are whole on every rank). */
void gckpt_tp_local_model(const gckpt_model *m, uint32_t tp, uint32_t rank, gckpt_model *out);

/* TP alone and TP x FSDP (core/ctx.c, when the layout has tp): parameter table ps (of a TP rank's
 * local model, gckpt_tp_local_model) made TP rank `rank`'s: the embedding's and lm_head's weights, gradients and optimizer states cut to their
 * chunk(V) rows (R-TP-2), the totals with them. */
void gckpt_tp_params_local(gckpt_params *ps, gckpt_optimizer o, uint32_t tp, uint32_t rank, uint64_t round);

/* colwise_gather_output's redistribution after lm_head's linear on TP rank `rank` (R-TP-15): the rank's
 * logits columns [rows, chunk(V)] (elem bytes each), padded to ceil(V / T) columns on a rank that holds
 * fewer, all-gathered and concatenated along the vocabulary ([rows, T ceil(V / T)] twice), then cut to
 * [rows, V]. Returns the most bytes those temporaries hold at once beyond the whole logits' own
 * allocation (each allocation rounded up to round bytes). */
uint64_t gckpt_tp_gather_bytes(uint64_t rows, uint64_t vocab, uint32_t tp, uint32_t rank, uint64_t elem,
                               uint64_t round);

/* The measured bound on TP x FSDP's planned per-rank peak, percent: every fake-group rank of the t2s2
 * fixtures is within it (test_parallel_tp holds the figure to them; measured 0.42 %; the
 * tp_fsdp_unverified warning states it). */
#define GCKPT_TP_FSDP_PEAK_BOUND_PCT "0.5"

/* TP x FSDP (transformers' DistributedConfig(tp_size=tp, fsdp_size=dp_shard), FINDINGS R-TP-8):
 * the layout that plans world rank `rank` as FSDP2 over its fsdp group of the TP rank's local model
 * (gckpt_tp_local_model of rank % tp): every layer, the embedding and [final norm, lm_head] one
 * unit each (the last kept gathered from its forward to its backward), the TP-sharded parameters
 * dim-0-sharded again over dp_shard, fp32 all-gathers and reduce-scatters in the fsdp group (no
 * MixedPrecisionPolicy: fsdp_mixed_precision False, the Trainer's autocast computes), the
 * reduce-scatters on the synchronising micro-step only (the Trainer's
 * _defer_fsdp_gradient_reduction). */
void gckpt_tp_fsdp_layout(uint32_t tp, uint32_t dp_shard, uint32_t rank, gckpt_layout *out);
/* HSDP x TP (DistributedConfig(tp_size=T, fsdp_size=S, dp_replicate_size=R), FINDINGS R-TP-11): the same
 * with FSDP2 over transformers' 2-D (dp_replicate, fsdp) mesh, rank = r / tp = replicate x S + shard;
 * S may be 1 (DDP x TP: FSDP2 replicates, transformers tells accelerate dp_shard_size = R x S). R 1 is
 * gckpt_tp_fsdp_layout. */
void gckpt_tp_hsdp_layout(uint32_t tp, uint32_t dp_replicate, uint32_t dp_shard, uint32_t rank, gckpt_layout *out);

#ifdef __cplusplus
}
#endif

#endif
