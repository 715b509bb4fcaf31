/* Several GPUs: what one rank of DDP, FSDP2 or DeepSpeed ZeRO-1/2/3 keeps for the whole run
 * under the HF Trainer (its own preparation: accelerate's DDP / fsdp2_prepare_model,
 * deepspeed.initialize with the Trainer's "auto" values). The rules are
 * tools/hf_probe/dist_rules.py's, measured in tools/hf_probe/FINDINGS.md section 13 on the
 * CPU (tests/data/hf-dist; test_dist_fixtures checks them):
 *  ddp:   full replicas; gradient_as_bucket_view false, so the buckets are a second flat copy
 *         of every gradient; find_unused_parameters (the Trainer's choice without gradient
 *         checkpointing) adds the reducer's used map and its device copy (int32 per tensor).
 *  fsdp:  fully_shard per decoder layer, the embedding and the tail (final norm, lm_head):
 *         fp32 sharded parameters with dim 0 padded to a multiple of the ranks; AdamW states on
 *         the unpadded local rows; the device mesh (three int64[N]).
 *  zero1/zero2: every optimizer group flattened and padded to a multiple of 2N elements
 *         (nccl_start_alignment_factor 2 x world); the flat model-dtype weights replicated,
 *         the fp32 master partition and AdamW's states on it; one step counter per group and
 *         the gradient norm scalar.
 *  zero3: every tensor partitioned to ceil(numel / N) elements, tensors under
 *         stage3_param_persistence_threshold also kept whole; fp32 master + AdamW states on
 *         the partitions, the flat gradient partitions and the reduce_bucket_size ipg bucket.
 * Every mode: torch AdamW's fp32 `step` per parameter tensor (per group under ZeRO) and the
 * model's buffers (rotary inv_freq and original_inv_freq, fp32).
 * (core: read by the planner) */
#ifndef GCKPT_PARALLEL_H
#define GCKPT_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/params.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCKPT_MAX_RANKS 65536 /* gpus x nodes */

/* GPUs in the layout (gpus x nodes, each 0 read as 1). */
uint32_t gckpt_layout_world(const gckpt_layout *l);

/* The ranks a sharding mode shards over: the world, or under HSDP (l->dp_replicate > 1) the
 * dp_shard size, world / dp_replicate. */
uint32_t gckpt_layout_shard_world(const gckpt_layout *l);
/* The replicate dimension's size: l->dp_replicate, 1 when unset. */
uint32_t gckpt_layout_replicate(const gckpt_layout *l);
/* Rank's index in its shard group (accelerate's mesh puts dp_shard inner: rank mod dp_shard). */
uint32_t gckpt_layout_shard_rank(const gckpt_layout *l, uint32_t rank);
/* Whether the shard group (consecutive ranks) spans nodes (dp_shard > gpus per node), and
 * whether the replicate group (ranks dp_shard apart) does (several nodes and a replicate
 * dimension): which of the profile's bus bandwidths times their collectives. */
bool gckpt_layout_shard_inter_node(const gckpt_layout *l);
bool gckpt_layout_replicate_inter_node(const gckpt_layout *l);

/* Whether the layout spreads the step over several GPUs. */
bool gckpt_layout_multi(const gckpt_layout *l);

/* Whether ZeRO's ipg bucket is a schedule event (made at the first backward's first gradient
 * hook, freed when the step starts) rather than held through the run: the mode's
 * ipg_bucket_event without offload_optimizer. The rows and the simulator both read it. */
bool gckpt_layout_ipg_bucket_event(const gckpt_layout *l);

/* DeepSpeed's limits in elements: the ds_config's value when set (l->ds), else what the Trainer
 * fills for "auto" (transformers integrations/deepspeed.py,
 * HfTrainerDeepSpeedConfig.trainer_config_finalize) or DeepSpeed's default
 * (deepspeed/runtime/zero/config.py). */
