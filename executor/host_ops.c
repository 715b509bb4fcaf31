/* Host kernels of the elementwise, norm, linear, embedding and loss primitives. Every
 * value is loaded as fp32, computed in fp32 and rounded once to the output dtype; sums
 * run in index order, so results are reproducible bit for bit. */
#include "host_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gckpt/core/prim.h"
#include "gckpt/executor/kernel_math.h"
#include "host_blas.h"
#include "host_num.h"
#include "host_scratch.h"

float *host_to_f32(const gckpt_xt *t, gckpt_err *err)
{
    float *v = hs_malloc(sizeof *v * (t->n ? t->n : 1));
    if (!v) {
        gckpt_seterr(err, "out of host memory for %llu-element kernel scratch", (unsigned long long)t->n);
        return NULL;
    }
    if (t->dt == GCKPT_DT_F32 && !t->vW) memcpy(v, t->p, sizeof *v * t->n);
    else
        for (uint64_t i = 0; i < t->n; i++) v[i] = ld(t, i);
    return v;
}

void host_from_f32(const gckpt_xt *t, const float *v)
{
    if (t->dt == GCKPT_DT_F32 && !t->vW) memcpy(t->p, v, sizeof *v * t->n);
    else
        for (uint64_t i = 0; i < t->n; i++) st(t, i, v[i]);
}

static float *zeros(uint64_t n, gckpt_err *err)
{
    float *v = hs_calloc(n ? n : 1, sizeof *v);
    if (!v) gckpt_seterr(err, "out of host memory for %llu-element kernel scratch", (unsigned long long)n);
    return v;
}

/* index into the broadcast operand y for element i of x */
static uint64_t yidx(const gckpt_xcall *c, const gckpt_xt *x, uint64_t xcols, uint64_t i)
{
    return gckpt_bcast_index(c->op->bcast, gckpt_bcast_width(c->op->bcast, c->op->width, xcols), xcols, c->s, x->n / c->b, i);
}

/* ---- elementwise ----------------------------------------------------------------------- */

static gckpt_xstatus unary_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input 0");
    float inv_keep = op->sa < 1 ? 1.0f / (1.0f - (float)op->sa) : 0.0f;
    for (uint64_t i = 0; i < o->n; i++) {
        float v = ld(x, i), y;
        switch (op->prim) {
        case GCKPT_P_CAST: y = v; break;
        case GCKPT_P_AFFINE: y = v * (float)op->sa + (float)op->sb; break;
        case GCKPT_P_POW: y = gckpt_powi(v, (float)op->sa); break;
        case GCKPT_P_RSQRT: y = 1.0f / sqrtf(v); break;
        case GCKPT_P_TANH: y = tanhf(v); break;
        case GCKPT_P_SILU: y = gckpt_silu(v); break;
        case GCKPT_P_GELU: y = gckpt_gelu(v, op->sa == 1.0); break;
        case GCKPT_P_CLAMP: y = gckpt_clamp(v, (float)op->sa, (float)op->sb); break;
        case GCKPT_P_SIGMOID: y = gckpt_sigmoid(v); break;
        case GCKPT_P_DROPOUT: {
            int keep = gckpt_keep(c->rng, i, (float)op->sa);
            st(&c->out[1], i, (float)keep);
            y = keep ? v * inv_keep : 0.0f;
            break;
        }
        default: gckpt_seterr(err, "op %s: not an elementwise primitive", op->name); return GCKPT_XS_ERROR;
        }
        st(o, i, y);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus unary_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    const gckpt_xt *g = &c->gout, *gi = &c->gin[0];
    if (!gi->p) return GCKPT_XS_OK;
    uint8_t reads = gckpt_prim_of(op->prim)->bwd_reads; /* what it saved */
    if (reads & GCKPT_PR_IN0) NEED(c, c->in[0], "saved input");
    if (reads & GCKPT_PR_OUT0) NEED(c, c->out[0], "saved output");
    if (reads & GCKPT_PR_OUT1) NEED(c, c->out[1], "saved mask");
    float inv_keep = op->sa < 1 ? 1.0f / (1.0f - (float)op->sa) : 0.0f;
    for (uint64_t i = 0; i < gi->n; i++) {
        float d = ld(g, i), r;
        switch (op->prim) {
        case GCKPT_P_CAST: r = d; break;
        case GCKPT_P_AFFINE: r = d * (float)op->sa; break;
        case GCKPT_P_POW: r = d * gckpt_pow_grad(ld(&c->in[0], i), (float)op->sa); break;
        case GCKPT_P_RSQRT: r = d * gckpt_rsqrt_grad(ld(&c->out[0], i)); break;
        case GCKPT_P_TANH: r = d * gckpt_tanh_grad(ld(&c->out[0], i)); break;
        case GCKPT_P_SILU: r = d * gckpt_silu_grad(ld(&c->in[0], i)); break;
        case GCKPT_P_GELU: r = d * gckpt_gelu_grad(ld(&c->in[0], i), op->sa == 1.0); break;
        case GCKPT_P_CLAMP: r = d * gckpt_clamp_grad(ld(&c->in[0], i), (float)op->sa, (float)op->sb); break;
        case GCKPT_P_SIGMOID: r = d * gckpt_sigmoid_grad(ld(&c->out[0], i)); break;
        case GCKPT_P_DROPOUT: r = ld(&c->out[1], i) != 0 ? d * inv_keep : 0.0f; break;
        default: gckpt_seterr(err, "op %s: not an elementwise primitive", op->name); return GCKPT_XS_ERROR;
        }
        st(gi, i, r);
    }
    return GCKPT_XS_OK;
}

