/* The fast evaluator (segment profiles composed per setting) against the event walk of
 * the full schedule, on every entry of sweeps over models, precisions, attention,
 * micro-batches and accumulation: identical memory figures, same peak location,
 * identical times up to float rounding. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/fused_loss.h"
#include "gckpt/core/eval.h"
#include "gckpt/core/parallel.h"
#include "gckpt/core/peft.h"

static gckpt_device dev;
static gckpt_layout g_layout; /* the sweeps' layout (zeroed: one GPU) */
static gckpt_loss g_loss;     /* the sweeps' loss (zeroed: HF's) */

static void close_to(double a, double b, const char *what, const char *ctx)
{
    double tol = 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15;
    if (fabs(a - b) > tol) fail_msg("%s: %s walk %.17g fast %.17g", ctx, what, a, b);
}

static void sweep_peft(const char *model, const char *cfg_json, const gckpt_peft *peft)
{
    gckpt_model m;
    gckpt_err err;
    bool ok = cfg_json ? gckpt_model_parse(model, cfg_json, &m, &err) : gckpt_model_load(model, &m, &err);
    if (!ok) fail_msg("%s", err.msg);
    static gckpt_recipe r;
    static gckpt_profile prof;
    size_t entries = 0;
    bool multi = gckpt_layout_multi(&g_layout);
    for (int prec = 0; prec < GCKPT_NPREC; prec++) {
        /* several GPUs: what gckpt_layout_check accepts (amp-bf16 or fp32, AdamW) */
        if (multi && prec != GCKPT_AMP_BF16 && prec != GCKPT_FP32) continue;
        const char *why;
        if (!gckpt_fused_loss_supported(&m, (gckpt_precision)prec, g_loss, &why)) continue;
        for (int attn = 0; attn < GCKPT_NATTN; attn++) {
            gckpt_setting ps = {.precision = (gckpt_precision)prec, .layout = g_layout};
            gckpt_recipe_build_loss(&m, gckpt_parallel_compute_precision(&ps), (gckpt_attention)attn, GCKPT_TARGET_CUDA,
                                    peft, 96, (uint8_t)g_loss, 0, &r);
            for (uint64_t mb = 1; mb <= 2; mb++) {
                for (uint64_t ga = 1; ga <= 3; ga += 2) {
                    gckpt_setting s = {.seq = 96, .micro_batch = mb, .grad_accum = ga,
                                       .precision = (gckpt_precision)prec,
                                       .optimizer = multi ? GCKPT_ADAMW : (gckpt_optimizer)((prec + attn) % GCKPT_NOPT),
                                       .attention = (gckpt_attention)attn, .peft = peft ? *peft : (gckpt_peft){0},
                                       .layout = g_layout, .loss = (uint8_t)g_loss};
                    gckpt_ctx c;
                    if (!gckpt_ctx_init(&c, &m, &dev, &r, &s, &err)) fail_msg("%s", err.msg);
                    assert_true(gckpt_profile_build(&c, &prof));
                    for (uint32_t n = 0; n <= m.layers; n++) {
                        for (int off = 0; off < (n ? 2 : 1); off++) {
                            c.set.every_n = n;
                            c.set.offload = off;
                            gckpt_schedule ev;
                            assert_true(gckpt_schedule_build(&c, &ev));
                            gckpt_result a, b, b2;
                            gckpt_walk(&c, &ev, &a);
                            gckpt_schedule_free(&ev);
                            /* ZeRO-1/2: the plan shows the busiest rank */
                            bool z12 = g_layout.mode == GCKPT_PAR_ZERO1 || g_layout.mode == GCKPT_PAR_ZERO2;
                            for (uint32_t rk = 1; z12 && rk < gckpt_layout_world(&g_layout); rk++) {
                                static gckpt_ctx cl;
                                gckpt_setting sl = c.set;
                                sl.layout.rank = rk;
                                gckpt_result al;
                                if (!gckpt_ctx_init(&cl, &m, &dev, &r, &sl, &err)) fail_msg("%s", err.msg);
                                assert_true(gckpt_schedule_build(&cl, &ev));
                                gckpt_walk(&cl, &ev, &al);
                                gckpt_schedule_free(&ev);
                                if (al.peak_bytes > a.peak_bytes) a = al;
                            }
                            gckpt_fast_eval(&c, &prof, n, off, ga, &b);
                            gckpt_fast_eval_ex(&c, &prof, n, off, ga, false, &b2);
                            if (ga == 1) { /* no later micro-steps profiled: refused, visibly */
                                gckpt_result bad;
                                gckpt_fast_eval(&c, &prof, n, off, 3, &bad);
                                assert_true(bad.peak_bytes == UINT64_MAX && bad.device_peak_bytes == UINT64_MAX);
                            }
                            char ctx[160];
                            snprintf(ctx, sizeof ctx, "%s %s %s mb %llu ga %llu n %u off %d", model,
                                     gckpt_precision_names[prec], gckpt_attention_names[attn],
                                     (unsigned long long)mb, (unsigned long long)ga, n, off);
                            if (a.peak_bytes != b.peak_bytes)
                                fail_msg("%s%s%s: peak walk %llu (phase %d layer %d micro %d) fast %llu (phase %d layer %d micro %d)", ctx, multi ? " " : "",
                                         multi ? gckpt_parallel_names[g_layout.mode] : "", (unsigned long long)a.peak_bytes,
                                         a.peak_phase, a.peak_layer, a.peak_micro,
                                         (unsigned long long)b.peak_bytes, b.peak_phase, b.peak_layer, b.peak_micro);
                            assert_int_equal(a.peak_bytes, b2.peak_bytes);
                            assert_int_equal(a.device_peak_bytes, b.device_peak_bytes);
                            assert_int_equal(a.host_pinned_bytes, b.host_pinned_bytes);
                            assert_int_equal(a.after_forward_bytes, b.after_forward_bytes);
                            for (int k = 0; k < GCKPT_NCOMP; k++)
                                if (a.breakdown[k] != b.breakdown[k])
                                    fail_msg("%s: %s walk %lld fast %lld", ctx, gckpt_component_names[k],
                                             (long long)a.breakdown[k], (long long)b.breakdown[k]);
                            assert_int_equal(a.peak_phase, b.peak_phase);
                            assert_int_equal(a.peak_layer, b.peak_layer);
                            assert_int_equal(a.peak_tensor, b.peak_tensor);
                            assert_int_equal(a.peak_micro, b.peak_micro);
                            assert_int_equal(a.peak_grad, b.peak_grad);
                            close_to(a.step_s, b.step_s, "step_s", ctx);
                            close_to(a.recompute_s, b.recompute_s, "recompute_s", ctx);
                            close_to(a.copy_s, b.copy_s, "copy_s", ctx);
                            close_to(a.forward_s, b.forward_s, "forward_s", ctx);
                            close_to(a.backward_s, b.backward_s, "backward_s", ctx);
                            close_to(a.model_flops, b.model_flops, "model_flops", ctx);
                            close_to(a.step_s, b2.step_s, "step_s (no breakdown)", ctx);
                            for (int k = 0; k < GCKPT_NCOMP; k++) assert_true(a.breakdown[k] >= 0);
                            entries++;
                        }
                    }
                }
            }
        }
    }
    printf("%s%s%s%s%s: %zu entries agree\n", model, peft ? " " : "", peft ? gckpt_method_names[peft->method] : "",
           multi ? " " : "", multi ? gckpt_parallel_names[g_layout.mode] : "", entries);
}

