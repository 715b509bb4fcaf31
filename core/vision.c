/* The vision side of a vision-language config (gckpt/core/vision.h): the VLM readers, the
 * tower table (per tower kind: its config keys and defaults, parameters, checkpointing
 * layers, image token rule) and the image-size option. transformers 5.24 (FINDINGS
 * R-VLM-*). */
#include "gckpt/core/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/families.h"
#include "gckpt/util/jsonget.h"
#include "model_parse.h"

/* ---- the towers ---------------------------------------------------------------------- */

typedef struct {
    const char *model_type; /* vision_config.model_type */
    bool (*read)(const char *f, const cJSON *j, gckpt_vision *v, gckpt_err *err);
    /* the tower's parameters up to its first `layers` layers; with_tail: and what follows
     * the last one (those that make no hidden state the projector reads) */
    gckpt_param_tally (*tally)(const gckpt_vision *v, uint64_t layers, bool with_tail);
    bool ckpt_layers; /* its layers are GradientCheckpointingLayer (R-VLM-1) */
    /* its attention's score work over its layers, as a share of every layer attending over
     * the whole image of h x w pixels (NULL: 1, all do) */
    double (*attn_share)(const gckpt_vlm *v, uint64_t h, uint64_t w);
} tower_info;

/* The checks every tower reader makes, each as its config class or attention raises. */
static bool take_act(const char *f, const char *act, const char *want, gckpt_vision_act kind, gckpt_vision *v,
                     gckpt_err *err)
{
    if (strcmp(act, want)) {
        gckpt_seterr(err, "%s: field 'hidden_act' = \"%s\" is not supported (%s)", f, act, want);
        return false;
    }
    v->act = (uint8_t)kind;
    return true;
}

static bool heads_divide(const char *f, const char *key, const gckpt_vision *v, gckpt_err *err)
{
    if (v->hidden % v->heads == 0) return true;
    gckpt_seterr(err, "%s: field '%s' = %llu does not divide 'hidden_size' = %llu", f, key,
                 (unsigned long long)v->heads, (unsigned long long)v->hidden);
    return false;
}

static bool patch_fits(const char *f, const gckpt_vision *v, gckpt_err *err)
{
    if (v->patch <= v->image_size) return true;
    gckpt_seterr(err, "%s: field 'patch_size' = %llu is larger than 'image_size' = %llu (no patch)", f,
                 (unsigned long long)v->patch, (unsigned long long)v->image_size);
    return false;
}

static bool no_dropout(const char *f, const gckpt_vision *v, gckpt_err *err)
{
    if (v->attn_dropout <= 0) return true;
    gckpt_seterr(err, "%s: field 'attention_dropout' = %g is not modelled (0 only)", f, v->attn_dropout);
    return false;
}

/* CLIPVisionConfig (configuration_clip.py): a vision_config dict takes the class's
 * defaults for the keys it omits, not LlavaConfig's init_kwargs (those apply only when
 * vision_config is None, which the VLM reader refuses). */
static bool read_clip(const char *f, const cJSON *j, gckpt_vision *v, gckpt_err *err)
{
    char act[32];
    bool ok = gckpt_json_u64_opt(j, f, "hidden_size", 1, MAX_HIDDEN, 768, &v->hidden, err) &&
              gckpt_json_u64_opt(j, f, "intermediate_size", 1, MAX_INTER, 3072, &v->intermediate, err) &&
              gckpt_json_u64_opt(j, f, "num_hidden_layers", 1, MAX_LAYERS, 12, &v->layers, err) &&
              gckpt_json_u64_opt(j, f, "num_attention_heads", 1, MAX_HEADS, 12, &v->heads, err) &&
              gckpt_json_u64_opt(j, f, "num_channels", 1, 64, 3, &v->channels, err) &&
              gckpt_json_u64_opt(j, f, "image_size", 1, 1u << 16, 224, &v->image_size, err) &&
              gckpt_json_u64_opt(j, f, "patch_size", 1, 1u << 16, 32, &v->patch, err) &&
              gckpt_json_num_opt(j, f, "layer_norm_eps", 0, 1, 1e-5, &v->norm_eps, err) &&
              gckpt_json_num_opt(j, f, "attention_dropout", 0, 1, 0, &v->attn_dropout, err) &&
              gckpt_json_str_opt(j, f, "hidden_act", "quick_gelu", act, sizeof act, err);
    if (!ok || !take_act(f, act, "quick_gelu", GCKPT_VACT_QUICK_GELU, v, err)) return false;
    if (!heads_divide(f, "num_attention_heads", v, err)) return false;
    if (!patch_fits(f, v, err)) return false;
    if (!no_dropout(f, v, err)) return false;
    return true;
}

static uint64_t clip_grid(const gckpt_vision *v)
{
    uint64_t side = v->image_size / v->patch; /* the stride-patch convolution's output side */
    return side * side;
}

/* CLIPVisionTransformer: class_embedding, the patch convolution (no bias), a position per
 * patch and the class token, pre_layrnorm; the encoder layers (two LayerNorms, q / k / v /
 * out_proj and fc1 / fc2 with biases: 16 tensors); the tail, post_layernorm (of the pooled
 * class token, which llava does not read). */
static gckpt_param_tally clip_tally(const gckpt_vision *v, uint64_t layers, bool with_tail)
{
    uint64_t h = v->hidden, i = v->intermediate;
    uint64_t layer = 2 * (2 * h) + 4 * (h * h + h) + (h * i + i) + (i * h + h);
    gckpt_param_tally t = {h + v->channels * v->patch * v->patch * h + (clip_grid(v) + 1) * h + 2 * h, 5};
    t.params += layers * layer;
    t.tensors += layers * 16;
    if (with_tail) t.params += 2 * h, t.tensors += 2;
    return t;
}

/* CLIPImageProcessor resizes the shortest edge and center-crops to crop_size, which must
 * be the tower's image_size (CLIPVisionEmbeddings raises on another pixel size): every
 * image gives the same grid, (image_size // patch)^2 features plus the class token, which
 * "default" drops (LlavaProcessor: the same count, R-VLM-4). Any positive size is
 * accepted. */
static bool clip_tokens(const gckpt_vlm *v, const char *what, uint64_t h, uint64_t w, uint64_t *n,
                        gckpt_err *err)
{
    (void)what, (void)h, (void)w, (void)err;
    *n = clip_grid(&v->vision) + (v->vision.keep_cls ? 1 : 0);
    return true;
}

/* A key or its attribute_map alias (Qwen2_5_VLVisionConfig: num_hidden_layers -> depth). */
static bool u64_alias(const cJSON *j, const char *f, const char *key, const char *alias, uint64_t lo, uint64_t hi,
                      uint64_t dflt, uint64_t *out, gckpt_err *err)
{
    if (gckpt_json_absent(j, key) && !gckpt_json_absent(j, alias))
        return gckpt_json_u64(j, f, alias, lo, hi, out, err);
    return gckpt_json_u64_opt(j, f, key, lo, hi, dflt, out, err);
}

