/* Attention as the tracer sees it: fused SDPA (CUDA's kernels; the CPU target's math path
 * with dropout), HF's eager attention for the llama family and for GPT-2, and the views
 * and copies around them (repeat_kv, matmul's batch folding, gpt2's packed q/k/v). */
#include "recipe_tracer.h"

#include <math.h>
#include <stdio.h>

static int repeat_to(tracer *tr, int x, uint8_t dtype, const char *name);

/* Fused SDPA (flash / memory-efficient on CUDA): saves q, k, v, out and logsumexp. The
 * backward allocates an fp32 dq accumulator. GQA via enable_gqa: no repeated k/v.
 * With the sliding-window mask (tr->sdpa_masked): transformers repeats k and v to every
 * head (use_gqa_in_sdpa is false with a mask), and SDPA converts the shared bool mask
 * to q's dtype (zeros_like, then masked_fill_ of its logical_not: both [b, 1, s, s],
 * materialised) and saves the converted mask (FINDINGS R-ATTN-8). A float mask
 * (tr->float_mask) is read as it is, under autocast cast to the compute dtype, and saved. */
static int sdpa_fused(tracer *tr, int q, int k, int v, double p)
{
    const gckpt_model *m = tr->m;
    bool masked = (tr->sdpa_masked && tr->sdpa_mask >= 0) || tr->float_mask >= 0;
    if (masked && m->kv_heads < m->heads) {
        k = repeat_to(tr, k, dt(tr, k), "sdpa.repeat_k");
        v = repeat_to(tr, v, dt(tr, v), "sdpa.repeat_v");
    }
    q = autocast_to(tr, q, tr->compute_dt, "sdpa.cast_q");
    k = autocast_to(tr, k, tr->compute_dt, "sdpa.cast_k");
    v = autocast_to(tr, v, tr->compute_dt, "sdpa.cast_v");
    int mconv = -1;
    if (tr->float_mask >= 0) {
        mconv = autocast_to(tr, tr->float_mask, tr->compute_dt, "sdpa.cast_mask");
    } else if (masked) {
        mconv = tnew(tr, "sdpa.mask", GCKPT_T_ACT, dt(tr, q), score_shape(1), false);
        opnew(tr, "sdpa.mask", GCKPT_OP_ELEM, 1, (int[]){tr->sdpa_mask}, mconv, -1, 0, NULL);
        setprim(tr, GCKPT_P_BOOL_MASK, GCKPT_BC_NONE, 0, 0, 0);
        int lnot = tnew(tr, "sdpa.mask_not", GCKPT_T_ACT, BOOL, score_shape(1), false);
        opnew(tr, "sdpa.mask_not", GCKPT_OP_ELEM, 1, (int[]){tr->sdpa_mask}, lnot, -1, 0, NULL);
        setprim(tr, GCKPT_P_BOOL_MASK, GCKPT_BC_NONE, 1, 0, 0);
    }
    uint64_t qd = m->heads * gckpt_v_head_dim(m); /* the output: v's head dim */
    int o = tnew(tr, "sdpa", GCKPT_T_ACT, dt(tr, q), per_token(qd), true);
    int lse = tnew(tr, "sdpa.lse", GCKPT_T_ACT, F32, per_token(m->heads), false);
    int op = masked ? opnew(tr, "sdpa", GCKPT_OP_ATTN, 4, (int[]){q, k, v, mconv}, o, lse, 6, (int[]){q, k, v, o, lse, mconv})
                    : opnew(tr, "sdpa", GCKPT_OP_ATTN, 3, (int[]){q, k, v}, o, lse, 5, (int[]){q, k, v, o, lse});
    /* sb: the score scale */
    setprim(tr, GCKPT_P_SDPA, GCKPT_BC_NONE, p, gckpt_attn_scale(m), m->head_dim);
    attn_dims(tr, masked ? m->heads : m->kv_heads); /* the mask's k and v are repeated to every head */
    /* causal: QK^T and PV over half the score matrix; with a mask no block is skipped
     * (measured on the CPU, FINDINGS R-ATTN-8; CUDA's memory-efficient kernel likewise) */
    count_flops(tr);
    gckpt_op *sd = &tr->r->op[op];
    sd->bwd_mult = 2.5;
    /* the CPU kernel keeps none; the accumulator is shaped like q (MLA: qk heads, wider than
     * the output's v heads) */
    sd->bws_cT = gckpt_prim_of(GCKPT_P_SDPA)->bws_dq && !tr->cpu ? m->heads * gckpt_qk_head_dim(m) : 0;
    /* CUDA with dropout: the fused kernel (flash for 16-bit, memory-efficient for fp32;
     * cuDNN only takes p a multiple of 1/16) keeps no mask, only the Philox seed and
     * offset to regenerate it in the backward, as CPU scalar tensors outside CUDA-graph
     * capture: no device bytes. The CPU runs the math path instead (sdpa_math_cpu), so
     * this is not measured (gckpt_recipe_unverified) */
    return o;
}

