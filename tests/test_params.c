/* The parameter state table (gckpt/core/params.h): optimizer states against closed forms
 * of what bitsandbytes and the HF Trainer allocate (8-bit AdamW keeps fp32 states for
 * every nn.Embedding weight, which the Trainer registers with GlobalOptimManager for
 * optim_bits=32, and for tensors under 4096 elements; 8-bit codes + one fp32 absmax per
 * 256 elements for the rest), and parameter counts against the closed form of each
 * family's modules. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/params.h"
#include "gckpt/core/peft.h"
#include "closed_form_params.h"
#include "gckpt/core/eval.h"
#include "gckpt/planner/plan.h"

static gckpt_device dev;

static void ctx_of(const char *name, gckpt_precision p, gckpt_optimizer o, gckpt_model *m,
                   gckpt_recipe *r, gckpt_ctx *c)
{
    gckpt_err err;
    if (!gckpt_model_load(name, m, &err)) fail_msg("%s", err.msg);
    gckpt_recipe_build(m, p, GCKPT_SDPA, r);
    gckpt_setting s = {.seq = 128, .micro_batch = 1, .grad_accum = 1, .precision = p,
                       .optimizer = o, .attention = GCKPT_SDPA};
    if (!gckpt_ctx_init(c, m, &dev, r, &s, &err)) fail_msg("%s", err.msg);
}

static uint64_t R(uint64_t x) { return gckpt_round_up(x, dev.alloc_round_bytes); }
/* one tensor of e elements under 8-bit AdamW, stored 8-bit: two code tensors, two absmax */
static uint64_t q8(uint64_t e) { return 2 * (R(e) + R((e + 255) / 256 * 4)); }
static uint64_t f32(uint64_t e) { return 2 * R(e * 4); }

/* Llama-3.1-8B (untied): embed_tokens fp32 states, lm_head and every block tensor 8-bit
 * (the norms have hidden = 4096 elements: not under min_8bit_size). */
static void llama8b_8bit(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c;
    ctx_of("llama-3.1-8b", GCKPT_AMP_BF16, GCKPT_ADAMW_8BIT, &m, &r, &c);
    uint64_t h = m.hidden, kv = m.kv_heads * m.head_dim, I = m.intermediate, V = m.vocab;
    uint64_t layer = q8(h * h) * 2 + q8(h * kv) * 2 + q8(h * I) * 3 + q8(h) * 2;
    uint64_t want = f32(V * h) + q8(V * h) + m.layers * layer + q8(h);
    assert_int_equal(c.opt_states, want);
    /* the embedding's fp32 states cost ~2.9 GiB more than 8-bit ones would */
    double extra = (double)(f32(V * h) - q8(V * h)) / 1073741824.0;
    assert_true(extra > 2.9 && extra < 3.0);
}

/* GPT-2 (tied): wte (shared with lm_head) and wpe are nn.Embedding weights: fp32 states;
 * biases and LayerNorm parameters of 768 elements are under 4096: fp32 too. */
static void gpt2_8bit(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c;
    ctx_of("gpt2", GCKPT_AMP_BF16, GCKPT_ADAMW_8BIT, &m, &r, &c);
    uint64_t h = m.hidden, I = m.intermediate;
    uint64_t layer = f32(h) * 4 /* ln_1, ln_2 */ + q8(h * 3 * h) + f32(3 * h) + q8(h * h) + f32(h) +
                     q8(h * I) + f32(I) /* c_fc.bias: 3072 < 4096 */ + q8(I * h) + f32(h);
    uint64_t want = f32(m.vocab * h) + f32(m.positions * h) + m.layers * layer + 2 * f32(h);
    assert_int_equal(c.opt_states, want);
    char note[256];
    gckpt_opt_fp32_note(&c.params, GCKPT_ADAMW_8BIT, note, sizeof note);
    assert_string_equal(note, "32-bit optimizer states: wte.weight, wpe.weight (nn.Embedding: the Trainer "
                              "registers it for 32-bit states), 98 tensors under 4096 elements "
                              "(bitsandbytes min_8bit_size)");
}

