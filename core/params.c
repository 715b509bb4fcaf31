/* The parameter state table (include/gckpt/core/params.h says the rules and where they
 * come from: torch.optim, bitsandbytes' Optimizer2State, transformers' Trainer). */
#include "gckpt/core/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool gckpt_param_is_embedding(const gckpt_recipe *r, int t) { return r->t[t].role == GCKPT_ROLE_EMBEDDING; }

static gckpt_buffer buffer(uint8_t dtype, uint64_t numel, uint64_t round)
{
    uint64_t bytes = 0;
    (void)gckpt_dtype_storage((gckpt_dtype)dtype, numel, &bytes); /* below 2^50 bytes: no overflow */
    return (gckpt_buffer){dtype, numel, gckpt_round_up(bytes, round)};
}

/* The optimizer's states and step temporary of one trainable parameter. */
static void optimizer_states(gckpt_optimizer o, const gckpt_recipe *r, gckpt_param *p, uint64_t round)
{
    uint64_t e = p->numel;
    uint8_t pdt = p->weight.dtype;
    p->nstates = 0;
    p->state_reason = GCKPT_OSR_NONE;
    switch (o) {
    case GCKPT_ADAMW_FOREACH:
        p->opt_temp = buffer(pdt, e, round); /* sqrt(exp_avg_sq) / bias correction + eps, a full copy */
        /* fall through */
    case GCKPT_ADAMW:
        p->nstates = 2;
        p->state[0] = p->state[1] = buffer(pdt, e, round);
        break;
    case GCKPT_SGD:
        p->nstates = 1;
        p->state[0] = buffer(pdt, e, round);
        break;
    case GCKPT_PAGED_ADAMW_32BIT:
        p->nstates = 2;
        p->state[0] = p->state[1] = buffer(GCKPT_DT_F32, e, round);
        p->paged = e >= GCKPT_OPT_PAGED_MIN;
        break;
    case GCKPT_PAGED_ADAMW_8BIT:
        p->paged = e >= GCKPT_OPT_PAGED_MIN;
        /* fall through */
    case GCKPT_ADAMW_8BIT:
        p->nstates = 2;
        if (gckpt_param_is_embedding(r, p->tensor) || e < GCKPT_OPT_8BIT_MIN) {
            p->state_reason = gckpt_param_is_embedding(r, p->tensor) ? GCKPT_OSR_EMBEDDING : GCKPT_OSR_SMALL;
            p->state[0] = p->state[1] = buffer(GCKPT_DT_F32, e, round);
        } else {
            p->state_reason = GCKPT_OSR_8BIT;
            p->nstates = 4;
            uint64_t nb = (e + GCKPT_OPT_8BIT_BLOCK - 1) / GCKPT_OPT_8BIT_BLOCK;
            p->state[0] = p->state[1] = buffer(GCKPT_DT_U8, e, round);
            p->state[2] = p->state[3] = buffer(GCKPT_DT_F32, nb, round);
        }
        break;
    default: break;
    }
}

/* Passes the optimizer step makes over each buffer of a trainable parameter (one pass: its
 * bytes read or written once; tools/hf_probe/opt_traffic.py counts them op by op, FINDINGS
 * R-OPT-8). adamw (fused kernel): p, g, m, v read, p, m, v written. adamw-foreach (weight
 * decay 0, the Trainer's default): lerp_ m,g->m; mul_ v; addcmul_ v,g->v; sqrt v->t; div_ t;
 * add_ t; addcdiv_ p,m,t->p. sgd and bitsandbytes' kernels: one fused pass (unverified). */