/* k / v with every kv head repeated for its query heads ([rows, heads * hd]) in dtype; its
 * rows are x's (mllama's cross-attention keys: the image features', not the tokens'). */
static int repeat_to(tracer *tr, int x, uint8_t dtype, const char *name)
{
    const gckpt_model *m = tr->m;
    gckpt_shape sh = tr->r->t[x].shape;
    sh.width = gckpt_q_dim(m);
    if (sh.rows == GCKPT_ROWS_TOKENS) sh = per_token(gckpt_q_dim(m));
    int o = tnew(tr, name, GCKPT_T_ACT, dtype, sh, rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_REPEAT_KV, GCKPT_BC_NONE, 0, 0, m->head_dim);
    attn_dims(tr, m->kv_heads);
    return o;
}

/* matmul's batch folding of a [b, heads, s, hd] operand that is not laid out that way
 * (q, k, v straight from projections or rope: [b, s, heads, hd]; an expanded kv head):
 * reshape to [b*heads, s, hd] copies when b > 1 and is a view when b = 1. The copy's
 * gradient is the output's, viewed. prim: CAST (a copy) or REPEAT_KV (an expand). */
static int fold(tracer *tr, int x, int prim, const char *name)
{
    int o = like(tr, name, x, dt(tr, x), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, prim, GCKPT_BC_NONE, 0, 0, tr->m->head_dim);
    attn_dims(tr, tr->m->kv_heads);
    gckpt_op *op = last_op(tr);
    op->batched_copy = true;
    op->grad_alias[0] = true;
    op->grad_view[0] = true;
    return o;
}

/* One of q, k, v (role 0, 1, 2) of gpt2's packed c_attn output: HF's split, a view.
 * Autograd's SplitBackward waits for the three roles' gradients (the engine's input
 * buffer holds them) and cats them into one buffer: the first role's backward in the
 * planner's order allocates the packed gradient, the others write their block into it
 * (recipe.h, GCKPT_P_SPLIT). */
int slice_of(tracer *tr, int x, int role, uint64_t width, const char *name)
{
    /* its first column: the widths of the blocks sliced before it (roles in order; Phi-3's
     * k and v are narrower than q under GQA) */
    uint64_t off = 0;
    for (int i = 0; i < tr->r->nop; i++) {
        const gckpt_op *p = &tr->r->op[i];
        if (p->prim == GCKPT_P_SPLIT && p->view_fwd && p->in[0] == x) off += tr->r->t[p->out[0]].shape.width;
    }
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, x), per_token(width), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_SPLIT, GCKPT_BC_NONE, role, (double)off, tr->m->head_dim);
    last_op(tr)->view_fwd = true;
    return o;
}

/* matmul's batch folding of a role view (a copy of its block when b > 1), or of a
 * tensor that autocast cast (dense) */
static int fold_role(tracer *tr, int x, int view, int role, const char *name)
{
    if (x != view) return fold(tr, x, GCKPT_P_CAST, name);
    int o = fold(tr, x, GCKPT_P_SPLIT, name);
    last_op(tr)->sa = role;
    last_op(tr)->sb = (double)((uint64_t)role * tr->r->t[x].shape.width); /* its first column */
    return o;
}

