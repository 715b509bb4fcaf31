/* The llama family (LlamaForCausalLM and the models built like it: Mistral, Qwen2 with
 * q/k/v biases, Qwen3 with q/k norms): RMSNorm, rotary embeddings, grouped-query
 * attention, a SwiGLU MLP; tied or untied embeddings. Issue 13's llama-built families
 * are variants of it (FINDINGS R-FAM-7 to R-FAM-14): Gemma 1/2/3 ((1 + w) norms, sqrt(h)
 * embedding scale, GELU-tanh MLP; 2/3: pre/post "sandwich" norms, 2: attention
 * soft-capping, 3: per-head q/k norms), Phi-3 (fused qkv_proj / gate_up_proj, partial
 * rotary), OLMo 2 (post-norms only, q/k norms over the whole projection, fp32 rotary)
 * and Granite (multipliers). */
#include "recipe_tracer.h"

#include <stdio.h>

#include "gckpt/core/families.h"

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
    /* mllama: cross_attention_states and the cross-attention masks exist before the text model
     * runs (MllamaModel.forward); traced first, the backward reaches them last: their gradient
     * (cross_attention_states') lives through the text embedding's backward until the
     * projector's (FINDINGS R-VLM-34) */
    if (m->cross_layers) mllama_cross_sources(tr);
    int ids = source(tr, "input_ids", GCKPT_SRC_IDS, I64, per_token(1), NULL, NULL);
    r->t[ids].step_held = true;
    int table = param(tr, "embed_tokens.weight", m->vocab + m->embed_extra_rows, m->hidden, GCKPT_ROLE_MATRIX);
    int used = mts_param(tr, table, GCKPT_MTS_EMBED, "embed_tokens.modules_to_save.weight");
    int x = embedding(tr, "embed_tokens", used, ids);
    /* a frozen Gemma table: the embedding module's output is the scaled one (its forward
     * multiplies by the embed_scale buffer), which enable_input_require_grads makes the
     * leaf and the model keeps as `inputs_embeds`; the lookup is a temporary (FINDINGS R-PEFT-25) */
    bool scaled_leaf = m->embed_scale && !r->t[used].requires_grad;
    if (!scaled_leaf) {
        if (!r->t[used].requires_grad) r->embed_leaf = x;
        /* LlamaModel keeps `inputs_embeds` until it returns */
        r->t[x].fwd_end_free = true;
        r->t[x].base_end_free = true;
    }
    if (scaled_leaf) r->t[x].requires_grad = false; /* the lookup of a frozen table: the mul saves nothing */
    if (m->embed_scale) { /* Gemma: inputs_embeds * normalizer (a 0-d tensor in the hidden dtype, saved) */
        int norm = source(tr, "embed_normalizer", GCKPT_SRC_SCALE, tr->stream_dt, fixed_shape(1, 1), NULL, NULL);
        x = mul(tr, x, norm, "embed_scale");
    }
    if (scaled_leaf) {
        r->t[x].requires_grad = true; /* the leaf */
        r->embed_leaf = x;
        r->t[x].fwd_end_free = r->t[x].base_end_free = true;
    }
    if (m->multipliers) x = scal(tr, x, "embedding_multiplier", m->embedding_multiplier, 0);
    /* M-RoPE: get_rope_index's [3, b, s] */
    gckpt_shape psh = m->rope_per_token ? (gckpt_shape){GCKPT_ROWS_TOKENS, 3, 1} : per_position(1);
    int pos = source(tr, "position_ids", GCKPT_SRC_POSITIONS, I64, psh, NULL, NULL);
    /* cos/sin in the embeddings' dtype (OLMo 2: always fp32), rotary_dim wide (partial
     * rotary), per position (M-RoPE: per token); Gemma 3: one pair per layer type (local and
     * global theta) */
    uint8_t rdt = m->rope_fp32 ? F32 : tr->stream_dt;
    uint64_t rw = gckpt_rotary_table_width(m);
    gckpt_shape rsh = m->rope_per_token ? per_token(rw) : per_position(rw);
    *cos = source(tr, "rotary.cos", GCKPT_SRC_ROTARY, rdt, rsh, "rotary.sin", sin);
    int cos2 = -1, sin2 = -1;
    if (m->rope_tables > 1)
        cos2 = source(tr, "rotary_local.cos", GCKPT_SRC_ROTARY, rdt, per_position(m->rotary_dim), "rotary_local.sin",
                      &sin2);
    int mask = -1, mask2 = -1;
    if (attn == GCKPT_EAGER) mask = source(tr, "causal_mask", GCKPT_SRC_MASK, tr->stream_dt, score_shape(1), NULL, NULL);
    /* Gemma 2 / 3 always build the full and the sliding-window mask in every forward,
     * Qwen2 / Qwen3 when some layers slide, shared by the layers of each type
     * (masking_utils: eager materialises both) */
    bool mixed = m->sliding_layers && m->sliding_layers < m->layers;
    if (attn == GCKPT_EAGER && (m->both_masks || m->attn_sinks || mixed)) /* GptOssModel: both too */
        mask2 = source(tr, "sliding_mask", GCKPT_SRC_MASK, tr->stream_dt, score_shape(1), NULL, NULL);
    /* SDPA at seq >= window: masking_utils' bool mask, an expanded view of one [s, s] */
    if (gckpt_sliding_masked(m, attn, tr->seq) && !m->image_masks)
        tr->bool_mask = source(tr, "sliding_mask", GCKPT_SRC_MASK, BOOL, (gckpt_shape){GCKPT_ROWS_SEQ, 1, 0}, NULL, NULL);
    /* a VLM's token_type_ids (Gemma 3, FINDINGS R-VLM-14): create_masks_for_vision_model's
     * full and sliding masks, each its own bool [b, 1, s, s] (the image blocks differ per
     * sample), read by every layer of its type */
    if (m->image_masks && attn == GCKPT_SDPA) {
        tr->full_mask = source(tr, "full_mask", GCKPT_SRC_MASK, BOOL, score_shape(1), NULL, NULL);
        tr->bool_mask = source(tr, "sliding_mask", GCKPT_SRC_MASK, BOOL, score_shape(1), NULL, NULL);
        if (mixed) r->t[tr->full_mask].layer_type = GCKPT_LT_FULL;
    }
    int kwargs[9] = {pos, *cos, *sin, mask, cos2, sin2, mask2, tr->bool_mask, tr->full_mask};
    for (int k = 0; k < 9; k++) layer_kwarg(tr, kwargs[k]);
    /* two layer types: each eager mask and (Gemma 3) rotary pair is an argument of its
     * type's layers only (`causal_mask_mapping[layer_type]`, `position_embeddings[layer_type]`):
     * held by checkpoints when a layer of its type is checkpointed, a pair also saved by
     * its type's plain layers (core/sim.c, layer_arg and held_to_layer0) */
    if (mixed && mask >= 0) r->t[mask].layer_type = GCKPT_LT_FULL;
    for (int k = 0; k < 2 && cos2 >= 0; k++) {
        r->t[k ? *sin : *cos].layer_type = GCKPT_LT_FULL;
        r->t[k ? sin2 : cos2].layer_type = GCKPT_LT_SLIDING;
    }
    if (mixed && mask2 >= 0) r->t[mask2].layer_type = GCKPT_LT_SLIDING;
    /* (SDPA: the full layers' mask is None, is_causal) */
    if (mixed && tr->bool_mask >= 0) r->t[tr->bool_mask].layer_type = GCKPT_LT_SLIDING;
    r->rope_local[0] = cos2;
    r->rope_local[1] = sin2;
    r->rope[0] = *cos;
    r->rope[1] = *sin;
    r->mask = mask;
    r->embed_out = x;
    section_end(tr);
    return table;
}

