/* use_liger_kernel=True's RMSNorm and RoPE kernels (liger-kernel 0.8.5) under --loss liger, on
 * the types the family table marks (families.h liger_rms, liger_rope), unless --liger-kernels leaves
 * them out (FINDINGS R-LOSS-6, R-LOSS-7). Planned only: no backend runs them. */
#include "recipe_tracer.h"

#include "gckpt/core/families.h"

#include <string.h>

/* rms_norm_backward's fp32 partial weight gradients are [sm_count, H]: the GPU profiles have no
 * SM count, so 132 (H100 SXM, H200) is taken; on the CPU sm_count is 1 */
#define LIGER_SM_COUNT 132

static const gckpt_model_type_info *type_of(const tracer *tr)
{
    const gckpt_model_type_info *ty = NULL;
    return gckpt_family_by_type(tr->m->model_type, &ty) ? ty : NULL;
}

int liger_rms_in_place(const tracer *tr, const char *name)
{
    const gckpt_model_type_info *ty = type_of(tr);
    if (!liger_kernel_on(tr, GCKPT_LK_RMS_NORM) || !ty) return -1;
    bool final = tr->sec == GCKPT_SEC_HEAD, qk = !strcmp(name, "q_norm") || !strcmp(name, "k_norm");
    unsigned want = final ? GCKPT_LRMS_FINAL : qk ? GCKPT_LRMS_QK : GCKPT_LRMS_LAYER;
    unsigned copy = final ? GCKPT_LRMS_FINAL_COPY : GCKPT_LRMS_LAYER_COPY;
    if (!(ty->liger_rms & want)) return -1;
    return !(ty->liger_rms & copy);
}

bool liger_rope_planned(const tracer *tr)
{
    const gckpt_model *m = tr->m;
    const gckpt_model_type_info *ty = type_of(tr);
    return liger_kernel_on(tr, GCKPT_LK_ROPE) && !m->rope_split_cat && !m->rope_halves && ty && ty->liger_rope;
}

/* LigerRMSNormFunction.apply(x, w) (casting 'llama' or 'gemma', any offset): Y like x and RSTD,
 * fp32 one per row; saves x (its input, a view of it), w and RSTD. The backward writes dX into
 * dY's storage (in_place=True; else zeros_like(dY), a new buffer) and sums the fp32 partials _dW
 * [sm_count, H] into dW (.to(W.dtype): one more fp32 [H] when W is narrower). */
int liger_rms_norm(tracer *tr, int x, int w, uint64_t width, bool in_place)
{
    int y = like(tr, "liger_rms_norm", x, dt(tr, x), rg(tr, x) || rg(tr, w));
    gckpt_shape sh = tr->r->t[x].shape;
    sh.width /= width;
    int rstd = tnew(tr, "rstd", GCKPT_T_ACT, F32, sh, false);
    opnew(tr, "liger_rms_norm", GCKPT_OP_ELEM, 2, (int[]){x, w}, y, rstd, 3, (int[]){x, w, rstd});
    setprim(tr, GCKPT_P_LIGER_RMS_NORM, GCKPT_BC_NONE, tr->eps, 0, width);
    gckpt_op *op = last_op(tr);
    op->grad_in_gout = in_place;
    if (rg(tr, w))
        op->bws_fixed = (uint64_t)(tr->cpu ? 1 : LIGER_SM_COUNT) * width * 4 + (dt(tr, w) != F32 ? width * 4 : 0);
    return y;
}

/* liger_rotary_pos_emb(q, k, cos, sin): LigerRopeFunction rotates q and k in their own storage
 * (the projections' outputs: the transposes back to [b, s, heads, hd] are contiguous) and saves
 * cos and sin only. Its backward rotates dq and dk in place after .contiguous(), which copies
 * them when the attention's backward hands them on in [b, heads, s, hd] order: measured on the
 * CPU for k always and for q but under a masked SDPA (tests/data/fused-loss/liger-norm-rope.json;
 * CUDA's layouts unverified), so each input gradient is planned as a new buffer (the copy), the
 * incoming one freed with the node. One op per tensor. */
int liger_rope(tracer *tr, int x, int cos, int sin, const char *name)
{
    int o = like(tr, name, x, dt(tr, x), rg(tr, x));
    opnew(tr, name, GCKPT_OP_ELEM, 3, (int[]){x, cos, sin}, o, -1, 2, (int[]){cos, sin});
    setprim(tr, GCKPT_P_LIGER_ROPE, GCKPT_BC_TABLE, 0, 0, tr->m->rotary_dim);
    gckpt_op *op = last_op(tr);
    op->view_fwd = op->in_place = true;
    return o;
}

bool liger_experts_planned(const tracer *tr)
{
    const gckpt_model *m = tr->m;
    const gckpt_model_type_info *ty = type_of(tr);
    return liger_kernel_on(tr, GCKPT_LK_SWIGLU) && m->experts && !m->expert_bias && m->swiglu_limit <= 0 && ty &&
           ty->liger_experts;
}

