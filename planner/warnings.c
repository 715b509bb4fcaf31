/* Warnings: documented limits of the model that a plan's setting hits, each with a code
 * and one sentence, in the table and in the plan's "warnings". A rule is one line in a
 * table below: a predicate on the model and the run setting with a fixed sentence, or a
 * function that writes its own sentence (with figures) when it applies. */
#include "gckpt/core/parallel.h"
#include "gckpt/core/quant_layout.h"
#include "gckpt/core/recipe.h"
#include "gckpt/planner/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The request as one run setting: micro_batch is the largest one swept. */
static gckpt_setting request_setting(const gckpt_plan *p)
{
    gckpt_setting s = gckpt_plan_setting(p, 1, p->req.grad_accum);
    for (int i = 0; i < p->req.n_micro; i++)
        if (p->req.micro_batches[i] > s.micro_batch) s.micro_batch = p->req.micro_batches[i];
    return s;
}

/* ---- rules with a fixed sentence ------------------------------------------------------- */

/* eager attention builds the same [b, 1, s, s] mask with or without padding (FINDINGS 17:
 * measured, no change); SDPA leaves is_causal for a materialised mask */
static bool padding_applies(const gckpt_model *m, const gckpt_setting *s)
{
    return s->micro_batch > 1 && gckpt_attention_run(m, s->attention) != GCKPT_EAGER;
}

static bool use_cache_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)s;
    return m->use_cache;
}

/* fsdp / zero2 / zero3: the working set is a closed form, not scheduled per layer */
static bool parallel_peak_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->layout.mode == GCKPT_PAR_FSDP || s->layout.mode == GCKPT_PAR_ZERO2 || s->layout.mode == GCKPT_PAR_ZERO3;
}

static bool qlora_4bit_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->peft.method == GCKPT_METHOD_QLORA && s->peft.quant != GCKPT_QUANT_INT8;
}

static bool qlora_int8_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->peft.method == GCKPT_METHOD_QLORA && s->peft.quant == GCKPT_QUANT_INT8;
}

static bool collectives_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->layout.mode != GCKPT_PAR_NONE;
}

static bool parallel_offload_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->layout.offload != 0;
}

static bool moe_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)s;
    return m->experts > 0;
}

/* QLoRA on a mixture of experts: only the attention linears are quantized (FINDINGS 12.14) */
static bool qlora_moe_applies(const gckpt_model *m, const gckpt_setting *s)
{
    return m->experts > 0 && s->peft.method == GCKPT_METHOD_QLORA;
}

static bool moe_parallel_applies(const gckpt_model *m, const gckpt_setting *s)
{
    return m->experts > 0 && s->layout.mode != GCKPT_PAR_NONE;
}

/* cuda: a rule about CUDA's kernels, said only when the plan targets CUDA (the CPU target
 * plans what the CPU probe measured) */
