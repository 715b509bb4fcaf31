/* The executor's gradients against central finite differences of its loss, in fp32
 * (the loss is summed in double): for a handful of parameters of a tiny llama (sdpa,
 * every second layer checkpointed and offloaded) and a tiny gpt2 (eager, every layer
 * checkpointed), the largest gradient element of each tensor and a smaller one (the first
 * with a tenth of the largest) must agree within 3% + 2e-4 absolute. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>

#include "exec_fixture.h"
#include "gckpt/core/peft.h"
#include "gckpt/executor/exec_host.h"
#include "gckpt/executor/op_sizes.h"

#define REL_TOL 0.03
#define ABS_TOL 2e-4
#define STEP 1e-2
/* the step fd_check takes (gpt_oss: smaller, test_fd_gpt_oss) */
static double fd_step = STEP;

typedef struct {
    const char *name;
    int layer;
    int tensor;
    float *grad;
    uint64_t n;
} probe_t;

typedef struct {
    probe_t *p;
    int np;
    bool failed;
} probes;

static void grab(gckpt_exec *x, void *user)
{
    probes *ps = user;
    gckpt_err err = {{0}};
    for (int i = 0; i < ps->np; i++)
        if (gckpt_exec_read_grad(x, ps->p[i].layer, ps->p[i].tensor, ps->p[i].grad, &err) != GCKPT_XS_OK) {
            fprintf(stderr, "%s\n", err.msg);
            ps->failed = true;
        }
}

static double loss_of(gckpt_exec *x)
{
    gckpt_step_opts so = {.update = false};
    gckpt_step_result res;
    gckpt_err err = {{0}};
    assert_int_equal(gckpt_exec_step(x, &so, &res, &err), GCKPT_XS_OK);
    return res.loss;
}

/* the padding row of the token embedding (nn.Embedding's padding_idx): transformers'
 * gradient there leaves the lookup out by design, so it is no derivative of the loss */
static bool pad_row(const gckpt_model *m, const char *name, uint64_t k)
{
    return m->pad && !strcmp(name, "embed_tokens.weight") && k / m->hidden == (uint64_t)m->pad_id;
}

static void fd_check_peft(const char *fixture, gckpt_attention attn, uint64_t mb, uint32_t every_n, bool offload,
                          const gckpt_peft *peft, const char *const *names, const int *layers, int np)
{
    gckpt_model m = fx_model(fixture);
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 12, .micro_batch = mb, .grad_accum = 1, .precision = GCKPT_FP32,
                       .attention = attn, .every_n = every_n, .offload = offload};
    if (peft) s.peft = *peft;
    gckpt_err err = {{0}};
    gckpt_exec_opts o = {.seed = 3, .init_std = 0.2};
    gckpt_exec *x = gckpt_exec_new(be, &m, &d, &s, &o, &err);
    assert_non_null(x);
    assert_int_equal(gckpt_exec_setup(x, &err), GCKPT_XS_OK);
    const gckpt_recipe *r = gckpt_exec_ctx(x)->recipe;
    probe_t p[16];
    for (int i = 0; i < np; i++) {
        p[i].name = names[i];
        p[i].layer = layers[i];
        p[i].tensor = -1;
        for (int t = 0; t < r->nt; t++)
            if (r->t[t].kind == GCKPT_T_PARAM && !strcmp(r->t[t].name, names[i])) p[i].tensor = t;
        if (p[i].tensor < 0) fail_msg("no parameter %s", names[i]);
        p[i].n = gckpt_exec_param_numel(x, p[i].tensor);
        p[i].grad = malloc(sizeof(float) * p[i].n);
        assert_non_null(p[i].grad);
    }
    probes ps = {p, np, false};
    gckpt_step_opts so = {.update = false, .on_grads = grab, .user = &ps};
    gckpt_step_result res;
    assert_int_equal(gckpt_exec_step(x, &so, &res, &err), GCKPT_XS_OK);
    assert_false(ps.failed);
    int checked = 0;
    for (int i = 0; i < np; i++) {
        float *w = malloc(sizeof(float) * p[i].n);
        assert_non_null(w);
        assert_int_equal(gckpt_exec_read_param(x, p[i].layer, p[i].tensor, w, &err), GCKPT_XS_OK);
        uint64_t best = 0;
        while (best < p[i].n && pad_row(&m, p[i].name, best)) best++;
        for (uint64_t k = best + 1; k < p[i].n; k++)
            if (!pad_row(&m, p[i].name, k) && fabsf(p[i].grad[k]) > fabsf(p[i].grad[best])) best = k;
        /* and a smaller one: the first element with at least a tenth of the largest */
        uint64_t other = best;
        for (uint64_t k = 0; k < p[i].n; k++)
            if (k != best && !pad_row(&m, p[i].name, k) && fabsf(p[i].grad[k]) >= 0.1f * fabsf(p[i].grad[best])) {
                other = k;
                break;
            }
        uint64_t elems[2] = {best, other};
        for (int q = 0; q < 2; q++) {
            uint64_t k = elems[q];
            float w0 = w[k];
            w[k] = w0 + (float)fd_step;
            assert_int_equal(gckpt_exec_write_param(x, p[i].layer, p[i].tensor, w, &err), GCKPT_XS_OK);
            double lp = loss_of(x);
            w[k] = w0 - (float)fd_step;
            assert_int_equal(gckpt_exec_write_param(x, p[i].layer, p[i].tensor, w, &err), GCKPT_XS_OK);
            double lm = loss_of(x);
            w[k] = w0;
            assert_int_equal(gckpt_exec_write_param(x, p[i].layer, p[i].tensor, w, &err), GCKPT_XS_OK);
            double fd = (lp - lm) / (((double)(w0 + (float)fd_step) - (double)(w0 - (float)fd_step)));
            /* the difference's resolution: the fp32 loss is known to a few ulps (the BLAS's
             * summation order differs by CPU), and each ulp moves it by ulp / (2 step); at a
             * step of 1e-3 four ulps of a loss near 5 are 9.5e-4, above ABS_TOL */
            float la = fabsf((float)res.loss);
            double ulp = (double)nextafterf(la, INFINITY) - (double)la;
            double g = p[i].grad[k], tol = REL_TOL * fabs(g) + fmax(ABS_TOL, 4.0 * ulp / (2.0 * fd_step));
            printf("%-12s %-32s layer %2d elem %6llu  analytic %+.6e  finite difference %+.6e  %s\n", fixture, p[i].name,
                   p[i].layer, (unsigned long long)k, g, fd, fabs(fd - g) <= tol ? "ok" : "MISMATCH");
            if (fabs(fd - g) > tol) fail_msg("%s %s[%llu]: analytic %g vs finite difference %g", fixture, p[i].name,
                                             (unsigned long long)k, g, fd);
            checked++;
        }
        free(w);
        free(p[i].grad);
    }
    assert_int_equal(checked, 2 * np);
    /* the loss is back where it started: the parameters were restored exactly */
    assert_true(loss_of(x) == res.loss);
    gckpt_exec_free(x);
    be->destroy(be);
}

