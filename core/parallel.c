/* Per-rank memory of DDP, FSDP2 and DeepSpeed ZeRO: the per-rank parameter-state rows, what
 * each mode does to a context, its collectives' closed forms and CPU offload's copies (the
 * functions core/parallel_modes.c's descriptor table points at; include/gckpt/core/parallel.h
 * says the rules and where they were measured). */
#include "parallel_modes.h"

#include "gckpt/core/peft.h"
#include "gckpt/core/mesh.h"
#include "gckpt/core/tp.h"

#include <stdlib.h>
#include <string.h>

#define ADAMW_STEP 4     /* torch AdamW's `step`: an fp32 scalar per parameter (group) */
#define FSDP_UNIT_BYTES 4 /* FSDP2: bytes per rank and per unit holding parameters that no Python
                           * reference reaches: 24 per rank on 4-layer models (6 units) at 2, 4 and 8
                           * ranks, 20 with a tied head's 5 units (FINDINGS R-DIST-24), one +4 N-byte
                           * allocation per fully_shard traced under PEFT's L + 3 units (R-DISTPEFT-3) */
#define HSDP_MESH_BYTES 4 /* FSDP2 over accelerate's mesh (a ParallelismConfig, HSDP or 1 x N): bytes per
                           * rank of the world kept between steps that no Python reference reaches,
                           * once, not per unit (FINDINGS R-DIST-27: 16 at 2 x 2 and 1 x 4, 32 at 2 x 4) */
#define ZERO12_NORM 4    /* ZeRO-1/2: the fp32 gradient-norm scalar kept between steps */
#define ZERO12_IPG_FLAG 4 /* ZeRO-1/2: bytes beside the ipg bucket, freed and retaken by the step (FINDINGS R-DIST-18) */
#define ZERO3_SCALARS 9  /* ZeRO-3: inf_or_nan_tracker (bool) + 8 B of scalars */
#define DDP_USED_MAP 8   /* DDP find_unused_parameters: local_used_map + its device copy, int32 each */
#define ZERO3_MAX_REUSE 1000000000ull /* stage3_max_reuse_distance's default (deepspeed/runtime/zero/config.py) */

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Trainable parameter tensors, every instance (full fine-tuning: every tensor; LoRA: the
 * adapters): what AdamW steps, DDP's reducer hooks (FINDINGS R-DISTPEFT-2). */
static uint64_t trainable_tensors(const gckpt_params *ps)
{
    uint64_t tensors = 0;
    for (int i = 0; i < ps->n; i++) tensors += ps->p[i].trainable ? ps->p[i].copies : 0;
    return tensors;
}
/* DDP's find_unused_parameters maps, per trainable tensor. */
static uint64_t ddp_used_map(const gckpt_params *ps) { return DDP_USED_MAP * trainable_tensors(ps); }
/* Whether the Trainer asks DDP for find_unused_parameters: without gradient checkpointing for a
 * PreTrainedModel (FINDINGS R-DIST-1), always for a PeftModel (R-DISTPEFT-1). */
static bool ddp_finds_unused(const gckpt_setting *s) { return !s->every_n || gckpt_peft_on(&s->peft); }

/* A quantized weight (a Params4bit): sized by what bitsandbytes stores, [ceil(n/2)/s, 1] elements
 * of the storage dtype (gckpt_quant_layout_of), not by its shape. */
static bool quantized(const gckpt_param *p) { return p->quant.scheme != GCKPT_QUANT_NONE; }
/* FSDP2: accelerate's fsdp2_prepare_model puts a frozen Params4bit of a non-floating storage
 * (bnb_4bit_quant_storage uint8) into ignored_params, whole on every rank, never gathered; a
 * floating one (bf16) is sharded as a bf16 tensor (FINDINGS R-DISTPEFT-7). */
static bool fsdp_ignored(const gckpt_param *p)
{
    return quantized(p) && !gckpt_dtype_is_float((gckpt_dtype)p->weight.dtype);
}

uint32_t gckpt_layout_world(const gckpt_layout *l)
{
    return (l->gpus ? l->gpus : 1) * (l->nodes ? l->nodes : 1);
}

uint64_t gckpt_ds_reduce_bucket(const gckpt_model *m, const gckpt_layout *l)
{
    return l->ds.set & GCKPT_DS_REDUCE_BUCKET ? l->ds.reduce_bucket : m->hidden * m->hidden;
}
uint64_t gckpt_ds_persistence_threshold(const gckpt_model *m, const gckpt_layout *l)
{
    return l->ds.set & GCKPT_DS_PERSISTENCE ? l->ds.persistence_threshold : 10 * m->hidden;
}
uint64_t gckpt_ds_max_live(const gckpt_layout *l) { return l->ds.set & GCKPT_DS_MAX_LIVE ? l->ds.max_live : 1000000000ull; }
uint64_t gckpt_ds_sub_group(const gckpt_layout *l) { return l->ds.set & GCKPT_DS_SUB_GROUP ? l->ds.sub_group : 1000000000ull; }
uint64_t gckpt_ds_ipg_buckets(const gckpt_layout *l)
{
    return l->ds.overlap_comm && gckpt_par_mode_of(l->mode)->flat_groups ? 2 : 1;
}

uint32_t gckpt_layout_replicate(const gckpt_layout *l) { return l->dp_replicate > 1 ? l->dp_replicate : 1; }
uint32_t gckpt_layout_shard_world(const gckpt_layout *l) { return gckpt_layout_world(l) / gckpt_layout_replicate(l); }
uint32_t gckpt_layout_shard_rank(const gckpt_layout *l, uint32_t rank) { return rank % gckpt_layout_shard_world(l); }
bool gckpt_layout_shard_inter_node(const gckpt_layout *l)
{
    gckpt_mesh m = gckpt_layout_mesh(l);
    return gckpt_mesh_group_inter_node(&m, GCKPT_GROUP_SHARD);
}
bool gckpt_layout_replicate_inter_node(const gckpt_layout *l)
{
    gckpt_mesh m = gckpt_layout_mesh(l);
    return gckpt_mesh_group_inter_node(&m, GCKPT_GROUP_REPLICATE);
}

bool gckpt_layout_multi(const gckpt_layout *l) { return gckpt_par_mode_of(l->mode)->multi; }

bool gckpt_layout_ipg_bucket_event(const gckpt_layout *l)
{
    return gckpt_par_mode_of(l->mode)->ipg_bucket_event; /* offload_optimizer too (R-DISTPEFT-19) */
}

/* LoRA / QLoRA on several GPUs as FINDINGS R-DISTPEFT-1..8 measured them: the Trainer's bf16=True,
 * 4-bit weights stored as uint8 or bf16, no modules_to_save copies, FSDP2 resharding after the
 * forward, over one dimension or accelerate's HSDP mesh (R-DISTPEFT-11); FSDP2's CPUOffloadPolicy
 * over one dimension or accelerate's HSDP mesh as read and run on the CPU (R-DISTPEFT-12, -17; its
 * plans warned parallel_offload_unverified); ZeRO offload with LoRA / QLoRA as run on the CPU
 * (R-DISTPEFT-15, -16, -18, -19); fp32 LoRA under FSDP2 / HSDP (R-DISTPEFT-24); the rest is R-DISTPEFT-9's
 * unverified list. */
static bool peft_ok(const gckpt_setting *s, const char *mode, gckpt_err *err)
{
    const gckpt_peft *pf = &s->peft;
    const char *how = gckpt_method_names[pf->method];
    /* fp32 (bf16=False) with LoRA under FSDP2, over one dimension or HSDP's mesh, with or without CP: measured
     * (R-DISTPEFT-24, R-CP-23; CP's refusal of HSDP with adapters is planner/plan_cp.c's); QLoRA in fp32 is not */
    const bool fp32_ok = s->precision == GCKPT_FP32 && s->layout.mode == GCKPT_PAR_FSDP && pf->method == GCKPT_METHOD_LORA;
    const char *why = s->precision != GCKPT_AMP_BF16 && !fp32_ok
                          ? "only --precision amp-bf16 (the Trainer's bf16=True), or fp32 with --method lora under fsdp, "
                            "is measured"
                      : pf->modules_to_save ? "--modules-to-save is not measured on several GPUs"
                      : s->layout.fsdp_keep_gathered ? "reshard_after_forward false is not measured with adapters"
                      : pf->method != GCKPT_METHOD_QLORA ? NULL
                      : pf->quant == GCKPT_QUANT_INT8 ? "--quant int8 (LLM.int8) is not measured on several GPUs"
                      : pf->quant_storage != GCKPT_DT_U8 && pf->quant_storage != GCKPT_DT_BF16
                          ? "only --quant-storage uint8 or bf16 is measured"
                          : NULL;
    if (why) gckpt_seterr(err, "--parallel %s --method %s: %s (FINDINGS R-DISTPEFT-9)", mode, how, why);
    return !why;
}

