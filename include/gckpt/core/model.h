/* A transformer as described by a Hugging Face config.json. */
#ifndef GCKPT_MODEL_H
#define GCKPT_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The families (what each is: core/families.c, gckpt/core/families.h). */
typedef enum {
    GCKPT_FAMILY_LLAMA, /* RMSNorm, RoPE, GQA, SwiGLU: llama, mistral, qwen2, qwen3 */
    GCKPT_FAMILY_GPT2,  /* LayerNorm, learned positions, MHA with biases, GELU */
    /* issue 13 (core/model_dense.c): llama-built decoders with the differences below */
    GCKPT_FAMILY_GEMMA,    /* gemma, gemma2, gemma3_text: (1 + w) RMSNorm, sqrt(h) embedding scale, GELU-tanh */
    GCKPT_FAMILY_PHI3,     /* phi3 (Phi-3, Phi-4-mini): fused qkv_proj and gate_up_proj, partial rotary */
    GCKPT_FAMILY_GPT_NEOX, /* gpt_neox (Pythia): parallel attention + MLP, LayerNorm, packed qkv, partial rotary */
    GCKPT_FAMILY_OLMO2,    /* olmo2: post-norms only, q/k norms over the whole projection */
    GCKPT_FAMILY_GRANITE,  /* granite: llama with embedding / residual / attention / logits multipliers */
    /* core/model_moe.c: llama attention, a mixture-of-experts block in place of the MLP */
    GCKPT_FAMILY_MOE,      /* mixtral, qwen3_moe (q/k norms per head), olmoe (q/k norms over the projection),
                            * gpt_oss (attention sinks, biases, the clamped SwiGLU experts) */
    /* core/model_mla.c: multi-head latent attention, dense first layers, routed + shared experts */
    GCKPT_FAMILY_DEEPSEEK, /* deepseek_v3 */
    GCKPT_FAMILY_SMOLLM3,  /* smollm3: llama whose NoPE layers (no_rope_layers 0) skip the rotary embedding */
    GCKPT_FAMILY_GLM4,     /* glm4 (GLM-4-0414): phi3's gate_up MLP and partial rotary (interleaved pairs),
                            * q/k/v biases, four norms per layer */
    GCKPT_NFAMILY
} gckpt_family;

/* RMSNorm variants (what each saves differs, FINDINGS section 14): LlamaRMSNorm casts
 * back before the weight; Gemma's multiplies by (1 + w) in fp32; OLMo 2's multiplies in
 * fp32 and casts after. */
typedef enum { GCKPT_RMS_LLAMA, GCKPT_RMS_GEMMA, GCKPT_RMS_F32_OUT } gckpt_rms_kind;

#define GCKPT_MAX_LAYERS 4096u

/* gelu_new is HF's Python composite (several saved tensors); gelu_pytorch_tanh and gelu
 * are single fused aten ops that save only their input. */
typedef enum { GCKPT_ACT_SILU, GCKPT_ACT_GELU_NEW, GCKPT_ACT_GELU_TANH, GCKPT_ACT_GELU } gckpt_act;

