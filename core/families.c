/* The model families (gckpt/core/families.h): one row each. A new family is a row here,
 * its config reader (model*.c), its recipe tracer (recipe_<family>.c) and the model flags
 * for what it does differently. */
#include "gckpt/core/families.h"

#include <stdio.h>
#include <string.h>

#include "gckpt/core/peft.h"
#include "gckpt/core/vision.h"
#include "model_parse.h"
#include "recipe_tracer.h"

#define LT(t) (1u << GCKPT_LT_##t)
/* the classes' pad_token_id defaults (AutoConfig.for_model, transformers 5.24) */
#define NO_PAD false, 0
#define PAD(id) true, id
/* use_liger_kernel=True patches the type (liger-kernel 0.8.5's MODEL_TYPE_TO_APPLY_LIGER_FN),
 * with its fused linear cross-entropy on by default (LIGER) or off and refused (LIGER_NO_FLCE:
 * apply_liger_kernel_to_granite has fused_linear_cross_entropy=False, cross_entropy=True) */
#define LIGER GCKPT_LIGER_FLCE, 1, false, 0, false, false
#define LIGER_NO_FLCE GCKPT_LIGER_NO_FLCE, 0, false, 0, false, false
#define NO_LIGER GCKPT_LIGER_NONE, 0, false, 0, false, false
/* gpt_oss's lce_forward passes chunk_mem_const=8 (_GPT_OSS_FLCE_CHUNK_MEM_CONST), the others
 * the function's default 1 */
#define LIGER_CHUNK(k) GCKPT_LIGER_FLCE, k, false, 0, false, false
/* ... and its SwiGLU replaces the dense MLP's class with LigerSwiGLUMLP (deepseek_v3's dense
 * MLPs and shared experts: LigerQwen3MoeSwiGLUMLP, the same forward), planned (FINDINGS
 * R-LOSS-5). Not planned: deepseek_v3's routed experts' LigerExperts (mixtral's and qwen3_moe's
 * are: LIGER_MOE); gemma's take geglu; phi3's LigerPhi3SwiGLUMLP calls it on the chunks of
 * gate_up (ensure_contiguous copies them); gpt_oss has swiglu off; granite's loss is refused */
#define LIGER_SWIGLU GCKPT_LIGER_FLCE, 1, true, 0, false, false
/* ... and its RMSNorm and RoPE too: LigerRMSNorm with the defaults (casting 'llama', offset 0,
 * in_place=True) on every norm (qwen3's q_norm / k_norm too) and liger_rotary_pos_emb (FINDINGS
 * R-LOSS-6, R-LOSS-7). Not planned, named in the liger warning: deepseek_v3 (rope off; its MLA
 * norms' inputs are slices, which ensure_contiguous copies), gemma3_text, phi3's rotary
 * (partial), gpt_oss */
#define LRMS_ALL (GCKPT_LRMS_FINAL | GCKPT_LRMS_LAYER | GCKPT_LRMS_QK)
#define LIGER_LAYERS GCKPT_LIGER_FLCE, 1, true, LRMS_ALL, true, false
/* phi3: LigerRMSNorm with the defaults, planned; its LigerPhi3SwiGLUMLP and partial rotary not */
#define LIGER_RMS GCKPT_LIGER_FLCE, 1, false, LRMS_ALL, false, false
/* mixtral, qwen3_moe: LigerRMSNorm with the defaults (qwen3_moe's q_norm / k_norm too),
 * liger_rotary_pos_emb, and swiglu=True's LigerExperts in the routed experts' class's place (their
 * dense MLPs, qwen3_moe's mlp_only_layers, stay transformers'): FINDINGS R-LOSS-9 */
#define LIGER_MOE GCKPT_LIGER_FLCE, 1, false, LRMS_ALL, true, true
/* olmo2 (the Trainer's instance patch): the final norm with the defaults, the post-attention and
 * post-feed-forward norms with in_place=False, q_norm / k_norm left transformers' (only the class
 * swap, which reaches no built module, would change them); liger_rotary_pos_emb on its fp32 tables */
#define LIGER_OLMO2 GCKPT_LIGER_FLCE, 1, true, GCKPT_LRMS_FINAL | GCKPT_LRMS_LAYER | GCKPT_LRMS_LAYER_COPY, true, false
/* gemma: every norm with offset 1, casting 'gemma' (the same buffers), in_place=True; gemma2: the
 * same with in_place=False; gemma3_text: the same, its q_norm / k_norm too; all with
 * liger_rotary_pos_emb (gemma3_text's two tables alike; their GEGLU MLP not planned) */
#define LIGER_GEMMA GCKPT_LIGER_FLCE, 1, false, GCKPT_LRMS_FINAL | GCKPT_LRMS_LAYER, true, false
#define LIGER_GEMMA2                                                                                              \
    GCKPT_LIGER_FLCE, 1, false, GCKPT_LRMS_FINAL | GCKPT_LRMS_LAYER | GCKPT_LRMS_FINAL_COPY | GCKPT_LRMS_LAYER_COPY, \
        true, false
