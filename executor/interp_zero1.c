/* DeepSpeed ZeRO-1 on several ranks, and the flat groups ZeRO-2 shares (gckpt/core/parallel.h
 * has the sizes: gckpt_zero12_groups, gckpt_zero12_flat, gckpt_zero12_step_grads,
 * gckpt_zero12_temp). The weights live in each optimizer group's flat, padded model-dtype
 * buffer (replicated); the rank keeps the fp32 master and AdamW's states of its partition
 * only. The full .grad accumulate as on one GPU; at the boundary they go through the ipg
 * bucket (reduce_bucket_size elements: the schedule's ALLOC_SCRATCH marked GCKPT_PE_IPG_BUCKET
 * at the first backward's first gradient hook) and are averaged over the ranks (all-reduce in
 * the model dtype, the sum scaled by 1 / N as DeepSpeed does). The schedule's step: the .grad
 * outside the rank's partition freed (a ZERO_GRAD marked GCKPT_PE_OUTSIDE_PARTITION), the ipg
 * bucket released, the step's temporaries (the partition's gradient slice, its fp32 copy),
 * AdamW on the master partition, the master cast into the flat weights, the flat weights
 * all-gathered (a COLLECTIVE event after the step), the rest freed and the bucket allocated again. */
#include "interp_parallel.h"

#include <stdlib.h>

#include "gckpt/core/parallel.h"

static uint64_t z_bucket_bytes(const gckpt_exec *x)
{
    return x->zero->bucket * gckpt_dtype_size((gckpt_dtype)x->zero->dt);
}

/* A view of n elements of dtype dt at element offset off of buffer p. */
static gckpt_xt view(void *p, uint64_t off, uint64_t n, uint8_t dt)
{
    return (gckpt_xt){(char *)p + off * gckpt_dtype_size((gckpt_dtype)dt), n, dt};
}

bool exec_zero_prepare(gckpt_exec *x, gckpt_err *err)
{
    exec_zero *z = x->zero = calloc(1, sizeof *x->zero);
    if (!z) return gckpt_seterr(err, "out of memory"), false;
    const gckpt_params *ps = &x->ctx.params;
    gckpt_zero12_groups(ps, &x->set, x->dev.alloc_round_bytes, z->g);
    z->bucket = gckpt_ds_reduce_bucket(&x->m, &x->set.layout);
    for (int i = 0; i < ps->n; i++) /* one model dtype (checked in setup) */
        if (ps->p[i].trainable) z->dt = ps->p[i].weight.dtype;
    return true;
}

/* The rank's rows (the flat groups and partitions among them), each parameter instance a view
 * into its group. */
