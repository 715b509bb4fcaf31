#include "gckpt/core/setting.h"

#include <stdio.h>
#include <string.h>

const char *const gckpt_precision_names[GCKPT_NPREC] = {"fp32", "bf16", "amp-bf16", "amp-fp16"};
const char *const gckpt_optimizer_names[GCKPT_NOPT] = {"adamw",      "adamw-foreach",    "sgd",
                                                       "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit"};
const char *const gckpt_attention_names[GCKPT_NATTN] = {"sdpa", "eager"};
const char *const gckpt_code_base_names[GCKPT_NCODEBASE] = {"hf", "fused"};
const char *const gckpt_loss_names[GCKPT_NLOSS] = {"hf", "liger", "cce"};
const char *const gckpt_liger_kernel_names[GCKPT_NLK] = {"rope", "rms_norm", "swiglu", "fused_linear_cross_entropy"};
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

bool gckpt_liger_kernels_parse(const char *list, uint8_t *off, char *bad, size_t nbad)
{
    uint8_t on = 0;
    const char *p = list;
    if (!*p) {
        snprintf(bad, nbad, "(empty)");
        return false;
    }
    while (*p) {
        size_t n = strcspn(p, ",");
        int k = -1;
        for (int i = 0; i < GCKPT_NLK; i++)
            if (strlen(gckpt_liger_kernel_names[i]) == n && !strncmp(p, gckpt_liger_kernel_names[i], n)) k = i;
        if (k < 0) {
            snprintf(bad, nbad, "%.*s", (int)(n < 48 ? n : 48), p);
            return false;
        }
        on |= (uint8_t)(1u << k);
        p += n;
        if (*p == ',') p++;
    }
    *off = (uint8_t)(((1u << GCKPT_NLK) - 1) & ~on);
    return true;
}
