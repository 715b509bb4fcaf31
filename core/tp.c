/* Tensor parallelism per rank (gckpt/core/tp.h): tools/hf_probe/tp_rules.py's closed forms
 * (FINDINGS R-TP-2, R-TP-4..6), measured in tests/data/hf-tp. */
#include "gckpt/core/tp.h"

#include <string.h>

#include "gckpt/core/collective.h"
#include "gckpt/core/dtype.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/step.h"

#define ADAMW_STEP 4 /* torch AdamW's fp32 step per parameter tensor */
#define MESH_BYTES_PER_RANK 12 /* three int32[T] device-mesh tensors stay referenced (R-TP-4) */

uint64_t gckpt_tp_mesh_bytes(uint32_t world) { return MESH_BYTES_PER_RANK * (uint64_t)world; }

uint64_t gckpt_tp_chunk(uint64_t n, uint32_t t, uint32_t r)
{
    uint64_t c = (n + t - 1) / t, start = (uint64_t)r * c;
    return start >= n ? 0 : (n - start < c ? n - start : c);
}

bool gckpt_tp_model_ok(const gckpt_model *m, uint32_t tp, gckpt_err *err)
{
    if (m->heads % tp || m->kv_heads % tp) {
        gckpt_seterr(err, "tp_size %u: num_attention_heads %llu and num_key_value_heads %llu must both divide by it "
                          "(a colwise q / k / v shard that is not whole heads fails the attention's view in the "
                          "first forward; FINDINGS R-TP-2)", tp, (unsigned long long)m->heads,
                     (unsigned long long)m->kv_heads);
        return false;
    }
    /* the structure measured under transformers' tp_plan: llama and qwen3 (R-TP-2); anything else
     * (biases, a tied head, packed or latent attention, experts, other norms) is another plan */
    const char *what = m->tied ? "a tied lm_head (tie_word_embeddings)"
                     : (m->qkv_bias || m->o_bias || m->mlp_bias) ? "linear biases"
                     : m->experts ? "mixture-of-experts layers"
                     : m->mla ? "latent attention (MLA)"
                     : (m->fused_qkv || m->fused_gate_up) ? "fused projections"
                     : (m->sandwich_norms || m->post_norms_only || m->qk_norm_full || m->qk_norm_late) ? "its norms' layout"
                     : m->learned_positions || m->parallel_residual || m->attn_sinks ? "its block structure"
                     : m->rope_tables != 1 || m->rotary_dim != m->head_dim ? "its rotary tables"
                     : m->sliding_layers ? "sliding-window layers"
                     : NULL;
    if (what) {
        gckpt_seterr(err, "tensor parallelism is measured for llama- and qwen3-like models only (FINDINGS R-TP-2); "
                          "this model has %s", what);
        return false;
    }
    return true;
}

/* The tp_plan style of each LoRA target llama's and qwen3's plans name (R-TP-2) and what peft makes of
 * it (R-TP-12, R-TP-13): colwise layers' adapters run (lora_B sharded), rowwise layers' fail. */
static const struct {
    gckpt_lora_target t;
    bool rowwise;
} TP_LORA_STYLE[] = {
    {GCKPT_LT_Q, false}, {GCKPT_LT_K, false},    {GCKPT_LT_V, false},   {GCKPT_LT_O, true},
    {GCKPT_LT_GATE, false}, {GCKPT_LT_UP, false}, {GCKPT_LT_DOWN, true},
};

