/* Report (not a test): gckpt's per-layer activation bytes next to the published
 * formulas people use today (Korthikanti et al. 2022, "Reducing Activation
 * Recomputation in Large Transformer Models"): s*b*h*(34 + 5*a*s/h) bytes per GPT
 * layer in 16-bit with dropout and eager attention, and 2*s*b*h under full
 * recomputation. The formulas assume a fused GELU and 16-bit softmax; HF's GPT-2 uses
 * the Python gelu_new (five saved [b,s,4h] tensors) and keeps the c_attn output whole,
 * so gckpt's figures, which match real HF Transformers (tests/test_hf_fixtures),
 * differ from the formula by design. Usage: gckpt-crosscheck [--seq N] [--micro-batch N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/eval.h"

int main(int argc, char **argv)
{
    uint64_t seq = 2048, b = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seq") && i + 1 < argc) seq = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--micro-batch") && i + 1 < argc) b = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: gckpt-crosscheck [--seq N] [--micro-batch N]\n");
            return 2;
        }
    }
    if (!seq || !b || seq > 65536 || b > 1024) {
        fprintf(stderr, "gckpt-crosscheck: --seq in [1, 65536], --micro-batch in [1, 1024]\n");
        return 2;
    }
    gckpt_device d;
    gckpt_err err;
    if (!gckpt_device_load("h100-sxm-80gb", &d, &err)) {
        fprintf(stderr, "gckpt-crosscheck: %s\n", err.msg);
        return 2;
    }
    static const char *models[] = {"gpt2", "gpt2-medium", "gpt2-xl", "llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b"};
    printf("per-layer activation bytes at seq %llu, micro-batch %llu, 16-bit (pure bf16), eager attention\n",
           (unsigned long long)seq, (unsigned long long)b);
    printf("%-14s %6s %4s %14s %14s %7s %14s %14s\n", "model", "h", "a", "gckpt", "sbh(34+5as/h)", "ratio",
           "ckpt gckpt", "2sbh");
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        gckpt_model m;
        if (!gckpt_model_load(models[i], &m, &err)) {
            fprintf(stderr, "gckpt-crosscheck: %s\n", err.msg);
            return 2;
        }
        static gckpt_recipe r;
        gckpt_recipe_build(&m, GCKPT_BF16, GCKPT_EAGER, &r);
        gckpt_setting s = {.seq = seq, .micro_batch = b, .grad_accum = 1, .precision = GCKPT_BF16,
                           .optimizer = GCKPT_ADAMW, .attention = GCKPT_EAGER};
        gckpt_ctx c;
        if (!gckpt_ctx_init(&c, &m, &d, &r, &s, &err)) {
            fprintf(stderr, "gckpt-crosscheck: %s\n", err.msg);
            return 2;
        }
        double sbh = (double)seq * (double)b * (double)m.hidden;
        double k = sbh * (34.0 + 5.0 * (double)m.heads * (double)seq / (double)m.hidden);
        uint64_t ours = gckpt_layer_saved_bytes(&c);
        printf("%-14s %6llu %4llu %14llu %14.0f %7.3f %14llu %14.0f\n", models[i],
               (unsigned long long)m.hidden, (unsigned long long)m.heads, (unsigned long long)ours, k,
               (double)ours / k, (unsigned long long)c.raw[r.block_in], 2 * sbh);
    }
    printf("(llama-family rows use SwiGLU and GQA, outside the formula's GPT assumptions: shown for scale)\n");
    return 0;
}
