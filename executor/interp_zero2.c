/* DeepSpeed ZeRO-2 on several ranks: its reductions, beyond ZeRO-1's flat groups and
 * partitioned step (interp_parallel.c). The rules are the core's (gckpt_zero12_step_grads: the
 * instances the rank keeps whole and the partition buffer's elements; core/sim_parallel.c: the
 * ipg bucket, the partition buffers and one ALL_REDUCE per parameter as events):
 *  - an ALLOC_SCRATCH marked GCKPT_PE_GRAD_PARTITION is the first micro-step's partition buffer
 *    (component GRADS: the gradients the step reads, freed by zero_grad) or a later
 *    micro-step's (PARALLEL);
 *  - an ALL_REDUCE of one parameter copies its .grad (made afresh in every micro-step) into the
 *    ipg bucket at the bucket's running offset (DeepSpeed's: a parameter that would overflow the
 *    bucket starts it again; one larger than the bucket goes through it a bucket at a time),
 *    averages it over the ranks in place (each rank's divided by N first: FINDINGS R-CPU-4 D10)
 *    and, when the parameter overlaps the rank's partition, copies it into its place in the
 *    micro-step's partition buffer; before the flush that makes that buffer the piece waits in
 *    the bucket and is copied in at the buffer's ALLOC;
 *  - the .grad's FREE at the next parameter's hook just frees it; a later micro-step's buffer
 *    is added into the first when it is freed at the backward's end;
 *  - the step (ZeRO-1's, interp_zero1.c) reads each kept instance from the partition buffer.
 * Every buffer here is of the model dtype the schedule's events name (fp32, or bf16 under
 * amp-bf16: DeepSpeed's bf16 model, whose fp32 master partition is ZeRO-1's). */
#include "interp_parallel.h"

#include <stdlib.h>

static gckpt_xt at(void *p, uint64_t off, uint64_t n, uint8_t dt)
{
    return (gckpt_xt){(char *)p + off * gckpt_dtype_size((gckpt_dtype)dt), n, dt, 0};
}

typedef struct {
    uint8_t group;
    uint64_t offset;
    size_t j;
} kept_t;

static int by_place(const void *a, const void *b)
{
    const kept_t *p = a, *q = b;
    if (p->group != q->group) return p->group < q->group ? -1 : 1;
    return p->offset < q->offset ? -1 : p->offset > q->offset;
}

/* The kept instances' places in the partition buffer, after ZeRO-1's flat setup. */
static gckpt_xstatus zero2_places(gckpt_exec *x, gckpt_err *err)
{
    exec_zero *z = x->zero;
    size_t n = x->nparams ? x->nparams : 1, nk = 0;
    z->part0 = z->part1 = z->bucket_inst = GCKPT_NOINST;
    z->fill = 0;
    z->npend = 0;
    z->pmade = false;
    if (z->pbuf_off) return GCKPT_XS_OK;
    kept_t *order = malloc(sizeof *order * n);
    z->pbuf_off = calloc(n, sizeof *z->pbuf_off);
    z->pend_j = malloc(sizeof *z->pend_j * n);
    z->pend_off = malloc(sizeof *z->pend_off * n);
    if (!order || !z->pbuf_off || !z->pend_j || !z->pend_off) {
        free(order);
        return exec_fail(err, "out of memory");
    }
    for (size_t j = 0; j < x->nparams; j++)
        if (z->keep[j]) order[nk++] = (kept_t){z->place[j].group, z->place[j].offset, j};
    qsort(order, nk, sizeof *order, by_place); /* the flat order */
    uint64_t off = 0;
    for (size_t k = 0; k < nk; k++) {
        z->pbuf_off[order[k].j] = off;
        off += x->params[order[k].j].spec->numel;
    }
    free(order);
    if (off != x->ctx.par.z2_numel)
        return exec_fail(err, "zero2: the rank keeps %llu gradient elements, the schedule's partition buffer %llu",
                         (unsigned long long)off, (unsigned long long)x->ctx.par.z2_numel);
    return GCKPT_XS_OK;
}

static gckpt_xstatus zero2_setup(gckpt_exec *x, gckpt_err *err)
{
    gckpt_xstatus rc = exec_zero_setup(x, err);
    if (rc == GCKPT_XS_OK) rc = zero2_places(x, err);
    return rc;
}

