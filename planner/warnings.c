/* Warnings: documented limits of the model that a plan's setting hits, each with a code
 * and one or two sentences ending with a full stop, in the table and in the plan's
 * "warnings"; docs/warnings.md explains each code. A rule is one line in a table below: a
 * predicate on the model and the run setting with a fixed sentence, or a function that
 * writes its own sentence (with figures) when it applies. Messages are malloc'd as long
 * as their text; the plan owns them (gckpt_warnings_free). */
#include "gckpt/core/mesh.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/quant_layout.h"
#include "gckpt/core/recipe.h"
#include "gckpt/core/cp.h"
#include "gckpt/core/families.h"
#include "gckpt/core/tp.h"
#include "gckpt/planner/plan.h"
#include "gckpt/util/util.h"

#include <stdarg.h>
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

/* eager attention builds the same [b, 1, s, s] mask with or without padding (FINDINGS R-ATTN-11:
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

static bool liger_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->loss == GCKPT_LOSS_LIGER;
}

static bool cce_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->loss == GCKPT_LOSS_CCE;
}

/* fsdp / zero2 / zero3: the working set is a closed form, not scheduled per layer */
static bool parallel_peak_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    if (s->layout.tp) return false; /* TP x FSDP: tp_fsdp_unverified says its own */
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

/* TP x FSDP (gckpt_tp_fsdp_layout): measured at one size on CPU fixtures only */
static bool tp_fsdp_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->layout.tp > 1 && s->layout.mode == GCKPT_PAR_FSDP; /* not TP alone (mode none) */
}

/* context parallelism (plan_cp.c): measured on CPU fixtures only, with the per-block kernel stood in */
static bool cp_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    return s->layout.cp > 1;
}

