/* The vision towers' recipe (core/recipe_vision.c) against every llava, llava_next, gemma3
 * and qwen2_5_vl fixture of tests/data/hf-vlm (tools/hf_probe/vlm_cases.py: fp32, bf16 and amp-bf16 with
 * CUDA's lists; every_n off / 1 / 2 / 3; offload; the tower trained and frozen; one and two
 * images; LLaVA-NeXT's anyres tiles, gckpt_image_tiles against pixel_values' tile
 * dimension). Exact, per fixture: the bytes each vision layer keeps for its backward (a
 * checkpointed layer its input, nothing offloaded; a plain one the recipe's block; a frozen
 * tower R-VLM-3's), the tower's embedding's, and llava's tail and projector (post_layernorm,
 * multi_modal_projector: the head section), which the probe files under the last vision
 * layer next to masked_scatter's mask (the text side's); Gemma 3's head the same way
 * (post_layernorm, Gemma3MultiModalProjector), less SigLIP's pooling head (vision_tower.head:
 * its graph goes before the text model runs, FINDINGS R-VLM-13; only its parameters are
 * traced). Qwen2.5-VL: its tower at the image's patches (pixel_values' rows against
 * gckpt_vision_image_positions), its blocks, the rotary tables (filed under the first plain
 * block), its embedding and the patch merger with the reverse index (the head). mllama's: tests/test_mllama_recipe.c. */
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

typedef struct {
    int files, layers_checked, plain_checked, frozen_plain_checked, deepstack_checked;
    uint64_t tail_bytes;
} tally;

/* Where the probe files each tower's tensors (module paths), by tower kind: the layers
 * (printf with the index), the tower (its embedding's, and under the last layer its head's
 * when the head is not a module of its own), the head's modules. */
typedef struct {
    const char *layer_fmt, *tower, *head[2];
} tower_modules;
static const tower_modules modules_of[GCKPT_NTOWER] = {
    [GCKPT_TOWER_CLIP] = {"vision_tower.encoder.layers.%llu", "vision_tower",
                          {"vision_tower.post_layernorm", "multi_modal_projector"}},
    [GCKPT_TOWER_SIGLIP] = {"vision_tower.encoder.layers.%llu", "vision_tower",
                            {"vision_tower.post_layernorm", "multi_modal_projector"}},
    /* the merger, and the reverse index (module "visual" itself) */
    [GCKPT_TOWER_QWEN2_5] = {"visual.blocks.%llu", "visual", {"visual"}},
    /* the merger (the deepstack mergers are filed under their blocks: checked apart) */
    [GCKPT_TOWER_QWEN3] = {"visual.blocks.%llu", "visual", {"visual.merger"}},
};

/* Whether an op of section sec saves tensor t's storage. */
static bool saves(const gckpt_ctx *ctx, const gckpt_recipe *r, int sec, int t)
{
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++)
        for (int k = 0; k < r->op[i].nsaved; k++)
            if (ctx->storage[r->op[i].saved[k]] == ctx->storage[t]) return true;
    return false;
}

/* Qwen3-VL: the position of block i among deepstack_visual_indexes, or -1 */
static int deepstack_of(const gckpt_vlm *v, uint64_t i)
{
    for (unsigned k = 0; k < v->vision.ndeepstack; k++)
        if (v->vision.deepstack[k] == i) return (int)k;
    return -1;
}

/* Bytes the block's ops save of tensors made before it (the embedding's rotary tables, every
 * block's: the probe files them under the first block that saves them, a plain one). */
static uint64_t shared_saved(const gckpt_ctx *ctx, const gckpt_recipe *r)
{
    bool seen[GCKPT_MAX_TENSORS] = {false};
    uint64_t sum = 0;
    for (int i = r->sec_begin[GCKPT_SEC_BLOCK]; i < r->sec_end[GCKPT_SEC_BLOCK]; i++)
        for (int k = 0; k < r->op[i].nsaved; k++) {
            int t = ctx->storage[r->op[i].saved[k]];
            if (seen[t] || r->t[t].section != GCKPT_SEC_EMBED || r->t[t].kind == GCKPT_T_PARAM) continue;
            seen[t] = true;
            sum += ctx->raw[t];
        }
    return sum;
}