bool gckpt_tp_peft_ok(const gckpt_peft *pf, const gckpt_model *m, uint32_t tp, uint32_t dp_shard, uint32_t dp_replicate,
                      gckpt_err *err)
{
    if (!gckpt_peft_on(pf)) return true;
    if (pf->method == GCKPT_METHOD_QLORA) {
        gckpt_seterr(err, "--tp %u --method qlora: transformers loads bitsandbytes' 4-bit weights with the tp_plan as "
                          "DTensors over the packed storage, and the Linear4bit forward asserts (bitsandbytes "
                          "nn/modules.py:498) and get_peft_model fails (peft tuners/lora/bnb.py:585) (FINDINGS "
                          "R-TP-14)", tp);
        return false;
    }
    for (size_t j = 0; j < sizeof TP_LORA_STYLE / sizeof TP_LORA_STYLE[0]; j++) {
        if (!TP_LORA_STYLE[j].rowwise || !(pf->targets & (1u << TP_LORA_STYLE[j].t))) continue;
        gckpt_seterr(err, "--tp %u --method lora with %s (rowwise in the tp_plan): peft sizes its lora_A by the local "
                          "shard (peft tuners/tuners_utils.py:186) but transformers' RowwiseParallel wraps the input "
                          "by lora_A.in_features (transformers distributed/tensor_parallel.py:261), so the first forward "
                          "fails (FINDINGS R-TP-13); only q_proj, k_proj, v_proj, gate_proj, up_proj run under TP",
                     tp, gckpt_lora_target_bare(TP_LORA_STYLE[j].t));
        return false;
    }
    if (dp_shard > 1) {
        gckpt_seterr(err, "--tp %u --dp-shard %u --method lora: transformers applies fully_shard at load, before "
                          "get_peft_model, and peft sizes each adapter by the base weight's local piece, which FSDP2 "
                          "has cut again (peft tuners/tuners_utils.py:186: lora_B [out / (T x S), r] under a [out / T] "
                          "TP shard), so the first forward fails (FINDINGS R-TP-16)", tp, dp_shard);
        return false;
    }
    if (dp_replicate > 1) {
        gckpt_seterr(err, "--tp %u --dp-replicate %u --method lora: the Trainer averages over the replicas only the "
                          "trainable parameters that are not DTensors (transformers trainer.py:2632-2660), so each "
                          "replica trains its own lora_B (the TP-sharded half of every adapter) on its own batch "
                          "(FINDINGS R-TP-17)", tp, dp_replicate);
        return false;
    }
    /* measured: standalone TP of the llama (no q / k norms), no modules_to_save (R-TP-12) */
    const char *what = m->qk_norm ? "on a model with q / k norms (qwen3)"
                     : pf->modules_to_save ? "with --modules-to-save" : NULL;
    if (what) {
        gckpt_seterr(err, "--tp %u --method lora %s is not measured (LoRA under TP is measured on llama-like models "
                          "with TP alone and no modules_to_save, FINDINGS R-TP-12)", tp, what);
        return false;
    }
    return true;
}

/* Each optimizer under TP (R-TP-4, R-TP-23): its states per parameter and whether they are clones of the
 * gradient (SGD's momentum buffer: the embedding's is then whole [V, h], Replicate like its gradient) or
 * zeros_like the shard (AdamW's), and its device step counter; planned: fused AdamW, SGD (TP alone). */
static const struct {
    uint8_t states, step;
    bool like_grad, planned;
} TP_OPT[GCKPT_NOPT] = {
    [GCKPT_ADAMW] = {2, ADAMW_STEP, false, true},
    [GCKPT_SGD] = {1, 0, true, true},
};

/* Why each other optimizer is not planned under TP (R-TP-23): measured on the TP-sharded tiny llama
 * over gloo (tools/hf_probe/tp_optim_check.py), one step each, fp32 and bf16 alike. */
static const char *const TP_OPTIMIZER_WHY[GCKPT_NOPT] = {
    [GCKPT_ADAMW_FOREACH] =
        "torch picks AdamW's foreach path only when every parameter's type is Tensor or Parameter (torch "
        "optim/optimizer.py:181, _default_to_fused_or_foreach) and the TP shards are DTensors, so the Trainer's "
        "adamw_torch runs the single-tensor loop, which adamw-foreach does not plan (foreach=True forced fails: "
        "aten._foreach_mul_.Scalar got mixed torch.Tensor and DTensor)",
    [GCKPT_ADAMW_8BIT] = "bitsandbytes' optimizer_update_8bit_blockwise gets the DTensor parameter, gradient and "
                         "states with plain quantization maps and absmax (bitsandbytes optim/optimizer.py:570, "
                         "functional.py:1192): the first step fails (got mixed torch.Tensor and DTensor)",
    [GCKPT_PAGED_ADAMW_8BIT] = "bitsandbytes' optimizer_update_8bit_blockwise gets the DTensor parameter, gradient and "
                               "states with plain quantization maps and absmax (bitsandbytes optim/optimizer.py:570, "
                               "functional.py:1192): the first step fails (got mixed torch.Tensor and DTensor)",
    [GCKPT_PAGED_ADAMW_32BIT] = "bitsandbytes.optimizer_update_32bit has no DTensor sharding strategy (bitsandbytes "
                                "functional.py:1147): the first step fails with NotImplementedError",
};

