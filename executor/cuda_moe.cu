// CUDA kernels of the mixture-of-experts primitives (recipe_moe.c), the host's
// (host_moe.c) on the GPU: top-k, the router's sums and division, the sort of the expert
// ids, floordiv, the inverse permutation and the histogram / offsets. Deterministic: every
// output element is made by one thread in a fixed order. The grouped GEMMs are in
// cuda_matmul.cu, the row gathers are the embedding's kernels (cuda_elem.cu).
// Unverified: no GPU where this was written.
#include "cuda_common.cuh"
#include "gckpt/executor/kernel_math.h"

namespace {

constexpr unsigned kBlock = 256;

// one thread per row of E: the k largest in gckpt_topk_before's order
__global__ void k_topk(const void *x, uint8_t xdt, void *v, uint8_t vdt, int64_t *ix, uint64_t rows, uint64_t E, uint64_t k)
{
    GRID_LOOP(r, rows)
    {
        for (uint64_t j = 0; j < k; j++) {
            uint64_t best = E;
            for (uint64_t e = 0; e < E; e++) {
                bool taken = false;
                for (uint64_t q = 0; q < j && !taken; q++) taken = static_cast<uint64_t>(ix[r * k + q]) == e;
                if (!taken && (best == E || gckpt_topk_before(ldx(x, xdt, r * E + e), e, ldx(x, xdt, r * E + best), best)))
                    best = e;
            }
            stx(v, vdt, r * k + j, ldx(x, xdt, r * E + best));
            ix[r * k + j] = static_cast<int64_t>(best);
        }
    }
}

// one thread per row: the values' gradients to the chosen columns, zeros elsewhere
__global__ void k_topk_bwd(const void *g, uint8_t gdt, const int64_t *ix, void *gi, uint8_t gidt, uint64_t rows, uint64_t E,
                           uint64_t k)
{
    GRID_LOOP(r, rows)
    {
        for (uint64_t e = 0; e < E; e++) {
            float s = 0.0f;
            for (uint64_t j = 0; j < k; j++)
                if (static_cast<uint64_t>(ix[r * k + j]) == e) s += ldx(g, gdt, r * k + j);
            stx(gi, gidt, r * E + e, s);
        }
    }
}

// one thread per output: its w inputs in index order (gckpt_sum_dst's inverse), / div
__global__ void k_sum(const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t no, uint64_t w, uint64_t B, float div)
{
    GRID_LOOP(q, no)
    {
        uint64_t a = q / B, b = q % B;
        float s = 0.0f;
        for (uint64_t j = 0; j < w; j++) s += ldx(x, xdt, (a * w + j) * B + b);
        stx(o, odt, q, s / div);
    }
}

__global__ void k_sum_bwd(const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t n, uint64_t w, uint64_t B, float div)
{
    GRID_LOOP(i, n) stx(gi, gidt, i, ldx(g, gdt, gckpt_sum_dst(i, w, B)) / div);
}

__global__ void k_div(const void *x, uint8_t xdt, const void *y, uint8_t ydt, void *o, uint8_t odt, uint64_t n, int mode,
                      uint64_t width, uint64_t xc, uint64_t s)
{
    GRID_LOOP(i, n) stx(o, odt, i, ldx(x, xdt, i) / ldx(y, ydt, gckpt_bcast_index(mode, width, xc, s, 0, i)));
}

// dy: one thread per element of y, its group's elements in order (row broadcast: width)
__global__ void k_div_bwd_y(const void *g, uint8_t gdt, const void *out, uint8_t odt, const void *y, uint8_t ydt, void *gy,
                            uint8_t gydt, uint64_t ny, uint64_t per)
{
    GRID_LOOP(j, ny)
    {
        float s = 0.0f, yv = ldx(y, ydt, j);
        for (uint64_t q = 0; q < per; q++) s -= ldx(g, gdt, j * per + q) * ldx(out, odt, j * per + q) / yv;
        stx(gy, gydt, j, s);
    }
}

// a stable sort by rank: element i goes to #{smaller} + #{equal before i}
__global__ void k_sort(const void *x, uint8_t xdt, void *v, uint8_t vdt, void *perm, uint8_t pdt, uint64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t a = ldi(x, xdt, i);
        uint64_t r = 0;
        for (uint64_t j = 0; j < n; j++) {
            int64_t b = ldi(x, xdt, j);
            r += b < a || (b == a && j < i);
        }
        sti(v, vdt, r, a);
        sti(perm, pdt, r, static_cast<int64_t>(i));
    }
}

