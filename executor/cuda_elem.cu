// CUDA kernels of the elementwise, broadcast, norm, embedding and loss primitives, the
// gradient add and parameter initialisation. Values load as fp32, compute in fp32 and
// round once to the output dtype. Reductions run in a fixed order per thread or as fixed
// shuffle trees (no atomics), so every result is reproducible bit for bit.
#include <math.h>

#include "cuda_common.cuh"
#include "gckpt/core/prim.h"
#include "gckpt/executor/kernel_math.h"

namespace {

constexpr unsigned kBlock = 256;

enum { BC_NONE = GCKPT_BC_NONE, BC_ROW = GCKPT_BC_ROW, BC_COL = GCKPT_BC_COL, BC_TABLE = GCKPT_BC_TABLE, BC_MASK = GCKPT_BC_MASK };

struct Bcast {
    int mode;
    uint64_t width, xcols, s, per; // per: elements of x per sequence (MASK)
};

__device__ __forceinline__ uint64_t yidx(const Bcast &bc, uint64_t i)
{
    return gckpt_bcast_index(bc.mode, bc.width, bc.xcols, bc.s, bc.per, i);
}

struct Unary {
    const void *x, *y, *mask, *g;
    uint8_t xdt, ydt, mdt, gdt, odt, o2dt;
    void *o, *o2;
    uint64_t n;
    int prim;
    float sa, sb;
    uint64_t rng;
};

__global__ void k_unary_fwd(Unary a)
{
    float inv_keep = a.sa < 1.0f ? 1.0f / (1.0f - a.sa) : 0.0f;
    GRID_LOOP(i, a.n)
    {
        float v = ldx(a.x, a.xdt, i), r;
        switch (a.prim) {
        case GCKPT_P_AFFINE: r = v * a.sa + a.sb; break;
        case GCKPT_P_POW: r = gckpt_powi(v, a.sa); break;
        case GCKPT_P_RSQRT: r = 1.0f / sqrtf(v); break;
        case GCKPT_P_TANH: r = tanhf(v); break;
        case GCKPT_P_SILU: r = gckpt_silu(v); break;
        case GCKPT_P_GELU: r = gckpt_gelu(v, a.sa == 1.0f); break;
        case GCKPT_P_CLAMP: r = gckpt_clamp(v, a.sa, a.sb); break;
        case GCKPT_P_SIGMOID: r = gckpt_sigmoid(v); break;
        case GCKPT_P_DROPOUT: {
            int keep = gckpt_keep(a.rng, i, a.sa);
            stx(a.o2, a.o2dt, i, static_cast<float>(keep));
            r = keep ? v * inv_keep : 0.0f;
            break;
        }
        default: r = v; break; // CAST
        }
        stx(a.o, a.odt, i, r);
    }
}

__global__ void k_unary_bwd(Unary a)
{
    float inv_keep = a.sa < 1.0f ? 1.0f / (1.0f - a.sa) : 0.0f;
    GRID_LOOP(i, a.n)
    {
        float d = ldx(a.g, a.gdt, i), r;
        switch (a.prim) {
        case GCKPT_P_AFFINE: r = d * a.sa; break;
        case GCKPT_P_POW: r = d * gckpt_pow_grad(ldx(a.x, a.xdt, i), a.sa); break;
        case GCKPT_P_RSQRT: r = d * gckpt_rsqrt_grad(ldx(a.y, a.ydt, i)); break;
        case GCKPT_P_TANH: r = d * gckpt_tanh_grad(ldx(a.y, a.ydt, i)); break;
        case GCKPT_P_SILU: r = d * gckpt_silu_grad(ldx(a.x, a.xdt, i)); break;
        case GCKPT_P_GELU: r = d * gckpt_gelu_grad(ldx(a.x, a.xdt, i), a.sa == 1.0f); break;
        case GCKPT_P_CLAMP: r = d * gckpt_clamp_grad(ldx(a.x, a.xdt, i), a.sa, a.sb); break;
        case GCKPT_P_SIGMOID: r = d * gckpt_sigmoid_grad(ldx(a.y, a.ydt, i)); break;
        case GCKPT_P_DROPOUT: r = ldx(a.mask, a.mdt, i) != 0.0f ? d * inv_keep : 0.0f; break;
        default: r = d; break; // CAST
        }
        stx(a.o, a.odt, i, r);
    }
}

struct Binary {
    const void *x, *y, *g;
    uint8_t xdt, ydt, gdt, odt;
    void *o;
    uint64_t n;
    bool mul;
    float ysign; // -1 for SUB: y enters negated, and so does its gradient (SubBackward0)
    Bcast bc;
};

__global__ void k_binary_fwd(Binary a)
{
    GRID_LOOP(i, a.n)
    {
        float u = ldx(a.x, a.xdt, i), v = ldx(a.y, a.ydt, yidx(a.bc, i));
        stx(a.o, a.odt, i, a.mul ? u * v : u + a.ysign * v);
    }
}

// gradient of x: g * y (mul) or g (add)
__global__ void k_binary_bwd_x(Binary a)
{
    GRID_LOOP(i, a.n)
    {
        float d = ldx(a.g, a.gdt, i);
        stx(a.o, a.odt, i, a.mul ? d * ldx(a.y, a.ydt, yidx(a.bc, i)) : d);
    }
}

// gradient of an unbroadcast y: g * x (mul) or g (add); here a.y is x
__global__ void k_binary_bwd_y_same(Binary a)
{
    GRID_LOOP(i, a.n)
    {
        float d = ldx(a.g, a.gdt, i);
        stx(a.o, a.odt, i, a.mul ? d * ldx(a.x, a.xdt, i) : a.ysign * d);
    }
}

// gradient of a broadcast y: the sum over the elements of x that read y[j]
__global__ void k_binary_bwd_y_reduce(Binary a, uint64_t ny, uint64_t B, uint64_t heads)
{
    GRID_LOOP(j, ny)
    {
        float acc = 0.0f;
        const Bcast &bc = a.bc;
        switch (bc.mode) {
        case BC_ROW:
            for (uint64_t k = 0; k < bc.width; k++) {
                uint64_t i = j * bc.width + k;
                float d = ldx(a.g, a.gdt, i);
                acc += a.mul ? d * ldx(a.x, a.xdt, i) : a.ysign * d;
            }
            break;
        case BC_COL:
            for (uint64_t i = j; i < a.n; i += bc.width) {
                float d = ldx(a.g, a.gdt, i);
                acc += a.mul ? d * ldx(a.x, a.xdt, i) : a.ysign * d;
            }
            break;
        case BC_TABLE: {
            uint64_t pos = j / bc.width, c = j % bc.width, hpr = bc.xcols / bc.width;
            for (uint64_t b = 0; b < B; b++)
                for (uint64_t h = 0; h < hpr; h++) {
                    uint64_t i = (b * bc.s + pos) * bc.xcols + h * bc.width + c;
                    float d = ldx(a.g, a.gdt, i);
                    acc += a.mul ? d * ldx(a.x, a.xdt, i) : a.ysign * d;
                }
            break;
        }
        default: { // MASK: over heads
            uint64_t ss = bc.s * bc.s, bi = j / ss, rem = j % ss;
            for (uint64_t h = 0; h < heads; h++) {
                uint64_t i = bi * bc.per + h * ss + rem;
                float d = ldx(a.g, a.gdt, i);
                acc += a.mul ? d * ldx(a.x, a.xdt, i) : a.ysign * d;
            }
            break;
        }
        }
        stx(a.o, a.odt, j, acc);
    }
}

// rotate_half's pieces (kernel_math.h, gckpt_half_src): src1, and src2 for CAT's second
struct Half {
    const void *src1, *src2;
    uint8_t dt1, dt2, odt;
    void *o;
    uint64_t n, w, C;
    int mode;
};

__global__ void k_half(Half h)
{
    float sign = gckpt_half_negates(h.mode) ? -1.0f : 1.0f;
    GRID_LOOP(i, h.n)
    {
        int which;
        uint64_t k = gckpt_half_src(h.mode, i, h.C, h.w, &which);
        float v = which == 0 ? 0.0f : which == 1 ? ldx(h.src1, h.dt1, k) : ldx(h.src2, h.dt2, k);
        stx(h.o, h.odt, i, sign * v);
    }
}

// a SPLIT's role (gckpt_split_view) of n elements, rows of Wn, in a packed tensor with rows of
// Ww; bwd: the role into its place (the rest untouched)
__global__ void k_split(const void *src, uint8_t sdt, void *dst, uint8_t ddt, uint64_t n, uint64_t Wn, uint64_t Ww,
                        uint64_t off, uint64_t blk, uint64_t hd, int bwd)
{
    GRID_LOOP(i, n)
    {
        uint64_t wide = gckpt_view_index(i, Wn, Ww, off, blk, hd);
        if (bwd)
            stx(dst, ddt, wide, ldx(src, sdt, i));
        else
            stx(dst, ddt, i, ldx(src, sdt, wide));
    }
}

// mean over groups of w: one warp per group
__global__ void k_mean(const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t groups, uint64_t w)
{
    uint64_t warp = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) >> 5;
    unsigned lane = threadIdx.x & 31;
    uint64_t nwarps = (static_cast<uint64_t>(gridDim.x) * blockDim.x) >> 5;
    for (uint64_t g = warp; g < groups; g += nwarps) {
        float s = 0.0f;
        for (uint64_t k = lane; k < w; k += 32) s += ldx(x, xdt, g * w + k);
        s = warp_sum(s);
        if (lane == 0) stx(o, odt, g, s / static_cast<float>(w));
    }
}