uint64_t gckpt_ds_reduce_bucket(const gckpt_model *m, const gckpt_layout *l);        /* hidden x hidden */
uint64_t gckpt_ds_persistence_threshold(const gckpt_model *m, const gckpt_layout *l); /* 10 x hidden */
uint64_t gckpt_ds_max_live(const gckpt_layout *l);  /* stage3_max_live_parameters: 1e9 */
uint64_t gckpt_ds_sub_group(const gckpt_layout *l); /* sub_group_size: 1e9 */
/* ZeRO-1/2's ipg buckets, each reduce_bucket_size elements of the model dtype, allocated
 * together at a backward's first reduce hook (stage_1_and_2.py setup_buckets): two with
 * overlap_comm (double buffering), else one. */
uint64_t gckpt_ds_ipg_buckets(const gckpt_layout *l);

/* Whether setting s can be planned per rank (one line in err when not): a mode with more
 * than one GPU, full fine-tuning with AdamW under fp32 or amp-bf16 (what FINDINGS 13
 * measured). */
bool gckpt_layout_check(const gckpt_setting *s, gckpt_err *err);

/* The precision the recipe computes in: FSDP2's MixedPrecisionPolicy and DeepSpeed's bf16 run
 * the forward on bf16 weights without autocast (pure bf16, FINDINGS 13.4: saved bytes equal the
 * single-process bf16 fixtures); DDP and one GPU: s->precision. */
gckpt_precision gckpt_parallel_compute_precision(const gckpt_setting *s);

/* FSDP2's dtypes, decided here for the rows (core/parallel.c) and the simulator's buffers
 * (core/sim_parallel.c). The shard dtype: a parameter's padded local shard, its AdamW states'
 * and its unit's sharded gradient's: fp32 (accelerate upcasts the trainable ones, FINDINGS
 * R-DISTPEFT-4) or, without an upcast (fsdp_as_loaded: transformers' own fully_shard under TP,
 * R-TP-8, R-TP-30), the loaded dtype. The wire dtype: what is all-gathered and reduce-scattered:
 * the MixedPrecisionPolicy's (bf16 under the Trainer's bf16=True, else fp32), or the shard dtype
 * without a policy; a cast (an all-gather input of its own, a reduce output cast into the sharded
 * gradient) happens only where the two differ. p NULL: a trainable unquantized parameter's. */
gckpt_dtype gckpt_fsdp_shard_dtype(const gckpt_setting *s, const gckpt_param *p);
gckpt_dtype gckpt_fsdp_wire_dtype(const gckpt_setting *s);

/* The recipe a run of setting s computes, into r: model m in the precision the ranks compute
 * in, with s's attention, fine-tuning method and sequence (a sliding window past it takes the
 * masked SDPA form, gckpt_recipe_build_seq). gckpt-plan, gckpt-run and the tests that compare
 * a measured fixture all build it here. */
void gckpt_setting_recipe(const gckpt_model *m, const gckpt_setting *s, gckpt_target target, gckpt_recipe *r);

/* The measured bound on the planned per-rank peak of fsdp, zero2 and zero3 (their scheduled
 * working set), in percent: every fake-group rank of tests/data/hf-dist is within it
 * (test_parallel's test_fixture_peaks holds the figure to the fixtures; the
 * parallel_peak_approximate warning states it). */
#define GCKPT_PARALLEL_PEAK_BOUND_PCT "0.21"
/* ... with LoRA / QLoRA (tests/data/hf-dist-peft, test_parallel_peft holds each to the fixtures;
 * zero3 also tests/data/hf-dist-peft-zerooff, test_parallel_peft_offload): fsdp; zero2; zero3
 * (0.86 before a recompute stopping at LinearFunctionForZeroStage3 made that op's output, FINDINGS
 * R-DISTPEFT-20). */
#define GCKPT_PARALLEL_PEFT_FSDP_BOUND_PCT "0.04"
#define GCKPT_PARALLEL_PEFT_ZERO2_BOUND_PCT "0.03"
#define GCKPT_PARALLEL_PEFT_ZERO3_BOUND_PCT "0.05"