static void check_fixture(const char *path, tally *ty)
{
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
    bool offload = cJSON_IsTrue(at(set, "offload"));
    bool frozen = !strcmp(at(set, "vision_tower")->valuestring, "frozen");
    /* the tower's images: each image's tiles (LLaVA-NeXT's anyres; the processor's
     * pixel_values [b, tiles, C, H, W] when every image has as many) */
    const cJSON *hw = at(at(j, "images"), "size_hw");
    uint64_t tiles = gckpt_image_tiles(&v, (uint64_t)cJSON_GetArrayItem(hw, 0)->valuedouble,
                                       (uint64_t)cJSON_GetArrayItem(hw, 1)->valuedouble);
    const cJSON *pv = at(at(at(at(j, "images"), "inputs"), "pixel_values"), "shape");
    if (cJSON_GetArraySize(pv) == 5 && (uint64_t)cJSON_GetArrayItem(pv, 1)->valuedouble != tiles)
        fail_msg("%s: %llu tiles planned, pixel_values has %.0f", path, (unsigned long long)tiles,
                 cJSON_GetArrayItem(pv, 1)->valuedouble);
    if (cJSON_GetArraySize(pv) == 4 && tiles != 1) fail_msg("%s: tiles without a tile dimension", path);
    uint64_t images = (uint64_t)at(at(j, "images"), "per_sample")->valuedouble * tiles;
    uint64_t b = (uint64_t)at(set, "micro_batch")->valuedouble;
    /* the tower's positions per image: Qwen2.5-VL's patches of the image's smart_resize'd
     * grid, which pixel_values [patches, C T p^2] lists for every image of the batch */
    uint64_t positions = gckpt_vision_image_positions(&v, (uint64_t)cJSON_GetArrayItem(hw, 0)->valuedouble,
                                                      (uint64_t)cJSON_GetArrayItem(hw, 1)->valuedouble);
    if (cJSON_GetArraySize(pv) == 2 && (uint64_t)cJSON_GetArrayItem(pv, 0)->valuedouble != b * images * positions)
        fail_msg("%s: %llu patches per image planned, pixel_values has %.0f rows for %llu images", path,
                 (unsigned long long)positions, cJSON_GetArrayItem(pv, 0)->valuedouble,
                 (unsigned long long)(b * images));
    const tower_modules *mods = &modules_of[v.vision.tower];
    if (!mods->layer_fmt) fail_msg("%s: no module paths for this tower", path);

    gckpt_model tower;
    gckpt_vision_tower_model(&v, &tower);
    gckpt_tower_grad g = !frozen ? GCKPT_TOWER_TRAINED : every_n ? GCKPT_TOWER_FROZEN_HOOKED : GCKPT_TOWER_FROZEN;
    static gckpt_recipe r;
    if (!gckpt_vision_recipe_build(&v, &tower, (gckpt_precision)p, target, g, &r, &err))
        fail_msg("%s: %s", path, err.msg);
    gckpt_setting s = {.seq = positions, .micro_batch = b * images, .grad_accum = 1,
                       .precision = (gckpt_precision)p, .attention = GCKPT_SDPA, .every_n = every_n,
                       .offload = offload};
    static gckpt_ctx ctx;
    if (!gckpt_ctx_init(&ctx, &tower, &g_dev, &r, &s, &err)) fail_msg("%s: %s", path, err.msg);

    /* the parameters: the tower's and the projector's (LLaVA-NeXT's image_newline with them),
     * as the reader counts them */
    bool head_traced = r.sec_end[GCKPT_SEC_HEAD] > r.sec_begin[GCKPT_SEC_HEAD];
    uint64_t traced = 0, counted = gckpt_vision_tower_params(&v).params + gckpt_vision_projector_params(&v).params;
    for (int i = 0; i < ctx.params.n; i++) traced += ctx.params.p[i].copies * ctx.params.p[i].weight.numel;
    if (traced != counted)
        fail_msg("%s: the tower recipe has %llu parameters, the reader counts %llu", path, (unsigned long long)traced,
                 (unsigned long long)counted);

    /* which vision layers are checkpointed: the probe's, and R-VLM-1's cursor over the towers */
    uint64_t towers[2];
    gckpt_vlm_towers(&v, towers);
    const cJSON *ckl = at(at(at(j, "towers"), "vision"), "checkpointed");
    bool ck[GCKPT_MAX_LAYERS] = {false};
    const cJSON *e;
    cJSON_ArrayForEach(e, ckl) ck[(int)e->valuedouble] = true;
    uint64_t set_ck[GCKPT_MAX_LAYERS];
    size_t nck = gckpt_tower_checkpointed(every_n, GCKPT_CKPT_TOWERS_ALL, towers, 0, set_ck, GCKPT_MAX_LAYERS);
    if (nck != (size_t)cJSON_GetArraySize(ckl)) fail_msg("%s: checkpointed vision layers", path);
    for (size_t k = 0; k < nck; k++)
        if (!ck[set_ck[k]]) fail_msg("%s: vision layer %llu is not checkpointed", path, (unsigned long long)set_ck[k]);

    const cJSON *layers = at(at(j, "saved"), "layers");
    uint64_t plain = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_BLOCK), shared = shared_saved(&ctx, &r);
    /* Qwen3-VL's deepstack mergers: one's recipe; when its norm keeps the block's output
     * itself (no autocast copy), the next block's input is that tensor, filed under the merger */
    uint64_t ds_bytes = 0;
    bool ds_keeps_out = false;
    if (v.vision.ndeepstack) {
        static gckpt_recipe dr;
        static gckpt_ctx dctx;
        if (!gckpt_vision_deepstack_recipe_build(&v, &tower, (gckpt_precision)p, target, g, &dr, &err) ||
            !gckpt_ctx_init(&dctx, &tower, &g_dev, &dr, &s, &err))
            fail_msg("%s: %s", path, err.msg);
        ds_bytes = gckpt_section_saved_bytes(&dctx, GCKPT_SEC_HEAD);
        ds_keeps_out = saves(&dctx, &dr, GCKPT_SEC_HEAD, dr.head_in);
    }
    bool plain_keeps_in = saves(&ctx, &r, GCKPT_SEC_BLOCK, r.block_in);
    bool first_plain = true;
    for (uint64_t i = 0; i < towers[0]; i++) {
        const cJSON *l = cJSON_GetArrayItem(layers, (int)i);
        char prefix[64];
        snprintf(prefix, sizeof prefix, mods->layer_fmt, (unsigned long long)i);
        uint64_t got = measured(at(l, "tensors"), prefix);
        uint64_t want = ck[i] ? (offload ? 0 : ctx.raw[r.block_in]) : plain + (first_plain && plain ? shared : 0);
        if (i > 0 && deepstack_of(&v, i - 1) >= 0 && ds_keeps_out && (ck[i] ? !offload : plain_keeps_in))
            want -= ctx.raw[r.block_in];
        if (!ck[i] && plain) first_plain = false;
        int ds = deepstack_of(&v, i);
        if (ds >= 0) {
            char dp[64];
            snprintf(dp, sizeof dp, "visual.deepstack_merger_list.%d", ds);
            if (measured(at(l, "tensors"), dp) != ds_bytes)
                fail_msg("%s: deepstack merger %d keeps %llu bytes measured, %llu planned", path, ds,
                         (unsigned long long)measured(at(l, "tensors"), dp), (unsigned long long)ds_bytes);
            ty->deepstack_checked++;
        }
        if (got != want)
            fail_msg("%s: vision layer %llu (%s) keeps %llu bytes measured, %llu planned", path,
                     (unsigned long long)i, ck[i] ? "checkpointed" : "plain", (unsigned long long)got,
                     (unsigned long long)want);
        /* nothing else is filed under a vision layer but, under the last, the tail and the
         * projector, and masked_scatter's bool mask of the text positions (module "model": the
         * text side's, b x seq bytes; one fixture's lacks it, a storage the probe left out) */
        uint64_t rest = measured(at(l, "tensors"), "") - got - measured(at(l, "tensors"), "model") -
                        measured(at(l, "tensors"), "vision_tower.head");
        uint64_t tail = (i + 1 == towers[0] ? gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD) : 0) +
                        (ds >= 0 ? ds_bytes : 0);
        if ((i + 1 < towers[0] || head_traced) && rest != tail)
            fail_msg("%s: vision layer %llu has %llu more bytes filed, %llu expected", path, (unsigned long long)i,
                     (unsigned long long)rest, (unsigned long long)tail);
        ty->layers_checked++;
        ty->plain_checked += !ck[i];
        ty->frozen_plain_checked += !ck[i] && frozen && plain > 0;
    }
    /* the tail and the projector, filed under the last vision layer */
    const cJSON *tail = at(cJSON_GetArrayItem(layers, (int)towers[0] - 1), "tensors");
    uint64_t tail_got = 0;
    for (int k = 0; k < 2 && mods->head[k]; k++) tail_got += measured(tail, mods->head[k]);
    if (v.vision.tower == GCKPT_TOWER_QWEN2_5) { /* "visual" less the last block */
        char prefix[64];
        snprintf(prefix, sizeof prefix, mods->layer_fmt, (unsigned long long)(towers[0] - 1));
        tail_got -= measured(tail, prefix);
    }
    if (head_traced && tail_got != gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD))
        fail_msg("%s: post_layernorm and the projector keep %llu bytes measured, %llu planned", path,
                 (unsigned long long)tail_got, (unsigned long long)gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD));
    const cJSON *emb = at(at(at(j, "saved"), "embedding"), "tensors");
    uint64_t got = measured(emb, mods->tower), want = gckpt_section_saved_bytes(&ctx, GCKPT_SEC_EMBED);
    if (got != want)
        fail_msg("%s: the tower's embedding keeps %llu bytes measured, %llu planned", path, (unsigned long long)got,
                 (unsigned long long)want);
    /* the rest of the embedding's is the text embedding's: the int64 input ids (and Gemma's
     * 0-d normalizer) */
    if (measured(emb, "") - got != measured(emb, "language_model.embed_tokens") ||
        measured(emb, "language_model.embed_tokens") < 8 * b * (uint64_t)at(set, "seq")->valuedouble)
        fail_msg("%s: the embedding has other bytes than the tower's and the input ids", path);
    ty->tail_bytes += gckpt_section_saved_bytes(&ctx, GCKPT_SEC_HEAD);
    ty->files++;
    cJSON_Delete(j);
}