static void sweep(const char *model, const char *cfg_json) { sweep_peft(model, cfg_json, NULL); }

static void llama_family(void **state)
{
    (void)state;
    sweep("llama-3.2-1b", NULL);
}

/* the fused losses: Liger's gradients made in the forward (a tied lm_head: llama-3.2-1b),
 * CCE's lse pass; full fine-tuning and LoRA */
static void fused_losses(void **state)
{
    (void)state;
    gckpt_peft lora;
    gckpt_peft_default(GCKPT_METHOD_LORA, &lora);
    for (g_loss = GCKPT_LOSS_LIGER; g_loss < GCKPT_NLOSS; g_loss++) {
        sweep("llama-3.2-1b", NULL);
        sweep_peft("llama-3.2-1b", NULL, &lora);
    }
    g_loss = GCKPT_LOSS_HF;
}

static void gpt2_family(void **state)
{
    (void)state;
    sweep("gpt2", NULL);
}

static void odd_dims(void **state)
{
    (void)state;
    /* Qwen3-style with head_dim * heads != hidden, biases, tied, dropout; and a gpt2 with
     * dropout > 0 and an erf GELU */
    sweep("qwen3-odd", "{\"model_type\":\"qwen3\",\"num_hidden_layers\":5,\"hidden_size\":72,"
                       "\"num_attention_heads\":6,\"num_key_value_heads\":2,\"head_dim\":20,"
                       "\"intermediate_size\":200,\"vocab_size\":333,\"tie_word_embeddings\":true,"
                       "\"attention_dropout\":0.1}");
    sweep("qwen2-odd", "{\"model_type\":\"qwen2\",\"num_hidden_layers\":3,\"hidden_size\":96,"
                       "\"num_attention_heads\":8,\"num_key_value_heads\":4,\"intermediate_size\":250,"
                       "\"vocab_size\":500}");
    sweep("gpt2-drop", "{\"model_type\":\"gpt2\",\"n_layer\":3,\"n_embd\":48,\"n_head\":3,"
                       "\"vocab_size\":101,\"n_positions\":128,\"activation_function\":\"gelu\"}");
}

