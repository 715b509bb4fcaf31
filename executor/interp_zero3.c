/* DeepSpeed ZeRO-3 on several ranks: what the interpreter does beyond its ordinary events. The
 * rules are the core's (gckpt/core/parallel.h: the shard fields, gckpt_shard_local,
 * gckpt_rank_persistent; core/sim_parallel.c: the gathers and reduce hooks as events); here
 * they are carried out on real buffers:
 *  - persistent: each parameter's flat partition (shard.part = ceil(numel / N) elements of the
 *    model dtype: the tensor's elements from r x part, then zeros), a persistent parameter
 *    (numel under stage3_param_persistence_threshold) whole besides; the fp32 master, AdamW's
 *    two states and the gradient partitions flat over every partition, the ipg bucket: views
 *    into the rank's parameter-state rows (exec_rank_buffers, gckpt_rows_zero3);
 *  - an ALL_GATHER (one parameter) gathers its partition into the buffer the ALLOC before it
 *    made, which is the weight the ops read until its FREE;
 *  - the reduce hook: the .grad's FREE reduce-scatters it through the ipg bucket (a chunk of
 *    every rank's piece at a time, each rank's divided by N first: FINDINGS R-CPU-4 D10) and
 *    adds the rank's piece into its gradient partition, every micro-step; the REDUCE_SCATTER
 *    event that follows finds it done (the .grad is gone by then);
 *  - the optimizer step: AdamW on the master partition of each parameter's local piece, the
 *    master copied into the partition, the gradient partition cleared; a persistent
 *    parameter's whole copy all-gathered from the partitions through the ipg bucket (the
 *    gather's N x part elements, the tensor's numel of them copied);
 *  - the gradient checksum over every rank's pieces (exec_piece_hash);
 *  - LoRA: a frozen parameter has its partition (and whole copy) and the gathers, no place in
 *    the master, states and gradient partitions (R-DISTPEFT-6); kept gathered under the default
 *    limits, it is gathered once more into the same buffer for a checkpointed layer's recompute.
 * The partitions, whole copies, gradient partitions and the ipg bucket are in the model dtype
 * (the weights': bf16 under amp-bf16, DeepSpeed's bf16 model, FINDINGS R-DIST-4; else fp32); the
 * master and AdamW's states fp32, the master starting from the model-dtype partition (DeepSpeed
 * copies it from the bf16 weights) and rounded into the partition after each step. */
#include "interp_parallel.h"

#include <stdlib.h>

#include "gckpt/core/parallel.h"

struct exec_z3 {
    uint64_t *off;              /* per parameter instance: its place in the flat partitions */
    void **part, **whole;       /* per instance: its partition; a persistent one's whole copy */
    uint64_t *part_bytes, *whole_bytes;
    void *master, *st[2];       /* fp32, flat over every partition (q elements) */
    void *grads, *ipg;          /* the gradient partitions (model dtype, q elements), the ipg bucket */
    uint64_t q, flat_bytes;
    uint64_t bucket;            /* the ipg bucket's elements */
    uint8_t dt;                 /* the model dtype */
};

static uint64_t world(const gckpt_exec *x) { return (uint64_t)x->o.world; }
static uint64_t part_of(const param_t *p) { return p->spec->shard.part; }
static uint64_t local_of(const gckpt_exec *x, const param_t *p) { return gckpt_shard_local(p->spec, (uint32_t)x->o.rank); }
static gckpt_xt f32(void *p, uint64_t off, uint64_t n) { return (gckpt_xt){(char *)p + off * 4, n, GCKPT_DT_F32, 0}; }
/* n elements of the model dtype at element off of p */
static gckpt_xt mdt(const gckpt_exec *x, void *p, uint64_t off, uint64_t n)
{
    return (gckpt_xt){(char *)p + off * gckpt_dtype_size((gckpt_dtype)x->z3->dt), n, x->z3->dt, 0};
}
static uint64_t msize(const gckpt_exec *x) { return gckpt_dtype_size((gckpt_dtype)x->z3->dt); }
/* the gradient partitions and the ipg bucket (the rank's two GRADS rows) */
static void *grads(const gckpt_exec *x) { return x->z3->grads; }
static void *bucket(const gckpt_exec *x) { return x->z3->ipg; }

