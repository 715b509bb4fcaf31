/* FSDP2 (fully_shard per decoder layer plus the root) on several ranks: what the interpreter
 * does beyond its ordinary events. The rules are the core's (gckpt/core/parallel.h: the shard
 * fields, gckpt_shard_local, gckpt_rank_persistent; core/sim_parallel.c: the working set as
 * events); here they are carried out on real buffers:
 *  - persistent: each parameter's fp32 padded dim-0 shard (shard.part elements, rank r's rows
 *    of the tensor first, the padding 0) and AdamW's two states on its unpadded local rows,
 *    views into the rank's parameter-state rows (exec_rank_buffers);
 *  - an ALL_GATHER packs the unit's shards (table order, cast to the wire dtype) into its
 *    source (fp32: none of its own, this rank's slice of the output, as torch's
 *    all_gather_copy_in) and gathers; each ALLOC of a parameter's unsharded buffer that follows copies its
 *    padded chunks out of the latest gather's output and is the weight the ops read until
 *    its FREE (reshard);
 *  - in the synchronising micro-step each unsharded .grad's FREE packs it into the
 *    reduce-scatter input allocated just before (the ALLOC_SCRATCH marked GCKPT_PE_RS_INPUT;
 *    rank r's piece: every parameter's rows of rank r, padded), the REDUCE_SCATTER averages over the ranks (ReduceOp.AVG for fp32 /
 *    bf16, torch's _get_gradient_divide_factors; each rank's divided first as DDP's, equal to
 *    NCCL's avg for a power-of-two world) into the unit's fp32 sharded gradient (cast from the
 *    output when the wire dtype is not fp32), which lives to zero_grad;
 *  - the optimizer step: AdamW per parameter on its local rows of the shard;
 *  - the gradient checksum: every rank hashes its local rows at their element offsets in the
 *    full tensor and the ranks' sums are added (the hash is a sum over elements), the sum of
 *    squares too (in rank order: within rounding of one process's).
 * In fp32 every buffer is fp32. Under amp-bf16 (the Trainer's bf16=True: MixedPrecisionPolicy
 * param_dtype = reduce_dtype = bf16, FINDINGS R-DIST-3) the shards and states stay fp32 and the
 * schedule's events say bf16 for the rest: the all-gather packs the shards rounded to bf16, the
 * unsharded parameters and their .grad are bf16 (the ops compute in bf16), the reduce-scatter
 * averages bf16 and its output is cast into the fp32 sharded gradient the step reads.
 * TP x FSDP (exec_tp_fsdp_ops, FINDINGS R-TP-8, R-TP-11, R-EXEC-4): the same over the ranks of one TP
 * rank (its world: the dp_shard group), interp_tp.c's ops on the unsharded local weights; at one shard
 * rank the shard and the reduce input are copied (no all-gather, no reduce-scatter); with replicas the
 * first micro-step's reduce output is kept as the partial output, later ones added into it (their FREE)
 * and it into the synchronising micro-step's (its FREE), before the all-reduce. */
#include "interp_parallel.h"

#include <stdlib.h>

#include "gckpt/core/parallel.h"

struct exec_fsdp {
    uint64_t *off;      /* per parameter instance: its shard's offset in its unit's packed shards */
    uint64_t *goff;     /* per trainable parameter instance: its offset in its unit's sharded gradient */
    uint64_t *unit;     /* per parameter instance: 0 embedding, 1 + l layer l, L + 1 head */
    void **shard;       /* per parameter instance: the fp32 padded shard */
    uint64_t *shard_bytes, *state_bytes;
    uint32_t *grad;     /* per unit: the fp32 sharded gradient, GCKPT_NOINST */
    uint32_t ag, ag_unit; /* the latest all-gather's output and its unit */
    uint32_t rs_in;     /* the latest reduce-scatter input (the unit's .grads are packed into it) */
    uint32_t rs_out;    /* the latest reduce-scatter's output, until the sharded gradient takes it */
    /* per unit: an earlier micro-step's reduce output kept as FSDP2's _partial_reduce_output (TP with
     * replicas defers only the all-reduce, R-TP-11), GCKPT_NOINST */
    uint32_t *partial;
    uint64_t units;
};

