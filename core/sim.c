/* The simulator: derives every tensor's lifetime from the recipe and emits the events
 * of a step's segments. Rules (PyTorch autograd + HF checkpointing):
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
 *    first micro-step; later micro-steps accumulate through a temporary;
 *  - what a node keeps as ctx attributes instead of saved tensors (gckpt_op.ctx_keep) lives
 *    as long as the node: until the micro-step's graph is freed with its loss. */
#include "sim.h"
#include "sim_parallel.h"
#include "gckpt/core/parallel.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t bytes, numel;
    uint8_t dtype;
    int consumers, saved, refs;
    int ckpt;       /* checkpoints holding it (a kept input, a mask held by reference) */
    uint8_t comp;
    bool hold, external, is_const, live;
    bool l0_hold;   /* the other layer type's argument than layer 0's: held until layer 0's
                     * backward begins (held_to_layer0) */
    bool view;      /* a gradient that is a view of a larger result: summed out of place */
    bool grad_in_place; /* an op's input whose own storage its backward wrote the input's
                         * gradient into (G_INTO): while a gradient (refs), not freed as an
                         * activation; the bytes stay in the activation's component */
} inst_t;

/* The simulator's view of one section instance (the embedding, a layer, the head). */
typedef struct {
    int inst[GCKPT_MAX_TENSORS];
    int grad[GCKPT_MAX_TENSORS];
    bool saved_reg[GCKPT_MAX_OPS];
    int kept[GCKPT_MAX_OPS];         /* a ctx_keep op's saved instance (valid while saved_reg) */
    bool pgrad[GCKPT_MAX_TENSORS];
    int pend[GCKPT_MAX_TENSORS];     /* a multi-use parameter's gradient being summed */
    uint8_t got[GCKPT_MAX_TENSORS];  /* contributions received so far */
    gckpt_layer_mode mode;
    int sec, in, out;   /* a layer's: its block type's section, that section's input and output */
    bool frozen_in;     /* layer 0 whose input needs no gradient (recipe frozen0) */
    int xin;            /* instance of the block input */
    int mask;           /* this layer's device copy of an offloaded positional mask, or -1 */
    int aux_grad;       /* the load-balancing loss's gradient of this layer's router logits,
                         * waiting for the layer's backward, or -1 */
    uint64_t host;      /* pinned bytes of an offloaded input */
} sec_t;

struct gckpt_sim {
    const gckpt_ctx *c;
    bool grads_exist;
    bool sync;          /* the micro-step reduces the gradients (gckpt_sim_begin) */
    bool z1_bucket_due; /* ZeRO-1's first micro-step: its first reduce hook allocates the ipg bucket */
    bool ddp_sink; /* DDP with every_n off (layer 0 plain): _DDPSink at each forward's end */
    inst_t *pool;
    size_t n, cap;
    sec_t embed, head;
    sec_t *layer;
    int aux_rest[GCKPT_PROXY_LAYERS]; /* the load-balancing loss's gradients held to the embedding's
                                       * backward (a model with fewer layers than the proxy), or -1 */
    int stream;  /* instance of the hidden state passed to the next section */
    int gstream; /* grad instance passed to the previous section in backward */
    bool ckpt_any, ckpt_offload; /* layers are checkpointed / offloaded (ckpt_held tensors) */
    uint8_t ckpt_types;          /* the attention types checkpointed (gckpt_ckpt_types) */
    int sliding_mask;            /* the sliding layers' own eager mask (Gemma 2's second mask,
                                  * layer_type SLIDING) that their attention reads instead of
                                  * the recipe's mask, or -1 */
    uint64_t live;               /* layers whose output reaches the loss (gckpt_step.live_layers) */
    int feat;                    /* with forward-only layers after them: the head's input, the
                                  * last live layer's output; else -1 */
    int lead_layer;              /* the layer the head's lead (gckpt_recipe.lead_end) ran before
                                  * in this micro-step, or -1 */
    bool proxy;                  /* a profile's proxy step (eval.c): its layer 0 is the model's,
                                  * the later ones stand for any layer */
    uint32_t base; /* id of pool[0] */
    uint64_t nlayer_cap, nlayers;
    gckpt_wrap *wrap; /* a parallel wrapper's per-unit events (sim_parallel.c), NULL: none */
    /* the gradient buffers an op made in its forward (gckpt_op.grads_in_fwd), which its
     * backward hands on: the op, or -1, and per input the buffer and how it is received */
    int early_op;
    int early_dst[GCKPT_OP_MAX_IN], early_mode[GCKPT_OP_MAX_IN];
};

uint32_t gckpt_sim_next_id(const gckpt_sim *s) { return s->base + (uint32_t)s->n; }

static uint32_t gid(const gckpt_sim *s, int id) { return id < 0 ? GCKPT_NOINST : s->base + (uint32_t)id; }

/* What op i saves in section st, and whether tensor t needs a gradient there: layer 0 of
 * a frozen embedding without checkpointing has the recipe's frozen0 variant. */
static const int16_t *op_saved(const sec_t *st, const gckpt_op *op, int *n)
{
    *n = st->frozen_in ? op->nsaved0 : op->nsaved;
    return st->frozen_in ? op->saved0 : op->saved;
}

static bool needs_grad(const gckpt_recipe *r, const sec_t *st, int t)
{
    return st->frozen_in ? r->t[t].rg0 : r->t[t].requires_grad;
}

/* ---- instances and memory events ---------------------------------------------------- */

static int inst_new(gckpt_sim *s, uint64_t bytes, uint8_t comp, uint8_t dtype, uint64_t numel)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 4096;
        inst_t *np = realloc(s->pool, nc * sizeof *np);
        if (!np) abort(); /* tiny structs; a failure here is not recoverable */
        s->pool = np;
        s->cap = nc;
    }
    s->pool[s->n] = (inst_t){.bytes = bytes, .numel = numel, .dtype = dtype, .comp = comp, .live = true};
    return (int)s->n++;
}

static gckpt_event *ev_mem(gckpt_sim *s, gckpt_schedule *o, int kind, int id, int16_t tensor)
{
    gckpt_event *e = gckpt_schedule_push(o);
    if (!e) return NULL;
    const inst_t *p = &s->pool[id];
    e->kind = (uint8_t)kind;
    e->comp = p->comp;
    e->tensor = tensor;
    e->inst = gid(s, id);
    e->bytes = p->bytes;
    if (kind == GCKPT_EV_ALLOC || kind == GCKPT_EV_ALLOC_SCRATCH) {
        e->dtype = p->dtype;
        e->numel = p->numel;
    }
    return e;
}

/* A buffer of numel elements of dtype for tensor t (or its gradient: grad). */
static int alloc_buf(gckpt_sim *s, gckpt_schedule *o, int16_t t, uint8_t comp, uint8_t dtype, uint64_t numel,
                     uint64_t bytes, bool grad)
{
    int id = inst_new(s, bytes, comp, dtype, numel);
    gckpt_event *e = ev_mem(s, o, GCKPT_EV_ALLOC, id, t);
    if (e) e->grad = grad;
    return id;
}

/* Tensor t's own buffer. */
static int alloc_tensor(gckpt_sim *s, gckpt_schedule *o, int t, uint8_t comp)
{
    const gckpt_ctx *c = s->c;
    return alloc_buf(s, o, (int16_t)t, comp, c->recipe->t[t].dtype, c->numel[t], c->tbytes[t], false);
}

/* A gradient buffer of tensor t in t's dtype, marked so reports can say "the gradient of X". */
static int alloc_grad(gckpt_sim *s, gckpt_schedule *o, int t, uint8_t comp)
{
    const gckpt_ctx *c = s->c;
    return alloc_buf(s, o, (int16_t)t, comp, c->recipe->t[t].dtype, c->numel[t], c->tbytes[t], true);
}

/* Another buffer like gradient instance g of tensor t. */
static int alloc_grad_like(gckpt_sim *s, gckpt_schedule *o, int t, int g, uint8_t comp)
{
    const inst_t *p = &s->pool[g];
    return alloc_buf(s, o, (int16_t)t, comp, p->dtype, p->numel, p->bytes, true);
}

/* An op's temporaries: an fp32 accumulator of numel elements, or (numel 0) raw bytes. */
static int alloc_scratch(gckpt_sim *s, gckpt_schedule *o, uint64_t bytes, uint8_t comp, uint64_t f32_numel)
{
    int id = inst_new(s, bytes, comp, f32_numel ? GCKPT_DT_F32 : GCKPT_DT_U8, f32_numel ? f32_numel : bytes);
    ev_mem(s, o, GCKPT_EV_ALLOC_SCRATCH, id, -1);
    return id;
}

static void release(gckpt_sim *s, gckpt_schedule *o, int id, int16_t tensor)
{
    inst_t *p = &s->pool[id];
    if (!p->live) return;
    p->live = false;
    ev_mem(s, o, GCKPT_EV_FREE, id, tensor);
}

static void try_free(gckpt_sim *s, gckpt_schedule *o, int id, int16_t tensor)
{
    inst_t *p = &s->pool[id];
    if (p->live && p->consumers <= 0 && p->saved <= 0 && p->ckpt <= 0 && !p->hold && !p->external &&
        !p->is_const && !p->l0_hold && !(p->grad_in_place && p->refs > 0))
        release(s, o, id, tensor);
}