/* Fill the shard fields of table ps for layout l of model m. */
void gckpt_params_shard(gckpt_params *ps, const gckpt_model *m, const gckpt_layout *l);

/* What one rank keeps between steps, bytes (each allocation rounded to round). */
typedef struct {
    uint64_t weights; /* the parameters as the mode stores them (replicas, shards, partitions,
                       * ZeRO-3's whole persistent parameters) */
    uint64_t grads;   /* DDP's buckets; ZeRO-3's flat gradient partitions and ipg bucket */
    uint64_t master;  /* ZeRO's fp32 master partitions */
    uint64_t states;  /* AdamW's exp_avg and exp_avg_sq */
    uint64_t scalars; /* step counters, DDP's used map, ZeRO's norm and flags, FSDP2's mesh */
    uint64_t buffers; /* the model's buffers (rotary inv_freq, original_inv_freq) */
    uint64_t total;
} gckpt_rank_bytes;

/* Elements of p's unpadded piece on rank r (after gckpt_params_shard): rank r's padded shard
 * of p->shard.part elements starts at element r x part of the tensor and holds what is left of
 * it, the rest padding. FSDP2: its rows (torch.chunk: the last ranks may get fewer or none)
 * times a row's elements; ZeRO-3: its flat slice. */
uint64_t gckpt_shard_local(const gckpt_param *p, uint32_t r);

/* Rank `rank`'s persistent bytes for setting s (a checked, multi-GPU layout) from table ps
 * after gckpt_params_shard: the sum of its rows kept between steps (gckpt_rank_rows below).
 * Rank 0 is the busiest (FSDP2's local shards shrink at the end). */
void gckpt_rank_persistent(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                           uint64_t round, gckpt_rank_bytes *out);

/* The per-rank parameter-state table: every buffer of the mode's state on one rank is a row.
 * The rows kept between steps (kinds up to GCKPT_ROW_BUFFERS) are its persistent bytes
 * (gckpt_rank_persistent sums them per kind); the others are the mode's buffers that each step
 * makes and frees, their sizes here, their places in the step the schedule's (core/sim.c,
 * core/sim_parallel.c). An executor allocates from the same rows. Rows of one parameter entry
 * are per instance (count: its copies);
 * rows of the rank (param -1) are flat buffers or scalars. Bytes as allocated: each instance
 * rounded to the allocator's granularity, except the scalars measured as a byte count (AdamW's
 * step, DDP's used maps, the mesh, DeepSpeed's flags), which are summed unrounded. The executor
 * allocates every held row (gckpt_row_held) as one buffer of its bytes, its instances back to
 * back, and each mode's files take their views from the rows (executor/interp_parallel.c). */