bool gckpt_layout_check(const gckpt_setting *s, gckpt_err *err)
{
    const gckpt_par_mode *d = gckpt_par_mode_of(s->layout.mode);
    const char *mode = gckpt_parallel_names[s->layout.mode];
    if (!d->multi) return true;
    if ((uint64_t)(s->layout.gpus ? s->layout.gpus : 1) * (s->layout.nodes ? s->layout.nodes : 1) > GCKPT_MAX_RANKS) {
        gckpt_seterr(err, "--gpus x --nodes: more than %d GPUs", GCKPT_MAX_RANKS);
        return false;
    }
    if (gckpt_layout_world(&s->layout) < d->min_world) {
        gckpt_seterr(err, "--parallel %s needs more than one GPU (--gpus, --nodes)", mode);
        return false;
    }
    if (s->layout.dp_replicate >= 1 && !d->replicate_dim) {
        gckpt_seterr(err, "--dp-replicate: --parallel %s has no replicate dimension (HSDP is --parallel fsdp)", mode);
        return false;
    }
    if (s->layout.dp_replicate > 1 && gckpt_layout_world(&s->layout) % s->layout.dp_replicate) {
        gckpt_seterr(err, "--dp-replicate %u does not divide the world of %u GPUs (accelerate ParallelismConfig: "
                          "dp_replicate_size x dp_shard_size must equal the number of processes)",
                     s->layout.dp_replicate, gckpt_layout_world(&s->layout));
        return false;
    }
    /* (transformers' own HSDP mesh under TP may shard over 1: FSDP2 then replicates, R-TP-11) */
    if (s->layout.dp_replicate > 1 && gckpt_layout_shard_world(&s->layout) < 2 && !s->layout.tp) {
        gckpt_seterr(err, "--dp-replicate %u: dp_shard_size 1 leaves FSDP no dimension to shard across "
                          "(accelerate ParallelismConfig._validate_accelerator)", s->layout.dp_replicate);
        return false;
    }
    if (!(d->methods >> s->peft.method & 1)) {
        gckpt_seterr(err, "--parallel %s: only full fine-tuning is planned per rank in this mode", mode);
        return false;
    }
    if (gckpt_peft_on(&s->peft) && !peft_ok(s, mode, err)) return false;
    if (!(d->optimizers >> s->optimizer & 1)) {
        gckpt_seterr(err, "--parallel %s: only --optimizer adamw is planned per rank (FINDINGS R-DIST-13..15 measured "
                          "the Trainer's adamw_torch_fused)", mode);
        return false;
    }
    /* transformers' own fully_shard under TP also takes a bf16-loaded model as it is (R-TP-30) */
    bool as_loaded_bf16 = s->layout.fsdp_as_loaded && s->precision == GCKPT_BF16;
    if (!(d->precisions >> s->precision & 1) && !as_loaded_bf16) {
        gckpt_seterr(err, "--parallel %s: only --precision amp-bf16 (the Trainer's bf16=True) or fp32 are "
                          "planned per rank", mode);
        return false;
    }
    return true;
}


gckpt_precision gckpt_parallel_compute_precision(const gckpt_setting *s)
{
    return gckpt_par_mode_of(s->layout.mode)->bf16_compute && !s->layout.fsdp_as_loaded && s->precision == GCKPT_AMP_BF16
               ? GCKPT_BF16 : s->precision;
}

void gckpt_setting_recipe(const gckpt_model *m, const gckpt_setting *s, gckpt_target target, gckpt_recipe *r)
{
    gckpt_precision p = gckpt_parallel_compute_precision(s);
    gckpt_peft pf = s->peft;
    pf.wrapper_cast = p != s->precision; /* the wrapper's bf16 replaces autocast */
    pf.linear_saves_input = gckpt_par_mode_of(s->layout.mode)->linear_saves_input;
    gckpt_recipe_build_loss(m, p, s->attention, target, &pf, s->seq, s->loss, s->liger_off, r);
}

/* A parameter's dim 0 and the elements of one row (a 1-D tensor is stored as one row; a
 * quantized weight as its packed [stored, 1]). */
static uint64_t dim0(const gckpt_param *p) { return quantized(p) ? p->weight.numel : p->rows == 1 ? p->cols : p->rows; }
static uint64_t row_numel(const gckpt_param *p) { return quantized(p) || p->rows == 1 ? 1 : p->cols; }

void gckpt_params_shard(gckpt_params *ps, const gckpt_model *m, const gckpt_layout *l)
{
    const gckpt_par_mode *d = gckpt_par_mode_of(l->mode);
    uint32_t n = d->multi ? gckpt_layout_shard_world(l) : 1;
    for (int i = 0; i < ps->n; i++) {
        gckpt_param *p = &ps->p[i];
        /* transformers Trainer.get_decay_parameter_names: norms and biases get no decay */
        p->shard.group = p->role == GCKPT_ROLE_NORM_WEIGHT || p->role == GCKPT_ROLE_BIAS;
        p->shard.how = d->shard_how;
        p->shard.buffers = d->sharded;
        p->shard.ways = d->shard_how == GCKPT_SHARD_NONE ? 1 : n;
        p->shard.dim = 0;
        /* ZeRO-3 counts a Params4bit's stored elements against the threshold (R-DISTPEFT-8) */
        p->shard.whole = d->persistence && p->weight.numel < gckpt_ds_persistence_threshold(m, l);
        p->shard.part = 0;
        if (!(d->sharded & GCKPT_SHARD_WEIGHT)) continue; /* ZeRO-1/2: the group's flat partition decides */
        if (d->shard_how == GCKPT_SHARD_DIM0 && fsdp_ignored(p)) {
            p->shard.ways = 1; /* whole on every rank */
            p->shard.whole = true;
        } else if (d->shard_how == GCKPT_SHARD_DIM0) p->shard.part = cdiv(dim0(p), n) * row_numel(p);
        else if (d->shard_how == GCKPT_SHARD_FLAT) p->shard.part = cdiv(p->weight.numel, n);
    }
}

uint64_t gckpt_shard_local(const gckpt_param *p, uint32_t r)
{
    uint64_t lo = (uint64_t)r * p->shard.part, n = p->weight.numel;
    return n > lo ? (n - lo < p->shard.part ? n - lo : p->shard.part) : 0;
}

/* ---- The per-rank parameter-state table ---------------------------------------------------- */

/* Append a row: count allocations of `elements` elements, each_bytes each as allocated. */
static void row(gckpt_rank_state *st, const char *what, gckpt_row_kind kind, int param, gckpt_dtype dt,
                gckpt_shard_how how, uint64_t count, uint64_t elements, uint64_t each_bytes)
{
    if (st->n >= GCKPT_MAX_STATE_ROWS) abort(); /* GCKPT_MAX_STATE_ROWS bounds every mode's rows */
    st->row[st->n++] = (gckpt_state_row){what, (uint8_t)kind, (int16_t)param, 0, (uint8_t)dt, GCKPT_PLACE_DEVICE,
                                         (uint8_t)how, count, elements, count * each_bytes, false, 0};
}
/* A scalar row: `bytes` measured bytes per allocation, summed unrounded. */
static void scalar_row(gckpt_rank_state *st, const char *what, uint64_t count, uint64_t bytes)
{
    row(st, what, GCKPT_ROW_SCALARS, -1, GCKPT_DT_U8, GCKPT_SHARD_NONE, count, bytes, bytes);
}

/* The Trainer's optimizer groups that hold a trainable parameter (LoRA: the adapters all decay,
 * so one; FINDINGS R-DISTPEFT-5). */
static int optimizer_groups(const gckpt_params *ps)
{
    bool g[2] = {false, false};
    for (int i = 0; i < ps->n; i++)
        if (ps->p[i].trainable && ps->p[i].copies * ps->p[i].numel != 0) g[ps->p[i].shard.group] = true;
    return g[0] + g[1];
}

/* A quantized weight's statistics (absmax, code books: R-QUANT-4..8), whole on every rank in every
 * mode, never sharded (bitsandbytes re-attaches the module's quant_state to a gathered weight,
 * R-DISTPEFT-7, -8). */
static const char QUANT_STATS[] = "quantization statistics";
static void quant_stats_row(gckpt_rank_state *st, int i, const gckpt_param *p, uint64_t round)
{
    if (!quantized(p)) return;
    for (int k = 0; k < GCKPT_NQS; k++) { /* each piece its own allocation (gckpt_quant_layout_of) */
        const gckpt_quant_piece *q = &p->quant.layout.stat[k];
        if (!q->numel) continue;
        row(st, QUANT_STATS, GCKPT_ROW_WEIGHTS, i, (gckpt_dtype)q->dtype, GCKPT_SHARD_NONE, p->copies, q->numel,
            gckpt_round_up(q->bytes, round));
        st->row[st->n - 1].qstat = (uint8_t)(k + 1);
    }
}

/* A frozen parameter kept whole on every rank: a quantized weight as bitsandbytes stores it
 * (ZeRO leaves a Params4bit's storage dtype alone), any other in dtype dt (DeepSpeed's bf16 casts
 * it; DDP: as loaded), with its statistics. */
static void whole_frozen_row(gckpt_rank_state *st, int i, const gckpt_param *p, gckpt_dtype dt, uint64_t round)
{
    if (quantized(p))
        row(st, "quantized weight, whole", GCKPT_ROW_WEIGHTS, i, (gckpt_dtype)p->weight.dtype, GCKPT_SHARD_NONE,
            p->copies, p->weight.numel, p->weight.bytes);
    else
        row(st, "frozen weight, whole", GCKPT_ROW_WEIGHTS, i, dt, GCKPT_SHARD_NONE, p->copies, p->numel,
            gckpt_round_up(gckpt_dtype_size(dt) * p->numel, round));
    quant_stats_row(st, i, p, round);
}
/* ZeRO's model dtype: bf16 under the Trainer's bf16=True, else fp32 */
static gckpt_dtype zero_dtype(const gckpt_setting *s) { return s->precision == GCKPT_FP32 ? GCKPT_DT_F32 : GCKPT_DT_BF16; }

/* The model's buffers (FINDINGS R-DIST-22; read in transformers 5.24's modeling_*.py, every
 * nn.Buffer): each rotary table's inv_freq and original_inv_freq [rotary_dim / 2]
 * (gemma3_text: one pair per layer type, Gemma3RotaryEmbedding; phi3 and gpt_neox: the
 * partial rotary's dims), the gemma family's embed_scale (a 0-d tensor); GPT-2 has none.
 * The one rule: the rows below and gckpt_model_buffer_bytes read it. */
typedef struct {
    uint64_t rotary, half; /* rotary buffers of `half` elements each */
    bool embed_scale;
} model_buffers;