typedef struct {
    char name[128];       /* file stem or path given */
    char model_type[32];  /* as in config.json */
    gckpt_family family;
    uint64_t layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
    uint64_t positions;   /* gpt2 learned position table rows; 0 for RoPE models */
    bool learned_positions; /* gpt2: a learned position table (no rotary buffers; no row beyond it) */
    bool tied;            /* lm_head shares the embedding matrix */
    bool qkv_bias, o_bias, mlp_bias, qk_norm;
    gckpt_act act;
    double attn_dropout, resid_dropout, embd_dropout;
    double norm_eps, rope_theta; /* for executors' numerics */
    double rope_local_theta;     /* gemma3_text's sliding layers' rotary theta (rope_theta: the
                                  * full layers'); 0 elsewhere. Executors' numerics only */
    /* What the config says about how the model may be run (HF defaults when absent). */
    uint64_t max_positions;  /* longest sequence: max_position_embeddings, gpt2 n_positions */
    bool use_cache;          /* config use_cache (the plans assume False, as the Trainer sets) */
    bool image_masks;        /* a VLM's token_type_ids masks (Gemma 3): every layer's SDPA reads a
                              * materialised bool [b, 1, s, s] mask of its layer type. Set by a
                              * VLM step only (core/vlm_step.c) */
    bool kv_cache;           /* the training forward fills a DynamicCache: each attention's k and v
                              * copied into it (DynamicLayer.update's torch.cat), the copies held
                              * until the forward returns. Set by a VLM step only (core/vlm_step.c:
                              * a family whose forward passes no use_cache, without checkpointing) */
    uint64_t sliding_window; /* window of sliding-attention layers; 0: none */
    uint64_t sliding_layers; /* how many layers use it */
    uint8_t sliding[GCKPT_MAX_LAYERS / 8]; /* bit i: layer i is a sliding-attention layer */
    /* issue 13's families (0 / false / 1.0 for llama and gpt2) */
    gckpt_rms_kind rms;
    bool sandwich_norms;     /* gemma2/3, glm4: post-attention, pre- and post-feedforward norms */
    bool glm_norms;          /* glm4: those named post_self_attn_layernorm, post_attention_layernorm
                              * (before the MLP) and post_mlp_layernorm */
    bool both_masks;         /* gemma2/3: the model builds the full and the sliding-window mask in
                              * every forward (eager materialises both) */
    bool post_norms_only;    /* olmo2: no input norm; norms after attention and MLP */
    bool qk_norm_full;       /* olmo2: q_norm over heads*head_dim, k_norm over kv*head_dim */
    bool fused_qkv, fused_gate_up; /* phi3 */
    bool rope_split_cat;     /* phi3: apply_rotary_pos_emb splits the rotated dims off and cats them
                              * back (q and k a cat's output, so SDPA's output is copied contiguous) */
    bool rope_fp32;          /* olmo2: rotary tables fp32, q and k rotated in fp32 and cast back */
    bool rope_per_token;     /* M-RoPE (a VLM's text model, qwen2_5_vl): the rotary tables are
                              * [b, 1, s, head_dim], one row per token, the 3-D position ids
                              * differing per sample; else [1, s, head_dim] per position */
    bool qk_norm_late;       /* the gemma family: q and k normed after all three projections */
    bool parallel_residual;  /* gpt_neox: x + attn(ln1(x)) + mlp(ln2(x)); false: y = x + attn(ln1(x)),
                              * y + mlp(ln2(y)) (use_parallel_residual: false) */
    uint64_t rotary_dim;     /* rotated dims per head: int(head_dim * partial factor) */
    bool embed_scale;        /* gemma: embeddings times sqrt(hidden) */
    double attn_softcap, final_softcap; /* gemma2 logit soft-capping; 0: none */
    double query_pre_attn_scalar; /* gemma2 / gemma3_text: the score scale is its ** -0.5; 0: none */
    double embedding_multiplier, residual_multiplier, attention_multiplier, logits_scaling; /* granite */
    bool multipliers;        /* granite */
    int rope_tables;         /* distinct rotary tables: gemma3_text 2 (local, global), else 1 */
    /* mixture of experts (experts > 0: the model is one; 0 elsewhere): every layer's MLP is a router
     * over `experts` SwiGLU experts of width `expert_inter`, each token sent to `top_k` */
    uint64_t experts, top_k, expert_inter;
    bool topk_renorm;        /* the top-k weights divided by their sum (mixtral; norm_topk_prob) */
    bool topk_weights_f32;   /* the routing weights stay fp32 (mixtral), else cast to the logits' dtype */
    double router_aux_coef;  /* router_aux_loss_coef (used only with output_router_logits) */
    bool router_aux_loss;    /* output_router_logits: every layer's router logits kept to the
                              * head's load-balancing loss, added to the loss x router_aux_coef */
    /* gpt_oss (model_moe.c, FINDINGS section 16; false / 0 elsewhere) */
    bool attn_sinks;         /* a learned logit per head (self_attn.sinks [heads]) joins every
                              * softmax row: eager only, [b, heads, s, s + 1] scores */
    bool rope_halves;        /* _apply_rotary_emb: [s, head_dim / 2] tables, chunk, four products, cat */
    bool router_bias;        /* the router's F.linear has a bias */
    bool topk_first;         /* the router takes the top-k logits, then a softmax over those k */
    bool expert_bias;        /* gate_up_proj_bias / down_proj_bias gathered per (token, expert) pair */
    double swiglu_alpha, swiglu_limit; /* the clamped SwiGLU of gpt_oss's experts (limit 0: silu) */
    bool mxfp4_checkpoint;   /* quantization_config mxfp4: trained dequantized (Mxfp4Config(dequantize=True)) */
    /* DeepSeek-V3 (core/model_mla.c, FINDINGS R-MOE-8; 0 / false elsewhere) */
    uint64_t dense_layers;   /* first_k_dense_replace: layers 0 .. n-1 have the dense MLP of
                              * `intermediate` (block type DENSE_MLP, parameters of their own) */
    uint64_t shared_inter;   /* the shared experts' SwiGLU width (moe_intermediate_size x
                              * n_shared_experts) beside the routed ones; 0: none */
    bool mla;                /* multi-head latent attention: q through q_lora_rank (0: one q_proj),
                              * k / v from a kv_lora_rank latent, a decoupled rotary part */
    uint64_t q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
    bool rope_interleave;    /* the rotary part rotated as interleaved pairs (0::2, 1::2); glm4: its
                              * apply_rotary_pos_emb also makes the tables' first halves
                              * repeat_interleave(2), a new pair per layer */
    bool router_groups;      /* DeepseekV3TopkRouter: fp32 logits, sigmoid, + e_score_correction_bias,
                              * the top topk_group of n_group groups, top_k among them, the
                              * weights gathered, renormalised (topk_renorm), x routed_scale */
    uint64_t n_group, topk_group;
    double routed_scale;
    bool router_logits_out;  /* output_router_logits without a load-balancing loss (DeepSeek-V3):
                              * the output recorder keeps every layer's router logits until the
                              * forward returns */
    /* gpt_oss's rope_type "yarn" (GptOssConfig's default without rope_parameters): the
     * values the rotary tables take (numerics only: the tables' shape is the default's) */
    struct {
        bool on, truncate;
        double factor, beta_fast, beta_slow, original_max, attention_factor;
    } yarn;
    char rope_other[32];     /* a rope_type neither default, llama3 nor (gpt_oss) yarn (planned:
                              * the tables' shape is the same; gckpt-run refuses it), else "" */
    /* rope_type "llama3" (Llama 3.1 / 3.2, core/model_rope.c): the default inverse
     * frequencies rescaled by wavelength (numerics only, as yarn) */
    struct {
        bool on;
        double factor, low_freq_factor, high_freq_factor, original_max;
    } llama3;
    /* nn.Embedding's padding_idx (config.pad_token_id where the class passes it): the
     * lookup gives that row no gradient. pad false: none; pad_id outside [0, vocab):
     * transformers cannot build the model (gckpt-run refuses it, the planner does not care) */
    bool pad;
    int64_t pad_id;
    /* SmolLM3's NoPE layers (core/model_dense.c; none elsewhere): their attention applies no
     * rotary embedding (block type GCKPT_BLOCK_NOPE) */
    uint64_t nope_layers;
    uint8_t nope[GCKPT_MAX_LAYERS / 8]; /* bit i: layer i is a NoPE layer */
    /* mllama's text model traced with its cross-attention layers in place (block type
     * GCKPT_BLOCK_CROSS, gckpt_mllama_text_model; none elsewhere, the reader sets none):
     * which layers, and the image keys each sample's cross-attention reads */
    uint64_t cross_layers, cross_keys;
    uint8_t cross[GCKPT_MAX_LAYERS / 8];
    uint64_t embed_extra_rows; /* ... and its embed_tokens' rows beyond vocab (lm_head has vocab) */
    /* mllama's vision tower in a step (gckpt_vision_tower_model): its layers from gated_from on
     * are the gated global encoder's (block type GCKPT_BLOCK_GATED); 0: none */
    uint64_t gated_from;
} gckpt_model;

