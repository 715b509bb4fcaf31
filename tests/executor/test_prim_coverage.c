/* Which primitive each backend executes: the list below names, for every gckpt_prim, whether
 * the host backend and the CUDA backend have its forward and backward kernel, or refuse it
 * by name. It is checked against the host's kernel table (host_ops.c) always and against
 * the CUDA backend's (cuda_backend.cu) where it is built; a primitive added to the enum
 * without a row here fails to compile (the list's length), and one without a kernel row
 * in a backend fails here. A refused call names the primitive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/prim.h"
#include "gckpt/executor/op_sizes.h"
#include "host_ops.h"
#ifdef GCKPT_HAVE_CUDA
#include "gckpt/executor/exec_cuda.h"
#endif

/* F: forward and backward kernels; N: a forward only, its backward refused (the primitive
 * has none: gckpt/core/prim.h no_grad); R: refused (a source is the backend's source call) */
enum { F, N, R };

static const struct {
    int prim;
    const char *name;
    int host, cuda;
} rows[] = {
    {GCKPT_P_SOURCE, "source", R, R},
    {GCKPT_P_CAST, "cast", F, F},
    {GCKPT_P_MUL, "mul", F, F},
    {GCKPT_P_ADD, "add", F, F},
    {GCKPT_P_AFFINE, "affine", F, F},
    {GCKPT_P_NEG_HALF, "neg_half", F, F},
    {GCKPT_P_CAT_HALF, "cat_half", F, F},
    {GCKPT_P_POW, "pow", F, F},
    {GCKPT_P_RSQRT, "rsqrt", F, F},
    {GCKPT_P_TANH, "tanh", F, F},
    {GCKPT_P_SILU, "silu", F, F},
    {GCKPT_P_GELU, "gelu", F, F},
    {GCKPT_P_MEAN, "mean", F, F},
    {GCKPT_P_LINEAR, "linear", F, F},
    {GCKPT_P_LAYERNORM, "layer_norm", F, F},
    {GCKPT_P_DROPOUT, "dropout", F, F},
    {GCKPT_P_SDPA, "sdpa", F, F},
    {GCKPT_P_REPEAT_KV, "repeat_kv", F, F},
    {GCKPT_P_QK, "qk", F, F},
    {GCKPT_P_SOFTMAX, "softmax", F, F},
    {GCKPT_P_PV, "pv", F, F},
    {GCKPT_P_TRANSPOSE, "transpose", F, F},
    {GCKPT_P_EMBED, "embedding", F, F},
    {GCKPT_P_LOG_SOFTMAX, "log_softmax", F, F},
    {GCKPT_P_NLL, "nll_loss", F, F},
    {GCKPT_P_SPLIT, "split", F, F},
    {GCKPT_P_CAT_PASS, "cat_pass", F, F},
    {GCKPT_P_TOPK, "topk", F, F},
    {GCKPT_P_SUM, "sum", F, F},
    {GCKPT_P_DIV, "div", F, F},
    {GCKPT_P_SORT, "sort", N, N},
    {GCKPT_P_FLOORDIV, "floordiv", N, N},
    {GCKPT_P_GATHER_ROWS, "gather_rows", F, F},
    {GCKPT_P_HISTC, "histc", N, N},
    {GCKPT_P_INVERT_PERM, "invert_perm", N, N},
    {GCKPT_P_GROUPED_LINEAR, "grouped_linear", F, F},
    {GCKPT_P_SUB, "sub", F, F},
    {GCKPT_P_CLAMP, "clamp", F, F},
    {GCKPT_P_SIGMOID, "sigmoid", F, F},
    {GCKPT_P_CAT_SINK, "cat_sink", F, F},
    {GCKPT_P_MAX_LAST, "max_last", F, F},
    {GCKPT_P_DROP_SINK, "drop_sink", F, F},
    {GCKPT_P_CAT_HALVES, "cat_halves", F, F},
    {GCKPT_P_BOOL_MASK, "bool_mask", N, N},
    {GCKPT_P_FUSED_LCE, "fused_linear_ce", R, R}, /* planned only: gckpt-run refuses the plan */
    {GCKPT_P_CCE_LSE, "cce_lse", R, R},
    {GCKPT_P_SWIGLU, "liger_swiglu", R, R},
    {GCKPT_P_ROUTE_MASK, "route_mask", N, R}, /* DeepSeek-V3's router: host only */
    {GCKPT_P_LIGER_RMS_NORM, "liger_rms_norm", R, R},
    {GCKPT_P_LIGER_ROPE, "liger_rope", R, R},
    {GCKPT_P_PATCH_CONV, "patch_conv", F, R}, /* a vision tower's: host kernels (host_vision.c) */
    {GCKPT_P_CAT_CLS, "cat_cls", F, R},
    {GCKPT_P_ROWS_OF, "rows_of", F, R},
    {GCKPT_P_AVG_POOL, "avg_pool", R, R}, /* Gemma 3's projector: planned only */
    {GCKPT_P_LIGER_MOE_ROUTE, "liger_moe_route", R, R}, /* Liger's fused MoE: planned only */
    {GCKPT_P_LIGER_MOE, "liger_moe", R, R},
#ifdef GCKPT_TOY
    {GCKPT_P_TOY, "toy", F, F},
#endif
};
_Static_assert(sizeof rows / sizeof *rows == GCKPT_NPRIM, "a primitive without a row in test_prim_coverage.c");

