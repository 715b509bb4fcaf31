/* Llama 3.2 Vision's text cross-attention layer alone (transformers 5.24
 * MllamaCrossAttentionDecoderLayer, FINDINGS R-VLM-31): what it saves for its backward. Its
 * inputs from outside, each one storage every cross-attention layer reads, are the
 * embedding section's sources: cross_attention_states (the projector's output, [images x
 * tiles x (patches + 1)] rows per sample; k_proj and v_proj save it), cross_attention_mask
 * (additive, [b, 1, s, keys] in the model's dtype; SDPA saves it, under autocast its bf16
 * cast) and full_text_row_masked_out_mask ([b, s, 1], the model's dtype). The self-attention
 * layers are recipe_llama.c's. */
#include "recipe_tracer.h"

#include "gckpt/core/vision.h"

#include <stdio.h>
#include <string.h>

/* x * gate.tanh() (a [1] parameter: tanh saves its output, the mul x when the gate trains) */
static int tanh_gate(tracer *tr, int x, const char *name)
{
    int g = param(tr, name, 1, 1, GCKPT_ROLE_BIAS);
    int t = unary(tr, g, "tanh", false, GCKPT_P_TANH, 0);
    return mul(tr, x, t, name);
}

/* The keys per sample: every image's max_num_tiles tiles (padding tiles kept), each its
 * patches and the class token (the encoder's padding rows dropped). */
uint64_t gckpt_mllama_cross_keys(const gckpt_vlm *v, uint64_t images)
{
    uint64_t n = v->vision.patch ? v->vision.image_size / v->vision.patch : 0;
    return images * v->vision.max_tiles * (n * n + 1);
}

void mllama_cross_sources(tracer *tr)
{
    gckpt_recipe *r = tr->r;
    /* the projector's output (under autocast its addmm's bf16), [keys] rows per sample */
    gckpt_shape kv_rows = {GCKPT_ROWS_BATCH, tr->m->cross_keys, tr->m->hidden};
    int states = source(tr, "cross_attention_states", GCKPT_SRC_FEATURES, tr->amp ? tr->compute_dt : tr->param_dt,
                        kv_rows, NULL, NULL);
    r->t[states].requires_grad = true; /* the projector trains (its output's gradient) */
    tr->cross_in[0] = states;
    tr->cross_in[1] = source(tr, "cross_attention_mask", GCKPT_SRC_MASK, tr->param_dt, per_token(tr->m->cross_keys),
                             NULL, NULL);
    tr->cross_in[2] = source(tr, "full_text_row_masked_out_mask", GCKPT_SRC_MASK, tr->param_dt, per_token(1), NULL,
                             NULL);
    for (int k = 0; k < 3; k++) layer_kwarg(tr, tr->cross_in[k]);
}

/* MllamaCrossAttentionDecoderLayer (R-VLM-31) */
void mllama_cross_block(tracer *tr)
{
    gckpt_recipe *r = tr->r;
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, hd = m->head_dim, qd = gckpt_q_dim(m), kvd = gckpt_kv_dim(m);
    int states = tr->cross_in[0], rows = tr->cross_in[2];
    block_begin(tr, GCKPT_BLOCK_CROSS);
    tr->float_mask = tr->cross_in[1];
    int xin = tnew(tr, "hidden_states", GCKPT_T_ACT, tr->stream_dt, per_token(h), !tr->block_in_frozen);
    hold(tr, xin, HOLD_END);
    int n1 = rmsnorm(tr, xin, h, "input_layernorm");
    tr->pfx = "cross_attn";
    int wq = linear_weight(tr, "q_proj.weight", qd, h, false), wk = linear_weight(tr, "k_proj.weight", kvd, h, false);
    int wv = linear_weight(tr, "v_proj.weight", kvd, h, false), wo = linear_weight(tr, "o_proj.weight", h, qd, false);
    /* q_norm / k_norm: RMSNorm over head_dim on the per-head views; v is not normed; no rotary */
    int q = rmsnorm(tr, linear(tr, n1, wq, -1, h, qd, "q_proj"), hd, "q_norm");
    int k = rmsnorm(tr, linear(tr, states, wk, -1, h, kvd, "k_proj"), hd, "k_norm");
    int vv = linear(tr, states, wv, -1, h, kvd, "v_proj");
    if (m->kv_cache) { /* the text model's DynamicCache (training without checkpointing, R-VLM-60) */
        k = kv_cache_copy(tr, k, "cache.keys");
        vv = kv_cache_copy(tr, vv, "cache.values");
    }
    /* a float mask: k and v repeated to every head, the mask saved (sdpa_fused) */
    int a = attention_sdpa(tr, q, k, vv, m->attn_dropout);
    gckpt_op *sd = &r->op[gckpt_recipe_producer(r, a)];
    /* s queries over the keys, nothing skipped: QK^T and PV, 2 x 2 x heads x head_dim per
     * query and key */
    sd->fBSS = 0;
    sd->fT = 4.0 * (double)m->heads * (double)hd * (double)m->cross_keys;
    int ao = linear(tr, a, wo, -1, qd, h, "o_proj");
    hold_here(tr, q);
    hold_here(tr, k);
    hold_here(tr, vv);
    tr->pfx = "";
    int h1 = add(tr, xin, tanh_gate(tr, ao, "cross_attn_attn_gate"), "residual_attn");
    hold(tr, h1, HOLD_END);
    int n2 = rmsnorm(tr, h1, h, "post_attention_layernorm");
    int dn = swiglu_mlp(tr, n2, "mlp", m->intermediate);
    /* full_text_row_masked_out_mask[:, 0] * mlp: saves the mask (under autocast the fp32
     * mask promotes the product) */
    int masked = mul(tr, dn, rows, "full_text_row_masked_out");
    tr->float_mask = -1;
    block_end(tr, xin, add(tr, h1, tanh_gate(tr, masked, "cross_attn_mlp_gate"), "residual_mlp"));
}

void gckpt_mllama_text_model(const gckpt_vlm *v, uint64_t images, gckpt_model *m)
{
    *m = v->text;
    memcpy(m->cross, v->cross, sizeof m->cross);
    m->cross_layers = v->ncross;
    m->cross_keys = gckpt_mllama_cross_keys(v, images);
    m->embed_extra_rows = GCKPT_MLLAMA_EMBED_EXTRA_ROWS;
}

bool gckpt_mllama_cross_recipe_build(const gckpt_vlm *v, gckpt_precision p, gckpt_target target, uint64_t seq,
                                     uint64_t images, gckpt_recipe *r, gckpt_err *err)
{
    if (!v->ncross || !v->vision.max_tiles || !images) {
        gckpt_seterr(err, "%s: no cross_attention_layers or no image: no cross-attention layer to trace",
                     v->model_type);
        return false;
    }
    static gckpt_model m; /* the tracer keeps a pointer to it until recipe_finish */
    gckpt_mllama_text_model(v, images, &m);
    tracer t, *tr = &t;
    tracer_setup(tr, &m, p, GCKPT_SDPA, target, NULL, seq, GCKPT_LOSS_HF, 0, false, r);
    section_begin(tr, GCKPT_SEC_EMBED);
    mllama_cross_sources(tr);
    r->embed_out = -1;
    section_end(tr);
    mllama_cross_block(tr);
    r->loss = -1;
    recipe_finish(r);
    return true;
}
