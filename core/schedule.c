/* The simulator: derives every tensor's lifetime from the recipe and emits the events
 * of a training step. Rules (PyTorch autograd + HF checkpointing):
 *  - forward: an op's outputs are allocated, then inputs whose last consumer it was are
 *    released unless saved for backward, held by a checkpoint, or held until the
 *    forward ends (autocast's weight-cast cache; logits returned in the model output);
 *  - a checkpointed layer saves nothing; it keeps its input (or, with offload, copies it
 *    to pinned host memory on the compute stream) and in backward re-runs its forward up
 *    to the last op that saves something (non-reentrant early stop), then back-propagates;
 *  - backward, in reverse op order: the input gradients are allocated, then the output
 *    gradients and the op's saved tensors are released. A gradient that flows through an
 *    add unchanged is the same tensor. A second contribution to an existing gradient is
 *    a temporary that is added and released. Parameter gradients become .grad on the
 *    first micro-step; later micro-steps accumulate through a temporary. */
#include "gckpt/core/schedule.h"

#include <stdlib.h>
#include <string.h>

const char *const gckpt_component_names[GCKPT_NCOMP] = {
    "weights",     "gradients", "optimizer_states", "activations",  "checkpoints",
    "recompute",   "logits_loss", "backward",       "weight_casts", "optimizer_temp",
    "workspace",
};

const char *const gckpt_phase_names[GCKPT_NPHASE] = {"forward", "loss", "backward", "optimizer"};

void gckpt_events_free(gckpt_events *e)
{
    free(e->ev);
    memset(e, 0, sizeof *e);
}

static gckpt_event *push(gckpt_events *o)
{
    if (o->oom) return NULL;
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 1024;
        gckpt_event *ne = realloc(o->ev, nc * sizeof *ne);
        if (!ne) {
            o->oom = true;
            return NULL;
        }
        o->ev = ne;
        o->cap = nc;
    }
    gckpt_event *e = &o->ev[o->n++];
    memset(e, 0, sizeof *e);
    e->op = -1;
    for (int k = 0; k < 6; k++) e->arg[k] = GCKPT_NOINST;
    return e;
}

/* ---- sizes and time ---------------------------------------------------------------- */

static double matmul_rate(const gckpt_ctx *c)
{
    const gckpt_device *d = c->dev;
    double tf;
    switch (c->set.precision) {
    case GCKPT_FP32: tf = d->tflops_fp32; break;
    case GCKPT_AMP_FP16: tf = d->tflops_fp16; break;
    default: tf = d->tflops_bf16; break;
    }
    return tf * 1e12 * d->matmul_efficiency;
}

static double hbm_rate(const gckpt_ctx *c) { return c->dev->hbm_bytes_per_s * c->dev->hbm_efficiency; }

static double param_bytes_of(const gckpt_ctx *c, int t)
{
    const gckpt_recipe *r = c->recipe;
    return (double)gckpt_param_numel(r, t) * (double)gckpt_dtype_size((gckpt_dtype)r->t[t].dtype);
}

/* Seconds and FLOPs of an op's forward (bwd=false) or backward. */
static double op_seconds(const gckpt_ctx *c, const gckpt_op *op, bool bwd, double *flops)
{
    const gckpt_recipe *r = c->recipe;
    double T = (double)c->tokens, S = (double)c->set.seq;
    double f = op->fT * T + op->fBSS * T * S;
    double traffic = 0;
    for (int k = 0; k < op->nin; k++) {
        const gckpt_tensor *t = &r->t[op->in[k]];
        traffic += t->kind == GCKPT_T_PARAM ? param_bytes_of(c, op->in[k]) : (double)c->raw[c->storage[op->in[k]]];
    }
    for (int k = 0; k < 2; k++)
        if (op->out[k] >= 0) traffic += (double)c->raw[op->out[k]];
    if (bwd) {
        f *= op->bwd_mult;
        traffic *= 2.0;
    }
    *flops = (op->kind == GCKPT_OP_MATMUL || op->kind == GCKPT_OP_ATTN) ? f : 0;
    double tm = *flops / matmul_rate(c), tb = traffic / hbm_rate(c);
    return tm > tb ? tm : tb;
}

/* Bytes of an op's backward workspace (recipe.h: bws_cT, bws_in, bws_out); false on
 * overflow. */
/* Bytes of copies of the inputs in `mask` in the dtype of op's output (the CPU
 * target's promotion copies, recipe.h); tensor sizes are checked by gckpt_ctx_init. */
static uint64_t promoted_bytes(const gckpt_ctx *c, const gckpt_op *op, uint8_t mask)
{
    const gckpt_recipe *r = c->recipe;
    uint64_t sum = 0;
    for (int k = 0; k < op->nin; k++)
        if (mask & (1u << k)) {
            int t = op->in[k];
            sum += gckpt_round_up(c->numel[t] * gckpt_dtype_size((gckpt_dtype)r->t[op->out[0]].dtype), c->dev->alloc_round_bytes);
        }
    return sum;
}

/* Bytes of an op's forward temporaries (recipe.h: fws_promote, fws_bBSS, fws_bT). */
static bool fwd_ws_bytes(const gckpt_ctx *c, const gckpt_op *op, uint64_t *out)
{
    uint64_t x = promoted_bytes(c, op, op->fws_promote), y, bss;
    if (!gckpt_mul(c->tokens, c->set.seq, &bss)) return false;
    if (op->fws_bBSS && (!gckpt_mul(op->fws_bBSS, bss, &y) || !gckpt_add(x, gckpt_round_up(y, c->dev->alloc_round_bytes), &x)))
        return false;
    if (op->fws_bT && (!gckpt_mul(op->fws_bT, c->tokens, &y) || !gckpt_add(x, gckpt_round_up(y, c->dev->alloc_round_bytes), &x)))
        return false;
    *out = x;
    return true;
}

static bool bwd_ws_bytes(const gckpt_ctx *c, const gckpt_op *op, uint64_t *out)
{
    uint64_t x = 0, y;
    *out = 0;
    if (op->bws_cT && (!gckpt_mul(op->bws_cT, c->tokens, &x) || !gckpt_mul(x, 4, &x))) return false;
    x = gckpt_round_up(x, c->dev->alloc_round_bytes);
    if (op->bws_in && (!gckpt_mul(op->bws_in, c->tbytes[op->in[0]], &y) || !gckpt_add(x, y, &x))) return false;
    if (op->bws_out && (!gckpt_mul(op->bws_out, c->tbytes[op->out[0]], &y) || !gckpt_add(x, y, &x))) return false;
    *out = x;
    return true;
}

/* An upper bound on the bytes one micro-step of section `sec` (one instance: the
 * embedding, one block or the head) allocates: every tensor's forward output, its
 * recompute and its host-to-device copy (3x); for every op input a gradient buffer of
 * up to 8x its size (an fp32 gradient of a narrow input) and an accumulation buffer
 * (9x); parameter gradients and temporaries (2x); the backward workspaces. */
