/* The primitives' table (gckpt/core/prim.h) against the enum and the tracer: every
 * primitive has a row; every op of every shipped model's recipe (each method, precision,
 * attention and target, at a short sequence and at one past the sliding windows) takes
 * as many operands as its primitive's row allows, saves only operands its backward reads,
 * and has the width and workspace its row asks for; the outputs the CUDA recipe (the one
 * gckpt-run executes) traces have the sizes the row's rule gives. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gckpt/core/peft.h"
#include "gckpt/core/prim.h"
#include "gckpt/core/recipe.h"

static void every_primitive_has_a_row(void **state)
{
    (void)state;
    for (int p = 0; p < GCKPT_NPRIM; p++) {
        const gckpt_prim_info *info = gckpt_prim_of(p);
        if (!info) fail_msg("primitive %d has no row in core/prim.c", p);
        assert_true(info->nin_min <= info->nin_max && info->nin_max <= GCKPT_OP_MAX_IN);
        assert_true(info->nout == 1 || info->nout == 2);
        /* a source's size is its kind's; every other primitive has an output size rule */
        assert_true((info->out_numel != NULL) == (p != GCKPT_P_SOURCE));
        for (int q = 0; q < p; q++)
            if (!strcmp(gckpt_prim_name(q), info->name)) fail_msg("primitives %d and %d share the name %s", q, p, info->name);
    }
    assert_null(gckpt_prim_of(GCKPT_NPRIM));
    assert_null(gckpt_prim_of(-1));
    assert_string_equal(gckpt_prim_name(GCKPT_NPRIM), "unknown");
}

/* The operand bit of tensor t in op o (GCKPT_PR_), 0 when it is none of its operands. */
static unsigned operand_bit(const gckpt_op *o, int t)
{
    unsigned bits = 0;
    for (int k = 0; k < o->nin; k++)
        if (o->in[k] == t) bits |= 1u << k;
    if (o->out[0] == t) bits |= GCKPT_PR_OUT0;
    if (o->out[1] == t) bits |= GCKPT_PR_OUT1;
    return bits;
}

static int n_ops_checked;

/* The table's output size of op o for the traced operands' shapes at micro-batch b,
 * sequence s, against the traced outputs' sizes (the executor checks every op it runs
 * with the same rule: executor/op_sizes.c). */
static void check_sizes(const gckpt_recipe *r, const gckpt_op *o, const gckpt_prim_info *info,
                        uint64_t b, uint64_t s, const char *what)
{
    if (!info->out_numel) return;
    gckpt_prim_sizes z = {.op = o, .b = b, .s = s};
    for (int k = 0; k < o->nin; k++) {
        uint64_t n;
        assert_true(gckpt_tensor_numel(r, o->in[k], b, s, &n));
        z.in[k].cols = gckpt_tensor_width(r, o->in[k], s);
        z.in[k].rows = z.in[k].cols ? n / z.in[k].cols : 0;
        z.in[k].present = true;
    }
    if (info->reads_offsets) { /* the offsets the op saves (grouped_mm's offs) */
        z.in[2] = (gckpt_prim_dim){1, o->experts, true};
    }
    z.out_cols = gckpt_tensor_width(r, o->out[0], s);
    for (int k = 0; k < 2; k++) {
        if (o->out[k] < 0) continue;
        uint64_t want, n;
        assert_true(gckpt_tensor_numel(r, o->out[k], b, s, &n));
        if (!info->out_numel(&z, k, &want)) fail_msg("%s: op %s (%s): its operands do not fit", what, o->name, info->name);
        if (want != n)
            fail_msg("%s: op %s (%s) output %d: the table makes %llu elements, the tracer %llu", what, o->name,
                     info->name, k, (unsigned long long)want, (unsigned long long)n);
    }
}

