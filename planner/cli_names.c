/* Command-line spellings (include/gckpt/planner/cli_names.h). */
#include "gckpt/planner/cli_names.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

const char *const gckpt_precision_spellings = "fp32, bf16, amp-bf16, amp-fp16 (any case)";
const char *const gckpt_optimizer_spellings =
    "adamw or adamw_torch_fused, adamw-foreach or adamw_torch, sgd, adamw-8bit or adamw_bnb_8bit or adamw_8bit, "
    "paged-adamw-8bit or paged_adamw_8bit, paged-adamw-32bit or paged_adamw_32bit";
const char *const gckpt_attention_spellings = "sdpa, eager, flash_attention_2";

int gckpt_precision_from_user(const char *s)
{
    for (int i = 0; s && i < GCKPT_NPREC; i++)
        if (!strcasecmp(s, gckpt_precision_names[i])) return i;
    return -1;
}

int gckpt_optimizer_from_user(const char *s)
{
    /* TrainingArguments.optim values (transformers OptimizerNames) and what they build */
    static const struct { const char *hf; gckpt_optimizer o; } alias[] = {
        {"adamw_torch_fused", GCKPT_ADAMW}, {"adamw_torch", GCKPT_ADAMW_FOREACH},
        {"adamw_bnb_8bit", GCKPT_ADAMW_8BIT}, {"adamw_8bit", GCKPT_ADAMW_8BIT},
        {"paged_adamw_8bit", GCKPT_PAGED_ADAMW_8BIT}, {"paged_adamw_32bit", GCKPT_PAGED_ADAMW_32BIT},
    };
    int v = gckpt_optimizer_from(s);
    for (size_t i = 0; v < 0 && s && i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(s, alias[i].hf)) v = (int)alias[i].o;
    return v;
}

int gckpt_attention_from_user(const char *s, char *note, size_t n)
{
    if (note && n) note[0] = 0;
    int v = gckpt_attention_from(s);
    if (v < 0 && s && !strcmp(s, "flash_attention_2")) {
        v = GCKPT_SDPA;
        if (note && n)
            snprintf(note, n, "--attention flash_attention_2 is planned as sdpa: for bf16/fp16 both run a fused "
                              "flash kernel that keeps q, k, v, the output and the logsumexp for the backward "
                              "(not measured with the flash-attn package)");
    }
    return v;
}

int gckpt_model_id_hint(const char *ref, char *buf, size_t n)
{
    const char *slash = strchr(ref, '/');
    struct stat st;
    size_t l = strlen(ref);
    if (!slash || strchr(slash + 1, '/') || slash == ref || !slash[1] || ref[0] == '.' ||
        (l > 5 && !strcmp(ref + l - 5, ".json")) || stat(ref, &st) == 0)
        return 0;
    snprintf(buf, n, "--model %s: looks like a Hugging Face model id; gckpt needs its config.json: "
                     "hf download %s config.json --local-dir %s (huggingface-cli download in older "
                     "huggingface_hub), then --model %s/config.json",
             ref, ref, ref, ref);
    return 1;
}
