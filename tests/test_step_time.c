/* The code-base time terms (gckpt/core/device.h: a profile's "code_bases") against closed
 * forms: the GEMM and fused-attention rates, attention's sequence ramp, memory-bound ops at the
 * HBM rate, the per-op launch and the per-step overheads; a CPU target ignores them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/eval.h"
#include "gckpt/planner/plan.h"

static gckpt_device base; /* h100-sxm-80gb as shipped */

static void close_to(double got, double want)
{
    if (!(fabs(got - want) <= 1e-12 * fabs(want) + 1e-18)) fail_msg("got %.17g, want %.17g", got, want);
}

/* llama-3.1-8b, bf16, sdpa, one sequence of seq tokens on dev under code base cb */
static void ctx_of(const gckpt_device *dev, uint64_t seq, int cb, gckpt_target target, gckpt_ctx *c, gckpt_model *m,
                   gckpt_recipe *r)
{
    gckpt_err err;
    if (!gckpt_model_load("llama-3.1-8b", m, &err)) fail_msg("%s", err.msg);
    gckpt_recipe_build_seq(m, GCKPT_BF16, GCKPT_SDPA, target, NULL, seq, r);
    gckpt_setting s = {.precision = GCKPT_BF16, .attention = GCKPT_SDPA, .code_base = (uint8_t)cb, .micro_batch = 1,
                       .seq = seq, .grad_accum = 1, .optimizer = GCKPT_ADAMW};
    if (!gckpt_ctx_init(c, m, dev, r, &s, &err)) fail_msg("%s", err.msg);
}

static gckpt_device with(gckpt_code_base_eff fused)
{
    gckpt_device d = base;
    d.has_code_bases = true;
    d.code_base[GCKPT_CB_HF] = gckpt_code_base_neutral;
    d.code_base[GCKPT_CB_FUSED] = fused;
    return d;
}

static int find_op(const gckpt_recipe *r, int prim, const char *name)
{
    for (int i = 0; i < r->nop; i++)
        if (r->op[i].prim == prim && r->op[i].section == GCKPT_SEC_BLOCK && (!name || strstr(r->op[i].name, name)))
            return i;
    fail_msg("no op %s", name ? name : "");
    return -1;
}

/* Fused attention at seq S: causal 2 S^2 heads head_dim FLOPs forward, 2.5 x that backward, at
 * peak x matmul_efficiency x attention_factor x S / (S + seq_half). */
static void attention_rate(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c;
    const double af = 0.25, half = 1024, S = 4096;
    gckpt_device d = with((gckpt_code_base_eff){.matmul_factor = 1, .attention_factor = af, .attention_seq_half = half,
                                                .hbm_factor = 1});
    ctx_of(&d, (uint64_t)S, GCKPT_CB_FUSED, GCKPT_TARGET_CUDA, &c, &m, &r);
    int op = find_op(&r, GCKPT_P_SDPA, NULL);
    double flops = 2.0 * S * S * (double)m.heads * (double)m.head_dim;
    double rate = base.tflops_bf16 * 1e12 * base.matmul_efficiency * af * S / (S + half);
    close_to(c.op_flops[0][op], flops);
    close_to(c.op_s[0][op], flops / rate);
    close_to(c.op_s[1][op], 2.5 * flops / rate);
    /* the hf code base of this profile is neutral: the datasheet roofline */
    ctx_of(&d, (uint64_t)S, GCKPT_CB_HF, GCKPT_TARGET_CUDA, &c, &m, &r);
    close_to(c.op_s[0][op], flops / (base.tflops_bf16 * 1e12 * base.matmul_efficiency));
}

/* A GEMM (q_proj, 4096 x 4096 over 4096 tokens, compute-bound): 2 T in out FLOPs at peak x
 * matmul_efficiency x matmul_factor, plus the launch overhead. */
static void gemm_rate_and_launch(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c;
    const double mf = 0.6, ovh = 7e-6, T = 4096;
    gckpt_device d = with((gckpt_code_base_eff){.matmul_factor = mf, .attention_factor = 1, .hbm_factor = 1,
                                                .op_overhead_s = ovh});
    ctx_of(&d, (uint64_t)T, GCKPT_CB_FUSED, GCKPT_TARGET_CUDA, &c, &m, &r);
    int op = find_op(&r, GCKPT_P_LINEAR, "q_proj");
    double flops = 2.0 * T * (double)m.hidden * (double)(m.heads * m.head_dim);
    close_to(c.op_s[0][op], flops / (base.tflops_bf16 * 1e12 * base.matmul_efficiency * mf) + ovh);
}

