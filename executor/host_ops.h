/* The host backend's kernels: forward and backward of every recipe primitive on the CPU,
 * fp32 compute, CBLAS for matrix products. Deterministic: loops run in a fixed order. */
#ifndef GCKPT_HOST_OPS_H
#define GCKPT_HOST_OPS_H

#include "gckpt/executor/executor.h"

gckpt_xstatus host_op_forward(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus host_op_backward(const gckpt_xcall *c, gckpt_err *err);
/* attention-shaped primitives (host_attn.c) */
gckpt_xstatus host_attn_forward(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus host_attn_backward(const gckpt_xcall *c, gckpt_err *err);
bool host_is_attn(int prim);
/* mixture-of-experts primitives (host_moe.c) */
gckpt_xstatus host_moe_forward(const gckpt_xcall *c, gckpt_err *err);
gckpt_xstatus host_moe_backward(const gckpt_xcall *c, gckpt_err *err);
bool host_is_moe(int prim);
/* gpt_oss's sink softmax and half-split rotary primitives (host_sink.c) */
gckpt_xstatus host_sink_op(const gckpt_xcall *c, bool bwd, gckpt_err *err);
bool host_is_sink(int prim);
gckpt_xstatus host_optim(const gckpt_optcall *c, gckpt_err *err);
gckpt_xstatus host_source(gckpt_source what, const gckpt_xcall *c, const int64_t *host, gckpt_err *err);

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