/* repeat_kv(k or v) at the start of HF's eager attention (expand + reshape): a copy
 * when 1 < kv heads < heads; the tensor itself when kv = heads; for one kv head a view
 * (the reshape only merges a size-1 dimension) whose gradient is still per query head
 * and is summed over them late in the backward (its autograd node comes first). */
static int repeat_kv(tracer *tr, int x, const char *name)
{
    const gckpt_model *m = tr->m;
    if (m->kv_heads == m->heads) return x;
    int o = repeat_to(tr, x, dt(tr, x), name);
    last_op(tr)->view_fwd = m->kv_heads == 1;
    return o;
}

/* k or v as a matmul operand (x: repeat_kv's result): autocast's cast to the compute
 * dtype and matmul's batch folding. A repeated tensor is contiguous (the cast keeps
 * that, no folding); with kv = heads the cast keeps the [b, s, heads, hd] layout and
 * folding copies when b > 1; for one kv head (an expanded view) autocast's cast
 * materialises the expand, else folding does when b > 1. */
static int kv_operand(tracer *tr, int x, const char *name)
{
    const gckpt_model *m = tr->m;
    char nm[40];
    snprintf(nm, sizeof nm, "%s.fold", name);
    if (m->kv_heads > 1 && m->kv_heads < m->heads) return autocast_to(tr, x, tr->compute_dt, name);
    if (m->kv_heads == m->heads) return fold(tr, autocast_to(tr, x, tr->compute_dt, name), GCKPT_P_CAST, nm);
    if (tr->amp && dt(tr, x) != tr->compute_dt) return repeat_to(tr, x, tr->compute_dt, name); /* from the expanded view */
    return fold(tr, x, GCKPT_P_REPEAT_KV, nm);
}

/* One role (q, k or v) of SDPA's inputs, [rows, heads * hd]: gpt2's q, k, v are views
 * of one packed [rows, 3 * hidden] tensor (a view op here: no allocation). */
static int sdpa_role(tracer *tr, int x, int role, uint64_t width, const char *name)
{
    if (tr->r->t[x].shape.width == width) return x;
    return slice_of(tr, x, role, width, name);
}

/* A batched matmul over heads: scores = q k^T (QK) or out = P V (PV); saves both
 * operands, whose gradients are views of bmm's results. flops: counted in time (the
 * CPU target's math path leaves them out). */
static int heads_matmul(tracer *tr, const char *name, int prim, int a, int b, uint8_t dtype, gckpt_shape sh,
                        bool flops)
{
    const gckpt_model *m = tr->m;
    int o = tnew(tr, name, GCKPT_T_ACT, dtype, sh, true);
    opnew(tr, name, GCKPT_OP_MATMUL, 2, (int[]){a, b}, o, -1, 2, (int[]){a, b});
    setprim(tr, prim, GCKPT_BC_NONE, prim == GCKPT_P_QK ? 1.0 : 0.0, 0, m->head_dim);
    attn_dims(tr, m->heads); /* k and v repeated to every query head (or an expanded view) */
    gckpt_op *op = last_op(tr);
    if (flops) {
        count_flops(tr);
        op->bwd_mult = 2.0;
    }
    op->grad_view[0] = op->grad_view[1] = true;
    return o;
}

/* softmax over the last dimension in x's dtype; saves its output */
static int softmax(tracer *tr, int x, const char *name)
{
    int pr = like(tr, name, x, dt(tr, x), true);
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, pr, -1, 1, (int[]){pr});
    setprim(tr, GCKPT_P_SOFTMAX, GCKPT_BC_NONE, 0, 0, 0);
    return pr;
}

/* (b, nh, s, hd) -> (b, s, nh*hd): transpose + contiguous is a copy */
int transpose_copy(tracer *tr, int o, const char *name)
{
    int oc = like(tr, name, o, dt(tr, o), true);
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){o}, oc, -1, 0, NULL);
    setprim(tr, GCKPT_P_TRANSPOSE, GCKPT_BC_NONE, 0, 0, gckpt_v_head_dim(tr->m)); /* P V heads: v_dim */
    attn_dims(tr, tr->m->heads);
    return oc;
}