static void check_one(const char *path, const char *name, void *ty)
{
    (void)name;
    check_fixture(path, ty);
}

static tally family_saved(const char *prefix)
{
    tally ty = {0};
    each_json_file(GCKPT_TEST_DATA "/hf-vlm", prefix, check_one, &ty);
    printf("%s: %d fixtures, %d vision layers (%d plain, %d of them frozen under checkpointing), the tower's "
           "embedding%s: saved bytes exact\n",
           prefix, ty.files, ty.layers_checked, ty.plain_checked, ty.frozen_plain_checked,
           ty.tail_bytes ? ", post_layernorm and the projector" : " (the head is not traced)");
    return ty;
}

static void llava_saved(void **state)
{
    (void)state;
    tally ty = family_saved("llava-");
    assert_int_equal(ty.files, 54);
    /* every kind of layer was compared: plain trained, plain frozen (hooked), checkpointed */
    assert_true(ty.tail_bytes > 0 &&ty.frozen_plain_checked > 0 && ty.plain_checked > ty.frozen_plain_checked &&
                ty.layers_checked > ty.plain_checked);
}

/* LLaVA-NeXT: the same tower and projector on every anyres tile */
static void llava_next_saved(void **state)
{
    (void)state;
    tally ty = family_saved("llava_next-");
    assert_int_equal(ty.files, 42);
    assert_true(ty.tail_bytes > 0 && ty.frozen_plain_checked > 0 && ty.plain_checked > ty.frozen_plain_checked &&
                ty.layers_checked > ty.plain_checked);
}