#define LIGER_GEMMA3                                                                                              \
    GCKPT_LIGER_FLCE, 1, false,                                                                                   \
        GCKPT_LRMS_FINAL | GCKPT_LRMS_LAYER | GCKPT_LRMS_QK | GCKPT_LRMS_FINAL_COPY | GCKPT_LRMS_LAYER_COPY, true, false

#define LLAMA_LINEARS (LT(Q) | LT(K) | LT(V) | LT(O) | LT(GATE) | LT(UP) | LT(DOWN))

/* indexed by gckpt_family, in its order (the order of the lists in messages) */
static const gckpt_family_info families[GCKPT_NFAMILY] = {
    [GCKPT_FAMILY_LLAMA] = {
        .family = GCKPT_FAMILY_LLAMA,
        .types = {{"llama", NO_PAD, false, LIGER_LAYERS}, {"mistral", NO_PAD, false, LIGER_LAYERS},
                  {"qwen2", NO_PAD, false, LIGER_LAYERS}, {"qwen3", NO_PAD, false, LIGER_LAYERS}},
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
        .types = {{"gemma", PAD(0), false, LIGER_GEMMA}, {"gemma2", PAD(0), false, LIGER_GEMMA2}, {"gemma3_text", PAD(0), false, LIGER_GEMMA3}},
        .parse = gckpt_parse_gemma, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    [GCKPT_FAMILY_PHI3] = {
        .family = GCKPT_FAMILY_PHI3,
        .types = {{"phi3", PAD(32000), false, LIGER_RMS}},
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
        .types = {{"olmo2", PAD(1), false, LIGER_OLMO2}},
        .parse = gckpt_parse_olmo2, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    [GCKPT_FAMILY_GRANITE] = {
        .family = GCKPT_FAMILY_GRANITE,
        .types = {{"granite", NO_PAD, false, LIGER_NO_FLCE}},
        .parse = gckpt_parse_granite, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    /* LoRA: the attention projections only (the experts are fused parameters and the
     * router no nn.Linear under transformers 5.24, FINDINGS R-PEFT-28); gpt_oss reads its own
     * rope types (yarn, model_moe.c) */
    [GCKPT_FAMILY_MOE] = {
        .family = GCKPT_FAMILY_MOE,
        .types = {{"mixtral", NO_PAD, false, LIGER_MOE}, {"qwen3_moe", NO_PAD, false, LIGER_MOE}, {"olmoe", PAD(1), false, NO_LIGER},
                  {"gpt_oss", NO_PAD, true, LIGER_CHUNK(8)}},
        .parse = gckpt_parse_moe, .trace = trace_llama,
        .lora_targets = LT(Q) | LT(K) | LT(V) | LT(O), .lora_beyond_targets = true, .embed_name = "embed_tokens",
        .padding_idx = true, .host = true, .cuda = true},
    /* gckpt-run: the host backend (the CUDA kernels take one head width for q, k and v and
     * have no ROUTE_MASK nor gather(1)). LoRA:
     * the MLA projections (peft 0.21.2 names no default targets for it; all-linear and the MLP
     * names go to the routed experts' fused parameters and the router: FINDINGS R-PEFT-29) */
    [GCKPT_FAMILY_DEEPSEEK] = {
        .family = GCKPT_FAMILY_DEEPSEEK,
        .types = {{"deepseek_v3", NO_PAD, false, LIGER_SWIGLU}},
        .parse = gckpt_parse_deepseek, .trace = trace_llama,
        .lora_targets = LT(Q) | LT(O) | LT(Q_A) | LT(Q_B) | LT(KV_A) | LT(KV_B), .lora_beyond_targets = true,
        .embed_name = "embed_tokens", .padding_idx = true, .host = true, .cuda = false},
    /* llama whose NoPE layers skip the rotary embedding (block type NOPE, FINDINGS R-FAM-16) */
    [GCKPT_FAMILY_SMOLLM3] = {
        .family = GCKPT_FAMILY_SMOLLM3,
        .types = {{"smollm3", PAD(128004), false, LIGER_LAYERS}},
        .parse = gckpt_parse_smollm3, .trace = trace_llama,
        .lora_targets = LLAMA_LINEARS, .embed_name = "embed_tokens", .padding_idx = true,
        .host = true, .cuda = true},
    /* phi3's gate_up MLP and partial rotary, rotated as interleaved pairs (GCKPT_P_NEG_HALF /
     * CAT_HALF / CAT_HALVES with sa 1: the host backend's, not the CUDA kernels'), q/k/v
     * biases, Gemma 2's four norms (FINDINGS R-FAM-17). Liger: apply_liger_kernel_to_glm4's fused loss
     * (LigerForCausalLMLoss on lm_head.weight, chunk_mem_const 1); its LigerRMSNormForGlm4 and
     * LigerPhi3SwiGLUMLP planned with transformers' ops (an upper bound), rope off */
    [GCKPT_FAMILY_GLM4] = {
        .family = GCKPT_FAMILY_GLM4,
        .types = {{"glm4", PAD(151329), false, LIGER}},
        .parse = gckpt_parse_glm4, .trace = trace_llama,
        .lora_targets = LT(Q) | LT(K) | LT(V) | LT(O) | LT(GATE_UP) | LT(DOWN), .embed_name = "embed_tokens",
        .padding_idx = true, .host = true, .cuda = false},
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

/* transformers 5.24's modelling of each, no small delta on a family (FINDINGS R-FAM-18) */
const gckpt_unmodelled_type gckpt_unmodelled_dense_types[] = {
    {"cohere2", "CohereLayerNorm (mean-centred, no bias, in fp32 Python ops) feeding one parallel attention + MLP "
                "sum, rotary only on its sliding-window layers (the full ones are NoPE), logit_scale"},
    {NULL, NULL},
};

/* transformers 5.24's modelling of each (FINDINGS R-VLM-*) */
const gckpt_vlm_type gckpt_vlm_types[] = {
    {"llava", "LLaVA", "gckpt-run's execution on the CUDA backend and in pure bf16 (the host backend runs its fp32 "
                       "and amp-bf16 step)",
     gckpt_vlm_read_llava, "clip_vision_model", "llama",
     /* LlamaConfig's */
     "{\"vocab_size\": 32000, \"hidden_size\": 4096, \"intermediate_size\": 11008, \"num_hidden_layers\": 32, "
     "\"num_attention_heads\": 32}",
     NULL, false, false, true, true, .features_cat = true, .host = true, .lora = true},
    {"llava_next", "LLaVA-NeXT", "gckpt-run's execution on the CUDA backend and in pure bf16 (the host backend runs "
                                 "its fp32 and amp-bf16 step)",
     gckpt_vlm_read_llava_next, "clip_vision_model", "llama",
     /* LlamaConfig's */
     "{\"vocab_size\": 32000, \"hidden_size\": 4096, \"intermediate_size\": 11008, \"num_hidden_layers\": 32, "
     "\"num_attention_heads\": 32}",
     NULL, false, false, false, true, .features_cat = true, .packed_tiles = true, .host = true},
    {"qwen2_5_vl", "Qwen2.5-VL", "gckpt-run's execution of the vision tower",
     gckpt_vlm_read_qwen2_5_vl, "qwen2_5_vl_vision", "qwen2_5_vl_text",
     /* Qwen2_5_VLTextConfig's (those Qwen2Config, whose reader reads it, defaults otherwise) */
     "{\"vocab_size\": 152064, \"hidden_size\": 8192, \"intermediate_size\": 29568, \"num_hidden_layers\": 80, "
     "\"num_attention_heads\": 64, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-5, \"rope_theta\": 1000000.0, "
     "\"max_position_embeddings\": 32768, \"max_window_layers\": 80}",
     /* its forward passes use_cache None down: the text model fills text_config's cache */
     "qwen2", true, false, true, true, .features_cat = true, .tower_module = "visual",
     .tower_trained_part = {"merger"}},
    {"qwen2_vl", "Qwen2-VL", "the ViT's full-attention blocks, the 2x2 patch merger, the pixel budget's image "
                             "tokens and M-RoPE"},
    {"qwen3_vl", "Qwen3-VL", "gckpt-run's execution of the vision tower",
     gckpt_vlm_read_qwen3_vl, "qwen3_vl_vision", "qwen3_vl_text",
     /* Qwen3VLTextConfig's (those Qwen3Config, whose reader reads it, defaults otherwise) */
     "{\"vocab_size\": 151936, \"hidden_size\": 4096, \"intermediate_size\": 22016, \"num_hidden_layers\": 32, "
     "\"num_attention_heads\": 32, \"head_dim\": 128, \"rms_norm_eps\": 1e-6, \"rope_theta\": 500000.0, "
     "\"max_position_embeddings\": 128000}",
     "qwen3", false, true, true, true, .features_cat = true, .tower_module = "visual",
     .tower_trained_part = {"merger", "deepstack_merger_list"}},
    {"gemma3", "Gemma 3 (multimodal)", "gckpt-run's execution of the vision tower",
     gckpt_vlm_read_gemma3, "siglip_vision_model", "gemma3_text",
     /* Gemma3TextConfig's */
     "{\"vocab_size\": 262208, \"hidden_size\": 2304, \"intermediate_size\": 9216, \"num_hidden_layers\": 26, "
     "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"head_dim\": 256, \"query_pre_attn_scalar\": 256, "
     "\"rms_norm_eps\": 1e-6}",
     NULL, false, false, true, true, .image_masks = true, .lora = true},
    {"mllama", "Llama 3.2 Vision", "gckpt-run's execution of the tiled vision encoder and the cross-attention text "
                                   "layers",
     gckpt_vlm_read_mllama, "mllama_vision_model", "mllama_text_model",
     /* MllamaTextConfig's (those LlamaConfig, whose reader reads it, defaults otherwise) */
     "{\"vocab_size\": 128256, \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 40, "
     "\"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-5, "
     "\"max_position_embeddings\": 131072}",
     "llama", false, false, true, true, .cross_attention = true},
    {.name = NULL},
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
