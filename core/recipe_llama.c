/* The llama family (LlamaForCausalLM and the models built like it: Mistral, Qwen2 with
 * q/k/v biases, Qwen3 with q/k norms): RMSNorm, rotary embeddings, grouped-query
 * attention, a SwiGLU MLP; tied or untied embeddings. */
#include "recipe_tracer.h"

/* LlamaModel's embedding: input ids (the batch), the token lookup, and what the model
 * hands every layer as keyword arguments: position ids, rotary cos/sin (1, s, head_dim)
 * in the embeddings' dtype and, for eager attention, the (b, 1, s, s) additive causal
 * mask; dropped when the base model returns unless saved or held by checkpoints.
 * Returns the embedding table. */
static int llama_embedding(tracer *tr, gckpt_attention attn, int *cos, int *sin)
{
    gckpt_recipe *r = tr->r;
    const gckpt_model *m = tr->m;
    section_begin(tr, GCKPT_SEC_EMBED);
    int ids = source(tr, "input_ids", GCKPT_SRC_IDS, I64, per_token(1), NULL, NULL);
    r->t[ids].step_held = true;
    int table = param(tr, "embed_tokens.weight", m->vocab, m->hidden, GCKPT_ROLE_MATRIX);
    int used = mts_param(tr, table, GCKPT_MTS_EMBED, "embed_tokens.modules_to_save.weight");
    int x = embedding(tr, "embed_tokens", used, ids);
    if (!r->t[used].requires_grad) r->embed_leaf = x;
    int pos = source(tr, "position_ids", GCKPT_SRC_POSITIONS, I64, per_position(1), NULL, NULL);
    *cos = source(tr, "rotary.cos", GCKPT_SRC_ROTARY, tr->stream_dt, per_position(m->head_dim), "rotary.sin", sin);
    int mask = -1;
    if (attn == GCKPT_EAGER) mask = source(tr, "causal_mask", GCKPT_SRC_MASK, tr->stream_dt, score_shape(1), NULL, NULL);
    int kwargs[4] = {pos, *cos, *sin, mask};
    for (int k = 0; k < 4; k++) {
        if (kwargs[k] < 0) continue;
        r->t[kwargs[k]].fwd_end_free = r->t[kwargs[k]].base_end_free = true;
        r->t[kwargs[k]].ckpt_held = true;
    }
    r->mask = mask;
    r->embed_out = x;
    /* LlamaModel keeps `inputs_embeds` until it returns */
    r->t[x].fwd_end_free = true;
    r->t[x].base_end_free = true;
    section_end(tr);
    return table;
}

/* LlamaAttention after the input norm n1: q/k/v projections (Qwen3: q_norm(q_proj(x)),
 * then k_norm(k_proj(x)), then v_proj(x), one statement each), rotary embeddings,
 * attention, o_proj. */
