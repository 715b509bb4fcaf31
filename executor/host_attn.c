/* Host kernels of the attention primitives: fused causal SDPA (with logsumexp, dropout
 * from the counter-based generator, a sliding window and an additive mask), and eager
 * attention's pieces (QK^T, softmax, P V, transpose, repeat_kv), and SDPA's conversion of
 * masking_utils' bool mask. q, k and v may be column blocks of one packed tensor
 * (gpt2's c_attn output): an operand whose rows are 3 x heads x head_dim wide holds q, k,
 * v in that order, and the gradient of such a tensor gets each role's block. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/kernel_math.h"
#include "host_blas.h"
#include "host_num.h"
#include "host_scratch.h"
#include "host_ops.h"

enum { ROLE_Q, ROLE_K, ROLE_V };

/* Layout of input k in role: row width, column offset of the role's block, heads in it.
 * q and k heads are qk_dim wide, v heads v_dim (MLA: qk = nope + rope differs from v). */
typedef struct {
    uint64_t W, off, nh;
} lay;

/* of a buffer of n elements (rows of b * s tokens): the bound operand may be the storage
 * a view reads (an expanded kv head has kv heads, its gradient all heads) */
static lay layout_n(const gckpt_xcall *c, uint64_t n, int role)
{
    uint64_t rows = c->b * c->s;
    uint64_t hd = role == ROLE_V ? c->op->v_dim : c->op->qk_dim, qd = c->op->heads * hd, W = rows ? n / rows : 0;
    lay l = {W, 0, W / hd};
    if (c->op->qk_dim == c->op->v_dim && W == 3 * qd) {
        l.off = (uint64_t)role * qd;
        l.nh = c->op->heads;
    }
    return l;
}

static lay layout(const gckpt_xcall *c, int k, int role) { return layout_n(c, c->in[k].n, role); }

/* fp32 copies of the distinct input tensors and accumulators of the distinct gradients */
typedef struct {
    float *in[GCKPT_OP_MAX_IN];
    float *acc[GCKPT_OP_MAX_IN];
    bool own_in[GCKPT_OP_MAX_IN], own_acc[GCKPT_OP_MAX_IN];
} bufs;

static int first_same(const gckpt_xcall *c, int k)
{
    for (int j = 0; j < k; j++)
        if (c->op->in[j] == c->op->in[k]) return j;
    return k;
}

static bool load_in(const gckpt_xcall *c, bufs *b, int k, gckpt_err *err)
{
    if (b->in[k]) return true;
    int j = first_same(c, k);
    if (j != k) {
        if (!b->in[j] && !load_in(c, b, j, err)) return false;
        b->in[k] = b->in[j];
        return true;
    }
    if (!c->in[k].p) {
        gckpt_seterr(err, "op %s: input %d is not available (freed before use)", c->op->name, k);
        return false;
    }
    b->in[k] = host_to_f32(&c->in[k], err);
    b->own_in[k] = true;
    return b->in[k] != NULL;
}

/* the accumulator receiving input k's gradient, NULL when none is wanted */
static float *acc_of(const gckpt_xcall *c, bufs *b, int k, gckpt_err *err)
{
    int j = first_same(c, k);
    if (!c->gin[j].p) return NULL;
    if (!b->acc[j]) {
        b->acc[j] = hs_calloc(c->gin[j].n ? c->gin[j].n : 1, sizeof(float));
        b->own_acc[j] = true;
        if (!b->acc[j]) gckpt_seterr(err, "op %s: out of host memory for gradient scratch", c->op->name);
    }
    return b->acc[j];
}

static void bufs_store_free(const gckpt_xcall *c, bufs *b, bool store)
{
    for (int k = 0; k < GCKPT_OP_MAX_IN; k++) {
        if (b->own_acc[k] && store) host_from_f32(&c->gin[k], b->acc[k]);
        if (b->own_acc[k]) hs_free(b->acc[k]);
        if (b->own_in[k]) hs_free(b->in[k]);
    }
}

/* ---- eager pieces ------------------------------------------------------------------------ */

