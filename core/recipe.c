/* The recipe: what every model family shares (the head and HF's causal-LM loss), the
 * build entry points, and what is derived once a family has been traced (the Python
 * references each op ends, each parameter's uses). Primitives: recipe_ops.c, attention:
 * recipe_attention.c, families: recipe_llama.c, recipe_gpt2.c. */
#include "recipe_tracer.h"

#include "gckpt/core/families.h"

#include <stdlib.h>
#include <string.h>

/* HF's ForCausalLMLoss on the logits: logits.float() (held by the loss function until the
 * loss is computed), cross_entropy over all b*s rows = log_softmax (fp32, saved) +
 * nll_loss against the shifted labels. Sets r->loss. */
static void causal_lm_loss(tracer *tr, int logits)
{
    gckpt_recipe *r = tr->r;
    r->t[logits].logits = true;
    r->t[logits].fwd_end_free = true; /* returned in the model output, dropped by the Trainer */
    int lf = cast_to(tr, logits, F32, "logits.float");
    r->t[lf].logits = true;
    int lbl = source(tr, "shift_labels", GCKPT_SRC_LABELS, I64, per_token(1), NULL, NULL);
    int ls = like(tr, "log_softmax", lf, F32, true);
    r->t[ls].logits = true;
    opnew(tr, "log_softmax", GCKPT_OP_ELEM, 1, (int[]){lf}, ls, -1, 1, (int[]){ls});
    setprim(tr, GCKPT_P_LOG_SOFTMAX, GCKPT_BC_NONE, 0, 0, tr->m->vocab);
    int loss = tnew(tr, "loss", GCKPT_T_ACT, F32, fixed_shape(1, 1), true);
    int tw = tnew(tr, "nll_loss.total_weight", GCKPT_T_ACT, F32, fixed_shape(1, 1), false);
    opnew(tr, "nll_loss", GCKPT_OP_ELEM, 2, (int[]){ls, lbl}, loss, tw, 2, (int[]){lbl, tw});
    setprim(tr, GCKPT_P_NLL, GCKPT_BC_NONE, 0, 0, tr->m->vocab);
    hold_here(tr, lf);
    r->loss = loss;
}

/* A fused loss on the final norm's output nf and lm_head's weight w (docs/fused-loss.md;
 * sizes of the temporaries: core/fused_loss.c). Both read the labels shifted as HF's loss
 * does (Liger's LigerForCausalLMLoss pads and shifts them to a contiguous int64 [b, s];
 * CCE shifts inside, its valid rows b x (s - 1) planned as b x s). Gemma 2's soft-capping
 * is computed inside both kernels. */
static void fused_loss_head(tracer *tr, int nf, int w)
{
    gckpt_recipe *r = tr->r;
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, V = m->vocab;
    int lbl = source(tr, "shift_labels", GCKPT_SRC_LABELS, I64, per_token(1), NULL, NULL);
    int loss = tnew(tr, "loss", GCKPT_T_ACT, F32, fixed_shape(1, 1), true);
    if (tr->loss == GCKPT_LOSS_LIGER) {
        /* LigerFusedLinearCrossEntropyFunction: the forward makes grad_input (zeros_like
         * the input) and grad_weight (zeros_like the weight: accum_dtype None) and keeps
         * them (save_for_backward); its backward scales them in place and hands them on:
         * they are the input's and the weight's gradients from the forward on */
        opnew(tr, "liger_fused_linear_ce", GCKPT_OP_MATMUL, 3, (int[]){nf, w, lbl}, loss, -1, 0, NULL);
        setprim(tr, GCKPT_P_FUSED_LCE, GCKPT_BC_NONE, 3, 0, V);
        gckpt_op *op = last_op(tr);
        op->in_f = h;
        op->out_f = V;
        op->fused_loss = GCKPT_LOSS_LIGER;
        const gckpt_model_type_info *ty = NULL;
        op->chunk_mem_const = gckpt_family_by_type(m->model_type, &ty) && ty ? ty->liger_chunk_mem_const : 1;
        op->grads_in_fwd = true;
        op->bwd_mult = 0;
        count_flops(tr);
    } else {
        /* CCE: linear_cross_entropy(e, c, targets, shift=True): the valid rows
         * (_build_flat_valids: int64 [n], the int32 pairs summed), the lse pass (fp32 [n] and
         * the fp32 [V] logit averages of filter_eps "high"), the indexed dot; saved for the
         * backward: e, c, lse, targets, valids, logit_avg (ctx.save_for_backward). The
         * backward makes de = zeros_like(e) and dc = zeros_like(c, e.dtype) */
        int valids = source(tr, "cce.valids", GCKPT_SRC_LABELS, I64, per_token(1), NULL, NULL);
        int lse = tnew(tr, "cce.lse", GCKPT_T_ACT, F32, per_token(1), false);
        int avg = tnew(tr, "cce.logit_avg", GCKPT_T_ACT, F32, fixed_shape(1, V), false);
        opnew(tr, "cce_lse", GCKPT_OP_MATMUL, 2, (int[]){nf, w}, lse, avg, 0, NULL);
        setprim(tr, GCKPT_P_CCE_LSE, GCKPT_BC_NONE, 1, 0, V);
        gckpt_op *op = last_op(tr);
        op->in_f = h;
        op->out_f = V;
        op->fused_loss = GCKPT_LOSS_CCE;
        op->bwd_mult = 0;
        count_flops(tr);
        opnew(tr, "cce_loss", GCKPT_OP_MATMUL, 4, (int[]){nf, w, lbl, lse}, loss, -1, 5,
              (int[]){nf, lse, lbl, valids, avg});
        setprim(tr, GCKPT_P_FUSED_LCE, GCKPT_BC_NONE, 1, 0, V);
        op = last_op(tr);
        op->in_f = h;
        op->out_f = 1; /* the target row's dot; the backward: 3 GEMMs of [h] x [h, V] per token */
        op->fused_loss = GCKPT_LOSS_CCE;
        count_flops(tr);
        op->bwd_mult = 3.0 * (double)V;
    }
    r->loss = loss;
}