static void fd_check(const char *fixture, gckpt_attention attn, uint64_t mb, uint32_t every_n, bool offload,
                     const char *const *names, const int *layers, int np)
{
    fd_check_peft(fixture, attn, mb, every_n, offload, NULL, names, layers, np);
}

static void test_fd_llama(void **st)
{
    (void)st;
    const char *names[] = {"embed_tokens.weight", "input_layernorm.weight", "self_attn.q_proj.weight",
                           "self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.down_proj.weight",
                           "mlp.gate_proj.weight", "norm.weight", "lm_head.weight"};
    const int layers[] = {-1, 0, 1, 2, 0, 2, 1, -1, -1};
    fd_check("tiny-llama", GCKPT_SDPA, 2, 2, true, names, layers, 9);
}

static void test_fd_gpt2(void **st)
{
    (void)st;
    const char *names[] = {"wte.weight", "wpe.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                           "mlp.c_fc.weight", "mlp.c_proj.bias", "ln_f.weight"};
    const int layers[] = {-1, -1, 0, 1, 2, 0, 2, -1};
    fd_check("tiny-gpt2", GCKPT_EAGER, 2, 1, false, names, layers, 8);
}

/* micro-batch 1: matmul reads q, k, v as views of the packed c_attn output (no folding
 * copies), and SplitBackward's blocks come straight from the attention's gradients */
static void test_fd_gpt2_mb1(void **st)
{
    (void)st;
    const char *names[] = {"attn.c_attn.weight", "attn.c_attn.bias", "ln_1.weight"};
    const int layers[] = {0, 1, 2};
    fd_check("tiny-gpt2", GCKPT_EAGER, 1, 2, true, names, layers, 3);
}

/* LoRA / QLoRA (dropout 0: a step draws new masks): the adapters' gradients through
 * frozen and quantized base linears (dequantized again in the backward), the trainable
 * lm_head copy's */
static gckpt_peft peft_of(gckpt_method mth, gckpt_quant_scheme q)
{
    gckpt_peft pf;
    gckpt_peft_default(mth, &pf);
    pf.rank = 4;
    pf.alpha = 8;
    pf.dropout = 0;
    if (mth == GCKPT_METHOD_QLORA) {
        pf.quant = (uint8_t)q;
        pf.compute_dtype = GCKPT_DT_F32; /* bf16 rounding would make the loss a staircase */
    }
    return pf;
}

static void test_fd_qlora_llama(void **st)
{
    (void)st;
    gckpt_peft pf = peft_of(GCKPT_METHOD_QLORA, GCKPT_QUANT_NF4);
    const char *names[] = {"self_attn.q_proj.lora_A.weight", "self_attn.q_proj.lora_B.weight",
                           "self_attn.v_proj.lora_A.weight", "self_attn.o_proj.lora_B.weight",
                           "mlp.gate_proj.lora_A.weight",    "mlp.down_proj.lora_A.weight",
                           "mlp.down_proj.lora_B.weight"};
    const int layers[] = {0, 1, 2, 0, 1, 2, 0};
    fd_check_peft("tiny-llama", GCKPT_SDPA, 2, 2, true, &pf, names, layers, 7);
}

static void test_fd_qlora_int8_qwen2(void **st)
{
    (void)st;
    gckpt_peft pf = peft_of(GCKPT_METHOD_QLORA, GCKPT_QUANT_INT8);
    const char *names[] = {"self_attn.k_proj.lora_A.weight", "self_attn.v_proj.lora_B.weight",
                           "mlp.up_proj.lora_B.weight"};
    const int layers[] = {1, 2, 0};
    fd_check_peft("tiny-qwen2", GCKPT_SDPA, 2, 1, false, &pf, names, layers, 3);
}

static void test_fd_lora_gpt2(void **st)
{
    (void)st;
    gckpt_peft pf = peft_of(GCKPT_METHOD_LORA, GCKPT_QUANT_NONE);
    pf.modules_to_save = GCKPT_MTS_LM_HEAD;
    const char *names[] = {"attn.c_attn.lora_A.weight", "attn.c_proj.lora_B.weight", "mlp.c_fc.lora_A.weight",
                           "mlp.c_proj.lora_B.weight", "lm_head.modules_to_save.weight"};
    const int layers[] = {0, 1, 2, 1, -1};
    fd_check_peft("tiny-gpt2", GCKPT_EAGER, 2, 1, true, &pf, names, layers, 5);
}

/* adapters over fused projections (FINDINGS R-PEFT-22): lora_B's output is added to the whole
 * fused output before it is sliced (Phi-3's qkv_proj / gate_up_proj, GPT-NeoX's per-head
 * interleaved query_key_value, a 4-bit base with a bias); Gemma 2's scaled embedding leaf
 * and soft-capped scores with adapters */
static void test_fd_lora_fused(void **st)
{
    (void)st;
    gckpt_peft pf = peft_of(GCKPT_METHOD_LORA, GCKPT_QUANT_NONE);
    const char *phi3[] = {"self_attn.qkv_proj.lora_A.weight", "self_attn.qkv_proj.lora_B.weight",
                          "mlp.gate_up_proj.lora_B.weight", "mlp.down_proj.lora_A.weight"};
    const int l3[] = {0, 1, 2, 1};
    fd_check_peft("tiny-phi3", GCKPT_SDPA, 2, 2, true, &pf, phi3, l3, 4);
    gckpt_peft q = peft_of(GCKPT_METHOD_QLORA, GCKPT_QUANT_NF4);
    const char *neox[] = {"attention.query_key_value.lora_A.weight", "attention.query_key_value.lora_B.weight",
                          "attention.dense.lora_B.weight", "mlp.dense_h_to_4h.lora_A.weight",
                          "mlp.dense_4h_to_h.lora_B.weight"};
    const int ln[] = {0, 1, 2, 1, 0};
    fd_check_peft("tiny-gpt-neox", GCKPT_SDPA, 2, 1, false, &q, neox, ln, 5);
    const char *g2[] = {"self_attn.q_proj.lora_A.weight", "self_attn.k_proj.lora_B.weight", "mlp.up_proj.lora_A.weight"};
    const int lg[] = {0, 1, 2};
    fd_check_peft("tiny-gemma2", GCKPT_EAGER, 1, 3, true, &pf, g2, lg, 3);
}

/* attention adapters in the MoE families (FINDINGS R-PEFT-27): the adapters' gradients flow
 * through the frozen router and grouped_mm experts (their input gradients only); the
 * load-balancing loss's router logits too. The last layers' adapters: a step of an early
 * layer's flips a later token's top-k (as test_fd_mixtral explains) */
static void test_fd_lora_moe(void **st)
{
    (void)st;
    gckpt_peft pf = peft_of(GCKPT_METHOD_LORA, GCKPT_QUANT_NONE);
    pf.targets = (1u << GCKPT_LT_Q) | (1u << GCKPT_LT_K) | (1u << GCKPT_LT_V) | (1u << GCKPT_LT_O);
    const char *names[] = {"self_attn.q_proj.lora_A.weight", "self_attn.k_proj.lora_B.weight",
                           "self_attn.v_proj.lora_A.weight", "self_attn.o_proj.lora_B.weight"};
    const int l4[] = {3, 3, 2, 3}, l3[] = {2, 2, 1, 2};
    fd_check_peft("tiny-mixtral", GCKPT_SDPA, 2, 1, true, &pf, names, l4, 4);
    /* qwen3-moe's layer-2 k_proj.lora_B element 9 flips a top-k at a step of 1e-2
     * (analytic +0.0402, finite difference -0.1318; at 1e-3 +0.0403) */
    fd_step = 1e-3;
    fd_check_peft("tiny-qwen3-moe", GCKPT_SDPA, 2, 2, false, &pf, names, l3, 4);
    fd_step = STEP;
    fd_check_peft("tiny-olmoe-aux", GCKPT_SDPA, 2, 0, false, &pf, names, l3, 4);
}

/* issue 13's llama variants. OLMo 2: q/k norms over the whole projection and the norms
 * after each sublayer (sdpa, every second layer checkpointed and offloaded) */
static void test_fd_olmo2(void **st)
{
    (void)st;
    const char *names[] = {"embed_tokens.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                           "self_attn.q_proj.weight", "post_attention_layernorm.weight",
                           "post_feedforward_layernorm.weight", "mlp.up_proj.weight", "lm_head.weight"};
    const int layers[] = {-1, 0, 1, 2, 1, 0, 2, -1};
    fd_check("tiny-olmo2", GCKPT_SDPA, 2, 2, true, names, layers, 8);
}

/* Granite: the embedding, residual and logits multipliers and attention_multiplier as
 * the score scale (eager: the scale is an op; every layer checkpointed) */
static void test_fd_granite(void **st)
{
    (void)st;
    const char *names[] = {"embed_tokens.weight", "input_layernorm.weight", "self_attn.k_proj.weight",
                           "self_attn.o_proj.weight", "mlp.down_proj.weight", "norm.weight", "lm_head.weight"};
    const int layers[] = {-1, 0, 1, 2, 1, -1, -1};
    fd_check("tiny-granite", GCKPT_EAGER, 2, 1, false, names, layers, 7);
    fd_check("tiny-granite", GCKPT_SDPA, 1, 0, false, names, layers, 7);
}

/* The score scale the kernels use is HF's self.scaling: Granite's attention_multiplier
 * (modeling_granite.py, GraniteAttention.__init__), 0.0078125 in tiny-granite.json, and
 * Gemma 2's query_pre_attn_scalar ** -0.5 (modeling_gemma2.py; 24 ** -0.5 as Python
 * prints it), not head_dim ** -0.5 (0.354 for their head_dim 8), under eager (the "scale"
 * op) and SDPA (the op's sb; Gemma 2 runs eager only); llama keeps head_dim ** -0.5. */
static void test_attention_scale(void **st)
{
    (void)st;
    const struct {
        const char *fixture;
        double scale;
    } want[] = {{"tiny-granite", 0.0078125}, {"tiny-llama", -0.5}, {"tiny-gemma2-w16", 0.20412414523193151}};
    for (int k = 0; k < 3; k++) {
        gckpt_model m = fx_model(want[k].fixture);
        double w = want[k].scale > 0 ? want[k].scale : pow((double)m.head_dim, want[k].scale);
        for (int a = 0; a < GCKPT_NATTN; a++) {
            gckpt_recipe *r = malloc(sizeof *r);
            assert_non_null(r);
            gckpt_recipe_build(&m, GCKPT_FP32, (gckpt_attention)a, r);
            int seen = 0;
            for (int i = 0; i < r->nop; i++) {
                const gckpt_op *op = &r->op[i];
                if (op->prim == GCKPT_P_SDPA) { assert_true(op->sb == w); seen++; }
                if (op->prim == GCKPT_P_AFFINE && !strcmp(op->name, "self_attn.scale")) { assert_true(op->sa == w); seen++; }
            }
            assert_int_equal(seen, 1);
            free(r);
        }
    }
}

/* Gemma: (1 + w) norms from w = 0, the embedding normalizer on a tied table, GELU-tanh */
static void test_fd_gemma(void **st)
{
    (void)st;
    const char *names[] = {"embed_tokens.weight", "input_layernorm.weight", "post_attention_layernorm.weight",
                           "mlp.gate_proj.weight", "mlp.up_proj.weight", "self_attn.v_proj.weight", "norm.weight"};
    const int layers[] = {-1, 0, 2, 1, 0, 2, -1};
    fd_check("tiny-gemma", GCKPT_EAGER, 2, 2, true, names, layers, 7);
}

/* Gemma 2: soft-capped scores (tanh, saved output) and logits, the pre/post norms around
 * both sublayers, every layer checkpointed and offloaded */
static void test_fd_gemma2(void **st)
{
    (void)st;
    const char *names[] = {"embed_tokens.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                           "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
                           "post_feedforward_layernorm.weight", "norm.weight"};
    const int layers[] = {-1, 0, 1, 2, 1, 0, -1};
    fd_check("tiny-gemma2-w16", GCKPT_EAGER, 2, 1, true, names, layers, 7);
}

/* Mixture of experts (fp32, seq 12), on parameters whose steps of 1e-2 leave every
 * token's top-k as it is (away from ties: a change of routing is a jump in the loss, a
 * mismatch here; the embedding of tiny-mixtral and qwen3-moe's layer-2 router do flip
 * one, by -18% and sign): 
 * the router's gate (through softmax, top-k, the
 * renormalisation and the weighting of the experts' outputs), both grouped_mm weights
 * (gate_up through the gate and up chunks, down), around checkpointed and offloaded
 * layers. */
static void test_fd_mixtral(void **st)
{
    (void)st;
    const char *names[] = {"mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj",
                           "post_attention_layernorm.weight", "mlp.gate.weight", "self_attn.o_proj.weight"};
    const int layers[] = {0, 1, 2, 3, 3, 1};
    fd_check("tiny-mixtral", GCKPT_SDPA, 2, 2, true, names, layers, 6);
}

/* qwen3_moe (norm_topk_prob: the same renormalisation, weights cast to the logits'
 * dtype) and olmoe (no renormalisation: the softmax's top-k values weight the experts) */
static void test_fd_qwen3_moe(void **st)
{
    (void)st;
    const char *names[] = {"mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.gate.weight"};
    const int layers[] = {0, 1, 2, 1};
    fd_check("tiny-qwen3-moe", GCKPT_EAGER, 2, 1, false, names, layers, 4);
}

static void test_fd_olmoe(void **st)
{
    (void)st;
    const char *names[] = {"mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj",
                           "self_attn.q_norm.weight"};
    const int layers[] = {1, 0, 2, 0};
    fd_check("tiny-olmoe", GCKPT_SDPA, 1, 1, true, names, layers, 4);
}

/* The load-balancing loss (output_router_logits, coefficient 0.5 / 0.3: its share of the
 * routers' gradients well above the tolerance): every layer's logits through the head's
 * softmax, top-k counts and column sums, the gradient handed back to each layer's router
 * (mixtral: 4 layers, one buffer each; qwen3_moe: 3 layers, held to the embedding) */
static void test_fd_moe_aux(void **st)
{
    (void)st;
    const char *names[] = {"mlp.gate.weight", "mlp.gate.weight", "mlp.gate.weight", "mlp.experts.down_proj"};
    const int layers[] = {0, 2, 3, 1};
    fd_step = 1e-3; /* a step of 1e-2 in layer 2's router moves a token to another expert */
    fd_check("tiny-mixtral-aux", GCKPT_SDPA, 2, 2, true, names, layers, 4);
    fd_step = STEP;
    const char *qn[] = {"mlp.gate.weight", "mlp.gate.weight", "mlp.experts.gate_up_proj"};
    const int q[] = {0, 1, 2};
    fd_check("tiny-qwen3-moe-aux", GCKPT_EAGER, 2, 1, false, qn, q, 3);
}

/* gpt_oss through a whole step (fp32, eager, seq 12 > window 8: sliding and full layers,
 * layers 1 and 3 checkpointed and offloaded): the sink logits (the cat's last column
 * through the row max and the softmax over s + 1), the q/k/v/o biases (q and k through
 * the half-split rotary, whose halves' gradients are strided views of the cat's), the
 * router's weight and bias (top-k, then a softmax over the k), both expert weights
 * ([E, in, out]) and their per-pair biases (gate and up interleaved, the clamped SwiGLU);
 * and with the load-balancing loss. Steps of 1e-3: its router takes the top-k of the raw
 * logits, and a step of 1e-2 in a router bias, a sink of layer 0 or v_proj's bias there
 * moves some token to another expert (a jump in the loss: layer 1's router bias[2] gives
 * 0.238 at 1e-2 against an analytic 0.0797, which a step of 1e-3 gives) */
static void test_fd_gpt_oss(void **st)
{
    (void)st;
    fd_step = 1e-3;
    const char *names[] = {"self_attn.sinks", "self_attn.sinks", "self_attn.q_proj.bias", "self_attn.k_proj.bias",
                           "self_attn.v_proj.bias", "self_attn.o_proj.bias", "mlp.router.bias", "mlp.router.weight",
                           "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj_bias", "mlp.experts.gate_up_proj",
                           "mlp.experts.down_proj", "self_attn.q_proj.weight"};
    const int layers[] = {1, 3, 1, 2, 2, 3, 1, 2, 1, 3, 1, 2, 3};
    fd_check("tiny-gpt-oss", GCKPT_EAGER, 2, 2, true, names, layers, 13);
    const char *an[] = {"mlp.router.bias", "mlp.router.weight", "self_attn.sinks"};
    const int al[] = {0, 3, 2};
    fd_check("tiny-gpt-oss-aux", GCKPT_EAGER, 2, 1, false, an, al, 3);
    fd_step = STEP;
}

/* Sliding windows shorter than the sequence (12 > 8): Gemma 2's sliding and full layers
 * (eager, each reading its own mask), Mistral's window on every layer under SDPA (the
 * kernel's window and the converted bool mask) and eager (the additive sliding mask) */
static void test_fd_sliding(void **st)
{
    (void)st;
    const char *names[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                           "self_attn.q_proj.weight", "self_attn.k_proj.weight", "embed_tokens.weight"};
    const int layers[] = {0, 0, 1, 1, 2, -1};
    fd_check("tiny-gemma2", GCKPT_EAGER, 2, 2, true, names, layers, 6);
    fd_check("tiny-mistral-sw8", GCKPT_SDPA, 2, 2, true, names, layers, 6);
    fd_check("tiny-mistral-sw8", GCKPT_EAGER, 1, 1, false, names, layers, 6);
}

/* Gemma 3: per-head q/k norms after the three projections, the sliding layers' own
 * rotary pair and mask (eager at seq 12 > window 8), sdpa within the window and past it
 * (two block sections: masked SDPA in the sliding layers) */
static void test_fd_gemma3(void **st)
{
    (void)st;
    const char *names[] = {"self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.q_proj.weight",
                           "self_attn.k_proj.weight", "pre_feedforward_layernorm.weight", "embed_tokens.weight"};
    const int layers[] = {0, 1, 2, 3, 0, -1};
    fd_check("tiny-gemma3", GCKPT_EAGER, 2, 2, true, names, layers, 6);
    fd_check("tiny-gemma3-w32", GCKPT_SDPA, 2, 1, false, names, layers, 6);
    fd_check("tiny-gemma3", GCKPT_SDPA, 2, 2, true, names, layers, 6); /* two block sections */
}

/* Phi-3: the fused projections read in place (sdpa at seq 12 >= window 8: the masked
 * form; eager) */
static void test_fd_phi3(void **st)
{
    (void)st;
    const char *names[] = {"self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight", "self_attn.o_proj.weight",
                           "input_layernorm.weight", "embed_tokens.weight", "lm_head.weight"};
    const int layers[] = {0, 1, 2, 1, -1, -1};
    fd_check("tiny-phi3", GCKPT_SDPA, 2, 2, true, names, layers, 6);
    fd_check("tiny-phi3", GCKPT_EAGER, 1, 1, false, names, layers, 6);
    fd_check("tiny-phi3-partial", GCKPT_SDPA, 2, 1, true, names, layers, 6); /* rotary on 12 of 16 columns */
}

/* GPT-NeoX: per-head interleaved q, k, v of query_key_value with its bias, partial rotary
 * 0.25, LayerNorm, the parallel residual, untied embed_out */
static void test_fd_gpt_neox(void **st)
{
    (void)st;
    const char *names[] = {"attention.query_key_value.weight", "attention.query_key_value.bias", "attention.dense.weight",
                           "input_layernorm.weight", "post_attention_layernorm.bias", "mlp.dense_h_to_4h.weight",
                           "embed_in.weight", "lm_head.weight"}; /* HF embed_out */
    const int layers[] = {0, 1, 2, 1, 0, 2, -1, -1};
    fd_check("tiny-gpt-neox", GCKPT_SDPA, 2, 2, true, names, layers, 8);
    fd_check("tiny-gpt-neox", GCKPT_EAGER, 1, 1, false, names, layers, 8);
}

/* ---- single ops (gpt_oss's primitives) through the host backend ------------------------
 * loss = sum_i w_i out_i with fixed weights w (the output gradient); every element of
 * every input's gradient against central differences of that loss (fp32 forward, the
 * loss summed in double). Inputs are chosen away from clamp edges. */
typedef struct {
    const char *what;
    gckpt_op op;
    int nin;
    float *in[2];
    uint64_t n_in[2], n_out;
    uint64_t cols[2], s; /* input 0's / 1's row width (0: one row), the sequence (0: 1) */
    bool indices;        /* a second output: int64 indices, one per output element */
} op_case;

static gckpt_xt host_f32(float *p, uint64_t n) { return (gckpt_xt){.p = p, .n = n, .dt = GCKPT_DT_F32, .cols = n, .rows = 1}; }

static gckpt_xt shaped(gckpt_xt t, uint64_t cols)
{
    if (cols) {
        t.cols = cols;
        t.rows = t.n / cols;
    }
    return t;
}

static int64_t idx_buf[64];

static gckpt_xcall call_of(const op_case *k, const gckpt_model *m, float *out)
{
    gckpt_xcall c = {.op = &k->op, .m = m, .b = 1, .s = k->s ? k->s : 1};
    for (int i = 0; i < k->nin; i++) c.in[i] = shaped(host_f32(k->in[i], k->n_in[i]), k->cols[i]);
    c.out[0] = host_f32(out, k->n_out);
    if (k->indices) c.out[1] = (gckpt_xt){.p = idx_buf, .n = k->n_out, .dt = GCKPT_DT_I64, .cols = k->n_out, .rows = 1};
    return c;
}

static double op_loss(gckpt_backend *be, const op_case *k, const gckpt_model *m, const float *w, float *out)
{
    gckpt_xcall c = call_of(k, m, out);
    assert_int_equal(be->forward(be, &c), GCKPT_XS_OK);
    double l = 0;
    for (uint64_t i = 0; i < k->n_out; i++) l += (double)w[i] * out[i];
    return l;
}

static void fd_op(const op_case *k)
{
    gckpt_model m = {0};
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_non_null(be);
    float out[64], w[64], gin[2][64];
    assert_true(k->n_out <= 64 && k->n_in[0] <= 64 && k->n_in[1] <= 64);
    for (uint64_t i = 0; i < k->n_out; i++) w[i] = 0.3f + 0.11f * (float)(i % 7) - 0.05f * (float)(i % 3);
    gckpt_xcall c = call_of(k, &m, out);
    gckpt_err err = {{0}};
    assert_int_equal(gckpt_op_check_forward(&c, &err), GCKPT_XS_OK);
    assert_int_equal(be->forward(be, &c), GCKPT_XS_OK);
    c.gout = host_f32(w, k->n_out);
    for (int i = 0; i < k->nin; i++) c.gin[i] = shaped(host_f32(gin[i], k->n_in[i]), k->cols[i]);
    assert_int_equal(be->backward(be, &c), GCKPT_XS_OK);
    for (int i = 0; i < k->nin; i++)
        for (uint64_t j = 0; j < k->n_in[i]; j++) {
            float keep = k->in[i][j];
            k->in[i][j] = keep + (float)STEP;
            double lp = op_loss(be, k, &m, w, out);
            k->in[i][j] = keep - (float)STEP;
            double lm = op_loss(be, k, &m, w, out);
            k->in[i][j] = keep;
            double fd = (lp - lm) / (2 * STEP), an = gin[i][j];
            if (fabs(fd - an) > REL_TOL * fabs(fd) + ABS_TOL)
                fail_msg("%s: input %d element %llu: gradient %.6g, finite difference %.6g", k->what, i,
                         (unsigned long long)j, an, fd);
        }
    be->destroy(be);
}

/* x - y (same shape, and y one value per row: the sink softmax's row max), clamp(max=)
 * and clamp(-limit, limit) of the clamped SwiGLU (values on both sides of the limit),
 * sigmoid (its gradient from the saved output) */
static void test_fd_gpt_oss_ops(void **st)
{
    (void)st;
    float x[12], y[12], r[3];
    for (int i = 0; i < 12; i++) {
        x[i] = -9.1f + 1.63f * (float)i; /* -9.1 .. 8.83: inside and outside +-7, 0.2 or more from it */
        y[i] = 0.7f - 0.29f * (float)i;
    }
    for (int i = 0; i < 3; i++) r[i] = 0.4f * (float)i - 0.5f;
    op_case sub = {"sub", {.prim = GCKPT_P_SUB, .bcast = GCKPT_BC_NONE}, 2, {x, y}, {12, 12}, 12};
    fd_op(&sub);
    /* the recipe's row max: no width, a whole row of x */
    op_case sub_row = {"sub (row)", {.prim = GCKPT_P_SUB, .bcast = GCKPT_BC_ROW}, 2, {x, r}, {12, 3}, 12, {4, 0}};
    fd_op(&sub_row);
    op_case cmax = {"clamp(max=7)", {.prim = GCKPT_P_CLAMP, .sa = -HUGE_VAL, .sb = 7.0}, 1, {x}, {12}, 12};
    fd_op(&cmax);
    op_case cboth = {"clamp(-7, 7)", {.prim = GCKPT_P_CLAMP, .sa = -7.0, .sb = 7.0}, 1, {x}, {12}, 12};
    fd_op(&cboth);
    op_case sig = {"sigmoid", {.prim = GCKPT_P_SIGMOID}, 1, {x}, {12}, 12};
    fd_op(&sig);
}

/* the sink softmax's pieces on [b 1, heads 2, s 3, s 3] scores: the cat with each head's
 * sink logit (the sinks' gradient: their column summed per head), the row max of the
 * widened rows (distinct values: no ties) with its indices, the sink column dropped; the
 * half-split rotary's cat of two halves per head (head_dim 4) */
static void test_fd_gpt_oss_sink_ops(void **st)
{
    (void)st;
    float sc[18], sinks[2] = {0.35f, -1.2f}, wide[24], a[6], b[6];
    for (int i = 0; i < 18; i++) sc[i] = 0.9f - 0.37f * (float)((i * 7) % 18);
    for (int i = 0; i < 24; i++) wide[i] = -2.0f + 0.23f * (float)((i * 5) % 24);
    for (int i = 0; i < 6; i++) {
        a[i] = 0.5f * (float)i - 1.1f;
        b[i] = 0.8f - 0.3f * (float)i;
    }
    op_case cat = {"cat sink", {.prim = GCKPT_P_CAT_SINK}, 2, {sc, sinks}, {18, 2}, 24, {3, 2}, 3, false};
    fd_op(&cat);
    op_case mx = {"max last", {.prim = GCKPT_P_MAX_LAST}, 1, {wide}, {24}, 6, {4, 0}, 3, true};
    fd_op(&mx);
    op_case drop = {"drop sink", {.prim = GCKPT_P_DROP_SINK}, 1, {wide}, {24}, 18, {4, 0}, 3, false};
    fd_op(&drop);
    op_case halves = {"cat halves", {.prim = GCKPT_P_CAT_HALVES, .width = 4}, 2, {a, b}, {6, 6}, 12, {2, 2}, 1, false};
    fd_op(&halves);
}

/* gpt_oss's rotary tables: cat-free [s, head_dim / 2], the first half of HF's default
 * table (the angles of columns 0 .. head_dim / 2 - 1) */
static void test_rotary_halves(void **st)
{
    (void)st;
    gckpt_model m = {.head_dim = 8, .rotary_dim = 8, .rope_halves = true};
    gckpt_op op = {.name = "rotary.cos", .prim = GCKPT_P_SOURCE};
    float cs[12], sn[12];
    gckpt_xcall c = {.op = &op, .m = &m, .b = 1, .s = 3, .rope_theta = 10000.0};
    c.out[0] = shaped(host_f32(cs, 12), 4);
    c.out[1] = shaped(host_f32(sn, 12), 4);
    gckpt_err err = {{0}};
    assert_int_equal(gckpt_op_check_source(GCKPT_SRC_ROTARY, &c, &err), GCKPT_XS_OK);
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_int_equal(be->source(be, GCKPT_SRC_ROTARY, &c, NULL), GCKPT_XS_OK);
    for (uint64_t pos = 0; pos < 3; pos++)
        for (uint64_t k = 0; k < 4; k++) {
            double f = (double)pos / pow(10000.0, (double)(2 * k) / 8.0);
            assert_true(fabs(cs[pos * 4 + k] - cos(f)) < 1e-6 && fabs(sn[pos * 4 + k] - sin(f)) < 1e-6);
        }
    be->destroy(be);
}

/* clamp's values and its gradient at the edges as torch 2.15 gives them (probe venv:
 * torch.clamp(x, -1, 1) over [-2, -1, 0.5, 1, 2] -> gradient [0, 0, 1, 0, 0]) */
static void test_clamp_edges(void **st)
{
    (void)st;
    float x[5] = {-2, -1, 0.5f, 1, 2}, out[5], g[5] = {1, 1, 1, 1, 1}, gi[5];
    op_case k = {"clamp", {.prim = GCKPT_P_CLAMP, .sa = -1.0, .sb = 1.0}, 1, {x}, {5}, 5};
    gckpt_model m = {0};
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_xcall c = call_of(&k, &m, out);
    assert_int_equal(be->forward(be, &c), GCKPT_XS_OK);
    c.gout = host_f32(g, 5);
    c.gin[0] = host_f32(gi, 5);
    assert_int_equal(be->backward(be, &c), GCKPT_XS_OK);
    const float want_y[5] = {-1, -1, 0.5f, 1, 1}, want_g[5] = {0, 0, 1, 0, 0};
    for (int i = 0; i < 5; i++) {
        assert_true(out[i] == want_y[i]);
        assert_true(gi[i] == want_g[i]);
    }
    /* an output that is not shaped like the input is refused by the size check */
    gckpt_err err = {{0}};
    c.out[0].n = c.out[0].cols = 4;
    assert_int_equal(gckpt_op_check_forward(&c, &err), GCKPT_XS_ERROR);
    be->destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fd_llama), cmocka_unit_test(test_fd_gpt2),
                                       cmocka_unit_test(test_fd_gpt2_mb1), cmocka_unit_test(test_fd_qlora_llama),
                                       cmocka_unit_test(test_fd_qlora_int8_qwen2), cmocka_unit_test(test_fd_lora_gpt2),
                                       cmocka_unit_test(test_fd_lora_fused),
                                       cmocka_unit_test(test_fd_lora_moe),
                                       cmocka_unit_test(test_fd_olmo2),    cmocka_unit_test(test_fd_granite),
                                       cmocka_unit_test(test_fd_gemma),    cmocka_unit_test(test_attention_scale),
                                       cmocka_unit_test(test_fd_gemma2),   cmocka_unit_test(test_fd_mixtral),
                                       cmocka_unit_test(test_fd_qwen3_moe), cmocka_unit_test(test_fd_olmoe),
                                       cmocka_unit_test(test_fd_moe_aux),  cmocka_unit_test(test_fd_sliding),
                                       cmocka_unit_test(test_fd_gemma3),   cmocka_unit_test(test_fd_phi3),
                                       cmocka_unit_test(test_fd_gpt_neox), cmocka_unit_test(test_fd_gpt_oss_ops), cmocka_unit_test(test_fd_gpt_oss),
                                       cmocka_unit_test(test_clamp_edges), cmocka_unit_test(test_fd_gpt_oss_sink_ops),
                                       cmocka_unit_test(test_rotary_halves)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
