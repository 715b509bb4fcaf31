/* What gpt_oss (modeling_gpt_oss.py, transformers 5.24) does differently from the llama
 * family and the other MoE families, op by op as its Python runs (FINDINGS R-FAM-15, R-ATTN-10, R-MOE-7):
 * the rotary embedding over two halves, the attention sinks in the eager softmax, the
 * experts' per-pair biases and their clamped SwiGLU. Planned only (gckpt-run refuses
 * gpt_oss). */
#include "recipe_tracer.h"

#include <math.h>
#include <stdio.h>

/* x - y: nothing saved; x's gradient is the output's, y's a negated copy (SubBackward0). */
int sub(tracer *tr, int x, int y, const char *name)
{
    int o = add(tr, x, y, name);
    gckpt_op *op = last_op(tr);
    op->prim = GCKPT_P_SUB;
    op->grad_alias[1] = false;
    return o;
}

/* _apply_rotary_emb: first, second = chunk(x, 2) per head (views); first * cos - second *
 * sin and second * cos + first * sin (each product a new tensor, freed with its
 * statement; the products save cos / sin, tables [s, head_dim / 2] that need no
 * gradient); cat of the two halves per head, a new tensor. */
/* "name.part" into buf. */
static const char *sub_name(char *buf, size_t n, const char *name, const char *part)
{
    snprintf(buf, n, "%s.%s", name, part);
    return buf;
}

int rope_halves(tracer *tr, int x, int cos, int sin, const char *name)
{
    const gckpt_model *m = tr->m;
    uint64_t half = tr->r->t[x].shape.width / 2;
    char nm[40];
    int first = slice_of(tr, x, 0, half, sub_name(nm, sizeof nm, name, "first"));
    int second = slice_of(tr, x, 1, half, sub_name(nm, sizeof nm, name, "second"));
    /* chunk(2, dim=-1) of [b, heads, s, hd] is per head: head_dim / 2 columns of every
     * head_dim (the interleaved SPLIT, as GPT-NeoX's q / k / v), from column 0 or hd / 2 */
    for (int i = 1; i <= 2; i++) {
        gckpt_op *sp = &tr->r->op[tr->r->nop - i];
        sp->in_f = m->head_dim;
        sp->out_f = m->head_dim / 2;
        sp->sb = sp->sa * (double)(m->head_dim / 2);
    }
    int a = mul(tr, first, cos, sub_name(nm, sizeof nm, name, "first_cos"));
    int b = mul(tr, second, sin, sub_name(nm, sizeof nm, name, "second_sin"));
    int f = sub(tr, a, b, sub_name(nm, sizeof nm, name, "first_"));
    int c = mul(tr, second, cos, sub_name(nm, sizeof nm, name, "second_cos"));
    int d = mul(tr, first, sin, sub_name(nm, sizeof nm, name, "first_sin"));
    int s = add(tr, c, d, sub_name(nm, sizeof nm, name, "second_"));
    sub_name(nm, sizeof nm, name, "cat");
    int o = like(tr, nm, x, dt(tr, f), rg(tr, f) || rg(tr, s));
    opnew(tr, nm, GCKPT_OP_ELEM, 2, (int[]){f, s}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAT_HALVES, GCKPT_BC_NONE, 0, 0, m->head_dim);
    gckpt_op *op = last_op(tr);
    op->grad_alias[0] = op->grad_alias[1] = true; /* CatBackward: narrow views of the output's gradient */
    hold_here(tr, f); /* first_ and second_ until the function returns */
    hold_here(tr, s);
    return o;
}

/* eager_attention_forward's sink softmax on the masked scores sm [b, heads, s, s]: cat
 * with the per-head sink logit (self_attn.sinks expanded: a view) into [b, heads, s, s + 1]
 * (the wider dtype of the two: fp32 under autocast, whose fp32 mask promoted the scores);
 * minus its row max (max(dim=-1) keeps its int64 indices; the values go with the
 * statement); softmax(dtype = its own dtype): in bf16 the probabilities stay bf16; the
 * [..., :-1] view drops the sink column. The cat's result goes when combined_logits is
 * rebound; the difference stays until the function returns (hold_to: the caller). */
