/* LoRA and QLoRA (peft 0.21.2, bitsandbytes 0.50.2; tools/hf_probe/FINDINGS.md 12): which
 * linears get adapters, which modules get trainable copies, the defaults of the planner's
 * options, and the names they are given and printed with. The recipe traces what these
 * say; the parameter state table sizes it. (core) */
#ifndef GCKPT_PEFT_H
#define GCKPT_PEFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gckpt/core/model.h"
#include "gckpt/core/quant_layout.h"
#include "gckpt/core/setting.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The linears a LoRA adapter can wrap, by their module names inside a layer. peft matches
 * a list entry by name suffix at a '.' boundary, so GPT-2's "c_proj" takes attn.c_proj and
 * mlp.c_proj (FINDINGS 12.2). "all-linear" is every one of a family's (the output layer,
 * lm_head, never). Phi-3's fused qkv_proj / gate_up_proj and
 * GPT-NeoX's packed query_key_value get one adapter over the fused output (FINDINGS 12.13).
 * DeepSeek-V3's multi-head latent attention: q_proj (no q_lora_rank) or q_a_proj and
 * q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj (FINDINGS R-PEFT-29). */
typedef enum {
    GCKPT_LT_Q, GCKPT_LT_K, GCKPT_LT_V, GCKPT_LT_O, GCKPT_LT_GATE, GCKPT_LT_UP, GCKPT_LT_DOWN,
    GCKPT_LT_C_ATTN, GCKPT_LT_ATTN_C_PROJ, GCKPT_LT_C_FC, GCKPT_LT_MLP_C_PROJ,
    GCKPT_LT_QKV_PROJ, GCKPT_LT_GATE_UP, /* phi3 (with o_proj, down_proj) */
    GCKPT_LT_QUERY_KEY_VALUE, GCKPT_LT_DENSE, GCKPT_LT_H_TO_4H, GCKPT_LT_4H_TO_H, /* gpt_neox */
    GCKPT_LT_Q_A, GCKPT_LT_Q_B, GCKPT_LT_KV_A, GCKPT_LT_KV_B, /* deepseek_v3's MLA (with q_proj, o_proj) */
    GCKPT_NLT
} gckpt_lora_target;
#define GCKPT_LT_ALL ((1u << GCKPT_NLT) - 1)

extern const char *const gckpt_lora_target_modules[GCKPT_NLT]; /* "self_attn.q_proj", ... */
/* The module's own name ("q_proj"): the recipe's op name of the linear. */
const char *gckpt_lora_target_bare(gckpt_lora_target t);

/* modules_to_save: a trainable deep copy next to the frozen original */
typedef enum { GCKPT_MTS_LM_HEAD = 1, GCKPT_MTS_EMBED = 2 } gckpt_mts;

extern const char *const gckpt_method_names[GCKPT_NMETHOD]; /* "full", "lora", "qlora" */
int gckpt_method_from(const char *s);

/* The planner's defaults for a method: rank 16, alpha 32, dropout 0.05, all-linear,
 * nothing to save; qlora: nf4, double quantization, uint8 storage, bf16 compute. */
void gckpt_peft_default(gckpt_method method, gckpt_peft *p);

/* "all-linear" or a comma-separated list of module names; false with *bad (size n) the
 * first entry that names no adapter-capable linear. */
bool gckpt_lora_targets_parse(const char *s, uint32_t *targets, char *bad, size_t n);
/* A comma-separated list of lm_head, embed_tokens (llama-built families) / wte (gpt2) /
 * embed_in (gpt_neox, whose output layer is lm_head in transformers 5.24). */
bool gckpt_mts_parse(const char *s, uint8_t *mts, char *bad, size_t n);

/* The linears of family f (a mask of target bits; 0: LoRA not modelled on it). */
uint32_t gckpt_lora_family_targets(gckpt_family f);

/* Whether the method trains adapters (lora, qlora) / quantizes the base linears (qlora). */
static inline bool gckpt_peft_on(const gckpt_peft *p) { return p && p->method != GCKPT_METHOD_FULL; }
static inline bool gckpt_peft_quantized(const gckpt_peft *p)
{
    return p && p->method == GCKPT_METHOD_QLORA && p->quant != GCKPT_QUANT_NONE;
}

/* The names printed in snippets and recorded in plans: "q_proj,k_proj,..." (the module
 * names without their parent, as peft users write them), "all-linear" when every linear of
 * the family is targeted; "lm_head,embed_tokens". */
void gckpt_lora_targets_name(uint32_t targets, gckpt_family f, char *buf, size_t n);
void gckpt_mts_name(uint8_t mts, gckpt_family f, char *buf, size_t n);
/* Whether LoRA / QLoRA as pf says is modelled on model m (the targets name a linear of it;
 * on the MoE families attention adapters only, no QLoRA on gpt_oss); false with one line. */
bool gckpt_peft_model_ok(const gckpt_model *m, const gckpt_peft *pf, gckpt_err *err);
/* Every linear name of family f a user can pass ("q_proj,k_proj,...", "c_attn,c_proj,c_fc"). */
void gckpt_lora_family_names(gckpt_family f, char *buf, size_t n);
/* Every linear name of every family, each once. */
void gckpt_lora_all_names(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