/* Gemma 3: SigLIP's embedding (no class token, no pre-norm, a conv bias), layers,
 * post_layernorm and the pooled projector */
static void gemma3_saved(void **state)
{
    (void)state;
    tally ty = family_saved("gemma3-");
    assert_int_equal(ty.files, 42);
    assert_true(ty.tail_bytes > 0 && ty.frozen_plain_checked > 0 && ty.plain_checked > ty.frozen_plain_checked &&
                ty.layers_checked > ty.plain_checked);
}

/* Qwen2.5-VL: the Conv3d embedding, the window permutation and rotary tables, the SiLU
 * blocks (windowed and full-attention alike), the patch merger (R-VLM-20..22) */
static void qwen2_5_vl_saved(void **state)
{
    (void)state;
    tally ty = family_saved("qwen2_5_vl-");
    assert_int_equal(ty.files, 54);
    assert_true(ty.tail_bytes > 0 && ty.frozen_plain_checked > 0 && ty.plain_checked > ty.frozen_plain_checked &&
                ty.layers_checked > ty.plain_checked);
}

/* Qwen3-VL: the Conv3d embedding with the interpolated learned positions and the rotary
 * tables, the LayerNorm / GELU blocks, the merger and the deepstack mergers (R-VLM-50..52) */
static void qwen3_vl_saved(void **state)
{
    (void)state;
    tally ty = family_saved("qwen3_vl-");
    assert_int_equal(ty.files, 42);
    /* the fixtures' blocks 0 and 1 have deepstack mergers: two per fixture */
    assert_int_equal(ty.deepstack_checked, 2 * 42);
    assert_true(ty.tail_bytes > 0 && ty.plain_checked > ty.frozen_plain_checked && ty.layers_checked > ty.plain_checked);
}