static bool section_bound(const gckpt_ctx *c, int sec, uint64_t *out)
{
    const gckpt_recipe *r = c->recipe;
    uint64_t sum = 0, x;
    for (int i = 0; i < r->nt; i++) {
        if (r->t[i].section != sec || r->t[i].kind == GCKPT_T_PARAM) continue;
        if (!gckpt_mul(c->tbytes[i], 3, &x) || !gckpt_add(sum, x, &sum)) return false;
    }
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++) {
        const gckpt_op *op = &r->op[i];
        for (int k = 0; k < op->nin; k++) {
            const gckpt_tensor *t = &r->t[op->in[k]];
            if (t->kind == GCKPT_T_PARAM) {
                if (!gckpt_mul(gckpt_param_numel(r, op->in[k]), gckpt_dtype_size((gckpt_dtype)r->grad_dtype), &x) ||
                    !gckpt_add(x, c->dev->alloc_round_bytes, &x) || !gckpt_mul(x, 2, &x))
                    return false;
            } else if (!gckpt_mul(c->tbytes[op->in[k]], 9, &x)) {
                return false;
            }
            if (!gckpt_add(sum, x, &sum)) return false;
        }
        if (!bwd_ws_bytes(c, op, &x) || !gckpt_add(sum, x, &sum)) return false;
        if (!fwd_ws_bytes(c, op, &x) || !gckpt_mul(x, 2, &x) || !gckpt_add(sum, x, &sum)) return false;
    }
    *out = sum;
    return true;
}

/* Elements, exact and allocated bytes of every tensor, and which tensors are views
 * (recipe.h: view_fwd, and batched_copy at micro-batch 1) of which storage. */
static bool resolve_tensors(gckpt_ctx *c, gckpt_err *err)
{
    const gckpt_recipe *r = c->recipe;
    const gckpt_setting *s = &c->set;
    if (!gckpt_mul(s->micro_batch, s->seq, &c->tokens)) {
        gckpt_seterr(err, "%s: micro-batch %llu x seq %llu overflows 64 bits", c->model->name,
                     (unsigned long long)s->micro_batch, (unsigned long long)s->seq);
        return false;
    }
    for (int i = 0; i < r->nt; i++) c->storage[i] = (int16_t)i;
    for (int i = 0; i < r->nop; i++) {
        const gckpt_op *op = &r->op[i];
        c->fwd_view[i] = op->view_fwd || (op->batched_copy && s->micro_batch == 1);
        if (c->fwd_view[i]) c->storage[op->out[0]] = c->storage[op->in[0]];
    }
    for (int i = 0; i < r->nt; i++) {
        uint64_t b;
        if (!gckpt_tensor_numel(r, i, s->micro_batch, s->seq, &c->numel[i]) ||
            !gckpt_tensor_bytes(r, i, s->micro_batch, s->seq, &b) || b > (UINT64_MAX >> 8)) {
            gckpt_seterr(err, "%s: tensor %s at micro-batch %llu, seq %llu overflows 64 bits", c->model->name,
                         r->t[i].name, (unsigned long long)s->micro_batch, (unsigned long long)s->seq);
            return false;
        }
        c->raw[i] = b;
        c->tbytes[i] = gckpt_round_up(b, c->dev->alloc_round_bytes);
    }
    return true;
}

/* Each op's seconds, FLOPs and workspace bytes at this setting. */
static void op_costs(gckpt_ctx *c)
{
    const gckpt_recipe *r = c->recipe;
    for (int i = 0; i < r->nop; i++) {
        for (int bwd = 0; bwd < 2; bwd++) c->op_s[bwd][i] = op_seconds(c, &r->op[i], bwd, &c->op_flops[bwd][i]);
        /* (step_bound_ok refuses a setting where these overflow) */
        if (!fwd_ws_bytes(c, &r->op[i], &c->op_ws[0][i])) c->op_ws[0][i] = 0;
        if (!bwd_ws_bytes(c, &r->op[i], &c->op_ws[1][i])) c->op_ws[1][i] = 0;
        c->op_promo[i] = promoted_bytes(c, &r->op[i], r->op[i].bws_promote);
    }
}

/* Everything a step can hold at once stays below GCKPT_MAX_STEP_BYTES, so the
 * simulator's and the evaluators' signed 64-bit running totals cannot overflow. */
static bool step_bound_ok(const gckpt_ctx *c)
{
    uint64_t be, bb, bh, micro = 0, total = 0;
    return section_bound(c, GCKPT_SEC_EMBED, &be) && section_bound(c, GCKPT_SEC_BLOCK, &bb) &&
           section_bound(c, GCKPT_SEC_HEAD, &bh) && gckpt_mul(bb, c->model->layers, &micro) &&
           gckpt_add(micro, be, &micro) && gckpt_add(micro, bh, &micro) && gckpt_mul(micro, 2, &total) &&
           gckpt_add(total, c->weights, &total) && gckpt_add(total, c->grads, &total) &&
           gckpt_add(total, c->opt_states, &total) && gckpt_add(total, c->opt_temp, &total) &&
           gckpt_add(total, c->workspace, &total) && total <= GCKPT_MAX_STEP_BYTES;
}

bool gckpt_ctx_init(gckpt_ctx *c, const gckpt_model *m, const gckpt_device *d,
                    const gckpt_recipe *r, const gckpt_setting *s, gckpt_err *err)
{
    memset(c, 0, sizeof *c);
    c->model = m;
    c->dev = d;
    c->recipe = r;
    c->set = *s;
    if (!resolve_tensors(c, err)) return false;
    /* persistent: every parameter tensor is its own allocation, as are its grad and
     * optimizer states; block tensors repeat per layer (the parameter state table) */
    bool overflow;
    if (!gckpt_params_build(r, m->layers, s->optimizer, d->alloc_round_bytes, &c->params, &overflow, err)) return false;
    c->weights = c->params.weight_bytes;
    c->grads = c->params.grad_bytes;
    c->opt_states = c->params.state_bytes;
    c->opt_temp = c->params.temp_bytes;
    c->workspace = d->workspace_bytes;
    c->opt_seconds = c->params.opt_traffic / hbm_rate(c);
    op_costs(c);
    if (overflow || !step_bound_ok(c)) {
        gckpt_seterr(err, "%s: at micro-batch %llu, seq %llu a training step could hold more than "
                     "2^62 bytes (4 EiB); sizes this large cannot be planned (reduce --seq or --micro-batch)",
                     m->name, (unsigned long long)s->micro_batch, (unsigned long long)s->seq);
        return false;
    }
    return true;
}

uint64_t gckpt_section_saved_bytes(const gckpt_ctx *c, int sec)
{
    const gckpt_recipe *r = c->recipe;
    bool seen[GCKPT_MAX_TENSORS] = {false};
    uint64_t sum = 0;
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++)
        for (int k = 0; k < r->op[i].nsaved; k++) {
            int t = c->storage[r->op[i].saved[k]];
            if (seen[t] || r->t[t].section != sec || r->t[t].kind == GCKPT_T_PARAM) continue;
            seen[t] = true;
            sum += c->raw[t];
        }
    return sum;
}

uint64_t gckpt_layer_saved_bytes(const gckpt_ctx *c) { return gckpt_section_saved_bytes(c, GCKPT_SEC_BLOCK); }