/* A gradient buffer's last holder let it go: freed, or (an input's storage holding its
 * gradient) handed back to its activation's holders. */
static void grad_drop(gckpt_sim *s, gckpt_schedule *o, int g, int16_t t)
{
    if (!s->pool[g].grad_in_place) {
        release(s, o, g, t);
        return;
    }
    s->pool[g].grad_in_place = false;
    try_free(s, o, g, t);
}

int gckpt_sim_buffer_as(gckpt_sim *s, gckpt_schedule *o, int16_t tensor, uint8_t comp, uint8_t dtype, uint64_t numel,
                        uint8_t par)
{
    uint64_t bytes = gckpt_round_up(numel * gckpt_dtype_size((gckpt_dtype)dtype), s->c->dev->alloc_round_bytes);
    int id = inst_new(s, bytes, comp, dtype, numel);
    gckpt_event *e = ev_mem(s, o, tensor < 0 ? GCKPT_EV_ALLOC_SCRATCH : GCKPT_EV_ALLOC, id, tensor);
    if (e) e->par = par;
    return id;
}

int gckpt_sim_buffer(gckpt_sim *s, gckpt_schedule *o, int16_t tensor, uint8_t comp, uint8_t dtype, uint64_t numel)
{
    return gckpt_sim_buffer_as(s, o, tensor, comp, dtype, numel, GCKPT_PE_NONE);
}

void gckpt_sim_release(gckpt_sim *s, gckpt_schedule *o, int id) { release(s, o, id, (int16_t)-1); }

uint32_t gckpt_sim_gid(const gckpt_sim *s, int id) { return gid(s, id); }

/* The wrapper unit of a section state: 0 the embedding, 1 + l layer l, L + 1 the head. */
static uint64_t unit_of(const gckpt_sim *s, const sec_t *st)
{
    if (st == &s->embed) return 0;
    if (st == &s->head) return s->nlayers + 1;
    return (uint64_t)(st - s->layer) + 1;
}

static gckpt_event *ev_compute(gckpt_sim *s, gckpt_schedule *o, int kind, int op)
{
    gckpt_event *e = gckpt_schedule_push(o);
    if (!e) return NULL;
    bool bwd = kind == GCKPT_EV_BWD;
    e->kind = (uint8_t)kind;
    e->op = (int16_t)op;
    e->seconds = s->c->op_s[bwd][op];
    e->flops = s->c->op_flops[bwd][op];
    return e;
}

static void ev_copy(gckpt_sim *s, gckpt_schedule *o, int kind, int tensor, int inst)
{
    gckpt_event *e = gckpt_schedule_push(o);
    if (!e) return;
    const gckpt_ctx *c = s->c;
    e->kind = (uint8_t)kind;
    e->tensor = (int16_t)tensor;
    e->inst = gid(s, inst);
    e->comp = GCKPT_C_CHECKPOINTS;
    e->bytes = c->raw[tensor];
    e->seconds = gckpt_copy_seconds(c->dev, kind == GCKPT_EV_D2H, (double)e->bytes);
}

static void ev_layer_host(gckpt_schedule *o, int kind, int16_t block_in, uint64_t bytes)
{
    gckpt_event *e = gckpt_schedule_push(o);
    if (!e) return;
    e->kind = (uint8_t)kind;
    e->tensor = block_in;
    e->bytes = bytes;
}

/* A gradient sum (GRAD_SUM: dst = a + b), a cast copy (GRAD_CAST: dst = b) or an
 * accumulation into a parameter's .grad (GRAD_ACCUMULATE: .grad += b). */
static void ev_grad(gckpt_sim *s, gckpt_schedule *o, int kind, int16_t tensor, int dst, int a, int b)
{
    gckpt_event *e = gckpt_schedule_push(o);
    if (!e) return;
    e->kind = (uint8_t)kind;
    e->tensor = tensor;
    e->arg.sum.dst = gid(s, dst);
    e->arg.sum.a = gid(s, a);
    e->arg.sum.b = gid(s, b);
    e->bytes = s->pool[b].bytes;
    e->seconds = 3.0 * (double)e->bytes / (s->c->dev->hbm_bytes_per_s * s->c->dev->hbm_efficiency);
}

/* ---- sections ------------------------------------------------------------------------ */

gckpt_sim *gckpt_sim_new(void) { return calloc(1, sizeof(gckpt_sim)); }

bool gckpt_sim_begin(gckpt_sim *s, const gckpt_ctx *c, const gckpt_step *st, bool grads_exist, bool sync,
                     uint32_t first_id)
{
    uint64_t layers = st->layers ? st->layers : 1;
    if (layers > s->nlayer_cap) {
        sec_t *nl = realloc(s->layer, layers * sizeof *nl);
        if (!nl) return false;
        s->layer = nl;
        s->nlayer_cap = layers;
    }
    s->c = c;
    s->nlayers = layers;
    for (int l = 0; l < GCKPT_PROXY_LAYERS; l++) s->aux_rest[l] = -1;
    if (gckpt_wrap_active(c)) {
        /* the wrapper reduces gradients in the synchronising micro-step (the step's last) */
        if (!s->wrap && !(s->wrap = gckpt_wrap_new())) return false;
        if (!gckpt_wrap_begin(s->wrap, c, layers, sync, !grads_exist)) return false;
        gckpt_wrap_frozen_input(s->wrap, c->recipe->frozen0 && (st->modes ? st->modes[0] == GCKPT_LAYER_PLAIN : !st->every_n));
    } else if (s->wrap) {
        gckpt_wrap_free(s->wrap);
        s->wrap = NULL;
    }
    s->grads_exist = grads_exist && gckpt_wrap_grads_kept(c);
    s->sync = sync;
    s->z1_bucket_due = gckpt_layout_ipg_bucket_event(&c->set.layout) && !grads_exist;
    /* the Trainer's find_unused_parameters: on without gradient checkpointing (FINDINGS R-DIST-1);
     * layer 0 is checkpointed under every every_n, so a plain layer 0 is every_n off */
    s->ddp_sink = gckpt_par_mode_of(c->set.layout.mode)->sink_clones_logits && (st->modes ? st->modes[0] == GCKPT_LAYER_PLAIN : !st->every_n);
    s->n = 0;
    s->base = first_id;
    s->stream = s->gstream = -1;
    gckpt_step_checkpointing(st, &s->ckpt_any, &s->ckpt_offload);
    s->ckpt_types = st->modes ? st->ckpt_types : gckpt_ckpt_types(c->model, st->every_n);
    s->sliding_mask = -1;
    s->early_op = -1;
    s->proxy = st->modes != NULL;
    s->live = st->live_layers && st->live_layers < layers ? st->live_layers : layers;
    s->feat = -1;
    s->lead_layer = -1;
    const gckpt_recipe *r = c->recipe;
    for (int t = 0; r->mask >= 0 && t < r->nt; t++)
        if (t != r->mask && r->t[t].kind == GCKPT_T_CONST && r->t[t].layer_type == GCKPT_LT_SLIDING &&
            r->t[t].section == GCKPT_SEC_EMBED && !r->t[t].shape.width)
            s->sliding_mask = t;
    return true;
}

void gckpt_sim_free(gckpt_sim *s)
{
    if (!s) return;
    free(s->pool);
    free(s->layer);
    gckpt_wrap_free(s->wrap);
    free(s);
}

/* Checkpointed layers keep their arguments by reference: keyword arguments, and a
 * positional input that is not offloaded (gpt2's mask). */
static bool ckpt_holds(const gckpt_sim *s, int t)
{
    const gckpt_recipe *r = s->c->recipe;
    if (r->t[t].layer_type) /* one layer type's argument: held when a layer of that type is checkpointed */
        return r->t[t].ckpt_held && (s->ckpt_types >> (r->t[t].layer_type - 1) & 1);
    return r->t[t].ckpt_held && s->ckpt_any && !(s->ckpt_offload && t == r->mask && r->mask_positional);
}

/* The attention type of the model's layer 0 (gckpt_layer_type). */
static int layer0_type(const gckpt_sim *s)
{
    return gckpt_layer_sliding(s->c->model, 0) ? GCKPT_LT_SLIDING : GCKPT_LT_FULL;
}

/* Two layer types: an argument of the other type than layer 0's stays alive past the base
 * model's return while a layer of its type refers to it: a checkpointed one (its frame
 * holds its keyword arguments until its backward ends) or, for a rotary pair, any (a plain
 * layer's rope saves it). In the backward that ends in the lowest such layer, which a
 * profile's proxy step cannot place (eval.c): it is held until layer 0's backward begins
 * instead, exact there and in the embedding's backward (FINDINGS R-FAM-14). */
static bool held_to_layer0(const gckpt_sim *s, int t)
{
    const gckpt_recipe *r = s->c->recipe;
    int lt = r->t[t].layer_type;
    if (!lt || lt == layer0_type(s)) return false;
    bool pair = false;
    for (int k = 0; k < 2; k++) pair |= t == r->rope[k] || t == r->rope_local[k];
    return pair || ckpt_holds(s, t);
}

static sec_t *owner(gckpt_sim *s, sec_t *st, int t)
{
    int sec = s->c->recipe->t[t].section;
    if (sec == GCKPT_SEC_EMBED) return &s->embed;
    if (sec == GCKPT_SEC_HEAD) return &s->head;
    return st;
}

