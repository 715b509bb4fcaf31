/* The interpreter's events: each typed event of the schedule performed on the backend
 * and checked against the interpreter's own state (no double allocation, no use after
 * free, an allocation exactly as large as the elements it declares), so that a schedule
 * that does not describe a real computation fails loudly instead of being counted. The
 * ops check the other side: every buffer they write is exactly the size their inputs make
 * (op_sizes.c). */
#include "interp.h"

#include "gckpt/core/families.h"
#include "gckpt/core/prim.h"

#include <stdio.h>
#include <string.h>

int exec_seg_layer(const gckpt_seg *g) { return g->part == GCKPT_PART_LAYER ? g->layer : -1; }

int exec_seg_slot(const gckpt_exec *x, const gckpt_seg *g)
{
    switch (g->part) {
    case GCKPT_PART_EMBEDDING: return 0;
    case GCKPT_PART_LAYER: return g->layer + 1;
    case GCKPT_PART_HEAD: return (int)x->m.layers + 1;
    default: return -1;
    }
}

/* ---- memory ---------------------------------------------------------------------------- */

/* An allocation exactly as large as its elements (rounded to the device's granule). */
static gckpt_xstatus check_alloc_size(gckpt_exec *x, const gckpt_event *e, const char *at, gckpt_err *err)
{
    uint64_t need;
    if (e->dtype >= GCKPT_NDT || !gckpt_dtype_storage((gckpt_dtype)e->dtype, e->numel, &need))
        return exec_fail(err, "%s: no storage for %llu elements of dtype %u", at, (unsigned long long)e->numel, e->dtype);
    const char *dn = gckpt_dtype_names[e->dtype];
    if (need > e->bytes)
        return exec_fail(err, "%s: %llu bytes cannot hold %llu %s elements", at, (unsigned long long)e->bytes,
                         (unsigned long long)e->numel, dn);
    if (gckpt_round_up(need, x->dev.alloc_round_bytes) != e->bytes)
        return exec_fail(err, "%s: %llu bytes for %llu %s elements, which take %llu", at, (unsigned long long)e->bytes,
                         (unsigned long long)e->numel, dn, (unsigned long long)gckpt_round_up(need, x->dev.alloc_round_bytes));
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    uint32_t id = e->inst;
    if (id >= x->ninst) return exec_fail(err, "%s: instance %u out of range", w->at, id);
    inst_t *in = &x->inst[id];
    if (in->live) return exec_fail(err, "%s: instance %u allocated twice", w->at, id);
    int t = e->tensor;
    if (e->kind == GCKPT_EV_ALLOC && (t < 0 || t >= x->r->nt)) return exec_fail(err, "%s: tensor %d out of range", w->at, t);
    gckpt_xstatus rc = check_alloc_size(x, e, w->at, err);
    if (rc != GCKPT_XS_OK) return rc;
    param_t *p = NULL;
    /* FSDP2's sharded gradient of a unit, ZeRO-2's reduced partition: a flat gradient buffer */
    bool flat_grads = e->kind == GCKPT_EV_ALLOC_SCRATCH && x->mode->flat_grads;
    if (e->comp == GCKPT_C_GRADS && !flat_grads) {
        p = exec_param(x, t, exec_seg_layer(w->seg));
        if (!p) return exec_fail(err, "%s: a gradient allocation for something that is not a parameter", w->at);
        if (p->grad != GCKPT_NOINST) return exec_fail(err, "%s: the parameter's .grad exists already", w->at);
        if (e->numel != p->spec->grad.numel || e->dtype != p->spec->grad.dtype)
            return exec_fail(err, "%s: .grad of %llu %s elements, the parameter has %llu %s", w->at,
                             (unsigned long long)e->numel, gckpt_dtype_names[e->dtype],
                             (unsigned long long)p->spec->grad.numel, gckpt_dtype_names[p->spec->grad.dtype]);
    }
    rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, e->bytes, &in->p);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    in->live = true;
    in->bytes = e->bytes;
    in->tensor = (int16_t)t;
    in->dt = e->dtype;
    in->n = e->numel;
    in->is_pgrad = p != NULL;
    if (p) p->grad = id;
    if (t >= 0 && t == x->r->router_logits[1] && (rc = exec_aux_on_alloc(x, id, w, err)) != GCKPT_XS_OK) return rc;
    return x->mode->on_alloc ? x->mode->on_alloc(x, e, w, err) : GCKPT_XS_OK;
}

static gckpt_xstatus ev_free(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    if (!exec_live(x, e->inst)) return exec_fail(err, "%s: instance %u freed but not allocated", w->at, e->inst);
    if (x->inst[e->inst].bytes != e->bytes)
        return exec_fail(err, "%s: frees %llu bytes of a %llu-byte allocation", w->at, (unsigned long long)e->bytes,
                         (unsigned long long)x->inst[e->inst].bytes);
    bool done = false; /* the parallel mode released it (a .grad its reduce hook consumed) */
    gckpt_xstatus rc = x->mode->on_free ? x->mode->on_free(x, e, w, &done, err) : GCKPT_XS_OK;
    if (rc != GCKPT_XS_OK || done) return rc;
    if (x->inst[e->inst].is_pgrad) return exec_fail(err, "%s: a parameter's .grad freed before zero_grad", w->at);
    if (x->inst[e->inst].tensor >= 0 && x->inst[e->inst].tensor == x->r->router_logits[1] &&
        (rc = exec_aux_on_free(x, e->inst, w, err)) != GCKPT_XS_OK)
        return rc;
    exec_inst_release(x, e->inst);
    return GCKPT_XS_OK;
}

