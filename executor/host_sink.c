/* Host kernels of gpt_oss's primitives around its attention (recipe_gpt_oss.c): the sink
 * column cat and drop of the eager sink softmax, its row max with indices, and the
 * half-split rotary's cat of two halves per head. Dense operands read through host_num.h's
 * ld / st (a strided view reads in place); values computed in fp32, one rounding to the
 * output dtype, sums in index order. */
#include "host_num.h"
#include "host_ops.h"

/* cat(scores [rows, W], sinks[head of the row]) -> [rows, W + 1]; the head of row r is
 * (r / s) % heads ([b, heads, s, W] scores). Backward: the scores' gradient is the first W
 * columns of the output's, each sink's the sum of its head's last column. */
static gckpt_xstatus cat_sink(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0], *snk = &c->in[1];
    uint64_t W = x->cols, heads = snk->rows * snk->cols, rows = W ? x->rows * x->cols / W : 0;
    if (!bwd) {
        NEED(c, *x, "input 0");
        NEED(c, *snk, "input 1");
        for (uint64_t r = 0; r < rows; r++) {
            for (uint64_t j = 0; j < W; j++) st(&c->out[0], r * (W + 1) + j, ld(x, r * W + j));
            st(&c->out[0], r * (W + 1) + W, ld(snk, (r / c->s) % heads));
        }
        return GCKPT_XS_OK;
    }
    const gckpt_xt *g = &c->gout;
    if (c->gin[0].p)
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t j = 0; j < W; j++) st(&c->gin[0], r * W + j, ld(g, r * (W + 1) + j));
    if (c->gin[1].p)
        for (uint64_t h = 0; h < heads; h++) {
            float acc = 0.0f;
            for (uint64_t r = 0; r < rows; r++)
                if ((r / c->s) % heads == h) acc += ld(g, r * (W + 1) + W);
            st(&c->gin[1], h, acc);
        }
    return GCKPT_XS_OK;
}

/* max over the last dim: values and int64 indices (the first of equal maxima); backward:
 * each row's gradient to the element its index names, zeros elsewhere */
static gckpt_xstatus max_last(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0];
    uint64_t W = x->cols, rows = W ? x->rows * x->cols / W : 0;
    if (!bwd) {
        NEED(c, *x, "input 0");
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t best = 0;
            float v = ld(x, r * W);
            for (uint64_t j = 1; j < W; j++)
                if (ld(x, r * W + j) > v) v = ld(x, r * W + (best = j));
            st(&c->out[0], r, v);
            if (c->out[1].p) sti(&c->out[1], r, (int64_t)best);
        }
        return GCKPT_XS_OK;
    }
    if (!c->gin[0].p) return GCKPT_XS_OK;
    NEED(c, c->out[1], "saved indices");
    for (uint64_t r = 0; r < rows; r++) {
        int64_t at = ldi(&c->out[1], r);
        for (uint64_t j = 0; j < W; j++) st(&c->gin[0], r * W + j, (int64_t)j == at ? ld(&c->gout, r) : 0.0f);
    }
    return GCKPT_XS_OK;
}

/* probs[..., :-1]: the first W - 1 columns of [rows, W]; backward: the gradient with a
 * zero sink column */
static gckpt_xstatus drop_sink(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    const gckpt_xt *x = &c->in[0];
    uint64_t W = x->cols, rows = W ? x->rows * x->cols / W : 0;
    if (!bwd) {
        NEED(c, *x, "input 0");
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t j = 0; j + 1 < W; j++) st(&c->out[0], r * (W - 1) + j, ld(x, r * W + j));
        return GCKPT_XS_OK;
    }
    if (!c->gin[0].p) return GCKPT_XS_OK;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t j = 0; j < W; j++)
            st(&c->gin[0], r * W + j, j + 1 < W ? ld(&c->gout, r * (W - 1) + j) : 0.0f);
    return GCKPT_XS_OK;
}

/* per head of width `width`: cat(in0's half, in1's half) (each input half as wide); sa 1:
 * their columns interleaved (GLM's repeat_interleave'd rotary tables); backward: each
 * input's gradient is its part of every head of the output's */
static gckpt_xstatus cat_halves(const gckpt_xcall *c, bool bwd, gckpt_err *err)
{
    uint64_t w = c->op->width, h = w / 2, n = c->in[0].rows * c->in[0].cols;
    for (int k = 0; k < 2; k++) {
        const gckpt_xt *part = bwd ? &c->gin[k] : &c->in[k];
        if (!bwd) NEED(c, *part, k ? "input 1" : "input 0");
        if (!part->p) continue;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t o = c->op->sa == 1 ? (i / h) * w + 2 * (i % h) + (uint64_t)k /* pair i % h, its k */
                                        : (i / h) * w + (uint64_t)k * h + i % h; /* head i / h, its half k */
            if (bwd) st(part, i, ld(&c->gout, o));
            else st(&c->out[0], o, ld(part, i));
        }
    }
    return GCKPT_XS_OK;
}

HOST_KERNEL_BOTH(cat_sink, cat_sink)
HOST_KERNEL_BOTH(max_last, max_last)
HOST_KERNEL_BOTH(drop_sink, drop_sink)
HOST_KERNEL_BOTH(cat_halves, cat_halves)
