// Optimizer steps on the GPU (the same numbers as executor/host_optim.c: AdamW with
// decoupled weight decay, its foreach variant writing sqrt(exp_avg_sq) to the counted
// temporary, SGD with momentum, and the adamw-8bit approximation with blockwise 8-bit
// states), and the order-independent gradient checksum.
#include <math.h>

#include "cuda_common.cuh"
#include "gckpt/executor/kernel_math.h"

namespace {

constexpr unsigned kBlock = 256;

struct Opt {
    void *p, *m, *v, *tmp;
    const void *g;
    uint8_t pdt, gdt, mdt, vdt, tdt;
    uint64_t n;
    float lr, b1, b2, eps, wd, mom, bc1, bc2s;
};

__device__ __forceinline__ void adamw_elem(const Opt &a, float &p, float g, float &m, float &v, float &denom)
{
    denom = gckpt_adamw_update(&p, g, &m, &v, a.lr, a.b1, a.b2, a.eps, a.wd, a.bc1, a.bc2s);
}

__global__ void k_adamw(Opt a)
{
    GRID_LOOP(i, a.n)
    {
        float p = ldx(a.p, a.pdt, i), g = ldx(a.g, a.gdt, i), m = ldx(a.m, a.mdt, i), v = ldx(a.v, a.vdt, i), d;
        adamw_elem(a, p, g, m, v, d);
        if (a.tmp) stx(a.tmp, a.tdt, i, d);
        stx(a.p, a.pdt, i, p);
        stx(a.m, a.mdt, i, m);
        stx(a.v, a.vdt, i, v);
    }
}

__global__ void k_sgd(Opt a)
{
    GRID_LOOP(i, a.n)
    {
        float buf = ldx(a.m, a.mdt, i);
        float p = gckpt_sgd_update(ldx(a.p, a.pdt, i), ldx(a.g, a.gdt, i), &buf, a.lr, a.mom, a.wd);
        stx(a.m, a.mdt, i, buf);
        stx(a.p, a.pdt, i, p);
    }
}

// one block of GCKPT_OPT_8BIT_BLOCK threads per quantisation block
__global__ void __launch_bounds__(GCKPT_OPT_8BIT_BLOCK) k_adamw_8bit(Opt a, float *am, float *av)
{
    __shared__ float scratch[32];
    uint64_t blk = blockIdx.x, i = blk * GCKPT_OPT_8BIT_BLOCK + threadIdx.x;
    bool in = i < a.n;
    uint8_t *qm = static_cast<uint8_t *>(a.m), *qv = static_cast<uint8_t *>(a.v);
    float m = 0.0f, v = 0.0f;
    if (in) {
        float p = ldx(a.p, a.pdt, i), g = ldx(a.g, a.gdt, i), d;
        m = gckpt_dq8_signed(qm[i], am[blk]);
        v = gckpt_dq8_sqrt(qv[i], av[blk]);
        adamw_elem(a, p, g, m, v, d);
        stx(a.p, a.pdt, i, p);
    }
    float mx1 = block_max(in ? fabsf(m) : 0.0f, scratch);
    float mx2 = block_max(in ? v : 0.0f, scratch);
    if (in) {
        qm[i] = gckpt_q8_signed(m, mx1);
        qv[i] = gckpt_q8_sqrt(v, mx2);
    }
    if (threadIdx.x == 0) {
        am[blk] = mx1;
        av[blk] = mx2;
    }
}

constexpr unsigned kSumBlocks = 1024;

// partial sums per block, summed in order by k_checksum_final
__global__ void k_checksum(const void *t, uint8_t dt, unsigned sz, uint64_t n, uint64_t salt, unsigned long long *hp, double *sp)
{
    __shared__ unsigned long long sh[32];
    __shared__ double sd[32];
    unsigned long long h = 0;
    double s = 0.0;
    GRID_LOOP(i, n)
    {
        uint64_t bits = 0;
        const unsigned char *b = static_cast<const unsigned char *>(t) + i * sz;
        for (unsigned k = 0; k < sz; k++) bits |= static_cast<uint64_t>(b[k]) << (8 * k);
        h += gckpt_hash_term(salt, bits, i);
        double v = ldx(t, dt, i);
        s += v * v;
    }
    h = block_sum(h, sh);
    s = block_sum(s, sd);
    if (threadIdx.x == 0) {
        hp[blockIdx.x] = h;
        sp[blockIdx.x] = s;
    }
}

__global__ void k_checksum_final(unsigned long long *hp, double *sp, unsigned nb)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long h = 0;
    double s = 0.0;
    for (unsigned k = 0; k < nb; k++) {
        h += hp[k];
        s += sp[k];
    }
    hp[nb] = h;
    sp[nb] = s;
}

} // namespace

