// CUDA kernels of attention: a fused causal SDPA (flash-attention style online softmax on
// CUDA cores, fp32 accumulation, logsumexp saved, dropout from the counter-based
// generator, GQA and gpt2's packed q/k/v, a sliding window and an additive mask) with a
// two-kernel deterministic backward (dK/dV over key tiles, dQ over query tiles into the
// op's fp32 workspace; no atomics), eager attention's softmax, transpose and repeat_kv,
// and SDPA's conversion of masking_utils' bool mask. The window and the mask are
// unverified: no GPU here.
#include "gckpt/executor/kernel_math.h"
#include <math.h>

#include "cuda_common.cuh"

namespace {

constexpr unsigned kBlock = 256;
constexpr int kTile = 32; // keys (forward, dQ) or queries (dK/dV) per tile: one per lane

struct Att {
    const void *q, *k, *v, *o, *go, *lse;
    uint8_t qdt, kdt, vdt, odt, godt, lsedt;
    uint64_t qW, kW, vW, qoff, koff, voff;
    uint64_t nh, nkv;
    void *out, *lse_out, *dk, *dv;
    uint8_t outdt, lse_outdt, dkdt, dvdt;
    float *dq;                  // fp32 [rows, nh * hd]
    uint64_t S, hd;
    float scale, p;
    uint64_t rng;
    uint64_t window;            // sliding window (gckpt_key_visible), 0: causal only
    const void *mask;           // additive [b, 1, s, s] mask, or null
    uint8_t maskdt;
};

// the score's additive mask for (batch b, query i, key j)
__device__ __forceinline__ float mask_bias(const Att &a, uint64_t b, uint64_t i, uint64_t j)
{
    return a.mask ? ldx(a.mask, a.maskdt, (b * a.S + i) * a.S + j) : 0.0f;
}

__device__ __forceinline__ int kstride(int hd) { return (hd & 1) ? hd : hd + 1; }

__device__ __forceinline__ float xor_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float xor_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- forward: block = NW warps x QW queries; lanes are keys of a 32-key tile -----------------

constexpr int F_NW = 4, F_QW = 8, F_BQ = F_NW * F_QW;

template <int DPL> __global__ void __launch_bounds__(F_NW * 32) k_sdpa_fwd(Att a)
{
    extern __shared__ float sm[];
    const int hd = static_cast<int>(a.hd), KS = kstride(hd);
    float *Ks = sm, *Vs = Ks + kTile * KS, *Qs = Vs + kTile * hd;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const uint64_t b = blockIdx.z, h = blockIdx.y, q0 = static_cast<uint64_t>(blockIdx.x) * F_BQ, S = a.S;
    const uint64_t kh = h / (a.nh / a.nkv), qd = a.nh * a.hd;
    const float inv_keep = a.p > 0.0f ? 1.0f / (1.0f - a.p) : 1.0f;
    for (int qi = 0; qi < F_QW; qi++) {
        uint64_t i = q0 + w * F_QW + qi;
        for (int d = lane; d < hd; d += 32)
            Qs[(w * F_QW + qi) * hd + d] = i < S ? ldx(a.q, a.qdt, (b * S + i) * a.qW + a.qoff + h * a.hd + d) : 0.0f;
    }
    float m[F_QW], l[F_QW], acc[F_QW][DPL];
#pragma unroll
    for (int qi = 0; qi < F_QW; qi++) {
        m[qi] = -INFINITY;
        l[qi] = 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; t++) acc[qi][t] = 0.0f;
    }
    const uint64_t kend = S < q0 + F_BQ ? S : q0 + F_BQ;
    // the first tile with a key the block's first query sees
    for (uint64_t k0 = gckpt_first_key(q0, a.window) / kTile * kTile; k0 < kend; k0 += kTile) {
        __syncthreads();
        for (int e = threadIdx.x; e < kTile * hd; e += blockDim.x) {
            int r = e / hd, d = e % hd;
            uint64_t j = k0 + r;
            Ks[r * KS + d] = j < S ? ldx(a.k, a.kdt, (b * S + j) * a.kW + a.koff + kh * a.hd + d) : 0.0f;
            Vs[r * hd + d] = j < S ? ldx(a.v, a.vdt, (b * S + j) * a.vW + a.voff + kh * a.hd + d) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int qi = 0; qi < F_QW; qi++) {
            const uint64_t i = q0 + w * F_QW + qi;
            if (i >= S || k0 > i) continue; // uniform across the warp
            const uint64_t j = k0 + lane;
            const bool valid = gckpt_key_visible(i, j, a.window);
            const float *qr = Qs + (w * F_QW + qi) * hd;
            float sj = -INFINITY;
            if (valid) {
                float dot = 0.0f;
                for (int d = 0; d < hd; d++) dot += qr[d] * Ks[lane * KS + d];
                sj = dot * a.scale + mask_bias(a, b, i, j);
            }
            float mn = fmaxf(m[qi], xor_max(sj));
            if (mn == -INFINITY) continue; // no key of this tile is in query i's window (warp-uniform)
            float corr = expf(m[qi] - mn);
            float pj = valid ? expf(sj - mn) : 0.0f;
            l[qi] = l[qi] * corr + xor_sum(pj);
            float pd = pj;
            if (a.p > 0.0f && valid) pd = gckpt_keep(a.rng, ((b * a.nh + h) * S + i) * S + j, a.p) ? pj * inv_keep : 0.0f;
#pragma unroll
            for (int t = 0; t < DPL; t++) acc[qi][t] *= corr;
            for (int jj = 0; jj < kTile; jj++) {
                float pv = __shfl_sync(0xffffffffu, pd, jj);
                if (k0 + jj > i) break;
#pragma unroll
                for (int t = 0; t < DPL; t++) {
                    int d = lane + 32 * t;
                    if (d < hd) acc[qi][t] += pv * Vs[jj * hd + d];
                }
            }
            m[qi] = mn;
        }
    }
#pragma unroll
    for (int qi = 0; qi < F_QW; qi++) {
        uint64_t i = q0 + w * F_QW + qi;
        if (i >= S) continue;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            int d = lane + 32 * t;
            if (d < hd) stx(a.out, a.outdt, (b * S + i) * qd + h * a.hd + d, acc[qi][t] / l[qi]);
        }
        if (lane == 0) stx(a.lse_out, a.lse_outdt, (b * a.nh + h) * S + i, m[qi] + logf(l[qi]));
    }
}