static gckpt_xstatus qk(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->qk_dim, nh = c->op->heads;
    lay lq = layout(c, 0, ROLE_Q), lk = layout(c, 1, ROLE_K);
    float alpha = (float)c->op->sa;
    bufs b = {0};
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    float *g = NULL;
    if (!bwd) {
        float *sc = hs_malloc(sizeof *sc * (c->out[0].n ? c->out[0].n : 1));
        if (!sc || !load_in(c, &b, 0, err) || !load_in(c, &b, 1, err)) {
            if (!sc) gckpt_seterr(err, "op %s: out of host memory", c->op->name);
            hs_free(sc);
            goto out;
        }
        for (uint64_t bi = 0; bi < B; bi++)
            for (uint64_t h = 0; h < nh; h++) {
                uint64_t kh = h / (nh / lk.nh);
                host_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)S, (int)S, (int)hd, alpha,
                            b.in[0] + bi * S * lq.W + lq.off + h * hd, (int)lq.W,
                            b.in[1] + bi * S * lk.W + lk.off + kh * hd, (int)lk.W, 0.0f,
                            sc + (bi * nh + h) * S * S, (int)S);
            }
        host_from_f32(&c->out[0], sc);
        hs_free(sc);
        rc = GCKPT_XS_OK;
        goto out;
    }
    if (!(g = host_to_f32(&c->gout, err))) goto out;
    float *aq = acc_of(c, &b, 0, err), *ak = acc_of(c, &b, 1, err);
    if ((c->gin[first_same(c, 0)].p && !aq) || (c->gin[first_same(c, 1)].p && !ak)) goto out;
    if ((aq && !load_in(c, &b, 1, err)) || (ak && !load_in(c, &b, 0, err))) goto out;
    lay gq = layout_n(c, c->gin[first_same(c, 0)].n, ROLE_Q), gk = layout_n(c, c->gin[first_same(c, 1)].n, ROLE_K);
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++) {
            uint64_t kh = h / (nh / lk.nh), gkh = gk.nh ? h / (nh / gk.nh) : 0;
            const float *gs = g + (bi * nh + h) * S * S;
            if (aq)
                host_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)S, (int)hd, (int)S, alpha, gs, (int)S,
                            b.in[1] + bi * S * lk.W + lk.off + kh * hd, (int)lk.W, 1.0f,
                            aq + bi * S * gq.W + gq.off + h * hd, (int)gq.W);
            if (ak)
                host_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)S, (int)hd, (int)S, alpha, gs, (int)S,
                            b.in[0] + bi * S * lq.W + lq.off + h * hd, (int)lq.W, 1.0f,
                            ak + bi * S * gk.W + gk.off + gkh * hd, (int)gk.W);
        }
    rc = GCKPT_XS_OK;
out:
    hs_free(g);
    bufs_store_free(c, &b, rc == GCKPT_XS_OK && bwd);
    return rc;
}

static gckpt_xstatus pv(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->v_dim, nh = c->op->heads;
    lay lv = layout(c, 1, ROLE_V);
    bufs b = {0};
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    float *g = NULL, *r = NULL;
    if (!bwd) {
        if (!load_in(c, &b, 0, err) || !load_in(c, &b, 1, err)) goto out;
        if (!(r = hs_malloc(sizeof *r * (c->out[0].n ? c->out[0].n : 1)))) {
            gckpt_seterr(err, "op %s: out of host memory", c->op->name);
            goto out;
        }
        for (uint64_t bi = 0; bi < B; bi++)
            for (uint64_t h = 0; h < nh; h++) {
                uint64_t kh = h / (nh / lv.nh);
                host_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)S, (int)hd, (int)S, 1.0f,
                            b.in[0] + (bi * nh + h) * S * S, (int)S, b.in[1] + bi * S * lv.W + lv.off + kh * hd,
                            (int)lv.W, 0.0f, r + (bi * nh + h) * S * hd, (int)hd);
            }
        host_from_f32(&c->out[0], r);
        rc = GCKPT_XS_OK;
        goto out;
    }
    if (!(g = host_to_f32(&c->gout, err))) goto out;
    float *ap = acc_of(c, &b, 0, err), *av = acc_of(c, &b, 1, err);
    if ((c->gin[0].p && !ap) || (c->gin[first_same(c, 1)].p && !av)) goto out;
    if ((ap && !load_in(c, &b, 1, err)) || (av && !load_in(c, &b, 0, err))) goto out;
    lay gv = layout_n(c, c->gin[first_same(c, 1)].n, ROLE_V);
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++) {
            uint64_t kh = h / (nh / lv.nh), gvh = gv.nh ? h / (nh / gv.nh) : 0;
            const float *go = g + (bi * nh + h) * S * hd;
            if (ap)
                host_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)S, (int)S, (int)hd, 1.0f, go, (int)hd,
                            b.in[1] + bi * S * lv.W + lv.off + kh * hd, (int)lv.W, 0.0f,
                            ap + (bi * nh + h) * S * S, (int)S);
            if (av)
                host_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)S, (int)hd, (int)S, 1.0f,
                            b.in[0] + (bi * nh + h) * S * S, (int)S, go, (int)hd, 1.0f,
                            av + bi * S * gv.W + gv.off + gvh * hd, (int)gv.W);
        }
    rc = GCKPT_XS_OK;