static const struct {
    uint8_t param, grad, state[GCKPT_MAX_STATES], temp;
} opt_passes[GCKPT_NOPT] = {
    [GCKPT_ADAMW] = {2, 1, {2, 2, 0, 0}, 0},
    [GCKPT_ADAMW_FOREACH] = {2, 2, {3, 5, 0, 0}, 6},
    [GCKPT_SGD] = {2, 1, {2, 0, 0, 0}, 0},
    [GCKPT_ADAMW_8BIT] = {2, 1, {2, 2, 2, 2}, 0},
    [GCKPT_PAGED_ADAMW_8BIT] = {2, 1, {2, 2, 2, 2}, 0},
    [GCKPT_PAGED_ADAMW_32BIT] = {2, 1, {2, 2, 0, 0}, 0},
};
/* Passes over the gradients before the step: the Trainer's clip_grad_norm_ (max_grad_norm
 * 1.0: _foreach_norm reads them, _foreach_mul_ scales them in place, unconditionally), and
 * under fp16 autocast GradScaler.unscale_ (_amp_foreach_non_finite_check_and_unscale_). */
#define GCKPT_CLIP_GRAD_PASSES 3
#define GCKPT_UNSCALE_GRAD_PASSES 2

/* Bytes one optimizer step moves for trainable parameter p (a frozen one: none). */
static double opt_bytes(gckpt_optimizer o, const gckpt_recipe *r, const gckpt_param *p)
{
    if (!p->trainable) return 0;
    bool fp16_amp = r->amp && r->compute_dtype == GCKPT_DT_F16;
    double g = (double)p->grad.bytes;
    double b = opt_passes[o].param * (double)p->weight.bytes + opt_passes[o].temp * (double)p->opt_temp.bytes +
               (opt_passes[o].grad + GCKPT_CLIP_GRAD_PASSES + (fp16_amp ? GCKPT_UNSCALE_GRAD_PASSES : 0)) * g;
    for (int k = 0; k < p->nstates; k++) b += opt_passes[o].state[k] * (double)p->state[k].bytes;
    return b;
}

/* A quantized weight's storage and statistics as bitsandbytes keeps them (the recipe's
 * scheme; gckpt_quant_layout_of), each piece its own allocation. */
static bool quantized(const gckpt_recipe *r, gckpt_param *p, uint64_t round, gckpt_err *err)
{
    gckpt_quant_layout *l = &p->quant.layout;
    gckpt_quant_scheme sc = p->weight.dtype == GCKPT_DT_I8 ? GCKPT_QUANT_INT8 : (gckpt_quant_scheme)r->quant;
    if (gckpt_quant_layout_of(sc, p->rows, p->cols, r->double_quant, (gckpt_dtype)r->quant_storage, l)) {
        gckpt_seterr(err, "%s [%llu, %llu]: no %s storage in %s", p->name, (unsigned long long)p->rows,
                     (unsigned long long)p->cols, gckpt_quant_names[sc], gckpt_dtype_names[r->quant_storage]);
        return false;
    }
    p->quant.scheme = (uint8_t)sc;
    p->quant.block = l->block;
    p->weight = (gckpt_buffer){l->weight.dtype, l->weight.numel, gckpt_round_up(l->weight.bytes, round)};
    uint64_t alloc = 0;
    for (int k = 0; k < GCKPT_NQS; k++)
        if (l->stat[k].numel) alloc += gckpt_round_up(l->stat[k].bytes, round);
    p->quant.stats = (gckpt_buffer){GCKPT_DT_U8, l->stats_bytes, alloc};
    return true;
}

/* copies x bytes added to *sum; false on overflow */
static bool add_copies(uint64_t *sum, uint64_t copies, uint64_t bytes)
{
    uint64_t x;
    return gckpt_mul(copies, bytes, &x) && gckpt_add(*sum, x, sum);
}