__global__ void k_mean_bwd(const void *g, uint8_t gdt, void *o, uint8_t odt, uint64_t n, uint64_t w)
{
    GRID_LOOP(i, n) stx(o, odt, i, ldx(g, gdt, i / w) / static_cast<float>(w));
}

// layer norm: one block per row
__global__ void k_layernorm(const void *x, uint8_t xdt, const void *w, uint8_t wdt, const void *b, uint8_t bdt, void *o,
                            uint8_t odt, void *st, uint8_t sdt, uint64_t W, float eps)
{
    __shared__ float scratch[32];
    uint64_t r = blockIdx.x;
    float s = 0.0f;
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) s += ldx(x, xdt, r * W + k);
    float mean = block_sum(s, scratch) / static_cast<float>(W);
    float v = 0.0f;
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) {
        float d = ldx(x, xdt, r * W + k) - mean;
        v += d * d;
    }
    float rstd = gckpt_layernorm_rstd(block_sum(v, scratch) / static_cast<float>(W), eps);
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x)
        stx(o, odt, r * W + k, (ldx(x, xdt, r * W + k) - mean) * rstd * ldx(w, wdt, k) + ldx(b, bdt, k));
    if (threadIdx.x == 0) {
        stx(st, sdt, 2 * r, mean);
        stx(st, sdt, 2 * r + 1, rstd);
    }
}

