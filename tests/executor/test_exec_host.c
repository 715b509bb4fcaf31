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
#include "gckpt/executor/kernel_math.h"
#include "gckpt/util/util.h"

#include <cjson/cJSON.h>
#include <math.h>

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
/* SmolLM3: layer 1 of 3 a NoPE layer (no_rope_layer_interval 2; block type NOPE, a second
 * section without the rotary embedding), q/k/v/o biases, tied */
static void test_smollm3(void **st) { (void)st; family_ga2("tiny-smollm3"); }
/* GLM-4: interleaved partial rotary (4 of 8 columns) with per-layer tables, q/k/v biases,
 * gate_up_proj, four norms, untied */
static void test_glm4(void **st) { (void)st; family_ga2("tiny-glm4"); }
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
/* DeepSeek-V3 (multi-head latent attention, a dense layer 0 with parameters of its own,
 * the grouped router, a shared expert): every precision x attention, accumulation 2 */
static void test_deepseek_v3(void **st) { (void)st; family_ga2("tiny-deepseek-v3"); }
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

/* gpt_oss (attention sinks, the half-split rotary, alternating sliding (window 8 < seq 16)
 * and full layers, biased q/k/v/o, router and experts, the clamped SwiGLU over interleaved
 * gate / up columns, [E, in, out] expert weights): every precision, eager (sdpa is planned
 * as eager: transformers refuses sdpa for it), and with output_router_logits (the
 * load-balancing loss) */
static void test_gpt_oss(void **st)
{
    (void)st;
    family_ga2("tiny-gpt-oss");
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int p = 0; p < 3; p++) sweep("tiny-gpt-oss-aux", precs[p], GCKPT_EAGER, 2, GCKPT_ADAMW);
}

/* gckpt-run's step against transformers' own forward and backward on the same weights and
 * batch (fp32, eager, mb 2, seq 16, one micro-step, the executor's seed 7, init std 0.05
 * and biases and sinks of std 0.05, so that each reaches the numbers): the loss and every
 * parameter's gradient norm as transformers 5.24 computed them
 * (tests/executor/data/hf-NAME.json, written by tools/hf_probe/exec_loss.py from
 * gckpt-exec-dump's step). Catches what the sweeps cannot: columns read in the wrong
 * order the same way in every setting (the rotary's per-head halves, the interleaved gate
 * and up, the sink column's softmax width, the [E, in, out] expert weights, YaRN's and
 * llama3's tables, a config class's default, the embedding's padding row). */
static void matches_transformers(const char *fixture)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/hf-%s.json", GCKPT_TEST_DATA, fixture);
    gckpt_err rerr = {{0}};
    char *text = gckpt_read_file(path, 1u << 24, &rerr);
    if (!text) fail_msg("%s", rerr.msg);
    cJSON *hf = cJSON_Parse(text);
    free(text);
    assert_non_null(hf);
    gckpt_model m = fx_model(fixture);
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32, .optimizer = GCKPT_ADAMW,
                       .attention = GCKPT_EAGER};
    fx_run r;
    fx_steps_bias(be, &m, &d, &s, 1, 0.05, &r);
    assert_int_equal(r.rc, GCKPT_XS_OK);
    double want = cJSON_GetObjectItem(hf, "loss")->valuedouble, worst = 0;
    const float *g = (const float *)r.grads[0].bytes;
    size_t at = 0, n = 0;
    const char *where = "";
    /* the fixture's order is fx_collect's: the recipe's parameters, each layer */
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(hf, "params")) {
        size_t numel = (size_t)cJSON_GetObjectItem(p, "numel")->valuedouble;
        assert_true((at + numel) * sizeof(float) <= r.grads[0].n);
        double ss = 0;
        for (size_t i = 0; i < numel; i++) ss += (double)g[at + i] * (double)g[at + i];
        at += numel;
        double ref = cJSON_GetObjectItem(p, "grad_norm")->valuedouble;
        double rel = fabs(sqrt(ss) - ref) / (ref > 1e-3 ? ref : 1e-3);
        if (rel > worst) {
            worst = rel;
            where = cJSON_GetObjectItem(p, "name")->valuestring;
        }
        n++;
    }
    printf("# %s vs transformers %s (fp32, eager, mb 2, seq 16, same weights and batch): loss %.9f vs %.9f; largest "
           "relative gradient-norm difference %.2e (%s) over %zu parameters\n",
           fixture, cJSON_GetObjectItem(hf, "transformers")->valuestring, r.loss[0], want, worst, where, n);
    assert_int_equal(at * sizeof(float), r.grads[0].n);
    assert_true(fabs(r.loss[0] - want) < 2e-6);
    assert_true(worst < 1e-4);
    cJSON_Delete(hf);
    fx_run_free(&r);
    be->destroy(be);
}
/* every dense family: llama (with q/k/v/o and MLP biases, tied, rope_type llama3 with each
 * of its three wavelength bands), mistral and qwen2 with windows of 8 < seq 16, qwen3,
 * gpt2 (Conv1D weights, dropout off), gemma, gemma2 (window 8 and the padding row of
 * token 0 in the batch; window 16 with both soft-caps), gemma3 (two rotary tables),
 * phi3 (partial rotary; multi-head), gpt_neox (parallel residual, interleaved qkv; the
 * sequential block, use_parallel_residual false), olmo2, granite (its four multipliers),
 * smollm3 (a NoPE layer: treated as a rotary one, the loss is 4.4e-5 off), glm4 (its
 * interleaved pairs rotated as llama's halves: the loss is 1.0e-4 off) */
