/* The config readers of issue 13's dense families: gemma, gemma2, gemma3_text, phi3,
 * gpt_neox, olmo2, granite, smollm3, glm4. Keys and defaults are those of transformers 5.24's
 * configuration_<family>.py and what its modeling_<family>.py reads (FINDINGS
 * R-FAM-7); a key that changes memory and is not modelled is an error naming it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_parse.h"

bool gckpt_json_absent(const cJSON *j, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    return !x || cJSON_IsNull(x);
}

/* A key that must be false (or absent) because its true value is not modelled. */
bool gckpt_refuse_true(const char *f, const cJSON *j, const gckpt_model *m, const char *key, gckpt_err *err)
{
    bool v = false;
    if (!gckpt_json_bool_opt(j, f, key, false, &v, err)) return false;
    if (v) gckpt_seterr(err, "%s: field '%s' = true is not modelled for %s", f, key, m->model_type);
    return !v;
}

bool gckpt_parse_common(const char *f, const cJSON *j, gckpt_model *m, const gckpt_cfg_defaults *d, gckpt_err *err)
{
    bool eps_ln = d->neox_keys;
    if (!gckpt_json_u64(j, f, "num_hidden_layers", 1, MAX_LAYERS, &m->layers, err) ||
        !gckpt_json_u64(j, f, "hidden_size", 1, MAX_HIDDEN, &m->hidden, err) ||
        !gckpt_json_u64(j, f, "num_attention_heads", 1, MAX_HEADS, &m->heads, err) ||
        !(d->inter ? gckpt_json_u64_opt(j, f, "intermediate_size", 1, MAX_INTER, d->inter, &m->intermediate, err)
                   : gckpt_json_u64(j, f, "intermediate_size", 1, MAX_INTER, &m->intermediate, err)) ||
        !(d->vocab ? gckpt_json_u64_opt(j, f, "vocab_size", 1, MAX_VOCAB, d->vocab, &m->vocab, err)
                   : gckpt_json_u64(j, f, "vocab_size", 1, MAX_VOCAB, &m->vocab, err)) ||
        !gckpt_json_bool_opt(j, f, "tie_word_embeddings", d->tied, &m->tied, err) ||
        !gckpt_json_num_opt(j, f, "attention_dropout", 0, 0.999999, 0, &m->attn_dropout, err) ||
        !gckpt_json_num_opt(j, f, eps_ln ? "layer_norm_eps" : "rms_norm_eps", 1e-30, 1, d->eps, &m->norm_eps, err) ||
        !gckpt_json_u64_opt(j, f, "max_position_embeddings", 1, MAX_LIMIT, d->positions, &m->max_positions, err))
        return false;
    /* gpt_neox is multi-head only (no kv key read); the others default as their class */
    m->kv_heads = m->heads;
    if (!d->neox_keys &&
        !gckpt_json_u64_opt(j, f, "num_key_value_heads", 1, MAX_HEADS, d->kv_heads ? d->kv_heads : m->heads,
                            &m->kv_heads, err))
        return false;
    /* head_dim: a field of the gemma classes (default 256); the others take
     * getattr(config, "head_dim", hidden // heads) (gpt_neox: always hidden // heads) */
    bool own_hd = !d->neox_keys && (d->head_dim || !gckpt_json_absent(j, "head_dim"));
    if (!own_hd && m->hidden % m->heads) {
        gckpt_seterr(err, "%s: field 'hidden_size' = %llu is not divisible by 'num_attention_heads' = %llu", f,
                     (unsigned long long)m->hidden, (unsigned long long)m->heads);
        return false;
    }
    m->head_dim = m->hidden / m->heads;
    if (own_hd && !gckpt_json_u64_opt(j, f, "head_dim", 1, MAX_HEAD_DIM, d->head_dim ? d->head_dim : m->head_dim,
                                      &m->head_dim, err))
        return false;
    char act[32];
    if (!gckpt_json_str_opt(j, f, d->act_key, d->act, act, sizeof act, err) ||
        !gckpt_parse_act(f, d->act_key, act, &m->act, err))
        return false;
    return gckpt_parse_rope_theta(f, j, d->neox_keys ? "rotary_emb_base" : "rope_theta",
                                  d->theta ? d->theta : 10000, &m->rope_theta, err);
}

/* partial_rotary_factor: rope_parameters' value wins, else the legacy key (phi3
 * partial_rotary_factor, gpt_neox rotary_pct), else the class default; the rotary
 * modules use int(head_dim * factor) dims. */