/* The rank's rows (exec_rank_buffers), then every parameter's partition, whole copy, the flat
 * master, states, gradient partitions and ipg bucket taken as views into them. */
static gckpt_xstatus zero3_setup(gckpt_exec *x, gckpt_err *err)
{
    gckpt_xstatus rc = exec_rank_buffers(x, err);
    if (rc != GCKPT_XS_OK) return rc;
    size_t n = x->nparams ? x->nparams : 1;
    exec_z3 *z = x->z3;
    if (!z) {
        z = x->z3 = calloc(1, sizeof *x->z3);
        if (z) {
            z->off = calloc(n, sizeof *z->off);
            z->part = calloc(n, sizeof *z->part);
            z->whole = calloc(n, sizeof *z->whole);
            z->part_bytes = calloc(n, sizeof *z->part_bytes);
            z->whole_bytes = calloc(n, sizeof *z->whole_bytes);
        }
        if (!z || !z->off || !z->part || !z->whole || !z->part_bytes || !z->whole_bytes) return exec_fail(err, "out of memory");
    }
    uint64_t round = x->dev.alloc_round_bytes;
    z->q = 0;
    z->dt = x->nparams ? x->params[0].spec->weight.dtype : GCKPT_DT_F32;
    uint64_t sz = msize(x), bytes[4];
    z->bucket = gckpt_ds_reduce_bucket(&x->m, &x->set.layout);
    for (size_t j = 0; j < x->nparams; j++) { /* views into the rank's rows */
        param_t *p = &x->params[j];
        int i = (int)(p->spec - x->ctx.params.p);
        uint64_t copy = p->layer < 0 ? 0 : (uint64_t)p->layer;
        p->flat = true; /* its weight is the gathered buffer, or its whole copy */
        /* the optimizer's flat partitions over the trainable parameters only (R-DISTPEFT-6): a
         * frozen one (LoRA's base) has its partition and no place there */
        z->off[j] = z->q;
        if (p->spec->trainable) z->q += part_of(p);
        /* a Params4bit: partitioned by its stored elements in its storage dtype (R-DISTPEFT-8) */
        uint64_t psz = p->spec->quant.scheme ? gckpt_dtype_size((gckpt_dtype)p->spec->weight.dtype) : sz;
        if (p->spec->weight.dtype != z->dt && !p->spec->quant.scheme) return exec_fail(err, "zero3: the parameters' dtypes differ");
        z->part_bytes[j] = gckpt_round_up(psz * part_of(p), round);
        uint64_t stored = p->spec->quant.scheme ? p->spec->weight.numel : p->spec->numel;
        z->whole_bytes[j] = p->spec->shard.whole ? gckpt_round_up(psz * stored, round) : 0;
        z->part[j] = exec_row(x, GCKPT_ROW_WEIGHTS, i, 0, 0, copy, &bytes[0]);
        bytes[1] = 0; /* (a Params4bit's next rows are its statistics) */
        z->whole[j] = p->spec->shard.whole ? exec_row(x, GCKPT_ROW_WEIGHTS, i, 0, 1, copy, &bytes[1]) : NULL;
        if (!z->part[j] || bytes[0] != z->part_bytes[j] || bytes[1] != z->whole_bytes[j])
            return exec_fail(err, "zero3: the rows of %s (layer %d) are not its partition and whole copy",
                             p->spec->name, p->layer);
        p->w = z->whole[j];
    }
    z->flat_bytes = gckpt_round_up(4 * z->q, round);
    z->master = exec_row(x, GCKPT_ROW_MASTER, -1, 0, 0, 0, &bytes[0]);
    for (int k = 0; k < 2; k++) z->st[k] = exec_row(x, GCKPT_ROW_STATES, -1, 0, k, 0, &bytes[1 + k]);
    if (!z->master || !z->st[0] || !z->st[1] || bytes[0] != z->flat_bytes || bytes[1] != z->flat_bytes ||
        bytes[2] != z->flat_bytes)
        return exec_fail(err, "zero3: the rows are not the fp32 master and states over %llu elements",
                         (unsigned long long)z->q);
    z->grads = exec_row(x, GCKPT_ROW_GRADS, -1, 0, 0, 0, &bytes[0]);
    z->ipg = exec_row(x, GCKPT_ROW_GRADS, -1, 0, 1, 0, &bytes[1]);
    if (!z->grads || !z->ipg || bytes[0] != gckpt_round_up(sz * z->q, round) || bytes[1] != gckpt_round_up(sz * z->bucket, round))
        return exec_fail(err, "zero3: the rows are not the gradient partitions and the ipg bucket");
    return GCKPT_XS_OK;
}

