/* The context of one setting: every tensor's size, the parameter state table, each op's
 * seconds, FLOPs and workspace, the bound that keeps every byte count of a step inside
 * 64 bits. */
#include "gckpt/core/cp.h"
#include "gckpt/core/fused_loss.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"
#include "gckpt/core/tp.h"

#include <string.h>

/* ---- sizes and time ---------------------------------------------------------------- */

static double matmul_rate(const gckpt_ctx *c)
{
    const gckpt_device *d = c->dev;
    double tf;
    switch (c->set.precision) {
    case GCKPT_FP32: tf = d->tflops_fp32; break;
    case GCKPT_AMP_FP16: tf = d->tflops_fp16; break;
    default: tf = d->tflops_bf16; break;
    }
    return tf * 1e12 * d->matmul_efficiency;
}

static double hbm_rate(const gckpt_ctx *c) { return c->dev->hbm_bytes_per_s * c->dev->hbm_efficiency; }

/* The code base's time parameters (gckpt/core/device.h): the profile's for a CUDA target, the
 * plain roofline for the CPU's kernels (what the probe measures). */
static const gckpt_code_base_eff *code_base_eff(const gckpt_ctx *c)
{
    return gckpt_code_base_of(c->dev, (gckpt_target)c->recipe->target, c->set.code_base);
}

static double param_bytes_of(const gckpt_ctx *c, int t)
{
    const gckpt_recipe *r = c->recipe;
    return (double)gckpt_param_numel(r, t) * (double)gckpt_dtype_size((gckpt_dtype)r->t[t].dtype);
}

/* Seconds and FLOPs of an op's forward (bwd=false) or backward. */
static double op_seconds(const gckpt_ctx *c, const gckpt_op *op, bool bwd, double *flops)
{
    const gckpt_recipe *r = c->recipe;
    double T = (double)c->tokens, S = (double)c->set.seq;
    double f = op->fT * T + op->fBSS * T * S;
    uint32_t calls = 1;
    if (op->kind == GCKPT_OP_ATTN && c->set.layout.cp > 1) /* torch's ring: the rank's queries against every
                                                            * K/V block, one kernel per block (core/cp.h) */
        f = op->fT * T + op->fBSS * T * S *
                             gckpt_cp_attention_units(c->set.seq * c->set.layout.cp, c->set.layout.cp, &calls);
    double traffic = 0;
    for (int k = 0; k < op->nin; k++) {
        const gckpt_tensor *t = &r->t[op->in[k]];
        traffic += t->kind == GCKPT_T_PARAM ? param_bytes_of(c, op->in[k]) : (double)c->raw[c->storage[op->in[k]]];
    }
    for (int k = 0; k < 2; k++)
        if (op->out[k] >= 0) traffic += (double)c->raw[op->out[k]];
    if (bwd) {
        f *= op->bwd_mult;
        traffic *= 2.0;
    }
    *flops = (op->kind == GCKPT_OP_MATMUL || op->kind == GCKPT_OP_ATTN) ? f : 0;
    const gckpt_code_base_eff *cb = code_base_eff(c);
    double mrate = matmul_rate(c) * (op->kind == GCKPT_OP_ATTN ? gckpt_attention_eff(cb, S) : cb->matmul_factor);
    double tm = *flops / mrate, tb = traffic / (hbm_rate(c) * cb->hbm_factor);
    /* an op that does anything is a kernel launch at least: its launch and dispatch, not
     * hidden behind the kernel before it (eager PyTorch issues ops one by one) */
    double launch = (tm > 0 || tb > 0) ? cb->op_overhead_s * calls : 0;
    /* QLoRA: the whole weight dequantized before the GEMM, in the forward, every
     * recompute and the backward (FINDINGS R-QUANT-11, R-PEFT-18): a memory-bound pass that reads
     * the stored codes and writes the weight, which the GEMM then reads */
    double deq = 0;
    if (op->dequant) {
        double n = (double)op->in_f * (double)op->out_f;
        deq = ((op->dequant == GCKPT_QUANT_INT8 ? n : n / 2) + 2.0 * (double)op->fws_fixed) / hbm_rate(c);
    }
    return (tm > tb ? tm : tb) + launch + deq;
}

/* Bytes of an op's backward workspace (recipe.h: bws_cT, bws_in, bws_out); false on
 * overflow. */