/* q or k through the rotary embedding (Phi-3: the partial form, a copy; OLMo 2 rotates
 * in fp32 and casts back). */
/* DynamicLayer.update's torch.cat([empty, x]): a copy, held by the cache until the forward
 * returns (its CatBackward passes the gradient through) */
int kv_cache_copy(tracer *tr, int x, const char *name)
{
    int y = like(tr, name, x, dt(tr, x), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, y, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    tr->r->t[y].fwd_end_free = true;
    return y;
}

static int rotary_of(tracer *tr, int x, int cos, int sin, const char *name)
{
    const gckpt_model *m = tr->m;
    if (m->rope_split_cat) return rope_partial(tr, x, cos, sin, name);
    if (m->rope_halves) return rope_halves(tr, x, cos, sin, name);
    if (liger_rope_planned(tr)) return liger_rope(tr, x, cos, sin, name); /* liger_rotary_pos_emb */
    int y = rope(tr, x, cos, sin, name);
    if (m->rope_fp32) {
        char nm[40];
        snprintf(nm, sizeof nm, "%s.to_in", name);
        y = cast_to(tr, y, dt(tr, x), nm);
    }
    return y;
}

/* LlamaAttention after the input norm n1: q/k/v projections (Qwen3: q_norm(q_proj(x)),
 * then k_norm(k_proj(x)), then v_proj(x), one statement each; Gemma 3 projects all
 * three first, then norms q and k per head; OLMo 2 norms the whole projections; Phi-3:
 * one qkv_proj whose output q, k, v are slices of), rotary embeddings, attention (Gemma
 * 2: soft-capped scores), o_proj. */
static int llama_attention(tracer *tr, gckpt_attention attn, int n1, int cos, int sin)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, qd = gckpt_q_dim(m), kvd = gckpt_kv_dim(m), hd = m->head_dim;
    tr->pfx = "self_attn";
    int q, kk, v, wo, bo, qkv = -1;
    if (m->fused_qkv) {
        int w = linear_weight(tr, "qkv_proj.weight", qd + 2 * kvd, h, false);
        wo = linear_weight(tr, "o_proj.weight", h, qd, false);
        bo = -1;
        qkv = lora_linear(tr, n1, w, -1, h, qd + 2 * kvd, GCKPT_LT_QKV_PROJ, false);
        q = slice_of(tr, qkv, 0, qd, "q");
        kk = slice_of(tr, qkv, 1, kvd, "k");
        v = slice_of(tr, qkv, 2, kvd, "v");
    } else {
        int wq = linear_weight(tr, "q_proj.weight", qd, h, false), wk = linear_weight(tr, "k_proj.weight", kvd, h, false);
        int wv = linear_weight(tr, "v_proj.weight", kvd, h, false);
        wo = linear_weight(tr, "o_proj.weight", h, qd, false);
        int bq = m->qkv_bias ? param(tr, "q_proj.bias", 1, qd, GCKPT_ROLE_BIAS) : -1;
        int bk = m->qkv_bias ? param(tr, "k_proj.bias", 1, kvd, GCKPT_ROLE_BIAS) : -1;
        int bv = m->qkv_bias ? param(tr, "v_proj.bias", 1, kvd, GCKPT_ROLE_BIAS) : -1;
        bo = m->o_bias ? param(tr, "o_proj.bias", 1, h, GCKPT_ROLE_BIAS) : -1;
        bool late_norms = m->qk_norm_late; /* Gemma 3 */
        q = lora_linear(tr, n1, wq, bq, h, qd, GCKPT_LT_Q, false);
        if (m->qk_norm && !late_norms) q = rmsnorm(tr, q, hd, "q_norm");
        if (m->qk_norm_full) q = rmsnorm(tr, q, qd, "q_norm");
        kk = lora_linear(tr, n1, wk, bk, h, kvd, GCKPT_LT_K, false);
        if (m->qk_norm && !late_norms) kk = rmsnorm(tr, kk, hd, "k_norm");
        if (m->qk_norm_full) kk = rmsnorm(tr, kk, kvd, "k_norm");
        v = lora_linear(tr, n1, wv, bv, h, kvd, GCKPT_LT_V, false);
        if (m->qk_norm && late_norms) {
            q = rmsnorm(tr, q, hd, "q_norm");
            kk = rmsnorm(tr, kk, hd, "k_norm");
        }
    }
    if (!tr->no_rope) { /* SmolLM3's NoPE layers skip apply_rotary_pos_emb */
        int qp = q, kp = kk;
        if (m->rope_interleave) rope_table_pairs(tr, &cos, &sin); /* GLM */
        q = rotary_of(tr, q, cos, sin, "rope_q");
        kk = rotary_of(tr, kk, cos, sin, "rope_k");
        hold_here(tr, qp); /* apply_rotary_pos_emb's arguments (GLM: and its tables) until it returns */
        hold_here(tr, kp);
        if (m->rope_interleave) {
            hold_here(tr, cos);
            hold_here(tr, sin);
        }
    }
    if (m->kv_cache) { /* cache.update: attention reads the cache's copies, the originals go */
        kk = kv_cache_copy(tr, kk, "cache.keys");
        v = kv_cache_copy(tr, v, "cache.values");
    }
    int weights = -1;
    int a = attn == GCKPT_SDPA ? attention_sdpa(tr, q, kk, v, m->attn_dropout)
                               : attention_eager(tr, q, kk, v, tr->r->mask, m->attn_dropout, &weights);
    /* SDPA's output follows q's layout: [b, heads, s, hd]-contiguous when q is a cat's
     * output (Phi-3), so reshape(...).contiguous() copies it: the same values, and the
     * executors' SDPA already writes [b, s, heads * hd], so a plain copy (CAST) there */
    if (attn == GCKPT_SDPA && m->rope_split_cat) {
        a = transpose_copy(tr, a, "attn_output.contiguous");
        last_op(tr)->prim = GCKPT_P_CAST;
    }
    int ao = lora_linear(tr, a, wo, bo, qd, h, GCKPT_LT_O, false);
    /* LlamaAttention.forward returns: its argument and query/key/value_states go; the
     * decoder layer keeps the returned attention weights (`_`) until it returns */
    hold_here(tr, n1);
    hold_here(tr, q);
    hold_here(tr, kk);
    hold_here(tr, v);
    hold_here(tr, qkv);
    hold(tr, weights, HOLD_END);
    tr->pfx = "";
    return ao;
}

