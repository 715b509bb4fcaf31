/* LoRA and QLoRA on the host backend (FINDINGS R-PEFT-*, R-QUANT-*): tiny llama, qwen2 and gpt2 with frozen
 * (and quantized) base weights and fp32 adapters, every every_n_layers / offload setting:
 * the allocator's measured peak equals the event walk's prediction exactly, pinned bytes
 * too, and the loss and every adapter gradient of two steps are bitwise identical across
 * settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <unistd.h>

#include "exec_fixture.h"
#include "gckpt/executor/quant4.h"
#include "host_estimate.h"
#include "interp.h"
#include "plan_fixture.h"
#include "gckpt/core/peft.h"
#include "gckpt/executor/exec_host.h"

static const struct {
    uint32_t every_n;
    bool offload;
} settings[] = {{0, false}, {1, false}, {1, true}, {2, false}, {2, true}, {3, false}, {3, true}};
#define NSET (sizeof settings / sizeof settings[0])

static void sweep(const char *fixture, gckpt_precision p, const gckpt_peft *pf, uint64_t ga)
{
    gckpt_model m = fx_model(fixture);
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_non_null(be);
    fx_run ref;
    bool have_ref = false;
    char tg[96];
    gckpt_lora_targets_name(pf->targets, m.family, tg, sizeof tg);
    for (size_t k = 0; k < NSET; k++) {
        if (settings[k].every_n > m.layers) continue;
        gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = ga, .precision = p, .optimizer = GCKPT_ADAMW,
                           .attention = GCKPT_SDPA, .every_n = settings[k].every_n, .offload = settings[k].offload,
                           .peft = *pf};
        fx_run r;
        fx_steps(be, &m, &d, &s, 2, &r);
        const char *method = gckpt_method_names[pf->method], *q = pf->method == GCKPT_METHOD_QLORA
                                                                        ? gckpt_quant_names[pf->quant] : "-";
        if (r.rc != GCKPT_XS_OK)
            fail_msg("%s %s %s %s ga %llu every_n %u offload %d: %s", fixture, method, q, gckpt_precision_names[p],
                     (unsigned long long)ga, s.every_n, s.offload, r.msg);
        printf("%-12s %-5s %-4s%s %-8s %-10s d%.2f ga %llu  every_n %u offload %-3s  predicted %9llu  measured %9llu  %s"
               "  pinned %5llu/%5llu  loss %.6f  grads %016llx\n",
               fixture, method, q, pf->double_quant && pf->method == GCKPT_METHOD_QLORA ? "dq" : "  ",
               gckpt_precision_names[p], tg, pf->dropout, (unsigned long long)ga, s.every_n, s.offload ? "on" : "off",
               (unsigned long long)r.pred.peak_bytes, (unsigned long long)r.peak,
               r.peak == r.pred.peak_bytes ? "equal" : "DIFFERENT", (unsigned long long)r.pinned,
               (unsigned long long)r.pred.host_pinned_bytes, r.loss[1], (unsigned long long)r.hash[1]);
        fx_sweep_check(&r, &ref, &have_ref);
    }
    /* the second step ran on updated adapters: its gradients differ from the first's */
    assert_true(ref.grads[0].n == ref.grads[1].n && ref.grads[0].n > 0);
    assert_true(memcmp(ref.grads[0].bytes, ref.grads[1].bytes, ref.grads[0].n) != 0);
    fx_run_free(&ref);
    be->destroy(be);
}

static gckpt_peft method(gckpt_method mth, double dropout, uint32_t targets)
{
    gckpt_peft pf;
    gckpt_peft_default(mth, &pf);
    pf.rank = 4;
    pf.alpha = 8;
    pf.dropout = dropout;
    if (targets) pf.targets = targets;
    return pf;
}

/* LoRA: every family x fp32 / bf16 / amp-bf16, all-linear without dropout and the
 * attention targets with dropout 0.05, grad_accum 1 and 2 */
static void lora_family(const char *fixture, uint32_t attn_targets)
{
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int p = 0; p < 3; p++) {
        gckpt_peft all = method(GCKPT_METHOD_LORA, 0.0, 0), attn = method(GCKPT_METHOD_LORA, 0.05, attn_targets);
        sweep(fixture, precs[p], &all, 2);
        sweep(fixture, precs[p], &attn, 1);
    }
}