static model_buffers buffers_of(const gckpt_model *m)
{
    if (m->learned_positions) return (model_buffers){0, 0, false};
    return (model_buffers){2 * (uint64_t)m->rope_tables, m->rotary_dim / 2, m->embed_scale};
}

/* fp32 in every parallel mode (DeepSpeed's bf16 and FSDP2 keep them fp32) */
static void model_buffer_rows(const gckpt_model *m, uint64_t round, gckpt_rank_state *st)
{
    model_buffers b = buffers_of(m);
    if (b.rotary)
        row(st, "rotary inv_freq and original_inv_freq", GCKPT_ROW_BUFFERS, -1, GCKPT_DT_F32, GCKPT_SHARD_NONE,
            b.rotary, b.half, gckpt_round_up(4 * b.half, round));
    if (b.embed_scale)
        row(st, "embed_scale", GCKPT_ROW_BUFFERS, -1, GCKPT_DT_F32, GCKPT_SHARD_NONE, 1, 1, gckpt_round_up(4, round));
}

uint64_t gckpt_model_buffer_bytes(const gckpt_model *m, gckpt_dtype float_dt, gckpt_dtype scalar_dt, uint64_t round)
{
    model_buffers b = buffers_of(m);
    uint64_t sz = gckpt_dtype_size(float_dt);
    return b.rotary * gckpt_round_up(sz * b.half, round) +
           (b.embed_scale ? gckpt_round_up(gckpt_dtype_size(scalar_dt), round) : 0);
}

/* The step counter each trainable tensor's optimizer state keeps on the device: torch
 * AdamW(fused=True)'s `step` is an fp32 0-d tensor on the parameter's device; without fused
 * (or capturable) it is a CPU tensor (torch 2.15 optim/adam.py _init_group), bitsandbytes'
 * a Python int (optim/optimizer.py), SGD keeps none. */
static const uint8_t device_step[GCKPT_NOPT] = {[GCKPT_ADAMW] = ADAMW_STEP};

uint64_t gckpt_step_counter_bytes(const gckpt_params *ps, gckpt_optimizer o)
{
    return o < GCKPT_NOPT ? device_step[o] * trainable_tensors(ps) : 0;
}

/* DDP: full replicas of the weights and AdamW's states as on one GPU, the buckets (a flat copy
 * of every gradient), torch AdamW's step per tensor, find_unused_parameters' maps (every_n off). */
void gckpt_rows_ddp(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                    uint64_t round, gckpt_rank_state *st)
{
    (void)m, (void)rank;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        if (!p->trainable) { /* as loaded (QLoRA: prepare_model_for_kbit_training's fp32), R-DISTPEFT-2 */
            whole_frozen_row(st, i, p, (gckpt_dtype)p->weight.dtype, round);
            continue;
        }
        row(st, "weight", GCKPT_ROW_WEIGHTS, i, (gckpt_dtype)p->weight.dtype, GCKPT_SHARD_NONE, p->copies,
            p->weight.numel, p->weight.bytes);
        row(st, "exp_avg", GCKPT_ROW_STATES, i, (gckpt_dtype)p->state[0].dtype, GCKPT_SHARD_NONE, p->copies,
            p->state[0].numel, p->state[0].bytes);
        row(st, "exp_avg_sq", GCKPT_ROW_STATES, i, (gckpt_dtype)p->state[1].dtype, GCKPT_SHARD_NONE, p->copies,
            p->state[1].numel, p->state[1].bytes);
    }
    /* fp32 elements of the trainable parameters' gradients as allocated (each .grad's allocation
     * rounded): the reducer is built over requires_grad parameters only (R-DISTPEFT-2) */
    row(st, "DDP buckets (a flat copy of every gradient)", GCKPT_ROW_GRADS, -1, GCKPT_DT_F32, GCKPT_SHARD_NONE, 1,
        ps->grad_bytes / 4, gckpt_round_up(ps->grad_bytes, round));
    scalar_row(st, "AdamW step", trainable_tensors(ps), ADAMW_STEP);
    if (ddp_finds_unused(s))
        scalar_row(st, "find_unused_parameters' used map and its device copy", trainable_tensors(ps), DDP_USED_MAP);
}

/* FSDP2: the dtype a parameter's padded local shard is stored in: accelerate upcasts the trainable
 * ones to fp32, a frozen one keeps its loaded dtype (fp32 here, QLoRA's prepared fp32), a bf16
 * Params4bit its bf16 storage (FINDINGS R-DISTPEFT-4, -7); transformers' own fully_shard (TP x
 * FSDP, fsdp_as_loaded) casts nothing: torch's FSDPParam keeps the parameter's dtype without a
 * MixedPrecisionPolicy (FINDINGS R-TP-30). The row that holds it, its AdamW states, the unit's
 * sharded gradient, what CPU offload puts on the host and copies to the device before each
 * all-gather (R-DISTPEFT-12) and the simulator's buffers read it here. */
gckpt_dtype gckpt_fsdp_shard_dtype(const gckpt_setting *s, const gckpt_param *p)
{
    if (p && quantized(p)) return (gckpt_dtype)p->weight.dtype;
    return s->layout.fsdp_as_loaded && s->precision == GCKPT_BF16 ? GCKPT_DT_BF16 : GCKPT_DT_F32;
}

gckpt_dtype gckpt_fsdp_wire_dtype(const gckpt_setting *s)
{
    if (s->layout.fsdp_as_loaded) return gckpt_fsdp_shard_dtype(s, NULL);
    return s->precision == GCKPT_FP32 ? GCKPT_DT_F32 : GCKPT_DT_BF16;
}

/* What one unit's parameters add to a per-section figure. */
typedef enum {
    FSDP_PART,      /* elements of every sharded parameter: what the all-gather carries */
    FSDP_GRAD_PART, /* ... of those that get a gradient, which the reduce-scatter carries (R-DISTPEFT-4) */
    FSDP_HOST,      /* bytes as stored (fsdp_shard_dtype): CPU offload's H2D copy per all-gather */
    FSDP_F32_PART   /* elements stored fp32: copied to the device, then cast to the all-gather's dtype */
} fsdp_unit_figure;

/* FSDP2: one unit's figure per section (the embedding, one layer, the tail) over its padded local
 * shards. A tied head: accelerate's fsdp2_prepare_model shards [final norm, embedding, lm_head]
 * as one unit (one all-gather, one reduce-scatter, one fp32 sharded gradient), the tail unit is
 * empty (core/sim_parallel.c places that unit at the embedding's). */
static void fsdp_unit_parts(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, fsdp_unit_figure what,
                            uint64_t part[GCKPT_NSEC])
{
    for (int k = 0; k < GCKPT_NSEC; k++) part[k] = 0;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        gckpt_dtype dt = gckpt_fsdp_shard_dtype(s, p);
        bool in = what == FSDP_PART || what == FSDP_HOST || (what == FSDP_GRAD_PART ? p->trainable : dt == GCKPT_DT_F32);
        part[p->section] += in ? p->shard.part * (what == FSDP_HOST ? gckpt_dtype_size(dt) : 1) : 0;
    }
    if (m->tied) {
        part[GCKPT_SEC_EMBED] += part[GCKPT_SEC_HEAD];
        part[GCKPT_SEC_HEAD] = 0;
    }
}

/* FSDP2's units holding parameters: one per decoder layer, the embedding and the tail
 * ([final norm, lm_head]; a tied head's [final norm, embedding, lm_head] is one unit). On a
 * PeftModel accelerate's _find_final_norm finds no norm, so the tail is [lm_head] and the
 * final norm falls to the root, one unit more (FINDINGS R-DISTPEFT-3). */
static uint64_t fsdp_units(const gckpt_model *m, const gckpt_setting *s)
{
    return m->layers + (m->tied ? 1 : 2) + (gckpt_peft_on(&s->peft) ? 1 : 0);
}

/* FSDP2: every parameter sharded along dim 0 in the dtype it has (accelerate upcasts the trainable
 * ones to fp32; a frozen one keeps its loaded dtype: fp32 here, QLoRA's prepared fp32, a bf16
 * Params4bit's bf16), whatever the MixedPrecisionPolicy computes in; a uint8 Params4bit whole
 * (ignored_params); AdamW's states on the trainable parameters' unpadded local rows; AdamW's
 * step per trainable tensor; 4 N bytes per unit; within the step, each unit's fp32 sharded
 * gradient (a flat buffer its trainable parameters' .grad view). */
