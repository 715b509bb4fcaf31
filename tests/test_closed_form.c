/* Planner numbers against closed forms and published measurements. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/eval.h"
#include "gckpt/planner/plan.h"

static gckpt_device dev;

static void load(const char *name, gckpt_model *m)
{
    gckpt_err err;
    if (!gckpt_model_load(name, m, &err)) fail_msg("%s", err.msg);
}

typedef struct {
    int64_t at_bwd[GCKPT_NCOMP]; /* components when micro-step 1's backward starts */
    int64_t at_fwd2[GCKPT_NCOMP]; /* components at micro-step 2's first forward op */
    bool seen_bwd, seen_fwd2;
    gckpt_result res;
} walked;

/* Walk the schedule with an independent accumulator (not gckpt_walk). */
static void walk(const gckpt_model *m, gckpt_setting s, walked *w)
{
    static gckpt_recipe r;
    gckpt_recipe_build(m, s.precision, s.attention, &r);
    gckpt_ctx c;
    gckpt_err err;
    if (!gckpt_ctx_init(&c, m, &dev, &r, &s, &err)) fail_msg("%s", err.msg);
    gckpt_schedule ev;
    assert_true(gckpt_schedule_build(&c, &ev));
    memset(w, 0, sizeof *w);
    int64_t comp[GCKPT_NCOMP];
    gckpt_persistent(&c, comp);
    for (size_t si = 0; si < ev.nseg; si++) {
        const gckpt_sched_seg *g = &ev.seg[si];
        for (size_t i = g->begin; i < g->end; i++) {
            const gckpt_event *e = &ev.ev[i];
            if (!w->seen_bwd && g->seg.micro == GCKPT_MICRO_FIRST && gckpt_seg_phase(&g->seg) == GCKPT_PH_BACKWARD) {
                memcpy(w->at_bwd, comp, sizeof comp);
                w->seen_bwd = true;
            }
            if (!w->seen_fwd2 && g->seg.micro == GCKPT_MICRO_LATER && e->kind == GCKPT_EV_FWD) {
                memcpy(w->at_fwd2, comp, sizeof comp);
                w->seen_fwd2 = true;
            }
            switch (e->kind) {
            case GCKPT_EV_ALLOC: case GCKPT_EV_ALLOC_SCRATCH: case GCKPT_EV_OPT_TEMP_ALLOC:
                comp[e->comp] += (int64_t)e->bytes;
                break;
            case GCKPT_EV_FREE: case GCKPT_EV_OPT_TEMP_FREE: case GCKPT_EV_ZERO_GRAD:
                comp[e->comp] -= (int64_t)e->bytes;
                break;
            case GCKPT_EV_TO_CHECKPOINT: case GCKPT_EV_BECOME_GRAD:
                comp[e->comp] -= (int64_t)e->bytes;
                comp[e->kind == GCKPT_EV_BECOME_GRAD ? GCKPT_C_GRADS : GCKPT_C_CHECKPOINTS] += (int64_t)e->bytes;
                break;
            default: break;
            }
        }
    }
    gckpt_walk(&c, &ev, &w->res);
    gckpt_schedule_free(&ev);
}

static void checkpointed_layer_sets(void **state)
{
    (void)state;
    uint64_t out[200];
    for (uint64_t L = 1; L <= 130; L += 3) {
        for (uint32_t n = 1; n <= L + 2; n++) {
            size_t k = gckpt_checkpointed_layers(n, L, out, 200);
            assert_int_equal(k, (L + n - 1) / n);
            assert_int_equal(k, gckpt_checkpointed_count(n, L));
            size_t j = 0;
            for (uint64_t i = 0; i < L; i++)
                if (i % n == 0) assert_int_equal(out[j++], i);
            assert_int_equal(j, k);
        }
        assert_int_equal(gckpt_checkpointed_layers(0, L, out, 200), 0);
    }
    /* the guide's example: every_n_layers=2 over 6 layers checkpoints 1, 3, 5 (1-based) */
    assert_int_equal(gckpt_checkpointed_layers(2, 6, out, 200), 3);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 2);
    assert_int_equal(out[2], 4);
}

/* checkpointed layers x b x s x h x bytes: on the device without offload, in pinned
 * host memory (and not on the device) with offload */