/* Qwen2.5-VL's attention work: the SDPA calls the probe saw (each chunk's logsumexp [1, heads,
 * len]: a window's, or an image's in a full-attention block) against
 * gckpt_vision_attention_share, over every plain trained fp32 fixture; and Qwen2.5-VL-7B at
 * 1080 x 1920 in closed form (a 52 x 94 patch grid, 26 x 47 merged, windows of 4 x 4 merged
 * units: rows 6 x 4 + 2, columns 11 x 4 + 3; blocks 7, 15, 23, 31 full) */
static void qwen2_5_vl_windows(void **state)
{
    (void)state;
    const char *names[] = {"qwen2_5_vl-fp32-sdpa-noff-plain-vistrained-b2s32.json",
                           "qwen2_5_vl-fp32-sdpa-noff-plain-vistrained-b2s48-i2.json"};
    for (size_t f = 0; f < 2; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/hf-vlm/%s", GCKPT_TEST_DATA, names[f]);
        cJSON *j = read_json(path);
        char *cfg = cJSON_PrintUnformatted(at(j, "config"));
        gckpt_vlm v;
        gckpt_err err;
        if (!gckpt_vlm_parse(path, cfg, &v, &err)) fail_msg("%s", err.msg);
        free(cfg);
        const cJSON *hw = at(at(j, "images"), "size_hw"), *layers = at(at(j, "saved"), "layers"), *t;
        uint64_t h = (uint64_t)cJSON_GetArrayItem(hw, 0)->valuedouble, w = (uint64_t)cJSON_GetArrayItem(hw, 1)->valuedouble;
        double images = at(at(j, "images"), "per_sample")->valuedouble * at(at(j, "setting"), "micro_batch")->valuedouble;
        double S = (double)gckpt_vision_image_positions(&v, h, w), sum = 0;
        for (uint64_t i = 0; i < v.vision.layers; i++)
            cJSON_ArrayForEach(t, at(cJSON_GetArrayItem(layers, (int)i), "tensors"))
            {
                const cJSON *sh = at(t, "shape");
                if (strstr(at(t, "op")->valuestring, "scaled_dot_product") && cJSON_GetArraySize(sh) == 3) {
                    double len = cJSON_GetArrayItem(sh, 2)->valuedouble;
                    sum += len * len;
                }
            }
        double measured = sum / ((double)v.vision.layers * images * S * S), planned = gckpt_vision_attention_share(&v, h, w);
        printf("%s: attention share measured %.6f planned %.6f\n", names[f], measured, planned);
        assert_true(measured < 1.0 && fabs(measured - planned) <= 1e-12);
        cJSON_Delete(j);
    }
    gckpt_vlm v;
    gckpt_err err;
    cJSON *cfg = read_json(GCKPT_TEST_DATA "/configs/qwen2.5-vl-7b.json");
    char *text = cJSON_PrintUnformatted(cfg);
    if (!gckpt_vlm_parse("qwen2.5-vl-7b.json", text, &v, &err)) fail_msg("%s", err.msg);
    free(text);
    cJSON_Delete(cfg);
    double windowed = 16.0 * (6 * 16 + 4) * (11 * 16 + 9) / (4888.0 * 4888.0);
    assert_true(fabs(gckpt_vision_attention_share(&v, 1080, 1920) - (4 + 28 * windowed) / 32) <= 1e-12);
    assert_true(gckpt_vision_attention_share(&v, 0, 0) == 1.0);
}