/* Qwen2_5_VLVisionConfig (configuration_qwen2_5_vl.py) */
static bool read_qwen2_5(const char *f, const cJSON *j, gckpt_vision *v, gckpt_err *err)
{
    char act[32];
    bool ok = u64_alias(j, f, "depth", "num_hidden_layers", 1, MAX_LAYERS, 32, &v->layers, err) &&
              gckpt_json_u64_opt(j, f, "hidden_size", 1, MAX_HIDDEN, 3584, &v->hidden, err) &&
              gckpt_json_u64_opt(j, f, "intermediate_size", 1, MAX_INTER, 3420, &v->intermediate, err) &&
              u64_alias(j, f, "num_heads", "num_attention_heads", 1, MAX_HEADS, 16, &v->heads, err) &&
              gckpt_json_u64_opt(j, f, "in_channels", 1, 64, 3, &v->channels, err) &&
              gckpt_json_u64_opt(j, f, "patch_size", 1, 1u << 12, 14, &v->patch, err) &&
              gckpt_json_u64_opt(j, f, "spatial_merge_size", 1, 64, 2, &v->merge, err) &&
              gckpt_json_u64_opt(j, f, "temporal_patch_size", 1, 64, 2, &v->temporal_patch, err) &&
              gckpt_json_u64_opt(j, f, "window_size", 1, 1u << 16, 112, &v->window_size, err) &&
              gckpt_json_u64_opt(j, f, "out_hidden_size", 1, MAX_HIDDEN, 3584, &v->out_hidden, err) &&
              gckpt_json_str_opt(j, f, "hidden_act", "silu", act, sizeof act, err);
    if (!ok || !take_act(f, act, "silu", GCKPT_VACT_SILU, v, err)) return false;
    if (!heads_divide(f, "num_heads", v, err)) return false;
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(j, "fullatt_block_indexes");
    if (!fa || cJSON_IsNull(fa)) {
        static const uint64_t dflt[] = {7, 15, 23, 31};
        for (size_t i = 0; i < 4; i++)
            if (dflt[i] < v->layers) v->full_attention[dflt[i] / 8] |= (uint8_t)(1u << (dflt[i] % 8));
        return true;
    }
    if (!cJSON_IsArray(fa)) {
        gckpt_seterr(err, "%s: field 'fullatt_block_indexes' must be an array of block indices, got %s", f,
                     gckpt_json_type_name(fa));
        return false;
    }
    for (const cJSON *it = fa->child; it; it = it->next) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble != floor(it->valuedouble) ||
            it->valuedouble > 1e9) {
            gckpt_seterr(err, "%s: field 'fullatt_block_indexes' must list non-negative block indices", f);
            return false;
        }
        uint64_t i = (uint64_t)it->valuedouble; /* an index past the blocks matches none (the forward's test) */
        if (i < v->layers) v->full_attention[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    return true;
}

/* Qwen2_5_VisionTransformerPretrainedModel without its merger: the Conv3d patch embedding
 * (no bias), the blocks (norm1 / norm2 RMSNorms, qkv and proj with biases, the SwiGLU
 * gate / up / down with biases: 12 tensors). No tail: the merger reads the last block. */
static gckpt_param_tally qwen2_5_tally(const gckpt_vision *v, uint64_t layers, bool with_tail)
{
    (void)with_tail;
    uint64_t d = v->hidden, i = v->intermediate;
    uint64_t block = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * (d * i + i) + i * d + d;
    gckpt_param_tally t = {v->channels * v->temporal_patch * v->patch * v->patch * d, 1};
    t.params += layers * block;
    t.tensors += layers * 12;
    return t;
}

/* Qwen3VLVisionConfig (configuration_qwen3_vl.py) */
static bool read_qwen3(const char *f, const cJSON *j, gckpt_vision *v, gckpt_err *err)
{
    char act[32];
    bool ok = u64_alias(j, f, "depth", "num_hidden_layers", 1, MAX_LAYERS, 27, &v->layers, err) &&
              gckpt_json_u64_opt(j, f, "hidden_size", 1, MAX_HIDDEN, 1152, &v->hidden, err) &&
              gckpt_json_u64_opt(j, f, "intermediate_size", 1, MAX_INTER, 4304, &v->intermediate, err) &&
              u64_alias(j, f, "num_heads", "num_attention_heads", 1, MAX_HEADS, 16, &v->heads, err) &&
              gckpt_json_u64_opt(j, f, "in_channels", 1, 64, 3, &v->channels, err) &&
              gckpt_json_u64_opt(j, f, "patch_size", 1, 1u << 12, 16, &v->patch, err) &&
              gckpt_json_u64_opt(j, f, "spatial_merge_size", 1, 64, 2, &v->merge, err) &&
              gckpt_json_u64_opt(j, f, "temporal_patch_size", 1, 64, 2, &v->temporal_patch, err) &&
              gckpt_json_u64_opt(j, f, "out_hidden_size", 1, MAX_HIDDEN, 3584, &v->out_hidden, err) &&
              gckpt_json_u64_opt(j, f, "num_position_embeddings", 1, 1u << 24, 2304, &v->positions, err) &&
              gckpt_json_str_opt(j, f, "hidden_act", "gelu_pytorch_tanh", act, sizeof act, err);
    if (!ok || !take_act(f, act, "gelu_pytorch_tanh", GCKPT_VACT_GELU_TANH, v, err)) return false;
    if (!heads_divide(f, "num_heads", v, err)) return false;
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(j, "deepstack_visual_indexes");
    if (!ds || cJSON_IsNull(ds)) {
        v->ndeepstack = 3; /* (8, 16, 24) */
        v->deepstack[0] = 8, v->deepstack[1] = 16, v->deepstack[2] = 24;
    } else {
        int n = cJSON_IsArray(ds) ? cJSON_GetArraySize(ds) : -1;
        if (n < 0 || n > GCKPT_MAX_FEATURE_LAYERS) {
            gckpt_seterr(err, "%s: field 'deepstack_visual_indexes' must list 0 to %d block indices", f,
                         GCKPT_MAX_FEATURE_LAYERS);
            return false;
        }
        v->ndeepstack = 0;
        for (const cJSON *it = ds->child; it; it = it->next) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble != floor(it->valuedouble) ||
                it->valuedouble >= (double)v->layers) {
                gckpt_seterr(err, "%s: field 'deepstack_visual_indexes' must list block indices below depth %llu", f,
                             (unsigned long long)v->layers);
                return false;
            }
            v->deepstack[v->ndeepstack++] = (uint64_t)it->valuedouble;
        }
    }
    return true;
}

/* Qwen3VLVisionModel without its mergers: the Conv3d patch embedding (with a bias), the
 * learned position table (num_position_embeddings, interpolated to each image's grid), the
 * blocks (two LayerNorms, qkv and proj, linear_fc1 / linear_fc2, all with biases: 12
 * tensors). No tail. */
static gckpt_param_tally qwen3_tally(const gckpt_vision *v, uint64_t layers, bool with_tail)
{
    (void)with_tail;
    uint64_t d = v->hidden, i = v->intermediate;
    uint64_t block = 4 * d + 3 * d * d + 3 * d + d * d + d + d * i + i + i * d + d;
    gckpt_param_tally t = {v->channels * v->temporal_patch * v->patch * v->patch * d + d + v->positions * d, 3};
    t.params += layers * block;
    t.tensors += layers * 12;
    return t;
}

/* MllamaVisionConfig (configuration_mllama.py): supported_aspect_ratios and
 * intermediate_layers_indices default in __post_init__; vision_output_dim must be the
 * width of the final hidden state and the intermediate ones concatenated, which the
 * projector reads. */
