/* Host kernels of the mixture-of-experts primitives (recipe_moe.c): the router's top-k,
 * sum and division, and grouped_mm_experts_forward's sort, gathers, histogram / offsets,
 * inverse permutation and grouped GEMMs, forward and backward. As host_ops.c: values
 * loaded as fp32, sums in index order, one rounding to the output dtype; integer tensors
 * (indices, offsets) are read and written as integers. */
#include <stdlib.h>
#include <string.h>

#include "gckpt/executor/kernel_math.h"
#include "host_blas.h"
#include "host_num.h"
#include "host_ops.h"
#include "host_scratch.h"

static uint64_t shape_n(const gckpt_xt *t) { return t->rows * t->cols; }

static float *zeros(const gckpt_xcall *c, uint64_t n, gckpt_err *err)
{
    float *v = hs_calloc(n ? n : 1, sizeof *v);
    if (!v) gckpt_seterr(err, "op %s: out of host memory for %llu-element kernel scratch", c->op->name, (unsigned long long)n);
    return v;
}

/* ---- router ------------------------------------------------------------------------------ */

/* the `width` largest of each row of E (the experts; the load-balancing loss's rows hold
 * every layer's): values and int64 indices, in gckpt_topk_before's order */
gckpt_xstatus host_topk_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *v = &c->out[0], *ix = &c->out[1];
    NEED(c, *x, "input");
    uint64_t E = c->op->experts, k = c->op->width;
    for (uint64_t r = 0; r < shape_n(x) / E; r++)
        for (uint64_t j = 0; j < k; j++) {
            uint64_t best = E;
            for (uint64_t e = 0; e < E; e++) {
                bool taken = false;
                for (uint64_t q = 0; q < j && !taken; q++) taken = (uint64_t)ldi(ix, r * k + q) == e;
                if (!taken && (best == E || gckpt_topk_before(ld(x, r * E + e), e, ld(x, r * E + best), best))) best = e;
            }
            st(v, r * k + j, ld(x, r * E + best));
            sti(ix, r * k + j, (int64_t)best);
        }
    return GCKPT_XS_OK;
}

/* the values' gradient scattered to the chosen columns (the indices get none) */
gckpt_xstatus host_topk_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *gi = &c->gin[0], *ix = &c->out[1];
    if (!gi->p) return GCKPT_XS_OK;
    NEED(c, *ix, "saved indices");
    uint64_t E = c->op->experts, k = c->op->width;
    float *acc = zeros(c, gi->n, err);
    if (!acc) return GCKPT_XS_ERROR;
    for (uint64_t r = 0; r < gi->n / E; r++)
        for (uint64_t j = 0; j < k; j++) acc[r * E + (uint64_t)ldi(ix, r * k + j)] += ld(&c->gout, r * k + j);
    host_from_f32(gi, acc);
    hs_free(acc);
    return GCKPT_XS_OK;
}

/* The divisor of a normalised sum or histogram (op sb > 0: the load-balancing loss's
 * / total_rows, the input's elements / sb), else 1. */
static float normaliser(const gckpt_xcall *c) { return c->op->sb > 0 ? (float)((double)shape_n(&c->in[0]) / c->op->sb) : 1.0f; }

/* sum over the middle of [n_out / B, w, B] (gckpt_sum_dst), B the output's row width */
gckpt_xstatus host_sum_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input");
    uint64_t n = shape_n(x), no = shape_n(o), w = n / no, B = gckpt_sum_block(c->op->sa, o->cols);
    float *acc = zeros(c, no, err), div = normaliser(c);
    if (!acc) return GCKPT_XS_ERROR;
    for (uint64_t i = 0; i < n; i++) acc[gckpt_sum_dst(i, w, B)] += ld(x, i);
    for (uint64_t i = 0; i < no; i++) st(o, i, acc[i] / div);
    hs_free(acc);
    return GCKPT_XS_OK;
}

gckpt_xstatus host_sum_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    (void)err;
    const gckpt_xt *gi = &c->gin[0];
    if (!gi->p) return GCKPT_XS_OK;
    uint64_t n = shape_n(gi), w = n / shape_n(&c->gout), B = gckpt_sum_block(c->op->sa, c->gout.cols);
    float div = normaliser(c);
    for (uint64_t i = 0; i < n; i++) st(gi, i, ld(&c->gout, gckpt_sum_dst(i, w, B)) / div);
    return GCKPT_XS_OK;
}

/* x / y with broadcast; the backward from the saved y and output (y's gradient is
 * -sum(g * out / y) over its group) */
gckpt_xstatus host_div_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *y = &c->in[1], *o = &c->out[0];
    NEED(c, *x, "input 0");
    NEED(c, *y, "input 1");
    for (uint64_t i = 0; i < o->n; i++)
        st(o, i, ld(x, i) / ld(y, gckpt_bcast_index(c->op->bcast, c->op->width, x->cols, c->s, 0, i)));
    return GCKPT_XS_OK;
}

