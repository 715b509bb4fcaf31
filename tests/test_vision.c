/* The vision side of a VLM config (gckpt/core/vision.h) against what transformers 5.24
 * measured: LLaVA-1.5-7B's parameters by part on the meta device (tests/data/vlm-counts.json,
 * tools/hf_probe/vlm_facts.py) and every llava fixture of tools/hf_probe/vlm_cases.py
 * (tests/data/hf-vlm: the parameter count, the trainable count with the tower frozen, the
 * towers' checkpointing layers, the image tokens the model accepted); the config classes'
 * defaults; one-line errors. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include "closed_form_params.h"
#include "gckpt/core/model.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/vision.h"
#include "gckpt/util/util.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

#include "json_file.h"
#ifndef GCKPT_HF_VLM_FIXTURES
#error GCKPT_HF_VLM_FIXTURES must be the count of tests/data/hf-vlm
#endif

/* a small llama text_config */
#define TEXT_CFG "\"text_config\": {\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 4, " \
                 "\"num_attention_heads\": 4, \"vocab_size\": 211}"

static double num_at(const cJSON *j, const char *path_dots)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path_dots);
    const cJSON *it = j;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
        it = cJSON_GetObjectItemCaseSensitive(it, k);
    if (!cJSON_IsNumber(it)) fail_msg("no number at %s", path_dots);
    return it->valuedouble;
}

static void parse_ok(const char *file, const char *text, gckpt_vlm *v)
{
    gckpt_err err;
    if (!gckpt_vlm_parse(file, text, v, &err)) fail_msg("%s: %s", file, err.msg);
}

/* LLaVA-1.5-7B: the counts of LlavaForConditionalGeneration on the meta device by part */
static void llava_real(void **state)
{
    (void)state;
    cJSON *counts = read_json(GCKPT_TEST_DATA "/vlm-counts.json");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(counts, "models"),
                                                      "llava-1.5-7b.json");
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/configs/llava-1.5-7b.json", 1u << 20, &err);
    assert_non_null(text);
    gckpt_vlm v;
    parse_ok("llava-1.5-7b.json", text, &v);
    free(text);
    assert_int_equal(gckpt_vision_tower_params(&v).params, (uint64_t)num_at(c, "by_part.vision_tower"));
    assert_int_equal(gckpt_vision_projector_params(&v).params, (uint64_t)num_at(c, "by_part.projector"));
    assert_int_equal((uint64_t)closed_form_params128(&v.text),
                     (uint64_t)(num_at(c, "by_part.text_model") + num_at(c, "by_part.lm_head")));
    assert_int_equal(gckpt_vision_tower_params(&v).params + gckpt_vision_projector_params(&v).params +
                         (uint64_t)closed_form_params128(&v.text),
                     (uint64_t)num_at(c, "parameters"));
    uint64_t t[2];
    gckpt_vlm_towers(&v, t);
    assert_int_equal(t[0], (uint64_t)num_at(c, "checkpointing_layers.vision"));
    assert_int_equal(t[1], (uint64_t)num_at(c, "checkpointing_layers.text"));
    /* (336 / 14)^2 = 576 whatever the image's size (R-VLM-4) */
    uint64_t n = 0;
    assert_true(gckpt_image_tokens(&v, "--image-size", 480, 640, &n, &err));
    assert_int_equal(n, 576);
    assert_true(gckpt_image_tokens(&v, "--image-size", 1, 4000, &n, &err));
    assert_int_equal(n, 576);
    assert_int_equal(v.vision.nfeature, 1);
    assert_int_equal(v.vision.feature_layer[0], -2);
    assert_int_equal(v.vision.image_token, 32000);
    assert_false(v.text.tied);
    cJSON_Delete(counts);
}

/* One fixture: its config as transformers wrote it; the text model's parameter tensors per
 * layer (LlamaDecoderLayer 9, Qwen2's with q / k / v biases 12) */
