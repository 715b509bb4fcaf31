/* The CUDA backend on tiny models (needs a GPU; exits 77, "skipped", without one):
 * the allocator's peak equals the predicted peak exactly, gradients are bitwise
 * identical across every_n_layers / offload settings on the GPU, the loss and gradient
 * norm agree with the host backend (also for LoRA and QLoRA), and out of memory (a limit, or a real
 * cudaErrorMemoryAllocation) is reported and cleaned up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cuda_runtime_api.h>
#include <math.h>

#include "exec_fixture.h"
#include "gckpt/core/peft.h"
#include "gckpt/executor/exec_cuda.h"
#include "gckpt/executor/exec_host.h"

static gckpt_backend *gpu(uint64_t limit)
{
    gckpt_cuda_opts o = {.device = 0, .memory_limit = limit};
    gckpt_err err = {{0}};
    gckpt_backend *be = gckpt_cuda_backend_new(&o, &err);
    if (!be) fail_msg("cuda backend: %s", err.msg);
    return be;
}

static double norm_of(const fx_grads *g, gckpt_dtype dt)
{
    /* sum of squares of the raw gradient bytes read as dt */
    double s = 0;
    size_t es = gckpt_dtype_size(dt), n = g->n / es;
    for (size_t i = 0; i < n; i++) {
        float v;
        if (dt == GCKPT_DT_F32) memcpy(&v, g->bytes + i * 4, 4);
        else {
            uint16_t h;
            memcpy(&h, g->bytes + i * 2, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&v, &u, 4);
        }
        s += (double)v * v;
    }
    return sqrt(s);
}

static void settings_peft(const char *fixture, gckpt_precision p, gckpt_attention a, double loss_tol,
                          const gckpt_peft *peft)
{
    static const struct {
        uint32_t n;
        bool off;
    } set[] = {{0, false}, {1, false}, {1, true}, {2, true}};
    gckpt_model m = fx_model(fixture);
    gckpt_device d = fx_device();
    gckpt_backend *be = gpu(0), *host = gckpt_host_backend_new(0);
    fx_run ref, h;
    gckpt_setting s0 = {.seq = 16, .micro_batch = 2, .grad_accum = 2, .precision = p, .attention = a};
    if (peft) s0.peft = *peft;
    fx_steps(host, &m, &d, &s0, 1, &h);
    assert_int_equal(h.rc, GCKPT_XS_OK);
    for (size_t k = 0; k < sizeof set / sizeof set[0]; k++) {
        gckpt_setting s = s0;
        s.every_n = set[k].n;
        s.offload = set[k].off;
        fx_run r;
        fx_steps(be, &m, &d, &s, 2, &r);
        if (r.rc != GCKPT_XS_OK) fail_msg("%s every_n %u offload %d: %s", fixture, s.every_n, s.offload, r.msg);
        printf("cuda %-18s %-8s %-5s every_n %u offload %-3s predicted %llu measured %llu loss %.6f (host %.6f)\n", fixture,
               gckpt_precision_names[p], gckpt_attention_names[a], s.every_n, s.offload ? "on" : "off",
               (unsigned long long)r.pred.peak_bytes, (unsigned long long)r.peak, r.loss[0], h.loss[0]);
        assert_int_equal(r.peak, r.pred.peak_bytes);
        assert_int_equal(r.pinned, r.pred.host_pinned_bytes);
        assert_int_equal(r.left, 0);
        assert_true(fabs(r.loss[0] - h.loss[0]) <= loss_tol * fabs(h.loss[0]));
        gckpt_dtype gdt = p == GCKPT_BF16 && !peft ? GCKPT_DT_BF16 : GCKPT_DT_F32; /* adapters: fp32 */
        double ng = norm_of(&r.grads[0], gdt), nh = norm_of(&h.grads[0], gdt);
        assert_true(fabs(ng - nh) <= 5 * loss_tol * nh);
        if (k == 0) {
            ref = r;
            continue;
        }
        for (int i = 0; i < 2; i++) {
            assert_memory_equal(&r.loss[i], &ref.loss[i], sizeof(double));
            assert_int_equal(r.grads[i].n, ref.grads[i].n);
            assert_memory_equal(r.grads[i].bytes, ref.grads[i].bytes, r.grads[i].n);
        }
        fx_run_free(&r);
    }
    fx_run_free(&ref);
    fx_run_free(&h);
    be->destroy(be);
    host->destroy(host);
}