/* The ranks a unit is sharded over: the world, or HSDP's dp_shard group (FINDINGS R-DIST-27) */
static uint64_t world(const gckpt_exec *x) { return gckpt_layout_shard_world(&x->set.layout); }
static uint64_t part_of(const param_t *p) { return p->spec->shard.part; }
static uint64_t local_of(const gckpt_exec *x, const param_t *p)
{
    return gckpt_shard_local(p->spec, exec_shard_rank(x));
}
static gckpt_xt f32(void *p, uint64_t off, uint64_t n) { return (gckpt_xt){(char *)p + off * 4, n, GCKPT_DT_F32, 0}; }

/* The section whose unit holds a parameter of section sec: a tied head's final norm is in the
 * embedding's unit (core/parallel.c, core/sim_parallel.c). */
static int unit_section(const gckpt_exec *x, int sec) { return x->m.tied && sec == GCKPT_SEC_HEAD ? GCKPT_SEC_EMBED : sec; }

static bool fsdp_prepare(gckpt_exec *x, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp = calloc(1, sizeof *x->fsdp);
    size_t n = x->nparams ? x->nparams : 1;
    if (f) {
        f->units = x->m.layers + 2;
        f->off = calloc(n, sizeof *f->off);
        f->goff = calloc(n, sizeof *f->goff);
        f->unit = calloc(n, sizeof *f->unit);
        f->shard = calloc(n, sizeof *f->shard);
        f->shard_bytes = calloc(n, sizeof *f->shard_bytes);
        f->state_bytes = calloc(n, sizeof *f->state_bytes);
        f->grad = malloc(f->units * sizeof *f->grad);
        f->partial = malloc(f->units * sizeof *f->partial);
    }
    if (!f || !f->off || !f->goff || !f->unit || !f->shard || !f->shard_bytes || !f->state_bytes || !f->grad || !f->partial)
        return gckpt_seterr(err, "out of memory"), false;
    for (uint64_t u = 0; u < f->units; u++) f->grad[u] = f->partial[u] = GCKPT_NOINST;
    f->ag = f->rs_in = f->rs_out = GCKPT_NOINST;
    /* a unit's shards packed in the table's order, as core/sim_parallel.c copies them out; its
     * sharded gradient the trainable ones' only (core/parallel.c's unit_grad_part, R-DISTPEFT-4) */
    const gckpt_params *ps = &x->ctx.params;
    for (size_t j = 0; j < x->nparams; j++) {
        const param_t *p = &x->params[j];
        int sec = unit_section(x, p->spec->section);
        uint64_t off = 0, goff = 0;
        for (const gckpt_param *q = ps->p; q < p->spec; q++)
            if (unit_section(x, q->section) == sec) {
                off += q->shard.part;
                goff += q->trainable ? q->shard.part : 0;
            }
        f->off[j] = off;
        f->goff[j] = goff;
        f->unit[j] = sec == GCKPT_SEC_EMBED ? 0 : sec == GCKPT_SEC_HEAD ? f->units - 1 : (uint64_t)p->layer + 1;
        x->params[j].flat = true; /* its weight is the unit's unsharded buffer while gathered */
    }
    return true;
}

/* A shard's element size: fp32, or a quantized weight's storage dtype (packed bytes, moved as
 * bytes: a 4-bit pair read as bf16 may be a NaN pattern a cast would not keep). */
static unsigned shard_size(const param_t *p)
{
    return p->spec->quant.scheme ? gckpt_dtype_size((gckpt_dtype)p->spec->weight.dtype) : 4;
}
static gckpt_xt bytes_at(void *p, uint64_t off, uint64_t n) { return (gckpt_xt){(char *)p + off, n, GCKPT_DT_U8, 0}; }

