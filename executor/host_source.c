/* SOURCE ops on the host: token ids, labels and positions from the interpreter's data,
 * HF's default (or gpt_oss's YaRN) rotary tables, the eager path's additive causal or sliding-window mask
 * (masking_utils' bool one under SDPA), Gemma's embedding normalizer and a vision tower's
 * seeded random pixels. */
#include <math.h>
#include <string.h>

#include "gckpt/executor/kernel_math.h"
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
        uint64_t hd = c->m->rotary_dim; /* HF's dim: int(head_dim * partial_rotary_factor) */
        uint64_t w = gckpt_rotary_table_width(c->m); /* gpt_oss: the first half only */
        gckpt_yarn y = gckpt_yarn_of(c->m, hd, c->rope_theta);
        for (uint64_t i = 0; i < c->s; i++) /* host: the positions (a CP rank's pieces), else 0 .. s - 1 */
            for (uint64_t k = 0; k < w; k++) {
                float f = gckpt_rope_angle_yarn(host ? (uint64_t)host[i] : i, k, hd, (float)c->rope_theta, y);
                st(o, i * w + k, cosf(f) * y.attn);
                st(&c->out[1], i * w + k, sinf(f) * y.attn);
            }
        return GCKPT_XS_OK;
    }
    case GCKPT_SRC_MASK: { /* additive (eager), or bool (SDPA's sliding mask): true where visible */
        float low = gckpt_dtype_lowest(o->dt);
        for (uint64_t i = 0; i < o->n; i++) {
            float v = gckpt_attn_mask(i, c->s, c->window, low);
            st(o, i, o->dt == GCKPT_DT_BOOL ? (float)(v == 0.0f) : v);
        }
        return GCKPT_XS_OK;
    }
    case GCKPT_SRC_SCALE: st(o, 0, gckpt_embed_normalizer(c->m->hidden)); return GCKPT_XS_OK;
    case GCKPT_SRC_ROUTER_LOGITS: return GCKPT_XS_OK; /* a view: the layers hold the logits (interp_aux.c) */
    case GCKPT_SRC_PIXELS: /* a vision tower's pixel_values: uniform in [-1, 1), drawn from the
                            * call's stream (seed, step, micro-step, op), fp32 or the batch's dtype */
        for (uint64_t i = 0; i < o->n; i++) st(o, i, gckpt_rng_uniform(c->rng, i, 1.0f));
        return GCKPT_XS_OK;
    case GCKPT_SRC_FEATURES: break; /* mllama's cross_attention_states: its recipe is not executed */
    }
    gckpt_seterr(err, "op %s: unknown source", c->op->name);
    return GCKPT_XS_ERROR;
}