/* CPU target, SDPA with dropout: the CPU flash kernel has no dropout, so PyTorch runs
 * _scaled_dot_product_attention_math, a composite (measured op by op with the allocator,
 * FINDINGS.md R-ATTN-5): 16-bit q, k, v upcast to fp32; q * sqrt(scale); a [s, s] fp32 causal
 * mask; GQA expands and clones k and v; k^T * sqrt(scale); matmul (batch folding);
 * the mask added in place; _safe_softmax (with bool isneginf / all temporaries);
 * dropout; matmul; the output (and the returned weights) cast back. Its locals live
 * until it returns. HF's transpose(1, 2).contiguous() then copies the output. */
static int sdpa_math_cpu(tracer *tr, int q, int k, int v, double p)
{
    const gckpt_model *m = tr->m;
    uint64_t nh = m->heads, kv = m->kv_heads, qd = nh * gckpt_qk_head_dim(m), kd = kv * gckpt_qk_head_dim(m);
    uint64_t vd = kv * gckpt_v_head_dim(m);
    q = autocast_to(tr, q, tr->compute_dt, "sdpa.cast_q");
    k = autocast_to(tr, k, tr->compute_dt, "sdpa.cast_k");
    v = autocast_to(tr, v, tr->compute_dt, "sdpa.cast_v");
    int cast_in[3] = {q, k, v};
    bool packed = q == k; /* gpt2: views of one tensor, laid out [b, s, 3h]: not dense */
    q = sdpa_role(tr, q, 0, qd, "math.q");
    k = sdpa_role(tr, k, 1, kd, "math.k");
    v = sdpa_role(tr, v, 2, vd, "math.v");
    uint8_t odt = dt(tr, q);
    int up[3] = {-1, -1, -1};
    if (odt != F32) {
        q = up[0] = cast_to(tr, q, F32, "math.q_f32");
        k = up[1] = cast_to(tr, k, F32, "math.k_f32");
        v = up[2] = cast_to(tr, v, F32, "math.v_f32");
    }
    double sf = sqrt(gckpt_attn_scale(m));
    int qs = scal(tr, q, "math.scale_q", sf, 0);
    int mask = tnew(tr, "math.mask", GCKPT_T_ACT, F32, (gckpt_shape){GCKPT_ROWS_SEQ, 1, 0}, false); /* [s, s] */
    opnew(tr, "math.mask", GCKPT_OP_ELEM, 1, (int[]){q}, mask, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    int kr = k, vr = v;
    if (kv < nh) { /* expand + clone: contiguous */
        kr = repeat_to(tr, k, F32, "math.repeat_k");
        vr = repeat_to(tr, v, F32, "math.repeat_v");
    }
    int ks = scal(tr, kr, "math.scale_k", sf, 0);
    /* q and k straight from rope keep the [b, s, heads, hd] layout through the casts and
     * scalings (folding copies them when b > 1); views of a packed tensor are not dense:
     * those results are contiguous, as are the GQA clones */
    bool lay = !packed && !m->mla; /* MLA's query and key: cats, contiguous [b, heads, s, qk] */
    int qf = lay ? fold(tr, qs, GCKPT_P_CAST, "math.fold_q") : qs;
    int kf = lay && kv == nh ? fold(tr, ks, GCKPT_P_CAST, "math.fold_k") : ks;
    int sc = heads_matmul(tr, "math.qk", GCKPT_P_QK, qf, kf, F32, score_shape(nh), false);
    int pr = softmax(tr, sc, "math.softmax");
    last_op(tr)->fws_bBSS = nh; /* isneginf: bool [b, heads, s, s] */
    last_op(tr)->fws_bT = nh;   /* all: bool [b, heads, s] */
    int pd = dropout(tr, pr, p, "math.dropout");
    /* MLA's value is a strided view of kv_b_proj's output: folded as it is, or the upcast
     * copy, which keeps the view's [b, s, heads, v] order (to() of a tensor that is not
     * dense gives dense strides in its order, FINDINGS R-MOE-10): folded too */
    bool fold_v = m->mla || kv == nh;
    int vf = fold_v ? fold(tr, vr, GCKPT_P_CAST, "math.fold_v") : vr;
    int w = -1;
    if (odt != F32) { /* the returned attention weights, cast back: dropped with the tuple */
        w = tnew(tr, "math.weights", GCKPT_T_ACT, odt, score_shape(nh), false);
        opnew(tr, "math.weights", GCKPT_OP_ELEM, 1, (int[]){pd}, w, -1, 0, NULL);
        setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    }
    int o = heads_matmul(tr, "math.pv", GCKPT_P_PV, pd, vf, F32, per_token(nh * gckpt_v_head_dim(m)), false);
    o = cast_to(tr, o, odt, "math.out");
    /* the function's locals, and autocast's casts until SDPA returns */
    int held[] = {up[0], up[1], up[2], qs, kr, mask, w, cast_in[0], cast_in[1], cast_in[2]};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++) hold_here(tr, held[i]);
    return transpose_copy(tr, o, "math.transpose");
}