/* The embedding rule is structural (the table of a lookup), not by name. */
static void embedding_detection(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c;
    ctx_of("qwen2.5-0.5b", GCKPT_BF16, GCKPT_ADAMW_8BIT, &m, &r, &c);
    int emb = 0;
    for (int t = 0; t < r.nt; t++)
        if (r.t[t].kind == GCKPT_T_PARAM && gckpt_param_is_embedding(&r, t)) {
            emb++;
            assert_string_equal(r.t[t].name, "embed_tokens.weight");
        }
    assert_int_equal(emb, 1); /* tied: the lm_head has no tensor of its own */
    /* other optimizers keep the parameter's dtype */
    static gckpt_params sgd, foreach;
    bool overflow;
    gckpt_err err;
    assert_true(gckpt_params_build(&r, m.layers, GCKPT_SGD, dev.alloc_round_bytes, &sgd, &overflow, &err));
    assert_true(gckpt_params_build(&r, m.layers, GCKPT_ADAMW_FOREACH, dev.alloc_round_bytes, &foreach, &overflow, &err));
    for (int t = 0; t < r.nt; t++) {
        if (r.t[t].kind != GCKPT_T_PARAM) continue;
        const gckpt_param *l = gckpt_params_of(&sgd, t);
        assert_int_equal(l->nstates, 1);
        assert_int_equal(l->state[0].dtype, r.param_dtype);
        l = gckpt_params_of(&foreach, t);
        assert_int_equal(l->nstates, 2);
        assert_int_equal(l->opt_temp.numel, gckpt_param_numel(&r, t));
    }
    char note[256];
    gckpt_opt_fp32_note(&c.params, GCKPT_ADAMW, note, sizeof note);
    assert_string_equal(note, "");
}

/* The table's count equals the closed form on every shipped model, the executor's tiny
 * models and configs with every optional module on (biases, q/k norms, untied, n_inner). */