/* Bytes of copies of the inputs in `mask` in the dtype of op's output (the CPU
 * target's promotion copies, recipe.h); tensor sizes are checked by gckpt_ctx_init. */
static uint64_t promoted_bytes(const gckpt_ctx *c, const gckpt_op *op, uint8_t mask)
{
    const gckpt_recipe *r = c->recipe;
    uint64_t sum = 0;
    for (int k = 0; k < op->nin; k++)
        if (mask & (1u << k)) {
            int t = op->in[k];
            sum += gckpt_round_up(c->numel[t] * gckpt_dtype_size((gckpt_dtype)r->t[op->out[0]].dtype), c->dev->alloc_round_bytes);
        }
    return sum;
}

/* A fused loss's temporaries (core/fused_loss.c) */
static bool fused_ws(const gckpt_ctx *c, const gckpt_op *op, bool bwd, uint64_t *out)
{
    const gckpt_recipe *r = c->recipe;
    return gckpt_fused_loss_ws(op, bwd, c->tokens, r->t[op->in[0]].dtype, r->compute_dtype, r->amp,
                               c->dev->alloc_round_bytes, out);
}

/* Bytes of an op's forward temporaries (recipe.h: fws_promote, fws_bBSS, fws_bT). */
static bool fwd_ws_bytes(const gckpt_ctx *c, const gckpt_op *op, uint64_t *out)
{
    uint64_t x = promoted_bytes(c, op, op->fws_promote), y, bss;
    if (!gckpt_mul(c->tokens, c->set.seq, &bss)) return false;
    if (op->fws_bBSS && (!gckpt_mul(op->fws_bBSS, bss, &y) || !gckpt_add(x, gckpt_round_up(y, c->dev->alloc_round_bytes), &x)))
        return false;
    if (op->fws_bT && (!gckpt_mul(op->fws_bT, c->tokens, &y) || !gckpt_add(x, gckpt_round_up(y, c->dev->alloc_round_bytes), &x)))
        return false;
    if (op->fws_fixed && !gckpt_add(x, gckpt_round_up(op->fws_fixed, c->dev->alloc_round_bytes), &x)) return false;
    if (op->fused_loss && (!fused_ws(c, op, false, &y) || !gckpt_add(x, y, &x))) return false;
    *out = x;
    return true;
}

static bool bwd_ws_bytes(const gckpt_ctx *c, const gckpt_op *op, uint64_t *out)
{
    uint64_t x = 0, y;
    *out = 0;
    if (op->bws_cT && (!gckpt_mul(op->bws_cT, c->tokens, &x) || !gckpt_mul(x, 4, &x))) return false;
    x = gckpt_round_up(x, c->dev->alloc_round_bytes);
    if (op->bws_in && (!gckpt_mul(op->bws_in, c->tbytes[op->in[0]], &y) || !gckpt_add(x, y, &x))) return false;
    if (op->bws_out && (!gckpt_mul(op->bws_out, c->tbytes[op->out[0]], &y) || !gckpt_add(x, y, &x))) return false;
    if (op->bws_bT && (!gckpt_mul(op->bws_bT, c->tokens, &y) || !gckpt_add(x, gckpt_round_up(y, c->dev->alloc_round_bytes), &x)))
        return false;
    if (op->bws_fixed && !gckpt_add(x, gckpt_round_up(op->bws_fixed, c->dev->alloc_round_bytes), &x)) return false;
    if (op->fused_loss && (!fused_ws(c, op, true, &y) || !gckpt_add(x, y, &x))) return false;
    *out = x;
    return true;
}

/* An upper bound on the bytes one micro-step of section `sec` (one instance: the
 * embedding, one block or the head) allocates: every tensor's forward output, its
 * recompute and its host-to-device copy (3x); for every op input a gradient buffer of
 * up to 8x its size (an fp32 gradient of a narrow input) and an accumulation buffer
 * (9x); parameter gradients and temporaries (2x); the backward workspaces. */
