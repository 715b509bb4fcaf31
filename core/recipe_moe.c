/* The mixture-of-experts block of mixtral, qwen3_moe and olmoe as transformers 5.24
 * trains it by default: the router (<Family>TopKRouter) and the experts under
 * experts_implementation "grouped_mm" (modeling_utils.get_correct_experts_implementation
 * picks it when none is requested; integrations/moe.py:grouped_mm_experts_forward).
 * Every tensor is [T, ...], [S = T * top_k, ...] or [E, ...]: what autograd saves does not
 * depend on how the router spreads the tokens (FINDINGS R-MOE-3). grouped_mm is not an
 * autocast op and casts its input to the weight's dtype: under AMP the experts run in
 * fp32 (no bf16 weight copies). */
#include "recipe_tracer.h"

#include <stdio.h>

/* [S, width]: one row per (token, chosen expert) pair */
static gckpt_shape pairs(const tracer *tr, uint64_t width)
{
    return (gckpt_shape){GCKPT_ROWS_TOKENS, tr->m->top_k, width};
}

/* An elementwise-kind op with one or two outputs, its prim and group width. */
static void node(tracer *tr, const char *name, int prim, int nin, const int *in, int out, int out2, int nsaved,
                 const int *saved, int bcast, double sa, uint64_t width)
{
    opnew(tr, name, GCKPT_OP_ELEM, nin, in, out, out2, nsaved, saved);
    setprim(tr, prim, bcast, sa, 0, width);
}

/* The router returns its logits; the block drops them, unless output_router_logits:
 * the output collector (OutputRecorder) keeps them until the forward returns, also in
 * checkpointed layers (not a recompute's). */
static void router_returns(tracer *tr, int logits)
{
    hold_here(tr, logits);
    tr->r->t[logits].fwd_end_free = tr->m->router_aux_loss;
    if (tr->m->router_aux_loss) tr->r->router_logits[0] = logits;
}

/* GptOssTopKRouter: topk of the logits (their dtype; the indices saved), then a softmax
 * over those k in the same dtype (dtype=router_top_value.dtype: bf16 under autocast
 * too), whose output is saved and is the routing weights. */
static int router_topk_softmax(tracer *tr, int logits, int *index)
{
    uint64_t k = tr->m->top_k;
    int vals = tnew(tr, "topk.values", GCKPT_T_ACT, dt(tr, logits), per_token(k), rg(tr, logits));
    *index = tnew(tr, "topk.indices", GCKPT_T_ACT, I64, per_token(k), false);
    node(tr, "topk", GCKPT_P_TOPK, 1, (int[]){logits}, vals, *index, 1, (int[]){*index}, GCKPT_BC_NONE, 0, k);
    expert_dims(tr);
    int sc = like(tr, "router_scores", vals, dt(tr, vals), rg(tr, vals));
    node(tr, "softmax", GCKPT_P_SOFTMAX, 1, (int[]){vals}, sc, -1, 1, (int[]){sc}, GCKPT_BC_NONE, 0, k);
    hold_here(tr, vals);
    router_returns(tr, logits);
    return sc;
}

/* <Family>TopKRouter: logits = F.linear(x, W) (autocast), softmax in fp32 (mixtral:
 * softmax(logits.float()); the others softmax(logits, dtype=float)), topk; mixtral always
 * and the others with norm_topk_prob divide the top-k values by their sum in place (the
 * div keeps the sum and its result); the others then cast the weights to the logits'
 * dtype. *index = the int64 top-k indices. Returns the routing weights [T, top_k]. */