static void test_dense_matches_transformers(void **st)
{
    (void)st;
    const char *fx[] = {"tiny-llama",   "tiny-llama-mha",  "tiny-llama-tied",   "tiny-llama3-rope", "tiny-mistral-sw8",
                        "tiny-qwen2-sw", "tiny-qwen3",      "tiny-gpt2",         "tiny-gemma",       "tiny-gemma2",
                        "tiny-gemma2-w16", "tiny-gemma3",   "tiny-phi3-partial", "tiny-phi3-mha",    "tiny-gpt-neox",
                        "tiny-gpt-neox-seq", "tiny-olmo2", "tiny-granite", "tiny-smollm3",
                        "tiny-glm4"};
    for (size_t i = 0; i < sizeof fx / sizeof *fx; i++) matches_transformers(fx[i]);
}

/* the mixture-of-experts families, each with and without the load-balancing loss
 * (mixtral: MixtralConfig's default rope_theta 1e6), gpt_oss (YaRN: factor 4 over 8
 * positions, truncated correction range, at seq 16) and deepseek_v3 (multi-head latent
 * attention with qk heads of 20 and v heads of 16, the interleaved rotary, a dense layer
 * 0, the grouped router's sigmoid scores, group mask and gather, shared experts) */
static void test_moe_matches_transformers(void **st)
{
    (void)st;
    const char *fx[] = {"tiny-mixtral", "tiny-mixtral-aux", "tiny-qwen3-moe", "tiny-qwen3-moe-aux", "tiny-olmoe",
                        "tiny-olmoe-aux", "tiny-gpt-oss", "tiny-gpt-oss-aux", "tiny-gpt-oss-yarn", "tiny-deepseek-v3"};
    for (size_t i = 0; i < sizeof fx / sizeof *fx; i++) matches_transformers(fx[i]);
}

/* Sliding windows shorter than the sequence (16): Gemma 2 (window 8, eager: its sliding
 * layers read the sliding mask, the full layers the causal one) and Mistral (window 8 on
 * every layer: SDPA with masking_utils' bool mask converted to q's dtype and the window in
 * the kernel; eager with the sliding mask). */
static void test_gemma2_sliding(void **st) { (void)st; family_ga2("tiny-gemma2"); }
static void test_mistral_sliding(void **st) { (void)st; family_ga2("tiny-mistral-sw8"); }
/* Gemma 3 (per-head q/k norms, a rotary pair per layer type with its own theta, the
 * sliding and full masks): with window 32 > seq under sdpa and eager, with window 8 < seq
 * under eager (sdpa there: test_two_block_sections_sdpa). */
static void test_gemma3(void **st)
{
    (void)st;
    family_ga2("tiny-gemma3-w32");
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int p = 0; p < 3; p++) sweep("tiny-gemma3", precs[p], GCKPT_EAGER, 2, GCKPT_ADAMW);
}

/* Qwen2 with sliding layers from max_window_layers 1 (layer 0 full, 1 and 2 sliding):
 * eager, each type's mask (sdpa at seq >= window: test_two_block_sections_sdpa) */
static void test_qwen2_sliding(void **st)
{
    (void)st;
    const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
    for (int p = 0; p < 3; p++) sweep("tiny-qwen2-sw", precs[p], GCKPT_EAGER, 2, GCKPT_ADAMW);
}

/* The first step's losses of models a and b (seq 16, micro-batch 2, fp32), which must
 * differ. */
static void losses_differ(const gckpt_model *a, const gckpt_model *b, gckpt_attention attn, double loss[2])
{
    gckpt_device d = fx_device();
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_setting s = {.seq = 16, .micro_batch = 2, .grad_accum = 1, .precision = GCKPT_FP32, .attention = attn};
    fx_run ra, rb;
    fx_steps(be, a, &d, &s, 1, &ra);
    fx_steps(be, b, &d, &s, 1, &rb);
    assert_int_equal(ra.rc, GCKPT_XS_OK);
    assert_int_equal(rb.rc, GCKPT_XS_OK);
    loss[0] = ra.loss[0];
    loss[1] = rb.loss[0];
    assert_true(ra.loss[0] != rb.loss[0]);
    fx_run_free(&ra);
    fx_run_free(&rb);
    be->destroy(be);
}

/* Gemma 2's sliding layers read a mask of their own: the loss of tiny Gemma 2 (window 8)
 * at seq 16 changes when the window is as long as the sequence (same weights: the recipe
 * does not depend on the window under eager). */
static void test_gemma2_window_used(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-gemma2"), w16 = m;
    w16.sliding_window = 16;
    double loss[2];
    losses_differ(&m, &w16, GCKPT_EAGER, loss);
    printf("# gemma2 seq 16, fp32: loss with window 8 %.9f, with window 16 %.9f\n", loss[0], loss[1]);
}

/* Gemma 3's sliding layers rotate with their own pair: the loss changes when the local
 * theta (10000 in tiny-gemma3-w32.json's rope_parameters) is made the global one (1e6). */
static void test_gemma3_local_rope_used(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-gemma3-w32"), same = m;
    assert_true(m.rope_theta == 1e6 && m.rope_local_theta == 1e4 && m.rope_tables == 2);
    same.rope_local_theta = m.rope_theta;
    double loss[2];
    losses_differ(&m, &same, GCKPT_SDPA, loss);
    printf("# gemma3 seq 16, fp32: loss with local theta 1e4 %.9f, with 1e6 %.9f\n", loss[0], loss[1]);
}

/* Partial rotary's index maps against apply_rotary_pos_emb (modeling_phi3.py 5.24):
 * q_rot = q[..., :rd] per head, q_embed = cat([rotated q_rot, q[..., rd:]]): with 2 heads
 * of 4 columns and rd 2 in rows of 8, element (row 1, head 1, column 1) of q_rot is
 * column 5 of the row; inside a fused qkv_proj output of rows of 16 whose k starts at
 * column 8, k_rot's is storage element 16 + 8 + 5; the cat takes columns 0-1 and 4-5 of
 * a row from the rotated part (its elements 0-1, 2-3) and 2-3, 6-7 from q. */