/* The argument a layer reads where the traced block reads tensor t: a sliding layer of a
 * model with two layer types reads its type's mask (Gemma 2/3, Qwen2/3 with some sliding
 * layers: `causal_mask_mapping[layer_type]`) and rotary pair (Gemma 3:
 * `position_embeddings[layer_type]`). The model's layers in a walk; in a profile's proxy
 * step layer 0 only (the later layers stand for either type: what they read is
 * an embedding constant, and held_to_layer0 releases the other type's where both agree). */
static int layer_arg(const gckpt_sim *s, const sec_t *st, int t)
{
    const gckpt_recipe *r = s->c->recipe;
    if (st < s->layer || st >= s->layer + s->nlayers) return t;
    uint64_t l = (uint64_t)(st - s->layer);
    if ((s->proxy && l) || !gckpt_layer_sliding(s->c->model, l)) return t;
    if (t == r->mask && s->sliding_mask >= 0) return s->sliding_mask;
    for (int k = 0; k < 2; k++)
        if (t == r->rope[k] && r->rope_local[k] >= 0) return r->rope_local[k];
    return t;
}

/* The data instance slot of tensor t as seen from section state st. */
static int *slot(gckpt_sim *s, sec_t *st, int t)
{
    if (t == s->c->recipe->mask && st->mask >= 0) return &st->mask;
    t = layer_arg(s, st, t);
    return &owner(s, st, t)->inst[t];
}

static void init_sec(sec_t *st)
{
    for (int i = 0; i < GCKPT_MAX_TENSORS; i++) st->inst[i] = st->grad[i] = -1;
    st->aux_grad = -1;
    memset(st->saved_reg, 0, sizeof st->saved_reg);
    memset(st->pgrad, 0, sizeof st->pgrad);
    memset(st->got, 0, sizeof st->got);
    for (int i = 0; i < GCKPT_MAX_TENSORS; i++) st->pend[i] = -1;
    st->xin = -1;
    st->mask = -1;
    st->frozen_in = false;
    st->host = 0;
    st->mode = GCKPT_LAYER_PLAIN;
    st->sec = st->in = st->out = -1;
}

/* ---- forward --------------------------------------------------------------------------- */

enum { MODE_SAVE, MODE_NOSAVE, MODE_RECOMPUTE };

/* The outputs of forward op i: allocated with their consumers and holds. */
static void fwd_outputs(gckpt_sim *s, sec_t *st, int i, int mode, const int *cons, bool *made, int sec_out,
                        gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    const gckpt_op *op = &r->op[i];
    for (int k = 0; k < 2; k++) {
        int t = op->out[k];
        if (t < 0) continue;
        const gckpt_tensor *tt = &r->t[t];
        uint8_t comp = GCKPT_C_ACTIVATIONS;
        if (tt->logits) comp = GCKPT_C_LOGITS;
        else if (tt->kind == GCKPT_T_WCAST) comp = GCKPT_C_WEIGHT_CASTS;
        else if (mode == MODE_RECOMPUTE) comp = GCKPT_C_RECOMPUTE;
        /* the head's view of the layers' router logits: counted in the layers */
        int id = t == r->router_logits[1] ? alloc_buf(s, o, (int16_t)t, comp, tt->dtype, 0, 0, false)
                                          : alloc_tensor(s, o, t, comp);
        inst_t *p = &s->pool[id];
        p->consumers = cons[t];
        p->is_const = tt->step_held;
        /* held until the forward ends; in a recompute autocast's weight-cast cache
         * lives until the recompute ends (it re-enters autocast) */
        p->hold = tt->fwd_end_free && (mode != MODE_RECOMPUTE || tt->kind == GCKPT_T_WCAST);
        p->external = t == sec_out || t == r->loss;
        if (held_to_layer0(s, t)) p->l0_hold = true;
        else if (ckpt_holds(s, t)) p->ckpt = 1;
        st->inst[t] = id;
        made[t] = true;
    }
}

/* Python references tensor t held (recipe.h, hold_to) end. */
static void unhold(gckpt_sim *s, sec_t *st, int t, const bool *made, gckpt_schedule *o)
{
    int id = st->inst[t];
    if (!made[t] || id < 0) return;
    s->pool[id].consumers--;
    try_free(s, o, id, (int16_t)t);
}

/* Run the forward ops [begin, end) of a section (begin -1: its first). save_only_last: the last op only
 * saves its inputs (a recompute stops there, before computing its output). Python
 * references (recipe.h, hold_to) count as one more consumer each, released after the
 * op that ends them, or all at once when a recompute stops before that op (the
 * exception unwinds HF's frames). */
static void early_grads(gckpt_sim *s, sec_t *st, int i, gckpt_schedule *o);

