/* The config readers of the mixture-of-experts families transformers 5.24 trains with
 * the grouped_mm experts: mixtral, qwen3_moe, olmoe, gpt_oss. Keys and defaults are those
 * of configuration_<family>.py (FINDINGS R-MOE-1, R-FAM-15); a key that changes memory and
 * is not modelled (mixed dense / sparse layers, router jitter, clipped q/k/v, sliding
 * windows) is an error naming it; output_router_logits turns on the load-balancing loss
 * (recipe_moe.c, FINDINGS R-MOE-4). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gckpt/util/safe_text.h"
#include "model_parse.h"

/* The expert count: each class reads one key and maps the other to it (attribute_map:
 * mixtral num_experts -> num_local_experts, qwen3_moe / olmoe the reverse). */
static bool expert_count(const char *f, const cJSON *j, gckpt_model *m, const char *key, const char *alias,
                         uint64_t dflt, gckpt_err *err)
{
    uint64_t a = 0, b = 0;
    if (!gckpt_json_u64_opt(j, f, key, 1, 1u << 16, dflt, &a, err) ||
        !gckpt_json_u64_opt(j, f, alias, 1, 1u << 16, a, &b, err))
        return false;
    if (!gckpt_json_absent(j, key) && a != b) {
        gckpt_seterr(err, "%s: field '%s' = %llu contradicts '%s' = %llu", f, alias, (unsigned long long)b, key,
                     (unsigned long long)a);
        return false;
    }
    m->experts = gckpt_json_absent(j, key) ? b : a;
    return true;
}

/* A number that must be 0 (or absent / null) because another value is not modelled. */
static bool refuse_nonzero(const char *f, const cJSON *j, const gckpt_model *m, const char *key, gckpt_err *err)
{
    double v = 0;
    if (gckpt_json_absent(j, key)) return true;
    if (!gckpt_json_num(j, f, key, -1e9, 1e9, &v, err)) return false;
    if (v != 0) gckpt_seterr(err, "%s: field '%s' = %g is not modelled for %s", f, key, v, m->model_type);
    return v == 0;
}

/* gpt_oss (GptOssConfig, 5.24): attention sinks and q/k/v/o biases (attention_bias,
 * default true), the router's bias, the experts' biases and clamped SwiGLU (swiglu_alpha
 * 1.702, swiglu_limit 7.0), layer_types (default: sliding at even indices) over
 * sliding_window 128 (null: every forward raises in create_sliding_window_causal_mask). */
/* GptOssConfig's rope_parameters (or the legacy rope_scaling; neither: YaRN with factor 32
 * over 4096 positions, beta_fast 32, beta_slow 1, truncate false; rope_theta 150000 where
 * none is given): "default", or "yarn" read as transformers 5.24's _compute_yarn_parameters
 * reads them (beta_fast / beta_slow 0 or absent: 32 / 1; truncate absent: true;
 * attention_factor absent: 0.1 ln(factor) + 1, or the mscale / mscale_all_dim ratio);
 * another type is kept by name (rope_other) */
static double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