void gckpt_rows_fsdp(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                     uint64_t round, gckpt_rank_state *st)
{
    uint32_t n = gckpt_layout_world(&s->layout), shard_rank = gckpt_layout_shard_rank(&s->layout, rank);
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        if (fsdp_ignored(p)) {
            whole_frozen_row(st, i, p, (gckpt_dtype)p->weight.dtype, round);
            continue;
        }
        gckpt_dtype dt = gckpt_fsdp_shard_dtype(s, p);
        const char *what = !p->trainable          ? "sharded frozen parameter"
                           : dt == GCKPT_DT_F32 ? "fp32 sharded parameter"
                                                : "bf16 sharded parameter";
        row(st, what, GCKPT_ROW_WEIGHTS, i, dt, GCKPT_SHARD_DIM0, p->copies, p->shard.part, gckpt_round_up(gckpt_dtype_size(dt) * p->shard.part, round));
        quant_stats_row(st, i, p, round);
        if (!p->trainable) continue;
        uint64_t local = gckpt_shard_local(p, shard_rank); /* HSDP: the rank's place in its shard group */
        /* zeros_like of the shard: its dtype */
        row(st, "exp_avg (local rows)", GCKPT_ROW_STATES, i, dt, GCKPT_SHARD_DIM0, p->copies, local,
            gckpt_round_up(gckpt_dtype_size(dt) * local, round));
        row(st, "exp_avg_sq (local rows)", GCKPT_ROW_STATES, i, dt, GCKPT_SHARD_DIM0, p->copies, local,
            gckpt_round_up(gckpt_dtype_size(dt) * local, round));
    }
    scalar_row(st, "AdamW step", trainable_tensors(ps), ADAMW_STEP);
    if (s->layout.tp > 1) /* TP x FSDP: transformers' meshes over the TP x FSDP world (R-TP-8) */
        scalar_row(st, "device meshes", 1, gckpt_tp_mesh_bytes(s->layout.tp * n));
    else if (s->layout.dp_replicate >= 1) /* accelerate's mesh: one int32[world] (R-DIST-27), not one per unit */
        scalar_row(st, "device mesh", 1, HSDP_MESH_BYTES * n);
    else
        scalar_row(st, "device mesh and the units' tensors", n, FSDP_UNIT_BYTES * fsdp_units(m, s));
    uint64_t part[GCKPT_NSEC];
    fsdp_unit_parts(ps, m, s, FSDP_GRAD_PART, part);
    gckpt_dtype gdt = gckpt_fsdp_shard_dtype(s, NULL);
    for (int k = GCKPT_SEC_EMBED; k <= GCKPT_SEC_HEAD; k++)
        row(st, gdt == GCKPT_DT_F32 ? "fp32 sharded gradient of a unit" : "bf16 sharded gradient of a unit", GCKPT_ROW_STEP_GRADS, -1, gdt, GCKPT_SHARD_DIM0,
            k == GCKPT_SEC_BLOCK ? m->layers : 1, part[k], gckpt_round_up(gckpt_dtype_size(gdt) * part[k], round));
}

/* AdamW's step per optimizer group: torch's an fp32 tensor on the device; DeepSpeedCPUAdam's (the
 * ds_config's optimizer under offload_optimizer) a Python int (ops/adam/cpu_adam.py step: state['step'] = 0;
 * FINDINGS R-DISTPEFT-15). */
static void adamw_step_row(gckpt_rank_state *st, const gckpt_params *ps, const gckpt_setting *s)
{
    if (!(s->layout.offload & GCKPT_OFFLOAD_OPTIMIZER)) scalar_row(st, "AdamW step", (uint64_t)optimizer_groups(ps), ADAMW_STEP);
}

/* ZeRO-1/2: per optimizer group the flat model-dtype weights (replicated), the fp32 master
 * partition and AdamW's states on it; AdamW's step per group and the gradient norm. */
void gckpt_rows_zero12(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                       uint64_t round, gckpt_rank_state *st)
{
    (void)rank;
    /* frozen parameters: whole, not in the flat groups (R-DISTPEFT-5, -8) */
    for (int i = 0; i < ps->n; i++)
        if (!ps->p[i].trainable) whole_frozen_row(st, i, &ps->p[i], zero_dtype(s), round);
    gckpt_zero_group zg[2];
    gckpt_zero12_groups(ps, s, round, zg);
    for (int g = 0; g < 2; g++) {
        int first = st->n;
        row(st, "flat weights", GCKPT_ROW_WEIGHTS, -1, zero_dtype(s), GCKPT_SHARD_NONE, 1, zg[g].padded, zg[g].weight_bytes);
        row(st, "fp32 master partition", GCKPT_ROW_MASTER, -1, GCKPT_DT_F32, GCKPT_SHARD_FLAT, 1, zg[g].part,
            zg[g].master_bytes);
        row(st, "exp_avg partition", GCKPT_ROW_STATES, -1, GCKPT_DT_F32, GCKPT_SHARD_FLAT, 1, zg[g].part, zg[g].state_bytes);
        row(st, "exp_avg_sq partition", GCKPT_ROW_STATES, -1, GCKPT_DT_F32, GCKPT_SHARD_FLAT, 1, zg[g].part,
            zg[g].state_bytes);
        for (int k = first; k < st->n; k++) st->row[k].group = (uint8_t)g;
    }
    adamw_step_row(st, ps, s);
    /* under offload_optimizer the norm is made on the optimizer's device, the CPU
     * (complete_grad_norm_calculation_for_cpu_offload: device=self.device; R-DISTPEFT-15) */
    if (!(s->layout.offload & GCKPT_OFFLOAD_OPTIMIZER)) scalar_row(st, "gradient norm", 1, ZERO12_NORM);
    uint64_t bucket = gckpt_ds_reduce_bucket(m, &s->layout);
    row(st, "ipg bucket", GCKPT_ROW_IPG, -1, zero_dtype(s), GCKPT_SHARD_NONE, gckpt_ds_ipg_buckets(&s->layout), bucket,
        gckpt_round_up(gckpt_dtype_size(zero_dtype(s)) * bucket, round));
    /* the buckets are the schedule's events (ZeRO-2: each backward's; ZeRO-1: the first backward's
     * first gradient hook's, freed when the step starts), but held through the run under ZeRO-1's
     * offload_optimizer */
    const gckpt_par_mode *d = gckpt_par_mode_of(s->layout.mode);
    st->row[st->n - 1].held = !d->reduce_hooks && !gckpt_layout_ipg_bucket_event(&s->layout);
    row(st, "beside the ipg bucket (measured)", GCKPT_ROW_IPG_FLAG, -1, GCKPT_DT_U8, GCKPT_SHARD_NONE, 1, ZERO12_IPG_FLAG,
        ZERO12_IPG_FLAG);
    st->row[st->n - 1].held = true; /* freed and taken again by the step (gckpt_apply_zero12) */
}

/* ZeRO-3: each tensor's model-dtype partition (and whole under the persistence threshold); the
 * fp32 master, AdamW's states and the gradients on the flat partitions; the ipg bucket; AdamW's
 * step per group and DeepSpeed's flags. */
void gckpt_rows_zero3(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                      uint64_t round, gckpt_rank_state *st)
{
    (void)rank;
    gckpt_dtype dt = zero_dtype(s);
    uint64_t zs = gckpt_dtype_size(dt), q = 0, bucket = gckpt_ds_reduce_bucket(m, &s->layout);
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        /* every parameter partitioned, frozen too; a Params4bit by its stored elements in its
         * storage dtype (R-DISTPEFT-6, -8); the optimizer's partitions over the trainable ones */
        gckpt_dtype pdt = quantized(p) ? (gckpt_dtype)p->weight.dtype : dt;
        uint64_t ps_ = gckpt_dtype_size(pdt);
        q += p->trainable ? p->copies * p->shard.part : 0;
        row(st, "partition", GCKPT_ROW_WEIGHTS, i, pdt, GCKPT_SHARD_FLAT, p->copies, p->shard.part,
            gckpt_round_up(ps_ * p->shard.part, round));
        if (p->shard.whole)
            row(st, "persistent whole parameter", GCKPT_ROW_WEIGHTS, i, pdt, GCKPT_SHARD_NONE, p->copies,
                p->weight.numel, gckpt_round_up(ps_ * p->weight.numel, round));
        quant_stats_row(st, i, p, round);
    }
    row(st, "fp32 master partitions", GCKPT_ROW_MASTER, -1, GCKPT_DT_F32, GCKPT_SHARD_FLAT, 1, q, gckpt_round_up(4 * q, round));
    row(st, "exp_avg partitions", GCKPT_ROW_STATES, -1, GCKPT_DT_F32, GCKPT_SHARD_FLAT, 1, q, gckpt_round_up(4 * q, round));
    row(st, "exp_avg_sq partitions", GCKPT_ROW_STATES, -1, GCKPT_DT_F32, GCKPT_SHARD_FLAT, 1, q, gckpt_round_up(4 * q, round));
    row(st, "gradient partitions", GCKPT_ROW_GRADS, -1, dt, GCKPT_SHARD_FLAT, 1, q, gckpt_round_up(zs * q, round));
    row(st, "ipg bucket", GCKPT_ROW_GRADS, -1, dt, GCKPT_SHARD_NONE, 1, bucket, gckpt_round_up(zs * bucket, round));
    adamw_step_row(st, ps, s);
    /* of them the gradient norm's 4 B are not live at a step's start under offload_optimizer, as
     * ZeRO-2's (R-DISTPEFT-16) */
    scalar_row(st, "inf_or_nan_tracker and scalars", 1,
               ZERO3_SCALARS - (s->layout.offload & GCKPT_OFFLOAD_OPTIMIZER ? ZERO12_NORM : 0));
}

void gckpt_rank_rows(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                     uint64_t round, gckpt_rank_state *out)
{
    const gckpt_par_mode *d = gckpt_par_mode_of(s->layout.mode);
    out->n = 0;
    if (d->rows) d->rows(ps, m, s, rank, round, out);
    model_buffer_rows(m, round, out);
}

void gckpt_rank_rows_sum(const gckpt_rank_state *st, gckpt_rank_bytes *out)
{
    memset(out, 0, sizeof *out);
    uint64_t *field[GCKPT_NROW_KEPT] = {&out->weights, &out->grads, &out->master, &out->states, &out->scalars, &out->buffers};
    for (int k = 0; k < st->n; k++)
        if (st->row[k].kind < GCKPT_NROW_KEPT) *field[st->row[k].kind] += st->row[k].bytes;
    out->total = out->weights + out->grads + out->master + out->states + out->scalars + out->buffers;
}

uint64_t gckpt_rank_rows_bytes(const gckpt_rank_state *st, gckpt_row_kind kind)
{
    uint64_t b = 0;
    for (int k = 0; k < st->n; k++)
        if (st->row[k].kind == kind) b += st->row[k].bytes;
    return b;
}