static gckpt_xstatus zero3_init_param(gckpt_exec *x, size_t j, gckpt_init how, float scale, uint64_t key, gckpt_err *err)
{
    exec_z3 *z = x->z3;
    param_t *p = &x->params[j];
    uint64_t part = part_of(p);
    gckpt_xt none = {0};
    if (!p->spec->trainable) { /* frozen: the fp32 values through a scratch buffer (setup, before the peak is reset) */
        void *tmp = NULL;
        gckpt_xstatus rc = x->be->alloc(x->be, GCKPT_MEM_DEVICE, 4 * (part ? part : 1), &tmp);
        if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, "initialising zero3's frozen partitions", err);
        rc = exec_shard_init(x, p, tmp, how, scale, key, err);
        if (rc == GCKPT_XS_OK) {
            rc = x->be->add(x->be, mdt(x, z->part[j], 0, part), none, f32(tmp, 0, part));
            if (rc == GCKPT_XS_OK && z->whole[j]) rc = x->be->init(x->be, mdt(x, z->whole[j], 0, p->spec->numel), how, scale, key);
            if (rc != GCKPT_XS_OK) rc = exec_be_fail(x, rc, "initialising zero3's frozen partitions", err);
        }
        x->be->release(x->be, GCKPT_MEM_DEVICE, tmp, 4 * (part ? part : 1));
        return rc;
    }
    /* the fp32 values into the master, rounded into the partition, the master from the partition */
    gckpt_xt master = f32(z->master, z->off[j], part);
    gckpt_xstatus rc = exec_shard_init(x, p, master.p, how, scale, key, err);
    if (rc != GCKPT_XS_OK) return rc;
    rc = x->be->add(x->be, mdt(x, z->part[j], 0, part), none, master);
    if (rc == GCKPT_XS_OK) rc = x->be->add(x->be, master, none, mdt(x, z->part[j], 0, part));
    for (int k = 0; k < 2 && rc == GCKPT_XS_OK; k++) rc = x->be->init(x->be, f32(z->st[k], z->off[j], part), GCKPT_INIT_CONST, 0.0f, 0);
    if (rc == GCKPT_XS_OK) rc = x->be->init(x->be, mdt(x, grads(x), z->off[j], part), GCKPT_INIT_CONST, 0.0f, 0);
    if (rc == GCKPT_XS_OK && z->whole[j]) rc = x->be->init(x->be, mdt(x, z->whole[j], 0, p->spec->numel), how, scale, key);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "initialising zero3's partitions", err);
}

static gckpt_xstatus gather_whole(gckpt_exec *x, size_t j);

/* A parameter's partition as the all-gather's input: the model dtype, or a Params4bit's storage
 * dtype (gathered as it is stored: all_gather/uint8) */
static gckpt_xt part_view(const gckpt_exec *x, size_t j)
{
    const param_t *p = &x->params[j];
    uint8_t dt = p->spec->quant.scheme ? p->spec->weight.dtype : x->z3->dt;
    return (gckpt_xt){x->z3->part[j], part_of(p), dt, 0};
}