/* the run's ranks on several nodes (gckpt/core/mesh.h): TP's, CP's and FSDP2's groups placed on them */
static bool multi_node_applies(const gckpt_model *m, const gckpt_setting *s)
{
    (void)m;
    gckpt_mesh mesh = gckpt_layout_mesh(&s->layout);
    return (s->layout.mode != GCKPT_PAR_NONE || s->layout.tp > 1) && gckpt_mesh_multi_node(&mesh);
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

/* QLoRA on a mixture of experts: only the attention linears are quantized (FINDINGS R-QUANT-15) */
static bool qlora_moe_applies(const gckpt_model *m, const gckpt_setting *s)
{
    return m->experts > 0 && s->peft.method == GCKPT_METHOD_QLORA;
}

static bool moe_parallel_applies(const gckpt_model *m, const gckpt_setting *s)
{
    return m->experts > 0 && s->layout.mode != GCKPT_PAR_NONE;
}

/* One or two sentences each, ending with a full stop; the detail (sources, measurements,
 * what to do) is in docs/warnings.md under the code. cuda: a rule about CUDA's kernels,
 * said only when the plan targets CUDA (the CPU target plans what the CPU probe measured). */
static const struct {
    const char *code;
    bool (*when)(const gckpt_model *m, const gckpt_setting *s);
    const char *text;
    bool cuda;
    const char *peft_text; /* the text under LoRA / QLoRA, when it differs */
    bool not_vlm_cache;    /* not said where vlm_text_cache says otherwise */
} fixed_rules[] = {
    {"padding_not_modelled", padding_applies,
     "micro-batches above 1 are planned as unpadded sequences of --seq tokens; a padded batch gives SDPA a "
     "materialised mask instead of is_causal, which is not modelled."},
    {"use_cache_on", use_cache_applies,
     "config.json has use_cache on; the plan assumes use_cache=False, which the Trainer and gradient "
     "checkpointing set (in your own loop without checkpointing, set model.config.use_cache = False).",
     false, NULL, true},
    {"qlora_4bit_cuda_unverified", qlora_4bit_applies,
     "4-bit layers are planned with bitsandbytes' dequantize-then-matmul path measured on the CPU; on CUDA a "
     "fused kernel may skip the dequantized copy for few tokens per micro-batch: unverified on a GPU.", true},
    {"qlora_int8_cuda_unverified", qlora_int8_applies,
     "8-bit layers are planned as bitsandbytes runs them on the CPU, each input kept by its autograd node to "
     "the end of the micro-step's backward. On CUDA MatMul8bitLt also keeps the input's outlier columns and "
     "makes fp16 and int8 copies of it: unverified, expect a higher peak.", true},
    {"parallel_peak_approximate", parallel_peak_applies,
     "the per-rank working set of fsdp, zero2 and zero3 is scheduled unit by unit from torch's and DeepSpeed's "
     "source, within " GCKPT_PARALLEL_PEAK_BOUND_PCT " % of every measured rank of CPU fixtures of tiny models; "
     "CUDA's side streams, zero3's live-parameter limit and zero2's middle ranks are unverified.", false,
     "with LoRA / QLoRA the per-rank working set of fsdp is within " GCKPT_PARALLEL_PEFT_FSDP_BOUND_PCT " % of every "
     "measured rank of CPU fixtures of tiny models, zero2 within " GCKPT_PARALLEL_PEFT_ZERO2_BOUND_PCT " % and zero3 "
     "within " GCKPT_PARALLEL_PEFT_ZERO3_BOUND_PCT " %. zero3's trace-based prefetch, which gathers parameters "
     "modules ahead of their use in the forward, is not modelled: under the default limits every parameter is "
     "gathered by the forward's end, so only a peak inside the forward can be higher. CUDA's side streams, zero3's "
     "live-parameter limit and zero2's middle ranks are unverified."},
    {"moe_grouped_mm_cuda_unverified", moe_applies,
     "the experts are planned as transformers' default grouped_mm, measured on the CPU; on CUDA the fused "
     "grouped GEMM runs only for bf16 on sm90 / sm100, elsewhere a per-expert loop: step time unverified.", true},
    {"qlora_moe_experts_fp32", qlora_moe_applies,
     "QLoRA on a mixture of experts quantizes only the attention projections; the experts and the router stay "
     "unquantized, in fp32 after prepare_model_for_kbit_training (--method lora --precision bf16 keeps them in "
     "bf16)."},
    {"moe_parallel_unverified", moe_parallel_applies,
     "several GPUs with a mixture of experts: the per-rank rules were measured on dense models only, and every "
     "rank holds every expert (no expert parallelism): unverified."},
    {"parallel_offload_unverified", parallel_offload_applies,
     "CPU offload on several GPUs is planned from torch's and DeepSpeed's source, not measured: the PCIe copies "
     "add to the step without overlap, the CPU optimizer step's time is not modelled, and gckpt-run does not "
     "execute it.", false,
     "CPU offload with LoRA / QLoRA is planned from torch's and DeepSpeed's source and CPU runs of the Trainer "
     "(which buffers go to the host: under FSDP2 every shard, frozen too, copied to the device before each "
     "all-gather, the adapters' gradients back; under ZeRO-2 / ZeRO-3 the adapters' fp32 master, gradients and "
     "DeepSpeedCPUAdam's states, with offload_param every partition, frozen and 4-bit too), not measured on "
     "a GPU: the pinned host bytes, the PCIe copies (added to the step without overlap), the CPU optimizer "
     "step's time (not modelled), the quantization statistics left on the device, bitsandbytes' CUDA kernels on "
     "the copied bf16 storage and loading a 4-bit model whole onto each GPU before fully_shard are unverified; "
     "gckpt-run does not execute it."},
    {"liger_loss_unverified", liger_applies,
     "Liger's kernels (liger-kernel 0.8.5), where the model type's apply function uses them and --liger-kernels "
     "keeps them, are planned as read in its source and verified on the CPU with its Triton kernels stood in for: "
     "the fused linear cross-entropy's chunking and buffers (under amp: autocast's weight copies) by a re-run of "
     "its algorithm (tests/data/fused-loss), its SwiGLU on a dense LlamaMLP, its RMSNorm (the input and an fp32 "
     "rstd kept; dX written into dY's storage, or a new buffer where in_place=False) and RoPE (q and k rotated in "
     "place) on Llama, Mistral, Qwen2, Qwen3, SmolLM3, Mixtral, Qwen3-MoE, OLMo 2 and Gemma 1/2/3 (Phi-3: its "
     "RMSNorm) and the fused MoE experts (LigerExperts) of Mixtral and Qwen3-MoE by runs of its own code "
     "(tests/data/hf-liger). Unverified: the Triton kernels themselves (the fused MoE's grouped GEMMs and routing "
     "kernels included), the RMSNorm backward's fp32 partial sums, planned as [132, hidden] (132 SMs: H100 SXM, "
     "H200), and the fused MoE's M-tile arrays, planned as one tile per expert (up to 8 bytes per 64 "
     "token-expert pairs more when an expert gets over 64); planned with transformers' ops, an upper bound: "
     "the RMSNorm and RoPE of DeepSeek-V3 and gpt-oss, Phi-3's RoPE and gate_up MLP, GLM-4's RMSNorm and "
     "gate_up MLP (no hf-liger fixture), the Gemmas' "
     "GEGLU, DeepSeek-V3's routed experts, gpt-oss's MLP (swiglu off) and an MLP with biases.", true},
    {"cce_loss_unverified", cce_applies,
     "the loss is cut-cross-entropy 25.1.1's linear_cross_entropy(hidden, lm_head.weight, labels, shift=True): "
     "the buffers its Python code makes, keeps and hands on are verified by a CPU run of that code with its "
     "kernels stood in for (tests/data/fused-loss); its Triton kernels and its torch.compile'd vocabulary sort "
     "are unverified; its valid rows b x (s - 1) are planned as b x s.", true},
    {"tp_fsdp_unverified", tp_fsdp_applies,
     "TP x FSDP is planned as the TP rank's local model under FSDP2 over its fsdp group (TP x DDP: over one "
     "shard rank, replicated), within " GCKPT_TP_FSDP_PEAK_BOUND_PCT " % of every measured rank of CPU fixtures of a "
     "tiny llama at tp 2 x dp_shard 2, tp 2 x dp_replicate 2 and tp 2 x dp_replicate 2 x dp_shard 2 (fp32 and "
     "amp-bf16, every_n off and 1, grad-accum 2; TP x DDP also grad-accum 1; pure bf16 at tp 2 x dp_shard 2 and "
     "tp 2 x dp_replicate 2, every_n off and 1); other sizes, activation offload, the embedding gradient's copy at its "
     "reduce-scatter, the overlap of the TP and FSDP collectives and CUDA are unverified."},
    {"cp_unverified", cp_applies,
     "context parallelism is planned as FSDP2 over dp_shard x cp at seq / cp plus CP's buffers (the Trainer's split "
     "inputs, per-row rotary tables, the partial-merge ranks' o_proj input copies), or a ring attention call with "
     "its transients replayed from torch's code where that is higher: within " GCKPT_CP_PEAK_BOUND_PCT " % of every "
     "measured rank of CPU fixtures of a tiny llama at cp 2, cp 4, cp 2 x dp_shard 2 and under HSDP cp 2 and 4 x "
     "dp_shard 2 x dp_replicate 2 and 4 (fp32 and bf16, every_n off and 1; at cp 2 also LoRA q,v and all-linear, "
     "QLoRA, activation offload with and without LoRA; at cp 2 x dp_shard 2 x dp_replicate 2 also bf16 LoRA q,v and "
     "all-linear, QLoRA, activation offload with LoRA and with full fine-tuning in fp32 and bf16) whose peak is after the ring's calls, and up to " GCKPT_CP_RING_PEAK_BOUND_PCT " % below where it is "
     "inside one (a wide-attention llama, cp 2); torch's ring ran with the per-block CUDA SDPA kernel stood in by "
     "the CPU flash kernel. Unverified: the CUDA flash / efficient / cuDNN kernels per block (their extra outputs, "
     "scratch, output layout and time: a rank's attention is timed as C blocks of its S / C queries, R-CP-12), NCCL (the ring's overlap, what an uneven sequence does), the math backend under "
     "CP, the Trainer's loss reduction under CP, other batch sizes' input buffers, other families, "
     "HSDP with CP at other sizes with LoRA / offload, fp32 LoRA under HSDP with CP (TP with CP is refused: the "
     "Trainer cannot build it, R-CP-19)."},
    {"multi_node_unverified", multi_node_applies,
     "the ranks span several nodes: each group's collectives (TP's, CP's ring, FSDP2's over dp_shard x cp, the "
     "replicas' all-reduce) are timed at inter_node_bus_bytes_per_s where the group spans nodes, else "
     "intra_node_bus_bytes_per_s, with the ranks laid as torchrun numbers them (tp innermost); per-rank memory is "
     "the one-node rule's. No multi-node run has measured it: unverified on real hardware (GPUs and network)."},
    {"collective_time_unverified", collectives_applies,
     "collective times use the GPU profile's vendor link bandwidths and each library's overlap as read in its "
     "source, unverified; NCCL's own buffers are not in the device peak."},
};

/* ---- rules that write their own sentence ----------------------------------------------- */

/* A message as long as its text: malloc'd (the plan frees it), NULL when out of memory. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static char *say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

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

/* Each returns false when out of memory; *msg stays NULL when the rule does not apply. */
static bool fp32_gqa(const gckpt_plan *p, char **msg)
{
    const gckpt_model *m = &p->model;
    /* the attention that runs: Gemma 2 asked for sdpa runs eager (attention_replaced) */
    if (p->req.precision != GCKPT_FP32 || gckpt_attention_run(m, p->req.attention) != GCKPT_SDPA ||
        m->kv_heads >= m->heads)
        return true;
    long shown = p->recommended >= 0 ? p->recommended : p->smallest;
    if (shown < 0) return true;
    const gckpt_entry *e = &p->entries[shown];
    uint64_t eager = eager_peak(p, e);
#define GQA_TEXT "fp32 with grouped-query attention (%llu query, %llu key/value heads) under SDPA may fall back " \
                 "to the math kernel, which materialises the attention matrix as eager attention does"
    unsigned long long hq = m->heads, hkv = m->kv_heads;
    char be[32], bs[32];
    /* a difference below the shown precision is not worth a sentence ("526.0 MiB instead of 526.0 MiB") */
    if (eager && strcmp(gckpt_fmt_bytes(eager, be, sizeof be), gckpt_fmt_bytes(e->r.device_peak_bytes, bs, sizeof bs)))
        *msg = say(GQA_TEXT "; the %s entry would then need about %s instead of %s (--attention eager).",
                   hq, hkv, p->recommended >= 0 ? "recommended" : "smallest",
                   gckpt_fmt_bytes(eager, be, sizeof be), gckpt_fmt_bytes(e->r.device_peak_bytes, bs, sizeof bs));
    else
        *msg = say(GQA_TEXT ".", hq, hkv);
#undef GQA_TEXT
    return *msg != NULL;
}

/* Sliding windows (FINDINGS R-ATTN-8): eager always materialises the masks; SDPA at seq >=
 * window runs every sliding layer with a mask (block type GCKPT_BLOCK_SLIDING_SDPA), the
 * others (Gemma 3's full layers, Qwen2's below max_window_layers) causal without one. */
static bool sliding_masked(const gckpt_plan *p, char **msg)
{
    const gckpt_model *m = &p->model;
    const gckpt_vlm_type *row = p->vlm ? gckpt_vlm_type_of(p->vlm->model_type) : NULL;
    if (row && row->image_masks) { /* token_type_ids' masks (FINDINGS R-VLM-14) */
        *msg = say("%s's token_type_ids make every text layer's mask a materialised bool [b, 1, s, s] (bidirectional "
                   "within each image's tokens; %llu of %llu layers also slide over %llu tokens): SDPA repeats k and "
                   "v to every head and computes the full s x s in every layer (planned so, per layer).",
                   p->vlm->model_type, (unsigned long long)m->sliding_layers, (unsigned long long)m->layers,
                   (unsigned long long)m->sliding_window);
        return *msg != NULL;
    }
    if (!gckpt_sliding_masked(m, p->req.attention, p->req.seq)) return true;
    if (m->sliding_layers == m->layers)
        *msg = say("every layer's sliding window (%llu tokens) is at most seq %llu: SDPA then keeps a materialised "
                   "[b, 1, s, s] mask per layer and computes the full s x s (planned so).",
                   (unsigned long long)m->sliding_window, (unsigned long long)p->req.seq);
    else
        *msg = say("%llu of %llu layers use a sliding window (%llu tokens) at most seq %llu: SDPA keeps a "
                   "materialised [b, 1, s, s] mask per sliding layer and computes the full s x s, the other layers "
                   "run causal SDPA without a mask (planned so, per layer).",
                   (unsigned long long)m->sliding_layers, (unsigned long long)m->layers,
                   (unsigned long long)m->sliding_window, (unsigned long long)p->req.seq);
    return *msg != NULL;
}

/* Gemma 2 or gpt_oss asked for sdpa: transformers refuses it (soft-capping, sinks); eager
 * is what runs. */
static bool attention_replaced(const gckpt_plan *p, char **msg)
{
    if (gckpt_attention_run(&p->model, p->req.attention) == p->req.attention) return true;
    *msg = say("%s does not support sdpa (%s): transformers refuses it and runs eager attention, so this plan is for "
               "eager attention.",
               p->model.model_type, p->model.attn_sinks ? "attention sinks" : "attention logit soft-capping");
    return *msg != NULL;
}

/* A CUDA dropout rule the CPU probe could not measure (the recipe says which); the CPU
 * target plans what the probe measured. */
static bool dropout_rule(const gckpt_plan *p, const char *code, char **msg)
{
    const char *c, *sentence;
    if (p->target != GCKPT_TARGET_CUDA) return true;
    if (!gckpt_recipe_unverified(&p->model, p->req.attention, &c, &sentence) || strcmp(c, code)) return true;
    *msg = say("%s", sentence);
    return *msg != NULL;
}
static bool dropout_sdpa(const gckpt_plan *p, char **msg)
{
    return dropout_rule(p, "dropout_cuda_sdpa_unverified", msg);
}
static bool dropout_mask(const gckpt_plan *p, char **msg)
{
    return dropout_rule(p, "dropout_cuda_mask_unverified", msg);
}
static bool mla_sdpa(const gckpt_plan *p, char **msg)
{
    return dropout_rule(p, "mla_cuda_sdpa_unverified", msg);
}

/* --target cpu: what the figures are (the probe's split of the CPU's one memory) */
static bool cpu_target(const gckpt_plan *p, char **msg)
{
    if (p->target != GCKPT_TARGET_CPU) return true;
    *msg = say("planned for PyTorch's CPU kernels (--target cpu), as tools/hf_probe measures a CPU run; the host "
               "bytes are the same RAM there, so a CPU run's own peak is at most the sum, and step times are the "
               "profile's, not a CPU's.");
    return *msg != NULL;
}

/* A VLM (plan_vlm.c): the tower's ops are timed by the text layers' per-op model */
static bool vision_time(const gckpt_plan *p, char **msg)
{
    if (!p->vlm) return true;
    *msg = say("the vision tower's and the projector's step time come from the same per-op model as the text "
               "layers' (their FLOPs and bytes), never fitted to a measured VLM step: unverified; MFU counts the "
               "text model's FLOPs only.");
    return *msg != NULL;
}

/* A VLM whose text model reads text_config.use_cache in training (FINDINGS R-VLM-11, R-VLM-12) */
static bool vlm_caches(const gckpt_plan *p)
{
    const gckpt_vlm_type *row = p->vlm ? gckpt_vlm_type_of(p->vlm->model_type) : NULL;
    return row && row->text_cache_in_training && p->vlm->text.use_cache;
}

static bool vlm_cache(const gckpt_plan *p, char **msg)
{
    if (!vlm_caches(p)) return true;
    *msg = say("text_config has use_cache on, and %s passes none to its text model: without gradient "
               "checkpointing it fills a KV cache in training (the Trainer sets only the top-level config's "
               "use_cache), which the every_n off entries include; model.config.text_config.use_cache = False "
               "avoids it.", p->vlm->model_type);
    return *msg != NULL;
}

static const struct {
    const char *code;
    bool (*say)(const gckpt_plan *p, char **msg);
} computed_rules[] = {
    {"vision_tower_time_unverified", vision_time},
    {"vlm_text_cache", vlm_cache},
    {"sdpa_fp32_gqa_math_fallback", fp32_gqa},
    {"sliding_window_masked_sdpa", sliding_masked},
    {"sdpa_unsupported_eager_planned", attention_replaced},
    {"dropout_cuda_sdpa_unverified", dropout_sdpa},
    {"mla_cuda_sdpa_unverified", mla_sdpa},
    {"dropout_cuda_mask_unverified", dropout_mask},
    {"cpu_target", cpu_target},
};

#define N_COMPUTED (sizeof computed_rules / sizeof computed_rules[0])
#define N_FIXED (sizeof fixed_rules / sizeof fixed_rules[0])
_Static_assert(N_COMPUTED + N_FIXED <= GCKPT_MAX_WARNINGS, "a plan holds every warning at once");

size_t gckpt_warning_count(void)
{
    return N_COMPUTED + N_FIXED;
}

const char *gckpt_warning_code(size_t i)
{
    if (i < N_COMPUTED) return computed_rules[i].code;
    return i < N_COMPUTED + N_FIXED ? fixed_rules[i - N_COMPUTED].code : NULL;
}

bool gckpt_warning_say(const gckpt_plan *p, size_t i, char **msg)
{
    *msg = NULL;
    if (i < N_COMPUTED) return computed_rules[i].say(p, msg);
    if (i >= N_COMPUTED + N_FIXED) return true;
    gckpt_setting s = request_setting(p);
    if (fixed_rules[i - N_COMPUTED].cuda && p->target != GCKPT_TARGET_CUDA) return true;
    if (!fixed_rules[i - N_COMPUTED].when(&p->model, &s)) return true;
    if (fixed_rules[i - N_COMPUTED].not_vlm_cache && vlm_caches(p)) return true;
    const char *peft = fixed_rules[i - N_COMPUTED].peft_text;
    *msg = say("%s", peft && gckpt_peft_on(&s.peft) ? peft : fixed_rules[i - N_COMPUTED].text);
    return *msg != NULL;
}

bool gckpt_plan_warnings(gckpt_plan *p)
{
    gckpt_warnings_free(p->warnings, &p->n_warnings);
    for (size_t i = 0; i < gckpt_warning_count(); i++) {
        char *msg;
        if (!gckpt_warning_say(p, i, &msg)) return false;
        if (!msg) continue;
        gckpt_warning *w = &p->warnings[p->n_warnings++];
        snprintf(w->code, sizeof w->code, "%s", gckpt_warning_code(i));
        w->message = msg;
    }
    return true;
}
