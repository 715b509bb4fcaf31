/* The config reader of DeepSeek-V3 (DeepseekV3Config, transformers 5.24): multi-head
 * latent attention, dense first layers, routed + shared experts under the grouped sigmoid
 * router (FINDINGS R-MOE-8). Keys and defaults are the class's; a memory-changing value
 * the modelling does not plan is an error naming it. Keys of the Hub's config that
 * transformers 5.24's DeepseekV3 modelling does not read (scoring_func, topk_method,
 * moe_layer_freq, num_nextn_predict_layers: the MTP layer is not built) change nothing. */
#include <stdio.h>
#include <string.h>

#include "model_parse.h"

/* A key of int | None whose None the modelling cannot run (v_head_dim, n_group, ...). */
static bool count_key(const char *f, const cJSON *j, const char *key, uint64_t lo, uint64_t hi, uint64_t dflt,
                      uint64_t *out, gckpt_err *err)
{
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, key))) {
        gckpt_seterr(err, "%s: field '%s' = null is not modelled for deepseek_v3 (the modelling needs a number)", f, key);
        return false;
    }
    return gckpt_json_u64_opt(j, f, key, lo, hi, dflt, out, err);
}

bool gckpt_parse_deepseek(const char *f, const cJSON *j, gckpt_model *m, gckpt_err *err)
{
    /* head_dim: __post_init__ sets it to qk_rope_head_dim whatever the file says (the
     * default here only keeps parse_common from asking hidden / heads) */
    gckpt_cfg_defaults d = {0, 64, false, 1e-6, 4096, "hidden_act", "silu", 18432, 129280, 10000};
    if (!gckpt_parse_common(f, j, m, &d, err)) return false;
    if (m->act != GCKPT_ACT_SILU) {
        gckpt_seterr(err, "%s: field 'hidden_act': deepseek_v3 is modelled with silu (SwiGLU experts) only", f);
        return false;
    }
    if (m->kv_heads != m->heads) { /* kv_b_proj makes every head's k and v: repeat_kv would repeat them again */
        gckpt_seterr(err, "%s: field 'num_key_value_heads' = %llu is not modelled for deepseek_v3 (multi-head latent "
                          "attention: num_attention_heads = %llu)", f, (unsigned long long)m->kv_heads,
                     (unsigned long long)m->heads);
        return false;
    }
    uint64_t shared = 0, im = 0, alias = 0;
    bool bias = false, qnull = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "q_lora_rank"));
    if (!count_key(f, j, "n_routed_experts", 1, 1u << 16, 256, &m->experts, err) ||
        !gckpt_json_u64_opt(j, f, "num_local_experts", 1, 1u << 16, m->experts, &alias, err) ||
        !count_key(f, j, "num_experts_per_tok", 1, 1u << 16, 8, &m->top_k, err) ||
        !gckpt_json_u64_opt(j, f, "n_shared_experts", 0, 1u << 16, 1, &shared, err) ||
        !gckpt_json_u64_opt(j, f, "moe_intermediate_size", 1, MAX_INTER, 2048, &im, err) ||
        !gckpt_json_num_opt(j, f, "routed_scaling_factor", -1e9, 1e9, 2.5, &m->routed_scale, err) ||
        !gckpt_json_u64_opt(j, f, "kv_lora_rank", 1, MAX_HIDDEN, 512, &m->kv_lora_rank, err) ||
        (!qnull && !gckpt_json_u64_opt(j, f, "q_lora_rank", 1, MAX_HIDDEN, 1536, &m->q_lora_rank, err)) ||
        !gckpt_json_u64_opt(j, f, "qk_rope_head_dim", 2, MAX_HEAD_DIM, 64, &m->qk_rope_dim, err) ||
        !count_key(f, j, "v_head_dim", 1, MAX_HEAD_DIM, 128, &m->v_head_dim, err) ||
        !gckpt_json_u64_opt(j, f, "qk_nope_head_dim", 0, MAX_HEAD_DIM, 128, &m->qk_nope_dim, err) ||
        !count_key(f, j, "n_group", 1, 1u << 16, 8, &m->n_group, err) ||
        !count_key(f, j, "topk_group", 1, 1u << 16, 4, &m->topk_group, err) ||
        !count_key(f, j, "first_k_dense_replace", 0, MAX_LAYERS, 3, &m->dense_layers, err) ||
        !gckpt_json_bool_opt(j, f, "norm_topk_prob", true, &m->topk_renorm, err) ||
        !gckpt_json_bool_opt(j, f, "rope_interleave", true, &m->rope_interleave, err) ||
        !gckpt_json_bool_opt(j, f, "attention_bias", false, &bias, err) ||
        !gckpt_json_bool_opt(j, f, "output_router_logits", false, &m->router_logits_out, err))
        return false;
    if (!gckpt_json_absent(j, "n_routed_experts") && alias != m->experts) {
        gckpt_seterr(err, "%s: field 'num_local_experts' = %llu contradicts 'n_routed_experts' = %llu", f,
                     (unsigned long long)alias, (unsigned long long)m->experts);
        return false;
    }
    if (gckpt_json_absent(j, "n_routed_experts")) m->experts = alias;
    if (m->qk_rope_dim % 2) {
        gckpt_seterr(err, "%s: field 'qk_rope_head_dim' = %llu: the rotary part needs an even width", f,
                     (unsigned long long)m->qk_rope_dim);
        return false;
    }
    /* the router: n_group groups of experts / n_group, each scored by its top two */
    if (m->experts % m->n_group || m->experts / m->n_group < 2 || m->topk_group > m->n_group) {
        gckpt_seterr(err, "%s: field 'n_group' = %llu / 'topk_group' = %llu do not fit %llu experts (groups of at "
                          "least 2, topk_group <= n_group)", f, (unsigned long long)m->n_group,
                     (unsigned long long)m->topk_group, (unsigned long long)m->experts);
        return false;
    }
    if (m->top_k > m->topk_group * (m->experts / m->n_group)) {
        gckpt_seterr(err, "%s: field 'num_experts_per_tok' = %llu exceeds the %llu experts of the chosen groups", f,
                     (unsigned long long)m->top_k, (unsigned long long)(m->topk_group * (m->experts / m->n_group)));
        return false;
    }
    /* output_router_logits: DeepseekV3ForCausalLM adds no load-balancing loss; the output
     * recorder keeps the logits until the forward returns (router_logits_out) */
    m->dense_layers = m->dense_layers < m->layers ? m->dense_layers : m->layers;
    m->mla = true;
    m->head_dim = m->qk_rope_dim; /* the rotary tables' width (DeepseekV3Config.__post_init__) */
    m->rotary_dim = m->qk_rope_dim;
    m->expert_inter = im;
    m->shared_inter = im * shared;
    m->router_groups = true;
    m->qkv_bias = m->o_bias = bias; /* q_a_proj, kv_a_proj_with_mqa and o_proj */
    return true;
}