/* x (*|+|-) y with broadcast */
static gckpt_xstatus binary_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *y = &c->in[1], *o = &c->out[0];
    NEED(c, *x, "input 0");
    NEED(c, *y, "input 1");
    uint64_t xc = c->in[0].cols;
    bool mul = c->op->prim == GCKPT_P_MUL, sub = c->op->prim == GCKPT_P_SUB;
    for (uint64_t i = 0; i < o->n; i++) {
        float a = ld(x, i), b = ld(y, yidx(c, x, xc, i));
        st(o, i, mul ? a * b : sub ? a - b : a + b);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus binary_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *y = &c->in[1], *g = &c->gout;
    bool mul = c->op->prim == GCKPT_P_MUL;
    float ysign = c->op->prim == GCKPT_P_SUB ? -1.0f : 1.0f; /* SubBackward0 negates y's gradient */
    uint64_t xc = c->in[0].cols;
    if (c->gin[0].p) {
        if (mul) NEED(c, *y, "saved input 1");
        for (uint64_t i = 0; i < c->gin[0].n; i++) {
            float d = ld(g, i);
            st(&c->gin[0], i, mul ? d * ld(y, yidx(c, x, xc, i)) : d);
        }
    }
    if (c->gin[1].p) {
        if (mul) NEED(c, *x, "saved input 0");
        if (c->op->bcast == GCKPT_BC_NONE) {
            for (uint64_t i = 0; i < c->gin[1].n; i++) {
                float d = ld(g, i);
                st(&c->gin[1], i, mul ? d * ld(x, i) : ysign * d);
            }
        } else {
            float *acc = zeros(c->gin[1].n, err);
            if (!acc) return GCKPT_XS_ERROR;
            for (uint64_t i = 0; i < g->n; i++) {
                float d = ld(g, i);
                acc[yidx(c, x, xc, i)] += mul ? d * ld(x, i) : ysign * d;
            }
            host_from_f32(&c->gin[1], acc);
            hs_free(acc);
        }
    }
    return GCKPT_XS_OK;
}

/* gpt2's packed q / k / v: column block sa of a [rows, 3 x width] input (recipe.h,
 * GCKPT_P_SPLIT); an input as wide as the output (a role already dense) is copied */
static gckpt_xstatus split_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input");
    uint64_t Wn, Ww, off, blk, stride, hd = c->op->width;
    gckpt_split_view(o->rows, x->n, o->n, (int)c->op->sa, (uint64_t)c->op->sb, hd, &Wn, &Ww, &off, &blk);
    if (Ww > Wn) gckpt_split_stride(c->op->in_f, c->op->out_f, hd, &blk, &stride);
    else stride = hd;
    for (uint64_t i = 0; i < o->n; i++) st(o, i, ld(x, gckpt_view_index(i, Wn, Ww, off, blk, stride)));
    return GCKPT_XS_OK;
}

/* the role's gradient into its block of the packed gradient (the other roles write theirs) */
static gckpt_xstatus split_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    (void)err;
    const gckpt_xt *g = &c->gout, *gi = &c->gin[0];
    if (!gi->p) return GCKPT_XS_OK;
    uint64_t Wn, Ww, off, blk, stride, hd = c->op->width;
    gckpt_split_view(g->rows, gi->n, g->n, (int)c->op->sa, (uint64_t)c->op->sb, hd, &Wn, &Ww, &off, &blk);
    if (Ww > Wn) gckpt_split_stride(c->op->in_f, c->op->out_f, hd, &blk, &stride);
    else stride = hd;
    for (uint64_t i = 0; i < g->n; i++) st(gi, gckpt_view_index(i, Wn, Ww, off, blk, stride), ld(g, i));
    return GCKPT_XS_OK;
}

/* rotate_half's pieces: n elements of out, each from a or x at the index gckpt_half_src
 * gives for its mode */