out:
    hs_free(g);
    hs_free(r);
    bufs_store_free(c, &b, rc == GCKPT_XS_OK && bwd);
    return rc;
}

/* over rows of gckpt_softmax_width */
static gckpt_xstatus softmax(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    uint64_t S = gckpt_softmax_width(c->op->width, c->out[0].cols, c->s);
    if (!bwd) {
        const gckpt_xt *x = &c->in[0], *o = &c->out[0];
        NEED(c, *x, "input");
        float *row = hs_malloc(sizeof *row * S);
        if (!row) {
            gckpt_seterr(err, "op %s: out of host memory", c->op->name);
            return GCKPT_XS_ERROR;
        }
        for (uint64_t r = 0; r < x->n / S; r++) {
            float mx = -INFINITY, sum = 0;
            for (uint64_t j = 0; j < S; j++) mx = fmaxf(mx, ld(x, r * S + j));
            for (uint64_t j = 0; j < S; j++) sum += row[j] = expf(ld(x, r * S + j) - mx);
            for (uint64_t j = 0; j < S; j++) st(o, r * S + j, row[j] / sum);
        }
        hs_free(row);
        return GCKPT_XS_OK;
    }
    const gckpt_xt *y = &c->out[0], *g = &c->gout, *gi = &c->gin[0];
    if (!gi->p) return GCKPT_XS_OK;
    NEED(c, *y, "saved output");
    for (uint64_t r = 0; r < y->n / S; r++) {
        float dot = 0;
        for (uint64_t j = 0; j < S; j++) dot += ld(g, r * S + j) * ld(y, r * S + j);
        for (uint64_t j = 0; j < S; j++) st(gi, r * S + j, ld(y, r * S + j) * (ld(g, r * S + j) - dot));
    }
    return GCKPT_XS_OK;
}

/* [b, heads, s, hd] <-> [b, s, heads * hd] */
static gckpt_xstatus transpose(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->width, qd = c->out[0].cols, nh = qd / hd;
    const gckpt_xt *src = bwd ? &c->gout : &c->in[0], *dst = bwd ? &c->gin[0] : &c->out[0];
    if (!dst->p) return GCKPT_XS_OK;
    NEED(c, *src, "input");
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++)
            for (uint64_t i = 0; i < S; i++)
                for (uint64_t d = 0; d < hd; d++) {
                    uint64_t hm = ((bi * nh + h) * S + i) * hd + d, tm = (bi * S + i) * qd + h * hd + d;
                    if (bwd) st(dst, hm, ld(src, tm));
                    else st(dst, tm, ld(src, hm));
                }
    return GCKPT_XS_OK;
}

/* repeat kv heads (an expand materialised), or the gradient's sum over them; the input
 * (forward) or its gradient (backward) has its own width: a view of one kv head has
 * kv heads, its gradient all of them (then rep = 1: a copy) */