typedef enum {
    GCKPT_ROW_WEIGHTS, /* gckpt_rank_bytes.weights */
    GCKPT_ROW_GRADS,   /* .grads */
    GCKPT_ROW_MASTER,  /* .master */
    GCKPT_ROW_STATES,  /* .states */
    GCKPT_ROW_SCALARS, /* .scalars */
    GCKPT_ROW_BUFFERS, /* .buffers */
    /* made within each step */
    GCKPT_ROW_IPG,        /* ZeRO-1/2: the ipg bucket(s), made by the backward (ZeRO-1 with
                           * offload_optimizer: held through the run), freed when the step starts */
    GCKPT_ROW_IPG_FLAG,   /* ZeRO-1/2: 4 B measured beside the bucket, freed and retaken by the step */
    GCKPT_ROW_STEP_GRADS, /* FSDP2: each unit's fp32 sharded gradient, from its reduce-scatter into the step */
    GCKPT_NROW
} gckpt_row_kind;
#define GCKPT_NROW_KEPT (GCKPT_ROW_BUFFERS + 1) /* the kinds kept between steps */
typedef enum { GCKPT_PLACE_DEVICE, GCKPT_PLACE_HOST } gckpt_place;
typedef struct {
    const char *what;  /* "fp32 master partition", "DDP bucket", ... */
    uint8_t kind;      /* gckpt_row_kind */
    int16_t param;     /* the parameter table's entry, -1: a buffer of the rank */
    uint8_t group;     /* ZeRO-1/2's optimizer group of a flat group row */
    uint8_t dtype;     /* gckpt_dtype */
    uint8_t place;     /* gckpt_place (every row is on the device today: CPU offload moves bytes in
                        * gckpt_parallel_apply, from the source only) */
    uint8_t sharding;  /* gckpt_shard_how: how the row's buffer is split over the ranks */
    uint64_t count;    /* allocations (a block parameter's: one per layer) */
    uint64_t elements; /* elements of one allocation (for the scalars, bytes: dtype uint8) */
    uint64_t bytes;    /* all of them as allocated */
    bool held;         /* a row of a kind made within each step that the rank holds from setup
                        * nonetheless (ZeRO-1/2's flag beside the ipg bucket, which the optimizer
                        * step frees and takes again; ZeRO-1's ipg buckets under offload_optimizer) */
    uint8_t qstat;     /* a quantized weight's statistics piece + 1 (gckpt_quant_stat: each its
                        * own allocation, a WEIGHTS row of the parameter), 0 otherwise */
} gckpt_state_row;
/* Whether row r is allocated once at setup (an executor's persistent buffer): the kinds kept
 * between steps, and the held ones; the others are the schedule's events. */
static inline bool gckpt_row_held(const gckpt_state_row *r) { return r->kind < GCKPT_NROW_KEPT || r->held; }
#define GCKPT_MAX_STATE_ROWS (3 * GCKPT_MAX_PARAMS + 16)
typedef struct gckpt_rank_state {
    int n;
    gckpt_state_row row[GCKPT_MAX_STATE_ROWS];
} gckpt_rank_state;
/* Rank `rank`'s rows for setting s (a checked, multi-GPU layout) from table ps after
 * gckpt_params_shard, each allocation rounded to round. */
void gckpt_rank_rows(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                     uint64_t round, gckpt_rank_state *out);
/* The model's buffers (R-DIST-22: the rotary tables' inv_freq and original_inv_freq, computed
 * in fp32, in float_dt; gemma's embed_scale, torch.tensor(float) in the default dtype, in
 * scalar_dt), each allocation rounded to round: fp32 under every parallel mode; one GPU's pure
 * bf16 casts the model whole, its buffers too; from_pretrained(dtype=bfloat16) (QLoRA) makes
 * embed_scale bf16 and leaves the rotary tables fp32 (FINDINGS R-VLM-90). */
uint64_t gckpt_model_buffer_bytes(const gckpt_model *m, gckpt_dtype float_dt, gckpt_dtype scalar_dt, uint64_t round);
/* The optimizer's step counters on the device for table ps's trainable tensors (every
 * instance): 4 B each under torch AdamW(fused=True), none under the others (R-TP-4, R-VLM-90). */
uint64_t gckpt_step_counter_bytes(const gckpt_params *ps, gckpt_optimizer o);
/* The rows kept between steps summed per kind (what gckpt_rank_persistent returns). */
void gckpt_rank_rows_sum(const gckpt_rank_state *st, gckpt_rank_bytes *out);
/* Bytes of the rows of one kind. */
uint64_t gckpt_rank_rows_bytes(const gckpt_rank_state *st, gckpt_row_kind kind);