static void half_map(int mode, const gckpt_xt *out, const gckpt_xt *a, const gckpt_xt *x, uint64_t C, uint64_t w)
{
    float sign = gckpt_half_negates(mode) ? -1.0f : 1.0f;
    for (uint64_t i = 0; i < out->n; i++) {
        int which;
        uint64_t k = gckpt_half_src(mode, i, C, w, &which);
        st(out, i, which == 0 ? 0.0f : sign * ld(which == 1 ? a : x, k));
    }
}

/* GLM's rotate_half on interleaved pairs (sa 1, recipe.h): per head of width w, NEG_HALF
 * -x[..., 1::2] (half-width rows of C / 2), CAT_HALF stack((neg, x[..., 0::2]), -1).flatten(-2);
 * their gradients scatter back to those columns (the others 0). */
static void pairs_map(bool neg, bool bwd, int k, const gckpt_xcall *c, const gckpt_xt *out, uint64_t C, uint64_t w)
{
    uint64_t hw = w / 2, half = C / 2;
    for (uint64_t i = 0; i < out->n; i++) {
        if (neg && !bwd) { /* out: half rows; x[row, head, 2j + 1] */
            uint64_t row = i / half, col = i % half;
            st(out, i, -ld(&c->in[0], row * C + (col / hw) * w + 2 * (col % hw) + 1));
            continue;
        }
        if (!neg && bwd && k == 0) { /* neg's gradient: g[row, head, 2j] */
            uint64_t row = i / half, col = i % half;
            st(out, i, ld(&c->gout, row * C + (col / hw) * w + 2 * (col % hw)));
            continue;
        }
        uint64_t row = i / C, col = i % C, hd = col / w, j = col % w;
        if (!neg && !bwd) /* out[2j] = neg[j], out[2j + 1] = x[2j] */
            st(out, i, j % 2 ? ld(&c->in[1], row * C + hd * w + j - 1) : ld(&c->in[0], row * half + hd * hw + j / 2));
        else if (neg) /* x's gradient from NEG: -g[j / 2] at odd columns */
            st(out, i, j % 2 ? -ld(&c->gout, row * half + hd * hw + j / 2) : 0.0f);
        else /* x's gradient from CAT: g[j + 1] at even columns */
            st(out, i, j % 2 ? 0.0f : ld(&c->gout, row * C + hd * w + j + 1));
    }
}

static gckpt_xstatus half_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    uint64_t w = c->op->width;
    if (c->op->sa == 1) {
        NEED(c, c->in[0], "input 0");
        if (c->op->prim == GCKPT_P_CAT_HALF) NEED(c, c->in[1], "input 1");
        pairs_map(c->op->prim == GCKPT_P_NEG_HALF, false, 0, c, &c->out[0],
                  c->op->prim == GCKPT_P_NEG_HALF ? c->in[0].cols : c->in[1].cols, w);
        return GCKPT_XS_OK;
    }
    if (c->op->prim == GCKPT_P_NEG_HALF) {
        NEED(c, c->in[0], "input");
        half_map(GCKPT_HALF_NEG, &c->out[0], &c->in[0], NULL, c->in[0].cols, w);
    } else {
        NEED(c, c->in[0], "input 0");
        NEED(c, c->in[1], "input 1");
        half_map(GCKPT_HALF_CAT, &c->out[0], &c->in[0], &c->in[1], c->in[1].cols, w);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus half_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    (void)err;
    uint64_t w = c->op->width;
    if (c->op->sa == 1) {
        bool neg = c->op->prim == GCKPT_P_NEG_HALF;
        uint64_t C = neg ? c->in[0].cols : c->in[1].cols;
        for (int k = 0; k < (neg ? 1 : 2); k++)
            if (c->gin[k].p) pairs_map(neg, true, k, c, &c->gin[k], C, w);
        return GCKPT_XS_OK;
    }
    if (c->op->prim == GCKPT_P_NEG_HALF) {
        if (c->gin[0].p) half_map(GCKPT_HALF_NEG_GRAD, &c->gin[0], &c->gout, NULL, c->in[0].cols, w);
    } else {
        if (c->gin[0].p) half_map(GCKPT_HALF_CAT_GRAD0, &c->gin[0], &c->gout, NULL, c->in[1].cols, w);
        if (c->gin[1].p) half_map(GCKPT_HALF_CAT_GRAD1, &c->gin[1], &c->gout, NULL, c->in[1].cols, w);
    }
    return GCKPT_XS_OK;
}

/* partial rotary's cat of the rotated part (input 0) and the input's other columns
 * (input 1), per head of width op->width */
static uint64_t rotated_width(const gckpt_xcall *c)
{
    uint64_t hd = c->op->width, C = c->in[1].cols;
    return hd && C >= hd ? c->in[0].cols / (C / hd) : 0;
}