gckpt_xstatus exec_zero_setup(gckpt_exec *x, gckpt_err *err)
{
    gckpt_xstatus rc = exec_rank_buffers(x, err);
    if (rc != GCKPT_XS_OK) return rc;
    exec_zero *z = x->zero;
    const gckpt_params *ps = &x->ctx.params;
    unsigned sz = gckpt_dtype_size((gckpt_dtype)z->dt);
    z->z1_bucket[0] = z->z1_bucket[1] = GCKPT_NOINST;
    /* the flat groups hold the trainable parameters; a frozen one (LoRA's base) is a whole
     * replica, its row bound as one GPU's (core/parallel.c, R-DISTPEFT-5) */
    size_t count = gckpt_zero12_flat(ps, x->m.layers, NULL), trainable = 0;
    for (size_t j = 0; j < x->nparams; j++) trainable += x->params[j].spec->trainable;
    if (count != trainable) return exec_fail(err, "zero1: %zu flat places for %zu trainable parameters", count, trainable);
    if (!z->place) {
        size_t n = x->nparams ? x->nparams : 1; /* per parameter instance; a frozen one has no place */
        z->place = calloc(n, sizeof *z->place);
        z->keep = calloc(n, sizeof *z->keep);
        z->flat_j = calloc(count ? count : 1, sizeof *z->flat_j);
        gckpt_flat_place *f = malloc(sizeof *f * (count ? count : 1));
        if (!z->place || !z->keep || !z->flat_j || !f) {
            free(f);
            return exec_fail(err, "out of memory");
        }
        gckpt_zero12_flat(ps, x->m.layers, f);
        for (size_t k = 0; k < count; k++) {
            size_t j = 0;
            while (j < x->nparams && !(x->params[j].spec == &ps->p[f[k].param] &&
                                       (x->params[j].layer < 0 ? 0 : (uint64_t)x->params[j].layer) == f[k].copy))
                j++;
            if (j == x->nparams) {
                free(f);
                return exec_fail(err, "zero1: no parameter instance at flat place %zu", k);
            }
            z->place[j] = f[k];
            z->flat_j[k] = j;
            z->keep[j] = gckpt_zero12_in_partition(ps, &f[k], z->g[f[k].group].part, (uint32_t)x->o.rank);
        }
        free(f);
    }
    for (int g = 0; g < 2; g++) { /* views into the rank's rows of the group (exec_rank_buffers) */
        const gckpt_zero_group *zg = &z->g[g];
        if (!zg->numel) continue;
        uint64_t bytes[4];
        z->flat[g] = exec_row(x, GCKPT_ROW_WEIGHTS, -1, g, 0, 0, &bytes[0]);
        z->master[g] = exec_row(x, GCKPT_ROW_MASTER, -1, g, 0, 0, &bytes[1]);
        for (int k = 0; k < 2; k++) z->st[g][k] = exec_row(x, GCKPT_ROW_STATES, -1, g, k, 0, &bytes[2 + k]);
        if (!z->flat[g] || !z->master[g] || !z->st[g][0] || !z->st[g][1] || bytes[0] != zg->weight_bytes ||
            bytes[1] != zg->master_bytes || bytes[2] != zg->state_bytes || bytes[3] != zg->state_bytes)
            return exec_fail(err, "zero1: group %d's rows are not its flat weights, master and states", g);
        gckpt_xt padded = {z->flat[g], zg->padded, z->dt};
        rc = x->be->init(x->be, padded, GCKPT_INIT_CONST, 0.0f, 0); /* the padding stays 0 */
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "zero1: clearing the flat weights", err);
    }
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        if (!p->spec->trainable) {
            if (!p->w) return exec_fail(err, "zero1: frozen parameter %s has no whole row", p->spec->name);
            continue;
        }
        if (p->spec->weight.dtype != z->dt)
            return exec_fail(err, "zero1: parameter %s is not a %s tensor", p->spec->name, gckpt_dtype_names[z->dt]);
        p->w = (char *)z->flat[z->place[j].group] + z->place[j].offset * sz;
        p->flat = true;
    }
    return GCKPT_XS_OK;
}

/* ZeRO-1's reduction at the boundary, one COLLECTIVE event per ipg bucket flush (the flush
 * e->arg.coll.index of gckpt_zero1_flushes): its parameters' .grad through the bucket in the flat
 * order, a bucket's worth at a time, all-reduced in place and copied back. */