static gckpt_xstatus zero2_on_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_zero *z = x->zero;
    if (e->par == GCKPT_PE_IPG_BUCKET) { /* a backward's (first) bucket: empty */
        if (z->bucket_inst == GCKPT_NOINST || !exec_live(x, z->bucket_inst)) z->bucket_inst = e->inst;
        z->fill = 0;
        z->npend = 0;
        z->pmade = false;
        return GCKPT_XS_OK;
    }
    if (e->par != GCKPT_PE_GRAD_PARTITION) return GCKPT_XS_OK;
    uint32_t *slot = e->comp == GCKPT_C_GRADS ? &z->part0 : &z->part1;
    if (*slot != GCKPT_NOINST || e->dtype != z->dt || e->numel != x->ctx.par.z2_numel)
        return exec_fail(err, "%s: zero2: a second partition buffer, or not %llu elements of the model dtype", w->at,
                         (unsigned long long)x->ctx.par.z2_numel);
    *slot = e->inst;
    if (slot == &z->part0) x->inst[e->inst].is_pgrad = true; /* to zero_grad */
    /* the flush: the kept pieces reduced so far in this bucket copied into their places */
    gckpt_xt none = {0};
    for (size_t k = 0; k < z->npend; k++) {
        size_t j = z->pend_j[k];
        uint64_t m = x->params[j].spec->numel;
        if (!exec_live(x, z->bucket_inst)) return exec_fail(err, "%s: zero2: the ipg bucket is gone before the flush", w->at);
        gckpt_xstatus rc = x->be->add(x->be, at(x->inst[e->inst].p, z->pbuf_off[j], m, z->dt), none,
                                      at(x->inst[z->bucket_inst].p, z->pend_off[k], m, z->dt));
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    }
    z->npend = 0;
    z->pmade = true;
    return GCKPT_XS_OK;
}

static gckpt_xstatus zero2_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_zero *z = x->zero;
    const gckpt_coll_args *a = &e->arg.coll;
    if (a->kind == GCKPT_COLL_ALL_GATHER && w->seg->part == GCKPT_PART_OPTIMIZER) return exec_zero_gather(x, e, w, err);
    int layer = e->tensor >= 0 && x->r->t[e->tensor].section == GCKPT_SEC_BLOCK ? (int)a->index - 1 : -1;
    param_t *p = e->tensor >= 0 ? exec_param(x, e->tensor, layer) : NULL;
    if (a->kind != GCKPT_COLL_ALL_REDUCE || !p || e->numel != p->spec->numel || !exec_live(x, p->grad))
        return exec_fail(err, "%s: zero2: not an all-reduce of a parameter's .grad", w->at);
    if (!exec_live(x, a->src) || a->src != a->dst || x->inst[a->src].n != z->bucket || x->inst[a->src].dt != z->dt)
        return exec_fail(err, "%s: zero2: the ipg bucket is not allocated as planned", w->at);
    size_t j = (size_t)(p - x->params);
    uint64_t numel = p->spec->numel, base = 0;
    /* the bucket's running offset (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads:
     * a parameter that would overflow the bucket flushes it first) */
    if (z->fill + numel > z->bucket) {
        if (z->npend) /* the schedule made no partition buffer at that flush */
            return exec_fail(err, "%s: zero2: the bucket is flushed with kept gradients and no partition buffer", w->at);
        z->fill = 0;
    }
    if (numel <= z->bucket) base = z->fill;
    z->fill += numel;
    uint32_t into = exec_live(x, z->part1) ? z->part1 : z->part0;
    bool made = z->pmade; /* this backward's partition buffer (part0 in the first micro-step, part1 later) */
    if (z->keep[j] && !made && numel > z->bucket) return exec_fail(err, "%s: zero2: no partition buffer to reduce into", w->at);
    gckpt_xt none = {0};
    void *b = x->inst[a->src].p, *g = x->inst[p->grad].p;
    gckpt_xstatus rc = GCKPT_XS_OK;
    for (uint64_t off = 0; off < numel && rc == GCKPT_XS_OK; off += z->bucket) {
        uint64_t m = numel - off < z->bucket ? numel - off : z->bucket;
        gckpt_xt piece = at(b, base, m, z->dt);
        rc = x->be->add(x->be, piece, none, at(g, off, m, z->dt));
        if (rc == GCKPT_XS_OK) rc = x->be->collective(x->be, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG, piece, piece, 0);
        if (rc == GCKPT_XS_OK && z->keep[j] && made)
            rc = x->be->add(x->be, at(x->inst[into].p, z->pbuf_off[j] + off, m, z->dt), none, piece);
    }
    if (rc == GCKPT_XS_OK && z->keep[j] && !made) { /* waits in the bucket for the flush */
        z->pend_j[z->npend] = j;
        z->pend_off[z->npend++] = base;
    }
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