/* Phi3MLP: gate, up = gate_up_proj(x).chunk(2); down_proj(up * silu(gate)). */
static int phi3_mlp(tracer *tr, int n2)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, I = m->intermediate;
    tr->pfx = "mlp";
    int wgu = linear_weight(tr, "gate_up_proj.weight", 2 * I, h, false);
    int wd = linear_weight(tr, "down_proj.weight", h, I, false);
    int gu = lora_linear(tr, n2, wgu, -1, h, 2 * I, GCKPT_LT_GATE_UP, false);
    int g = slice_of(tr, gu, 0, I, "gate"), u = slice_of(tr, gu, 1, I, "up");
    int act = unary(tr, g, "silu", false, GCKPT_P_SILU, 0);
    int p = mul(tr, u, act, "mul");
    int dn = lora_linear(tr, p, wd, -1, I, h, GCKPT_LT_DOWN, false);
    hold_here(tr, gu);
    hold_here(tr, n2);
    tr->pfx = "";
    return dn;
}

/* use_liger_kernel=True (--loss liger) on a type whose SwiGLU liger replaces (families.h
 * liger_swiglu): LigerSwiGLUMLP, which has no biases (an mlp_bias model is planned with
 * transformers' ops) and takes silu only */
static bool liger_swiglu(tracer *tr)
{
    const gckpt_model_type_info *ty = NULL;
    return liger_kernel_on(tr, GCKPT_LK_SWIGLU) && !tr->m->mlp_bias && tr->m->act == GCKPT_ACT_SILU &&
           gckpt_family_by_type(tr->m->model_type, &ty) && ty && ty->liger_swiglu;
}

