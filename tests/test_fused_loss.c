/* The fused losses (--loss liger|cce; core/fused_loss.c, docs/fused-loss.md) against closed
 * forms written from the libraries' source: Liger's chunk rule, and the bytes the head's
 * forward adds at each fused op (its gradients, temporaries and output), walked from the
 * schedule with an independent accumulator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/eval.h"
#include "gckpt/core/fused_loss.h"
#include "gckpt/planner/plan.h"
#include "gckpt/util/jsonget.h"
#include "gckpt/util/util.h"

#include <stdlib.h>

static gckpt_device dev;

static uint64_t rnd(uint64_t x) { return (x + 511) / 512 * 512; }

/* liger-kernel 0.8.5: inc_factor = cdiv(V, H); chunk_size = min(next_power_of_2(cdiv(BT,
 * inc_factor)), BT), the values worked out by hand */
static void liger_chunks(void **state)
{
    (void)state;
    assert_int_equal(gckpt_liger_chunk_rows(8192, 128256, 4096, 1), 256);   /* inc 32, 8192 / 32 */
    assert_int_equal(gckpt_liger_chunk_rows(32768, 128256, 4096, 1), 1024); /* inc 32 */
    assert_int_equal(gckpt_liger_chunk_rows(100, 50257, 768, 1), 2);        /* inc 66, cdiv 2 */
    assert_int_equal(gckpt_liger_chunk_rows(3000, 151936, 3584, 1), 128);   /* inc 43, cdiv 70 -> 128 */
    assert_int_equal(gckpt_liger_chunk_rows(3, 10, 64, 1), 3);              /* one chunk, never above BT */
    assert_int_equal(gckpt_liger_chunk_rows(16384, 32000, 4096, 1), 2048);  /* the source's comment's example */
    /* gpt_oss's lce_forward: chunk_mem_const 8 (gpt-oss-20b: V 201088, H 2880) */
    assert_int_equal(gckpt_liger_chunk_rows(8192, 201088, 2880, 8), 1024); /* inc cdiv(V, 23040) = 9, cdiv 911 */
    assert_int_equal(gckpt_liger_chunk_rows(8192, 201088, 2880, 1), 128);  /* inc 70, cdiv 118 */
    assert_int_equal(gckpt_liger_chunk_rows(100, 50257, 768, 0), 2);       /* 0 taken as 1 */
}

/* The bytes allocated in the run of allocations that ends at op `name`'s first forward
 * (micro-step 1): what the op makes before its kernel runs. */