static bool rotary(const char *f, const cJSON *j, gckpt_model *m, const char *legacy, double dflt, gckpt_err *err)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    double factor = dflt;
    if (cJSON_IsObject(rp) && !gckpt_json_absent(rp, "partial_rotary_factor")) {
        if (!gckpt_json_num(rp, f, "partial_rotary_factor", 0, 1, &factor, err)) return false;
    } else if (!gckpt_json_num_opt(j, f, legacy, 0, 1, dflt, &factor, err)) {
        return false;
    }
    m->rotary_dim = (uint64_t)((double)m->head_dim * factor);
    if (m->rotary_dim % 2 || m->rotary_dim == 0) {
        gckpt_seterr(err, "%s: field '%s' = %g gives %llu rotary dims of head_dim %llu (an even number above 0 is "
                          "needed)", f, legacy, factor, (unsigned long long)m->rotary_dim,
                     (unsigned long long)m->head_dim);
        return false;
    }
    return true;
}

/* A soft-capping value: absent takes the default, null turns it off. */
static bool softcap(const char *f, const cJSON *j, const char *key, double dflt, double *out, gckpt_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (x && cJSON_IsNull(x)) {
        *out = 0;
        return true;
    }
    return gckpt_json_num_opt(j, f, key, 1e-6, 1e9, dflt, out, err);
}

/* The sliding window of gemma2 / gemma3_text (default 4096; null is not modelled: the
 * sliding layers' mask function needs a window). */
static bool window(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "sliding_window"))) {
        gckpt_seterr(err, "%s: field 'sliding_window' = null is not modelled for %s (a window is needed by its sliding "
                          "layers)", f, m->model_type);
        return false;
    }
    return gckpt_json_u64_opt(j, f, "sliding_window", 1, MAX_LIMIT, 4096, &m->sliding_window, err);
}

/* The rope_theta of one layer type's entry of Gemma 3's rope_parameters, else the legacy
 * top-level key, else the class default (configuration_gemma3.py 5.24,
 * convert_rope_params_to_dict: full_attention from rope_theta, default 1e6;
 * sliding_attention from rope_local_base_freq, default 1e4). */
static bool theta_of(const char *f, const cJSON *j, const char *type, const char *legacy, double dflt, double *out,
                     gckpt_err *err)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    const cJSON *e = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, type) : NULL;
    if (cJSON_IsObject(e) && !gckpt_json_absent(e, "rope_theta")) return gckpt_json_num(e, f, "rope_theta", 1, 1e12, out, err);
    return gckpt_json_num_opt(j, f, legacy, 1, 1e12, dflt, out, err);
}

static bool gemma3_thetas(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    return theta_of(f, j, "full_attention", "rope_theta", 1e6, &m->rope_theta, err) &&
           theta_of(f, j, "sliding_attention", "rope_local_base_freq", 1e4, &m->rope_local_theta, err);
}

bool gckpt_parse_gemma(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    const char *t = m->model_type;
    bool g1 = !strcmp(t, "gemma"), g3 = !strcmp(t, "gemma3_text");
    /* Gemma 1 reads hidden_act ("gelu" is rewritten to the tanh form); 2 and 3 read
     * hidden_activation and ignore hidden_act */
    gckpt_cfg_defaults d = {g1 ? 16 : 4, 256, true, 1e-6, g3 ? 131072 : 8192, g1 ? "hidden_act" : "hidden_activation",
                  "gelu_pytorch_tanh"};
    if (!gckpt_parse_common(f, j, m, &d, err)) return false;
    if (g1 && m->act == GCKPT_ACT_GELU) m->act = GCKPT_ACT_GELU_TANH;
    if (m->act != GCKPT_ACT_GELU_TANH) {
        gckpt_seterr(err, "%s: field '%s': %s is modelled with gelu_pytorch_tanh only", f, d.act_key, t);
        return false;
    }
    bool bias = false;
    if (!gckpt_json_bool_opt(j, f, "attention_bias", false, &bias, err)) return false;
    m->qkv_bias = m->o_bias = bias;
    m->rms = GCKPT_RMS_GEMMA;
    m->embed_scale = true;
    m->qk_norm_late = true; /* Gemma 3 (the only one with q/k norms) */
    if (g1) return true;
    m->sandwich_norms = m->both_masks = true;
    if (!window(f, j, m, err) ||
        !gckpt_json_num_opt(j, f, "query_pre_attn_scalar", 1e-6, 1e12, 256, &m->query_pre_attn_scalar, err))
        return false;
    bool listed = false;
    if (!gckpt_parse_layer_types(f, j, m, &listed, err)) return false;
    if (g3) {
        /* Gemma3Attention passes no softcap (attn_logit_softcapping is ignored); layers
         * without layer_types: sliding unless (i + 1) % sliding_window_pattern == 0 */
        uint64_t pattern = 6;
        if (!softcap(f, j, "final_logit_softcapping", 0, &m->final_softcap, err) ||
            !gckpt_json_u64_opt(j, f, "sliding_window_pattern", 1, MAX_LAYERS, 6, &pattern, err) ||
            !gckpt_refuse_true(f, j, m, "use_bidirectional_attention", err))
            return false;
        for (uint64_t i = 0; !listed && i < m->layers; i++)
            if ((i + 1) % pattern) gckpt_set_sliding(m, i);
        m->qk_norm = true;
        m->rope_tables = m->sliding_layers && m->sliding_layers < m->layers ? 2 : 1;
        if (!gemma3_thetas(f, j, m, err)) return false;
    } else {
        if (!softcap(f, j, "attn_logit_softcapping", 50.0, &m->attn_softcap, err) ||
            !softcap(f, j, "final_logit_softcapping", 30.0, &m->final_softcap, err))
            return false;
        for (uint64_t i = 0; !listed && i < m->layers; i++)
            if (i % 2 == 0) gckpt_set_sliding(m, i);
    }
    if (!m->sliding_layers) m->sliding_window = 0;
    return true;
}