/* MLA's query / key states (sa 1): per head in0's columns then in1's; the gradient of an
 * expanded in1 (one head) sums over the heads, as expand's backward */
static gckpt_xstatus cat_heads(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    uint64_t H = c->op->heads, hd = c->op->width, wa = c->in[0].cols / H, nb = c->in[1].cols / (hd - wa);
    const gckpt_xt *o = bwd ? &c->gout : &c->out[0];
    if (!bwd) {
        NEED(c, c->in[0], "input 0");
        NEED(c, c->in[1], "input 1");
        for (uint64_t i = 0; i < o->n; i++) {
            int which;
            uint64_t src;
            gckpt_cat_heads_src(i, H, hd, wa, nb, &which, &src);
            st(o, i, ld(which == 1 ? &c->in[0] : &c->in[1], src));
        }
        return GCKPT_XS_OK;
    }
    float *acc = NULL;
    if (c->gin[1].p && nb == 1 && !(acc = hs_calloc(c->gin[1].n ? c->gin[1].n : 1, sizeof *acc))) {
        gckpt_seterr(err, "op %s: out of host memory", c->op->name);
        return GCKPT_XS_ERROR;
    }
    for (uint64_t i = 0; i < o->n; i++) {
        int which;
        uint64_t src;
        gckpt_cat_heads_src(i, H, hd, wa, nb, &which, &src);
        if (which == 1 && c->gin[0].p) st(&c->gin[0], src, ld(o, i));
        else if (which == 2 && acc) acc[src] += ld(o, i);
        else if (which == 2 && c->gin[1].p) st(&c->gin[1], src, ld(o, i));
    }
    if (acc) host_from_f32(&c->gin[1], acc);
    hs_free(acc);
    return GCKPT_XS_OK;
}

static gckpt_xstatus cat_pass(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    if (c->op->sa == 1) return cat_heads(c, bwd, err);
    uint64_t C = c->in[1].cols, hd = c->op->width, rd = rotated_width(c);
    if (!rd || rd > hd || C % hd) {
        gckpt_seterr(err, "op %s: a rotated part of %llu columns does not fit heads of %llu", c->op->name,
                     (unsigned long long)c->in[0].cols, (unsigned long long)hd);
        return GCKPT_XS_ERROR;
    }
    const gckpt_xt *o = bwd ? &c->gout : &c->out[0];
    if (!bwd) {
        NEED(c, c->in[0], "input 0");
        NEED(c, c->in[1], "input 1");
    }
    for (uint64_t i = 0; i < o->n; i++) {
        int which;
        uint64_t src;
        gckpt_cat_pass_src(i, C, hd, rd, &which, &src);
        const gckpt_xt *part = which == 1 ? &c->in[0] : &c->in[1], *gpart = which == 1 ? &c->gin[0] : &c->gin[1];
        if (!bwd) st(o, i, ld(part, src));
        else if (gpart->p) st(gpart, src, ld(o, i));
        if (bwd && which == 1 && c->gin[1].p) st(&c->gin[1], i, 0.0f); /* rotated columns pass nothing of x */
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus cat_pass_fwd(const gckpt_xcall *c, gckpt_err *err) { return cat_pass(c, false, err); }
static gckpt_xstatus cat_pass_bwd(const gckpt_xcall *c, gckpt_err *err) { return cat_pass(c, true, err); }

static gckpt_xstatus mean_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input");
    uint64_t w = c->op->width;
    for (uint64_t g = 0; g < o->n; g++) {
        float s = 0;
        for (uint64_t k = 0; k < w; k++) s += ld(x, g * w + k);
        st(o, g, s / (float)w);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus mean_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    (void)err;
    const gckpt_xt *gi = &c->gin[0];
    if (!gi->p) return GCKPT_XS_OK;
    uint64_t w = c->op->width;
    for (uint64_t i = 0; i < gi->n; i++) st(gi, i, ld(&c->gout, i / w) / (float)w);
    return GCKPT_XS_OK;
}

/* ---- linear ------------------------------------------------------------------------------ */

static gckpt_xstatus linear_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    NEED(c, c->in[0], "input");
    NEED(c, c->in[1], "weight");
    uint64_t K = op->in_f, N = op->out_f, M = c->in[0].n / K;
    float *x = host_to_f32(&c->in[0], err), *w = x ? host_to_f32(&c->in[1], err) : NULL;
    float *y = w ? hs_malloc(sizeof *y * (M * N + 1)) : NULL;
    if (!y) {
        if (w) gckpt_seterr(err, "out of host memory for a %llu x %llu product", (unsigned long long)M, (unsigned long long)N);
        hs_free(x);
        hs_free(w);
        return GCKPT_XS_ERROR;
    }
    host_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, w, (int)K, 0.0f, y,
                (int)N);
    if (op->nin > 2) {
        NEED(c, c->in[2], "bias");
        for (uint64_t i = 0; i < M; i++)
            for (uint64_t j = 0; j < N; j++) y[i * N + j] += ld(&c->in[2], j);
    }
    host_from_f32(&c->out[0], y);
    hs_free(x);
    hs_free(w);
    hs_free(y);
    return GCKPT_XS_OK;
}