static void test_partial_rotary_maps(void **st)
{
    (void)st;
    uint64_t cols, W, off, blk;
    gckpt_split_view(2, 16, 8, -1, 0, 4, &cols, &W, &off, &blk); /* q_rot of 2 rows of q */
    assert_true(cols == 4 && W == 8 && off == 0 && blk == 2);
    assert_int_equal(gckpt_view_index(1 * 4 + 3, cols, W, off, blk, 4), 8 + 5);
    assert_int_equal(gckpt_view_index(2, 4, 16, 8, 2, 4), 8 + 4);      /* k_rot in qkv, row 0 */
    assert_int_equal(gckpt_view_index(4 + 3, 4, 16, 8, 2, 4), 16 + 8 + 5);
    static const int which[8] = {1, 1, 2, 2, 1, 1, 2, 2};
    static const uint64_t src[8] = {0, 1, 2, 3, 2, 3, 6, 7};
    for (uint64_t i = 0; i < 8; i++) {
        int w;
        uint64_t s;
        gckpt_cat_pass_src(8 + i, 8, 4, 2, &w, &s); /* row 1 */
        assert_int_equal(w, which[i]);
        assert_int_equal(s, which[i] == 1 ? 4 + src[i] : 8 + src[i]);
    }
}

/* The visibility rule is transformers 5.24's: create_sliding_window_causal_mask of a
 * MistralConfig with sliding_window 3 at seq 6, eager (bf16: 0 or -3.3895e+38) and sdpa
 * (bool) print this matrix (1: attend), measured in the probe venv. */
