/* The family table (core/families.c): one row per family, each model_type read by one
 * row; the shipped configs parse to the row that lists their model_type; the facts the
 * table and the readers' flags carry, checked against transformers 5.24 / peft 0.21.2 as
 * written down here (not read back from the table). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include "gckpt/core/families.h"
#include "gckpt/core/model.h"
#include "gckpt/core/peft.h"
#include "gckpt/util/util.h"

static const char *const shipped[] = {
    "gpt2", "gpt2-medium", "gpt2-xl", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b",
    "mistral-7b-v0.3", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-8b", "gemma-2-2b", "gemma-2-9b", "gemma-3-1b",
    "phi-3-mini-4k", "phi-4-mini", "pythia-1.4b", "olmo-2-7b", "mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b",
    "gpt-oss-20b"};
#define NSHIPPED (sizeof shipped / sizeof *shipped)

static void one_row_per_family_one_family_per_type(void **state)
{
    (void)state;
    for (int f = 0; f < GCKPT_NFAMILY; f++) {
        const gckpt_family_info *fi = gckpt_family_of((gckpt_family)f);
        assert_non_null(fi);
        assert_int_equal(fi->family, f);
        assert_non_null(fi->parse);
        assert_non_null(fi->trace);
        assert_non_null(fi->embed_name);
        assert_true(fi->lora_targets != 0);
        assert_non_null(fi->types[0].name);
        for (int k = 0; k < GCKPT_FAMILY_MAX_TYPES && fi->types[k].name; k++) {
            const gckpt_model_type_info *t = NULL;
            assert_ptr_equal(gckpt_family_by_type(fi->types[k].name, &t), fi);
            assert_ptr_equal(t, &fi->types[k]);
        }
    }
    assert_null(gckpt_family_by_type("falcon", NULL));
    assert_null(gckpt_family_by_type("", NULL));
}

/* the lists the error messages show (their text before the table) */
static void model_type_lists(void **state)
{
    (void)state;
    char buf[256];
    gckpt_model_types_list(false, ", ", ", ", buf, sizeof buf);
    assert_string_equal(buf, "llama, mistral, qwen2, qwen3, gpt2, gemma, gemma2, gemma3_text, phi3, gpt_neox, olmo2, "
                             "granite, mixtral, qwen3_moe, olmoe, gpt_oss, deepseek_v3, smollm3, glm4");
    gckpt_model_types_list(true, ", ", " and ", buf, sizeof buf);
    assert_string_equal(buf, "llama, mistral, qwen2, qwen3, gpt2, gemma, gemma2, gemma3_text, phi3, gpt_neox, olmo2, "
                             "granite, mixtral, qwen3_moe, olmoe, gpt_oss, deepseek_v3, smollm3 and glm4");
    gckpt_model_types_list(false, ", ", ", ", buf, 12); /* truncated, terminated */
    assert_true(strlen(buf) < 12);
    gckpt_model m;
    gckpt_err err;
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"falcon\"}", &m, &err));
    assert_string_equal(err.msg, "c.json: field 'model_type' = \"falcon\" is not supported (supported: llama, "
                                 "mistral, qwen2, qwen3, gpt2, gemma, gemma2, gemma3_text, phi3, gpt_neox, olmo2, "
                                 "granite, mixtral, qwen3_moe, olmoe, gpt_oss, deepseek_v3, smollm3, glm4)");
    /* Cohere2 (Command R7B): refused naming what is not planned (FINDINGS R-FAM-18) */
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"cohere2\", \"hidden_size\": 64}", &m, &err));
    assert_non_null(strstr(err.msg, "c.json: field 'model_type' = \"cohere2\" is not supported yet (not planned: "
                                    "CohereLayerNorm (mean-centred, no bias"));
    assert_null(strchr(err.msg, '\n'));
    /* DeepSeek-V2 (issue 26): refused naming what is not planned */
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"deepseek_v2\"}", &m, &err));
    assert_non_null(strstr(err.msg, "\"deepseek_v2\": mixture-of-experts models are not supported yet (not planned: "
                                    "multi-head latent attention (kv_lora_rank)"));
}