static int router(tracer *tr, int x, int *index)
{
    const gckpt_model *m = tr->m;
    uint64_t E = m->experts, k = m->top_k;
    const char *name = m->router_bias ? "router" : "gate"; /* gpt_oss: mlp.router, with a bias */
    char nm[40];
    snprintf(nm, sizeof nm, "%s.weight", name);
    int w = param(tr, nm, E, m->hidden, GCKPT_ROLE_MATRIX);
    snprintf(nm, sizeof nm, "%s.bias", name);
    int b = m->router_bias ? param(tr, nm, 1, E, GCKPT_ROLE_BIAS) : -1;
    int logits = linear(tr, x, w, b, m->hidden, E, name);
    if (m->topk_first) return router_topk_softmax(tr, logits, index);
    int lf = m->topk_weights_f32 ? cast_to(tr, logits, F32, "router_logits.float") : logits;
    int probs = like(tr, "router_probs", lf, F32, rg(tr, lf));
    node(tr, "softmax", GCKPT_P_SOFTMAX, 1, (int[]){lf}, probs, -1, 1, (int[]){probs}, GCKPT_BC_NONE, 0, E);
    int vals = tnew(tr, "topk.values", GCKPT_T_ACT, F32, per_token(k), rg(tr, probs));
    *index = tnew(tr, "topk.indices", GCKPT_T_ACT, I64, per_token(k), false);
    node(tr, "topk", GCKPT_P_TOPK, 1, (int[]){probs}, vals, *index, 1, (int[]){*index}, GCKPT_BC_NONE, 0, k);
    expert_dims(tr);
    if (m->topk_renorm) {
        int sum = tnew(tr, "topk.sum", GCKPT_T_ACT, F32, per_token(1), rg(tr, vals));
        node(tr, "topk.sum", GCKPT_P_SUM, 1, (int[]){vals}, sum, -1, 0, NULL, GCKPT_BC_NONE, 0, k);
        if (liger_experts_planned(tr)) {
            /* router_top_value /= sum runs in place: DivBackward0 keeps a clone of the values,
             * and the quotient is the top-k values' storage, which LigerFusedMoEFunction saves
             * when it is the routing weights (no cast): a second [T, k] (hf-liger fixtures) */
            int cl = like(tr, "topk.values.clone", vals, F32, false);
            node(tr, "topk.values.clone", GCKPT_P_CAST, 1, (int[]){vals}, cl, -1, 0, NULL, GCKPT_BC_NONE, 0, 0);
            int div = like(tr, "topk.div_", vals, F32, rg(tr, vals));
            node(tr, "topk.div_", GCKPT_P_DIV, 2, (int[]){vals, sum}, div, -1, 2, (int[]){sum, cl}, GCKPT_BC_ROW, 0, k);
            last_op(tr)->view_fwd = last_op(tr)->in_place = true;
            hold_here(tr, cl);
            vals = div;
        } else {
            int div = like(tr, "topk.div", vals, F32, rg(tr, vals));
            node(tr, "topk.div", GCKPT_P_DIV, 2, (int[]){vals, sum}, div, -1, 2, (int[]){sum, div}, GCKPT_BC_ROW, 0, k);
            vals = div;
        }
    }
    if (!m->topk_weights_f32) vals = cast_to(tr, vals, dt(tr, logits), "router_scores.to");
    router_returns(tr, logits);
    return vals;
}

/* A new [T, width] activation of dtype from one op (prim, input x), saving nothing. */
static int per_tok(tracer *tr, const char *name, int prim, int x, uint8_t dtype, uint64_t width, bool grad,
                   uint64_t group)
{
    int o = tnew(tr, name, GCKPT_T_ACT, dtype, per_token(width), grad);
    node(tr, name, prim, 1, (int[]){x}, o, -1, 0, NULL, GCKPT_BC_NONE, 0, group);
    return o;
}

/* top-k over rows of `width` of x: values (x's dtype) and the int64 indices, which TopkBackward
 * keeps when x needs a gradient; *index = the indices */
static int topk_rows(tracer *tr, const char *name, int x, uint64_t rows, uint64_t k, uint64_t width, int *index)
{
    char nm[40];
    snprintf(nm, sizeof nm, "%s.values", name);
    int v = tnew(tr, nm, GCKPT_T_ACT, dt(tr, x), per_token(rows * k), rg(tr, x));
    snprintf(nm, sizeof nm, "%s.indices", name);
    *index = tnew(tr, nm, GCKPT_T_ACT, I64, per_token(rows * k), false);
    node(tr, name, GCKPT_P_TOPK, 1, (int[]){x}, v, *index, 1, (int[]){*index}, GCKPT_BC_NONE, 0, k);
    last_op(tr)->experts = (uint32_t)width;
    last_op(tr)->top_k = (uint32_t)k;
    return v;
}