static bool parse_rope_gpt_oss(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    const char *key = "rope_parameters";
    if (!cJSON_IsObject(rp)) {
        rp = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
        key = "rope_scaling";
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters"); /* where parse_common reads it */
    bool theta_given = !gckpt_json_absent(j, "rope_theta") || (cJSON_IsObject(params) && !gckpt_json_absent(params, "rope_theta"));
    if (!theta_given) m->rope_theta = 150000; /* GptOssConfig.default_theta */
    if (!cJSON_IsObject(rp)) {
        m->yarn.on = true;
        m->yarn.factor = 32;
        m->yarn.beta_fast = 32;
        m->yarn.beta_slow = 1;
        m->yarn.original_max = 4096;
        m->yarn.truncate = false;
        m->yarn.attention_factor = yarn_mscale(32, 1);
        return true;
    }
    char type[32], field[64];
    const char *tkey = gckpt_json_absent(rp, "rope_type") && !gckpt_json_absent(rp, "type") ? "type" : "rope_type";
    snprintf(field, sizeof field, "%s.%s", key, tkey);
    if (!gckpt_json_str_opt(rp, f, field, "default", type, sizeof type, err)) return false;
    if (!strcmp(type, "default")) return true;
    if (strcmp(type, "yarn")) {
        gckpt_text_sanitize(type);
        snprintf(m->rope_other, sizeof m->rope_other, "%s", type);
        return true;
    }
    m->yarn.on = true;
    double mscale = 0, mscale_all = 0;
    snprintf(field, sizeof field, "%s.factor", key);
    if (!gckpt_json_num(rp, f, field, 1, 1e6, &m->yarn.factor, err)) return false;
    snprintf(field, sizeof field, "%s.original_max_position_embeddings", key);
    if (!gckpt_json_num(rp, f, field, 1, 1e12, &m->yarn.original_max, err)) return false;
    snprintf(field, sizeof field, "%s.beta_fast", key);
    if (!gckpt_json_num_opt(rp, f, field, 0, 1e9, 32, &m->yarn.beta_fast, err)) return false;
    snprintf(field, sizeof field, "%s.beta_slow", key);
    if (!gckpt_json_num_opt(rp, f, field, 0, 1e9, 1, &m->yarn.beta_slow, err)) return false;
    snprintf(field, sizeof field, "%s.truncate", key);
    if (!gckpt_json_bool_opt(rp, f, field, true, &m->yarn.truncate, err)) return false;
    snprintf(field, sizeof field, "%s.mscale", key);
    if (!gckpt_json_num_opt(rp, f, field, 0, 1e9, 0, &mscale, err)) return false;
    snprintf(field, sizeof field, "%s.mscale_all_dim", key);
    if (!gckpt_json_num_opt(rp, f, field, 0, 1e9, 0, &mscale_all, err)) return false;
    if (m->yarn.beta_fast == 0) m->yarn.beta_fast = 32; /* `or 32` */
    if (m->yarn.beta_slow == 0) m->yarn.beta_slow = 1;
    double af = mscale && mscale_all ? yarn_mscale(m->yarn.factor, mscale) / yarn_mscale(m->yarn.factor, mscale_all)
                                     : yarn_mscale(m->yarn.factor, 1);
    snprintf(field, sizeof field, "%s.attention_factor", key);
    return gckpt_json_num_opt(rp, f, field, 1e-9, 1e9, af, &m->yarn.attention_factor, err);
}

static bool parse_gpt_oss(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    if (!parse_rope_gpt_oss(f, j, m, err)) return false;
    if (!gckpt_json_bool_opt(j, f, "attention_bias", true, &m->qkv_bias, err) ||
        !gckpt_json_num_opt(j, f, "swiglu_alpha", 0, 1e9, 1.702, &m->swiglu_alpha, err) ||
        !gckpt_json_num_opt(j, f, "swiglu_limit", 1e-30, 1e30, 7.0, &m->swiglu_limit, err))
        return false;
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "sliding_window"))) {
        gckpt_seterr(err, "%s: field 'sliding_window' = null is not modelled for gpt_oss (transformers raises a "
                          "ValueError building its sliding-window mask)", f);
        return false;
    }
    bool listed = false;
    if (!gckpt_json_u64_opt(j, f, "sliding_window", 1, MAX_LIMIT, 128, &m->sliding_window, err) ||
        !gckpt_parse_layer_types(f, j, m, &listed, err))
        return false;
    for (uint64_t i = 0; !listed && i < m->layers; i += 2) gckpt_set_sliding(m, i);
    /* the Hub checkpoint's MXFP4 experts: training loads them dequantized to the model's
     * dtype (FINDINGS R-QUANT-17), which the plan counts; another method is not modelled */
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
    if (q && !cJSON_IsNull(q)) {
        char method[32];
        if (!cJSON_IsObject(q)) {
            gckpt_seterr(err, "%s: field 'quantization_config' must be an object, got %s", f, gckpt_json_type_name(q));
            return false;
        }
        if (!gckpt_json_str(q, f, "quantization_config.quant_method", method, sizeof method, err)) return false;
        if (strcmp(method, "mxfp4")) {
            gckpt_text_sanitize(method);
            gckpt_seterr(err, "%s: field 'quantization_config.quant_method' = \"%s\" is not modelled for gpt_oss (mxfp4, "
                              "trained dequantized)", f, method);
            return false;
        }
        m->mxfp4_checkpoint = true;
    }
    m->o_bias = m->qkv_bias;
    m->rms = GCKPT_RMS_F32_OUT; /* (self.weight * hidden_states).to(input_dtype) */
    m->attn_sinks = m->rope_halves = m->router_bias = m->topk_first = m->expert_bias = true;
    return true;
}