gckpt_xstatus cuda_optim(cuda_be *cb, const gckpt_optcall *c)
{
    gckpt_backend *be = &cb->be;
    if (!c->param.p || !c->grad.p) {
        gckpt_seterr(&be->err, "optimizer: parameter or gradient missing");
        return GCKPT_XS_ERROR;
    }
    Opt a{};
    a.p = c->param.p;
    a.pdt = c->param.dt;
    a.g = c->grad.p;
    a.gdt = c->grad.dt;
    a.m = c->s1.p;
    a.mdt = c->s1.dt;
    a.v = c->s2.p;
    a.vdt = c->s2.dt;
    a.tmp = c->temp.p;
    a.tdt = c->temp.dt;
    a.n = c->param.n;
    a.lr = static_cast<float>(c->lr);
    a.b1 = static_cast<float>(c->beta1);
    a.b2 = static_cast<float>(c->beta2);
    a.eps = static_cast<float>(c->eps);
    a.wd = static_cast<float>(c->weight_decay);
    a.mom = static_cast<float>(c->momentum);
    gckpt_adam_corrections(a.b1, a.b2, c->step, &a.bc1, &a.bc2s);
    if (!a.n) return GCKPT_XS_OK;
    if (c->kind == GCKPT_SGD) {
        if (!a.m) {
            gckpt_seterr(&be->err, "sgd: no momentum buffer");
            return GCKPT_XS_ERROR;
        }
        k_sgd<<<grid_for(a.n, kBlock), kBlock, 0, cb->stream>>>(a);
    } else if (c->kind == GCKPT_ADAMW_8BIT && c->s1.dt != GCKPT_DT_F32) {
        uint64_t nb = (a.n + GCKPT_OPT_8BIT_BLOCK - 1) / GCKPT_OPT_8BIT_BLOCK; // sizes: gckpt_op_check_optim
        k_adamw_8bit<<<static_cast<unsigned>(nb), GCKPT_OPT_8BIT_BLOCK, 0, cb->stream>>>(a, static_cast<float *>(c->s1_absmax.p),
                                                                             static_cast<float *>(c->s2_absmax.p));
    } else {
        if (!a.m || !a.v) {
            gckpt_seterr(&be->err, "adamw: optimizer states missing");
            return GCKPT_XS_ERROR;
        }
        k_adamw<<<grid_for(a.n, kBlock), kBlock, 0, cb->stream>>>(a);
    }
    LAUNCH_TRY(be);
    return GCKPT_XS_OK;
}

gckpt_xstatus cuda_checksum(cuda_be *cb, gckpt_xt t, uint64_t salt, uint64_t *hash, double *sumsq)
{
    gckpt_backend *be = &cb->be;
    unsigned long long *hp = cb->sums;
    double *sp = reinterpret_cast<double *>(cb->sums + kSumBlocks + 1);
    k_checksum<<<kSumBlocks, kBlock, 0, cb->stream>>>(t.p, t.dt, gckpt_dtype_size(static_cast<gckpt_dtype>(t.dt)), t.n,
                                                   salt, hp, sp);
    LAUNCH_TRY(be);
    k_checksum_final<<<1, 32, 0, cb->stream>>>(hp, sp, kSumBlocks);
    LAUNCH_TRY(be);
    unsigned long long h;
    double s;
    CUDA_TRY(be, cudaMemcpyAsync(&h, hp + kSumBlocks, sizeof h, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_TRY(be, cudaMemcpyAsync(&s, sp + kSumBlocks, sizeof s, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_TRY(be, cudaStreamSynchronize(cb->stream));
    *hash = h;
    *sumsq = s;
    return GCKPT_XS_OK;
}

// bytes of the checksum scratch (hash and sum partials plus the totals)
size_t cuda_checksum_scratch_bytes() { return 2 * (kSumBlocks + 1) * sizeof(unsigned long long); }