static const struct {
    const char *code;
    bool (*when)(const gckpt_model *m, const gckpt_setting *s);
    const char *text;
    bool cuda;
} fixed_rules[] = {
    {"padding_not_modelled", padding_applies,
     "micro-batches above 1 are planned as sequences of exactly --seq tokens without padding (an all-ones "
     "attention_mask changes nothing: measured); a padded batch passes SDPA a materialised mask instead of "
     "is_causal, which is not modelled (measured on the CPU: +26624 B at the peak of a tiny 4-layer Llama, "
     "micro-batch 2, seq 32) and may leave the fused kernels; eager attention is unaffected"},
    {"use_cache_on", use_cache_applies,
     "config.json has use_cache on; the plan assumes use_cache=False, which the Trainer sets "
     "(TrainingArguments.use_cache defaults to False) and gradient checkpointing forces: in your own "
     "training loop without checkpointing set model.config.use_cache = False, or every layer keeps "
     "copies of its keys and values"},
    {"qlora_4bit_cuda_unverified", qlora_4bit_applies,
     "4-bit layers are planned with bitsandbytes' dequantize-then-matmul path (the whole weight "
     "dequantized in the compute dtype for each use), as measured on the CPU; on CUDA gemm_4bit takes it "
     "at training shapes but may use a fused kernel without that copy for few tokens per micro-batch "
     "(read in its source): unverified on a GPU", true},
    {"qlora_int8_cuda_unverified", qlora_int8_applies,
     "8-bit layers are planned with the input kept for the backward and the weight dequantized for each "
     "use, as bitsandbytes runs them on the CPU; on CUDA MatMul8bitLt also makes fp16 and int8 copies of "
     "the input and keeps outlier columns whose size depends on the data (threshold 6.0): unverified, "
     "expect a higher peak", true},
    {"parallel_peak_approximate", parallel_peak_applies,
     "the per-rank working set of fsdp, zero2 and zero3 (gathered parameters, reduce-scatter and bucket "
     "buffers) is scheduled unit by unit as read in torch's fully_shard and DeepSpeed's source, within "
     GCKPT_PARALLEL_PEAK_BOUND_PCT " % of every measured rank of CPU fixtures of tiny models "
     "(tests/data/hf-dist); unverified: CUDA's side streams (reserved memory above allocated by up to one unit's buffers), zero3 past "
     "stage3_max_live_parameters (planned as every parameter released after its forward and gathered "
     "again), zero2's middle ranks against PyTorch (every rank planned, the busiest shown)"},
    {"moe_grouped_mm_cuda_unverified", moe_applies,
     "the experts are planned as transformers' default grouped_mm (torch._grouped_mm over all tokens x "
     "top_k pairs), measured on the CPU; on CUDA the fused grouped GEMM runs only for bf16 on sm90 / sm100, "
     "and fp32 experts (amp: grouped_mm is not autocast) or other GPUs take a per-expert mm loop (read in "
     "the source): the same saved tensors, the step time unverified", true},
    {"qlora_moe_experts_fp32", qlora_moe_applies,
     "QLoRA on a mixture of experts: bitsandbytes quantizes only the attention projections (the "
     "nn.Linear modules); the experts' fused parameters and the router are not nn.Linear, stay "
     "unquantized and are fp32 after prepare_model_for_kbit_training (measured, FINDINGS 12.14): the "
     "plan counts them so; --method lora --precision bf16 keeps them in bf16"},
    {"moe_parallel_unverified", moe_parallel_applies,
     "several GPUs with mixture of experts: the per-rank rules were measured on dense models only "
     "(tests/data/hf-dist); every rank holds every expert (no expert parallelism): unverified"},
    {"parallel_offload_unverified", parallel_offload_applies,
     "CPU offload on several GPUs (FSDP2's CPUOffloadPolicy, the ds_config's offload_optimizer / "
     "offload_param) is planned from torch's and DeepSpeed's source (FINDINGS 13.10), not measured: what leaves the device goes to host memory "
     "(pinned buffers in host_pinned_bytes, the rest, such as the CPU optimizer's states, in host_pageable_bytes), the PCIe "
     "copies are added to the step at the profile's h2d / d2h rates without overlap, and the optimizer step's "
     "time on the CPU is not modelled (the GPU's figure is kept); gckpt-run does not execute it"},
    {"collective_time_unverified", collectives_applies,
     "collective times use the GPU profile's interconnect bus bandwidths (vendor link rates, not measured "
     "with nccl-tests) and each library's overlap as read in its source; unverified, and NCCL's own buffers "
     "are not in the device peak"},
};

/* ---- rules that write their own sentence ----------------------------------------------- */

/* The entry the plan shows (recommended, else smallest) planned with eager attention:
 * its device peak, or 0 when that cannot be planned. */
static uint64_t eager_peak(const gckpt_plan *p, const gckpt_entry *e)
{
    gckpt_plan_request q = p->req;
    uint32_t every = e->every_n;
    q.attention = GCKPT_EAGER;
    q.every_n = &every;
    q.n_every = 1;
    q.offload = e->offload ? GCKPT_OFFLOAD_ON : GCKPT_OFFLOAD_OFF;
    q.micro_batches[0] = e->micro_batch;
    q.n_micro = 1;
    q.global_batch = 0;
    q.grad_accum = e->grad_accum;
    gckpt_plan ep;
    gckpt_err err;
    if (!gckpt_plan_run(&q, &ep, &err)) return 0;
    uint64_t b = ep.entries[0].r.device_peak_bytes;
    gckpt_plan_free(&ep);
    return b;
}

static bool fp32_gqa(const gckpt_plan *p, char *msg, size_t n)
{
    const gckpt_model *m = &p->model;
    if (p->req.precision != GCKPT_FP32 || p->req.attention != GCKPT_SDPA || m->kv_heads >= m->heads)
        return false;
    long shown = p->recommended >= 0 ? p->recommended : p->smallest;
    if (shown < 0) return false;
    const gckpt_entry *e = &p->entries[shown];
    uint64_t eager = eager_peak(p, e);
    int k = snprintf(msg, n, "fp32 with grouped-query attention (%llu query, %llu key/value heads) under SDPA: "
                             "PyTorch may fall back from the fused kernels to the math kernel, which materialises "
                             "the attention matrix as eager attention does",
                     (unsigned long long)m->heads, (unsigned long long)m->kv_heads);
    if (eager && k > 0 && (size_t)k < n)
        snprintf(msg + k, n - (size_t)k, "; the %s entry would then need about %.2f GiB instead of %.2f GiB "
                                         "(--attention eager)",
                 p->recommended >= 0 ? "recommended" : "smallest", (double)eager / 1073741824.0,
                 (double)e->r.device_peak_bytes / 1073741824.0);
    return true;
}

