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

static const gckpt_family_info families[] = {
    {GCKPT_FAMILY_LLAMA,
     {{"llama", NO_PAD, false}, {"mistral", NO_PAD, false}, {"qwen2", NO_PAD, false}, {"qwen3", NO_PAD, false}},
     gckpt_parse_llama, trace_llama, LT(Q) | LT(K) | LT(V) | LT(O) | LT(GATE) | LT(UP) | LT(DOWN), false,
     "embed_tokens", true, true, true, false},
    {GCKPT_FAMILY_GPT2, {{"gpt2", NO_PAD, false}}, gckpt_parse_gpt2, trace_gpt2,
     LT(C_ATTN) | LT(ATTN_C_PROJ) | LT(C_FC) | LT(MLP_C_PROJ), false, "wte", false, true, true, true},
    {GCKPT_FAMILY_GEMMA, {{"gemma", PAD(0), false}, {"gemma2", PAD(0), false}, {"gemma3_text", PAD(0), false}},
     gckpt_parse_gemma, trace_llama, LT(Q) | LT(K) | LT(V) | LT(O) | LT(GATE) | LT(UP) | LT(DOWN), false,
     "embed_tokens", true, true, true, false},
    {GCKPT_FAMILY_PHI3, {{"phi3", PAD(32000), false}}, gckpt_parse_phi3, trace_llama,
     LT(QKV_PROJ) | LT(O) | LT(GATE_UP) | LT(DOWN), false, "embed_tokens", true, true, true, false},
    {GCKPT_FAMILY_GPT_NEOX, {{"gpt_neox", NO_PAD, false}}, gckpt_parse_gpt_neox, trace_gpt_neox,
     LT(QUERY_KEY_VALUE) | LT(DENSE) | LT(H_TO_4H) | LT(4H_TO_H), false, "embed_in", false, true, true, false},
    {GCKPT_FAMILY_OLMO2, {{"olmo2", PAD(1), false}}, gckpt_parse_olmo2, trace_llama,
     LT(Q) | LT(K) | LT(V) | LT(O) | LT(GATE) | LT(UP) | LT(DOWN), false, "embed_tokens", true, true, true, false},
    {GCKPT_FAMILY_GRANITE, {{"granite", NO_PAD, false}}, gckpt_parse_granite, trace_llama,
     LT(Q) | LT(K) | LT(V) | LT(O) | LT(GATE) | LT(UP) | LT(DOWN), false, "embed_tokens", true, true, true, false},
    /* LoRA: the attention projections only (the experts are fused parameters and the
     * router no nn.Linear under transformers 5.24, FINDINGS 12.14); gpt_oss reads its own
     * rope types (yarn, model_moe.c) */
    {GCKPT_FAMILY_MOE,
     {{"mixtral", NO_PAD, false}, {"qwen3_moe", NO_PAD, false}, {"olmoe", PAD(1), false}, {"gpt_oss", NO_PAD, true}},
     gckpt_parse_moe, trace_llama, LT(Q) | LT(K) | LT(V) | LT(O), true, "embed_tokens", true, true, true, false},
};
#undef LT
_Static_assert(sizeof families / sizeof *families == GCKPT_NFAMILY, "one row per gckpt_family");

const char *const gckpt_unmodelled_moe_types[] = {"qwen2_moe", "deepseek_v3", NULL};

const gckpt_family_info *gckpt_family_of(gckpt_family f)
{
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (families[i].family == f) return &families[i];
    return NULL;
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