static void check_fixture(const char *path, uint64_t text_per_layer)
{
    cJSON *j = read_json(path);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(j, "config");
    char *cfg_text = cJSON_PrintUnformatted(cfg);
    gckpt_vlm v;
    parse_ok(path, cfg_text, &v);
    free(cfg_text);
    gckpt_param_tally tower = gckpt_vision_tower_params(&v), proj = gckpt_vision_projector_params(&v),
                      grads = gckpt_vision_tower_grads(&v);
    /* the text model's tensors: per layer, the embedding, the final norm, lm_head */
    gckpt_param_tally extra = gckpt_vlm_text_extra(&v);
    uint64_t text = (uint64_t)closed_form_params128(&v.text) + extra.params,
             text_tensors = text_per_layer * v.text.layers + 2 + !v.text.tied + extra.tensors;
    uint64_t all = tower.params + proj.params + text;
    if (all != (uint64_t)num_at(j, "parameters.count"))
        fail_msg("%s: %llu parameters planned, %.0f measured", path, (unsigned long long)all,
                 num_at(j, "parameters.count"));
    if (tower.tensors + proj.tensors + text_tensors != (uint64_t)num_at(j, "parameters.tensors"))
        fail_msg("%s: parameter tensors", path);
    const cJSON *setting = cJSON_GetObjectItemCaseSensitive(j, "setting");
    const cJSON *vt = cJSON_GetObjectItemCaseSensitive(setting, "vision_tower");
    bool frozen = cJSON_IsString(vt) && !strcmp(vt->valuestring, "frozen");
    if (all - (frozen ? tower.params : 0) != (uint64_t)num_at(j, "parameters.trainable"))
        fail_msg("%s: trainable parameters", path);
    /* fused AdamW's states: exp_avg and exp_avg_sq in the parameter's dtype (bf16 under pure
     * bf16, else fp32) and an fp32 step per parameter that got a gradient (R-VLM-9) */
    const cJSON *prec = cJSON_GetObjectItemCaseSensitive(setting, "precision");
    uint64_t per = cJSON_IsString(prec) && !strcmp(prec->valuestring, "bf16") ? 4 : 8;
    uint64_t el = (frozen ? 0 : grads.params) + proj.params + text,
             tn = (frozen ? 0 : grads.tensors) + proj.tensors + text_tensors;
    const cJSON *step = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "steps"), 0);
    if (per * el + 4 * tn != (uint64_t)num_at(step, "optimizer_state_bytes"))
        fail_msg("%s: optimizer states: %llu planned, %.0f measured", path, (unsigned long long)(per * el + 4 * tn),
                 num_at(step, "optimizer_state_bytes"));
    uint64_t t[2];
    gckpt_vlm_towers(&v, t);
    if (t[0] != (uint64_t)num_at(j, "towers.vision.layers") || t[1] != (uint64_t)num_at(j, "towers.text.layers"))
        fail_msg("%s: tower layers", path);
    /* the image tokens the model's placeholder check accepted, and the sequence they are in */
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "images"), "size_hw");
    uint64_t n = 0;
    gckpt_err err;
    if (!gckpt_image_tokens(&v, "--image-size", (uint64_t)cJSON_GetArrayItem(hw, 0)->valuedouble,
                            (uint64_t)cJSON_GetArrayItem(hw, 1)->valuedouble, &n, &err))
        fail_msg("%s: %s", path, err.msg);
    if (n != (uint64_t)num_at(j, "images.tokens_per_image")) fail_msg("%s: %llu image tokens planned", path,
                                                                       (unsigned long long)n);
    if (num_at(j, "images.text_tokens_per_sample") + num_at(j, "images.per_sample") * (double)n !=
        num_at(j, "setting.seq"))
        fail_msg("%s: text + image tokens are not the sequence", path);
    cJSON_Delete(j);
}

static size_t family_fixtures(const char *prefix, uint64_t text_per_layer)
{
    const char *dir = GCKPT_TEST_DATA "/hf-vlm";
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    struct dirent *e;
    size_t files = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) || l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        check_fixture(path, text_per_layer);
        files++;
    }
    closedir(d);
    return files;
}

static void llava_fixtures(void **state)
{
    (void)state;
    assert_int_equal(family_fixtures("llava-", 9), 42 + 12); /* the grid and the two-image cases */
}

/* every fixture of tests/data/hf-vlm is of a family read here (the family tests count them) */
static void all_fixtures(void **state)
{
    (void)state;
    assert_int_equal(54 + 42 + 54 + 42 + 42 + 54, GCKPT_HF_VLM_FIXTURES);
}

static void qwen2_5_vl_fixtures(void **state)
{
    (void)state;
    assert_int_equal(family_fixtures("qwen2_5_vl-", 12), 42 + 12);
}

static void llava_next_fixtures(void **state)
{
    (void)state;
    assert_int_equal(family_fixtures("llava_next-", 9), 42);
}

/* LLaVA-NeXT's anyres token count against transformers 5.24's LlavaNextProcessor
 * (_get_number_of_features, select_best_resolution: run alone from the installed source,
 * make -C tools/hf_probe vlm-tokens; minus the class token of the default strategy): the tiny fixtures' tower (28 / 14,
 * pinpoints 28x56, 56x28, 56x56) and LlavaNextConfig's default pinpoints at 336 / 14 */
