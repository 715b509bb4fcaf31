/* The sizes an op makes (include/gckpt/executor/op_sizes.h). An input's size is its
 * tensor's shape (rows x cols: the buffer bound may be the storage a view reads); the
 * outputs' follow from the inputs and the op's attributes; an input's gradient has the
 * input's size. */
#include "gckpt/executor/op_sizes.h"

#include <stdio.h>

#include "gckpt/executor/kernel_math.h"

/* elements of the tensor an operand holds */
static uint64_t shape_n(const gckpt_xt *t) { return t->rows * t->cols; }

/* The elements of output k of op c->op's forward, from its inputs; false when the
 * inputs do not divide as the op needs. */
static bool output_size(const gckpt_xcall *c, int k, uint64_t *n)
{
    const gckpt_op *op = c->op;
    const gckpt_model *m = c->m;
    const gckpt_xt *x = &c->in[0];
    uint64_t qd = m->heads * m->head_dim;
    switch (op->prim) {
    case GCKPT_P_CAST: case GCKPT_P_AFFINE: case GCKPT_P_POW: case GCKPT_P_RSQRT: case GCKPT_P_TANH:
    case GCKPT_P_SILU: case GCKPT_P_GELU: case GCKPT_P_DROPOUT: case GCKPT_P_MUL: case GCKPT_P_ADD:
    case GCKPT_P_SOFTMAX: case GCKPT_P_TRANSPOSE: case GCKPT_P_LOG_SOFTMAX: case GCKPT_P_CLAMP: case GCKPT_P_SIGMOID:
        *n = shape_n(x); /* the output (and dropout's mask) is shaped like input 0 */
        return true;
    case GCKPT_P_SUB: /* shaped like x; y one value per row of x (the sink softmax's row max) or like x */
        *n = shape_n(x);
        return op->bcast == GCKPT_BC_ROW ? shape_n(&c->in[1]) * gckpt_bcast_width(op->bcast, op->width, x->cols) == *n
                                         : op->bcast != GCKPT_BC_NONE || shape_n(&c->in[1]) == *n;
    case GCKPT_P_NEG_HALF: *n = shape_n(x) / 2; return shape_n(x) % 2 == 0;
    case GCKPT_P_CAT_HALF: *n = shape_n(&c->in[1]); return shape_n(x) * 2 == *n;
    case GCKPT_P_CAT_PASS: *n = shape_n(&c->in[1]); return shape_n(x) <= *n; /* shaped like the input */
    case GCKPT_P_MEAN: *n = op->width ? shape_n(x) / op->width : 0; return op->width && shape_n(x) % op->width == 0;
    case GCKPT_P_LINEAR:
        *n = shape_n(x) / op->in_f * op->out_f;
        return op->in_f && shape_n(x) % op->in_f == 0 && shape_n(&c->in[1]) == op->in_f * op->out_f &&
               (op->nin < 3 || shape_n(&c->in[2]) == op->out_f);
    case GCKPT_P_LAYERNORM:
        *n = k == 0 ? shape_n(x) : 2 * (shape_n(x) / op->width); /* out[1]: mean and rstd per row */
        return op->width && shape_n(x) % op->width == 0;
    case GCKPT_P_SDPA: /* out[1]: logsumexp; an additive mask [b, 1, s, s] */
        *n = x->rows * (k == 0 ? qd : m->heads);
        return op->nin < 4 || shape_n(&c->in[3]) == x->rows * c->s;
    case GCKPT_P_REPEAT_KV: *n = x->rows * qd; return true;                          /* every head */
    case GCKPT_P_SPLIT: *n = x->rows * c->out[0].cols; return c->out[0].cols > 0;    /* the block's columns */
    case GCKPT_P_QK: *n = x->rows * m->heads * c->s; return true;                  /* [b, heads, s, s] */
    case GCKPT_P_PV: *n = x->rows * m->head_dim; return true;                      /* probabilities' rows */
    case GCKPT_P_EMBED: case GCKPT_P_GATHER_ROWS: /* rows of width of in0 picked by in1 */
        *n = shape_n(&c->in[1]) * op->width;
        return op->width && shape_n(x) % op->width == 0;
    case GCKPT_P_NLL: *n = 1; return op->width && shape_n(&c->in[1]) * op->width == shape_n(x); /* loss, total_weight */
    /* mixture of experts (recipe_moe.c) */
    case GCKPT_P_TOPK: /* values, indices: width of each row of the experts' probabilities */
        *n = shape_n(x) / m->experts * op->width;
        return op->width && op->width <= m->experts && shape_n(x) % m->experts == 0;
    case GCKPT_P_SUM: /* groups of width, or (sb: the load-balancing loss's sums) width column sums */
        *n = op->sb > 0 ? op->width : op->width ? shape_n(x) / op->width : 0;
        return op->width && shape_n(x) % op->width == 0;
    case GCKPT_P_DIV: case GCKPT_P_SORT: case GCKPT_P_FLOORDIV: case GCKPT_P_INVERT_PERM:
        *n = shape_n(x);
        return true;
    case GCKPT_P_HISTC: *n = op->width; return op->width > 0; /* one per expert */
    case GCKPT_P_GROUPED_LINEAR: /* [S, in_f] by [E x out_f, in_f] in E groups (in[2]: the offsets) */
        *n = op->in_f ? shape_n(x) / op->in_f * op->out_f : 0;
        return op->in_f && shape_n(x) % op->in_f == 0 && c->in[2].p && shape_n(&c->in[2]) == m->experts &&
               shape_n(&c->in[1]) == m->experts * op->in_f * op->out_f;
    /* gpt_oss (recipe_gpt_oss.c): rows of x's width W */
    case GCKPT_P_CAT_SINK: /* one sink per head, one more column */
        *n = x->cols ? shape_n(x) / x->cols * (x->cols + 1) : 0;
        return x->cols && c->s && shape_n(&c->in[1]) > 0 && x->rows % c->s == 0;
    case GCKPT_P_MAX_LAST: *n = x->cols ? shape_n(x) / x->cols : 0; return x->cols > 0; /* values, indices */
    case GCKPT_P_DROP_SINK: *n = x->cols ? shape_n(x) / x->cols * (x->cols - 1) : 0; return x->cols > 1;
    case GCKPT_P_CAT_HALVES: /* two halves of each head of width */
        *n = 2 * shape_n(x);
        return op->width && op->width % 2 == 0 && shape_n(&c->in[1]) == shape_n(x) && shape_n(x) % (op->width / 2) == 0;
    case GCKPT_P_BOOL_MASK: *n = c->b * c->s * c->s; return shape_n(x) == c->s * c->s; /* [s, s] -> [b, 1, s, s] */
    default: return false;
    }
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
    /* a typed workspace is SDPA's fp32 dq accumulator: one element per element of q's heads */
    if (c->ws.p && c->ws.dt == GCKPT_DT_F32 && c->op->prim == GCKPT_P_SDPA) {
        uint64_t dq = c->in[0].rows * c->m->heads * c->m->head_dim;
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