/* The rank's rows, every parameter's shard and states views into them. */
static gckpt_xstatus fsdp_setup(gckpt_exec *x, gckpt_err *err)
{
    if (!x->fsdp && !fsdp_prepare(x, err)) return GCKPT_XS_ERROR; /* the parameter instances exist now */
    gckpt_xstatus rc = exec_rank_buffers(x, err);
    if (rc != GCKPT_XS_OK) return rc;
    exec_fsdp *f = x->fsdp;
    uint64_t round = x->dev.alloc_round_bytes;
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        int i = (int)(p->spec - x->ctx.params.p);
        uint64_t copy = p->layer < 0 ? 0 : (uint64_t)p->layer, bytes[3];
        if (!part_of(p)) { /* a uint8 Params4bit, whole on every rank (ignored_params): bound as one GPU's */
            if (!p->w) return exec_fail(err, "fsdp: %s (layer %d) has no whole row", p->spec->name, p->layer);
            continue;
        }
        /* fp32, or a bf16-stored Params4bit's packed storage in that dtype (R-DISTPEFT-7) */
        f->shard_bytes[j] = gckpt_round_up(shard_size(p) * part_of(p), round);
        /* a frozen parameter (LoRA's base) has no states */
        f->state_bytes[j] = p->spec->trainable ? gckpt_round_up(4 * local_of(x, p), round) : 0;
        f->shard[j] = exec_row(x, GCKPT_ROW_WEIGHTS, i, 0, 0, copy, &bytes[0]);
        for (int k = 0; k < 2; k++) p->st[k] = exec_row(x, GCKPT_ROW_STATES, i, 0, k, copy, &bytes[1 + k]);
        if (!f->shard[j] || bytes[0] != f->shard_bytes[j] || bytes[1] != f->state_bytes[j] ||
            bytes[2] != f->state_bytes[j] || (f->state_bytes[j] && (!p->st[0] || !p->st[1])))
            return exec_fail(err, "fsdp: the rows of %s (layer %d) are not its shard and states", p->spec->name, p->layer);
    }
    return GCKPT_XS_OK;
}

/* A bf16-stored Params4bit: the rank's dim-0 rows of the packed storage (its place in its dp_shard
 * group under HSDP), the padding zero. */
static gckpt_xstatus fsdp_shard_packed(gckpt_exec *x, size_t j, const void *packed, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp;
    param_t *p = &x->params[j];
    uint64_t sz = shard_size(p), part = part_of(p), local = local_of(x, p), lo = (uint64_t)exec_shard_rank(x) * part;
    gckpt_xt none = {0};
    gckpt_xstatus rc = GCKPT_XS_OK;
    if (!f->shard[j]) return exec_fail(err, "fsdp: %s (layer %d) has no shard row", p->spec->name, p->layer);
    if (local) rc = x->be->add(x->be, bytes_at(f->shard[j], 0, local * sz), none, bytes_at((void *)packed, lo * sz, local * sz));
    if (rc == GCKPT_XS_OK && local < part)
        rc = x->be->init(x->be, bytes_at(f->shard[j], local * sz, (part - local) * sz), GCKPT_INIT_CONST, 0.0f, 0);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "sharding a packed weight", err);
}

static gckpt_xstatus fsdp_init_param(gckpt_exec *x, size_t j, gckpt_init how, float scale, uint64_t key, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp;
    param_t *p = &x->params[j];
    uint64_t local = local_of(x, p);
    gckpt_xstatus rc = exec_shard_init(x, p, f->shard[j], how, scale, key, err);
    if (rc != GCKPT_XS_OK) return rc;
    for (int k = 0; k < 2 && rc == GCKPT_XS_OK && f->state_bytes[j]; k++)
        rc = x->be->init(x->be, f32(p->st[k], 0, local), GCKPT_INIT_CONST, 0.0f, 0);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "initialising fsdp's shards", err);
}

/* The instance's buffer, checked to be live and of n elements. */
static gckpt_xstatus inst(gckpt_exec *x, uint32_t id, uint64_t n, const char *what, const exec_site *w, gckpt_xt *out,
                          gckpt_err *err)
{
    if (!exec_live(x, id)) return exec_fail(err, "%s: fsdp's %s is not allocated", w->at, what);
    *out = exec_inst_view(x, id);
    if (out->n != n)
        return exec_fail(err, "%s: fsdp's %s has %llu elements, the unit needs %llu", w->at, what,
                         (unsigned long long)out->n, (unsigned long long)n);
    return GCKPT_XS_OK;
}