void gckpt_rank_persistent(const gckpt_params *ps, const gckpt_model *m, const gckpt_setting *s, uint32_t rank,
                           uint64_t round, gckpt_rank_bytes *out)
{
    gckpt_rank_state *st = malloc(sizeof *st);
    if (!st) abort();
    gckpt_rank_rows(ps, m, s, rank, round, st);
    gckpt_rank_rows_sum(st, out);
    free(st);
}


/* A block parameter's place in named_parameters order within its layer: the attention's
 * (q, k, v, o, q_norm, k_norm), the MLP's, then input_layernorm and post_attention_layernorm
 * (the modules' registration order; the recipe lists them in forward order). */
static int module_order(const gckpt_param *p)
{
    static const char *const prefix[] = {"self_attn.", "mlp.", "input_layernorm", "post_attention_layernorm"};
    for (int k = 0; k < 4; k++)
        if (!strncmp(p->name, prefix[k], strlen(prefix[k]))) return k;
    return 0;
}

/* ZeRO-3's CPU offload (FINDINGS R-OFFLOAD-8, read in deepspeed's stage3.py; with LoRA run on the
 * CPU, R-DISTPEFT-16). offload_optimizer: over the optimizer's partitions (the trainable
 * parameters') the fp32 master sub-groups and DeepSpeedCPUAdam's states move to pageable host
 * memory (_create_fp32_partitions: .to(cpu).clone()), the flat gradient partitions
 * (_setup_for_real_optimizer) and a fp32 gradient per sub-group (initialize_optimizer_states) to
 * pinned host memory; the step runs on the CPU, so no fp32 copy of a sub-group on the device; the
 * ipg bucket stays. offload_param: every parameter's model-dtype partition, frozen and persistent
 * ones too, lives in pinned host memory (the trainable ones' in the flat buffer of
 * _create_param_groups_fp16_flat_cpu_memory, the others' where _partition_param made them: the
 * engine converts the model before mark_persistent_parameters, so none is persistent then); the
 * persistent whole copies stay on the device. */
static void zero3_offload(gckpt_ctx *c, const gckpt_rank_bytes *rb, uint64_t ipg, uint64_t zs, uint64_t round)
{
    const gckpt_params *ps = &c->params;
    uint64_t q = 0, moved = 0, moved_dev = 0, moved_q = 0;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        /* a Params4bit's partition in its storage dtype (gckpt_rows_zero3, R-DISTPEFT-8), counted
         * in quant_weights */
        uint64_t b = quantized(p) ? gckpt_dtype_size((gckpt_dtype)p->weight.dtype) : zs;
        if (p->trainable) q += p->copies * p->shard.part;
        moved += p->copies * b * p->shard.part;
        *(quantized(p) ? &moved_q : &moved_dev) += p->copies * gckpt_round_up(b * p->shard.part, round);
    }
    if (c->set.layout.offload & GCKPT_OFFLOAD_OPTIMIZER) {
        c->par.host_pageable += 4 * q + 2 * 4 * q; /* fp32 master + exp_avg + exp_avg_sq */
        c->par.host_pinned += zs * q + 4 * q;      /* gradient partitions + the sub-groups' fp32 .grad */
        c->opt_states = 0;
        c->opt_temp = 0;
        c->parallel -= rb->grads - ipg;
    }
    if (c->set.layout.offload & GCKPT_OFFLOAD_PARAM) {
        c->weights -= moved_dev;
        c->quant_weights -= moved_q;
        c->par.host_pinned += moved;
    }
}

/* ZeRO-1/2's offload_optimizer (FINDINGS R-OFFLOAD-7, read in deepspeed's stage_1_and_2.py,
 * DeepSpeedZeroOptimizer, not measured). Host, pinned: per group the fp32 master partition
 * (__init__: weights_partition), its model-dtype copy (param_buffer_of_bit16_for_cpu_offload_groups)
 * and its fp32 gradient (initialize_optimizer_states), and temp_grad_buffer_for_cpu_offload (the
 * largest parameter, model dtype); pageable: DeepSpeedCPUAdam's two fp32 states. Device: the
 * model-dtype weights stay; no master, states or step temporaries (the step runs on the CPU);
 * temp_grad_buffer_for_gpu_offload (the largest parameter, model dtype) persists; the reduced
 * gradients of the partition go to the host (copy_grads_in_partition's cpu_offload branch:
 * no grads_in_partition buffer), each slice's fp64 norm copy made on the device first
 * (set_norm_for_param_grad_in_gpu). ZeRO-2 reduces in its backward hooks (the transients are
 * events, core/sim_parallel.c); ZeRO-1 reduces at the boundary's end of the backward with every
 * .grad and the ipg bucket live: its transient is taken there, as the step's. */
static void zero12_offload(gckpt_ctx *c, const gckpt_zero_group zg[2], const gckpt_zero12_keep *keep, uint64_t zs,
                           uint64_t round)
{
    const gckpt_params *ps = &c->params;
    uint64_t largest = 0, part = 0;
    for (int i = 0; i < ps->n; i++) /* over the optimizer's bit16_groups: the trainable ones (R-DISTPEFT-15) */
        if (ps->p[i].trainable && ps->p[i].numel > largest) largest = ps->p[i].numel;
    for (int g = 0; g < 2; g++) part += zg[g].part;
    c->par.host_pinned += (4 + zs + 4) * part + zs * largest;
    c->par.host_pageable += 2 * 4 * part;
    c->opt_states = 0;
    c->parallel += gckpt_round_up(zs * largest, round);
    bool hooks = gckpt_par_mode_of(c->set.layout.mode)->reduce_hooks;
    /* the accumulators: ZeRO-2's only, ZeRO-1 makes none (measured with LoRA, R-DISTPEFT-19) */
    c->par.z12_offload_numel = hooks ? keep->numel : 0;
    if (hooks) { /* ZeRO-2 */
        c->opt_temp = 0;
        c->grads = c->step_grads = 0;
        c->par.z2_numel = 0;
    } else { /* every .grad and the bucket live at the reduction; the largest slice's fp64 copy */
        c->step_grads = c->grads;
        c->opt_temp = gckpt_round_up(8 * keep->max_slice, round);
    }
}

/* Elements of the rank's unpadded local rows of the parameters that get a gradient: their sharded
 * gradients (foreach_reduce's views of the unpadded shard), and AdamW's states under FSDP2. */
static uint64_t fsdp_trainable_local(const gckpt_ctx *c)
{
    uint64_t local = 0;
    uint32_t r = gckpt_layout_shard_rank(&c->set.layout, c->set.layout.rank);
    for (int i = 0; i < c->params.n; i++)
        if (c->params.p[i].trainable) local += c->params.p[i].copies * gckpt_shard_local(&c->params.p[i], r);
    return local;
}

/* FSDP2's CPUOffloadPolicy (FINDINGS R-OFFLOAD-6, read in torch's _fully_shard; with adapters
 * R-DISTPEFT-12): every parameter FSDP manages, frozen or not, keeps its padded shard in its sharded
 * dtype in pinned host memory (FSDPParam._init_sharded_param: the rows' sharded WEIGHTS); the
 * reduced sharded gradients, of the trainable ones only, go to pinned host memory as fp32
 * (foreach_reduce); AdamW's states, on the trainable local rows, and its step are on the CPU
 * (pageable: zeros_like of a CPU parameter). What FSDP does not manage stays on the device: a uint8
 * Params4bit (ignored_params) and every quantized weight's statistics (the module's quant_state,
 * neither a parameter nor a buffer). The device keeps the unsharded buffers and collectives'
 * buffers (the events). */
static void fsdp_offload(gckpt_ctx *c, const gckpt_rank_state *st)
{
    const gckpt_params *ps = &c->params;
    uint64_t pinned = 0, dev_w = 0, dev_q = 0;
    for (int k = 0; k < st->n; k++) {
        const gckpt_state_row *r = &st->row[k];
        if (r->kind != GCKPT_ROW_WEIGHTS || r->sharding != GCKPT_SHARD_DIM0) continue;
        pinned += r->count * r->elements * gckpt_dtype_size((gckpt_dtype)r->dtype);
        if (r->param >= 0 && quantized(&ps->p[r->param])) dev_q += r->bytes;
        else dev_w += r->bytes;
    }
    uint64_t local = fsdp_trainable_local(c), b = gckpt_dtype_size(gckpt_fsdp_shard_dtype(&c->set, NULL));
    c->par.host_pinned += pinned + b * local; /* the padded shards and the trainable ones' gradients */
    c->par.host_pageable += 2 * b * local;    /* exp_avg, exp_avg_sq */
    c->weights -= dev_w;
    c->quant_weights -= dev_q;
    c->opt_states = c->opt_temp = 0;
    c->grads = c->step_grads = 0;
}

/* The rank's largest flat piece of one optimizer group, elements: ZeRO-1/2's partition of the
 * group padded to 2N, ZeRO-3's partitions of its tensors. */
static uint64_t largest_group(const gckpt_params *ps, uint64_t n, bool flat_groups)
{
    uint64_t largest = 0, group[2] = {0, 0};
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        if (!p->trainable) continue; /* the optimizer's groups hold the trainable parameters */
        group[p->shard.group] += p->copies * (p->shard.part ? p->shard.part : p->numel);
    }
    for (int g = 0; g < 2; g++) {
        uint64_t a = flat_groups ? (group[g] + 2 * n - 1) / (2 * n) * 2 : group[g];
        if (a > largest) largest = a;
    }
    return largest;
}

void gckpt_apply_ddp(gckpt_ctx *c, const gckpt_rank_state *st, const gckpt_rank_bytes *rb)
{
    (void)st;
    /* full fine-tuning: the used maps follow each entry's every_n, not the context's (a sweep
     * shares one context across every_n): the evaluators add c->par.ddp_used_map when every_n is
     * off; a PeftModel has them whatever every_n (R-DISTPEFT-1): in c->parallel */
    bool always = gckpt_peft_on(&c->set.peft);
    uint64_t map = ddp_used_map(&c->params);
    c->par.ddp_used_map = always ? 0 : map;
    c->parallel = rb->grads + rb->scalars + rb->buffers - (always || c->set.every_n ? 0 : map);
}