static gckpt_xstatus linear_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    uint64_t K = op->in_f, N = op->out_f, M = c->gout.n / N;
    float *g = host_to_f32(&c->gout, err);
    if (!g) return GCKPT_XS_ERROR;
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    float *w = NULL, *x = NULL, *r = NULL;
    if (c->gin[0].p) {
        if (!c->in[1].p) { gckpt_seterr(err, "op %s: saved weight is not available", op->name); goto out; }
        if (!(w = host_to_f32(&c->in[1], err)) || !(r = hs_malloc(sizeof *r * (M * K + 1)))) goto oom;
        host_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)N, 1.0f, g, (int)N, w, (int)K, 0.0f,
                    r, (int)K);
        host_from_f32(&c->gin[0], r);
        hs_free(r);
        r = NULL;
    }
    if (c->gin[1].p) {
        if (!c->in[0].p) { gckpt_seterr(err, "op %s: saved input is not available", op->name); goto out; }
        if (!(x = host_to_f32(&c->in[0], err)) || !(r = hs_malloc(sizeof *r * (N * K + 1)))) goto oom;
        host_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)M, 1.0f, g, (int)N, x, (int)K, 0.0f, r,
                    (int)K);
        host_from_f32(&c->gin[1], r);
        hs_free(r);
        r = NULL;
    }
    if (op->nin > 2 && c->gin[2].p) {
        if (!(r = zeros(N, err))) goto out;
        for (uint64_t i = 0; i < M; i++)
            for (uint64_t j = 0; j < N; j++) r[j] += g[i * N + j];
        host_from_f32(&c->gin[2], r);
    }
    rc = GCKPT_XS_OK;
    goto out;
oom:
    gckpt_seterr(err, "op %s: out of host memory for kernel scratch", op->name);
out:
    hs_free(g);
    hs_free(w);
    hs_free(x);
    hs_free(r);
    return rc;
}

/* ---- layer norm ----------------------------------------------------------------------------- */

static gckpt_xstatus layernorm_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *w = &c->in[1], *b = &c->in[2], *o = &c->out[0], *stt = &c->out[1];
    NEED(c, *x, "input");
    NEED(c, *w, "weight");
    NEED(c, *b, "bias");
    uint64_t W = c->op->width, rows = x->n / W;
    float eps = (float)c->op->sa;
    for (uint64_t r = 0; r < rows; r++) {
        float mean = 0, var = 0;
        for (uint64_t k = 0; k < W; k++) mean += ld(x, r * W + k);
        mean /= (float)W;
        for (uint64_t k = 0; k < W; k++) {
            float d = ld(x, r * W + k) - mean;
            var += d * d;
        }
        var /= (float)W;
        float rstd = gckpt_layernorm_rstd(var, eps);
        for (uint64_t k = 0; k < W; k++)
            st(o, r * W + k, (ld(x, r * W + k) - mean) * rstd * ld(w, k) + ld(b, k));
        st(stt, 2 * r, mean);
        st(stt, 2 * r + 1, rstd);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus layernorm_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *w = &c->in[1], *stt = &c->out[1], *g = &c->gout;
    NEED(c, *x, "saved input");
    NEED(c, *w, "weight");
    NEED(c, *stt, "saved mean and rstd");
    uint64_t W = c->op->width, rows = x->n / W;
    float *gw = zeros(W, err), *gb = gw ? zeros(W, err) : NULL;
    if (!gb) {
        hs_free(gw);
        return GCKPT_XS_ERROR;
    }
    for (uint64_t r = 0; r < rows; r++) {
        float mean = ld(stt, 2 * r), rstd = ld(stt, 2 * r + 1);
        float s1 = 0, s2 = 0;
        for (uint64_t k = 0; k < W; k++) {
            float xh = (ld(x, r * W + k) - mean) * rstd, d = ld(g, r * W + k), dxh = d * ld(w, k);
            s1 += dxh;
            s2 += dxh * xh;
            gw[k] += d * xh;
            gb[k] += d;
        }
        s1 /= (float)W;
        s2 /= (float)W;
        if (c->gin[0].p)
            for (uint64_t k = 0; k < W; k++) {
                float xh = (ld(x, r * W + k) - mean) * rstd, dxh = ld(g, r * W + k) * ld(w, k);
                st(&c->gin[0], r * W + k, gckpt_layernorm_grad(rstd, dxh, xh, s1, s2));
            }
    }
    if (c->gin[1].p) host_from_f32(&c->gin[1], gw);
    if (c->gin[2].p) host_from_f32(&c->gin[2], gb);
    hs_free(gw);
    hs_free(gb);
    return GCKPT_XS_OK;
}

