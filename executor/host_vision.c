/* Host kernels of a ViT tower's embedding and row selections (core/recipe_vision.c):
 * the patch Conv2d with stride = kernel as a GEMM over the patches, CLIP's class-token
 * cat, and rows of each image's positions. Values in fp32, rounded once to the output's
 * dtype, sums in index order (host_ops.c's rules). */
#include <math.h>
#include <string.h>

#include "host_blas.h"
#include "host_num.h"
#include "host_ops.h"
#include "host_scratch.h"

/* ---- patch conv --------------------------------------------------------------------------
 * in0 pixels [b, C, H, W] (H = W = n p), in1 weight [D, C, p, p], in2 bias [D] or none;
 * in_f = C p p, out_f = D, sa = p (the tracer's). The output is [b, N, D] with N = n n
 * patches in row-major order: the rows that flatten(2).transpose(1, 2) of Conv2d's
 * [b, D, n, n] views, laid out as the view reads them (every consumer reads patch rows). */

typedef struct {
    uint64_t b, C, p, n, N, K, D; /* images, channels, patch, patches per side, per image, C p p, D */
} conv_geom;

static bool geometry(const gckpt_xcall *c, uint64_t pixels, conv_geom *g, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    g->b = c->b;
    g->p = op->sa > 0 ? (uint64_t)op->sa : 0;
    g->K = op->in_f;
    g->D = op->out_f;
    g->C = g->p ? g->K / (g->p * g->p) : 0;
    uint64_t per = g->b ? pixels / g->b : 0, side = g->C ? (uint64_t)llround(sqrt((double)(per / g->C))) : 0;
    g->n = g->p ? side / g->p : 0;
    g->N = g->n * g->n;
    if (!g->p || !g->C || g->C * g->p * g->p != g->K || !g->n || g->n * g->p != side ||
        g->b * g->C * side * side != pixels) {
        gckpt_seterr(err, "op %s: %llu pixels are not %llu square images of %llu channels in %llu-pixel patches",
                     op->name, (unsigned long long)pixels, (unsigned long long)g->b, (unsigned long long)g->C,
                     (unsigned long long)g->p);
        return false;
    }
    return true;
}

/* element (row r = image * N + patch, column k = (c, ky, kx)) of the patch matrix: the
 * pixel's index in [b, C, H, W] */
static uint64_t pixel_at(const conv_geom *g, uint64_t r, uint64_t k)
{
    uint64_t img = r / g->N, patch = r % g->N, py = patch / g->n, px = patch % g->n;
    uint64_t ch = k / (g->p * g->p), ky = k / g->p % g->p, kx = k % g->p, side = g->n * g->p;
    return ((img * g->C + ch) * side + py * g->p + ky) * side + px * g->p + kx;
}

/* the patch matrix [b N, K] of the pixels (im2col without overlap) */
static float *patches(const gckpt_xt *x, const conv_geom *g)
{
    uint64_t M = g->b * g->N;
    float *m = hs_malloc(sizeof *m * (M * g->K + 1));
    if (!m) return NULL;
    for (uint64_t r = 0; r < M; r++)
        for (uint64_t k = 0; k < g->K; k++) m[r * g->K + k] = ld(x, pixel_at(g, r, k));
    return m;
}

static gckpt_xstatus patch_conv(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    conv_geom g;
    if (!geometry(c, c->in[0].n, &g, err)) return GCKPT_XS_ERROR;
    uint64_t M = g.b * g.N, K = g.K, D = g.D;
    float *x = NULL, *w = NULL, *go = NULL, *r = NULL;
    gckpt_xstatus rc = GCKPT_XS_ERROR;
    bool want_x = !bwd || c->gin[1].p, want_w = !bwd || c->gin[0].p;
    if (want_x) NEED(c, c->in[0], bwd ? "saved input" : "input");
    if (want_w) NEED(c, c->in[1], bwd ? "saved weight" : "weight");
    if (!bwd && op->nin > 2) NEED(c, c->in[2], "bias");
    if ((want_x && !(x = patches(&c->in[0], &g))) || (want_w && !(w = host_to_f32(&c->in[1], err)))) goto oom;
    if (!bwd) {
        if (!(r = hs_malloc(sizeof *r * (M * D + 1)))) goto oom;
        host_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)D, (int)K, 1.0f, x, (int)K, w, (int)K, 0.0f, r,
                   (int)D);
        if (op->nin > 2)
            for (uint64_t i = 0; i < M; i++)
                for (uint64_t j = 0; j < D; j++) r[i * D + j] += ld(&c->in[2], j);
        host_from_f32(&c->out[0], r);
        rc = GCKPT_XS_OK;
        goto out;
    }
    if (!(go = host_to_f32(&c->gout, err))) goto out;
    if (c->gin[0].p) { /* dX: each patch's row of dP = dY W scattered back to its pixels */
        if (!(r = hs_malloc(sizeof *r * (M * K + 1)))) goto oom;
        host_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)D, 1.0f, go, (int)D, w, (int)K, 0.0f,
                   r, (int)K);
        for (uint64_t i = 0; i < M; i++)
            for (uint64_t k = 0; k < K; k++) st(&c->gin[0], pixel_at(&g, i, k), r[i * K + k]);
        hs_free(r);
        r = NULL;
    }
    if (c->gin[1].p) { /* dW = dY^T P */
        if (!(r = hs_malloc(sizeof *r * (D * K + 1)))) goto oom;
        host_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)D, (int)K, (int)M, 1.0f, go, (int)D, x, (int)K, 0.0f, r,
                   (int)K);
        host_from_f32(&c->gin[1], r);
        hs_free(r);
        r = NULL;
    }
    if (op->nin > 2 && c->gin[2].p) { /* db: the column sums of dY */
        if (!(r = hs_calloc(D + 1, sizeof *r))) goto oom;
        for (uint64_t i = 0; i < M; i++)
            for (uint64_t j = 0; j < D; j++) r[j] += go[i * D + j];
        host_from_f32(&c->gin[2], r);
    }
    rc = GCKPT_XS_OK;
    goto out;
