/* Optimizer steps on the host: AdamW (torch.optim.AdamW semantics, decoupled weight
 * decay, bias correction), the foreach variant (same numbers, its sqrt(exp_avg_sq)
 * temporary really written), SGD with momentum, and the adamw-8bit approximation:
 * AdamW whose states are stored as 8-bit codes with one fp32 absmax per block of 256
 * (bitsandbytes' dynamic quantisation map is replaced by a linear / square-root code). */
#include <math.h>
#include <stdlib.h>

#include "gckpt/executor/kernel_math.h"
#include "host_num.h"
#include "host_ops.h"

static float adamw_elem(const gckpt_optcall *c, float *p, float g, float *m, float *v, float bc1, float bc2s)
{
    return gckpt_adamw_update(p, g, m, v, (float)c->lr, (float)c->beta1, (float)c->beta2, (float)c->eps,
                              (float)c->weight_decay, bc1, bc2s);
}

static gckpt_xstatus adamw(const gckpt_optcall *c, float bc1, float bc2s)
{
    for (uint64_t i = 0; i < c->param.n; i++) {
        float p = ld(&c->param, i), g = ld(&c->grad, i), m = ld(&c->s1, i), v = ld(&c->s2, i);
        float d = adamw_elem(c, &p, g, &m, &v, bc1, bc2s);
        /* the foreach implementation materialises sqrt(exp_avg_sq) / bc2 + eps */
        if (c->temp.p) st(&c->temp, i, d);
        st(&c->param, i, p);
        st(&c->s1, i, m);
        st(&c->s2, i, v);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus adamw_8bit(const gckpt_optcall *c, float bc1, float bc2s, gckpt_err *err)
{
    (void)err; /* sizes: gckpt_op_check_optim */
    uint64_t n = c->param.n, nb = (n + GCKPT_OPT_8BIT_BLOCK - 1) / GCKPT_OPT_8BIT_BLOCK;
    uint8_t *q1 = c->s1.p, *q2 = c->s2.p;
    float *a1 = c->s1_absmax.p, *a2 = c->s2_absmax.p;
    float m[GCKPT_OPT_8BIT_BLOCK], v[GCKPT_OPT_8BIT_BLOCK];
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t lo = b * GCKPT_OPT_8BIT_BLOCK, hi = lo + GCKPT_OPT_8BIT_BLOCK < n ? lo + GCKPT_OPT_8BIT_BLOCK : n;
        float mx1 = 0, mx2 = 0;
        for (uint64_t i = lo; i < hi; i++) {
            float p = ld(&c->param, i), g = ld(&c->grad, i);
            float *mm = &m[i - lo], *vv = &v[i - lo];
            *mm = gckpt_dq8_signed(q1[i], a1[b]);
            *vv = gckpt_dq8_sqrt(q2[i], a2[b]);
            adamw_elem(c, &p, g, mm, vv, bc1, bc2s);
            st(&c->param, i, p);
            mx1 = fmaxf(mx1, fabsf(*mm));
            mx2 = fmaxf(mx2, *vv);
        }
        a1[b] = mx1;
        a2[b] = mx2;
        for (uint64_t i = lo; i < hi; i++) {
            q1[i] = gckpt_q8_signed(m[i - lo], mx1);
            q2[i] = gckpt_q8_sqrt(v[i - lo], mx2);
        }
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus sgd(const gckpt_optcall *c)
{
    for (uint64_t i = 0; i < c->param.n; i++) {
        float buf = ld(&c->s1, i);
        float p = gckpt_sgd_update(ld(&c->param, i), ld(&c->grad, i), &buf, (float)c->lr, (float)c->momentum,
                                   (float)c->weight_decay);
        st(&c->s1, i, buf);
        st(&c->param, i, p);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus host_optim(const gckpt_optcall *c, gckpt_err *err)
{
    if (!c->param.p || !c->grad.p) {
        gckpt_seterr(err, "optimizer: parameter or gradient missing");
        return GCKPT_XS_ERROR;
    }
    float bc1, bc2s;
    gckpt_adam_corrections((float)c->beta1, (float)c->beta2, c->step, &bc1, &bc2s);
    switch (c->kind) {
    case GCKPT_SGD: return sgd(c);
    case GCKPT_ADAMW_8BIT:
        if (c->s1.dt == GCKPT_DT_F32) return adamw(c, bc1, bc2s); /* small tensors: fp32 states */
        return adamw_8bit(c, bc1, bc2s, err);
    default: return adamw(c, bc1, bc2s);
    }
}