static void checkpoint_bytes(void **state)
{
    (void)state;
    static const char *models[] = {"llama-3.2-1b", "qwen2.5-0.5b", "gpt2", "mistral-7b-v0.3", "qwen3-8b"};
    static const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (size_t mi = 0; mi < 5; mi++) {
        gckpt_model m;
        load(models[mi], &m);
        for (size_t pi = 0; pi < 3; pi++) {
            for (uint32_t n = 1; n <= 5; n += 2) {
                for (int off = 0; off < 2; off++) {
                    gckpt_setting s = {.seq = 256, .micro_batch = 3, .grad_accum = 1, .precision = precs[pi],
                                       .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = n,
                                       .offload = off};
                    walked w;
                    walk(&m, s, &w);
                    uint64_t D = precs[pi] == GCKPT_BF16 ? 2 : 4;
                    uint64_t want = gckpt_checkpointed_count(n, m.layers) * 3 * 256 * m.hidden * D;
                    assert_true(w.seen_bwd);
                    if (off) {
                        assert_int_equal(w.at_bwd[GCKPT_C_CHECKPOINTS], 0);
                        assert_int_equal(w.res.host_pinned_bytes, want);
                    } else {
                        assert_int_equal(w.at_bwd[GCKPT_C_CHECKPOINTS], want);
                        assert_int_equal(w.res.host_pinned_bytes, 0);
                    }
                }
            }
        }
    }
}

/* HF PR #48444 (Qwen3-style, bf16): memory resident after forward with checkpointing,
 * without vs with offload: 194.1 vs 66.1 MB, 644.2 vs 132.2 MB, 4112.4 vs 528.4 MB. The
 * freed amount is layers x tokens x hidden x 2 bytes: 128.0, 512.0 and 3584.0 MiB. */
static void pr48444_offload_frees(void **state)
{
    (void)state;
    static const struct { uint64_t L, h, tokens; double mib; } cases[] = {
        {8, 1024, 8192, 194.1 - 66.1}, {16, 1024, 16384, 644.2 - 132.2}, {28, 2048, 32768, 4112.4 - 528.4}};
    for (size_t i = 0; i < 3; i++) {
        char cfg[512];
        snprintf(cfg, sizeof cfg,
                 "{\"model_type\":\"qwen3\",\"num_hidden_layers\":%llu,\"hidden_size\":%llu,"
                 "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"head_dim\":128,"
                 "\"intermediate_size\":3072,\"vocab_size\":151936,\"tie_word_embeddings\":true}",
                 (unsigned long long)cases[i].L, (unsigned long long)cases[i].h);
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_parse("pr48444.json", cfg, &m, &err)) fail_msg("%s", err.msg);
        gckpt_setting s = {.seq = cases[i].tokens, .micro_batch = 1, .grad_accum = 1,
                           .precision = GCKPT_BF16, .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA,
                           .every_n = 1};
        walked plain, off;
        walk(&m, s, &plain);
        s.offload = true;
        walk(&m, s, &off);
        uint64_t freed = plain.res.after_forward_bytes - off.res.after_forward_bytes;
        assert_int_equal(freed, cases[i].L * cases[i].tokens * cases[i].h * 2);
        double mib = (double)freed / 1048576.0;
        if (mib < cases[i].mib - 0.05 || mib > cases[i].mib + 0.05)
            fail_msg("case %zu: %.1f MiB freed, PR measured %.1f", i, mib, cases[i].mib);
        assert_int_equal(off.res.host_pinned_bytes, freed);
    }
}

/* With grad_accum > 1 the later micro-steps run with every gradient allocated. */
static void accumulation_steady_state(void **state)
{
    (void)state;
    gckpt_model m;
    load("llama-3.2-1b", &m);
    for (uint32_t n = 0; n <= 2; n++) {
        gckpt_setting s = {.seq = 512, .micro_batch = 2, .grad_accum = 4, .precision = GCKPT_AMP_BF16,
                           .optimizer = GCKPT_ADAMW, .attention = GCKPT_SDPA, .every_n = n};
        static gckpt_recipe r;
        gckpt_recipe_build(&m, s.precision, s.attention, &r);
        gckpt_ctx c;
        gckpt_err err;
        assert_true(gckpt_ctx_init(&c, &m, &dev, &r, &s, &err));
        walked w4, w1;
        walk(&m, s, &w4);
        assert_true(w4.seen_fwd2);
        assert_int_equal(w4.at_fwd2[GCKPT_C_GRADS], c.grads);
        assert_int_equal(w4.at_bwd[GCKPT_C_GRADS], 0);
        s.grad_accum = 1;
        walk(&m, s, &w1);
        assert_false(w1.seen_fwd2);
        assert_true(w4.res.peak_bytes >= w1.res.peak_bytes);
        /* fp32 grads of amp: 4 bytes per parameter */
        assert_int_equal(c.grads, gckpt_param_count(&m) * 4);
    }
}