__global__ void k_floordiv(const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t n, int64_t d)
{
    GRID_LOOP(i, n) sti(o, odt, i, ldi(x, xdt, i) / d);
}

__global__ void k_invert(const void *p, uint8_t pdt, void *o, uint8_t odt, uint64_t n)
{
    GRID_LOOP(i, n)
    {
        int64_t j = ldi(p, pdt, i);
        if (j >= 0 && static_cast<uint64_t>(j) < n) sti(o, odt, static_cast<uint64_t>(j), static_cast<int64_t>(i));
    }
}

// one block: a thread per bin counts its ids, then thread 0 writes the counts (float) or
// their running sum (integer: the groups' end offsets)
__global__ void k_histc(const void *x, uint8_t xdt, uint64_t n, void *o, uint8_t odt, uint64_t E, float div)
{
    extern __shared__ float cnt[];
    for (uint64_t e = threadIdx.x; e < E; e += blockDim.x) {
        float s = 0.0f;
        for (uint64_t i = 0; i < n; i++) {
            float v = ldx(x, xdt, i);
            s += v >= static_cast<float>(e) && v < static_cast<float>(e) + 1.0f;
        }
        cnt[e] = s;
    }
    __syncthreads();
    if (threadIdx.x) return;
    bool offsets = odt == GCKPT_DT_I32 || odt == GCKPT_DT_I64;
    int64_t run = 0;
    for (uint64_t e = 0; e < E; e++) {
        run += static_cast<int64_t>(cnt[e]);
        if (offsets) sti(o, odt, e, run);
        else stx(o, odt, e, cnt[e] / div);
    }
}

uint64_t shape_n(const gckpt_xt &t) { return t.rows * t.cols; }

float normaliser(const gckpt_xcall *c) { return c->op->sb > 0 ? static_cast<float>(static_cast<double>(shape_n(c->in[0])) / c->op->sb) : 1.0f; }

} // namespace

// ---- the kernel table's entries (cuda_backend.cu) -------------------------------------------

// A forward's operands: input 0 (needed) of n elements, output 0.
#define MOE_FWD(name)                                                                               \
    gckpt_xstatus cuda_##name##_fwd(cuda_be *cb, const gckpt_xcall *c)                             \
    {                                                                                               \
        gckpt_backend *be = &cb->be;                                                                \
        cudaStream_t st = cb->stream;                                                               \
        const gckpt_xt &x = c->in[0], &o = c->out[0];                                               \
        NEED_T(be, c, x, "input");                                                                  \
        uint64_t n = shape_n(x);                                                                    \
        (void)o;                                                                                    \
        (void)n;                                                                                    \
        {
#define MOE_END                                                                                     \
        }                                                                                           \
        LAUNCH_TRY(be);                                                                             \
        return GCKPT_XS_OK;                                                                         \
    }