#define QKVO ((1u << GCKPT_LT_Q) | (1u << GCKPT_LT_K) | (1u << GCKPT_LT_V) | (1u << GCKPT_LT_O))
#define GPT2_ATTN ((1u << GCKPT_LT_C_ATTN) | (1u << GCKPT_LT_ATTN_C_PROJ) | (1u << GCKPT_LT_MLP_C_PROJ))

static void test_lora_llama(void **st) { (void)st; lora_family("tiny-llama", QKVO); }
static void test_lora_qwen2(void **st) { (void)st; lora_family("tiny-qwen2", QKVO); }
static void test_lora_gpt2(void **st) { (void)st; lora_family("tiny-gpt2", GPT2_ATTN); }

/* modules_to_save: trainable copies of lm_head and the embedding next to the originals */
static void test_lora_modules_to_save(void **st)
{
    (void)st;
    gckpt_peft pf = method(GCKPT_METHOD_LORA, 0.05, 0);
    pf.modules_to_save = GCKPT_MTS_LM_HEAD | GCKPT_MTS_EMBED;
    sweep("tiny-llama", GCKPT_AMP_BF16, &pf, 2);
    pf.modules_to_save = GCKPT_MTS_LM_HEAD;
    sweep("tiny-gpt2", GCKPT_FP32, &pf, 2);
}

/* QLoRA: nf4 with and without double quantization, fp4, int8; under the Trainer's bf16
 * autocast and without; int8 also without accumulation, where every layer's ctx.A lives to
 * the end of the backward while the gradients are made (issue 21) */
static void qlora_family(const char *fixture)
{
    const struct { gckpt_quant_scheme q; bool dq; gckpt_precision p; double d; uint64_t ga; } v[] = {
        {GCKPT_QUANT_NF4, true, GCKPT_AMP_BF16, 0.05, 2}, {GCKPT_QUANT_NF4, false, GCKPT_AMP_BF16, 0.0, 2},
        {GCKPT_QUANT_FP4, true, GCKPT_FP32, 0.05, 2},     {GCKPT_QUANT_INT8, false, GCKPT_AMP_BF16, 0.05, 2},
        {GCKPT_QUANT_INT8, false, GCKPT_FP32, 0.0, 2},    {GCKPT_QUANT_INT8, false, GCKPT_AMP_BF16, 0.05, 1},
        {GCKPT_QUANT_INT8, false, GCKPT_FP32, 0.05, 1},
    };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        gckpt_peft pf = method(GCKPT_METHOD_QLORA, v[k].d, 0);
        pf.quant = (uint8_t)v[k].q;
        pf.double_quant = v[k].dq;
        sweep(fixture, v[k].p, &pf, v[k].ga);
    }
}

static void test_qlora_llama(void **st) { (void)st; qlora_family("tiny-llama"); }
static void test_qlora_qwen2(void **st) { (void)st; qlora_family("tiny-qwen2"); }
static void test_qlora_gpt2(void **st) { (void)st; qlora_family("tiny-gpt2"); }

/* the later dense families (FINDINGS R-PEFT-21 to R-PEFT-26): LoRA fp32 all-linear with dropout, QLoRA
 * nf4 double-quant under autocast, accumulation 2: Gemma's scaled embedding leaf, Gemma
 * 2's soft-capping (eager), Gemma 3's two layer types, OLMo 2's frozen post-norms ending
 * the recompute, Granite's multipliers, Phi-3's and GPT-NeoX's adapters over a fused
 * output read through strided slices, GPT-NeoX's biased 4-bit linears (parallel and
 * sequential blocks) */
