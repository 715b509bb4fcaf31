/* The host backend runs tiny llama- and gpt2-family models for every setting:
 * the allocator's measured peak equals the event walk's predicted peak exactly, pinned
 * host bytes equal the prediction, and the loss and every parameter gradient are
 * bitwise identical across every_n_layers / offload settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "exec_fixture.h"
#include "gckpt/executor/exec_host.h"

static const struct {
    uint32_t every_n;
    bool offload;
} settings[] = {{0, false}, {1, false}, {1, true}, {2, false}, {2, true}, {3, false}, {3, true}};
#define NSET (sizeof settings / sizeof settings[0])

static bool nonzero(const fx_grads *g)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->bytes[i]) return true;
    return false;
}

/* the largest measured kernel scratch / the host memory guard's bound on it */
static double worst_scratch;

/* Every setting of one (model, precision, attention, micro-batch, grad_accum, optimizer). */
static void sweep_mb(const char *fixture, gckpt_precision p, gckpt_attention a, uint64_t mb, uint64_t ga,
                     gckpt_optimizer opt)
{
    gckpt_model m = fx_model(fixture);
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_non_null(be);
    fx_run ref;
    bool have_ref = false;
    for (size_t k = 0; k < NSET; k++) {
        if (settings[k].every_n > m.layers) continue;
        gckpt_setting s = {.seq = 16, .micro_batch = mb, .grad_accum = ga, .precision = p, .optimizer = opt,
                           .attention = a, .every_n = settings[k].every_n, .offload = settings[k].offload};
        fx_run r;
        fx_steps(be, &m, &d, &s, 2, &r);
        if (r.rc != GCKPT_XS_OK) fail_msg("%s %s %s mb %llu ga %llu every_n %u offload %d: %s", fixture,
                                          gckpt_precision_names[p], gckpt_attention_names[a], (unsigned long long)mb,
                                          (unsigned long long)ga, s.every_n, s.offload, r.msg);
        printf("%-18s %-8s %-5s %-13s mb %llu ga %llu  every_n %u offload %-3s  predicted %10llu  measured %10llu  %s  pinned %6llu/%6llu  loss %.6f  grads %016llx\n",
               fixture, gckpt_precision_names[p], gckpt_attention_names[a], gckpt_optimizer_names[opt],
               (unsigned long long)mb, (unsigned long long)ga, s.every_n, s.offload ? "on" : "off", (unsigned long long)r.pred.peak_bytes,
               (unsigned long long)r.peak, r.peak == r.pred.peak_bytes ? "equal" : "DIFFERENT",
               (unsigned long long)r.pinned, (unsigned long long)r.pred.host_pinned_bytes, r.loss[1],
               (unsigned long long)r.hash[1]);
        /* the host memory guard's bound on the kernels' scratch holds */
        double ratio = (double)r.scratch / (double)r.need.scratch;
        if (ratio > worst_scratch) worst_scratch = ratio;
        if (r.scratch > r.need.scratch)
            fail_msg("kernel scratch %llu bytes > the guard's bound %llu", (unsigned long long)r.scratch,
                     (unsigned long long)r.need.scratch);
        if (s.offload) assert_true(r.pinned > 0);
        assert_true(nonzero(&r.grads[0]));
        fx_sweep_check(&r, &ref, &have_ref);
    }
    /* the second step ran on updated weights: its gradients differ from the first's */
    assert_true(ref.grads[0].n == ref.grads[1].n);
    assert_true(memcmp(ref.grads[0].bytes, ref.grads[1].bytes, ref.grads[0].n) != 0);
    fx_run_free(&ref);
    be->destroy(be);
}

static void sweep(const char *fixture, gckpt_precision p, gckpt_attention a, uint64_t ga, gckpt_optimizer opt)
{
    sweep_mb(fixture, p, a, 2, ga, opt);
}

static void family(const char *fixture)
{
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int p = 0; p < 3; p++)
        for (int a = 0; a < GCKPT_NATTN; a++)
            for (uint64_t ga = 1; ga <= 2; ga++) sweep(fixture, precs[p], (gckpt_attention)a, ga, GCKPT_ADAMW);
}