static bool read_mllama_vision(const char *f, const cJSON *j, gckpt_vision *v, gckpt_err *err)
{
    char act[32];
    bool ok = gckpt_json_u64_opt(j, f, "hidden_size", 1, MAX_HIDDEN, 1280, &v->hidden, err) &&
              gckpt_json_u64_opt(j, f, "intermediate_size", 1, MAX_INTER, 5120, &v->intermediate, err) &&
              gckpt_json_u64_opt(j, f, "num_hidden_layers", 1, MAX_LAYERS, 32, &v->layers, err) &&
              gckpt_json_u64_opt(j, f, "num_global_layers", 0, MAX_LAYERS, 8, &v->global_layers, err) &&
              gckpt_json_u64_opt(j, f, "attention_heads", 1, MAX_HEADS, 16, &v->heads, err) &&
              gckpt_json_u64_opt(j, f, "num_channels", 1, 64, 3, &v->channels, err) &&
              gckpt_json_u64_opt(j, f, "image_size", 1, 1u << 16, 448, &v->image_size, err) &&
              gckpt_json_u64_opt(j, f, "patch_size", 1, 1u << 16, 14, &v->patch, err) &&
              gckpt_json_u64_opt(j, f, "max_num_tiles", 1, 1024, 4, &v->max_tiles, err) &&
              gckpt_json_u64_opt(j, f, "vision_output_dim", 1, MAX_HIDDEN * 64, 7680, &v->output_dim, err) &&
              gckpt_json_num_opt(j, f, "norm_eps", 0, 1, 1e-5, &v->norm_eps, err) &&
              gckpt_json_str_opt(j, f, "hidden_act", "gelu", act, sizeof act, err);
    if (!ok || !take_act(f, act, "gelu", GCKPT_VACT_GELU, v, err)) return false;
    if (!heads_divide(f, "attention_heads", v, err)) return false;
    if (!patch_fits(f, v, err)) return false;
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(j, "supported_aspect_ratios");
    const cJSON *il = cJSON_GetObjectItemCaseSensitive(j, "intermediate_layers_indices");
    v->aspect_ratios = !ar || cJSON_IsNull(ar) ? 8 : cJSON_IsArray(ar) ? (uint64_t)cJSON_GetArraySize(ar) : 0;
    uint64_t inter = !il || cJSON_IsNull(il) ? 5 : cJSON_IsArray(il) ? (uint64_t)cJSON_GetArraySize(il) : 0;
    if (!v->aspect_ratios || (il && !cJSON_IsNull(il) && !cJSON_IsArray(il))) {
        gckpt_seterr(err, "%s: field '%s' must be a list", f, v->aspect_ratios ? "intermediate_layers_indices"
                                                                                 : "supported_aspect_ratios");
        return false;
    }
    if (v->output_dim != v->hidden * (inter + 1)) {
        gckpt_seterr(err, "%s: field 'vision_output_dim' = %llu is not hidden_size x (1 + the %llu "
                          "intermediate_layers_indices) = %llu", f, (unsigned long long)v->output_dim,
                     (unsigned long long)inter, (unsigned long long)(v->hidden * (inter + 1)));
        return false;
    }
    return true;
}

/* MllamaVisionModel: the patch convolution (no bias), class_embedding, the gated positional
 * embedding (a position per patch and the class token, its gate, a tile embedding per
 * aspect ratio id), the pre / post tile positional embeddings with their gates,
 * layernorm_pre / _post; the local layers (no attention biases: 12 tensors) and the gated
 * global ones (gate_attn, gate_ffn: 14). Every layer feeds the projector (the final state
 * and the intermediate ones): no tail. */
static gckpt_param_tally mllama_tally(const gckpt_vision *v, uint64_t layers, bool with_tail)
{
    (void)with_tail;
    uint64_t d = v->hidden, i = v->intermediate, n = clip_grid(v) + 1, ar = v->aspect_ratios + 1;
    uint64_t layer = 4 * d * d + 4 * d + (d * i + i) + (i * d + d);
    gckpt_param_tally t = {v->channels * v->patch * v->patch * d + d + n * d + 1 + ar * v->max_tiles * n * d +
                               2 * (ar * v->max_tiles * d + 1) + 4 * d,
                           2 + 3 + 4 + 4};
    t.params += layers * layer + v->global_layers * (layer + 2);
    t.tensors += layers * 12 + v->global_layers * 14;
    return t;
}

/* Qwen2VLImageProcessor's smart_resize (image_processing_qwen2_vl.py) with the class's
 * size {shortest_edge 56 * 56, longest_edge 28 * 28 * 1280} (a checkpoint's
 * preprocessor_config may set others: not read), factor patch x merge; Python's round()
 * rounds half to even, as nearbyint does. */
#define QWEN_MIN_PIXELS (56.0 * 56)
#define QWEN_MAX_PIXELS (28.0 * 28 * 1280)
static bool qwen_grid(const gckpt_vlm *vlm, const char *what, uint64_t h, uint64_t w, uint64_t *gh, uint64_t *gw,
                      gckpt_err *err)
{
    const gckpt_vision *v = &vlm->vision;
    double H = (double)h, W = (double)w, f = (double)(v->patch * v->merge);
    double ratio = (H > W ? H : W) / (H < W ? H : W);
    if (ratio > 200) {
        gckpt_seterr(err, "%s: an image of %llux%llu pixels has an aspect ratio of %g, above the 200 the "
                          "processor accepts (smart_resize)", what, (unsigned long long)h, (unsigned long long)w,
                     ratio);
        return false;
    }
    double hb = nearbyint(H / f) * f, wb = nearbyint(W / f) * f;
    if (hb * wb > QWEN_MAX_PIXELS) {
        double beta = sqrt(H * W / QWEN_MAX_PIXELS);
        hb = fmax(f, floor(H / beta / f) * f);
        wb = fmax(f, floor(W / beta / f) * f);
    } else if (hb * wb < QWEN_MIN_PIXELS) {
        double beta = sqrt(QWEN_MIN_PIXELS / (H * W));
        hb = ceil(H * beta / f) * f;
        wb = ceil(W * beta / f) * f;
    }
    *gh = (uint64_t)hb / v->patch;
    *gw = (uint64_t)wb / v->patch;
    return true;
}

static bool qwen2_5_tokens(const gckpt_vlm *vlm, const char *what, uint64_t h, uint64_t w, uint64_t *n,
                           gckpt_err *err)
{
    uint64_t gh, gw;
    if (!qwen_grid(vlm, what, h, w, &gh, &gw, err)) return false;
    *n = gh * gw / (vlm->vision.merge * vlm->vision.merge);
    return true;
}

/* Sum of the squares of the chunks n splits into of `size` (the last one shorter). */
static double chunk_squares(uint64_t n, uint64_t size)
{
    double sum = 0;
    for (uint64_t at = 0; at < n; at += size) {
        double c = (double)(n - at < size ? n - at : size);
        sum += c * c;
    }
    return sum;
}

/* Qwen2.5-VL: get_vision_window_index's windows of window_size / merge / patch merged units
 * a side (FINDINGS R-VLM-20): a windowed block's score work is the windows' sum of squared
 * lengths, a fullatt_block_indexes block's the image's S^2. */
static double qwen2_5_attn_share(const gckpt_vlm *vlm, uint64_t h, uint64_t w)
{
    const gckpt_vision *v = &vlm->vision;
    uint64_t gh, gw, m = v->merge, ws = v->patch && m ? v->window_size / m / v->patch : 0;
    gckpt_err err;
    if (!v->layers || !ws || !qwen_grid(vlm, "image", h, w, &gh, &gw, &err)) return 1.0;
    double S = (double)(gh * gw), m4 = (double)(m * m) * (double)(m * m);
    double windowed = m4 * chunk_squares(gh / m, ws) * chunk_squares(gw / m, ws) / (S * S);
    double sum = 0;
    for (uint64_t i = 0; i < v->layers; i++)
        sum += (v->full_attention[i / 8] >> (i % 8)) & 1 ? 1.0 : windowed;
    return sum / (double)v->layers;
}


