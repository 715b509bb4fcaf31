// SOURCE ops on the GPU: token ids, labels and positions copied from the interpreter's
// host data, HF's default (or gpt_oss's YaRN) rotary tables, the eager path's additive causal or sliding-window
// mask (masking_utils' bool one under SDPA; unverified: no GPU here) and Gemma's embedding
// normalizer.
#include <math.h>

#include "cuda_common.cuh"
#include "gckpt/executor/kernel_math.h"

namespace {

constexpr unsigned kBlock = 256;

// [S, w] tables for hd rotary dims (w: gckpt_rotary_table_width)
__global__ void k_rotary(void *cs, uint8_t cdt, void *sn, uint8_t sdt, uint64_t S, uint64_t hd, uint64_t w, float theta,
                         gckpt_yarn y)
{
    GRID_LOOP(e, S * w)
    {
        float f = gckpt_rope_angle_yarn(e / w, e % w, hd, theta, y);
        stx(cs, cdt, e, cosf(f) * y.attn);
        stx(sn, sdt, e, sinf(f) * y.attn);
    }
}

// eager's additive mask, or masking_utils' bool one under SDPA (true where visible)
__global__ void k_mask(void *o, uint8_t odt, uint64_t n, uint64_t S, uint64_t window)
{
    float low = gckpt_dtype_lowest(odt);
    GRID_LOOP(i, n)
    {
        float v = gckpt_attn_mask(i, S, window, low);
        stx(o, odt, i, odt == GCKPT_DT_BOOL ? static_cast<float>(v == 0.0f) : v);
    }
}

__global__ void k_scale(void *o, uint8_t odt, uint64_t hidden) { stx(o, odt, 0, gckpt_embed_normalizer(hidden)); }

} // namespace

gckpt_xstatus cuda_source(cuda_be *cb, gckpt_source what, const gckpt_xcall *c, const int64_t *host)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &o = c->out[0];
    if (what == GCKPT_SRC_ROUTER_LOGITS) return GCKPT_XS_OK; /* a view: the layers hold the logits (interp_aux.c) */
    NEED_T(be, c, o, "output");
    switch (what) {
    case GCKPT_SRC_IDS: case GCKPT_SRC_LABELS: case GCKPT_SRC_POSITIONS:
        if (o.dt != GCKPT_DT_I64 || !host) return op_fail(be, c, "ids must be int64 from the host");
        /* from pageable memory: the call returns once the data is staged, so the host
         * array may be refilled for the next micro-step */
        CUDA_TRY(be, cudaMemcpyAsync(o.p, host, o.n * sizeof(int64_t), cudaMemcpyHostToDevice, cb->stream));
        return GCKPT_XS_OK;
    case GCKPT_SRC_ROTARY:
        NEED_T(be, c, c->out[1], "sin output");
        k_rotary<<<grid_for(c->s * gckpt_rotary_table_width(c->m), kBlock), kBlock, 0, cb->stream>>>(
            o.p, o.dt, c->out[1].p, c->out[1].dt, c->s, c->m->rotary_dim, gckpt_rotary_table_width(c->m),
            static_cast<float>(c->rope_theta), gckpt_yarn_of(c->m, c->m->rotary_dim, c->rope_theta));
        break;
    case GCKPT_SRC_MASK:
        k_mask<<<grid_for(o.n, kBlock), kBlock, 0, cb->stream>>>(o.p, o.dt, o.n, c->s, c->window);
        break;
    case GCKPT_SRC_SCALE: k_scale<<<1, 1, 0, cb->stream>>>(o.p, o.dt, c->m->hidden); break;
    default: return op_fail(be, c, "unknown source");
    }
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}