static void test_issue13_families(void **st)
{
    (void)st;
    const char *fams[] = {"tiny-gemma", "tiny-gemma2", "tiny-gemma3", "tiny-olmo2", "tiny-granite", "tiny-phi3",
                          "tiny-gpt-neox", "tiny-gpt-neox-seq", "tiny-smollm3", "tiny-glm4"};
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        gckpt_peft lora = method(GCKPT_METHOD_LORA, 0.05, 0), qlora = method(GCKPT_METHOD_QLORA, 0.05, 0);
        sweep(fams[i], GCKPT_FP32, &lora, 2);
        sweep(fams[i], GCKPT_AMP_BF16, &qlora, 2);
    }
    /* the fused projections alone (the attention ones: phi3 qkv_proj + o_proj) */
    gckpt_peft attn = method(GCKPT_METHOD_LORA, 0.0, (1u << GCKPT_LT_QKV_PROJ) | (1u << GCKPT_LT_O));
    sweep("tiny-phi3", GCKPT_BF16, &attn, 1);
    attn.targets = (1u << GCKPT_LT_QUERY_KEY_VALUE) | (1u << GCKPT_LT_H_TO_4H);
    sweep("tiny-gpt-neox", GCKPT_BF16, &attn, 1);
}

/* the mixture-of-experts families with attention adapters (FINDINGS R-PEFT-27): the router
 * and the grouped_mm experts frozen (no weight gradients, no saved expert inputs for
 * them), with and without the load-balancing loss; LoRA fp32 / bf16 / amp-bf16, dropout
 * 0.05 and 0, and QLoRA (q/k/v/o nf4, the experts and the router fp32) under amp-bf16;
 * accumulation 2 */
static void test_lora_moe(void **st)
{
    (void)st;
    const char *fams[] = {"tiny-mixtral", "tiny-qwen3-moe", "tiny-olmoe", "tiny-mixtral-aux"};
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        for (int p = 0; p < 3; p++) {
            gckpt_peft pf = method(GCKPT_METHOD_LORA, p == 1 ? 0.0 : 0.05, QKVO);
            sweep(fams[i], precs[p], &pf, 2);
        }
        gckpt_peft q = method(GCKPT_METHOD_QLORA, 0.05, QKVO);
        sweep(fams[i], GCKPT_AMP_BF16, &q, 2);
    }
}

/* gpt_oss: LoRA on q/k/v/o (its all-linear) through the sink attention's strided gradient
 * views and the biased experts, frozen; QLoRA is refused (an MXFP4 checkpoint) */
static void test_lora_gpt_oss(void **st)
{
    (void)st;
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    const char *fams[] = {"tiny-gpt-oss", "tiny-gpt-oss-aux"};
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++)
        for (int p = 0; p < 3; p++) {
            gckpt_peft pf = method(GCKPT_METHOD_LORA, p == 1 ? 0.0 : 0.05, QKVO);
            sweep(fams[i], precs[p], &pf, 2);
        }
    gckpt_model m = fx_model("tiny-gpt-oss");
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_AMP_BF16,
                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_EAGER,
                       .peft = method(GCKPT_METHOD_QLORA, 0.05, QKVO)};
    gckpt_err err = {{0}};
    assert_null(gckpt_exec_new(be, &m, &d, &s, NULL, &err));
    printf("refused: %s\n", err.msg);
    be->destroy(be);
}

/* all-linear on mixtral would also wrap the router and the fused experts (peft's
 * ParamWrapper): the executor refuses it as the planner does */
static void test_moe_refusals(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-mixtral");
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32,
                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .peft = method(GCKPT_METHOD_LORA, 0.05, 0)};
    gckpt_err err = {{0}};
    assert_null(gckpt_exec_new(be, &m, &d, &s, NULL, &err));
    printf("refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "all-linear"));
    be->destroy(be);
}

/* gckpt-run's time estimate of a LoRA / QLoRA entry counts the FLOPs of the schedule the
 * executor performs (frozen weights: no weight-gradient GEMMs), not full fine-tuning's */