void trace_head(tracer *tr, norm_kind norm, const char *norm_name, int embedding_table)
{
    gckpt_recipe *r = tr->r;
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden;
    section_begin(tr, GCKPT_SEC_HEAD);
    int hin = tnew(tr, "final_hidden", GCKPT_T_ACT, tr->stream_dt, per_token(h), true);
    r->head_in = hin;
#ifdef GCKPT_TOY
    hin = toy_clone(tr, hin, "toy"); /* the test build's toy primitive, on every model's head */
#endif
    int nf = norm == NORM_RMS ? rmsnorm(tr, hin, h, norm_name) : layernorm(tr, hin, h, norm_name);
    r->t[nf].fwd_end_free = true; /* the base model's output, held until the forward returns */
    int wl = m->tied ? embedding_table : param(tr, "lm_head.weight", m->vocab, h, GCKPT_ROLE_MATRIX);
    int copy = mts_param(tr, wl, GCKPT_MTS_LM_HEAD, "lm_head.modules_to_save.weight");
    /* peft's copy is of the nn.Linear lm_head, whose weight a tied model shares with the
     * embedding: not an nn.Embedding, so the Trainer leaves its 8-bit states alone (measured,
     * gpt2 QLoRA with adamw_bnb_8bit / paged_adamw_8bit) */
    if (copy != wl) r->t[copy].role = GCKPT_ROLE_MATRIX;
    wl = copy;
    /* liger_kernel_config {"fused_linear_cross_entropy": false}: transformers' own loss */
    if (tr->loss == GCKPT_LOSS_CCE || liger_kernel_on(tr, GCKPT_LK_FLCE)) {
        fused_loss_head(tr, nf, wl);
        if (m->router_aux_loss) moe_aux_loss(tr);
        section_end(tr);
        return;
    }
    int logits = linear(tr, nf, wl, -1, h, m->vocab, "lm_head");
    /* Gemma 2 (and Gemma 3 when configured): final soft-capping, logits / cap, tanh
     * (saves its output; not on CUDA autocast's fp32 list), * cap; Granite: logits /
     * logits_scaling. Python-scalar ops save nothing; each rebinding frees the previous. */
    if (m->final_softcap > 0) {
        int d = scal(tr, logits, "softcap.div", 1.0 / m->final_softcap, 0);
        int t = unary(tr, d, "softcap.tanh", false, GCKPT_P_TANH, 0);
        logits = scal(tr, t, "softcap.mul", m->final_softcap, 0);
        r->t[d].logits = r->t[t].logits = true;
    }
    if (m->multipliers) logits = scal(tr, logits, "logits_scaling", 1.0 / m->logits_scaling, 0);
    causal_lm_loss(tr, logits);
    if (m->router_aux_loss) moe_aux_loss(tr);
    section_end(tr);
}