static void persistent_state(void **state)
{
    (void)state;
    gckpt_model m;
    load("llama-3.1-8b", &m);
    uint64_t P = gckpt_param_count(&m);
    static const struct { gckpt_precision p; gckpt_optimizer o; uint64_t w, g, st, tmp; } cases[] = {
        {GCKPT_AMP_BF16, GCKPT_ADAMW, 4, 4, 8, 0},
        {GCKPT_AMP_BF16, GCKPT_ADAMW_FOREACH, 4, 4, 8, 4},
        {GCKPT_BF16, GCKPT_ADAMW, 2, 2, 4, 0},
        {GCKPT_FP32, GCKPT_SGD, 4, 4, 4, 0},
    };
    for (size_t i = 0; i < 4; i++) {
        static gckpt_recipe r;
        gckpt_recipe_build(&m, cases[i].p, GCKPT_SDPA, &r);
        gckpt_setting s = {.seq = 128, .micro_batch = 1, .grad_accum = 1, .precision = cases[i].p,
                           .optimizer = cases[i].o, .attention = GCKPT_SDPA};
        gckpt_ctx c;
        gckpt_err err;
        assert_true(gckpt_ctx_init(&c, &m, &dev, &r, &s, &err));
        /* every Llama-3.1-8B tensor is a multiple of 512 bytes: no rounding */
        assert_int_equal(c.weights, P * cases[i].w);
        assert_int_equal(c.grads, P * cases[i].g);
        assert_int_equal(c.opt_states, P * cases[i].st);
        assert_int_equal(c.opt_temp, P * cases[i].tmp);
    }
}

/* peak = sum of the breakdown; checkpointing and offload never raise the after-forward
 * memory; recompute and offload copies never make a step faster */
static void invariants(void **state)
{
    (void)state;
    static const char *models[] = {"gpt2", "llama-3.2-1b", "qwen3-8b"};
    for (size_t mi = 0; mi < 3; mi++) {
        for (int prec = 0; prec < 3; prec++) {
            for (int attn = 0; attn < 2; attn++) {
                gckpt_plan_request q = {.seq = 1024, .micro_batches = {1, 2}, .n_micro = 2, .grad_accum = 2,
                                        .precision = (gckpt_precision)prec, .optimizer = GCKPT_ADAMW,
                                        .attention = (gckpt_attention)attn, .offload = GCKPT_OFFLOAD_BOTH};
                snprintf(q.model_ref, sizeof q.model_ref, "%s", models[mi]);
                snprintf(q.gpu_ref, sizeof q.gpu_ref, "h100-sxm-80gb");
                gckpt_plan p;
                gckpt_err err;
                if (!gckpt_plan_run(&q, &p, &err)) fail_msg("%s", err.msg);
                const gckpt_entry *off_entry[GCKPT_MAX_MB] = {0};
                for (size_t i = 0; i < p.n; i++) {
                    const gckpt_entry *e = &p.entries[i];
                    int64_t sum = 0;
                    for (int k = 0; k < GCKPT_NCOMP; k++) {
                        assert_true(e->r.breakdown[k] >= 0);
                        sum += e->r.breakdown[k];
                    }
                    assert_int_equal((uint64_t)sum, e->r.peak_bytes);
                    assert_true(e->r.device_peak_bytes >= e->r.peak_bytes);
                    int mb = e->micro_batch == 1 ? 0 : 1;
                    if (e->every_n == 0) off_entry[mb] = e;
                }
                for (size_t i = 0; i < p.n; i++) {
                    const gckpt_entry *e = &p.entries[i];
                    const gckpt_entry *o = off_entry[e->micro_batch == 1 ? 0 : 1];
                    if (!e->every_n) continue;
                    assert_true(e->r.after_forward_bytes <= o->r.after_forward_bytes);
                    assert_true(e->r.step_s >= o->r.step_s);
                    assert_true(e->r.recompute_s > 0);
                    if (e->offload) {
                        const gckpt_entry *same = &p.entries[i - 1]; /* the non-offload twin */
                        assert_int_equal(same->every_n, e->every_n);
                        assert_false(same->offload);
                        assert_true(e->r.after_forward_bytes <= same->r.after_forward_bytes);
                        assert_true(e->r.step_s > same->r.step_s);
                        assert_true(e->r.copy_s > 0);
                    }
                }
                gckpt_plan_free(&p);
            }
        }
    }
}

/* Two block types (gemma-3-1b under sdpa at seq 8192 >= its window of 512, bf16): a
 * sliding layer saves k and v repeated to every head instead of its one kv head and SDPA's
 * converted [b, 1, s, s] mask, 2 T (q_dim - kv_dim) 2 + b s s 2 bytes more than a full
 * layer, and its masked SDPA computes the whole s x s: twice the causal 2 b s s heads
 * head_dim forward FLOPs; the parameters are counted once (999,885,952, published) */