static void test_llama(void **st) { (void)st; family("tiny-llama"); }
static void test_qwen3(void **st) { (void)st; family("tiny-qwen3"); }
static void test_gpt2(void **st) { (void)st; family("tiny-gpt2"); }
static void test_gpt2_dropout(void **st) { (void)st; family("tiny-gpt2-dropout"); }
/* issue 13's llama variants: post-norms and q/k norms over the projection (OLMo 2), the
 * four multipliers (Granite), (1 + w) norms, the embedding normalizer, GELU-tanh (Gemma) */
/* every precision and attention with accumulation 2 (the first and a later micro-step) */
static void family_ga2(const char *fixture)
{
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int p = 0; p < 3; p++)
        for (int a = 0; a < GCKPT_NATTN; a++) sweep(fixture, precs[p], (gckpt_attention)a, 2, GCKPT_ADAMW);
}
static void test_olmo2(void **st) { (void)st; family_ga2("tiny-olmo2"); }
static void test_granite(void **st) { (void)st; family_ga2("tiny-granite"); }
static void test_gemma(void **st) { (void)st; family_ga2("tiny-gemma"); }
/* Gemma 2 (soft-capped scores and logits, sandwich norms; eager whatever is asked) with
 * a window of 16 = the sequence: its sliding layers' mask is the causal one */
static void test_gemma2(void **st) { (void)st; family_ga2("tiny-gemma2-w16"); }
/* issue 13's mixture-of-experts families (router, top-k, sorted pairs, grouped_mm
 * experts): mixtral (fp32 routing weights), qwen3_moe (norm_topk_prob, head_dim 12),
 * olmoe (no renormalisation) */
static void test_mixtral(void **st) { (void)st; family_ga2("tiny-mixtral"); }
static void test_qwen3_moe(void **st) { (void)st; family_ga2("tiny-qwen3-moe"); }
static void test_olmoe(void **st) { (void)st; family_ga2("tiny-olmoe"); }
/* ... with output_router_logits: every layer's logits held for the head's load-balancing
 * loss, its gradient handed back to each layer's router (qwen3_moe, olmoe: 3 layers,
 * fewer than the simulator's proxy: the buffers held to the embedding's backward). Under
 * sdpa, as the probe's +aux fixtures (the loss is in the head: the attention does not
 * meet it; eager runs in test_run_cli and test_exec_fd) */
static void test_moe_aux(void **st)
{
    (void)st;
    const char *fixtures[] = {"tiny-mixtral-aux", "tiny-qwen3-moe-aux", "tiny-olmoe-aux"};
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int f = 0; f < 3; f++)
        for (int p = 0; p < 3; p++) sweep(fixtures[f], precs[p], GCKPT_SDPA, 2, GCKPT_ADAMW);
}

/* One kv head (repeat_kv is a view) and kv heads = heads (no repeat), at micro-batch 1
 * (eager attention's batch folding is a view: the schedule binds k / v with their own
 * heads) and 2 (folding copies). */
static void test_kv_heads(void **st)
{
    (void)st;
    const char *fixtures[] = {"tiny-mistral-kv1", "tiny-llama-mha"};
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int f = 0; f < 2; f++)
        for (int p = 0; p < 3; p++)
            for (uint64_t mb = 1; mb <= 2; mb++) {
                sweep_mb(fixtures[f], precs[p], GCKPT_EAGER, mb, 1, GCKPT_ADAMW);
                sweep_mb(fixtures[f], precs[p], GCKPT_SDPA, mb, 2, GCKPT_ADAMW);
            }
}

static void test_amp_fp16(void **st)
{
    (void)st;
    sweep("tiny-llama", GCKPT_AMP_FP16, GCKPT_SDPA, 1, GCKPT_ADAMW);
    sweep("tiny-gpt2", GCKPT_AMP_FP16, GCKPT_EAGER, 2, GCKPT_ADAMW);
}

