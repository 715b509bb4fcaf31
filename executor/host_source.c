/* SOURCE ops on the host: token ids, labels and positions from the interpreter's data,
 * HF's default rotary tables and the eager path's additive causal mask. */
#include <math.h>
#include <string.h>

#include "host_num.h"
#include "host_ops.h"

gckpt_xstatus host_source(gckpt_source what, const gckpt_xcall *c, const int64_t *host, gckpt_err *err)
{
    const gckpt_xt *o = &c->out[0];
    NEED(c, *o, "output");
    switch (what) {
    case GCKPT_SRC_IDS: case GCKPT_SRC_LABELS: case GCKPT_SRC_POSITIONS:
        if (o->dt != GCKPT_DT_I64) {
            gckpt_seterr(err, "op %s: ids must be int64", c->op->name);
            return GCKPT_XS_ERROR;
        }
        memcpy(o->p, host, o->n * sizeof(int64_t));
        return GCKPT_XS_OK;
    case GCKPT_SRC_ROTARY: {
        NEED(c, c->out[1], "sin output");
        uint64_t hd = c->m->head_dim, half = hd / 2;
        for (uint64_t pos = 0; pos < c->s; pos++)
            for (uint64_t k = 0; k < hd; k++) {
                /* inv_freq = 1 / theta^(2j / hd) in fp32; emb = cat(freqs, freqs) */
                uint64_t j = k % half;
                float inv = 1.0f / powf((float)c->m->rope_theta, (float)(2 * j) / (float)hd);
                float f = (float)pos * inv;
                st(o, pos * hd + k, cosf(f));
                st(&c->out[1], pos * hd + k, sinf(f));
            }
        return GCKPT_XS_OK;
    }
    case GCKPT_SRC_MASK: {
        float low = lowest_of(o->dt);
        uint64_t S = c->s;
        for (uint64_t i = 0; i < o->n; i++) {
            uint64_t r = (i / S) % S, col = i % S;
            st(o, i, col <= r ? 0.0f : low);
        }
        return GCKPT_XS_OK;
    }
    }
    gckpt_seterr(err, "op %s: unknown source", c->op->name);
    return GCKPT_XS_ERROR;
}
