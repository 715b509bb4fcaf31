/* The GPT-NeoX family (GPTNeoXForCausalLM: Pythia): LayerNorm, one packed
 * query_key_value projection with biases whose per-head chunks are q, k, v, partial
 * rotary embeddings, attention and the MLP in parallel on the same layer input
 * (use_parallel_residual) or one after the other, an exact-GELU MLP with biases, an
 * untied lm_head. */
#include "recipe_tracer.h"

/* GPTNeoXModel's embedding: input ids, embed_in, emb_dropout (hidden_dropout), and the
 * layers' keyword arguments (position ids, rotary cos/sin rotary_dim wide, eager's
 * causal mask). Returns the embedding table. */
static int neox_embedding(tracer *tr, gckpt_attention attn, int *cos, int *sin)
{
    gckpt_recipe *r = tr->r;
    const gckpt_model *m = tr->m;
    section_begin(tr, GCKPT_SEC_EMBED);
    int ids = source(tr, "input_ids", GCKPT_SRC_IDS, I64, per_token(1), NULL, NULL);
    r->t[ids].step_held = true;
    int table = param(tr, "embed_in.weight", m->vocab, m->hidden, GCKPT_ROLE_MATRIX);
    int used = mts_param(tr, table, GCKPT_MTS_EMBED, "embed_in.modules_to_save.weight");
    int x = embedding(tr, "embed_in", used, ids);
    if (!r->t[used].requires_grad) r->embed_leaf = x;
    r->t[x].fwd_end_free = r->t[x].base_end_free = true; /* `inputs_embeds` until the model returns */
    x = dropout(tr, x, m->embd_dropout, "emb_dropout");
    int pos = source(tr, "position_ids", GCKPT_SRC_POSITIONS, I64, per_position(1), NULL, NULL);
    *cos = source(tr, "rotary.cos", GCKPT_SRC_ROTARY, tr->stream_dt, per_position(m->rotary_dim), "rotary.sin", sin);
    int mask = attn == GCKPT_EAGER ? source(tr, "causal_mask", GCKPT_SRC_MASK, tr->stream_dt, score_shape(1), NULL, NULL) : -1;
    int kwargs[4] = {pos, *cos, *sin, mask};
    for (int k = 0; k < 4; k++) layer_kwarg(tr, kwargs[k]);
    r->mask = mask;
    r->embed_out = x;
    section_end(tr);
    return table;
}

/* GPTNeoXAttention on ln1's output: query_key_value (addmm), q/k/v chunks (views),
 * partial rotary on q then k, attention, the output's reshape(...).contiguous() (a copy
 * under SDPA too: q is a cat's [b, heads, s, hd]-contiguous output), dense. */
static int neox_attention(tracer *tr, gckpt_attention attn, int n1, int cos, int sin)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden;
    tr->pfx = "attention";
    int w = linear_weight(tr, "query_key_value.weight", 3 * h, h, false);
    int b = m->qkv_bias ? param(tr, "query_key_value.bias", 1, 3 * h, GCKPT_ROLE_BIAS) : -1;
    int wd = linear_weight(tr, "dense.weight", h, h, false);
    int bd = m->o_bias ? param(tr, "dense.bias", 1, h, GCKPT_ROLE_BIAS) : -1;
    int qkv = lora_linear(tr, n1, w, b, h, 3 * h, GCKPT_LT_QUERY_KEY_VALUE, false);
    int q = slice_of(tr, qkv, 0, h, "q"), k = slice_of(tr, qkv, 1, h, "k"), v = slice_of(tr, qkv, 2, h, "v");
    /* view(..., heads, 3 * hd).chunk(3): each head's q, k, v side by side (executors' view) */
    for (int i = 1; i <= 3; i++) {
        gckpt_op *s = &tr->r->op[tr->r->nop - i];
        s->in_f = 3 * m->head_dim;
        s->out_f = m->head_dim;
        s->sb = s->sa * (double)m->head_dim;
    }
    int qe = rope_partial(tr, q, cos, sin, "rope_q");
    int ke = rope_partial(tr, k, cos, sin, "rope_k");
    int weights = -1;
    int a = attn == GCKPT_SDPA ? attention_sdpa(tr, qe, ke, v, m->attn_dropout)
                               : attention_eager(tr, qe, ke, v, tr->r->mask, m->attn_dropout, &weights);
    if (attn == GCKPT_SDPA) { /* the executors' SDPA writes [b, s, heads * hd]: a plain copy there */
        a = transpose_copy(tr, a, "attn_output.contiguous");
        last_op(tr)->prim = GCKPT_P_CAST;
    }
    int ao = lora_linear(tr, a, wd, bd, h, h, GCKPT_LT_DENSE, false);
    hold_here(tr, qkv);
    hold_here(tr, qe);
    hold_here(tr, ke);
    hold(tr, weights, HOLD_END);
    tr->pfx = "";
    return ao;
}

