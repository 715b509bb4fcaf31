// Matrix products on cuBLAS (cublasGemmEx / strided-batched, fp32 accumulate): linear
// layers and eager attention's QK^T and P V, forward and backward. Row-major products are
// issued as the column-major transpose: C = op(A) op(B)  <=>  C^T = op(B)^T op(A)^T.
#include <vector>

#include "cuda_common.cuh"

namespace {

constexpr unsigned kBlock = 256;

bool blas_type(uint8_t dt, cudaDataType *t)
{
    switch (dt) {
    case GCKPT_DT_F32: *t = CUDA_R_32F; return true;
    case GCKPT_DT_BF16: *t = CUDA_R_16BF; return true;
    case GCKPT_DT_F16: *t = CUDA_R_16F; return true;
    default: return false;
    }
}

struct Mat {
    const void *p;
    uint8_t dt;
    long long ld, stride; // elements
};

void *at(const void *p, uint8_t dt, uint64_t elems)
{
    return const_cast<char *>(static_cast<const char *>(p)) + elems * gckpt_dtype_size(static_cast<gckpt_dtype>(dt));
}

// C[M x N] (+)= alpha op(A) op(B), batched; all row-major.
gckpt_xstatus rm_gemm(cuda_be *cb, const gckpt_xcall *c, bool ta, bool tb, int M, int N, int K, float alpha, Mat A, Mat B,
                      float beta, Mat C, int batch)
{
    gckpt_backend *be = &cb->be;
    cudaDataType at_, bt_, ct_;
    if (!blas_type(A.dt, &at_) || !blas_type(B.dt, &bt_) || !blas_type(C.dt, &ct_))
        return op_fail(be, c, "matrix product of a non-floating tensor");
    if (A.dt != B.dt || (C.dt != A.dt && C.dt != GCKPT_DT_F32))
        return op_fail(be, c, "matrix product of mixed dtypes (cuBLAS needs equal input types)");
    if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return GCKPT_XS_OK;
    CUBLAS_TRY(be, cublasGemmStridedBatchedEx(cb->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
                                              K, &alpha, B.p, bt_, static_cast<int>(B.ld), B.stride, A.p, at_,
                                              static_cast<int>(A.ld), A.stride, &beta, const_cast<void *>(C.p), ct_,
                                              static_cast<int>(C.ld), C.stride, batch, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
    return GCKPT_XS_OK;
}

bool fits_int(uint64_t v) { return v <= 0x7fffffffull; }

__global__ void k_bias_fill(void *o, uint8_t odt, const void *b, uint8_t bdt, uint64_t n, uint64_t N)
{
    GRID_LOOP(i, n) stx(o, odt, i, ldx(b, bdt, i % N));
}

// column sums of g [M x N]: one thread per column, rows in order
__global__ void k_colsum(const void *g, uint8_t gdt, void *o, uint8_t odt, uint64_t M, uint64_t N)
{
    GRID_LOOP(j, N)
    {
        float s = 0.0f;
        for (uint64_t i = 0; i < M; i++) s += ldx(g, gdt, i * N + j);
        stx(o, odt, j, s);
    }
}

gckpt_xstatus linear_fwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_op *op = c->op;
    NEED_T(be, c, c->in[0], "input");
    NEED_T(be, c, c->in[1], "weight");
    uint64_t K = op->in_f, N = op->out_f, M = c->in[0].n / K;
    if (!fits_int(M) || !fits_int(N) || !fits_int(K)) return op_fail(be, c, "matrix too large for cuBLAS's int sizes");
    float beta = 0.0f;
    if (op->nin > 2) {
        NEED_T(be, c, c->in[2], "bias");
        k_bias_fill<<<grid_for(M * N, kBlock), kBlock, 0, cb->stream>>>(c->out[0].p, c->out[0].dt, c->in[2].p, c->in[2].dt,
                                                                       M * N, N);
        LAUNCH_TRY(be);
        beta = 1.0f;
    }
    return rm_gemm(cb, c, false, true, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f,
                   {c->in[0].p, c->in[0].dt, static_cast<long long>(K), 0}, {c->in[1].p, c->in[1].dt, static_cast<long long>(K), 0},
                   beta, {c->out[0].p, c->out[0].dt, static_cast<long long>(N), 0}, 1);
}

gckpt_xstatus linear_bwd(cuda_be *cb, const gckpt_xcall *c)
{
    gckpt_backend *be = &cb->be;
    const gckpt_op *op = c->op;
    const gckpt_xt &g = c->gout;
    uint64_t K = op->in_f, N = op->out_f, M = g.n / N;
    if (!fits_int(M) || !fits_int(N) || !fits_int(K)) return op_fail(be, c, "matrix too large for cuBLAS's int sizes");
    gckpt_xstatus rc;
    Mat G = {g.p, g.dt, static_cast<long long>(N), 0};
    if (c->gin[0].p) {
        NEED_T(be, c, c->in[1], "saved weight");
        rc = rm_gemm(cb, c, false, false, static_cast<int>(M), static_cast<int>(K), static_cast<int>(N), 1.0f, G,
                     {c->in[1].p, c->in[1].dt, static_cast<long long>(K), 0}, 0.0f,
                     {c->gin[0].p, c->gin[0].dt, static_cast<long long>(K), 0}, 1);
        if (rc != GCKPT_XS_OK) return rc;
    }
    if (c->gin[1].p) {
        NEED_T(be, c, c->in[0], "saved input");
        rc = rm_gemm(cb, c, true, false, static_cast<int>(N), static_cast<int>(K), static_cast<int>(M), 1.0f, G,
                     {c->in[0].p, c->in[0].dt, static_cast<long long>(K), 0}, 0.0f,
                     {c->gin[1].p, c->gin[1].dt, static_cast<long long>(K), 0}, 1);
        if (rc != GCKPT_XS_OK) return rc;
    }
    if (op->nin > 2 && c->gin[2].p) {
        k_colsum<<<grid_for(N, kBlock), kBlock, 0, cb->stream>>>(g.p, g.dt, c->gin[2].p, c->gin[2].dt, M, N);
        LAUNCH_TRY(be);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus zero(cuda_be *cb, const gckpt_xt &t);

// torch._grouped_mm (GCKPT_P_GROUPED_LINEAR): the sorted pairs' rows in groups by the int32
// end offsets in[2] (copied to the host: one synchronisation per call), a product per
// expert with its [N, K] block of the [E N, K] weight (op->sa: its [K, N] block of gpt_oss's
// [E K, N]); the weight gradient of an expert that received no pair is zero.
gckpt_xstatus grouped(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    gckpt_backend *be = &cb->be;
    const gckpt_op *op = c->op;
    NEED_T(be, c, c->in[2], "offsets");
    const gckpt_xt &offs = c->in[2];
    uint64_t K = op->in_f, N = op->out_f, E = offs.n, S = (bwd ? c->gout.n / N : c->in[0].n / K);
    if (offs.dt != GCKPT_DT_I32 || !fits_int(S) || !fits_int(N) || !fits_int(K) || E == 0 || E > 65536)
        return op_fail(be, c, "grouped product's offsets or sizes");
    std::vector<int32_t> ends(E);
    CUDA_TRY(be, cudaMemcpyAsync(ends.data(), offs.p, E * sizeof(int32_t), cudaMemcpyDeviceToHost, cb->stream));
    CUDA_TRY(be, cudaStreamSynchronize(cb->stream));
    const gckpt_xt &x = c->in[0], &w = c->in[1], &g = c->gout, &gx = c->gin[0], &gw = c->gin[1];
    if (!bwd) {
        NEED_T(be, c, x, "input");
        NEED_T(be, c, w, "weight");
    } else {
        if (gx.p) NEED_T(be, c, w, "weight");
        if (gw.p) {
            NEED_T(be, c, x, "saved input");
            gckpt_xstatus rc = zero(cb, gw);
            if (rc != GCKPT_XS_OK) return rc;
        }
    }
    int64_t lo = 0;
    for (uint64_t e = 0; e < E; e++) {
        int64_t hi = ends[e];
        if (hi < lo || static_cast<uint64_t>(hi) > S || (e + 1 == E && static_cast<uint64_t>(hi) != S))
            return op_fail(be, c, "the experts' offsets do not split the rows");
        int M = static_cast<int>(hi - lo);
        bool tw = op->sa != 0; // [K, N] blocks
        long long ldw = static_cast<long long>(tw ? N : K);
        Mat we = {at(w.p, w.dt, e * N * K), w.dt, ldw, 0};
        Mat X = {x.p ? at(x.p, x.dt, lo * K) : nullptr, x.dt, static_cast<long long>(K), 0};
        gckpt_xstatus rc = GCKPT_XS_OK;
        if (!bwd) {
            rc = rm_gemm(cb, c, false, !tw, M, static_cast<int>(N), static_cast<int>(K), 1.0f, X, we, 0.0f,
                         {at(c->out[0].p, c->out[0].dt, lo * N), c->out[0].dt, static_cast<long long>(N), 0}, 1);
        } else {
            Mat G = {at(g.p, g.dt, lo * N), g.dt, static_cast<long long>(N), 0};
            Mat GW = {gw.p ? at(gw.p, gw.dt, e * N * K) : nullptr, gw.dt, ldw, 0};
            if (gx.p)
                rc = rm_gemm(cb, c, false, tw, M, static_cast<int>(K), static_cast<int>(N), 1.0f, G, we, 0.0f,
                             {at(gx.p, gx.dt, lo * K), gx.dt, static_cast<long long>(K), 0}, 1);
            if (rc == GCKPT_XS_OK && gw.p && tw)
                rc = rm_gemm(cb, c, true, false, static_cast<int>(K), static_cast<int>(N), M, 1.0f, X, G, 0.0f, GW, 1);
            else if (rc == GCKPT_XS_OK && gw.p)
                rc = rm_gemm(cb, c, true, false, static_cast<int>(N), static_cast<int>(K), M, 1.0f, G, X, 0.0f, GW, 1);
        }
        if (rc != GCKPT_XS_OK) return rc;
        lo = hi;
    }
    return GCKPT_XS_OK;
}

// Layout of input k in an attention role (see host_attn.c): row width, role offset, heads.
struct Lay {
    uint64_t W, off, nh;
};

/* of a buffer of n elements (rows of b * s tokens): the bound operand may be the storage
 * a view reads (an expanded kv head has kv heads, its gradient all heads) */
Lay layout_n(const gckpt_xcall *c, uint64_t n, int role)
{
    uint64_t rows = c->b * c->s;
    uint64_t hd = c->op->qk_dim, qd = c->op->heads * hd, W = rows ? n / rows : 0;
    Lay l = {W, 0, W / hd};
    if (W == 3 * qd) {
        l.off = static_cast<uint64_t>(role) * qd;
        l.nh = c->op->heads;
    }
    return l;
}

Lay layout(const gckpt_xcall *c, int k, int role) { return layout_n(c, c->in[k].n, role); }

int first_same(const gckpt_xcall *c, int k)
{
    for (int j = 0; j < k; j++)
        if (c->op->in[j] == c->op->in[k]) return j;
    return k;
}

gckpt_xstatus zero(cuda_be *cb, const gckpt_xt &t)
{
    if (t.p) CUDA_TRY(&cb->be, cudaMemsetAsync(t.p, 0, t.n * gckpt_dtype_size(static_cast<gckpt_dtype>(t.dt)), cb->stream));
    return GCKPT_XS_OK;
}

// One head-batched product per sequence; a GQA operand shared by several heads is
// issued head by head, accumulating (beta = 1) into zeroed buffers.
struct HeadGemm {
    bool ta, tb;
    int M, N, K;
    float alpha;
    Mat A, B, C;       // per-sequence bases; stride = the per-head step
    uint64_t seqA, seqB, seqC; // elements between sequences
    uint64_t repA, repB, repC; // heads sharing one operand head (1: none)
};

gckpt_xstatus head_gemm(cuda_be *cb, const gckpt_xcall *c, HeadGemm h, bool accumulate)
{
    uint64_t nh = c->op->heads;
    for (uint64_t b = 0; b < c->b; b++) {
        Mat A = h.A, B = h.B, C = h.C;
        A.p = at(A.p, A.dt, b * h.seqA);
        B.p = at(B.p, B.dt, b * h.seqB);
        C.p = at(C.p, C.dt, b * h.seqC);
        if (h.repA == 1 && h.repB == 1 && h.repC == 1 && !accumulate) {
            gckpt_xstatus rc = rm_gemm(cb, c, h.ta, h.tb, h.M, h.N, h.K, h.alpha, A, B, 0.0f, C, static_cast<int>(nh));
            if (rc != GCKPT_XS_OK) return rc;
            continue;
        }
        for (uint64_t hh = 0; hh < nh; hh++) {
            Mat a1 = A, b1 = B, c1 = C;
            a1.p = at(A.p, A.dt, (hh / h.repA) * static_cast<uint64_t>(A.stride));
            b1.p = at(B.p, B.dt, (hh / h.repB) * static_cast<uint64_t>(B.stride));
            c1.p = at(C.p, C.dt, (hh / h.repC) * static_cast<uint64_t>(C.stride));
            gckpt_xstatus rc = rm_gemm(cb, c, h.ta, h.tb, h.M, h.N, h.K, h.alpha, a1, b1, accumulate ? 1.0f : 0.0f, c1, 1);
            if (rc != GCKPT_XS_OK) return rc;
        }
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus qk(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    gckpt_backend *be = &cb->be;
    uint64_t S = c->s, hd = c->op->qk_dim, nh = c->op->heads;
    Lay lq = layout(c, 0, 0), lk = layout(c, 1, 1);
    if (!fits_int(S) || !fits_int(hd) || !fits_int(lq.W) || !fits_int(lk.W)) return op_fail(be, c, "sizes too large for cuBLAS");
    uint64_t rk = nh / lk.nh;
    int Si = static_cast<int>(S), Hi = static_cast<int>(hd);
    float alpha = static_cast<float>(c->op->sa);
    if (!bwd) {
        NEED_T(be, c, c->in[0], "q");
        NEED_T(be, c, c->in[1], "k");
        HeadGemm h = {false, true, Si, Si, Hi, alpha,
                      {at(c->in[0].p, c->in[0].dt, lq.off), c->in[0].dt, static_cast<long long>(lq.W), static_cast<long long>(hd)},
                      {at(c->in[1].p, c->in[1].dt, lk.off), c->in[1].dt, static_cast<long long>(lk.W), static_cast<long long>(hd)},
                      {c->out[0].p, c->out[0].dt, Si, static_cast<long long>(S * S)},
                      S * lq.W, S * lk.W, nh * S * S, 1, rk, 1};
        return head_gemm(cb, c, h, false);
    }
    const gckpt_xt &g = c->gout;
    int jq = first_same(c, 0), jk = first_same(c, 1);
    const gckpt_xt &gq = c->gin[jq], &gk = c->gin[jk];
    /* the gradients' own layouts (an expanded kv head's gradient has every head) */
    Lay gl_q = layout_n(c, gq.n, 0), gl_k = layout_n(c, gk.n, 1);
    if ((gq.p && !fits_int(gl_q.W)) || (gk.p && (!fits_int(gl_k.W) || !gl_k.nh))) return op_fail(be, c, "gradient layout");
    uint64_t rgk = gk.p ? nh / gl_k.nh : 1;
    gckpt_xstatus rc;
    if ((rc = zero(cb, gq)) != GCKPT_XS_OK) return rc;
    if (jk != jq && (rc = zero(cb, gk)) != GCKPT_XS_OK) return rc;
    Mat G = {g.p, g.dt, Si, static_cast<long long>(S * S)};
    if (gq.p) {
        NEED_T(be, c, c->in[1], "saved k");
        HeadGemm h = {false, false, Si, Hi, Si, alpha, G,
                      {at(c->in[1].p, c->in[1].dt, lk.off), c->in[1].dt, static_cast<long long>(lk.W), static_cast<long long>(hd)},
                      {at(gq.p, gq.dt, gl_q.off), gq.dt, static_cast<long long>(gl_q.W), static_cast<long long>(hd)},
                      nh * S * S, S * lk.W, S * gl_q.W, 1, rk, 1};
        if ((rc = head_gemm(cb, c, h, false)) != GCKPT_XS_OK) return rc;
    }
    if (gk.p) {
        NEED_T(be, c, c->in[0], "saved q");
        HeadGemm h = {true, false, Si, Hi, Si, alpha, G,
                      {at(c->in[0].p, c->in[0].dt, lq.off), c->in[0].dt, static_cast<long long>(lq.W), static_cast<long long>(hd)},
                      {at(gk.p, gk.dt, gl_k.off), gk.dt, static_cast<long long>(gl_k.W), static_cast<long long>(hd)},
                      nh * S * S, S * lq.W, S * gl_k.W, 1, 1, rgk};
        if ((rc = head_gemm(cb, c, h, rgk > 1)) != GCKPT_XS_OK) return rc;
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus pv(cuda_be *cb, const gckpt_xcall *c, bool bwd)
{
    gckpt_backend *be = &cb->be;
    uint64_t S = c->s, hd = c->op->qk_dim, nh = c->op->heads;
    Lay lv = layout(c, 1, 2);
    if (!fits_int(S) || !fits_int(hd) || !fits_int(lv.W)) return op_fail(be, c, "sizes too large for cuBLAS");
    uint64_t rv = nh / lv.nh;
    int Si = static_cast<int>(S), Hi = static_cast<int>(hd);
    if (!bwd) {
        NEED_T(be, c, c->in[0], "probabilities");
        NEED_T(be, c, c->in[1], "v");
        HeadGemm h = {false, false, Si, Hi, Si, 1.0f, {c->in[0].p, c->in[0].dt, Si, static_cast<long long>(S * S)},
                      {at(c->in[1].p, c->in[1].dt, lv.off), c->in[1].dt, static_cast<long long>(lv.W), static_cast<long long>(hd)},
                      {c->out[0].p, c->out[0].dt, Hi, static_cast<long long>(S * hd)},
                      nh * S * S, S * lv.W, nh * S * hd, 1, rv, 1};
        return head_gemm(cb, c, h, false);
    }
    const gckpt_xt &g = c->gout, &gp = c->gin[0], &gv = c->gin[first_same(c, 1)];
    Lay gl_v = layout_n(c, gv.n, 2);
    if (gv.p && (!fits_int(gl_v.W) || !gl_v.nh)) return op_fail(be, c, "gradient layout");
    uint64_t rgv = gv.p ? nh / gl_v.nh : 1;
    Mat G = {g.p, g.dt, Hi, static_cast<long long>(S * hd)};
    gckpt_xstatus rc;
    if (gp.p) {
        NEED_T(be, c, c->in[1], "saved v");
        HeadGemm h = {false, true, Si, Si, Hi, 1.0f, G,
                      {at(c->in[1].p, c->in[1].dt, lv.off), c->in[1].dt, static_cast<long long>(lv.W), static_cast<long long>(hd)},
                      {gp.p, gp.dt, Si, static_cast<long long>(S * S)}, nh * S * hd, S * lv.W, nh * S * S, 1, rv, 1};
        if ((rc = head_gemm(cb, c, h, false)) != GCKPT_XS_OK) return rc;
    }
    if (gv.p) {
        NEED_T(be, c, c->in[0], "saved probabilities");
        if ((rc = zero(cb, gv)) != GCKPT_XS_OK) return rc;
        HeadGemm h = {true, false, Si, Hi, Si, 1.0f, {c->in[0].p, c->in[0].dt, Si, static_cast<long long>(S * S)}, G,
                      {at(gv.p, gv.dt, gl_v.off), gv.dt, static_cast<long long>(gl_v.W), static_cast<long long>(hd)},
                      nh * S * S, nh * S * hd, S * gl_v.W, 1, 1, rgv};
        if ((rc = head_gemm(cb, c, h, rgv > 1)) != GCKPT_XS_OK) return rc;
    }
    return GCKPT_XS_OK;
}

} // namespace

// ---- the kernel table's entries (cuda_backend.cu) -------------------------------------------

#define MATMUL_PAIR(name, fwd_call, bwd_call)                                                       \
    gckpt_xstatus cuda_##name##_fwd(cuda_be *cb, const gckpt_xcall *c) { return fwd_call; }        \
    gckpt_xstatus cuda_##name##_bwd(cuda_be *cb, const gckpt_xcall *c)                             \
    {                                                                                               \
        NEED_T(&cb->be, c, c->gout, "output gradient");                                            \
        return bwd_call;                                                                            \
    }
MATMUL_PAIR(linear, linear_fwd(cb, c), linear_bwd(cb, c))
MATMUL_PAIR(grouped_linear, grouped(cb, c, false), grouped(cb, c, true))
MATMUL_PAIR(qk, qk(cb, c, false), qk(cb, c, true))
MATMUL_PAIR(pv, pv(cb, c, false), pv(cb, c, true))
