/* Model configs: published parameter counts, family details, hostile configs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/model.h"
#include "gckpt/core/params.h"
#include "gckpt/core/recipe.h"

static void published_parameter_counts(void **state)
{
    (void)state;
    /* figures from the model cards / HF (see models/README.md) */
    static const struct { const char *name; uint64_t params; } want[] = {
        {"gpt2", 124439808ull},           {"gpt2-medium", 354823168ull},
        {"gpt2-xl", 1557611200ull},       {"llama-3.2-1b", 1235814400ull},
        {"llama-3.2-3b", 3212749824ull},  {"llama-3.1-8b", 8030261248ull},
        {"llama-3.1-70b", 70553706496ull}, {"mistral-7b-v0.3", 7248023552ull},
        {"qwen2.5-0.5b", 494032768ull},   {"qwen2.5-7b", 7615616512ull},
        {"qwen3-8b", 8190735360ull},
        /* issue 13 (models/PROVENANCE.md says where each figure is published) */
        {"gemma-2-2b", 2614341888ull},    {"gemma-2-9b", 9241705984ull},
        {"gemma-3-1b", 999885952ull},     {"phi-3-mini-4k", 3821079552ull},
        {"phi-4-mini", 3836021760ull},    {"pythia-1.4b", 1414647808ull},
        {"olmo-2-7b", 7298617344ull},     {"mixtral-8x7b", 46702792704ull},
        {"qwen3-30b-a3b", 30532122624ull}, {"olmoe-1b-7b", 6919161856ull},
        {"gpt-oss-20b", 20914757184ull},  /* the dequantized model (MXFP4 checkpoint, FINDINGS R-QUANT-17) */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(want[i].name, &m, &err)) fail_msg("%s", err.msg);
        if (gckpt_param_count(&m) != want[i].params)
            fail_msg("%s: %llu parameters, published %llu", want[i].name,
                     (unsigned long long)gckpt_param_count(&m), (unsigned long long)want[i].params);
    }
}

static void family_details(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_true(gckpt_model_load("llama-3.1-8b", &m, &err));
    assert_int_equal(m.family, GCKPT_FAMILY_LLAMA);
    assert_int_equal(m.layers, 32);
    assert_int_equal(m.kv_heads, 8);
    assert_int_equal(m.head_dim, 128);
    assert_false(m.tied);
    assert_true(gckpt_model_load("qwen2.5-7b", &m, &err));
    assert_true(m.qkv_bias);
    assert_false(m.o_bias);
    assert_true(gckpt_model_load("qwen3-8b", &m, &err));
    assert_true(m.qk_norm);
    assert_int_equal(m.head_dim, 128);
    assert_true(gckpt_model_load("gpt2", &m, &err));
    assert_int_equal(m.family, GCKPT_FAMILY_GPT2);
    assert_int_equal(m.intermediate, 4 * 768);
    assert_true(m.tied);
    assert_int_equal(m.act, GCKPT_ACT_GELU_NEW);
    /* a path works as well as a name */
    assert_true(gckpt_model_load(GCKPT_TEST_DATA "/../../models/gpt2.json", &m, &err));
    assert_string_equal(m.name, "gpt2");
}

static void expect_error(const char *json, const char *needle)
{
    gckpt_model m;
    gckpt_err err = {{0}};
    if (gckpt_model_parse("cfg.json", json, &m, &err)) fail_msg("accepted: %s", json);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' does not mention '%s'", err.msg, needle);
    if (strncmp(err.msg, "cfg.json: ", 10)) fail_msg("error '%s' does not name the file", err.msg);
    if (strchr(err.msg, '\n')) fail_msg("error '%s' is more than one line", err.msg);
}

#define LLAMA(extra)                                                                      \
    "{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":64,"              \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":176,"     \
    "\"vocab_size\":211" extra "}"

static void hostile_configs(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_true(gckpt_model_parse("cfg.json", LLAMA(""), &m, &err));
    expect_error("", "empty");
    expect_error("{", "malformed JSON");
    expect_error("{\"model_type\":\"llama\",}", "malformed JSON");
    expect_error("[1,2]", "JSON object");
    expect_error("{\"num_hidden_layers\":2}", "'model_type'");
    expect_error("{\"model_type\":\"bert\"}", "llama, mistral, qwen2, qwen3, gpt2");
    expect_error("{\"model_type\":7}", "'model_type' must be a string");
    expect_error("{\"model_type\":\"llama\",\"hidden_size\":64}", "'num_hidden_layers'");
    expect_error(LLAMA(",\"num_hidden_layers\":0"), "'num_hidden_layers' appears twice");
}