static void llava_next_tokens(void **state)
{
    (void)state;
    static const struct {
        const char *cfg;
        uint64_t hwn[10][3];
    } sets[] = {
        {"{\"model_type\": \"llava_next\", \"vision_config\": {\"image_size\": 28, \"patch_size\": 14}, "
         "\"image_grid_pinpoints\": [[28, 56], [56, 28], [56, 56]], " TEXT_CFG "}",
         {{40, 60, 14}, {28, 28, 10}, {60, 40, 16}, {100, 10, 8}}},
        {"{\"model_type\": \"llava_next\", \"vision_config\": {\"image_size\": 336, \"patch_size\": 14}, " TEXT_CFG
         "}",
         {{480, 640, 2340},
          {640, 480, 2352},
          {1080, 1920, 1948},
          {336, 336, 1176},
          {100, 1000, 1160},
          {1000, 100, 1224},
          {700, 700, 2928},
          {333, 1001, 2328},
          {50, 51, 1176},
          {4000, 3000, 2352}}},
    };
    for (size_t k = 0; k < 2; k++) {
        gckpt_vlm v;
        gckpt_err err;
        parse_ok("n.json", sets[k].cfg, &v);
        for (size_t i = 0; i < 10 && sets[k].hwn[i][0]; i++) {
            uint64_t n = 0;
            if (!gckpt_image_tokens(&v, "--image-size", sets[k].hwn[i][0], sets[k].hwn[i][1], &n, &err))
                fail_msg("%s", err.msg);
            if (n != sets[k].hwn[i][2])
                fail_msg("set %zu: %llux%llu: %llu tokens, transformers %llu", k, (unsigned long long)sets[k].hwn[i][0],
                         (unsigned long long)sets[k].hwn[i][1], (unsigned long long)n,
                         (unsigned long long)sets[k].hwn[i][2]);
        }
    }
}

/* pack_image_features as a row map against transformers' own (tests/data/anyres-pack.json,
 * tools/hf_probe/anyres_pack.py, R-VLM-37): every packed row's tower row or the newline,
 * the tiles and the count gckpt_image_tokens gives */
static void anyres_pack(void **state)
{
    (void)state;
    cJSON *doc = read_json(GCKPT_TEST_DATA "/anyres-pack.json");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    int ncase = 0;
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next, ncase++) {
        char cfg[1024];
        char *pins = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "image_grid_pinpoints"));
        snprintf(cfg, sizeof cfg,
                 "{\"model_type\": \"llava_next\", \"vision_config\": {\"image_size\": %d, \"patch_size\": %d}, "
                 "\"image_grid_pinpoints\": %s, " TEXT_CFG "}",
                 (int)num_at(c, "image_size"), (int)num_at(c, "patch_size"), pins);
        free(pins);
        gckpt_vlm v;
        parse_ok("anyres-pack.json", cfg, &v);
        uint64_t h = (uint64_t)num_at(c, "h"), w = (uint64_t)num_at(c, "w"), n = 0, tokens = 0;
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(c, "rows");
        int64_t src[4096];
        assert_true(gckpt_anyres_pack(&v, h, w, src, 4096, &n));
        assert_int_equal(n, (uint64_t)cJSON_GetArraySize(rows));
        gckpt_err err;
        assert_true(gckpt_image_tokens(&v, "--image-size", h, w, &tokens, &err));
        assert_int_equal(tokens, n);
        assert_int_equal(gckpt_image_tiles(&v, h, w), (uint64_t)num_at(c, "tiles"));
        uint64_t r = 0;
        for (const cJSON *it = rows->child; it; it = it->next, r++)
            if (src[r] != (int64_t)it->valuedouble)
                fail_msg("%llux%llu: packed row %llu copies %lld, transformers' %lld", (unsigned long long)h,
                         (unsigned long long)w, (unsigned long long)r, (long long)src[r], (long long)it->valuedouble);
        assert_false(gckpt_anyres_pack(&v, h, w, src, n - 1, &n)); /* a short buffer: refused */
    }
    assert_true(ncase >= 10);
    cJSON_Delete(doc);
    gckpt_vlm l;
    int64_t src[8];
    uint64_t n;
    parse_ok("x.json", "{\"model_type\": \"llava\", \"vision_config\": {}, " TEXT_CFG "}", &l);
    assert_false(gckpt_anyres_pack(&l, 336, 336, src, 8, &n)); /* llava packs nothing */
}

static void qwen3_vl_fixtures(void **state)
{
    (void)state;
    /* Qwen3VLTextDecoderLayer: q / k / v / o, q_norm, k_norm, two norms, gate / up / down */
    assert_int_equal(family_fixtures("qwen3_vl-", 11), 42);
}