/* Vision-language configs (gckpt_vlm_types, issue 26): refused by name with what is not
 * planned; one without its vision_config object, and any other config with one, too. */
static void vlm_refused(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"qwen2_vl\", \"vision_config\": {}, \"text_config\": {}}",
                                   &m, &err));
    assert_string_equal(err.msg, "c.json: field 'model_type' = \"qwen2_vl\": vision-language models are not supported yet "
                                 "(Qwen2-VL: vision tower not yet planned: the ViT's full-attention blocks, the 2x2 patch "
                                 "merger, the pixel budget's image tokens and M-RoPE)");
    /* a walked one (Llama 3.2 Vision: planned) is gckpt-plan's */
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"mllama\", \"vision_config\": {}, \"text_config\": {}}",
                                   &m, &err));
    assert_string_equal(err.msg, "c.json: field 'model_type' = \"mllama\": a vision-language model (Llama 3.2 Vision) is "
                                 "planned by gckpt-plan only (not yet: gckpt-run's execution of the tiled vision encoder "
                                 "and the cross-attention text layers)");
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"qwen2_5_vl\", \"hidden_size\": 64}", &m, &err));
    assert_string_equal(err.msg, "c.json: field 'vision_config' is missing: model_type \"qwen2_5_vl\" (Qwen2.5-VL) is a "
                                 "vision-language model whose vision tower it configures");
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"gemma3\", \"vision_config\": null}", &m, &err));
    assert_string_equal(err.msg, "c.json: field 'vision_config' is not an object: model_type \"gemma3\" (Gemma 3 "
                                 "(multimodal)) is a vision-language model whose vision tower it configures");
    /* a text family's model_type with a vision section: not read as the text model alone */
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"llama\", \"vision_config\": {\"depth\": 2}}", &m, &err));
    assert_string_equal(err.msg, "c.json: field 'vision_config': vision-language models are not supported yet "
                                 "(model_type \"llama\": vision tower not yet planned)");
    /* every row names a model_type no family reads (a VLM type planned by a family would be shadowed) */
    for (const gckpt_vlm_type *v = gckpt_vlm_types; v->name; v++) {
        assert_null(gckpt_family_by_type(v->name, NULL));
        assert_ptr_equal(gckpt_vlm_type_of(v->name), v);
    }
    assert_null(gckpt_vlm_type_of("gemma3_text")); /* Gemma 3's text model is planned */
}

/* a shipped config with pad_token_id removed (the class's default applies) */
static bool load_without_pad(const char *name, gckpt_model *m)
{
    char path[4096];
    gckpt_err err;
    if (!gckpt_resolve_data("models", name, path, sizeof path, &err)) fail_msg("%s", err.msg);
    char *text = gckpt_read_file(path, 1u << 20, &err);
    if (!text) fail_msg("%s", err.msg);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "pad_token_id");
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    bool ok = gckpt_model_parse(name, out, m, &err);
    if (!ok) fail_msg("%s: %s", name, err.msg);
    free(out);
    return ok;
}

/* Each shipped config reads as the family whose row lists its model_type, and the flags
 * that replaced family checks are set exactly where the family check held: gpt2's
 * learned position table; Phi-3's split-and-cat rotary; OLMo 2's fp32 rotary; the Gemma
 * classes' late q/k norms. The class's pad_token_id default (AutoConfig.for_model,
 * transformers 5.24): gemma, gemma2, gemma3_text 0; phi3 32000; olmo2, olmoe 1; gpt2 and
 * gpt_neox pass no padding_idx; the others None. */