static uint64_t made_at(const gckpt_model *m, gckpt_setting s, const char *name)
{
    static gckpt_recipe r;
    gckpt_setting_recipe(m, &s, GCKPT_TARGET_CUDA, &r);
    gckpt_ctx c;
    gckpt_err err;
    if (!gckpt_ctx_init(&c, m, &dev, &r, &s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule ev;
    assert_true(gckpt_schedule_build(&c, &ev));
    uint64_t run = 0, got = UINT64_MAX;
    for (size_t si = 0; si < ev.nseg && got == UINT64_MAX; si++)
        for (size_t i = ev.seg[si].begin; i < ev.seg[si].end; i++) {
            const gckpt_event *e = &ev.ev[i];
            if (e->kind == GCKPT_EV_ALLOC || e->kind == GCKPT_EV_ALLOC_SCRATCH) {
                run += e->bytes;
            } else if (e->kind == GCKPT_EV_FWD && e->op >= 0 && !strcmp(r.op[e->op].name, name)) {
                got = run;
                break;
            } else if (e->kind != GCKPT_EV_ALLOC && e->kind != GCKPT_EV_ALLOC_SCRATCH) {
                run = 0;
            }
        }
    gckpt_schedule_free(&ev);
    if (got == UINT64_MAX) fail_msg("no forward of %s", name);
    return got;
}

static gckpt_setting setting(gckpt_precision p, uint64_t seq, uint64_t mb, gckpt_loss loss)
{
    return (gckpt_setting){.seq = seq, .micro_batch = mb, .grad_accum = 1, .precision = p,
                           .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = 1, .loss = (uint8_t)loss};
}

/* Liger: grad_input (the input's dtype), grad_weight (the weight's: accum_dtype None),
 * loss_1d fp32 [BT], target_mask bool [BT], one logits chunk, the scalar loss; under
 * autocast the chunk in bf16 with the weight's cached bf16 copy and a [chunk, H] cast. */
static void liger_head(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load("llama-3.1-8b", &m, &err)) fail_msg("%s", err.msg);
    const uint64_t V = 128256, H = 4096;
    struct { gckpt_precision p; uint64_t seq, mb, chunk, xs, ps; } cases[] = {
        {GCKPT_BF16, 8192, 1, 256, 2, 2}, {GCKPT_BF16, 32768, 1, 1024, 2, 2}, {GCKPT_BF16, 2048, 2, 128, 2, 2},
        {GCKPT_FP32, 4096, 1, 128, 4, 4}, {GCKPT_AMP_BF16, 8192, 1, 256, 4, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint64_t T = cases[i].seq * cases[i].mb, c = cases[i].chunk;
        uint64_t want = rnd(T * H * cases[i].xs) + rnd(V * H * cases[i].ps) + rnd(4 * T) + rnd(T) + 512;
        /* amp: the weight's cached cast and its transposed view's cast (2 chunks or more) */
        want += cases[i].p == GCKPT_AMP_BF16 ? 2 * rnd(V * H * 2) + rnd(c * V * 2) + rnd(c * H * 2)
                                             : rnd(c * V * cases[i].xs);
        uint64_t got = made_at(&m, setting(cases[i].p, cases[i].seq, cases[i].mb, GCKPT_LOSS_LIGER), "liger_fused_linear_ce");
        if (got != want) fail_msg("case %zu: %llu bytes, closed form %llu", i, (unsigned long long)got, (unsigned long long)want);
    }
}

/* gpt_oss: the logits chunk at chunk_mem_const 8 (1024 rows of 201088 at 8192 tokens, not
 * the 128 of the default) */
static void liger_head_gpt_oss(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load("gpt-oss-20b", &m, &err)) fail_msg("%s", err.msg);
    const uint64_t V = 201088, H = 2880, T = 8192, c = 1024;
    assert_int_equal(m.vocab, V);
    assert_int_equal(m.hidden, H);
    uint64_t want = rnd(T * H * 2) + rnd(V * H * 2) + rnd(4 * T) + rnd(T) + 512 + rnd(c * V * 2);
    assert_int_equal(made_at(&m, setting(GCKPT_BF16, T, 1, GCKPT_LOSS_LIGER), "liger_fused_linear_ce"), want);
}

/* CCE: the lse pass makes lse fp32 [n] and logit_avg fp32 [V]; its temporaries are the excess
 * of the forward's peak up to the kernel over what is held there (valids int64 [n], lse,
 * logit_avg): the valid rows' int64 and int32 pairs (24 n bytes, before the others exist)
 * or the locks (cdiv(n, 128) uint32), whichever is larger. The loss makes neg_dot fp32 [n]
 * and the scalar. */
static void cce_head(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load("llama-3.1-8b", &m, &err)) fail_msg("%s", err.msg);
    const uint64_t V = 128256;
    for (uint64_t seq = 8192; seq <= 32768; seq *= 4) {
        uint64_t T = seq;
        uint64_t held = rnd(8 * T) + rnd(4 * T) + rnd(4 * V), pairs = rnd(16 * T) + rnd(8 * T);
        uint64_t locks = rnd(4 * ((T + 127) / 128)), ws = pairs > held + locks ? pairs - held : locks;
        assert_int_equal(made_at(&m, setting(GCKPT_BF16, seq, 1, GCKPT_LOSS_CCE), "cce_lse"),
                         ws + rnd(4 * T) + rnd(4 * V));
        assert_int_equal(made_at(&m, setting(GCKPT_BF16, seq, 1, GCKPT_LOSS_CCE), "cce_loss"), rnd(4 * T) + 512);
    }
}

static uint64_t num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("fused-loss re-run: no number '%s'", k);
    return (uint64_t)v->valuedouble;
}

/* The CPU re-run of Liger's algorithm at its chunking under the storage tracker
 * (tools/hf_probe/fused_loss_rerun.py, tests/data/fused-loss/liger-rerun.json): the buffers
 * made before the first chunk are the op's gradients and forward temporaries as planned
 * (unrounded), the forward keeps the gradients and the scalar loss, and the .grad handed on
 * is the kept buffer. */