static bool section_bound(const gckpt_ctx *c, int sec, uint64_t *out)
{
    const gckpt_recipe *r = c->recipe;
    uint64_t sum = 0, x;
    for (int i = 0; i < r->nt; i++) {
        if (r->t[i].section != sec || r->t[i].kind == GCKPT_T_PARAM) continue;
        if (!gckpt_mul(c->tbytes[i], 3, &x) || !gckpt_add(sum, x, &sum)) return false;
    }
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++) {
        const gckpt_op *op = &r->op[i];
        for (int k = 0; k < op->nin; k++) {
            const gckpt_tensor *t = &r->t[op->in[k]];
            if (t->kind == GCKPT_T_PARAM) {
                if (!gckpt_mul(gckpt_param_numel(r, op->in[k]), gckpt_dtype_size((gckpt_dtype)t->dtype) + 4, &x) ||
                    !gckpt_add(x, c->dev->alloc_round_bytes, &x) || !gckpt_mul(x, 2, &x))
                    return false;
            } else if (!gckpt_mul(c->tbytes[op->in[k]], 9, &x)) {
                return false;
            }
            if (!gckpt_add(sum, x, &sum)) return false;
        }
        if (!bwd_ws_bytes(c, op, &x) || !gckpt_add(sum, x, &sum)) return false;
        if (!fwd_ws_bytes(c, op, &x) || !gckpt_mul(x, 2, &x) || !gckpt_add(sum, x, &sum)) return false;
    }
    *out = sum;
    return true;
}

/* Elements, exact and allocated bytes of every tensor, and which tensors are views
 * (recipe.h: view_fwd, and batched_copy at micro-batch 1) of which storage. */
static bool resolve_tensors(gckpt_ctx *c, gckpt_err *err)
{
    const gckpt_recipe *r = c->recipe;
    const gckpt_setting *s = &c->set;
    if (!gckpt_mul(s->micro_batch, s->seq, &c->tokens)) {
        gckpt_seterr(err, "%s: micro-batch %llu x seq %llu overflows 64 bits", c->model->name,
                     (unsigned long long)s->micro_batch, (unsigned long long)s->seq);
        return false;
    }
    for (int i = 0; i < r->nt; i++) c->storage[i] = (int16_t)i;
    for (int i = 0; i < r->nop; i++) {
        const gckpt_op *op = &r->op[i];
        c->fwd_view[i] = op->view_fwd || (op->batched_copy && s->micro_batch == 1);
        if (c->fwd_view[i]) c->storage[op->out[0]] = c->storage[op->in[0]];
    }
    for (int i = 0; i < r->nt; i++) {
        uint64_t b;
        if (!gckpt_tensor_numel(r, i, s->micro_batch, s->seq, &c->numel[i]) ||
            !gckpt_tensor_bytes(r, i, s->micro_batch, s->seq, &b) || b > (UINT64_MAX >> 8)) {
            gckpt_seterr(err, "%s: tensor %s at micro-batch %llu, seq %llu overflows 64 bits", c->model->name,
                         r->t[i].name, (unsigned long long)s->micro_batch, (unsigned long long)s->seq);
            return false;
        }
        c->raw[i] = b;
        c->tbytes[i] = gckpt_round_up(b, c->dev->alloc_round_bytes);
    }
    return true;
}

/* Each op's seconds, FLOPs and workspace bytes at this setting. */
static void op_costs(gckpt_ctx *c)
{
    const gckpt_recipe *r = c->recipe;
    for (int i = 0; i < r->nop; i++) {
        for (int bwd = 0; bwd < 2; bwd++) c->op_s[bwd][i] = op_seconds(c, &r->op[i], bwd, &c->op_flops[bwd][i]);
        /* (step_bound_ok refuses a setting where these overflow) */
        if (!fwd_ws_bytes(c, &r->op[i], &c->op_ws[0][i])) c->op_ws[0][i] = 0;
        if (!bwd_ws_bytes(c, &r->op[i], &c->op_ws[1][i])) c->op_ws[1][i] = 0;
        c->op_promo[i] = promoted_bytes(c, &r->op[i], r->op[i].bws_promote);
    }
}

/* The bound of one layer: the largest of its block types' sections. */
static bool layer_bound(const gckpt_ctx *c, uint64_t *out)
{
    *out = 0;
    for (int b = 0; b < GCKPT_NBLOCK; b++) {
        uint64_t x;
        if (c->recipe->block_sec[b] < 0) continue;
        if (!section_bound(c, c->recipe->block_sec[b], &x)) return false;
        if (x > *out) *out = x;
    }
    return true;
}

/* Everything a step can hold at once stays below GCKPT_MAX_STEP_BYTES, so the
 * simulator's and the evaluators' signed 64-bit running totals cannot overflow. */