/* Elements of a unit's padded local shards: every gathered parameter's (the all-gather's) or the
 * trainable ones' (the reduce-scatter's and the sharded gradient's), the core's. */
static int unit_sec(const gckpt_exec *x, uint64_t unit)
{
    return unit == 0 ? GCKPT_SEC_EMBED : unit == x->fsdp->units - 1 ? GCKPT_SEC_HEAD : GCKPT_SEC_BLOCK;
}
static uint64_t unit_part(const gckpt_exec *x, uint64_t unit) { return x->ctx.par.unit_part[unit_sec(x, unit)]; }
static uint64_t unit_grad_part(const gckpt_exec *x, uint64_t unit) { return x->ctx.par.unit_grad_part[unit_sec(x, unit)]; }

/* A collective in the event's group: every rank, or HSDP's dp_shard / dp_replicate group. */
static gckpt_xstatus in_group(gckpt_exec *x, const gckpt_coll_args *a, gckpt_coll op, gckpt_redop red, gckpt_xt send,
                              gckpt_xt recv)
{
    /* TP x FSDP: FSDP2's world is the ranks of this TP rank, its dp_shard group at dp_replicate 1 */
    gckpt_coll_group g = a->group == GCKPT_GROUP_WORLD && x->tp ? GCKPT_GROUP_SHARD : (gckpt_coll_group)a->group;
    if (g == GCKPT_GROUP_WORLD) return x->be->collective(x->be, op, red, send, recv, 0);
    if (!x->be->collective_group) {
        gckpt_seterr(&x->be->err, "the %s backend has no process groups (HSDP)", x->be->name);
        return GCKPT_XS_ERROR;
    }
    return x->be->collective_group(x->be, g, op, red, send, recv);
}

static gckpt_xstatus fsdp_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp;
    const gckpt_coll_args *a = &e->arg.coll;
    uint64_t n = world(x), u = a->index;
    if (u >= f->units) return exec_fail(err, "%s: fsdp: unit %llu out of range", w->at, (unsigned long long)u);
    uint64_t up = unit_part(x, u), gp = unit_grad_part(x, u);
    gckpt_xt src, dst, none = {0};
    gckpt_xstatus rc;
    if (a->kind == GCKPT_COLL_ALL_GATHER) {
        if ((rc = inst(x, a->dst, up * n, "all-gather output", w, &dst, err)) != GCKPT_XS_OK) return rc;
        if (a->src == GCKPT_NOINST) /* fp32: the shards packed into this rank's slice of the output (in place) */
            src = (gckpt_xt){(char *)dst.p + (uint64_t)exec_shard_rank(x) * up * gckpt_dtype_size((gckpt_dtype)dst.dt), up,
                             dst.dt, 0};
        else if ((rc = inst(x, a->src, up, "all-gather input", w, &src, err)) != GCKPT_XS_OK)
            return rc;
        for (size_t j = 0; j < x->nparams && rc == GCKPT_XS_OK; j++)
            if (f->unit[j] == u && part_of(&x->params[j])) {
                param_t *p = &x->params[j];
                unsigned ss = gckpt_dtype_size((gckpt_dtype)src.dt);
                gckpt_xt to = {(char *)src.p + f->off[j] * ss, part_of(p), src.dt, 0};
                if (!p->spec->quant.scheme) rc = x->be->add(x->be, to, none, f32(f->shard[j], 0, to.n));
                else if (shard_size(p) != ss) /* packed storage goes as it is (param_dtype = its dtype) */
                    return exec_fail(err, "%s: fsdp: %s's packed storage is not of the all-gather's dtype", w->at, p->spec->name);
                else rc = x->be->add(x->be, bytes_at(to.p, 0, to.n * ss), none, bytes_at(f->shard[j], 0, to.n * ss));
            }
        if (rc == GCKPT_XS_OK) rc = in_group(x, a, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, src, dst);
        f->ag = a->dst;
        f->ag_unit = (uint32_t)u;
    } else if (a->kind == GCKPT_COLL_REDUCE_SCATTER) {
        if ((rc = inst(x, a->src, gp * n, "reduce-scatter input", w, &src, err)) != GCKPT_XS_OK ||
            (rc = inst(x, a->dst, gp, "reduce-scatter output", w, &dst, err)) != GCKPT_XS_OK)
            return rc;
        rc = in_group(x, a, GCKPT_COLL_REDUCE_SCATTER, GCKPT_RED_AVG, src, dst);
        f->rs_out = x->inst[a->dst].is_pgrad ? GCKPT_NOINST : a->dst; /* fp32: the output is the sharded gradient */
    } else if (a->kind == GCKPT_COLL_ALL_REDUCE && a->group == GCKPT_GROUP_REPLICATE && a->src == a->dst) {
        /* HSDP: the reduced shard averaged across the replicas, in place (foreach_reduce) */
        if ((rc = inst(x, a->dst, gp, "all-reduce buffer", w, &dst, err)) != GCKPT_XS_OK) return rc;
        rc = in_group(x, a, GCKPT_COLL_ALL_REDUCE, GCKPT_RED_AVG, dst, dst);
    } else {
        return exec_fail(err, "%s: fsdp has no %s", w->at, gckpt_coll_names[a->kind]);
    }
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