void gckpt_recipe_build(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_recipe *r)
{
    gckpt_recipe_build_target(m, p, a, GCKPT_TARGET_CUDA, r);
}

bool gckpt_recipe_unverified(const gckpt_model *m, gckpt_attention a, const char **code, const char **sentence)
{
    const char *c = NULL, *why = NULL;
    bool attn = m->attn_dropout > 0, other = m->resid_dropout > 0 || m->embd_dropout > 0;
    if (attn && a == GCKPT_SDPA) {
        c = "dropout_cuda_sdpa_unverified";
        why = "attention dropout under SDPA is modelled as CUDA's fused kernel, which keeps the RNG seed and offset "
              "instead of a mask (native_dropout's 1-byte masks elsewhere); the CPU runs another path, so "
              "tools/hf_probe could not measure it.";
    } else if (attn || other) {
        c = "dropout_cuda_mask_unverified";
        why = "dropout is modelled as CUDA's native_dropout, which keeps a 1-byte mask per element; the CPU keeps a "
              "noise tensor in the input dtype instead, so tools/hf_probe could not measure it.";
    } else if (a == GCKPT_SDPA && gckpt_qk_head_dim(m) != gckpt_v_head_dim(m)) {
        c = "mla_cuda_sdpa_unverified";
        why = "SDPA with a v head dim that differs from the q/k head dim (multi-head latent attention) is modelled as "
              "CUDA's memory-efficient kernel (q, k, v, output and logsumexp kept); the CPU runs the math path "
              "(fp32 [b, heads, s, s] probabilities kept), so tools/hf_probe could not measure it.";
    }
    if (code) *code = c;
    if (sentence) *sentence = why;
    return c != NULL;
}

/* Each op lists the Python references that end after it (a full list would move the
 * release to the next op: never with the recipes here, 10 at most); a parameter's
 * gradient is complete (AccumulateGrad runs) after all its uses in one layer (the ops of
 * one block section: a later block type's section of the same parameter group uses the
 * same parameters). */
void recipe_finish(gckpt_recipe *r)
{
    for (int t = 0; t < r->nt; t++) {
        int h = r->t[t].hold_to;
        if (h < 0 || h >= r->nop) continue;
        while (h < r->nop - 1 && r->op[h].nunhold == GCKPT_OP_MAX_UNHOLD) h++;
        gckpt_op *op = &r->op[h];
        if (op->nunhold < GCKPT_OP_MAX_UNHOLD) op->unhold[op->nunhold++] = (int16_t)t;
        r->t[t].hold_to = (int16_t)h;
    }
    for (int i = 0; i < r->nop; i++)
        for (int k = 0; k < r->op[i].nin && (!gckpt_sec_is_block(r->op[i].section) ||
                                             r->sec_params[r->op[i].section] == r->op[i].section) &&
                        r->op[i].prim != GCKPT_P_CCE_LSE; /* (CCE's lse pass: no backward) */
             k++) {
            int t = r->op[i].in[k];
            bool dup = false;
            for (int q = 0; q < k; q++) dup |= r->op[i].in[q] == t;
            if (!dup && r->t[t].kind == GCKPT_T_PARAM) r->t[t].uses++;
        }
}

void gckpt_recipe_build_target(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                               gckpt_recipe *r)
{
    gckpt_recipe_build_peft(m, p, a, target, NULL, r);
}

static void trace(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                  const gckpt_peft *peft, uint64_t seq, uint8_t loss, uint8_t liger_off, bool block_in_frozen, gckpt_recipe *r);

/* The same recipe traced with a block input that needs no gradient gives layer 0's saves
 * and gradients without checkpointing (frozen0); the two traces make the same ops and
 * tensors in the same order, or the variant is left out (layer 0 then planned like the
 * others: an overestimate). */
static void layer0_variant(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                           const gckpt_peft *peft, uint64_t seq, uint8_t loss, uint8_t liger_off, gckpt_recipe *r)
{
    gckpt_recipe *v = malloc(sizeof *v);
    if (!v) return;
    trace(m, p, a, target, peft, seq, loss, liger_off, true, v);
    bool same = v->nt == r->nt && v->nop == r->nop;
    for (int i = 0; same && i < r->nop; i++) same = v->op[i].prim == r->op[i].prim && v->op[i].out[0] == r->op[i].out[0];
    if (same) {
        for (int t = 0; t < r->nt; t++) r->t[t].rg0 = v->t[t].requires_grad;
        for (int i = 0; i < r->nop; i++) {
            r->op[i].nsaved0 = v->op[i].nsaved;
            memcpy(r->op[i].saved0, v->op[i].saved, sizeof r->op[i].saved0);
        }
        r->frozen0 = true;
    }
    free(v);
}

