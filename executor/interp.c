/* The interpreter: performs a schedule's events on a backend. Memory events become
 * backend allocations keyed by instance id; compute events become the primitive's forward
 * or backward with operands resolved from the bindings (parameters by (layer, tensor),
 * saved tensors from the latest forward or recompute of the op in that layer); offload
 * copies go through one pinned host buffer per layer; the optimizer event updates every
 * parameter and the last free (zero_grad) releases every .grad. Every event is checked
 * against the interpreter's own state (no double allocation, no use after free, sizes
 * that hold their tensors), so a schedule that does not describe a real computation
 * fails loudly instead of being counted. */
#include "interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"ALLOC", "FREE", "RETAG", "HOST_ALLOC", "HOST_FREE", "D2H",
                                         "H2D",   "FWD",  "RECOMPUTE", "BWD", "OPT", "GRAD_ADD"};

/* "event 123 (BWD of self_attn.q_proj, layer 2)" */
static void where(const gckpt_exec *x, size_t i, const gckpt_event *e, char *buf, size_t n)
{
    const char *what = "";
    if (e->op >= 0) {
        bool compute = e->kind == GCKPT_EV_FWD || e->kind == GCKPT_EV_RECOMPUTE || e->kind == GCKPT_EV_BWD;
        if (compute && e->op < x->r->nop) what = x->r->op[e->op].name;
        else if (!compute && e->op < x->r->nt) what = x->r->t[e->op].name;
    }
    snprintf(buf, n, "event %zu (%s%s%s, layer %d)", i, e->kind < 12 ? kind_names[e->kind] : "?", *what ? " of " : "",
             what, e->layer);
}