/* DeepSeek-V3's grouped router's mask (GCKPT_P_ROUTE_MASK; no gradient) */
static gckpt_xstatus route_mask_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input 0");
    uint64_t w = c->op->width, xc = x->cols;
    int mode = (int)c->op->sa;
    if (mode == 3) NEED(c, c->in[1], "mask");
    if (mode == 0) { /* zeros_like(...).scatter_(1, idx, 1) */
        for (uint64_t i = 0; i < o->n; i++) st(o, i, 0.0f);
        for (uint64_t i = 0; i < x->n; i++) {
            int64_t g = ldi(x, i);
            if (g < 0 || (uint64_t)g >= w) {
                gckpt_seterr(err, "op %s: index %lld outside %llu columns", c->op->name, (long long)g, (unsigned long long)w);
                return GCKPT_XS_ERROR;
            }
            st(o, i / xc * w + (uint64_t)g, 1.0f);
        }
        return GCKPT_XS_OK;
    }
    for (uint64_t i = 0; i < o->n; i++) {
        float y;
        switch (mode) {
        case 1: y = ld(x, i / w * xc + i % w / (w / xc)); break;
        case 2: y = (float)(ld(x, i) == 0.0f); break;
        default: y = ld(&c->in[1], i) != 0.0f ? -INFINITY : ld(x, i); break;
        }
        st(o, i, y);
    }
    return GCKPT_XS_OK;
}

/* ---- embedding, log-softmax, nll ------------------------------------------------------------ */

/* The embedding: rows of the table in0 picked by the int64 ids in1; also the experts'
 * gathers of rows by index (GCKPT_P_GATHER_ROWS), whose backward adds each row's
 * gradient back to its source row as the embedding's does */
/* gather(1, idx) (GATHER_ROWS sa 1): out[r, j] = x[r, idx[r, j]], rows of `experts`; the
 * backward scatters each gradient back to its column */
static gckpt_xstatus gather_cols(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_xt *ids = &c->in[1];
    uint64_t E = c->op->experts, k = c->op->width;
    NEED(c, *ids, bwd ? "saved indices" : "indices");
    float *acc = NULL;
    if (bwd && (!c->gin[0].p || !(acc = zeros(c->gin[0].n, err)))) return c->gin[0].p ? GCKPT_XS_ERROR : GCKPT_XS_OK;
    if (!bwd) NEED(c, c->in[0], "input");
    for (uint64_t i = 0; i < ids->n; i++) {
        int64_t e = ldi(ids, i);
        if (e < 0 || (uint64_t)e >= E) {
            gckpt_seterr(err, "op %s: index %lld outside %llu columns", c->op->name, (long long)e, (unsigned long long)E);
            hs_free(acc);
            return GCKPT_XS_ERROR;
        }
        uint64_t src = i / k * E + (uint64_t)e;
        if (bwd) acc[src] += ld(&c->gout, i);
        else st(&c->out[0], i, ld(&c->in[0], src));
    }
    if (acc) host_from_f32(&c->gin[0], acc);
    hs_free(acc);
    return GCKPT_XS_OK;
}

static gckpt_xstatus embed_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *tab = &c->in[0], *ids = &c->in[1], *o = &c->out[0];
    if (c->op->sa == 1) return gather_cols(c, false, err);
    NEED(c, *tab, "table");
    NEED(c, *ids, "ids");
    uint64_t W = c->op->width, V = tab->n / W;
    for (uint64_t t = 0; t < ids->n; t++) {
        int64_t id = ((const int64_t *)ids->p)[t];
        if (id < 0 || (uint64_t)id >= V) {
            gckpt_seterr(err, "op %s: id %lld at position %llu is outside the table's %llu rows", c->op->name,
                         (long long)id, (unsigned long long)t, (unsigned long long)V);
            return GCKPT_XS_ERROR;
        }
        for (uint64_t k = 0; k < W; k++) st(o, t * W + k, ld(tab, (uint64_t)id * W + k));
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus embed_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    if (c->op->sa == 1) return gather_cols(c, true, err);
    const gckpt_xt *gi = &c->gin[0], *ids = &c->in[1];
    if (!gi->p) return GCKPT_XS_OK;
    NEED(c, *ids, "saved ids");
    uint64_t W = c->op->width;
    int64_t pad = gckpt_embed_pad(c->m, c->op->prim == GCKPT_P_EMBED);
    float *acc = zeros(gi->n, err);
    if (!acc) return GCKPT_XS_ERROR;
    for (uint64_t t = 0; t < ids->n; t++) {
        if (gckpt_embed_grad_skips(((const int64_t *)ids->p)[t], pad)) continue;
        uint64_t id = (uint64_t)((const int64_t *)ids->p)[t];
        for (uint64_t k = 0; k < W; k++) acc[id * W + k] += ld(&c->gout, t * W + k);
    }
    host_from_f32(gi, acc);
    hs_free(acc);
    return GCKPT_XS_OK;
}