/* Issue 13's families at seq 96: Gemma 2 / 3 with five alternating layers (every_n 2
 * checkpoints one attention type, 3 both: their masks and rotary pairs), windows under
 * seq (Phi-3's masked SDPA on every layer; Gemma 3's and Qwen2's sliding layers only:
 * two block types, layer 0 of either), fused and packed projections, multipliers,
 * mixture of experts with and without the load-balancing loss. */
static void issue13_families(void **state)
{
    (void)state;
#define TINY(type, extra)                                                                        \
    "{\"model_type\":\"" type "\",\"num_hidden_layers\":5,\"hidden_size\":64,\"num_attention_heads\":4," \
    "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":96,\"vocab_size\":211" extra "}"
    sweep("gemma2-tiny", TINY("gemma2", ",\"sliding_window\":32"));
    sweep("gemma3-tiny", TINY("gemma3_text", ",\"sliding_window\":128,\"sliding_window_pattern\":2"));
    sweep("phi3-tiny", TINY("phi3", ",\"sliding_window\":64,\"partial_rotary_factor\":0.5"));
    sweep("gemma3-window", TINY("gemma3_text", ",\"sliding_window\":64,\"sliding_window_pattern\":2"));
    sweep("qwen2-window", TINY("qwen2", ",\"use_sliding_window\":true,\"sliding_window\":64,\"max_window_layers\":2"));
    sweep("gemma-tiny", TINY("gemma", ""));
    sweep("olmo2-tiny", TINY("olmo2", ""));
    sweep("granite-tiny", TINY("granite", ",\"residual_multiplier\":0.2,\"logits_scaling\":8"));
    sweep("glm4-tiny", TINY("glm4", ",\"pad_token_id\":0")); /* per-layer rotary table pairs */
    sweep("gpt_neox-tiny", "{\"model_type\":\"gpt_neox\",\"num_hidden_layers\":3,\"hidden_size\":64,"
                           "\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":211}");
    /* mixture of experts; the load-balancing loss's per-layer gradients with more layers
     * than the evaluator's proxy step (released by its repeated layers) and fewer (held
     * to the embedding's backward) */
    sweep("mixtral-tiny", TINY("mixtral", ",\"num_local_experts\":4"));
    sweep("mixtral-aux", TINY("mixtral", ",\"num_local_experts\":4,\"output_router_logits\":true"));
    sweep("qwen3_moe-aux", TINY("qwen3_moe", ",\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":48,"
                                             "\"norm_topk_prob\":true,\"output_router_logits\":true"));
    sweep("olmoe-aux3", "{\"model_type\":\"olmoe\",\"num_hidden_layers\":3,\"hidden_size\":64,\"num_attention_heads\":4,"
                        "\"num_key_value_heads\":2,\"intermediate_size\":48,\"vocab_size\":211,\"num_experts\":4,"
                        "\"num_experts_per_tok\":2,\"output_router_logits\":true}");
    /* gpt_oss: sinks (eager whatever is asked), alternating windows, biased experts, with
     * and without the load-balancing loss */
    sweep("gpt_oss-tiny", TINY("gpt_oss", ",\"num_local_experts\":4,\"num_experts_per_tok\":2,\"sliding_window\":32"));
    sweep("gpt_oss-aux", TINY("gpt_oss", ",\"num_local_experts\":4,\"num_experts_per_tok\":2,\"sliding_window\":32,"
                                         "\"output_router_logits\":true"));
    /* deepseek_v3: dense first layers (a block type with parameters of its own) before the
     * MoE layers, one or two of them or none; q through q_lora_rank or one q_proj;
     * interleaved rotary or not */
#define DSV3                                                                                                    \
    "{\"model_type\":\"deepseek_v3\",\"num_hidden_layers\":4,\"hidden_size\":64,\"num_attention_heads\":4,"       \
    "\"intermediate_size\":96,\"moe_intermediate_size\":16,\"n_routed_experts\":8,\"n_group\":4,\"topk_group\":2," \
    "\"num_experts_per_tok\":2,\"kv_lora_rank\":16,\"qk_nope_head_dim\":12,\"qk_rope_head_dim\":8,\"v_head_dim\":16," \
    "\"vocab_size\":211"
    sweep("deepseek_v3-tiny", DSV3 ",\"q_lora_rank\":24,\"first_k_dense_replace\":1}");
    sweep("deepseek_v3-2dense", DSV3 ",\"q_lora_rank\":null,\"first_k_dense_replace\":2,\"rope_interleave\":false}");
    sweep("deepseek_v3-moe", DSV3 ",\"q_lora_rank\":24,\"first_k_dense_replace\":0}");
#undef DSV3
#undef TINY
}