/* A Params4bit not kept whole: the rank's elements of the packed storage one process quantizes,
 * as bytes, the padding zero. (A whole one is quantized into its whole copy; its partition is
 * never read: a frozen parameter's all-gather after the step moves nothing, below.) */
static gckpt_xstatus zero3_shard_packed(gckpt_exec *x, size_t j, const void *packed, gckpt_err *err)
{
    param_t *p = &x->params[j];
    uint64_t sz = gckpt_dtype_size((gckpt_dtype)p->spec->weight.dtype), part = part_of(p), local = local_of(x, p);
    uint64_t lo = (uint64_t)x->o.rank * part;
    gckpt_xt none = {0};
    char *dst = x->z3->part[j];
    gckpt_xstatus rc = GCKPT_XS_OK;
    if (local) rc = x->be->add(x->be, (gckpt_xt){dst, local * sz, GCKPT_DT_U8, 0}, none,
                               (gckpt_xt){(char *)packed + lo * sz, local * sz, GCKPT_DT_U8, 0});
    if (rc == GCKPT_XS_OK && local < part)
        rc = x->be->init(x->be, (gckpt_xt){dst + local * sz, (part - local) * sz, GCKPT_DT_U8, 0}, GCKPT_INIT_CONST, 0.0f, 0);
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, "partitioning a packed weight", err);
}

static gckpt_xstatus zero3_collective(gckpt_exec *x, const gckpt_event *e, const exec_site *w, gckpt_err *err)
{
    const gckpt_coll_args *a = &e->arg.coll;
    int layer = x->r->t[e->tensor < 0 ? 0 : e->tensor].section == GCKPT_SEC_BLOCK ? (int)a->index - 1 : -1;
    param_t *p = e->tensor >= 0 ? exec_param(x, e->tensor, layer) : NULL;
    if (!p || e->numel != part_of(p)) return exec_fail(err, "%s: zero3: not one parameter's partition", w->at);
    if (a->kind == GCKPT_COLL_ALL_GATHER && w->seg->part == GCKPT_PART_OPTIMIZER) { /* after the step */
        size_t j = (size_t)(p - x->params);
        if (!p->spec->shard.whole || !x->z3->whole[j])
            return exec_fail(err, "%s: zero3: an all-gather after the step of a parameter that is not persistent", w->at);
        /* nothing was stepped without update, nor a frozen parameter ever */
        gckpt_xstatus rc = w->update && p->spec->trainable ? gather_whole(x, j) : GCKPT_XS_OK;
        return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
    }
    if (a->kind == GCKPT_COLL_REDUCE_SCATTER) /* performed by the .grad's FREE just before */
        return p->grad == GCKPT_NOINST ? GCKPT_XS_OK : exec_fail(err, "%s: zero3: the .grad is not reduced", w->at);
    /* a frozen parameter kept gathered is gathered once more into its buffer for the recompute
     * (core/sim_parallel.c z3_regather) */
    bool again = p->w && !p->spec->trainable && exec_live(x, a->dst) && p->w == x->inst[a->dst].p;
    if (a->kind != GCKPT_COLL_ALL_GATHER || p->spec->shard.whole || (p->w && !again))
        return exec_fail(err, "%s: zero3: a %s of this parameter", w->at, gckpt_coll_names[a->kind]);
    if (!exec_live(x, a->dst) || x->inst[a->dst].n != part_of(p) * world(x))
        return exec_fail(err, "%s: zero3: the gathered buffer is not allocated as the parameter needs", w->at);
    gckpt_xt dst = exec_inst_view(x, a->dst);
    if (dst.dt != part_view(x, (size_t)(p - x->params)).dt)
        return exec_fail(err, "%s: zero3: the gathered buffer is not of the partition's dtype", w->at);
    gckpt_xstatus rc = x->be->collective(x->be, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, part_view(x, (size_t)(p - x->params)), dst, 0);
    if (rc != GCKPT_XS_OK) return exec_be_fail(x, rc, w->at, err);
    p->w = dst.p;
    return GCKPT_XS_OK;
}