gckpt_xstatus host_div_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *y = &c->in[1], *o = &c->out[0], *g = &c->gout;
    NEED(c, *y, "saved divisor");
    uint64_t xc = c->in[0].cols;
    if (c->gin[0].p)
        for (uint64_t i = 0; i < g->n; i++)
            st(&c->gin[0], i, ld(g, i) / ld(y, gckpt_bcast_index(c->op->bcast, c->op->width, xc, c->s, 0, i)));
    if (c->gin[1].p) {
        NEED(c, *o, "saved output");
        float *acc = zeros(c, c->gin[1].n, err);
        if (!acc) return GCKPT_XS_ERROR;
        for (uint64_t i = 0; i < g->n; i++) {
            uint64_t j = gckpt_bcast_index(c->op->bcast, c->op->width, xc, c->s, 0, i);
            acc[j] -= ld(g, i) * ld(o, i) / ld(y, j);
        }
        host_from_f32(&c->gin[1], acc);
        hs_free(acc);
    }
    return GCKPT_XS_OK;
}

/* ---- routing the pairs ------------------------------------------------------------------- */

typedef struct {
    int64_t v;
    uint64_t i;
} keyed;

static int by_value_then_index(const void *a, const void *b)
{
    const keyed *p = a, *q = b;
    if (p->v != q->v) return p->v < q->v ? -1 : 1;
    return p->i < q->i ? -1 : p->i > q->i;
}

/* torch.sort of the expert ids: sorted values and the permutation, equal ids in index
 * order (a stable sort: what the CPU's sort gave, FINDINGS R-MOE-6) */
gckpt_xstatus host_sort_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0];
    NEED(c, *x, "input");
    uint64_t n = shape_n(x);
    keyed *k = hs_malloc(sizeof *k * (n ? n : 1));
    if (!k) {
        gckpt_seterr(err, "op %s: out of host memory", c->op->name);
        return GCKPT_XS_ERROR;
    }
    for (uint64_t i = 0; i < n; i++) k[i] = (keyed){ldi(x, i), i};
    qsort(k, (size_t)n, sizeof *k, by_value_then_index);
    for (uint64_t i = 0; i < n; i++) {
        sti(&c->out[0], i, k[i].v);
        sti(&c->out[1], i, (int64_t)k[i].i);
    }
    hs_free(k);
    return GCKPT_XS_OK;
}

gckpt_xstatus host_floordiv_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0];
    NEED(c, *x, "input");
    int64_t d = (int64_t)c->op->sa;
    if (d <= 0) {
        gckpt_seterr(err, "op %s: divisor %g", c->op->name, c->op->sa);
        return GCKPT_XS_ERROR;
    }
    for (uint64_t i = 0; i < shape_n(x); i++) sti(&c->out[0], i, ldi(x, i) / d); /* indices are >= 0 */
    return GCKPT_XS_OK;
}

/* inv[perm[i]] = i; perm must be a permutation */
gckpt_xstatus host_invert_perm_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *p = &c->in[0], *o = &c->out[0];
    NEED(c, *p, "permutation");
    uint64_t n = shape_n(p);
    for (uint64_t i = 0; i < n; i++) sti(o, i, -1);
    for (uint64_t i = 0; i < n; i++) {
        int64_t j = ldi(p, i);
        if (j < 0 || (uint64_t)j >= n || ldi(o, (uint64_t)j) != -1) {
            gckpt_seterr(err, "op %s: element %llu (%lld) of the input is not a permutation's", c->op->name,
                         (unsigned long long)i, (long long)j);
            return GCKPT_XS_ERROR;
        }
        sti(o, (uint64_t)j, (int64_t)i);
    }
    return GCKPT_XS_OK;
}

/* torch.histc of the ids over `width` bins of one id each (values outside are dropped);
 * an integer output takes the cumulative sum (the experts' end offsets, cumsum to int32),
 * a float one the counts (divided by normaliser()) */
gckpt_xstatus host_histc_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *o = &c->out[0];
    NEED(c, *x, "input");
    uint64_t E = c->op->width;
    float *cnt = zeros(c, E, err);
    if (!cnt) return GCKPT_XS_ERROR;
    for (uint64_t i = 0; i < shape_n(x); i++) {
        float v = ld(x, i);
        if (v >= 0 && v < (float)E) cnt[(uint64_t)v] += 1.0f;
    }
    bool offsets = o->dt == GCKPT_DT_I32 || o->dt == GCKPT_DT_I64;
    float div = normaliser(c);
    int64_t run = 0;
    for (uint64_t e = 0; e < E; e++) {
        run += (int64_t)cnt[e];
        if (offsets) sti(o, e, run);
        else st(o, e, cnt[e] / div);
    }
    hs_free(cnt);
    return GCKPT_XS_OK;
}

