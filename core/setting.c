#include "gckpt/core/setting.h"

#include <string.h>

const char *const gckpt_precision_names[GCKPT_NPREC] = {"fp32", "bf16", "amp-bf16", "amp-fp16"};
const char *const gckpt_optimizer_names[GCKPT_NOPT] = {"adamw",      "adamw-foreach",    "sgd",
                                                       "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit"};
const char *const gckpt_attention_names[GCKPT_NATTN] = {"sdpa", "eager"};
const char *const gckpt_code_base_names[GCKPT_NCODEBASE] = {"hf", "fused"};
const char *const gckpt_loss_names[GCKPT_NLOSS] = {"hf", "liger", "cce"};
const char *const gckpt_parallel_names[GCKPT_NPAR] = {"none", "ddp", "fsdp", "zero1", "zero2", "zero3",
#ifdef GCKPT_TOY
                                                      "toy",
#endif
};

static int find(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (s && strcmp(names[i], s) == 0) return i;
    return -1;
}

int gckpt_precision_from(const char *s) { return find(gckpt_precision_names, GCKPT_NPREC, s); }
int gckpt_optimizer_from(const char *s) { return find(gckpt_optimizer_names, GCKPT_NOPT, s); }
int gckpt_attention_from(const char *s) { return find(gckpt_attention_names, GCKPT_NATTN, s); }
int gckpt_code_base_from(const char *s) { return find(gckpt_code_base_names, GCKPT_NCODEBASE, s); }
int gckpt_loss_from(const char *s) { return find(gckpt_loss_names, GCKPT_NLOSS, s); }
int gckpt_parallel_from(const char *s) { return find(gckpt_parallel_names, GCKPT_NPAR, s); }