static void sim_fwd(gckpt_sim *s, sec_t *st, int sec, int mode, int begin, int end, bool save_only_last, int sec_in,
                    int sec_out, gckpt_schedule *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    if (begin < 0) begin = r->sec_begin[sec];
    int send = r->sec_end[sec];
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
    int released = end; /* ops from here on have their Python references dropped at the end */
    /* a recompute's ctx attributes (ctx_keep): its nodes stay reachable from the tensors
     * HF's frames hold until the recompute ends (FINDINGS R-QUANT-10) */
    int ctx_id[GCKPT_MAX_OPS];
    int16_t ctx_t[GCKPT_MAX_OPS];
    int nctx = 0;
    for (int i = begin; i < end; i++) {
        const gckpt_op *op = &r->op[i];
        bool save_only = save_only_last && i == end - 1;
        if (s->wrap && !save_only)
            gckpt_wrap_op(s->wrap, s, o, unit_of(s, st), i, mode == MODE_RECOMPUTE ? GCKPT_WRAP_PRE_RECOMPUTE : GCKPT_WRAP_PRE_FWD);
        /* Liger's fused loss makes its input gradients first (zeros_like), then its
         * temporaries and its output */
        if (op->grads_in_fwd && mode == MODE_SAVE) early_grads(s, st, i, o);
        int fws = -1; /* the op's forward temporaries (CPU target), made with its output */
        if (!save_only && !c->fwd_view[i] && c->op_ws[0][i])
            fws = alloc_scratch(s, o, c->op_ws[0][i], mode == MODE_RECOMPUTE ? GCKPT_C_RECOMPUTE : GCKPT_C_ACTIVATIONS, 0);
        if (c->fwd_view[i]) {
            /* a view: the output is input 0's storage, with the output's consumers */
            int id = *slot(s, st, op->in[0]);
            s->pool[id].consumers += cons[op->out[0]];
            st->inst[op->out[0]] = id;
            made[op->out[0]] = true;
        } else if (!save_only) {
            fwd_outputs(s, st, i, mode, cons, made, sec_out, o);
        }
        /* a custom Function's output is made before its inputs are saved: the stop drops it */
        int dropped = save_only && op->out_before_save && op->out[0] >= 0 ? alloc_tensor(s, o, op->out[0], GCKPT_C_RECOMPUTE)
                                                                         : -1;
        gckpt_event *e = ev_compute(s, o, mode == MODE_RECOMPUTE ? GCKPT_EV_RECOMPUTE : GCKPT_EV_FWD, i);
        if (e) {
            for (int k = 0; k < GCKPT_OP_MAX_IN; k++)
                e->arg.fwd.in[k] = k < op->nin && r->t[op->in[k]].kind != GCKPT_T_PARAM ? gid(s, *slot(s, st, op->in[k]))
                                                                                      : GCKPT_NOINST;
            for (int k = 0; k < 2; k++)
                e->arg.fwd.out[k] = !save_only && op->out[k] >= 0 ? gid(s, st->inst[op->out[k]]) : GCKPT_NOINST;
            if (dropped >= 0) e->arg.fwd.out[0] = gid(s, dropped);
            e->arg.fwd.workspace = fws >= 0 ? gid(s, fws) : GCKPT_NOINST;
            /* a view, or a recompute that stops once the op saved its inputs: no work (a
             * custom Function's output made first: its work, not handed on) */
            if ((save_only && dropped < 0) || c->fwd_view[i]) e->seconds = e->flops = 0;
        }
        if (dropped >= 0) release(s, o, dropped, op->out[0]);
        if (fws >= 0) release(s, o, fws, -1);
        /* ctx attributes (ctx_keep) are kept by the first forward's node, checkpointed or
         * not, until the micro-step's graph is freed (free_graph_kept); a non-reentrant
         * recompute's node keeps its own only until the recompute ends (below) */
        bool keep = op->ctx_keep && mode == MODE_NOSAVE && !c->set.reentrant; /* reentrant: no graph */
        int nsaved;
        const int16_t *saved = op_saved(st, op, &nsaved);
        if ((mode != MODE_NOSAVE && !(op->ctx_keep && mode == MODE_RECOMPUTE && st->saved_reg[i])) ||
            (mode == MODE_NOSAVE && keep)) {
            for (int k = 0; k < nsaved; k++) s->pool[*slot(s, st, saved[k])].saved++;
            st->saved_reg[i] = nsaved > 0;
            /* the instance itself: a recompute makes the tensor again */
            if (op->ctx_keep && nsaved) st->kept[i] = *slot(s, st, saved[0]);
        } else if (!(op->ctx_keep && st->saved_reg[i])) {
            st->saved_reg[i] = false;
        }
        for (int k = 0; mode == MODE_RECOMPUTE && op->ctx_keep && k < nsaved && nctx < GCKPT_MAX_OPS; k++) {
            ctx_id[nctx] = *slot(s, st, saved[k]);
            ctx_t[nctx] = saved[k];
            s->pool[ctx_id[nctx++]].consumers++;
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
        if (c->op_gather[i]) /* TP: the output redistributed once the op's inputs are released (R-TP-15) */
            release(s, o, alloc_scratch(s, o, c->op_gather[i], mode == MODE_RECOMPUTE ? GCKPT_C_RECOMPUTE : GCKPT_C_ACTIVATIONS, 0), -1);
        for (int k = 0; k < op->nunhold; k++) unhold(s, st, op->unhold[k], made, o);
        for (int k = 0; k < 2; k++)
            if (op->out[k] >= 0) try_free(s, o, st->inst[op->out[k]], op->out[k]);
        if (s->wrap)
            gckpt_wrap_op(s->wrap, s, o, unit_of(s, st), i, mode == MODE_RECOMPUTE ? GCKPT_WRAP_POST_RECOMPUTE : GCKPT_WRAP_POST_FWD);
    }
    /* a recompute ends: its autocast cache goes */
    for (int t = 0; mode == MODE_RECOMPUTE && t < r->nt; t++)
        if (made[t] && r->t[t].kind == GCKPT_T_WCAST && st->inst[t] >= 0) {
            s->pool[st->inst[t]].hold = false;
            try_free(s, o, st->inst[t], (int16_t)t);
        }
    /* a recompute that stopped early: HF's frames unwind, every reference goes */
    for (int i = released; i < send; i++)
        for (int k = 0; k < r->op[i].nunhold; k++) unhold(s, st, r->op[i].unhold[k], made, o);
    for (int k = 0; k < nctx; k++) {
        s->pool[ctx_id[k]].consumers--;
        try_free(s, o, ctx_id[k], ctx_t[k]);
    }
}

/* ---- gradients --------------------------------------------------------------------------- */

/* The buffer a parameter's gradient is written to: its new .grad on the first
 * contribution of the first micro-step, else a temporary (*temp = true) that is then
 * accumulated into .grad (AccumulateGrad) and released. */
static int param_grad(gckpt_sim *s, sec_t *st, int t, bool view, gckpt_schedule *o, bool *temp)
{
    const gckpt_param *p = gckpt_params_of(&s->c->params, t);
    sec_t *ow = owner(s, st, t);
    int16_t tt = (int16_t)t;
    if (s->c->recipe->t[t].uses > 1) {
        /* the autograd engine sums a tied weight's contributions in AccumulateGrad's
         * input buffer, which lives until the last use's backward has run */
        ow->got[t]++;
        if (ow->pend[t] < 0) {
            *temp = false;
            ow->pend[t] = alloc_buf(s, o, tt, GCKPT_C_BACKWARD, p->grad.dtype, p->grad.numel, p->grad.bytes, true);
            s->pool[ow->pend[t]].view = view;
            return ow->pend[t];
        }
        *temp = true;
        return alloc_buf(s, o, tt, GCKPT_C_BACKWARD, p->grad.dtype, p->grad.numel, p->grad.bytes, true);
    }
    if (s->grads_exist || ow->pgrad[t]) {
        *temp = true;
        return alloc_buf(s, o, tt, GCKPT_C_BACKWARD, p->grad.dtype, p->grad.numel, p->grad.bytes, true);
    }
    *temp = false;
    ow->pgrad[t] = true;
    int id = alloc_buf(s, o, tt, GCKPT_C_GRADS, p->grad.dtype, p->grad.numel, p->grad.bytes, true);
    if (s->wrap) gckpt_wrap_grad_made(s->wrap, unit_of(s, ow), t, gid(s, id));
    return id;
}

/* ZeRO-1: DeepSpeed allocates the ipg bucket (reduce_bucket_size elements of the model dtype,
 * overlap_comm: two) at the first gradient hook of the step's first backward (setup_buckets in
 * process_gradients, once a parameter's AccumulateGrad has run) and frees it at the boundary's
 * epilogue; here when the first op whose input is a trainable parameter not tied to another use
 * has run its backward. The optimizer step releases it (core/parallel.c: step_released). */
static void z1_bucket(gckpt_sim *s, const gckpt_op *op, gckpt_schedule *o)
{
    const gckpt_ctx *c = s->c;
    for (int k = 0; k < op->nin; k++) {
        const gckpt_param *p = gckpt_params_of(&c->params, op->in[k]);
        if (!p || !p->trainable || c->recipe->t[op->in[k]].uses > 1) continue;
        uint8_t dt = c->set.precision == GCKPT_FP32 ? GCKPT_DT_F32 : GCKPT_DT_BF16;
        for (uint64_t b = 0; b < gckpt_ds_ipg_buckets(&c->set.layout); b++)
            gckpt_sim_buffer_as(s, o, -1, GCKPT_C_PARALLEL, dt, gckpt_ds_reduce_bucket(c->model, &c->set.layout),
                                GCKPT_PE_IPG_BUCKET);
        s->z1_bucket_due = false;
        return;
    }
}

static int grad_comp(const gckpt_recipe *r, int t)
{
    return r->t[t].logits ? GCKPT_C_LOGITS : GCKPT_C_BACKWARD;
}

static void grad_release(gckpt_sim *s, sec_t *st, int t, gckpt_schedule *o)
{
    sec_t *ow = owner(s, st, t);
    int g = ow->grad[t];
    if (g < 0) return;
    ow->grad[t] = -1;
    if (--s->pool[g].refs <= 0) grad_drop(s, o, g, (int16_t)t);
}

/* The autograd engine's InputBuffer: a second contribution tmp to a gradient buffer g
 * of tensor t (refs holders) is added in place when g is its storage's only reference,
 * else g + tmp goes into a new buffer (g shared with another branch, g a view; torch's
 * can_accumulate_inplace). g's slot is overwritten (its last holder frees it), tmp
 * freed. Returns the buffer holding the sum. */
static int sum_into(gckpt_sim *s, int16_t t, int g, int tmp, uint8_t comp, gckpt_schedule *o)
{
    inst_t *p = &s->pool[g];
    if (p->refs <= 1 && !p->view) {
        ev_grad(s, o, GCKPT_EV_GRAD_SUM, t, g, g, tmp);
        release(s, o, tmp, t);
        return g;
    }
    int nb = alloc_grad_like(s, o, t, g, comp);
    ev_grad(s, o, GCKPT_EV_GRAD_SUM, t, nb, g, tmp);
    s->pool[nb].refs = 1;
    if (--s->pool[g].refs <= 0) grad_drop(s, o, g, t);
    release(s, o, tmp, t);
    return nb;
}

/* Gradient contribution tmp (a temporary) for tensor t: becomes t's gradient as a
 * converted copy when there is none yet, else is summed as the engine does. */
static void accumulate(gckpt_sim *s, sec_t *st, int t, int tmp, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    sec_t *ow = owner(s, st, t);
    int g = ow->grad[t];
    if (g < 0) {
        int nb = alloc_grad(s, o, t, (uint8_t)grad_comp(r, t));
        ev_grad(s, o, GCKPT_EV_GRAD_CAST, (int16_t)t, nb, -1, tmp);
        s->pool[nb].refs = 1;
        ow->grad[t] = nb;
        release(s, o, tmp, (int16_t)t);
        return;
    }
    ow->grad[t] = sum_into(s, (int16_t)t, g, tmp, (uint8_t)grad_comp(r, t), o);
}

static void drop_saved(gckpt_sim *s, sec_t *st, int i, gckpt_schedule *o)
{
    const gckpt_op *op = &s->c->recipe->op[i];
    int nsaved;
    const int16_t *saved = op_saved(st, op, &nsaved);
    for (int k = 0; k < nsaved; k++) {
        int t = saved[k];
        int id = op->ctx_keep ? st->kept[i] : *slot(s, st, t);
        s->pool[id].saved--;
        try_free(s, o, id, (int16_t)t);
    }
    st->saved_reg[i] = false;
}

/* The tensors op i saved are released (once), after its backward (the engine's
 * release_variables). Not a ctx_keep op's: release_variables clears a Python node's saved
 * tensors only, its ctx attributes live as long as the node, i.e. its graph
 * (free_graph_kept). */
static void release_saved(gckpt_sim *s, sec_t *st, int i, gckpt_schedule *o)
{
    if (!st->saved_reg[i] || s->c->recipe->op[i].ctx_keep) return;
    drop_saved(s, st, i, o);
}

/* The graph that holds section st's nodes is freed: the ctx attributes of its ctx_keep ops
 * go (bitsandbytes' int8 ctx.A, FINDINGS R-QUANT-16). The forward's graph goes with the loss when
 * the micro-step's backward is over (every layer's, checkpointed or not: the GRAPH_FREED
 * rows); a reentrant recompute's when CheckpointFunction.backward returns (its `outputs`). */
static void free_graph_kept(gckpt_sim *s, sec_t *st, int sec, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    for (int i = r->sec_begin[sec]; i < r->sec_end[sec]; i++)
        if (r->op[i].ctx_keep && st->saved_reg[i]) drop_saved(s, st, i, o);
}

/* ---- backward ---------------------------------------------------------------------------- */

/* How the gradient of an op's input k is received. */
enum {
    G_NONE,      /* no gradient */
    G_NEW,       /* a fresh buffer: the input's first gradient */
    G_ALIAS,     /* the output's gradient itself (add, view) */
    G_ACC,       /* a temporary summed into the existing gradient afterwards */
    G_PARAM,     /* the parameter's .grad (or a tied weight's summing buffer) */
    G_PARAM_ACC, /* a temporary accumulated into the parameter's .grad afterwards */
    G_WIDE,      /* made in the output's wider dtype, cast afterwards */
    G_CAST,      /* (after the cast) the cast copy */
    G_BLOCK,     /* a role's block of the packed tensor's one gradient (gpt2's q/k/v) */
    G_INTO,      /* the input's own storage (gckpt_op.grad_into_in: Liger's SwiGLU) */
};

/* One op's backward in progress: the buffers its gradients go to. */
typedef struct {
    int i;
    int mode[GCKPT_OP_MAX_IN], dst[GCKPT_OP_MAX_IN];
    int gout, ws, promo;
} bwd_op;

/* 1. The buffers op b->i's backward writes, in the order the kernel makes them: the
 * CPU target's promoted operands last, their copy released before. */
static void bwd_buffers(gckpt_sim *s, sec_t *st, bwd_op *b, gckpt_schedule *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    const gckpt_op *op = &r->op[b->i];
    /* mul of a 16-bit and a 32-bit tensor computes the 16-bit input's gradient in
     * fp32; the engine casts it to the input's dtype afterwards */
    uint8_t out_dt = op->out[0] >= 0 ? r->t[op->out[0]].dtype : GCKPT_DT_F32;
    int order[GCKPT_OP_MAX_IN], no = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < op->nin; k++)
            if (((op->bws_promote >> k) & 1) == pass) order[no++] = k;
    for (int j = 0; j < op->nin; j++) {
        int k = order[j];
        if (b->promo >= 0 && (op->bws_promote & (1u << k))) {
            release(s, o, b->promo, -1);
            b->promo = -1;
        }
        int t = op->in[k];
        b->dst[k] = -1;
        b->mode[k] = G_NONE;
        if (!needs_grad(r, st, t)) continue;
        bool dup = false; /* the same tensor twice (q = k = v views): one grad */
        for (int q = 0; q < k; q++) dup |= op->in[q] == t;
        if (dup) continue;
        if (r->t[t].kind == GCKPT_T_PARAM) {
            bool temp;
            b->dst[k] = param_grad(s, st, t, op->grad_view[k], o, &temp);
            b->mode[k] = temp ? G_PARAM_ACC : G_PARAM;
            continue;
        }
        sec_t *ow = owner(s, st, t);
        int g = ow->grad[t], in = (op->grad_into_in >> k) & 1 ? *slot(s, st, t) : -1;
        if (g < 0 && in >= 0 && s->pool[in].live) {
            /* the kernel overwrites the saved input, which nothing reads after it: the
             * input's buffer is its gradient from now on, nothing is allocated */
            ow->grad[t] = in;
            s->pool[in].refs = 1;
            s->pool[in].grad_in_place = true;
            b->dst[k] = in;
            b->mode[k] = G_INTO;
        } else if ((op->grad_in_gout >> k) & 1) {
            /* the kernel writes the gradient over the output's (Liger's RMSNorm): that
             * buffer is the input's first gradient, or summed into its existing one (the engine
             * then drops it) */
            s->pool[b->gout].refs++;
            b->dst[k] = b->gout;
            b->mode[k] = g < 0 ? G_ALIAS : G_ACC;
            if (g < 0) ow->grad[t] = b->gout;
        } else if (g < 0 && op->grad_alias[k]) {
            ow->grad[t] = b->gout;
            s->pool[b->gout].refs++;
            b->dst[k] = b->gout;
            b->mode[k] = G_ALIAS;
        } else if (op->prim == GCKPT_P_MUL &&
                   gckpt_dtype_bits((gckpt_dtype)out_dt) > gckpt_dtype_bits((gckpt_dtype)r->t[t].dtype)) {
            uint64_t wide = gckpt_round_up(c->numel[t] * gckpt_dtype_size((gckpt_dtype)out_dt), c->dev->alloc_round_bytes);
            b->dst[k] = alloc_buf(s, o, (int16_t)t, (uint8_t)grad_comp(r, t), out_dt, c->numel[t], wide, true);
            b->mode[k] = G_WIDE;
        } else if (g >= 0 && op->prim == GCKPT_P_SPLIT && op->view_fwd) {
            /* a role of a packed tensor: its block of the one gradient buffer */
            b->dst[k] = g;
            b->mode[k] = G_BLOCK;
        } else if (g < 0) {
            b->dst[k] = alloc_grad(s, o, t, (uint8_t)grad_comp(r, t));
            s->pool[b->dst[k]].refs = 1;
            s->pool[b->dst[k]].view = op->grad_view[k];
            ow->grad[t] = b->dst[k];
            b->mode[k] = G_NEW;
        } else {
            b->dst[k] = alloc_grad(s, o, t, (uint8_t)grad_comp(r, t));
            b->mode[k] = G_ACC;
        }
    }
    if (b->promo >= 0) release(s, o, b->promo, -1);
}