static void parameter_counts(void **state)
{
    (void)state;
    static const char *names[] = {"gpt2", "gpt2-medium", "gpt2-xl", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b",
                                  "llama-3.1-70b", "mistral-7b-v0.3", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-8b",
                                  "gemma-2-2b", "gemma-2-9b", "gemma-3-1b", "phi-3-mini-4k", "phi-4-mini",
                                  "pythia-1.4b", "olmo-2-7b", "mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b",
                                  "gpt-oss-20b",
                                  GCKPT_TEST_DATA "/../executor/data/tiny-llama.json",
                                  GCKPT_TEST_DATA "/../executor/data/tiny-qwen3.json",
                                  GCKPT_TEST_DATA "/../executor/data/tiny-mistral-kv1.json",
                                  GCKPT_TEST_DATA "/configs/smollm3-3b.json",
                                  GCKPT_TEST_DATA "/configs/glm-4-9b-0414.json"};
    static const char *configs[] = {
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 3, \"hidden_size\": 96, \"num_attention_heads\": 6, "
        "\"num_key_value_heads\": 2, \"head_dim\": 20, \"intermediate_size\": 200, \"vocab_size\": 77, "
        "\"attention_bias\": true, \"mlp_bias\": true, \"tie_word_embeddings\": false}",
        "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 1, \"intermediate_size\": 90, \"vocab_size\": 50, \"attention_bias\": true, "
        "\"tie_word_embeddings\": true}",
        "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 1, \"hidden_size\": 32, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 4, \"intermediate_size\": 48, \"vocab_size\": 33}",
        "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 48, \"n_head\": 3, \"n_inner\": 100, "
        "\"vocab_size\": 61, \"n_positions\": 40, \"tie_word_embeddings\": false}",
        /* issue 13: biases and untied heads where the families allow them */
        "{\"model_type\": \"gemma\", \"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"intermediate_size\": 90, \"vocab_size\": 50, \"attention_bias\": true, \"tie_word_embeddings\": false}",
        "{\"model_type\": \"granite\", \"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"intermediate_size\": 90, \"vocab_size\": 50, \"attention_bias\": true, "
        "\"mlp_bias\": true, \"tie_word_embeddings\": true}",
        "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 3, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"intermediate_size\": 90, \"vocab_size\": 50, \"attention_bias\": false}",
        "{\"model_type\": \"olmo2\", \"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 1, \"intermediate_size\": 90, \"vocab_size\": 50, \"attention_bias\": true}",
        "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 7, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"head_dim\": 24, \"intermediate_size\": 90, \"vocab_size\": 50}",
        /* smollm3: NoPE layers 1 and 3 (a second block section, the decoder's parameters), biases */
        "{\"model_type\": \"smollm3\", \"num_hidden_layers\": 5, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"intermediate_size\": 90, \"vocab_size\": 50, \"attention_bias\": true, "
        "\"mlp_bias\": true, \"no_rope_layer_interval\": 2, \"tie_word_embeddings\": false}",
        /* glm4: q/k/v biases without an o bias, gate_up_proj, four norms, head_dim 128 by default, tied */
        "{\"model_type\": \"glm4\", \"num_hidden_layers\": 3, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"intermediate_size\": 90, \"vocab_size\": 50, \"tie_word_embeddings\": true}",
        /* gpt_oss: sinks, attention / router / expert biases, head_dim 64 by default */
        "{\"model_type\": \"gpt_oss\", \"num_hidden_layers\": 3, \"hidden_size\": 48, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"intermediate_size\": 40, \"num_local_experts\": 5, \"vocab_size\": 50}",
        /* deepseek_v3: two layer kinds with parameters of their own; q through q_proj (no q_lora_rank), biases */
        "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 5, \"hidden_size\": 64, \"num_attention_heads\": 4, "
        "\"intermediate_size\": 96, \"moe_intermediate_size\": 16, \"n_routed_experts\": 8, \"n_group\": 4, "
        "\"topk_group\": 2, \"num_experts_per_tok\": 2, \"n_shared_experts\": 2, \"first_k_dense_replace\": 2, "
        "\"q_lora_rank\": null, \"kv_lora_rank\": 16, \"qk_nope_head_dim\": 12, \"qk_rope_head_dim\": 8, "
        "\"v_head_dim\": 16, \"attention_bias\": true, \"vocab_size\": 50}",
    };
    gckpt_err err;
    gckpt_model m;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (!gckpt_model_load(names[i], &m, &err)) fail_msg("%s", err.msg);
        assert_true(gckpt_param_count(&m) == (uint64_t)closed_form_params128(&m));
    }
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        if (!gckpt_model_parse("config.json", configs[i], &m, &err)) fail_msg("%s", err.msg);
        assert_true(gckpt_param_count(&m) == (uint64_t)closed_form_params128(&m));
    }
}

/* DeepSeek-V3 (tests/data/configs/deepseek-v3.json) and DeepSeek-V2-Lite's dims read as a
 * deepseek_v3 config (no q_lora_rank, one group; V2's router has the same parameters):
 * transformers 5.24 on the meta device counts 671,026,404,352 and 15,706,484,224
 * (tools/hf_probe/dsv3_facts.py, FINDINGS R-MOE-8); the parameter table's count is the sum of
 * each layer kind's copies (3 and 1 dense layers) */