#define MOE(type, extra)                                                                  \
    "{\"model_type\":\"" type "\",\"num_hidden_layers\":2,\"hidden_size\":64,"             \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":48,"        \
    "\"vocab_size\":211,\"num_experts_per_tok\":2" extra "}"

/* The mixture-of-experts families as transformers 5.24 reads their configs (FINDINGS
 * R-MOE-1): defaults, the expert-count aliases, what is refused. */
static void moe_configs(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_true(gckpt_model_load("mixtral-8x7b", &m, &err));
    assert_true(m.family == GCKPT_FAMILY_MOE && m.experts == 8 && m.top_k == 2 && m.expert_inter == 14336);
    assert_true(m.topk_renorm && m.topk_weights_f32 && !m.qk_norm && m.router_aux_coef == 0.02);
    assert_true(gckpt_model_load("qwen3-30b-a3b", &m, &err));
    assert_true(m.experts == 128 && m.top_k == 8 && m.expert_inter == 768 && m.head_dim == 128 && m.qk_norm);
    assert_true(m.topk_renorm && !m.topk_weights_f32);
    assert_true(gckpt_model_load("olmoe-1b-7b", &m, &err));
    assert_true(m.experts == 64 && m.top_k == 8 && m.expert_inter == 1024 && m.qk_norm_full && !m.topk_renorm);
    /* class defaults: mixtral 8 experts; qwen3_moe 128, moe_intermediate_size 768,
     * norm_topk_prob false; the alias key of the other class is read too */
    assert_true(gckpt_model_parse("cfg.json", MOE("mixtral", ""), &m, &err));
    assert_true(m.experts == 8 && m.expert_inter == 48 && m.router_aux_coef == 0.001);
    assert_true(gckpt_model_parse("cfg.json", MOE("qwen3_moe", ""), &m, &err));
    assert_true(m.experts == 128 && m.expert_inter == 768 && !m.topk_renorm && m.router_aux_coef == 0.001);
    assert_true(gckpt_model_parse("cfg.json", MOE("mixtral", ",\"num_experts\":4"), &m, &err));
    assert_int_equal(m.experts, 4);
    assert_true(gckpt_model_parse("cfg.json", MOE("olmoe", ",\"num_local_experts\":6"), &m, &err));
    assert_true(m.experts == 6 && m.router_aux_coef == 0.01 && !m.router_aux_loss);
    /* output_router_logits (default false) turns on the load-balancing loss */
    assert_true(gckpt_model_parse("cfg.json", MOE("olmoe", ",\"output_router_logits\":true"), &m, &err));
    assert_true(m.router_aux_loss);
    /* refused, one line naming the field */
    struct { const char *cfg, *msg; } bad[] = {
        {MOE("qwen3_moe", ",\"mlp_only_layers\":[1]"), "'mlp_only_layers' is not modelled unless empty"},
        {MOE("qwen3_moe", ",\"decoder_sparse_step\":2"), "'decoder_sparse_step' = 2 is not modelled"},
        {MOE("qwen3_moe", ",\"use_sliding_window\":true"), "'use_sliding_window' = true is not modelled"},
        {MOE("mixtral", ",\"router_jitter_noise\":0.01"), "'router_jitter_noise' = 0.01 is not modelled"},
        {MOE("mixtral", ",\"sliding_window\":4096"), "'sliding_window' is not modelled for mixtral"},
        {MOE("olmoe", ",\"clip_qkv\":8"), "'clip_qkv' = 8 is not modelled"},
        {MOE("olmoe", ",\"output_router_logits\":1"), "'output_router_logits'"},
        {MOE("mixtral", ",\"num_local_experts\":4,\"num_experts\":6"), "'num_experts' = 6 contradicts"},
        {MOE("mixtral", ",\"num_local_experts\":1"), "'num_experts_per_tok' = 2 exceeds the 1 experts"},
        {MOE("olmoe", ",\"head_dim\":8"), "olmoe's q_norm is hidden_size wide"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (gckpt_model_parse("cfg.json", bad[i].cfg, &m, &err)) fail_msg("accepted: %s", bad[i].cfg);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("%s: got '%s', want '%s'", bad[i].cfg, err.msg, bad[i].msg);
        assert_null(strchr(err.msg, '\n'));
    }
}

#define OSS(extra)                                                                        \
    "{\"model_type\":\"gpt_oss\",\"num_hidden_layers\":4,\"hidden_size\":48,"                 \
    "\"num_attention_heads\":16" extra "}"

/* gpt_oss as GptOssConfig (5.24) reads its config (FINDINGS R-FAM-15): the shipped 20b, the
 * class defaults for omitted keys, __post_init__'s nulls, what is refused. */
static void gpt_oss_config(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_true(gckpt_model_load("gpt-oss-20b", &m, &err));
    assert_true(m.family == GCKPT_FAMILY_MOE && m.experts == 32 && m.top_k == 4 && m.expert_inter == 2880);
    assert_true(m.head_dim == 64 && m.heads == 64 && m.kv_heads == 8 && m.hidden == 2880 && !m.tied);
    assert_true(m.sliding_window == 128 && m.sliding_layers == 12 && gckpt_layer_sliding(&m, 0) &&
                !gckpt_layer_sliding(&m, 1));
    assert_true(m.attn_sinks && m.rope_halves && m.router_bias && m.topk_first && m.expert_bias);
    assert_true(m.qkv_bias && m.o_bias && !m.topk_renorm && !m.qk_norm && m.rms == GCKPT_RMS_F32_OUT);
    assert_true(m.swiglu_alpha == 1.702 && m.swiglu_limit == 7.0 && m.router_aux_coef == 0.9 && !m.router_aux_loss);
    assert_true(m.rope_theta == 150000 && m.mxfp4_checkpoint); /* quantization_config: mxfp4 */
    /* transformers runs eager whatever is asked (it refuses sdpa: sinks) */
    assert_int_equal(gckpt_attention_run(&m, GCKPT_SDPA), GCKPT_EAGER);
    /* class defaults: 128 experts, top-4, head_dim 64, 8 kv heads, intermediate 2880,
     * vocab 201088, window 128 on the even layers, attention_bias true */
    assert_true(gckpt_model_parse("cfg.json", OSS(""), &m, &err));
    assert_true(m.experts == 128 && m.top_k == 4 && m.head_dim == 64 && m.kv_heads == 8 && m.expert_inter == 2880);
    assert_true(m.vocab == 201088 && m.sliding_window == 128 && m.sliding_layers == 2 && m.qkv_bias);
    assert_true(m.router_aux_coef == 0.001 && m.norm_eps == 1e-5 && m.max_positions == 131072 && !m.mxfp4_checkpoint);
    /* __post_init__: a null head_dim is hidden / heads, null kv heads the heads; the
     * num_experts alias; layer_types and attention_bias as given */
    assert_true(gckpt_model_parse("cfg.json", OSS(",\"head_dim\":null,\"num_key_value_heads\":null,\"num_experts\":6,"
                                                  "\"attention_bias\":false,\"layer_types\":[\"full_attention\","
                                                  "\"full_attention\",\"sliding_attention\",\"full_attention\"]"),
                                  &m, &err));
    assert_true(m.head_dim == 3 && m.kv_heads == 16 && m.experts == 6 && !m.qkv_bias && !m.o_bias);
    assert_true(m.sliding_layers == 1 && gckpt_layer_sliding(&m, 2));
    /* hidden_act is read by nothing (the experts' gate is their own) */
    assert_true(gckpt_model_parse("cfg.json", OSS(",\"hidden_act\":\"gelu\""), &m, &err));
    expect_error(OSS(",\"sliding_window\":null"), "'sliding_window' = null is not modelled for gpt_oss");
    /* rope: YaRN without rope_parameters (the class's default, theta 150000), the shipped
     * legacy rope_scaling, an explicit default, a given yarn (beta 0 is 32 / 1: `or`) */
    assert_true(gckpt_model_parse("cfg.json", OSS(""), &m, &err));
    assert_true(m.yarn.on && m.yarn.factor == 32 && m.yarn.original_max == 4096 && !m.yarn.truncate &&
                m.yarn.beta_fast == 32 && m.yarn.beta_slow == 1 && m.rope_theta == 150000);
    assert_true(fabs(m.yarn.attention_factor - (0.1 * log(32.0) + 1)) < 1e-15);
    assert_true(gckpt_model_load("gpt-oss-20b", &m, &err) && m.yarn.on && m.yarn.factor == 32 && !m.yarn.truncate);
    assert_true(gckpt_model_parse("cfg.json", OSS(",\"rope_parameters\":{\"rope_type\":\"default\"}"), &m, &err));
    assert_true(!m.yarn.on && m.rope_theta == 150000 && !m.rope_other[0]);
    assert_true(gckpt_model_parse("cfg.json", OSS(",\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4,"
                                                  "\"original_max_position_embeddings\":8,\"beta_fast\":0,"
                                                  "\"rope_theta\":1000}"), &m, &err));
    assert_true(m.yarn.on && m.yarn.truncate && m.yarn.beta_fast == 32 && m.rope_theta == 1000);
    assert_true(gckpt_model_parse("cfg.json", OSS(",\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2}"), &m,
                                  &err));
    assert_true(!m.yarn.on && !strcmp(m.rope_other, "linear")); /* planned; gckpt-run refuses it */
    expect_error(OSS(",\"rope_parameters\":{\"rope_type\":\"yarn\"}"), "'rope_parameters.factor'");
    expect_error(OSS(",\"swiglu_limit\":0"), "'swiglu_limit'");
    expect_error(OSS(",\"quantization_config\":{\"quant_method\":\"bitsandbytes\"}"),
                 "'quantization_config.quant_method' = \"bitsandbytes\" is not modelled for gpt_oss");
    expect_error(OSS(",\"quantization_config\":{}"), "missing field 'quantization_config.quant_method'");
    expect_error(OSS(",\"quantization_config\":\"mxfp4\""), "'quantization_config' must be an object");
    expect_error(OSS(",\"layer_types\":[\"full_attention\"]"), "'layer_types' has 1 entries");
    expect_error(OSS(",\"num_local_experts\":2,\"num_experts_per_tok\":4"),
                 "'num_experts_per_tok' = 4 exceeds the 2 experts");
}

#define DENSE(type, extra)                                                                \
    "{\"model_type\":\"" type "\",\"num_hidden_layers\":2,\"hidden_size\":64,"             \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,"        \
    "\"vocab_size\":211" extra "}"

/* The later dense families as transformers 5.24 reads their configs (FINDINGS R-FAM-7). */
static void issue13_configs(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    /* Gemma 2: sliding layers are the even ones by default; soft-capping on by default */
    assert_true(gckpt_model_load("gemma-2-9b", &m, &err));
    assert_int_equal(m.family, GCKPT_FAMILY_GEMMA);
    assert_int_equal(m.sliding_layers, 21);
    assert_true(gckpt_layer_sliding(&m, 0) && !gckpt_layer_sliding(&m, 1));
    assert_true(m.attn_softcap == 50.0 && m.final_softcap == 30.0 && m.tied && m.sandwich_norms);
    assert_int_equal(m.act, GCKPT_ACT_GELU_TANH);
    /* Gemma 3 1B: sliding unless (i + 1) % 6 == 0; two rotary tables; no soft-capping */
    assert_true(gckpt_model_load("gemma-3-1b", &m, &err));
    assert_int_equal(m.sliding_layers, 22);
    assert_false(gckpt_layer_sliding(&m, 5));
    assert_true(m.rope_tables == 2 && m.qk_norm && m.final_softcap == 0 && m.attn_softcap == 0);
    /* its two thetas as Gemma3TextConfig 5.24 makes them (printed in the probe venv:
     * full_attention 1000000 from rope_theta, sliding_attention 10000 from
     * rope_local_base_freq; class defaults 1e6 / 1e4; rope_parameters' entries win) */
    assert_true(m.rope_theta == 1e6 && m.rope_local_theta == 1e4);
    const char *g3 = "{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":2,\"hidden_size\":64,"
                     "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":211%s}";
    char cfg[512];
    snprintf(cfg, sizeof cfg, g3, "");
    assert_true(gckpt_model_parse("cfg.json", cfg, &m, &err));
    assert_true(m.rope_theta == 1e6 && m.rope_local_theta == 1e4);
    snprintf(cfg, sizeof cfg, g3, ",\"rope_theta\":5e5,\"rope_local_base_freq\":2e4");
    assert_true(gckpt_model_parse("cfg.json", cfg, &m, &err));
    assert_true(m.rope_theta == 5e5 && m.rope_local_theta == 2e4);
    snprintf(cfg, sizeof cfg, g3, ",\"rope_local_base_freq\":2e4,\"rope_parameters\":{\"sliding_attention\":"
                                  "{\"rope_theta\":3e4},\"full_attention\":{\"rope_theta\":7e5}}");
    assert_true(gckpt_model_parse("cfg.json", cfg, &m, &err));
    assert_true(m.rope_theta == 7e5 && m.rope_local_theta == 3e4);
    /* Phi-3 mini: every layer slides (2047); Phi-4 mini: partial rotary 0.75, tied */
    assert_true(gckpt_model_load("phi-3-mini-4k", &m, &err));
    assert_true(m.sliding_layers == m.layers && m.sliding_window == 2047 && m.fused_qkv && m.rotary_dim == 96);
    assert_true(gckpt_model_load("phi-4-mini", &m, &err));
    assert_true(m.rotary_dim == 96 && m.head_dim == 128 && m.tied);
    /* Pythia: rotary_pct 0.25 of head_dim 128, parallel residual, biases, untied */
    assert_true(gckpt_model_load("pythia-1.4b", &m, &err));
    assert_true(m.rotary_dim == 32 && m.parallel_residual && m.qkv_bias && !m.tied && m.act == GCKPT_ACT_GELU);
    assert_true(gckpt_model_load("olmo-2-7b", &m, &err));
    assert_true(m.post_norms_only && m.qk_norm_full && m.rms == GCKPT_RMS_F32_OUT);
    /* defaults of keys a config omits: Gemma 1's kv heads 16 and head_dim 256, "gelu" is
     * the tanh form; granite's multipliers 1.0 */
    const char *g1 = "{\"model_type\":\"gemma\",\"num_hidden_layers\":2,\"hidden_size\":64,"
                     "\"num_attention_heads\":16,\"intermediate_size\":96,\"vocab_size\":211,\"hidden_act\":\"gelu\"}";
    assert_true(gckpt_model_parse("cfg.json", g1, &m, &err));
    assert_true(m.kv_heads == 16 && m.head_dim == 256 && m.act == GCKPT_ACT_GELU_TANH && m.embed_scale && m.tied);
    assert_true(gckpt_model_parse("cfg.json", DENSE("granite", ""), &m, &err));
    assert_true(m.multipliers && m.residual_multiplier == 1.0 && m.logits_scaling == 1.0);
    /* rope_parameters' partial_rotary_factor wins over the legacy key */
    assert_true(gckpt_model_parse("cfg.json", DENSE("phi3", ",\"partial_rotary_factor\":0.75,\"rope_parameters\":"
                                                            "{\"rope_theta\":10000,\"partial_rotary_factor\":0.5}"),
                                  &m, &err));
    assert_int_equal(m.rotary_dim, 8);
    /* rope theta and the embedding's padding row as each config class of transformers 5.24
     * defaults them (printed in the probe venv: AutoConfig.for_model(t).rope_parameters,
     * .pad_token_id): MixtralConfig's theta is 1e6; GPTNeoXConfig reads rotary_emb_base
     * and not a top-level rope_theta; pad 0 (gemma*), 1 (olmo2, olmoe), 32000 (phi3),
     * none elsewhere, gpt_neox never (its nn.Embedding has no padding_idx) */
    assert_true(gckpt_model_parse("cfg.json", MOE("mixtral", ""), &m, &err));
    assert_true(m.rope_theta == 1e6 && !m.pad);
    assert_true(gckpt_model_parse("cfg.json", MOE("olmoe", ""), &m, &err));
    assert_true(m.rope_theta == 1e4 && m.pad && m.pad_id == 1);
    assert_true(gckpt_model_parse("cfg.json", DENSE("gpt_neox", ",\"rope_theta\":7000,\"pad_token_id\":3"), &m, &err));
    assert_true(m.rope_theta == 1e4 && !m.pad);
    assert_true(gckpt_model_parse("cfg.json", DENSE("gpt_neox", ",\"rotary_emb_base\":5000"), &m, &err));
    assert_true(m.rope_theta == 5000);
    /* GPTNeoXConfig's use_parallel_residual defaults to True; false: the sequential block */
    assert_true(gckpt_model_parse("cfg.json", DENSE("gpt_neox", ""), &m, &err));
    assert_true(m.parallel_residual);
    assert_true(gckpt_model_parse("cfg.json", DENSE("gpt_neox", ",\"use_parallel_residual\":false"), &m, &err));
    assert_false(m.parallel_residual);
    assert_true(gckpt_model_parse("cfg.json", DENSE("gemma2", ""), &m, &err));
    assert_true(m.pad && m.pad_id == 0);
    assert_true(gckpt_model_parse("cfg.json", DENSE("phi3", ""), &m, &err));
    assert_true(m.pad && m.pad_id == 32000);
    assert_true(gckpt_model_parse("cfg.json", DENSE("olmo2", ",\"pad_token_id\":-1"), &m, &err));
    assert_true(m.pad && m.pad_id == 210); /* nn.Embedding counts a negative index from the end */
    assert_true(gckpt_model_parse("cfg.json", DENSE("gemma", ",\"pad_token_id\":null"), &m, &err));
    assert_false(m.pad);
    assert_true(gckpt_model_parse("cfg.json", LLAMA(",\"rope_parameters\":{\"rope_theta\":3e5}"), &m, &err));
    assert_true(m.rope_theta == 3e5 && !m.pad && !m.llama3.on && !m.rope_other[0]);
    /* Llama 3.1's rope_scaling (rope_type llama3); original_max_position_embeddings defaults
     * to max_position_embeddings (standardize_rope_params); phi-4-mini's longrope is kept
     * by name (gckpt-run refuses it) */
    assert_true(gckpt_model_load("llama-3.1-8b", &m, &err));
    assert_true(m.llama3.on && m.llama3.factor == 8 && m.llama3.low_freq_factor == 1 && m.llama3.high_freq_factor == 4 &&
                m.llama3.original_max == 8192 && m.rope_theta == 5e5);
    assert_true(gckpt_model_parse("cfg.json", LLAMA(",\"max_position_embeddings\":99,\"rope_parameters\":{\"rope_type\":"
                                                    "\"llama3\",\"factor\":2,\"low_freq_factor\":1,\"high_freq_factor\":3}"),
                                  &m, &err));
    assert_true(m.llama3.on && m.llama3.original_max == 99);
    assert_true(gckpt_model_load("phi-4-mini", &m, &err));
    assert_true(!m.llama3.on && !strcmp(m.rope_other, "longrope"));
    expect_error(LLAMA(",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1}"),
                 "rope_scaling.high_freq_factor");
    expect_error(LLAMA(",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
                       "\"high_freq_factor\":4}"), "'rope_scaling.high_freq_factor' must exceed");
    expect_error(DENSE("olmo2", ",\"pad_token_id\":1.5"), "'pad_token_id' must be an integer");
    /* null soft-capping: none */
    assert_true(gckpt_model_parse("cfg.json", DENSE("gemma2", ",\"attn_logit_softcapping\":null"), &m, &err));
    assert_true(m.attn_softcap == 0 && m.final_softcap == 30.0);

    /* refused, one line naming the field */
    expect_error("{\"model_type\":\"qwen2_moe\"}", "mixture-of-experts models are not supported yet");
    expect_error("{\"model_type\":\"qwen2_moe\"}", "olmo2, granite, mixtral, qwen3_moe, olmoe, gpt_oss");
    expect_error(DENSE("gemma2", ",\"layer_types\":[\"sliding_attention\",\"chunked_attention\"]"),
                 "field 'layer_types'[1] = \"chunked_attention\" is not modelled");
    expect_error(DENSE("gemma3_text", ",\"layer_types\":[\"full_attention\"]"), "'layer_types' has 1 entries");
    expect_error(DENSE("gemma2", ",\"sliding_window\":null"), "'sliding_window' = null is not modelled");
    expect_error(DENSE("gemma3_text", ",\"use_bidirectional_attention\":true"), "'use_bidirectional_attention'");
    expect_error(DENSE("gpt_neox", ",\"use_parallel_residual\":\"no\""), "'use_parallel_residual'");
    expect_error(DENSE("phi3", ",\"hidden_act\":\"gelu\""), "'hidden_act'");
    expect_error(DENSE("gemma2", ",\"hidden_activation\":\"silu\""), "'hidden_activation'");
    expect_error(DENSE("phi3", ",\"partial_rotary_factor\":0.1"), "rotary dims");
    expect_error("{\"model_type\":\"gpt_neox\",\"num_hidden_layers\":2,\"hidden_size\":66,\"num_attention_heads\":4,"
                 "\"intermediate_size\":96,\"vocab_size\":211}", "not divisible");
}

