/* Llama 3.2 Vision (mllama) against its 54 fixtures of tests/data/hf-vlm
 * (tools/hf_probe/vlm_cases.py: fp32, bf16 and amp-bf16 with CUDA's lists; every_n off / 1 /
 * 2 / 3; offload; the vision tower trained and frozen; one 2-tile image per sample; and
 * two images per sample at every_n off / 1 / 2 / 2 + offload, the tower trained). Exact,
 * per fixture: the vision tower (core/recipe_vision.c, gckpt_vision_layer_recipe_build:
 * its tiled embedding, every local and gated global encoder layer, its head; FINDINGS
 * R-VLM-30) and each layer's parameter count; the text cross-attention layer alone
 * (core/recipe_mllama.c, R-VLM-31) and the whole text model with the cross-attention layers
 * in place (R-VLM-34); Llama-3.2-11B-Vision's rows, keys and gates in closed form. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include "gckpt/core/device.h"
#include "gckpt/core/schedule.h"
#include "gckpt/core/step.h"
#include "gckpt/core/towers.h"
#include "gckpt/core/vision.h"
#include "gckpt/util/util.h"

#ifndef GCKPT_TEST_DATA
#error GCKPT_TEST_DATA must name tests/data
#endif

#include "hf_compare.h"
#include "json_file.h"

static gckpt_device g_dev;

/* mllama (FINDINGS R-VLM-30): every local and gated global encoder layer of every mllama
 * fixture, exact. Not checkpointing layers: the probe files the whole tower under the
 * embedding, by module (vision_model.transformer.layers.i, global_transformer.layers.i); the
 * aspect-ratio mask every layer's SDPA reads is one storage, filed under local layer 0. The
 * tower's images: the processor's max_num_tiles tiles per image, one sequence each. */
typedef struct {
    int files, local_checked, global_checked, frozen_checked, zero_checked;
    uint64_t head_bytes;
} mllama_tally;