/* LigerSiLUMulFunction.apply(a, b): one output, a and b saved (FINDINGS R-LOSS-5) */
static int liger_silu_mul(tracer *tr, int a, int b)
{
    int o = like(tr, "liger_swiglu", a, dt(tr, a), rg(tr, a) || rg(tr, b));
    opnew(tr, "liger_swiglu", GCKPT_OP_ELEM, 2, (int[]){a, b}, o, -1, 2, (int[]){a, b});
    setprim(tr, GCKPT_P_SWIGLU, GCKPT_BC_NONE, 0, 0, 0);
    last_op(tr)->grad_into_in = 3; /* swiglu_backward writes da into a, db into b */
    return o;
}

/* LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)); holds its argument until it returns. */
int swiglu_mlp(tracer *tr, int n2, const char *pfx, uint64_t inter)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, I = inter;
    const char *outer = tr->pfx;
    tr->pfx = pfx;
    int wg = linear_weight(tr, "gate_proj.weight", I, h, false), wu = linear_weight(tr, "up_proj.weight", I, h, false);
    int wd = linear_weight(tr, "down_proj.weight", h, I, false);
    int bg = m->mlp_bias ? param(tr, "gate_proj.bias", 1, I, GCKPT_ROLE_BIAS) : -1;
    int bu = m->mlp_bias ? param(tr, "up_proj.bias", 1, I, GCKPT_ROLE_BIAS) : -1;
    int bd = m->mlp_bias ? param(tr, "down_proj.bias", 1, h, GCKPT_ROLE_BIAS) : -1;
    int g = lora_linear(tr, n2, wg, bg, h, I, GCKPT_LT_GATE, false), gu;
    if (liger_swiglu(tr)) {
        int u = lora_linear(tr, n2, wu, bu, h, I, GCKPT_LT_UP, false);
        gu = liger_silu_mul(tr, g, u);
    } else {
        int act = m->act == GCKPT_ACT_GELU_TANH ? unary(tr, g, "gelu", false, GCKPT_P_GELU, 1.0)
                                                : unary(tr, g, "silu", false, GCKPT_P_SILU, 0);
        int u = lora_linear(tr, n2, wu, bu, h, I, GCKPT_LT_UP, false);
        gu = mul(tr, act, u, "mul");
    }
    int dn = lora_linear(tr, gu, wd, bd, I, h, GCKPT_LT_DOWN, false);
    hold_here(tr, n2);
    tr->pfx = outer;
    return dn;
}