/* SiglipVisionConfig (configuration_siglip.py) */
static bool read_siglip(const char *f, const cJSON *j, gckpt_vision *v, gckpt_err *err)
{
    char act[32];
    bool ok = gckpt_json_u64_opt(j, f, "hidden_size", 1, MAX_HIDDEN, 768, &v->hidden, err) &&
              gckpt_json_u64_opt(j, f, "intermediate_size", 1, MAX_INTER, 3072, &v->intermediate, err) &&
              gckpt_json_u64_opt(j, f, "num_hidden_layers", 1, MAX_LAYERS, 12, &v->layers, err) &&
              gckpt_json_u64_opt(j, f, "num_attention_heads", 1, MAX_HEADS, 12, &v->heads, err) &&
              gckpt_json_u64_opt(j, f, "num_channels", 1, 64, 3, &v->channels, err) &&
              gckpt_json_u64_opt(j, f, "image_size", 1, 1u << 16, 224, &v->image_size, err) &&
              gckpt_json_u64_opt(j, f, "patch_size", 1, 1u << 16, 16, &v->patch, err) &&
              gckpt_json_num_opt(j, f, "layer_norm_eps", 0, 1, 1e-6, &v->norm_eps, err) &&
              gckpt_json_num_opt(j, f, "attention_dropout", 0, 1, 0, &v->attn_dropout, err) &&
              gckpt_json_bool_opt(j, f, "vision_use_head", true, &v->use_head, err) &&
              gckpt_json_str_opt(j, f, "hidden_act", "gelu_pytorch_tanh", act, sizeof act, err);
    if (!ok || !take_act(f, act, "gelu_pytorch_tanh", GCKPT_VACT_GELU_TANH, v, err)) return false;
    if (!heads_divide(f, "num_attention_heads", v, err)) return false;
    if (!patch_fits(f, v, err)) return false;
    if (!no_dropout(f, v, err)) return false;
    return true;
}

/* SiglipVisionTransformer: the patch convolution (with a bias), a position per patch (no
 * class token), the encoder layers (as CLIP's: 16 tensors), post_layernorm (Gemma 3 reads
 * its output); the tail, the attention-pooling head when vision_use_head: probe,
 * nn.MultiheadAttention (in_proj [3D, D] and bias, out_proj), a LayerNorm and an MLP (11
 * tensors). */
static gckpt_param_tally siglip_tally(const gckpt_vision *v, uint64_t layers, bool with_tail)
{
    uint64_t h = v->hidden, i = v->intermediate;
    uint64_t layer = 2 * (2 * h) + 4 * (h * h + h) + (h * i + i) + (i * h + h);
    gckpt_param_tally t = {v->channels * v->patch * v->patch * h + h + clip_grid(v) * h + 2 * h, 5};
    t.params += layers * layer;
    t.tensors += layers * 16;
    if (with_tail && v->use_head) {
        t.params += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * i + i) + (i * h + h);
        t.tensors += 11;
    }
    return t;
}

static const tower_info towers[GCKPT_NTOWER] = {
    [GCKPT_TOWER_CLIP] = {"clip_vision_model", read_clip, clip_tally, true},
    [GCKPT_TOWER_QWEN2_5] = {"qwen2_5_vl_vision", read_qwen2_5, qwen2_5_tally, true, qwen2_5_attn_share},
    [GCKPT_TOWER_SIGLIP] = {"siglip_vision_model", read_siglip, siglip_tally, true},
    [GCKPT_TOWER_QWEN3] = {"qwen3_vl_vision", read_qwen3, qwen3_tally, true},
    [GCKPT_TOWER_MLLAMA] = {"mllama_vision_model", read_mllama_vision, mllama_tally, false},
};

double gckpt_vision_attention_share(const gckpt_vlm *v, uint64_t h, uint64_t w)
{
    const tower_info *t = v->vision.tower < GCKPT_NTOWER ? &towers[v->vision.tower] : NULL;
    return t && t->attn_share && h && w ? t->attn_share(v, h, w) : 1.0;
}

/* ---- the projectors and their image tokens -------------------------------------------- */

/* LlavaMultiModalProjector: linear_1 (vision hidden x feature layers -> text hidden), the
 * activation, linear_2 (text hidden -> text hidden), biases by multimodal_projector_bias. */
static gckpt_param_tally llava_proj(const gckpt_vlm *v)
{
    uint64_t in = v->vision.hidden * v->vision.nfeature, h = v->text.hidden, b = v->vision.projector_bias;
    gckpt_param_tally t = {in * h + b * h + h * h + b * h, 2 + 2 * b};
    return t;
}

/* LLaVA-NeXT's: the same projector and image_newline [text hidden] */
static gckpt_param_tally llava_next_proj(const gckpt_vlm *v)
{
    gckpt_param_tally t = llava_proj(v);
    t.params += v->text.hidden;
    t.tensors += 1;
    return t;
}

/* Qwen2_5_VLPatchMerger: ln_q (RMSNorm over the block width), mlp.0 [4D, 4D] and mlp.2
 * [out, 4D] with biases */
static gckpt_param_tally merger_proj(const gckpt_vlm *v)
{
    uint64_t d = v->vision.hidden, m = d * v->vision.merge * v->vision.merge, o = v->vision.out_hidden;
    gckpt_param_tally t = {d + m * m + m + m * o + o, 5};
    return t;
}

/* Qwen3VLVisionPatchMerger: a LayerNorm (over D; the deepstack mergers' over the merged
 * 4D), linear_fc1 [4D, 4D] and linear_fc2 [out, 4D] with biases: the merger and one
 * deepstack merger per deepstack_visual_indexes entry */
static gckpt_param_tally deepstack_proj(const gckpt_vlm *v)
{
    uint64_t d = v->vision.hidden, m = d * v->vision.merge * v->vision.merge, o = v->vision.out_hidden;
    uint64_t mlp = m * m + m + m * o + o;
    gckpt_param_tally t = {2 * d + mlp + v->vision.ndeepstack * (2 * m + mlp), 6 + 6 * (uint64_t)v->vision.ndeepstack};
    return t;
}

/* multi_modal_projector: Linear(vision_output_dim, text hidden) */
static gckpt_param_tally mllama_proj(const gckpt_vlm *v)
{
    gckpt_param_tally t = {v->vision.output_dim * v->text.hidden + v->text.hidden, 2};
    return t;
}

/* MllamaProcessor: one <|image|> token per image, whatever its size (the tiles are the
 * vision side's) */
static bool one_token(const gckpt_vlm *v, const char *what, uint64_t h, uint64_t w, uint64_t *n, gckpt_err *err)
{
    (void)v, (void)what, (void)h, (void)w, (void)err;
    *n = 1;
    return true;
}

/* Gemma3MultiModalProjector: mm_input_projection_weight [D, text hidden], mm_soft_emb_norm [D] */
static gckpt_param_tally gemma3_proj(const gckpt_vlm *v)
{
    gckpt_param_tally t = {v->vision.hidden * v->text.hidden + v->vision.hidden, 2};
    return t;
}

/* Gemma3ImageProcessor resizes every image to image_size (pan-and-scan off, its default):
 * mm_tokens_per_image each; the reader checked that the pooled grid gives as many. */
static bool gemma3_tokens(const gckpt_vlm *v, const char *what, uint64_t h, uint64_t w, uint64_t *n,
                          gckpt_err *err)
{
    (void)what, (void)h, (void)w, (void)err;
    *n = v->vision.tokens_per_image;
    return true;
}

/* image_processing_utils.select_best_resolution: the pinpoint that keeps the most of the
 * image when it is scaled to fit, then the one that wastes the least. */
static void best_resolution(const gckpt_vision *v, uint64_t h, uint64_t w, uint64_t *bh, uint64_t *bw)
{
    double max_eff = 0, min_waste = INFINITY;
    *bh = *bw = 0;
    for (unsigned k = 0; k < v->npinpoints; k++) {
        double ph = (double)v->pinpoints[k][0], pw = (double)v->pinpoints[k][1];
        double scale = fmin(pw / (double)w, ph / (double)h);
        double dw = floor((double)w * scale), dh = floor((double)h * scale); /* int() of positives */
        double eff = fmin(dw * dh, (double)w * (double)h), waste = pw * ph - eff;
        if (eff > max_eff || (eff == max_eff && waste < min_waste)) {
            max_eff = eff;
            min_waste = waste;
            *bh = v->pinpoints[k][0];
            *bw = v->pinpoints[k][1];
        }
    }
}

