/* The host backend's ops for context parallelism's ring attention (executor.h's ring_*;
 * interp_cp.c calls them block by block and does the exchanges): host_attn.c's kernels, the
 * buffers plain host memory. */
#include "host_ops.h"

static gckpt_xstatus h_pack(gckpt_backend *be, const gckpt_xcall *c, float *kv, uint64_t *n)
{
    return host_ring_pack(c, kv, n, &be->err);
}

static gckpt_xstatus h_block_fwd(gckpt_backend *be, const gckpt_xcall *c, const gckpt_ring *g, uint32_t src,
                                 const float *kv, float *out, float *lse)
{
    return host_ring_block_fwd(c, g, src, kv, out, lse, &be->err);
}

static gckpt_xstatus h_merge(gckpt_backend *be, const gckpt_xcall *c, float *acc, float *acc_lse, const float *out,
                             const float *lse)
{
    (void)be;
    return host_ring_merge(c, acc, acc_lse, out, lse);
}

static gckpt_xstatus h_store(gckpt_backend *be, const gckpt_xcall *c, const float *acc, const float *acc_lse)
{
    (void)be;
    return host_ring_store(c, acc, acc_lse);
}

static gckpt_xstatus h_block_bwd(gckpt_backend *be, const gckpt_xcall *c, const gckpt_ring *g, uint32_t src,
                                 const float *kv, float *dq, float *dkv)
{
    return host_ring_block_bwd(c, g, src, kv, dq, dkv, &be->err);
}

static gckpt_xstatus h_grad(gckpt_backend *be, const gckpt_xcall *c, const float *dq, const float *dkv)
{
    return host_ring_grad(c, dq, dkv, &be->err);
}

void host_cp_ops(gckpt_backend *be)
{
    be->ring_pack = h_pack;
    be->ring_block_fwd = h_block_fwd;
    be->ring_merge = h_merge;
    be->ring_store = h_store;
    be->ring_block_bwd = h_block_bwd;
    be->ring_grad = h_grad;
}
