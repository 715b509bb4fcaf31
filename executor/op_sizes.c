/* The sizes an op makes (include/gckpt/executor/op_sizes.h). An input's size is its
 * tensor's shape (rows x cols: the buffer bound may be the storage a view reads); the
 * outputs' follow from the inputs and the op's attributes; an input's gradient has the
 * input's size. */
#include "gckpt/executor/op_sizes.h"

#include <stdio.h>

#include "gckpt/core/prim.h"
#include "gckpt/executor/kernel_math.h"

/* elements of the tensor an operand holds */
static uint64_t shape_n(const gckpt_xt *t) { return t->rows * t->cols; }

/* The elements of output k of op c->op's forward, from its inputs (the primitive's rule,
 * gckpt/core/prim.h); false when the inputs do not divide as the op needs. */
static bool output_size(const gckpt_xcall *c, int k, uint64_t *n)
{
    const gckpt_prim_info *info = gckpt_prim_of(c->op->prim);
    if (!info || !info->out_numel) return false;
    gckpt_prim_sizes z = {.op = c->op, .b = c->b, .s = c->s, .out_cols = c->out[0].cols};
    for (int i = 0; i < GCKPT_OP_MAX_IN; i++) z.in[i] = (gckpt_prim_dim){c->in[i].rows, c->in[i].cols, c->in[i].p != NULL};
    return info->out_numel(&z, k, n);
}

static gckpt_xstatus wrong(gckpt_err *err, const gckpt_xcall *c, const char *what, int k, uint64_t have, uint64_t want)
{
    gckpt_seterr(err, "op %s: %s %d holds %llu elements, its inputs make %llu", c->op->name, what, k,
                 (unsigned long long)have, (unsigned long long)want);
    return GCKPT_XS_ERROR;
}

