/* DeepSeek-V3's multi-head latent attention (DeepseekV3Attention, transformers 5.24) op by
 * op as its Python runs (FINDINGS R-MOE-8): q through the q_lora_rank bottleneck and its
 * norm (or one q_proj), the kv latent and the shared rotary key from kv_a_proj_with_mqa,
 * the rotary part of q and k (interleaved pairs by default), kv_b_proj's per-head k and v,
 * attention with a qk head dim (nope + rope) that differs from v's, o_proj. The projections
 * are LoRA's targets there (FINDINGS R-PEFT-29). gckpt-run executes it on the host backend. */
#include "recipe_tracer.h"

#include <stdio.h>

/* The column block [off, off + width) of every head of `per` columns of x (a split of
 * the last dimension after view(..., heads, per)): a view. */
static int head_cols(tracer *tr, int x, uint64_t heads, uint64_t per, uint64_t off, uint64_t width, const char *name)
{
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, x), per_token(heads * width), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_SPLIT, GCKPT_BC_NONE, 0, (double)off, width);
    gckpt_op *op = last_op(tr);
    op->view_fwd = true;
    op->in_f = per;
    op->out_f = width;
    return o;
}

/* apply_rotary_pos_emb_interleave for one of q / k (x: heads x rope columns): x[..., 0::2]
 * and x[..., 1::2] (views) times the tables' first halves (views, made once by the caller),
 * x1 * cos - x2 * sin and x2 * cos + x1 * sin (each product a temporary of its statement;
 * the products keep the tables, which need no gradient), cat: a new tensor. */
static int rope_interleaved(tracer *tr, int x, int cos_h, int sin_h, uint64_t heads, const char *name)
{
    uint64_t rope = tr->m->qk_rope_dim;
    char nm[40];
    snprintf(nm, sizeof nm, "%s.x1", name);
    int x1 = head_cols(tr, x, heads * rope / 2, 2, 0, 1, nm);
    snprintf(nm, sizeof nm, "%s.x2", name);
    int x2 = head_cols(tr, x, heads * rope / 2, 2, 1, 1, nm);
    snprintf(nm, sizeof nm, "%s.x1_cos", name);
    int a = mul(tr, x1, cos_h, nm);
    snprintf(nm, sizeof nm, "%s.x2_sin", name);
    int b = mul(tr, x2, sin_h, nm);
    snprintf(nm, sizeof nm, "%s.first", name);
    int f = sub(tr, a, b, nm);
    snprintf(nm, sizeof nm, "%s.x2_cos", name);
    int c = mul(tr, x2, cos_h, nm);
    snprintf(nm, sizeof nm, "%s.x1_sin", name);
    int d = mul(tr, x1, sin_h, nm);
    snprintf(nm, sizeof nm, "%s.second", name);
    int s = add(tr, c, d, nm);
    snprintf(nm, sizeof nm, "%s.cat", name);
    int o = like(tr, nm, x, dt(tr, f), rg(tr, f) || rg(tr, s));
    opnew(tr, nm, GCKPT_OP_ELEM, 2, (int[]){f, s}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAT_HALVES, GCKPT_BC_NONE, 0, 0, rope);
    gckpt_op *op = last_op(tr);
    op->grad_alias[0] = op->grad_alias[1] = true; /* CatBackward: narrow views of the output's gradient */
    return o;
}

/* torch.cat((a, b), dim=-1) per head (a: heads x wa, b: heads x wb, or one head of wb
 * expanded to every head: expand_kv's key): a new tensor in the promoted dtype (key:
 * new_empty in a's dtype, then two copy_), nothing saved. */
static int cat_heads(tracer *tr, int a, int b, uint64_t width, uint8_t dtype, const char *name)
{
    int o = tnew(tr, name, GCKPT_T_ACT, dtype, per_token(width), rg(tr, a) || rg(tr, b));
    opnew(tr, name, GCKPT_OP_ELEM, 2, (int[]){a, b}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAT_PASS, GCKPT_BC_NONE, 1, 0, tr->m->qk_nope_dim + tr->m->qk_rope_dim);
    last_op(tr)->heads = (uint32_t)tr->m->heads; /* sa 1: per head [a | b], b maybe one head expanded */
    return o;
}