/* An op's input gradients made by its forward (grads_in_fwd): the buffers its backward
 * would have made, in the same order, kept for its backward (sim_bwd). */
static void early_grads(gckpt_sim *s, sec_t *st, int i, gckpt_schedule *o)
{
    bwd_op b = {.i = i, .gout = -1, .ws = -1, .promo = -1};
    bwd_buffers(s, st, &b, o);
    s->early_op = i;
    for (int k = 0; k < GCKPT_OP_MAX_IN; k++) {
        s->early_dst[k] = k < s->c->recipe->op[i].nin ? b.dst[k] : -1;
        s->early_mode[k] = k < s->c->recipe->op[i].nin ? b.mode[k] : G_NONE;
    }
}

/* 2. After the kernel: it drops its workspace; the engine casts a gradient made in a
 * wider dtype to its input's (validate_outputs), then drops the node's incoming
 * gradients, then its saved tensors (release_variables). A recomputed layer's saved
 * tensors go first: the checkpoint drops its reference when the node unpacks them, so
 * they die with the node's apply, before the cast. */
static void bwd_release(gckpt_sim *s, sec_t *st, bwd_op *b, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    const gckpt_op *op = &r->op[b->i];
    if (b->ws >= 0) release(s, o, b->ws, -1);
    b->ws = -1;
    if (st->mode != GCKPT_LAYER_PLAIN) release_saved(s, st, b->i, o);
    for (int k = 0; k < op->nin; k++) {
        if (b->mode[k] != G_WIDE) continue;
        int t = op->in[k];
        int nb = alloc_grad(s, o, t, (uint8_t)grad_comp(r, t));
        ev_grad(s, o, GCKPT_EV_GRAD_CAST, (int16_t)t, nb, -1, b->dst[k]);
        release(s, o, b->dst[k], (int16_t)t);
        b->dst[k] = nb;
        b->mode[k] = G_CAST;
    }
    for (int k = 0; k < 2; k++)
        if (op->out[k] >= 0) grad_release(s, st, op->out[k], o);
    release_saved(s, st, b->i, o);
}

/* A tied parameter's contribution arrived: once all have, the sum becomes .grad (first
 * micro-step) or is accumulated into it. */
static void tied_param_grad(gckpt_sim *s, sec_t *st, int t, int mode, int dst, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    sec_t *ow = owner(s, st, t);
    int pend = ow->pend[t];
    if (mode == G_PARAM_ACC) pend = ow->pend[t] = sum_into(s, (int16_t)t, pend, dst, GCKPT_C_BACKWARD, o);
    if (ow->got[t] != r->t[t].uses) return;
    if (!s->grads_exist && !ow->pgrad[t]) {
        gckpt_event *e = ev_mem(s, o, GCKPT_EV_BECOME_GRAD, pend, (int16_t)t);
        if (e) e->comp = GCKPT_C_BACKWARD;
        s->pool[pend].comp = GCKPT_C_GRADS;
        s->pool[pend].live = false; /* owned by .grad from now on */
        if (s->wrap) gckpt_wrap_grad_made(s->wrap, unit_of(s, ow), t, gid(s, pend));
        ow->pgrad[t] = true;
    } else {
        ev_grad(s, o, GCKPT_EV_GRAD_ACCUMULATE, (int16_t)t, -1, -1, pend);
        release(s, o, pend, (int16_t)t);
    }
    ow->pend[t] = -1;
    ow->got[t] = 0;
}

/* 3. Accumulate second contributions, then drop the temporaries. */
static void bwd_accumulate(gckpt_sim *s, sec_t *st, bwd_op *b, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    const gckpt_op *op = &r->op[b->i];
    for (int k = 0; k < op->nin; k++) {
        int t = op->in[k], mode = b->mode[k];
        if ((mode == G_PARAM || mode == G_PARAM_ACC) && r->t[t].uses > 1) {
            tied_param_grad(s, st, t, mode, b->dst[k], o);
        } else if (mode == G_PARAM_ACC) {
            ev_grad(s, o, GCKPT_EV_GRAD_ACCUMULATE, (int16_t)t, -1, -1, b->dst[k]);
            release(s, o, b->dst[k], (int16_t)t);
        } else if (mode == G_CAST && owner(s, st, t)->grad[t] < 0) {
            owner(s, st, t)->grad[t] = b->dst[k]; /* the cast copy is the gradient */
            s->pool[b->dst[k]].refs = 1;
        } else if (mode == G_CAST || mode == G_ACC) {
            accumulate(s, st, t, b->dst[k], o);
        }
    }
    if (b->ws >= 0) release(s, o, b->ws, -1);
}