bool gckpt_tp_optimizer_ok(gckpt_optimizer o, uint32_t tp, bool data_parallel, gckpt_err *err)
{
    if (o == GCKPT_SGD && data_parallel) {
        gckpt_seterr(err, "--tp %u --optimizer sgd with --dp-shard or --dp-replicate: SGD is measured under TP alone "
                          "(FINDINGS R-TP-23)", tp);
        return false;
    }
    if (o < GCKPT_NOPT && TP_OPT[o].planned) return true;
    gckpt_seterr(err, "--tp %u --optimizer %s: %s (FINDINGS R-TP-23); --optimizer adamw (adamw_torch_fused) and sgd "
                      "are planned under TP", tp, gckpt_optimizer_names[o], TP_OPTIMIZER_WHY[o] ? TP_OPTIMIZER_WHY[o] : "not measured");
    return false;
}

uint64_t gckpt_tp_lora_adapters(const gckpt_peft *pf)
{
    uint64_t n = 0;
    for (size_t j = 0; gckpt_peft_on(pf) && j < sizeof TP_LORA_STYLE / sizeof TP_LORA_STYLE[0]; j++)
        n += !TP_LORA_STYLE[j].rowwise && (pf->targets & (1u << TP_LORA_STYLE[j].t));
    return n;
}

/* One parameter tensor as the tp_plan lays it out: rows x cols, which dim is sharded (-1: none). */
typedef struct {
    uint64_t rows, cols;
    int dim;
    bool embedding;
} tp_param;

/* Every parameter tensor once (a block's per layer: layers copies), llama / qwen3 (R-TP-2):
 * out NULL counts. */
static size_t tp_params(const gckpt_model *m, tp_param *out, uint64_t *copies)
{
    const uint64_t h = m->hidden, q = gckpt_q_dim(m), k = gckpt_kv_dim(m), i = m->intermediate;
    const tp_param block[] = {
        {q, h, 0, false}, {k, h, 0, false}, {k, h, 0, false}, {h, q, 1, false}, /* q k v colwise, o rowwise */
        {m->head_dim, 1, -1, false}, {m->head_dim, 1, -1, false},               /* qwen3's q_norm, k_norm */
        {i, h, 0, false}, {i, h, 0, false}, {h, i, 1, false},                   /* gate up colwise, down rowwise */
        {h, 1, -1, false}, {h, 1, -1, false},                                   /* the two norms, replicated */
    };
    size_t n = 0;
    const tp_param embed = {m->vocab, h, 0, true}, norm = {h, 1, -1, false}, head = {m->vocab, h, 0, false};
#define PUT(p, c) do { if (out) { out[n] = (p); copies[n] = (c); } n++; } while (0)
    PUT(embed, 1);
    for (size_t j = 0; j < sizeof block / sizeof block[0]; j++) {
        if ((j == 4 || j == 5) && !m->qk_norm) continue;
        PUT(block[j], m->layers);
    }
    PUT(norm, 1);
    PUT(head, 1);
#undef PUT
    return n;
}

static uint64_t local_numel(const tp_param *p, uint32_t tp, uint32_t r)
{
    if (p->dim == 0) return gckpt_tp_chunk(p->rows, tp, r) * p->cols;
    if (p->dim == 1) return p->rows * gckpt_tp_chunk(p->cols, tp, r);
    return p->rows * p->cols;
}

gckpt_dtype gckpt_tp_param_dtype(gckpt_precision p) { return p == GCKPT_BF16 ? GCKPT_DT_BF16 : GCKPT_DT_F32; }

