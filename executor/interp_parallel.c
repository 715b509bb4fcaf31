/* Several ranks: what a parallel mode adds to the interpreter (gckpt/core/parallel.h has the
 * rules, FINDINGS 13 the measurements). Every rank runs the schedule of its own micro-steps;
 * the mode's persistent buffers are allocated as gckpt_rank_persistent sizes them, and the
 * gradients are reduced over the backend's collective when the last micro-step has ended.
 *  ddp: full replicas; the buckets (a flat copy of every gradient in the gradients' dtype,
 *       persistent: gradient_as_bucket_view false) take the gradients of the synchronising
 *       micro-step, are averaged over the ranks (all-reduce of the fp32 buckets, each rank's
 *       divided by N first as torch's DDP does) and copied back; every rank then takes the same AdamW step. DDP's step counters and the model's
 *       buffers are allocated as their bytes (nothing reads them here).
 * fsdp, zero1, zero2 and zero3 are refused: their per-rank working set is not yet events of
 * the schedule. */
#include "interp.h"

#include "gckpt/core/parallel.h"

bool exec_parallel_check(const gckpt_setting *s, const gckpt_exec_opts *o, gckpt_err *err)
{
    int world = o && o->world > 1 ? o->world : 1, rank = o ? o->rank : 0;
    if (rank < 0 || rank >= world) {
        gckpt_seterr(err, "rank %d of %d ranks", rank, world);
        return false;
    }
    if (!gckpt_layout_multi(&s->layout)) {
        if (world == 1) return true;
        gckpt_seterr(err, "a one-GPU setting run on %d ranks", world);
        return false;
    }
    const char *mode = gckpt_parallel_names[s->layout.mode];
    if (s->layout.mode != GCKPT_PAR_DDP) {
        gckpt_seterr(err, "parallel mode %s: gckpt-run does not execute it yet (its per-rank working set, gathered "
                          "parameters and reduce-scatter buffers, is not events of the schedule); ddp runs",
                     mode);
        return false;
    }
    if ((uint32_t)world != gckpt_layout_world(&s->layout)) {
        gckpt_seterr(err, "parallel mode %s planned for %u ranks, run on %d", mode, gckpt_layout_world(&s->layout), world);
        return false;
    }
    return true;
}

static bool multi(const gckpt_exec *x) { return gckpt_layout_multi(&x->set.layout); }

gckpt_xstatus exec_parallel_setup(gckpt_exec *x, gckpt_err *err)
{
    if (!multi(x)) return GCKPT_XS_OK;
    gckpt_rank_bytes rb;
    gckpt_rank_persistent(&x->ctx.params, &x->m, &x->set, (uint32_t)x->o.rank, x->dev.alloc_round_bytes, &rb);
    /* DDP: weights and states are the parameter state table's (allocated already) */
    uint64_t bytes[EXEC_NPAR] = {[EXEC_PAR_GRADS] = rb.grads, [EXEC_PAR_SCALARS] = rb.scalars, [EXEC_PAR_BUFFERS] = rb.buffers};
    uint64_t sum = 0;
    for (int k = 0; k < EXEC_NPAR; k++) {
        if (!bytes[k]) continue;
        gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, bytes[k], &x->par[k]);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "allocating the parallel mode's buffers", err);
        x->par_bytes[k] = bytes[k];
        sum += bytes[k];
    }
    if (sum != x->ctx.parallel)
        return exec_fail(err, "setup: rank %d's %s buffers take %llu bytes, the schedule counts %llu", x->o.rank,
                         gckpt_parallel_names[x->set.layout.mode], (unsigned long long)sum,
                         (unsigned long long)x->ctx.parallel);
    return GCKPT_XS_OK;
}

/* Every trainable parameter's .grad into (to_bucket) or out of the bucket, back to back in
 * the table's order; n: the elements moved. */
static gckpt_xstatus bucket_copy(gckpt_exec *x, bool to_bucket, uint64_t *n, uint8_t *dt, gckpt_err *err)
{
    uint64_t off = 0;
    *dt = 0;
    for (size_t i = 0; i < x->nparams; i++) {
        param_t *p = &x->params[i];
        if (!p->spec->trainable) continue;
        if (!exec_live(x, p->grad)) return exec_fail(err, "ddp: parameter %s has no gradient to reduce", p->spec->name);
        gckpt_xt g = exec_inst_view(x, p->grad);
        if (*dt && g.dt != *dt) return exec_fail(err, "ddp: gradients of different dtypes in one bucket");
        *dt = g.dt;
        uint64_t sz = gckpt_dtype_size((gckpt_dtype)g.dt);
        if ((off + g.n) * sz > x->par_bytes[EXEC_PAR_GRADS])
            return exec_fail(err, "ddp: the gradients do not fit the %llu-byte bucket",
                             (unsigned long long)x->par_bytes[EXEC_PAR_GRADS]);
        gckpt_xt b = {(char *)x->par[EXEC_PAR_GRADS] + off * sz, g.n, g.dt};
        gckpt_xt none = {0};
        gckpt_xstatus rc = to_bucket ? x->be->add(x->be, b, none, g) : x->be->add(x->be, g, none, b);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "ddp: copying a gradient", err);
        off += g.n;
    }
    *n = off;
    return GCKPT_XS_OK;
}

gckpt_xstatus exec_parallel_sync(gckpt_exec *x, gckpt_err *err)
{
    if (!multi(x)) return GCKPT_XS_OK;
    uint64_t n;
    uint8_t dt;
    gckpt_xstatus rc = bucket_copy(x, true, &n, &dt, err);
    if (rc != GCKPT_XS_OK) return rc;
    gckpt_xt b = {x->par[EXEC_PAR_GRADS], n, dt};
    if ((rc = x->be->collective(x->be, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG, b, b, 0)) != GCKPT_XS_OK)
        return exec_be_fail(x, rc, "ddp: all-reduce of the gradients", err);
    return bucket_copy(x, false, &n, &dt, err);
}

void exec_parallel_release(gckpt_exec *x)
{
    for (int k = 0; k < EXEC_NPAR; k++) {
        if (x->par[k]) x->be->release(x->be, GCKPT_MEM_DEVICE, x->par[k], x->par_bytes[k]);
        x->par[k] = NULL;
        x->par_bytes[k] = 0;
    }
}