int mla_attention(tracer *tr, gckpt_attention attn, int n1, int cos, int sin)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, H = m->heads, nope = m->qk_nope_dim, rd = m->qk_rope_dim, vd = m->v_head_dim;
    uint64_t qk = nope + rd, qr = m->q_lora_rank, kvr = m->kv_lora_rank;
    tr->pfx = "self_attn";
    int q;
    if (qr) {
        int wa = linear_weight(tr, "q_a_proj.weight", qr, h, false);
        int ba = m->qkv_bias ? param(tr, "q_a_proj.bias", 1, qr, GCKPT_ROLE_BIAS) : -1;
        int qa = lora_linear(tr, n1, wa, ba, h, qr, GCKPT_LT_Q_A, false);
        int qn = rmsnorm(tr, qa, qr, "q_a_layernorm");
        int wb = linear_weight(tr, "q_b_proj.weight", H * qk, qr, false);
        q = lora_linear(tr, qn, wb, -1, qr, H * qk, GCKPT_LT_Q_B, false);
    } else {
        int wq = linear_weight(tr, "q_proj.weight", H * qk, h, false);
        q = lora_linear(tr, n1, wq, -1, h, H * qk, GCKPT_LT_Q, false);
    }
    int q_pass = head_cols(tr, q, H, qk, 0, nope, "q_pass");
    int q_rot = head_cols(tr, q, H, qk, nope, rd, "q_rot");
    int wkv = linear_weight(tr, "kv_a_proj_with_mqa.weight", kvr + rd, h, false);
    int bkv = m->qkv_bias ? param(tr, "kv_a_proj_with_mqa.bias", 1, kvr + rd, GCKPT_ROLE_BIAS) : -1;
    int ckv = lora_linear(tr, n1, wkv, bkv, h, kvr + rd, GCKPT_LT_KV_A, false);
    int kv_nope = head_cols(tr, ckv, 1, kvr + rd, 0, kvr, "kv_nope");
    int k_rot = head_cols(tr, ckv, 1, kvr + rd, kvr, rd, "k_rot");
    /* the norm's input is the view: in fp32 (no copy) its saved input is the whole
     * [T, kv_lora_rank + rope] storage */
    int kvn = rmsnorm(tr, kv_nope, kvr, "kv_a_layernorm");
    int qe, ke;
    if (m->rope_interleave) {
        int ch = table_half(tr, cos, "rope.cos_half"), sh = table_half(tr, sin, "rope.sin_half");
        qe = rope_interleaved(tr, q_rot, ch, sh, H, "rope_q");
        ke = rope_interleaved(tr, k_rot, ch, sh, 1, "rope_k");
    } else {
        qe = rope(tr, q_rot, cos, sin, "rope_q");
        ke = rope(tr, k_rot, cos, sin, "rope_k");
    }
    /* query_states = cat((q_pass, q_rot)): contiguous [b, heads, s, qk] */
    uint8_t qdt = gckpt_dtype_bits(dt(tr, q_pass)) >= gckpt_dtype_bits(dt(tr, qe)) ? dt(tr, q_pass) : dt(tr, qe);
    int query = cat_heads(tr, q_pass, qe, H * qk, qdt, "query_states");
    /* expand_kv: kv_b_proj, k_nope / value views, key = new_empty + copy_ of k_nope and the
     * expanded k_rot (contiguous [b, heads, s, qk]) */
    int wkb = linear_weight(tr, "kv_b_proj.weight", H * (nope + vd), kvr, false);
    int kv = lora_linear(tr, kvn, wkb, -1, kvr, H * (nope + vd), GCKPT_LT_KV_B, false);
    int k_nope = head_cols(tr, kv, H, nope + vd, 0, nope, "k_nope");
    int value = head_cols(tr, kv, H, nope + vd, nope, vd, "value_states");
    int key = cat_heads(tr, k_nope, ke, H * qk, dt(tr, kv), "key_states");
    hold_here(tr, kv); /* expand_kv's kv_nope until it returns */
    int wo = linear_weight(tr, "o_proj.weight", h, H * vd, false);
    int bo = m->o_bias ? param(tr, "o_proj.bias", 1, h, GCKPT_ROLE_BIAS) : -1;
    int weights = -1;
    int a = attn == GCKPT_SDPA ? attention_sdpa(tr, query, key, value, m->attn_dropout)
                               : attention_eager(tr, query, key, value, tr->r->mask, m->attn_dropout, &weights);
    int ao = lora_linear(tr, a, wo, bo, H * vd, h, GCKPT_LT_O, false);
    /* DeepseekV3Attention.forward's locals until it returns; the decoder layer keeps the
     * returned weights (`_`) until it returns */
    int locals[] = {n1, q, ckv, kvn, qe, ke, query, key, kv};
    for (size_t i = 0; i < sizeof locals / sizeof *locals; i++) hold_here(tr, locals[i]);
    hold(tr, weights, HOLD_END);
    tr->pfx = "";
    return ao;
}