int sink_softmax(tracer *tr, int sm, int *combined)
{
    const gckpt_model *m = tr->m;
    uint64_t nh = m->heads;
    int sinks = param(tr, "sinks", 1, nh, GCKPT_ROLE_BIAS);
    gckpt_shape wide = score_shape(nh);
    wide.plus = 1;
    uint8_t cdt = gckpt_dtype_bits(dt(tr, sm)) >= gckpt_dtype_bits(dt(tr, sinks)) ? dt(tr, sm) : dt(tr, sinks);
    int cat = tnew(tr, "sinks.cat", GCKPT_T_ACT, cdt, wide, true);
    opnew(tr, "sinks.cat", GCKPT_OP_ELEM, 2, (int[]){sm, sinks}, cat, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAT_SINK, GCKPT_BC_NONE, 0, 0, 0);
    last_op(tr)->grad_alias[0] = true;
    int mx = tnew(tr, "sinks.max", GCKPT_T_ACT, cdt, per_token(nh), true);
    int idx = tnew(tr, "sinks.max_indices", GCKPT_T_ACT, I64, per_token(nh), false);
    opnew(tr, "sinks.max", GCKPT_OP_ELEM, 1, (int[]){cat}, mx, idx, 1, (int[]){idx});
    setprim(tr, GCKPT_P_MAX_LAST, GCKPT_BC_NONE, 0, 0, 0);
    int d = sub(tr, cat, mx, "sinks.sub_max");
    last_op(tr)->bcast = GCKPT_BC_ROW;
    int pr = like(tr, "sinks.softmax", d, cdt, true);
    opnew(tr, "sinks.softmax", GCKPT_OP_ELEM, 1, (int[]){d}, pr, -1, 1, (int[]){pr});
    setprim(tr, GCKPT_P_SOFTMAX, GCKPT_BC_NONE, 0, 0, 0);
    int sc = tnew(tr, "sinks.scores", GCKPT_T_ACT, cdt, score_shape(nh), true);
    opnew(tr, "sinks.scores", GCKPT_OP_ELEM, 1, (int[]){pr}, sc, -1, 0, NULL);
    setprim(tr, GCKPT_P_DROP_SINK, GCKPT_BC_NONE, 0, 0, 0);
    last_op(tr)->view_fwd = true;
    *combined = d;
    return sc;
}

/* The experts' bias of one grouped projection: bias[expert_ids_g] gathers a row per pair
 * (IndexBackward keeps the ids), out.add_(bias) in place (the result is out's storage). */
int expert_bias_add(tracer *tr, int out, int bias_rows, const char *name)
{
    char nm[40];
    int o = like(tr, sub_name(nm, sizeof nm, name, "add_bias"), out, dt(tr, out), true);
    opnew(tr, nm, GCKPT_OP_ELEM, 2, (int[]){out, bias_rows}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_ADD, GCKPT_BC_NONE, 0, 0, 0);
    gckpt_op *op = last_op(tr);
    op->view_fwd = op->in_place = true;
    op->grad_alias[0] = op->grad_alias[1] = true;
    return o;
}

/* GptOssExperts._apply_gate on the [S, 2I] gate_up output (gate and up interleaved:
 * [..., ::2] and [..., 1::2], views): gate.clamp(max=limit) and up.clamp(-limit, limit)
 * (each saves its input, the view); glu = gate * sigmoid(gate * alpha); (up + 1) * glu.
 * The clamped halves and glu are locals until it returns. */
int clamped_swiglu(tracer *tr, int g, int u)
{
    const gckpt_model *m = tr->m;
    int gc = unary(tr, g, "gate.clamp", false, GCKPT_P_CLAMP, -HUGE_VAL);
    last_op(tr)->sb = m->swiglu_limit;
    int uc = unary(tr, u, "up.clamp", false, GCKPT_P_CLAMP, -m->swiglu_limit);
    last_op(tr)->sb = m->swiglu_limit;
    int ga = scal(tr, gc, "gate.alpha", m->swiglu_alpha, 0);
    int sg = unary(tr, ga, "sigmoid", false, GCKPT_P_SIGMOID, 0);
    int glu = mul(tr, gc, sg, "glu");
    int u1 = scal(tr, uc, "up.plus_one", 1.0, 1.0);
    int out = mul(tr, u1, glu, "gated_output");
    hold_here(tr, gc);
    hold_here(tr, uc);
    hold_here(tr, glu);
    return out;
}
