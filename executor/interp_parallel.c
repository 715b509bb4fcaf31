/* Several ranks: what a parallel mode adds to the interpreter (gckpt/core/parallel.h has the
 * rules, FINDINGS R-DIST-* the measurements). Every rank runs the schedule of its own micro-steps;
 * the mode's persistent buffers are allocated as the core sizes them (gckpt_rank_persistent,
 * gckpt_zero12_groups, the context's parallel bytes), and the gradients are reduced over the
 * backend's collective when the last micro-step has ended.
 *  ddp:   full replicas; the buckets (a flat copy of every gradient in the gradients' dtype,
 *         persistent: gradient_as_bucket_view false) take the gradients of the synchronising
 *         micro-step, are averaged over the ranks (all-reduce of the fp32 buckets, each rank's
 *         divided by N first as torch's DDP does) and copied back; every rank then takes the
 *         same AdamW step.
 *  zero1: the weights live in each optimizer group's flat, padded model-dtype buffer
 *         (replicated); the rank keeps the fp32 master and AdamW's states of its partition
 *         only. The full .grad accumulate as on one GPU; at the boundary they go through the
 *         ipg bucket (reduce_bucket_size elements) and are averaged over the ranks (all-reduce
 *         in the model dtype, the sum scaled by 1 / N as DeepSpeed does). The schedule's step:
 *         the .grad outside the rank's partition freed, the ipg bucket released, the step's
 *         temporaries (the partition's gradient slice, its fp32 copy), AdamW on the master
 *         partition, the master cast into the flat weights, the flat weights all-gathered,
 *         the rest freed and the bucket allocated again.
 * DDP's step counters, ZeRO's scalars and the model's buffers are allocated as their bytes
 * (nothing reads them here). zero2 is zero1's layout with its reductions in interp_zero2.c,
 * fsdp runs in interp_fsdp.c, zero3 in interp_zero3.c (the three in fp32). */
#include "interp.h"

#include <stdlib.h>
#include <string.h>

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
    /* every mode executes what the core plans per rank (a hand-written plan may hold more) */
    if (!gckpt_layout_check(s, err)) return false;
    if ((uint32_t)world != gckpt_layout_world(&s->layout)) {
        gckpt_seterr(err, "parallel mode %s planned for %u ranks, run on %d", mode, gckpt_layout_world(&s->layout), world);
        return false;
    }
    return true;
}

static bool multi(const gckpt_exec *x) { return gckpt_layout_multi(&x->set.layout); }

static uint64_t z_bucket_bytes(const gckpt_exec *x)
{
    return x->zero->bucket * gckpt_dtype_size((gckpt_dtype)x->zero->dt);
}

/* A view of n elements of dtype dt at element offset off of buffer p. */
static gckpt_xt view(void *p, uint64_t off, uint64_t n, uint8_t dt)
{
    return (gckpt_xt){(char *)p + off * gckpt_dtype_size((gckpt_dtype)dt), n, dt};
}

bool exec_parallel_prepare(gckpt_exec *x, gckpt_err *err)
{
    if (x->set.layout.mode != GCKPT_PAR_ZERO1 && x->set.layout.mode != GCKPT_PAR_ZERO2) return true;
    exec_zero *z = x->zero = calloc(1, sizeof *x->zero);
    if (!z) return gckpt_seterr(err, "out of memory"), false;
    const gckpt_params *ps = &x->ctx.params;
    gckpt_zero12_groups(ps, &x->set, x->dev.alloc_round_bytes, z->g);
    z->bucket = gckpt_ds_reduce_bucket(&x->m, &x->set.layout);
    for (int i = 0; i < ps->n; i++) z->dt = ps->p[i].weight.dtype; /* one model dtype (checked in setup) */
    return true;
}