/* Make context c (its setting a checked multi-GPU layout) one rank's: the table's shard fields,
 * the persistent totals of the layout's rank (0 in a plan; under zero2 the evaluator also
 * walks the last rank, gckpt_fast_eval), what the mode keeps besides in c->parallel and the optimizer step's
 * share. What changes within the step is the schedule's events (core/sim_parallel.c):
 *  ddp:   c->parallel: the buckets (a flat fp32 copy of every gradient), step counters, buffers;
 *  zero1: the ipg bucket (reduce_bucket_size elements) held through the step; the full
 *         model-dtype gradients accumulate in .grad as on one GPU (FINDINGS 13.6, exact);
 *  zero2: the gradients, the ipg bucket and the rank's reduced slice are events; the slice
 *         (c->par.z2_numel elements) reaches the step;
 *  zero1/zero2 with offload_optimizer (FINDINGS 13.10): no fp32 master, states, step
 *         temporaries or reduced slice on the device (they are host bytes); a model-dtype
 *         buffer of the largest parameter (temp_grad_buffer_for_gpu_offload) persists; the
 *         gradient norm's fp64 copy of each slice is a transient at its reduction;
 *  zero3: the flat gradient partitions and the ipg bucket persist; gathered parameters and
 *         transient .grads are events;
 *  fsdp:  the units' buffers are events; the fp32 sharded gradients (c->par.unit_part) reach the step. */
void gckpt_parallel_apply(gckpt_ctx *c);

/* ZeRO-3: whether gathered parameters stay from their forward use to their backward (DeepSpeed
 * releases a module's parameters after its forward once more than stage3_max_live_parameters
 * elements are gathered or the parameter's next use lies more than stage3_max_reuse_distance
 * (1e9 elements) ahead): here, when every non-persistent parameter fits both limits at once;
 * otherwise each is released after its forward and gathered again for the recompute and the
 * backward (the fixtures' `tight` variant). The limits' partial case is not modelled. */
bool gckpt_zero3_keeps_gathered(const gckpt_ctx *c);

/* The PCIe copies of a layout with CPU offload (0 without), added to res->copy_s and
 * returned for the step time (not overlapped: unverified, FINDINGS 13.10). FSDP2's
 * CPUOffloadPolicy: each unit's shards, in the dtype each is stored in (frozen ones too), H2D
 * before every all-gather, the trainable parameters' fp32 sharded gradients D2H on the
 * synchronising micro-step. ZeRO-3: the reduced
 * gradient partitions D2H each micro-step (offload_optimizer), the stepped partitions H2D
 * (offload_optimizer alone), each gathered parameter's partition H2D before its all-gather
 * (offload_param; v's gathers over the ranks). ZeRO-1/2 (offload_optimizer): the partition's
 * gradient slices D2H as fp32 at the boundary, the stepped model-dtype partition H2D; under
 * gradient accumulation each whole gradient of the partition's parameters D2H into its pinned
 * accumulator and H2D back to be added (ZeRO-2: every micro-step, ZeRO-1: at the boundary).
 * At the profile's h2d / d2h rates. */
typedef struct gckpt_comm_volume gckpt_comm_volume;
double gckpt_parallel_offload_seconds(const gckpt_ctx *c, uint64_t grad_accum, const gckpt_comm_volume *v,
                                      gckpt_result *res);

/* Whether profile d has the bus bandwidth layout l needs (err names the field when not). */
bool gckpt_parallel_device_ok(const gckpt_device *d, const gckpt_layout *l, gckpt_err *err);

/* One step's collectives on a rank, bytes of the full (unsharded) buffers (FINDINGS R-DIST-12):
 * all-gathers in the forward, the backward and after the optimizer step, and the gradients'
 * reductions (all-reduce for DDP / ZeRO-1/2, reduce-scatter for FSDP2 / ZeRO-3), of them the
 * all-reduces' bytes. */
struct gckpt_comm_volume {
    double gather_fwd, gather_bwd, gather_opt, reduce, all_reduce;
    double gather_part[GCKPT_NSEC]; /* elements of the all-gathers' pieces (one rank's) per section */
};
/* The volumes of res, a walked or composed step: its COLLECTIVE events' bytes (gckpt_result's
 * coll_*), the only source of the collectives' volume. */
void gckpt_parallel_volume(const gckpt_result *res, gckpt_comm_volume *v);