static void deepseek_real_counts(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load(GCKPT_TEST_DATA "/configs/deepseek-v3.json", &m, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m.dense_layers, 3);
    assert_true(gckpt_param_count(&m) == 671026404352ull);
    assert_true((uint64_t)closed_form_params128(&m) == 671026404352ull);
    /* MFU's model FLOPs per token: 6 x the active non-embedding parameters (the routed experts
     * a token misses, in the 58 MoE layers only) + 6 L heads (qk 192 + v 128) seq */
    double active = 671026404352.0 - 58.0 * (256 - 8) * 3.0 * 7168 * 2048 - 129280.0 * 7168;
    double want = 6.0 * active + 6.0 * 61 * 128 * (192 + 128) * 4096;
    assert_true(fabs(gckpt_palm_flops_per_token(&m, 4096) - want) <= 1e-9 * want);
    /* LoRA r 16 on the MLA projections of the 61 layers (FINDINGS R-PEFT-29): the closed form
     * sum r (in + out) and peft's get_nb_trainable_parameters() on the meta device, 97,006,592;
     * the parameter table counts the dense and the MoE layers' adapters apart */
    {
        static gckpt_recipe rc;
        gckpt_peft pf;
        gckpt_peft_default(GCKPT_METHOD_LORA, &pf);
        char bad[64];
        assert_true(gckpt_lora_targets_parse("q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj", &pf.targets, bad,
                                             sizeof bad));
        assert_true(gckpt_peft_model_ok(&m, &pf, &err));
        gckpt_recipe_build_peft(&m, GCKPT_AMP_BF16, GCKPT_SDPA, GCKPT_TARGET_CUDA, &pf, &rc);
        gckpt_params ps;
        bool overflow;
        assert_true(gckpt_params_build(&rc, m.layers, GCKPT_ADAMW, 1, &ps, &overflow, &err));
        uint64_t H = m.heads, h = m.hidden, qk = m.qk_nope_dim + m.qk_rope_dim, qr = m.q_lora_rank, kvr = m.kv_lora_rank;
        uint64_t per = (h + qr) + (qr + H * qk) + (h + kvr + m.qk_rope_dim) + (kvr + H * (m.qk_nope_dim + m.v_head_dim)) +
                       (H * m.v_head_dim + h);
        assert_true(ps.trainable == m.layers * pf.rank * per);
        assert_true(ps.trainable == 97006592ull);
    }
    const char *lite = "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 2048, \"num_hidden_layers\": 27, "
                       "\"intermediate_size\": 10944, \"num_attention_heads\": 16, \"num_key_value_heads\": 16, "
                       "\"q_lora_rank\": null, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, "
                       "\"v_head_dim\": 128, \"n_routed_experts\": 64, \"n_shared_experts\": 2, "
                       "\"moe_intermediate_size\": 1408, \"first_k_dense_replace\": 1, \"num_experts_per_tok\": 6, "
                       "\"n_group\": 1, \"topk_group\": 1, \"vocab_size\": 102400, \"tie_word_embeddings\": false}";
    if (!gckpt_model_parse("v2-lite.json", lite, &m, &err)) fail_msg("%s", err.msg);
    assert_true(gckpt_param_count(&m) == 15706484224ull);
    /* what is not planned is refused by name */
    assert_false(gckpt_model_parse("c.json", "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 2, "
                                   "\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 2}", &m, &err));
    assert_non_null(strstr(err.msg, "'num_key_value_heads' = 2 is not modelled for deepseek_v3"));
}

/* Llama-3.1-8B QLoRA r 16 all-linear (FINDINGS R-PEFT-6, R-OPT-5): the trainable count is the
 * closed form sum r (in + out) = 41,943,040; under paged AdamW the states of adapters
 * with at least 1e5 elements (gate/up lora_B [14336, 16], down lora_A [16, 14336]) are
 * managed memory, apart from the allocator's states: 8-bit codes 2n, fp32 8n. */
static void llama8b_qlora_paged(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load("llama-3.1-8b", &m, &err)) fail_msg("%s", err.msg);
    uint64_t h = m.hidden, q = gckpt_q_dim(&m), kv = gckpt_kv_dim(&m), I = m.intermediate, r = 16, L = m.layers;
    uint64_t trainable = L * r * ((h + q) + (h + kv) * 2 + (q + h) + (h + I) * 2 + (I + h));
    uint64_t big = 3 * I * r; /* per layer: the adapters of >= 1e5 elements */
    for (int o = GCKPT_PAGED_ADAMW_8BIT; o <= GCKPT_PAGED_ADAMW_32BIT; o++) {
        static gckpt_recipe rc;
        gckpt_peft pf;
        gckpt_peft_default(GCKPT_METHOD_QLORA, &pf);
        gckpt_recipe_build_peft(&m, GCKPT_AMP_BF16, GCKPT_SDPA, GCKPT_TARGET_CUDA, &pf, &rc);
        gckpt_params ps;
        bool overflow;
        assert_true(gckpt_params_build(&rc, L, (gckpt_optimizer)o, 1, &ps, &overflow, &err));
        assert_false(overflow);
        assert_int_equal(ps.trainable, trainable);
        assert_int_equal(trainable, 41943040);
        assert_int_equal(ps.paged_bytes, L * big * (o == GCKPT_PAGED_ADAMW_8BIT ? 2 : 8));
        /* the rest: 8-bit codes + fp32 absmax per 256 (absmax never paged) / fp32 */
        uint64_t small = trainable - L * big;
        uint64_t want = o == GCKPT_PAGED_ADAMW_8BIT ? 0 : 8 * small;
        if (o == GCKPT_PAGED_ADAMW_8BIT)
            for (int i = 0; i < ps.n; i++)
                if (ps.p[i].trainable)
                    want += ps.p[i].copies * (2 * (ps.p[i].paged ? 0 : ps.p[i].numel) + 2 * 4 * ((ps.p[i].numel + 255) / 256));
        assert_int_equal(ps.state_bytes, want);
        /* no frozen parameter keeps a state or a gradient */
        for (int i = 0; i < ps.n; i++)
            if (!ps.p[i].trainable) assert_true(ps.p[i].nstates == 0 && ps.p[i].grad.numel == 0);
    }
}