/* ZeRO-1's flat groups and partitions, each parameter instance a view into its group. */
static gckpt_xstatus zero_setup(gckpt_exec *x, gckpt_err *err)
{
    exec_zero *z = x->zero;
    const gckpt_params *ps = &x->ctx.params;
    unsigned sz = gckpt_dtype_size((gckpt_dtype)z->dt);
    size_t count = gckpt_zero12_flat(ps, x->m.layers, NULL);
    if (count != x->nparams) return exec_fail(err, "zero1: %zu flat places for %zu parameters", count, x->nparams);
    if (!z->place) {
        z->place = calloc(count ? count : 1, sizeof *z->place);
        z->keep = calloc(count ? count : 1, sizeof *z->keep);
        gckpt_flat_place *f = malloc(sizeof *f * (count ? count : 1));
        if (!z->place || !z->keep || !f) {
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
            z->keep[j] = gckpt_zero12_in_partition(ps, &f[k], z->g[f[k].group].part, (uint32_t)x->o.rank);
        }
        free(f);
    }
    uint64_t weights = 0, states = 0;
    for (int g = 0; g < 2; g++) {
        const gckpt_zero_group *zg = &z->g[g];
        if (!zg->numel) continue;
        void **bufs[4] = {&z->flat[g], &z->master[g], &z->st[g][0], &z->st[g][1]};
        uint64_t bytes[4] = {zg->weight_bytes, zg->master_bytes, zg->state_bytes, zg->state_bytes};
        for (int k = 0; k < 4; k++) {
            gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, bytes[k], bufs[k]);
            if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "allocating zero1's flat groups", err);
        }
        weights += zg->weight_bytes;
        states += zg->master_bytes + 2 * zg->state_bytes;
        gckpt_xt padded = {z->flat[g], zg->padded, z->dt};
        gckpt_xstatus rc = x->be->init(x->be, padded, GCKPT_INIT_CONST, 0.0f, 0); /* the padding stays 0 */
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "zero1: clearing the flat weights", err);
    }
    if (weights != x->ctx.weights || states != x->ctx.opt_states)
        return exec_fail(err, "zero1: flat weights %llu and partitions %llu bytes, the schedule counts %llu and %llu",
                         (unsigned long long)weights, (unsigned long long)states, (unsigned long long)x->ctx.weights,
                         (unsigned long long)x->ctx.opt_states);
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        if (p->spec->weight.dtype != z->dt || !p->spec->trainable)
            return exec_fail(err, "zero1: parameter %s is not a trainable %s tensor", p->spec->name,
                             gckpt_dtype_names[z->dt]);
        p->w = (char *)z->flat[z->place[j].group] + z->place[j].offset * sz;
        p->flat = true;
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus exec_parallel_setup(gckpt_exec *x, gckpt_err *err)
{
    if (!multi(x)) return GCKPT_XS_OK;
    gckpt_rank_bytes rb;
    gckpt_rank_persistent(&x->ctx.params, &x->m, &x->set, (uint32_t)x->o.rank, x->dev.alloc_round_bytes, &rb);
    /* DDP: weights and states are the parameter state table's; ZeRO-1: zero_setup's, and the
     * ipg bucket (with its flag) is what the step releases */
    uint64_t bytes[EXEC_NPAR] = {[EXEC_PAR_GRADS] = rb.grads, [EXEC_PAR_STEP] = x->ctx.step_retaken,
                                 [EXEC_PAR_SCALARS] = rb.scalars, [EXEC_PAR_BUFFERS] = rb.buffers};
    if (x->zero) {
        gckpt_xstatus rc = zero_setup(x, err);
        if (rc != GCKPT_XS_OK) return rc;
        if (x->set.layout.mode == GCKPT_PAR_ZERO2 && (rc = exec_z2_setup(x, err)) != GCKPT_XS_OK) return rc;
        x->zero->z1_bucket[0] = x->zero->z1_bucket[1] = GCKPT_NOINST;
        uint64_t buckets = gckpt_round_up(z_bucket_bytes(x), x->dev.alloc_round_bytes) * gckpt_ds_ipg_buckets(&x->set.layout);
        if (x->set.layout.mode == GCKPT_PAR_ZERO1 && x->ctx.step_released != x->ctx.step_retaken + buckets)
            return exec_fail(err, "zero1: the step releases %llu bytes and takes %llu again, not the ipg buckets' %llu",
                             (unsigned long long)x->ctx.step_released, (unsigned long long)x->ctx.step_retaken,
                             (unsigned long long)buckets);
    }
    if (x->set.layout.mode == GCKPT_PAR_FSDP) { /* the parameter instances exist now */
        if (!x->fsdp && !exec_fsdp_prepare(x, err)) return GCKPT_XS_ERROR;
        gckpt_xstatus rc = exec_fsdp_setup(x, err);
        if (rc != GCKPT_XS_OK) return rc;
    }
    uint64_t sum = 0;
    for (int k = 0; k < EXEC_NPAR; k++) {
        if (!bytes[k]) continue;
        gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, bytes[k], &x->par[k]);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "allocating the parallel mode's buffers", err);
        x->par_bytes[k] = bytes[k];
        sum += bytes[k];
    }
    if (x->set.layout.mode == GCKPT_PAR_ZERO3) {
        gckpt_xstatus rc = exec_z3_setup(x, err);
        if (rc != GCKPT_XS_OK) return rc;
    }
    /* DDP's find_unused_parameters maps are counted apart (they follow every_n) */
    uint64_t planned = x->ctx.parallel + (x->set.every_n ? 0 : x->ctx.ddp_used_map);
    if (sum != planned)
        return exec_fail(err, "setup: rank %d's %s buffers take %llu bytes, the schedule counts %llu", x->o.rank,
                         gckpt_parallel_names[x->set.layout.mode], (unsigned long long)sum,
                         (unsigned long long)planned);
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