static gckpt_xstatus zero2_on_free(gckpt_exec *x, const gckpt_event *e, const exec_site *w, bool *done, gckpt_err *err)
{
    exec_zero *z = x->zero;
    *done = false;
    if (e->inst == z->part1) { /* a later micro-step's reductions into the step's buffer */
        gckpt_xt sum = exec_inst_view(x, z->part0);
        gckpt_xstatus rc = exec_live(x, z->part0) ? x->be->add(x->be, sum, sum, exec_inst_view(x, z->part1)) : GCKPT_XS_ERROR;
        z->part1 = GCKPT_NOINST;
        if (rc != GCKPT_XS_OK) return x->be->err.msg[0] ? exec_be_fail(x, rc, w->at, err) : exec_fail(err, "%s: zero2: no buffer to add into", w->at);
        return GCKPT_XS_OK;
    }
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        if (p->grad != e->inst) continue;
        exec_inst_release(x, p->grad); /* reduced at its own hook */
        p->grad = GCKPT_NOINST;
        *done = true;
    }
    return GCKPT_XS_OK;
}

static uint64_t zero2_zero_grad(gckpt_exec *x)
{
    exec_zero *z = x->zero;
    uint64_t bytes = 0;
    if (exec_live(x, z->part0)) {
        bytes = x->inst[z->part0].bytes;
        exec_inst_release(x, z->part0);
    }
    z->part0 = GCKPT_NOINST;
    return bytes;
}

static gckpt_xt zero2_grad(const gckpt_exec *x, size_t j)
{
    const exec_zero *z = x->zero;
    if (!exec_live(x, z->part0)) return (gckpt_xt){0};
    return at(x->inst[z->part0].p, z->pbuf_off[j], x->params[j].spec->numel, z->dt);
}

static gckpt_xstatus zero2_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err)
{
    const exec_zero *z = x->zero;
    *hash = 0;
    *sumsq = 0;
    for (size_t j = 0; j < x->nparams; j++) {
        const gckpt_flat_place *f = &z->place[j];
        uint64_t part = z->g[f->group].part, lo = (uint64_t)x->o.rank * part, hi = lo + part;
        uint64_t a = f->offset > lo ? f->offset : lo, end = f->offset + x->params[j].spec->numel, b = end < hi ? end : hi;
        if (!z->keep[j] || a >= b) continue;
        /* the rank's elements of the flat group only: every element is hashed by one rank */
        gckpt_xt g = zero2_grad(x, j);
        if (!g.p) return exec_fail(err, "checksum: zero2: the partition buffer is not allocated");
        gckpt_xstatus rc = exec_piece_hash(x, &x->params[j],
                                           (gckpt_xt){(char *)g.p + (a - f->offset) * gckpt_dtype_size((gckpt_dtype)g.dt), b - a, g.dt, 0},
                                           a - f->offset, hash, sumsq, err);
        if (rc != GCKPT_XS_OK) return rc;
    }
    return exec_ranks_hash(x, hash, sumsq, err);
}

static gckpt_xstatus zero2_step(gckpt_exec *x, const exec_site *w, gckpt_err *err)
{
    return exec_zero_step(x, w, zero2_grad, err);
}

const exec_par_ops exec_zero2_ops = {.flat_grads = true,
                                     .prepare = exec_zero_prepare,
                                     .setup = zero2_setup,
                                     .init = exec_zero_init,
                                     .on_alloc = zero2_on_alloc,
                                     .on_free = zero2_on_free,
                                     .collective = zero2_collective,
                                     .keeps_grad = exec_zero_keeps_grad,
                                     .zero_grad = zero2_zero_grad,
                                     .step_buffer = exec_zero_step_buffer,
                                     .step = zero2_step,
                                     .checksum = zero2_checksum,
                                     .release = exec_zero_release,
                                     .free = exec_zero_free};