static gckpt_xstatus zero1_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_zero *z = x->zero;
    const gckpt_params *ps = &x->ctx.params;
    if (e->arg.coll.kind == GCKPT_COLL_ALL_GATHER && w->seg->part == GCKPT_PART_OPTIMIZER)
        return exec_zero_gather(x, e, w, err);
    if (e->arg.coll.kind != GCKPT_COLL_ALL_REDUCE || e->dtype != z->dt)
        return exec_fail(err, "%s: zero1: a %s of %s, not the reduction's all-reduce of %s", w->at,
                         gckpt_coll_names[e->arg.coll.kind], gckpt_dtype_names[e->dtype], gckpt_dtype_names[z->dt]);
    if (!exec_live(x, z->z1_bucket[0])) return exec_fail(err, "%s: zero1: the ipg bucket is not allocated", w->at);
    void *bucket = x->inst[z->z1_bucket[0]].p;
    size_t count = gckpt_zero12_flat(ps, x->m.layers, NULL), nf = 0;
    gckpt_flat_place *f = malloc(sizeof *f * (count ? count : 1));
    gckpt_zero1_flush *fl = NULL;
    if (f) {
        gckpt_zero12_flat(ps, x->m.layers, f);
        nf = gckpt_zero1_flushes(ps, f, count, z->bucket, NULL);
        fl = malloc(sizeof *fl * (nf ? nf : 1));
    }
    typedef struct {
        size_t j;
        uint64_t off, n, at;
    } seg_t;
    seg_t *seg = malloc(sizeof *seg * (x->nparams + 1));
    gckpt_xstatus rc = GCKPT_XS_OK;
    if (!f || !fl || !seg) rc = exec_fail(err, "out of memory");
    else gckpt_zero1_flushes(ps, f, count, z->bucket, fl);
    uint64_t q = e->arg.coll.index;
    if (rc == GCKPT_XS_OK && (q >= nf || fl[q].numel != e->numel))
        rc = exec_fail(err, "%s: zero1: flush %llu of %llu elements, the reduction has %zu flushes", w->at,
                       (unsigned long long)q, (unsigned long long)e->numel, nf);
    uint64_t cap = z->bucket, fill = 0;
    size_t nseg = 0;
    gckpt_xt none = {0};
    for (size_t k = rc == GCKPT_XS_OK ? fl[q].first : 0; rc == GCKPT_XS_OK && k <= fl[q].end; k++) {
        const param_t *p = k < fl[q].end ? &x->params[z->flat_j[k]] : NULL;
        if (p && !exec_live(x, p->grad)) {
            rc = exec_fail(err, "%s: zero1: parameter %s has no gradient to reduce", w->at, p->spec->name);
            break;
        }
        uint64_t numel = p ? p->spec->numel : 0;
        for (uint64_t off = 0; (p && off < numel) || (!p && fill);) {
            uint64_t n = p ? (numel - off < cap - fill ? numel - off : cap - fill) : 0;
            if (n) {
                seg[nseg++] = (seg_t){z->flat_j[k], off, n, fill};
                rc = x->be->add(x->be, view(bucket, fill, n, z->dt), none, view(x->inst[p->grad].p, off, n, z->dt));
                fill += n;
                off += n;
            }
            if (rc == GCKPT_XS_OK && (fill == cap || !p)) { /* full, or the flush's end: reduce it */
                gckpt_xt b = view(bucket, 0, fill, z->dt);
                rc = x->be->collective(x->be, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG_POST, b, b, 0);
                for (size_t s = 0; rc == GCKPT_XS_OK && s < nseg; s++)
                    rc = x->be->add(x->be, view(x->inst[x->params[seg[s].j].grad].p, seg[s].off, seg[s].n, z->dt), none,
                                    view(bucket, seg[s].at, seg[s].n, z->dt));
                nseg = 0;
                fill = 0;
            }
            if (rc != GCKPT_XS_OK) break;
        }
    }
    free(seg);
    free(fl);
    free(f);
    if (rc != GCKPT_XS_OK && !err->msg[0]) return exec_be_fail(x, rc, "zero1: reducing the gradients", err);
    return rc;
}

gckpt_xstatus exec_zero_init(gckpt_exec *x, gckpt_err *err)
{
    exec_zero *z = x->zero;
    gckpt_xt none = {0};
    for (int g = 0; g < 2; g++) {
        uint64_t part = z->g[g].part;
        if (!z->g[g].numel) continue;
        /* the fp32 master: the rank's slice of the weights as loaded; the states 0 */
        gckpt_xstatus rc = x->be->add(x->be, view(z->master[g], 0, part, GCKPT_DT_F32), none,
                                      view(z->flat[g], (uint64_t)x->o.rank * part, part, z->dt));
        for (int k = 0; k < 2 && rc == GCKPT_XS_OK; k++)
            rc = x->be->init(x->be, view(z->st[g][k], 0, part, GCKPT_DT_F32), GCKPT_INIT_CONST, 0.0f, 0);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "zero1: the master partition", err);
    }
    return GCKPT_XS_OK;
}

bool exec_zero_keeps_grad(const gckpt_exec *x, size_t i) { return x->zero->keep[i]; }