static gckpt_xstatus logsoftmax_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input");
    uint64_t W = c->op->width, rows = x->n / W;
    for (uint64_t r = 0; r < rows; r++) {
        float mx = -INFINITY, s = 0;
        for (uint64_t k = 0; k < W; k++) mx = fmaxf(mx, ld(x, r * W + k));
        for (uint64_t k = 0; k < W; k++) s += expf(ld(x, r * W + k) - mx);
        float lse = mx + logf(s);
        for (uint64_t k = 0; k < W; k++) st(o, r * W + k, ld(x, r * W + k) - lse);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus logsoftmax_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *y = &c->out[0], *g = &c->gout, *gi = &c->gin[0];
    if (!gi->p) return GCKPT_XS_OK;
    NEED(c, *y, "saved output");
    uint64_t W = c->op->width, rows = y->n / W;
    for (uint64_t r = 0; r < rows; r++) {
        float s = 0;
        for (uint64_t k = 0; k < W; k++) s += ld(g, r * W + k);
        for (uint64_t k = 0; k < W; k++) st(gi, r * W + k, ld(g, r * W + k) - expf(ld(y, r * W + k)) * s);
    }
    return GCKPT_XS_OK;
}

#define IGNORE_INDEX (-100)

static gckpt_xstatus nll_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *lb = &c->in[1];
    NEED(c, *x, "input");
    NEED(c, *lb, "labels");
    uint64_t W = c->op->width;
    double s = 0; /* the loss sums in double: finite differences of it are meaningful */
    float n = 0;
    for (uint64_t r = 0; r < lb->n; r++) {
        int64_t l = ((const int64_t *)lb->p)[r];
        if (l == IGNORE_INDEX) continue;
        if (l < 0 || (uint64_t)l >= W) {
            gckpt_seterr(err, "op %s: label %lld at row %llu is outside [0, %llu)", c->op->name, (long long)l,
                         (unsigned long long)r, (unsigned long long)W);
            return GCKPT_XS_ERROR;
        }
        s += ld(x, r * W + (uint64_t)l);
        n += 1;
    }
    st(&c->out[0], 0, (float)(-s / n));
    if (c->out[1].p) st(&c->out[1], 0, n); /* total_weight, saved for backward */
    return GCKPT_XS_OK;
}

static gckpt_xstatus nll_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *lb = &c->in[1], *gi = &c->gin[0];
    if (!gi->p) return GCKPT_XS_OK;
    NEED(c, *lb, "saved labels");
    uint64_t W = c->op->width;
    float n = 0;
    if (c->op->out[1] >= 0) {
        NEED(c, c->out[1], "saved total_weight");
        n = ld(&c->out[1], 0);
    } else {
        for (uint64_t r = 0; r < lb->n; r++) n += ((const int64_t *)lb->p)[r] != IGNORE_INDEX;
    }
    float d = -ld(&c->gout, 0) / n;
    for (uint64_t i = 0; i < gi->n; i++) st(gi, i, 0.0f);
    for (uint64_t r = 0; r < lb->n; r++) {
        int64_t l = ((const int64_t *)lb->p)[r];
        if (l != IGNORE_INDEX) st(gi, r * W + (uint64_t)l, d);
    }
    return GCKPT_XS_OK;
}

/* ---- the kernel table ------------------------------------------------------------------------ */

/* One row per primitive (recipe.h gckpt_prim); a primitive without a row, or a NULL
 * backward, is refused by name (tests/executor/test_prim_coverage.c lists them). The
 * attention kernels read packed q / k / v themselves; the others read strided views
 * (gckpt_xt.vW) through host_num.h's ld / st. */