static void check_mllama(const char *path, const char *name, void *arg)
{
    (void)name;
    mllama_tally *ty = arg;
    cJSON *j = read_json(path);
    const cJSON *set = at(j, "setting");
    char *cfg = cJSON_PrintUnformatted(at(j, "config"));
    gckpt_vlm v;
    gckpt_err err;
    if (!gckpt_vlm_parse(path, cfg, &v, &err)) fail_msg("%s: %s", path, err.msg);
    free(cfg);
    const char *prec = at(set, "precision")->valuestring;
    int p = hf_precision_from(prec);
    if (p < 0) fail_msg("%s: precision %s", path, prec);
    gckpt_target target = cJSON_IsString(at(set, "autocast_lists")) ? GCKPT_TARGET_CPU_CUDA_LISTS : GCKPT_TARGET_CPU;
    const cJSON *en = at(set, "every_n_layers");
    uint32_t every_n = cJSON_IsNumber(en) ? (uint32_t)en->valuedouble : 0;
    bool frozen = !strcmp(at(set, "vision_tower")->valuestring, "frozen");
    /* pixel_values [b, images, max_num_tiles, C, H, W]: the tiles the tower runs */
    const cJSON *pv = at(at(at(at(j, "images"), "inputs"), "pixel_values"), "shape");
    if (cJSON_GetArraySize(pv) != 6 || (uint64_t)cJSON_GetArrayItem(pv, 2)->valuedouble != v.vision.max_tiles)
        fail_msg("%s: pixel_values is not [b, images, max_num_tiles, C, H, W]", path);
    uint64_t images = (uint64_t)at(at(j, "images"), "per_sample")->valuedouble;
    uint64_t b = (uint64_t)at(set, "micro_batch")->valuedouble;
    gckpt_model tower;
    gckpt_vision_tower_model(&v, &tower);
    gckpt_tower_grad g = !frozen ? GCKPT_TOWER_TRAINED : every_n ? GCKPT_TOWER_FROZEN_HOOKED : GCKPT_TOWER_FROZEN;
    gckpt_setting s = {.seq = gckpt_vision_positions(&v), .micro_batch = b * images, .grad_accum = 1,
                       .precision = (gckpt_precision)p, .attention = GCKPT_SDPA};
    const cJSON *emb = at(at(at(j, "saved"), "embedding"), "tensors");
    for (int global = 0; global < 2; global++) {
        static gckpt_recipe r;
        static gckpt_ctx ctx;
        if (!gckpt_vision_layer_recipe_build(&v, &tower, (gckpt_precision)p, target, g, global, &r, &err) ||
            !gckpt_ctx_init(&ctx, &tower, &g_dev, &r, &s, &err))
            fail_msg("%s: %s", path, err.msg);
        uint64_t layer = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_BLOCK);
        /* the layer's parameters, MllamaVisionEncoderLayer's: q, k, v, o without biases, two
         * LayerNorms, fc1 and fc2 with biases; a global layer's two gates */
        uint64_t D = v.vision.hidden, I = v.vision.intermediate, numel = 0;
        for (int t = 0; t < r.nt; t++)
            if (r.t[t].kind == GCKPT_T_PARAM && r.t[t].section == GCKPT_SEC_BLOCK) numel += gckpt_param_numel(&r, t);
        if (numel != 4 * D * D + 4 * D + 2 * D * I + I + D + (global ? 2 : 0))
            fail_msg("%s: a %s layer traced with %llu parameters", path, global ? "global" : "local",
                     (unsigned long long)numel);
        /* the mask: the embedding section's source, saved by every layer's SDPA */
        uint64_t mask = 0;
        for (int i = 0; i < r.nop; i++)
            if (r.op[i].prim == GCKPT_P_SOURCE && r.op[i].source == GCKPT_SRC_MASK) mask = ctx.raw[r.op[i].out[0]];
        /* the embedding and the head (FINDINGS R-VLM-30), by module, less the mask (a source) */
        if (!global) {
            static const char *const embed_mods[] = {"vision_model.patch_embedding",
                                                     "vision_model.pre_tile_positional_embedding",
                                                     "vision_model.gated_positional_embedding",
                                                     "vision_model.layernorm_pre"};
            static const char *const head_mods[] = {"vision_model.layernorm_post",
                                                    "vision_model.post_tile_positional_embedding",
                                                    "multi_modal_projector"};
            uint64_t e = 0, h = 0;
            for (size_t i = 0; i < sizeof embed_mods / sizeof *embed_mods; i++) e += measured(emb, embed_mods[i]);
            for (size_t i = 0; i < sizeof head_mods / sizeof *head_mods; i++) h += measured(emb, head_mods[i]);
            if (e != gckpt_section_saved_bytes(&ctx, GCKPT_SEC_EMBED) || h != gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD))
                fail_msg("%s: the embedding keeps %llu bytes measured, %llu planned; the head %llu and %llu", path,
                         (unsigned long long)e, (unsigned long long)gckpt_section_saved_bytes(&ctx, GCKPT_SEC_EMBED),
                         (unsigned long long)h, (unsigned long long)gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD));
            /* nothing else of the tower or the projector is filed */
            uint64_t layers_sum = 0;
            for (uint64_t i = 0; i < v.vision.layers + v.vision.global_layers; i++) {
                char pf[80];
                snprintf(pf, sizeof pf, "vision_model.%stransformer.layers.%llu", i < v.vision.layers ? "" : "global_",
                         (unsigned long long)(i < v.vision.layers ? i : i - v.vision.layers));
                layers_sum += measured(emb, pf);
            }
            if (measured(emb, "vision_model") + measured(emb, "multi_modal_projector") != e + h + layers_sum)
                fail_msg("%s: the tower has bytes filed under other modules", path);
            ty->head_bytes += h;
        }
        uint64_t n = global ? v.vision.global_layers : v.vision.layers;
        for (uint64_t i = 0; i < n; i++) {
            char prefix[80];
            snprintf(prefix, sizeof prefix, "vision_model.%stransformer.layers.%llu", global ? "global_" : "",
                     (unsigned long long)i);
            uint64_t got = measured(emb, prefix), want = layer + (!global && i == 0 && layer ? mask : 0);
            if (got != want)
                fail_msg("%s: %s keeps %llu bytes measured, %llu planned", path, prefix, (unsigned long long)got,
                         (unsigned long long)want);
            *(global ? &ty->global_checked : &ty->local_checked) += 1;
            ty->frozen_checked += frozen && layer > 0;
            ty->zero_checked += layer == 0;
        }
    }
    ty->files++;
    cJSON_Delete(j);
}