__global__ void k_layernorm_bwd_x(const void *x, uint8_t xdt, const void *w, uint8_t wdt, const void *st, uint8_t sdt,
                                  const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t W)
{
    __shared__ float scratch[32];
    uint64_t r = blockIdx.x;
    float mean = ldx(st, sdt, 2 * r), rstd = ldx(st, sdt, 2 * r + 1), s1 = 0.0f, s2 = 0.0f;
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) {
        float xh = (ldx(x, xdt, r * W + k) - mean) * rstd, dxh = ldx(g, gdt, r * W + k) * ldx(w, wdt, k);
        s1 += dxh;
        s2 += dxh * xh;
    }
    s1 = block_sum(s1, scratch) / static_cast<float>(W);
    s2 = block_sum(s2, scratch) / static_cast<float>(W);
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) {
        float xh = (ldx(x, xdt, r * W + k) - mean) * rstd, dxh = ldx(g, gdt, r * W + k) * ldx(w, wdt, k);
        stx(gi, gidt, r * W + k, gckpt_layernorm_grad(rstd, dxh, xh, s1, s2));
    }
}

// weight and bias gradients: one thread per column over all rows
__global__ void k_layernorm_bwd_wb(const void *x, uint8_t xdt, const void *st, uint8_t sdt, const void *g, uint8_t gdt,
                                   void *gw, uint8_t gwdt, void *gb, uint8_t gbdt, uint64_t W, uint64_t rows)
{
    GRID_LOOP(k, W)
    {
        float aw = 0.0f, ab = 0.0f;
        for (uint64_t r = 0; r < rows; r++) {
            float xh = (ldx(x, xdt, r * W + k) - ldx(st, sdt, 2 * r)) * ldx(st, sdt, 2 * r + 1), d = ldx(g, gdt, r * W + k);
            aw += d * xh;
            ab += d;
        }
        if (gw) stx(gw, gwdt, k, aw);
        if (gb) stx(gb, gbdt, k, ab);
    }
}

__global__ void k_embed(const void *tab, uint8_t tdt, const int64_t *ids, void *o, uint8_t odt, uint64_t n, uint64_t W,
                        uint64_t V)
{
    GRID_LOOP(i, n)
    {
        int64_t id = ids[i / W];
        float v = id >= 0 && static_cast<uint64_t>(id) < V ? ldx(tab, tdt, static_cast<uint64_t>(id) * W + i % W) : NAN;
        stx(o, odt, i, v);
    }
}

// table gradient: one thread per column, tokens in order (the table was zeroed)
__global__ void k_embed_bwd(const int64_t *ids, uint64_t T, const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t W,
                            uint64_t V, int64_t pad)
{
    GRID_LOOP(k, W)
    {
        for (uint64_t t = 0; t < T; t++) {
            int64_t id = ids[t];
            if (id < 0 || static_cast<uint64_t>(id) >= V || gckpt_embed_grad_skips(id, pad)) continue;
            uint64_t j = static_cast<uint64_t>(id) * W + k;
            stx(gi, gidt, j, ldx(gi, gidt, j) + ldx(g, gdt, t * W + k));
        }
    }
}