/* Optimizer states and temporaries are allocated as the planner counts them. */
static void test_optimizers(void **st)
{
    (void)st;
    for (int o = 0; o < GCKPT_NOPT; o++) {
        sweep("tiny-llama", GCKPT_BF16, GCKPT_SDPA, 2, (gckpt_optimizer)o);
        sweep("tiny-gpt2", GCKPT_AMP_BF16, GCKPT_EAGER, 1, (gckpt_optimizer)o);
    }
}

/* Dropout really drops: with p > 0 the loss differs from the same model without. */
static void test_dropout_active(void **st)
{
    (void)st;
    gckpt_model a = fx_model("tiny-gpt2"), b = fx_model("tiny-gpt2-dropout");
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32, .attention = GCKPT_SDPA};
    fx_run ra, rb;
    fx_steps(be, &a, &d, &s, 1, &ra);
    fx_steps(be, &b, &d, &s, 1, &rb);
    assert_int_equal(ra.rc, GCKPT_XS_OK);
    assert_int_equal(rb.rc, GCKPT_XS_OK);
    assert_true(ra.loss[0] != rb.loss[0]);
    fx_run_free(&ra);
    fx_run_free(&rb);
    be->destroy(be);
}

/* The byte counting is exact: a limit of exactly the predicted peak is enough, one
 * byte less is an out of memory, reported and fully cleaned up. */
static void test_limit_exact(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 2, .precision = GCKPT_AMP_BF16,
                       .attention = GCKPT_EAGER, .every_n = 2, .offload = true};
    gckpt_backend *probe = gckpt_host_backend_new(0);
    fx_run r;
    fx_steps(probe, &m, &d, &s, 1, &r);
    assert_int_equal(r.rc, GCKPT_XS_OK);
    uint64_t peak = r.pred.peak_bytes;
    fx_run_free(&r);
    probe->destroy(probe);
    gckpt_backend *ok = gckpt_host_backend_new(peak);
    fx_steps(ok, &m, &d, &s, 2, &r);
    assert_int_equal(r.rc, GCKPT_XS_OK);
    assert_int_equal(r.peak, peak);
    fx_run_free(&r);
    ok->destroy(ok);
    gckpt_backend *tight = gckpt_host_backend_new(peak - 1);
    fx_steps(tight, &m, &d, &s, 2, &r);
    assert_int_equal(r.rc, GCKPT_XS_OOM);
    assert_non_null(strstr(r.msg, "out of memory"));
    assert_int_equal(r.left, 0);
    fx_run_free(&r);
    tight->destroy(tight);
}

/* The interpreter checks every event against its own state: a schedule that does not
 * describe a real computation fails loudly (these are the checks that keep the exact
 * byte equality above meaningful). */
typedef enum { BREAK_LEAK, BREAK_SMALL_ALLOC, BREAK_EARLY_FREE, BREAK_NO_GRAD } breakage;

static void break_schedule(gckpt_exec *x, breakage how)
{
    gckpt_schedule *ev = (gckpt_schedule *)gckpt_exec_schedule(x);
    const gckpt_recipe *r = gckpt_exec_ctx(x)->recipe;
    for (size_t si = 0; si < ev->nseg; si++) {
        const gckpt_seg *g = &ev->seg[si].seg;
        for (size_t i = ev->seg[si].begin; i < ev->seg[si].end; i++) {
            gckpt_event *e = &ev->ev[i];
            if (how == BREAK_LEAK && e->kind == GCKPT_EV_FREE && g->micro == GCKPT_MICRO_FIRST && e->tensor >= 0 &&
                r->t[e->tensor].kind == GCKPT_T_ACT) {
                e->kind = GCKPT_EV_TO_CHECKPOINT; /* the free becomes bookkeeping: the buffer leaks */
                return;
            }
            if (how == BREAK_SMALL_ALLOC && e->kind == GCKPT_EV_ALLOC && e->tensor >= 0 && e->bytes > 1024) {
                e->bytes /= 4;
                return;
            }
            if (how == BREAK_NO_GRAD && e->kind == GCKPT_EV_BWD) {
                e->arg.bwd.grad_out += 100000; /* an output gradient that does not exist */
                return;
            }
            if (how == BREAK_EARLY_FREE && e->kind == GCKPT_EV_BWD && g->part == GCKPT_PART_LAYER && g->layer == 0 &&
                r->op[e->op].prim == GCKPT_P_LINEAR) {
                /* free the saved input of a linear in a recomputed layer just before its backward */
                uint32_t saved = GCKPT_NOINST;
                for (size_t j = i; j-- > ev->seg[si].begin;)
                    if ((ev->ev[j].kind == GCKPT_EV_FWD || ev->ev[j].kind == GCKPT_EV_RECOMPUTE) && ev->ev[j].op == e->op) {
                        saved = ev->ev[j].arg.fwd.in[0];
                        break;
                    }
                assert_true(saved != GCKPT_NOINST);
                for (size_t j = i + 1; j < ev->seg[si].end; j++)
                    if (ev->ev[j].kind == GCKPT_EV_FREE && ev->ev[j].inst == saved) {
                        gckpt_event f = ev->ev[j];
                        memmove(&ev->ev[i + 1], &ev->ev[i], (j - i) * sizeof f);
                        ev->ev[i] = f;
                        return;
                    }
                fail_msg("no free of the saved input");
            }
        }
    }
    fail_msg("nothing to break");
}