void gckpt_recipe_build_peft(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                             const gckpt_peft *peft, gckpt_recipe *r)
{
    gckpt_recipe_build_seq(m, p, a, target, peft, 0, r);
}

void gckpt_recipe_build_seq(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                            const gckpt_peft *peft, uint64_t seq, gckpt_recipe *r)
{
    gckpt_recipe_build_loss(m, p, a, target, peft, seq, GCKPT_LOSS_HF, 0, r);
}

void gckpt_recipe_build_loss(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                             const gckpt_peft *peft, uint64_t seq, uint8_t loss, uint8_t liger_off, gckpt_recipe *r)
{
    a = gckpt_attention_run(m, a);
    trace(m, p, a, target, peft, seq, loss, liger_off, false, r);
    if (r->embed_leaf >= 0) layer0_variant(m, p, a, target, peft, seq, loss, liger_off, r);
}

gckpt_attention gckpt_attention_run(const gckpt_model *m, gckpt_attention requested)
{
    return m->attn_softcap > 0 || m->attn_sinks ? GCKPT_EAGER : requested;
}

bool gckpt_sliding_masked(const gckpt_model *m, gckpt_attention a, uint64_t seq)
{
    /* a VLM's token_type_ids masks are materialised at any length (gckpt_model.image_masks) */
    return gckpt_attention_run(m, a) == GCKPT_SDPA && m->sliding_layers && seq &&
           (seq >= m->sliding_window || m->image_masks);
}

bool gckpt_layer_type_checkpointed(const gckpt_model *m, uint32_t every_n, int lt)
{
    for (uint64_t i = 0; every_n && i < m->layers; i += every_n)
        if (lt == GCKPT_LT_ANY || gckpt_layer_sliding(m, i) == (lt == GCKPT_LT_SLIDING)) return true;
    return false;
}

uint8_t gckpt_ckpt_types(const gckpt_model *m, uint32_t every_n)
{
    return (uint8_t)((gckpt_layer_type_checkpointed(m, every_n, GCKPT_LT_FULL) ? 1u << (GCKPT_LT_FULL - 1) : 0) |
                     (gckpt_layer_type_checkpointed(m, every_n, GCKPT_LT_SLIDING) ? 1u << (GCKPT_LT_SLIDING - 1) : 0));
}

gckpt_block_type gckpt_layer_block(const gckpt_model *m, gckpt_attention a, uint64_t seq, uint64_t layer)
{
    if (gckpt_layer_cross(m, layer)) return GCKPT_BLOCK_CROSS;
    if (m->gated_from && layer >= m->gated_from) return GCKPT_BLOCK_GATED;
    if (m->experts && layer < m->dense_layers) return GCKPT_BLOCK_DENSE_MLP;
    if (gckpt_layer_nope(m, layer)) return GCKPT_BLOCK_NOPE; /* never sliding (the reader refuses it) */
    return gckpt_layer_sliding(m, layer) && gckpt_sliding_masked(m, a, seq) ? GCKPT_BLOCK_SLIDING_SDPA
                                                                             : GCKPT_BLOCK_DECODER;
}

int gckpt_block_params_group(gckpt_block_type b)
{
    static const uint8_t group[GCKPT_NBLOCK] = {[GCKPT_BLOCK_DECODER] = 0, [GCKPT_BLOCK_SLIDING_SDPA] = 0,
                                                [GCKPT_BLOCK_DENSE_MLP] = 1, [GCKPT_BLOCK_NOPE] = 0,
                                                [GCKPT_BLOCK_CROSS] = 2, [GCKPT_BLOCK_GATED] = 3};
    return (unsigned)b < GCKPT_NBLOCK ? group[b] : 0;
}

int gckpt_layer_section(const gckpt_recipe *r, const gckpt_model *m, gckpt_attention a, uint64_t layer)
{
    int sec = r->block_sec[gckpt_layer_block(m, a, r->seq, layer)];
    return sec >= 0 ? sec : GCKPT_SEC_BLOCK;
}