static const char *what(int k) { return k == F ? "forward and backward" : k == N ? "a forward only" : "nothing"; }

static void check(const char *backend, int prim, int want, bool fwd, bool bwd)
{
    int have = fwd && bwd ? F : fwd ? N : !fwd && !bwd ? R : -1;
    if (have != want)
        fail_msg("%s backend, primitive %s: the list says %s, its kernel table has%s%s", backend, gckpt_prim_name(prim),
                 what(want), fwd ? " a forward" : " no forward", bwd ? " and a backward" : " and no backward");
}

static void the_list_is_the_enum(void **state)
{
    (void)state;
    for (int i = 0; i < GCKPT_NPRIM; i++) {
        assert_int_equal(rows[i].prim, i);
        assert_string_equal(rows[i].name, gckpt_prim_name(i));
        /* a backend refuses a backward only where the primitive has none */
        const gckpt_prim_info *info = gckpt_prim_of(i);
        if ((rows[i].host != F || rows[i].cuda != F) && !info->no_grad && !info->planned_only)
            fail_msg("primitive %s has a backward, but a backend has no kernel for it", info->name);
    }
}

static void host_kernels(void **state)
{
    (void)state;
    int n = 0;
    for (int i = 0; i < GCKPT_NPRIM; i++) {
        const host_kernel *k = host_kernel_of(i);
        assert_non_null(k);
        check("host", i, rows[i].host, k->fwd != NULL, k->bwd != NULL);
        n += k->fwd != NULL;
    }
    assert_null(host_kernel_of(GCKPT_NPRIM));
    printf("host: %d of %d primitives have kernels\n", n, GCKPT_NPRIM);
}

static void cuda_kernels(void **state)
{
    (void)state;
#ifdef GCKPT_HAVE_CUDA
    for (int i = 0; i < GCKPT_NPRIM; i++) check("cuda", i, rows[i].cuda, gckpt_cuda_has_kernel(i, false), gckpt_cuda_has_kernel(i, true));
    assert_false(gckpt_cuda_has_kernel(GCKPT_NPRIM, false));
#else
    skip(); /* built without a CUDA compiler: the CUDA column is checked where it is built */
#endif
}