static void liger_cpu_rerun(void **state)
{
    (void)state;
    gckpt_err e;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/fused-loss/liger-rerun.json", 1 << 20, &e);
    cJSON *j = text ? gckpt_json_parse("liger-rerun.json", text, &e) : NULL;
    if (!j) fail_msg("%s", e.msg);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases"), *c;
    int n = 0;
    cJSON_ArrayForEach(c, cases) {
        uint64_t BT = num(c, "bt"), H = num(c, "hidden"), V = num(c, "vocab");
        const char *dts = cJSON_GetObjectItemCaseSensitive(c, "dtype")->valuestring;
        bool bf16 = !strcmp(dts, "bf16"), amp = !strcmp(dts, "amp-bf16");
        uint8_t dt = bf16 ? GCKPT_DT_BF16 : GCKPT_DT_F32;
        uint64_t xs = bf16 ? 2 : 4, ws;
        assert_int_equal(gckpt_liger_chunk_rows(BT, V, H, 1), num(c, "chunk_rows"));
        gckpt_op op = {.prim = GCKPT_P_FUSED_LCE, .fused_loss = GCKPT_LOSS_LIGER, .width = V, .in_f = H};
        assert_true(gckpt_fused_loss_ws(&op, false, BT, dt, GCKPT_DT_BF16, amp, 1, &ws));
        uint64_t grads = BT * H * xs + V * H * xs;
        /* made before the loop: the gradients, loss_1d and target_mask (pure: and the logits
         * storage); amp: the peak of the logits GEMM is the planned workspace */
        uint64_t chunk = num(c, "chunk_rows");
        assert_int_equal(grads + 5 * BT + (amp ? 0 : chunk * V * xs), num(c, "made_before_loop"));
        if (amp) assert_int_equal(grads + ws, num(c, "live_at_logits_gemm"));
        else assert_int_equal(grads + ws, num(c, "made_before_loop"));
        if (amp) assert_int_equal(num(c, "freed_at_autocast_exit"), V * H * 2); /* the cached cast */
        assert_int_equal(grads + 4, num(c, "kept_after_forward"));
        assert_int_equal(grads + 4, num(c, "grads_after_backward"));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "grad_is_kept_buffer")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "matches_eager_cross_entropy")));
        assert_true(gckpt_fused_loss_ws(&op, true, BT, dt, GCKPT_DT_BF16, amp, 1, &ws));
        assert_int_equal(ws, 0); /* the backward scales the kept gradients in place */
        n++;
    }
    assert_true(n >= 7);
    cJSON_Delete(j);
    free(text);
}

/* cut-cross-entropy's own Python code on the CPU under the storage tracker, its Triton kernels
 * stood in for (tools/hf_probe/cce_rerun.py, tests/data/fused-loss/cce-rerun.json), n valid
 * rows: the planned bytes at each kernel (valids, lse, logit_avg and the op's temporaries;
 * de, dc and the backward's temporaries) equal the measured ones, unrounded. */
static void cce_cpu_rerun(void **state)
{
    (void)state;
    gckpt_err e;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/fused-loss/cce-rerun.json", 1 << 20, &e);
    cJSON *j = text ? gckpt_json_parse("cce-rerun.json", text, &e) : NULL;
    if (!j) fail_msg("%s", e.msg);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases"), *c;
    int k = 0;
    cJSON_ArrayForEach(c, cases) {
        uint64_t B = num(c, "batch"), S = num(c, "seq"), H = num(c, "hidden"), V = num(c, "vocab");
        uint64_t n = num(c, "valid_rows"), lse_ws, loss_ws, bws;
        assert_int_equal(n, B * (S - 1));
        gckpt_op lse = {.prim = GCKPT_P_CCE_LSE, .fused_loss = GCKPT_LOSS_CCE, .width = V, .in_f = H};
        gckpt_op loss = {.prim = GCKPT_P_FUSED_LCE, .fused_loss = GCKPT_LOSS_CCE, .width = V, .in_f = H};
        assert_true(gckpt_fused_loss_ws(&lse, false, n, GCKPT_DT_BF16, GCKPT_DT_BF16, false, 1, &lse_ws));
        assert_true(gckpt_fused_loss_ws(&loss, false, n, GCKPT_DT_BF16, GCKPT_DT_BF16, false, 1, &loss_ws));
        assert_true(gckpt_fused_loss_ws(&loss, true, n, GCKPT_DT_BF16, GCKPT_DT_BF16, false, 1, &bws));
        uint64_t held = 8 * n + 4 * n + 4 * V;  /* valids, lse, logit_avg */
        uint64_t kept = held + 4;               /* and the scalar loss */
        uint64_t grads = B * S * H * 2 + V * H * 2; /* de = zeros_like(e), dc = zeros_like(c, e.dtype) */
        if (held + lse_ws != num(c, "peak_before_lse") || held + loss_ws != num(c, "live_at_dot") ||
            kept != num(c, "kept_after_forward") ||
            /* + the scalars loss / 3, its seed gradient and the loss's gradient */
            kept + 12 + grads + bws != num(c, "live_at_backward_kernel") ||
            num(c, "peak_before_backward_kernel") != num(c, "live_at_backward_kernel"))
            fail_msg("case %d: planned %llu %llu %llu, measured %llu %llu %llu", k,
                     (unsigned long long)(held + lse_ws), (unsigned long long)(held + loss_ws),
                     (unsigned long long)(kept + 12 + grads + bws), (unsigned long long)num(c, "peak_before_lse"),
                     (unsigned long long)num(c, "live_at_dot"), (unsigned long long)num(c, "live_at_backward_kernel"));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "grad_is_de_dc")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "matches_eager_cross_entropy")));
        k++;
    }
    assert_true(k >= 4);
    cJSON_Delete(j);
    free(text);
}