static gckpt_xstatus fsdp_on_alloc(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp;
    gckpt_xt none = {0}, ag = {0};
    if (e->par == GCKPT_PE_RS_INPUT) {
        f->rs_in = e->inst;
        return GCKPT_XS_OK;
    }
    if (e->kind == GCKPT_EV_ALLOC_SCRATCH && e->comp == GCKPT_C_GRADS) { /* a unit's fp32 sharded gradient */
        uint64_t u = (uint64_t)exec_seg_slot(x, w->seg);
        if (u < f->units && f->grad[u] != GCKPT_NOINST && f->partial[u] == GCKPT_NOINST) {
            /* the first micro-step's reduce output, kept (R-TP-11): the partial output from now on */
            f->partial[u] = f->grad[u];
            x->inst[f->partial[u]].is_pgrad = false;
            f->grad[u] = GCKPT_NOINST;
        }
        if (u >= f->units || f->grad[u] != GCKPT_NOINST || e->dtype != GCKPT_DT_F32 || e->numel != unit_grad_part(x, u))
            return exec_fail(err, "%s: not unit %llu's fp32 sharded gradient", w->at, (unsigned long long)u);
        f->grad[u] = e->inst;
        x->inst[e->inst].is_pgrad = true; /* to zero_grad */
        if (world(x) == 1) { /* one shard rank: the reduce input copied, no reduce-scatter (foreach_reduce) */
            gckpt_xt in;
            gckpt_xstatus rc = inst(x, f->rs_in, e->numel, "reduce input", w, &in, err);
            if (rc == GCKPT_XS_OK && in.dt != GCKPT_DT_F32) return exec_fail(err, "%s: fsdp: a reduce input not fp32", w->at);
            if (rc == GCKPT_XS_OK && (rc = x->be->add(x->be, exec_inst_view(x, e->inst), none, in)) != GCKPT_XS_OK)
                return exec_be_fail(x, rc, w->at, err);
            return rc;
        }
        if (f->rs_out == GCKPT_NOINST) return GCKPT_XS_OK; /* fp32 on the wire: the reduce-scatter writes it */
        gckpt_xt out;
        gckpt_xstatus rc = inst(x, f->rs_out, e->numel, "reduce-scatter output", w, &out, err);
        if (rc == GCKPT_XS_OK && (rc = x->be->add(x->be, exec_inst_view(x, e->inst), none, out)) != GCKPT_XS_OK)
            return exec_be_fail(x, rc, w->at, err);
        f->rs_out = GCKPT_NOINST;
        return rc;
    }
    if (e->kind != GCKPT_EV_ALLOC || e->comp != GCKPT_C_PARALLEL) return GCKPT_XS_OK;
    /* a parameter's unsharded buffer: its padded chunks out of the latest all-gather */
    param_t *p = exec_param(x, e->tensor, exec_seg_layer(w->seg));
    size_t j = p ? (size_t)(p - x->params) : 0;
    if (!p || p->w || e->numel != part_of(p) * world(x))
        return exec_fail(err, "%s: not an ungathered parameter's unsharded buffer", w->at);
    gckpt_xt mine = exec_inst_view(x, e->inst);
    if (world(x) == 1) { /* one shard rank: no all-gather, the shard copied out (unshard, R-TP-11) */
        if (p->spec->quant.scheme || mine.dt != p->spec->weight.dtype)
            return exec_fail(err, "%s: fsdp: a one-rank shard that is not an unquantized weight", w->at);
        gckpt_xstatus rc = x->be->add(x->be, mine, none, f32(f->shard[j], 0, mine.n));
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
        p->w = mine.p;
        return GCKPT_XS_OK;
    }
    if (f->ag_unit != f->unit[j]) return exec_fail(err, "%s: the latest all-gather is another unit's", w->at);
    uint64_t up = unit_part(x, f->unit[j]), part = part_of(p);
    gckpt_xstatus rc = inst(x, f->ag, up * world(x), "all-gather output", w, &ag, err);
    unsigned sz = gckpt_dtype_size((gckpt_dtype)mine.dt);
    bool packed = p->spec->quant.scheme != 0; /* bytes: a cast would not keep every pattern */
    for (uint64_t r = 0; r < world(x) && rc == GCKPT_XS_OK; r++)
        rc = packed ? x->be->add(x->be, bytes_at(mine.p, r * part * sz, part * sz), none,
                                 bytes_at(ag.p, (r * up + f->off[j]) * sz, part * sz))
                    : x->be->add(x->be, (gckpt_xt){(char *)mine.p + r * part * sz, part, mine.dt, 0}, none,
                                 (gckpt_xt){(char *)ag.p + (r * up + f->off[j]) * sz, part, ag.dt, 0});
    if (rc != GCKPT_XS_OK) return err->msg[0] ? rc : exec_be_fail(x, rc, w->at, err);
    if (mine.dt != p->spec->weight.dtype) return exec_fail(err, "%s: the unsharded buffer's dtype is not the weight's", w->at);
    p->w = mine.p;
    return GCKPT_XS_OK;
}