void tracer_setup(tracer *tr, const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                  const gckpt_peft *peft, uint64_t seq, uint8_t loss, uint8_t liger_off, bool block_in_frozen,
                  gckpt_recipe *r)
{
    memset(r, 0, sizeof *r);
    r->seq = seq;
    memset(r->block_sec, -1, sizeof r->block_sec);
    for (int k = 0; k < GCKPT_NSEC; k++) r->sec_in[k] = r->sec_out[k] = r->sec_params[k] = -1;
    r->mask = -1;
    r->rope[0] = r->rope[1] = r->rope_local[0] = r->rope_local[1] = -1;
    r->router_logits[0] = r->router_logits[1] = -1;
    r->embed_leaf = -1;
    r->grad_seed = -1;
    r->bridge_param = -1;
    r->lead_end = r->lead_in = r->lead_out = r->lead_block = -1;
    *tr = (tracer){.r = r, .m = m, .eps = m->norm_eps, .cpu = target != GCKPT_TARGET_CUDA,
                   .cuda_lists = target != GCKPT_TARGET_CPU, .peft = peft, .attn = a,
                   .seq = seq, .replay = -1, .block_in_frozen = block_in_frozen, .bool_mask = -1, .full_mask = -1, .sdpa_mask = -1, .float_mask = -1, .cross_in = {-1, -1, -1}, .loss = loss,
                   .liger_off = loss == GCKPT_LOSS_LIGER ? liger_off : 0};
    r->loss_kind = loss;
    tr->amp = p == GCKPT_AMP_BF16 || p == GCKPT_AMP_FP16;
    tr->compute_dt = p == GCKPT_FP32 ? F32 : p == GCKPT_AMP_FP16 ? F16 : BF16;
    tr->stream_dt = p == GCKPT_BF16 ? BF16 : F32; /* AMP keeps an fp32 residual stream */
    tr->param_dt = tr->amp ? F32 : tr->stream_dt;
    if (gckpt_peft_quantized(peft)) { /* prepare_model_for_kbit_training casts to fp32 */
        if (!peft->wrapper_cast) tr->stream_dt = tr->param_dt = F32; /* (a wrapper casts them back) */
        r->quant = peft->quant;
        r->double_quant = peft->double_quant;
        r->quant_storage = peft->quant_storage;
    }
    r->amp = tr->amp;
    r->target = (uint8_t)target;
    r->stream_dtype = tr->stream_dt;
    r->compute_dtype = tr->compute_dt;
    r->param_dtype = tr->param_dt;
    r->grad_dtype = r->param_dtype;
    r->hidden = m->hidden;
}

static void trace(const gckpt_model *m, gckpt_precision p, gckpt_attention a, gckpt_target target,
                  const gckpt_peft *peft, uint64_t seq, uint8_t loss, uint8_t liger_off, bool block_in_frozen, gckpt_recipe *r)
{
    tracer tr;
    tracer_setup(&tr, m, p, a, target, peft, seq, loss, liger_off, block_in_frozen, r);
    gckpt_family_of(m->family)->trace(&tr, a);
    recipe_finish(r);
}

bool gckpt_tensor_numel(const gckpt_recipe *r, int i, uint64_t b, uint64_t s, uint64_t *numel)
{
    const gckpt_shape *sh = &r->t[i].shape;
    uint64_t T, BSS, rows, width = sh->width ? sh->width : s + sh->plus;
    if (!gckpt_mul(b, s, &T) || !gckpt_mul(T, s, &BSS)) return false;
    uint64_t unit = sh->rows == GCKPT_ROWS_TOKENS ? T : sh->rows == GCKPT_ROWS_SEQ ? s : sh->rows == GCKPT_ROWS_BATCH ? b : 1;
    if (sh->rows == GCKPT_ROWS_PATCHES && (s == 0 || !gckpt_mul(b, s - 1, &unit))) return false;
    if (sh->rows == GCKPT_ROWS_GROUPS) { /* whole groups only */
        if (!sh->mult || T % sh->mult) return false;
        return gckpt_mul(T / sh->mult, width, numel);
    }
    return gckpt_mul(sh->mult, unit, &rows) && gckpt_mul(rows, width, numel);
}

bool gckpt_tensor_bytes(const gckpt_recipe *r, int i, uint64_t b, uint64_t s, uint64_t *bytes)
{
    uint64_t n;
    return gckpt_tensor_numel(r, i, b, s, &n) && gckpt_dtype_storage((gckpt_dtype)r->t[i].dtype, n, bytes);
}

int gckpt_recipe_producer(const gckpt_recipe *r, int tensor)
{
    for (int i = 0; i < r->nop; i++)
        if (r->op[i].out[0] == tensor || r->op[i].out[1] == tensor) return i;
    return -1;
}