static void check_recipe(const gckpt_recipe *r, uint64_t seq, bool executed, const char *what)
{
    for (int i = 0; i < r->nop; i++) {
        const gckpt_op *o = &r->op[i];
        const gckpt_prim_info *info = gckpt_prim_of(o->prim);
        if (!info) fail_msg("%s: op %s has primitive %d", what, o->name, o->prim);
        if (o->nin < info->nin_min || o->nin > info->nin_max)
            fail_msg("%s: op %s (%s) takes %d inputs, its row %d..%d", what, o->name, info->name, o->nin, info->nin_min,
                     info->nin_max);
        if (o->out[1] >= 0 && info->nout < 2) fail_msg("%s: op %s (%s) makes two outputs", what, o->name, info->name);
        if (info->needs_width && !o->width) fail_msg("%s: op %s (%s) has no width", what, o->name, info->name);
        if (info->even_width && o->width % 2) fail_msg("%s: op %s (%s) has an odd width", what, o->name, info->name);
        if (o->bws_in != info->bws_in && o->bws_in != 0)
            fail_msg("%s: op %s (%s) takes %u input-shaped temporaries, its row %u", what, o->name, info->name,
                     o->bws_in, info->bws_in);
        if (o->bws_cT && !info->bws_dq) fail_msg("%s: op %s (%s) has a dq accumulator", what, o->name, info->name);
        for (int k = 0; k < o->nsaved; k++) {
            unsigned bit = operand_bit(o, o->saved[k]);
            if (bit && !(bit & info->bwd_reads))
                fail_msg("%s: op %s (%s) saves %s, which its backward does not read", what, o->name, info->name,
                         r->t[o->saved[k]].name);
        }
        if (executed) check_sizes(r, o, info, 2, seq, what);
        if (info->no_grad && o->nsaved) fail_msg("%s: op %s (%s) has no backward but saves", what, o->name, info->name);
        n_ops_checked++;
    }
}

static void sweep(const gckpt_model *m, const char *name)
{
    static gckpt_recipe r;
    char what[160];
    for (int meth = 0; meth < GCKPT_NMETHOD; meth++)
        for (int p = 0; p < GCKPT_NPREC; p++)
            for (int a = 0; a < GCKPT_NATTN; a++)
                for (int t = 0; t < 2; t++)
                    for (int sq = 0; sq < 2; sq++) {
                        gckpt_peft pf;
                        gckpt_peft_default((gckpt_method)meth, &pf);
                        pf.modules_to_save = GCKPT_MTS_LM_HEAD | GCKPT_MTS_EMBED;
                        uint64_t seq = sq ? (m->sliding_window ? m->sliding_window + 1 : 8192) : 128;
                        gckpt_recipe_build_seq(m, (gckpt_precision)p, (gckpt_attention)a, (gckpt_target)t, &pf, seq, &r);
                        snprintf(what, sizeof what, "%s method %d precision %d attention %d target %d seq %llu", name,
                                 meth, p, a, t, (unsigned long long)seq);
                        /* gckpt-run executes the CUDA recipe (interp.c); the CPU target's math
                         * path traces its [s, s] mask as a cast of q, for its bytes only */
                        check_recipe(&r, seq, t == GCKPT_TARGET_CUDA, what);
                    }
}

static void recipes_follow_the_table(void **state)
{
    (void)state;
    const char *root = getenv("GCKPT_DATA_DIR");
    assert_non_null(root);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", root);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int models = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json")) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n - 5), e->d_name);
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_load(name, &m, &err)) fail_msg("%s: %s", name, err.msg);
        sweep(&m, name);
        models++;
    }
    closedir(d);
    /* the tracer's rarer branches: every bias and dropout, and the load-balancing loss */
    static const char *cfgs[] = {
        "{\"model_type\":\"qwen3\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":100,\"vocab_size\":200,"
        "\"attention_bias\":true,\"mlp_bias\":true,\"attention_dropout\":0.1}",
        "{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":3,\"vocab_size\":101,"
        "\"n_positions\":128,\"attn_pdrop\":0.1,\"resid_pdrop\":0.1,\"embd_pdrop\":0.1}",
        "{\"model_type\":\"gpt_oss\",\"num_hidden_layers\":2,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":16,\"intermediate_size\":100,\"vocab_size\":200,"
        "\"num_local_experts\":4,\"num_experts_per_tok\":2,\"attention_dropout\":0.1,\"output_router_logits\":true}"};
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        gckpt_model m;
        gckpt_err err;
        if (!gckpt_model_parse("cfg", cfgs[c], &m, &err)) fail_msg("%s", err.msg);
        sweep(&m, cfgs[c]);
    }
    printf("%d shipped models, %d ops checked\n", models, n_ops_checked);
    assert_true(models >= 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_primitive_has_a_row),
        cmocka_unit_test(recipes_follow_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
