/* Run settings: everything about a training step that is not the model or the GPU. */
#ifndef GCKPT_SETTING_H
#define GCKPT_SETTING_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GCKPT_FP32,     /* fp32 weights, fp32 compute */
    GCKPT_BF16,     /* pure bf16: weights, grads, optimizer states in bf16 */
    GCKPT_AMP_BF16, /* fp32 weights under torch.autocast(bf16): HF Trainer bf16=True */
    GCKPT_AMP_FP16, /* fp32 weights under torch.autocast(fp16): HF Trainer fp16=True */
    GCKPT_NPREC
} gckpt_precision;

/* adamw: torch.optim.AdamW(fused=True), HF's default optim "adamw_torch_fused" (torch >= 2.8);
 * adamw-foreach: "adamw_torch" (foreach implementation, one state-sized temporary);
 * sgd: SGD with momentum; adamw-8bit: bitsandbytes "adamw_bnb_8bit". */
typedef enum { GCKPT_ADAMW, GCKPT_ADAMW_FOREACH, GCKPT_SGD, GCKPT_ADAMW_8BIT, GCKPT_NOPT } gckpt_optimizer;
typedef enum { GCKPT_SDPA, GCKPT_EAGER, GCKPT_NATTN } gckpt_attention;

typedef struct {
    uint64_t seq, micro_batch, grad_accum;
    gckpt_precision precision;
    gckpt_optimizer optimizer;
    gckpt_attention attention;
    uint32_t every_n; /* 0: gradient checkpointing off */
    bool offload;     /* checkpointed inputs to pinned host memory (needs every_n > 0) */
} gckpt_setting;

extern const char *const gckpt_precision_names[GCKPT_NPREC];
extern const char *const gckpt_optimizer_names[GCKPT_NOPT];
extern const char *const gckpt_attention_names[GCKPT_NATTN];

/* Name -> enum; -1 if unknown. */
int gckpt_precision_from(const char *s);
int gckpt_optimizer_from(const char *s);
int gckpt_attention_from(const char *s);

#ifdef __cplusplus
}
#endif

#endif