/* Add to res->step_s (and res->comm_s) the collectives' time that compute does not hide (the
 * volumes of gckpt_parallel_volume: the schedule's COLLECTIVE events), at the profile's bus
 * bandwidth (intra-node, or inter-node when there are several nodes):
 * all-gathers of the forward behind the forward, those of the backward and the reduction
 * behind the backward and recompute (prefetch on side streams, bucket hooks: FINDINGS 13.7
 * D7, from the source; unverified on GPUs), the optimizer's all-gather exposed. */
void gckpt_parallel_comm(const gckpt_ctx *c, uint64_t grad_accum, gckpt_result *res);

/* Host bytes of a CPU offload that depend on the accumulation (added to res->host_pinned_bytes):
 * ZeRO-1/2 offload_optimizer keeps a pinned model-dtype accumulator per parameter of the
 * rank's partition once a step has more than one micro-step (stage_1_and_2.py,
 * async_accumulate_grad_in_cpu_via_gpu). */
void gckpt_parallel_offload_host(const gckpt_ctx *c, uint64_t grad_accum, gckpt_result *res);

/* ZeRO-1/2 (DeepSpeed's stage_1_and_2.py): every optimizer group (decay, no decay) flattened
 * in named_parameters order and padded; one rank's partition of it (what the rank's fp32 master
 * and AdamW states cover and what its step updates before the weights are all-gathered). */
typedef struct {
    uint64_t numel;        /* the group's parameters' elements */
    uint64_t padded;       /* padded to a multiple of 2 x ranks (nccl_start_alignment_factor) */
    uint64_t part;         /* a rank's partition: padded / ranks */
    uint64_t weight_bytes; /* the flat model-dtype weights, replicated (rounded) */
    uint64_t master_bytes, state_bytes; /* the fp32 master partition; each AdamW state on it */
} gckpt_zero_group;
void gckpt_zero12_groups(const gckpt_params *ps, const gckpt_setting *s, uint64_t round, gckpt_zero_group g[2]);

/* A parameter instance's place in its group's flat buffer: table entry, copy (layer), group
 * and element offset. */
typedef struct {
    int param;
    uint64_t copy;
    uint8_t group;
    uint64_t offset;
} gckpt_flat_place;
/* Every instance's place in the flat order (the embedding, each layer's parameters in module
 * order, the head; per group); out NULL: only the count (the table's instances). */
size_t gckpt_zero12_flat(const gckpt_params *ps, uint64_t layers, gckpt_flat_place *out);
/* Whether the instance at f overlaps rank's partition of `part` elements. */
bool gckpt_zero12_in_partition(const gckpt_params *ps, const gckpt_flat_place *f, uint64_t part, uint32_t rank);
/* The gradients `rank` of n reduces between the backward and the step (ZeRO-1's .grad kept
 * into the step, ZeRO-2's averaged_gradients): every parameter overlapping its partition
 * counts whole (dist_rules.py zero12_grad_partition, measured on every rank). */
typedef struct {
    uint64_t grad_bytes; /* their .grad as allocated (each rounded) */
    uint64_t numel;      /* their elements */
    uint64_t max_slice;  /* the largest piece of one of them inside the partition, elements */
} gckpt_zero12_keep;
void gckpt_zero12_step_grads(const gckpt_params *ps, uint64_t layers, uint32_t n, uint32_t rank, gckpt_zero12_keep *out);
/* Elements of table entry `param`'s instance `copy` (its layer; 0 outside the blocks) that lie
 * in rank's partition of its flat group (0 when it lies outside). */
uint64_t gckpt_zero12_slice(const gckpt_params *ps, uint64_t layers, uint32_t n, uint32_t rank, int param,
                            uint64_t copy);
/* ZeRO-1's reduction at the boundary as DeepSpeed flushes the ipg bucket (stage_1_and_2.py
 * reduce_gradients, FINDINGS R-DIST-25): places [first, end) of the flat order (gckpt_zero12_flat)
 * reduced by one flush, numel their elements (a parameter larger than the bucket is alone in its
 * flush). out NULL: only the count. The schedule's COLLECTIVE events of the reduction and the
 * executor's all-reduces both read it. */
