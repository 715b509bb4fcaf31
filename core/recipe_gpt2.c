/* The GPT-2 family (GPT2LMHeadModel): learned position embeddings, LayerNorm, Conv1D
 * projections with biases, multi-head attention over one packed q/k/v tensor, a GELU MLP,
 * dropout (embd_pdrop, attn_pdrop, resid_pdrop). */
#include "recipe_tracer.h"

#include <math.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* GPT2Model's embedding: token and position lookups, their sum, dropout and, for eager
 * attention, the causal mask GPT2Block takes positionally (the checkpoint saves it with
 * the hidden states, and offload copies it to the host for every checkpointed layer).
 * Returns the token table. */
static int gpt2_embedding(tracer *tr, gckpt_attention attn)
{
    gckpt_recipe *r = tr->r;
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden;
    section_begin(tr, GCKPT_SEC_EMBED);
    int ids = source(tr, "input_ids", GCKPT_SRC_IDS, I64, per_token(1), NULL, NULL);
    r->t[ids].step_held = true;
    int wte = param(tr, "wte.weight", m->vocab, h, GCKPT_ROLE_MATRIX);
    int wpe = param(tr, "wpe.weight", m->positions, h, GCKPT_ROLE_MATRIX);
    int used = mts_param(tr, wte, GCKPT_MTS_EMBED, "wte.modules_to_save.weight");
    int te = embedding(tr, "wte", used, ids);
    if (!r->t[used].requires_grad) r->embed_leaf = te;
    int pos = source(tr, "position_ids", GCKPT_SRC_POSITIONS, I64, per_position(1), NULL, NULL);
    int pe = embedding(tr, "wpe", wpe, pos);
    /* GPT2Model keeps `inputs_embeds` and `position_embeds` until it returns */
    r->t[te].fwd_end_free = r->t[te].base_end_free = true;
    r->t[pe].fwd_end_free = r->t[pe].base_end_free = true;
    int x = add(tr, te, pe, "add_pos");
    x = dropout(tr, x, m->embd_dropout, "drop");
    int mask = -1;
    if (attn == GCKPT_EAGER) {
        mask = source(tr, "causal_mask", GCKPT_SRC_MASK, tr->stream_dt, score_shape(1), NULL, NULL);
        r->t[mask].fwd_end_free = true;
        r->t[mask].base_end_free = true;
        r->t[mask].ckpt_held = true;
        r->mask_positional = true;
    }
    r->mask = mask;
    r->embed_out = x;
    section_end(tr);
    return wte;
}

static int gelu(tracer *tr, int x)
{
    const gckpt_model *m = tr->m;
    if (m->act != GCKPT_ACT_GELU_NEW)
        return unary(tr, x, "gelu", false, GCKPT_P_GELU, m->act == GCKPT_ACT_GELU_TANH ? 1.0 : 0.0);
    /* NewGELUActivation: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*pow(x,3)))) in Python,
     * evaluated left to right: 0.5*x first, then the tanh chain */
    int t7 = scal(tr, x, "act.half_x", 0.5, 0);
    int p3 = unary(tr, x, "act.pow3", true, GCKPT_P_POW, 3.0);
    int t2 = scal(tr, p3, "act.mul_c", 0.044715, 0);
    int t3 = add(tr, x, t2, "act.add");
    int t4 = scal(tr, t3, "act.mul_sqrt", sqrt(2.0 / M_PI), 0);
    int t5 = unary(tr, t4, "act.tanh", false, GCKPT_P_TANH, 0);
    int t6 = scal(tr, t5, "act.add_one", 1.0, 1.0);
    return mul(tr, t7, t6, "act.mul");
}

/* GPT2Attention after ln_1: c_attn (q, k, v are views of its output: one storage),
 * attention, c_proj, resid_dropout. *weights: eager's returned attention weights. */