/* One group's step on this rank's partition [rank x part, (rank + 1) x part). */
static gckpt_xstatus zero_group_step(gckpt_exec *x, int g, const gckpt_xt *slice, const gckpt_xt *f32, uint64_t step,
                                     gckpt_xt (*grad_of)(const gckpt_exec *x, size_t j))
{
    exec_zero *z = x->zero;
    gckpt_backend *be = x->be;
    uint64_t part = z->g[g].part, lo = (uint64_t)x->o.rank * part, hi = lo + part;
    gckpt_xt none = {0};
    gckpt_xstatus rc = be->init(be, *slice, GCKPT_INIT_CONST, 0.0f, 0);
    /* the partition's gradient slice, from the kept .grad of every parameter overlapping it */
    for (size_t j = 0; j < x->nparams && rc == GCKPT_XS_OK; j++) {
        const gckpt_flat_place *f = &z->place[j];
        if (f->group != g || !z->keep[j]) continue;
        /* ZeRO-1: its .grad; ZeRO-2: its place in the reduced partition buffer */
        gckpt_xt grad = grad_of(x, j);
        if (!grad.p) return GCKPT_XS_ERROR;
        uint64_t a = f->offset > lo ? f->offset : lo, end = f->offset + x->params[j].spec->numel;
        uint64_t b = end < hi ? end : hi;
        rc = be->add(be, view(slice->p, a - lo, b - a, z->dt), none, view(grad.p, a - f->offset, b - a, z->dt));
    }
    if (rc == GCKPT_XS_OK && f32->p != slice->p) rc = be->add(be, *f32, none, *slice);
    if (rc != GCKPT_XS_OK) return rc;
    gckpt_optcall c = exec_optcall(x, view(z->master[g], 0, part, GCKPT_DT_F32), *f32, step); /* as on one GPU */
    c.kind = GCKPT_ADAMW;
    c.s1 = view(z->st[g][0], 0, part, GCKPT_DT_F32);
    c.s2 = view(z->st[g][1], 0, part, GCKPT_DT_F32);
    if ((rc = be->optim(be, &c)) != GCKPT_XS_OK) return rc;
    /* the updated master into the rank's slice of the weights (every rank's gathered after the
     * step: exec_zero_gather) */
    return be->add(be, view(z->flat[g], lo, part, z->dt), none, c.param);
}