void gckpt_persistent(const gckpt_ctx *c, int64_t comp[GCKPT_NCOMP])
{
    memset(comp, 0, sizeof(int64_t) * GCKPT_NCOMP);
    comp[GCKPT_C_WEIGHTS] = (int64_t)c->weights;
    comp[GCKPT_C_OPTIMIZER] = (int64_t)c->opt_states;
    comp[GCKPT_C_WORKSPACE] = (int64_t)c->workspace;
}

/* ---- the simulator ------------------------------------------------------------------ */

typedef struct {
    uint64_t bytes;
    int consumers, saved, refs;
    int ckpt;       /* checkpoints holding it (a kept input, a mask held by reference) */
    uint8_t comp;
    bool hold, external, is_const, live;
    bool view;      /* a gradient that is a view of a larger result: summed out of place */
} inst_t;

typedef struct {
    int inst[GCKPT_MAX_TENSORS];
    int grad[GCKPT_MAX_TENSORS];
    bool saved_reg[GCKPT_MAX_OPS];
    bool pgrad[GCKPT_MAX_TENSORS];
    int pend[GCKPT_MAX_TENSORS];     /* a multi-use parameter's gradient being summed */
    uint8_t got[GCKPT_MAX_TENSORS];  /* contributions received so far */
    gckpt_layer_mode mode;
    int xin;            /* instance of the block input */
    int mask;           /* this layer's device copy of an offloaded positional mask, or -1 */
    uint64_t host;      /* pinned bytes of an offloaded input */
} sec_t;

struct gckpt_sim {
    const gckpt_ctx *c;
    bool grads_exist;
    uint8_t micro;
    inst_t *pool;
    size_t n, cap;
    sec_t embed, head;
    sec_t *layer;
    int stream; /* instance of the hidden state passed to the next section */
    int gstream; /* grad instance passed to the previous section in backward */
    int phase;
    int cur_layer;
    bool ckpt_any, ckpt_offload; /* layers are checkpointed / offloaded (ckpt_held tensors) */
    uint32_t base; /* id of pool[0] */
    uint64_t nlayer_cap;
};

uint32_t gckpt_sim_next_id(const gckpt_sim *s) { return s->base + (uint32_t)s->n; }
void gckpt_sim_set_first_id(gckpt_sim *s, uint32_t first) { s->base = first; }

static uint32_t gid(const gckpt_sim *s, int id) { return id < 0 ? GCKPT_NOINST : s->base + (uint32_t)id; }

static int inst_new(gckpt_sim *s, uint64_t bytes, uint8_t comp)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 4096;
        inst_t *np = realloc(s->pool, nc * sizeof *np);
        if (!np) abort(); /* tiny structs; a failure here is not recoverable */
        s->pool = np;
        s->cap = nc;
    }
    inst_t *p = &s->pool[s->n];
    memset(p, 0, sizeof *p);
    p->bytes = bytes;
    p->comp = comp;
    p->live = true;
    return (int)s->n++;
}

static void ev_mem(gckpt_sim *s, gckpt_events *o, int kind, int id, int16_t tensor)
{
    gckpt_event *e = push(o);
    if (!e) return;
    e->kind = (uint8_t)kind;
    e->comp = s->pool[id].comp;
    e->phase = (uint8_t)s->phase;
    e->micro = s->micro;
    e->layer = s->cur_layer;
    e->op = tensor;
    e->inst = gid(s, id);
    e->bytes = s->pool[id].bytes;
    e->dtype = tensor >= 0 ? s->c->recipe->t[tensor].dtype : GCKPT_DT_F32; /* workspaces are fp32 */
}

static int alloc(gckpt_sim *s, gckpt_events *o, uint64_t bytes, uint8_t comp, int16_t tensor)
{
    int id = inst_new(s, bytes, comp);
    ev_mem(s, o, GCKPT_EV_ALLOC, id, tensor);
    return id;
}

/* A gradient buffer: marked so reports can say "the gradient of X". */
static int alloc_g(gckpt_sim *s, gckpt_events *o, uint64_t bytes, uint8_t comp, int16_t tensor)
{
    int id = alloc(s, o, bytes, comp, tensor);
    if (o->n && !o->oom) o->ev[o->n - 1].grad = 1;
    return id;
}

static void release(gckpt_sim *s, gckpt_events *o, int id, int16_t tensor)
{
    inst_t *p = &s->pool[id];
    if (!p->live) return;
    p->live = false;
    ev_mem(s, o, GCKPT_EV_FREE, id, tensor);
}

static void try_free(gckpt_sim *s, gckpt_events *o, int id, int16_t tensor)
{
    inst_t *p = &s->pool[id];
    if (p->live && p->consumers <= 0 && p->saved <= 0 && p->ckpt <= 0 && !p->hold && !p->external &&
        !p->is_const)
        release(s, o, id, tensor);
}

static void ev_compute(gckpt_sim *s, gckpt_events *o, int kind, int op, bool bwd, const int *args)
{
    gckpt_event *e = push(o);
    if (!e) return;
    for (int k = 0; k < 6; k++) e->arg[k] = gid(s, args[k]);
    e->kind = (uint8_t)kind;
    e->phase = (uint8_t)s->phase;
    e->micro = s->micro;
    e->layer = s->cur_layer;
    e->op = (int16_t)op;
    e->seconds = s->c->op_s[bwd][op];
    e->flops = s->c->op_flops[bwd][op];
}

static void ev_copy(gckpt_sim *s, gckpt_events *o, int kind, uint64_t bytes, int comp, int inst)
{
    gckpt_event *e = push(o);
    if (!e) return;
    e->arg[0] = gid(s, inst);
    e->kind = (uint8_t)kind;
    e->phase = (uint8_t)s->phase;
    e->micro = s->micro;
    e->layer = s->cur_layer;
    e->comp = (uint8_t)comp;
    e->bytes = bytes;
    if (kind == GCKPT_EV_D2H) e->seconds = (double)bytes / s->c->dev->d2h_bytes_per_s;
    if (kind == GCKPT_EV_H2D) e->seconds = (double)bytes / s->c->dev->h2d_bytes_per_s;
}

gckpt_sim *gckpt_sim_new(const gckpt_ctx *c, bool grads_exist, uint8_t micro, uint64_t layers)
{
    gckpt_sim *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (!gckpt_sim_reset(s, c, grads_exist, micro, layers)) {
        free(s);
        return NULL;
    }
    return s;
}

void gckpt_sim_set_checkpointing(gckpt_sim *s, bool any, bool offload)
{
    s->ckpt_any = any;
    s->ckpt_offload = offload;
}

/* Checkpointed layers keep their arguments by reference: keyword arguments, and a
 * positional input that is not offloaded (gpt2's mask). */
static bool ckpt_holds(const gckpt_sim *s, int t)
{
    const gckpt_recipe *r = s->c->recipe;
    return r->t[t].ckpt_held && s->ckpt_any && !(s->ckpt_offload && t == r->mask && r->mask_positional);
}