#define SMOL(extra)                                                                       \
    "{\"model_type\":\"smollm3\",\"num_hidden_layers\":4,\"hidden_size\":64,"            \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,"        \
    "\"vocab_size\":211" extra "}"

/* SmolLM3 as transformers 5.24 reads its config (FINDINGS R-FAM-16): no_rope_layers[i] 0 is
 * a NoPE layer, absent: every no_rope_layer_interval-th (default 4); the 3B's count is
 * transformers' own on the meta device (3,075,098,624: tests/data/configs/smollm3-3b.json,
 * a mirror of HuggingFaceTB/SmolLM3-3B's config.json) and the closed form's. */
static void smollm3_config(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_true(gckpt_model_load(GCKPT_TEST_DATA "/configs/smollm3-3b.json", &m, &err));
    assert_true(m.family == GCKPT_FAMILY_SMOLLM3 && m.tied && m.pad && m.pad_id == 128004 && m.rope_theta == 5e6);
    assert_int_equal(m.nope_layers, 9);
    for (uint64_t i = 0; i < m.layers; i++) assert_true(gckpt_layer_nope(&m, i) == ((i + 1) % 4 == 0));
    uint64_t h = 2048, kvd = 512, I = 11008, per_layer = 2 * h * h + 2 * h * kvd + 3 * h * I + 2 * h;
    assert_true(gckpt_param_count(&m) == 128256 * h + 36 * per_layer + h);
    assert_true(gckpt_param_count(&m) == 3075098624ull);
    /* SmolLM3Config's defaults: interval 4, theta 2e6, tied, pad 128004, no biases */
    assert_true(gckpt_model_parse("cfg.json", SMOL(""), &m, &err));
    assert_true(m.nope_layers == 1 && gckpt_layer_nope(&m, 3) && m.rope_theta == 2e6 && m.tied && !m.qkv_bias);
    assert_true(gckpt_model_parse("cfg.json", SMOL(",\"no_rope_layer_interval\":2,\"attention_bias\":true"), &m, &err));
    assert_true(m.nope_layers == 2 && gckpt_layer_nope(&m, 1) && gckpt_layer_nope(&m, 3) && m.qkv_bias && m.o_bias);
    /* the list wins over the interval; longer than the layers: the first ones (the class's indexing) */
    assert_true(gckpt_model_parse("cfg.json", SMOL(",\"no_rope_layers\":[0,1,1,1,0],\"no_rope_layer_interval\":2"),
                                  &m, &err));
    assert_true(m.nope_layers == 1 && gckpt_layer_nope(&m, 0));
    assert_true(gckpt_model_parse("cfg.json", SMOL(",\"no_rope_layers\":null,\"no_rope_layer_interval\":1"), &m, &err));
    assert_int_equal(m.nope_layers, 4);
    /* hostile: one line naming the file and the field */
    expect_error(SMOL(",\"no_rope_layers\":[1,1,0]"), "field 'no_rope_layers' has 3 entries, 'num_hidden_layers' is 4");
    expect_error(SMOL(",\"no_rope_layers\":[1,2,1,0]"), "field 'no_rope_layers'[1] must be 0 (NoPE) or 1");
    expect_error(SMOL(",\"no_rope_layers\":[1,1,0.5,0]"), "field 'no_rope_layers'[2] must be 0");
    expect_error(SMOL(",\"no_rope_layers\":[1,1,\"0\",0]"), "field 'no_rope_layers'[2] must be 0");
    expect_error(SMOL(",\"no_rope_layers\":\"1110\""), "field 'no_rope_layers' must be an array");
    expect_error(SMOL(",\"no_rope_layer_interval\":0"), "'no_rope_layer_interval'");
    expect_error(SMOL(",\"use_sliding_window\":true,\"sliding_window\":8"), "field 'use_sliding_window' = true is not modelled");
    expect_error(SMOL(",\"hidden_act\":\"gelu\""), "'hidden_act'");
}