/* The op just traced is on a branch that never reaches the loss: what it saves is packed
 * but goes with the node (recipe.h ndead); the caller holds it as long as the node lives. */
static void dead_branch(tracer *tr)
{
    gckpt_op *op = last_op(tr);
    for (int k = 0; k < op->nsaved && op->ndead < 2; k++) op->dead[op->ndead++] = op->saved[k];
    op->nsaved = 0;
}

/* DeepseekV3TopkRouter (FINDINGS R-MOE-8): logits = F.linear(x.type(float32),
 * W.type(float32)) (fp32 copies outside autocast where x or W is 16-bit; under autocast a
 * bf16 linear), scores = sigmoid (keeps its output), + e_score_correction_bias (an fp32
 * buffer: fp32), each group's top two summed, the top topk_group groups' mask expanded to
 * [T, E] (a copy), its bool and logical_not (the masked_fill keeps the latter), top_k of
 * the masked scores (keeps the int64 indices), the scores gathered (the same indices),
 * with norm_topk_prob divided in place by their sum + 1e-20 (on autocast's fp32 list; the
 * div keeps the fp32 denominator and its result), x routed_scaling_factor. The gate's
 * locals live until it returns; the MoE block keeps the logits (`_`) until it returns. */
static int router_grouped(tracer *tr, int x, int *index, int *logits_out)
{
    const gckpt_model *m = tr->m;
    uint64_t E = m->experts, k = m->top_k, G = m->n_group, tg = m->topk_group;
    int w = param(tr, "gate.weight", E, m->hidden, GCKPT_ROLE_MATRIX);
    int xf = tr->amp ? x : cast_to(tr, x, F32, "gate.x_f32");
    int wf = tr->amp ? w : cast_to(tr, w, F32, "gate.weight_f32");
    int logits = linear(tr, xf, wf, -1, m->hidden, E, "gate");
    int scores = unary(tr, logits, "gate.sigmoid", false, GCKPT_P_SIGMOID, 0);
    int choice = per_tok(tr, "gate.scores_for_choice", GCKPT_P_AFFINE, scores, F32, E, rg(tr, scores), 0);
    last_op(tr)->sa = 1;
    if (tr->cpu && dt(tr, scores) != F32) last_op(tr)->fws_promote = 1; /* the bf16 scores' fp32 copy */
    /* the choice's branch (bias add, the group and final top-k, the mask) never reaches the
     * loss (its results are indices): its nodes, and what they keep, go with the gate's
     * locals (group_scores, scores_for_choice) when it returns */
    int gidx, tidx;
    int g2 = topk_rows(tr, "gate.group_top2", choice, G, 2, E / G, &gidx);
    dead_branch(tr);
    int gsum = per_tok(tr, "gate.group_scores", GCKPT_P_SUM, g2, dt(tr, g2), G, rg(tr, g2), 2);
    last_op(tr)->sa = 1; /* contiguous pairs (gckpt_sum_block) */
    hold_here(tr, g2);
    int gtop = topk_rows(tr, "gate.group_topk", gsum, 1, tg, G, &tidx);
    dead_branch(tr);
    /* the mask's ops (GCKPT_P_ROUTE_MASK: scatter_ of ones, the expand's copy, ~, masked_fill) */
    int gmask = per_tok(tr, "gate.group_mask", GCKPT_P_ROUTE_MASK, tidx, dt(tr, gsum), G, false, G);
    hold_here(tr, gtop);
    int smask = per_tok(tr, "gate.score_mask", GCKPT_P_ROUTE_MASK, gmask, dt(tr, gmask), E, false, E);
    last_op(tr)->sa = 1;
    int sbool = per_tok(tr, "gate.score_mask.bool", GCKPT_P_CAST, smask, BOOL, E, false, 0);
    int snot = per_tok(tr, "gate.score_mask.not", GCKPT_P_ROUTE_MASK, sbool, BOOL, E, false, 0);
    last_op(tr)->sa = 2;
    int masked = tnew(tr, "gate.masked_fill", GCKPT_T_ACT, dt(tr, choice), per_token(E), rg(tr, choice));
    node(tr, "gate.masked_fill", GCKPT_P_ROUTE_MASK, 2, (int[]){choice, snot}, masked, -1, 1, (int[]){snot},
         GCKPT_BC_NONE, 3, 0);
    dead_branch(tr);
    hold_here(tr, choice); /* scores_for_choice rebound after the statement */
    hold_here(tr, sbool);
    int fv = topk_rows(tr, "gate.topk", masked, 1, k, E, index);
    dead_branch(tr); /* (its indices: the gather's too) */
    hold_here(tr, fv);
    int tw = tnew(tr, "gate.topk_weights", GCKPT_T_ACT, dt(tr, scores), per_token(k), rg(tr, scores));
    node(tr, "gate.gather", GCKPT_P_GATHER_ROWS, 2, (int[]){scores, *index}, tw, -1, 1, (int[]){*index}, GCKPT_BC_NONE,
         1, k); /* gather(1, topk_indices) */
    last_op(tr)->experts = (uint32_t)E;
    if (m->topk_renorm) {
        int twf = autocast_fp32(tr, tw, "gate.topk_weights.to_f32");
        int sum = per_tok(tr, "gate.denominator.sum", GCKPT_P_SUM, twf, dt(tr, twf), 1, rg(tr, twf), k);
        int den = scal(tr, sum, "gate.denominator", 1.0, 1e-20);
        int div = like(tr, "gate.topk_weights.div_", tw, dt(tr, tw), rg(tr, tw) || rg(tr, den));
        node(tr, "gate.topk_weights.div_", GCKPT_P_DIV, 2, (int[]){tw, den}, div, -1, 2, (int[]){den, div},
             GCKPT_BC_ROW, 0, k);
        last_op(tr)->view_fwd = last_op(tr)->in_place = true; /* topk_weights /= denominator */
        tw = div;
    }
    int out = scal(tr, tw, "gate.routed_scaling", m->routed_scale, 0);
    int locals[] = {x, xf, logits, scores, masked, gsum, gmask, smask, *index, tw, gidx, tidx, snot};
    for (size_t i = 0; i < sizeof locals / sizeof *locals; i++) hold_here(tr, locals[i]);
    tr->r->t[logits].fwd_end_free = m->router_logits_out; /* the output recorder's, to the forward's end */
    *logits_out = logits;
    return out;
}