/* Several GPUs: every mode's per-rank schedule (FSDP2's per-unit events, ZeRO's buffers) at
 * world 2 and 3 (uneven shards), FSDP2 also with every unit kept gathered, FSDP2 and ZeRO-3
 * with CPU offload */
static void parallel_modes(void **state)
{
    (void)state;
    static const char *qwen2 = "{\"model_type\":\"qwen2\",\"num_hidden_layers\":3,\"hidden_size\":96,"
                               "\"num_attention_heads\":8,\"num_key_value_heads\":4,\"intermediate_size\":250,"
                               "\"vocab_size\":501}";
    static const char *qwen3 = "{\"model_type\":\"qwen3\",\"num_hidden_layers\":3,\"hidden_size\":72,"
                               "\"num_attention_heads\":6,\"num_key_value_heads\":2,\"head_dim\":20,"
                               "\"intermediate_size\":200,\"vocab_size\":333,\"tie_word_embeddings\":true}";
    for (int mode = GCKPT_PAR_DDP; mode < GCKPT_NPAR; mode++)
        for (uint32_t w = 2; w <= 3; w++)
            for (int keep = 0; keep < (mode == GCKPT_PAR_FSDP ? 2 : 1); keep++) {
                g_layout = (gckpt_layout){.gpus = w, .nodes = 1, .mode = (uint8_t)mode, .fsdp_keep_gathered = keep};
                sweep("qwen2-odd", qwen2);
                sweep("qwen3-tied", qwen3);
            }
    /* two block types (sdpa at seq 96 >= window 64: layers 1 and 2 slide) under the
     * per-unit (FSDP2) and per-module (ZeRO-3) hooks: the units hold the first section's
     * parameters, each layer runs its own type's ops */
    static const char *qwen2w = "{\"model_type\":\"qwen2\",\"num_hidden_layers\":3,\"hidden_size\":64,"
                                "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,"
                                "\"vocab_size\":211,\"use_sliding_window\":true,\"sliding_window\":64,"
                                "\"max_window_layers\":1}";
    for (int mode = GCKPT_PAR_FSDP; mode <= GCKPT_PAR_ZERO3; mode += GCKPT_PAR_ZERO3 - GCKPT_PAR_FSDP) {
        g_layout = (gckpt_layout){.gpus = 2, .nodes = 1, .mode = (uint8_t)mode};
        sweep("qwen2-window", qwen2w);
    }
    /* CPU offload (FINDINGS R-OFFLOAD-6): FSDP2's CPUOffloadPolicy frees each sharded gradient after
     * its reduce-scatter and adds a transient fp32 shard before each all-gather; ZeRO-3 moves
     * persistent state off the device */
    for (int mode = GCKPT_PAR_FSDP; mode <= GCKPT_PAR_ZERO3; mode += GCKPT_PAR_ZERO3 - GCKPT_PAR_FSDP) {
        g_layout = (gckpt_layout){.gpus = 3, .nodes = 1, .mode = (uint8_t)mode,
                                  .offload = GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM};
        sweep("qwen2-odd", qwen2);
    }
    /* ... FSDP2's with LoRA and QLoRA (bf16 storage): frozen shards of two dtypes, each gathered
     * unit's H2D copy per section (FINDINGS R-DISTPEFT-12) */
    gckpt_peft lora, nf4;
    gckpt_peft_default(GCKPT_METHOD_LORA, &lora);
    gckpt_peft_default(GCKPT_METHOD_QLORA, &nf4);
    nf4.quant_storage = GCKPT_DT_BF16;
    g_layout = (gckpt_layout){.gpus = 3, .nodes = 1, .mode = GCKPT_PAR_FSDP,
                              .offload = GCKPT_OFFLOAD_OPTIMIZER | GCKPT_OFFLOAD_PARAM};
    sweep_peft("qwen2-odd-lora", qwen2, &lora);
    sweep_peft("qwen2-odd-qlora", qwen2, &nf4);
    /* ... ZeRO-2's offload_optimizer and ZeRO-3's with offload_param, with LoRA and QLoRA: the
     * optimizer's buffers over the adapters, a Params4bit's partition off the device
     * (FINDINGS R-DISTPEFT-15, -16, -18) */
    for (int mode = GCKPT_PAR_ZERO2; mode <= GCKPT_PAR_ZERO3; mode++) {
        g_layout = (gckpt_layout){.gpus = 3, .nodes = 1, .mode = (uint8_t)mode,
                                  .offload = (uint8_t)(GCKPT_OFFLOAD_OPTIMIZER |
                                                       (mode == GCKPT_PAR_ZERO3 ? GCKPT_OFFLOAD_PARAM : 0))};
        sweep_peft("qwen2-odd-lora", qwen2, &lora);
        sweep_peft("qwen2-odd-qlora", qwen2, &nf4);
    }
    /* ZeRO-1/2 offload_optimizer: no master, states or step temporaries on the device, the
     * largest parameter's buffer, the norm's fp64 copies (ZeRO-2: events, ZeRO-1: the step's) */
    for (int mode = GCKPT_PAR_ZERO1; mode <= GCKPT_PAR_ZERO2; mode++) {
        g_layout = (gckpt_layout){.gpus = 3, .nodes = 1, .mode = (uint8_t)mode, .offload = GCKPT_OFFLOAD_OPTIMIZER};
        sweep("qwen2-odd", qwen2);
    }
    g_layout = (gckpt_layout){0};
}