/* Elements of a numel-element tensor among its flat elements [lo, lo + mm): a partition's chunk
 * past the tensor's end is padding (DeepSpeed's ds_tensor: the elements from r x part, then
 * zeros; its all-gather output N x part elements, the parameter the first numel). */
static uint64_t in_tensor(uint64_t numel, uint64_t lo, uint64_t mm)
{
    return numel > lo ? (numel - lo < mm ? numel - lo : mm) : 0;
}

/* Parameter instance j's .grad reduce-scattered through the ipg bucket into its partition. */
static gckpt_xstatus reduce(gckpt_exec *x, size_t j)
{
    exec_z3 *z = x->z3;
    param_t *p = &x->params[j];
    uint64_t n = world(x), part = part_of(p), numel = p->spec->numel, m = z->bucket / (n + 1);
    gckpt_xt g = exec_inst_view(x, p->grad), none = {0};
    if (!m || g.dt != z->dt) return GCKPT_XS_ERROR;
    gckpt_xstatus rc = GCKPT_XS_OK;
    for (uint64_t k = 0; k < part && rc == GCKPT_XS_OK; k += m) {
        uint64_t mm = part - k < m ? part - k : m;
        for (uint64_t r = 0; r < n && rc == GCKPT_XS_OK; r++) { /* rank r's piece of this chunk */
            uint64_t lo = r * part + k, have = in_tensor(numel, lo, mm);
            if (have) rc = x->be->add(x->be, mdt(x, bucket(x), r * mm, have), none, mdt(x, g.p, lo, have));
            if (rc == GCKPT_XS_OK && have < mm)
                rc = x->be->init(x->be, mdt(x, bucket(x), r * mm + have, mm - have), GCKPT_INIT_CONST, 0.0f, 0);
        }
        gckpt_xt mine = mdt(x, bucket(x), n * mm, mm), acc = mdt(x, grads(x), z->off[j] + k, mm);
        if (rc == GCKPT_XS_OK)
            rc = x->be->collective(x->be, GCKPT_COLL_REDUCE_SCATTER, GCKPT_RED_AVG, mdt(x, bucket(x), 0, n * mm), mine, 0);
        if (rc == GCKPT_XS_OK) rc = x->be->add(x->be, acc, acc, mine);
    }
    return rc;
}

static gckpt_xstatus zero3_on_free(gckpt_exec *x, const gckpt_event *e, const exec_site *w, bool *done, gckpt_err *err)
{
    *done = false;
    void *buf = x->inst[e->inst].p;
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        if (p->w == buf && !p->spec->shard.whole) p->w = NULL; /* released after its forward or backward */
        if (p->grad != e->inst) continue;
        gckpt_xstatus rc = reduce(x, j);
        if (rc != GCKPT_XS_OK) return x->be->err.msg[0] ? exec_be_fail(x, rc, w->at, err)
                                                        : exec_fail(err, "%s: zero3: the .grad cannot go through the ipg bucket", w->at);
        exec_inst_release(x, p->grad);
        p->grad = GCKPT_NOINST;
        *done = true;
        return GCKPT_XS_OK;
    }
    return GCKPT_XS_OK;
}

/* A persistent parameter's whole copy (numel elements, as the schedule counts it) from every
 * rank's partition: the all-gather's N x part elements overrun it where N does not divide numel,
 * so a chunk of every rank's partition at a time is gathered into the ipg bucket (free at the
 * step) and the tensor's elements of each piece copied to their place, the padding left out. */