static gckpt_xstatus repeat_kv(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    uint64_t hd = c->op->width, rows = c->b * c->s, Wo = c->out[0].cols;
    if (bwd && !c->gin[0].p) return GCKPT_XS_OK; /* no gradient wanted, or passed through */
    uint64_t Wi = rows ? (bwd ? c->gin[0].n : c->in[0].n) / rows : 0;
    if (!Wi || Wi % hd || Wo % Wi) {
        gckpt_seterr(err, "op %s: %llu input columns do not repeat into %llu", c->op->name, (unsigned long long)Wi,
                     (unsigned long long)Wo);
        return GCKPT_XS_ERROR;
    }
    uint64_t rep = (Wo / hd) / (Wi / hd);
    if (!bwd) {
        NEED(c, c->in[0], "input");
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t j = 0; j < Wo; j++) st(&c->out[0], r * Wo + j, ld(&c->in[0], r * Wi + (j / hd / rep) * hd + j % hd));
        return GCKPT_XS_OK;
    }
    if (!c->gin[0].p) return GCKPT_XS_OK;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t j = 0; j < Wi; j++) {
            uint64_t g = j / hd, d = j % hd;
            float s = 0;
            for (uint64_t q = 0; q < rep; q++) s += ld(&c->gout, r * Wo + (g * rep + q) * hd + d);
            st(&c->gin[0], r * Wi + j, s);
        }
    return GCKPT_XS_OK;
}

/* The bool [s, s] mask broadcast to [b, 1, s, s]: converted to the output's dtype
 * (gckpt_bool_mask_bias) or negated (sa = 1). Nothing requires its gradient. */
gckpt_xstatus host_bool_mask_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input");
    for (uint64_t i = 0; i < o->n; i++) {
        float v = ld(x, i % x->n);
        st(o, i, c->op->sa == 1.0 ? (float)(v == 0.0f) : gckpt_bool_mask_bias(v));
    }
    return GCKPT_XS_OK;
}

/* ---- fused causal SDPA ---------------------------------------------------------------------- */

/* The additive mask's value for (batch bi, query i, key j): input 3 when the op has one
 * ([b, 1, s, s], the sliding window's converted bool mask), else 0 */
static float mask_bias(const gckpt_xcall *c, uint64_t bi, uint64_t i, uint64_t j)
{
    return c->op->nin > 3 ? ld(&c->in[3], (bi * c->s + i) * c->s + j) : 0.0f;
}

gckpt_xstatus host_sdpa_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->qk_dim, vd = c->op->v_dim, nh = c->op->heads, od = nh * vd;
    lay lq = layout(c, 0, ROLE_Q), lk = layout(c, 1, ROLE_K), lv = layout(c, 2, ROLE_V);
    float scale = (float)c->op->sb, p = (float)c->op->sa, inv_keep = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
    bufs b = {0};
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    float *sc = hs_malloc(sizeof *sc * S), *o = hs_malloc(sizeof *o * vd);
    if (!sc || !o) {
        gckpt_seterr(err, "op %s: out of host memory", c->op->name);
        goto out;
    }
    if (!load_in(c, &b, 0, err) || !load_in(c, &b, 1, err) || !load_in(c, &b, 2, err)) goto out;
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++) {
            uint64_t kh = h / (nh / lk.nh), vh = h / (nh / lv.nh);
            for (uint64_t i = 0; i < S; i++) {
                const float *q = b.in[0] + (bi * S + i) * lq.W + lq.off + h * hd;
                float mx = -INFINITY, sum = 0;
                /* keys j0..j1 are visible: up to i, or every key (a ViT's bidirectional SDPA) */
                uint64_t j0 = c->op->bidirectional ? 0 : gckpt_first_key(i, c->window), j1 = c->op->bidirectional ? S - 1 : i;
                for (uint64_t j = j0; j <= j1; j++) {
                    const float *k = b.in[1] + (bi * S + j) * lk.W + lk.off + kh * hd;
                    float d = 0;
                    for (uint64_t t = 0; t < hd; t++) d += q[t] * k[t];
                    sc[j] = d * scale + mask_bias(c, bi, i, j);
                    mx = fmaxf(mx, sc[j]);
                }
                for (uint64_t j = j0; j <= j1; j++) sum += sc[j] = expf(sc[j] - mx);
                memset(o, 0, sizeof *o * vd);
                uint64_t base = ((bi * nh + h) * S + i) * S;
                for (uint64_t j = j0; j <= j1; j++) {
                    float pj = sc[j] / sum;
                    if (p > 0) pj = gckpt_keep(c->rng, base + j, p) ? pj * inv_keep : 0.0f;
                    const float *v = b.in[2] + (bi * S + j) * lv.W + lv.off + vh * vd;
                    for (uint64_t t = 0; t < vd; t++) o[t] += pj * v[t];
                }
                for (uint64_t t = 0; t < vd; t++) st(&c->out[0], (bi * S + i) * od + h * vd + t, o[t]);
                st(&c->out[1], (bi * nh + h) * S + i, mx + logf(sum));
            }
        }
    rc = GCKPT_XS_OK;