/* A summed gradient becomes a parameter's .grad. */
static gckpt_xstatus ev_become_grad(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    if (!exec_live(x, e->inst)) return exec_fail(err, "%s: instance %u is not allocated", w->at, e->inst);
    param_t *p = exec_param(x, e->tensor, exec_seg_layer(w->seg));
    inst_t *in = &x->inst[e->inst];
    if (!p) return exec_fail(err, "%s: a gradient becomes the .grad of something that is not a parameter", w->at);
    if (p->grad != GCKPT_NOINST) return exec_fail(err, "%s: the parameter's .grad exists already", w->at);
    if (in->tensor != e->tensor || in->n != p->spec->grad.numel || in->dt != p->spec->grad.dtype)
        return exec_fail(err, "%s: instance %u does not hold this parameter's gradient", w->at, e->inst);
    in->is_pgrad = true;
    p->grad = e->inst;
    return GCKPT_XS_OK;
}

/* zero_grad: every .grad, or under ZeRO-1 first those outside the rank's partition (the
 * event is marked GCKPT_PE_OUTSIDE_PARTITION); then the parallel mode's own gradient buffers */
static gckpt_xstatus zero_grad(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    uint64_t sum = 0;
    bool partial = e->par == GCKPT_PE_OUTSIDE_PARTITION;
    if (partial && !x->mode->keeps_grad)
        return exec_fail(err, "%s: a zero_grad outside the rank's partition, which this parallel mode does not have", w->at);
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (p->grad == GCKPT_NOINST || (partial && x->mode->keeps_grad(x, i))) continue;
        sum += x->inst[p->grad].bytes;
        exec_inst_release(x, p->grad);
        p->grad = GCKPT_NOINST;
    }
    if (x->mode->zero_grad) sum += x->mode->zero_grad(x);
    if (sum != e->bytes)
        return exec_fail(err, "%s: zero_grad freed %llu bytes of .grad, the schedule says %llu", w->at,
                         (unsigned long long)sum, (unsigned long long)e->bytes);
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_opt_temp(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    if (e->comp == GCKPT_C_PARALLEL) { /* the parallel mode's buffer released or taken in the step */
        if (x->mode->step_buffer) return x->mode->step_buffer(x, e, w, err);
        return exec_fail(err, "%s: %llu bytes of the parallel mode released or taken in the step, not its ipg bucket",
                         w->at, (unsigned long long)e->bytes);
    }
    if (e->kind == GCKPT_EV_OPT_TEMP_FREE) {
        if (!x->opt_temp) return exec_fail(err, "%s: frees an optimizer temporary that was not allocated", w->at);
        x->be->release(x->be, GCKPT_MEM_DEVICE, x->opt_temp, x->opt_temp_bytes);
        x->opt_temp = NULL;
        return GCKPT_XS_OK;
    }
    if (x->opt_temp) return exec_fail(err, "%s: the optimizer temporary exists already", w->at);
    if (e->bytes != x->ctx.opt_temp)
        return exec_fail(err, "%s: optimizer temporary of %llu bytes, the parameters' slices take %llu", w->at,
                         (unsigned long long)e->bytes, (unsigned long long)x->ctx.opt_temp);
    gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, e->bytes, &x->opt_temp);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    x->opt_temp_bytes = e->bytes;
    return GCKPT_XS_OK;
}

/* ---- offload ----------------------------------------------------------------------------- */