static void test_sliding_rule(void **st)
{
    (void)st;
    static const int hf[6][6] = {{1, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {1, 1, 1, 0, 0, 0},
                                 {0, 1, 1, 1, 0, 0}, {0, 0, 1, 1, 1, 0}, {0, 0, 0, 1, 1, 1}};
    float low = gckpt_dtype_lowest(GCKPT_DT_BF16);
    for (uint64_t i = 0; i < 6; i++)
        for (uint64_t j = 0; j < 6; j++) {
            assert_int_equal(gckpt_key_visible(i, j, 3), hf[i][j]);
            assert_true(gckpt_attn_mask(i * 6 + j, 6, 3, low) == (hf[i][j] ? 0.0f : low));
            /* window 0 (and a window as long as the sequence): causal */
            assert_int_equal(gckpt_key_visible(i, j, 0), j <= i);
            assert_int_equal(gckpt_key_visible(i, j, 6), j <= i);
        }
}

/* An executor of model m at seq 16, micro-batch mb, fp32, set up. */
static gckpt_exec *exec_fp32(gckpt_backend *be, const gckpt_model *m, gckpt_attention a, uint64_t mb)
{
    gckpt_device d = fx_device();
    gckpt_setting s = {.seq = 16, .micro_batch = mb, .grad_accum = 1, .precision = GCKPT_FP32, .attention = a};
    gckpt_exec_opts o = {.seed = 5, .init_std = 0.2};
    gckpt_err err = {{0}};
    gckpt_exec *x = gckpt_exec_new(be, m, &d, &s, &o, &err);
    if (!x) fail_msg("%s", err.msg);
    assert_int_equal(gckpt_exec_setup(x, &err), GCKPT_XS_OK);
    return x;
}

/* The parameters of x and y paired by name (tensor indices differ between recipes). */
#define MAXG 64
#define MAXL 4 /* layers */

static void param_pairs(gckpt_exec *x, gckpt_exec *y, int *tx, int *ty, int *nl, int *np)
{
    const gckpt_recipe *rx = gckpt_exec_ctx(x)->recipe, *ry = gckpt_exec_ctx(y)->recipe;
    *np = 0;
    for (int t = 0; t < rx->nt; t++) {
        if (rx->t[t].kind != GCKPT_T_PARAM) continue;
        int u = -1;
        for (int k = 0; k < ry->nt; k++)
            if (ry->t[k].kind == GCKPT_T_PARAM && !strcmp(ry->t[k].name, rx->t[t].name)) u = k;
        if (u < 0) fail_msg("no parameter %s in the other recipe", rx->t[t].name);
        assert_true(*np < MAXG);
        assert_int_equal(gckpt_exec_param_numel(x, t), gckpt_exec_param_numel(y, u));
        tx[*np] = t;
        ty[*np] = u;
        nl[*np] = rx->t[t].section == GCKPT_SEC_BLOCK ? (int)gckpt_exec_ctx(x)->model->layers : 1;
        (*np)++;
    }
}

static void copy_params(gckpt_exec *x, gckpt_exec *y)
{
    int tx[MAXG], ty[MAXG], nl[MAXG], np;
    param_pairs(x, y, tx, ty, nl, &np);
    gckpt_err err = {{0}};
    for (int i = 0; i < np; i++) {
        float *a = malloc(sizeof *a * gckpt_exec_param_numel(x, tx[i]));
        assert_non_null(a);
        for (int l = 0; l < nl[i]; l++) {
            int layer = nl[i] > 1 ? l : -1;
            assert_int_equal(gckpt_exec_read_param(x, layer, tx[i], a, &err), GCKPT_XS_OK);
            assert_int_equal(gckpt_exec_write_param(y, layer, ty[i], a, &err), GCKPT_XS_OK);
        }
        free(a);
    }
}

/* a step's gradients, every parameter of the recipe in tensor order (on_grads) */
typedef struct {
    float *g[GCKPT_MAX_TENSORS][MAXL];
} step_grads;

static void grab_grads(gckpt_exec *x, void *user)
{
    step_grads *sg = user;
    const gckpt_recipe *r = gckpt_exec_ctx(x)->recipe;
    gckpt_err err = {{0}};
    for (int t = 0; t < r->nt; t++) {
        if (r->t[t].kind != GCKPT_T_PARAM) continue;
        int nl = r->t[t].section == GCKPT_SEC_BLOCK ? (int)gckpt_exec_ctx(x)->model->layers : 1;
        assert_true(nl <= MAXL);
        for (int l = 0; l < nl; l++) {
            sg->g[t][l] = malloc(sizeof(float) * gckpt_exec_param_numel(x, t));
            assert_non_null(sg->g[t][l]);
            assert_int_equal(gckpt_exec_read_grad(x, nl > 1 ? l : -1, t, sg->g[t][l], &err), GCKPT_XS_OK);
        }
    }
}

static double loss_of(gckpt_exec *x, step_grads *sg)
{
    gckpt_step_opts so = {.update = false, .on_grads = sg ? grab_grads : NULL, .user = sg};
    gckpt_step_result res;
    gckpt_err err = {{0}};
    assert_int_equal(gckpt_exec_step(x, &so, &res, &err), GCKPT_XS_OK);
    return res.loss;
}

/* the largest difference of x's and y's gradients by parameter name; *gmax: x's largest */
static double grad_diff(gckpt_exec *x, gckpt_exec *y, step_grads *gx, step_grads *gy, double *gmax)
{
    int tx[MAXG], ty[MAXG], nl[MAXG], np;
    param_pairs(x, y, tx, ty, nl, &np);
    double d = 0;
    for (int i = 0; i < np; i++)
        for (int l = 0; l < nl[i]; l++) {
            const float *a = gx->g[tx[i]][l], *b = gy->g[ty[i]][l];
            for (uint64_t k = 0; k < gckpt_exec_param_numel(x, tx[i]); k++) {
                d = fmax(d, fabs((double)a[k] - b[k]));
                *gmax = fmax(*gmax, fabs((double)a[k]));
            }
        }
    return d;
}

/* two runs' grads freed (for reuse), then their losses and largest gradient difference d
 * (of the largest gradient gmax) within fp32 rounding */
static void free_grads(step_grads *sg)
{
    for (int t = 0; t < GCKPT_MAX_TENSORS; t++)
        for (int l = 0; l < MAXL; l++) free(sg->g[t][l]);
    memset(sg, 0, sizeof *sg);
}

static void assert_agree(step_grads *ga, step_grads *gb, double la, double lb, double d, double gmax)
{
    free_grads(ga);
    free_grads(gb);
    assert_true(fabs(la - lb) <= 1e-6 * lb);
    assert_true(d <= 1e-4 * gmax);
}

/* The window is applied, and the same way by both attentions: in fp32 with the same
 * weights, tiny Mistral (3 layers) with window 8 at seq 16 has the same loss and
 * gradients under SDPA (the kernel's window and the converted bool mask) as under eager
 * (the additive sliding mask, QK^T, softmax, PV) up to rounding, and another loss with a
 * window as long as the sequence (causal). */
static void test_sliding_sdpa_matches_eager(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-mistral-sw8");
    assert_int_equal(m.layers, 3);
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_exec *sd = exec_fp32(be, &m, GCKPT_SDPA, 2), *eg = exec_fp32(be, &m, GCKPT_EAGER, 2);
    m.sliding_window = 16;
    gckpt_exec *causal = exec_fp32(be, &m, GCKPT_EAGER, 2);
    copy_params(sd, eg);
    copy_params(sd, causal);
    static step_grads gs, ge;
    double ls = loss_of(sd, &gs), le = loss_of(eg, &ge), lc = loss_of(causal, NULL), gmax = 0;
    double dg = grad_diff(sd, eg, &gs, &ge, &gmax);
    printf("# mistral window 8, seq 16, fp32, same weights: loss sdpa %.9f eager %.9f (window 16: %.9f); largest "
           "gradient difference %.3g, largest gradient %.3g\n", ls, le, lc, dg, gmax);
    assert_agree(&gs, &ge, ls, le, dg, gmax);
    assert_true(fabs(lc - le) > 1e-4);
    gckpt_exec_free(sd);
    gckpt_exec_free(eg);
    gckpt_exec_free(causal);
    be->destroy(be);
}

/* Layers of two block types (two block sections: Qwen2 with max_window_layers 1, layer 0
 * full and 1, 2 sliding; Gemma 3, sliding / full alternating) at seq 16 >= window 8 run
 * under SDPA, each layer its section: masked SDPA with the window in the sliding layers,
 * causal SDPA in the full ones. In fp32 with the same weights the loss and gradients equal
 * eager's (each layer type's additive mask) up to rounding; the peak and pinned bytes are
 * the plan's over the matrix (sweep). */
static void test_two_block_sections_sdpa(void **st)
{
    (void)st;
    const char *fixtures[] = {"tiny-qwen2-sw", "tiny-gemma3"};
    gckpt_backend *be = gckpt_host_backend_new(0);
    for (int f = 0; f < 2; f++) {
        gckpt_model m = fx_model(fixtures[f]);
        gckpt_exec *sd = exec_fp32(be, &m, GCKPT_SDPA, 2), *eg = exec_fp32(be, &m, GCKPT_EAGER, 2);
        assert_true(gckpt_exec_ctx(sd)->recipe->block_sec[GCKPT_BLOCK_SLIDING_SDPA] == GCKPT_SEC_BLOCK_MORE ||
                    gckpt_exec_ctx(sd)->recipe->block_sec[GCKPT_BLOCK_DECODER] == GCKPT_SEC_BLOCK_MORE);
        copy_params(sd, eg);
        static step_grads gs, ge;
        double ls = loss_of(sd, &gs), le = loss_of(eg, &ge), gmax = 0;
        double dg = grad_diff(sd, eg, &gs, &ge, &gmax);
        printf("# %s window 8, seq 16, fp32, same weights: loss sdpa (two block sections) %.9f eager %.9f; largest "
               "gradient difference %.3g, largest gradient %.3g\n", fixtures[f], ls, le, dg, gmax);
        assert_agree(&gs, &ge, ls, le, dg, gmax);
        gckpt_exec_free(sd);
        gckpt_exec_free(eg);
        const gckpt_precision precs[] = {GCKPT_FP32, GCKPT_BF16, GCKPT_AMP_BF16};
        for (int p = 0; p < 3; p++) sweep(fixtures[f], precs[p], GCKPT_SDPA, 2, GCKPT_ADAMW);
    }
    be->destroy(be);
}

/* GPT-NeoX (query_key_value's per-head interleaved q, k, v read in place, partial rotary
 * 0.25, LayerNorm, the parallel residual, untied embed_out); the sequential block
 * (use_parallel_residual false: the MLP's norm reads attention's residual sum) */
static void test_gpt_neox(void **st)
{
    (void)st;
    const char *fx[] = {"tiny-gpt-neox", "tiny-gpt-neox-seq"};
    for (int f = 0; f < 2; f++) {
        family_ga2(fx[f]);
        for (int a = 0; a < GCKPT_NATTN; a++) sweep_mb(fx[f], GCKPT_AMP_BF16, (gckpt_attention)a, 1, 2, GCKPT_ADAMW);
    }
}

/* GPT-NeoX's eager path (v's block through matmul's batch folding: a copy at micro-batch
 * 2, a view of the packed output at 1) and its SDPA (v's block read as a view) agree in
 * fp32 with the same weights; and HF's layout: view(..., heads, 3 * hd).chunk(3) puts q,
 * k, v of head h at columns 3 * hd * h + {0, hd, 2 * hd} (modeling_gpt_neox.py 5.24). */
static void test_gpt_neox_views(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-gpt-neox");
    uint64_t hd = m.head_dim;
    /* v (role 2) of head 1, column 3, row 1, in rows of 3 * hidden */
    assert_int_equal(gckpt_view_index(1 * m.hidden + hd + 3, m.hidden, 3 * m.hidden, 2 * hd, hd, 3 * hd),
                     3 * m.hidden + 3 * hd * 1 + 2 * hd + 3);
    gckpt_backend *be = gckpt_host_backend_new(0);
    for (uint64_t mb = 1; mb <= 2; mb++) {
        gckpt_exec *sd = exec_fp32(be, &m, GCKPT_SDPA, mb), *eg = exec_fp32(be, &m, GCKPT_EAGER, mb);
        copy_params(sd, eg);
        static step_grads gs, ge;
        double ls = loss_of(sd, &gs), le = loss_of(eg, &ge), gmax = 0;
        double dg = grad_diff(sd, eg, &gs, &ge, &gmax);
        printf("# gpt_neox mb %llu, seq 16, fp32, same weights: loss sdpa %.9f eager %.9f; largest gradient difference "
               "%.3g, largest gradient %.3g\n", (unsigned long long)mb, ls, le, dg, gmax);
        assert_agree(&gs, &ge, ls, le, dg, gmax);
        gckpt_exec_free(sd);
        gckpt_exec_free(eg);
    }
    be->destroy(be);
}

/* Phi-3 (fused qkv_proj and gate_up_proj whose blocks the next ops read in place, the
 * rotary cat, window 8 on every layer: the masked SDPA at seq 16) */
static void test_phi3(void **st)
{
    (void)st;
    family_ga2("tiny-phi3");
    /* partial rotary 0.75 (Phi-4 mini's): each head's first 12 of 16 columns rotated */
    family_ga2("tiny-phi3-partial");
    /* kv heads = heads (Phi-3 mini): v's block feeds eager's batch folding, a view of the
     * packed output at micro-batch 1 */
    for (uint64_t mb = 1; mb <= 2; mb++)
        for (int a = 0; a < GCKPT_NATTN; a++) sweep_mb("tiny-phi3-mha", GCKPT_AMP_BF16, (gckpt_attention)a, mb, 2, GCKPT_ADAMW);
}

/* tensor index of parameter name in x's recipe */
static int param_named(gckpt_exec *x, const char *name)
{
    const gckpt_recipe *r = gckpt_exec_ctx(x)->recipe;
    for (int t = 0; t < r->nt; t++)
        if (r->t[t].kind == GCKPT_T_PARAM && !strcmp(r->t[t].name, name)) return t;
    fail_msg("no parameter %s", name);
    return -1;
}

/* Phi-3 is Mistral with q, k, v and gate, up fused (modeling_phi3.py 5.24: q =
 * qkv[..., :heads * hd], k the next kv_heads * hd columns, v the rest; gate, up =
 * gate_up.chunk(2); up * silu(gate)): in fp32, tiny Phi-3 and a tiny Mistral of its
 * dimensions and window, given the same weights (the fused matrices' row blocks), have the
 * same loss and gradients under sdpa and eager; so do the kv = heads pair at micro-batch
 * 1 (eager's batch folding of v's block is a view of the packed output). */
static void fused_mistral(const char *phi3, const char *mistral, uint64_t mb)
{
    gckpt_model mp = fx_model(phi3), mm = fx_model(mistral);
    uint64_t h = mp.hidden, qd = mp.heads * mp.head_dim, kvd = mp.kv_heads * mp.head_dim, I = mp.intermediate;
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_err err = {{0}};
    for (int a = 0; a < GCKPT_NATTN; a++) {
        gckpt_exec *xp = exec_fp32(be, &mp, (gckpt_attention)a, mb), *xm = exec_fp32(be, &mm, (gckpt_attention)a, mb);
        /* the shared names, then the blocks: {phi3 name, mistral name, first row, rows} */
        const struct {
            const char *fused, *part;
            uint64_t row, rows;
        } blocks[] = {{"self_attn.qkv_proj.weight", "self_attn.q_proj.weight", 0, qd},
                      {"self_attn.qkv_proj.weight", "self_attn.k_proj.weight", qd, kvd},
                      {"self_attn.qkv_proj.weight", "self_attn.v_proj.weight", qd + kvd, kvd},
                      {"mlp.gate_up_proj.weight", "mlp.gate_proj.weight", 0, I},
                      {"mlp.gate_up_proj.weight", "mlp.up_proj.weight", I, I}};
        const gckpt_recipe *rm = gckpt_exec_ctx(xm)->recipe;
        for (int t = 0; t < rm->nt; t++) {
            if (rm->t[t].kind != GCKPT_T_PARAM) continue;
            int nl = rm->t[t].section == GCKPT_SEC_BLOCK ? 3 : 1;
            float *w = malloc(sizeof *w * (3 * qd + 2 * I) * h * 4);
            assert_non_null(w);
            for (int l = 0; l < nl; l++) {
                int layer = nl > 1 ? l : -1, b = -1;
                for (int k = 0; k < 5; k++)
                    if (!strcmp(blocks[k].part, rm->t[t].name)) b = k;
                if (b < 0) {
                    assert_int_equal(gckpt_exec_read_param(xp, layer, param_named(xp, rm->t[t].name), w, &err), GCKPT_XS_OK);
                    assert_int_equal(gckpt_exec_write_param(xm, layer, t, w, &err), GCKPT_XS_OK);
                } else {
                    assert_int_equal(gckpt_exec_read_param(xp, layer, param_named(xp, blocks[b].fused), w, &err), GCKPT_XS_OK);
                    assert_int_equal(gckpt_exec_write_param(xm, layer, t, w + blocks[b].row * h, &err), GCKPT_XS_OK);
                }
            }
            free(w);
        }
        static step_grads gp, gm;
        double lp = loss_of(xp, &gp), lm = loss_of(xm, &gm), d = 0, gmax = 0;
        /* the fused gradients' row blocks against the separate ones, every layer */
        for (int k = 0; k < 5; k++)
            for (int l = 0; l < 3; l++) {
                const float *f = gp.g[param_named(xp, blocks[k].fused)][l] + blocks[k].row * h,
                            *s = gm.g[param_named(xm, blocks[k].part)][l];
                for (uint64_t i = 0; i < blocks[k].rows * h; i++) {
                    d = fmax(d, fabs((double)f[i] - s[i]));
                    gmax = fmax(gmax, fabs((double)s[i]));
                }
            }
        printf("# %s vs %s (%s, mb %llu, window 8, seq 16, fp32, same weights): loss %.9f vs %.9f; largest fused "
               "gradient difference %.3g, largest gradient %.3g\n", phi3, mistral, gckpt_attention_names[a],
               (unsigned long long)mb, lp, lm, d, gmax);
        assert_agree(&gp, &gm, lp, lm, d, gmax);
        gckpt_exec_free(xp);
        gckpt_exec_free(xm);
    }
    be->destroy(be);
}

static void test_phi3_is_fused_mistral(void **st)
{
    (void)st;
    fused_mistral("tiny-phi3", "tiny-mistral-phi3", 2);
    fused_mistral("tiny-phi3-mha", "tiny-mistral-phi3-mha", 1);
}

/* The loss of model m (fp32, sdpa, seq 16, micro-batch 2, exec_fp32's weights) with the
 * rows [row, row + rows) of every block of `every` rows (of cols) of parameter `name`
 * zeroed in every layer. */
static double loss_zeroed(const gckpt_model *m, const char *name, uint64_t cols, uint64_t row, uint64_t rows,
                          uint64_t every)
{
    gckpt_backend *be = gckpt_host_backend_new(0);
    gckpt_exec *x = exec_fp32(be, m, GCKPT_SDPA, 2);
    int t = param_named(x, name);
    uint64_t n = gckpt_exec_param_numel(x, t);
    float *w = malloc(sizeof *w * n);
    assert_non_null(w);
    gckpt_err err = {{0}};
    for (uint64_t l = 0; l < m->layers; l++) {
        assert_int_equal(gckpt_exec_read_param(x, (int)l, t, w, &err), GCKPT_XS_OK);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t r = i / cols % every;
            if (r >= row && r < row + rows) w[i] = 0;
        }
        assert_int_equal(gckpt_exec_write_param(x, (int)l, t, w, &err), GCKPT_XS_OK);
    }
    free(w);
    double loss = loss_of(x, NULL);
    gckpt_exec_free(x);
    be->destroy(be);
    return loss;
}