/* The optimizer step's traffic (FINDINGS R-OPT-8, tools/hf_probe/opt_traffic.py) over
 * the closed-form element count N of Llama-3.1-8B, every pass over N elements of the
 * parameter's dtype b: fused AdamW reads p, g, m, v and writes p, m, v (7 passes); the
 * foreach AdamW makes 18 (p 2, g 2, m 3, v 5, its temporary 6); the Trainer's clipping
 * adds 3 over g, fp16 autocast's GradScaler.unscale_ 2 more. A frozen weight: none. */
static void optimizer_traffic(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load("llama-3.1-8b", &m, &err)) fail_msg("%s", err.msg);
    uint64_t N = (uint64_t)closed_form_params128(&m);
    static const struct {
        gckpt_precision p;
        gckpt_optimizer o;
        double bytes_per_element; /* b x passes */
    } cases[] = {
        {GCKPT_BF16, GCKPT_ADAMW, 2.0 * (7 + 3)},
        {GCKPT_BF16, GCKPT_ADAMW_FOREACH, 2.0 * (18 + 3)},
        {GCKPT_AMP_BF16, GCKPT_ADAMW, 4.0 * (7 + 3)},
        {GCKPT_AMP_BF16, GCKPT_ADAMW_FOREACH, 4.0 * (18 + 3)},
        {GCKPT_AMP_FP16, GCKPT_ADAMW_FOREACH, 4.0 * (18 + 3 + 2)},
        {GCKPT_FP32, GCKPT_ADAMW, 4.0 * (7 + 3)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static gckpt_recipe r;
        gckpt_recipe_build(&m, cases[i].p, GCKPT_SDPA, &r);
        gckpt_params ps;
        bool overflow;
        assert_true(gckpt_params_build(&r, m.layers, cases[i].o, 1, &ps, &overflow, &err));
        assert_int_equal(ps.numel, N);
        assert_true(ps.opt_traffic == cases[i].bytes_per_element * (double)N);
    }
    /* LoRA (peft default) over the bf16 base: only the adapters move, fp32 (peft upcasts them) */
    static gckpt_recipe rc;
    gckpt_peft pf;
    gckpt_peft_default(GCKPT_METHOD_LORA, &pf);
    gckpt_recipe_build_peft(&m, GCKPT_BF16, GCKPT_SDPA, GCKPT_TARGET_CUDA, &pf, &rc);
    gckpt_params ps;
    bool overflow;
    assert_true(gckpt_params_build(&rc, m.layers, GCKPT_ADAMW_FOREACH, 1, &ps, &overflow, &err));
    assert_true(ps.trainable > 0 && ps.trainable < N / 100);
    for (int i = 0; i < ps.n; i++)
        if (ps.p[i].trainable) assert_int_equal(ps.p[i].weight.dtype, GCKPT_DT_F32); /* peft autocast_adapter_dtype */
    assert_true(ps.opt_traffic == 4.0 * (18 + 3) * (double)ps.trainable);
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load("h100-sxm-80gb", &dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama8b_8bit),
        cmocka_unit_test(gpt2_8bit),
        cmocka_unit_test(embedding_detection),
        cmocka_unit_test(parameter_counts),
        cmocka_unit_test(llama8b_qlora_paged),
        cmocka_unit_test(deepseek_real_counts),
        cmocka_unit_test(optimizer_traffic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