/* ZeRO-1: every .grad through the ipg bucket, reduced a bucket at a time (in place). */
static gckpt_xstatus zero_sync(gckpt_exec *x, gckpt_err *err)
{
    exec_zero *z = x->zero;
    if (!exec_live(x, z->z1_bucket[0])) return exec_fail(err, "zero1: the ipg bucket is not allocated at the boundary");
    void *bucket = x->inst[z->z1_bucket[0]].p;
    typedef struct {
        size_t j;
        uint64_t off, n, at;
    } seg_t;
    uint64_t cap = z->bucket, fill = 0;
    size_t nseg = 0, maxseg = x->nparams + 1;
    seg_t *seg = malloc(sizeof *seg * maxseg);
    if (!seg) return exec_fail(err, "out of memory");
    gckpt_xstatus rc = GCKPT_XS_OK;
    gckpt_xt none = {0};
    for (size_t j = 0; j <= x->nparams && rc == GCKPT_XS_OK; j++) {
        const param_t *p = j < x->nparams ? &x->params[j] : NULL;
        if (p && !exec_live(x, p->grad)) {
            rc = exec_fail(err, "zero1: parameter %s has no gradient to reduce", p->spec->name);
            break;
        }
        uint64_t numel = p ? p->spec->numel : 0;
        for (uint64_t off = 0; (p && off < numel) || (!p && fill);) {
            uint64_t n = p ? (numel - off < cap - fill ? numel - off : cap - fill) : 0;
            if (n) {
                if (nseg == maxseg) {
                    seg_t *more = realloc(seg, sizeof *seg * (maxseg *= 2));
                    if (!more) {
                        rc = exec_fail(err, "out of memory");
                        break;
                    }
                    seg = more;
                }
                seg[nseg++] = (seg_t){j, off, n, fill};
                rc = x->be->add(x->be, view(bucket, fill, n, z->dt), none,
                                view(x->inst[p->grad].p, off, n, z->dt));
                fill += n;
                off += n;
            }
            if (rc == GCKPT_XS_OK && (fill == cap || !p)) { /* full, or the last one: reduce it */
                gckpt_xt b = view(bucket, 0, fill, z->dt);
                rc = x->be->collective(x->be, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG_POST, b, b, 0);
                for (size_t k = 0; rc == GCKPT_XS_OK && k < nseg; k++)
                    rc = x->be->add(x->be, view(x->inst[x->params[seg[k].j].grad].p, seg[k].off, seg[k].n, z->dt), none,
                                    view(bucket, seg[k].at, seg[k].n, z->dt));
                nseg = 0;
                fill = 0;
            }
            if (rc != GCKPT_XS_OK) break;
        }
    }
    free(seg);
    if (rc != GCKPT_XS_OK && !err->msg[0]) return exec_be_fail(x, rc, "zero1: reducing the gradients", err);
    return rc;
}

gckpt_xstatus exec_parallel_sync(gckpt_exec *x, gckpt_err *err)
{
    if (!multi(x) || x->fsdp || x->z3 || x->set.layout.mode == GCKPT_PAR_ZERO2)
        return GCKPT_XS_OK; /* FSDP2, ZeRO-2/3: reduced inside the schedule */
    gckpt_comm_label(x->o.comm, "the gradients' reduction after the last micro-step");
    if (x->zero) return zero_sync(x, err);
    uint64_t n;
    uint8_t dt;
    gckpt_xstatus rc = bucket_copy(x, true, &n, &dt, err);
    if (rc != GCKPT_XS_OK) return rc;
    gckpt_xt b = {x->par[EXEC_PAR_GRADS], n, dt};
    if ((rc = x->be->collective(x->be, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG, b, b, 0)) != GCKPT_XS_OK)
        return exec_be_fail(x, rc, "ddp: all-reduce of the gradients", err);
    return bucket_copy(x, false, &n, &dt, err);
}