static void mllama_saved(void **state)
{
    (void)state;
    mllama_tally ty = {0};
    each_json_file(GCKPT_TEST_DATA "/hf-vlm", "mllama-", check_mllama, &ty);
    printf("mllama-: %d fixtures, %d local and %d global encoder layers (%d frozen under checkpointing, %d saving "
           "nothing): saved bytes exact\n",
           ty.files, ty.local_checked, ty.global_checked, ty.frozen_checked, ty.zero_checked);
    assert_int_equal(ty.files, 42 + 12); /* the grid and the two-image cases */
    assert_true(ty.head_bytes > 0 && ty.frozen_checked > 0 && ty.zero_checked > 0 && ty.global_checked > 0 &&
                ty.local_checked > ty.global_checked);
}

/* The bytes the block's ops save of tensors made outside it, in the embedding section (the
 * inputs every layer reads: one storage, filed by the probe under the first layer that saves
 * it). */
static uint64_t shared_saved_in(const gckpt_ctx *ctx, const gckpt_recipe *r, int sec)
{
    static bool seen[GCKPT_MAX_TENSORS];
    memset(seen, 0, sizeof seen);
    uint64_t sum = 0;
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++)
        for (int k = 0; k < r->op[i].nsaved; k++) {
            int t = r->op[i].saved[k];
            if (t < 0 || seen[t] || r->t[t].section != GCKPT_SEC_EMBED || r->t[t].kind == GCKPT_T_PARAM) continue;
            seen[t] = true;
            sum += ctx->raw[t];
        }
    return sum;
}

static uint64_t shared_saved(const gckpt_ctx *ctx, const gckpt_recipe *r)
{
    return shared_saved_in(ctx, r, GCKPT_SEC_BLOCK);
}

/* mllama's text cross-attention layer (core/recipe_mllama.c, R-VLM-31) against text layer 1 of
 * every mllama fixture where it is not checkpointed: the layer's saved bytes plus what it
 * saves of its inputs from outside (cross_attention_states, the masks: one storage for every
 * cross-attention layer, so the first one's). Checkpointed: its hidden input only (the
 * frame's record, R-VLM-31), offloaded: nothing. */
typedef struct {
    int plain, checkpointed;
} cross_tally;

static void check_cross(const char *path, const char *name, void *arg)
{
    (void)name;
    cross_tally *ty = arg;
    cJSON *j = read_json(path);
    const cJSON *set = at(j, "setting");
    char *cfg = cJSON_PrintUnformatted(at(j, "config"));
    gckpt_vlm v;
    gckpt_err err;
    if (!gckpt_vlm_parse(path, cfg, &v, &err)) fail_msg("%s: %s", path, err.msg);
    free(cfg);
    int p = hf_precision_from(at(set, "precision")->valuestring);
    gckpt_target target = cJSON_IsString(at(set, "autocast_lists")) ? GCKPT_TARGET_CPU_CUDA_LISTS : GCKPT_TARGET_CPU;
    uint64_t images = (uint64_t)at(at(j, "images"), "per_sample")->valuedouble;
    uint64_t b = (uint64_t)at(set, "micro_batch")->valuedouble, seq = (uint64_t)at(set, "seq")->valuedouble;
    static gckpt_recipe r;
    static gckpt_ctx ctx;
    gckpt_setting s = {.seq = seq, .micro_batch = b, .grad_accum = 1, .precision = (gckpt_precision)p,
                       .attention = GCKPT_SDPA};
    if (!gckpt_mllama_cross_recipe_build(&v, (gckpt_precision)p, target, seq, images, &r, &err) ||
        !gckpt_ctx_init(&ctx, &v.text, &g_dev, &r, &s, &err))
        fail_msg("%s: %s", path, err.msg);
    const cJSON *layers = at(at(j, "saved"), "layers"), *l;
    cJSON_ArrayForEach(l, layers)
    {
        int i = (int)at(l, "index")->valuedouble;
        if (!(v.cross[i / 8] >> (i % 8) & 1)) continue;
        char prefix[64];
        snprintf(prefix, sizeof prefix, "language_model.layers.%d", i);
        uint64_t got = measured(at(l, "tensors"), prefix), want;
        if (cJSON_IsTrue(at(l, "checkpointed"))) {
            want = cJSON_IsTrue(at(set, "offload")) ? 0 : ctx.raw[r.block_in];
            ty->checkpointed++;
        } else {
            want = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_BLOCK) + shared_saved(&ctx, &r);
            ty->plain++;
        }
        if (got != want)
            fail_msg("%s: cross-attention layer %d keeps %llu bytes measured, %llu planned", path, i,
                     (unsigned long long)got, (unsigned long long)want);
    }
    cJSON_Delete(j);
}