bool gckpt_sim_reset(gckpt_sim *s, const gckpt_ctx *c, bool grads_exist, uint8_t micro, uint64_t layers)
{
    if (!layers) layers = 1;
    if (layers > s->nlayer_cap) {
        sec_t *nl = realloc(s->layer, layers * sizeof *nl);
        if (!nl) return false;
        s->layer = nl;
        s->nlayer_cap = layers;
    }
    s->c = c;
    s->grads_exist = grads_exist;
    s->micro = micro;
    s->n = 0;
    s->base = 0;
    s->stream = s->gstream = -1;
    s->phase = 0;
    s->cur_layer = 0;
    gckpt_sim_set_checkpointing(s, c->set.every_n > 0, c->set.offload);
    return true;
}

void gckpt_sim_free(gckpt_sim *s)
{
    if (!s) return;
    free(s->pool);
    free(s->layer);
    free(s);
}

static sec_t *owner(gckpt_sim *s, sec_t *st, int t)
{
    int sec = s->c->recipe->t[t].section;
    if (sec == GCKPT_SEC_EMBED) return &s->embed;
    if (sec == GCKPT_SEC_HEAD) return &s->head;
    return st;
}

/* The data instance slot of tensor t as seen from section state st. */
static int *slot(gckpt_sim *s, sec_t *st, int t)
{
    if (t == s->c->recipe->mask && st->mask >= 0) return &st->mask;
    return &owner(s, st, t)->inst[t];
}

enum { MODE_SAVE, MODE_NOSAVE, MODE_RECOMPUTE };

/* Run the forward ops [begin, end) of a section. save_only_last: the last op only
 * saves its inputs (a recompute stops there, before computing its output). Python
 * references (recipe.h, hold_to) count as one more consumer each, released after the
 * op that ends them, or all at once when a recompute stops before that op (the
 * exception unwinds HF's frames). */
static void sim_fwd(gckpt_sim *s, sec_t *st, int sec, int mode, int end, bool save_only_last, int sec_in,
                    int sec_out, gckpt_events *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    int begin = r->sec_begin[sec], send = r->sec_end[sec];
    int cons[GCKPT_MAX_TENSORS] = {0};
    bool made[GCKPT_MAX_TENSORS] = {false};
    for (int i = begin; i < end; i++)
        for (int k = 0; k < r->op[i].nin; k++) cons[r->op[i].in[k]]++;
    for (int i = begin; i < send; i++)
        for (int k = 0; k < r->op[i].nunhold; k++) cons[r->op[i].unhold[k]]++;
    if (sec_in >= 0) {
        inst_t *x = &s->pool[st->inst[sec_in]];
        x->consumers = cons[sec_in];
        x->external = false;
        made[sec_in] = true;
    }
    int fwd_kind = mode == MODE_RECOMPUTE ? GCKPT_EV_RECOMPUTE : GCKPT_EV_FWD;
    int released = end; /* ops from here on have their Python references dropped at the end */
    for (int i = begin; i < end; i++) {
        const gckpt_op *op = &r->op[i];
        bool save_only = save_only_last && i == end - 1;
        int fws = -1; /* the op's forward temporaries (CPU target), made with its output */
        if (!save_only && !c->fwd_view[i] && c->op_ws[0][i])
            fws = alloc(s, o, c->op_ws[0][i], mode == MODE_RECOMPUTE ? GCKPT_C_RECOMPUTE : GCKPT_C_ACTIVATIONS, -1);
        if (c->fwd_view[i]) {
            /* a view: the output is input 0's storage, with the output's consumers */
            int id = *slot(s, st, op->in[0]);
            s->pool[id].consumers += cons[op->out[0]];
            st->inst[op->out[0]] = id;
            made[op->out[0]] = true;
        }
        for (int k = 0; k < 2 && !save_only && !c->fwd_view[i]; k++) {
            int t = op->out[k];
            if (t < 0) continue;
            const gckpt_tensor *tt = &r->t[t];
            uint8_t comp = GCKPT_C_ACTIVATIONS;
            if (tt->logits) comp = GCKPT_C_LOGITS;
            else if (tt->kind == GCKPT_T_WCAST) comp = GCKPT_C_WEIGHT_CASTS;
            else if (mode == MODE_RECOMPUTE) comp = GCKPT_C_RECOMPUTE;
            int id = alloc(s, o, c->tbytes[t], comp, (int16_t)t);
            inst_t *p = &s->pool[id];
            p->consumers = cons[t];
            p->is_const = tt->step_held;
            /* held until the forward ends; in a recompute autocast's weight-cast cache
             * lives until the recompute ends (it re-enters autocast) */
            p->hold = tt->fwd_end_free && (mode != MODE_RECOMPUTE || tt->kind == GCKPT_T_WCAST);
            p->external = t == sec_out || t == r->loss;
            if (ckpt_holds(s, t)) p->ckpt = 1;
            st->inst[t] = id;
            made[t] = true;
        }
        int args[6] = {-1, -1, -1, -1, -1, -1};
        for (int k = 0; k < op->nin; k++)
            if (r->t[op->in[k]].kind != GCKPT_T_PARAM) args[k] = *slot(s, st, op->in[k]);
        for (int k = 0; k < 2 && !save_only; k++)
            if (op->out[k] >= 0) args[4 + k] = st->inst[op->out[k]];
        ev_compute(s, o, fwd_kind, i, false, args);
        if ((save_only || c->fwd_view[i]) && !o->oom && o->n) /* a view, or a recompute that stops
                                                              * once the op saved its inputs */
            o->ev[o->n - 1].seconds = o->ev[o->n - 1].flops = 0;
        if (fws >= 0) release(s, o, fws, -1);
        if (mode != MODE_NOSAVE) {
            for (int k = 0; k < op->nsaved; k++) s->pool[*slot(s, st, op->saved[k])].saved++;
            st->saved_reg[i] = op->nsaved > 0;
        } else {
            st->saved_reg[i] = false;
        }
        for (int k = 0; k < op->nin; k++) {
            int t = op->in[k];
            if (r->t[t].kind == GCKPT_T_PARAM) continue;
            int id = *slot(s, st, t);
            s->pool[id].consumers--;
            try_free(s, o, id, (int16_t)t);
        }
        if (save_only) {
            released = i;
            break;
        }
        for (int k = 0; k < op->nunhold; k++) {
            int t = op->unhold[k];
            int id = st->inst[t];
            if (!made[t] || id < 0) continue;
            s->pool[id].consumers--;
            try_free(s, o, id, (int16_t)t);
        }
        for (int k = 0; k < 2; k++)
            if (op->out[k] >= 0) try_free(s, o, st->inst[op->out[k]], op->out[k]);
    }
    /* a recompute ends: its autocast cache goes */
    for (int t = 0; mode == MODE_RECOMPUTE && t < r->nt; t++)
        if (made[t] && r->t[t].kind == GCKPT_T_WCAST && st->inst[t] >= 0) {
            s->pool[st->inst[t]].hold = false;
            try_free(s, o, st->inst[t], (int16_t)t);
        }
    /* a recompute that stopped early: HF's frames unwind, every reference goes */
    for (int i = released; i < send; i++)
        for (int k = 0; k < r->op[i].nunhold; k++) {
            int t = r->op[i].unhold[k];
            int id = st->inst[t];
            if (!made[t] || id < 0) continue;
            s->pool[id].consumers--;
            try_free(s, o, id, (int16_t)t);
        }
}