__global__ void k_logsoftmax(const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t W)
{
    __shared__ float scratch[32];
    uint64_t r = blockIdx.x;
    float mx = -INFINITY;
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) mx = fmaxf(mx, ldx(x, xdt, r * W + k));
    mx = block_max(mx, scratch);
    float s = 0.0f;
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) s += expf(ldx(x, xdt, r * W + k) - mx);
    float lse = mx + logf(block_sum(s, scratch));
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) stx(o, odt, r * W + k, ldx(x, xdt, r * W + k) - lse);
}

__global__ void k_logsoftmax_bwd(const void *y, uint8_t ydt, const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t W)
{
    __shared__ float scratch[32];
    uint64_t r = blockIdx.x;
    float s = 0.0f;
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x) s += ldx(g, gdt, r * W + k);
    s = block_sum(s, scratch);
    for (uint64_t k = threadIdx.x; k < W; k += blockDim.x)
        stx(gi, gidt, r * W + k, ldx(g, gdt, r * W + k) - expf(ldx(y, ydt, r * W + k)) * s);
}

// mean negative log-likelihood over labels != -100, summed in double by one block
__global__ void k_nll(const void *x, uint8_t xdt, const int64_t *lb, uint64_t rows, uint64_t W, void *o, uint8_t odt,
                      void *tw, uint8_t twdt)
{
    __shared__ double scratch_d[32];
    __shared__ float scratch_f[32];
    double s = 0.0;
    float n = 0.0f;
    for (uint64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        int64_t l = lb[r];
        if (l == -100) continue;
        if (l < 0 || static_cast<uint64_t>(l) >= W) {
            s = NAN;
            continue;
        }
        s += static_cast<double>(ldx(x, xdt, r * W + static_cast<uint64_t>(l)));
        n += 1.0f;
    }
    s = block_sum(s, scratch_d);
    n = block_sum(n, scratch_f);
    if (threadIdx.x == 0) {
        stx(o, odt, 0, static_cast<float>(-s / static_cast<double>(n)));
        if (tw) stx(tw, twdt, 0, n);
    }
}

__global__ void k_nll_bwd(const int64_t *lb, const void *g, uint8_t gdt, const void *tw, uint8_t twdt, void *gi, uint8_t gidt,
                          uint64_t n, uint64_t W)
{
    float d = -ldx(g, gdt, 0) / ldx(tw, twdt, 0);
    GRID_LOOP(i, n)
    {
        int64_t l = lb[i / W];
        stx(gi, gidt, i, l != -100 && static_cast<uint64_t>(l) == i % W ? d : 0.0f);
    }
}

__global__ void k_nll_count(const int64_t *lb, uint64_t rows, float *out)
{
    __shared__ float scratch[32];
    float n = 0.0f;
    for (uint64_t r = threadIdx.x; r < rows; r += blockDim.x) n += lb[r] != -100 ? 1.0f : 0.0f;
    n = block_sum(n, scratch);
    if (threadIdx.x == 0) *out = n;
}

__global__ void k_add(const void *a, uint8_t adt, const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t n)
{
    GRID_LOOP(i, n) stx(o, odt, i, (a ? ldx(a, adt, i) : 0.0f) + ldx(x, xdt, i));
}

__global__ void k_fill(void *o, uint8_t odt, uint64_t n, int uniform, float scale, uint64_t key)
{
    GRID_LOOP(i, n) stx(o, odt, i, uniform ? gckpt_rng_uniform(key, i, scale) : scale);
}

Bcast bcast_of(const gckpt_xcall *c)
{
    Bcast bc;
    bc.mode = c->op->bcast;
    bc.xcols = c->in[0].cols;
    bc.width = gckpt_bcast_width(bc.mode, c->op->width, bc.xcols);
    bc.s = c->s;
    bc.per = c->in[0].n / (c->b ? c->b : 1);
    return bc;
}

// ---- launches, one per primitive (the op's sizes were checked before: op_sizes.h) ----------