gckpt_xstatus exec_parallel_init(gckpt_exec *x, gckpt_err *err)
{
    exec_zero *z = x->zero;
    if (!z) return GCKPT_XS_OK;
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

bool exec_parallel_keeps_grad(const gckpt_exec *x, size_t i) { return x->zero && x->zero->keep[i]; }

/* One group's step on this rank's partition [rank x part, (rank + 1) x part). */
static gckpt_xstatus zero_group_step(gckpt_exec *x, int g, const gckpt_xt *slice, const gckpt_xt *f32, uint64_t step)
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
        gckpt_xt grad = x->set.layout.mode == GCKPT_PAR_ZERO2 ? exec_z2_grad(x, j) : exec_inst_view(x, x->params[j].grad);
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
    /* the updated master into the rank's slice of the weights, then every rank's gathered */
    gckpt_xt mine = view(z->flat[g], lo, part, z->dt);
    if ((rc = be->add(be, mine, none, c.param)) != GCKPT_XS_OK) return rc;
    return be->collective(be, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, mine, view(z->flat[g], 0, z->g[g].padded, z->dt), 0);
}

gckpt_xstatus exec_parallel_step(gckpt_exec *x, const exec_site *w, gckpt_err *err)
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
        gckpt_xstatus rc = zero_group_step(x, g, &slice, &f32, x->step + 1);
        if (rc != GCKPT_XS_OK) return x->be->err.msg[0] ? exec_be_fail(x, rc, w->at, err)
                                                        : exec_fail(err, "%s: a kept gradient is missing", w->at);
    }
    return GCKPT_XS_OK;
}

gckpt_xstatus exec_parallel_step_buffer(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    bool release = e->kind == GCKPT_EV_OPT_TEMP_FREE;
    if (!x->zero || e->bytes != (release ? x->ctx.step_released : x->ctx.step_retaken))
        return exec_fail(err, "%s: %llu bytes of the parallel mode released or taken in the step, not its ipg bucket",
                         w->at, (unsigned long long)e->bytes);
    if (release) {
        if (!x->par[EXEC_PAR_STEP] && x->ctx.step_retaken) return exec_fail(err, "%s: the ipg bucket is not allocated", w->at);
        if (x->par[EXEC_PAR_STEP]) x->be->release(x->be, GCKPT_MEM_DEVICE, x->par[EXEC_PAR_STEP], x->par_bytes[EXEC_PAR_STEP]);
        x->par[EXEC_PAR_STEP] = NULL;
        /* ZeRO-1: the bucket(s) its first backward allocated (exec_z1_on_alloc) */
        for (int k = 0; k < 2; k++) {
            uint32_t *b = &x->zero->z1_bucket[k];
            if (exec_live(x, *b)) exec_inst_release(x, *b);
            *b = GCKPT_NOINST;
        }
        return GCKPT_XS_OK;
    }
    if (x->par[EXEC_PAR_STEP]) return exec_fail(err, "%s: the ipg bucket exists already", w->at);
    gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, e->bytes, &x->par[EXEC_PAR_STEP]);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    x->par_bytes[EXEC_PAR_STEP] = e->bytes;
    return GCKPT_XS_OK;
}

bool exec_z1_is_bucket(const gckpt_exec *x, uint32_t id)
{
    return x->zero && id != GCKPT_NOINST && (x->zero->z1_bucket[0] == id || x->zero->z1_bucket[1] == id);
}

gckpt_xstatus exec_z1_on_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_zero *z = x->zero;
    (void)w, (void)err;
    if (e->kind != GCKPT_EV_ALLOC_SCRATCH || e->comp != GCKPT_C_PARALLEL || e->numel != z->bucket || e->dtype != z->dt)
        return GCKPT_XS_OK;
    for (uint64_t k = 0; k < gckpt_ds_ipg_buckets(&x->set.layout) && k < 2; k++)
        if (!exec_live(x, z->z1_bucket[k])) {
            z->z1_bucket[k] = e->inst;
            break;
        }
    return GCKPT_XS_OK;
}