static gckpt_xstatus ev_host(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    int layer = exec_seg_layer(w->seg);
    if (layer < 0 || (uint64_t)layer >= x->m.layers) return exec_fail(err, "%s: host buffer of no layer", w->at);
    hostbuf_t *h = &x->hb[layer];
    gckpt_xstatus rc;
    switch (e->kind) {
    case GCKPT_EV_HOST_ALLOC:
        if (h->p) return exec_fail(err, "%s: the layer's host buffer exists already", w->at);
        rc = x->be->alloc(x->be, GCKPT_MEM_PINNED, e->bytes, &h->p);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
        h->bytes = e->bytes;
        h->wr = h->rd = 0;
        return GCKPT_XS_OK;
    case GCKPT_EV_HOST_FREE:
        if (!h->p || h->bytes != e->bytes) return exec_fail(err, "%s: frees a host buffer that was not allocated", w->at);
        /* (a VLM tower's forward-only layer packs its input and never unpacks it: its graph goes) */
        if (h->rd != h->wr && (uint64_t)layer < x->live_layers)
            return exec_fail(err, "%s: %llu of the %llu bytes copied out were not copied back", w->at,
                             (unsigned long long)(h->wr - h->rd), (unsigned long long)h->wr);
        x->be->release(x->be, GCKPT_MEM_PINNED, h->p, h->bytes);
        h->p = NULL;
        return GCKPT_XS_OK;
    default: {
        bool d2h = e->kind == GCKPT_EV_D2H;
        if (!exec_live(x, e->inst)) return exec_fail(err, "%s: device instance %u is not allocated", w->at, e->inst);
        const inst_t *in = &x->inst[e->inst];
        /* the layer's buffer is filled in order (hidden states, then a positional mask)
         * and read back in the same order */
        uint64_t off = d2h ? h->wr : h->rd, lim = d2h ? h->bytes : h->wr, holds = 0;
        (void)gckpt_dtype_storage((gckpt_dtype)in->dt, in->n, &holds);
        if (e->bytes != holds)
            return exec_fail(err, "%s: copy of %llu bytes of an instance whose %llu elements take %llu", w->at,
                             (unsigned long long)e->bytes, (unsigned long long)in->n, (unsigned long long)holds);
        if (!h->p || off + e->bytes > lim)
            return exec_fail(err, "%s: copy of %llu bytes at offset %llu does not fit its buffers", w->at,
                             (unsigned long long)e->bytes, (unsigned long long)off);
        char *hp = (char *)h->p + off;
        rc = d2h ? x->be->copy(x->be, hp, in->p, e->bytes, true) : x->be->copy(x->be, in->p, hp, e->bytes, false);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
        if (d2h) h->wr += e->bytes;
        else h->rd += e->bytes;
        return GCKPT_XS_OK;
    }
    }
}

/* ---- compute ------------------------------------------------------------------------------ */

/* The sliding window op applies in layer (-1: outside the layers), 0 for none: a sliding
 * layer's SDPA; the source of a sliding layers' mask (its tensor is of the sliding type,
 * or every layer slides: Mistral's one mask is create_sliding_window_causal_mask's). */
static uint64_t op_window(const gckpt_exec *x, const gckpt_op *op, int layer)
{
    const gckpt_model *m = &x->m;
    if (!m->sliding_window) return 0;
    if (gckpt_prim_of(op->prim)->windowed) return layer >= 0 && gckpt_layer_sliding(m, (uint64_t)layer) ? m->sliding_window : 0;
    if (op->nin != 0 || op->source != GCKPT_SRC_MASK || op->out[0] < 0) return 0; /* not the mask's source */
    int lt = x->r->t[op->out[0]].layer_type;
    bool sliding = lt == GCKPT_LT_SLIDING || (lt == GCKPT_LT_ANY && m->sliding_layers == m->layers);
    return sliding ? m->sliding_window : 0;
}

/* The theta of a rotary source op: Gemma 3's local theta for the sliding layers' pair
 * (or for its one pair when every layer slides), else rope_theta. */
static double op_theta(const gckpt_exec *x, const gckpt_op *op)
{
    const gckpt_model *m = &x->m;
    bool local = m->rope_local_theta > 0 &&
                 (op->out[0] == x->r->rope_local[0] || (m->sliding_layers == m->layers && m->layers > 0));
    return local ? m->rope_local_theta : m->rope_theta;
}

static void call_init(gckpt_exec *x, gckpt_xcall *c, const gckpt_op *op, int slot, int layer, int opi, uint64_t micro)
{
    memset(c, 0, sizeof *c);
    c->r = x->r;
    c->op = op;
    c->m = &x->m;
    c->b = x->set.micro_batch;
    c->s = x->set.seq;
    c->rng = gckpt_key(x->o.seed ^ 0xd50f0cULL, x->step, exec_global_micro(x, micro), (uint64_t)slot * (uint64_t)x->r->nop + (uint64_t)opi);
    c->window = op_window(x, op, layer);
    c->rope_theta = op_theta(x, op);
}

/* A tensor that has no buffer (absent: freed, or never needed): its recipe size. */
static gckpt_xt absent(const gckpt_exec *x, int t) { return (gckpt_xt){NULL, x->ctx.numel[t], x->r->t[t].dtype, 0}; }

/* The shape [rows, cols] of the tensor an operand holds, from the recipe. */
static void shape_of(const gckpt_exec *x, int t, gckpt_xt *v)
{
    v->cols = gckpt_tensor_width(x->r, t, x->set.seq);
    v->rows = v->cols ? x->ctx.numel[t] / v->cols : 0;
}

/* Phi-3's blocks of a fused projection (q, k, v of qkv_proj; gate, up of gate_up_proj),
 * GPT-NeoX's interleaved q, k, v and the experts' gate and up halves of gate_up's [S, 2I]
 * output are views (recipe: SPLIT, view_fwd, sb the first column) that the next ops read
 * in place: the operand becomes a strided column view of the projection's output
 * (gckpt_xt.vW). Not where the family table says the attention kernels read q, k, v
 * packed themselves (gpt2, packed_qkv_kernels). */