out:
    hs_free(sc);
    hs_free(o);
    bufs_store_free(c, &b, false);
    return rc;
}

gckpt_xstatus host_sdpa_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->qk_dim, vd = c->op->v_dim, nh = c->op->heads, qd = nh * hd, od = nh * vd;
    lay lq = layout(c, 0, ROLE_Q), lk = layout(c, 1, ROLE_K), lv = layout(c, 2, ROLE_V);
    float scale = (float)c->op->sb, p = (float)c->op->sa, inv_keep = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
    NEED(c, c->out[0], "saved output");
    NEED(c, c->out[1], "saved logsumexp");
    bufs b = {0};
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    float *go = NULL, *dq = NULL;
    bool own_dq = false;
    float *aq = acc_of(c, &b, 0, err), *ak = acc_of(c, &b, 1, err), *av = acc_of(c, &b, 2, err);
    if ((c->gin[first_same(c, 0)].p && !aq) || (c->gin[first_same(c, 1)].p && !ak) ||
        (c->gin[first_same(c, 2)].p && !av))
        goto out;
    if (!load_in(c, &b, 0, err) || !load_in(c, &b, 1, err) || !load_in(c, &b, 2, err)) goto out;
    if (!(go = host_to_f32(&c->gout, err))) goto out;
    /* dq accumulates in the op's fp32 workspace [rows, heads * hd] as the recipe says */
    if (c->ws.p && c->ws.dt == GCKPT_DT_F32 && c->ws.n >= B * S * qd) {
        dq = c->ws.p;
        memset(dq, 0, sizeof *dq * B * S * qd);
    } else {
        dq = hs_calloc(B * S * qd, sizeof *dq);
        own_dq = true;
        if (!dq) {
            gckpt_seterr(err, "op %s: out of host memory", c->op->name);
            goto out;
        }
    }
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++) {
            uint64_t kh = h / (nh / lk.nh), vh = h / (nh / lv.nh);
            for (uint64_t i = 0; i < S; i++) {
                const float *q = b.in[0] + (bi * S + i) * lq.W + lq.off + h * hd;
                const float *dO = go + (bi * S + i) * od + h * vd;
                float lse = ld(&c->out[1], (bi * nh + h) * S + i), Di = 0;
                for (uint64_t t = 0; t < vd; t++) Di += dO[t] * ld(&c->out[0], (bi * S + i) * od + h * vd + t);
                uint64_t base = ((bi * nh + h) * S + i) * S;
                uint64_t j0 = c->op->bidirectional ? 0 : gckpt_first_key(i, c->window), j1 = c->op->bidirectional ? S - 1 : i;
                for (uint64_t j = j0; j <= j1; j++) {
                    const float *k = b.in[1] + (bi * S + j) * lk.W + lk.off + kh * hd;
                    const float *v = b.in[2] + (bi * S + j) * lv.W + lv.off + vh * vd;
                    float sdot = 0, dp = 0;
                    for (uint64_t t = 0; t < hd; t++) sdot += q[t] * k[t];
                    for (uint64_t t = 0; t < vd; t++) dp += dO[t] * v[t];
                    float pij = expf(sdot * scale + mask_bias(c, bi, i, j) - lse), pd = pij;
                    if (p > 0) {
                        bool keep = gckpt_keep(c->rng, base + j, p);
                        pd = keep ? pij * inv_keep : 0.0f;
                        dp = keep ? dp * inv_keep : 0.0f;
                    }
                    float ds = pij * (dp - Di) * scale;
                    if (av) {
                        float *dv = av + (bi * S + j) * lv.W + lv.off + vh * vd;
                        for (uint64_t t = 0; t < vd; t++) dv[t] += pd * dO[t];
                    }
                    float *dqi = dq + (bi * S + i) * qd + h * hd;
                    for (uint64_t t = 0; t < hd; t++) dqi[t] += ds * k[t];
                    if (ak) {
                        float *dk = ak + (bi * S + j) * lk.W + lk.off + kh * hd;
                        for (uint64_t t = 0; t < hd; t++) dk[t] += ds * q[t];
                    }
                }
            }
        }
    if (aq)
        for (uint64_t r = 0; r < B * S; r++)
            for (uint64_t t = 0; t < qd; t++) aq[r * lq.W + lq.off + t] += dq[r * qd + t];
    rc = GCKPT_XS_OK;