/* the tower's attention has no causal mask: QK^T and PV over the whole s x s scores, 2 x 2 x
 * heads x head_dim FLOPs per b x s x s (the causal kernel's half) */
static void attention_flops(void **state)
{
    (void)state;
    cJSON *j = read_json(GCKPT_TEST_DATA "/hf-vlm/llava-fp32-sdpa-noff-plain-vistrained-b2s32.json");
    char *cfg = cJSON_PrintUnformatted(at(j, "config"));
    gckpt_vlm v;
    gckpt_err err;
    if (!gckpt_vlm_parse("fixture", cfg, &v, &err)) fail_msg("%s", err.msg);
    free(cfg);
    cJSON_Delete(j);
    gckpt_model tower;
    gckpt_vision_tower_model(&v, &tower);
    static gckpt_recipe r;
    assert_true(gckpt_vision_recipe_build(&v, &tower, GCKPT_FP32, GCKPT_TARGET_CPU, GCKPT_TOWER_TRAINED, &r, &err));
    int n = 0, conv = 0;
    uint64_t patches = (v.vision.image_size / v.vision.patch) * (v.vision.image_size / v.vision.patch);
    for (int i = 0; i < r.nop; i++) {
        if (r.op[i].prim == GCKPT_P_SDPA) {
            assert_true(r.op[i].fBSS == 4.0 * (double)v.vision.hidden);
            n++;
        }
        /* the patch conv: 2 x (C p^2) x D per patch, the class token's row none: fT x positions */
        if (r.op[i].prim == GCKPT_P_PATCH_CONV) {
            double want = 2.0 * (double)(v.vision.channels * v.vision.patch * v.vision.patch) *
                          (double)v.vision.hidden * (double)patches;
            assert_true(fabs(r.op[i].fT * (double)gckpt_vision_positions(&v) - want) <= 1e-9 * want);
            conv++;
        }
    }
    assert_int_equal(n, 1);
    assert_int_equal(conv, 1);
}

/* a tower kind without a recipe, and an mllama tower its config cannot trace: one line each */
static void other_towers(void **state)
{
    (void)state;
    gckpt_vlm v;
    memset(&v, 0, sizeof v);
    snprintf(v.model_type, sizeof v.model_type, "mllama");
    v.vision.tower = GCKPT_NTOWER;
    gckpt_model tower;
    memset(&tower, 0, sizeof tower);
    static gckpt_recipe r;
    gckpt_err err;
    assert_false(gckpt_vision_recipe_build(&v, &tower, GCKPT_FP32, GCKPT_TARGET_CPU, GCKPT_TOWER_TRAINED, &r, &err));
    assert_non_null(strstr(err.msg, "CLIP"));
    v.vision.tower = GCKPT_TOWER_MLLAMA;
    gckpt_vision_tower_model(&v, &tower);
    assert_false(gckpt_vision_recipe_build(&v, &tower, GCKPT_FP32, GCKPT_TARGET_CPU, GCKPT_TOWER_TRAINED, &r, &err));
    assert_non_null(strstr(err.msg, "patch_size"));
    v.vision.image_size = 28;
    v.vision.patch = 14;
    assert_false(gckpt_vision_recipe_build(&v, &tower, GCKPT_FP32, GCKPT_TARGET_CPU, GCKPT_TOWER_TRAINED, &r, &err));
    assert_non_null(strstr(err.msg, "num_global_layers"));
    assert_null(strchr(err.msg, '\n'));
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load(GCKPT_TEST_DATA "/devices/cpu-exact.json", &g_dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(llava_saved), cmocka_unit_test(llava_next_saved),
                                       cmocka_unit_test(gemma3_saved), cmocka_unit_test(qwen2_5_vl_saved),
                                       cmocka_unit_test(qwen2_5_vl_windows), cmocka_unit_test(qwen3_vl_saved),
                                       cmocka_unit_test(attention_flops),
                                       cmocka_unit_test(other_towers)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