static void mllama_fixtures(void **state)
{
    (void)state;
    assert_int_equal(family_fixtures("mllama-", 9), 42 + 12); /* the grid and the two-image cases */
}

/* Llama-3.2-11B-Vision against its measured counts: the tiled encoder, the cross-attention
 * text layers, no checkpointing layer in the vision tower (R-VLM-1) */
static void mllama_real(void **state)
{
    (void)state;
    cJSON *counts = read_json(GCKPT_TEST_DATA "/vlm-counts.json");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(counts, "models"),
                                                      "llama-3.2-11b-vision.json");
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/configs/llama-3.2-11b-vision.json", 1u << 20, &err);
    assert_non_null(text);
    gckpt_vlm v;
    parse_ok("llama-3.2-11b-vision.json", text, &v);
    free(text);
    assert_int_equal(gckpt_vision_tower_params(&v).params, (uint64_t)num_at(c, "by_part.vision_tower"));
    assert_int_equal(gckpt_vision_projector_params(&v).params, (uint64_t)num_at(c, "by_part.projector"));
    assert_int_equal((uint64_t)closed_form_params128(&v.text) + gckpt_vlm_text_extra(&v).params,
                     (uint64_t)(num_at(c, "by_part.text_model") + num_at(c, "by_part.lm_head")));
    assert_int_equal(v.ncross, 8);
    uint64_t t[2];
    gckpt_vlm_towers(&v, t);
    assert_int_equal(t[0], (uint64_t)num_at(c, "checkpointing_layers.vision"));
    assert_int_equal(t[1], (uint64_t)num_at(c, "checkpointing_layers.text"));
    uint64_t n = 0;
    assert_true(gckpt_image_tokens(&v, "--image-size", 1080, 1920, &n, &err));
    assert_int_equal(n, 1);
    cJSON_Delete(counts);
}

static void gemma3_fixtures(void **state)
{
    (void)state;
    /* Gemma3DecoderLayer: q / k / v / o, q_norm, k_norm, four norms, gate / up / down */
    assert_int_equal(family_fixtures("gemma3-", 13), 42);
}

/* Gemma-3-4B against its measured counts: SigLIP without its head, the tied head */
static void gemma3_real(void **state)
{
    (void)state;
    cJSON *counts = read_json(GCKPT_TEST_DATA "/vlm-counts.json");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(counts, "models"),
                                                      "gemma-3-4b.json");
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/configs/gemma-3-4b.json", 1u << 20, &err);
    assert_non_null(text);
    gckpt_vlm v;
    parse_ok("gemma-3-4b.json", text, &v);
    free(text);
    assert_int_equal(gckpt_vision_tower_params(&v).params, (uint64_t)num_at(c, "by_part.vision_tower"));
    assert_int_equal(gckpt_vision_projector_params(&v).params, (uint64_t)num_at(c, "by_part.projector"));
    assert_int_equal((uint64_t)closed_form_params128(&v.text),
                     (uint64_t)(num_at(c, "by_part.text_model") + num_at(c, "by_part.lm_head")));
    assert_true(v.text.tied);
    uint64_t t[2];
    gckpt_vlm_towers(&v, t);
    assert_int_equal(t[0], (uint64_t)num_at(c, "checkpointing_layers.vision"));
    assert_int_equal(t[1], (uint64_t)num_at(c, "checkpointing_layers.text"));
    uint64_t n = 0;
    assert_true(gckpt_image_tokens(&v, "--image-size", 480, 640, &n, &err));
    assert_int_equal(n, 256);
    cJSON_Delete(counts);
}

/* Qwen2.5-VL-7B (the Hub's older layout: the text keys at the top level, rope_scaling
 * "mrope") against its measured counts */
