/* The schedule: the segments of a step (gckpt/core/step.h) in order, each with the events
 * the simulator (sim.c) emits for it. */
#include "sim.h"

#include "gckpt/core/step_walk.h"

#include <stdlib.h>
#include <string.h>

const char *const gckpt_component_names[GCKPT_NCOMP] = {
    "weights",     "gradients", "optimizer_states", "activations",  "checkpoints",
    "recompute",   "logits_loss", "backward",       "weight_casts", "optimizer_temp",
    "workspace",   "quantized_weights", "quant_stats", "paged_optimizer_states",
    "parallel",
};

const char *const gckpt_event_names[GCKPT_NEVENT] = {
    "ALLOC", "ALLOC_SCRATCH", "FREE",     "TO_CHECKPOINT", "BECOME_GRAD",     "HOST_ALLOC",     "HOST_FREE",
    "D2H",   "H2D",           "FWD",      "RECOMPUTE",     "BWD",             "GRAD_SUM",       "GRAD_CAST",
    "GRAD_ACCUMULATE", "OPT_TEMP_ALLOC", "OPT_STEP", "OPT_TEMP_FREE", "ZERO_GRAD", "COLLECTIVE",
};

const char *const gckpt_coll_names[GCKPT_NCOLL] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"};
const char *const gckpt_coll_group_names[GCKPT_NGROUP] = {"world", "dp_shard", "dp_replicate", "tp", "cp"};

void gckpt_schedule_free(gckpt_schedule *s)
{
    free(s->ev);
    free(s->seg);
    memset(s, 0, sizeof *s);
}

gckpt_event *gckpt_schedule_push(gckpt_schedule *o)
{
    if (o->oom) return NULL;
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 1024;
        gckpt_event *ne = realloc(o->ev, nc * sizeof *ne);
        if (!ne) {
            o->oom = true;
            return NULL;
        }
        o->ev = ne;
        o->cap = nc;
    }
    /* no op, tensor or instance; every operand GCKPT_NOINST */
    static const gckpt_event blank = {
        .op = -1, .tensor = -1, .inst = GCKPT_NOINST,
        .arg.bwd = {{GCKPT_NOINST, GCKPT_NOINST, GCKPT_NOINST, GCKPT_NOINST}, GCKPT_NOINST, GCKPT_NOINST}};
    gckpt_event *e = &o->ev[o->n++];
    *e = blank;
    return e;
}

void gckpt_schedule_open(gckpt_schedule *o, const gckpt_seg *g, uint64_t repeat)
{
    if (o->oom) return;
    if (o->nseg == o->seg_cap) {
        size_t nc = o->seg_cap ? o->seg_cap * 2 : 256;
        gckpt_sched_seg *ns = realloc(o->seg, nc * sizeof *ns);
        if (!ns) {
            o->oom = true;
            return;
        }
        o->seg = ns;
        o->seg_cap = nc;
    }
    o->seg[o->nseg++] = (gckpt_sched_seg){*g, o->n, o->n, repeat};
}

void gckpt_schedule_close(gckpt_schedule *o)
{
    if (!o->oom && o->nseg) o->seg[o->nseg - 1].end = o->n;
}

bool gckpt_schedule_build(const gckpt_ctx *c, gckpt_schedule *out)
{
    memset(out, 0, sizeof *out);
    gckpt_sim *sim = gckpt_sim_new();
    if (!sim) return false;
    gckpt_step st = gckpt_step_of(&c->set, c->model->layers);
    st.model = c->model; /* each layer's block type (gckpt_layer_block at the recipe's sequence) */
    st.attention = (uint8_t)c->set.attention;
    st.seq = c->recipe->seq;
    gckpt_step_iter it;
    gckpt_seg g;
    int micro = -1;
    bool ok = true;
    gckpt_step_begin(&it, &st);
    while (ok && gckpt_step_next(&it, &g)) {
        bool in_micro = g.micro != GCKPT_MICRO_NONE;
        if (in_micro && it.micro != micro) {
            /* a new micro-step: a later one continues the instance numbering */
            ok = gckpt_sim_begin(sim, c, &st, g.micro == GCKPT_MICRO_LATER, g.sync,
                                 micro < 0 ? 0 : gckpt_sim_next_id(sim));
            micro = it.micro;
        }
        gckpt_schedule_open(out, &g, in_micro ? st.micro[it.micro].repeat : 1);
        gckpt_sim_segment(sim, &g, out);
        gckpt_schedule_close(out);
        ok = ok && !out->oom;
    }
    gckpt_sim_free(sim);
    return ok;
}