/* ---- the experts' grouped GEMMs ------------------------------------------------------------ */

/* The group of rows [*lo, *hi) of expert e from the int32 end offsets; false when they
 * are not non-decreasing or do not end at the pairs' count S. */
static bool group_of(const gckpt_xcall *c, uint64_t e, uint64_t S, uint64_t *lo, uint64_t *hi, gckpt_err *err)
{
    const gckpt_xt *offs = &c->in[2];
    int64_t a = e ? ldi(offs, e - 1) : 0, b = ldi(offs, e);
    uint64_t E = shape_n(offs);
    if (a < 0 || b < a || (uint64_t)b > S || (e + 1 == E && (uint64_t)b != S)) {
        gckpt_seterr(err, "op %s: expert %llu's offsets [%lld, %lld) do not split the %llu rows", c->op->name,
                     (unsigned long long)e, (long long)a, (long long)b, (unsigned long long)S);
        return false;
    }
    *lo = (uint64_t)a;
    *hi = (uint64_t)b;
    return true;
}

/* y[group e] = x[group e] @ W_e^T, W_e = rows [e N, (e + 1) N) of the [E N, K] weight;
 * with op->sa (gpt_oss's [E, K, N] weight) x[group e] @ W_e, W_e = rows [e K, (e + 1) K) */
gckpt_xstatus host_grouped_linear_fwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    NEED(c, c->in[0], "input");
    NEED(c, c->in[1], "weight");
    NEED(c, c->in[2], "offsets");
    uint64_t K = op->in_f, N = op->out_f, S = shape_n(&c->in[0]) / K, E = shape_n(&c->in[2]);
    float *x = host_to_f32(&c->in[0], err), *w = x ? host_to_f32(&c->in[1], err) : NULL;
    float *y = w ? zeros(c, S * N, err) : NULL;
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    if (!y) goto out;
    for (uint64_t e = 0; e < E; e++) {
        uint64_t lo, hi;
        if (!group_of(c, e, S, &lo, &hi, err)) goto out;
        if (hi > lo)
            host_sgemm(CblasRowMajor, CblasNoTrans, op->sa ? CblasNoTrans : CblasTrans, (int)(hi - lo), (int)N, (int)K,
                       1.0f, x + lo * K, (int)K, w + e * N * K, op->sa ? (int)N : (int)K, 0.0f, y + lo * N, (int)N);
    }
    host_from_f32(&c->out[0], y);
    rc = GCKPT_XS_OK;
out:
    hs_free(x);
    hs_free(w);
    hs_free(y);
    return rc;
}

/* dx[group e] = dy[group e] @ W_e; dW_e = dy[group e]^T @ x[group e] (zero for an expert
 * that received no pair); with op->sa dx = dy @ W_e^T, dW_e = x^T @ dy */
gckpt_xstatus host_grouped_linear_bwd(const gckpt_xcall *c, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    NEED(c, c->in[2], "saved offsets");
    uint64_t K = op->in_f, N = op->out_f, S = c->gout.n / N, E = shape_n(&c->in[2]);
    float *g = host_to_f32(&c->gout, err), *w = NULL, *x = NULL, *dx = NULL, *dw = NULL;
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    if (!g) return rc;
    if (c->gin[0].p) {
        NEED(c, c->in[1], "weight");
        if (!(w = host_to_f32(&c->in[1], err)) || !(dx = zeros(c, S * K, err))) goto out;
    }
    if (c->gin[1].p) {
        NEED(c, c->in[0], "saved input");
        if (!(x = host_to_f32(&c->in[0], err)) || !(dw = zeros(c, E * N * K, err))) goto out;
    }
    for (uint64_t e = 0; e < E; e++) {
        uint64_t lo, hi;
        if (!group_of(c, e, S, &lo, &hi, err)) goto out;
        if (hi == lo) continue;
        int M = (int)(hi - lo);
        if (dx)
            host_sgemm(CblasRowMajor, CblasNoTrans, op->sa ? CblasTrans : CblasNoTrans, M, (int)K, (int)N, 1.0f,
                       g + lo * N, (int)N, w + e * N * K, op->sa ? (int)N : (int)K, 0.0f, dx + lo * K, (int)K);
        if (dw && op->sa)
            host_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)N, M, 1.0f, x + lo * K, (int)K, g + lo * N,
                       (int)N, 0.0f, dw + e * N * K, (int)N);
        else if (dw)
            host_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, M, 1.0f, g + lo * N, (int)N, x + lo * K,
                       (int)K, 0.0f, dw + e * N * K, (int)K);
    }
    if (dx) host_from_f32(&c->gin[0], dx);
    if (dw) host_from_f32(&c->gin[1], dw);
    rc = GCKPT_XS_OK;
out:
    hs_free(g);
    hs_free(w);
    hs_free(x);
    hs_free(dx);
    hs_free(dw);
    return rc;
}