/* A refused kernel names the primitive: the host's backward of an integer-valued one. */
static void refused_by_name(void **state)
{
    (void)state;
    gckpt_op op = {.prim = GCKPT_P_SORT, .nin = 1, .out = {0, 1}};
    snprintf(op.name, sizeof op.name, "mlp.sort");
    float g = 1.0f;
    gckpt_xcall c = {.op = &op, .gout = {&g, 1, GCKPT_DT_F32, 1, 1}};
    gckpt_err err = {0};
    assert_int_equal(host_op_backward(&c, &err), GCKPT_XS_ERROR);
    assert_non_null(strstr(err.msg, "primitive sort has no host backward"));
    op.prim = GCKPT_P_SOURCE;
    assert_int_equal(host_op_forward(&c, &err), GCKPT_XS_ERROR);
    assert_non_null(strstr(err.msg, "primitive source has no host forward"));
}

/* The executor sizes an op from the op (its heads, head widths, experts), not from the
 * model: every attention and router op of a recipe passes the forward check against a
 * model whose heads, head_dim and experts say something else. (The check read the
 * model's heads x head_dim for q's width before, and failed here.) */
static void sizes_read_the_op_not_the_model(void **state)
{
    (void)state;
    static const char *cfgs[] = {
        "{\"model_type\":\"llama\",\"num_hidden_layers\":1,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"intermediate_size\":96,\"vocab_size\":128}",
        "{\"model_type\":\"qwen3_moe\",\"num_hidden_layers\":1,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":96,\"moe_intermediate_size\":32,"
        "\"vocab_size\":128,\"num_experts\":4,\"num_experts_per_tok\":2}"};
    static gckpt_recipe r;
    static char buf[1 << 20]; /* never read: the check looks at sizes only */
    const uint64_t b = 2, s = 16;
    int checked = 0;
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        gckpt_model m, other;
        gckpt_err err = {0};
        if (!gckpt_model_parse("cfg", cfgs[i], &m, &err)) fail_msg("%s", err.msg);
        for (int a = 0; a < GCKPT_NATTN; a++) {
            gckpt_recipe_build_seq(&m, GCKPT_BF16, (gckpt_attention)a, GCKPT_TARGET_CUDA, NULL, s, &r);
            other = m;
            other.heads = 1;
            other.kv_heads = 1;
            other.head_dim = 8;
            other.experts = 3;
            for (int o = 0; o < r.nop; o++) {
                const gckpt_op *op = &r.op[o];
                if (!op->heads && !op->experts) continue;
                gckpt_xcall c = {.r = &r, .op = op, .m = &other, .b = b, .s = s};
                for (int k = 0; k < op->nin; k++) {
                    uint64_t n;
                    assert_true(gckpt_tensor_numel(&r, op->in[k], b, s, &n));
                    uint64_t w = gckpt_tensor_width(&r, op->in[k], s);
                    c.in[k] = (gckpt_xt){buf, n, r.t[op->in[k]].dtype, w, w ? n / w : 0};
                }
                if (gckpt_prim_of(op->prim)->reads_offsets) c.in[2] = (gckpt_xt){buf, m.experts, GCKPT_DT_I32, m.experts, 1};
                for (int k = 0; k < 2; k++) {
                    if (op->out[k] < 0) continue;
                    uint64_t n;
                    assert_true(gckpt_tensor_numel(&r, op->out[k], b, s, &n));
                    uint64_t w = gckpt_tensor_width(&r, op->out[k], s);
                    c.out[k] = (gckpt_xt){buf, n, r.t[op->out[k]].dtype, w, w ? n / w : 0};
                }
                if (gckpt_op_check_forward(&c, &err) != GCKPT_XS_OK) fail_msg("op %s: %s", op->name, err.msg);
                checked++;
            }
        }
    }
    printf("%d attention and router ops sized from their own attributes\n", checked);
    assert_true(checked > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_list_is_the_enum),
        cmocka_unit_test(host_kernels),
        cmocka_unit_test(cuda_kernels),
        cmocka_unit_test(refused_by_name),
        cmocka_unit_test(sizes_read_the_op_not_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
