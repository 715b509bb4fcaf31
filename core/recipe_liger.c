/* use_liger_kernel=True's RMSNorm and RoPE kernels (liger-kernel 0.8.5) under --loss liger, on
 * the types the family table marks (families.h liger_rms, liger_rope), unless --liger-kernels leaves
 * them out (FINDINGS R-LOSS-6, R-LOSS-7). Planned only: no backend runs them. */
#include "recipe_tracer.h"

#include "gckpt/core/families.h"

/* rms_norm_backward's fp32 partial weight gradients are [sm_count, H]: the GPU profiles have no
 * SM count, so 132 (H100 SXM, H200) is taken; on the CPU sm_count is 1 */
#define LIGER_SM_COUNT 132

static const gckpt_model_type_info *type_of(const tracer *tr)
{
    const gckpt_model_type_info *ty = NULL;
    return gckpt_family_by_type(tr->m->model_type, &ty) ? ty : NULL;
}

bool liger_rms_planned(const tracer *tr)
{
    const gckpt_model_type_info *ty = type_of(tr);
    return liger_kernel_on(tr, GCKPT_LK_RMS_NORM) && tr->m->rms == GCKPT_RMS_LLAMA && ty && ty->liger_rms;
}

bool liger_rope_planned(const tracer *tr)
{
    const gckpt_model *m = tr->m;
    const gckpt_model_type_info *ty = type_of(tr);
    return liger_kernel_on(tr, GCKPT_LK_ROPE) && !m->rope_split_cat && !m->rope_halves && !m->rope_fp32 && ty &&
           ty->liger_rope;
}

/* LigerRMSNormFunction.apply(x, w) (casting 'llama', in_place=True): Y like x and RSTD, fp32 one
 * per row; saves x (its input, a view of it), w and RSTD. The backward writes dX into dY's
 * storage and sums the fp32 partials _dW [sm_count, H] into dW (.to(W.dtype): one more fp32 [H]
 * when W is narrower). */
int liger_rms_norm(tracer *tr, int x, int w, uint64_t width)
{
    int y = like(tr, "liger_rms_norm", x, dt(tr, x), rg(tr, x) || rg(tr, w));
    gckpt_shape sh = tr->r->t[x].shape;
    sh.width /= width;
    int rstd = tnew(tr, "rstd", GCKPT_T_ACT, F32, sh, false);
    opnew(tr, "liger_rms_norm", GCKPT_OP_ELEM, 2, (int[]){x, w}, y, rstd, 3, (int[]){x, w, rstd});
    setprim(tr, GCKPT_P_LIGER_RMS_NORM, GCKPT_BC_NONE, tr->eps, 0, width);
    gckpt_op *op = last_op(tr);
    op->grad_in_gout = 1;
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