static gckpt_xstatus fsdp_on_free(gckpt_exec *x, const gckpt_event *e, const exec_site *w, bool *done, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp;
    *done = false;
    void *buf = x->inst[e->inst].p;
    for (uint64_t u = 0; u < f->units; u++) { /* the deferred all-reduce's partial output (R-TP-11) */
        gckpt_xstatus rc = GCKPT_XS_OK;
        if (e->inst == f->partial[u]) { /* the synchronising micro-step: reduce_output += partial */
            if (!exec_live(x, f->grad[u])) return exec_fail(err, "%s: fsdp: a partial output and no reduce output", w->at);
            gckpt_xt out = exec_inst_view(x, f->grad[u]);
            rc = x->be->add(x->be, out, out, exec_inst_view(x, e->inst));
            f->partial[u] = GCKPT_NOINST;
        } else if (e->inst == f->grad[u]) { /* a later micro-step's reduce output added into the partial */
            if (!exec_live(x, f->partial[u])) return exec_fail(err, "%s: fsdp: a unit's reduce output freed", w->at);
            gckpt_xt part = exec_inst_view(x, f->partial[u]);
            rc = x->be->add(x->be, part, part, exec_inst_view(x, e->inst));
            x->inst[e->inst].is_pgrad = false;
            f->grad[u] = GCKPT_NOINST;
        } else
            continue;
        return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
    }
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        if (p->w == buf) p->w = NULL; /* resharded */
        if (p->grad != e->inst) continue;
        /* an unsharded .grad into the reduce-scatter input: rank r's piece holds its rows */
        uint64_t up = unit_grad_part(x, f->unit[j]), part = part_of(p), numel = p->spec->numel;
        gckpt_xt in, g = exec_inst_view(x, p->grad), none = {0};
        /* TP's embedding: its whole [V, h] .grad, the rank's rows packed (R-TP-8) */
        g.p = (char *)g.p + exec_tp_grad_lo(x, p, g.n) * gckpt_dtype_size((gckpt_dtype)g.dt);
        gckpt_xstatus rc = inst(x, f->rs_in, up * world(x), "reduce-scatter input", w, &in, err);
        unsigned si = gckpt_dtype_size((gckpt_dtype)in.dt), sg = gckpt_dtype_size((gckpt_dtype)g.dt);
        for (uint64_t r = 0; r < world(x) && rc == GCKPT_XS_OK; r++) {
            uint64_t lo = r * part, have = numel > lo ? (numel - lo < part ? numel - lo : part) : 0;
            char *to = (char *)in.p + (r * up + f->goff[j]) * si;
            if (have) rc = x->be->add(x->be, (gckpt_xt){to, have, in.dt, 0}, none, (gckpt_xt){(char *)g.p + lo * sg, have, g.dt, 0});
            if (rc == GCKPT_XS_OK && have < part)
                rc = x->be->init(x->be, (gckpt_xt){to + have * si, part - have, in.dt, 0}, GCKPT_INIT_CONST, 0.0f, 0);
        }
        if (rc != GCKPT_XS_OK) return err->msg[0] ? rc : exec_be_fail(x, rc, w->at, err);
        exec_inst_release(x, p->grad);
        p->grad = GCKPT_NOINST;
        *done = true;
        return GCKPT_XS_OK;
    }
    return GCKPT_XS_OK;
}