/* The buffer a parameter's gradient is written to: its new .grad on the first
 * contribution of the first micro-step, else a temporary (*temp = true) that is then
 * accumulated into .grad (AccumulateGrad) and released. */
static int param_grad(gckpt_sim *s, sec_t *st, int t, bool view, gckpt_events *o, bool *temp)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    sec_t *ow = owner(s, st, t);
    uint64_t bytes = gckpt_round_up(gckpt_param_numel(r, t) * gckpt_dtype_size((gckpt_dtype)r->grad_dtype),
                                    c->dev->alloc_round_bytes);
    if (r->t[t].uses > 1) {
        /* the autograd engine sums a tied weight's contributions in AccumulateGrad's
         * input buffer, which lives until the last use's backward has run */
        ow->got[t]++;
        if (ow->pend[t] < 0) {
            *temp = false;
            ow->pend[t] = alloc_g(s, o, bytes, GCKPT_C_BACKWARD, (int16_t)t);
            s->pool[ow->pend[t]].view = view;
            return ow->pend[t];
        }
        *temp = true;
        return alloc_g(s, o, bytes, GCKPT_C_BACKWARD, (int16_t)t);
    }
    if (s->grads_exist || ow->pgrad[t]) {
        *temp = true;
        return alloc_g(s, o, bytes, GCKPT_C_BACKWARD, (int16_t)t);
    }
    *temp = false;
    ow->pgrad[t] = true;
    return alloc_g(s, o, bytes, GCKPT_C_GRADS, (int16_t)t);
}

static void ev_grad_add(gckpt_sim *s, gckpt_events *o, int16_t tensor, int dst, int old, int add)
{
    gckpt_event *e = push(o);
    if (!e) return;
    e->kind = GCKPT_EV_GRAD_ADD;
    e->phase = (uint8_t)s->phase;
    e->micro = s->micro;
    e->layer = s->cur_layer;
    e->op = tensor;
    e->arg[0] = gid(s, dst);
    e->arg[1] = gid(s, old);
    e->arg[2] = gid(s, add);
    e->bytes = s->pool[add].bytes;
    e->seconds = 3.0 * (double)e->bytes / (s->c->dev->hbm_bytes_per_s * s->c->dev->hbm_efficiency);
}

static int grad_comp(const gckpt_recipe *r, int t)
{
    return r->t[t].logits ? GCKPT_C_LOGITS : GCKPT_C_BACKWARD;
}

static void grad_release(gckpt_sim *s, sec_t *st, int t, gckpt_events *o)
{
    sec_t *ow = owner(s, st, t);
    int g = ow->grad[t];
    if (g < 0) return;
    ow->grad[t] = -1;
    if (--s->pool[g].refs <= 0) release(s, o, g, (int16_t)t);
}

/* The autograd engine's InputBuffer: a second contribution tmp to a gradient buffer g
 * of tensor t (refs holders) is added in place when g is its storage's only reference,
 * else g + tmp goes into a new buffer (g shared with another branch, g a view; torch's
 * can_accumulate_inplace). g's slot is overwritten (its last holder frees it), tmp
 * freed. Returns the buffer holding the sum. */
static int sum_into(gckpt_sim *s, int16_t t, int g, int tmp, uint8_t comp, gckpt_events *o)
{
    inst_t *p = &s->pool[g];
    if (p->refs <= 1 && !p->view) {
        ev_grad_add(s, o, t, g, g, tmp);
        release(s, o, tmp, t);
        return g;
    }
    int nb = alloc_g(s, o, p->bytes, comp, t);
    ev_grad_add(s, o, t, nb, g, tmp);
    s->pool[nb].refs = 1;
    if (--s->pool[g].refs <= 0) release(s, o, g, t);
    release(s, o, tmp, t);
    return nb;
}

/* Gradient contribution tmp (a temporary) for tensor t: becomes t's gradient as a
 * converted copy when there is none yet, else is summed as the engine does. */
static void accumulate(gckpt_sim *s, sec_t *st, int t, int tmp, gckpt_events *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    sec_t *ow = owner(s, st, t);
    int g = ow->grad[t];
    if (g < 0) {
        int nb = alloc_g(s, o, c->tbytes[t], (uint8_t)grad_comp(r, t), (int16_t)t);
        ev_grad_add(s, o, (int16_t)t, nb, -1, tmp);
        s->pool[nb].refs = 1;
        ow->grad[t] = nb;
        release(s, o, tmp, (int16_t)t);
        return;
    }
    ow->grad[t] = sum_into(s, (int16_t)t, g, tmp, (uint8_t)grad_comp(r, t), o);
}

/* Backward of ops [begin, end) in reverse. */
/* The tensors op i saved are released (once). */
static void release_saved(gckpt_sim *s, sec_t *st, int i, gckpt_events *o)
{
    const gckpt_op *op = &s->c->recipe->op[i];
    if (!st->saved_reg[i]) return;
    for (int k = 0; k < op->nsaved; k++) {
        int t = op->saved[k];
        int id = *slot(s, st, t);
        s->pool[id].saved--;
        try_free(s, o, id, (int16_t)t);
    }
    st->saved_reg[i] = false;
}