gckpt_xstatus exec_zero_gather(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_zero *z = x->zero;
    uint64_t g = e->arg.coll.index;
    if (g > 1 || !z->g[g].numel || e->numel != z->g[g].part || e->dtype != z->dt || e->tensor >= 0)
        return exec_fail(err, "%s: zero: an all-gather of %llu %s elements per rank, not an optimizer group's flat weights",
                         w->at, (unsigned long long)e->numel, gckpt_dtype_names[e->dtype]);
    if (!w->update) return GCKPT_XS_OK; /* nothing was stepped */
    uint64_t part = z->g[g].part;
    gckpt_xt mine = view(z->flat[g], (uint64_t)x->o.rank * part, part, z->dt);
    gckpt_xstatus rc = x->be->collective(x->be, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, mine,
                                         view(z->flat[g], 0, z->g[g].padded, z->dt), 0);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

gckpt_xstatus exec_zero_step(gckpt_exec *x, const exec_site *w, gckpt_xt (*grad_of)(const gckpt_exec *x, size_t j),
                             gckpt_err *err)
{
    exec_zero *z = x->zero;
    uint64_t largest = z->g[0].part > z->g[1].part ? z->g[0].part : z->g[1].part, piece[GCKPT_ZERO_NTEMP];
    unsigned sz = gckpt_dtype_size((gckpt_dtype)z->dt);
    gckpt_zero12_temp(largest, sz, x->dev.alloc_round_bytes, piece);
    if (!x->opt_temp || x->opt_temp_bytes < piece[GCKPT_ZERO_TEMP_SLICE] + piece[GCKPT_ZERO_TEMP_F32])
        return exec_fail(err, "%s: the step's temporaries are not allocated", w->at);
    for (int g = 0; g < 2; g++) {
        if (!z->g[g].numel) continue;
        gckpt_xt slice = view(x->opt_temp, 0, z->g[g].part, z->dt);
        gckpt_xt f32 = piece[GCKPT_ZERO_TEMP_F32] ? view((char *)x->opt_temp + piece[GCKPT_ZERO_TEMP_SLICE], 0, z->g[g].part, GCKPT_DT_F32)
                                                  : slice;
        gckpt_xstatus rc = zero_group_step(x, g, &slice, &f32, x->step + 1, grad_of);
        if (rc != GCKPT_XS_OK) return x->be->err.msg[0] ? exec_be_fail(x, rc, w->at, err)
                                                        : exec_fail(err, "%s: a kept gradient is missing", w->at);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus exec_zero_step_buffer(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    bool release = e->kind == GCKPT_EV_OPT_TEMP_FREE;
    if (e->bytes != (release ? x->ctx.par.step_released : x->ctx.par.step_retaken))
        return exec_fail(err, "%s: %llu bytes of the parallel mode released or taken in the step, not its ipg bucket",
                         w->at, (unsigned long long)e->bytes);
    uint64_t bytes;
    if (release) { /* the held rows made within the step (the flag beside the bucket) */
        exec_step_rows_release(x, &bytes);
        if (bytes != x->ctx.par.step_retaken) return exec_fail(err, "%s: the ipg bucket is not allocated", w->at);
        /* ZeRO-1: the bucket(s) its first backward allocated (zero1_on_alloc) */
        for (int k = 0; k < 2; k++) {
            uint32_t *b = &x->zero->z1_bucket[k];
            if (exec_live(x, *b)) exec_inst_release(x, *b);
            *b = GCKPT_NOINST;
        }
        return GCKPT_XS_OK;
    }
    gckpt_xstatus rc = exec_step_rows_take(x, &bytes, err);
    if (rc != GCKPT_XS_OK) return rc;
    if (bytes != e->bytes)
        return exec_fail(err, "%s: the step takes %llu bytes again, the rank's rows %llu", w->at,
                         (unsigned long long)e->bytes, (unsigned long long)bytes);
    return GCKPT_XS_OK;
}

/* The ipg bucket(s) of the first backward (an ALLOC_SCRATCH marked GCKPT_PE_IPG_BUCKET), kept
 * for the reduction at the boundary and the step's release. */
static gckpt_xstatus zero1_on_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_zero *z = x->zero;
    if (e->par != GCKPT_PE_IPG_BUCKET) return GCKPT_XS_OK;
    if (e->kind != GCKPT_EV_ALLOC_SCRATCH || e->numel != z->bucket || e->dtype != z->dt)
        return exec_fail(err, "%s: zero1: an ipg bucket of %llu %s elements, reduce_bucket_size is %llu %s", w->at,
                         (unsigned long long)e->numel, gckpt_dtype_names[e->dtype], (unsigned long long)z->bucket,
                         gckpt_dtype_names[z->dt]);
    for (uint64_t k = 0; k < gckpt_ds_ipg_buckets(&x->set.layout) && k < 2; k++)
        if (!exec_live(x, z->z1_bucket[k])) {
            z->z1_bucket[k] = e->inst;
            return GCKPT_XS_OK;
        }
    return exec_fail(err, "%s: zero1: more ipg buckets than planned", w->at);
}

static bool zero1_holds(const gckpt_exec *x, uint32_t id)
{
    return id != GCKPT_NOINST && (x->zero->z1_bucket[0] == id || x->zero->z1_bucket[1] == id);
}

void exec_zero_release(gckpt_exec *x) /* the views only: the rows are released with the rank's */
{
    exec_zero *z = x->zero;
    for (int g = 0; z && g < 2; g++) z->flat[g] = z->master[g] = z->st[g][0] = z->st[g][1] = NULL;
}

void exec_zero_free(gckpt_exec *x)
{
    if (!x->zero) return;
    free(x->zero->place);
    free(x->zero->keep);
    free(x->zero->flat_j);
    free(x->zero->pbuf_off);
    free(x->zero->pend_j);
    free(x->zero->pend_off);
    free(x->zero);
    x->zero = NULL;
}

static gckpt_xstatus zero1_setup(gckpt_exec *x, gckpt_err *err)
{
    gckpt_xstatus rc = exec_zero_setup(x, err);
    if (rc != GCKPT_XS_OK) return rc;
    uint64_t buckets = gckpt_round_up(z_bucket_bytes(x), x->dev.alloc_round_bytes) * gckpt_ds_ipg_buckets(&x->set.layout);
    if (x->ctx.par.step_released != x->ctx.par.step_retaken + buckets)
        return exec_fail(err, "zero1: the step releases %llu bytes and takes %llu again, not the ipg buckets' %llu",
                         (unsigned long long)x->ctx.par.step_released, (unsigned long long)x->ctx.par.step_retaken,
                         (unsigned long long)buckets);
    return GCKPT_XS_OK;
}

static gckpt_xt zero1_grad(const gckpt_exec *x, size_t j) { return exec_inst_view(x, x->params[j].grad); }

static gckpt_xstatus zero1_step(gckpt_exec *x, const exec_site *w, gckpt_err *err)
{
    return exec_zero_step(x, w, zero1_grad, err);
}

const exec_par_ops exec_zero1_ops = {.prepare = exec_zero_prepare,
                                     .setup = zero1_setup,
                                     .init = exec_zero_init,
                                     .on_alloc = zero1_on_alloc,
                                     .collective = zero1_collective,
                                     .keeps_grad = exec_zero_keeps_grad,
                                     .step_buffer = exec_zero_step_buffer,
                                     .step = zero1_step,
                                     .holds = zero1_holds,
                                     .release = exec_zero_release,
                                     .free = exec_zero_free};