gckpt_xstatus gckpt_op_check_forward(const gckpt_xcall *c, gckpt_err *err)
{
    for (int k = 0; k < 2; k++) {
        if (c->op->out[k] < 0 || !c->out[k].p) continue;
        uint64_t want;
        if (!output_size(c, k, &want)) {
            gckpt_seterr(err, "op %s: inputs of %llu and %llu elements do not fit the op", c->op->name,
                         (unsigned long long)shape_n(&c->in[0]), (unsigned long long)shape_n(&c->in[1]));
            return GCKPT_XS_ERROR;
        }
        if (c->out[k].n != want) return wrong(err, c, "output", k, c->out[k].n, want);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_op_check_source(gckpt_source what, const gckpt_xcall *c, gckpt_err *err)
{
    uint64_t T = c->b * c->s, want;
    switch (what) {
    case GCKPT_SRC_IDS: case GCKPT_SRC_LABELS: want = T; break;
    case GCKPT_SRC_POSITIONS: want = c->s; break;
    case GCKPT_SRC_ROTARY: want = c->s * gckpt_rotary_table_width(c->m); break; /* cos and sin */
    case GCKPT_SRC_MASK: /* [b, 1, s, s], or masking_utils' bool [s, s] under SDPA */
        want = c->out[0].dt == GCKPT_DT_BOOL ? c->s * c->s : T * c->s;
        break;
    case GCKPT_SRC_SCALE: want = 1; break;                      /* a 0-d tensor */
    case GCKPT_SRC_ROUTER_LOGITS: want = 0; break;              /* a view: the layers hold the logits */
    case GCKPT_SRC_PIXELS: /* [images, C, H, W]: the recipe's row per image */
        want = c->b * gckpt_tensor_width(c->r, c->op->out[0], c->s);
        break;
    default: gckpt_seterr(err, "op %s: unknown source", c->op->name); return GCKPT_XS_ERROR;
    }
    for (int k = 0; k < 2; k++)
        if (c->op->out[k] >= 0 && c->out[k].p && c->out[k].n != want) return wrong(err, c, "output", k, c->out[k].n, want);
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_op_check_backward(const gckpt_xcall *c, gckpt_err *err)
{
    uint64_t want;
    if (!output_size(c, 0, &want)) {
        gckpt_seterr(err, "op %s: inputs of %llu and %llu elements do not fit the op", c->op->name,
                     (unsigned long long)shape_n(&c->in[0]), (unsigned long long)shape_n(&c->in[1]));
        return GCKPT_XS_ERROR;
    }
    if (c->gout.p && c->gout.n != want) return wrong(err, c, "output gradient", 0, c->gout.n, want);
    for (int k = 0; k < c->op->nin; k++)
        if (c->gin[k].p && c->gin[k].n != shape_n(&c->in[k])) return wrong(err, c, "gradient of input", k, c->gin[k].n, shape_n(&c->in[k]));
    /* a typed workspace is an fp32 dq accumulator (SDPA's): one element per element of q's heads */
    if (c->ws.p && c->ws.dt == GCKPT_DT_F32 && gckpt_prim_of(c->op->prim)->bws_dq) {
        uint64_t dq = c->in[0].rows * c->op->heads * c->op->qk_dim;
        if (c->ws.n != dq) return wrong(err, c, "workspace", 0, c->ws.n, dq);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_op_check_optim(const gckpt_optcall *c, gckpt_err *err)
{
    uint64_t n = c->param.n, blocks = (n + GCKPT_OPT_8BIT_BLOCK - 1) / GCKPT_OPT_8BIT_BLOCK;
    const struct {
        const gckpt_xt *t;
        const char *what;
        uint64_t want;
    } bufs[] = {{&c->grad, "gradient", n},     {&c->s1, "first state", n},          {&c->s2, "second state", n},
                {&c->temp, "temporary", n},    {&c->s1_absmax, "first absmax", blocks}, {&c->s2_absmax, "second absmax", blocks}};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i].t->p && bufs[i].t->n != bufs[i].want) {
            gckpt_seterr(err, "optimizer: the %s holds %llu elements, the parameter makes %llu", bufs[i].what,
                         (unsigned long long)bufs[i].t->n, (unsigned long long)bufs[i].want);
            return GCKPT_XS_ERROR;
        }
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_op_check_add(gckpt_xt dst, gckpt_xt a, gckpt_xt b, gckpt_err *err)
{
    if (dst.n != b.n || (a.p && a.n != b.n)) {
        gckpt_seterr(err, "gradient add: sizes %llu, %llu, %llu differ", (unsigned long long)dst.n,
                     (unsigned long long)a.n, (unsigned long long)b.n);
        return GCKPT_XS_ERROR;
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_op_check_dequant(const gckpt_xquant *q, gckpt_xt w, gckpt_xt out, gckpt_err *err)
{
    const gckpt_quant_layout *l = q ? q->layout : NULL;
    uint64_t n = out.rows * out.cols;
    if (!l || !w.p || !out.p) {
        gckpt_seterr(err, "dequantize: %s", !l ? "no quantization layout" : "a missing buffer");
        return GCKPT_XS_ERROR;
    }
    for (int k = 0; k < GCKPT_NQS; k++)
        if (l->stat[k].numel && !q->stat[k]) {
            gckpt_seterr(err, "dequantize: no %s", gckpt_quant_stat_names[k]);
            return GCKPT_XS_ERROR;
        }
    bool shape_ok = out.n == n && w.n == l->weight.numel &&
                    (l->scheme == GCKPT_QUANT_INT8 ? l->weight.numel == n && l->stat[GCKPT_QS_SCB].numel == out.rows
                                                   : l->blocks == (n + GCKPT_QUANT_BLOCK - 1) / GCKPT_QUANT_BLOCK);
    if (!shape_ok) {
        gckpt_seterr(err, "dequantize: a weight of %llu stored elements into %llu x %llu (%llu elements)",
                     (unsigned long long)w.n, (unsigned long long)out.rows, (unsigned long long)out.cols,
                     (unsigned long long)out.n);
        return GCKPT_XS_ERROR;
    }
    return GCKPT_XS_OK;
}