/* Backward of ops [begin, end) of a section in reverse (end < 0: to the section's end). */
static void sim_bwd(gckpt_sim *s, sec_t *st, int sec, int begin, int end, gckpt_events *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    if (begin < 0) begin = r->sec_begin[sec];
    if (end < 0) end = r->sec_end[sec];
    for (int i = end - 1; i >= begin; i--) {
        const gckpt_op *op = &r->op[i];
        bool any_in = false;
        for (int k = 0; k < op->nin; k++) any_in |= r->t[op->in[k]].requires_grad;
        int gout = op->out[0] >= 0 ? owner(s, st, op->out[0])->grad[op->out[0]] : -1;
        if (any_in && gout >= 0) {
            int ws = -1, promo = -1;
            if (c->op_ws[1][i]) ws = alloc(s, o, c->op_ws[1][i], GCKPT_C_BACKWARD, -1);
            /* the CPU target's promoted copy of a narrow operand lives while the other
             * operand's gradient (grad * this) is made, before the narrow one's */
            if (op->bws_promote) promo = alloc(s, o, c->op_promo[i], GCKPT_C_BACKWARD, -1);
            /* 1. the buffers this op's backward writes */
            enum { G_NONE, G_NEW, G_ALIAS, G_ACC, G_PARAM, G_PARAM_ACC, G_WIDE, G_CAST, G_BLOCK };
            int mode[GCKPT_OP_MAX_IN] = {0}, dst[GCKPT_OP_MAX_IN];
            /* mul of a 16-bit and a 32-bit tensor computes the 16-bit input's gradient in
             * fp32; the engine casts it to the input's dtype afterwards */
            uint8_t out_dt = op->out[0] >= 0 ? r->t[op->out[0]].dtype : GCKPT_DT_F32;
            int order[GCKPT_OP_MAX_IN], no = 0; /* the promoted operands last */
            for (int pass = 0; pass < 2; pass++)
                for (int k = 0; k < op->nin; k++)
                    if (((op->bws_promote >> k) & 1) == pass) order[no++] = k;
            for (int j = 0; j < op->nin; j++) {
                int k = order[j];
                if (promo >= 0 && (op->bws_promote & (1u << k))) {
                    release(s, o, promo, -1);
                    promo = -1;
                }
                int t = op->in[k];
                dst[k] = -1;
                if (!r->t[t].requires_grad) continue;
                bool dup = false; /* the same tensor twice (q = k = v views): one grad */
                for (int q = 0; q < k; q++) dup |= op->in[q] == t;
                if (dup) continue;
                if (r->t[t].kind == GCKPT_T_PARAM) {
                    bool temp;
                    dst[k] = param_grad(s, st, t, op->grad_view[k], o, &temp);
                    mode[k] = temp ? G_PARAM_ACC : G_PARAM;
                    continue;
                }
                sec_t *ow = owner(s, st, t);
                int g = ow->grad[t];
                if (g < 0 && op->grad_alias[k]) {
                    ow->grad[t] = gout;
                    s->pool[gout].refs++;
                    dst[k] = gout;
                    mode[k] = G_ALIAS;
                } else if (op->prim == GCKPT_P_MUL &&
                           gckpt_dtype_bits((gckpt_dtype)out_dt) > gckpt_dtype_bits((gckpt_dtype)r->t[t].dtype)) {
                    uint64_t wide = gckpt_round_up(c->numel[t] * gckpt_dtype_size((gckpt_dtype)out_dt), c->dev->alloc_round_bytes);
                    dst[k] = alloc_g(s, o, wide, (uint8_t)grad_comp(r, t), (int16_t)t);
                    if (!o->oom) o->ev[o->n - 1].dtype = out_dt;
                    mode[k] = G_WIDE;
                } else if (g >= 0 && op->prim == GCKPT_P_SPLIT && op->view_fwd) {
                    /* a role of a packed tensor: its block of the one gradient buffer */
                    dst[k] = g;
                    mode[k] = G_BLOCK;
                } else if (g < 0) {
                    dst[k] = alloc_g(s, o, c->tbytes[t], (uint8_t)grad_comp(r, t), (int16_t)t);
                    s->pool[dst[k]].refs = 1;
                    s->pool[dst[k]].view = op->grad_view[k];
                    ow->grad[t] = dst[k];
                    mode[k] = G_NEW;
                } else {
                    dst[k] = alloc_g(s, o, c->tbytes[t], (uint8_t)grad_comp(r, t), (int16_t)t);
                    mode[k] = G_ACC;
                }
            }
            if (promo >= 0) release(s, o, promo, -1);
            int args[6] = {-1, -1, -1, -1, gout, ws};
            for (int k = 0; k < op->nin; k++) args[k] = dst[k];
            ev_compute(s, o, GCKPT_EV_BWD, i, true, args);
            /* the kernel drops its workspace; the engine casts a gradient made in a wider
             * dtype to its input's (validate_outputs), then drops the node's incoming
             * gradients, then its saved tensors (release_variables), then accumulates the
             * outgoing ones. A recomputed layer's saved tensors go first: the checkpoint
             * drops its reference when the node unpacks them, so they die with the
             * node's apply, before the cast */
            if (ws >= 0) release(s, o, ws, -1);
            ws = -1;
            if (st->mode != GCKPT_LAYER_PLAIN) release_saved(s, st, i, o);
            for (int k = 0; k < op->nin; k++) {
                if (mode[k] != G_WIDE) continue;
                int t = op->in[k];
                int nb = alloc_g(s, o, c->tbytes[t], (uint8_t)grad_comp(r, t), (int16_t)t);
                ev_grad_add(s, o, (int16_t)t, nb, -1, dst[k]);
                release(s, o, dst[k], (int16_t)t);
                dst[k] = nb;
                mode[k] = G_CAST;
            }
            for (int k = 0; k < 2; k++)
                if (op->out[k] >= 0) grad_release(s, st, op->out[k], o);
            release_saved(s, st, i, o);
            /* 2. accumulate second contributions, then drop the temporaries */
            for (int k = 0; k < op->nin; k++) {
                int t = op->in[k];
                if ((mode[k] == G_PARAM || mode[k] == G_PARAM_ACC) && r->t[t].uses > 1) {
                    sec_t *ow = owner(s, st, t);
                    int pend = ow->pend[t];
                    if (mode[k] == G_PARAM_ACC) {
                        pend = ow->pend[t] = sum_into(s, (int16_t)t, pend, dst[k], GCKPT_C_BACKWARD, o);
                    }
                    if (ow->got[t] == r->t[t].uses) {
                        if (!s->grads_exist && !ow->pgrad[t]) {
                            /* the sum becomes .grad (an EV_RETAG with comp2 = GRADS) */
                            gckpt_event *e = push(o);
                            if (e) {
                                e->kind = GCKPT_EV_RETAG;
                                e->comp = GCKPT_C_BACKWARD;
                                e->comp2 = GCKPT_C_GRADS;
                                e->phase = (uint8_t)s->phase;
                                e->micro = s->micro;
                                e->layer = s->cur_layer;
                                e->op = (int16_t)t;
                                e->inst = gid(s, pend);
                                e->bytes = s->pool[pend].bytes;
                            }
                            s->pool[pend].comp = GCKPT_C_GRADS;
                            s->pool[pend].live = false; /* owned by .grad from now on */
                            ow->pgrad[t] = true;
                        } else {
                            ev_grad_add(s, o, (int16_t)t, -1, -1, pend);
                            release(s, o, pend, (int16_t)t);
                        }
                        ow->pend[t] = -1;
                        ow->got[t] = 0;
                    }
                } else if (mode[k] == G_PARAM_ACC) {
                    ev_grad_add(s, o, (int16_t)t, -1, -1, dst[k]);
                    release(s, o, dst[k], (int16_t)t);
                } else if (mode[k] == G_CAST && owner(s, st, t)->grad[t] < 0) {
                    owner(s, st, t)->grad[t] = dst[k]; /* the cast copy is the gradient */
                    s->pool[dst[k]].refs = 1;
                } else if (mode[k] == G_CAST || mode[k] == G_ACC) {
                    accumulate(s, st, t, dst[k], o);
                }
            }
            if (ws >= 0) release(s, o, ws, -1);
        }
        for (int k = 0; k < 2; k++)
            if (op->out[k] >= 0) grad_release(s, st, op->out[k], o);
        release_saved(s, st, i, o);
    }
}

static void init_sec(sec_t *st)
{
    for (int i = 0; i < GCKPT_MAX_TENSORS; i++) st->inst[i] = st->grad[i] = -1;
    memset(st->saved_reg, 0, sizeof st->saved_reg);
    memset(st->pgrad, 0, sizeof st->pgrad);
    memset(st->got, 0, sizeof st->got);
    for (int i = 0; i < GCKPT_MAX_TENSORS; i++) st->pend[i] = -1;
    st->xin = -1;
    st->mask = -1;
    st->host = 0;
    st->mode = GCKPT_LAYER_PLAIN;
}