static gckpt_xstatus fail(gckpt_exec *x, gckpt_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static gckpt_xstatus fail(gckpt_exec *x, gckpt_err *err, const char *fmt, ...)
{
    (void)x;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return GCKPT_XS_ERROR;
}

static gckpt_xstatus be_fail(gckpt_exec *x, gckpt_xstatus rc, const char *ctx, gckpt_err *err)
{
    gckpt_seterr(err, "%s: %s", ctx, x->be->err.msg);
    return rc;
}

/* A stop request (a signal handler's flag): checked between events and between the
 * persistent allocations only, so every event ran completely or not at all and the
 * instance table says exactly what is allocated (gckpt_exec_release_all frees it). */
static bool stop_requested(const gckpt_exec *x) { return x->o.stop && *x->o.stop; }

static gckpt_xstatus interrupted(gckpt_exec *x, size_t i, gckpt_err *err)
{
    char at[160];
    if (i < x->ev.n) where(x, i, &x->ev.ev[i], at, sizeof at);
    if (i < x->ev.n) gckpt_seterr(err, "interrupted before %s", at);
    else gckpt_seterr(err, "interrupted while setting up the weights and optimizer states");
    return GCKPT_XS_INTERRUPTED;
}

/* ---- parameters ---------------------------------------------------------------------------- */

static param_t *param_of(gckpt_exec *x, int tensor, int layer)
{
    if (tensor < 0 || tensor >= x->r->nt || x->pidx[tensor] < 0) return NULL;
    const gckpt_tensor *t = &x->r->t[tensor];
    if (t->section == GCKPT_SEC_BLOCK) {
        if (layer < 0 || (uint64_t)layer >= x->m.layers) return NULL;
        return &x->params[x->pidx[tensor] + layer];
    }
    return &x->params[x->pidx[tensor]];
}

static gckpt_xt pview(const param_t *p) { return (gckpt_xt){p->w, p->spec->numel, p->spec->weight.dtype, p->spec->cols}; }
static gckpt_xt state_view(const param_t *p, int k)
{
    const gckpt_buffer *b = &p->spec->state[k];
    return (gckpt_xt){p->st[k], b->numel, b->dtype, 0};
}

static gckpt_xt iview(const gckpt_exec *x, uint32_t id)
{
    const inst_t *in = &x->inst[id];
    return (gckpt_xt){in->live ? in->p : NULL, in->n, in->dt};
}

static bool live(const gckpt_exec *x, uint32_t id) { return id != GCKPT_NOINST && id < x->ninst && x->inst[id].live; }

static int lslot(const gckpt_exec *x, int32_t layer)
{
    if (layer < -1 || layer > (int32_t)x->m.layers) return -1;
    return layer + 1;
}

/* ---- construction ------------------------------------------------------------------------- */

/* How a parameter is initialised (its role in the recipe): norm weights 1, biases 0, the
 * rest uniform. */
static gckpt_init init_of(const gckpt_recipe *r, int t, float *val)
{
    switch (r->t[t].role) {
    case GCKPT_ROLE_NORM_WEIGHT: *val = 1.0f; return GCKPT_INIT_CONST;
    case GCKPT_ROLE_BIAS: *val = 0.0f; return GCKPT_INIT_CONST;
    default: *val = 0; return GCKPT_INIT_UNIFORM;
    }
}

static bool check_recipe(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_recipe *r = x->r;
    for (int i = 0; i < r->nop; i++) {
        const gckpt_op *op = &r->op[i];
        if (op->nin == 0) {
            if (op->prim != GCKPT_P_SOURCE || op->source > GCKPT_SRC_LABELS) {
                gckpt_seterr(err, "recipe op %s: an op without inputs that is not a known source", op->name);
                return false;
            }
        } else if (op->prim == GCKPT_P_SOURCE) {
            gckpt_seterr(err, "recipe op %s: has inputs but no primitive", op->name);
            return false;
        }
        if ((op->prim == GCKPT_P_NEG_HALF || op->prim == GCKPT_P_CAT_HALF) && (op->width == 0 || op->width % 2)) {
            gckpt_seterr(err, "recipe op %s: rotary head width %llu must be even", op->name, (unsigned long long)op->width);
            return false;
        }
        if ((op->prim == GCKPT_P_MEAN || op->prim == GCKPT_P_LAYERNORM || op->prim == GCKPT_P_EMBED ||
             op->prim == GCKPT_P_LOG_SOFTMAX || op->prim == GCKPT_P_NLL || op->prim == GCKPT_P_TRANSPOSE ||
             op->prim == GCKPT_P_REPEAT_KV) && op->width == 0) {
            gckpt_seterr(err, "recipe op %s: group width is 0", op->name);
            return false;
        }
    }
    for (int t = 0; t < r->nt; t++) {
        const gckpt_tensor *tt = &r->t[t];
        x->tdt[t] = (gckpt_dtype)tt->dtype;
        x->tnumel[t] = tt->kind == GCKPT_T_PARAM ? gckpt_param_numel(r, t) : x->ctx.numel[t];
        if (tt->kind == GCKPT_T_PARAM && tt->dtype != r->param_dtype) {
            gckpt_seterr(err, "recipe tensor %s: parameter dtype %u differs from the recipe's %u", tt->name, tt->dtype,
                         r->param_dtype);
            return false;
        }
    }
    return true;
}

static bool check_events(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_events *ev = &x->ev;
    size_t i = 0;
    uint32_t maxid = 0;
    for (int seg = 0; seg < 3; seg++) {
        x->seg[seg][0] = i;
        while (i < ev->n && ev->ev[i].micro == seg) {
            const gckpt_event *e = &ev->ev[i];
            if (e->kind > GCKPT_EV_GRAD_ADD) {
                gckpt_seterr(err, "schedule event %zu: unknown kind %u", i, e->kind);
                return false;
            }
            if (seg < 2 && (e->kind == GCKPT_EV_ALLOC) && e->inst != GCKPT_NOINST && e->inst + 1 > maxid)
                maxid = e->inst + 1;
            bool compute = e->kind == GCKPT_EV_FWD || e->kind == GCKPT_EV_RECOMPUTE || e->kind == GCKPT_EV_BWD;
            if (compute && (e->op < 0 || e->op >= x->r->nop || lslot(x, e->layer) < 0)) {
                gckpt_seterr(err, "schedule event %zu: op %d / layer %d out of range", i, e->op, e->layer);
                return false;
            }
            i++;
        }
        x->seg[seg][1] = i;
    }
    if (i != ev->n) {
        gckpt_seterr(err, "schedule event %zu: micro-step %u out of order", i, ev->ev[i].micro);
        return false;
    }
    if (x->seg[0][1] == x->seg[0][0] || x->seg[2][1] == x->seg[2][0]) {
        gckpt_seterr(err, "schedule: no first micro-step or no optimizer step");
        return false;
    }
    if ((x->set.grad_accum > 1) != (x->seg[1][1] > x->seg[1][0])) {
        gckpt_seterr(err, "schedule: the later micro-step is %s but grad_accum is %llu",
                     x->seg[1][1] > x->seg[1][0] ? "present" : "absent", (unsigned long long)x->set.grad_accum);
        return false;
    }
    x->ninst = maxid;
    x->inst = calloc(maxid ? maxid : 1, sizeof *x->inst);
    return x->inst != NULL || (gckpt_seterr(err, "out of memory for %u instances", maxid), false);
}

gckpt_exec *gckpt_exec_new(gckpt_backend *be, const gckpt_model *m, const gckpt_device *d, const gckpt_setting *s,
                           const gckpt_exec_opts *o, gckpt_err *err)
{
    if (s->offload && !s->every_n) {
        gckpt_seterr(err, "offload needs gradient checkpointing (every_n_layers > 0)");
        return NULL;
    }
    if (s->every_n > m->layers) {
        gckpt_seterr(err, "every_n_layers %u exceeds the model's %llu layers", s->every_n, (unsigned long long)m->layers);
        return NULL;
    }
    if (s->micro_batch < 1 || s->seq < 1 || s->grad_accum < 1) {
        gckpt_seterr(err, "micro_batch, seq and grad_accum must be at least 1");
        return NULL;
    }
    if (m->family == GCKPT_FAMILY_GPT2 && s->seq > m->positions) {
        gckpt_seterr(err, "seq %llu exceeds the model's %llu positions", (unsigned long long)s->seq,
                     (unsigned long long)m->positions);
        return NULL;
    }
    gckpt_exec *x = calloc(1, sizeof *x);
    if (!x) {
        gckpt_seterr(err, "out of memory");
        return NULL;
    }
    x->be = be;
    x->m = *m;
    x->dev = *d;
    x->set = *s;
    if (o) x->o = *o;
    if (x->o.lr <= 0) x->o.lr = 1e-4;
    if (x->o.init_std <= 0) x->o.init_std = 0.02;
    x->r = malloc(sizeof *x->r);
    if (!x->r) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    gckpt_recipe_build(&x->m, s->precision, s->attention, x->r);
    if (!gckpt_ctx_init(&x->ctx, &x->m, &x->dev, x->r, &x->set, err)) goto fail;
    if (!gckpt_schedule_build(&x->ctx, &x->ev)) {
        gckpt_seterr(err, "out of memory building the schedule");
        goto fail;
    }
    if (!check_recipe(x, err) || !check_events(x, err)) goto fail;
    size_t L = (size_t)m->layers;
    x->nslot = (int)L + 2;
    x->bind = calloc((size_t)x->nslot * (size_t)x->r->nop, sizeof *x->bind);
    x->bind_gen = calloc((size_t)x->nslot * (size_t)x->r->nop, sizeof *x->bind_gen);
    x->hb = calloc(L, sizeof *x->hb);
    uint64_t T = x->ctx.tokens;
    x->ids = malloc(sizeof *x->ids * T);
    x->labels = malloc(sizeof *x->labels * T);
    x->positions = malloc(sizeof *x->positions * s->seq);
    if (!x->bind || !x->bind_gen || !x->hb || !x->ids || !x->labels || !x->positions) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    /* one instance per parameter tensor and layer, as the parameter state table says */
    const gckpt_params *ps = &x->ctx.params;
    size_t np = 0;
    for (int t = 0; t < x->r->nt; t++) {
        const gckpt_param *spec = gckpt_params_of(ps, t);
        x->pidx[t] = spec ? (int)np : -1;
        np += spec ? spec->copies : 0;
    }
    x->params = calloc(np ? np : 1, sizeof *x->params);
    if (!x->params) {
        gckpt_seterr(err, "out of memory");
        goto fail;
    }
    x->nparams = np;
    for (int t = 0; t < x->r->nt; t++) {
        const gckpt_param *spec = gckpt_params_of(ps, t);
        for (uint64_t l = 0; spec && l < spec->copies; l++) {
            param_t *p = &x->params[x->pidx[t] + (int)l];
            p->spec = spec;
            p->tensor = t;
            p->layer = spec->section == GCKPT_SEC_BLOCK ? (int)l : -1;
            p->grad = GCKPT_NOINST;
        }
    }
    return x;
fail:
    gckpt_exec_free(x);
    return NULL;
}

const gckpt_ctx *gckpt_exec_ctx(const gckpt_exec *x) { return &x->ctx; }
const gckpt_events *gckpt_exec_events(const gckpt_exec *x) { return &x->ev; }

/* ---- persistent state -------------------------------------------------------------------- */

static gckpt_xstatus palloc(gckpt_exec *x, uint64_t bytes, void **out, gckpt_err *err)
{
    gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, bytes, out);
    if (rc != GCKPT_XS_OK) return be_fail(x, rc, "allocating the persistent state", err);
    return GCKPT_XS_OK;
}