gckpt_xstatus unary_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_op *op = c->op;
    Unary a{};
    a.x = c->in[0].p;
    a.xdt = c->in[0].dt;
    a.o = c->out[0].p;
    a.odt = c->out[0].dt;
    a.n = c->out[0].n;
    a.prim = op->prim;
    a.sa = static_cast<float>(op->sa);
    a.sb = static_cast<float>(op->sb);
    a.rng = c->rng;
    if (op->prim == GCKPT_P_DROPOUT) {
        NEED_T(be, c, c->out[1], "mask output");
        a.o2 = c->out[1].p;
        a.o2dt = c->out[1].dt;
    }
    k_unary_fwd<<<grid_for(a.n, kBlock), kBlock, 0, cb->stream>>>(a);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus unary_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_op *op = c->op;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    if (!gi.p) return GCKPT_XS_OK;
    uint8_t reads = gckpt_prim_of(op->prim)->bwd_reads; // what it saved
    if (reads & GCKPT_PR_IN0) NEED_T(be, c, c->in[0], "saved input");
    if (reads & GCKPT_PR_OUT0) NEED_T(be, c, c->out[0], "saved output");
    if (reads & GCKPT_PR_OUT1) NEED_T(be, c, c->out[1], "saved mask");
    Unary a{};
    a.g = g.p;
    a.gdt = g.dt;
    a.x = c->in[0].p;
    a.xdt = c->in[0].dt;
    a.y = c->out[0].p;
    a.ydt = c->out[0].dt;
    a.mask = c->out[1].p;
    a.mdt = c->out[1].dt;
    a.o = gi.p;
    a.odt = gi.dt;
    a.n = gi.n;
    a.prim = op->prim;
    a.sa = static_cast<float>(op->sa);
    a.sb = static_cast<float>(op->sb);
    k_unary_bwd<<<grid_for(a.n, kBlock), kBlock, 0, cb->stream>>>(a);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

Binary binary_of(const gckpt_xcall *c)
{
    Binary a{};
    a.x = c->in[0].p;
    a.xdt = c->in[0].dt;
    a.y = c->in[1].p;
    a.ydt = c->in[1].dt;
    a.mul = c->op->prim == GCKPT_P_MUL;
    a.ysign = c->op->prim == GCKPT_P_SUB ? -1.0f : 1.0f;
    a.bc = bcast_of(c);
    return a;
}

gckpt_xstatus binary_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    NEED_T(&cb->be, c, c->in[1], "input 1");
    Binary a = binary_of(c);
    a.o = c->out[0].p;
    a.odt = c->out[0].dt;
    a.n = c->out[0].n;
    k_binary_fwd<<<grid_for(a.n, kBlock), kBlock, 0, cb->stream>>>(a);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

gckpt_xstatus binary_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    Binary a = binary_of(c);
    a.g = g.p;
    a.gdt = g.dt;
    if (gi.p) {
        if (a.mul) NEED_T(be, c, c->in[1], "saved input 1");
        Binary b = a;
        b.o = gi.p;
        b.odt = gi.dt;
        b.n = gi.n;
        k_binary_bwd_x<<<grid_for(b.n, kBlock), kBlock, 0, cb->stream>>>(b);
        LAUNCH_TRY(be);
    }
    if (c->gin[1].p) {
        if (a.mul) NEED_T(be, c, c->in[0], "saved input 0");
        Binary b = a;
        b.o = c->gin[1].p;
        b.odt = c->gin[1].dt;
        b.n = g.n;
        if (c->op->bcast == GCKPT_BC_NONE) {
            k_binary_bwd_y_same<<<grid_for(b.n, kBlock), kBlock, 0, cb->stream>>>(b);
        } else {
            uint64_t heads = c->b ? g.n / (c->b * c->s * c->s) : 0;
            k_binary_bwd_y_reduce<<<grid_for(c->gin[1].n, kBlock), kBlock, 0, cb->stream>>>(b, c->gin[1].n, c->b, heads);
        }
        LAUNCH_TRY(be);
    }
    return GCKPT_XS_OK;
}

// rotate_half's pieces into out with kernel_math.h's mode from src1 (and src2)
gckpt_xstatus half_launch(cuda_be *cb, int mode, const gckpt_xt &out, const gckpt_xt &src1, const gckpt_xt *src2,
                          uint64_t C, uint64_t w)
{
    Half h{};
    h.mode = mode;
    h.w = w;
    h.C = C;
    h.o = out.p;
    h.odt = out.dt;
    h.n = out.n;
    h.src1 = src1.p;
    h.dt1 = src1.dt;
    if (src2) {
        h.src2 = src2->p;
        h.dt2 = src2->dt;
    }
    k_half<<<grid_for(h.n, kBlock), kBlock, 0, cb->stream>>>(h);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

gckpt_xstatus half_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    if (c->op->prim == GCKPT_P_NEG_HALF) return half_launch(cb, GCKPT_HALF_NEG, c->out[0], c->in[0], nullptr, c->in[0].cols, c->op->width);
    NEED_T(&cb->be, c, c->in[1], "input 1");
    return half_launch(cb, GCKPT_HALF_CAT, c->out[0], c->in[0], &c->in[1], c->in[1].cols, c->op->width);
}