void gckpt_sim_embed_fwd(gckpt_sim *s, gckpt_events *o)
{
    const gckpt_recipe *r = s->c->recipe;
    init_sec(&s->embed);
    init_sec(&s->head);
    s->phase = GCKPT_PH_FORWARD;
    s->cur_layer = -1;
    sim_fwd(s, &s->embed, GCKPT_SEC_EMBED, MODE_SAVE, r->sec_end[GCKPT_SEC_EMBED], false, -1,
            r->embed_out, o);
    s->stream = s->embed.inst[r->embed_out];
}

void gckpt_sim_layer_fwd(gckpt_sim *s, int layer, gckpt_layer_mode mode, gckpt_events *o)
{
    const gckpt_recipe *r = s->c->recipe;
    sec_t *st = &s->layer[layer];
    init_sec(st);
    st->mode = mode;
    s->phase = GCKPT_PH_FORWARD;
    s->cur_layer = layer;
    st->inst[r->block_in] = s->stream;
    st->xin = s->stream;
    inst_t *x = &s->pool[s->stream];
    if (mode == GCKPT_LAYER_CKPT) {
        /* the checkpoint keeps this layer's input on the device */
        x->ckpt = 1;
        gckpt_event *e = push(o);
        if (e) {
            e->kind = GCKPT_EV_RETAG;
            e->comp = x->comp;
            e->comp2 = GCKPT_C_CHECKPOINTS;
            e->phase = (uint8_t)s->phase;
            e->micro = s->micro;
            e->layer = layer;
            e->op = (int16_t)r->block_in;
            e->inst = gid(s, s->stream);
            e->bytes = x->bytes;
        }
        x->comp = GCKPT_C_CHECKPOINTS;
    } else if (mode == GCKPT_LAYER_CKPT_OFFLOAD) {
        st->host = s->c->raw[r->block_in];
        if (r->mask >= 0 && r->mask_positional) st->host += s->c->raw[r->mask];
        gckpt_event *e = push(o);
        if (e) {
            e->kind = GCKPT_EV_HOST_ALLOC;
            e->phase = (uint8_t)s->phase;
            e->micro = s->micro;
            e->layer = layer;
            e->op = (int16_t)r->block_in;
            e->bytes = st->host;
        }
        ev_copy(s, o, GCKPT_EV_D2H, s->c->raw[r->block_in], GCKPT_C_CHECKPOINTS, s->stream);
        if (r->mask >= 0 && r->mask_positional)
            ev_copy(s, o, GCKPT_EV_D2H, s->c->raw[r->mask], GCKPT_C_CHECKPOINTS, s->embed.inst[r->mask]);
    }
    sim_fwd(s, st, GCKPT_SEC_BLOCK, mode == GCKPT_LAYER_PLAIN ? MODE_SAVE : MODE_NOSAVE,
            r->sec_end[GCKPT_SEC_BLOCK], false, r->block_in, r->block_out, o);
    s->stream = st->inst[r->block_out];
}

void gckpt_sim_head_fwd(gckpt_sim *s, gckpt_events *o)
{
    const gckpt_recipe *r = s->c->recipe;
    s->phase = GCKPT_PH_LOSS;
    s->cur_layer = (int)s->c->model->layers;
    s->head.inst[r->head_in] = s->stream;
    /* the base model returns: its masks go unless a checkpoint holds them */
    for (int t = 0; t < r->nt; t++) {
        int id = s->embed.inst[t];
        if (id < 0 || !r->t[t].base_end_free || !s->pool[id].live) continue;
        s->pool[id].hold = false;
        try_free(s, o, id, (int16_t)t);
    }
    sim_fwd(s, &s->head, GCKPT_SEC_HEAD, MODE_SAVE, r->sec_end[GCKPT_SEC_HEAD], false, r->head_in, -1, o);
}

static void fwd_end(gckpt_sim *s, sec_t *st, gckpt_events *o)
{
    for (int t = 0; t < s->c->recipe->nt; t++) {
        int id = st->inst[t];
        if (id < 0 || !s->pool[id].live || !s->pool[id].hold) continue;
        if (owner(s, st, t) != st) continue;
        s->pool[id].hold = false;
        try_free(s, o, id, (int16_t)t);
    }
}

void gckpt_sim_fwd_end_layer(gckpt_sim *s, int layer, gckpt_events *o)
{
    s->phase = GCKPT_PH_LOSS;
    s->cur_layer = layer;
    fwd_end(s, &s->layer[layer], o);
}

void gckpt_sim_fwd_end_head(gckpt_sim *s, gckpt_events *o)
{
    s->phase = GCKPT_PH_LOSS;
    s->cur_layer = (int)s->c->model->layers;
    fwd_end(s, &s->head, o);
    s->cur_layer = -1;
    fwd_end(s, &s->embed, o); /* the model drops its masks when its forward returns */
}

void gckpt_sim_head_bwd(gckpt_sim *s, gckpt_events *o)
{
    const gckpt_recipe *r = s->c->recipe;
    s->phase = GCKPT_PH_BACKWARD;
    s->cur_layer = (int)s->c->model->layers;
    /* loss.backward(): the seed gradient of the scalar loss */
    int g = alloc_g(s, o, s->c->tbytes[r->loss], GCKPT_C_BACKWARD, (int16_t)r->loss);
    s->pool[g].refs = 1;
    s->head.grad[r->loss] = g;
    sim_bwd(s, &s->head, GCKPT_SEC_HEAD, -1, -1, o);
    s->gstream = s->head.grad[r->head_in];
    s->head.grad[r->head_in] = -1;
}