/* The buffers of every parameter instance (parameter state table), and the offsets of
 * their slices of the optimizer's step temporary. */
static gckpt_xstatus alloc_params(gckpt_exec *x, gckpt_err *err)
{
    uint64_t temp_off = 0;
    gckpt_xstatus rc;
    for (size_t i = 0; i < x->nparams; i++) {
        if (stop_requested(x)) return interrupted(x, SIZE_MAX, err);
        param_t *p = &x->params[i];
        if ((rc = palloc(x, p->spec->weight.bytes, &p->w, err)) != GCKPT_XS_OK) return rc;
        for (int k = 0; k < p->spec->nstates; k++)
            if ((rc = palloc(x, p->spec->state[k].bytes, &p->st[k], err)) != GCKPT_XS_OK) return rc;
        p->temp_off = temp_off;
        temp_off += p->spec->opt_temp.bytes;
    }
    return GCKPT_XS_OK;
}

/* Initial values: weights from the seed by their role, states zero. */
static gckpt_xstatus init_params(gckpt_exec *x, gckpt_err *err)
{
    float a = (float)(x->o.init_std * sqrt(3.0));
    for (size_t i = 0; i < x->nparams; i++) {
        if (stop_requested(x)) return interrupted(x, SIZE_MAX, err);
        param_t *p = &x->params[i];
        float val;
        gckpt_init how = init_of(x->r, p->tensor, &val);
        uint64_t key = gckpt_key(x->o.seed, 0x5eedULL, (uint64_t)p->tensor, (uint64_t)(p->layer + 1));
        gckpt_xstatus rc = x->be->init(x->be, pview(p), how, how == GCKPT_INIT_CONST ? val : a, key);
        for (int k = 0; rc == GCKPT_XS_OK && k < p->spec->nstates; k++)
            rc = x->be->init(x->be, state_view(p, k), GCKPT_INIT_CONST, 0.0f, 0);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, "initialising the weights", err);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_exec_setup(gckpt_exec *x, gckpt_err *err)
{
    if (x->setup_done) return fail(x, err, "setup: already done");
    gckpt_xstatus rc = alloc_params(x, err);
    if (rc != GCKPT_XS_OK) return rc;
    if (x->ctx.workspace) {
        if ((rc = palloc(x, x->ctx.workspace, &x->workspace, err)) != GCKPT_XS_OK) return rc;
        x->workspace_bytes = x->ctx.workspace;
        rc = x->be->set_workspace(x->be, x->workspace, x->workspace_bytes);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, "setting the workspace", err);
    }
    x->setup_done = true;
    return init_params(x, err);
}

/* ---- events ------------------------------------------------------------------------------ */

static void make_data(gckpt_exec *x, uint64_t micro)
{
    uint64_t B = x->set.micro_batch, S = x->set.seq, V = x->m.vocab;
    uint64_t key = gckpt_key(x->o.seed, x->step, micro, 0xda7aULL);
    for (uint64_t i = 0; i < B * S; i++) x->ids[i] = (int64_t)(gckpt_rng(key, i) % V);
    for (uint64_t b = 0; b < B; b++)
        for (uint64_t i = 0; i < S; i++)
            x->labels[b * S + i] = i + 1 < S ? x->ids[b * S + i + 1] : -100; /* HF shift, ignore_index */
    for (uint64_t i = 0; i < S; i++) x->positions[i] = (int64_t)i;
}