bool gckpt_parse_moe(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    const char *t = m->model_type;
    bool mixtral = !strcmp(t, "mixtral"), qwen = !strcmp(t, "qwen3_moe"), oss = !strcmp(t, "gpt_oss");
    /* class defaults (AutoConfig.for_model, 5.24): kv heads 8 / 4 / 16 / 8, eps 1e-5 /
     * 1e-6 / 1e-5 / 1e-5, positions 131072 / 32768 / 4096 / 131072, intermediate 14336 /
     * 6144 / 2048 / 2880, vocab 32000 / 151936 / 50304 / 201088, rope_theta 1e6 / 1e4 / 1e4
     * (gpt_oss: parse_rope_gpt_oss); head_dim absent ->
     * hidden / heads in the first three, 64 in gpt_oss (whose __post_init__ turns a null
     * head_dim into hidden / heads and null kv heads into heads) */
    gckpt_cfg_defaults d = mixtral ? (gckpt_cfg_defaults){8, 0, false, 1e-5, 131072, "hidden_act", "silu", 14336, 32000, 1e6}
                           : qwen  ? (gckpt_cfg_defaults){4, 0, false, 1e-6, 32768, "hidden_act", "silu", 6144, 151936}
                           : oss   ? (gckpt_cfg_defaults){8, 64, false, 1e-5, 131072, "hidden_act", "silu", 2880, 201088}
                                   : (gckpt_cfg_defaults){16, 0, false, 1e-5, 4096, "hidden_act", "silu", 2048, 50304};
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(j, "num_key_value_heads");
    if (oss && cJSON_IsNull(kv)) d.kv_heads = 0;
    if (oss && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "head_dim"))) d.head_dim = 0;
    if (!gckpt_parse_common(f, j, m, &d, err)) return false;
    /* GptOssExperts applies its own gate (no act_fn): hidden_act is read by nothing */
    if (!oss && m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act': %s is modelled with silu (SwiGLU experts) only", f, t);
        return false;
    }
    bool bias = false, renorm = mixtral, local = mixtral || oss; /* num_local_experts is the class's key */
    if (!expert_count(f, j, m, local ? "num_local_experts" : "num_experts", local ? "num_experts" : "num_local_experts",
                      mixtral ? 8 : qwen || oss ? 128 : 64, err) ||
        !gckpt_json_u64_opt(j, f, "num_experts_per_tok", 1, 1u << 16, mixtral ? 2 : oss ? 4 : 8, &m->top_k, err) ||
        !gckpt_json_num_opt(j, f, "router_aux_loss_coef", 0, 1e9, mixtral || qwen || oss ? 0.001 : 0.01,
                            &m->router_aux_coef, err) ||
        (!local && !gckpt_json_bool_opt(j, f, "norm_topk_prob", false, &renorm, err)) ||
        (!local && !gckpt_json_bool_opt(j, f, "attention_bias", false, &bias, err)) ||
        !gckpt_json_bool_opt(j, f, "output_router_logits", false, &m->router_aux_loss, err))
        return false;
    if (m->top_k > m->experts) {
        gckpt_seterr(err, "%s: field 'num_experts_per_tok' = %llu exceeds the %llu experts", f,
                     (unsigned long long)m->top_k, (unsigned long long)m->experts);
        return false;
    }
    m->expert_inter = m->intermediate;
    m->topk_renorm = renorm;
    m->topk_weights_f32 = mixtral;
    m->qkv_bias = m->o_bias = bias;
    if (oss) return parse_gpt_oss(f, j, m, err);
    if (mixtral) {
        /* MixtralSparseMoeBlock multiplies the input by uniform noise in training; a
         * window masks every layer (not planned for MoE) */
        if (!refuse_nonzero(f, j, m, "router_jitter_noise", err)) return false;
        if (!gckpt_json_absent(j, "sliding_window")) {
            gckpt_seterr(err, "%s: field 'sliding_window' is not modelled for mixtral (null: no window)", f);
            return false;
        }
    } else if (qwen) {
        /* layers in mlp_only_layers, or with (i + 1) % decoder_sparse_step != 0, are dense */
        uint64_t step = 1;
        if (!gckpt_json_u64_opt(j, f, "moe_intermediate_size", 1, MAX_INTER, 768, &m->expert_inter, err) ||
            !gckpt_json_u64_opt(j, f, "decoder_sparse_step", 1, MAX_LAYERS, 1, &step, err) ||
            !gckpt_refuse_true(f, j, m, "use_sliding_window", err))
            return false;
        if (step != 1) {
            gckpt_seterr(err, "%s: field 'decoder_sparse_step' = %llu is not modelled (dense and sparse layers mixed)", f,
                         (unsigned long long)step);
            return false;
        }
        const cJSON *dense = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        if (dense && !cJSON_IsNull(dense) && (!cJSON_IsArray(dense) || cJSON_GetArraySize(dense) > 0)) {
            gckpt_seterr(err, "%s: field 'mlp_only_layers' is not modelled unless empty (dense and sparse layers mixed)", f);
            return false;
        }
        m->qk_norm = true;
    } else {
        /* OlmoeAttention: q_norm over hidden_size, k_norm over (hidden / heads) * kv heads;
         * clip_qkv clamps q, k, v in place */
        if (!refuse_nonzero(f, j, m, "clip_qkv", err)) return false;
        if (gckpt_q_dim(m) != m->hidden) {
            gckpt_seterr(err, "%s: field 'head_dim' = %llu: olmoe's q_norm is hidden_size wide, heads x head_dim must "
                              "equal it", f, (unsigned long long)m->head_dim);
            return false;
        }
        m->qk_norm_full = true;
    }
    return true;
}