static void settings(const char *fixture, gckpt_precision p, gckpt_attention a, double loss_tol)
{
    settings_peft(fixture, p, a, loss_tol, NULL);
}

static void test_llama(void **st)
{
    (void)st;
    settings("tiny-llama", GCKPT_FP32, GCKPT_SDPA, 1e-4);
    settings("tiny-llama", GCKPT_AMP_BF16, GCKPT_EAGER, 2e-2);
    settings("tiny-qwen3", GCKPT_BF16, GCKPT_SDPA, 3e-2);
}

static void test_gpt2(void **st)
{
    (void)st;
    settings("tiny-gpt2", GCKPT_FP32, GCKPT_EAGER, 1e-4);
    settings("tiny-gpt2-dropout", GCKPT_AMP_BF16, GCKPT_SDPA, 2e-2);
}

/* Issue 13's mixture of experts (router, sort, gathers, histogram, grouped GEMMs; the
 * load-balancing loss): never run, no GPU where it was written */
static void test_moe(void **st)
{
    (void)st;
    settings("tiny-mixtral", GCKPT_FP32, GCKPT_SDPA, 1e-4);
    settings("tiny-qwen3-moe-aux", GCKPT_AMP_BF16, GCKPT_EAGER, 2e-2);
    settings("tiny-olmoe-aux", GCKPT_BF16, GCKPT_SDPA, 3e-2);
}

/* LoRA and QLoRA: frozen base weights, adapters, the dequantization kernels (the decode
 * is the host's: the same weights on both backends) */
static void test_peft(void **st)
{
    (void)st;
    const struct { const char *fixture; gckpt_method m; gckpt_quant_scheme q; gckpt_precision p; double tol; } c[] = {
        {"tiny-llama", GCKPT_METHOD_QLORA, GCKPT_QUANT_NF4, GCKPT_AMP_BF16, 2e-2},
        {"tiny-qwen2", GCKPT_METHOD_QLORA, GCKPT_QUANT_INT8, GCKPT_FP32, 1e-4},
        {"tiny-gpt2", GCKPT_METHOD_QLORA, GCKPT_QUANT_FP4, GCKPT_AMP_BF16, 2e-2},
        {"tiny-gpt2", GCKPT_METHOD_LORA, GCKPT_QUANT_NONE, GCKPT_FP32, 1e-4},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        gckpt_peft pf;
        gckpt_peft_default(c[k].m, &pf);
        pf.rank = 4;
        pf.alpha = 8;
        if (c[k].q) pf.quant = (uint8_t)c[k].q;
        settings_peft(c[k].fixture, c[k].p, GCKPT_SDPA, c[k].tol, &pf);
    }
}

static void test_oom(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_AMP_BF16, .every_n = 1};
    gckpt_backend *be = gpu(0);
    fx_run r;
    fx_steps(be, &m, &d, &s, 1, &r);
    assert_int_equal(r.rc, GCKPT_XS_OK);
    uint64_t peak = r.pred.peak_bytes;
    fx_run_free(&r);
    be->destroy(be);
    be = gpu(peak - 1);
    fx_steps(be, &m, &d, &s, 1, &r);
    assert_int_equal(r.rc, GCKPT_XS_OOM);
    assert_int_equal(r.left, 0);
    fx_run_free(&r);
    /* a real out of memory: more than the GPU has */
    void *p = NULL;
    assert_int_equal(be->alloc(be, GCKPT_MEM_DEVICE, (uint64_t)1 << 50, &p), GCKPT_XS_OOM);
    assert_non_null(strstr(be->err.msg, "cuda"));
    assert_int_equal(be->alloc(be, GCKPT_MEM_DEVICE, 4096, &p), GCKPT_XS_OK);
    be->release(be, GCKPT_MEM_DEVICE, p, 4096);
    gckpt_memstat ms;
    be->memstat(be, &ms);
    assert_true(ms.has_device && ms.device_baseline > 0 && ms.device_used_peak >= ms.device_baseline);
    be->destroy(be);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("no CUDA GPU: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_llama), cmocka_unit_test(test_gpt2), cmocka_unit_test(test_moe),
                                       cmocka_unit_test(test_peft),
                                       cmocka_unit_test(test_oom)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