static gckpt_xstatus fsdp_step(gckpt_exec *x, const exec_site *w, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp;
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        uint64_t local = local_of(x, p);
        if (!local || !p->spec->trainable) continue; /* frozen: neither gradient nor states */
        if (!exec_live(x, f->grad[f->unit[j]])) return exec_fail(err, "%s: fsdp: a unit has no sharded gradient", w->at);
        gckpt_optcall c = exec_optcall(x, f32(f->shard[j], 0, local), f32(x->inst[f->grad[f->unit[j]]].p, f->goff[j], local),
                                       x->step + 1);
        c.s1 = f32(p->st[0], 0, local);
        c.s2 = f32(p->st[1], 0, local);
        gckpt_xstatus rc = x->be->optim(x->be, &c);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    }
    return GCKPT_XS_OK;
}

static uint64_t fsdp_zero_grad(gckpt_exec *x)
{
    exec_fsdp *f = x->fsdp;
    uint64_t sum = 0;
    for (uint64_t u = 0; u < f->units; u++) {
        if (exec_live(x, f->grad[u])) {
            sum += x->inst[f->grad[u]].bytes;
            exec_inst_release(x, f->grad[u]);
        }
        f->grad[u] = GCKPT_NOINST;
    }
    return sum;
}

static gckpt_xstatus fsdp_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err)
{
    exec_fsdp *f = x->fsdp;
    *hash = 0;
    *sumsq = 0;
    /* HSDP: every replica holds the same shards; the first replica's ranks hash them */
    bool replica0 = exec_dp_rank(x) < gckpt_layout_shard_world(&x->set.layout);
    for (size_t j = 0; j < x->nparams && replica0; j++) {
        param_t *p = &x->params[j];
        if (!p->spec->trainable) continue; /* frozen (LoRA's base): no gradient */
        if (!exec_live(x, f->grad[f->unit[j]])) return exec_fail(err, "checksum: fsdp: a unit has no sharded gradient");
        gckpt_xt piece = f32(x->inst[f->grad[f->unit[j]]].p, f->goff[j], local_of(x, p));
        uint64_t lo = (uint64_t)exec_shard_rank(x) * part_of(p);
        gckpt_xstatus rc = x->tp ? exec_tp_piece_hash(x, p, piece, lo, hash, sumsq, err) /* at the whole tensor's indices */
                                 : exec_piece_hash(x, p, piece, lo, hash, sumsq, err);
        if (rc != GCKPT_XS_OK) return rc;
    }
    return exec_ranks_hash(x, hash, sumsq, err);
}