/* ---- Liger's SwiGLU (tests/data/fused-loss/liger-swiglu.json, FINDINGS R-LOSS-5) ---------- */

/* The [T, I] buffers of a one-layer llama's MLP in micro-step 1's schedule (numel b*s*I, the
 * gate and up outputs' own forward buffers left out): live at down_proj's forward, the most
 * live from the backward of the product (eager's mul, Liger's kernel) to gate_proj's, and
 * whether the product's backward wrote the input gradients into those two buffers. */
typedef struct {
    uint64_t kept, bwd_peak;
    bool grads_in_inputs;
    int gu_freed; /* frees of the gate and up outputs' buffers after the product's backward */
} mlp_reading;

static bool named(const gckpt_recipe *r, int op, const char *suffix)
{
    size_t n = strlen(r->op[op].name), k = strlen(suffix);
    return n >= k && !strcmp(r->op[op].name + n - k, suffix);
}

static mlp_reading mlp_bytes(uint64_t B, uint64_t S, uint64_t I, gckpt_loss loss, uint32_t every_n)
{
    char cfg[400];
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"hidden_size\": 64, "
             "\"num_attention_heads\": 4, \"intermediate_size\": %llu, \"vocab_size\": 50}", (unsigned long long)I);
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_parse("llama.json", cfg, &m, &err)) fail_msg("%s", err.msg);
    gckpt_setting s = setting(GCKPT_BF16, S, B, loss);
    s.every_n = every_n; /* 0: kept by the forward; 1: by the recompute in the backward */
    static gckpt_recipe r;
    gckpt_setting_recipe(&m, &s, GCKPT_TARGET_CUDA, &r);
    gckpt_ctx c;
    if (!gckpt_ctx_init(&c, &m, &dev, &r, &s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule ev;
    assert_true(gckpt_schedule_build(&c, &ev));
    int gate = -1, up = -1, prod = -1, down = -1;
    for (int i = 0; i < r.nop; i++) {
        if (named(&r, i, "mlp.gate_proj")) gate = i;
        if (named(&r, i, "mlp.up_proj")) up = i;
        if (named(&r, i, "mlp.down_proj")) down = i;
        if (named(&r, i, "mlp.mul") || named(&r, i, "mlp.liger_swiglu")) prod = i;
    }
    if (gate < 0 || up < 0 || prod < 0 || down < 0) fail_msg("no MLP ops %d %d %d %d", gate, up, prod, down);
    enum { MAXB = 64 };
    uint32_t id[MAXB], gu[2] = {GCKPT_NOINST, GCKPT_NOINST};
    uint64_t by[MAXB], live = 0;
    int n = 0, stage = 0; /* 1: in the backward window */
    mlp_reading out = {0};
    for (size_t si = 0; si < ev.nseg; si++)
        for (size_t i = ev.seg[si].begin; i < ev.seg[si].end; i++) {
            const gckpt_event *e = &ev.ev[i];
            if (e->kind == GCKPT_EV_ALLOC && e->numel == B * S * I) {
                bool mine = !e->grad && (e->tensor == r.op[gate].out[0] || e->tensor == r.op[up].out[0]);
                if (mine) gu[e->tensor == r.op[up].out[0]] = e->inst;
                else if (n < MAXB) {
                    id[n] = e->inst;
                    by[n++] = e->bytes;
                    live += e->bytes;
                }
            } else if (e->kind == GCKPT_EV_FREE) {
                out.gu_freed += stage > 0 && (e->inst == gu[0] || e->inst == gu[1]);
                for (int k = 0; k < n; k++)
                    if (id[k] == e->inst) {
                        live -= by[k];
                        id[k] = GCKPT_NOINST;
                    }
            } else if (e->kind == (every_n ? GCKPT_EV_RECOMPUTE : GCKPT_EV_FWD) && e->op == down && stage == 0) {
                out.kept = live;
            } else if (e->kind == GCKPT_EV_BWD && e->op == prod) {
                stage = 1;
                out.grads_in_inputs = e->arg.bwd.grad_in[0] == gu[0] && e->arg.bwd.grad_in[1] == gu[1];
            } else if (e->kind == GCKPT_EV_BWD && e->op == gate) {
                stage = 2;
            }
            if (stage == 1 && live > out.bwd_peak) out.bwd_peak = live;
        }
    gckpt_schedule_free(&ev);
    return out;
}

/* The planned [T, I] bytes of the MLP under --loss liger (LigerSiLUMulFunction) and hf (silu
 * and mul) equal the CPU re-run's readings, each [T, I] tensor rounded as the device rounds:
 * above the gate and up outputs the forward keeps Liger's output (eager: and silu's); the
 * backward's peak up to both input gradients is the measured one less the output, which the
 * probe holds in a variable and the step frees with down_proj's backward; Liger's input
 * gradients are the gate and up outputs' storage. The layer checkpointed or not (read at
 * the recompute). */
static void liger_swiglu_cpu_rerun(void **state)
{
    (void)state;
    gckpt_err e;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/fused-loss/liger-swiglu.json", 1 << 20, &e);
    cJSON *j = text ? gckpt_json_parse("liger-swiglu.json", text, &e) : NULL;
    if (!j) fail_msg("%s", e.msg);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases"), *c;
    int k = 0;
    cJSON_ArrayForEach(c, cases) {
        uint64_t B = num(c, "batch"), S = num(c, "seq"), I = num(c, "intermediate"), T = num(c, "bf16_tensor_bytes");
        assert_int_equal(T, B * S * I * 2);
        for (int l = 0; l < 4; l++) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, l & 1 ? "liger" : "eager");
            uint64_t kept = num(m, "kept_with_output"), peak = num(m, "backward_peak_with_dc");
            assert_int_equal(kept % T, 0);
            assert_int_equal(peak % T, 0);
            mlp_reading p = mlp_bytes(B, S, I, l & 1 ? GCKPT_LOSS_LIGER : GCKPT_LOSS_HF, (uint32_t)(l >> 1));
            assert_int_equal(p.gu_freed, 2); /* as gradients handed on, or as saved inputs: once each */
            if (p.kept != kept / T * rnd(T) || p.bwd_peak != (peak / T - 1) * rnd(T) ||
                p.grads_in_inputs != cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "input_grads_in_input_storage")))
                fail_msg("case %d %s every_n %d: planned kept %llu, backward %llu, in place %d; measured %llu tensors, %llu "
                         "(less the output), %d", k, l & 1 ? "liger" : "eager", l >> 1, (unsigned long long)(p.kept / rnd(T)),
                         (unsigned long long)(p.bwd_peak / rnd(T)), p.grads_in_inputs,
                         (unsigned long long)(kept / T), (unsigned long long)(peak / T - 1),
                         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "input_grads_in_input_storage")));
        }
        k++;
    }
    assert_true(k >= 2);
    cJSON_Delete(j);
    free(text);
}