/* The backward workspace of op i: SDPA's fp32 dq accumulator alone is typed, the
 * temporaries of pow, rsqrt and a broadcast operand are raw bytes. */
static int bwd_workspace(gckpt_sim *s, int i, gckpt_schedule *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_op *op = &c->recipe->op[i];
    if (!c->op_ws[1][i]) return -1;
    uint64_t f32 = op->bws_cT && !op->bws_in && !op->bws_out ? op->bws_cT * c->tokens : 0;
    return alloc_scratch(s, o, c->op_ws[1][i], GCKPT_C_BACKWARD, f32);
}

/* Backward of ops [begin, end) of a section in reverse (end < 0: to the section's end). */
/* The load-balancing loss's gradient of every layer's router logits (the head's view t,
 * recipe router_logits[1]): autograd keeps one [T, E] per layer in the input buffer of
 * that layer's router until its backward sums the router's own gradient into it and
 * runs the linear's backward (FINDINGS R-MOE-4). A profile's proxy step (eval.c) simulates
 * a few layers, each releasing its own; the model's other layers' are allocated too,
 * their releases being the proxy layers' summaries repeated. A model with fewer layers
 * than the proxy keeps them all until the embedding's backward (an upper bound for the
 * layers' backward), so that the proxy and the full step agree. */
static void router_grads_to_layers(gckpt_sim *s, sec_t *st, int t, gckpt_schedule *o)
{
    int g = owner(s, st, t)->grad[t];
    if (g < 0) return;
    uint64_t L = s->c->model->layers, n = L >= GCKPT_PROXY_LAYERS ? s->nlayers : 0;
    inst_t p = s->pool[g]; /* alloc_buf may move the pool */
    grad_release(s, st, t, o);
    /* one allocation per layer, rounded as any (gckpt-run found a layer's [T, E] bf16
     * buffer of less than a granule counted unrounded) */
    uint64_t per = p.numel / L, pb = gckpt_round_up(per * gckpt_dtype_size((gckpt_dtype)p.dtype),
                                                    s->c->dev->alloc_round_bytes);
    for (uint64_t l = 0; l < n; l++)
        s->layer[l].aux_grad = alloc_buf(s, o, (int16_t)t, GCKPT_C_BACKWARD, p.dtype, per, pb, true);
    if (n == 0)
        for (uint64_t l = 0; l < L; l++)
            s->aux_rest[l] = alloc_buf(s, o, (int16_t)t, GCKPT_C_BACKWARD, p.dtype, per, pb, true);
    else if (L > n) /* a proxy's rest: released by the repeated summaries */
        (void)alloc_buf(s, o, (int16_t)t, GCKPT_C_BACKWARD, p.dtype, per * (L - n), pb * (L - n), true);
}

static void sim_bwd(gckpt_sim *s, sec_t *st, int sec, int begin, int end, gckpt_schedule *o)
{
    const gckpt_ctx *c = s->c;
    const gckpt_recipe *r = c->recipe;
    if (begin < 0) begin = r->sec_begin[sec];
    if (end < 0) end = r->sec_end[sec];
    for (int i = end - 1; i >= begin; i--) {
        const gckpt_op *op = &r->op[i];
        bool any_in = false;
        for (int k = 0; k < op->nin; k++) any_in |= needs_grad(r, st, op->in[k]);
        int gout = op->out[0] >= 0 ? owner(s, st, op->out[0])->grad[op->out[0]] : -1;
        if (any_in && gout >= 0) {
            bwd_op b = {.i = i, .gout = gout, .ws = -1, .promo = -1};
            if (s->wrap) gckpt_wrap_op(s->wrap, s, o, unit_of(s, st), i, GCKPT_WRAP_PRE_BWD);
            b.ws = bwd_workspace(s, i, o);
            /* the CPU target's promoted copy of a narrow operand lives while the other
             * operand's gradient (grad * this) is made, before the narrow one's */
            if (op->bws_promote) b.promo = alloc_scratch(s, o, c->op_promo[i], GCKPT_C_BACKWARD, 0);
            if (op->grads_in_fwd && s->early_op == i) { /* made by its forward */
                for (int k = 0; k < op->nin; k++) {
                    b.dst[k] = s->early_dst[k];
                    b.mode[k] = s->early_mode[k];
                }
                s->early_op = -1;
            } else {
                bwd_buffers(s, st, &b, o);
            }
            gckpt_event *e = ev_compute(s, o, GCKPT_EV_BWD, i);
            if (e) {
                for (int k = 0; k < GCKPT_OP_MAX_IN; k++) e->arg.bwd.grad_in[k] = k < op->nin ? gid(s, b.dst[k]) : GCKPT_NOINST;
                e->arg.bwd.grad_out = gid(s, gout);
                e->arg.bwd.workspace = gid(s, b.ws);
            }
            bwd_release(s, st, &b, o);
            bwd_accumulate(s, st, &b, o);
            if (s->wrap) gckpt_wrap_op(s->wrap, s, o, unit_of(s, st), i, GCKPT_WRAP_POST_BWD);
            if (s->z1_bucket_due) z1_bucket(s, op, o);
        }
        for (int k = 0; k < 2; k++) {
            if (op->out[k] < 0) continue; /* (router_logits[1] is -1 without the aux loss) */
            if (op->out[k] == r->router_logits[1]) router_grads_to_layers(s, st, op->out[k], o);
            else grad_release(s, st, op->out[k], o);
        }
        /* a layer's router linear has run: its logits' summed gradient goes */
        if (st->aux_grad >= 0 && op->out[0] == r->router_logits[0]) {
            release(s, o, st->aux_grad, (int16_t)op->out[0]);
            st->aux_grad = -1;
        }
        release_saved(s, st, i, o);
    }
}

/* ---- the segments ---------------------------------------------------------------------- */

static void embed_fwd(gckpt_sim *s, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    init_sec(&s->embed);
    init_sec(&s->head);
    if (s->wrap) gckpt_wrap_pre_forward(s->wrap, s, o, 0);
    sim_fwd(s, &s->embed, GCKPT_SEC_EMBED, MODE_SAVE, -1, r->sec_end[GCKPT_SEC_EMBED], false, -1, r->embed_out, o);
    if (s->wrap) gckpt_wrap_post_forward(s->wrap, s, o, 0);
    s->stream = s->embed.inst[r->embed_out];
    /* a frozen embedding's output made a leaf by enable_input_require_grads (with
     * checkpointing only): its AccumulateGrad node holds it until the micro-step ends */
    if (r->embed_leaf >= 0 && s->ckpt_any && s->embed.inst[r->embed_leaf] >= 0)
        s->pool[s->embed.inst[r->embed_leaf]].saved++;
}

/* A checkpointed layer keeps its input: on the device, or copied (with gpt2's positional
 * mask) to a pinned host buffer on the compute stream. */
static void keep_layer_input(gckpt_sim *s, sec_t *st, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    inst_t *x = &s->pool[s->stream];
    if (st->mode == GCKPT_LAYER_CKPT) {
        x->ckpt = 1;
        ev_mem(s, o, GCKPT_EV_TO_CHECKPOINT, s->stream, (int16_t)st->in);
        x->comp = GCKPT_C_CHECKPOINTS;
    } else if (st->mode == GCKPT_LAYER_CKPT_OFFLOAD) {
        bool mask = r->mask >= 0 && r->mask_positional;
        st->host = s->c->raw[st->in] + (mask ? s->c->raw[r->mask] : 0);
        ev_layer_host(o, GCKPT_EV_HOST_ALLOC, (int16_t)st->in, st->host);
        ev_copy(s, o, GCKPT_EV_D2H, st->in, s->stream);
        if (mask) ev_copy(s, o, GCKPT_EV_D2H, r->mask, s->embed.inst[r->mask]);
    }
}

/* The head's ops from here on run after the layers (before: its lead, gckpt_recipe.lead_end). */
static int head_begin(const gckpt_recipe *r) { return r->lead_end >= 0 ? r->lead_end : r->sec_begin[GCKPT_SEC_HEAD]; }

/* The head's lead before layer `layer`, the first of its block type (mllama's layernorm_post
 * and post-tile embedding before the first gated global layer): on the stream, which its
 * output then is. The recipe sets a lead only when a layer of that type follows. */
static void lead_fwd(gckpt_sim *s, int layer, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    s->lead_layer = layer;
    s->head.inst[r->lead_in] = s->stream;
    sim_fwd(s, &s->head, GCKPT_SEC_HEAD, MODE_SAVE, -1, r->lead_end, false, r->lead_in, r->lead_out, o);
    s->stream = s->head.inst[r->lead_out];
}