/* One grouped_mm projection of the sorted pairs x by an [E, out_f, in_f] weight: saves
 * the offsets, and its input only for the weight's gradient (GroupedMmBackward0 of a
 * frozen weight keeps the weight and the offsets: LoRA, FINDINGS R-PEFT-27); a GEMM per
 * gradient over all S rows. (The executor reads the groups from the saved offsets:
 * interp_events.c grouped_offsets.) */
static int grouped_linear(tracer *tr, int x, int w, int offs, uint64_t in_f, uint64_t out_f, const char *name)
{
    int o = linear_node(tr, x, w, -1, in_f, out_f, name, dt(tr, w), (int[]){rg(tr, w) ? x : -1, offs});
    gckpt_op *op = last_op(tr);
    op->prim = GCKPT_P_GROUPED_LINEAR;
    expert_dims(tr);
    count_flops(tr); /* S = T * top_k rows */
    op->grad_view[0] = false;
    return o;
}

/* The column block `role` (0 gate, 1 up) of the [S, 2 * width] gate_up output: a view;
 * gpt_oss's are interleaved, gate_up[..., ::2] and [..., 1::2] (the interleaved SPLIT: 1
 * column of every 2, from column role) */
static int pair_chunk(tracer *tr, int x, int role, uint64_t width, const char *name)
{
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, x), pairs(tr, width), rg(tr, x));
    node(tr, name, GCKPT_P_SPLIT, 1, (int[]){x}, o, -1, 0, NULL, GCKPT_BC_NONE, role, width);
    gckpt_op *op = last_op(tr);
    op->view_fwd = true;
    op->sb = (double)((uint64_t)role * width); /* its first column (GCKPT_P_SPLIT) */
    if (tr->m->swiglu_limit > 0) {
        op->in_f = 2;
        op->out_f = 1;
        op->sb = role;
    }
    return o;
}