bool gckpt_parse_phi3(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    gckpt_cfg_defaults d = {0, 0, false, 1e-5, 4096, "hidden_act", "silu"};
    if (!gckpt_parse_common(f, j, m, &d, err) ||
        !gckpt_json_num_opt(j, f, "resid_pdrop", 0, 0.999999, 0, &m->resid_dropout, err) ||
        !rotary(f, j, m, "partial_rotary_factor", 1.0, err))
        return false;
    if (m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act': phi3 is modelled with silu (its gate_up MLP) only", f);
        return false;
    }
    /* sliding_window (default None) applies to every layer */
    if (!gckpt_json_u64_opt(j, f, "sliding_window", 1, MAX_LIMIT, 0, &m->sliding_window, err)) return false;
    for (uint64_t i = 0; m->sliding_window && i < m->layers; i++) gckpt_set_sliding(m, i);
    m->fused_qkv = m->fused_gate_up = m->rope_split_cat = true;
    return true;
}

bool gckpt_parse_gpt_neox(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    gckpt_cfg_defaults d = {0, 0, false, 1e-5, 2048, "hidden_act", "gelu", .neox_keys = true};
    bool bias = true, parallel = true;
    double hidden_dropout = 0;
    if (!gckpt_parse_common(f, j, m, &d, err) || !rotary(f, j, m, "rotary_pct", 0.25, err) ||
        !gckpt_json_bool_opt(j, f, "attention_bias", true, &bias, err) ||
        !gckpt_json_bool_opt(j, f, "use_parallel_residual", true, &parallel, err) ||
        !gckpt_json_num_opt(j, f, "hidden_dropout", 0, 0.999999, 0, &hidden_dropout, err))
        return false;
    if (m->act != GCKPT_ACT_GELU && m->act != GCKPT_ACT_GELU_TANH) {
        gckpt_seterr(err, "%s: field 'hidden_act': gpt_neox is modelled with gelu or gelu_pytorch_tanh only", f);
        return false;
    }
    m->qkv_bias = m->o_bias = bias;
    m->mlp_bias = true;
    m->parallel_residual = parallel;
    m->resid_dropout = m->embd_dropout = hidden_dropout;
    return true;
}

bool gckpt_parse_olmo2(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    gckpt_cfg_defaults d = {0, 0, false, 1e-5, 2048, "hidden_act", "silu"};
    bool bias = false;
    if (!gckpt_parse_common(f, j, m, &d, err) || !gckpt_json_bool_opt(j, f, "attention_bias", false, &bias, err)) return false;
    if (m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act': olmo2 is modelled with silu (SwiGLU) only", f);
        return false;
    }
    m->qkv_bias = m->o_bias = bias;
    m->rms = GCKPT_RMS_F32_OUT;
    m->post_norms_only = m->qk_norm_full = m->rope_fp32 = true;
    return true;
}

bool gckpt_parse_granite(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    gckpt_cfg_defaults d = {0, 0, false, 1e-6, 2048, "hidden_act", "silu"};
    bool bias = false, mlp_bias = false;
    if (!gckpt_parse_common(f, j, m, &d, err) || !gckpt_json_bool_opt(j, f, "attention_bias", false, &bias, err) ||
        !gckpt_json_bool_opt(j, f, "mlp_bias", false, &mlp_bias, err) ||
        !gckpt_json_num_opt(j, f, "embedding_multiplier", -1e9, 1e9, 1, &m->embedding_multiplier, err) ||
        !gckpt_json_num_opt(j, f, "residual_multiplier", -1e9, 1e9, 1, &m->residual_multiplier, err) ||
        !gckpt_json_num_opt(j, f, "attention_multiplier", -1e9, 1e9, 1, &m->attention_multiplier, err) ||
        !gckpt_json_num_opt(j, f, "logits_scaling", 1e-9, 1e9, 1, &m->logits_scaling, err))
        return false;
    if (m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act': granite is modelled with silu (SwiGLU) only", f);
        return false;
    }
    m->qkv_bias = m->o_bias = bias;
    m->mlp_bias = mlp_bias;
    m->multipliers = true;
    return true;
}