static int gpt2_attention(tracer *tr, gckpt_attention attn, int n1, int *weights)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden;
    tr->pfx = "attn";
    int wa = linear_weight(tr, "c_attn.weight", 3 * h, h, true), ba = param(tr, "c_attn.bias", 1, 3 * h, GCKPT_ROLE_BIAS);
    int wp = linear_weight(tr, "c_proj.weight", h, h, true), bp = param(tr, "c_proj.bias", 1, h, GCKPT_ROLE_BIAS);
    int qkv = lora_linear(tr, n1, wa, ba, h, 3 * h, GCKPT_LT_C_ATTN, true);
    /* SDPA takes HF's q / k / v views of the fused output, which is all they cost; when
     * autocast must cast them (QLoRA's fp32 output under amp) it copies each view: three
     * [T, h] tensors, not three of the fused width (measured, gpt2 QLoRA amp fixtures) */
    int q = qkv, k = qkv, v = qkv;
    if (attn == GCKPT_SDPA && tr->amp && dt(tr, qkv) != tr->compute_dt) {
        q = slice_of(tr, qkv, 0, h, "q");
        k = slice_of(tr, qkv, 1, h, "k");
        v = slice_of(tr, qkv, 2, h, "v");
    }
    int a = attn == GCKPT_SDPA ? attention_sdpa(tr, q, k, v, m->attn_dropout)
                               : attention_eager_gpt2(tr, qkv, tr->r->mask, m->attn_dropout, weights);
    int ao = lora_linear(tr, a, wp, bp, h, h, GCKPT_LT_ATTN_C_PROJ, true);
    ao = dropout(tr, ao, m->resid_dropout, "resid_dropout");
    hold_here(tr, qkv); /* GPT2Attention returns: the q / k / v views go */
    tr->pfx = "";
    return ao;
}

/* GPT2MLP: c_proj(gelu(c_fc(x))), dropout; the activation holds its argument. */
static int gpt2_mlp(tracer *tr, int n2)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, I = m->intermediate;
    tr->pfx = "mlp";
    int wf = linear_weight(tr, "c_fc.weight", I, h, true), bf = param(tr, "c_fc.bias", 1, I, GCKPT_ROLE_BIAS);
    int wp = linear_weight(tr, "c_proj.weight", h, I, true), bp = param(tr, "c_proj.bias", 1, h, GCKPT_ROLE_BIAS);
    int f = lora_linear(tr, n2, wf, bf, h, I, GCKPT_LT_C_FC, true);
    int g = gelu(tr, f);
    hold_here(tr, f);
    int d = lora_linear(tr, g, wp, bp, I, h, GCKPT_LT_MLP_C_PROJ, true);
    d = dropout(tr, d, m->resid_dropout, "dropout");
    tr->pfx = "";
    return d;
}

/* GPT2Block: the caller holds its input, `residual` the residual sums, `_` the attention
 * weights, until it returns. */
static void gpt2_block(tracer *tr, gckpt_attention attn)
{
    uint64_t h = tr->m->hidden;
    block_begin(tr, GCKPT_BLOCK_DECODER);
    int xin = tnew(tr, "hidden_states", GCKPT_T_ACT, tr->stream_dt, per_token(h), !tr->block_in_frozen);
    hold(tr, xin, HOLD_END);
    int n1 = layernorm(tr, xin, h, "ln_1");
    int weights = -1;
    int ao = gpt2_attention(tr, attn, n1, &weights);
    /* the block's `attn_output` and `_` live until it returns; its `hidden_states`
     * (ln_1's output) until the residual sum rebinds it */
    hold(tr, ao, HOLD_END);
    hold(tr, weights, HOLD_END);
    int h1 = add(tr, ao, xin, "residual_attn");
    hold_here(tr, n1);
    hold(tr, h1, HOLD_END);
    int n2 = layernorm(tr, h1, h, "ln_2");
    int d = gpt2_mlp(tr, n2);
    int out = add(tr, h1, d, "residual_mlp");
    hold_here(tr, n2); /* `hidden_states` (ln_2's output) until the residual sum rebinds it */
    block_end(tr, xin, out);
}

void trace_gpt2(tracer *tr, gckpt_attention attn)
{
    int table = gpt2_embedding(tr, attn);
    gpt2_block(tr, attn);
    trace_head(tr, NORM_LAYER, "ln_f", table);
}
