/* The mixture-of-experts load-balancing loss (output_router_logits; recipe_moe.c
 * moe_aux_loss, FINDINGS R-MOE-4) in the interpreter. The recipe traces it in the head on a
 * 0-byte view of every layer's [T, E] router logits (GCKPT_SRC_ROUTER_LOGITS: the layers
 * hold them), and the schedule hands the view's gradient back to the layers, one [T, E]
 * buffer each (or one for all, the simulator's router_grads_to_layers), released once the
 * layer's router linear ran its backward. The executor lays the view and the tensors made
 * from it ([T, L x E], [T, L x k]) out layer by layer, so that layer l's rows are one
 * block; every op on them works on rows of E (softmax, top-k) or on all rows alike
 * (histogram, column sums), which the order of the rows does not change. Here:
 *   - the head's softmax of the view runs once per layer on that layer's held logits;
 *   - when the view's gradient is freed its values go to a host copy, and the per-layer
 *     buffers the schedule allocates next are filled from it in layer order;
 *   - before a layer's router linear runs its backward, its buffer's block is added to
 *     the logits' gradient (autograd's input buffer sums the two the same way). */
#include "interp.h"

#include <stdlib.h>
#include <string.h>

struct exec_aux {
    int gate_op;       /* the op making the block's router logits (recipe router_logits[0]) */
    uint64_t block;    /* elements of one layer's logits: T x E */
    unsigned esize;    /* their dtype's bytes */
    void *stash;       /* the view's gradient, all layers (host memory, not the device's) */
    int phase;         /* 0 waiting for the gradient, 1 handing it out, 2 done (this micro-step) */
    uint64_t cursor;   /* the next layer to hand a block to */
    uint32_t *inst;    /* per layer: the buffer holding its block, or GCKPT_NOINST */
    uint64_t *off;     /* ... and the block's first element there */
};

bool exec_aux_prepare(gckpt_exec *x, gckpt_err *err)
{
    const gckpt_recipe *r = x->r;
    if (r->router_logits[1] < 0) return true;
    exec_aux *a = calloc(1, sizeof *a);
    uint64_t L = x->m.layers;
    if (a) {
        a->inst = malloc(sizeof *a->inst * L);
        a->off = calloc(L, sizeof *a->off);
        a->block = x->ctx.numel[r->router_logits[0]];
        a->esize = gckpt_dtype_size((gckpt_dtype)r->t[r->router_logits[0]].dtype);
        a->stash = malloc((size_t)(a->block * L * a->esize) + 1);
    }
    if (!a || !a->inst || !a->off || !a->stash) {
        x->aux = a;
        gckpt_seterr(err, "out of memory for the load-balancing loss's state");
        return false;
    }
    a->gate_op = gckpt_recipe_producer(r, r->router_logits[0]);
    if (a->gate_op < 0 || x->ctx.numel[r->router_logits[1]] != a->block * L) {
        x->aux = a;
        gckpt_seterr(err, "recipe: the router logits' view is not every layer's logits");
        return false;
    }
    x->aux = a;
    exec_aux_micro_begin(x);
    return true;
}

void exec_aux_micro_begin(gckpt_exec *x)
{
    exec_aux *a = x->aux;
    if (!a) return;
    a->phase = 0;
    a->cursor = 0;
    for (uint64_t l = 0; l < x->m.layers; l++) a->inst[l] = GCKPT_NOINST;
}

void exec_aux_free(gckpt_exec *x)
{
    exec_aux *a = x->aux;
    if (!a) return;
    free(a->inst);
    free(a->off);
    free(a->stash);
    free(a);
    x->aux = NULL;
}

static void *elem_ptr(void *p, uint64_t i, unsigned esize) { return (char *)p + i * esize; }

/* The head's softmax of the view: layer by layer, each layer's held logits into its block
 * of the output. */