void gckpt_tp_rank_bytes(const gckpt_model *m, gckpt_precision prec, gckpt_optimizer o, uint32_t tp, uint32_t rank,
                         uint64_t round, gckpt_tp_bytes *out)
{
    const uint64_t nstates = o < GCKPT_NOPT ? TP_OPT[o].states : 0, step = o < GCKPT_NOPT ? TP_OPT[o].step : 0;
    const bool like_grad = o < GCKPT_NOPT && TP_OPT[o].like_grad;
    memset(out, 0, sizeof *out);
    tp_param p[16];
    uint64_t copies[16];
    size_t n = tp_params(m, p, copies);
    uint64_t tensors = 0;
    /* the loaded dtype: fused AdamW's states and the gradients like the parameters (R-TP-4, R-TP-22) */
    const uint64_t es = gckpt_dtype_size(gckpt_tp_param_dtype(prec));
    for (size_t j = 0; j < n; j++) {
        uint64_t local = gckpt_round_up(es * local_numel(&p[j], tp, rank), round);
        /* the embedding's gradient is Replicate: whole on every rank (R-TP-5), so is a state cloned from it */
        const uint64_t grad = p[j].embedding ? gckpt_round_up(es * p[j].rows * p[j].cols, round) : local;
        out->weights += copies[j] * local;
        out->states += nstates * copies[j] * (like_grad ? grad : local);
        out->step_grads += copies[j] * grad;
        tensors += copies[j];
    }
    out->mesh = gckpt_tp_mesh_bytes(tp);
    out->scalars = step * tensors + out->mesh;
    out->buffers = gckpt_model_buffer_bytes(m, GCKPT_DT_F32, GCKPT_DT_F32, round); /* R-DIST-22 */
    out->total = out->weights + out->states + out->scalars + out->buffers;
}

static void add(gckpt_tp_coll *o, size_t *n, gckpt_coll kind, gckpt_dtype dt, int phase, uint64_t calls, double bytes)
{
    for (size_t j = 0; j < *n; j++)
        if (o[j].kind == kind && o[j].dtype == dt && o[j].phase == phase) {
            o[j].calls += calls;
            o[j].bytes += bytes;
            return;
        }
    o[(*n)++] = (gckpt_tp_coll){(uint8_t)kind, (uint8_t)dt, (uint8_t)phase, calls, bytes};
}

