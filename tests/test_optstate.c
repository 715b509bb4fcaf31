/* Optimizer states (gckpt/optstate.h) against closed forms of what bitsandbytes and the
 * HF Trainer allocate: 8-bit AdamW keeps fp32 states for every nn.Embedding weight (the
 * Trainer registers them with GlobalOptimManager for optim_bits=32) and for tensors
 * under 4096 elements; 8-bit codes + one fp32 absmax per 256 elements for the rest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/optstate.h"
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
    gckpt_opt_fp32_note(GCKPT_ADAMW_8BIT, &r, m.layers, note, sizeof note);
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
    for (int t = 0; t < r.nt; t++) {
        if (r.t[t].kind != GCKPT_T_PARAM) continue;
        gckpt_opt_layout l;
        gckpt_opt_layout_of(GCKPT_SGD, &r, t, &l);
        assert_int_equal(l.n, 1);
        assert_int_equal(l.buf[0].dtype, GCKPT_ST_PARAM);
        gckpt_opt_layout_of(GCKPT_ADAMW_FOREACH, &r, t, &l);
        assert_int_equal(l.n, 2);
        assert_int_equal(l.temp_n, gckpt_param_numel(&r, t));
    }
    char note[256];
    gckpt_opt_fp32_note(GCKPT_ADAMW, &r, m.layers, note, sizeof note);
    assert_string_equal(note, "");
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
