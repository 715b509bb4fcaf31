/* Optimizer steps on the host: AdamW (torch.optim.AdamW semantics, decoupled weight
 * decay, bias correction), the foreach variant (same numbers, its sqrt(exp_avg_sq)
 * temporary really written), SGD with momentum, and the adamw-8bit approximation:
 * AdamW whose states are stored as 8-bit codes with one fp32 absmax per block of 256
 * (bitsandbytes' dynamic quantisation map is replaced by a linear / square-root code). */
#include <math.h>
#include <stdlib.h>

#include "host_num.h"
#include "host_ops.h"

static void adamw_elem(const gckpt_optcall *c, float *p, float g, float *m, float *v, float bc1, float bc2s,
                       float *denom_out)
{
    float lr = (float)c->lr, b1 = (float)c->beta1, b2 = (float)c->beta2;
    *p -= lr * (float)c->weight_decay * *p;
    *m = b1 * *m + (1.0f - b1) * g;
    *v = b2 * *v + (1.0f - b2) * g * g;
    float denom = sqrtf(*v) / bc2s + (float)c->eps;
    if (denom_out) *denom_out = denom;
    *p -= lr / bc1 * *m / denom;
}

static gckpt_xstatus adamw(const gckpt_optcall *c, float bc1, float bc2s)
{
    for (uint64_t i = 0; i < c->param.n; i++) {
        float p = ld(&c->param, i), g = ld(&c->grad, i), m = ld(&c->s1, i), v = ld(&c->s2, i), d;
        adamw_elem(c, &p, g, &m, &v, bc1, bc2s, c->temp.p ? &d : NULL);
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
    uint64_t n = c->param.n, nb = (n + GCKPT_Q_BLOCK - 1) / GCKPT_Q_BLOCK;
    if (c->s1_absmax.n < nb || c->s2_absmax.n < nb) {
        gckpt_seterr(err, "adamw-8bit: %llu blocks need as many scales", (unsigned long long)nb);
        return GCKPT_XS_ERROR;
    }
    uint8_t *q1 = c->s1.p, *q2 = c->s2.p;
    float *a1 = c->s1_absmax.p, *a2 = c->s2_absmax.p;
    float m[GCKPT_Q_BLOCK], v[GCKPT_Q_BLOCK];
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t lo = b * GCKPT_Q_BLOCK, hi = lo + GCKPT_Q_BLOCK < n ? lo + GCKPT_Q_BLOCK : n;
        float mx1 = 0, mx2 = 0;
        for (uint64_t i = lo; i < hi; i++) {
            float p = ld(&c->param, i), g = ld(&c->grad, i);
            float *mm = &m[i - lo], *vv = &v[i - lo];
            *mm = gckpt_dq8_signed(q1[i], a1[b]);
            *vv = gckpt_dq8_sqrt(q2[i], a2[b]);
            adamw_elem(c, &p, g, mm, vv, bc1, bc2s, NULL);
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
        float p = ld(&c->param, i), g = ld(&c->grad, i) + (float)c->weight_decay * p;
        float buf = (float)c->momentum * ld(&c->s1, i) + g;
        st(&c->s1, i, buf);
        st(&c->param, i, p - (float)c->lr * buf);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus host_optim(const gckpt_optcall *c, gckpt_err *err)
{
    if (!c->param.p || !c->grad.p || c->grad.n != c->param.n) {
        gckpt_seterr(err, "optimizer: parameter or gradient missing");
        return GCKPT_XS_ERROR;
    }
    float bc1 = 1.0f - powf((float)c->beta1, (float)c->step);
    float bc2s = sqrtf(1.0f - powf((float)c->beta2, (float)c->step));
    switch (c->kind) {
    case GCKPT_SGD: return sgd(c);
    case GCKPT_ADAMW_8BIT:
        if (c->s1.dt == GCKPT_DT_F32) return adamw(c, bc1, bc2s); /* small tensors: fp32 states */
        return adamw_8bit(c, bc1, bc2s, err);
    default: return adamw(c, bc1, bc2s);
    }
}