/* gpt_oss: bias[expert_ids_g], one row per sorted pair (IndexBackward keeps the ids). */
static int bias_rows(tracer *tr, int bias, int ids, uint64_t width, const char *name)
{
    if (bias < 0) return -1;
    int o = tnew(tr, name, GCKPT_T_ACT, dt(tr, bias), pairs(tr, width), rg(tr, bias));
    node(tr, name, GCKPT_P_GATHER_ROWS, 2, (int[]){bias, ids}, o, -1, 1, (int[]){ids}, GCKPT_BC_NONE, 0, width);
    return o;
}

int moe_block(tracer *tr, int x)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, E = m->experts, I = m->expert_inter;
    tr->pfx = "mlp";
    int index, logits = -1;
    int weights = m->router_groups ? router_grouped(tr, x, &index, &logits) : router(tr, x, &index);
    /* gpt_oss stores [E, in, out] (is_transposed) with biases; the others [E, out, in] */
    int wgu = m->expert_bias ? param(tr, "experts.gate_up_proj", E * h, 2 * I, GCKPT_ROLE_MATRIX)
                             : param(tr, "experts.gate_up_proj", E * 2 * I, h, GCKPT_ROLE_MATRIX);
    int bgu = m->expert_bias ? param(tr, "experts.gate_up_proj_bias", E, 2 * I, GCKPT_ROLE_BIAS) : -1;
    int wd = m->expert_bias ? param(tr, "experts.down_proj", E * I, h, GCKPT_ROLE_MATRIX)
                            : param(tr, "experts.down_proj", E * h, I, GCKPT_ROLE_MATRIX);
    int bd = m->expert_bias ? param(tr, "experts.down_proj_bias", E, h, GCKPT_ROLE_BIAS) : -1;
    if (liger_experts_planned(tr)) { /* --loss liger: LigerExperts (recipe_liger.c) */
        int out = liger_fused_moe(tr, x, index, weights, wgu, wd);
        int locals[] = {x, weights, index};
        for (size_t i = 0; i < sizeof locals / sizeof *locals; i++) hold_here(tr, locals[i]);
        tr->pfx = "";
        return out;
    }
    /* expert_ids_g, perm = sort(expert ids); hidden[perm // k], weights[perm] (index
     * saves its index) */
    int ids = tnew(tr, "expert_ids_g", GCKPT_T_ACT, I64, pairs(tr, 1), false);
    int perm = tnew(tr, "perm", GCKPT_T_ACT, I64, pairs(tr, 1), false);
    node(tr, "sort", GCKPT_P_SORT, 1, (int[]){index}, ids, perm, 0, NULL, GCKPT_BC_NONE, 0, 0);
    int tok = tnew(tr, "perm_token", GCKPT_T_ACT, I64, pairs(tr, 1), false);
    node(tr, "perm_floordiv", GCKPT_P_FLOORDIV, 1, (int[]){perm}, tok, -1, 0, NULL, GCKPT_BC_NONE, (double)m->top_k, 0);
    int xs = tnew(tr, "selected_hidden", GCKPT_T_ACT, dt(tr, x), pairs(tr, h), rg(tr, x));
    node(tr, "gather_hidden", GCKPT_P_GATHER_ROWS, 2, (int[]){x, tok}, xs, -1, 1, (int[]){tok}, GCKPT_BC_NONE, 0, h);
    int wsel = tnew(tr, "sample_weights_g", GCKPT_T_ACT, dt(tr, weights), pairs(tr, 1), rg(tr, weights));
    node(tr, "gather_weights", GCKPT_P_GATHER_ROWS, 2, (int[]){weights, perm}, wsel, -1, 1, (int[]){perm},
         GCKPT_BC_NONE, 0, 1);
    /* tokens per expert: histc of the sorted ids (a float copy on the CPU, int32 on
     * CUDA), cumsum -> int32 offsets [E] */
    int hin = tnew(tr, "histc_input", GCKPT_T_ACT, tr->cpu ? F32 : GCKPT_DT_I32, pairs(tr, 1), false);
    node(tr, "histc_input", GCKPT_P_CAST, 1, (int[]){ids}, hin, -1, 0, NULL, GCKPT_BC_NONE, 0, 0);
    int offs = tnew(tr, "offsets", GCKPT_T_ACT, GCKPT_DT_I32, fixed_shape(1, E), false);
    node(tr, "histc_cumsum", GCKPT_P_HISTC, 1, (int[]){hin}, offs, -1, 0, NULL, GCKPT_BC_NONE, 0, E);
    int bsel = bias_rows(tr, bgu, ids, 2 * I, "gate_up_bias_g");
    int xc = cast_to(tr, xs, dt(tr, wgu), "gate_up.to_weight"); /* input.to(weight.dtype) */
    int gu = grouped_linear(tr, xc, wgu, offs, h, 2 * I, "experts.gate_up_proj");
    last_op(tr)->sa = m->expert_bias; /* [E, in, out] */
    if (bsel >= 0) gu = expert_bias_add(tr, gu, bsel, "experts.gate_up_proj");
    /* gpt_oss interleaves them ([..., ::2], [..., 1::2]): views either way */
    int g = pair_chunk(tr, gu, 0, I, "gate"), u = pair_chunk(tr, gu, 1, I, "up");
    int prod;
    if (m->swiglu_limit > 0) {
        prod = clamped_swiglu(tr, g, u);
    } else {
        int act = unary(tr, g, "act_fn", false, GCKPT_P_SILU, 0);
        prod = mul(tr, act, u, "gated");
    }
    int dsel = bias_rows(tr, bd, ids, h, "down_bias_g"); /* selected_biases rebound: the first goes */
    hold_here(tr, bsel);
    int dn = grouped_linear(tr, prod, wd, offs, I, h, "experts.down_proj");
    last_op(tr)->sa = m->expert_bias;
    if (dsel >= 0) dn = expert_bias_add(tr, dn, dsel, "experts.down_proj");
    int weighted = mul(tr, dn, wsel, "weighted_out");
    int inv = tnew(tr, "inv_perm", GCKPT_T_ACT, I64, pairs(tr, 1), false);
    node(tr, "inv_perm", GCKPT_P_INVERT_PERM, 1, (int[]){perm}, inv, -1, 0, NULL, GCKPT_BC_NONE, 0, 0);
    int back = tnew(tr, "weighted_out.unsorted", GCKPT_T_ACT, dt(tr, weighted), pairs(tr, h), rg(tr, weighted));
    node(tr, "unsort", GCKPT_P_GATHER_ROWS, 2, (int[]){weighted, inv}, back, -1, 1, (int[]){inv}, GCKPT_BC_NONE, 0, h);
    int sum = tnew(tr, "final_hidden_states", GCKPT_T_ACT, dt(tr, back), per_token(h), rg(tr, back));
    node(tr, "sum_top_k", GCKPT_P_SUM, 1, (int[]){back}, sum, -1, 0, NULL, GCKPT_BC_NONE, 0, m->top_k);
    int out = cast_to(tr, sum, dt(tr, x), "final_hidden_states.to");
    /* grouped_mm_experts_forward's locals live until it returns, the block's
     * (hidden_states, the router's outputs) until the block returns */
    int locals[] = {x, weights, index, ids, perm, tok, xs, wsel, hin, offs, dn, back, inv, sum, dsel};
    for (size_t i = 0; i < sizeof locals / sizeof *locals; i++) hold_here(tr, locals[i]);
    /* GptOssMLP returns the router scores too: the decoder layer's `_` keeps them */
    if (m->router_bias) hold(tr, weights, HOLD_END);
    if (m->shared_inter) { /* DeepseekV3MoE: + shared_experts(residuals) */
        int sh = swiglu_mlp(tr, x, "mlp.shared_experts", m->shared_inter);
        out = add(tr, out, sh, "shared_experts.add");
        hold_here(tr, x);
        hold_here(tr, logits);
    }
    tr->pfx = "";
    return out;
}