static void mllama_cross_saved(void **state)
{
    (void)state;
    cross_tally ty = {0};
    each_json_file(GCKPT_TEST_DATA "/hf-vlm", "mllama-", check_cross, &ty);
    printf("mllama-: %d cross-attention layers plain, %d checkpointed: saved bytes exact\n", ty.plain,
           ty.checkpointed);
    assert_int_equal(ty.plain + ty.checkpointed, 42 + 12);
    assert_true(ty.plain > 0 && ty.checkpointed > 0);
}

/* mllama's whole text model with its cross-attention layers in place (gckpt_mllama_text_model,
 * block type GCKPT_BLOCK_CROSS) against every text layer of every mllama fixture: a plain
 * layer its block type's section, the first plain self-attention layer the rotary pair too
 * and the first plain cross-attention layer the inputs it saves from outside (hf_compare's
 * charging of shared tensors); a checkpointed one its input, offloaded nothing. */
static void check_text(const char *path, const char *name, void *arg)
{
    (void)name;
    int *layers_checked = arg;
    cJSON *j = read_json(path);
    const cJSON *set = at(j, "setting");
    char *cfg = cJSON_PrintUnformatted(at(j, "config"));
    gckpt_vlm v;
    gckpt_err err;
    if (!gckpt_vlm_parse(path, cfg, &v, &err)) fail_msg("%s: %s", path, err.msg);
    free(cfg);
    int p = hf_precision_from(at(set, "precision")->valuestring);
    gckpt_target target = cJSON_IsString(at(set, "autocast_lists")) ? GCKPT_TARGET_CPU_CUDA_LISTS : GCKPT_TARGET_CPU;
    const cJSON *en = at(set, "every_n_layers");
    uint32_t every_n = cJSON_IsNumber(en) ? (uint32_t)en->valuedouble : 0;
    bool offload = cJSON_IsTrue(at(set, "offload"));
    uint64_t images = (uint64_t)at(at(j, "images"), "per_sample")->valuedouble;
    static gckpt_model m;
    gckpt_mllama_text_model(&v, images, &m);
    gckpt_setting s = {.seq = (uint64_t)at(set, "seq")->valuedouble,
                       .micro_batch = (uint64_t)at(set, "micro_batch")->valuedouble, .grad_accum = 1,
                       .precision = (gckpt_precision)p, .attention = GCKPT_SDPA, .every_n = every_n, .offload = offload};
    static gckpt_recipe r;
    static gckpt_ctx ctx;
    gckpt_recipe_build_loss(&m, s.precision, GCKPT_SDPA, target, &s.peft, s.seq, GCKPT_LOSS_HF, 0, &r);
    if (!gckpt_ctx_init(&ctx, &m, &g_dev, &r, &s, &err)) fail_msg("%s: %s", path, err.msg);
    uint64_t rope = ctx.raw[r.rope[0]] + ctx.raw[r.rope[1]];
    bool rope_charged = false, cross_charged = false;
    const cJSON *l;
    cJSON_ArrayForEach(l, at(at(j, "saved"), "layers"))
    {
        int i = (int)at(l, "index")->valuedouble;
        char prefix[64];
        snprintf(prefix, sizeof prefix, "language_model.layers.%d", i);
        uint64_t got = measured(at(l, "tensors"), prefix), want;
        bool cross = gckpt_layer_cross(&m, (uint64_t)i);
        if (cJSON_IsTrue(at(l, "checkpointed"))) {
            want = offload ? 0 : ctx.raw[r.block_in];
        } else {
            int sec = gckpt_layer_section(&r, &m, GCKPT_SDPA, (uint64_t)i);
            want = gckpt_section_saved_bytes(&ctx, sec);
            if (cross && !cross_charged) want += shared_saved_in(&ctx, &r, sec), cross_charged = true;
            if (!cross && !rope_charged) want += rope, rope_charged = true;
        }
        if (got != want)
            fail_msg("%s: text layer %d (%s) keeps %llu bytes measured, %llu planned", path, i,
                     cross ? "cross-attention" : "self-attention", (unsigned long long)got, (unsigned long long)want);
        (*layers_checked)++;
    }
    cJSON_Delete(j);
}

static void mllama_text_saved(void **state)
{
    (void)state;
    int n = 0;
    each_json_file(GCKPT_TEST_DATA "/hf-vlm", "mllama-", check_text, &n);
    printf("mllama-: %d text layers, the cross-attention ones in place: saved bytes exact\n", n);
    assert_int_equal(n, (42 + 12) * 4);
}