static void qwen2_5_vl_real(void **state)
{
    (void)state;
    cJSON *counts = read_json(GCKPT_TEST_DATA "/vlm-counts.json");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(counts, "models"),
                                                      "qwen2.5-vl-7b.json");
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/configs/qwen2.5-vl-7b.json", 1u << 20, &err);
    assert_non_null(text);
    gckpt_vlm v;
    parse_ok("qwen2.5-vl-7b.json", text, &v);
    free(text);
    assert_int_equal(gckpt_vision_tower_params(&v).params, (uint64_t)num_at(c, "by_part.vision_tower"));
    assert_int_equal(gckpt_vision_projector_params(&v).params, (uint64_t)num_at(c, "by_part.projector"));
    assert_int_equal((uint64_t)closed_form_params128(&v.text),
                     (uint64_t)(num_at(c, "by_part.text_model") + num_at(c, "by_part.lm_head")));
    uint64_t t[2];
    gckpt_vlm_towers(&v, t);
    assert_int_equal(t[0], (uint64_t)num_at(c, "checkpointing_layers.vision"));
    assert_int_equal(t[1], (uint64_t)num_at(c, "checkpointing_layers.text"));
    assert_int_equal(v.nmrope, 3);
    assert_int_equal(v.mrope_section[0], 16);
    assert_int_equal(v.mrope_section[2], 24);
    assert_int_equal(v.vision.image_token, 151655);
    assert_true(v.vision.full_attention[0] & 0x80); /* block 7 */
    assert_false(v.vision.full_attention[0] & 0x40);
    /* smart_resize as transformers 5.24's (run alone from the installed source: make -C
     * tools/hf_probe vlm-tokens): h, w, tokens;
     * 42 and 70 are 1.5 and 2.5 factors, which Python's round() takes to 2 */
    static const uint64_t cases[][3] = {{1080, 1920, 1222}, {56, 84, 6},     {42, 42, 4},    {70, 70, 4},
                                        {14, 14, 4},      {1, 200, 29},     {3000, 4000, 1230}, {98, 126, 16},
                                        {4032, 3024, 1230}, {10, 2000, 29}, {28, 5600, 200}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint64_t n = 0;
        if (!gckpt_image_tokens(&v, "--image-size", cases[i][0], cases[i][1], &n, &err)) fail_msg("%s", err.msg);
        if (n != cases[i][2])
            fail_msg("%llux%llu: %llu tokens, transformers %llu", (unsigned long long)cases[i][0],
                     (unsigned long long)cases[i][1], (unsigned long long)n, (unsigned long long)cases[i][2]);
    }
    uint64_t n = 0;
    assert_false(gckpt_image_tokens(&v, "--image-size", 1, 201, &n, &err));
    assert_string_equal(err.msg, "--image-size: an image of 1x201 pixels has an aspect ratio of 201, above the 200 "
                                 "the processor accepts (smart_resize)");
    assert_false(gckpt_image_tokens(&v, "--image-size", 0, 201, &n, &err));
    cJSON_Delete(counts);
}

/* The config classes' defaults: CLIPVisionConfig's for a vision_config that omits a key
 * (not LlavaConfig's 336 / 14 tower, which only a missing vision_config gets), LlamaConfig's
 * for a text_config without model_type or widths */