static void test_step_work_follows_method(void **st)
{
    (void)st;
    static const uint32_t every[] = {0, 2};
    const gckpt_method methods[] = {GCKPT_METHOD_LORA, GCKPT_METHOD_QLORA};
    for (int k = 0; k < 2; k++) {
        gckpt_peft pf = method(methods[k], 0.05, 0);
        char *text = pf_plan_text_peft("tiny-llama", GCKPT_AMP_BF16, GCKPT_SDPA, every, 2, 2, 2, 0, &pf);
        assert_non_null(text);
        char path[] = "/tmp/gckpt-peft-plan-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        FILE *f = fdopen(fd, "w");
        fputs(text, f);
        fclose(f);
        free(text);
        gckpt_plan_file plan;
        gckpt_err err = {{0}};
        assert_true(gckpt_plan_read(path, &plan, &err));
        unlink(path);
        for (size_t i = 0; i < plan.n; i++) {
            double flops, bytes, want = 0;
            assert_true(gckpt_entry_step_work(&plan, i, &flops, &bytes));
            gckpt_setting s = gckpt_plan_file_setting(&plan, i);
            gckpt_backend *be = gckpt_host_backend_new(0);
            gckpt_exec *x = gckpt_exec_new(be, &plan.model, &plan.dev, &s, NULL, &err);
            assert_non_null(x);
            const gckpt_schedule *ev = gckpt_exec_schedule(x);
            for (size_t g = 0; g < ev->nseg; g++) {
                double times = ev->seg[g].seg.micro == GCKPT_MICRO_LATER ? (double)(s.grad_accum - 1) : 1.0;
                for (size_t e = ev->seg[g].begin; e < ev->seg[g].end; e++)
                    if (ev->ev[e].flops > 0) want += ev->ev[e].flops * times;
            }
            printf("%s entry %zu: estimate %.0f FLOP, the executor's schedule %.0f\n", gckpt_method_names[methods[k]],
                   i, flops, want);
            assert_true(flops == want);
            gckpt_exec_free(x);
            be->destroy(be);
        }
        gckpt_plan_file_free(&plan);
    }
}

/* A quantized weight has codes, not values: reading or writing it as numbers is refused */
static void test_quantized_param_access(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 16, .micro_batch = 1, .grad_accum = 1, .precision = GCKPT_AMP_BF16,
                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA};
    s.peft = method(GCKPT_METHOD_QLORA, 0.0, 0);
    gckpt_err err = {{0}};
    gckpt_exec *x = gckpt_exec_new(be, &m, &d, &s, NULL, &err);
    assert_non_null(x);
    assert_int_equal(gckpt_exec_setup(x, &err), GCKPT_XS_OK);
    const gckpt_recipe *r = gckpt_exec_ctx(x)->recipe;
    int q = -1, a = -1;
    for (int t = 0; t < r->nt; t++) {
        if (!strcmp(r->t[t].name, "self_attn.q_proj.weight")) q = t;
        if (!strcmp(r->t[t].name, "self_attn.q_proj.lora_A.weight")) a = t;
    }
    float *buf = malloc(sizeof(float) * gckpt_exec_param_numel(x, q));
    assert_int_equal(gckpt_exec_read_param(x, 0, q, buf, &err), GCKPT_XS_ERROR);
    assert_string_equal(err.msg, "parameter self_attn.q_proj.weight is quantized (nf4): it has no values to read or write");
    assert_int_equal(gckpt_exec_write_param(x, 0, q, buf, &err), GCKPT_XS_ERROR);
    assert_int_equal(gckpt_exec_read_param(x, 0, a, buf, &err), GCKPT_XS_OK); /* an adapter reads */
    free(buf);
    gckpt_exec_free(x);
    be->destroy(be);
}

/* QLoRA's forward runs on exactly the dequantized weights: a LoRA model given the QLoRA
 * model's parameters, its base weights set to their dequantized values (fp32 everywhere,
 * no dropout), has the same loss and adapter gradients, bit for bit */