static gckpt_xstatus gather_whole(gckpt_exec *x, size_t j)
{
    exec_z3 *z = x->z3;
    uint64_t n = world(x), part = part_of(&x->params[j]), numel = x->params[j].spec->numel, m = z->bucket / n;
    gckpt_xt none = {0};
    gckpt_xstatus rc = m ? GCKPT_XS_OK : GCKPT_XS_ERROR;
    for (uint64_t k = 0; k < part && rc == GCKPT_XS_OK; k += m) {
        uint64_t mm = part - k < m ? part - k : m;
        rc = x->be->collective(x->be, GCKPT_COLL_ALL_GATHER, GCKPT_RED_SUM, mdt(x, z->part[j], k, mm),
                               mdt(x, bucket(x), 0, n * mm), 0);
        for (uint64_t r = 0; r < n && rc == GCKPT_XS_OK; r++) { /* rank r's piece of this chunk */
            uint64_t lo = r * part + k, have = in_tensor(numel, lo, mm);
            if (have) rc = x->be->add(x->be, mdt(x, z->whole[j], lo, have), none, mdt(x, bucket(x), r * mm, have));
        }
    }
    return rc;
}

static gckpt_xstatus zero3_step(gckpt_exec *x, const exec_site *w, gckpt_err *err)
{
    exec_z3 *z = x->z3;
    gckpt_xt none = {0};
    gckpt_xstatus rc = GCKPT_XS_OK;
    for (size_t j = 0; j < x->nparams && rc == GCKPT_XS_OK; j++) {
        param_t *p = &x->params[j];
        uint64_t local = local_of(x, p), part = part_of(p), at = z->off[j];
        if (!p->spec->trainable) continue; /* frozen: neither gradient nor states */
        if (local) {
            gckpt_optcall c = exec_optcall(x, f32(z->master, at, local), mdt(x, grads(x), at, local), x->step + 1);
            c.s1 = f32(z->st[0], at, local);
            c.s2 = f32(z->st[1], at, local);
            rc = x->be->optim(x->be, &c);
            if (rc == GCKPT_XS_OK) rc = x->be->add(x->be, mdt(x, z->part[j], 0, local), none, c.param);
        }
        if (rc == GCKPT_XS_OK) rc = x->be->init(x->be, mdt(x, grads(x), at, part), GCKPT_INIT_CONST, 0.0f, 0);
    } /* the persistent parameters' whole copies: the all-gathers after the step (zero3_collective) */
    return rc == GCKPT_XS_OK ? rc : exec_be_fail(x, rc, w->at, err);
}

static gckpt_xstatus zero3_checksum(gckpt_exec *x, uint64_t *hash, double *sumsq, gckpt_err *err)
{
    *hash = 0;
    *sumsq = 0;
    for (size_t j = 0; j < x->nparams; j++) {
        param_t *p = &x->params[j];
        if (!p->spec->trainable) continue; /* frozen: no gradient */
        gckpt_xstatus rc = exec_piece_hash(x, p, mdt(x, grads(x), x->z3->off[j], local_of(x, p)),
                                           (uint64_t)x->o.rank * part_of(p), hash, sumsq, err);
        if (rc != GCKPT_XS_OK) return rc;
    }
    return exec_ranks_hash(x, hash, sumsq, err);
}

static void zero3_release(gckpt_exec *x) /* the views only: the rows are released with the rank's */
{
    exec_z3 *z = x->z3;
    if (!z) return;
    for (size_t j = 0; j < x->nparams; j++) {
        z->part[j] = z->whole[j] = NULL;
        x->params[j].w = NULL;
    }
    z->master = z->st[0] = z->st[1] = z->grads = z->ipg = NULL;
}

static void zero3_free(gckpt_exec *x)
{
    exec_z3 *z = x->z3;
    if (!z) return;
    free(z->off);
    free(z->part);
    free(z->whole);
    free(z->part_bytes);
    free(z->whole_bytes);
    free(z);
    x->z3 = NULL;
}

const exec_par_ops exec_zero3_ops = {.setup = zero3_setup,
                                     .init_param = zero3_init_param,
                                     .shard_packed = zero3_shard_packed,
                                     .on_free = zero3_on_free,
                                     .collective = zero3_collective,
                                     .step = zero3_step,
                                     .checksum = zero3_checksum,
                                     .release = zero3_release,
                                     .free = zero3_free};