void gckpt_apply_zero12(gckpt_ctx *c, const gckpt_rank_state *st, const gckpt_rank_bytes *rb)
{
    const gckpt_setting *s = &c->set;
    const gckpt_model *m = c->model;
    const gckpt_par_mode *d = gckpt_par_mode_of(s->layout.mode);
    gckpt_params *ps = &c->params;
    uint64_t round = c->dev->alloc_round_bytes, n = gckpt_layout_world(&s->layout);
    uint64_t zs = s->precision == GCKPT_FP32 ? 4 : 2, flag = gckpt_rank_rows_bytes(st, GCKPT_ROW_IPG_FLAG);
    /* ZeRO-2 (reduce hooks): the ipg bucket, the gradients and the rank's partition are the
     * schedule's events (core/sim_parallel.c) */
    /* ZeRO-1 without offload_optimizer: the bucket is an event too, made at the first backward's
     * first gradient hook (core/sim.c z1_bucket), freed when the step starts */
    uint64_t bucket = d->reduce_hooks ? 0 : gckpt_rank_rows_bytes(st, GCKPT_ROW_IPG), held = 0;
    bool bucket_held = false;
    for (int k = 0; k < st->n; k++) { /* the rows made within the step that the rank holds (gckpt_rows_zero12) */
        if (st->row[k].kind < GCKPT_NROW_KEPT || !st->row[k].held) continue;
        held += st->row[k].bytes;
        bucket_held |= st->row[k].kind == GCKPT_ROW_IPG;
    }
    bool bucket_event = d->ipg_bucket_event && !bucket_held;
    c->parallel = held + rb->scalars + rb->buffers;
    /* the step: the rank's gradient slice concatenated, its fp32 copy (13.5) */
    /* + 8 B of scalars (12 B in fp32), FINDINGS R-DIST-14 */
    uint64_t piece[GCKPT_ZERO_NTEMP];
    gckpt_zero12_temp(largest_group(ps, n, true), zs, round, piece);
    c->opt_temp = piece[GCKPT_ZERO_TEMP_SLICE] + piece[GCKPT_ZERO_TEMP_F32] + piece[GCKPT_ZERO_TEMP_SCALARS];
    c->par.step_released = bucket + flag;
    c->par.step_retaken = bucket_event ? flag : c->par.step_released;
    gckpt_zero12_keep keep;
    gckpt_zero12_step_grads(ps, m->layers, (uint32_t)n, s->layout.rank, &keep);
    c->step_grads = d->reduce_hooks ? keep.numel * zs : keep.grad_bytes;
    if (c->step_grads > c->grads) c->step_grads = c->grads;
    if (d->reduce_hooks) { /* no full .grad reaches the step: one buffer of the partition */
        c->par.z2_numel = c->step_grads / zs;
        c->grads = c->step_grads = gckpt_round_up(c->step_grads, round);
    }
    if (bucket_event)
        c->par.z1_reduce_numel = gckpt_zero1_reduce_transient(ps, m->layers, (uint32_t)n, s->layout.rank,
                                                          gckpt_ds_reduce_bucket(m, &s->layout), zs, round) / zs;
    if (s->layout.offload & GCKPT_OFFLOAD_OPTIMIZER) {
        gckpt_zero_group zg[2];
        gckpt_zero12_groups(ps, s, round, zg);
        zero12_offload(c, zg, &keep, zs, round);
    }
}

void gckpt_apply_zero3(gckpt_ctx *c, const gckpt_rank_state *st, const gckpt_rank_bytes *rb)
{
    (void)st;
    const gckpt_setting *s = &c->set;
    uint64_t round = c->dev->alloc_round_bytes, n = gckpt_layout_world(&s->layout);
    uint64_t zs = s->precision == GCKPT_FP32 ? 4 : 2;
    uint64_t ipg = gckpt_round_up(zs * gckpt_ds_reduce_bucket(c->model, &s->layout), round);
    /* gathered parameters and each .grad until the reduce hook are the schedule's events
     * (core/sim_parallel.c); the flat gradient partitions and the ipg bucket persist */
    c->parallel = rb->grads + rb->scalars + rb->buffers;
    c->grads = c->step_grads = 0;
    uint64_t largest = largest_group(&c->params, n, false);
    if (largest > gckpt_ds_sub_group(&s->layout)) largest = gckpt_ds_sub_group(&s->layout); /* sub_group_size */
    c->opt_temp = gckpt_round_up(largest * zs, round) + (zs != 4 ? gckpt_round_up(largest * 4, round) : 0);
    if (s->layout.offload) zero3_offload(c, rb, ipg, zs, round);
}

void gckpt_apply_fsdp(gckpt_ctx *c, const gckpt_rank_state *st, const gckpt_rank_bytes *rb)
{
    fsdp_unit_parts(&c->params, c->model, &c->set, FSDP_PART, c->par.unit_part);
    fsdp_unit_parts(&c->params, c->model, &c->set, FSDP_GRAD_PART, c->par.unit_grad_part);
    fsdp_unit_parts(&c->params, c->model, &c->set, FSDP_HOST, c->par.unit_host);
    fsdp_unit_parts(&c->params, c->model, &c->set, FSDP_F32_PART, c->par.unit_f32_part);
    /* the unsharded parameters and gradients, all-gather and reduce-scatter buffers are the
     * schedule's events (core/sim_parallel.c); what stays allocated into the optimizer step is
     * each unit's fp32 sharded gradient (a flat buffer its parameters' .grad view) */
    c->parallel = rb->scalars + rb->buffers;
    c->grads = c->step_grads = gckpt_rank_rows_bytes(st, GCKPT_ROW_STEP_GRADS);
    if (c->set.layout.offload) fsdp_offload(c, st);
}

void gckpt_parallel_apply(gckpt_ctx *c)
{
    const gckpt_setting *s = &c->set;
    const gckpt_par_mode *d = gckpt_par_mode_of(s->layout.mode);
    gckpt_params *ps = &c->params;
    uint64_t round = c->dev->alloc_round_bytes;
    gckpt_params_shard(ps, c->model, &s->layout);
    gckpt_rank_state *st = malloc(sizeof *st);
    if (!st) abort();
    gckpt_rank_rows(ps, c->model, s, s->layout.rank, round, st);
    gckpt_rank_bytes rb;
    gckpt_rank_rows_sum(st, &rb);
    if (d->sharded) { /* DDP's replicas keep one GPU's weights, states and optimizer step */
        uint64_t qw = 0, qs = 0; /* QLoRA: the quantized weights and their statistics (components of their own) */
        for (int k = 0; k < st->n; k++) {
            const gckpt_state_row *w = &st->row[k];
            if (w->kind != GCKPT_ROW_WEIGHTS || w->param < 0 || !quantized(&ps->p[w->param])) continue;
            if (w->qstat) qs += w->bytes;
            else qw += w->bytes;
        }
        c->weights = rb.weights - qw - qs;
        c->quant_weights = qw;
        c->quant_stats = qs;
        c->opt_states = rb.master + rb.states;
        c->opt_seconds /= (double)gckpt_layout_shard_world(&s->layout); /* each rank updates its 1/N of the
                                                                          * states (HSDP: 1/dp_shard) */
    }
    uint64_t grads = 0;
    for (int i = 0; i < ps->n; i++) grads += ps->p[i].copies * ps->p[i].grad.bytes;
    c->grads = c->step_grads = grads;
    if (d->apply) d->apply(c, st, &rb);
    free(st);
}

bool gckpt_zero3_keeps_gathered(const gckpt_ctx *c)
{
    const gckpt_params *ps = &c->params;
    uint64_t live = 0;
    for (int i = 0; i < ps->n; i++)
        if (!ps->p[i].shard.whole) live += ps->p[i].copies * ps->p[i].shard.part * ps->p[i].shard.ways;
    return live <= gckpt_ds_max_live(&c->set.layout) && live <= ZERO3_MAX_REUSE;
}

void gckpt_parallel_volume(const gckpt_result *res, gckpt_comm_volume *v)
{
    *v = (gckpt_comm_volume){.gather_fwd = res->coll_gather_fwd, .gather_bwd = res->coll_gather_bwd,
                             .gather_opt = res->coll_gather_opt, .reduce = res->coll_reduce,
                             .all_reduce = res->coll_all_reduce};
    memcpy(v->gather_part, res->coll_gather_part, sizeof v->gather_part);
}