/* GPTNeoXMLP: dense_4h_to_h(act(dense_h_to_4h(x))), biases on. */
static int neox_mlp(tracer *tr, int n2)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, I = m->intermediate;
    tr->pfx = "mlp";
    int w1 = linear_weight(tr, "dense_h_to_4h.weight", I, h, false), b1 = param(tr, "dense_h_to_4h.bias", 1, I, GCKPT_ROLE_BIAS);
    int w2 = linear_weight(tr, "dense_4h_to_h.weight", h, I, false), b2 = param(tr, "dense_4h_to_h.bias", 1, h, GCKPT_ROLE_BIAS);
    int f = lora_linear(tr, n2, w1, b1, h, I, GCKPT_LT_H_TO_4H, false);
    int g = unary(tr, f, "act", false, GCKPT_P_GELU, m->act == GCKPT_ACT_GELU_TANH ? 1.0 : 0.0);
    int d = lora_linear(tr, g, w2, b2, I, h, GCKPT_LT_4H_TO_H, false);
    tr->pfx = "";
    return d;
}

/* GPTNeoXLayer: attention(ln1(x)) and its dropout, then with use_parallel_residual
 * mlp(ln2(x)) + attn_output + x; without it attn_output = attn_output + x (rebinding the
 * dropout's output) and mlp(ln2(attn_output)) + attn_output. x is the layer's argument,
 * `attn_output` a local until it returns. */
static void neox_block(tracer *tr, gckpt_attention attn, int cos, int sin)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden;
    block_begin(tr, GCKPT_BLOCK_DECODER);
    int xin = tnew(tr, "hidden_states", GCKPT_T_ACT, tr->stream_dt, per_token(h), !tr->block_in_frozen);
    hold(tr, xin, HOLD_END);
    int n1 = layernorm(tr, xin, h, "input_layernorm");
    int ao = neox_attention(tr, attn, n1, cos, sin);
    hold_here(tr, n1);
    ao = dropout(tr, ao, m->resid_dropout, "post_attention_dropout");
    if (!m->parallel_residual) ao = add(tr, ao, xin, "residual_attn");
    hold(tr, ao, HOLD_END);
    int n2 = layernorm(tr, m->parallel_residual ? xin : ao, h, "post_attention_layernorm");
    int d = neox_mlp(tr, n2);
    hold_here(tr, n2);
    d = dropout(tr, d, m->resid_dropout, "post_mlp_dropout");
    int y = add(tr, d, ao, m->parallel_residual ? "residual_mlp_attn" : "residual");
    if (m->parallel_residual) y = add(tr, y, xin, "residual");
    block_end(tr, xin, y);
}

void trace_gpt_neox(tracer *tr, gckpt_attention attn)
{
    int cos, sin;
    int table = neox_embedding(tr, attn, &cos, &sin);
    neox_block(tr, attn, cos, sin);
    trace_head(tr, NORM_LAYER, "final_layer_norm", table);
}