bool gckpt_params_build(const gckpt_recipe *r, uint64_t layers, gckpt_optimizer o, uint64_t round,
                        gckpt_params *out, bool *overflow, gckpt_err *err)
{
    out->n = 0;
    out->weight_bytes = out->grad_bytes = out->state_bytes = out->temp_bytes = out->numel = 0;
    out->quant_bytes = out->stats_bytes = out->trainable = out->paged_bytes = 0;
    out->opt_traffic = 0;
    memset(out->of_tensor, -1, sizeof out->of_tensor);
    bool ok = true;
    for (int t = 0; t < r->nt; t++) {
        const gckpt_tensor *tt = &r->t[t];
        if (tt->kind != GCKPT_T_PARAM) continue;
        if (gckpt_sec_is_block(tt->section) && r->sec_params[tt->section] != tt->section) {
            /* a later block type of a group reuses the group's first section's (recipe.h) */
            gckpt_seterr(err, "the recipe's block types do not share parameter %s", tt->name);
            return false;
        }
        if (out->n == GCKPT_MAX_PARAMS) {
            gckpt_seterr(err, "the recipe has more than %d parameter tensors", GCKPT_MAX_PARAMS);
            return false;
        }
        gckpt_param *p = &out->p[out->n];
        memset(p, 0, sizeof *p);
        out->of_tensor[t] = (int8_t)out->n++;
        snprintf(p->name, sizeof p->name, "%s", tt->name);
        p->tensor = (int16_t)t;
        p->section = tt->section;
        p->role = tt->role;
        p->copies = !gckpt_sec_is_block(tt->section) ? 1 : r->sec_layers[tt->section] ? r->sec_layers[tt->section] : layers;
        p->rows = tt->shape.mult;
        p->cols = tt->shape.width;
        p->numel = gckpt_param_numel(r, t);
        p->trainable = tt->requires_grad;
        p->weight = buffer(tt->dtype, p->numel, round);
        if ((tt->dtype == GCKPT_DT_NF4 || tt->dtype == GCKPT_DT_I8) && !quantized(r, p, round, err)) return false;
        if (p->trainable) {
            p->grad = buffer(tt->dtype, p->numel, round); /* .grad has its parameter's dtype */
            optimizer_states(o, r, p, round);
        }
        p->shard.ways = 1;
        uint64_t states = 0, paged = p->paged ? p->state[0].bytes + p->state[1].bytes : 0;
        for (int k = 0; k < p->nstates; k++) states += p->state[k].bytes;
        ok = ok && add_copies(&out->weight_bytes, p->copies, p->weight.bytes) &&
             add_copies(&out->grad_bytes, p->copies, p->grad.bytes) && add_copies(&out->state_bytes, p->copies, states - paged) &&
             add_copies(&out->paged_bytes, p->copies, paged) &&
             add_copies(&out->temp_bytes, p->copies, p->opt_temp.bytes) && add_copies(&out->numel, p->copies, p->numel) &&
             add_copies(&out->stats_bytes, p->copies, p->quant.stats.bytes) &&
             add_copies(&out->quant_bytes, p->copies, p->quant.scheme ? p->weight.bytes : 0) &&
             add_copies(&out->trainable, p->copies, p->trainable ? p->numel : 0);
        out->opt_traffic += (double)p->copies * opt_bytes(o, r, p);
    }
    *overflow = !ok;
    return true;
}

uint64_t gckpt_param_count(const gckpt_model *m)
{
    gckpt_recipe *r = malloc(sizeof *r);
    gckpt_params *ps = malloc(sizeof *ps);
    uint64_t n = 0;
    bool overflow = false;
    gckpt_err err;
    if (r && ps) {
        gckpt_recipe_build(m, GCKPT_FP32, GCKPT_SDPA, r);
        if (gckpt_params_build(r, m->layers, GCKPT_SGD, 1, ps, &overflow, &err)) n = ps->numel;
    }
    free(r);
    free(ps);
    return n;
}

void gckpt_opt_fp32_note(const gckpt_params *ps, gckpt_optimizer o, char *buf, size_t n)
{
    if (n == 0) return;
    buf[0] = 0;
    if (o != GCKPT_ADAMW_8BIT && o != GCKPT_PAGED_ADAMW_8BIT) return;
    char emb[160] = "";
    uint64_t small = 0;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        if (p->state_reason == GCKPT_OSR_SMALL) small += p->copies;
        if (p->state_reason == GCKPT_OSR_EMBEDDING) {
            size_t k = strlen(emb);
            snprintf(emb + k, sizeof emb - k, "%s%s", k ? ", " : "", p->name);
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