static gckpt_xstatus ev_alloc(gckpt_exec *x, const gckpt_event *e, const char *at, gckpt_err *err)
{
    if (e->micro == 2) {
        if (e->comp != GCKPT_C_OPT_TEMP || x->opt_temp) return fail(x, err, "%s: unexpected optimizer allocation", at);
        if (e->bytes != x->ctx.opt_temp) return fail(x, err, "%s: optimizer temporary of %llu bytes, expected %llu", at,
                                                     (unsigned long long)e->bytes, (unsigned long long)x->ctx.opt_temp);
        gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, e->bytes, &x->opt_temp);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
        x->opt_temp_bytes = e->bytes;
        return GCKPT_XS_OK;
    }
    uint32_t id = e->inst;
    if (id >= x->ninst) return fail(x, err, "%s: instance %u out of range", at, id);
    inst_t *in = &x->inst[id];
    if (in->live) return fail(x, err, "%s: instance %u allocated twice", at, id);
    int t = e->op;
    uint8_t dt = GCKPT_DT_F32;
    uint64_t n = e->bytes / 4;
    if (t >= 0) {
        if (t >= x->r->nt) return fail(x, err, "%s: tensor %d out of range", at, t);
        dt = (uint8_t)x->tdt[t];
        n = x->tnumel[t];
    }
    if (n * gckpt_dtype_size((gckpt_dtype)dt) > e->bytes)
        return fail(x, err, "%s: %llu bytes cannot hold %llu %s elements", at, (unsigned long long)e->bytes,
                    (unsigned long long)n, gckpt_dtype_names[dt]);
    param_t *p = NULL;
    if (e->comp == GCKPT_C_GRADS) {
        p = param_of(x, t, e->layer);
        if (!p) return fail(x, err, "%s: a gradient allocation for something that is not a parameter", at);
        if (p->grad != GCKPT_NOINST) return fail(x, err, "%s: the parameter's .grad exists already", at);
    }
    gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, e->bytes, &in->p);
    if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
    in->live = true;
    in->bytes = e->bytes;
    in->tensor = (int16_t)t;
    in->dt = dt;
    in->n = n;
    in->is_pgrad = p != NULL;
    if (p) p->grad = id;
    return GCKPT_XS_OK;
}

static void inst_release(gckpt_exec *x, uint32_t id)
{
    inst_t *in = &x->inst[id];
    x->be->release(x->be, GCKPT_MEM_DEVICE, in->p, in->bytes);
    in->live = false;
    in->p = NULL;
}

static gckpt_xstatus zero_grad(gckpt_exec *x, const gckpt_event *e, const char *at, gckpt_err *err)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (p->grad == GCKPT_NOINST) continue;
        sum += x->inst[p->grad].bytes;
        inst_release(x, p->grad);
        p->grad = GCKPT_NOINST;
    }
    if (sum != e->bytes)
        return fail(x, err, "%s: zero_grad freed %llu bytes of .grad, the schedule says %llu", at,
                    (unsigned long long)sum, (unsigned long long)e->bytes);
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_free(gckpt_exec *x, const gckpt_event *e, const char *at, gckpt_err *err)
{
    if (e->micro == 2) {
        if (e->comp == GCKPT_C_GRADS) return zero_grad(x, e, at, err);
        if (e->comp != GCKPT_C_OPT_TEMP || !x->opt_temp) return fail(x, err, "%s: unexpected optimizer free", at);
        x->be->release(x->be, GCKPT_MEM_DEVICE, x->opt_temp, x->opt_temp_bytes);
        x->opt_temp = NULL;
        return GCKPT_XS_OK;
    }
    if (!live(x, e->inst)) return fail(x, err, "%s: instance %u freed but not allocated", at, e->inst);
    if (x->inst[e->inst].is_pgrad) return fail(x, err, "%s: a parameter's .grad freed before zero_grad", at);
    if (x->inst[e->inst].bytes != e->bytes)
        return fail(x, err, "%s: frees %llu bytes of a %llu-byte allocation", at, (unsigned long long)e->bytes,
                    (unsigned long long)x->inst[e->inst].bytes);
    inst_release(x, e->inst);
    return GCKPT_XS_OK;
}