oom:
    gckpt_seterr(err, "op %s: out of host memory for kernel scratch", op->name);
out:
    hs_free(x);
    hs_free(w);
    hs_free(go);
    hs_free(r);
    return rc;
}
HOST_KERNEL_BOTH(patch_conv, patch_conv)

/* ---- class token ------------------------------------------------------------------------
 * cat([in0 [width] expanded to [b, 1, width], in1 [b, N, width]], dim 1): [b, N + 1, width].
 * Backward: in0's gradient the sum over the images of row 0 (expand's), in1's the rest. */
static gckpt_xstatus cat_cls(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    uint64_t w = op->width, b = c->b, rows = w && b ? (bwd ? c->gout.n : c->out[0].n) / (b * w) : 0;
    if (!rows || b * rows * w != (bwd ? c->gout.n : c->out[0].n)) {
        gckpt_seterr(err, "op %s: the output is not %llu images of rows of %llu", op->name, (unsigned long long)b,
                     (unsigned long long)w);
        return GCKPT_XS_ERROR;
    }
    if (!bwd) {
        NEED(c, c->in[0], "class embedding");
        NEED(c, c->in[1], "patches");
        for (uint64_t i = 0; i < b; i++)
            for (uint64_t r = 0; r < rows; r++)
                for (uint64_t j = 0; j < w; j++)
                    st(&c->out[0], (i * rows + r) * w + j,
                       r ? ld(&c->in[1], (i * (rows - 1) + r - 1) * w + j) : ld(&c->in[0], j));
        return GCKPT_XS_OK;
    }
    if (c->gin[0].p)
        for (uint64_t j = 0; j < w; j++) {
            float s = 0.0f;
            for (uint64_t i = 0; i < b; i++) s += ld(&c->gout, i * rows * w + j);
            st(&c->gin[0], j, s);
        }
    if (c->gin[1].p)
        for (uint64_t i = 0; i < b; i++)
            for (uint64_t r = 1; r < rows; r++)
                for (uint64_t j = 0; j < w; j++)
                    st(&c->gin[1], (i * (rows - 1) + r - 1) * w + j, ld(&c->gout, (i * rows + r) * w + j));
    return GCKPT_XS_OK;
}
HOST_KERNEL_BOTH(cat_cls, cat_cls)

/* ---- rows of each image -----------------------------------------------------------------
 * rows sa .. sa + n - 1 (n = sb, 0: to the end) of each image's s rows of width: x[:, 0] or
 * x[:, 1:] as a copy; the backward writes the output gradient into those rows and zeros
 * elsewhere (SliceBackward's). */
static gckpt_xstatus rows_of(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_op *op = c->op;
    const gckpt_xt *x = bwd ? &c->gin[0] : &c->in[0];
    uint64_t w = op->width, b = c->b, s = w && b ? x->n / (b * w) : 0, first = op->sa > 0 ? (uint64_t)op->sa : 0;
    uint64_t n = op->sb > 0 ? (uint64_t)op->sb : s > first ? s - first : 0;
    if (!n || first + n > s || b * s * w != x->n || (bwd ? c->gout.n : c->out[0].n) != b * n * w) {
        gckpt_seterr(err, "op %s: rows %llu.. of %llu-row images of width %llu do not fit the operands", op->name,
                     (unsigned long long)first, (unsigned long long)s, (unsigned long long)w);
        return GCKPT_XS_ERROR;
    }
    if (!bwd) {
        NEED(c, c->in[0], "input");
        for (uint64_t i = 0; i < b; i++)
            for (uint64_t r = 0; r < n * w; r++) st(&c->out[0], i * n * w + r, ld(x, (i * s + first) * w + r));
        return GCKPT_XS_OK;
    }
    if (!x->p) return GCKPT_XS_OK;
    for (uint64_t i = 0; i < b; i++)
        for (uint64_t r = 0; r < s * w; r++) {
            bool in = r >= first * w && r < (first + n) * w;
            st(x, i * s * w + r, in ? ld(&c->gout, i * n * w + r - first * w) : 0.0f);
        }
    return GCKPT_XS_OK;
}
HOST_KERNEL_BOTH(rows_of, rows_of)