/* The experts read the gate and up halves of gate_up_proj's output from their own columns
 * (modeling_mixtral.py 5.24: gate, up = F.linear(x, gate_up_proj[e]).chunk(2, dim=-1);
 * act_fn(gate) * up; a SPLIT view each, first column 0 and I): with either half's weight
 * rows zeroed in every expert and layer the experts add exactly nothing (silu(0) = 0,
 * x * 0 = 0), as with down_proj zeroed; a half read from the other's columns would not be
 * zero. */
static void test_moe_gate_up_halves(void **st)
{
    (void)st;
    gckpt_model m = fx_model("tiny-mixtral");
    uint64_t I = m.expert_inter, h = m.hidden;
    const char *gu = "mlp.experts.gate_up_proj"; /* [E x 2I, h]; down_proj [E x h, I] */
    double full = loss_zeroed(&m, gu, h, 0, 0, 2 * I), gate = loss_zeroed(&m, gu, h, 0, I, 2 * I),
           up = loss_zeroed(&m, gu, h, I, I, 2 * I), down = loss_zeroed(&m, "mlp.experts.down_proj", I, 0, h, h);
    printf("# mixtral seq 16, fp32: loss %.9f; gate rows zeroed %.9f, up rows zeroed %.9f, down_proj zeroed %.9f\n", full,
           gate, up, down);
    assert_true(full != down);
    assert_true(gate == down);
    assert_true(up == down);
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
    double loss[2];
    losses_differ(&a, &b, GCKPT_SDPA, loss);
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

/* Two groups, so that ctest runs them side by side (the suite's time under ASan): the
 * llama / gpt2 families and the checks of the interpreter (no argument), issue 13's dense
 * and mixture-of-experts families and sliding windows ("issue13"), or both ("all"). */
/* The host backend's ops for tensor parallelism's vocabulary-parallel ops (interp_tp.c; executor.h): the
 * lookup of the rank's rows (rows [lo, lo + 2) of a vocabulary of 6, zeros for other ids, an id outside
 * the vocabulary refused), a block of columns copied between row pitches, scratch outside the
 * allocator's counts. */
static void test_tp_backend_ops(void **state)
{
    (void)state;
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_non_null(be);
    float tab[2 * 3] = {1, 2, 3, 4, 5, 6}, out[4 * 3];
    int64_t ids[4] = {2, 3, 0, 5};
    gckpt_xt o = {out, 12, GCKPT_DT_F32, 3, 4}, t = {tab, 6, GCKPT_DT_F32, 3, 2}, i = {ids, 4, GCKPT_DT_I64, 4, 1};
    assert_int_equal(be->embed_rows(be, o, t, i, 2, 6), GCKPT_XS_OK);
    const float want[12] = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(out, want, sizeof want);
    ids[1] = 6; /* outside the vocabulary */
    assert_int_equal(be->embed_rows(be, o, t, i, 2, 6), GCKPT_XS_ERROR);
    assert_non_null(strstr(be->err.msg, "id 6 outside the vocabulary"));
    /* columns 1..2 of a 3 x 4 matrix into columns 0..1 of a 3 x 2 one */
    float a[12] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, b[6] = {0};
    assert_int_equal(be->copy2d(be, b, 2 * 4, a + 1, 4 * 4, 2 * 4, 3), GCKPT_XS_OK);
    const float wb[6] = {1, 2, 11, 12, 21, 22};
    assert_memory_equal(b, wb, sizeof wb);
    void *sc = NULL;
    assert_int_equal(be->scratch(be, 1 << 20, &sc), GCKPT_XS_OK);
    gckpt_memstat ms;
    be->memstat(be, &ms);
    assert_int_equal(ms.allocated_peak, 0); /* as a kernel's own scratch */
    be->scratch_free(be, sc);
    be->destroy(be);
}

/* Context parallelism's ring ops (executor.h ring_*, host_cp.c): two ranks' blocks merged (positions
 * {0, 3} and {1, 2}: the load balancer's head-tail split of 4 tokens) give each rank's rows of one
 * block over the whole sequence, forward (out, logsumexp; rank 0's first query sees no key of rank
 * 1's block: a left-out row) and backward (dq, and dK / dV summed over the ranks as the reduce-
 * scatter sums them). */
enum { RS = 4, RD = 2 };
typedef struct {
    gckpt_xcall c;
    float q[RS * RD], k[RS * RD], v[RS * RD], o[RS * RD], l[RS], go[RS * RD], gq[RS * RD], gk[RS * RD], gv[RS * RD];
} ring_call;

static void ring_call_of(ring_call *rc, const gckpt_op *op, const uint64_t *pos, uint64_t s)
{
    memset(rc, 0, sizeof *rc);
    for (uint64_t i = 0; i < s; i++)
        for (int u = 0; u < RD; u++) {
            double p = (double)pos[i] * RD + u;
            rc->q[i * RD + u] = (float)sin(p * 0.7 + 0.1);
            rc->k[i * RD + u] = (float)cos(p * 0.3 - 0.2);
            rc->v[i * RD + u] = (float)sin(p * 1.3 + 0.5);
            rc->go[i * RD + u] = (float)cos(p * 0.9 + 0.4);
        }
    gckpt_xcall *c = &rc->c;
    c->op = op;
    c->b = 1;
    c->s = s;
    float *in[3] = {rc->q, rc->k, rc->v}, *g[3] = {rc->gq, rc->gk, rc->gv};
    for (int k = 0; k < 3; k++) {
        c->in[k] = (gckpt_xt){in[k], s * RD, GCKPT_DT_F32, RD, s};
        c->gin[k] = (gckpt_xt){g[k], s * RD, GCKPT_DT_F32, RD, s};
    }
    c->out[0] = (gckpt_xt){rc->o, s * RD, GCKPT_DT_F32, RD, s};
    c->out[1] = (gckpt_xt){rc->l, s, GCKPT_DT_F32, s, 1};
    c->gout = (gckpt_xt){rc->go, s * RD, GCKPT_DT_F32, RD, s};
}

/* one rank's forward over the blocks of all (cp blocks of n floats) */
static void ring_fwd_rank(gckpt_backend *be, ring_call *rc, const gckpt_ring *g, const float *all, uint64_t n)
{
    float ob[RS * RD], lb[RS], acc[RS * RD], al[RS];
    for (int i = 0; i < RS; i++) al[i] = -INFINITY;
    for (uint32_t t = 0; t < g->cp; t++) {
        uint32_t src = (g->rank + g->cp - t) % g->cp;
        assert_int_equal(be->ring_block_fwd(be, &rc->c, g, src, all + src * n, ob, lb), GCKPT_XS_OK);
        if (g->cp > 1 && g->rank == 0 && src == 1) assert_true(lb[0] == -INFINITY);
        assert_int_equal(be->ring_merge(be, &rc->c, acc, al, ob, lb), GCKPT_XS_OK);
    }
    assert_int_equal(be->ring_store(be, &rc->c, acc, al), GCKPT_XS_OK);
}

static void test_cp_ring_ops(void **state)
{
    (void)state;
    gckpt_backend *be = gckpt_host_backend_new(0);
    assert_non_null(be);
    gckpt_op op;
    memset(&op, 0, sizeof op);
    snprintf(op.name, sizeof op.name, "sdpa");
    op.prim = GCKPT_P_SDPA;
    op.nin = 3;
    op.heads = op.kv_heads = 1;
    op.qk_dim = op.v_dim = RD;
    op.sb = 0.7;
    for (int k = 0; k < 3; k++) op.in[k] = (int16_t)k;
    /* one block over the whole sequence */
    const uint64_t pw[RS] = {0, 1, 2, 3}, p2[RS] = {0, 3, 1, 2};
    ring_call w, r[2];
    ring_call_of(&w, &op, pw, RS);
    gckpt_ring gw = {1, 0, RS, pw};
    uint64_t n = 0;
    assert_int_equal(be->ring_pack(be, &w.c, NULL, &n), GCKPT_XS_OK);
    assert_int_equal(n, 2 * RS * RD);
    float kvw[2 * RS * RD], dqw[RS * RD] = {0}, dkvw[2 * RS * RD] = {0};
    assert_int_equal(be->ring_pack(be, &w.c, kvw, &n), GCKPT_XS_OK);
    ring_fwd_rank(be, &w, &gw, kvw, n);
    assert_int_equal(be->ring_block_bwd(be, &w.c, &gw, 0, kvw, dqw, dkvw), GCKPT_XS_OK);
    assert_int_equal(be->ring_grad(be, &w.c, dqw, dkvw), GCKPT_XS_OK);
    /* two ranks of 2 tokens: the all-gather and the reduce-scatter done here */
    uint64_t n2 = 2 * 2 * RD;
    float all[2 * 2 * 2 * RD], dall[2][2 * 2 * 2 * RD], dq[2][2 * RD], mine[2 * 2 * RD];
    memset(dall, 0, sizeof dall);
    memset(dq, 0, sizeof dq);
    gckpt_ring g[2] = {{2, 0, 2, p2}, {2, 1, 2, p2}};
    for (int k = 0; k < 2; k++) {
        ring_call_of(&r[k], &op, p2 + 2 * k, 2);
        assert_int_equal(be->ring_pack(be, &r[k].c, all + k * n2, &n), GCKPT_XS_OK);
        assert_int_equal(n, n2);
    }
    for (int k = 0; k < 2; k++) {
        ring_fwd_rank(be, &r[k], &g[k], all, n2);
        for (uint32_t src = 0; src < 2; src++)
            assert_int_equal(be->ring_block_bwd(be, &r[k].c, &g[k], src, all + src * n2, dq[k], dall[k] + src * n2), GCKPT_XS_OK);
    }
    for (int k = 0; k < 2; k++) {
        for (uint64_t e = 0; e < n2; e++) mine[e] = dall[0][k * n2 + e] + dall[1][k * n2 + e];
        assert_int_equal(be->ring_grad(be, &r[k].c, dq[k], mine), GCKPT_XS_OK);
        for (int i = 0; i < 2; i++) {
            uint64_t p = p2[2 * k + i];
            assert_float_equal(r[k].l[i], w.l[p], 1e-6);
            for (int u = 0; u < RD; u++) {
                assert_float_equal(r[k].o[i * RD + u], w.o[p * RD + u], 1e-6);
                assert_float_equal(r[k].gq[i * RD + u], w.gq[p * RD + u], 1e-6);
                assert_float_equal(r[k].gk[i * RD + u], w.gk[p * RD + u], 1e-6);
                assert_float_equal(r[k].gv[i * RD + u], w.gv[p * RD + u], 1e-6);
            }
        }
    }
    be->destroy(be);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest base[] = {
        cmocka_unit_test(test_llama),       cmocka_unit_test(test_qwen3),        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_gpt2_dropout), cmocka_unit_test(test_kv_heads), cmocka_unit_test(test_amp_fp16),
        cmocka_unit_test(test_optimizers), cmocka_unit_test(test_dropout_active), cmocka_unit_test(test_limit_exact),
        cmocka_unit_test(test_detects_broken_schedule), cmocka_unit_test(test_dense_matches_transformers),
        cmocka_unit_test(test_oversized_activation_fails), cmocka_unit_test(test_allocation_larger_than_elements),
        cmocka_unit_test(test_tp_backend_ops), cmocka_unit_test(test_cp_ring_ops),
    };
    const struct CMUnitTest issue13[] = {
        cmocka_unit_test(test_olmo2),  cmocka_unit_test(test_granite), cmocka_unit_test(test_smollm3), cmocka_unit_test(test_glm4),
        cmocka_unit_test(test_gemma), cmocka_unit_test(test_gemma2),
        cmocka_unit_test(test_gemma2_sliding), cmocka_unit_test(test_mistral_sliding),
        cmocka_unit_test(test_qwen2_sliding), cmocka_unit_test(test_gemma2_window_used),
        cmocka_unit_test(test_gemma3), cmocka_unit_test(test_gemma3_local_rope_used),
        cmocka_unit_test(test_phi3), cmocka_unit_test(test_phi3_is_fused_mistral),
        cmocka_unit_test(test_partial_rotary_maps), cmocka_unit_test(test_gpt_neox),
        cmocka_unit_test(test_gpt_neox_views),
        cmocka_unit_test(test_sliding_rule), cmocka_unit_test(test_sliding_sdpa_matches_eager),
        cmocka_unit_test(test_two_block_sections_sdpa),
        cmocka_unit_test(test_mixtral), cmocka_unit_test(test_qwen3_moe), cmocka_unit_test(test_olmoe),
        cmocka_unit_test(test_deepseek_v3),
        cmocka_unit_test(test_moe_aux), cmocka_unit_test(test_moe_gate_up_halves),
        cmocka_unit_test(test_gpt_oss), cmocka_unit_test(test_moe_matches_transformers),
    };
    const char *group = argc > 1 ? argv[1] : "";
    int rc = 0;
    if (strcmp(group, "issue13")) rc |= cmocka_run_group_tests_name("base", base, NULL, NULL);
    if (!strcmp(group, "issue13") || !strcmp(group, "all")) rc |= cmocka_run_group_tests_name("issue13", issue13, NULL, NULL);
    printf("kernel scratch: at most %.0f%% of the host memory guard's bound\n", 100.0 * worst_scratch);
    return rc;
}