/* int(round(x, 7)) of a positive x: the 7-digit rounding only matters within 5e-8 below an
 * integer, which it lifts to that integer. */
static uint64_t int_round7(double x)
{
    return (uint64_t)floor(x + 5e-8);
}

/* The anyres tiles' patch grid of an image of h x w pixels: the best pinpoint's tiles
 * (tiles_h x tiles_w, get_anyres_image_grid_shape), `side` patches a tile side, and the
 * rows [y0, y1) and columns [x0, x1) of the tiles' (tiles_h side) x (tiles_w side) grid
 * that unpad_image keeps (the image's aspect ratio back: its padding cut on both sides). */
typedef struct {
    uint64_t side, tiles_h, tiles_w, y0, y1, x0, x1;
} anyres_grid;

static void anyres_grid_of(const gckpt_vision *vi, uint64_t h, uint64_t w, anyres_grid *g)
{
    uint64_t bh, bw;
    best_resolution(vi, h, w, &bh, &bw);
    g->side = vi->image_size / vi->patch;
    g->tiles_h = bh / vi->image_size;
    g->tiles_w = bw / vi->image_size;
    uint64_t ch = g->side * g->tiles_h, cw = g->side * g->tiles_w;
    g->y0 = g->x0 = 0;
    g->y1 = ch;
    g->x1 = cw;
    if ((double)w / (double)h > (double)cw / (double)ch) {
        uint64_t nh = int_round7((double)h * ((double)cw / (double)w));
        g->y0 = (ch - nh) / 2;
        g->y1 = ch - g->y0;
    } else {
        uint64_t nw = int_round7((double)w * ((double)ch / (double)h));
        g->x0 = (cw - nw) / 2;
        g->x1 = cw - g->x0;
    }
}

/* LlavaNextProcessor._get_number_of_features with the default strategy (the class token
 * dropped): the base tile's (image_size / patch)^2 features, the best pinpoint's tiles'
 * patch grid unpadded back to the image's aspect ratio (unpad_image's rule), one newline
 * per remaining row. */
static bool anyres_tokens(const gckpt_vlm *v, const char *what, uint64_t h, uint64_t w, uint64_t *n,
                          gckpt_err *err)
{
    (void)what, (void)err;
    anyres_grid g;
    anyres_grid_of(&v->vision, h, w, &g);
    *n = (g.y1 - g.y0) * (g.x1 - g.x0 + 1) + g.side * g.side;
    return true;
}

bool gckpt_anyres_pack(const gckpt_vlm *v, uint64_t h, uint64_t w, int64_t *src, uint64_t cap, uint64_t *n)
{
    if (v->vision.projector != GCKPT_PROJ_LLAVA_NEXT || !h || !w) return false;
    anyres_grid g;
    anyres_grid_of(&v->vision, h, w, &g);
    uint64_t per = g.side * g.side, k = 0;
    *n = (g.y1 - g.y0) * (g.x1 - g.x0 + 1) + per;
    if (*n > cap) return false;
    for (uint64_t p = 0; p < per; p++) src[k++] = (int64_t)p; /* the base tile's, first */
    /* view(tiles_h, tiles_w, side, side, D).permute(4, 0, 2, 1, 3): row Y = tile row x side +
     * patch row, column X = tile column x side + patch column; row-major after the unpad, a
     * newline closing each row */
    for (uint64_t y = g.y0; y < g.y1; y++) {
        for (uint64_t x = g.x0; x < g.x1; x++) {
            uint64_t tile = 1 + (y / g.side) * g.tiles_w + x / g.side;
            src[k++] = (int64_t)(tile * per + (y % g.side) * g.side + x % g.side);
        }
        src[k++] = -1;
    }
    return true;
}

/* LlavaNext's image_size_to_num_patches: the best pinpoint's tiles and the base tile (the
 * processor pads a batch's images to the most tiles; the model drops the padding) */
static uint64_t anyres_tiles(const gckpt_vlm *v, uint64_t h, uint64_t w)
{
    const gckpt_vision *vi = &v->vision;
    uint64_t bh, bw;
    best_resolution(vi, h, w, &bh, &bw);
    return (bh / vi->image_size) * (bw / vi->image_size) + 1;
}

typedef struct {
    gckpt_param_tally (*tally)(const gckpt_vlm *v);
    /* placeholder tokens of one image of h x w pixels (positive) */
    bool (*tokens)(const gckpt_vlm *v, const char *what, uint64_t h, uint64_t w, uint64_t *n, gckpt_err *err);
    /* the tower's images (tiles) per image of h x w pixels; NULL: one */
    uint64_t (*tiles)(const gckpt_vlm *v, uint64_t h, uint64_t w);
} projector_info;

static const projector_info projectors[] = {
    [GCKPT_PROJ_LLAVA] = {llava_proj, clip_tokens},
    [GCKPT_PROJ_LLAVA_NEXT] = {llava_next_proj, anyres_tokens, anyres_tiles},
    [GCKPT_PROJ_MERGER] = {merger_proj, qwen2_5_tokens},
    [GCKPT_PROJ_DEEPSTACK] = {deepstack_proj, qwen2_5_tokens},
    [GCKPT_PROJ_MLLAMA] = {mllama_proj, one_token},
    [GCKPT_PROJ_GEMMA3] = {gemma3_proj, gemma3_tokens},
};

/* ---- the readers --------------------------------------------------------------------- */

/* vision_config: the tower kind by its model_type (default_type when absent), then its
 * reader. A family reads only its own tower (default_type): another one's features reach
 * the projector differently (which of its parameters get a gradient, R-VLM-9). */
static bool read_tower(const char *file, const cJSON *j, const char *default_type, gckpt_vision *v, gckpt_err *err)
{
    char f[160], type[48];
    snprintf(f, sizeof f, "%s: vision_config", file);
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(j, "vision_config");
    if (!gckpt_json_str_opt(vc, f, "model_type", default_type, type, sizeof type, err)) return false;
    for (int k = 0; k < GCKPT_NTOWER && !strcmp(type, default_type); k++)
        if (!strcmp(type, towers[k].model_type)) {
            v->tower = (uint8_t)k;
            return towers[k].read(f, vc, v, err);
        }
    gckpt_seterr(err, "%s: field 'model_type' = \"%s\": this vision tower is not supported (%s)", f, type,
                 default_type);
    return false;
}

/* M-RoPE in the text config's rope_parameters / rope_scaling: its mrope_section kept, the
 * type made "default" (Qwen2_5_VLTextConfig.convert_rope_params_to_dict). */
static bool take_mrope(const char *f, cJSON *tc, gckpt_vlm *v, gckpt_err *err)
{
    static const char *const keys[] = {"rope_parameters", "rope_scaling"}, *const types[] = {"rope_type", "type"};
    for (int k = 0; k < 2; k++) {
        cJSON *rp = cJSON_GetObjectItemCaseSensitive(tc, keys[k]);
        for (int t = 0; t < 2 && cJSON_IsObject(rp); t++) {
            cJSON *ty = cJSON_GetObjectItemCaseSensitive(rp, types[t]);
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "mrope")) continue;
            if (!cJSON_SetValuestring(ty, "default")) {
                gckpt_seterr(err, "%s: out of memory", f);
                return false;
            }
        }
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(rp, "mrope_section");
        if (!cJSON_IsObject(rp) || !sec || cJSON_IsNull(sec)) continue;
        int n = cJSON_GetArraySize(sec);
        if (!cJSON_IsArray(sec) || n < 1 || n > 4) {
            gckpt_seterr(err, "%s: field '%s.mrope_section' must list 1 to 4 rotary widths", f, keys[k]);
            return false;
        }
        v->nmrope = 0;
        for (const cJSON *it = sec->child; it; it = it->next) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble != floor(it->valuedouble) ||
                it->valuedouble > MAX_HEAD_DIM) {
                gckpt_seterr(err, "%s: field '%s.mrope_section' must list rotary widths", f, keys[k]);
                return false;
            }
            v->mrope_section[v->nmrope++] = (uint64_t)it->valuedouble;
        }
    }
    return true;
}