static void test_detects_broken_schedule(void **st)
{
    (void)st;
    const struct {
        breakage how;
        const char *expect;
    } cases[] = {{BREAK_LEAK, "schedule leak"},
                 {BREAK_SMALL_ALLOC, "cannot hold"},
                 {BREAK_EARLY_FREE, "not available"},
                 {BREAK_NO_GRAD, "output gradient"}};
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gckpt_backend *be = gckpt_host_backend_new(0);
        gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_BF16,
                           .attention = GCKPT_SDPA, .every_n = 2};
        gckpt_err err = {{0}};
        gckpt_exec *x = gckpt_exec_new(be, &m, &d, &s, NULL, &err);
        assert_non_null(x);
        break_schedule(x, cases[k].how);
        assert_int_equal(gckpt_exec_setup(x, &err), GCKPT_XS_OK);
        gckpt_step_result res;
        assert_int_equal(gckpt_exec_step(x, NULL, &res, &err), GCKPT_XS_ERROR);
        if (!strstr(err.msg, cases[k].expect)) fail_msg("case %zu: \"%s\" lacks \"%s\"", k, err.msg, cases[k].expect);
        gckpt_exec_free(x);
        gckpt_memstat ms;
        be->memstat(be, &ms);
        assert_int_equal(ms.allocated + ms.pinned, 0);
        be->destroy(be);
    }
}

/* Every op computes the size of each buffer it writes from its inputs and requires the
 * buffer to be exactly that (op_sizes.c), and every allocation is exactly as large as the
 * elements it declares: a schedule that allocates any single activation (an op's output,
 * or a checkpoint's device copy) one element larger fails the step, whichever it is.
 * Without these checks the host backend would count the larger allocation and still
 * agree with the planner byte for byte. */
static int oversize_each(const char *fixture, const gckpt_setting *s)
{
    gckpt_model m = fx_model(fixture);
    gckpt_device d = fx_device();
    gckpt_err err = {{0}};
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_exec *probe = gckpt_exec_new(be, &m, &d, s, NULL, &err);
    assert_non_null(probe);
    const gckpt_recipe *r = gckpt_exec_ctx(probe)->recipe;
    int tried = 0;
    for (int t = 0; t < r->nt; t++) {
        if (r->t[t].kind != GCKPT_T_ACT && r->t[t].kind != GCKPT_T_CONST) continue;
        gckpt_exec *x = gckpt_exec_new(be, &m, &d, s, NULL, &err);
        assert_non_null(x);
        gckpt_schedule *ev = (gckpt_schedule *)gckpt_exec_schedule(x);
        int changed = 0;
        for (size_t i = 0; i < ev->n; i++) {
            gckpt_event *e = &ev->ev[i];
            if (e->kind != GCKPT_EV_ALLOC || e->tensor != t || e->grad) continue;
            uint64_t bytes = 0;
            assert_true(gckpt_dtype_storage((gckpt_dtype)e->dtype, ++e->numel, &bytes));
            e->bytes = gckpt_round_up(bytes, d.alloc_round_bytes);
            changed++;
        }
        if (changed) {
            assert_int_equal(gckpt_exec_setup(x, &err), GCKPT_XS_OK);
            gckpt_step_result res;
            gckpt_xstatus rc = gckpt_exec_step(x, NULL, &res, &err);
            if (rc != GCKPT_XS_ERROR) fail_msg("%s: %s one element larger ran", fixture, r->t[t].name);
            if (!strstr(err.msg, "its inputs make") && !strstr(err.msg, "elements take"))
                fail_msg("%s: %s one element larger: \"%s\"", fixture, r->t[t].name, err.msg);
            tried++;
        }
        gckpt_exec_free(x);
    }
    gckpt_exec_free(probe);
    gckpt_memstat ms;
    be->memstat(be, &ms);
    assert_int_equal(ms.allocated + ms.pinned, 0);
    be->destroy(be);
    return tried;
}