size_t gckpt_tp_collectives(const gckpt_model *m, const gckpt_setting *s, uint32_t tp,
                            gckpt_tp_coll out[GCKPT_TP_MAX_COLL])
{
    size_t n = 0;
    const double tokens = (double)s->micro_batch * (double)s->seq, h = (double)m->hidden;
    const uint64_t G = s->grad_accum ? s->grad_accum : 1, L = m->layers;
    /* the compute dtype: bf16 under the Trainer's autocast, fp32 otherwise; the residual stream's (the
     * embedding's output, the colwise inputs' gradients, the norms'): the parameters' (fp32, or bf16
     * under pure bf16, R-TP-22) */
    const gckpt_dtype cd = s->precision == GCKPT_FP32 ? GCKPT_DT_F32 : GCKPT_DT_BF16;
    const gckpt_dtype pd = gckpt_tp_param_dtype(s->precision);
    const double ce = gckpt_dtype_size(cd), pe = gckpt_dtype_size(pd);
    const double v_pad = (double)tp * (double)gckpt_tp_chunk(m->vocab, tp, 0);
    /* forward: the embedding's partial lookup, o_proj's and down_proj's rowwise outputs, the head's
     * logits gathered (the uneven last shard padded) */
    add(out, &n, GCKPT_COLL_ALL_REDUCE, pd, GCKPT_TP_FWD, G, G * tokens * h * pe);
    add(out, &n, GCKPT_COLL_ALL_REDUCE, cd, GCKPT_TP_FWD, 2 * L * G, 2.0 * L * G * tokens * h * ce);
    add(out, &n, GCKPT_COLL_ALL_GATHER, cd, GCKPT_TP_FWD, G, G * tokens * v_pad * ce);
    /* backward: every colwise module's input gradient (q, k, v, gate, up, lm_head), the residual's dtype */
    const uint64_t col = 5 * L + 1;
    add(out, &n, GCKPT_COLL_ALL_REDUCE, pd, GCKPT_TP_BWD, col * G, (double)col * G * tokens * h * pe);
    /* a checkpointed layer's recompute reruns o_proj's all-reduce (the recompute stops before down_proj's) */
    uint64_t ck = gckpt_checkpointed_count(s->every_n, L);
    if (ck) add(out, &n, GCKPT_COLL_ALL_REDUCE, cd, GCKPT_TP_BWD, ck * G, (double)ck * G * tokens * h * ce);
    /* TP x FSDP: the norms are FSDP2's DTensors, reduce-scattered with the rest, no hook (R-TP-8) */
    if (s->layout.tp > 1 && s->layout.mode == GCKPT_PAR_FSDP) return n;
    const uint64_t adapters = L * gckpt_tp_lora_adapters(&s->peft);
    if (adapters) { /* LoRA on colwise layers (R-TP-12): the norms are frozen (no hook) */
        /* without checkpointing nothing makes the frozen embedding's output require a gradient
         * (enable_input_require_grads comes with checkpointing): layer 0's q, k, v get no input gradient */
        if (!s->every_n) {
            for (size_t j = 0; j < n; j++)
                if (out[j].kind == GCKPT_COLL_ALL_REDUCE && out[j].dtype == GCKPT_DT_F32 && out[j].phase == GCKPT_TP_BWD) {
                    out[j].calls -= 3 * G;
                    out[j].bytes -= 3.0 * G * tokens * h * 4;
                }
        }
        /* each lora_B's colwise input [B, S, r]: its gradient all-reduced in every backward */
        add(out, &n, GCKPT_COLL_ALL_REDUCE, cd, GCKPT_TP_BWD, adapters * G,
            (double)adapters * G * tokens * s->peft.rank * ce);
        /* the synchronising micro-step: the Trainer's hook on each replicated lora_A [r, h], fp32 */
        add(out, &n, GCKPT_COLL_ALL_REDUCE, GCKPT_DT_F32, GCKPT_TP_BWD, adapters, 4.0 * adapters * s->peft.rank * h);
        return n;
    }
    /* the synchronising micro-step: the Trainer's hook on every plain (replicated) parameter's gradient:
     * the norms; qwen3's q_norm / k_norm also after every backward (replicated_with_grad_allreduce) */
    uint64_t norms = 2 * L + 1, qk = m->qk_norm ? 2 * L : 0;
    double nb = pe * (2 * L + 1) * h + pe * qk * (double)m->head_dim;
    add(out, &n, GCKPT_COLL_ALL_REDUCE, pd, GCKPT_TP_BWD, norms + qk, nb);
    if (qk) add(out, &n, GCKPT_COLL_ALL_REDUCE, pd, GCKPT_TP_BWD, qk * G, pe * qk * G * (double)m->head_dim);
    return n;
}

double gckpt_tp_comm_seconds(const gckpt_model *m, const gckpt_setting *s, uint32_t tp, double bus_bytes_per_s)
{
    gckpt_tp_coll c[GCKPT_TP_MAX_COLL];
    size_t n = gckpt_tp_collectives(m, s, tp, c);
    double t = 0;
    for (size_t j = 0; j < n; j++) /* ring bus bytes (nccl-tests' busbw convention) */
        t += c[j].bytes * (c[j].kind == GCKPT_COLL_ALL_REDUCE ? 2.0 : 1.0) * (tp - 1) / tp / bus_bytes_per_s;
    return t;
}

void gckpt_tp_local_model(const gckpt_model *m, uint32_t tp, uint32_t rank, gckpt_model *out)
{
    *out = *m;
    out->heads = m->heads / tp;
    out->kv_heads = m->kv_heads / tp;
    out->intermediate = gckpt_tp_chunk(m->intermediate, tp, rank);
}

/* A buffer of numel elements of dtype dt, rounded as params.c allocates it. */
static void tp_buffer(gckpt_buffer *b, uint64_t numel, uint64_t round)
{
    b->numel = numel;
    b->bytes = gckpt_round_up(gckpt_dtype_size((gckpt_dtype)b->dtype) * numel, round);
}