/* ---- Liger's RMSNorm and RoPE backward (tests/data/fused-loss/liger-norm-rope.json, FINDINGS
 * R-LOSS-6, R-LOSS-7) ----------------------------------------------------------------------- */

/* In micro-step 1's schedule of a one-layer llama under --loss liger, for every BWD event of an
 * op whose name ends in `suffix`: whether its input 0's gradient is its output's gradient
 * buffer (-1: no such event). */
static int bwd_in_gout_of(const char *model_type, const char *suffix, bool exact, gckpt_attention attn)
{
    gckpt_model m;
    gckpt_err err;
    char cfg[300];
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"%s\", \"num_hidden_layers\": 1, \"hidden_size\": 64, "
             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 176, "
             "\"vocab_size\": 50}", model_type);
    if (!gckpt_model_parse("config.json", cfg, &m, &err)) fail_msg("%s", err.msg);
    gckpt_setting s = setting(GCKPT_BF16, 48, 2, GCKPT_LOSS_LIGER);
    s.attention = attn;
    static gckpt_recipe r;
    gckpt_setting_recipe(&m, &s, GCKPT_TARGET_CUDA, &r);
    gckpt_ctx c;
    if (!gckpt_ctx_init(&c, &m, &dev, &r, &s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule ev;
    assert_true(gckpt_schedule_build(&c, &ev));
    int found = -1;
    for (size_t si = 0; si < ev.nseg; si++)
        for (size_t i = ev.seg[si].begin; i < ev.seg[si].end; i++) {
            const gckpt_event *e = &ev.ev[i];
            if (e->kind != GCKPT_EV_BWD || !(exact ? !strcmp(r.op[e->op].name, suffix) : named(&r, e->op, suffix)))
                continue;
            int same = e->arg.bwd.grad_in[0] == e->arg.bwd.grad_out;
            if (found >= 0 && found != same) fail_msg("%s: both ways", suffix);
            found = same;
        }
    gckpt_schedule_free(&ev);
    return found;
}

static int bwd_in_gout(const char *suffix, gckpt_attention attn)
{
    return bwd_in_gout_of("llama", suffix, false, attn);
}

/* The planned backward of Liger's RMSNorm writes the input gradient into the output gradient's
 * buffer, as the CPU check of Liger's code found for in_place=True (its default there); RoPE's
 * input gradients are new buffers (the .contiguous() copies the check found for k, and for q
 * but under a masked SDPA), under SDPA and eager attention. */
static void liger_norm_rope_in_place(void **state)
{
    (void)state;
    gckpt_err e;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/fused-loss/liger-norm-rope.json", 1 << 20, &e);
    cJSON *j = text ? gckpt_json_parse("liger-norm-rope.json", text, &e) : NULL;
    if (!j) fail_msg("%s", e.msg);
    const cJSON *rms = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "rms_norm"), "bfloat16");
    const cJSON *rope = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "rope"), "bfloat16");
    bool rms_in = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rms, "in_place_true_dx_in_dy_storage"));
    for (int a = 0; a < GCKPT_NATTN; a++) {
        const cJSON *ra = cJSON_GetObjectItemCaseSensitive(rope, a == GCKPT_SDPA ? "sdpa" : "eager");
        assert_non_null(ra);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ra, "q_rotated_in_its_storage")));
        assert_int_equal(bwd_in_gout("input_layernorm.liger_rms_norm", (gckpt_attention)a), rms_in);
        assert_int_equal(bwd_in_gout("self_attn.rope_q", (gckpt_attention)a),
                         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ra, "dq_in_incoming_storage")));
        assert_int_equal(bwd_in_gout("self_attn.rope_k", (gckpt_attention)a),
                         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ra, "dk_in_incoming_storage")));
    }
    cJSON_Delete(j);
    free(text);
}

