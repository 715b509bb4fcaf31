// The CUDA backend's ops for context parallelism's ring attention (executor.h's ring_*;
// interp_cp.c calls them block by block and does the exchanges over NCCL). The kernels follow
// host_attn.c's ring kernels loop for loop (one thread per row or per element, no tiling: the
// ring runs on tiny and test shapes first); the buffers are the interpreter's (the ring's arena
// or the backend's scratch), the positions a scratch copy per call. Compiled here, never run: no
// GPU in the session that wrote it (unverified).
#include <math.h>

#include "cuda_common.cuh"

namespace {

constexpr unsigned kBlock = 128;

// How one input of the SDPA call lays out its heads (host_attn.c layout_n's rule): W columns per
// row, the role's heads from off, nh of them (a packed q, k, v: W = 3 * heads * dim).
struct Lay {
    uint64_t W, off, nh;
};

Lay lay_of(const gckpt_xcall *c, int k, int role)
{
    uint64_t rows = c->b * c->s, hd = role == 2 ? c->op->v_dim : c->op->qk_dim, qd = c->op->heads * hd;
    uint64_t W = rows ? c->in[k].n / rows : 0;
    Lay l = {W, 0, hd ? W / hd : 0};
    if (c->op->qk_dim == c->op->v_dim && W == 3 * qd) {
        l.off = static_cast<uint64_t>(role) * qd;
        l.nh = c->op->heads;
    }
    return l;
}

struct Ring {
    const void *q, *o, *lse, *go;
    uint8_t qdt, odt, lsedt, godt, cdt; // cdt: the call's compute dtype (its output's)
    Lay lq, lk, lv;
    uint64_t B, S, nh, hd, vd, kn;
    float scale;
    const uint64_t *pos; // device copy [cp][S]
    uint32_t rank, src;
};

__device__ __forceinline__ bool visible(const Ring &r, uint64_t j, uint64_t qp) { return r.pos[r.src * r.S + j] <= qp; }
__device__ __forceinline__ float rnd(uint8_t dt, float v)
{
    if (dt == GCKPT_DT_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    if (dt == GCKPT_DT_F16) return __half2float(__float2half_rn(v));
    return v;
}

// q . k of query row (b, i), head h against key j of the block
__device__ float qk(const Ring &r, const float *kv, uint64_t b, uint64_t i, uint64_t h, uint64_t j)
{
    uint64_t kh = h / (r.nh / r.lk.nh);
    const float *k = kv + (b * r.S + j) * r.lk.nh * r.hd + kh * r.hd;
    uint64_t qi = (b * r.S + i) * r.lq.W + r.lq.off + h * r.hd;
    float d = 0;
    for (uint64_t u = 0; u < r.hd; u++) d += ldx(r.q, r.qdt, qi + u) * k[u];
    return d;
}

__device__ const float *vrow(const Ring &r, const float *kv, uint64_t b, uint64_t j, uint64_t h)
{
    uint64_t vh = h / (r.nh / r.lv.nh);
    return kv + r.kn + (b * r.S + j) * r.lv.nh * r.vd + vh * r.vd;
}

// one thread per element of this rank's cat(K, V)
__global__ void k_pack(const void *k, uint8_t kdt, const void *v, uint8_t vdt, Lay lk, Lay lv, uint64_t rows, uint64_t hd,
                       uint64_t vd, float *kv)
{
    uint64_t kn = rows * lk.nh * hd, n = kn + rows * lv.nh * vd;
    GRID_LOOP(e, n)
    {
        if (e < kn) {
            uint64_t r = e / (lk.nh * hd), c = e % (lk.nh * hd);
            kv[e] = ldx(k, kdt, r * lk.W + lk.off + c);
        } else {
            uint64_t f = e - kn, r = f / (lv.nh * vd), c = f % (lv.nh * vd);
            kv[e] = ldx(v, vdt, r * lv.W + lv.off + c);
        }
    }
}

// one thread per query row (b, h, i): the block's softmax over its visible keys, out rounded to
// the compute dtype, lse; -inf where no key is visible
__global__ void k_block_fwd(Ring r, const float *kv, float *out, float *lse)
{
    GRID_LOOP(t, r.B * r.nh * r.S)
    {
        uint64_t i = t % r.S, h = (t / r.S) % r.nh, b = t / (r.S * r.nh);
        uint64_t qp = r.pos[r.rank * r.S + i];
        float *o = out + (b * r.S + i) * r.nh * r.vd + h * r.vd;
        float mx = -INFINITY, sum = 0;
        for (uint64_t j = 0; j < r.S; j++)
            if (visible(r, j, qp)) mx = fmaxf(mx, qk(r, kv, b, i, h, j) * r.scale);
        if (mx == -INFINITY) {
            lse[t] = -INFINITY;
            continue;
        }
        for (uint64_t j = 0; j < r.S; j++)
            if (visible(r, j, qp)) sum += expf(qk(r, kv, b, i, h, j) * r.scale - mx);
        for (uint64_t u = 0; u < r.vd; u++) o[u] = 0;
        for (uint64_t j = 0; j < r.S; j++) {
            if (!visible(r, j, qp)) continue;
            float pj = expf(qk(r, kv, b, i, h, j) * r.scale - mx) / sum;
            const float *v = vrow(r, kv, b, j, h);
            for (uint64_t u = 0; u < r.vd; u++) o[u] += pj * v[u];
        }
        for (uint64_t u = 0; u < r.vd; u++) o[u] = rnd(r.cdt, o[u]);
        lse[t] = mx + logf(sum);
    }
}

// one thread per row: torch's _SDPAMerger in fp32
__global__ void k_merge(uint64_t B, uint64_t nh, uint64_t S, uint64_t vd, float *acc, float *acc_lse, const float *out,
                        const float *lse)
{
    GRID_LOOP(t, B * nh * S)
    {
        uint64_t i = t % S, h = (t / S) % nh, b = t / (S * nh), oi = (b * S + i) * nh * vd + h * vd;
        float bl = lse[t], al = acc_lse[t], *a = acc + oi;
        const float *o = out + oi;
        if (bl == -INFINITY) continue;
        if (al == -INFINITY) {
            for (uint64_t u = 0; u < vd; u++) a[u] = o[u];
            acc_lse[t] = bl;
            continue;
        }
        float sg = 1.0f / (1.0f + expf(-(bl - al)));
        for (uint64_t u = 0; u < vd; u++) a[u] = a[u] - sg * (a[u] - o[u]);
        float z = al - bl;
        acc_lse[t] = al - (z >= 0 ? -log1pf(expf(-z)) : z - log1pf(expf(z)));
    }
}

__global__ void k_store(const float *src, void *dst, uint8_t dt, uint64_t n)
{
    GRID_LOOP(e, n) stx(dst, dt, e, src[e]);
}

// D_i = dO . O of query row (b, i), head h; the merged out and lse the call saved
__device__ float row_d(const Ring &r, uint64_t b, uint64_t i, uint64_t h)
{
    uint64_t oi = (b * r.S + i) * r.nh * r.vd + h * r.vd;
    float d = 0;
    for (uint64_t u = 0; u < r.vd; u++) d += ldx(r.go, r.godt, oi + u) * ldx(r.o, r.odt, oi + u);
    return d;
}

__device__ float dot_go_v(const Ring &r, const float *kv, uint64_t b, uint64_t i, uint64_t h, uint64_t j)
{
    const float *v = vrow(r, kv, b, j, h);
    uint64_t oi = (b * r.S + i) * r.nh * r.vd + h * r.vd;
    float d = 0;
    for (uint64_t u = 0; u < r.vd; u++) d += ldx(r.go, r.godt, oi + u) * v[u];
    return d;
}

// one thread per element of dq [b, s, heads, hd]: the block's, rounded, added
__global__ void k_block_dq(Ring r, const float *kv, float *dq)
{
    GRID_LOOP(e, r.B * r.S * r.nh * r.hd)
    {
        uint64_t u = e % r.hd, h = (e / r.hd) % r.nh, i = (e / (r.hd * r.nh)) % r.S, b = e / (r.hd * r.nh * r.S);
        uint64_t qp = r.pos[r.rank * r.S + i], kh = h / (r.nh / r.lk.nh);
        float L = ldx(r.lse, r.lsedt, (b * r.nh + h) * r.S + i), D = row_d(r, b, i, h), g = 0;
        for (uint64_t j = 0; j < r.S; j++) {
            if (!visible(r, j, qp)) continue;
            float p = expf(qk(r, kv, b, i, h, j) * r.scale - L), ds = p * (dot_go_v(r, kv, b, i, h, j) - D) * r.scale;
            g += ds * kv[(b * r.S + j) * r.lk.nh * r.hd + kh * r.hd + u];
        }
        dq[e] += rnd(r.cdt, g);
    }
}

// one thread per element of the block's cat(dK, dV): the sum over the query heads of its group and
// the queries that see the key, rounded, added
__global__ void k_block_dkv(Ring r, const float *kv, float *dkv)
{
    uint64_t nk = r.B * r.S * r.lk.nh * r.hd, n = nk + r.B * r.S * r.lv.nh * r.vd;
    GRID_LOOP(e, n)
    {
        bool isk = e < nk;
        uint64_t f = isk ? e : e - nk, nhx = isk ? r.lk.nh : r.lv.nh, dim = isk ? r.hd : r.vd;
        uint64_t u = f % dim, xh = (f / dim) % nhx, j = (f / (dim * nhx)) % r.S, b = f / (dim * nhx * r.S);
        uint64_t kp = r.pos[r.src * r.S + j], grp = r.nh / nhx;
        float g = 0;
        for (uint64_t h = xh * grp; h < (xh + 1) * grp; h++)
            for (uint64_t i = 0; i < r.S; i++) {
                if (kp > r.pos[r.rank * r.S + i]) continue;
                float L = ldx(r.lse, r.lsedt, (b * r.nh + h) * r.S + i);
                float p = expf(qk(r, kv, b, i, h, j) * r.scale - L);
                uint64_t oi = (b * r.S + i) * r.nh * r.vd + h * r.vd;
                if (!isk) {
                    g += p * ldx(r.go, r.godt, oi + u);
                } else {
                    float ds = p * (dot_go_v(r, kv, b, i, h, j) - row_d(r, b, i, h)) * r.scale;
                    g += ds * ldx(r.q, r.qdt, (b * r.S + i) * r.lq.W + r.lq.off + h * r.hd + u);
                }
            }
        dkv[e] += rnd(r.cdt, g);
    }
}

// the input gradients: each column of a distinct gradient comes from exactly one of dq, dK, dV
__global__ void k_grad(const float *src, uint64_t rows, uint64_t nh, uint64_t dim, Lay l, void *g, uint8_t gdt)
{
    GRID_LOOP(e, rows * nh * dim)
    {
        uint64_t r = e / (nh * dim), c = e % (nh * dim);
        stx(g, gdt, r * l.W + l.off + c, src[e]);
    }
}

int same_as(const gckpt_xcall *c, int k)
{
    for (int j = 0; j < k; j++)
        if (c->op->in[j] == c->op->in[k]) return j;
    return k;
}

Ring ring_of(const gckpt_xcall *c, const gckpt_ring *g, uint32_t src, const uint64_t *dpos)
{
    Ring r{};
    r.q = c->in[0].p;
    r.qdt = c->in[0].dt;
    r.o = c->out[0].p;
    r.odt = c->out[0].dt;
    r.lse = c->out[1].p;
    r.lsedt = c->out[1].dt;
    r.go = c->gout.p;
    r.godt = c->gout.dt;
    r.cdt = c->out[0].dt;
    r.lq = lay_of(c, 0, 0);
    r.lk = lay_of(c, 1, 1);
    r.lv = lay_of(c, 2, 2);
    r.B = c->b;
    r.S = c->s;
    r.nh = c->op->heads;
    r.hd = c->op->qk_dim;
    r.vd = c->op->v_dim;
    r.kn = r.B * r.S * r.lk.nh * r.hd;
    r.scale = static_cast<float>(c->op->sb);
    r.pos = dpos;
    r.rank = g->rank;
    r.src = src;
    return r;
}

// every rank's positions on the device for one kernel (scratch, freed in stream order after it)
gckpt_xstatus positions(gckpt_backend *be, const gckpt_ring *g, uint64_t **out)
{
    uint64_t bytes = sizeof(uint64_t) * g->cp * g->s;
    gckpt_xstatus rc = be->scratch(be, bytes, reinterpret_cast<void **>(out));
    if (rc != GCKPT_XS_OK) return rc;
    CUDA_TRY(be, cudaMemcpyAsync(*out, g->pos, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, as_cuda(be)->stream));
    return GCKPT_XS_OK;
}

gckpt_xstatus shapes_ok(gckpt_backend *be, const gckpt_xcall *c)
{
    Lay lk = lay_of(c, 1, 1), lv = lay_of(c, 2, 2);
    if (!lk.nh || !lv.nh || c->op->heads % lk.nh || c->op->heads % lv.nh)
        return op_fail(be, c, "the ring's k and v layouts do not match the heads");
    return GCKPT_XS_OK;
}

gckpt_xstatus r_pack(gckpt_backend *be, const gckpt_xcall *c, float *kv, uint64_t *n)
{
    Lay lk = lay_of(c, 1, 1), lv = lay_of(c, 2, 2);
    uint64_t rows = c->b * c->s;
    *n = rows * (lk.nh * c->op->qk_dim + lv.nh * c->op->v_dim);
    if (!kv || !*n) return GCKPT_XS_OK;
    NEED_T(be, c, c->in[1], "k");
    NEED_T(be, c, c->in[2], "v");
    k_pack<<<grid_for(*n, kBlock), kBlock, 0, as_cuda(be)->stream>>>(c->in[1].p, c->in[1].dt, c->in[2].p, c->in[2].dt, lk, lv,
                                                                      rows, c->op->qk_dim, c->op->v_dim, kv);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus r_block_fwd(gckpt_backend *be, const gckpt_xcall *c, const gckpt_ring *g, uint32_t src, const float *kv,
                          float *out, float *lse)
{
    NEED_T(be, c, c->in[0], "q");
    if (shapes_ok(be, c) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    uint64_t *dpos = nullptr, rows = c->b * c->op->heads * c->s;
    gckpt_xstatus rc = positions(be, g, &dpos);
    if (rc != GCKPT_XS_OK) return rc;
    Ring r = ring_of(c, g, src, dpos);
    if (rows) k_block_fwd<<<grid_for(rows, kBlock), kBlock, 0, as_cuda(be)->stream>>>(r, kv, out, lse);
    cudaError_t e = cudaGetLastError();
    be->scratch_free(be, dpos);
    CUDA_TRY(be, e);
    return GCKPT_XS_OK;
}

gckpt_xstatus r_merge(gckpt_backend *be, const gckpt_xcall *c, float *acc, float *acc_lse, const float *out, const float *lse)
{
    uint64_t rows = c->b * c->op->heads * c->s;
    if (!rows) return GCKPT_XS_OK;
    k_merge<<<grid_for(rows, kBlock), kBlock, 0, as_cuda(be)->stream>>>(c->b, c->op->heads, c->s, c->op->v_dim, acc, acc_lse,
                                                                         out, lse);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus r_store(gckpt_backend *be, const gckpt_xcall *c, const float *acc, const float *acc_lse)
{
    NEED_T(be, c, c->out[0], "output");
    NEED_T(be, c, c->out[1], "logsumexp output");
    uint64_t no = c->b * c->s * c->op->heads * c->op->v_dim, nl = c->b * c->op->heads * c->s;
    cudaStream_t s = as_cuda(be)->stream;
    if (no) k_store<<<grid_for(no, kBlock), kBlock, 0, s>>>(acc, c->out[0].p, c->out[0].dt, no);
    if (nl) k_store<<<grid_for(nl, kBlock), kBlock, 0, s>>>(acc_lse, c->out[1].p, c->out[1].dt, nl);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus r_block_bwd(gckpt_backend *be, const gckpt_xcall *c, const gckpt_ring *g, uint32_t src, const float *kv,
                          float *dq, float *dkv)
{
    NEED_T(be, c, c->in[0], "q");
    NEED_T(be, c, c->out[0], "saved output");
    NEED_T(be, c, c->out[1], "saved logsumexp");
    NEED_T(be, c, c->gout, "output gradient");
    if (shapes_ok(be, c) != GCKPT_XS_OK) return GCKPT_XS_ERROR;
    uint64_t *dpos = nullptr;
    gckpt_xstatus rc = positions(be, g, &dpos);
    if (rc != GCKPT_XS_OK) return rc;
    Ring r = ring_of(c, g, src, dpos);
    uint64_t nq = r.B * r.S * r.nh * r.hd, n = r.kn + r.B * r.S * r.lv.nh * r.vd;
    cudaStream_t s = as_cuda(be)->stream;
    if (nq) k_block_dq<<<grid_for(nq, kBlock), kBlock, 0, s>>>(r, kv, dq);
    if (n) k_block_dkv<<<grid_for(n, kBlock), kBlock, 0, s>>>(r, kv, dkv);
    cudaError_t e = cudaGetLastError();
    be->scratch_free(be, dpos);
    CUDA_TRY(be, e);
    return GCKPT_XS_OK;
}

gckpt_xstatus r_grad(gckpt_backend *be, const gckpt_xcall *c, const float *dq, const float *dkv)
{
    Lay l[3] = {lay_of(c, 0, 0), lay_of(c, 1, 1), lay_of(c, 2, 2)};
    const float *src[3] = {dq, dkv, dkv + c->b * c->s * l[1].nh * c->op->qk_dim};
    uint64_t nh[3] = {c->op->heads, l[1].nh, l[2].nh}, dim[3] = {c->op->qk_dim, c->op->qk_dim, c->op->v_dim};
    uint64_t rows = c->b * c->s;
    cudaStream_t s = as_cuda(be)->stream;
    for (int k = 0; k < 3; k++) {
        const gckpt_xt &g = c->gin[same_as(c, k)];
        uint64_t n = rows * nh[k] * dim[k];
        if (!g.p || !n) continue;
        k_grad<<<grid_for(n, kBlock), kBlock, 0, s>>>(src[k], rows, nh[k], dim[k], l[k], g.p, g.dt);
    }
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

} // namespace

void cuda_cp_ops(gckpt_backend *be)
{
    be->ring_pack = r_pack;
    be->ring_block_fwd = r_block_fwd;
    be->ring_merge = r_merge;
    be->ring_store = r_store;
    be->ring_block_bwd = r_block_bwd;
    be->ring_grad = r_grad;
}