void gckpt_tp_params_local(gckpt_params *ps, gckpt_optimizer o, uint32_t tp, uint32_t rank, uint64_t round)
{
    const bool like_grad = o < GCKPT_NOPT && TP_OPT[o].like_grad;
    const uint64_t trainable0 = ps->trainable;
    for (int i = 0; i < ps->n; i++) {
        gckpt_param *p = &ps->p[i];
        bool head = p->section == GCKPT_SEC_HEAD && p->role == GCKPT_ROLE_MATRIX;
        if (p->role != GCKPT_ROLE_EMBEDDING && !head) continue;
        /* embedding_rowwise / colwise_gather_output: Shard(0) of [V, h] (R-TP-2) */
        const uint64_t old_w = p->weight.bytes, old_g = p->grad.bytes, old_n = p->numel;
        uint64_t old_s = 0, new_s = 0;
        p->rows = gckpt_tp_chunk(p->rows, tp, rank);
        p->numel = p->rows * p->cols;
        tp_buffer(&p->weight, p->numel, round);
        /* the embedding's gradient is Replicate: whole [V, h] (R-TP-5), FSDP2's unsharded .grad too */
        if (head && p->trainable && p->grad.numel) tp_buffer(&p->grad, p->numel, round);
        for (int k = 0; k < p->nstates; k++) { /* SGD's momentum of the embedding: whole, as its gradient */
            old_s += p->state[k].bytes;
            if (!(like_grad && !head)) tp_buffer(&p->state[k], p->numel, round);
            new_s += p->state[k].bytes;
        }
        ps->weight_bytes = ps->weight_bytes - old_w + p->weight.bytes;
        ps->grad_bytes = ps->grad_bytes - old_g + p->grad.bytes;
        ps->state_bytes = ps->state_bytes - old_s + new_s;
        ps->numel = ps->numel - old_n + p->numel;
        if (p->trainable) ps->trainable = ps->trainable - old_n + p->numel;
    }
    /* the optimizer's passes are per trainable element (AdamW on fp32 parameters, R-TP-10's scope) */
    if (trainable0) ps->opt_traffic *= (double)ps->trainable / (double)trainable0;
}

uint64_t gckpt_tp_gather_bytes(uint64_t rows, uint64_t vocab, uint32_t tp, uint32_t rank, uint64_t elem,
                               uint64_t round)
{
    /* torch 2.15 Shard._to_replicate_tensor: _maybe_pad_tensor, funcol.all_gather_single (all_gather_into_tensor
     * along dim 0, then cat of its chunks along the gathered dim), _maybe_unpad_tensor (a copy when padded);
     * the local logits stay until the hook returns. Most at once: local + padded + gathered + concatenated. */
    const uint64_t part = (vocab + tp - 1) / tp, mine = gckpt_tp_chunk(vocab, tp, rank);
    const uint64_t local = gckpt_round_up(rows * mine * elem, round);
    const uint64_t pad = mine < part ? gckpt_round_up(rows * part * elem, round) : 0;
    const uint64_t gathered = gckpt_round_up(rows * part * tp * elem, round);
    const uint64_t whole = gckpt_round_up(rows * vocab * elem, round);
    const uint64_t most = local + pad + 2 * gathered;
    return most > whole ? most - whole : 0;
}

void gckpt_tp_fsdp_layout(uint32_t tp, uint32_t dp_shard, uint32_t rank, gckpt_layout *out)
{
    /* the dense mesh (pp, dp_replicate, fsdp, tp), tp innermost: a TP group is tp consecutive ranks,
     * an fsdp group dp_shard ranks tp apart (R-TP-1, R-TP-8); one mesh over the world (no unit
     * meshes: gckpt_layout.dp_replicate 1); fully_shard without a MixedPrecisionPolicy */
    gckpt_tp_hsdp_layout(tp, 1, dp_shard, rank, out);
}

void gckpt_tp_hsdp_layout(uint32_t tp, uint32_t dp_replicate, uint32_t dp_shard, uint32_t rank, gckpt_layout *out)
{
    *out = (gckpt_layout){.gpus = dp_replicate * dp_shard, .nodes = 1, .mode = GCKPT_PAR_FSDP,
                          .dp_replicate = dp_replicate, .tp = tp, .tp_rank = rank % tp, .fsdp_as_loaded = true,
                          .rank = rank / tp};
}