/* ... and its backward, right after that layer's: the gradient stream through it. */
static void lead_bwd(gckpt_sim *s, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    s->head.grad[r->lead_out] = s->gstream;
    sim_bwd(s, &s->head, GCKPT_SEC_HEAD, -1, r->lead_end, o);
    s->gstream = s->head.grad[r->lead_in];
    s->head.grad[r->lead_in] = -1;
}

/* A layer of block type `block`: the section the recipe traced for it. */
static void layer_fwd(gckpt_sim *s, int layer, gckpt_layer_mode mode, int block, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    sec_t *st = &s->layer[layer];
    if (r->lead_end >= 0 && block == r->lead_block && s->lead_layer < 0) lead_fwd(s, layer, o);
    init_sec(st);
    st->mode = mode;
    st->sec = r->block_sec[block] >= 0 ? r->block_sec[block] : GCKPT_SEC_BLOCK;
    st->in = r->sec_in[st->sec];
    st->out = r->sec_out[st->sec];
    /* (not when another layer is checkpointed: enable_input_require_grads hooked the
     * embedding, as in a VLM whose text layer 0 every_n skips, FINDINGS R-VLM-43) */
    st->frozen_in = layer == 0 && mode == GCKPT_LAYER_PLAIN && r->frozen0 && !s->ckpt_any;
    st->inst[st->in] = s->stream;
    st->xin = s->stream;
    if (s->wrap) gckpt_wrap_pre_forward(s->wrap, s, o, (uint64_t)layer + 1);
    keep_layer_input(s, st, o);
    sim_fwd(s, st, st->sec, mode == GCKPT_LAYER_PLAIN ? MODE_SAVE : MODE_NOSAVE, -1, r->sec_end[st->sec], false,
            st->in, st->out, o);
    if (s->wrap) gckpt_wrap_post_forward(s->wrap, s, o, (uint64_t)layer + 1);
    s->stream = st->inst[st->out];
    if ((uint64_t)layer + 1 == s->live && s->live < s->nlayers) {
        /* the head's input, read after the forward-only layers: held until the forward ends
         * (a VLM's image_outputs.hidden_states keeps the selected one) */
        s->feat = s->stream;
        s->pool[s->feat].hold = true;
    }
}

static void drop_checkpoint(gckpt_sim *s, sec_t *st, gckpt_schedule *o);

/* A forward-only layer (gckpt_step.live_layers) when the forward returns: its graph goes,
 * with what it saved (or its checkpoint's input) and its output. */
static void dead_layer_free(gckpt_sim *s, sec_t *st, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    for (int i = r->sec_begin[st->sec]; i < r->sec_end[st->sec]; i++)
        if (st->saved_reg[i]) drop_saved(s, st, i, o);
    if (st->mode != GCKPT_LAYER_PLAIN) drop_checkpoint(s, st, o);
    int out = st->inst[st->out];
    if (out >= 0) {
        s->pool[out].external = false;
        try_free(s, o, out, (int16_t)st->out);
    }
}

static void head_fwd(gckpt_sim *s, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    s->head.inst[r->head_in] = s->feat >= 0 ? s->feat : s->stream;
    /* a head input the model's output keeps (Qwen2.5-VL's last_hidden_state in image_outputs)
     * lives until the forward returns */
    int hin = s->head.inst[r->head_in];
    if (hin >= 0 && r->t[r->head_in].fwd_end_free) s->pool[hin].hold = true;
    if (s->wrap) gckpt_wrap_pre_forward(s->wrap, s, o, s->nlayers + 1);
    /* the base model returns: its masks go unless a checkpoint holds them */
    for (int t = 0; t < r->nt; t++) {
        int id = s->embed.inst[t];
        if (id < 0 || !r->t[t].base_end_free || !s->pool[id].live) continue;
        s->pool[id].hold = false;
        try_free(s, o, id, (int16_t)t);
    }
    sim_fwd(s, &s->head, GCKPT_SEC_HEAD, MODE_SAVE, head_begin(r), r->sec_end[GCKPT_SEC_HEAD], false, r->head_in, -1,
            o);
    if (s->wrap) gckpt_wrap_forward_end(s->wrap, s, o); /* the root's forward returns after the loss */
}

/* The forward has returned: what section st held until then goes. */
static void fwd_end(gckpt_sim *s, sec_t *st, gckpt_schedule *o)
{
    for (int t = 0; t < s->c->recipe->nt; t++) {
        int id = st->inst[t];
        if (id < 0 || !s->pool[id].live || !s->pool[id].hold) continue;
        if (owner(s, st, t) != st) continue;
        s->pool[id].hold = false;
        try_free(s, o, id, (int16_t)t);
    }
}

static void head_bwd(gckpt_sim *s, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    /* loss.backward(): the seed gradient of the scalar loss (without a loss: of the output
     * whose gradient comes from outside, gckpt_recipe.grad_seed) */
    int seed = r->loss >= 0 ? r->loss : r->grad_seed;
    int g = alloc_grad(s, o, seed, GCKPT_C_BACKWARD);
    s->pool[g].refs = 1;
    s->head.grad[seed] = g;
    if (s->wrap) {
        /* the tail unit's pre-backward runs when its output (lm_head's) gets its gradient: the
         * loss's backward first */
        int lm = head_begin(r);
        for (int i = head_begin(r); i < r->sec_end[GCKPT_SEC_HEAD]; i++)
            for (int k = 0; k < r->op[i].nin; k++)
                if (r->t[r->op[i].in[k]].kind == GCKPT_T_PARAM) lm = i;
        sim_bwd(s, &s->head, GCKPT_SEC_HEAD, lm + 1, -1, o);
        gckpt_wrap_pre_backward(s->wrap, s, o, s->nlayers + 1);
        sim_bwd(s, &s->head, GCKPT_SEC_HEAD, head_begin(r), lm + 1, o);
        gckpt_wrap_post_backward(s->wrap, s, o, s->nlayers + 1);
    } else {
        sim_bwd(s, &s->head, GCKPT_SEC_HEAD, head_begin(r), -1, o);
    }
    s->gstream = s->head.grad[r->head_in];
    s->head.grad[r->head_in] = -1;
}

/* save_on_cpu's unpack of an offloaded layer's input (and positional mask): a fresh
 * device copy, held only by the recompute's arguments and by what the recompute saves */
static void unpack_offloaded(gckpt_sim *s, sec_t *st, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    int id = alloc_tensor(s, o, st->in, GCKPT_C_CHECKPOINTS);
    ev_copy(s, o, GCKPT_EV_H2D, st->in, id);
    st->xin = id;
    if (r->mask >= 0 && r->mask_positional) {
        int mid = alloc_tensor(s, o, r->mask, GCKPT_C_CHECKPOINTS);
        s->pool[mid].ckpt = 1;
        ev_copy(s, o, GCKPT_EV_H2D, r->mask, mid);
        st->mask = mid;
    }
}

/* A checkpointed layer's recompute: its forward re-run up to op `stop`, which saves only
 * its inputs when it saves no output (non-reentrant early stop); reentrant: the whole
 * forward, its output held (CheckpointFunction's `outputs`) until the layer's backward
 * is done. */
static void recompute(gckpt_sim *s, sec_t *st, int stop, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    if (st->mode == GCKPT_LAYER_CKPT_OFFLOAD) unpack_offloaded(s, st, o);
    st->inst[st->in] = st->xin;
    const gckpt_op *lo = &r->op[stop - 1];
    bool save_only = !s->c->set.reentrant;
    for (int k = 0; k < lo->nsaved; k++) save_only &= lo->saved[k] != lo->out[0] && lo->saved[k] != lo->out[1];
    sim_fwd(s, st, st->sec, MODE_RECOMPUTE, -1, stop, save_only, st->in, s->c->set.reentrant ? st->out : -1, o);
    if (st->mask >= 0) { /* an offloaded mask's device copy: the recompute's argument */
        s->pool[st->mask].ckpt = 0;
        try_free(s, o, st->mask, (int16_t)r->mask);
    }
}

/* After a checkpointed layer's backward: its kept input (and mask copy) and host buffer go. */
static void drop_checkpoint(gckpt_sim *s, sec_t *st, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    s->pool[st->xin].ckpt = 0;
    try_free(s, o, st->xin, (int16_t)st->in);
    if (st->mask >= 0) {
        s->pool[st->mask].ckpt = 0;
        try_free(s, o, st->mask, (int16_t)r->mask);
        st->mask = -1;
    }
    if (st->mode == GCKPT_LAYER_CKPT_OFFLOAD) ev_layer_host(o, GCKPT_EV_HOST_FREE, (int16_t)st->in, st->host);
}

/* Layer 0's backward begins: the other layer type's arguments go (held_to_layer0). */
static void drop_other_type_args(gckpt_sim *s, gckpt_schedule *o)
{
    for (int t = 0; t < s->c->recipe->nt; t++) {
        int id = s->embed.inst[t];
        if (id < 0 || !s->pool[id].live || !s->pool[id].l0_hold) continue;
        s->pool[id].l0_hold = false;
        try_free(s, o, id, (int16_t)t);
    }
}