/* load_balancing_loss_func (identical in the three families' modeling files, 5.24) on
 * the tuple of every layer's [T, E] router logits, after the causal-LM loss, then
 * loss += router_aux_loss_coef * aux_loss. It loops over the layers accumulating [E]
 * sums (no concatenation): per layer softmax (saved: fp32 under autocast, whose fp32
 * list has softmax; the logits' dtype otherwise), topk (its values dropped, the indices
 * counted by histc: a float copy on the CPU, int32 on CUDA; no grad), the softmax's
 * column sums (an fp32 copy first when bf16); at the end tokens_per_expert * probs
 * (keeps tokens_per_expert [E] fp32), sum, x E. The probe passes no attention_mask
 * (FINDINGS R-MOE-4: with one, flat_mask [T] fp32 is kept too). The layers' logits are
 * counted where they are made (held until the forward returns); the loop's per-layer
 * temporaries are traced over all layers at once. */
void moe_aux_loss(tracer *tr)
{
    gckpt_recipe *r = tr->r;
    const gckpt_model *m = tr->m;
    uint64_t L = m->layers, E = m->experts, k = m->top_k;
    uint8_t ldt = dt(tr, r->router_logits[0]);
    /* the layers' logits (the simulator allocates no bytes for this view, and hands its
     * gradient to the layers: one [T, E] each, kept by autograd until that layer's
     * backward); they require grad, so the softmax saves its output */
    int rl = source(tr, "router_logits", GCKPT_SRC_ROUTER_LOGITS, ldt, per_token(L * E), NULL, NULL);
    r->t[rl].requires_grad = true;
    r->router_logits[1] = rl;
    int sm = tnew(tr, "aux.routing_weights", GCKPT_T_ACT, tr->amp ? F32 : ldt, per_token(L * E), true);
    node(tr, "aux.softmax", GCKPT_P_SOFTMAX, 1, (int[]){rl}, sm, -1, 1, (int[]){sm}, GCKPT_BC_NONE, 0, E);
    int vals = tnew(tr, "aux.topk.values", GCKPT_T_ACT, dt(tr, sm), per_token(L * k), false);
    int idx = tnew(tr, "aux.selected_experts", GCKPT_T_ACT, I64, per_token(L * k), false);
    node(tr, "aux.topk", GCKPT_P_TOPK, 1, (int[]){sm}, vals, idx, 0, NULL, GCKPT_BC_NONE, 0, k);
    expert_dims(tr);
    int hin = tnew(tr, "aux.histc_input", GCKPT_T_ACT, tr->cpu ? F32 : GCKPT_DT_I32, per_token(L * k), false);
    node(tr, "aux.histc_input", GCKPT_P_CAST, 1, (int[]){idx}, hin, -1, 0, NULL, GCKPT_BC_NONE, 0, 0);
    int tpe = tnew(tr, "aux.tokens_per_expert", GCKPT_T_ACT, F32, fixed_shape(1, E), false);
    node(tr, "aux.histc", GCKPT_P_HISTC, 1, (int[]){hin}, tpe, -1, 0, NULL, GCKPT_BC_NONE, 0, E);
    last_op(tr)->sb = (double)k; /* / total_rows: the counts over the L x T rows of k indices */
    int smf = cast_to(tr, sm, F32, "aux.routing_weights.float");
    int probs = tnew(tr, "aux.router_prob_per_expert", GCKPT_T_ACT, F32, fixed_shape(1, E), true);
    node(tr, "aux.prob_sum", GCKPT_P_SUM, 1, (int[]){smf}, probs, -1, 0, NULL, GCKPT_BC_NONE, 0, E);
    last_op(tr)->sb = (double)E; /* / total_rows: the sums over the L x T rows of E probabilities */
    int prod = mul(tr, tpe, probs, "aux.tokens_x_probs");
    int aux = tnew(tr, "aux_loss", GCKPT_T_ACT, F32, fixed_shape(1, 1), true);
    node(tr, "aux.sum", GCKPT_P_SUM, 1, (int[]){prod}, aux, -1, 0, NULL, GCKPT_BC_NONE, 0, E);
    int scaled = scal(tr, aux, "aux_loss.coef", m->router_aux_coef * (double)E, 0);
    int loss = add(tr, r->loss, scaled, "loss.plus_aux");
    int made[] = {rl, sm, vals, idx, hin, tpe, smf, probs, prod, aux, scaled, loss};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) r->t[made[i]].logits = true;
    r->loss = loss;
}