// D_i = sum_d dO_i[d] O_i[d] for query i of head h, by one warp
__device__ __forceinline__ float rowdot(const Att &a, uint64_t b, uint64_t h, uint64_t i, int lane)
{
    const uint64_t qd = a.nh * a.hd, base = (b * a.S + i) * qd + h * a.hd;
    float s = 0.0f;
    for (uint64_t d = lane; d < a.hd; d += 32) s += ldx(a.go, a.godt, base + d) * ldx(a.o, a.odt, base + d);
    return xor_sum(s);
}

// ---- backward dQ: like the forward, lanes are keys ---------------------------------------------

template <int DPL> __global__ void __launch_bounds__(F_NW * 32) k_sdpa_dq(Att a)
{
    extern __shared__ float sm[];
    const int hd = static_cast<int>(a.hd), KS = kstride(hd);
    float *Ks = sm, *Vs = Ks + kTile * KS, *Qs = Vs + kTile * KS, *Gs = Qs + F_BQ * hd;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const uint64_t b = blockIdx.z, h = blockIdx.y, q0 = static_cast<uint64_t>(blockIdx.x) * F_BQ, S = a.S;
    const uint64_t kh = h / (a.nh / a.nkv), qd = a.nh * a.hd;
    const float inv_keep = a.p > 0.0f ? 1.0f / (1.0f - a.p) : 1.0f;
    float lse[F_QW], Dv[F_QW], dq[F_QW][DPL];
#pragma unroll
    for (int qi = 0; qi < F_QW; qi++) {
        uint64_t i = q0 + w * F_QW + qi;
        for (int d = lane; d < hd; d += 32) {
            Qs[(w * F_QW + qi) * hd + d] = i < S ? ldx(a.q, a.qdt, (b * S + i) * a.qW + a.qoff + h * a.hd + d) : 0.0f;
            Gs[(w * F_QW + qi) * hd + d] = i < S ? ldx(a.go, a.godt, (b * S + i) * qd + h * a.hd + d) : 0.0f;
        }
        lse[qi] = i < S ? ldx(a.lse, a.lsedt, (b * a.nh + h) * S + i) : 0.0f;
        Dv[qi] = i < S ? rowdot(a, b, h, i, lane) : 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; t++) dq[qi][t] = 0.0f;
    }
    const uint64_t kend = S < q0 + F_BQ ? S : q0 + F_BQ;
    for (uint64_t k0 = gckpt_first_key(q0, a.window) / kTile * kTile; k0 < kend; k0 += kTile) {
        __syncthreads();
        for (int e = threadIdx.x; e < kTile * hd; e += blockDim.x) {
            int r = e / hd, d = e % hd;
            uint64_t j = k0 + r;
            Ks[r * KS + d] = j < S ? ldx(a.k, a.kdt, (b * S + j) * a.kW + a.koff + kh * a.hd + d) : 0.0f;
            Vs[r * KS + d] = j < S ? ldx(a.v, a.vdt, (b * S + j) * a.vW + a.voff + kh * a.hd + d) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int qi = 0; qi < F_QW; qi++) {
            const uint64_t i = q0 + w * F_QW + qi;
            if (i >= S || k0 > i) continue;
            const uint64_t j = k0 + lane;
            const bool valid = gckpt_key_visible(i, j, a.window);
            const float *qr = Qs + (w * F_QW + qi) * hd, *gr = Gs + (w * F_QW + qi) * hd;
            float ds = 0.0f;
            if (valid) {
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < hd; d++) {
                    s += qr[d] * Ks[lane * KS + d];
                    dp += gr[d] * Vs[lane * KS + d];
                }
                float p = expf(s * a.scale + mask_bias(a, b, i, j) - lse[qi]);
                if (a.p > 0.0f) dp = gckpt_keep(a.rng, ((b * a.nh + h) * S + i) * S + j, a.p) ? dp * inv_keep : 0.0f;
                ds = p * (dp - Dv[qi]);
            }
            for (int jj = 0; jj < kTile; jj++) {
                float dsj = __shfl_sync(0xffffffffu, ds, jj);
                if (k0 + jj > i) break;
#pragma unroll
                for (int t = 0; t < DPL; t++) {
                    int d = lane + 32 * t;
                    if (d < hd) dq[qi][t] += dsj * Ks[jj * KS + d];
                }
            }
        }
    }