/* Llama-3.2-11B-Vision's config (tests/data/configs): R-VLM-30's rows and R-VLM-31's keys in
 * closed form. A 560 / 14 tile is 1600 patches and a class token, padded to 1608; an image is
 * its 4 tiles as one sequence, 6432 rows, whose aspect-ratio mask is 6432^2 values in the
 * tower's dtype; the cross-attention layers read 4 x 1601 keys per image. */
static void mllama_real_shapes(void **state)
{
    (void)state;
    gckpt_err err;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/configs/llama-3.2-11b-vision.json", 1u << 20, &err);
    if (!text) fail_msg("%s", err.msg);
    gckpt_vlm v;
    if (!gckpt_vlm_parse("llama-3.2-11b-vision.json", text, &v, &err)) fail_msg("%s", err.msg);
    free(text);
    assert_int_equal(gckpt_vision_positions(&v), 4 * 1608);
    assert_int_equal(gckpt_mllama_cross_keys(&v, 1), 4 * 1601);
    assert_int_equal(gckpt_mllama_cross_keys(&v, 2), 2 * 4 * 1601);
    gckpt_model tower;
    gckpt_vision_tower_model(&v, &tower);
    static gckpt_recipe r;
    static gckpt_ctx ctx;
    assert_true(gckpt_vision_layer_recipe_build(&v, &tower, GCKPT_BF16, GCKPT_TARGET_CUDA, GCKPT_TOWER_TRAINED, false,
                                                &r, &err));
    gckpt_setting s = {.seq = gckpt_vision_positions(&v), .micro_batch = 1, .grad_accum = 1, .precision = GCKPT_BF16,
                       .attention = GCKPT_SDPA};
    if (!gckpt_ctx_init(&ctx, &tower, &g_dev, &r, &s, &err)) fail_msg("%s", err.msg);
    uint64_t mask = 0;
    for (int i = 0; i < r.nop; i++)
        if (r.op[i].prim == GCKPT_P_SOURCE && r.op[i].source == GCKPT_SRC_MASK) mask = ctx.raw[r.op[i].out[0]];
    assert_int_equal(mask, 6432ull * 6432ull * 2);
    uint64_t local = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_BLOCK), embed = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_EMBED),
             head = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD);
    assert_true(gckpt_vision_layer_recipe_build(&v, &tower, GCKPT_BF16, GCKPT_TARGET_CUDA, GCKPT_TOWER_TRAINED, true, &r,
                                                &err));
    if (!gckpt_ctx_init(&ctx, &tower, &g_dev, &r, &s, &err)) fail_msg("%s", err.msg);
    uint64_t global = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_BLOCK);
    /* a global layer's two gates: each mul keeps its bf16 [6432, 1280] input and the 2-byte tanh */
    assert_int_equal(global - local, 2 * (6432ull * 1280 * 2 + 2));
    printf("Llama-3.2-11B-Vision, one image, bf16, the tower trained: the aspect-ratio mask %llu B, a local layer "
           "%llu B, a global one %llu B, the tower with its head %llu B saved (never checkpointed)\n",
           (unsigned long long)mask, (unsigned long long)local, (unsigned long long)global,
           (unsigned long long)(embed + mask + v.vision.layers * local + v.vision.global_layers * global + head));
    /* the builders refuse what they do not trace, in one line */
    assert_false(gckpt_mllama_cross_recipe_build(&v, GCKPT_BF16, GCKPT_TARGET_CUDA, 64, 0, &r, &err));
    assert_non_null(strstr(err.msg, "no cross-attention layer"));
    assert_null(strchr(err.msg, '\n'));
    v.ncross = 0;
    assert_false(gckpt_mllama_cross_recipe_build(&v, GCKPT_BF16, GCKPT_TARGET_CUDA, 64, 1, &r, &err));
    v.vision.global_layers = 0;
    assert_false(gckpt_vision_layer_recipe_build(&v, &tower, GCKPT_BF16, GCKPT_TARGET_CUDA, GCKPT_TOWER_TRAINED, true,
                                                 &r, &err));
    assert_non_null(strstr(err.msg, "num_global_layers"));
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", &g_dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(mllama_saved), cmocka_unit_test(mllama_cross_saved),
                                       cmocka_unit_test(mllama_text_saved), cmocka_unit_test(mllama_real_shapes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