typedef struct {
    size_t first, end;
    uint64_t numel;
} gckpt_zero1_flush;
size_t gckpt_zero1_flushes(const gckpt_params *ps, const gckpt_flat_place *f, size_t count, uint64_t bucket,
                           gckpt_zero1_flush *out);
/* DDP's gradient buckets as its reducer fills and all-reduces them (torch 2.15
 * torch/nn/parallel/distributed.py and reducer.cpp, FINDINGS R-DIST-1, R-DIST-11): the trainable
 * parameter instances in the order their gradients become ready in the backward (the head's, each
 * layer's from the last in reverse module order, the embedding's last), a bucket closing once it
 * holds at least its cap of fp32 gradients (1 MiB the first, 25 MiB the others): the layout the
 * reducer rebuilds after the first iteration with checkpointing. Without checkpointing the
 * measured layout differs (not derived; the sum is the same). out[k]: the k-th instance and its
 * bucket; out NULL: only the count. */
typedef struct {
    int param;
    uint64_t copy;
    uint32_t bucket;
} gckpt_ddp_slot;
size_t gckpt_ddp_buckets(const gckpt_params *ps, uint64_t layers, gckpt_ddp_slot *out);

/* ZeRO-1 (no offload): the most bytes rank's reduction at the boundary holds above the state at
 * the end of the last backward (the full .grad), as stage_1_and_2.py's reduce_gradients moves them
 * through the ipg bucket of `bucket` elements into grads_in_partition (core/parallel.c says how);
 * zs: the model dtype's bytes. */
uint64_t gckpt_zero1_reduce_transient(const gckpt_params *ps, uint64_t layers, uint32_t n, uint32_t rank,
                                      uint64_t bucket, uint64_t zs, uint64_t round);
/* The step's temporaries for a partition of `part` elements, bytes: the rank's gradient slice
 * concatenated in the model dtype (zs bytes), its fp32 copy (none in fp32), DeepSpeed's scalars
 * (FINDINGS 13.5). */
enum { GCKPT_ZERO_TEMP_SLICE, GCKPT_ZERO_TEMP_F32, GCKPT_ZERO_TEMP_SCALARS, GCKPT_ZERO_NTEMP };
void gckpt_zero12_temp(uint64_t part, uint64_t zs, uint64_t round, uint64_t piece[GCKPT_ZERO_NTEMP]);

/* ---- The parallel modes as data ----
 * One descriptor per gckpt_parallel value (core/parallel_modes.c is the table, the only core
 * file besides the enum's that names a mode). Whatever differs between one GPU, DDP, FSDP2 and
 * DeepSpeed ZeRO-1/2/3 in core is a field here; code elsewhere asks the descriptor. */
struct gckpt_wrap_hooks; /* the simulator's hooks (core/sim_parallel.h, private to core) */
/* What the HF Trainer is given to run a mode (the planner writes it: planner/plan_parallel.c):
 * NONE, a row that says nothing (the planner refuses to plan the mode, naming it); DDP, nothing
 * beyond torchrun (the Trainer's default); FSDP2, fsdp=True with fsdp_config version 2;
 * DEEPSPEED, a deepspeed config of zero_stage. */