out:
    hs_free(go);
    if (own_dq) hs_free(dq);
    bufs_store_free(c, &b, rc == GCKPT_XS_OK);
    return rc;
}

HOST_KERNEL_BOTH(qk, qk)
HOST_KERNEL_BOTH(pv, pv)
HOST_KERNEL_BOTH(softmax, softmax)
HOST_KERNEL_BOTH(transpose, transpose)
HOST_KERNEL_BOTH(repeat_kv, repeat_kv)

/* ---- context parallelism's ring attention, block by block (FINDINGS R-CP-6, R-EXEC-6) --------- */

/* This rank's K and V rows packed [b, s, kv heads, qk_dim] then [b, s, kv heads, v_dim]. */
static void pack_kv(const gckpt_xcall *c, const bufs *b, lay lk, lay lv, float *dst)
{
    uint64_t rows = c->b * c->s, hd = c->op->qk_dim, vd = c->op->v_dim;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t h = 0; h < lk.nh; h++) memcpy(dst + (r * lk.nh + h) * hd, b->in[1] + r * lk.W + lk.off + h * hd, hd * 4);
    dst += rows * lk.nh * hd;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t h = 0; h < lv.nh; h++) memcpy(dst + (r * lv.nh + h) * vd, b->in[2] + r * lv.W + lv.off + h * vd, vd * 4);
}

/* One K/V block's visible keys for query position qp: key position <= query position (the load-
 * balanced blocks of torch's ring are exactly these sets, R-CP-6). */
static bool ring_visible(const gckpt_ring *g, uint32_t src, uint64_t j, uint64_t qp) { return g->pos[src * g->s + j] <= qp; }

gckpt_xstatus host_ring_pack(const gckpt_xcall *c, float *kv, uint64_t *n, gckpt_err *err)
{
    lay lk = layout(c, 1, ROLE_K), lv = layout(c, 2, ROLE_V);
    *n = c->b * c->s * (lk.nh * c->op->qk_dim + lv.nh * c->op->v_dim);
    if (!kv) return GCKPT_XS_OK;
    bufs b = {0};
    bool ok = load_in(c, &b, 1, err) && load_in(c, &b, 2, err);
    if (ok) pack_kv(c, &b, lk, lv, kv);
    bufs_store_free(c, &b, false);
    return ok ? GCKPT_XS_OK : GCKPT_XS_ERROR;
}

gckpt_xstatus host_ring_block_fwd(const gckpt_xcall *c, const gckpt_ring *g, uint32_t src, const float *kv, float *out,
                                  float *lse, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->qk_dim, vd = c->op->v_dim, nh = c->op->heads, od = nh * vd;
    lay lq = layout(c, 0, ROLE_Q), lk = layout(c, 1, ROLE_K), lv = layout(c, 2, ROLE_V);
    float scale = (float)c->op->sb;
    uint64_t kn = B * S * lk.nh * hd;
    bufs b = {0};
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    float *sc = hs_malloc(sizeof *sc * S);
    if (!sc) {
        gckpt_seterr(err, "op %s: out of host memory", c->op->name);
        goto out;
    }
    if (!load_in(c, &b, 0, err)) goto out;
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++) {
            uint64_t kh = h / (nh / lk.nh), vh = h / (nh / lv.nh);
            const float *K = kv + bi * S * lk.nh * hd, *V = kv + kn + bi * S * lv.nh * vd;
            for (uint64_t i = 0; i < S; i++) {
                const float *q = b.in[0] + (bi * S + i) * lq.W + lq.off + h * hd;
                uint64_t qp = g->pos[g->rank * S + i];
                float *o = out + (bi * S + i) * od + h * vd, *l = lse + (bi * nh + h) * S + i;
                float mx = -INFINITY, sum = 0;
                bool any = false;
                for (uint64_t j = 0; j < S; j++) {
                    if (!ring_visible(g, src, j, qp)) continue;
                    const float *k = K + (j * lk.nh + kh) * hd;
                    float d = 0;
                    for (uint64_t u = 0; u < hd; u++) d += q[u] * k[u];
                    sc[j] = d * scale;
                    mx = fmaxf(mx, sc[j]);
                    any = true;
                }
                if (!any) { /* a partial update leaves the row */
                    *l = -INFINITY;
                    continue;
                }
                for (uint64_t j = 0; j < S; j++)
                    if (ring_visible(g, src, j, qp)) sum += sc[j] = expf(sc[j] - mx);
                memset(o, 0, sizeof *o * vd);
                for (uint64_t j = 0; j < S; j++) {
                    if (!ring_visible(g, src, j, qp)) continue;
                    const float *v = V + (j * lv.nh + vh) * vd;
                    float pj = sc[j] / sum;
                    for (uint64_t u = 0; u < vd; u++) o[u] += pj * v[u];
                }
                for (uint64_t u = 0; u < vd; u++) o[u] = rnd(c->out[0].dt, o[u]); /* the block kernel's out */
                *l = mx + logf(sum);
            }
        }
    rc = GCKPT_XS_OK;