/* text_config, read by the text families' readers: the row's text_type when it names no
 * model_type (the config class's sub-config spec), that type's class defaults for the keys
 * it omits, read by the row's text_read_as family; without a text_config, the config's own
 * keys when the row says so (text_at_top). */
static bool read_text(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v, gckpt_err *err)
{
    char f[160];
    snprintf(f, sizeof f, "%s: text_config", file);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
    bool top = row->text_at_top && (!tc || cJSON_IsNull(tc));
    if (!top && !cJSON_IsObject(tc)) {
        gckpt_seterr(err, "%s: field 'text_config' %s: a vision-language config names its text model (transformers "
                          "would build the class's default one)", file, tc ? "is not an object" : "is missing");
        return false;
    }
    if (top) snprintf(f, sizeof f, "%s", file);
    cJSON *copy = cJSON_Duplicate(top ? j : tc, true), *defaults = cJSON_Parse(row->text_defaults);
    if (top && copy) {
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "vision_config");
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "model_type");
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(copy, "model_type");
    bool mem = copy && defaults && (type || cJSON_AddStringToObject(copy, "model_type", row->text_type));
    type = cJSON_GetObjectItemCaseSensitive(copy, "model_type");
    if (mem && cJSON_IsString(type) && !strcmp(type->valuestring, row->text_type)) {
        for (const cJSON *d = defaults->child; d && mem; d = d->next)
            if (!cJSON_GetObjectItemCaseSensitive(copy, d->string))
                mem = cJSON_AddItemToObject(copy, d->string, cJSON_Duplicate(d, true));
        const cJSON *heads = cJSON_GetObjectItemCaseSensitive(copy, "num_attention_heads");
        if (mem && row->text_kv_is_heads && cJSON_IsNumber(heads) &&
            gckpt_json_absent(copy, "num_key_value_heads")) /* the class's __post_init__ */
            mem = cJSON_GetObjectItemCaseSensitive(copy, "num_key_value_heads")
                      ? cJSON_ReplaceItemInObjectCaseSensitive(copy, "num_key_value_heads", cJSON_Duplicate(heads, true))
                      : cJSON_AddItemToObject(copy, "num_key_value_heads", cJSON_Duplicate(heads, true));
        if (mem && row->text_read_as)
            mem = cJSON_ReplaceItemInObjectCaseSensitive(copy, "model_type", cJSON_CreateString(row->text_read_as));
    }
    cJSON_Delete(defaults);
    if (!mem) {
        cJSON_Delete(copy);
        gckpt_seterr(err, "%s: out of memory", f);
        return false;
    }
    bool ok = take_mrope(f, copy, v, err) && gckpt_model_read_config(f, copy, &v->text, err);
    cJSON_Delete(copy);
    /* M-RoPE's tables: a row per token (Qwen2_5_VLRotaryEmbedding on [3, b, s] position ids) */
    if (ok && v->nmrope) v->text.rope_per_token = true;
    return ok;
}

/* An integer (possibly negative) in [lo, hi] (item names the field in messages). */
static bool read_index(const char *file, const char *field, const cJSON *it, int64_t lo, int64_t hi, int64_t *out,
                       gckpt_err *err)
{
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!cJSON_IsNumber(it) || d != floor(d) || d < (double)lo || d > (double)hi) {
        gckpt_seterr(err, "%s: field '%s' must be an integer in [%lld, %lld] (a hidden state of the vision tower), "
                          "got %s", file, field, (long long)lo, (long long)hi,
                     cJSON_IsNumber(it) ? "a number outside it" : gckpt_json_type_name(it));
        return false;
    }
    *out = (int64_t)d;
    return true;
}

/* vision_feature_layer: an int or a list of them, each an index into the tower's
 * layers + 1 hidden states (Python's, negative from the end). */
static bool read_feature_layers(const char *file, const cJSON *j, gckpt_vision *v, gckpt_err *err)
{
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(j, "vision_feature_layer");
    int64_t n = (int64_t)v->layers + 1;
    if (!fl || cJSON_IsNull(fl)) {
        v->feature_layer[0] = -2;
        v->nfeature = 1;
        return true;
    }
    if (!cJSON_IsArray(fl)) {
        v->nfeature = 1;
        return read_index(file, "vision_feature_layer", fl, -n, n - 1, &v->feature_layer[0], err);
    }
    int count = cJSON_GetArraySize(fl);
    if (count < 1 || count > GCKPT_MAX_FEATURE_LAYERS) {
        gckpt_seterr(err, "%s: field 'vision_feature_layer' must list 1 to %d layers, got %d", file,
                     GCKPT_MAX_FEATURE_LAYERS, count);
        return false;
    }
    v->nfeature = 0;
    for (const cJSON *it = fl->child; it; it = it->next)
        if (!read_index(file, "vision_feature_layer", it, -n, n - 1, &v->feature_layer[v->nfeature++], err))
            return false;
    return true;
}

/* The image token's id: configuration_llava.py, configuration_llava_next.py,
 * configuration_mllama.py and configuration_gemma3.py have attribute_map = {"image_token_id":
 * "image_token_index"}, so a config.json may name it either way (FINDINGS R-VLM-36; with both,
 * transformers 5.24 keeps image_token_id's: two different values are refused). */
static bool read_image_token_index(const char *file, const cJSON *j, double dflt, int64_t *out, gckpt_err *err)
{
    static const char *const names[2] = {"image_token_index", "image_token_id"};
    double got[2];
    bool has[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, names[i]);
        has[i] = f && !cJSON_IsNull(f);
        if (!gckpt_json_num_opt(j, file, names[i], 0, 9007199254740992.0, dflt, &got[i], err)) return false;
        if (got[i] != floor(got[i])) {
            gckpt_seterr(err, "%s: field '%s' = %g is not an integer", file, names[i], got[i]);
            return false;
        }
    }
    if (has[0] && has[1] && got[0] != got[1]) {
        gckpt_seterr(err, "%s: fields 'image_token_index' = %.0f and 'image_token_id' = %.0f differ (one field "
                     "under two names: give one)", file, got[0], got[1]);
        return false;
    }
    *out = (int64_t)(has[1] ? got[1] : got[0]);
    return true;
}

/* LlavaConfig (configuration_llava.py): vision_config and text_config (their default
 * model_types: the row's), vision_feature_layer -2, vision_feature_select_strategy
 * "default", projector_hidden_act "gelu", multimodal_projector_bias true,
 * image_token_index 32000, tie_word_embeddings false (or text_config's). */
