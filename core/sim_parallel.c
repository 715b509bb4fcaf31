/* FSDP2's per-unit working set as events (core/sim_parallel.h). Read in torch 2.15's
 * torch/distributed/fsdp/_fully_shard (_fsdp_param_group.py, _fsdp_collectives.py) and
 * traced with the allocator on the fixtures' rank (tools/hf_probe/FINDINGS.md 13.6):
 *  - unshard in the forward (pre-forward hook): the all-gather input (this rank's padded
 *    shards cast to the param dtype, packed) and output (x ranks) are allocated, the input
 *    freed, the previous unit's output freed (all_gather_state lives until the next
 *    all-gather), then each parameter's padded unsharded buffer (copy-out). The output
 *    stays until the next all-gather, the tail's until the root's forward returns;
 *  - reshard after the forward (post-forward hook), except the tail unit
 *    (reshard_after_forward False: gathered from its forward to its backward);
 *  - backward (pre-backward hook, when the gradient of the unit's output arrives): the unit's
 *    prefetched output is copied out and freed, then the next unit in backward order is
 *    all-gathered (backward prefetch, one unit ahead). A checkpointed layer's recompute runs
 *    inside these hooks and gathers nothing more;
 *  - post-backward: reshard; in a micro-step that syncs gradients the previous unit's
 *    reduce-scatter input is freed (reduce_scatter_states), the unit's is allocated, its
 *    unsharded .grads freed, the reduce-scatter output allocated and cast to the fp32
 *    sharded gradient (a flat buffer the parameters' .grad views), the output freed; under
 *    no_sync the unsharded .grads stay until the synchronising micro-step. The backward's
 *    final callback frees the last reduce-scatter input. */
#include "sim_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "gckpt/core/parallel.h"

struct gckpt_wrap {
    const gckpt_ctx *c;
    uint64_t layers, units;
    bool sync;
    int *params;        /* per unit: its first unsharded parameter buffer (the rest follow), -1 */
    int ag_out;         /* the latest all-gather's output, -1 */
    uint64_t ag_unit;   /* ... of this unit */
    int rs_in;          /* the latest reduce-scatter's input, -1 */
    uint32_t *grad_gid; /* per unit x recipe tensor: the .grad's schedule id */
    uint64_t cap;
};

gckpt_wrap *gckpt_wrap_new(void) { return calloc(1, sizeof(gckpt_wrap)); }

void gckpt_wrap_free(gckpt_wrap *w)
{
    if (!w) return;
    free(w->params);
    free(w->grad_gid);
    free(w);
}

bool gckpt_wrap_active(const gckpt_ctx *c) { return c->set.layout.mode == GCKPT_PAR_FSDP; }

bool gckpt_wrap_begin(gckpt_wrap *w, const gckpt_ctx *c, uint64_t layers, bool sync)
{
    uint64_t units = layers + 2;
    if (units > w->cap) {
        int *np = realloc(w->params, units * sizeof *np);
        if (np) w->params = np;
        uint32_t *ng = realloc(w->grad_gid, units * GCKPT_MAX_TENSORS * sizeof *ng);
        if (ng) w->grad_gid = ng;
        if (!np || !ng) return false;
        w->cap = units;
    }
    w->c = c;
    w->layers = layers;
    w->units = units;
    w->sync = sync;
    for (uint64_t u = 0; u < units; u++) w->params[u] = -1;
    w->ag_out = w->rs_in = -1;
    w->ag_unit = UINT64_MAX;
    return true;
}

static int section_of(const gckpt_wrap *w, uint64_t unit)
{
    return unit == 0 ? GCKPT_SEC_EMBED : unit == w->units - 1 ? GCKPT_SEC_HEAD : GCKPT_SEC_BLOCK;
}

/* The MixedPrecisionPolicy's param and reduce dtype: bf16 under the Trainer's bf16=True. */
static uint8_t wire_dtype(const gckpt_ctx *c) { return c->set.precision == GCKPT_FP32 ? GCKPT_DT_F32 : GCKPT_DT_BF16; }

static int flat(gckpt_sim *s, gckpt_schedule *o, uint8_t comp, uint8_t dt, uint64_t numel)
{
    return gckpt_sim_buffer(s, o, -1, comp, dt, numel);
}

static void collective(gckpt_sim *s, gckpt_schedule *o, uint8_t kind, uint8_t sec, uint8_t dt, uint64_t numel,
                       uint64_t bytes, int src, int dst)
{
    gckpt_event *e = gckpt_schedule_push(o);
    if (!e) return;
    e->kind = GCKPT_EV_COLLECTIVE;
    e->dtype = dt;
    e->numel = numel;
    e->bytes = bytes;
    e->arg.coll = (gckpt_coll_args){kind, sec, gckpt_sim_gid(s, src), gckpt_sim_gid(s, dst)};
}