static void shipped_configs(void **state)
{
    (void)state;
    for (size_t i = 0; i < NSHIPPED; i++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(shipped[i], &m, &err)) fail_msg("%s", err.msg);
        const char *t = m.model_type;
        const gckpt_family_info *fi = gckpt_family_by_type(t, NULL);
        assert_non_null(fi);
        assert_int_equal(fi->family, m.family);
        assert_int_equal(m.learned_positions, !strcmp(t, "gpt2"));
        assert_int_equal(m.rope_split_cat, !strcmp(t, "phi3"));
        assert_int_equal(m.rope_fp32, !strcmp(t, "olmo2"));
        assert_int_equal(m.qk_norm_late, !strncmp(t, "gemma", 5));
        assert_int_equal(m.experts > 0, !strcmp(t, "mixtral") || !strcmp(t, "qwen3_moe") || !strcmp(t, "olmoe") ||
                                            !strcmp(t, "gpt_oss"));
        gckpt_model np;
        load_without_pad(shipped[i], &np);
        int64_t want = !strncmp(t, "gemma", 5) ? 0 : !strcmp(t, "phi3") ? 32000 : !strncmp(t, "olmo", 4) ? 1 : -1;
        if (want < 0) {
            if (np.pad) fail_msg("%s: pad %lld without pad_token_id", shipped[i], (long long)np.pad_id);
        } else {
            if (!np.pad || np.pad_id != want) fail_msg("%s: pad %d / %lld, want %lld", shipped[i], np.pad,
                                                       (long long)np.pad_id, (long long)want);
        }
    }
}

/* peft's names per family (peft 0.21.2, transformers 5.24 module names) */
static void peft_names(void **state)
{
    (void)state;
    char buf[160];
    gckpt_mts_name(GCKPT_MTS_EMBED | GCKPT_MTS_LM_HEAD, GCKPT_FAMILY_GPT2, buf, sizeof buf);
    assert_string_equal(buf, "lm_head,wte");
    gckpt_mts_name(GCKPT_MTS_EMBED, GCKPT_FAMILY_GPT_NEOX, buf, sizeof buf);
    assert_string_equal(buf, "embed_in");
    gckpt_mts_name(GCKPT_MTS_EMBED, GCKPT_FAMILY_MOE, buf, sizeof buf);
    assert_string_equal(buf, "embed_tokens");
    uint8_t mts = 0;
    char bad[64];
    assert_true(gckpt_mts_parse("wte,embed_in,embed_tokens,lm_head", &mts, bad, sizeof bad));
    assert_int_equal(mts, GCKPT_MTS_EMBED | GCKPT_MTS_LM_HEAD);
    assert_false(gckpt_mts_parse("embed", &mts, bad, sizeof bad));
    /* gpt2's c_proj is two linears: bare when both are targeted, qualified otherwise */
    uint32_t t = (1u << GCKPT_LT_C_ATTN) | (1u << GCKPT_LT_ATTN_C_PROJ) | (1u << GCKPT_LT_MLP_C_PROJ);
    gckpt_lora_targets_name(t, GCKPT_FAMILY_GPT2, buf, sizeof buf);
    assert_string_equal(buf, "c_attn,c_proj");
    gckpt_lora_targets_name(1u << GCKPT_LT_MLP_C_PROJ, GCKPT_FAMILY_GPT2, buf, sizeof buf);
    assert_string_equal(buf, "mlp.c_proj");
    gckpt_lora_targets_name(gckpt_lora_family_targets(GCKPT_FAMILY_GPT2), GCKPT_FAMILY_GPT2, buf, sizeof buf);
    assert_string_equal(buf, "all-linear");
    /* the MoE families: their targets are all-linear only when the user wrote it */
    uint32_t attn = gckpt_lora_family_targets(GCKPT_FAMILY_MOE);
    gckpt_lora_targets_name(attn, GCKPT_FAMILY_MOE, buf, sizeof buf);
    assert_string_equal(buf, "q_proj,k_proj,v_proj,o_proj");
    gckpt_lora_targets_name(GCKPT_LT_ALL, GCKPT_FAMILY_MOE, buf, sizeof buf);
    assert_string_equal(buf, "all-linear");
    gckpt_lora_family_names(GCKPT_FAMILY_PHI3, buf, sizeof buf);
    assert_string_equal(buf, "o_proj,down_proj,qkv_proj,gate_up_proj");
    gckpt_lora_family_names(GCKPT_FAMILY_GPT_NEOX, buf, sizeof buf);
    assert_string_equal(buf, "query_key_value,dense,dense_h_to_4h,dense_4h_to_h");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vlm_refused),
        cmocka_unit_test(one_row_per_family_one_family_per_type),
        cmocka_unit_test(model_type_lists),
        cmocka_unit_test(shipped_configs),
        cmocka_unit_test(peft_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