/* The RMSNorm variants as the Trainer's instance patch configures them: in_place=False (gemma2's
 * and gemma3_text's norms, olmo2's post norms) a new input-gradient buffer, in_place=True (gemma's, olmo2's final
 * norm) dY's, as liger-norm-rope.json found for each; olmo2's q_norm / k_norm are not Liger's. */
static void liger_norm_variants_in_place(void **state)
{
    (void)state;
    gckpt_err e;
    char *text = gckpt_read_file(GCKPT_TEST_DATA "/fused-loss/liger-norm-rope.json", 1 << 20, &e);
    cJSON *j = text ? gckpt_json_parse("liger-norm-rope.json", text, &e) : NULL;
    if (!j) fail_msg("%s", e.msg);
    const cJSON *rms = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "rms_norm"), "bfloat16");
    int yes = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rms, "in_place_true_dx_in_dy_storage"));
    int no = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rms, "in_place_false_dx_in_dy_storage"));
    assert_int_not_equal(yes, no);
    assert_int_equal(bwd_in_gout_of("olmo2", "post_attention_layernorm.liger_rms_norm", false, GCKPT_SDPA), no);
    /* (op names are cut to 39 characters) */
    assert_int_equal(bwd_in_gout_of("olmo2", "post_feedforward_layernorm.liger_rms_no", true, GCKPT_SDPA), no);
    assert_int_equal(bwd_in_gout_of("olmo2", "norm.liger_rms_norm", true, GCKPT_SDPA), yes);
    assert_int_equal(bwd_in_gout_of("olmo2", "q_norm.liger_rms_norm", false, GCKPT_SDPA), -1);
    assert_int_equal(bwd_in_gout_of("gemma2", "input_layernorm.liger_rms_norm", false, GCKPT_EAGER), no);
    assert_int_equal(bwd_in_gout_of("gemma2", "norm.liger_rms_norm", true, GCKPT_EAGER), no);
    assert_int_equal(bwd_in_gout_of("gemma", "input_layernorm.liger_rms_norm", false, GCKPT_SDPA), yes);
    assert_int_equal(bwd_in_gout_of("gemma", "norm.liger_rms_norm", true, GCKPT_SDPA), yes);
    assert_int_equal(bwd_in_gout_of("gemma3_text", "self_attn.q_norm.liger_rms_norm", true, GCKPT_SDPA), no);
    cJSON_Delete(j);
    free(text);
}