/* LigerExperts.forward (swiglu=True on mixtral / qwen3_moe, transformers 5): top_k_index.to(int32)
 * (a local until it returns), then LigerFusedMoEFunction.apply(x, gate_up_proj, down_proj, index,
 * weights) (FINDINGS R-LOSS-9). compute_routing_metadata: int32 x_gather / s_scatter /
 * s_reverse_scatter [T k] each, expert_start_idx [E + 1] and the M-tile arrays (sum over experts
 * of ceil(pairs / 64) each: planned as E, exact while every expert gets 1 to 64 pairs, under by at
 * most 8 bytes per 64 pairs otherwise); its temporaries tile_expert_counts [E, n_tiles] (planned
 * one tile: T <= 1024 / next_pow2(k)), expert_token_count [E], expert_tile_offset [E + 1]. The
 * forward's pre_act [T k, 2 I] is saved with x, the routing weights (flatten() of the router's
 * [T, k]: a view) and the metadata; post_act [T k, I] and Y [T k, H] go when it returns. The
 * backward keeps d_pre_act [T k, 2 I], weighted_act [T k, I] and dx_expanded [T k, H] (dO's dtype)
 * until it returns, with dx, the weight gradients (zeros_like: also of frozen weights) and dS [T, k]
 * in dO's dtype, which autograd casts to the weights' dtype when they differ (mixtral's fp32
 * weights under bf16: dS counted as workspace, an upper bound by the cast copy). */
int liger_fused_moe(tracer *tr, int x, int index, int weights, int wgu, int wd)
{
    const gckpt_model *m = tr->m;
    uint64_t h = m->hidden, I = m->expert_inter, k = m->top_k, E = m->experts;
    uint64_t xs = gckpt_dtype_size((gckpt_dtype)dt(tr, x));
    int i32 = tnew(tr, "experts.top_k_index.int32", GCKPT_T_ACT, GCKPT_DT_I32, per_token(k), false);
    opnew(tr, "experts.top_k_index.int32", GCKPT_OP_ELEM, 1, (int[]){index}, i32, -1, 0, NULL);
    setprim(tr, GCKPT_P_CAST, GCKPT_BC_NONE, 0, 0, 0);
    int idx = tnew(tr, "experts.routing_idx", GCKPT_T_ACT, GCKPT_DT_I32, (gckpt_shape){GCKPT_ROWS_TOKENS, k, 3}, false);
    int tiles = tnew(tr, "experts.expert_start_tiles", GCKPT_T_ACT, GCKPT_DT_I32, fixed_shape(1, 3 * E + 1), false);
    opnew(tr, "experts.routing_metadata", GCKPT_OP_ELEM, 1, (int[]){i32}, idx, tiles, 0, NULL);
    setprim(tr, GCKPT_P_LIGER_MOE_ROUTE, GCKPT_BC_NONE, 0, 0, 0);
    expert_dims(tr);
    last_op(tr)->fws_fixed = (3 * E + 1) * 4;
    int out = like(tr, "experts.liger_fused_moe", x, dt(tr, x), true);
    int pre = tnew(tr, "experts.pre_act", GCKPT_T_ACT, dt(tr, x), (gckpt_shape){GCKPT_ROWS_TOKENS, k, 2 * I}, false);
    opnew(tr, "experts.liger_fused_moe", GCKPT_OP_MATMUL, 4, (int[]){x, wgu, wd, weights}, out, pre, 7,
          (int[]){x, wgu, wd, pre, weights, idx, tiles});
    setprim(tr, GCKPT_P_LIGER_MOE, GCKPT_BC_NONE, 0, 0, 0);
    gckpt_op *op = last_op(tr);
    op->in_f = h;
    op->out_f = I;
    expert_dims(tr);
    count_flops(tr);
    op->bwd_mult = 2.0; /* dA', dW2, dx_expanded, dW1: 12 H I per pair */
    op->fws_bT = k * (I + h) * xs;
    op->bws_bT = k * (3 * I + h) * xs + (dt(tr, weights) != dt(tr, x) ? k * xs : 0);
    /* the backward makes both weight gradients (zeros_like, then the dW kernels) whether or not
     * the weights need them (LoRA's frozen experts): autograd drops a frozen one's on return */
    if (!rg(tr, wgu)) op->bws_fixed += E * 2 * I * h * gckpt_dtype_size((gckpt_dtype)dt(tr, wgu));
    if (!rg(tr, wd)) op->bws_fixed += E * h * I * gckpt_dtype_size((gckpt_dtype)dt(tr, wd));
    /* the metadata are not inputs of the op that saves them: locals of its forward until then */
    int locals[] = {i32, idx, tiles};
    for (size_t i = 0; i < sizeof locals / sizeof *locals; i++) hold_here(tr, locals[i]);
    return out;
}