static void layer_bwd(gckpt_sim *s, int layer, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    sec_t *st = &s->layer[layer];
    if (layer == 0) drop_other_type_args(s, o);
    st->grad[st->out] = s->gstream;
    if (s->wrap) gckpt_wrap_pre_backward(s->wrap, s, o, (uint64_t)layer + 1);
    /* non-reentrant early stop: the recompute ends when the last tensor the forward
     * saved is saved again; an op that saves only inputs saves them before it computes,
     * so the last saving op runs only if it saves an output. A saved parameter counts
     * (checkpoint's pack hook sees every saved tensor): a frozen norm weight's mul at the
     * end of OLMo 2's layer starts the recompute before its own backward (FINDINGS
     * R-CKPT-9). Reentrant: the whole forward is re-run before any of the layer's backward
     * (CheckpointFunction.backward). */
    bool reentrant = s->c->set.reentrant;
    int stop = r->sec_begin[st->sec];
    for (int i = r->sec_begin[st->sec]; i < r->sec_end[st->sec]; i++)
        if (r->op[i].nsaved || r->op[i].saves_param || reentrant) stop = i + 1;
    bool ckpt = st->mode != GCKPT_LAYER_PLAIN;
    if (ckpt) {
        /* the ops after the last saving one need nothing saved: their backward runs
         * before a saved tensor is unpacked (which starts the recompute) */
        sim_bwd(s, st, st->sec, stop, -1, o);
        recompute(s, st, stop, o);
    }
    sim_bwd(s, st, st->sec, -1, ckpt ? stop : -1, o);
    if (ckpt && reentrant) { /* the recomputed output and graph go with CheckpointFunction.backward */
        int out = st->inst[st->out];
        s->pool[out].external = false;
        try_free(s, o, out, (int16_t)st->out);
        free_graph_kept(s, st, st->sec, o);
    }
    if (ckpt) drop_checkpoint(s, st, o);
    if (s->wrap) gckpt_wrap_post_backward(s->wrap, s, o, (uint64_t)layer + 1);
    s->gstream = st->grad[st->in];
    st->grad[st->in] = -1;
    if (layer == s->lead_layer) lead_bwd(s, o);
}

static void embed_bwd(gckpt_sim *s, gckpt_schedule *o)
{
    const gckpt_recipe *r = s->c->recipe;
    for (int l = 0; l < GCKPT_PROXY_LAYERS; l++)
        if (s->aux_rest[l] >= 0) {
            release(s, o, s->aux_rest[l], (int16_t)r->router_logits[1]);
            s->aux_rest[l] = -1;
        }
    /* the last checkpoint holding the layers' arguments (layer 0's) is gone */
    for (int t = 0; t < r->nt; t++) {
        int id = s->embed.inst[t];
        if (!r->t[t].ckpt_held || id < 0 || !s->pool[id].live) continue;
        s->pool[id].ckpt = 0;
        try_free(s, o, id, (int16_t)t);
    }
    s->embed.grad[r->embed_out] = s->gstream;
    if (s->wrap) gckpt_wrap_pre_backward(s->wrap, s, o, 0);
    sim_bwd(s, &s->embed, GCKPT_SEC_EMBED, -1, -1, o);
    if (s->wrap) {
        gckpt_wrap_post_backward(s->wrap, s, o, 0);
        gckpt_wrap_backward_end(s->wrap, s, o);
    }
    /* ZeRO-1 reduces at the boundary when the backward ends (engine.backward's allreduce_gradients):
     * what grads_in_partition adds over the .grad freed so far, for a moment (core/parallel.c) */
    const gckpt_ctx *c = s->c;
    if (c->par.z1_reduce_numel && s->sync) {
        uint8_t dt = c->set.precision == GCKPT_FP32 ? GCKPT_DT_F32 : GCKPT_DT_BF16;
        gckpt_sim_release(s, o, gckpt_sim_buffer(s, o, -1, GCKPT_C_PARALLEL, dt, c->par.z1_reduce_numel));
    }
}

/* The batch, masks, rotary tables, labels and the loss go when the micro-step ends. */
static void micro_end(gckpt_sim *s, gckpt_schedule *o)
{
    sec_t *secs[2] = {&s->embed, &s->head};
    for (int q = 0; q < 2; q++)
        for (int t = 0; t < s->c->recipe->nt; t++) {
            int id = secs[q]->inst[t];
            if (id < 0 || !s->pool[id].live || owner(s, secs[q], t) != secs[q]) continue;
            release(s, o, id, (int16_t)t);
        }
}

static gckpt_event *push_opt_event(const gckpt_ctx *c, gckpt_schedule *o, int kind, uint8_t comp, uint64_t bytes)
{
    gckpt_event *e = gckpt_schedule_push(o);
    if (!e) return NULL;
    e->kind = (uint8_t)kind;
    e->comp = comp;
    e->bytes = bytes;
    e->inst = GCKPT_NOINST; /* whole-state events: no single tensor instance */
    if (kind == GCKPT_EV_OPT_STEP) e->seconds = c->opt_seconds;
    return e;
}

void gckpt_sim_optimizer(const gckpt_ctx *c, gckpt_schedule *o)
{
    const gckpt_par_mode *d = gckpt_par_mode_of(c->set.layout.mode);
    if (d->sync_events) d->sync_events(c, o); /* DDP, ZeRO-1: the gradients' reduction */
    /* ZeRO-1/2: the full gradients go once reduced into the rank's partition (core/parallel.c) */
    if (c->step_grads < c->grads) {
        gckpt_event *e = push_opt_event(c, o, GCKPT_EV_ZERO_GRAD, GCKPT_C_GRADS, c->grads - c->step_grads);
        if (e) e->par = GCKPT_PE_OUTSIDE_PARTITION;
    }
    if (c->par.step_released) push_opt_event(c, o, GCKPT_EV_OPT_TEMP_FREE, GCKPT_C_PARALLEL, c->par.step_released);
    if (c->opt_temp) push_opt_event(c, o, GCKPT_EV_OPT_TEMP_ALLOC, GCKPT_C_OPT_TEMP, c->opt_temp);
    push_opt_event(c, o, GCKPT_EV_OPT_STEP, 0, 0);
    if (d->step_gather_events) d->step_gather_events(c, o); /* ZeRO-1/2/3: the stepped weights gathered */
    if (c->opt_temp) push_opt_event(c, o, GCKPT_EV_OPT_TEMP_FREE, GCKPT_C_OPT_TEMP, c->opt_temp);
    push_opt_event(c, o, GCKPT_EV_ZERO_GRAD, GCKPT_C_GRADS, c->step_grads); /* zero_grad(set_to_none=True) */
    if (c->par.step_retaken) push_opt_event(c, o, GCKPT_EV_OPT_TEMP_ALLOC, GCKPT_C_PARALLEL, c->par.step_retaken);
}

/* DDP with find_unused_parameters: _DDPSink.forward clones every output with a grad_fn when
 * the forward returns (torch/nn/parallel/distributed.py, DistributedDataParallel._post_forward);
 * the fp32 logits (accelerate's convert_outputs_to_fp32 copy under amp) and their clone are
 * live together on top of the state after the forward, then the originals go: measured
 * 2 x V x T x 4 - 4 B there on 16 DDP fixtures of 6 families (FINDINGS R-DIST-17). */
static void ddp_sink(gckpt_sim *s, gckpt_schedule *o)
{
    uint64_t vt = s->c->model->vocab * s->c->tokens;
    int a = gckpt_sim_buffer(s, o, -1, GCKPT_C_LOGITS, GCKPT_DT_F32, vt);
    int b = gckpt_sim_buffer(s, o, -1, GCKPT_C_LOGITS, GCKPT_DT_F32, vt);
    gckpt_sim_release(s, o, a);
    gckpt_sim_release(s, o, b);
}

void gckpt_sim_segment(gckpt_sim *s, const gckpt_seg *g, gckpt_schedule *o)
{
    bool fwd = g->stage == GCKPT_STAGE_FORWARD, bwd = g->stage == GCKPT_STAGE_BACKWARD;
    switch (g->part) {
    case GCKPT_PART_EMBEDDING:
        if (fwd) embed_fwd(s, o);
        else embed_bwd(s, o);
        break;
    case GCKPT_PART_LAYER:
        if ((uint64_t)g->layer >= s->live && !fwd) {
            /* a forward-only layer: no backward; its graph goes when the forward returns */
            if (g->stage == GCKPT_STAGE_FORWARD_END) {
                dead_layer_free(s, &s->layer[g->layer], o);
                fwd_end(s, &s->layer[g->layer], o);
            }
            break;
        }
        if (fwd) layer_fwd(s, g->layer, (gckpt_layer_mode)g->mode, g->block, o);
        else if (bwd) layer_bwd(s, g->layer, o);
        else if (g->stage == GCKPT_STAGE_GRAPH_FREED) free_graph_kept(s, &s->layer[g->layer], s->layer[g->layer].sec, o);
        else fwd_end(s, &s->layer[g->layer], o);
        break;
    case GCKPT_PART_HEAD:
        if (fwd) {
            head_fwd(s, o);
        } else if (bwd) {
            head_bwd(s, o);
        } else {
            fwd_end(s, &s->head, o);
            fwd_end(s, &s->embed, o); /* the model drops its masks when its forward returns */
            if (s->ddp_sink) ddp_sink(s, o);
        }
        break;
    case GCKPT_PART_MICRO_END: micro_end(s, o); break;
    case GCKPT_PART_OPTIMIZER: gckpt_sim_optimizer(s->c, o); break;
    default: break;
    }
}