static void test_oversized_activation_fails(void **st)
{
    (void)st;
    /* checkpointed and offloaded layers (device copies of their inputs), GQA, eager's
     * masks and scores, gpt2's packed q/k/v, dropout masks */
    gckpt_setting a = {.seq = 16, .micro_batch = 2, .grad_accum = 2, .precision = GCKPT_AMP_BF16,
                       .attention = GCKPT_EAGER, .every_n = 2, .offload = true};
    gckpt_setting b = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_BF16,
                       .attention = GCKPT_SDPA, .every_n = 1};
    int n = oversize_each("tiny-llama", &a) + oversize_each("tiny-qwen3", &b) + oversize_each("tiny-gpt2-dropout", &a);
    printf("one element larger: %d activations, every one refused\n", n);
    assert_true(n > 150);
    /* the MoE block's and the load-balancing loss's tensors (ids, permutations, offsets,
     * pairs, the logits' 0-byte view) */
    int moe = oversize_each("tiny-mixtral-aux", &a);
    printf("one element larger: %d activations of tiny-mixtral-aux, every one refused\n", moe);
    assert_true(moe > 60);
}

/* An allocation larger than its elements (the rounding, not the tensor, grown) is refused
 * by the interpreter before any op runs. */
static void test_allocation_larger_than_elements(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-llama");
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32, .attention = GCKPT_SDPA};
    gckpt_err err = {{0}};
    gckpt_exec *x = gckpt_exec_new(be, &m, &d, &s, NULL, &err);
    assert_non_null(x);
    gckpt_schedule *ev = (gckpt_schedule *)gckpt_exec_schedule(x);
    for (size_t i = 0; i < ev->n; i++)
        if (ev->ev[i].kind == GCKPT_EV_ALLOC) {
            ev->ev[i].bytes += d.alloc_round_bytes;
            break;
        }
    assert_int_equal(gckpt_exec_setup(x, &err), GCKPT_XS_OK);
    gckpt_step_result res;
    assert_int_equal(gckpt_exec_step(x, NULL, &res, &err), GCKPT_XS_ERROR);
    assert_non_null(strstr(err.msg, "which take"));
    gckpt_exec_free(x);
    be->destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),       cmocka_unit_test(test_qwen3),        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_gpt2_dropout), cmocka_unit_test(test_olmo2),  cmocka_unit_test(test_granite),
        cmocka_unit_test(test_gemma), cmocka_unit_test(test_gemma2),
        cmocka_unit_test(test_mixtral), cmocka_unit_test(test_qwen3_moe), cmocka_unit_test(test_olmoe),
        cmocka_unit_test(test_moe_aux),
        cmocka_unit_test(test_kv_heads), cmocka_unit_test(test_amp_fp16),    cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_dropout_active), cmocka_unit_test(test_limit_exact),
        cmocka_unit_test(test_detects_broken_schedule),
        cmocka_unit_test(test_oversized_activation_fails), cmocka_unit_test(test_allocation_larger_than_elements),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    printf("kernel scratch: at most %.0f%% of the host memory guard's bound\n", 100.0 * worst_scratch);
    return rc;
}