/* SmolLM3's NoPE layers (configuration_smollm3.py 5.24, FINDINGS R-FAM-16): no_rope_layers[i]
 * 1 is a rotary layer, 0 a NoPE one (SmolLM3Attention.use_rope = no_rope_layers[layer_idx]);
 * at least num_hidden_layers entries (the class indexes the first ones); absent or null:
 * layer i is NoPE where (i + 1) % no_rope_layer_interval == 0 (default 4). */
static bool nope_layers(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(j, "no_rope_layers");
    if (!nl || cJSON_IsNull(nl)) {
        uint64_t every = 4;
        if (!gckpt_json_u64_opt(j, f, "no_rope_layer_interval", 1, MAX_LAYERS, 4, &every, err)) return false;
        for (uint64_t i = 0; i < m->layers; i++)
            if ((i + 1) % every == 0) gckpt_set_nope(m, i);
        return true;
    }
    if (!cJSON_IsArray(nl)) {
        gckpt_seterr(err, "%s: field 'no_rope_layers' must be an array of 0 / 1, got %s", f, gckpt_json_type_name(nl));
        return false;
    }
    if ((uint64_t)cJSON_GetArraySize(nl) < m->layers) {
        gckpt_seterr(err, "%s: field 'no_rope_layers' has %d entries, 'num_hidden_layers' is %llu", f,
                     cJSON_GetArraySize(nl), (unsigned long long)m->layers);
        return false;
    }
    uint64_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, nl) {
        if (!cJSON_IsNumber(x) || (x->valuedouble != 0 && x->valuedouble != 1)) {
            gckpt_seterr(err, "%s: field 'no_rope_layers'[%llu] must be 0 (NoPE) or 1 (rotary)", f,
                         (unsigned long long)i);
            return false;
        }
        if (i < m->layers && x->valuedouble == 0) gckpt_set_nope(m, i);
        i++;
    }
    return true;
}

bool gckpt_parse_smollm3(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    /* SmolLM3Config's defaults (those of SmolLM3-3B) */
    gckpt_cfg_defaults d = {4, 0, true, 1e-6, 32768, "hidden_act", "silu", 11008, 128256, 2e6};
    bool bias = false, mlp_bias = false;
    if (!gckpt_parse_common(f, j, m, &d, err) || !gckpt_json_bool_opt(j, f, "attention_bias", false, &bias, err) ||
        !gckpt_json_bool_opt(j, f, "mlp_bias", false, &mlp_bias, err) || !nope_layers(f, j, m, err) ||
        /* sliding windows go to NoPE layers only (layer_types' default): a masked layer
         * without rotary would be a fourth block type, which no SmolLM3 checkpoint uses */
        !gckpt_refuse_true(f, j, m, "use_sliding_window", err))
        return false;
    if (m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act': smollm3 is modelled with silu (SwiGLU) only", f);
        return false;
    }
    m->qkv_bias = m->o_bias = bias;
    m->mlp_bias = mlp_bias;
    return true;
}

/* GLM-4-0414 (configuration_glm4.py / modular_glm4.py 5.24, FINDINGS R-FAM-17): llama's
 * reader with Glm4Config's defaults (head_dim a field, 128), Phi-3's gate_up MLP and
 * partial rotary (rope_parameters' or the legacy partial_rotary_factor, default 0.5, set in
 * __post_init__) rotated as interleaved pairs, q/k/v biases (attention_bias, default True;
 * o_proj has none) and four RMSNorms per layer (the sandwich of Gemma 2, other names). */
bool gckpt_parse_glm4(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    gckpt_cfg_defaults d = {2, 128, false, 1.5625e-7, 131072, "hidden_act", "silu", 13696, 151552, 0};
    bool bias = true;
    if (!gckpt_parse_common(f, j, m, &d, err) || !rotary(f, j, m, "partial_rotary_factor", 0.5, err) ||
        !gckpt_json_bool_opt(j, f, "attention_bias", true, &bias, err))
        return false;
    if (m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act': glm4 is modelled with silu (its gate_up MLP) only", f);
        return false;
    }
    m->qkv_bias = bias;
    m->fused_gate_up = m->rope_split_cat = m->rope_interleave = true;
    m->sandwich_norms = m->glm_norms = true;
    return true;
}