static bool step_bound_ok(const gckpt_ctx *c)
{
    uint64_t be, bb, bh, micro = 0, total = 0;
    return section_bound(c, GCKPT_SEC_EMBED, &be) && layer_bound(c, &bb) &&
           section_bound(c, GCKPT_SEC_HEAD, &bh) && gckpt_mul(bb, c->model->layers, &micro) &&
           gckpt_add(micro, be, &micro) && gckpt_add(micro, bh, &micro) && gckpt_mul(micro, 2, &total) &&
           gckpt_add(total, c->weights, &total) && gckpt_add(total, c->grads, &total) &&
           gckpt_add(total, c->quant_weights, &total) && gckpt_add(total, c->quant_stats, &total) &&
           gckpt_add(total, c->paged_states, &total) && gckpt_add(total, c->parallel, &total) && gckpt_add(total, c->par.ddp_used_map, &total) &&
           gckpt_add(total, c->opt_states, &total) && gckpt_add(total, c->opt_temp, &total) &&
           gckpt_add(total, c->workspace, &total) && total <= GCKPT_MAX_STEP_BYTES;
}

bool gckpt_ctx_init(gckpt_ctx *c, const gckpt_model *m, const gckpt_device *d,
                    const gckpt_recipe *r, const gckpt_setting *s, gckpt_err *err)
{
    memset(c, 0, sizeof *c);
    c->model = m;
    c->dev = d;
    c->recipe = r;
    c->set = *s;
    if (!resolve_tensors(c, err)) return false;
    /* persistent: every parameter tensor is its own allocation, as are its grad and
     * optimizer states; block tensors repeat per layer (the parameter state table) */
    bool overflow;
    if (!gckpt_params_build(r, m->layers, s->optimizer, d->alloc_round_bytes, &c->params, &overflow, err)) return false;
    /* TP (alone or x FSDP): the TP rank's vocab-sharded embedding and lm_head (core/tp.h) */
    if (s->layout.tp > 1) {
        gckpt_tp_params_local(&c->params, s->optimizer, s->layout.tp, s->layout.tp_rank, d->alloc_round_bytes);
        /* autocast casts the rank's rows of a vocabulary-sharded weight (lm_head's, R-TP-7): its cast and
         * the cast's gradient are that many elements; the cast of a frozen one too (LoRA: not cached, a
         * plain activation the linear saves, R-TP-15) */
        for (int k = 0; k < r->nop; k++) {
            const gckpt_op *o = &r->op[k];
            const gckpt_param *p = o->prim == GCKPT_P_CAST ? gckpt_params_of(&c->params, o->in[0]) : NULL;
            const int t = o->out[0];
            if (!p || p->numel >= c->numel[t]) continue;
            c->numel[t] = p->numel;
            c->raw[t] = p->numel * gckpt_dtype_size((gckpt_dtype)r->t[t].dtype);
            c->tbytes[t] = gckpt_round_up(c->raw[t], d->alloc_round_bytes);
        }
        /* the linear onto the vocabulary (its weight, or its cast, holds the rank's rows): its output
         * all-gathered into the whole logits after it returns (R-TP-15) */
        for (int k = 0; k < r->nop; k++) {
            const gckpt_op *o = &r->op[k];
            int w = o->prim == GCKPT_P_LINEAR && o->nin > 1 ? o->in[1] : -1, pk = w >= 0 ? gckpt_recipe_producer(r, w) : -1;
            if (pk >= 0 && r->op[pk].prim == GCKPT_P_CAST) w = r->op[pk].in[0];
            const gckpt_param *p = gckpt_params_of(&c->params, w);
            if (!p || p->section != GCKPT_SEC_HEAD || p->role != GCKPT_ROLE_MATRIX || !o->out_f) continue;
            const int t = o->out[0];
            c->op_gather[k] = gckpt_tp_gather_bytes(c->numel[t] / o->out_f, o->out_f, s->layout.tp, s->layout.tp_rank,
                                                    gckpt_dtype_size((gckpt_dtype)r->t[t].dtype), d->alloc_round_bytes);
        }
    }
    /* the parallel modes' rows and units take every layer's parameters as one block's */
    if (gckpt_layout_multi(&s->layout) && gckpt_recipe_typed_params(r)) {
        gckpt_seterr(err, "%s: layers with parameters of their own kind (dense and mixture-of-experts layers) are not "
                          "planned on several GPUs yet (--parallel): plan one GPU", m->name);
        return false;
    }
    /* the model's own count: the table's under full fine-tuning (the plan reader holds the two
     * equal), traced apart only when adapters are in the table */
    c->model_params = gckpt_peft_on(&s->peft) ? gckpt_param_count(m) : c->params.numel;
    c->weights = c->params.weight_bytes - c->params.quant_bytes;
    c->quant_weights = c->params.quant_bytes;
    c->quant_stats = c->params.stats_bytes;
    c->paged_states = c->params.paged_bytes;
    c->grads = c->params.grad_bytes;
    c->opt_states = c->params.state_bytes;
    c->opt_temp = c->params.temp_bytes;
    c->workspace = d->workspace_bytes;
    c->opt_seconds = c->params.opt_traffic / hbm_rate(c);
    c->step_grads = c->grads;
    if (gckpt_layout_multi(&s->layout)) gckpt_parallel_apply(c); /* one rank's share */
    else if (s->layout.tp > 1) { /* TP alone: AdamW's steps, the rotary buffers and the device meshes (R-TP-4;
                                   * none depends on the shards: the local model's count) */
        gckpt_tp_bytes b;
        gckpt_tp_rank_bytes(m, s->precision, s->optimizer, s->layout.tp, s->layout.tp_rank, d->alloc_round_bytes, &b);
        uint64_t scalars = b.scalars;
        if (gckpt_peft_on(&s->peft)) /* AdamW's fp32 steps on the trainable tensors only (R-TP-12) */
            scalars = b.mesh + gckpt_step_counter_bytes(&c->params, GCKPT_ADAMW);
        c->parallel += scalars + b.buffers;
    }
    c->opt_seconds += code_base_eff(c)->step_overhead_s; /* per optimizer step, every rank */
    op_costs(c);
    if (overflow || !step_bound_ok(c)) {
        gckpt_seterr(err, "%s: at micro-batch %llu, seq %llu a training step could hold more than "
                     "2^62 bytes (4 EiB); sizes this large cannot be planned (reduce --seq or --micro-batch)",
                     m->name, (unsigned long long)s->micro_batch, (unsigned long long)s->seq);
        return false;
    }
    return true;
}

