/* The step walked once (gckpt/core/step_walk.h): memory, peak, time and collectives of a
 * schedule's events, for every reader of a walk. */
#include "gckpt/core/step_walk.h"

#include <string.h>

void gckpt_step_start(const gckpt_ctx *c, uint32_t every_n, int64_t start[GCKPT_NCOMP])
{
    gckpt_persistent(c, start);
    if (!every_n) start[GCKPT_C_PARALLEL] += (int64_t)c->ddp_used_map;
}

void gckpt_walk_begin(gckpt_walk_state *w, const int64_t start[GCKPT_NCOMP], bool floor)
{
    memset(w, 0, sizeof *w);
    if (start)
        for (int k = 0; k < GCKPT_NCOMP; k++) {
            w->m.cur[k] = start[k];
            w->m.total += start[k];
        }
    memcpy(w->at_peak, w->m.cur, sizeof w->m.cur);
    w->peak = floor ? w->m.total : INT64_MIN;
    w->peak_tensor = -1;
    w->peak_seg = (gckpt_seg){.micro = GCKPT_MICRO_FIRST, .layer = -1};
    w->repeat = 1;
}

/* An event's seconds and FLOPs into the tallies (mult: how often it runs). */
static inline void tally_time(gckpt_walk_state *w, const gckpt_event *e, double mult)
{
    double t = e->seconds * mult;
    w->seconds += t;
    w->flops += (e->kind == GCKPT_EV_RECOMPUTE ? 0 : e->flops) * mult;
    switch (e->kind) {
    case GCKPT_EV_FWD: w->fwd_s += t; break;
    case GCKPT_EV_BWD: w->bwd_s += t; break;
    case GCKPT_EV_RECOMPUTE: w->recompute_s += t; break;
    case GCKPT_EV_D2H: case GCKPT_EV_H2D: w->copy_s += t; break;
    case GCKPT_EV_OPT_STEP: w->opt_s += t; break;
    default: break;
    }
}

/* A collective's bytes into the step's volumes (gckpt_parallel_comm times them). */
static inline void tally_coll(gckpt_walk_state *w, const gckpt_event *e, bool backward, double mult)
{
    double b = (double)e->bytes * mult;
    w->coll_seen = true;
    if (e->arg.coll.kind != GCKPT_COLL_ALL_GATHER) w->coll_reduce += b;
    else if (backward) w->coll_gather_bwd += b;
    else w->coll_gather_fwd += b;
}

/* The loop, specialised with and without a callback (the segment summaries of a sweep's
 * profiles run it without, and often). */
static inline __attribute__((always_inline)) void walk_events(gckpt_walk_state *w, const gckpt_seg *seg, double mult,
                                                              const gckpt_event *ev, size_t n,
                                                              gckpt_walk_event_fn on_event, void *user,
                                                              const bool call)
{
    const bool backward = gckpt_seg_phase(seg) == GCKPT_PH_BACKWARD;
    for (size_t i = 0; i < n; i++) {
        const gckpt_event *e = &ev[i];
        int up = gckpt_mem_apply(&w->m, e);
        if ((up & GCKPT_MEM_DEVICE_UP) && w->m.total > w->peak) {
            w->peak = w->m.total;
            memcpy(w->at_peak, w->m.cur, sizeof w->m.cur);
            w->has_peak = true;
            w->peak_tensor = e->tensor;
            w->peak_grad = e->grad;
            w->peak_seg = *seg;
        }
        if ((up & GCKPT_MEM_HOST_UP) && w->m.host > w->host_peak) w->host_peak = w->m.host;
        tally_time(w, e, mult);
        if (e->kind == GCKPT_EV_COLLECTIVE) tally_coll(w, e, backward, mult);
        if (call) on_event(user, w, e);
    }
}

void gckpt_walk_segment(gckpt_walk_state *w, const gckpt_seg *seg, uint64_t repeat, const gckpt_event *ev, size_t n,
                        gckpt_walk_event_fn on_event, void *user)
{
    if (!w->after_forward_seen && gckpt_seg_starts_backward(seg)) {
        w->after_forward = w->m.total;
        w->after_forward_seen = true;
    }
    w->seg = seg;
    w->repeat = repeat;
    double mult = (double)repeat;
    if (on_event) walk_events(w, seg, mult, ev, n, on_event, user, true);
    else walk_events(w, seg, mult, ev, n, NULL, NULL, false);
}

void gckpt_walk_schedule(gckpt_walk_state *w, const gckpt_schedule *sc, gckpt_walk_event_fn on_event, void *user)
{
    for (size_t si = 0; si < sc->nseg; si++) {
        const gckpt_sched_seg *g = &sc->seg[si];
        size_t n = g->end - g->begin;
        gckpt_walk_segment(w, &g->seg, g->repeat, n ? sc->ev + g->begin : NULL, n, on_event, user);
    }
}