bool gckpt_vlm_read_llava(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v, gckpt_err *err)
{
    char strategy[16], act[32];
    int64_t token;
    bool top_tied;
    if (!read_tower(file, j, row->vision_type, &v->vision, err) || !read_text(file, j, row, v, err) ||
        !read_feature_layers(file, j, &v->vision, err))
        return false;
    if (!gckpt_json_str_opt(j, file, "vision_feature_select_strategy", "default", strategy, sizeof strategy, err) ||
        !gckpt_json_str_opt(j, file, "projector_hidden_act", "gelu", act, sizeof act, err) ||
        !gckpt_json_bool_opt(j, file, "multimodal_projector_bias", true, &v->vision.projector_bias, err) ||
        !read_image_token_index(file, j, 32000, &token, err) ||
        !gckpt_json_bool_opt(j, file, "tie_word_embeddings", false, &top_tied, err))
        return false;
    if (strcmp(strategy, "default") && strcmp(strategy, "full")) {
        gckpt_seterr(err, "%s: field 'vision_feature_select_strategy' = \"%s\" is not one of default, full", file,
                     strategy);
        return false;
    }
    if (strcmp(act, "gelu")) {
        gckpt_seterr(err, "%s: field 'projector_hidden_act' = \"%s\" is not supported (gelu)", file, act);
        return false;
    }
    v->vision.keep_cls = !strcmp(strategy, "full");
    v->vision.projector = GCKPT_PROJ_LLAVA;
    v->vision.projector_act = GCKPT_VACT_GELU;
    v->vision.image_token = token;
    v->text.tied = top_tied || v->text.tied; /* LlavaConfig.__post_init__ */
    return true;
}

/* LlavaNextConfig: llava's keys and image_grid_pinpoints, default [[336, 672], [672, 336],
 * [672, 672], [1008, 336], [336, 1008]] (__post_init__). Each pinpoint must be a multiple of
 * the tower's image_size (the processor's tiles and the model's grid divide by it). The
 * "full" strategy keeps each tile's class token, which pack_image_features cannot lay out
 * on the tile grid: refused. */
bool gckpt_vlm_read_llava_next(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v,
                               gckpt_err *err)
{
    if (!gckpt_vlm_read_llava(file, j, row, v, err)) return false;
    gckpt_vision *vi = &v->vision;
    vi->projector = GCKPT_PROJ_LLAVA_NEXT;
    if (vi->keep_cls) {
        gckpt_seterr(err, "%s: field 'vision_feature_select_strategy' = \"full\" is not planned for %s (default only)",
                     file, row->family);
        return false;
    }
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(j, "image_grid_pinpoints");
    if (!pp || cJSON_IsNull(pp)) {
        static const uint64_t dflt[5][2] = {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
        memcpy(vi->pinpoints, dflt, sizeof dflt);
        vi->npinpoints = 5;
    } else {
        int count = cJSON_IsArray(pp) ? cJSON_GetArraySize(pp) : -1;
        if (count < 1 || count > GCKPT_MAX_PINPOINTS) {
            gckpt_seterr(err, "%s: field 'image_grid_pinpoints' must list 1 to %d [height, width] pairs", file,
                         GCKPT_MAX_PINPOINTS);
            return false;
        }
        vi->npinpoints = 0;
        for (const cJSON *it = pp->child; it; it = it->next) {
            const cJSON *a = cJSON_GetArrayItem(it, 0), *b = cJSON_GetArrayItem(it, 1);
            uint64_t *p = vi->pinpoints[vi->npinpoints++];
            if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
                a->valuedouble < 1 || b->valuedouble < 1 || a->valuedouble > 1e6 || b->valuedouble > 1e6 ||
                a->valuedouble != floor(a->valuedouble) || b->valuedouble != floor(b->valuedouble)) {
                gckpt_seterr(err, "%s: field 'image_grid_pinpoints' must list [height, width] pairs of pixels", file);
                return false;
            }
            p[0] = (uint64_t)a->valuedouble;
            p[1] = (uint64_t)b->valuedouble;
            if (p[0] % vi->image_size || p[1] % vi->image_size) {
                gckpt_seterr(err, "%s: field 'image_grid_pinpoints': [%llu, %llu] is not a multiple of the vision "
                                  "tower's image_size %llu", file, (unsigned long long)p[0], (unsigned long long)p[1],
                             (unsigned long long)vi->image_size);
                return false;
            }
        }
    }
    return true;
}

/* Qwen2_5_VLConfig: vision_config (a "qwen2_5_vl" model_type there is renamed, as the
 * class does), text_config or the top-level text keys, image_token_id 151655,
 * tie_word_embeddings false (or the text config's). The merger's output must be the text
 * width (the features are scattered into the text embeddings). */
static bool read_qwen(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v, bool or_tie,
                      gckpt_err *err)
{
    double token;
    bool top_tied;
    cJSON *copy = cJSON_Duplicate(j, true);
    cJSON *vc = cJSON_GetObjectItemCaseSensitive(copy, "vision_config");
    const cJSON *vt = cJSON_GetObjectItemCaseSensitive(vc, "model_type");
    if (cJSON_IsString(vt) && !strcmp(vt->valuestring, row->name))
        cJSON_ReplaceItemInObjectCaseSensitive(vc, "model_type", cJSON_CreateString(row->vision_type));
    bool ok = copy && read_tower(file, copy, row->vision_type, &v->vision, err);
    cJSON_Delete(copy);
    if (!copy) gckpt_seterr(err, "%s: out of memory", file);
    if (!ok || !read_text(file, j, row, v, err) ||
        !gckpt_json_num_opt(j, file, "image_token_id", 0, 9007199254740992.0, 151655, &token, err) ||
        !gckpt_json_bool_opt(j, file, "tie_word_embeddings", false, &top_tied, err))
        return false;
    if (token != floor(token)) {
        gckpt_seterr(err, "%s: field 'image_token_id' = %g is not an integer", file, token);
        return false;
    }
    if (v->vision.out_hidden != v->text.hidden) {
        gckpt_seterr(err, "%s: vision_config: field 'out_hidden_size' = %llu is not the text model's hidden_size "
                          "(%llu)", file, (unsigned long long)v->vision.out_hidden, (unsigned long long)v->text.hidden);
        return false;
    }
    v->vision.feature_layer[0] = -1; /* the merger reads the last block */
    v->vision.nfeature = 1;
    v->vision.projector_act = GCKPT_VACT_GELU;
    v->vision.projector_bias = true;
    v->vision.image_token = (int64_t)token;
    v->text.tied = top_tied || (or_tie && v->text.tied);
    return true;
}

bool gckpt_vlm_read_qwen2_5_vl(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v,
                               gckpt_err *err)
{
    v->vision.projector = GCKPT_PROJ_MERGER;
    return read_qwen(file, j, row, v, true, err);
}

/* Qwen3VLConfig: as Qwen2_5_VLConfig's, but text_config is required (no top-level text
 * keys: the row's text_at_top is false) and tie_word_embeddings is the top-level flag alone
 * (no __post_init__ reads text_config's). */
bool gckpt_vlm_read_qwen3_vl(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v,
                             gckpt_err *err)
{
    v->vision.projector = GCKPT_PROJ_DEEPSTACK;
    return read_qwen(file, j, row, v, false, err);
}

/* MllamaConfig: vision_config (mllama_vision_model), text_config (mllama_text_model, read
 * as llama; cross_attention_layers default [3, 8, ..., 38] in __post_init__),
 * image_token_index 128256. MllamaForConditionalGeneration declares no tied weights: its
 * lm_head is its own whatever the configs say. */
bool gckpt_vlm_read_mllama(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v, gckpt_err *err)
{
    int64_t token;
    if (!read_tower(file, j, row->vision_type, &v->vision, err) || !read_text(file, j, row, v, err) ||
        !read_image_token_index(file, j, 128256, &token, err))
        return false;
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "text_config"),
                                                       "cross_attention_layers");
    if (!cl || cJSON_IsNull(cl)) {
        for (uint64_t i = 3; i < 40; i += 5)
            if (i < v->text.layers) v->cross[i / 8] |= (uint8_t)(1u << (i % 8)), v->ncross++;
    } else if (!cJSON_IsArray(cl)) {
        gckpt_seterr(err, "%s: text_config: field 'cross_attention_layers' must be a list of layer indices", file);
        return false;
    } else {
        for (const cJSON *it = cl->child; it; it = it->next) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble != floor(it->valuedouble) ||
                it->valuedouble >= (double)v->text.layers) {
                gckpt_seterr(err, "%s: text_config: field 'cross_attention_layers' must list layer indices below "
                                  "num_hidden_layers %llu", file, (unsigned long long)v->text.layers);
                return false;
            }
            uint64_t i = (uint64_t)it->valuedouble;
            if (!(v->cross[i / 8] >> (i % 8) & 1)) v->cross[i / 8] |= (uint8_t)(1u << (i % 8)), v->ncross++;
        }
    }
    v->vision.feature_layer[0] = -1;
    v->vision.nfeature = 1;
    v->vision.projector = GCKPT_PROJ_MLLAMA;
    v->vision.projector_bias = true;
    v->vision.image_token = token;
    v->text.tied = false;
    return true;
}