static int llama_attention(tracer *tr, gckpt_attention attn, int n1, int cos, int sin)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, qd = gckpt_q_dim(m), kvd = gckpt_kv_dim(m), hd = m->head_dim;
    tr->pfx = "self_attn";
    int wq = linear_weight(tr, "q_proj.weight", qd, h, false), wk = linear_weight(tr, "k_proj.weight", kvd, h, false);
    int wv = linear_weight(tr, "v_proj.weight", kvd, h, false), wo = linear_weight(tr, "o_proj.weight", h, qd, false);
    int bq = m->qkv_bias ? param(tr, "q_proj.bias", 1, qd, GCKPT_ROLE_BIAS) : -1;
    int bk = m->qkv_bias ? param(tr, "k_proj.bias", 1, kvd, GCKPT_ROLE_BIAS) : -1;
    int bv = m->qkv_bias ? param(tr, "v_proj.bias", 1, kvd, GCKPT_ROLE_BIAS) : -1;
    int bo = m->o_bias ? param(tr, "o_proj.bias", 1, h, GCKPT_ROLE_BIAS) : -1;
    int q = lora_linear(tr, n1, wq, bq, h, qd, "q_proj", GCKPT_LT_Q, false);
    if (m->qk_norm) q = rmsnorm(tr, q, hd, "q_norm");
    int kk = lora_linear(tr, n1, wk, bk, h, kvd, "k_proj", GCKPT_LT_K, false);
    if (m->qk_norm) kk = rmsnorm(tr, kk, hd, "k_norm");
    int v = lora_linear(tr, n1, wv, bv, h, kvd, "v_proj", GCKPT_LT_V, false);
    int qp = q, kp = kk;
    q = rope(tr, q, cos, sin, "rope_q");
    kk = rope(tr, kk, cos, sin, "rope_k");
    hold_here(tr, qp); /* apply_rotary_pos_emb's arguments until it returns */
    hold_here(tr, kp);
    int weights = -1;
    int a = attn == GCKPT_SDPA ? attention_sdpa(tr, q, kk, v, m->attn_dropout)
                               : attention_eager(tr, q, kk, v, tr->r->mask, m->attn_dropout, &weights);
    int ao = lora_linear(tr, a, wo, bo, qd, h, "o_proj", GCKPT_LT_O, false);
    /* LlamaAttention.forward returns: its argument and query/key/value_states go; the
     * decoder layer keeps the returned attention weights (`_`) until it returns */
    hold_here(tr, n1);
    hold_here(tr, q);
    hold_here(tr, kk);
    hold_here(tr, v);
    hold(tr, weights, HOLD_END);
    tr->pfx = "";
    return ao;
}

/* LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)); holds its argument until it returns. */
static int llama_mlp(tracer *tr, int n2)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, I = m->intermediate;
    tr->pfx = "mlp";
    int wg = linear_weight(tr, "gate_proj.weight", I, h, false), wu = linear_weight(tr, "up_proj.weight", I, h, false);
    int wd = linear_weight(tr, "down_proj.weight", h, I, false);
    int bg = m->mlp_bias ? param(tr, "gate_proj.bias", 1, I, GCKPT_ROLE_BIAS) : -1;
    int bu = m->mlp_bias ? param(tr, "up_proj.bias", 1, I, GCKPT_ROLE_BIAS) : -1;
    int bd = m->mlp_bias ? param(tr, "down_proj.bias", 1, h, GCKPT_ROLE_BIAS) : -1;
    int g = lora_linear(tr, n2, wg, bg, h, I, "gate_proj", GCKPT_LT_GATE, false);
    int act = unary(tr, g, "silu", false, false, GCKPT_P_SILU, 0);
    int u = lora_linear(tr, n2, wu, bu, h, I, "up_proj", GCKPT_LT_UP, false);
    int gu = mul(tr, act, u, "mul");
    int dn = lora_linear(tr, gu, wd, bd, I, h, "down_proj", GCKPT_LT_DOWN, false);
    hold_here(tr, n2);
    tr->pfx = "";
    return dn;
}

/* One decoder layer (LlamaDecoderLayer): the caller holds its input, `residual` the
 * residual sums, until it returns. */
static void llama_block(tracer *tr, gckpt_attention attn, int cos, int sin)
{
    gckpt_recipe *r = tr->r;
    uint64_t h = tr->m->hidden;
    section_begin(tr, GCKPT_SEC_BLOCK);
    int xin = tnew(tr, "hidden_states", GCKPT_T_ACT, tr->stream_dt, per_token(h), true);
    r->block_in = xin;
    hold(tr, xin, HOLD_END);
    int n1 = rmsnorm(tr, xin, h, "input_layernorm");
    int ao = llama_attention(tr, attn, n1, cos, sin);
    int h1 = add(tr, xin, ao, "residual_attn");
    hold(tr, h1, HOLD_END);
    int n2 = rmsnorm(tr, h1, h, "post_attention_layernorm");
    int dn = llama_mlp(tr, n2);
    r->block_out = add(tr, h1, dn, "residual_mlp");
    section_end(tr);
}

void trace_llama(tracer *tr, gckpt_attention attn)
{
    int cos, sin;
    int table = llama_embedding(tr, attn, &cos, &sin);
    llama_block(tr, attn, cos, sin);
    trace_head(tr, NORM_RMS, "norm", table);
}