static void defaults(void **state)
{
    (void)state;
    gckpt_vlm v;
    gckpt_err err;
    parse_ok("d.json", "{\"model_type\": \"llava\", \"vision_config\": {}, " TEXT_CFG "}", &v);
    assert_int_equal(v.vision.tower, GCKPT_TOWER_CLIP);
    assert_int_equal(v.vision.image_size, 224);
    assert_int_equal(v.vision.patch, 32);
    assert_int_equal(v.vision.layers, 12);
    assert_int_equal(v.vision.hidden, 768);
    assert_true(v.vision.projector_bias);
    assert_string_equal(v.text.model_type, "llama");
    uint64_t n = 0;
    assert_true(gckpt_image_tokens(&v, "--image-size", 224, 224, &n, &err));
    assert_int_equal(n, 49);
    /* "full" keeps the class token; two feature layers widen linear_1 */
    parse_ok("d.json", "{\"model_type\": \"llava\", \"vision_config\": {\"num_hidden_layers\": 3}, "
                       "\"vision_feature_select_strategy\": \"full\", \"vision_feature_layer\": [-3, 1], "
                       "\"multimodal_projector_bias\": false, \"tie_word_embeddings\": true, " TEXT_CFG "}", &v);
    assert_true(gckpt_image_tokens(&v, "--image-size", 10, 10, &n, &err));
    assert_int_equal(n, 50);
    assert_int_equal(v.vision.nfeature, 2);
    assert_int_equal(v.vision.feature_layer[0], -3);
    assert_int_equal(gckpt_vision_projector_params(&v).params, 768 * 2 * 64 + 64 * 64);
    /* hidden_states[-3] of 3 layers is layer 0's output, [1] too: layer 0 alone gets a
     * gradient (measured: tools/hf_probe, R-VLM-9) */
    assert_int_equal(gckpt_vision_feature_depth(&v), 1);
    assert_int_equal(gckpt_vision_tower_grads(&v).tensors, 5 + 16);
    assert_true(v.text.tied);
    /* LlamaConfig's widths when text_config omits them (LLaVA-1.5's) */
    parse_ok("d.json", "{\"model_type\": \"llava\", \"vision_config\": {}, \"text_config\": {}}", &v);
    assert_int_equal(v.text.hidden, 4096);
    assert_int_equal(v.text.layers, 32);
    assert_int_equal(v.text.vocab, 32000);
    /* Qwen2.5-VL: a vision_config named "qwen2_5_vl" is the vision config (the class renames
     * it); num_hidden_layers is depth's alias; the text keys at the top level, with
     * Qwen2_5_VLTextConfig's defaults (8 kv heads, theta 1e6) where Qwen2Config's differ */
    parse_ok("d.json", "{\"model_type\": \"qwen2_5_vl\", \"vision_config\": {\"model_type\": \"qwen2_5_vl\", "
                       "\"num_hidden_layers\": 3, \"hidden_size\": 32, \"num_heads\": 4, \"out_hidden_size\": 64, "
                       "\"fullatt_block_indexes\": [2, 9]}, \"hidden_size\": 64, \"intermediate_size\": 96, "
                       "\"num_hidden_layers\": 4, \"num_attention_heads\": 16, \"vocab_size\": 211}", &v);
    assert_int_equal(v.vision.tower, GCKPT_TOWER_QWEN2_5);
    assert_int_equal(v.vision.layers, 3);
    assert_int_equal(v.vision.full_attention[0], 4); /* block 2; 9 is past the blocks */
    assert_int_equal(v.text.kv_heads, 8);
    assert_true(v.text.rope_theta == 1e6);
    assert_true(v.text.qkv_bias);
    assert_int_equal(v.nmrope, 0);
    /* Qwen3-VL: num_key_value_heads defaults to the heads (Qwen3VLTextConfig), not Qwen3's 32;
     * the class's three deepstack mergers; factor 32 for the image tokens */
    parse_ok("d.json", "{\"model_type\": \"qwen3_vl\", \"vision_config\": {\"depth\": 27, \"hidden_size\": 32, "
                       "\"num_heads\": 4, \"out_hidden_size\": 64}, \"text_config\": {\"hidden_size\": 64, "
                       "\"num_attention_heads\": 4, \"head_dim\": 16}}", &v);
    assert_int_equal(v.text.kv_heads, 4);
    assert_int_equal(v.vision.ndeepstack, 3);
    assert_int_equal(v.vision.deepstack[2], 24);
    assert_true(v.text.rope_theta == 500000.0);
    assert_false(v.text.tied);
    assert_true(gckpt_image_tokens(&v, "--image-size", 64, 96, &n, &err));
    assert_int_equal(n, 6);
    assert_true(gckpt_image_tokens(&v, "--image-size", 1080, 1920, &n, &err));
    assert_int_equal(n, 943); /* smart_resize(1080, 1920, factor 32) = (736, 1312): 46 x 82 / 4 (vlm-tokens) */
}

static void expect_error(const char *text, const char *msg)
{
    gckpt_vlm v;
    gckpt_err err;
    err.msg[0] = 0;
    if (gckpt_vlm_parse("x.json", text, &v, &err)) fail_msg("parsed: %s", text);
    assert_string_equal(err.msg, msg);
    assert_null(strchr(err.msg, '\n'));
}

/* The image token under either name (the four config classes' attribute_map, R-VLM-36):
 * image_token_id alone is read, both equal are one, both different are refused by name */
static void image_token_names(void **state)
{
    (void)state;
    static const char *const cfg[] = {
        "{\"model_type\": \"llava\", \"vision_config\": {}, " TEXT_CFG ", ",
        "{\"model_type\": \"llava_next\", \"vision_config\": {}, " TEXT_CFG ", ",
        "{\"model_type\": \"mllama\", \"vision_config\": {}, \"text_config\": {}, ",
        "{\"model_type\": \"gemma3\", \"vision_config\": {}, \"mm_tokens_per_image\": 196, \"text_config\": {}, ",
    };
    char text[1024];
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++) {
        gckpt_vlm v;
        snprintf(text, sizeof text, "%s\"image_token_id\": 7}", cfg[i]);
        parse_ok("x.json", text, &v);
        assert_int_equal(v.vision.image_token, 7);
        snprintf(text, sizeof text, "%s\"image_token_index\": 9}", cfg[i]);
        parse_ok("x.json", text, &v);
        assert_int_equal(v.vision.image_token, 9);
        snprintf(text, sizeof text, "%s\"image_token_index\": 5, \"image_token_id\": 5}", cfg[i]);
        parse_ok("x.json", text, &v);
        assert_int_equal(v.vision.image_token, 5);
        snprintf(text, sizeof text, "%s\"image_token_index\": 9, \"image_token_id\": 7}", cfg[i]);
        expect_error(text, "x.json: fields 'image_token_index' = 9 and 'image_token_id' = 7 differ (one field under "
                           "two names: give one)");
        snprintf(text, sizeof text, "%s\"image_token_id\": 7.5}", cfg[i]);
        expect_error(text, "x.json: field 'image_token_id' = 7.5 is not an integer");
    }
}