/* the SPLIT view op producing tensor t (also through matmul's batch folding, a view at
 * micro-batch 1), or NULL */
static const gckpt_op *view_of(const gckpt_exec *x, int t)
{
    int p = gckpt_recipe_producer(x->r, t);
    if (p < 0) return NULL;
    const gckpt_op *op = &x->r->op[p];
    const gckpt_prim_info *info = gckpt_prim_of(op->prim);
    if (info->identity && op->batched_copy && x->set.micro_batch == 1) return view_of(x, op->in[0]);
    /* (also gpt_oss's probs[..., :-1]: the first s of s + 1 columns, from column 0) */
    return info->col_view && op->view_fwd ? op : NULL;
}

/* A ViT's rows of each image read in place (ROWS_OF, view_fwd: x[:, 1:] under autocast, whose
 * cast copies it): image k's rows first .. first + n - 1 of its s rows of width w are the
 * columns first w .. of the k-th row of width s w. */
static bool rows_view(const gckpt_exec *x, int t, gckpt_xt *v)
{
    int p = gckpt_recipe_producer(x->r, t);
    const gckpt_op *op = p >= 0 ? &x->r->op[p] : NULL;
    if (!op || op->prim != GCKPT_P_ROWS_OF || !op->view_fwd || !op->width) return false;
    uint64_t w = op->width, first = op->sa > 0 ? (uint64_t)op->sa : 0, b = x->set.micro_batch;
    uint64_t s = b ? x->ctx.numel[op->in[0]] / (b * w) : 0, n = op->sb > 0 ? (uint64_t)op->sb : s - first;
    v->rows = b;
    v->cols = n * w;
    v->vW = s * w;
    v->voff = first * w;
    v->n = v->rows * v->cols;
    return true;
}

static void strided_view(const gckpt_exec *x, int t, gckpt_xt *v)
{
    if (!v->p || rows_view(x, t, v)) return;
    if (gckpt_family_of(x->m.family)->packed_qkv_kernels) return;
    const gckpt_op *p = view_of(x, t);
    if (!p) return;
    if (p->sa < 0) { /* each head's first columns (partial rotary) of x, itself maybe a block */
        uint64_t hd = p->width, W = gckpt_tensor_width(x->r, p->in[0], x->set.seq);
        v->vblk = hd && W >= hd ? v->cols / (W / hd) : 0;
        v->vstride = hd;
        const gckpt_op *q = view_of(x, p->in[0]);
        v->vW = q ? gckpt_tensor_width(x->r, q->in[0], x->set.seq) : W;
        v->voff = q ? (uint64_t)q->sb : 0;
        if (q && q->in_f) v->vstride = q->in_f; /* heads interleaved (GPT-NeoX) */
    } else {
        v->vW = gckpt_tensor_width(x->r, p->in[0], x->set.seq);
        v->voff = (uint64_t)p->sb;
        if (p->in_f) {
            v->vblk = p->out_f;
            v->vstride = p->in_f;
        }
        /* one column of every in_f of a per-head block view (MLA's x[..., 0::2] of each
         * head's rotary columns): elements in_f apart in the block's storage */
        const gckpt_op *q = p->in_f && p->out_f == 1 ? view_of(x, p->in[0]) : NULL;
        if (q && q->sa >= 0 && q->in_f && q->out_f % p->in_f == 0) {
            v->vW = gckpt_tensor_width(x->r, q->in[0], x->set.seq);
            v->voff = (uint64_t)q->sb + (uint64_t)p->sb;
            v->vblk = q->out_f / p->in_f;
            v->vstride = q->in_f;
            v->vstep = p->in_f;
        }
    }
    v->n = v->rows * v->cols;
}

/* Every operand's shape (a gradient has its tensor's). */
static void shape_call(const gckpt_exec *x, gckpt_xcall *c)
{
    const gckpt_op *op = c->op;
    for (int k = 0; k < op->nin; k++) {
        shape_of(x, op->in[k], &c->in[k]);
        strided_view(x, op->in[k], &c->in[k]);
        c->gin[k].rows = c->in[k].rows;
        c->gin[k].cols = c->in[k].cols;
    }
    for (int k = 0; k < 2; k++)
        if (op->out[k] >= 0) shape_of(x, op->out[k], &c->out[k]);
    if (op->out[0] >= 0) {
        c->gout.rows = c->out[0].rows;
        c->gout.cols = c->out[0].cols;
    }
}

/* ---- gradient views ----------------------------------------------------------------------
 * An op whose input gradient is a view of its output gradient (recipe grad_alias) gets no
 * buffer for it when the schedule hands the output gradient's instance on (grad_in[k] ==
 * grad_out): the gradient is already there, unchanged. Where that view is not the whole
 * instance (gpt_oss: the sink cat's scores are the first s of s + 1 columns, the rotary
 * cat's halves half of every head), whoever reads the gradient next reads it strided:
 * recorded here per (slot, tensor) when passed through, applied by grad_view to every
 * gradient an op or a sum reads. */

static exec_gview *gview_at(gckpt_exec *x, int slot, int t) { return &x->gview[(size_t)slot * (size_t)x->r->nt + (size_t)t]; }