/* The residual sum of a sublayer's output y (Granite: residual + y * multiplier). */
static int residual_add(tracer *tr, int res, int y, const char *name)
{
    if (tr->m->multipliers) y = scal(tr, y, "residual_multiplier", tr->m->residual_multiplier, 0);
    y = dropout(tr, y, tr->m->resid_dropout, "resid_dropout"); /* Phi-3's resid_pdrop (0 elsewhere) */
    return add(tr, res, y, name);
}

/* One decoder layer of block type `type` (LlamaDecoderLayer; Gemma 2/3: norms after
 * attention and the MLP too; OLMo 2: only those): the caller holds its input, `residual`
 * the residual sums, until it returns. */
static void llama_block(tracer *tr, gckpt_attention attn, int type, int cos, int sin)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden;
    block_begin(tr, type);
    int xin = tnew(tr, "hidden_states", GCKPT_T_ACT, tr->stream_dt, per_token(h), !tr->block_in_frozen);
    hold(tr, xin, HOLD_END);
    int n1 = m->post_norms_only ? xin : rmsnorm(tr, xin, h, "input_layernorm");
    int ao = m->mla ? mla_attention(tr, attn, n1, cos, sin) : llama_attention(tr, attn, n1, cos, sin);
    /* the norms' names: llama's, Gemma 2's sandwich, GLM-4's */
    bool glm = m->glm_norms;
    if (m->sandwich_norms || m->post_norms_only)
        ao = rmsnorm(tr, ao, h, glm ? "post_self_attn_layernorm" : "post_attention_layernorm");
    int h1 = residual_add(tr, xin, ao, "residual_attn");
    hold(tr, h1, HOLD_END);
    int n2 = m->post_norms_only ? h1
             : rmsnorm(tr, h1, h, m->sandwich_norms && !glm ? "pre_feedforward_layernorm" : "post_attention_layernorm");
    int dn = type == GCKPT_BLOCK_DENSE_MLP ? swiglu_mlp(tr, n2, "mlp", m->intermediate)
             : m->experts                  ? moe_block(tr, n2)
             : m->fused_gate_up            ? phi3_mlp(tr, n2)
                                           : swiglu_mlp(tr, n2, "mlp", m->intermediate);
    if (m->sandwich_norms || m->post_norms_only)
        dn = rmsnorm(tr, dn, h, glm ? "post_mlp_layernorm" : "post_feedforward_layernorm");
    block_end(tr, xin, residual_add(tr, h1, dn, "residual_mlp"));
}

void trace_llama(tracer *tr, gckpt_attention attn)
{
    int cos, sin;
    int table = llama_embedding(tr, attn, &cos, &sin);
    /* a block section per layer type (Gemma 3, Qwen2/3 with max_window_layers under SDPA
     * at seq >= window: masked sliding layers and causal full ones) */
    uint8_t types[GCKPT_NBLOCK];
    for (int k = 0, n = block_types(tr, types); k < n; k++) {
        if (types[k] == GCKPT_BLOCK_CROSS)
            mllama_cross_block(tr);
        else
            llama_block(tr, attn, types[k], cos, sin);
    }
    trace_head(tr, NORM_RMS, "norm", table);
}