static void errors(void **state)
{
    (void)state;
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {\"model_type\": \"siglip_vision_model\"}, " TEXT_CFG
                 "}",
                 "x.json: vision_config: field 'model_type' = \"siglip_vision_model\": this vision tower is not "
                 "supported (clip_vision_model)");
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {}}",
                 "x.json: field 'text_config' is missing: a vision-language config names its text model "
                 "(transformers would build the class's default one)");
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {\"num_hidden_layers\": 3}, "
                 "\"vision_feature_layer\": 4, " TEXT_CFG "}",
                 "x.json: field 'vision_feature_layer' must be an integer in [-4, 3] (a hidden state of the vision "
                 "tower), got a number outside it");
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {}, \"vision_feature_select_strategy\": \"cls\", "
                 TEXT_CFG "}",
                 "x.json: field 'vision_feature_select_strategy' = \"cls\" is not one of default, full");
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {\"hidden_act\": \"gelu\"}, " TEXT_CFG "}",
                 "x.json: vision_config: field 'hidden_act' = \"gelu\" is not supported (quick_gelu)");
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {\"attention_dropout\": 0.1}, " TEXT_CFG "}",
                 "x.json: vision_config: field 'attention_dropout' = 0.1 is not modelled (0 only)");
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {\"num_attention_heads\": 5}, " TEXT_CFG "}",
                 "x.json: vision_config: field 'num_attention_heads' = 5 does not divide 'hidden_size' = 768");
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {}, \"projector_hidden_act\": \"relu\", " TEXT_CFG
                 "}",
                 "x.json: field 'projector_hidden_act' = \"relu\" is not supported (gelu)");
    /* the text model's own reader, named as text_config */
    expect_error("{\"model_type\": \"llava\", \"vision_config\": {}, \"text_config\": {\"model_type\": \"llama\", "
                 "\"hidden_act\": \"relu\"}}",
                 "x.json: text_config: field 'hidden_act' = \"relu\" is not supported (silu, gelu, gelu_new, "
                 "gelu_pytorch_tanh, gelu_tanh)");
    /* Qwen2.5-VL: the merger must give the text width; the tower's MLP is SwiGLU */
    expect_error("{\"model_type\": \"qwen2_5_vl\", \"vision_config\": {\"depth\": 2, \"hidden_size\": 32, "
                 "\"num_heads\": 4, \"out_hidden_size\": 48}, \"text_config\": {\"hidden_size\": 64, "
                 "\"num_attention_heads\": 4, \"num_key_value_heads\": 2}}",
                 "x.json: vision_config: field 'out_hidden_size' = 48 is not the text model's hidden_size (64)");
    expect_error("{\"model_type\": \"qwen2_5_vl\", \"vision_config\": {\"hidden_act\": \"gelu\"}}",
                 "x.json: vision_config: field 'hidden_act' = \"gelu\" is not supported (silu)");
    /* Gemma 3: 9 tokens cannot pool a 4 x 4 grid (kernel 4 // 3 = 1 gives 16) */
    expect_error("{\"model_type\": \"gemma3\", \"vision_config\": {\"image_size\": 56, \"patch_size\": 14}, "
                 "\"mm_tokens_per_image\": 9, \"text_config\": {}}",
                 "x.json: field 'mm_tokens_per_image' = 9: the projector pools the 4x4 patch grid to 16 features per "
                 "image");
    /* LLaVA-NeXT: tiles of the tower's size; the default strategy only */
    expect_error("{\"model_type\": \"llava_next\", \"vision_config\": {\"image_size\": 28, \"patch_size\": 14}, "
                 "\"image_grid_pinpoints\": [[28, 50]], " TEXT_CFG "}",
                 "x.json: field 'image_grid_pinpoints': [28, 50] is not a multiple of the vision tower's image_size 28");
    expect_error("{\"model_type\": \"llava_next\", \"vision_config\": {}, \"vision_feature_select_strategy\": "
                 "\"full\", " TEXT_CFG "}",
                 "x.json: field 'vision_feature_select_strategy' = \"full\" is not planned for LLaVA-NeXT (default "
                 "only)");
    /* not read yet, or no VLM: gckpt_model_parse's refusals */
    expect_error("{\"model_type\": \"llava\"}",
                 "x.json: field 'vision_config' is missing: model_type \"llava\" (LLaVA) is a vision-language model "
                 "whose vision tower it configures");
    expect_error("{\"model_type\": \"qwen2_vl\", \"vision_config\": {}}",
                 "x.json: field 'model_type' = \"qwen2_vl\": vision-language models are not supported yet (Qwen2-VL: "
                 "vision tower not yet planned: the ViT's full-attention blocks, the 2x2 patch merger, the pixel "
                 "budget's image tokens and M-RoPE)");
    /* mllama: the projector reads the final and the intermediate hidden states */
    expect_error("{\"model_type\": \"mllama\", \"vision_config\": {\"hidden_size\": 32, \"attention_heads\": 4, "
                 "\"intermediate_layers_indices\": [1, 2], \"vision_output_dim\": 64}, \"text_config\": {}}",
                 "x.json: vision_config: field 'vision_output_dim' = 64 is not hidden_size x (1 + the 2 "
                 "intermediate_layers_indices) = 96");
    expect_error("{\"model_type\": \"llama\"}", "x.json: field 'model_type' = \"llama\" is not a vision-language model");
}