gckpt_xstatus half_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    uint64_t w = c->op->width;
    gckpt_xstatus rc = GCKPT_XS_OK;
    if (c->op->prim == GCKPT_P_NEG_HALF)
        return c->gin[0].p ? half_launch(cb, GCKPT_HALF_NEG_GRAD, c->gin[0], c->gout, nullptr, c->in[0].cols, w) : rc;
    if (c->gin[0].p) rc = half_launch(cb, GCKPT_HALF_CAT_GRAD0, c->gin[0], c->gout, nullptr, c->in[1].cols, w);
    if (rc == GCKPT_XS_OK && c->gin[1].p) rc = half_launch(cb, GCKPT_HALF_CAT_GRAD1, c->gin[1], c->gout, nullptr, c->in[1].cols, w);
    return rc;
}

// partial rotary's cat (gckpt_cat_pass_src): forward out from y (rotated) and x; backward
// the gradient's rotated columns to gy, the others to gx (its rotated columns 0)
__global__ void k_cat_pass(const void *a, uint8_t adt, const void *b, uint8_t bdt, void *o, uint8_t odt, uint64_t n,
                           uint64_t C, uint64_t hd, uint64_t rd)
{
    GRID_LOOP(i, n)
    {
        int which;
        uint64_t src;
        gckpt_cat_pass_src(i, C, hd, rd, &which, &src);
        stx(o, odt, i, which == 1 ? ldx(a, adt, src) : ldx(b, bdt, src));
    }
}
__global__ void k_cat_pass_bwd(const void *g, uint8_t gdt, void *gy, uint8_t gydt, void *gx, uint8_t gxdt, uint64_t n,
                               uint64_t C, uint64_t hd, uint64_t rd)
{
    GRID_LOOP(i, n)
    {
        int which;
        uint64_t src;
        gckpt_cat_pass_src(i, C, hd, rd, &which, &src);
        float v = ldx(g, gdt, i);
        if (which == 1 && gy) stx(gy, gydt, src, v);
        if (gx) stx(gx, gxdt, i, which == 1 ? 0.0f : v);
    }
}