static void fsdp_release(gckpt_exec *x)
{
    exec_fsdp *f = x->fsdp;
    for (size_t j = 0; f && j < x->nparams; j++) {
        param_t *p = &x->params[j]; /* views: the rows are released with the rank's */
        f->shard[j] = NULL;
        p->st[0] = p->st[1] = NULL;
        p->w = NULL;
    }
    for (uint64_t u = 0; f && u < f->units; u++) f->grad[u] = f->partial[u] = GCKPT_NOINST;
}

/* The partial outputs live from one micro-step to the next. */
static bool fsdp_holds(const gckpt_exec *x, uint32_t id)
{
    for (uint64_t u = 0; u < x->fsdp->units; u++)
        if (x->fsdp->partial[u] == id) return true;
    return false;
}

static void fsdp_free(gckpt_exec *x)
{
    exec_fsdp *f = x->fsdp;
    if (!f) return;
    free(f->off);
    free(f->goff);
    free(f->unit);
    free(f->shard);
    free(f->shard_bytes);
    free(f->state_bytes);
    free(f->grad);
    free(f->partial);
    free(f);
    x->fsdp = NULL;
}

static bool tp_fsdp_prepare(gckpt_exec *x, gckpt_err *err)
{
    if (x->m.qk_norm) { /* gckpt-plan refuses it too (plan.c) */
        gckpt_seterr(err, "TP x FSDP with q / k norms (qwen3's replicated_with_grad_allreduce under FSDP2) is not "
                          "measured (FINDINGS R-TP-8, R-TP-10)");
        return false;
    }
    return exec_tp_prepare(x, err);
}

static void tp_fsdp_free(gckpt_exec *x)
{
    fsdp_free(x);
    exec_tp_free(x);
}

const exec_par_ops exec_fsdp_ops = {.flat_grads = true,
                                    .setup = fsdp_setup,
                                    .init_param = fsdp_init_param,
                                    .on_alloc = fsdp_on_alloc,
                                    .shard_packed = fsdp_shard_packed,
                                    .on_free = fsdp_on_free,
                                    .collective = fsdp_collective,
                                    .zero_grad = fsdp_zero_grad,
                                    .step = fsdp_step,
                                    .checksum = fsdp_checksum,
                                    .holds = fsdp_holds,
                                    .release = fsdp_release,
                                    .free = fsdp_free};

static void cp_fsdp_release(gckpt_exec *x)
{
    exec_cp_release(x);
    fsdp_release(x);
}

static void cp_fsdp_free(gckpt_exec *x)
{
    fsdp_free(x);
    exec_cp_free(x);
}

/* CP x FSDP: FSDP2 over the cp ranks, every op through interp_cp.c (the ring, the loss) */
const exec_par_ops exec_cp_fsdp_ops = {.flat_grads = true,
                                       .prepare = exec_cp_prepare,
                                       .setup = fsdp_setup,
                                       .init_param = fsdp_init_param,
                                       .init = exec_cp_init,
                                       .on_alloc = fsdp_on_alloc,
                                       .on_free = fsdp_on_free,
                                       .run_op = exec_cp_run_op,
                                       .collective = fsdp_collective,
                                       .zero_grad = fsdp_zero_grad,
                                       .step = fsdp_step,
                                       .checksum = fsdp_checksum,
                                       .holds = fsdp_holds,
                                       .release = cp_fsdp_release,
                                       .free = cp_fsdp_free};

/* TP x FSDP: TP's ops (the collectives inside them in the TP group) on the unsharded local weights */
const exec_par_ops exec_tp_fsdp_ops = {.flat_grads = true,
                                       .prepare = tp_fsdp_prepare,
                                       .setup = fsdp_setup,
                                       .init_param = fsdp_init_param,
                                       .on_alloc = fsdp_on_alloc,
                                       .on_free = fsdp_on_free,
                                       .run_op = exec_tp_run_op,
                                       .collective = fsdp_collective,
                                       .zero_grad = fsdp_zero_grad,
                                       .step = fsdp_step,
                                       .checksum = fsdp_checksum,
                                       .holds = fsdp_holds,
                                       .release = fsdp_release,
                                       .free = tp_fsdp_free};