/* Tensor t's gradient held in instance id (v shaped as t): strided when it was passed
 * through as a part of a wider gradient in this micro-step. */
static void grad_view(gckpt_exec *x, int slot, int t, uint32_t id, gckpt_xt *v)
{
    const exec_gview *g = gview_at(x, slot, t);
    if (!v->p || g->gen != x->gen || g->inst != id || !g->vW) return;
    v->vW = g->vW;
    v->voff = g->voff;
    v->vblk = g->vblk;
    v->vstride = g->vstride;
    v->n = v->rows * v->cols;
}

/* Input k's gradient passed through in gout (instance id): its view there, by the op's
 * rule composed with gout's own view. */
static gckpt_xstatus pass_grad(gckpt_exec *x, const gckpt_xcall *c, int slot, int k, uint32_t id, const exec_site *w,
                               gckpt_err *err)
{
    const gckpt_op *op = c->op;
    const gckpt_xt *g = &c->gout, *in = &c->in[k];
    exec_gview v = {.inst = id, .gen = x->gen};
    uint8_t rule = gckpt_prim_of(op->prim)->grad_pass;
    switch (rule) {
    case GCKPT_GP_FIRST_COLS: /* cat(scores, sink)'s first W columns of W + 1 */
        v.vW = g->cols;
        break;
    case GCKPT_GP_HALVES: /* input k's half of every head of op->width */
        v.vW = g->cols;
        v.voff = (uint64_t)k * (op->width / 2);
        v.vblk = op->width / 2;
        v.vstride = op->width;
        break;
    default: /* the whole gradient (add, sub, a view of the same shape) */
        if (in->rows * in->cols != g->rows * g->cols)
            return exec_fail(err, "%s: input %d's gradient passed through is not the output gradient's shape", w->at, k);
        v.vW = g->vW;
        v.voff = g->voff;
        v.vblk = g->vblk;
        v.vstride = g->vstride;
        break;
    }
    if (v.vW && g->vW && rule != GCKPT_GP_WHOLE)
        return exec_fail(err, "%s: a gradient view inside a gradient view is not executed", w->at);
    *gview_at(x, slot, op->in[k]) = v;
    return GCKPT_XS_OK;
}

/* the view of op input k: a parameter by (layer, tensor) or a bound instance */
static bool in_view(gckpt_exec *x, const gckpt_op *op, int k, int layer, uint32_t id, bool required, gckpt_xt *out)
{
    int t = op->in[k];
    if (x->r->t[t].kind == GCKPT_T_PARAM) {
        param_t *p = exec_param(x, t, layer);
        if (!p) return false;
        *out = exec_param_view(p);
        return true;
    }
    if (!exec_live(x, id)) {
        *out = absent(x, t);
        return !required;
    }
    *out = exec_inst_view(x, id);
    return true;
}

/* The host data of a SOURCE op (ids, labels, positions: as many as the source's size
 * check allows), NULL for computed sources. */
static const int64_t *source_data(gckpt_exec *x, const gckpt_op *op)
{
    switch (op->source) {
    case GCKPT_SRC_IDS: return x->ids;
    case GCKPT_SRC_LABELS: return x->labels;
    case GCKPT_SRC_POSITIONS: return x->positions;
    case GCKPT_SRC_ROTARY: return x->cp ? x->positions : NULL; /* CP: the rank's positions' tables */
    default: return NULL;
    }
}

/* A quantized linear (op->dequant, QLoRA): its weight operand becomes the weight
 * dequantized into the op's workspace (the schedule's fixed temporary of `need` bytes:
 * recipe.h fws_fixed / bws_fixed), rows x cols in the dtype of the op's input, as
 * bitsandbytes' gemm_4bit fallback and MatMul8bitFp make it in forward, every recompute
 * and backward (FINDINGS R-QUANT-11). */
static gckpt_xstatus dequant_weight(gckpt_exec *x, gckpt_xcall *c, int layer, uint64_t need, const exec_site *w,
                                    gckpt_err *err)
{
    const gckpt_op *op = c->op;
    param_t *p = exec_param(x, op->in[1], layer);
    if (!p || p->spec->quant.scheme != op->dequant)
        return exec_fail(err, "%s: the weight is not quantized as the op dequantizes it", w->at);
    uint64_t rows = op->out_f, cols = op->in_f, bytes = rows * cols * gckpt_dtype_size((gckpt_dtype)c->in[0].dt);
    if (!c->ws.p || c->ws.n < need || need < bytes)
        return exec_fail(err, "%s: a workspace of %llu bytes for a dequantized weight of %llu (the op says %llu)", w->at,
                         (unsigned long long)(c->ws.p ? c->ws.n : 0), (unsigned long long)bytes,
                         (unsigned long long)need);
    gckpt_xt deq = {c->ws.p, rows * cols, c->in[0].dt, cols, rows};
    gckpt_xstatus rc = x->be->dequant(x->be, &p->q, c->in[1], deq);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    c->in[1] = deq;
    return GCKPT_XS_OK;
}