/* Where a fused loss is not planned: one sentence naming why. */
static void refusals(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    const char *why;
    if (!gckpt_model_load("gpt2", &m, &err)) fail_msg("%s", err.msg);
    assert_false(gckpt_fused_loss_supported(&m, GCKPT_BF16, GCKPT_LOSS_LIGER, &why));
    assert_non_null(strstr(why, "apply_liger_kernel_to_"));
    assert_true(gckpt_fused_loss_supported(&m, GCKPT_BF16, GCKPT_LOSS_CCE, &why));
    if (!gckpt_model_load("llama-3.1-8b", &m, &err)) fail_msg("%s", err.msg);
    assert_false(gckpt_fused_loss_supported(&m, GCKPT_AMP_BF16, GCKPT_LOSS_CCE, &why));
    assert_non_null(strstr(why, "bf16"));
    assert_true(gckpt_fused_loss_supported(&m, GCKPT_AMP_BF16, GCKPT_LOSS_LIGER, &why));
    /* liger-kernel 0.8.5's MODEL_TYPE_TO_APPLY_LIGER_FN has deepseek_v3 (its lce_forward calls
     * LigerForCausalLMLoss on lm_head.weight as llama's does), not olmoe */
    if (!gckpt_model_load(GCKPT_TEST_DATA "/configs/deepseek-v3.json", &m, &err)) fail_msg("%s", err.msg);
    assert_true(gckpt_fused_loss_supported(&m, GCKPT_BF16, GCKPT_LOSS_LIGER, &why));
    if (!gckpt_model_load("olmoe-1b-7b", &m, &err)) fail_msg("%s", err.msg);
    assert_false(gckpt_fused_loss_supported(&m, GCKPT_BF16, GCKPT_LOSS_LIGER, &why));
    assert_non_null(strstr(why, "no apply_liger_kernel_to_ function"));
    /* apply_liger_kernel_to_granite: fused_linear_cross_entropy=False by default, and
     * NotImplementedError when set; the reason names it, not the logits scaling */
    assert_true(gckpt_model_parse("granite.json", "{\"model_type\": \"granite\", \"num_hidden_layers\": 2, "
                                  "\"hidden_size\": 64, \"num_attention_heads\": 4, \"intermediate_size\": 90, "
                                  "\"vocab_size\": 50}", &m, &err));
    assert_false(gckpt_fused_loss_supported(&m, GCKPT_BF16, GCKPT_LOSS_LIGER, &why));
    assert_non_null(strstr(why, "NotImplementedError"));
    assert_false(gckpt_fused_loss_supported(&m, GCKPT_BF16, GCKPT_LOSS_CCE, &why));
    assert_non_null(strstr(why, "logits_scaling"));
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load("h100-sxm-80gb", &dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(liger_chunks), cmocka_unit_test(liger_head), cmocka_unit_test(liger_head_gpt_oss), cmocka_unit_test(cce_head),
        cmocka_unit_test(liger_cpu_rerun), cmocka_unit_test(cce_cpu_rerun),
        cmocka_unit_test(liger_swiglu_cpu_rerun), cmocka_unit_test(liger_norm_rope_in_place),
        cmocka_unit_test(liger_norm_variants_in_place), cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