static inline bool gckpt_layer_sliding(const gckpt_model *m, uint64_t i)
{
    return i < GCKPT_MAX_LAYERS && (m->sliding[i / 8] >> (i % 8) & 1);
}

static inline bool gckpt_layer_nope(const gckpt_model *m, uint64_t i)
{
    return i < GCKPT_MAX_LAYERS && (m->nope[i / 8] >> (i % 8) & 1);
}

static inline bool gckpt_layer_cross(const gckpt_model *m, uint64_t i)
{
    return i < GCKPT_MAX_LAYERS && (m->cross[i / 8] >> (i % 8) & 1);
}

/* Parse an HF config.json text (file is only used in messages). */
bool gckpt_model_parse(const char *file, const char *text, gckpt_model *m, gckpt_err *err);
/* Resolve a name (models/NAME.json) or a path and load it. */
bool gckpt_model_load(const char *name_or_path, gckpt_model *m, gckpt_err *err);
/* m->name as gckpt_model_load names it: the stem of name_or_path, sanitised. */
void gckpt_model_name_from(const char *name_or_path, gckpt_model *m);

/* Convenience: attention widths. */
static inline uint64_t gckpt_q_dim(const gckpt_model *m) { return m->heads * m->head_dim; }
/* The attention's score scale (HF's self.scaling): Granite's attention_multiplier,
 * Gemma 2 / 3's query_pre_attn_scalar ** -0.5, head_dim ** -0.5 elsewhere (the recipe's
 * ops carry it to the executors' kernels). */
static inline double gckpt_attn_scale(const gckpt_model *m)
{
    if (m->multipliers) return m->attention_multiplier;
    if (m->mla) return pow((double)(m->qk_nope_dim + m->qk_rope_dim), -0.5); /* (yarn's mscale: numerics only) */
    return pow(m->query_pre_attn_scalar > 0 ? m->query_pre_attn_scalar : (double)m->head_dim, -0.5);
}
static inline uint64_t gckpt_kv_dim(const gckpt_model *m) { return m->kv_heads * m->head_dim; }
/* The per-head widths of q and k, and of v: head_dim, or multi-head latent attention's
 * qk_nope + qk_rope and v_head_dim. */
static inline uint64_t gckpt_qk_head_dim(const gckpt_model *m) { return m->mla ? m->qk_nope_dim + m->qk_rope_dim : m->head_dim; }
static inline uint64_t gckpt_v_head_dim(const gckpt_model *m) { return m->mla ? m->v_head_dim : m->head_dim; }
/* columns of the rotary cos / sin tables: rotary_dim (partial rotary), gpt_oss's
 * cat-free first half [s, head_dim / 2] */
static inline uint64_t gckpt_rotary_table_width(const gckpt_model *m)
{
    return m->rope_halves ? m->rotary_dim / 2 : m->rotary_dim;
}

#ifdef __cplusplus
}
#endif

#endif