#pragma unroll
    for (int qi = 0; qi < F_QW; qi++) {
        uint64_t i = q0 + w * F_QW + qi;
        if (i >= S) continue;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            int d = lane + 32 * t;
            if (d < hd) a.dq[(b * S + i) * qd + h * a.hd + d] = dq[qi][t] * a.scale;
        }
    }
}

// ---- backward dK, dV: block = KV_NW warps x KV_KW keys; lanes are queries ---------------------

constexpr int KV_NW = 8, KV_KW = 4, KV_BK = KV_NW * KV_KW;

template <int DPL> __global__ void __launch_bounds__(KV_NW * 32) k_sdpa_dkv(Att a)
{
    extern __shared__ float sm[];
    const int hd = static_cast<int>(a.hd), KS = kstride(hd);
    float *Kb = sm, *Vb = Kb + KV_BK * hd, *Qt = Vb + KV_BK * hd, *Gt = Qt + kTile * KS, *Lt = Gt + kTile * KS,
          *Dt = Lt + kTile;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const uint64_t b = blockIdx.z, kvh = blockIdx.y, k0 = static_cast<uint64_t>(blockIdx.x) * KV_BK, S = a.S;
    const uint64_t rep = a.nh / a.nkv, qd = a.nh * a.hd;
    const float inv_keep = a.p > 0.0f ? 1.0f / (1.0f - a.p) : 1.0f;
    for (int e = threadIdx.x; e < KV_BK * hd; e += blockDim.x) {
        int r = e / hd, d = e % hd;
        uint64_t j = k0 + r;
        Kb[r * hd + d] = j < S ? ldx(a.k, a.kdt, (b * S + j) * a.kW + a.koff + kvh * a.hd + d) : 0.0f;
        Vb[r * hd + d] = j < S ? ldx(a.v, a.vdt, (b * S + j) * a.vW + a.voff + kvh * a.hd + d) : 0.0f;
    }
    float dk[KV_KW][DPL], dv[KV_KW][DPL];
#pragma unroll
    for (int kj = 0; kj < KV_KW; kj++)
#pragma unroll
        for (int t = 0; t < DPL; t++) dk[kj][t] = dv[kj][t] = 0.0f;
    for (uint64_t r = 0; r < rep; r++) {
        const uint64_t h = kvh * rep + r;
        // the queries that see a key of this block: up to its last key + window - 1
        const uint64_t qend = a.window && k0 + KV_BK - 1 + a.window < S ? k0 + KV_BK - 1 + a.window : S;
        for (uint64_t qt0 = k0; qt0 < qend; qt0 += kTile) {
            __syncthreads();
            for (int e = threadIdx.x; e < kTile * hd; e += blockDim.x) {
                int rr = e / hd, d = e % hd;
                uint64_t i = qt0 + rr;
                Qt[rr * KS + d] = i < S ? ldx(a.q, a.qdt, (b * S + i) * a.qW + a.qoff + h * a.hd + d) : 0.0f;
                Gt[rr * KS + d] = i < S ? ldx(a.go, a.godt, (b * S + i) * qd + h * a.hd + d) : 0.0f;
            }
            for (int rr = w; rr < kTile; rr += KV_NW) {
                uint64_t i = qt0 + rr;
                float dval = i < S ? rowdot(a, b, h, i, lane) : 0.0f;
                if (lane == 0) {
                    Dt[rr] = dval;
                    Lt[rr] = i < S ? ldx(a.lse, a.lsedt, (b * a.nh + h) * S + i) : 0.0f;
                }
            }
            __syncthreads();
            const uint64_t i = qt0 + lane;
#pragma unroll
            for (int kj = 0; kj < KV_KW; kj++) {
                const int kr = w * KV_KW + kj;
                const uint64_t j = k0 + kr;
                if (j >= S) continue; // uniform across the warp
                const bool valid = i < S && gckpt_key_visible(i, j, a.window);
                float pd = 0.0f, ds = 0.0f;
                if (valid) {
                    float s = 0.0f, dp = 0.0f;
                    for (int d = 0; d < hd; d++) {
                        s += Qt[lane * KS + d] * Kb[kr * hd + d];
                        dp += Gt[lane * KS + d] * Vb[kr * hd + d];
                    }
                    float p = expf(s * a.scale + mask_bias(a, b, i, j) - Lt[lane]);
                    pd = p;
                    if (a.p > 0.0f) {
                        bool keep = gckpt_keep(a.rng, ((b * a.nh + h) * S + i) * S + j, a.p);
                        pd = keep ? p * inv_keep : 0.0f;
                        dp = keep ? dp * inv_keep : 0.0f;
                    }
                    ds = p * (dp - Dt[lane]);
                }
                for (int ll = 0; ll < kTile; ll++) {
                    float pl = __shfl_sync(0xffffffffu, pd, ll), sl = __shfl_sync(0xffffffffu, ds, ll);
#pragma unroll
                    for (int t = 0; t < DPL; t++) {
                        int d = lane + 32 * t;
                        if (d < hd) {
                            dv[kj][t] += pl * Gt[ll * KS + d];
                            dk[kj][t] += sl * Qt[ll * KS + d];
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int kj = 0; kj < KV_KW; kj++) {
        uint64_t j = k0 + w * KV_KW + kj;
        if (j >= S) continue;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
            int d = lane + 32 * t;
            if (d >= hd) continue;
            if (a.dk) stx(a.dk, a.dkdt, (b * S + j) * a.kW + a.koff + kvh * a.hd + d, dk[kj][t] * a.scale);
            if (a.dv) stx(a.dv, a.dvdt, (b * S + j) * a.vW + a.voff + kvh * a.hd + d, dv[kj][t]);
        }
    }
}

// dq (fp32, [rows, qd]) into the q gradient's role columns
__global__ void k_dq_store(const float *dq, void *g, uint8_t gdt, uint64_t rows, uint64_t qd, uint64_t W, uint64_t off)
{
    GRID_LOOP(e, rows * qd) stx(g, gdt, (e / qd) * W + off + e % qd, dq[e]);
}

template <int DPL> size_t fwd_smem(int hd) { return sizeof(float) * (kTile * (hd | 1) + kTile * hd + F_BQ * hd); }
template <int DPL> size_t dq_smem(int hd) { return sizeof(float) * (2 * kTile * (hd | 1) + 2 * F_BQ * hd); }
template <int DPL> size_t dkv_smem(int hd) { return sizeof(float) * (2 * KV_BK * hd + 2 * kTile * (hd | 1) + 2 * kTile); }

template <typename K> gckpt_xstatus launch(cuda_be *cb, K kernel, dim3 grid, unsigned threads, size_t smem, const Att &a)
{
    gckpt_backend *be = &cb->be;
    if (smem > cb->smem_optin) {
        gckpt_seterr(&be->err, "SDPA kernel needs %zu bytes of shared memory, the GPU allows %zu (head_dim too large)", smem,
                     cb->smem_optin);
        return GCKPT_XS_ERROR;
    }
    if (smem > 48 * 1024) CUDA_TRY(be, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<grid, threads, smem, cb->stream>>>(a);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

int dpl_of(uint64_t hd) { return hd <= 32 ? 1 : hd <= 64 ? 2 : hd <= 128 ? 4 : hd <= 256 ? 8 : 0; }

Att att_of(const gckpt_xcall *c)
{
    Att a{};
    uint64_t hd = c->op->qk_dim, qd = c->op->heads * hd;
    const uint64_t W[3] = {c->in[0].cols, c->in[1].cols, c->in[2].cols};
    uint64_t off[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++)
        if (W[k] == 3 * qd) off[k] = static_cast<uint64_t>(k) * qd;
    a.q = c->in[0].p;
    a.k = c->in[1].p;
    a.v = c->in[2].p;
    a.qdt = c->in[0].dt;
    a.kdt = c->in[1].dt;
    a.vdt = c->in[2].dt;
    a.qW = W[0];
    a.kW = W[1];
    a.vW = W[2];
    a.qoff = off[0];
    a.koff = off[1];
    a.voff = off[2];
    a.nh = c->op->heads;
    a.nkv = W[1] == 3 * qd ? c->op->heads : W[1] / hd;
    a.S = c->s;
    a.hd = hd;
    a.scale = static_cast<float>(c->op->sb); /* the recipe's score scale (gckpt_attn_scale) */
    a.p = static_cast<float>(c->op->sa);
    a.rng = c->rng;
    a.window = c->window;
    if (c->op->nin > 3) { /* the sliding window's additive mask */
        a.mask = c->in[3].p;
        a.maskdt = c->in[3].dt;
    }
    return a;
}

int first_same(const gckpt_xcall *c, int k)
{
    for (int j = 0; j < k; j++)
        if (c->op->in[j] == c->op->in[k]) return j;
    return k;
}

gckpt_xstatus sdpa_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    for (int k = 0; k < 3; k++) NEED_T(be, c, c->in[k], "q, k or v");
    NEED_T(be, c, c->out[0], "output");
    NEED_T(be, c, c->out[1], "logsumexp output");
    Att a = att_of(c);
    a.out = c->out[0].p;
    a.outdt = c->out[0].dt;
    a.lse_out = c->out[1].p;
    a.lse_outdt = c->out[1].dt;
    if (!a.nkv || a.nh % a.nkv || c->in[1].cols != c->in[2].cols)
        return op_fail(be, c, "k and v layouts do not match the heads");
    int hd = static_cast<int>(a.hd);
    dim3 grid(static_cast<unsigned>((a.S + F_BQ - 1) / F_BQ), static_cast<unsigned>(a.nh), static_cast<unsigned>(c->b));
    switch (dpl_of(a.hd)) {
    case 1: return launch(cb, k_sdpa_fwd<1>, grid, F_NW * 32, fwd_smem<1>(hd), a);
    case 2: return launch(cb, k_sdpa_fwd<2>, grid, F_NW * 32, fwd_smem<2>(hd), a);
    case 4: return launch(cb, k_sdpa_fwd<4>, grid, F_NW * 32, fwd_smem<4>(hd), a);
    case 8: return launch(cb, k_sdpa_fwd<8>, grid, F_NW * 32, fwd_smem<8>(hd), a);
    default: return op_fail(be, c, "head_dim above 256 is not supported by the CUDA SDPA kernel");
    }
}

gckpt_xstatus sdpa_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    for (int k = 0; k < 3; k++) NEED_T(be, c, c->in[k], "saved q, k or v");
    NEED_T(be, c, c->out[0], "saved output");
    NEED_T(be, c, c->out[1], "saved logsumexp");
    NEED_T(be, c, c->gout, "output gradient");
    Att a = att_of(c);
    a.o = c->out[0].p;
    a.odt = c->out[0].dt;
    a.lse = c->out[1].p;
    a.lsedt = c->out[1].dt;
    a.go = c->gout.p;
    a.godt = c->gout.dt;
    const gckpt_xt &gq = c->gin[first_same(c, 0)], &gk = c->gin[first_same(c, 1)], &gv = c->gin[first_same(c, 2)];
    a.dk = gk.p;
    a.dkdt = gk.dt;
    a.dv = gv.p;
    a.dvdt = gv.dt;
    if (!a.nkv || a.nh % a.nkv) return op_fail(be, c, "k and v layouts do not match the heads");
    uint64_t rows = c->b * a.S, qd = a.nh * a.hd;
    int hd = static_cast<int>(a.hd), dpl = dpl_of(a.hd);
    if (!dpl) return op_fail(be, c, "head_dim above 256 is not supported by the CUDA SDPA kernel");
    gckpt_xstatus rc;
    if (gk.p || gv.p) {
        dim3 grid(static_cast<unsigned>((a.S + KV_BK - 1) / KV_BK), static_cast<unsigned>(a.nkv), static_cast<unsigned>(c->b));
        switch (dpl) {
        case 1: rc = launch(cb, k_sdpa_dkv<1>, grid, KV_NW * 32, dkv_smem<1>(hd), a); break;
        case 2: rc = launch(cb, k_sdpa_dkv<2>, grid, KV_NW * 32, dkv_smem<2>(hd), a); break;
        case 4: rc = launch(cb, k_sdpa_dkv<4>, grid, KV_NW * 32, dkv_smem<4>(hd), a); break;
        default: rc = launch(cb, k_sdpa_dkv<8>, grid, KV_NW * 32, dkv_smem<8>(hd), a); break;
        }
        if (rc != GCKPT_XS_OK) return rc;
    }
    if (!gq.p) return GCKPT_XS_OK;
    /* dq in the fp32 workspace the recipe allocates for it */
    if (!c->ws.p || c->ws.dt != GCKPT_DT_F32 || c->ws.n < rows * qd)
        return op_fail(be, c, "the fp32 dq workspace is missing or too small");
    a.dq = static_cast<float *>(c->ws.p);
    dim3 grid(static_cast<unsigned>((a.S + F_BQ - 1) / F_BQ), static_cast<unsigned>(a.nh), static_cast<unsigned>(c->b));
    switch (dpl) {
    case 1: rc = launch(cb, k_sdpa_dq<1>, grid, F_NW * 32, dq_smem<1>(hd), a); break;
    case 2: rc = launch(cb, k_sdpa_dq<2>, grid, F_NW * 32, dq_smem<2>(hd), a); break;
    case 4: rc = launch(cb, k_sdpa_dq<4>, grid, F_NW * 32, dq_smem<4>(hd), a); break;
    default: rc = launch(cb, k_sdpa_dq<8>, grid, F_NW * 32, dq_smem<8>(hd), a); break;
    }
    if (rc != GCKPT_XS_OK) return rc;
    k_dq_store<<<grid_for(rows * qd, kBlock), kBlock, 0, cb->stream>>>(a.dq, gq.p, gq.dt, rows, qd, a.qW, a.qoff);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

// ---- eager pieces ------------------------------------------------------------------------------

__global__ void k_softmax(const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t S)
{
    __shared__ float scratch[32];
    uint64_t r = blockIdx.x;
    float mx = -INFINITY;
    for (uint64_t k = threadIdx.x; k < S; k += blockDim.x) mx = fmaxf(mx, ldx(x, xdt, r * S + k));
    mx = block_max(mx, scratch);
    float s = 0.0f;
    for (uint64_t k = threadIdx.x; k < S; k += blockDim.x) s += expf(ldx(x, xdt, r * S + k) - mx);
    s = block_sum(s, scratch);
    for (uint64_t k = threadIdx.x; k < S; k += blockDim.x) stx(o, odt, r * S + k, expf(ldx(x, xdt, r * S + k) - mx) / s);
}

__global__ void k_softmax_bwd(const void *y, uint8_t ydt, const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t S)
{
    __shared__ float scratch[32];
    uint64_t r = blockIdx.x;
    float dot = 0.0f;
    for (uint64_t k = threadIdx.x; k < S; k += blockDim.x) dot += ldx(g, gdt, r * S + k) * ldx(y, ydt, r * S + k);
    dot = block_sum(dot, scratch);
    for (uint64_t k = threadIdx.x; k < S; k += blockDim.x)
        stx(gi, gidt, r * S + k, ldx(y, ydt, r * S + k) * (ldx(g, gdt, r * S + k) - dot));
}

// [b, heads, s, hd] <-> [b, s, heads * hd]; to_heads: token-major source
__global__ void k_transpose(const void *src, uint8_t sdt, void *dst, uint8_t ddt, uint64_t B, uint64_t S, uint64_t nh,
                            uint64_t hd, bool to_heads)
{
    uint64_t qd = nh * hd;
    GRID_LOOP(e, B * S * qd)
    {
        // e indexes the destination
        uint64_t hm, tm;
        if (to_heads) {
            hm = e;
            uint64_t d = e % hd, i = (e / hd) % S, h = (e / (hd * S)) % nh, b = e / (hd * S * nh);
            tm = (b * S + i) * qd + h * hd + d;
            stx(dst, ddt, hm, ldx(src, sdt, tm));
        } else {
            tm = e;
            uint64_t c = e % qd, row = e / qd, h = c / hd, d = c % hd, b = row / S, i = row % S;
            hm = ((b * nh + h) * S + i) * hd + d;
            stx(dst, ddt, tm, ldx(src, sdt, hm));
        }
    }
}

__global__ void k_repeat_kv(const void *x, uint8_t xdt, void *o, uint8_t odt, uint64_t rows, uint64_t Wi, uint64_t Wo,
                            uint64_t hd, uint64_t rep)
{
    GRID_LOOP(e, rows * Wo)
    {
        uint64_t r = e / Wo, j = e % Wo;
        stx(o, odt, e, ldx(x, xdt, r * Wi + (j / hd / rep) * hd + j % hd));
    }
}

__global__ void k_repeat_kv_bwd(const void *g, uint8_t gdt, void *gi, uint8_t gidt, uint64_t rows, uint64_t Wi, uint64_t Wo,
                                uint64_t hd, uint64_t rep)
{
    GRID_LOOP(e, rows * Wi)
    {
        uint64_t r = e / Wi, j = e % Wi, grp = j / hd, d = j % hd;
        float s = 0.0f;
        for (uint64_t q = 0; q < rep; q++) s += ldx(g, gdt, r * Wo + (grp * rep + q) * hd + d);
        stx(gi, gidt, e, s);
    }
}

// masking_utils' bool [s, s] mask broadcast to [b, 1, s, s]: SDPA's conversion to the
// output's dtype, or its logical_not
__global__ void k_bool_mask(const void *x, uint8_t xdt, uint64_t nx, void *o, uint8_t odt, uint64_t n, bool negate)
{
    GRID_LOOP(e, n)
    {
        float v = ldx(x, xdt, e % nx);
        stx(o, odt, e, negate ? static_cast<float>(v == 0.0f) : gckpt_bool_mask_bias(v));
    }
}

} // namespace

// ---- the kernel table's entries (cuda_backend.cu) -------------------------------------------

gckpt_xstatus cuda_sdpa_fwd(cuda_be *cb, const gckpt_xcall *c) { return sdpa_fwd(cb, c); }

gckpt_xstatus cuda_sdpa_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    NEED_T(&cb->be, c, c->gout, "output gradient");
    return sdpa_bwd(cb, c);
}

gckpt_xstatus cuda_softmax_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    NEED_T(be, c, x, "input");
    uint64_t W = gckpt_softmax_width(c->op->width, c->out[0].cols, c->s), rows = x.n / W;
    if (rows) k_softmax<<<static_cast<unsigned>(rows), kBlock, 0, cb->stream>>>(x.p, x.dt, o.p, o.dt, W);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_softmax_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    NEED_T(be, c, g, "output gradient");
    if (!gi.p) return GCKPT_XS_OK;
    NEED_T(be, c, c->out[0], "saved output");
    uint64_t W = gckpt_softmax_width(c->op->width, c->out[0].cols, c->s), rows = gi.n / W;
    if (rows) k_softmax_bwd<<<static_cast<unsigned>(rows), kBlock, 0, cb->stream>>>(c->out[0].p, c->out[0].dt, g.p, g.dt, gi.p,
                                                                                     gi.dt, W);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_transpose_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    NEED_T(be, c, x, "input");
    uint64_t hd = c->op->width, nh = c->out[0].cols / hd;
    k_transpose<<<grid_for(o.n, kBlock), kBlock, 0, cb->stream>>>(x.p, x.dt, o.p, o.dt, c->b, c->s, nh, hd, false);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_transpose_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    NEED_T(be, c, g, "output gradient");
    if (!gi.p) return GCKPT_XS_OK;
    uint64_t hd = c->op->width, nh = c->out[0].cols / hd;
    k_transpose<<<grid_for(gi.n, kBlock), kBlock, 0, cb->stream>>>(g.p, g.dt, gi.p, gi.dt, c->b, c->s, nh, hd, true);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_bool_mask_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    NEED_T(be, c, x, "input");
    if (!x.n) return op_fail(be, c, "an empty mask");
    k_bool_mask<<<grid_for(o.n, kBlock), kBlock, 0, cb->stream>>>(x.p, x.dt, x.n, o.p, o.dt, o.n, c->op->sa == 1.0);
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_repeat_kv_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &x = c->in[0], &o = c->out[0];
    /* the input's own width: a view of one kv head has kv heads (see host_attn.c) */
    NEED_T(be, c, x, "input");
    uint64_t hd = c->op->width, rows = c->b * c->s, Wi = rows ? x.n / rows : 0, Wo = c->out[0].cols;
    if (!Wi || Wi % hd || Wo % Wi) return op_fail(be, c, "input columns do not repeat into the output");
    k_repeat_kv<<<grid_for(rows * Wo, kBlock), kBlock, 0, cb->stream>>>(x.p, x.dt, o.p, o.dt, rows, Wi, Wo, hd,
                                                                        (Wo / hd) / (Wi / hd));
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_repeat_kv_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_xt &g = c->gout, &gi = c->gin[0];
    NEED_T(be, c, g, "output gradient");
    /* the gradient's own width: an expanded kv head's gradient has every head (rep 1) */
    if (!gi.p) return GCKPT_XS_OK;
    uint64_t hd = c->op->width, rows = c->b * c->s, Wi = rows ? gi.n / rows : 0, Wo = c->out[0].cols;
    if (!Wi || Wi % hd || Wo % Wi) return op_fail(be, c, "gradient columns do not sum from the output");
    k_repeat_kv_bwd<<<grid_for(rows * Wi, kBlock), kBlock, 0, cb->stream>>>(g.p, g.dt, gi.p, gi.dt, rows, Wi, Wo, hd,
                                                                             (Wo / hd) / (Wi / hd));
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}