/* The CPU's flash kernel needs equal q / k and v head dims: MLA's run the math path
 * (FINDINGS R-MOE-8; CUDA's memory-efficient kernel: gckpt_recipe_unverified). */
int attention_sdpa(tracer *tr, int q, int k, int v, double p)
{
    bool math = p > 0 || gckpt_qk_head_dim(tr->m) != gckpt_v_head_dim(tr->m);
    return tr->cpu && math ? sdpa_math_cpu(tr, q, k, v, p) : sdpa_fused(tr, q, k, v, p);
}

/* Eager attention (HF's eager_attention_forward), llama family: QK^T, scale, mask,
 * softmax(dtype=float32) — a float32 copy of bf16 scores first (ATen's softmax converts
 * the input unless CUDA's fp16 half_to_float path applies) —, .to(query dtype), dropout,
 * P V, transpose(1, 2).contiguous(). Returns the output; *weights = the returned
 * attention weights (the decoder layer keeps them in `_` until it returns). */
int attention_eager(tracer *tr, int q, int k, int v, int mask, double p, int *weights)
{
    const gckpt_model *m = tr->m;
    uint64_t nh = m->heads;
    int krep = repeat_kv(tr, k, "repeat_k"), vrep = repeat_kv(tr, v, "repeat_v");
    /* gpt_oss's rotary cat leaves q and k contiguous [b, heads, s, hd]: folding is a view */
    int qf = autocast_to(tr, q, tr->compute_dt, "qk.cast_q");
    bool contiguous = m->rope_halves || m->mla; /* MLA's query and key: cats */
    if (!contiguous) qf = fold(tr, qf, GCKPT_P_CAST, "qk.fold_q");
    int kf = contiguous && m->kv_heads == m->heads ? autocast_to(tr, krep, tr->compute_dt, "qk.cast_k")
                                                   : kv_operand(tr, krep, "qk.cast_k");
    int sc = heads_matmul(tr, "qk", GCKPT_P_QK, qf, kf, dt(tr, qf), score_shape(nh), true);
    int ss = scal(tr, sc, "scale", gckpt_attn_scale(m), 0);
    if (m->attn_softcap > 0) { /* Gemma 2: / cap, tanh (saves its output), * cap: each a new tensor */
        ss = scal(tr, ss, "softcap.div", 1.0 / m->attn_softcap, 0);
        ss = unary(tr, ss, "softcap.tanh", false, GCKPT_P_TANH, 0);
        ss = scal(tr, ss, "softcap.mul", m->attn_softcap, 0);
    }
    int sm = mask >= 0 ? add(tr, ss, mask, "add_mask") : ss;
    int combined = -1, pr;
    if (m->attn_sinks) { /* gpt_oss: dropout(probs[..., :-1]).to(value dtype) */
        pr = dropout(tr, sink_softmax(tr, sm, &combined), p, "attn_dropout");
        pr = cast_to(tr, pr, dt(tr, v), "softmax.to_v");
        hold_here(tr, sm);
    } else {
        /* (CUDA's half_to_float path would skip the copy for fp16 scores; they never get
         * here: under autocast the fp32 mask promotes the scores, and no precision runs a
         * pure fp16 model) */
        pr = softmax(tr, cast_to(tr, sm, F32, "softmax.to_f32"), "softmax");
        pr = cast_to(tr, pr, dt(tr, q), "softmax.to_q");
        hold_here(tr, sm); /* attn_weights is rebound only when the whole statement is done */
        pr = dropout(tr, pr, p, "attn_dropout");
    }
    *weights = pr;
    int pc = autocast_to(tr, pr, tr->compute_dt, "pv.cast_p");
    int vf = kv_operand(tr, vrep, "pv.cast_v");
    int o = heads_matmul(tr, "pv", GCKPT_P_PV, pc, vf, dt(tr, pc), per_token(nh * gckpt_v_head_dim(m)), true);
    int oc = transpose_copy(tr, o, "transpose");
    hold_here(tr, krep); /* key_states / value_states (gpt_oss: combined_logits) until the function returns */
    hold_here(tr, vrep);
    hold_here(tr, combined);
    return oc;
}