/* LoRA and QLoRA (frozen weights, adapters, dropout, modules_to_save copies, quantized
 * weights with their dequantization temporaries, the frozen embedding's leaf) */
static void lora_qlora(void **state)
{
    (void)state;
    static const char *qwen2 = "{\"model_type\":\"qwen2\",\"num_hidden_layers\":3,\"hidden_size\":96,"
                               "\"num_attention_heads\":8,\"num_key_value_heads\":4,\"intermediate_size\":256,"
                               "\"vocab_size\":500}";
    static const char *gpt2 = "{\"model_type\":\"gpt2\",\"n_layer\":3,\"n_embd\":48,\"n_head\":3,"
                              "\"vocab_size\":101,\"n_positions\":128}";
    gckpt_peft lora, mts, nf4, int8;
    gckpt_peft_default(GCKPT_METHOD_LORA, &lora);
    mts = lora;
    mts.targets = (1u << GCKPT_LT_Q) | (1u << GCKPT_LT_ATTN_C_PROJ) | (1u << GCKPT_LT_MLP_C_PROJ);
    mts.modules_to_save = GCKPT_MTS_LM_HEAD | GCKPT_MTS_EMBED;
    mts.dropout = 0;
    gckpt_peft_default(GCKPT_METHOD_QLORA, &nf4);
    int8 = nf4;
    int8.quant = GCKPT_QUANT_INT8;
    /* two block types (sdpa at seq 96 >= window): LoRA's and QLoRA's (NF4) parameters
     * replayed in the second */
    static const char *qwen3w = "{\"model_type\":\"qwen3\",\"num_hidden_layers\":3,\"hidden_size\":64,"
                                "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
                                "\"intermediate_size\":96,\"vocab_size\":211,\"use_sliding_window\":true,"
                                "\"sliding_window\":64,\"max_window_layers\":1}";
    const gckpt_peft *all[] = {&lora, &mts, &nf4, &int8};
    for (int i = 0; i < 4; i++) {
        sweep_peft("qwen2-lora", qwen2, all[i]);
        sweep_peft("gpt2-lora", gpt2, all[i]);
        if (all[i] == &mts || all[i] == &nf4) sweep_peft("qwen3-window-lora", qwen3w, all[i]);
    }
    /* deepseek_v3: adapters on the MLA projections of both layer kinds (the dense first
     * layer and the MoE ones; QLoRA also quantizes their MLPs) */
    static const char *dsv3 = "{\"model_type\":\"deepseek_v3\",\"num_hidden_layers\":3,\"hidden_size\":64,"
                              "\"num_attention_heads\":4,\"intermediate_size\":96,\"moe_intermediate_size\":16,"
                              "\"n_routed_experts\":8,\"n_group\":4,\"topk_group\":2,\"num_experts_per_tok\":2,"
                              "\"kv_lora_rank\":16,\"qk_nope_head_dim\":12,\"qk_rope_head_dim\":8,\"v_head_dim\":16,"
                              "\"vocab_size\":211,\"q_lora_rank\":24,\"first_k_dense_replace\":1}";
    gckpt_peft mla = lora, mla_nf4 = nf4;
    mla.targets = mla_nf4.targets = (1u << GCKPT_LT_Q_A) | (1u << GCKPT_LT_Q_B) | (1u << GCKPT_LT_KV_A) |
                                    (1u << GCKPT_LT_KV_B) | (1u << GCKPT_LT_O);
    sweep_peft("deepseek_v3-lora", dsv3, &mla);
    sweep_peft("deepseek_v3-qlora", dsv3, &mla_nf4);
}