typedef enum { GCKPT_TRAINER_NONE, GCKPT_TRAINER_DDP, GCKPT_TRAINER_FSDP2, GCKPT_TRAINER_DEEPSPEED } gckpt_trainer_args;
typedef struct {
    bool multi;       /* spreads the step over several GPUs */
    /* the mode in a plan's header ("FSDP2 (fully_shard per decoder layer, ...)") and how the
     * Trainer is told to run it (gckpt_trainer_args; DEEPSPEED: its zero_optimization.stage) */
    const char *title;
    uint8_t trainer, zero_stage;
    /* what it refuses (gckpt_layout_check): fewer GPUs than min_world, and a fine-tuning method,
     * optimizer or precision whose bit (1u << the enum) is not set: what was measured per rank */
    uint32_t min_world;
    uint32_t methods, optimizers, precisions;
    /* how the parameter-state rows are sharded (gckpt_params_shard): how (gckpt_shard_how) and
     * which buffers (GCKPT_SHARD_* bits). A flat split of the weights partitions each tensor to
     * ceil(numel / N) (ZeRO-3); a flat split of the states alone leaves the optimizer groups'
     * flat buffers to decide (ZeRO-1/2, gckpt_zero12_groups); a dim-0 split is FSDP2's. */
    uint8_t shard_how, sharded;
    bool persistence;      /* tensors under stage3_param_persistence_threshold are kept whole too */
    bool deepspeed;        /* DeepSpeed's limits apply (ds_config; a plan's inputs.layout.deepspeed) */
    bool flat_groups;      /* every optimizer group one flat, padded buffer (overlap_comm: two ipg buckets) */
    bool bf16_compute;     /* under amp-bf16 the ranks compute in bf16 (FSDP2's MixedPrecisionPolicy,
                            * DeepSpeed's bf16), not under autocast */
    bool linear_saves_input; /* F.linear is DeepSpeed's LinearFunctionForZeroStage3
                              * (memory_efficient_linear, default true), which saves its input
                              * for a frozen weight too (FINDINGS R-DISTPEFT-10) */
    bool reduce_hooks;     /* each backward's hooks reduce and free .grad: it does not survive a
                            * micro-step, and the reduction overlaps every backward */
    bool walk_every_rank;  /* the ranks' reduction buffers differ: a plan walks each, shows the busiest */
    bool ipg_bucket_event; /* the ipg bucket is a schedule event, made at the first backward's first
                            * gradient hook and freed when the step starts (without offload_optimizer) */
    bool sink_clones_logits; /* _DDPSink clones the outputs at the forward's end (find_unused_parameters,
                              * the Trainer's choice without gradient checkpointing) */
    bool replicate_dim;    /* takes a replicate dimension (gckpt_layout.dp_replicate, HSDP): shards over
                            * dp_shard, all-reduces the reduced shards across dp_replicate */
    bool sync_apart;       /* the synchronising micro-step's events differ from the other later ones'
                            * (FSDP2: its backward reduce-scatters, the Trainer's no_sync keeps the
                            * unsharded .grad through the others): the step walks it apart, once
                            * (gckpt_micro_runs; FINDINGS R-DIST-26) */
    /* the rows the mode adds to one rank (the model's buffers are every mode's) */
    void (*rows)(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                 uint64_t round, gckpt_rank_state *out);
    /* make context c one rank's (gckpt_parallel_apply's per-mode part) from its rows st and
     * their sums rb */
    void (*apply)(gckpt_ctx *c, const gckpt_rank_state *st, const gckpt_rank_bytes *rb);
    /* CPU offload's PCIe copies per step, bytes (gckpt_parallel_offload_seconds); NULL: none */
    void (*offload_copies)(const gckpt_ctx *c, uint64_t grad_accum, const gckpt_comm_volume *v, double *d2h,
                           double *h2d);
    const struct gckpt_wrap_hooks *sim; /* the simulator's events; NULL: the mode has none */
    /* the gradients' reduction after the last micro-step's backward (DDP's buckets, ZeRO-1's ipg
     * bucket flushes): COLLECTIVE events opening the optimizer segment (core/sim_parallel.c);
     * NULL: the mode reduces inside the micro-steps or not at all */
    void (*sync_events)(const gckpt_ctx *c, gckpt_schedule *o);
    /* the all-gather after the optimizer step (ZeRO-1/2's flat weights, ZeRO-3's persistent
     * parameters): COLLECTIVE events right after OPT_STEP (core/sim_parallel.c); NULL: none */
    void (*step_gather_events)(const gckpt_ctx *c, gckpt_schedule *o);
} gckpt_par_mode;

/* The descriptor of mode (a gckpt_parallel; out of range reads as one GPU). */
const gckpt_par_mode *gckpt_par_mode_of(unsigned mode);

#ifdef __cplusplus
}
#endif

#endif