static void all_gather(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit)
{
    const gckpt_ctx *c = w->c;
    int sec = section_of(w, unit);
    uint64_t part = c->unit_part[sec], n = gckpt_layout_world(&c->set.layout);
    uint8_t dt = wire_dtype(c);
    int in = flat(s, o, GCKPT_C_PARALLEL, dt, part), out = flat(s, o, GCKPT_C_PARALLEL, dt, part * n);
    collective(s, o, GCKPT_COLL_ALL_GATHER, (uint8_t)sec, dt, part, part * n * gckpt_dtype_size(dt), in, out);
    gckpt_sim_release(s, o, in);
    if (w->ag_out >= 0) gckpt_sim_release(s, o, w->ag_out);
    w->ag_out = out;
    w->ag_unit = unit;
}

/* Each parameter's padded unsharded buffer, copied out of the all-gather output. */
static void copy_out(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit)
{
    const gckpt_ctx *c = w->c;
    const gckpt_params *ps = &c->params;
    int sec = section_of(w, unit);
    uint8_t dt = wire_dtype(c);
    w->params[unit] = -1;
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        if (p->section != sec) continue;
        int id = gckpt_sim_buffer(s, o, p->tensor, GCKPT_C_PARALLEL, dt, p->shard.part * p->shard.ways);
        if (w->params[unit] < 0) w->params[unit] = id;
    }
}

static void reshard(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit)
{
    const gckpt_params *ps = &w->c->params;
    int sec = section_of(w, unit), id = w->params[unit];
    if (id < 0) return;
    for (int i = 0; i < ps->n; i++)
        if (ps->p[i].section == sec) gckpt_sim_release(s, o, id++);
    w->params[unit] = -1;
}

void gckpt_wrap_pre_forward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit)
{
    all_gather(w, s, o, unit);
    copy_out(w, s, o, unit);
}

void gckpt_wrap_post_forward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit)
{
    /* the tail: reshard_after_forward False (every unit with fsdp_keep_gathered) */
    if (unit != w->units - 1 && !w->c->set.layout.fsdp_keep_gathered) reshard(w, s, o, unit);
}

void gckpt_wrap_forward_end(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o)
{
    if (w->ag_out >= 0) gckpt_sim_release(s, o, w->ag_out);
    w->ag_out = -1;
    w->ag_unit = UINT64_MAX;
}

void gckpt_wrap_pre_backward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit)
{
    if (w->params[unit] < 0) { /* resharded after its forward: the prefetched output copied out */
        if (w->ag_unit != unit) all_gather(w, s, o, unit);
        copy_out(w, s, o, unit);
        gckpt_sim_release(s, o, w->ag_out);
        w->ag_out = -1;
        w->ag_unit = UINT64_MAX;
    }
    if (unit > 0 && w->params[unit - 1] < 0) all_gather(w, s, o, unit - 1); /* backward prefetch */
}

/* The unit's unsharded .grads, made by the autograd engine in this or an earlier micro-step. */
static void free_unit_grads(gckpt_wrap *w, gckpt_schedule *o, uint64_t unit)
{
    const gckpt_params *ps = &w->c->params;
    int sec = section_of(w, unit);
    for (int i = 0; i < ps->n; i++) {
        const gckpt_param *p = &ps->p[i];
        if (p->section != sec || !p->trainable) continue;
        gckpt_event *e = gckpt_schedule_push(o);
        if (!e) return;
        e->kind = GCKPT_EV_FREE;
        e->comp = GCKPT_C_GRADS;
        e->tensor = p->tensor;
        e->grad = true;
        e->inst = w->grad_gid[unit * GCKPT_MAX_TENSORS + (uint64_t)p->tensor];
        e->bytes = p->grad.bytes;
    }
}

void gckpt_wrap_post_backward(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o, uint64_t unit)
{
    const gckpt_ctx *c = w->c;
    reshard(w, s, o, unit);
    if (!w->sync) return;
    int sec = section_of(w, unit);
    uint64_t part = c->unit_part[sec], n = gckpt_layout_world(&c->set.layout);
    uint8_t dt = wire_dtype(c);
    if (w->rs_in >= 0) gckpt_sim_release(s, o, w->rs_in);
    w->rs_in = flat(s, o, GCKPT_C_PARALLEL, dt, part * n);
    free_unit_grads(w, o, unit);
    /* fp32 reduce dtype: the output is the sharded gradient itself */
    bool cast = dt != GCKPT_DT_F32;
    int out = flat(s, o, cast ? GCKPT_C_PARALLEL : GCKPT_C_GRADS, dt, part);
    collective(s, o, GCKPT_COLL_REDUCE_SCATTER, (uint8_t)sec, dt, part, part * n * gckpt_dtype_size(dt), w->rs_in, out);
    if (cast) {
        flat(s, o, GCKPT_C_GRADS, GCKPT_DT_F32, part);
        gckpt_sim_release(s, o, out);
    }
}

void gckpt_wrap_backward_end(gckpt_wrap *w, gckpt_sim *s, gckpt_schedule *o)
{
    if (w->rs_in >= 0) gckpt_sim_release(s, o, w->rs_in);
    w->rs_in = -1;
}

void gckpt_wrap_grad_made(gckpt_wrap *w, uint64_t unit, int t, uint32_t gid)
{
    if (unit < w->units && t >= 0 && t < GCKPT_MAX_TENSORS) w->grad_gid[unit * GCKPT_MAX_TENSORS + (uint64_t)t] = gid;
}