static void image_sizes(void **state)
{
    (void)state;
    uint64_t h = 0, w = 0;
    gckpt_err err;
    assert_true(gckpt_parse_image_size("--image-size", "336x672", &h, &w, &err));
    assert_int_equal(h, 336);
    assert_int_equal(w, 672);
    const char *bad[] = {"0x5", "5", "5x", "x5", "5x5x", "-1x5", "5x-5", "5x 5", " 5x5", "+5x5", "5X5", "2000000x5", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_false(gckpt_parse_image_size("--image-size", bad[i], &h, &w, &err));
        char want[256];
        snprintf(want, sizeof want,
                 "--image-size: '%s' is not an image size HxW (height x width in pixels, 1 to 1048576 each)", bad[i]);
        assert_string_equal(err.msg, want);
    }
}

/* Qwen3-VL-4B-Instruct (its vision_config names model_type "qwen3_vl", which
 * Qwen3VLConfig.__post_init__ renames to qwen3_vl_vision) against its measured counts */
static void qwen3_vl_real(void **state)
{
    (void)state;
    cJSON *counts = read_json(GCKPT_TEST_DATA "/vlm-counts.json");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(counts, "models"),
                                                      "qwen3-vl-4b.json");
    assert_non_null(c);
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/configs/qwen3-vl-4b.json", 1u << 20, &err);
    assert_non_null(text);
    gckpt_vlm v;
    parse_ok("qwen3-vl-4b.json", text, &v);
    free(text);
    assert_int_equal(v.vision.tower, GCKPT_TOWER_QWEN3);
    assert_int_equal(gckpt_vision_tower_params(&v).params, (uint64_t)num_at(c, "by_part.vision_tower"));
    assert_int_equal(gckpt_vision_projector_params(&v).params, (uint64_t)num_at(c, "by_part.projector"));
    assert_int_equal((uint64_t)closed_form_params128(&v.text),
                     (uint64_t)(num_at(c, "by_part.text_model") + num_at(c, "by_part.lm_head")));
    assert_int_equal(gckpt_vision_tower_params(&v).params + gckpt_vision_projector_params(&v).params +
                         (uint64_t)closed_form_params128(&v.text),
                     (uint64_t)num_at(c, "parameters"));
    uint64_t t[2];
    gckpt_vlm_towers(&v, t);
    assert_int_equal(t[0], (uint64_t)num_at(c, "checkpointing_layers.vision"));
    assert_int_equal(t[1], (uint64_t)num_at(c, "checkpointing_layers.text"));
    assert_int_equal(v.vision.ndeepstack, 3);
    assert_int_equal(v.vision.deepstack[2], 17);
    /* smart_resize, factor 32, the class's pixel budget (make -C tools/hf_probe vlm-tokens) */
    uint64_t n = 0;
    assert_true(gckpt_image_tokens(&v, "--image-size", 1080, 1920, &n, &err));
    assert_int_equal(n, 943);
    cJSON_Delete(counts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llava_real),      cmocka_unit_test(llava_fixtures), cmocka_unit_test(qwen2_5_vl_real), cmocka_unit_test(qwen3_vl_real),
        cmocka_unit_test(qwen2_5_vl_fixtures), cmocka_unit_test(defaults),   cmocka_unit_test(errors),
        cmocka_unit_test(gemma3_real),     cmocka_unit_test(gemma3_fixtures), cmocka_unit_test(llava_next_fixtures),
        cmocka_unit_test(llava_next_tokens), cmocka_unit_test(qwen3_vl_fixtures), cmocka_unit_test(mllama_real),
        cmocka_unit_test(mllama_fixtures),   cmocka_unit_test(all_fixtures),      cmocka_unit_test(image_sizes),
        cmocka_unit_test(image_token_names), cmocka_unit_test(anyres_pack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