/* A memory-bound op (the SwiGLU product act(gate) * up: two [T, I] bf16 inputs, one output)
 * moves 3 T I 2 bytes forward, twice that backward, at HBM x hbm_efficiency x hbm_factor, plus
 * the launch overhead. */
static void hbm_rate_and_launch(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c;
    const double hf = 2.5, ovh = 11e-6, T = 1024;
    gckpt_device d = with((gckpt_code_base_eff){.matmul_factor = 1, .attention_factor = 1, .hbm_factor = hf,
                                                .op_overhead_s = ovh});
    ctx_of(&d, (uint64_t)T, GCKPT_CB_FUSED, GCKPT_TARGET_CUDA, &c, &m, &r);
    int op = -1;
    for (int i = 0; i < r.nop && op < 0; i++)
        if (r.op[i].section == GCKPT_SEC_BLOCK && r.op[i].kind == GCKPT_OP_ELEM && r.op[i].nin == 2 &&
            strstr(r.op[i].name, "mlp") && strstr(r.op[i].name, "mul"))
            op = i;
    if (op < 0) fail_msg("no mlp mul op");
    double bytes = 3.0 * T * (double)m.intermediate * 2.0;
    double rate = base.hbm_bytes_per_s * base.hbm_efficiency * hf;
    close_to(c.op_s[0][op], bytes / rate + ovh);
    close_to(c.op_s[1][op], 2 * bytes / rate + ovh);
}

/* The per-step overhead: the optimizer step's seconds and the whole step's grow by exactly it. */
static void step_overhead(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c0, c1;
    const double k = 0.375;
    gckpt_device d = with((gckpt_code_base_eff){.matmul_factor = 1, .attention_factor = 1, .hbm_factor = 1,
                                                .step_overhead_s = k});
    ctx_of(&d, 512, GCKPT_CB_HF, GCKPT_TARGET_CUDA, &c0, &m, &r);
    ctx_of(&d, 512, GCKPT_CB_FUSED, GCKPT_TARGET_CUDA, &c1, &m, &r);
    close_to(c1.opt_seconds - c0.opt_seconds, k);
    gckpt_profile *p0 = malloc(sizeof *p0), *p1 = malloc(sizeof *p1);
    assert_non_null(p0);
    assert_non_null(p1);
    assert_true(gckpt_profile_build(&c0, p0) && gckpt_profile_build(&c1, p1));
    gckpt_result a, b;
    gckpt_fast_eval(&c0, p0, 1, false, 1, &a);
    gckpt_fast_eval(&c1, p1, 1, false, 1, &b);
    assert_true(fabs((b.step_s - a.step_s) - k) <= 1e-9 * b.step_s);
    assert_true(a.peak_bytes == b.peak_bytes); /* time only */
    free(p0);
    free(p1);
}

/* The CPU target plans PyTorch's CPU kernels: the code base's parameters do not apply. */
static void cpu_target_ignores(void **state)
{
    (void)state;
    static gckpt_recipe r;
    gckpt_model m;
    gckpt_ctx c0, c1;
    gckpt_device d = with((gckpt_code_base_eff){.matmul_factor = 0.5, .attention_factor = 0.1, .attention_seq_half = 99,
                                                .hbm_factor = 3, .op_overhead_s = 1e-3, .step_overhead_s = 2});
    ctx_of(&base, 256, GCKPT_CB_FUSED, GCKPT_TARGET_CPU, &c0, &m, &r);
    ctx_of(&d, 256, GCKPT_CB_FUSED, GCKPT_TARGET_CPU, &c1, &m, &r);
    for (int i = 0; i < r.nop; i++)
        for (int bwd = 0; bwd < 2; bwd++) assert_true(c0.op_s[bwd][i] == c1.op_s[bwd][i]);
    assert_true(c0.opt_seconds == c1.opt_seconds);
}

