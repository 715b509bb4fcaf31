/* The host backend's kernels: forward and backward of every recipe primitive on the CPU,
 * fp32 compute, CBLAS for matrix products. Deterministic: loops run in a fixed order. */
#ifndef GCKPT_HOST_OPS_H
#define GCKPT_HOST_OPS_H

#include "gckpt/executor/executor.h"

gckpt_xstatus host_op_forward(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus host_op_backward(const gckpt_xcall *c, gckpt_err *err);

/* One primitive's kernels, a row of host_ops.c's table indexed by gckpt_prim: forward and
 * backward; a NULL one is refused by the primitive's name (a backward where the primitive
 * has none: gckpt/core/prim.h no_grad). */
typedef gckpt_xstatus (*host_kernel_fn)(const gckpt_xcall *c, gckpt_err *err);
typedef struct {
    host_kernel_fn fwd, bwd;
} host_kernel;
/* Row prim of the table, NULL for a value that is no primitive. */
const host_kernel *host_kernel_of(int prim);

/* The kernels of the other files, each one primitive's: host_<name>_fwd / _bwd. */
#define HOST_KERNEL_PAIR(name)                                                                   \
    gckpt_xstatus host_##name##_fwd(const gckpt_xcall *c, gckpt_err *err);                      \
    gckpt_xstatus host_##name##_bwd(const gckpt_xcall *c, gckpt_err *err)
/* ... defined from one function of (c, bwd, err) */
#define HOST_KERNEL_BOTH(name, fn)                                                               \
    gckpt_xstatus host_##name##_fwd(const gckpt_xcall *c, gckpt_err *err) { return fn(c, false, err); } \
    gckpt_xstatus host_##name##_bwd(const gckpt_xcall *c, gckpt_err *err) { return fn(c, true, err); }
/* attention-shaped primitives (host_attn.c): they read packed q / k / v themselves */
HOST_KERNEL_PAIR(sdpa);
HOST_KERNEL_PAIR(qk);
HOST_KERNEL_PAIR(pv);
HOST_KERNEL_PAIR(softmax);
HOST_KERNEL_PAIR(transpose);
HOST_KERNEL_PAIR(repeat_kv);
gckpt_xstatus host_bool_mask_fwd(const gckpt_xcall *c, gckpt_err *err);
/* Context parallelism's ring attention block by block (executor.h's ring_* ops; interp_cp.c does
 * the exchanges; host_cp.c puts them in the backend's table). */
gckpt_xstatus host_ring_pack(const gckpt_xcall *c, float *kv, uint64_t *n, gckpt_err *err);
gckpt_xstatus host_ring_block_fwd(const gckpt_xcall *c, const gckpt_ring *g, uint32_t src, const float *kv, float *out,
                                  float *lse, gckpt_err *err);
gckpt_xstatus host_ring_merge(const gckpt_xcall *c, float *acc, float *acc_lse, const float *out, const float *lse);
gckpt_xstatus host_ring_store(const gckpt_xcall *c, const float *acc, const float *acc_lse);
gckpt_xstatus host_ring_block_bwd(const gckpt_xcall *c, const gckpt_ring *g, uint32_t src, const float *kv, float *dq,
                                  float *dkv, gckpt_err *err);
gckpt_xstatus host_ring_grad(const gckpt_xcall *c, const float *dq, const float *dkv, gckpt_err *err);
void host_cp_ops(gckpt_backend *be);
/* mixture-of-experts primitives (host_moe.c); sort, floordiv, histc and the inverse
 * permutation make integers: no backward */
HOST_KERNEL_PAIR(topk);
HOST_KERNEL_PAIR(sum);
HOST_KERNEL_PAIR(div);
HOST_KERNEL_PAIR(grouped_linear);
gckpt_xstatus host_sort_fwd(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus host_floordiv_fwd(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus host_histc_fwd(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus host_invert_perm_fwd(const gckpt_xcall *c, gckpt_err *err);
/* gpt_oss's sink softmax and half-split rotary primitives (host_sink.c) */
HOST_KERNEL_PAIR(cat_sink);
HOST_KERNEL_PAIR(max_last);
HOST_KERNEL_PAIR(drop_sink);
HOST_KERNEL_PAIR(cat_halves);
/* a ViT tower's patch conv, class-token cat and row selections (host_vision.c) */
HOST_KERNEL_PAIR(patch_conv);
HOST_KERNEL_PAIR(cat_cls);
HOST_KERNEL_PAIR(rows_of);
#ifdef GCKPT_TOY
HOST_KERNEL_PAIR(toy); /* the toy primitive's (tests/toy/toy_exec.c) */
#endif
gckpt_xstatus host_optim(const gckpt_optcall *c, gckpt_err *err);
gckpt_xstatus host_source(gckpt_source what, const gckpt_xcall *c, const int64_t *host, gckpt_err *err);

/* the backend's tensor-parallel ops (host_tp.c): scratch, copy2d, embed_rows */
void host_tp_ops(gckpt_backend *be);

/* shared helpers */
float *host_to_f32(const gckpt_xt *t, gckpt_err *err); /* fp32 copy (hs_malloc: free with hs_free) */
void host_from_f32(const gckpt_xt *t, const float *v);  /* store with rounding */

#define NEED(c, t, what)                                                                           \
    do {                                                                                           \
        if (!(t).p) {                                                                              \
            gckpt_seterr(err, "op %s: %s is not available (freed before use)", (c)->op->name, what); \
            return GCKPT_XS_ERROR;                                                                 \
        }                                                                                          \
    } while (0)

#endif