void gckpt_parallel_comm(const gckpt_ctx *c, uint64_t grad_accum, gckpt_result *res)
{
    const gckpt_layout *l = &c->set.layout;
    const gckpt_device *dev = c->dev;
    /* the group each collective runs in: the world, or under HSDP the all-gathers and
     * reduce-scatters in the dp_shard group and the all-reduces (the only ones HSDP makes) in the
     * dp_replicate group (under TP and CP: dp_shard_cp, ranks T apart); each at its placement's
     * bandwidth (gckpt_mesh_group_bus: inter-node when the group spans nodes) */
    double n = gckpt_layout_shard_world(l), r = gckpt_layout_replicate(l);
    bool hsdp = r > 1;
    gckpt_mesh mesh = gckpt_layout_mesh(l);
    double bw = gckpt_mesh_group_bus(dev, &mesh, GCKPT_GROUP_SHARD, NULL);
    double bw_r = hsdp ? gckpt_mesh_group_bus(dev, &mesh, GCKPT_GROUP_REPLICATE, NULL) : bw;
    gckpt_comm_volume v;
    gckpt_parallel_offload_host(c, grad_accum, res);
    gckpt_parallel_volume(res, &v);
    if (bw <= 0 || bw_r <= 0) return; /* gckpt_parallel_device_ok refused this earlier */
    double ring = (n - 1) / n / bw; /* seconds per byte of an all-gather / reduce-scatter (nccl-tests busbw) */
    double t_gf = v.gather_fwd * ring, t_gb = v.gather_bwd * ring, t_go = v.gather_opt * ring;
    double t_red = hsdp ? (v.reduce - v.all_reduce) * ring + 2 * v.all_reduce * (r - 1) / r / bw_r
                        : (v.reduce + v.all_reduce) * ring; /* an all-reduce's bytes go twice */
    /* a reduction once per step (DDP, ZeRO-1, FSDP2's synchronising micro-step) overlaps one backward */
    bool every_micro = gckpt_par_mode_of(l->mode)->reduce_hooks;
    double bwd = res->backward_s + res->recompute_s, window = every_micro ? bwd : bwd / (double)grad_accum;
    double exposed = (t_gf > res->forward_s ? t_gf - res->forward_s : 0) + (t_gb > bwd ? t_gb - bwd : 0) +
                     (t_red > window ? t_red - window : 0) + t_go;
    res->comm_s = exposed;
    res->step_s += exposed + gckpt_parallel_offload_seconds(c, grad_accum, &v, res);
}

void gckpt_parallel_offload_host(const gckpt_ctx *c, uint64_t grad_accum, gckpt_result *res)
{
    uint64_t zs = c->set.precision == GCKPT_FP32 ? 4 : 2;
    if (grad_accum > 1) res->host_pinned_bytes += zs * c->par.z12_offload_numel;
}

/* Elements of the rank's ZeRO-3 partitions of the trainable parameters over every instance: the
 * optimizer's (its gradient partitions and master; with LoRA the adapters', R-DISTPEFT-16). */
static double shard_elements(const gckpt_ctx *c)
{
    double q = 0;
    for (int i = 0; i < c->params.n; i++)
        if (c->params.p[i].trainable) q += (double)(c->params.p[i].copies * c->params.p[i].shard.part);
    return q;
}

void gckpt_offload_fsdp(const gckpt_ctx *c, uint64_t grad_accum, const gckpt_comm_volume *v, double *d2h, double *h2d)
{
    /* each unit's shards H2D as stored before each of its all-gathers (R-DISTPEFT-12: frozen ones
     * too, in their own dtype): the gathered pieces' elements per section times the unit's stored
     * bytes per element; the trainable parameters' fp32 sharded gradients D2H once, at the
     * synchronising micro-step's reduce-scatter */
    (void)grad_accum;
    *h2d = 0;
    for (int k = 0; k < GCKPT_NSEC; k++)
        if (c->par.unit_part[k]) *h2d += v->gather_part[k] * (double)c->par.unit_host[k] / (double)c->par.unit_part[k];
    *d2h = (double)gckpt_dtype_size(gckpt_fsdp_shard_dtype(&c->set, NULL)) * (double)fsdp_trainable_local(c);
}

void gckpt_offload_zero12(const gckpt_ctx *c, uint64_t grad_accum, const gckpt_comm_volume *v, double *d2h, double *h2d)
{
    (void)v;
    double zs = c->set.precision == GCKPT_FP32 ? 4 : 2;
    bool hooks = gckpt_par_mode_of(c->set.layout.mode)->reduce_hooks; /* ZeRO-2 */
    gckpt_zero_group zg[2];
    gckpt_zero12_groups(&c->params, &c->set, 1, zg);
    double part = (double)(zg[0].part + zg[1].part), acc = zs * (double)c->par.z12_offload_numel;
    *d2h = 4 * part; /* the boundary's slices, as fp32 */
    *h2d = zs * part; /* the stepped partition */
    if (grad_accum > 1) { /* the accumulators: out every time, back (and added) but the first time */
        double outs = hooks ? (double)grad_accum : 1;
        *d2h += outs * acc;
        *h2d += (hooks ? outs - 1 : 1) * acc;
    }
}

void gckpt_offload_zero3(const gckpt_ctx *c, uint64_t grad_accum, const gckpt_comm_volume *v, double *d2h, double *h2d)
{
    const gckpt_layout *l = &c->set.layout;
    double n = gckpt_layout_world(l), zs = c->set.precision == GCKPT_FP32 ? 4 : 2, q = shard_elements(c);
    if (l->offload & GCKPT_OFFLOAD_OPTIMIZER) {
        *d2h += (double)grad_accum * zs * q;                      /* each micro-step's reduced partitions */
        if (!(l->offload & GCKPT_OFFLOAD_PARAM)) *h2d += zs * q; /* the stepped partitions back */
    }
    if (l->offload & GCKPT_OFFLOAD_PARAM) *h2d += (v->gather_fwd + v->gather_bwd) / n; /* a partition per gather */
}

double gckpt_parallel_offload_seconds(const gckpt_ctx *c, uint64_t grad_accum, const gckpt_comm_volume *v,
                                      gckpt_result *res)
{
    const gckpt_layout *l = &c->set.layout;
    const gckpt_par_mode *d = gckpt_par_mode_of(l->mode);
    if (!l->offload || !d->offload_copies) return 0;
    double d2h = 0, h2d = 0;
    d->offload_copies(c, grad_accum, v, &d2h, &h2d);
    double t = gckpt_copy_seconds(c->dev, true, d2h) + gckpt_copy_seconds(c->dev, false, h2d);
    res->copy_s += t;
    return t;
}

bool gckpt_parallel_device_ok(const gckpt_device *d, const gckpt_layout *l, gckpt_err *err)
{
    if (!gckpt_layout_multi(l)) return true;
    /* each group with a collective (more than one rank) at its placement's bandwidth (gckpt_parallel_comm) */
    gckpt_mesh m = gckpt_layout_mesh(l);
    for (int g = GCKPT_GROUP_SHARD; g < GCKPT_NGROUP; g++) { /* WORLD: none of its own beyond SHARD's */
        uint32_t stride, size;
        gckpt_mesh_group_shape(&m, (gckpt_group)g, &stride, &size);
        const char *field;
        if (size < 2 || gckpt_mesh_group_bus(d, &m, (gckpt_group)g, &field) > 0) continue;
        gckpt_seterr(err, "GPU profile '%s': field '%s' is missing (needed to time collectives on several GPUs)",
                     d->name, field);
        return false;
    }
    return true;
}

/* ---- ZeRO-1/2's flat groups, shared by the per-rank sizes above and the executor ---------- */

void gckpt_zero12_groups(const gckpt_params *ps, const gckpt_setting *s, uint64_t round, gckpt_zero_group g[2])
{
    uint64_t n = gckpt_layout_world(&s->layout), zs = s->precision == GCKPT_FP32 ? 4 : 2;
    memset(g, 0, 2 * sizeof *g);
    /* bit16_groups: the trainable parameters only (R-DISTPEFT-5) */
    for (int i = 0; i < ps->n; i++)
        if (ps->p[i].trainable) g[ps->p[i].shard.group].numel += ps->p[i].copies * ps->p[i].numel;
    for (int k = 0; k < 2; k++) {
        if (!g[k].numel) continue;
        g[k].padded = cdiv(g[k].numel, 2 * n) * 2 * n; /* nccl_start_alignment_factor: 2 x world */
        g[k].part = g[k].padded / n;
        g[k].weight_bytes = gckpt_round_up(g[k].padded * zs, round);
        g[k].master_bytes = g[k].state_bytes = gckpt_round_up(g[k].part * 4, round);
    }
}

size_t gckpt_zero12_flat(const gckpt_params *ps, uint64_t layers, gckpt_flat_place *out)
{
    size_t k = 0;
    int order[GCKPT_MAX_PARAMS]; /* each entry's module order, named once (not per layer) */
    for (int i = 0; i < ps->n; i++)
        order[i] = ps->p[i].section == GCKPT_SEC_BLOCK ? module_order(&ps->p[i]) : 0;
    for (int g = 0; g < 2; g++) {
        uint64_t off = 0;
        /* the flat order: the embedding, each layer's parameters in module order, the head */
        for (int sec = GCKPT_SEC_EMBED; sec <= GCKPT_SEC_HEAD; sec++)
            for (uint64_t li = 0; li < (sec == GCKPT_SEC_BLOCK ? layers : 1); li++)
                for (int mo = 0; mo < 4; mo++)
                    for (int i = 0; i < ps->n; i++) {
                        const gckpt_param *p = &ps->p[i];
                        if (p->section != sec || p->shard.group != g || order[i] != mo || !p->trainable)
                            continue;
                        if (out) out[k] = (gckpt_flat_place){i, li, (uint8_t)g, off};
                        k++;
                        off += p->numel;
                    }
    }
    return k;
}

size_t gckpt_ddp_buckets(const gckpt_params *ps, uint64_t layers, gckpt_ddp_slot *out)
{
    /* the ready order: the sections from the head back, the layers from the last, each
     * section's entries in reverse (the backward runs the forward's ops backwards) */
    static const uint64_t first_cap = 1048576, cap = 26214400; /* first_bucket_bytes_cap, bucket_bytes_cap */
    size_t k = 0;
    uint32_t bucket = 0;
    uint64_t fill = 0;
    for (int sec = GCKPT_SEC_HEAD; sec >= GCKPT_SEC_EMBED; sec--)
        for (uint64_t li = sec == GCKPT_SEC_BLOCK ? layers : 1; li-- > 0;)
            for (int i = ps->n - 1; i >= 0; i--) {
                const gckpt_param *p = &ps->p[i];
                if (p->section != sec || !p->trainable) continue;
                if (out) out[k] = (gckpt_ddp_slot){i, li, bucket};
                k++;
                fill += 4 * p->numel;
                if (fill >= (bucket ? cap : first_cap)) {
                    bucket++;
                    fill = 0;
                }
            }
    return k;
}