/* Gemma3Config: vision_config (default siglip_vision_model), text_config (gemma3_text),
 * mm_tokens_per_image 256, image_token_index 262144, tie_word_embeddings true (the
 * top-level flag alone: no __post_init__ reads text_config's). The projector average-pools
 * the image_size / patch_size grid with kernel grid // int(sqrt(mm_tokens_per_image)):
 * the pooled grid must give mm_tokens_per_image features, or the placeholder check fails. */
bool gckpt_vlm_read_gemma3(const char *file, const cJSON *j, const gckpt_vlm_type *row, gckpt_vlm *v, gckpt_err *err)
{
    int64_t token;
    bool tied;
    uint64_t mm;
    if (!read_tower(file, j, row->vision_type, &v->vision, err) || !read_text(file, j, row, v, err) ||
        !gckpt_json_u64_opt(j, file, "mm_tokens_per_image", 1, 1u << 20, 256, &mm, err) ||
        !read_image_token_index(file, j, 262144, &token, err) ||
        !gckpt_json_bool_opt(j, file, "tie_word_embeddings", true, &tied, err))
        return false;
    uint64_t grid = v->vision.image_size / v->vision.patch, side = (uint64_t)floor(sqrt((double)mm));
    uint64_t kernel = side ? grid / side : 0, pooled = kernel ? grid / kernel : 0;
    if (pooled * pooled != mm) {
        gckpt_seterr(err, "%s: field 'mm_tokens_per_image' = %llu: the projector pools the %llux%llu patch grid to "
                          "%llu features per image", file, (unsigned long long)mm, (unsigned long long)grid,
                     (unsigned long long)grid, (unsigned long long)(pooled * pooled));
        return false;
    }
    v->vision.tokens_per_image = mm;
    v->vision.feature_layer[0] = -1; /* the last hidden state, after post_layernorm */
    v->vision.nfeature = 1;
    v->vision.projector = GCKPT_PROJ_GEMMA3;
    v->vision.image_token = token;
    v->text.tied = tied;
    return true;
}

bool gckpt_vlm_parse(const char *file, const char *text, gckpt_vlm *v, gckpt_err *err)
{
    memset(v, 0, sizeof *v);
    cJSON *j = gckpt_json_parse(file, text, err);
    if (!j) return false;
    bool ok = gckpt_json_str(j, file, "model_type", v->model_type, sizeof v->model_type, err);
    const gckpt_vlm_type *t = ok ? gckpt_vlm_type_of(v->model_type) : NULL;
    if (ok && t && t->read && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "vision_config"))) {
        ok = t->read(file, j, t, v, err);
    } else if (ok) { /* gckpt_model_parse's refusal, or no VLM at all */
        if (gckpt_refuse_vlm(file, j, v->model_type, err))
            gckpt_seterr(err, "%s: field 'model_type' = \"%s\" is not a vision-language model", file, v->model_type);
        ok = false;
    }
    cJSON_Delete(j);
    return ok;
}

/* ---- what the planner reads ---------------------------------------------------------- */

gckpt_param_tally gckpt_vision_tower_params(const gckpt_vlm *v)
{
    return towers[v->vision.tower].tally(&v->vision, v->vision.layers, true);
}

/* hidden_states[k] (k in 0 .. layers, Python's negative indices from the end) is the
 * output of layer k - 1 (0: the embeddings'): only the layers up to the deepest one read
 * make a feature, and only they get a gradient (R-VLM-9). */
uint64_t gckpt_vision_feature_depth(const gckpt_vlm *v)
{
    int64_t n = (int64_t)v->vision.layers + 1, deepest = 0;
    for (unsigned k = 0; k < v->vision.nfeature; k++) {
        int64_t f = v->vision.feature_layer[k];
        if (f < 0) f += n;
        if (f > deepest) deepest = f;
    }
    return (uint64_t)deepest;
}

gckpt_param_tally gckpt_vision_tower_grads(const gckpt_vlm *v)
{
    return towers[v->vision.tower].tally(&v->vision, gckpt_vision_feature_depth(v), false);
}

/* LlavaMultiModalProjector: linear_1 (vision hidden x feature layers -> text hidden), the
 * activation, linear_2 (text hidden -> text hidden), biases by multimodal_projector_bias. */
gckpt_param_tally gckpt_vision_projector_params(const gckpt_vlm *v)
{
    return projectors[v->vision.projector].tally(v);
}

/* Every CLIPEncoderLayer, SiglipEncoderLayer, Qwen2_5_VLVisionBlock and Qwen3VLVisionBlock
 * is a GradientCheckpointingLayer (R-VLM-1), also CLIP's after the feature layer (they run;
 * their outputs reach no loss). */
void gckpt_vlm_towers(const gckpt_vlm *v, uint64_t t[2])
{
    t[0] = towers[v->vision.tower].ckpt_layers ? v->vision.layers : 0;
    t[1] = v->text.layers;
}

/* MllamaTextModel: embed_tokens has vocab_size + 8 rows; a MllamaCrossAttentionDecoderLayer
 * has the self-attention layer's projections, norms and MLP, and q_norm / k_norm over
 * head_dim and cross_attn_attn_gate / cross_attn_mlp_gate besides */
gckpt_param_tally gckpt_vlm_text_extra(const gckpt_vlm *v)
{
    gckpt_param_tally t = {0, 0};
    if (v->vision.projector == GCKPT_PROJ_MLLAMA) {
        t.params = GCKPT_MLLAMA_EMBED_EXTRA_ROWS * v->text.hidden + v->ncross * (2 * v->text.head_dim + 2);
        t.tensors = 4 * v->ncross;
    }
    return t;
}

bool gckpt_image_tokens(const gckpt_vlm *v, const char *what, uint64_t h, uint64_t w, uint64_t *tokens,
                        gckpt_err *err)
{
    if (!h || !w) {
        gckpt_seterr(err, "%s: an image of %llux%llu pixels has no pixels", what, (unsigned long long)h,
                     (unsigned long long)w);
        return false;
    }
    return projectors[v->vision.projector].tokens(v, what, h, w, tokens, err);
}

uint64_t gckpt_image_tiles(const gckpt_vlm *v, uint64_t h, uint64_t w)
{
    const projector_info *p = &projectors[v->vision.projector];
    return p->tiles ? p->tiles(v, h, w) : 1;
}

bool gckpt_parse_image_size(const char *what, const char *s, uint64_t *h, uint64_t *w, gckpt_err *err)
{
    unsigned long long a, b;
    int used = 0;
    if (sscanf(s, "%llux%llu%n", &a, &b, &used) != 2 || s[used] || s[0] < '0' || s[0] > '9' || !strchr(s, 'x') ||
        strchr(s, 'x')[1] < '0' || strchr(s, 'x')[1] > '9' || !a || !b || a > (1u << 20) || b > (1u << 20)) {
        gckpt_seterr(err, "%s: '%s' is not an image size HxW (height x width in pixels, 1 to %u each)", what, s,
                     1u << 20);
        return false;
    }
    *h = a;
    *w = b;
    return true;
}
