/* Command-line spellings (include/gckpt/planner/cli_names.h). */
#include "gckpt/planner/cli_names.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *const gckpt_precision_spellings = "fp32, bf16, amp-bf16, amp-fp16 (any case)";
const char *const gckpt_attention_spellings = "sdpa, eager, flash_attention_2";

int gckpt_precision_from_user(const char *s)
{
    for (int i = 0; s && i < GCKPT_NPREC; i++)
        if (!strcasecmp(s, gckpt_precision_names[i])) return i;
    return -1;
}

/* Every optimizer (gckpt_optimizer order): the TrainingArguments.optim values
 * (transformers OptimizerNames) that build it, and a few words for --help. The help's
 * list, the error's list and the parser all read this table. */
static const struct {
    const char *optim[2];
    const char *what;
} optimizers[GCKPT_NOPT] = {
    [GCKPT_ADAMW] = {{"adamw_torch_fused"}, "fused, HF's default"},
    [GCKPT_ADAMW_FOREACH] = {{"adamw_torch"}, NULL},
    [GCKPT_SGD] = {{NULL}, "momentum 0.9"},
    [GCKPT_ADAMW_8BIT] = {{"adamw_bnb_8bit", "adamw_8bit"}, NULL},
    [GCKPT_PAGED_ADAMW_8BIT] = {{"paged_adamw_8bit"}, NULL},
    [GCKPT_PAGED_ADAMW_32BIT] = {{"paged_adamw_32bit"}, NULL},
};
#define N_OPTIM (sizeof optimizers[0].optim / sizeof optimizers[0].optim[0])

int gckpt_optimizer_from_user(const char *s)
{
    int v = gckpt_optimizer_from(s);
    for (int i = 0; v < 0 && s && i < GCKPT_NOPT; i++)
        for (size_t k = 0; k < N_OPTIM && optimizers[i].optim[k]; k++)
            if (!strcmp(s, optimizers[i].optim[k])) v = i;
    return v;
}

/* Appends to buf (size n), truncating. */
static void cat(char *buf, size_t n, const char *s)
{
    size_t l = strlen(buf);
    if (l + 1 < n) snprintf(buf + l, n - l, "%s", s);
}

void gckpt_optimizer_spellings(char *buf, size_t n, bool help)
{
    if (n) buf[0] = 0;
    for (int i = 0; i < GCKPT_NOPT; i++) {
        if (i) cat(buf, n, help ? " | " : ", ");
        cat(buf, n, gckpt_optimizer_names[i]);
        if (help && (optimizers[i].what || optimizers[i].optim[0])) {
            cat(buf, n, " (");
            for (size_t k = 0; k < N_OPTIM && optimizers[i].optim[k]; k++) {
                if (k) cat(buf, n, ", ");
                cat(buf, n, optimizers[i].optim[k]);
            }
            if (optimizers[i].what) {
                if (optimizers[i].optim[0]) cat(buf, n, ": ");
                cat(buf, n, optimizers[i].what);
            }
            cat(buf, n, ")");
        }
        for (size_t k = 0; !help && k < N_OPTIM && optimizers[i].optim[k]; k++) {
            cat(buf, n, " or ");
            cat(buf, n, optimizers[i].optim[k]);
        }
    }
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