/* The largest recipes fit the recipe's fixed tables with room to spare (a model family
 * or method that traces more must raise GCKPT_MAX_TENSORS / GCKPT_MAX_OPS): every
 * method, precision, attention and target of a qwen3 and a gpt2 with every optional
 * module and dropout, LoRA on all linears, both modules_to_save copies, a gpt_oss
 * with dropout and the load-balancing loss, and a deepseek_v3 with both layer kinds. */
static void recipe_limits(void **state)
{
    (void)state;
    static const char *cfgs[] = {
        "{\"model_type\":\"qwen3\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":100,\"vocab_size\":200,"
        "\"attention_bias\":true,\"mlp_bias\":true,\"attention_dropout\":0.1}",
        "{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":3,\"vocab_size\":101,"
        "\"n_positions\":128,\"attn_pdrop\":0.1,\"resid_pdrop\":0.1,\"embd_pdrop\":0.1}",
        /* two block types at seq 128 >= window under sdpa */
        "{\"model_type\":\"qwen3\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":100,\"vocab_size\":200,"
        "\"attention_bias\":true,\"mlp_bias\":true,\"attention_dropout\":0.1,\"use_sliding_window\":true,"
        "\"sliding_window\":64,\"max_window_layers\":1}",
        /* gpt_oss (full fine-tuning only; LoRA is refused by the planner, traced here anyway) */
        "{\"model_type\":\"gpt_oss\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":100,\"vocab_size\":200,"
        "\"num_local_experts\":4,\"num_experts_per_tok\":2,\"attention_dropout\":0.1,\"output_router_logits\":true}",
        /* deepseek_v3: two layer kinds with parameters of their own, both traced in full */
        "{\"model_type\":\"deepseek_v3\",\"num_hidden_layers\":4,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"intermediate_size\":96,\"moe_intermediate_size\":16,\"n_routed_experts\":8,\"n_group\":4,\"topk_group\":2,"
        "\"num_experts_per_tok\":2,\"kv_lora_rank\":16,\"qk_nope_head_dim\":12,\"qk_rope_head_dim\":8,\"v_head_dim\":16,"
        "\"vocab_size\":211,\"q_lora_rank\":24,\"first_k_dense_replace\":1,\"attention_bias\":true,\"attention_dropout\":0.1}"};
    static gckpt_recipe r;
    int nt = 0, nop = 0;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_parse("cfg", cfgs[c], &m, &err)) fail_msg("%s", err.msg);
        for (int meth = 0; meth < GCKPT_NMETHOD; meth++)
            for (int p = 0; p < GCKPT_NPREC; p++)
                for (int a = 0; a < GCKPT_NATTN; a++)
                    for (int t = 0; t < 2; t++) {
                        gckpt_peft pf;
                        gckpt_peft_default((gckpt_method)meth, &pf);
                        pf.modules_to_save = GCKPT_MTS_LM_HEAD | GCKPT_MTS_EMBED;
                        gckpt_recipe_build_seq(&m, (gckpt_precision)p, (gckpt_attention)a, (gckpt_target)t, &pf, 128, &r);
                        nt = r.nt > nt ? r.nt : nt;
                        nop = r.nop > nop ? r.nop : nop;
                    }
    }
    printf("largest recipe: %d tensors (of %d), %d ops (of %d)\n", nt, GCKPT_MAX_TENSORS, nop, GCKPT_MAX_OPS);
    assert_true(nt + 32 <= GCKPT_MAX_TENSORS && nop + 32 <= GCKPT_MAX_OPS);
}