out:
    hs_free(sc);
    bufs_store_free(c, &b, false);
    return rc;
}

gckpt_xstatus host_ring_merge(const gckpt_xcall *c, float *acc, float *acc_lse, const float *out, const float *lse)
{
    uint64_t B = c->b, S = c->s, vd = c->op->v_dim, nh = c->op->heads, od = nh * vd;
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++)
            for (uint64_t i = 0; i < S; i++) {
                uint64_t li = (bi * nh + h) * S + i, oi = (bi * S + i) * od + h * vd;
                float bl = lse[li], *a = acc + oi, *al = acc_lse + li;
                const float *o = out + oi;
                if (bl == -INFINITY) continue;
                if (*al == -INFINITY) {
                    memcpy(a, o, sizeof *a * vd);
                    *al = bl;
                    continue;
                }
                /* out - sigmoid(block_lse - lse) * (out - block_out); lse - logsigmoid(lse - block_lse) */
                float sg = 1.0f / (1.0f + expf(-(bl - *al)));
                for (uint64_t u = 0; u < vd; u++) a[u] = a[u] - sg * (a[u] - o[u]);
                float z = *al - bl;
                *al = *al - (z >= 0 ? -log1pf(expf(-z)) : z - log1pf(expf(z)));
            }
    return GCKPT_XS_OK;
}

gckpt_xstatus host_ring_store(const gckpt_xcall *c, const float *acc, const float *acc_lse)
{
    uint64_t no = c->b * c->s * c->op->heads * c->op->v_dim, nl = c->b * c->op->heads * c->s;
    for (uint64_t e = 0; e < no; e++) st(&c->out[0], e, acc[e]);
    for (uint64_t e = 0; e < nl; e++) st(&c->out[1], e, acc_lse[e]);
    return GCKPT_XS_OK;
}