gckpt_xstatus exec_aux_forward(gckpt_exec *x, const gckpt_xcall *c, const exec_site *w, gckpt_err *err)
{
    exec_aux *a = x->aux;
    if (!a || c->op->prim != GCKPT_P_SOFTMAX || c->op->nin != 1)
        return exec_fail(err, "%s: an op on the router logits' view that the executor does not run", w->at);
    unsigned osize = gckpt_dtype_size((gckpt_dtype)c->out[0].dt);
    if (c->out[0].n != a->block * x->m.layers) /* each call below checks only its block */
        return exec_fail(err, "%s: op %s: output 0 holds %llu elements, its inputs make %llu", w->at, c->op->name,
                         (unsigned long long)c->out[0].n, (unsigned long long)(a->block * x->m.layers));
    for (uint64_t l = 0; l < x->m.layers; l++) {
        size_t b = (size_t)(l + 1) * (size_t)x->r->nop + (size_t)a->gate_op;
        uint32_t id = x->bind[b].out[0];
        if (x->bind_gen[b] != x->gen || !exec_live(x, id) || x->inst[id].n != a->block)
            return exec_fail(err, "%s: layer %llu's router logits are not held", w->at, (unsigned long long)l);
        gckpt_xcall d = *c;
        d.in[0] = exec_inst_view(x, id);
        d.in[0].rows = d.out[0].rows = c->in[0].rows;
        d.in[0].cols = d.out[0].cols = c->op->width;
        d.out[0].p = elem_ptr(c->out[0].p, l * a->block, osize);
        d.out[0].n = a->block;
        gckpt_xstatus rc = x->be->forward(x->be, &d);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    }
    return GCKPT_XS_OK;
}

/* A buffer of the view's tensor is being freed: the first with elements in a micro-step
 * is its gradient, kept on the host for the layers' buffers. */
gckpt_xstatus exec_aux_on_free(gckpt_exec *x, uint32_t id, const exec_site *w, gckpt_err *err)
{
    exec_aux *a = x->aux;
    const inst_t *in = &x->inst[id];
    if (!a || a->phase != 0 || in->n == 0) return GCKPT_XS_OK;
    if (in->n != a->block * x->m.layers) return exec_fail(err, "%s: the router logits' gradient has %llu elements", w->at, (unsigned long long)in->n);
    gckpt_xstatus rc = x->be->download(x->be, a->stash, in->p, in->n * a->esize);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    a->phase = 1;
    return GCKPT_XS_OK;
}

/* A buffer of the view's tensor was allocated: while handing out, the next layers' blocks. */
gckpt_xstatus exec_aux_on_alloc(gckpt_exec *x, uint32_t id, const exec_site *w, gckpt_err *err)
{
    exec_aux *a = x->aux;
    if (!a || a->phase != 1) return GCKPT_XS_OK;
    const inst_t *in = &x->inst[id];
    uint64_t L = x->m.layers, count = a->block ? in->n / a->block : 0;
    if (!count || in->n % a->block || a->cursor + count > L)
        return exec_fail(err, "%s: a buffer of %llu elements for layers' router logit gradients of %llu", w->at,
                         (unsigned long long)in->n, (unsigned long long)a->block);
    gckpt_xstatus rc = x->be->upload(x->be, in->p, elem_ptr(a->stash, a->cursor * a->block, a->esize), in->n * a->esize);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    for (uint64_t j = 0; j < count; j++) {
        a->inst[a->cursor + j] = id;
        a->off[a->cursor + j] = j * a->block;
    }
    a->cursor += count;
    if (a->cursor == L) a->phase = 2;
    return GCKPT_XS_OK;
}

/* Before layer `layer`'s router linear runs its backward: its block added to the logits'
 * gradient gout. */
gckpt_xstatus exec_aux_add(gckpt_exec *x, int layer, gckpt_xt gout, const exec_site *w, gckpt_err *err)
{
    exec_aux *a = x->aux;
    if (!a || layer < 0) return GCKPT_XS_OK;
    uint32_t id = a->inst[layer];
    if (a->phase != 2 || !exec_live(x, id))
        return exec_fail(err, "%s: the load-balancing loss's gradient of this layer's router logits is not held", w->at);
    gckpt_xt blk = exec_inst_view(x, id);
    blk.p = elem_ptr(blk.p, a->off[layer], a->esize);
    blk.n = a->block;
    if (gout.n != a->block || gout.dt != blk.dt)
        return exec_fail(err, "%s: the router logits' gradient is not shaped like its block", w->at);
    gckpt_xstatus rc = x->be->add(x->be, gout, gout, blk);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    a->inst[layer] = GCKPT_NOINST; /* added once */
    return GCKPT_XS_OK;
}