size_t gckpt_zero1_flushes(const gckpt_params *ps, const gckpt_flat_place *f, size_t count, uint64_t bucket,
                           gckpt_zero1_flush *out)
{
    size_t nf = 0, first = 0;
    uint64_t elems = 0;
    for (size_t k = 0; k <= count; k++) {
        uint64_t numel = k < count ? ps->p[f[k].param].numel : 0;
        /* a parameter that would overflow the bucket flushes it first; the last flush at the end */
        if (k > first && (k == count || elems + numel > bucket)) {
            if (out) out[nf] = (gckpt_zero1_flush){first, k, elems};
            nf++;
            elems = 0;
            first = k;
        }
        elems += numel;
    }
    return nf;
}

/* Elements of [offset, offset + numel) inside rank's partition of `part` elements. */
static uint64_t overlap(uint64_t offset, uint64_t numel, uint64_t part, uint32_t rank)
{
    uint64_t lo = (uint64_t)rank * part, hi = lo + part;
    uint64_t a = offset > lo ? offset : lo, b = offset + numel < hi ? offset + numel : hi;
    return b > a ? b - a : 0;
}

/* The same order as gckpt_zero12_flat, as a sum: the group's sections before the entry's,
 * then (blocks) the earlier layers and the layer's entries before it in module order, or
 * (embedding, head) the section's entries before it. */
uint64_t gckpt_zero12_slice(const gckpt_params *ps, uint64_t layers, uint32_t n, uint32_t rank, int param,
                            uint64_t copy)
{
    const gckpt_param *q = &ps->p[param];
    uint64_t total = 0, off = 0, layer = 0;
    if (!q->trainable) return 0; /* not in a flat group */
    int mq = q->section == GCKPT_SEC_BLOCK ? module_order(q) : 0;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        if (p->shard.group != q->shard.group || !p->trainable) continue;
        total += p->copies * p->numel;
        if (p->section == GCKPT_SEC_BLOCK) layer += p->numel;
        int mp = p->section == GCKPT_SEC_BLOCK ? module_order(p) : 0;
        if (p->section < q->section) off += (p->section == GCKPT_SEC_BLOCK ? layers : 1) * p->numel;
        else if (p->section == q->section && (mp < mq || (mp == mq && i < param))) off += p->numel;
    }
    if (q->section == GCKPT_SEC_BLOCK) off += copy * layer;
    return overlap(off, q->numel, cdiv(total, 2 * (uint64_t)n) * 2, rank);
}

bool gckpt_zero12_in_partition(const gckpt_params *ps, const gckpt_flat_place *f, uint64_t part, uint32_t rank)
{
    uint64_t lo = (uint64_t)rank * part, hi = lo + part;
    return f->offset < hi && f->offset + ps->p[f->param].numel > lo;
}

void gckpt_zero12_step_grads(const gckpt_params *ps, uint64_t layers, uint32_t n, uint32_t rank, gckpt_zero12_keep *out)
{
    uint64_t total[2] = {0, 0};
    memset(out, 0, sizeof *out);
    for (int i = 0; i < ps->n; i++) total[ps->p[i].shard.group] += ps->p[i].trainable ? ps->p[i].copies * ps->p[i].numel : 0;
    size_t count = gckpt_zero12_flat(ps, layers, NULL);
    gckpt_flat_place *f = malloc(sizeof *f * (count ? count : 1));
    if (!f) return;
    gckpt_zero12_flat(ps, layers, f);
    for (size_t k = 0; k < count; k++) {
        const gckpt_param *p = &ps->p[f[k].param];
        uint64_t part = cdiv(total[f[k].group], 2 * (uint64_t)n) * 2;
        /* a parameter overlapping the slice keeps its whole .grad, as allocated */
        if (!gckpt_zero12_in_partition(ps, &f[k], part, rank)) continue;
        out->grad_bytes += p->grad.bytes;
        out->numel += p->numel;
        uint64_t piece = overlap(f[k].offset, p->numel, part, rank);
        if (piece > out->max_slice) out->max_slice = piece;
    }
    free(f);
}

/* ZeRO-1's reduction at the boundary (stage_1_and_2.py reduce_gradients, traced on the
 * fixtures' ranks, FINDINGS R-DIST-25): after the last backward, every .grad in the flat order (group
 * 0, then group 1) through the ipg bucket of `bucket` elements. A parameter that would overflow
 * the bucket flushes it first (reduce_ipg_grads); one larger than the bucket is reduced alone at
 * the next flush, keeping its .grad; any other is copied into the bucket, its .grad freed. A
 * flush all-reduces the bucket in pieces of at most `bucket` elements (allreduce_and_scatter),
 * each piece's slices, split at the ranks' partition boundaries, concatenated first when there
 * are several (a transient); then each of its parameters in the rank's partition is copied into
 * grads_in_partition, one buffer for every parameter overlapping the partition, whole, made at
 * the first (the parameter's own .grad, when it was not copied into the bucket, freed); the
 * others keep what they have until the epilogue clears every .grad. Returns the most bytes the
 * reduction holds above the state it starts from (0 when it only frees). */
typedef struct {
    const gckpt_params *ps;
    const gckpt_flat_place *f;
    uint64_t part[2], bucket, zs, round, gip;
    int64_t cur, most;
    bool gip_made;
    uint32_t rank;
} z1_walk;

static void z1_note(z1_walk *w, int64_t extra)
{
    if (w->cur + extra > w->most) w->most = w->cur + extra;
}

/* The bucket's places [a, b) reduced; big: the one larger than the bucket among them, or -1. */
static void z1_flush(z1_walk *w, size_t a, size_t b, long big)
{
    /* the pieces all-reduced: each place's slices per partition, consecutive ones of one
     * partition merged, gathered until they pass the bucket's elements */
    uint64_t piece = 0, slices = 0, prev = UINT64_MAX;
    for (size_t k = a; k < b; k++) {
        const gckpt_flat_place *f = &w->f[k];
        uint64_t numel = w->ps->p[f->param].numel, part = w->part[f->group], off = f->offset;
        while (numel) {
            uint64_t id = off / part, n = (id + 1) * part - off < numel ? (id + 1) * part - off : numel;
            if (id != prev || slices == 0) slices++;
            prev = id;
            piece += n;
            if (piece > w->bucket) {
                if (slices > 1) z1_note(w, (int64_t)gckpt_round_up(piece * w->zs, w->round)); /* torch.cat */
                piece = slices = 0;
            }
            off += n;
            numel -= n;
        }
    }
    if (piece && slices > 1) z1_note(w, (int64_t)gckpt_round_up(piece * w->zs, w->round));
    for (size_t k = a; k < b; k++) {
        if (!gckpt_zero12_in_partition(w->ps, &w->f[k], w->part[w->f[k].group], w->rank)) continue;
        if (!w->gip_made) {
            w->gip_made = true;
            w->cur += (int64_t)w->gip;
            z1_note(w, 0);
        }
        if ((long)k == big) w->cur -= (int64_t)w->ps->p[w->f[k].param].grad.bytes;
    }
}

uint64_t gckpt_zero1_reduce_transient(const gckpt_params *ps, uint64_t layers, uint32_t n, uint32_t rank,
                                      uint64_t bucket, uint64_t zs, uint64_t round)
{
    uint64_t total[2] = {0, 0};
    for (int i = 0; i < ps->n; i++) total[ps->p[i].shard.group] += ps->p[i].trainable ? ps->p[i].copies * ps->p[i].numel : 0;
    size_t count = gckpt_zero12_flat(ps, layers, NULL);
    gckpt_flat_place *f = malloc(sizeof *f * (count ? count : 1));
    if (!f) return 0;
    gckpt_zero12_flat(ps, layers, f);
    z1_walk w = {ps, f, {cdiv(total[0], 2 * (uint64_t)n) * 2, cdiv(total[1], 2 * (uint64_t)n) * 2}, bucket, zs, round,
                 0, 0, 0, false, rank};
    uint64_t kept = 0;
    for (size_t k = 0; k < count; k++)
        if (gckpt_zero12_in_partition(ps, &f[k], w.part[f[k].group], rank)) kept += ps->p[f[k].param].numel;
    w.gip = gckpt_round_up(kept * zs, round);
    size_t nf = gckpt_zero1_flushes(ps, f, count, bucket, NULL);
    gckpt_zero1_flush *fl = malloc(sizeof *fl * (nf ? nf : 1));
    if (!fl) {
        free(f);
        return 0;
    }
    gckpt_zero1_flushes(ps, f, count, bucket, fl);
    for (size_t q = 0; q < nf; q++) {
        long big = -1;
        for (size_t k = fl[q].first; k < fl[q].end; k++) {
            const gckpt_param *p = &ps->p[f[k].param];
            if (p->numel > bucket) big = (long)k;
            else w.cur -= (int64_t)p->grad.bytes; /* copied into the bucket */
        }
        z1_flush(&w, fl[q].first, fl[q].end, big);
    }
    free(fl);
    free(f);
    return (uint64_t)w.most;
}

void gckpt_zero12_temp(uint64_t part, uint64_t zs, uint64_t round, uint64_t piece[GCKPT_ZERO_NTEMP])
{
    piece[GCKPT_ZERO_TEMP_SLICE] = gckpt_round_up(part * zs, round);
    piece[GCKPT_ZERO_TEMP_F32] = zs != 4 ? gckpt_round_up(part * 4, round) : 0;
    piece[GCKPT_ZERO_TEMP_SCALARS] = zs != 4 ? 8 : 12; /* FINDINGS R-DIST-14 */
}