static void copy_params(gckpt_exec *q, gckpt_exec *l)
{
    const gckpt_recipe *rq = gckpt_exec_ctx(q)->recipe, *rl = gckpt_exec_ctx(l)->recipe;
    gckpt_err err = {{0}};
    int copied = 0, dequantized = 0;
    for (int t = 0; t < rq->nt; t++) {
        if (rq->t[t].kind != GCKPT_T_PARAM) continue;
        int u = -1;
        for (int k = 0; k < rl->nt; k++)
            if (rl->t[k].kind == GCKPT_T_PARAM && !strcmp(rl->t[k].name, rq->t[t].name)) u = k;
        assert_true(u >= 0);
        int layers = rq->t[t].section == GCKPT_SEC_BLOCK ? (int)q->m.layers : 1;
        for (int layer = 0; layer < layers; layer++) {
            int ly = rq->t[t].section == GCKPT_SEC_BLOCK ? layer : -1;
            uint64_t n = gckpt_exec_param_numel(q, t);
            float *v = malloc(n * sizeof *v);
            const param_t *p = exec_param(q, t, ly);
            if (p->spec->quant.scheme) { /* the host backend's memory is the host's */
                gckpt_q4_store st = gckpt_q4_store_of(p->q.layout, p->w, p->q.stat);
                assert_true(gckpt_q4_dequantize((gckpt_quant_scheme)p->spec->quant.scheme, &st, n, GCKPT_DT_F32, v, &err));
                dequantized++;
            } else {
                assert_int_equal(gckpt_exec_read_param(q, ly, t, v, &err), GCKPT_XS_OK);
            }
            assert_int_equal(gckpt_exec_write_param(l, ly, u, v, &err), GCKPT_XS_OK);
            free(v);
            copied++;
        }
    }
    printf("copied %d parameter instances, %d of them dequantized\n", copied, dequantized);
    assert_true(dequantized > 0);
}

static void test_qlora_equals_lora_on_dequantized(void **st)
{
    (void)st;
    const char *fixtures[] = {"tiny-llama", "tiny-gpt2"};
    for (int f = 0; f < 2; f++) {
        gckpt_model m = fx_model(fixtures[f]);
        gckpt_device d = fx_device();
        gckpt_backend *be = gckpt_host_backend_new(0);
        gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32,
                           .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = 1};
        gckpt_setting sq = s, sl = s;
        sq.peft = method(GCKPT_METHOD_QLORA, 0.0, 0);
        sq.peft.compute_dtype = GCKPT_DT_F32;
        sl.peft = method(GCKPT_METHOD_LORA, 0.0, 0);
        gckpt_err err = {{0}};
        gckpt_exec *q = gckpt_exec_new(be, &m, &d, &sq, NULL, &err), *l = gckpt_exec_new(be, &m, &d, &sl, NULL, &err);
        assert_non_null(q);
        assert_non_null(l);
        assert_int_equal(gckpt_exec_setup(q, &err), GCKPT_XS_OK);
        assert_int_equal(gckpt_exec_setup(l, &err), GCKPT_XS_OK);
        copy_params(q, l);
        gckpt_step_opts so = {.update = false, .checksum = true};
        gckpt_step_result rq, rl;
        assert_int_equal(gckpt_exec_step(q, &so, &rq, &err), GCKPT_XS_OK);
        assert_int_equal(gckpt_exec_step(l, &so, &rl, &err), GCKPT_XS_OK);
        printf("%s: QLoRA nf4 dq loss %.9f grads %016llx, LoRA on its dequantized weights loss %.9f grads %016llx\n",
               fixtures[f], rq.loss, (unsigned long long)rq.grad_hash, rl.loss, (unsigned long long)rl.grad_hash);
        assert_memory_equal(&rq.loss, &rl.loss, sizeof rq.loss);
        assert_int_equal(rq.grad_hash, rl.grad_hash);
        gckpt_exec_free(q);
        gckpt_exec_free(l);
        be->destroy(be);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_llama),
        cmocka_unit_test(test_lora_qwen2),
        cmocka_unit_test(test_lora_gpt2),
        cmocka_unit_test(test_lora_modules_to_save),
        cmocka_unit_test(test_qlora_llama),
        cmocka_unit_test(test_qlora_qwen2),
        cmocka_unit_test(test_qlora_gpt2),
        cmocka_unit_test(test_issue13_families),
        cmocka_unit_test(test_lora_moe),
        cmocka_unit_test(test_lora_gpt_oss),
        cmocka_unit_test(test_moe_refusals),
        cmocka_unit_test(test_step_work_follows_method),
        cmocka_unit_test(test_quantized_param_access),
        cmocka_unit_test(test_qlora_equals_lora_on_dequantized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