/* Sliding windows (FINDINGS 14.3): eager always materialises the masks; SDPA at seq >=
 * window runs every sliding layer with a mask (block type GCKPT_BLOCK_SLIDING_SDPA), the
 * others (Gemma 3's full layers, Qwen2's below max_window_layers) causal without one. */
static bool sliding_masked(const gckpt_plan *p, char *msg, size_t n)
{
    const gckpt_model *m = &p->model;
    if (!gckpt_sliding_masked(m, p->req.attention, p->req.seq)) return false;
    if (m->sliding_layers == m->layers)
        snprintf(msg, n, "every layer's sliding window (%llu tokens) is at most seq %llu: transformers materialises the "
                         "window as a mask, so SDPA keeps a [b, 1, s, s] copy of it per layer, key/value are repeated to "
                         "every head, and no masked block is skipped (the full s x s is computed; planned so)",
                 (unsigned long long)m->sliding_window, (unsigned long long)p->req.seq);
    else
        snprintf(msg, n, "%llu of %llu layers use a sliding window (%llu tokens) at most seq %llu: transformers "
                         "materialises the window as a mask, so SDPA keeps a [b, 1, s, s] copy of it per sliding layer, "
                         "their key/value are repeated to every head, and no masked block is skipped (the full s x s is "
                         "computed); the other layers run causal SDPA without a mask (planned so, per layer)",
                 (unsigned long long)m->sliding_layers, (unsigned long long)m->layers,
                 (unsigned long long)m->sliding_window, (unsigned long long)p->req.seq);
    return true;
}

/* Gemma 2 or gpt_oss asked for sdpa: transformers refuses it (soft-capping, sinks); eager
 * is what runs. */
static bool attention_replaced(const gckpt_plan *p, char *msg, size_t n)
{
    if (gckpt_attention_run(&p->model, p->req.attention) == p->req.attention) return false;
    snprintf(msg, n, "%s does not support sdpa (%s): transformers raises a ValueError when "
                     "it is asked for and runs eager attention by default, so this plan is for eager attention",
             p->model.model_type, p->model.attn_sinks ? "attention sinks" : "attention logit soft-capping");
    return true;
}

/* A CUDA rule the CPU probe could not measure (the recipe says which). */
static bool unverified_rule(const gckpt_plan *p, const char **code, char *msg, size_t n)
{
    const char *sentence;
    if (p->target != GCKPT_TARGET_CUDA) return false;
    if (!gckpt_recipe_unverified(&p->model, p->req.attention, code, &sentence)) return false;
    snprintf(msg, n, "%s", sentence);
    return true;
}

/* --target cpu: what the figures are (the probe's split of the CPU's one memory) */
static bool cpu_target(const gckpt_plan *p, char *msg, size_t n)
{
    if (p->target != GCKPT_TARGET_CPU) return false;
    snprintf(msg, n, "planned for PyTorch's CPU kernels (--target cpu), as tools/hf_probe measures a CPU run: the peak "
                     "counts what would be on a GPU; the offloaded copies (host_pinned_bytes) and the RNG states "
                     "checkpointing keeps (host_rng_state_bytes) are host memory there, the same RAM on a CPU, so a "
                     "CPU run's own peak is at most the sum; step times use the profile's rates, not a CPU's");
    return true;
}

static const struct {
    const char *code;
    bool (*say)(const gckpt_plan *p, char *msg, size_t n);
} computed_rules[] = {
    {"sdpa_fp32_gqa_math_fallback", fp32_gqa},
    {"sliding_window_masked_sdpa", sliding_masked},
    {"sdpa_unsupported_eager_planned", attention_replaced},
    {"cpu_target", cpu_target},
};

static void add(gckpt_plan *p, const char *code, const char *text)
{
    if (p->n_warnings >= GCKPT_MAX_WARNINGS) return;
    gckpt_warning *w = &p->warnings[p->n_warnings++];
    snprintf(w->code, sizeof w->code, "%s", code);
    snprintf(w->message, sizeof w->message, "%s", text);
}

void gckpt_plan_warnings(gckpt_plan *p)
{
    p->n_warnings = 0;
    gckpt_setting s = request_setting(p);
    char msg[sizeof p->warnings[0].message];
    for (size_t i = 0; i < sizeof computed_rules / sizeof computed_rules[0]; i++)
        if (computed_rules[i].say(p, msg, sizeof msg)) add(p, computed_rules[i].code, msg);
    const char *code;
    if (unverified_rule(p, &code, msg, sizeof msg)) add(p, code, msg);
    for (size_t i = 0; i < sizeof fixed_rules / sizeof fixed_rules[0]; i++)
        if ((!fixed_rules[i].cuda || p->target == GCKPT_TARGET_CUDA) && fixed_rules[i].when(&p->model, &s))
            add(p, fixed_rules[i].code, fixed_rules[i].text);
}