gckpt_xstatus cat_pass_launch(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    if (c->op->sa == 1) return op_fail(&cb->be, c, "MLA's per-head cat is executed on the host backend only");
    uint64_t C = c->in[1].cols, hd = c->op->width, rd = hd && C >= hd ? c->in[0].cols / (C / hd) : 0;
    if (!rd || rd > hd || C % hd) return op_fail(&cb->be, c, "a rotated part that does not fit the heads");
    if (!bwd) {
        NEED_T(&cb->be, c, c->in[0], "input 0");
        NEED_T(&cb->be, c, c->in[1], "input 1");
        const gckpt_xt &o = c->out[0];
        k_cat_pass<<<grid_for(o.n, kBlock), kBlock, 0, cb->stream>>>(c->in[0].p, c->in[0].dt, c->in[1].p, c->in[1].dt, o.p,
                                                                     o.dt, o.n, C, hd, rd);
    } else {
        const gckpt_xt &g = c->gout;
        k_cat_pass_bwd<<<grid_for(g.n, kBlock), kBlock, 0, cb->stream>>>(g.p, g.dt, c->gin[0].p, c->gin[0].dt, c->gin[1].p,
                                                                         c->gin[1].dt, g.n, C, hd, rd);
    }
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

// a strided column view (gckpt_xt.vW) gathered into dense storage dst
__global__ void k_gather_view(const void *src, uint8_t dt, void *dst, uint64_t n, uint64_t cols, uint64_t W, uint64_t off,
                              uint64_t blk, uint64_t stride, uint64_t step)
{
    GRID_LOOP(i, n) stx(dst, dt, i, ldx(src, dt, gckpt_view_index_step(i, cols, W, off, blk, stride, step)));
}

gckpt_xstatus split_launch(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    const gckpt_xt &src = bwd ? c->gout : c->in[0], &dst = bwd ? c->gin[0] : c->out[0];
    const gckpt_xt &wide = bwd ? dst : src, &narrow = bwd ? src : dst;
    if (!dst.p) return GCKPT_XS_OK;
    uint64_t Wn, Ww, off, blk, stride = c->op->width, hd = c->op->width;
    gckpt_split_view(narrow.rows, wide.n, narrow.n, static_cast<int>(c->op->sa), static_cast<uint64_t>(c->op->sb), hd, &Wn,
                     &Ww, &off, &blk);
    if (Ww > Wn) gckpt_split_stride(c->op->in_f, c->op->out_f, hd, &blk, &stride);
    if (narrow.n)
        k_split<<<grid_for(narrow.n, kBlock), kBlock, 0, cb->stream>>>(src.p, src.dt, dst.p, dst.dt, narrow.n, Wn, Ww, off,
                                                                       blk, stride, bwd ? 1 : 0);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

gckpt_xstatus layernorm_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    NEED_T(be, c, c->in[1], "weight");
    NEED_T(be, c, c->in[2], "bias");
    NEED_T(be, c, c->out[1], "statistics output");
    uint64_t rows = x.n / c->op->width;
    if (rows)
        k_layernorm<<<static_cast<unsigned>(rows), kBlock, 0, cb->stream>>>(
            x.p, x.dt, c->in[1].p, c->in[1].dt, c->in[2].p, c->in[2].dt, o.p, o.dt, c->out[1].p, c->out[1].dt,
            c->op->width, static_cast<float>(c->op->sa));
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus layernorm_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    NEED_T(be, c, c->in[0], "saved input");
    NEED_T(be, c, c->in[1], "weight");
    NEED_T(be, c, c->out[1], "saved mean and rstd");
    uint64_t W = c->op->width, rows = c->in[0].n / W;
    if (gi.p && rows) {
        k_layernorm_bwd_x<<<static_cast<unsigned>(rows), kBlock, 0, cb->stream>>>(
            c->in[0].p, c->in[0].dt, c->in[1].p, c->in[1].dt, c->out[1].p, c->out[1].dt, g.p, g.dt, gi.p, gi.dt, W);
        LAUNCH_TRY(be);
    }
    if (c->gin[1].p || c->gin[2].p)
        k_layernorm_bwd_wb<<<grid_for(W, kBlock), kBlock, 0, cb->stream>>>(c->in[0].p, c->in[0].dt, c->out[1].p,
                                                                           c->out[1].dt, g.p, g.dt, c->gin[1].p,
                                                                           c->gin[1].dt, c->gin[2].p, c->gin[2].dt, W, rows);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus embed_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    if (!gi.p) return GCKPT_XS_OK;
    if (c->op->sa == 1) return op_fail(be, c, "the per-row gather (gather(1)) is executed on the host backend only");
    NEED_T(be, c, c->in[1], "saved ids");
    uint64_t W = c->op->width;
    CUDA_TRY(be, cudaMemsetAsync(gi.p, 0, gi.n * gckpt_dtype_size(static_cast<gckpt_dtype>(gi.dt)), cb->stream));
    k_embed_bwd<<<grid_for(W, 128), 128, 0, cb->stream>>>(static_cast<const int64_t *>(c->in[1].p), c->in[1].n, g.p, g.dt,
                                                         gi.p, gi.dt, W, gi.n / W,
                                                         gckpt_embed_pad(c->m, c->op->prim == GCKPT_P_EMBED));
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus logsoftmax_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    if (!gi.p) return GCKPT_XS_OK;
    NEED_T(&cb->be, c, c->out[0], "saved output");
    uint64_t rows = gi.n / c->op->width;
    if (rows)
        k_logsoftmax_bwd<<<static_cast<unsigned>(rows), 1024, 0, cb->stream>>>(c->out[0].p, c->out[0].dt, g.p, g.dt, gi.p,
                                                                               gi.dt, c->op->width);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

gckpt_xstatus nll_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    if (!gi.p) return GCKPT_XS_OK;
    NEED_T(be, c, c->in[1], "saved labels");
    const int64_t *labels = static_cast<const int64_t *>(c->in[1].p);
    const void *tw = c->out[1].p;
    uint8_t twdt = c->out[1].dt;
    if (c->op->out[1] < 0) { // no saved total_weight: count into the records' spare slot
        k_nll_count<<<1, 1024, 0, cb->stream>>>(labels, c->in[1].n, cb->records + GCKPT_MAX_RECORDS);
        LAUNCH_TRY(be);
        tw = cb->records + GCKPT_MAX_RECORDS;
        twdt = GCKPT_DT_F32;
    } else {
        NEED_T(be, c, c->out[1], "saved total_weight");
    }
    k_nll_bwd<<<grid_for(gi.n, kBlock), kBlock, 0, cb->stream>>>(labels, g.p, g.dt, tw, twdt, gi.p, gi.dt, gi.n,
                                                                 c->op->width);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

} // namespace

gckpt_xstatus op_fail(gckpt_backend *be, const gckpt_xcall *c, const char *why)
{
    gckpt_seterr(&be->err, "op %s: %s", c->op->name, why);
    return GCKPT_XS_ERROR;
}

// ---- the kernel table's entries (cuda_backend.cu): one per kernel ---------------------------

namespace {

gckpt_xstatus mean_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    k_mean<<<grid_for(o.n * 32, kBlock), kBlock, 0, cb->stream>>>(x.p, x.dt, o.p, o.dt, o.n, c->op->width);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

gckpt_xstatus mean_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    if (!gi.p) return GCKPT_XS_OK;
    k_mean_bwd<<<grid_for(gi.n, kBlock), kBlock, 0, cb->stream>>>(g.p, g.dt, gi.p, gi.dt, gi.n, c->op->width);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

// rows picked by int64 indices (embedding, gather_rows)
gckpt_xstatus embed_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_op *op = c->op;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    if (op->sa == 1) return op_fail(be, c, "the per-row gather (gather(1)) is executed on the host backend only");
    NEED_T(be, c, c->in[1], "ids");
    k_embed<<<grid_for(o.n, kBlock), kBlock, 0, cb->stream>>>(x.p, x.dt, static_cast<const int64_t *>(c->in[1].p), o.p, o.dt,
                                                              o.n, op->width, x.n / op->width);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus logsoftmax_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    const gckpt_op *op = c->op;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    uint64_t rows = x.n / op->width;
    if (rows) k_logsoftmax<<<static_cast<unsigned>(rows), 1024, 0, cb->stream>>>(x.p, x.dt, o.p, o.dt, op->width);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

gckpt_xstatus nll_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_op *op = c->op;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    NEED_T(be, c, c->in[1], "labels");
    k_nll<<<1, 1024, 0, cb->stream>>>(x.p, x.dt, static_cast<const int64_t *>(c->in[1].p), c->in[1].n, op->width, o.p, o.dt,
                                      c->out[1].p, c->out[1].dt);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

} // namespace

// The forward's operands every elementwise kernel reads, then the kernel.
#define ELEM_FWD(name, call)                                                                        \
    gckpt_xstatus cuda_##name##_fwd(cuda_be *cb, const gckpt_xcall *c)                             \
    {                                                                                               \
        NEED_T(&cb->be, c, c->in[0], "input 0");                                                   \
        NEED_T(&cb->be, c, c->out[0], "output");                                                   \
        return call;                                                                                \
    }
#define ELEM_BWD(name, call)                                                                        \
    gckpt_xstatus cuda_##name##_bwd(cuda_be *cb, const gckpt_xcall *c)                             \
    {                                                                                               \
        NEED_T(&cb->be, c, c->gout, "output gradient");                                            \
        return call;                                                                                \
    }
ELEM_FWD(unary, unary_fwd(cb, c))
ELEM_BWD(unary, unary_bwd(cb, c))
ELEM_FWD(binary, binary_fwd(cb, c))
ELEM_BWD(binary, binary_bwd(cb, c))
ELEM_FWD(half, half_fwd(cb, c))
ELEM_BWD(half, half_bwd(cb, c))
ELEM_FWD(split, split_launch(cb, c, false))
ELEM_BWD(split, split_launch(cb, c, true))
ELEM_FWD(cat_pass, cat_pass_launch(cb, c, false))
ELEM_BWD(cat_pass, cat_pass_launch(cb, c, true))
ELEM_FWD(layernorm, layernorm_fwd(cb, c))
ELEM_BWD(layernorm, layernorm_bwd(cb, c))
ELEM_FWD(mean, mean_fwd(cb, c))
ELEM_BWD(mean, mean_bwd(cb, c))
ELEM_FWD(embed, embed_fwd(cb, c))
ELEM_BWD(embed, embed_bwd(cb, c))
ELEM_FWD(logsoftmax, logsoftmax_fwd(cb, c))
ELEM_BWD(logsoftmax, logsoftmax_bwd(cb, c))
ELEM_FWD(nll, nll_fwd(cb, c))
ELEM_BWD(nll, nll_bwd(cb, c))

gckpt_xstatus cuda_add(cuda_be *cb, gckpt_xt dst, gckpt_xt a, gckpt_xt x)
{
    k_add<<<grid_for(dst.n, kBlock), kBlock, 0, cb->stream>>>(a.p, a.dt, x.p, x.dt, dst.p, dst.dt, dst.n);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_fill(cuda_be *cb, gckpt_xt t, gckpt_init how, float scale, uint64_t key)
{
    if (!t.n) return GCKPT_XS_OK;
    k_fill<<<grid_for(t.n, kBlock), kBlock, 0, cb->stream>>>(t.p, t.dt, t.n, how == GCKPT_INIT_UNIFORM, scale, key);
    LAUNCH_TRY(&cb->be);
    return GCKPT_XS_OK;
}

// Phi-3's strided views read by the kernels (unverified: no GPU here): a dense temporary
// on the stream's pool, freed by the caller with cudaFreeAsync
gckpt_xstatus cuda_dense_view(cuda_be *cb, const gckpt_xt &v, void **out)
{
    gckpt_backend *be = &cb->be;
    size_t bytes = static_cast<size_t>(v.n) * gckpt_dtype_size(static_cast<gckpt_dtype>(v.dt));
    CUDA_TRY(be, cudaMallocAsync(out, bytes ? bytes : 1, cb->stream));
    if (v.n)
        k_gather_view<<<grid_for(v.n, kBlock), kBlock, 0, cb->stream>>>(v.p, v.dt, *out, v.n, v.cols, v.vW, v.voff, v.vblk,
                                                                        v.vstride, v.vstep > 1 ? v.vstep : 1);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}