static const host_kernel kernels[GCKPT_NPRIM] = {
    [GCKPT_P_CAST] = {unary_fwd, unary_bwd},
    [GCKPT_P_MUL] = {binary_fwd, binary_bwd},
    [GCKPT_P_ADD] = {binary_fwd, binary_bwd},
    [GCKPT_P_AFFINE] = {unary_fwd, unary_bwd},
    [GCKPT_P_NEG_HALF] = {half_fwd, half_bwd},
    [GCKPT_P_CAT_HALF] = {half_fwd, half_bwd},
    [GCKPT_P_POW] = {unary_fwd, unary_bwd},
    [GCKPT_P_RSQRT] = {unary_fwd, unary_bwd},
    [GCKPT_P_TANH] = {unary_fwd, unary_bwd},
    [GCKPT_P_SILU] = {unary_fwd, unary_bwd},
    [GCKPT_P_GELU] = {unary_fwd, unary_bwd},
    [GCKPT_P_MEAN] = {mean_fwd, mean_bwd},
    [GCKPT_P_LINEAR] = {linear_fwd, linear_bwd},
    [GCKPT_P_LAYERNORM] = {layernorm_fwd, layernorm_bwd},
    [GCKPT_P_DROPOUT] = {unary_fwd, unary_bwd},
    [GCKPT_P_SDPA] = {host_sdpa_fwd, host_sdpa_bwd},
    [GCKPT_P_REPEAT_KV] = {host_repeat_kv_fwd, host_repeat_kv_bwd},
    [GCKPT_P_QK] = {host_qk_fwd, host_qk_bwd},
    [GCKPT_P_SOFTMAX] = {host_softmax_fwd, host_softmax_bwd},
    [GCKPT_P_PV] = {host_pv_fwd, host_pv_bwd},
    [GCKPT_P_TRANSPOSE] = {host_transpose_fwd, host_transpose_bwd},
    [GCKPT_P_EMBED] = {embed_fwd, embed_bwd},
    [GCKPT_P_LOG_SOFTMAX] = {logsoftmax_fwd, logsoftmax_bwd},
    [GCKPT_P_NLL] = {nll_fwd, nll_bwd},
    [GCKPT_P_SPLIT] = {split_fwd, split_bwd},
    [GCKPT_P_CAT_PASS] = {cat_pass_fwd, cat_pass_bwd},
    [GCKPT_P_TOPK] = {host_topk_fwd, host_topk_bwd},
    [GCKPT_P_SUM] = {host_sum_fwd, host_sum_bwd},
    [GCKPT_P_DIV] = {host_div_fwd, host_div_bwd},
    [GCKPT_P_SORT] = {host_sort_fwd, NULL},
    [GCKPT_P_FLOORDIV] = {host_floordiv_fwd, NULL},
    [GCKPT_P_GATHER_ROWS] = {embed_fwd, embed_bwd},
    [GCKPT_P_HISTC] = {host_histc_fwd, NULL},
    [GCKPT_P_INVERT_PERM] = {host_invert_perm_fwd, NULL},
    [GCKPT_P_GROUPED_LINEAR] = {host_grouped_linear_fwd, host_grouped_linear_bwd},
    [GCKPT_P_SUB] = {binary_fwd, binary_bwd},
    [GCKPT_P_CLAMP] = {unary_fwd, unary_bwd},
    [GCKPT_P_SIGMOID] = {unary_fwd, unary_bwd},
    [GCKPT_P_CAT_SINK] = {host_cat_sink_fwd, host_cat_sink_bwd},
    [GCKPT_P_MAX_LAST] = {host_max_last_fwd, host_max_last_bwd},
    [GCKPT_P_DROP_SINK] = {host_drop_sink_fwd, host_drop_sink_bwd},
    [GCKPT_P_CAT_HALVES] = {host_cat_halves_fwd, host_cat_halves_bwd},
    [GCKPT_P_BOOL_MASK] = {host_bool_mask_fwd, NULL},
    [GCKPT_P_ROUTE_MASK] = {route_mask_fwd, NULL},
    [GCKPT_P_PATCH_CONV] = {host_patch_conv_fwd, host_patch_conv_bwd},
    [GCKPT_P_CAT_CLS] = {host_cat_cls_fwd, host_cat_cls_bwd},
    [GCKPT_P_ROWS_OF] = {host_rows_of_fwd, host_rows_of_bwd},
#ifdef GCKPT_TOY
    [GCKPT_P_TOY] = {host_toy_fwd, host_toy_bwd},
#endif
    /* GCKPT_P_SOURCE: the backend's source call (host_source.c), not a kernel */
};

const host_kernel *host_kernel_of(int prim) { return prim >= 0 && prim < GCKPT_NPRIM ? &kernels[prim] : NULL; }

static gckpt_xstatus run_op(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const host_kernel *k = host_kernel_of(c->op->prim);
    host_kernel_fn fn = !k ? NULL : bwd ? k->bwd : k->fwd;
    if (!fn) {
        gckpt_seterr(err, "op %s: primitive %s has no host %s", c->op->name, gckpt_prim_name(c->op->prim),
                     bwd ? "backward" : "forward");
        return GCKPT_XS_ERROR;
    }
    return fn(c, err);
}

gckpt_xstatus host_op_forward(const gckpt_xcall *c, gckpt_err *err) { return run_op(c, false, err); }

gckpt_xstatus host_op_backward(const gckpt_xcall *c, gckpt_err *err)
{
    NEED(c, c->gout, "output gradient");
    return run_op(c, true, err);
}