gckpt_xstatus host_ring_block_bwd(const gckpt_xcall *c, const gckpt_ring *g, uint32_t src, const float *kv, float *dq,
                                  float *dkv, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->qk_dim, vd = c->op->v_dim, nh = c->op->heads, qd = nh * hd, od = nh * vd;
    lay lq = layout(c, 0, ROLE_Q), lk = layout(c, 1, ROLE_K), lv = layout(c, 2, ROLE_V);
    float scale = (float)c->op->sb;
    uint64_t kn = B * S * lk.nh * hd, n = kn + B * S * lv.nh * vd;
    NEED(c, c->out[0], "saved output");
    NEED(c, c->out[1], "saved logsumexp");
    bufs b = {0};
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    uint64_t nq = B * S * qd;
    float *go = NULL, *bq = hs_calloc(nq ? nq : 1, sizeof *bq), *bkv = hs_calloc(n ? n : 1, sizeof *bkv);
    if (!bq || !bkv) {
        gckpt_seterr(err, "op %s: out of host memory", c->op->name);
        goto out;
    }
    if (!load_in(c, &b, 0, err)) goto out;
    if (!(go = host_to_f32(&c->gout, err))) goto out;
    /* the block's backward with the merged out and lse: its dq, dk, dv in the compute dtype (the
     * block kernel's outputs), added into the fp32 accumulators */
    for (uint64_t bi = 0; bi < B; bi++)
        for (uint64_t h = 0; h < nh; h++) {
            uint64_t kh = h / (nh / lk.nh), vh = h / (nh / lv.nh);
            const float *K = kv + bi * S * lk.nh * hd, *V = kv + kn + bi * S * lv.nh * vd;
            float *dK = bkv + bi * S * lk.nh * hd, *dV = bkv + kn + bi * S * lv.nh * vd;
            for (uint64_t i = 0; i < S; i++) {
                const float *q = b.in[0] + (bi * S + i) * lq.W + lq.off + h * hd;
                const float *dO = go + (bi * S + i) * od + h * vd;
                uint64_t qp = g->pos[g->rank * S + i];
                float lse = ld(&c->out[1], (bi * nh + h) * S + i), Di = 0;
                for (uint64_t u = 0; u < vd; u++) Di += dO[u] * ld(&c->out[0], (bi * S + i) * od + h * vd + u);
                float *dqi = bq + (bi * S + i) * qd + h * hd;
                for (uint64_t j = 0; j < S; j++) {
                    if (!ring_visible(g, src, j, qp)) continue;
                    const float *k = K + (j * lk.nh + kh) * hd, *v = V + (j * lv.nh + vh) * vd;
                    float sdot = 0, dp = 0;
                    for (uint64_t u = 0; u < hd; u++) sdot += q[u] * k[u];
                    for (uint64_t u = 0; u < vd; u++) dp += dO[u] * v[u];
                    float pij = expf(sdot * scale - lse), ds = pij * (dp - Di) * scale;
                    float *dv = dV + (j * lv.nh + vh) * vd, *dk = dK + (j * lk.nh + kh) * hd;
                    for (uint64_t u = 0; u < vd; u++) dv[u] += pij * dO[u];
                    for (uint64_t u = 0; u < hd; u++) dqi[u] += ds * k[u];
                    for (uint64_t u = 0; u < hd; u++) dk[u] += ds * q[u];
                }
            }
        }
    uint8_t cdt = c->out[0].dt;
    for (uint64_t e = 0; e < nq; e++) dq[e] += rnd(cdt, bq[e]);
    for (uint64_t e = 0; e < n; e++) dkv[e] += rnd(cdt, bkv[e]);
    rc = GCKPT_XS_OK;
out:
    hs_free(go);
    hs_free(bq);
    hs_free(bkv);
    bufs_store_free(c, &b, false);
    return rc;
}

gckpt_xstatus host_ring_grad(const gckpt_xcall *c, const float *dq, const float *dkv, gckpt_err *err)
{
    uint64_t B = c->b, S = c->s, hd = c->op->qk_dim, vd = c->op->v_dim, qd = c->op->heads * hd;
    lay lq = layout(c, 0, ROLE_Q), lk = layout(c, 1, ROLE_K), lv = layout(c, 2, ROLE_V);
    uint64_t kn = B * S * lk.nh * hd;
    bufs b = {0};
    float *aq = acc_of(c, &b, 0, err), *ak = acc_of(c, &b, 1, err), *av = acc_of(c, &b, 2, err);
    if ((c->gin[first_same(c, 0)].p && !aq) || (c->gin[first_same(c, 1)].p && !ak) || (c->gin[first_same(c, 2)].p && !av)) {
        bufs_store_free(c, &b, false);
        return GCKPT_XS_ERROR;
    }
    for (uint64_t r = 0; r < B * S; r++) {
        if (ak)
            for (uint64_t h = 0; h < lk.nh; h++)
                for (uint64_t u = 0; u < hd; u++) ak[r * lk.W + lk.off + h * hd + u] += dkv[(r * lk.nh + h) * hd + u];
        if (av)
            for (uint64_t h = 0; h < lv.nh; h++)
                for (uint64_t u = 0; u < vd; u++) av[r * lv.W + lv.off + h * vd + u] += dkv[kn + (r * lv.nh + h) * vd + u];
        if (aq)
            for (uint64_t u = 0; u < qd; u++) aq[r * lq.W + lq.off + u] += dq[r * qd + u];
    }
    bufs_store_free(c, &b, true);
    return GCKPT_XS_OK;
}