/* GLM-4-0414 as transformers 5.24 reads its config (FINDINGS R-FAM-17): Glm4Config's defaults
 * (head_dim 128 whatever the width, partial rotary 0.5, q/k/v biases, untied); the 9B's count
 * is transformers' own on the meta device (9,400,279,040: tests/data/configs/glm-4-9b-0414.json)
 * and the closed form's. */
static void glm4_config(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_true(gckpt_model_load(GCKPT_TEST_DATA "/configs/glm-4-9b-0414.json", &m, &err));
    assert_true(m.family == GCKPT_FAMILY_GLM4 && !m.tied && m.pad && m.pad_id == 151329 && m.head_dim == 128);
    assert_true(m.rotary_dim == 64 && m.qkv_bias && !m.o_bias && m.fused_gate_up && !m.fused_qkv);
    assert_true(m.sandwich_norms && m.glm_norms && !m.both_masks && m.rope_interleave && m.rope_split_cat);
    uint64_t h = 4096, kvd = 256, I = 13696;
    uint64_t per_layer = 2 * h * h + 2 * h * kvd + (h + 2 * kvd) + 3 * h * I + 4 * h;
    assert_true(gckpt_param_count(&m) == 2 * 151552 * h + 40 * per_layer + h);
    assert_true(gckpt_param_count(&m) == 9400279040ull);
    /* the class's defaults: head_dim 128 (not hidden / heads), factor 0.5, biases */
    assert_true(gckpt_model_parse("cfg.json", DENSE("glm4", ""), &m, &err));
    assert_true(m.head_dim == 128 && m.rotary_dim == 64 && m.qkv_bias && !m.tied && m.norm_eps == 1.5625e-7);
    /* rope_parameters' factor wins over the legacy key */
    assert_true(gckpt_model_parse("cfg.json", DENSE("glm4", ",\"head_dim\":16,\"partial_rotary_factor\":1.0,"
                                                            "\"rope_parameters\":{\"rope_type\":\"default\","
                                                            "\"rope_theta\":10000.0,\"partial_rotary_factor\":0.25},"
                                                            "\"attention_bias\":false"),
                                  &m, &err));
    assert_true(m.head_dim == 16 && m.rotary_dim == 4 && !m.qkv_bias);
    expect_error(DENSE("glm4", ",\"hidden_act\":\"gelu\""), "field 'hidden_act': glm4 is modelled with silu");
    expect_error(DENSE("glm4", ",\"partial_rotary_factor\":0.001"), "rotary dims");
    expect_error(DENSE("glm4", ",\"attention_bias\":\"yes\""), "'attention_bias'");
}