void exec_parallel_release(gckpt_exec *x)
{
    exec_fsdp_release(x);
    exec_z3_release(x);
    for (int k = 0; k < EXEC_NPAR; k++) {
        if (x->par[k]) x->be->release(x->be, GCKPT_MEM_DEVICE, x->par[k], x->par_bytes[k]);
        x->par[k] = NULL;
        x->par_bytes[k] = 0;
    }
    exec_zero *z = x->zero;
    for (int g = 0; z && g < 2; g++) {
        void **bufs[4] = {&z->flat[g], &z->master[g], &z->st[g][0], &z->st[g][1]};
        uint64_t bytes[4] = {z->g[g].weight_bytes, z->g[g].master_bytes, z->g[g].state_bytes, z->g[g].state_bytes};
        for (int k = 0; k < 4; k++) {
            if (*bufs[k]) x->be->release(x->be, GCKPT_MEM_DEVICE, *bufs[k], bytes[k]);
            *bufs[k] = NULL;
        }
    }
}

void exec_parallel_free(gckpt_exec *x)
{
    exec_fsdp_free(x);
    exec_z3_free(x);
    if (!x->zero) return;
    free(x->zero->place);
    free(x->zero->keep);
    free(x->zero->pbuf_off);
    free(x->zero);
    x->zero = NULL;
}

gckpt_xstatus exec_piece_hash(gckpt_exec *x, const param_t *p, gckpt_xt src, uint64_t lo, uint64_t *h, double *ss,
                              gckpt_err *err)
{
    uint64_t n = src.n;
    unsigned sz = gckpt_dtype_size((gckpt_dtype)src.dt);
    void *raw = malloc(sz * (n ? n : 1));
    if (!raw) return exec_fail(err, "out of memory");
    gckpt_xstatus rc = x->be->download(x->be, raw, src.p, n * sz);
    gckpt_xt v = {raw, n, src.dt, 0};
    uint64_t salt = gckpt_key((uint64_t)p->tensor, (uint64_t)(p->layer + 1), 0x9ad, 0); /* as interp.c's checksum */
    /* hashed in the dtype of the parameter's .grad, as one process's checksum hashes it (FSDP2
     * under amp-bf16: the fp32 sharded gradient is the bf16 reduce-scatter's output cast up, so
     * the bf16 bits lose nothing) */
    gckpt_dtype dt = (gckpt_dtype)p->spec->grad.dtype;
    for (uint64_t i = 0; i < n && rc == GCKPT_XS_OK; i++) {
        uint64_t bits = 0; /* its low bytes, as the host backend's checksum reads a buffer */
        float f = ld(&v, i);
        st(&(gckpt_xt){&bits, 1, (uint8_t)dt, 0}, 0, f);
        *h += gckpt_hash_term(salt, bits, lo + i);
        *ss += (double)f * f;
    }
    free(raw);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "checksum", err);
}

gckpt_xstatus exec_ranks_hash(gckpt_exec *x, uint64_t *h, double *ss, gckpt_err *err)
{
    gckpt_comm *c = x->o.comm;
    struct {
        uint64_t h;
        double ss;
    } mine = {*h, *ss}, *all = calloc((size_t)x->o.world, sizeof *all);
    if (!all) return exec_fail(err, "out of memory");
    gckpt_comm_label(c, "the gradient checksum's sums");
    if (!c || !c->collective(c, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, &mine, all, sizeof mine, GCKPT_DT_U8, 0)) {
        free(all);
        return exec_fail(err, "checksum: gathering the ranks' sums: %s", c ? c->err.msg : "no communicator");
    }
    *h = 0;
    *ss = 0;
    for (int r = 0; r < x->o.world; r++) { /* in rank order */
        *h += all[r].h;
        *ss += all[r].ss;
    }
    free(all);
    return GCKPT_XS_OK;
}

gckpt_xstatus exec_shard_init(gckpt_exec *x, const param_t *p, void *dst, gckpt_init how, float scale, uint64_t key,
                              gckpt_err *err)
{
    uint64_t part = p->spec->shard.part, local = gckpt_shard_local(p->spec, (uint32_t)x->o.rank);
    uint64_t lo = (uint64_t)x->o.rank * part;
    float *v = malloc(sizeof *v * (part ? part : 1));
    if (!v) return exec_fail(err, "out of memory");
    for (uint64_t i = 0; i < part; i++) /* the values one process's init gives these elements */
        v[i] = i >= local ? 0.0f : how == GCKPT_INIT_CONST ? scale : gckpt_rng_uniform(key, lo + i, scale);
    gckpt_xstatus rc = x->be->upload(x->be, dst, v, part * 4);
    free(v);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "initialising a shard", err);
}