/* A retag is bookkeeping, except that a summed gradient can become a parameter's .grad. */
static gckpt_xstatus ev_retag(gckpt_exec *x, const gckpt_event *e, const char *at, gckpt_err *err)
{
    if (!live(x, e->inst)) return fail(x, err, "%s: retags an instance that is not allocated", at);
    if (e->comp2 != GCKPT_C_GRADS) return GCKPT_XS_OK;
    param_t *p = param_of(x, e->op, e->layer);
    inst_t *in = &x->inst[e->inst];
    if (!p) return fail(x, err, "%s: a gradient retagged as the .grad of something that is not a parameter", at);
    if (p->grad != GCKPT_NOINST) return fail(x, err, "%s: the parameter's .grad exists already", at);
    if (in->tensor != e->op || in->n != p->spec->grad.numel || in->dt != p->spec->grad.dtype)
        return fail(x, err, "%s: instance %u does not hold this parameter's gradient", at, e->inst);
    in->is_pgrad = true;
    p->grad = e->inst;
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_host(gckpt_exec *x, const gckpt_event *e, const char *at, gckpt_err *err)
{
    if (e->layer < 0 || (uint64_t)e->layer >= x->m.layers) return fail(x, err, "%s: host buffer of no layer", at);
    hostbuf_t *h = &x->hb[e->layer];
    gckpt_xstatus rc;
    switch (e->kind) {
    case GCKPT_EV_HOST_ALLOC:
        if (h->p) return fail(x, err, "%s: the layer's host buffer exists already", at);
        rc = x->be->alloc(x->be, GCKPT_MEM_PINNED, e->bytes, &h->p);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
        h->bytes = e->bytes;
        h->wr = h->rd = 0;
        return GCKPT_XS_OK;
    case GCKPT_EV_HOST_FREE:
        if (!h->p || h->bytes != e->bytes) return fail(x, err, "%s: frees a host buffer that was not allocated", at);
        if (h->rd != h->wr) return fail(x, err, "%s: %llu of the %llu bytes copied out were not copied back", at,
                                        (unsigned long long)(h->wr - h->rd), (unsigned long long)h->wr);
        x->be->release(x->be, GCKPT_MEM_PINNED, h->p, h->bytes);
        h->p = NULL;
        return GCKPT_XS_OK;
    default: {
        bool d2h = e->kind == GCKPT_EV_D2H;
        if (!live(x, e->arg[0])) return fail(x, err, "%s: device instance %u is not allocated", at, e->arg[0]);
        const inst_t *in = &x->inst[e->arg[0]];
        /* the layer's buffer is filled in order (hidden states, then a positional mask)
         * and read back in the same order */
        uint64_t off = d2h ? h->wr : h->rd, lim = d2h ? h->bytes : h->wr;
        if (!h->p || e->bytes > in->bytes || off + e->bytes > lim)
            return fail(x, err, "%s: copy of %llu bytes at offset %llu does not fit its buffers", at,
                        (unsigned long long)e->bytes, (unsigned long long)off);
        char *hp = (char *)h->p + off;
        rc = d2h ? x->be->copy(x->be, hp, in->p, e->bytes, true) : x->be->copy(x->be, in->p, hp, e->bytes, false);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
        if (d2h) h->wr += e->bytes;
        else h->rd += e->bytes;
        return GCKPT_XS_OK;
    }
    }
}

static void call_init(gckpt_exec *x, gckpt_xcall *c, const gckpt_op *op, int slot, int opi, uint64_t micro)
{
    memset(c, 0, sizeof *c);
    c->r = x->r;
    c->op = op;
    c->m = &x->m;
    c->b = x->set.micro_batch;
    c->s = x->set.seq;
    c->rng = gckpt_key(x->o.seed ^ 0xd50f0cULL, x->step, micro, (uint64_t)slot * (uint64_t)x->r->nop + (uint64_t)opi);
}

/* Every operand's row width, from the recipe's shape of the tensor it holds. */
static void shape_call(const gckpt_exec *x, gckpt_xcall *c)
{
    const gckpt_op *op = c->op;
    for (int k = 0; k < op->nin; k++) c->in[k].cols = c->gin[k].cols = gckpt_tensor_width(x->r, op->in[k], x->set.seq);
    for (int k = 0; k < 2; k++)
        if (op->out[k] >= 0) c->out[k].cols = gckpt_tensor_width(x->r, op->out[k], x->set.seq);
    if (op->out[0] >= 0) c->gout.cols = c->out[0].cols;
}

/* the view of op input k: a parameter by (layer, tensor) or a bound instance */
static bool in_view(gckpt_exec *x, const gckpt_op *op, int k, int32_t layer, uint32_t id, bool required, gckpt_xt *out)
{
    int t = op->in[k];
    if (x->r->t[t].kind == GCKPT_T_PARAM) {
        param_t *p = param_of(x, t, layer);
        if (!p) return false;
        *out = pview(p);
        return true;
    }
    if (!live(x, id)) {
        *out = (gckpt_xt){NULL, x->tnumel[t], (uint8_t)x->tdt[t]};
        return !required;
    }
    *out = iview(x, id);
    return true;
}

static gckpt_xstatus ev_fwd(gckpt_exec *x, const gckpt_event *e, uint64_t micro, const char *at, gckpt_err *err)
{
    const gckpt_op *op = &x->r->op[e->op];
    int slot = lslot(x, e->layer);
    size_t b = (size_t)slot * (size_t)x->r->nop + (size_t)e->op;
    memcpy(x->bind[b], e->arg, sizeof x->bind[b]);
    x->bind_gen[b] = x->gen;
    gckpt_xcall c;
    call_init(x, &c, op, slot, e->op, micro);
    for (int k = 0; k < op->nin; k++)
        if (!in_view(x, op, k, e->layer, e->arg[k], true, &c.in[k]))
            return fail(x, err, "%s: input %d (%s, instance %u) is not allocated", at, k, x->r->t[op->in[k]].name, e->arg[k]);
    if (op->nin > 0 && op->out[0] >= 0 && e->arg[4] == e->arg[0]) {
        /* a view (an expand, or batch folding at micro-batch 1): the output is input 0's
         * storage; consumers read it with its own width */
        if (!live(x, e->arg[0])) return fail(x, err, "%s: the viewed input is not allocated", at);
        return GCKPT_XS_OK;
    }
    if (e->kind == GCKPT_EV_RECOMPUTE && op->out[0] >= 0 && e->arg[4] == GCKPT_NOINST) {
        /* a recompute that stops inside this op once it saved its inputs (they are saved
         * before it computes): the inputs are bound for its backward, nothing runs */
        for (int k = 0; k < op->nsaved; k++)
            if (op->saved[k] == op->out[0] || op->saved[k] == op->out[1])
                return fail(x, err, "%s: a recompute cannot stop before an op that saves its output", at);
        return GCKPT_XS_OK;
    }
    for (int k = 0; k < 2; k++) {
        if (op->out[k] < 0) continue;
        if (!live(x, e->arg[4 + k])) return fail(x, err, "%s: output %d is not allocated", at, k);
        c.out[k] = iview(x, e->arg[4 + k]);
    }
    shape_call(x, &c);
    gckpt_xstatus rc;
    if (op->nin == 0) {
        const int64_t *host = NULL;
        switch (op->source) {
        case GCKPT_SRC_IDS: host = x->ids; break;
        case GCKPT_SRC_LABELS: host = x->labels; break;
        case GCKPT_SRC_POSITIONS: host = x->positions; break;
        default: break;
        }
        if (host && c.out[0].n > (op->source == GCKPT_SRC_POSITIONS ? x->set.seq : x->ctx.tokens))
            return fail(x, err, "%s: source tensor larger than its data", at);
        rc = x->be->source(x->be, (gckpt_source)op->source, &c, host);
    } else {
        rc = x->be->forward(x->be, &c);
    }
    if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
    if (op->out[0] == x->r->loss && micro < GCKPT_MAX_RECORDS) {
        rc = x->be->record(x->be, c.out[0], (int)micro);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_bwd(gckpt_exec *x, const gckpt_event *e, uint64_t micro, const char *at, gckpt_err *err)
{
    const gckpt_op *op = &x->r->op[e->op];
    int slot = lslot(x, e->layer);
    size_t b = (size_t)slot * (size_t)x->r->nop + (size_t)e->op;
    if (x->bind_gen[b] != x->gen) return fail(x, err, "%s: backward of an op with no forward in this micro-step", at);
    const uint32_t *bd = x->bind[b];
    gckpt_xcall c;
    call_init(x, &c, op, slot, e->op, micro);
    for (int k = 0; k < op->nin; k++)
        if (!in_view(x, op, k, e->layer, bd[k], false, &c.in[k]))
            return fail(x, err, "%s: parameter %s has no storage", at, x->r->t[op->in[k]].name);
    for (int k = 0; k < 2; k++) {
        if (op->out[k] < 0) continue;
        int t = op->out[k];
        c.out[k] = live(x, bd[4 + k]) ? iview(x, bd[4 + k]) : (gckpt_xt){NULL, x->tnumel[t], (uint8_t)x->tdt[t]};
    }
    if (!live(x, e->arg[4])) return fail(x, err, "%s: the output gradient (instance %u) is not allocated", at, e->arg[4]);
    c.gout = iview(x, e->arg[4]);
    for (int k = 0; k < op->nin; k++) {
        uint32_t id = e->arg[k];
        if (id == GCKPT_NOINST || id == e->arg[4]) continue; /* none, or passed through unchanged */
        if (!live(x, id)) return fail(x, err, "%s: gradient buffer %d (instance %u) is not allocated", at, k, id);
        /* a mul whose output is wider than input k computes that gradient in the output's
         * dtype; a GRAD_ADD casts it afterwards (schedule.h, GRAD_ADD) */
        int ot = op->out[0];
        if (op->prim == GCKPT_P_MUL &&
            gckpt_dtype_bits((gckpt_dtype)x->r->t[ot].dtype) > gckpt_dtype_bits((gckpt_dtype)x->r->t[op->in[k]].dtype)) {
            inst_t *in = &x->inst[id];
            uint8_t wdt = (uint8_t)x->tdt[ot];
            if (in->n * gckpt_dtype_size((gckpt_dtype)wdt) > in->bytes)
                return fail(x, err, "%s: gradient buffer %d is too small for a %s gradient", at, k, gckpt_dtype_names[wdt]);
            in->dt = wdt;
        }
        c.gin[k] = iview(x, id);
        /* the gradient has the recipe tensor's size (the bound input may be the storage
         * a view reads: fewer kv heads) */
        if (c.gin[k].n != x->tnumel[op->in[k]])
            return fail(x, err, "%s: gradient buffer %d holds %llu elements, its input %llu", at, k,
                        (unsigned long long)c.gin[k].n, (unsigned long long)x->tnumel[op->in[k]]);
    }
    if (e->arg[5] != GCKPT_NOINST) {
        if (!live(x, e->arg[5])) return fail(x, err, "%s: workspace is not allocated", at);
        c.ws = iview(x, e->arg[5]);
    }
    shape_call(x, &c);
    gckpt_xstatus rc;
    if (op->out[0] == x->r->loss) {
        /* loss.backward() of the micro-step's mean loss, scaled by 1 / grad_accum */
        rc = x->be->set_scalar(x->be, c.gout, (float)(1.0 / (double)x->set.grad_accum));
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
    }
    rc = x->be->backward(x->be, &c);
    if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_grad_add(gckpt_exec *x, const gckpt_event *e, const char *at, gckpt_err *err)
{
    gckpt_xt dst, a, b;
    if (!live(x, e->arg[2])) return fail(x, err, "%s: the added gradient is not allocated", at);
    b = iview(x, e->arg[2]);
    if (e->arg[0] == GCKPT_NOINST) {
        param_t *p = param_of(x, e->op, e->layer);
        if (!p || !live(x, p->grad)) return fail(x, err, "%s: the parameter has no .grad to accumulate into", at);
        dst = a = iview(x, p->grad);
    } else {
        if (!live(x, e->arg[0])) return fail(x, err, "%s: the destination is not allocated", at);
        dst = iview(x, e->arg[0]);
        a = (gckpt_xt){NULL, dst.n, dst.dt}; /* arg[1] = NOINST: a cast copy of arg[2] */
        if (e->arg[1] != GCKPT_NOINST) {
            if (!live(x, e->arg[1])) return fail(x, err, "%s: the old gradient is not allocated", at);
            a = iview(x, e->arg[1]);
        }
    }
    if (dst.n != b.n || a.n != b.n) return fail(x, err, "%s: operands differ in size", at);
    gckpt_xstatus rc = x->be->add(x->be, dst, a, b);
    return rc == GCKPT_XS_OK ? rc : be_fail(x, rc, at, err);
}

static gckpt_xstatus ev_opt(gckpt_exec *x, const char *at, gckpt_err *err)
{
    uint64_t step = x->step + 1;
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (!live(x, p->grad))
            return fail(x, err, "%s: parameter %s (layer %d) has no gradient", at, x->r->t[p->tensor].name, p->layer);
        gckpt_optcall c = {.kind = x->set.optimizer,
                           .param = pview(p),
                           .grad = iview(x, p->grad),
                           .lr = x->o.lr,
                           .beta1 = 0.9,
                           .beta2 = 0.999,
                           .eps = 1e-8,
                           .weight_decay = x->set.optimizer == GCKPT_SGD ? 0.0 : 0.01,
                           .momentum = 0.9,
                           .step = step};
        if (p->spec->nstates >= 1) c.s1 = state_view(p, 0);
        if (p->spec->nstates >= 2) c.s2 = state_view(p, 1);
        if (p->spec->nstates == 4) {
            c.s1_absmax = state_view(p, 2);
            c.s2_absmax = state_view(p, 3);
        }
        if (x->set.optimizer == GCKPT_ADAMW_FOREACH) {
            if (!x->opt_temp) return fail(x, err, "%s: the foreach temporary is not allocated", at);
            c.temp = (gckpt_xt){(char *)x->opt_temp + p->temp_off, p->spec->opt_temp.numel, p->spec->opt_temp.dtype, 0};
        }
        gckpt_xstatus rc = x->be->optim(x->be, &c);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, at, err);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus run_event(gckpt_exec *x, size_t i, uint64_t micro, bool update, gckpt_err *err)
{
    const gckpt_event *e = &x->ev.ev[i];
    char at[160];
    where(x, i, e, at, sizeof at);
    switch (e->kind) {
    case GCKPT_EV_ALLOC: return ev_alloc(x, e, at, err);
    case GCKPT_EV_FREE: return ev_free(x, e, at, err);
    case GCKPT_EV_RETAG: return ev_retag(x, e, at, err);
    case GCKPT_EV_HOST_ALLOC: case GCKPT_EV_HOST_FREE: case GCKPT_EV_D2H: case GCKPT_EV_H2D:
        return ev_host(x, e, at, err);
    case GCKPT_EV_FWD: case GCKPT_EV_RECOMPUTE: return ev_fwd(x, e, micro, at, err);
    case GCKPT_EV_BWD: return ev_bwd(x, e, micro, at, err);
    case GCKPT_EV_GRAD_ADD: return ev_grad_add(x, e, at, err);
    case GCKPT_EV_OPT: return update ? ev_opt(x, at, err) : GCKPT_XS_OK;
    default: return fail(x, err, "%s: unknown event kind", at);
    }
}

/* After a micro-step only the parameters' .grad may be allocated. */
static gckpt_xstatus check_clean(gckpt_exec *x, bool grads_allowed, gckpt_err *err)
{
    for (uint32_t id = 0; id < x->ninst; id++)
        if (x->inst[id].live && !(grads_allowed && x->inst[id].is_pgrad)) {
            int t = x->inst[id].tensor;
            return fail(x, err, "schedule leak: instance %u (%s) is still allocated at the end of the %s", id,
                        t >= 0 ? x->r->t[t].name : "workspace", grads_allowed ? "micro-step" : "step");
        }
    for (uint64_t l = 0; l < x->m.layers; l++)
        if (x->hb[l].p) return fail(x, err, "schedule leak: layer %llu's pinned host buffer is still allocated", (unsigned long long)l);
    return GCKPT_XS_OK;
}

static gckpt_xstatus run_segment(gckpt_exec *x, int seg, uint64_t micro, bool update, size_t *count, gckpt_err *err)
{
    x->gen++;
    if (seg < 2) make_data(x, micro);
    for (size_t i = x->seg[seg][0]; i < x->seg[seg][1]; i++) {
        if (stop_requested(x)) return interrupted(x, i, err);
        gckpt_xstatus rc = run_event(x, i, micro, update, err);
        if (rc != GCKPT_XS_OK) return rc;
        (*count)++;
    }
    return check_clean(x, seg < 2, err);
}

static gckpt_xstatus checksum(gckpt_exec *x, gckpt_step_result *res, gckpt_err *err)
{
    uint64_t h = 0;
    double ss = 0;
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (!live(x, p->grad)) return fail(x, err, "checksum: parameter %s has no gradient", x->r->t[p->tensor].name);
        uint64_t hh;
        double s;
        gckpt_xstatus rc = x->be->checksum(x->be, iview(x, p->grad),
                                           gckpt_key((uint64_t)p->tensor, (uint64_t)(p->layer + 1), 0x9ad, 0), &hh, &s);
        if (rc != GCKPT_XS_OK) return be_fail(x, rc, "checksum", err);
        h += hh;
        ss += s;
    }
    res->grad_hash = h;
    res->grad_norm = sqrt(ss);
    return GCKPT_XS_OK;
}

gckpt_xstatus gckpt_exec_step(gckpt_exec *x, const gckpt_step_opts *o, gckpt_step_result *res, gckpt_err *err)
{
    gckpt_step_opts dflt = {.update = true};
    if (!o) o = &dflt;
    memset(res, 0, sizeof *res);
    if (!x->setup_done) return fail(x, err, "step: the persistent state is not set up");
    gckpt_backend *be = x->be;
    gckpt_xstatus rc;
    double t1 = 0, t2 = 0;
    bool pause = o->checksum || o->on_grads;
    if ((rc = be->timer_start(be)) != GCKPT_XS_OK) return be_fail(x, rc, "timer", err);
    if ((rc = run_segment(x, 0, 0, o->update, &res->events, err)) != GCKPT_XS_OK) return rc;
    for (uint64_t k = 1; k < x->set.grad_accum; k++)
        if ((rc = run_segment(x, 1, k, o->update, &res->events, err)) != GCKPT_XS_OK) return rc;
    if (pause) {
        if ((rc = be->timer_stop(be, &t1)) != GCKPT_XS_OK) return be_fail(x, rc, "timer", err);
        if (o->checksum && (rc = checksum(x, res, err)) != GCKPT_XS_OK) return rc;
        if (o->on_grads) {
            x->in_grads = true;
            o->on_grads(x, o->user);
            x->in_grads = false;
        }
        if ((rc = be->timer_start(be)) != GCKPT_XS_OK) return be_fail(x, rc, "timer", err);
    }
    if ((rc = run_segment(x, 2, 0, o->update, &res->events, err)) != GCKPT_XS_OK) return rc;
    if ((rc = be->timer_stop(be, &t2)) != GCKPT_XS_OK) return be_fail(x, rc, "timer", err);
    res->seconds = t1 + t2;
    int nrec = x->set.grad_accum < GCKPT_MAX_RECORDS ? (int)x->set.grad_accum : GCKPT_MAX_RECORDS;
    float rec[GCKPT_MAX_RECORDS];
    if ((rc = be->read_records(be, rec, nrec)) != GCKPT_XS_OK) return be_fail(x, rc, "reading the loss", err);
    double s = 0;
    for (int i = 0; i < nrec; i++) s += rec[i];
    res->loss = s / nrec;
    if (o->update) x->step++;
    return GCKPT_XS_OK;
}

/* ---- parameter access -------------------------------------------------------------------- */

uint64_t gckpt_exec_param_numel(const gckpt_exec *x, int tensor)
{
    if (tensor < 0 || tensor >= x->r->nt || x->pidx[tensor] < 0) return 0;
    return gckpt_param_numel(x->r, tensor);
}

static gckpt_xstatus xfer(gckpt_exec *x, gckpt_xt t, float *host, bool down, gckpt_err *err)
{
    unsigned sz = gckpt_dtype_size((gckpt_dtype)t.dt);
    void *raw = malloc(t.n * sz + 1);
    if (!raw) return fail(x, err, "out of memory");
    gckpt_xstatus rc = GCKPT_XS_OK;
    if (down) {
        rc = x->be->download(x->be, raw, t.p, t.n * sz);
        gckpt_xt h = {raw, t.n, t.dt};
        if (rc == GCKPT_XS_OK) exec_convert_to_f32(&h, host);
    } else {
        gckpt_xt h = {raw, t.n, t.dt};
        exec_convert_from_f32(&h, host);
        rc = x->be->upload(x->be, t.p, raw, t.n * sz);
    }
    free(raw);
    return rc == GCKPT_XS_OK ? rc : be_fail(x, rc, down ? "download" : "upload", err);
}

gckpt_xstatus gckpt_exec_read_param(gckpt_exec *x, int layer, int tensor, float *out, gckpt_err *err)
{
    param_t *p = param_of(x, tensor, layer);
    if (!p || !p->w) return fail(x, err, "no parameter %d in layer %d", tensor, layer);
    return xfer(x, pview(p), out, true, err);
}

gckpt_xstatus gckpt_exec_write_param(gckpt_exec *x, int layer, int tensor, const float *in, gckpt_err *err)
{
    param_t *p = param_of(x, tensor, layer);
    if (!p || !p->w) return fail(x, err, "no parameter %d in layer %d", tensor, layer);
    return xfer(x, pview(p), (float *)in, false, err);
}

gckpt_xstatus gckpt_exec_read_grad_raw(gckpt_exec *x, int layer, int tensor, void *out, uint64_t bytes, gckpt_err *err)
{
    param_t *p = param_of(x, tensor, layer);
    if (!p || !x->in_grads || !live(x, p->grad)) return fail(x, err, "no gradient of parameter %d in layer %d here", tensor, layer);
    if (bytes != p->spec->numel * gckpt_dtype_size((gckpt_dtype)p->spec->grad.dtype))
        return fail(x, err, "gradient read of the wrong size");
    gckpt_xstatus rc = x->be->download(x->be, out, x->inst[p->grad].p, bytes);
    return rc == GCKPT_XS_OK ? rc : be_fail(x, rc, "download", err);
}

gckpt_xstatus gckpt_exec_read_grad(gckpt_exec *x, int layer, int tensor, float *out, gckpt_err *err)
{
    param_t *p = param_of(x, tensor, layer);
    if (!p || !x->in_grads || !live(x, p->grad)) return fail(x, err, "no gradient of parameter %d in layer %d here", tensor, layer);
    return xfer(x, iview(x, p->grad), out, true, err);
}

/* ---- teardown ------------------------------------------------------------------------------- */

void gckpt_exec_release_all(gckpt_exec *x)
{
    if (!x) return;
    gckpt_backend *be = x->be;
    if (x->inst)
        for (uint32_t id = 0; id < x->ninst; id++)
            if (x->inst[id].live) inst_release(x, id);
    if (x->hb)
        for (uint64_t l = 0; l < x->m.layers; l++)
            if (x->hb[l].p) {
                be->release(be, GCKPT_MEM_PINNED, x->hb[l].p, x->hb[l].bytes);
                x->hb[l].p = NULL;
            }
    if (x->opt_temp) be->release(be, GCKPT_MEM_DEVICE, x->opt_temp, x->opt_temp_bytes);
    x->opt_temp = NULL;
    if (x->params)
        for (size_t i = 0; i < x->nparams; i++) {
            param_t *p = &x->params[i];
            if (p->w) be->release(be, GCKPT_MEM_DEVICE, p->w, p->spec->weight.bytes);
            p->w = NULL;
            for (int k = 0; k < GCKPT_MAX_STATES; k++) {
                if (p->st[k]) be->release(be, GCKPT_MEM_DEVICE, p->st[k], p->spec->state[k].bytes);
                p->st[k] = NULL;
            }
            p->grad = GCKPT_NOINST;
        }
    if (x->workspace) {
        be->set_workspace(be, NULL, 0);
        be->release(be, GCKPT_MEM_DEVICE, x->workspace, x->workspace_bytes);
    }
    x->workspace = NULL;
    x->setup_done = false;
}

void gckpt_exec_free(gckpt_exec *x)
{
    if (!x) return;
    gckpt_exec_release_all(x);
    gckpt_events_free(&x->ev);
    free(x->r);
    free(x->inst);
    free(x->params);
    free(x->bind);
    free(x->bind_gen);
    free(x->hb);
    free(x->ids);
    free(x->labels);
    free(x->positions);
    free(x);
}