/* GPT-2's eager attention: q, k, v are views of c_attn's output (HF's split); matmul
 * folds each (a copy when b > 1); softmax in the scores' dtype (fp32 under autocast: the
 * fp32 mask promotes them), .type(value dtype), dropout, P V, transpose (HF's reshape +
 * contiguous copies). */
int attention_eager_gpt2(tracer *tr, int qkv, int mask, double p, int *weights)
{
    const gckpt_model *m = tr->m;
    uint64_t nh = m->heads, hd = m->head_dim;
    int q = slice_of(tr, qkv, 0, nh * hd, "q");
    int k = slice_of(tr, qkv, 1, nh * hd, "k");
    int v = slice_of(tr, qkv, 2, nh * hd, "v");
    int qc = autocast_to(tr, q, tr->compute_dt, "qk.cast_q"), kc = autocast_to(tr, k, tr->compute_dt, "qk.cast_k");
    int qf = fold_role(tr, qc, q, 0, "qk.fold_q");
    int kf = fold_role(tr, kc, k, 1, "qk.fold_k");
    int sc = heads_matmul(tr, "qk", GCKPT_P_QK, qf, kf, dt(tr, qf), score_shape(nh), true);
    int ss = scal(tr, sc, "scale", gckpt_attn_scale(m), 0);
    int sm = mask >= 0 ? add(tr, ss, mask, "add_mask") : ss;
    int pr = softmax(tr, autocast_fp32(tr, sm, "softmax.cast_in"), "softmax");
    pr = cast_to(tr, pr, dt(tr, v), "softmax.to_v");
    pr = dropout(tr, pr, p, "attn_dropout");
    *weights = pr;
    int pc = autocast_to(tr, pr, tr->compute_dt, "pv.cast_p"), vc = autocast_to(tr, v, tr->compute_dt, "pv.cast_v");
    int vf = fold_role(tr, vc, v, 2, "pv.fold_v");
    int o = heads_matmul(tr, "pv", GCKPT_P_PV, pc, vf, dt(tr, pc), per_token(nh * hd), true);
    return transpose_copy(tr, o, "transpose");
}

/* Each head's first columns of x, `width` in all (Phi-3's x[..., :rotary_dim]): a view
 * (SPLIT with role -1: per head of head_dim). */
int slice_view(tracer *tr, int x, uint64_t width, const char *name)
{
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, x), per_token(width), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 1, (int[]){x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_SPLIT, GCKPT_BC_NONE, -1, 0, tr->m->head_dim);
    last_op(tr)->view_fwd = true;
    return o;
}

/* torch.cat([y, the rest of x]) shaped like x: a new tensor; saves nothing. */
int cat_copy(tracer *tr, int y, int x, const char *name)
{
    int o = like(tr, name, x, dt(tr, y), rg(tr, y) || rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 2, (int[]){y, x}, o, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAT_PASS, GCKPT_BC_NONE, 0, 0, tr->m->head_dim);
    return o;
}