static void hostile_values(void **state)
{
    (void)state;
    const char *base = "{\"model_type\":\"llama\",\"num_hidden_layers\":%s,\"hidden_size\":%s,"
                       "\"num_attention_heads\":%s,\"num_key_value_heads\":%s,"
                       "\"intermediate_size\":176,\"vocab_size\":%s}";
    char buf[512];
    static const struct { const char *L, *h, *nh, *kv, *V, *needle; } cases[] = {
        {"0", "64", "4", "2", "211", "'num_hidden_layers' = 0"},
        {"-3", "64", "4", "2", "211", "'num_hidden_layers'"},
        {"2.5", "64", "4", "2", "211", "must be an integer"},
        {"\"2\"", "64", "4", "2", "211", "must be an integer, got a string"},
        {"null", "64", "4", "2", "211", "must be an integer, got null"},
        {"1e30", "64", "4", "2", "211", "out of range"},
        {"2", "65", "4", "2", "211", "not divisible"},
        {"2", "64", "4", "3", "211", "does not divide"},
        {"2", "64", "0", "2", "211", "'num_attention_heads'"},
        {"2", "64", "4", "2", "99999999999", "'vocab_size'"},
        {"2", "64", "4", "2", "true", "got a boolean"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(buf, sizeof buf, base, cases[i].L, cases[i].h, cases[i].nh, cases[i].kv, cases[i].V);
        expect_error(buf, cases[i].needle);
    }
    expect_error("{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":50,\"n_head\":3,\"vocab_size\":10}", "not divisible");
    expect_error("{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":3,\"vocab_size\":10,\"activation_function\":\"swiglu\"}", "not supported");
    expect_error(LLAMA(",\"hidden_act\":\"gelu\""), "silu");
    expect_error(LLAMA(",\"tie_word_embeddings\":\"yes\""), "true or false");
    expect_error(LLAMA(",\"attention_dropout\":1.5"), "'attention_dropout'");
}

static void head_dim_overrides(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    /* head_dim given: hidden need not be divisible by heads (Qwen3 style) */
    assert_true(gckpt_model_parse("cfg.json", "{\"model_type\":\"qwen3\",\"num_hidden_layers\":2,"
                "\"hidden_size\":64,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                "\"head_dim\":24,\"intermediate_size\":176,\"vocab_size\":211}", &m, &err));
    assert_int_equal(m.head_dim, 24);
    assert_true(m.qk_norm);
}

/* Settings whose memory rests on a CUDA-only dropout rule say so (gckpt_recipe_unverified) */
static void unverified_dropout(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    const char *code = "x", *why = "x";
    assert_true(gckpt_model_load("llama-3.2-1b", &m, &err));
    assert_false(gckpt_recipe_unverified(&m, GCKPT_SDPA, &code, &why));
    assert_null(code);
    assert_null(why);
    assert_false(gckpt_recipe_unverified(&m, GCKPT_EAGER, NULL, NULL));
    m.attn_dropout = 0.1;
    assert_true(gckpt_recipe_unverified(&m, GCKPT_SDPA, &code, &why));
    assert_string_equal(code, "dropout_cuda_sdpa_unverified");
    assert_non_null(strstr(why, "RNG seed"));
    assert_true(gckpt_recipe_unverified(&m, GCKPT_EAGER, &code, &why));
    assert_string_equal(code, "dropout_cuda_mask_unverified");
    assert_non_null(strstr(why, "1-byte mask"));
    /* gpt2's config defaults: resid / embd / attn dropout 0.1 */
    assert_true(gckpt_model_load("gpt2", &m, &err));
    assert_true(gckpt_recipe_unverified(&m, GCKPT_SDPA, &code, NULL));
    assert_string_equal(code, "dropout_cuda_sdpa_unverified");
    m.attn_dropout = 0;
    assert_true(gckpt_recipe_unverified(&m, GCKPT_SDPA, &code, NULL));
    assert_string_equal(code, "dropout_cuda_mask_unverified");
    m.resid_dropout = m.embd_dropout = 0;
    assert_false(gckpt_recipe_unverified(&m, GCKPT_SDPA, NULL, NULL));
}

static void unknown_name(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_false(gckpt_model_load("no-such-model", &m, &err));
    assert_non_null(strstr(err.msg, "unknown models"));
    assert_false(gckpt_model_load("../etc/passwd", &m, &err)); /* a path: does not exist */
    assert_false(gckpt_model_load("bad name!", &m, &err));
    assert_false(gckpt_model_load(GCKPT_TEST_DATA, &m, &err)); /* a directory */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(published_parameter_counts), cmocka_unit_test(family_details), cmocka_unit_test(moe_configs),
        cmocka_unit_test(gpt_oss_config),            cmocka_unit_test(issue13_configs),
        cmocka_unit_test(hostile_configs),           cmocka_unit_test(hostile_values),
        cmocka_unit_test(head_dim_overrides),        cmocka_unit_test(unknown_name),
        cmocka_unit_test(unverified_dropout),         cmocka_unit_test(smollm3_config), cmocka_unit_test(glm4_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
