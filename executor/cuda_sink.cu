// CUDA kernels of gpt_oss's primitives around its attention, the host's (host_sink.c) on
// the GPU: the sink column cat and drop, the row max with indices, the half-split rotary's
// cat of two halves per head. One thread per output element (or per row / per sink), sums
// in a fixed order: deterministic. Unverified: no GPU where this was written.
#include "cuda_common.cuh"

namespace {

constexpr unsigned kBlock = 256;

// out [rows, W + 1] = cat(x [rows, W], sink[(r / s) % heads]); backward of x: the first W
// columns of g
__global__ void k_cat_sink(const void *x, uint8_t xdt, const void *snk, uint8_t sdt, void *o, uint8_t odt, uint64_t rows,
                           uint64_t W, uint64_t s, uint64_t heads)
{
    GRID_LOOP(i, rows * (W + 1))
    {
        uint64_t r = i / (W + 1), j = i % (W + 1);
        stx(o, odt, i, j < W ? ldx(x, xdt, r * W + j) : ldx(snk, sdt, (r / s) % heads));
    }
}
__global__ void k_cat_sink_bwd_x(const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t rows, uint64_t W)
{
    GRID_LOOP(i, rows * W) stx(gi, gidt, i, ldx(g, gdt, (i / W) * (W + 1) + i % W));
}
// each sink's gradient: its head's last column summed over the rows in row order
__global__ void k_cat_sink_bwd_sink(const void *g, uint8_t gdt, void *gs, uint8_t gsdt, uint64_t rows, uint64_t W,
                                    uint64_t s, uint64_t heads)
{
    GRID_LOOP(h, heads)
    {
        float acc = 0.0f;
        for (uint64_t r = 0; r < rows; r++)
            if ((r / s) % heads == h) acc += ldx(g, gdt, r * (W + 1) + W);
        stx(gs, gsdt, h, acc);
    }
}

// one thread per row: the max and the first index holding it
__global__ void k_max_last(const void *x, uint8_t xdt, void *v, uint8_t vdt, void *ix, uint8_t idt, uint64_t rows, uint64_t W)
{
    GRID_LOOP(r, rows)
    {
        uint64_t best = 0;
        float m = ldx(x, xdt, r * W);
        for (uint64_t j = 1; j < W; j++) {
            float u = ldx(x, xdt, r * W + j);
            if (u > m) {
                m = u;
                best = j;
            }
        }
        stx(v, vdt, r, m);
        if (ix) sti(ix, idt, r, static_cast<int64_t>(best));
    }
}
__global__ void k_max_last_bwd(const void *g, uint8_t gdt, const void *ix, uint8_t idt, void *gi, uint8_t gidt, uint64_t rows,
                               uint64_t W)
{
    GRID_LOOP(i, rows * W)
    {
        uint64_t r = i / W;
        stx(gi, gidt, i, ldi(ix, idt, r) == static_cast<int64_t>(i % W) ? ldx(g, gdt, r) : 0.0f);
    }
}

// [rows, W] -> its first W - 1 columns; backward: a zero last column
__global__ void k_drop_sink(const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t rows, uint64_t W)
{
    GRID_LOOP(i, rows * (W - 1)) stx(o, odt, i, ldx(x, xdt, (i / (W - 1)) * W + i % (W - 1)));
}
__global__ void k_drop_sink_bwd(const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t rows, uint64_t W)
{
    GRID_LOOP(i, rows * W)
    {
        uint64_t j = i % W;
        stx(gi, gidt, i, j + 1 < W ? ldx(g, gdt, (i / W) * (W - 1) + j) : 0.0f);
    }
}

// element i of half k (n elements, halves of h) <-> element (i / h) * 2h + k h + i % h of
// the cat; bwd: the half from the cat's gradient
__global__ void k_cat_halves(const void *src, uint8_t sdt, void *dst, uint8_t ddt, uint64_t n, uint64_t h, int k, bool bwd)
{
    GRID_LOOP(i, n)
    {
        uint64_t o = (i / h) * 2 * h + static_cast<uint64_t>(k) * h + i % h;
        if (bwd) stx(dst, ddt, i, ldx(src, sdt, o));
        else stx(dst, ddt, o, ldx(src, sdt, i));
    }
}

gckpt_xstatus cat_halves(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    gckpt_backend *be = &cb->be;
    uint64_t h = c->op->width / 2, n = c->in[0].rows * c->in[0].cols;
    for (int k = 0; k < 2; k++) {
        if (bwd) {
            if (!c->gin[k].p) continue;
            k_cat_halves<<<grid_for(n, kBlock), kBlock, 0, cb->stream>>>(c->gout.p, c->gout.dt, c->gin[k].p, c->gin[k].dt, n, h, k,
                                                                         true);
        } else {
            NEED_T(be, c, c->in[k], "input");
            k_cat_halves<<<grid_for(n, kBlock), kBlock, 0, cb->stream>>>(c->in[k].p, c->in[k].dt, c->out[0].p, c->out[0].dt, n, h,
                                                                         k, false);
        }
        LAUNCH_TRY(be);
    }
    return GCKPT_XS_OK;
}

} // namespace