/* Every Python reference a recipe records ends at exactly one op (an op's list of
 * releases is bounded: an overflowing one used to drop the release silently, and the
 * tensor then stayed live to the end of the step) */
static void holds_released(void **state)
{
    (void)state;
    static const char *cfgs[] = {
        "{\"model_type\":\"qwen3\",\"num_hidden_layers\":2,\"hidden_size\":72,\"num_attention_heads\":6,"
        "\"num_key_value_heads\":2,\"head_dim\":20,\"intermediate_size\":200,\"vocab_size\":333,"
        "\"attention_dropout\":0.1}",
        "{\"model_type\":\"mistral\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":1,\"intermediate_size\":100,\"vocab_size\":200,\"attention_dropout\":0.1}",
        "{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":3,\"vocab_size\":101,"
        "\"n_positions\":128}",
        "{\"model_type\":\"gpt_oss\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":100,\"vocab_size\":200,"
        "\"num_local_experts\":4,\"num_experts_per_tok\":2,\"attention_dropout\":0.1}",
        "{\"model_type\":\"deepseek_v3\",\"num_hidden_layers\":4,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"intermediate_size\":96,\"moe_intermediate_size\":16,\"n_routed_experts\":8,\"n_group\":4,\"topk_group\":2,"
        "\"num_experts_per_tok\":2,\"kv_lora_rank\":16,\"qk_nope_head_dim\":12,\"qk_rope_head_dim\":8,\"v_head_dim\":16,"
        "\"vocab_size\":211,\"q_lora_rank\":24,\"first_k_dense_replace\":1,\"attention_dropout\":0.1}",
    };
    static gckpt_recipe r;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_parse("holds", cfgs[c], &m, &err)) fail_msg("%s", err.msg);
        for (int tg = 0; tg < 2; tg++)
            for (int prec = 0; prec < GCKPT_NPREC; prec++)
                for (int attn = 0; attn < GCKPT_NATTN; attn++) {
                    gckpt_recipe_build_target(&m, (gckpt_precision)prec, (gckpt_attention)attn,
                                              (gckpt_target)tg, &r);
                    for (int t = 0; t < r.nt; t++) {
                        int n = 0;
                        for (int i = 0; i < r.nop; i++)
                            for (int k = 0; k < r.op[i].nunhold; k++) n += r.op[i].unhold[k] == t;
                        int want = r.t[t].hold_to >= 0 && r.t[t].hold_to < r.nop;
                        if (n != want)
                            fail_msg("config %zu target %d %s %s: tensor %s released %d times", c, tg,
                                     gckpt_precision_names[prec], gckpt_attention_names[attn], r.t[t].name, n);
                    }
                }
    }
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load("h100-sxm-80gb", &dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(holds_released),
        cmocka_unit_test(llama_family), cmocka_unit_test(fused_losses),
        cmocka_unit_test(gpt2_family),
        cmocka_unit_test(odd_dims),
        cmocka_unit_test(issue13_families),
        cmocka_unit_test(lora_qlora),
        cmocka_unit_test(parallel_modes),
        cmocka_unit_test(recipe_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
