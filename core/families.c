/* The model families (gckpt/core/families.h): one row each. A new family is a row here,
 * its config reader (model*.c), its recipe tracer (recipe_<family>.c) and the model flags
 * for what it does differently. */
#include "gckpt/core/families.h"

#include <stdio.h>
#include <string.h>

#include "gckpt/core/peft.h"
#include "model_parse.h"
#include "recipe_tracer.h"

#define LT(t) (1u << GCKPT_LT_##t)
/* the classes' pad_token_id defaults (AutoConfig.for_model, transformers 5.24) */
#define NO_PAD false, 0
#define PAD(id) true, id
/* use_liger_kernel=True patches the type (liger-kernel 0.8.5's MODEL_TYPE_TO_APPLY_LIGER_FN) */
#define LIGER true
#define NO_LIGER false

#define LLAMA_LINEARS (LT(Q) | LT(K) | LT(V) | LT(O) | LT(GATE) | LT(UP) | LT(DOWN))

/* indexed by gckpt_family, in its order (the order of the lists in messages) */
static const gckpt_family_info families[GCKPT_NFAMILY] = {
    [GCKPT_FAMILY_LLAMA] = {
        .family = GCKPT_FAMILY_LLAMA,
        .types = {{"llama", NO_PAD, false, LIGER}, {"mistral", NO_PAD, false, LIGER}, {"qwen2", NO_PAD, false, LIGER},
                  {"qwen3", NO_PAD, false, LIGER}},
        .parse = gckpt_parse_llama, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    [GCKPT_FAMILY_GPT2] = {
        .family = GCKPT_FAMILY_GPT2,
        .types = {{"gpt2", NO_PAD, false, NO_LIGER}},
        .parse = gckpt_parse_gpt2, .trace = trace_gpt2,
        .lora_targets = LT(C_ATTN) | LT(ATTN_C_PROJ) | LT(C_FC) | LT(MLP_C_PROJ), .embed_name = "wte",
        .padding_idx = false, .host = true, .cuda = true, .packed_qkv_kernels = true},
    [GCKPT_FAMILY_GEMMA] = {
        .family = GCKPT_FAMILY_GEMMA,
        .types = {{"gemma", PAD(0), false, LIGER}, {"gemma2", PAD(0), false, LIGER}, {"gemma3_text", PAD(0), false, LIGER}},
        .parse = gckpt_parse_gemma, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    [GCKPT_FAMILY_PHI3] = {
        .family = GCKPT_FAMILY_PHI3,
        .types = {{"phi3", PAD(32000), false, LIGER}},
        .parse = gckpt_parse_phi3, .trace = trace_llama,
        .lora_targets = LT(QKV_PROJ) | LT(O) | LT(GATE_UP) | LT(DOWN), .embed_name = "embed_tokens",
        .padding_idx = true, .host = true, .cuda = true},
    [GCKPT_FAMILY_GPT_NEOX] = {
        .family = GCKPT_FAMILY_GPT_NEOX,
        .types = {{"gpt_neox", NO_PAD, false, NO_LIGER}},
        .parse = gckpt_parse_gpt_neox, .trace = trace_gpt_neox,
        .lora_targets = LT(QUERY_KEY_VALUE) | LT(DENSE) | LT(H_TO_4H) | LT(4H_TO_H), .embed_name = "embed_in",
        .padding_idx = false, .host = true, .cuda = true},
    [GCKPT_FAMILY_OLMO2] = {
        .family = GCKPT_FAMILY_OLMO2,
        .types = {{"olmo2", PAD(1), false, LIGER}},
        .parse = gckpt_parse_olmo2, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    [GCKPT_FAMILY_GRANITE] = {
        .family = GCKPT_FAMILY_GRANITE,
        .types = {{"granite", NO_PAD, false, LIGER}},
        .parse = gckpt_parse_granite, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    /* LoRA: the attention projections only (the experts are fused parameters and the
     * router no nn.Linear under transformers 5.24, FINDINGS R-PEFT-28); gpt_oss reads its own
     * rope types (yarn, model_moe.c) */
    [GCKPT_FAMILY_MOE] = {
        .family = GCKPT_FAMILY_MOE,
        .types = {{"mixtral", NO_PAD, false, LIGER}, {"qwen3_moe", NO_PAD, false, LIGER}, {"olmoe", PAD(1), false, NO_LIGER},
                  {"gpt_oss", NO_PAD, true, LIGER}},
        .parse = gckpt_parse_moe, .trace = trace_llama,
        .lora_targets = LT(Q) | LT(K) | LT(V) | LT(O), .lora_beyond_targets = true, .embed_name = "embed_tokens",
        .padding_idx = true, .host = true, .cuda = true},
    /* planned only (gckpt-run has no kernels for MLA's and the grouped router's ops). LoRA:
     * the MLA projections (peft 0.21.2 names no default targets for it; all-linear and the MLP
     * names go to the routed experts' fused parameters and the router: FINDINGS R-PEFT-29) */
    [GCKPT_FAMILY_DEEPSEEK] = {
        .family = GCKPT_FAMILY_DEEPSEEK,
        .types = {{"deepseek_v3", NO_PAD, false, NO_LIGER}},
        .parse = gckpt_parse_deepseek, .trace = trace_llama,
        .lora_targets = LT(Q) | LT(O) | LT(Q_A) | LT(Q_B) | LT(KV_A) | LT(KV_B), .lora_beyond_targets = true,
        .embed_name = "embed_tokens", .padding_idx = true, .host = false, .cuda = false},
};
#undef LLAMA_LINEARS
#undef LT

/* what transformers 5.24's modelling of each does that no family plans (the model_type's
 * only other mention is tools/hf_probe's fixtures, tests/data/hf-dsv3) */
const gckpt_unmodelled_type gckpt_unmodelled_moe_types[] = {
    {"qwen2_moe", "a shared expert with its sigmoid gate"},
    {"deepseek_v2", "multi-head latent attention (kv_lora_rank), dense first layers (first_k_dense_replace) and "
                    "shared experts"},
    {NULL, NULL},
};

/* transformers 5.24's modelling of each (FINDINGS R-VLM-*) */
const gckpt_vlm_type gckpt_vlm_types[] = {
    {"llava", "LLaVA", "the CLIP vision tower (features of vision_feature_layer), the two-layer projector, "
                       "(image_size / patch_size)^2 image tokens"},
    {"llava_next", "LLaVA-NeXT", "the CLIP vision tower over anyres tiles (image_grid_pinpoints), the projector, "
                                 "the unpadded tile features with a newline per row"},
    {"qwen2_5_vl", "Qwen2.5-VL", "the ViT's windowed and full-attention blocks (fullatt_block_indexes), the 2x2 "
                                 "patch merger, the pixel budget's image tokens and M-RoPE"},
    {"qwen2_vl", "Qwen2-VL", "the ViT's full-attention blocks, the 2x2 patch merger, the pixel budget's image "
                             "tokens and M-RoPE"},
    {"qwen3_vl", "Qwen3-VL", "the ViT with its interpolated position embedding, the patch merger and the deepstack "
                             "mergers into text layers, the pixel budget's image tokens and M-RoPE"},
    {"gemma3", "Gemma 3 (multimodal)", "the SigLIP vision tower, the pooled projector (mm_tokens_per_image tokens "
                                       "per image) and bidirectional attention over image tokens"},
    {"mllama", "Llama 3.2 Vision", "the tiled vision encoder (local and gated global layers) and the "
                                   "cross-attention text layers"},
    {NULL, NULL, NULL},
};

const gckpt_vlm_type *gckpt_vlm_type_of(const char *t)
{
    for (const gckpt_vlm_type *v = gckpt_vlm_types; v->name; v++)
        if (!strcmp(t, v->name)) return v;
    return NULL;
}

const gckpt_family_info *gckpt_family_of(gckpt_family f)
{
    return (unsigned)f < GCKPT_NFAMILY ? &families[f] : NULL;
}

const gckpt_family_info *gckpt_family_by_type(const char *model_type, const gckpt_model_type_info **type)
{
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        for (int k = 0; k < GCKPT_FAMILY_MAX_TYPES && families[i].types[k].name; k++)
            if (!strcmp(model_type, families[i].types[k].name)) {
                if (type) *type = &families[i].types[k];
                return &families[i];
            }
    return NULL;
}

void gckpt_model_types_list(bool executed, const char *sep, const char *last_sep, char *buf, size_t n)
{
    size_t total = 0, at = 0, len = 0;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        for (int k = 0; k < GCKPT_FAMILY_MAX_TYPES && families[i].types[k].name; k++)
            total += !executed || families[i].host || families[i].cuda;
    if (n) buf[0] = 0;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        for (int k = 0; k < GCKPT_FAMILY_MAX_TYPES && families[i].types[k].name; k++) {
            if (executed && !families[i].host && !families[i].cuda) continue;
            if (len >= n) return;
            int w = snprintf(buf + len, n - len, "%s%s", at == 0 ? "" : at + 1 == total ? last_sep : sep,
                             families[i].types[k].name);
            at++;
            if (w < 0) return;
            len += (size_t)w;
        }
}