// A backward's operands: the output gradient, input 0's gradient.
#define MOE_BWD(name)                                                                               \
    gckpt_xstatus cuda_##name##_bwd(cuda_be *cb, const gckpt_xcall *c)                             \
    {                                                                                               \
        gckpt_backend *be = &cb->be;                                                                \
        cudaStream_t st = cb->stream;                                                               \
        const gckpt_xt &g = c->gout, &gi = c->gin[0];                                               \
        (void)g;                                                                                    \
        {

MOE_FWD(topk)
    uint64_t E = c->op->experts, rows = n / E;
    k_topk<<<grid_for(rows, kBlock), kBlock, 0, st>>>(x.p, x.dt, o.p, o.dt, static_cast<int64_t *>(c->out[1].p), rows, E,
                                                      c->op->width);
MOE_END

MOE_FWD(sum)
    uint64_t no = shape_n(o);
    k_sum<<<grid_for(no, kBlock), kBlock, 0, st>>>(x.p, x.dt, o.p, o.dt, no, n / no, gckpt_sum_block(c->op->sa, o.cols), normaliser(c));
MOE_END

MOE_FWD(div)
    NEED_T(be, c, c->in[1], "divisor");
    k_div<<<grid_for(o.n, kBlock), kBlock, 0, st>>>(x.p, x.dt, c->in[1].p, c->in[1].dt, o.p, o.dt, o.n, c->op->bcast,
                                                    c->op->width, x.cols, c->s);
MOE_END

MOE_FWD(sort)
    k_sort<<<grid_for(n, kBlock), kBlock, 0, st>>>(x.p, x.dt, o.p, o.dt, c->out[1].p, c->out[1].dt, n);
MOE_END

MOE_FWD(floordiv)
    if (c->op->sa < 1) return op_fail(be, c, "floordiv by less than 1");
    k_floordiv<<<grid_for(n, kBlock), kBlock, 0, st>>>(x.p, x.dt, o.p, o.dt, n, static_cast<int64_t>(c->op->sa));
MOE_END

MOE_FWD(invert_perm)
    k_invert<<<grid_for(n, kBlock), kBlock, 0, st>>>(x.p, x.dt, o.p, o.dt, n);
MOE_END

MOE_FWD(histc)
    if (c->op->width > 8192) return op_fail(be, c, "more than 8192 bins");
    k_histc<<<1, kBlock, c->op->width * sizeof(float), st>>>(x.p, x.dt, n, o.p, o.dt, c->op->width, normaliser(c));
MOE_END

MOE_BWD(topk)
    if (!gi.p) return GCKPT_XS_OK;
    NEED_T(be, c, c->out[1], "saved indices");
    uint64_t E = c->op->experts, rows = gi.n / E;
    k_topk_bwd<<<grid_for(rows, kBlock), kBlock, 0, st>>>(g.p, g.dt, static_cast<const int64_t *>(c->out[1].p), gi.p, gi.dt,
                                                          rows, E, c->op->width);
MOE_END

MOE_BWD(sum)
    if (!gi.p) return GCKPT_XS_OK;
    uint64_t n = shape_n(gi);
    k_sum_bwd<<<grid_for(n, kBlock), kBlock, 0, st>>>(g.p, g.dt, gi.p, gi.dt, n, n / shape_n(g), gckpt_sum_block(c->op->sa, g.cols), normaliser(c));
MOE_END

MOE_BWD(div)
    NEED_T(be, c, c->in[1], "saved divisor");
    if (gi.p) {
        k_div<<<grid_for(gi.n, kBlock), kBlock, 0, st>>>(g.p, g.dt, c->in[1].p, c->in[1].dt, gi.p, gi.dt, gi.n, c->op->bcast,
                                                         c->op->width, c->in[0].cols, c->s);
        LAUNCH_TRY(be);
    }
    const gckpt_xt &gy = c->gin[1];
    if (!gy.p) return GCKPT_XS_OK;
    NEED_T(be, c, c->out[0], "saved output");
    if (c->op->bcast != GCKPT_BC_ROW && c->op->bcast != GCKPT_BC_NONE) return op_fail(be, c, "division's broadcast");
    k_div_bwd_y<<<grid_for(gy.n, kBlock), kBlock, 0, st>>>(g.p, g.dt, c->out[0].p, c->out[0].dt, c->in[1].p, c->in[1].dt,
                                                           gy.p, gy.dt, gy.n, c->op->bcast == GCKPT_BC_ROW ? c->op->width : 1);
MOE_END