namespace {

gckpt_xstatus cat_sink(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    gckpt_backend *be = &cb->be;
    cudaStream_t st = cb->stream;
    const gckpt_xt &x = c->in[0], &g = c->gout, &gi = c->gin[0];
    uint64_t W = x.cols, rows = x.rows; // the shape's rows of width W
    if (!bwd) NEED_T(be, c, x, "input 0");
    const gckpt_xt &snk = c->in[1];
    uint64_t heads = snk.rows * snk.cols;
    if (!bwd) {
        NEED_T(be, c, snk, "input 1");
        k_cat_sink<<<grid_for(rows * (W + 1), kBlock), kBlock, 0, st>>>(x.p, x.dt, snk.p, snk.dt, c->out[0].p, c->out[0].dt,
                                                                        rows, W, c->s, heads);
        LAUNCH_TRY(be);
        return GCKPT_XS_OK;
    }
    if (gi.p) {
        k_cat_sink_bwd_x<<<grid_for(rows * W, kBlock), kBlock, 0, st>>>(g.p, g.dt, gi.p, gi.dt, rows, W);
        LAUNCH_TRY(be);
    }
    if (c->gin[1].p)
        k_cat_sink_bwd_sink<<<grid_for(heads, kBlock), kBlock, 0, st>>>(g.p, g.dt, c->gin[1].p, c->gin[1].dt, rows, W, c->s,
                                                                        heads);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus max_last(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    gckpt_backend *be = &cb->be;
    cudaStream_t st = cb->stream;
    const gckpt_xt &x = c->in[0], &g = c->gout, &gi = c->gin[0];
    uint64_t W = x.cols, rows = x.rows; // the shape's rows of width W
    if (!bwd) {
        NEED_T(be, c, x, "input 0");
        k_max_last<<<grid_for(rows, kBlock), kBlock, 0, st>>>(x.p, x.dt, c->out[0].p, c->out[0].dt, c->out[1].p, c->out[1].dt,
                                                              rows, W);
        LAUNCH_TRY(be);
        return GCKPT_XS_OK;
    }
    if (!gi.p) return GCKPT_XS_OK;
    NEED_T(be, c, c->out[1], "saved indices");
    k_max_last_bwd<<<grid_for(rows * W, kBlock), kBlock, 0, st>>>(g.p, g.dt, c->out[1].p, c->out[1].dt, gi.p, gi.dt, rows, W);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus drop_sink(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    gckpt_backend *be = &cb->be;
    cudaStream_t st = cb->stream;
    const gckpt_xt &x = c->in[0], &g = c->gout, &gi = c->gin[0];
    uint64_t W = x.cols, rows = x.rows; // the shape's rows of width W
    if (!bwd) {
        NEED_T(be, c, x, "input 0");
        k_drop_sink<<<grid_for(rows * (W - 1), kBlock), kBlock, 0, st>>>(x.p, x.dt, c->out[0].p, c->out[0].dt, rows, W);
        LAUNCH_TRY(be);
        return GCKPT_XS_OK;
    }
    if (!gi.p) return GCKPT_XS_OK;
    k_drop_sink_bwd<<<grid_for(rows * W, kBlock), kBlock, 0, st>>>(g.p, g.dt, gi.p, gi.dt, rows, W);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

} // namespace

// ---- the kernel table's entries (cuda_backend.cu) -------------------------------------------

#define SINK_PAIR(name, fn)                                                                          \
    gckpt_xstatus cuda_##name##_fwd(cuda_be *cb, const gckpt_xcall *c) { return fn(cb, c, false); } \
    gckpt_xstatus cuda_##name##_bwd(cuda_be *cb, const gckpt_xcall *c) { return fn(cb, c, true); }
SINK_PAIR(cat_sink, cat_sink)
SINK_PAIR(max_last, max_last)
SINK_PAIR(drop_sink, drop_sink)
SINK_PAIR(cat_halves, cat_halves)