void gckpt_sim_layer_bwd(gckpt_sim *s, int layer, gckpt_events *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    sec_t *st = &s->layer[layer];
    s->phase = GCKPT_PH_BACKWARD;
    s->cur_layer = layer;
    st->grad[r->block_out] = s->gstream;
    /* non-reentrant early stop: the recompute ends when the last tensor the forward
     * saved is saved again; an op that saves only inputs saves them before it computes,
     * so the last saving op runs only if it saves an output */
    int stop = r->sec_begin[GCKPT_SEC_BLOCK];
    for (int i = r->sec_begin[GCKPT_SEC_BLOCK]; i < r->sec_end[GCKPT_SEC_BLOCK]; i++)
        if (r->op[i].nsaved) stop = i + 1;
    if (st->mode != GCKPT_LAYER_PLAIN) {
        /* the ops after the last saving one need nothing saved: their backward runs
         * before a saved tensor is unpacked (which starts the recompute) */
        sim_bwd(s, st, GCKPT_SEC_BLOCK, stop, -1, o);
        if (st->mode == GCKPT_LAYER_CKPT_OFFLOAD) {
            /* save_on_cpu's unpack: a fresh device copy, held only by the recompute's
             * arguments and by what the recompute saves */
            int id = alloc(s, o, c->tbytes[r->block_in], GCKPT_C_CHECKPOINTS, (int16_t)r->block_in);
            ev_copy(s, o, GCKPT_EV_H2D, c->raw[r->block_in], GCKPT_C_CHECKPOINTS, id);
            st->xin = id;
            if (r->mask >= 0 && r->mask_positional) {
                int mid = alloc(s, o, c->tbytes[r->mask], GCKPT_C_CHECKPOINTS, (int16_t)r->mask);
                s->pool[mid].ckpt = 1;
                ev_copy(s, o, GCKPT_EV_H2D, c->raw[r->mask], GCKPT_C_CHECKPOINTS, mid);
                st->mask = mid;
            }
        }
        st->inst[r->block_in] = st->xin;
        const gckpt_op *lo = &r->op[stop - 1];
        bool save_only = true;
        for (int k = 0; k < lo->nsaved; k++) save_only &= lo->saved[k] != lo->out[0] && lo->saved[k] != lo->out[1];
        sim_fwd(s, st, GCKPT_SEC_BLOCK, MODE_RECOMPUTE, stop, save_only, r->block_in, -1, o);
        if (st->mask >= 0) { /* an offloaded mask's device copy: the recompute's argument */
            s->pool[st->mask].ckpt = 0;
            try_free(s, o, st->mask, (int16_t)r->mask);
        }
        s->phase = GCKPT_PH_BACKWARD;
    }
    sim_bwd(s, st, GCKPT_SEC_BLOCK, -1, st->mode != GCKPT_LAYER_PLAIN ? stop : -1, o);
    if (st->mode != GCKPT_LAYER_PLAIN) {
        inst_t *x = &s->pool[st->xin];
        x->ckpt = 0;
        try_free(s, o, st->xin, (int16_t)r->block_in);
        if (st->mask >= 0) {
            s->pool[st->mask].ckpt = 0;
            try_free(s, o, st->mask, (int16_t)r->mask);
            st->mask = -1;
        }
        if (st->mode == GCKPT_LAYER_CKPT_OFFLOAD) {
            gckpt_event *e = push(o);
            if (e) {
                e->kind = GCKPT_EV_HOST_FREE;
                e->phase = (uint8_t)s->phase;
                e->micro = s->micro;
                e->layer = layer;
                e->op = (int16_t)r->block_in;
                e->bytes = st->host;
            }
        }
    }
    s->gstream = st->grad[r->block_in];
    st->grad[r->block_in] = -1;
}

void gckpt_sim_embed_bwd(gckpt_sim *s, gckpt_events *o)
{
    const gckpt_recipe *r = s->c->recipe;
    s->phase = GCKPT_PH_BACKWARD;
    s->cur_layer = -1;
    /* the last checkpoint holding the layers' arguments (layer 0's) is gone */
    for (int t = 0; t < r->nt; t++) {
        int id = s->embed.inst[t];
        if (!r->t[t].ckpt_held || id < 0 || !s->pool[id].live) continue;
        s->pool[id].ckpt = 0;
        try_free(s, o, id, (int16_t)t);
    }
    s->embed.grad[r->embed_out] = s->gstream;
    sim_bwd(s, &s->embed, GCKPT_SEC_EMBED, -1, -1, o);
}

void gckpt_sim_step_end(gckpt_sim *s, gckpt_events *o)
{
    /* the batch, masks, rotary tables, labels and the loss go when the step ends */
    sec_t *secs[2] = {&s->embed, &s->head};
    for (int q = 0; q < 2; q++) {
        s->cur_layer = q ? (int)s->c->model->layers : -1;
        for (int t = 0; t < s->c->recipe->nt; t++) {
            int id = secs[q]->inst[t];
            if (id < 0 || !s->pool[id].live || owner(s, secs[q], t) != secs[q]) continue;
            release(s, o, id, (int16_t)t);
        }
    }
}

void gckpt_sim_optimizer(const gckpt_ctx *c, gckpt_events *o)
{
    gckpt_event *e;
    size_t first = o->n;
    if (c->opt_temp && (e = push(o))) {
        e->kind = GCKPT_EV_ALLOC;
        e->comp = GCKPT_C_OPT_TEMP;
        e->phase = GCKPT_PH_OPTIMIZER;
        e->micro = 2;
        e->layer = (int)c->model->layers + 1;
        e->bytes = c->opt_temp;
    }
    if ((e = push(o))) {
        e->kind = GCKPT_EV_OPT;
        e->phase = GCKPT_PH_OPTIMIZER;
        e->micro = 2;
        e->layer = (int)c->model->layers + 1;
        e->seconds = c->opt_seconds;
    }
    if (c->opt_temp && (e = push(o))) {
        e->kind = GCKPT_EV_FREE;
        e->comp = GCKPT_C_OPT_TEMP;
        e->phase = GCKPT_PH_OPTIMIZER;
        e->micro = 2;
        e->layer = (int)c->model->layers + 1;
        e->bytes = c->opt_temp;
    }
    /* zero_grad(set_to_none=True) */
    if ((e = push(o))) {
        e->kind = GCKPT_EV_FREE;
        e->comp = GCKPT_C_GRADS;
        e->phase = GCKPT_PH_OPTIMIZER;
        e->micro = 2;
        e->layer = (int)c->model->layers + 1;
        e->bytes = c->grads;
    }
    /* whole-state events: no single tensor instance */
    for (size_t i = first; i < o->n; i++) {
        o->ev[i].inst = GCKPT_NOINST;
        o->ev[i].dtype = c->recipe->param_dtype;
    }
}

gckpt_layer_mode gckpt_layer_mode_of(const gckpt_setting *s, uint64_t i)
{
    if (!gckpt_is_checkpointed(s->every_n, i)) return GCKPT_LAYER_PLAIN;
    return s->offload ? GCKPT_LAYER_CKPT_OFFLOAD : GCKPT_LAYER_CKPT;
}

static bool micro_step(const gckpt_ctx *c, bool grads_exist, uint8_t micro, uint32_t *next_id,
                       gckpt_events *o)
{
    gckpt_sim *s = gckpt_sim_new(c, grads_exist, micro, c->model->layers);
    if (!s) return false;
    gckpt_sim_set_first_id(s, *next_id);
    int L = (int)c->model->layers;
    gckpt_sim_embed_fwd(s, o);
    for (int i = 0; i < L; i++) gckpt_sim_layer_fwd(s, i, gckpt_layer_mode_of(&c->set, (uint64_t)i), o);
    gckpt_sim_head_fwd(s, o);
    for (int i = 0; i < L; i++) gckpt_sim_fwd_end_layer(s, i, o);
    gckpt_sim_fwd_end_head(s, o);
    gckpt_sim_head_bwd(s, o);
    for (int i = L - 1; i >= 0; i--) gckpt_sim_layer_bwd(s, i, o);
    gckpt_sim_embed_bwd(s, o);
    gckpt_sim_step_end(s, o);
    *next_id = gckpt_sim_next_id(s);
    gckpt_sim_free(s);
    return !o->oom;
}

bool gckpt_schedule_build(const gckpt_ctx *c, gckpt_events *out)
{
    memset(out, 0, sizeof *out);
    uint32_t next = 0;
    if (!micro_step(c, false, 0, &next, out)) return false;
    if (c->set.grad_accum > 1 && !micro_step(c, true, 1, &next, out)) return false;
    gckpt_sim_optimizer(c, out);
    return !out->oom;
}