/* A grouped GEMM's experts' offsets (grouped_mm's offs argument, which the recipe has it
 * save rather than take as an input): the int32 histogram's latest output in this
 * section instance, as in[2] (prim.h reads_offsets, makes_offsets). */
static gckpt_xstatus grouped_offsets(gckpt_exec *x, gckpt_xcall *c, int slot, const exec_site *w, gckpt_err *err)
{
    const gckpt_recipe *r = x->r;
    int prod = -1;
    for (int i = r->sec_begin[c->op->section]; i < r->sec_end[c->op->section] && prod < 0; i++)
        if (gckpt_prim_of(r->op[i].prim)->makes_offsets && r->t[r->op[i].out[0]].dtype == GCKPT_DT_I32) prod = i;
    size_t b = (size_t)slot * (size_t)r->nop + (size_t)(prod < 0 ? 0 : prod);
    uint32_t id = prod < 0 ? GCKPT_NOINST : x->bind[b].out[0];
    if (prod < 0 || x->bind_gen[b] != x->gen || !exec_live(x, id))
        return exec_fail(err, "%s: the experts' offsets are not allocated", w->at);
    c->in[2] = exec_inst_view(x, id);
    c->in[2].rows = 1;
    c->in[2].cols = x->inst[id].n;
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_fwd(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    const gckpt_op *op = &x->r->op[e->op];
    int slot = exec_seg_slot(x, w->seg), layer = exec_seg_layer(w->seg);
    const gckpt_fwd_args *a = &e->arg.fwd;
    size_t b = (size_t)slot * (size_t)x->r->nop + (size_t)e->op;
    x->bind[b] = *a;
    x->bind_gen[b] = x->gen;
    gckpt_xcall c;
    call_init(x, &c, op, slot, layer, e->op, w->micro);
    for (int k = 0; k < op->nin; k++)
        if (!in_view(x, op, k, layer, a->in[k], true, &c.in[k]))
            return exec_fail(err, "%s: input %d (%s, instance %u) is not allocated", w->at, k, x->r->t[op->in[k]].name,
                             a->in[k]);
    if (op->nin > 0 && op->out[0] >= 0 && a->out[0] == a->in[0] && !op->in_place) {
        /* a view (an expand, or batch folding at micro-batch 1): the output is input 0's
         * storage; consumers read it with its own width */
        if (!exec_live(x, a->in[0])) return exec_fail(err, "%s: the viewed input is not allocated", w->at);
        return GCKPT_XS_OK;
    }
    if (e->kind == GCKPT_EV_RECOMPUTE && op->out[0] >= 0 && a->out[0] == GCKPT_NOINST) {
        /* a recompute that stops inside this op once it saved its inputs (they are saved
         * before it computes): the inputs are bound for its backward, nothing runs */
        for (int k = 0; k < op->nsaved; k++)
            if (op->saved[k] == op->out[0] || op->saved[k] == op->out[1])
                return exec_fail(err, "%s: a recompute cannot stop before an op that saves its output", w->at);
        return GCKPT_XS_OK;
    }
    for (int k = 0; k < 2; k++) {
        if (op->out[k] < 0) continue;
        if (!exec_live(x, a->out[k])) return exec_fail(err, "%s: output %d is not allocated", w->at, k);
        c.out[k] = exec_inst_view(x, a->out[k]);
    }
    shape_call(x, &c);
    gckpt_xstatus rc;
    if (gckpt_prim_of(op->prim)->reads_offsets && (rc = grouped_offsets(x, &c, slot, w, err)) != GCKPT_XS_OK) return rc;
    if (op->dequant) {
        if (!exec_live(x, a->workspace)) return exec_fail(err, "%s: workspace is not allocated", w->at);
        c.ws = exec_inst_view(x, a->workspace);
        if ((rc = dequant_weight(x, &c, layer, op->fws_fixed, w, err)) != GCKPT_XS_OK) return rc;
    }
    if (op->nin == 0) {
        rc = x->be->source(x->be, (gckpt_source)op->source, &c, source_data(x, op));
    } else if (op->in[0] == x->r->router_logits[1]) { /* the view of every layer's logits */
        return exec_aux_forward(x, &c, w, err);
    } else if (x->mode->run_op) { /* the mode computes it (tensor parallelism's sharded ops) */
        if ((rc = x->mode->run_op(x, &c, false, w, err)) != GCKPT_XS_OK) return rc;
    } else {
        rc = x->be->forward(x->be, &c);
    }
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    if (op->out[0] == x->r->loss && w->micro < GCKPT_MAX_RECORDS) {
        rc = x->be->record(x->be, c.out[0], (int)w->micro);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus ev_bwd(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    const gckpt_op *op = &x->r->op[e->op];
    const gckpt_bwd_args *a = &e->arg.bwd;
    int slot = exec_seg_slot(x, w->seg), layer = exec_seg_layer(w->seg);
    size_t b = (size_t)slot * (size_t)x->r->nop + (size_t)e->op;
    if (x->bind_gen[b] != x->gen)
        return exec_fail(err, "%s: backward of an op with no forward in this micro-step", w->at);
    const gckpt_fwd_args *bd = &x->bind[b];
    gckpt_xcall c;
    call_init(x, &c, op, slot, layer, e->op, w->micro);
    for (int k = 0; k < op->nin; k++)
        if (!in_view(x, op, k, layer, bd->in[k], false, &c.in[k]))
            return exec_fail(err, "%s: parameter %s has no storage", w->at, x->r->t[op->in[k]].name);
    for (int k = 0; k < 2; k++)
        if (op->out[k] >= 0) c.out[k] = exec_live(x, bd->out[k]) ? exec_inst_view(x, bd->out[k]) : absent(x, op->out[k]);
    if (!exec_live(x, a->grad_out))
        return exec_fail(err, "%s: the output gradient (instance %u) is not allocated", w->at, a->grad_out);
    c.gout = exec_inst_view(x, a->grad_out);
    for (int k = 0; k < op->nin; k++) {
        uint32_t id = a->grad_in[k];
        if (id == GCKPT_NOINST || id == a->grad_out) continue; /* none, or passed through unchanged */
        if (!exec_live(x, id)) return exec_fail(err, "%s: gradient buffer %d (instance %u) is not allocated", w->at, k, id);
        c.gin[k] = exec_inst_view(x, id);
    }
    if (a->workspace != GCKPT_NOINST) {
        if (!exec_live(x, a->workspace)) return exec_fail(err, "%s: workspace is not allocated", w->at);
        c.ws = exec_inst_view(x, a->workspace);
    }
    shape_call(x, &c);
    gckpt_xstatus rc;
    if (op->out[0] >= 0) grad_view(x, slot, op->out[0], a->grad_out, &c.gout);
    for (int k = 0; k < op->nin; k++) {
        if (x->r->t[op->in[k]].kind == GCKPT_T_PARAM || a->grad_in[k] == GCKPT_NOINST) continue;
        if (a->grad_in[k] != a->grad_out) grad_view(x, slot, op->in[k], a->grad_in[k], &c.gin[k]);
        else if ((rc = pass_grad(x, &c, slot, k, a->grad_out, w, err)) != GCKPT_XS_OK) return rc;
    }
    if (gckpt_prim_of(op->prim)->reads_offsets && (rc = grouped_offsets(x, &c, slot, w, err)) != GCKPT_XS_OK) return rc;
    if (op->dequant && (rc = dequant_weight(x, &c, layer, op->bws_fixed, w, err)) != GCKPT_XS_OK) return rc;
    if (op->out[0] == x->r->router_logits[0] && (rc = exec_aux_add(x, layer, c.gout, w, err)) != GCKPT_XS_OK) return rc;
    if (op->out[0] == x->r->loss) {
        /* loss.backward() of the micro-step's mean loss, scaled by 1 / grad_accum */
        rc = x->be->set_scalar(x->be, c.gout, (float)(1.0 / (double)x->set.grad_accum));
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    }
    if (x->mode->run_op) return x->mode->run_op(x, &c, true, w, err);
    rc = x->be->backward(x->be, &c);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

/* ---- gradients and the optimizer ---------------------------------------------------------- */

static gckpt_xstatus ev_grad(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    const gckpt_sum_args *a = &e->arg.sum;
    gckpt_xt dst, lhs, rhs;
    if (!exec_live(x, a->b)) return exec_fail(err, "%s: the added gradient is not allocated", w->at);
    rhs = exec_inst_view(x, a->b);
    if (e->kind == GCKPT_EV_GRAD_ACCUMULATE) {
        param_t *p = exec_param(x, e->tensor, exec_seg_layer(w->seg));
        if (!p || !exec_live(x, p->grad)) return exec_fail(err, "%s: the parameter has no .grad to accumulate into", w->at);
        dst = lhs = exec_inst_view(x, p->grad);
    } else {
        if (!exec_live(x, a->dst)) return exec_fail(err, "%s: the destination is not allocated", w->at);
        dst = exec_inst_view(x, a->dst);
        lhs = (gckpt_xt){NULL, dst.n, dst.dt, 0}; /* GRAD_CAST: dst = rhs converted */
        if (e->kind == GCKPT_EV_GRAD_SUM) {
            if (!exec_live(x, a->a)) return exec_fail(err, "%s: the old gradient is not allocated", w->at);
            lhs = exec_inst_view(x, a->a);
        }
    }
    /* (no recipe sums into a gradient passed through as a part of a wider one: refused
     * rather than summed as if it were whole) */
    int slot = exec_seg_slot(x, w->seg);
    if (e->tensor >= 0 && slot >= 0)
        for (int i = 0; i < 3; i++) {
            uint32_t id = i == 0 ? a->dst : i == 1 ? a->a : a->b;
            const exec_gview *g = gview_at(x, slot, e->tensor);
            if (id != GCKPT_NOINST && g->gen == x->gen && g->inst == id && g->vW)
                return exec_fail(err, "%s: a sum into a strided gradient view is not executed", w->at);
        }
    gckpt_xstatus rc = x->be->add(x->be, dst, lhs, rhs);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

gckpt_optcall exec_optcall(const gckpt_exec *x, gckpt_xt param, gckpt_xt grad, uint64_t step)
{
    return (gckpt_optcall){.kind = x->set.optimizer,
                           .param = param,
                           .grad = grad,
                           .lr = x->o.lr,
                           .beta1 = 0.9,
                           .beta2 = 0.999,
                           .eps = 1e-8,
                           .weight_decay = x->set.optimizer == GCKPT_SGD ? 0.0 : 0.01,
                           .momentum = 0.9,
                           .step = step};
}

static gckpt_xstatus ev_opt(gckpt_exec *x, const exec_site *w, gckpt_err *err)
{
    uint64_t step = x->step + 1;
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (!p->spec->trainable || p->fwd_only) continue; /* frozen: neither gradient nor states */
        if (!exec_live(x, p->grad))
            return exec_fail(err, "%s: parameter %s (layer %d) has no gradient", w->at, x->r->t[p->tensor].name, p->layer);
        gckpt_optcall c = exec_optcall(x, exec_param_view(p), exec_inst_view(x, p->grad), step);
        if (p->spec->nstates >= 1) c.s1 = exec_state_view(p, 0);
        if (p->spec->nstates >= 2) c.s2 = exec_state_view(p, 1);
        if (p->spec->nstates == 4) {
            c.s1_absmax = exec_state_view(p, 2);
            c.s2_absmax = exec_state_view(p, 3);
        }
        if (p->spec->opt_temp.numel) {
            if (!x->opt_temp) return exec_fail(err, "%s: the optimizer temporary is not allocated", w->at);
            c.temp = (gckpt_xt){(char *)x->opt_temp + p->temp_off, p->spec->opt_temp.numel, p->spec->opt_temp.dtype, 0};
        }
        gckpt_xstatus rc = x->be->optim(x->be, &c);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus run_event(gckpt_exec *x, const gckpt_event *e, exec_site *w, gckpt_err *err);

gckpt_xstatus exec_event(gckpt_exec *x, const gckpt_event *e, exec_site *w, gckpt_err *err)
{
    gckpt_xstatus rc = run_event(x, e, w, err);
    if (rc == GCKPT_XS_OK && x->cp) exec_cp_after_event(x, e);
    return rc;
}

static gckpt_xstatus run_event(gckpt_exec *x, const gckpt_event *e, exec_site *w, gckpt_err *err)
{
    exec_where(x, w->seg, w->index, w->at, sizeof w->at);
    /* several ranks: the event a collective belongs to is announced with it (comm.h) */
    if (x->o.comm && x->o.world > 1 && (e->kind == GCKPT_EV_COLLECTIVE || e->kind == GCKPT_EV_OPT_STEP))
        gckpt_comm_label(x->o.comm, w->at);
    switch (e->kind) {
    case GCKPT_EV_ALLOC: case GCKPT_EV_ALLOC_SCRATCH: return ev_alloc(x, e, w, err);
    case GCKPT_EV_FREE: return ev_free(x, e, w, err);
    case GCKPT_EV_TO_CHECKPOINT: /* bookkeeping */
        return exec_live(x, e->inst) ? GCKPT_XS_OK : exec_fail(err, "%s: instance %u is not allocated", w->at, e->inst);
    case GCKPT_EV_BECOME_GRAD: return ev_become_grad(x, e, w, err);
    case GCKPT_EV_HOST_ALLOC: case GCKPT_EV_HOST_FREE: case GCKPT_EV_D2H: case GCKPT_EV_H2D: return ev_host(x, e, w, err);
    case GCKPT_EV_FWD: case GCKPT_EV_RECOMPUTE: return ev_fwd(x, e, w, err);
    case GCKPT_EV_BWD: return ev_bwd(x, e, w, err);
    case GCKPT_EV_GRAD_SUM: case GCKPT_EV_GRAD_CAST: case GCKPT_EV_GRAD_ACCUMULATE: return ev_grad(x, e, w, err);
    case GCKPT_EV_OPT_TEMP_ALLOC: case GCKPT_EV_OPT_TEMP_FREE: return ev_opt_temp(x, e, w, err);
    case GCKPT_EV_OPT_STEP:
        return !w->update      ? GCKPT_XS_OK
               : x->mode->step ? x->mode->step(x, w, err) /* on the rank's shards or partition */
                               : ev_opt(x, w, err);
    case GCKPT_EV_ZERO_GRAD: return zero_grad(x, e, w, err);
    case GCKPT_EV_COLLECTIVE: /* the modes whose wrapper moves data inside the schedule */
        if (x->mode->collective && e->arg.coll.kind < GCKPT_NCOLL) return x->mode->collective(x, e, w, err);
        return exec_fail(err, "%s: a %s between ranks that this mode does not execute", w->at,
                         e->arg.coll.kind < GCKPT_NCOLL ? gckpt_coll_names[e->arg.coll.kind] : "collective");
    default: return exec_fail(err, "%s: unknown event kind", w->at);
    }
}
