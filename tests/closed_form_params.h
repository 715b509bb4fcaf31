/* The parameter count of a model as the closed form of each family's modules (what
 * model.c computed before the parameter state table existed), in 128 bits so that the
 * fuzz targets can see an overflow: embedding tables, per block, final norm and an
 * untied lm_head. Checked against gckpt_param_count by test_params and fuzz_model. */
#ifndef GCKPT_TEST_CLOSED_FORM_PARAMS_H
#define GCKPT_TEST_CLOSED_FORM_PARAMS_H

#include "gckpt/core/model.h"

static inline unsigned __int128 closed_form_params128(const gckpt_model *m)
{
    typedef unsigned __int128 u;
    u h = m->hidden, q = (u)m->heads * m->head_dim, kv = (u)m->kv_heads * m->head_dim,
      I = m->intermediate, V = m->vocab, L = m->layers;
    u layer;
    if (m->mla) {
        /* DeepSeek-V3: q (q_a_proj, its norm, q_b_proj; or q_proj), kv_a_proj_with_mqa, its
         * norm, kv_b_proj, o_proj, two norms; the dense MLP in the first layers, else the
         * router [E, h], E experts and the shared SwiGLU (e_score_correction_bias: a buffer) */
        u H = m->heads, qk = (u)m->qk_nope_dim + m->qk_rope_dim, qr = m->q_lora_rank, kvr = m->kv_lora_rank;
        u attn = (qr ? h * qr + qr + qr * H * qk : h * H * qk) + h * (kvr + m->qk_rope_dim) + kvr +
                 kvr * H * (m->qk_nope_dim + m->v_head_dim) + H * m->v_head_dim * h + 2 * h;
        if (m->qkv_bias) attn += (qr ? qr : 0) + kvr + m->qk_rope_dim + h;
        u moe = (u)m->experts * h + (u)m->experts * 3 * h * m->expert_inter + 3 * h * (u)m->shared_inter;
        u D = m->dense_layers;
        u embed = V * h, head = h + (m->tied ? 0 : V * h);
        return embed + D * (attn + 3 * h * I) + (L - D) * (attn + moe) + head;
    }
    if (m->family == GCKPT_FAMILY_GPT2) {
        /* ln_1, c_attn, c_proj, ln_2, c_fc, mlp c_proj (Conv1D weights + biases) */
        layer = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * I + I) + (I * h + h);
    } else if (m->family == GCKPT_FAMILY_GPT_NEOX) {
        /* two LayerNorms (w + b), query_key_value, dense, dense_h_to_4h, dense_4h_to_h */
        layer = 4 * h + 3 * h * h + h * h + 2 * h * I + I + h;
        if (m->qkv_bias) layer += 3 * h + h;
    } else {
        /* the MLP, or (mixture of experts) a router [E, h] and E SwiGLU experts */
        u mlp = m->experts ? (u)m->experts * h + (u)m->experts * 3 * h * m->expert_inter : 3 * h * I;
        layer = h * q + 2 * h * kv + q * h + mlp + 2 * h;
        if (m->qkv_bias) layer += q + 2 * kv;
        if (m->o_bias) layer += h;
        if (m->mlp_bias) layer += 2 * I + h;
        if (m->qk_norm) layer += 2 * (u)m->head_dim;
        if (m->qk_norm_full) layer += q + kv;                  /* OLMo 2, OLMoE: over the projections */
        if (m->sandwich_norms) layer += 2 * h;                 /* Gemma 2/3: four norms */
        if (m->attn_sinks) layer += m->heads;                  /* gpt_oss: a sink logit per head */
        if (m->router_bias) layer += m->experts;
        if (m->expert_bias) layer += (u)m->experts * (2 * m->expert_inter + h); /* gate_up and down biases */
    }
    u embed = V * h + (u)m->positions * h;
    bool ln = m->family == GCKPT_FAMILY_GPT2 || m->family == GCKPT_FAMILY_GPT_NEOX; /* LayerNorm: w + b */
    u head = (ln ? 2 * h : h) + (m->tied ? 0 : V * h);
    return embed + L * layer + head;
}

#endif
