/* DDP on several ranks: full replicas (the weights and AdamW's states are the rank's rows,
 * exec_rank_buffers); the buckets (a flat copy of every gradient in the gradients' dtype,
 * persistent: gradient_as_bucket_view false; the rank's GRADS row) take the gradients of the
 * synchronising micro-step, are averaged over the ranks (all-reduce of the fp32 buckets, each
 * rank's divided by N first as torch's DDP does: FINDINGS R-CPU-4 D8) and copied back; every
 * rank then takes the same AdamW step (the interpreter's own). The schedule says when: one
 * COLLECTIVE event per bucket opening the optimizer segment (core/sim_parallel.c
 * gckpt_sync_ddp), the buckets laid out back to back in the copy in the order the reducer fills
 * them (gckpt_ddp_buckets). */
#include "interp_parallel.h"

#include <stdlib.h>

#include "gckpt/core/parallel.h"

/* Bucket e->arg.coll.index: its gradients into the bucket copy, all-reduced, copied back. */
static gckpt_xstatus ddp_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    const gckpt_params *ps = &x->ctx.params;
    if (e->arg.coll.kind != GCKPT_COLL_ALL_REDUCE)
        return exec_fail(err, "%s: ddp: a %s, not a bucket's all-reduce", w->at, gckpt_coll_names[e->arg.coll.kind]);
    size_t n = gckpt_ddp_buckets(ps, x->m.layers, NULL);
    gckpt_ddp_slot *slot = malloc(sizeof *slot * (n ? n : 1));
    if (!slot) return exec_fail(err, "out of memory");
    gckpt_ddp_buckets(ps, x->m.layers, slot);
    uint64_t off = 0, numel = 0, sz = gckpt_dtype_size((gckpt_dtype)e->dtype);
    size_t first = n;
    for (size_t k = 0; k < n; k++) {
        uint64_t elems = ps->p[slot[k].param].numel;
        if (slot[k].bucket < e->arg.coll.index) off += elems;
        else if (slot[k].bucket == e->arg.coll.index) {
            if (first == n) first = k;
            numel += elems;
        }
    }
    gckpt_xstatus rc = GCKPT_XS_OK;
    uint64_t held;
    char *buckets = exec_row(x, GCKPT_ROW_GRADS, -1, 0, 0, 0, &held); /* the rank's bucket row */
    if (!buckets || !numel || numel != e->numel || (off + numel) * sz > held)
        rc = exec_fail(err, "%s: ddp: bucket %llu of %llu %s elements, the buckets hold %llu at offset %llu of %llu bytes",
                       w->at, (unsigned long long)e->arg.coll.index, (unsigned long long)e->numel,
                       gckpt_dtype_names[e->dtype], (unsigned long long)numel, (unsigned long long)off,
                       (unsigned long long)held);
    gckpt_xt bucket = {buckets + off * sz, numel, e->dtype}, none = {0};
    /* in (pass 0), the all-reduce, out (pass 1) */
    for (int pass = 0; pass < 2 && rc == GCKPT_XS_OK; pass++) {
        uint64_t at = 0;
        for (size_t k = first; k < n && slot[k].bucket == e->arg.coll.index && rc == GCKPT_XS_OK; k++) {
            const gckpt_param *spec = &ps->p[slot[k].param];
            param_t *p = exec_param(x, spec->tensor, spec->section == GCKPT_SEC_BLOCK ? (int)slot[k].copy : -1);
            if (!p || !exec_live(x, p->grad)) {
                rc = exec_fail(err, "%s: ddp: parameter %s has no gradient to reduce", w->at, spec->name);
                break;
            }
            gckpt_xt g = exec_inst_view(x, p->grad);
            if (g.dt != e->dtype) {
                rc = exec_fail(err, "%s: ddp: the gradient of %s is %s, the bucket %s", w->at, spec->name,
                               gckpt_dtype_names[g.dt], gckpt_dtype_names[e->dtype]);
                break;
            }
            gckpt_xt b = {(char *)bucket.p + at * sz, g.n, g.dt};
            rc = pass ? x->be->add(x->be, g, none, b) : x->be->add(x->be, b, none, g);
            if (rc != GCKPT_XS_OK) rc = exec_be_fail(x, rc, "ddp: copying a gradient", err);
            at += g.n;
        }
        if (!pass && rc == GCKPT_XS_OK &&
            (rc = x->be->collective(x->be, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG, bucket, bucket, 0)) != GCKPT_XS_OK)
            rc = exec_be_fail(x, rc, "ddp: all-reduce of a bucket", err);
    }
    free(slot);
    return rc;
}

const exec_par_ops exec_ddp_ops = {.setup = exec_rank_buffers, .collective = ddp_collective};