static uint64_t saved_bytes(const gckpt_ctx *c, int sec, bool frozen0)
{
    const gckpt_recipe *r = c->recipe;
    bool seen[GCKPT_MAX_TENSORS] = {false};
    uint64_t sum = 0;
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++) {
        int n = frozen0 ? r->op[i].nsaved0 : r->op[i].nsaved;
        const int16_t *saved = frozen0 ? r->op[i].saved0 : r->op[i].saved;
        for (int k = 0; k < n + r->op[i].ndead && !r->op[i].ctx_keep; k++) { /* ctx attributes: no saved tensors */
            int t = c->storage[k < n ? saved[k] : r->op[i].dead[k - n]]; /* (dead: packed, recipe.h ndead) */
            if (seen[t] || r->t[t].section != sec || r->t[t].kind == GCKPT_T_PARAM) continue;
            seen[t] = true;
            sum += c->raw[t];
        }
    }
    return sum;
}

uint64_t gckpt_section_saved_bytes(const gckpt_ctx *c, int sec) { return saved_bytes(c, sec, false); }

uint64_t gckpt_layer0_frozen_saved_bytes(const gckpt_ctx *c)
{
    return c->recipe->frozen0 ? saved_bytes(c, GCKPT_SEC_BLOCK, true) : gckpt_layer_saved_bytes(c);
}

uint64_t gckpt_layer_saved_bytes(const gckpt_ctx *c) { return gckpt_section_saved_bytes(c, GCKPT_SEC_BLOCK); }

void gckpt_persistent(const gckpt_ctx *c, int64_t comp[GCKPT_NCOMP])
{
    memset(comp, 0, sizeof(int64_t) * GCKPT_NCOMP);
    comp[GCKPT_C_WEIGHTS] = (int64_t)c->weights;
    comp[GCKPT_C_QUANT_WEIGHTS] = (int64_t)c->quant_weights;
    comp[GCKPT_C_QUANT_STATS] = (int64_t)c->quant_stats;
    comp[GCKPT_C_PAGED_STATES] = (int64_t)c->paged_states;
    comp[GCKPT_C_PARALLEL] = (int64_t)c->parallel;
    comp[GCKPT_C_OPTIMIZER] = (int64_t)c->opt_states;
    comp[GCKPT_C_WORKSPACE] = (int64_t)c->workspace;
}

