/* A transformer as described by a Hugging Face config.json. */
#ifndef GCKPT_MODEL_H
#define GCKPT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gckpt/util/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GCKPT_FAMILY_LLAMA, /* RMSNorm, RoPE, GQA, SwiGLU: llama, mistral, qwen2, qwen3 */
    GCKPT_FAMILY_GPT2,  /* LayerNorm, learned positions, MHA with biases, GELU */
} gckpt_family;

/* gelu_new is HF's Python composite (several saved tensors); gelu_pytorch_tanh and gelu
 * are single fused aten ops that save only their input. */
typedef enum { GCKPT_ACT_SILU, GCKPT_ACT_GELU_NEW, GCKPT_ACT_GELU_TANH, GCKPT_ACT_GELU } gckpt_act;

typedef struct {
    char name[128];       /* file stem or path given */
    char model_type[32];  /* as in config.json */
    gckpt_family family;
    uint64_t layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
    uint64_t positions;   /* gpt2 learned position table rows; 0 for RoPE models */
    bool tied;            /* lm_head shares the embedding matrix */
    bool qkv_bias, o_bias, mlp_bias, qk_norm;
    gckpt_act act;
    double attn_dropout, resid_dropout, embd_dropout;
    double norm_eps, rope_theta; /* for executors' numerics */
    /* What the config says about how the model may be run (HF defaults when absent). */
    uint64_t max_positions;  /* longest sequence: max_position_embeddings, gpt2 n_positions */
    bool use_cache;          /* config use_cache (the plans assume False, as the Trainer sets) */
    uint64_t sliding_window; /* window of sliding-attention layers; 0: none */
    uint64_t sliding_layers; /* how many layers use it */
} gckpt_model;

/* Supported model_type values, comma separated, for error messages. */
extern const char *const gckpt_model_types;

/* Parse an HF config.json text (file is only used in messages). */
bool gckpt_model_parse(const char *file, const char *text, gckpt_model *m, gckpt_err *err);
/* Resolve a name (models/NAME.json) or a path and load it. */
bool gckpt_model_load(const char *name_or_path, gckpt_model *m, gckpt_err *err);

/* Convenience: attention widths. */
static inline uint64_t gckpt_q_dim(const gckpt_model *m) { return m->heads * m->head_dim; }
static inline uint64_t gckpt_kv_dim(const gckpt_model *m) { return m->kv_heads * m->head_dim; }

#ifdef __cplusplus
}
#endif

#endif