static void two_block_types(void **state)
{
    (void)state;
    gckpt_model m;
    load("gemma-3-1b", &m);
    static gckpt_recipe r;
    const uint64_t b = 2, seq = 8192, T = b * seq;
    gckpt_recipe_build_seq(&m, GCKPT_BF16, GCKPT_SDPA, GCKPT_TARGET_CUDA, NULL, seq, &r);
    gckpt_setting s = {.precision = GCKPT_BF16, .attention = GCKPT_SDPA, .micro_batch = b, .seq = seq, .grad_accum = 1,
                       .optimizer = GCKPT_ADAMW};
    gckpt_ctx c;
    gckpt_err err;
    if (!gckpt_ctx_init(&c, &m, &dev, &r, &s, &err)) fail_msg("%s", err.msg);
    /* layer 0 slides (5 sliding : 1 full), layer 5 is full */
    int sl = gckpt_layer_section(&r, &m, GCKPT_SDPA, 0), fu = gckpt_layer_section(&r, &m, GCKPT_SDPA, 5);
    assert_int_equal(sl, GCKPT_SEC_BLOCK);
    assert_int_equal(fu, GCKPT_SEC_BLOCK_MORE);
    uint64_t qd = m.heads * m.head_dim, kvd = m.kv_heads * m.head_dim;
    assert_true(gckpt_section_saved_bytes(&c, sl) - gckpt_section_saved_bytes(&c, fu) ==
                2 * T * (qd - kvd) * 2 + b * seq * seq * 2);
    double f[2] = {0, 0};
    for (int i = 0; i < r.nop; i++)
        if (r.op[i].prim == GCKPT_P_SDPA) f[r.op[i].section == sl ? 0 : 1] += c.op_flops[0][i];
    double causal = 2.0 * (double)b * (double)seq * (double)seq * (double)m.heads * (double)m.head_dim;
    assert_true(f[1] == causal && f[0] == 2 * causal);
    assert_true(c.params.numel == 999885952u);
}

/* SmolLM3-3B's NoPE layers (3, 7, ...: no_rope_layers 0) are block type NOPE: a section of
 * their own without apply_rotary_pos_emb (no rotate_half), the decoder's parameters
 * (sec_params: counted once); what they save is the decoder's (the rotary products save only
 * the shared cos / sin tables, and SDPA saves q and k of the same size either way). */
static void nope_layers(void **state)
{
    (void)state;
    gckpt_model m;
    gckpt_err err;
    if (!gckpt_model_load(GCKPT_TEST_DATA "/configs/smollm3-3b.json", &m, &err)) fail_msg("%s", err.msg);
    static gckpt_recipe r;
    gckpt_recipe_build_seq(&m, GCKPT_BF16, GCKPT_SDPA, GCKPT_TARGET_CUDA, NULL, 4096, &r);
    int ro = gckpt_layer_section(&r, &m, GCKPT_SDPA, 0), np = gckpt_layer_section(&r, &m, GCKPT_SDPA, 3);
    assert_int_equal(ro, GCKPT_SEC_BLOCK);
    assert_int_equal(np, GCKPT_SEC_BLOCK_MORE);
    assert_int_equal(gckpt_layer_section(&r, &m, GCKPT_SDPA, 4), GCKPT_SEC_BLOCK);
    assert_int_equal(gckpt_layer_section(&r, &m, GCKPT_SDPA, 35), GCKPT_SEC_BLOCK_MORE);
    assert_int_equal(r.sec_params[np], GCKPT_SEC_BLOCK);
    int halves[2] = {0, 0};
    for (int i = 0; i < r.nop; i++)
        if (r.op[i].prim == GCKPT_P_NEG_HALF) halves[r.op[i].section == ro ? 0 : r.op[i].section == np ? 1 : 0]++;
    assert_int_equal(halves[0], 2); /* rotate_half of q and of k */
    assert_int_equal(halves[1], 0);
    gckpt_setting s = {.precision = GCKPT_BF16, .attention = GCKPT_SDPA, .micro_batch = 1, .seq = 4096, .grad_accum = 1,
                       .optimizer = GCKPT_ADAMW};
    gckpt_ctx c;
    if (!gckpt_ctx_init(&c, &m, &dev, &r, &s, &err)) fail_msg("%s", err.msg);
    assert_true(gckpt_section_saved_bytes(&c, ro) == gckpt_section_saved_bytes(&c, np));
    assert_true(c.params.numel == 3075098624u);
}

int main(void)
{
    gckpt_err err;
    if (!gckpt_device_load("h100-sxm-80gb", &dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(checkpointed_layer_sets), cmocka_unit_test(checkpoint_bytes),
        cmocka_unit_test(pr48444_offload_frees),   cmocka_unit_test(accumulation_steady_state),
        cmocka_unit_test(persistent_state),        cmocka_unit_test(invariants),
        cmocka_unit_test(two_block_types),         cmocka_unit_test(nope_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
