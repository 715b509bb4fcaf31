/* Optimizer states per parameter tensor (include/gckpt/core/optstate.h says the rule and where
 * it comes from: torch.optim, bitsandbytes' Optimizer2State, transformers' Trainer). */
#include "gckpt/core/optstate.h"

#include <stdio.h>
#include <string.h>

bool gckpt_param_is_embedding(const gckpt_recipe *r, int t) { return r->t[t].role == GCKPT_ROLE_EMBEDDING; }

void gckpt_opt_layout_of(gckpt_optimizer o, const gckpt_recipe *r, int t, gckpt_opt_layout *out)
{
    memset(out, 0, sizeof *out);
    uint64_t e = gckpt_param_numel(r, t);
    switch (o) {
    case GCKPT_ADAMW_FOREACH:
        out->temp_n = e; /* sqrt(exp_avg_sq) / bias correction + eps, a full copy */
        /* fall through */
    case GCKPT_ADAMW:
        out->n = 2;
        out->buf[0] = out->buf[1] = (gckpt_state_buf){e, GCKPT_ST_PARAM};
        break;
    case GCKPT_SGD:
        out->n = 1;
        out->buf[0] = (gckpt_state_buf){e, GCKPT_ST_PARAM};
        break;
    case GCKPT_ADAMW_8BIT:
        out->n = 2;
        if (gckpt_param_is_embedding(r, t)) {
            out->reason = GCKPT_OSR_EMBEDDING;
            out->buf[0] = out->buf[1] = (gckpt_state_buf){e, GCKPT_ST_F32};
        } else if (e < GCKPT_OPT_8BIT_MIN) {
            out->reason = GCKPT_OSR_SMALL;
            out->buf[0] = out->buf[1] = (gckpt_state_buf){e, GCKPT_ST_F32};
        } else {
            out->reason = GCKPT_OSR_8BIT;
            out->n = 4;
            uint64_t nb = (e + GCKPT_OPT_8BIT_BLOCK - 1) / GCKPT_OPT_8BIT_BLOCK;
            out->buf[0] = out->buf[1] = (gckpt_state_buf){e, GCKPT_ST_U8};
            out->buf[2] = out->buf[3] = (gckpt_state_buf){nb, GCKPT_ST_F32};
        }
        break;
    default: break;
    }
}

void gckpt_opt_fp32_note(gckpt_optimizer o, const gckpt_recipe *r, uint64_t layers, char *buf,
                         unsigned long n)
{
    buf[0] = 0;
    if (o != GCKPT_ADAMW_8BIT || n == 0) return;
    char emb[160] = "";
    uint64_t small = 0;
    for (int t = 0; t < r->nt; t++) {
        if (r->t[t].kind != GCKPT_T_PARAM) continue;
        gckpt_opt_layout l;
        gckpt_opt_layout_of(o, r, t, &l);
        if (l.reason == GCKPT_OSR_SMALL) small += r->t[t].section == GCKPT_SEC_BLOCK ? layers : 1;
        if (l.reason == GCKPT_OSR_EMBEDDING) {
            size_t k = strlen(emb);
            snprintf(emb + k, sizeof emb - k, "%s%s", k ? ", " : "", r->t[t].name);
        }
    }
    if (!emb[0] && !small) return;
    snprintf(buf, n, "32-bit optimizer states: %s%s%s", emb,
             emb[0] ? " (nn.Embedding: the Trainer registers it for 32-bit states)" : "",
             (emb[0] && small) ? ", " : "");
    if (small) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, "%llu tensors under %d elements (bitsandbytes min_8bit_size)",
                 (unsigned long long)small, GCKPT_OPT_8BIT_MIN);
    }
}