/* A profile's code_bases: a bad field is refused naming it; the writer's JSON reads back the same. */
static void profile_field(void **state)
{
    (void)state;
    gckpt_device d;
    gckpt_err err;
    const char *head = "{\"schema\":\"gckpt.device/1\",\"name\":\"x\",\"memory_bytes\":1073741824,"
                       "\"peak_tflops\":{\"fp32\":1,\"tf32\":1,\"bf16\":1,\"fp16\":1},\"matmul_efficiency\":0.5,"
                       "\"hbm_bytes_per_s\":1e12,\"hbm_efficiency\":0.5,\"h2d_bytes_per_s\":1e9,\"d2h_bytes_per_s\":1e9,"
                       "\"context_bytes\":0,\"workspace_bytes\":0,\"alloc_round_bytes\":512,\"segment_round_bytes\":2097152,";
    char text[2048];
    snprintf(text, sizeof text, "%s\"code_bases\":{\"fused\":{\"matmul_factor\":0.7,\"attention_factor\":0.3,"
                                "\"attention_seq_half\":0,\"hbm_factor\":2,\"op_overhead_s\":-1,\"step_overhead_s\":0}}}", head);
    assert_false(gckpt_device_parse("p.json", text, &d, &err));
    assert_non_null(strstr(err.msg, "code_bases.fused.op_overhead_s"));
    snprintf(text, sizeof text, "%s\"code_bases\":{\"eager\":{}}}", head);
    assert_false(gckpt_device_parse("p.json", text, &d, &err));
    assert_non_null(strstr(err.msg, "code_bases.eager"));
    snprintf(text, sizeof text, "%s\"code_bases\":{\"fused\":{\"matmul_factor\":0.7,\"attention_factor\":0.3,"
                                "\"attention_seq_half\":256,\"hbm_factor\":2,\"op_overhead_s\":1e-5,\"step_overhead_s\":0.5},"
                                "\"fit\":{\"script\":\"s\"}}}", head);
    assert_true(gckpt_device_parse("p.json", text, &d, &err));
    assert_true(d.code_base[GCKPT_CB_FUSED].attention_seq_half == 256 && d.code_base[GCKPT_CB_HF].matmul_factor == 1);
    close_to(gckpt_attention_eff(&d.code_base[GCKPT_CB_FUSED], 768), 0.3 * 768 / 1024);
    assert_string_equal(d.code_base_fit, "{\"script\":\"s\"}");
    /* the ratio band: optional, whole, p10 <= 1 <= p90 */
    static const struct { const char *band, *field; } bad[] = {
        {"\"ratio_p10\":1.05,\"ratio_p90\":1.1", "code_bases.fused.ratio_p10"},
        {"\"ratio_p10\":0.9,\"ratio_p90\":0.95", "code_bases.fused.ratio_p90"},
        {"\"ratio_p10\":0.9", "code_bases.fused.ratio_p10' without ratio_p90"},
        {"\"ratio_p90\":\"1.1\"", "code_bases.fused.ratio_p90"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s\"code_bases\":{\"fused\":{\"matmul_factor\":0.7,\"attention_factor\":0.3,"
                                    "\"attention_seq_half\":0,\"hbm_factor\":2,\"op_overhead_s\":0,\"step_overhead_s\":0,%s}}}",
                 head, bad[i].band);
        assert_false(gckpt_device_parse("p.json", text, &d, &err));
        if (!strstr(err.msg, bad[i].field) || !strstr(err.msg, "p.json")) fail_msg("%s not in: %s", bad[i].field, err.msg);
    }
    snprintf(text, sizeof text, "%s\"code_bases\":{\"fused\":{\"matmul_factor\":0.7,\"attention_factor\":0.3,"
                                "\"attention_seq_half\":0,\"hbm_factor\":2,\"op_overhead_s\":0,\"step_overhead_s\":0,"
                                "\"ratio_p10\":0.93,\"ratio_p90\":1.08}}}", head);
    assert_true(gckpt_device_parse("p.json", text, &d, &err));
    assert_true(d.code_base[GCKPT_CB_FUSED].ratio_p10 == 0.93 && d.code_base[GCKPT_CB_FUSED].ratio_p90 == 1.08);
    assert_true(d.code_base[GCKPT_CB_HF].ratio_p10 == 1 && d.code_base[GCKPT_CB_HF].ratio_p90 == 1);
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load("h100-sxm-80gb", &base, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attention_rate),     cmocka_unit_test(gemm_rate_and_launch),
        cmocka_unit_test(hbm_rate_and_launch), cmocka_unit_test(step_overhead),
        cmocka_unit_test(cpu_target_ignores), cmocka_unit_test(profile_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
